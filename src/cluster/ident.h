/* ident.h - the rules of a node's identity and of its messages' order
 * (docs/internals/cluster.md "Identity and credentials", "seq").
 *
 * Pure: no I/O, no clock (the caller passes now), no logging, no state.
 * The server (server/nodes.c) asks these functions what to do with a join
 * or a sync and applies the answer; the unit tests (tests/unit/test-ident.c)
 * walk every branch.  Thread-safe.
 */
#ifndef GP_CLUSTER_IDENT_H
#define GP_CLUSTER_IDENT_H

#include <stdbool.h>
#include <stdint.h>

/* A seq (wall-clock microseconds) at most this far ahead of the server's
 * clock; further is refused (400) and changes nothing, so that no message
 * can push a node's seq out of the real agent's reach. */
#define GP_IDENT_AHEAD_US (3600LL * 1000000)
/* The seq floor stored with a node reaches this far past the seq taken, so
 * that an agent's syncs cost a store write once per this span, not once
 * per message; after a restart or failover every seq up to the floor is a
 * replay (the real agent learns the floor from the 409 and goes on). */
#define GP_IDENT_RESERVE_US (600LL * 1000000)

typedef enum gp_ident_seq {
        GP_IDENT_SEQ_OK = 0,    /* take it */
        GP_IDENT_SEQ_REPLAY,    /* not above the last one taken: 409 with the last */
        GP_IDENT_SEQ_AHEAD,     /* too far ahead of the server's clock: 400 */
} gp_ident_seq;

/* What to do with a message of seq from a node whose last taken seq (or
 * stored floor) is last, at the server's time now_us. */
gp_ident_seq gp_ident_seq_check(int64_t seq, int64_t last, int64_t now_us);

/* The floor to store once seq is taken above the stored floor: at least
 * seq, at most GP_IDENT_RESERVE_US past it, and never past now_us +
 * GP_IDENT_AHEAD_US (so an agent that jumps to it is not refused). */
int64_t gp_ident_seq_floor(int64_t seq, int64_t now_us);

/* What the server knows of the name a join asks for. */
typedef struct gp_ident_known {
        bool exists;                 /* a node of that name is in the registry */
        bool left;                   /* it was removed (state left) */
        bool live;                   /* synced within node_timeout_s, or holds runs, or is being removed */
        int64_t join_seq;            /* the seq of the join it was made with (0: none stored) */
        const char *machine;         /* the hash of its machine key ("" = none stored) */
} gp_ident_known;

typedef enum gp_ident_join {
        GP_IDENT_JOIN_OK = 0,        /* a new node, one that left or was lost, or the same machine again */
        GP_IDENT_JOIN_INCOMPLETE,    /* no seq or no machine key: 400 */
        GP_IDENT_JOIN_AHEAD,         /* seq too far ahead of the server's clock: 400 */
        GP_IDENT_JOIN_REPLAY,        /* seq not above the node's last join: 409, nothing changes */
        GP_IDENT_JOIN_LIVE,          /* another machine under a live node's name: 409 */
} gp_ident_join;

/* What to do with a join of seq from the machine whose key hashes to
 * machine ("" when the join had none) under a name the server knows as k. */
gp_ident_join gp_ident_join_check(const gp_ident_known *k, int64_t seq, const char *machine, int64_t now_us);

#endif
