/* test-user.c - base/user: names, lookup, and a switch that cannot be
 * undone (run in a forked child, so the test runner keeps its ids). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/user.h"

#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_user_names_are_checked(void **state) {
        (void)state;
        assert_true(gp_user_name_ok("root", 4));
        assert_true(gp_user_name_ok("gpu_pool-1.x", 12));
        assert_true(gp_user_name_ok("host$", 5));
        assert_false(gp_user_name_ok("", 0));
        assert_false(gp_user_name_ok("-rf", 3));
        assert_false(gp_user_name_ok("1000", 4));   /* would read as a uid */
        assert_false(gp_user_name_ok("a b", 3));
        assert_false(gp_user_name_ok("a/b", 3));
        assert_false(gp_user_name_ok("$a", 2));
        assert_false(gp_user_name_ok("a$b", 3));
        assert_false(gp_user_name_ok("abcdefghijabcdefghijabcdefghijabc", 33));
        assert_true(gp_user_name_ok("abcdefghijabcdefghijabcdefghijab", 32));
}

static void test_lookup_finds_root_and_refuses_unknown_and_bad_names(void **state) {
        (void)state;
        gp_user u;
        memset(&u, 0x55, sizeof(u));
        assert_int_equal(gp_user_lookup("root", &u), 0);
        assert_int_equal(u.uid, 0);
        assert_int_equal(u.gid, 0);
        assert_true(u.ngroups >= 1);
        assert_string_equal(u.name, "root");
        gp_user v = u;
        assert_int_equal(gp_user_lookup("no-such-user-gp", &v), -ENOENT);
        assert_int_equal(gp_user_lookup("bad name", &v), -EINVAL);
        assert_int_equal(gp_user_lookup(NULL, &v), -EINVAL);
        assert_memory_equal(&u, &v, sizeof(u));   /* untouched on failure */
}

/* As root: become nobody in a child; it must not get root back. */
static void test_become_is_for_good(void **state) {
        (void)state;
        if (geteuid() != 0)
                skip();
        gp_user u;
        if (gp_user_lookup("nobody", &u) < 0)
                skip();
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (gp_user_become(&u) < 0)
                        _exit(10);
                if (getuid() != u.uid || geteuid() != u.uid || getgid() != u.gid)
                        _exit(11);
                if (setuid(0) == 0 || seteuid(0) == 0 || errno != EPERM)
                        _exit(12);
                gid_t g[4];
                int n = getgroups(4, g);
                for (int i = 0; i < n; i++)
                        if (g[i] == 0)
                                _exit(13);
                _exit(0);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_user_names_are_checked),
                cmocka_unit_test(test_lookup_finds_root_and_refuses_unknown_and_bad_names),
                cmocka_unit_test(test_become_is_for_good),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
