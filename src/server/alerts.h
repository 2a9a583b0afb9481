/* alerts.h - alert rules, their state machine and webhook delivery.
 *
 * A rule (config alerts.rules[]) compares one metric with a threshold
 * ("gpu_temp_c > 85").  Each (rule, subject) pair - subject being a GPU
 * ("local:0"), a node ("local"), a tenant, or "" for the whole pool - is an
 * instance with its own state machine:
 *
 *   ok --cond--> pending --cond for for_s--> FIRING (event "firing")
 *   pending --!cond--> ok
 *   firing --!cond--> resolving --!cond for clear_s--> ok (event "resolved")
 *   resolving --cond--> firing (no event: flapping is damped)
 *
 * so an alert fires once and resolves once however often its condition
 * flickers inside for_s / clear_s.
 *
 * Pure part: gp_alert_step and the evaluation rounds (gp_alerts_begin /
 * gp_alerts_observe / gp_alerts_end) do no I/O and read no clock.  The
 * evaluation is called from one thread (the sampler); reads for the API
 * (gp_alerts_json) may come from any thread (one mutex inside).
 *
 * Delivery: events are logged by the caller and queued for the webhook (a
 * bounded queue of GP_ALERTS_QUEUE_MAX; when full, the oldest is dropped
 * and counted).  A thread of its own POSTs each as JSON with libcurl,
 * retrying with exponential backoff (1 s, 2 s, 4 s ... at most 60 s); the
 * evaluating thread never waits for the network.
 */
#ifndef GP_SERVER_ALERTS_H
#define GP_SERVER_ALERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "config/config.h"

#define GP_ALERTS_MAX_INSTANCES 1024 /* (rule, subject) pairs tracked */
#define GP_ALERTS_HISTORY 100        /* resolved alerts kept for the API */
#define GP_ALERTS_QUEUE_MAX 256      /* webhook deliveries waiting */
#define GP_ALERT_SUBJECT_MAX 80

/* ---- the state machine (pure) ---- */

typedef enum gp_alert_state {
        GP_ALERT_OK = 0,
        GP_ALERT_PENDING,           /* condition true, for less than for_s */
        GP_ALERT_FIRING,
        GP_ALERT_RESOLVING,         /* firing, condition false for less than clear_s */
} gp_alert_state;

typedef enum gp_alert_event {
        GP_ALERT_EV_NONE = 0,
        GP_ALERT_EV_FIRE,
        GP_ALERT_EV_RESOLVE,
} gp_alert_event;

typedef struct gp_alert_sm {
        gp_alert_state state;
        int64_t since_ms;           /* when the current state began */
        int64_t fired_ms;           /* of the current firing, 0 when not firing */
        uint32_t flaps;             /* resolving -> firing returns (damped flaps) */
} gp_alert_sm;

/* Advance one instance with the condition's value at now_ms.  Returns the
 * event to report, if any. */
gp_alert_event gp_alert_step(gp_alert_sm *sm, bool cond, int64_t now_ms, int64_t for_ms, int64_t clear_ms);

/* true when value OP threshold. */
bool gp_alert_compare(double value, gp_cmp op, double threshold);

/* ---- rules and instances ---- */

typedef struct gp_alerts gp_alerts;

/* What happened, for the log and the webhook. */
typedef struct gp_alert_change {
        char rule[GP_CFG_ALERT_NAME_MAX];
        char when[GP_CFG_ALERT_WHEN_MAX];
        char severity[16];
        char subject[GP_ALERT_SUBJECT_MAX];
        bool fired;                 /* true: firing; false: resolved */
        double value;               /* the metric at the event */
        double threshold;
        int64_t started_ms;         /* when it fired */
        int64_t at_ms;              /* when this event happened */
} gp_alert_change;

/* Rules from cfg (copied).  0 or -ENOMEM. */
int gp_alerts_new(const gp_config *cfg, gp_alerts **ret);
/* Stops the webhook thread if started; takes NULL. */
void gp_alerts_free(gp_alerts *a);

/* One evaluation round at now_ms: begin, one observe per (metric, subject)
 * known now, end.  An instance not observed in a round counts as false
 * (its subject went away).  Changes (fired/resolved) of the round are
 * written to ret (up to max) and their number returned by gp_alerts_end
 * (more may have happened: they are still applied and listed). */
void gp_alerts_begin(gp_alerts *a, int64_t now_ms);
void gp_alerts_observe(gp_alerts *a, const char *metric, const char *subject, double value);
size_t gp_alerts_end(gp_alerts *a, gp_alert_change *ret, size_t max);

/* Is any rule about this metric?  Lets the caller skip costly metrics. */
bool gp_alerts_wants(const gp_alerts *a, const char *metric);
/* Instances firing now (firing or resolving). */
size_t gp_alerts_firing(gp_alerts *a);
/* The same, as a tenant key of only_tenant sees them (NULL = all): pool,
 * node and GPU alerts, and of the per-tenant ones (metrics tenant_*) only
 * those whose subject is only_tenant. */
size_t gp_alerts_firing_for(gp_alerts *a, const char *only_tenant);

/* {"alerts":[...active...],"resolved":[...recent...],"rules":[...],
 *  "webhook":{"configured":bool,"queued":n}} minus the closing brace, so
 * the caller may add fields.  Thread-safe.  0, -ENOMEM, -E2BIG. */
int gp_alerts_json(gp_alerts *a, int64_t now_ms, gp_buf *out);
/* The same, as a tenant key of only_tenant sees it (NULL = everything):
 * active and resolved alerts of other tenants (per-tenant rules whose
 * subject is another tenant) are left out; the rules are listed whole. */
int gp_alerts_json_for(gp_alerts *a, int64_t now_ms, const char *only_tenant, gp_buf *out);

/* One change as the webhook's JSON body (malloc'd, NULL on no memory). */
char *gp_alert_change_json(const gp_alert_change *c, const char *backend);

/* ---- webhook delivery (I/O) ---- */

/* Result callback: "ok", "failed" or "dropped", from the delivery thread
 * (or the caller of gp_alerts_enqueue for "dropped"). */
typedef void (*gp_alerts_result_fn)(void *ud, const char *result);

/* Start the delivery thread (no-op without a webhook URL).  0 or -errno. */
int gp_alerts_start(gp_alerts *a, const char *backend, gp_alerts_result_fn fn, void *ud);
/* Queue a change for delivery (no-op without a webhook).  Never blocks on
 * the network.  Thread-safe. */
void gp_alerts_enqueue(gp_alerts *a, const gp_alert_change *c);
/* Stop the thread: what is still queued is dropped.  Takes NULL. */
void gp_alerts_stop(gp_alerts *a);

#endif
