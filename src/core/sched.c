/* sched.c - the scheduling core (see sched.h for the contract): its
 * lifecycle and configuration, and the pass: gp_sched_run (expiry, the
 * decision loop that takes tasks in policy order, places, reserves,
 * backfills and calls on elastic shrinking and preemption), when the next
 * run is due (gp_sched_next_wakeup) and when a replay may leave a run out
 * (gp_sched_run_idle).  The state and the rules each file holds are listed
 * in sched-int.h. */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* lifecycle                                                          */

void gp_sched_config_defaults(gp_sched_config *cfg) {
        static const uint32_t w[GP_PRIORITY_LEVELS] = {256, 128, 64, 32, 16, 8, 4, 2, 1, 1};
        memset(cfg, 0, sizeof(*cfg));
        cfg->policy = GP_SCHED_HYBRID;
        memcpy(cfg->weights, w, sizeof(w));
        cfg->max_queue_depth = 10000;
        cfg->memory_safety_margin_mb = 2000;
        cfg->backfill = true;
        cfg->backfill_depth = 1000;
        cfg->las_levels = 3;
        cfg->las_thresholds_ms[0] = 3600LL * 1000;
        cfg->las_thresholds_ms[1] = 36000LL * 1000;
        cfg->las_preempt = true;
        cfg->las_min_run_ms = 60 * 1000;
        cfg->fairshare_half_life_ms = 24LL * 3600 * 1000;
        cfg->preemption = false;
        cfg->preempt_min_runtime_ms = 60 * 1000;
        cfg->spf_aging_pct = 1;
}

static int check_las(const gp_sched_config *cfg) {
        if (!policy_ops[cfg->policy]->las && !policy_ops[cfg->policy]->demote)
                return 0;
        if (cfg->las_levels < 1 || cfg->las_levels > GP_SCHED_LAS_MAX_LEVELS || cfg->las_min_run_ms < 0)
                return -EINVAL;
        for (int i = 0; i < cfg->las_levels - 1; i++)
                if (cfg->las_thresholds_ms[i] <= 0 || (i > 0 && cfg->las_thresholds_ms[i] <= cfg->las_thresholds_ms[i - 1]))
                        return -EINVAL;
        return 0;
}

static int check_weights(const uint32_t *w) {
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                if (w[i] < 1 || w[i] > 1000000)
                        return -EINVAL;
        return 0;
}

int gp_sched_new(const gp_sched_config *cfg, gp_sched **ret) {
        if (!cfg || (unsigned)cfg->policy >= GP_SCHED_NPOLICIES || (unsigned)cfg->placement >= GP_PLACE_N || check_weights(cfg->weights) < 0 ||
            cfg->max_queue_depth < 1 || cfg->memory_safety_margin_mb < 0 || cfg->backfill_depth < 0 ||
            check_las(cfg) < 0 || cfg->fairshare_half_life_ms < 0 || cfg->preempt_min_runtime_ms < 0 ||
            cfg->max_models_per_gpu < 0 || cfg->spf_aging_pct < 0 || cfg->spf_aging_pct > 100000)
                return -EINVAL;
        gp_sched *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->cfg = *cfg;
        s->pol = policy_ops[cfg->policy];
        s->plc = placement_ops[cfg->placement];
        memset(s->buckets, 0xff, sizeof(s->buckets));
        memset(s->idle_lists, 0xff, sizeof(s->idle_lists));
        *ret = s;
        return 0;
}

void gp_sched_free(gp_sched *s) {
        if (!s)
                return;
        size_t pos = 0;
        stask *t;
        while ((t = gp_i64map_next(&s->tasks, &pos, NULL)))
                task_free(s, t);
        gp_i64map_done(&s->tasks);
        gp_i64map_done(&s->arrays); /* each freed with its last task above */
        for (uint32_t i = 0; i < s->ngpus; i++) {
                free(s->gpus[i].uuid);
                free(s->gpus[i].name);
                free(s->gpus[i].tasks);
                free(s->gpus[i].models);
        }
        free(s->gpus);
        for (uint32_t i = 0; i < s->nnodes; i++) {
                free(s->nodes[i].name);
                free(s->nodes[i].gpus);
                free(s->nodes[i].labels);
        }
        free(s->nodes);
        free(s->nhost);
        free(s->nmod);
        free(s->pspan);
        for (int k = 0; k <= s->ibits_k; k++)
                free(s->ibits[k]);
        for (int p = 0; p < GP_PRIORITY_LEVELS; p++)
                free(s->pbits[p]);
        gpre_free(s);
        resv_free(s);
        free(s->node_ht);
        for (int i = 0; i < s->nkinds; i++)
                free(s->kind_names[i]);
        for (uint32_t i = 0; i < s->model_gpus_len; i++)
                free(s->model_gpus[i]);
        free(s->model_gpus);
        free(s->model_gpus_n);
        free(s->model_gpus_cap);
        free(s->heap);
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                free(s->tiers[i].act);
        }
        for (uint32_t i = 0; i < s->tn_cap; i++)
                for (int q = 0; q < GP_PRIORITY_LEVELS; q++) {
                        free(s->tn[i].q[q].v);
                        free(s->tn[i].q[q].ids);
                        free(s->tn[i].q[q].fen);
                }
        free(s->tn);
        free(s->gr);
        free(s->wbuf);
        free(s->pv);
        free(s->el);
        free(s->eo);
        intern_done(&s->tenants);
        intern_done(&s->models);
        intern_done(&s->groups);
        intern_done(&s->labels);
        free(s->mn);
        while (s->arena) {
                struct arena_blk *b = s->arena;
                s->arena = b->next;
                free(b);
        }
        free(s);
}

int gp_sched_set_weights(gp_sched *s, const uint32_t weights[GP_PRIORITY_LEVELS]) {
        if (check_weights(weights) < 0)
                return -EINVAL;
        memcpy(s->cfg.weights, weights, sizeof(s->cfg.weights));
        s->gen++;
        return 0;
}

int gp_sched_set_max_queue_depth(gp_sched *s, int depth) {
        if (depth < 1)
                return -EINVAL;
        s->cfg.max_queue_depth = depth;
        return 0;
}

const gp_sched_config *gp_sched_get_config(const gp_sched *s) {
        return &s->cfg;
}

/* ------------------------------------------------------------------ */
/* the decisions' GPU arrays: an arena of blocks that each run reuses */

#define ARENA_BLK 4096             /* ids in a block (a larger request gets its own) */

static void arena_reset(gp_sched *s) {
        for (struct arena_blk *b = s->arena; b; b = b->next)
                b->used = 0;
        s->arena_cur = NULL;
}

/* A copy of v[0..n) that lives until the next run (NULL: out of memory).
 * Blocks are never moved, so earlier copies stay where they are. */
SCHED_PRIVATE const uint32_t *arena_copy(gp_sched *s, const uint32_t *v, int n) {
        size_t need = n > 0 ? (size_t)n : 1;
        /* from the block in use: the ones before it are full */
        struct arena_blk **pp = s->arena_cur ? &s->arena_cur : &s->arena;
        while (*pp && (*pp)->cap - (*pp)->used < need)
                pp = &(*pp)->next;
        if (!*pp) {
                size_t cap = need > ARENA_BLK ? need : ARENA_BLK;
                struct arena_blk *b = malloc(sizeof(*b) + cap * sizeof(uint32_t));
                if (!b)
                        return NULL;
                b->next = NULL;
                b->cap = cap;
                b->used = 0;
                *pp = b;
        }
        s->arena_cur = *pp;
        uint32_t *p = (*pp)->v + (*pp)->used;
        (*pp)->used += need;
        if (n > 0)
                memcpy(p, v, (size_t)n * sizeof(uint32_t));
        return p;
}

/* ------------------------------------------------------------------ */
/* the decision loop                                                  */

SCHED_PRIVATE int emit(gp_sched_decision **ret, size_t *n, size_t *cap, const gp_sched_decision *d) {
        if (*n == *cap) { /* only then: a call per decision shows in bench-core */
                gp_sched_decision *p = gp_vec_grow(*ret, cap, *n + 1, sizeof(*p), 64);
                if (!p)
                        return -ENOMEM;
                *ret = p;
        }
        (*ret)[(*n)++] = *d;
        return 0;
}

static int expire_due(gp_sched *s, int64_t now, gp_sched_decision **ret, size_t *n, size_t *cap) {
        while (s->heap_n && s->heap[0].deadline <= now) {
                heap_ent e = s->heap[0];
                stask *t = map_get(s, e.id);
                if (!t || t->running || t->deadline_ms != e.deadline) {
                        heap_pop(s->heap, &s->heap_n);
                        continue;
                }
                gp_sched_decision d = {.kind = GP_DECIDE_EXPIRE, .id = t->id};
                if (emit(ret, n, cap, &d) < 0)
                        return -ENOMEM;
                heap_pop(s->heap, &s->heap_n);
                queue_del(s, t);
                map_del(s, t->id);
                task_free(s, t);
                s->total_expired++;
        }
        return 0;
}

static void set_reason(gp_sched *s, stask *t, int code, int64_t a1, int64_t a2) {
        t->rcode = (uint8_t)code;
        t->ra1 = a1;
        t->ra2 = a2;
        t->rstamp = s->stamp;
}

/* Within one run nothing is freed, so a request at least as large as one
 * that already failed (same constraints) fails too: skip its placement. */
typedef struct fail_memo {
        int excl_n[2];             /* [avoid]: smallest whole-GPU count that failed, 0 none */
        int64_t shared_mem[2];     /* [avoid]: smallest single shared request that failed, -1 none */
} fail_memo;

/* Not for a shared task with a model under max_models_per_gpu: whether it
 * fits depends on its model, not only on its size. */
static inline bool memo_applies(const gp_sched *s, const stask *t) {
        return !t->gpu_model && !t->nsel && !t->multi && !t->nmax && !t->host && (t->excl || t->ngpus == 1) &&
               (t->excl || !t->model || s->cfg.max_models_per_gpu <= 0);
}

static bool memo_fails(const gp_sched *s, const fail_memo *m, const stask *t, bool avoid) {
        if (!memo_applies(s, t))
                return false;
        /* a failure without the avoid restriction also fails with it */
        for (int a = 0; a <= (int)avoid; a++) {
                if (t->excl && m->excl_n[a] && t->ngpus >= m->excl_n[a])
                        return true;
                if (!t->excl && m->shared_mem[a] >= 0 && t->mem >= m->shared_mem[a])
                        return true;
        }
        return false;
}

/* The other way round: until the next start in the run, a request no
 * larger than one that fitted ignoring the reservation fits too (only used
 * to word the reason of tasks that wait behind the reservation). */
typedef struct fit_memo {
        int excl_n;                /* whole GPUs: count that fitted, 0 none ... */
        int64_t excl_mem;          /* ... with this much memory per GPU */
        int64_t shared_mem;        /* single shared request that fitted, -1 none */
} fit_memo;

static bool fit_memo_fits(const gp_sched *s, const fit_memo *m, const stask *t) {
        if (!memo_applies(s, t))
                return false;
        if (t->excl)
                return m->excl_n && t->ngpus <= m->excl_n && t->mem <= m->excl_mem;
        return m->shared_mem >= 0 && t->mem <= m->shared_mem;
}

static void fit_memo_record(const gp_sched *s, fit_memo *m, const stask *t) {
        if (!memo_applies(s, t))
                return;
        if (t->excl) {
                if (!m->excl_n || (t->ngpus >= m->excl_n && t->mem >= m->excl_mem)) {
                        m->excl_n = t->ngpus;
                        m->excl_mem = t->mem;
                }
        } else if (t->mem > m->shared_mem) {
                m->shared_mem = t->mem;
        }
}

static void memo_record(const gp_sched *s, fail_memo *m, const stask *t, bool avoid) {
        if (!memo_applies(s, t))
                return;
        if (t->excl) {
                if (!m->excl_n[avoid] || t->ngpus < m->excl_n[avoid])
                        m->excl_n[avoid] = t->ngpus;
        } else if (m->shared_mem[avoid] < 0 || t->mem < m->shared_mem[avoid]) {
                m->shared_mem[avoid] = t->mem;
        }
}

/* Set t's reason to a rule of its tenant or group and hold the tenant (or
 * group) for the rest of the run. */
static void hold(gp_sched *s, stask *t, int code, int64_t a1, int64_t a2, int64_t a3) {
        set_reason(s, t, code, a1, a2);
        t->ra3 = a3;
        /* a task its tenant's max_gpus can never admit (a3, its share, is over
         * a2, the max: a quota lowered after it was queued) waits alone: the
         * tenant's other tasks could not delay it */
        if (code == R_QUOTA_GPUS && a3 > a2)
                return;
        if (code == R_GROUP) {
                s->gr[a1].held_stamp = s->stamp;
                return;
        }
        stenant *T = &s->tn[t->tenant];
        T->held_stamp = s->stamp;
        T->held_code = (uint8_t)code;
        T->held_a1 = a1;
        T->held_a2 = a2;
        T->held_by = t->id;
}

/* ------------------------------------------------------------------ */
/* elastic tasks: grow onto idle GPUs, shrink for the task whose turn it is */

#ifdef GP_SCHED_PHASES
gp_phase gp_phases[PH_N];
const char *const gp_phase_names[PH_N] = {
        [PH_MAKE_ROOM] = "make_room",          [PH_PNODE_MAKE] = "  summary made",
        [PH_PLAN] = "  plan on a node",         [PH_PREEMPT] = "  victim stopped",
        [PH_RESERVE] = "reserve",               [PH_RESV_FULL] = "  every node's answer",
        [PH_RESV_LOG] = "  touched nodes' answers", [PH_RESV_LAYOUT] = "  shape laid out",
        [PH_GREADY_MAKE] = "GPU ends read",     [PH_PLACE] = "place",
        [PH_WALK_INIT] = "walk_init",           [PH_WALK_REFRESH] = "walk_refresh",
        [PH_WALK_STEP] = "walk step",
};
#endif

int gp_sched_run(gp_sched *s, int64_t now, gp_sched_decision **ret, size_t *ret_n, size_t *ret_cap) {
        int rc = 0;
        fail_memo memo = {.shared_mem = {-1, -1}};
        fit_memo fits = {.shared_mem = -1};
        s->stamp++;
        s->last_run_stamp = s->stamp;
        s->last_run_ms = now;
        s->last_resv_id = 0;
        arena_reset(s);
        if ((rc = expire_due(s, now, ret, ret_n, ret_cap)) < 0)
                return rc;

        walk w;
        uint64_t lp[GP_PRIORITY_LEVELS], st[GP_PRIORITY_LEVELS];
        PH_START(ph_init);
        if ((rc = walk_init(s, &w, true)) < 0)
                return rc;
        PH_STOP(PH_WALK_INIT, ph_init);
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                lp[i] = s->tiers[i].pass;
                st[i] = stride(s, i); /* a division: once per run, not per task */
        }
        stask *resv = NULL;
        int64_t shadow = TIME_INF;
        int examined = 0;
        bool preempt_on = s->cfg.preemption && s->pol->tier_preempt;
        /* Two passes.  The first applies every rule.  A group's share may
         * then have held back tasks while the capacity it kept for other
         * groups stays idle, because their own next tasks do not fit in
         * what is left of their shares (70/30 of 4 GPUs: 2.8 and 1.2): so
         * shares are not allowed to idle a GPU, and a second pass hands
         * the capacity still free to the tasks the shares held, in the same
         * order, under every other rule (quotas, reservations, backfill).
         * It runs only when a share held something. */
        bool share_held = false;
        for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
                if (!share_held)
                        break;
                s->groups_off = true;
                if ((rc = walk_init(s, &w, true)) < 0)
                        break;
                for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                        lp[i] = s->tiers[i].pass;
                /* memo stays: GPUs were only taken since, so what failed fails */
                examined = 0;
        }
        for (;;) {
                /* fair walks: which tier goes next depends only on which
                 * are non-empty (and their passes), so only the chosen
                 * tier's head is brought up to date; if held tenants
                 * emptied it, choose again */
                int ti = pick_tier(s, w.cur, lp);
                if (ti < 0)
                        break;
                if (w.fair) {
                        walk_head(s, &w, ti);
                        if (!w.cur[ti])
                                continue;
                }
                stask *t = w.cur[ti];
                PH_COUNT(PH_WALK_STEP);
                walk_advance(s, &w, ti);
                lp[ti] += st[ti];
                /* the second pass: the tasks a share held (those whose group
                 * was held the walk skipped, so the first pass never saw) */
                // cppcheck-suppress knownConditionTrueFalse ; pass 1 runs when share_held was set in pass 0
                if (pass == 1 && t->rstamp == s->stamp && t->rcode != R_GROUP)
                        continue;
                t->resv_holder = false;
                multi_refresh(s, t);

                /* the rules of its tenant and group come first (a held
                 * task takes no reservation and blocks no one) */
                stenant *T = &s->tn[t->tenant];
                int64_t lb = share_lb(s, t), a1 = 0, a2 = 0, a3 = 0;
                int g;
                if (array_full(t)) {
                        /* its array's %N throttle: holds this task only,
                         * never its tenant (the tenant's other work goes on) */
                        set_reason(s, t, R_ARRAY, t->arr->id, t->arr->limit);
                        continue;
                }
                if (T->held_stamp == s->stamp) {
                        set_reason(s, t, T->held_code, T->held_a1, T->held_a2);
                        t->ra3 = lb;
                        continue;
                }
                if (group_held(s, T)) {
                        set_reason(s, t, R_GROUP, T->group, s->gr[T->group].share_pct);
                        share_held = true;
                        continue;
                }
                if ((g = gate(s, t, lb, &a1, &a2, &a3))) {
                        hold(s, t, g, a1, a2, a3);
                        share_held |= g == R_GROUP;
                        continue;
                }
                /* within its tenant's guarantee: may reclaim, and is not
                 * held behind a more urgent blocked task (it keeps off the
                 * GPUs reserved for that one) */
                bool guaranteed = T->guar_milli > 0 && T->run_milli + lb <= T->guar_milli;

                bool avoid = false;
                if (resv) {
                        /* tasks further back keep R_NONE for this run: they
                         * wait behind the reserved one (O(depth), not O(queue)) */
                        if (!s->cfg.backfill) {
                                set_reason(s, t, R_HOL, resv->id, 0);
                                break;
                        }
                        if (examined++ >= s->cfg.backfill_depth) {
                                set_reason(s, t, R_DEPTH, s->cfg.backfill_depth, 0);
                                break;
                        }
                        if (run_bound(t) == 0 && t->q > resv->q && !guaranteed) {
                                set_reason(s, t, R_BEHIND_HIGHER, resv->id, resv->prio);
                                continue;
                        }
                        avoid = !(run_bound(t) > 0 && shadow != TIME_INF && now + run_bound(t) <= shadow);
                }
                fit f;
                bool known_fail = memo_fails(s, &memo, t, avoid);
                PH_START(ph_place);
                bool placed = !known_fail && place(s, t, avoid, &f);
                if (!known_fail)
                        PH_STOP(PH_PLACE, ph_place);
                if (placed) {
                        /* on a smaller GPU a shared task holds a larger share */
                        int64_t sh = fit_share(s, t, f.gpus, f.n);
                        if (sh > lb && (g = gate(s, t, sh, &a1, &a2, &a3))) {
                                hold(s, t, g, a1, a2, a3);
                                share_held |= g == R_GROUP;
                                continue;
                        }
                }
                /* elastic tasks give back grown GPUs before anything is
                 * preempted or reserved: for the task whose turn it is,
                 * and for one that may reclaim behind the reservation */
                bool may_reclaim = preempt_on && resv && guaranteed && T->reclaim_stamp != s->stamp;
                /* tasks elastic in nodes give back whole nodes first, to any task; then
                 * elastic tasks their GPUs (a multi-node task waits for whole nodes: it
                 * neither shrinks those nor preempts); the second pass only hands out
                 * what is free */
                for (int k = 0; k < 2 && !placed && s->nel && pass == 0 && (!resv || may_reclaim); k++) {
                        if (k == 1 && t->multi)
                                break;
                        int pr = k == 0 ? nodes_shrink_for(s, t, now, avoid, &f, ret, ret_n, ret_cap)
                                        : shrink_for(s, t, now, avoid, &f, ret, ret_n, ret_cap);
                        if (pr < 0)
                                return pr;
                        if (pr > 0) {
                                memo = (fail_memo){.shared_mem = {-1, -1}};
                                walk_refresh(s, &w);
                                known_fail = false;
                                placed = true;
                        }
                }
                if (!placed && preempt_on && pass == 0 && (!resv || may_reclaim) && !t->multi) {
                        PH_START(ph_room);
                        int pr = make_room(s, t, now, resv != NULL, avoid, ret, ret_n, ret_cap);
                        PH_STOP(PH_MAKE_ROOM, ph_room);
                        if (pr < 0)
                                return pr;
                        if (pr == 0 && resv)
                                T->reclaim_stamp = s->stamp; /* no more tries for it in this run */
                        if (pr > 0) {
                                /* GPUs were freed and shares dropped */
                                memo = (fail_memo){.shared_mem = {-1, -1}};
                                PH_START(ph_refresh);
                                walk_refresh(s, &w);
                                PH_STOP(PH_WALK_REFRESH, ph_refresh);
                                known_fail = false;
                                placed = place(s, t, avoid, &f);
                        }
                }
                if (!placed && !resv && pass == 0 && level_preempts(s) && !t->multi) {
                        int pr = las_make_room(s, t, now, ret, ret_n, ret_cap);
                        if (pr < 0)
                                return pr;
                        if (pr > 0) {
                                /* GPUs were freed, so remembered failures no longer
                                 * hold; the victims went to later queues, which
                                 * this walk has not reached yet (strict order) */
                                memo = (fail_memo){.shared_mem = {-1, -1}};
                                for (int j = ti + 1; j < GP_PRIORITY_LEVELS; j++)
                                        w.cur[j] = s->tiers[j].head;
                                known_fail = false;
                                placed = place(s, t, false, &f);
                        }
                }
                if (placed) {
                        fits = (fit_memo){.shared_mem = -1}; /* GPUs are taken now */
                        const uint32_t *dg = arena_copy(s, f.gpus, f.n);
                        if (!dg)
                                return -ENOMEM;
                        queue_del(s, t);
                        if ((rc = start_on(s, t, f.gpus, f.n, now, -1)) < 0) {
                                if (queue_add(s, t) < 0) {
                                        map_del(s, t->id);
                                        task_free(s, t);
                                }
                                return rc;
                        }
                        s->vtime = s->tiers[ti].pass;
                        s->tiers[ti].pass += st[ti];
                        s->total_scheduled++;
                        gp_sched_decision d = {.kind = GP_DECIDE_START, .id = t->id, .n_gpus = f.n,
                                               .gpus = dg, .backfilled = resv != NULL,
                                               .borrowing = t->borrowing};
                        if (resv)
                                s->total_backfilled++;
                        if ((rc = emit(ret, ret_n, ret_cap, &d)) < 0)
                                return rc;
                        continue;
                }
                if (!known_fail)
                        memo_record(s, &memo, t, avoid);
                if (pass == 1) { /* no room left for it: its share says why it waits */
                        if (++examined >= s->cfg.backfill_depth)
                                break; /* bounded as backfill is: what is left waits a run */
                        if (T->group)
                                set_reason(s, t, R_GROUP, T->group, s->gr[T->group].share_pct);
                        else if (t->host) /* CPUs, RAM or GPUs: a scan tells which */
                                set_reason(s, t, R_DIAG, 0, 0);
                        else if (t->multi)
                                set_reason(s, t, t->nodes_max ? R_ENODES : R_NODES,
                                           t->nodes_max ? t->nodes_min : t->ngpus, -1);
                        else if (t->excl)
                                set_reason(s, t, R_NO_WHOLE, t->ngpus, -1);
                        else if (t->ngpus == 1)
                                set_reason(s, t, R_NO_MEM, t->mem, -1);
                        else
                                set_reason(s, t, R_GANG_SHARED, t->ngpus, t->mem);
                        continue;
                }
                if (!resv) {
                        resv = t;
                        set_reason(s, t, R_DIAG, 0, 0);
                        t->resv_holder = true;
                        PH_START(ph_resv);
                        shadow = reserve(s, t, now);
                        PH_STOP(PH_RESERVE, ph_resv);
                        s->last_resv_id = t->id;
                        s->last_shadow_ms = shadow;
                        continue;
                }
                /* would it fit if it could use the reserved GPUs? */
                bool fits_resv = false;
                if (avoid && !memo_fails(s, &memo, t, false)) {
                        fits_resv = fit_memo_fits(s, &fits, t) || place(s, t, false, &f);
                        if (fits_resv)
                                fit_memo_record(s, &fits, t);
                }
                if (fits_resv)
                        set_reason(s, t, R_WOULD_DELAY, resv->id,
                                   shadow == TIME_INF ? -1 : (shadow - now + 999) / 1000);
                else if (t->host)
                        set_reason(s, t, R_DIAG, 0, 0);
                else if (t->multi)
                        set_reason(s, t, t->nodes_max ? R_ENODES : R_NODES, t->nodes_max ? t->nodes_min : t->ngpus,
                                   -1);
                else if (t->excl)
                        set_reason(s, t, R_NO_WHOLE, t->ngpus, -1);
                else if (t->ngpus == 1 && t->model && s->cfg.max_models_per_gpu > 0)
                        set_reason(s, t, R_DIAG, 0, 0); /* memory or models: a scan tells which */
                else if (t->ngpus == 1)
                        set_reason(s, t, R_NO_MEM, t->mem, -1);
                else
                        set_reason(s, t, R_GANG_SHARED, t->ngpus, t->mem);
        }
        }
        s->groups_off = false;
        if (rc < 0)
                return rc;
        /* elastic tasks grow if no task that may start is left waiting
         * (the reservation too may be moot: its holder can be held by
         * what started after it in this run) */
        if (s->nel)
                return grow_all(s, now, ret, ret_n, ret_cap);
        return 0;
}

/* ------------------------------------------------------------------ */
/* when the next run is due                                           */

int64_t gp_sched_next_deadline(const gp_sched *s) {
        /* stale heap entries only make this early, never late */
        return s->heap_n ? s->heap[0].deadline : INT64_MAX;
}

/* ------------------------------------------------------------------ */
/* elastic tasks: grow onto idle GPUs, shrink for the task whose turn it is */

int64_t gp_sched_next_wakeup(const gp_sched *s, int64_t now) {
        int64_t w = gp_sched_next_deadline(s);
        if (s->pol->tier_preempt && s->cfg.preemption && s->npre) {
                /* a waiting task may preempt once a task passes its least
                 * run time: a task less urgent than the most urgent waiting
                 * one, or any while a tenant below its guarantee waits */
                int qmin = -1;
                for (int i = 0; i < GP_PRIORITY_LEVELS && qmin < 0; i++)
                        if (s->tiers[i].n)
                                qmin = i;
                bool reclaim = false;
                for (uint32_t ti = 0; qmin >= 0 && ti < s->tn_cap && !reclaim; ti++)
                        reclaim = s->tn[ti].queued && s->tn[ti].guar_milli > s->tn[ti].run_milli;
                for (uint32_t gi = 0; qmin >= 0 && gi < s->ngpus; gi++) {
                        const sgpu *g = &s->gpus[gi];
                        for (int k = 0; k < g->ntasks; k++) {
                                const stask *v = g->tasks[k];
                                bool cand = v->preemptible ? v->prio > qmin || reclaim : v->borrowing && reclaim;
                                if (v->gpus[0] != gi || !cand)
                                        continue;
                                int64_t at = v->start_ms + s->cfg.preempt_min_runtime_ms;
                                if (at > now && at < w)
                                        w = at;
                        }
                }
                return w;
        }
        if (!level_preempts(s))
                return w;
        /* the least level of the tasks whose turn it is: the tiers' heads
         * (under LAS a tier is a level; under demotion, whose ordering
         * penalises a level finitely, a head aged past level-0 tasks can
         * make this late, never wrong: each run checks the victims) */
        int qmin = -1;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                if (s->tiers[i].n && (qmin < 0 || wait_level(s, s->tiers[i].head) < qmin))
                        qmin = wait_level(s, s->tiers[i].head);
        if (qmin < 0 || qmin >= s->cfg.las_levels - 1)
                return w; /* nothing waits, or nothing can be in a later queue */
        /* when does a running task first become a victim for queue qmin? */
        for (uint32_t gi = 0; gi < s->ngpus; gi++) {
                const sgpu *g = &s->gpus[gi];
                for (int k = 0; k < g->ntasks; k++) {
                        const stask *v = g->tasks[k];
                        if (v->gpus[0] != gi || !v->preemptible)
                                continue; /* each task once, by its first GPU */
                        int64_t at = v->start_ms + s->cfg.las_min_run_ms;
                        if (task_level(s, v, attained_at(v, now)) <= qmin) {
                                int64_t need = level_end(s, v, qmin) - v->attained;
                                int64_t tc = v->seg_ms + (need + v->ngpus - 1) / v->ngpus;
                                if (tc > at)
                                        at = tc;
                        }
                        if (at > now && at < w)
                                w = at;
                }
        }
        return w;
}

/* ------------------------------------------------------------------ */
/* when a run can be left out (replays)                               */

/* Could a run at now decide anything that the GPUs' state alone does not
 * rule out?  False only when no deadline is due, preemption (tiers,
 * guarantees, LAS) has nothing to act on and no elastic task runs. */
static bool run_may_act(const gp_sched *s, int64_t now) {
        if (s->heap_n && s->heap[0].deadline <= now) /* stale entries: only "yes" more often */
                return true;
        if (s->nel)
                return true;
        if (s->pol->las || s->pol->demote)
                return level_preempts(s) && s->running > 0;
        if (!s->pol->tier_preempt || !s->cfg.preemption || !s->npre)
                return false;
        /* make_room: with no guarantee anywhere nothing is reclaimed, and
         * a task preempts only preemptible tasks less urgent than itself */
        if (s->n_guar)
                return true;
        int qmin = -1;
        for (int i = 0; i < GP_PRIORITY_LEVELS && qmin < 0; i++)
                if (s->tiers[i].n)
                        qmin = i;
        if (qmin < 0)
                return false;
        for (uint32_t gi = 0; gi < s->ngpus; gi++) {
                const sgpu *g = &s->gpus[gi];
                for (int k = 0; k < g->ntasks; k++)
                        if (g->tasks[k]->preemptible && g->tasks[k]->prio > qmin)
                                return true;
        }
        return false;
}

/* ------------------------------------------------------------------ */
/* elastic tasks: grow onto idle GPUs, shrink for the task whose turn it is */

/* No GPU could take any task: every usable GPU is held whole (no idle GPU,
 * none shared). */
static bool no_gpu_free(const gp_sched *s) {
        for (int k = 1; k <= s->max_idle && k <= MAX_NODE_GPUS; k++)
                if (s->idle_lists[k] != NIL)
                        return false;
        for (int k = 0; k < s->nkinds; k++)
                for (int b = 0; b < NBUCKETS; b++)
                        if (s->buckets[k][b] != NIL)
                                return false;
        return true;
}

bool gp_sched_run_idle(const gp_sched *s, int64_t now_ms, bool unchanged) {
        if (run_may_act(s, now_ms))
                return false;
        if (no_gpu_free(s))
                return true;
        /* the same inputs as the last run, which decided nothing: the same
         * walk, unless time changes it (time limits move the reservation's
         * horizon and what may backfill before it; decay moves the order) */
        return unchanged && s->last_run_stamp && s->ntimed == 0 && now_ms >= s->last_run_ms &&
               fair_order_kept(s, now_ms);
}
