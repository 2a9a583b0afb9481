/* mps.h - NVIDIA MPS control daemons as processes: start one for a pipe
 * directory, find the live one of a pipe directory, ask one to quit.
 *
 * The program is NVIDIA's nvidia-cuda-mps-control (or what
 * gpus.mps_control names), run as NVIDIA documents it: `PROG -d` with
 * CUDA_VISIBLE_DEVICES, CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY
 * in its environment daemonises and writes nvidia-cuda-mps-control.pid in
 * the pipe directory; `echo quit | PROG` with the same pipe directory
 * stops it.  Nothing here keeps state or logs; every function may be
 * called from any thread (server/mps.c serialises them per GPU).
 */
#ifndef GP_EXEC_MPS_H
#define GP_EXEC_MPS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define GP_MPS_PID_FILE "nvidia-cuda-mps-control.pid" /* in the pipe dir: the daemon's pid (NVIDIA) */
#define GP_MPS_START_MS 10000                         /* `-d` must return and the pid file appear */
#define GP_MPS_OUT_MAX 512                            /* bytes of its output kept for a message */

/* Make pipe_dir and log_dir (0755, parents too) and run `prog -d` with
 * CUDA_VISIBLE_DEVICES=devices, CUDA_MPS_PIPE_DIRECTORY=pipe_dir and
 * CUDA_MPS_LOG_DIRECTORY=log_dir added to the caller's environment (in a
 * session of its own, signals at their defaults, stdin /dev/null).  prog
 * without a '/' is looked up in PATH.  Waits at most GP_MPS_START_MS for
 * it to return 0 and for the pid file to name a live daemon.  0 with
 * *ret_pid (the daemon's pid); otherwise a negative code and err says why
 * in one line (not found, its exit status and what it printed, no pid
 * file).  A `-d` that is still running at the deadline is killed. */
int gp_mps_daemon_start(const char *prog, const char *pipe_dir, const char *log_dir, const char *devices,
                        int64_t *ret_pid, char *err, size_t errlen);

/* The live control daemon of pipe_dir: its pid file names a process that
 * exists and whose command line names nvidia-cuda-mps-control.  0 with
 * *ret_pid; -ENOENT (no pid file, or a stale one); -errno. */
int gp_mps_daemon_find(const char *pipe_dir, int64_t *ret_pid);

/* Ask the daemon of pipe_dir to stop: run `prog` (stdout and stderr to
 * /dev/null) with CUDA_MPS_PIPE_DIRECTORY=pipe_dir and "quit\n" on its
 * stdin, without waiting for it: *ret_pid is the caller's child, to reap
 * with gp_mps_reap.  0 or -errno (prog not found: -ENOENT). */
int gp_mps_daemon_quit(const char *prog, const char *pipe_dir, int64_t *ret_pid);

#define GP_MPS_ENV_MAX 4 /* environment entries an MPS client gets (besides CUDA_VISIBLE_DEVICES) */

/* What an MPS client's supervisor is started with. */
typedef struct gp_mps_client {
        char env[GP_MPS_ENV_MAX][PATH_MAX + 40]; /* "K=V" */
        char cuda_visible_devices[80];           /* its GPU's uuid, or "0" when it has none */
} gp_mps_client;

/* *ret for a client of the daemon with directories pipe and log: its
 * CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY,
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<memory_mb>M (the client sees its one
 * GPU as device 0) and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<pct>, and as
 * CUDA_VISIBLE_DEVICES the GPU's uuid (the daemon sees only that GPU: an
 * index would be remapped; NVIDIA recommends uuids), "0" when uuid is "". */
void gp_mps_client_env(const char *pipe, const char *log, int64_t memory_mb, int pct, const char *uuid,
                       gp_mps_client *ret);

/* Reap child pid if it has exited: 1 (gone; *ret_status its wait status
 * when ret_status), 0 (still running), -errno (-ECHILD: not a child). */
int gp_mps_reap(int64_t pid, int *ret_status);

#endif
