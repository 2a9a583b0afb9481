/* idem.c - the idempotency table (idem.h), written once for both backends
 * through gp_store_ops.query, as coord.c is.  The row of a request is put
 * in the transaction of its batch; reads are their own statement. */
#include "store/idem.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/sha256.h"
#include "base/util.h"
#include "store/store-int.h"

const char store_idem_schema_sql[] =
        "CREATE TABLE IF NOT EXISTS idempotency (caller TEXT NOT NULL, key TEXT NOT NULL,"
        " fingerprint TEXT NOT NULL, status BIGINT NOT NULL, ctype TEXT NOT NULL, body TEXT NOT NULL,"
        " created_ms BIGINT NOT NULL, PRIMARY KEY (caller, key));";
/* No index on created_ms: a CREATE INDEX IF NOT EXISTS at every open
 * would wait for the table lock of any open transaction (a leader frozen
 * mid-batch); pruning scans at most GP_IDEM_KEEP_MAX rows once a minute. */

bool gp_store_idem_key_ok(const char *k, size_t n) {
        if (!k || n < 1 || n > GP_IDEM_KEY_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)k[i] < 0x20 || (unsigned char)k[i] > 0x7e)
                        return false;
        return true;
}

static bool text_ok(const char *p, size_t min, size_t max) {
        if (!p)
                return false;
        size_t n = strnlen(p, max + 1);
        return n >= min && n <= max && gp_str_is_clean(p, n);
}



int gp_store_idem_put(gp_store *s, const gp_store_idem *rec) {
        const char *what = "keep an idempotent answer";
        if (!s->in_tx) {
                store_set_err(s, "outside a transaction", "%s", what);
                return -EINVAL;
        }
        if (!text_ok(rec->caller, 1, GP_IDEM_CALLER_MAX) || !gp_store_idem_key_ok(rec->key, strlen(rec->key)) ||
            strlen(rec->fp) != GP_IDEM_FP_LEN || !text_ok(rec->ctype, 0, GP_IDEM_CTYPE_MAX) || !rec->body ||
            strnlen(rec->body, GP_IDEM_BODY_MAX + 1) > GP_IDEM_BODY_MAX || rec->status < 100 || rec->status > 599) {
                store_set_err(s, "a field is empty, too long or not text", "%s", what);
                return -EINVAL;
        }
        char status[16], created[24];
        snprintf(status, sizeof(status), "%d", rec->status);
        snprintf(created, sizeof(created), "%" PRId64, rec->created_ms);
        const char *p[7] = {rec->caller, rec->key, rec->fp, status, rec->ctype, rec->body, created};
        return store_w(s,
                 "INSERT INTO idempotency (caller, key, fingerprint, status, ctype, body, created_ms) "
                 "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (caller, key) DO NOTHING",
                 7, p, what);
}

struct get_ud {
        gp_store_idem *rec;
        bool have, bad, nomem;
};

static int get_cb(void *ud, int n, const char *const *cols) {
        struct get_ud *g = ud;
        if (g->have)
                return 0;
        g->have = true;
        int64_t st = 0, created = 0;
        if (n < 5 || !cols[0] || !cols[1] || !cols[2] || !cols[3] || !cols[4] || strlen(cols[0]) != GP_IDEM_FP_LEN ||
            gp_parse_i64(cols[1], 100, 599, &st) < 0 || gp_parse_i64(cols[4], INT64_MIN, INT64_MAX, &created) < 0 ||
            strlen(cols[2]) > GP_IDEM_CTYPE_MAX || strlen(cols[3]) > GP_IDEM_BODY_MAX) {
                g->bad = true;
                return 0;
        }
        gp_strlcpy(g->rec->fp, cols[0], sizeof(g->rec->fp));
        g->rec->status = (int)st;
        gp_strlcpy(g->rec->ctype, cols[2], sizeof(g->rec->ctype));
        g->rec->created_ms = created;
        g->rec->body = strdup(cols[3]);
        g->nomem = !g->rec->body;
        return 0;
}

int gp_store_idem_get(gp_store *s, const char *caller, const char *key, gp_store_idem *ret) {
        const char *what = "read an idempotent answer";
        if (s->in_tx || s->in_cb) {
                store_set_err(s, "inside a transaction or a callback", "%s", what);
                return -EINVAL;
        }
        if (!text_ok(caller, 1, GP_IDEM_CALLER_MAX) || !key || !gp_store_idem_key_ok(key, strlen(key))) {
                store_set_err(s, "bad caller or key", "%s", what);
                return -EINVAL;
        }
        gp_store_idem rec;
        memset(&rec, 0, sizeof(rec));
        gp_strlcpy(rec.caller, caller, sizeof(rec.caller));
        gp_strlcpy(rec.key, key, sizeof(rec.key));
        struct get_ud g = {.rec = &rec};
        const char *p[2] = {caller, key};
        int r = store_q(s,
                  "SELECT fingerprint, status, ctype, body, created_ms FROM idempotency WHERE caller = $1 AND key = $2",
                  2, p, get_cb, &g, what);
        if (r < 0) {
                free(rec.body);
                return r;
        }
        if (g.nomem)
                return -ENOMEM;
        if (g.bad) {
                free(rec.body);
                return store_set_err(s, "a stored row is malformed", "%s", what);
        }
        if (!g.have)
                return -ENOENT;
        *ret = rec;
        return 0;
}

int gp_store_idem_fingerprint(const char *method, const char *path, const char *body, size_t len,
                              char out[GP_IDEM_FP_LEN + 1]) {
        char head[1200];
        const char *rest = NULL;
        if (!strncmp(path, "/api/v1/", 8))
                rest = path + 8;
        else if (!strncmp(path, "/api/", 5))
                rest = path + 5;
        if (strlen(path) > 1024 || strlen(method) > 16)
                return -E2BIG;
        int n = rest ? snprintf(head, sizeof(head), "%s\n/api/v1/%s\n", method, rest)
                     : snprintf(head, sizeof(head), "%s\n%s\n", method, path);
        if (n < 0 || (size_t)n >= sizeof(head))
                return -E2BIG;
        char *all = malloc((size_t)n + len + 1);
        if (!all)
                return -ENOMEM;
        memcpy(all, head, (size_t)n);
        if (len)
                memcpy(all + n, body, len);
        uint8_t h[32];
        gp_sha256(all, (size_t)n + len, h);
        free(all);
        for (int i = 0; i < 32; i++)
                snprintf(out + 2 * i, 3, "%02x", h[i]);
        return 0;
}

struct find_ud {
        const char *fp;
        gp_store_idem *rec;
        int rows;
        bool have, bad, nomem;
};

static int find_cb(void *ud, int n, const char *const *cols) {
        struct find_ud *f = ud;
        f->rows++;
        if (f->have || n < 5 || !cols[0] || strcmp(cols[0], f->fp) != 0)
                return 0;
        struct get_ud g = {.rec = f->rec};
        get_cb(&g, n, cols);
        f->have = g.have && !g.bad && !g.nomem;
        f->bad = g.bad;
        f->nomem = g.nomem;
        return 0;
}

int gp_store_idem_find(gp_store *s, const char *key, const char *fp, gp_store_idem *ret) {
        const char *what = "find an idempotent answer";
        if (s->in_tx || s->in_cb) {
                store_set_err(s, "inside a transaction or a callback", "%s", what);
                return -EINVAL;
        }
        if (!key || !gp_store_idem_key_ok(key, strlen(key)) || !fp || strlen(fp) != GP_IDEM_FP_LEN) {
                store_set_err(s, "bad key or fingerprint", "%s", what);
                return -EINVAL;
        }
        gp_store_idem rec;
        memset(&rec, 0, sizeof(rec));
        gp_strlcpy(rec.key, key, sizeof(rec.key));
        struct find_ud f = {.fp = fp, .rec = &rec};
        const char *p[1] = {key};
        /* at most a few rows: a key is random, one per caller at most */
        int r = store_q(s, "SELECT fingerprint, status, ctype, body, created_ms FROM idempotency WHERE key = $1 LIMIT 64", 1,
                  p, find_cb, &f, what);
        if (r < 0 || f.nomem || f.bad) {
                free(rec.body);
                return r < 0 ? r : f.nomem ? -ENOMEM : store_set_err(s, "a stored row is malformed", "%s", what);
        }
        if (!f.have)
                return f.rows ? -EEXIST : -ENOENT;
        *ret = rec;
        return 0;
}

int gp_store_idem_prune(gp_store *s, int64_t before_ms, int64_t keep_max) {
        char before[24], keep[24];
        snprintf(before, sizeof(before), "%" PRId64, before_ms);
        snprintf(keep, sizeof(keep), "%" PRId64, keep_max > 1 ? keep_max - 1 : 0); /* the keep_max-th newest stays */
        const char *p[1] = {before};
        int r = store_w(s, "DELETE FROM idempotency WHERE created_ms < $1", 1, p, "prune idempotent answers");
        if (r < 0)
                return r;
        const char *p2[1] = {keep};
        return store_w(s,
                 "DELETE FROM idempotency WHERE created_ms < (SELECT created_ms FROM idempotency "
                 "ORDER BY created_ms DESC LIMIT 1 OFFSET CAST($1 AS BIGINT))",
                 1, p2, "prune idempotent answers");
}
