/* server.c - `gpupool server [--config FILE] [--listen ADDR:PORT]
 * [--data-dir DIR]`: option parsing, config, start-up and shutdown. */
#include "server/server.h"

#include "base/err.h"
#include "base/log.h"
#include "base/user.h"
#include "base/util.h"
#include "server/server-int.h"
#include "server/serve.h"
#include "server/coord.h"
#include "server/follower.h"
#include "server/tls-setup.h"
#include "store/coord.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The store URL for a log line: userinfo (user:password@) hidden. */
static void redact_url(const char *url, char *out, size_t size) {
        const char *scheme = strstr(url, "://");
        const char *at = scheme ? strchr(scheme + 3, '@') : NULL;
        if (!at) {
                gp_strlcpy(out, url, size);
                return;
        }
        int n = snprintf(out, size, "%.*s***%s", (int)(scheme + 3 - url), url, at);
        if (n < 0 || (size_t)n >= size)
                gp_strlcpy(out, "(store url)", size);
}

static const char usage[] =
        "usage: gpupool server [--config FILE] [--listen ADDR:PORT] [--data-dir DIR] [--user USER]\n"
        "  With no config file the embedded default is used: SQLite in ./gpupool-data,\n"
        "  port 8080, NVML GPUs if the NVIDIA driver is present, else 4 simulated GPUs.\n"
        "  --user (server.user): started as root, become USER once the port is bound.\n";

/* server.user and tenants[].run_as exclude each other: starting a task as
 * another user needs root, which server.user gives up.  0 or -EINVAL. */
static int check_users(const gp_config *cfg, char *err, size_t errlen) {
        if (!cfg->server_user[0])
                return 0;
        for (int i = 0; i < cfg->n_tenants; i++) {
                const char *ra = cfg->tenants[i].run_as;
                if (ra[0] && strcmp(ra, cfg->server_user) != 0) {
                        snprintf(err, errlen,
                                 "tenants[%d] (%s): run_as '%s' cannot work with server.user '%s': starting tasks "
                                 "as another user needs the daemon to keep root; drop one of the two",
                                 i, cfg->tenants[i].id, ra, cfg->server_user);
                        return -EINVAL;
                }
        }
        return 0;
}

/* The data dir must be server.user's before the daemon becomes it: made
 * here (0700, owned by the user) when it does not exist yet (its parent
 * must); an existing one must already belong to the user - we never chown
 * a tree we did not make (it may hold links planted to redirect a chown).
 * 0 or -errno with a message. */
static int data_dir_for(const gp_config *cfg, const gp_user *u, char *err, size_t errlen) {
        struct stat st;
        if (stat(cfg->data_dir, &st) < 0) {
                if (errno != ENOENT || mkdir(cfg->data_dir, 0700) < 0) {
                        int e = errno;
                        snprintf(err, errlen, "data dir %.400s: %s", cfg->data_dir, strerror(e));
                        return -e;
                }
                int fd = open(cfg->data_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || fchown(fd, u->uid, u->gid) < 0 || fstat(fd, &st) < 0) {
                        int e = errno;
                        if (fd >= 0)
                                close(fd);
                        snprintf(err, errlen, "data dir %.400s: cannot give it to server.user '%s': %s", cfg->data_dir,
                                 u->name, strerror(e));
                        return -e;
                }
                close(fd);
                gp_info("made data dir %s for server.user '%s'", cfg->data_dir, u->name);
        }
        if (!S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "data dir %.400s: not a directory", cfg->data_dir);
                return -ENOTDIR;
        }
        if (st.st_uid != u->uid) {
                snprintf(err, errlen,
                         "data dir %.400s belongs to uid %u, but server.user '%s' is uid %u: give it to that user "
                         "(chown -R %s: %.400s) or use another --data-dir",
                         cfg->data_dir, (unsigned)st.st_uid, u->name, (unsigned)u->uid, u->name, cfg->data_dir);
                return -EACCES;
        }
        return 0;
}

/* After the port is bound and before anything else is opened: become
 * server.user for good (groups, gid, uid; checked: setuid(0) fails after).
 * Without server.user a root daemon only warns.  0 or -errno with a
 * message; the caller exits on failure. */
static int drop_root(const gp_config *cfg, char *err, size_t errlen) {
        uid_t me = geteuid();
        if (!cfg->server_user[0]) {
                if (me == 0) {
                        bool run_as = false;
                        for (int i = 0; i < cfg->n_tenants; i++)
                                run_as = run_as || cfg->tenants[i].run_as[0];
                        gp_warn("running as root without server.user: %s", run_as
                                ? "kept for tenants[].run_as (the tasks run as their users; the daemon, its "
                                  "HTTP server and the gateway keep root)"
                                : "the daemon, its HTTP server, the gateway and every task run as root; set "
                                  "server.user (or --user) to drop root once the port is bound");
                }
                return 0;
        }
        gp_user u;
        int rc = gp_user_lookup(cfg->server_user, &u);
        if (rc < 0) {
                snprintf(err, errlen, "server.user '%s': %s", cfg->server_user,
                         rc == -ENOENT ? "no such Unix user on this machine" : gp_strerror(rc));
                return rc;
        }
        if (me != 0) {
                if (me == u.uid)
                        return 0;   /* already that user: nothing to drop */
                snprintf(err, errlen, "server.user '%s' (uid %u): gpupool server must start as root to become "
                         "it; it runs as uid %u", u.name, (unsigned)u.uid, (unsigned)me);
                return -EPERM;
        }
        if (u.uid == 0) {
                gp_warn("server.user '%s' is root: nothing is dropped", u.name);
                return 0;
        }
        if ((rc = data_dir_for(cfg, &u, err, errlen)) < 0)
                return rc;
        if ((rc = gp_user_become(&u)) < 0) {
                snprintf(err, errlen, "cannot become server.user '%s' (uid %u, gid %u): %s", u.name,
                         (unsigned)u.uid, (unsigned)u.gid, gp_strerror(rc));
                return rc;
        }
        gp_info("dropped root: running as server.user '%s' (uid %u, gid %u, %d groups)", u.name, (unsigned)u.uid,
                (unsigned)u.gid, u.ngroups);
        return 0;
}

/* ---- several servers on one PostgreSQL: follower, then leader ---- */

typedef struct lead {
        gp_store *ls;        /* the lease's own handle (the daemon's are fenced) */
        const char *id;
        int64_t epoch;
        int64_t lease_ms;
        int64_t last_ok;     /* gp_mono_ms when the last successful acquire/renew was sent */
        pthread_mutex_t mu;  /* the lease thread's renewals vs the release at a clean stop */
        bool done;           /* under mu: released, renew no more */
} lead;

#define GP_STORE_ERRMSG_COPY 512 /* a store message, as logged */

static void sleep_ms(int64_t ms) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* Renew the lease every lease_s / 3 for the life of the process.  When
 * another took it over, step down at once (exit 75).  When it could not
 * be renewed for lease_s (the database cannot be reached; another may
 * lead once it can), act on nothing more and answer nothing but the probes
 * (gp_daemon_depose), and step down as soon as the database answers
 * again.  The fence (daemon.c) stops a commit that comes first. */
static void *lease_main(void *arg) {
        lead *l = arg;
        for (;;) {
                sleep_ms(l->lease_ms / 3);
                int64_t sent = gp_mono_ms();
                pthread_mutex_lock(&l->mu);
                if (l->done) {
                        pthread_mutex_unlock(&l->mu);
                        return NULL;
                }
                char why[GP_STORE_ERRMSG_COPY];
                int r = gp_store_lease_renew(l->ls, l->id, l->epoch, l->lease_ms);
                gp_strlcpy(why, gp_store_errmsg(l->ls), sizeof(why));
                pthread_mutex_unlock(&l->mu);
                if (gp_daemon_deposed() && (r == 0 || r == -ESTALE)) {
                        /* what it skipped meanwhile is not in its memory: start afresh */
                        gp_error("lost the lead (epoch %" PRId64 "): stepping down (the database answers again)",
                                 l->epoch);
                        _exit(75);
                }
                if (r == 0) {
                        l->last_ok = sent;
                        gp_daemon_lead_until(sent + l->lease_ms);
                        continue;
                }
                if (r == -ESTALE) {
                        gp_error("lost the lead (epoch %" PRId64 "): stepping down (%s)", l->epoch, why);
                        _exit(75);
                }
                if (gp_daemon_deposed())
                        continue;
                if (gp_mono_ms() - l->last_ok >= l->lease_ms) {
                        char msg[GP_STORE_ERRMSG_COPY + 64];
                        snprintf(msg, sizeof(msg), "the lease could not be renewed for lease_s (%s)", why);
                        gp_daemon_depose(msg);
                        continue;
                }
                gp_warn("cannot renew the leader lease (epoch %" PRId64 "), trying again: %s", l->epoch, why);
        }
        return NULL;
}

/* The follower's own row in the registry (role follower), every
 * heartbeat_interval_s; the first registers it. */
static void follower_beat(const gp_config *cfg, lead *l, int64_t *next, bool *registered) {
        int64_t now = gp_mono_ms();
        if (now < *next)
                return;
        char url[GP_COORD_URL_MAX + 1];
        gp_coord_self_url(cfg, url, sizeof(url));
        if (gp_coord_record(l->ls, l->id, url, "follower", 0, !*registered, NULL) == 0) {
                *registered = true;
                *next = now + (int64_t)cfg->heartbeat_interval_s * 1000;
        } else {
                *next = now + l->lease_ms / 3; /* the store is failing: try again sooner */
        }
}

/* This server as a member of the store's cluster, on the lease's handle
 * for the life of the process (store.h gp_store_claim_member): no single
 * server beside it, no other live process with its server_id.  0, -1
 * (error, printed), GP_SERVER_EXIT_CONFLICT (refused, printed). */
static int claim_member(const gp_config *cfg, gp_store *ls) {
        gp_store_owner me;
        memset(&me, 0, sizeof(me));
        if (gethostname(me.host, sizeof(me.host) - 1) < 0)
                me.host[0] = '\0';
        me.pid = getpid();
        gp_strlcpy(me.listen, cfg->listen, sizeof(me.listen));
        me.since_ms = gp_now_ms();
        int r = gp_store_claim_member(ls, cfg->server_id, &me, NULL);
        if (r == 0)
                return 0;
        fprintf(stderr, "gpupool server: store: %s\n", gp_store_errmsg(ls));
        if (r != -EBUSY && r != -EEXIST)
                return -1;
        fprintf(stderr, "gpupool server: refused to start (exit %d: a configuration conflict; restarting will not "
                        "help until the configuration is changed)\n", GP_SERVER_EXIT_CONFLICT);
        return -GP_SERVER_EXIT_CONFLICT;
}

/* Follow (answer by forwarding to the leader) until this server gets the
 * leader lease: 1 (l filled), 0 (a stopping signal came first), -1
 * (error, printed), -GP_SERVER_EXIT_CONFLICT (refused: another server
 * holds the store or this server_id; printed). */
static int wait_for_lead(const gp_config *cfg, const int *bound, int nbound, sigset_t *set, lead *l) {
        char err[1024];
        gp_store_options so = {.busy_timeout_ms = 5000};
        if (gp_store_open(cfg->store_url, &so, &l->ls, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool server: store: %s\n", err);
                return -1;
        }
        l->id = cfg->server_id;
        l->lease_ms = (int64_t)cfg->lease_s * 1000;
        int cr = claim_member(cfg, l->ls);
        if (cr < 0)
                return cr;
        gp_follower *fw = NULL;
        bool said = false, failing = false, registered = false;
        int64_t next_beat = 0;
        char self_url[GP_STORE_LEASE_URL_MAX + 1];
        gp_coord_self_url(cfg, self_url, sizeof(self_url));
        for (;;) {
                int64_t sent = gp_mono_ms();
                int r = gp_store_lease_acquire(l->ls, l->id, self_url, l->lease_ms, &l->epoch);
                if (r == 0) {
                        l->last_ok = sent;
                        gp_daemon_lead_until(sent + l->lease_ms);
                        gp_follower_leads(fw); /* the writes it forwarded to the old leader are decidable now */
                        gp_follower_stop(fw);
                        gp_info("server %s leads (epoch %" PRId64 ")", l->id, l->epoch);
                        return 1;
                }
                int64_t ms = l->lease_ms / 3;
                gp_store_lease held = {.epoch = 0};
                /* where the leader is: the url it wrote with its lease (nothing else names it);
                 * read before the follower first serves, so it never starts without it */
                bool known = r == -EBUSY && gp_store_lease_get(l->ls, &held) == 0;
                if (!fw) {
                        int sr = gp_follower_start(l->id, cfg, bound, nbound, &fw);
                        if (sr < 0) {
                                fprintf(stderr, "gpupool server: cannot serve as follower: %s\n", strerror(-sr));
                                return -1;
                        }
                }
                gp_follower_store_answered(fw, r == -EBUSY); /* its coordinator health says so */
                if (r == -EBUSY) {
                        if (known) {
                                gp_follower_set_epoch(fw, held.epoch); /* before the url it goes with */
                                gp_follower_set_leader(fw, held.holder, held.url);
                                /* try again as the lease runs out, not up to lease_s / 3 later */
                                if (held.left_ms + 20 < ms)
                                        ms = held.left_ms + 20 > 20 ? held.left_ms + 20 : 20;
                        }
                        if (!said)
                                gp_info("server %s follows: the leader is %s (epoch %" PRId64 ", at %s); requests "
                                        "are forwarded to it; trying for the lead every %" PRId64
                                        " ms and as its lease runs out",
                                        l->id, held.holder[0] ? held.holder : "unknown", held.epoch,
                                        held.url[0] ? held.url : "an unknown url", l->lease_ms / 3);
                        said = true;
                        follower_beat(cfg, l, &next_beat, &registered);
                } else if (!failing) { /* once per outage: it is tried every lease_s / 3 */
                        gp_warn("server %s: cannot read the leader lease (trying again): %s", l->id,
                                gp_store_errmsg(l->ls));
                }
                failing = r != -EBUSY;
                struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
                int sig = sigtimedwait(set, NULL, &ts);
                if (sig == SIGHUP) {
                        gp_server_tls_reload();
                        continue;
                }
                if (sig > 0) {
                        gp_info("signal %d: stopping (follower)", sig);
                        gp_follower_stop(fw);
                        return 0;
                }
        }
}

int gp_server_main(int argc, char **argv) {
        const char *config = NULL, *listen = NULL, *data_dir = NULL, *user = NULL;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                        fputs(usage, stdout);
                        return 0;
                }
                const char **dst = !strcmp(a, "--config")     ? &config
                                   : !strcmp(a, "--listen")   ? &listen
                                   : !strcmp(a, "--data-dir") ? &data_dir
                                   : !strcmp(a, "--user")     ? &user
                                                              : NULL;
                if (!dst || i + 1 >= argc) {
                        fprintf(stderr, "gpupool server: %s '%s'\n%s", dst ? "missing value for" : "unknown option", a,
                                usage);
                        return 2;
                }
                *dst = argv[++i];
        }
        gp_config cfg __attribute__((cleanup(gp_config_free))); /* its lists are freed on every return */
        char err[1024];
        gp_config_defaults(&cfg);
        if (config && gp_config_load(config, &cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool server: bad config: %s\n", err);
                return 1;
        }
        if (listen && gp_strlcpy(cfg.listen, listen, sizeof(cfg.listen)) >= sizeof(cfg.listen)) {
                fprintf(stderr, "gpupool server: --listen too long\n");
                return 2;
        }
        if (data_dir) {
                char old_default[sizeof(cfg.store_url)];
                gp_config base;
                gp_config_defaults(&base);
                int n = snprintf(old_default, sizeof(old_default), "sqlite://%s/gpupool.db", cfg.data_dir);
                bool derived = (n > 0 && (size_t)n < sizeof(old_default) && !strcmp(cfg.store_url, old_default)) ||
                               !strcmp(cfg.store_url, base.store_url);
                if (gp_strlcpy(cfg.data_dir, data_dir, sizeof(cfg.data_dir)) >= sizeof(cfg.data_dir)) {
                        fprintf(stderr, "gpupool server: --data-dir too long\n");
                        return 2;
                }
                /* the store follows the data dir unless the config names it */
                if (derived) {
                        n = snprintf(cfg.store_url, sizeof(cfg.store_url), "sqlite://%s/gpupool.db", cfg.data_dir);
                        if (n < 0 || (size_t)n >= sizeof(cfg.store_url)) {
                                fprintf(stderr, "gpupool server: --data-dir too long\n");
                                return 2;
                        }
                }
        }
        if (user) {
                gp_user u;
                int urc = gp_user_lookup(user, &u);
                if (urc < 0) {
                        fprintf(stderr, "gpupool server: --user '%s': %s\n", user,
                                urc == -ENOENT ? "no such Unix user on this machine"
                                : urc == -EINVAL ? "not a Unix user name" : gp_strerror(urc));
                        return urc == -EINVAL ? 2 : 1;
                }
                gp_strlcpy(cfg.server_user, u.name, sizeof(cfg.server_user));
        }
        const char *sid = getenv("GPUPOOL_SERVER_ID"); /* overrides cluster.server_id */
        if (sid && *sid && gp_strlcpy(cfg.server_id, sid, sizeof(cfg.server_id)) >= sizeof(cfg.server_id)) {
                fprintf(stderr, "gpupool server: GPUPOOL_SERVER_ID longer than 63 bytes\n");
                return 2;
        }
        if (gp_config_validate(&cfg, err, sizeof(err)) < 0 || check_users(&cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool server: bad config: %s\n", err);
                return 1;
        }
        if (cfg.server_id[0] && !cfg.advertise_url[0] &&
            (!strncmp(cfg.listen, "0.0.0.0:", 8) || !strncmp(cfg.listen, "[::]:", 5)))
                gp_warn("cluster.advertise_url is not set and server.listen (%s) names no address the other "
                        "servers can reach: they cannot forward requests to this one while it leads",
                        cfg.listen);
        signal(SIGPIPE, SIG_IGN);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &set, NULL); /* threads inherit: only sigwait sees them */

        /* the port first (it may be below 1024), then root goes, then
         * everything else is opened as server.user */
        int bound[GP_HTTP_MAX_LOOPS], nbound = 0;
        if (gp_http_bind(&cfg, bound, &nbound, err, sizeof(err)) < 0 || drop_root(&cfg, err, sizeof(err)) < 0 ||
            gp_server_tls_start(&cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool server: %s\n", err);
                for (int i = 0; i < nbound; i++)
                        close(bound[i]);
                return 1;
        }
        static lead l = {.mu = PTHREAD_MUTEX_INITIALIZER}; /* the lease thread's, for the life of the process */
        if (cfg.server_id[0]) {
                int wr = wait_for_lead(&cfg, bound, nbound, &set, &l);
                pthread_t lt;
                if (wr > 0 && pthread_create(&lt, NULL, lease_main, &l) != 0) {
                        fprintf(stderr, "gpupool server: cannot start the lease thread\n");
                        wr = -1;
                }
                if (wr <= 0) {
                        for (int i = 0; i < nbound; i++)
                                close(bound[i]);
                        gp_store_close(l.ls);
                        return wr == -GP_SERVER_EXIT_CONFLICT ? GP_SERVER_EXIT_CONFLICT : wr < 0 ? 1 : 0;
                }
                pthread_detach(lt);
        }
        gp_daemon *d;
        int orc = cfg.server_id[0] ? gp_daemon_open_lead(&d, &cfg, l.epoch, err, sizeof(err))
                                   : gp_daemon_open(&d, &cfg, err, sizeof(err));
        if (orc < 0) {
                fprintf(stderr, "gpupool server: %s\n", err);
                for (int i = 0; i < nbound; i++)
                        close(bound[i]);
                if (orc != -EADDRINUSE)
                        return 1;
                /* a single server on a cluster's store */
                fprintf(stderr, "gpupool server: refused to start (exit %d: a configuration conflict; restarting "
                                "will not help until the configuration is changed)\n", GP_SERVER_EXIT_CONFLICT);
                return GP_SERVER_EXIT_CONFLICT;
        }
        memcpy(d->bound_fds, bound, (size_t)nbound * sizeof(bound[0]));
        d->n_bound = nbound;
        gp_serve *serve = NULL;
        if (gp_daemon_start(d) < 0 || gp_http_start(d, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool server: %s\n", err);
                gp_daemon_stop(d);
                gp_daemon_close(d);
                return 1;
        }
        if (gp_serve_start(d, &serve) < 0)
                gp_error("cannot start the model servers of gateway.models[].serve (out of memory or threads)");
        char store[sizeof(cfg.store_url)];
        redact_url(cfg.store_url, store, sizeof(store));
        gp_info("gpupool server listening on %s (%s), data in %s, store %s, %zu GPU(s) from backend %s%s",
                cfg.listen, gp_server_tls_mode(), cfg.data_dir, store, d->ngpus, d->backend,
                !strcmp(d->backend, "sim") ? " (SIMULATED GPUs: no NVIDIA driver found or sim configured)" : "");
        int sig = 0;
        while (sigwait(&set, &sig) == 0 && sig == SIGHUP)
                gp_server_tls_reload();
        gp_info("signal %d: stopping (running tasks keep running under their supervisors)", sig);
        gp_serve_stop(serve);
        gp_http_stop(d);
        gp_server_tls_stop();
        gp_daemon_stop(d);
        gp_daemon_close(d);
        if (l.ls) { /* nothing more is stored: a follower may lead at once */
                pthread_mutex_lock(&l.mu);
                l.done = true;
                if (gp_store_lease_release(l.ls, l.id, l.epoch) == 0)
                        gp_info("server %s released the lead (epoch %" PRId64 ")", l.id, l.epoch);
                gp_store_close(l.ls); /* the lease thread looks at done first */
                l.ls = NULL;
                pthread_mutex_unlock(&l.mu);
        }
        return 0;
}
