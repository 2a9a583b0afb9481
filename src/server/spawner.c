/* spawner.c - starting batch tasks' supervisors once their `running`
 * state is durable, off the loop thread (the spawner thread), and reaping
 * what a failed start left.  A start whose fork or exec fails comes back
 * to the loop as a spawn failure (requeued or failed there).  daemon.c's
 * loop hands it ids (d->spq under d->sp_lock); see daemon-int.h.
 */
#include "server/daemon-int.h"
#include "server/commit.h"

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "base/vec.h"
#include "exec/exec.h"
#include "server/mps.h"
#include "server/nodes.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void defer_spawn(gp_daemon *d, int64_t id) {
        grow_ids(&d->deferred, d->ndeferred, &d->capdeferred);
        /* kept in start order: the list is taken from its end */
        memmove(d->deferred + 1, d->deferred, d->ndeferred * sizeof(*d->deferred));
        d->deferred[0] = id;
        d->ndeferred++;
}

void push_id(int64_t **v, size_t *n, size_t *cap, int64_t id) {
        grow_ids(v, *n, cap);
        (*v)[(*n)++] = id;
}

/* Supervisors the spawner could not start: the task fails (or, while an
 * earlier run still owns its dir, waits to be started again).  Loop
 * thread, under lock. */
void take_spawn_failures(gp_daemon *d, batch *b, int64_t now) {
        pthread_mutex_lock(&d->sp_lock);
        int64_t *v = d->spfail;
        size_t n = d->nspfail;
        d->spfail = NULL;
        d->nspfail = d->capspfail = 0;
        pthread_mutex_unlock(&d->sp_lock);
        for (size_t i = 0; i + 1 < n; i += 2) {
                gp_task *t = gp_i64map_get(&d->tasks, v[i]);
                if (!t || t->state != GP_TASK_RUNNING || t->is_lease || t->sup_pid != 0 ||
                    gp_i64map_get(&d->watch, t->id))
                        continue;
                int rc = (int)v[i + 1];
                if (rc == -EBUSY) {
                        defer_spawn(d, t->id);
                        continue;
                }
                if (rc == -GP_EMPS) /* its GPU's MPS control daemon: why, as the GPU says */
                        gp_mps_spawn_reason(d, t, t->reason, sizeof(t->reason));
                else
                        set_reason(t, "could not start its supervisor: %s", gp_strerror(rc));
                finish(d, b, t, GP_TASK_FAILED, now);
        }
        free(v);
}

/* Start one batch task's supervisor.  The task is read under the lock
 * (its own copy), started without it, and bound to its supervisor under
 * it again, if it is still the same run; otherwise (cancelled, preempted
 * meanwhile) that supervisor is told to stop and reaped later. */
static void spawn_one(gp_daemon *d, int64_t id) {
        pthread_mutex_lock(&d->lock);
        gp_task *t = gp_i64map_get(&d->tasks, id);
        bool go = t && t->state == GP_TASK_RUNNING && !t->is_lease && t->sup_pid == 0 &&
                  !gp_i64map_get(&d->watch, id);
        unsigned flags = go && gp_i64map_del(&d->fresh, id) ? GP_EXEC_FRESH : 0;
        gp_task copy;
        bool oom = false;
        if (go && gp_task_copy(&copy, t) < 0) {
                go = false;
                oom = true; /* reported below as a failed start */
        }
        int64_t started = t ? t->started_ms : 0;
        pthread_mutex_unlock(&d->lock);
        if (!go && !oom)
                return; /* ended, started already or no longer running */
        gp_exec_proc p = {0, 0};
        int rc = go ? spawn(d, &copy, flags, &p) : -ENOMEM;
        if (go)
                gp_task_done(&copy);
        char dir[PATH_MAX];
        task_dir(d, id, dir, sizeof(dir));
        if (rc == -EEXIST) {
                /* recovery: a supervisor started before the crash ran or runs
                 * this start; follow it (no pidfile: its result says) */
                if (gp_exec_read_pidfile(dir, &p) < 0)
                        p.pid = p.start = 0;
                rc = 0;
        }
        pthread_mutex_lock(&d->lock);
        t = gp_i64map_get(&d->tasks, id);
        bool same = t && t->state == GP_TASK_RUNNING && t->started_ms == started && t->sup_pid == 0 &&
                    !gp_i64map_get(&d->watch, id);
        if (rc == 0 && same) {
                t->sup_pid = p.pid;
                t->sup_start = p.start;
                watch_add(d, t); /* gone already: the loop reads its result */
        } else if (rc == 0 && p.pid > 0) {
                gp_exec_cancel(&p);
                int fd;
                if (gp_exec_watch(&p, &fd) == 0)
                        pidfd_done(d, fd);
        }
        pthread_mutex_unlock(&d->lock);
        if (rc < 0 && same) {
                pthread_mutex_lock(&d->sp_lock);
                push_id(&d->spfail, &d->nspfail, &d->capspfail, id);
                push_id(&d->spfail, &d->nspfail, &d->capspfail, rc);
                pthread_mutex_unlock(&d->sp_lock);
                uint64_t one = 1;
                ssize_t w = write(d->evfd, &one, sizeof(one));
                (void)w;
        }
}

/* The held effects of batches that are durable now: resized tasks are
 * told (notify_resized), supervisors go to the deferred starts.  Loop
 * thread, without d->lock. */
void release_durable(gp_daemon *d) {
        size_t n;
        const gp_commit_held *rel = gp_commit_release(d, &n);
        for (size_t k = 0; k < n; k++) {
                if (rel[k].resized) {
                        grow_ids(&d->resized, d->nresized, &d->capresized);
                        d->resized[d->nresized++] = rel[k].id;
                } else {
                        /* start supervisors only now that `running` is durable
                         * (and the answers are out), and only once no preempted
                         * run is still stopping: the spawner thread starts them,
                         * many at once; on agent nodes, their agents do */
                        pthread_mutex_lock(&d->lock);
                        gp_task *t = gp_i64map_get(&d->tasks, rel[k].id);
                        bool remote = t && gp_nodes_remote(t);
                        if (remote && t->state == GP_TASK_RUNNING)
                                gp_nodes_start(d, t);
                        pthread_mutex_unlock(&d->lock);
                        if (!remote)
                                defer_spawn(d, rel[k].id);
                }
        }
        if (n) {
                pthread_mutex_lock(&d->lock);
                gp_nodes_flush(d, gp_commit_applied(d));
                pthread_mutex_unlock(&d->lock);
        }
        notify_resized(d);
}

static void reap_strays(gp_daemon *d) {
        pthread_mutex_lock(&d->sp_lock);
        size_t k = 0;
        for (size_t i = 0; i < d->nstrays; i++) {
                if (gp_exec_reap(d->strays[i]) != 0)
                        close(d->strays[i]);
                else
                        d->strays[k++] = d->strays[i];
        }
        d->nstrays = k;
        pthread_mutex_unlock(&d->sp_lock);
}

/* The spawner thread: takes every queued start at once and starts them one
 * after another (posix_spawn: a few hundred microseconds each, no fsync,
 * no waiting for the supervisor), while the loop goes on storing and
 * answering. */
void *spawner_main(void *arg) {
        gp_daemon *d = arg;
        int64_t *ids = NULL;
        size_t cap = 0;
        for (;;) {
                pthread_mutex_lock(&d->sp_lock);
                while (d->nspq == 0 && !__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE)) {
                        if (d->nstrays == 0) {
                                pthread_cond_wait(&d->sp_cond, &d->sp_lock);
                                continue;
                        }
                        struct timespec ts;
                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_nsec += 100 * 1000 * 1000;
                        if (ts.tv_nsec >= 1000000000L) {
                                ts.tv_sec++;
                                ts.tv_nsec -= 1000000000L;
                        }
                        pthread_cond_timedwait(&d->sp_cond, &d->sp_lock, &ts);
                        break;
                }
                if (__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE)) {
                        pthread_mutex_unlock(&d->sp_lock);
                        break;
                }
                /* swap: the loop fills a fresh list meanwhile */
                int64_t *v = d->spq;
                size_t n = d->nspq, c = d->capspq;
                d->spq = ids;
                d->nspq = 0;
                d->capspq = cap;
                ids = v;
                cap = c;
                pthread_mutex_unlock(&d->sp_lock);
                for (size_t i = 0; i < n && !__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE); i++)
                        spawn_one(d, ids[i]);
                reap_strays(d);
        }
        free(ids);
        return NULL;
}
