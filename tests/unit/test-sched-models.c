/* test-sched-models.c - max_models_per_gpu in the scheduling core: a task
 * with a model is not placed on a GPU that already holds that many other
 * models, may always join a GPU holding its own model, waits with a reason
 * that names the rule, and starts once a model leaves; 0 means unlimited;
 * tasks without a model are not limited; the size memo of a run does not
 * carry one model's failure over to another. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/sched.h"
#include "sched-fixture.h"

static gp_sched *mk(int max_models) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.max_models_per_gpu = max_models;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        return s;
}

/* A 1 GB shared task of model m (NULL = none). */
static gp_sched_req req(int64_t id, const char *m) {
        return (gp_sched_req){.id = id, .tenant = "t", .priority = 1, .gpus = 1, .memory_mb = 1000, .model = m};
}

static void test_defaults_leave_models_unlimited_and_negative_is_rejected(void **st) {
        (void)st;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        assert_int_equal(c.max_models_per_gpu, 0);
        c.max_models_per_gpu = -1;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), -EINVAL);
}

static void test_model_waits_when_the_only_gpu_holds_max_other_models(void **st) {
        (void)st;
        gp_sched *s = mk(2);
        add_node(s, "n", 1);
        run_out o = {0};
        enq(s, req(1, "a"));
        enq(s, req(2, "b"));
        assert_int_equal(run(s, 0, &o), 2);
        enq(s, req(3, "c"));
        assert_int_equal(run(s, 1, &o), 0);
        char why[256];
        assert_int_equal(gp_sched_task_reason(s, 3, why, sizeof(why)), 0);
        assert_ptr_equal(strstr(why, "every GPU that fits holds 2 models (max_models_per_gpu)"), why);
        /* memory is plenty: only the model rule holds it back */
        gp_sched_gpu_view v;
        assert_int_equal(gp_sched_gpu_get(s, 0, &v), 0);
        assert_true(v.memory_usable_mb - v.memory_allocated_mb > 10000);
        /* model a leaves: c starts beside b */
        assert_int_equal(gp_sched_remove_at(s, 1, 2), 0);
        assert_int_equal(run(s, 2, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 3));
        const char *names[4];
        assert_int_equal(gp_sched_gpu_models(s, 0, names, 4), 2);
        free(o.d);
        gp_sched_free(s);
}

static void test_model_joins_a_full_gpu_that_holds_its_own_model(void **st) {
        (void)st;
        gp_sched *s = mk(2);
        add_node(s, "n", 1);
        run_out o = {0};
        enq(s, req(1, "a"));
        enq(s, req(2, "b"));
        enq(s, req(3, "b")); /* second replica of b: same model, allowed */
        assert_int_equal(run(s, 0, &o), 3);
        const char *names[4];
        assert_int_equal(gp_sched_gpu_models(s, 0, names, 4), 2);
        free(o.d);
        gp_sched_free(s);
}

static void test_model_goes_to_the_gpu_with_room_for_another_model(void **st) {
        (void)st;
        gp_sched *s = mk(1);
        add_node(s, "n", 2);
        run_out o = {0};
        enq(s, req(1, "a"));
        assert_int_equal(run(s, 0, &o), 1);
        uint32_t ga = o.d[0].gpus[0];
        /* shared tasks would pack beside a; with one model per GPU b takes the other */
        enq(s, req(2, "b"));
        assert_int_equal(run(s, 1, &o), 1);
        assert_int_not_equal(o.d[0].gpus[0], ga);
        /* a third model has no GPU; a task without a model still packs */
        enq(s, req(3, "c"));
        enq(s, req(4, NULL));
        assert_int_equal(run(s, 2, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 4));
        char why[256];
        assert_int_equal(gp_sched_task_reason(s, 3, why, sizeof(why)), 0);
        assert_ptr_equal(strstr(why, "every GPU that fits holds 1 models (max_models_per_gpu)"), why);
        free(o.d);
        gp_sched_free(s);
}

static void test_zero_means_unlimited_models(void **st) {
        (void)st;
        gp_sched *s = mk(0);
        add_node(s, "n", 1);
        run_out o = {0};
        char m[8][16];
        for (int i = 0; i < 8; i++) {
                snprintf(m[i], sizeof(m[i]), "m%d", i);
                enq(s, req(i + 1, m[i]));
        }
        assert_int_equal(run(s, 0, &o), 8);
        const char *names[8];
        assert_int_equal(gp_sched_gpu_models(s, 0, names, 8), 8);
        free(o.d);
        gp_sched_free(s);
}

static void test_a_blocked_model_does_not_block_the_same_size_of_a_loaded_model(void **st) {
        (void)st;
        /* one model per GPU, a on one and b on the other; c (blocked by the
         * rule) is first in line and reserves a GPU; d of model b, the same
         * size, must still start beside b in the same run: c's failure says
         * nothing about d */
        gp_sched *s = mk(1);
        add_node(s, "n", 2);
        run_out o = {0};
        enq(s, req(1, "a"));
        enq(s, req(2, "b"));
        assert_int_equal(run(s, 0, &o), 2);
        uint32_t gb = find(&o, GP_DECIDE_START, 2)->gpus[0];
        enq(s, req(3, "c"));
        enq(s, req(4, "b"));
        assert_int_equal(run(s, 1, &o), 1);
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 4);
        assert_non_null(d);
        assert_int_equal(d->gpus[0], gb);
        free(o.d);
        gp_sched_free(s);
}

static void test_memory_shortage_is_still_reported_as_memory(void **st) {
        (void)st;
        gp_sched *s = mk(2);
        add_node(s, "n", 1);
        run_out o = {0};
        gp_sched_req big = req(1, "a");
        big.memory_mb = 20000;
        enq(s, big);
        assert_int_equal(run(s, 0, &o), 1);
        gp_sched_req r = req(2, "b");
        r.memory_mb = 5000;
        enq(s, r);
        assert_int_equal(run(s, 1, &o), 0);
        char why[256];
        assert_int_equal(gp_sched_task_reason(s, 2, why, sizeof(why)), 0);
        assert_non_null(strstr(why, "MB free"));
        free(o.d);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults_leave_models_unlimited_and_negative_is_rejected),
                cmocka_unit_test(test_model_waits_when_the_only_gpu_holds_max_other_models),
                cmocka_unit_test(test_model_joins_a_full_gpu_that_holds_its_own_model),
                cmocka_unit_test(test_model_goes_to_the_gpu_with_room_for_another_model),
                cmocka_unit_test(test_zero_means_unlimited_models),
                cmocka_unit_test(test_a_blocked_model_does_not_block_the_same_size_of_a_loaded_model),
                cmocka_unit_test(test_memory_shortage_is_still_reported_as_memory),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
