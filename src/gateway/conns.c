/* conns.c - the connection guard: no client holds the server.
 *
 * Three limits that libmicrohttpd 0.9.75 does not keep, for the loops'
 * connections of both kinds (the front's, front.c, and MHD's):
 *   - server.header_timeout_s: a request head arrives whole within it,
 *     counted from its first byte (from accept for a connection's first
 *     request).  MHD's own timeout counts idle time only, so a client
 *     trickling header bytes was never cut;
 *   - server.min_body_rate_bytes_s: after a grace of header_timeout_s a
 *     body comes at least this fast on average (gw_body_due);
 *   - server.max_connections_per_ip: open connections per client address
 *     (g->ipl, base/iplimit.h), shared by the loops.
 * And near server.max_connections (over 90% of the loop's share) the
 * oldest idle connection (a new one that sent nothing yet, or a kept-alive
 * one between requests) is closed to make room for the one accepted.
 *
 * MHD connections are watched through their notifications
 * (gp_gw_mhd_conn_started/closed, the handler's calls, the completion
 * callback) and their socket, which is also in the loop's epoll set
 * (edge-triggered, TAG_MCONN): an edge on a connection that was idle, with
 * bytes still unread by MHD (looked at before MHD runs in that pass), is
 * the first bytes of its next request.  One that runs late is shut down
 * (shutdown(SHUT_RDWR), after a 408 when nothing of an answer was sent):
 * MHD then reads the end of the stream and closes it itself.
 *
 * Invariants (owning loop): a gw_mconn is in L->mconns from its start to
 * its close notification; in L->idle exactly while its phase is MC_IDLE
 * and it was not cut; L->ncut counts records with cut set. */
#include "gateway/gw-internal.h"

#include "base/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t mono_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ */
/* idle connections                                                    */

void gw_idle_leave(loop *L, gw_idle *n) {
        if (!n->in)
                return;
        if (n->prev)
                n->prev->next = n->next;
        else
                L->idle_head = n->next;
        if (n->next)
                n->next->prev = n->prev;
        else
                L->idle_tail = n->prev;
        n->prev = n->next = NULL;
        n->in = false;
}

void gw_idle_enter(loop *L, gw_idle *n, int64_t now) {
        gw_idle_leave(L, n);
        n->since_ms = now;
        n->prev = L->idle_tail;
        n->next = NULL;
        if (L->idle_tail)
                L->idle_tail->next = n;
        else
                L->idle_head = n;
        L->idle_tail = n;
        n->in = true;
}

static const char timeout_408[] = "HTTP/1.1 408 Request Timeout\r\n"
                                   "Content-Type: application/json\r\n"
                                   "Content-Length: 84\r\n"
                                   "Connection: close\r\n\r\n"
                                   "{\"error\":{\"code\":\"request_timeout\",\"message\":\"the request did not arrive in time\"}}\n";

/* Shut m down: MHD reads the end of its stream and closes it (and says so). */
static void mconn_cut(gw_mconn *m, bool say_408) {
        loop *L = m->L;
        if (m->cut || m->fd < 0)
                return;
        if (say_408) /* best effort: nothing of an answer went out on this request */
                (void)!send(m->fd, timeout_408, sizeof(timeout_408) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        shutdown(m->fd, SHUT_RDWR);
        m->cut = true;
        L->ncut++;
        gw_idle_leave(L, &m->idle);
        L->mhd_kick = true;
}

/* Close the oldest idle connection but spare.  One whose client has sent
 * bytes that were not looked at yet (an edge still to come in this batch,
 * or MHD has not run since) began a request: it leaves the list instead. */
static bool evict_oldest(loop *L, const gw_idle *spare) {
        gw_idle *n = L->idle_head;
        while (n && n != spare) {
                gw_idle *next = n->next;
                gw_idle_leave(L, n);
                char b;
                if (recv(n->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
                        if (n->mhd) {
                                gw_mconn *m = (gw_mconn *)n;
                                m->phase = MC_HEAD;
                                m->t0_ms = mono_now();
                        }
                        n = next;
                        continue;
                }
                if (n->mhd)
                        mconn_cut((gw_mconn *)n, false);
                else
                        gw_front_evict(n);
                return true;
        }
        return false;
}

/* The loop's connections not already on their way out, and its share of
 * server.max_connections above which idle ones make room. */
static int live_conns(const loop *L) {
        return L->nfconns + L->nmhdconns - L->ncut;
}

static int high_water(const loop *L) {
        return L->g->front_max_conns * 9 / 10;
}

void gw_conns_after_accept(loop *L) {
        if (live_conns(L) > high_water(L))
                evict_oldest(L, L->idle_tail); /* never the one just accepted */
}

void gw_conns_balance(loop *L) {
        if (!L->accept_paused || L->lfd < 0 || !L->idle_head)
                return;
        if (live_conns(L) < L->g->front_max_conns)
                return; /* a connection already cut frees a slot soon */
        struct pollfd p = {.fd = L->lfd, .events = POLLIN};
        if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN))
                evict_oldest(L, NULL); /* somebody waits in the kernel's queue */
}

int64_t gw_body_due(int64_t t0_ms, int64_t now_ms, int64_t grace_ms, int64_t rate) {
        int64_t late = now_ms - t0_ms - grace_ms;
        if (late <= 0 || rate <= 0)
                return 0;
        if (late > INT64_MAX / rate)
                return INT64_MAX;
        return late * rate / 1000;
}

/* ------------------------------------------------------------------ */
/* MHD's connections                                                   */

static gw_mconn *mconn_of(struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return ci ? ci->socket_context : NULL;
}

void gp_gw_mhd_conn_started(struct MHD_Connection *conn, void **socket_context) {
        loop *L = gw_tl_loop;
        if (!L)
                return; /* not on a loop: nothing starts there */
        L->nmhdconns++;
        bool handoff = L->handoff, ip = L->handoff_ip;
        int64_t t0 = L->handoff ? L->handoff_t0 : mono_now();
        L->handoff = false; /* taken: from here the record holds the address's count */
        gw_mconn *m = calloc(1, sizeof(*m));
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!m || !fi) {
                free(m);
                if (handoff && ip && ai && ai->client_addr)
                        gp_iplimit_put(&L->g->ipl, ai->client_addr); /* only counted against max_connections */
                return;
        }
        m->idle.mhd = true;
        m->L = L;
        m->conn = conn;
        m->fd = m->idle.fd = fi->connect_fd;
        if (ai && ai->client_addr) {
                size_t n = ai->client_addr->sa_family == AF_INET6  ? sizeof(struct sockaddr_in6)
                           : ai->client_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                   : sizeof(struct sockaddr);
                memcpy(&m->addr, ai->client_addr, n);
                m->ip_counted = handoff && ip;
        }
        /* MHD gets a connection with a request begun: the front saw its first bytes */
        m->phase = MC_HEAD;
        m->t0_ms = t0;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)(uintptr_t)m | TAG_MCONN};
        if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, m->fd, &ev) < 0)
                gp_warn("http: cannot watch a connection for header timeouts: %s", strerror(errno));
        m->next = L->mconns;
        if (L->mconns)
                L->mconns->prev = m;
        L->mconns = m;
        *socket_context = m;
}

void gp_gw_mhd_conn_closed(void **socket_context) {
        loop *L = gw_tl_loop; /* NULL in MHD_stop_daemon, after the loops ended */
        gw_mconn *m = *socket_context;
        if (L)
                L->nmhdconns--;
        if (m) {
                loop *ML = m->L;
                if (L && m->fd >= 0)
                        epoll_ctl(ML->epfd, EPOLL_CTL_DEL, m->fd, NULL); /* before MHD closes it */
                if (m->cut)
                        ML->ncut--;
                gw_idle_leave(ML, &m->idle);
                if (m->prev)
                        m->prev->next = m->next;
                else
                        ML->mconns = m->next;
                if (m->next)
                        m->next->prev = m->prev;
                if (m->ip_counted)
                        gp_iplimit_put(&ML->g->ipl, (struct sockaddr *)&m->addr);
                free(m);
                *socket_context = NULL;
        }
        if (L)
                gw_front_accept_resume(L);
}

void gp_gw_mhd_progress(struct MHD_Connection *conn, bool first, size_t body_bytes) {
        gw_mconn *m = mconn_of(conn);
        if (!m || !gw_tl_loop)
                return;
        if (first) {
                gw_idle_leave(m->L, &m->idle);
                m->phase = MC_BODY;
                m->t0_ms = mono_now();
                m->body_bytes = 0;
        } else if (body_bytes) {
                m->body_bytes += body_bytes;
        } else if (m->phase == MC_BODY) {
                m->phase = MC_BUSY; /* served from here: parked, answering, following a log */
        }
}

void gp_gw_mhd_request_done(struct MHD_Connection *conn) {
        gw_mconn *m = mconn_of(conn);
        if (!m || !gw_tl_loop)
                return;
        int64_t now = mono_now();
        m->phase = MC_IDLE;
        m->t0_ms = now;
        if (!m->cut)
                gw_idle_enter(m->L, &m->idle, now);
}

void gw_mconn_event(loop *L, uint64_t data) {
        gw_mconn *m = (gw_mconn *)(uintptr_t)(data & ~TAG_MASK);
        if (m->phase != MC_IDLE || m->cut)
                return;
        /* MHD has not run in this pass yet: bytes it has not read are a new request's */
        char b;
        if (recv(m->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
                m->phase = MC_HEAD;
                m->t0_ms = mono_now();
                gw_idle_leave(L, &m->idle);
        }
}

int gw_watch_client(loop *L, gw_req *q) {
        gw_mconn *m = q->conn ? mconn_of(q->conn) : NULL;
        struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = q};
        if (m && epoll_ctl(L->epfd, EPOLL_CTL_MOD, q->client_fd, &ev) == 0)
                return 0;
        if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, q->client_fd, &ev) < 0) /* not in the set (or no record) */
                return -errno;
        return 0;
}

void gw_unwatch_client(gw_req *q) {
        gw_mconn *m = q->conn ? mconn_of(q->conn) : NULL;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET,
                                 .data.u64 = (uint64_t)(uintptr_t)m | TAG_MCONN};
        /* the record's registration back (the set must not name q once it is freed) */
        if (!m || epoll_ctl(q->L->epfd, EPOLL_CTL_MOD, q->client_fd, &ev) < 0)
                epoll_ctl(q->L->epfd, EPOLL_CTL_DEL, q->client_fd, NULL);
}

void gw_mconn_sweep(loop *L, int64_t now) {
        gp_gw *g = L->g;
        for (gw_mconn *m = L->mconns; m; m = m->next) {
                if (m->cut)
                        continue;
                if (m->phase == MC_HEAD && now - m->t0_ms >= g->header_timeout_ms)
                        mconn_cut(m, true);
                else if (m->phase == MC_BODY &&
                         (int64_t)m->body_bytes < gw_body_due(m->t0_ms, now, g->header_timeout_ms, g->min_body_rate))
                        mconn_cut(m, true);
        }
}
