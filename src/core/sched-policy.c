/* sched-policy.c - the queue policies, one gp_sched_policy_ops each
 * (see sched-int.h): which queue a task is in, its order there, which
 * queue goes next, queue positions, whether preemption applies; and the
 * names.  docs/internals/adding-a-policy.md says how to add one. */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* walking the queue in dispatch order                                */

bool fair_policy(const gp_sched *s) {
        return s->cfg.policy == GP_SCHED_HYBRID || s->cfg.policy == GP_SCHED_STRICT;
}

/* ------------------------------------------------------------------ */
/* queues                                                             */

/* Which tier goes next, given per-tier cursors and virtual passes. */
int pick_tier(const gp_sched *s, stask *const cur[], const uint64_t lp[]) {
        int best = -1;
        switch (s->cfg.policy) {
        case GP_SCHED_STRICT:
        case GP_SCHED_LAS:
                for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                        if (cur[i])
                                return i;
                return -1;
        case GP_SCHED_FIFO:
                for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                        if (cur[i] && (best < 0 || cur[i]->id < cur[best]->id))
                                best = i;
                return best;
        case GP_SCHED_HYBRID:
        default:
                if (cur[0])
                        return 0;
                for (int i = 1; i < GP_PRIORITY_LEVELS; i++)
                        if (cur[i] && (best < 0 || lp[i] < lp[best]))
                                best = i;
                return best;
        }
}

/* ------------------------------------------------------------------ */
/* tasks                                                              */

/* The tier a (not running) task belongs in. */
int queue_of(const gp_sched *s, const stask *t) {
        return s->cfg.policy == GP_SCHED_LAS ? las_level(s, t->attained) : t->prio;
}

/* ------------------------------------------------------------------ */
/* views                                                              */

void compute_positions(gp_sched *s) {
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

uint32_t position_of(gp_sched *s, const stask *t) {
        const tier *q = &s->tiers[t->q];
        uint64_t k = fair_policy(s) ? fair_rank(s, t) : fen_sum(q, t->seq - 1);
        int i = t->q;
        if (s->cfg.policy == GP_SCHED_STRICT || s->cfg.policy == GP_SCHED_LAS) {
                uint64_t ahead = k;
                for (int j = 0; j < i; j++)
                        ahead += s->tiers[j].n;
                return (uint32_t)(ahead + 1);
        }
        /* hybrid */
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
