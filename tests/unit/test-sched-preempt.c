/* test-sched-preempt.c - make_room (src/core/sched-preempt.c) preempts
 * what a plan on every node would: the node whose plan frees room for the
 * waiting task with the fewest GPUs taken, then the least work lost, then
 * the lowest numbered, and that plan's victims.  make_room reaches that
 * node without planning most others (per-tier bitmaps of nodes, per-node
 * bounds and summaries kept from run to run); the oracle here plans every
 * node, every time, with none of that.  Meanwhile the tenants' per-tier
 * lists, which take preempted tasks back at their place by id, are checked
 * whole after every step.
 *
 * The test compiles the scheduler itself (src/core/sched-all.c, the one
 * unit the build makes of it) to reach make_room() and the pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/sched-all.c"

#define MAX_VICTIMS 256

typedef struct choice {
        int n;
        int64_t ids[MAX_VICTIMS];
} choice;

static int cmp_i64(const void *a, const void *b) {
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
        return (x > y) - (x < y);
}

/* The plan on every node that may hold w, the least (GPUs, lost, node)
 * kept; false when none makes room or w's rules would then hold it. */
static bool oracle(gp_sched *s, stask *w, int64_t now, bool after_resv, choice *out) {
        out->n = 0;
        const stenant *T = &s->tn[w->tenant];
        bool rule_a = !after_resv;
        bool reclaim_any = T->guar_milli > 0 && T->run_milli + share_lb(s, w) <= T->guar_milli;
        if (!rule_a && !reclaim_any)
                return false;
        int best = -1;
        int64_t best_lost = 0;
        uint32_t bn = NIL;
        bool ba = false, br = false;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!(nd->kinds & w->kinds) || nd->ngpus < w->ngpus)
                        continue;
                bool r = reclaim_any && T->run_milli + node_share_ub(s, w, nd) <= T->guar_milli;
                if (!rule_a && !r)
                        continue;
                int64_t lost;
                int c = plan_node(s, w, ni, now, rule_a, r, false, &lost);
                assert_true(c != -ENOMEM);
                if (c <= 0)
                        continue;
                /* what make_room passes over nodes with holds of this plan:
                 * its GPUs and lost work are at least the bounds, and the
                 * quick tests say it may make room */
                assert_true(gpre_ready(s) == 0);
                pnode *pn = &s->pnode[ni];
                if (pn->seen != s->nmod[ni] || now >= pn->until)
                        pnode_make(s, ni, now);
                int glb = w->excl && w->ngpus > nd->idle ? w->ngpus - nd->idle : 1;
                int64_t newest = pnode_newest(pn, w, rule_a, r);
                if (c < glb || newest == INT64_MIN || lost < (int64_t)glb * (now - newest) ||
                    lost < (int64_t)glb * (now - s->pspan[ni].max) || now - s->pspan[ni].min < s->cfg.preempt_min_runtime_ms ||
                    !pnode_could(pn, w, r) || !node_could(s, w, ni, r, false))
                        fail_msg("task %" PRId64 " on node %u: a plan of %d GPUs losing %" PRId64 " ms, bounds %d GPUs, "
                                 "%" PRId64 " ms from the newest victim, %" PRId64 " ms from the newest task",
                                 w->id, ni, c, lost, glb, (int64_t)glb * (now - newest),
                                 (int64_t)glb * (now - s->pspan[ni].max));
                if (best < 0 || c < best || (c == best && lost < best_lost)) {
                        best = c;
                        best_lost = lost;
                        bn = ni;
                        ba = rule_a;
                        br = r;
                }
        }
        if (bn == NIL)
                return false;
        int64_t lost, a1, a2, a3;
        if (gate(s, w, node_share_ub(s, w, &s->nodes[bn]), &a1, &a2, &a3))
                return false;
        assert_true(plan_node(s, w, bn, now, ba, br, false, &lost) > 0);
        assert_true(s->pv_n <= MAX_VICTIMS);
        for (uint32_t i = 0; i < s->pv_n; i++)
                out->ids[out->n++] = s->pv[i]->id;
        qsort(out->ids, (size_t)out->n, sizeof(*out->ids), cmp_i64);
        return true;
}

/* Every tier's queue, where the policy keeps one (not fair: fifo): linked
 * both ways, by id (the policy orders by id alone: a requeued task went in
 * after its predecessor by id among every tenant's), as long as its count;
 * under a fair policy nothing is linked.  Every tenant's tier lists: sorted by
 * id over [lo, len), each slot's task knows its slot, the count and the
 * order-statistics tree agree with the slots, the first slot holds a
 * task. */
static void lists_whole(const gp_sched *s) {
        assert_null(s->pol->order_key);
        for (int q = 0; q < GP_PRIORITY_LEVELS; q++) {
                const tier *tr = &s->tiers[q];
                if (s->pol->fair) {
                        assert_null(tr->head);
                        assert_null(tr->tail);
                        continue;
                }
                size_t k = 0;
                for (const stask *x = tr->head, *p = NULL; x; p = x, x = x->next, k++) {
                        assert_ptr_equal(x->prev, p);
                        if (p && p->id >= x->id)
                                fail_msg("tier %d: task %" PRId64 " after %" PRId64, q, x->id, p->id);
                        if (!x->next)
                                assert_ptr_equal(tr->tail, x);
                }
                assert_int_equal(k, tr->n);
        }
        for (uint32_t ti = 0; ti < s->tn_cap; ti++)
                for (int q = 0; q < GP_PRIORITY_LEVELS; q++) {
                        const tlist *l = &s->tn[ti].q[q];
                        if (!l->v)
                                continue;
                        uint32_t live = 0;
                        for (uint32_t i = 0; i < l->len; i++) {
                                const stask *x = l->v[i];
                                if (i < l->lo) {
                                        assert_null(x);
                                } else {
                                        if (i > l->lo && l->ids[i - 1] >= l->ids[i])
                                                fail_msg("tenant %u tier %d: slot %u of [%u, %u) holds id %" PRId64
                                                         " after %" PRId64, ti, q, i, l->lo, l->len, l->ids[i],
                                                         l->ids[i - 1]);
                                        if (x) {
                                                assert_int_equal(x->id, l->ids[i]);
                                                assert_int_equal(x->tl_idx, i);
                                                assert_int_equal(x->q, q);
                                                assert_false(x->running);
                                        }
                                }
                                assert_int_equal(tl_fen_sum(l, i), live);
                                live += x != NULL;
                        }
                        assert_int_equal(tl_fen_sum(l, l->len), live);
                        assert_int_equal(l->n, live);
                        if (l->n)
                                assert_non_null(l->v[l->lo]);
                }
}

/* The capacity bitmaps make_room passes over are never short of a node:
 * brought up to date at `now`, every node's bits (or its unread bit) hold
 * at least those a summary made at `now` gives it (which pnode_make then
 * sets). */
static bool has(const uint64_t *map, uint32_t ni) {
        return map[ni >> 6] >> (ni & 63) & 1;
}

static void bits_cover(gp_sched *s, int64_t now) {
        assert_int_equal(gpre_ready(s), 0);
        assert_int_equal(cb_sync(s, now), 0);
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                bool had[CB_SETS][CB_K];
                for (int set = 0; set < CB_SETS; set++)
                        for (int k = 0; k < CB_K; k++)
                                had[set][k] = has(cb_map(s, set, k), ni) || has(cb_unread(s), ni);
                pnode_make(s, ni, now);
                for (int set = 0; set < CB_SETS; set++)
                        for (int k = 0; k < CB_K; k++)
                                if (!had[set][k] && has(cb_map(s, set, k), ni))
                                        fail_msg("node %u at %" PRId64 ": set %d class %d was off, its summary "
                                                 "made now says it may host", ni, now, set, k);
                /* and the exact bits hold each class's least task the summary lets in */
                const pnode *pn = &s->pnode[ni];
                for (int set = 0; set < CB_SETS; set++)
                        for (int k = 1; k < CB_K; k++) {
                                stask w = {.prio = (uint8_t)(set < GP_PRIORITY_LEVELS ? set : 0)};
                                w.excl = k <= CB_G;
                                w.ngpus = (uint16_t)(w.excl ? 1 << (k - 1) : 1);
                                w.mem = w.excl ? 0 : (int64_t)1024 << (k - 1 - CB_G);
                                assert_int_equal(cb_class(&w), k);
                                bool r = set == GP_PRIORITY_LEVELS;
                                bool may = pnode_could(pn, &w, r) && (r || pn->newest_a[set] != INT64_MIN);
                                if (may && !has(cb_map(s, set, k), ni))
                                        fail_msg("node %u: set %d class %d is off, its summary lets that class in",
                                                 ni, set, k);
                        }
        }
}

static void add_node(gp_sched *s, const char *node, int n, int64_t mb, const char *name) {
        for (int i = 0; i < n; i++) {
                char uuid[64];
                snprintf(uuid, sizeof(uuid), "GPU-%s-%d", node, i);
                gp_sched_gpu_desc d = {.node = node, .index = i, .uuid = uuid, .name = name, .memory_total_mb = mb};
                assert_int_equal(gp_sched_gpu_add(s, &d, NULL), 0);
        }
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t xr(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

static const char *const tenants[] = {"a", "b", "c", "d", "e", "f"};

/* A full pool of shared and whole GPUs, tenants with guarantees, tiers
 * 0-9; each round: new work, a run, then make_room for queued tasks of
 * every kind against the oracle, then some ends.  Short steps of the
 * clock make victims' lost work differ by little: a bound that prunes a
 * node it should not shows then. */
static void random_pool(int rounds, int min_runtime_s, bool many_nodes, int64_t max_step_ms,
                        gp_sched_policy policy) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = policy;
        c.preemption = true;
        c.preempt_min_runtime_ms = (int64_t)min_runtime_s * 1000;
        /* with many nodes, no margin: what victims free is a power of two GB exactly at times
         * (the capacity classes' bounds) */
        if (many_nodes)
                c.memory_safety_margin_mb = 0;
        gp_sched *s;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        for (int i = 0; i < 6; i++) {
                gp_sched_tenant_cfg tc = {.weight = 1 + (uint32_t)(i % 3),
                                          .quota = {.guaranteed_gpus_milli = i % 3 == 0 ? 6000 : 0,
                                                    .max_gpus_milli = i == 4 ? 20000 : 0}};
                assert_int_equal(gp_sched_tenant_set(s, tenants[i], &tc), 0);
        }
        int nodes = many_nodes ? 70 : 12;
        for (int i = 0; i < nodes; i++) {
                char node[16];
                snprintf(node, sizeof(node), "n%02d", i);
                add_node(s, node, i % 5 == 4 ? 4 : 8, i % 4 == 3 ? 24564 : 81920,
                         i % 4 == 3 ? "NVIDIA GeForce RTX 4090" : "NVIDIA A100-SXM4-80GB");
        }
        gp_sched_decision *d = NULL;
        size_t n = 0, cap = 0;
        int64_t id = 1, now = 1000;
        int compared = 0, preempted = 0, multi_victim = 0;
        for (int r = 0; r < rounds; r++) {
                for (int k = 0; k < 14; k++) {
                        gp_sched_req q = {.id = id++, .tenant = tenants[xr() % 6], .priority = (int)(xr() % 10),
                                          .preemptible = xr() % 3 != 0};
                        uint64_t kind = xr() % 10;
                        if (kind < 6) {
                                q.gpus = 1;
                                q.memory_mb = 1024 * (1 + (int64_t)(xr() % 30));
                        } else if (kind < 9) {
                                q.gpus = 1;
                        } else {
                                q.gpus = 2 + (int)(xr() % 3); /* fits a node: no multi-node task */
                        }
                        q.gpu_model = xr() % 9 == 0 ? "*4090*" : NULL;
                        q.timeout_ms = xr() % 2 ? (int64_t)(60 + xr() % 600) * 1000 : 0;
                        if (gp_sched_enqueue(s, &q) < 0)
                                id--;
                }
                now += (int64_t)(xr() % 40000);
                n = 0;
                assert_int_equal(gp_sched_run(s, now, &d, &n, &cap), 0);
                lists_whole(s);
                /* make_room for some queued tasks, as the task whose turn
                 * it is (rule a and reclaim) or behind the reservation
                 * (reclaim only) */
                int64_t queued[4096];
                int nq = 0;
                size_t qpos = 0;
                stask *qt;
                while ((qt = gp_i64map_next(&s->tasks, &qpos, NULL)) && nq < 4096)
                        if (!qt->running)
                                queued[nq++] = qt->id;
                for (int k = 0; k < 6 && nq; k++) {
                        stask *w = map_get(s, queued[xr() % (uint64_t)nq]);
                        if (!w || w->running || w->multi)
                                continue;
                        bool after = xr() % 4 == 0;
                        choice want;
                        s->stamp++; /* a run of its own: what the last run started may go */
                        if (k == 0)
                                bits_cover(s, now);
                        bool exp = oracle(s, w, now, after, &want);
                        n = 0;
                        int got = make_room(s, w, now, after, false, &d, &n, &cap);
                        assert_true(got >= 0);
                        choice have = {0};
                        for (size_t i = 0; i < n; i++) {
                                assert_int_equal(d[i].kind, GP_DECIDE_PREEMPT);
                                assert_true(have.n < MAX_VICTIMS);
                                have.ids[have.n++] = d[i].id;
                        }
                        qsort(have.ids, (size_t)have.n, sizeof(*have.ids), cmp_i64);
                        if (got != (exp ? 1 : 0) || have.n != want.n)
                                fail_msg("round %d, task %" PRId64 " (tier %d, %d GPUs, %" PRId64 " MB%s%s): make_room "
                                         "preempted %d, the plan on every node %d",
                                         r, w->id, w->prio, w->ngpus, w->mem, w->excl ? ", whole" : "",
                                         after ? ", behind the reservation" : "", have.n, want.n);
                        for (int i = 0; i < have.n; i++)
                                assert_int_equal(have.ids[i], want.ids[i]);
                        compared++;
                        preempted += exp;
                        multi_victim += want.n > 1;
                        lists_whole(s);
                }
                /* the queue kept short: some queued tasks are cancelled */
                for (int i = 0; i < nq && nq > 40; i++)
                        if (xr() % 4 == 0) {
                                stask *x = map_get(s, queued[i]);
                                if (x && !x->running)
                                        assert_int_equal(gp_sched_remove_at(s, queued[i], now), 0);
                        }
                /* some end */
                size_t pos = 0;
                stask *t;
                int64_t ends[10];
                int ne = 0;
                while ((t = gp_i64map_next(&s->tasks, &pos, NULL)) && ne < 10)
                        if (t->running && xr() % 3 == 0)
                                ends[ne++] = t->id;
                for (int i = 0; i < ne; i++)
                        assert_int_equal(gp_sched_remove_at(s, ends[i], now), 0);
                lists_whole(s);
        }
        /* not vacuous: many comparisons preempted, some more than one task */
        if (preempted < compared / 10 || multi_victim == 0)
                fail_msg("too few preemptions compared: %d of %d, %d with more than one victim", preempted, compared,
                         multi_victim);
        free(d);
        gp_sched_free(s);
}

static void make_room_is_the_plan_on_every_node(void **state) {
        (void)state;
        random_pool(900, 60, false, 40000, GP_SCHED_HYBRID);
}

static void make_room_is_the_plan_on_every_node_no_least_run_time(void **state) {
        (void)state;
        random_pool(600, 0, false, 3000, GP_SCHED_HYBRID);
}

static void make_room_is_the_plan_on_every_node_many_nodes(void **state) {
        (void)state;
        random_pool(600, 60, true, 4000, GP_SCHED_HYBRID);
}

/* fifo keeps its tiers' linked lists (it walks them): the victims
 * make_room requeues go in after their predecessor by id among every
 * tenant's queued tasks (lists_whole) */
static void make_room_requeues_in_the_tier_list_by_id(void **state) {
        (void)state;
        random_pool(300, 60, false, 40000, GP_SCHED_FIFO);
}

/* Task id of tier `prio`, one GPU, `mb` (preemptible or not), queued and
 * started by a run at `now` */
static void start_one(gp_sched *s, int64_t id, int prio, int64_t mb, bool preemptible, int64_t now) {
        gp_sched_req q = {.id = id, .tenant = "a", .priority = prio, .gpus = 1, .memory_mb = mb,
                          .preemptible = preemptible};
        assert_int_equal(gp_sched_enqueue(s, &q), 0);
        gp_sched_decision *d = NULL;
        size_t n = 0, cap = 0;
        assert_int_equal(gp_sched_run(s, now, &d, &n, &cap), 0);
        assert_true(n == 1 && d[0].kind == GP_DECIDE_START && d[0].id == id);
        free(d);
}

/* One node of one 80 GB GPU, no margin, preemption on */
static gp_sched *one_gpu_pool(void) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.preemption = true;
        c.memory_safety_margin_mb = 0;
        gp_sched *s;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_node(s, "n0", 1, 81920, "NVIDIA A100-SXM4-80GB");
        return s;
}

/* make_room for queued task id at now: the ids it preempted (at most 4) */
static int room_for(gp_sched *s, int64_t id, int64_t now, int64_t *victims) {
        gp_sched_decision *d = NULL;
        size_t n = 0, cap = 0;
        s->stamp++;
        stask *w = map_get(s, id);
        assert_non_null(w);
        assert_true(make_room(s, w, now, false, false, &d, &n, &cap) >= 0);
        assert_true(n <= 4);
        for (size_t i = 0; i < n; i++)
                victims[i] = d[i].id;
        free(d);
        return (int)n;
}

/* A node read as unable to host a task, then changed so that it can (a
 * victim started there): make_room reads it again.  The bitmaps say "no"
 * for that node once it is read; what touched it since must bring it back
 * (s->tlog). */
static void a_node_changed_since_it_was_read_is_read_again(void **state) {
        (void)state;
        gp_sched *s = one_gpu_pool();
        start_one(s, 1, 0, 50 * 1024, false, 1000); /* tier 0: never a victim */
        start_one(s, 2, 5, 10 * 1024, true, 1000);  /* a victim, too small to matter */
        gp_sched_req w = {.id = 3, .tenant = "a", .priority = 1, .gpus = 1, .memory_mb = 40 * 1024};
        assert_int_equal(gp_sched_enqueue(s, &w), 0);
        int64_t v[4];
        assert_int_equal(room_for(s, 3, 100000, v), 0); /* 20 GB free, 30 without task 2: "no" */
        assert_int_equal(gp_sched_remove_at(s, 3, 100000), 0);
        assert_int_equal(gp_sched_remove_at(s, 1, 100000), 0);
        start_one(s, 4, 5, 60 * 1024, true, 100000); /* 10 GB free, 70 without it */
        w.id = 5;
        assert_int_equal(gp_sched_enqueue(s, &w), 0);
        assert_int_equal(room_for(s, 5, 200000, v), 1);
        assert_int_equal(v[0], 4);
        gp_sched_free(s);
}

/* ... and a node read while its victim had not run its least run time is
 * read again once it has (s->pwake), with nothing else touching it. */
static void a_node_whose_victim_came_of_age_is_read_again(void **state) {
        (void)state;
        gp_sched *s = one_gpu_pool();
        start_one(s, 1, 0, 10 * 1024, true, 1000);  /* preemptible, but not by tier 1: the node is read */
        start_one(s, 2, 5, 60 * 1024, true, 40000); /* a victim from 100 s on */
        gp_sched_req w = {.id = 3, .tenant = "a", .priority = 1, .gpus = 1, .memory_mb = 40 * 1024};
        assert_int_equal(gp_sched_enqueue(s, &w), 0);
        int64_t v[4];
        assert_int_equal(room_for(s, 3, 70000, v), 0);
        assert_int_equal(room_for(s, 3, 99999, v), 0);
        assert_int_equal(room_for(s, 3, 100000, v), 1);
        assert_int_equal(v[0], 2);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(make_room_is_the_plan_on_every_node),
                cmocka_unit_test(make_room_is_the_plan_on_every_node_no_least_run_time),
                cmocka_unit_test(make_room_is_the_plan_on_every_node_many_nodes),
                cmocka_unit_test(make_room_requeues_in_the_tier_list_by_id),
                cmocka_unit_test(a_node_changed_since_it_was_read_is_read_again),
                cmocka_unit_test(a_node_whose_victim_came_of_age_is_read_again),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
