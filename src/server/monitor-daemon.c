/* monitor-daemon.c - the monitor's glue to the daemon: collecting a sample
 * from gp_daemon, the sampler tick (history rings and alert evaluation),
 * and the HTTP routes of monitoring, alerts and the dashboard.
 *
 * Threads: gp_monitor_collect takes d->lock briefly (then the registry's
 * leaf mutex); gp_monitor_tick runs on the sampler thread only; the routes
 * run on MHD worker threads and answer at once (the handler's second
 * call, see http.c).  Nothing here writes the daemon's state.
 */
#include "gateway/gateway.h"
#include "server/disk.h"
#include "server/monitor.h"
#include "server/nodes.h"
#include "server/nodes-tele.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"
#include "base/vec.h"
#include "server/alerts.h"
#include "server/routes.h"
#include "server/server-int.h"
#include "server/tenants.h"

#define JSON_TYPE "application/json"
#define WAIT_WINDOW_MS (5 * 60 * 1000) /* queue wait p95 for alerts: the last 5 minutes */

int64_t gp_monitor_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------------ */
/* life cycle                                                          */

static void webhook_result(void *ud, const char *result) {
        gp_monitor_webhook_result(ud, result);
}

int gp_monitor_attach(gp_daemon *d, char *err, size_t errlen) {
        if (gp_monitor_new(&d->mon) < 0 || gp_alerts_new(&d->cfg, &d->alerts) < 0) {
                snprintf(err, errlen, "monitor: out of memory");
                return -ENOMEM;
        }
        return 0;
}

int gp_monitor_start(gp_daemon *d) {
        if (!d->alerts)
                return 0;
        return gp_alerts_start(d->alerts, d->backend, webhook_result, d->mon);
}

void gp_monitor_detach(gp_daemon *d) {
        gp_alerts_free(d->alerts);
        d->alerts = NULL;
        gp_monitor_free(d->mon);
        d->mon = NULL;
}

void gp_monitor_gpu_read(gp_daemon *d, bool ok, int64_t now_ms) {
        gp_monitor_gpu_read_at(d->mon, ok, now_ms);
}

size_t gp_monitor_json_keep_tenant(json_t *a, const char *key, const char *tenant) {
        size_t dropped = 0;
        if (!json_is_array(a))
                return 0;
        for (size_t i = 0; i < json_array_size(a);) {
                const char *v = json_string_value(json_object_get(json_array_get(a, i), key));
                if (v && tenant && !strcmp(v, tenant)) {
                        i++;
                        continue;
                }
                json_array_remove(a, i);
                dropped++;
        }
        return dropped;
}

/* ------------------------------------------------------------------ */
/* collecting                                                          */

static gp_mon_tenant *tenant_of(gp_mon_sample *s, const char *label) {
        for (size_t i = 0; i < s->ntenants; i++)
                if (!strcmp(s->tenants[i].id, label))
                        return &s->tenants[i];
        if (s->ntenants >= GP_ARRAY_SIZE(s->tenants))
                return NULL;
        gp_mon_tenant *t = &s->tenants[s->ntenants++];
        memset(t, 0, sizeof(*t));
        gp_strlcpy(t->id, label, sizeof(t->id));
        return t;
}

void gp_monitor_collect(gp_daemon *d, gp_mon_sample *s) {
        memset(s, 0, sizeof(*s));
        int64_t now = gp_now_ms();
        s->t_ms = now;
        s->backend = d->backend;
        gp_hist_init(&s->queued_wait, gp_hist_wait_bounds, gp_hist_wait_nb);
        pthread_mutex_lock(&d->lock);
        gp_sched_stats st;
        gp_sched_get_stats(d->sched, &st);
        s->gpus_total = st.gpus_total;
        s->gpus_usable = st.gpus_usable;
        s->gpus_busy = st.gpus_busy;
        s->memory_usable_mb = st.memory_usable_mb;
        s->memory_allocated_mb = st.memory_allocated_mb;
        memcpy(s->queued, st.queued, sizeof(s->queued));
        s->queued_total = st.queued_total;
        s->running = st.running;
        s->total_scheduled = st.total_scheduled;
        s->total_backfilled = st.total_backfilled;
        s->total_expired = st.total_expired;
        uint32_t n = gp_sched_gpu_count(d->sched);
        for (uint32_t g = 0; g < n && s->ngpus < GP_MON_MAX_GPUS; g++) {
                gp_sched_gpu_view v;
                if (gp_sched_gpu_get(d->sched, g, &v) < 0 || v.removed)
                        continue;
                gp_mon_gpu *o = &s->gpus[s->ngpus++];
                snprintf(o->id, sizeof(o->id), "%s:%d", v.node, v.index);
                gp_strlcpy(o->node, v.node, sizeof(o->node));
                o->index = v.index;
                gp_strlcpy(o->uuid, v.uuid, sizeof(o->uuid));
                gp_strlcpy(o->name, v.name, sizeof(o->name));
                o->memory_total_mb = v.memory_total_mb;
                o->memory_allocated_mb = v.memory_allocated_mb;
                o->ntasks = v.ntasks;
                o->healthy = v.healthy;
                o->drained = v.drained;
                o->reserved = v.reserved;
                s->gpus_healthy += v.healthy;
                o->memory_used_mb = o->util_pct = o->temp_c = o->power_mw = -1;
                o->sm_clock_mhz = o->mem_clock_mhz = -1;
                o->ecc_corrected = o->ecc_uncorrected = o->xid_errors = o->throttle_reasons = -1;
                const gp_gpu_info *in = gp_daemon_gpu_info(d, g); /* the server's own or an agent's */
                if (in) {
                        o->memory_used_mb = in->memory_used_mb;
                        o->util_pct = in->util_pct;
                        o->temp_c = in->temp_c;
                        o->power_mw = in->power_mw;
                        o->sm_clock_mhz = in->sm_clock_mhz;
                        o->mem_clock_mhz = in->mem_clock_mhz;
                        o->ecc_corrected = in->ecc_corrected;
                        o->ecc_uncorrected = in->ecc_uncorrected;
                        o->throttle_reasons = in->throttle_reasons;
                        o->xid_errors = in->xid_errors;
                        gp_strlcpy(o->health_reason, in->health_reason, sizeof(o->health_reason));
                }
        }
        size_t pos = 0;
        gp_task *t;
        while ((t = gp_i64map_next(&d->tasks, &pos, NULL))) {
                gp_mon_tenant *tn = tenant_of(s, gp_monitor_tenant_label(d->mon, t->tenant));
                if (t->state == GP_TASK_QUEUED) {
                        double w = t->submitted_ms > 0 && now > t->submitted_ms ? (double)(now - t->submitted_ms) / 1000.0 : 0;
                        gp_hist_observe(&s->queued_wait, w);
                        if (w > s->oldest_wait_s)
                                s->oldest_wait_s = w;
                        if (tn)
                                tn->queued++;
                } else if (t->state == GP_TASK_RUNNING && tn) {
                        tn->running++;
                        tn->gpus += t->n_gpus;
                        for (int k = 0; k < t->n_gpus; k++) {
                                /* a whole GPU counts as its usable memory, as the scheduler does */
                                uint32_t g;
                                gp_sched_gpu_view v;
                                if (t->memory_mb > 0 && !t->exclusive)
                                        tn->memory_mb += t->memory_mb;
                                else if (gp_sched_gpu_find(d->sched, t->gpus[k].node, t->gpus[k].index, &g) == 0 &&
                                         gp_sched_gpu_get(d->sched, g, &v) == 0)
                                        tn->memory_mb += v.memory_usable_mb;
                        }
                }
        }
        s->local = d->gpu != NULL;
        s->nnodes = gp_nodes_mon(d, s);
        pthread_mutex_unlock(&d->lock);
        s->last_gpu_read_ms = gp_monitor_last_gpu_read(d->mon);
        int64_t stale = 3 * (int64_t)d->cfg.gpu_poll_ms;
        if (stale < 10000)
                stale = 10000;
        /* before the first read the node counts as up: open() read the GPUs */
        s->node_up = s->last_gpu_read_ms == 0 ? (now - d->started_ms < stale) : (now - s->last_gpu_read_ms <= stale);
}

/* ------------------------------------------------------------------ */
/* the sampler's tick                                                  */

/* Each tenant's quota use, read under d->lock and observed after it (the
 * alerts' mutex is never held with d->lock). */
typedef struct quota_use {
        char tenant[GP_TENANT_MAX];
        double pct;
} quota_use;

typedef struct quota_list {
        quota_use *v;
        size_t n, cap;
} quota_list;

static void keep_quota(void *ud, const char *tenant, double pct) {
        quota_list *l = ud;
        quota_use *v = gp_vec_grow(l->v, &l->cap, l->n + 1, sizeof(*v), 16);
        if (!v)
                return; /* this round misses the rest: they count as not observed */
        l->v = v;
        gp_strlcpy(l->v[l->n].tenant, tenant, sizeof(l->v[l->n].tenant));
        l->v[l->n++].pct = pct;
}

static void evaluate(gp_daemon *d, const gp_mon_sample *s) {
        gp_alerts *a = d->alerts;
        quota_list quota = {0};
        if (gp_alerts_wants(a, "tenant_quota_used_pct")) {
                pthread_mutex_lock(&d->lock);
                gp_tenants_quota_used(d->tenants, s->t_ms, keep_quota, &quota);
                pthread_mutex_unlock(&d->lock);
        }
        gp_alerts_begin(a, s->t_ms);
        for (size_t i = 0; i < s->ngpus; i++) {
                const gp_mon_gpu *g = &s->gpus[i];
                gp_alerts_observe(a, "gpu_unhealthy", g->id, g->healthy ? 0 : 1);
                if (g->temp_c >= 0)
                        gp_alerts_observe(a, "gpu_temp_c", g->id, g->temp_c);
                if (g->ecc_uncorrected >= 0)
                        gp_alerts_observe(a, "gpu_ecc_uncorrected", g->id, (double)g->ecc_uncorrected);
        }
        if (s->local)
                gp_alerts_observe(a, "node_lost", "local", s->node_up ? 0 : 1);
        for (size_t i = 0; i < s->nnodes; i++)
                gp_alerts_observe(a, "node_lost", s->nodes[i].name, s->nodes[i].up ? 0 : 1);
        if (gp_alerts_wants(a, "queue_wait_p95_s"))
                gp_alerts_observe(a, "queue_wait_p95_s", "", gp_monitor_wait_p95(d->mon, s, WAIT_WINDOW_MS));
        double util = gp_mon_sample_util(s);
        if (s->queued_total > 0 && util >= 0) /* only while work waits */
                gp_alerts_observe(a, "util_pct_while_queued", "", util);
        gp_alerts_observe(a, "queued_tasks", "", (double)s->queued_total);
        for (size_t i = 0; i < quota.n; i++) /* each tenant with a quota in force */
                gp_alerts_observe(a, "tenant_quota_used_pct", quota.v[i].tenant, quota.v[i].pct);
        free(quota.v);
        /* tenant_balance: still inactive (listed with "active": false) */
        gp_alert_change ch[64];
        size_t n = gp_alerts_end(a, ch, GP_ARRAY_SIZE(ch));
        for (size_t i = 0; i < n; i++) {
                const gp_alert_change *c = &ch[i];
                if (c->fired)
                        gp_warn("alert %s FIRING%s%s: %s (value %g, %s)", c->rule, c->subject[0] ? " on " : "",
                                c->subject, c->when, c->value, c->severity);
                else
                        gp_info("alert %s resolved%s%s: %s (value %g)", c->rule, c->subject[0] ? " on " : "",
                                c->subject, c->when, c->value);
                gp_monitor_alert_event(d->mon, c->fired);
                gp_alerts_enqueue(a, c);
        }
}

void gp_monitor_tick(gp_daemon *d) {
        if (!d->mon)
                return;
        gp_mon_sample *s = malloc(sizeof(*s));
        if (!s)
                return;
        gp_monitor_collect(d, s);
        if (gp_monitor_record(d->mon, s) < 0)
                gp_debug("monitor: some history series could not be kept");
        if (d->alerts)
                evaluate(d, s);
        free(s);
}

/* ------------------------------------------------------------------ */
/* answers                                                             */

enum MHD_Result gp_mon_send(hreq *r, int status, char *body, size_t len, const char *ctype, const char *cache) {
        if (!body) {
                body = gp_http_error_body("unavailable", "out of memory");
                if (!body)
                        return MHD_NO;
                len = strlen(body);
                ctype = JSON_TYPE;
                status = 503;
        }
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", ctype);
        MHD_add_response_header(resp, "X-Gpupool-Backend", r->d->backend);
        gp_http_cors(r, resp);
        if (cache)
                MHD_add_response_header(resp, "Cache-Control", cache);
        enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
        MHD_destroy_response(resp);
        return ret;
}

static enum MHD_Result send_err(hreq *r, int status, const char *code, const char *msg) {
        char *b = gp_http_error_body(code, "%s", msg);
        return gp_mon_send(r, status, b, b ? strlen(b) : 0, JSON_TYPE, "no-store");
}

static enum MHD_Result send_buf(hreq *r, gp_buf *b, int rc, const char *ctype) {
        if (rc < 0) {
                gp_buf_done(b);
                return send_err(r, 503, "unavailable", "out of memory");
        }
        size_t len = b->len;
        char *s = gp_buf_steal(b);
        return gp_mon_send(r, 200, s, s ? len : 0, ctype, "no-store");
}

/* ---- GET /metrics ---- */

static enum MHD_Result get_prometheus(hreq *r) {
        gp_daemon *d = r->d;
        gp_mon_sample *s = malloc(sizeof(*s));
        if (!s)
                return send_err(r, 503, "unavailable", "out of memory");
        gp_monitor_collect(d, s);
        gp_buf b;
        gp_buf_init(&b, 0);
        int rc = gp_monitor_prometheus(d->mon, s, gp_now_ms() - d->started_ms, &b);
        if (rc == 0)
                rc = gp_gw_prometheus(d->gw, &b);
        if (rc == 0)
                rc = gp_disk_prometheus(d, &b);
        free(s);
        return send_buf(r, &b, rc, "text/plain; version=0.0.4; charset=utf-8");
}

/* ---- GET /api/v1/monitor/metrics ---- */

static json_t *num_or_null(double v) {
        return isfinite(v) && v >= 0 ? json_real(v) : json_null();
}

static json_t *int_or_null(int64_t v) {
        return v >= 0 ? json_integer((json_int_t)v) : json_null();
}

static const struct {
        uint64_t bit;
        const char *name;
} throttle_bits[] = {
        {0x1, "gpu_idle"},    {0x2, "applications_clocks"}, {0x4, "sw_power_cap"},   {0x8, "hw_slowdown"},
        {0x10, "sync_boost"}, {0x20, "sw_thermal"},         {0x40, "hw_thermal"},    {0x80, "hw_power_brake"},
        {0x100, "display_clocks"},
};

static json_t *gpu_json(const gp_mon_gpu *g, const char *backend) {
        json_t *o = json_object();
        json_object_set_new(o, "id", json_string(g->id));
        json_object_set_new(o, "node", json_string(g->node));
        json_object_set_new(o, "index", json_integer(g->index));
        json_object_set_new(o, "uuid", json_string(g->uuid));
        json_object_set_new(o, "name", json_string(g->name));
        json_object_set_new(o, "util_pct", int_or_null(g->util_pct));
        json_object_set_new(o, "memory_total_mb", json_integer(g->memory_total_mb));
        json_object_set_new(o, "memory_used_mb", int_or_null(g->memory_used_mb));
        json_object_set_new(o, "memory_allocated_mb", json_integer(g->memory_allocated_mb));
        json_object_set_new(o, "temp_c", int_or_null(g->temp_c));
        json_object_set_new(o, "power_w", g->power_mw >= 0 ? json_real(g->power_mw / 1000.0) : json_null());
        json_object_set_new(o, "sm_clock_mhz", int_or_null(g->sm_clock_mhz));
        json_object_set_new(o, "mem_clock_mhz", int_or_null(g->mem_clock_mhz));
        json_object_set_new(o, "ecc_corrected", int_or_null(g->ecc_corrected));
        json_object_set_new(o, "ecc_uncorrected", int_or_null(g->ecc_uncorrected));
        json_t *th = g->throttle_reasons >= 0 ? json_array() : json_null();
        for (size_t k = 0; g->throttle_reasons >= 0 && k < GP_ARRAY_SIZE(throttle_bits); k++)
                if ((uint64_t)g->throttle_reasons & throttle_bits[k].bit)
                        json_array_append_new(th, json_string(throttle_bits[k].name));
        json_object_set_new(o, "throttle_reasons", th);
        json_object_set_new(o, "tasks", json_integer(g->ntasks));
        json_object_set_new(o, "healthy", json_boolean(g->healthy));
        json_object_set_new(o, "health_reason", json_string(g->health_reason));
        json_object_set_new(o, "drained", json_boolean(g->drained));
        json_object_set_new(o, "reserved", json_boolean(g->reserved));
        json_object_set_new(o, "backend", json_string(backend));
        return o;
}

static enum MHD_Result get_snapshot(hreq *r) {
        gp_daemon *d = r->d;
        gp_mon_sample *s = malloc(sizeof(*s));
        if (!s)
                return send_err(r, 503, "unavailable", "out of memory");
        gp_monitor_collect(d, s);
        pthread_mutex_lock(&d->lock);
        uint64_t submitted = d->submitted_total, finished = d->finished_total, failed = d->failed_total,
                 cancelled = d->cancelled_total, commits = d->commits;
        pthread_mutex_unlock(&d->lock);
        gp_mon_counters c;
        gp_monitor_counters(d->mon, &c);
        json_t *q = json_array();
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                json_array_append_new(q, json_integer((json_int_t)s->queued[i]));
        double mem_util = s->memory_usable_mb ? 100.0 * (double)s->memory_allocated_mb / (double)s->memory_usable_mb : 0;
        char ts[40];
        gp_time_format(s->t_ms, ts, sizeof(ts));
        /* the fields of the first version first (docs/api.md promises them) */
        json_t *j = json_pack("{s:i,s:i,s:i,s:f,s:I,s:I,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "gpus_total",
                              (int)s->gpus_total, "gpus_usable", (int)s->gpus_usable, "gpus_busy", (int)s->gpus_busy,
                              "utilization_pct", mem_util, "tasks_queued", (json_int_t)s->queued_total,
                              "tasks_running", (json_int_t)s->running, "queued_by_priority", q,
                              "scheduled_total", (json_int_t)s->total_scheduled, "backfilled_total",
                              (json_int_t)s->total_backfilled, "submitted_total", (json_int_t)submitted,
                              "finished_total", (json_int_t)finished, "failed_total", (json_int_t)failed,
                              "cancelled_total", (json_int_t)cancelled, "store_commits", (json_int_t)commits,
                              "uptime_s", (json_int_t)((gp_now_ms() - d->started_ms) / 1000));
        if (!j) {
                free(s);
                return send_err(r, 503, "unavailable", "out of memory");
        }
        json_object_set_new(j, "sampled_at", json_string(ts));
        json_object_set_new(j, "gpus_healthy", json_integer(s->gpus_healthy));
        json_object_set_new(j, "gpu_util_pct", num_or_null(gp_mon_sample_util(s)));
        json_object_set_new(j, "memory_usable_mb", json_integer(s->memory_usable_mb));
        json_object_set_new(j, "memory_allocated_mb", json_integer(s->memory_allocated_mb));
        json_object_set_new(j, "oldest_wait_s", json_real(s->oldest_wait_s));
        json_object_set_new(j, "queue_wait_p50_s", json_real(c.wait_p50_s));
        json_object_set_new(j, "queue_wait_p95_s", json_real(c.wait_p95_s));
        json_object_set_new(j, "queue_wait_p95_5m_s", json_real(gp_monitor_wait_p95(d->mon, s, WAIT_WINDOW_MS)));
        json_object_set_new(j, "decision_latency_p95_s", json_real(c.decision_p95_s));
        json_object_set_new(j, "node_up", json_boolean(s->node_up));
        const char *only = r->admin ? NULL : r->tenant; /* a tenant key sees its own tenant only */
        json_object_set_new(j, "alerts_firing",
                            json_integer(d->alerts ? (json_int_t)gp_alerts_firing_for(d->alerts, only) : 0));
        json_t *cj = json_object();
        json_object_set_new(cj, "submitted", json_integer((json_int_t)c.submitted));
        json_object_set_new(cj, "scheduled", json_integer((json_int_t)c.scheduled));
        json_object_set_new(cj, "backfilled", json_integer((json_int_t)c.backfilled));
        json_object_set_new(cj, "succeeded", json_integer((json_int_t)c.succeeded));
        json_object_set_new(cj, "failed", json_integer((json_int_t)c.failed));
        json_object_set_new(cj, "cancelled", json_integer((json_int_t)c.cancelled));
        json_object_set_new(cj, "timeout", json_integer((json_int_t)c.timeout));
        json_object_set_new(cj, "lost", json_integer((json_int_t)c.lost));
        json_object_set_new(cj, "requeued", json_integer((json_int_t)c.requeued));
        json_object_set_new(cj, "preempted", json_integer((json_int_t)c.preempted));
        json_object_set_new(cj, "rejected_queue_full", json_integer((json_int_t)c.rejected_queue_full));
        json_object_set_new(cj, "rejected_infeasible", json_integer((json_int_t)c.rejected_infeasible));
        json_object_set_new(cj, "scheduler_passes", json_integer((json_int_t)c.sched_passes));
        json_object_set_new(cj, "decisions", json_integer((json_int_t)c.decisions));
        json_object_set_new(cj, "alerts_fired", json_integer((json_int_t)c.alerts_fired));
        json_object_set_new(cj, "alerts_resolved", json_integer((json_int_t)c.alerts_resolved));
        json_object_set_new(j, "counters", cj);
        json_t *ga = json_array();
        for (size_t i = 0; i < s->ngpus; i++)
                json_array_append_new(ga, gpu_json(&s->gpus[i], d->backend));
        json_object_set_new(j, "gpus", ga);
        /* tenants: usage now and since start; quota fields appear once tenants have quotas */
        gp_buf ub;
        gp_buf_init(&ub, 0);
        json_t *usage = gp_monitor_tenant_usage_json(d->mon, &ub) == 0 ? json_loads(ub.data ? ub.data : "{}", 0, NULL)
                                                                       : NULL;
        gp_buf_done(&ub);
        json_t *ta = json_array();
        for (size_t i = 0; i < s->ntenants; i++) {
                const gp_mon_tenant *tn = &s->tenants[i];
                json_t *u = usage ? json_object_get(usage, tn->id) : NULL;
                json_t *to = json_pack("{s:s,s:i,s:i,s:i,s:I}", "id", tn->id, "queued", tn->queued, "running",
                                       tn->running, "gpus", tn->gpus, "memory_mb", (json_int_t)tn->memory_mb);
                json_t *gs = u ? json_object_get(u, "gpu_seconds") : NULL;
                json_object_set_new(to, "gpu_seconds", gs ? json_incref(gs) : json_real(0));
                json_object_set_new(to, "quota", json_null());
                json_array_append_new(ta, to);
        }
        /* tenants with past usage but nothing active now */
        const char *k;
        json_t *u;
        json_object_foreach(usage, k, u) {
                bool seen = false;
                for (size_t i = 0; i < s->ntenants; i++)
                        seen |= !strcmp(s->tenants[i].id, k);
                if (!seen)
                        json_array_append_new(ta, json_pack("{s:s,s:i,s:i,s:i,s:i,s:O,s:n}", "id", k, "queued", 0,
                                                            "running", 0, "gpus", 0, "memory_mb", 0, "gpu_seconds",
                                                            json_object_get(u, "gpu_seconds"), "quota"));
        }
        json_decref(usage);
        if (only)
                gp_monitor_json_keep_tenant(ta, "id", only);
        json_object_set_new(j, "tenants", ta);
        json_t *gw = d->gw && d->cfg.gw.n_models ? gp_gw_stats_json(d->gw) : NULL;
        if (gw)
                json_object_set_new(gw, "configured", json_true());
        if (gw && only)
                gp_monitor_json_keep_tenant(json_object_get(gw, "tenants"), "tenant_id", only);
        json_object_set_new(j, "gateway", gw ? gw : json_pack("{s:b}", "configured", 0));
        json_object_set_new(j, "backend", json_string(d->backend));
        free(s);
        char *body = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        return gp_mon_send(r, 200, body, body ? strlen(body) : 0, JSON_TYPE, "no-store");
}

/* ---- GET /api/v1/monitor/history ---- */

static enum MHD_Result get_history(hreq *r) {
        gp_daemon *d = r->d;
        const char *metric = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "metric");
        const char *since = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "since");
        const char *gpu = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "gpu");
        const char *tenant = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "tenant");
        int64_t now = gp_now_ms(), since_ms = now - 10 * 60 * 1000, x;
        gp_buf b;
        gp_buf_init(&b, 0);
        if (!metric) {
                int rc = gp_buf_puts(&b, "{\"metrics\":[");
                for (int i = 0; rc == 0 && gp_monitor_history_metrics[i]; i++)
                        rc = gp_buf_printf(&b, "%s\"%s\"", i ? "," : "", gp_monitor_history_metrics[i]);
                rc = rc ? rc : gp_buf_printf(&b, "],\"backend\":\"%s\"}", d->backend);
                return send_buf(r, &b, rc, JSON_TYPE);
        }
        if (since) {
                /* RFC 3339, epoch milliseconds, or -SECONDS (relative to now) */
                if (since[0] == '-' && gp_parse_i64(since + 1, 0, 86400 * 2, &x) == 0)
                        since_ms = now - x * 1000;
                else if (gp_parse_i64(since, 0, INT64_MAX / 2, &x) == 0)
                        since_ms = x;
                else if (gp_time_parse(since, &x) == 0)
                        since_ms = x;
                else
                        return send_err(r, 400, "invalid_request",
                                        "since: an RFC 3339 time, epoch milliseconds, or -SECONDS (e.g. -600)");
        }
        if (since_ms < now - 24LL * 3600 * 1000)
                since_ms = now - 24LL * 3600 * 1000;
        if ((gpu && strlen(gpu) >= GP_TENANT_MAX) || (tenant && strlen(tenant) >= GP_TENANT_MAX))
                return send_err(r, 400, "invalid_request", "gpu/tenant: too long");
        const char *label = NULL;
        if (gp_monitor_history_label(metric, gpu, tenant, r->admin ? NULL : r->tenant, &label) < 0)
                return send_err(r, 404, "not_found", "no such tenant"); /* another tenant's series: ids do not leak */
        int rc = gp_monitor_history_json(d->mon, metric, label, since_ms, now, d->backend, &b);
        if (rc == -ENOENT) {
                gp_buf_done(&b);
                return send_err(r, 404, "not_found",
                                "unknown metric; GET /api/v1/monitor/history without metric= lists them");
        }
        return send_buf(r, &b, rc, JSON_TYPE);
}

/* ---- GET /api/v1/alerts ---- */

static enum MHD_Result get_alerts(hreq *r) {
        gp_daemon *d = r->d;
        gp_buf b;
        gp_buf_init(&b, 0);
        int rc;
        if (d->alerts)
                rc = gp_alerts_json_for(d->alerts, gp_now_ms(), r->admin ? NULL : r->tenant, &b);
        else
                rc = gp_buf_puts(&b, "{\"alerts\":[],\"resolved\":[],\"rules\":[]");
        rc = rc ? rc : gp_buf_printf(&b, ",\"backend\":\"%s\"}", d->backend);
        return send_buf(r, &b, rc, JSON_TYPE);
}

/* ------------------------------------------------------------------ */
/* routing                                                             */

/* this module's rows of the route table (routes.h) */

static int h_prometheus(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_prometheus(r);
}

static int h_snapshot(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_snapshot(r);
}

static int h_history(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_history(r);
}

static int h_alerts(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_alerts(r);
}

/* the dashboard (web.c): "/", "/index.html", "/favicon.ico", "/static/...";
 * open rows: the page and its assets hold no data (the page asks for a key) */
static int h_web(hreq *r, const gp_route_arg *a) {
        enum MHD_Result ret = MHD_NO;
        gp_web_route(r, a->url, !strcmp(a->method, "HEAD"), &ret);
        return ret;
}

const gp_route gp_monitor_routes[] = {
        {GP_GET, "/metrics", GP_ROUTE_ADMIN, h_prometheus, "/metrics needs an admin key (it covers every tenant)", 0},
        {GP_GET, "/api/v1/monitor/metrics", GP_ROUTE_TENANT, h_snapshot, NULL, 0},
        {GP_GET, "/api/v1/monitor/history", GP_ROUTE_TENANT, h_history, NULL, 0},
        {GP_GET, "/api/v1/alerts", GP_ROUTE_TENANT, h_alerts, NULL, 0},
        {GP_GET, "/", GP_ROUTE_OPEN, h_web, NULL, 0},
        {GP_GET, "/index.html", GP_ROUTE_OPEN, h_web, NULL, 0},
        {GP_GET, "/favicon.ico", GP_ROUTE_OPEN, h_web, NULL, 0},
        {GP_GET, "/static/{file*}", GP_ROUTE_OPEN, h_web, NULL, 0},
        {0, NULL, 0, NULL, NULL, 0},
};
