/* tls-pump.c - TLS carried over a socketpair by a thread (see tls-pump.h).
 *
 * Invariants: a pump owns its TLS socket, its socketpair end, its session
 * and its credentials (a gp_tls_creds reference, or a client credential it
 * frees), and closes all of them when it ends: when the plain side closes
 * and what it sent went out, or when either side fails.  An acceptor
 * counts its connection threads until they hand their connection over
 * (live); stopping waits for that count to reach 0, so no thread calls the
 * handover once gp_tls_acceptor_stop returned. */
#include "base/tls-pump.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

#define SLICE_MS 200             /* waits look at stopping this often */
#define MAX_WAITING 1024         /* connection threads before their handover */
#define PUMP_BLOCK 16384
#define THREAD_STACK (256 * 1024)

typedef struct pump {
        gnutls_session_t s;
        int tfd;                              /* the TLS side's socket */
        int pfd;                              /* our end of the socketpair */
        gp_tls_creds *creds;                  /* server side: held for the session */
        gnutls_certificate_credentials_t cc;  /* client side: freed at the end */
} pump;

static void pump_free(pump *p) {
        if (p->s)
                gnutls_deinit(p->s);
        if (p->tfd >= 0)
                close(p->tfd);
        if (p->pfd >= 0)
                close(p->pfd);
        gp_tls_creds_unref(p->creds);
        if (p->cc)
                gnutls_certificate_free_credentials(p->cc);
        free(p);
}

/* Carry bytes both ways until the plain side is done or a side fails. */
static void *pump_main(void *arg) {
        pump *p = arg;
        char *a = malloc(PUMP_BLOCK), *b = malloc(PUMP_BLOCK); /* a: TLS to plain, b: plain to TLS */
        size_t alen = 0, aoff = 0, blen = 0, boff = 0;
        bool teof = false, peof = false, wpend = false;
        while (a && b) {
                bool moved = false;
                if (aoff == alen && !teof) {
                        ssize_t n = gnutls_record_recv(p->s, a, PUMP_BLOCK);
                        if (n > 0) {
                                alen = (size_t)n;
                                aoff = 0;
                                moved = true;
                        } else if (n != GNUTLS_E_AGAIN && n != GNUTLS_E_INTERRUPTED) {
                                teof = true; /* the peer closed (or failed): the plain side is told */
                                shutdown(p->pfd, SHUT_WR);
                                moved = true;
                        }
                }
                if (aoff < alen) {
                        ssize_t n = send(p->pfd, a + aoff, alen - aoff, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (n > 0) {
                                aoff += (size_t)n;
                                moved = true;
                        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                                break;
                        }
                }
                if (boff == blen && !peof) {
                        ssize_t n = recv(p->pfd, b, PUMP_BLOCK, MSG_DONTWAIT);
                        if (n > 0) {
                                blen = (size_t)n;
                                boff = 0;
                                moved = true;
                        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                                peof = true;
                                moved = true;
                        }
                }
                if (boff < blen) {
                        /* after EAGAIN GnuTLS holds the record it made: sent again, not made anew */
                        ssize_t n = wpend ? gnutls_record_send(p->s, NULL, 0)
                                          : gnutls_record_send(p->s, b + boff, blen - boff);
                        if (n >= 0) {
                                wpend = false;
                                boff += (size_t)n;
                                moved = true;
                        } else if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
                                wpend = true;
                        } else {
                                break;
                        }
                }
                if (peof && boff == blen)
                        break; /* the plain side ended and all it sent went out */
                if (moved || (aoff == alen && !teof && gnutls_record_check_pending(p->s)))
                        continue;
                struct pollfd f[2] = {{.fd = p->tfd}, {.fd = p->pfd}};
                if (aoff == alen && !teof)
                        f[0].events |= POLLIN;
                if (boff < blen)
                        f[0].events |= POLLOUT;
                if (boff == blen && !peof)
                        f[1].events |= POLLIN;
                if (aoff < alen)
                        f[1].events |= POLLOUT;
                if (poll(f, 2, -1) < 0 && errno != EINTR)
                        break;
        }
        if (a && b && peof)
                (void)gnutls_bye(p->s, GNUTLS_SHUT_WR); /* best effort: close_notify */
        free(a);
        free(b);
        pump_free(p);
        return NULL;
}

static int spawn(void *(*fn)(void *), void *arg) {
        pthread_attr_t at;
        pthread_t t;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, THREAD_STACK);
        int e = pthread_create(&t, &at, fn, arg);
        pthread_attr_destroy(&at);
        return -e;
}

/* Drive the handshake of p->s until done, the deadline or *stop: 0 or -EPROTO/-ETIMEDOUT. */
static int handshake(pump *p, int64_t deadline, const bool *stop) {
        for (;;) {
                int r = gnutls_handshake(p->s);
                if (r == 0)
                        return 0;
                if (r != GNUTLS_E_AGAIN && r != GNUTLS_E_INTERRUPTED) {
                        gp_debug("tls: handshake failed: %s", gnutls_strerror(r));
                        return -EPROTO;
                }
                int64_t left = deadline - gp_mono_ms();
                if (left <= 0 || (stop && __atomic_load_n(stop, __ATOMIC_RELAXED)))
                        return -ETIMEDOUT;
                struct pollfd f = {.fd = p->tfd,
                                   .events = gnutls_record_get_direction(p->s) ? POLLOUT : POLLIN};
                if (poll(&f, 1, (int)(left < SLICE_MS ? left : SLICE_MS)) < 0 && errno != EINTR)
                        return -EPROTO;
        }
}

/* ---- server side ---- */

struct gp_tls_acceptor {
        int lfd;
        gp_tls_keep *k;
        int timeout_ms;
        gp_iplimit *ipl;          /* server.max_connections_per_ip */
        gp_tls_handoff_fn fn;
        void *ud;
        bool stop;                /* atomic */
        pthread_t thread;
        pthread_mutex_t mu;       /* live */
        pthread_cond_t cv;
        int live;                 /* connection threads before their handover */
};

typedef struct conn {
        gp_tls_acceptor *a;
        int fd;
        struct sockaddr_storage sa;
        socklen_t sl;
        bool counted;             /* in a->ipl until handed over */
} conn;

static bool loopback(const struct sockaddr_storage *sa) {
        if (sa->ss_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
        if (sa->ss_family == AF_INET6) {
                const struct in6_addr *x = &((const struct sockaddr_in6 *)sa)->sin6_addr;
                return IN6_IS_ADDR_LOOPBACK(x) || (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127);
        }
        return false;
}

/* c's connection was not handed over: its address's count goes back. */
static void uncount(conn *c) {
        if (c->counted)
                gp_iplimit_put(c->a->ipl, (struct sockaddr *)&c->sa);
        c->counted = false;
}

static void refuse_per_ip(int fd) {
        static const char msg[] = "HTTP/1.1 429 Too Many Requests\r\n"
                                  "Content-Type: application/json\r\n"
                                  "Content-Length: 93\r\n"
                                  "Connection: close\r\n\r\n"
                                  "{\"error\":{\"code\":\"too_many_connections\",\"message\":"
                                  "\"too many connections from this address\"}}\n";
        (void)!send(fd, msg, sizeof(msg) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        close(fd);
}

static void handed(gp_tls_acceptor *a) {
        pthread_mutex_lock(&a->mu);
        if (--a->live == 0)
                pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
}

#define REFUSE_BODY                                                                                                   \
        "{\"error\":{\"type\":\"invalid_request_error\",\"code\":\"tls_required\",\"message\":"                         \
        "\"this port speaks TLS to addresses off loopback: use https://\"}}"
_Static_assert(sizeof(REFUSE_BODY) - 1 == 137, "Content-Length below is the body's length");

static void refuse_plaintext(int fd) {
        static const char msg[] = "HTTP/1.1 400 Bad Request\r\n"
                                  "Content-Type: application/json\r\n"
                                  "Content-Length: 137\r\n"
                                  "Connection: close\r\n\r\n" REFUSE_BODY;
        (void)!send(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(fd, SHUT_WR);
        char junk[4096]; /* what the client still sends, briefly, so that the close is no reset */
        struct pollfd f = {.fd = fd, .events = POLLIN};
        for (int i = 0; i < 10 && poll(&f, 1, 100) > 0; i++)
                if (recv(fd, junk, sizeof(junk), MSG_DONTWAIT) <= 0)
                        break;
        close(fd);
}

static void *conn_main(void *arg) {
        conn *c = arg;
        gp_tls_acceptor *a = c->a;
        int64_t deadline = gp_mono_ms() + a->timeout_ms;
        unsigned char first = 0;
        for (;;) {
                ssize_t n = recv(c->fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
                if (n == 1)
                        break;
                int64_t left = deadline - gp_mono_ms();
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || left <= 0 ||
                    __atomic_load_n(&a->stop, __ATOMIC_RELAXED)) {
                        close(c->fd);
                        uncount(c);
                        goto done;
                }
                struct pollfd f = {.fd = c->fd, .events = POLLIN};
                poll(&f, 1, (int)(left < SLICE_MS ? left : SLICE_MS));
        }
        if (first != 0x16) {
                if (!gp_tls_keep_plaintext_any(a->k) && !loopback(&c->sa)) {
                        refuse_plaintext(c->fd);
                        uncount(c);
                } else if (a->fn(a->ud, c->fd, (struct sockaddr *)&c->sa, c->sl) < 0) {
                        uncount(c);
                }
                goto done;
        }
        pump *p = calloc(1, sizeof(*p));
        if (!p) {
                close(c->fd);
                uncount(c);
                goto done;
        }
        p->tfd = c->fd;
        p->pfd = -1;
        p->creds = gp_tls_keep_get(a->k);
        int sp[2];
        if (gnutls_init(&p->s, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) < 0) {
                p->s = NULL;
                goto fail;
        }
        if (gnutls_set_default_priority(p->s) < 0 ||
            gnutls_credentials_set(p->s, GNUTLS_CRD_CERTIFICATE, gp_tls_creds_gnutls(p->creds)) < 0)
                goto fail;
        gnutls_certificate_server_set_request(p->s, GNUTLS_CERT_IGNORE);
        gnutls_transport_set_int(p->s, p->tfd);
        if (handshake(p, deadline, &a->stop) < 0 ||
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0)
                goto fail;
        p->pfd = sp[0];
        if (a->fn(a->ud, sp[1], (struct sockaddr *)&c->sa, c->sl) < 0) /* it closed sp[1] */
                goto fail;
        handed(a);
        free(c);
        pump_main(p);
        return NULL;
fail:
        pump_free(p);
        uncount(c);
done:
        handed(a);
        free(c);
        return NULL;
}

static void *accept_main(void *arg) {
        gp_tls_acceptor *a = arg;
        while (!__atomic_load_n(&a->stop, __ATOMIC_RELAXED)) {
                struct pollfd f = {.fd = a->lfd, .events = POLLIN};
                if (poll(&f, 1, SLICE_MS) <= 0)
                        continue;
                conn *c = calloc(1, sizeof(*c));
                if (!c)
                        continue;
                c->sl = sizeof(c->sa);
                c->fd = accept4(a->lfd, (struct sockaddr *)&c->sa, &c->sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (c->fd < 0) {
                        free(c);
                        continue;
                }
                c->a = a;
                int ipc = gp_iplimit_take(a->ipl, (struct sockaddr *)&c->sa);
                if (ipc < 0) { /* its address holds server.max_connections_per_ip already */
                        refuse_per_ip(c->fd);
                        free(c);
                        continue;
                }
                c->counted = ipc == 0;
                pthread_mutex_lock(&a->mu);
                bool room = a->live < MAX_WAITING;
                if (room)
                        a->live++;
                pthread_mutex_unlock(&a->mu);
                if (!room || spawn(conn_main, c) < 0) {
                        if (room)
                                handed(a);
                        close(c->fd);
                        uncount(c);
                        free(c);
                }
        }
        return NULL;
}

int gp_tls_acceptor_start(int lfd, gp_tls_keep *k, int timeout_ms, gp_iplimit *ipl, gp_tls_handoff_fn fn, void *ud,
                          gp_tls_acceptor **ret) {
        gp_tls_acceptor *a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->lfd = lfd;
        a->k = k;
        a->timeout_ms = timeout_ms;
        a->ipl = ipl;
        a->fn = fn;
        a->ud = ud;
        pthread_mutex_init(&a->mu, NULL);
        pthread_cond_init(&a->cv, NULL);
        int e = pthread_create(&a->thread, NULL, accept_main, a);
        if (e) {
                pthread_cond_destroy(&a->cv);
                pthread_mutex_destroy(&a->mu);
                free(a);
                return -e;
        }
        *ret = a;
        return 0;
}

void gp_tls_acceptor_stop(gp_tls_acceptor *a) {
        if (!a)
                return;
        __atomic_store_n(&a->stop, true, __ATOMIC_RELAXED);
        pthread_join(a->thread, NULL);
        pthread_mutex_lock(&a->mu);
        while (a->live > 0)
                pthread_cond_wait(&a->cv, &a->mu); /* each one looks at stop every SLICE_MS */
        pthread_mutex_unlock(&a->mu);
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
        free(a);
}

/* ---- client side ---- */

int gp_tls_pump_dial(int fd, const char *host, const char *ca_pem, size_t ca_len, int timeout_ms) {
        pump *p = calloc(1, sizeof(*p));
        if (!p) {
                close(fd);
                return -ENOMEM;
        }
        p->tfd = fd;
        p->pfd = -1;
        int r = -ENOMEM, sp[2] = {-1, -1};
        void *cc = NULL;
        if (gp_tls_client_creds(ca_pem, ca_len, &cc) < 0)
                goto fail;
        p->cc = cc;
        if (gnutls_init(&p->s, GNUTLS_CLIENT | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) < 0) {
                p->s = NULL;
                goto fail;
        }
        unsigned char ip[16];
        if (gnutls_set_default_priority(p->s) < 0 || gnutls_credentials_set(p->s, GNUTLS_CRD_CERTIFICATE, p->cc) < 0 ||
            (inet_pton(AF_INET, host, ip) != 1 && inet_pton(AF_INET6, host, ip) != 1 &&
             gnutls_server_name_set(p->s, GNUTLS_NAME_DNS, host, strlen(host)) < 0))
                goto fail;
        gnutls_session_set_verify_cert(p->s, host, 0);
        gnutls_transport_set_int(p->s, p->tfd);
        r = handshake(p, gp_mono_ms() + timeout_ms, NULL);
        if (r < 0)
                goto fail;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0) {
                r = -errno;
                goto fail;
        }
        p->pfd = sp[1];
        r = spawn(pump_main, p);
        if (r < 0) {
                close(sp[0]);
                goto fail;
        }
        return sp[0];
fail:
        pump_free(p);
        return r;
}
