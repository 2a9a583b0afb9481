/* run.c - `gpupool run`: hold GPUs as a lease, run a command here with
 * them, release them (like srun/salloc).
 *
 * Sequence: submit a lease (a task without command, lease_ttl_s = --ttl);
 * long-poll GET /tasks/{id}?wait=30 while it is queued, telling the user
 * why it waits; when it runs, fork/exec the command with
 * CUDA_VISIBLE_DEVICES, GPUPOOL_TASK_ID and GPUPOOL_GPUS set, heartbeat
 * every ttl/3 from a thread, and when the command ends POST /release with
 * its exit code and exit with that code (128+signal if it was killed).
 *
 * Signals: SIGINT/SIGTERM/SIGHUP are caught for the duration (and the old
 * handlers restored).  While queued they abort the wait and the lease is
 * cancelled.  While the command runs they are forwarded to it, except a
 * signal the terminal sent to the whole foreground process group
 * (si_code == SI_KERNEL), which the command has already received.
 * If a heartbeat learns that the lease is gone (404/409 or a state other
 * than running) the command gets SIGTERM, then SIGKILL after 10 s; when
 * the lease is being preempted ("preempting"), SIGKILL comes at the
 * server's preempt_deadline instead, and the lease is released when the
 * command has ended.
 * The child is reaped only after child_pid is cleared under the lock, so
 * neither the handler nor the heartbeat thread can signal a reused pid.
 */
#include "cli/cli-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"
#include "base/vec.h"

extern char **environ;

#define WAIT_POLL_S 30           /* ?wait= of the long poll */
#define UNREACHABLE_GRACE_MS 60000 /* keep waiting through a server outage this long */
#define LOST_KILL_GRACE_MS 10000 /* SIGTERM -> SIGKILL when the lease is lost */
#define CONTROL_TIMEOUT_S 30L    /* cancel / release */

static volatile sig_atomic_t got_signal;  /* last signal caught, 0 = none */
static volatile sig_atomic_t child_pid;   /* > 0 while the child exists unreaped */

static void on_signal(int sig, siginfo_t *si, void *uc) {
        int saved = errno;
        got_signal = sig;
        pid_t p = (pid_t)child_pid;
        if (p > 0 && !(si && si->si_code == SI_KERNEL))
                kill(p, sig);
        errno = saved;
}

/* Wait for the command pid to end without reaping it, so its pid stays
 * ours.  Through its pidfd, waking at least every 100 ms: a signal that
 * came just before the wait is then handled (and forwarded) even where
 * the handler's run is held back until the next libc call, as under
 * ThreadSanitizer, instead of the wait blocking with the command never
 * told.  Without a pidfd, a plain blocking waitid. */
static void wait_exit(pid_t pid) {
        int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
        for (;;) {
                siginfo_t si;
                memset(&si, 0, sizeof(si));
                if (pfd < 0) {
                        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) == 0 || errno != EINTR)
                                break;
                        continue;
                }
                struct pollfd p = {.fd = pfd, .events = POLLIN};
                if (poll(&p, 1, 100) <= 0)
                        continue; /* timeout or EINTR: look again */
                if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT | WNOHANG) < 0 ? errno != EINTR : si.si_pid != 0)
                        break;
        }
        if (pfd >= 0)
                close(pfd);
}

static const int caught[] = {SIGINT, SIGTERM, SIGHUP};

struct hb {
        pthread_mutex_t mu;
        pthread_cond_t cv;       /* signalled when stop is set */
        bool stop;               /* main: the command ended, stop heartbeating */
        bool reaped;             /* main: the child is gone; do not signal pid */
        bool lost;               /* thread: the server no longer holds the lease */
        pid_t pid;               /* the command */
        volatile sig_atomic_t abort; /* aborts the heartbeat in flight */
        gp_cli_conn conn;
        int64_t id;
        int64_t interval_ms;
        long timeout_s;
        FILE *err;
};

static void deadline_in(struct timespec *ts, int64_t ms) {
        clock_gettime(CLOCK_MONOTONIC, ts);
        ts->tv_sec += ms / 1000;
        ts->tv_nsec += (ms % 1000) * 1000000;
        if (ts->tv_nsec >= 1000000000) {
                ts->tv_sec++;
                ts->tv_nsec -= 1000000000;
        }
}

/* Sleep up to ms or until stop; returns stop. Called with mu held. */
static bool hb_sleep(struct hb *h, int64_t ms) {
        struct timespec ts;
        deadline_in(&ts, ms);
        while (!h->stop)
                if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) == ETIMEDOUT)
                        break;
        return h->stop;
}

static void hb_kill(struct hb *h, int sig) {
        pthread_mutex_lock(&h->mu);
        if (!h->reaped)
                kill(h->pid, sig);
        pthread_mutex_unlock(&h->mu);
}

static void *hb_main(void *arg) {
        struct hb *h = arg;
        char path[96];
        bool warned = false;
        snprintf(path, sizeof(path), "/api/v1/tasks/%" PRId64 "/heartbeat", h->id);
        pthread_mutex_lock(&h->mu);
        for (;;) {
                if (hb_sleep(h, h->interval_ms))
                        break;
                pthread_mutex_unlock(&h->mu);
                gp_cli_resp r = {0};
                gp_buf msg;
                gp_buf_init(&msg, 4096);
                int rc = gp_cli_http_json(&h->conn, "POST", path, NULL, h->timeout_s, &r, &msg);
                const char *state = json_string_value(json_object_get(r.json, "state"));
                bool ok = rc == 0 && r.status >= 200 && r.status < 300;
                bool lost = rc == 0 && (r.status == 404 || r.status == 409 ||
                                        (ok && state && strcmp(state, "running") != 0));
                int64_t grace_ms = LOST_KILL_GRACE_MS, deadline;
                const char *dl = json_string_value(json_object_get(r.json, "preempt_deadline"));
                if (lost && state && !strcmp(state, "preempting") && dl && gp_time_parse(dl, &deadline) == 0) {
                        /* the server gives us until its deadline to let go */
                        grace_ms = deadline - gp_now_ms();
                        grace_ms = grace_ms < 0 ? 0 : grace_ms > 86400000 ? 86400000 : grace_ms;
                        fprintf(h->err, "gpupool: lease %" PRId64 " was preempted; stopping the command "
                                        "(SIGTERM now, SIGKILL at %s)\n",
                                h->id, dl);
                } else if (lost) {
                        fprintf(h->err, "gpupool: warning: lease %" PRId64 " was lost (%s%s%s); "
                                        "stopping the command\n",
                                h->id, state ? "state " : "HTTP ", state ? state : "",
                                state ? "" : (r.status == 404 ? "404" : "409"));
                } else if (ok && warned) {
                        fprintf(h->err, "gpupool: heartbeat for lease %" PRId64 " works again\n", h->id);
                        warned = false;
                } else if (!ok && !warned && rc != -ECANCELED) {
                        fprintf(h->err, "gpupool: warning: heartbeat for lease %" PRId64 " failed: %s; "
                                        "retrying\n",
                                h->id, rc < 0 ? (msg.data ? msg.data : gp_strerror(rc)) : "server said no");
                        warned = true;
                }
                gp_cli_resp_done(&r);
                gp_buf_done(&msg);
                pthread_mutex_lock(&h->mu);
                if (lost) {
                        h->lost = true;
                        pthread_mutex_unlock(&h->mu);
                        hb_kill(h, SIGTERM);
                        pthread_mutex_lock(&h->mu);
                        if (!hb_sleep(h, grace_ms)) {
                                pthread_mutex_unlock(&h->mu);
                                hb_kill(h, SIGKILL);
                                pthread_mutex_lock(&h->mu);
                        }
                        break;
                }
        }
        pthread_mutex_unlock(&h->mu);
        return NULL;
}

/* "K=V" list: environ, then --env, then ours; a later name replaces. */
struct envv {
        const char **v;          /* NULL-terminated */
        size_t n, alloc;
        char *own[4];            /* strings we allocated */
};

static int env_set(struct envv *e, const char *kv) {
        size_t klen = strcspn(kv, "=");
        for (size_t i = 0; i < e->n; i++)
                if (strncmp(e->v[i], kv, klen) == 0 && e->v[i][klen] == '=') {
                        e->v[i] = kv;
                        return 0;
                }
        const char **nv = gp_vec_grow(e->v, &e->alloc, e->n + 2, sizeof(*nv), 64); /* and the NULL */
        if (!nv)
                return -ENOMEM;
        e->v = nv;
        e->v[e->n++] = kv;
        e->v[e->n] = NULL;
        return 0;
}

static void env_done(struct envv *e) {
        free(e->v);
        for (size_t i = 0; i < GP_ARRAY_SIZE(e->own); i++)
                free(e->own[i]);
}

static int env_build(struct envv *e, const gp_cli_cmd *c, int64_t id, const char *cvd,
                     const char *gpus) {
        int r = 0;
        memset(e, 0, sizeof(*e));
        for (char **p = environ; p && *p && r == 0; p++)
                if (strchr(*p, '='))
                        r = env_set(e, *p);
        for (int i = 0; i < c->n_env && r == 0; i++)
                r = env_set(e, c->env[i]);
        if (r < 0)
                return r;
        if (asprintf(&e->own[0], "CUDA_VISIBLE_DEVICES=%s", cvd) < 0)
                e->own[0] = NULL;
        if (asprintf(&e->own[1], "GPUPOOL_TASK_ID=%" PRId64, id) < 0)
                e->own[1] = NULL;
        if (asprintf(&e->own[2], "GPUPOOL_GPUS=%s", gpus) < 0)
                e->own[2] = NULL;
        /* the indexes in CUDA_VISIBLE_DEVICES are NVML's, which follow the PCI bus */
        e->own[3] = strdup("CUDA_DEVICE_ORDER=PCI_BUS_ID");
        for (size_t i = 0; i < GP_ARRAY_SIZE(e->own); i++) {
                if (!e->own[i])
                        return -ENOMEM;
                if ((r = env_set(e, e->own[i])) < 0)
                        return r;
        }
        if (!e->v)
                return env_set(e, e->own[0]);
        return 0;
}

/* "local:0,local:1" from the task's gpus array. */
static int gpus_string(const json_t *task, gp_buf *b) {
        json_t *gpus = json_object_get(task, "gpus"), *g;
        size_t i;
        int r = gp_buf_puts(b, "");
        if (json_is_array(gpus))
                json_array_foreach(gpus, i, g) {
                        const char *node = json_string_value(json_object_get(g, "node"));
                        json_t *idx = json_object_get(g, "index");
                        r = gp_buf_printf(b, "%s%s:%" PRId64, i ? "," : "", node ? node : "local",
                                          json_is_integer(idx) ? (int64_t)json_integer_value(idx) : -1);
                        if (r < 0)
                                break;
                }
        return r;
}

static void control_call(const gp_cli_cmd *c, FILE *err, int64_t id, const char *what,
                         const json_t *body, bool quiet) {
        gp_cli_conn conn = {.api = c->api, .key = c->key, .cacert = c->cacert};
        char path[96];
        gp_cli_resp r = {0};
        gp_buf msg;
        gp_buf_init(&msg, 4096);
        snprintf(path, sizeof(path), "/api/v1/tasks/%" PRId64 "/%s", id, what);
        int rc = gp_cli_http_json(&conn, "POST", path, body, CONTROL_TIMEOUT_S, &r, &msg);
        if (!(rc == 0 && r.status >= 200 && r.status < 300) && !quiet) {
                fprintf(err, "gpupool: warning: could not %s lease %" PRId64 "; it ends by itself "
                             "when its TTL passes:\n",
                        what, id);
                gp_cli_check(err, rc, &r, &msg);
        }
        gp_cli_resp_done(&r);
        gp_buf_done(&msg);
}

static int exit_of(int status) {
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        if (WIFSIGNALED(status))
                return 128 + WTERMSIG(status);
        return 1;
}

/* Wait until the lease runs.  Returns 0 with *ret_task (owned) running, or
 * an exit code (> 0) after printing why; cancels the lease when interrupted. */
static int wait_running(const gp_cli_cmd *c, FILE *err, int64_t id, json_t *task, json_t **ret_task,
                        bool *ret_waited) {
        gp_cli_conn conn = {.api = c->api, .key = c->key, .cacert = c->cacert, .abort_flag = &got_signal};
        char path[96];
        char *last_reason = NULL;
        int64_t unreachable_since = 0;
        int ex = GP_CLI_EXIT_REFUSED;

        snprintf(path, sizeof(path), "/api/v1/tasks/%" PRId64 "?wait=%d", id, WAIT_POLL_S);
        json_incref(task);
        for (;;) {
                if (got_signal) {
                        control_call(c, err, id, "cancel", NULL, false);
                        fprintf(err, "gpupool: interrupted; lease %" PRId64 " cancelled\n", id);
                        ex = 128 + got_signal;
                        break;
                }
                const char *state = json_string_value(json_object_get(task, "state"));
                if (state && strcmp(state, "running") == 0) {
                        *ret_task = task;
                        task = NULL;
                        ex = 0;
                        break;
                }
                if (!state || strcmp(state, "queued") != 0) {
                        const char *reason = json_string_value(json_object_get(task, "reason"));
                        gp_buf b;
                        gp_buf_init(&b, 4096);
                        gp_cli_put_clean(&b, reason && *reason ? reason : "no reason given", 200);
                        fprintf(err, "gpupool: lease %" PRId64 " ended before it started: %s: %s\n", id,
                                state ? state : "unknown state", b.data ? b.data : "");
                        gp_buf_done(&b);
                        ex = GP_CLI_EXIT_REFUSED;
                        break;
                }
                const char *reason = json_string_value(json_object_get(task, "reason"));
                if (!reason || !*reason)
                        reason = "queued";
                if (!last_reason || strcmp(last_reason, reason) != 0) {
                        json_t *n = json_object_get(task, "gpu_request");
                        gp_buf b;
                        gp_buf_init(&b, 4096);
                        gp_cli_put_clean(&b, reason, 200);
                        fprintf(err, "waiting for %" PRId64 " GPU(s): %s\n",
                                json_is_integer(n) ? (int64_t)json_integer_value(n) : 1,
                                b.data ? b.data : "");
                        gp_buf_done(&b);
                        free(last_reason);
                        last_reason = strdup(reason);
                }
                *ret_waited = true;

                gp_cli_resp r = {0};
                gp_buf msg;
                gp_buf_init(&msg, 4096);
                int rc = gp_cli_http_json(&conn, "GET", path, NULL, GP_CLI_REQUEST_TIMEOUT_S, &r, &msg);
                if (rc == -ECANCELED) {
                        gp_buf_done(&msg);
                        continue; /* got_signal is set */
                }
                if (rc == -EHOSTUNREACH) {
                        int64_t now = gp_mono_ms();
                        if (!unreachable_since) {
                                unreachable_since = now;
                                fprintf(err, "gpupool: warning: %s; retrying\n", msg.data ? msg.data : "");
                        }
                        gp_buf_done(&msg);
                        if (now - unreachable_since > UNREACHABLE_GRACE_MS) {
                                fprintf(err, "gpupool: giving up on lease %" PRId64 "\n", id);
                                ex = GP_CLI_EXIT_UNREACHABLE;
                                control_call(c, err, id, "cancel", NULL, true);
                                break;
                        }
                        sleep(1); /* a signal ends it early */
                        continue;
                }
                unreachable_since = 0;
                ex = gp_cli_check(err, rc, &r, &msg);
                gp_buf_done(&msg);
                if (ex != GP_CLI_EXIT_OK) {
                        gp_cli_resp_done(&r);
                        break;
                }
                json_decref(task);
                task = r.json;
                r.json = NULL;
                gp_cli_resp_done(&r);
        }
        free(last_reason);
        json_decref(task);
        return ex;
}

/* Start the command; returns its pid or a negative errno (message printed). */
static pid_t spawn(const gp_cli_cmd *c, FILE *err, const char *const *envp, int *ret_exec_errno) {
        int pfd[2];
        *ret_exec_errno = 0;
        if (pipe2(pfd, O_CLOEXEC) < 0)
                return -errno;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
                int e = errno;
                close(pfd[0]);
                close(pfd[1]);
                return -e;
        }
        if (pid == 0) {
                /* child: only async-signal-safe calls */
                close(pfd[0]);
                struct sigaction dfl = {.sa_handler = SIG_DFL};
                sigemptyset(&dfl.sa_mask);
                for (size_t i = 0; i < GP_ARRAY_SIZE(caught); i++)
                        sigaction(caught[i], &dfl, NULL);
                int e = 0;
                if (c->workdir && chdir(c->workdir) < 0)
                        e = errno;
                else
                        execvpe(c->argv_cmd[0], c->argv_cmd, (char *const *)envp);
                if (!e)
                        e = errno;
                ssize_t w = write(pfd[1], &e, sizeof(e));
                (void)w;
                _exit(e == ENOENT ? 127 : 126);
        }
        child_pid = pid;
        close(pfd[1]);
        int e = 0;
        ssize_t n;
        do
                n = read(pfd[0], &e, sizeof(e));
        while (n < 0 && errno == EINTR);
        close(pfd[0]);
        if (n == (ssize_t)sizeof(e) && e) {
                *ret_exec_errno = e;
                gp_buf b;
                gp_buf_init(&b, 8192);
                gp_cli_put_clean(&b, c->workdir && e != ENOENT && e != EACCES ? c->workdir : c->argv_cmd[0], 200);
                fprintf(err, "gpupool: cannot run %s: %s\n", b.data ? b.data : "", strerror(e));
                gp_buf_done(&b);
        }
        return pid;
}

int gp_cli_cmd_run(const gp_cli_cmd *c, FILE *out, FILE *err) {
        gp_cli_conn conn = {.api = c->api, .key = c->key, .cacert = c->cacert, .abort_flag = &got_signal};
        struct sigaction old[GP_ARRAY_SIZE(caught)], sa = {.sa_sigaction = on_signal,
                                                           .sa_flags = SA_SIGINFO | SA_RESTART};
        gp_cli_resp r = {0};
        gp_buf msg, gpus;
        json_t *task = NULL;
        struct envv env = {0};
        bool waited = false, hb_started = false;
        int64_t id = 0;
        int ex;
        struct hb h = {.err = err};

        got_signal = 0;
        child_pid = 0;
        gp_buf_init(&msg, 4096);
        gp_buf_init(&gpus, 64 * 1024);
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < GP_ARRAY_SIZE(caught); i++)
                sigaction(caught[i], &sa, &old[i]);

        int rc = gp_cli_http_json(&conn, "POST", "/api/v1/tasks", c->body, GP_CLI_REQUEST_TIMEOUT_S, &r, &msg);
        if (rc == -ECANCELED) {
                fprintf(err, "gpupool: interrupted\n");
                ex = 128 + got_signal;
                goto out;
        }
        ex = gp_cli_check(err, rc, &r, &msg);
        if (ex != GP_CLI_EXIT_OK)
                goto out;
        json_t *jid = json_object_get(r.json, "id");
        if (!json_is_integer(jid) || json_integer_value(jid) <= 0) {
                fprintf(err, "gpupool: the server's answer has no task id\n");
                ex = GP_CLI_EXIT_REFUSED;
                goto out;
        }
        id = json_integer_value(jid);
        ex = wait_running(c, err, id, r.json, &task, &waited);
        if (ex != 0)
                goto out;

        const char *cvd = json_string_value(json_object_get(task, "cuda_visible_devices"));
        if (!cvd)
                cvd = "";
        if (gpus_string(task, &gpus) < 0 || env_build(&env, c, id, cvd, gpus.data ? gpus.data : "") < 0) {
                fprintf(err, "gpupool: out of memory\n");
                ex = GP_CLI_EXIT_REFUSED;
                control_call(c, err, id, "release", NULL, false);
                goto out;
        }
        if (waited)
                fprintf(err, "gpupool: lease %" PRId64 " granted: CUDA_VISIBLE_DEVICES=%s\n", id, cvd);
        if (got_signal) {
                control_call(c, err, id, "release", NULL, false);
                fprintf(err, "gpupool: interrupted; lease %" PRId64 " released\n", id);
                ex = 128 + got_signal;
                goto out;
        }

        int exec_errno;
        pid_t pid = spawn(c, err, env.v, &exec_errno);
        if (pid < 0) {
                fprintf(err, "gpupool: cannot start the command: %s\n", strerror(-pid));
                ex = GP_CLI_EXIT_REFUSED;
                control_call(c, err, id, "release", NULL, false);
                goto out;
        }

        /* heartbeat thread, with our caught signals blocked so they come here */
        pthread_condattr_t ca;
        pthread_t tid;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&h.cv, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&h.mu, NULL);
        h.pid = pid;
        h.id = id;
        h.conn = (gp_cli_conn){.api = c->api, .key = c->key, .cacert = c->cacert, .abort_flag = &h.abort};
        h.interval_ms = c->ttl_s * 1000 / 3;
        h.timeout_s = c->ttl_s < 10 ? 10 : (c->ttl_s > GP_CLI_REQUEST_TIMEOUT_S ? GP_CLI_REQUEST_TIMEOUT_S : c->ttl_s);
        if (!exec_errno) {
                sigset_t block, prev;
                sigemptyset(&block);
                for (size_t i = 0; i < GP_ARRAY_SIZE(caught); i++)
                        sigaddset(&block, caught[i]);
                pthread_sigmask(SIG_BLOCK, &block, &prev);
                hb_started = pthread_create(&tid, NULL, hb_main, &h) == 0;
                pthread_sigmask(SIG_SETMASK, &prev, NULL);
                if (!hb_started)
                        fprintf(err, "gpupool: warning: cannot start the heartbeat thread; lease %" PRId64
                                     " will expire after %" PRId64 " s\n", id, c->ttl_s);
        }

        wait_exit(pid);
        pthread_mutex_lock(&h.mu);
        h.reaped = true;
        child_pid = 0;
        h.stop = true;
        h.abort = 1;
        pthread_cond_broadcast(&h.cv);
        pthread_mutex_unlock(&h.mu);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (hb_started)
                pthread_join(tid, NULL);
        pthread_mutex_destroy(&h.mu);
        pthread_cond_destroy(&h.cv);
        ex = exit_of(status);

        json_t *rel = json_pack("{s:i}", "exit_code", ex);
        control_call(c, err, id, "release", rel, h.lost);
        json_decref(rel);
        if (h.lost)
                fprintf(err, "gpupool: the command was stopped because lease %" PRId64 " was lost\n", id);
        (void)out;
out:
        for (size_t i = 0; i < GP_ARRAY_SIZE(caught); i++)
                sigaction(caught[i], &old[i], NULL);
        json_decref(task);
        gp_cli_resp_done(&r);
        env_done(&env);
        gp_buf_done(&msg);
        gp_buf_done(&gpus);
        return ex;
}
