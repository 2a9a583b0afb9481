/* runs.c - the runs of tasks (runs.h), written once for both backends
 * through gp_store_ops.query/write, as idem.c and coord.c are.  A run's
 * row is put in the transaction of the batch that ended the run; reads
 * are their own statement.  Every row read back is checked (ranges, clean
 * text, the gpus JSON), so a damaged row is an error, never a wrong answer. */
#include "store/runs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "core/array.h"
#include "store/store-int.h"

#define RUNS_TABLE(INT, SERIAL)                                                                              \
        "CREATE TABLE IF NOT EXISTS task_runs (id " SERIAL ", task_id " INT " NOT NULL, run " INT            \
        " NOT NULL, tenant TEXT NOT NULL, unix_user TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL," \
        " reason TEXT NOT NULL, exit_code " INT ", started_ms " INT " NOT NULL, ended_ms " INT " NOT NULL,"  \
        " gpu_mem_peak_mb " INT " NOT NULL, gpus TEXT NOT NULL, UNIQUE (task_id, run));"

/* The table as first made; its later columns (array_id, array_index) are
 * migration 8's (store.c), which makes it first where it is missing.
 * No index but the key's: CREATE INDEX IF NOT EXISTS at every open would
 * wait for the table lock of any open transaction (a leader frozen
 * mid-batch); a task's runs are found by (task_id, run), the newest ended
 * by id. */
const char *const store_runs_schema_sql[STORE_DIALECTS] = {
        [STORE_SQLITE] = RUNS_TABLE("INTEGER", "INTEGER PRIMARY KEY"),
        [STORE_POSTGRES] = RUNS_TABLE("BIGINT", "BIGSERIAL PRIMARY KEY"),
};

#define RUN_COLS                                                                                      \
        "id, task_id, run, tenant, unix_user, name, state, reason, exit_code, started_ms, ended_ms, " \
        "gpu_mem_peak_mb, gpus, array_id, array_index"
#define RUN_NCOLS 15

_Static_assert(RUN_NCOLS <= STORE_QUERY_MAX_COLS, "a run's row fits a query's columns");

static const char *const states[] = {"succeeded", "failed", "cancelled", "timeout", "lost", "preempted", "requeued"};

bool gp_store_run_state_ok(const char *s) {
        for (size_t i = 0; s && i < GP_ARRAY_SIZE(states); i++)
                if (!strcmp(s, states[i]))
                        return true;
        return false;
}

/* p holds a NUL within max + 1 bytes and is clean text (no control bytes). */
static bool text_ok(const char *p, size_t size) {
        if (!p)
                return false;
        size_t n = strnlen(p, size);
        return n < size && gp_str_is_clean(p, n);
}



static int check(gp_store *s, const gp_store_run *r) {
        const char *bad = NULL;
        if (r->task_id <= 0 || r->run < 1)
                bad = "task id or run out of range";
        else if (r->array_id < 0 || r->array_index < 0 || r->array_index > GP_ARRAY_INDEX_MAX ||
                 (r->array_id == 0 && r->array_index != 0))
                bad = "array id or index out of range";
        else if (!text_ok(r->tenant, sizeof(r->tenant)) || !text_ok(r->user, sizeof(r->user)) ||
                 !text_ok(r->name, sizeof(r->name)) || !text_ok(r->reason, sizeof(r->reason)))
                bad = "a text field is too long or holds control characters";
        else if (!text_ok(r->state, sizeof(r->state)) || !gp_store_run_state_ok(r->state))
                bad = "state is not a run's end";
        else if (r->started_ms < 0 || r->ended_ms < r->started_ms)
                bad = "ended before it started";
        else if (r->gpu_mem_peak_mb < -1)
                bad = "gpu_mem_peak_mb below -1";
        else if (r->n_gpus < 0 || r->n_gpus > GP_MAX_GPUS || (r->n_gpus > 0 && !r->gpus))
                bad = "n_gpus out of range";
        for (int i = 0; !bad && i < r->n_gpus; i++)
                if (!text_ok(r->gpus[i].node, sizeof(r->gpus[i].node)) ||
                    !text_ok(r->gpus[i].uuid, sizeof(r->gpus[i].uuid)) || r->gpus[i].index < 0)
                        bad = "a GPU's node, index or uuid is bad";
        if (!bad)
                return 0;
        store_set_err(s, bad, "keep run %" PRId64 " of task %" PRId64, r->run, r->task_id);
        return -EINVAL;
}

int gp_store_run_put(gp_store *s, const gp_store_run *r) {
        const char *what = "keep a task's run";
        if (!s->in_tx) {
                store_set_err(s, "outside a transaction", "%s", what);
                return -EINVAL;
        }
        int rc = check(s, r);
        if (rc < 0)
                return rc;
        gp_task t = {.n_gpus = r->n_gpus, .gpus = r->gpus};
        char *gpus = NULL;
        if (store_gpus_to_json(&t, &gpus) < 0)
                return -ENOMEM;
        char id[24], run[24], code[16], started[24], ended[24], peak[24], aid[24], aix[24];
        snprintf(id, sizeof(id), "%" PRId64, r->task_id);
        snprintf(run, sizeof(run), "%" PRId64, r->run);
        snprintf(code, sizeof(code), "%d", r->exit_code);
        snprintf(started, sizeof(started), "%" PRId64, r->started_ms);
        snprintf(ended, sizeof(ended), "%" PRId64, r->ended_ms);
        snprintf(peak, sizeof(peak), "%" PRId64, r->gpu_mem_peak_mb);
        snprintf(aid, sizeof(aid), "%" PRId64, r->array_id);
        snprintf(aix, sizeof(aix), "%" PRId64, r->array_index);
        const char *p[14] = {id,      run,      r->tenant, r->user,
                             r->name, r->state, r->reason, r->has_exit_code ? code : NULL,
                             started, ended,    peak,      gpus ? gpus : "[]",
                             aid,     aix};
        rc = store_w(s,
               "INSERT INTO task_runs (task_id, run, tenant, unix_user, name, state, reason, exit_code, started_ms, "
               "ended_ms, gpu_mem_peak_mb, gpus, array_id, array_index) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, "
               "$9, $10, $11, $12, $13, $14) "
               "ON CONFLICT (task_id, run) DO UPDATE SET tenant = excluded.tenant, unix_user = excluded.unix_user, "
               "name = excluded.name, state = excluded.state, reason = excluded.reason, "
               "exit_code = excluded.exit_code, started_ms = excluded.started_ms, ended_ms = excluded.ended_ms, "
               "gpu_mem_peak_mb = excluded.gpu_mem_peak_mb, gpus = excluded.gpus, array_id = excluded.array_id, "
               "array_index = excluded.array_index",
               14, p, what);
        free(gpus);
        if (rc < 0 || r->run <= GP_RUNS_KEEP)
                return rc;
        char oldest[24];
        snprintf(oldest, sizeof(oldest), "%" PRId64, r->run - GP_RUNS_KEEP);
        const char *p2[2] = {id, oldest};
        return store_w(s, "DELETE FROM task_runs WHERE task_id = CAST($1 AS BIGINT) AND run <= CAST($2 AS BIGINT)", 2, p2,
                 "drop a task's oldest runs");
}

struct rows {
        gp_store *s;
        gp_store_run_cb cb;
        void *ud;
        int bad; /* -GP_ESTORE / -ENOMEM once a row failed */
};

static bool i64_col(const char *c, int64_t min, int64_t max, int64_t *ret) {
        return c && gp_parse_i64(c, min, max, ret) == 0;
}

static bool str_col(const char *c, char *dst, size_t size) {
        return c && gp_strlcpy(dst, c, size) < size && gp_str_is_clean(dst, strlen(dst));
}

static int row(void *ud, int n, const char *const *cols) {
        struct rows *x = ud;
        gp_store_run r;
        memset(&r, 0, sizeof(r));
        int64_t code = 0;
        char why[160];
        if (n < RUN_NCOLS || !i64_col(cols[0], 1, INT64_MAX, &r.id) || !i64_col(cols[1], 1, INT64_MAX, &r.task_id) ||
            !i64_col(cols[2], 1, INT64_MAX, &r.run) || !str_col(cols[3], r.tenant, sizeof(r.tenant)) ||
            !str_col(cols[4], r.user, sizeof(r.user)) || !str_col(cols[5], r.name, sizeof(r.name)) ||
            !str_col(cols[6], r.state, sizeof(r.state)) || !gp_store_run_state_ok(r.state) ||
            !str_col(cols[7], r.reason, sizeof(r.reason)) ||
            (cols[8] && !i64_col(cols[8], INT32_MIN, INT32_MAX, &code)) ||
            !i64_col(cols[9], 0, INT64_MAX, &r.started_ms) ||
            !i64_col(cols[10], r.started_ms, INT64_MAX, &r.ended_ms) ||
            !i64_col(cols[11], -1, INT64_MAX, &r.gpu_mem_peak_mb) || !cols[12] ||
            !i64_col(cols[13], 0, INT64_MAX, &r.array_id) || !i64_col(cols[14], 0, GP_ARRAY_INDEX_MAX, &r.array_index) ||
            (r.array_id == 0 && r.array_index != 0)) {
                x->bad = store_set_err(x->s, "a stored row is malformed or out of range", "task runs");
                return x->bad;
        }
        r.has_exit_code = cols[8] != NULL;
        r.exit_code = (int)code;
        int rc = store_gpus_from_json(cols[12], strlen(cols[12]), &r.gpus, &r.n_gpus, why, sizeof(why));
        if (rc < 0) {
                x->bad = rc == -ENOMEM ? -ENOMEM
                                       : store_set_err(x->s, why, "task runs: run %" PRId64 " of task %" PRId64, r.run,
                                                       r.task_id);
                return x->bad;
        }
        rc = x->cb(&r, x->ud);
        free(r.gpus);
        return rc;
}

int gp_store_run_list(gp_store *s, const gp_store_run_filter *f, gp_store_run_cb cb, void *ud) {
        const char *what = "list task runs";
        s->full = false;
        if (s->in_cb) {
                store_set_err(s, "the handle is busy running a list callback", "%s", what);
                return -EBUSY;
        }
        if (f->limit < 1 || f->limit > GP_RUNS_LIST_MAX || f->task_id < 0 || f->job < 0 ||
            (f->job && (f->job_index < -1 || f->job_index > GP_ARRAY_INDEX_MAX)) || f->since_ms < 0 || f->until_ms < 0 ||
            f->before_id < 0 || (f->state && !gp_store_run_state_ok(f->state)) ||
            (f->tenant && !text_ok(f->tenant, GP_TENANT_MAX)) || (f->user && !text_ok(f->user, 33))) {
                store_set_err(s, "bad filter", "%s", what);
                return -EINVAL;
        }
        char sql[768], task[24], job[24], jix[24], since[24], until[24], before[24], limit[16];
        const char *p[10];
        int n = 0, off = snprintf(sql, sizeof(sql), "SELECT " RUN_COLS " FROM task_runs WHERE 1 = 1");
#define COND(text, value)                                                               \
        do {                                                                            \
                p[n++] = (value);                                                       \
                off += snprintf(sql + off, sizeof(sql) - (size_t)off, " AND " text, n); \
        } while (0)
        snprintf(task, sizeof(task), "%" PRId64, f->task_id);
        snprintf(job, sizeof(job), "%" PRId64, f->job);
        snprintf(jix, sizeof(jix), "%" PRId64, f->job_index);
        snprintf(since, sizeof(since), "%" PRId64, f->since_ms);
        snprintf(until, sizeof(until), "%" PRId64, f->until_ms);
        snprintf(before, sizeof(before), "%" PRId64, f->before_id);
        snprintf(limit, sizeof(limit), "%d", f->limit);
        if (f->task_id)
                COND("task_id = CAST($%d AS BIGINT)", task);
        if (f->job && f->job_index >= 0) {
                COND("array_id = CAST($%d AS BIGINT)", job);
                COND("array_index = CAST($%d AS BIGINT)", jix);
        } else if (f->job) {
                /* the task, and every element of the array of that id (whose first element it is) */
                p[n++] = job;
                off += snprintf(sql + off, sizeof(sql) - (size_t)off,
                                " AND (task_id = CAST($%d AS BIGINT) OR array_id = CAST($%d AS BIGINT))", n, n);
        }
        if (f->tenant)
                COND("tenant = $%d", f->tenant);
        if (f->user)
                COND("unix_user = $%d", f->user);
        if (f->state)
                COND("state = $%d", f->state);
        if (f->since_ms)
                COND("ended_ms >= CAST($%d AS BIGINT)", since);
        if (f->until_ms)
                COND("ended_ms < CAST($%d AS BIGINT)", until);
        if (f->before_id)
                COND("id < CAST($%d AS BIGINT)", before);
#undef COND
        p[n++] = limit;
        off += snprintf(sql + off, sizeof(sql) - (size_t)off, " ORDER BY %s LIMIT CAST($%d AS BIGINT)",
                        f->task_id ? "run" : "id DESC", n);
        if (off < 0 || (size_t)off >= sizeof(sql))
                return -E2BIG; /* cannot happen: the conditions above fit */
        struct rows x = {.s = s, .cb = cb, .ud = ud};
        s->in_cb = true;
        int r = store_q(s, sql, n, p, row, &x, what);
        s->in_cb = false;
        return x.bad ? x.bad : r;
}
