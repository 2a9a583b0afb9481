/* daemon-int.h - what daemon.c (the decision loop) and daemon-open.c
 * (start, stop, recovery, sampler) share, and nothing else includes.
 * Everything here runs on the loop thread or at start-up, with d->lock held
 * where server-int.h says so. */
#ifndef GP_SERVER_DAEMON_INT_H
#define GP_SERVER_DAEMON_INT_H

#include "server/server-int.h"
#include "exec/exec.h"

#define LOCAL_NODE "local"

/* One loop batch: tasks to store (no duplicates), batch tasks to start
 * once the batch is durable, and whether the drained set is stored too. */
typedef struct batch {
        gp_task **dirty;
        size_t ndirty, capdirty;
        gp_task **spawn;
        size_t nspawn, capspawn;
        bool meta_drained;
} batch;

/* daemon.c's, for daemon-open.c (each is described where it is defined) */
extern int64_t lead_epoch;
int mkdir_p(const char *path);
void task_dir(const gp_daemon *d, int64_t id, char *buf, size_t size);
gp_sched_req sched_req(const gp_task *t);
void set_reason(gp_task *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int push_ptr(gp_task ***v, size_t *n, size_t *cap, gp_task *t);
void finish(gp_daemon *d, batch *b, gp_task *t, gp_task_state st, int64_t now);
bool commit(gp_daemon *d, batch *b);
void gone_add(gp_daemon *d, int64_t id);
void watch_add(gp_daemon *d, gp_task *t);
void requeue_or_fail(gp_daemon *d, batch *b, gp_task *t, const char *why, int64_t now);
/* The same for a run stopped for GPU out-of-memory: the requeued task asks
 * memory_mb x tasks.oom_retry_factor from its next run on. */
void requeue_oom(gp_daemon *d, batch *b, gp_task *t, const char *why, int64_t now);
void free_final(gp_daemon *d, batch *b);
void defer_spawn(gp_daemon *d, int64_t id);
void lost_the_lead(void *ud);
void *spawner_main(void *arg);
void *loop_main(void *arg);
void grow_ids(int64_t **v, size_t n, size_t *cap);
void notify_resized(gp_daemon *d);
/* CUDA_VISIBLE_DEVICES of t's GPUs ("0,1"), and its allocation file's
 * text (resize.c; NULL when out of memory). */
void cuda_devices(const gp_task *t, char *buf, size_t size);
char *gp_alloc_json(const gp_task *t);
void pidfd_done(gp_daemon *d, int fd);
int spawn(gp_daemon *d, const gp_task *t, unsigned flags, gp_exec_proc *ret);

/* spawner.c's, for daemon.c */
void push_id(int64_t **v, size_t *n, size_t *cap, int64_t id);
void release_durable(gp_daemon *d);
void take_spawn_failures(gp_daemon *d, batch *b, int64_t now);

#endif
