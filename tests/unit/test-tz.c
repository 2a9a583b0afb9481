/* test-tz.c - the TZif reader against known offsets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>

#include "base/tz.h"

static gp_tz z;

static void test_zone_without_dst_has_one_offset(void **st) {
        (void)st;
        assert_int_equal(gp_tz_load("Asia/Shanghai", &z), 0);
        assert_int_equal(gp_tz_offset(&z, 1767225600), 8 * 3600);     /* 2026-01-01 */
        assert_int_equal(gp_tz_offset(&z, 1782864000), 8 * 3600);     /* 2026-07-01 */
        assert_int_equal(gp_tz_minute_of_day(&z, 1795307400000LL), 8 * 60 + 30); /* 00:30Z -> 08:30 */
}

static void test_zone_with_dst_switches_offsets(void **st) {
        (void)st;
        assert_int_equal(gp_tz_load("Europe/Berlin", &z), 0);
        assert_int_equal(gp_tz_offset(&z, 1767225600), 3600);
        assert_int_equal(gp_tz_offset(&z, 1782864000), 7200);
        /* 2026-03-29 01:00Z is the switch to summer time */
        assert_int_equal(gp_tz_offset(&z, 1774746000 - 1), 3600);
        assert_int_equal(gp_tz_offset(&z, 1774746000), 7200);
        assert_int_equal(gp_tz_load("America/New_York", &z), 0);
        assert_int_equal(gp_tz_minute_of_day(&z, 1795307400000LL), 19 * 60 + 30); /* 00:30Z -> 19:30 EST */
}

static void test_utc_is_zero(void **st) {
        (void)st;
        assert_int_equal(gp_tz_load("UTC", &z), 0);
        assert_int_equal(gp_tz_offset(&z, 0), 0);
        assert_int_equal(gp_tz_minute_of_day(&z, 1795307400000LL), 30);
}

static void test_bad_names_are_refused_before_any_file_is_read(void **st) {
        (void)st;
        assert_int_equal(gp_tz_load("../../etc/passwd", &z), -EINVAL);
        assert_int_equal(gp_tz_load("/etc/passwd", &z), -EINVAL);
        assert_int_equal(gp_tz_load("", &z), -EINVAL);
        assert_int_equal(gp_tz_load("Asia/Shang hai", &z), -EINVAL);
        assert_int_equal(gp_tz_load("Nope/Zone", &z), -ENOENT);
        /* a directory is not a zone file */
        assert_true(gp_tz_load("Asia", &z) < 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_zone_without_dst_has_one_offset),
                cmocka_unit_test(test_zone_with_dst_switches_offsets),
                cmocka_unit_test(test_utc_is_zero),
                cmocka_unit_test(test_bad_names_are_refused_before_any_file_is_read),
        };
        return cmocka_run_group_tests_name("tz", tests, NULL, NULL);
}
