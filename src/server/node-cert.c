/* node-cert.c - POST /agent/v1/cert (see node-cert.h).
 *
 * The agent sends {"node", "public_key"} with its node's credential; the
 * server answers a certificate for that key, signed with the CA key it
 * holds (DATA_DIR/tls/ca.key: generated certificates only), naming
 * localhost, 127.0.0.1, ::1 and the host of the node's address (what the
 * server and its gateway dial: gp_nodes_host).
 *
 * Invariants: the private key never reaches the server; a certificate is
 * issued only to a node's own credential, and only for names a node may
 * hold: the loopback names (only a process of that machine can listen
 * there) and its own host, but never a name the server's own certificate
 * carries unless the request comes from this machine's loopback (an agent
 * on the server's machine), so that a node's key cannot pass for the
 * server to agents (they check the server's name against the same CA).
 * Nothing is stored: a certificate is re-issued on request. */
#include "server/node-cert.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "base/tls-keep.h"
#include "base/tls.h"
#include "base/util.h"
#include "cluster/proto-cert.h"
#include "cluster/proto.h"
#include "server/nodes.h"
#include "server/server-int.h"

static int proto_error(hreq *r, int status, const char *msg) {
        return gp_http_send(r, status, gp_proto_error_render(msg), status == 503 ? 1 : 0);
}

/* Whether the connection's peer is a loopback address. */
static bool peer_loopback(struct MHD_Connection *c) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = ci ? ci->client_addr : NULL;
        if (sa && sa->sa_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
        if (sa && sa->sa_family == AF_INET6)
                return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr) ||
                       (IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)sa)->sin6_addr) &&
                        ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr[12] == 127);
        return false;
}

/* dir/name read whole into *ret: 0 or -errno. */
static int read_in(const char *dir, const char *name, char **ret, size_t *ret_len) {
        char p[PATH_MAX];
        if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, name) >= sizeof(p))
                return -ENAMETOOLONG;
        return gp_tls_read_pem(p, ret, ret_len);
}

static int h_cert(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_daemon *d = r->d;
        char cred[GP_PROTO_CRED_LEN + 1], err[256], host[GP_PROTO_ADDR_MAX] = "";
        const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (!h || strncmp(h, "Bearer ", 7) || strlen(h + 7) >= sizeof(cred) || !gp_proto_credential_ok(h + 7))
                return proto_error(r, 401, "the node's credential is required (Authorization: Bearer gpn_...)");
        gp_strlcpy(cred, h + 7, sizeof(cred));
        gp_proto_cert_req q = {0};
        int rc = gp_proto_cert_req_parse(r->body.data ? r->body.data : "", r->body.len, &q, err, sizeof(err));
        if (rc < 0) {
                explicit_bzero(cred, sizeof(cred));
                return proto_error(r, rc == -EINVAL ? 400 : 503, rc == -EINVAL ? err : "try again");
        }
        rc = gp_nodes_cred_host(d, q.node, cred, host, sizeof(host));
        explicit_bzero(cred, sizeof(cred));
        if (rc < 0) {
                gp_proto_cert_req_done(&q);
                return proto_error(r, 401, "bad credential for this node");
        }
        gp_tls_keep *k = gp_tls_listener();
        if (!k || !gp_tls_keep_generated(k)) {
                gp_proto_cert_req_done(&q);
                return proto_error(r, 409, "this server does not hold its CA's key (server.tls.cert is configured, or "
                                           "no TLS): give the node a certificate by hand (docs/security.md)");
        }
        char dir[PATH_MAX], *ca = NULL, *cakey = NULL, *own = NULL, *cert = NULL;
        size_t calen = 0, keylen = 0, ownlen = 0;
        snprintf(dir, sizeof(dir), "%.*s/tls", PATH_MAX - 8, d->cfg.data_dir);
        if ((rc = read_in(dir, "ca.crt", &ca, &calen)) < 0 || (rc = read_in(dir, "ca.key", &cakey, &keylen)) < 0 ||
            (rc = read_in(dir, "server.crt", &own, &ownlen)) < 0) {
                gp_error("node %s: cannot issue its certificate: %s/ca.crt, ca.key, server.crt: %s", q.node, dir,
                         strerror(-rc));
                rc = proto_error(r, 503, "the server cannot read its CA; try again");
                goto out;
        }
        /* [v6] from an address: the bare address */
        size_t hl = strlen(host);
        if (hl > 2 && host[0] == '[' && host[hl - 1] == ']') {
                memmove(host, host + 1, hl - 2);
                host[hl - 2] = '\0';
        }
        const char *names[4] = {"localhost", "127.0.0.1", "::1"};
        size_t n = 3;
        bool left_out = false;
        if (host[0] && strcmp(host, "localhost") && strcmp(host, "127.0.0.1") && strcmp(host, "::1")) {
                if (gp_tls_cert_check(own, ownlen, ca, calen, host, NULL) == 0 && !peer_loopback(r->conn))
                        left_out = true; /* the server's own name: only for an agent on this machine */
                else
                        names[n++] = host;
        }
        char cn[GP_NODE_MAX + 16];
        snprintf(cn, sizeof(cn), "gpupool node %s", q.node);
        rc = gp_tls_sign_pubkey(ca, cakey, q.public_key, strlen(q.public_key), cn, names, n, GP_NODE_CERT_DAYS, &cert);
        if (rc < 0) {
                rc = rc == -GP_EPARSE ? proto_error(r, 400, "\"public_key\" must be an ECDSA P-256 public key")
                                      : proto_error(r, 503, "cannot sign the certificate; try again");
                goto out;
        }
        gp_proto_cert_answer ans = {.cert = cert, .ca = ca, .n_names = (int)n};
        time_t na = 0;
        gp_tls_cert_check(cert, strlen(cert), ca, calen, NULL, &na);
        ans.not_after_ms = (int64_t)na * 1000;
        for (size_t i = 0; i < n; i++)
                gp_strlcpy(ans.names[i], names[i], sizeof(ans.names[i]));
        char *body = NULL;
        if (gp_proto_cert_answer_render(&ans, &body) < 0) {
                rc = proto_error(r, 503, "try again");
                goto out;
        }
        if (left_out)
                gp_warn("node %s: its certificate does not name %s, a name of this server's own certificate (a node "
                        "off this machine may not hold it): give the agent --listen with its own address",
                        q.node, host);
        gp_info("node %s: certificate issued for %s%s, valid %d days", q.node, n > 3 ? names[3] : "loopback",
                n > 3 ? " and loopback" : " only", GP_NODE_CERT_DAYS);
        rc = gp_http_send(r, 200, body, 0);
out:
        if (cakey)
                explicit_bzero(cakey, keylen);
        free(cakey);
        free(ca);
        free(own);
        free(cert);
        gp_proto_cert_req_done(&q);
        return rc;
}

const gp_route gp_node_cert_routes[] = {
        {GP_POST, "/agent/v1/cert", GP_ROUTE_AGENT, h_cert, NULL, 0},
        {0, NULL, 0, NULL, NULL, 0},
};
