/* daemon-open.c - the daemon's start, stop and recovery, and its GPU
 * sampler and checkpoint threads (daemon.c has the decision loop).
 *
 * Recovery: every stored task is put back where it was: queued tasks in
 * their queues; running ones on their GPUs (node local's found by uuid, an
 * agent node's by node and index), their supervisors re-attached (or
 * started, for a running task whose start was stored but never spawned);
 * finished ones stay in the store.  The sampler reads the GPU backend off
 * the request path and pushes health and load into the scheduler.  What
 * both files share is in daemon-int.h.
 */
#include "server/daemon-int.h"
#include "server/commit.h"
#include "server/submit.h"
#include "server/tenants.h"
#include "server/billing.h"
#include "server/disk.h"

#include "base/err.h"
#include "base/exe.h"
#include "base/log.h"
#include "base/util.h"
#include "base/vec.h"
#include "core/billing.h"
#include "exec/exec.h"
#include "server/monitor.h"
#include "server/nodes.h"
#include "server/nodes-tele.h"
#include "server/coord.h"
#include "server/estimates.h"
#include "server/history.h"
#include "server/idem.h"
#include "server/hostlim.h"
#include "server/mps.h"
#include "base/labels.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* GPU sampler                                                         */

static void sample(gp_daemon *d) {
        gp_gpu_info *info = NULL;
        size_t n = 0;
        if (strcmp(d->backend, "sim") == 0) {
                pthread_mutex_lock(&d->lock);
                for (size_t i = 0; i < d->ngpus; i++) {
                        gp_sched_gpu_view v;
                        gp_sched_gpu_get(d->sched, d->gpu_ids[i], &v);
                        gp_gpu_sim_set_load(d->gpu, (int)i, v.memory_allocated_mb, v.ntasks);
                }
                pthread_mutex_unlock(&d->lock);
        }
        if (!d->gpu)
                return;
        if (gp_gpu_read(d->gpu, &info, &n) < 0) {
                gp_monitor_gpu_read(d, false, gp_now_ms());
                return;
        }
        gp_monitor_gpu_read(d, true, gp_now_ms());
        bool changed = false;
        cmd *failed[64];
        size_t nfailed = 0;
        pthread_mutex_lock(&d->lock);
        for (size_t i = 0; i < n && i < d->ngpus && nfailed < 64; i++) {
                uint32_t g = d->gpu_ids[i];
                gp_sched_gpu_view v;
                gp_sched_gpu_get(d->sched, g, &v);
                if (v.healthy != info[i].healthy) {
                        gp_sched_gpu_set_healthy(d->sched, g, info[i].healthy);
                        changed = true;
                        if (!info[i].healthy) {
                                gp_warn("GPU local:%d unhealthy: %s", info[i].index, info[i].health_reason);
                                cmd *c = gp_cmd_new(CMD_GPU_FAILED);
                                if (c) {
                                        c->gpu.gpu = g;
                                        gp_strlcpy(c->gpu.why, info[i].health_reason, sizeof(c->gpu.why));
                                        failed[nfailed++] = c;
                                }
                        } else {
                                gp_info("GPU local:%d healthy again", info[i].index);
                        }
                }
                gp_sched_gpu_set_load(d->sched, g, info[i].util_pct, info[i].temp_c);
        }
        free(d->gpu_info);
        d->gpu_info = info;
        changed |= gp_tele_local_sample(d); /* less foreign GPU memory: a run may start something */
        pthread_mutex_unlock(&d->lock);
        for (size_t k = 0; k < nfailed; k++)
                gp_daemon_post(d, failed[k]);
        if (changed) {
                uint64_t one = 1;
                ssize_t w = write(d->evfd, &one, sizeof(one));
                (void)w;
        }
}

/* Copy the WAL into the database every 200 ms (PASSIVE: never blocks the
 * loop's commits), so commits pay for one WAL fsync and nothing more. */
static void *checkpoint_main(void *arg) {
        gp_daemon *d = arg;
        while (!__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE)) {
                for (int i = 0; i < 2 && !__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE); i++)
                        usleep(100 * 1000);
                /* on a full disk it fails each time: said once, by disk.c */
                if (gp_store_checkpoint(d->cs, NULL) < 0 && !gp_disk_degraded(d) && !gp_store_full(d->cs))
                        gp_warn("WAL checkpoint: %s", gp_store_errmsg(d->cs));
        }
        return NULL;
}

static void *sampler_main(void *arg) {
        gp_daemon *d = arg;
        /* GPUs every gpu_poll_ms; metrics history and alerts every monitor_sample_ms.
         * Simulated readings cost nothing and follow the scheduler's state, so
         * they are refreshed at every monitor tick too (no stale sim cards). */
        bool sim = strcmp(d->backend, "sim") == 0;
        int64_t next_gpu = gp_mono_ms() + d->cfg.gpu_poll_ms, next_mon = gp_mono_ms();
        while (!__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE)) {
                int64_t now = gp_mono_ms();
                if (now >= next_gpu || (sim && now >= next_mon)) {
                        sample(d);
                        next_gpu = now + d->cfg.gpu_poll_ms;
                }
                if (now >= next_mon) {
                        gp_monitor_tick(d);
                        next_mon = now + d->cfg.monitor_sample_ms;
                }
                int64_t wait = (next_gpu < next_mon ? next_gpu : next_mon) - gp_mono_ms();
                if (wait > 100)
                        wait = 100;
                if (wait > 0 && !__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE))
                        usleep((useconds_t)wait * 1000);
        }
        return NULL;
}

/* ------------------------------------------------------------------ */
/* start-up and recovery                                               */

typedef struct recover_ctx {
        gp_daemon *d;
        batch *b;
        int64_t now;
        size_t queued, running, ended;
} recover_ctx;

/* The scheduler's ids of t's GPUs.  Node local's by uuid first (the
 * driver may number them differently after a reboot); an agent node's by
 * node and index, as its agent names them (uuids of simulated GPUs repeat
 * from node to node). */
static int map_gpus(gp_daemon *d, const gp_task *t, uint32_t *ids) {
        for (int i = 0; i < t->n_gpus; i++) {
                bool local = !strcmp(t->gpus[i].node, LOCAL_NODE);
                if ((!local || gp_sched_gpu_find_uuid(d->sched, t->gpus[i].uuid, &ids[i]) < 0) &&
                    gp_sched_gpu_find(d->sched, t->gpus[i].node, t->gpus[i].index, &ids[i]) < 0)
                        return -ENOENT;
        }
        return 0;
}

static int recover_one(const gp_task *st, void *ud) {
        recover_ctx *rc = ud;
        gp_daemon *d = rc->d;
        gp_task *t = malloc(sizeof(*t));
        if (!t || gp_task_copy(t, st) < 0) {
                free(t);
                return -ENOMEM;
        }
        if (gp_i64map_put(&d->tasks, t->id, t) < 0) {
                gp_task_done(t);
                free(t);
                return -ENOMEM;
        }
        gp_submit_spec_nodes(t);
        t->estimate_ms = gp_est_predict(d, t, NULL);
        gp_hostlim_task_fill(t); /* cpus, host_memory_mb: kept in its spec */
        gp_sched_req r = sched_req(t);
        r.readmit = true; /* accepted before the restart: max_queued does not apply again */
        if (t->state == GP_TASK_QUEUED && !t->is_lease) {
                /* preempted just before a crash: its old run may still be
                 * stopping; it drains before any batch task starts */
                char qdir[PATH_MAX];
                gp_exec_proc p;
                gp_exec_result res;
                int fd;
                task_dir(d, t->id, qdir, sizeof(qdir));
                if (gp_exec_read_pidfile(qdir, &p) == 0 && gp_exec_read_result(qdir, &res) < 0 &&
                    gp_exec_watch(&p, &fd) == 0) {
                        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)t->id};
                        gp_exec_cancel(&p);
                        if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 &&
                            gp_i64map_put(&d->draining, t->id, (void *)(intptr_t)(fd + 1)) == 0)
                                d->ndraining++;
                        else
                                close(fd);
                }
        }
        if (t->state == GP_TASK_QUEUED) {
                int e = gp_sched_enqueue(d->sched, &r);
                if (e < 0) {
                        gp_warn("task %" PRId64 " cannot be queued again (%s)", t->id, gp_strerror(e));
                        set_reason(t, "could not be queued again after restart: %s", gp_strerror(e));
                        finish(d, rc->b, t, GP_TASK_FAILED, rc->now);
                        rc->ended++;
                } else {
                        rc->queued++;
                }
                return 0;
        }
        /* running: metered on from its last stored segment */
        gp_billing_recover(d, t);
        uint32_t ids[GP_MAX_GPUS];
        int most = t->elastic_max_gpus > 0 ? t->elastic_max_gpus : GP_MAX_GPUS; /* grown elastic; whole nodes */
        if (t->n_gpus < t->gpu_request || t->n_gpus > most || map_gpus(d, t, ids) < 0 ||
            gp_sched_restore_running(d->sched, &r, ids, t->n_gpus, t->started_ms) < 0) {
                if (!t->is_lease) {
                        /* its pidfile names it (the stored pid may not be there yet) */
                        char sdir[PATH_MAX];
                        gp_exec_proc p = {t->sup_pid, t->sup_start};
                        task_dir(d, t->id, sdir, sizeof(sdir));
                        if (gp_exec_read_pidfile(sdir, &p) < 0)
                                p = (gp_exec_proc){t->sup_pid, t->sup_start};
                        gp_exec_cancel(&p);
                }
                requeue_or_fail(d, rc->b, t, "its GPUs are no longer in the pool", rc->now);
                return 0;
        }
        rc->running++;
        gp_billing_recover(d, t); /* its GPU share, now that the scheduler holds it */
        if (t->is_lease) {
                t->heartbeat_ms = rc->now; /* a full TTL for the holder to come back */
                return gp_i64map_put(&d->leases, t->id, t);
        }
        if (gp_nodes_remote(t))
                return 0; /* its agents report it in their first full sync (nodes.c) */
        char dir[PATH_MAX];
        task_dir(d, t->id, dir, sizeof(dir));
        gp_exec_result res;
        gp_exec_proc p;
        if (gp_exec_read_result(dir, &res) == 0) {
                gone_add(d, t->id); /* processed by the first loop pass */
                return 0;
        }
        if (gp_exec_read_pidfile(dir, &p) == 0) {
                t->sup_pid = p.pid;
                t->sup_start = p.start;
                if (gp_exec_alive(&p)) {
                        watch_add(d, t);
                        return 0;
                }
                /* dead: the first loop pass reads its result (or finds none) */
                gone_add(d, t->id);
                return 0;
        }
        /* never started, or started just before the crash and not yet
         * written its pidfile: the spawner starts it only where no
         * supervisor ran (GP_EXEC_FRESH), else follows that one */
        if (push_ptr(&rc->b->spawn, &rc->b->nspawn, &rc->b->capspawn, t) < 0 ||
            gp_i64map_put(&d->fresh, t->id, (void *)1) < 0)
                return -ENOMEM;
        return 0;
}

static int open_gpus(gp_daemon *d, char *err, size_t errlen) {
        gp_gpu_options go = {.backend = d->cfg.gpu_backend, .nvml_library = d->cfg.nvml_library,
                             .sim = d->cfg.sim, .n_sim = d->cfg.n_sim};
        if (!strcmp(d->cfg.gpu_backend, "none")) { /* a control plane: only agent nodes have GPUs */
                d->backend = "none";
                d->gpu_ids = calloc(1, sizeof(uint32_t));
                return d->gpu_ids ? 0 : -ENOMEM;
        }
        int rc = gp_gpu_open(&go, &d->gpu, err, errlen);
        if (rc < 0)
                return rc;
        if (err[0]) /* auto fell back to simulated GPUs: say why, once */
                gp_warn("%s", err);
        err[0] = '\0';
        d->backend = gp_gpu_backend_name(d->gpu);
        gp_gpu_info *info;
        size_t n;
        if ((rc = gp_gpu_read(d->gpu, &info, &n)) < 0) {
                snprintf(err, errlen, "cannot read GPUs: %s", gp_strerror(rc));
                return rc;
        }
        d->gpu_ids = calloc(n ? n : 1, sizeof(uint32_t));
        if (!d->gpu_ids) {
                free(info);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                bool reserved = false;
                char idx[16];
                snprintf(idx, sizeof(idx), "%d", info[i].index);
                for (int k = 0; k < d->cfg.n_reserved; k++)
                        if (!strcmp(d->cfg.reserved[k], idx) || !strcmp(d->cfg.reserved[k], info[i].uuid))
                                reserved = true;
                gp_sched_gpu_desc gd = {.node = LOCAL_NODE, .index = info[i].index, .uuid = info[i].uuid,
                                        .name = info[i].name, .memory_total_mb = info[i].memory_total_mb,
                                        .reserved = reserved};
                if ((rc = gp_sched_gpu_add(d->sched, &gd, &d->gpu_ids[i])) < 0) {
                        snprintf(err, errlen, "GPU %d (%s): %s", info[i].index, info[i].uuid, gp_strerror(rc));
                        free(info);
                        return rc;
                }
                if (!info[i].healthy)
                        gp_sched_gpu_set_healthy(d->sched, d->gpu_ids[i], false);
                gp_sched_gpu_set_load(d->sched, d->gpu_ids[i], info[i].util_pct, info[i].temp_c);
        }
        d->ngpus = n;
        if (n > 0) {
                /* every node carries its name as a label (node_selector gpupool/node=local); the
                 * server's own GPUs take elastic tasks (their supervisors here are told of
                 * resizes) and no part of a multi-node task (its ranks run under agents) */
                gp_sched_node_set_labels(d->sched, LOCAL_NODE, "gpupool/node=" LOCAL_NODE);
                gp_sched_node_set_allow(d->sched, LOCAL_NODE, GP_SCHED_NODE_ELASTIC);
                gp_hostlim_local_capacity(d); /* its CPUs and RAM, for tasks that ask for them */
        }
        for (size_t i = 0; i < n; i++)
                for (size_t j = i + 1; j < n; j++) {
                        int dist;
                        if (gp_gpu_distance(d->gpu, (int)i, (int)j, &dist) == 0)
                                gp_sched_gpu_set_distance(d->sched, d->gpu_ids[i], d->gpu_ids[j], dist);
                }
        d->gpu_info = info;
        return 0;
}

static void restore_drained(gp_daemon *d) {
        char buf[8192];
        if (gp_store_meta_get(d->ws, "drained", buf, sizeof(buf)) < 0)
                return;
        char *save = NULL;
        for (char *u = strtok_r(buf, "\n", &save); u; u = strtok_r(NULL, "\n", &save)) {
                uint32_t g;
                if (gp_sched_gpu_find_uuid(d->sched, u, &g) == 0)
                        gp_sched_gpu_set_drained(d->sched, g, true);
        }
}

/* Who this server is, for the data dir lock and the store's claim. */
static void self_owner(const gp_daemon *d, gp_store_owner *ret) {
        memset(ret, 0, sizeof(*ret));
        if (gethostname(ret->host, sizeof(ret->host) - 1) < 0)
                ret->host[0] = '\0';
        ret->pid = getpid();
        gp_strlcpy(ret->listen, d->cfg.listen, sizeof(ret->listen));
        ret->since_ms = d->started_ms;
}

/* gp_daemon_open's work on a zeroed d; on failure gp_daemon_close takes
 * what was opened. */
static int open_daemon(gp_daemon *d, const gp_config *cfg, int64_t epoch, char *err, size_t errlen) {
        int crc = gp_config_copy(&d->cfg, cfg); /* d's own (gp_daemon_close frees it) */
        d->evfd = d->epfd = d->lock_fd = -1;
        if (gethostname(d->hostname, sizeof(d->hostname)) < 0)
                d->hostname[0] = '\0';
        d->hostname[sizeof(d->hostname) - 1] = '\0';
        pthread_mutex_init(&d->lock, NULL);
        pthread_mutex_init(&d->qlock, NULL);
        pthread_mutex_init(&d->rs_lock, NULL);
        pthread_mutex_init(&d->sp_lock, NULL);
        pthread_cond_init(&d->sp_cond, NULL);
        gp_list_init(&d->waiters);
        gp_list_init(&d->followers);
        gp_i64map_init(&d->fresh);
        gp_i64map_init(&d->tasks);
        gp_i64map_init(&d->leases);
        gp_i64map_init(&d->requeue);
        gp_i64map_init(&d->oom);
        d->wd_due_ms = INT64_MAX;
        gp_i64map_init(&d->draining);
        gp_i64map_init(&d->ranks);
        gp_i64map_init(&d->lpreempting);
        gp_i64map_init(&d->watch);
        d->started_ms = gp_now_ms();
        if (crc < 0) {
                snprintf(err, errlen, "out of memory");
                return crc;
        }
        if (gp_monitor_attach(d, err, errlen) < 0)
                return -ENOMEM;
        /* supervisors run `gpupool __supervise`: the light executable next
         * to this one (base/exe.h), which loads none of the server's libraries */
        int rc = gp_exe_sibling(GP_EXE_CLIENT, d->self_exe, sizeof(d->self_exe));
        if (rc < 0) {
                snprintf(err, errlen, "cannot find %s next to my own executable: %s", GP_EXE_CLIENT,
                         strerror(-rc));
                return rc;
        }
        rc = mkdir_p(cfg->data_dir);
        if (rc < 0) {
                snprintf(err, errlen, "data dir %s: %s", cfg->data_dir, strerror(-rc));
                return rc;
        }
        /* one daemon per data dir: two would hand out the same ids and
         * share task directories.  CLOEXEC, so supervisors never hold it. */
        char lock[PATH_MAX];
        /* per server id: several servers of one store never share a data dir */
        if (snprintf(lock, sizeof(lock), "%s/gpupool%s%s.lock", cfg->data_dir, cfg->server_id[0] ? "-" : "",
                     cfg->server_id) >= (int)sizeof(lock)) {
                snprintf(err, errlen, "data dir path too long");
                return -ENAMETOOLONG;
        }
        gp_store_owner me;
        self_owner(d, &me);
        d->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        gp_store_owner other;
        rc = d->lock_fd < 0 ? -errno : gp_store_flock_owner_file(d->lock_fd, &other);
        if (rc < 0) {
                if (rc == -EWOULDBLOCK) {
                        /* the holder wrote who it is into the lock file */
                        char who[640];
                        gp_store_owner_format(&other, who, sizeof(who));
                        snprintf(err, errlen, "%s: another gpupool server is using this data dir (%s)", lock, who);
                } else {
                        snprintf(err, errlen, "%s: %s", lock, strerror(-rc));
                }
                return rc;
        }
        {
                char text[4096];
                int tn = gp_store_owner_to_text(&me, text, sizeof(text));
                if (tn > 0 && (ftruncate(d->lock_fd, 0) < 0 || pwrite(d->lock_fd, text, (size_t)tn, 0) != tn))
                        gp_warn("%s: cannot record who holds it: %s", lock, strerror(errno));
        }
        if ((size_t)snprintf(d->tasks_dir, sizeof(d->tasks_dir), "%s/tasks", cfg->data_dir) >= sizeof(d->tasks_dir) ||
            (rc = mkdir_p(d->tasks_dir)) < 0) {
                snprintf(err, errlen, "tasks dir under %s: cannot create", cfg->data_dir);
                return rc < 0 ? rc : -ENAMETOOLONG;
        }
        if ((rc = gp_disk_open(d, err, errlen)) < 0)
                return rc;
        if ((rc = gp_commit_open(d)) < 0 || (rc = gp_idem_open(d)) < 0)
                return rc;
        /* the writer never checkpoints on its commit path: a thread of its
         * own copies the WAL into the database in the background */
        gp_store_options so = {.sync_full = cfg->store_sync_full, .manual_checkpoint = true};
        /* the writer's fsyncs run on the sync thread, beside the next batch (commit.h) */
        gp_store_options wso = so;
        wso.deferred_sync = true;
        if ((rc = gp_store_open(cfg->store_url, &wso, &d->ws, err, errlen)) < 0)
                return rc;
        /* several servers: the lease decides who writes, and every commit
         * checks it (fenced) */
        if (cfg->server_id[0]) {
                lead_epoch = epoch;
                if ((rc = gp_store_set_fence(d->ws, cfg->server_id, epoch, lost_the_lead, NULL)) < 0) {
                        snprintf(err, errlen, "store: cannot fence the writer: %s", gp_store_errmsg(d->ws));
                        return rc;
                }
        }
        /* one live server per store: a second would hand out the same task
         * ids and GPUs.  The writer handle holds the claim for our life. */
        else if ((rc = gp_store_claim(d->ws, &me, NULL)) < 0) {
                snprintf(err, errlen, "store: %s", gp_store_errmsg(d->ws));
                return rc;
        }
        if ((rc = gp_store_open(cfg->store_url, &so, &d->rs, err, errlen)) < 0)
                return rc;
        if ((rc = gp_store_open(cfg->store_url, &so, &d->cs, err, errlen)) < 0)
                return rc;
        gp_sched_config sc;
        gp_config_sched(cfg, &sc);
        sc.max_queue_depth = 1 << 30; /* recovery must queue everything stored */
        if ((rc = gp_sched_new(&sc, &d->sched)) < 0) {
                snprintf(err, errlen, "scheduler config: %s", gp_strerror(rc));
                return rc;
        }
        if ((rc = gp_tenants_open(&d->tenants, &d->cfg, d->ws, d->sched, err, errlen)) < 0)
                return rc;
        if ((rc = gp_billing_init(d, err, errlen)) < 0)
                return rc;
        if ((rc = open_gpus(d, err, errlen)) < 0 || (rc = gp_mps_new(cfg, &d->mps, err, errlen)) < 0)
                return rc;
        gp_tenants_tick(d->tenants, gp_now_ms(), true); /* tenants, groups and time rules into the core */
        if ((rc = gp_nodes_open(d, err, errlen)) < 0) /* their GPUs, before the tasks that run on them */
                return rc;
        restore_drained(d);
        if ((rc = gp_coord_open(d, err, errlen)) < 0) /* this server into the registry */
                return rc;
        int64_t max_id = 0;
        if ((rc = gp_store_task_max_id(d->ws, &max_id)) < 0) {
                snprintf(err, errlen, "store: %s", gp_store_errmsg(d->ws));
                return rc;
        }
        d->next_id = max_id + 1;
        if ((rc = gp_est_open(d)) < 0) { /* what past tasks teach of run times, before the queue */
                snprintf(err, errlen, "run-time estimates: out of memory");
                return rc;
        }
        if ((d->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
            (d->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
                snprintf(err, errlen, "eventfd/epoll: %s", strerror(errno));
                return -errno;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
        epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->evfd, &ev);

        batch b = {0};
        recover_ctx rctx = {.d = d, .b = &b, .now = gp_now_ms()};
        rc = gp_store_task_load_active(d->ws, recover_one, &rctx);
        if (rc < 0) {
                snprintf(err, errlen, "recovery: %s", rc == -ENOMEM ? "out of memory" : gp_store_errmsg(d->ws));
                free(b.dirty);
                free(b.spawn);
                return rc;
        }
        commit(d, &b);
        free_final(d, &b);
        gp_info("recovered %zu queued and %zu running tasks (%zu could not be queued again), next id %" PRId64
                "; tasks that ended while the daemon was down are recorded next",
                rctx.queued, rctx.running, rctx.ended, d->next_id);
        /* never-started batch tasks are started after the first loop pass
         * (by the spawner thread, once the disk has room) */
        for (size_t i = 0; i < b.nspawn; i++)
                defer_spawn(d, b.spawn[i]->id);
        free(b.dirty);
        free(b.spawn);
        return 0;
}

int gp_daemon_open(gp_daemon **ret, const gp_config *cfg, char *err, size_t errlen) {
        return gp_daemon_open_lead(ret, cfg, 0, err, errlen);
}

int gp_daemon_open_lead(gp_daemon **ret, const gp_config *cfg, int64_t epoch, char *err, size_t errlen) {
        *ret = NULL;
        gp_daemon *d = calloc(1, sizeof(*d));
        if (!d) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        if (cfg->server_id[0] && epoch < 1) {
                free(d);
                snprintf(err, errlen, "cluster.server_id is set: this server opens its store only as the leader");
                return -EINVAL;
        }
        int rc = open_daemon(d, cfg, epoch, err, errlen);
        if (rc < 0) {
                gp_daemon_close(d);
                return rc;
        }
        *ret = d;
        return 0;
}

int gp_daemon_start(gp_daemon *d) {
        gp_hostlim_setup(); /* before the spawner: its supervisors go beside this process (v2) */
        /* recovery queued everything stored; from now on the limit applies */
        gp_sched_set_max_queue_depth(d->sched, d->cfg.max_queue_depth);
        int rc = pthread_create(&d->loop_thread, NULL, loop_main, d);
        if (rc)
                return -rc;
        rc = pthread_create(&d->sampler_thread, NULL, sampler_main, d);
        if (rc)
                return -rc;
        rc = pthread_create(&d->checkpoint_thread, NULL, checkpoint_main, d);
        if (rc)
                return -rc;
        rc = pthread_create(&d->spawner_thread, NULL, spawner_main, d);
        if (rc)
                return -rc;
        if ((rc = gp_commit_start(d)) < 0)
                return rc;
        if ((rc = gp_monitor_start(d)) < 0)
                return rc;
        if ((rc = gp_coord_start(d)) < 0)
                return rc;
        uint64_t one = 1; /* first pass: schedule what was recovered */
        ssize_t w = write(d->evfd, &one, sizeof(one));
        (void)w; /* the loop thread sets d->ready after that pass */
        return 0;
}

void gp_daemon_stop(gp_daemon *d) {
        __atomic_store_n(&d->stopping, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        ssize_t w = write(d->evfd, &one, sizeof(one));
        (void)w;
        if (d->loop_thread)
                pthread_join(d->loop_thread, NULL);
        gp_commit_stop(d); /* after the loop's last commit: synced, answered */
        if (d->sampler_thread)
                pthread_join(d->sampler_thread, NULL);
        if (d->checkpoint_thread)
                pthread_join(d->checkpoint_thread, NULL);
        gp_coord_stop(d);
        if (d->spawner_thread) {
                pthread_mutex_lock(&d->sp_lock);
                pthread_cond_broadcast(&d->sp_cond);
                pthread_mutex_unlock(&d->sp_lock);
                pthread_join(d->spawner_thread, NULL);
        }
        d->loop_thread = d->sampler_thread = d->checkpoint_thread = d->spawner_thread = 0;
}

void gp_daemon_close(gp_daemon *d) {
        if (!d)
                return;
        size_t pos = 0;
        gp_task *t;
        while ((t = gp_i64map_next(&d->tasks, &pos, NULL))) {
                gp_task_done(t);
                free(t);
        }
        gp_i64map_done(&d->tasks);
        gp_i64map_done(&d->leases);
        pos = 0;
        char *why;
        while ((why = gp_i64map_next(&d->requeue, &pos, NULL)))
                free(why);
        gp_i64map_done(&d->requeue);
        gp_i64map_done(&d->oom);
        void *v;
        pos = 0;
        while ((v = gp_i64map_next(&d->draining, &pos, NULL)))
                close((int)((intptr_t)v - 1));
        gp_i64map_done(&d->draining);
        pos = 0;
        while ((v = gp_i64map_next(&d->ranks, &pos, NULL)))
                free(v);
        gp_i64map_done(&d->ranks);
        gp_nodes_close(d);
        gp_est_close(d);
        gp_coord_close(d);
        gp_i64map_done(&d->lpreempting);
        free(d->resized);
        free(d->peaked);
        free(d->deferred);
        pos = 0;
        while ((v = gp_i64map_next(&d->watch, &pos, NULL)))
                close((int)((intptr_t)v - 1));
        gp_i64map_done(&d->watch);
        free(d->gone);
        gp_i64map_done(&d->fresh);
        free(d->spq);
        free(d->spfail);
        for (size_t i = 0; i < d->nstrays; i++)
                close(d->strays[i]); /* still running: init adopts them when we exit */
        free(d->strays);
        cmd *c = d->qhead;
        while (c) {
                cmd *n = c->next;
                gp_cmd_free(c);
                c = n;
        }
        gp_monitor_detach(d);
        gp_tenants_close(d->tenants);
        gp_billing_done(d);
        gp_sched_free(d->sched);
        gp_store_close(d->ws);
        gp_store_close(d->rs);
        gp_store_close(d->cs);
        gp_gpu_close(d->gpu);
        gp_disk_close(d);
        gp_commit_close(d);
        gp_idem_close(d);
        gp_history_close(d);
        gp_mps_free(d->mps);
        free(d->gpu_ids);
        free(d->gpu_info);
        if (d->evfd >= 0)
                close(d->evfd);
        if (d->epfd >= 0)
                close(d->epfd);
        if (d->lock_fd >= 0)
                close(d->lock_fd); /* releases the data dir lock */
        gp_config_free(&d->cfg);
        free(d);
}
