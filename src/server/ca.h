/* ca.h - the cluster CA as agents and users see it (issue 22): the open
 * route GET /agent/v1/ca -> {"ca": "<PEM>", "ca_hash": "sha256:<hex>"},
 * and the pin a join token carries (gpj_SECRET.HEX).  The CA is the one
 * the server's listeners present (base/tls-keep.h), reloads included.
 * Thread-safe: any thread. */
#ifndef GP_SERVER_CA_H
#define GP_SERVER_CA_H

#include "server/routes.h"

/* The pin of the CA in force, "sha256:<64 hex>", into out.  0, or -ENOENT
 * when this process serves no TLS (out untouched). */
int gp_ca_pin(char out[72]);

extern const gp_route gp_ca_routes[];

#endif
