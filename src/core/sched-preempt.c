/* sched-preempt.c - preemption: the counts of preemptible work per node,
 * LAS preemption (later attained-service queues make room), and
 * preemption for tiers and guarantees (cfg.preemption, reclaim). */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* tenants, groups and their per-tier queues                          */

/* Running reclaimable tasks per node and tier, with their oldest and
 * newest start (to skip or bound nodes quickly).  Called after a start and
 * before a stop (t still on its GPUs). */
SCHED_PRIVATE void pre_count(gp_sched *s, const stask *t, int d) {
        if (!reclaimable(t))
                return;
        uint32_t ni = s->gpus[t->gpus[0]].node;
        snode *n = &s->nodes[ni];
        n->npre += d;
        n->npre_prio[t->prio] += d;
        uint64_t bit = (uint64_t)1 << (ni & 63);
        if (n->npre_prio[t->prio]) {
                n->pre_tiers |= (uint16_t)(1u << t->prio);
                s->pbits[t->prio][ni >> 6] |= bit;
        } else {
                n->pre_tiers &= (uint16_t)~(1u << t->prio);
                s->pbits[t->prio][ni >> 6] &= ~bit;
        }
        s->npre += (size_t)(ptrdiff_t)d;
        struct pspan *ps = &s->pspan[ni];
        if (d > 0) {
                if (n->npre == 1 || t->start_ms < ps->min)
                        ps->min = t->start_ms;
                if (n->npre == 1 || t->start_ms > ps->max)
                        ps->max = t->start_ms;
                return;
        }
        if (!n->npre || (t->start_ms != ps->min && t->start_ms != ps->max))
                return;
        bool first = true;
        for (int i = 0; i < n->ngpus; i++) {
                const sgpu *g = &s->gpus[n->gpus[i]];
                for (int k = 0; k < g->ntasks; k++) {
                        const stask *x = g->tasks[k];
                        if (x == t || !reclaimable(x) || x->gpus[0] != n->gpus[i])
                                continue;
                        if (first || x->start_ms < ps->min)
                                ps->min = x->start_ms;
                        if (first || x->start_ms > ps->max)
                                ps->max = x->start_ms;
                        first = false;
                }
        }
}

static bool was_preempted_by(const stask *t, int64_t id) {
        for (int i = 0; i < t->n_pre_by; i++)
                if (t->pre_by[i] == id)
                        return true;
        return false;
}

/* ------------------------------------------------------------------ */
/* LAS preemption                                                     */

/* May running task v be preempted for t, the task whose turn it is?  v has
 * run las_min_run_ms and its level is later than t's; under a demoting
 * policy (spf) v is also of t's tier or a less urgent one. */
static bool las_victim(const gp_sched *s, const stask *v, const stask *t, int64_t now) {
        return v->running && v->preemptible && now - v->start_ms >= s->cfg.las_min_run_ms &&
               (s->pol->las || v->prio >= t->prio) && task_level(s, v, attained_at(v, now)) > wait_level(s, t);
}

/* Can GPU g take t once the tasks marked with the current pstamp are gone? */
static bool gpu_freed(const gp_sched *s, const sgpu *g, const stask *t) {
        if (!gpu_usable(g) || !kind_ok(t, g) || g->usable < t->mem)
                return false;
        for (int i = 0; i < g->ntasks; i++)
                if (g->tasks[i]->pstamp != s->pstamp)
                        return false;
        return true;
}

/* Mark (with a fresh pstamp) the victims that would free enough whole GPUs
 * for t on node ni: most attained service first, then latest start, then
 * highest id.  Returns the GPUs the marked victims hold in all (the cost),
 * or -1 when the node cannot make room. */
static int las_plan(gp_sched *s, const stask *t, uint32_t ni, int64_t now) {
        const snode *nd = &s->nodes[ni];
        if (!(nd->kinds & t->kinds) || nd->ngpus < t->ngpus)
                return -1;
        if (++s->pstamp == 0) {
                /* wrapped: clear every mark so none is mistaken for current */
                size_t pos = 0;
                stask *pt;
                while ((pt = gp_i64map_next(&s->tasks, &pos, NULL)))
                        pt->pstamp = 0;
                s->pstamp = 1;
        }
        int cost = 0;
        for (;;) {
                int freed = 0;
                for (int i = 0; i < nd->ngpus; i++)
                        freed += gpu_freed(s, &s->gpus[nd->gpus[i]], t);
                if (freed >= t->ngpus)
                        return cost;
                /* the GPU whose least-served unmarked task is the most served */
                const sgpu *best = NULL;
                int64_t best_a = 0, best_start = 0, best_id = 0;
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (g->ntasks == 0 || !gpu_usable(g) || !kind_ok(t, g) || g->usable < t->mem)
                                continue;
                        bool ok = true, any = false;
                        int64_t a = INT64_MAX, st = 0, id = 0;
                        for (int k = 0; k < g->ntasks && ok; k++) {
                                const stask *v = g->tasks[k];
                                if (v->pstamp == s->pstamp)
                                        continue;
                                if (!las_victim(s, v, t, now)) {
                                        ok = false;
                                        break;
                                }
                                int64_t va = attained_at(v, now);
                                if (!any || va < a || (va == a && (v->start_ms < st || (v->start_ms == st && v->id < id)))) {
                                        a = va;
                                        st = v->start_ms;
                                        id = v->id;
                                }
                                any = true;
                        }
                        if (!ok || !any)
                                continue;
                        if (!best || a > best_a || (a == best_a && (st > best_start || (st == best_start && id > best_id)))) {
                                best = g;
                                best_a = a;
                                best_start = st;
                                best_id = id;
                        }
                }
                if (!best)
                        return -1;
                for (int k = 0; k < best->ntasks; k++) {
                        stask *v = best->tasks[k];
                        if (v->pstamp != s->pstamp) {
                                v->pstamp = s->pstamp;
                                cost += v->ngpus;
                        }
                }
        }
}

/* Stop running task v and queue it again (its run counts as service). */
/* A preempted task v: stopped, and queued again at its place by id (its
 * queue recomputed); forgotten, like gp_sched_requeue, when it cannot be
 * queued.  0 or -ENOMEM. */
static int requeue_preempted(gp_sched *s, stask *v, int64_t now) {
        stop(s, v, now);
        v->rcode = R_NONE;
        v->q = (uint8_t)queue_of(s, v);
        if (s->pol->order_key) /* its attained service may have moved it (spf's level) */
                v->okey = s->pol->order_key(s, v);
        s->total_preempted++;
        if (queue_add(s, v) < 0) {
                /* cannot queue it again: forgotten, like gp_sched_requeue */
                map_del(s, v->id);
                task_free(s, v);
                return -ENOMEM;
        }
        return 0;
}

static int las_preempt(gp_sched *s, stask *v, int64_t now, gp_sched_decision **ret, size_t *ret_n,
                       size_t *ret_cap) {
        gp_sched_decision d = {.kind = GP_DECIDE_PREEMPT, .id = v->id, .n_gpus = v->ngpus,
                               .gpus = arena_copy(s, v->gpus, v->ngpus)};
        if (!d.gpus || requeue_preempted(s, v, now) < 0)
                return -ENOMEM;
        return emit(ret, ret_n, ret_cap, &d);
}

/* Make room for t, the task whose turn it is, by preempting tasks of later
 * queues on the node where that costs the fewest GPUs (then the lowest
 * node).  1 if something was preempted, 0 if no node can make room (nothing
 * changed), -ENOMEM. */
SCHED_PRIVATE int las_make_room(gp_sched *s, stask *t, int64_t now, gp_sched_decision **ret, size_t *ret_n,
                  size_t *ret_cap) {
        int best_cost = -1;
        uint32_t best = NIL;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                int c = las_plan(s, t, ni, now);
                if (c > 0 && (best_cost < 0 || c < best_cost)) {
                        best_cost = c;
                        best = ni;
                }
        }
        if (best == NIL)
                return 0;
        las_plan(s, t, best, now); /* mark that node's victims again */
        const snode *nd = &s->nodes[best];
        for (;;) {
                stask *v = NULL;
                for (int i = 0; i < nd->ngpus && !v; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        for (int k = 0; k < g->ntasks; k++)
                                if (g->tasks[k]->pstamp == s->pstamp) {
                                        v = g->tasks[k];
                                        break;
                                }
                }
                if (!v)
                        return 1;
                int rc = las_preempt(s, v, now, ret, ret_n, ret_cap);
                if (rc < 0)
                        return rc;
        }
}

/* ------------------------------------------------------------------ */
/* preemption for tiers and guarantees (cfg.preemption)               */

static void pstamp_next(gp_sched *s) {
        if (++s->pstamp == 0) {
                /* wrapped: clear every mark so none is mistaken for current */
                size_t pos = 0;
                stask *pt;
                while ((pt = gp_i64map_next(&s->tasks, &pos, NULL)))
                        pt->pstamp = 0;
                for (uint32_t i = 0; i < s->tn_cap; i++)
                        s->tn[i].plan_stamp = 0;
                s->pstamp = 1;
        }
}

/* share of T's tasks marked as victims in the current plan */
static int64_t plan_milli(const gp_sched *s, const stenant *T) {
        return T->plan_stamp == s->pstamp ? T->plan_milli : 0;
}

static void plan_mark(gp_sched *s, stask *v, bool on) {
        stenant *V = &s->tn[v->tenant];
        if (V->plan_stamp != s->pstamp) {
                V->plan_stamp = s->pstamp;
                V->plan_milli = 0;
        }
        V->plan_milli += on ? v->share : -v->share;
        v->pstamp = on ? s->pstamp : 0;
}

/* May running task v be preempted to make room for w?  rule_a: w is the
 * task whose turn it is, so less urgent tiers may go; reclaim: w's tenant
 * stays within its guarantee by starting w.  A victim's tenant keeps its
 * own guarantee (what the marked victims leave it) unless w is the same
 * tenant's and more urgent. */
static bool victim_ok(const gp_sched *s, const stask *v, const stask *w, int64_t now, bool rule_a, bool reclaim) {
        if (!reclaimable(v) || v->pstamp == s->pstamp || v->start_stamp == s->stamp ||
            now - v->start_ms < s->cfg.preempt_min_runtime_ms || was_preempted_by(w, v->id))
                return false;
        const stenant *V = &s->tn[v->tenant];
        bool borrowed = V->run_milli - plan_milli(s, V) - v->share >= V->guar_milli;
        if (rule_a && v->preemptible && v->prio > w->prio && (v->tenant == w->tenant || borrowed))
                return true; /* a borrowing task that is not preemptible goes only by reclaim */
        return reclaim && v->tenant != w->tenant && borrowed;
}

/* Fewer GPUs, then the shorter run so far, then the higher id. */
static bool victim_better(const stask *a, const stask *b) {
        if (a->ngpus != b->ngpus)
                return a->ngpus < b->ngpus;
        if (a->start_ms != b->start_ms)
                return a->start_ms > b->start_ms;
        return a->id > b->id;
}

/* Could w use GPU g at all (ignoring what runs on it)? */
SCHED_PRIVATE bool gpu_could(const gp_sched *s, const sgpu *g, const stask *w, bool avoid) {
        return gpu_usable(g) && kind_ok(w, g) && g->usable >= w->mem && !(avoid && g->resv_stamp == s->stamp);
}

/* Can GPU g host w once the marked victims are gone? */
static bool gpu_room(const gp_sched *s, const sgpu *g, const stask *w, bool avoid) {
        if (!gpu_could(s, g, w, avoid))
                return false;
        int64_t used = 0;
        for (int k = 0; k < g->ntasks; k++) {
                const stask *x = g->tasks[k];
                if (x->pstamp == s->pstamp)
                        continue;
                if (w->excl || x->excl)
                        return false;
                used += x->charge;
        }
        return g->usable - used >= w->mem;
}

static bool node_room(const gp_sched *s, const snode *nd, const stask *w, bool avoid) {
        int n = 0;
        for (int i = 0; i < nd->ngpus; i++)
                if (gpu_room(s, &s->gpus[nd->gpus[i]], w, avoid) && ++n >= w->ngpus)
                        return true;
        return false;
}

/* Most share w can take on node nd (its quota is checked with this). */
static int64_t node_share_ub(const gp_sched *s, const stask *w, const snode *nd) {
        int64_t m = 0;
        for (int i = 0; i < nd->ngpus; i++) {
                const sgpu *g = &s->gpus[nd->gpus[i]];
                if (kind_ok(w, g) && g->usable >= w->mem) {
                        int64_t sh = gpu_share_of(w->excl, w->mem, g->usable);
                        if (sh > m)
                                m = sh;
                }
        }
        return m * w->ngpus;
}

static bool less_urgent_on(const snode *nd, int prio) {
        return nd->pre_tiers >> (prio + 1);
}

/* Mark (fresh pstamp; list in s->pv) the victims that make room for w on
 * node ni: greedily the best victim on a GPU that can be freed for w, until
 * w fits; then the marks not needed after all are dropped, worst first.
 * Returns the GPUs the victims hold (their lost GPU-ms in *ret_lost), or
 * -1 when the node cannot make room, -ENOMEM. */
static int plan_node(gp_sched *s, const stask *w, uint32_t ni, int64_t now, bool rule_a, bool reclaim, bool avoid,
                     int64_t *ret_lost) {
        const snode *nd = &s->nodes[ni];
        pstamp_next(s);
        s->pv_n = 0;
        while (!node_room(s, nd, w, avoid)) {
                stask *best = NULL;
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (g->ntasks == 0 || !gpu_could(s, g, w, avoid) || gpu_room(s, g, w, avoid))
                                continue;
                        int64_t keep = 0;
                        bool blocked = false;
                        stask *gb = NULL;
                        for (int k = 0; k < g->ntasks && !blocked; k++) {
                                stask *x = g->tasks[k];
                                if (x->pstamp == s->pstamp)
                                        continue;
                                if (victim_ok(s, x, w, now, rule_a, reclaim)) {
                                        if (!gb || victim_better(x, gb))
                                                gb = x;
                                } else if (w->excl || x->excl) {
                                        blocked = true;
                                } else {
                                        keep += x->charge;
                                }
                        }
                        if (blocked || !gb || g->usable - keep < w->mem)
                                continue;
                        if (!best || victim_better(gb, best))
                                best = gb;
                }
                if (!best)
                        return -1;
                stask **pv = grow(s->pv, sizeof(*pv), &s->pv_cap, s->pv_n + 1);
                if (!pv)
                        return -ENOMEM;
                s->pv = pv;
                pv[s->pv_n++] = best;
                plan_mark(s, best, true);
        }
        for (uint32_t i = s->pv_n; i-- > 0;) {
                stask *v = s->pv[i];
                plan_mark(s, v, false);
                if (node_room(s, nd, w, avoid)) {
                        memmove(&s->pv[i], &s->pv[i + 1], (s->pv_n - i - 1) * sizeof(*s->pv));
                        s->pv_n--;
                } else {
                        plan_mark(s, v, true);
                }
        }
        int gpus = 0;
        int64_t lost = 0;
        for (uint32_t i = 0; i < s->pv_n; i++) {
                gpus += s->pv[i]->ngpus;
                lost += (int64_t)s->pv[i]->ngpus * (now - s->pv[i]->start_ms);
        }
        *ret_lost = lost;
        return gpus;
}

/* Stop v for w and queue it again at its place by id. */
static int preempt_for(gp_sched *s, stask *v, const stask *w, int64_t now, gp_sched_decision **ret,
                       size_t *ret_n, size_t *ret_cap) {
        if (!was_preempted_by(v, w->id)) {
                uint32_t cap = (uint32_t)v->pre_by_cap;
                int64_t *p = grow_from(v->pre_by, sizeof(*p), &cap, (uint32_t)v->n_pre_by + 1, 4);
                if (!p)
                        return -ENOMEM;
                v->pre_by = p;
                v->pre_by_cap = (int)cap;
        }
        gp_sched_decision d = {.kind = GP_DECIDE_PREEMPT, .id = v->id, .n_gpus = v->ngpus,
                               .gpus = arena_copy(s, v->gpus, v->ngpus)};
        if (!d.gpus || emit(ret, ret_n, ret_cap, &d) < 0)
                return -ENOMEM;
        if (!was_preempted_by(v, w->id))
                v->pre_by[v->n_pre_by++] = w->id;
        return requeue_preempted(s, v, now);
}

/* ------------------------------------------------------------------ */
/* what preemption could free on a node, at most                      */

/* Kept per GPU (gpre) and per node (pnode), made together for a node when
 * it changed (s->nmod) and when one of its tasks has run its least run
 * time since (pnode.until), so that make_room passes over a node where no choice
 * of victims could make room, or none could beat the best plan so far,
 * without planning it: a plan reads every task on the node, again for
 * every victim it marks, and at 12,500 nodes most of a preemption run went
 * to plans that then failed or lost. */
typedef struct gpre {
        int32_t keep_a;            /* MB charged by tasks rule a never takes: not preemptible, or not
                                      yet run their least run time */
        int32_t keep_r;            /* ... reclaim never takes: not reclaimable, or not run long enough */
        uint16_t stay_a, stay_r;   /* how many of each */
        uint8_t min_pprio;         /* least priority of the others, preemptible and run long enough
                                      (GP_PRIORITY_LEVELS: none) */
        int32_t pchg[GP_PRIORITY_LEVELS]; /* MB charged by those of each priority */
} gpre;

/* Per node, made again when it changed and when a task there passes its
 * least run time (until): what its tasks that may be victims then (run
 * their least run time) could free, summed up over its GPUs, for the quick
 * test (pnode_could), and the newest start among them, for the bound.  A
 * plan's lost work is at least its GPUs times the time since the newest
 * start of a task it may mark, so this bounds a node tighter than the
 * newest start in s->pspan, which counts the tasks too young to be victims
 * yet and those of tiers w may not preempt. */
typedef struct pnode {
        uint32_t seen;             /* s->nmod[ni] it was made at */
        int64_t until;             /* ... and it holds until then */
        uint16_t xr;               /* GPUs an exclusive task could have by reclaim */
        uint16_t xa[GP_PRIORITY_LEVELS]; /* ... by rule a, for a task of each tier */
        int32_t fr;                /* most MB a GPU could have free by reclaim */
        int32_t fa[GP_PRIORITY_LEVELS]; /* ... by rule a, for a task of each tier */
        int64_t newest_r;          /* newest start of a victim by reclaim (INT64_MIN: none) */
        int64_t newest_a[GP_PRIORITY_LEVELS]; /* ... by rule a, for a task of each tier */
} pnode;

SCHED_PRIVATE void gpre_free(gp_sched *s) {
        free(s->gpre);
        free(s->pnode);
        free(s->cbits);
        free(s->pwake);
}

static int gpre_ready(gp_sched *s) {
        if (s->gpre_cap < s->ngpus) {
                gpre *g = grow(s->gpre, sizeof(*g), &s->gpre_cap, s->ngpus);
                if (!g)
                        return -ENOMEM;
                s->gpre = g;
        }
        if (s->pnode_cap < s->nnodes) {
                uint32_t old = s->pnode_cap;
                pnode *v = grow(s->pnode, sizeof(*v), &s->pnode_cap, s->nnodes);
                if (!v)
                        return -ENOMEM;
                s->pnode = v;
                for (uint32_t i = old; i < s->pnode_cap; i++)
                        v[i] = (pnode){.seen = i < s->nnodes ? s->nmod[i] - 1 : 0};
        }
        return 0;
}

/* GPU g's gpre at `now` (old_enough: now less the least run time), and
 * into pn and newest[] what its tasks tell of the node: when the first
 * task too young to be a victim will have run long enough, the newest
 * start of a reclaimable task that has (and of a preemptible one, per
 * tier). */
static void gpre_make(const gp_sched *s, const sgpu *g, gpre *p, int64_t old_enough, pnode *pn,
                      int64_t newest[GP_PRIORITY_LEVELS]) {
        memset(p, 0, sizeof(*p));
        p->min_pprio = GP_PRIORITY_LEVELS;
        for (int k = 0; k < g->ntasks; k++) {
                const stask *x = g->tasks[k];
                int32_t c = x->charge > INT32_MAX ? INT32_MAX : (int32_t)x->charge;
                bool old = x->start_ms <= old_enough;
                if (!reclaimable(x) || !old) {
                        if (reclaimable(x) && x->start_ms + s->cfg.preempt_min_runtime_ms < pn->until)
                                pn->until = x->start_ms + s->cfg.preempt_min_runtime_ms;
                        p->keep_r += c;
                        p->stay_r++;
                } else if (x->start_ms > pn->newest_r) {
                        pn->newest_r = x->start_ms;
                }
                if (old && x->preemptible) {
                        p->pchg[x->prio] += c;
                        if (x->prio < p->min_pprio)
                                p->min_pprio = x->prio;
                        if (x->start_ms > newest[x->prio])
                                newest[x->prio] = x->start_ms;
                } else {
                        p->keep_a += c;
                        p->stay_a++;
                }
        }
}

static int32_t clamp32(int64_t v) {
        return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

/* ------------------------------------------------------------------ */
/* the nodes by what preempting could make room for (cbits)           */

/* make_room reads the summary (pnode) of every node where a victim of a
 * tier the waiting task may preempt runs, and most of those cannot host
 * it (no victim has run long enough, or what the victims would free is
 * too little).  So, per rule set (rule a for a task of tier q; reclaim)
 * and capacity class (any; 1, 2, 4, 8 whole GPUs; 1 GB << b free on a
 * GPU), a bitmap of the nodes whose summary says they could: a task's
 * pass reads only the nodes of its class.  A bit is exact when its node's
 * summary was made and still holds.  A node touched since (s->tlog), or
 * whose summary's until has come (s->pwake), is in one more bitmap, the
 * unread nodes, which every pass reads whatever its class, until the node
 * is read again: so the set is never short of a node that can host, and
 * marking a node is one bit. */
#define CB_G 4                     /* whole-GPU classes: 1, 2, 4, 8 */
#define CB_M 8                     /* memory classes: 1 GB << b, b < CB_M */
#define CB_K (1 + CB_G + CB_M)     /* classes per rule set (0: any) */
#define CB_SETS (GP_PRIORITY_LEVELS + 1) /* rule a per tier, then reclaim */

static uint64_t *cb_map(const gp_sched *s, int set, int k) {
        return s->cbits + ((size_t)set * CB_K + (size_t)k) * s->cb_words;
}

/* the nodes to read whatever the class (after the CB_SETS x CB_K maps) */
static uint64_t *cb_unread(const gp_sched *s) {
        return s->cbits + (size_t)CB_SETS * CB_K * s->cb_words;
}

/* The class a task of w's shape needs (a node in it may host it). */
static int cb_class(const stask *w) {
        if (w->excl) {
                int k = 1;
                while (k < CB_G && (2 << (k - 1)) <= w->ngpus)
                        k++;
                return k;
        }
        if (w->mem < 1024)
                return 0;
        int b = 0;
        while (b + 1 < CB_M && ((int64_t)1024 << (b + 1)) <= w->mem)
                b++;
        return 1 + CB_G + b;
}

static void cb_put(gp_sched *s, uint32_t ni, int set, int k, bool on) {
        uint64_t *m = cb_map(s, set, k) + (ni >> 6), bit = (uint64_t)1 << (ni & 63);
        *m = on ? *m | bit : *m & ~bit;
}

/* Node ni may host anything until it is read again. */
static void cb_dirty(gp_sched *s, uint32_t ni) {
        cb_unread(s)[ni >> 6] |= (uint64_t)1 << (ni & 63);
}

/* Every node may host anything until read. */
static void cb_dirty_all(gp_sched *s) {
        uint64_t *u = cb_unread(s);
        for (uint32_t w = 0; w < s->cb_words; w++)
                u[w] = ~(uint64_t)0;
        if (s->cb_nodes & 63)
                u[s->cb_words - 1] = ((uint64_t)1 << (s->cb_nodes & 63)) - 1;
}

/* Node ni's summary was just made (and holds until pn->until): its bits,
 * and when they stop holding. */
static void cb_take(gp_sched *s, uint32_t ni, const struct pnode *pn);

/* The bitmaps for the nodes as they are, every node unread (no memory:
 * NULL maps, and make_room reads every node as before). */
static int cb_layout(gp_sched *s) {
        uint32_t words = (s->nnodes + 63) / 64;
        free(s->cbits);
        s->cbits = calloc(((size_t)CB_SETS * CB_K + 1) * (words ? words : 1), sizeof(uint64_t));
        s->pwake_n = 0; /* every node is read again: no entry is needed */
        if (!s->cbits) {
                s->cb_nodes = 0;
                return -ENOMEM;
        }
        s->cb_words = words;
        s->cb_nodes = s->nnodes;
        cb_dirty_all(s);
        s->cb_seen = s->tlog_n;
        return 0;
}

/* The nodes touched since the last call, and those whose summary's until
 * has come, marked unread. */
static int cb_sync(gp_sched *s, int64_t now) {
        if (s->cb_nodes != s->nnodes || !s->cbits)
                return cb_layout(s);
        if (s->tlog_n - s->cb_seen > TLOG_CAP) {
                cb_dirty_all(s);
        } else {
                for (uint64_t j = s->cb_seen; j < s->tlog_n; j++) {
                        uint32_t ni = s->tlog[j & (TLOG_CAP - 1)];
                        if (ni < s->cb_nodes)
                                cb_dirty(s, ni);
                }
        }
        s->cb_seen = s->tlog_n;
        while (s->pwake_n && s->pwake[0].deadline <= now) {
                heap_ent e = s->pwake[0];
                uint32_t ni = (uint32_t)e.id;
                heap_pop(s->pwake, &s->pwake_n);
                /* an entry of a summary made again since is stale (a touch marked the node) */
                if (ni < s->cb_nodes && s->pnode[ni].seen == s->nmod[ni] && s->pnode[ni].until == e.deadline)
                        cb_dirty(s, ni);
        }
        return 0;
}

/* Made at `now`: a task that has not run its least run time by then is
 * no victim in the sums, which hold until the first of them has
 * (pn->until). */
static void pnode_make(gp_sched *s, uint32_t ni, int64_t now) {
        const snode *nd = &s->nodes[ni];
        pnode *pn = &s->pnode[ni];
        int64_t old_enough = now - s->cfg.preempt_min_runtime_ms;
        int64_t newest[GP_PRIORITY_LEVELS]; /* newest old preemptible start of each tier */
        pn->until = INT64_MAX;
        pn->xr = 0;
        pn->fr = INT32_MIN;
        pn->newest_r = INT64_MIN;
        for (int q = 0; q < GP_PRIORITY_LEVELS; q++) {
                pn->xa[q] = 0;
                pn->fa[q] = INT32_MIN;
                newest[q] = INT64_MIN;
        }
        for (int i = 0; i < nd->ngpus; i++) {
                const sgpu *g = &s->gpus[nd->gpus[i]];
                gpre *p = &s->gpre[nd->gpus[i]];
                gpre_make(s, g, p, old_enough, pn, newest);
                /* gpre_could summed up over the GPUs, but for gpu_could (so
                 * only "maybe" where it says yes) */
                pn->xr += p->stay_r == 0;
                if (g->usable - p->keep_r > pn->fr)
                        pn->fr = clamp32(g->usable - p->keep_r);
                int64_t keep = p->keep_a;
                for (int q = 0; q < GP_PRIORITY_LEVELS; q++) {
                        keep += p->pchg[q];
                        pn->xa[q] += p->stay_a == 0 && p->min_pprio > q;
                        if (g->usable - keep > pn->fa[q])
                                pn->fa[q] = clamp32(g->usable - keep);
                }
        }
        /* a task of tier q may take those of the tiers after it */
        int64_t m = INT64_MIN;
        for (int q = GP_PRIORITY_LEVELS; q-- > 0;) {
                pn->newest_a[q] = m;
                if (newest[q] > m)
                        m = newest[q];
        }
        pn->seen = s->nmod[ni];
        if (ni < s->cb_nodes)
                cb_take(s, ni, pn);
}

static void cb_take(gp_sched *s, uint32_t ni, const struct pnode *pn) {
        for (int set = 0; set < CB_SETS; set++) {
                bool r = set == GP_PRIORITY_LEVELS;
                /* rule a: a victim of a later tier has run long enough; reclaim: what it frees */
                bool any = r || pn->newest_a[set] != INT64_MIN;
                int x = r ? pn->xr : pn->xa[set];
                int64_t f = r ? pn->fr : pn->fa[set];
                cb_put(s, ni, set, 0, any);
                for (int k = 1; k <= CB_G; k++)
                        cb_put(s, ni, set, k, any && x >= (1 << (k - 1)));
                for (int b = 0; b < CB_M; b++)
                        cb_put(s, ni, set, 1 + CB_G + b, any && f >= ((int64_t)1024 << b));
        }
        cb_unread(s)[ni >> 6] &= ~((uint64_t)1 << (ni & 63));
        if (pn->until == INT64_MAX)
                return;
        if (s->pwake_n >= 2 * (size_t)s->cb_nodes + 64) {
                /* mostly stale entries (one a summary made): every node that has one is
                 * marked unread, so the heap stays within twice the nodes */
                for (size_t i = 0; i < s->pwake_n; i++)
                        if (s->pwake[i].id < s->cb_nodes && s->pwake[i].id != ni)
                                cb_dirty(s, (uint32_t)s->pwake[i].id);
                s->pwake_n = 0;
        }
        if (heap_push(&s->pwake, &s->pwake_n, &s->pwake_cap, pn->until, ni) < 0)
                cb_dirty(s, ni); /* no memory to wait for its until: read it again */
}

/* Could node ni host w if the victims the rules allow went?  "No" is sure
 * (then no plan there can make room); "yes" is to be checked (node_could). */
static bool pnode_could(const pnode *pn, const stask *w, bool r) {
        if (r)
                return w->excl ? pn->xr >= w->ngpus : pn->fr >= w->mem;
        return w->excl ? pn->xa[w->prio] >= w->ngpus : pn->fa[w->prio] >= w->mem;
}

/* The newest start among the tasks on the node that may be victims for w
 * (rule a: preemptible and less urgent; reclaim r: any reclaimable; both:
 * run long enough), INT64_MIN when there is none (no plan there can make
 * room). */
static int64_t pnode_newest(const pnode *pn, const stask *w, bool a, bool r) {
        int64_t na = a ? pn->newest_a[w->prio] : INT64_MIN;
        return r && pn->newest_r > na ? pn->newest_r : na;
}

/* Could GPU g host w if every task there that the rules let be a victim
 * went?  (rule a: preemptible and less urgent; reclaim r: reclaimable;
 * both: run the least run time.)  A plan marks only such victims, so
 * where this says no, it fails. */
static bool gpre_could(const gp_sched *s, const sgpu *g, const gpre *p, const stask *w, bool r, bool avoid) {
        if (!gpu_could(s, g, w, avoid))
                return false;
        if (g->ntasks == 0)
                return true;
        if (r)
                return w->excl ? p->stay_r == 0 : g->usable - p->keep_r >= w->mem;
        if (w->excl)
                return p->stay_a == 0 && p->min_pprio > w->prio;
        int64_t keep = p->keep_a;
        for (int q = 0; q <= w->prio; q++)
                keep += p->pchg[q];
        return g->usable - keep >= w->mem;
}

/* node ni's gpre as they are (pnode_make ran since it changed) */
static bool node_could(gp_sched *s, const stask *w, uint32_t ni, bool r, bool avoid) {
        const snode *nd = &s->nodes[ni];
        int n = 0;
        for (int i = 0; i < nd->ngpus; i++)
                if (gpre_could(s, &s->gpus[nd->gpus[i]], &s->gpre[nd->gpus[i]], w, r, avoid) && ++n >= w->ngpus)
                        return true;
        return false;
}

/* The nodes with a running reclaimable task of one of `tiers`, in node
 * order, from the per-tier bitmaps (s->pbits): a waiting task of an urgent
 * tier passes over the nodes where nothing it may preempt runs without
 * reading them. */
typedef struct ncur {
        unsigned tiers;            /* bit p: tier p */
        const uint64_t *ca, *cr;   /* and in one of these (both NULL: no such filter) ... */
        const uint64_t *cu;        /* ... or in this one (the unread nodes; with ca or cr) */
        uint32_t wi, words;        /* the word of the bitmaps at hand (UINT32_MAX: none yet), of how many */
        uint64_t m;                /* its nodes not yet given */
} ncur;

static uint32_t ncur_next(const gp_sched *s, ncur *c) {
        while (!c->m) {
                if (!c->tiers || ++c->wi >= c->words)
                        return NIL;
                for (unsigned tb = c->tiers; tb; tb &= tb - 1)
                        c->m |= s->pbits[__builtin_ctz(tb)][c->wi];
                if (c->ca || c->cr)
                        c->m &= (c->ca ? c->ca[c->wi] : 0) | (c->cr ? c->cr[c->wi] : 0) | c->cu[c->wi];
        }
        uint32_t ni = c->wi * 64 + (uint32_t)__builtin_ctzll(c->m);
        c->m &= c->m - 1;
        return ni;
}

/* Could a plan of at least glb GPUs, each losing at least `age`, beat the
 * best so far (fewer GPUs, or as many and less lost work)? */
static bool may_beat(int glb, int64_t age, int best, int64_t best_lost) {
        return glb < best || (glb == best && (int64_t)glb * age < best_lost);
}

/* Make room for w by preempting on the node where that costs the fewest
 * GPUs, then the least lost work, then the lowest node.  after_resv: w is
 * behind the reserved task, so only reclaim applies and never on reserved
 * GPUs (avoid).  1 if victims were preempted (w then fits, its rules
 * included), 0 if nothing changed, -ENOMEM. */
SCHED_PRIVATE int make_room(gp_sched *s, stask *w, int64_t now, bool after_resv, bool avoid, gp_sched_decision **ret,
              size_t *ret_n, size_t *ret_cap) {
        if (!s->npre)
                return 0;
        const stenant *T = &s->tn[w->tenant];
        bool rule_a = !after_resv;
        bool reclaim_any = T->guar_milli > 0 && T->run_milli + share_lb(s, w) <= T->guar_milli;
        if (!rule_a && !reclaim_any)
                return 0;
        int best = -1;
        int64_t best_lost = 0;
        uint32_t bn = NIL;
        bool ba = false, br = false;
        if (gpre_ready(s) < 0)
                return -ENOMEM;
        /* the nodes where a victim may be: those with a running task of
         * a less urgent tier (rule a), or with any (reclaim) */
        ncur nc = {.tiers = reclaim_any ? (1u << GP_PRIORITY_LEVELS) - 1
                                        : ((1u << GP_PRIORITY_LEVELS) - 1) & ~((2u << w->prio) - 1),
                   .wi = UINT32_MAX, .words = (s->nnodes + 63) / 64};
        /* ... and of them those whose summary says they could host w (no
         * memory for the bitmaps: every one) */
        if (cb_sync(s, now) == 0) {
                int k = cb_class(w);
                nc.ca = rule_a ? cb_map(s, w->prio, k) : NULL;
                nc.cr = reclaim_any ? cb_map(s, GP_PRIORITY_LEVELS, k) : NULL;
                nc.cu = cb_unread(s);
        }
        for (uint32_t ni; (ni = ncur_next(s, &nc)) != NIL;) {
                const struct pspan *ps = &s->pspan[ni];
                if (now - ps->min < s->cfg.preempt_min_runtime_ms || (best == 1 && now - ps->max >= best_lost))
                        continue; /* none has run long enough, or the test below fails even at 1 GPU */
                const snode *nd = &s->nodes[ni];
                if (!nd->npre || !(nd->kinds & w->kinds) || nd->ngpus < w->ngpus)
                        continue; /* no victim there */
                /* the fewest GPUs a plan there can take; it loses at least
                 * that many times the time since the newest start */
                int glb = w->excl && w->ngpus > nd->idle ? w->ngpus - nd->idle : 1;
                if (best >= 0 && !may_beat(glb, now - ps->max, best, best_lost))
                        continue;
                bool a = rule_a && less_urgent_on(nd, w->prio);
                bool r = reclaim_any && T->run_milli + node_share_ub(s, w, nd) <= T->guar_milli;
                if (!a && !r)
                        continue;
                pnode *pn = &s->pnode[ni];
                if (pn->seen != s->nmod[ni] || now >= pn->until) {
                        PH_START(ph_make);
                        pnode_make(s, ni, now);
                        PH_STOP(PH_PNODE_MAKE, ph_make);
                }
                int64_t newest = pnode_newest(pn, w, a, r);
                if (newest == INT64_MIN)
                        continue; /* no task there may be a victim */
                if (best >= 0 && !may_beat(glb, now - newest, best, best_lost))
                        continue; /* the same, from the newest task that may be a victim */
                if (!pnode_could(pn, w, r) || !node_could(s, w, ni, r, avoid))
                        continue;
                int64_t lost;
                PH_START(ph_plan);
                int c = plan_node(s, w, ni, now, a, r, avoid, &lost);
                PH_STOP(PH_PLAN, ph_plan);
                if (c == -ENOMEM)
                        return c;
                if (c <= 0)
                        continue;
                if (best < 0 || c < best || (c == best && lost < best_lost)) {
                        best = c;
                        best_lost = lost;
                        bn = ni;
                        ba = a;
                        br = r;
                }
        }
        if (bn == NIL)
                return 0;
        int64_t lost, a1, a2, a3;
        if (gate(s, w, node_share_ub(s, w, &s->nodes[bn]), &a1, &a2, &a3))
                return 0; /* it could not start there after all */
        int c = plan_node(s, w, bn, now, ba, br, avoid, &lost); /* mark that node's victims again */
        if (c <= 0)
                return c < 0 && c != -1 ? c : 0;
        for (uint32_t i = 0; i < s->pv_n; i++) {
                PH_START(ph_stop);
                int rc = preempt_for(s, s->pv[i], w, now, ret, ret_n, ret_cap);
                PH_STOP(PH_PREEMPT, ph_stop);
                if (rc < 0)
                        return rc;
        }
        return 1;
}
