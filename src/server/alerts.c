/* alerts.c - alert rules, the per-(rule, subject) state machine, the list
 * the API shows, and webhook delivery on a thread of its own (alerts.h).
 *
 * Invariants:
 *   - an instance exists only while its state is not OK (pending, firing,
 *     resolving); at most GP_ALERTS_MAX_INSTANCES exist, a new one beyond
 *     that is not tracked (its rule cannot fire for that subject);
 *   - every firing is followed by exactly one resolved event (or the
 *     process ends): an instance leaves FIRING/RESOLVING only through
 *     gp_alert_step's resolve;
 *   - evaluation (begin/observe/end) takes a->mu, as do readers, so the
 *     API never sees half a round; the webhook queue has its own lock
 *     (a->qmu) and the delivery thread never takes a->mu.
 */
#include "server/alerts.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"

/* ------------------------------------------------------------------ */
/* the state machine                                                   */

gp_alert_event gp_alert_step(gp_alert_sm *sm, bool cond, int64_t now_ms, int64_t for_ms, int64_t clear_ms) {
        switch (sm->state) {
        case GP_ALERT_OK:
                if (!cond)
                        return GP_ALERT_EV_NONE;
                sm->since_ms = now_ms;
                if (for_ms > 0) {
                        sm->state = GP_ALERT_PENDING;
                        return GP_ALERT_EV_NONE;
                }
                sm->state = GP_ALERT_FIRING;
                sm->fired_ms = now_ms;
                return GP_ALERT_EV_FIRE;
        case GP_ALERT_PENDING:
                if (!cond) {
                        sm->state = GP_ALERT_OK;
                        sm->since_ms = now_ms;
                        return GP_ALERT_EV_NONE;
                }
                if (now_ms - sm->since_ms < for_ms)
                        return GP_ALERT_EV_NONE;
                sm->state = GP_ALERT_FIRING;
                sm->since_ms = now_ms;
                sm->fired_ms = now_ms;
                return GP_ALERT_EV_FIRE;
        case GP_ALERT_FIRING:
                if (cond)
                        return GP_ALERT_EV_NONE;
                sm->since_ms = now_ms;
                if (clear_ms > 0) {
                        sm->state = GP_ALERT_RESOLVING;
                        return GP_ALERT_EV_NONE;
                }
                sm->state = GP_ALERT_OK;
                sm->fired_ms = 0;
                return GP_ALERT_EV_RESOLVE;
        case GP_ALERT_RESOLVING:
                if (cond) {
                        sm->state = GP_ALERT_FIRING;
                        sm->since_ms = now_ms;
                        sm->flaps++;
                        return GP_ALERT_EV_NONE;
                }
                if (now_ms - sm->since_ms < clear_ms)
                        return GP_ALERT_EV_NONE;
                sm->state = GP_ALERT_OK;
                sm->since_ms = now_ms;
                sm->fired_ms = 0;
                return GP_ALERT_EV_RESOLVE;
        }
        return GP_ALERT_EV_NONE;
}

bool gp_alert_compare(double v, gp_cmp op, double t) {
        if (isnan(v))
                return false;
        switch (op) {
        case GP_CMP_GT: return v > t;
        case GP_CMP_GE: return v >= t;
        case GP_CMP_LT: return v < t;
        case GP_CMP_LE: return v <= t;
        case GP_CMP_EQ: return v == t;
        case GP_CMP_NE: return v != t;
        }
        return false;
}

/* ------------------------------------------------------------------ */
/* rules and instances                                                 */

typedef struct instance {
        int rule;                   /* index into a->rules */
        char subject[GP_ALERT_SUBJECT_MAX];
        gp_alert_sm sm;
        double value;               /* last observed */
        bool seen;                  /* observed in the current round */
} instance;

struct gp_alerts {
        pthread_mutex_t mu;         /* rules, instances, history, round */
        gp_cfg_alert_rule rules[GP_CFG_MAX_ALERT_RULES];
        int nrules;
        instance *inst;             /* GP_ALERTS_MAX_INSTANCES */
        size_t ninst;
        uint64_t untracked;         /* instances not created: table full */
        gp_alert_change *hist;      /* GP_ALERTS_HISTORY resolved, a ring */
        size_t nhist, hist_next;
        int64_t now;                /* of the current round */
        gp_alert_change *round;     /* changes of the current round */
        size_t nround;
        /* webhook */
        char url[GP_CFG_WEBHOOK_MAX];
        int timeout_s, retries;
        const char *backend;
        gp_alerts_result_fn fn;
        void *ud;
        pthread_mutex_t qmu;
        pthread_cond_t qcv;
        char *queue[GP_ALERTS_QUEUE_MAX];
        size_t qhead, qlen;
        bool started, stop;
        pthread_t thread;
};

int gp_alerts_new(const gp_config *cfg, gp_alerts **ret) {
        gp_alerts *a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->inst = calloc(GP_ALERTS_MAX_INSTANCES, sizeof(*a->inst));
        a->hist = calloc(GP_ALERTS_HISTORY, sizeof(*a->hist));
        a->round = calloc(GP_ALERTS_MAX_INSTANCES, sizeof(*a->round));
        if (!a->inst || !a->hist || !a->round) {
                free(a->inst);
                free(a->hist);
                free(a->round);
                free(a);
                return -ENOMEM;
        }
        int n = cfg->n_alert_rules;
        if (n < 0)
                n = 0;
        if (n > GP_CFG_MAX_ALERT_RULES)
                n = GP_CFG_MAX_ALERT_RULES;
        memcpy(a->rules, cfg->alert_rules, sizeof(a->rules[0]) * (size_t)n);
        a->nrules = n;
        gp_strlcpy(a->url, cfg->alert_webhook, sizeof(a->url));
        a->timeout_s = cfg->alert_webhook_timeout_s > 0 ? cfg->alert_webhook_timeout_s : 5;
        a->retries = cfg->alert_webhook_retries >= 0 ? cfg->alert_webhook_retries : 0;
        pthread_mutex_init(&a->mu, NULL);
        pthread_mutex_init(&a->qmu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&a->qcv, &ca);
        pthread_condattr_destroy(&ca);
        *ret = a;
        return 0;
}

void gp_alerts_free(gp_alerts *a) {
        if (!a)
                return;
        gp_alerts_stop(a);
        for (size_t i = 0; i < a->qlen; i++)
                free(a->queue[(a->qhead + i) % GP_ALERTS_QUEUE_MAX]);
        pthread_mutex_destroy(&a->mu);
        pthread_mutex_destroy(&a->qmu);
        pthread_cond_destroy(&a->qcv);
        free(a->inst);
        free(a->hist);
        free(a->round);
        free(a);
}

bool gp_alerts_wants(const gp_alerts *a, const char *metric) {
        for (int i = 0; a && i < a->nrules; i++)
                if (!strcmp(a->rules[i].metric, metric))
                        return true;
        return false;
}

void gp_alerts_begin(gp_alerts *a, int64_t now_ms) {
        pthread_mutex_lock(&a->mu);
        a->now = now_ms;
        a->nround = 0;
        for (size_t i = 0; i < a->ninst; i++)
                a->inst[i].seen = false;
}

static void note(gp_alerts *a, const instance *in, gp_alert_event ev) {
        if (ev == GP_ALERT_EV_NONE)
                return;
        const gp_cfg_alert_rule *r = &a->rules[in->rule];
        gp_alert_change c;
        memset(&c, 0, sizeof(c));
        gp_strlcpy(c.rule, r->name, sizeof(c.rule));
        gp_strlcpy(c.when, r->when, sizeof(c.when));
        gp_strlcpy(c.severity, r->severity, sizeof(c.severity));
        gp_strlcpy(c.subject, in->subject, sizeof(c.subject));
        c.fired = ev == GP_ALERT_EV_FIRE;
        c.value = in->value;
        c.threshold = r->threshold;
        c.at_ms = a->now;
        c.started_ms = c.fired ? a->now : in->sm.fired_ms;
        if (a->nround < GP_ALERTS_MAX_INSTANCES)
                a->round[a->nround++] = c;
        if (!c.fired) {
                a->hist[a->hist_next] = c;
                a->hist_next = (a->hist_next + 1) % GP_ALERTS_HISTORY;
                if (a->nhist < GP_ALERTS_HISTORY)
                        a->nhist++;
        }
}

static void step(gp_alerts *a, instance *in, bool cond) {
        const gp_cfg_alert_rule *r = &a->rules[in->rule];
        int64_t fired = in->sm.fired_ms;
        gp_alert_event ev = gp_alert_step(&in->sm, cond, a->now, (int64_t)r->for_s * 1000, (int64_t)r->clear_s * 1000);
        if (ev == GP_ALERT_EV_RESOLVE)
                in->sm.fired_ms = fired; /* for the event's started_ms; the instance goes away */
        note(a, in, ev);
}

void gp_alerts_observe(gp_alerts *a, const char *metric, const char *subject, double value) {
        for (int r = 0; r < a->nrules; r++) {
                if (strcmp(a->rules[r].metric, metric) != 0)
                        continue;
                bool cond = gp_alert_compare(value, a->rules[r].op, a->rules[r].threshold);
                instance *in = NULL;
                for (size_t i = 0; i < a->ninst && !in; i++)
                        if (a->inst[i].rule == r && !strcmp(a->inst[i].subject, subject))
                                in = &a->inst[i];
                if (!in) {
                        if (!cond)
                                continue;
                        if (a->ninst >= GP_ALERTS_MAX_INSTANCES) {
                                a->untracked++;
                                continue;
                        }
                        in = &a->inst[a->ninst++];
                        memset(in, 0, sizeof(*in));
                        in->rule = r;
                        gp_strlcpy(in->subject, subject, sizeof(in->subject));
                }
                in->seen = true;
                in->value = value;
                step(a, in, cond);
        }
}

size_t gp_alerts_end(gp_alerts *a, gp_alert_change *ret, size_t max) {
        for (size_t i = 0; i < a->ninst; i++)
                if (!a->inst[i].seen)
                        step(a, &a->inst[i], false);
        /* instances back to OK are forgotten */
        size_t k = 0;
        for (size_t i = 0; i < a->ninst; i++)
                if (a->inst[i].sm.state != GP_ALERT_OK)
                        a->inst[k++] = a->inst[i];
        a->ninst = k;
        size_t n = a->nround;
        for (size_t i = 0; i < n && i < max; i++)
                ret[i] = a->round[i];
        pthread_mutex_unlock(&a->mu);
        return n < max ? n : max;
}

/* Is a rule's alert about one tenant (its subject a tenant id)? */
static bool rule_per_tenant(const gp_cfg_alert_rule *r) {
        return !strncmp(r->metric, "tenant_", 7);
}

/* May a tenant key of only_tenant (NULL = admin) see an alert of rule r on
 * subject?  Pool, node and GPU alerts: yes; a tenant's: only its own. */
static bool visible(const gp_cfg_alert_rule *r, const char *subject, const char *only_tenant) {
        return !only_tenant || !r || !rule_per_tenant(r) || !strcmp(subject, only_tenant);
}

/* The rule named name (names are unique), or NULL.  a->mu held. */
static const gp_cfg_alert_rule *rule_named(const gp_alerts *a, const char *name) {
        for (int i = 0; i < a->nrules; i++)
                if (!strcmp(a->rules[i].name, name))
                        return &a->rules[i];
        return NULL;
}

size_t gp_alerts_firing_for(gp_alerts *a, const char *only_tenant) {
        size_t n = 0;
        pthread_mutex_lock(&a->mu);
        for (size_t i = 0; i < a->ninst; i++)
                n += (a->inst[i].sm.state == GP_ALERT_FIRING || a->inst[i].sm.state == GP_ALERT_RESOLVING) &&
                     visible(&a->rules[a->inst[i].rule], a->inst[i].subject, only_tenant);
        pthread_mutex_unlock(&a->mu);
        return n;
}

size_t gp_alerts_firing(gp_alerts *a) {
        return gp_alerts_firing_for(a, NULL);
}

/* ------------------------------------------------------------------ */
/* JSON                                                                */

static int put_num(gp_buf *b, const char *key, double v) {
        if (!isfinite(v))
                return gp_buf_printf(b, ",\"%s\":null", key);
        return gp_buf_printf(b, ",\"%s\":%.6g", key, v);
}

static int change_fields(gp_buf *b, const gp_alert_change *c) {
        int r = gp_buf_puts(b, "{\"rule\":");
        r = r ? r : gp_buf_json_str(b, c->rule);
        r = r ? r : gp_buf_json_field_str(b, "when", c->when);
        r = r ? r : gp_buf_json_field_str(b, "severity", c->severity);
        r = r ? r : gp_buf_json_field_str(b, "subject", c->subject);
        r = r ? r : gp_buf_printf(b, ",\"state\":\"%s\"", c->fired ? "firing" : "resolved");
        r = r ? r : put_num(b, "value", c->value);
        r = r ? r : put_num(b, "threshold", c->threshold);
        r = r ? r : gp_buf_json_field_time(b, "started_at", c->started_ms);
        r = r ? r : gp_buf_json_field_time(b, "resolved_at", c->fired ? 0 : c->at_ms);
        return r;
}

char *gp_alert_change_json(const gp_alert_change *c, const char *backend) {
        gp_buf b;
        gp_buf_init(&b, 0);
        int r = change_fields(&b, c);
        r = r ? r : gp_buf_printf(&b, ",\"backend\":\"%s\",\"source\":\"gpupool\"}", backend ? backend : "");
        if (r) {
                gp_buf_done(&b);
                return NULL;
        }
        return gp_buf_steal(&b);
}

static const char *state_name(gp_alert_state s) {
        switch (s) {
        case GP_ALERT_PENDING: return "pending";
        case GP_ALERT_FIRING:
        case GP_ALERT_RESOLVING: return "firing";
        default: return "ok";
        }
}

int gp_alerts_json(gp_alerts *a, int64_t now_ms, gp_buf *out) {
        return gp_alerts_json_for(a, now_ms, NULL, out);
}

int gp_alerts_json_for(gp_alerts *a, int64_t now_ms, const char *only_tenant, gp_buf *out) {
        int r = gp_buf_puts(out, "{\"alerts\":[");
        bool first = true;
        pthread_mutex_lock(&a->mu);
        for (size_t i = 0; r == 0 && i < a->ninst; i++) {
                const instance *in = &a->inst[i];
                const gp_cfg_alert_rule *ru = &a->rules[in->rule];
                if (!visible(ru, in->subject, only_tenant))
                        continue;
                r = gp_buf_puts(out, first ? "{\"rule\":" : ",{\"rule\":");
                first = false;
                r = r ? r : gp_buf_json_str(out, ru->name);
                r = r ? r : gp_buf_json_field_str(out, "when", ru->when);
                r = r ? r : gp_buf_json_field_str(out, "severity", ru->severity);
                r = r ? r : gp_buf_json_field_str(out, "subject", in->subject);
                r = r ? r : gp_buf_printf(out, ",\"state\":\"%s\"", state_name(in->sm.state));
                r = r ? r : put_num(out, "value", in->value);
                r = r ? r : put_num(out, "threshold", ru->threshold);
                r = r ? r : gp_buf_json_field_time(out, "started_at", in->sm.fired_ms);
                r = r ? r : gp_buf_json_field_time(out, "pending_since",
                                     in->sm.state == GP_ALERT_PENDING ? in->sm.since_ms : 0);
                r = r ? r : gp_buf_printf(out, ",\"flaps\":%u}", in->sm.flaps);
        }
        r = r ? r : gp_buf_puts(out, "],\"resolved\":[");
        /* newest first */
        first = true;
        for (size_t k = 0; r == 0 && k < a->nhist; k++) {
                size_t i = (a->hist_next + GP_ALERTS_HISTORY - 1 - k) % GP_ALERTS_HISTORY;
                if (!visible(rule_named(a, a->hist[i].rule), a->hist[i].subject, only_tenant))
                        continue;
                r = first ? 0 : gp_buf_puts(out, ",");
                first = false;
                r = r ? r : change_fields(out, &a->hist[i]);
                r = r ? r : gp_buf_puts(out, "}");
        }
        r = r ? r : gp_buf_puts(out, "],\"rules\":[");
        for (int i = 0; r == 0 && i < a->nrules; i++) {
                const gp_cfg_alert_rule *ru = &a->rules[i];
                bool inactive = !strcmp(ru->metric, "tenant_balance"); /* not evaluated yet */
                r = gp_buf_puts(out, i ? ",{\"name\":" : "{\"name\":");
                r = r ? r : gp_buf_json_str(out, ru->name);
                r = r ? r : gp_buf_json_field_str(out, "when", ru->when);
                r = r ? r : gp_buf_json_field_str(out, "metric", ru->metric);
                r = r ? r : gp_buf_printf(out, ",\"for_s\":%d,\"clear_s\":%d,\"severity\":\"%s\",\"active\":%s}",
                                          ru->for_s, ru->clear_s, ru->severity, inactive ? "false" : "true");
        }
        uint64_t untracked = a->untracked;
        pthread_mutex_unlock(&a->mu);
        pthread_mutex_lock(&a->qmu);
        size_t queued = a->qlen;
        pthread_mutex_unlock(&a->qmu);
        r = r ? r : gp_buf_printf(out, "],\"webhook\":{\"configured\":%s,\"queued\":%zu},\"untracked\":%" PRIu64,
                                  a->url[0] ? "true" : "false", queued, untracked);
        (void)now_ms;
        return r;
}

/* ------------------------------------------------------------------ */
/* webhook delivery                                                    */

static size_t discard(char *p, size_t size, size_t n, void *ud) {
        (void)p;
        (void)ud;
        return size * n;
}

/* One POST; true on a 2xx answer. */
static bool post_once(gp_alerts *a, CURL *h, const char *body, char *why, size_t whylen) {
        struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, a->url);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)a->timeout_s);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)a->timeout_s);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(h, CURLOPT_USERAGENT, "gpupool-alerts");
        CURLcode rc = curl_easy_perform(h);
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_slist_free_all(hdr);
        if (rc != CURLE_OK) {
                snprintf(why, whylen, "%s", curl_easy_strerror(rc));
                return false;
        }
        if (status < 200 || status > 299) {
                snprintf(why, whylen, "HTTP %ld", status);
                return false;
        }
        return true;
}

/* Wait up to ms or until stop; true if stopping.  a->qmu held. */
static bool wait_ms(gp_alerts *a, int64_t ms) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
        }
        while (!a->stop)
                if (pthread_cond_timedwait(&a->qcv, &a->qmu, &ts) == ETIMEDOUT)
                        break;
        return a->stop;
}

static void *deliver_main(void *arg) {
        gp_alerts *a = arg;
        CURL *h = curl_easy_init();
        pthread_mutex_lock(&a->qmu);
        while (!a->stop) {
                if (!a->qlen) {
                        pthread_cond_wait(&a->qcv, &a->qmu);
                        continue;
                }
                char *body = a->queue[a->qhead];
                a->qhead = (a->qhead + 1) % GP_ALERTS_QUEUE_MAX;
                a->qlen--;
                pthread_mutex_unlock(&a->qmu);
                char why[256] = "no curl handle";
                bool ok = false;
                for (int attempt = 0; !ok; attempt++) {
                        ok = h && post_once(a, h, body, why, sizeof(why));
                        if (ok || attempt >= a->retries)
                                break;
                        int64_t delay = attempt < 6 ? (int64_t)1000 << attempt : 60000;
                        pthread_mutex_lock(&a->qmu);
                        bool stopping = wait_ms(a, delay);
                        pthread_mutex_unlock(&a->qmu);
                        if (stopping)
                                break;
                }
                if (!ok)
                        gp_warn("alert webhook: delivery failed after %d tries: %s", a->retries + 1, why);
                if (a->fn)
                        a->fn(a->ud, ok ? "ok" : "failed");
                free(body);
                pthread_mutex_lock(&a->qmu);
        }
        pthread_mutex_unlock(&a->qmu);
        if (h)
                curl_easy_cleanup(h);
        return NULL;
}

int gp_alerts_start(gp_alerts *a, const char *backend, gp_alerts_result_fn fn, void *ud) {
        a->backend = backend;
        a->fn = fn;
        a->ud = ud;
        if (!a->url[0] || a->started)
                return 0;
        curl_global_init(CURL_GLOBAL_DEFAULT);
        a->stop = false;
        int rc = pthread_create(&a->thread, NULL, deliver_main, a);
        if (rc)
                return -rc;
        a->started = true;
        return 0;
}

void gp_alerts_enqueue(gp_alerts *a, const gp_alert_change *c) {
        if (!a || !a->url[0])
                return;
        char *body = gp_alert_change_json(c, a->backend);
        if (!body)
                return;
        bool dropped = false;
        pthread_mutex_lock(&a->qmu);
        if (a->qlen == GP_ALERTS_QUEUE_MAX) {
                free(a->queue[a->qhead]); /* the oldest goes */
                a->qhead = (a->qhead + 1) % GP_ALERTS_QUEUE_MAX;
                a->qlen--;
                dropped = true;
        }
        a->queue[(a->qhead + a->qlen) % GP_ALERTS_QUEUE_MAX] = body;
        a->qlen++;
        pthread_cond_signal(&a->qcv);
        pthread_mutex_unlock(&a->qmu);
        if (dropped && a->fn)
                a->fn(a->ud, "dropped");
}

void gp_alerts_stop(gp_alerts *a) {
        if (!a || !a->started)
                return;
        pthread_mutex_lock(&a->qmu);
        a->stop = true;
        pthread_cond_broadcast(&a->qcv);
        pthread_mutex_unlock(&a->qmu);
        pthread_join(a->thread, NULL);
        a->started = false;
}
