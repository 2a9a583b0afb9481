/* upclient.h - the gateway's HTTP/1.1 client for its upstreams, run by one
 * event loop on that loop's epoll set: no thread, no hand-off, no poll()
 * per request.
 *
 * Each loop has one gp_uc.  Connections are kept alive in a pool per
 * destination (host:port) and registered in the epoll set once, edge
 * triggered, for their whole life: a request on a kept connection costs
 * one send and one or two receives, and no epoll_ctl.  An idle connection
 * the upstream closes is noticed by its event and dropped; a request sent
 * on a kept connection that turns out to be closed before any byte of the
 * answer is sent again once on a new connection (what browsers and nginx
 * do).  At most max_conns connections are open; exchanges beyond wait for
 * one.
 *
 * Callbacks run on the loop thread from gp_uc_event, gp_uc_tick and
 * gp_uc_dispatch, never from gp_uc_start or gp_uc_cancel.  A callback must
 * not cancel its own exchange (return < 0 instead); it may start others.
 */
#ifndef GP_GATEWAY_UPCLIENT_H
#define GP_GATEWAY_UPCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/h1.h"

/* Results given to done(); 0 is a complete answer. */
enum {
        GP_UC_OK = 0,
        GP_UC_ECONNECT = -1,  /* could not connect (refused, unreachable, connect timeout) */
        GP_UC_ETIMEDOUT = -2, /* silent for idle_timeout_ms, or not whole within total_timeout_ms */
        GP_UC_ECLOSED = -3,   /* connection lost before the answer ended */
        GP_UC_EPROTO = -4,    /* not an HTTP/1.x answer we can frame */
        GP_UC_EABORTED = -5,  /* a callback returned < 0 */
        GP_UC_ERESOLVE = -6,  /* the host name does not resolve */
        GP_UC_ENOMEM = -7,
};

/* The tag in the low bits of an epoll event's data of an upstream
 * connection (the rest is its pointer). */
#define GP_UC_EV_TAG ((uint64_t)2)
#define GP_UC_EV_MASK ((uint64_t)7)

typedef struct gp_uc gp_uc;
typedef struct gp_uc_xfer gp_uc_xfer;

typedef struct gp_uc_ops {
        /* The answer's head: status and its headers (hop-by-hop ones
         * included; see gp_h1_hop_by_hop).  0 go on, < 0 abandon. */
        int (*head)(void *ud, int status, const gp_h1_header *h, size_t n);
        /* Body bytes (chunked framing removed).  0 go on, 1 pause (call
         * gp_uc_resume), < 0 abandon. */
        int (*data)(void *ud, const char *p, size_t n);
        /* The exchange ended with a GP_UC_* result; the exchange is gone. */
        void (*done)(void *ud, int result);
} gp_uc_ops;

typedef struct gp_uc_req {
        const char *method;        /* "POST" */
        const char *path;          /* appended to the URL's own path */
        const char *content_type;  /* NULL = none */
        const char *body;          /* valid until done (or cancel) */
        size_t body_len;
        int connect_timeout_ms;
        int idle_timeout_ms;       /* the upstream silent this long (paused exchanges excepted) */
        int total_timeout_ms;      /* the whole exchange */
} gp_uc_req;

/* A client on epfd with at most max_conns connections (>= 1). */
gp_uc *gp_uc_new(int epfd, int max_conns);
/* Close every connection; exchanges still running end with no callback. */
void gp_uc_free(gp_uc *c);

/* Start an exchange with the upstream at url (base/url.h's form).  0 and
 * *ret (valid until done or cancel), or -EINVAL (bad URL or request) /
 * -ENOMEM; every other failure comes through done. */
int gp_uc_start(gp_uc *c, const char *url, const gp_uc_req *r, const gp_uc_ops *ops, void *ud, gp_uc_xfer **ret);
/* Abandon a running exchange: no callback after this. */
void gp_uc_cancel(gp_uc *c, gp_uc_xfer *x);
/* Go on reading an exchange whose data callback paused it. */
void gp_uc_resume(gp_uc *c, gp_uc_xfer *x);

/* An epoll event of one of its connections (data.u64 & GP_UC_EV_MASK ==
 * GP_UC_EV_TAG). */
void gp_uc_event(gp_uc *c, uint64_t data, uint32_t events);
/* Timeouts and the closing of connections idle over 60 s; call every 100
 * ms or so. */
void gp_uc_tick(gp_uc *c, int64_t now_ms);
/* Deliver the results of exchanges that failed at their start.  Returns
 * whether any are still due (then do not sleep). */
void gp_uc_dispatch(gp_uc *c);
bool gp_uc_due(const gp_uc *c);

const char *gp_uc_strerror(int result);

#endif
