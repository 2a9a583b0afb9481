/* relay.c - the server's end of a model replica's relay (see relay.h).
 *
 * Invariants: nothing leaves this machine in clear: every connection goes
 * to the agent over TLS verified against the cluster CA (the listener's
 * keeper's) and the node's host, or not at all; the token is sent only
 * inside that session.  The listening socket is bound to 127.0.0.1 only,
 * and carries only this process's own connections (the gateway's, the
 * readiness probe's: their ports noted, base/ownport.h): another local
 * process's gets a 502 and is closed, no thread, no slot, so it neither
 * reaches the replica past the gateway's keys nor holds the slots.
 * live_conns <= max_conns: a connection over it gets a 502, no thread. */
#include "server/relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/ownport.h"
#include "base/splice.h"
#include "base/tls-keep.h"
#include "base/url.h"
#include "cluster/proto-cert.h"
#include "base/util.h"
#include "base/tls-pump.h"

#define CONNECT_MS 5000
#define IDLE_MS (15 * 60000)
#define SLICE_MS 200
#define THREAD_STACK (128 * 1024)

/* Connections carried now, by every relay of this process (each a thread
 * and a TLS session to a node; they may outlive their relay).  Only this
 * process's own are carried: the gateway opens at most
 * gateway.max_upstream_connections to all its upstreams, the readiness
 * probe one at a time (max_conns is their sum); the cap is a bound on
 * threads should that ever not hold, answered 502, not a thread each. */
static int live_conns;       /* atomic */
static int64_t refused_log_ms; /* atomic: when the last refusal was logged (one a minute) */
static int64_t foreign_log_ms; /* atomic: ... of another process's connection */

/* Log at most once a minute (last: the minute's clock). */
static bool log_due(int64_t *last_ms) {
        int64_t now = gp_mono_ms(), last = __atomic_load_n(last_ms, __ATOMIC_RELAXED);
        return (last == 0 || now - last >= 60000) &&
               __atomic_compare_exchange_n(last_ms, &last, now, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

struct gp_relay {
        char url[300];                   /* https://HOST:PORT of the agent */
        char host[256], port[8];
        char line[GP_PROTO_RELAY_LINE_MAX];    /* "GPUPOOL-RELAY NAME TOKEN\n" */
        char name[64], token[GP_PROTO_RELAY_LINE_MAX];
        int lfd, lport;
        int max_conns;                   /* of live_conns, when accepting */
        pthread_t th;
        volatile int stop;               /* atomic */
};

typedef struct conn {
        int client;
        char host[256], port[8];
        char line[GP_PROTO_RELAY_LINE_MAX];
} conn;

/* A TCP connection to host:port within CONNECT_MS (non-blocking), or -errno. */
static int dial_tcp(const char *host, const char *port) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
        if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
                return -EHOSTUNREACH;
        int fd = -ECONNREFUSED;
        for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
                int s = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (s < 0)
                        continue;
                if (connect(s, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
                        fd = -errno;
                        close(s);
                        continue;
                }
                struct pollfd p = {.fd = s, .events = POLLOUT};
                int err = 0;
                socklen_t el = sizeof(err);
                if (poll(&p, 1, CONNECT_MS) != 1 || getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
                        fd = err ? -err : -ETIMEDOUT;
                        close(s);
                        continue;
                }
                int on = 1;
                setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
                fd = s;
        }
        freeaddrinfo(ai);
        return fd;
}

/* What the gateway gets when the node cannot be reached safely. */
static void answer_502(int fd, const char *why) {
        char msg[600];
        int ml = gp_proto_relay_refusal(msg, sizeof(msg), why);
        if (ml > 0)
                (void)!send(fd, msg, (size_t)ml, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void *conn_main(void *arg) {
        conn *c = arg;
        int up = dial_tcp(c->host, c->port);
        if (up >= 0) {
                gp_tls_keep *k = gp_tls_listener();
                gp_tls_creds *cr = k ? gp_tls_keep_get(k) : NULL;
                size_t calen = 0;
                const char *ca = cr ? gp_tls_creds_ca_pem(cr, &calen) : NULL;
                if (ca) {
                        up = gp_tls_pump_dial(up, c->host, ca, calen, CONNECT_MS);
                } else {
                        close(up);
                        up = -ENOENT;
                }
                gp_tls_creds_unref(cr);
        }
        size_t ll = strlen(c->line);
        if (up >= 0 && send(up, c->line, ll, MSG_NOSIGNAL) != (ssize_t)ll) {
                close(up);
                up = -EIO;
        }
        explicit_bzero(c->line, sizeof(c->line));
        if (up < 0) {
                gp_warn("relay to %s:%s: %s%s", c->host, c->port, strerror(-up),
                        up == -EPROTO ? " (the node's certificate failed the check against the cluster CA)" : "");
                answer_502(c->client, up == -EPROTO ? "the node failed the TLS check" : "the node is unreachable");
        } else {
                gp_splice_fds(c->client, up, IDLE_MS);
                close(up);
        }
        close(c->client);
        free(c);
        __atomic_sub_fetch(&live_conns, 1, __ATOMIC_RELAXED);
        return NULL;
}

static void *accept_main(void *arg) {
        gp_relay *r = arg;
        while (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
                struct pollfd p = {.fd = r->lfd, .events = POLLIN};
                if (poll(&p, 1, SLICE_MS) != 1)
                        continue;
                struct sockaddr_storage from;
                socklen_t fl = sizeof(from);
                int fd = accept4(r->lfd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                if (!gp_ownport_is_own((struct sockaddr *)&from)) {
                        if (log_due(&foreign_log_ms))
                                gp_warn("relay: a connection from 127.0.0.1:%d, not this server's gateway, "
                                        "refused (one a minute is logged)",
                                        from.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&from)->sin_port) : 0);
                        answer_502(fd, "only this server's gateway may use its relay");
                        close(fd);
                        continue;
                }
                if (__atomic_add_fetch(&live_conns, 1, __ATOMIC_RELAXED) > r->max_conns) {
                        __atomic_sub_fetch(&live_conns, 1, __ATOMIC_RELAXED);
                        if (log_due(&refused_log_ms))
                                gp_warn("relay: %d connections carried already (gateway.max_upstream_connections "
                                        "and the readiness probe's): more are refused", r->max_conns);
                        answer_502(fd, "too many relay connections");
                        close(fd);
                        continue;
                }
                conn *c = calloc(1, sizeof(*c));
                if (!c) {
                        __atomic_sub_fetch(&live_conns, 1, __ATOMIC_RELAXED);
                        close(fd);
                        continue;
                }
                c->client = fd;
                memcpy(c->host, r->host, sizeof(c->host));
                memcpy(c->port, r->port, sizeof(c->port));
                memcpy(c->line, r->line, sizeof(c->line));
                if (gp_thread_detached(conn_main, c, THREAD_STACK) < 0) {
                        __atomic_sub_fetch(&live_conns, 1, __ATOMIC_RELAXED);
                        answer_502(fd, "out of threads");
                        close(fd);
                        explicit_bzero(c->line, sizeof(c->line));
                        free(c);
                }
        }
        return NULL;
}

int gp_relay_open(const char *agent_url, const char *run_name, const char *token, int max_conns,
                  gp_relay **ret) {
        if (!agent_url || strncmp(agent_url, "https://", 8) || strlen(agent_url) >= 300 || !run_name || !token ||
            max_conns < 1)
                return -EINVAL;
        if (!gp_tls_listener())
                return -ENOENT;
        gp_relay *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->lfd = -1;
        r->max_conns = max_conns;
        gp_strlcpy(r->url, agent_url, sizeof(r->url));
        char plain[310];
        snprintf(plain, sizeof(plain), "http://%s", agent_url + 8); /* gp_http_url_parse reads http:// */
        gp_http_url u;
        int n = snprintf(r->line, sizeof(r->line), "%s%s %s\n", GP_PROTO_RELAY_MAGIC, run_name, token);
        char nm[64], tk[GP_PROTO_RELAY_LINE_MAX];
        if (gp_http_url_parse(plain, &u) < 0 || u.host_len >= sizeof(r->host) || n < 0 ||
            (size_t)n >= sizeof(r->line) ||
            gp_proto_relay_parse(r->line, (size_t)n, nm, sizeof(nm), tk, sizeof(tk)) < 0) {
                explicit_bzero(r->line, sizeof(r->line));
                free(r);
                return -EINVAL;
        }
        explicit_bzero(tk, sizeof(tk));
        memcpy(r->host, u.host, u.host_len);
        r->host[u.host_len] = '\0';
        gp_strlcpy(r->port, u.port, sizeof(r->port));
        gp_strlcpy(r->name, run_name, sizeof(r->name));
        gp_strlcpy(r->token, token, sizeof(r->token));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof(sa);
        int rc;
        r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(r->lfd, 64) < 0 ||
            getsockname(r->lfd, (struct sockaddr *)&sa, &sl) < 0) {
                rc = -errno;
                goto fail;
        }
        r->lport = ntohs(sa.sin_port);
        if ((rc = pthread_create(&r->th, NULL, accept_main, r)) != 0) {
                rc = -rc;
                goto fail;
        }
        *ret = r;
        return 0;
fail:
        if (r->lfd >= 0)
                close(r->lfd);
        explicit_bzero(r, sizeof(*r));
        free(r);
        return rc;
}

int gp_relay_port(const gp_relay *r) {
        return r->lport;
}

bool gp_relay_matches(const gp_relay *r, const char *agent_url, const char *run_name, const char *token) {
        return r && !strcmp(r->url, agent_url) && !strcmp(r->name, run_name) && !strcmp(r->token, token);
}

void gp_relay_close(gp_relay *r) {
        if (!r)
                return;
        __atomic_store_n(&r->stop, 1, __ATOMIC_RELAXED);
        pthread_join(r->th, NULL);
        close(r->lfd);
        explicit_bzero(r, sizeof(*r));
        free(r);
}

void gp_relay_keep(gp_relay **rp, const char *agent_url, const char *run_name, const char *token, int max_conns,
                   const char *direct_host, int direct_port, const char **ret_host, int *ret_port) {
        bool want = agent_url && !strncmp(agent_url, "https://", 8) && run_name && run_name[0] && token && token[0];
        if (*rp && (!want || !gp_relay_matches(*rp, agent_url, run_name, token))) {
                gp_relay_close(*rp);
                *rp = NULL;
        }
        if (want && !*rp) {
                int rc = gp_relay_open(agent_url, run_name, token, max_conns, rp);
                if (rc == 0)
                        gp_info("relay: run %s reached over TLS through its agent %s (gateway side 127.0.0.1:%d)",
                                run_name, agent_url, gp_relay_port(*rp));
                else if (rc != -ENOENT) { /* never in clear instead: not reachable until it opens */
                        gp_warn("relay: run %s through %s: %s", run_name, agent_url, strerror(-rc));
                        *ret_host = direct_host;
                        *ret_port = 0;
                        return;
                }
        }
        *ret_host = *rp ? "127.0.0.1" : direct_host;
        *ret_port = *rp ? gp_relay_port(*rp) : direct_port;
}
