/* mps.h - gpus.sharing: mps on the server: which GPUs and tasks are MPS,
 * and the MPS control daemons of the server's own GPUs (one per GPU that
 * has clients), its shared tasks started as their clients with per-client
 * limits (docs/isolation.md).
 *
 * A task is an MPS client when it is a batch task asking memory_mb (a
 * share) on exactly one GPU whose sharing is mps (gpus.sharing: mps, and
 * gpus.mps_gpus lists its index or uuid, or is empty), not elastic: on the
 * server's own GPUs here, on an agent's through its start message (the
 * agent keeps those daemons: agent/agent-mps.h).  Before such a task's
 * supervisor starts, its GPU's daemon is started (an exec/mps-pool.h pool
 * under MPS_DIR = gpus.mps_dir or DATA_DIR/mps); the task gets
 * gp_mps_client_env's variables (exec/mps.h), its own compute_pct or the
 * default (memory_mb x 100 / the GPU's memory, rounded up).  A daemon that
 * cannot start fails the task's start (-GP_EMPS; gp_mps_spawn_reason says
 * why) and the GPU says so in its "mps" object.  The loop quits a GPU's
 * daemon once no MPS task runs there (and no preempted run is still
 * stopping).  A restarted server adopts the daemons it finds alive (their
 * clients run on) and clears the pipe directories of dead ones.
 *
 * Locking: the pool has its own mutexes (a start never holds d->lock);
 * functions that read tasks or the scheduler say whether d->lock must be
 * held.
 */
#ifndef GP_SERVER_MPS_H
#define GP_SERVER_MPS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/task.h"
#include "exec/mps.h"

struct gp_daemon;
struct gp_buf;
struct gp_config;
typedef struct gp_mps gp_mps;


/* The module for cfg (its sharing, GPUs and directories; the MPS dir is
 * made and resolved to an absolute path when sharing is mps).  0 with
 * *ret (free with gp_mps_free), or a negative code with err. */
int gp_mps_new(const struct gp_config *cfg, gp_mps **ret, char *err, size_t errlen);
/* Leaves the daemons running (their clients outlive the server too).  Takes NULL. */
void gp_mps_free(gp_mps *m);

/* Is scheduler GPU g one of this server's own GPUs with sharing mps?  d->lock held. */
bool gp_mps_gpu_on(struct gp_daemon *d, uint32_t g);
/* Is t an MPS client (see above; a queued one: would it be, when every GPU
 * of this server is mps and it asks one GPU)?  d->lock held. */
bool gp_mps_task_on(struct gp_daemon *d, const gp_task *t);

/* Is t a running MPS client (on any node)?  Then its compute_pct (its own
 * or the default) and its GPU's uuid ("" when none).  d->lock held. */
bool gp_mps_client_of(struct gp_daemon *d, const gp_task *t, int *ret_pct, char *uuid, size_t size);

/* For starting t (the spawner's copy; without d->lock, which it takes for
 * a moment): 0 when t is no MPS client of the server's own GPUs; 1 when it is, with its GPU's
 * daemon running (started now if it was not) and *ret filled; -GP_EMPS
 * when the daemon could not start (logged; gp_mps_spawn_reason says why).
 * May wait for a daemon to start or quit (bounded, seconds).  Spawner
 * thread. */
int gp_mps_client_prepare(struct gp_daemon *d, const gp_task *t, gp_mps_client *ret);

/* Why t could not start after gp_mps_client_prepare failed: "mps: GPU N's
 * MPS control daemon could not start: ...".  d->lock held. */
void gp_mps_spawn_reason(struct gp_daemon *d, const gp_task *t, char *buf, size_t size);

/* The loop's look (at most twice a second): adopt or clear the daemons
 * found at start, quit the daemons of GPUs without MPS clients, reap the
 * quitters, notice a daemon that died.  Loop thread, d->lock held; never
 * waits for the spawner (skips the look while a start is under way). */
void gp_mps_tick(struct gp_daemon *d, int64_t now);

/* Sets o's "mps": {"daemon": "running"|"stopped"|"failed", "pid": N|null,
 * "error": "..."|null} for an MPS GPU, null otherwise.  d->lock held. */
void gp_mps_gpu_json(struct gp_daemon *d, uint32_t g, json_t *o);
/* ,"compute_pct":N for a task that is or will be an MPS client (its own or
 * the default: memory_mb x 100 / its GPU's memory, rounded up), nothing
 * otherwise.  d->lock held.  0 or -ENOMEM. */
int gp_mps_task_write(struct gp_daemon *d, const gp_task *t, struct gp_buf *b);

/* t's compute_pct as submitted (the spec's), 0 when none.  Any thread. */
int gp_mps_task_compute_pct(const gp_task *t);

#endif
