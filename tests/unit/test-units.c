/* test-units.c - durations and memory sizes as people type them
 * (src/base/units.c): every accepted form, the bounds, overflow, and
 * garbage refused without touching the result. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "base/keyhash.h"
#include "base/units.h"

#define BIG INT64_MAX

static int64_t dur(const char *s, int flags) {
        int64_t v = -7;
        int r = gp_duration_parse(s, flags, BIG, &v);
        if (r != 0)
                fail_msg("refused \"%s\": %d", s, r);
        return v;
}

static void dur_bad(const char *s, int flags, int64_t max, int want) {
        int64_t v = -7;
        int r = gp_duration_parse(s, flags, max, &v);
        if (r != want)
                fail_msg("\"%s\": got %d, want %d", s, r, want);
        assert_int_equal(v, -7); /* untouched */
}

static void test_duration_units_and_plain_seconds(void **state) {
        (void)state;
        assert_int_equal(dur("0", 0), 0);
        assert_int_equal(dur("3600", 0), 3600);
        assert_int_equal(dur("90s", 0), 90);
        assert_int_equal(dur("30m", 0), 1800);
        assert_int_equal(dur("12h", 0), 43200);
        assert_int_equal(dur("7d", 0), 604800);
        assert_int_equal(dur("1h", GP_DUR_PLAIN_MINUTES), 3600); /* a unit wins over the plain rule */
}

static void test_duration_plain_number_is_minutes_for_slurm_time(void **state) {
        (void)state;
        assert_int_equal(dur("90", GP_DUR_PLAIN_MINUTES), 5400);
        assert_int_equal(dur("0", GP_DUR_PLAIN_MINUTES), 0);
}

static void test_duration_slurm_colon_and_day_forms(void **state) {
        (void)state;
        assert_int_equal(dur("01:00:00", 0), 3600);
        assert_int_equal(dur("1:30:05", 0), 5405);
        assert_int_equal(dur("100:00:00", 0), 360000); /* the first field is unbounded */
        assert_int_equal(dur("5:30", 0), 330);         /* MM:SS */
        assert_int_equal(dur("5:30", GP_DUR_PLAIN_MINUTES), 330);
        assert_int_equal(dur("2-00:00:00", 0), 172800);
        assert_int_equal(dur("1-12", 0), 86400 + 12 * 3600);          /* D-HH */
        assert_int_equal(dur("1-12:30", 0), 86400 + 12 * 3600 + 1800); /* D-HH:MM */
        assert_int_equal(dur("0-00:00:01", 0), 1);
}

static void test_duration_garbage_is_refused(void **state) {
        (void)state;
        const char *bad[] = {"", "h", "1x", "1hh", "1h30m", " 1h", "1h ", "+5", "-5", "5-", "-",
                             "1:", ":1", "1::2", "1:2:3:4", "1:60", "1:60:00", "1-24", "1-1:2:3:4",
                             "1.5h", "0x10", "1e3", "12345678901234567890123456789012345"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                dur_bad(bad[i], 0, BIG, -EINVAL);
        dur_bad(NULL, 0, BIG, -EINVAL);
}

static void test_duration_bounds_and_overflow(void **state) {
        (void)state;
        int64_t v = 0;
        assert_int_equal(gp_duration_parse("10d", 0, 864000, &v), 0);
        assert_int_equal(v, 864000);
        dur_bad("10d", 0, 863999, -ERANGE);
        dur_bad("9", 0, 5, -ERANGE);
        dur_bad("2d", 0, 86400, -ERANGE);
        dur_bad("864001", 0, 864000, -ERANGE);
        dur_bad("99999999999999999999", 0, BIG, -ERANGE);
        dur_bad("9223372036854775807d", 0, BIG, -ERANGE);
        dur_bad("999999999999999999-00", 0, BIG, -ERANGE);
        dur_bad("9223372036854775807:00:00", 0, BIG, -ERANGE);
        dur_bad("153722867280912931", GP_DUR_PLAIN_MINUTES, BIG, -ERANGE);
        assert_int_equal(gp_duration_parse("9223372036854775807", 0, BIG, &v), 0);
        assert_int_equal(v, INT64_MAX);
}

static int64_t mb(const char *s) {
        int64_t v = -7;
        int r = gp_size_mb_parse(s, BIG, &v);
        if (r != 0)
                fail_msg("refused \"%s\": %d", s, r);
        return v;
}

static void mb_bad(const char *s, int64_t max, int want) {
        int64_t v = -7;
        int r = gp_size_mb_parse(s, max, &v);
        if (r != want)
                fail_msg("\"%s\": got %d, want %d", s, r, want);
        assert_int_equal(v, -7);
}

static void test_size_units(void **state) {
        (void)state;
        assert_int_equal(mb("8192"), 8192); /* plain: MiB, as before */
        assert_int_equal(mb("0"), 0);
        assert_int_equal(mb("8192M"), 8192);
        assert_int_equal(mb("8G"), 8192);
        assert_int_equal(mb("8g"), 8192);
        assert_int_equal(mb("8GB"), 8192);
        assert_int_equal(mb("8GiB"), 8192);
        assert_int_equal(mb("1T"), 1048576);
        assert_int_equal(mb("1024K"), 1);
        assert_int_equal(mb("1K"), 1); /* rounded up */
        assert_int_equal(mb("1025K"), 2);
}

static void test_size_garbage_and_bounds(void **state) {
        (void)state;
        const char *bad[] = {"", "G", "GB", "8B", "8iB", "8X", "8 G", "-8G", "+8", "8.5G", "8GG", "0x10",
                             "1e3"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                mb_bad(bad[i], BIG, -EINVAL);
        mb_bad(NULL, BIG, -EINVAL);
        mb_bad("16G", 16383, -ERANGE);
        mb_bad("2G", 1024, -ERANGE);  /* a digit above a small bound */
        mb_bad("9", 5, -ERANGE);
        mb_bad("16385", 16384, -ERANGE);
        mb_bad("99999999999999999999T", BIG, -ERANGE);
        mb_bad("9223372036854775807K", 100, -ERANGE);
        int64_t v;
        assert_int_equal(gp_size_mb_parse("16G", 16384, &v), 0);
        assert_int_equal(v, 16384);
}

#define HEX "13fb1766986b7ae3f577f97332f1967b0d15ff975d5af88f0b5a6aaad78d4760"

static void key_ok(const char *s) {
        char out[72] = "untouched";
        if (!gp_key_hash_parse(s, strlen(s), out))
                fail_msg("refused \"%s\"", s);
        assert_string_equal(out, "sha256:" HEX);
}

static void key_bad(const char *s) {
        char out[72] = "untouched";
        if (gp_key_hash_parse(s, strlen(s), out))
                fail_msg("accepted \"%s\"", s);
        assert_string_equal(out, "untouched");
}

static void test_key_hash_as_written_and_as_sha256sum_prints_it(void **state) {
        (void)state;
        key_ok("sha256:" HEX);
        key_ok(HEX "  -");          /* printf %s KEY | sha256sum */
        key_ok(HEX " -");
        key_ok("sha256:" HEX "  -");
        key_bad(HEX);               /* 64 bare hex digits could be the key itself */
        key_bad(HEX "  key.txt");   /* sha256sum FILE: a file's hash */
        key_bad(HEX "  - ");
        key_bad(HEX "-");
        key_bad("sha256:" HEX "0");
        key_bad("sha256:13FB1766986B7AE3F577F97332F1967B0D15FF975D5AF88F0B5A6AAAD78D4760");
        key_bad("sha256:" HEX "\n");
        key_bad("sha256:");
        key_bad("");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_duration_units_and_plain_seconds),
                cmocka_unit_test(test_duration_plain_number_is_minutes_for_slurm_time),
                cmocka_unit_test(test_duration_slurm_colon_and_day_forms),
                cmocka_unit_test(test_duration_garbage_is_refused),
                cmocka_unit_test(test_duration_bounds_and_overflow),
                cmocka_unit_test(test_size_units),
                cmocka_unit_test(test_size_garbage_and_bounds),
                cmocka_unit_test(test_key_hash_as_written_and_as_sha256sum_prints_it),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
