/* mps.c - gpus.sharing: mps on the server's own GPUs (server/mps.h).
 *
 * Invariants:
 *  - one control daemon per GPU index at most: every start and every quit
 *    of GPU i's daemon happens under m->mu, and a start first waits until
 *    a quitting daemon of that pipe directory is gone (the daemon itself
 *    refuses a second one on its pipe directory too);
 *  - a daemon is quit only by the loop, with d->lock and m->mu held, when
 *    no task in d->tasks is a running MPS client of that GPU and no
 *    preempted run is still stopping; a spawn whose task stopped running
 *    meanwhile may start one again, which the next look quits;
 *  - the state says what was last seen; gp_mps_daemon_find (the pid file
 *    and /proc) is the truth, asked before a daemon is trusted again.
 */
#include "server/mps.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "config/config.h"
#include "core/sched.h"
#include "exec/mps.h"
#include "server/nodes.h"
#include "server/server-int.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MPS_MAX_GPUS 256    /* GPU indexes 0..255 may be mps */
#define LOOK_MS 500         /* the loop's look, at most this often */
#define QUIT_WAIT_MS 10000  /* a start waits this long for a quitting daemon to go */
#define QUIT_RETRY_MS 10000 /* a daemon still alive this long after its quit is told again */
#define ERR_MAX 400
#define DIR_MAX_ENTRIES 4096 /* entries of MPS_DIR or a pipe dir looked at, at most */

enum { DOWN = 0, UP, QUITTING, FAILED };

typedef struct gpu_mps {
        int state;
        int64_t pid;          /* the daemon's (UP, QUITTING) */
        int64_t quit_pid;     /* our `quit` child not reaped yet, 0 = none */
        int64_t quit_ms;      /* when it was told to quit */
        char err[ERR_MAX];    /* FAILED: why it could not start */
} gpu_mps;

struct gp_mps {
        bool on;              /* gpus.sharing: mps */
        bool scanned;         /* the directories left by an earlier server were looked at */
        int64_t next_ms;      /* the loop's next look */
        char dir[PATH_MAX];   /* MPS_DIR, absolute */
        char prog[PATH_MAX];  /* gpus.mps_control */
        pthread_mutex_t mu;   /* held for every start and quit (seconds at most), and to change gpu[] */
        pthread_mutex_t st_mu; /* held to change or read gpu[]'s state, pid and err (never long) */
        gpu_mps gpu[MPS_MAX_GPUS];
};

static const char *const state_names[] = {"stopped", "running", "running", "failed"};

int gp_mps_new(const gp_config *cfg, gp_mps **ret, char *err, size_t errlen) {
        gp_mps *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        pthread_mutex_init(&m->mu, NULL);
        pthread_mutex_init(&m->st_mu, NULL);
        m->on = cfg->gpu_mps;
        gp_strlcpy(m->prog, cfg->mps_control, sizeof(m->prog));
        if (m->on) {
                char d[PATH_MAX];
                int n = cfg->mps_dir[0] ? snprintf(d, sizeof(d), "%s", cfg->mps_dir)
                                        : snprintf(d, sizeof(d), "%s/mps", cfg->data_dir);
                if (n < 0 || (size_t)n >= sizeof(d) || (mkdir(d, 0755) < 0 && errno != EEXIST) ||
                    !realpath(d, m->dir)) {
                        snprintf(err, errlen, "gpus.mps_dir %s: %s", d, n < 0 || (size_t)n >= sizeof(d)
                                                                                ? "too long" : strerror(errno));
                        gp_mps_free(m);
                        return -EINVAL;
                }
                if (strlen(m->dir) > PATH_MAX - 64) {
                        snprintf(err, errlen, "gpus.mps_dir %s: too long", m->dir);
                        gp_mps_free(m);
                        return -ENAMETOOLONG;
                }
                /* the clients (run_as users too) reach the pipes through it */
                chmod(m->dir, 0755);
        }
        *ret = m;
        return 0;
}

void gp_mps_free(gp_mps *m) {
        if (!m)
                return;
        for (int i = 0; i < MPS_MAX_GPUS; i++)
                if (m->gpu[i].quit_pid > 0)
                        gp_mps_reap(m->gpu[i].quit_pid, NULL); /* else init reaps it */
        pthread_mutex_destroy(&m->mu);
        pthread_mutex_destroy(&m->st_mu);
        free(m);
}

/* MPS_DIR/<i>/pipe and MPS_DIR/<i>/log (MPS_DIR is at most PATH_MAX - 64 long: gp_mps_new). */
static void dirs(const gp_mps *m, int i, char *pipe, char *log, size_t size) {
        if (snprintf(pipe, size, "%s/%d/pipe", m->dir, i) >= (int)size ||
            snprintf(log, size, "%s/%d/log", m->dir, i) >= (int)size)
                pipe[0] = log[0] = '\0'; /* cannot happen (see above) */
}

/* Is the view's GPU listed in gpus.mps_gpus (or is none listed)? */
static bool listed(const gp_config *cfg, const gp_sched_gpu_view *v) {
        if (cfg->n_mps_gpus == 0)
                return true;
        char idx[16];
        snprintf(idx, sizeof(idx), "%d", v->index);
        for (int i = 0; i < cfg->n_mps_gpus; i++)
                if (!strcmp(cfg->mps_gpus[i], idx) || (v->uuid && !strcmp(cfg->mps_gpus[i], v->uuid)))
                        return true;
        return false;
}

static bool view_on(gp_daemon *d, const gp_sched_gpu_view *v) {
        return d->mps && d->mps->on && !strcmp(v->node, "local") && v->index >= 0 && v->index < MPS_MAX_GPUS &&
               !v->removed && listed(&d->cfg, v);
}

bool gp_mps_gpu_on(gp_daemon *d, uint32_t g) {
        gp_sched_gpu_view v;
        return d->mps && d->mps->on && gp_sched_gpu_get(d->sched, g, &v) == 0 && view_on(d, &v);
}

/* t's GPU view when it is a running MPS client. */
static bool client_view(gp_daemon *d, const gp_task *t, gp_sched_gpu_view *ret) {
        uint32_t g;
        return !t->is_lease && t->memory_mb > 0 && t->n_gpus == 1 && t->elastic_max_gpus == 0 && !gp_nodes_remote(t) &&
               gp_sched_gpu_find(d->sched, t->gpus[0].node, t->gpus[0].index, &g) == 0 &&
               gp_sched_gpu_get(d->sched, g, ret) == 0 && view_on(d, ret);
}

bool gp_mps_task_on(gp_daemon *d, const gp_task *t) {
        if (!d->mps || !d->mps->on || t->is_lease || t->memory_mb <= 0)
                return false;
        if (t->state == GP_TASK_QUEUED && t->n_gpus == 0)
                return d->cfg.n_mps_gpus == 0 && t->gpu_request == 1 && t->elastic_max_gpus == 0;
        gp_sched_gpu_view v;
        return client_view(d, t, &v);
}

int gp_mps_task_compute_pct(const gp_task *t) {
        if (!t->spec || !strstr(t->spec, "\"compute_pct\"")) /* most specs: no parse */
                return 0;
        json_t *spec = json_loads(t->spec, 0, NULL);
        json_int_t v = spec ? json_integer_value(json_object_get(spec, "compute_pct")) : 0;
        json_decref(spec);
        return v >= 1 && v <= 100 ? (int)v : 0;
}

/* Its own compute_pct, or memory_mb x 100 / the GPU's memory rounded up, 1..100. */
static int compute_pct(const gp_task *t, int64_t gpu_mb) {
        int own = gp_mps_task_compute_pct(t);
        if (own > 0)
                return own;
        if (gpu_mb <= 0)
                return 100;
        int64_t p = (t->memory_mb * 100 + gpu_mb - 1) / gpu_mb;
        return p < 1 ? 1 : p > 100 ? 100 : (int)p;
}

/* What readers see of s (m->mu held: the only writer). */
static void set_state(gp_mps *m, gpu_mps *s, int state, int64_t pid, const char *err) {
        pthread_mutex_lock(&m->st_mu);
        s->state = state;
        s->pid = pid;
        if (err)
                gp_strlcpy(s->err, err, sizeof(s->err));
        pthread_mutex_unlock(&m->st_mu);
}

/* GPU i's daemon is running when this returns 0 (m->mu held). */
static int ensure(gp_mps *m, int i, const char *uuid, char *pipe, char *log, size_t size) {
        gpu_mps *s = &m->gpu[i];
        int64_t pid;
        dirs(m, i, pipe, log, size);
        if (s->state == UP && gp_mps_daemon_find(pipe, &pid) == 0)
                return 0;
        if (s->state == UP)
                gp_warn("GPU %d: its MPS control daemon (pid %" PRId64 ") is gone; starting another", i, s->pid);
        if (s->state == QUITTING) { /* one daemon per pipe dir: wait for the old one to go */
                for (int w = 0; w < QUIT_WAIT_MS / 50 && gp_mps_daemon_find(pipe, &pid) == 0; w++) {
                        if (s->quit_pid > 0 && gp_mps_reap(s->quit_pid, NULL) != 0)
                                s->quit_pid = 0;
                        usleep(50000);
                }
        }
        if (s->quit_pid > 0 && gp_mps_reap(s->quit_pid, NULL) != 0)
                s->quit_pid = 0;
        char devices[GP_UUID_MAX + 16];
        if (uuid && *uuid)
                gp_strlcpy(devices, uuid, sizeof(devices));
        else
                snprintf(devices, sizeof(devices), "%d", i);
        char err[ERR_MAX];
        int rc = gp_mps_daemon_start(m->prog, pipe, log, devices, &pid, err, sizeof(err));
        if (rc < 0) {
                set_state(m, s, FAILED, 0, err);
                gp_warn("GPU %d: its MPS control daemon could not start: %s", i, err);
                return -GP_EMPS;
        }
        set_state(m, s, UP, pid, "");
        gp_info("GPU %d: MPS control daemon started (pid %" PRId64 ", pipe directory %s)", i, pid, pipe);
        return 0;
}

int gp_mps_client_prepare(gp_daemon *d, const gp_task *t, gp_mps_client *ret) {
        gp_mps *m = d->mps;
        if (!m || !m->on)
                return 0;
        pthread_mutex_lock(&d->lock);
        gp_sched_gpu_view v;
        bool on = client_view(d, t, &v);
        char uuid[GP_UUID_MAX] = "";
        int64_t gpu_mb = on ? v.memory_total_mb : 0;
        int i = on ? v.index : -1;
        if (on && v.uuid)
                gp_strlcpy(uuid, v.uuid, sizeof(uuid));
        pthread_mutex_unlock(&d->lock);
        if (!on)
                return 0;
        char pipe[PATH_MAX], log[PATH_MAX];
        pthread_mutex_lock(&m->mu);
        int rc = ensure(m, i, uuid, pipe, log, sizeof(pipe));
        pthread_mutex_unlock(&m->mu);
        if (rc < 0)
                return rc;
        snprintf(ret->env[0], sizeof(ret->env[0]), "CUDA_MPS_PIPE_DIRECTORY=%s", pipe);
        snprintf(ret->env[1], sizeof(ret->env[1]), "CUDA_MPS_LOG_DIRECTORY=%s", log);
        /* the client sees one device, its GPU, as device 0 */
        snprintf(ret->env[2], sizeof(ret->env[2]), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%" PRId64 "M", t->memory_mb);
        snprintf(ret->env[3], sizeof(ret->env[3]), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", compute_pct(t, gpu_mb));
        gp_strlcpy(ret->cuda_visible_devices, uuid[0] ? uuid : "0", sizeof(ret->cuda_visible_devices));
        return 1;
}

void gp_mps_spawn_reason(gp_daemon *d, const gp_task *t, char *buf, size_t size) {
        gp_mps *m = d->mps;
        int i = t->n_gpus > 0 ? t->gpus[0].index : -1;
        if (!m || i < 0 || i >= MPS_MAX_GPUS) {
                snprintf(buf, size, "mps: %s", gp_strerror(-GP_EMPS));
                return;
        }
        pthread_mutex_lock(&m->st_mu);
        snprintf(buf, size, "mps: the MPS control daemon of GPU %d could not start: %s", i,
                 m->gpu[i].err[0] ? m->gpu[i].err : "unknown error");
        pthread_mutex_unlock(&m->st_mu);
}

/* Remove what a dead daemon left in pipe (its files and sockets; not
 * directories). */
static void clear_dir(const char *pipe) {
        DIR *dir = opendir(pipe);
        struct dirent *de;
        int seen = 0;
        // cppcheck-suppress readdirCalled ; one thread (the loop, under m->mu) reads this directory stream
        while (dir && (de = readdir(dir)) && seen++ < DIR_MAX_ENTRIES)
                if (de->d_type != DT_DIR && unlinkat(dirfd(dir), de->d_name, 0) < 0)
                        gp_warn("%s/%s: cannot remove: %s", pipe, de->d_name, strerror(errno));
        if (dir)
                closedir(dir);
}

/* The directories an earlier server left: adopt the live daemons, clear
 * the dead ones' pipe directories. */
static void scan(gp_mps *m) {
        DIR *dir = opendir(m->dir);
        struct dirent *de;
        int seen = 0;
        // cppcheck-suppress readdirCalled ; one thread (the loop, under m->mu) reads this directory stream
        while (dir && (de = readdir(dir)) && seen++ < DIR_MAX_ENTRIES) {
                int64_t i, pid;
                if (gp_parse_i64(de->d_name, 0, MPS_MAX_GPUS - 1, &i) < 0)
                        continue;
                char pipe[PATH_MAX], log[PATH_MAX];
                dirs(m, (int)i, pipe, log, sizeof(pipe));
                if (gp_mps_daemon_find(pipe, &pid) == 0) {
                        set_state(m, &m->gpu[i], UP, pid, NULL);
                        gp_info("GPU %d: adopted its running MPS control daemon (pid %" PRId64 ")", (int)i, pid);
                } else if (access(pipe, F_OK) == 0) {
                        clear_dir(pipe);
                        gp_info("GPU %d: its MPS control daemon is gone; cleared %s", (int)i, pipe);
                }
        }
        if (dir)
                closedir(dir);
}

void gp_mps_tick(gp_daemon *d, int64_t now) {
        gp_mps *m = d->mps;
        if (!m || !m->on || now < m->next_ms)
                return;
        m->next_ms = now + LOOK_MS;
        if (pthread_mutex_trylock(&m->mu) != 0)
                return; /* the spawner is starting one: look next time */
        if (!m->scanned) {
                scan(m);
                m->scanned = true;
        }
        bool any = false;
        for (int i = 0; i < MPS_MAX_GPUS; i++) {
                gpu_mps *s = &m->gpu[i];
                if (s->quit_pid > 0 && gp_mps_reap(s->quit_pid, NULL) != 0)
                        s->quit_pid = 0;
                any = any || s->state == UP || s->state == QUITTING;
        }
        if (!any) {
                pthread_mutex_unlock(&m->mu);
                return;
        }
        static bool needed[MPS_MAX_GPUS]; /* the loop thread's */
        memset(needed, 0, sizeof(needed));
        size_t pos = 0;
        gp_task *t;
        gp_sched_gpu_view v;
        while ((t = gp_i64map_next(&d->tasks, &pos, NULL)))
                if (t->state == GP_TASK_RUNNING && client_view(d, t, &v))
                        needed[v.index] = true;
        for (int i = 0; i < MPS_MAX_GPUS; i++) {
                gpu_mps *s = &m->gpu[i];
                char pipe[PATH_MAX], log[PATH_MAX];
                int64_t pid;
                if (s->state != UP && s->state != QUITTING)
                        continue;
                dirs(m, i, pipe, log, sizeof(pipe));
                if (gp_mps_daemon_find(pipe, &pid) < 0) {
                        if (s->state == UP)
                                gp_warn("GPU %d: its MPS control daemon (pid %" PRId64 ") died", i, s->pid);
                        else
                                gp_info("GPU %d: its MPS control daemon (pid %" PRId64 ") quit", i, s->pid);
                        set_state(m, s, DOWN, 0, NULL);
                        continue;
                }
                if (needed[i] || d->ndraining > 0)
                        continue; /* clients run, or a preempted run may still be one */
                if (s->state == QUITTING && (s->quit_pid > 0 || now - s->quit_ms < QUIT_RETRY_MS))
                        continue;
                int rc = gp_mps_daemon_quit(m->prog, pipe, &s->quit_pid);
                if (rc < 0) {
                        gp_warn("GPU %d: cannot tell its MPS control daemon to quit: %s: %s", i, m->prog,
                                strerror(-rc));
                        continue;
                }
                gp_info("GPU %d: no MPS client left: its MPS control daemon (pid %" PRId64 ") is told to quit", i,
                        pid);
                set_state(m, s, QUITTING, s->pid, NULL);
                s->quit_ms = now;
        }
        pthread_mutex_unlock(&m->mu);
}

void gp_mps_gpu_json(gp_daemon *d, uint32_t g, json_t *o) {
        gp_sched_gpu_view v;
        if (!gp_mps_gpu_on(d, g) || gp_sched_gpu_get(d->sched, g, &v) < 0) {
                json_object_set_new(o, "mps", json_null());
                return;
        }
        gp_mps *m = d->mps;
        json_t *x = json_object();
        if (!x)
                return;
        pthread_mutex_lock(&m->st_mu);
        const gpu_mps *s = &m->gpu[v.index];
        json_object_set_new(x, "daemon", json_string(state_names[s->state]));
        json_object_set_new(x, "pid", s->pid > 0 ? json_integer(s->pid) : json_null());
        json_object_set_new(x, "error", s->state == FAILED ? json_string(s->err) : json_null());
        pthread_mutex_unlock(&m->st_mu);
        json_object_set_new(o, "mps", x);
}

int gp_mps_task_write(gp_daemon *d, const gp_task *t, gp_buf *b) {
        if (!gp_mps_task_on(d, t))
                return 0;
        gp_sched_gpu_view v;
        int64_t gpu_mb = t->n_gpus == 1 && client_view(d, t, &v) ? v.memory_total_mb : 0;
        if (gpu_mb <= 0 && gp_mps_task_compute_pct(t) == 0)
                return 0; /* queued, none asked: known once placed */
        return gp_buf_printf(b, ",\"compute_pct\":%d", compute_pct(t, gpu_mb));
}
