/* h1.h - HTTP/1.1 message framing (RFC 9112) for the gateway's own
 * upstream client and its /v1 front, and for the command-line client
 * (src/cli/http.c): request and response heads, and chunked bodies.  Pure: no I/O, no allocation; parsed names and values
 * point into the caller's bytes.
 *
 * Heads may end their lines in CRLF or a bare LF.  A head is refused, never
 * guessed at: obsolete line folding, a header name that is not a token,
 * control bytes in a value, a Content-Length that is not digits or that
 * disagrees with another, Content-Length with Transfer-Encoding, or a
 * Transfer-Encoding whose last coding is not chunked (a request) are all
 * -EINVAL. */
#ifndef GP_BASE_H1_H
#define GP_BASE_H1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GP_H1_MAX_HEADERS 64
#define GP_H1_MAX_CONTENT_LENGTH ((int64_t)1 << 40)

typedef struct gp_h1_header {
        const char *name;          /* as sent (compare with strncasecmp) */
        size_t name_len;
        const char *value;         /* leading and trailing blanks removed */
        size_t value_len;
} gp_h1_header;

typedef struct gp_h1_response {
        int minor;                 /* HTTP/1.<minor>: 0 or 1 */
        int status;                /* 100..599 */
        int64_t content_length;    /* -1 when absent */
        bool chunked;              /* Transfer-Encoding ends in chunked */
        bool keep_alive;           /* the connection may carry another exchange after this one */
        size_t head_len;           /* bytes of the head, its blank line included */
        size_t nheaders;
        gp_h1_header headers[GP_H1_MAX_HEADERS];
} gp_h1_response;

typedef struct gp_h1_request {
        char method[16];           /* NUL-terminated, 1..15 token bytes */
        const char *target;        /* origin form: starts with '/' */
        size_t target_len;
        int minor;                 /* HTTP/1.<minor>: 0 or 1 */
        int64_t content_length;    /* -1 when absent */
        bool chunked;              /* Transfer-Encoding: chunked */
        bool keep_alive;           /* 1.1 without "Connection: close", or 1.0 with "keep-alive" */
        bool expect_continue;      /* Expect: 100-continue */
        size_t head_len;           /* bytes of the head (leading blank lines too), its blank line included */
        size_t nheaders;
        gp_h1_header headers[GP_H1_MAX_HEADERS];
} gp_h1_request;

/* Parse a response head from p[0..n).  0: complete, r filled.  -EAGAIN:
 * its end has not arrived (and n < max).  -E2BIG: no end within max bytes,
 * or over GP_H1_MAX_HEADERS headers.  -EINVAL: malformed (see above; a
 * status line is "HTTP/1.x NNN reason"). */
int gp_h1_parse_response(const char *p, size_t n, size_t max, gp_h1_response *r);

/* Parse a request head from p[0..n): the same codes.  Empty lines before
 * the request line are skipped (RFC 9112 2.2).  -EINVAL also for a target
 * that is not origin form, and a version other than HTTP/1.0 and 1.1. */
int gp_h1_parse_request(const char *p, size_t n, size_t max, gp_h1_request *r);

/* The first header named name (case-insensitive), NULL when none. */
const gp_h1_header *gp_h1_find(const gp_h1_header *h, size_t n, const char *name);

/* Is this header hop-by-hop (RFC 9110 7.6.1), or one a proxy sets itself
 * (Content-Length, Transfer-Encoding, Date, Keep-Alive, ...)?  Such are
 * not copied from one side to the other. */
bool gp_h1_hop_by_hop(const char *name, size_t len);

/* A chunked body decoder; zero it to start. */
typedef struct gp_h1_chunked {
        int state;
        uint64_t left;             /* data bytes of the current chunk still to pass on */
        size_t line;               /* bytes of the current size or trailer line so far */
} gp_h1_chunked;

/* Decode p[0..n) of a chunked body.  The data goes to out(ud, p, n), which
 * returns 0 or a negative errno (decoding stops and returns it).  *used is
 * the bytes consumed.  1: the last chunk and its trailers have ended (what
 * follows *used belongs to the next message).  0: give it more.  -EINVAL:
 * malformed (a size that is not hex or over GP_H1_MAX_CONTENT_LENGTH, a
 * size, extension or trailer line over 4 KiB, no CRLF after a chunk's
 * data). */
int gp_h1_chunked_feed(gp_h1_chunked *c, const char *p, size_t n, size_t *used,
                       int (*out)(void *ud, const char *p, size_t n), void *ud);

#endif
