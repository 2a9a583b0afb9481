/* runs.h - where and how each run of a task went, kept after the task
 * ended (issue 24, "where it ran, kept"; docs/internals/store.md "Runs").
 *
 * A run is one start of a task, numbered as gp_task_run_epoch numbers it.
 * Its row is written in the transaction that stores the change that ended
 * it (the task's end, its requeue after a node or GPU loss, its
 * preemption), so a run is kept exactly when that change is.  One table
 * beside the tasks, created if missing at every open (like the
 * idempotency table): task_runs, one row per (task_id, run), with an id in
 * insertion (so ending) order.  A task keeps its last GP_RUNS_KEEP runs:
 * a put of run N drops the task's runs <= N - GP_RUNS_KEEP.  An element of
 * a job array keeps its array id and index with each run (schema version 8,
 * store.c), so that history can name it as ps does (12_3).
 */
#ifndef GP_STORE_RUNS_H
#define GP_STORE_RUNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/task.h"
#include "store/store.h"

#define GP_RUNS_KEEP 100      /* runs kept per task, the newest */
#define GP_RUN_STATE_MAX 16   /* "succeeded", ..., "requeued" with the NUL */
#define GP_RUNS_LIST_MAX 1000 /* most rows one list returns */

typedef struct gp_store_run {
        int64_t id;                   /* insertion order (list only; put ignores it) */
        int64_t task_id;              /* > 0 */
        int64_t run;                  /* >= 1 */
        int64_t array_id;             /* its job array (gp_task.array_id), 0 = none */
        int64_t array_index;          /* its index there, 0..GP_ARRAY_INDEX_MAX; 0 when no array */
        char tenant[GP_TENANT_MAX];   /* the task's tenant */
        char user[33];                /* the Unix user it ran as ("" = not recorded) */
        char name[GP_NAME_MAX];       /* the task's name */
        char state[GP_RUN_STATE_MAX]; /* how it ended: gp_store_run_state_ok */
        char reason[GP_REASON_MAX];   /* why ("" = none given) */
        bool has_exit_code;
        int exit_code;                /* when has_exit_code */
        int64_t started_ms, ended_ms; /* ms since the epoch; started <= ended */
        int64_t gpu_mem_peak_mb;      /* its processes' most GPU memory at once, MiB; -1 = not known */
        int n_gpus;                   /* 0..GP_MAX_GPUS */
        gp_task_gpu *gpus;            /* n_gpus entries (list: owned by the store, valid during the callback) */
} gp_store_run;

/* Is s one of succeeded, failed, cancelled, timeout, lost (the task ended
 * with the run), preempted, requeued (it went back to the queue)? */
bool gp_store_run_state_ok(const char *s);

/* Inside a transaction: keep run r (a row of the same task and run is
 * replaced), then drop that task's runs older than its GP_RUNS_KEEP
 * newest.  0, -EINVAL (a field out of range or not clean text, outside a
 * transaction; nothing written), -ENOMEM, -GP_ESTORE (pipelined like task
 * puts on PostgreSQL: the transaction is doomed). */
int gp_store_run_put(gp_store *s, const gp_store_run *r);

typedef struct gp_store_run_filter {
        int64_t task_id;    /* > 0: this task's runs, oldest run first; 0: any, newest first */
        int64_t job;        /* > 0: the runs of task `job` and of every element of job array `job`
                               (sacct -j), newest first; 0: any */
        int64_t job_index;  /* with job: -1 = every element, else only element job_index of the
                               array (12_3); ignored without job */
        const char *tenant; /* NULL = any */
        const char *user;   /* NULL = any */
        const char *state;  /* NULL = any, else a gp_store_run_state_ok name */
        int64_t since_ms;   /* runs ended at or after it; 0 = unbounded */
        int64_t until_ms;   /* runs ended before it; 0 = unbounded */
        int64_t before_id;  /* rows with id < before_id (paging); 0 = unbounded */
        int limit;          /* 1..GP_RUNS_LIST_MAX */
} gp_store_run_filter;

typedef int (*gp_store_run_cb)(const gp_store_run *r, void *ud);

/* Outside a callback: the runs matching f, to cb (gp_task_cb's contract:
 * 0 goes on, anything else stops and is returned).  0, cb's value,
 * -EINVAL (bad filter), -ENOMEM, -GP_ESTORE (also a malformed row). */
int gp_store_run_list(gp_store *s, const gp_store_run_filter *f, gp_store_run_cb cb, void *ud);

#endif
