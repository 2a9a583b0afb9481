/* util.h - time, strict number parsing and small string helpers.
 * All functions are thread-safe and allocate nothing unless they say so. */
#ifndef GP_BASE_UTIL_H
#define GP_BASE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Wall-clock time in milliseconds since the epoch. */
/* The version of gpupool (CLI, server and agent: one binary set). */
#ifndef GP_VERSION
#define GP_VERSION "0.1.0"
#endif

int64_t gp_now_ms(void);
/* Monotonic time in milliseconds (for deadlines inside one process). */
int64_t gp_mono_ms(void);
/* Format ms-since-epoch as RFC 3339 UTC with milliseconds
 * ("2026-11-22T11:40:00.123Z").  Writes "" for ms <= 0. size >= 32. */
void gp_time_format(int64_t ms, char *out, size_t size);
/* Parse RFC 3339 ("2026-11-22T11:40:00Z", fractional seconds and +hh:mm
 * offsets allowed). 0 or -EINVAL. */
int gp_time_parse(const char *s, int64_t *ret_ms);

/* Strict decimal parse of the whole string into [min, max]: no sign games,
 * no trailing junk, no empty string.  0, -EINVAL or -ERANGE. */
int gp_parse_i64(const char *s, int64_t min, int64_t max, int64_t *ret);

/* Copy at most size-1 bytes and NUL-terminate; returns strlen(src) so the
 * caller can detect truncation (>= size). */
size_t gp_strlcpy(char *dst, const char *src, size_t size);

/* true if s[0..n) is an id of gpupool's (tenant ids): 1..n bytes of
 * letters, digits, '-', '_' and '.'. */
bool gp_id_ok(const char *s, size_t n);

/* gp_text_valid(s, len, len) (base/text.h): the one text rule, under its
 * older name for the callers that have it. */
bool gp_str_is_clean(const char *s, size_t len);

/* Start fn(arg) on a detached thread with a stack of `stack` bytes (the
 * TLS pumps and relays: one thread a connection).  0 or -errno (nothing
 * started). */
int gp_thread_detached(void *(*fn)(void *), void *arg, size_t stack);

#endif
