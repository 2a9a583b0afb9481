/* mps-pool.h - the MPS control daemons of one machine's GPUs, one per GPU
 * index at most, each with its pipe and log directory under MPS_DIR
 * (MPS_DIR/<index>/pipe, MPS_DIR/<index>/log): started when a client
 * needs one, quit when none does, adopted (alive) or cleared (dead) when
 * found at start.  The server (server/mps.c) and the agent
 * (agent/agent-mps.c) each keep one for their own GPUs; they say which
 * GPUs have clients.  Logs what it starts, quits, adopts and clears.
 *
 * Threads: gp_mps_pool_ensure may run on one thread while gp_mps_pool_look
 * runs on another: every start and quit is under the pool's mutex, and a
 * look that finds a start under way does nothing (it never waits).  The
 * readers (gp_mps_pool_state) take a second, never-held-long mutex.
 */
#ifndef GP_EXEC_MPS_POOL_H
#define GP_EXEC_MPS_POOL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GP_MPS_MAX_GPUS 256 /* GPU indexes 0..255 may have a daemon */
#define GP_MPS_ERR_MAX 400  /* a failed start's message */

typedef struct gp_mps_pool gp_mps_pool;

typedef enum gp_mps_daemon_state {
        GP_MPS_STOPPED = 0,
        GP_MPS_RUNNING,
        GP_MPS_FAILED, /* its last start failed (the error says why) */
} gp_mps_daemon_state;

/* A pool whose daemons live under dir (made 0755 if missing, resolved to
 * an absolute path, at most PATH_MAX - 64 bytes) and are run by prog
 * (nvidia-cuda-mps-control, a name looked up in PATH, or a path).  0
 * with *ret, or a negative code with err. */
int gp_mps_pool_new(const char *dir, const char *prog, gp_mps_pool **ret, char *err, size_t errlen);
/* Leaves the daemons running (their clients outlive us).  Takes NULL. */
void gp_mps_pool_free(gp_mps_pool *p);

/* GPU index's daemon runs when this returns 0: started now (devices: its
 * CUDA_VISIBLE_DEVICES, the GPU's uuid or index) unless one runs; a
 * quitting one is waited for first (bounded).  pipe and log (size bytes
 * each) get its directories.  -EINVAL (index out of range), -GP_EMPS (could
 * not start: logged, and gp_mps_pool_state says why).  Blocks seconds at
 * most. */
int gp_mps_pool_ensure(gp_mps_pool *p, int index, const char *devices, char *pipe, char *log, size_t size);

/* Fills needed[GP_MPS_MAX_GPUS] (zeroed by the caller) with the GPUs that
 * have clients now; returns false when no daemon may quit now (e.g. a run
 * that may be a client is still stopping). */
typedef bool (*gp_mps_needed_fn)(void *ud, bool *needed);

/* The look, at most every 500 ms (now: a monotonic or wall clock in ms):
 * the first one adopts the daemons an earlier process left alive and
 * clears the pipe directories of dead ones; each reaps the quitters,
 * notices a daemon that died, and tells those of GPUs without clients to
 * quit (asking needed only when a daemon runs).  Does nothing while a
 * start is under way. */
void gp_mps_pool_look(gp_mps_pool *p, int64_t now, gp_mps_needed_fn needed, void *ud);

/* GPU index's daemon as last seen; *ret_pid (0 when none) and err (the
 * failed start's message, "" otherwise) when not NULL.  Any thread. */
gp_mps_daemon_state gp_mps_pool_state(gp_mps_pool *p, int index, int64_t *ret_pid, char *err, size_t errlen);

#endif
