/* nodes-tele.c - agents' telemetry as the server keeps it (nodes-tele.h). */
#include "server/nodes-tele.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/host.h"
#include "base/util.h"
#include "exec/cgroup.h"
#include "core/sched.h"
#include "core/watchdog.h"
#include "server/monitor.h"
#include "server/mps.h"
#include "server/nodes.h"
#include "server/cluster-host.h"

typedef struct tele_gpu {
        int index;
        gp_gpu_info info;
        int n_procs;
        gp_proto_proc *procs;         /* owned */
} tele_gpu;

struct gp_node_tele {
        tele_gpu *gpus;               /* in the order first seen, at most GP_PROTO_MAX_GPUS */
        int n;
        bool has_host;
        gp_host_info host;
        int64_t at_ms;
};

static tele_gpu *find_gpu(const gp_node_tele *t, int index) {
        for (int i = 0; t && i < t->n; i++)
                if (t->gpus[i].index == index)
                        return &t->gpus[i];
        return NULL;
}

static void reading(gp_gpu_info *g, const gp_proto_tele *r) {
        g->index = r->index;
        g->memory_used_mb = r->used_mb;
        g->util_pct = r->util_pct;
        g->temp_c = r->temp_c;
        g->power_mw = r->power_mw;
        g->sm_clock_mhz = r->sm_clock_mhz;
        g->mem_clock_mhz = r->mem_clock_mhz;
        g->ecc_corrected = r->ecc_corrected;
        g->ecc_uncorrected = r->ecc_uncorrected;
        g->throttle_reasons = r->throttle;
        g->xid_errors = r->xid_errors;
        g->healthy = !r->reason[0];
        g->procs_known = r->procs_known;
        gp_strlcpy(g->health_reason, r->reason, sizeof(g->health_reason));
}

static void touch(int64_t task, int64_t *touched, size_t cap, size_t *n) {
        if (task <= 0)
                return;
        for (size_t i = 0; i < *n; i++)
                if (touched[i] == task)
                        return;
        if (*n < cap)
                touched[(*n)++] = task;
}

int gp_node_tele_take(gp_node_tele **tp, const gp_proto_sync *m, int64_t now_ms, int64_t *touched, size_t cap,
                      size_t *ntouched) {
        gp_node_tele *t = *tp;
        if (!t && !(t = calloc(1, sizeof(*t))))
                return -ENOMEM;
        *tp = t;
        /* room for every new index first, so that nothing is half taken */
        int fresh = 0;
        for (int i = 0; i < m->n_tele; i++)
                fresh += !find_gpu(t, m->tele[i].index);
        if (fresh) {
                tele_gpu *v = realloc(t->gpus, (size_t)(t->n + fresh) * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                t->gpus = v;
        }
        gp_proto_proc **procs = m->n_tele ? calloc((size_t)m->n_tele, sizeof(*procs)) : NULL;
        if (m->n_tele && !procs)
                return -ENOMEM;
        for (int i = 0; i < m->n_tele; i++) {
                size_t size = (size_t)m->tele[i].n_procs * sizeof(gp_proto_proc);
                if (size && !(procs[i] = malloc(size))) {
                        for (int k = 0; k < i; k++)
                                free(procs[k]);
                        free(procs);
                        return -ENOMEM;
                }
                if (size)
                        memcpy(procs[i], m->tele[i].procs, size);
        }
        *ntouched = 0;
        for (int i = 0; i < m->n_tele; i++) {
                const gp_proto_tele *r = &m->tele[i];
                tele_gpu *g = find_gpu(t, r->index);
                if (!g) {
                        g = &t->gpus[t->n++];
                        *g = (tele_gpu){.index = r->index};
                }
                for (int k = 0; k < g->n_procs; k++)
                        touch(g->procs[k].task, touched, cap, ntouched);
                for (int k = 0; k < r->n_procs; k++)
                        touch(r->procs[k].task, touched, cap, ntouched);
                reading(&g->info, r);
                free(g->procs);
                g->procs = procs[i];
                g->n_procs = r->n_procs;
        }
        free(procs);
        if (m->has_host) {
                t->host = m->host;
                t->has_host = true;
        }
        if (m->n_tele || m->has_host)
                t->at_ms = now_ms;
        return 0;
}

void gp_node_tele_free(gp_node_tele *t) {
        for (int i = 0; t && i < t->n; i++)
                free(t->gpus[i].procs);
        if (t)
                free(t->gpus);
        free(t);
}

const gp_gpu_info *gp_node_tele_gpu(const gp_node_tele *t, int index) {
        const tele_gpu *g = find_gpu(t, index);
        return g ? &g->info : NULL;
}

const gp_host_info *gp_node_tele_host(const gp_node_tele *t) {
        return t && t->has_host ? &t->host : NULL;
}

int64_t gp_node_tele_at(const gp_node_tele *t) {
        return t ? t->at_ms : 0;
}

/* The most task's processes use on any one GPU of this node; -1 when no
 * GPU lists processes. */
static int64_t task_max_gpu_mb(const gp_node_tele *t, int64_t task) {
        int64_t most = -1;
        for (int i = 0; t && i < t->n; i++) {
                const tele_gpu *g = &t->gpus[i];
                if (!g->info.procs_known)
                        continue;
                int64_t sum = 0;
                for (int k = 0; k < g->n_procs; k++)
                        if (g->procs[k].task == task)
                                sum += g->procs[k].used_mb;
                if (sum > most)
                        most = sum;
        }
        return most;
}

int64_t gp_node_tele_task_mb(const gp_node_tele *t, int64_t task) {
        int64_t sum = -1;
        for (int i = 0; t && i < t->n; i++) {
                const tele_gpu *g = &t->gpus[i];
                if (g->info.procs_known && sum < 0)
                        sum = 0;
                for (int k = 0; k < g->n_procs; k++)
                        if (g->procs[k].task == task)
                                sum += g->procs[k].used_mb;
        }
        return sum;
}

const gp_gpu_info *gp_daemon_gpu_info(gp_daemon *d, uint32_t g) {
        gp_sched_gpu_view v;
        if (gp_sched_gpu_get(gp_daemon_sched(d), g, &v) < 0)
                return NULL;
        if (!strcmp(v.node, "local")) {
                const uint32_t *ids;
                size_t ngpus = gp_daemon_local_gpus(d, &ids);
                const gp_gpu_info *info = gp_daemon_local_info(d);
                for (size_t i = 0; i < ngpus && info; i++)
                        if (ids[i] == g)
                                return &info[i];
                return NULL;
        }
        return gp_node_tele_gpu(gp_nodes_tele(d, v.node), v.index);
}

static json_t *size_or_null(int64_t v) {
        return v >= 0 ? json_integer(v) : json_null();
}

static int put(json_t *o, const char *key, json_t *v) {
        return v && json_object_set_new(o, key, v) == 0 ? 0 : -ENOMEM;
}

void gp_tele_node_synced(gp_daemon *d, const char *node, const gp_proto_sync *m, const int64_t *touched, size_t n) {
        if (m->has_host) /* what tasks that ask for CPUs and RAM are placed by */
                gp_sched_node_set_host(gp_daemon_sched(d), node, m->host.cpus,
                                       m->host.mem_total_mb > 0 ? m->host.mem_total_mb : 0);
        gp_tele_node_tasks(d, touched, n);
}

int gp_node_host_json(const gp_host_info *h, int64_t at_ms, json_t *o) {
        return put(o, "cpus", h ? json_integer(h->cpus) : json_null()) |
               put(o, "memory_total_mb", size_or_null(h ? h->mem_total_mb : -1)) |
               put(o, "memory_available_mb", size_or_null(h ? h->mem_avail_mb : -1)) |
               put(o, "disk_total_mb", size_or_null(h ? h->disk_total_mb : -1)) |
               put(o, "disk_free_mb", size_or_null(h ? h->disk_free_mb : -1)) |
               put(o, "cgroup", h && gp_cgroup_version_name(h->cgroup) ? json_string(gp_cgroup_version_name(h->cgroup))
                                                                        : json_null()) |
               put(o, "telemetry_ms", at_ms > 0 ? json_integer(at_ms) : json_null());
}

int gp_gpu_readings_json(const gp_gpu_info *g, json_t *o) {
        return put(o, "memory_used_mb", size_or_null(g ? g->memory_used_mb : -1)) |
               put(o, "util_pct", size_or_null(g ? g->util_pct : -1)) |
               put(o, "temp_c", size_or_null(g ? g->temp_c : -1)) |
               put(o, "power_w", g && g->power_mw >= 0 ? json_real(g->power_mw / 1000.0) : json_null());
}

/* t's GPU memory now, MiB; -1 when not known. */
static int64_t task_mb_now(gp_daemon *d, const gp_task *t) {
        if (t->state != GP_TASK_RUNNING || t->n_gpus == 0)
                return -1;
        if (!gp_nodes_remote(t))
                return t->gpu_mem_seen ? t->gpu_mem_mb : -1;
        int64_t sum = -1;
        for (int i = 0; i < t->n_gpus; i++) {
                if (i > 0 && !strcmp(t->gpus[i - 1].node, t->gpus[i].node))
                        continue; /* each node once (its GPUs are together) */
                int64_t mb = gp_node_tele_task_mb(gp_nodes_tele(d, t->gpus[i].node), t->id);
                if (mb >= 0)
                        sum = (sum < 0 ? 0 : sum) + mb;
        }
        return sum;
}

int gp_tele_task_write(gp_daemon *d, const gp_task *t, gp_buf *b) {
        int64_t now = task_mb_now(d, t), peak = t->gpu_mem_seen ? t->gpu_mem_peak_mb : -1;
        if (now > peak)
                peak = now;
        int r = gp_buf_printf(b, ",\"isolation\":\"%s\"", gp_tele_task_isolation(d, t));
        r = r ? r : gp_mps_task_write(d, t, b); /* an MPS client's compute_pct */
        r = r ? r : now >= 0 ? gp_buf_printf(b, ",\"gpu_memory_used_mb\":%lld", (long long)now)
                             : gp_buf_puts(b, ",\"gpu_memory_used_mb\":null");
        return r ? r : peak >= 0 ? gp_buf_printf(b, ",\"gpu_memory_peak_mb\":%lld", (long long)peak)
                                 : gp_buf_puts(b, ",\"gpu_memory_peak_mb\":null");
}

#define MAX_ROOTS 4096

/* t's peak is stored again once it grew by a tenth (at least 256 MiB)
 * since it was last: a restart then knows it, and the rows it costs are
 * a handful per run. */
static void peak_seen(gp_daemon *d, gp_task *t) {
        int64_t step = t->gpu_mem_peak_stored / 10 > 256 ? t->gpu_mem_peak_stored / 10 : 256;
        if (t->gpu_mem_peak_mb < t->gpu_mem_peak_stored + step)
                return;
        t->gpu_mem_peak_stored = t->gpu_mem_peak_mb;
        gp_daemon_peak_grew(d, t->id);
}

static void watch(gp_daemon *d, gp_task *t, int64_t max_gpu_mb, int64_t now);

bool gp_tele_local_sample(gp_daemon *d) {
        bool known = false, more = false;
        const uint32_t *ids;
        size_t ngpus = gp_daemon_local_gpus(d, &ids);
        const gp_gpu_info *info = gp_daemon_local_info(d);
        for (size_t i = 0; i < ngpus && info; i++)
                known = known || info[i].procs_known;
        if (!known)
                return false;
        static int64_t roots[MAX_ROOTS], sums[MAX_ROOTS], most[MAX_ROOTS], on_gpu[MAX_ROOTS];
        static gp_task *owners[MAX_ROOTS];
        size_t nr = 0, pos = 0;
        gp_task *t;
        while ((t = gp_daemon_task_next(d, &pos)) && nr < MAX_ROOTS)
                if (t->state == GP_TASK_RUNNING && t->sup_pid > 0 && !gp_nodes_remote(t)) {
                        roots[nr] = t->sup_pid;
                        sums[nr] = most[nr] = 0;
                        owners[nr++] = t;
                }
        for (size_t i = 0; i < ngpus; i++) {
                if (!info[i].procs_known)
                        continue;
                memset(on_gpu, 0, nr * sizeof(on_gpu[0]));
                int64_t foreign = 0, listed = 0; /* processes of no task of ours: another user's */
                for (int k = 0; k < info[i].n_procs; k++) {
                        const gp_gpu_proc *p = &info[i].procs[k];
                        int w = nr ? gp_host_descends(p->pid, roots, nr) : -1;
                        listed += p->used_mb > 0 ? p->used_mb : 0;
                        if (w >= 0 && p->used_mb > 0) {
                                sums[w] += p->used_mb;
                                on_gpu[w] += p->used_mb;
                        } else if (w < 0 && p->used_mb > 0) {
                                foreign += p->used_mb;
                        }
                }
                foreign = gp_gpu_foreign_mb(info[i].memory_used_mb, listed, foreign, info[i].n_procs, GP_GPU_MAX_PROCS);
                more |= gp_sched_gpu_set_foreign(gp_daemon_sched(d), ids[i], foreign) > 0;
                for (size_t w = 0; w < nr; w++)
                        if (on_gpu[w] > most[w])
                                most[w] = on_gpu[w];
        }
        int64_t now = gp_now_ms();
        for (size_t i = 0; i < nr; i++) {
                t = owners[i];
                t->gpu_mem_seen = true;
                t->gpu_mem_mb = sums[i];
                if (sums[i] > t->gpu_mem_peak_mb)
                        t->gpu_mem_peak_mb = sums[i];
                peak_seen(d, t);
                watch(d, t, most[i], now);
        }
        return more;
}

/* The watchdog's look at t, whose processes use max_gpu_mb at most on one
 * of its GPUs now (core/watchdog.h); a stop goes to the loop. */
static void watch(gp_daemon *d, gp_task *t, int64_t max_gpu_mb, int64_t now) {
        const gp_config *cfg = gp_daemon_cfg(d);
        t->gpu_mem_max_gpu_mb = max_gpu_mb;
        if (!cfg->gpu_watchdog || t->state != GP_TASK_RUNNING)
                return;
        gp_wd_cfg c = {.tolerance_mb = cfg->watchdog_tolerance_mb, .grace_ms = cfg->watchdog_grace_s * 1000LL};
        switch (gp_wd_step(&c, t->memory_mb, max_gpu_mb, now, &t->wd_over_ms)) {
        case GP_WD_OVER:
                if (gp_nodes_remote(t) && t->wd_over_ms + c.grace_ms < gp_daemon_wd_due(d))
                        gp_daemon_set_wd_due(d, t->wd_over_ms + c.grace_ms); /* no new reading may come before */
                gp_warn("task %lld: its processes use %lld MB on one of its GPUs, over its memory_mb %lld (+%lld): "
                        "stopped in %d s unless they go back under", (long long)t->id, (long long)max_gpu_mb,
                        (long long)t->memory_mb, (long long)cfg->watchdog_tolerance_mb, cfg->watchdog_grace_s);
                gp_monitor_watchdog(gp_daemon_monitor(d), false);
                break;
        case GP_WD_UNDER:
                gp_info("task %lld: back under its memory_mb (%lld MB)", (long long)t->id, (long long)max_gpu_mb);
                break;
        case GP_WD_STOP: {
                cmd *cm = gp_cmd_mem_exceeded(t->id);
                if (!cm) {
                        t->wd_over_ms = 0; /* looked at again with the next sample */
                        break;
                }
                gp_daemon_post(d, cm);
                break;
        }
        case GP_WD_NONE: break;
        }
}

void gp_tele_node_tasks(gp_daemon *d, const int64_t *ids, size_t n) {
        int64_t now = gp_now_ms();
        for (size_t i = 0; i < n; i++) {
                gp_task *t = gp_daemon_task(d, ids[i]);
                if (!t || t->state != GP_TASK_RUNNING || !gp_nodes_remote(t))
                        continue;
                int64_t sum = task_mb_now(d, t), most = -1;
                for (int k = 0; k < t->n_gpus; k++)
                        if (k == 0 || strcmp(t->gpus[k - 1].node, t->gpus[k].node)) {
                                int64_t mb = task_max_gpu_mb(gp_nodes_tele(d, t->gpus[k].node), t->id);
                                if (mb > most)
                                        most = mb;
                        }
                if (sum >= 0) {
                        t->gpu_mem_seen = true;
                        if (sum > t->gpu_mem_peak_mb)
                                t->gpu_mem_peak_mb = sum;
                        peak_seen(d, t);
                }
                watch(d, t, most, now);
        }
}

static bool gpu_lists_procs(gp_daemon *d, uint32_t g) {
        const gp_gpu_info *info = gp_daemon_gpu_info(d, g);
        return info && info->procs_known;
}

const char *gp_tele_gpu_isolation(gp_daemon *d, uint32_t g) {
        gp_sched_gpu_view v;
        if (gp_sched_gpu_get(gp_daemon_sched(d), g, &v) == 0 && gp_gpu_is_mig(v.uuid))
                return "mig";
        if (gp_mps_gpu_on(d, g))
                return "mps";
        return gp_daemon_cfg(d)->gpu_watchdog && gpu_lists_procs(d, g) ? "watchdog" : "none";
}

const char *gp_tele_task_isolation(gp_daemon *d, const gp_task *t) {
        if (t->memory_mb <= 0) { /* whole devices: MIG instances are fenced from their board's others */
                bool mig = t->n_gpus > 0;
                for (int i = 0; i < t->n_gpus; i++)
                        mig = mig && gp_gpu_is_mig(t->gpus[i].uuid);
                return mig ? "mig" : "none";
        }
        if (gp_mps_task_on(d, t))
                return "mps";
        if (!gp_daemon_cfg(d)->gpu_watchdog)
                return "none";
        for (int i = 0; i < t->n_gpus; i++) { /* running: as its GPUs say */
                uint32_t g;
                if (gp_sched_gpu_find(gp_daemon_sched(d), t->gpus[i].node, t->gpus[i].index, &g) < 0 ||
                    !gpu_lists_procs(d, g))
                        return "none";
        }
        return "watchdog";
}

void gp_tele_tick(gp_daemon *d, int64_t now) {
        if (now < gp_daemon_wd_due(d))
                return;
        gp_daemon_set_wd_due(d, INT64_MAX);
        size_t pos = 0;
        gp_task *t;
        int64_t grace = gp_daemon_cfg(d)->watchdog_grace_s * 1000LL;
        while ((t = gp_daemon_task_next(d, &pos)))
                if (t->state == GP_TASK_RUNNING && t->wd_over_ms > 0 && gp_nodes_remote(t)) {
                        watch(d, t, t->gpu_mem_max_gpu_mb, now);
                        if (t->wd_over_ms > 0 && t->wd_over_ms + grace < gp_daemon_wd_due(d))
                                gp_daemon_set_wd_due(d, t->wd_over_ms + grace);
                }
}
