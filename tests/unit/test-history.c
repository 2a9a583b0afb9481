/* test-history.c - what the daemon keeps of a run is text the store takes
 * (server/history.h gp_history_clean): whatever a task's reason holds
 * (a process's message cut mid-character, controls, bidi overrides), the
 * copy passes base/text.h's rule, so a run's record never fails its batch.
 * The runs themselves, end to end: tests/blackbox/test_history.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/text.h"
#include "server/history.h"

static void check(const char *src, size_t size, const char *want) {
        char out[256];
        assert_true(size <= sizeof(out));
        memset(out, 'x', sizeof(out));
        gp_history_clean(out, size, src);
        assert_string_equal(out, want);
        assert_true(gp_text_valid(out, strlen(out), size));
}

static void test_clean_text_is_kept_as_it_is(void **state) {
        (void)state;
        check("GPU local:1 failed: Xid 79", 64, "GPU local:1 failed: Xid 79");
        check("节点 gpu-a 已失联", 64, "节点 gpu-a 已失联");
        check("", 8, "");
}

static void test_controls_and_broken_utf8_become_spaces_and_marks(void **state) {
        (void)state;
        check("a\nb\tc\x7f" "d\x1b[2J", 64, "a b c d [2J");
        check("cut \xe8\x8a", 64, "cut ??");          /* a reason cut mid-character */
        check("\xc2\x85nel", 64, "??nel");             /* C1 control NEL */
        check("x\xe2\x80\xaey", 64, "x???y");          /* right-to-left override */
        check("\xff\xfe ok", 64, "?? ok");
        check("\xf0\x9f\x98\x80!", 64, "\xf0\x9f\x98\x80!"); /* an emoji is text */
}

static void test_a_character_that_does_not_fit_is_left_out_whole(void **state) {
        (void)state;
        check("ab节点", 6, "ab节");    /* 2 + 3 bytes fit in 5 + NUL; the next 3 do not */
        check("ab节点", 5, "ab");
        check("abcdef", 4, "abc");
        check("abc", 1, "");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_clean_text_is_kept_as_it_is),
                cmocka_unit_test(test_controls_and_broken_utf8_become_spaces_and_marks),
                cmocka_unit_test(test_a_character_that_does_not_fit_is_left_out_whole),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
