/* daemon.c - the daemon's state and its decision loop (start, stop, recovery
 * and the GPU sampler are in daemon-open.c, the spawner thread in
 * spawner.c).  See server-int.h for the threads and the lock order.
 *
 * Invariant: every change to a task is stored (one transaction per loop
 * batch) before any request that caused it is answered and before any
 * reader can see it: the loop holds d->lock from applying to committing,
 * and with a deferred fsync (commit.h) answers and readers wait for the
 * batch's generation to be durable.  A batch task's supervisor is started
 * only after its `running` state is durable, so a crash can never run a
 * task twice; on restart a running task without a supervisor pid file is
 * started then.
 */
#include "server/daemon-int.h"
#include "server/commit.h"
#include "server/tenants.h"
#include "server/billing.h"
#include "server/disk.h"

#include "base/err.h"
#include "base/exe.h"
#include "base/log.h"
#include "base/util.h"
#include "base/vec.h"
#include "core/billing.h"
#include "exec/exec.h"
#include "server/monitor.h"
#include "server/nodes.h"
#include "server/mps.h"
#include "server/nodes-tele.h"
#include "core/watchdog.h"
#include "server/peer.h"
#include "server/reason-code.h"
#include "server/coord.h"
#include "server/estimates.h"
#include "server/idem.h"
#include "server/hostlim.h"
#include "server/history.h"
#include "server/runlog.h"
#include "base/labels.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define BATCH_MAX 4096

/* ------------------------------------------------------------------ */
/* helpers                                                             */

int mkdir_p(const char *path) {
        char tmp[PATH_MAX];
        if (gp_strlcpy(tmp, path, sizeof(tmp)) >= sizeof(tmp))
                return -ENAMETOOLONG;
        for (char *p = tmp + 1; *p; p++)
                if (*p == '/') {
                        *p = '\0';
                        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        *p = '/';
                }
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

int gp_daemon_task_path(const gp_daemon *d, int64_t id, const char *file, char *buf, size_t size) {
        int n = snprintf(buf, size, "%s/%" PRId64 "%s%s", d->tasks_dir, id, file ? "/" : "", file ? file : "");
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

void task_dir(const gp_daemon *d, int64_t id, char *buf, size_t size) {
        if (gp_daemon_task_path(d, id, NULL, buf, size) < 0)
                buf[0] = '\0'; /* tasks_dir was checked at start: cannot happen */
}

/* The scheduler's view of a task. */
gp_sched_req sched_req(const gp_task *t) {
        gp_sched_req r = {
                .id = t->id, .tenant = t->tenant, .priority = t->priority, .gpus = t->gpu_request,
                .memory_mb = t->memory_mb, .exclusive = t->exclusive, .preemptible = t->preemptible,
                .model = t->model, .gpu_model = t->gpu_model, .node_selector = t->node_selector, .timeout_ms = t->timeout_s * 1000,
                .submit_ms = t->submitted_ms,
                .queue_deadline_ms = t->queue_timeout_s ? t->submitted_ms + t->queue_timeout_s * 1000 : 0,
                .elastic_max_gpus = t->elastic_max_gpus, .borrowing = t->borrowing,
                .elastic_min_nodes = t->elastic_min_nodes, .elastic_max_nodes = t->elastic_max_nodes,
                .array_id = t->array_id, .array_limit = t->array_limit, .estimate_ms = t->estimate_ms,
                .cpus = t->cpus, .host_memory_mb = t->host_memory_mb,
        };
        return r;
}

void set_reason(gp_task *t, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->reason, sizeof(t->reason), fmt, ap);
        va_end(ap);
}

/* ------------------------------------------------------------------ */
/* rendering                                                           */

/* CUDA_VISIBLE_DEVICES: a GPU's index, a MIG instance's uuid (docs/isolation.md). */
void cuda_devices(const gp_task *t, char *buf, size_t size) {
        size_t off = 0;
        buf[0] = '\0';
        for (int i = 0; i < t->n_gpus && off < size; i++)
                off += gp_gpu_is_mig(t->gpus[i].uuid)
                               ? (size_t)snprintf(buf + off, size - off, "%s%s", i ? "," : "", t->gpus[i].uuid)
                               : (size_t)snprintf(buf + off, size - off, "%s%d", i ? "," : "", t->gpus[i].index);
}

typedef struct hide_ctx {
        gp_daemon *d;
        const char *owner;
} hide_ctx;

static bool same_tenant(void *ud, int64_t id) {
        hide_ctx *c = ud;
        const gp_task *t = gp_i64map_get(&c->d->tasks, id);
        return t && !strcmp(t->tenant, c->owner);
}

void gp_daemon_queued_reason(gp_daemon *d, const gp_task *t, char *reason, size_t size, char *core, size_t core_size,
                             gp_sched_reason *ret) {
        gp_daemon_task_reason(d, t, reason, size, ret);
        gp_strlcpy(core, reason, core_size);
        gp_nodes_reason_note(d, reason, size);
        char rules[128];
        gp_tenants_rules_in_force(d->tenants, rules, sizeof(rules));
        size_t l = strlen(reason);
        if (rules[0] && (strstr(reason, "quota") || strstr(reason, "share")) && l + strlen(rules) + 32 < size) {
                snprintf(reason + l, size - l, " (time rule %s in force)", rules);
                l = strlen(reason);
        }
        if (t->reason[0] && l + 3 < size) {
                memcpy(reason + l, "; ", 3);
                gp_strlcpy(reason + l + 2, t->reason, size - l - 2);
        }
}

void gp_daemon_task_reason(gp_daemon *d, const gp_task *t, char *reason, size_t size, gp_sched_reason *ret) {
        gp_sched_task_reason_ex(d->sched, t->id, reason, size, ret);
        /* a request no node of the pool can hold now waits only while the
         * pool may grow (feasible(): else it was refused): say so */
        gp_sched_req r = sched_req(t);
        char why[256], grow[128];
        if (gp_sched_check_feasible(d->sched, &r, why, sizeof(why)) == -EINVAL &&
            gp_nodes_growable(d, gp_now_ms(), grow, sizeof(grow)))
        {
                snprintf(reason, size, "no node in the pool can hold it now (%s); it waits for one to join: %s", why,
                         grow);
                if (ret)
                        ret->code[0] = '\0'; /* not the scheduler's: reason-code.c has it */
        }
}

json_t *gp_daemon_reason_detail(gp_daemon *d, const char *owner, const gp_sched_reason *r, const char *core,
                                const char *shown) {
        if (!r->code[0]) /* not the scheduler's: the server's own, if it has a template */
                return gp_reason_code_queued(core, shown);
        /* a task id of another tenant in it is hidden as in the text: the
         * code's _hidden variant, that id left out */
        char hid[GP_REASON_MAX], code[48];
        gp_strlcpy(hid, core, sizeof(hid));
        gp_daemon_reason_hide(d, owner, hid, sizeof(hid));
        bool hidden = strcmp(hid, core) != 0;
        size_t n = strlen(hid);
        if (strncmp(shown, hid, n) != 0)
                return NULL;
        snprintf(code, sizeof(code), "%s%s", r->code, hidden ? "_hidden" : "");
        json_t *args = json_array();
        for (int i = 0; args && i < r->nargs; i++)
                json_array_append_new(args, json_string(hidden && i == 0 ? "" : r->args[i]));
        json_t *o = json_pack("{s:s,s:o,s:s,s:s,s:b,s:s}", "code", code, "args", args ? args : json_array(), "glob",
                              r->glob, "labels", r->labels, "reserved", r->reserved, "note", shown + n);
        gp_reason_code_note(o, shown + n); /* a requeue's or preemption's why, in code too */
        return o;
}

void gp_daemon_reason_hide(gp_daemon *d, const char *owner, char *reason, size_t size) {
        hide_ctx c = {.d = d, .owner = owner};
        gp_monitor_hide_task_ids(reason, size, same_tenant, &c);
}

/* The one serializer of a task (every answer and list uses it): written
 * straight into the buffer, since it is on the path of every submission. */
int gp_daemon_task_write(gp_daemon *d, const gp_task *t, gp_buf *b) {
        int r = gp_buf_printf(b, "{\"id\":%" PRId64, t->id);
        r = r ? r : gp_buf_json_field_str(b, "tenant_id", t->tenant);
        r = r ? r : gp_buf_json_field_str(b, "name", t->name);
        r = r ? r : (t->user[0] ? gp_buf_json_field_str(b, "user", t->user) : gp_buf_puts(b, ",\"user\":null"));
        r = r ? r : gp_buf_printf(b, ",\"kind\":\"%s\",\"state\":\"%s\",\"priority\":%d,\"gpu_request\":%d,"
                                     "\"memory_mb\":%" PRId64 ",\"exclusive\":%s,\"preemptible\":%s",
                                  t->is_lease ? "lease" : "batch",
                                  t->preempt_deadline_ms ? "preempting" : gp_task_state_name(t->state), t->priority,
                                  t->gpu_request, t->memory_mb, t->exclusive ? "true" : "false",
                                  t->preemptible ? "true" : "false");
        r = r ? r : gp_buf_printf(b, ",\"borrowing\":%s",
                                  t->borrowing && t->state == GP_TASK_RUNNING ? "true" : "false");
        if (t->array_id > 0)
                r = r ? r : gp_buf_printf(b, ",\"array_id\":%" PRId64 ",\"array_index\":%d", t->array_id,
                                          t->array_index);
        else
                r = r ? r : gp_buf_puts(b, ",\"array_id\":null,\"array_index\":null");
        if (t->elastic_max_gpus > 0)
                r = r ? r : gp_buf_printf(b, ",\"elastic\":{\"min_gpus\":%d,\"max_gpus\":%d}", t->gpu_request,
                                          t->elastic_max_gpus);
        if (t->elastic_max_nodes > 0)
                r = r ? r : gp_buf_printf(b, ",\"elastic_nodes\":{\"min_nodes\":%d,\"max_nodes\":%d}",
                                          t->elastic_min_nodes, t->elastic_max_nodes);
        if (t->preempt_deadline_ms)
                r = r ? r : gp_buf_json_field_time(b, "preempt_deadline", t->preempt_deadline_ms);
        r = r ? r : gp_buf_json_field_str(b, "model", t->model);
        r = r ? r : gp_buf_json_field_str(b, "gpu_model", t->gpu_model);
        /* labels and node names are of [A-Za-z0-9._/-]: nothing to escape */
        r = r ? r : gp_buf_puts(b, ",\"node_selector\":{");
        size_t lp = 0, kl, vl;
        const char *lk, *lv;
        for (bool first = true; r == 0 && gp_labels_next(t->node_selector, &lp, &lk, &kl, &lv, &vl); first = false)
                r = gp_buf_printf(b, "%s\"%.*s\":\"%.*s\"", first ? "" : ",", (int)kl, lk, (int)vl, lv);
        r = r ? r : gp_buf_puts(b, "},\"nodes\":[");
        for (int i = 0; r == 0 && i < t->n_gpus; i++)
                if (i == 0 || strcmp(t->gpus[i - 1].node, t->gpus[i].node))
                        r = gp_buf_printf(b, "%s\"%s\"", i ? "," : "", t->gpus[i].node);
        r = r ? r : gp_buf_puts(b, "]");
        if (r == 0 && t->spec) {
                json_t *spec = json_loads(t->spec, 0, NULL);
                json_t *cmdv = spec ? json_object_get(spec, "command") : NULL;
                char *cs = cmdv ? json_dumps(cmdv, JSON_COMPACT) : NULL;
                if (cs)
                        r = gp_buf_printf(b, ",\"command\":%s", cs);
                free(cs);
                const char *onl = spec ? json_string_value(json_object_get(spec, "on_node_lost")) : NULL;
                r = r ? r : gp_buf_printf(b, ",\"on_node_lost\":\"%s\"",
                                          onl && !strcmp(onl, "requeue") ? "requeue" : "fence");
                const char *wd = spec ? json_string_value(json_object_get(spec, "workdir")) : NULL;
                if (wd && *wd) /* the dashboard's Tasks page shows it */
                        r = r ? r : gp_buf_json_field_str(b, "workdir", wd);
                const char *sig = spec ? json_string_value(json_object_get(spec, "signal")) : NULL;
                if (sig) /* --signal, as asked (runs get at most preemption.max_notice_s) */
                        r = r ? r : gp_buf_json_field_str(b, "signal", sig);
                r = r ? r : gp_hostlim_task_write(d, t, spec, b); /* cpus, host_memory_mb, cgroup */
                json_decref(spec);
        } else {
                r = r ? r : gp_hostlim_task_write(d, t, NULL, b);
        }
        r = r ? r : gp_buf_puts(b, ",\"gpus\":[");
        for (int i = 0; r == 0 && i < t->n_gpus; i++) {
                r = gp_buf_printf(b, "%s{\"index\":%d", i ? "," : "", t->gpus[i].index);
                r = r ? r : gp_buf_json_field_str(b, "node", t->gpus[i].node);
                r = r ? r : gp_buf_json_field_str(b, "uuid", t->gpus[i].uuid);
                r = r ? r : gp_buf_puts(b, "}");
        }
        char cvd[GP_MAX_GPUS * 8];
        cuda_devices(t, cvd, sizeof(cvd));
        if (t->n_gpus == 1 && t->gpus[0].uuid[0] && gp_mps_task_on(d, t)) /* as its MPS daemon sees it */
                gp_strlcpy(cvd, t->gpus[0].uuid, sizeof(cvd));
        r = r ? r : gp_buf_printf(b, "],\"cuda_visible_devices\":\"%s\"", cvd);
        char reason[GP_REASON_MAX], core[GP_REASON_MAX] = "";
        gp_sched_reason why = {0};
        gp_strlcpy(reason, t->reason, sizeof(reason));
        gp_sched_task_view v;
        if (t->state == GP_TASK_QUEUED && gp_sched_task_get(d->sched, t->id, &v) == 0) {
                r = r ? r : gp_buf_printf(b, ",\"queue_position\":%d", v.queue_position);
                gp_daemon_queued_reason(d, t, reason, sizeof(reason), core, sizeof(core), &why);
        } else {
                r = r ? r : gp_buf_puts(b, ",\"queue_position\":null");
        }
        gp_daemon_reason_hide(d, t->tenant, reason, sizeof(reason));
        r = r ? r : gp_buf_json_field_str(b, "reason", reason);
        json_t *rd = core[0] ? gp_daemon_reason_detail(d, t->tenant, &why, core, reason) : NULL;
        rd = rd || t->state == GP_TASK_QUEUED ? rd : gp_reason_code(reason); /* the server's own reasons */
        char *rds = rd ? json_dumps(rd, JSON_COMPACT) : NULL;
        if (rds) /* the same reason, for a page that says it in another language */
                r = r ? r : gp_buf_printf(b, ",\"reason_detail\":%s", rds);
        free(rds);
        json_decref(rd);
        r = r ? r : gp_est_write(d, t, gp_now_ms(), b); /* queued or running: what history predicts */
        r = r ? r : gp_tele_task_write(d, t, b);        /* its processes' GPU memory, now and at peak */
        r = r ? r : gp_buf_printf(b, ",\"preempt_count\":%d,\"retries\":%d", t->preempt_count, t->retries);
        if (!t->is_lease) /* its runs, each with a log of its own (runlog.h) */
                r = r ? r : gp_buf_printf(b, ",\"runs\":%" PRId64, gp_runlog_last_run(t));
        if (t->has_exit_code)
                r = r ? r : gp_buf_printf(b, ",\"exit_code\":%d", t->exit_code);
        else
                r = r ? r : gp_buf_puts(b, ",\"exit_code\":null");
        r = r ? r : gp_buf_printf(b, ",\"timeout_s\":%" PRId64 ",\"queue_timeout_s\":%" PRId64, t->timeout_s,
                                  t->queue_timeout_s);
        if (t->is_lease) {
                r = r ? r : gp_buf_printf(b, ",\"lease_ttl_s\":%" PRId64, t->lease_ttl_s);
                r = r ? r : gp_buf_json_field_time(b, "lease_expires_at",
                                     t->state == GP_TASK_RUNNING ? t->heartbeat_ms + t->lease_ttl_s * 1000 : 0);
        }
        r = r ? r : gp_buf_json_field_time(b, "submitted_at", t->submitted_ms);
        r = r ? r : gp_buf_json_field_time(b, "started_at", t->started_ms);
        r = r ? r : gp_buf_json_field_time(b, "finished_at", t->finished_ms);
        char backends[64] = ""; /* its GPUs' (a task on an agent's sim GPUs says sim), else the server's */
        for (int i = 0; i < t->n_gpus; i++)
                if (i == 0 || strcmp(t->gpus[i - 1].node, t->gpus[i].node))
                        gp_nodes_backends_add(backends, sizeof(backends), gp_nodes_backend(d, t->gpus[i].node));
        r = r ? r : gp_buf_printf(b, ",\"backend\":\"%s\"}", backends[0] ? backends : d->backend);
        return r;
}

int gp_daemon_task_lookup(gp_daemon *d, int64_t id, gp_task *ret) {
        gp_task *t = gp_i64map_get(&d->tasks, id);
        if (t)
                return gp_task_copy(ret, t);
        pthread_mutex_lock(&d->rs_lock);
        int rc = gp_store_task_get(d->rs, id, ret);
        pthread_mutex_unlock(&d->rs_lock);
        return rc;
}

/* ------------------------------------------------------------------ */
/* the batch: dirty tasks, answers, spawns                             */

/* gp_vec_grow, where out of memory ends the daemon (crash-only: the
 * restart recovers from the store). */
static void *grow_or_exit(void *items, size_t *cap, size_t need, size_t size) {
        void *p = gp_vec_grow(items, cap, need, size, 64);
        if (!p) {
                gp_error("out of memory; stopping");
                _exit(70);
        }
        return p;
}

/* Room for one more id at the end of a growing array. */
void grow_ids(int64_t **v, size_t n, size_t *cap) {
        *v = grow_or_exit(*v, cap, n + 1, sizeof(**v));
}

int push_ptr(gp_task ***v, size_t *n, size_t *cap, gp_task *t) {
        for (size_t i = 0; i < *n; i++)
                if ((*v)[i] == t)
                        return 0;
        gp_task **p = gp_vec_grow(*v, cap, *n + 1, sizeof(*p), 64);
        if (!p)
                return -ENOMEM;
        *v = p;
        (*v)[(*n)++] = t;
        return 0;
}

static void mark(batch *b, gp_task *t) {
        if (push_ptr(&b->dirty, &b->ndirty, &b->capdirty, t) < 0) {
                gp_error("out of memory recording a task change; stopping");
                _exit(70);
        }
}

/* A preempted lease's grace period is over (released, ended, deadline
 * passed or started again). */
static void lease_let_go(gp_daemon *d, gp_task *t) {
        if (!t->preempt_deadline_ms)
                return;
        t->preempt_deadline_ms = 0;
        gp_i64map_del(&d->lpreempting, t->id);
}

/* End a task: final state, reason, times; frees its GPUs in the scheduler. */
void finish(gp_daemon *d, batch *b, gp_task *t, gp_task_state st, int64_t now) {
        /* its last usage segment and its run, stored with this end (no-ops if it never ran) */
        gp_history_run_end(d, t, gp_task_state_name(st), NULL, now);
        gp_billing_run_end(d, t, now, GP_BILL_TASK_END, gp_now_ms());
        gp_sched_remove_at(d->sched, t->id, now); /* its run counts for fair share up to now */
        gp_i64map_del(&d->leases, t->id);
        lease_let_go(d, t);
        t->state = st;
        t->finished_ms = now;
        gp_est_ended(d, t); /* a success teaches its run time */
        /* its GPUs (and so its nodes) stay with it, stored with its end: where
         * it ran, as sacct's NodeList, for whoever looks into why it failed */
        d->finished_total++;
        if (st == GP_TASK_FAILED || st == GP_TASK_LOST || st == GP_TASK_TIMEOUT)
                d->failed_total++;
        if (st == GP_TASK_CANCELLED)
                d->cancelled_total++;
        gp_monitor_task_finished(d->mon, t->tenant, st);
        mark(b, t);
        gp_info("task %" PRId64 " %s%s%s", t->id, gp_task_state_name(st), t->reason[0] ? ": " : "", t->reason);
}

static int drained_meta(gp_daemon *d, char *buf, size_t size) {
        size_t off = 0;
        buf[0] = '\0';
        for (uint32_t g = 0; g < gp_sched_gpu_count(d->sched); g++) {
                gp_sched_gpu_view v;
                gp_sched_gpu_get(d->sched, g, &v);
                if (!v.drained)
                        continue;
                int n = snprintf(buf + off, size - off, "%s%s", off ? "\n" : "", v.uuid);
                if (n < 0 || (size_t)n >= size - off)
                        return -E2BIG;
                off += (size_t)n;
        }
        return 0;
}

/* One attempt at storing the batch: begin, puts, commit.  On failure the
 * transaction is rolled back and what is to be stored is still queued
 * (dirty tasks, tenants' and billing's pending rows), so it can be tried
 * again. */
static int commit_once(gp_daemon *d, batch *b) {
        int rc = gp_store_begin(d->ws);
        for (size_t i = 0; rc == 0 && i < b->ndirty; i++)
                rc = gp_store_task_put(d->ws, b->dirty[i]);
        if (rc == 0 && b->meta_drained) {
                char buf[8192];
                rc = drained_meta(d, buf, sizeof(buf));
                if (rc == 0)
                        rc = gp_store_meta_set(d->ws, "drained", buf);
        }
        if (rc == 0)
                rc = gp_tenants_store(d->tenants);
        if (rc == 0)
                rc = gp_billing_store(d); /* usage segments of this batch: same transaction */
        if (rc == 0)
                rc = gp_history_store(d); /* the runs it ended (history.h) */
        if (rc == 0)
                rc = gp_nodes_store(d); /* node records and join tokens changed by this batch */
        if (rc == 0)
                rc = gp_idem_store(d); /* the answers of keyed requests, with their changes */
        if (rc == 0)
                rc = gp_store_commit(d->ws);
        if (rc < 0)
                gp_store_rollback(d->ws); /* a no-op when the commit already rolled back */
        return rc;
}

/* Store every dirty task in one transaction, before anything of the batch
 * is answered or started.  A disk that is full makes the daemon degraded
 * (disk.h): the reserve is given back and the same batch is tried again at
 * once, then every second until it is stored (d->lock stays held: no
 * reader sees the unstored batch, and nothing of it is acknowledged; the
 * loop's gate makes this rare, since a degraded daemon applies only what
 * shrinks the work).  Any other store failure breaks the promise that
 * answered means stored, so the daemon stops (crash-only: the restart
 * recovers from what was stored). */
int64_t lead_epoch; /* the term of a leader of several servers; 0: a single server */

/* Store the batch: true once stored; false when a leader could not
 * store it (the database went away): it is deposed, and nothing of the
 * batch is acknowledged, started or shown to readers.  A single server
 * that cannot store exits instead. */
bool commit(gp_daemon *d, batch *b) {
        if (!b->ndirty && !b->meta_drained && !gp_tenants_pending(d->tenants) && !gp_billing_pending(d) &&
            !gp_nodes_pending(d) && !gp_idem_pending(d) && !gp_history_pending(d))
                return true;
        /* from here on a reader waits for this batch to be durable */
        uint64_t gen = gp_commit_next(d);
        for (int attempt = 0;; attempt++) {
                int rc = commit_once(d, b);
                if (rc == 0)
                        break;
                if (!gp_store_full(d->ws) && lead_epoch > 0) {
                        char why[600];
                        snprintf(why, sizeof(why), "a commit failed (%s)", gp_store_errmsg(d->ws));
                        gp_daemon_depose(why);
                        return false;
                }
                if (!gp_store_full(d->ws)) {
                        gp_error("store failed (%s); stopping so that nothing unstored is acknowledged",
                                 gp_store_errmsg(d->ws));
                        _exit(70);
                }
                gp_disk_store_full(d, gp_store_errmsg(d->ws));
                if (attempt == 0)
                        continue; /* with the reserve given back */
                if (attempt == 1)
                        gp_error("a batch of %zu task changes cannot be stored (%s): %s; trying again every "
                                 "second, its requests wait",
                                 b->ndirty, gp_store_errmsg(d->ws), gp_disk_message(d));
                if (__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE)) {
                        gp_error("stopping with a batch that could not be stored; none of it was acknowledged");
                        _exit(70);
                }
                sleep(1);
                gp_disk_check(d);
        }
        gp_commit_stored(d, gen); /* durable now, or once the sync thread's fsync covers it */
        gp_tenants_stored(d->tenants);
        gp_billing_stored(d);
        gp_history_stored(d);
        gp_nodes_stored(d);
        d->commits++;
        d->commit_tasks += b->ndirty;
        gp_monitor_store_commit(d->mon, b->ndirty);
        return true;
}

/* ------------------------------------------------------------------ */
/* applying commands                                                   */

typedef struct outcome {
        int status;                 /* 0 = answer with the task */
        gp_task *task;              /* answer body: this task (valid until the batch ends) */
        char *body;                 /* or this error body */
        int retry_after;
        int64_t lookup_id;          /* answer with a final task read from the store */
        const char *ctype;          /* Content-Type of body, NULL = JSON */
} outcome;

static bool op_owns(const cmd_op *op, const gp_task *t) {
        return (!op->tenant[0] || !strcmp(t->tenant, op->tenant)) && (!op->user[0] || !strcmp(t->user, op->user));
}

static gp_task *active_for(gp_daemon *d, const cmd_op *op) {
        gp_task *t = gp_i64map_get(&d->tasks, op->id);
        return t && op_owns(op, t) ? t : NULL;
}

static void apply_submit_array(gp_daemon *d, batch *b, cmd *c, int64_t now, outcome *o);

/* Can the request ever run?  On one machine a request no GPU can hold is
 * refused (422).  A pool that nodes join (join tokens, or agent nodes
 * known) may grow: there it waits, and its reason says why, as a pod waits
 * for a node in Kubernetes. */
static int feasible(gp_daemon *d, const gp_sched_req *r, char *why, size_t size) {
        int rc = gp_sched_check_feasible(d->sched, r, why, size);
        char grow[128];
        if (rc == -EINVAL && strcmp(why, "invalid request") && gp_nodes_growable(d, gp_now_ms(), grow, sizeof(grow)))
                return 0;
        if (rc < 0)
                return rc;
        /* nor a request its tenant's quota can never admit (whole GPUs: a
         * memory share's size depends on the GPU it lands on) */
        int64_t most = gp_tenants_max_gpus_ever(d->tenants, r->tenant);
        bool whole = r->exclusive || r->memory_mb == 0;
        if (most > 0 && whole && (int64_t)r->gpus * 1000 > most) {
                snprintf(why, size,
                         "tenant %s quota: this task needs %d GPUs, more than its max_gpus of %" PRId64 ".%03" PRId64
                         " (in every time rule too)",
                         r->tenant, r->gpus, most / 1000, most % 1000);
                return -EINVAL;
        }
        return 0;
}

/* May the tenant submit (billing.h: a tenant whose balance is used up may
 * not)?  false with the 402 answer in *o. */
static bool balance_ok(gp_daemon *d, const char *tenant, outcome *o) {
        char *no_money = NULL;
        if (gp_billing_check_submit(d, tenant, &no_money) == 0)
                return true;
        gp_monitor_submit_rejected(d->mon, "insufficient_balance");
        o->status = 402;
        o->body = no_money;
        return false;
}

static void apply_submit(gp_daemon *d, batch *b, cmd *c, int64_t now, outcome *o) {
        if (c->submit.array.n > 0) {
                apply_submit_array(d, b, c, now, o);
                return;
        }
        gp_task *t = malloc(sizeof(*t));
        if (!t) {
                o->status = 503;
                o->body = gp_http_error_body("unavailable", "out of memory");
                return;
        }
        *t = c->submit.task;
        memset(&c->submit.task, 0, sizeof(c->submit.task));
        t->id = d->next_id;
        t->state = GP_TASK_QUEUED;
        t->submitted_ms = now;
        if (!balance_ok(d, t->tenant, o)) {
                gp_task_done(t);
                free(t);
                return;
        }
        t->estimate_ms = gp_est_predict(d, t, NULL); /* what its like taught so far */
        gp_sched_req r = sched_req(t);
        char why[256];
        int rc = feasible(d, &r, why, sizeof(why));
        if (rc == 0)
                rc = gp_sched_enqueue(d->sched, &r);
        if (rc < 0) {
                gp_monitor_submit_rejected(d->mon, rc == -GP_EQUEUEFULL ? "queue_full"
                                                   : rc == -EINVAL        ? "infeasible"
                                                                          : "other");
                if (rc == -GP_EQUEUEFULL) {
                        o->status = 429;
                        o->retry_after = 5;
                        o->body = gp_http_error_body("queue_full",
                                                     "the P%d queue is full (%d tasks); retry later", t->priority,
                                                     d->cfg.max_queue_depth);
                } else if (rc == -EDQUOT) {
                        /* a quota, not a full disk: never the errno's text */
                        struct gp_sched_tenant_usage u = {0};
                        gp_sched_tenant_usage(d->sched, t->tenant, now, &u);
                        o->status = 429;
                        o->retry_after = 5;
                        o->body = gp_http_error_body("quota_exceeded",
                                                     "tenant %s has %d tasks queued, its max_queued quota; wait "
                                                     "for some to start, or cancel some",
                                                     t->tenant, u.queued);
                } else if (rc == -EINVAL) {
                        o->status = 422;
                        o->body = gp_http_error_body("unprocessable", "this task can never run here: %s", why);
                } else {
                        o->status = 503;
                        o->body = gp_http_error_body("unavailable", "%s", gp_strerror(rc));
                }
                gp_task_done(t);
                free(t);
                return;
        }
        if (gp_i64map_put(&d->tasks, t->id, t) < 0) {
                gp_sched_remove(d->sched, t->id);
                gp_task_done(t);
                free(t);
                o->status = 503;
                o->body = gp_http_error_body("unavailable", "out of memory");
                return;
        }
        d->next_id++;
        d->submitted_total++;
        gp_monitor_task_submitted(d->mon, t->tenant);
        mark(b, t);
        o->status = 201;
        o->task = t;
}

/* Cancel an active task: a queued task or a lease ends now (true); a
 * running batch task is told to stop and ends when it has (false). */
static bool cancel_task(gp_daemon *d, batch *b, gp_task *t, int64_t now) {
        if (t->state == GP_TASK_QUEUED || t->is_lease) {
                set_reason(t, "cancelled by request");
                finish(d, b, t, GP_TASK_CANCELLED, now);
                return true;
        }
        char how[GP_REASON_MAX];
        gp_notice_describe(t->spec, d->cfg.preemption_max_notice_s, d->cfg.kill_grace_s, how, sizeof(how));
        set_reason(t, "cancelling: %s", how);
        if (gp_nodes_remote(t)) { /* its agents stop it and report */
                gp_nodes_stop(d, t, GP_PROTO_STOP_CANCEL);
                return false;
        }
        /* running batch task: the supervisor stops it and reports */
        gp_exec_proc p = {t->sup_pid, t->sup_start};
        if (t->sup_pid > 0 && gp_exec_cancel(&p) == 0)
                return false;
        /* no supervisor (it never started, or is gone): the watch will tell,
         * or nothing will, so end it here */
        if (!gp_i64map_get(&d->watch, t->id)) {
                set_reason(t, "cancelled by request");
                finish(d, b, t, GP_TASK_CANCELLED, now);
                return true;
        }
        return false;
}

static void apply_cancel(gp_daemon *d, batch *b, cmd *c, int64_t now, outcome *o) {
        gp_task *t = active_for(d, &c->op);
        if (!t) {
                o->lookup_id = c->op.id; /* final or unknown: answered from the store */
                return;
        }
        o->task = t;
        cancel_task(d, b, t, now);
}

/* ---- job arrays (docs/api.md "Job arrays") ---- */

/* A job array: every element is queued in this one batch (so stored in one
 * transaction) or none is.  Ids are consecutive; the array's id is its
 * first element's task id (as Slurm's SLURM_ARRAY_JOB_ID). */
static void apply_submit_array(gp_daemon *d, batch *b, cmd *c, int64_t now, outcome *o) {
        gp_task *tpl = &c->submit.task;
        const gp_array_spec *spec_in = &c->submit.array;
        size_t n = spec_in->n;
        tpl->state = GP_TASK_QUEUED;
        tpl->submitted_ms = now;
        if (!balance_ok(d, tpl->tenant, o))
                return;
        tpl->id = d->next_id;
        tpl->estimate_ms = gp_est_predict(d, tpl, NULL); /* one for every element: the same job */
        gp_sched_req r = sched_req(tpl);
        char why[256];
        int rc = feasible(d, &r, why, sizeof(why));
        if (rc < 0) {
                gp_monitor_submit_rejected(d->mon, "infeasible");
                o->status = 422;
                o->body = gp_http_error_body("unprocessable", "this array's tasks can never run here: %s", why);
                return;
        }
        rc = gp_sched_enqueue_room(d->sched, tpl->tenant, tpl->priority, n);
        if (rc == -GP_EQUEUEFULL || rc == -EDQUOT) {
                struct gp_sched_tenant_usage u = {0};
                gp_sched_tenant_usage(d->sched, tpl->tenant, now, &u);
                gp_monitor_submit_rejected(d->mon, rc == -EDQUOT ? "other" : "queue_full");
                o->status = 429;
                o->retry_after = 5;
                o->body = rc == -EDQUOT
                                  ? gp_http_error_body("quota_exceeded",
                                                       "tenant %s has %d tasks queued; its max_queued quota leaves no "
                                                       "room for all %zu elements of this array (none was queued)",
                                                       tpl->tenant, u.queued, n)
                                  : gp_http_error_body("queue_full",
                                                       "the P%d queue has no room for all %zu elements of this array "
                                                       "(max_queue_depth %d; none was queued); retry later",
                                                       tpl->priority, n, d->cfg.max_queue_depth);
                return;
        }
        gp_task **ts = calloc(n, sizeof(*ts));
        if (!ts)
                goto oom;
        size_t k;
        for (k = 0; k < n; k++) {
                gp_task *t = malloc(sizeof(*t));
                if (!t || gp_task_copy(t, tpl) < 0) {
                        free(t);
                        goto undo;
                }
                t->id = d->next_id + (int64_t)k;
                t->array_id = d->next_id;
                t->array_index = spec_in->idx[k];
                t->array_limit = spec_in->limit;
                r = sched_req(t);
                if (gp_sched_enqueue(d->sched, &r) < 0 || gp_i64map_put(&d->tasks, t->id, t) < 0) {
                        gp_sched_remove(d->sched, t->id);
                        gp_task_done(t);
                        free(t);
                        goto undo;
                }
                ts[k] = t;
        }
        for (k = 0; k < n; k++)
                mark(b, ts[k]);
        int64_t first = d->next_id;
        d->next_id += (int64_t)n;
        d->submitted_total += n;
        for (k = 0; k < n; k++)
                gp_monitor_task_submitted(d->mon, tpl->tenant);
        char spec[256];
        gp_array_spec_format(spec_in->idx, n, spec_in->limit, spec, sizeof(spec));
        gp_buf out;
        gp_buf_init(&out, 0);
        int r2 = gp_buf_printf(&out, "{\"array_id\":%" PRId64, first);
        r2 = r2 ? r2 : gp_buf_json_field_str(&out, "tenant_id", tpl->tenant);
        r2 = r2 ? r2 : gp_buf_json_field_str(&out, "name", tpl->name);
        r2 = r2 ? r2 : gp_buf_json_field_str(&out, "array", spec);
        r2 = r2 ? r2 : gp_buf_printf(&out, ",\"count\":%zu,\"limit\":%d,\"first_task_id\":%" PRId64
                                          ",\"last_task_id\":%" PRId64 ",\"backend\":\"%s\"}",
                                     n, spec_in->limit, first, first + (int64_t)n - 1, d->backend);
        if (r2 < 0) {
                gp_buf_done(&out);
                o->status = 201;
                o->task = ts[0]; /* stored all the same: answer with the first element */
        } else {
                o->status = 201;
                o->body = gp_buf_steal(&out);
        }
        free(ts);
        gp_info("array %" PRId64 ": %zu tasks (%s) for tenant %s", first, n, spec, tpl->tenant);
        return;
undo:
        while (k-- > 0) {
                gp_i64map_del(&d->tasks, ts[k]->id);
                gp_sched_remove(d->sched, ts[k]->id);
                gp_task_done(ts[k]);
                free(ts[k]);
        }
        free(ts);
oom:
        gp_monitor_submit_rejected(d->mon, "other");
        o->status = 503;
        o->body = gp_http_error_body("unavailable", "out of memory (none of the array was queued)");
}

/* Cancel every active element of an array (array_index -1) or one.  The
 * answer counts what ended now and what is stopping. */
static void apply_array_cancel(gp_daemon *d, batch *b, cmd *c, int64_t now, outcome *o) {
        size_t pos = 0, nended = 0, nstopping = 0, nseen = 0;
        gp_task *t;
        gp_task **hit = NULL;
        size_t nhit = 0, caphit = 0;
        while ((t = gp_i64map_next(&d->tasks, &pos, NULL))) {
                if (t->array_id != c->op.id || !op_owns(&c->op, t))
                        continue;
                nseen++;
                if (c->op.array_index >= 0 && t->array_index != c->op.array_index)
                        continue;
                /* collected first: finishing a task changes the map being walked */
                if (push_ptr(&hit, &nhit, &caphit, t) < 0) {
                        free(hit);
                        o->status = 503;
                        o->body = gp_http_error_body("unavailable", "out of memory");
                        return;
                }
        }
        for (size_t i = 0; i < nhit; i++) {
                if (cancel_task(d, b, hit[i], now))
                        nended++;
                else
                        nstopping++;
        }
        free(hit);
        if (nseen == 0) {
                /* nothing active: an array that has ended (cancel is
                 * idempotent: 200), or none, or another tenant's (404);
                 * its first element's id is the array's id */
                gp_task first;
                bool found = gp_daemon_task_lookup(d, c->op.id, &first) == 0;
                bool ok = found && first.array_id == c->op.id && op_owns(&c->op, &first);
                if (found)
                        gp_task_done(&first);
                if (!ok) {
                        o->status = 404;
                        o->body = gp_http_error_body("not_found", "no array %" PRId64, c->op.id);
                        return;
                }
        }
        o->status = 200;
        gp_buf out;
        gp_buf_init(&out, 0);
        if (gp_buf_printf(&out, "{\"array_id\":%" PRId64 ",\"cancelled\":%zu,\"stopping\":%zu}", c->op.id, nended,
                          nstopping) < 0) {
                gp_buf_done(&out);
                o->status = 503;
                o->body = gp_http_error_body("unavailable", "out of memory");
                return;
        }
        o->body = gp_buf_steal(&out);
}

static void apply_release(gp_daemon *d, batch *b, cmd *c, int64_t now, outcome *o) {
        gp_task *t = active_for(d, &c->op);
        if (!t) {
                o->lookup_id = c->op.id;
                return;
        }
        if (!t->is_lease) {
                o->status = 409;
                o->body = gp_http_error_body("conflict", "task %" PRId64 " is a batch task, not a lease; cancel it instead",
                                             t->id);
                return;
        }
        o->task = t;
        if (t->state == GP_TASK_QUEUED && !t->preempt_deadline_ms) {
                set_reason(t, "released before it started");
                finish(d, b, t, GP_TASK_CANCELLED, now);
                return;
        }
        t->has_exit_code = c->op.has_exit_code;
        t->exit_code = c->op.exit_code;
        if (c->op.has_exit_code && c->op.exit_code != 0) {
                set_reason(t, "released by the holder with exit code %d%s", c->op.exit_code,
                           t->preempt_deadline_ms ? " after it was preempted" : "");
                finish(d, b, t, GP_TASK_FAILED, now);
        } else {
                set_reason(t, "released by the holder%s", t->preempt_deadline_ms ? " after it was preempted" : "");
                finish(d, b, t, GP_TASK_SUCCEEDED, now);
        }
}

static void apply_heartbeat(gp_daemon *d, cmd *c, int64_t now, outcome *o) {
        gp_task *t = active_for(d, &c->op);
        if (!t) {
                o->lookup_id = c->op.id;
                o->status = 409; /* a final lease cannot be kept alive */
                return;
        }
        if (t->preempt_deadline_ms) {
                o->task = t; /* 200 with state "preempting" and its deadline: let go before it */
                return;
        }
        if (!t->is_lease || t->state != GP_TASK_RUNNING) {
                o->status = 409;
                o->body = gp_http_error_body("conflict",
                                             t->is_lease ? "lease %" PRId64 " is still queued; heartbeat once it runs"
                                                         : "task %" PRId64 " is a batch task, not a lease",
                                             t->id);
                return;
        }
        t->heartbeat_ms = now; /* not a state change: not stored (restart grants a full TTL) */
        o->task = t;
}

static void apply_drain(gp_daemon *d, batch *b, cmd *c, outcome *o) {
        gp_sched_gpu_set_drained(d->sched, c->gpu.gpu, c->kind == CMD_DRAIN);
        b->meta_drained = true;
        o->status = 200;
}


static void apply_gpu_failed(gp_daemon *d, batch *b, cmd *c, int64_t now) {
        int64_t ids[256];
        int n = gp_sched_gpu_tasks(d->sched, c->gpu.gpu, ids, 256);
        gp_sched_gpu_view v;
        gp_sched_gpu_get(d->sched, c->gpu.gpu, &v);
        char why[GP_REASON_MAX];
        if (snprintf(why, sizeof(why), "GPU %s:%d failed: %s", v.node, v.index, c->gpu.why) >= (int)sizeof(why))
                why[sizeof(why) - 2] = '.'; /* truncated: the log line above has it whole */
        for (int i = 0; i < n && i < 256; i++) {
                gp_task *t = gp_i64map_get(&d->tasks, ids[i]);
                if (!t || t->state != GP_TASK_RUNNING)
                        continue;
                gp_warn("task %" PRId64 " was on %s", t->id, why);
                if (t->is_lease) {
                        requeue_or_fail(d, b, t, why, now);
                        continue;
                }
                /* stop the process; its supervisor's report requeues it */
                char *w = strdup(why);
                if (w && gp_i64map_put(&d->requeue, t->id, w) < 0)
                        free(w);
                gp_exec_proc p = {t->sup_pid, t->sup_start};
                gp_exec_cancel(&p);
                set_reason(t, "stopping: %s", why);
        }
}

/* The watchdog stops t: its processes stayed over its memory_mb on one of
 * its GPUs for gpus.watchdog_grace_s (nodes-tele.c). */
static void forget_ranks(gp_daemon *d, int64_t id);
static void apply_mem_exceeded(gp_daemon *d, batch *b, cmd *c, int64_t now) {
        gp_task *t = gp_i64map_get(&d->tasks, c->op.id);
        if (!t || t->state != GP_TASK_RUNNING || t->is_lease || t->wd_over_ms != -1 ||
            gp_i64map_get(&d->requeue, t->id))
                return; /* ended, requeued or already stopping meanwhile */
        char why[GP_REASON_MAX];
        snprintf(why, sizeof(why), "memory_exceeded: used %" PRId64 " MB of %" PRId64 " on one of its GPUs",
                 t->gpu_mem_max_gpu_mb, t->memory_mb);
        gp_warn("task %" PRId64 ": %s: stopping it", t->id, why);
        gp_monitor_watchdog(d->mon, true);
        if (gp_nodes_remote(t)) { /* its runs are stopped; nothing starts there before they ended */
                forget_ranks(d, t->id);
                gp_nodes_stop(d, t, GP_PROTO_STOP_STALE);
                requeue_oom(d, b, t, why, now);
                return;
        }
        char *w = strdup(why); /* its supervisor's report requeues it */
        if (!w || gp_i64map_put(&d->requeue, t->id, w) < 0 || gp_i64map_put(&d->oom, t->id, (void *)1) < 0) {
                free(gp_i64map_del(&d->requeue, t->id));
                t->wd_over_ms = 0; /* out of memory: the next sample tries again */
                return;
        }
        gp_exec_proc p = {t->sup_pid, t->sup_start};
        gp_exec_cancel(&p);
        set_reason(t, "stopping: %s", why);
}

/* ------------------------------------------------------------------ */
/* supervisors                                                         */

/* A supervisor known to be gone already (no pidfd to wait on): the next
 * loop pass reads its result.  Loop thread (or start-up) only. */
void gone_add(gp_daemon *d, int64_t id) {
        grow_ids(&d->gone, d->ngone, &d->capgone);
        d->gone[d->ngone++] = id;
        uint64_t one = 1;
        ssize_t w = write(d->evfd, &one, sizeof(one));
        (void)w;
}

void watch_add(gp_daemon *d, gp_task *t) {
        gp_exec_proc p = {t->sup_pid, t->sup_start};
        int fd;
        if (gp_exec_watch(&p, &fd) < 0) {
                gone_add(d, t->id); /* already gone: handled as an exit */
                return;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)t->id};
        epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev);
        gp_i64map_put(&d->watch, t->id, (void *)(intptr_t)(fd + 1));
}

/* Done with a supervisor's pidfd: reap it if it is our child and has
 * ended; one of ours still running goes to the spawner thread, which reaps
 * it when it ends (no zombies).  Under lock or before the threads run. */
void pidfd_done(gp_daemon *d, int fd) {
        epoll_ctl(d->epfd, EPOLL_CTL_DEL, fd, NULL);
        if (gp_exec_reap(fd) != 0) {
                close(fd);
                return;
        }
        pthread_mutex_lock(&d->sp_lock);
        d->strays = grow_or_exit(d->strays, &d->capstrays, d->nstrays + 1, sizeof(*d->strays));
        d->strays[d->nstrays++] = fd;
        pthread_cond_signal(&d->sp_cond);
        pthread_mutex_unlock(&d->sp_lock);
}

static void watch_del(gp_daemon *d, int64_t id) {
        intptr_t v = (intptr_t)gp_i64map_del(&d->watch, id);
        if (v > 0)
                pidfd_done(d, (int)(v - 1));
}

/* A running task lost its GPU (or its GPU left the pool): back to the
 * queue while it has retries left, else failed with the reason. */
static void requeue_mem(gp_daemon *d, batch *b, gp_task *t, const char *why, int64_t now, int64_t memory_mb) {
        /* the run ends here, not by the tenant's doing: no minimum period */
        gp_history_run_end(d, t, "requeued", why, now); /* "failed" if finish() follows */
        gp_billing_run_end(d, t, now, GP_BILL_RUN_END, gp_now_ms());
        gp_sched_remove_at(d->sched, t->id, now); /* -ENOENT during recovery: not placed */
        gp_i64map_del(&d->leases, t->id);
        free(t->gpus);
        t->gpus = NULL;
        t->n_gpus = 0;
        t->wd_over_ms = 0;
        if (t->retries < t->max_retries) {
                char more[GP_REASON_MAX];
                if (memory_mb > t->memory_mb) { /* billed from the next run on (its run end used the old) */
                        snprintf(more, sizeof(more), "%s; it asks %" PRId64 " MB now (was %" PRId64 ")", why,
                                 memory_mb, t->memory_mb);
                        t->memory_mb = memory_mb;
                        why = more;
                }
                t->retries++;
                t->state = GP_TASK_QUEUED;
                t->started_ms = 0;
                t->sup_pid = t->sup_start = 0;
                set_reason(t, "requeued (retry %d of %d): %s", t->retries, t->max_retries, why);
                gp_runlog_requeued(d, t); /* its next run's log says why it began */
                gp_sched_req r = sched_req(t);
                r.readmit = true; /* accepted once: max_queued does not apply again */
                if (gp_sched_enqueue(d->sched, &r) == 0) {
                        gp_monitor_task_requeued(d->mon);
                        mark(b, t);
                        return;
                }
        }
        set_reason(t, "%s", why);
        t->state = GP_TASK_RUNNING; /* finish() expects it to be known */
        finish(d, b, t, GP_TASK_FAILED, now);
}

void requeue_or_fail(gp_daemon *d, batch *b, gp_task *t, const char *why, int64_t now) {
        requeue_mem(d, b, t, why, now, 0);
}

void requeue_oom(gp_daemon *d, batch *b, gp_task *t, const char *why, int64_t now) {
        int64_t more = t->memory_mb > 0 ? (t->memory_mb * d->cfg.oom_retry_permille + 999) / 1000 : 0;
        requeue_mem(d, b, t, why, now, more);
}

static void end_with_result(gp_daemon *d, batch *b, gp_task *t, const gp_exec_result *res, int64_t now);

/* The supervisor of t is gone: read how the task ended. */
static void apply_exit(gp_daemon *d, batch *b, gp_task *t, int64_t now) {
        char dir[PATH_MAX];
        task_dir(d, t->id, dir, sizeof(dir));
        watch_del(d, t->id);
        char *why = gp_i64map_del(&d->requeue, t->id);
        bool oom = gp_i64map_del(&d->oom, t->id) != NULL;
        if (why) {
                /* stopped by us because its GPU failed, or the watchdog stopped it */
                if (oom)
                        requeue_oom(d, b, t, why, now);
                else
                        requeue_or_fail(d, b, t, why, now);
                free(why);
                return;
        }
        gp_exec_result res;
        gp_exec_proc other;
        if (gp_exec_read_result(dir, &res) < 0 && gp_exec_read_pidfile(dir, &other) == 0 &&
            (other.pid != t->sup_pid || other.start != t->sup_start)) {
                /* ours left without running it: a supervisor started before
                 * a crash owns this start (exec.md); follow that one */
                t->sup_pid = other.pid;
                t->sup_start = other.start;
                watch_add(d, t);
                return;
        }
        if (gp_exec_read_result(dir, &res) < 0) {
                set_reason(t, "its supervisor ended without recording a result");
                gp_cgroup_reap(t->id, t->sup_pid); /* what it left in its cgroup (exec/cgroup.h) */
                finish(d, b, t, GP_TASK_LOST, now);
                return;
        }
        end_with_result(d, b, t, &res, now);
}

/* t ended as res says (its supervisor's result.json, or its agent's
 * report). */
static void end_with_result(gp_daemon *d, batch *b, gp_task *t, const gp_exec_result *rp, int64_t now) {
        gp_exec_result res = *rp;
        const char *what;
        if ((res.end == GP_EXEC_EXITED || res.end == GP_EXEC_SIGNALED) && res.exit_code != 0 && t->memory_mb > 0 &&
            !t->is_lease && gp_runlog_says_oom(d, t, &what)) {
                /* a share of a GPU that was too small: again with more, while it has retries */
                char why[GP_REASON_MAX];
                snprintf(why, sizeof(why), "gpu_out_of_memory: its output says \"%s\" (%.100s)", what, res.message);
                gp_warn("task %" PRId64 ": %s", t->id, why);
                t->has_exit_code = true;
                t->exit_code = res.exit_code;
                requeue_oom(d, b, t, why, now);
                return;
        }
        gp_strlcpy(t->reason, res.message, sizeof(t->reason));
        t->has_exit_code = true;
        t->exit_code = res.exit_code;
        int64_t at = res.finished_ms > 0 ? res.finished_ms : now;
        switch (res.end) {
        case GP_EXEC_EXITED:
                finish(d, b, t, res.exit_code == 0 ? GP_TASK_SUCCEEDED : GP_TASK_FAILED, at);
                break;
        case GP_EXEC_TIMEOUT:
                finish(d, b, t, GP_TASK_TIMEOUT, at);
                break;
        case GP_EXEC_CANCELLED:
                finish(d, b, t, GP_TASK_CANCELLED, at);
                break;
        case GP_EXEC_SIGNALED:
        case GP_EXEC_SPAWN_FAILED:
        default:
                finish(d, b, t, GP_TASK_FAILED, at);
                break;
        }
}

/* ---- tasks on agent nodes (nodes.h) ---- */

/* The ranks of a multi-node task that ended well, while others run
 * (memory only: an agent repeats an end until the task's end is stored). */
typedef struct rank_set {
        int n, done;
        unsigned char bit[];
} rank_set;

static int task_nnodes(const gp_task *t) {
        int k = 0;
        for (int i = 0; i < t->n_gpus; i++)
                if (i == 0 || strcmp(t->gpus[i - 1].node, t->gpus[i].node))
                        k++;
        return k;
}

static void forget_ranks(gp_daemon *d, int64_t id) {
        free(gp_i64map_del(&d->ranks, id));
}

/* A current run of t on an agent node ended.  One node: the task ends
 * with it.  Several: a failure ends the task at once (the other ranks are
 * stopped); a success waits for every rank. */
static void remote_run_ended(gp_daemon *d, batch *b, gp_task *t, int rank, const gp_exec_result *res, int64_t now) {
        int nn = task_nnodes(t);
        bool ok = res->end == GP_EXEC_EXITED && res->exit_code == 0;
        if (nn > 1 && ok) {
                rank_set *rs = gp_i64map_get(&d->ranks, t->id);
                if (!rs) {
                        rs = calloc(1, sizeof(*rs) + (size_t)(nn + 7) / 8);
                        if (!rs || gp_i64map_put(&d->ranks, t->id, rs) < 0) {
                                gp_error("out of memory; stopping");
                                _exit(70);
                        }
                        rs->n = nn;
                }
                if (rank >= 0 && rank < rs->n && !(rs->bit[rank / 8] & (1u << (rank % 8)))) {
                        rs->bit[rank / 8] |= (unsigned char)(1u << (rank % 8));
                        rs->done++;
                }
                if (rs->done < rs->n)
                        return;
        } else if (nn > 1) {
                gp_nodes_stop(d, t, GP_PROTO_STOP_STALE); /* the other ranks: the task has ended */
        }
        forget_ranks(d, t->id);
        end_with_result(d, b, t, res, now);
}

/* What the node registry found out about tasks: runs that ended, nodes
 * and runs that were lost. */
static void apply_node_events(gp_daemon *d, batch *b, int64_t now) {
        size_t n;
        const gp_node_ev *ev = gp_nodes_events(d, &n);
        for (size_t i = 0; i < n; i++) {
                gp_task *t = gp_i64map_get(&d->tasks, ev[i].task);
                if (!t || t->state != GP_TASK_RUNNING)
                        continue;
                if (ev[i].kind == GP_NODE_EV_RUN_ENDED) {
                        remote_run_ended(d, b, t, ev[i].rank, &ev[i].result, now);
                        continue;
                }
                gp_warn("task %" PRId64 ": %s", t->id, ev[i].why);
                forget_ranks(d, t->id);
                if (t->is_lease) {
                        set_reason(t, "%s", ev[i].why);
                        finish(d, b, t, GP_TASK_LOST, now);
                        continue;
                }
                gp_nodes_stop(d, t, GP_PROTO_STOP_STALE); /* its runs on the other nodes */
                requeue_or_fail(d, b, t, ev[i].why, now);
        }
        gp_nodes_events_clear(d);
}


/* Build the argv/env of a batch task from its spec and start its
 * supervisor (gp_exec_launch).  t is the spawner's own copy: no lock. */
int spawn(gp_daemon *d, const gp_task *t, unsigned flags, gp_exec_proc *ret) {
        json_t *spec = json_loads(t->spec ? t->spec : "", 0, NULL);
        if (!spec)
                return -EINVAL;
        json_t *cmdv = json_object_get(spec, "command"), *env = json_object_get(spec, "env");
        json_t *wd = json_object_get(spec, "workdir");
        size_t n = json_array_size(cmdv);
        const char **argv = calloc(n + 1, sizeof(char *));
        size_t nenv = json_object_size(env);
        const char **envv = calloc(nenv + 4 + GP_MPS_ENV_MAX, sizeof(char *));
        char **envs = calloc(nenv + 4, sizeof(char *));
        int rc = -ENOMEM;
        if (!argv || !envv || !envs || n == 0)
                goto out;
        for (size_t i = 0; i < n; i++)
                argv[i] = json_string_value(json_array_get(cmdv, i));
        const char *k;
        json_t *v;
        size_t ei = 0;
        json_object_foreach(env, k, v) {
                if (asprintf(&envs[ei], "%s=%s", k, json_string_value(v)) < 0)
                        goto out;
                envv[ei] = envs[ei];
                ei++;
        }
        envs[ei] = strdup("CUDA_DEVICE_ORDER=PCI_BUS_ID");
        if (!envs[ei])
                goto out;
        envv[ei] = envs[ei];
        /* earlier runs of the task: a restarted one resumes from its checkpoint */
        if (asprintf(&envs[++ei], "GPUPOOL_RESTART_COUNT=%" PRId64, gp_task_run_epoch(t) - 1) < 0) {
                envs[ei] = NULL;
                goto out;
        }
        envv[ei] = envs[ei];
        char dir[PATH_MAX];
        task_dir(d, t->id, dir, sizeof(dir));
        if (t->elastic_max_gpus > 0) {
                /* the allocation file exists before the task does */
                char *js = gp_alloc_json(t);
                rc = js ? gp_exec_write_alloc(dir, js, strlen(js)) : -ENOMEM;
                free(js);
                if (rc < 0)
                        goto out;
                rc = -ENOMEM;
                if (asprintf(&envs[ei + 1], "GPUPOOL_ALLOC_FILE=%s/alloc.json", dir) < 0) {
                        envs[ei + 1] = NULL;
                        goto out;
                }
                envv[ei + 1] = envs[ei + 1];
        }
        char cvd[GP_MAX_GPUS * 8], gpus[GP_MAX_GPUS * (GP_NODE_MAX + 8)], logn[GP_RUNLOG_NAME_MAX];
        if ((rc = gp_runlog_name(gp_task_run_epoch(t), 0, logn, sizeof(logn))) < 0) /* one log per run */
                goto out;
        cuda_devices(t, cvd, sizeof(cvd));
        gp_mps_client mc; /* an MPS client: its GPU's daemon runs, its variables come last (they win) */
        int mps = gp_mps_client_prepare(d, t, &mc);
        if ((rc = mps) < 0)
                goto out;
        for (size_t j = 0, e = 0; j < GP_MPS_ENV_MAX && mps; j++) {
                while (envv[e])
                        e++;
                envv[e] = mc.env[j];
        }
        size_t off = 0;
        gpus[0] = '\0';
        for (int i = 0; i < t->n_gpus; i++)
                off += (size_t)snprintf(gpus + off, sizeof(gpus) - off, "%s%s:%d", i ? "," : "", t->gpus[i].node,
                                        t->gpus[i].index);
        gp_exec_spec es = {
                .task_id = t->id, .argv = argv, .env = envv, .workdir = json_string_value(wd),
                .array_id = t->array_id, .array_index = t->array_index,
                .cuda_visible_devices = mps ? mc.cuda_visible_devices : cvd, .gpus = gpus, .timeout_s = t->timeout_s,
                .kill_grace_s = d->cfg.kill_grace_s, .max_log_bytes = d->cfg.max_log_bytes, .log_name = logn,
                .preempt_grace_s = d->cfg.preemption_grace_sec, .notify_signal = d->cfg.elastic_signal,
                .run_as = t->user[0] ? gp_peer_run_as(t->user) : gp_tenants_run_as(d->tenants, t->tenant),
                .clean_env = json_is_true(json_object_get(spec, "clean_env")),
                .notice = gp_notice_of_spec(spec, d->cfg.preemption_max_notice_s),
        };
        if (gp_cgroup_limits_get(spec, &es.limits) < 0) /* checked at submit */
                es.limits = (gp_cgroup_limits){0};
        rc = gp_exec_launch(d->self_exe, dir, &es, flags, ret);
out:
        if (envs)
                for (size_t i = 0; i < nenv + 4; i++)
                        free(envs[i]);
        free(envs);
        free(envv);
        free(argv);
        json_decref(spec);
        return rc;
}

/* ------------------------------------------------------------------ */
/* scheduling                                                          */

/* The core preempted running task t and queued it again (its GPUs went to
 * a more urgent task, or back to their guarantee's owner).  A batch task
 * is stopped by its supervisor (SIGTERM, SIGKILL after
 * preemption.grace_sec); a lease shows state "preempting" with a deadline
 * grace_sec away (heartbeats answer 200 with it) and is lost when the
 * holder releases it or the deadline passes.  Until every such run has let
 * go, no batch task is started (so two processes never share the GPUs).
 * What is stored is the truth after the grace: queued again.  Its run is
 * metered up to now (the grace is not billed). */
static void preempt(gp_daemon *d, batch *b, gp_task *t, int64_t now) {
        if (!t->is_lease && gp_nodes_remote(t)) /* its agents stop the run of this epoch */
                gp_nodes_stop(d, t, GP_PROTO_STOP_PREEMPT);
        gp_i64map_del(&d->ranks, t->id);
        gp_history_run_end(d, t, "preempted", "its GPUs went to a more urgent task or back to their guarantee", now);
        gp_billing_run_end(d, t, now, GP_BILL_RUN_END, gp_now_ms());
        t->preempt_count++;
        gp_monitor_task_preempted(d->mon); /* gpupool_tasks_preempted_total */
        t->state = GP_TASK_QUEUED;
        t->started_ms = 0;
        free(t->gpus);
        t->gpus = NULL;
        t->n_gpus = 0;
        set_reason(t, "preempted (%d time%s): its GPUs went to a more urgent task or back to their guarantee",
                   t->preempt_count, t->preempt_count > 1 ? "s" : "");
        gp_runlog_requeued(d, t);
        gp_i64map_del(&d->leases, t->id);
        if (t->is_lease && d->cfg.preemption_grace_sec > 0) {
                t->preempt_deadline_ms = now + (int64_t)d->cfg.preemption_grace_sec * 1000;
                if (gp_i64map_put(&d->lpreempting, t->id, t) < 0) {
                        gp_error("out of memory; stopping");
                        _exit(70);
                }
        }
        if (!t->is_lease) {
                void *w = gp_i64map_del(&d->watch, t->id);
                gp_exec_proc p = {t->sup_pid, t->sup_start};
                if (w && gp_exec_preempt(&p) == 0 && gp_i64map_put(&d->draining, t->id, w) == 0) {
                        d->ndraining++;
                } else if (w) {
                        pidfd_done(d, (int)((intptr_t)w - 1));
                }
                t->sup_pid = t->sup_start = 0;
        }
        mark(b, t);
        gp_info("task %" PRId64 " preempted (preempt_count %d)", t->id, t->preempt_count);
}

/* A preempted run's supervisor is gone: nothing to record (the task is
 * queued again); when nothing drains any more, deferred starts go. */
static bool drained(gp_daemon *d, int64_t id) {
        intptr_t v = (intptr_t)gp_i64map_del(&d->draining, id);
        if (v <= 0)
                return false;
        pidfd_done(d, (int)(v - 1));
        d->ndraining--;
        return true;
}

/* t's GPUs are now those of decision dec. */
static void set_gpus(gp_daemon *d, gp_task *t, const gp_sched_decision *dec) {
        gp_task_gpu *g = calloc((size_t)dec->n_gpus, sizeof(*g));
        if (!g) {
                gp_error("out of memory placing task %" PRId64 "; stopping", t->id);
                _exit(70);
        }
        for (int j = 0; j < dec->n_gpus; j++) {
                gp_sched_gpu_view v;
                gp_sched_gpu_get(d->sched, dec->gpus[j], &v);
                gp_strlcpy(g[j].node, v.node, sizeof(g[j].node));
                g[j].index = v.index;
                gp_strlcpy(g[j].uuid, v.uuid, sizeof(g[j].uuid));
        }
        free(t->gpus);
        t->gpus = g;
        t->n_gpus = dec->n_gpus;
}

/* An elastic task grew or shrank.  The new set is stored with this batch;
 * a lease holder sees it in the task and the heartbeat answer; a batch
 * task gets alloc.json and its signal after the commit. */
static void resize(gp_daemon *d, batch *b, gp_task *t, const gp_sched_decision *dec, int64_t now) {
        int old = t->n_gpus;
        gp_task_gpu *was = t->elastic_max_nodes > 0 && gp_nodes_remote(t) ? t->gpus : NULL;
        if (was)
                t->gpus = NULL; /* kept, to stop the ranks on the nodes it gave up */
        set_gpus(d, t, dec);
        if (was)
                gp_nodes_gave_up(d, t, was, old);
        free(was);
        gp_billing_run_resize(d, t, now); /* metered at each share for its own time */
        mark(b, t);
        gp_info("task %" PRId64 " resized from %d to %d GPUs", t->id, old, t->n_gpus);
        if (t->is_lease)
                return;
        grow_ids(&d->resized, d->nresized, &d->capresized);
        d->resized[d->nresized++] = t->id;
}

/* The leases whose grace period ended without a release: lost. */
static void expire_preempting(gp_daemon *d, batch *b, int64_t now) {
        size_t pos = 0;
        gp_task *t;
        while ((t = gp_i64map_next(&d->lpreempting, &pos, NULL))) {
                if (t->preempt_deadline_ms > now)
                        continue;
                lease_let_go(d, t);
                set_reason(t, "preempted (%d time%s): the lease was lost after the %d s grace period",
                           t->preempt_count, t->preempt_count > 1 ? "s" : "", d->cfg.preemption_grace_sec);
                mark(b, t);
        }
}

static void apply_decisions(gp_daemon *d, batch *b, int64_t now) {
        gp_sched_decision *dec = NULL;
        size_t n = 0, cap = 0;
        int64_t t0 = gp_monitor_now_ns();
        if (gp_sched_run(d->sched, now, &dec, &n, &cap) < 0)
                gp_warn("scheduler ran out of memory; %zu decisions kept", n);
        gp_monitor_sched_pass(d->mon, gp_monitor_now_ns() - t0, n);
        for (size_t i = 0; i < n; i++) {
                gp_task *t = gp_i64map_get(&d->tasks, dec[i].id);
                if (!t)
                        continue;
                if (dec[i].kind == GP_DECIDE_EXPIRE) {
                        set_reason(t, "waited longer than queue_timeout_s (%" PRId64 " s)", t->queue_timeout_s);
                        /* the scheduler already forgot it; finish() removing again is harmless */
                        finish(d, b, t, GP_TASK_TIMEOUT, now);
                        continue;
                }
                if (dec[i].kind == GP_DECIDE_PREEMPT) {
                        preempt(d, b, t, now);
                        continue;
                }
                if (dec[i].kind == GP_DECIDE_RESIZE) {
                        resize(d, b, t, &dec[i], now);
                        continue;
                }
                if (dec[i].kind != GP_DECIDE_START)
                        continue;
                set_gpus(d, t, &dec[i]);
                lease_let_go(d, t);
                t->state = GP_TASK_RUNNING;
                t->started_ms = now;
                t->heartbeat_ms = now;
                t->reason[0] = '\0';
                gp_est_started(d, t, now); /* how right its expected start was */
                gp_billing_run_start(d, t);
                gp_history_run_start(d, t);
                gp_monitor_task_started(d->mon, t->tenant, t->priority, now - t->submitted_ms, dec[i].backfilled);
                t->borrowing = dec[i].borrowing;
                if (dec[i].borrowing)
                        set_reason(t, "borrowing: %sstarted on GPUs guaranteed to other tenants, who may take "
                                      "them back (it is preempted then, like a preemptible task)",
                                   dec[i].backfilled ? "started by backfill; " : "");
                else if (dec[i].backfilled)
                        set_reason(t, "started by backfill");
                mark(b, t);
                if (t->is_lease && gp_i64map_put(&d->leases, t->id, t) < 0) {
                        gp_error("out of memory; stopping");
                        _exit(70);
                }
                if (!t->is_lease && push_ptr(&b->spawn, &b->nspawn, &b->capspawn, t) < 0) {
                        gp_error("out of memory; stopping");
                        _exit(70);
                }
        }
        free(dec);
}

static void expire_leases(gp_daemon *d, batch *b, int64_t now) {
        size_t pos = 0;
        gp_task *t;
        /* finish() deletes from d->leases while we walk it: a deletion only
         * marks the slot, so the walk stays valid */
        while ((t = gp_i64map_next(&d->leases, &pos, NULL))) {
                if (t->heartbeat_ms + t->lease_ttl_s * 1000 <= now) {
                        set_reason(t, "lease expired: no heartbeat for %" PRId64 " s", t->lease_ttl_s);
                        finish(d, b, t, GP_TASK_LOST, now);
                } else if (t->timeout_s > 0 && t->started_ms + t->timeout_s * 1000 <= now) {
                        set_reason(t, "lease held longer than timeout_s (%" PRId64 " s)", t->timeout_s);
                        finish(d, b, t, GP_TASK_TIMEOUT, now);
                }
        }
}

/* ------------------------------------------------------------------ */
/* the loop                                                            */

static char *render_task(gp_daemon *d, const gp_task *t) {
        gp_buf b;
        gp_buf_init(&b, 0);
        if (gp_daemon_task_write(d, t, &b) < 0) {
                gp_buf_done(&b);
                return NULL;
        }
        return gp_buf_steal(&b);
}

static char *render_gpu(gp_daemon *d, uint32_t g);

/* The answer of c (not an agent's sync) as o->status and o->body, from
 * what the batch applied (d->lock held).  Made before the batch's commit
 * for a request with an Idempotency-Key (its answer is stored with it),
 * else after; nothing changes in between, so both show the same. */
static void render(gp_daemon *d, cmd *c, outcome *o) {
        if (o->body)
                return;
        if (c->kind == CMD_DRAIN || c->kind == CMD_UNDRAIN) {
                o->status = 200;
                o->body = render_gpu(d, c->gpu.gpu);
                return;
        }
        if (o->task) {
                o->status = o->status ? o->status : 200;
                o->body = render_task(d, o->task);
                return;
        }
        /* a task command (cmd_op) whose task is final or unknown */
        gp_task t;
        int rc = gp_daemon_task_lookup(d, o->lookup_id, &t);
        if (rc < 0 || !op_owns(&c->op, &t)) {
                if (rc == 0)
                        gp_task_done(&t);
                o->status = 404;
                o->body = gp_http_error_body("not_found", "no task %" PRId64, o->lookup_id);
                return;
        }
        if (o->status == 409 && c->kind == CMD_HEARTBEAT) {
                o->body = gp_http_error_body("conflict", "lease %" PRId64 " is %s: %s", t.id,
                                             gp_task_state_name(t.state), t.reason);
        } else {
                o->status = 200;
                o->body = render_task(d, &t);
        }
        gp_task_done(&t);
}

/* Render the answer of c now (d->lock held); it goes out once generation
 * gen (what it shows) is durable. */
static void answer(gp_daemon *d, uint64_t gen, cmd *c, outcome *o) {
        if (!c->req)
                return;
        if (c->kind == CMD_NODE && c->node->op == GP_NODE_OP_SYNC) {
                int status;
                char *body;
                if (gp_nodes_answer(d, c->node, c->req, &status, &body))
                        gp_commit_answer(d, gen, c->req, body ? status : 503, body, body ? 0 : 1);
                return;
        }
        render(d, c, o);
        c->req->ctype = o->ctype;
        gp_commit_answer(d, gen, c->req, o->status, o->body, o->retry_after);
        o->body = NULL;
}

static char *render_gpu(gp_daemon *d, uint32_t g) {
        json_t *j = gp_http_gpu_json(d, g);
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return s;
}

void gp_daemon_waiter_add(gp_daemon *d, hreq *r) {
        r->waiting = true;
        gp_list_add_head(&d->waiters, &r->wlink);
}

void gp_daemon_waiter_del(gp_daemon *d, hreq *r) {
        if (!r->waiting)
                return;
        gp_list_del(&r->wlink);
        r->waiting = false;
}

static void wake_waiters(gp_daemon *d, int64_t now) {
        GP_LIST_FOR_EACH_SAFE(l, &d->waiters) {
                hreq *r = GP_LIST_ENTRY(l, hreq, wlink);
                gp_task *t = gp_i64map_get(&d->tasks, r->wait_id);
                if (!t || t->state != GP_TASK_QUEUED || now >= r->wait_until_ms) {
                        gp_daemon_waiter_del(d, r);
                        gp_http_wake(r);
                }
        }
}

static void wake_followers(gp_daemon *d) {
        gp_list *l;
        while ((l = gp_list_first(&d->followers))) {
                hreq *r = GP_LIST_ENTRY(l, hreq, wlink);
                gp_list_del(l);
                r->following = false;
                gp_http_wake(r);
        }
}

void free_final(gp_daemon *d, batch *b) {
        for (size_t i = 0; i < b->ndirty; i++) {
                gp_task *t = b->dirty[i];
                if (!gp_task_state_is_final(t->state))
                        continue;
                gp_i64map_del(&d->tasks, t->id);
                watch_del(d, t->id);
                gp_task_done(t);
                free(t);
        }
}

/* A commit of the leader's writer found its term taken over (store.h
 * gp_store_set_fence): nothing of it was stored; stop at once, before
 * anything more is answered or started.  systemd restarts us as a follower. */
void lost_the_lead(void *ud) {
        (void)ud;
        gp_error("lost the lead (epoch %" PRId64 "): stepping down", lead_epoch);
        _exit(75);
}

/* gp_mono_ms until which the lease surely holds (server.c sets it at each
 * renewal: the database's expiry is later still); 0 = no lease. */
static int64_t lead_until;

void gp_daemon_lead_until(int64_t mono_ms) {
        __atomic_store_n(&lead_until, mono_ms, __ATOMIC_RELEASE);
}

static bool deposed;
static char deposed_why[256]; /* written once, before deposed is set */

void gp_daemon_depose(const char *why) {
        static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&mu);
        if (!__atomic_load_n(&deposed, __ATOMIC_ACQUIRE)) {
                gp_strlcpy(deposed_why, why, sizeof(deposed_why));
                __atomic_store_n(&deposed, true, __ATOMIC_RELEASE);
                gp_error("lost the lead (epoch %" PRId64 "): %s; acting on nothing and answering nothing but "
                         "/healthz and /readyz (503: it may no longer be current), until the database answers "
                         "again",
                         lead_epoch, why);
        }
        pthread_mutex_unlock(&mu);
}

bool gp_daemon_deposed(void) {
        return __atomic_load_n(&deposed, __ATOMIC_ACQUIRE);
}

/* Before a pass acts (signals a supervisor, answers): a leader whose lease
 * may have run out (it was frozen, or could not renew) acts on nothing
 * more, without waiting for the fence of its next commit.  True when it
 * may act. */
static bool check_lead(void) {
        int64_t until = __atomic_load_n(&lead_until, __ATOMIC_ACQUIRE);
        if (until && gp_mono_ms() >= until)
                gp_daemon_depose("the lease ran out before it was renewed");
        return !gp_daemon_deposed();
}

bool gp_daemon_lead_lost(void) {
        return !check_lead();
}

/* Answer every command of list 503 with Retry-After, at once (generation
 * 0: the answer shows nothing unstored).  d->lock held. */
static void refuse_answers(gp_daemon *d, cmd *list) {
        for (cmd *c = list; c; c = c->next) {
                if (!c->req)
                        continue;
                char *body = gp_http_error_body("unavailable", "this server lost the lead (%s): it carries out "
                                                "nothing; try again (another server leads once the database "
                                                "answers)",
                                                deposed_why);
                gp_commit_answer(d, 0, c->req, 503, body, 1);
        }
}

/* A pass of a deposed leader: every command is answered 503 with
 * Retry-After, an agent's sync too (what waits for it is not sent), and
 * nothing else happens: no task starts, ends or is stored. */
static void refuse_all(gp_daemon *d, cmd *list) {
        pthread_mutex_lock(&d->lock);
        refuse_answers(d, list);
        pthread_mutex_unlock(&d->lock);
        while (list) {
                cmd *next = list->next;
                gp_cmd_free(list);
                list = next;
        }
}

/* Commands that add to what the store holds: refused while the disk is
 * full.  Cancels, releases, heartbeats, drains and task ends shrink the
 * work (or write a few bytes) and go on. */
static bool grows_store(cmd_kind k) {
        switch (k) {
        case CMD_SUBMIT:
        case CMD_TENANT_PUT:
        case CMD_KEY_CREATE:
        case CMD_WEIGHTS:
        case CMD_CREDIT:
        case CMD_INVOICE:
                return true;
        default:
                return false;
        }
}

static void process(gp_daemon *d, cmd *list, int64_t *exited, size_t nexited) {
        if (!check_lead()) {
                refuse_all(d, list);
                return;
        }
        /* before anything is applied: a degraded daemon refuses growth here,
         * so a failed commit never has to take back what it applied */
        bool full = gp_disk_check(d);
        int64_t now = gp_now_ms();
        batch b = {0};
        size_t ncmd = 0;
        for (cmd *c = list; c; c = c->next)
                ncmd++;
        outcome *out = calloc(ncmd ? ncmd : 1, sizeof(*out));
        if (!out) {
                gp_error("out of memory; stopping");
                _exit(70);
        }
        pthread_mutex_lock(&d->lock);
        size_t i = 0;
        for (cmd *c = list; c; c = c->next, i++) {
                if (full && grows_store(c->kind)) {
                        if (c->kind == CMD_SUBMIT)
                                gp_monitor_submit_rejected(d->mon, "other");
                        out[i].status = 507;
                        out[i].retry_after = GP_DISK_RETRY_AFTER_S;
                        out[i].body = gp_disk_error_body(d);
                        continue;
                }
                switch (c->kind) {
                case CMD_SUBMIT: apply_submit(d, &b, c, now, &out[i]); break;
                case CMD_ARRAY_CANCEL: apply_array_cancel(d, &b, c, now, &out[i]); break;
                case CMD_CANCEL: apply_cancel(d, &b, c, now, &out[i]); break;
                case CMD_RELEASE: apply_release(d, &b, c, now, &out[i]); break;
                case CMD_HEARTBEAT: apply_heartbeat(d, c, now, &out[i]); break;
                case CMD_DRAIN:
                case CMD_UNDRAIN: apply_drain(d, &b, c, &out[i]); break;
                case CMD_GPU_FAILED: apply_gpu_failed(d, &b, c, now); break;
                case CMD_MEM_EXCEEDED: apply_mem_exceeded(d, &b, c, now); break;
                case CMD_TENANT_PUT:
                case CMD_KEY_CREATE:
                case CMD_WEIGHTS: gp_tenants_apply(d->tenants, c, now, &out[i].status, &out[i].body); break;
                case CMD_CREDIT:
                case CMD_USAGE_TOKENS:
                case CMD_INVOICE:
                        gp_billing_apply(d, c, now, &out[i].status, &out[i].body, &out[i].ctype);
                        break;
                case CMD_NODE: gp_nodes_apply(d, c->node, now, &out[i].status, &out[i].body); break;
                case CMD_COORD_AUDIT: gp_coord_audit_apply(d, c->coord_audit, &out[i].status, &out[i].body); break;
                }
        }
        for (size_t k = 0; k < d->npeaked; k++) { /* a grown GPU memory peak is stored (nodes-tele.c) */
                gp_task *t = gp_i64map_get(&d->tasks, d->peaked[k]);
                if (t && t->state == GP_TASK_RUNNING)
                        mark(&b, t);
        }
        d->npeaked = 0;
        apply_node_events(d, &b, now);
        for (size_t k = 0; k < nexited; k++) {
                if (drained(d, exited[k]))
                        continue;
                gp_task *t = gp_i64map_get(&d->tasks, exited[k]);
                if (t && t->state == GP_TASK_RUNNING)
                        apply_exit(d, &b, t, now);
        }
        take_spawn_failures(d, &b, now);
        gp_tenants_tick(d->tenants, now, false);
        expire_leases(d, &b, now);
        expire_preempting(d, &b, now);
        gp_nodes_tick(d, now);
        gp_tele_tick(d, now);
        gp_mps_tick(d, now); /* MPS control daemons without clients quit */
        apply_node_events(d, &b, now);
        gp_nodes_settle(d);
        if (d->nodes_local_drain_changed) {
                b.meta_drained = true;
                d->nodes_local_drain_changed = false;
        }
        if (!full) /* no task starts while its `running` state may not be storable */
                apply_decisions(d, &b, now);
        gp_billing_tick(d, now); /* interval segments of long runs */
        i = 0;
        for (cmd *c = list; c; c = c->next, i++) /* keyed requests: their answers are stored with the batch */
                if (c->req && c->req->idem && !(c->kind == CMD_NODE && c->node->op == GP_NODE_OP_SYNC)) {
                        render(d, c, &out[i]);
                        gp_idem_record(d, c->req, out[i].status, out[i].ctype, out[i].body);
                }
        bool stored = commit(d, &b);
        gp_idem_batch_done(d);
        /* what the answers show: this batch, or an earlier one whose fsync
         * may still run; they go out once that is durable */
        uint64_t gen = gp_commit_applied(d);
        i = 0;
        if (!stored) {
                refuse_answers(d, list);
                for (cmd *c = list; c; c = c->next, i++)
                        free(out[i].body);
        }
        for (cmd *c = list; stored && c; c = c->next, i++)
                answer(d, gen, c, &out[i]);
        /* supervisor starts and resize signals wait for the disk too */
        for (size_t k = 0; k < b.nspawn; k++)
                gp_commit_hold(d, gen, b.spawn[k]->id, false);
        for (size_t k = 0; k < d->nresized; k++)
                gp_commit_hold(d, gen, d->resized[k], true);
        d->nresized = 0;
        free_final(d, &b);
        wake_waiters(d, now);
        gp_nodes_flush(d, gen);
        pthread_mutex_unlock(&d->lock);

        release_durable(d);
        bool lease_grace = d->lpreempting.live > 0; /* read under lock above; only this thread changes it */
        /* nor while the disk is full: a supervisor writes its files in the
         * data dir (they start when space is back) */
        if (d->ndraining == 0 && !lease_grace && d->ndeferred > 0 && !gp_disk_degraded(d)) {
                pthread_mutex_lock(&d->sp_lock);
                for (size_t k = d->ndeferred; k > 0; k--) /* the list is in start order from its end */
                        push_id(&d->spq, &d->nspq, &d->capspq, d->deferred[k - 1]);
                d->ndeferred = 0;
                pthread_cond_signal(&d->sp_cond);
                pthread_mutex_unlock(&d->sp_lock);
        }
        while (list) {
                cmd *next = list->next;
                gp_cmd_free(list);
                list = next;
        }
        free(out);
        free(b.dirty);
        free(b.spawn);
}

static int loop_timeout(gp_daemon *d) {
        int64_t now = gp_now_ms(), next = now + 1000;
        pthread_mutex_lock(&d->lock);
        int64_t dl = gp_sched_next_deadline(d->sched);
        if (dl < next)
                next = dl;
        size_t pos = 0;
        gp_task *t;
        while ((t = gp_i64map_next(&d->leases, &pos, NULL))) {
                int64_t e = t->heartbeat_ms + t->lease_ttl_s * 1000;
                if (t->timeout_s > 0 && t->started_ms + t->timeout_s * 1000 < e)
                        e = t->started_ms + t->timeout_s * 1000;
                if (e < next)
                        next = e;
        }
        pos = 0;
        while ((t = gp_i64map_next(&d->lpreempting, &pos, NULL)))
                if (t->preempt_deadline_ms < next)
                        next = t->preempt_deadline_ms;
        GP_LIST_FOR_EACH(l, &d->waiters) {
                const hreq *r = GP_LIST_ENTRY(l, hreq, wlink);
                if (r->wait_until_ms < next)
                        next = r->wait_until_ms;
        }
        if (!gp_list_empty(&d->followers) && now + 200 < next)
                next = now + 200;
        int64_t bill = gp_billing_next_ms(d);
        if (bill < next)
                next = bill;
        int64_t nd = gp_nodes_next_ms(d);
        if (nd < next)
                next = nd;
        if (d->wd_due_ms < next)
                next = d->wd_due_ms;
        if (d->cfg.n_time_rules > 0) {
                int64_t minute = (now / 60000 + 1) * 60000; /* windows change on minute boundaries */
                if (minute < next)
                        next = minute;
        }
        pthread_mutex_unlock(&d->lock);
        int64_t ms = next - now;
        return ms < 0 ? 0 : (int)ms;
}

void *loop_main(void *arg) {
        gp_daemon *d = arg;
        struct epoll_event evs[64];
        int64_t exited[64];
        while (!__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE)) {
                int n = epoll_wait(d->epfd, evs, 64, loop_timeout(d));
                size_t nexited = 0;
                for (int i = 0; i < n; i++) {
                        if (evs[i].data.u64 == 0) {
                                uint64_t v;
                                ssize_t r = read(d->evfd, &v, sizeof(v));
                                (void)r;
                        } else {
                                exited[nexited++] = (int64_t)evs[i].data.u64;
                        }
                }
                /* supervisors found gone without a pidfd */
                pthread_mutex_lock(&d->lock);
                while (d->ngone && nexited < 64)
                        exited[nexited++] = d->gone[--d->ngone];
                pthread_mutex_unlock(&d->lock);
                pthread_mutex_lock(&d->qlock);
                cmd *list = d->qhead;
                d->qhead = d->qtail = NULL;
                d->qlen = 0;
                pthread_mutex_unlock(&d->qlock);
                process(d, list, exited, nexited);
                /* ready once recovery's leftovers (tasks that ended while
                 * the daemon was down) are recorded and the queue ran */
                if (!__atomic_load_n(&d->ngone, __ATOMIC_ACQUIRE) && !__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE))
                        __atomic_store_n(&d->ready, true, __ATOMIC_RELEASE);
                pthread_mutex_lock(&d->lock);
                if (!gp_list_empty(&d->followers))
                        wake_followers(d);
                pthread_mutex_unlock(&d->lock);
        }
        /* stopping: what the gateway counted since the last flush */
        pthread_mutex_lock(&d->lock);
        gp_billing_flush(d, gp_now_ms());
        batch b = {0};
        commit(d, &b);
        pthread_mutex_unlock(&d->lock);
        return NULL;
}

cmd *gp_cmd_new(cmd_kind kind) {
        cmd *c = calloc(1, sizeof(*c));
        if (c)
                c->kind = kind;
        return c;
}

void gp_cmd_free(cmd *c) {
        if (!c)
                return;
        switch (c->kind) {
        case CMD_SUBMIT:
                gp_task_done(&c->submit.task);
                gp_array_spec_done(&c->submit.array);
                break;
        case CMD_TENANT_PUT: free(c->tenant_put.rec); break;
        case CMD_NODE: gp_node_cmd_free(c->node); break;
        case CMD_COORD_AUDIT: gp_coord_audit_free(c->coord_audit); break;
        case CMD_KEY_CREATE: explicit_bzero(c->key_create.key, sizeof(c->key_create.key)); break;
        case CMD_CREDIT:
        case CMD_USAGE_TOKENS:
        case CMD_INVOICE: free(c->bill.p); break;
        default: break;
        }
        free(c);
}

void gp_daemon_kick(gp_daemon *d) {
        uint64_t one = 1;
        ssize_t w = write(d->evfd, &one, sizeof(one));
        (void)w;
}

void gp_daemon_post(gp_daemon *d, cmd *c) {
        c->next = NULL;
        pthread_mutex_lock(&d->qlock);
        bool was_empty = d->qhead == NULL;
        if (d->qtail)
                d->qtail->next = c;
        else
                d->qhead = c;
        d->qtail = c;
        d->qlen++;
        pthread_mutex_unlock(&d->qlock);
        /* one wake-up per batch, not per command: the loop takes the whole
         * queue after reading the eventfd, so a non-empty queue is already
         * promised a pass */
        if (was_empty) {
                uint64_t one = 1;
                ssize_t w = write(d->evfd, &one, sizeof(one));
                (void)w;
        }
}
