/* sched-fair.c - fair share: tenants' decayed usage (half-life), the key
 * that orders tenants inside a tier, queue positions under fair share,
 * and whether that order changed since the last run. */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* decayed usage (fair share)                                         */

/* Decayed usage (milli-GPU-ms) at `now`: what it was at usage_ms halved
 * every half-life, plus the running share integrated with the same decay.
 * A time before usage_ms gives the stored value. */
static double usage_at(const gp_sched *s, const stenant *T, int64_t now) {
        int64_t dt = now - T->usage_ms;
        if (dt <= 0)
                return T->usage;
        double hl = (double)s->cfg.fairshare_half_life_ms;
        if (hl <= 0)
                return T->usage + (double)T->run_milli * (double)dt;
        double x = (double)dt / hl;
        return T->usage * exp2(-x) + (double)T->run_milli * (hl / M_LN2) * -expm1(-x * M_LN2);
}

/* ------------------------------------------------------------------ */
/* tenants, groups and their per-tier queues                          */

SCHED_PRIVATE void usage_advance(gp_sched *s, stenant *T, int64_t now) {
        if (now > T->usage_ms) {
                T->usage = usage_at(s, T, now);
                T->usage_ms = now;
        }
}

/* decayed usage per unit of weight at the last run (cached) */
SCHED_PRIVATE double tenant_key(const gp_sched *s, stenant *T) {
        if (!T->key_ok || T->key_ms != s->last_run_ms) {
                T->key = usage_at(s, T, s->last_run_ms) / T->weight;
                T->key_ms = s->last_run_ms;
                T->key_ok = true;
        }
        return T->key;
}

/* ------------------------------------------------------------------ */
/* when a run can be left out: the fair-share order                   */

typedef struct tkey {
        uint8_t cls;
        double then, now;
} tkey;

/* ------------------------------------------------------------------ */
/* elastic tasks: grow onto idle GPUs, shrink for the task whose turn it is */

static int cmp_tkey(const void *a, const void *b) {
        const tkey *x = a, *y = b;
        if (x->cls != y->cls)
                return x->cls < y->cls ? -1 : 1;
        return x->then < y->then ? -1 : x->then > y->then;
}

/* Does every tier order its tenants the same at now as at the last run?
 * The walk of a fair policy merges the tenants' lists by (class, usage per
 * weight), ties by task id; classes do not change with time, usage
 * decays: the merge is the same when every pair of tenants of one class
 * compares the same way (<, = or >) at both times.  Sorted by the old key,
 * that is: equal old keys stay equal, increasing ones stay increasing. */
SCHED_PRIVATE bool fair_order_kept(const gp_sched *s, int64_t now) {
        if (!fair_policy(s))
                return true;
        tkey k[64];
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                const tier *tr = &s->tiers[i];
                if (tr->nact < 2)
                        continue;
                if (tr->nact > 64)
                        return false; /* bounded work; just run */
                for (uint32_t j = 0; j < tr->nact; j++) {
                        const stenant *T = &s->tn[tr->act[j]];
                        /* the formula of tenant_key, bit for bit */
                        k[j] = (tkey){.cls = tenant_class(s, T),
                                      .then = usage_at(s, T, s->last_run_ms) / T->weight,
                                      .now = usage_at(s, T, now) / T->weight};
                }
                qsort(k, tr->nact, sizeof(k[0]), cmp_tkey);
                for (uint32_t j = 1; j < tr->nact; j++) {
                        if (k[j].cls != k[j - 1].cls)
                                continue;
                        if (k[j].then == k[j - 1].then ? k[j].now != k[j - 1].now : !(k[j - 1].now < k[j].now))
                                return false;
                }
        }
        return true;
}

/* ------------------------------------------------------------------ */
/* queue positions under fair share                                   */

/* Under hybrid and strict, tasks ahead of t inside its tier: those of
 * tenants that go before t's (class, then usage/weight), and of tenants
 * that tie with it those with a lower id (the walk merges ties by id).
 * O(tenants queued in the tier x log n). */
SCHED_PRIVATE uint64_t fair_rank(gp_sched *s, const stask *t) {
        stenant *T = &s->tn[t->tenant];
        int i = t->q;
        uint8_t c = tenant_class(s, T);
        double key = tenant_key(s, T);
        uint64_t ahead = tl_fen_sum(&T->q[i], t->tl_idx);
        const tier *tr = &s->tiers[i];
        for (uint32_t j = 0; j < tr->nact; j++) {
                if (tr->act[j] == t->tenant)
                        continue;
                stenant *U = &s->tn[tr->act[j]];
                uint8_t cu = tenant_class(s, U);
                if (cu > c)
                        continue;
                if (cu < c) {
                        ahead += U->q[i].n;
                        continue;
                }
                double ku = tenant_key(s, U);
                if (ku < key)
                        ahead += U->q[i].n;
                else if (ku == key)
                        ahead += tl_below(&U->q[i], t->id);
        }
        return ahead;
}

/* ------------------------------------------------------------------ */
/* tenant usage: settings and views                                   */

int gp_sched_tenant_usage(gp_sched *s, const char *tenant, int64_t now_ms, struct gp_sched_tenant_usage *ret) {
        uint32_t tid;
        if (intern_find(&s->tenants, tenant, &tid) < 0 || tid >= s->tn_cap)
                return -ENOENT;
        const stenant *T = &s->tn[tid];
        *ret = (gp_sched_tenant_view){.running = T->running, .queued = T->queued, .gpus_milli = T->run_milli,
                                       .fair_share_usage = usage_at(s, T, now_ms) / 1e6};
        return 0;
}

/* ------------------------------------------------------------------ */
/* tenants and groups: settings and usage                             */

int gp_sched_tenant_set_usage(gp_sched *s, const char *tenant, int64_t now_ms, double gpu_seconds) {
        if (!name_ok(tenant, false) || !(gpu_seconds >= 0) || gpu_seconds > 1e15)
                return -EINVAL;
        uint32_t tid;
        if (intern_get(&s->tenants, tenant, &tid) < 0 || tenant_ensure(s, tid) < 0)
                return -ENOMEM;
        stenant *T = &s->tn[tid];
        tenant_out(s, T);
        T->usage = gpu_seconds * 1e6;
        T->usage_ms = now_ms;
        tenant_in(s, T);
        s->gen++;
        return 0;
}
