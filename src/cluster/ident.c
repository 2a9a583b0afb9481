/* ident.c - node identity and message order rules (ident.h).
 *
 * Invariants: a seq is taken only when it is above the last one and at
 * most GP_IDENT_AHEAD_US ahead of the clock, so the last seq of a node is
 * always within the real agent's reach (it jumps above it after a 409);
 * a join under a live name is taken only from the machine that made the
 * node, and never twice with the same seq.
 */
#include "cluster/ident.h"

#include <string.h>

gp_ident_seq gp_ident_seq_check(int64_t seq, int64_t last, int64_t now_us) {
        if (seq <= last)
                return GP_IDENT_SEQ_REPLAY;
        if (now_us > 0 && seq - now_us > GP_IDENT_AHEAD_US)
                return GP_IDENT_SEQ_AHEAD;
        return GP_IDENT_SEQ_OK;
}

int64_t gp_ident_seq_floor(int64_t seq, int64_t now_us) {
        int64_t f = seq <= INT64_MAX - GP_IDENT_RESERVE_US ? seq + GP_IDENT_RESERVE_US : INT64_MAX;
        int64_t cap = now_us <= INT64_MAX - GP_IDENT_AHEAD_US ? now_us + GP_IDENT_AHEAD_US : INT64_MAX;
        if (f > cap)
                f = cap;
        return f > seq ? f : seq;
}

gp_ident_join gp_ident_join_check(const gp_ident_known *k, int64_t seq, const char *machine, int64_t now_us) {
        if (seq <= 0 || !machine || !machine[0])
                return GP_IDENT_JOIN_INCOMPLETE;
        if (now_us > 0 && seq - now_us > GP_IDENT_AHEAD_US)
                return GP_IDENT_JOIN_AHEAD;
        if (!k || !k->exists)
                return GP_IDENT_JOIN_OK;
        if (seq <= k->join_seq)
                return GP_IDENT_JOIN_REPLAY;
        if (k->left || !k->live)
                return GP_IDENT_JOIN_OK;
        /* live: only the machine that made the node may join under its name again */
        return k->machine && k->machine[0] && !strcmp(k->machine, machine) ? GP_IDENT_JOIN_OK : GP_IDENT_JOIN_LIVE;
}
