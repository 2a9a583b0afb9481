/* test-nodes-fence.c - the time rules of node liveness and fencing
 * (src/server/nodes-fence.h): the pause clock, the give-away and start
 * allowances, and which tasks fence. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "cluster/proto.h"
#include "server/nodes-fence.h"

static void test_pause_clock_counts_only_gaps_of_two_seconds_or_more(void **state) {
        (void)state;
        gp_pause_clock c = {0};
        assert_int_equal(gp_pause_clock_look(&c, 5000), 0); /* the first look sets the reference */
        for (int64_t t = 6000; t <= 20000; t += 1000)        /* a loop that looks every second */
                assert_int_equal(gp_pause_clock_look(&c, t), 0);
        assert_int_equal(c.paused_ms, 0);
        assert_int_equal(gp_pause_clock_look(&c, 21999), 0); /* 1.999 s: not a pause */
        assert_int_equal(gp_pause_clock_look(&c, 29999), 8000); /* SIGSTOP for 8 s */
        assert_int_equal(c.paused_ms, 8000);
        assert_int_equal(gp_pause_clock_look(&c, 30500), 0);
        assert_int_equal(gp_pause_clock_look(&c, 33000), 2500);
        assert_int_equal(c.paused_ms, 10500);
        /* a look from a thread that read the clock a bit earlier: no gap, no step back */
        assert_int_equal(gp_pause_clock_look(&c, 32900), 0);
        assert_int_equal(c.last_mono, 33000);
        assert_int_equal(c.paused_ms, 10500);
}

static void test_giveaway_waits_fence_kill_grace_and_margin(void **state) {
        (void)state;
        assert_int_equal(gp_fence_giveaway_ms(30, 10), 30000 + 10000 + GP_FENCE_MARGIN_MS);
        assert_int_equal(gp_fence_giveaway_ms(4, 0), 4000 + GP_FENCE_MARGIN_MS);
}

static void test_start_grace_covers_a_wait_for_a_frozen_server_and_the_retries(void **state) {
        (void)state;
        /* lease_s 2, node_timeout_s 4, heartbeat 2: an agent whose held sync went to a frozen leader
         * learns it after 2 + 15 s, then tries the next server: all before the new leader loses it */
        int64_t g = gp_nodes_start_grace_ms(2, 4);
        assert_int_equal(g, 2000 + GP_PROTO_ANSWER_SLACK_MS + GP_PROTO_RETRY_MAX_MS + 4000);
        assert_true(g > 2000 + 2000 + GP_PROTO_ANSWER_SLACK_MS + 4000);
}

static void test_batch_tasks_fence_unless_they_opt_out_leases_never(void **state) {
        (void)state;
        gp_task t;
        memset(&t, 0, sizeof(t));
        char spec[200];
        t.spec = spec;
        strcpy(spec, "{\"command\":[\"python3\",\"train.py\"]}");
        assert_true(gp_task_fences(&t));
        strcpy(spec, "{\"command\":[\"echo\",\"on_node_lost\"]}"); /* the word in an argument */
        assert_true(gp_task_fences(&t));
        strcpy(spec, "{\"command\":[\"x\"],\"on_node_lost\":\"requeue\"}");
        assert_false(gp_task_fences(&t));
        strcpy(spec, "{\"command\":[\"x\"],\"on_node_lost\":\"fence\"}");
        assert_true(gp_task_fences(&t));
        strcpy(spec, "{bad json on_node_lost");
        assert_true(gp_task_fences(&t)); /* unreadable: the safe side */
        t.spec = NULL;
        t.is_lease = true;
        assert_false(gp_task_fences(&t));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pause_clock_counts_only_gaps_of_two_seconds_or_more),
                cmocka_unit_test(test_giveaway_waits_fence_kill_grace_and_margin),
                cmocka_unit_test(test_start_grace_covers_a_wait_for_a_frozen_server_and_the_retries),
                cmocka_unit_test(test_batch_tasks_fence_unless_they_opt_out_leases_never),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
