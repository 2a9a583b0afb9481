/* store-int.h - what a store backend implements, and the handle they share.
 *
 * Private to src/store/.  store.c parses the URL, allocates the gp_store,
 * picks a backend by scheme and dispatches every public call through
 * s->ops; the backend keeps its own state in s->impl.  store.c owns the
 * transaction bookkeeping (in_tx, doomed) and the argument checks common to
 * every backend, so a backend may assume:
 *   - begin is only called outside a transaction, commit/rollback inside;
 *   - put gets a record that passed store_task_check();
 *   - list gets a filter with limit in 1..GP_STORE_LIST_MAX;
 *   - meta keys/values are within GP_STORE_META_KEY_MAX / _VALUE_MAX.
 * A backend returns 0 or a negative code and, on failure, sets s->errmsg
 * through store_set_err() (message of the database plus what was being done).
 * Commit that fails must leave the database outside any transaction with the
 * transaction's changes undone.
 *
 * Fault injection: before executing each statement against the database a
 * backend calls store_fault(s); when it returns true the backend treats the
 * statement as failed (message "injected fault") and runs its real error
 * path.  See gp_store_fail_after().
 */
#ifndef GP_STORE_STORE_INT_H
#define GP_STORE_STORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define GP_STORE_LIST_MAX 1000          /* most records one list call returns */
#define GP_STORE_META_KEY_MAX 128       /* bytes of a meta key, without the NUL */
#define GP_STORE_META_VALUE_MAX (1 << 20) /* bytes of a meta value */
#define GP_STORE_SPEC_MAX (1 << 20)     /* bytes of a task spec */
#define GP_STORE_GPUS_JSON_MAX (256 * 1024)   /* bytes of the stored gpus JSON text */
#define GP_STORE_SCHEMA_VERSION 8       /* the schema this code writes */
#define GP_STORE_ERRMSG_MAX 512

/* Columns of the tasks table, in the order every backend selects and
 * inserts them (STORE_TASK_COLUMNS and enum store_col must agree). */
#define STORE_TASK_COLUMNS                                                                   \
        "id, tenant, name, model, gpu_model, priority, gpu_request, memory_mb, exclusive, " \
        "preemptible, is_lease, timeout_s, queue_timeout_s, lease_ttl_s, max_retries, "     \
        "retries, preempt_count, state, exit_code, reason, submitted_ms, started_ms, "      \
        "finished_ms, heartbeat_ms, sup_pid, sup_start, spec, gpus, elastic_max, borrowing, "        \
        "array_id, array_index, array_limit, node_selector, unix_user, gpu_mem_peak"

enum store_col {
        COL_ID, COL_TENANT, COL_NAME, COL_MODEL, COL_GPU_MODEL, COL_PRIORITY, COL_GPU_REQUEST,
        COL_MEMORY_MB, COL_EXCLUSIVE, COL_PREEMPTIBLE, COL_IS_LEASE, COL_TIMEOUT_S,
        COL_QUEUE_TIMEOUT_S, COL_LEASE_TTL_S, COL_MAX_RETRIES, COL_RETRIES, COL_PREEMPT_COUNT,
        COL_STATE, COL_EXIT_CODE, COL_REASON, COL_SUBMITTED_MS, COL_STARTED_MS, COL_FINISHED_MS,
        COL_HEARTBEAT_MS, COL_SUP_PID, COL_SUP_START, COL_SPEC, COL_GPUS, COL_ELASTIC_MAX,
        COL_BORROWING, COL_ARRAY_ID, COL_ARRAY_INDEX, COL_ARRAY_LIMIT, COL_NODE_SELECTOR, COL_UNIX_USER,
        COL_GPU_MEM_PEAK,
        COL_COUNT,
};

/* One result row as a backend exposes it to the shared decoder. */
typedef struct store_row {
        void *ctx; /* backend's cursor */
        /* Integer column: 0 with *ret_null set for SQL NULL, -EINVAL when the
         * value is not an integer. */
        int (*get_i64)(void *ctx, int col, bool *ret_null, int64_t *ret);
        /* Text column: 0 with *ret NULL for SQL NULL, -EINVAL when it is not
         * text.  The bytes stay valid until the next column is read. */
        int (*get_text)(void *ctx, int col, const char **ret, size_t *ret_len);
} store_row;

/* Decode and validate one tasks row into *ret (owned by the caller, who
 * calls gp_task_done).  Never overflows a fixed buffer: a string too long,
 * an unknown state name, a bad integer, gpus JSON that is invalid or has
 * more than GP_MAX_GPUS entries give -GP_ESTORE with the column named in
 * s->errmsg.  -ENOMEM possible.  *ret written only on success. */
int store_task_from_row(gp_store *s, const store_row *row, gp_task *ret);

/* Columns of the usage and tokens tables, in select/insert order. */
#define STORE_USAGE_COLUMNS                                                                   \
        "task_id, tenant, gpu_model, gpus_milli, memory_mb, start_ms, end_ms, gpu_ms, run_start_ms, " \
        "end_kind, month"
enum store_ucol {
        UCOL_TASK_ID, UCOL_TENANT, UCOL_GPU_MODEL, UCOL_GPUS_MILLI, UCOL_MEMORY_MB, UCOL_START_MS,
        UCOL_END_MS, UCOL_GPU_MS, UCOL_RUN_START_MS, UCOL_END_KIND, UCOL_MONTH,
        UCOL_COUNT,
};
#define STORE_TOKENS_COLUMNS "tenant, model, prompt_tokens, completion_tokens, at_ms, month"
enum store_tcol {
        TCOL_TENANT, TCOL_MODEL, TCOL_PROMPT, TCOL_COMPLETION, TCOL_AT_MS, TCOL_MONTH,
        TCOL_COUNT,
};

/* Decode one usage (kind 0) or tokens (kind 1) row and hand it to cb
 * (a gp_segment_cb or gp_tokens_cb).  A bad row gives -GP_ESTORE with the
 * column named; else the callback's value. */
int store_bill_row(gp_store *s, const store_row *row, int kind, void *cb, void *ud);

/* One result row of gp_store_ops.query: n columns as text (NULL for SQL
 * NULL), valid during the call.  0 goes on; anything else stops. */
typedef int (*store_text_cb)(void *ud, int n, const char *const *cols);
#define STORE_QUERY_MAX_COLS 16

typedef struct gp_store_ops {
        const char *name; /* "sqlite", "postgres" */
        size_t impl_size; /* bytes of the backend state store.c allocates (zeroed) as s->impl */
        /* target: the URL without "scheme://" for sqlite, the whole URL for
         * postgres.  s->impl is allocated and zeroed; on failure the message
         * is left in s->errmsg and store.c calls close. */
        int (*open)(gp_store *s, const char *url, const char *target, const gp_store_options *opt);
        /* frees what s->impl holds (may be half-built by a failed open);
         * store.c frees s->impl itself */
        void (*close)(gp_store *s);
        int (*begin)(gp_store *s);
        int (*commit)(gp_store *s);
        int (*rollback)(gp_store *s); /* a no-op returning 0 if the database already left the transaction */
        bool (*in_tx)(gp_store *s);   /* is the connection inside a transaction now */
        int (*task_put)(gp_store *s, const gp_task *t);
        int (*task_get)(gp_store *s, int64_t id, gp_task *ret);
        int (*task_list)(gp_store *s, const gp_task_filter *f, gp_task_cb cb, void *ud);
        int (*task_load_active)(gp_store *s, gp_task_cb cb, void *ud);
        int (*task_max_id)(gp_store *s, int64_t *ret);
        int (*meta_get)(gp_store *s, const char *key, char *buf, size_t size);
        int (*meta_set)(gp_store *s, const char *key, const char *value);
        int (*checkpoint)(gp_store *s, int *ret_wal_pages); /* NULL: nothing to do */
        /* gp_store_sync on a handle with deferred_sync set; any thread (NULL: never deferred) */
        int (*sync)(gp_store *s, char *err, size_t errlen);
        /* gp_store_claim, called outside a transaction with a checked *me:
         * 0, -EBUSY with *ret_other filled (fields it cannot learn left
         * empty), or -GP_ESTORE */
        int (*claim)(gp_store *s, const gp_store_owner *me, gp_store_owner *ret_other);
        /* gp_store_claim_member, the same way, with a checked id: 0, -EBUSY
         * (a single server), -EEXIST (a live server with id), -GP_ESTORE;
         * NULL: -ENOTSUP */
        int (*claim_member)(gp_store *s, const char *id, const gp_store_owner *me, gp_store_owner *ret_other);
        int (*usage_add)(gp_store *s, const gp_bill_segment *seg);
        int (*usage_list)(gp_store *s, const gp_usage_filter *f, gp_segment_cb cb, void *ud);
        int (*tokens_add)(gp_store *s, const gp_bill_tokens *t);
        int (*tokens_list)(gp_store *s, const gp_usage_filter *f, gp_tokens_cb cb, void *ud);
        /* Run one statement (coord.c) with n text parameters ($1..$n in the
         * SQL; SQLite reads them as ?1..?n; NULL = SQL NULL), each result row
         * (at most STORE_QUERY_MAX_COLS columns) to cb (NULL: rows are
         * ignored).  A fault-injection point.  0, cb's value or -GP_ESTORE. */
        int (*query)(gp_store *s, const char *sql, int n, const char *const *params, store_text_cb cb, void *ud,
                     const char *what);
        /* A write (no rows) inside a transaction, sent without waiting for
         * its answer, which the commit reads (a refusal fails the commit).
         * NULL: query is used.  0 or -GP_ESTORE. */
        int (*write)(gp_store *s, const char *sql, int n, const char *const *params, const char *what);
        /* the leader lease (gp_store_lease_*), outside a transaction with
         * checked arguments; NULL: -ENOTSUP.  The fence itself is
         * s->fence_id / fence_epoch, which the backend checks in commit and
         * in every write outside a transaction, failing with -GP_EFENCED. */
        int (*lease_acquire)(gp_store *s, const char *id, const char *url, int64_t lease_ms, int64_t *ret_epoch);
        int (*lease_renew)(gp_store *s, const char *id, int64_t epoch, int64_t lease_ms);
        int (*lease_get)(gp_store *s, gp_store_lease *ret);
        int (*lease_release)(gp_store *s, const char *id, int64_t epoch);
} gp_store_ops;

struct gp_store {
        const gp_store_ops *ops;            /* the backend */
        void *impl;                         /* backend state */
        bool in_tx;                         /* between a successful begin and commit/rollback */
        bool deferred_sync;                 /* commits wait for gp_store_sync (set by the backend's open) */
        bool doomed;                        /* an operation failed inside the open transaction */
        int fail_after;                     /* fault injection: >0 counts down statements, 0 off */
        bool in_cb;                         /* a list callback is running: refuse re-entry */
        bool full;                          /* a failure since the last begin was the database's
                                               storage being full (gp_store_full) */
        char errmsg[GP_STORE_ERRMSG_MAX];   /* last failure, "" if none */
        char fence_id[64];                  /* gp_store_set_fence: "" = not fenced */
        int64_t fence_epoch;
        void (*on_fenced)(void *ud);
        void *on_fenced_ud;
};

extern const gp_store_ops gp_store_sqlite_ops;
extern const gp_store_ops gp_store_postgres_ops;

/* Set s->errmsg to "<what>: <detail>" (printf-style what). Returns -GP_ESTORE
 * so callers can `return store_set_err(...)`. */
int store_set_err(gp_store *s, const char *detail, const char *what_fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* true if the statement about to run must fail (fault injection). */
static inline bool store_fault(gp_store *s) {
        if (s->fail_after <= 0)
                return false;
        return --s->fail_after == 0;
}

/* A backend's commit that failed (r < 0): if the connection is still
 * inside the transaction, roll it back, so the database is left outside
 * any transaction with the changes undone; the message says whether the
 * rollback worked.  Returns r. */
int store_commit_failed(gp_store *s, int r);

/* Copy a meta value the database returned (p, n bytes; p NULL for SQL NULL)
 * into the caller's buffer.  0, -E2BIG (does not fit) or -GP_ESTORE (NULL),
 * with the message naming what. */
int store_meta_copy(gp_store *s, const char *what, const char *p, size_t n, char *buf, size_t size);

/* ---- schema: one migration runner for every backend ----
 *
 * store.c holds the migrations (version, SQL text per dialect, optionally a
 * function) and runs them; a backend supplies only these primitives. */
enum store_dialect {
        STORE_SQLITE,
        STORE_POSTGRES,
        STORE_DIALECTS,
};

typedef struct store_schema_ops {
        enum store_dialect dialect; /* which SQL text of a migration this backend runs */
        /* Open the migration transaction and take what serialises two
         * processes migrating one database at once (SQLite: BEGIN IMMEDIATE,
         * the write lock; PostgreSQL: an advisory transaction lock).  On
         * failure no transaction is left open. */
        int (*begin)(gp_store *s);
        int (*commit)(gp_store *s);
        void (*rollback)(gp_store *s); /* best effort; leaves s->errmsg as it is */
        /* Run SQL text: one or more statements, no rows wanted. */
        int (*exec)(gp_store *s, const char *sql, const char *what);
        /* meta.schema_version as text into buf (NUL-terminated): 0, -ENOENT
         * (no such row), -E2BIG (longer than size - 1) or -GP_ESTORE. */
        int (*read_version)(gp_store *s, char *buf, size_t size);
} store_schema_ops;

/* Bring the schema to GP_STORE_SCHEMA_VERSION in one transaction: create
 * the meta table if missing, read schema_version (absent: 0), refuse a
 * version newer than this code's, apply every migration above it in order
 * recording each version, and create the metering tables if missing.
 * Called by a backend's open before it prepares statements.  0 or
 * -GP_ESTORE with the message; on failure nothing of it is stored. */
int store_migrate(gp_store *s, const store_schema_ops *ops);

/* The coordinator's tables (coord.c), the same SQL for every backend:
 * CREATE ... IF NOT EXISTS, run by store_migrate at every open. */
extern const char store_coord_schema_sql[];
extern const char store_idem_schema_sql[]; /* idem.c */
extern const char *const store_runs_schema_sql[STORE_DIALECTS]; /* runs.c, per dialect */

/* Check a record before writing it: state in range, n_gpus in
 * 0..GP_MAX_GPUS with gpus set when > 0, every fixed string NUL-terminated
 * inside its buffer, spec within GP_STORE_SPEC_MAX.  0 or -EINVAL with the
 * reason in s->errmsg. */
int store_task_check(gp_store *s, const gp_task *t);

/* The gpus of a task as compact JSON [{"node":..,"index":..,"uuid":..}]
 * (malloc'd, caller frees), or NULL in *ret when n_gpus == 0.
 * 0 or -ENOMEM. */
int store_gpus_to_json(const gp_task *t, char **ret);
/* Stored gpus JSON back into a malloc'd array (NULL and 0 for "[]"),
 * checked as a task's gpus are.  0, -GP_EPARSE (reason in why), -ENOMEM. */
int store_gpus_from_json(const char *text, size_t len, gp_task_gpu **ret, int *ret_n, char *why, size_t whylen);


/* A query of the extension tables (coord.c, idem.c, runs.c): an error
 * inside a transaction dooms it (its commit fails, nothing is half
 * stored).  And a write inside the batch's transaction, pipelined where
 * the backend can. */
int store_q(gp_store *s, const char *sql, int n, const char *const *params, store_text_cb cb, void *ud,
            const char *what);
int store_w(gp_store *s, const char *sql, int n, const char *const *params, const char *what);

#endif
