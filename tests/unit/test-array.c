/* test-array.c - job arrays: the spec parser and formatter (core/array.h)
 * and the %N throttle of the scheduling core (core/sched.h "Job arrays"). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/array.h"
#include "core/sched.h"

#include "sched-fixture.h"

static gp_array_spec parse_ok(const char *s, size_t max) {
        gp_array_spec a;
        char err[160];
        int rc = gp_array_spec_parse(s, strlen(s), max, &a, err, sizeof(err));
        if (rc != 0)
                print_error("'%s': %d %s\n", s, rc, err);
        assert_int_equal(rc, 0);
        return a;
}

static void parse_bad(const char *s, size_t max, int want, const char *msg_part) {
        gp_array_spec a = {0};
        char err[160];
        assert_int_equal(gp_array_spec_parse(s, strlen(s), max, &a, err, sizeof(err)), want);
        assert_null(a.idx);
        if (msg_part && !strstr(err, msg_part)) {
                print_error("'%s': message '%s' lacks '%s'\n", s, err, msg_part);
                fail();
        }
}

static void test_array_spec_takes_slurm_forms(void **state) {
        (void)state;
        gp_array_spec a = parse_ok("0-1999", 100000);
        assert_int_equal(a.n, 2000);
        assert_int_equal(a.idx[0], 0);
        assert_int_equal(a.idx[1999], 1999);
        assert_int_equal(a.limit, 0);
        gp_array_spec_done(&a);
        assert_null(a.idx);

        a = parse_ok("1,3,5-9", 100);
        int32_t want[] = {1, 3, 5, 6, 7, 8, 9};
        assert_int_equal(a.n, 7);
        assert_memory_equal(a.idx, want, sizeof(want));
        gp_array_spec_done(&a);

        a = parse_ok("0-15:4%2", 100);
        int32_t want2[] = {0, 4, 8, 12};
        assert_int_equal(a.n, 4);
        assert_memory_equal(a.idx, want2, sizeof(want2));
        assert_int_equal(a.limit, 2);
        gp_array_spec_done(&a);

        /* indices given twice count once, out of order comes sorted */
        a = parse_ok("9,1-3,2,7%50", 100);
        int32_t want3[] = {1, 2, 3, 7, 9};
        assert_int_equal(a.n, 5);
        assert_memory_equal(a.idx, want3, sizeof(want3));
        assert_int_equal(a.limit, 50);
        gp_array_spec_done(&a);

        a = parse_ok("7", 1);
        assert_int_equal(a.n, 1);
        assert_int_equal(a.idx[0], 7);
        gp_array_spec_done(&a);
        gp_array_spec_done(NULL);
}

static void test_array_spec_refuses_bad_specs_with_a_reason(void **state) {
        (void)state;
        parse_bad("", 100, -EINVAL, "empty");
        parse_bad("5-1", 100, -EINVAL, "backwards");
        parse_bad("0-15:0", 100, -EINVAL, "step");
        parse_bad("0-9%0", 100, -EINVAL, "%N");
        parse_bad("0-9%", 100, -EINVAL, "%N");
        parse_bad("0-9%2%3", 100, -EINVAL, "%N");
        parse_bad("%5", 100, -EINVAL, "bad item");
        parse_bad("1,,2", 100, -EINVAL, "bad item");
        parse_bad("1,", 100, -EINVAL, "trailing");
        parse_bad("-3", 100, -EINVAL, "bad item");
        parse_bad("a-b", 100, -EINVAL, "only digits");
        parse_bad("1 2", 100, -EINVAL, "only digits");
        parse_bad("0-10000000", 100000, -EINVAL, "0..9999999");
        parse_bad("123456789", 100, -EINVAL, "bad item");
        /* the count is bounded before anything is allocated */
        parse_bad("0-100", 100, -E2BIG, "more than 100");
        parse_bad("0-9999999", 100000, -E2BIG, "more than 100000");
        parse_bad("0-50,0-50", 100, -E2BIG, NULL); /* counted before duplicates go */
        char big[GP_ARRAY_SPEC_MAX + 2];
        memset(big, '1', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        parse_bad(big, 100, -EINVAL, "longer");
}

static void test_array_spec_format_gives_the_compact_form_back(void **state) {
        (void)state;
        const char *cases[][2] = {
                {"0-1999%50", "0-1999%50"}, {"1,3", "1,3"},         {"0-15:4", "0-12:4"},
                {"1,2", "1,2"},           {"7", "7"},             {"0,2,4,5", "0-4:2,5"},
                {"1,3,5-9", "1-5:2,6-9"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                gp_array_spec a = parse_ok(cases[i][0], 10000);
                char buf[64];
                size_t need = gp_array_spec_format(a.idx, a.n, a.limit, buf, sizeof(buf));
                assert_string_equal(buf, cases[i][1]);
                assert_int_equal(need, strlen(cases[i][1]));
                gp_array_spec_done(&a);
        }
        /* too small a buffer: cut with "...", the length needed returned */
        gp_array_spec a = parse_ok("1,3,5,7,9,11,13", 100);
        char small[8];
        size_t need = gp_array_spec_format(a.idx, a.n, 0, small, sizeof(small));
        assert_int_equal(need, strlen("1-13:2"));
        gp_array_spec_done(&a);
        a = parse_ok("1,4,6,9,12,20", 100);
        need = gp_array_spec_format(a.idx, a.n, 0, small, sizeof(small));
        assert_true(need >= sizeof(small));
        assert_string_equal(small + strlen(small) - 3, "...");
        gp_array_spec_done(&a);
}

/* ---- the throttle ---- */

static gp_sched *new_sched(int gpus) {
        gp_sched_config cfg;
        gp_sched_config_defaults(&cfg);
        gp_sched *s;
        assert_int_equal(gp_sched_new(&cfg, &s), 0);
        add_node(s, "n", gpus);
        return s;
}

static gp_sched_req member(int64_t id, int64_t array_id, int limit) {
        return (gp_sched_req){.id = id, .tenant = "t", .priority = 5, .gpus = 1, .submit_ms = id,
                              .array_id = array_id, .array_limit = limit};
}

static int running_of(gp_sched *s, int64_t from, int64_t to) {
        int n = 0;
        for (int64_t id = from; id <= to; id++) {
                gp_sched_task_view v;
                if (gp_sched_task_get(s, id, &v) == 0 && v.running)
                        n++;
        }
        return n;
}

/* ID and ID_INDEX, as the CLI and the runs API take them */
static void test_array_ref_reads_an_id_or_an_element(void **state) {
        (void)state;
        int64_t id = 99, ix = 99;
        assert_int_equal(gp_array_ref_parse("12", &id, &ix), 0);
        assert_int_equal(id, 12);
        assert_int_equal(ix, -1);
        assert_int_equal(gp_array_ref_parse("12_7", &id, &ix), 0);
        assert_int_equal(id, 12);
        assert_int_equal(ix, 7);
        assert_int_equal(gp_array_ref_parse("1_9999999", &id, &ix), 0);
        assert_int_equal(ix, GP_ARRAY_INDEX_MAX);
        static const char *const bad[] = {"",    "0",     "-1",   "x",          "_3",          "12_",
                                          "1_-1", "1_10000000", "12_3_4", "12,13", "99999999999999999999",
                                          "123456789012345678901234_1"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                id = ix = 99;
                assert_int_equal(gp_array_ref_parse(bad[i], &id, &ix), -EINVAL);
                assert_int_equal(id, 99); /* nothing written */
                assert_int_equal(ix, 99);
        }
}

static void test_array_limit_caps_running_members_and_says_why(void **state) {
        (void)state;
        gp_sched *s = new_sched(8);
        run_out o = {0};
        for (int64_t id = 10; id < 16; id++)
                enq(s, member(id, 10, 2));
        assert_int_equal(run(s, 0, &o), 2); /* 8 GPUs free, 2 may run */
        assert_non_null(find(&o, GP_DECIDE_START, 10));
        assert_non_null(find(&o, GP_DECIDE_START, 11));
        char why[160];
        assert_int_equal(gp_sched_task_reason(s, 12, why, sizeof(why)), 0);
        assert_string_equal(why, "array 10 runs 2 at once (%2)");
        assert_int_equal(run(s, 1, &o), 0);
        /* one ends: exactly one more starts, the next by id */
        assert_int_equal(gp_sched_remove_at(s, 10, 2), 0);
        assert_int_equal(run(s, 2, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 12));
        assert_int_equal(running_of(s, 10, 15), 2);
        /* a requeued (preempted) member frees its slot too */
        assert_int_equal(gp_sched_requeue_at(s, 11, 3), 0);
        assert_int_equal(run(s, 3, &o), 1);
        assert_int_equal(running_of(s, 10, 15), 2);
        free(o.d);
        gp_sched_free(s);
}

static void test_array_limit_holds_only_its_array(void **state) {
        (void)state;
        gp_sched *s = new_sched(4);
        run_out o = {0};
        for (int64_t id = 1; id <= 5; id++)
                enq(s, member(id, 1, 1));       /* array 1: %1 */
        for (int64_t id = 6; id <= 7; id++)
                enq(s, member(id, 6, 0));       /* array 6: no cap */
        enq(s, member(8, 0, 0));                /* a plain task of the same tenant */
        assert_int_equal(run(s, 0, &o), 4);
        assert_non_null(find(&o, GP_DECIDE_START, 1));
        assert_null(find(&o, GP_DECIDE_START, 2));
        assert_non_null(find(&o, GP_DECIDE_START, 6));
        assert_non_null(find(&o, GP_DECIDE_START, 7));
        assert_non_null(find(&o, GP_DECIDE_START, 8));
        char why[160];
        gp_sched_task_reason(s, 5, why, sizeof(why));
        assert_string_equal(why, "array 1 runs 1 at once (%1)");
        free(o.d);
        gp_sched_free(s);
}

static void test_array_limit_counts_restored_members(void **state) {
        (void)state;
        /* after a restart: two members were running, the rest queued */
        gp_sched *s = new_sched(8);
        run_out o = {0};
        for (int i = 0; i < 2; i++) {
                gp_sched_req r = member(20 + i, 20, 2);
                uint32_t g = (uint32_t)i;
                assert_int_equal(gp_sched_restore_running(s, &r, &g, 1, 0), 0);
        }
        for (int64_t id = 22; id < 26; id++) {
                gp_sched_req r = member(id, 20, 2);
                r.readmit = true;
                enq(s, r);
        }
        assert_int_equal(run(s, 1, &o), 0); /* the throttle still holds */
        assert_int_equal(gp_sched_remove_at(s, 21, 2), 0);
        assert_int_equal(run(s, 2, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 22));
        /* the array's state goes with its last member */
        for (int64_t id = 20; id < 26; id++)
                if (id != 21)
                        assert_int_equal(gp_sched_remove(s, id), 0);
        enq(s, member(30, 20, 1)); /* a new array reusing the id starts afresh */
        assert_int_equal(run(s, 3, &o), 1);
        free(o.d);
        gp_sched_free(s);
}

static void test_enqueue_room_is_all_or_nothing(void **state) {
        (void)state;
        gp_sched_config cfg;
        gp_sched_config_defaults(&cfg);
        cfg.max_queue_depth = 10;
        gp_sched *s;
        assert_int_equal(gp_sched_new(&cfg, &s), 0);
        add_node(s, "n", 1);
        gp_sched_tenant_cfg tc = {.weight = 1, .quota = {.max_queued = 5}};
        assert_int_equal(gp_sched_tenant_set(s, "t", &tc), 0);
        assert_int_equal(gp_sched_enqueue_room(s, "t", 5, 5), 0);
        assert_int_equal(gp_sched_enqueue_room(s, "t", 5, 6), -EDQUOT);
        assert_int_equal(gp_sched_enqueue_room(s, "other", 5, 10), 0);
        assert_int_equal(gp_sched_enqueue_room(s, "other", 5, 11), -GP_EQUEUEFULL);
        for (int64_t id = 1; id <= 3; id++)
                enq(s, member(id, 0, 0));
        assert_int_equal(gp_sched_enqueue_room(s, "t", 5, 2), 0);
        assert_int_equal(gp_sched_enqueue_room(s, "t", 5, 3), -EDQUOT);
        assert_int_equal(gp_sched_enqueue_room(s, "t", 10, 1), -EINVAL);
        gp_sched_req bad = member(9, -1, 0);
        assert_int_equal(gp_sched_enqueue(s, &bad), -EINVAL);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_array_spec_takes_slurm_forms),
                cmocka_unit_test(test_array_spec_refuses_bad_specs_with_a_reason),
                cmocka_unit_test(test_array_spec_format_gives_the_compact_form_back),
                cmocka_unit_test(test_array_ref_reads_an_id_or_an_element),
                cmocka_unit_test(test_array_limit_caps_running_members_and_says_why),
                cmocka_unit_test(test_array_limit_holds_only_its_array),
                cmocka_unit_test(test_array_limit_counts_restored_members),
                cmocka_unit_test(test_enqueue_room_is_all_or_nothing),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
