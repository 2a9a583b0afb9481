/* test-reason-code.c - the server's reasons read back as a code and
 * arguments (src/server/reason-code.c): the texts the server writes get
 * their code and arguments, a reason inside another one is read too, the
 * cancel notice as base/notice.c words it, and what matches no template
 * (or is too long, or not UTF-8) gets no code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/notice.h"
#include "core/task.h"
#include "server/reason-code.h"

/* code and args of text, args joined with '|' (a nested one as CODE(ARGS)) */
static void say(const json_t *o, char *buf, size_t size) {
        size_t off = strlen(buf);
        snprintf(buf + off, size - off, "%s(", json_string_value(json_object_get(o, "code")));
        const json_t *a = json_object_get(o, "args");
        for (size_t i = 0; i < json_array_size(a); i++) {
                const json_t *v = json_array_get(a, i);
                off = strlen(buf);
                if (i)
                        snprintf(buf + off, size - off, "|");
                if (json_is_object(v)) {
                        say(v, buf, size);
                } else {
                        off = strlen(buf);
                        snprintf(buf + off, size - off, "%s", json_string_value(v));
                }
        }
        off = strlen(buf);
        snprintf(buf + off, size - off, ")");
}

static void expect(const char *text, const char *want) {
        json_t *o = gp_reason_code(text);
        if (!o)
                fail_msg("\"%s\": no code, want %s", text, want);
        char got[1024] = "";
        say(o, got, sizeof(got));
        json_decref(o);
        if (strcmp(got, want))
                fail_msg("\"%s\": got %s, want %s", text, got, want);
}

static void test_how_a_task_ended_gets_its_code_and_arguments(void **state) {
        (void)state;
        expect("exited with code 2", "exited(2)");
        expect("killed by signal 9", "killed_signal(9)");
        expect("timed out after 3600 s", "timed_out(3600)");
        expect("cancelled by request", "cancelled_request()");
        expect("cancelled", "cancelled()");
        expect("preempted", "preempted()");
        expect("preempted; exited with code 0 within its notice (USR1)", "notice_exit(preempted()|0|USR1)");
        expect("cannot enter workdir /home/ann/x: Permission denied", "workdir(/home/ann/x|Permission denied)");
        expect("cannot enter workdir /srv/w as run_as: No such file or directory",
               "workdir_run_as(/srv/w|No such file or directory)");
        expect("cannot run train.py: No such file or directory", "cannot_run(train.py|No such file or directory)");
        expect("released by the holder with exit code 3 after it was preempted", "released_exit_preempted(3)");
        expect("released by the holder with exit code 3", "released_exit(3)");
        expect("released by the holder", "released()");
        expect("lease expired: no heartbeat for 60 s", "lease_expired(60)");
        expect("waited longer than queue_timeout_s (600 s)", "queue_timeout(600)");
        expect("started by backfill", "backfill()");
        expect("fenced: its node lost contact with the server", "fenced()");
        expect("its supervisor ended without a result", "no_result()"); /* an agent's */
}

static void test_a_reason_inside_another_is_read_too(void **state) {
        (void)state;
        expect("requeued (retry 1 of 3): node gpu-7 lost contact with the server; its run was fenced",
               "requeued(1|3|node_fenced(gpu-7))");
        expect("requeued (retry 2 of 2): GPU local:3 failed: Xid 79", "requeued(2|2|gpu_failed_why(local|3|Xid 79))");
        expect("stopping: memory_exceeded: used 9000 MB of 8000 on one of its GPUs",
               "stopping(memory_exceeded(9000|8000))");
        expect("requeued (retry 1 of 2): gpu_out_of_memory: its output says \"CUDA out of memory\" (exited with code "
               "1); it asks 12000 MB now (was 8000)",
               "requeued(1|2|oom_more(gpu_oom(CUDA out of memory|exited with code 1)|12000|8000))");
        expect("preempted (2 times): its GPUs went to a more urgent task or back to their guarantee",
               "preempted_gpus(2|s)");
        expect("preempted (1 time): the lease was lost after the 30 s grace period", "preempted_lease(1||30)");
        /* what the server cannot read as a reason stays text inside it */
        expect("stopping: something new", "stopping(something new)");
}

static void test_the_cancel_notice_as_notice_c_words_it(void **state) {
        (void)state;
        char how[GP_REASON_MAX], text[GP_REASON_MAX + 16];
        gp_notice_describe("{\"signal\":\"USR1@90\"}", 300, 10, how, sizeof(how));
        snprintf(text, sizeof(text), "cancelling: %s", how);
        expect(text, "cancelling_notice(USR1|90|10)");
        gp_notice_describe(NULL, 300, 10, how, sizeof(how));
        snprintf(text, sizeof(text), "cancelling: %s", how);
        expect(text, "cancelling(10)");
}

static void test_a_note_after_a_queue_reason_gets_its_code(void **state) {
        (void)state;
        json_t *d = json_object();
        gp_reason_code_note(d, " (time rule night in force); requeued (retry 1 of 3): node b was removed from the pool");
        json_t *n = json_object_get(d, "note_reason");
        assert_non_null(n);
        assert_string_equal(json_string_value(json_object_get(n, "code")), "requeued");
        assert_string_equal(json_string_value(json_object_get(n, "text")),
                            "requeued (retry 1 of 3): node b was removed from the pool");
        json_t *d2 = json_object();
        gp_reason_code_note(d2, " (time rule night in force)");
        gp_reason_code_note(d2, "; whatever comes");
        gp_reason_code_note(d2, NULL);
        assert_int_equal(json_object_size(d2), 0);
        json_decref(d);
        json_decref(d2);
}

static void test_a_task_waiting_for_the_pool_to_grow_gets_its_code(void **state) {
        (void)state;
        expect("no node in the pool can hold it now (no node has 8 GPUs that fit (most on one node: 4)); it waits for "
               "one to join: a join token is live",
               "pool_may_grow(no_node_fits(8|4)|grow_token())");
        expect("no node in the pool can hold it now (no GPU matches gpu_model '*A100*'); it waits for one to join: "
               "node gpu-3 is lost and may come back",
               "pool_may_grow(no_model(*A100*)|grow_node_lost(gpu-3))");
        expect("needs 3 whole nodes of 8 GPUs, 1 exists", "too_few_nodes(3|8|1|s)");
        const char *core = "no node in the pool can hold it now (the pool has no GPUs); it waits for one to join: a "
                           "join token is live";
        char shown[GP_REASON_MAX * 2];
        snprintf(shown, sizeof(shown), "%s; requeued (retry 1 of 2): node n1 lost its run", core);
        json_t *o = gp_reason_code_queued(core, shown);
        assert_non_null(o);
        assert_string_equal(json_string_value(json_object_get(o, "code")), "pool_may_grow");
        assert_string_equal(json_string_value(json_object_get(o, "note")), "; requeued (retry 1 of 2): node n1 lost its run");
        char got[512] = "";
        say(json_object_get(o, "note_reason"), got, sizeof(got));
        assert_string_equal(got, "requeued(1|2|node_lost_run(n1))");
        json_decref(o);
        assert_null(gp_reason_code_queued(core, "something else"));
        assert_null(gp_reason_code_queued("", shown));
}

static void test_what_matches_nothing_has_no_code(void **state) {
        (void)state;
        assert_null(gp_reason_code(NULL));
        assert_null(gp_reason_code(""));
        assert_null(gp_reason_code("exited with code 2 and then some"));
        assert_null(gp_reason_code("the dog ate it"));
        assert_null(gp_reason_code("cancelled by request "));
        char big[GP_REASON_MAX + 40];
        memset(big, 'x', sizeof(big));
        memcpy(big, "cannot run ", 11);
        memcpy(big + sizeof(big) - 8, ": nope", 7);
        assert_null(gp_reason_code(big)); /* longer than any reason the server keeps */
        assert_null(gp_reason_code("cannot run \xe4\xb8: x")); /* an argument that is not UTF-8 */
        assert_null(gp_reason_code("stopping: cannot run \xe4\xb8: x")); /* inside another reason too */
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_how_a_task_ended_gets_its_code_and_arguments),
                cmocka_unit_test(test_a_reason_inside_another_is_read_too),
                cmocka_unit_test(test_the_cancel_notice_as_notice_c_words_it),
                cmocka_unit_test(test_a_note_after_a_queue_reason_gets_its_code),
                cmocka_unit_test(test_a_task_waiting_for_the_pool_to_grow_gets_its_code),
                cmocka_unit_test(test_what_matches_nothing_has_no_code),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
