/* test-sched-spf.c - the spf policy (shortest predicted GPU time first
 * within a tier, aged): tiers first, then predicted GPU time (estimate x
 * GPUs, a time limit as its upper bound), aging by submit time, a wait
 * that stays bounded under a stream of shorter work, and demotion (with
 * spf_preempt): a preemptible task that ran past the first LAS threshold (or past its own
 * prediction when that is longer) makes room for the tasks of its tier or
 * a more urgent one that have not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "core/sched.h"
#include "sched-fixture.h"

static gp_sched *mk(int aging_pct) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = GP_SCHED_SPF;
        c.spf_aging_pct = aging_pct;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        return s;
}

static gp_sched_req rq(int64_t id, int prio, int gpus, int64_t est_ms, int64_t submit_ms) {
        return (gp_sched_req){.id = id, .tenant = "t", .priority = prio, .gpus = gpus, .estimate_ms = est_ms,
                              .submit_ms = submit_ms};
}

/* the id of the first START of a run that starts one task */
static int64_t started(gp_sched *s, int64_t now) {
        run_out o = {0};
        run(s, now, &o);
        int64_t id = 0;
        for (size_t i = 0; i < o.n; i++)
                if (o.d[i].kind == GP_DECIDE_START && !id)
                        id = o.d[i].id;
        free(o.d);
        return id;
}

static void test_tiers_first_then_the_shortest_predicted_gpu_time(void **st) {
        (void)st;
        gp_sched *s = mk(0);
        add_node(s, "n", 1);
        enq(s, rq(1, 0, 1, 1, 0)); /* holds the GPU */
        assert_int_equal(started(s, 0), 1);
        enq(s, rq(2, 5, 1, 60000, 0));
        enq(s, rq(3, 5, 1, 1000, 0));
        enq(s, rq(5, 3, 1, 3600000, 0)); /* a more urgent tier goes first whatever its length */
        enq(s, rq(6, 5, 1, 0, 0));       /* no estimate: taken as short */
        assert_int_equal(gp_sched_remove_at(s, 1, 1), 0);
        const int64_t want[] = {5, 6, 3, 2};
        for (int i = 0; i < 4; i++) {
                int64_t id = started(s, 1 + i);
                assert_int_equal(id, want[i]);
                assert_int_equal(gp_sched_remove_at(s, id, 1 + i), 0);
        }
        gp_sched_free(s);
}

/* GPU time, not run time: 2 GPUs for 1 s (2 GPU-s) before 1 GPU for 3 s */
static void test_gpu_time_is_the_estimate_times_the_gpus(void **st) {
        (void)st;
        gp_sched *s = mk(0);
        add_node(s, "n", 2);
        enq(s, rq(1, 0, 2, 1, 0));
        assert_int_equal(started(s, 0), 1);
        enq(s, rq(2, 5, 1, 3000, 0));
        enq(s, rq(3, 5, 2, 1000, 0));
        enq(s, rq(4, 5, 2, 2000, 0)); /* 4 GPU-s: after 2 */
        assert_int_equal(gp_sched_remove_at(s, 1, 1), 0);
        assert_int_equal(started(s, 1), 3);
        assert_int_equal(gp_sched_remove_at(s, 3, 2), 0);
        assert_int_equal(started(s, 2), 2);
        gp_sched_free(s);
}

static void test_a_time_limit_caps_the_prediction(void **st) {
        (void)st;
        gp_sched *s = mk(0);
        add_node(s, "n", 1);
        enq(s, rq(1, 0, 1, 1, 0));
        assert_int_equal(started(s, 0), 1);
        enq(s, rq(2, 5, 1, 30000, 0));
        gp_sched_req r = rq(3, 5, 1, 3600000, 0);
        r.timeout_ms = 10000; /* predicted an hour, but stopped after 10 s */
        enq(s, r);
        assert_int_equal(gp_sched_remove_at(s, 1, 1), 0);
        assert_int_equal(started(s, 1), 3);
        gp_sched_free(s);
}

static void test_waiting_earns_credit_at_the_aging_rate(void **st) {
        (void)st;
        /* aging 100%: a millisecond waited cancels a GPU-millisecond predicted */
        gp_sched *s = mk(100);
        add_node(s, "n", 1);
        enq(s, rq(1, 0, 1, 1, 0));
        assert_int_equal(started(s, 0), 1);
        enq(s, rq(2, 5, 1, 10000, 0));    /* 10 s, waiting since 0 */
        enq(s, rq(3, 5, 1, 1000, 20000)); /* 1 s, but 20 s later: 2 is ahead */
        enq(s, rq(4, 5, 1, 1000, 5000));  /* 1 s, 5 s later: ahead of 2 (6 s < 10 s) */
        assert_int_equal(gp_sched_remove_at(s, 1, 21000), 0);
        assert_int_equal(started(s, 21000), 4);
        assert_int_equal(gp_sched_remove_at(s, 4, 22000), 0);
        assert_int_equal(started(s, 22000), 2);
        gp_sched_free(s);
}

/* One GPU, a 100 s job, then a 1 s job every 0.5 s for ever: without aging
 * the long job would never start; with aging 50% it starts once the stream's
 * newest jobs are 200 s younger than it, so by about 200 s plus the jobs
 * queued before then. */
static void test_no_wait_grows_without_bound(void **st) {
        (void)st;
        for (int aging = 25; aging <= 400; aging *= 2) {
                gp_sched *s = mk(aging);
                add_node(s, "n", 1);
                enq(s, rq(1, 5, 1, 100000, 0));
                int64_t id = 2, running = 0, long_start = -1;
                for (int64_t now = 0; now < 2000000 && long_start < 0; now += 500) {
                        enq(s, rq(id, 5, 1, 1000, now));
                        id++;
                        if (running && now % 1000 == 0) {
                                assert_int_equal(gp_sched_remove_at(s, running, now), 0);
                                running = 0;
                        }
                        if (!running) {
                                running = started(s, now);
                                if (running == 1)
                                        long_start = now;
                        }
                }
                /* the credit it needs: 99 s of predicted time difference, at aging/100 per ms;
                 * the 1 s jobs ahead of it then run one a second */
                int64_t bound = 99000 * 100 / aging * 2 + 2000;
                assert_true(long_start >= 0);
                assert_true(long_start <= bound);
                gp_sched_free(s);
        }
}

/* spf with spf_preempt: its demotion preempts */
static gp_sched *mk_demote_aging(int aging_pct) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = GP_SCHED_SPF;
        c.spf_aging_pct = aging_pct;
        c.spf_preempt = true;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        return s;
}

static gp_sched *mk_demote(void) {
        return mk_demote_aging(1);
}

static gp_sched_req prq(int64_t id, int prio, int64_t est_ms, int64_t submit_ms) {
        gp_sched_req r = rq(id, prio, 1, est_ms, submit_ms);
        r.preemptible = true;
        return r;
}

/* Defaults: thresholds 1 h and 10 h of GPU time, least run 60 s.  A task
 * with no estimate runs past 1 h: a new task of its tier takes its GPU, at
 * the moment the core announces; before that it waits. */
static void test_a_task_past_the_first_threshold_makes_room_for_a_new_one(void **st) {
        (void)st;
        gp_sched *s = mk_demote();
        add_node(s, "n", 1);
        enq(s, prq(1, 5, 0, 0));
        assert_int_equal(started(s, 0), 1);
        enq(s, prq(2, 5, 60000, 1800000));
        run_out o = {0};
        assert_int_equal(run(s, 1800000, &o), 0);
        assert_int_equal(gp_sched_next_wakeup(s, 1800000), 3600000);
        assert_int_equal(run(s, 3599999, &o), 0);
        assert_int_equal(run(s, 3600000, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 1));
        assert_non_null(find(&o, GP_DECIDE_START, 2));
        /* task 1 waits at level 1 now: a later, longer level-0 task goes first */
        enq(s, prq(3, 5, 1800000, 3600001));
        assert_int_equal(gp_sched_remove_at(s, 2, 3700000), 0);
        assert_int_equal(started(s, 3700000), 3);
        free(o.d);
        gp_sched_free(s);
}

/* A task predicted to need 2 GPU-hours is demoted only past 2 h (the
 * thresholds scaled by its prediction), not at the first threshold. */
static void test_a_task_predicted_long_is_demoted_only_past_its_prediction(void **st) {
        (void)st;
        gp_sched *s = mk_demote();
        add_node(s, "n", 1);
        enq(s, prq(1, 5, 7200000, 0));
        assert_int_equal(started(s, 0), 1);
        enq(s, prq(2, 5, 60000, 3600000));
        run_out o = {0};
        assert_int_equal(run(s, 3600000, &o), 0);
        assert_int_equal(run(s, 7199999, &o), 0);
        assert_int_equal(gp_sched_next_wakeup(s, 7199999), 7200000);
        assert_int_equal(run(s, 7200000, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 1));
        assert_non_null(find(&o, GP_DECIDE_START, 2));
        free(o.d);
        gp_sched_free(s);
}

/* Demotion never crosses tiers upwards and never touches a task that is
 * not preemptible: a less urgent task waits behind a more urgent one past
 * its threshold, and a non-preemptible one keeps its GPU. */
static void test_demotion_keeps_tiers_and_non_preemptible_tasks(void **st) {
        (void)st;
        gp_sched *s = mk_demote();
        add_node(s, "n", 2);
        enq(s, prq(1, 2, 0, 0));       /* urgent, preemptible */
        enq(s, rq(2, 5, 1, 0, 0));     /* not preemptible */
        run_out o = {0};
        assert_int_equal(run(s, 0, &o), 2);
        enq(s, prq(3, 5, 1000, 4000000));
        assert_int_equal(run(s, 4000000, &o), 0);
        assert_int_equal(run(s, 50000000, &o), 0);
        /* a task of the urgent tier may take the urgent task's GPU */
        enq(s, prq(4, 2, 1000, 50000000));
        assert_int_equal(run(s, 50000000, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 1));
        assert_non_null(find(&o, GP_DECIDE_START, 4));
        free(o.d);
        gp_sched_free(s);
}

/* A demoted task is not starved by a stream of new short tasks: its
 * penalty (10x the hour of GPU time it was demoted at) is finite, and with
 * aging 100% a task submitted W ms after it needs a predicted GPU time W
 * ms shorter to pass it; one 1-s task a second keeps the GPU busy, yet
 * task 1 runs again 10 h after its submission (its key: 36,000 s of
 * penalty; a task submitted at T: 1 s + T), and not much before or after. */
static void test_a_demoted_task_waits_a_bounded_time(void **st) {
        (void)st;
        gp_sched *s = mk_demote_aging(100);
        add_node(s, "n", 1);
        enq(s, prq(1, 5, 0, 0));
        assert_int_equal(started(s, 0), 1);
        int64_t id = 2, running = 1, again = -1;
        for (int64_t now = 3600000; now < 100000000 && again < 0; now += 1000) {
                if (running > 1)
                        assert_int_equal(gp_sched_remove_at(s, running, now), 0);
                enq(s, prq(id++, 5, 1000, now));
                run_out o = {0};
                run(s, now, &o);
                for (size_t i = 0; i < o.n; i++) {
                        if (o.d[i].kind == GP_DECIDE_PREEMPT)
                                assert_int_equal(o.d[i].id, 1);
                        if (o.d[i].kind != GP_DECIDE_START)
                                continue;
                        running = o.d[i].id;
                        if (o.d[i].id == 1)
                                again = now;
                }
                free(o.d);
        }
        assert_true(again >= 36000000 - 2000 && again <= 36000000 + 2000);
        gp_sched_free(s);
}

/* Without spf_preempt (the default) spf only orders: nothing is ever
 * preempted, and no wake-up is asked for it. */
static void test_demotion_without_spf_preempt_only_orders(void **st) {
        (void)st;
        gp_sched *s = mk(1);
        add_node(s, "n", 1);
        enq(s, prq(1, 5, 0, 0));
        assert_int_equal(started(s, 0), 1);
        enq(s, prq(2, 5, 1000, 1000));
        run_out o = {0};
        assert_int_equal(run(s, 90000000, &o), 0);
        assert_int_equal(gp_sched_next_wakeup(s, 90000000), INT64_MAX);
        free(o.d);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_tiers_first_then_the_shortest_predicted_gpu_time),
                cmocka_unit_test(test_gpu_time_is_the_estimate_times_the_gpus),
                cmocka_unit_test(test_a_time_limit_caps_the_prediction),
                cmocka_unit_test(test_waiting_earns_credit_at_the_aging_rate),
                cmocka_unit_test(test_no_wait_grows_without_bound),
                cmocka_unit_test(test_a_task_past_the_first_threshold_makes_room_for_a_new_one),
                cmocka_unit_test(test_a_task_predicted_long_is_demoted_only_past_its_prediction),
                cmocka_unit_test(test_demotion_keeps_tiers_and_non_preemptible_tasks),
                cmocka_unit_test(test_demotion_without_spf_preempt_only_orders),
                cmocka_unit_test(test_a_demoted_task_waits_a_bounded_time),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
