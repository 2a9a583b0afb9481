/* test-ident.c - unit tests of the node identity and message order rules
 * (src/cluster/ident.c): which seq is taken, which is a replay, which is
 * too far ahead; the stored floor; which join is taken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cluster/ident.h"

#define NOW 1732512345678001LL

static void test_seq_replay_ahead_and_ok(void **state) {
        (void)state;
        assert_int_equal(gp_ident_seq_check(NOW, NOW, NOW), GP_IDENT_SEQ_REPLAY);
        assert_int_equal(gp_ident_seq_check(NOW - 1, NOW, NOW), GP_IDENT_SEQ_REPLAY);
        assert_int_equal(gp_ident_seq_check(NOW + 1, NOW, NOW), GP_IDENT_SEQ_OK);
        assert_int_equal(gp_ident_seq_check(NOW + GP_IDENT_AHEAD_US, 0, NOW), GP_IDENT_SEQ_OK);
        assert_int_equal(gp_ident_seq_check(NOW + GP_IDENT_AHEAD_US + 1, 0, NOW), GP_IDENT_SEQ_AHEAD);
        assert_int_equal(gp_ident_seq_check(INT64_MAX, 0, NOW), GP_IDENT_SEQ_AHEAD);
        /* a replay is a replay whatever its distance */
        assert_int_equal(gp_ident_seq_check(INT64_MAX, INT64_MAX, NOW), GP_IDENT_SEQ_REPLAY);
}

static void test_floor_reaches_ahead_but_never_out_of_reach(void **state) {
        (void)state;
        /* an agent on time: ten minutes of room, so one store write per ten minutes */
        assert_int_equal(gp_ident_seq_floor(NOW, NOW), NOW + GP_IDENT_RESERVE_US);
        /* a seq near the edge: the floor stays where an agent that jumps above it is still taken */
        int64_t edge = NOW + GP_IDENT_AHEAD_US - 5;
        assert_int_equal(gp_ident_seq_floor(edge, NOW), NOW + GP_IDENT_AHEAD_US);
        assert_int_equal(gp_ident_seq_check(gp_ident_seq_floor(edge, NOW) + 1, gp_ident_seq_floor(edge, NOW),
                                            NOW + 1),
                         GP_IDENT_SEQ_OK);
        /* never below the seq taken, never overflowing */
        assert_int_equal(gp_ident_seq_floor(INT64_MAX, NOW), INT64_MAX);
        assert_true(gp_ident_seq_floor(NOW + GP_IDENT_AHEAD_US, NOW) >= NOW + GP_IDENT_AHEAD_US);
}

static void test_join_rules(void **state) {
        (void)state;
        const char *m = "aa", *other = "bb";
        gp_ident_known none = {0};
        assert_int_equal(gp_ident_join_check(NULL, NOW, m, NOW), GP_IDENT_JOIN_OK);
        assert_int_equal(gp_ident_join_check(&none, NOW, m, NOW), GP_IDENT_JOIN_OK);
        assert_int_equal(gp_ident_join_check(&none, 0, m, NOW), GP_IDENT_JOIN_INCOMPLETE);
        assert_int_equal(gp_ident_join_check(&none, NOW, "", NOW), GP_IDENT_JOIN_INCOMPLETE);
        assert_int_equal(gp_ident_join_check(&none, NOW + GP_IDENT_AHEAD_US + 1, m, NOW), GP_IDENT_JOIN_AHEAD);
        gp_ident_known live = {.exists = true, .live = true, .join_seq = NOW, .machine = m};
        /* a replay: refused, live or not, same machine or not */
        assert_int_equal(gp_ident_join_check(&live, NOW, m, NOW), GP_IDENT_JOIN_REPLAY);
        gp_ident_known left = {.exists = true, .left = true, .join_seq = NOW, .machine = m};
        assert_int_equal(gp_ident_join_check(&left, NOW, other, NOW), GP_IDENT_JOIN_REPLAY);
        /* live: the same machine again is taken, another is not */
        assert_int_equal(gp_ident_join_check(&live, NOW + 1, m, NOW), GP_IDENT_JOIN_OK);
        assert_int_equal(gp_ident_join_check(&live, NOW + 1, other, NOW), GP_IDENT_JOIN_LIVE);
        gp_ident_known unknown_machine = {.exists = true, .live = true, .join_seq = 0, .machine = ""};
        assert_int_equal(gp_ident_join_check(&unknown_machine, NOW, m, NOW), GP_IDENT_JOIN_LIVE);
        /* lost (not live) or left: another machine may take the name */
        gp_ident_known lost = {.exists = true, .join_seq = NOW, .machine = m};
        assert_int_equal(gp_ident_join_check(&lost, NOW + 1, other, NOW), GP_IDENT_JOIN_OK);
        assert_int_equal(gp_ident_join_check(&left, NOW + 1, other, NOW), GP_IDENT_JOIN_OK);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_seq_replay_ahead_and_ok),
                cmocka_unit_test(test_floor_reaches_ahead_but_never_out_of_reach),
                cmocka_unit_test(test_join_rules),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
