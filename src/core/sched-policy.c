/* sched-policy.c - the queue policies, one gp_sched_policy_ops each (see
 * sched-int.h): which queue a task is in, its order there, which queue goes
 * next, queue positions, whether preemption applies; and their names.
 * The rest of the core asks s->pol.  docs/internals/adding-a-policy.md
 * says how to add one. */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* what the rest of the core asks                                     */

SCHED_PRIVATE bool fair_policy(const gp_sched *s) {
        return s->pol->fair;
}

/* Which tier goes next, given per-tier cursors and virtual passes. */
SCHED_PRIVATE int pick_tier(const gp_sched *s, stask *const cur[], const uint64_t lp[]) {
        return s->pol->pick_tier(s, cur, lp);
}

/* The tier a (not running) task belongs in. */
SCHED_PRIVATE int queue_of(const gp_sched *s, const stask *t) {
        return s->pol->queue_of(s, t->prio, t->attained);
}

/* ------------------------------------------------------------------ */
/* shared by several policies                                         */

static int queue_by_prio(const gp_sched *s, int prio, int64_t attained) {
        return prio;
}

/* strict and las: the most urgent non-empty tier */
static int pick_first(const gp_sched *s, stask *const cur[], const uint64_t lp[]) {
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                if (cur[i])
                        return i;
        return -1;
}

static uint32_t position_walk(gp_sched *s, const stask *t);

/* strict and las: every task of a more urgent tier, then those ahead in its own */
static uint32_t position_first(gp_sched *s, const stask *t) {
        if (!fair_policy(s))
                return position_walk(s, t); /* the tiers in turn, each in list order */
        uint64_t ahead = fair_rank(s, t);
        for (int j = 0; j < t->q; j++)
                ahead += s->tiers[j].n;
        return (uint32_t)(ahead + 1);
}

static bool before_tier(int q2, const stask *h2, int q, const stask *h) {
        return q2 < q;
}

static int64_t grow_by_prio(const gp_sched *s, const stask *t, int64_t now) {
        return t->prio;
}

static int64_t grow_none(const gp_sched *s, const stask *t, int64_t now) {
        return 0;
}

/* Positions from one walk of the whole queue in dispatch order (fifo,
 * sef): O(queue) once after each change. */
static void compute_positions(gp_sched *s) {
        if (s->pos_gen == s->gen + 1)
                return;
        stask *cur[GP_PRIORITY_LEVELS];
        uint64_t lp[GP_PRIORITY_LEVELS];
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                cur[i] = s->tiers[i].head;
                lp[i] = s->tiers[i].pass;
        }
        uint32_t pos = 0;
        for (;;) {
                int ti = pick_tier(s, cur, lp);
                if (ti < 0)
                        break;
                cur[ti]->pos = ++pos;
                cur[ti] = cur[ti]->next;
                lp[ti] += stride(s, ti);
        }
        s->pos_gen = s->gen + 1;
}

static uint32_t position_walk(gp_sched *s, const stask *t) {
        compute_positions(s);
        return t->pos;
}

/* ------------------------------------------------------------------ */
/* hybrid: P0 strict, P1..P9 by weighted fair queuing (stride)        */

static int pick_hybrid(const gp_sched *s, stask *const cur[], const uint64_t lp[]) {
        int best = -1;
        if (cur[0])
                return 0;
        for (int i = 1; i < GP_PRIORITY_LEVELS; i++)
                if (cur[i] && (best < 0 || lp[i] < lp[best]))
                        best = i;
        return best;
}

/* Position of a queued task without walking the queue.  Stride scheduling
 * gives tier j's m-th task (0-based) the virtual time pass_j + m*stride_j;
 * the dispatch order merges tiers by (virtual time, tier index), so the
 * tasks ahead of t (k-th in tier i, at time V) are, per other tier, those
 * with an earlier time (or an equal one in a lower tier), capped at the
 * tier's length.  Exactly the order compute_positions() simulates. */
static uint32_t position_hybrid(gp_sched *s, const stask *t) {
        const tier *q = &s->tiers[t->q];
        uint64_t k = fair_rank(s, t);
        int i = t->q;
        if (i == 0)
                return (uint32_t)(k + 1);
        uint64_t ahead = s->tiers[0].n + k;
        uint64_t V = q->pass + k * stride(s, i);
        for (int j = 1; j < GP_PRIORITY_LEVELS; j++) {
                const tier *o = &s->tiers[j];
                if (j == i || o->n == 0)
                        continue;
                uint64_t sj = stride(s, j), cnt;
                if (j < i)
                        cnt = V >= o->pass ? (V - o->pass) / sj + 1 : 0;
                else
                        cnt = V > o->pass ? (V - o->pass - 1) / sj + 1 : 0;
                ahead += cnt < o->n ? cnt : o->n;
        }
        return (uint32_t)(ahead + 1);
}

static bool before_hybrid(int q2, const stask *h2, int q, const stask *h) {
        return q2 == 0;
}

static const gp_sched_policy_ops hybrid_ops = {
        .name = "hybrid", .daemon = true, .fair = true, .tier_preempt = true,
        .queue_of = queue_by_prio, .pick_tier = pick_hybrid, .position = position_hybrid,
        .before = before_hybrid, .grow_key = grow_by_prio,
};

/* ------------------------------------------------------------------ */
/* strict: the lowest tier number first                               */

static const gp_sched_policy_ops strict_ops = {
        .name = "strict", .daemon = true, .fair = true, .tier_preempt = true,
        .queue_of = queue_by_prio, .pick_tier = pick_first, .position = position_first,
        .before = before_tier, .grow_key = grow_by_prio,
};

/* ------------------------------------------------------------------ */
/* fifo: submission (id) order, tiers ignored                         */

static int pick_fifo(const gp_sched *s, stask *const cur[], const uint64_t lp[]) {
        int best = -1;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                if (cur[i] && (best < 0 || cur[i]->id < cur[best]->id))
                        best = i;
        return best;
}

static bool before_fifo(int q2, const stask *h2, int q, const stask *h) {
        return h2->id < h->id;
}

static const gp_sched_policy_ops fifo_ops = {
        .name = "fifo", .daemon = true, .tier_preempt = true,
        .queue_of = queue_by_prio, .pick_tier = pick_fifo, .position = position_walk,
        .before = before_fifo, .grow_key = grow_none,
};

/* ------------------------------------------------------------------ */
/* las: least attained service first (queues by GPU time held)        */

static int queue_las(const gp_sched *s, int prio, int64_t attained) {
        return las_level(s, attained);
}

static int64_t grow_las(const gp_sched *s, const stask *t, int64_t now) {
        return las_level(s, attained_at(t, now));
}

static const gp_sched_policy_ops las_ops = {
        .name = "las", .las = true,
        .queue_of = queue_las, .pick_tier = pick_first, .position = position_first,
        .before = before_tier, .grow_key = grow_las,
};

/* ------------------------------------------------------------------ */
/* sef: shortest expected first (Slurm's order by time limit)         */

/* the predicted run time, else timeout_ms (an upper bound); a task
 * without either goes last */
static int64_t key_sef(const gp_sched *s, const stask *t) {
        if (t->estimate_ms > 0)
                return t->timeout_ms > 0 && t->timeout_ms < t->estimate_ms ? t->timeout_ms : t->estimate_ms;
        return t->timeout_ms > 0 ? t->timeout_ms : INT64_MAX;
}

/* every tier is ordered by (key, id): the smallest head goes next */
static bool sef_less(const stask *a, const stask *b) {
        return a->okey != b->okey ? a->okey < b->okey : a->id < b->id;
}

static int pick_sef(const gp_sched *s, stask *const cur[], const uint64_t lp[]) {
        int best = -1;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                if (cur[i] && (best < 0 || sef_less(cur[i], cur[best])))
                        best = i;
        return best;
}

static bool before_sef(int q2, const stask *h2, int q, const stask *h) {
        return sef_less(h2, h);
}

static int64_t grow_sef(const gp_sched *s, const stask *t, int64_t now) {
        return t->okey;
}

static const gp_sched_policy_ops sef_ops = {
        .name = "sef", .daemon = true,
        .queue_of = queue_by_prio, .order_key = key_sef, .pick_tier = pick_sef, .position = position_walk,
        .before = before_sef, .grow_key = grow_sef,
};

/* ------------------------------------------------------------------ */
/* spf: shortest predicted GPU time first within a tier, aged          */

/* The predicted GPU time (estimate, capped by the time limit, x GPUs)
 * plus the aging credit as a fixed point: every task ages at the same
 * rate, so "predicted GPU time - rate x wait" orders as "predicted GPU
 * time + rate x submit time", a key that never changes while the task
 * waits.  A task submitted W ms before another is overtaken by it only if
 * the other's predicted GPU time is rate x W smaller: how long a task can
 * be passed over is bounded by its own prediction over the rate.  A task
 * demoted (a preempted one whose attained service reached level l > 0)
 * carries a penalty of DEMOTE_PENALTY x the service at which it left level
 * l - 1: a finite one, so aging still bounds its wait, by (prediction +
 * penalty) over the rate. */
static int64_t key_spf(const gp_sched *s, const stask *t) {
        int64_t est = t->estimate_ms;
        if (t->timeout_ms > 0 && (est <= 0 || t->timeout_ms < est))
                est = t->timeout_ms;
        if (est < 0)
                est = 0;
        if (est > INT64_MAX / 4 / (t->ngpus > 0 ? t->ngpus : 1))
                est = INT64_MAX / 4 / (t->ngpus > 0 ? t->ngpus : 1);
        int64_t age = t->submit_ms > INT64_MAX / 4 / 1001 ? INT64_MAX / 4 : t->submit_ms * s->cfg.spf_aging_pct / 100;
        int64_t key = est * (t->ngpus > 0 ? t->ngpus : 1) + age;
        int lv = task_level(s, t, t->attained);
        if (lv > 0) { /* demoted: DEMOTE_PENALTY x the service it was demoted at */
                int64_t at = level_end(s, t, lv - 1);
                key += at < INT64_MAX / 4 / DEMOTE_PENALTY ? at * DEMOTE_PENALTY : INT64_MAX / 4;
        }
        return key;
}

static const gp_sched_policy_ops spf_ops = {
        .name = "spf", .daemon = true, .demote = true,
        .queue_of = queue_by_prio, .order_key = key_spf, .pick_tier = pick_first, .position = position_walk,
        .before = before_tier, .grow_key = grow_sef,
};

/* ------------------------------------------------------------------ */
/* the table and the names                                            */

const gp_sched_policy_ops *const policy_ops[] = {
        [GP_SCHED_HYBRID] = &hybrid_ops,
        [GP_SCHED_STRICT] = &strict_ops,
        [GP_SCHED_FIFO] = &fifo_ops,
        [GP_SCHED_LAS] = &las_ops,
        [GP_SCHED_SEF] = &sef_ops,
        [GP_SCHED_SPF] = &spf_ops,
};

/* The table's length is its highest entry + 1: a policy added to the enum
 * (before GP_SCHED_NPOLICIES) but not here is a compile error. */
_Static_assert(sizeof(policy_ops) / sizeof(policy_ops[0]) == GP_SCHED_NPOLICIES,
               "policy_ops[] needs one entry per gp_sched_policy");

const char *gp_sched_policy_name(gp_sched_policy p) {
        return (unsigned)p < GP_SCHED_NPOLICIES ? policy_ops[p]->name : NULL;
}

int gp_sched_policy_parse(const char *name, gp_sched_policy *ret) {
        for (int i = 0; name && i < GP_SCHED_NPOLICIES; i++)
                if (!strcmp(policy_ops[i]->name, name)) {
                        *ret = (gp_sched_policy)i;
                        return 0;
                }
        return -EINVAL;
}

bool gp_sched_policy_daemon(gp_sched_policy p) {
        return (unsigned)p < GP_SCHED_NPOLICIES && policy_ops[p]->daemon;
}
