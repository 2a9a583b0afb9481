/* nodes-join.h - what a join's labels and GPUs may be (docs/internals/
 * cluster.md "POST /agent/v1/join"): no label under gpupool/, each GPU
 * uuid once in the pool, at most GP_NODES_MODELS_MAX GPU models per node and
 * what the scheduler's model table can hold.  Split from nodes.c; loop
 * thread, d->lock held. */
#ifndef GP_SERVER_NODES_JOIN_H
#define GP_SERVER_NODES_JOIN_H

#include <stddef.h>

#include "cluster/proto.h"

struct gp_daemon;

#define GP_NODES_MODELS_MAX 8 /* GPU models of one node */

/* The name of the node other than self (the joining node, or NULL) that
 * has GPU uuid, or NULL. */
typedef const char *(*gp_nodes_uuid_owner_fn)(struct gp_daemon *d, const char *uuid, const void *self);

/* May join j's labels and GPUs be a node's (self: the node joining again,
 * NULL for a new one)?  0, or -EINVAL with *status (400: the join itself is
 * wrong; 409: it collides with the pool) and a message in msg. */
int gp_nodes_join_limits(struct gp_daemon *d, const gp_proto_join *j, gp_nodes_uuid_owner_fn owner, const void *self,
                         int *status, char *msg, size_t size);

#endif
