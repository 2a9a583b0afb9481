/* follower.c - what a server that does not lead answers (cluster.server_id
 * set, another server holds the leader lease; docs/deployment.md "Several
 * servers").
 *
 * One MHD daemon per listening socket of gp_http_bind (each on a dup of
 * it, so stopping the follower leaves the sockets to the real HTTP loops
 * of the daemon once this server leads; quiesced before stopping, so MHD
 * never shuts the shared socket down), a thread per connection.
 *
 * Every request is forwarded to the leader (forward.h) and its answer
 * relayed as it comes (a stream such as `logs -f` or a /v1 SSE answer
 * included), except:
 *   - GET /healthz: 200 {"status": "follower", "leader": ID} here (alive);
 *   - GET /readyz: 503 {"status": "follower", ...} here, so a load
 *     balancer that checks /readyz sends the traffic to the leader;
 *   - GET /api/v1/coordinator/health: 200 here, about this server (its id,
 *     role follower, whether its store answered lately, the leader it knows);
 *   - /agent/...: 503 standby: agents move on to the leader in their URL
 *     list (a held sync per node would hold a thread here);
 *   - a request another server forwarded already: 503 standby (no loops);
 *   - the leader not known, or not reachable (the connection refused or
 *     timed out): 503 standby with Retry-After: 1, nothing was sent, so the
 *     CLI moves on to the next URL of its list;
 *   - the leader went away after the request was sent, before its answer
 *     came: a write (it carries an Idempotency-Key, the client's or one
 *     added here) gets a definite answer once the old leader is fenced
 *     (follower-idem.h): its kept answer, or 503 not_carried_out; a read
 *     gets 502 leader_unreachable (nothing to carry out twice).
 * A client connection keeps its connection to the leader for its next
 * request while the leader keeps it open and it was idle less than KEEP_MS
 * (the leader closes idle ones after server.connection_timeout_s, 60 s by
 * default); a body over max_body bytes is read to its end and dropped,
 * then answered 413 (as the leader does).
 *
 * TLS (a listener keeper set: base/tls-keep.h): the MHD daemons listen on
 * no socket; a tls-pump.h acceptor takes the connections and hands them
 * over (a TLS client's as plaintext on a socketpair, with its address),
 * with the main listener's rule for plaintext off loopback.  A leader
 * whose URL is https:// is reached over TLS, verified against the CA of
 * this server's credentials (the cluster's, when the servers share it). */
#include "server/follower.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/h1.h"
#include "base/iplimit.h"
#include "base/url.h"
#include "base/util.h"
#include "base/tls-keep.h"
#include "config/config.h"
#include "server/follower-idem.h"
#include "server/forward.h"
#include "base/tls-pump.h"
#include "server/peer.h"

#define CONNECT_MS 3000         /* to the leader */
#define ANSWER_MS 75000         /* request sent and the answer's head back: a long poll (?wait=) holds it 60 s at most */
#define SLICE_MS 200            /* every wait looks at stopping this often */
#define RELAY_BLOCK (16 * 1024)
#define KEEP_MS 2000            /* reuse a connection to the leader idle this long at most */

struct gp_follower {
        struct MHD_Daemon *mhd[GP_FOLLOWER_MAX_FDS];
        int n;
        gp_tls_acceptor *acc[GP_FOLLOWER_MAX_FDS]; /* TLS: what accepts for mhd[i] */
        int accfd[GP_FOLLOWER_MAX_FDS];            /* TLS: its dup of the listening socket; -1 none */
        struct hand { gp_follower *fw; int i; } hand[GP_FOLLOWER_MAX_FDS];
        char id[64];            /* this server's id */
        int64_t max_body;
        gp_iplimit ipl;         /* server.max_connections_per_ip, across the daemons */
        bool acceptor;          /* TLS: the acceptors take (and count) every connection */
        atomic_bool stopping;
        atomic_int inflight;    /* requests between their URI and their end */
        pthread_mutex_t lock;
        char leader[64];        /* under lock: "" = unknown */
        char leader_url[256];   /* under lock: "" = unknown */
        int64_t store_ok_mono;  /* under lock: gp_mono_ms when the store last answered server.c; 0 = not lately */
        int64_t lease_ms;       /* cluster.lease_s: an answer older than this is not "lately" */
        gp_fres *res;           /* writes cut off by a failover: resolved, never "maybe" (follower-idem.h) */
};

/* One client connection (MHD_OPTION_NOTIFY_CONNECTION): the connection
 * to the leader it keeps between requests.  Held by the client connection
 * and by the relay of its answer in progress (which may outlive it). */
typedef struct fconn {
        pthread_mutex_t mu;
        int refs;               /* under mu */
        int up;                 /* under mu: -1 = none kept */
        char url[256];          /* the leader URL up is connected to */
        int64_t idle_since;     /* gp_mono_ms when up was kept */
} fconn;

/* One request, from its URI (MHD_OPTION_URI_LOG_CALLBACK) to its end. */
typedef struct freq {
        gp_follower *fw;
        char *target;           /* raw, as the client sent it */
        bool started;
        bool too_big;
        gp_buf body;
} freq;

/* The leader's answer on its way to the client; owned by the MHD response. */
typedef struct relay {
        gp_follower *fw;
        fconn *fc;              /* a reference: up goes back to it when the answer ended cleanly */
        char url[256];
        bool keep;              /* the leader keeps the connection open after this answer */
        int up;
        char in[RELAY_BLOCK];   /* bytes read from up, not yet passed on */
        size_t inlen, inoff;
        bool chunked;
        gp_h1_chunked ch;
        int64_t left;           /* Content-Length bytes still to come; -1: until the leader closes */
        gp_buf out;             /* decoded chunk data not yet passed on */
        bool eof;               /* the body has ended */
} relay;

/* ---- answers made here ---- */

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, char *body, int retry) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "application/json");
        if (retry)
                MHD_add_response_header(resp, "Retry-After", "1");
        enum MHD_Result r = MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        return r;
}

static enum MHD_Result answer_error(struct MHD_Connection *c, unsigned status, const char *code, const char *msg) {
        json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
        char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return body ? answer(c, status, body, status == 503) : MHD_NO;
}

static void leader_of(gp_follower *fw, char *id, size_t idlen, char *url, size_t urllen) {
        pthread_mutex_lock(&fw->lock);
        gp_strlcpy(id, fw->leader, idlen);
        gp_strlcpy(url, fw->leader_url, urllen);
        pthread_mutex_unlock(&fw->lock);
}

static enum MHD_Result answer_status(gp_follower *fw, struct MHD_Connection *c, unsigned status) {
        char leader[64], url[256];
        leader_of(fw, leader, sizeof(leader), url, sizeof(url));
        json_t *j = json_pack("{s:s,s:s,s:s}", "status", "follower", "server_id", fw->id, "leader", leader);
        char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return body ? answer(c, status, body, 0) : MHD_NO;
}

/* GET /api/v1/coordinator/health: this server, as the leader answers
 * about itself (coord.c h_health). */
static enum MHD_Result answer_coord_health(gp_follower *fw, struct MHD_Connection *c) {
        char leader[64], url[256];
        pthread_mutex_lock(&fw->lock);
        int64_t ok = fw->store_ok_mono;
        pthread_mutex_unlock(&fw->lock);
        leader_of(fw, leader, sizeof(leader), url, sizeof(url));
        bool reachable = ok && gp_mono_ms() - ok <= fw->lease_ms;
        json_t *j = json_pack("{s:s,s:b,s:b,s:s,s:s}", "server_id", fw->id, "store_reachable", reachable,
                              "leader_known", leader[0] != '\0', "leader", leader, "role", "follower");
        char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return body ? answer(c, 200, body, 0) : MHD_NO;
}

static enum MHD_Result answer_standby(gp_follower *fw, struct MHD_Connection *c, const char *why) {
        char leader[64], url[256], msg[1024];
        leader_of(fw, leader, sizeof(leader), url, sizeof(url));
        snprintf(msg, sizeof(msg), "server %s is a follower and cannot serve this: %s; the leader is %s", fw->id,
                 why, leader[0] ? leader : "not known yet");
        return answer_error(c, 503, "standby", msg);
}

/* ---- talking to the leader ---- */

/* Wait for fd to be ready for events, in slices that look at stopping,
 * until the monotonic deadline (0: none).  1 ready, 0 timed out, -1 stopping
 * or poll failed. */
static int wait_fd(gp_follower *fw, int fd, short events, int64_t deadline) {
        for (;;) {
                if (atomic_load(&fw->stopping))
                        return -1;
                int64_t ms = SLICE_MS;
                if (deadline) {
                        int64_t left = deadline - gp_mono_ms();
                        if (left <= 0)
                                return 0;
                        if (left < ms)
                                ms = left;
                }
                struct pollfd p = {.fd = fd, .events = events};
                int r = poll(&p, 1, (int)ms);
                if (r > 0)
                        return 1;
                if (r < 0 && errno != EINTR)
                        return -1;
        }
}

/* url parsed into u (pointing into buf), http:// or https:// (*tls). */
static int leader_url(const char *url, char *buf, size_t size, gp_http_url *u, bool *tls) {
        *tls = !strncmp(url, "https://", 8);
        if (!*tls && strncmp(url, "http://", 7))
                return -EINVAL;
        if ((size_t)snprintf(buf, size, "http://%s", url + (*tls ? 8 : 7)) >= size || gp_http_url_parse(buf, u) < 0)
                return -EINVAL;
        size_t pl = strlen(u->port);
        if (*tls && !(u->auth_len > pl && u->auth[u->auth_len - pl - 1] == ':'))
                gp_strlcpy(u->port, "443", sizeof(u->port)); /* no port written: https's */
        return 0;
}

/* A connected socket to url's host and port (for https://, the plain end
 * of a TLS pump), or -errno. */
static int dial(gp_follower *fw, const char *url) {
        gp_http_url u;
        char host[256], ubuf[300];
        bool tls;
        if (leader_url(url, ubuf, sizeof(ubuf), &u, &tls) < 0 || u.host_len >= sizeof(host))
                return -EINVAL;
        memcpy(host, u.host, u.host_len);
        host[u.host_len] = '\0';
        if (!strcmp(host, "0.0.0.0") || !strcmp(host, "::"))
                return -EDESTADDRREQ; /* a wildcard listen address is no place to send to */
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
        if (getaddrinfo(host, u.port, &hints, &ai) != 0 || !ai)
                return -EHOSTUNREACH;
        int fd = -ECONNREFUSED;
        int64_t deadline = gp_mono_ms() + CONNECT_MS;
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
                int s = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (s < 0)
                        continue;
                if (connect(s, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
                        fd = -errno;
                        close(s);
                        continue;
                }
                int err = 0;
                socklen_t el = sizeof(err);
                if (wait_fd(fw, s, POLLOUT, deadline) != 1 || getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) < 0 ||
                    err) {
                        fd = err ? -err : -ETIMEDOUT;
                        close(s);
                        continue;
                }
                /* a leader machine that vanishes mid-stream is noticed within a minute */
                int on = 1, idle = 30, intvl = 10, cnt = 3;
                setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
                setsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
                setsockopt(s, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
                setsockopt(s, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
                setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
                fd = s;
                break;
        }
        freeaddrinfo(ai);
        if (fd >= 0 && tls) {
                gp_tls_keep *k = gp_tls_listener();
                gp_tls_creds *c = k ? gp_tls_keep_get(k) : NULL;
                size_t calen = 0;
                const char *ca = c ? gp_tls_creds_ca_pem(c, &calen) : NULL;
                if (!ca) {
                        close(fd);
                        fd = -EPROTO;
                } else {
                        fd = gp_tls_pump_dial(fd, host, ca, calen, CONNECT_MS);
                }
                gp_tls_creds_unref(c);
        }
        return fd;
}

static int send_all(gp_follower *fw, int fd, const char *p, size_t n, int64_t deadline) {
        while (n) {
                ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
                if (w > 0) {
                        p += w;
                        n -= (size_t)w;
                        continue;
                }
                if (w < 0 && errno != EAGAIN && errno != EINTR)
                        return -errno;
                if (wait_fd(fw, fd, POLLOUT, deadline) != 1)
                        return -ETIMEDOUT;
        }
        return 0;
}

/* ---- the relay (MHD content reader) ---- */

static int to_out(void *ud, const char *p, size_t n) {
        return gp_buf_append(ud, p, n);
}

/* Read more of the leader's answer into r->in: >0 bytes, 0 end of
 * stream, <0 error (or stopping). */
static ssize_t fill(relay *r) {
        r->inoff = 0;
        r->inlen = 0;
        for (;;) {
                ssize_t n = recv(r->up, r->in, sizeof(r->in), 0);
                if (n >= 0) {
                        r->inlen = (size_t)n;
                        return n;
                }
                if (errno != EAGAIN && errno != EINTR)
                        return -1;
                if (wait_fd(r->fw, r->up, POLLIN, 0) != 1)
                        return -1;
        }
}

static ssize_t relay_read(void *cls, uint64_t pos, char *buf, size_t max) {
        (void)pos;
        relay *r = cls;
        for (;;) {
                if (r->out.len) { /* decoded chunk data first */
                        size_t n = r->out.len < max ? r->out.len : max;
                        memcpy(buf, r->out.data, n);
                        memmove(r->out.data, r->out.data + n, r->out.len - n);
                        r->out.len -= n;
                        r->out.data[r->out.len] = '\0';
                        return (ssize_t)n;
                }
                if (r->eof)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (r->inoff == r->inlen) {
                        ssize_t n = fill(r);
                        if (n < 0)
                                return MHD_CONTENT_READER_END_WITH_ERROR;
                        if (n == 0) { /* the leader closed */
                                if (r->chunked || r->left > 0)
                                        return MHD_CONTENT_READER_END_WITH_ERROR; /* cut short */
                                r->eof = true;
                                continue;
                        }
                }
                const char *p = r->in + r->inoff;
                size_t avail = r->inlen - r->inoff;
                if (r->chunked) {
                        size_t used = 0;
                        int rc = gp_h1_chunked_feed(&r->ch, p, avail, &used, to_out, &r->out);
                        r->inoff += used;
                        if (rc < 0)
                                return MHD_CONTENT_READER_END_WITH_ERROR;
                        if (rc == 1)
                                r->eof = true;
                        continue;
                }
                size_t n = avail < max ? avail : max;
                if (r->left >= 0 && (int64_t)n > r->left)
                        n = (size_t)r->left;
                memcpy(buf, p, n);
                r->inoff += n;
                if (r->left >= 0 && (r->left -= (int64_t)n) == 0)
                        r->eof = true;
                if (n)
                        return (ssize_t)n;
        }
}

static void fconn_unref(fconn *fc) {
        pthread_mutex_lock(&fc->mu);
        bool last = --fc->refs == 0;
        pthread_mutex_unlock(&fc->mu);
        if (!last)
                return;
        if (fc->up >= 0)
                close(fc->up);
        pthread_mutex_destroy(&fc->mu);
        free(fc);
}

/* Keep fd (connected to url) for the client connection's next request. */
static void fconn_keep(fconn *fc, int fd, const char *url) {
        pthread_mutex_lock(&fc->mu);
        int old = fc->up;
        fc->up = fd;
        gp_strlcpy(fc->url, url, sizeof(fc->url));
        fc->idle_since = gp_mono_ms();
        pthread_mutex_unlock(&fc->mu);
        if (old >= 0)
                close(old);
}

/* The kept connection to url, if it is fresh and the leader has not
 * closed it; else -1 (a stale one is closed). */
static int fconn_take(fconn *fc, const char *url) {
        pthread_mutex_lock(&fc->mu);
        int fd = fc->up;
        bool fresh = fd >= 0 && !strcmp(fc->url, url) && gp_mono_ms() - fc->idle_since < KEEP_MS;
        fc->up = -1;
        pthread_mutex_unlock(&fc->mu);
        if (fd < 0)
                return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
        if (!fresh || poll(&p, 1, 0) != 0) { /* readable now: closed, or bytes nobody asked for */
                close(fd);
                return -1;
        }
        return fd;
}

static void relay_free(void *cls) {
        relay *r = cls;
        /* the whole answer read, nothing after it: the next request may use it */
        if (r->up >= 0 && r->fc && r->keep && r->eof && r->inoff == r->inlen && !r->out.len)
                fconn_keep(r->fc, r->up, r->url);
        else if (r->up >= 0)
                close(r->up);
        if (r->fc)
                fconn_unref(r->fc);
        gp_buf_done(&r->out);
        free(r);
}

/* ---- forwarding one request ---- */

typedef struct hdrs {
        gp_fwd_header h[GP_H1_MAX_HEADERS];
        size_t n;
        bool over;
} hdrs;

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
        (void)kind;
        hdrs *hs = cls;
        if (hs->n == GP_H1_MAX_HEADERS) {
                hs->over = true;
                return MHD_NO;
        }
        hs->h[hs->n++] = (gp_fwd_header){key, value ? value : ""};
        return MHD_YES;
}

static void client_addr(struct MHD_Connection *c, char *out, size_t size) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        gp_strlcpy(out, "unknown", size);
        if (!ci || !ci->client_addr)
                return;
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)size);
        else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)size);
}

/* Read the leader's answer head into r->in: 0 with *resp filled, or -1. */
static int read_head(relay *r, gp_h1_response *resp, int64_t deadline) {
        for (;;) {
                int rc = gp_h1_parse_response(r->in, r->inlen, sizeof(r->in), resp);
                if (rc == 0 && resp->status >= 200)
                        return 0;
                if (rc == 0) { /* 1xx: an interim answer, the real one follows */
                        memmove(r->in, r->in + resp->head_len, r->inlen - resp->head_len);
                        r->inlen -= resp->head_len;
                        continue;
                }
                if (rc != -EAGAIN)
                        return -1;
                ssize_t n = recv(r->up, r->in + r->inlen, sizeof(r->in) - r->inlen, 0);
                if (n == 0)
                        return -1;
                if (n > 0) {
                        r->inlen += (size_t)n;
                        continue;
                }
                if (errno != EAGAIN && errno != EINTR)
                        return -1;
                if (wait_fd(r->fw, r->up, POLLIN, deadline) != 1)
                        return -1;
        }
}

static enum MHD_Result forward(gp_follower *fw, struct MHD_Connection *c, freq *q, const char *method) {
        char leader[64], url[256];
        leader_of(fw, leader, sizeof(leader), url, sizeof(url));
        if (!url[0])
                return answer_standby(fw, c, "the leader's URL is not known yet");
        hdrs hs = {.n = 0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, collect, &hs);
        if (hs.over)
                return answer_error(c, 431, "invalid_request", "more than 64 request headers");
        gp_fres_req fq; /* after leader_of: its epoch is at least the one of url's leader */
        if (gp_fres_key_add(fw->res, method, q->target, q->body.data, q->body.len, hs.h, &hs.n, GP_H1_MAX_HEADERS,
                            &fq) < 0)
                return answer_standby(fw, c, "no random bytes for an Idempotency-Key");
        char client[INET6_ADDRSTRLEN + 1];
        client_addr(c, client, sizeof(client));
        gp_http_url u;
        char host[256] = "localhost", ubuf[300];
        bool tls;
        if (leader_url(url, ubuf, sizeof(ubuf), &u, &tls) == 0 && u.auth_len < sizeof(host)) {
                memcpy(host, u.auth, u.auth_len);
                host[u.auth_len] = '\0';
        }
        gp_buf head;
        gp_buf_init(&head, GP_FWD_HEAD_MAX + 1024);
        int rc = gp_fwd_request_head(&head, method, q->target, hs.h, hs.n, host, fw->id, client,
                                     (int64_t)q->body.len);
        gp_peer who; /* a loopback client the kernel names goes on named (peer.h) */
        if (rc == 0 && gp_peer_of_conn(c, "", &who) == 0) {
                head.len -= 2; /* before the blank line that ends the head */
                rc = gp_buf_printf(&head, GP_FWD_UID ": %u\r\n\r\n", (unsigned)who.uid);
        }
        if (rc < 0) {
                gp_buf_done(&head);
                return rc == -ENOMEM ? MHD_NO
                                     : answer_error(c, rc == -E2BIG ? 431 : 400, "invalid_request",
                                                    rc == -E2BIG ? "request head too large to forward"
                                                                 : "request cannot be forwarded: malformed head");
        }
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        fconn *fc = ci ? ci->socket_context : NULL;
        int fd = fc ? fconn_take(fc, url) : -1;
        if (fd < 0)
                fd = dial(fw, url);
        if (fd < 0) {
                gp_buf_done(&head);
                char why[600];
                snprintf(why, sizeof(why), "the leader %s at %s cannot be reached (%s)", leader, url,
                         fd == -EDESTADDRREQ ? "it advertises a wildcard address: set its cluster.advertise_url"
                         : fd == -EPROTO     ? "TLS failed: its certificate does not verify against this "
                                               "server's CA, or does not name the host of its URL"
                                             : strerror(-fd));
                return answer_standby(fw, c, why);
        }
        relay *r = calloc(1, sizeof(*r));
        if (!r) {
                close(fd);
                gp_buf_done(&head);
                return MHD_NO;
        }
        r->fw = fw;
        r->up = fd;
        gp_strlcpy(r->url, url, sizeof(r->url));
        if (fc) {
                pthread_mutex_lock(&fc->mu);
                fc->refs++;
                pthread_mutex_unlock(&fc->mu);
                r->fc = fc;
        }
        gp_buf_init(&r->out, 0);
        int64_t deadline = gp_mono_ms() + ANSWER_MS;
        gp_h1_response resp;
        bool sent = send_all(fw, fd, head.data, head.len, deadline) == 0 &&
                    (!q->body.len || send_all(fw, fd, q->body.data, q->body.len, deadline) == 0);
        gp_buf_done(&head);
        if (!sent || read_head(r, &resp, deadline) < 0) { /* also when this server takes the lead meanwhile */
                relay_free(r);
                if (fq.keyed) /* a write: carried out or not, said once the old leader is fenced */
                        return gp_fres_answer(fw->res, c, &fq, &fw->stopping, fw->id);
                return answer_error(c, 502, "leader_unreachable",
                                    "the leader went away while this request was on its way: it may have been "
                                    "carried out; check before sending it again");
        }
        /* what came after the head is the body's start */
        r->inoff = resp.head_len;
        r->chunked = resp.chunked;
        bool bodyless = !strcmp(method, "HEAD") || resp.status == 204 || resp.status == 304;
        r->left = resp.chunked ? -1 : resp.content_length;
        r->keep = resp.keep_alive && (bodyless || r->left >= 0 || resp.chunked);
        if (bodyless || r->left == 0)
                r->eof = true;
        uint64_t size = bodyless ? 0 : (!resp.chunked && resp.content_length >= 0) ? (uint64_t)resp.content_length
                                                                                      : MHD_SIZE_UNKNOWN;
        /* the headers point into r->in: copy them before the relay reads on */
        struct MHD_Response *mr = MHD_create_response_from_callback(size, RELAY_BLOCK, relay_read, r, relay_free);
        if (!mr) {
                relay_free(r);
                return MHD_NO;
        }
        for (size_t i = 0; i < resp.nheaders; i++) {
                const gp_h1_header *h = &resp.headers[i];
                if (gp_h1_hop_by_hop(h->name, h->name_len))
                        continue;
                char *name = strndup(h->name, h->name_len), *value = strndup(h->value, h->value_len);
                if (name && value)
                        MHD_add_response_header(mr, name, value);
                free(name);
                free(value);
        }
        MHD_add_response_header(mr, GP_FWD_BY, fw->id);
        /* the leader's answer decides how long a stream lasts, not this server's idle timeout */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        enum MHD_Result ret = MHD_queue_response(c, (unsigned)resp.status, mr);
        MHD_destroy_response(mr);
        return ret;
}

/* ---- the MHD callbacks ---- */

static void *uri_logged(void *cls, const char *uri, struct MHD_Connection *c) {
        (void)c;
        freq *q = calloc(1, sizeof(*q));
        if (!q)
                return NULL;
        q->fw = cls;
        atomic_fetch_add(&q->fw->inflight, 1);
        q->target = strdup(uri ? uri : "");
        gp_buf_init(&q->body, (size_t)q->fw->max_body);
        return q;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
        (void)version;
        gp_follower *fw = cls;
        freq *q = *con_cls;
        if (!q || !q->target)
                return MHD_NO;
        if (!q->started) {
                q->started = true;
                enum MHD_Result ret;
                return gp_fwd_mhd_refuse_bad_framing(c, &ret) ? ret : MHD_YES;
        }
        if (*upload_data_size) { /* the rest of a body too big is read and dropped, as the leader does */
                if (!q->too_big && gp_buf_append(&q->body, upload_data, *upload_data_size) < 0)
                        q->too_big = true;
                *upload_data_size = 0;
                return MHD_YES;
        }
        if (q->too_big) {
                char msg[128];
                snprintf(msg, sizeof(msg), "request body over %" PRId64 " bytes", fw->max_body);
                return answer_error(c, 413, "payload_too_large", msg);
        }
        bool again = MHD_lookup_connection_value(c, MHD_HEADER_KIND, GP_FWD_BY) != NULL;
        switch (gp_fwd_route_of(method, url, again)) {
        case GP_FWD_HEALTH:
                return answer_status(fw, c, 200);
        case GP_FWD_READY:
                return answer_status(fw, c, 503);
        case GP_FWD_COORD_HEALTH:
                return answer_coord_health(fw, c);
        case GP_FWD_AGENT:
                return answer_standby(fw, c, "agents talk to the leader");
        case GP_FWD_LOOP:
                return answer_standby(fw, c, "another server forwarded it here");
        case GP_FWD_FORWARD:
                break;
        }
        return forward(fw, c, q, method);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
        (void)cls;
        (void)c;
        (void)toe;
        freq *q = *con_cls;
        if (q) {
                atomic_fetch_sub(&q->fw->inflight, 1);
                gp_buf_done(&q->body);
                free(q->target);
                free(q);
        }
        *con_cls = NULL;
}

/* MHD_OPTION_APC: accept the connection while its address holds fewer
 * than max_connections_per_ip (counted here, given back when it closes:
 * notify_conn).  MHD asks this for a handed-over connection too
 * (MHD_add_connection): with TLS the acceptor counted it already, and
 * counting it twice against one put left every connection counted
 * once for good (an address refused after max_connections_per_ip). */
static enum MHD_Result accept_ip(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
        (void)addrlen;
        gp_follower *fw = cls;
        if (fw->acceptor)
                return MHD_YES;
        return gp_iplimit_take(&fw->ipl, addr) < 0 ? MHD_NO : MHD_YES;
}

static void notify_conn(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe) {
        gp_follower *fw = cls;
        if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
                const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
                if (ci && ci->client_addr)
                        gp_iplimit_put(&fw->ipl, ci->client_addr);
        }
        if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
                fconn *fc = calloc(1, sizeof(*fc));
                if (fc) {
                        pthread_mutex_init(&fc->mu, NULL);
                        fc->refs = 1;
                        fc->up = -1;
                }
                *socket_context = fc; /* NULL: its requests dial each time */
        } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
                fconn_unref(*socket_context);
                *socket_context = NULL;
        }
}

/* A connection the TLS acceptor of mhd[i] took (gp_tls_handoff_fn): it
 * counted it in fw->ipl already, and MHD's close notification puts it back. */
static int handoff(void *ud, int fd, const struct sockaddr *sa, socklen_t sl) {
        const struct hand *h = ud;
        return MHD_add_connection(h->fw->mhd[h->i], fd, sa, sl) == MHD_YES ? 0 : -1; /* MHD closes fd on failure */
}

static void quiet(void *cls, const char *fmt, va_list ap) {
        (void)cls;
        (void)fmt;
        (void)ap;
}

int gp_follower_start(const char *server_id, const gp_config *cfg, const int *fds, int n, gp_follower **ret) {
        gp_follower *fw = calloc(1, sizeof(*fw));
        if (!fw)
                return -ENOMEM;
        pthread_mutex_init(&fw->lock, NULL);
        atomic_init(&fw->stopping, false);
        atomic_init(&fw->inflight, 0);
        gp_strlcpy(fw->id, server_id, sizeof(fw->id));
        fw->max_body = cfg->max_body_bytes;
        fw->lease_ms = (int64_t)cfg->lease_s * 1000;
        if (gp_iplimit_init(&fw->ipl, cfg->max_connections_per_ip, cfg->max_connections) < 0 ||
            gp_fres_new(cfg, &fw->res) < 0) {
                gp_follower_stop(fw);
                return -ENOMEM;
        }
        unsigned per = (unsigned)(cfg->max_connections + n - 1) / (unsigned)(n > 0 ? n : 1);
        gp_tls_keep *k = gp_tls_listener();
        fw->acceptor = k != NULL;
        for (int i = 0; i < GP_FOLLOWER_MAX_FDS; i++)
                fw->accfd[i] = -1;
        for (int i = 0; i < n && i < GP_FOLLOWER_MAX_FDS; i++) {
                int fd = dup(fds[i]); /* MHD (or the acceptor) closes its own; fds[i] stays for the daemon */
                if (fd < 0) {
                        gp_follower_stop(fw);
                        return -errno;
                }
                /* with TLS the acceptor takes the connections: MHD listens on nothing */
                struct MHD_OptionItem lopt[2] = {{k ? MHD_OPTION_END : MHD_OPTION_LISTEN_SOCKET, fd, NULL},
                                                 {MHD_OPTION_END, 0, NULL}};
                fw->accfd[i] = k ? fd : -1;
                /* a thread per connection: a small stack (the deepest is forward(), a few KiB) */
                fw->mhd[i] = MHD_start_daemon(
                        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
                                (k ? MHD_USE_NO_LISTEN_SOCKET : 0),
                        0, accept_ip, fw, handler, fw, MHD_OPTION_EXTERNAL_LOGGER, quiet, NULL,
                        MHD_OPTION_ARRAY, lopt, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->header_timeout_s,
                        MHD_OPTION_CONNECTION_LIMIT, per, MHD_OPTION_THREAD_STACK_SIZE, (size_t)512 * 1024,
                        MHD_OPTION_URI_LOG_CALLBACK, uri_logged, fw, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                        MHD_OPTION_NOTIFY_CONNECTION, notify_conn, fw, MHD_OPTION_END);
                if (!fw->mhd[i]) {
                        close(fd);
                        fw->accfd[i] = -1;
                        gp_follower_stop(fw);
                        return -ENOMEM;
                }
                fw->n = i + 1;
                fw->hand[i] = (struct hand){fw, i};
                if (k && gp_tls_acceptor_start(fd, k, cfg->header_timeout_s * 1000, &fw->ipl, handoff, &fw->hand[i],
                                               &fw->acc[i]) < 0) {
                        gp_follower_stop(fw);
                        return -ENOMEM;
                }
        }
        *ret = fw;
        return 0;
}

void gp_follower_set_leader(gp_follower *fw, const char *leader, const char *url) {
        if (!fw)
                return;
        pthread_mutex_lock(&fw->lock);
        gp_strlcpy(fw->leader, leader ? leader : "", sizeof(fw->leader));
        gp_strlcpy(fw->leader_url, url ? url : "", sizeof(fw->leader_url));
        pthread_mutex_unlock(&fw->lock);
}

void gp_follower_store_answered(gp_follower *fw, bool answered) {
        if (!fw)
                return;
        pthread_mutex_lock(&fw->lock);
        fw->store_ok_mono = answered ? gp_mono_ms() : 0;
        pthread_mutex_unlock(&fw->lock);
}

void gp_follower_stop(gp_follower *fw) {
        if (!fw)
                return;
        atomic_store(&fw->stopping, true); /* forwards in progress end within SLICE_MS */
        for (int i = 0; i < GP_FOLLOWER_MAX_FDS; i++) { /* TLS: nothing is handed to MHD after this */
                gp_tls_acceptor_stop(fw->acc[i]);
                if (fw->accfd[i] >= 0)
                        close(fw->accfd[i]);
        }
        /* quiesced first: stopping alone would shutdown() the socket,
         * which the dup shares with the daemon's */
        MHD_socket lfd[GP_FOLLOWER_MAX_FDS];
        for (int i = 0; i < fw->n; i++)
                lfd[i] = fw->mhd[i] ? MHD_quiesce_daemon(fw->mhd[i]) : MHD_INVALID_SOCKET;
        /* the requests in progress answer (503 standby: this server takes
         * the lead) before their connections are closed */
        for (int64_t until = gp_mono_ms() + 2 * SLICE_MS + 500;
             atomic_load(&fw->inflight) > 0 && gp_mono_ms() < until;)
                usleep(10 * 1000);
        for (int i = 0; i < fw->n; i++)
                if (fw->mhd[i]) {
                        MHD_stop_daemon(fw->mhd[i]);
                        if (lfd[i] != MHD_INVALID_SOCKET)
                                close(lfd[i]);
                }
        pthread_mutex_destroy(&fw->lock);
        gp_iplimit_done(&fw->ipl);
        gp_fres_free(fw->res);
        free(fw);
}

void gp_follower_set_epoch(gp_follower *fw, int64_t epoch) {
        if (fw)
                gp_fres_set_epoch(fw->res, epoch);
}

void gp_follower_leads(gp_follower *fw) {
        if (fw)
                gp_fres_leads(fw->res);
}
