/* mps-pool.c - one machine's MPS control daemons (exec/mps-pool.h).
 *
 * Invariants:
 *  - one control daemon per GPU index at most: every start and every quit
 *    of GPU i's daemon happens under p->mu, and a start first waits until
 *    a quitting daemon of that pipe directory is gone (the daemon itself
 *    refuses a second one on its pipe directory too);
 *  - a daemon is told to quit only by a look, with p->mu held, when the
 *    caller's needed() says its GPU has no client; a start for a client
 *    that stopped meanwhile may start one again, which the next look quits;
 *  - the state says what was last seen; gp_mps_daemon_find (the pid file
 *    and /proc) is the truth, asked before a daemon is trusted again;
 *  - state, pid and err change only with both mutexes held, and are read
 *    by others with st_mu alone.
 */
#include "exec/mps-pool.h"

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "exec/mps.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOOK_MS 500          /* a look, at most this often */
#define QUIT_WAIT_MS 10000   /* a start waits this long for a quitting daemon to go */
#define QUIT_RETRY_MS 10000  /* a daemon still alive this long after its quit is told again */
#define DIR_MAX_ENTRIES 4096 /* entries of MPS_DIR or a pipe dir looked at, at most */

enum {
        DOWN = 0,
        UP,
        QUITTING,
        FAILED
};

typedef struct gpu_mps {
        int state;
        int64_t pid;              /* the daemon's (UP, QUITTING) */
        int64_t quit_pid;         /* our `quit` child not reaped yet, 0 = none */
        int64_t quit_ms;          /* when it was told to quit */
        char err[GP_MPS_ERR_MAX]; /* FAILED: why it could not start */
} gpu_mps;

struct gp_mps_pool {
        bool scanned;       /* what an earlier process left was looked at */
        int64_t next_ms;    /* the next look */
        char dir[PATH_MAX]; /* MPS_DIR, absolute */
        char prog[PATH_MAX];
        pthread_mutex_t mu;    /* held for every start and quit (seconds at most) */
        pthread_mutex_t st_mu; /* held to change or read gpu[]'s state, pid and err (never long) */
        gpu_mps gpu[GP_MPS_MAX_GPUS];
};

int gp_mps_pool_new(const char *dir, const char *prog, gp_mps_pool **ret, char *err, size_t errlen) {
        gp_mps_pool *p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        pthread_mutex_init(&p->mu, NULL);
        pthread_mutex_init(&p->st_mu, NULL);
        gp_strlcpy(p->prog, prog, sizeof(p->prog));
        int rc = 0;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                rc = -errno;
        else if (!realpath(dir, p->dir))
                rc = -errno;
        else if (strlen(p->dir) > PATH_MAX - 64)
                rc = -ENAMETOOLONG;
        if (rc < 0) {
                snprintf(err, errlen, "MPS directory %s: %s", dir, strerror(-rc));
                gp_mps_pool_free(p);
                return rc;
        }
        chmod(p->dir, 0755); /* the clients (run_as users too) reach the pipes through it */
        *ret = p;
        return 0;
}

void gp_mps_pool_free(gp_mps_pool *p) {
        if (!p)
                return;
        for (int i = 0; i < GP_MPS_MAX_GPUS; i++)
                if (p->gpu[i].quit_pid > 0)
                        gp_mps_reap(p->gpu[i].quit_pid, NULL); /* else init reaps it */
        pthread_mutex_destroy(&p->mu);
        pthread_mutex_destroy(&p->st_mu);
        free(p);
}

/* MPS_DIR/<i>/pipe and MPS_DIR/<i>/log (MPS_DIR is at most PATH_MAX - 64 long). */
static void dirs(const gp_mps_pool *p, int i, char *pipe, char *log, size_t size) {
        if (snprintf(pipe, size, "%s/%d/pipe", p->dir, i) >= (int)size ||
            snprintf(log, size, "%s/%d/log", p->dir, i) >= (int)size)
                pipe[0] = log[0] = '\0'; /* cannot happen (see above) */
}

/* What readers see of s (p->mu held: the only writer). */
static void set_state(gp_mps_pool *p, gpu_mps *s, int state, int64_t pid, const char *err) {
        pthread_mutex_lock(&p->st_mu);
        s->state = state;
        s->pid = pid;
        if (err)
                gp_strlcpy(s->err, err, sizeof(s->err));
        pthread_mutex_unlock(&p->st_mu);
}

int gp_mps_pool_ensure(gp_mps_pool *p, int i, const char *devices, char *pipe, char *log, size_t size) {
        if (i < 0 || i >= GP_MPS_MAX_GPUS)
                return -EINVAL;
        pthread_mutex_lock(&p->mu);
        gpu_mps *s = &p->gpu[i];
        int64_t pid;
        int rc = 0;
        dirs(p, i, pipe, log, size);
        if (s->state == UP && gp_mps_daemon_find(pipe, &pid) == 0)
                goto out;
        if (s->state == UP)
                gp_warn("GPU %d: its MPS control daemon (pid %" PRId64 ") is gone; starting another", i, s->pid);
        if (s->state == QUITTING) /* one daemon per pipe dir: wait for the old one to go */
                for (int w = 0; w < QUIT_WAIT_MS / 50 && gp_mps_daemon_find(pipe, &pid) == 0; w++) {
                        if (s->quit_pid > 0 && gp_mps_reap(s->quit_pid, NULL) != 0)
                                s->quit_pid = 0;
                        usleep(50000);
                }
        if (s->quit_pid > 0 && gp_mps_reap(s->quit_pid, NULL) != 0)
                s->quit_pid = 0;
        char err[GP_MPS_ERR_MAX];
        if ((rc = gp_mps_daemon_start(p->prog, pipe, log, devices, &pid, err, sizeof(err))) < 0) {
                set_state(p, s, FAILED, 0, err);
                gp_warn("GPU %d: its MPS control daemon could not start: %s", i, err);
                rc = -GP_EMPS;
                goto out;
        }
        set_state(p, s, UP, pid, "");
        gp_info("GPU %d: MPS control daemon started (pid %" PRId64 ", pipe directory %s)", i, pid, pipe);
out:
        pthread_mutex_unlock(&p->mu);
        return rc;
}

gp_mps_daemon_state gp_mps_pool_state(gp_mps_pool *p, int i, int64_t *ret_pid, char *err, size_t errlen) {
        if (i < 0 || i >= GP_MPS_MAX_GPUS)
                return GP_MPS_STOPPED;
        pthread_mutex_lock(&p->st_mu);
        const gpu_mps *s = &p->gpu[i];
        gp_mps_daemon_state st = s->state == FAILED                       ? GP_MPS_FAILED
                                 : s->state == UP || s->state == QUITTING ? GP_MPS_RUNNING
                                                                          : GP_MPS_STOPPED;
        if (ret_pid)
                *ret_pid = s->pid;
        if (err && errlen)
                gp_strlcpy(err, s->state == FAILED ? s->err : "", errlen);
        pthread_mutex_unlock(&p->st_mu);
        return st;
}

/* Remove what a dead daemon left in pipe (its files and sockets; not
 * directories). */
static void clear_dir(const char *pipe) {
        DIR *dir = opendir(pipe);
        struct dirent *de;
        int seen = 0;
        // cppcheck-suppress readdirCalled ; one thread (a look, under p->mu) reads this directory stream
        while (dir && (de = readdir(dir)) && seen++ < DIR_MAX_ENTRIES)
                if (de->d_type != DT_DIR && unlinkat(dirfd(dir), de->d_name, 0) < 0)
                        gp_warn("%s/%s: cannot remove: %s", pipe, de->d_name, strerror(errno));
        if (dir)
                closedir(dir);
}

/* The directories an earlier process left: adopt the live daemons, clear
 * the dead ones' pipe directories. */
static void scan(gp_mps_pool *p) {
        DIR *dir = opendir(p->dir);
        struct dirent *de;
        int seen = 0;
        // cppcheck-suppress readdirCalled ; one thread (a look, under p->mu) reads this directory stream
        while (dir && (de = readdir(dir)) && seen++ < DIR_MAX_ENTRIES) {
                int64_t i, pid;
                if (gp_parse_i64(de->d_name, 0, GP_MPS_MAX_GPUS - 1, &i) < 0)
                        continue;
                char pipe[PATH_MAX], log[PATH_MAX];
                dirs(p, (int)i, pipe, log, sizeof(pipe));
                if (gp_mps_daemon_find(pipe, &pid) == 0) {
                        set_state(p, &p->gpu[i], UP, pid, NULL);
                        gp_info("GPU %d: adopted its running MPS control daemon (pid %" PRId64 ")", (int)i, pid);
                } else if (access(pipe, F_OK) == 0) {
                        clear_dir(pipe);
                        gp_info("GPU %d: its MPS control daemon is gone; cleared %s", (int)i, pipe);
                }
        }
        if (dir)
                closedir(dir);
}

void gp_mps_pool_look(gp_mps_pool *p, int64_t now, gp_mps_needed_fn needed_fn, void *ud) {
        if (now < p->next_ms)
                return;
        p->next_ms = now + LOOK_MS;
        if (pthread_mutex_trylock(&p->mu) != 0)
                return; /* a start is under way: look next time */
        if (!p->scanned) {
                scan(p);
                p->scanned = true;
        }
        bool any = false;
        for (int i = 0; i < GP_MPS_MAX_GPUS; i++) {
                gpu_mps *s = &p->gpu[i];
                if (s->quit_pid > 0 && gp_mps_reap(s->quit_pid, NULL) != 0)
                        s->quit_pid = 0;
                any = any || s->state == UP || s->state == QUITTING;
        }
        bool needed[GP_MPS_MAX_GPUS] = {false};
        bool may_quit = any && needed_fn(ud, needed);
        for (int i = 0; any && i < GP_MPS_MAX_GPUS; i++) {
                gpu_mps *s = &p->gpu[i];
                char pipe[PATH_MAX], log[PATH_MAX];
                int64_t pid;
                if (s->state != UP && s->state != QUITTING)
                        continue;
                dirs(p, i, pipe, log, sizeof(pipe));
                if (gp_mps_daemon_find(pipe, &pid) < 0) {
                        if (s->state == UP)
                                gp_warn("GPU %d: its MPS control daemon (pid %" PRId64 ") died", i, s->pid);
                        else
                                gp_info("GPU %d: its MPS control daemon (pid %" PRId64 ") quit", i, s->pid);
                        set_state(p, s, DOWN, 0, NULL);
                        continue;
                }
                if (needed[i] || !may_quit)
                        continue; /* clients run, or may */
                if (s->state == QUITTING && (s->quit_pid > 0 || now - s->quit_ms < QUIT_RETRY_MS))
                        continue;
                int rc = gp_mps_daemon_quit(p->prog, pipe, &s->quit_pid);
                if (rc < 0) {
                        gp_warn("GPU %d: cannot tell its MPS control daemon to quit: %s: %s", i, p->prog,
                                strerror(-rc));
                        continue;
                }
                gp_info("GPU %d: no MPS client left: its MPS control daemon (pid %" PRId64 ") is told to quit", i, pid);
                set_state(p, s, QUITTING, s->pid, NULL);
                s->quit_ms = now;
        }
        pthread_mutex_unlock(&p->mu);
}
