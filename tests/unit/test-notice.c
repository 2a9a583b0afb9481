/* test-notice.c - a task's notice "[B:]SIG@SECS" (base/notice.h): parsing,
 * the API's object form, the canonical text, the spec.json field and the
 * clamp to the server's max_notice_s. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <string.h>

#include "base/notice.h"

static void test_parses_names_numbers_and_the_b_prefix(void **state) {
        (void)state;
        gp_notice n;
        char err[200], txt[GP_NOTICE_TEXT_MAX];
        assert_int_equal(gp_notice_parse("SIGUSR1@120", &n, err, sizeof(err)), 0);
        assert_int_equal(n.signo, SIGUSR1);
        assert_int_equal(n.seconds, 120);
        assert_false(n.batch_only);
        assert_int_equal(gp_notice_format(&n, txt, sizeof(txt)), 0);
        assert_string_equal(txt, "SIGUSR1@120");
        assert_int_equal(gp_notice_parse("B:usr2@1", &n, err, sizeof(err)), 0);
        assert_int_equal(n.signo, SIGUSR2);
        assert_true(n.batch_only);
        assert_int_equal(gp_notice_format(&n, txt, sizeof(txt)), 0);
        assert_string_equal(txt, "B:SIGUSR2@1");
        assert_int_equal(gp_notice_parse("15@86400", &n, err, sizeof(err)), 0);
        assert_int_equal(n.signo, SIGTERM);
        assert_int_equal(n.seconds, 86400);
        /* a duration as everywhere else (units.h), canonical text in seconds */
        assert_int_equal(gp_notice_parse("USR1@2m", &n, err, sizeof(err)), 0);
        assert_int_equal(n.seconds, 120);
        assert_int_equal(gp_notice_format(&n, txt, sizeof(txt)), 0);
        assert_string_equal(txt, "SIGUSR1@120");
        assert_int_equal(gp_notice_parse("USR1@1:30", &n, err, sizeof(err)), 0);
        assert_int_equal(n.seconds, 90);
        assert_int_equal(gp_notice_parse("USR1@1d", &n, err, sizeof(err)), 0);
        assert_int_equal(n.seconds, 86400);
        /* the longest canonical text fits */
        n = (gp_notice){.signo = SIGWINCH, .seconds = 86400, .batch_only = true};
        assert_int_equal(gp_notice_format(&n, txt, sizeof(txt)), 0);
        assert_string_equal(txt, "B:SIGWINCH@86400");
        assert_int_equal(gp_notice_format(&n, txt, 8), -EINVAL);
}

static void refused(const char *s, const char *want) {
        gp_notice n = {.signo = 77}, before = n;
        char err[200] = "";
        if (gp_notice_parse(s, &n, err, sizeof(err)) != -EINVAL || !strstr(err, want))
                fail_msg("'%s': wanted -EINVAL with '%s', got '%s'", s, want, err);
        assert_int_equal(n.signo, before.signo); /* written only on success */
}

static void test_refuses_what_a_task_cannot_catch_and_out_of_range_seconds(void **state) {
        (void)state;
        refused("SIGKILL@10", "not a signal a task can catch");
        refused("KILL@10", "not a signal a task can catch");
        refused("SIGSTOP@10", "not a signal a task can catch");
        refused("9@10", "not a signal a task can catch");
        refused("0@10", "not a signal a task can catch");
        refused("32@10", "not a signal a task can catch");
        refused("SIGRTMIN@10", "not a signal a task can catch");
        refused("SIG@10", "not a signal a task can catch");
        refused("USR1@0", "1..86400 seconds");
        refused("USR1@86401", "1..86400 seconds");
        refused("USR1@-5", "not a number of seconds");
        refused("USR1@ 5", "not a number of seconds");
        refused("USR1@2x", "not a number of seconds or a duration");
        refused("USR1@2d", "1..86400 seconds");
        refused("USR1@99999999999999999999999", "1..86400 seconds");
        refused("USR1", "expected [B:]SIG@SECS");
        refused("@10", "expected [B:]SIG@SECS");
        refused("USR1@", "expected [B:]SIG@SECS");
        refused("B:", "expected [B:]SIG@SECS");
        refused("A:USR1@10", "not a signal");
        refused("USR1@10@2", "not a number of seconds");
        refused("SIGUSR1SIGUSR1SIGUSR1SIGUSR1SIGUSR1SIGUSR1@10", "not a signal");
}

static void test_the_api_object_form_and_the_spec_field_round_trip(void **state) {
        (void)state;
        gp_notice n;
        char err[200];
        json_t *v = json_pack("{s:s,s:i,s:b}", "signal", "SIGHUP", "seconds", 60, "batch_only", 1);
        assert_int_equal(gp_notice_from_json(v, &n, err, sizeof(err)), 0);
        assert_int_equal(n.signo, SIGHUP);
        assert_int_equal(n.seconds, 60);
        assert_true(n.batch_only);
        json_decref(v);
        v = json_pack("{s:i,s:i}", "signal", 10, "seconds", 5);
        assert_int_equal(gp_notice_from_json(v, &n, err, sizeof(err)), 0);
        assert_int_equal(n.signo, 10);
        assert_false(n.batch_only);
        json_decref(v);
        v = json_pack("{s:i,s:i}", "signal", 19, "seconds", 5); /* SIGSTOP */
        assert_int_equal(gp_notice_from_json(v, &n, err, sizeof(err)), -EINVAL);
        json_decref(v);
        v = json_pack("{s:s,s:s}", "signal", "USR1", "seconds", "5");
        assert_int_equal(gp_notice_from_json(v, &n, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "signal.seconds"));
        json_decref(v);
        v = json_integer(3);
        assert_int_equal(gp_notice_from_json(v, &n, err, sizeof(err)), -EINVAL);
        json_decref(v);
        /* spec.json */
        json_t *o = json_object();
        gp_notice in = {.signo = SIGUSR1, .seconds = 30, .batch_only = true}, out;
        assert_int_equal(gp_notice_spec_set(o, &in), 0);
        assert_int_equal(gp_notice_spec_get(o, &out), 0);
        assert_int_equal(out.signo, SIGUSR1);
        assert_int_equal(out.seconds, 30);
        assert_true(out.batch_only);
        json_object_set_new(json_object_get(o, "notice"), "seconds", json_integer(0));
        assert_int_equal(gp_notice_spec_get(o, &out), -EINVAL);
        json_decref(o);
        o = json_object();
        assert_int_equal(gp_notice_spec_set(o, &(gp_notice){0}), 0); /* none: nothing written */
        assert_int_equal(json_object_size(o), 0);
        assert_int_equal(gp_notice_spec_get(o, &out), 0);
        assert_int_equal(out.signo, 0);
        assert_int_equal(gp_notice_spec_set(o, &(gp_notice){.signo = SIGKILL, .seconds = 3}), -EINVAL);
        json_decref(o);
}

static void test_a_runs_notice_is_clamped_to_the_servers_maximum(void **state) {
        (void)state;
        json_t *spec = json_pack("{s:[s],s:s}", "command", "x", "signal", "B:SIGUSR1@600");
        gp_notice n = gp_notice_of_spec(spec, 300);
        assert_int_equal(n.signo, SIGUSR1);
        assert_int_equal(n.seconds, 300);
        assert_true(n.batch_only);
        n = gp_notice_of_spec(spec, 86400);
        assert_int_equal(n.seconds, 600);
        n = gp_notice_of_spec(spec, 0); /* notices off */
        assert_int_equal(n.signo, 0);
        json_object_set_new(spec, "signal", json_string("garbage"));
        assert_int_equal(gp_notice_of_spec(spec, 300).signo, 0);
        json_object_del(spec, "signal");
        assert_int_equal(gp_notice_of_spec(spec, 300).signo, 0);
        json_decref(spec);
        char how[200];
        gp_notice_describe("{\"command\":[\"x\"],\"signal\":\"SIGUSR1@600\"}", 120, 10, how, sizeof(how));
        assert_string_equal(how, "SIGUSR1 sent, SIGTERM after 120 s (its notice), SIGKILL 10 s later");
        gp_notice_describe("{\"command\":[\"x\"]}", 120, 10, how, sizeof(how));
        assert_string_equal(how, "SIGTERM sent, SIGKILL after 10 s");
        gp_notice_describe(NULL, 120, 3, how, sizeof(how));
        assert_string_equal(how, "SIGTERM sent, SIGKILL after 3 s");
        gp_notice_describe("{\"signal\":\"USR2@5\"}", 120, 3, how, 8); /* cut, terminated */
        assert_string_equal(how, "SIGUSR2");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parses_names_numbers_and_the_b_prefix),
                cmocka_unit_test(test_refuses_what_a_task_cannot_catch_and_out_of_range_seconds),
                cmocka_unit_test(test_the_api_object_form_and_the_spec_field_round_trip),
                cmocka_unit_test(test_a_runs_notice_is_clamped_to_the_servers_maximum),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
