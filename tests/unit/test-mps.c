/* test-mps.c - exec/mps.h against the stand-in nvidia-cuda-mps-control
 * (tests/mps/, a script that behaves as NVIDIA documents the control
 * daemon): a daemon starts, is found, refuses a twin, quits; a program
 * that fails or is missing is said so; stale and foreign pid files are no
 * daemon.  Real processes in a temporary directory; every wait has a
 * deadline.  Run from the repository root (make does). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "exec/mps.h"
#include "exec/mps-pool.h"
#include "base/err.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char standin[PATH_MAX];

typedef struct fixture {
        char root[64];
        char pipe[128], log[128], record[128];
} fixture;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        (void)st, (void)flag, (void)ftw;
        return remove(p);
}

static int setup(void **state) {
        fixture *f = calloc(1, sizeof(*f));
        snprintf(f->root, sizeof(f->root), "/tmp/gp-test-mps-XXXXXX");
        if (!f || !mkdtemp(f->root))
                return -1;
        snprintf(f->pipe, sizeof(f->pipe), "%s/0/pipe", f->root);
        snprintf(f->log, sizeof(f->log), "%s/0/log", f->root);
        snprintf(f->record, sizeof(f->record), "%s/record", f->root);
        setenv("FAKE_MPS_RECORD", f->record, 1);
        unsetenv("FAKE_MPS_FAIL");
        *state = f;
        return 0;
}

/* Kill a daemon a failed test left, then remove the directory. */
static int teardown(void **state) {
        fixture *f = *state;
        int64_t pid;
        if (gp_mps_daemon_find(f->pipe, &pid) == 0)
                kill((pid_t)pid, SIGKILL);
        nftw(f->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(f);
        return 0;
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Lines of the record holding needle. */
static int record_count(const fixture *f, const char *needle) {
        FILE *fp = fopen(f->record, "r");
        char line[4096];
        int n = 0;
        while (fp && fgets(line, sizeof(line), fp))
                n += strstr(line, needle) != NULL;
        if (fp)
                fclose(fp);
        return n;
}

static void test_mps_daemon_starts_is_found_refuses_a_twin_and_quits(void **state) {
        fixture *f = *state;
        char err[512] = "";
        int64_t pid = 0, found = 0, again = 0, qpid = 0;
        int rc = gp_mps_daemon_start(standin, f->pipe, f->log, "GPU-1234", &pid, err, sizeof(err));
        assert_int_equal(rc, 0);
        assert_true(pid > 0);
        assert_int_equal(kill((pid_t)pid, 0), 0);
        assert_int_equal(gp_mps_daemon_find(f->pipe, &found), 0);
        assert_int_equal(found, pid);
        /* its environment, as recorded by the daemon itself */
        assert_int_equal(record_count(f, "\"event\": \"start\""), 1);
        assert_int_equal(record_count(f, "\"CUDA_VISIBLE_DEVICES\": \"GPU-1234\""), 1);
        /* one daemon per pipe directory: the second `-d` is refused, as NVIDIA's is */
        rc = gp_mps_daemon_start(standin, f->pipe, f->log, "GPU-1234", &again, err, sizeof(err));
        assert_int_equal(rc, -EIO);
        assert_non_null(strstr(err, "exited with 1: An instance of this daemon is already running"));
        assert_int_equal(gp_mps_daemon_find(f->pipe, &found), 0);
        assert_int_equal(found, pid);
        /* quit: the front end is our child, reaped; the daemon goes */
        assert_int_equal(gp_mps_daemon_quit(standin, f->pipe, &qpid), 0);
        int st = -1, r = 0;
        for (int64_t end = now_ms() + 10000; now_ms() < end && (r = gp_mps_reap(qpid, &st)) == 0;)
                usleep(10000);
        assert_int_equal(r, 1);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        for (int64_t end = now_ms() + 10000; now_ms() < end && kill((pid_t)pid, 0) == 0;)
                usleep(10000);
        assert_int_not_equal(kill((pid_t)pid, 0), 0);
        assert_int_equal(gp_mps_daemon_find(f->pipe, &found), -ENOENT);
        assert_int_equal(record_count(f, "\"command\": \"quit\""), 1);
        assert_int_equal(gp_mps_reap(qpid, NULL), -ECHILD); /* reaped once */
}

static void test_mps_daemon_that_fails_or_is_missing_says_why(void **state) {
        fixture *f = *state;
        char err[512] = "";
        int64_t pid = 0;
        setenv("FAKE_MPS_FAIL", "no NVIDIA driver here", 1);
        int rc = gp_mps_daemon_start(standin, f->pipe, f->log, "0", &pid, err, sizeof(err));
        unsetenv("FAKE_MPS_FAIL");
        assert_int_equal(rc, -EIO);
        assert_non_null(strstr(err, "-d` exited with 1: no NVIDIA driver here"));
        assert_int_equal(gp_mps_daemon_find(f->pipe, &pid), -ENOENT);
        char missing[256];
        snprintf(missing, sizeof(missing), "%s/no-such-mps-control", f->root);
        rc = gp_mps_daemon_start(missing, f->pipe, f->log, "0", &pid, err, sizeof(err));
        assert_int_equal(rc, -ENOENT);
        assert_non_null(strstr(err, "no-such-mps-control: not found"));
        rc = gp_mps_daemon_start("gp-no-such-mps-control-on-path", f->pipe, f->log, "0", &pid, err, sizeof(err));
        assert_int_equal(rc, -ENOENT);
        int64_t q;
        assert_int_equal(gp_mps_daemon_quit(missing, f->pipe, &q), -ENOENT);
}

static void write_pidfile(const fixture *f, long pid) {
        char path[256];
        mkdir(f->root, 0700);
        snprintf(path, sizeof(path), "%s/0", f->root);
        mkdir(path, 0700);
        mkdir(f->pipe, 0700);
        snprintf(path, sizeof(path), "%s/%s", f->pipe, GP_MPS_PID_FILE);
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fprintf(fp, "%ld\n", pid);
        fclose(fp);
}

static void test_mps_stale_or_foreign_pid_file_is_no_daemon(void **state) {
        fixture *f = *state;
        int64_t pid;
        assert_int_equal(gp_mps_daemon_find(f->pipe, &pid), -ENOENT); /* none */
        write_pidfile(f, (long)getpid());                             /* a live process, but not the control daemon */
        assert_int_equal(gp_mps_daemon_find(f->pipe, &pid), -ENOENT);
        pid_t child = fork();
        if (child == 0)
                _exit(0);
        waitpid(child, NULL, 0);
        write_pidfile(f, (long)child); /* dead */
        assert_int_equal(gp_mps_daemon_find(f->pipe, &pid), -ENOENT);
        write_pidfile(f, -5); /* garbage */
        assert_int_equal(gp_mps_daemon_find(f->pipe, &pid), -ENOENT);
        /* a stale pid file does not stop a new daemon */
        write_pidfile(f, (long)child);
        char err[512];
        assert_int_equal(gp_mps_daemon_start(standin, f->pipe, f->log, "0", &pid, err, sizeof(err)), 0);
        int64_t q;
        assert_int_equal(gp_mps_daemon_quit(standin, f->pipe, &q), 0);
        for (int64_t end = now_ms() + 10000; now_ms() < end && gp_mps_reap(q, NULL) == 0;)
                usleep(10000);
}

static bool need_gpu0(void *ud, bool *needed) {
        needed[0] = *(bool *)ud;
        return true;
}

static int64_t pool_pid(gp_mps_pool *p, int i) {
        int64_t pid = 0;
        gp_mps_pool_state(p, i, &pid, NULL, 0);
        return pid;
}

static void test_mps_pool_starts_once_quits_unneeded_and_adopts_after_a_restart(void **state) {
        fixture *f = *state;
        char err[512] = "", pipe[PATH_MAX], log[PATH_MAX];
        gp_mps_pool *p;
        assert_int_equal(gp_mps_pool_new(f->root, standin, &p, err, sizeof(err)), 0);
        assert_int_equal(gp_mps_pool_state(p, 0, NULL, NULL, 0), GP_MPS_STOPPED);
        assert_int_equal(gp_mps_pool_ensure(p, 0, "GPU-0", pipe, log, sizeof(pipe)), 0);
        assert_int_equal(gp_mps_pool_ensure(p, 0, "GPU-0", pipe, log, sizeof(pipe)), 0); /* running: not again */
        assert_int_equal(record_count(f, "\"event\": \"start\""), 1);
        assert_non_null(strstr(pipe, "/0/pipe"));
        int64_t pid = pool_pid(p, 0);
        assert_int_equal(gp_mps_pool_state(p, 0, NULL, NULL, 0), GP_MPS_RUNNING);
        bool need = true;
        int64_t now = 1000;
        gp_mps_pool_look(p, now, need_gpu0, &need); /* a client: it stays */
        assert_int_equal(kill((pid_t)pid, 0), 0);
        /* the pool is dropped (a restart): a new one adopts the live daemon */
        gp_mps_pool_free(p);
        assert_int_equal(gp_mps_pool_new(f->root, standin, &p, err, sizeof(err)), 0);
        gp_mps_pool_look(p, now, need_gpu0, &need);
        assert_int_equal(gp_mps_pool_state(p, 0, NULL, NULL, 0), GP_MPS_RUNNING);
        assert_int_equal(pool_pid(p, 0), pid);
        /* no client left: told to quit, then seen gone */
        need = false;
        gp_mps_pool_look(p, now += 1000, need_gpu0, &need);
        for (int64_t end = now_ms() + 10000; now_ms() < end && kill((pid_t)pid, 0) == 0;)
                usleep(10000);
        assert_int_not_equal(kill((pid_t)pid, 0), 0);
        gp_mps_pool_look(p, now += 1000, need_gpu0, &need);
        assert_int_equal(gp_mps_pool_state(p, 0, NULL, NULL, 0), GP_MPS_STOPPED);
        assert_int_equal(record_count(f, "\"command\": \"quit\""), 1);
        /* a daemon that died while nobody watched: its pipe dir is cleared at the next start of a pool */
        assert_int_equal(gp_mps_pool_ensure(p, 0, "GPU-0", pipe, log, sizeof(pipe)), 0);
        pid = pool_pid(p, 0);
        kill((pid_t)pid, SIGKILL);
        for (int64_t end = now_ms() + 10000; now_ms() < end && kill((pid_t)pid, 0) == 0;)
                usleep(10000);
        gp_mps_pool_free(p);
        char pidfile[PATH_MAX + 64];
        snprintf(pidfile, sizeof(pidfile), "%s/%s", pipe, GP_MPS_PID_FILE);
        assert_int_equal(access(pidfile, F_OK), 0); /* left behind */
        assert_int_equal(gp_mps_pool_new(f->root, standin, &p, err, sizeof(err)), 0);
        gp_mps_pool_look(p, now, need_gpu0, &need);
        assert_int_not_equal(access(pidfile, F_OK), 0);
        assert_int_equal(gp_mps_pool_state(p, 0, NULL, NULL, 0), GP_MPS_STOPPED);
        gp_mps_pool_free(p);
}

static void test_mps_pool_failed_start_is_kept_with_its_reason(void **state) {
        fixture *f = *state;
        char err[512] = "", pipe[PATH_MAX], log[PATH_MAX];
        gp_mps_pool *p;
        assert_int_equal(gp_mps_pool_new(f->root, standin, &p, err, sizeof(err)), 0);
        assert_int_equal(gp_mps_pool_ensure(p, GP_MPS_MAX_GPUS, "x", pipe, log, sizeof(pipe)), -EINVAL);
        setenv("FAKE_MPS_FAIL", "stand-in says no", 1);
        assert_int_equal(gp_mps_pool_ensure(p, 3, "GPU-3", pipe, log, sizeof(pipe)), -GP_EMPS);
        unsetenv("FAKE_MPS_FAIL");
        assert_int_equal(gp_mps_pool_state(p, 3, NULL, err, sizeof(err)), GP_MPS_FAILED);
        assert_non_null(strstr(err, "exited with 1: stand-in says no"));
        /* the next client tries again */
        assert_int_equal(gp_mps_pool_ensure(p, 3, "GPU-3", pipe, log, sizeof(pipe)), 0);
        assert_int_equal(gp_mps_pool_state(p, 3, NULL, err, sizeof(err)), GP_MPS_RUNNING);
        assert_string_equal(err, "");
        int64_t q;
        assert_int_equal(gp_mps_daemon_quit(standin, pipe, &q), 0);
        for (int64_t end = now_ms() + 10000; now_ms() < end && gp_mps_reap(q, NULL) == 0;)
                usleep(10000);
        gp_mps_pool_free(p);
}

int main(void) {
        if (!realpath("tests/mps/nvidia-cuda-mps-control", standin)) {
                fprintf(stderr, "test-mps: run from the repository root (tests/mps/ not found)\n");
                return 1;
        }
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_mps_daemon_starts_is_found_refuses_a_twin_and_quits, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_mps_daemon_that_fails_or_is_missing_says_why, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mps_stale_or_foreign_pid_file_is_no_daemon, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mps_pool_starts_once_quits_unneeded_and_adopts_after_a_restart,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_mps_pool_failed_start_is_kept_with_its_reason, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
