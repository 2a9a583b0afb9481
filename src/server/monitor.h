/* monitor.h - metrics of the daemon: a registry of counters, gauges and
 * fixed-bucket histograms, the Prometheus text exposition (GET /metrics),
 * the JSON snapshot (GET /api/v1/monitor/metrics) and in-memory history
 * rings (GET /api/v1/monitor/history).
 *
 * Two layers:
 *   - pure parts (gp_hist, gp_ring, gp_mon_sample and the gp_monitor
 *     registry itself): no I/O, no clock reads, no locks of the daemon;
 *     time is passed in.  Unit-tested alone (tests/unit/test-monitor.c).
 *   - the daemon glue (gp_monitor_collect, gp_monitor_tick,
 *     gp_monitor_routes, gp_monitor_attach): reads gp_daemon under its lock,
 *     answers HTTP.  Declared at the end; needs server-int.h.
 *
 * Bounded: label values are GPUs (capped at GP_MON_MAX_GPUS for history),
 * tenants (the first GP_MON_MAX_TENANTS distinct ids get their own label
 * value; the rest are counted as tenant="other"), priorities 0..9, task
 * end states and fixed reason words.  Never task ids.  History holds at
 * most GP_MON_MAX_SERIES series, each GP_MON_FINE_SLOTS one-second slots
 * and GP_MON_COARSE_SLOTS one-minute slots (about 12 KB a series).
 */
#ifndef GP_SERVER_MONITOR_H
#define GP_SERVER_MONITOR_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "core/task.h"

#define GP_MON_MAX_TENANTS 64      /* distinct tenant label values, then "other" */
#define GP_MON_MAX_GPUS 256        /* GPUs described per sample */
#define GP_MON_MAX_NODES 256       /* agent nodes described per sample (alerts, node_up) */
#define GP_MON_MAX_SERIES 1024     /* history series */
#define GP_MON_FINE_STEP_MS 1000
#define GP_MON_FINE_SLOTS 600      /* 10 minutes at 1 s */
#define GP_MON_COARSE_STEP_MS 60000
#define GP_MON_COARSE_SLOTS 1440   /* 24 hours at 1 min */
#define GP_HIST_MAX_BUCKETS 24

/* ------------------------------------------------------------------ */
/* histograms with fixed buckets                                       */

typedef struct gp_hist {
        const double *bounds;       /* upper bounds, increasing, nb of them (+Inf implied) */
        int nb;                     /* 1..GP_HIST_MAX_BUCKETS */
        uint64_t counts[GP_HIST_MAX_BUCKETS + 1]; /* per bucket (not cumulative); [nb] = above the last */
        uint64_t count;             /* observations */
        double sum;                 /* of the observed values */
} gp_hist;

/* Bucket bounds used by the daemon (seconds). */
extern const double gp_hist_wait_bounds[];      /* queue wait: 0.1 s .. 1 day */
extern const int gp_hist_wait_nb;
extern const double gp_hist_latency_bounds[];   /* decision latency: 10 us .. 1 s */
extern const int gp_hist_latency_nb;

/* bounds must outlive h; nb is clamped to 1..GP_HIST_MAX_BUCKETS. */
void gp_hist_init(gp_hist *h, const double *bounds, int nb);
/* A value goes to the first bucket whose bound is >= it (Prometheus "le").
 * NaN is ignored. */
void gp_hist_observe(gp_hist *h, double v);
/* out = a - b (same bounds; a window from two cumulative snapshots).
 * Counts never go below 0. */
void gp_hist_diff(gp_hist *out, const gp_hist *a, const gp_hist *b);
/* The q-quantile (0 < q <= 1) by linear interpolation inside the bucket
 * that holds it, as Prometheus' histogram_quantile: 0 for an empty
 * histogram; the last finite bound when it falls in the +Inf bucket. */
double gp_hist_quantile(const gp_hist *h, double q);

/* ------------------------------------------------------------------ */
/* history rings                                                       */

/* A ring of n slots of step_ms each; a slot holds the mean of the values
 * added in its interval.  Adding at time t clears the slots skipped since
 * the newest one, so a gap reads as "no value", never as an old one.
 * Values older than the ring are dropped. */
typedef struct gp_ring {
        int64_t step_ms;            /* > 0 */
        uint32_t n;                 /* slots, > 0 */
        int64_t head;               /* slot number (t / step_ms) of the newest slot, -1 = empty */
        float *sum;                 /* n: sum of the values of the slot */
        uint16_t *cnt;              /* n: how many (0 = no value) */
} gp_ring;

typedef struct gp_point {
        int64_t t_ms;               /* start of the slot */
        double v;                   /* mean over the slot */
} gp_point;

/* 0, -EINVAL, -ENOMEM. */
int gp_ring_init(gp_ring *r, int64_t step_ms, uint32_t n);
/* Takes a zeroed or done ring. */
void gp_ring_done(gp_ring *r);
void gp_ring_add(gp_ring *r, int64_t t_ms, double v);
/* Points with a value whose slot starts at or after since_ms (and at or
 * before the newest slot), oldest first; writes up to max, returns how
 * many there are. */
size_t gp_ring_read(const gp_ring *r, int64_t since_ms, gp_point *out, size_t max);

/* ------------------------------------------------------------------ */
/* one sample of the daemon's state                                    */

typedef struct gp_mon_gpu {
        char id[GP_NODE_MAX + 16];  /* "local:0" */
        char node[GP_NODE_MAX];
        int index;
        char uuid[GP_UUID_MAX];
        char name[GP_NAME_MAX];
        int64_t memory_total_mb, memory_used_mb, memory_allocated_mb; /* used: -1 unknown */
        int util_pct, temp_c, power_mw;       /* -1 unknown */
        int sm_clock_mhz, mem_clock_mhz;      /* -1 unknown */
        int64_t ecc_corrected, ecc_uncorrected; /* since boot; -1 unknown */
        int64_t xid_errors;                   /* Xid events since the reader started, -1 unknown */
        int64_t throttle_reasons;             /* NVML bit mask; -1 unknown */
        int ntasks;
        bool healthy, drained, reserved;
        char health_reason[128];
} gp_mon_gpu;

typedef struct gp_mon_tenant {
        char id[GP_TENANT_MAX];     /* a tenant id, or "other" */
        int queued, running, gpus;  /* tasks queued / running, GPUs held by its running tasks */
        int64_t memory_mb;          /* GPU memory its running tasks asked for */
} gp_mon_tenant;

typedef struct gp_mon_sample {
        int64_t t_ms;                         /* when taken (wall clock) */
        const char *backend;                  /* "sim" | "nvml" */
        size_t ngpus;
        gp_mon_gpu gpus[GP_MON_MAX_GPUS];
        uint32_t gpus_total, gpus_usable, gpus_busy, gpus_healthy;
        int64_t memory_usable_mb, memory_allocated_mb;
        size_t queued[GP_PRIORITY_LEVELS], queued_total, running;
        uint64_t total_scheduled, total_backfilled, total_expired;
        size_t ntenants;                      /* of tenants[] */
        gp_mon_tenant tenants[GP_MON_MAX_TENANTS + 1];
        gp_hist queued_wait;                  /* how long each queued task has waited so far (s) */
        double oldest_wait_s;                 /* longest current wait, 0 when none */
        bool node_up;                         /* the GPUs were read recently */
        bool local;                           /* the server has GPUs of its own (node "local") */
        size_t nnodes;                        /* agent nodes that have not left */
        struct {
                char name[GP_NODE_MAX];
                bool up;                      /* ready or draining (not lost) */
        } nodes[GP_MON_MAX_NODES];
        int64_t last_gpu_read_ms;             /* 0 = never */
} gp_mon_sample;

/* Mean utilisation of the healthy GPUs with a reading, -1 if none. */
double gp_mon_sample_util(const gp_mon_sample *s);

/* ------------------------------------------------------------------ */
/* the registry                                                        */

typedef struct gp_monitor gp_monitor;

/* 0 or -ENOMEM. */
int gp_monitor_new(gp_monitor **ret);
/* Takes NULL. */
void gp_monitor_free(gp_monitor *m);

/* Counters.  Each takes m == NULL (does nothing) and is thread-safe (the
 * registry has a leaf mutex of its own). */
void gp_monitor_task_submitted(gp_monitor *m, const char *tenant);
/* A submission refused: reason "queue_full", "infeasible" or "other". */
void gp_monitor_submit_rejected(gp_monitor *m, const char *reason);
/* A task started after waiting wait_ms in the queue. */
void gp_monitor_task_started(gp_monitor *m, const char *tenant, int priority, int64_t wait_ms,
                             bool backfilled);
/* A task ended in final state st. */
void gp_monitor_task_finished(gp_monitor *m, const char *tenant, gp_task_state st);
void gp_monitor_task_requeued(gp_monitor *m);
/* The GPU memory watchdog saw a task over its memory_mb, or stopped one. */
void gp_monitor_watchdog(gp_monitor *m, bool stopped);
void gp_monitor_task_preempted(gp_monitor *m);
/* A task that was queued with a run-time estimate succeeded; within_2x:
 * it ran between half and twice the estimate (estimates.h). */
void gp_monitor_estimate(gp_monitor *m, bool within_2x);
/* A task started after an expected start was shown for it: was its wait
 * within 2x of the one foretold (estimates.h, gp_est_started)? */
void gp_monitor_expected_start(gp_monitor *m, bool within_2x);
/* One scheduler pass took dur_ns and made ndecisions. */
void gp_monitor_sched_pass(gp_monitor *m, int64_t dur_ns, size_t ndecisions);
void gp_monitor_store_commit(gp_monitor *m, size_t ntasks);
/* Alerts: fired / resolved events, webhook deliveries by result
 * ("ok", "failed" after the last retry, "dropped" from a full queue). */
void gp_monitor_alert_event(gp_monitor *m, bool fired);
void gp_monitor_webhook_result(gp_monitor *m, const char *result);
/* The GPUs were read (ok) or the read failed, at now_ms (node liveness). */
void gp_monitor_gpu_read_at(gp_monitor *m, bool ok, int64_t now_ms);
/* Time of the last successful read, 0 = never. */
int64_t gp_monitor_last_gpu_read(gp_monitor *m);
/* The label value a tenant's metrics carry: its id while it is one of the
 * first GP_MON_MAX_TENANTS seen, else "other".  The string lives as long
 * as m.  Registers the tenant. */
const char *gp_monitor_tenant_label(gp_monitor *m, const char *tenant);

/* Record a sample into the history rings and the per-tenant usage
 * counters (GPU-seconds since the previous sample, at most 60 s).
 * Thread-safe.  0 or -ENOMEM (some series could not be created; the
 * others are recorded). */
int gp_monitor_record(gp_monitor *m, const gp_mon_sample *s);

/* Queue wait p95 (s) over the last window_ms: tasks that started in the
 * window, plus the current waits of the queued tasks in s.  Keeps one
 * cumulative snapshot a minute (called from the sampler with its time). */
double gp_monitor_wait_p95(gp_monitor *m, const gp_mon_sample *s, int64_t window_ms);

/* Prometheus text exposition format 0.0.4 of the counters and of s into
 * out.  0, -ENOMEM, -E2BIG. */
int gp_monitor_prometheus(gp_monitor *m, const gp_mon_sample *s, int64_t uptime_ms, gp_buf *out);

/* History of one metric as JSON into out:
 *   {"metric":M,"step_s":1|60,"series":[{"labels":{...},"points":[[t_ms,v],...]}],
 *    "since":MS,"backend":B}
 * label_value filters on the series' label ("local:0", a tenant), NULL
 * for all of the metric's series.  since_ms within the last 10 minutes
 * reads the 1 s rings, else the 1 min rings.  0, -ENOENT (unknown
 * metric), -ENOMEM, -E2BIG. */
int gp_monitor_history_json(gp_monitor *m, const char *metric, const char *label_value, int64_t since_ms,
                            int64_t now_ms, const char *backend, gp_buf *out);
/* The names of the history metrics, NULL-terminated. */
extern const char *const gp_monitor_history_metrics[];

/* ------------------------------------------------------------------ */
/* what a tenant key may see (pure)                                    */

/* Which history series a request reads: metric with the query's gpu= and
 * tenant= (NULL when absent), asked by a tenant key of only_tenant (NULL
 * for an admin key).  An admin reads the series labelled gpu, else
 * tenant, else all.  A tenant key reads per-tenant metrics (tenant_*)
 * only under its own label, and may name no other tenant: 0 with
 * *ret_label (NULL = every series of the metric), or -ENOENT when the
 * request names another tenant's series (answered 404, as another
 * tenant's task or tenant is: ids do not leak). */
int gp_monitor_history_label(const char *metric, const char *gpu, const char *tenant, const char *only_tenant,
                             const char **ret_label);
/* true for the history metrics (and alert metrics) that are per tenant. */
bool gp_monitor_metric_per_tenant(const char *metric);

/* Keep in the JSON array a only the objects whose string member key is
 * tenant (a tenant key's view of a per-tenant list); drops the others,
 * and any element that is not such an object.  a may be NULL or not an
 * array (then nothing happens).  Returns how many were dropped. */
struct json_t;
size_t gp_monitor_json_keep_tenant(struct json_t *a, const char *key, const char *tenant);

/* Where text (a task's reason, NUL-terminated in a buffer of size bytes)
 * names "task N" and visible(ud, N) is false, write "a task of another
 * tenant" instead, so a tenant is told why its task waits without another
 * tenant's task id.  The result is cut to size - 1 bytes at most.
 * Returns how many were replaced. */
size_t gp_monitor_hide_task_ids(char *text, size_t size, bool (*visible)(void *ud, int64_t id), void *ud);

/* A tenant's use of its quota in force, in percent: the highest of
 * running/max_concurrent, queued/max_queued and gpus/max_gpus over the
 * limits that are set (> 0); -1 when none is set (no quota: no value, the
 * alert tenant_quota_used_pct does not look at the tenant).  GPUs in
 * 1/1000. */
double gp_monitor_quota_used_pct(int running, int max_concurrent, int queued, int max_queued, int64_t gpus_milli,
                                 int64_t max_gpus_milli);

/* Counter values for the JSON snapshot (name -> value), in a fixed order. */
typedef struct gp_mon_counters {
        uint64_t submitted, scheduled, backfilled, finished, succeeded, failed, cancelled, timeout, lost;
        uint64_t requeued, preempted, rejected_queue_full, rejected_infeasible, rejected_other;
        uint64_t estimated, estimated_within_2x;
        uint64_t expected_starts, expected_starts_within_2x;
        uint64_t wd_over, wd_stopped;
        uint64_t sched_passes, decisions, store_commits, alerts_fired, alerts_resolved;
        uint64_t webhook_ok, webhook_failed, webhook_dropped;
        double wait_p50_s, wait_p95_s, decision_p95_s;   /* over the whole run */
} gp_mon_counters;
void gp_monitor_counters(gp_monitor *m, gp_mon_counters *ret);

/* Per-tenant cumulative GPU-seconds (for the tenants page): JSON object
 * {"tenant": seconds, ...} appended to out.  0, -ENOMEM, -E2BIG. */
int gp_monitor_tenant_usage_json(gp_monitor *m, gp_buf *out);

/* ------------------------------------------------------------------ */
/* daemon glue (monitor.c, web.c): needs server-int.h                  */

struct gp_daemon;
struct hreq;

/* Create the registry and the alerts of d (d->mon, d->alerts) from d->cfg.
 * Called by gp_daemon_open.  0, or a negative code with err. */
int gp_monitor_attach(struct gp_daemon *d, char *err, size_t errlen);
/* Start the webhook thread (gp_daemon_start) / stop it and free both
 * (gp_daemon_close).  Take a daemon without them. */
int gp_monitor_start(struct gp_daemon *d);
void gp_monitor_detach(struct gp_daemon *d);

/* Fill *s from d; takes d->lock itself.  s is large: heap-allocate it. */
void gp_monitor_collect(struct gp_daemon *d, gp_mon_sample *s);
/* The sampler's tick: collect, record into the rings, evaluate the
 * alerts.  Sampler thread. */
void gp_monitor_tick(struct gp_daemon *d);
/* The GPU sampler read the GPUs (ok) or failed to, at now_ms. */
void gp_monitor_gpu_read(struct gp_daemon *d, bool ok, int64_t now_ms);
/* Monotonic nanoseconds, for durations. */
int64_t gp_monitor_now_ns(void);

/* Routes of the monitoring and the dashboard (/metrics,
 * /api/v1/monitor/{metrics,history}, /api/v1/alerts, /, /static/...) are
 * gp_monitor_routes (routes.h). */
/* web.c: serve a dashboard file.  true and *ret when url names one. */
bool gp_web_route(struct hreq *r, const char *url, bool head, enum MHD_Result *ret);
/* Queue an answer (body malloc'd, taken; NULL = out of memory) with the
 * content type and, when cache is set, a Cache-Control header. */
enum MHD_Result gp_mon_send(struct hreq *r, int status, char *body, size_t len, const char *ctype,
                            const char *cache);

#endif
