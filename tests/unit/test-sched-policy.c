/* test-sched-policy.c - the policy and placement tables of the scheduling
 * core: names both ways, the sef policy (shortest expected first: by
 * timeout, tasks without one last, ties by id, tiers ignored, backfill,
 * never preempts), and placement pack vs spread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/sched.h"

#include "sched-fixture.h"

static gp_sched *mk(gp_sched_policy policy, gp_sched_placement placement, bool backfill) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = policy;
        c.placement = placement;
        c.backfill = backfill;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        return s;
}

static void test_names_round_trip(void **state) {
        for (int p = 0; p < GP_SCHED_NPOLICIES; p++) {
                const char *n = gp_sched_policy_name((gp_sched_policy)p);
                assert_non_null(n);
                gp_sched_policy back;
                assert_int_equal(gp_sched_policy_parse(n, &back), 0);
                assert_int_equal(back, p);
        }
        assert_string_equal(gp_sched_policy_name(GP_SCHED_SEF), "sef");
        assert_null(gp_sched_policy_name(GP_SCHED_NPOLICIES));
        gp_sched_policy p;
        assert_int_equal(gp_sched_policy_parse("wfq", &p), -EINVAL);
        assert_int_equal(gp_sched_policy_parse(NULL, &p), -EINVAL);
        assert_true(gp_sched_policy_daemon(GP_SCHED_SEF));
        assert_false(gp_sched_policy_daemon(GP_SCHED_LAS));
        for (int q = 0; q < GP_PLACE_N; q++) {
                gp_sched_placement back;
                assert_int_equal(gp_sched_placement_parse(gp_sched_placement_name((gp_sched_placement)q), &back), 0);
                assert_int_equal(back, q);
        }
        gp_sched_placement pl;
        assert_int_equal(gp_sched_placement_parse("spread", &pl), 0);
        assert_int_equal(pl, GP_PLACE_SPREAD);
        assert_int_equal(gp_sched_placement_parse("fill", &pl), -EINVAL);
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        assert_int_equal(c.placement, GP_PLACE_PACK);
        c.placement = GP_PLACE_N;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), -EINVAL);
}

/* One whole GPU: tasks start one at a time, in sef order. */
static void test_sef_order(void **state) {
        gp_sched *s = mk(GP_SCHED_SEF, GP_PLACE_PACK, false);
        add_node(s, "n", 1);
        /* id: timeout (s), priority */
        enq(s, (gp_sched_req){.id = 1, .tenant = "a", .priority = 0, .gpus = 1});                          /* none: last */
        enq(s, (gp_sched_req){.id = 2, .tenant = "a", .priority = 5, .gpus = 1, .timeout_ms = 600 * SEC});
        enq(s, (gp_sched_req){.id = 3, .tenant = "b", .priority = 9, .gpus = 1, .timeout_ms = 60 * SEC});
        enq(s, (gp_sched_req){.id = 4, .tenant = "b", .priority = 0, .gpus = 1, .timeout_ms = 600 * SEC});
        enq(s, (gp_sched_req){.id = 5, .tenant = "c", .priority = 1, .gpus = 1});                          /* none: last */
        int64_t want[] = {3, 2, 4, 1, 5};
        int64_t ids[8];
        assert_int_equal(gp_sched_queue_order(s, ids, 8), 5);
        for (int i = 0; i < 5; i++) {
                assert_int_equal(ids[i], want[i]);
                gp_sched_task_view v;
                assert_int_equal(gp_sched_task_get(s, want[i], &v), 0);
                assert_int_equal(v.queue_position, i + 1);
        }
        run_out o = {0};
        int64_t now = 1000;
        for (int i = 0; i < 5; i++) {
                assert_int_equal(run(s, now, &o), 1);
                assert_int_equal(o.d[0].kind, GP_DECIDE_START);
                assert_int_equal(o.d[0].id, want[i]);
                assert_int_equal(gp_sched_remove_at(s, want[i], now + 1), 0);
                now += 10;
        }
        free(o.d);
        gp_sched_free(s);
}

/* With backfill: the head (shortest, needs 2 GPUs) reserves; a task with a
 * short enough timeout starts before it on the free GPU, one without a
 * timeout (last in sef order) does not. */
static void test_sef_backfill(void **state) {
        gp_sched *s = mk(GP_SCHED_SEF, GP_PLACE_PACK, true);
        add_node(s, "n", 2);
        run_out o = {0};
        enq(s, (gp_sched_req){.id = 1, .tenant = "a", .gpus = 1, .timeout_ms = 100 * SEC});
        assert_int_equal(run(s, 0, &o), 1);
        enq(s, (gp_sched_req){.id = 2, .tenant = "a", .gpus = 2, .timeout_ms = 10 * SEC});   /* head: blocked */
        enq(s, (gp_sched_req){.id = 3, .tenant = "a", .gpus = 1});                           /* no timeout */
        enq(s, (gp_sched_req){.id = 4, .tenant = "a", .gpus = 1, .timeout_ms = 50 * SEC});   /* ends before 100 s */
        assert_int_equal(run(s, 1 * SEC, &o), 1);
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 4);
        assert_non_null(d);
        assert_true(d->backfilled);
        assert_null(find(&o, GP_DECIDE_START, 2));
        assert_null(find(&o, GP_DECIDE_START, 3));
        char why[256];
        assert_int_equal(gp_sched_task_reason(s, 2, why, sizeof(why)), 0);
        assert_non_null(strstr(why, "next in line, GPUs reserved"));
        free(o.d);
        gp_sched_free(s);
}

/* sef never preempts, even with cfg.preemption on. */
static void test_sef_no_preemption(void **state) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = GP_SCHED_SEF;
        c.preemption = true;
        c.preempt_min_runtime_ms = 0;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_node(s, "n", 1);
        run_out o = {0};
        enq(s, (gp_sched_req){.id = 1, .tenant = "a", .priority = 9, .gpus = 1, .preemptible = true});
        assert_int_equal(run(s, 0, &o), 1);
        enq(s, (gp_sched_req){.id = 2, .tenant = "a", .priority = 0, .gpus = 1, .timeout_ms = SEC});
        assert_int_equal(run(s, 100 * SEC, &o), 0);
        assert_int_equal(gp_sched_next_wakeup(s, 100 * SEC), INT64_MAX);
        free(o.d);
        gp_sched_free(s);
}

/* A 5 GB task with one GPU half full and one idle: pack joins the fuller
 * GPU (keeping the idle one whole), spread takes the emptier one. */
static void test_placement_pack_vs_spread(void **state) {
        for (int pl = 0; pl < GP_PLACE_N; pl++) {
                gp_sched *s = mk(GP_SCHED_HYBRID, (gp_sched_placement)pl, true);
                add_node(s, "n", 2);
                run_out o = {0};
                enq(s, (gp_sched_req){.id = 1, .tenant = "a", .gpus = 1, .memory_mb = 10000});
                assert_int_equal(run(s, 0, &o), 1);
                uint32_t first = o.d[0].gpus[0];
                enq(s, (gp_sched_req){.id = 2, .tenant = "a", .gpus = 1, .memory_mb = 5000});
                assert_int_equal(run(s, 1, &o), 1);
                if (pl == GP_PLACE_PACK)
                        assert_int_equal(o.d[0].gpus[0], first);
                else
                        assert_int_not_equal(o.d[0].gpus[0], first);
                free(o.d);
                gp_sched_free(s);
        }
}

/* Spread: equal free memory, then the cooler, less busy GPU. */
static void test_spread_prefers_less_loaded(void **state) {
        gp_sched *s = mk(GP_SCHED_HYBRID, GP_PLACE_SPREAD, true);
        add_node(s, "n", 3);
        assert_int_equal(gp_sched_gpu_set_load(s, 0, 90, 80), 0);
        assert_int_equal(gp_sched_gpu_set_load(s, 1, 10, 70), 0);
        assert_int_equal(gp_sched_gpu_set_load(s, 2, 10, 40), 0);
        run_out o = {0};
        enq(s, (gp_sched_req){.id = 1, .tenant = "a", .gpus = 1, .memory_mb = 1000});
        assert_int_equal(run(s, 0, &o), 1);
        assert_int_equal(o.d[0].gpus[0], 2);
        enq(s, (gp_sched_req){.id = 2, .tenant = "a", .gpus = 1}); /* whole GPU */
        assert_int_equal(run(s, 1, &o), 1);
        assert_int_equal(o.d[0].gpus[0], 1);
        free(o.d);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names_round_trip),
                cmocka_unit_test(test_sef_order),
                cmocka_unit_test(test_sef_backfill),
                cmocka_unit_test(test_sef_no_preemption),
                cmocka_unit_test(test_placement_pack_vs_spread),
                cmocka_unit_test(test_spread_prefers_less_loaded),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
