/* cluster-host.h - what the daemon provides to the server's cluster code:
 * the node registry (nodes.c, nodes-run.c, nodes-tele.c, nodes-join.c,
 * nodes-fence.c) and the coordinator (coord.c).
 *
 * The daemon (gp_daemon) is an opaque handle here; its layout is
 * server-int.h's, which the cluster code does not include (scripts/
 * check-layers.sh fails if it does), so the daemon's internals change
 * without touching it.  Requests and commands: hreq.h.  The daemon calls
 * the cluster code through nodes.h and coord.h.  docs/internals/cluster.md
 * "Rooms" draws the line.
 *
 * Locks: "the lock" is the daemon's state lock (d->lock in server-int.h).
 * The loop thread holds it while it applies commands and runs the
 * scheduler, so every gp_nodes_ function it calls runs under it; an HTTP
 * handler takes it (gp_daemon_lock) around what it reads or changes.
 * What is "under the lock" below may be used only while it is held; what
 * is "loop thread" only from the loop thread (which holds the lock).
 */
#ifndef GP_SERVER_CLUSTER_HOST_H
#define GP_SERVER_CLUSTER_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/sched.h"
#include "core/task.h"
#include "gpu/gpu.h"
#include "server/hreq.h"
#include "store/store.h"

typedef struct gp_daemon gp_daemon;
struct gp_nodes;
struct gp_coord;
struct gp_coord_audit;
struct gp_node;
struct gp_node_cmd;
struct gp_tenants;
struct gp_monitor;

/* ---- the daemon's state ---- */

/* Take / let go of the lock (not recursive; the loop thread holds it
 * already).  Any thread. */
void gp_daemon_lock(gp_daemon *d);
void gp_daemon_unlock(gp_daemon *d);
/* The daemon's configuration, fixed once it is open.  Any thread. */
const gp_config *gp_daemon_cfg(const gp_daemon *d);
/* The scheduler (inventory of GPUs and nodes, placements).  Under the lock. */
gp_sched *gp_daemon_sched(gp_daemon *d);
/* The active (queued or running) task id, or NULL; the daemon owns it.  Under the lock. */
gp_task *gp_daemon_task(gp_daemon *d, int64_t id);
/* The next active task after *pos (start at 0), or NULL at the end.  Under the lock. */
gp_task *gp_daemon_task_next(gp_daemon *d, size_t *pos);
/* The writer's store handle, for the registry's meta records in the open batch.  Loop thread. */
gp_store *gp_daemon_store(gp_daemon *d);
/* The server's own GPU backend ("sim", "nvml", "none").  Any thread. */
const char *gp_daemon_backend(const gp_daemon *d);
/* Node local's GPUs: how many, their scheduler ids in *ret_ids (fixed once open).  Any thread. */
size_t gp_daemon_local_gpus(const gp_daemon *d, const uint32_t **ret_ids);
/* Their last readings, in the same order; NULL before the first.  Under the lock. */
const gp_gpu_info *gp_daemon_local_info(const gp_daemon *d);
/* When the daemon started (wall clock, ms).  Any thread. */
int64_t gp_daemon_started_ms(const gp_daemon *d);
/* The host name at start (the coordinator's server id by default).  Any thread. */
const char *gp_daemon_hostname(const gp_daemon *d);
/* Is the daemon stopping (held syncs are no longer parked)?  Any thread. */
bool gp_daemon_stopping(const gp_daemon *d);
/* Tenants (run_as, the audit log) and the metrics registry; the daemon's.
 * Tenants under the lock; the monitor is thread-safe. */
struct gp_tenants *gp_daemon_tenants(gp_daemon *d);
struct gp_monitor *gp_daemon_monitor(gp_daemon *d);
/* DATA_DIR/tasks/ID[/FILE] into buf.  0 or -ENAMETOOLONG.  Any thread. */
int gp_daemon_task_path(const gp_daemon *d, int64_t id, const char *file, char *buf, size_t size);

/* ---- what the cluster code asks of the daemon ---- */

/* Wake the loop thread (a deadline it does not know yet, GPUs that freed).  Any thread. */
void gp_daemon_kick(gp_daemon *d);
/* Queue a command for the loop thread (takes c).  Any thread. */
void gp_daemon_post(gp_daemon *d, cmd *c);
/* The commands the cluster code posts (gp_http_post, gp_daemon_post);
 * NULL when out of memory (then nothing is taken).  Any thread. */
cmd *gp_cmd_node(struct gp_node_cmd *nc);          /* an agent's join or sync, a node or token admin call */
cmd *gp_cmd_coord_audit(struct gp_coord_audit *a); /* a coordinator write's audit entries and answer */
cmd *gp_cmd_mem_exceeded(int64_t task);            /* the watchdog: stop task, over its memory_mb */
/* Node local was drained or undrained: store the drained set with this batch.  Loop thread. */
void gp_daemon_drained_changed(gp_daemon *d);
/* Running task id's GPU memory peak grew: store it with the next batch.  Under the lock. */
void gp_daemon_peak_grew(gp_daemon *d, int64_t id);
/* The watchdog's next look at agents' tasks (INT64_MAX: none): read, and set.  Under the lock. */
int64_t gp_daemon_wd_due(const gp_daemon *d);
void gp_daemon_set_wd_due(gp_daemon *d, int64_t ms);

/* ---- the cluster code's own state, which the daemon holds for it ---- */

/* The node registry (set by gp_nodes_open, NULL after gp_nodes_close).  Under the lock. */
struct gp_nodes *gp_daemon_nodes(const gp_daemon *d);
void gp_daemon_set_nodes(gp_daemon *d, struct gp_nodes *ns);
/* The coordinator (set by gp_coord_open, NULL after gp_coord_close).  Any thread once open. */
struct gp_coord *gp_daemon_coord(const gp_daemon *d);
void gp_daemon_set_coord(gp_daemon *d, struct gp_coord *c);
/* The node that holds request r (an agent's parked sync), or NULL; set it (NULL: none).  Under the lock. */
struct gp_node *gp_http_node_held(const hreq *r);
void gp_http_set_node_held(hreq *r, struct gp_node *n);

#endif
