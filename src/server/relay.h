/* relay.h - the server's end of the relay to a model replica on an agent
 * node (issue 22): a listener on 127.0.0.1 (the gateway's upstream URL
 * for that replica, so gateway/upclient.c stays plain HTTP to loopback);
 * each connection to it is carried over TLS, verified against the
 * cluster's CA and the node's host name, to the node's agent port, which
 * relays it to the replica on the node's loopback (agent/agent-relay.h).
 *
 * Thread-safety: open, matches and close from one thread (serve.c's);
 * the connection threads are detached and use only their own sockets and
 * a copy of what they need, so they may outlive close. */
#ifndef GP_SERVER_RELAY_H
#define GP_SERVER_RELAY_H

#include <stdbool.h>

typedef struct gp_relay gp_relay;

/* Listens on 127.0.0.1 (a port of the kernel's choice) for the run
 * run_name ("TASK.EPOCH.RANK") on the agent at agent_url
 * ("https://HOST:PORT"), with the run's relay token.  0, -EINVAL (not an
 * https:// URL, a bad name or token), -ENOENT (this server serves no TLS:
 * it has no CA to check the node by) or -errno.  max_conns bounds the
 * connections carried at once by all relays of the process (the gateway's
 * gateway.max_upstream_connections; one more is answered 502 and closed,
 * so a local process cannot make a thread and a TLS session each for
 * thousands). */
int gp_relay_open(const char *agent_url, const char *run_name, const char *token, int max_conns,
                  gp_relay **ret);
/* The local port the gateway dials. */
int gp_relay_port(const gp_relay *r);
/* Whether r carries exactly that (a node or run that changed needs a new one). */
bool gp_relay_matches(const gp_relay *r, const char *agent_url, const char *run_name, const char *token);
/* serve.c's one call per tick: keeps *rp carrying run_name (with token)
 * to agent_url when both are given and agent_url is https:// (opens,
 * or opens again when something changed; a failure leaves *rp NULL);
 * else closes it.  Then the host and port the gateway dials: 127.0.0.1 and the relay's port; port 0 when the relay is
 * wanted but could not open (logged; never plain instead); or direct_host
 * and direct_port (the replica's own: an agent of before node
 * certificates, a server without TLS, or a replica on this machine). */
void gp_relay_keep(gp_relay **rp, const char *agent_url, const char *run_name, const char *token, int max_conns,
                   const char *direct_host, int direct_port, const char **ret_host, int *ret_port);

/* Stops listening (connections in flight go on).  Takes NULL. */
void gp_relay_close(gp_relay *r);

#endif
