/* nodes-run.h - the server's side of one run on an agent node: its start
 * as the agent gets it, and the server's copy of its log
 * (docs/internals/cluster.md "Logs"), and pieces of the nodes' JSON.
 * Split from nodes.c; d->lock held, like nodes.h. */
#ifndef GP_SERVER_NODES_RUN_H
#define GP_SERVER_NODES_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/proto.h"
#include "core/task.h"

struct gp_daemon;

/* t's start on node `node` at rank, into *s (owned by the caller: free
 * with gp_proto_start_done).  0 or -EINVAL (its spec is not what submit
 * stored).  Exits the process when out of memory, as nodes.c does. */
int gp_nodes_start_of(struct gp_daemon *d, const gp_task *t, const char *node, int rank, gp_proto_start *s);
/* The indexes of t's GPUs on node (an elastic task's current set). */
void gp_nodes_task_mask(const gp_task *t, const char *node, gp_proto_mask *ret);

/* Append a chunk of a run's output where the copy of that run's log (its
 * own file: runlog.h) ends; any other offset is a repeat or a gap and is
 * left out.  create: a current run's, whose file may be made; else (a run
 * being stopped) only a file that exists takes it.  0 with *ret_size (where
 * the copy ends now), or a negative errno (nothing written). */
int gp_nodes_take_log(struct gp_daemon *d, const gp_proto_log *lg, bool create, int64_t *ret_size);
/* The size of the server's copy of a run's log (0 when none). */
int64_t gp_nodes_log_size(struct gp_daemon *d, gp_proto_run_id id);

/* The JSON of GET /api/v1/nodes pieces (new references, NULL when out of
 * memory): a node's labels with the implicit gpupool/node; its GPUs
 * (scheduler ids sids, UINT32_MAX = none) as the scheduler sees them, with
 * *busy GPUs and *runs tasks counted; the server's own GPUs as node
 * "local" (NULL when it has none). */
struct json_t;
struct json_t *gp_nodes_labels_json(const char *canon, const char *name);
struct json_t *gp_nodes_sched_gpus_json(struct gp_daemon *d, const char *node, const uint32_t *sids, int n, int *busy,
                                        int *runs);
struct json_t *gp_nodes_local_json(struct gp_daemon *d);

#endif
