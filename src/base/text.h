/* text.h - the one rule for text gpupool accepts from outside (task names
 * and models, tenant names and groups, config strings, CLI text options):
 * valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF)
 * of at most a given length, with no character that can hide or fake a
 * line or reorder what a person reads:
 *   - no C0 control (U+0000..U+001F, tab and newline included) and no DEL;
 *   - no C1 control (U+0080..U+009F, NEL U+0085 included);
 *   - no line or paragraph separator (U+2028, U+2029);
 *   - no bidirectional embedding, override or isolate (U+202A..U+202E,
 *     U+2066..U+2069).
 * Pure; thread-safe; allocates nothing. */
#ifndef GP_BASE_TEXT_H
#define GP_BASE_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* 0 if s[0..len) is acceptable text of at most max bytes; else -E2BIG
 * (longer than max) or -EINVAL.  On failure, when ret_why is not NULL, it
 * gets a constant phrase for messages, e.g. "contains control characters
 * (...)" or "is not valid UTF-8"; s is never echoed. */
int gp_text_check(const char *s, size_t len, size_t max, const char **ret_why);

/* gp_text_check(...) == 0. */
bool gp_text_valid(const char *s, size_t len, size_t max);

#endif
