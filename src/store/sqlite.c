/* sqlite.c - the SQLite store backend ("sqlite://PATH").
 *
 * One sqlite3 connection per gp_store handle, opened in WAL mode so readers
 * on other handles run beside the one writer.  Every statement the backend
 * runs is prepared once at open (SQLITE_PREPARE_PERSISTENT) and kept on the
 * handle; each call binds, steps and resets it.  Transactions are BEGIN
 * IMMEDIATE so a writer takes the write lock up front (waiting up to
 * busy_timeout) instead of failing at its first write.
 *
 * Invariants:
 *   - after every call each cached statement is reset and its bindings are
 *     cleared (no pointer into a caller's record outlives the call);
 *   - a failed COMMIT leaves the connection outside any transaction with
 *     the changes undone (we run ROLLBACK if SQLite did not already);
 *   - rows are decoded only through store_task_from_row (store.c), which
 *     validates them.
 */
#include "store/store-int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"

enum {
        ST_BEGIN,
        ST_COMMIT,
        ST_ROLLBACK,
        ST_PUT,
        ST_GET,
        ST_LIST,        /* no filter */
        ST_LIST_S,      /* by state */
        ST_LIST_T,      /* by tenant */
        ST_LIST_ST,     /* by state and tenant */
        ST_LIST_A,      /* by job array */
        ST_ACTIVE,
        ST_MAX_ID,
        ST_META_GET,
        ST_META_SET,
        ST_USAGE_ADD,
        ST_USAGE_LIST,
        ST_TOKENS_ADD,
        ST_TOKENS_LIST,
        ST_COUNT,
};

#define SELECT_TASKS "SELECT " STORE_TASK_COLUMNS " FROM tasks "

static const char *const stmt_sql[ST_COUNT] = {
        [ST_BEGIN] = "BEGIN IMMEDIATE",
        [ST_COMMIT] = "COMMIT",
        [ST_ROLLBACK] = "ROLLBACK",
        [ST_PUT] = "INSERT OR REPLACE INTO tasks (" STORE_TASK_COLUMNS ") VALUES "
                   "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
                   "?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36)",
        [ST_GET] = SELECT_TASKS "WHERE id = ?1",
        /* ?1 before_id (INT64_MAX when unbounded), ?2 limit, ?3 state, ?4 tenant */
        [ST_LIST] = SELECT_TASKS "WHERE id < ?1 ORDER BY id DESC LIMIT ?2",
        [ST_LIST_S] = SELECT_TASKS "WHERE state = ?3 AND id < ?1 ORDER BY id DESC LIMIT ?2",
        [ST_LIST_T] = SELECT_TASKS "WHERE tenant = ?4 AND id < ?1 ORDER BY id DESC LIMIT ?2",
        [ST_LIST_ST] = SELECT_TASKS "WHERE tenant = ?4 AND state = ?3 AND id < ?1 "
                                    "ORDER BY id DESC LIMIT ?2",
        [ST_LIST_A] = SELECT_TASKS "WHERE array_id = ?3 AND id < ?1 ORDER BY id DESC LIMIT ?2",
        [ST_ACTIVE] = SELECT_TASKS "WHERE state IN ('queued', 'running') ORDER BY id ASC",
        [ST_MAX_ID] = "SELECT COALESCE(MAX(id), 0) FROM tasks",
        [ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
        [ST_META_SET] = "INSERT INTO meta (key, value) VALUES (?1, ?2) "
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [ST_USAGE_ADD] = "INSERT INTO usage (" STORE_USAGE_COLUMNS ") VALUES "
                         "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        /* ?1 tenant or NULL, ?2 task id or 0, ?3..?4 months, ?5..?6 times */
        [ST_USAGE_LIST] = "SELECT " STORE_USAGE_COLUMNS " FROM usage WHERE (?1 IS NULL OR tenant = ?1) "
                          "AND (?2 = 0 OR task_id = ?2) AND month >= ?3 AND month <= ?4 AND end_ms >= ?5 "
                          "AND start_ms < ?6 ORDER BY start_ms, task_id, id",
        [ST_TOKENS_ADD] = "INSERT INTO usage_tokens (" STORE_TOKENS_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        [ST_TOKENS_LIST] = "SELECT " STORE_TOKENS_COLUMNS " FROM usage_tokens WHERE (?1 IS NULL OR tenant = ?1) "
                           "AND month >= ?3 AND month <= ?4 AND at_ms >= ?5 AND at_ms < ?6 "
                           "ORDER BY at_ms, id",
};

typedef struct sqlite_store {
        sqlite3 *db;                    /* the connection */
        sqlite3_stmt *st[ST_COUNT];     /* prepared at open, reset after each use */
        int owner_fd;                   /* flock'd "<database>-owner" after gp_store_claim, else -1 */
        int wal_fd;                     /* deferred_sync: the WAL file, for gp_store_sync; else -1 */
        char wal_path[PATH_MAX];        /* its name, for messages */
} sqlite_store;

static sqlite_store *impl(gp_store *s) {
        return s->impl;
}

/* Message for a failed SQLite call: the database's own text. */
static int db_err(gp_store *s, const char *what) {
        sqlite3 *db = impl(s)->db;
        int code = sqlite3_extended_errcode(db), sys = sqlite3_system_errno(db);
        /* the unix VFS answers SQLITE_FULL for a write that hit ENOSPC; growing
         * the -shm file or a size hint reports an I/O error with the errno */
        if ((code & 0xff) == SQLITE_FULL || ((code & 0xff) == SQLITE_IOERR && (sys == ENOSPC || sys == EDQUOT)))
                s->full = true;
        return store_set_err(s, sqlite3_errmsg(db), "%s", what);
}

static void done_stmt(sqlite3_stmt *st) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
}

/* Step a statement once (fault injection point).  SQLITE_ROW, SQLITE_DONE
 * or -GP_ESTORE with the message set. */
static int step_first(gp_store *s, sqlite3_stmt *st, const char *what) {
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW || rc == SQLITE_DONE)
                return rc;
        return db_err(s, what);
}

/* Run a statement that returns no rows. */
static int run(gp_store *s, int which, const char *what) {
        sqlite3_stmt *st = impl(s)->st[which];
        int rc = step_first(s, st, what);
        done_stmt(st);
        return rc < 0 ? rc : 0;
}

/* ---- open / close / schema ---- */

/* mkdir -p for the directory part of path (mode 0700 for what we create). */
static int make_parent_dirs(gp_store *s, const char *path) {
        char dir[PATH_MAX];
        if (gp_strlcpy(dir, path, sizeof(dir)) >= sizeof(dir))
                return store_set_err(s, "path too long", "open sqlite database");
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
                return 0;
        *slash = '\0';
        for (char *p = dir + 1; ; p++) {
                if (*p != '/' && *p != '\0')
                        continue;
                char c = *p;
                *p = '\0';
                if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                        int e = errno;
                        return store_set_err(s, strerror(e), "create directory %s", dir);
                }
                *p = c;
                if (c == '\0')
                        break;
        }
        return 0;
}

static int exec_sql(gp_store *s, const char *sql, const char *what) {
        char *msg = NULL;
        if (sqlite3_exec(impl(s)->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
                store_set_err(s, msg ? msg : sqlite3_errmsg(impl(s)->db), "%s", what);
                sqlite3_free(msg);
                return -GP_ESTORE;
        }
        return 0;
}

/* ---- schema primitives for store_migrate (store.c) ---- */

static int mig_begin(gp_store *s) {
        return exec_sql(s, "BEGIN IMMEDIATE", "migrate: begin");
}

static int mig_commit(gp_store *s) {
        return exec_sql(s, "COMMIT", "migrate: commit");
}

static void mig_rollback(gp_store *s) {
        sqlite3_exec(impl(s)->db, "ROLLBACK", NULL, NULL, NULL);
}

static int mig_read_version(gp_store *s, char *buf, size_t size) {
        sqlite3_stmt *st = NULL;
        int r = 0;
        if (sqlite3_prepare_v2(impl(s)->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st, NULL) !=
            SQLITE_OK)
                return db_err(s, "read schema_version");
        int rc = sqlite3_step(st);
        if (rc == SQLITE_DONE) {
                r = -ENOENT;
        } else if (rc == SQLITE_ROW) {
                const char *v = (const char *)sqlite3_column_text(st, 0);
                if (gp_strlcpy(buf, v ? v : "", size) >= size)
                        r = -E2BIG;
        } else {
                r = db_err(s, "read schema_version");
        }
        sqlite3_finalize(st);
        return r;
}

static const store_schema_ops sq_schema = {
        .dialect = STORE_SQLITE,
        .begin = mig_begin,
        .commit = mig_commit,
        .rollback = mig_rollback,
        .exec = exec_sql,
        .read_version = mig_read_version,
};

/* deferred_sync (store.h): commits run with synchronous=NORMAL, so they
 * append to the WAL without an fsync; gp_store_sync fdatasyncs the WAL
 * through a descriptor of our own, which makes every commit before it as
 * durable as synchronous=FULL would (the WAL's header and frames are in
 * that one file; SQLite keeps it for as long as a connection is open, and
 * reuses it from its start after a checkpoint, whose own syncs are FULL on
 * the checkpointing handle).  Its directory entry is synced once here.
 * Where the WAL cannot be opened, commits fall back to synchronous=FULL. */
static int wal_sync_open(gp_store *s) {
        sqlite_store *q = impl(s);
        const char *wal = sqlite3_filename_wal(sqlite3_db_filename(q->db, "main"));
        if (wal && gp_strlcpy(q->wal_path, wal, sizeof(q->wal_path)) < sizeof(q->wal_path))
                q->wal_fd = open(q->wal_path, O_RDONLY | O_CLOEXEC);
        if (q->wal_fd < 0)
                return exec_sql(s, "PRAGMA synchronous = FULL", "set synchronous");
        char dir[PATH_MAX];
        gp_strlcpy(dir, q->wal_path, sizeof(dir));
        char *slash = strrchr(dir, '/');
        if (slash)
                *(slash == dir ? slash + 1 : slash) = '\0';
        int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) < 0) {
                int e = errno;
                if (dfd >= 0)
                        close(dfd);
                return store_set_err(s, strerror(e), "sync the directory of %s", q->wal_path);
        }
        close(dfd);
        s->deferred_sync = true;
        return 0;
}

static int sq_sync(gp_store *s, char *err, size_t errlen) {
        sqlite_store *q = impl(s);
        if (q->wal_fd < 0 || fdatasync(q->wal_fd) == 0)
                return 0;
        snprintf(err, errlen, "fsync %s: %s", q->wal_path, strerror(errno));
        return -GP_ESTORE;
}

static int sq_open(gp_store *s, const char *url, const char *path, const gp_store_options *opt) {
        sqlite_store *q = impl(s);
        char what[PATH_MAX + 64];
        int r;
        q->owner_fd = q->wal_fd = -1;
        if ((r = make_parent_dirs(s, path)) < 0)
                return r;
        snprintf(what, sizeof(what), "open sqlite database %s", path);
        int rc = sqlite3_open_v2(path, &q->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 NULL);
        if (rc != SQLITE_OK)
                return store_set_err(s, q->db ? sqlite3_errmsg(q->db) : sqlite3_errstr(rc), "%s", what);
        sqlite3_extended_result_codes(q->db, 1);
        sqlite3_busy_timeout(q->db, opt->busy_timeout_ms);

        /* journal_mode answers with the mode in effect: it must be wal */
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(q->db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK)
                return db_err(s, "set journal_mode WAL");
        rc = sqlite3_step(st);
        const char *mode = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
        bool wal = mode && strcmp(mode, "wal") == 0;
        sqlite3_finalize(st);
        if (rc != SQLITE_ROW)
                return db_err(s, "set journal_mode WAL");
        if (!wal)
                return store_set_err(s, "database refuses WAL mode", "%s", what);
        /* deferred_sync: NORMAL, the fsync of the WAL is gp_store_sync's (wal_sync_open) */
        if ((r = exec_sql(s, opt->sync_full && !opt->deferred_sync ? "PRAGMA synchronous = FULL"
                                                                   : "PRAGMA synchronous = NORMAL",
                          "set synchronous")) < 0 ||
            (r = exec_sql(s, "PRAGMA foreign_keys = OFF", "set foreign_keys")) < 0)
                return r;
        /* with manual_checkpoint a commit only appends to the WAL (and
         * fsyncs it with sync_full); copying into the database happens in
         * gp_store_checkpoint on another handle */
        if (opt->manual_checkpoint && (r = exec_sql(s, "PRAGMA wal_autocheckpoint = 0", "set wal_autocheckpoint")) < 0)
                return r;
        if ((r = store_migrate(s, &sq_schema)) < 0)
                return r;
        for (int i = 0; i < ST_COUNT; i++) {
                if (sqlite3_prepare_v3(q->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &q->st[i], NULL) !=
                    SQLITE_OK)
                        return db_err(s, "prepare statements");
        }
        if (opt->sync_full && opt->deferred_sync)
                return wal_sync_open(s);
        return 0;
}

static void sq_close(gp_store *s) {
        sqlite_store *q = impl(s);
        for (int i = 0; i < ST_COUNT; i++)
                sqlite3_finalize(q->st[i]);
        sqlite3_close(q->db); /* all statements finalized: cannot be busy */
        if (q->owner_fd >= 0)
                close(q->owner_fd); /* ends the claim */
        if (q->wal_fd >= 0)
                close(q->wal_fd);
}

/* ---- one server per store ---- */

#define OWNER_TEXT_MAX 4096 /* bytes of the owner file we read */

/* The owner file is a file of its own beside the database, never the
 * database: closing any descriptor of the database file would drop the
 * POSIX locks SQLite holds on it in this process. */
static int sq_claim(gp_store *s, const gp_store_owner *me, gp_store_owner *ret_other) {
        sqlite_store *q = impl(s);
        const char *db = sqlite3_db_filename(q->db, "main");
        char path[PATH_MAX], text[OWNER_TEXT_MAX];
        if (!db || !*db)
                return 0; /* an in-memory database: nobody else can open it */
        if (snprintf(path, sizeof(path), "%s-owner", db) >= (int)sizeof(path))
                return store_set_err(s, "path too long", "claim the store");
        int fd = q->owner_fd;
        if (fd < 0) {
                fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
                if (fd < 0)
                        return store_set_err(s, strerror(errno), "claim the store: open %s", path);
                int e = -gp_store_flock_owner_file(fd, ret_other);
                if (e) {
                        close(fd);
                        if (e == EWOULDBLOCK)
                                return -EBUSY;
                        return store_set_err(s, strerror(e), "claim the store: lock %s", path);
                }
                q->owner_fd = fd;
        }
        int n = gp_store_owner_to_text(me, text, sizeof(text));
        if (n < 0)
                return store_set_err(s, "owner record too long", "claim the store");
        if (ftruncate(fd, 0) < 0 || pwrite(fd, text, (size_t)n, 0) != n)
                return store_set_err(s, strerror(errno), "claim the store: write %s", path);
        return 0;
}

/* ---- transactions ---- */

static bool sq_in_tx(gp_store *s) {
        return impl(s)->db && !sqlite3_get_autocommit(impl(s)->db);
}

static int sq_begin(gp_store *s) {
        return run(s, ST_BEGIN, "begin");
}

static int sq_rollback(gp_store *s) {
        if (!sq_in_tx(s))
                return 0; /* SQLite already rolled back (after an I/O error, say) */
        return run(s, ST_ROLLBACK, "rollback");
}

static int sq_commit(gp_store *s) {
        int r = run(s, ST_COMMIT, "commit");
        return r < 0 ? store_commit_failed(s, r) : 0;
}

/* ---- tasks ---- */

static int sq_task_put(gp_store *s, const gp_task *t) {
        sqlite3_stmt *st = impl(s)->st[ST_PUT];
        char *gpus = NULL;
        char what[64];
        snprintf(what, sizeof(what), "task put (id %" PRId64 ")", t->id);
        if (store_gpus_to_json(t, &gpus) < 0)
                return store_set_err(s, "out of memory", "%s", what);

        const char *state = gp_task_state_name(t->state);
        int rc = sqlite3_bind_int64(st, 1 + COL_ID, t->id);
        rc |= sqlite3_bind_text(st, 1 + COL_TENANT, t->tenant, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 1 + COL_NAME, t->name, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 1 + COL_MODEL, t->model, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 1 + COL_GPU_MODEL, t->gpu_model, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int(st, 1 + COL_PRIORITY, t->priority);
        rc |= sqlite3_bind_int(st, 1 + COL_GPU_REQUEST, t->gpu_request);
        rc |= sqlite3_bind_int64(st, 1 + COL_MEMORY_MB, t->memory_mb);
        rc |= sqlite3_bind_int(st, 1 + COL_EXCLUSIVE, t->exclusive);
        rc |= sqlite3_bind_int(st, 1 + COL_PREEMPTIBLE, t->preemptible);
        rc |= sqlite3_bind_int(st, 1 + COL_IS_LEASE, t->is_lease);
        rc |= sqlite3_bind_int64(st, 1 + COL_TIMEOUT_S, t->timeout_s);
        rc |= sqlite3_bind_int64(st, 1 + COL_QUEUE_TIMEOUT_S, t->queue_timeout_s);
        rc |= sqlite3_bind_int64(st, 1 + COL_LEASE_TTL_S, t->lease_ttl_s);
        rc |= sqlite3_bind_int(st, 1 + COL_MAX_RETRIES, t->max_retries);
        rc |= sqlite3_bind_int(st, 1 + COL_RETRIES, t->retries);
        rc |= sqlite3_bind_int(st, 1 + COL_PREEMPT_COUNT, t->preempt_count);
        rc |= sqlite3_bind_text(st, 1 + COL_STATE, state, -1, SQLITE_STATIC);
        if (t->has_exit_code)
                rc |= sqlite3_bind_int(st, 1 + COL_EXIT_CODE, t->exit_code);
        else
                rc |= sqlite3_bind_null(st, 1 + COL_EXIT_CODE);
        rc |= sqlite3_bind_text(st, 1 + COL_REASON, t->reason, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 1 + COL_SUBMITTED_MS, t->submitted_ms);
        rc |= sqlite3_bind_int64(st, 1 + COL_STARTED_MS, t->started_ms);
        rc |= sqlite3_bind_int64(st, 1 + COL_FINISHED_MS, t->finished_ms);
        rc |= sqlite3_bind_int64(st, 1 + COL_HEARTBEAT_MS, t->heartbeat_ms);
        rc |= sqlite3_bind_int64(st, 1 + COL_SUP_PID, t->sup_pid);
        rc |= sqlite3_bind_int64(st, 1 + COL_SUP_START, t->sup_start);
        rc |= sqlite3_bind_int(st, 1 + COL_ELASTIC_MAX, t->elastic_max_gpus);
        rc |= sqlite3_bind_int(st, 1 + COL_BORROWING, t->borrowing);
        rc |= sqlite3_bind_int64(st, 1 + COL_ARRAY_ID, t->array_id);
        rc |= sqlite3_bind_int(st, 1 + COL_ARRAY_INDEX, t->array_index);
        rc |= sqlite3_bind_int(st, 1 + COL_ARRAY_LIMIT, t->array_limit);
        rc |= sqlite3_bind_text(st, 1 + COL_NODE_SELECTOR, t->node_selector, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 1 + COL_UNIX_USER, t->user, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 1 + COL_GPU_MEM_PEAK, t->gpu_mem_seen ? t->gpu_mem_peak_mb : -1);
        if (t->spec)
                rc |= sqlite3_bind_text(st, 1 + COL_SPEC, t->spec, -1, SQLITE_STATIC);
        else
                rc |= sqlite3_bind_null(st, 1 + COL_SPEC);
        if (gpus)
                rc |= sqlite3_bind_text(st, 1 + COL_GPUS, gpus, -1, SQLITE_STATIC);
        else
                rc |= sqlite3_bind_null(st, 1 + COL_GPUS);

        int r = rc != SQLITE_OK ? db_err(s, what) : step_first(s, st, what);
        done_stmt(st); /* before freeing gpus: nothing may point at it */
        free(gpus);
        return r < 0 ? r : 0;
}

/* store_row over the current row of a stepped statement. */
static int col_i64(void *ctx, int col, bool *ret_null, int64_t *ret) {
        sqlite3_stmt *st = ctx;
        switch (sqlite3_column_type(st, col)) {
        case SQLITE_NULL:
                *ret_null = true;
                return 0;
        case SQLITE_INTEGER:
                *ret_null = false;
                *ret = sqlite3_column_int64(st, col);
                return 0;
        default:
                return -EINVAL;
        }
}

static int col_text(void *ctx, int col, const char **ret, size_t *ret_len) {
        sqlite3_stmt *st = ctx;
        switch (sqlite3_column_type(st, col)) {
        case SQLITE_NULL:
                *ret = NULL;
                *ret_len = 0;
                return 0;
        case SQLITE_TEXT:
                *ret = (const char *)sqlite3_column_text(st, col);
                *ret_len = (size_t)sqlite3_column_bytes(st, col);
                return *ret ? 0 : -ENOMEM;
        default:
                return -EINVAL;
        }
}

/* Step through the rows of a bound statement, decoding each and handing it
 * to cb.  Resets the statement. */
static int each_row(gp_store *s, sqlite3_stmt *st, const char *what, gp_task_cb cb, void *ud) {
        store_row row = {.ctx = st, .get_i64 = col_i64, .get_text = col_text};
        int rc = step_first(s, st, what);
        int r = 0;
        while (rc == SQLITE_ROW) {
                gp_task t;
                if ((r = store_task_from_row(s, &row, &t)) < 0)
                        break;
                r = cb(&t, ud);
                gp_task_done(&t);
                if (r != 0)
                        break;
                rc = sqlite3_step(st);
                if (rc != SQLITE_ROW && rc != SQLITE_DONE)
                        r = db_err(s, what);
        }
        if (rc < 0)
                r = rc;
        done_stmt(st);
        return r;
}

static int sq_task_get(gp_store *s, int64_t id, gp_task *ret) {
        sqlite3_stmt *st = impl(s)->st[ST_GET];
        store_row row = {.ctx = st, .get_i64 = col_i64, .get_text = col_text};
        char what[64];
        snprintf(what, sizeof(what), "task get (id %" PRId64 ")", id);
        if (sqlite3_bind_int64(st, 1, id) != SQLITE_OK) {
                done_stmt(st);
                return db_err(s, what);
        }
        int rc = step_first(s, st, what);
        int r = rc < 0 ? rc : rc == SQLITE_DONE ? -ENOENT : store_task_from_row(s, &row, ret);
        if (r == -ENOENT)
                store_set_err(s, "no such task", "%s", what);
        done_stmt(st);
        return r;
}

static int sq_task_list(gp_store *s, const gp_task_filter *f, gp_task_cb cb, void *ud) {
        int which = f->array_id > 0 ? ST_LIST_A
                    : f->state >= 0 ? (f->tenant ? ST_LIST_ST : ST_LIST_S)
                                    : (f->tenant ? ST_LIST_T : ST_LIST);
        sqlite3_stmt *st = impl(s)->st[which];
        int rc = sqlite3_bind_int64(st, 1, f->before_id > 0 ? f->before_id : INT64_MAX);
        rc |= sqlite3_bind_int(st, 2, f->limit);
        if (f->array_id > 0)
                rc |= sqlite3_bind_int64(st, 3, f->array_id);
        else if (f->state >= 0)
                rc |= sqlite3_bind_text(st, 3, gp_task_state_name(f->state), -1, SQLITE_STATIC);
        if (f->tenant && f->array_id <= 0)
                rc |= sqlite3_bind_text(st, 4, f->tenant, -1, SQLITE_STATIC);
        if (rc != SQLITE_OK) {
                done_stmt(st);
                return db_err(s, "task list");
        }
        return each_row(s, st, "task list", cb, ud);
}

static int sq_task_load_active(gp_store *s, gp_task_cb cb, void *ud) {
        return each_row(s, impl(s)->st[ST_ACTIVE], "task load_active", cb, ud);
}

static int sq_task_max_id(gp_store *s, int64_t *ret) {
        sqlite3_stmt *st = impl(s)->st[ST_MAX_ID];
        int rc = step_first(s, st, "task max_id");
        int r = rc < 0 ? rc : 0;
        if (rc == SQLITE_ROW)
                *ret = sqlite3_column_int64(st, 0);
        else if (rc == SQLITE_DONE)
                r = store_set_err(s, "no row", "task max_id");
        done_stmt(st);
        return r;
}

/* ---- meta ---- */

static int sq_meta_get(gp_store *s, const char *key, char *buf, size_t size) {
        sqlite3_stmt *st = impl(s)->st[ST_META_GET];
        char what[GP_STORE_META_KEY_MAX + 32];
        snprintf(what, sizeof(what), "meta get %s", key);
        if (sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC) != SQLITE_OK) {
                done_stmt(st);
                return db_err(s, what);
        }
        int rc = step_first(s, st, what);
        int r = rc < 0 ? rc : 0;
        if (rc == SQLITE_DONE) {
                r = -ENOENT;
                store_set_err(s, "no such key", "%s", what);
        } else if (rc == SQLITE_ROW) {
                const char *p = (const char *)sqlite3_column_text(st, 0);
                r = store_meta_copy(s, what, p, (size_t)sqlite3_column_bytes(st, 0), buf, size);
        }
        done_stmt(st);
        return r;
}

static int sq_meta_set(gp_store *s, const char *key, const char *value) {
        sqlite3_stmt *st = impl(s)->st[ST_META_SET];
        char what[GP_STORE_META_KEY_MAX + 32];
        snprintf(what, sizeof(what), "meta set %s", key);
        int rc = sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
        if (rc != SQLITE_OK) {
                done_stmt(st);
                return db_err(s, what);
        }
        return run(s, ST_META_SET, what);
}

static int sq_checkpoint(gp_store *s, int *ret_wal_pages) {
        int log = 0, done = 0;
        int rc = sqlite3_wal_checkpoint_v2(impl(s)->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY)
                return db_err(s, "checkpoint");
        if (ret_wal_pages)
                *ret_wal_pages = log;
        return 0;
}

/* ---- metering ---- */

static int sq_usage_add(gp_store *s, const gp_bill_segment *g) {
        sqlite3_stmt *st = impl(s)->st[ST_USAGE_ADD];
        int rc = sqlite3_bind_int64(st, 1 + UCOL_TASK_ID, g->task_id);
        rc |= sqlite3_bind_text(st, 1 + UCOL_TENANT, g->tenant, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 1 + UCOL_GPU_MODEL, g->gpu_model, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 1 + UCOL_GPUS_MILLI, g->gpus_milli);
        rc |= sqlite3_bind_int64(st, 1 + UCOL_MEMORY_MB, g->memory_mb);
        rc |= sqlite3_bind_int64(st, 1 + UCOL_START_MS, g->start_ms);
        rc |= sqlite3_bind_int64(st, 1 + UCOL_END_MS, g->end_ms);
        rc |= sqlite3_bind_int64(st, 1 + UCOL_GPU_MS, g->gpu_ms);
        rc |= sqlite3_bind_int64(st, 1 + UCOL_RUN_START_MS, g->run_start_ms);
        rc |= sqlite3_bind_int(st, 1 + UCOL_END_KIND, g->end_kind);
        rc |= sqlite3_bind_int(st, 1 + UCOL_MONTH, g->month);
        if (rc != SQLITE_OK) {
                done_stmt(st);
                return db_err(s, "usage add");
        }
        return run(s, ST_USAGE_ADD, "usage add");
}

static int sq_tokens_add(gp_store *s, const gp_bill_tokens *t) {
        sqlite3_stmt *st = impl(s)->st[ST_TOKENS_ADD];
        int rc = sqlite3_bind_text(st, 1 + TCOL_TENANT, t->tenant, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 1 + TCOL_MODEL, t->model, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 1 + TCOL_PROMPT, t->prompt_tokens);
        rc |= sqlite3_bind_int64(st, 1 + TCOL_COMPLETION, t->completion_tokens);
        rc |= sqlite3_bind_int64(st, 1 + TCOL_AT_MS, t->at_ms);
        rc |= sqlite3_bind_int(st, 1 + TCOL_MONTH, t->month);
        if (rc != SQLITE_OK) {
                done_stmt(st);
                return db_err(s, "tokens add");
        }
        return run(s, ST_TOKENS_ADD, "tokens add");
}

static int bill_list(gp_store *s, int which, int kind, const gp_usage_filter *f, void *cb, void *ud,
                     const char *what) {
        sqlite3_stmt *st = impl(s)->st[which];
        int rc = f->tenant ? sqlite3_bind_text(st, 1, f->tenant, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 1);
        if (kind == 0)
                rc |= sqlite3_bind_int64(st, 2, f->task_id);
        rc |= sqlite3_bind_int(st, 3, f->month_min);
        rc |= sqlite3_bind_int(st, 4, f->month_max ? f->month_max : 999912);
        rc |= sqlite3_bind_int64(st, 5, f->from_ms);
        rc |= sqlite3_bind_int64(st, 6, f->to_ms ? f->to_ms : INT64_MAX);
        if (rc != SQLITE_OK) {
                done_stmt(st);
                return db_err(s, what);
        }
        store_row row = {.ctx = st, .get_i64 = col_i64, .get_text = col_text};
        int r = 0;
        rc = step_first(s, st, what);
        while (rc == SQLITE_ROW) {
                if ((r = store_bill_row(s, &row, kind, cb, ud)) != 0)
                        break;
                rc = sqlite3_step(st);
                if (rc != SQLITE_ROW && rc != SQLITE_DONE)
                        r = db_err(s, what);
        }
        if (rc < 0)
                r = rc;
        done_stmt(st);
        return r;
}

static int sq_usage_list(gp_store *s, const gp_usage_filter *f, gp_segment_cb cb, void *ud) {
        return bill_list(s, ST_USAGE_LIST, 0, f, (void *)cb, ud, "usage list");
}

static int sq_tokens_list(gp_store *s, const gp_usage_filter *f, gp_tokens_cb cb, void *ud) {
        return bill_list(s, ST_TOKENS_LIST, 1, f, (void *)cb, ud, "tokens list");
}

/* ---- the coordinator's statements (coord.c) ---- */

/* Prepared per call (they are few and small); "$N" becomes "?N". */
static int sq_query(gp_store *s, const char *sql, int n, const char *const *params, store_text_cb cb, void *ud,
                    const char *what) {
        size_t len = strlen(sql);
        char *text = malloc(len + 1);
        if (!text)
                return store_set_err(s, "out of memory", "%s", what);
        for (size_t i = 0; i <= len; i++)
                text[i] = sql[i] == '$' && sql[i + 1] >= '0' && sql[i + 1] <= '9' ? '?' : sql[i];
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(impl(s)->db, text, -1, &st, NULL);
        free(text);
        if (rc != SQLITE_OK)
                return db_err(s, what);
        for (int i = 0; i < n && rc == SQLITE_OK; i++)
                rc = params[i] ? sqlite3_bind_text(st, i + 1, params[i], -1, SQLITE_STATIC) : sqlite3_bind_null(st, i + 1);
        int r = 0;
        if (rc != SQLITE_OK) {
                r = db_err(s, what);
                sqlite3_finalize(st);
                return r;
        }
        rc = step_first(s, st, what);
        while (rc == SQLITE_ROW) {
                const char *cols[STORE_QUERY_MAX_COLS];
                int nc = sqlite3_column_count(st);
                if (nc > STORE_QUERY_MAX_COLS)
                        nc = STORE_QUERY_MAX_COLS;
                for (int i = 0; i < nc; i++)
                        cols[i] = (const char *)sqlite3_column_text(st, i);
                if (cb && (r = cb(ud, nc, cols)) != 0)
                        break;
                rc = sqlite3_step(st);
                if (rc != SQLITE_ROW && rc != SQLITE_DONE)
                        r = db_err(s, what);
        }
        if (rc < 0)
                r = rc;
        sqlite3_finalize(st);
        return r;
}

const gp_store_ops gp_store_sqlite_ops = {
        .name = "sqlite",
        .impl_size = sizeof(sqlite_store),
        .open = sq_open,
        .close = sq_close,
        .begin = sq_begin,
        .commit = sq_commit,
        .rollback = sq_rollback,
        .in_tx = sq_in_tx,
        .task_put = sq_task_put,
        .task_get = sq_task_get,
        .task_list = sq_task_list,
        .task_load_active = sq_task_load_active,
        .task_max_id = sq_task_max_id,
        .meta_get = sq_meta_get,
        .meta_set = sq_meta_set,
        .checkpoint = sq_checkpoint,
        .sync = sq_sync,
        .claim = sq_claim,
        .usage_add = sq_usage_add,
        .usage_list = sq_usage_list,
        .tokens_add = sq_tokens_add,
        .tokens_list = sq_tokens_list,
        .query = sq_query,
};
