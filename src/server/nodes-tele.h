/* nodes-tele.h - what agents measure: their GPUs' readings (utilisation,
 * memory in use and by which process, temperature, power, clocks, ECC,
 * throttling) and their machine (CPUs, memory, disk), as the syncs carry
 * them (docs/internals/cluster.md "Telemetry").
 *
 * Observations, not state: the server keeps the last readings of each GPU
 * in memory, stores none, and shows none for a node that is lost or left
 * (they may be stale).  A sync carries the readings of the GPUs that
 * changed since the agent's last sync that the server took; each carried
 * GPU's readings replace what was known of it.  So what the server holds
 * is what the agent last sent as long as no sync is lost: a sync that
 * fails, or a server that restarted or changed (it asks for a full sync),
 * makes the agent send every reading again.
 * Everything here runs with d->lock held. */
#ifndef GP_SERVER_NODES_TELE_H
#define GP_SERVER_NODES_TELE_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/proto.h"
#include "core/task.h"
#include "gpu/gpu.h"

struct gp_daemon;

typedef struct gp_node_tele gp_node_tele;

/* Merge the telemetry and host of sync m into *t (made at first use).
 * The tasks whose processes were or are listed on a GPU whose readings
 * came go into touched (each once, at most cap; *ntouched of them).
 * 0, or -ENOMEM (what was known stays). */
int gp_node_tele_take(gp_node_tele **t, const gp_proto_sync *m, int64_t now_ms, int64_t *touched, size_t cap,
                      size_t *ntouched);
void gp_node_tele_free(gp_node_tele *t);

/* The last readings of the node's GPU `index` (NULL: none known).  Its
 * uuid, name and total memory are not filled in: the registry has them. */
const gp_gpu_info *gp_node_tele_gpu(const gp_node_tele *t, int index);
/* The machine's (NULL: not reported). */
const gp_host_info *gp_node_tele_host(const gp_node_tele *t);
/* When the node last sent readings (0: never). */
int64_t gp_node_tele_at(const gp_node_tele *t);
/* GPU memory in use by the processes of task's runs on this node, in MiB,
 * summed over its GPUs: -1 when no GPU of the node reports processes. */
int64_t gp_node_tele_task_mb(const gp_node_tele *t, int64_t task);

/* Add to a node's JSON (GET /api/v1/nodes) what its machine has (cpus,
 * memory_total_mb, memory_available_mb, disk_total_mb, disk_free_mb: null
 * when unknown) and when it last reported readings (telemetry_ms, null:
 * never).  0 or -ENOMEM. */
struct json_t;
int gp_node_host_json(const gp_host_info *h, int64_t at_ms, struct json_t *o);
/* Add GPU g's readings to its JSON: memory_used_mb, util_pct, temp_c,
 * power_w (null when unknown).  0 or -ENOMEM. */
int gp_gpu_readings_json(const gp_gpu_info *g, struct json_t *o);

/* The GPU memory of task t's processes: on the server's own GPUs from the
 * last sample, on agents' from their last readings; its peak.  Writes
 * ,"gpu_memory_used_mb":N|null,"gpu_memory_peak_mb":N|null (null: not
 * known, e.g. no process listing from the driver, or not running).  0 or
 * -ENOMEM. */
struct gp_buf;
int gp_tele_task_write(struct gp_daemon *d, const gp_task *t, struct gp_buf *b);
/* The server's own GPUs were read (d->gpu_info): each process listed is
 * charged to the running task whose supervisor it descends from. */
bool gp_tele_local_sample(struct gp_daemon *d);
/* A node's readings came: the peaks of the tasks they name or named
 * (ids, gp_node_tele_take's touched), and the watchdog's look at them. */
void gp_tele_node_tasks(struct gp_daemon *d, const int64_t *ids, size_t n);
/* A node's sync was taken (gp_node_tele_take): its host report, if any,
 * becomes the node's CPU and RAM capacity in the scheduler
 * (gp_sched_node_set_host), then gp_tele_node_tasks.  Under d->lock. */
void gp_tele_node_synced(struct gp_daemon *d, const char *node, const gp_proto_sync *m, const int64_t *ids,
                         size_t n);
/* Agents send readings when they change: a task of theirs over its memory
 * is looked at again when its grace ends (d->wd_due_ms), its last reading
 * standing.  The loop, d->lock held. */
void gp_tele_tick(struct gp_daemon *d, int64_t now);

/* How task t's GPU memory is isolated (docs/isolation.md): "mig" (it
 * holds whole MIG instances, each fenced by the hardware), "watchdog"
 * (it shares its GPUs, asking memory_mb, and the watchdog reads its
 * processes' memory there), or "none" (a whole GPU: nobody to protect; the
 * watchdog off; or a driver that lists no processes). */
const char *gp_tele_task_isolation(struct gp_daemon *d, const gp_task *t);
/* The same for GPU g: "mig" for a MIG instance, else "watchdog" when on and
 * its readings list processes. */
const char *gp_tele_gpu_isolation(struct gp_daemon *d, uint32_t g);

/* The readings of scheduler GPU g, the server's own or an agent's (NULL
 * when none are known: no sample yet, gpus.backend none, a lost node). */
const gp_gpu_info *gp_daemon_gpu_info(struct gp_daemon *d, uint32_t g);

#endif
