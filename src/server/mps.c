/* mps.c - gpus.sharing: mps on the server (server/mps.h): which GPUs and
 * tasks are MPS, what a client is started with, and the server's own GPUs'
 * daemons (an exec/mps-pool.h pool; the agents keep their own).
 *
 * Invariant: the loop asks the pool to quit a daemon only while it holds
 * d->lock and no task in d->tasks is a running MPS client of that GPU of
 * node local, and no preempted run is still stopping (the pool's look
 * never waits for a start, which the spawner makes without d->lock).
 */
#include "server/mps.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/util.h"
#include "config/config.h"
#include "core/sched.h"
#include "exec/mps-pool.h"
#include "exec/mps.h"
#include "server/nodes.h"
#include "server/server-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gp_mps {
        bool on;           /* gpus.sharing: mps */
        gp_mps_pool *pool; /* the server's own GPUs' daemons (on) */
};

int gp_mps_new(const gp_config *cfg, gp_mps **ret, char *err, size_t errlen) {
        gp_mps *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->on = cfg->gpu_mps;
        if (m->on) {
                char d[PATH_MAX];
                int n = cfg->mps_dir[0] ? snprintf(d, sizeof(d), "%s", cfg->mps_dir)
                                        : snprintf(d, sizeof(d), "%s/mps", cfg->data_dir);
                int rc = n < 0 || (size_t)n >= sizeof(d) ? -ENAMETOOLONG
                                                         : gp_mps_pool_new(d, cfg->mps_control, &m->pool, err, errlen);
                if (rc < 0) {
                        if (rc == -ENAMETOOLONG && n >= (int)sizeof(d))
                                snprintf(err, errlen, "gpus.mps_dir: too long");
                        free(m);
                        return rc;
                }
        }
        *ret = m;
        return 0;
}

void gp_mps_free(gp_mps *m) {
        if (!m)
                return;
        gp_mps_pool_free(m->pool);
        free(m);
}

/* Is the view's GPU listed in gpus.mps_gpus (or is none listed)? */
static bool listed(const gp_config *cfg, const gp_sched_gpu_view *v) {
        if (cfg->n_mps_gpus == 0)
                return true;
        char idx[16];
        snprintf(idx, sizeof(idx), "%d", v->index);
        for (int i = 0; i < cfg->n_mps_gpus; i++)
                if (!strcmp(cfg->mps_gpus[i], idx) || (v->uuid && !strcmp(cfg->mps_gpus[i], v->uuid)))
                        return true;
        return false;
}

static bool view_on(gp_daemon *d, const gp_sched_gpu_view *v) {
        return d->mps && d->mps->on && v->index >= 0 && v->index < GP_MPS_MAX_GPUS && !v->removed && listed(&d->cfg, v);
}

bool gp_mps_gpu_on(gp_daemon *d, uint32_t g) {
        gp_sched_gpu_view v;
        return d->mps && d->mps->on && gp_sched_gpu_get(d->sched, g, &v) == 0 && view_on(d, &v);
}

/* t's GPU view when it is a running MPS client (on any node). */
static bool client_view(gp_daemon *d, const gp_task *t, gp_sched_gpu_view *ret) {
        uint32_t g;
        return !t->is_lease && t->memory_mb > 0 && t->n_gpus == 1 && t->elastic_max_gpus == 0 &&
               gp_sched_gpu_find(d->sched, t->gpus[0].node, t->gpus[0].index, &g) == 0 &&
               gp_sched_gpu_get(d->sched, g, ret) == 0 && view_on(d, ret);
}

bool gp_mps_task_on(gp_daemon *d, const gp_task *t) {
        if (!d->mps || !d->mps->on || t->is_lease || t->memory_mb <= 0)
                return false;
        if (t->state == GP_TASK_QUEUED && t->n_gpus == 0)
                return d->cfg.n_mps_gpus == 0 && t->gpu_request == 1 && t->elastic_max_gpus == 0;
        gp_sched_gpu_view v;
        return client_view(d, t, &v);
}

int gp_mps_task_compute_pct(const gp_task *t) {
        if (!t->spec || !strstr(t->spec, "\"compute_pct\"")) /* most specs: no parse */
                return 0;
        json_t *spec = json_loads(t->spec, 0, NULL);
        json_int_t v = spec ? json_integer_value(json_object_get(spec, "compute_pct")) : 0;
        json_decref(spec);
        return v >= 1 && v <= 100 ? (int)v : 0;
}

/* Its own compute_pct, or memory_mb x 100 / the GPU's memory rounded up, 1..100. */
static int compute_pct(const gp_task *t, int64_t gpu_mb) {
        int own = gp_mps_task_compute_pct(t);
        if (own > 0)
                return own;
        if (gpu_mb <= 0)
                return 100;
        int64_t p = (t->memory_mb * 100 + gpu_mb - 1) / gpu_mb;
        return p < 1 ? 1 : p > 100 ? 100 : (int)p;
}

bool gp_mps_client_of(gp_daemon *d, const gp_task *t, int *ret_pct, char *uuid, size_t size) {
        gp_sched_gpu_view v;
        if (!d->mps || !d->mps->on || !client_view(d, t, &v))
                return false;
        *ret_pct = compute_pct(t, v.memory_total_mb);
        gp_strlcpy(uuid, v.uuid ? v.uuid : "", size);
        return true;
}

int gp_mps_client_prepare(gp_daemon *d, const gp_task *t, gp_mps_client *ret) {
        gp_mps *m = d->mps;
        if (!m || !m->on || gp_nodes_remote(t))
                return 0;
        pthread_mutex_lock(&d->lock);
        char uuid[GP_UUID_MAX];
        int pct = 0, i = t->n_gpus == 1 ? t->gpus[0].index : -1;
        bool on = gp_mps_client_of(d, t, &pct, uuid, sizeof(uuid));
        pthread_mutex_unlock(&d->lock);
        if (!on)
                return 0;
        char pipe[PATH_MAX], log[PATH_MAX], devices[GP_UUID_MAX + 16];
        if (uuid[0])
                gp_strlcpy(devices, uuid, sizeof(devices));
        else
                snprintf(devices, sizeof(devices), "%d", i);
        int rc = gp_mps_pool_ensure(m->pool, i, devices, pipe, log, sizeof(pipe));
        if (rc < 0)
                return rc == -EINVAL ? -GP_EMPS : rc;
        gp_mps_client_env(pipe, log, t->memory_mb, pct, uuid, ret);
        return 1;
}

void gp_mps_spawn_reason(gp_daemon *d, const gp_task *t, char *buf, size_t size) {
        gp_mps *m = d->mps;
        int i = t->n_gpus > 0 ? t->gpus[0].index : -1;
        char err[GP_MPS_ERR_MAX] = "";
        if (m && m->pool)
                gp_mps_pool_state(m->pool, i, NULL, err, sizeof(err));
        snprintf(buf, size, "mps: the MPS control daemon of GPU %d could not start: %s", i,
                 err[0] ? err : "unknown error");
}

/* The pool's needed(): the GPUs of node local with a running MPS client;
 * none may quit while a preempted run is still stopping. */
static bool local_needed(void *ud, bool *needed) {
        gp_daemon *d = ud;
        size_t pos = 0;
        gp_task *t;
        gp_sched_gpu_view v;
        while ((t = gp_i64map_next(&d->tasks, &pos, NULL)))
                if (t->state == GP_TASK_RUNNING && !gp_nodes_remote(t) && client_view(d, t, &v))
                        needed[v.index] = true;
        return d->ndraining == 0;
}

void gp_mps_tick(gp_daemon *d, int64_t now) {
        if (d->mps && d->mps->pool)
                gp_mps_pool_look(d->mps->pool, now, local_needed, d);
}

void gp_mps_gpu_json(gp_daemon *d, uint32_t g, json_t *o) {
        gp_sched_gpu_view v;
        if (!gp_mps_gpu_on(d, g) || gp_sched_gpu_get(d->sched, g, &v) < 0) {
                json_object_set_new(o, "mps", json_null());
                return;
        }
        json_t *x = json_object();
        if (!x)
                return;
        if (strcmp(v.node, "local")) { /* an agent's GPU: its agent runs the daemon */
                json_object_set_new(x, "daemon", json_null());
                json_object_set_new(x, "pid", json_null());
                json_object_set_new(x, "error", json_null());
                json_object_set_new(o, "mps", x);
                return;
        }
        static const char *const names[] = {"stopped", "running", "failed"};
        int64_t pid = 0;
        char err[GP_MPS_ERR_MAX];
        gp_mps_daemon_state st = gp_mps_pool_state(d->mps->pool, v.index, &pid, err, sizeof(err));
        json_object_set_new(x, "daemon", json_string(names[st]));
        json_object_set_new(x, "pid", pid > 0 ? json_integer(pid) : json_null());
        json_object_set_new(x, "error", st == GP_MPS_FAILED ? json_string(err) : json_null());
        json_object_set_new(o, "mps", x);
}

int gp_mps_task_write(gp_daemon *d, const gp_task *t, gp_buf *b) {
        if (!gp_mps_task_on(d, t))
                return 0;
        gp_sched_gpu_view v;
        int64_t gpu_mb = t->n_gpus == 1 && client_view(d, t, &v) ? v.memory_total_mb : 0;
        if (gpu_mb <= 0 && gp_mps_task_compute_pct(t) == 0)
                return 0; /* queued, none asked: known once placed */
        return gp_buf_printf(b, ",\"compute_pct\":%d", compute_pct(t, gpu_mb));
}
