/* forward.h - what a follower sends the leader in place of its client,
 * and how the leader reads it back (pure: no I/O, but for
 * gp_fwd_mhd_framing_error).
 *
 * Several servers on one PostgreSQL (docs/deployment.md, "Several
 * servers"): a follower answers the whole API by forwarding each request
 * to the leader over HTTP/1.1 (follower.c) and relaying the answer, as
 * Vault's standbys and Consul's followers do.  The leader stays the one
 * writer: its answer (a 201 included) is sent only once what it changed is
 * stored, so an answer relayed by a follower means the same.
 *
 * Two headers of our own travel with a forwarded request:
 *   X-Gpupool-Forwarded-By:  the follower's server id.  A server that
 *       receives it does not forward again (no loops between servers whose
 *       views of the leader differ for a moment).
 *   X-Gpupool-Forwarded-For: the client's address as the follower saw it.
 *       The leader serves a keyless request as a loopback client only when
 *       its peer and every address named here are loopback: a follower on
 *       the leader's machine must not turn a remote client into a local one.
 *       A client can only lower its own rights with it, never raise them.
 *   X-Gpupool-Forwarded-Uid: a loopback client's uid, as the follower's
 *       kernel named it (peer.h).  The leader believes it only when its
 *       own peer (the follower) runs as the leader's uid; a client's own
 *       copy is dropped by the follower like the two above.
 */
#ifndef GP_SERVER_FORWARD_H
#define GP_SERVER_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "base/buf.h"

#define GP_FWD_BY "X-Gpupool-Forwarded-By"
#define GP_FWD_FOR "X-Gpupool-Forwarded-For"
#define GP_FWD_UID "X-Gpupool-Forwarded-Uid" /* a loopback client's uid, as the follower's kernel said
                                                (peer.h); the leader believes it only from a peer of
                                                its own uid on its own machine */
#define GP_FWD_TARGET_MAX 8192          /* request target, bytes */
#define GP_FWD_HEAD_MAX (64 * 1024)     /* request or response head, bytes */

/* What a follower does with a request. */
typedef enum gp_fwd_route {
        GP_FWD_FORWARD,   /* to the leader */
        GP_FWD_HEALTH,    /* GET/HEAD /healthz: answered here (the process is alive) */
        GP_FWD_READY,     /* GET/HEAD /readyz: answered here, 503 (a follower is not the leader) */
        GP_FWD_AGENT,     /* /agent/...: 503 standby, the agent moves on to the leader in its list */
        GP_FWD_LOOP,      /* it came from another server already: 503 standby */
        GP_FWD_COORD_HEALTH, /* GET/HEAD /api/v1/coordinator/health (or /api/...): answered here, about this
                                server (its id, role, store, the leader it knows) */
} gp_fwd_route;

gp_fwd_route gp_fwd_route_of(const char *method, const char *path, bool forwarded_already);

typedef struct gp_fwd_header {
        const char *name;
        const char *value;
} gp_fwd_header;

/* Append to out the head of the request to send the leader: method and
 * target (raw, as the client sent it: an origin-form path and query),
 * the client's headers but the hop-by-hop ones (gp_h1_hop_by_hop),
 * Expect and our own X-Gpupool-Forwarded-*, then Host (the client's, or
 * fallback_host when it sent none), Content-Length: body_len, and
 * X-Gpupool-Forwarded-By: server_id / -For: client.  0; -EINVAL when the
 * method is not a token, the target not origin form (or over
 * GP_FWD_TARGET_MAX), or a name or value holds what a head cannot carry;
 * -E2BIG when the head would pass GP_FWD_HEAD_MAX; -ENOMEM.  On error out
 * holds a partial head: reset it. */
int gp_fwd_request_head(gp_buf *out, const char *method, const char *target, const gp_fwd_header *h, size_t nh,
                        const char *fallback_host, const char *server_id, const char *client, int64_t body_len);

/* Is a request's framing one every server reads the same way (RFC 9112
 * 6.1-6.3)?  NULL, or why it is not: more than one Content-Length line,
 * Content-Length and Transfer-Encoding together, more than one
 * Transfer-Encoding line, or a Transfer-Encoding other than chunked.
 * n_cl and n_te count the lines, te is the (first) Transfer-Encoding
 * value or NULL. */
const char *gp_fwd_framing_error(int n_cl, int n_te, const char *te);
/* For a request MHD has read the head of (MHD's first call of a handler;
 * the one function of this file that is not pure): when its framing is
 * ambiguous, queue 400 invalid_request with Connection: close (nothing
 * more of it is read: the rest could pass for a second request), set *ret
 * and return true; else false. */
bool gp_fwd_mhd_refuse_bad_framing(struct MHD_Connection *c, enum MHD_Result *ret);

/* May a keyless request be served as a loopback client, given its
 * X-Gpupool-Forwarded-For value (NULL: not forwarded)?  True for NULL, and
 * when every comma-separated entry is an IPv4 or IPv6 loopback literal;
 * false for anything else, an unreadable value included. */
bool gp_fwd_loopback(const char *forwarded_for);

#endif
