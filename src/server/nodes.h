/* nodes.h - the pool's nodes: agents that join, sync and run tasks.
 *
 * The server's side of docs/internals/cluster.md.  The registry holds every
 * node that joined (its credential's hash, state, labels, GPUs, address),
 * the join tokens made through the API, and per node what is to be sent
 * (starts, stops) and what its agent reported (the runs it confirmed).
 * Nodes and tokens are stored in the store's meta table ("node:NAME" and
 * the index "nodes"; "join_tokens"), in the batch transaction that changed
 * them.
 *
 * Boundaries: this module changes nodes and the scheduler's inventory
 * (GPUs, health, labels, drain); it never changes a task.  What happened
 * to tasks (a run ended with a result; a task lost its node) comes back
 * to the daemon as events (gp_node_ev), which daemon.c applies with its
 * own rules (finish, requeue, retries).  All functions run with d->lock
 * held, on the loop thread unless they say otherwise.
 */
#ifndef GP_SERVER_NODES_H
#define GP_SERVER_NODES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/proto.h"
#include "core/task.h"
#include "exec/exec.h"
#include "server/routes.h"

struct gp_daemon;
struct hreq;

typedef struct gp_nodes gp_nodes;

typedef enum gp_node_state {
        GP_NODE_READY = 0,
        GP_NODE_DRAINING,
        GP_NODE_LOST,
        GP_NODE_LEFT,
} gp_node_state;

const char *gp_node_state_name(gp_node_state s);

/* What happened to a task on a node, for daemon.c to apply. */
typedef enum gp_node_ev_kind {
        GP_NODE_EV_RUN_ENDED = 0, /* a current run ended: result (rank of the task's nodes) */
        GP_NODE_EV_LOST,          /* the task lost a node (or its run there): why */
} gp_node_ev_kind;

typedef struct gp_node_ev {
        gp_node_ev_kind kind;
        int64_t task;
        int rank;
        gp_exec_result result;
        char why[GP_REASON_MAX];
} gp_node_ev;

/* The commands of the agent routes and the admin routes (cmd payload). */
typedef enum gp_node_op {
        GP_NODE_OP_JOIN = 0,      /* msg.join, credential made by the handler */
        GP_NODE_OP_SYNC,          /* msg.sync */
        GP_NODE_OP_DRAIN,
        GP_NODE_OP_UNDRAIN,
        GP_NODE_OP_REMOVE,
        GP_NODE_OP_TOKEN_CREATE,  /* ttl_s; token made by the handler */
        GP_NODE_OP_TOKEN_REVOKE,  /* token_id */
} gp_node_op;

typedef struct gp_node_cmd {
        gp_node_op op;
        char node[GP_NODE_MAX];
        char who[96];
        gp_proto_join join;
        gp_proto_sync sync;
        char token[GP_PROTO_CRED_LEN + 1];  /* JOIN: the join token it came with */
        char secret[GP_PROTO_CRED_LEN + 1]; /* JOIN: the new credential; TOKEN_CREATE: the token */
        int64_t ttl_s;
        char token_id[24];
        struct node_reply *reply;           /* SYNC: what the loop found for the answer (nodes.c) */
} gp_node_cmd;

void gp_node_cmd_free(gp_node_cmd *c);

/* Open the registry: load nodes and tokens from d->ws and put the GPUs of
 * every node not left into the scheduler (lost ones unhealthy), so that
 * recovered tasks find them.  Every node gets node_timeout_s of grace from
 * now and is asked for a full sync.  0 or a negative code with err. */
int gp_nodes_open(struct gp_daemon *d, char *err, size_t errlen);
void gp_nodes_close(struct gp_daemon *d);

/* true when t's GPUs are on agent nodes (not "local"). */
bool gp_nodes_remote(const gp_task *t);

/* Apply a node command (loop thread; nc stays the command's).  Writes the
 * answer's status and body (malloc'd) for commands that have no sync
 * answer (everything but SYNC, whose answer gp_nodes_answer renders after
 * the batch). */
void gp_nodes_apply(struct gp_daemon *d, gp_node_cmd *nc, int64_t now, int *status, char **body);
/* The answer of SYNC command nc, posted for request req, rendered now (the
 * node's acks of this pass, its pending starts and stops): status and
 * body, and true.  Or false: nothing to say now, req is held by its node
 * (answered later by gp_nodes_flush / gp_nodes_tick); the caller leaves it
 * alone. */
bool gp_nodes_answer(struct gp_daemon *d, gp_node_cmd *nc, struct hreq *req, int *status, char **body);

/* Events for the daemon since the last take: *ret_n of them, valid until
 * the next call of any gp_nodes_ function that makes events. */
const gp_node_ev *gp_nodes_events(struct gp_daemon *d, size_t *ret_n);
void gp_nodes_events_clear(struct gp_daemon *d);

/* A task started on agent nodes is durable: queue its starts (one per
 * node, ranks in node order). */
void gp_nodes_start(struct gp_daemon *d, const gp_task *t);
/* Stop t's current runs on its nodes (cancel, preempt, stale).  For
 * cancel and preempt the stop is sent again until the run's end is
 * reported.  Call before the task's epoch changes. */
/* t (an elastic task on an agent node, its new GPU set stored) is told
 * of it with its node's next answer. */
void gp_nodes_resized(struct gp_daemon *d, const gp_task *t);
/* t, elastic in whole nodes, gave up nodes: was[0..was_n) held its GPUs
 * before (t->gpus the new set, the kept nodes first in their order).  Each
 * run on a node it no longer has is stopped as preempted, and that node
 * starts nothing until the run ended (in the batch that stores the new
 * set: stops go out before the answer, as gp_nodes_stop's). */
void gp_nodes_gave_up(struct gp_daemon *d, const gp_task *t, const gp_task_gpu *was, int was_n);
void gp_nodes_stop(struct gp_daemon *d, const gp_task *t, gp_proto_stop_why why);
/* A task ended: forget what its runs reported (the acks of their ends are
 * sent as the agents report them). */
void gp_nodes_forget(struct gp_daemon *d, const gp_task *t);

/* Nodes whose heartbeats stopped become lost (events for their tasks);
 * held syncs whose wait is over are answered. */
void gp_nodes_tick(struct gp_daemon *d, int64_t now);
/* The earliest time gp_nodes_tick has something to do (INT64_MAX: none). */
int64_t gp_nodes_next_ms(struct gp_daemon *d);
/* Removed nodes whose tasks have let go leave the scheduler's inventory
 * (after the daemon applied the events). */
void gp_nodes_settle(struct gp_daemon *d);
/* Answer every held sync whose node has something to send (after a
 * batch is applied and after its effects are released). */
void gp_nodes_flush(struct gp_daemon *d, uint64_t gen);
/* Write the changed node records and tokens into the open transaction
 * of d->ws.  0 or -GP_ESTORE. */
int gp_nodes_store(struct gp_daemon *d);
/* Is anything to be stored?  And: it was (the transaction committed). */
bool gp_nodes_pending(const struct gp_daemon *d);
void gp_nodes_stored(struct gp_daemon *d);
/* May the pool grow?  While a join token is live (one in the config, or
 * one made by an admin that is neither revoked nor expired at now_ms) or
 * a lost node may come back; then why says which ("a join token is live",
 * "node gpu-a is lost and may come back").  d->lock held. */
bool gp_nodes_growable(const struct gp_daemon *d, int64_t now_ms, char *why, size_t size);
/* The server stops: every held sync is answered now (MHD thread or the
 * stopping thread, d->lock held). */
void gp_nodes_release(struct gp_daemon *d);
/* A request went away (MHD completed it): forget it if it was held. */
void gp_nodes_req_gone(struct gp_daemon *d, struct hreq *r);

/* A queued task's reason that names unhealthy GPUs: say so when nodes
 * known from the store have not synced since the server started (they
 * take no work until they have).  Appends to reason (NUL-terminated, size
 * bytes); d->lock held. */
void gp_nodes_reason_note(struct gp_daemon *d, char *reason, size_t size);

/* The GPU backend of the machine that holds node's GPUs: the agent's
 * ("sim", "nvml") for an agent node, the server's for "local" or an
 * unknown node.  d->lock held; valid while it is. */
const char *gp_nodes_backend(struct gp_daemon *d, const char *node);
/* Add backend b to buf, a "+"-joined list of backends each once in the
 * order first seen ("nvml+sim"): what an answer about GPUs of several
 * nodes says, so that any simulated one says "sim". */
void gp_nodes_backends_add(char *buf, size_t size, const char *b);

/* The last readings of an agent node (nodes-tele.h): NULL for "local", an
 * unknown node, one not ready or draining, or one that sent none. */
struct gp_node_tele;
struct gp_node_tele *gp_nodes_tele(struct gp_daemon *d, const char *node);

/* The node's host for model servers and MASTER_ADDR ("" for local or
 * unknown) into buf. */
void gp_nodes_host(struct gp_daemon *d, const char *node, char *buf, size_t size);
/* Its whole address (https://HOST:PORT; http:// from older agents; "" as
 * above) into buf.  d->lock held. */
void gp_nodes_address(struct gp_daemon *d, const char *node, char *buf, size_t size);

/* A node certificate's check (node-cert.c): 0 and the node's host (as
 * gp_nodes_host) when cred is the credential of node, which has not left;
 * -ENOENT (no such node), -EPERM (another credential).  Takes d->lock. */
int gp_nodes_cred_host(struct gp_daemon *d, const char *node, const char *cred, char *host, size_t size);

/* The agent nodes that have not left, for the monitor (names and whether
 * they are up), at most GP_MON_MAX_NODES; returns how many were written. */
struct gp_mon_sample;
size_t gp_nodes_mon(struct gp_daemon *d, struct gp_mon_sample *s);

/* The pool's workers for /coordinator/cluster: agent nodes ready or
 * draining, plus 1 for node local when it has GPUs. */
int gp_nodes_count_ready(struct gp_daemon *d);

extern const gp_route gp_nodes_routes[];

#endif
