/* test-sched-nodes.c - the scheduling core across nodes: multi-node tasks
 * (whole nodes, fewest, all or nothing), labels and node_selector, node
 * drain/remove/revive, a node-wide reservation with backfill, a multi-node
 * victim of preemption, feasibility messages. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/sched.h"
#include "sched-fixture.h"

static gp_sched *mk(void) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        gp_sched *s;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        return s;
}

/* whole GPUs (memory_mb 0) */
static gp_sched_req whole(int64_t id, int gpus) {
        return (gp_sched_req){.id = id, .tenant = "t", .priority = 5, .gpus = gpus};
}

static void assert_gpus(const gp_sched_decision *d, uint32_t first, int n) {
        assert_non_null(d);
        assert_int_equal(d->n_gpus, n);
        for (int i = 0; i < n; i++)
                assert_int_equal(d->gpus[i], first + (uint32_t)i);
}

static void reason_has(gp_sched *s, int64_t id, const char *want) {
        char why[256];
        assert_int_equal(gp_sched_task_reason(s, id, why, sizeof(why)), 0);
        if (!strstr(why, want))
                fail_msg("reason of %lld is '%s', wanted '%s' in it", (long long)id, why, want);
}

/* Issue 22: 64 GPU models fill the table; a 65th is refused (room and
 * add); once every GPU of a model is removed its place is another's, and a
 * task asking for the new model by name starts there. */
static void test_gpu_model_table_is_bounded_and_freed_by_removal(void **st) {
        (void)st;
        gp_sched *s = mk();
        char node[24], model[24];
        for (int i = 0; i < 64; i++) {
                snprintf(node, sizeof(node), "n%d", i);
                snprintf(model, sizeof(model), "Model %d", i);
                gp_sched_gpu_desc d = {.node = node, .index = 0, .uuid = node, .name = model, .memory_total_mb = 1000};
                assert_int_equal(gp_sched_gpu_add(s, &d, NULL), 0);
        }
        const char *fresh[] = {"New", "New", "Model 3"};
        assert_int_equal(gp_sched_gpu_models_room(s, fresh + 2, 1), 0); /* known */
        assert_int_equal(gp_sched_gpu_models_room(s, fresh, 3), -E2BIG);
        gp_sched_gpu_desc nd = {.node = "late", .index = 0, .uuid = "late", .name = "New", .memory_total_mb = 1000};
        assert_int_equal(gp_sched_gpu_add(s, &nd, NULL), -E2BIG);
        assert_int_equal(gp_sched_node_remove(s, "n7"), 0);
        assert_int_equal(gp_sched_gpu_models_room(s, fresh, 3), 0); /* "New" twice is one model */
        uint32_t gi;
        assert_int_equal(gp_sched_gpu_add(s, &nd, &gi), 0);
        gp_sched_req r = whole(1, 1);
        r.gpu_model = "New";
        enq(s, r);
        run_out o = {0};
        run(s, 0, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 1), gi, 1);
        free(o.d);
        /* the removed node's model is not in the table any more: it cannot come back now */
        gp_sched_gpu_desc back = {.node = "n7", .index = 0, .uuid = "n7", .name = "Model 7", .memory_total_mb = 1000};
        assert_int_equal(gp_sched_gpu_add(s, &back, NULL), -E2BIG);
        gp_sched_free(s);
}

/* 12 GPUs on 8-GPU nodes: the two lowest nodes, all 16 GPUs held, grouped
 * by node; the share and the view count 16. */
static void test_twelve_gpus_take_two_whole_nodes(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 8);
        add_node(s, "b", 8);
        add_node(s, "c", 8);
        char why[128];
        gp_sched_req r = whole(1, 12);
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), 0);
        enq(s, r);
        run_out o = {0};
        run(s, 0, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 1), 0, 16);
        gp_sched_task_view v;
        assert_int_equal(gp_sched_task_get(s, 1, &v), 0);
        assert_int_equal(v.n_gpus, 16);
        assert_int_equal(v.gpus[15], 15);
        assert_int_equal(v.gpus_milli, 16000);
        struct gp_sched_tenant_usage u;
        assert_int_equal(gp_sched_tenant_usage(s, "t", 0, &u), 0);
        assert_int_equal(u.gpus_milli, 16000);
        gp_sched_stats stt;
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.gpus_busy, 16);
        /* freed whole: it can run again, and a 1-GPU task goes to a node
         * that was never touched */
        assert_int_equal(gp_sched_requeue(s, 1), 0);
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.gpus_busy, 0);
        run(s, 1, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 1), 0, 16);
        assert_int_equal(gp_sched_remove(s, 1), 0);
        free(o.d);
        gp_sched_free(s);
}

/* All or nothing: a busy GPU keeps its node out; a 16-GPU task takes the
 * two free nodes, a 24-GPU one waits until the third is free. */
static void test_whole_nodes_all_or_nothing(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 8);
        add_node(s, "b", 8);
        add_node(s, "c", 8);
        enq(s, (gp_sched_req){.id = 1, .tenant = "t", .priority = 0, .gpus = 1, .memory_mb = 1000});
        run_out o = {0};
        run(s, 0, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 1), 0, 1); /* node a */
        enq(s, whole(2, 24));
        run(s, 1, &o);
        assert_null(find(&o, GP_DECIDE_START, 2));
        reason_has(s, 2, "whole nodes with 24 GPUs");
        reason_has(s, 2, "free whole nodes hold 16");
        assert_int_equal(gp_sched_remove(s, 2), 0);
        enq(s, whole(3, 16));
        run(s, 2, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 3), 8, 16); /* b and c, not the busy a */
        enq(s, whole(4, 9));
        run(s, 3, &o);
        assert_null(find(&o, GP_DECIDE_START, 4));
        assert_int_equal(gp_sched_remove(s, 1), 0);
        run(s, 4, &o);
        assert_null(find(&o, GP_DECIDE_START, 4)); /* one node of 8 is free: 9 needs two */
        assert_int_equal(gp_sched_remove(s, 3), 0);
        run(s, 5, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 4), 0, 16);
        free(o.d);
        gp_sched_free(s);
}

/* Nodes of 8, 4 and 8 GPUs: 12 takes the 8 and the 4 (no GPU beyond the
 * request), not two 8s; 9 too; 5 takes one 8. */
static void test_heterogeneous_nodes_fewest_gpus_beyond(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "big1", 8);  /* 0..7 */
        add_node(s, "small", 4); /* 8..11 */
        add_node(s, "big2", 8);  /* 12..19 */
        enq(s, whole(1, 12));
        run_out o = {0};
        run(s, 0, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 1), 0, 12);
        assert_int_equal(gp_sched_remove(s, 1), 0);
        enq(s, whole(2, 9));
        run(s, 1, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 2), 0, 12);
        /* a one-node task is not multi-node: 5 whole GPUs on one node */
        enq(s, whole(3, 5));
        run(s, 2, &o);
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 3);
        assert_non_null(d);
        assert_int_equal(d->n_gpus, 5);
        assert_true(d->gpus[0] >= 12);
        free(o.d);
        gp_sched_free(s);
}

/* A task too wide for the nodes there waits; a node joining makes it
 * multi-node-feasible and it starts. */
static void test_node_joining_lets_a_wide_task_start(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 4);
        enq(s, whole(1, 8));
        run_out o = {0};
        run(s, 0, &o);
        assert_int_equal(o.n, 0);
        add_node(s, "b", 4);
        run(s, 1, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 1), 0, 8);
        free(o.d);
        gp_sched_free(s);
}

static void test_selector_matches_labels(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 4); /* 0..3 */
        add_node(s, "b", 4); /* 4..7 */
        add_node(s, "c", 4); /* 8..11 */
        assert_int_equal(gp_sched_node_set_labels(s, "a", "zone=x,ib=yes"), 0);
        assert_int_equal(gp_sched_node_set_labels(s, "b", "zone=y"), 0);
        assert_int_equal(gp_sched_node_set_labels(s, "c", "ib=yes,zone=y"), 0);
        assert_int_equal(gp_sched_node_set_labels(s, "nope", "k=v"), -ENOENT);
        assert_int_equal(gp_sched_node_set_labels(s, "a", "bad"), -EINVAL);
        assert_int_equal(gp_sched_node_set_labels(s, "a", "k=v,"), -EINVAL);
        assert_int_equal(gp_sched_node_set_labels(s, "a", "=v"), -EINVAL);
        assert_int_equal(gp_sched_node_set_labels(s, "a", "k=v w"), -EINVAL);
        gp_sched_req bad = {.id = 9, .tenant = "t", .priority = 5, .gpus = 1, .node_selector = "zone"};
        assert_int_equal(gp_sched_enqueue(s, &bad), -EINVAL);

        run_out o = {0};
        /* shared 1-GPU tasks: one to zone=y (b or c: b, the first), one to ib=yes,zone=y (c) */
        enq(s, (gp_sched_req){.id = 1, .tenant = "t", .priority = 5, .gpus = 1, .memory_mb = 1000,
                              .node_selector = "zone=y"});
        enq(s, (gp_sched_req){.id = 2, .tenant = "t", .priority = 5, .gpus = 1, .memory_mb = 1000,
                              .node_selector = "zone=y,ib=yes"});
        enq(s, (gp_sched_req){.id = 3, .tenant = "t", .priority = 5, .gpus = 2, .node_selector = "zone=x"});
        run(s, 0, &o);
        const gp_sched_decision *d1 = find(&o, GP_DECIDE_START, 1), *d2 = find(&o, GP_DECIDE_START, 2),
                                *d3 = find(&o, GP_DECIDE_START, 3);
        assert_non_null(d1);
        assert_non_null(d2);
        assert_non_null(d3);
        assert_true(d1->gpus[0] >= 4);
        assert_true(d2->gpus[0] >= 8);
        assert_true(d3->gpus[0] < 4 && d3->gpus[1] < 4);
        for (int64_t id = 1; id <= 3; id++)
                assert_int_equal(gp_sched_remove(s, id), 0);

        /* a selector no node matches: infeasible, and waits if queued */
        char why[160];
        gp_sched_req r = {.id = 4, .tenant = "t", .priority = 5, .gpus = 1, .node_selector = "zone=z"};
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), -EINVAL);
        assert_non_null(strstr(why, "zone=z"));
        enq(s, r);
        run(s, 1, &o);
        assert_int_equal(o.n, 0);
        reason_has(s, 4, "zone=z");
        assert_int_equal(gp_sched_node_set_labels(s, "b", "zone=z"), 0);
        run(s, 2, &o);
        d1 = find(&o, GP_DECIDE_START, 4);
        assert_non_null(d1);
        assert_true(d1->gpus[0] >= 4 && d1->gpus[0] < 8);
        assert_int_equal(gp_sched_remove(s, 4), 0);

        /* multi-node with a selector: only the labelled nodes, a and c */
        gp_sched_req m = whole(5, 8);
        m.node_selector = "ib=yes";
        assert_int_equal(gp_sched_check_feasible(s, &m, why, sizeof(why)), 0);
        enq(s, m);
        run(s, 3, &o);
        d1 = find(&o, GP_DECIDE_START, 5);
        assert_non_null(d1);
        assert_int_equal(d1->n_gpus, 8);
        for (int i = 0; i < 4; i++) {
                assert_int_equal(d1->gpus[i], (uint32_t)i);
                assert_int_equal(d1->gpus[4 + i], 8u + (uint32_t)i);
        }
        free(o.d);
        gp_sched_free(s);
}

/* Node-wide reservation: a blocked 8-GPU task holds nodes a and b (free
 * at 100 s, when the long tasks on them end); a 10 s task backfills onto
 * them, a task without a time limit does not. */
static void test_backfill_does_not_delay_reserved_nodes(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 4);
        add_node(s, "b", 4);
        gp_sched_req l1 = whole(1, 4), l2 = whole(2, 1);
        l1.timeout_ms = 100 * SEC;
        l2.timeout_ms = 50 * SEC;
        enq(s, l1);
        enq(s, l2);
        run_out o = {0};
        run(s, 0, &o);
        assert_int_equal(count_kind(&o, GP_DECIDE_START), 2);
        enq(s, whole(10, 8));
        gp_sched_req sh = whole(11, 1), lo = whole(12, 1);
        sh.timeout_ms = 10 * SEC;
        enq(s, sh);
        enq(s, lo);
        run(s, 1 * SEC, &o);
        assert_null(find(&o, GP_DECIDE_START, 10));
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 11);
        assert_non_null(d);
        assert_true(d->backfilled);
        assert_null(find(&o, GP_DECIDE_START, 12));
        reason_has(s, 10, "whole nodes");
        reason_has(s, 12, "reserved for task 10");
        /* the long tasks and the short one end: the 8-GPU task goes first */
        assert_int_equal(gp_sched_remove_at(s, 11, 11 * SEC), 0);
        assert_int_equal(gp_sched_remove_at(s, 2, 50 * SEC), 0);
        assert_int_equal(gp_sched_remove_at(s, 1, 100 * SEC), 0);
        run(s, 100 * SEC, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 10), 0, 8);
        assert_null(find(&o, GP_DECIDE_START, 12));
        free(o.d);
        gp_sched_free(s);
}

static void test_drain_remove_revive(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 2); /* 0, 1 */
        add_node(s, "b", 2); /* 2, 3 */
        assert_int_equal(gp_sched_node_count(s), 2);
        uint32_t ids[4];
        assert_int_equal(gp_sched_node_gpus(s, "b", ids, 4), 2);
        assert_int_equal(ids[0], 2);
        assert_int_equal(gp_sched_node_gpus(s, "x", ids, 4), -ENOENT);
        assert_int_equal(gp_sched_node_set_drained(s, "x", true), -ENOENT);
        assert_int_equal(gp_sched_node_set_drained(s, "a", true), 0);
        gp_sched_stats stt;
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.gpus_total, 4);
        assert_int_equal(stt.gpus_usable, 2);
        enq(s, whole(1, 1));
        run_out o = {0};
        run(s, 0, &o);
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 1);
        assert_non_null(d);
        assert_int_equal(d->gpus[0], 2);
        /* a multi-node task cannot take the drained node */
        enq(s, whole(2, 4));
        run(s, 1, &o);
        assert_null(find(&o, GP_DECIDE_START, 2));
        assert_int_equal(gp_sched_remove(s, 2), 0);

        assert_int_equal(gp_sched_node_remove(s, "b"), -EBUSY);
        assert_int_equal(gp_sched_node_remove(s, "x"), -ENOENT);
        assert_int_equal(gp_sched_node_remove(s, "a"), 0);
        assert_int_equal(gp_sched_node_remove(s, "a"), 0);
        assert_int_equal(gp_sched_node_count(s), 1);
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.gpus_total, 2);
        assert_int_equal(stt.gpus_usable, 2);
        gp_sched_gpu_view v;
        assert_int_equal(gp_sched_gpu_get(s, 0, &v), 0);
        assert_true(v.removed);
        assert_int_equal(gp_sched_gpu_get(s, 2, &v), 0);
        assert_false(v.removed);
        char why[160];
        gp_sched_req r = whole(3, 4);
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), -EINVAL);
        assert_string_equal(why, "needs 2 whole nodes of 2 GPUs, 1 exists");
        /* undraining a removed node gives it no work */
        assert_int_equal(gp_sched_node_set_drained(s, "a", false), 0);
        enq(s, whole(4, 2));
        run(s, 2, &o);
        assert_null(find(&o, GP_DECIDE_START, 4));
        assert_int_equal(gp_sched_remove(s, 4), 0);

        /* revive a:0 with the same id and a new uuid; a:1 stays removed */
        gp_sched_gpu_desc g = {.node = "a", .index = 0, .uuid = "GPU-new", .name = "NVIDIA GeForce RTX 4090",
                               .memory_total_mb = MEM};
        uint32_t id = 99;
        assert_int_equal(gp_sched_gpu_add(s, &g, &id), 0);
        assert_int_equal(id, 0);
        assert_int_equal(gp_sched_gpu_add(s, &g, &id), -EEXIST);
        assert_int_equal(gp_sched_gpu_get(s, 0, &v), 0);
        assert_false(v.removed);
        assert_true(v.healthy);
        assert_false(v.drained);
        assert_string_equal(v.uuid, "GPU-new");
        assert_int_equal(gp_sched_node_count(s), 2);
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.gpus_total, 3);
        enq(s, whole(5, 1));
        run(s, 3, &o);
        d = find(&o, GP_DECIDE_START, 5);
        assert_non_null(d);
        assert_true(d->gpus[0] == 0 || d->gpus[0] == 3);
        free(o.d);
        gp_sched_free(s);
}

/* A multi-node task is a victim like any other: all its GPUs are freed. */
static void test_multi_node_task_is_preempted_whole(void **st) {
        (void)st;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.preemption = true;
        c.preempt_min_runtime_ms = 0;
        gp_sched *s;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_node(s, "a", 2);
        add_node(s, "b", 2);
        gp_sched_req v = whole(1, 3);
        v.priority = 9;
        v.preemptible = true;
        enq(s, v);
        run_out o = {0};
        run(s, 0, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 1), 0, 4);
        gp_sched_req w = whole(2, 2);
        w.priority = 0;
        enq(s, w);
        run(s, 10 * SEC, &o);
        assert_gpus(find(&o, GP_DECIDE_PREEMPT, 1), 0, 4);
        assert_non_null(find(&o, GP_DECIDE_START, 2));
        gp_sched_task_view tv;
        assert_int_equal(gp_sched_task_get(s, 1, &tv), 0);
        assert_false(tv.running);
        gp_sched_stats stt;
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.gpus_busy, 2);
        assert_int_equal(stt.total_preempted, 1);
        /* the multi-node task does not preempt in turn: it waits */
        run(s, 20 * SEC, &o);
        assert_int_equal(o.n, 0);
        reason_has(s, 1, "whole nodes");
        free(o.d);
        gp_sched_free(s);
}

static void test_feasibility_messages(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 8);
        add_node(s, "b", 8);
        add_node(s, "c", 8);
        char why[160];
        gp_sched_req r = whole(1, 32);
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), -EINVAL);
        assert_string_equal(why, "needs 4 whole nodes of 8 GPUs, 3 exist");
        r.gpus = 24;
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), 0);
        r.gpus = GP_MAX_GPUS + 1;
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), -EINVAL);
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r.gpus = GP_MAX_GPUS;
        assert_int_equal(gp_sched_enqueue(s, &r), 0); /* valid, if never runnable here */
        /* elastic tasks stay on one node */
        gp_sched_req e = whole(2, 12);
        e.elastic_max_gpus = 16;
        assert_int_equal(gp_sched_check_feasible(s, &e, why, sizeof(why)), -EINVAL);
        assert_non_null(strstr(why, "elastic task runs on one node"));
        e.elastic_max_gpus = GP_NODE_MAX_GPUS + 1;
        assert_int_equal(gp_sched_enqueue(s, &e), -EINVAL);
        /* whole nodes must hold the memory asked for on every GPU */
        gp_sched_req m = {.id = 3, .tenant = "t", .priority = 5, .gpus = 12, .memory_mb = 30000};
        assert_int_equal(gp_sched_check_feasible(s, &m, why, sizeof(why)), -EINVAL);
        assert_non_null(strstr(why, "MB usable"));
        gp_sched_free(s);
}


/* What a node may hold: "local" (GPUs 0..3) takes no part of a multi-node
 * task and the agent nodes (a: 4..7, b: 8..11) no elastic task. */
static void test_node_allow_keeps_gangs_and_elastic_apart(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "local", 4);
        add_node(s, "a", 4);
        add_node(s, "b", 4);
        assert_int_equal(gp_sched_node_set_allow(s, "local", GP_SCHED_NODE_ELASTIC), 0);
        assert_int_equal(gp_sched_node_set_allow(s, "a", GP_SCHED_NODE_MULTI), 0);
        assert_int_equal(gp_sched_node_set_allow(s, "b", GP_SCHED_NODE_MULTI), 0);
        assert_int_equal(gp_sched_node_set_allow(s, "nope", 0), -ENOENT);
        assert_int_equal(gp_sched_node_set_allow(s, "a", 4), -EINVAL);
        /* 8 GPUs: the two agent nodes, never local although it is first */
        enq(s, whole(1, 8));
        /* elastic 1..4: only on local */
        gp_sched_req e = whole(2, 1);
        e.elastic_max_gpus = 4;
        char why[160];
        assert_int_equal(gp_sched_check_feasible(s, &e, why, sizeof(why)), 0);
        enq(s, e);
        run_out o = {0};
        run(s, 0, &o);
        assert_gpus(find(&o, GP_DECIDE_START, 1), 4, 8);
        const gp_sched_decision *de = find(&o, GP_DECIDE_START, 2);
        assert_non_null(de);
        for (int i = 0; i < de->n_gpus; i++)
                assert_true(de->gpus[i] < 4);
        /* 12 GPUs would need local too: never, though 12 exist */
        gp_sched_req w = whole(3, 12);
        assert_int_equal(gp_sched_check_feasible(s, &w, why, sizeof(why)), -EINVAL);
        assert_int_equal(gp_sched_remove(s, 1), 0);
        assert_int_equal(gp_sched_remove(s, 2), 0);
        enq(s, w);
        run(s, 1, &o);
        assert_null(find(&o, GP_DECIDE_START, 3));
        /* with no node that takes elastic tasks, one can never run */
        assert_int_equal(gp_sched_node_set_allow(s, "local", 0), 0);
        assert_int_equal(gp_sched_check_feasible(s, &e, why, sizeof(why)), -EINVAL);
        free(o.d);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_gpu_model_table_is_bounded_and_freed_by_removal),
                cmocka_unit_test(test_twelve_gpus_take_two_whole_nodes),
                cmocka_unit_test(test_whole_nodes_all_or_nothing),
                cmocka_unit_test(test_heterogeneous_nodes_fewest_gpus_beyond),
                cmocka_unit_test(test_node_joining_lets_a_wide_task_start),
                cmocka_unit_test(test_selector_matches_labels),
                cmocka_unit_test(test_backfill_does_not_delay_reserved_nodes),
                cmocka_unit_test(test_drain_remove_revive),
                cmocka_unit_test(test_multi_node_task_is_preempted_whole),
                cmocka_unit_test(test_feasibility_messages),
                cmocka_unit_test(test_node_allow_keeps_gangs_and_elastic_apart),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
