/* test-exec.c - the supervisor with real processes in temporary directories.
 *
 * This binary is its own supervisor: gp_exec_start() is given its path and
 * runs "THIS __supervise TASK_DIR", which main() hands to
 * gp_exec_supervise_main(), exactly as gpupool's main.c does.  Every wait is
 * a poll with a deadline, never a fixed long sleep.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "exec/exec.h"
#include "exec/fence.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char self_exe[PATH_MAX];

typedef struct fixture {
        char root[64];               /* mkdtemp'd, removed in teardown */
        char task[128];              /* root/tasks/7: does not exist before the test */
} fixture;

static int setup(void **state) {
        fixture *f = calloc(1, sizeof(*f));
        if (!f)
                return -1;
        snprintf(f->root, sizeof(f->root), "/tmp/gp-exec-XXXXXX");
        if (!mkdtemp(f->root)) {
                free(f);
                return -1;
        }
        snprintf(f->task, sizeof(f->task), "%s/tasks/7", f->root);
        *state = f;
        return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void)st;
        (void)flag;
        (void)ftw;
        remove(path);
        return 0;
}

static int teardown(void **state) {
        fixture *f = *state;
        nftw(f->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(f);
        return 0;
}

static void sleep_ms(int ms) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

static gp_exec_spec make_spec(const char *const *argv) {
        gp_exec_spec s;
        memset(&s, 0, sizeof(s));
        s.task_id = 7;
        s.argv = argv;
        s.cuda_visible_devices = "0,1";
        s.gpus = "local:0,local:1";
        s.kill_grace_s = 1;
        s.max_log_bytes = 1 << 20;
        return s;
}

static void start(const char *dir, const gp_exec_spec *s, gp_exec_proc *p) {
        int r = gp_exec_start(self_exe, dir, s, p);
        if (r < 0)
                fail_msg("gp_exec_start(%s): %s", dir, strerror(-r));
        assert_true(p->pid > 0);
}

/* Poll for result.json; returns gp_exec_read_result's last answer. */
static int wait_result(const char *dir, int timeout_ms, gp_exec_result *res) {
        int64_t until = gp_mono_ms() + timeout_ms;
        int r;
        while ((r = gp_exec_read_result(dir, res)) == -ENOENT && gp_mono_ms() < until)
                sleep_ms(10);
        return r;
}

static void expect_result(const char *dir, int timeout_ms, gp_exec_result *res) {
        int r = wait_result(dir, timeout_ms, res);
        if (r < 0)
                fail_msg("no result in %s after %d ms: %s", dir, timeout_ms, strerror(-r));
}

/* Wait until the supervisor has exited (its pidfd is readable). */
static void wait_exit(const gp_exec_proc *p, int timeout_ms) {
        int fd;
        int r = gp_exec_watch(p, &fd);
        if (r == -ESRCH)
                return;
        assert_int_equal(r, 0);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&pfd, 1, timeout_ms), 1);
        close(fd);
}

static char *slurp(const char *dir, const char *name, size_t *ret_len) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        size_t cap = 4 << 20, len = 0;
        char *d = malloc(cap + 1);
        assert_non_null(d);
        ssize_t n;
        while (len < cap && (n = read(fd, d + len, cap - len)) > 0)
                len += (size_t)n;
        close(fd);
        d[len] = '\0';
        if (ret_len)
                *ret_len = len;
        return d;
}

static void put_file(const char *dir, const char *name, const char *data, size_t len) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, data, len), (ssize_t)len);
        close(fd);
}

static void assert_log_has(const char *dir, const char *needle) {
        char *log = slurp(dir, "log", NULL);
        assert_non_null(log);
        if (!strstr(log, needle))
                fail_msg("log of %s lacks \"%s\"; it is:\n%s", dir, needle, log);
        free(log);
}

static void wait_log_has(const char *dir, const char *needle, int timeout_ms) {
        int64_t until = gp_mono_ms() + timeout_ms;
        for (;;) {
                char *log = slurp(dir, "log", NULL);
                bool found = log && strstr(log, needle);
                free(log);
                if (found)
                        return;
                if (gp_mono_ms() >= until)
                        fail_msg("log of %s never got \"%s\"", dir, needle);
                sleep_ms(10);
        }
}

/* State and start time of a process, parsed independently of exec.c:
 * sscanf after the last ')'. */
static bool ref_stat(pid_t pid, char *state, long long *start) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        char *d = slurp("/", path + 1, NULL);
        if (!d)
                return false;
        char *p = strrchr(d, ')');
        bool ok = p && sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d "
                                     "%*d %*d %*d %*d %*d %lld", state, start) == 2;
        free(d);
        return ok;
}

static bool pid_gone(pid_t pid) {
        char st;
        long long start;
        return !ref_stat(pid, &st, &start) || st == 'Z' || st == 'X';
}

/* ---- the command's outcome ---- */

static void test_exit_code_and_both_streams_are_logged(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "cat; echo to-stdout; echo to-stderr >&2; exit 3", NULL};
        gp_exec_spec s = make_spec(argv);
        gp_exec_proc p;
        start(f->task, &s, &p);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 3);
        assert_int_equal(res.signal, 0);
        assert_string_equal(res.message, "exited with code 3");
        assert_true(res.finished_ms > 0 && res.finished_ms <= gp_now_ms());
        /* stdin was /dev/null, or cat would have hung */
        assert_log_has(f->task, "to-stdout\n");
        assert_log_has(f->task, "to-stderr\n");
        struct stat st;
        assert_int_equal(stat(f->task, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0700);
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/log", f->task);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
}

/* A run's own log file (the server names one per run): the output goes
 * there and nowhere else; a name that is not a plain file name is refused
 * before anything is made. */
static void test_log_name_puts_the_output_in_that_file_only(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "echo second-run", NULL};
        gp_exec_spec s = make_spec(argv);
        gp_exec_proc p;
        const char *bad[] = {"../log", "a/b", ".", "..",
                             "x123456789012345678901234567890123456789012345678901234567890123456789"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                s.log_name = bad[i];
                assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        }
        assert_int_equal(access(f->task, F_OK), -1);
        s.log_name = "log.run2";
        start(f->task, &s, &p);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        size_t n;
        char *log = slurp(f->task, "log.run2", &n);
        assert_non_null(log);
        assert_string_equal(log, "second-run\n");
        free(log);
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/log", f->task);
        assert_int_equal(access(path, F_OK), -1); /* run 1's name is left alone */
}

static void test_command_killed_by_signal_is_signaled(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "kill -KILL $$", NULL};
        gp_exec_spec s = make_spec(argv);
        gp_exec_proc p;
        start(f->task, &s, &p);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_SIGNALED);
        assert_int_equal(res.signal, SIGKILL);
        assert_int_equal(res.exit_code, 128 + SIGKILL);
        assert_string_equal(res.message, "killed by signal 9");
}

static void test_env_has_gpu_vars_spec_env_and_inherited_env(void **state) {
        fixture *f = *state;
        setenv("GP_EXEC_TEST_INHERITED", "yes", 1);
        setenv("FOO", "from-daemon", 1);
        setenv("CUDA_VISIBLE_DEVICES", "from-daemon", 1);
        const char *argv[] = {"sh", "-c",
                              "echo \"CVD=$CUDA_VISIBLE_DEVICES\"; echo \"TID=$GPUPOOL_TASK_ID\"; "
                              "echo \"GPUS=$GPUPOOL_GPUS\"; echo \"FOO=$FOO\"; echo \"BAR=$BAR\"; "
                              "echo \"INH=$GP_EXEC_TEST_INHERITED\"; "
                              "echo \"NBAR=$(env | grep -c '^BAR=')\"; "
                              "echo \"NCVD=$(env | grep -c '^CUDA_VISIBLE_DEVICES=')\"",
                              NULL};
        /* the spec may not override gpupool's own variables; last BAR wins */
        const char *env[] = {"FOO=bar", "BAR=1", "CUDA_VISIBLE_DEVICES=7",
                             "GPUPOOL_TASK_ID=999", "BAR=2", NULL};
        gp_exec_spec s = make_spec(argv);
        s.env = env;
        gp_exec_proc p;
        start(f->task, &s, &p);
        unsetenv("GP_EXEC_TEST_INHERITED");
        unsetenv("FOO");
        unsetenv("CUDA_VISIBLE_DEVICES");
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 0);
        assert_log_has(f->task, "CVD=0,1\n");
        assert_log_has(f->task, "TID=7\n");
        assert_log_has(f->task, "GPUS=local:0,local:1\n");
        assert_log_has(f->task, "FOO=bar\n");
        assert_log_has(f->task, "BAR=2\n");
        assert_log_has(f->task, "INH=yes\n");
        assert_log_has(f->task, "NBAR=1\n");
        assert_log_has(f->task, "NCVD=1\n");
}

/* clean_env (a local user's task: its env is the submitter's): nothing of
 * the supervisor's environment, the user's HOME/USER/LOGNAME/SHELL and a
 * default PATH unless env sets them, then env, then gpupool's own. */
static void test_clean_env_inherits_nothing_and_gives_the_users_basics(void **state) {
        fixture *f = *state;
        setenv("GP_EXEC_TEST_INHERITED", "yes", 1);
        const char *argv[] = {"sh", "-c",
                              "echo \"INH=$GP_EXEC_TEST_INHERITED\"; echo \"PATH=$PATH\"; echo \"FOO=$FOO\"; "
                              "echo \"HOME=$HOME\"; echo \"USER=$USER\"; echo \"SHELL=$SHELL\"; "
                              "echo \"TID=$GPUPOOL_TASK_ID\"",
                              NULL};
        const char *env[] = {"FOO=sent", "HOME=/sent/home", NULL};
        gp_exec_spec s = make_spec(argv);
        s.env = env;
        s.clean_env = true;
        gp_exec_proc p;
        start(f->task, &s, &p);
        unsetenv("GP_EXEC_TEST_INHERITED");
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 0);
        assert_log_has(f->task, "INH=\n");
        assert_log_has(f->task, "PATH=/usr/local/bin:/usr/bin:/bin\n");
        assert_log_has(f->task, "FOO=sent\n");
        assert_log_has(f->task, "HOME=/sent/home\n");   /* what was sent wins */
        assert_log_has(f->task, "USER=root\n");         /* the tests run as root */
        assert_log_has(f->task, "TID=7\n");
        char *spec = slurp(f->task, "spec.json", NULL);
        assert_non_null(spec);
        assert_non_null(strstr(spec, "\"clean_env\":true"));
        free(spec);
}

static void test_command_is_looked_up_in_its_own_path(void **state) {
        fixture *f = *state;
        char bin[PATH_MAX], tool[PATH_MAX + 16], path[PATH_MAX + 32];
        snprintf(bin, sizeof(bin), "%s/bin", f->root);
        assert_int_equal(mkdir(bin, 0700), 0);
        snprintf(tool, sizeof(tool), "%s/gp-test-tool", bin);
        const char script[] = "#!/bin/sh\necho tool-ran\n";
        put_file(bin, "gp-test-tool", script, sizeof(script) - 1);
        assert_int_equal(chmod(tool, 0700), 0);
        snprintf(path, sizeof(path), "PATH=%s:/usr/bin:/bin", bin);
        const char *argv[] = {"gp-test-tool", NULL};
        const char *env[] = {path, NULL};
        gp_exec_spec s = make_spec(argv);
        s.env = env;
        gp_exec_proc p;
        start(f->task, &s, &p);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 0);
        assert_log_has(f->task, "tool-ran\n");
}

static void test_workdir_default_absolute_and_relative(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "pwd -P", NULL};
        char want[PATH_MAX + 2], real[PATH_MAX];
        gp_exec_result res;
        gp_exec_proc p;

        /* default: the task dir */
        gp_exec_spec s = make_spec(argv);
        start(f->task, &s, &p);
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.exit_code, 0);
        assert_non_null(realpath(f->task, real));
        snprintf(want, sizeof(want), "%s\n", real);
        assert_log_has(f->task, want);

        /* absolute */
        char other[PATH_MAX];
        snprintf(other, sizeof(other), "%s/t2", f->root);
        s.workdir = f->root;
        start(other, &s, &p);
        expect_result(other, 5000, &res);
        assert_int_equal(res.exit_code, 0);
        assert_non_null(realpath(f->root, real));
        snprintf(want, sizeof(want), "%s\n", real);
        assert_log_has(other, want);

        /* relative: below the task dir */
        char sub[PATH_MAX + 8];
        snprintf(sub, sizeof(sub), "%s/sub", other);
        assert_int_equal(mkdir(sub, 0700), 0);
        s.workdir = "sub";
        start(other, &s, &p);
        expect_result(other, 5000, &res);
        assert_int_equal(res.exit_code, 0);
        assert_non_null(realpath(sub, real));
        snprintf(want, sizeof(want), "%s\n", real);
        assert_log_has(other, want);
}

static void test_missing_workdir_is_spawn_failed(void **state) {
        fixture *f = *state;
        const char *argv[] = {"true", NULL};
        gp_exec_spec s = make_spec(argv);
        s.workdir = "/nonexistent/gp-exec";
        gp_exec_proc p;
        start(f->task, &s, &p);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_SPAWN_FAILED);
        assert_int_equal(res.exit_code, 127);
        assert_string_equal(res.message,
                            "cannot enter workdir '/nonexistent/gp-exec': No such file or directory");
}

static void test_nonexistent_command_is_spawn_failed_with_message(void **state) {
        fixture *f = *state;
        const char *argv[] = {"gp-no-such-command", "arg", NULL};
        gp_exec_spec s = make_spec(argv);
        gp_exec_proc p;
        start(f->task, &s, &p);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_SPAWN_FAILED);
        assert_int_equal(res.exit_code, 127);
        assert_string_equal(res.message,
                            "cannot run 'gp-no-such-command': No such file or directory");
        assert_log_has(f->task, "[gpupool: cannot run 'gp-no-such-command'");
        wait_exit(&p, 5000);
}

/* ---- timeout and cancel ---- */

static void test_timeout_terminates_sleep(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sleep", "30", NULL};
        gp_exec_spec s = make_spec(argv);
        s.timeout_s = 1;
        s.kill_grace_s = 5;
        int64_t t0 = gp_mono_ms();
        gp_exec_proc p;
        start(f->task, &s, &p);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        int64_t took = gp_mono_ms() - t0;
        assert_int_equal(res.end, GP_EXEC_TIMEOUT);
        assert_int_equal(res.signal, SIGTERM);
        assert_int_equal(res.exit_code, 128 + SIGTERM);
        assert_string_equal(res.message, "timed out after 1 s");
        /* SIGTERM was enough: no waiting for the 5 s grace */
        assert_true(took >= 900 && took < 3500);
}

static void test_timeout_kills_child_that_traps_sigterm_after_grace(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "trap '' TERM; echo ready; sleep 30", NULL};
        gp_exec_spec s = make_spec(argv);
        s.timeout_s = 1;
        s.kill_grace_s = 1;
        int64_t t0 = gp_mono_ms();
        gp_exec_proc p;
        start(f->task, &s, &p);
        gp_exec_result res;
        expect_result(f->task, 8000, &res);
        int64_t took = gp_mono_ms() - t0;
        assert_int_equal(res.end, GP_EXEC_TIMEOUT);
        assert_int_equal(res.signal, SIGKILL);
        assert_int_equal(res.exit_code, 128 + SIGKILL);
        assert_true(took >= 1900 && took < 5000);
        assert_log_has(f->task, "ready\n");
}

static pid_t wait_pid_in_file(const char *dir, const char *name, int timeout_ms) {
        int64_t until = gp_mono_ms() + timeout_ms;
        while (gp_mono_ms() < until) {
                char *d = slurp(dir, name, NULL);
                if (d && strchr(d, '\n')) {
                        *strchr(d, '\n') = '\0';
                        int64_t v;
                        int r = gp_parse_i64(d, 1, INT_MAX, &v);
                        free(d);
                        assert_int_equal(r, 0);
                        return (pid_t)v;
                }
                free(d);
                sleep_ms(10);
        }
        fail_msg("%s/%s did not appear", dir, name);
        return -1;
}

static void test_cancel_kills_the_whole_process_group(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "sleep 100 & echo $! > grandchild.pid; wait", NULL};
        gp_exec_spec s = make_spec(argv);
        gp_exec_proc p;
        start(f->task, &s, &p);
        pid_t gc = wait_pid_in_file(f->task, "grandchild.pid", 5000);
        assert_false(pid_gone(gc));
        assert_true(gp_exec_alive(&p));
        int64_t t0 = gp_mono_ms();
        assert_int_equal(gp_exec_cancel(&p), 0);
        int r = gp_exec_cancel(&p);   /* idempotent */
        assert_true(r == 0 || r == -ESRCH);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_true(gp_mono_ms() - t0 < 900);   /* SIGTERM sufficed, no grace */
        assert_int_equal(res.end, GP_EXEC_CANCELLED);
        assert_int_equal(res.signal, SIGTERM);
        assert_int_equal(res.exit_code, 128 + SIGTERM);
        assert_string_equal(res.message, "cancelled");
        /* result.json is written only once the group is gone */
        assert_true(pid_gone(gc));
        wait_exit(&p, 5000);
        assert_false(gp_exec_alive(&p));
        assert_int_equal(gp_exec_cancel(&p), -ESRCH);
}

static void test_cancel_escalates_to_sigkill_after_grace(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "trap '' TERM; echo ready; sleep 30", NULL};
        gp_exec_spec s = make_spec(argv);
        s.kill_grace_s = 1;
        gp_exec_proc p;
        start(f->task, &s, &p);
        wait_log_has(f->task, "ready\n", 5000);   /* the trap is set */
        assert_int_equal(gp_exec_cancel(&p), 0);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_CANCELLED);
        assert_int_equal(res.signal, SIGKILL);
}

/* A run with a fence file: it runs while the deadline there is ahead, is
 * stopped (SIGTERM, SIGKILL after the grace) once it passed, and says so. */
static void test_fence_stops_the_command_once_the_deadline_passed(void **state) {
        fixture *f = *state;
        char fence[PATH_MAX];
        snprintf(fence, sizeof(fence), "%s/fence", f->root);
        assert_int_equal(gp_fence_write(fence, gp_mono_ms() + 600), 0);
        const char *argv[] = {"sh", "-c", "trap '' TERM; echo ready; sleep 30", NULL};
        gp_exec_spec s = make_spec(argv);
        s.fence_file = fence;
        gp_exec_proc p;
        int64_t t0 = gp_mono_ms();
        start(f->task, &s, &p);
        wait_log_has(f->task, "ready\n", 5000);
        /* moved on in time: it goes on past the first deadline */
        assert_int_equal(gp_fence_write(fence, gp_mono_ms() + 1200), 0);
        sleep_ms(700);
        gp_exec_result res;
        assert_int_equal(gp_exec_read_result(f->task, &res), -ENOENT);
        expect_result(f->task, 6000, &res);
        int64_t took = gp_mono_ms() - t0;
        assert_true(took >= 1200 + 1000); /* the deadline, then the kill grace (SIGTERM is trapped) */
        assert_int_equal(res.end, GP_EXEC_FENCED);
        assert_int_equal(res.signal, SIGKILL);
        assert_string_equal(res.message, "fenced: its node lost contact with the server");
        wait_exit(&p, 5000);
}

/* A fence file that is gone, or a deadline already past: the command is
 * never started. */
static void test_fence_passed_or_missing_starts_nothing(void **state) {
        fixture *f = *state;
        char fence[PATH_MAX];
        snprintf(fence, sizeof(fence), "%s/fence", f->root);
        for (int round = 0; round < 2; round++) {
                char dir[PATH_MAX];
                snprintf(dir, sizeof(dir), "%s/r%d", f->task, round);
                if (round == 0)
                        assert_int_equal(gp_fence_write(fence, gp_mono_ms() > 1000 ? gp_mono_ms() - 1000 : 0), 0);
                else
                        unlink(fence);
                const char *argv[] = {"sh", "-c", "echo started", NULL};
                gp_exec_spec s = make_spec(argv);
                s.fence_file = fence;
                gp_exec_proc p;
                start(dir, &s, &p);
                gp_exec_result res;
                expect_result(dir, 5000, &res);
                assert_int_equal(res.end, GP_EXEC_FENCED);
                assert_string_equal(res.message, "fenced before it started: its node lost contact with the server");
                size_t len;
                char *log = slurp(dir, "log", &len);
                assert_true(!log || !strstr(log, "started"));
                free(log);
                wait_exit(&p, 5000);
        }
        /* a relative fence file is refused at start */
        const char *argv[] = {"true", NULL};
        gp_exec_spec s = make_spec(argv);
        s.fence_file = "fence";
        gp_exec_proc p;
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
}

static void test_fence_file_round_trip_and_bad_content(void **state) {
        fixture *f = *state;
        char fence[PATH_MAX];
        snprintf(fence, sizeof(fence), "%s/fence", f->root);
        int64_t v = 0;
        assert_int_equal(gp_fence_read(fence, &v), -ENOENT);
        assert_int_equal(gp_fence_write(fence, 123456789), 0);
        assert_int_equal(gp_fence_read(fence, &v), 0);
        assert_int_equal(v, 123456789);
        assert_int_equal(gp_fence_write(fence, -1), -EINVAL);
        static const char *const bad[] = {"", "12", "-5\n", "x\n", "99999999999999999999999\n", "1 2\n"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                FILE *fp = fopen(fence, "w");
                assert_non_null(fp);
                fputs(bad[i], fp);
                fclose(fp);
                v = 7;
                assert_int_equal(gp_fence_read(fence, &v), -EINVAL);
                assert_int_equal(v, 7);
        }
}

static void test_preempt_uses_the_preemption_grace_and_says_preempted(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "trap '' TERM; echo ready; sleep 30", NULL};
        gp_exec_spec s = make_spec(argv);
        s.kill_grace_s = 0;       /* a cancel would SIGKILL at once */
        s.preempt_grace_s = 2;
        gp_exec_proc p;
        start(f->task, &s, &p);
        wait_log_has(f->task, "ready\n", 5000);
        assert_int_equal(gp_exec_preempt(&p), 0);
        sleep_ms(1000);
        gp_exec_result res;
        assert_int_equal(gp_exec_read_result(f->task, &res), -ENOENT); /* still in its grace */
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_CANCELLED);
        assert_int_equal(res.signal, SIGKILL);
        assert_string_equal(res.message, "preempted");
}

static void test_notify_sends_the_configured_signal_after_alloc_is_written(void **state) {
        fixture *f = *state;
        /* on SIGWINCH the task copies the allocation file into its log */
        const char *argv[] = {"sh", "-c",
                              "trap 'cat \"$GPUPOOL_ALLOC_FILE\"' WINCH; echo ready; "
                              "i=0; while [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done",
                              NULL};
        char env_alloc[PATH_MAX + 32];
        snprintf(env_alloc, sizeof(env_alloc), "GPUPOOL_ALLOC_FILE=%s/alloc.json", f->task);
        const char *env[] = {env_alloc, NULL};
        gp_exec_spec s = make_spec(argv);
        s.env = env;
        s.notify_signal = SIGWINCH;
        const char *first = "{\"n_gpus\":1}\n", *second = "{\"n_gpus\":3}\n";
        assert_int_equal(gp_exec_write_alloc(f->task, first, strlen(first)), 0);
        gp_exec_proc p;
        start(f->task, &s, &p);
        wait_log_has(f->task, "ready\n", 5000);
        assert_int_equal(gp_exec_write_alloc(f->task, second, strlen(second)), 0);
        assert_int_equal(gp_exec_notify(&p), 0);
        wait_log_has(f->task, "{\"n_gpus\":3}", 5000);
        /* the supervisor itself survived the signal and still cancels */
        assert_int_equal(gp_exec_cancel(&p), 0);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_CANCELLED);
}

static void test_notify_spares_a_task_that_does_not_catch_the_signal(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "echo ready; sleep 1; echo still-here", NULL};
        gp_exec_spec s = make_spec(argv);
        gp_exec_proc p;
        start(f->task, &s, &p);
        wait_log_has(f->task, "ready\n", 5000);
        assert_int_equal(gp_exec_notify(&p), 0);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 0);
        assert_log_has(f->task, "still-here\n");
}

static void test_start_rejects_uncatchable_notify_signal(void **state) {
        fixture *f = *state;
        const char *argv[] = {"true", NULL};
        gp_exec_spec s = make_spec(argv);
        s.notify_signal = SIGKILL;
        gp_exec_proc p;
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s.notify_signal = 0;
        s.preempt_grace_s = -1;
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
}

/* ---- output ---- */

static void test_log_is_capped_with_one_marker_and_task_finishes(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "head -c 1000000 /dev/zero; echo after-the-flood >&2", NULL};
        gp_exec_spec s = make_spec(argv);
        s.max_log_bytes = 10000;
        gp_exec_proc p;
        start(f->task, &s, &p);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 0);
        size_t len;
        char *log = slurp(f->task, "log", &len);
        assert_non_null(log);
        const char marker[] = "\n[gpupool: log truncated at 10000 bytes]\n";
        assert_int_equal(len, 10000 + sizeof(marker) - 1);
        for (size_t i = 0; i < 10000; i++)
                assert_int_equal(log[i], 0);
        assert_memory_equal(log + 10000, marker, sizeof(marker) - 1);
        free(log);
}

/* ---- the supervisor outlives the daemon ---- */

static void test_task_completes_after_its_starter_is_killed(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sh", "-c", "sleep 1; echo survived", NULL};
        gp_exec_spec s = make_spec(argv);
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        pid_t c = fork();
        assert_true(c >= 0);
        if (c == 0) {
                alarm(30);   /* never outlive a failed test */
                gp_exec_proc cp = {0, 0};
                int r = gp_exec_start(self_exe, f->task, &s, &cp);
                (void)!write(pfd[1], &r, sizeof(r));
                (void)!write(pfd[1], &cp, sizeof(cp));
                for (;;)
                        pause();
        }
        close(pfd[1]);
        struct pollfd pl = {.fd = pfd[0], .events = POLLIN};
        assert_int_equal(poll(&pl, 1, 10000), 1);
        int r;
        gp_exec_proc p;
        assert_int_equal(read(pfd[0], &r, sizeof(r)), sizeof(r));
        assert_int_equal(read(pfd[0], &p, sizeof(p)), sizeof(p));
        close(pfd[0]);
        kill(c, SIGKILL);
        assert_int_equal(waitpid(c, NULL, 0), c);
        assert_int_equal(r, 0);
        /* the "daemon" is dead; the task is not */
        assert_true(gp_exec_alive(&p));
        gp_exec_result res;
        assert_int_equal(gp_exec_read_result(f->task, &res), -ENOENT);
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 0);
        assert_log_has(f->task, "survived\n");
}

static void test_supervisor_ignores_sighup_and_sigpipe(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sleep", "0.3", NULL};
        gp_exec_spec s = make_spec(argv);
        gp_exec_proc p;
        start(f->task, &s, &p);
        assert_int_equal(kill((pid_t)p.pid, SIGHUP), 0);
        assert_int_equal(kill((pid_t)p.pid, SIGPIPE), 0);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 0);
}

static void test_watch_fd_becomes_readable_when_supervisor_exits(void **state) {
        fixture *f = *state;
        const char *argv[] = {"sleep", "0.5", NULL};
        gp_exec_spec s = make_spec(argv);
        gp_exec_proc p;
        start(f->task, &s, &p);
        gp_exec_proc fromfile;
        assert_int_equal(gp_exec_read_pidfile(f->task, &fromfile), 0);
        assert_int_equal(fromfile.pid, p.pid);
        assert_int_equal(fromfile.start, p.start);
        int fd;
        assert_int_equal(gp_exec_watch(&p, &fd), 0);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&pfd, 1, 0), 0);   /* the command still sleeps */
        assert_int_equal(poll(&pfd, 1, 5000), 1);
        close(fd);
        /* the result is written before the supervisor exits */
        gp_exec_result res;
        assert_int_equal(gp_exec_read_result(f->task, &res), 0);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_false(gp_exec_alive(&p));
}

/* ---- identity ---- */

static void test_pidfile_with_wrong_start_time_is_not_alive(void **state) {
        fixture *f = *state;
        char st;
        long long start;
        assert_true(ref_stat(getpid(), &st, &start));
        char line[64];
        int n = snprintf(line, sizeof(line), "%d %lld\n", (int)getpid(), start + 1);
        put_file(f->root, "supervisor.pid", line, (size_t)n);
        gp_exec_proc p;
        assert_int_equal(gp_exec_read_pidfile(f->root, &p), 0);
        assert_int_equal(p.pid, getpid());
        assert_int_equal(p.start, start + 1);
        assert_false(gp_exec_alive(&p));
        int fd;
        assert_int_equal(gp_exec_watch(&p, &fd), -ESRCH);
        /* must not signal us: we are alive but not "it" */
        assert_int_equal(gp_exec_cancel(&p), -ESRCH);

        n = snprintf(line, sizeof(line), "%d %lld\n", (int)getpid(), start);
        put_file(f->root, "supervisor.pid", line, (size_t)n);
        assert_int_equal(gp_exec_read_pidfile(f->root, &p), 0);
        assert_true(gp_exec_alive(&p));
        assert_int_equal(gp_exec_watch(&p, &fd), 0);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&pfd, 1, 0), 0);
        close(fd);
}

static void test_start_time_parse_survives_odd_comm(void **state) {
        (void)state;
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        pid_t c = fork();
        assert_true(c >= 0);
        if (c == 0) {
                alarm(30);
                prctl(PR_SET_NAME, "a) (b c) Z 1", 0, 0, 0);
                (void)!write(pfd[1], "x", 1);
                for (;;)
                        pause();
        }
        char x;
        assert_int_equal(read(pfd[0], &x, 1), 1);
        close(pfd[0]);
        close(pfd[1]);
        char st;
        long long start;
        bool ok = ref_stat(c, &st, &start);
        gp_exec_proc p = {.pid = c, .start = start};
        gp_exec_proc wrong = {.pid = c, .start = start + 1};
        bool alive = gp_exec_alive(&p), alive_wrong = gp_exec_alive(&wrong);
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        assert_true(ok);
        assert_true(alive);
        assert_false(alive_wrong);
        assert_false(gp_exec_alive(&p));   /* reaped now */
}

static void test_pidfile_garbage_is_einval_and_missing_is_enoent(void **state) {
        fixture *f = *state;
        gp_exec_proc p;
        assert_int_equal(gp_exec_read_pidfile(f->root, &p), -ENOENT);
        assert_int_equal(gp_exec_read_pidfile(f->task, &p), -ENOENT);   /* no dir */
        static const char *const bad[] = {
                "", "\n", "abc\n", "123 456", "123\n", "0 5\n", "-1 5\n", "1  5\n",
                "1 5 6\n", "1 -5\n", "+1 5\n", "1 5\n\n", " 1 5\n",
                "99999999999999999999 5\n",
                "1 50000000000000000000000000000000000000000000000000000000000000000000\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                put_file(f->root, "supervisor.pid", bad[i], strlen(bad[i]));
                int r = gp_exec_read_pidfile(f->root, &p);
                if (r != -EINVAL)
                        fail_msg("pidfile \"%s\": got %d", bad[i], r);
        }
        put_file(f->root, "supervisor.pid", "12 34\n", 6);
        assert_int_equal(gp_exec_read_pidfile(f->root, &p), 0);
        assert_int_equal(p.pid, 12);
        assert_int_equal(p.start, 34);
}

/* ---- result.json ---- */

static void test_read_result_is_strict(void **state) {
        fixture *f = *state;
        gp_exec_result res;
        assert_int_equal(gp_exec_read_result(f->root, &res), -ENOENT);
        static const char *const bad[] = {
                "",
                "{",
                "[]",
                "{\"end\":\"exited\",\"exit_code\":0,\"signal\":0,\"finished_ms\":1}",
                "{\"end\":\"bogus\",\"exit_code\":0,\"signal\":0,\"finished_ms\":1,\"message\":\"\"}",
                "{\"end\":\"exited\",\"exit_code\":256,\"signal\":0,\"finished_ms\":1,\"message\":\"\"}",
                "{\"end\":\"exited\",\"exit_code\":\"0\",\"signal\":0,\"finished_ms\":1,\"message\":\"\"}",
                "{\"end\":\"exited\",\"exit_code\":0,\"signal\":9,\"finished_ms\":1,\"message\":\"\"}",
                "{\"end\":\"exited\",\"exit_code\":0,\"signal\":0,\"finished_ms\":-1,\"message\":\"\"}",
                "{\"end\":\"exited\",\"end\":\"exited\",\"exit_code\":0,\"signal\":0,"
                "\"finished_ms\":1,\"message\":\"\"}",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                put_file(f->root, "result.json", bad[i], strlen(bad[i]));
                int r = gp_exec_read_result(f->root, &res);
                if (r != -EINVAL)
                        fail_msg("result \"%s\": got %d", bad[i], r);
        }
        /* a message that would not fit */
        char big[400];
        char msg[260];
        memset(msg, 'm', sizeof(msg) - 1);
        msg[sizeof(msg) - 1] = '\0';
        int n = snprintf(big, sizeof(big),
                         "{\"end\":\"exited\",\"exit_code\":0,\"signal\":0,\"finished_ms\":1,"
                         "\"message\":\"%s\"}", msg);
        put_file(f->root, "result.json", big, (size_t)n);
        assert_int_equal(gp_exec_read_result(f->root, &res), -EINVAL);
        const char ok[] = "{\"end\":\"timeout\",\"exit_code\":137,\"signal\":9,"
                          "\"finished_ms\":1700000000000,\"message\":\"timed out after 5 s\"}\n";
        put_file(f->root, "result.json", ok, sizeof(ok) - 1);
        assert_int_equal(gp_exec_read_result(f->root, &res), 0);
        assert_int_equal(res.end, GP_EXEC_TIMEOUT);
        assert_int_equal(res.exit_code, 137);
        assert_int_equal(res.signal, 9);
        assert_int_equal(res.finished_ms, 1700000000000LL);
        assert_string_equal(res.message, "timed out after 5 s");
}

/* ---- bad input ---- */

static void test_start_rejects_invalid_spec_and_starts_nothing(void **state) {
        fixture *f = *state;
        const char *ok_argv[] = {"true", NULL};
        const char *empty_argv[] = {NULL};
        const char *blank_argv[] = {"", NULL};
        const char *utf8_argv[] = {"echo", "\xff\xfe", NULL};
        const char *bad_env[] = {"NOEQUALS", NULL};
        const char *bad_env2[] = {"=x", NULL};
        gp_exec_proc p;
        gp_exec_spec s;

        s = make_spec(NULL);
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s = make_spec(empty_argv);
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s = make_spec(blank_argv);
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s = make_spec(utf8_argv);
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s = make_spec(ok_argv);
        s.env = bad_env;
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s.env = bad_env2;
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s = make_spec(ok_argv);
        s.max_log_bytes = 0;
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s = make_spec(ok_argv);
        s.kill_grace_s = -1;
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s = make_spec(ok_argv);
        s.timeout_s = -1;
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        s = make_spec(ok_argv);
        s.task_id = 0;
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        const char **many = calloc(4098, sizeof(*many));
        assert_non_null(many);
        for (int i = 0; i < 4097; i++)
                many[i] = "x";
        s = make_spec(many);
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), -EINVAL);
        /* none of the above created the task dir */
        assert_int_equal(access(f->task, F_OK), -1);
        many[4096] = NULL;   /* exactly the limit is fine */
        many[0] = "true";
        s = make_spec(many);
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &p), 0);
        free(many);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 0);

        s = make_spec(ok_argv);
        assert_int_equal(gp_exec_start(NULL, f->task, &s, &p), -EINVAL);
        assert_int_equal(gp_exec_start(self_exe, "", &s, &p), -EINVAL);
        char other[PATH_MAX];
        snprintf(other, sizeof(other), "%s/never", f->root);
        assert_int_equal(gp_exec_start("/nonexistent/gpupool", other, &s, &p), -ENOENT);
}

static void test_start_refuses_dir_of_live_supervisor_and_replaces_stale_result(void **state) {
        fixture *f = *state;
        const char *sleeper[] = {"sleep", "30", NULL};
        gp_exec_spec s = make_spec(sleeper);
        gp_exec_proc p, q;
        start(f->task, &s, &p);
        assert_int_equal(gp_exec_start(self_exe, f->task, &s, &q), -EBUSY);
        assert_int_equal(gp_exec_cancel(&p), 0);
        gp_exec_result res;
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_CANCELLED);
        /* a retry in the same dir, possibly while the old supervisor is still
         * exiting (it has written its result): the old result must not be
         * mistaken for the new one */
        const char *second[] = {"sh", "-c", "echo second-run", NULL};
        s = make_spec(second);
        start(f->task, &s, &q);
        assert_true(q.pid != p.pid);
        expect_result(f->task, 5000, &res);
        assert_int_equal(res.end, GP_EXEC_EXITED);
        assert_int_equal(res.exit_code, 0);
        assert_log_has(f->task, "second-run\n");
}

/* Run the supervisor by hand on a prepared dir; returns its exit status. */
static int run_supervisor(const char *dir) {
        pid_t c = fork();
        assert_true(c >= 0);
        if (c == 0) {
                execl(self_exe, self_exe, "__supervise", dir, (char *)NULL);
                _exit(126);
        }
        int64_t until = gp_mono_ms() + 10000;
        int st;
        pid_t w;
        while ((w = waitpid(c, &st, WNOHANG)) == 0 && gp_mono_ms() < until)
                sleep_ms(10);
        if (w == 0) {
                kill(c, SIGKILL);
                waitpid(c, NULL, 0);
                fail_msg("supervisor on %s did not exit", dir);
        }
        assert_true(WIFEXITED(st));   /* not a crash */
        return WEXITSTATUS(st);
}

#define VALID_REST "\"env\":[],\"workdir\":\"\",\"cuda_visible_devices\":\"\",\"gpus\":\"\"," \
                   "\"task_id\":1,\"timeout_s\":0,\"kill_grace_s\":1"

static void test_bad_spec_json_gives_spawn_failed_and_nonzero_exit(void **state) {
        fixture *f = *state;
        static const struct {
                const char *spec;
                const char *msg;     /* expected message prefix */
        } cases[] = {
                {"{not json", "invalid spec.json:"},
                {"[]", "invalid spec.json: not an object"},
                {"{\"argv\":[]," VALID_REST ",\"max_log_bytes\":10}", "invalid spec.json: argv is empty"},
                {"{\"argv\":[\"\"]," VALID_REST ",\"max_log_bytes\":10}", "invalid spec.json: argv"},
                {"{\"argv\":[1]," VALID_REST ",\"max_log_bytes\":10}", "invalid spec.json: argv"},
                {"{\"argv\":\"true\"," VALID_REST ",\"max_log_bytes\":10}", "invalid spec.json: argv"},
                {"{\"argv\":[\"true\"]," VALID_REST "}", "invalid spec.json: max_log_bytes"},
                {"{\"argv\":[\"true\"]," VALID_REST ",\"max_log_bytes\":0}",
                 "invalid spec.json: max_log_bytes"},
                {"{\"argv\":[\"true\"],\"env\":[\"X\"],\"workdir\":\"\",\"cuda_visible_devices\":\"\","
                 "\"gpus\":\"\",\"task_id\":1,\"timeout_s\":0,\"kill_grace_s\":1,\"max_log_bytes\":9}",
                 "invalid spec.json: env"},
                {"{\"argv\":[\"true\"],\"argv\":[\"true\"]," VALID_REST ",\"max_log_bytes\":9}",
                 "invalid spec.json:"},
                {"{\"argv\":[\"true\"],\"env\":[],\"workdir\":\"\",\"cuda_visible_devices\":\"\","
                 "\"gpus\":\"\",\"task_id\":1,\"timeout_s\":-5,\"kill_grace_s\":1,\"max_log_bytes\":9}",
                 "invalid spec.json: timeout_s"},
                {NULL, "cannot read spec.json: No such file or directory"},
        };
        char dir[PATH_MAX];
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                snprintf(dir, sizeof(dir), "%s/bad%zu", f->root, i);
                assert_int_equal(mkdir(dir, 0700), 0);
                if (cases[i].spec)
                        put_file(dir, "spec.json", cases[i].spec, strlen(cases[i].spec));
                assert_int_equal(run_supervisor(dir), 1);
                gp_exec_result res;
                assert_int_equal(gp_exec_read_result(dir, &res), 0);
                assert_int_equal(res.end, GP_EXEC_SPAWN_FAILED);
                assert_int_equal(res.exit_code, 127);
                if (strncmp(res.message, cases[i].msg, strlen(cases[i].msg)) != 0)
                        fail_msg("case %zu: message \"%s\", want \"%s...\"", i, res.message,
                                 cases[i].msg);
                gp_exec_proc p;
                assert_int_equal(gp_exec_read_pidfile(dir, &p), 0);
        }

        /* too many argv entries */
        {
                size_t cap = 4097 * 4 + 512;
                char *big = malloc(cap);
                assert_non_null(big);
                size_t len = (size_t)snprintf(big, cap, "{\"argv\":[\"true\"");
                for (int i = 1; i < 4097; i++)
                        len += (size_t)snprintf(big + len, cap - len, ",\"x\"");
                len += (size_t)snprintf(big + len, cap - len, "]," VALID_REST ",\"max_log_bytes\":9}");
                assert_true(len < cap);
                snprintf(dir, sizeof(dir), "%s/manyargs", f->root);
                assert_int_equal(mkdir(dir, 0700), 0);
                put_file(dir, "spec.json", big, len);
                free(big);
                assert_int_equal(run_supervisor(dir), 1);
                gp_exec_result res;
                assert_int_equal(gp_exec_read_result(dir, &res), 0);
                assert_int_equal(res.end, GP_EXEC_SPAWN_FAILED);
                assert_string_equal(res.message, "invalid spec.json: argv has too many entries");
        }

        /* larger than 1 MiB */
        {
                size_t cap = (1 << 20) + 4096;
                char *big = malloc(cap);
                assert_non_null(big);
                size_t len = (size_t)snprintf(big, cap, "{\"argv\":[\"true\",\"");
                memset(big + len, 'a', (1 << 20));
                len += 1 << 20;
                len += (size_t)snprintf(big + len, cap - len, "\"]," VALID_REST ",\"max_log_bytes\":9}");
                snprintf(dir, sizeof(dir), "%s/huge", f->root);
                assert_int_equal(mkdir(dir, 0700), 0);
                put_file(dir, "spec.json", big, len);
                free(big);
                assert_int_equal(run_supervisor(dir), 1);
                gp_exec_result res;
                assert_int_equal(gp_exec_read_result(dir, &res), 0);
                assert_int_equal(res.end, GP_EXEC_SPAWN_FAILED);
                assert_string_equal(res.message, "spec.json is larger than 1048576 bytes");
        }

        /* no task dir at all: nothing to write into, non-zero exit, no crash */
        snprintf(dir, sizeof(dir), "%s/absent", f->root);
        assert_int_equal(run_supervisor(dir), 1);
}

/* Exit status 0 whenever result.json was written, whatever the task did.
 * Run by hand so that, under ASan, a leak in the supervisor (LeakSanitizer
 * exits non-zero) fails this test. */
static void test_supervisor_run_by_hand_exits_zero_after_writing_result(void **state) {
        fixture *f = *state;
        static const struct {
                const char *argv;
                const char *rest;
                gp_exec_end end;
                const char *msg;
        } cases[] = {
                {"[\"sh\",\"-c\",\"echo hi\"]", "\"timeout_s\":0,\"kill_grace_s\":1",
                 GP_EXEC_EXITED, "exited with code 0"},
                {"[\"gp-no-such-command\"]", "\"timeout_s\":0,\"kill_grace_s\":1",
                 GP_EXEC_SPAWN_FAILED, "cannot run 'gp-no-such-command': No such file or directory"},
                /* grace 0: SIGTERM and SIGKILL at once */
                {"[\"sh\",\"-c\",\"trap '' TERM; sleep 30\"]", "\"timeout_s\":1,\"kill_grace_s\":0",
                 GP_EXEC_TIMEOUT, "timed out after 1 s"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char dir[PATH_MAX], spec[512];
                snprintf(dir, sizeof(dir), "%s/byhand%zu", f->root, i);
                assert_int_equal(mkdir(dir, 0700), 0);
                int n = snprintf(spec, sizeof(spec),
                                 "{\"argv\":%s,\"env\":[\"A=b\"],\"workdir\":\"\","
                                 "\"cuda_visible_devices\":\"0\",\"gpus\":\"local:0\","
                                 "\"task_id\":3,%s,\"max_log_bytes\":4096}",
                                 cases[i].argv, cases[i].rest);
                put_file(dir, "spec.json", spec, (size_t)n);
                int64_t t0 = gp_mono_ms();
                assert_int_equal(run_supervisor(dir), 0);
                gp_exec_result res;
                assert_int_equal(gp_exec_read_result(dir, &res), 0);
                assert_int_equal(res.end, cases[i].end);
                assert_string_equal(res.message, cases[i].msg);
                if (cases[i].end == GP_EXEC_TIMEOUT) {
                        assert_int_equal(res.signal, SIGKILL);
                        assert_true(gp_mono_ms() - t0 < 3000);
                }
        }
}

int main(int argc, char **argv) {
        if (argc >= 3 && strcmp(argv[1], "__supervise") == 0)
                return gp_exec_supervise_main(argv[2]);
        ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
        if (n <= 0) {
                perror("readlink /proc/self/exe");
                return 1;
        }
        self_exe[n] = '\0';
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        const struct CMUnitTest tests[] = {
                T(test_exit_code_and_both_streams_are_logged),
                T(test_log_name_puts_the_output_in_that_file_only),
                T(test_command_killed_by_signal_is_signaled),
                T(test_env_has_gpu_vars_spec_env_and_inherited_env),
                T(test_clean_env_inherits_nothing_and_gives_the_users_basics),
                T(test_command_is_looked_up_in_its_own_path),
                T(test_workdir_default_absolute_and_relative),
                T(test_missing_workdir_is_spawn_failed),
                T(test_nonexistent_command_is_spawn_failed_with_message),
                T(test_timeout_terminates_sleep),
                T(test_timeout_kills_child_that_traps_sigterm_after_grace),
                T(test_cancel_kills_the_whole_process_group),
                T(test_cancel_escalates_to_sigkill_after_grace),
                T(test_preempt_uses_the_preemption_grace_and_says_preempted),
                T(test_fence_stops_the_command_once_the_deadline_passed),
                T(test_fence_passed_or_missing_starts_nothing),
                T(test_fence_file_round_trip_and_bad_content),
                T(test_notify_sends_the_configured_signal_after_alloc_is_written),
                T(test_notify_spares_a_task_that_does_not_catch_the_signal),
                T(test_start_rejects_uncatchable_notify_signal),
                T(test_log_is_capped_with_one_marker_and_task_finishes),
                T(test_task_completes_after_its_starter_is_killed),
                T(test_supervisor_ignores_sighup_and_sigpipe),
                T(test_watch_fd_becomes_readable_when_supervisor_exits),
                T(test_pidfile_with_wrong_start_time_is_not_alive),
                T(test_start_time_parse_survives_odd_comm),
                T(test_pidfile_garbage_is_einval_and_missing_is_enoent),
                T(test_read_result_is_strict),
                T(test_start_rejects_invalid_spec_and_starts_nothing),
                T(test_start_refuses_dir_of_live_supervisor_and_replaces_stale_result),
                T(test_bad_spec_json_gives_spawn_failed_and_nonzero_exit),
                T(test_supervisor_run_by_hand_exits_zero_after_writing_result),
        };
#undef T
        return cmocka_run_group_tests(tests, NULL, NULL);
}
