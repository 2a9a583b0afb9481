/* upclient.c - the gateway's HTTP/1.1 upstream client (see upclient.h).
 *
 * Invariants:
 *   - a connection is in the epoll set (edge triggered, in and out) from
 *     its socket() to its close(), and nowhere else;
 *   - a connection is busy (conn->x set, and x->conn it) or idle (in its
 *     pool's idle list), never both; a closed one waits in the graveyard
 *     with fd -1 until gp_uc_dispatch, because the epoll batch being
 *     worked through may still name it;
 *   - an exchange is in the all list from start to its end, and also in
 *     the wait list (no connection yet: phase X_WAIT) or the pending list
 *     (ended at its start, done not yet called), or holds a connection;
 *   - nconns counts connections not closed: nconns <= max_conns.
 */
#include "gateway/upclient.h"

#include "base/ownport.h"
#include "base/url.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX (64 * 1024)        /* an answer's head */
#define RBUF_START (16 * 1024)
#define IDLE_KEEP_MS 60000          /* a kept connection unused this long is closed */
#define RESOLVE_KEEP_MS 30000       /* a host's address is looked up again after this */
#define REQ_HEAD_MAX 1024

enum { X_WAIT, X_CONNECT, X_SEND, X_HEAD, X_BODY };

typedef struct uc_conn uc_conn;

typedef struct uc_pool {
        struct uc_pool *next;
        char hostport[256];        /* the URL's authority: the Host header and the pool's key */
        char host[256];            /* without IPv6 brackets */
        char port[8];
        struct sockaddr_storage addr;
        socklen_t alen;            /* 0 = look it up */
        int64_t resolved_ms;
        uc_conn *idle;             /* kept connections, most recently used first */
} uc_pool;

struct uc_conn {
        int fd;                    /* -1 once closed (in the graveyard) */
        int own_port;              /* its local port, noted as this process's (a loopback upstream:
                                      the server's relay takes only those; base/ownport.h), 0: none */
        uc_pool *pool;
        gp_uc_xfer *x;             /* NULL while idle */
        bool used;                 /* carried an answer before: may have been closed by the upstream */
        bool hup;                  /* an event said the upstream closed: read to the end, since no
                                    * edge follows bytes and a close that came together */
        int64_t idle_since_ms;
        uc_conn *prev, *next;      /* the pool's idle list, or the graveyard (next) */
        char *rbuf;
        size_t rlen, rcap;
};

struct gp_uc_xfer {
        gp_uc *c;
        uc_pool *pool;
        uc_conn *conn;
        const gp_uc_ops *ops;
        void *ud;
        int phase;
        const char *body;
        size_t body_len, head_len, sent;
        int64_t start_ms, connect_ms, last_io_ms;
        int connect_to, idle_to, total_to;
        /* the answer's framing */
        int64_t left;              /* body bytes still to come; -1 = until the connection closes */
        bool chunked, keep, paused, got_bytes, resent, aborted;
        bool pending;              /* ended at its start: in the pending list */
        gp_h1_chunked ch;
        int result;                /* while pending */
        gp_uc_xfer *prev, *next;   /* the all list */
        gp_uc_xfer *wnext;         /* the wait list or the pending list */
        char head[REQ_HEAD_MAX];
};

struct gp_uc {
        int epfd;
        int max_conns, nconns;
        uc_pool *pools;
        gp_uc_xfer *all;
        gp_uc_xfer *wait_head, *wait_tail;
        gp_uc_xfer *pending;
        uc_conn *grave;
};

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *gp_uc_strerror(int result) {
        switch (result) {
        case GP_UC_OK:
                return "ok";
        case GP_UC_ECONNECT:
                return "could not connect";
        case GP_UC_ETIMEDOUT:
                return "timed out";
        case GP_UC_ECLOSED:
                return "connection closed before the answer ended";
        case GP_UC_EPROTO:
                return "not an HTTP/1.1 answer";
        case GP_UC_EABORTED:
                return "abandoned";
        case GP_UC_ERESOLVE:
                return "host name not found";
        case GP_UC_ENOMEM:
                return "out of memory";
        default:
                return "failed";
        }
}

/* ------------------------------------------------------------------ */
/* URLs                                                                */


/* ------------------------------------------------------------------ */
/* lists                                                               */

static void all_del(gp_uc *c, gp_uc_xfer *x) {
        if (x->prev)
                x->prev->next = x->next;
        else if (c->all == x)
                c->all = x->next;
        if (x->next)
                x->next->prev = x->prev;
        x->prev = x->next = NULL;
}

static void wait_del(gp_uc *c, gp_uc_xfer *x) {
        gp_uc_xfer **pp = &c->wait_head, *last = NULL;
        while (*pp && *pp != x) {
                last = *pp;
                pp = &(*pp)->wnext;
        }
        if (!*pp)
                return;
        *pp = x->wnext;
        if (c->wait_tail == x)
                c->wait_tail = last;
        x->wnext = NULL;
}

static void idle_del(uc_conn *k) {
        if (k->prev)
                k->prev->next = k->next;
        else if (k->pool->idle == k)
                k->pool->idle = k->next;
        if (k->next)
                k->next->prev = k->prev;
        k->prev = k->next = NULL;
}

/* ------------------------------------------------------------------ */
/* connections                                                         */

static void serve_waiters(gp_uc *c);

/* Close k (busy or idle); its memory waits in the graveyard. */
static void conn_close(gp_uc *c, uc_conn *k) {
        if (!k->x)
                idle_del(k);
        else
                k->x->conn = NULL;
        k->x = NULL;
        gp_ownport_forget(k->own_port);
        k->own_port = 0;
        close(k->fd); /* leaves the epoll set with it */
        k->fd = -1;
        free(k->rbuf);
        k->rbuf = NULL;
        k->next = c->grave;
        c->grave = k;
        c->nconns--;
}

static uc_pool *pool_get(gp_uc *c, const gp_http_url *u) {
        for (uc_pool *p = c->pools; p; p = p->next)
                if (strlen(p->hostport) == u->auth_len && !memcmp(p->hostport, u->auth, u->auth_len))
                        return p;
        uc_pool *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        memcpy(p->hostport, u->auth, u->auth_len);
        memcpy(p->host, u->host, u->host_len);
        memcpy(p->port, u->port, sizeof(p->port));
        p->next = c->pools;
        c->pools = p;
        return p;
}

/* A new connection to x's pool, connecting.  0 or a GP_UC_* error. */
static int conn_open(gp_uc *c, gp_uc_xfer *x) {
        uc_pool *p = x->pool;
        int64_t now = now_ms();
        if (!p->alen || now - p->resolved_ms >= RESOLVE_KEEP_MS) {
                struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                         .ai_flags = AI_NUMERICSERV}, *res = NULL;
                if (getaddrinfo(p->host, p->port, &hints, &res) != 0 || !res) {
                        p->alen = 0;
                        return GP_UC_ERESOLVE;
                }
                memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
                p->alen = res->ai_addrlen;
                p->resolved_ms = now;
                freeaddrinfo(res);
        }
        uc_conn *k = calloc(1, sizeof(*k));
        if (!k)
                return GP_UC_ENOMEM;
        k->fd = socket(p->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (k->fd < 0) {
                free(k);
                return GP_UC_ECONNECT;
        }
        int one = 1;
        setsockopt(k->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        int own = gp_ownport_bind(k->fd, (struct sockaddr *)&p->addr);
        if (own < 0) {
                close(k->fd);
                free(k);
                return GP_UC_ECONNECT;
        }
        k->own_port = own;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                 .data.u64 = (uint64_t)(uintptr_t)k | GP_UC_EV_TAG};
        if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, k->fd, &ev) < 0) {
                gp_ownport_forget(k->own_port);
                close(k->fd);
                free(k);
                return GP_UC_ECONNECT;
        }
        if (connect(k->fd, (struct sockaddr *)&p->addr, p->alen) < 0 && errno != EINPROGRESS) {
                gp_ownport_forget(k->own_port);
                close(k->fd);
                free(k);
                p->alen = 0; /* look it up again next time */
                return GP_UC_ECONNECT;
        }
        k->pool = p;
        k->x = x;
        x->conn = k;
        x->phase = X_CONNECT;
        x->connect_ms = now;
        c->nconns++;
        return 0;
}

/* ------------------------------------------------------------------ */
/* exchanges                                                           */

static void xfer_free(gp_uc *c, gp_uc_xfer *x) {
        all_del(c, x);
        free(x);
}

/* End x with result: its connection is kept (a whole answer on a
 * keep-alive connection) or closed, then done is called. */
static void xfer_end(gp_uc *c, gp_uc_xfer *x, int result) {
        uc_conn *k = x->conn;
        if (k) {
                if (result == GP_UC_OK && x->keep && !k->hup) {
                        k->x = NULL;
                        x->conn = NULL;
                        k->used = true;
                        k->rlen = 0;
                        k->idle_since_ms = now_ms();
                        k->prev = NULL;
                        k->next = k->pool->idle;
                        if (k->next)
                                k->next->prev = k;
                        k->pool->idle = k;
                } else {
                        conn_close(c, k);
                }
        }
        wait_del(c, x);
        const gp_uc_ops *ops = x->ops;
        void *ud = x->ud;
        xfer_free(c, x);
        serve_waiters(c);
        ops->done(ud, result);
}

/* End x later, from gp_uc_dispatch (it failed where no callback may run). */
static void xfer_defer(gp_uc *c, gp_uc_xfer *x, int result) {
        if (x->conn)
                conn_close(c, x->conn);
        x->result = result;
        x->pending = true;
        x->phase = X_WAIT;
        x->wnext = c->pending;
        c->pending = x;
}

static void try_send(gp_uc *c, gp_uc_xfer *x, bool deferred);

/* Give x a connection: a kept one of its pool, a new one, or a place in
 * the wait list.  Failures end x later (deferred) or now. */
static void acquire(gp_uc *c, gp_uc_xfer *x, bool deferred) {
        uc_pool *p = x->pool;
        uc_conn *k = p->idle;
        if (k && !x->resent) {
                idle_del(k);
                k->x = x;
                x->conn = k;
                x->phase = X_SEND;
                try_send(c, x, deferred);
                return;
        }
        if (c->nconns >= c->max_conns) {
                /* make room: close a kept connection of any pool */
                for (uc_pool *q = c->pools; q && c->nconns >= c->max_conns; q = q->next)
                        if (q->idle)
                                conn_close(c, q->idle);
        }
        if (c->nconns >= c->max_conns) {
                x->phase = X_WAIT;
                x->wnext = NULL;
                if (c->wait_tail)
                        c->wait_tail->wnext = x;
                else
                        c->wait_head = x;
                c->wait_tail = x;
                return;
        }
        int rc = conn_open(c, x);
        if (rc < 0) {
                if (deferred)
                        xfer_defer(c, x, rc);
                else
                        xfer_end(c, x, rc);
        }
        /* connecting: the connection's first out event sends */
}

/* x's kept connection turned out closed before any byte of the answer:
 * send it again once on a new connection. */
static bool resend(gp_uc *c, gp_uc_xfer *x, bool deferred) {
        if (x->resent || !x->conn || !x->conn->used || x->got_bytes)
                return false;
        conn_close(c, x->conn);
        x->resent = true;
        x->sent = 0;
        acquire(c, x, deferred);
        return true;
}

static void fail(gp_uc *c, gp_uc_xfer *x, int result, bool deferred) {
        if (deferred)
                xfer_defer(c, x, result);
        else
                xfer_end(c, x, result);
}

static void try_send(gp_uc *c, gp_uc_xfer *x, bool deferred) {
        uc_conn *k = x->conn;
        size_t total = x->head_len + x->body_len;
        while (x->sent < total) {
                struct iovec iov[2];
                int n = 0;
                if (x->sent < x->head_len) {
                        iov[n].iov_base = x->head + x->sent;
                        iov[n++].iov_len = x->head_len - x->sent;
                }
                size_t boff = x->sent > x->head_len ? x->sent - x->head_len : 0;
                if (x->body_len > boff) {
                        iov[n].iov_base = (void *)(x->body + boff);
                        iov[n++].iov_len = x->body_len - boff;
                }
                struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
                ssize_t w = sendmsg(k->fd, &mh, MSG_NOSIGNAL);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return; /* the next out event goes on */
                        if (!resend(c, x, deferred))
                                fail(c, x, x->conn && x->conn->used ? GP_UC_ECLOSED : GP_UC_ECONNECT, deferred);
                        return;
                }
                x->sent += (size_t)w;
        }
        x->phase = X_HEAD;
        x->last_io_ms = now_ms();
}

/* The request head "METHOD PREFIXPATH HTTP/1.1", Host, Content-Type when
 * given, Content-Length, written piece by piece into h[0..cap) (printf was
 * the largest user-space cost of starting an exchange).  Its length, or 0
 * when it does not fit. */
static size_t put_head(char *h, size_t cap, const gp_uc_req *r, const gp_http_url *u) {
        size_t n = 0;
#define PUT(p, len)                                                                                                    \
        do {                                                                                                           \
                size_t l_ = (len);                                                                                     \
                if (l_ >= cap - n)                                                                                     \
                        return 0;                                                                                      \
                memcpy(h + n, (p), l_);                                                                                \
                n += l_;                                                                                               \
        } while (0)
#define PUTS(s) PUT((s), strlen(s))
        char num[24];
        size_t k = sizeof(num);
        size_t v = r->body_len;
        do {
                num[--k] = (char)('0' + v % 10);
                v /= 10;
        } while (v);
        PUTS(r->method);
        PUT(" ", 1);
        PUTS(u->path);
        PUTS(r->path);
        PUT(" HTTP/1.1\r\nHost: ", 17);
        PUT(u->auth, u->auth_len);
        PUT("\r\n", 2);
        if (r->content_type) {
                PUT("Content-Type: ", 14);
                PUTS(r->content_type);
                PUT("\r\n", 2);
        }
        PUT("Content-Length: ", 16);
        PUT(num + k, sizeof(num) - k);
        PUT("\r\n\r\n", 4);
#undef PUTS
#undef PUT
        h[n] = '\0';
        return n;
}

int gp_uc_start(gp_uc *c, const char *url, const gp_uc_req *r, const gp_uc_ops *ops, void *ud, gp_uc_xfer **ret) {
        gp_http_url u;
        if (gp_http_url_parse(url, &u) < 0 || !r->method || !r->path)
                return -EINVAL;
        gp_uc_xfer *x = calloc(1, sizeof(*x));
        if (!x)
                return -ENOMEM;
        size_t n = put_head(x->head, sizeof(x->head), r, &u);
        x->pool = n ? pool_get(c, &u) : NULL;
        if (!x->pool) {
                free(x);
                return n ? -ENOMEM : -EINVAL;
        }
        x->c = c;
        x->head_len = n;
        x->body = r->body ? r->body : "";
        x->body_len = r->body_len;
        x->ops = ops;
        x->ud = ud;
        x->connect_to = r->connect_timeout_ms;
        x->idle_to = r->idle_timeout_ms;
        x->total_to = r->total_timeout_ms;
        x->start_ms = x->last_io_ms = now_ms();
        x->next = c->all;
        if (c->all)
                c->all->prev = x;
        c->all = x;
        *ret = x;
        acquire(c, x, true);
        return 0;
}

void gp_uc_cancel(gp_uc *c, gp_uc_xfer *x) {
        if (!x)
                return;
        if (x->conn)
                conn_close(c, x->conn); /* mid-exchange: the connection cannot carry another */
        wait_del(c, x);
        for (gp_uc_xfer **pp = &c->pending; *pp; pp = &(*pp)->wnext)
                if (*pp == x) {
                        *pp = x->wnext;
                        break;
                }
        xfer_free(c, x);
        serve_waiters(c);
}

/* Start the waiting exchanges that can have a connection now. */
static void serve_waiters(gp_uc *c) {
        while (c->wait_head) {
                gp_uc_xfer *x = c->wait_head;
                bool room = x->pool->idle || c->nconns < c->max_conns;
                for (uc_pool *p = c->pools; !room && p; p = p->next)
                        room = p->idle != NULL;
                if (!room)
                        return;
                c->wait_head = x->wnext;
                if (!c->wait_head)
                        c->wait_tail = NULL;
                x->wnext = NULL;
                acquire(c, x, true);
        }
}

/* ------------------------------------------------------------------ */
/* answers                                                             */

static int data_out(void *ud, const char *p, size_t n) {
        gp_uc_xfer *x = ud;
        int r = x->ops->data(x->ud, p, n);
        if (r < 0) {
                x->aborted = true;
                return -ECANCELED;
        }
        if (r == 1)
                x->paused = true;
        return 0;
}

/* Body bytes p[0..n).  1 when the answer is whole, 0 for more, or a
 * GP_UC_* error. */
static int feed_body(gp_uc_xfer *x, const char *p, size_t n) {
        if (x->chunked) {
                size_t used = 0;
                int r = gp_h1_chunked_feed(&x->ch, p, n, &used, data_out, x);
                if (r < 0)
                        return x->aborted ? GP_UC_EABORTED : GP_UC_EPROTO;
                if (r == 1 && used < n)
                        x->keep = false; /* bytes nobody asked for: do not trust the connection */
                return r;
        }
        if (x->left < 0)
                return n && data_out(x, p, n) < 0 ? GP_UC_EABORTED : 0;
        size_t take = (uint64_t)x->left < n ? (size_t)x->left : n;
        if (take && data_out(x, p, take) < 0)
                return GP_UC_EABORTED;
        x->left -= (int64_t)take;
        if (take < n)
                x->keep = false;
        return x->left == 0;
}

/* What x's connection holds.  1 when x ended (it is gone), 0 to read on. */
static int process(gp_uc *c, gp_uc_xfer *x) {
        uc_conn *k = x->conn;
        if (x->phase == X_HEAD) {
                gp_h1_response resp;
                int r;
                for (;;) {
                        r = gp_h1_parse_response(k->rbuf, k->rlen, HEAD_MAX, &resp);
                        if (r < 0 || resp.status >= 200)
                                break;
                        /* 1xx: an interim answer, the real one follows */
                        memmove(k->rbuf, k->rbuf + resp.head_len, k->rlen - resp.head_len);
                        k->rlen -= resp.head_len;
                }
                if (r == -EAGAIN)
                        return 0;
                if (r < 0) {
                        xfer_end(c, x, GP_UC_EPROTO);
                        return 1;
                }
                if (x->ops->head(x->ud, resp.status, resp.headers, resp.nheaders) < 0) {
                        xfer_end(c, x, GP_UC_EABORTED);
                        return 1;
                }
                x->keep = resp.keep_alive;
                x->chunked = resp.chunked;
                x->left = resp.content_length;
                if (resp.status == 204 || resp.status == 304)
                        x->left = 0;
                x->phase = X_BODY;
                size_t rest = k->rlen - resp.head_len;
                k->rlen = 0;
                if (x->left == 0) {
                        if (rest)
                                x->keep = false;
                        xfer_end(c, x, GP_UC_OK);
                        return 1;
                }
                if (!rest)
                        return 0;
                /* the body's first bytes came with the head: feed them from where they are */
                int b = feed_body(x, k->rbuf + resp.head_len, rest);
                if (b != 0) {
                        xfer_end(c, x, b == 1 ? GP_UC_OK : b);
                        return 1;
                }
                return 0;
        }
        int b = feed_body(x, k->rbuf, k->rlen);
        k->rlen = 0;
        if (b != 0) {
                xfer_end(c, x, b == 1 ? GP_UC_OK : b);
                return 1;
        }
        return 0;
}

static void do_read(gp_uc *c, gp_uc_xfer *x) {
        while (!x->paused) {
                uc_conn *k = x->conn;
                if (k->rlen == k->rcap) {
                        size_t cap = k->rcap ? k->rcap * 2 : RBUF_START;
                        if (k->rcap >= HEAD_MAX + 1) {
                                xfer_end(c, x, GP_UC_EPROTO);
                                return;
                        }
                        char *nb = realloc(k->rbuf, cap);
                        if (!nb) {
                                xfer_end(c, x, GP_UC_ENOMEM);
                                return;
                        }
                        k->rbuf = nb;
                        k->rcap = cap;
                }
                size_t room = k->rcap - k->rlen;
                ssize_t n = recv(k->fd, k->rbuf + k->rlen, room, 0);
                if (n > 0) {
                        x->got_bytes = true;
                        x->last_io_ms = now_ms();
                        k->rlen += (size_t)n;
                        if (process(c, x))
                                return;
                        if ((size_t)n < room && !k->hup)
                                return; /* drained: the next edge brings more */
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return;
                /* the upstream closed (or reset) the connection */
                if (n == 0 && x->phase == X_BODY && x->left < 0 && !x->chunked) {
                        xfer_end(c, x, GP_UC_OK); /* the answer's end is the connection's */
                        return;
                }
                if (!resend(c, x, false))
                        xfer_end(c, x, GP_UC_ECLOSED);
                return;
        }
}

void gp_uc_resume(gp_uc *c, gp_uc_xfer *x) {
        if (!x || !x->paused)
                return;
        x->paused = false;
        x->last_io_ms = now_ms();
        if (x->conn && x->phase >= X_HEAD)
                do_read(c, x); /* edges that came while paused were not read */
}

void gp_uc_event(gp_uc *c, uint64_t data, uint32_t events) {
        uc_conn *k = (uc_conn *)(uintptr_t)(data & ~GP_UC_EV_MASK);
        if (k->fd < 0)
                return; /* closed earlier in this batch */
        gp_uc_xfer *x = k->x;
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                k->hup = true;
        if (!x) {
                /* a kept connection spoke or closed: it cannot carry a request now */
                if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                        conn_close(c, k);
                serve_waiters(c);
                return;
        }
        if (x->phase == X_CONNECT) {
                if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
                        return;
                int err = 0;
                socklen_t len = sizeof(err);
                if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
                        x->pool->alen = 0;
                        xfer_end(c, x, GP_UC_ECONNECT);
                        return;
                }
                x->phase = X_SEND;
        }
        if (x->phase == X_SEND) {
                if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                        try_send(c, x, false);
                return;
        }
        if (!x->paused && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                do_read(c, x);
}

void gp_uc_tick(gp_uc *c, int64_t now) {
        for (gp_uc_xfer *x = c->all; x;) {
                gp_uc_xfer *next = x->next;
                int64_t idle = x->paused ? 0 : now - x->last_io_ms;
                bool late = (x->total_to > 0 && now - x->start_ms >= x->total_to) ||
                            (x->idle_to > 0 && idle >= x->idle_to) ||
                            (x->phase == X_CONNECT && x->connect_to > 0 && now - x->connect_ms >= x->connect_to);
                if (late && !x->pending) {
                        if (x->phase == X_CONNECT)
                                x->pool->alen = 0;
                        xfer_end(c, x, x->phase == X_CONNECT ? GP_UC_ECONNECT : GP_UC_ETIMEDOUT);
                        next = c->all; /* its done may have ended or started others */
                }
                x = next;
        }
        for (uc_pool *p = c->pools; p; p = p->next)
                for (uc_conn *k = p->idle; k;) {
                        uc_conn *next = k->next;
                        if (now - k->idle_since_ms >= IDLE_KEEP_MS)
                                conn_close(c, k);
                        k = next;
                }
}

bool gp_uc_due(const gp_uc *c) {
        return c->pending != NULL;
}

void gp_uc_dispatch(gp_uc *c) {
        while (c->pending) {
                gp_uc_xfer *x = c->pending;
                c->pending = x->wnext;
                x->wnext = NULL;
                int result = x->result;
                const gp_uc_ops *ops = x->ops;
                void *ud = x->ud;
                xfer_free(c, x);
                ops->done(ud, result);
        }
        while (c->grave) {
                uc_conn *k = c->grave;
                c->grave = k->next;
                free(k);
        }
}

gp_uc *gp_uc_new(int epfd, int max_conns) {
        gp_uc *c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        c->epfd = epfd;
        c->max_conns = max_conns < 1 ? 1 : max_conns;
        return c;
}

void gp_uc_free(gp_uc *c) {
        if (!c)
                return;
        while (c->all) {
                gp_uc_xfer *x = c->all;
                if (x->conn)
                        conn_close(c, x->conn);
                xfer_free(c, x);
        }
        c->pending = NULL;
        c->wait_head = c->wait_tail = NULL;
        while (c->pools) {
                uc_pool *p = c->pools;
                while (p->idle)
                        conn_close(c, p->idle);
                c->pools = p->next;
                free(p);
        }
        gp_uc_dispatch(c); /* frees the graveyard; nothing is pending */
        free(c);
}
