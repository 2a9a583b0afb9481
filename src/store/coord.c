/* coord.c - the coordinator's tables (coord.h): the server registry and
 * named locks, written once for both backends through gp_store_ops.query.
 *
 * Every call is its own transaction (gp_store_begin: SQLite BEGIN
 * IMMEDIATE, PostgreSQL BEGIN), rolled back on any failure.  Writers first
 * lock a row of coord_counters (FOR UPDATE on PostgreSQL; SQLite's write
 * lock is held from BEGIN IMMEDIATE), so every grant, release and new
 * registration is serialised across servers and the bounds hold.
 */
#include "store/coord.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "store/store-int.h"

const char store_coord_schema_sql[] =
        "CREATE TABLE IF NOT EXISTS coord_servers (server_id TEXT PRIMARY KEY NOT NULL, url TEXT NOT NULL,"
        " role TEXT NOT NULL, load_milli BIGINT NOT NULL, last_heartbeat_ms BIGINT NOT NULL,"
        " started_ms BIGINT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS coord_locks (lock_id TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,"
        " fencing_token BIGINT NOT NULL, acquired_ms BIGINT NOT NULL, expires_ms BIGINT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS coord_counters (name TEXT PRIMARY KEY NOT NULL, value BIGINT NOT NULL);"
        "INSERT INTO coord_counters (name, value) VALUES ('fencing_token', 0) ON CONFLICT (name) DO NOTHING;"
        "INSERT INTO coord_counters (name, value) VALUES ('registry', 0) ON CONFLICT (name) DO NOTHING;";

static bool is_pg(const gp_store *s) {
        return s->ops == &gp_store_postgres_ops;
}

bool gp_coord_role_ok(const char *role) {
        return role && (!strcmp(role, "leader") || !strcmp(role, "follower") || !strcmp(role, "standby"));
}

/* A string argument: NUL-terminated within 1..max bytes. */
static bool str_ok(const char *p, size_t max) {
        return p && p[0] && memchr(p, '\0', max + 1) != NULL;
}

/* The common entry checks (store.c's enter, for calls that are their own
 * transaction). */
static int enter(gp_store *s, const char *what) {
        s->full = false;
        if (s->in_cb) {
                store_set_err(s, "the handle is busy running a list callback", "%s", what);
                return -EBUSY;
        }
        if (s->in_tx) {
                store_set_err(s, "inside a transaction", "%s", what);
                return -EINVAL;
        }
        return 0;
}


/* One integer in the first column of the first row. */
struct one_i64 {
        bool have;
        bool bad;
        int64_t v;
};

static int one_i64_cb(void *ud, int n, const char *const *cols) {
        struct one_i64 *o = ud;
        if (o->have)
                return 0;
        o->have = true;
        o->bad = n < 1 || !cols[0] || gp_parse_i64(cols[0], INT64_MIN, INT64_MAX, &o->v) < 0;
        return 0;
}

static int query_i64(gp_store *s, const char *sql, int n, const char *const *params, const char *what,
                     int64_t *ret) {
        struct one_i64 o = {0};
        int r = store_q(s, sql, n, params, one_i64_cb, &o, what);
        if (r < 0)
                return r;
        if (!o.have)
                return -ENOENT;
        if (o.bad) {
                r = store_set_err(s, "not an integer", "%s", what);
                if (s->in_tx)
                        s->doomed = true;
                return r;
        }
        *ret = o.v;
        return 0;
}

#define NOW_SQLITE "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS BIGINT)"
#define NOW_PG "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"

static int now_ms(gp_store *s, int64_t *ret) {
        return query_i64(s, is_pg(s) ? NOW_PG : NOW_SQLITE, 0, NULL, "the store's clock", ret);
}

int gp_store_coord_now(gp_store *s, int64_t *ret) {
        int r = enter(s, "the store's clock");
        return r < 0 ? r : now_ms(s, ret);
}

/* Lock the counter row name (serialises writers across servers). */
static int lock_counter(gp_store *s, const char *name, int64_t *ret) {
        const char *p[1] = {name};
        int r = query_i64(s,
                          is_pg(s) ? "SELECT value FROM coord_counters WHERE name = $1 FOR UPDATE"
                                   : "SELECT value FROM coord_counters WHERE name = $1",
                          1, p, "coordinator: lock the counter", ret);
        if (r == -ENOENT)
                r = store_set_err(s, "the counter row is missing", "coordinator: lock the counter %s", name);
        return r;
}

static void fmt(char *buf, size_t size, int64_t v) {
        snprintf(buf, size, "%" PRId64, v);
}

/* Finish a call's transaction: commit on r == 0 (its failure is the
 * result), else roll back and keep r. */
static int finish(gp_store *s, int r) {
        if (r == 0)
                return gp_store_commit(s);
        char msg[GP_STORE_ERRMSG_MAX];
        gp_strlcpy(msg, s->errmsg, sizeof(msg));
        gp_store_rollback(s);
        gp_strlcpy(s->errmsg, msg, sizeof(s->errmsg));
        return r;
}

/* ---- the registry ---- */

/* The first row of a server query into x->one (or none). */
struct one_server {
        gp_store *s;
        gp_coord_server *one;
        bool have;
};

static int i64_col(const char *c, int64_t *ret);

static int one_server_row(void *ud, int n, const char *const *cols) {
        struct one_server *x = ud;
        gp_coord_server sv = {0};
        if (x->have)
                return 0;
        if (n < 6 || !cols[0] || !cols[1] || !cols[2] ||
            gp_strlcpy(sv.server_id, cols[0], sizeof(sv.server_id)) >= sizeof(sv.server_id) ||
            gp_strlcpy(sv.url, cols[1], sizeof(sv.url)) >= sizeof(sv.url) ||
            gp_strlcpy(sv.role, cols[2], sizeof(sv.role)) >= sizeof(sv.role) || i64_col(cols[3], &sv.load_milli) ||
            i64_col(cols[4], &sv.last_heartbeat_ms) || i64_col(cols[5], &sv.started_ms))
                return store_set_err(x->s, "a stored row is out of range", "coordinator servers");
        x->have = true;
        *x->one = sv;
        return 0;
}

#define SERVER_COLS "server_id, url, role, load_milli, last_heartbeat_ms, started_ms"

int gp_store_coord_heartbeat(gp_store *s, const gp_coord_server *sv, bool register_, int64_t *ret_now,
                             gp_coord_server *ret_old) {
        int r = enter(s, "coordinator heartbeat");
        if (r < 0)
                return r;
        if (!str_ok(sv->server_id, GP_COORD_ID_MAX) || !str_ok(sv->url, GP_COORD_URL_MAX) ||
            !memchr(sv->role, '\0', sizeof(sv->role)) || !gp_coord_role_ok(sv->role) || sv->load_milli < 0 ||
            sv->load_milli > 1000) {
                store_set_err(s, "bad server record", "coordinator heartbeat");
                return -EINVAL;
        }
        if ((r = gp_store_begin(s)) < 0)
                return r;
        int64_t now = 0, n = 0;
        char now_t[24], load_t[24];
        if ((r = now_ms(s, &now)) < 0)
                return finish(s, r);
        fmt(now_t, sizeof(now_t), now);
        fmt(load_t, sizeof(load_t), sv->load_milli);
        const char *p[6] = {sv->server_id, sv->url, sv->role, load_t, now_t, register_ ? "1" : "0"};
        gp_coord_server old = {0};
        if (ret_old) { /* the row as it was (locked until the commit) */
                struct one_server x = {.s = s, .one = &old};
                r = store_q(s,
                      is_pg(s) ? "SELECT " SERVER_COLS " FROM coord_servers WHERE server_id = $1 FOR UPDATE"
                               : "SELECT " SERVER_COLS " FROM coord_servers WHERE server_id = $1",
                      1, p, one_server_row, &x, "coordinator heartbeat: read");
                if (r < 0)
                        return finish(s, r);
        }
        /* a known server: one update */
        int64_t found = 0;
        r = query_i64(s,
                      "UPDATE coord_servers SET url = $2, role = $3, load_milli = CAST($4 AS BIGINT), "
                      "last_heartbeat_ms = CAST($5 AS BIGINT), started_ms = CASE WHEN CAST($6 AS BIGINT) = 1 "
                      "THEN CAST($5 AS BIGINT) ELSE started_ms END WHERE server_id = $1 RETURNING 1",
                      6, p, "coordinator heartbeat: update", &found);
        if (r == -ENOENT) { /* a new one: within the bound, serialised with other new ones */
                if ((r = lock_counter(s, "registry", &n)) < 0 ||
                    (r = query_i64(s, "SELECT COUNT(*) FROM coord_servers", 0, NULL, "coordinator heartbeat: count",
                                   &n)) < 0)
                        return finish(s, r);
                if (n >= GP_COORD_MAX_SERVERS) {
                        store_set_err(s, "the registry is full", "coordinator heartbeat");
                        return finish(s, -ENOSPC);
                }
                r = store_q(s,
                      "INSERT INTO coord_servers (server_id, url, role, load_milli, last_heartbeat_ms, started_ms) "
                      "VALUES ($1, $2, $3, CAST($4 AS BIGINT), CAST($5 AS BIGINT), CAST($5 AS BIGINT)) "
                      "ON CONFLICT (server_id) DO UPDATE SET url = excluded.url, role = excluded.role, "
                      "load_milli = excluded.load_milli, last_heartbeat_ms = excluded.last_heartbeat_ms",
                      5, p, NULL, NULL, "coordinator heartbeat: insert");
        }
        if ((r = finish(s, r)) == 0 && ret_now)
                *ret_now = now;
        if (r == 0 && ret_old)
                *ret_old = old;
        return r;
}

int gp_store_coord_unregister(gp_store *s, const char *server_id, gp_coord_server *ret_old) {
        int r = enter(s, "coordinator unregister");
        if (r < 0)
                return r;
        if (!str_ok(server_id, GP_COORD_ID_MAX)) {
                store_set_err(s, "bad server id", "coordinator unregister");
                return -EINVAL;
        }
        if ((r = gp_store_begin(s)) < 0)
                return r;
        const char *p[1] = {server_id};
        gp_coord_server old = {0};
        struct one_server x = {.s = s, .one = &old};
        r = store_q(s, "DELETE FROM coord_servers WHERE server_id = $1 RETURNING " SERVER_COLS, 1, p, one_server_row, &x,
              "coordinator unregister");
        if (r == 0 && !x.have) {
                store_set_err(s, "no such server", "coordinator unregister %s", server_id);
                r = -ENOENT;
        }
        if ((r = finish(s, r)) == 0 && ret_old)
                *ret_old = old;
        return r;
}

struct server_rows {
        gp_store *s;
        gp_coord_server_cb cb;
        void *ud;
        int bad;
};

static int i64_col(const char *c, int64_t *ret) {
        return c && gp_parse_i64(c, INT64_MIN, INT64_MAX, ret) == 0 ? 0 : -1;
}

static int server_row(void *ud, int n, const char *const *cols) {
        struct server_rows *x = ud;
        gp_coord_server sv = {0};
        if (n < 6 || !cols[0] || !cols[1] || !cols[2] ||
            gp_strlcpy(sv.server_id, cols[0], sizeof(sv.server_id)) >= sizeof(sv.server_id) ||
            gp_strlcpy(sv.url, cols[1], sizeof(sv.url)) >= sizeof(sv.url) ||
            gp_strlcpy(sv.role, cols[2], sizeof(sv.role)) >= sizeof(sv.role) || i64_col(cols[3], &sv.load_milli) ||
            i64_col(cols[4], &sv.last_heartbeat_ms) || i64_col(cols[5], &sv.started_ms)) {
                x->bad = store_set_err(x->s, "a stored row is out of range", "coordinator servers");
                return x->bad;
        }
        return x->cb(&sv, x->ud);
}

int gp_store_coord_servers(gp_store *s, gp_coord_server_cb cb, void *ud, int64_t *ret_now) {
        int r = enter(s, "coordinator servers");
        if (r < 0)
                return r;
        int64_t now = 0;
        if ((r = now_ms(s, &now)) < 0)
                return r;
        if (ret_now)
                *ret_now = now;
        struct server_rows x = {.s = s, .cb = cb, .ud = ud};
        s->in_cb = true;
        r = store_q(s,
              "SELECT server_id, url, role, load_milli, last_heartbeat_ms, started_ms FROM coord_servers "
              "ORDER BY server_id",
              0, NULL, server_row, &x, "coordinator servers");
        s->in_cb = false;
        return r;
}

/* ---- locks ---- */

struct lock_rows {
        gp_store *s;
        gp_coord_lock *one;    /* the first row here; or: */
        gp_coord_lock_cb cb;   /* each row to cb */
        void *ud;
        bool have;
};

static int lock_row(void *ud, int n, const char *const *cols) {
        struct lock_rows *x = ud;
        gp_coord_lock l = {0};
        if (n < 5 || !cols[0] || !cols[1] || gp_strlcpy(l.lock_id, cols[0], sizeof(l.lock_id)) >= sizeof(l.lock_id) ||
            gp_strlcpy(l.owner, cols[1], sizeof(l.owner)) >= sizeof(l.owner) || i64_col(cols[2], &l.fencing_token) ||
            i64_col(cols[3], &l.acquired_ms) || i64_col(cols[4], &l.expires_ms))
                return store_set_err(x->s, "a stored row is out of range", "coordinator locks");
        x->have = true;
        if (x->one) {
                *x->one = l;
                return 1;
        }
        return x->cb(&l, x->ud);
}

#define LOCK_COLS "lock_id, owner, fencing_token, acquired_ms, expires_ms"

/* The row of lock_id into *ret: 0, -ENOENT, -GP_ESTORE. */
static int lock_get(gp_store *s, const char *lock_id, gp_coord_lock *ret) {
        struct lock_rows x = {.s = s, .one = ret};
        const char *p[1] = {lock_id};
        int r = store_q(s, "SELECT " LOCK_COLS " FROM coord_locks WHERE lock_id = $1", 1, p, lock_row, &x,
                  "coordinator lock: read");
        if (r < 0)
                return r;
        return x.have ? 0 : -ENOENT;
}

static int lock_args(gp_store *s, const char *lock_id, const char *owner, const char *what) {
        if (!str_ok(lock_id, GP_COORD_ID_MAX) || !str_ok(owner, GP_COORD_ID_MAX)) {
                store_set_err(s, "lock_id and owner are 1..128 bytes", "%s", what);
                return -EINVAL;
        }
        return 0;
}

static int grant_expired(const gp_coord_lock *l, void *ud) {
        gp_coord_grant *g = ud;
        if (g->nexpired < GP_COORD_SWEEP_MAX)
                g->expired[g->nexpired++] = *l;
        return 0;
}

/* Remove the GP_COORD_SWEEP_MAX longest-expired rows of other locks than
 * lock_id, into g->expired.  Each grant adds one row and removes up to
 * that many expired ones, so expired rows never pile up past the bound. */
static int sweep(gp_store *s, const char *lock_id, const char *now_t, gp_coord_grant *g) {
        char max_t[8];
        fmt(max_t, sizeof(max_t), GP_COORD_SWEEP_MAX);
        const char *p[3] = {now_t, lock_id, max_t};
        struct lock_rows x = {.s = s, .cb = grant_expired, .ud = g};
        g->nexpired = 0;
        return store_q(s,
                 "DELETE FROM coord_locks WHERE lock_id IN (SELECT lock_id FROM coord_locks WHERE "
                 "expires_ms <= CAST($1 AS BIGINT) AND lock_id <> $2 ORDER BY expires_ms, lock_id "
                 "LIMIT CAST($3 AS BIGINT)) RETURNING " LOCK_COLS,
                 3, p, lock_row, &x, "coordinator lock: drop expired");
}

int gp_store_coord_lock_acquire(gp_store *s, const char *lock_id, const char *owner, int64_t timeout_ms,
                                gp_coord_lock *ret, gp_coord_grant *ret_grant) {
        int r = enter(s, "coordinator lock acquire");
        if (r < 0 || (r = lock_args(s, lock_id, owner, "coordinator lock acquire")) < 0)
                return r;
        if (timeout_ms < 1 || timeout_ms > GP_COORD_TIMEOUT_MAX_MS) {
                store_set_err(s, "timeout out of range", "coordinator lock acquire");
                return -EINVAL;
        }
        if ((r = gp_store_begin(s)) < 0)
                return r;
        int64_t counter = 0, now = 0;
        gp_coord_lock cur;
        if ((r = lock_counter(s, "fencing_token", &counter)) < 0 || (r = now_ms(s, &now)) < 0)
                return finish(s, r);
        r = lock_get(s, lock_id, &cur);
        if (r < 0 && r != -ENOENT)
                return finish(s, r);
        gp_coord_grant g;
        memset(&g.prev, 0, sizeof(g.prev)); /* the row before: held, expired, or none (lock_id "") */
        g.nexpired = 0;
        if (r == 0)
                g.prev = cur;
        gp_coord_grant *grant = &g;
        bool held = r == 0 && cur.expires_ms > now;
        char now_t[24], exp_t[24], tok_t[24];
        fmt(now_t, sizeof(now_t), now);
        fmt(exp_t, sizeof(exp_t), now + timeout_ms);
        if (held && strcmp(cur.owner, owner) != 0) {
                *ret = cur;
                store_set_err(s, "held by another owner", "coordinator lock acquire %s", lock_id);
                return finish(s, -EBUSY);
        }
        if (held) { /* the owner renews: a new expiry, the same token */
                const char *p[2] = {lock_id, exp_t};
                r = store_q(s, "UPDATE coord_locks SET expires_ms = CAST($2 AS BIGINT) WHERE lock_id = $1", 2, p, NULL,
                      NULL, "coordinator lock: renew");
                cur.expires_ms = now + timeout_ms;
        } else {
                int64_t n = 0;
                const char *pn[1] = {now_t};
                if ((r = query_i64(s, "SELECT COUNT(*) FROM coord_locks WHERE expires_ms > CAST($1 AS BIGINT)", 1, pn,
                                   "coordinator lock: count", &n)) < 0)
                        return finish(s, r);
                if (n >= GP_COORD_MAX_LOCKS) {
                        store_set_err(s, "too many locks are held", "coordinator lock acquire");
                        return finish(s, -ENOSPC);
                }
                fmt(tok_t, sizeof(tok_t), counter + 1);
                const char *pt[1] = {tok_t};
                const char *pl[5] = {lock_id, owner, tok_t, now_t, exp_t};
                if ((r = store_q(s, "UPDATE coord_counters SET value = CAST($1 AS BIGINT) WHERE name = 'fencing_token'", 1,
                           pt, NULL, NULL, "coordinator lock: next token")) < 0 ||
                    (r = sweep(s, lock_id, now_t, grant)) < 0 ||
                    (r = store_q(s, "DELETE FROM coord_locks WHERE lock_id = $1", 1, pl, NULL, NULL,
                           "coordinator lock: drop its expired row")) < 0)
                        return finish(s, r);
                r = store_q(s,
                      "INSERT INTO coord_locks (" LOCK_COLS ") VALUES ($1, $2, CAST($3 AS BIGINT), "
                      "CAST($4 AS BIGINT), CAST($5 AS BIGINT))",
                      5, pl, NULL, NULL, "coordinator lock: grant");
                memset(&cur, 0, sizeof(cur));
                gp_strlcpy(cur.lock_id, lock_id, sizeof(cur.lock_id));
                gp_strlcpy(cur.owner, owner, sizeof(cur.owner));
                cur.fencing_token = counter + 1;
                cur.acquired_ms = now;
                cur.expires_ms = now + timeout_ms;
        }
        if ((r = finish(s, r)) == 0) {
                *ret = cur;
                if (ret_grant) {
                        ret_grant->prev = g.prev;
                        ret_grant->nexpired = g.nexpired;
                        memcpy(ret_grant->expired, g.expired, g.nexpired * sizeof(g.expired[0]));
                }
        }
        return r;
}

int gp_store_coord_lock_release(gp_store *s, const char *lock_id, const char *owner, gp_coord_lock *ret) {
        int r = enter(s, "coordinator lock release");
        if (r < 0 || (r = lock_args(s, lock_id, owner, "coordinator lock release")) < 0)
                return r;
        if ((r = gp_store_begin(s)) < 0)
                return r;
        int64_t counter = 0, now = 0;
        gp_coord_lock cur;
        if ((r = lock_counter(s, "fencing_token", &counter)) < 0 || (r = now_ms(s, &now)) < 0)
                return finish(s, r);
        r = lock_get(s, lock_id, &cur);
        if (r == 0 && cur.expires_ms <= now)
                r = -ENOENT;
        if (r == -ENOENT)
                store_set_err(s, "not held", "coordinator lock release %s", lock_id);
        if (r < 0)
                return finish(s, r);
        if (strcmp(cur.owner, owner) != 0) {
                *ret = cur;
                store_set_err(s, "held by another owner", "coordinator lock release %s", lock_id);
                return finish(s, -EBUSY);
        }
        const char *p[1] = {lock_id};
        r = store_q(s, "DELETE FROM coord_locks WHERE lock_id = $1", 1, p, NULL, NULL, "coordinator lock: release");
        if ((r = finish(s, r)) == 0)
                *ret = cur;
        return r;
}

int gp_store_coord_locks(gp_store *s, gp_coord_lock_cb cb, void *ud, int64_t *ret_now) {
        int r = enter(s, "coordinator locks");
        if (r < 0)
                return r;
        int64_t now = 0;
        if ((r = now_ms(s, &now)) < 0)
                return r;
        if (ret_now)
                *ret_now = now;
        char now_t[24];
        fmt(now_t, sizeof(now_t), now);
        const char *p[1] = {now_t};
        struct lock_rows x = {.s = s, .cb = cb, .ud = ud};
        s->in_cb = true;
        r = store_q(s, "SELECT " LOCK_COLS " FROM coord_locks WHERE expires_ms > CAST($1 AS BIGINT) ORDER BY lock_id", 1, p,
              lock_row, &x, "coordinator locks");
        s->in_cb = false;
        return r;
}
