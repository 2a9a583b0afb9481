/* history.c - every run of a task kept (history.h).
 * Invariants: a record waits in memory only between the loop's call and
 * the commit of the same batch (gp_history_stored empties the list, a
 * failed commit keeps it for the retry), so a run's row is in the store
 * exactly when the change that ended it is; one record per (task, run) per
 * batch, and the store replaces a row of the same (task, run); a task's
 * runs are read under d->lock (the loop stores a batch while holding it),
 * so a run is never listed both as stored and as the current one; every
 * reader waits for the disk before it answers (gp_commit_wait). */
#include "server/history.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/text.h"
#include "base/user.h"
#include "base/util.h"
#include "base/vec.h"
#include "core/array.h"
#include "server/commit.h"
#include "server/reason-code.h"
#include "server/routes.h"
#include "server/runlog.h"
#include "server/server-int.h"
#include "store/runs.h"

#define RUNS_DEFAULT_LIMIT 100 /* GET /api/v1/runs without limit */

typedef struct gp_history {
        gp_store_run *recs; /* waiting for the batch's transaction; gpus owned */
        size_t n, cap;
} gp_history;

static gp_history *H(gp_daemon *d) {
        if (!d->history && !(d->history = calloc(1, sizeof(gp_history)))) {
                gp_error("out of memory recording a run's end; stopping");
                _exit(70);
        }
        return d->history;
}

/* (history.h) A reason may quote a process's message, cut mid-character. */
void gp_history_clean(char *dst, size_t size, const char *src) {
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *)src; *p && o + 1 < size;) {
                size_t n = *p < 0x80 ? 1 : *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
                if (*p < 0x20 || *p == 0x7f) {
                        dst[o++] = ' ';
                        p++;
                } else if (strnlen((const char *)p, n) == n && o + n < size && gp_text_valid((const char *)p, n, n)) {
                        memcpy(dst + o, p, n);
                        o += n;
                        p += n;
                } else if (o + n >= size && gp_text_valid((const char *)p, strnlen((const char *)p, n), n)) {
                        break; /* a whole character that does not fit: cut before it */
                } else {
                        dst[o++] = '?';
                        p++;
                }
        }
        dst[o] = '\0';
}

void gp_history_run_start(gp_daemon *d, gp_task *t) {
        (void)d;
        t->has_exit_code = false; /* the exit code shown is the last run's */
        t->exit_code = 0;
        t->gpu_mem_seen = false; /* the peak is the run's */
        t->gpu_mem_mb = 0;
        t->gpu_mem_peak_mb = t->gpu_mem_peak_stored = 0;
}

/* r is a run of t: its job array and index (as the task shows them, kept
 * with the run for history's 12_3), else none. */
static void run_array(gp_store_run *r, const gp_task *t) {
        r->array_id = t->array_id > 0 ? t->array_id : 0;
        r->array_index = t->array_id > 0 ? t->array_index : 0;
}

/* The peak of t's run now, MiB; -1 when its GPU memory was never read. */
static int64_t run_peak(const gp_task *t) {
        return t->gpu_mem_seen ? t->gpu_mem_peak_mb : -1;
}

void gp_history_run_end(gp_daemon *d, const gp_task *t, const char *state, const char *reason, int64_t now) {
        gp_history *h = H(d);
        int64_t run = gp_task_run_epoch(t);
        gp_store_run *r = NULL;
        for (size_t i = 0; i < h->n && !r; i++)
                if (h->recs[i].task_id == t->id && h->recs[i].run == run)
                        r = &h->recs[i];
        if (!r) {
                if (t->state != GP_TASK_RUNNING || t->started_ms <= 0)
                        return; /* no run to end (it never started, or went back to the queue already) */
                gp_store_run *v = gp_vec_grow(h->recs, &h->cap, h->n + 1, sizeof(*v), 16);
                if (!v) {
                        gp_error("out of memory recording a run's end; stopping");
                        _exit(70);
                }
                h->recs = v;
                r = &h->recs[h->n++];
                memset(r, 0, sizeof(*r));
                r->task_id = t->id;
                r->run = run;
                run_array(r, t);
                gp_history_clean(r->tenant, sizeof(r->tenant), t->tenant);
                gp_history_clean(r->user, sizeof(r->user), t->user);
                gp_history_clean(r->name, sizeof(r->name), t->name);
                r->started_ms = t->started_ms;
                r->ended_ms = now > t->started_ms ? now : t->started_ms;
                r->gpu_mem_peak_mb = run_peak(t);
                if (t->n_gpus > 0) {
                        r->gpus = calloc((size_t)t->n_gpus, sizeof(*r->gpus));
                        if (!r->gpus) {
                                gp_error("out of memory recording a run's end; stopping");
                                _exit(70);
                        }
                        memcpy(r->gpus, t->gpus, (size_t)t->n_gpus * sizeof(*r->gpus));
                        r->n_gpus = t->n_gpus;
                        for (int i = 0; i < r->n_gpus; i++) {
                                gp_history_clean(r->gpus[i].node, sizeof(r->gpus[i].node), t->gpus[i].node);
                                gp_history_clean(r->gpus[i].uuid, sizeof(r->gpus[i].uuid), t->gpus[i].uuid);
                        }
                }
        }
        gp_strlcpy(r->state, state, sizeof(r->state));
        gp_history_clean(r->reason, sizeof(r->reason), reason ? reason : t->reason);
        /* a run starts without one (gp_history_run_start): when set, it is this run's */
        r->has_exit_code = t->has_exit_code;
        r->exit_code = t->exit_code;
}

bool gp_history_pending(gp_daemon *d) {
        return d->history && d->history->n > 0;
}

int gp_history_store(gp_daemon *d) {
        gp_history *h = d->history;
        int rc = 0;
        for (size_t i = 0; h && rc == 0 && i < h->n; i++) {
                rc = gp_store_run_put(d->ws, &h->recs[i]);
                if (rc == -EINVAL) { /* refused before anything was written: the batch goes on without it */
                        gp_warn("task %" PRId64 ": run %" PRId64 " not kept: %s", h->recs[i].task_id, h->recs[i].run,
                                gp_store_errmsg(d->ws));
                        rc = 0;
                }
        }
        return rc;
}

void gp_history_stored(gp_daemon *d) {
        gp_history *h = d->history;
        if (!h)
                return;
        for (size_t i = 0; i < h->n; i++)
                free(h->recs[i].gpus);
        h->n = 0;
}

void gp_history_close(gp_daemon *d) {
        if (!d->history)
                return;
        gp_history_stored(d);
        free(d->history->recs);
        free(d->history);
        d->history = NULL;
}

/* ------------------------------------------------------------------ */
/* reading                                                             */

static json_t *gpus_json(const gp_task_gpu *g, int n, json_t **ret_nodes) {
        json_t *a = json_array(), *nodes = json_array();
        for (int i = 0; i < n; i++) {
                char id[GP_NODE_MAX + 16];
                snprintf(id, sizeof(id), "%s:%d", g[i].node, g[i].index);
                json_array_append_new(a, json_pack("{s:s,s:s,s:i,s:s}", "id", id, "node", g[i].node, "index",
                                                   g[i].index, "uuid", g[i].uuid));
                bool seen = false;
                for (int k = 0; k < i && !seen; k++)
                        seen = !strcmp(g[k].node, g[i].node);
                if (!seen)
                        json_array_append_new(nodes, json_string(g[i].node));
        }
        *ret_nodes = nodes;
        return a;
}

static json_t *run_json(const gp_store_run *r, bool running, int64_t now) {
        json_t *nodes = NULL, *gpus = gpus_json(r->gpus, r->n_gpus, &nodes);
        int64_t end = running ? now : r->ended_ms;
        json_t *o = json_pack(
                "{s:I,s:I,s:s,s:s,s:s,s:s,s:s,s:o,s:I,s:o,s:I,s:o,s:o,s:o}", "task_id", (json_int_t)r->task_id, "run",
                (json_int_t)r->run, "tenant", r->tenant, "user", r->user, "name", r->name, "state", r->state, "reason",
                r->reason, "exit_code", r->has_exit_code ? json_integer(r->exit_code) : json_null(), "started_ms",
                (json_int_t)r->started_ms, "ended_ms", running ? json_null() : json_integer(r->ended_ms), "elapsed_ms",
                (json_int_t)(end > r->started_ms ? end - r->started_ms : 0), "gpu_memory_peak_mb",
                r->gpu_mem_peak_mb >= 0 ? json_integer(r->gpu_mem_peak_mb) : json_null(), "nodes", nodes, "gpus", gpus);
        char at[40];
        gp_time_format(r->started_ms, at, sizeof(at));
        json_object_set_new(o, "started_at", json_string(at));
        if (!running)
                gp_time_format(r->ended_ms, at, sizeof(at));
        json_object_set_new(o, "ended_at", running ? json_null() : json_string(at));
        if (o && r->id > 0)
                json_object_set_new(o, "id", json_integer(r->id)); /* the row's, for ?before= */
        if (o) { /* as a task shows them: an element of a job array, else null */
                json_object_set_new(o, "array_id", r->array_id > 0 ? json_integer(r->array_id) : json_null());
                json_object_set_new(o, "array_index", r->array_id > 0 ? json_integer(r->array_index) : json_null());
        }
        json_t *rd = o ? gp_reason_code(r->reason) : NULL; /* why it ended, for a page in another language */
        if (rd)
                json_object_set_new(o, "reason_detail", rd);
        return o;
}

/* May r see runs of a task of tenant/user (http.c may_see's rule)? */
static bool may_see(const hreq *r, const char *tenant, const char *user) {
        return r->admin || (!strcmp(r->tenant, tenant) && (!r->own_only || !strcmp(r->user, user)));
}

static int send_error(hreq *r, int status, const char *code, const char *msg) {
        return gp_http_send(r, status, gp_http_error_body(code, "%s", msg), 0);
}

static int collect(const gp_store_run *r, void *ud) {
        json_t *o = run_json(r, false, 0);
        return o && json_array_append_new(ud, o) == 0 ? 0 : -ENOMEM;
}

/* Answer o (stolen) once what it shows is durable (as every read). */
static int send_durable(hreq *r, gp_daemon *d, json_t *o) {
        char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (gp_commit_wait(d) < 0) {
                free(body);
                return send_error(r, 503, "unavailable", "the store has not confirmed recent changes in time");
        }
        return gp_http_send(r, 200, body, 0);
}

static int h_task_runs(hreq *r, const gp_route_arg *a) {
        gp_daemon *d = r->d;
        char msg[96];
        snprintf(msg, sizeof(msg), "no task %" PRId64, a->id);
        gp_task t;
        pthread_mutex_lock(&d->lock);
        int rc = gp_daemon_task_lookup(d, a->id, &t);
        if (rc == -ENOENT || (rc == 0 && !may_see(r, t.tenant, t.user))) {
                if (rc == 0)
                        gp_task_done(&t);
                pthread_mutex_unlock(&d->lock);
                return send_error(r, 404, "not_found", msg); /* 404, not 403: ids do not leak */
        }
        if (rc < 0) {
                pthread_mutex_unlock(&d->lock);
                return send_error(r, 503, "unavailable", "cannot read the task");
        }
        json_t *runs = json_array();
        gp_store_run_filter f = {.task_id = a->id, .limit = GP_RUNS_KEEP};
        pthread_mutex_lock(&d->rs_lock);
        rc = runs ? gp_store_run_list(d->rs, &f, collect, runs) : -ENOMEM;
        pthread_mutex_unlock(&d->rs_lock);
        if (rc == 0 && t.state == GP_TASK_RUNNING && t.started_ms > 0) { /* the current run */
                gp_store_run cur = {.task_id = t.id,
                                    .run = gp_task_run_epoch(&t),
                                    .started_ms = t.started_ms,
                                    .gpu_mem_peak_mb = run_peak(&t),
                                    .n_gpus = t.n_gpus,
                                    .gpus = t.gpus};
                run_array(&cur, &t);
                gp_strlcpy(cur.tenant, t.tenant, sizeof(cur.tenant));
                gp_strlcpy(cur.user, t.user, sizeof(cur.user));
                gp_strlcpy(cur.name, t.name, sizeof(cur.name));
                gp_strlcpy(cur.state, "running", sizeof(cur.state));
                gp_history_clean(cur.reason, sizeof(cur.reason), t.reason);
                json_t *o = run_json(&cur, true, gp_now_ms());
                rc = o && json_array_append_new(runs, o) == 0 ? 0 : -ENOMEM;
        }
        int64_t last = gp_runlog_last_run(&t);
        pthread_mutex_unlock(&d->lock);
        gp_task_done(&t);
        if (rc < 0) {
                json_decref(runs);
                return send_error(r, 503, "unavailable", "cannot read the task's runs");
        }
        json_t *o = json_pack("{s:I,s:I,s:o}", "task_id", (json_int_t)a->id, "runs", (json_int_t)last, "items", runs);
        return send_durable(r, d, o);
}

/* ?key= as an int64 in [min, max]; absent: dflt.  0 or -EINVAL. */
static int arg_i64(hreq *r, const char *key, int64_t min, int64_t max, int64_t dflt, int64_t *ret) {
        const char *v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
        if (!v) {
                *ret = dflt;
                return 0;
        }
        return gp_parse_i64(v, min, max, ret) < 0 ? -EINVAL : 0;
}

/* ?key= of 1..size-1 bytes that ok accepts; absent: NULL.  0 or -EINVAL. */
static int arg_str(hreq *r, const char *key, size_t size, bool (*ok)(const char *, size_t), const char **ret) {
        const char *v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
        *ret = NULL;
        if (!v)
                return 0;
        size_t n = strnlen(v, size);
        if (n == 0 || n >= size || !ok(v, n))
                return -EINVAL;
        *ret = v;
        return 0;
}

/* ?job=ID or ?job=ID_INDEX (sacct -j): into *job and *index (-1: every
 * element of array ID, and task ID itself); absent: 0.  0 or -EINVAL. */
static int arg_job(hreq *r, int64_t *job, int64_t *index) {
        const char *v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "job");
        *job = 0;
        *index = -1;
        return v ? gp_array_ref_parse(v, job, index) : 0;
}

static int h_runs(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_daemon *d = r->d;
        int64_t since, until, before, limit, job, job_index;
        const char *tenant, *user, *state;
        if (arg_job(r, &job, &job_index) < 0)
                return send_error(r, 400, "invalid_request",
                                  "job: must be a task id, or ID_INDEX (12_3: element 3 of job array 12)");
        if (arg_i64(r, "since", 0, INT64_MAX, 0, &since) < 0)
                return send_error(r, 400, "invalid_request", "since: must be ms since the epoch (>= 0)");
        if (arg_i64(r, "until", 0, INT64_MAX, 0, &until) < 0)
                return send_error(r, 400, "invalid_request", "until: must be ms since the epoch (>= 0)");
        if (arg_i64(r, "before", 1, INT64_MAX, 0, &before) < 0)
                return send_error(r, 400, "invalid_request", "before: must be a row id >= 1 (next_before)");
        if (arg_i64(r, "limit", 1, GP_RUNS_LIST_MAX, RUNS_DEFAULT_LIMIT, &limit) < 0)
                return send_error(r, 400, "invalid_request", "limit: must be 1..1000");
        if (arg_str(r, "tenant", GP_TENANT_MAX, gp_id_ok, &tenant) < 0)
                return send_error(r, 400, "invalid_request", "tenant: must be a tenant id");
        if (arg_str(r, "user", 33, gp_user_name_ok, &user) < 0)
                return send_error(r, 400, "invalid_request", "user: must be a user name");
        if (arg_str(r, "state", GP_RUN_STATE_MAX, gp_str_is_clean, &state) < 0 ||
            (state && !gp_store_run_state_ok(state)))
                return send_error(r, 400, "invalid_request",
                                  "state: must be succeeded, failed, cancelled, timeout, lost, preempted or "
                                  "requeued");
        if (!r->admin) { /* a tenant key sees its tenant's runs; a local user its own */
                if (tenant && strcmp(tenant, r->tenant))
                        return send_error(r, 404, "not_found", "no such tenant");
                tenant = r->tenant;
                if (r->own_only)
                        user = r->user;
        }
        gp_store_run_filter f = {.job = job,
                                 .job_index = job_index,
                                 .tenant = tenant,
                                 .user = user,
                                 .state = state,
                                 .since_ms = since,
                                 .until_ms = until,
                                 .before_id = before,
                                 .limit = (int)limit};
        json_t *runs = json_array();
        /* the store alone: each batch's rows are one commit, seen whole or not
         * at all; nothing in memory is read, so d->lock is not taken */
        pthread_mutex_lock(&d->rs_lock);
        int rc = runs ? gp_store_run_list(d->rs, &f, collect, runs) : -ENOMEM;
        pthread_mutex_unlock(&d->rs_lock);
        if (rc < 0) {
                json_decref(runs);
                return send_error(r, 503, "unavailable", "cannot read the runs");
        }
        size_t n = json_array_size(runs);
        int64_t last_id = n ? json_integer_value(json_object_get(json_array_get(runs, n - 1), "id")) : 0;
        json_t *o = json_pack("{s:o,s:o}", "items", runs, "next_before",
                              (int64_t)n == limit && last_id > 0 ? json_integer(last_id) : json_null());
        return send_durable(r, d, o);
}

const gp_route gp_history_routes[] = {
        {GP_GET, "/api/v1/tasks/{task}/runs", GP_ROUTE_TENANT, h_task_runs, NULL, 0},
        {GP_GET, "/api/v1/runs", GP_ROUTE_TENANT, h_runs, NULL, 0},
        {0, NULL, 0, NULL, NULL, 0},
};
