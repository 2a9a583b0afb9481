/* tls-keep.c - the server's current TLS credentials and their reload (see
 * tls-keep.h).
 *
 * Invariants: k->cur is never NULL after open; it changes only under k->mu,
 * and only to credentials that loaded whole.  k->seen holds the identity
 * (inode, size, mtime, ctime) of each watched file as last read, good or
 * bad, so that a bad file is reported once and read again only when it
 * changes.  Files are written to a temporary name and renamed, keys with
 * mode 0600 from their creation. */
#include "base/tls-keep.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

enum { F_CERT, F_KEY, F_CA, F_N };

typedef struct fid {
        bool there;
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime, ctime;
} fid;

struct gp_tls_keep {
        pthread_mutex_t mu;         /* cur, seen, the generated files */
        gp_tls_creds *cur;          /* the credentials new handshakes get */
        bool generated;             /* the files are ours (dir) */
        bool plaintext_any;
        char path[F_N][4200];       /* the watched files; "" = none */
        fid seen[F_N];              /* as last read */
        char dir[4096];             /* generated mode */
        char **sans;                /* generated mode: the names asked */
        size_t nsans;
        /* the watching thread */
        pthread_mutex_t tmu;        /* stop, poked; leaf */
        pthread_cond_t tcv;
        bool started, stop, poked;
        pthread_t thread;
};

static gp_tls_keep *listener_keep;

void gp_tls_set_listener(gp_tls_keep *k) {
        __atomic_store_n(&listener_keep, k, __ATOMIC_RELEASE);
}

gp_tls_keep *gp_tls_listener(void) {
        return __atomic_load_n(&listener_keep, __ATOMIC_ACQUIRE);
}

static fid file_id(const char *path) {
        fid f;
        memset(&f, 0, sizeof(f));
        struct stat st;
        if (path[0] && stat(path, &st) == 0) {
                f.there = true;
                f.dev = st.st_dev;
                f.ino = st.st_ino;
                f.size = st.st_size;
                f.mtime = st.st_mtim;
                f.ctime = st.st_ctim;
        }
        return f;
}

static bool fid_eq(const fid *a, const fid *b) {
        return a->there == b->there && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
               a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
               a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

int gp_tls_write_file(const char *dir, const char *name, const char *s, mode_t mode) {
        char path[4200], tmp[4220];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return -errno;
        size_t len = strlen(s), off = 0;
        int r = 0;
        while (off < len) {
                ssize_t n = write(fd, s + off, len - off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        r = n < 0 ? -errno : -EIO;
                        break;
                }
                off += (size_t)n;
        }
        if (!r && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && !r)
                r = -errno;
        if (!r && rename(tmp, path) < 0)
                r = -errno;
        if (r)
                unlink(tmp);
        return r;
}

static void free_pem(char *s) {
        if (s) {
                explicit_bzero(s, strlen(s));
                free(s);
        }
}

/* Does the server certificate in crt_pem need making again: not signed by
 * ca_pem, within GP_TLS_RENEW_S of its end, or lacking a name asked?  The
 * reason in why. */
static bool needs_issue(const gp_tls_keep *k, const char *crt_pem, const char *ca_pem, const char **why) {
        gnutls_x509_crt_t crt = NULL, ca = NULL;
        bool need = true;
        *why = "it does not parse";
        if (gnutls_x509_crt_init(&crt) < 0 || gnutls_x509_crt_init(&ca) < 0)
                goto out;
        gnutls_datum_t cd = {(unsigned char *)(uintptr_t)crt_pem, (unsigned)strlen(crt_pem)};
        gnutls_datum_t ad = {(unsigned char *)(uintptr_t)ca_pem, (unsigned)strlen(ca_pem)};
        if (gnutls_x509_crt_import(crt, &cd, GNUTLS_X509_FMT_PEM) < 0 ||
            gnutls_x509_crt_import(ca, &ad, GNUTLS_X509_FMT_PEM) < 0)
                goto out;
        unsigned status = 0;
        if (gnutls_x509_crt_verify(crt, &ca, 1, GNUTLS_VERIFY_DISABLE_TIME_CHECKS, &status) < 0 || status) {
                *why = "the CA in ca.crt did not sign it";
                goto out;
        }
        if (gnutls_x509_crt_get_expiration_time(crt) - time(NULL) < GP_TLS_RENEW_S) {
                *why = "it ends within 30 days";
                goto out;
        }
        for (size_t i = 0; i < k->nsans; i++)
                if (!gnutls_x509_crt_check_hostname2(crt, k->sans[i], 0)) {
                        *why = "it lacks a name the server has now";
                        goto out;
                }
        need = false;
out:
        if (ca)
                gnutls_x509_crt_deinit(ca);
        if (crt)
                gnutls_x509_crt_deinit(crt);
        return need;
}

/* Generated mode: make what is missing or due (under mu, or before the
 * keeper is shared).  0, or a negative code with a message. */
static int make_files(gp_tls_keep *k, char *err, size_t errlen) {
        char *ca = NULL, *cakey = NULL, *crt = NULL, *key = NULL;
        int r;
        if (mkdir(k->dir, 0700) < 0 && errno != EEXIST) {
                r = -errno;
                snprintf(err, errlen, "%s: %s", k->dir, strerror(-r));
                return r;
        }
        char p[4200];
        snprintf(p, sizeof(p), "%s/ca.crt", k->dir);
        if (access(p, F_OK) < 0) {
                r = gp_tls_make_ca("gpupool CA", GP_TLS_CA_DAYS, &ca, &cakey);
                if (r == 0)
                        r = gp_tls_write_file(k->dir, "ca.key", cakey, 0600);
                if (r == 0)
                        r = gp_tls_write_file(k->dir, "ca.crt", ca, 0644);
                if (r < 0) {
                        snprintf(err, errlen, "cannot make a CA in %s: %s", k->dir, strerror(-r));
                        goto out;
                }
                gp_info("tls: made a CA in %s/ca.crt (its key in ca.key: keep it secret)", k->dir);
        } else {
                r = gp_tls_read_pem(p, &ca, NULL);
                if (r == 0) {
                        snprintf(p, sizeof(p), "%s/ca.key", k->dir);
                        r = gp_tls_read_pem(p, &cakey, NULL);
                }
                if (r < 0) {
                        snprintf(err, errlen, "%s: %s", p, strerror(-r));
                        goto out;
                }
        }
        const char *why = "there is none";
        snprintf(p, sizeof(p), "%s/server.crt", k->dir);
        if (gp_tls_read_pem(p, &crt, NULL) == 0 && !needs_issue(k, crt, ca, &why))
                goto out; /* r = 0 */
        free(crt);
        crt = NULL;
        char host[256] = "gpupool";
        if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
                gp_strlcpy(host, "gpupool", sizeof(host));
        r = gp_tls_make_cert(ca, cakey, host, (const char *const *)k->sans, k->nsans, 0, GP_TLS_CERT_DAYS, &crt, &key);
        if (r == 0)
                r = gp_tls_write_file(k->dir, "server.key", key, 0600);
        if (r == 0)
                r = gp_tls_write_file(k->dir, "server.crt", crt, 0644);
        if (r < 0) {
                snprintf(err, errlen, "cannot make a server certificate in %s: %s", k->dir, strerror(-r));
                goto out;
        }
        gp_info("tls: made a server certificate in %s/server.crt (%s), valid %d days, for %zu names", k->dir, why,
                GP_TLS_CERT_DAYS, k->nsans);
out:
        free(ca);
        free_pem(cakey);
        free(crt);
        free_pem(key);
        return r;
}

/* Reads the watched files into new credentials; their ids in ids. */
static int load(gp_tls_keep *k, fid ids[F_N], gp_tls_creds **ret, char *err, size_t errlen) {
        for (int i = 0; i < F_N; i++)
                ids[i] = file_id(k->path[i]);
        return gp_tls_creds_load(k->path[F_CERT], k->path[F_KEY], k->path[F_CA], ret, err, errlen);
}

int gp_tls_keep_open(const gp_tls_keep_opts *o, gp_tls_keep **ret, char *err, size_t errlen) {
        gp_tls_keep *k = calloc(1, sizeof(*k));
        int r;
        if (!k)
                return -ENOMEM;
        pthread_mutex_init(&k->mu, NULL);
        pthread_mutex_init(&k->tmu, NULL);
        pthread_cond_init(&k->tcv, NULL);
        k->plaintext_any = o->plaintext_any;
        k->generated = !o->cert || !o->cert[0];
        if (k->generated) {
                if (!o->dir || gp_strlcpy(k->dir, o->dir, sizeof(k->dir)) >= sizeof(k->dir)) {
                        snprintf(err, errlen, "tls: data dir path too long");
                        r = -ENAMETOOLONG;
                        goto fail;
                }
                if (o->nsans && !(k->sans = calloc(o->nsans, sizeof(char *)))) {
                        r = -ENOMEM;
                        goto fail;
                }
                for (size_t i = 0; i < o->nsans; i++) {
                        if (!(k->sans[i] = strdup(o->sans[i]))) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        k->nsans++;
                }
                snprintf(k->path[F_CERT], sizeof(k->path[F_CERT]), "%s/server.crt", k->dir);
                snprintf(k->path[F_KEY], sizeof(k->path[F_KEY]), "%s/server.key", k->dir);
                snprintf(k->path[F_CA], sizeof(k->path[F_CA]), "%s/ca.crt", k->dir);
                r = make_files(k, err, errlen);
                if (r < 0)
                        goto fail;
        } else {
                const char *src[F_N] = {o->cert, o->key, o->ca ? o->ca : ""};
                for (int i = 0; i < F_N; i++)
                        if (!src[i] || gp_strlcpy(k->path[i], src[i], sizeof(k->path[i])) >= sizeof(k->path[i])) {
                                snprintf(err, errlen, "tls: file path too long or missing");
                                r = -EINVAL;
                                goto fail;
                        }
        }
        r = load(k, k->seen, &k->cur, err, errlen);
        if (r < 0)
                goto fail;
        *ret = k;
        return 0;
fail:
        gp_tls_keep_free(k);
        return r;
}

void gp_tls_keep_free(gp_tls_keep *k) {
        if (!k)
                return;
        if (k->started) {
                pthread_mutex_lock(&k->tmu);
                k->stop = true;
                pthread_cond_signal(&k->tcv);
                pthread_mutex_unlock(&k->tmu);
                pthread_join(k->thread, NULL);
        }
        gp_tls_creds_unref(k->cur);
        for (size_t i = 0; i < k->nsans; i++)
                free(k->sans[i]);
        free(k->sans);
        pthread_cond_destroy(&k->tcv);
        pthread_mutex_destroy(&k->tmu);
        pthread_mutex_destroy(&k->mu);
        free(k);
}

gp_tls_creds *gp_tls_keep_get(gp_tls_keep *k) {
        pthread_mutex_lock(&k->mu);
        gp_tls_creds *c = gp_tls_creds_ref(k->cur);
        pthread_mutex_unlock(&k->mu);
        return c;
}

int gp_tls_keep_check(gp_tls_keep *k, bool force) {
        char err[512] = "";
        int r = 0;
        pthread_mutex_lock(&k->mu);
        if (k->generated) {
                /* ours: made again when due (this looks at the clock, not only the files) */
                if (time(NULL) + GP_TLS_RENEW_S > gp_tls_creds_not_after(k->cur) || force) {
                        r = make_files(k, err, sizeof(err));
                        if (r < 0)
                                gp_error("tls: %s; the current certificate stays in use", err);
                }
        }
        fid now[F_N];
        bool changed = force;
        for (int i = 0; i < F_N; i++) {
                now[i] = file_id(k->path[i]);
                changed |= !fid_eq(&now[i], &k->seen[i]);
        }
        if (!changed || r < 0)
                goto out;
        gp_tls_creds *c = NULL;
        r = load(k, k->seen, &c, err, sizeof(err));
        if (r < 0) {
                gp_error("tls: new certificate refused (%s); the current one stays in use", err);
                goto out;
        }
        gp_tls_creds_unref(k->cur);
        k->cur = c;
        r = 1;
        char until[32] = "?";
        struct tm tm;
        time_t na = gp_tls_creds_not_after(c);
        if (gmtime_r(&na, &tm))
                strftime(until, sizeof(until), "%Y-%m-%dT%H:%M:%SZ", &tm);
        /* the CA's pin where there is a CA file (server-made or configured); without one the
         * pin is of the chain's last certificate, which for an agent's node.crt (the node's
         * certificate alone) is no CA: leave it out rather than name it one */
        if (k->path[F_CA][0])
                gp_info("tls: certificate reloaded from %s (valid until %s, CA %s)", k->path[F_CERT], until,
                        gp_tls_creds_ca_hash(c));
        else
                gp_info("tls: certificate reloaded from %s (valid until %s)", k->path[F_CERT], until);
out:
        pthread_mutex_unlock(&k->mu);
        return r;
}

static void *watch_main(void *arg) {
        gp_tls_keep *k = arg;
        pthread_mutex_lock(&k->tmu);
        while (!k->stop) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += GP_TLS_CHECK_S;
                while (!k->stop && !k->poked && pthread_cond_timedwait(&k->tcv, &k->tmu, &ts) != ETIMEDOUT)
                        ;
                if (k->stop)
                        break;
                bool force = k->poked;
                k->poked = false;
                pthread_mutex_unlock(&k->tmu);
                gp_tls_keep_check(k, force);
                pthread_mutex_lock(&k->tmu);
        }
        pthread_mutex_unlock(&k->tmu);
        return NULL;
}

int gp_tls_keep_start(gp_tls_keep *k) {
        int e = pthread_create(&k->thread, NULL, watch_main, k);
        if (e)
                return -e;
        k->started = true;
        return 0;
}

void gp_tls_keep_poke(gp_tls_keep *k) {
        if (!k)
                return;
        pthread_mutex_lock(&k->tmu);
        k->poked = true;
        pthread_cond_signal(&k->tcv);
        pthread_mutex_unlock(&k->tmu);
}

bool gp_tls_keep_plaintext_any(const gp_tls_keep *k) {
        return k->plaintext_any;
}

bool gp_tls_keep_generated(const gp_tls_keep *k) {
        return k->generated;
}
