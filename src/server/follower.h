/* follower.h - a server that does not lead (follower.c): it answers the
 * whole API by forwarding each request to the leader (forward.h). */
#ifndef GP_SERVER_FOLLOWER_H
#define GP_SERVER_FOLLOWER_H

#include <stdbool.h>
#include <stdint.h>

#define GP_FOLLOWER_MAX_FDS 16

typedef struct gp_follower gp_follower;

struct gp_config;

/* Serve on dups of the n listening sockets fds (the caller keeps its
 * own), with the server's limits of cfg as a leader would: request bodies
 * over server.max_body_bytes get 413, a request head must come within
 * server.header_timeout_s, at most server.max_connections connections, of
 * which server.max_connections_per_ip from one address (more are closed
 * at once).  0, -ENOMEM or -errno. */
int gp_follower_start(const char *server_id, const struct gp_config *cfg, const int *fds, int n,
                      gp_follower **ret);
/* The leader to forward to: its id and URL ("" = not known; a URL that
 * is not http://HOST[:PORT] or names no reachable host, such as 0.0.0.0,
 * is kept but not used).  Any thread; takes fw NULL. */
void gp_follower_set_leader(gp_follower *fw, const char *leader, const char *url);
/* Did the store answer this server just now (server.c's lease read and
 * registry beat)?  GET /api/v1/coordinator/health here says
 * store_reachable while the last call answered, within lease_s.  Any
 * thread; takes fw NULL. */
void gp_follower_store_answered(gp_follower *fw, bool answered);
/* The lease epoch of that leader: set it BEFORE gp_follower_set_leader
 * names a new one (a write cut off by a failover is resolved once a
 * newer epoch holds the lease: follower-idem.h).  Any thread; takes NULL. */
void gp_follower_set_epoch(gp_follower *fw, int64_t epoch);
/* This server took the lease (its epoch is the newest): call before
 * gp_follower_stop, so the writes cut off meanwhile are resolved at once. */
void gp_follower_leads(gp_follower *fw);
/* Stop serving: forwards in progress end, open connections are closed;
 * takes NULL. */
void gp_follower_stop(gp_follower *fw);

#endif
