/* ca.c - GET /agent/v1/ca and the join tokens' CA pin (see ca.h).
 *
 * The CA certificate is public: the route is open (no key), answers from
 * memory (no store, no disk) and is bounded as every open route is, by
 * the server's connection limits (server.max_connections_per_ip).  An
 * agent fetches it once, without verification, and keeps it only if its
 * pin is its join token's (src/agent/trust.c). */
#include "server/ca.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/tls-keep.h"
#include "base/util.h"
#include "server/server-int.h"

int gp_ca_pin(char out[72]) {
        gp_tls_keep *k = gp_tls_listener();
        if (!k)
                return -ENOENT;
        gp_tls_creds *cr = gp_tls_keep_get(k);
        const char *h = cr ? gp_tls_creds_ca_hash(cr) : NULL;
        int rc = h && h[0] ? 0 : -ENOENT;
        if (rc == 0)
                gp_strlcpy(out, h, 72);
        gp_tls_creds_unref(cr);
        return rc;
}

static int h_ca(struct hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_tls_keep *k = gp_tls_listener();
        if (!k)
                return gp_http_send(r, 404, gp_http_error_body("not_found", "this server serves no TLS, so it has no CA"), 0);
        gp_tls_creds *cr = gp_tls_keep_get(k);
        size_t len = 0;
        const char *pem = cr ? gp_tls_creds_ca_pem(cr, &len) : NULL;
        const char *hash = cr ? gp_tls_creds_ca_hash(cr) : NULL;
        json_t *j = pem && hash ? json_pack("{s:s%,s:s}", "ca", pem, len, "ca_hash", hash) : NULL;
        gp_tls_creds_unref(cr);
        char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return gp_http_send(r, body ? 200 : 503, body, body ? 0 : 1);
}

const gp_route gp_ca_routes[] = {
        {GP_GET, "/agent/v1/ca", GP_ROUTE_OPEN, h_ca, NULL, 0},
        {0, NULL, 0, NULL, NULL, 0},
};
