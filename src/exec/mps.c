/* mps.c - NVIDIA MPS control daemons as processes (exec/mps.h).
 *
 * Invariants: every child is started with posix_spawn (nothing runs
 * between fork and exec), in a session of its own with an empty signal
 * mask and default dispositions (the daemon's threads block signals, its
 * children must not inherit that); every wait is bounded; every byte read
 * from a child or a file is bounded (GP_MPS_OUT_MAX, PID_MAX_BYTES,
 * CMDLINE_MAX_BYTES).
 */
#include "exec/mps.h"

#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PID_MAX_BYTES 32
#define CMDLINE_MAX_BYTES 4096
#define ENV_MAX 8192 /* entries of the caller's environment passed on */
#define MPS_NAME "nvidia-cuda-mps-control"

extern char **environ;

static int64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int mkdir_parents(const char *path) {
        char p[PATH_MAX];
        if (gp_strlcpy(p, path, sizeof(p)) >= sizeof(p) || p[0] != '/')
                return -EINVAL;
        for (char *s = p + 1;; s++) {
                if (*s != '/' && *s != '\0')
                        continue;
                char c = *s;
                *s = '\0';
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *s = c;
                if (c == '\0')
                        break;
        }
        struct stat st;
        if (stat(path, &st) < 0)
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* The caller's environment without the names in drop, then add (NULL-
 * terminated "K=V").  The strings are the caller's and add's: free only
 * the array. */
static char **env_with(const char *const *add) {
        size_t n = 0, na = 0;
        while (environ && environ[n] && n < ENV_MAX)
                n++;
        while (add[na])
                na++;
        char **v = calloc(n + na + 1, sizeof(char *));
        if (!v)
                return NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                bool dup = false;
                for (size_t j = 0; j < na && !dup; j++) {
                        size_t l = strcspn(add[j], "=") + 1;
                        dup = !strncmp(environ[i], add[j], l);
                }
                if (!dup)
                        v[k++] = environ[i];
        }
        for (size_t j = 0; j < na; j++)
                v[k++] = (char *)add[j];
        v[k] = NULL;
        return v;
}

/* posix_spawnp prog argv with stdin from in_fd (-1: /dev/null) and
 * stdout+stderr into out_fd (-1: /dev/null), its own session, default
 * signals.  0 with *ret_pid or -errno. */
static int spawn_child(const char *prog, char *const argv[], char *const envp[], int in_fd, int out_fd,
                       pid_t *ret_pid) {
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        int r;
        if ((r = -posix_spawn_file_actions_init(&fa)) < 0)
                return r;
        if ((r = -posix_spawnattr_init(&attr)) < 0) {
                posix_spawn_file_actions_destroy(&fa);
                return r;
        }
        if (in_fd >= 0)
                r = -posix_spawn_file_actions_adddup2(&fa, in_fd, STDIN_FILENO);
        else
                r = -posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        if (out_fd >= 0) {
                r = r ? r : -posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
                r = r ? r : -posix_spawn_file_actions_adddup2(&fa, out_fd, STDERR_FILENO);
        } else {
                r = r ? r : -posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
                r = r ? r : -posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
        }
        r = r ? r : -posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
        r = r ? r
              : -posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        r = r ? r : -posix_spawnattr_setsigmask(&attr, &none);
        r = r ? r : -posix_spawnattr_setsigdefault(&attr, &all);
        pid_t pid = 0;
        r = r ? r : -posix_spawnp(&pid, prog, &fa, &attr, argv, envp);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        if (r == 0)
                *ret_pid = pid;
        return r;
}

int gp_mps_reap(int64_t pid, int *ret_status) {
        int st = 0;
        pid_t w;
        do
                w = waitpid((pid_t)pid, &st, WNOHANG);
        while (w < 0 && errno == EINTR);
        if (w < 0)
                return -errno;
        if (w == 0)
                return 0;
        if (ret_status)
                *ret_status = st;
        return 1;
}

/* One line of what a child printed: control characters become spaces,
 * trailing space goes. */
static void one_line(char *s) {
        for (char *p = s; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        *p = ' ';
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == ' ')
                s[--n] = '\0';
}

int gp_mps_daemon_find(const char *pipe_dir, int64_t *ret_pid) {
        char path[PATH_MAX], buf[CMDLINE_MAX_BYTES + 1];
        if (snprintf(path, sizeof(path), "%s/%s", pipe_dir, GP_MPS_PID_FILE) >= (int)sizeof(path))
                return -ENAMETOOLONG;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return errno == ENOENT ? -ENOENT : -errno;
        ssize_t n = read(fd, buf, PID_MAX_BYTES);
        close(fd);
        if (n <= 0)
                return -ENOENT; /* empty: being written, or left behind */
        buf[n] = '\0';
        buf[strcspn(buf, " \t\r\n")] = '\0';
        int64_t pid;
        if (gp_parse_i64(buf, 1, INT_MAX, &pid) < 0)
                return -ENOENT;
        snprintf(path, sizeof(path), "/proc/%lld/cmdline", (long long)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -ENOENT; /* gone: a stale pid file */
        n = read(fd, buf, CMDLINE_MAX_BYTES);
        close(fd);
        if (n <= 0)
                return -ENOENT; /* a zombie has no command line */
        /* its arguments (a script's interpreter comes first): one names the program */
        for (ssize_t i = 0; i < n;) {
                const char *a = buf + i;
                size_t l = strnlen(a, (size_t)(n - i));
                const char *base = memrchr(a, '/', l);
                base = base ? base + 1 : a;
                if ((size_t)(a + l - base) == strlen(MPS_NAME) && !memcmp(base, MPS_NAME, strlen(MPS_NAME))) {
                        *ret_pid = pid;
                        return 0;
                }
                i += (ssize_t)l + 1;
        }
        return -ENOENT; /* the pid went to another program */
}

int gp_mps_daemon_start(const char *prog, const char *pipe_dir, const char *log_dir, const char *devices,
                        int64_t *ret_pid, char *err, size_t errlen) {
        char e_dev[256], e_pipe[PATH_MAX + 32], e_log[PATH_MAX + 32], out[GP_MPS_OUT_MAX + 1];
        int r;
        if ((r = mkdir_parents(pipe_dir)) < 0 || (r = mkdir_parents(log_dir)) < 0) {
                snprintf(err, errlen, "cannot make its pipe or log directory under %s: %s", pipe_dir, strerror(-r));
                return r;
        }
        if (snprintf(e_dev, sizeof(e_dev), "CUDA_VISIBLE_DEVICES=%s", devices) >= (int)sizeof(e_dev) ||
            snprintf(e_pipe, sizeof(e_pipe), "CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir) >= (int)sizeof(e_pipe) ||
            snprintf(e_log, sizeof(e_log), "CUDA_MPS_LOG_DIRECTORY=%s", log_dir) >= (int)sizeof(e_log)) {
                snprintf(err, errlen, "its directories' names are too long");
                return -ENAMETOOLONG;
        }
        const char *add[] = {e_dev, e_pipe, e_log, NULL};
        char **envp = env_with(add);
        int pfd[2] = {-1, -1};
        if (!envp || pipe2(pfd, O_CLOEXEC) < 0) {
                r = envp ? -errno : -ENOMEM;
                free(envp);
                snprintf(err, errlen, "%s", strerror(-r));
                return r;
        }
        char *argv[] = {(char *)prog, (char *)"-d", NULL};
        pid_t pid;
        r = spawn_child(prog, argv, envp, -1, pfd[1], &pid);
        free(envp);
        close(pfd[1]);
        if (r < 0) {
                close(pfd[0]);
                snprintf(err, errlen, r == -ENOENT ? "%s: not found (gpus.mps_control; PATH is searched)" : "%s: %s",
                         prog, strerror(-r));
                return r;
        }
        /* its output until it exits (not until EOF: a daemon may keep the pipe) */
        size_t len = 0;
        int st = 0, gone = 0;
        int64_t deadline = mono_ms() + GP_MPS_START_MS;
        fcntl(pfd[0], F_SETFL, O_NONBLOCK);
        while (!gone && mono_ms() < deadline) {
                struct pollfd p = {.fd = pfd[0], .events = POLLIN};
                if (poll(&p, 1, 50) > 0) {
                        char tmp[256];
                        ssize_t n = read(pfd[0], tmp, sizeof(tmp));
                        if (n > 0 && len < GP_MPS_OUT_MAX) {
                                size_t take = (size_t)n < GP_MPS_OUT_MAX - len ? (size_t)n : GP_MPS_OUT_MAX - len;
                                memcpy(out + len, tmp, take);
                                len += take;
                        } else if (n == 0) {
                                p.fd = -1; /* EOF: only the exit is awaited now */
                                usleep(20000);
                        }
                }
                gone = gp_mps_reap(pid, &st);
                if (gone < 0)
                        break;
        }
        ssize_t n = gone > 0 && len < GP_MPS_OUT_MAX ? read(pfd[0], out + len, GP_MPS_OUT_MAX - len) : 0;
        len += n > 0 ? (size_t)n : 0;
        close(pfd[0]);
        out[len] = '\0';
        one_line(out);
        if (gone == 0) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                snprintf(err, errlen, "`%s -d` did not return within %d s", prog, GP_MPS_START_MS / 1000);
                return -ETIMEDOUT;
        }
        if (gone < 0) {
                snprintf(err, errlen, "`%s -d`: %s", prog, strerror(-gone));
                return gone;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                if (WIFEXITED(st))
                        snprintf(err, errlen, "`%s -d` exited with %d%s%s", prog, WEXITSTATUS(st), out[0] ? ": " : "",
                                 out);
                else
                        snprintf(err, errlen, "`%s -d` was killed by signal %d%s%s", prog, WTERMSIG(st),
                                 out[0] ? ": " : "", out);
                return -EIO;
        }
        /* returned 0: the daemon says so in its pid file */
        while (mono_ms() < deadline) {
                if (gp_mps_daemon_find(pipe_dir, ret_pid) == 0)
                        return 0;
                usleep(20000);
        }
        snprintf(err, errlen, "`%s -d` returned but no live daemon wrote %s/%s", prog, pipe_dir, GP_MPS_PID_FILE);
        return -ETIMEDOUT;
}

int gp_mps_daemon_quit(const char *prog, const char *pipe_dir, int64_t *ret_pid) {
        char e_pipe[PATH_MAX + 32];
        if (snprintf(e_pipe, sizeof(e_pipe), "CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir) >= (int)sizeof(e_pipe))
                return -ENAMETOOLONG;
        const char *add[] = {e_pipe, NULL};
        char **envp = env_with(add);
        int pfd[2];
        if (!envp)
                return -ENOMEM;
        if (pipe2(pfd, O_CLOEXEC) < 0) {
                int r = -errno;
                free(envp);
                return r;
        }
        char *argv[] = {(char *)prog, NULL};
        pid_t pid;
        int r = spawn_child(prog, argv, envp, pfd[0], -1, &pid);
        free(envp);
        close(pfd[0]);
        if (r == 0) {
                /* 5 bytes into an empty pipe: never blocks; a child already gone gets EPIPE (ignored) */
                static const char quit[] = "quit\n";
                ssize_t w = write(pfd[1], quit, sizeof(quit) - 1);
                (void)w;
                *ret_pid = pid;
        }
        close(pfd[1]);
        return r;
}

void gp_mps_client_env(const char *pipe, const char *log, int64_t memory_mb, int pct, const char *uuid,
                       gp_mps_client *ret) {
        // cppcheck-suppress ctuuninitvar ; snprintf writes ret's buffers and reads none of them
        snprintf(ret->env[0], sizeof(ret->env[0]), "CUDA_MPS_PIPE_DIRECTORY=%s", pipe);
        snprintf(ret->env[1], sizeof(ret->env[1]), "CUDA_MPS_LOG_DIRECTORY=%s", log);
        snprintf(ret->env[2], sizeof(ret->env[2]), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%lldM", (long long)memory_mb);
        snprintf(ret->env[3], sizeof(ret->env[3]), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", pct);
        gp_strlcpy(ret->cuda_visible_devices, uuid && *uuid ? uuid : "0", sizeof(ret->cuda_visible_devices));
}
