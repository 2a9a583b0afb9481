/* buf.h - a growing byte buffer with a hard size cap.
 *
 * Invariants: data is always NUL-terminated when non-NULL (len does not count
 * the NUL); len <= cap_limit.  A gp_buf is embedded by value: gp_buf_init /
 * gp_buf_done.  Not thread-safe; one owner at a time.
 */
#ifndef GP_BASE_BUF_H
#define GP_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gp_buf {
        char *data;       /* heap bytes, NUL-terminated, or NULL when empty */
        size_t len;       /* bytes used, excluding the NUL */
        size_t alloc;     /* bytes allocated */
        size_t limit;     /* maximum len; appends beyond it fail with -E2BIG */
} gp_buf;

/* Initialise with a size limit (0 means 1 GiB). */
void gp_buf_init(gp_buf *b, size_t limit);
/* Free the bytes; the buffer may be reused after gp_buf_init. Takes NULL. */
void gp_buf_done(gp_buf *b);
/* Drop the content, keep the allocation. */
void gp_buf_reset(gp_buf *b);
/* Append bytes. 0, -ENOMEM, or -E2BIG (nothing appended). */
int gp_buf_append(gp_buf *b, const void *p, size_t n);
int gp_buf_puts(gp_buf *b, const char *s);
/* printf-style append. 0, -ENOMEM, -E2BIG, -EINVAL (nothing appended). */
int gp_buf_printf(gp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gp_buf_vprintf(gp_buf *b, const char *fmt, va_list ap);
/* Append s as a JSON string literal (quotes included), escaping '"', '\\'
 * and control characters; s must be valid UTF-8 (passed through).
 * 0, -ENOMEM, -E2BIG. */
int gp_buf_json_str(gp_buf *b, const char *s);

/* Append ,"key":"v" (v escaped as by gp_buf_json_str) / ,"key":"<RFC 3339
 * UTC>" or ,"key":null when ms <= 0.  key is written as given (callers
 * pass literals).  0, -ENOMEM, -E2BIG. */
int gp_buf_json_field_str(gp_buf *b, const char *key, const char *v);
int gp_buf_json_field_time(gp_buf *b, const char *key, int64_t ms);

/* Hand the bytes to the caller (who frees them); the buffer becomes empty.
 * Returns "" duplicated when empty; NULL only on allocation failure. */
char *gp_buf_steal(gp_buf *b);

#endif
