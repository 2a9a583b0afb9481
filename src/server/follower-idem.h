/* follower-idem.h - a follower's writes at a failover (follower.c): no
 * "maybe" answer (docs/internals/cluster.md "Followers", issue 22).
 *
 * Every write (POST, PUT, DELETE) a follower forwards carries an
 * Idempotency-Key: the client's, or one made here (gp_fres_key_add).  When
 * the leader goes away after the request was sent and before its answer
 * came, gp_fres_answer decides: it waits until the leader it was sent to
 * is fenced (the lease row shows a newer epoch: this server or another
 * took over; the old leader's commits fail from then on, so what it did
 * not commit it never will), then looks the key up in the store (the
 * answer is kept in the transaction of its change, idem.h): found ->
 * that answer (Idempotent-Replayed: true); not found -> 503
 * not_carried_out ("send it again").  When no takeover comes within the
 * wait (lease_s * 2 + 5 s) or this server stops: 503 leader_unreachable
 * naming the key in an Idempotency-Key header, with which a retry is
 * carried out at most once.
 *
 * Threads: one gp_fres per follower; its calls are thread-safe (its store
 * handle is under its own mutex; the epoch and the "leads" flag atomics).
 */
#ifndef GP_SERVER_FOLLOWER_IDEM_H
#define GP_SERVER_FOLLOWER_IDEM_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/forward.h"
#include "store/idem.h"

struct gp_config;
typedef struct gp_fres gp_fres;

/* 0 or -ENOMEM.  Opens no connection yet (the first resolution does). */
int gp_fres_new(const struct gp_config *cfg, gp_fres **ret);
void gp_fres_free(gp_fres *r);
/* The lease epoch of the leader the follower forwards to now. */
void gp_fres_set_epoch(gp_fres *r, int64_t epoch);
int64_t gp_fres_epoch(gp_fres *r);
/* This server holds the lease now (before the follower stops). */
void gp_fres_leads(gp_fres *r);

/* One forwarded write's key and fingerprint (store/idem.h's), filled by
 * gp_fres_key_add. */
typedef struct gp_fres_req {
        bool keyed;    /* a write: resolved at a failover */
        bool by_owner; /* a coordinator call: the leader keeps no answer for it, and
                          sending it again is safe (idempotent for its owner) */
        char key[GP_IDEM_KEY_MAX + 1];
        char fp[GP_IDEM_FP_LEN + 1];
        char line[GP_IDEM_KEY_MAX + 1]; /* the header value added, when made here */
        int64_t epoch;                  /* the leader's epoch when it was sent */
} gp_fres_req;

/* For a write: the request's key (the client's Idempotency-Key, or a new
 * one appended to h, which must have room for one more), its fingerprint
 * over method, the target's path (percent-decoded as the leader decodes
 * it) and body.  *ret->keyed false for a read or a key the leader would
 * refuse (it answers that itself).  0 or -EIO (no random bytes). */
int gp_fres_key_add(gp_fres *r, const char *method, const char *target, const char *body, size_t len, gp_fwd_header *h,
                    size_t *n, size_t max, gp_fres_req *ret);

/* The leader went away after q was sent: the answer to queue on c (see
 * above); stopping is the follower's flag, fwd_by its id for
 * X-Gpupool-Forwarded-By. */
enum MHD_Result gp_fres_answer(gp_fres *r, struct MHD_Connection *c, const gp_fres_req *q, const atomic_bool *stopping,
                               const char *fwd_by);

#endif
