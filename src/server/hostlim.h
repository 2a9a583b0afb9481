/* hostlim.h - the server's side of per-task CPU and RAM limits
 * (exec/cgroup.h): its machine's cgroup support, found once at start, and
 * a task's "cpus", "host_memory_mb" and "cgroup" in its JSON.
 */
#ifndef GP_SERVER_HOSTLIM_H
#define GP_SERVER_HOSTLIM_H

#include "base/buf.h"
#include "core/task.h"

struct gp_daemon;
struct json_t;

/* Set up this process's cgroups (gp_cgroup_setup) once per process and
 * log the outcome once: "cgroups: v1 ..." or a warning that tasks run
 * without CPU and RAM limits.  Thread-safe (pthread_once). */
void gp_hostlim_setup(void);

/* The cgroup version this machine's runs get: 0 (none), 1 or 2.  Sets up
 * first when nobody did.  Thread-safe. */
int gp_hostlim_version(void);

/* Write ,"cpus":N|null,"host_memory_mb":N|null,"cgroup":"v1"|"v2"|null
 * into b for t: its requests from its spec (NULL: a lease, no limits)
 * and the cgroup version of the node its current or last run is on (null
 * while it never ran, or where that node has no cgroup: not enforced).
 * 0 or -ENOMEM.  The daemon's loop thread (reads node telemetry). */
int gp_hostlim_task_write(struct gp_daemon *d, const gp_task *t, const struct json_t *spec, gp_buf *b);

/* Fill t->cpus and t->host_memory_mb from its stored spec (a task read
 * back from the store).  Leaves them 0 when the spec has none. */
void gp_hostlim_task_fill(gp_task *t);

/* Tell the scheduler node local's CPUs and RAM (base/host.h).  The
 * daemon's open, after the local GPUs are in. */
void gp_hostlim_local_capacity(struct gp_daemon *d);

#endif
