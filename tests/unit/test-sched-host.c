/* test-sched-host.c - the scheduling core places by host CPUs and RAM
 * (gp_sched_node_set_host, gp_sched_req.cpus / host_memory_mb): a task
 * goes only to a node whose capacity less its running tasks' requests
 * covers it, waits with a reason naming the most free, starts when a
 * neighbour ends, is infeasible where no node could ever hold it; tasks
 * that ask for neither, and nodes of unknown capacity, are not limited. */
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
        add_node(s, "a", 4); /* GPUs 0..3 */
        add_node(s, "b", 4); /* GPUs 4..7 */
        assert_int_equal(gp_sched_node_set_host(s, "a", 8, 64000), 0);
        assert_int_equal(gp_sched_node_set_host(s, "b", 4, 16000), 0);
        return s;
}

static gp_sched_req req(int64_t id, int cpus, int64_t mem_mb) {
        return (gp_sched_req){.id = id,
                              .tenant = "t",
                              .priority = 5,
                              .gpus = 1,
                              .memory_mb = 1000,
                              .cpus = cpus,
                              .host_memory_mb = mem_mb};
}

static void reason_has(gp_sched *s, int64_t id, const char *want) {
        char why[256];
        assert_int_equal(gp_sched_task_reason(s, id, why, sizeof(why)), 0);
        if (!strstr(why, want))
                fail_msg("reason of %lld is '%s', wanted '%s' in it", (long long)id, why, want);
}

static uint32_t started_on(const run_out *o, int64_t id) {
        const gp_sched_decision *d = find(o, GP_DECIDE_START, id);
        if (!d)
                fail_msg("task %lld did not start", (long long)id);
        return d->gpus[0];
}

static void test_cpus_place_on_the_node_that_has_them_free_and_wait_with_the_most_free(void **st) {
        (void)st;
        gp_sched *s = mk();
        run_out o = {0};
        enq(s, req(1, 6, 0)); /* only a has 6 */
        run(s, 0, &o);
        assert_true(started_on(&o, 1) < 4);
        enq(s, req(2, 4, 0)); /* a has 2 free now: b */
        run(s, 1, &o);
        assert_true(started_on(&o, 2) >= 4);
        enq(s, req(3, 3, 0)); /* a 2, b 0 free: waits, GPUs or not */
        run(s, 2, &o);
        assert_null(find(&o, GP_DECIDE_START, 3));
        reason_has(s, 3, "waiting: needs 3 CPUs, most free on a node is 2");
        /* a task that asks for no CPUs still goes where GPUs are */
        enq(s, req(4, 0, 0));
        run(s, 3, &o);
        assert_non_null(find(&o, GP_DECIDE_START, 4));
        /* task 1 ends: its 6 CPUs are free again, and 3 takes a */
        assert_int_equal(gp_sched_remove(s, 1), 0);
        run(s, 4, &o);
        assert_true(started_on(&o, 3) < 4);
        free(o.d);
        gp_sched_free(s);
}

static void test_ram_is_placed_by_too(void **st) {
        (void)st;
        gp_sched *s = mk();
        run_out o = {0};
        enq(s, req(1, 0, 60000));
        run(s, 0, &o);
        assert_true(started_on(&o, 1) < 4);
        enq(s, req(2, 0, 12000)); /* a has 4000 left: b */
        run(s, 1, &o);
        assert_true(started_on(&o, 2) >= 4);
        enq(s, req(3, 1, 8000)); /* a 4000, b 4000 */
        run(s, 2, &o);
        assert_null(find(&o, GP_DECIDE_START, 3));
        reason_has(s, 3, "waiting: needs 8000 MB of RAM, most free on a node is 4000 MB");
        assert_int_equal(gp_sched_remove(s, 2), 0);
        run(s, 3, &o);
        assert_true(started_on(&o, 3) >= 4);
        free(o.d);
        gp_sched_free(s);
}

static void test_a_request_no_node_could_ever_hold_is_infeasible(void **st) {
        (void)st;
        gp_sched *s = mk();
        char why[200];
        gp_sched_req r = req(1, 16, 0);
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), -EINVAL);
        assert_string_equal(why, "no node has 16 CPUs (most on a node: 8)");
        r = req(2, 2, 100000);
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), -EINVAL);
        assert_string_equal(why, "no node has 100000 MB of RAM (most on a node: 64000 MB)");
        r = req(3, 8, 64000);
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), 0);
        /* a node of unknown capacity (0) may hold anything */
        add_node(s, "c", 1);
        r = req(4, 16, 100000);
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), 0);
        run_out o = {0};
        enq(s, r);
        run(s, 0, &o);
        assert_int_equal(started_on(&o, 4), 8u);
        free(o.d);
        gp_sched_free(s);
}

static void test_set_host_checks_its_input(void **st) {
        (void)st;
        gp_sched *s = mk();
        assert_int_equal(gp_sched_node_set_host(s, "nope", 1, 1), -ENOENT);
        assert_int_equal(gp_sched_node_set_host(s, "a", -1, 1), -EINVAL);
        assert_int_equal(gp_sched_node_set_host(s, "a", GP_SCHED_MAX_CPUS + 1, 1), -EINVAL);
        assert_int_equal(gp_sched_node_set_host(s, "a", 1, -1), -EINVAL);
        gp_sched_req bad = req(1, -1, 0);
        assert_int_equal(gp_sched_enqueue(s, &bad), -EINVAL);
        bad = req(1, 0, -5);
        assert_int_equal(gp_sched_enqueue(s, &bad), -EINVAL);
        /* a running task's CPUs stay counted when the capacity changes */
        run_out o = {0};
        enq(s, req(2, 4, 0));
        run(s, 0, &o);
        uint32_t g = started_on(&o, 2);
        const char *node = g < 4 ? "a" : "b";
        assert_int_equal(gp_sched_node_set_host(s, node, 4, 64000), 0);
        assert_int_equal(gp_sched_node_set_host(s, g < 4 ? "b" : "a", 4, 64000), 0);
        enq(s, req(3, 4, 0)); /* only the other node */
        run(s, 1, &o);
        assert_true((started_on(&o, 3) < 4) != (g < 4));
        enq(s, req(4, 1, 0)); /* both full */
        run(s, 2, &o);
        reason_has(s, 4, "needs 1 CPUs, most free on a node is 0");
        free(o.d);
        gp_sched_free(s);
}

/* An elastic task that holds every CPU of its node still grows onto the
 * node's idle GPUs: its CPUs are counted once, not again per GPU. */
static void test_an_elastic_task_with_all_the_cpus_still_grows(void **st) {
        (void)st;
        gp_sched *s = mk();
        run_out o = {0};
        gp_sched_req r = {.id = 1,
                          .tenant = "t",
                          .priority = 5,
                          .gpus = 1,
                          .elastic_max_gpus = 4,
                          .cpus = 4,
                          .host_memory_mb = 16000,
                          .node_selector = "gpupool/node=b"};
        assert_int_equal(gp_sched_node_set_labels(s, "b", "gpupool/node=b"), 0);
        enq(s, r);
        run(s, 0, &o);
        assert_non_null(find(&o, GP_DECIDE_START, 1));
        const gp_sched_decision *d = find(&o, GP_DECIDE_RESIZE, 1);
        assert_non_null(d);
        assert_int_equal(d->n_gpus, 4);
        enq(s, req(2, 1, 0)); /* b's CPUs are all held: a */
        run(s, 1, &o);
        assert_true(started_on(&o, 2) < 4);
        free(o.d);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cpus_place_on_the_node_that_has_them_free_and_wait_with_the_most_free),
                cmocka_unit_test(test_ram_is_placed_by_too),
                cmocka_unit_test(test_a_request_no_node_could_ever_hold_is_infeasible),
                cmocka_unit_test(test_set_host_checks_its_input),
                cmocka_unit_test(test_an_elastic_task_with_all_the_cpus_still_grows),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
