/* node-cert.h - node certificates (issue 22; docs/security.md "Node
 * certificates"): POST /agent/v1/cert, where a joined agent, with its
 * node's credential, gets a certificate for a key it made itself, signed
 * by the cluster's CA, for its own listener (the agent's TLS port).
 * Thread-safe: MHD threads. */
#ifndef GP_SERVER_NODE_CERT_H
#define GP_SERVER_NODE_CERT_H

#include "server/routes.h"

/* Days a node certificate is valid; the agent asks for a new one when
 * fewer than GP_TLS_RENEW_S seconds are left. */
#define GP_NODE_CERT_DAYS 90

extern const gp_route gp_node_cert_routes[];

#endif
