/* test-cgroup.c - a run's cgroup (exec/cgroup.h) on the machine's real
 * hierarchies: made under our own cgroup, joined by a forked child,
 * limits written, an OOM kill counted and named, every process killed
 * (one that left its session too) and the dirs removed.  The tests that
 * need a writable cgroup say so and pass without one (the limits' JSON
 * is checked everywhere).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "exec/cgroup.h"
#include "exec/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static bool have_cgroup(void) {
        char why[400];
        if (gp_cgroup_detect(why, sizeof(why)) > 0)
                return true;
        printf("  (skipped: %s)\n", why);
        return false;
}

/* 0: made; 1: no usable cgroup here after all (a cgroup2 session scope
 * with processes, where only a delegated unit may enable controllers):
 * skipped, saying why. */
static bool created(int rc, const char *why) {
        if (rc == 1) {
                printf("  (skipped: %s)\n", why);
                return false;
        }
        assert_int_equal(rc, 0);
        return true;
}

static void nap_ms(int ms) {
        nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L}, NULL);
}

static bool alive(pid_t pid) {
        char p[64], st[512];
        snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(p, "r");
        if (!f)
                return false;
        size_t n = fread(st, 1, sizeof(st) - 1, f);
        fclose(f);
        st[n] = '\0';
        const char *r = strrchr(st, ')');
        return r && r[1] == ' ' && r[2] != 'Z' && r[2] != 'X';
}

static void test_limits_json_is_checked_both_ways(void **state) {
        (void)state;
        gp_cgroup_limits l = {.cpus = 9, .host_memory_mb = 9};
        json_t *o = json_loads("{}", 0, NULL);
        assert_int_equal(gp_cgroup_limits_get(o, &l), 0);
        assert_int_equal(l.cpus, 0);
        assert_int_equal(l.host_memory_mb, 0);
        json_decref(o);
        o = json_loads("{\"cpus\": 4, \"host_memory_mb\": 512}", 0, NULL);
        assert_int_equal(gp_cgroup_limits_get(o, &l), 0);
        assert_int_equal(l.cpus, 4);
        assert_int_equal(l.host_memory_mb, 512);
        json_decref(o);
        o = json_loads("{\"cpus\": null}", 0, NULL);
        assert_int_equal(gp_cgroup_limits_get(o, &l), 0);
        assert_int_equal(l.cpus, 0);
        json_decref(o);
        static const char *const bad[] = {"{\"cpus\": 0}",
                                          "{\"cpus\": 4097}",
                                          "{\"cpus\": \"2\"}",
                                          "{\"cpus\": 1.5}",
                                          "{\"host_memory_mb\": -1}",
                                          "{\"host_memory_mb\": 1073741825}",
                                          "{\"host_memory_mb\": true}"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                o = json_loads(bad[i], 0, NULL);
                l = (gp_cgroup_limits){.cpus = 3};
                assert_int_equal(gp_cgroup_limits_get(o, &l), -EINVAL);
                assert_int_equal(l.cpus, 3); /* untouched */
                json_decref(o);
        }
        o = json_object();
        assert_int_equal(gp_cgroup_limits_set(o, &(gp_cgroup_limits){.cpus = 2}), 0);
        assert_int_equal(json_object_size(o), 1); /* no limit: no key */
        assert_int_equal(json_integer_value(json_object_get(o, "cpus")), 2);
        assert_int_equal(gp_cgroup_limits_set(o, &(gp_cgroup_limits){.cpus = 5000}), -EINVAL);
        json_decref(o);
}

/* A child that joins cg, forks a grandchild into a session of its own,
 * sends its pid up the pipe and sleeps. */
static pid_t start_escaper(const gp_cgroup *cg, pid_t *ret_grandchild) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (gp_cgroup_enter(cg) < 0)
                        _exit(3);
                if (fork() == 0) {
                        setsid();
                        pid_t me = getpid(); /* said once it has left the session */
                        (void)!write(p[1], &me, sizeof(me));
                        pause();
                        _exit(0);
                }
                pause();
                _exit(0);
        }
        close(p[1]);
        pid_t g = 0;
        assert_int_equal(read(p[0], &g, sizeof(g)), (ssize_t)sizeof(g));
        close(p[0]);
        *ret_grandchild = g;
        return pid;
}

static void test_kill_reaches_a_process_that_left_its_session_and_remove_cleans_up(void **state) {
        (void)state;
        if (!have_cgroup())
                return;
        gp_cgroup cg;
        char why[400];
        gp_cgroup_limits lim = {.cpus = 2, .host_memory_mb = 128};
        if (!created(gp_cgroup_create(77, &lim, &cg, why, sizeof(why)), why))
                return;
        assert_true(cg.version == 1 || cg.version == 2);
        char f[GP_CGROUP_PATH_MAX + 64], buf[64];
        if (cg.version == 1) { /* the limits, as written */
                snprintf(f, sizeof(f), "%s/memory.limit_in_bytes", cg.dir[0]);
                FILE *fp = fopen(f, "r");
                assert_non_null(fp);
                assert_non_null(fgets(buf, sizeof(buf), fp));
                fclose(fp);
                assert_int_equal(strtoll(buf, NULL, 10), 128LL << 20);
        }
        pid_t g, pid = start_escaper(&cg, &g);
        assert_true(alive(g));
        assert_int_equal(getsid(g), g);
        /* the grandchild is in the cgroup though it left the session */
        snprintf(f, sizeof(f), "%s/cgroup.procs", cg.dir[0]);
        char procs[4096] = "";
        FILE *fp = fopen(f, "r");
        assert_non_null(fp);
        size_t n = fread(procs, 1, sizeof(procs) - 1, fp);
        procs[n] = '\0';
        fclose(fp);
        snprintf(buf, sizeof(buf), "%d\n", (int)g);
        assert_non_null(strstr(procs, buf));
        int rc = 1;
        for (int i = 0; i < 500 && rc == 1; i++) {
                rc = gp_cgroup_kill(&cg);
                waitpid(pid, NULL, WNOHANG);
                if (rc == 1)
                        nap_ms(10);
        }
        assert_int_equal(rc, 0);
        /* g was not our child: init (or a subreaper) reaps it */
        for (int i = 0; i < 200 && alive(g); i++)
                nap_ms(10);
        assert_false(alive(g));
        assert_false(alive(pid));
        char d0[GP_CGROUP_PATH_MAX];
        snprintf(d0, sizeof(d0), "%s", cg.dir[0]);
        assert_int_equal(gp_cgroup_remove(&cg), 0);
        struct stat st;
        assert_int_equal(stat(d0, &st), -1);
        assert_int_equal(gp_cgroup_remove(&cg), 0); /* twice: nothing left to do */
}

static void test_an_oom_kill_is_counted_and_names_a_failed_result(void **state) {
        (void)state;
        if (!have_cgroup())
                return;
        gp_cgroup cg;
        char why[400];
        gp_cgroup_limits lim = {.host_memory_mb = 16};
        if (!created(gp_cgroup_create(78, &lim, &cg, why, sizeof(why)), why))
                return;
        assert_int_equal(gp_cgroup_oom_kills(&cg), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (gp_cgroup_enter(&cg) < 0)
                        _exit(3);
                size_t sz = (size_t)64 << 20;
                volatile char *p = malloc(sz);
                if (!p)
                        _exit(4);
                for (size_t i = 0; i < sz; i += 4096) /* over 16 MiB: the OOM killer (volatile: not elided) */
                        p[i] = 1;
                _exit(0);
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (!WIFSIGNALED(st))
                fail_msg("the child was not killed: exit status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        assert_int_equal(WTERMSIG(st), SIGKILL);
        assert_true(gp_cgroup_oom_kills(&cg) >= 1);
        gp_exec_result ok = {.end = GP_EXEC_EXITED, .exit_code = 0};
        snprintf(ok.message, sizeof(ok.message), "exited with code 0");
        gp_cgroup_note_result(&cg, &ok); /* a run that succeeded is left alone */
        assert_string_equal(ok.message, "exited with code 0");
        gp_exec_result cancelled = {.end = GP_EXEC_CANCELLED, .exit_code = 137, .signal = 9};
        snprintf(cancelled.message, sizeof(cancelled.message), "cancelled");
        gp_cgroup_note_result(&cg, &cancelled);
        assert_string_equal(cancelled.message, "cancelled");
        gp_exec_result res = {.end = GP_EXEC_SIGNALED, .exit_code = 137, .signal = 9};
        snprintf(res.message, sizeof(res.message), "killed by signal 9");
        gp_cgroup_note_result(&cg, &res);
        assert_non_null(strstr(res.message, "host_memory_exceeded: "));
        assert_non_null(strstr(res.message, "16 MiB"));
        assert_non_null(strstr(res.message, "killed by signal 9"));
        assert_int_equal(gp_cgroup_kill(&cg), 0);
        assert_int_equal(gp_cgroup_remove(&cg), 0);
}

/* A supervisor that died (here: one that forgets its cgroup) leaves it:
 * gp_cgroup_reap, given its task id and pid, kills what is in it (a
 * process that left its session too) and removes it. */
static void test_reap_kills_and_removes_what_a_dead_supervisor_left(void **state) {
        (void)state;
        if (!have_cgroup())
                return;
        gp_cgroup cg;
        char why[400];
        if (!created(gp_cgroup_create(79, &(gp_cgroup_limits){0}, &cg, why, sizeof(why)), why))
                return;
        pid_t g, pid = start_escaper(&cg, &g);
        for (int i = 0; i < cg.n; i++) /* forgotten, as by a SIGKILLed supervisor */
                close(cg.procs_fd[i]);
        char d0[GP_CGROUP_PATH_MAX];
        snprintf(d0, sizeof(d0), "%s", cg.dir[0]);
        assert_int_equal(gp_cgroup_reap(80, getpid()), 0); /* another task's: nothing there */
        assert_true(alive(g));
        assert_int_equal(gp_cgroup_reap(79, getpid()), 0);
        waitpid(pid, NULL, 0);
        for (int i = 0; i < 200 && alive(g); i++)
                nap_ms(10);
        assert_false(alive(g));
        struct stat st;
        assert_int_equal(stat(d0, &st), -1);
}

static void test_no_cgroup_is_a_no_op(void **state) {
        (void)state;
        gp_cgroup none;
        memset(&none, 0, sizeof(none));
        assert_int_equal(gp_cgroup_enter(&none), 0);
        assert_int_equal(gp_cgroup_kill(&none), 0);
        assert_int_equal(gp_cgroup_oom_kills(&none), 0);
        assert_int_equal(gp_cgroup_remove(&none), 0);
        assert_null(gp_cgroup_version_name(0));
        assert_string_equal(gp_cgroup_version_name(1), "v1");
        assert_string_equal(gp_cgroup_version_name(2), "v2");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_limits_json_is_checked_both_ways),
                cmocka_unit_test(test_kill_reaches_a_process_that_left_its_session_and_remove_cleans_up),
                cmocka_unit_test(test_an_oom_kill_is_counted_and_names_a_failed_result),
                cmocka_unit_test(test_reap_kills_and_removes_what_a_dead_supervisor_left),
                cmocka_unit_test(test_no_cgroup_is_a_no_op),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
