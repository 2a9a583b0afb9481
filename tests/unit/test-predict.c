/* test-predict.c - the run-time predictor (core/predict.c): estimates from
 * the nearest group with history, fallback to wider groups, the time limit
 * as an upper bound, recency, confidence, and the memory bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/predict.h"

static gp_pred *mk(size_t n) {
        gp_pred *p = NULL;
        assert_int_equal(gp_pred_new(n, &p), 0);
        return p;
}

static void test_nothing_known_gives_no_estimate(void **st) {
        (void)st;
        gp_pred *p = mk(1024);
        gp_pred_key k = {.tenant = "a", .user = "u", .name = "train", .gpus = 1};
        gp_pred_est e;
        assert_int_equal(gp_pred_estimate(p, &k, 0, &e), -1);
        assert_int_equal(e.ms, 0);
        assert_int_equal(e.level, -1);
        gp_pred_free(p);
        gp_pred *q = NULL;
        assert_int_equal(gp_pred_new(0, &q), -EINVAL);
}

static void test_the_same_job_again_is_estimated_from_its_own_runs(void **st) {
        (void)st;
        gp_pred *p = mk(1024);
        gp_pred_key k = {.tenant = "a", .user = "u", .name = "train", .gpus = 2, .cmd_hash = 42};
        gp_pred_key other = {.tenant = "a", .user = "v", .name = "eval", .gpus = 2, .cmd_hash = 7};
        for (int i = 0; i < 5; i++) {
                gp_pred_observe(p, &k, 600000);
                gp_pred_observe(p, &other, 10000);
        }
        gp_pred_est e;
        assert_int_equal(gp_pred_estimate(p, &k, 0, &e), GP_PRED_TASK);
        assert_true(e.ms > 590000 && e.ms < 610000);
        assert_int_equal(e.n, 5);
        assert_int_equal(gp_pred_estimate(p, &other, 0, &e), GP_PRED_TASK);
        assert_true(e.ms > 9900 && e.ms < 10100);
        gp_pred_free(p);
}

static void test_a_new_job_falls_back_to_wider_groups(void **st) {
        (void)st;
        gp_pred *p = mk(1024);
        gp_pred_key k = {.tenant = "a", .user = "u", .name = "train", .gpus = 1, .cmd_hash = 1};
        for (int i = 0; i < 3; i++)
                gp_pred_observe(p, &k, 3600000);
        gp_pred_est e;
        /* same user and name, another command: the name's group */
        gp_pred_key k2 = k;
        k2.cmd_hash = 2;
        assert_int_equal(gp_pred_estimate(p, &k2, 0, &e), GP_PRED_NAME);
        /* another name of the same user and size: the user's group */
        k2.name = "other";
        assert_int_equal(gp_pred_estimate(p, &k2, 0, &e), GP_PRED_USER);
        /* another user of the tenant */
        k2.user = "w";
        assert_int_equal(gp_pred_estimate(p, &k2, 0, &e), GP_PRED_TENANT);
        /* another tenant, same GPU count: every job of that size */
        k2.tenant = "b";
        assert_int_equal(gp_pred_estimate(p, &k2, 0, &e), GP_PRED_SIZE);
        assert_true(e.ms > 3500000 && e.ms < 3700000);
        /* another size: nothing */
        k2.gpus = 8;
        assert_int_equal(gp_pred_estimate(p, &k2, 0, &e), -1);
        /* nearer groups are surer */
        gp_pred_est near, far;
        gp_pred_estimate(p, &k, 0, &near);
        k2 = k;
        k2.tenant = "b";
        gp_pred_estimate(p, &k2, 0, &far);
        assert_true(near.confidence > far.confidence);
        gp_pred_free(p);
}

static void test_a_time_limit_caps_the_estimate(void **st) {
        (void)st;
        gp_pred *p = mk(256);
        gp_pred_key k = {.tenant = "a", .gpus = 1};
        for (int i = 0; i < 4; i++)
                gp_pred_observe(p, &k, 7200000);
        gp_pred_est e;
        gp_pred_estimate(p, &k, 3600000, &e);
        assert_int_equal(e.ms, 3600000);
        gp_pred_estimate(p, &k, 0, &e);
        assert_true(e.ms > 7000000);
        gp_pred_free(p);
}

static void test_recent_runs_weigh_more_and_confidence_grows_with_history(void **st) {
        (void)st;
        gp_pred *p = mk(256);
        gp_pred_key k = {.tenant = "a", .user = "u", .name = "n", .gpus = 1};
        gp_pred_est e1, e2, e3;
        gp_pred_observe(p, &k, 1000);
        gp_pred_observe(p, &k, 1000);
        gp_pred_estimate(p, &k, 0, &e1);
        for (int i = 0; i < 20; i++)
                gp_pred_observe(p, &k, 1000);
        gp_pred_estimate(p, &k, 0, &e2);
        assert_true(e2.confidence > e1.confidence);
        for (int i = 0; i < 200; i++)
                gp_pred_observe(p, &k, 100000);
        gp_pred_estimate(p, &k, 0, &e3);
        assert_true(e3.ms > 90000); /* followed the change, not the average of all 222 runs */
        gp_pred_free(p);
}

static void test_memory_is_bounded_by_max_entries(void **st) {
        (void)st;
        gp_pred *p = mk(100); /* 128 slots */
        char name[32];
        for (int i = 0; i < 20000; i++) {
                snprintf(name, sizeof(name), "job%d", i);
                gp_pred_key k = {.tenant = "t", .user = "u", .name = name, .gpus = 1 + i % 4, .cmd_hash = (uint64_t)i};
                gp_pred_observe(p, &k, 1000 + i);
        }
        assert_true(gp_pred_groups(p) <= 128);
        /* the groups with the most history survive: every 1-GPU job */
        gp_pred_key any = {.tenant = "x", .gpus = 1};
        gp_pred_est e;
        assert_int_equal(gp_pred_estimate(p, &any, 0, &e), GP_PRED_SIZE);
        assert_true(e.n > 1000);
        gp_pred_free(p);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_nothing_known_gives_no_estimate),
                cmocka_unit_test(test_the_same_job_again_is_estimated_from_its_own_runs),
                cmocka_unit_test(test_a_new_job_falls_back_to_wider_groups),
                cmocka_unit_test(test_a_time_limit_caps_the_estimate),
                cmocka_unit_test(test_recent_runs_weigh_more_and_confidence_grows_with_history),
                cmocka_unit_test(test_memory_is_bounded_by_max_entries),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
