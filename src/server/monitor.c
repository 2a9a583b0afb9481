/* monitor.c - the metrics registry: fixed-bucket histograms, history rings,
 * counters, the Prometheus exposition and the history JSON (monitor.h).
 *
 * Pure: no I/O and no clock reads; every time comes from the caller.  The
 * registry's state is behind one leaf mutex (m->mu): callers may hold the
 * daemon's lock when they call in, never the other way round.
 *
 * Invariants:
 *   - a histogram's counts add up to its count; its bounds increase;
 *   - a ring never reports a value for a slot that was not written since
 *     the ring last passed it (skipped slots are cleared when time moves);
 *   - tenant label values are the first GP_MON_MAX_TENANTS distinct ids
 *     seen, in that order; every other id is "other" (slot
 *     GP_MON_MAX_TENANTS), so the label set is bounded for the life of
 *     the process;
 *   - at most GP_MON_MAX_SERIES history series exist; a series that does
 *     not fit is not recorded (counted in series_dropped).
 */
#include "server/monitor.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ------------------------------------------------------------------ */
/* histograms                                                          */

const double gp_hist_wait_bounds[] = {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
                                      14400, 28800, 86400};
const int gp_hist_wait_nb = (int)GP_ARRAY_SIZE(gp_hist_wait_bounds);
const double gp_hist_latency_bounds[] = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                         0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
const int gp_hist_latency_nb = (int)GP_ARRAY_SIZE(gp_hist_latency_bounds);

void gp_hist_init(gp_hist *h, const double *bounds, int nb) {
        memset(h, 0, sizeof(*h));
        if (nb < 1)
                nb = 1;
        if (nb > GP_HIST_MAX_BUCKETS)
                nb = GP_HIST_MAX_BUCKETS;
        h->bounds = bounds;
        h->nb = nb;
}

void gp_hist_observe(gp_hist *h, double v) {
        if (isnan(v))
                return;
        int i = 0;
        while (i < h->nb && v > h->bounds[i])
                i++;
        h->counts[i]++;
        h->count++;
        h->sum += v;
}

void gp_hist_diff(gp_hist *out, const gp_hist *a, const gp_hist *b) {
        gp_hist r;
        gp_hist_init(&r, a->bounds, a->nb);
        for (int i = 0; i <= a->nb; i++) {
                r.counts[i] = a->counts[i] > b->counts[i] ? a->counts[i] - b->counts[i] : 0;
                r.count += r.counts[i];
        }
        r.sum = a->sum - b->sum;
        if (r.sum < 0 || r.count == 0)
                r.sum = 0;
        *out = r;
}

double gp_hist_quantile(const gp_hist *h, double q) {
        if (h->count == 0 || !(q > 0))
                return 0;
        if (q > 1)
                q = 1;
        double rank = q * (double)h->count;
        uint64_t cum = 0;
        for (int i = 0; i <= h->nb; i++) {
                uint64_t prev = cum;
                cum += h->counts[i];
                if ((double)cum >= rank && h->counts[i] > 0) {
                        if (i == h->nb)
                                return h->bounds[h->nb - 1];
                        double lo = i == 0 ? 0 : h->bounds[i - 1], hi = h->bounds[i];
                        if (i == 0 && hi <= 0)
                                return hi;
                        return lo + (hi - lo) * ((rank - (double)prev) / (double)h->counts[i]);
                }
        }
        return h->bounds[h->nb - 1];
}

/* ------------------------------------------------------------------ */
/* rings                                                               */

int gp_ring_init(gp_ring *r, int64_t step_ms, uint32_t n) {
        memset(r, 0, sizeof(*r));
        if (step_ms <= 0 || n == 0 || n > (1u << 24))
                return -EINVAL;
        r->sum = calloc(n, sizeof(*r->sum));
        r->cnt = calloc(n, sizeof(*r->cnt));
        if (!r->sum || !r->cnt) {
                gp_ring_done(r);
                return -ENOMEM;
        }
        r->step_ms = step_ms;
        r->n = n;
        r->head = -1;
        return 0;
}

void gp_ring_done(gp_ring *r) {
        free(r->sum);
        free(r->cnt);
        memset(r, 0, sizeof(*r));
        r->head = -1;
}

void gp_ring_add(gp_ring *r, int64_t t_ms, double v) {
        if (!r->n || t_ms < 0 || isnan(v))
                return;
        int64_t slot = t_ms / r->step_ms;
        if (r->head < 0 || slot > r->head) {
                /* clear the slots time skipped over (at most the whole ring) */
                int64_t from = r->head < 0 ? slot - (int64_t)r->n + 1 : r->head + 1;
                if (slot - from >= (int64_t)r->n)
                        from = slot - (int64_t)r->n + 1;
                for (int64_t s = from; s <= slot; s++) {
                        uint32_t i = (uint32_t)(((s % (int64_t)r->n) + (int64_t)r->n) % (int64_t)r->n);
                        r->sum[i] = 0;
                        r->cnt[i] = 0;
                }
                r->head = slot;
        } else if (slot <= r->head - (int64_t)r->n) {
                return; /* older than the ring */
        }
        uint32_t i = (uint32_t)(slot % (int64_t)r->n);
        if (r->cnt[i] == UINT16_MAX)
                return;
        r->sum[i] += (float)v;
        r->cnt[i]++;
}

size_t gp_ring_read(const gp_ring *r, int64_t since_ms, gp_point *out, size_t max) {
        if (!r->n || r->head < 0)
                return 0;
        int64_t first = r->head - (int64_t)r->n + 1;
        if (first < 0)
                first = 0;
        int64_t want = since_ms <= 0 ? first : (since_ms + r->step_ms - 1) / r->step_ms;
        if (want > first)
                first = want;
        size_t k = 0;
        for (int64_t s = first; s <= r->head; s++) {
                uint32_t i = (uint32_t)(s % (int64_t)r->n);
                if (!r->cnt[i])
                        continue;
                if (k < max) {
                        out[k].t_ms = s * r->step_ms;
                        out[k].v = (double)r->sum[i] / r->cnt[i];
                }
                k++;
        }
        return k;
}

/* ------------------------------------------------------------------ */
/* samples                                                             */

double gp_mon_sample_util(const gp_mon_sample *s) {
        double sum = 0;
        int n = 0;
        for (size_t i = 0; i < s->ngpus; i++) {
                const gp_mon_gpu *g = &s->gpus[i];
                if (!g->healthy || g->util_pct < 0)
                        continue;
                sum += g->util_pct;
                n++;
        }
        return n ? sum / n : -1;
}

/* ------------------------------------------------------------------ */
/* the registry                                                        */

#define SNAPS 16                    /* cumulative wait snapshots, one a minute */
#define HASH_SLOTS 2048             /* > 2 * GP_MON_MAX_SERIES */
#define OTHER GP_MON_MAX_TENANTS

typedef struct tenant_ctr {
        char id[GP_TENANT_MAX];     /* "" = unused (slot OTHER is "other") */
        uint64_t submitted;
        uint64_t finished;
        double gpu_seconds;         /* GPU-seconds held by its running tasks */
} tenant_ctr;

typedef struct series {
        char metric[32];            /* a name of gp_monitor_history_metrics */
        char label[GP_TENANT_MAX + GP_NODE_MAX]; /* gpu id or tenant, "" for cluster series */
        gp_ring fine, coarse;
} series;

struct gp_monitor {
        pthread_mutex_t mu;
        uint64_t submitted, scheduled, backfilled, requeued, preempted;
        uint64_t estimated, estimated_within_2x;
        uint64_t expected_starts, expected_starts_within_2x;
        uint64_t wd_over, wd_stopped;
        uint64_t finished[GP_TASK_STATE_COUNT];
        uint64_t rejected_queue_full, rejected_infeasible, rejected_other;
        uint64_t sched_passes, decisions, store_commits, store_commit_tasks;
        uint64_t alerts_fired, alerts_resolved, webhook_ok, webhook_failed, webhook_dropped;
        gp_hist wait;               /* queue wait of started tasks (s) */
        gp_hist latency;            /* scheduler pass duration (s) */
        tenant_ctr tenants[GP_MON_MAX_TENANTS + 1];
        series *series[GP_MON_MAX_SERIES];
        size_t nseries;
        uint64_t series_dropped;
        int32_t hash[HASH_SLOTS];   /* series index + 1, 0 = empty */
        gp_hist snaps[SNAPS];       /* cumulative m->wait, one a minute */
        int64_t snap_t[SNAPS];
        int nsnaps, snap_next;
        int64_t last_record_ms;     /* of the previous gp_monitor_record, 0 = none */
        int64_t last_gpu_ok_ms;     /* last successful GPU read, 0 = never */
        uint64_t gpu_read_failures;
};

const char *const gp_monitor_history_metrics[] = {
        "util_pct", "queued", "running", "gpus_busy", "memory_allocated_pct",
        "gpu_util_pct", "gpu_memory_used_mb", "gpu_temp_c", "gpu_power_w",
        "tenant_gpus", "tenant_running", "tenant_queued", NULL,
};

int gp_monitor_new(gp_monitor **ret) {
        gp_monitor *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        pthread_mutex_init(&m->mu, NULL);
        gp_hist_init(&m->wait, gp_hist_wait_bounds, gp_hist_wait_nb);
        gp_hist_init(&m->latency, gp_hist_latency_bounds, gp_hist_latency_nb);
        gp_strlcpy(m->tenants[OTHER].id, "other", sizeof(m->tenants[OTHER].id));
        *ret = m;
        return 0;
}

void gp_monitor_free(gp_monitor *m) {
        if (!m)
                return;
        for (size_t i = 0; i < m->nseries; i++) {
                gp_ring_done(&m->series[i]->fine);
                gp_ring_done(&m->series[i]->coarse);
                free(m->series[i]);
        }
        pthread_mutex_destroy(&m->mu);
        free(m);
}

/* The tenant's counter slot (a new one while there is room, else OTHER).
 * m->mu held. */
static int tenant_slot(gp_monitor *m, const char *id) {
        if (!id || !*id)
                id = "default";
        for (int i = 0; i < GP_MON_MAX_TENANTS; i++) {
                if (!m->tenants[i].id[0]) {
                        gp_strlcpy(m->tenants[i].id, id, sizeof(m->tenants[i].id));
                        return i;
                }
                if (!strcmp(m->tenants[i].id, id))
                        return i;
        }
        return OTHER;
}

void gp_monitor_task_submitted(gp_monitor *m, const char *tenant) {
        if (!m)
                return;
        pthread_mutex_lock(&m->mu);
        m->submitted++;
        m->tenants[tenant_slot(m, tenant)].submitted++;
        pthread_mutex_unlock(&m->mu);
}

void gp_monitor_submit_rejected(gp_monitor *m, const char *reason) {
        if (!m)
                return;
        pthread_mutex_lock(&m->mu);
        if (reason && !strcmp(reason, "queue_full"))
                m->rejected_queue_full++;
        else if (reason && !strcmp(reason, "infeasible"))
                m->rejected_infeasible++;
        else
                m->rejected_other++;
        pthread_mutex_unlock(&m->mu);
}

void gp_monitor_task_started(gp_monitor *m, const char *tenant, int priority, int64_t wait_ms, bool backfilled) {
        if (!m)
                return;
        (void)priority;
        pthread_mutex_lock(&m->mu);
        tenant_slot(m, tenant);
        m->scheduled++;
        if (backfilled)
                m->backfilled++;
        gp_hist_observe(&m->wait, wait_ms > 0 ? (double)wait_ms / 1000.0 : 0);
        pthread_mutex_unlock(&m->mu);
}

void gp_monitor_task_finished(gp_monitor *m, const char *tenant, gp_task_state st) {
        if (!m || (unsigned)st >= GP_TASK_STATE_COUNT)
                return;
        pthread_mutex_lock(&m->mu);
        m->finished[st]++;
        m->tenants[tenant_slot(m, tenant)].finished++;
        pthread_mutex_unlock(&m->mu);
}

/* Under m's lock: *a += da and, with b, *b += db (the plain counters). */
static void count(gp_monitor *m, uint64_t *a, uint64_t da, uint64_t *b, uint64_t db) {
        pthread_mutex_lock(&m->mu);
        *a += da;
        if (b)
                *b += db;
        pthread_mutex_unlock(&m->mu);
}

void gp_monitor_watchdog(gp_monitor *m, bool stopped) {
        if (m)
                count(m, stopped ? &m->wd_stopped : &m->wd_over, 1, NULL, 0);
}

void gp_monitor_task_requeued(gp_monitor *m) {
        if (m)
                count(m, &m->requeued, 1, NULL, 0);
}

void gp_monitor_task_preempted(gp_monitor *m) {
        if (m)
                count(m, &m->preempted, 1, NULL, 0);
}

void gp_monitor_expected_start(gp_monitor *m, bool within_2x) {
        if (m)
                count(m, &m->expected_starts, 1, &m->expected_starts_within_2x, within_2x);
}

void gp_monitor_estimate(gp_monitor *m, bool within_2x) {
        if (m)
                count(m, &m->estimated, 1, &m->estimated_within_2x, within_2x);
}

void gp_monitor_sched_pass(gp_monitor *m, int64_t dur_ns, size_t ndecisions) {
        if (!m)
                return;
        pthread_mutex_lock(&m->mu);
        m->sched_passes++;
        m->decisions += ndecisions;
        gp_hist_observe(&m->latency, dur_ns > 0 ? (double)dur_ns / 1e9 : 0);
        pthread_mutex_unlock(&m->mu);
}

void gp_monitor_store_commit(gp_monitor *m, size_t ntasks) {
        if (m)
                count(m, &m->store_commits, 1, &m->store_commit_tasks, ntasks);
}

void gp_monitor_alert_event(gp_monitor *m, bool fired) {
        if (m)
                count(m, fired ? &m->alerts_fired : &m->alerts_resolved, 1, NULL, 0);
}

void gp_monitor_webhook_result(gp_monitor *m, const char *result) {
        if (!m)
                return;
        pthread_mutex_lock(&m->mu);
        if (!strcmp(result, "ok"))
                m->webhook_ok++;
        else if (!strcmp(result, "dropped"))
                m->webhook_dropped++;
        else
                m->webhook_failed++;
        pthread_mutex_unlock(&m->mu);
}

void gp_monitor_gpu_read_at(gp_monitor *m, bool ok, int64_t now_ms) {
        if (!m)
                return;
        pthread_mutex_lock(&m->mu);
        if (ok)
                m->last_gpu_ok_ms = now_ms;
        else
                m->gpu_read_failures++;
        pthread_mutex_unlock(&m->mu);
}

int64_t gp_monitor_last_gpu_read(gp_monitor *m) {
        if (!m)
                return 0;
        pthread_mutex_lock(&m->mu);
        int64_t t = m->last_gpu_ok_ms;
        pthread_mutex_unlock(&m->mu);
        return t;
}

const char *gp_monitor_tenant_label(gp_monitor *m, const char *tenant) {
        if (!m)
                return "other";
        pthread_mutex_lock(&m->mu);
        const char *l = m->tenants[tenant_slot(m, tenant)].id; /* stable: slots are never renamed */
        pthread_mutex_unlock(&m->mu);
        return l;
}

/* ---- series ---- */

static uint32_t series_hash(const char *metric, const char *label) {
        uint32_t h = 2166136261u;
        for (const char *p = metric; *p; p++)
                h = (h ^ (uint8_t)*p) * 16777619u;
        h = (h ^ 0xff) * 16777619u;
        for (const char *p = label; *p; p++)
                h = (h ^ (uint8_t)*p) * 16777619u;
        return h;
}

/* Find or create a series; NULL when the cap is reached or out of memory.
 * m->mu held. */
static series *series_get(gp_monitor *m, const char *metric, const char *label, bool create) {
        uint32_t h = series_hash(metric, label) % HASH_SLOTS;
        for (uint32_t probe = 0; probe < HASH_SLOTS; probe++, h = (h + 1) % HASH_SLOTS) {
                int32_t v = m->hash[h];
                if (v == 0)
                        break;
                series *s = m->series[v - 1];
                if (!strcmp(s->metric, metric) && !strcmp(s->label, label))
                        return s;
        }
        if (!create)
                return NULL;
        if (m->nseries >= GP_MON_MAX_SERIES) {
                m->series_dropped++;
                return NULL;
        }
        series *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        if (gp_strlcpy(s->metric, metric, sizeof(s->metric)) >= sizeof(s->metric) ||
            gp_strlcpy(s->label, label, sizeof(s->label)) >= sizeof(s->label) ||
            gp_ring_init(&s->fine, GP_MON_FINE_STEP_MS, GP_MON_FINE_SLOTS) < 0 ||
            gp_ring_init(&s->coarse, GP_MON_COARSE_STEP_MS, GP_MON_COARSE_SLOTS) < 0) {
                gp_ring_done(&s->fine);
                gp_ring_done(&s->coarse);
                free(s);
                return NULL;
        }
        m->series[m->nseries++] = s;
        m->hash[h] = (int32_t)m->nseries; /* h is the empty slot the probe stopped at */
        return s;
}

static int put(gp_monitor *m, int64_t t, const char *metric, const char *label, double v) {
        if (isnan(v) || v < 0)
                return 0; /* unknown reading: a gap, not a zero */
        series *s = series_get(m, metric, label, true);
        if (!s)
                return -ENOMEM;
        gp_ring_add(&s->fine, t, v);
        gp_ring_add(&s->coarse, t, v);
        return 0;
}

int gp_monitor_record(gp_monitor *m, const gp_mon_sample *s) {
        if (!m)
                return 0;
        int rc = 0;
        int64_t t = s->t_ms;
        pthread_mutex_lock(&m->mu);
        double dt = m->last_record_ms > 0 && t > m->last_record_ms ? (double)(t - m->last_record_ms) / 1000.0 : 0;
        if (dt > 60)
                dt = 60;
        m->last_record_ms = t;
        rc |= put(m, t, "util_pct", "", gp_mon_sample_util(s));
        rc |= put(m, t, "queued", "", (double)s->queued_total);
        rc |= put(m, t, "running", "", (double)s->running);
        rc |= put(m, t, "gpus_busy", "", (double)s->gpus_busy);
        rc |= put(m, t, "memory_allocated_pct", "",
                  s->memory_usable_mb ? 100.0 * (double)s->memory_allocated_mb / (double)s->memory_usable_mb : 0);
        for (size_t i = 0; i < s->ngpus; i++) {
                const gp_mon_gpu *g = &s->gpus[i];
                rc |= put(m, t, "gpu_util_pct", g->id, g->util_pct);
                rc |= put(m, t, "gpu_memory_used_mb", g->id, (double)g->memory_used_mb);
                rc |= put(m, t, "gpu_temp_c", g->id, g->temp_c);
                rc |= put(m, t, "gpu_power_w", g->id, g->power_mw < 0 ? -1 : g->power_mw / 1000.0);
        }
        for (size_t i = 0; i < s->ntenants; i++) {
                const gp_mon_tenant *tn = &s->tenants[i];
                rc |= put(m, t, "tenant_gpus", tn->id, tn->gpus);
                rc |= put(m, t, "tenant_running", tn->id, tn->running);
                rc |= put(m, t, "tenant_queued", tn->id, tn->queued);
                if (dt > 0 && tn->gpus > 0)
                        m->tenants[tenant_slot(m, tn->id)].gpu_seconds += dt * tn->gpus;
        }
        /* one cumulative wait snapshot a minute, for windowed quantiles */
        int last = (m->snap_next + SNAPS - 1) % SNAPS;
        if (m->nsnaps == 0 || t - m->snap_t[last] >= 60000) {
                m->snaps[m->snap_next] = m->wait;
                m->snap_t[m->snap_next] = t;
                m->snap_next = (m->snap_next + 1) % SNAPS;
                if (m->nsnaps < SNAPS)
                        m->nsnaps++;
        }
        pthread_mutex_unlock(&m->mu);
        return rc ? -ENOMEM : 0;
}

double gp_monitor_wait_p95(gp_monitor *m, const gp_mon_sample *s, int64_t window_ms) {
        gp_hist h;
        gp_hist_init(&h, gp_hist_wait_bounds, gp_hist_wait_nb);
        if (m) {
                pthread_mutex_lock(&m->mu);
                /* the newest snapshot at least window_ms old, else the oldest */
                int best = -1;
                for (int k = 0; k < m->nsnaps; k++) {
                        int i = (m->snap_next + SNAPS - 1 - k) % SNAPS;
                        best = i;
                        if (s->t_ms - m->snap_t[i] >= window_ms)
                                break;
                }
                if (best >= 0)
                        gp_hist_diff(&h, &m->wait, &m->snaps[best]);
                else
                        h = m->wait;
                pthread_mutex_unlock(&m->mu);
        }
        if (s->queued_wait.nb == h.nb)
                for (int i = 0; i <= h.nb; i++) {
                        h.counts[i] += s->queued_wait.counts[i];
                        h.count += s->queued_wait.counts[i];
                }
        return gp_hist_quantile(&h, 0.95);
}

void gp_monitor_counters(gp_monitor *m, gp_mon_counters *ret) {
        gp_mon_counters c;
        memset(&c, 0, sizeof(c));
        if (m) {
                pthread_mutex_lock(&m->mu);
                c.submitted = m->submitted;
                c.scheduled = m->scheduled;
                c.backfilled = m->backfilled;
                for (int i = GP_TASK_SUCCEEDED; i < GP_TASK_STATE_COUNT; i++)
                        c.finished += m->finished[i];
                c.succeeded = m->finished[GP_TASK_SUCCEEDED];
                c.failed = m->finished[GP_TASK_FAILED];
                c.cancelled = m->finished[GP_TASK_CANCELLED];
                c.timeout = m->finished[GP_TASK_TIMEOUT];
                c.lost = m->finished[GP_TASK_LOST];
                c.requeued = m->requeued;
                c.preempted = m->preempted;
                c.estimated = m->estimated;
                c.estimated_within_2x = m->estimated_within_2x;
                c.expected_starts = m->expected_starts;
                c.expected_starts_within_2x = m->expected_starts_within_2x;
                c.wd_over = m->wd_over;
                c.wd_stopped = m->wd_stopped;
                c.rejected_queue_full = m->rejected_queue_full;
                c.rejected_infeasible = m->rejected_infeasible;
                c.rejected_other = m->rejected_other;
                c.sched_passes = m->sched_passes;
                c.decisions = m->decisions;
                c.store_commits = m->store_commits;
                c.alerts_fired = m->alerts_fired;
                c.alerts_resolved = m->alerts_resolved;
                c.webhook_ok = m->webhook_ok;
                c.webhook_failed = m->webhook_failed;
                c.webhook_dropped = m->webhook_dropped;
                c.wait_p50_s = gp_hist_quantile(&m->wait, 0.5);
                c.wait_p95_s = gp_hist_quantile(&m->wait, 0.95);
                c.decision_p95_s = gp_hist_quantile(&m->latency, 0.95);
                pthread_mutex_unlock(&m->mu);
        }
        *ret = c;
}

int gp_monitor_tenant_usage_json(gp_monitor *m, gp_buf *out) {
        int r = gp_buf_puts(out, "{");
        if (!m)
                return r ? r : gp_buf_puts(out, "}");
        pthread_mutex_lock(&m->mu);
        bool first = true;
        for (int i = 0; r == 0 && i <= OTHER; i++) {
                const tenant_ctr *t = &m->tenants[i];
                if (!t->id[0] || (i == OTHER && t->submitted == 0 && t->gpu_seconds == 0))
                        continue;
                r = first ? 0 : gp_buf_puts(out, ",");
                r = r ? r : gp_buf_json_str(out, t->id);
                r = r ? r : gp_buf_printf(out, ":{\"gpu_seconds\":%.1f,\"submitted\":%" PRIu64 ",\"finished\":%" PRIu64 "}",
                                          t->gpu_seconds, t->submitted, t->finished);
                first = false;
        }
        pthread_mutex_unlock(&m->mu);
        return r ? r : gp_buf_puts(out, "}");
}

/* ------------------------------------------------------------------ */
/* Prometheus text format                                              */

typedef struct expo {
        gp_buf *b;
        int rc;
} expo;

static void family(expo *e, const char *name, const char *type, const char *help) {
        if (e->rc)
                return;
        e->rc = gp_buf_printf(e->b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value escaped as the text format wants (\\, \", \n). */
static void label_value(expo *e, const char *v) {
        for (const char *p = v; !e->rc && *p; p++) {
                if (*p == '\\')
                        e->rc = gp_buf_puts(e->b, "\\\\");
                else if (*p == '"')
                        e->rc = gp_buf_puts(e->b, "\\\"");
                else if (*p == '\n')
                        e->rc = gp_buf_puts(e->b, "\\n");
                else
                        e->rc = gp_buf_append(e->b, p, 1);
        }
}

/* name{k1="v1",k2="v2"} value: labels as alternating key, value, NULL-ended. */
static void line_labels(expo *e, const char *name, const char *const *labels, double v) {
        if (e->rc)
                return;
        e->rc = gp_buf_puts(e->b, name);
        if (labels && labels[0]) {
                e->rc = e->rc ? e->rc : gp_buf_puts(e->b, "{");
                for (int i = 0; labels[i] && labels[i + 1]; i += 2) {
                        e->rc = e->rc ? e->rc : gp_buf_printf(e->b, "%s%s=\"", i ? "," : "", labels[i]);
                        label_value(e, labels[i + 1]);
                        e->rc = e->rc ? e->rc : gp_buf_puts(e->b, "\"");
                }
                e->rc = e->rc ? e->rc : gp_buf_puts(e->b, "}");
        }
        if (e->rc)
                return;
        if (isnan(v))
                e->rc = gp_buf_puts(e->b, " NaN\n");
        else if (isinf(v))
                e->rc = gp_buf_puts(e->b, v > 0 ? " +Inf\n" : " -Inf\n");
        else if (v == floor(v) && fabs(v) < 9e15)
                e->rc = gp_buf_printf(e->b, " %.0f\n", v);
        else
                e->rc = gp_buf_printf(e->b, " %.9g\n", v);
}

static void line(expo *e, const char *name, double v) {
        line_labels(e, name, NULL, v);
}

static void line1(expo *e, const char *name, const char *k, const char *val, double v) {
        const char *l[] = {k, val, NULL};
        line_labels(e, name, l, v);
}

static void histogram(expo *e, const char *name, const char *help, const gp_hist *h) {
        char n[128], le[32];
        family(e, name, "histogram", help);
        uint64_t cum = 0;
        snprintf(n, sizeof(n), "%s_bucket", name);
        for (int i = 0; i < h->nb; i++) {
                cum += h->counts[i];
                snprintf(le, sizeof(le), "%g", h->bounds[i]);
                line1(e, n, "le", le, (double)cum);
        }
        line1(e, n, "le", "+Inf", (double)h->count);
        snprintf(n, sizeof(n), "%s_sum", name);
        line(e, n, h->sum);
        snprintf(n, sizeof(n), "%s_count", name);
        line(e, n, (double)h->count);
}

/* NVML throttle reason bits (nvmlClocksThrottleReason*) and their label. */
static const struct {
        uint64_t bit;
        const char *name;
} throttle_names[] = {
        {0x1, "gpu_idle"},         {0x2, "applications_clocks"}, {0x4, "sw_power_cap"},
        {0x8, "hw_slowdown"},      {0x10, "sync_boost"},         {0x20, "sw_thermal"},
        {0x40, "hw_thermal"},      {0x80, "hw_power_brake"},     {0x100, "display_clocks"},
};

/* Per-GPU gauge: one line per GPU whose value is known (>= 0). */
typedef double (*gpu_value)(const gp_mon_gpu *g);
static void gpu_family(expo *e, const gp_mon_sample *s, const char *name, const char *type, const char *help,
                       gpu_value fn) {
        family(e, name, type, help);
        for (size_t i = 0; i < s->ngpus; i++) {
                const gp_mon_gpu *g = &s->gpus[i];
                double v = fn(g);
                if (v < 0)
                        continue;
                char idx[16];
                snprintf(idx, sizeof(idx), "%d", g->index);
                const char *l[] = {"node", g->node, "gpu", idx, NULL};
                line_labels(e, name, l, v);
        }
}

static double g_util(const gp_mon_gpu *g) { return g->util_pct < 0 ? -1 : g->util_pct / 100.0; }
static double g_mem_total(const gp_mon_gpu *g) { return (double)g->memory_total_mb * 1048576.0; }
static double g_mem_used(const gp_mon_gpu *g) { return g->memory_used_mb < 0 ? -1 : (double)g->memory_used_mb * 1048576.0; }
static double g_mem_alloc(const gp_mon_gpu *g) { return (double)g->memory_allocated_mb * 1048576.0; }
static double g_temp(const gp_mon_gpu *g) { return g->temp_c; }
static double g_xid(const gp_mon_gpu *g) { return g->xid_errors < 0 ? -1 : (double)g->xid_errors; }
static double g_power(const gp_mon_gpu *g) { return g->power_mw < 0 ? -1 : g->power_mw / 1000.0; }
static double g_sm_clock(const gp_mon_gpu *g) { return g->sm_clock_mhz < 0 ? -1 : g->sm_clock_mhz * 1e6; }
static double g_mem_clock(const gp_mon_gpu *g) { return g->mem_clock_mhz < 0 ? -1 : g->mem_clock_mhz * 1e6; }
static double g_healthy(const gp_mon_gpu *g) { return g->healthy; }
static double g_drained(const gp_mon_gpu *g) { return g->drained; }
static double g_tasks(const gp_mon_gpu *g) { return g->ntasks; }

int gp_monitor_prometheus(gp_monitor *m, const gp_mon_sample *s, int64_t uptime_ms, gp_buf *out) {
        expo e = {out, 0};
        char v[32];

        family(&e, "gpupool_info", "gauge", "Always 1; the label backend says whether the GPUs are real (nvml) or simulated (sim).");
        line1(&e, "gpupool_info", "backend", s->backend ? s->backend : "", 1);
        family(&e, "gpupool_uptime_seconds", "gauge", "Seconds since the server started.");
        line(&e, "gpupool_uptime_seconds", (double)uptime_ms / 1000.0);

        /* ---- GPUs ---- */
        family(&e, "gpupool_gpu_info", "gauge", "Always 1 per GPU; labels name the device.");
        for (size_t i = 0; i < s->ngpus; i++) {
                const gp_mon_gpu *g = &s->gpus[i];
                char idx[16];
                snprintf(idx, sizeof(idx), "%d", g->index);
                const char *l[] = {"node", g->node, "gpu", idx, "uuid", g->uuid, "name", g->name,
                                   "backend", s->backend ? s->backend : "", NULL};
                line_labels(&e, "gpupool_gpu_info", l, 1);
        }
        gpu_family(&e, s, "gpupool_gpu_utilization_ratio", "gauge",
                   "Fraction of the last sample period a kernel ran on the GPU (0..1).", g_util);
        gpu_family(&e, s, "gpupool_gpu_memory_total_bytes", "gauge", "GPU memory size.", g_mem_total);
        gpu_family(&e, s, "gpupool_gpu_memory_used_bytes", "gauge", "GPU memory in use as the device reports it.", g_mem_used);
        gpu_family(&e, s, "gpupool_gpu_memory_allocated_bytes", "gauge",
                   "GPU memory the running tasks asked for (whole GPUs count as their usable memory).", g_mem_alloc);
        gpu_family(&e, s, "gpupool_gpu_temperature_celsius", "gauge", "GPU core temperature.", g_temp);
        gpu_family(&e, s, "gpupool_gpu_power_watts", "gauge", "GPU power draw.", g_power);
        gpu_family(&e, s, "gpupool_gpu_sm_clock_hertz", "gauge", "Current SM clock.", g_sm_clock);
        gpu_family(&e, s, "gpupool_gpu_memory_clock_hertz", "gauge", "Current memory clock.", g_mem_clock);
        family(&e, "gpupool_gpu_ecc_errors_total", "counter", "ECC errors since the driver loaded, by type (corrected, uncorrected).");
        for (size_t i = 0; i < s->ngpus; i++) {
                const gp_mon_gpu *g = &s->gpus[i];
                char idx[16];
                snprintf(idx, sizeof(idx), "%d", g->index);
                if (g->ecc_corrected >= 0) {
                        const char *l[] = {"node", g->node, "gpu", idx, "type", "corrected", NULL};
                        line_labels(&e, "gpupool_gpu_ecc_errors_total", l, (double)g->ecc_corrected);
                }
                if (g->ecc_uncorrected >= 0) {
                        const char *l[] = {"node", g->node, "gpu", idx, "type", "uncorrected", NULL};
                        line_labels(&e, "gpupool_gpu_ecc_errors_total", l, (double)g->ecc_uncorrected);
                }
        }
        gpu_family(&e, s, "gpupool_gpu_xid_errors_total", "counter",
                   "Xid events the GPU raised since its reader started (NVML events; absent without them).", g_xid);
        family(&e, "gpupool_gpu_throttled", "gauge", "1 while the clocks are held down for the reason in the label, else 0.");
        for (size_t i = 0; i < s->ngpus; i++) {
                const gp_mon_gpu *g = &s->gpus[i];
                if (g->throttle_reasons < 0)
                        continue;
                char idx[16];
                snprintf(idx, sizeof(idx), "%d", g->index);
                for (size_t k = 0; k < GP_ARRAY_SIZE(throttle_names); k++) {
                        const char *l[] = {"node", g->node, "gpu", idx, "reason", throttle_names[k].name, NULL};
                        line_labels(&e, "gpupool_gpu_throttled", l,
                                    ((uint64_t)g->throttle_reasons & throttle_names[k].bit) ? 1 : 0);
                }
        }
        gpu_family(&e, s, "gpupool_gpu_healthy", "gauge", "1 if the GPU answers and reports no error, else 0.", g_healthy);
        gpu_family(&e, s, "gpupool_gpu_drained", "gauge", "1 if the GPU is drained for maintenance (no new work).", g_drained);
        gpu_family(&e, s, "gpupool_gpu_tasks", "gauge", "Tasks running on the GPU.", g_tasks);

        /* ---- cluster and queue ---- */
        family(&e, "gpupool_node_up", "gauge", "1 while the node is up: local's GPUs read recently, an agent's heartbeats arriving.");
        if (s->local)
                line1(&e, "gpupool_node_up", "node", "local", s->node_up ? 1 : 0);
        for (size_t i = 0; i < s->nnodes; i++)
                line1(&e, "gpupool_node_up", "node", s->nodes[i].name, s->nodes[i].up ? 1 : 0);
        family(&e, "gpupool_gpus", "gauge", "GPUs by state: total, usable (healthy, not drained or reserved), busy (at least one task), healthy.");
        line1(&e, "gpupool_gpus", "state", "total", s->gpus_total);
        line1(&e, "gpupool_gpus", "state", "usable", s->gpus_usable);
        line1(&e, "gpupool_gpus", "state", "busy", s->gpus_busy);
        line1(&e, "gpupool_gpus", "state", "healthy", s->gpus_healthy);
        family(&e, "gpupool_memory_bytes", "gauge", "GPU memory of the pool: usable (after the safety margin) and allocated to running tasks.");
        line1(&e, "gpupool_memory_bytes", "state", "usable", (double)s->memory_usable_mb * 1048576.0);
        line1(&e, "gpupool_memory_bytes", "state", "allocated", (double)s->memory_allocated_mb * 1048576.0);
        family(&e, "gpupool_queue_tasks", "gauge", "Queued tasks per priority tier (0 most urgent).");
        for (int p = 0; p < GP_PRIORITY_LEVELS; p++) {
                snprintf(v, sizeof(v), "%d", p);
                line1(&e, "gpupool_queue_tasks", "priority", v, (double)s->queued[p]);
        }
        family(&e, "gpupool_running_tasks", "gauge", "Tasks running now (batch tasks and leases).");
        line(&e, "gpupool_running_tasks", (double)s->running);
        family(&e, "gpupool_queue_oldest_wait_seconds", "gauge", "How long the longest-waiting queued task has waited.");
        line(&e, "gpupool_queue_oldest_wait_seconds", s->oldest_wait_s);

        /* ---- tenants ---- */
        family(&e, "gpupool_tenant_queued_tasks", "gauge", "Queued tasks per tenant (tenant=\"other\" past the label cap).");
        for (size_t i = 0; i < s->ntenants; i++)
                line1(&e, "gpupool_tenant_queued_tasks", "tenant", s->tenants[i].id, s->tenants[i].queued);
        family(&e, "gpupool_tenant_running_tasks", "gauge", "Running tasks per tenant.");
        for (size_t i = 0; i < s->ntenants; i++)
                line1(&e, "gpupool_tenant_running_tasks", "tenant", s->tenants[i].id, s->tenants[i].running);
        family(&e, "gpupool_tenant_gpus", "gauge", "GPUs held by a tenant's running tasks.");
        for (size_t i = 0; i < s->ntenants; i++)
                line1(&e, "gpupool_tenant_gpus", "tenant", s->tenants[i].id, s->tenants[i].gpus);

        gp_mon_counters c;
        gp_monitor_counters(m, &c);
        if (m) {
                pthread_mutex_lock(&m->mu);
                family(&e, "gpupool_tenant_gpu_seconds_total", "counter", "GPU-seconds held by a tenant's running tasks since the server started.");
                for (int i = 0; i <= OTHER; i++)
                        if (m->tenants[i].id[0] && (i != OTHER || m->tenants[i].submitted))
                                line1(&e, "gpupool_tenant_gpu_seconds_total", "tenant", m->tenants[i].id,
                                      m->tenants[i].gpu_seconds);
                family(&e, "gpupool_tenant_tasks_submitted_total", "counter", "Tasks accepted per tenant since the server started.");
                for (int i = 0; i <= OTHER; i++)
                        if (m->tenants[i].id[0] && (i != OTHER || m->tenants[i].submitted))
                                line1(&e, "gpupool_tenant_tasks_submitted_total", "tenant", m->tenants[i].id,
                                      (double)m->tenants[i].submitted);
                gp_hist wait = m->wait, lat = m->latency;
                uint64_t fin[GP_TASK_STATE_COUNT];
                memcpy(fin, m->finished, sizeof(fin));
                uint64_t series_dropped = m->series_dropped;
                pthread_mutex_unlock(&m->mu);

                /* ---- scheduler ---- */
                family(&e, "gpupool_tasks_submitted_total", "counter", "Tasks accepted since the server started.");
                line(&e, "gpupool_tasks_submitted_total", (double)c.submitted);
                family(&e, "gpupool_tasks_scheduled_total", "counter", "Task starts (a requeued task counts again).");
                line(&e, "gpupool_tasks_scheduled_total", (double)c.scheduled);
                family(&e, "gpupool_tasks_backfilled_total", "counter", "Task starts made by backfill past a blocked task.");
                line(&e, "gpupool_tasks_backfilled_total", (double)c.backfilled);
                family(&e, "gpupool_tasks_finished_total", "counter", "Tasks that reached a final state, by state.");
                for (int st = GP_TASK_SUCCEEDED; st < GP_TASK_STATE_COUNT; st++)
                        line1(&e, "gpupool_tasks_finished_total", "state", gp_task_state_name((gp_task_state)st),
                              (double)fin[st]);
                family(&e, "gpupool_tasks_requeued_total", "counter", "Running tasks put back in the queue because their GPU failed.");
                line(&e, "gpupool_tasks_requeued_total", (double)c.requeued);
                family(&e, "gpupool_watchdog_events_total", "counter",
                       "GPU memory watchdog: tasks seen over their memory_mb (over), and stopped for it (stopped).");
                line1(&e, "gpupool_watchdog_events_total", "event", "over", (double)c.wd_over);
                line1(&e, "gpupool_watchdog_events_total", "event", "stopped", (double)c.wd_stopped);
                family(&e, "gpupool_tasks_preempted_total", "counter", "Running tasks preempted for more urgent work.");
                line(&e, "gpupool_tasks_preempted_total", (double)c.preempted);
                family(&e, "gpupool_runtime_estimates_total", "counter",
                       "Succeeded tasks that were queued with a run-time estimate learned from history.");
                line(&e, "gpupool_runtime_estimates_total", (double)c.estimated);
                family(&e, "gpupool_runtime_estimates_within_2x_total", "counter",
                       "Of them, those that ran between half and twice their estimate.");
                line(&e, "gpupool_runtime_estimates_within_2x_total", (double)c.estimated_within_2x);
                family(&e, "gpupool_expected_starts_total", "counter",
                       "Tasks that started after an expected start was shown for them (the first one shown is judged).");
                line(&e, "gpupool_expected_starts_total", (double)c.expected_starts);
                family(&e, "gpupool_expected_starts_within_2x_total", "counter",
                       "Of them, those whose wait from then was within a factor of 2 of the one foretold (10 s of slack).");
                line(&e, "gpupool_expected_starts_within_2x_total", (double)c.expected_starts_within_2x);
                family(&e, "gpupool_schedule_failures_total", "counter", "Submissions refused, by reason (queue_full, infeasible, other).");
                line1(&e, "gpupool_schedule_failures_total", "reason", "queue_full", (double)c.rejected_queue_full);
                line1(&e, "gpupool_schedule_failures_total", "reason", "infeasible", (double)c.rejected_infeasible);
                line1(&e, "gpupool_schedule_failures_total", "reason", "other", (double)c.rejected_other);
                histogram(&e, "gpupool_queue_wait_seconds", "Time from submission to start of the tasks that started.", &wait);
                family(&e, "gpupool_scheduler_passes_total", "counter", "Runs of the scheduling core.");
                line(&e, "gpupool_scheduler_passes_total", (double)c.sched_passes);
                family(&e, "gpupool_scheduler_decisions_total", "counter", "Decisions made by the scheduling core (starts and queue expiries).");
                line(&e, "gpupool_scheduler_decisions_total", (double)c.decisions);
                histogram(&e, "gpupool_scheduler_pass_duration_seconds", "Time one run of the scheduling core took (decision latency).", &lat);
                family(&e, "gpupool_store_commits_total", "counter", "Store transactions committed by the decision loop.");
                line(&e, "gpupool_store_commits_total", (double)c.store_commits);
                family(&e, "gpupool_alert_events_total", "counter", "Alert transitions, by event (fired, resolved).");
                line1(&e, "gpupool_alert_events_total", "event", "fired", (double)c.alerts_fired);
                line1(&e, "gpupool_alert_events_total", "event", "resolved", (double)c.alerts_resolved);
                family(&e, "gpupool_alert_webhook_deliveries_total", "counter", "Webhook deliveries, by result (ok, failed after retries, dropped from a full queue).");
                line1(&e, "gpupool_alert_webhook_deliveries_total", "result", "ok", (double)c.webhook_ok);
                line1(&e, "gpupool_alert_webhook_deliveries_total", "result", "failed", (double)c.webhook_failed);
                line1(&e, "gpupool_alert_webhook_deliveries_total", "result", "dropped", (double)c.webhook_dropped);
                family(&e, "gpupool_history_series_dropped_total", "counter", "History series not kept because the series cap was reached.");
                line(&e, "gpupool_history_series_dropped_total", (double)series_dropped);
        }
        /* the gateway's families (gpupool_gateway_*) are appended by the daemon (gateway.h) */
        return e.rc;
}

/* ------------------------------------------------------------------ */
/* history JSON                                                        */

int gp_monitor_history_json(gp_monitor *m, const char *metric, const char *label_value, int64_t since_ms,
                            int64_t now_ms, const char *backend, gp_buf *out) {
        bool known = false;
        for (int i = 0; gp_monitor_history_metrics[i]; i++)
                known |= !strcmp(metric, gp_monitor_history_metrics[i]);
        if (!known)
                return -ENOENT;
        bool fine = since_ms >= now_ms - (int64_t)GP_MON_FINE_SLOTS * GP_MON_FINE_STEP_MS;
        int64_t step = fine ? GP_MON_FINE_STEP_MS : GP_MON_COARSE_STEP_MS;
        size_t cap = fine ? GP_MON_FINE_SLOTS : GP_MON_COARSE_SLOTS;
        gp_point *pts = malloc(sizeof(*pts) * cap);
        if (!pts)
                return -ENOMEM;
        int r = gp_buf_printf(out, "{\"metric\":\"%s\",\"step_s\":%" PRId64 ",\"series\":[", metric, step / 1000);
        bool first = true;
        if (m) {
                pthread_mutex_lock(&m->mu);
                for (size_t i = 0; r == 0 && i < m->nseries; i++) {
                        const series *s = m->series[i];
                        if (strcmp(s->metric, metric) || (label_value && strcmp(s->label, label_value)))
                                continue;
                        size_t n = gp_ring_read(fine ? &s->fine : &s->coarse, since_ms, pts, cap);
                        if (n > cap)
                                n = cap;
                        r = gp_buf_puts(out, first ? "{\"labels\":{" : ",{\"labels\":{");
                        first = false;
                        if (r == 0 && s->label[0]) {
                                r = gp_buf_puts(out, !strncmp(metric, "tenant_", 7) ? "\"tenant\":" : "\"gpu\":");
                                r = r ? r : gp_buf_json_str(out, s->label);
                        }
                        r = r ? r : gp_buf_puts(out, "},\"points\":[");
                        for (size_t k = 0; r == 0 && k < n; k++)
                                r = gp_buf_printf(out, "%s[%" PRId64 ",%.4g]", k ? "," : "", pts[k].t_ms, pts[k].v);
                        r = r ? r : gp_buf_puts(out, "]}");
                }
                pthread_mutex_unlock(&m->mu);
        }
        r = r ? r : gp_buf_printf(out, "],\"since\":%" PRId64 ",\"backend\":\"%s\"}", since_ms,
                                  backend ? backend : "");
        free(pts);
        return r;
}

/* ------------------------------------------------------------------ */
/* what a tenant key may see                                           */

bool gp_monitor_metric_per_tenant(const char *metric) {
        return metric && !strncmp(metric, "tenant_", 7);
}

int gp_monitor_history_label(const char *metric, const char *gpu, const char *tenant, const char *only_tenant,
                             const char **ret_label) {
        if (!only_tenant) {
                *ret_label = gpu ? gpu : tenant;
                return 0;
        }
        /* a tenant key naming another tenant: 404 whatever the metric */
        if (tenant && strcmp(tenant, only_tenant))
                return -ENOENT;
        if (gp_monitor_metric_per_tenant(metric)) {
                /* its label is a tenant id: gpu= would name one too */
                if (gpu && strcmp(gpu, only_tenant))
                        return -ENOENT;
                *ret_label = only_tenant;
                return 0;
        }
        *ret_label = gpu ? gpu : tenant;
        return 0;
}

double gp_monitor_quota_used_pct(int running, int max_concurrent, int queued, int max_queued, int64_t gpus_milli,
                                 int64_t max_gpus_milli) {
        double pct = -1;
        if (max_concurrent > 0 && 100.0 * running / max_concurrent > pct)
                pct = 100.0 * running / max_concurrent;
        if (max_queued > 0 && 100.0 * queued / max_queued > pct)
                pct = 100.0 * queued / max_queued;
        if (max_gpus_milli > 0 && 100.0 * (double)gpus_milli / (double)max_gpus_milli > pct)
                pct = 100.0 * (double)gpus_milli / (double)max_gpus_milli;
        return pct;
}

size_t gp_monitor_hide_task_ids(char *text, size_t size, bool (*visible)(void *ud, int64_t id), void *ud) {
        static const char other[] = "a task of another tenant";
        if (!text || size == 0 || !strstr(text, "task ")) /* the common case: nothing to look at */
                return 0;
        char *out = malloc(size);
        if (!out) { /* cannot rewrite it: say less rather than too much */
                text[0] = '\0';
                return 0;
        }
        size_t o = 0, replaced = 0;
        const char *p = text;
        while (*p && o + 1 < size) {
                bool word = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
                if (word && !strncmp(p, "task ", 5) && isdigit((unsigned char)p[5])) {
                        const char *q = p + 5;
                        int64_t id = 0;
                        bool big = false;
                        while (isdigit((unsigned char)*q)) {
                                if (id > (INT64_MAX - 9) / 10)
                                        big = true;
                                else
                                        id = id * 10 + (*q - '0');
                                q++;
                        }
                        if (!isalnum((unsigned char)*q) && (big || !visible(ud, id))) {
                                for (size_t k = 0; other[k] && o + 1 < size; k++)
                                        out[o++] = other[k];
                                p = q;
                                replaced++;
                                continue;
                        }
                }
                out[o++] = *p++;
        }
        out[o] = '\0';
        memcpy(text, out, o + 1);
        free(out);
        return replaced;
}
