/* agent-tls.h - the agent's own listener (GET /health, /v1/status) over
 * TLS with a node certificate (issue 22; docs/security.md "Node
 * certificates").
 *
 * The listener: the agent's --listen address, served as the server serves
 * its port (base/tls-pump.h's acceptor): a TLS ClientHello gets TLS with
 * DATA_DIR/tls/node.crt and node.key (reloaded when they change, as the
 * server's files are), plaintext is served to loopback clients only
 * (every address with --insecure-listen-plaintext, logged), anything else
 * gets 400 tls_required.  Its address, for the join, is https://HOST:PORT.
 *
 * The certificate: the agent makes its own ECDSA P-256 key (it never leaves
 * the node) and, once joined, asks its server for a certificate for it
 * (POST /agent/v1/cert, with the node's credential, over the connection
 * the agent trusts: verified TLS or loopback).  It keeps DATA_DIR/tls/
 * node.key (0600) and node.crt; the certificate must be signed by the CA
 * the agent checks its server against (DATA_DIR/ca.crt; on a plaintext
 * loopback server, the CA the answer carries, kept in tls/node-ca.crt).  A
 * thread asks again after every join (a machine that joins again gets a
 * new certificate), when the certificate is missing, not signed by that CA,
 * does not name the node's host, or has fewer than 30 days left; it looks
 * every hour.  Until a certificate is issued, the listener serves a
 * self-signed placeholder that no client accepts.
 *
 * Thread-safety: gp_agent_tls_credential and gp_agent_tls_state may be
 * called from any thread; open, start and stop from the agent's main
 * thread only. */
#ifndef GP_AGENT_AGENT_TLS_H
#define GP_AGENT_AGENT_TLS_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "agent/trust.h"

typedef struct gp_agent_tls gp_agent_tls;

typedef struct gp_agent_tls_opts {
        const char *data_dir;              /* the agent's DATA_DIR */
        const char *listen;                /* "IPv4ADDR:PORT" */
        bool plaintext_any;                /* --insecure-listen-plaintext */
        MHD_AccessHandlerCallback handler; /* the status API */
        void *handler_cls;
} gp_agent_tls_opts;

/* Binds the listener and serves it (placeholder certificate until one is
 * issued).  The agent's address into address (https://HOST:PORT; HOST is
 * the host name for 0.0.0.0).  0, or -EINVAL (a listen address that is
 * not IPv4ADDR:PORT), -EADDRINUSE (cannot bind), other -errno with a
 * message in err. */
int gp_agent_tls_open(const gp_agent_tls_opts *o, gp_agent_tls **ret, char *address, size_t addrlen, char *err,
                      size_t errlen);

/* Starts the thread that keeps the node certificate (above): it asks the
 * servers urls[0..n_urls) (checked as trust says; both must outlive t) for
 * node's certificate.  0 or -errno. */
int gp_agent_tls_start(gp_agent_tls *t, const gp_agent_trust *trust, char *const *urls, int n_urls,
                       const char *node);

/* The node's credential (after a join, or loaded at start); joined: it was
 * just issued, so a new certificate is asked for at once. */
void gp_agent_tls_credential(gp_agent_tls *t, const char *cred, bool joined);

/* What /health says of the listener: "issued" (a certificate of the
 * cluster's CA), "pending" (none yet: the placeholder), and whether
 * plaintext is served off loopback. */
const char *gp_agent_tls_state(gp_agent_tls *t, bool *ret_plaintext_any);

/* Stops the thread and the listener.  Takes NULL. */
void gp_agent_tls_stop(gp_agent_tls *t);

#endif
