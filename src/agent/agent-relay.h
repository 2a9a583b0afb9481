/* agent-relay.h - the agent's relay to a model replica it runs (issue 22:
 * the gateway's prompts and answers cross the network only over TLS).
 *
 * On the agent's port (agent-tls.h), a connection whose first line is
 *     GPUPOOL-RELAY TASK.EPOCH.RANK TOKEN\n
 * is carried to 127.0.0.1:SERVE_PORT of that run, where SERVE_PORT and
 * SERVE_RELAY_TOKEN are the run's own environment (DATA_DIR/runs/NAME/
 * spec.json, which the server set for its model replicas, src/server/
 * serve.c), TOKEN must equal SERVE_RELAY_TOKEN (at least 32 characters),
 * and the run must still run (no result.json).  Never another port: a
 * connection that names no such run gets a 502 HTTP answer and is closed.
 * The server opens it over TLS verified against the cluster CA
 * (src/server/relay.c), so what goes through is encrypted off the node. */
#ifndef GP_AGENT_AGENT_RELAY_H
#define GP_AGENT_AGENT_RELAY_H

#include <sys/socket.h>

#include "base/iplimit.h"

/* Looks at the first bytes of the plain connection fd (waiting for them a
 * few seconds): 0 when it is no relay request (nothing was consumed: hand
 * it to the HTTP server), 1 when it was and fd was taken (a thread carries
 * it, or it was answered 502 and closed; its count in ipl for sa is put
 * back then, not before: a client that sends the magic and stalls holds
 * its address's count until the line's deadline).  Called from an
 * acceptor thread. */
int gp_agent_relay_try(int fd, const char *runs_dir, gp_iplimit *ipl, const struct sockaddr *sa);

#endif
