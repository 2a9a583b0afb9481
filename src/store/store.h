/* store.h - durable storage of tasks and small metadata.
 *
 * Backends behind a vtable (store-int.h): SQLite ("sqlite://PATH", WAL) and
 * PostgreSQL ("postgres://..." or "postgresql://...", a libpq connection
 * URI; tables go in the first schema of its search_path).  Design notes:
 * docs/internals/store.md.  A gp_store handle is used by one
 * thread at a time; open one handle per thread (SQLite WAL lets readers run
 * beside the one writer).  Errors are returned, never logged: the message of
 * the last failure is available from gp_store_errmsg().
 *
 * Durability: a change is durable once gp_store_commit() returned 0 (or,
 * outside a transaction, once gp_store_task_put() returned 0); on a handle
 * opened with deferred_sync, once a gp_store_sync() that began after that
 * commit returned 0.
 */
#ifndef GP_STORE_STORE_H
#define GP_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/billing.h"
#include "core/task.h"

typedef struct gp_store gp_store;

typedef struct gp_store_options {
        bool sync_full;      /* SQLite synchronous=FULL (else NORMAL); PostgreSQL: ignored,
                              * the server's synchronous_commit decides */
        int busy_timeout_ms; /* wait for locks, default 5000 when 0 (PostgreSQL: lock_timeout) */
        bool manual_checkpoint; /* SQLite: commits never checkpoint the WAL themselves;
                                   gp_store_checkpoint on another handle does (PostgreSQL: ignored) */
        bool deferred_sync;     /* SQLite with sync_full: a commit appends to the WAL without waiting
                                   for the disk; gp_store_sync makes it durable (group commit: one
                                   fsync for every commit before it).  PostgreSQL: ignored (its
                                   commit is as durable as its server makes it) */
} gp_store_options;

/* Open (creating the schema if needed). 0, -EINVAL (bad url, message in err),
 * -GP_ESTORE (cannot open / migrate), -ENOMEM. */
int gp_store_open(const char *url, const gp_store_options *opt, gp_store **ret, char *err,
                  size_t errlen);
/* Who holds a store: one live server at a time (several servers on one
 * store are not supported yet; docs/internals/store.md "One server per
 * store").  Strings are NUL-terminated; "" / 0 when unknown. */
typedef struct gp_store_owner {
        char host[256];      /* host name of the server's machine */
        int64_t pid;         /* its process id there */
        char listen[256];    /* its listen address, "ADDR:PORT" */
        int64_t since_ms;    /* when it claimed the store (ms since the epoch) */
} gp_store_owner;

/* Claim the store for this server, for as long as this handle stays open
 * (or the process lives: a server killed with SIGKILL leaves no claim
 * behind), and record *me as its owner.  Outside a transaction only.
 * SQLite: an flock on the file "<database>-owner", which holds the record.
 * PostgreSQL: a session advisory lock of the connection (keyed by the
 * schema the tables live in) and a row in the table store_owner; if the
 * connection is lost, the next call reconnects and claims again, and fails
 * with -GP_ESTORE while another server holds the store.
 * 0; -EBUSY when another live server holds it: *ret_other (if not NULL)
 * gets what that server recorded, and gp_store_errmsg() names it;
 * -EINVAL (me's strings not NUL-terminated, or inside a transaction);
 * -GP_ESTORE.  Claiming again on the same handle rewrites the record. */
int gp_store_claim(gp_store *s, const gp_store_owner *me, gp_store_owner *ret_other);

/* ---- one leader among several servers (PostgreSQL only) ----
 *
 * The leader lease is one row of the table leader (id 1: holder, epoch,
 * expires_at), read and written with the database's clock (now()), never
 * the servers'.  server_id: 1..63 bytes.  SQLite: every call -ENOTSUP.
 *
 * acquire: take the lease for lease_ms when it is free, expired or already
 * held by server_id; every acquire starts a new term, so the epoch grows by
 * one (a restarted server with the same id fences its old incarnation too).
 * url (0..GP_STORE_LEASE_URL_MAX bytes of clean text) is where the others
 * reach the new holder: it is written with the holder, in the same row, so
 * only the leader itself ever names where the leader is.
 * 0 with *ret_epoch, -EBUSY while another holds an unexpired lease (the
 * holder named in gp_store_errmsg), -EINVAL, -GP_ESTORE.
 * renew: push the expiry to now() + lease_ms while the row still says
 * server_id and epoch: 0, -ESTALE when it does not (another took over),
 * -GP_ESTORE.
 * get: the holder ("" when nobody ever held it), its url, its epoch and the
 * ms left until it expires by the database's clock (<= 0: expired).  0,
 * -GP_ESTORE.
 * release: let the lease expire now if server_id and epoch still hold it
 * (the next acquire takes it at once).  0 (also when not held), -GP_ESTORE. */
#define GP_STORE_LEASE_URL_MAX 255
typedef struct gp_store_lease {
        char holder[64];
        char url[GP_STORE_LEASE_URL_MAX + 1];
        int64_t epoch;
        int64_t left_ms;
} gp_store_lease;
int gp_store_lease_acquire(gp_store *s, const char *server_id, const char *url, int64_t lease_ms,
                           int64_t *ret_epoch);
int gp_store_lease_renew(gp_store *s, const char *server_id, int64_t epoch, int64_t lease_ms);
int gp_store_lease_get(gp_store *s, gp_store_lease *ret);
int gp_store_lease_release(gp_store *s, const char *server_id, int64_t epoch);

/* Fence this handle with a lease term: from now on every transaction it
 * commits (and every write outside one, which runs as its own transaction)
 * first checks, inside that transaction, that the leader row still holds
 * server_id and epoch (and keeps the row from changing until it commits);
 * when it does not, nothing of it is stored, the call fails with
 * -GP_EFENCED, and on_fenced (if not NULL) is called with ud - once per
 * failure, from the thread that called.  0, -EINVAL, -ENOTSUP (SQLite). */
int gp_store_set_fence(gp_store *s, const char *server_id, int64_t epoch, void (*on_fenced)(void *ud),
                       void *ud);

/* "host H, pid P, listening on L, since T" (T in RFC 3339 UTC; unknown
 * fields say so).  Never fails; truncates to size. */
void gp_store_owner_format(const gp_store_owner *o, char *out, size_t size);
/* The record as the text kept in files ("host=..\npid=..\nlisten=..\n
 * since_ms=..\n") and back.  to_text: bytes written (< size) or -ENOSPC.
 * from_text reads what it can: unknown or malformed lines are skipped, so
 * a torn or empty file gives empty fields, never an error. */
int gp_store_owner_to_text(const gp_store_owner *o, char *out, size_t size);
void gp_store_owner_from_text(const char *text, size_t len, gp_store_owner *ret);

/* flock(fd, LOCK_EX | LOCK_NB) on a file that holds an owner record (the
 * data dir's lock, SQLite's "<database>-owner"), waiting up to
 * GP_STORE_DEAD_HOLDER_MS while the record names a process of this host
 * that no longer exists: a server killed with SIGKILL leaves its lock to
 * children it had forked that had not yet exec'd (they share its open
 * files until exec closes them), so a restart right after kill -9 would
 * otherwise find the lock taken by a dead pid.  0 with the lock;
 * -EWOULDBLOCK with *ret_other the live holder's record (read from fd);
 * another -errno.  Blocks the caller at most that long. */
#define GP_STORE_DEAD_HOLDER_MS 5000
int gp_store_flock_owner_file(int fd, gp_store_owner *ret_other);

/* Close; takes NULL. */
void gp_store_close(gp_store *s);
/* Message of the last failure on this handle ("" if none). */
const char *gp_store_errmsg(gp_store *s);

/* Transactions: begin, then puts, then commit (durable) or rollback.
 * 0 or -GP_ESTORE.  begin inside a transaction and commit outside one fail.
 * A commit that fails has rolled the transaction back: none of its changes
 * are stored and the handle is outside any transaction, ready for use.
 * Once any operation inside the transaction failed with -GP_ESTORE the
 * transaction is doomed: commit rolls it back and fails (so a batch is
 * never half-written, whatever the backend).  rollback outside a
 * transaction is a no-op returning 0. */
int gp_store_begin(gp_store *s);
int gp_store_commit(gp_store *s);
int gp_store_rollback(gp_store *s);

/* Does a commit on s need gp_store_sync to be durable (opened with
 * deferred_sync and sync_full, on SQLite)? */
bool gp_store_sync_deferred(const gp_store *s);
/* Make every commit that returned before this call durable: SQLite
 * fdatasyncs the WAL file.  Unlike every other call it may run on another
 * thread while the handle's owner goes on using it (it touches only a
 * descriptor of its own, and reports in err, never in gp_store_errmsg).
 * 0 (also when there is nothing to do), or -GP_ESTORE with the reason in
 * err: the writes since the last good sync may be lost (a failed fsync
 * may drop them from the page cache), so nothing committed since may be
 * acknowledged. */
int gp_store_sync(gp_store *s, char *err, size_t errlen);

/* Did a failure since the last gp_store_begin (or, outside a transaction,
 * since the last operation) come from the database's storage being full?
 * SQLite: SQLITE_FULL, or an I/O error with errno ENOSPC/EDQUOT (the disk
 * or quota of the database's directory); PostgreSQL: SQLSTATE 53100
 * (disk_full on the server).  The daemon uses it to tell "the disk is full,
 * try again later" from other store failures (docs/internals/store.md). */
bool gp_store_full(gp_store *s);

/* Insert or replace the whole record by id (spec and gpus included).
 * 0, -EINVAL (record that could not be read back: state out of range,
 * n_gpus outside 0..GP_MAX_GPUS, a string not NUL-terminated, spec over
 * 1 MiB; nothing written) or -GP_ESTORE.  Inside a transaction a backend
 * may report a put the database refused at a later call of the same
 * transaction, at the latest at commit (PostgreSQL pipelines puts); either
 * way the transaction is doomed and nothing of it is stored. */
int gp_store_task_put(gp_store *s, const gp_task *t);

/* One task by id into *ret (caller calls gp_task_done). 0, -ENOENT, -GP_ESTORE. */
int gp_store_task_get(gp_store *s, int64_t id, gp_task *ret);

typedef struct gp_task_filter {
        int state;           /* gp_task_state, or -1 for any */
        const char *tenant;  /* NULL for any */
        int64_t before_id;   /* only ids < before_id; 0 = no bound */
        int limit;           /* 1..1000 */
        int64_t array_id;    /* > 0: only this job array's elements (state and tenant then
                                ignored: the caller checks the rows); 0 = any */
} gp_task_filter;

/* Callback gets a record valid only during the call; return 0 to go on,
 * anything else to stop (that value is returned by the iterator).  It must
 * not call into the same handle: such calls fail with -EBUSY (collect what
 * you need, or use a second handle). */
typedef int (*gp_task_cb)(const gp_task *t, void *ud);

/* Tasks matching the filter, newest (highest id) first.  0, the callback's
 * stop value, -EINVAL (limit outside 1..1000, state out of range) or
 * -GP_ESTORE (also for a stored row that fails validation). */
int gp_store_task_list(gp_store *s, const gp_task_filter *f, gp_task_cb cb, void *ud);
/* All queued and running tasks, oldest (lowest id) first, for recovery. */
int gp_store_task_load_active(gp_store *s, gp_task_cb cb, void *ud);
/* Highest task id ever stored, 0 if none. */
int gp_store_task_max_id(gp_store *s, int64_t *ret);

/* SQLite: copy what the WAL holds into the database file and sync it
 * (PASSIVE: never waits for, nor blocks, the writer or readers), so that
 * commits on a handle opened with manual_checkpoint do not pay for it.
 * Sets *ret_wal_pages to the WAL's size in pages when not NULL.  A no-op
 * for PostgreSQL.  0 or -GP_ESTORE. */
int gp_store_checkpoint(gp_store *s, int *ret_wal_pages);

/* Small key/value metadata (scheduler state that must survive restart).
 * get: 0, -ENOENT, -E2BIG (value longer than size-1), -GP_ESTORE.
 * set: 0, -EINVAL (empty key, key over 128 bytes, value over 1 MiB, or the
 * reserved key "schema_version"), -GP_ESTORE. */
int gp_store_meta_get(gp_store *s, const char *key, char *buf, size_t size);
int gp_store_meta_set(gp_store *s, const char *key, const char *value);

/* ---- metering (docs/billing.md) ----
 *
 * Usage segments and token records, in tables of their own beside tasks.
 * The daemon writes them inside the same transaction that stores the
 * task's change, so a segment is stored exactly when the state change that
 * ends it is.  Rows are never updated nor deleted.
 *
 * add: 0, -EINVAL (a string not NUL-terminated, end before start, negative
 * counts, month not YYYYMM; nothing written) or -GP_ESTORE (pipelined like
 * task puts on PostgreSQL: a refusal may be reported by a later call of the
 * transaction).  list: the records matching the filter, segments by
 * (start_ms, task_id, insertion), tokens by (at_ms, insertion); the callback
 * contract of gp_store_task_list; 0, the callback's stop value, -EINVAL or
 * -GP_ESTORE (also for a stored row that fails validation). */
typedef struct gp_usage_filter {
        const char *tenant;          /* NULL for any */
        int64_t task_id;             /* segments only; 0 for any */
        int month_min, month_max;    /* billing month YYYYMM, 0 = unbounded */
        int64_t from_ms, to_ms;      /* segments with end >= from and start < to; tokens with
                                        from <= at < to; 0 = unbounded */
} gp_usage_filter;

typedef int (*gp_segment_cb)(const gp_bill_segment *seg, void *ud);
typedef int (*gp_tokens_cb)(const gp_bill_tokens *t, void *ud);

int gp_store_usage_add(gp_store *s, const gp_bill_segment *seg);
int gp_store_usage_list(gp_store *s, const gp_usage_filter *f, gp_segment_cb cb, void *ud);
int gp_store_tokens_add(gp_store *s, const gp_bill_tokens *t);
int gp_store_tokens_list(gp_store *s, const gp_usage_filter *f, gp_tokens_cb cb, void *ud);

/* For tests (fault injection, STYLE.md habit 11): make the n-th database
 * statement from now on this handle fail with -GP_ESTORE ("injected fault"),
 * as if the database had refused it; n = 1 is the next one, n <= 0 turns it
 * off.  It fires once.  Every begin, commit, rollback, put, get, list,
 * load_active, max_id, meta_get and meta_set runs exactly one statement
 * (a failed commit also runs a rollback); so do usage_add, usage_list,
 * tokens_add and tokens_list. */
void gp_store_fail_after(gp_store *s, int n);

#endif
