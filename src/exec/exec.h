/* exec.h - running batch tasks under a supervisor that outlives the daemon.
 *
 * Every batch task gets a directory (DATA_DIR/tasks/<id>/) and a supervisor
 * process of its own, in a session of its own, that survives a daemon
 * crash: gp_exec_launch() posix_spawn()s "SELF_EXE __supervise TASK_DIR"
 * (the caller's child, reaped with gp_exec_reap; init adopts it if the
 * caller dies), gp_exec_start() double-forks so that it is nobody's
 * child.  The supervisor:
 *   1. writes TASK_DIR/supervisor.pid ("PID STARTTIME\n", atomically),
 *   2. starts the command in a new process group with stdout+stderr going
 *      through a pipe into TASK_DIR/log, or the spec's log_name (capped at
 *      max_log_bytes per file; beyond the
 *      cap output is discarded and one marker line is written),
 *   3. enforces timeout_s (SIGTERM to the group, SIGKILL after kill_grace_s),
 *   4. on SIGTERM to itself (cancel) does the same to the group; on
 *      SIGUSR2 (preemption) the same with preempt_grace_s; with a notice
 *      (spec.notice, a task's --signal SIG@SECS) it first sends SIG and
 *      gives the command up to SECS to exit before that SIGTERM; on SIGUSR1
 *      (an elastic task's GPU set changed) sends notify_signal to the command
 *      itself (not its group: its workers need not handle the signal),
 *   5. writes TASK_DIR/result.json atomically (write tmp, fsync, rename)
 *      and exits.  result.json is the only truth about how the task ended.
 * Files in TASK_DIR: spec.json (written by gp_exec_start), supervisor.pid,
 * log, result.json, and for elastic tasks alloc.json (gp_exec_write_alloc).
 *
 * run_as (tenants[].run_as): the supervisor stays the daemon's user; only
 * the command becomes run_as (its groups, gid, uid, checked: no way back)
 * between fork and exec.  TASK_DIR stays the daemon's (mode 0700), so the
 * command can neither read nor forge spec.json, supervisor.pid or
 * result.json; its output still reaches TASK_DIR/log through the pipe.  It
 * starts in TASK_DIR/work, a directory the supervisor makes and gives to
 * run_as (0700); a workdir is entered after the switch, so with run_as's
 * own rights.  A supervisor that is not root (and not run_as already)
 * cannot switch: the task ends spawn_failed, with a message naming run_as,
 * and never runs as the daemon's user instead.
 *
 * The daemon watches a supervisor with a pidfd (works for non-children and
 * after a daemon restart); when it becomes readable, read result.json.
 * All functions may be called from any thread; none keeps global state.
 */
#ifndef GP_EXEC_EXEC_H
#define GP_EXEC_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/notice.h"
#include "exec/cgroup.h"

typedef struct gp_exec_spec {
        int64_t task_id;
        const char *const *argv;     /* NULL-terminated, argv[0] looked up in PATH */
        const char *const *env;      /* extra "K=V" entries, NULL-terminated, may be NULL */
        const char *workdir;         /* NULL or "" = TASK_DIR */
        const char *cuda_visible_devices; /* value of CUDA_VISIBLE_DEVICES, e.g. "0,1" */
        const char *gpus;            /* value of GPUPOOL_GPUS, e.g. "local:0,local:1" */
        int64_t timeout_s;           /* 0 = none */
        int kill_grace_s;            /* SIGTERM -> SIGKILL delay, >= 0 */
        int preempt_grace_s;         /* the same when preempted (SIGUSR2), >= 0 */
        int notify_signal;           /* sent to the task on SIGUSR1; 0 = SIGUSR1 */
        gp_notice notice;            /* signo 0 = none; else on a cancel or preemption the supervisor
                                        sends notice.signo first (to the group; batch_only: to the
                                        command only) and waits up to notice.seconds for it to exit
                                        before the SIGTERM above (base/notice.h) */
        int64_t max_log_bytes;       /* > 0 */
        const char *log_name;        /* NULL or "" = "log"; else the file in TASK_DIR the output goes
                                      * to: a plain name (no '/', not "." or ".."), at most 64 bytes
                                      * (the server keeps one log per run: server/runlog.h) */
        const char *run_as;          /* NULL or "" = the supervisor's user; else the command
                                      * runs as that Unix user (see below) */
        int64_t array_id;            /* > 0: a job array element; the task then also gets
                                        GPUPOOL_ARRAY_ID, GPUPOOL_ARRAY_INDEX, SLURM_ARRAY_JOB_ID and
                                        SLURM_ARRAY_TASK_ID; 0 = none */
        int64_t array_index;         /* its index, >= 0 (when array_id) */
        const char *fence_file;      /* NULL or "" = none; else an absolute path (exec/fence.h): the
                                      * supervisor stops the command (as for a cancel, end `fenced`)
                                      * once the monotonic deadline written there has passed or the
                                      * file is gone */
        bool clean_env;              /* true: nothing of the supervisor's environment is inherited; the
                                        command gets its user's HOME, USER, LOGNAME, SHELL, a default
                                        PATH, then env, then gpupool's variables (a submitter's
                                        environment as sent: sbatch --export) */
        gp_cgroup_limits limits;     /* the run's cgroup: cpus and host_memory_mb, 0 = no limit (every
                                        run gets a cgroup where the machine has one: exec/cgroup.h) */
} gp_exec_spec;

typedef struct gp_exec_proc {
        int64_t pid;                 /* supervisor pid */
        int64_t start;               /* its start time (field 22 of /proc/PID/stat) */
} gp_exec_proc;

typedef enum gp_exec_end {
        GP_EXEC_EXITED = 0,          /* exit_code valid */
        GP_EXEC_SIGNALED,            /* killed by signal `signal` (not by us) */
        GP_EXEC_TIMEOUT,             /* we killed it: timeout_s passed */
        GP_EXEC_CANCELLED,           /* we killed it: supervisor got SIGTERM */
        GP_EXEC_SPAWN_FAILED,        /* command could not be started (message says why) */
        GP_EXEC_FENCED,              /* we killed it: its fence deadline passed (spec fence_file) */
} gp_exec_end;

typedef struct gp_exec_result {
        gp_exec_end end;
        int exit_code;               /* EXITED: the code; otherwise 128+signal or 127 */
        int signal;                  /* SIGNALED/TIMEOUT/CANCELLED: the last signal, else 0 */
        int64_t finished_ms;         /* wall clock when the command ended */
        char message[200];           /* human-readable, e.g. "exited with code 3" */
} gp_exec_result;

/* Create TASK_DIR (mode 0700, parents too), write spec.json, start the
 * supervisor, and wait (bounded, 5 s) until it has written supervisor.pid.
 * self_exe runs gp_exec_supervise_main for "__supervise" (the daemon
 * passes the light `gpupool` next to gpupool-server: base/exe.h).
 * 0, -EINVAL, -ENOMEM, -errno of a failed syscall, -ETIMEDOUT. */
int gp_exec_start(const char *self_exe, const char *task_dir, const gp_exec_spec *spec,
                  gp_exec_proc *ret);

/* gp_exec_launch flags */
#define GP_EXEC_FRESH 1u             /* only where no supervisor ran yet (no supervisor.pid/result.json) */

/* Start the supervisor without waiting for it: create TASK_DIR, write
 * spec.json (renamed into place, not fsynced: only the supervisor reads
 * it, and a lost one after a power cut is a task that never started),
 * posix_spawn "SELF_EXE __supervise TASK_DIR" in a session of its own with
 * the supervisor's signals already blocked (a cancel sent at once is kept
 * pending, never kills it), and return its {pid, start} as soon as the
 * exec succeeded.  The supervisor is the caller's child: whoever watches
 * it reaps it (gp_exec_reap); if the caller dies, init adopts it and it
 * carries on.  A supervisor refuses to run the command when another one
 * holds TASK_DIR or already ran there for this start (see exec.md).
 * With GP_EXEC_FRESH it returns -EEXIST instead of starting when
 * supervisor.pid or result.json exists (recovery: a supervisor started
 * before a crash).  Otherwise like gp_exec_start: -EBUSY while a live
 * supervisor owns TASK_DIR, stale files of an earlier run are removed.
 * 0, -EINVAL, -ENOMEM, -EEXIST, -EBUSY, -errno.  Any thread. */
int gp_exec_launch(const char *self_exe, const char *task_dir, const gp_exec_spec *spec, unsigned flags,
                   gp_exec_proc *ret);

/* Reap pidfd's process if it is the caller's child and has exited.
 * 1: reaped, or not our child (nothing to reap: close the fd); 0: our
 * child, still running (reap it later); -errno. */
int gp_exec_reap(int pidfd);

/* The supervisor's main (main.c calls it for "__supervise TASK_DIR").
 * Returns the process exit status for the supervisor itself. */
int gp_exec_supervise_main(const char *task_dir);

/* Read TASK_DIR/supervisor.pid. 0, -ENOENT, -EINVAL (garbage). */
int gp_exec_read_pidfile(const char *task_dir, gp_exec_proc *ret);

/* true if that process still exists and is the same process (start time
 * matches, so a reused pid is not mistaken for it). */
bool gp_exec_alive(const gp_exec_proc *p);

/* pidfd for the supervisor (pidfd_open), readable when it exits.
 * 0, -ESRCH (gone or pid reused), -errno. Caller closes. */
int gp_exec_watch(const gp_exec_proc *p, int *ret_fd);

/* Ask the supervisor to stop the task (SIGTERM; it escalates itself).
 * 0, -ESRCH if it is gone. Idempotent. */
int gp_exec_cancel(const gp_exec_proc *p);

/* Ask the supervisor to stop the task because it was preempted (SIGUSR2:
 * SIGTERM to the task, SIGKILL after preempt_grace_s).  0, -ESRCH. */
int gp_exec_preempt(const gp_exec_proc *p);

/* Tell the task its allocation changed (SIGUSR1 to the supervisor, which
 * sends the spec's notify_signal to the command's own process).  Write
 * alloc.json first.  0, -ESRCH. */
int gp_exec_notify(const gp_exec_proc *p);

/* Replace TASK_DIR/alloc.json with data (atomically; creates TASK_DIR).
 * The task finds it in GPUPOOL_ALLOC_FILE.  0, -EINVAL, -errno. */
int gp_exec_write_alloc(const char *task_dir, const char *data, size_t len);

/* Read TASK_DIR/result.json. 0, -ENOENT (not ended yet), -EINVAL. */
int gp_exec_read_result(const char *task_dir, gp_exec_result *ret);

#endif
