/* estimates.c - the daemon's run-time predictions and expected starts
 * (estimates.h).
 *
 * Keys: tenant, name, GPU count and a hash of the task's stored spec
 * (command, env, workdir): the same job submitted again is the same key;
 * one with another command falls back to its name's group, then its
 * tenant's (core/predict.h).  The expected start is a small replay of the
 * queue in dispatch order on GPU counts alone (no placement, no backfill):
 * running tasks end at their start + estimate (or time limit), each task
 * ahead starts when enough GPUs are free and holds them for its estimate.
 * It is bounded by GP_EST_AHEAD tasks ahead and says "unknown" rather than
 * guess when something in its way has neither an estimate nor a limit.
 */
#include "server/estimates.h"

#include "base/log.h"
#include "base/util.h"
#include "server/monitor.h"
#include "server/server-int.h"
#include "store/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct gp_estimates {
        gp_pred *pred;
        uint64_t estimated, within_2x;
};

static uint64_t spec_hash(const char *spec) {
        uint64_t h = 14695981039346656037ULL;
        for (const unsigned char *p = (const unsigned char *)(spec ? spec : ""); *p; p++)
                h = (h ^ *p) * 1099511628211ULL;
        return h;
}

static void key_of(const gp_task *t, gp_pred_key *k) {
        *k = (gp_pred_key){.tenant = t->tenant, .name = t->name, .gpus = t->gpu_request, .cmd_hash = spec_hash(t->spec)};
}

/* A succeeded batch task's run: its time from start to end, else 0. */
static int64_t run_ms(const gp_task *t) {
        if (t->is_lease || t->state != GP_TASK_SUCCEEDED || t->started_ms <= 0 || t->finished_ms <= t->started_ms)
                return 0;
        return t->finished_ms - t->started_ms;
}

typedef struct hist {
        gp_task *v;                 /* newest first, as the store lists them */
        size_t n, cap;
        int64_t last_id;
} hist;

static int collect(const gp_task *t, void *ud) {
        hist *h = ud;
        h->last_id = t->id;
        if (run_ms(t) <= 0 || h->n >= h->cap)
                return 0;
        gp_task *c = &h->v[h->n];
        memset(c, 0, sizeof(*c));
        gp_strlcpy(c->tenant, t->tenant, sizeof(c->tenant));
        gp_strlcpy(c->name, t->name, sizeof(c->name));
        c->gpu_request = t->gpu_request;
        c->state = t->state;
        c->started_ms = t->started_ms;
        c->finished_ms = t->finished_ms;
        c->estimate_ms = (int64_t)spec_hash(t->spec); /* the hash, kept here until it is learned */
        h->n++;
        return 0;
}

int gp_est_open(gp_daemon *d) {
        gp_estimates *e = calloc(1, sizeof(*e));
        if (!e || gp_pred_new(GP_EST_GROUPS, &e->pred) < 0) {
                free(e);
                return -ENOMEM;
        }
        d->est = e;
        hist h = {.cap = GP_EST_HISTORY};
        h.v = calloc(h.cap, sizeof(*h.v));
        if (!h.v)
                return 0; /* it starts empty */
        int64_t before = 0;
        for (int page = 0; page < 200 && h.n < h.cap; page++) {
                gp_task_filter f = {.state = GP_TASK_SUCCEEDED, .before_id = before, .limit = 1000};
                h.last_id = 0;
                int rc = gp_store_task_list(d->ws, &f, collect, &h);
                if (rc < 0) {
                        gp_warn("run-time estimates: cannot read past tasks (%s); learning from new ones only",
                                gp_store_errmsg(d->ws));
                        break;
                }
                if (!h.last_id)
                        break;
                before = h.last_id;
        }
        /* oldest first: the recent runs weigh most */
        for (size_t i = h.n; i-- > 0;) {
                gp_pred_key k = {.tenant = h.v[i].tenant, .name = h.v[i].name, .gpus = h.v[i].gpu_request,
                                 .cmd_hash = (uint64_t)h.v[i].estimate_ms};
                gp_pred_observe(e->pred, &k, h.v[i].finished_ms - h.v[i].started_ms);
        }
        if (h.n)
                gp_info("run-time estimates: learned from %zu past tasks", h.n);
        free(h.v);
        return 0;
}

void gp_est_close(gp_daemon *d) {
        if (!d->est)
                return;
        gp_pred_free(d->est->pred);
        free(d->est);
        d->est = NULL;
}

int64_t gp_est_predict(gp_daemon *d, const gp_task *t, gp_pred_est *ret) {
        gp_pred_est e = {.level = -1};
        if (d->est && !t->is_lease) {
                gp_pred_key k;
                key_of(t, &k);
                gp_pred_estimate(d->est->pred, &k, t->timeout_s > 0 ? t->timeout_s * 1000 : 0, &e);
        }
        if (ret)
                *ret = e;
        return e.ms;
}

void gp_est_ended(gp_daemon *d, const gp_task *t) {
        int64_t ms = run_ms(t);
        if (!d->est || ms <= 0)
                return;
        if (t->estimate_ms > 0) {
                bool close = t->estimate_ms <= 2 * ms && ms <= 2 * t->estimate_ms;
                d->est->estimated++;
                d->est->within_2x += close;
                gp_monitor_estimate(d->mon, close);
        }
        gp_pred_key k;
        key_of(t, &k);
        gp_pred_observe(d->est->pred, &k, ms);
}

void gp_est_started(gp_daemon *d, gp_task *t, int64_t now) {
        if (t->expected_at_ms > 0 && now >= t->expected_at_ms) {
                int64_t want = t->expected_start_ms > t->expected_at_ms ? t->expected_start_ms - t->expected_at_ms : 0;
                int64_t got = now - t->expected_at_ms;
                int64_t lo = want < got ? want : got, hi = want < got ? got : want;
                gp_monitor_expected_start(d->mon, hi <= 2 * lo + GP_EST_START_SLACK_MS);
        }
        t->expected_at_ms = t->expected_start_ms = 0; /* a wait after a requeue is judged on its own */
}

void gp_est_counts(gp_daemon *d, uint64_t *ret_estimated, uint64_t *ret_within_2x) {
        *ret_estimated = d->est ? d->est->estimated : 0;
        *ret_within_2x = d->est ? d->est->within_2x : 0;
}

/* ---- the expected start: a replay on GPU counts ---- */

typedef struct ev {
        int64_t at;
        int gpus;
} ev;

static void ev_push(ev *h, size_t *n, ev e) {
        size_t i = (*n)++;
        while (i > 0 && h[(i - 1) / 2].at > e.at) {
                h[i] = h[(i - 1) / 2];
                i = (i - 1) / 2;
        }
        h[i] = e;
}

static ev ev_pop(ev *h, size_t *n) {
        ev top = h[0], last = h[--*n];
        size_t i = 0;
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= *n)
                        break;
                if (c + 1 < *n && h[c + 1].at < h[c].at)
                        c++;
                if (h[c].at >= last.at)
                        break;
                h[i] = h[c];
                i = c;
        }
        if (*n)
                h[i] = last;
        return top;
}

/* How long t is expected to run: the estimate it was queued with (or one
 * now), else its time limit; *conf is lowered to that estimate's. */
static int64_t run_bound(gp_daemon *d, const gp_task *t, double *conf) {
        gp_pred_est e;
        int64_t now_est = gp_est_predict(d, t, &e);
        if (now_est > 0 && e.confidence < *conf)
                *conf = e.confidence;
        if (t->estimate_ms > 0)
                return t->estimate_ms;
        if (now_est > 0)
                return now_est;
        return t->timeout_s > 0 ? t->timeout_s * 1000 : 0;
}

int gp_est_starts(gp_daemon *d, int64_t now, int64_t *ids, int64_t *starts, double *confs, size_t *ret_n) {
        double conf = 1;
        gp_sched_stats st;
        gp_sched_get_stats(d->sched, &st);
        int total = (int)st.gpus_total, busy = 0;
        size_t nrun = 0, pos = 0, n = 0;
        gp_task *x;
        *ret_n = 0;
        while ((x = gp_i64map_next(&d->tasks, &pos, NULL)))
                nrun += x->state == GP_TASK_RUNNING;
        ev *h = malloc((nrun + GP_EST_AHEAD + 2) * sizeof(*h));
        if (!h)
                return -ENOMEM;
        pos = 0;
        bool blind = false; /* a task in the way has no end in sight */
        while ((x = gp_i64map_next(&d->tasks, &pos, NULL)) && !blind) {
                if (x->state != GP_TASK_RUNNING)
                        continue;
                int g = x->n_gpus > 0 ? x->n_gpus : x->gpu_request;
                int64_t b = run_bound(d, x, &conf);
                int64_t end = x->started_ms + b;
                blind = b <= 0;
                ev_push(h, &n, (ev){end > now ? end : now, g});
                busy += g;
        }
        size_t nq = blind ? 0 : gp_sched_queue_order(d->sched, ids, GP_EST_AHEAD);
        int free_gpus = total - busy;
        int64_t clock = now;
        size_t k = 0;
        for (; k < nq; k++) {
                const gp_task *q = gp_i64map_get(&d->tasks, ids[k]);
                int g = q ? q->gpu_request : 0;
                if (g > total)
                        break;
                while (free_gpus < g && n) {
                        ev e = ev_pop(h, &n);
                        if (e.at > clock)
                                clock = e.at;
                        free_gpus += e.gpus;
                }
                if (free_gpus < g)
                        break;
                int64_t b = q ? run_bound(d, q, &conf) : 0;
                starts[k] = clock;
                confs[k] = conf;
                gp_task *qm = gp_i64map_get(&d->tasks, ids[k]);
                if (qm && !qm->expected_at_ms) { /* the first one shown is the one judged at its start */
                        qm->expected_at_ms = now;
                        qm->expected_start_ms = clock;
                }
                if (b <= 0) {
                        k++;
                        break; /* this one starts then; what follows cannot be told */
                }
                ev_push(h, &n, (ev){clock + b, g});
                free_gpus -= g;
        }
        free(h);
        *ret_n = k;
        return 0;
}

int64_t gp_est_start(gp_daemon *d, const gp_task *t, int64_t now, double *ret_conf) {
        int64_t *ids = malloc(GP_EST_AHEAD * sizeof(*ids)), *starts = malloc(GP_EST_AHEAD * sizeof(*starts));
        double *confs = malloc(GP_EST_AHEAD * sizeof(*confs));
        size_t n = 0;
        int64_t at = 0;
        double c = 0;
        if (ids && starts && confs && gp_est_starts(d, now, ids, starts, confs, &n) == 0)
                for (size_t i = 0; i < n; i++)
                        if (ids[i] == t->id) {
                                at = starts[i];
                                c = confs[i];
                                break;
                        }
        free(ids);
        free(starts);
        free(confs);
        if (ret_conf)
                *ret_conf = c;
        return at;
}

static const char *const level_names[GP_PRED_LEVELS] = {"task", "name", "user", "tenant", "size"};

int gp_est_write(gp_daemon *d, const gp_task *t, int64_t now, gp_buf *b) {
        if (t->is_lease || (t->state != GP_TASK_QUEUED && t->state != GP_TASK_RUNNING))
                return 0;
        gp_pred_est e;
        if (gp_est_predict(d, t, &e) <= 0)
                return 0;
        int r = gp_buf_printf(b,
                              ",\"estimate\":{\"run_s\":%" PRId64 ",\"from\":\"%s\",\"runs\":%d,\"confidence\":%.2f}",
                              (e.ms + 999) / 1000, level_names[e.level], e.n, e.confidence);
        if (r == 0 && t->state == GP_TASK_QUEUED) {
                double c = 0;
                int64_t at = gp_est_start(d, t, now, &c);
                if (at > 0) {
                        char ts[40];
                        gp_time_format(at, ts, sizeof(ts));
                        r = gp_buf_printf(b, ",\"expected_start_at\":\"%s\",\"expected_start_confidence\":%.2f", ts,
                                          c);
                }
        }
        return r;
}
