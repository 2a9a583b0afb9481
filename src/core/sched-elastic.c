/* sched-elastic.c - elastic tasks: closing an interval at a resize,
 * growing onto idle GPUs of their node at the end of a run, shrinking for
 * the task whose turn it is; tasks elastic in whole nodes the same way, a
 * node at a time. */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* elastic tasks: grow onto idle GPUs, shrink for the task whose turn it is */

/* Close t's current interval at now: what it held so far counts as
 * attained service and, through tenant_out/in, as its tenant's usage. */
static void resize_begin(gp_sched *s, stask *t, int64_t now) {
        t->attained = attained_at(t, now);
        if (now > t->seg_ms)
                t->seg_ms = now;
        stenant *T = &s->tn[t->tenant];
        tenant_out(s, T);
        usage_advance(s, T, now);
}

/* Add idle GPU gi to running elastic task t (it becomes its last GPU).
 * 0 or -ENOMEM (nothing changed). */
static int grow_onto(gp_sched *s, stask *t, uint32_t gi, int64_t now) {
        stenant *T = &s->tn[t->tenant];
        t->charge = s->gpus[gi].usable;
        resize_begin(s, t, now);
        int rc = gpu_attach(s, gi, t);
        if (rc == 0) {
                if (t->host && !task_on_node(s, t, s->gpus[gi].node)) /* a node more (elastic in nodes) */
                        host_node(s, t, s->gpus[gi].node, 1);
                t->gpus[t->ngpus++] = gi;
                t->share += 1000;
                T->run_milli += 1000;
        }
        tenant_in(s, T);
        return rc;
}

/* Give back t's last GPU (it must be above its minimum). */
static void shrink_one(gp_sched *s, stask *t, int64_t now) {
        stenant *T = &s->tn[t->tenant];
        uint32_t gi = t->gpus[t->ngpus - 1];
        resize_begin(s, t, now);
        t->charge = s->gpus[gi].usable;
        gpu_detach(s, gi, t);
        t->ngpus--;
        if (t->host && !task_on_node(s, t, s->gpus[gi].node)) /* its last GPU there went */
                host_node(s, t, s->gpus[gi].node, -1);
        t->share -= 1000;
        T->run_milli -= 1000;
        tenant_in(s, T);
}

static int emit_resize(gp_sched *s, const stask *t, gp_sched_decision **ret, size_t *ret_n, size_t *ret_cap) {
        gp_sched_decision d = {.kind = GP_DECIDE_RESIZE, .id = t->id, .n_gpus = t->ngpus,
                               .gpus = arena_copy(s, t->gpus, t->ngpus)};
        return d.gpus ? emit(ret, ret_n, ret_cap, &d) : -ENOMEM;
}

/* Room for `extra` more decisions, so that a change and its report cannot
 * be split by a failed allocation. */
static int emit_room(gp_sched_decision **ret, size_t *ret_n, size_t *ret_cap, size_t extra) {
        if (*ret_n + extra <= *ret_cap)
                return 0; /* even with no array yet, when extra is 0 */
        gp_sched_decision *p = gp_vec_grow(*ret, ret_cap, *ret_n + extra, sizeof(*p), 64);
        if (!p)
                return -ENOMEM;
        *ret = p;
        return 0;
}

/* Could GPU g take w right now (the test place() uses)? */
static bool fits_now(const gp_sched *s, const stask *w, const sgpu *g, bool avoid) {
        return w->excl ? idle_fits(s, w, g, avoid) : shared_fits(s, w, g, avoid);
}

/* Plan the fewest grown GPUs to give back on node ni so that w fits there:
 * have[i] is the count el[i] would keep (el[i] among the n elastic tasks
 * of the node).  Each step frees, of the tasks' last grown GPUs, the one
 * that is cheapest to reach (GPUs that w could not use, e.g. drained ones,
 * must go too when they were grown later), ties to the last grown.  Returns
 * the GPUs given back, or -1 when the node cannot make room. */
static int shrink_plan(const gp_sched *s, const stask *w, uint32_t ni, stask *const *el, int n, int *have,
                       bool avoid) {
        const snode *nd = &s->nodes[ni];
        if (!(nd->kinds & w->kinds) || nd->ngpus < w->ngpus)
                return -1;
        int need = w->ngpus;
        for (int i = 0; i < nd->ngpus && need > 0; i++)
                need -= fits_now(s, w, &s->gpus[nd->gpus[i]], avoid);
        if (need <= 0)
                return -1; /* not for want of GPUs: shrinking would not help */
        for (int i = 0; i < n; i++)
                have[i] = el[i]->ngpus;
        int cost = 0;
        while (need > 0) {
                int bi = -1, bc = 0;
                uint64_t bseq = 0;
                for (int i = 0; i < n; i++) {
                        const stask *t = el[i];
                        int c = 0;
                        for (int k = have[i] - 1; k >= t->nmin; k--) {
                                c++;
                                if (gpu_could(s, &s->gpus[t->gpus[k]], w, avoid))
                                        break;
                                if (k == t->nmin)
                                        c = 0; /* nothing usable for w to reach */
                        }
                        if (!c)
                                continue;
                        uint64_t seq = s->gpus[t->gpus[have[i] - 1]].grow_seq;
                        if (bi < 0 || c < bc || (c == bc && seq > bseq)) {
                                bi = i;
                                bc = c;
                                bseq = seq;
                        }
                }
                if (bi < 0)
                        return -1;
                have[bi] -= bc;
                cost += bc;
                need--;
        }
        return cost;
}

static int cmp_eord(const void *a, const void *b) {
        const eord *x = a, *y = b;
        if (x->key != y->key)
                return x->key < y->key ? -1 : 1;
        return (x->id > y->id) - (x->id < y->id);
}

/* Let w, the task whose turn it is, start by shrinking elastic tasks on the
 * node where that gives back the fewest GPUs (then the lowest node).  On
 * success the shrinks are applied and reported (RESIZE), *f is w's
 * placement and 1 is returned; 0 if no node can make room or w's gates
 * hold it there (nothing changed); -ENOMEM. */
SCHED_PRIVATE int shrink_for(gp_sched *s, stask *w, int64_t now, bool avoid, fit *f, gp_sched_decision **ret,
               size_t *ret_n, size_t *ret_cap) {
        /* the running elastic tasks above their minimum, by node */
        uint32_t m = 0;
        for (uint32_t i = 0; i < s->nel; i++)
                m += !s->el[i]->nodes_max && s->el[i]->ngpus > s->el[i]->nmin;
        if (!m)
                return 0;
        eord *eo = grow(s->eo, sizeof(*eo), &s->eo_cap, m);
        if (!eo)
                return -ENOMEM;
        s->eo = eo;
        m = 0;
        for (uint32_t i = 0; i < s->nel; i++)
                if (!s->el[i]->nodes_max && s->el[i]->ngpus > s->el[i]->nmin)
                        eo[m++] = (eord){task_node(s, s->el[i]), s->el[i]->id, s->el[i], 0};
        qsort(eo, m, sizeof(*eo), cmp_eord);
        stask *el[MAX_NODE_GPUS];
        int have[MAX_NODE_GPUS];
        int best = -1;
        uint32_t bn = NIL, bfirst = 0;
        int bcount = 0;
        for (uint32_t i = 0; i < m;) {
                uint32_t ni = (uint32_t)eo[i].key, first = i;
                int n = 0;
                for (; i < m && eo[i].key == ni; i++)
                        el[n++] = eo[i].t; /* at most one per GPU of the node */
                int c = shrink_plan(s, w, ni, el, n, have, avoid);
                if (c > 0 && (best < 0 || c < best)) {
                        best = c;
                        bn = ni;
                        bfirst = first;
                        bcount = n;
                }
        }
        if (bn == NIL)
                return 0;
        int n = bcount;
        for (int i = 0; i < n; i++)
                el[i] = eo[bfirst + (uint32_t)i].t;
        shrink_plan(s, w, bn, el, n, have, avoid);
        /* each shrunk task's RESIZE and w's START */
        if (emit_room(ret, ret_n, ret_cap, (size_t)n + 1) < 0)
                return -ENOMEM;
        /* the GPUs each held (all on one node: at most MAX_NODE_GPUS in all) */
        uint32_t gone[MAX_NODE_GPUS];
        int off[MAX_NODE_GPUS], used = 0;
        uint16_t had[MAX_NODE_GPUS];
        for (int i = 0; i < n; i++) {
                had[i] = el[i]->ngpus;
                off[i] = used;
                memcpy(&gone[used], el[i]->gpus, (size_t)el[i]->ngpus * sizeof(uint32_t));
                used += el[i]->ngpus;
                while (el[i]->ngpus > have[i])
                        shrink_one(s, el[i], now);
        }
        int64_t a1, a2, a3;
        if (!place(s, w, avoid, f) || gate(s, w, fit_share(s, w, f->gpus, f->n), &a1, &a2, &a3)) {
                /* w could not start after all: grow them back as they were
                 * (their GPUs keep the room they had, nothing to allocate) */
                for (int i = 0; i < n; i++)
                        while (el[i]->ngpus < had[i]) {
                                uint32_t gi = gone[off[i] + el[i]->ngpus];
                                uint64_t seq = s->gpus[gi].grow_seq;
                                int rc = grow_onto(s, el[i], gi, now);
                                if (rc < 0) {
                                        /* (cannot happen: nothing to allocate) report
                                         * what changed, as it is */
                                        for (int k = 0; k < n; k++)
                                                if (el[k]->ngpus != had[k])
                                                        emit_resize(s, el[k], ret, ret_n, ret_cap);
                                        return rc;
                                }
                                s->gpus[gi].grow_seq = seq;
                        }
                return 0;
        }
        for (int i = 0; i < n; i++)
                if (el[i]->ngpus < had[i] && emit_resize(s, el[i], ret, ret_n, ret_cap) < 0)
                        return -ENOMEM; /* cannot happen: room was made */
        return 1;
}

/* May t take one more whole GPU?  Its tenant stays within max_gpus_milli
 * and its group within its share (borrowing as for a start), and the
 * growth does not end its group's claim (below its share with tasks
 * waiting) while another group waits: that would release tasks held for
 * it, which would then take the GPUs back. */
static bool grow_ok(const gp_sched *s, const stask *t, int64_t milli) {
        const stenant *T = &s->tn[t->tenant];
        if (T->max_milli > 0 && T->run_milli + milli > T->max_milli)
                return false;
        if (!T->group)
                return true;
        if (group_holds(s, T, milli))
                return false;
        const sgroup *g = &s->gr[T->group];
        if (!g->needy)
                return true;
        int64_t waiting = g->waiting;
        if (!tenant_full(T) && T->max_milli > 0 && T->run_milli + milli >= T->max_milli)
                waiting -= T->queued;
        if (waiting > 0 && g->run_milli + milli < group_cap(s, g))
                return true;
        for (uint32_t gi = 1; gi < s->groups.n && gi < s->gr_cap; gi++)
                if (gi != T->group && s->gr[gi].waiting > 0)
                        return false;
        return true;
}

/* The idle GPU of t's node it should grow onto: usable, of a kind it may
 * use, closest to the GPUs it holds when the topology is known (then the
 * node's order).  NIL if none. */
static uint32_t grow_pick(const gp_sched *s, const stask *t) {
        const snode *nd = &s->nodes[task_node(s, t)];
        uint32_t best = NIL;
        int best_d = 0;
        for (int i = 0; i < nd->ngpus; i++) {
                const sgpu *g = &s->gpus[nd->gpus[i]];
                if (!idle_fits(s, t, g, false))
                        continue;
                int d = 0;
                if (nd->has_dist)
                        for (int k = 0; k < t->ngpus; k++) {
                                int a = g->slot, b = s->gpus[t->gpus[k]].slot;
                                d += (a < TOPO_MAX && b < TOPO_MAX) ? nd->dist[a][b] : 255;
                        }
                if (best == NIL || d < best_d) {
                        best = nd->gpus[i];
                        best_d = d;
                }
        }
        return best;
}

/* ------------------------------------------------------------------ */
/* elastic tasks: when growth may happen                              */

static bool gate_holds(const gp_sched *s, const stask *t) {
        int64_t a1, a2, a3;
        return gate(s, t, share_lb(s, t), &a1, &a2, &a3) != 0;
}

/* ------------------------------------------------------------------ */
/* elastic tasks: grow onto idle GPUs, shrink for the task whose turn it is */

/* Is a queued task left that its tenant's and group's rules allow to
 * start?  Not taken from the walk: a task skipped because its tenant or
 * group was held by another task in this run may come first in the next
 * run's order and would then take back what grew.  Per tenant and queue
 * only the first task counts: every walk examines a tenant's tasks of a
 * queue by id, and one held holds the rest.  The same holds across queues
 * where the order is fixed (fifo: by id; strict and las: the more urgent
 * queue first; hybrid: P0 first).  O(tenants with tasks queued x queues),
 * asked only when some elastic task could grow. */
static bool may_start_any(const gp_sched *s) {
        for (int q = 0; q < GP_PRIORITY_LEVELS; q++) {
                const tier *tr = &s->tiers[q];
                for (uint32_t j = 0; j < tr->nact; j++) {
                        const stenant *T = &s->tn[tr->act[j]];
                        const stask *h = T->q[q].v[T->q[q].lo];
                        if (gate_holds(s, h))
                                continue;
                        bool held = false;
                        for (int q2 = 0; q2 < GP_PRIORITY_LEVELS && !held; q2++) {
                                if (q2 == q || !T->q[q2].n)
                                        continue;
                                const stask *h2 = T->q[q2].v[T->q[q2].lo];
                                held = s->pol->before(q2, h2, q, h) && gate_holds(s, h2);
                        }
                        if (!held)
                                return true;
                }
        }
        return false;
}

/* ------------------------------------------------------------------ */
/* elastic in whole nodes                                             */

/* How many nodes t holds (its GPUs are grouped by node). */
static int task_nnodes(const gp_sched *s, const stask *t) {
        int k = 0;
        for (int i = 0; i < t->ngpus; i++)
                k += i == 0 || s->gpus[t->gpus[i]].node != s->gpus[t->gpus[i - 1]].node;
        return k;
}

/* The wholly idle node t should grow onto: one it may take whole, within
 * GP_MAX_GPUS, the largest (then the lowest number).  NIL if none. */
static uint32_t node_pick(const gp_sched *s, const stask *t) {
        for (int k = s->max_idle; k >= 1; k--) {
                uint32_t best = NIL;
                for (uint32_t ni = s->idle_lists[k]; ni != NIL; ni = s->nodes[ni].inext) {
                        const snode *nd = &s->nodes[ni];
                        if (nd->idle == nd->size && t->ngpus + nd->size <= GP_MAX_GPUS && whole_node_ok(s, t, ni) &&
                            (best == NIL || ni < best))
                                best = ni;
                }
                if (best != NIL)
                        return best;
        }
        return NIL;
}

/* Grow t onto every usable GPU of node ni (wholly idle).  0 or -ENOMEM
 * (what was taken stays, and is reported as it is). */
static int grow_node(gp_sched *s, stask *t, uint32_t ni, int64_t now) {
        const snode *nd = &s->nodes[ni];
        if (task_gpus_cap(t, (uint32_t)t->ngpus + (uint32_t)nd->size) < 0)
                return -ENOMEM;
        for (int i = 0; i < nd->ngpus; i++) {
                uint32_t gi = nd->gpus[i];
                const sgpu *g = &s->gpus[gi];
                if (g->removed || g->reserved)
                        continue;
                int rc = grow_onto(s, t, gi, now);
                if (rc < 0)
                        return rc;
                s->gpus[gi].grow_seq = ++s->grow_seq;
        }
        return 0;
}

/* Give back t's last node (it must hold more than its minimum). */
static void shrink_node(gp_sched *s, stask *t, int64_t now) {
        uint32_t last = s->gpus[t->gpus[t->ngpus - 1]].node;
        while (t->ngpus > 0 && s->gpus[t->gpus[t->ngpus - 1]].node == last)
                shrink_one(s, t, now);
}

/* Let w, the task whose turn it is, start by taking whole nodes from
 * tasks elastic in nodes (sched.h "Elastic in whole nodes").  1 (the
 * shrinks applied and reported, *f w's placement), 0 (nothing changed)
 * or -ENOMEM (nothing changed). */
SCHED_PRIVATE int nodes_shrink_for(gp_sched *s, stask *w, int64_t now, bool avoid, fit *f, gp_sched_decision **ret,
                                   size_t *ret_n, size_t *ret_cap) {
        uint32_t m = 0;
        for (uint32_t i = 0; i < s->nel; i++)
                m += s->el[i]->nodes_max && task_nnodes(s, s->el[i]) > s->el[i]->nodes_min;
        if (!m)
                return 0;
        /* what each candidate held, to put back if w still cannot start */
        stask **el = calloc(m, sizeof(*el));
        uint32_t **had = calloc(m, sizeof(*had));
        int *nhad = calloc(m, sizeof(*nhad)), *above = calloc(m, sizeof(*above));
        int rc = el && had && nhad && above ? 0 : -ENOMEM;
        uint32_t n = 0;
        for (uint32_t i = 0; rc == 0 && i < s->nel; i++) {
                stask *t = s->el[i];
                int k = t->nodes_max ? task_nnodes(s, t) : 0;
                if (!t->nodes_max || k <= t->nodes_min)
                        continue;
                if (!(had[n] = malloc((size_t)t->ngpus * sizeof(**had)))) {
                        rc = -ENOMEM;
                        break;
                }
                memcpy(had[n], t->gpus, (size_t)t->ngpus * sizeof(**had));
                nhad[n] = t->ngpus;
                above[n] = k - t->nodes_min;
                el[n++] = t;
        }
        int64_t a1, a2, a3;
        bool placed = false;
        while (rc == 0 && !placed) {
                int bi = -1; /* the most nodes above its minimum, then the highest id */
                for (uint32_t i = 0; i < n; i++)
                        if (above[i] > 0 &&
                            (bi < 0 || above[i] > above[bi] || (above[i] == above[bi] && el[i]->id > el[bi]->id)))
                                bi = (int)i;
                if (bi < 0)
                        break;
                shrink_node(s, el[bi], now);
                above[bi]--;
                placed = place(s, w, avoid, f) && !gate(s, w, fit_share(s, w, f->gpus, f->n), &a1, &a2, &a3);
        }
        if (rc == 0 && placed && emit_room(ret, ret_n, ret_cap, n + 1) < 0)
                rc = -ENOMEM;
        for (uint32_t i = 0; i < n; i++) {
                stask *t = el[i];
                if (rc == 0 && placed) {
                        if (t->ngpus < nhad[i])
                                emit_resize(s, t, ret, ret_n, ret_cap); /* room was made */
                        continue;
                }
                /* w could not start after all (or no memory): back as they were */
                while (t->ngpus < nhad[i]) {
                        uint32_t gi = had[i][t->ngpus];
                        uint64_t seq = s->gpus[gi].grow_seq;
                        if (grow_onto(s, t, gi, now) < 0)
                                break; /* (cannot happen: nothing to allocate) */
                        s->gpus[gi].grow_seq = seq;
                }
        }
        for (uint32_t i = 0; had && i < n; i++)
                free(had[i]);
        free(el);
        free(had);
        free(nhad);
        free(above);
        return rc < 0 ? rc : placed;
}

static bool can_grow(const gp_sched *s, const stask *t) {
        if (t->nodes_max)
                return task_nnodes(s, t) < t->nodes_max && node_pick(s, t) != NIL;
        return t->ngpus < t->nmax && s->nodes[task_node(s, t)].idle > 0;
}


/* The grow pass, at the end of every run: if no task that may start is
 * left waiting (then a reservation, if any, is for a task that is held
 * and protects nothing), elastic tasks below their maximum take idle GPUs
 * of their node, in policy order, passing over them again until none
 * grows (a growth may end another group's claim on idle GPUs and so let
 * a task of the group grow); each grown task is reported once.  0 or
 * -ENOMEM. */
SCHED_PRIVATE int grow_all(gp_sched *s, int64_t now, gp_sched_decision **ret, size_t *ret_n, size_t *ret_cap) {
        uint32_t m = 0;
        for (uint32_t i = 0; i < s->nel; i++)
                m += can_grow(s, s->el[i]);
        if (!m || may_start_any(s))
                return 0;
        eord *eo = grow(s->eo, sizeof(*eo), &s->eo_cap, m);
        if (!eo || emit_room(ret, ret_n, ret_cap, m) < 0)
                return -ENOMEM;
        s->eo = eo;
        m = 0;
        for (uint32_t i = 0; i < s->nel; i++) {
                stask *t = s->el[i];
                if (!can_grow(s, t))
                        continue;
                eo[m++] = (eord){s->pol->grow_key(s, t, now), t->id, t, t->ngpus};
        }
        qsort(eo, m, sizeof(*eo), cmp_eord);
        int rc = 0;
        for (bool again = true; again && rc == 0;) {
                again = false;
                for (uint32_t i = 0; i < m && rc == 0; i++) {
                        stask *t = eo[i].t;
                        while (t->nodes_max && task_nnodes(s, t) < t->nodes_max) {
                                uint32_t ni = node_pick(s, t);
                                if (ni == NIL || !grow_ok(s, t, (int64_t)s->nodes[ni].size * 1000))
                                        break;
                                if ((rc = grow_node(s, t, ni, now)) < 0)
                                        break;
                                again = true;
                        }
                        while (t->ngpus < t->nmax && grow_ok(s, t, 1000)) {
                                uint32_t gi = grow_pick(s, t);
                                if (gi == NIL)
                                        break;
                                if ((rc = grow_onto(s, t, gi, now)) < 0)
                                        break;
                                s->gpus[gi].grow_seq = ++s->grow_seq;
                                again = true;
                        }
                }
        }
        for (uint32_t i = 0; i < m; i++)
                if (eo[i].t->ngpus > eo[i].before)
                        emit_resize(s, eo[i].t, ret, ret_n, ret_cap); /* room was made */
        return rc;
}
