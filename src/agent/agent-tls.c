/* agent-tls.c - the agent's listener over TLS and its node certificate
 * (see agent-tls.h).
 *
 * Invariants: node.key is written (0600, by a rename) before the node.crt
 * that goes with it (a stop between the two leaves a pair that does not
 * load: mend_torn_pair replaces it at the next start), and only after the
 * certificate was checked: signed by the CA the agent trusts, for this
 * key; the private key is never sent.
 * The keeper (base/tls-keep.h) reloads the pair for new handshakes; a look
 * that falls between the two renames is refused and the pair is taken at
 * the next look.  state is read by the status thread under mu. */
#include "agent/agent-tls.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent-relay.h"
#include "base/buf.h"
#include "base/iplimit.h"
#include "base/log.h"
#include "base/tls-keep.h"
#include "base/tls.h"
#include "base/util.h"
#include "cluster/proto-cert.h"
#include "cluster/proto.h"
#include "base/tls-pump.h"

#define CERT_ROUTE "/agent/v1/cert"
#define LOOK_S 3600            /* a look at the certificate this often */
#define RETRY_S 30             /* after a failed request, at first (doubling to LOOK_S) */
#define ANSWER_MAX (64 * 1024) /* the answer: two PEM certificates */
#define HANDSHAKE_MS 10000
#define MAX_CONNS 64
#define PER_IP 32

struct gp_agent_tls {
        char dir[PATH_MAX];           /* DATA_DIR/tls */
        char runs_dir[PATH_MAX];      /* DATA_DIR/runs: the runs a relay may reach (agent-relay.h) */
        char host[256];               /* the node's host, as its address names it */
        gp_tls_keep *keep;            /* node.crt / node.key */
        gp_tls_acceptor *acc;
        struct MHD_Daemon *mhd;
        int lfd;
        gp_iplimit ipl;
        bool plaintext_any;
        /* the issuer */
        const gp_agent_trust *trust;
        char *const *urls;
        int n_urls, url;
        char node[GP_NODE_MAX];
        pthread_t th;
        bool started;
        pthread_mutex_t mu;           /* the fields below */
        pthread_cond_t cv;
        bool stop, poke, fresh;       /* fresh: a join gave a new credential */
        int sniffing;                 /* sniff threads (a connection's first bytes) alive */
        char cred[GP_PROTO_CRED_LEN + 1];
        const char *state;            /* "issued" | "pending" */
};

/* ------------------------------------------------------------ the listener */

static void notify_conn(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe) {
        (void)socket_context;
        gp_agent_tls *t = cls;
        if (toe != MHD_CONNECTION_NOTIFY_CLOSED)
                return;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr)
                gp_iplimit_put(&t->ipl, ci->client_addr);
}

typedef struct sniff {
        gp_agent_tls *t;
        int fd;
        struct sockaddr_storage sa;
        socklen_t sl;
} sniff;

/* A relay's first line, or an HTTP request for MHD (the acceptor's TLS
 * pump carries bytes only once the handoff returned, so this waits in a
 * thread of its own, counted in t->sniffing). */
static void *sniff_main(void *arg) {
        sniff *s = arg;
        gp_agent_tls *t = s->t;
        const struct sockaddr *sa = (const struct sockaddr *)&s->sa;
        if (!gp_agent_relay_try(s->fd, t->runs_dir, &t->ipl, sa) &&
            MHD_add_connection(t->mhd, s->fd, sa, s->sl) != MHD_YES) /* MHD closed fd */
                gp_iplimit_put(&t->ipl, sa);
        pthread_mutex_lock(&t->mu);
        if (--t->sniffing == 0)
                pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        free(s);
        return NULL;
}

/* the acceptor counted the connection in t->ipl; MHD's close (or the relay) puts it back */
static int handoff(void *ud, int fd, const struct sockaddr *sa, socklen_t sl) {
        gp_agent_tls *t = ud;
        sniff *s = calloc(1, sizeof(*s));
        if (!s || sl > sizeof(s->sa)) {
                free(s);
                close(fd);
                return -1;
        }
        s->t = t;
        s->fd = fd;
        s->sl = sl;
        memcpy(&s->sa, sa, sl);
        pthread_mutex_lock(&t->mu);
        bool stopping = t->stop;
        if (!stopping)
                t->sniffing++;
        pthread_mutex_unlock(&t->mu);
        int rc = stopping ? -EAGAIN : gp_thread_detached(sniff_main, s, 128 * 1024);
        if (rc) {
                if (!stopping) {
                        pthread_mutex_lock(&t->mu);
                        t->sniffing--;
                        pthread_mutex_unlock(&t->mu);
                }
                free(s);
                close(fd);
                return -1;
        }
        return 0;
}

static void quiet(void *cls, const char *fmt, va_list ap) {
        (void)cls;
        (void)fmt;
        (void)ap;
}

static int path_in(const gp_agent_tls *t, const char *name, char *out, size_t size) {
        int n = snprintf(out, size, "%.*s/%s", PATH_MAX - 64, t->dir, name);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* A self-signed placeholder until the server issues one: no client
 * accepts it, loopback plaintext works meanwhile. */
static int placeholder(gp_agent_tls *t) {
        char crt[PATH_MAX], *c = NULL, *k = NULL;
        if (path_in(t, "node.crt", crt, sizeof(crt)) < 0)
                return -ENAMETOOLONG;
        if (access(crt, F_OK) == 0)
                return 0;
        int rc = gp_tls_make_ca("gpupool node (no certificate issued yet)", 3650, &c, &k);
        if (rc == 0 && (rc = gp_tls_write_file(t->dir, "node.key", k, 0600)) == 0)
                rc = gp_tls_write_file(t->dir, "node.crt", c, 0644);
        if (k)
                explicit_bzero(k, strlen(k));
        free(k);
        free(c);
        return rc;
}

/* node.crt does not load with node.key at start (why: the keeper's
 * error): an agent stopped between the two renames of a new certificate
 * (the key is written first), or a certificate put for another key.
 * Neither pair is whole, so both are kept aside (*.torn, for the
 * operator) and a placeholder takes their place: the issuer then asks for
 * a new certificate, as after a join.  Without it the agent could not
 * start again until someone removed them.  0 or -errno. */
static int mend_torn_pair(gp_agent_tls *t, const char *why) {
        char crt[PATH_MAX], key[PATH_MAX], aside[PATH_MAX + 8];
        if (path_in(t, "node.crt", crt, sizeof(crt)) < 0 || path_in(t, "node.key", key, sizeof(key)) < 0)
                return -ENAMETOOLONG;
        gp_warn("node certificate: %s does not load with %s (%s): a stop between the writes of a new "
                "certificate, or one put for another key; both kept as *.torn, a new certificate is asked for",
                crt, key, why);
        snprintf(aside, sizeof(aside), "%s.torn", crt);
        if (rename(crt, aside) < 0)
                return -errno;
        snprintf(aside, sizeof(aside), "%s.torn", key);
        if (rename(key, aside) < 0 && errno != ENOENT)
                return -errno;
        return placeholder(t);
}

int gp_agent_tls_open(const gp_agent_tls_opts *o, gp_agent_tls **ret, char *address, size_t addrlen, char *err,
                      size_t errlen) {
        char host[128];
        const char *colon = strrchr(o->listen, ':');
        int64_t port;
        struct sockaddr_in sa = {.sin_family = AF_INET};
        if (!colon || (size_t)(colon - o->listen) >= sizeof(host))
                return -EINVAL;
        memcpy(host, o->listen, (size_t)(colon - o->listen));
        host[colon - o->listen] = '\0';
        if (gp_parse_i64(colon + 1, 1, 65535, &port) < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1)
                return -EINVAL;
        sa.sin_port = htons((uint16_t)port);
        gp_agent_tls *t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->lfd = -1;
        t->plaintext_any = o->plaintext_any;
        t->state = "pending";
        pthread_mutex_init(&t->mu, NULL);
        pthread_cond_init(&t->cv, NULL);
        int rc = -ENOMEM;
        if (gp_iplimit_init(&t->ipl, PER_IP, MAX_CONNS) < 0)
                goto fail_early;
        if ((size_t)snprintf(t->dir, sizeof(t->dir), "%s/tls", o->data_dir) >= sizeof(t->dir) ||
            (size_t)snprintf(t->runs_dir, sizeof(t->runs_dir), "%s/runs", o->data_dir) >= sizeof(t->runs_dir)) {
                rc = -ENAMETOOLONG;
                snprintf(err, errlen, "data dir path too long");
                goto fail;
        }
        if (mkdir(t->dir, 0700) < 0 && errno != EEXIST) {
                rc = -errno;
                snprintf(err, errlen, "cannot make %s: %s", t->dir, strerror(-rc));
                goto fail;
        }
        if ((rc = placeholder(t)) < 0) {
                snprintf(err, errlen, "cannot write a placeholder certificate in %s: %s", t->dir, strerror(-rc));
                goto fail;
        }
        char crt[PATH_MAX], key[PATH_MAX];
        path_in(t, "node.crt", crt, sizeof(crt));
        path_in(t, "node.key", key, sizeof(key));
        gp_tls_keep_opts ko = {.cert = crt, .key = key, .plaintext_any = o->plaintext_any};
        rc = gp_tls_keep_open(&ko, &t->keep, err, errlen);
        if (rc == -EINVAL) { /* the pair does not load: set it aside, take a placeholder */
                if ((rc = mend_torn_pair(t, err)) < 0) {
                        snprintf(err, errlen, "cannot set node.crt and node.key aside in %s: %s", t->dir,
                                 strerror(-rc));
                        goto fail;
                }
                rc = gp_tls_keep_open(&ko, &t->keep, err, errlen);
        }
        if (rc < 0 || (rc = gp_tls_keep_start(t->keep)) < 0)
                goto fail;
        t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        if (t->lfd < 0 || setsockopt(t->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(t->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(t->lfd, 128) < 0) {
                int e = errno;
                rc = -EADDRINUSE;
                /* the caller says where ("cannot listen on ADDR: ...", as the server does) */
                snprintf(err, errlen, "%s", e == EADDRINUSE ? "in use by another process" : strerror(e));
                goto fail;
        }
        t->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC, 0, NULL,
                                  NULL, o->handler, o->handler_cls, MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNS,
                                  MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_EXTERNAL_LOGGER, quiet, NULL,
                                  MHD_OPTION_NOTIFY_CONNECTION, notify_conn, t, MHD_OPTION_END);
        if (!t->mhd) {
                rc = -ENOMEM;
                snprintf(err, errlen, "cannot start the status server");
                goto fail;
        }
        if ((rc = gp_tls_acceptor_start(t->lfd, t->keep, HANDSHAKE_MS, &t->ipl, handoff, t, &t->acc)) < 0) {
                snprintf(err, errlen, "cannot start the TLS acceptor: %s", strerror(-rc));
                goto fail;
        }
        char hn[256] = "";
        if (!strcmp(host, "0.0.0.0") && gethostname(hn, sizeof(hn) - 1) == 0 && hn[0])
                gp_strlcpy(t->host, hn, sizeof(t->host));
        else
                gp_strlcpy(t->host, host, sizeof(t->host));
        snprintf(address, addrlen, "https://%s:%lld", t->host, (long long)port);
        if (o->plaintext_any)
                gp_warn("--insecure-listen-plaintext: this agent's status port %s serves plain HTTP to every "
                        "address, not only loopback", o->listen);
        *ret = t;
        return 0;
fail:
        gp_agent_tls_stop(t);
        return rc;
fail_early:
        free(t);
        return rc;
}

/* ------------------------------------------------------------ the issuer */

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
        gp_buf *b = ud;
        return gp_buf_append(b, p, sz * nm) < 0 ? 0 : sz * nm;
}

/* The CA the certificate must chain to: the one the agent checks its
 * server against, else (a plaintext server on loopback) the one kept from
 * an answer.  A malloc'd PEM, or NULL. */
static char *trusted_ca(gp_agent_tls *t, size_t *len) {
        char *pem = NULL, p[PATH_MAX];
        if (t->trust->ca_file[0])
                return gp_tls_read_pem(t->trust->ca_file, &pem, len) == 0 ? pem : NULL;
        if (path_in(t, "node-ca.crt", p, sizeof(p)) == 0 && gp_tls_read_pem(p, &pem, len) == 0)
                return pem;
        return NULL;
}

/* Why the current certificate must be replaced, or NULL when it is good. */
static const char *needs_new(gp_agent_tls *t) {
        char p[PATH_MAX], *crt = NULL, *ca = NULL;
        size_t len = 0, calen = 0;
        const char *why = NULL;
        time_t na = 0;
        if (path_in(t, "node.crt", p, sizeof(p)) < 0 || gp_tls_read_pem(p, &crt, &len) < 0)
                why = "none yet";
        else if (!(ca = trusted_ca(t, &calen)))
                why = "no CA known yet";
        else {
                int rc = gp_tls_cert_check(crt, len, ca, calen, t->host, &na);
                if (rc == -ENOENT)
                        why = "it does not name this node's host";
                else if (rc < 0)
                        why = "none of the cluster's CA yet";
                else if (na - time(NULL) < GP_TLS_RENEW_S)
                        why = "it ends within 30 days";
        }
        free(crt);
        free(ca);
        pthread_mutex_lock(&t->mu);
        t->state = why && (strstr(why, "none") || strstr(why, "no CA")) ? "pending" : "issued";
        pthread_mutex_unlock(&t->mu);
        return why;
}

/* One request to urls[url]: 0 (issued, files written), or -EAGAIN (try
 * again later) / -EPERM (refused: the answer said why, logged) / -EPROTO. */
static int ask(gp_agent_tls *t, const char *cred, const char *why) {
        char *key = NULL, *pub = NULL, *body = NULL, *ca = NULL;
        gp_buf resp;
        gp_buf_init(&resp, ANSWER_MAX);
        gp_proto_cert_answer ans = {0};
        struct curl_slist *hdrs = NULL;
        CURL *h = NULL;
        int rc = gp_tls_make_key(&key, &pub);
        if (rc < 0)
                goto out;
        gp_proto_cert_req q = {.public_key = pub};
        gp_strlcpy(q.node, t->node, sizeof(q.node));
        char url[1200], auth[GP_PROTO_CRED_LEN + 32];
        snprintf(url, sizeof(url), "%s%s", t->urls[t->url], CERT_ROUTE);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", cred);
        if ((rc = gp_proto_cert_req_render(&q, &body)) < 0 || !(h = curl_easy_init()) ||
            !(hdrs = curl_slist_append(NULL, "Content-Type: application/json")) ||
            !(hdrs = curl_slist_append(hdrs, auth))) {
                rc = -ENOMEM;
                goto out;
        }
        explicit_bzero(auth, sizeof(auth));
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        gp_agent_trust_apply(t->trust, h);
        CURLcode cc = curl_easy_perform(h);
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        char err[256];
        if (cc != CURLE_OK) {
                gp_warn("node certificate: %s: %s; trying again later", t->urls[t->url], curl_easy_strerror(cc));
                t->url = (t->url + 1) % t->n_urls;
                rc = -EAGAIN;
                goto out;
        }
        if (status != 200) {
                gp_warn("node certificate: %s answered %ld: %.300s%s", t->urls[t->url], status,
                        resp.data ? resp.data : "",
                        status == 404 ? " (a server older than node certificates)" : "");
                rc = status == 409 || status == 404 || status == 401 || status == 400 ? -EPERM : -EAGAIN;
                if (rc == -EAGAIN) /* a standby server (503), say: the next one */
                        t->url = (t->url + 1) % t->n_urls;
                goto out;
        }
        if (gp_proto_cert_answer_parse(resp.data ? resp.data : "", resp.len, &ans, err, sizeof(err)) < 0) {
                gp_error("node certificate: the server's answer does not parse: %s", err);
                rc = -EPROTO;
                goto out;
        }
        size_t calen = 0;
        bool kept_ca = t->trust->ca_file[0];
        if (kept_ca && !(ca = trusted_ca(t, &calen))) {
                rc = -EAGAIN;
                goto out;
        }
        const char *check_ca = kept_ca ? ca : ans.ca;
        gp_tls_creds *cr = NULL;
        if (gp_tls_cert_check(ans.cert, strlen(ans.cert), check_ca, kept_ca ? calen : strlen(ans.ca), NULL, NULL) < 0 ||
            gp_tls_creds_new(ans.cert, key, NULL, &cr, err, sizeof(err)) < 0) {
                gp_error("node certificate: refused what the server sent: not signed by the cluster's CA, or not "
                         "for this node's key");
                rc = -EPROTO;
                goto out;
        }
        gp_tls_creds_unref(cr);
        if ((!kept_ca && (rc = gp_tls_write_file(t->dir, "node-ca.crt", ans.ca, 0644)) < 0) ||
            (rc = gp_tls_write_file(t->dir, "node.key", key, 0600)) < 0 ||
            (rc = gp_tls_write_file(t->dir, "node.crt", ans.cert, 0644)) < 0) {
                gp_error("node certificate: cannot write it in %s: %s", t->dir, strerror(-rc));
                rc = -EAGAIN;
                goto out;
        }
        gp_tls_keep_check(t->keep, true);
        char names[600] = "";
        for (int i = 0, o = 0; i < ans.n_names && o < (int)sizeof(names); i++)
                o += snprintf(names + o, sizeof(names) - (size_t)o, "%s%s", i ? ", " : "", ans.names[i]);
        time_t na = (time_t)(ans.not_after_ms / 1000);
        char until[32] = "";
        struct tm tm;
        if (gmtime_r(&na, &tm))
                strftime(until, sizeof(until), "%Y-%m-%dT%H:%M:%SZ", &tm);
        gp_info("node certificate issued (%s) for %s, valid until %s: the status port serves it", why, names, until);
        pthread_mutex_lock(&t->mu);
        t->state = "issued";
        pthread_mutex_unlock(&t->mu);
        rc = 0;
out:
        if (key)
                explicit_bzero(key, strlen(key));
        free(key);
        free(pub);
        free(body);
        free(ca);
        gp_proto_cert_answer_done(&ans);
        gp_buf_done(&resp);
        curl_slist_free_all(hdrs);
        if (h)
                curl_easy_cleanup(h);
        return rc;
}

static void *issuer_main(void *arg) {
        gp_agent_tls *t = arg;
        char cred[GP_PROTO_CRED_LEN + 1];
        int retry_s = RETRY_S;
        pthread_mutex_lock(&t->mu);
        while (!t->stop) {
                bool fresh = t->fresh;
                t->fresh = t->poke = false;
                gp_strlcpy(cred, t->cred, sizeof(cred));
                pthread_mutex_unlock(&t->mu);
                int wait_s = LOOK_S;
                const char *why = needs_new(t);
                if (cred[0] && (fresh || why)) {
                        int rc = ask(t, cred, fresh ? "joined" : why);
                        if (rc == -EAGAIN || rc == -EPROTO) {
                                wait_s = retry_s;
                                retry_s = retry_s * 2 < LOOK_S ? retry_s * 2 : LOOK_S;
                        } else {
                                retry_s = RETRY_S;
                        }
                }
                explicit_bzero(cred, sizeof(cred));
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += wait_s;
                pthread_mutex_lock(&t->mu);
                while (!t->stop && !t->poke)
                        if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
                                break;
        }
        pthread_mutex_unlock(&t->mu);
        return NULL;
}

int gp_agent_tls_start(gp_agent_tls *t, const gp_agent_trust *trust, char *const *urls, int n_urls,
                       const char *node) {
        if (n_urls < 1)
                return -EINVAL;
        t->trust = trust;
        t->urls = urls;
        t->n_urls = n_urls;
        gp_strlcpy(t->node, node, sizeof(t->node));
        int rc = pthread_create(&t->th, NULL, issuer_main, t);
        if (rc)
                return -rc;
        t->started = true;
        return 0;
}

void gp_agent_tls_credential(gp_agent_tls *t, const char *cred, bool joined) {
        if (!t)
                return;
        pthread_mutex_lock(&t->mu);
        gp_strlcpy(t->cred, cred, sizeof(t->cred));
        t->fresh |= joined;
        t->poke = true;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
}

const char *gp_agent_tls_state(gp_agent_tls *t, bool *ret_plaintext_any) {
        if (!t) {
                *ret_plaintext_any = false;
                return "none";
        }
        pthread_mutex_lock(&t->mu);
        const char *s = t->state;
        pthread_mutex_unlock(&t->mu);
        *ret_plaintext_any = t->plaintext_any;
        return s;
}

void gp_agent_tls_stop(gp_agent_tls *t) {
        if (!t)
                return;
        pthread_mutex_lock(&t->mu);
        t->stop = true;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        if (t->started)
                pthread_join(t->th, NULL);
        gp_tls_acceptor_stop(t->acc);
        pthread_mutex_lock(&t->mu); /* no new sniff thread now; those alive end within seconds */
        while (t->sniffing > 0)
                pthread_cond_wait(&t->cv, &t->mu);
        pthread_mutex_unlock(&t->mu);
        if (t->mhd)
                MHD_stop_daemon(t->mhd);
        if (t->lfd >= 0)
                close(t->lfd);
        gp_tls_keep_free(t->keep);
        gp_iplimit_done(&t->ipl);
        explicit_bzero(t->cred, sizeof(t->cred));
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        free(t);
}
