/* http-int.h - what the client's two HTTP transports share (internal to
 * src/cli/http.c and src/cli/curl.c).
 *
 * http.c does direct http:// itself: a socket, the request written by
 * hand, the answer framed by base/h1.c.  curl.c does https://, and http://
 * when a proxy variable applies, through libcurl, which it loads with
 * dlopen on first use, so the client binary never links libcurl and its
 * TLS stack.  Both deliver the answer to one gp_cli_xfer: its status first
 * (gp_cli_xfer_status), then its body in pieces (gp_cli_xfer_body), which
 * applies the caps and the streaming rules, so the two transports cannot
 * differ in what they keep or print.
 */
#ifndef GP_CLI_HTTP_INT_H
#define GP_CLI_HTTP_INT_H

#include "cli/cli-int.h"

#define GP_CLI_ERRBODY_MAX (64 * 1024) /* non-2xx body kept from a stream */
#define GP_CLI_IDEM_KEY_MAX 36          /* "gpc-" + 32 hex digits: the Idempotency-Key of a write */

/* One exchange in progress.  Owned by the gp_cli_http_* call that made it;
 * never shared between threads. */
typedef struct gp_cli_xfer {
        const gp_cli_conn *c;
        const char *method;        /* "GET", "POST" */
        const char *path;          /* starts with '/'; appended to c->api */
        const char *payload;       /* JSON request body, or NULL */
        size_t payload_len;
        long timeout_s;            /* the whole exchange; 0 = none (a stream) */
        FILE *out;                 /* stream: 2xx body bytes go here; NULL: keep in body */
        int64_t *io_bytes;         /* stream: increased by the bytes written to out */
        long status;               /* HTTP status, 0 until known */
        bool copy;                 /* the body goes to out (a stream with a 2xx status) */
        long retry_after;          /* Retry-After in seconds, -1 if absent */
        gp_buf body;               /* the answer (capped), or a stream's error body */
        gp_buf *err;               /* messages for the user */
        const char *idem_key;      /* Idempotency-Key header (a write), or NULL */
        bool sent;                 /* the request may have reached the server (set on failure too) */
} gp_cli_xfer;

/* The answer's status is known.  Call once, before any body byte. */
void gp_cli_xfer_status(gp_cli_xfer *x, long status);
/* A Retry-After header's value (n bytes, not NUL-terminated): its first run
 * of digits, 0..1 year, else ignored. */
void gp_cli_xfer_retry_after(gp_cli_xfer *x, const char *v, size_t n);
/* n more body bytes.  0; -E2BIG when an in-memory answer passes
 * GP_CLI_BODY_MAX, -EPIPE when out cannot be written (message in x->err
 * for both); -ENOMEM.  The transfer must stop on any error. */
int gp_cli_xfer_body(gp_cli_xfer *x, const char *p, size_t n);

/* curl.c: the exchange x over libcurl to url (x->c->api + x->path).
 * Returns 0 when an answer came (status and body delivered to x), else
 * the codes of gp_cli_http_json, plus -ENOPKG when libcurl cannot be
 * loaded (message in x->err).  Thread-safe: libcurl is loaded and
 * initialised once (pthread_once), each call has its own easy handle. */
int gp_cli_curl_exchange(gp_cli_xfer *x, const char *url);

#endif
