/* nodes-fence.h - the time rules of node liveness and fencing
 * (docs/internals/cluster.md "Fencing" and "Liveness"), kept apart from
 * nodes.c so they are plain functions a unit test reaches.  Pure: no I/O,
 * no clock reads (times are passed in); thread-safe as their arguments are.
 *
 * - A lost node's tasks that fence are given away only once the node's
 *   runs have surely stopped: its agent's supervisors stop them fence_s
 *   after the last sync the agent sent that was answered (never later
 *   than the last sync the server took), then wait kill_grace_s before
 *   SIGKILL; the margin covers their polling and the clocks' drift.
 * - Time during which the server did not run (SIGSTOP, a VM pause, a
 *   loop blocked for long) is not held against nodes: the pause clock
 *   adds every gap in the server's own monotonic clock, and a node's
 *   silence is measured without the pauses since its last sync.
 */
#ifndef GP_SERVER_NODES_FENCE_H
#define GP_SERVER_NODES_FENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/task.h"

#define GP_FENCE_MARGIN_MS 2000 /* beyond fence_s + kill_grace_s: supervisors poll, clocks drift */
#define GP_PAUSE_MIN_MS 2000    /* a gap this long between two looks is a pause (the loop looks every second) */

typedef struct gp_pause_clock {
        int64_t last_mono;      /* the last look, 0 = none yet */
        int64_t paused_ms;      /* the sum of the gaps found */
} gp_pause_clock;

/* A look at the server's monotonic clock (mono): a gap of at least
 * GP_PAUSE_MIN_MS since the last look is added to paused_ms whole.
 * Returns the gap added (0: none). */
int64_t gp_pause_clock_look(gp_pause_clock *c, int64_t mono);

/* How long after a lost node's last sync (server time, pauses left out)
 * its tasks that fence may start elsewhere. */
int64_t gp_fence_giveaway_ms(int fence_s, int kill_grace_s);

/* The allowance a node known from the store gets at a server start (a
 * restart, a failover): its agent may be waiting for an answer from the
 * old server (heartbeat_s + GP_PROTO_ANSWER_SLACK_MS), then between tries
 * (GP_PROTO_RETRY_MAX_MS), and then node_timeout_s as for any node. */
int64_t gp_nodes_start_grace_ms(int heartbeat_s, int node_timeout_s);

/* Does t's run stop on a node that lost contact before t starts anywhere
 * else?  Batch tasks unless their spec says "on_node_lost": "requeue";
 * never a lease (it ends lost at once: its holder is not a process there). */
bool gp_task_fences(const gp_task *t);

#endif
