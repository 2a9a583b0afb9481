/* front.c - the /v1 connections the gateway serves itself.
 *
 * Each loop accepts on its own listening socket (SO_REUSEPORT).  A new
 * connection's first bytes are peeked at: a request for /v1 keeps the
 * connection here, anything else hands the socket to the loop's MHD daemon
 * (MHD_add_connection) untouched, so the rest of the API is served as
 * before.  Here a request costs one recv and one send on the client's
 * socket and no epoll_ctl: the socket is registered once, edge triggered,
 * and the request waits for admission and its upstream without being
 * parked anywhere.  A client hang-up (EPOLLRDHUP) ends its request at once,
 * queued or upstream.
 *
 * A later request on such a connection that is not for /v1 cannot be
 * handed to MHD (its bytes were read): the connection then becomes a relay
 * to MHD through a socketpair, bytes copied both ways, with the client's
 * own address given to MHD (auth sees the real client).
 *
 * TLS (base/tls-keep.h, when the process has a listener keeper): a first
 * byte 0x16 (a ClientHello) starts a GnuTLS session on the connection
 * (FS_TLS until its handshake is done, within server.header_timeout_s of
 * accept); its decrypted requests take the paths above, except that a
 * first request not for /v1 goes to MHD through the relay too (MHD stays
 * plaintext).  GnuTLS reads whole records: a TLS connection is read until
 * GnuTLS says EAGAIN with nothing pending, never judged drained by a short
 * read.  A plaintext connection from an address off loopback gets a 400
 * saying to use https:// unless server.tls.plaintext is any.
 *
 * Invariants (all on the owning loop):
 *   - a connection is in L->fconns from accept to close; a closed one has
 *     fd -1 and waits in L->fgrave until gw_front_flush ends (an epoll
 *     batch or the flush list may still name it);
 *   - fc->q and q->nc name each other while the request is served; the
 *     front holds one reference of q (gw_request's client side) until the
 *     answer is sent or the client goes;
 *   - fc->out holds bytes for the client, sent in order; an answer's head
 *     is queued once (answering), and done_queued once its last byte is.
 */
#include "gateway/gw-internal.h"
#include "base/h1.h"

#include "base/browser.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/tls-keep.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FC_IN_START 8192
#define FC_OUT_HIGH (1 << 20)       /* streamed bytes a slow client has not taken: move no more */
#define FC_ACCEPT_BATCH 64
#define SWEEP_MS 1000
#define LINGER_MS 2000              /* after a closing answer, what the client still sends is read and dropped this long */

enum { FS_SNIFF, FS_TLS, FS_HEAD, FS_BODY, FS_WAIT, FS_ANSWER, FS_RELAY, FS_LINGER };

typedef struct fconn {
        gw_idle idle;              /* first member: L's idle list names it (conns.c) */
        loop *L;
        int fd;                    /* the client's socket; -1 once closed */
        int rfd;                   /* relay: our end of the socketpair MHD serves; -1 = none */
        struct sockaddr_storage addr;
        socklen_t alen;
        gnutls_session_t tls;      /* TLS: the session (NULL = plaintext) */
        gp_tls_creds *creds;       /* TLS: its credentials' reference */
        bool tls_wpend;            /* TLS: a record_send said EAGAIN: the next send repeats it */
        bool ip_counted;           /* in the per-address table (gp_iplimit_take) */
        int state;
        char *in;                  /* client bytes not used yet */
        size_t inlen, incap;
        bool readable;             /* an in edge whose bytes were not all read */
        bool eof;                  /* the client closed its side */
        bool hup;                  /* an event said so: read to the end, since no edge follows
                                    * bytes and a close that came together */
        bool reof;                 /* relay: MHD closed its side */
        bool rshut;                /* relay: MHD was told the client closed (TLS) */
        /* the request being read */
        gp_h1_chunked ch;
        gp_buf body;               /* a body that did not come whole with its head */
        bool keep_alive;           /* the head's, until an error answer closes the connection */
        gw_front_head h;           /* its head, as gw_front_parse_head read it */
        /* its answer */
        gw_req *q;
        gp_buf out;
        size_t out_off;
        bool answering;            /* the head is queued */
        bool streaming;            /* the body goes out as it comes */
        bool done_queued;          /* the last byte is queued */
        bool close_after;
        bool flushing;             /* in L->flush */
        int64_t deadline_ms;       /* cut the connection then; 0 = none */
        int64_t req_t0_ms;         /* FS_SNIFF, FS_HEAD: the request's first byte came (accept for the
                                    * first request); 0 = none yet */
        int64_t body_t0_ms;        /* FS_BODY: its head was whole then */
        struct fconn *fnext;       /* L->flush */
        struct fconn *gnext;       /* L->fgrave */
        struct fconn *prev, *next; /* L->fconns */
} fconn;

static int64_t mono_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *reason(int status) {
        switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 201: return "Created";
        case 202: return "Accepted";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 402: return "Payment Required";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 409: return "Conflict";
        case 411: return "Length Required";
        case 413: return "Content Too Large";
        case 414: return "URI Too Long";
        case 415: return "Unsupported Media Type";
        case 422: return "Unprocessable Content";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        default: return status < 300 ? "OK" : status < 400 ? "Redirect" : status < 500 ? "Client Error" : "Server Error";
        }
}

static const char *http_date(loop *L) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        if (ts.tv_sec != L->date_s) {
                struct tm tm;
                gmtime_r(&ts.tv_sec, &tm);
                strftime(L->date, sizeof(L->date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
                L->date_s = ts.tv_sec;
        }
        return L->date;
}

/* ------------------------------------------------------------------ */
/* connections                                                         */

/* Let go of fc's request: the client side's reference (as MHD's
 * completion callback does). */
static void drop_request(fconn *fc) {
        gw_req *q = fc->q;
        if (!q)
                return;
        fc->q = NULL;
        q->nc = NULL;
        q->client_gone = true;
        if (q->gw_held)
                gw_post(q, IN_ABORT);
        gw_unref(q);
}

/* The loop's connections: its own and its MHD daemon's, against its
 * share of server.max_connections. */
static bool loop_full(const loop *L) {
        return L->nfconns + L->nmhdconns >= L->g->front_max_conns;
}

void gw_front_accept_resume(loop *L) {
        if (L->accept_paused && L->lfd >= 0 && !loop_full(L)) {
                struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
                if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, L->lfd, &ev) == 0)
                        L->accept_paused = false;
        }
}

/* fc leaves the loop (its sockets closed or given away). */
static void fc_forget(fconn *fc) {
        loop *L = fc->L;
        gw_idle_leave(L, &fc->idle);
        if (fc->ip_counted) {
                gp_iplimit_put(&L->g->ipl, (struct sockaddr *)&fc->addr);
                fc->ip_counted = false;
        }
        fc->fd = fc->rfd = -1;
        if (fc->prev)
                fc->prev->next = fc->next;
        else
                L->fconns = fc->next;
        if (fc->next)
                fc->next->prev = fc->prev;
        L->nfconns--;
        fc->gnext = L->fgrave;
        L->fgrave = fc;
        gw_front_accept_resume(L);
}

static void fc_close(fconn *fc) {
        if (fc->fd < 0)
                return;
        drop_request(fc);
        /* out of epoll before the close: a child between _Fork and exec (a task's
         * start) may hold the socket open, and epoll would go on naming fc after
         * it is freed */
        if (fc->rfd >= 0) {
                epoll_ctl(fc->L->epfd, EPOLL_CTL_DEL, fc->rfd, NULL);
                close(fc->rfd);
        }
        epoll_ctl(fc->L->epfd, EPOLL_CTL_DEL, fc->fd, NULL);
        close(fc->fd);
        fc_forget(fc);
}

static void fc_free(fconn *fc) {
        if (fc->tls)
                gnutls_deinit(fc->tls);
        gp_tls_creds_unref(fc->creds);
        free(fc->in);
        gp_buf_done(&fc->body);
        gp_buf_done(&fc->out);
        free(fc);
}

/* recv(2) and send(2) on fc's client socket, through its TLS session if
 * it has one, with their errno conventions (EAGAIN: wait for an edge). */
static ssize_t fc_recv(fconn *fc, char *p, size_t n) {
        if (!fc->tls)
                return recv(fc->fd, p, n, 0);
        for (int tries = 0;; tries++) {
                ssize_t r = gnutls_record_recv(fc->tls, p, n);
                if (r >= 0)
                        return r;
                if (r == GNUTLS_E_PREMATURE_TERMINATION)
                        return 0;
                if (r == GNUTLS_E_INTERRUPTED || (r == GNUTLS_E_AGAIN && gnutls_record_check_pending(fc->tls) &&
                                                  tries < 8))
                        continue;
                errno = r == GNUTLS_E_AGAIN ? EAGAIN : ECONNRESET;
                return -1;
        }
}

static ssize_t fc_send(fconn *fc, const char *p, size_t n) {
        if (!fc->tls)
                return send(fc->fd, p, n, MSG_NOSIGNAL);
        /* after EAGAIN GnuTLS holds the record it made: it is sent again, not made anew */
        ssize_t r = fc->tls_wpend ? gnutls_record_send(fc->tls, NULL, 0) : gnutls_record_send(fc->tls, p, n);
        if (r >= 0) {
                fc->tls_wpend = false;
                return r;
        }
        if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
                fc->tls_wpend = true;
                errno = r == GNUTLS_E_AGAIN ? EAGAIN : EINTR;
                return -1;
        }
        errno = EPIPE;
        return -1;
}

static bool is_loopback(const struct sockaddr_storage *sa) {
        if (sa->ss_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
        if (sa->ss_family == AF_INET6) {
                const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
                return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
        }
        return sa->ss_family == AF_UNIX;
}

/* More connections from one address than server.max_connections_per_ip:
 * refused at once (the answer is best effort: the socket is new). */
static void refuse_per_ip(loop *L, int fd, const struct sockaddr_storage *sa) {
        static const char msg[] = "HTTP/1.1 429 Too Many Requests\r\n"
                                  "Content-Type: application/json\r\n"
                                  "Content-Length: 93\r\n"
                                  "Connection: close\r\n\r\n"
                                  "{\"error\":{\"code\":\"too_many_connections\",\"message\":"
                                  "\"too many connections from this address\"}}\n";
        (void)!send(fd, msg, sizeof(msg) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        close(fd);
        int64_t now = mono_now();
        if (now >= L->ip_warn_ms) { /* one line per loop every 10 s, not one per connection */
                char a[INET6_ADDRSTRLEN] = "?";
                if (sa->ss_family == AF_INET)
                        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, a, sizeof(a));
                else if (sa->ss_family == AF_INET6)
                        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, a, sizeof(a));
                gp_warn("http: connections from %s refused: it holds server.max_connections_per_ip (%d)", a,
                        L->g->ipl.per_ip);
                L->ip_warn_ms = now + 10000;
        }
}

static void on_accept(loop *L) {
        gp_gw *g = L->g;
        for (int i = 0; i < FC_ACCEPT_BATCH; i++) {
                if (loop_full(L)) {
                        /* this loop's share of server.max_connections is taken: leave the
                         * next connections waiting in the kernel until one closes */
                        if (epoll_ctl(L->epfd, EPOLL_CTL_DEL, L->lfd, NULL) == 0)
                                L->accept_paused = true;
                        return;
                }
                struct sockaddr_storage sa;
                socklen_t sl = sizeof(sa);
                int fd = accept4(L->lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        if (errno != EAGAIN && errno != EWOULDBLOCK)
                                gp_warn("gateway: accept: %s", strerror(errno));
                        return;
                }
                int ipc = gp_iplimit_take(&g->ipl, (struct sockaddr *)&sa);
                if (ipc < 0) {
                        refuse_per_ip(L, fd, &sa);
                        continue;
                }
                fconn *fc = calloc(1, sizeof(*fc));
                if (!fc) {
                        if (ipc == 0)
                                gp_iplimit_put(&g->ipl, (struct sockaddr *)&sa);
                        close(fd);
                        continue;
                }
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                fc->L = L;
                fc->fd = fc->idle.fd = fd;
                fc->rfd = -1;
                memcpy(&fc->addr, &sa, sl);
                fc->alen = sl;
                fc->ip_counted = ipc == 0;
                fc->state = FS_SNIFF;
                int64_t now = mono_now();
                fc->deadline_ms = now + g->conn_timeout_ms;
                fc->req_t0_ms = now; /* the first request's head is timed from accept */
                gp_buf_init(&fc->body, (size_t)g->max_body_bytes);
                gp_buf_init(&fc->out, 0);
                struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                         .data.u64 = (uint64_t)(uintptr_t)fc | TAG_FRONT};
                if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                        if (fc->ip_counted)
                                gp_iplimit_put(&g->ipl, (struct sockaddr *)&sa);
                        close(fd);
                        fc_free(fc);
                        continue;
                }
                fc->next = L->fconns;
                if (L->fconns)
                        L->fconns->prev = fc;
                L->fconns = fc;
                L->nfconns++;
                gw_idle_enter(L, &fc->idle, now); /* nothing sent yet */
                gw_conns_after_accept(L);
        }
}

/* ------------------------------------------------------------------ */
/* sending                                                             */

static bool fc_pending(const fconn *fc) {
        return fc->out.len > fc->out_off;
}

/* Queue an answer's head.  clen < 0: a streamed body (chunked, or until
 * the connection closes for an HTTP/1.0 client). */
/* v in decimal, as printf's %d would write it. */
static int put_dec(gp_buf *o, int64_t v) {
        char d[24], *e = d + sizeof(d), *p = e;
        uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
        do
                *--p = (char)('0' + u % 10);
        while (u /= 10);
        if (v < 0)
                *--p = '-';
        return gp_buf_append(o, p, (size_t)(e - p));
}

/* A chunk's size line, as printf's "%zx\r\n" would write it (once per
 * piece of a streamed answer). */
static int put_chunk_size(gp_buf *o, size_t n) {
        char d[24], *e = d + sizeof(d), *p = e - 2;
        e[-2] = '\r';
        e[-1] = '\n';
        do
                *--p = "0123456789abcdef"[n % 16];
        while (n /= 16);
        return gp_buf_append(o, p, (size_t)(e - p));
}

static int put3(gp_buf *o, const char *a, const char *b, const char *c) {
        int rc = gp_buf_puts(o, a);
        if (!rc)
                rc = gp_buf_puts(o, b);
        if (!rc)
                rc = gp_buf_puts(o, c);
        return rc;
}

static int put_head(fconn *fc, int status, const char *ctype, const gp_buf *lines, int64_t clen) {
        gp_buf *o = &fc->out;
        if (!fc->keep_alive || (clen < 0 && fc->h.http10))
                fc->close_after = true;
        /* appended piece by piece: no printf on every answer's way out */
        int rc = gp_buf_puts(o, "HTTP/1.1 ");
        if (!rc)
                rc = put_dec(o, status);
        if (!rc)
                rc = put3(o, " ", reason(status), "\r\nDate: ");
        if (!rc)
                rc = put3(o, http_date(fc->L), "\r\nX-Gpupool-Backend: ", gw_backend());
        if (!rc)
                rc = gp_buf_puts(o, "\r\n");
        if (!rc && ctype)
                rc = put3(o, "Content-Type: ", ctype, "\r\n");
        if (!rc && lines && lines->len)
                rc = gp_buf_append(o, lines->data, lines->len);
        if (!rc && fc->h.cors)
                rc = put3(o, "Access-Control-Allow-Origin: ", fc->h.cors, "\r\nVary: Origin\r\n");
        if (!rc && clen >= 0 && status != 204) { /* a 204 (a CORS preflight's) has no length */
                rc = gp_buf_puts(o, "Content-Length: ");
                if (!rc)
                        rc = put_dec(o, clen);
                if (!rc)
                        rc = gp_buf_puts(o, "\r\n");
        }
        else if (!rc && clen < 0 && !fc->h.http10)
                rc = gp_buf_puts(o, "Transfer-Encoding: chunked\r\n");
        if (!rc && fc->close_after)
                rc = gp_buf_puts(o, "Connection: close\r\n");
        else if (!rc && fc->h.http10)
                rc = gp_buf_puts(o, "Connection: keep-alive\r\n");
        if (!rc)
                rc = gp_buf_puts(o, "\r\n");
        fc->answering = true;
        return rc;
}

/* fc has something new to send: it goes out when the batch is done (from
 * gw_front_flush, so one connection's pipelined requests are answered in
 * a loop, not by recursion). */
static void fc_wake(fconn *fc) {
        if (fc->flushing || fc->fd < 0)
                return;
        fc->flushing = true;
        fc->fnext = fc->L->flush;
        fc->L->flush = fc;
}

/* Queue a whole answer (body malloc'd, taken; NULL = out of memory). */
static void answer_whole(fconn *fc, int status, char *body, const gp_buf *lines) {
        if (!body) {
                status = 503;
                fc->close_after = true;
        }
        size_t n = body ? strlen(body) : 0;
        int rc = put_head(fc, status, "application/json", lines, (int64_t)n);
        if (!rc && n && !fc->h.head)
                rc = gp_buf_append(&fc->out, body, n);
        free(body);
        if (rc)
                fc->close_after = true;
        fc->done_queued = true;
        fc->state = FS_ANSWER;
        fc_wake(fc);
}

static void answer_error(fconn *fc, int status, const char *type, const char *code, const char *msg, bool close) {
        fc->close_after |= close;
        answer_whole(fc, status, gp_gw_error_body(type, code, msg), NULL);
}

/* What fc's request has for the client now: the head once there is a
 * status, then the body (whole, or framed as it comes). */
static void produce(fconn *fc) {
        gw_req *q = fc->q;
        if (!q)
                return;
        if (!fc->answering) {
                if (q->ans_status) {
                        gp_buf lines;
                        gp_buf_init(&lines, 0);
                        if (q->ans_rl)
                                gw_ratelimit_lines(&lines, &q->rl, true);
                        char *b = q->ans_body;
                        q->ans_body = NULL;
                        q->responding = true;
                        answer_whole(fc, q->ans_status, b, &lines);
                        gp_buf_done(&lines);
                        return;
                }
                if (q->status <= 0 || (!q->up_done && q->out.len == q->out_off))
                        return;
                q->responding = true;
                fc->state = FS_ANSWER;
                if (gw_answer_ratelimit(q, &q->hdrs) < 0)
                        fc->close_after = true;
                if (q->up_done && !q->up_failed) {
                        size_t n = q->out.len - q->out_off;
                        int rc = put_head(fc, (int)q->status, NULL, &q->hdrs, (int64_t)n);
                        if (!rc && n && !fc->h.head)
                                rc = gp_buf_append(&fc->out, q->out.data + q->out_off, n);
                        gp_buf_reset(&q->out);
                        q->out_off = 0;
                        if (rc)
                                fc->close_after = true;
                        fc->done_queued = true;
                        return;
                }
                fc->streaming = true;
                gp_buf extra;
                gp_buf_init(&extra, 0);
                int rc = gp_buf_append(&extra, q->hdrs.data ? q->hdrs.data : "", q->hdrs.len);
                if (!rc && q->stream)
                        rc = gp_buf_puts(&extra, "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
                if (rc || put_head(fc, (int)q->status, NULL, &extra, -1))
                        fc->close_after = true;
                gp_buf_done(&extra);
        }
        if (!fc->streaming || fc->done_queued)
                return;
        size_t avail = q->out.len - q->out_off;
        if (avail && fc->out.len - fc->out_off < FC_OUT_HIGH) {
                int rc = fc->h.http10 ? 0 : put_chunk_size(&fc->out, avail);
                if (!rc)
                        rc = gp_buf_append(&fc->out, q->out.data + q->out_off, avail);
                if (!rc && !fc->h.http10)
                        rc = gp_buf_puts(&fc->out, "\r\n");
                if (rc) {
                        fc->close_after = true;
                        fc->done_queued = true;
                        return;
                }
                gp_buf_reset(&q->out);
                q->out_off = 0;
        }
        if (q->paused && q->running && fc->out.len - fc->out_off < FC_OUT_HIGH) {
                q->paused = false;
                gp_uc_resume(fc->L->uc, q->x); /* may bring more bytes, and wake fc again */
        }
        if (q->up_done && q->out.len == q->out_off) {
                if (q->up_failed)
                        fc->close_after = true; /* cut short: the client must not take it for whole */
                else if (!fc->h.http10 && gp_buf_puts(&fc->out, "0\r\n\r\n"))
                        fc->close_after = true;
                fc->done_queued = true;
        }
}

static void advance(fconn *fc);
static void read_more(fconn *fc);

/* FS_LINGER: drop what comes until the client closes (or the deadline). */
static void linger_read(fconn *fc) {
        char b[4096];
        while (fc->readable) {
                ssize_t n = recv(fc->fd, b, sizeof(b), 0);
                if (n > 0)
                        continue;
                if (n < 0 && errno == EINTR)
                        continue;
                fc->readable = false;
                if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                        fc_close(fc);
                        return;
                }
        }
}

/* The answer is sent: the next request, or close. */
static void answered(fconn *fc) {
        drop_request(fc);
        gp_buf_reset(&fc->out);
        fc->out_off = 0;
        if (fc->close_after || !fc->keep_alive || (fc->eof && !fc->inlen)) {
                /* close gently: the answer's end goes first, then what the client
                 * still sends is read and dropped until it closes too (closing with
                 * unread bytes would reset the connection and could lose the answer) */
                if (fc->tls)
                        (void)gnutls_bye(fc->tls, GNUTLS_SHUT_WR); /* best effort: close_notify */
                shutdown(fc->fd, SHUT_WR);
                if (fc->eof) {
                        fc_close(fc);
                        return;
                }
                fc->state = FS_LINGER;
                fc->inlen = 0;
                fc->deadline_ms = mono_now() + LINGER_MS;
                fc->readable = true;
                linger_read(fc);
                return;
        }
        fc->answering = fc->streaming = fc->done_queued = false;
        fc->state = FS_HEAD;
        int64_t now = mono_now();
        fc->deadline_ms = now + fc->L->g->conn_timeout_ms;
        fc->req_t0_ms = 0;
        if (fc->inlen)
                fc->req_t0_ms = now; /* pipelined: the next head has begun */
        else
                gw_idle_enter(fc->L, &fc->idle, now);
        read_more(fc);
        advance(fc);
}

/* Send what is queued; whole answers end their request. */
static void send_out(fconn *fc) {
        while (fc_pending(fc)) {
                ssize_t n = fc_send(fc, fc->out.data + fc->out_off, fc->out.len - fc->out_off);
                if (n > 0) {
                        fc->out_off += (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        /* a client that takes nothing for the idle timeout is cut */
                        fc->deadline_ms = mono_now() + fc->L->g->conn_timeout_ms;
                        return;
                }
                fc_close(fc);
                return;
        }
        gp_buf_reset(&fc->out);
        fc->out_off = 0;
        if (fc->state == FS_ANSWER)
                fc->deadline_ms = 0;
        if (fc->done_queued && fc->state == FS_ANSWER) {
                answered(fc);
                return;
        }
        gw_req *q = fc->q;
        if (fc->streaming && q && (q->out.len > q->out_off || q->paused || q->up_done))
                fc_wake(fc); /* bytes held back while the client was slow: move them now */
}

void gw_front_wake(gw_req *q) {
        if (q->nc)
                fc_wake(q->nc);
}

void gw_front_flush(loop *L) {
        while (L->flush) {
                fconn *fc = L->flush;
                L->flush = fc->fnext;
                fc->flushing = false;
                if (fc->fd < 0)
                        continue;
                produce(fc);
                send_out(fc);
        }
        while (L->fgrave) {
                fconn *fc = L->fgrave;
                L->fgrave = fc->gnext;
                fc_free(fc);
        }
}

/* ------------------------------------------------------------------ */
/* reading requests                                                    */

static void read_more(fconn *fc) {
        gp_gw *g = fc->L->g;
        size_t limit = GW_FRONT_HEAD_MAX + (size_t)g->max_body_bytes + 64;
        while (fc->readable && fc->fd >= 0) {
                if (fc->inlen == fc->incap) {
                        if (fc->incap >= limit)
                                return; /* full: advance refuses what it holds */
                        size_t cap = fc->incap ? fc->incap * 2 : FC_IN_START;
                        if (cap > limit)
                                cap = limit;
                        char *p = realloc(fc->in, cap);
                        if (!p) {
                                fc_close(fc);
                                return;
                        }
                        fc->in = p;
                        fc->incap = cap;
                }
                size_t room = fc->incap - fc->inlen;
                ssize_t n = fc_recv(fc, fc->in + fc->inlen, room);
                if (n > 0) {
                        fc->inlen += (size_t)n;
                        if (!fc->req_t0_ms && fc->state == FS_HEAD) {
                                fc->req_t0_ms = mono_now(); /* the head's first byte: its clock starts */
                                gw_idle_leave(fc->L, &fc->idle);
                        }
                        if ((size_t)n < room && !fc->hup && !fc->tls)
                                fc->readable = false; /* drained: the next edge brings more */
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                fc->readable = false;
                if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                        fc->eof = true;
        }
}

static void consume(fconn *fc, size_t n) {
        memmove(fc->in, fc->in + n, fc->inlen - n);
        fc->inlen -= n;
}

static int body_out(void *ud, const char *p, size_t n) {
        fconn *fc = ud;
        return gp_buf_append(&fc->body, p, n);
}

static void to_relay(fconn *fc);

/* The browser check of fc's request (base/browser.h; the MHD path's is
 * gp_http_browser_gate): true when it is answered now (403, 415, or a
 * CORS preflight's 204). */
static bool browser_gate(fconn *fc) {
        gw_front_head *h = &fc->h;
        gp_gw *g = fc->L->g;
        gp_browser_req b = {.method = h->method, .content_type = h->has_ctype ? h->ctype : NULL,
                            .has_body = h->clen != 0, .origin = h->has_origin ? h->origin : NULL,
                            .sec_fetch_site = h->has_sfs ? h->sfs : NULL, .host = h->has_host ? h->host : NULL};
        char msg[512];
        int st = gp_browser_check(&b, (const char (*)[GP_ORIGIN_MAX])g->origins, g->norigins, &h->cors, msg,
                                  sizeof(msg));
        if (st == 204) {
                gp_buf lines;
                gp_buf_init(&lines, 0);
                if (gp_buf_printf(&lines, "Access-Control-Allow-Methods: %s\r\nAccess-Control-Allow-Headers: %s\r\n"
                                  "Access-Control-Max-Age: %s\r\n", GP_CORS_ALLOW_METHODS, GP_CORS_ALLOW_HEADERS,
                                  GP_CORS_MAX_AGE) < 0)
                        fc->close_after = true;
                answer_whole(fc, 204, strdup(""), &lines);
                gp_buf_done(&lines);
        } else if (st) {
                answer_error(fc, st, st == 415 ? "invalid_request_error" : "permission_error",
                             st == 415 ? "unsupported_media_type" : "cross_site_request", msg, false);
        }
        return st != 0;
}

/* A whole request: who calls, then the gateway (or an answer now). */
static void dispatch(fconn *fc, const char *body, size_t len) {
        loop *L = fc->L;
        gp_gw *g = L->g;
        fc->state = FS_WAIT;
        fc->deadline_ms = 0;
        if (browser_gate(fc)) /* no web page may use /v1 from another site, nor with a non-JSON body */
                return;
        gp_gw_caller who;
        memset(&who, 0, sizeof(who));
        char msg[256] = "this server takes no /v1 requests here";
        int st = g->auth_fn ? g->auth_fn(g->auth_ud, fc->h.has_authz ? fc->h.authz : NULL,
                                         fc->h.has_host ? fc->h.host : NULL, (struct sockaddr *)&fc->addr,
                                         fc->h.has_fwd_for ? fc->h.fwd_for : NULL, &who, msg, sizeof(msg))
                            : 403;
        if (st) {
                if (st == 401)
                        answer_error(fc, 401, "invalid_request_error", "invalid_api_key", msg, false);
                else if (st == 402) /* billing.enforce_balance: the tenant's balance is used up */
                        answer_error(fc, 402, "invalid_request_error", "insufficient_balance", msg, false);
                else if (st == 503) { /* this server cannot take it now: another will */
                        gp_buf lines;
                        gp_buf_init(&lines, 0);
                        gp_buf_puts(&lines, "retry-after: 1\r\n");
                        answer_whole(fc, 503, gp_gw_error_body("server_error", "unavailable", msg), &lines);
                        gp_buf_done(&lines);
                } else {
                        answer_error(fc, st, "permission_error", "forbidden", msg, false);
                }
                return;
        }
        gw_answer a = {0};
        gw_req *q = gw_request(g, L, fc->h.url, fc->h.method, &who, fc->h.has_xprio ? fc->h.xprio : NULL, body, len,
                               &a);
        if (!q) {
                answer_whole(fc, a.status, a.body, NULL);
                return;
        }
        q->nc = fc;
        fc->q = q;
        gw_post(q, IN_NEW);
}

/* Copy header name's value into dst (NUL-terminated; "?" when it does not
 * fit).  Whether the header was sent. */
static bool header_value(const gp_h1_request *r, const char *name, char *dst, size_t size) {
        const gp_h1_header *x = gp_h1_find(r->headers, r->nheaders, name);
        if (!x)
                return false;
        if (x->value_len < size) {
                memcpy(dst, x->value, x->value_len);
                dst[x->value_len] = '\0';
        } else {
                gp_strlcpy(dst, "?", size);
        }
        return true;
}

/* Read a request head from in[0..n) (pure; see gw-internal.h). */
int gw_front_parse_head(const char *in, size_t n, gw_front_head *h) {
        gp_h1_request r;
        int rc = gp_h1_parse_request(in, n, GW_FRONT_HEAD_MAX, &r);
        if (rc == -EAGAIN)
                return rc;
        if (rc < 0)
                return rc == -E2BIG ? 431 : 400;
        memset(h, 0, sizeof(*h));
        h->head_len = r.head_len;
        /* the target is not NUL-terminated: it ends at target_len */
        h->v1 = r.target_len >= 3 && !memcmp(r.target, "/v1", 3) &&
                (r.target_len == 3 || r.target[3] == '/' || r.target[3] == '?');
        if (!h->v1)
                return 0;
        const char *qm = memchr(r.target, '?', r.target_len);
        size_t ul = qm ? (size_t)(qm - r.target) : r.target_len;
        if (ul >= sizeof(h->url))
                return 414;
        memcpy(h->url, r.target, ul);
        h->url[ul] = '\0';
        gp_strlcpy(h->method, r.method, sizeof(h->method));
        h->head = !strcmp(r.method, "HEAD");
        h->keep_alive = r.keep_alive;
        h->http10 = r.minor == 0;
        h->expect = r.expect_continue;
        h->clen = r.chunked ? -1 : r.content_length < 0 ? 0 : r.content_length;
        /* a value too long to keep stays "?": an invalid X-Priority, an unknown key */
        h->has_xprio = header_value(&r, "X-Priority", h->xprio, sizeof(h->xprio));
        h->has_authz = header_value(&r, "Authorization", h->authz, sizeof(h->authz));
        h->has_ctype = header_value(&r, "Content-Type", h->ctype, sizeof(h->ctype));
        h->has_origin = header_value(&r, "Origin", h->origin, sizeof(h->origin));
        h->has_sfs = header_value(&r, "Sec-Fetch-Site", h->sfs, sizeof(h->sfs));
        h->has_host = header_value(&r, "Host", h->host, sizeof(h->host));
        /* a follower's (server/forward.h): a value too long to keep stays "?", not loopback,
         * and so do two lines of it (a follower sends one) */
        h->has_fwd_for = header_value(&r, "X-Gpupool-Forwarded-For", h->fwd_for, sizeof(h->fwd_for));
        const gp_h1_header *first = gp_h1_find(r.headers, r.nheaders, "X-Gpupool-Forwarded-For");
        if (first && gp_h1_find(first + 1, r.nheaders - (size_t)(first + 1 - r.headers), "X-Gpupool-Forwarded-For"))
                gp_strlcpy(h->fwd_for, "?", sizeof(h->fwd_for));
        return 0;
}

/* Parse what fc holds, as far as it goes. */
static void advance(fconn *fc) {
        gp_gw *g = fc->L->g;
        while (fc->fd >= 0) {
                if (fc->state == FS_HEAD) {
                        if (!fc->inlen) {
                                if (fc->eof)
                                        fc_close(fc);
                                return;
                        }
                        int rc = gw_front_parse_head(fc->in, fc->inlen, &fc->h);
                        if (rc == -EAGAIN) {
                                if (fc->eof)
                                        fc_close(fc);
                                return;
                        }
                        if (rc > 0) {
                                fc->keep_alive = false;
                                answer_error(fc, rc, "invalid_request_error", "bad_request",
                                             rc == 431   ? "request head over 64 KiB"
                                             : rc == 414 ? "request target too long"
                                                         : "malformed HTTP request",
                                             true);
                                return;
                        }
                        if (!fc->h.v1) {
                                to_relay(fc); /* not ours: MHD serves it, and the rest of the connection */
                                return;
                        }
                        fc->keep_alive = fc->h.keep_alive;
                        consume(fc, fc->h.head_len);
                        memset(&fc->ch, 0, sizeof(fc->ch));
                        gp_buf_reset(&fc->body);
                        if (fc->h.clen > g->max_body_bytes) {
                                char m[96];
                                snprintf(m, sizeof(m), "request body over %" PRId64 " bytes", g->max_body_bytes);
                                answer_error(fc, 413, "invalid_request_error", "payload_too_large", m, true);
                                return;
                        }
                        if (fc->h.expect && fc->h.clen != 0 && !fc->inlen &&
                            gp_buf_puts(&fc->out, "HTTP/1.1 100 Continue\r\n\r\n") == 0)
                                send_out(fc);
                        fc->state = FS_BODY;
                        fc->body_t0_ms = mono_now();
                        continue;
                }
                if (fc->state != FS_BODY)
                        return;
                if (fc->h.clen >= 0) {
                        size_t need = (size_t)fc->h.clen - fc->body.len;
                        if (!fc->body.len && fc->inlen >= need) {
                                /* the usual case: the body came with its head; no copy */
                                dispatch(fc, fc->in, need);
                                consume(fc, need);
                                return;
                        }
                        size_t take = fc->inlen < need ? fc->inlen : need;
                        if (take && gp_buf_append(&fc->body, fc->in, take) < 0) {
                                fc_close(fc);
                                return;
                        }
                        consume(fc, take);
                        if (fc->body.len < (size_t)fc->h.clen) {
                                if (fc->eof)
                                        fc_close(fc);
                                return;
                        }
                } else {
                        size_t used = 0;
                        int rc = gp_h1_chunked_feed(&fc->ch, fc->in, fc->inlen, &used, body_out, fc);
                        consume(fc, used);
                        if (rc < 0) {
                                char m[96];
                                snprintf(m, sizeof(m), "request body over %" PRId64 " bytes", g->max_body_bytes);
                                fc->keep_alive = false;
                                answer_error(fc, rc == -E2BIG ? 413 : 400, "invalid_request_error",
                                             rc == -E2BIG ? "payload_too_large" : "bad_request",
                                             rc == -E2BIG ? m : "malformed chunked body", true);
                                return;
                        }
                        if (rc == 0) {
                                if (fc->eof)
                                        fc_close(fc);
                                return;
                        }
                }
                dispatch(fc, fc->body.data ? fc->body.data : "", fc->body.len);
                return;
        }
}

/* ------------------------------------------------------------------ */
/* first bytes, MHD's connections and relays                           */

/* Is the request line in b[0..n) for /v1?  1 yes, 0 no, -1 not known yet. */
int gw_front_sniff(const char *b, size_t n) {
        static const char want[] = "/v1";
        size_t i = 0;
        while (i < n && b[i] != ' ') {
                if (b[i] < 'A' || b[i] > 'Z')
                        return 0; /* methods we serve are upper-case tokens; MHD judges the rest */
                i++;
        }
        if (i == n)
                return n < 16 ? -1 : 0;
        for (size_t k = 0; k < 4; k++) {
                if (i + 1 + k >= n)
                        return -1;
                char ch = b[i + 1 + k];
                if (k < 3 ? ch != want[k] : (ch != '/' && ch != '?' && ch != ' '))
                        return 0;
        }
        return 1;
}

/* Give the connection to MHD as it is (nothing of it was read). */
static void to_mhd(fconn *fc) {
        loop *L = fc->L;
        int fd = fc->fd;
        epoll_ctl(L->epfd, EPOLL_CTL_DEL, fd, NULL);
        /* MHD owns fd from here (and closes it itself when it refuses it); it counts
         * against max_connections as MHD's (gp_gw_mhd_conn_started, called from
         * MHD_add_connection) before fc stops counting, and takes over the head's clock
         * and the address's count */
        L->handoff = true;
        L->handoff_t0 = fc->req_t0_ms;
        L->handoff_ip = fc->ip_counted;
        if (L->mhd && MHD_add_connection(L->mhd, fd, (struct sockaddr *)&fc->addr, fc->alen) == MHD_YES)
                L->mhd_kick = true;
        else if (!L->mhd)
                close(fd);
        if (!L->handoff) /* the record took the count */
                fc->ip_counted = false;
        L->handoff = false;
        fc_forget(fc);
}

/* The TLS handshake, as far as it goes; once done, requests are read. */
static void tls_handshake(fconn *fc) {
        int r = gnutls_handshake(fc->tls);
        if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED)
                return; /* an edge brings the rest */
        if (r < 0) {
                gp_debug("tls: handshake failed: %s", gnutls_strerror(r));
                fc_close(fc);
                return;
        }
        fc->state = FS_HEAD;
        fc->readable = true;
        read_more(fc);
        advance(fc);
}

static void start_tls(fconn *fc, gp_tls_keep *k) {
        fc->creds = gp_tls_keep_get(k); /* this session keeps these, whatever a reload brings */
        if (gnutls_init(&fc->tls, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) < 0) {
                fc->tls = NULL;
                fc_close(fc);
                return;
        }
        if (gnutls_set_default_priority(fc->tls) < 0 ||
            gnutls_credentials_set(fc->tls, GNUTLS_CRD_CERTIFICATE, gp_tls_creds_gnutls(fc->creds)) < 0) {
                fc_close(fc);
                return;
        }
        gnutls_certificate_server_set_request(fc->tls, GNUTLS_CERT_IGNORE);
        gnutls_transport_set_int(fc->tls, fc->fd);
        fc->state = FS_TLS;
        tls_handshake(fc);
}

static void sniff(fconn *fc) {
        char b[16];
        ssize_t n = recv(fc->fd, b, sizeof(b), MSG_PEEK);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
        if (n <= 0) {
                fc_close(fc);
                return;
        }
        gw_idle_leave(fc->L, &fc->idle); /* a request has begun */
        gp_tls_keep *k = gp_tls_listener();
        if (k && (unsigned char)b[0] == 0x16) {
                start_tls(fc, k);
                return;
        }
        if (k && !gp_tls_keep_plaintext_any(k) && !is_loopback(&fc->addr)) {
                /* as nginx answers plain HTTP on its https port */
                answer_error(fc, 400, "invalid_request_error", "tls_required",
                             "this port speaks TLS to addresses off loopback: use https://", true);
                return;
        }
        int v = gw_front_sniff(b, (size_t)n);
        if (v < 0)
                return; /* the next bytes bring an edge */
        if (v == 0) {
                to_mhd(fc);
                return;
        }
        fc->state = FS_HEAD;
        fc->readable = true;
        read_more(fc);
        advance(fc);
}

static void relay_pump(fconn *fc);

/* A request not for /v1 on a connection already read from: MHD serves the
 * rest of the connection through a socketpair, starting with what fc
 * holds. */
static void to_relay(fconn *fc) {
        loop *L = fc->L;
        int sp[2];
        if (!L->mhd || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0) {
                fc_close(fc);
                return;
        }
        if (MHD_add_connection(L->mhd, sp[1], (struct sockaddr *)&fc->addr, fc->alen) != MHD_YES) {
                close(sp[0]); /* MHD closed sp[1] */
                fc_close(fc);
                return;
        }
        L->mhd_kick = true;
        fc->rfd = sp[0];
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                 .data.u64 = (uint64_t)(uintptr_t)fc | TAG_RELAY};
        if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, fc->rfd, &ev) < 0) {
                fc_close(fc);
                return;
        }
        fc->state = FS_RELAY;
        fc->deadline_ms = 0; /* MHD times its side out */
        relay_pump(fc);
}

/* Copy bytes both ways until neither side moves. */
static void relay_pump(fconn *fc) {
        bool moved = true;
        while (moved && fc->fd >= 0) {
                moved = false;
                if (fc->inlen) {
                        ssize_t n = send(fc->rfd, fc->in, fc->inlen, MSG_NOSIGNAL);
                        if (n > 0) {
                                consume(fc, (size_t)n);
                                moved = true;
                        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                                fc_close(fc);
                                return;
                        }
                } else if (fc->eof) {
                        /* the client closed its side: MHD is not told (it drops a request
                         * whose client it sees closing); it ends the connection when idle.
                         * Except over TLS, where every first request not for /v1 comes
                         * this way: MHD is told, or each closed connection would hold its
                         * place (and its address's) until MHD's idle timeout */
                        if (fc->tls && !fc->rshut) {
                                shutdown(fc->rfd, SHUT_WR);
                                fc->rshut = true;
                        }
                } else {
                        if (!fc->in && !(fc->in = malloc(FC_IN_START))) {
                                fc_close(fc);
                                return;
                        }
                        if (!fc->incap)
                                fc->incap = FC_IN_START;
                        ssize_t n = fc_recv(fc, fc->in, fc->incap);
                        if (n > 0) {
                                fc->inlen = (size_t)n;
                                moved = true;
                        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                                fc->eof = true;
                                moved = true;
                        }
                }
                if (fc_pending(fc)) {
                        ssize_t n = fc_send(fc, fc->out.data + fc->out_off, fc->out.len - fc->out_off);
                        if (n > 0) {
                                fc->out_off += (size_t)n;
                                if (fc->out_off == fc->out.len) {
                                        gp_buf_reset(&fc->out);
                                        fc->out_off = 0;
                                }
                                moved = true;
                        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                                fc_close(fc);
                                return;
                        }
                } else if (!fc->reof) {
                        char b[16384];
                        ssize_t n = recv(fc->rfd, b, sizeof(b), 0);
                        if (n > 0) {
                                if (gp_buf_append(&fc->out, b, (size_t)n) < 0) {
                                        fc_close(fc);
                                        return;
                                }
                                moved = true;
                        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                                fc->reof = true;
                                moved = true;
                        }
                }
                if (fc->reof && !fc_pending(fc)) {
                        fc_close(fc); /* MHD ended the connection and all of it was sent */
                        return;
                }
        }
}

/* ------------------------------------------------------------------ */
/* the loop's side                                                     */

void gw_front_event(loop *L, uint64_t data, uint32_t events) {
        if (data == TAG_LISTEN) {
                if (L->lfd >= 0)
                        on_accept(L);
                return;
        }
        fconn *fc = (fconn *)(uintptr_t)(data & ~TAG_MASK);
        if (fc->fd < 0)
                return; /* closed earlier in this batch */
        if ((data & TAG_MASK) == TAG_RELAY || fc->state == FS_RELAY) {
                relay_pump(fc);
                return;
        }
        if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                fc->readable = true;
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                fc->hup = true;
        switch (fc->state) {
        case FS_SNIFF:
                sniff(fc);
                return;
        case FS_TLS:
                tls_handshake(fc);
                return;
        case FS_HEAD:
        case FS_BODY:
                read_more(fc);
                advance(fc);
                return;
        case FS_LINGER:
                linger_read(fc);
                return;
        case FS_WAIT:
        case FS_ANSWER:
                /* the client closed or failed while its request runs: end it now
                 * (bytes it sent ahead stay unread until the answer is out).  A
                 * client that closed its side with the request (eof already seen)
                 * still gets the answer. */
                if ((events & (EPOLLHUP | EPOLLERR)) || ((events & EPOLLRDHUP) && !fc->eof)) {
                        fc_close(fc);
                        return;
                }
                if ((events & EPOLLOUT) && fc->state == FS_ANSWER) {
                        produce(fc);
                        send_out(fc);
                }
                return;
        }
}

/* A request that does not arrive in time (server.header_timeout_s for its
 * head, server.min_body_rate_bytes_s for its body): 408, then the
 * connection closes (the client's further bytes are read and dropped a
 * little while, so that the 408 is not lost to a reset). */
static void too_slow(fconn *fc, bool head) {
        gp_gw *g = fc->L->g;
        char m[128];
        if (head)
                snprintf(m, sizeof(m), "request head not received within %" PRId64 " s", g->header_timeout_ms / 1000);
        else
                snprintf(m, sizeof(m), "request body slower than %" PRId64 " bytes/s", g->min_body_rate);
        gw_idle_leave(fc->L, &fc->idle);
        memset(&fc->h, 0, sizeof(fc->h)); /* no request is answered: an HTTP/1.1 answer, with its body */
        fc->keep_alive = false;
        fc->inlen = 0;
        answer_error(fc, 408, "invalid_request_error", "request_timeout", m, true);
}

void gw_front_sweep(loop *L, int64_t now) {
        if (now < L->next_sweep_ms)
                return;
        L->next_sweep_ms = now + SWEEP_MS;
        gp_gw *g = L->g;
        for (fconn *fc = L->fconns; fc;) {
                fconn *next = fc->next;
                if (fc->deadline_ms && now >= fc->deadline_ms)
                        fc_close(fc); /* idle, trickling or not reading past server.connection_timeout_s */
                else if (fc->state == FS_TLS && now - fc->req_t0_ms >= g->header_timeout_ms)
                        fc_close(fc); /* no handshake within server.header_timeout_s: no way to answer */
                else if ((fc->state == FS_SNIFF || fc->state == FS_HEAD) && fc->req_t0_ms &&
                         now - fc->req_t0_ms >= g->header_timeout_ms)
                        too_slow(fc, true);
                else if (fc->state == FS_BODY &&
                         (int64_t)fc->body.len < gw_body_due(fc->body_t0_ms, now, g->header_timeout_ms, g->min_body_rate))
                        too_slow(fc, false);
                fc = next;
        }
        gw_mconn_sweep(L, now);
}

void gw_front_evict(gw_idle *n) {
        fconn *fc = (fconn *)n; /* idle is its first member */
        fc_close(fc);
}

void gw_front_init(loop *L) {
        L->fconns = L->flush = L->fgrave = NULL;
        L->nfconns = 0;
}

void gw_front_close_all(loop *L) {
        gw_front_flush(L);
        while (L->fconns) {
                fconn *fc = L->fconns;
                if (fc->state == FS_ANSWER) {
                        produce(fc);
                        send_out(fc);
                        if (fc->fd < 0)
                                continue;
                }
                fc_close(fc);
        }
        if (L->lfd >= 0) {
                close(L->lfd);
                L->lfd = -1;
        }
        gw_front_flush(L);
}
