/* test-text.c - the one text rule (src/base/text.c): what passes, what is
 * refused and with which phrase, and that the older gp_str_is_clean
 * follows the same rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "base/text.h"
#include "base/util.h"

static void expect_ok(const char *s) {
        const char *why = "unset";
        if (gp_text_check(s, strlen(s), 1000, &why) != 0)
                fail_msg("refused \"%s\": %s", s, why);
        assert_true(gp_text_valid(s, strlen(s), 1000));
        assert_true(gp_str_is_clean(s, strlen(s)));
}

static void expect_bad(const char *s, size_t n, const char *phrase) {
        const char *why = NULL;
        assert_int_equal(gp_text_check(s, n, 1000, &why), -EINVAL);
        assert_non_null(why);
        if (!strstr(why, phrase))
                fail_msg("phrase \"%s\" does not contain \"%s\"", why, phrase);
        assert_false(gp_text_valid(s, n, 1000));
        assert_false(gp_str_is_clean(s, n));
}

static void test_printable_text_in_any_script_passes(void **state) {
        (void)state;
        expect_ok("");
        expect_ok("train resnet-50 (run 3)");
        expect_ok("deepseek-7b");
        expect_ok("训练任务 一");                   /* CJK */
        expect_ok("\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d"); /* Hebrew: right-to-left letters are fine */
        expect_ok("\xe2\x80\x8f");                     /* U+200F RIGHT-TO-LEFT MARK: a mark, not an override */
        expect_ok("emoji \xf0\x9f\x9a\x80");           /* U+1F680 */
        expect_ok("\xc2\xa0nbsp \xe2\x80\xa7");        /* U+00A0, U+2027: just outside the refused ranges */
        expect_ok("\xe2\x81\xa5 \xe2\x81\xaa");        /* U+2065, U+206A: beside the isolates */
}

static void test_c0_controls_tab_and_del_are_refused(void **state) {
        (void)state;
        expect_bad("a\tb", 3, "control characters");
        expect_bad("a\nb", 3, "control characters");
        expect_bad("a\rb", 3, "control characters");
        expect_bad("a\x1b[31mred", 9, "control characters");
        expect_bad("a\x7f", 2, "control characters");
        expect_bad("a\0b", 3, "control characters");
}

static void test_c1_controls_are_refused(void **state) {
        (void)state;
        expect_bad("a\xc2\x85z", 4, "control characters"); /* U+0085 NEL */
        expect_bad("\xc2\x80", 2, "control characters");   /* U+0080 */
        expect_bad("\xc2\x9f", 2, "control characters");   /* U+009F */
        expect_bad("\xc2\x9b" "31m", 5, "control characters"); /* U+009B CSI */
}

static void test_line_separators_and_bidi_controls_are_refused(void **state) {
        (void)state;
        expect_bad("a\xe2\x80\xa8z", 5, "line or paragraph separator"); /* U+2028 */
        expect_bad("a\xe2\x80\xa9z", 5, "line or paragraph separator"); /* U+2029 */
        static const char *const bidi[] = {"\xe2\x80\xaa", "\xe2\x80\xab", "\xe2\x80\xac", "\xe2\x80\xad",
                                           "\xe2\x80\xae", "\xe2\x81\xa6", "\xe2\x81\xa7", "\xe2\x81\xa8",
                                           "\xe2\x81\xa9"}; /* U+202A..U+202E, U+2066..U+2069 */
        for (size_t i = 0; i < sizeof(bidi) / sizeof(bidi[0]); i++)
                expect_bad(bidi[i], 3, "bidirectional");
}

static void test_bad_utf8_is_refused(void **state) {
        (void)state;
        expect_bad("\xff", 1, "UTF-8");
        expect_bad("\xc0\xaf", 2, "UTF-8");                 /* overlong '/' */
        expect_bad("\xe0\x80\x80", 3, "UTF-8");             /* overlong NUL */
        expect_bad("\xed\xa0\x80", 3, "UTF-8");             /* surrogate U+D800 */
        expect_bad("\xf4\x90\x80\x80", 4, "UTF-8");         /* above U+10FFFF */
        expect_bad("ab\xe2\x80", 4, "UTF-8");               /* cut short */
        expect_bad("\x80", 1, "UTF-8");                     /* a lone continuation byte */
}

static void test_length_is_bounded(void **state) {
        (void)state;
        const char *why = NULL;
        assert_int_equal(gp_text_check("abcd", 4, 4, &why), 0);
        assert_int_equal(gp_text_check("abcde", 5, 4, &why), -E2BIG);
        assert_string_equal(why, "is too long");
        assert_false(gp_text_valid("abcde", 5, 4));
        assert_int_equal(gp_text_check(NULL, 0, 4, NULL), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_printable_text_in_any_script_passes),
                cmocka_unit_test(test_c0_controls_tab_and_del_are_refused),
                cmocka_unit_test(test_c1_controls_are_refused),
                cmocka_unit_test(test_line_separators_and_bidi_controls_are_refused),
                cmocka_unit_test(test_bad_utf8_is_refused),
                cmocka_unit_test(test_length_is_bounded),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
