/* coord.h - the coordinator's tables in the store: the server registry
 * and named distributed locks (docs/api.md "Coordinator").
 *
 * Three tables beside the tasks, created if missing at every open (like
 * the metering tables): coord_servers (one row per server: id, url, role,
 * load, last heartbeat, start), coord_locks (one row per held or expired
 * lock: owner, fencing token, expiry) and coord_counters (the fencing
 * token counter).  Every call is a transaction of its own on the handle
 * (outside any other transaction: -EINVAL inside one), durable when it
 * returns 0.  Times come from the store's clock (SQLite: this machine's;
 * PostgreSQL: the database server's clock_timestamp()), so servers on
 * different machines agree on expiry and activity.
 *
 * Locks: an acquire is one transaction that first locks the counter row
 * (PostgreSQL: SELECT ... FOR UPDATE; SQLite: BEGIN IMMEDIATE holds the
 * write lock), so acquires and releases of every lock are serialised and
 * two servers on one database never grant one lock twice.  Each grant
 * (a new owner, or an owner whose lock had expired) takes the next value
 * of the counter as its fencing token; the owner that still holds the
 * lock renews it (a new expiry) and keeps its token.  Expired rows are
 * deleted by later grants, at most GP_COORD_SWEEP_MAX by each (the
 * longest expired first), which return them (the audit log's expiries).
 */
#ifndef GP_STORE_COORD_H
#define GP_STORE_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define GP_COORD_ID_MAX 128        /* bytes of a server id, lock id or owner (without the NUL) */
#define GP_COORD_URL_MAX 255       /* bytes of a server's url */
#define GP_COORD_MAX_LOCKS 10000   /* locks held at once */
#define GP_COORD_MAX_SERVERS 1000  /* servers in the registry */
#define GP_COORD_TIMEOUT_MAX_MS (86400LL * 1000) /* longest lock timeout */
#define GP_COORD_SWEEP_MAX 16      /* expired rows of other locks a grant removes */

typedef struct gp_coord_server {
        char server_id[GP_COORD_ID_MAX + 1];
        char url[GP_COORD_URL_MAX + 1];
        char role[16];                  /* "leader", "follower", "standby" */
        int64_t load_milli;             /* its load 0..1000 (0..1 * 1000) */
        int64_t last_heartbeat_ms;      /* store clock */
        int64_t started_ms;             /* when it registered (store clock) */
} gp_coord_server;

typedef struct gp_coord_lock {
        char lock_id[GP_COORD_ID_MAX + 1];
        char owner[GP_COORD_ID_MAX + 1];
        int64_t fencing_token;
        int64_t acquired_ms;            /* when this token was granted */
        int64_t expires_ms;
} gp_coord_lock;

/* What a lock acquire found and removed (gp_store_coord_lock_acquire). */
typedef struct gp_coord_grant {
        gp_coord_lock prev;                        /* the row of the lock before: lock_id "" = none */
        gp_coord_lock expired[GP_COORD_SWEEP_MAX]; /* expired rows of other locks this grant removed */
        size_t nexpired;
} gp_coord_grant;

/* Is role one of "leader", "follower", "standby"? */
bool gp_coord_role_ok(const char *role);

/* The store's clock, ms since the epoch.  0 or -GP_ESTORE. */
int gp_store_coord_now(gp_store *s, int64_t *ret);

/* A server's heartbeat: insert or update its row (url, role, load,
 * last_heartbeat_ms = now); register = true also sets started_ms = now
 * (a new row always gets it).  *ret_now (if not NULL) gets the store's
 * time; *ret_old (if not NULL) the row as it was before, read in the same
 * transaction (server_id "" when the server was not registered; one more
 * query, so the servers' own beats pass NULL).  0, -ENOSPC (a new server
 * and GP_COORD_MAX_SERVERS are registered; nothing written), -EINVAL (a
 * string empty, too long or not NUL-terminated, role unknown, load
 * outside 0..1000, or inside a transaction), -GP_ESTORE. */
int gp_store_coord_heartbeat(gp_store *s, const gp_coord_server *sv, bool register_, int64_t *ret_now,
                             gp_coord_server *ret_old);
/* Remove a server from the registry; *ret_old (if not NULL) gets the row
 * removed.  0, -ENOENT, -EINVAL, -GP_ESTORE. */
int gp_store_coord_unregister(gp_store *s, const char *server_id, gp_coord_server *ret_old);
/* Every registered server by id, and the store's time (ret_now may be
 * NULL).  cb returns 0 to go on, else stops and that value is returned.
 * It must not call into s.  0, cb's value, -EINVAL, -GP_ESTORE. */
typedef int (*gp_coord_server_cb)(const gp_coord_server *sv, void *ud);
int gp_store_coord_servers(gp_store *s, gp_coord_server_cb cb, void *ud, int64_t *ret_now);

/* Acquire (or renew) lock_id for owner for timeout_ms (1..GP_COORD_TIMEOUT_MAX_MS).
 * 0: granted, *ret the lock (its fencing token, expiry), and *ret_grant
 * (if not NULL): prev, the row of lock_id as it was (lock_id "" when there
 * was none, else its owner, token and expiry: the same fencing token as
 * *ret: this owner renewed it; another: it had expired, a new grant), and
 * the expired rows of other locks a new grant removed (a renewal none);
 * -EBUSY: another owner holds it and it has not expired, *ret its holder;
 * -ENOSPC: GP_COORD_MAX_LOCKS other locks are held (nothing written);
 * -EINVAL (bad argument), -GP_ESTORE. */
int gp_store_coord_lock_acquire(gp_store *s, const char *lock_id, const char *owner, int64_t timeout_ms,
                                gp_coord_lock *ret, gp_coord_grant *ret_grant);
/* Release lock_id held by owner.  0 (released), -EBUSY (another owner
 * holds it; *ret that holder), -ENOENT (not held: never, released, or
 * expired), -EINVAL, -GP_ESTORE. */
int gp_store_coord_lock_release(gp_store *s, const char *lock_id, const char *owner, gp_coord_lock *ret);
/* The held (unexpired) locks by lock_id, and the store's time. */
typedef int (*gp_coord_lock_cb)(const gp_coord_lock *l, void *ud);
int gp_store_coord_locks(gp_store *s, gp_coord_lock_cb cb, void *ud, int64_t *ret_now);

#endif
