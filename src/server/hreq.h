/* hreq.h - an HTTP request as a route module sees it: who called, what it
 * sent, and how to answer it or hand it to the loop thread.
 *
 * The request (hreq) and the loop's command (cmd) are opaque here; their
 * layout is server-int.h's, which only the daemon's own files include
 * (http.c, daemon.c and the modules of the same room).  The cluster code
 * (nodes*.c, coord.c: docs/internals/cluster.md "Rooms") reaches a
 * request only through these functions.
 *
 * Threads: a request belongs to the MHD thread that runs its handler
 * until it is answered or parked; the loop thread answers a parked one
 * (gp_http_answer) once.  The readers below may be called by whoever
 * holds the request.
 */
#ifndef GP_SERVER_HREQ_H
#define GP_SERVER_HREQ_H

#include <stddef.h>

typedef struct hreq hreq;
typedef struct cmd cmd;
struct gp_daemon;

/* The daemon that serves r. */
struct gp_daemon *gp_http_daemon(const hreq *r);
/* The caller as the audit log names it ("" when nobody is named). */
const char *gp_http_who(const hreq *r);
/* r's body (capped at server.max_body_bytes; never NULL: "" when empty)
 * and its length in *ret_len.  Not NUL-terminated. */
const char *gp_http_body(const hreq *r, size_t *ret_len);
/* The value of r's request header name, or NULL; valid while r is. */
const char *gp_http_header(const hreq *r, const char *name);

/* Send an answer now from an HTTP handler as JSON, with a Retry-After
 * header when retry_after > 0; takes body (malloc'd; NULL answers 503).
 * MHD's result. */
int gp_http_send(hreq *r, int status, char *body, int retry_after);
/* JSON error body {"error":{"code","message"}} (malloc'd; NULL when out
 * of memory). */
char *gp_http_error_body(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Suspend r until gp_http_answer / gp_http_wake (its handler returns
 * MHD_YES). */
void gp_http_park(hreq *r);
/* Answer a parked request (resumes the connection); takes body.  Any
 * thread, once per park. */
void gp_http_answer(hreq *r, int status, char *body, int retry_after);
/* Hand c (taken) to the loop thread for r, which is answered when c is
 * done.  MHD_YES. */
int gp_http_post(hreq *r, cmd *c);

#endif
