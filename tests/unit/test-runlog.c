/* test-runlog.c - the pure parts of one log per run (src/server/runlog.h):
 * each run and rank gets its own file name, run 1 keeps the names logs had
 * before (so an old data dir's log is run 1's), and which run a task's
 * last one is in every state. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "server/runlog.h"

static void test_each_run_and_rank_has_its_own_name_and_run_1_keeps_the_old_ones(void **state) {
        (void)state;
        char b[GP_RUNLOG_NAME_MAX];
        assert_int_equal(gp_runlog_name(1, 0, b, sizeof(b)), 0);
        assert_string_equal(b, "log");
        assert_int_equal(gp_runlog_name(1, 3, b, sizeof(b)), 0);
        assert_string_equal(b, "log.r3");
        assert_int_equal(gp_runlog_name(2, 0, b, sizeof(b)), 0);
        assert_string_equal(b, "log.run2");
        assert_int_equal(gp_runlog_name(12, 1, b, sizeof(b)), 0);
        assert_string_equal(b, "log.run12.r1");
        /* the longest name fits the documented buffer */
        assert_int_equal(gp_runlog_name(INT64_MAX, GP_MAX_GPUS - 1, b, sizeof(b)), 0);
        assert_string_equal(b, "log.run9223372036854775807.r1023");
        /* out of range, or no room: -EINVAL */
        assert_int_equal(gp_runlog_name(0, 0, b, sizeof(b)), -EINVAL);
        assert_int_equal(gp_runlog_name(1, -1, b, sizeof(b)), -EINVAL);
        assert_int_equal(gp_runlog_name(1, GP_MAX_GPUS, b, sizeof(b)), -EINVAL);
        assert_int_equal(gp_runlog_name(2, 0, b, 8), -EINVAL);
}

static void test_last_run_is_the_last_start_in_every_state(void **state) {
        (void)state;
        gp_task t;
        memset(&t, 0, sizeof(t));
        t.state = GP_TASK_QUEUED; /* never started */
        assert_int_equal(gp_runlog_last_run(&t), 0);
        t.state = GP_TASK_CANCELLED; /* cancelled before its start */
        assert_int_equal(gp_runlog_last_run(&t), 0);
        t.state = GP_TASK_RUNNING;
        t.started_ms = 1000;
        assert_int_equal(gp_runlog_last_run(&t), 1);
        /* requeued after a node loss: run 1 was the last until run 2 starts */
        t.state = GP_TASK_QUEUED;
        t.retries = 1;
        t.started_ms = 0;
        assert_int_equal(gp_runlog_last_run(&t), 1);
        t.state = GP_TASK_RUNNING;
        t.started_ms = 2000;
        assert_int_equal(gp_runlog_last_run(&t), 2);
        /* then preempted, and cancelled while it waits: run 2 stays the last */
        t.preempt_count = 1;
        t.state = GP_TASK_CANCELLED;
        t.started_ms = 0;
        assert_int_equal(gp_runlog_last_run(&t), 2);
        /* or it ran a third time and ended */
        t.state = GP_TASK_SUCCEEDED;
        t.started_ms = 3000;
        assert_int_equal(gp_runlog_last_run(&t), 3);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_each_run_and_rank_has_its_own_name_and_run_1_keeps_the_old_ones),
                cmocka_unit_test(test_last_run_is_the_last_start_in_every_state),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
