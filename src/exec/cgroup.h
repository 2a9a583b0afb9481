/* cgroup.h - a cgroup of its own for every run: CPU and RAM limits, and a
 * kill that reaches processes which left the task's process group.
 *
 * The supervisor (exec.c) makes one cgroup per run before it forks the
 * command, under the cgroup it is itself in (per hierarchy: the server's
 * or the agent's), named "gpupool-task-ID-SUPPID".  The command joins it
 * between fork and exec (gp_cgroup_enter), so everything it starts is
 * counted, limited and killed with it, whatever its process group or
 * session.  Two kinds of machine:
 *   v2: a cgroup2 mount at /sys/fs/cgroup (or /sys/fs/cgroup/unified) whose
 *       root offers the memory and cpu controllers; limits memory.max (and
 *       memory.swap.max 0, memory.oom.group 1), cpu.max; kill cgroup.kill
 *       (a SIGKILL loop where the kernel lacks it); OOM kills from
 *       memory.events' oom_kill.  The daemon, whose unit cgroup holds
 *       processes, first moves itself into a leaf "gpupool-daemon" and
 *       enables +memory +cpu in its unit's subtree_control
 *       (gp_cgroup_setup): tasks go beside that leaf.
 *   v1: the memory hierarchy at /sys/fs/cgroup/memory (required), cpu and
 *       freezer (each used when present); limits memory.limit_in_bytes
 *       (and memory.memsw.limit_in_bytes where swap is accounted),
 *       cpu.cfs_quota_us / cpu.cfs_period_us; kill: freeze, SIGKILL every
 *       pid in cgroup.procs, thaw (without freezer: the SIGKILL loop);
 *       OOM kills from memory.oom_control's oom_kill.
 * Neither: runs go without a cgroup, as before, and nothing is limited.
 *
 * No logging, no global state; async-signal-safe where a function says so.
 * Limits read from a spec are checked (GP_CGROUP_MAX_*).
 */
#ifndef GP_EXEC_CGROUP_H
#define GP_EXEC_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GP_CGROUP_MAX_CPUS 4096                    /* most CPUs one task may ask for */
#define GP_CGROUP_MAX_MEMORY_MB ((int64_t)1 << 30) /* most RAM (MiB, 1 PiB) one task may ask for */
#define GP_CGROUP_HIER 3                           /* v1 hierarchies used: memory, cpu, freezer */
#define GP_CGROUP_PATH_MAX 512

struct json_t;
struct gp_exec_result;

typedef struct gp_cgroup_limits {
        int cpus;               /* CPUs (a quota of cpus * 100 ms per 100 ms), 0 = no limit */
        int64_t host_memory_mb; /* RAM in MiB, 0 = no limit */
} gp_cgroup_limits;

typedef struct gp_cgroup {
        int version;                                  /* 0 = none (no cgroup: nothing below is set), 1 or 2 */
        int n;                                        /* dirs made: v2 1; v1 1..GP_CGROUP_HIER (memory first) */
        char dir[GP_CGROUP_HIER][GP_CGROUP_PATH_MAX]; /* absolute; v1: [0] memory, then cpu, freezer */
        bool is_freezer[GP_CGROUP_HIER];              /* v1: that dir is the freezer's */
        int procs_fd[GP_CGROUP_HIER];                 /* O_WRONLY cgroup.procs of each dir, -1 = closed */
        gp_cgroup_limits limits;                      /* as written */
} gp_cgroup;

/* What this machine offers: 2, 1, or 0 with *why saying what is missing
 * (e.g. "no writable cgroup hierarchy: /sys/fs/cgroup/memory is not
 * mounted").  Reads /proc/self/cgroup and /sys/fs/cgroup; any thread. */
int gp_cgroup_detect(char *why, size_t why_size);

/* The daemon's (server or agent) start: detect, and on v2 move this
 * process into a leaf "gpupool-daemon" of its cgroup and enable +memory
 * +cpu for the cgroup's children (a delegated unit, Delegate=yes).  Then
 * remove the empty run cgroups there whose supervisor is gone (killed
 * before it could).  The version that runs will get (0, 1 or 2), *why
 * filled when 0.  Call once, before any thread that forks is started. */
int gp_cgroup_setup(char *why, size_t why_size);

/* "v1", "v2" or NULL (none) for a version. */
const char *gp_cgroup_version_name(int version);

/* Make the run's cgroup under the caller's own and write lim into it.
 * 0 with *ret ready (version 1 or 2); 1 when this machine has no usable
 * cgroup (*ret has version 0, *why says why); a negative errno when one
 * could not be made or a limit not written (*why says which file; nothing
 * is left behind).  Not thread-safe with itself on one gp_cgroup. */
int gp_cgroup_create(int64_t task_id, const gp_cgroup_limits *lim, gp_cgroup *ret, char *why, size_t why_size);

/* The calling process joins cg (writes "0" to each cgroup.procs).  Only
 * write(2): async-signal-safe, for the child between fork and exec.
 * 0 or -errno.  Version 0: 0, nothing done. */
int gp_cgroup_enter(const gp_cgroup *cg);

/* SIGKILL everything in cg.  0 when it is empty (nothing was there to
 * kill), 1 when processes were signalled or remain (call again later),
 * -errno when cgroup.procs cannot be read.  Version 0: 0. */
int gp_cgroup_kill(const gp_cgroup *cg);

/* How many processes of cg the kernel's OOM killer stopped (memory at
 * its limit).  0 when none or unknown. */
int64_t gp_cgroup_oom_kills(const gp_cgroup *cg);

/* A run in cg that failed (res: exited non-zero or killed by a signal not
 * ours) after the OOM killer stopped one of its processes: its message
 * becomes "host_memory_exceeded: ...".  Other results are left alone. */
void gp_cgroup_note_result(const gp_cgroup *cg, struct gp_exec_result *res);

/* Close the fds and remove the dirs (retrying briefly while the kernel
 * still counts an exited process).  Kill first: a dir with processes
 * stays.  Takes a version 0 cgroup.  0 or the first rmdir's -errno. */
int gp_cgroup_remove(gp_cgroup *cg);

/* The cgroup that supervisor sup_pid made for task_id (under the caller's
 * cgroup, as gp_cgroup_create names it), when that supervisor died without
 * removing it (SIGKILL: a lost run): SIGKILL what is still in it (a
 * process that left the task's group) and remove it, trying for at most
 * about 100 ms.  0: none there, or removed; 1: processes stay (tried
 * again by nobody: the dir is left); -errno.  Any thread. */
int gp_cgroup_reap(int64_t task_id, int64_t sup_pid);

/* The limits in a JSON object's "cpus" and "host_memory_mb" (both
 * optional, integers in 1..GP_CGROUP_MAX_*; absent or null = none): the
 * task's stored spec and the supervisor's spec.json use the same keys.
 * 0 or -EINVAL (*ret untouched). */
int gp_cgroup_limits_get(const struct json_t *o, gp_cgroup_limits *ret);

/* Add lim's non-zero limits to o.  0, -EINVAL (out of range), -ENOMEM. */
int gp_cgroup_limits_set(struct json_t *o, const gp_cgroup_limits *lim);

#endif
