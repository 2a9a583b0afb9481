/* exec.c - batch tasks run under a supervisor that outlives the daemon.
 *
 * Two halves live here (design: docs/internals/exec.md):
 *  - the daemon side (gp_exec_start, _read_pidfile, _alive, _watch, _cancel,
 *    _read_result): keeps no state, never logs, may be called from any
 *    thread; between fork and exec it makes only async-signal-safe calls;
 *  - the supervisor (gp_exec_supervise_main), a process of its own started
 *    as "SELF_EXE __supervise TASK_DIR".  It is single-threaded, a session
 *    leader (setsid by its starter), a child subreaper, and owns the task's
 *    process group until it has written result.json.
 *
 * Invariants:
 *  - every file in TASK_DIR except the append-only log is replaced
 *    atomically (write NAME.tmp, fsync, rename, fsync the directory), so a
 *    reader sees either nothing or a complete file;
 *  - the supervisor blocks SIGTERM/SIGINT before it writes supervisor.pid,
 *    so a cancel can never kill it without a result;
 *  - result.json is written only after the command has been reaped and its
 *    process group emptied (bounded wait), so when result.json exists the
 *    task's processes are gone (except ones that left the group, see doc);
 *  - every size read from TASK_DIR is bounded (spec.json 1 MiB, result.json
 *    64 KiB, supervisor.pid 64 bytes, /proc/PID/stat 4 KiB).
 */
#include "exec/exec.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/user.h"
#include "base/util.h"
#include "exec/fence.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SPEC_NAME "spec.json"
#define PIDFILE_NAME "supervisor.pid"
#define RESULT_NAME "result.json"
#define ALLOC_NAME "alloc.json"
#define LOG_NAME "log"  /* the output's file when the spec names none (log_name: another, <= 64 bytes) */
#define WORK_NAME "work"                   /* the command's start dir under run_as */

#define SPEC_MAX_BYTES ((size_t)1 << 20)   /* spec.json, both when written and read */
#define SPEC_MAX_ARGS 4096                 /* argv entries */
#define SPEC_MAX_ENV 4096                  /* extra env entries */
#define RESULT_MAX_BYTES ((size_t)64 << 10)
#define PIDFILE_MAX_BYTES 64
#define STAT_MAX_BYTES 4096
#define TIMEOUT_MAX_S ((int64_t)100 * 365 * 86400)
#define GRACE_MAX_S 86400
#define START_WAIT_MS 5000                 /* gp_exec_start: supervisor.pid must appear */
#define GROUP_WAIT_MS 5000                 /* command ended: wait for its group to empty */
#define DRAIN_WAIT_MS 1000                 /* then for EOF on the output pipe */
#define RESULT_RETRY_S 86400              /* result.json on a full disk: tries, one a second */
#define ARG_SHOW_MAX 96                    /* bytes of argv[0]/workdir quoted in messages */

extern char **environ;

/* ---- small helpers shared by both halves ---- */

static int write_all(int fd, const void *p, size_t n) {
        const char *c = p;
        while (n > 0) {
                ssize_t w = write(fd, c, n);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                c += w;
                n -= (size_t)w;
        }
        return 0;
}

/* Move fd to a number >= 3 (keeping O_CLOEXEC) so it never collides with
 * stdio in a child.  Consumes fd. */
static int fd_above_stdio(int fd) {
        if (fd < 0 || fd > 2)
                return fd;
        int n = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        int e = errno;
        close(fd);
        if (n < 0)
                return -e;
        return n;
}

/* Read NAME in dirfd, at most max bytes, into a NUL-terminated heap buffer.
 * 0, -ENOENT, -EFBIG (larger than max), -EINVAL (not a regular file), -errno. */
static int read_bounded_at(int dirfd, const char *name, size_t max, char **ret_data,
                           size_t *ret_len) {
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0)
                return errno == ELOOP ? -EINVAL : -errno;
        int r;
        char *data = NULL;
        struct stat st;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                goto out_close;
        }
        if (!S_ISREG(st.st_mode)) {
                r = -EINVAL;
                goto out_close;
        }
        if (st.st_size < 0 || (uint64_t)st.st_size > max) {
                r = -EFBIG;
                goto out_close;
        }
        data = malloc(max + 1);
        if (!data) {
                r = -ENOMEM;
                goto out_close;
        }
        size_t len = 0;
        for (;;) {
                /* read one byte past max to notice a file that grew */
                ssize_t n = read(fd, data + len, max + 1 - len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        r = -errno;
                        goto out_free;
                }
                if (n == 0)
                        break;
                len += (size_t)n;
                if (len > max) {
                        r = -EFBIG;
                        goto out_free;
                }
        }
        data[len] = '\0';
        *ret_data = data;
        *ret_len = len;
        close(fd);
        return 0;
out_free:
        free(data);
out_close:
        close(fd);
        return r;
}

/* Replace NAME in dirfd with data: NAME.tmp, fsync, rename, fsync dir
 * (without the fsyncs when !sync: readers still see a whole file). */
static int write_replace_at(int dirfd, const char *name, const void *data, size_t len, bool sync) {
        char tmp[64];
        int n = snprintf(tmp, sizeof(tmp), "%s.tmp", name);
        if (n < 0 || (size_t)n >= sizeof(tmp))
                return -EINVAL;
        int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        int r = write_all(fd, data, len);
        if (r == 0 && sync && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0 && errno != EINTR)
                r = -errno;
        if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
                r = -errno;
        if (r < 0) {
                unlinkat(dirfd, tmp, 0);
                return r;
        }
        if (sync && fsync(dirfd) < 0)
                return -errno;
        return 0;
}

static int write_atomic_at(int dirfd, const char *name, const void *data, size_t len) {
        return write_replace_at(dirfd, name, data, len, true);
}

/* State (field 3) and start time (field 22) of /proc/PID/stat.  comm (field
 * 2) may contain spaces and ')', so parsing starts after the LAST ')'.
 * 0, -ESRCH (no such process), -EINVAL (unparsable), -errno. */
static int proc_stat(pid_t pid, char *ret_state, int64_t *ret_start) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        char buf[STAT_MAX_BYTES];
        size_t len = 0;
        for (;;) {
                ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        int e = errno;
                        close(fd);
                        return e == ESRCH ? -ESRCH : -e;
                }
                if (n == 0)
                        break;
                len += (size_t)n;
                if (len == sizeof(buf) - 1) {
                        close(fd);
                        return -EINVAL;
                }
        }
        close(fd);
        buf[len] = '\0';
        if (len == 0)
                return -ESRCH;
        char *p = memrchr(buf, ')', len);
        if (!p)
                return -EINVAL;
        p++;
        char state = 0;
        for (int field = 3; field <= 22; field++) {
                if (*p != ' ')
                        return -EINVAL;
                p++;
                char *tok = p;
                while (*p && *p != ' ' && *p != '\n')
                        p++;
                size_t tl = (size_t)(p - tok);
                if (tl == 0)
                        return -EINVAL;
                if (field == 3) {
                        if (tl != 1)
                                return -EINVAL;
                        state = tok[0];
                } else if (field == 22) {
                        char num[32];
                        if (tl >= sizeof(num))
                                return -EINVAL;
                        memcpy(num, tok, tl);
                        num[tl] = '\0';
                        int64_t start;
                        if (gp_parse_i64(num, 0, INT64_MAX, &start) < 0)
                                return -EINVAL;
                        if (ret_state)
                                *ret_state = state;
                        *ret_start = start;
                        return 0;
                }
        }
        return -EINVAL;
}

static bool proc_valid(const gp_exec_proc *p) {
        return p && p->pid > 0 && p->pid <= INT_MAX && p->start >= 0;
}

/* "PID START\n", nothing else. */
static int parse_pidfile(const char *s, size_t len, gp_exec_proc *ret) {
        char buf[PIDFILE_MAX_BYTES];
        if (len < 4 || len >= sizeof(buf) || s[len - 1] != '\n' || memchr(s, '\0', len))
                return -EINVAL;
        memcpy(buf, s, len - 1);
        buf[len - 1] = '\0';
        char *sp = strchr(buf, ' ');
        if (!sp)
                return -EINVAL;
        *sp = '\0';
        gp_exec_proc p;
        if (gp_parse_i64(buf, 1, INT_MAX, &p.pid) < 0 ||
            gp_parse_i64(sp + 1, 0, INT64_MAX, &p.start) < 0)
                return -EINVAL;
        *ret = p;
        return 0;
}

static int read_pidfile_at(int dirfd, gp_exec_proc *ret) {
        char *data;
        size_t len;
        int r = read_bounded_at(dirfd, PIDFILE_NAME, PIDFILE_MAX_BYTES, &data, &len);
        if (r == -EFBIG)
                return -EINVAL;
        if (r < 0)
                return r;
        r = parse_pidfile(data, len, ret);
        free(data);
        return r;
}

static int open_dir(const char *path) {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        // cppcheck-suppress resourceLeak ; the descriptor is what we return
        return fd < 0 ? -errno : fd;
}

/* ---- result.json ---- */

static const char *const end_names[] = {
        [GP_EXEC_EXITED] = "exited",
        [GP_EXEC_SIGNALED] = "signaled",
        [GP_EXEC_TIMEOUT] = "timeout",
        [GP_EXEC_CANCELLED] = "cancelled",
        [GP_EXEC_SPAWN_FAILED] = "spawn_failed",
        [GP_EXEC_FENCED] = "fenced",
};

static int json_int_field(json_t *o, const char *key, int64_t min, int64_t max, int64_t *ret) {
        json_t *v = json_object_get(o, key);
        if (!json_is_integer(v))
                return -EINVAL;
        json_int_t i = json_integer_value(v);
        if (i < min || i > max)
                return -EINVAL;
        *ret = (int64_t)i;
        return 0;
}

static int parse_result(const char *data, size_t len, gp_exec_result *ret) {
        json_error_t jerr;
        json_t *o = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!o)
                return -EINVAL;
        int r = -EINVAL;
        gp_exec_result res;
        memset(&res, 0, sizeof(res));
        if (!json_is_object(o))
                goto out;
        const char *end = json_string_value(json_object_get(o, "end"));
        if (!end)
                goto out;
        size_t i;
        for (i = 0; i < GP_ARRAY_SIZE(end_names); i++)
                if (strcmp(end, end_names[i]) == 0)
                        break;
        if (i == GP_ARRAY_SIZE(end_names))
                goto out;
        res.end = (gp_exec_end)i;
        int64_t code, sig, fin;
        if (json_int_field(o, "exit_code", 0, 255, &code) < 0 ||
            json_int_field(o, "signal", 0, 127, &sig) < 0 ||
            json_int_field(o, "finished_ms", 0, INT64_MAX, &fin) < 0)
                goto out;
        if (res.end == GP_EXEC_EXITED && sig != 0)
                goto out;
        res.exit_code = (int)code;
        res.signal = (int)sig;
        res.finished_ms = fin;
        json_t *m = json_object_get(o, "message");
        if (!json_is_string(m) || json_string_length(m) >= sizeof(res.message))
                goto out;
        memcpy(res.message, json_string_value(m), json_string_length(m) + 1);
        *ret = res;
        r = 0;
out:
        json_decref(o);
        return r;
}

int gp_exec_read_result(const char *task_dir, gp_exec_result *ret) {
        if (!task_dir || !ret)
                return -EINVAL;
        int dirfd = open_dir(task_dir);
        if (dirfd < 0)
                return dirfd;
        char *data;
        size_t len;
        int r = read_bounded_at(dirfd, RESULT_NAME, RESULT_MAX_BYTES, &data, &len);
        close(dirfd);
        if (r == -EFBIG)
                return -EINVAL;
        if (r < 0)
                return r;
        r = parse_result(data, len, ret);
        free(data);
        return r;
}

/* ---- identity of a supervisor ---- */

int gp_exec_read_pidfile(const char *task_dir, gp_exec_proc *ret) {
        if (!task_dir || !ret)
                return -EINVAL;
        int dirfd = open_dir(task_dir);
        if (dirfd < 0)
                return dirfd;
        int r = read_pidfile_at(dirfd, ret);
        close(dirfd);
        return r;
}

bool gp_exec_alive(const gp_exec_proc *p) {
        if (!proc_valid(p))
                return false;
        char state;
        int64_t start;
        if (proc_stat((pid_t)p->pid, &state, &start) < 0)
                return false;
        /* a zombie has finished; nobody may reap it (e.g. a lazy init) */
        return start == p->start && state != 'Z' && state != 'X' && state != 'x';
}

/* pidfd for p, opened first and then checked against /proc so a reused pid
 * cannot slip in between. */
static int open_checked(const gp_exec_proc *p, bool need_running, int *ret_fd) {
        if (!proc_valid(p))
                return -EINVAL;
        int fd = (int)syscall(SYS_pidfd_open, (pid_t)p->pid, 0);
        if (fd < 0)
                return errno == ESRCH ? -ESRCH : -errno;
        char state;
        int64_t start;
        int r = proc_stat((pid_t)p->pid, &state, &start);
        if (r == 0 && start != p->start)
                r = -ESRCH;
        if (r == 0 && need_running && (state == 'Z' || state == 'X' || state == 'x'))
                r = -ESRCH;
        if (r < 0) {
                close(fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

int gp_exec_watch(const gp_exec_proc *p, int *ret_fd) {
        if (!ret_fd)
                return -EINVAL;
        return open_checked(p, false, ret_fd);
}

static int signal_supervisor(const gp_exec_proc *p, int sig) {
        int fd;
        int r = open_checked(p, true, &fd);
        if (r < 0)
                return r;
        if (syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) < 0)
                r = errno == ESRCH ? -ESRCH : -errno;
        close(fd);
        return r;
}

int gp_exec_cancel(const gp_exec_proc *p) {
        return signal_supervisor(p, SIGTERM);
}

int gp_exec_preempt(const gp_exec_proc *p) {
        return signal_supervisor(p, SIGUSR2);
}

int gp_exec_notify(const gp_exec_proc *p) {
        return signal_supervisor(p, SIGUSR1);
}

static int mkdir_p(const char *path, mode_t mode);

int gp_exec_write_alloc(const char *task_dir, const char *data, size_t len) {
        if (!task_dir || !data || len > SPEC_MAX_BYTES)
                return -EINVAL;
        int r = mkdir_p(task_dir, 0700);
        if (r < 0)
                return r;
        int dirfd = open_dir(task_dir);
        if (dirfd < 0)
                return dirfd;
        r = write_atomic_at(dirfd, ALLOC_NAME, data, len);
        close(dirfd);
        return r;
}

/* ---- gp_exec_start ---- */

static int mkdir_p(const char *path, mode_t mode) {
        size_t n = strlen(path);
        char buf[PATH_MAX];
        if (n == 0 || n >= sizeof(buf))
                return -EINVAL;
        memcpy(buf, path, n + 1);
        for (char *p = buf + 1;; p++) {
                if (*p != '/' && *p != '\0')
                        continue;
                char c = *p;
                *p = '\0';
                if (mkdir(buf, mode) < 0 && errno != EEXIST)
                        return -errno;
                *p = c;
                if (c == '\0')
                        break;
        }
        return 0;
}

static int add_strings(json_t *o, const char *key, const char *const *v, size_t max,
                       bool need_eq) {
        json_t *a = json_array();
        if (!a || json_object_set_new(o, key, a) < 0)
                return -ENOMEM;
        for (size_t i = 0; v && v[i]; i++) {
                if (i >= max)
                        return -EINVAL;
                if (need_eq) {
                        const char *eq = strchr(v[i], '=');
                        if (!eq || eq == v[i])
                                return -EINVAL;
                }
                json_t *s = json_string(v[i]);
                if (!s)
                        return -EINVAL;   /* not UTF-8 (or out of memory) */
                if (json_array_append_new(a, s) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int set_str(json_t *o, const char *key, const char *v) {
        json_t *s = json_string(v ? v : "");
        if (!s)
                return -EINVAL;
        return json_object_set_new(o, key, s) < 0 ? -ENOMEM : 0;
}

static int set_int(json_t *o, const char *key, int64_t v) {
        json_t *i = json_integer((json_int_t)v);
        if (!i)
                return -ENOMEM;
        return json_object_set_new(o, key, i) < 0 ? -ENOMEM : 0;
}

/* A signal a task may be told about resizes with: catchable, not one the
 * supervisor relies on for itself. */
static bool notify_ok(int sig) {
        return sig == 0 || (sig > 0 && sig < NSIG && sig != SIGKILL && sig != SIGSTOP && sig != SIGCHLD);
}

/* A log file name a spec may carry: a plain name in the task dir. */
static bool log_name_ok(const char *n) {
        size_t len = strlen(n);
        return len > 0 && len <= 64 && !strchr(n, '/') && strcmp(n, ".") && strcmp(n, "..");
}

static int spec_dump(const gp_exec_spec *s, char **ret) {
        if (!s->argv || !s->argv[0] || !s->argv[0][0] || s->task_id <= 0 || s->timeout_s < 0 ||
            s->timeout_s > TIMEOUT_MAX_S || s->kill_grace_s < 0 || s->kill_grace_s > GRACE_MAX_S ||
            s->preempt_grace_s < 0 || s->preempt_grace_s > GRACE_MAX_S || !notify_ok(s->notify_signal) ||
            s->max_log_bytes <= 0 || (s->log_name && s->log_name[0] && !log_name_ok(s->log_name)) ||
            (s->fence_file && s->fence_file[0] && s->fence_file[0] != '/') ||
            (s->run_as && s->run_as[0] && !gp_user_name_ok(s->run_as, strlen(s->run_as))))
                return -EINVAL;
        json_t *o = json_object();
        if (!o)
                return -ENOMEM;
        int r;
        if ((r = add_strings(o, "argv", s->argv, SPEC_MAX_ARGS, false)) < 0 ||
            (r = add_strings(o, "env", s->env, SPEC_MAX_ENV, true)) < 0 ||
            (r = set_str(o, "workdir", s->workdir)) < 0 ||
            (r = set_str(o, "cuda_visible_devices", s->cuda_visible_devices)) < 0 ||
            (r = set_str(o, "gpus", s->gpus)) < 0 ||
            (r = set_int(o, "task_id", s->task_id)) < 0 ||
            (r = set_int(o, "timeout_s", s->timeout_s)) < 0 ||
            (r = set_int(o, "kill_grace_s", s->kill_grace_s)) < 0 ||
            (r = set_int(o, "preempt_grace_s", s->preempt_grace_s)) < 0 ||
            (r = set_int(o, "notify_signal", s->notify_signal ? s->notify_signal : SIGUSR1)) < 0 ||
            (r = set_int(o, "max_log_bytes", s->max_log_bytes)) < 0 ||
            (r = set_str(o, "run_as", s->run_as)) < 0 ||
            (s->log_name && s->log_name[0] && (r = set_str(o, "log_name", s->log_name)) < 0) ||
            (s->fence_file && s->fence_file[0] && (r = set_str(o, "fence_file", s->fence_file)) < 0) ||
            (s->clean_env && (r = json_object_set_new(o, "clean_env", json_true()) ? -ENOMEM : 0) < 0) ||
            (r = gp_notice_spec_set(o, &s->notice)) < 0 || (r = gp_cgroup_limits_set(o, &s->limits)) < 0 ||
            (s->array_id > 0 && ((r = set_int(o, "array_id", s->array_id)) < 0 ||
                                 (r = set_int(o, "array_index", s->array_index)) < 0)))
                goto out;
        char *d = json_dumps(o, JSON_COMPACT);
        if (!d) {
                r = -ENOMEM;
                goto out;
        }
        if (strlen(d) > SPEC_MAX_BYTES) {
                free(d);
                r = -EINVAL;
                goto out;
        }
        *ret = d;
        r = 0;
out:
        json_decref(o);
        return r;
}

/* What the intermediate child and the supervisor-to-be tell gp_exec_start
 * through a CLOEXEC pipe (each message is one atomic write). */
enum { MSG_PID = 1, MSG_FORK_ERR, MSG_SETSID_ERR, MSG_CLOSE_ERR, MSG_EXEC_ERR };
typedef struct start_msg {
        int kind;                    /* MSG_* */
        int val;                     /* pid for MSG_PID, else errno */
} start_msg;

static void send_msg(int fd, int kind, int val) {
        start_msg m = {.kind = kind, .val = val};
        ssize_t w;
        do
                w = write(fd, &m, sizeof(m));
        while (w < 0 && errno == EINTR);
}

/* Runs in the forked child of a possibly multi-threaded daemon: only
 * async-signal-safe calls; everything it needs was prepared before fork. */
static void __attribute__((noreturn))
start_child(int msg_w, int devnull, const char *exe, char *const *argv, const sigset_t *empty) {
        if (setsid() < 0) {
                send_msg(msg_w, MSG_SETSID_ERR, errno);
                _exit(1);
        }
        pid_t pid = _Fork();   /* async-signal-safe, unlike fork() */
        if (pid < 0) {
                send_msg(msg_w, MSG_FORK_ERR, errno);
                _exit(1);
        }
        if (pid > 0) {
                send_msg(msg_w, MSG_PID, (int)pid);
                _exit(0);
        }
        /* the supervisor-to-be: no controlling terminal, not our child */
        sigprocmask(SIG_SETMASK, empty, NULL);
        dup2(devnull, STDIN_FILENO);
        dup2(devnull, STDOUT_FILENO);
        /* stderr stays: the supervisor reports setup failures there */
        if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
                send_msg(msg_w, MSG_CLOSE_ERR, errno);
                _exit(127);
        }
        execv(exe, argv);
        send_msg(msg_w, MSG_EXEC_ERR, errno);
        _exit(127);
}

static int64_t ms_left(int64_t deadline) {
        int64_t left = deadline - gp_mono_ms();
        return left < 0 ? 0 : left;
}

/* Collect the messages until EOF (the supervisor exec'd or died) or the
 * deadline.  Returns 0 with *ret_pid set, or the error reported. */
static int read_start_msgs(int msg_r, int64_t deadline, pid_t *ret_pid) {
        pid_t pid = 0;
        int err = 0;
        for (;;) {
                struct pollfd pfd = {.fd = msg_r, .events = POLLIN};
                int n = poll(&pfd, 1, (int)ms_left(deadline));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return err ? err : -ETIMEDOUT;
                start_msg m;
                ssize_t got = read(msg_r, &m, sizeof(m));
                if (got < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return -errno;
                }
                if (got == 0)
                        break;
                if (got != sizeof(m))
                        return -EIO;
                if (m.kind == MSG_PID)
                        pid = (pid_t)m.val;
                else if (!err)
                        err = m.val > 0 ? -m.val : -EIO;
        }
        if (err)
                return err;
        if (pid <= 0)
                return -EIO;   /* the intermediate child died before forking */
        *ret_pid = pid;
        return 0;
}

/* Wait until supervisor.pid names pid.  pidfd (the supervisor's, or -1 if
 * none could be opened) tells us early when it died first. */
static int wait_pidfile(int dirfd, pid_t pid, int pidfd, int64_t deadline, gp_exec_proc *ret) {
        int sleep_ms = 1;
        for (;;) {
                gp_exec_proc p;
                if (read_pidfile_at(dirfd, &p) == 0 && p.pid == pid) {
                        *ret = p;
                        return 0;
                }
                if (ms_left(deadline) == 0)
                        return -ETIMEDOUT;
                int t = (int)(ms_left(deadline) < sleep_ms ? ms_left(deadline) : sleep_ms);
                struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
                if (pidfd < 0) {
                        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)t * 1000000L};
                        nanosleep(&ts, NULL);
                } else if (poll(&pfd, 1, t) > 0) {
                        /* exited: one last look, it may have written the file */
                        if (read_pidfile_at(dirfd, &p) == 0 && p.pid == pid) {
                                *ret = p;
                                return 0;
                        }
                        return -EIO;
                }
                if (sleep_ms < 20)
                        sleep_ms *= 2;
        }
}

/* A new start in task dir dirfd: refused (-EBUSY) while a live supervisor
 * still owns it (once it has written result.json it only closes files and
 * exits, so it no longer counts); else the stale files of an earlier
 * attempt, which would be mistaken for the new one's, are removed.  0 or
 * -errno. */
static int take_dir(int dirfd) {
        gp_exec_proc old;
        if (read_pidfile_at(dirfd, &old) == 0 && gp_exec_alive(&old) && faccessat(dirfd, RESULT_NAME, F_OK, 0) < 0)
                return -EBUSY;
        const char *const stale[] = {PIDFILE_NAME, PIDFILE_NAME ".tmp", RESULT_NAME, RESULT_NAME ".tmp"};
        for (size_t i = 0; i < GP_ARRAY_SIZE(stale); i++)
                if (unlinkat(dirfd, stale[i], 0) < 0 && errno != ENOENT)
                        return -errno;
        return 0;
}

/* What gp_exec_start and gp_exec_launch do first: check the arguments,
 * make the task dir and take it for this start (fresh: refused with
 * -EEXIST when an earlier start left its files there; else take_dir), and
 * write the spec into it (sync: fsync'd).  The dir's fd (the caller
 * closes it), or -errno. */
static int prepare_dir(const char *self_exe, const char *task_dir, const gp_exec_spec *spec, bool fresh, bool sync,
                       const gp_exec_proc *ret) {
        if (!self_exe || !self_exe[0] || !task_dir || !task_dir[0] || !spec || !ret)
                return -EINVAL;
        char *json = NULL;
        int r = spec_dump(spec, &json);
        if (r < 0)
                return r;
        int dirfd = -1;
        r = mkdir_p(task_dir, 0700);
        if (r < 0)
                goto out;
        dirfd = open_dir(task_dir);
        if (dirfd < 0) {
                r = dirfd;
                goto out;
        }
        if (fresh) {
                if (faccessat(dirfd, PIDFILE_NAME, F_OK, 0) == 0 || faccessat(dirfd, RESULT_NAME, F_OK, 0) == 0) {
                        r = -EEXIST;
                        goto out;
                }
        } else if ((r = take_dir(dirfd)) < 0) {
                goto out;
        }
        r = write_replace_at(dirfd, SPEC_NAME, json, strlen(json), sync);
out:
        free(json);
        if (r < 0) {
                if (dirfd >= 0)
                        close(dirfd);
                return r;
        }
        return dirfd;
}

int gp_exec_start(const char *self_exe, const char *task_dir, const gp_exec_spec *spec,
                  gp_exec_proc *ret) {
        int64_t deadline = gp_mono_ms() + START_WAIT_MS;
        int dirfd = prepare_dir(self_exe, task_dir, spec, false, true, ret);
        if (dirfd < 0)
                return dirfd;
        int r, devnull = -1, msg[2] = {-1, -1}, pidfd = -1;
        pid_t child = -1, sup = 0;

        /* everything the children need, prepared before fork */
        char *argv[] = {(char *)self_exe, (char *)"__supervise", (char *)task_dir, NULL};
        sigset_t empty;
        sigemptyset(&empty);
        int nfd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (nfd < 0) {
                r = -errno;
                goto out;
        }
        devnull = fd_above_stdio(nfd);
        if (devnull < 0) {
                r = devnull;
                goto out;
        }
        if (pipe2(msg, O_CLOEXEC) < 0) {
                r = -errno;
                goto out;
        }
        msg[0] = fd_above_stdio(msg[0]);
        msg[1] = fd_above_stdio(msg[1]);
        if (msg[0] < 0 || msg[1] < 0) {
                r = msg[0] < 0 ? msg[0] : msg[1];
                goto out;
        }
        child = fork();
        if (child < 0) {
                r = -errno;
                goto out;
        }
        if (child == 0)
                start_child(msg[1], devnull, self_exe, argv, &empty);
        close(msg[1]);
        msg[1] = -1;
        r = read_start_msgs(msg[0], deadline, &sup);
        /* The intermediate child exits at once; reap it (ECHILD: someone
         * else did).  If something went wrong it may be stuck: it is still
         * our unreaped child, so killing it cannot hit a stranger. */
        if (r < 0)
                kill(child, SIGKILL);
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                ;
        int pidfd_err = 0;
        if (sup > 0) {
                pidfd = (int)syscall(SYS_pidfd_open, sup, 0);
                if (pidfd < 0)
                        pidfd_err = errno;
        }
        if (r < 0)
                goto out;
        if (pidfd_err == ESRCH) {
                /* already gone and reaped: it may have finished a whole
                 * (very short) task, so only its pidfile can tell */
                gp_exec_proc p;
                if (read_pidfile_at(dirfd, &p) == 0 && p.pid == sup) {
                        *ret = p;
                        r = 0;
                } else {
                        r = -EIO;
                }
                goto out;
        }
        r = wait_pidfile(dirfd, sup, pidfd, deadline, ret);
out:
        if (r < 0 && pidfd >= 0) {
                /* still running but silent: ask it to stop.  SIGTERM, not
                 * SIGKILL: if it got as far as starting the command it will
                 * stop that too and record "cancelled". */
                syscall(SYS_pidfd_send_signal, pidfd, SIGTERM, NULL, 0);
        }
        if (pidfd >= 0)
                close(pidfd);
        if (msg[0] >= 0)
                close(msg[0]);
        if (msg[1] >= 0)
                close(msg[1]);
        if (devnull >= 0)
                close(devnull);
        close(dirfd);
        return r;
}

/* The signals the supervisor reads from its signalfd: blocked from the
 * moment it exists, so one sent before it set up is kept pending. */
static void supervisor_sigset(sigset_t *set) {
        sigemptyset(set);
        sigaddset(set, SIGTERM);
        sigaddset(set, SIGINT);
        sigaddset(set, SIGCHLD);
        sigaddset(set, SIGUSR1);
        sigaddset(set, SIGUSR2);
}

int gp_exec_launch(const char *self_exe, const char *task_dir, const gp_exec_spec *spec, unsigned flags,
                   gp_exec_proc *ret) {
        int dirfd = prepare_dir(self_exe, task_dir, spec, flags & GP_EXEC_FRESH, false, ret);
        if (dirfd < 0)
                return dirfd;
        int r;
        bool fa_init = false, attr_init = false;
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        char *argv[] = {(char *)self_exe, (char *)"__supervise", (char *)task_dir, NULL};
        sigset_t mask, all;
        supervisor_sigset(&mask);
        sigfillset(&all);
        if ((r = -posix_spawn_file_actions_init(&fa)) < 0)
                goto out;
        fa_init = true;
        if ((r = -posix_spawnattr_init(&attr)) < 0)
                goto out;
        attr_init = true;
        /* stdin and stdout /dev/null; stderr stays (the supervisor reports
         * setup failures there); nothing else of ours crosses the exec */
        r = -posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDWR, 0);
        r = r ? r : -posix_spawn_file_actions_adddup2(&fa, STDIN_FILENO, STDOUT_FILENO);
        r = r ? r : -posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
        r = r ? r : -posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                                             POSIX_SPAWN_SETSIGDEF);
        r = r ? r : -posix_spawnattr_setsigmask(&attr, &mask);
        r = r ? r : -posix_spawnattr_setsigdefault(&attr, &all);
        if (r < 0)
                goto out;
        pid_t pid;
        /* vfork-like (CLONE_VM|CLONE_VFORK): no copy of the daemon's memory;
         * an exec error comes back here */
        r = -posix_spawn(&pid, self_exe, &fa, &attr, argv, environ);
        if (r < 0)
                goto out;
        /* our child, not reaped before gp_exec_reap: its pid and /proc entry
         * stay ours, so the start time read now is its own */
        char state;
        int64_t start;
        r = proc_stat(pid, &state, &start);
        if (r < 0)
                goto out; /* cannot happen; its watch would find it gone */
        ret->pid = pid;
        ret->start = start;
out:
        if (fa_init)
                posix_spawn_file_actions_destroy(&fa);
        if (attr_init)
                posix_spawnattr_destroy(&attr);
        close(dirfd);
        return r;
}

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

int gp_exec_reap(int pidfd) {
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG) < 0)
                return errno == ECHILD ? 1 : -errno;
        return si.si_pid != 0 ? 1 : 0;
}

/* ---- the supervisor ---- */

typedef struct spec {
        json_t *root;                /* owns every string below */
        const char **argv;           /* NULL-terminated, argc >= 1 */
        size_t argc;
        const char **env;            /* NULL-terminated "K=V" */
        size_t envc;
        const char *workdir;         /* "" = task dir; relative = below the task dir */
        const char *cuda;            /* CUDA_VISIBLE_DEVICES */
        const char *gpus;            /* GPUPOOL_GPUS */
        int64_t task_id;
        int64_t timeout_s;           /* 0 = none */
        int64_t kill_grace_s;
        int64_t preempt_grace_s;     /* missing in specs of older versions: kill_grace_s */
        int64_t notify_signal;       /* missing: SIGUSR1 */
        int64_t max_log_bytes;
        const char *run_as;          /* "" = stay the supervisor's user; missing = "" */
        const char *log_name;        /* missing: LOG_NAME; else checked by log_name_ok */
        int64_t array_id, array_index; /* missing: 0 (no array) */
        const char *fence_file;      /* "" = none (missing); else absolute (exec/fence.h) */
        bool clean_env;              /* missing: false (inherit the supervisor's environment) */
        gp_notice notice;            /* missing: none (base/notice.h) */
        gp_cgroup_limits limits;     /* cpus, host_memory_mb; missing: none (exec/cgroup.h) */
} spec;

static void spec_done(spec *s) {
        free(s->argv);
        free(s->env);
        json_decref(s->root);
        memset(s, 0, sizeof(*s));
}

static int get_strings(json_t *o, const char *key, size_t max, bool need_eq, bool nonempty,
                       const char ***ret, size_t *ret_n, const char **why) {
        json_t *a = json_object_get(o, key);
        if (!json_is_array(a)) {
                *why = "is missing or not an array";
                return -EINVAL;
        }
        size_t n = json_array_size(a);
        if (n > max) {
                *why = "has too many entries";
                return -EINVAL;
        }
        if (nonempty && n == 0) {
                *why = "is empty";
                return -EINVAL;
        }
        const char **v = calloc(n + 1, sizeof(*v));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const char *s = json_string_value(json_array_get(a, i));
                const char *eq = s ? strchr(s, '=') : NULL;
                if (!s || (need_eq && (!eq || eq == s)) || (nonempty && i == 0 && !s[0])) {
                        *why = "has an invalid entry";
                        free(v);
                        return -EINVAL;
                }
                v[i] = s;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

static int get_string(json_t *o, const char *key, const char **ret) {
        const char *s = json_string_value(json_object_get(o, key));
        if (!s)
                return -EINVAL;
        *ret = s;
        return 0;
}

/* Read and validate spec.json.  On failure *why says what was wrong (for
 * the result message). */
static int spec_load(int dirfd, spec *ret, char *why, size_t why_size) {
        spec s;
        memset(&s, 0, sizeof(s));
        char *data;
        size_t len;
        int r = read_bounded_at(dirfd, SPEC_NAME, SPEC_MAX_BYTES, &data, &len);
        if (r < 0) {
                if (r == -EFBIG)
                        snprintf(why, why_size, "spec.json is larger than %zu bytes",
                                 SPEC_MAX_BYTES);
                else
                        snprintf(why, why_size, "cannot read spec.json: %s", gp_strerror(r));
                return r == -EFBIG ? -EINVAL : r;
        }
        json_error_t jerr;
        s.root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
        free(data);
        if (!s.root || !json_is_object(s.root)) {
                snprintf(why, why_size, "invalid spec.json: %s",
                         s.root ? "not an object" : jerr.text);
                r = -EINVAL;
                goto fail;
        }
        const char *what = NULL, *field = NULL;
        if ((r = get_strings(s.root, "argv", SPEC_MAX_ARGS, false, true, &s.argv, &s.argc, &what)) < 0) {
                field = "argv";
                goto bad;
        }
        if ((r = get_strings(s.root, "env", SPEC_MAX_ENV, true, false, &s.env, &s.envc, &what)) < 0) {
                field = "env";
                goto bad;
        }
        what = "is missing or has the wrong type or range";
        r = -EINVAL;
        if (get_string(s.root, field = "workdir", &s.workdir) < 0 ||
            get_string(s.root, field = "cuda_visible_devices", &s.cuda) < 0 ||
            get_string(s.root, field = "gpus", &s.gpus) < 0 ||
            json_int_field(s.root, field = "task_id", 1, INT64_MAX, &s.task_id) < 0)
                goto bad;
        if (json_object_get(s.root, "array_id") &&
            (json_int_field(s.root, "array_id", 1, INT64_MAX, &s.array_id) < 0 ||
             json_int_field(s.root, "array_index", 0, INT32_MAX, &s.array_index) < 0)) {
                field = "array_id";
                goto bad;
        }
        if (json_int_field(s.root, field = "timeout_s", 0, TIMEOUT_MAX_S, &s.timeout_s) < 0 ||
            json_int_field(s.root, field = "kill_grace_s", 0, GRACE_MAX_S, &s.kill_grace_s) < 0)
                goto bad;
        s.preempt_grace_s = s.kill_grace_s;
        if (json_object_get(s.root, "preempt_grace_s") &&
            json_int_field(s.root, "preempt_grace_s", 0, GRACE_MAX_S, &s.preempt_grace_s) < 0) {
                field = "preempt_grace_s";
                goto bad;
        }
        s.notify_signal = SIGUSR1;
        if (json_object_get(s.root, "notify_signal") &&
            (json_int_field(s.root, "notify_signal", 1, NSIG - 1, &s.notify_signal) < 0 ||
             !notify_ok((int)s.notify_signal))) {
                field = "notify_signal";
                goto bad;
        }
        if (json_int_field(s.root, field = "max_log_bytes", 1, INT64_MAX, &s.max_log_bytes) < 0)
                goto bad;
        s.run_as = "";
        if (json_object_get(s.root, "run_as") &&
            (get_string(s.root, "run_as", &s.run_as) < 0 ||
             (s.run_as[0] && !gp_user_name_ok(s.run_as, strlen(s.run_as))))) {
                field = "run_as";
                goto bad;
        }
        s.log_name = LOG_NAME;
        if (json_object_get(s.root, "log_name") &&
            (get_string(s.root, "log_name", &s.log_name) < 0 || !log_name_ok(s.log_name))) {
                field = "log_name";
                goto bad;
        }
        s.fence_file = "";
        if (json_object_get(s.root, "fence_file") &&
            (get_string(s.root, "fence_file", &s.fence_file) < 0 || (s.fence_file[0] && s.fence_file[0] != '/'))) {
                field = "fence_file";
                goto bad;
        }
        s.clean_env = json_is_true(json_object_get(s.root, "clean_env"));
        if (gp_notice_spec_get(s.root, &s.notice) < 0 || gp_cgroup_limits_get(s.root, &s.limits) < 0) {
                field = "notice, cpus or host_memory_mb";
                goto bad;
        }
        *ret = s;
        return 0;
bad:
        if (r == -ENOMEM)
                snprintf(why, why_size, "out of memory reading spec.json");
        else
                snprintf(why, why_size, "invalid spec.json: %s %s", field, what);
fail:
        spec_done(&s);
        return r;
}

static bool same_key(const char *a, const char *b) {
        while (*a && *a != '=' && *a == *b) {
                a++;
                b++;
        }
        return (*a == '=' || *a == '\0') && (*b == '=' || *b == '\0');
}

#define OWN_VARS 7  /* gpupool's own variables (names[] in build_env) */
#define USER_VARS 5 /* run_as: HOME, USER, LOGNAME, SHELL; clean_env: PATH too */
#define CLEAN_PATH "/usr/local/bin:/usr/bin:/bin"
#define ENV_MADE (OWN_VARS + USER_VARS)

/* The command's environment: inherited, minus what the spec or gpupool
 * sets, plus (run_as or clean_env, u != NULL) the user's HOME, USER,
 * LOGNAME and SHELL (clean_env: and a default PATH) unless the spec sets
 * them; with clean_env nothing is inherited, plus the spec's env (last entry of a key wins), plus
 * gpupool's own variables, which nobody can override: three, and for a job
 * array element four more (GPUPOOL_ARRAY_ID/INDEX and Slurm's
 * SLURM_ARRAY_JOB_ID/TASK_ID, for scripts written for Slurm).  own has
 * ENV_MADE slots and receives the strings made here (caller frees; unused
 * slots stay NULL). */
static int build_env(const spec *s, const gp_user *u, char ***ret_env, char **own) {
        gp_buf b[ENV_MADE];
        const char *names[OWN_VARS] = {"CUDA_VISIBLE_DEVICES", "GPUPOOL_TASK_ID", "GPUPOOL_GPUS",
                                       "GPUPOOL_ARRAY_ID", "GPUPOOL_ARRAY_INDEX", "SLURM_ARRAY_JOB_ID",
                                       "SLURM_ARRAY_TASK_ID"};
        const char *unames[USER_VARS] = {"HOME", "USER", "LOGNAME", "SHELL", "PATH"};
        int nuser = u ? (s->clean_env ? USER_VARS : USER_VARS - 1) : 0;
        int nown = s->array_id > 0 ? OWN_VARS : 3;
        bool used[ENV_MADE];
        for (int i = 0; i < ENV_MADE; i++) {
                gp_buf_init(&b[i], 0);
                used[i] = i < nown || (i >= OWN_VARS && i < OWN_VARS + nuser);
        }
        int r = 0;
        if (gp_buf_printf(&b[0], "CUDA_VISIBLE_DEVICES=%s", s->cuda) < 0 ||
            gp_buf_printf(&b[1], "GPUPOOL_TASK_ID=%lld", (long long)s->task_id) < 0 ||
            gp_buf_printf(&b[2], "GPUPOOL_GPUS=%s", s->gpus) < 0)
                r = -ENOMEM;
        if (r == 0 && nown > 3 &&
            (gp_buf_printf(&b[3], "GPUPOOL_ARRAY_ID=%lld", (long long)s->array_id) < 0 ||
             gp_buf_printf(&b[4], "GPUPOOL_ARRAY_INDEX=%lld", (long long)s->array_index) < 0 ||
             gp_buf_printf(&b[5], "SLURM_ARRAY_JOB_ID=%lld", (long long)s->array_id) < 0 ||
             gp_buf_printf(&b[6], "SLURM_ARRAY_TASK_ID=%lld", (long long)s->array_index) < 0))
                r = -ENOMEM;
        if (r == 0 && u &&
            (gp_buf_printf(&b[OWN_VARS], "HOME=%s", u->home) < 0 ||
             gp_buf_printf(&b[OWN_VARS + 1], "USER=%s", u->name) < 0 ||
             gp_buf_printf(&b[OWN_VARS + 2], "LOGNAME=%s", u->name) < 0 ||
             gp_buf_printf(&b[OWN_VARS + 3], "SHELL=%s", u->shell) < 0 ||
             (nuser == USER_VARS && gp_buf_printf(&b[OWN_VARS + 4], "PATH=%s", CLEAN_PATH) < 0)))
                r = -ENOMEM;
        for (int i = 0; i < ENV_MADE; i++) {
                own[i] = r == 0 && used[i] ? gp_buf_steal(&b[i]) : NULL;
                gp_buf_done(&b[i]);
                if (r == 0 && used[i] && !own[i])
                        r = -ENOMEM;
        }
        if (r < 0)
                return r;
        size_t ninh = 0;
        while (!s->clean_env && environ && environ[ninh])
                ninh++;
        char **env = calloc(ninh + s->envc + ENV_MADE + 1, sizeof(*env));
        if (!env)
                return -ENOMEM;
        size_t n = 0;
        for (size_t i = 0; i < ninh; i++) {
                const char *e = environ[i];
                if (!strchr(e, '=') || e[0] == '=')
                        continue;
                bool drop = false;
                for (int k = 0; k < OWN_VARS && !drop; k++)
                        drop = same_key(e, names[k]);
                for (int k = 0; k < nuser && !drop; k++)
                        drop = same_key(e, unames[k]);
                for (size_t k = 0; k < s->envc && !drop; k++)
                        drop = same_key(e, s->env[k]);
                if (!drop)
                        env[n++] = (char *)e;
        }
        for (int k = OWN_VARS; k < OWN_VARS + nuser; k++) {
                bool drop = false;
                for (size_t i = 0; i < s->envc && !drop; i++)
                        drop = same_key(own[k], s->env[i]);
                if (!drop)
                        env[n++] = own[k];
        }
        for (size_t i = 0; i < s->envc; i++) {
                bool drop = false;
                for (int k = 0; k < OWN_VARS && !drop; k++)
                        drop = same_key(s->env[i], names[k]);
                for (size_t k = i + 1; k < s->envc && !drop; k++)
                        drop = same_key(s->env[i], s->env[k]);
                if (!drop)
                        env[n++] = (char *)s->env[i];
        }
        for (int k = 0; k < nown; k++)
                env[n++] = own[k];
        env[n] = NULL;
        *ret_env = env;
        return 0;
}

/* Cut a snprintf-truncated string back to whole UTF-8 characters. */
static void utf8_fix_tail(char *s) {
        size_t n = strlen(s), i = n;
        size_t cont = 0;
        while (i > 0 && cont < 4 && ((unsigned char)s[i - 1] & 0xc0) == 0x80) {
                i--;
                cont++;
        }
        if (i == 0)
                return;
        unsigned char c = (unsigned char)s[i - 1];
        size_t need = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : 4;
        if (cont + 1 < need)
                s[i - 1] = '\0';
}

/* "'abc'" or "'abc...'" for messages, bounded. */
static void quote(char *out, size_t size, const char *s) {
        if (strlen(s) <= ARG_SHOW_MAX) {
                snprintf(out, size, "'%s'", s);
                return;
        }
        char cut[ARG_SHOW_MAX + 1];
        memcpy(cut, s, ARG_SHOW_MAX);
        cut[ARG_SHOW_MAX] = '\0';
        utf8_fix_tail(cut);
        snprintf(out, size, "'%s...'", cut);
}

static int write_result(int dirfd, const gp_exec_result *res) {
        char msg[sizeof(res->message)];
        gp_strlcpy(msg, res->message, sizeof(msg));
        utf8_fix_tail(msg);
        json_t *o = json_object();
        if (!o)
                return -ENOMEM;
        int r = -ENOMEM;
        json_t *m = json_string(msg);
        if (!m)
                m = json_string("(unprintable message)");
        if (json_object_set_new(o, "end", json_string(end_names[res->end])) < 0 ||
            json_object_set_new(o, "exit_code", json_integer(res->exit_code)) < 0 ||
            json_object_set_new(o, "signal", json_integer(res->signal)) < 0 ||
            json_object_set_new(o, "finished_ms", json_integer(res->finished_ms)) < 0 ||
            json_object_set_new(o, "message", m) < 0)
                goto out;
        char *d = json_dumps(o, JSON_COMPACT);
        if (!d)
                goto out;
        size_t len = strlen(d);
        /* one line, newline-terminated, for people reading the directory */
        char *line = realloc(d, len + 2);
        if (!line) {
                free(d);
                goto out;
        }
        line[len] = '\n';
        line[len + 1] = '\0';
        r = write_atomic_at(dirfd, RESULT_NAME, line, len + 1);
        free(line);
out:
        json_decref(o);
        return r;
}

static void set_message(gp_exec_result *res, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void set_message(gp_exec_result *res, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(res->message, sizeof(res->message), fmt, ap);
        va_end(ap);
        utf8_fix_tail(res->message);
}

static void spawn_failed(gp_exec_result *res, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void spawn_failed(gp_exec_result *res, const char *fmt, ...) {
        memset(res, 0, sizeof(*res));
        res->end = GP_EXEC_SPAWN_FAILED;
        res->exit_code = 127;
        res->finished_ms = gp_now_ms();
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(res->message, sizeof(res->message), fmt, ap);
        va_end(ap);
        utf8_fix_tail(res->message);
}

/* What the command's child reports through its CLOEXEC error pipe. */
enum { SPAWN_CHDIR = 1, SPAWN_EXEC, SPAWN_USER, SPAWN_CGROUP };

/* Forked child of the supervisor: becomes the command.  With user (run_as)
 * it starts in workfd and becomes user before it enters workdir. */
static void __attribute__((noreturn))
command_child(const spec *s, const gp_cgroup *cg, char **envp, int dirfd, int workfd, const gp_user *user, int out_w,
              int err_w) {
        setpgid(0, 0);
        int ce = gp_cgroup_enter(cg); /* before run_as: the user may not write there */
        if (ce < 0) {
                start_msg m = {.kind = SPAWN_CGROUP, .val = -ce};
                (void)!write(err_w, &m, sizeof(m));
                _exit(127);
        }
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        sigaction(sig, &dfl, NULL);   /* ignored ones survive exec */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(out_w, STDOUT_FILENO);
        dup2(out_w, STDERR_FILENO);
        close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
        if (user) {
                if (fchdir(workfd) < 0) {
                        start_msg m = {.kind = SPAWN_CHDIR, .val = errno};
                        (void)!write(err_w, &m, sizeof(m));
                        _exit(127);
                }
                int e = gp_user_become(user);
                if (e < 0) {
                        start_msg m = {.kind = SPAWN_USER, .val = -e};
                        (void)!write(err_w, &m, sizeof(m));
                        _exit(127);
                }
        }
        if ((!user && fchdir(dirfd) < 0) || (s->workdir[0] && chdir(s->workdir) < 0)) {
                start_msg m = {.kind = SPAWN_CHDIR, .val = errno};
                (void)!write(err_w, &m, sizeof(m));
                _exit(127);
        }
        environ = envp;   /* so execvp searches the command's own PATH */
        execvp(s->argv[0], (char *const *)s->argv);
        start_msg m = {.kind = SPAWN_EXEC, .val = errno};
        (void)!write(err_w, &m, sizeof(m));
        _exit(127);
}

typedef struct run {
        pid_t pid;                   /* the command; also its process group */
        int out;                     /* read end of its stdout+stderr, -1 after EOF */
        int logfd;                   /* TASK_DIR/log, O_APPEND */
        int64_t logged;              /* bytes in the log file */
        int64_t cap;                 /* max_log_bytes */
        bool capped;                 /* cap reached: output is discarded */
        bool log_broken;             /* a write failed (not for space): output is discarded */
        int64_t lost;                /* bytes dropped while the disk was full, not yet noted in the log */
        char last;                   /* last byte in the log ('\n' when empty) */
        gp_exec_end reason;          /* GP_EXEC_TIMEOUT/CANCELLED once stopping */
        bool stopping;               /* SIGTERM sent to the group */
        bool preempted;              /* ... because of a preemption (SIGUSR2) */
        int last_sig;                /* last signal we sent to the group, 0 = none */
        int64_t kill_at;             /* mono ms to send SIGKILL, 0 = not pending */
        int64_t term_at;             /* notice given: mono ms to send SIGTERM, 0 = not pending */
        int64_t term_grace_s;        /* ... and the SIGKILL grace after it */
        bool exited;                 /* the command has been reaped */
        int status;                  /* its wait status */
        int64_t finished_ms;         /* wall clock when it was reaped */
        int64_t fence_next;          /* mono ms to read the fence file next (spec fence_file) */
        gp_cgroup cg;                /* the run's cgroup (version 0: none) */
} run;

/* Write to the log; 0, or -ENOSPC/-EDQUOT when the disk is full (what did
 * not fit is counted in r->lost, and noted in the log once space is back:
 * a full disk must neither kill the supervisor nor block the command on a
 * full pipe), or another error (the log is given up). */
static int log_put(run *r, const char *p, size_t n) {
        int w = write_all(r->logfd, p, n);
        if (w == 0) {
                r->logged += (int64_t)n;
                return 0;
        }
        if (w != -ENOSPC && w != -EDQUOT) {
                r->log_broken = true;
                return w;
        }
        struct stat st; /* a part may have been written */
        int64_t wrote = fstat(r->logfd, &st) == 0 && st.st_size > r->logged ? st.st_size - r->logged : 0;
        if (wrote > (int64_t)n)
                wrote = (int64_t)n;
        r->logged += wrote;
        if (wrote > 0)
                r->last = p[wrote - 1];
        r->lost += (int64_t)n - wrote;
        return w;
}

/* Output was lost to a full disk: say so in the log, once there is room.
 * true when nothing (more) is to be said. */
static bool log_note_lost(run *r) {
        if (r->lost == 0 || r->logfd < 0 || r->log_broken)
                return r->lost == 0;
        char note[128];
        int m = snprintf(note, sizeof(note), "%s[gpupool: %lld bytes of output lost: the disk was full]\n",
                         r->last == '\n' ? "" : "\n", (long long)r->lost);
        int64_t lost = r->lost;
        r->lost = 0;
        if (log_put(r, note, (size_t)m) < 0) {
                r->lost = lost; /* still full: the note is not output */
                return false;
        }
        r->last = '\n';
        return true;
}

static void log_write(run *r, const char *p, size_t n) {
        if (r->capped || r->log_broken || n == 0)
                return;
        if (!log_note_lost(r)) {
                r->lost += (int64_t)n; /* still full: this chunk is lost too */
                return;
        }
        bool cut = false;
        if ((int64_t)n > r->cap - r->logged) {
                n = (size_t)(r->cap - r->logged);
                cut = true;
        }
        if (n > 0) {
                if (log_put(r, p, n) < 0)
                        return;
                r->last = p[n - 1];
        }
        if (!cut)
                return;
        /* reached the cap; later output (even if it would just fit) is dropped */
        char marker[96];
        int m = snprintf(marker, sizeof(marker), "%s[gpupool: log truncated at %lld bytes]\n",
                         r->last == '\n' ? "" : "\n", (long long)r->cap);
        log_put(r, marker, (size_t)m);
        r->capped = true;
}

/* Read what is available on the output pipe. */
static void pump_output(run *r) {
        char buf[65536];
        for (int i = 0; i < 16 && r->out >= 0; i++) {
                ssize_t n = read(r->out, buf, sizeof(buf));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        n = 0;   /* EIO and friends: treat as the end */
                }
                if (n == 0) {
                        close(r->out);
                        r->out = -1;
                        return;
                }
                log_write(r, buf, (size_t)n);
        }
}

static void stop_group(run *r, gp_exec_end reason, int64_t grace_s) {
        r->stopping = true;
        r->reason = reason;
        r->term_at = 0;
        if (grace_s >= 0) /* < 0: no SIGTERM yet, a notice is given first (handle_signals) */
                kill(-r->pid, SIGTERM);
        kill(-r->pid, SIGCONT);   /* a stopped process must see the SIGTERM */
        r->last_sig = SIGTERM;
        if (grace_s == 0) {
                kill(-r->pid, SIGKILL);
                r->last_sig = SIGKILL;
        } else if (grace_s > 0) {
                r->kill_at = gp_mono_ms() + grace_s * 1000;
        }
}

static void reap(run *r) {
        for (;;) {
                int st;
                pid_t w = waitpid(-1, &st, WNOHANG);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return;
                if (w == r->pid && !r->exited) {
                        r->exited = true;
                        r->status = st;
                        r->finished_ms = gp_now_ms();
                        kill(-r->pid, SIGKILL);   /* leftovers in its group */
                }
        }
}

static void handle_signals(run *r, int sigfd, const spec *s) {
        for (;;) {
                struct signalfd_siginfo si;
                ssize_t n = read(sigfd, &si, sizeof(si));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n != (ssize_t)sizeof(si))
                        return;
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT || si.ssi_signo == SIGUSR2) {
                        reap(r);   /* a command that already ended was not cancelled */
                        bool pre = si.ssi_signo == SIGUSR2;
                        if (!r->exited && !r->stopping && s->notice.signo) { /* SIGTERM after the notice */
                                stop_group(r, GP_EXEC_CANCELLED, -1);
                                r->term_at = gp_mono_ms() + s->notice.seconds * 1000LL;
                                r->term_grace_s = pre ? s->preempt_grace_s : s->kill_grace_s;
                                kill(s->notice.batch_only ? r->pid : -r->pid, r->last_sig = s->notice.signo);
                                r->preempted = pre;
                        } else if (!r->exited && !r->stopping) {
                                stop_group(r, GP_EXEC_CANCELLED, pre ? s->preempt_grace_s : s->kill_grace_s);
                                r->preempted = pre;
                        }
                } else if (si.ssi_signo == SIGUSR1) {
                        /* the command, not its group (workers need not handle
                         * it), and only if it catches the signal */
                        if (!r->exited && !r->stopping && gp_notice_catches(r->pid, (int)s->notify_signal))
                                kill(r->pid, (int)s->notify_signal);
                } else if (si.ssi_signo == SIGCHLD) {
                        reap(r);
                }
        }
}

/* Has the fence deadline of s passed (or its file gone)?  A file that
 * cannot be read for another reason is read again at the next poll. */
static bool fenced(const spec *s, int64_t now) {
        int64_t until;
        int rc = gp_fence_read(s->fence_file, &until);
        return rc == -ENOENT || rc == -EINVAL || (rc == 0 && now >= until);
}

/* Copy output, enforce the deadlines, until the command is reaped, its group
 * is empty (bounded) and the pipe is drained (bounded). */
static void supervise(run *r, const spec *s, int sigfd) {
        int64_t t0 = gp_mono_ms();
        int64_t deadline = s->timeout_s > 0 ? t0 + s->timeout_s * 1000 : 0;
        int64_t group_until = 0, drain_until = 0;
        bool group_gone = false;
        for (;;) {
                int64_t now = gp_mono_ms();
                int wait_ms = -1;
                if (!r->exited) {
                        if ((!r->stopping || r->term_at) && s->fence_file[0] && now >= r->fence_next) {
                                r->fence_next = now + GP_FENCE_POLL_MS;
                                if (fenced(s, now)) {
                                        reap(r);   /* ended on its own meanwhile: not fenced */
                                        if (!r->exited)
                                                stop_group(r, GP_EXEC_FENCED, s->kill_grace_s);
                                }
                        }
                        if (!r->stopping && deadline && now >= deadline) {
                                reap(r);   /* ended just in time? then no timeout */
                                if (!r->exited)
                                        stop_group(r, GP_EXEC_TIMEOUT, s->kill_grace_s);
                        }
                        if (!r->exited && r->term_at && now >= r->term_at) /* the notice is over */
                                stop_group(r, r->reason, r->term_grace_s);
                        if (!r->exited && r->kill_at && now >= r->kill_at) {
                                kill(-r->pid, SIGKILL);
                                r->last_sig = SIGKILL;
                                r->kill_at = 0;
                        }
                        int64_t next = !r->stopping && deadline ? deadline : r->term_at ? r->term_at : r->kill_at;
                        if ((!r->stopping || r->term_at) && s->fence_file[0] && (!next || r->fence_next < next))
                                next = r->fence_next;
                        if (next)
                                wait_ms = (int)(next - now > INT_MAX ? INT_MAX : next - now);
                } else if (!group_gone) {
                        if (!group_until)
                                group_until = now + GROUP_WAIT_MS;
                        reap(r);
                        int left = gp_cgroup_kill(&r->cg); /* also what left the group */
                        if ((kill(-r->pid, SIGKILL) < 0 && errno == ESRCH && left <= 0) || now >= group_until) {
                                group_gone = true;
                                drain_until = now + DRAIN_WAIT_MS;
                        } else {
                                wait_ms = 10;
                        }
                }
                if (group_gone) {
                        if (r->out < 0 || now >= drain_until)
                                return;
                        wait_ms = (int)(drain_until - now);
                }
                struct pollfd pfd[2] = {{.fd = sigfd, .events = POLLIN},
                                        {.fd = r->out, .events = POLLIN}};
                int n = poll(pfd, r->out >= 0 ? 2 : 1, wait_ms);
                if (n < 0 && errno != EINTR)
                        return;   /* cannot happen with valid fds; do not spin */
                if (n <= 0)
                        continue;
                if (pfd[0].revents)
                        handle_signals(r, sigfd, s);
                if (r->out >= 0 && pfd[1].revents)
                        pump_output(r);
        }
}

static void result_of(const run *r, const spec *s, gp_exec_result *res) {
        memset(res, 0, sizeof(*res));
        res->finished_ms = r->finished_ms;
        int st = r->status;
        if (r->stopping) {
                res->end = r->reason;
                res->signal = WIFSIGNALED(st) ? WTERMSIG(st) : r->last_sig;
                res->exit_code = 128 + res->signal;
                if (r->reason == GP_EXEC_TIMEOUT)
                        set_message(res, "timed out after %lld s", (long long)s->timeout_s);
                else if (r->reason == GP_EXEC_FENCED)
                        set_message(res, "fenced: its node lost contact with the server");
                else if (r->term_at && WIFEXITED(st)) /* ended before the notice did */
                        set_message(res, "%s; exited with code %d within its notice (%s)",
                                    r->preempted ? "preempted" : "cancelled", WEXITSTATUS(st),
                                    sigabbrev_np(s->notice.signo));
                else
                        set_message(res, r->preempted ? "preempted" : "cancelled");
        } else if (WIFSIGNALED(st)) {
                res->end = GP_EXEC_SIGNALED;
                res->signal = WTERMSIG(st);
                res->exit_code = 128 + res->signal;
                set_message(res, "killed by signal %d", res->signal);
        } else {
                res->end = GP_EXEC_EXITED;
                res->exit_code = WEXITSTATUS(st);
                set_message(res, "exited with code %d", res->exit_code);
        }
}

/* Make sure fds 0..2 exist (so new fds are >= 3); stdin becomes /dev/null. */
static int setup_stdio(void) {
        int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (dup2(fd, STDIN_FILENO) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        for (int i = 1; i <= 2; i++)
                if (fcntl(i, F_GETFD) < 0)
                        dup2(fd, i);
        if (fd > 2)
                close(fd);
        for (int i = 0; i <= 2; i++)
                fcntl(i, F_SETFD, 0);   /* fd may have been one of them, with O_CLOEXEC */
        return 0;
}

/* Take the task dir's lock (flock on lockfd, its own open file
 * description: the command never holds it), waiting up to START_WAIT_MS
 * for an earlier supervisor that is still closing up.  Then, since every
 * start removes supervisor.pid and result.json before it starts us, finding
 * one means another supervisor already ran this start: -EEXIST. */
static int claim_dir(int lockfd, int dirfd) {
        int64_t deadline = gp_mono_ms() + START_WAIT_MS;
        while (flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
                if (errno != EWOULDBLOCK && errno != EINTR)
                        return -errno;
                if (gp_mono_ms() >= deadline)
                        return -ETIMEDOUT;
                struct timespec ts = {.tv_sec = 0, .tv_nsec = 2 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
        if (faccessat(dirfd, PIDFILE_NAME, F_OK, 0) == 0 || faccessat(dirfd, RESULT_NAME, F_OK, 0) == 0)
                return -EEXIST;
        return 0;
}

static int write_own_pidfile(int dirfd) {
        int64_t start;
        int r = proc_stat(getpid(), NULL, &start);
        if (r < 0)
                return r;
        char line[PIDFILE_MAX_BYTES];
        int n = snprintf(line, sizeof(line), "%d %lld\n", (int)getpid(), (long long)start);
        return write_atomic_at(dirfd, PIDFILE_NAME, line, (size_t)n);
}

static void say(const char *task_dir, const char *what, int err) {
        char line[512];
        int n = snprintf(line, sizeof(line), "gpupool supervisor %s: %s: %s\n", task_dir, what,
                         gp_strerror(err));
        if (n <= 0)
                return;
        size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
        (void)!write(STDERR_FILENO, line, len);
}

/* The supervisor's own user (clean_env without run_as).  0 or -errno. */
static int self_user(gp_user *ret) {
        char buf[1024];
        struct passwd pw, *found = NULL;
        if (getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &found) != 0 || !found)
                return -ENOENT;
        return gp_user_lookup(pw.pw_name, ret);
}

/* run_as: look the user up, check that we can become it, and make
 * TASK_DIR/work its own (0700).  0 with *ret_workfd, or 1 with the spawn
 * failure described in *res. */
static int prepare_user(const spec *s, int dirfd, gp_user *u, int *ret_workfd, gp_exec_result *res) {
        char q[ARG_SHOW_MAX + 8];
        quote(q, sizeof(q), s->run_as);
        int e = gp_user_lookup(s->run_as, u);
        if (e < 0) {
                spawn_failed(res, "run_as %s: %s", q,
                             e == -ENOENT ? "no such Unix user on this machine" : gp_strerror(e));
                return 1;
        }
        uid_t me = geteuid();
        if (me != 0 && me != u->uid) {
                spawn_failed(res, "run_as %s: the daemon runs as uid %u, not root, so it cannot start "
                             "tasks as another user (uid %u); the task was not run",
                             q, (unsigned)me, (unsigned)u->uid);
                return 1;
        }
        if (mkdirat(dirfd, WORK_NAME, 0700) < 0 && errno != EEXIST) {
                spawn_failed(res, "run_as %s: cannot create the work dir: %s", q, gp_strerror(-errno));
                return 1;
        }
        int fd = openat(dirfd, WORK_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fchown(fd, u->uid, u->gid) < 0 || fchmod(fd, 0700) < 0) {
                e = -errno;
                if (fd >= 0)
                        close(fd);
                spawn_failed(res, "run_as %s: cannot give the work dir to uid %u: %s", q, (unsigned)u->uid,
                             gp_strerror(e));
                return 1;
        }
        *ret_workfd = fd;
        return 0;
}

/* Start the command.  0 with r->pid set and the pipe in r->out, or a
 * spawn failure already described in *res (returns 1), or -errno. */
static int spawn(run *r, const spec *s, int dirfd, gp_exec_result *res) {
        char *own[ENV_MADE] = {NULL};
        char **envp = NULL;
        int out[2] = {-1, -1}, err[2] = {-1, -1}, workfd = -1;
        gp_user user;
        int rc = 0;
        if (s->run_as[0] && (rc = prepare_user(s, dirfd, &user, &workfd, res)) != 0)
                goto out;
        gp_user self;
        const gp_user *envu = workfd >= 0 ? &user : NULL;
        if (!envu && s->clean_env && self_user(&self) == 0)
                envu = &self; /* no switch, but the environment is still the user's own */
        rc = build_env(s, envu, &envp, own);
        if (rc < 0)
                goto out;
        if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
                rc = -errno;
                goto out;
        }
        pid_t pid = fork();
        if (pid < 0) {
                rc = -errno;
                goto out;
        }
        if (pid == 0)
                command_child(s, &r->cg, envp, dirfd, workfd, workfd >= 0 ? &user : NULL, out[1], err[1]);
        setpgid(pid, pid);   /* also here: no window where kill(-pid) misses */
        close(out[1]);
        close(err[1]);
        out[1] = err[1] = -1;
        start_msg m;
        ssize_t n;
        do
                n = read(err[0], &m, sizeof(m));
        while (n < 0 && errno == EINTR);
        if (n == (ssize_t)sizeof(m)) {
                /* it never became the command: reap it and say why */
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                char q[ARG_SHOW_MAX + 8];
                if (m.kind == SPAWN_CHDIR) {
                        quote(q, sizeof(q), s->workdir[0] ? s->workdir : WORK_NAME);
                        spawn_failed(res, "cannot enter workdir %s%s: %s", q, s->run_as[0] ? " as run_as" : "",
                                     gp_strerror(m.val));
                } else if (m.kind == SPAWN_CGROUP) {
                        spawn_failed(res, "cannot enter its cgroup %s: %s", r->cg.dir[0], gp_strerror(m.val));
                } else if (m.kind == SPAWN_USER) {
                        quote(q, sizeof(q), s->run_as);
                        spawn_failed(res, "run_as %s: cannot become that user: %s", q, gp_strerror(m.val));
                } else {
                        quote(q, sizeof(q), s->argv[0]);
                        spawn_failed(res, "cannot run %s: %s", q, gp_strerror(m.val));
                }
                rc = 1;
                goto out;
        }
        fcntl(out[0], F_SETFL, O_NONBLOCK);
        r->pid = pid;
        r->out = out[0];
        out[0] = -1;
        rc = 0;
out:
        for (int i = 0; i < 2; i++) {
                if (out[i] >= 0)
                        close(out[i]);
                if (err[i] >= 0)
                        close(err[i]);
        }
        if (workfd >= 0)
                close(workfd);
        free(envp);
        for (int i = 0; i < ENV_MADE; i++)
                free(own[i]);
        return rc;
}

static int open_log(run *r, int dirfd, const char *name) {
        int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                int e = errno ? errno : EINVAL;
                close(fd);
                return -e;
        }
        r->logfd = fd;
        r->logged = st.st_size;
        r->last = '\n';
        if (st.st_size > 0 && pread(fd, &r->last, 1, st.st_size - 1) != 1)
                r->last = '\n';
        /* the cap covers the whole file (the server names one per run), across attempts
         * that write it; beyond it, an earlier attempt already wrote the marker */
        r->capped = r->logged > r->cap;
        return 0;
}

int gp_exec_supervise_main(const char *task_dir) {
        if (!task_dir || !task_dir[0])
                return 2;
        /* Signals first: nobody may kill us with SIGTERM once our pid is
         * known, it has to become a cancel. */
        sigset_t mask;
        supervisor_sigset(&mask);
        sigprocmask(SIG_SETMASK, &mask, NULL);
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = SIG_IGN;
        sigaction(SIGHUP, &sa, NULL);
        sigaction(SIGPIPE, &sa, NULL);
        sa.sa_handler = SIG_DFL;   /* an ignored SIGCHLD would auto-reap the command */
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGCHLD, &sa, NULL);

        int status = 1, dirfd = -1, sigfd = -1, lockfd = -1;
        spec s;
        memset(&s, 0, sizeof(s));
        run r;
        memset(&r, 0, sizeof(r));
        r.out = r.logfd = -1;
        gp_exec_result res;
        memset(&res, 0, sizeof(res));

        int rc = setup_stdio();
        if (rc < 0) {
                say(task_dir, "cannot open /dev/null", rc);
                return 1;
        }
        dirfd = open_dir(task_dir);
        if (dirfd < 0) {
                say(task_dir, "cannot open task dir", dirfd);
                return 1;
        }
        /* one supervisor per start: a second one (started again by a daemon
         * that crashed before this one wrote its pidfile) waits for the
         * first, then finds its files and leaves without touching anything */
        lockfd = open_dir(task_dir);
        rc = lockfd < 0 ? lockfd : claim_dir(lockfd, dirfd);
        if (rc < 0) {
                say(task_dir, rc == -EEXIST ? "another supervisor already ran this start here" :
                                              "cannot lock task dir", rc);
                goto out;
        }
        (void)!chdir("/");   /* hold no mount busy; every path below goes through dirfd */
        /* orphans of the command become our children, so we can reap them */
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        rc = write_own_pidfile(dirfd);
        if (rc < 0) {
                say(task_dir, "cannot write " PIDFILE_NAME, rc);
                goto out;
        }
        char why[sizeof(res.message)];
        rc = spec_load(dirfd, &s, why, sizeof(why));
        if (rc < 0) {
                spawn_failed(&res, "%s", why);
                int wr = write_result(dirfd, &res);
                if (wr < 0)
                        say(task_dir, "cannot write " RESULT_NAME, wr);
                status = 1;   /* documented: a bad spec is also a non-zero exit */
                goto out;
        }
        sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sigfd < 0) {
                rc = -errno;
                say(task_dir, "signalfd", rc);
                spawn_failed(&res, "supervisor: signalfd: %s", gp_strerror(rc));
                goto write;
        }
        r.cap = s.max_log_bytes;
        rc = open_log(&r, dirfd, s.log_name);
        if (rc < 0) {
                spawn_failed(&res, "cannot open log: %s", gp_strerror(rc));
                goto write;
        }
        if (s.fence_file[0] && fenced(&s, gp_mono_ms())) { /* its node lost contact before it started */
                res.end = GP_EXEC_FENCED;
                res.exit_code = 127;
                res.finished_ms = gp_now_ms();
                set_message(&res, "fenced before it started: its node lost contact with the server");
                goto write;
        }
        rc = gp_cgroup_create(s.task_id, &s.limits, &r.cg, why, sizeof(why));
        if (rc < 0) {
                spawn_failed(&res, "%s", why);
                goto write;
        }
        rc = spawn(&r, &s, dirfd, &res);
        if (rc < 0) {
                spawn_failed(&res, "supervisor cannot start the command: %s", gp_strerror(rc));
                goto write;
        }
        if (rc == 1) {
                char line[sizeof(res.message) + 16];
                int n = snprintf(line, sizeof(line), "[gpupool: %s]\n", res.message);
                log_write(&r, line, (size_t)n);
                goto write;
        }
        supervise(&r, &s, sigfd);
        if (!r.exited) {
                /* poll failed: should not happen; stop everything, record it */
                kill(-r.pid, SIGKILL);
                while (waitpid(r.pid, &r.status, 0) < 0 && errno == EINTR)
                        ;
                r.exited = true;
                r.finished_ms = gp_now_ms();
        }
        result_of(&r, &s, &res);
        gp_cgroup_note_result(&r.cg, &res); /* host_memory_exceeded */
write:
        gp_cgroup_remove(&r.cg); /* its processes are gone: result.json means so */
        log_note_lost(&r);
        if (r.logfd >= 0)
                fsync(r.logfd);
        rc = write_result(dirfd, &res);
        /* a full disk: the end must not become "lost" (the daemon records
         * what this file says): try again every second, for a day at most */
        for (int i = 0; (rc == -ENOSPC || rc == -EDQUOT) && i < RESULT_RETRY_S; i++) {
                if (i == 0)
                        say(task_dir, "cannot write " RESULT_NAME " (trying again every second)", rc);
                sleep(1);
                rc = write_result(dirfd, &res);
        }
        if (!r.capped && log_note_lost(&r) && r.logfd >= 0) /* room again: say what was lost */
                fsync(r.logfd);
        if (rc < 0) {
                say(task_dir, "cannot write " RESULT_NAME, rc);
                status = 1;
        } else {
                status = 0;
        }
out:
        if (r.out >= 0)
                close(r.out);
        if (r.logfd >= 0)
                close(r.logfd);
        if (sigfd >= 0)
                close(sigfd);
        if (dirfd >= 0)
                close(dirfd);
        if (lockfd >= 0)
                close(lockfd); /* the next start in this dir may go */
        spec_done(&s);
        return status;
}
