/* admit.c - admission control of the gateway (see admit.h).
 *
 * Invariants:
 *   - a QUEUED ticket is in exactly one (tier, tenant) FIFO and in the
 *     global FIFO (submission order = deadline order, as the timeout is one
 *     value); q->n, tier->n, tenant->queued and a->queued count them;
 *   - a RUNNING ticket is in no list; a->running and tenant->running count
 *     them;
 *   - bucket levels are kept as units * period_ms so refills are exact
 *     integer arithmetic; a level may be negative (a big request passed).
 */
#include "core/admit.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define STRIDE_ONE ((uint64_t)1 << 32)

/* The ticket of a link in a tenant FIFO / in the global FIFO. */
#define TICKET(l) GP_LIST_ENTRY(l, gp_admit_ticket, link)
#define FTICKET(l) GP_LIST_ENTRY(l, gp_admit_ticket, flink)

typedef struct bucket {
        int64_t cap;       /* units per period; 0 = unlimited */
        int64_t period_ms; /* 1000 or 60000 */
        int64_t level;     /* units * period_ms */
        int64_t t_ms;      /* last refill */
} bucket;

typedef struct tq {
        gp_list fifo;      /* of gp_admit_ticket.link */
        size_t n;
        uint64_t pass;     /* stride pass of this tenant inside the tier */
        uint64_t epoch;    /* busy period the pass belongs to */
} tq;

typedef struct tenant {
        char id[GP_ADMIT_TENANT_MAX];
        gp_admit_tenant_limits lim;
        bucket rpm, tpm;
        uint64_t running, queued;
        uint64_t requests_total, tokens_total, rejected_total, expired_total;
} tenant;

typedef struct tier {
        size_t n;          /* queued in this tier */
        uint64_t pass;     /* stride pass among tiers 1..9 */
        uint64_t vtime;    /* virtual time of the tenants inside */
        uint64_t epoch;    /* busy period the pass belongs to */
        tq *q;             /* [GP_ADMIT_MAX_TENANTS] */
} tier;

struct gp_admit {
        gp_admit_limits lim;
        bucket rps, tps;
        tier tiers[GP_PRIORITY_LEVELS];
        uint64_t vtime;    /* virtual time of the tiers */
        uint64_t epoch;    /* busy period: grows each time the queue runs empty */
        tenant *tenants;   /* [GP_ADMIT_MAX_TENANTS] */
        size_t ntenants;
        gp_list fifo;      /* of gp_admit_ticket.flink: all queued, oldest first */
        uint64_t queued, running, seq;
        uint64_t admitted_total, rejected_total, expired_total, cancelled_total;
        int64_t blocked_until_ms; /* a rate bucket holds the queue back until then; 0 = none */
};

/* ---- buckets ---- */

static void bucket_set(bucket *b, int64_t cap, int64_t period_ms, int64_t now) {
        bool was_unlimited = b->cap == 0;
        b->period_ms = period_ms;
        b->cap = cap < 0 ? 0 : cap;
        if (b->cap == 0)
                return;
        if (was_unlimited) {
                b->level = b->cap * period_ms; /* starts full */
                b->t_ms = now;
        } else if (b->level > b->cap * period_ms) {
                b->level = b->cap * period_ms;
        }
}

static void bucket_refill(bucket *b, int64_t now) {
        if (b->cap == 0)
                return;
        int64_t dt = now - b->t_ms;
        if (dt <= 0)
                return;
        if (dt > b->period_ms * 2 + 1)
                dt = b->period_ms * 2 + 1; /* no overflow after a long idle time: full anyway */
        b->level += dt * b->cap;
        if (b->level > b->cap * b->period_ms)
                b->level = b->cap * b->period_ms;
        b->t_ms = now;
}

/* Would n units pass now?  A request bigger than the bucket passes when
 * the bucket is full. */
static bool bucket_ok(bucket *b, int64_t n, int64_t now) {
        if (b->cap == 0)
                return true;
        bucket_refill(b, now);
        int64_t need = (n < b->cap ? n : b->cap) * b->period_ms;
        return b->level >= need;
}

/* ms until n units would pass (0 = now). */
static int64_t bucket_wait_ms(const bucket *b, int64_t n) {
        if (b->cap == 0)
                return 0;
        int64_t need = (n < b->cap ? n : b->cap) * b->period_ms - b->level;
        if (need <= 0)
                return 0;
        return (need + b->cap - 1) / b->cap;
}

static void bucket_take(bucket *b, int64_t n) {
        if (b->cap)
                b->level -= n * b->period_ms;
}

static void bucket_give(bucket *b, int64_t n) {
        if (b->cap == 0)
                return;
        b->level += n * b->period_ms;
        if (b->level > b->cap * b->period_ms)
                b->level = b->cap * b->period_ms;
}

/* ---- lifecycle ---- */

gp_admit *gp_admit_new(const gp_admit_limits *lim, int64_t now_ms) {
        gp_admit *a = calloc(1, sizeof(*a));
        if (!a)
                return NULL;
        a->tenants = calloc(GP_ADMIT_MAX_TENANTS, sizeof(tenant));
        if (!a->tenants)
                goto fail;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                a->tiers[i].q = calloc(GP_ADMIT_MAX_TENANTS, sizeof(tq));
                if (!a->tiers[i].q)
                        goto fail;
                for (int j = 0; j < GP_ADMIT_MAX_TENANTS; j++)
                        gp_list_init(&a->tiers[i].q[j].fifo);
        }
        gp_list_init(&a->fifo);
        gp_admit_set_limits(a, lim, now_ms);
        return a;
fail:
        gp_admit_free(a);
        return NULL;
}

void gp_admit_free(gp_admit *a) {
        if (!a)
                return;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                free(a->tiers[i].q);
        free(a->tenants);
        free(a);
}

void gp_admit_set_limits(gp_admit *a, const gp_admit_limits *lim, int64_t now_ms) {
        a->lim = *lim;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                if (a->lim.weights[i] < 1)
                        a->lim.weights[i] = 1;
        if (a->lim.queue_timeout_ms < 1)
                a->lim.queue_timeout_ms = 1;
        bucket_set(&a->rps, lim->max_rps, 1000, now_ms);
        bucket_set(&a->tps, lim->max_tokens_per_sec, 1000, now_ms);
}

int gp_admit_tenant(gp_admit *a, const char *id, const gp_admit_tenant_limits *tl, int64_t now_ms) {
        size_t len = id ? strlen(id) : 0;
        if (len == 0 || len >= GP_ADMIT_TENANT_MAX)
                return -EINVAL;
        size_t i;
        for (i = 0; i < a->ntenants; i++)
                if (!strcmp(a->tenants[i].id, id))
                        break;
        if (i == a->ntenants) {
                if (a->ntenants >= GP_ADMIT_MAX_TENANTS)
                        return -ENOSPC;
                memcpy(a->tenants[i].id, id, len + 1);
                a->ntenants++;
        }
        tenant *t = &a->tenants[i];
        t->lim = *tl;
        if (t->lim.weight < 1)
                t->lim.weight = 1;
        bucket_set(&t->rpm, tl->rpm, 60000, now_ms);
        bucket_set(&t->tpm, tl->tpm, 60000, now_ms);
        return (int)i;
}

/* ---- queues ---- */

static uint64_t tier_stride(const gp_admit *a, int i) {
        return STRIDE_ONE / a->lim.weights[i];
}

static void unlink_ticket(gp_admit *a, gp_admit_ticket *t) {
        tier *tr = &a->tiers[t->tier];
        tq *q = &tr->q[t->tenant];
        gp_list_del(&t->link);
        gp_list_del(&t->flink);
        q->n--;
        tr->n--;
        a->queued--;
        a->tenants[t->tenant].queued--;
}

int gp_admit_submit(gp_admit *a, gp_admit_ticket *t, int64_t now_ms) {
        if (!t || t->state != GP_ADMIT_NEW || t->tier < 0 || t->tier >= GP_PRIORITY_LEVELS || t->tenant < 0 ||
            (size_t)t->tenant >= a->ntenants || t->tokens < 0)
                return -EINVAL;
        if (a->queued >= (uint64_t)(a->lim.max_queue > 0 ? a->lim.max_queue : 1)) {
                a->rejected_total++;
                a->tenants[t->tenant].rejected_total++;
                return -EAGAIN;
        }
        tier *tr = &a->tiers[t->tier];
        tq *q = &tr->q[t->tenant];
        /* a tier or tenant that starts waiting gets no credit for the time it did not
         * wait; after the queue ran empty (a new busy period) past service is forgotten */
        if (tr->epoch != a->epoch) {
                tr->epoch = a->epoch;
                tr->pass = a->vtime;
                tr->vtime = 0;
        }
        if (tr->n == 0 && tr->pass < a->vtime)
                tr->pass = a->vtime;
        if (q->epoch != a->epoch) {
                q->epoch = a->epoch;
                q->pass = tr->vtime;
        }
        if (q->n == 0 && q->pass < tr->vtime)
                q->pass = tr->vtime;
        t->state = GP_ADMIT_QUEUED;
        t->enqueued_ms = now_ms;
        t->seq = ++a->seq;
        gp_list_add_tail(&q->fifo, &t->link);
        gp_list_add_tail(&a->fifo, &t->flink);
        q->n++;
        tr->n++;
        a->queued++;
        a->tenants[t->tenant].queued++;
        return 0;
}

/* May the head of tenant ti's queue run, as far as the tenant's own
 * limits go?  wait_ms gets how long a rate limit holds it (0 = other). */
static bool tenant_ok(gp_admit *a, size_t ti, const gp_admit_ticket *head, int64_t now, int64_t *wait_ms) {
        tenant *tn = &a->tenants[ti];
        *wait_ms = 0;
        if (tn->lim.max_concurrent > 0 && tn->running >= (uint64_t)tn->lim.max_concurrent)
                return false;
        if (!bucket_ok(&tn->rpm, 1, now)) {
                *wait_ms = bucket_wait_ms(&tn->rpm, 1);
                return false;
        }
        if (!bucket_ok(&tn->tpm, head->tokens, now)) {
                *wait_ms = bucket_wait_ms(&tn->tpm, head->tokens);
                return false;
        }
        return true;
}

static void note_wait(gp_admit *a, int64_t now, int64_t wait_ms) {
        if (wait_ms <= 0)
                return;
        int64_t at = now + wait_ms;
        if (a->blocked_until_ms == 0 || at < a->blocked_until_ms)
                a->blocked_until_ms = at;
}

/* The tenant of tier tr whose turn it is and who may run: the least pass
 * among the eligible ones.  -1 when none. */
static int pick_tenant(gp_admit *a, tier *tr, int64_t now) {
        int best = -1;
        uint64_t best_pass = 0;
        for (size_t i = 0; i < a->ntenants; i++) {
                tq *q = &tr->q[i];
                if (q->n == 0)
                        continue;
                int64_t w;
                const gp_admit_ticket *head = TICKET(q->fifo.next);
                if (!tenant_ok(a, i, head, now, &w)) {
                        note_wait(a, now, w);
                        continue;
                }
                if (best < 0 || q->pass < best_pass || (q->pass == best_pass && head->seq < TICKET(tr->q[best].fifo.next)->seq)) {
                        best = (int)i;
                        best_pass = q->pass;
                }
        }
        return best;
}

gp_admit_ticket *gp_admit_next(gp_admit *a, int64_t now_ms) {
        a->blocked_until_ms = 0;
        if (a->queued == 0)
                return NULL;
        if (a->lim.max_concurrent > 0 && a->running >= (uint64_t)a->lim.max_concurrent)
                return NULL;
        if (!bucket_ok(&a->rps, 1, now_ms)) {
                note_wait(a, now_ms, bucket_wait_ms(&a->rps, 1));
                return NULL;
        }
        int ti = -1, tn = -1;
        if (a->tiers[0].n > 0)
                tn = pick_tenant(a, &a->tiers[0], now_ms);
        if (tn >= 0) {
                ti = 0;
        } else {
                /* tiers 1..9 in pass order; a tier whose tenants are all held back is skipped */
                bool tried[GP_PRIORITY_LEVELS] = {false};
                for (;;) {
                        int cand = -1;
                        for (int i = 1; i < GP_PRIORITY_LEVELS; i++)
                                if (a->tiers[i].n > 0 && !tried[i] &&
                                    (cand < 0 || a->tiers[i].pass < a->tiers[cand].pass))
                                        cand = i;
                        if (cand < 0)
                                break;
                        tried[cand] = true;
                        tn = pick_tenant(a, &a->tiers[cand], now_ms);
                        if (tn >= 0) {
                                ti = cand;
                                break;
                        }
                }
        }
        if (ti < 0)
                return NULL;
        tier *tr = &a->tiers[ti];
        tq *q = &tr->q[tn];
        gp_admit_ticket *t = TICKET(q->fifo.next);
        /* the global token rate holds the line in order: no overtaking by smaller requests */
        if (!bucket_ok(&a->tps, t->tokens, now_ms)) {
                note_wait(a, now_ms, bucket_wait_ms(&a->tps, t->tokens));
                return NULL;
        }
        unlink_ticket(a, t);
        if (ti > 0) {
                a->vtime = tr->pass;
                tr->pass += tier_stride(a, ti);
        }
        tenant *te = &a->tenants[tn];
        tr->vtime = q->pass;
        q->pass += STRIDE_ONE / te->lim.weight;
        bucket_take(&a->rps, 1);
        bucket_take(&a->tps, t->tokens);
        bucket_take(&te->rpm, 1);
        bucket_take(&te->tpm, t->tokens);
        te->running++;
        te->requests_total++;
        a->running++;
        a->admitted_total++;
        t->state = GP_ADMIT_RUNNING;
        if (a->queued == 0)
                a->epoch++;
        return t;
}

gp_admit_ticket *gp_admit_expired(gp_admit *a, int64_t now_ms) {
        if (gp_list_empty(&a->fifo))
                return NULL;
        gp_admit_ticket *t = FTICKET(a->fifo.next);
        if (now_ms - t->enqueued_ms < a->lim.queue_timeout_ms)
                return NULL;
        unlink_ticket(a, t);
        t->state = GP_ADMIT_NEW;
        a->expired_total++;
        a->tenants[t->tenant].expired_total++;
        return t;
}

void gp_admit_cancel(gp_admit *a, gp_admit_ticket *t) {
        if (!t || t->state != GP_ADMIT_QUEUED)
                return;
        unlink_ticket(a, t);
        t->state = GP_ADMIT_NEW;
        a->cancelled_total++;
}

void gp_admit_done(gp_admit *a, gp_admit_ticket *t, int64_t real_tokens, int64_t now_ms) {
        if (!t || t->state != GP_ADMIT_RUNNING)
                return;
        tenant *te = &a->tenants[t->tenant];
        t->state = GP_ADMIT_NEW;
        a->running--;
        te->running--;
        int64_t used = real_tokens < 0 ? t->tokens : real_tokens;
        te->tokens_total += (uint64_t)used;
        if (real_tokens >= 0) {
                int64_t diff = t->tokens - real_tokens; /* > 0: give back; < 0: take more */
                bucket_refill(&a->tps, now_ms);
                bucket_refill(&te->tpm, now_ms);
                if (diff > 0) {
                        bucket_give(&a->tps, diff);
                        bucket_give(&te->tpm, diff);
                } else if (diff < 0) {
                        bucket_take(&a->tps, -diff);
                        bucket_take(&te->tpm, -diff);
                }
        }
}

int64_t gp_admit_wake_ms(const gp_admit *a, int64_t now_ms) {
        if (gp_list_empty(&a->fifo))
                return INT64_MAX;
        int64_t w = FTICKET(a->fifo.next)->enqueued_ms + a->lim.queue_timeout_ms;
        if (a->blocked_until_ms && a->blocked_until_ms < w)
                w = a->blocked_until_ms;
        return w < now_ms ? now_ms : w;
}

/* The tighter of two (limit, remaining, reset) pictures; limit 0 = none. */
static void tighter(int64_t lim, int64_t rem, int64_t reset, int64_t *rl, int64_t *rr, int64_t *rs) {
        if (lim == 0)
                return;
        if (*rl == 0 || rem * (*rl) < (*rr) * lim) { /* compare remaining fractions */
                *rl = lim;
                *rr = rem;
                *rs = reset;
        }
}

static int64_t level_units(const bucket *b) {
        return b->level <= 0 ? 0 : b->level / b->period_ms;
}

static int64_t full_in_ms(const bucket *b) {
        int64_t need = b->cap * b->period_ms - b->level;
        return need <= 0 ? 0 : (need + b->cap - 1) / b->cap;
}

void gp_admit_ratelimit_get(gp_admit *a, int tn, int64_t now_ms, gp_admit_ratelimit *ret) {
        memset(ret, 0, sizeof(*ret));
        bucket_refill(&a->rps, now_ms);
        bucket_refill(&a->tps, now_ms);
        int64_t wait = 0;
        if (a->rps.cap) {
                tighter(a->rps.cap, level_units(&a->rps), full_in_ms(&a->rps), &ret->limit_requests,
                        &ret->remaining_requests, &ret->reset_requests_ms);
                wait = bucket_wait_ms(&a->rps, 1);
        }
        if (a->tps.cap)
                tighter(a->tps.cap, level_units(&a->tps), full_in_ms(&a->tps), &ret->limit_tokens,
                        &ret->remaining_tokens, &ret->reset_tokens_ms);
        if (tn >= 0 && (size_t)tn < a->ntenants) {
                tenant *te = &a->tenants[tn];
                bucket_refill(&te->rpm, now_ms);
                bucket_refill(&te->tpm, now_ms);
                if (te->rpm.cap) {
                        tighter(te->rpm.cap, level_units(&te->rpm), full_in_ms(&te->rpm), &ret->limit_requests,
                                &ret->remaining_requests, &ret->reset_requests_ms);
                        int64_t w = bucket_wait_ms(&te->rpm, 1);
                        if (w > wait)
                                wait = w;
                }
                if (te->tpm.cap)
                        tighter(te->tpm.cap, level_units(&te->tpm), full_in_ms(&te->tpm), &ret->limit_tokens,
                                &ret->remaining_tokens, &ret->reset_tokens_ms);
        }
        /* nothing rate-bound: the queue was full or the wait too long; come back in a second */
        ret->retry_after_ms = wait > 0 ? wait : 1000;
}

void gp_admit_get_stats(const gp_admit *a, gp_admit_stats *ret) {
        memset(ret, 0, sizeof(*ret));
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                ret->queued[i] = a->tiers[i].n;
        ret->queued_total = a->queued;
        ret->running = a->running;
        ret->admitted_total = a->admitted_total;
        ret->rejected_total = a->rejected_total;
        ret->expired_total = a->expired_total;
        ret->cancelled_total = a->cancelled_total;
}

size_t gp_admit_tenant_count(const gp_admit *a) {
        return a->ntenants;
}

int gp_admit_tenant_stats_get(const gp_admit *a, size_t i, gp_admit_tenant_stats *ret) {
        if (i >= a->ntenants)
                return -ENOENT;
        const tenant *t = &a->tenants[i];
        memset(ret, 0, sizeof(*ret));
        memcpy(ret->id, t->id, sizeof(ret->id));
        ret->running = t->running;
        ret->queued = t->queued;
        ret->requests_total = t->requests_total;
        ret->tokens_total = t->tokens_total;
        ret->rejected_total = t->rejected_total;
        ret->expired_total = t->expired_total;
        return 0;
}

void gp_admit_foreach_queued(const gp_admit *a, int (*fn)(const gp_admit_ticket *t, void *ud), void *ud) {
        GP_LIST_FOR_EACH(l, &a->fifo)
                if (fn(FTICKET(l), ud))
                        return;
}
