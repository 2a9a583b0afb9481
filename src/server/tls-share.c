/* tls-share.c - one CA for the servers of a PostgreSQL store (cluster.server_id
 * set, no server.tls.cert): agents pin one CA, so they can follow whichever
 * server leads, and followers verify the leader with it.
 *
 * The CA's certificate and key are kept in the store's meta table under
 * META_KEY, as the two PEM blocks one after the other.  Under the
 * coordinator lock LOCK_ID (so two servers starting together agree) a
 * server reads it: there, it replaces DATA_DIR/tls/ca.crt and ca.key when
 * they differ (the keeper then issues a server certificate from it); not
 * there, the server stores its own (made now if it has none): the first
 * server to store wins.  Whoever can read the database can read the CA key
 * (docs/security.md). */
#include "server/tls-share.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/tls-keep.h"
#include "base/tls.h"
#include "base/util.h"
#include "store/coord.h"
#include "store/store.h"

#define META_KEY "tls_ca"
#define LOCK_ID "gpupool-tls-ca"
#define LOCK_MS 30000
#define WAIT_MS 45000       /* a lock left by a server that died expires in LOCK_MS */
#define PAIR_MAX 65536

static const char KEY_BEGIN[] = "-----BEGIN";

/* The key's PEM block in pair: the first BEGIN that is not a certificate's. */
static const char *key_part(const char *pair) {
        for (const char *p = strstr(pair, KEY_BEGIN); p; p = strstr(p + 1, KEY_BEGIN))
                if (strncmp(p, "-----BEGIN CERTIFICATE-----", 27) != 0)
                        return p;
        return NULL;
}

/* Reads dir/name into a malloc'd string, or NULL. */
static char *read_in(const char *dir, const char *name) {
        char p[PATH_MAX + 32];
        char *s = NULL;
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        return gp_tls_read_pem(p, &s, NULL) == 0 ? s : NULL;
}

static int under_lock(gp_store *st, const char *dir, char *err, size_t errlen) {
        char *pair = malloc(PAIR_MAX), *ca = NULL, *key = NULL;
        int r;
        if (!pair)
                return -ENOMEM;
        r = gp_store_meta_get(st, META_KEY, pair, PAIR_MAX);
        if (r == 0) {
                const char *k = key_part(pair);
                char h[GP_TLS_HASH_LEN];
                if (!k || gp_tls_ca_hash_pem(pair, (size_t)(k - pair), h) < 0) {
                        snprintf(err, errlen, "the CA stored in the database (meta %s) does not parse", META_KEY);
                        r = -EINVAL;
                        goto out;
                }
                ca = strndup(pair, (size_t)(k - pair));
                char *old = read_in(dir, "ca.crt");
                bool same = old && ca && !strcmp(old, ca);
                free(old);
                if (!ca) {
                        r = -ENOMEM;
                        goto out;
                }
                if (!same) {
                        r = gp_tls_write_file(dir, "ca.key", k, 0600);
                        if (r == 0)
                                r = gp_tls_write_file(dir, "ca.crt", ca, 0644);
                        if (r < 0) {
                                snprintf(err, errlen, "%s: %s", dir, strerror(-r));
                                goto out;
                        }
                        gp_info("tls: the cluster's CA (%s, stored in the database) is now this server's, in "
                                "%s/ca.crt", h, dir);
                }
                goto out; /* r = 0 */
        }
        if (r != -ENOENT) {
                snprintf(err, errlen, "cannot read the cluster's CA from the store (%s)", gp_strerror(r));
                goto out;
        }
        /* none stored: this server's own (made now when it has none) becomes the cluster's */
        ca = read_in(dir, "ca.crt");
        key = read_in(dir, "ca.key");
        if (!ca || !key) {
                free(ca);
                free(key);
                ca = key = NULL;
                r = gp_tls_make_ca("gpupool CA", GP_TLS_CA_DAYS, &ca, &key);
                if (r == 0)
                        r = gp_tls_write_file(dir, "ca.key", key, 0600);
                if (r == 0)
                        r = gp_tls_write_file(dir, "ca.crt", ca, 0644);
                if (r < 0) {
                        snprintf(err, errlen, "cannot make a CA in %s: %s", dir, strerror(-r));
                        goto out;
                }
        }
        if ((size_t)snprintf(pair, PAIR_MAX, "%s%s", ca, key) >= PAIR_MAX) {
                snprintf(err, errlen, "%s/ca.crt and ca.key are too large to share", dir);
                r = -E2BIG;
                goto out;
        }
        r = gp_store_meta_set(st, META_KEY, pair);
        if (r < 0) {
                snprintf(err, errlen, "cannot store the cluster's CA (%s)", gp_strerror(r));
                goto out;
        }
        gp_info("tls: this server's CA in %s/ca.crt is now the cluster's (stored in the database)", dir);
out:
        explicit_bzero(pair, PAIR_MAX);
        free(pair);
        free(ca);
        if (key)
                explicit_bzero(key, strlen(key));
        free(key);
        return r;
}

int gp_tls_share_ca(const gp_config *cfg, const char *dir, char *err, size_t errlen) {
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                int e = errno;
                snprintf(err, errlen, "%s: %s", dir, strerror(e));
                return -e;
        }
        gp_store *st = NULL;
        gp_store_options so = {.busy_timeout_ms = 5000};
        char e2[512];
        int r = gp_store_open(cfg->store_url, &so, &st, e2, sizeof(e2));
        if (r < 0) {
                snprintf(err, errlen, "store: %s", e2);
                return r;
        }
        gp_coord_lock l;
        int64_t until = gp_mono_ms() + WAIT_MS;
        while ((r = gp_store_coord_lock_acquire(st, LOCK_ID, cfg->server_id, LOCK_MS, &l, NULL)) == -EBUSY &&
               gp_mono_ms() < until)
                usleep(200 * 1000);
        if (r < 0) {
                snprintf(err, errlen, "cannot take the lock %s to agree on the cluster's CA (%s)", LOCK_ID,
                         r == -EBUSY ? "held by another server" : gp_strerror(r));
                gp_store_close(st);
                return r;
        }
        r = under_lock(st, dir, err, errlen);
        gp_store_coord_lock_release(st, LOCK_ID, cfg->server_id, &l);
        gp_store_close(st);
        return r;
}
