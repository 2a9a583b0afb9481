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
#define GP_STORE_GPUS_JSON_MAX 16384    /* bytes of the stored gpus JSON text */
#define GP_STORE_SCHEMA_VERSION 4       /* the schema this code writes */
#define GP_STORE_ERRMSG_MAX 512

/* Columns of the tasks table, in the order every backend selects and
 * inserts them (STORE_TASK_COLUMNS and enum store_col must agree). */
#define STORE_TASK_COLUMNS                                                                   \
        "id, tenant, name, model, gpu_model, priority, gpu_request, memory_mb, exclusive, " \
        "preemptible, is_lease, timeout_s, queue_timeout_s, lease_ttl_s, max_retries, "     \
        "retries, preempt_count, state, exit_code, reason, submitted_ms, started_ms, "      \
        "finished_ms, heartbeat_ms, sup_pid, sup_start, spec, gpus, elastic_max, borrowing, "        \
        "array_id, array_index, array_limit"

enum store_col {
        COL_ID, COL_TENANT, COL_NAME, COL_MODEL, COL_GPU_MODEL, COL_PRIORITY, COL_GPU_REQUEST,
        COL_MEMORY_MB, COL_EXCLUSIVE, COL_PREEMPTIBLE, COL_IS_LEASE, COL_TIMEOUT_S,
        COL_QUEUE_TIMEOUT_S, COL_LEASE_TTL_S, COL_MAX_RETRIES, COL_RETRIES, COL_PREEMPT_COUNT,
        COL_STATE, COL_EXIT_CODE, COL_REASON, COL_SUBMITTED_MS, COL_STARTED_MS, COL_FINISHED_MS,
        COL_HEARTBEAT_MS, COL_SUP_PID, COL_SUP_START, COL_SPEC, COL_GPUS, COL_ELASTIC_MAX,
        COL_BORROWING, COL_ARRAY_ID, COL_ARRAY_INDEX, COL_ARRAY_LIMIT,
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
 * more than GP_MAX_GANG entries give -GP_ESTORE with the column named in
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

/* The metering tables, created if missing at every open (no schema
 * version of their own: CREATE ... IF NOT EXISTS is the migration). */
#define STORE_BILLING_SCHEMA(INTEGER, SERIAL)                                                   \
        "CREATE TABLE IF NOT EXISTS usage (id " SERIAL ", task_id " INTEGER " NOT NULL,"           \
        " tenant TEXT NOT NULL, gpu_model TEXT NOT NULL, gpus_milli " INTEGER " NOT NULL,"         \
        " memory_mb " INTEGER " NOT NULL, start_ms " INTEGER " NOT NULL, end_ms " INTEGER " NOT NULL," \
        " gpu_ms " INTEGER " NOT NULL, run_start_ms " INTEGER " NOT NULL,"                          \
        " end_kind " INTEGER " NOT NULL, month " INTEGER " NOT NULL);"                              \
        "CREATE INDEX IF NOT EXISTS usage_tenant_month ON usage (tenant, month);"                 \
        "CREATE INDEX IF NOT EXISTS usage_task ON usage (task_id);"                                \
        "CREATE TABLE IF NOT EXISTS usage_tokens (id " SERIAL ", tenant TEXT NOT NULL,"            \
        " model TEXT NOT NULL, prompt_tokens " INTEGER " NOT NULL,"                                \
        " completion_tokens " INTEGER " NOT NULL, at_ms " INTEGER " NOT NULL,"                     \
        " month " INTEGER " NOT NULL);"                                                             \
        "CREATE INDEX IF NOT EXISTS usage_tokens_tenant_month ON usage_tokens (tenant, month);"

/* Decode one usage (kind 0) or tokens (kind 1) row and hand it to cb
 * (a gp_segment_cb or gp_tokens_cb).  A bad row gives -GP_ESTORE with the
 * column named; else the callback's value. */
int store_bill_row(gp_store *s, const store_row *row, int kind, void *cb, void *ud);

typedef struct gp_store_ops {
        const char *name; /* "sqlite", "postgres" */
        /* target: the URL without "scheme://" for sqlite, the whole URL for
         * postgres.  Sets s->impl on success; on failure frees what it made
         * and leaves the message in s->errmsg. */
        int (*open)(gp_store *s, const char *url, const char *target, const gp_store_options *opt);
        void (*close)(gp_store *s); /* frees s->impl (may be half-built) */
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
        int (*usage_add)(gp_store *s, const gp_bill_segment *seg);
        int (*usage_list)(gp_store *s, const gp_usage_filter *f, gp_segment_cb cb, void *ud);
        int (*tokens_add)(gp_store *s, const gp_bill_tokens *t);
        int (*tokens_list)(gp_store *s, const gp_usage_filter *f, gp_tokens_cb cb, void *ud);
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

/* Check a record before writing it: state in range, n_gpus in
 * 0..GP_MAX_GANG with gpus set when > 0, every fixed string NUL-terminated
 * inside its buffer, spec within GP_STORE_SPEC_MAX.  0 or -EINVAL with the
 * reason in s->errmsg. */
int store_task_check(gp_store *s, const gp_task *t);

/* The gpus of a task as compact JSON [{"node":..,"index":..,"uuid":..}]
 * (malloc'd, caller frees), or NULL in *ret when n_gpus == 0.
 * 0 or -ENOMEM. */
int store_gpus_to_json(const gp_task *t, char **ret);


#endif
