/* cors.c - the browser check (base/browser.h) on the libmicrohttpd path:
 * every request MHD serves passes gp_http_browser_gate once, before it is
 * authorized or routed (REST, /admin, tenants, billing, monitor and /v1
 * on connections MHD serves), and every answer to an origin listed in
 * server.allowed_origins carries its CORS headers (gp_http_cors).  The
 * gateway's own /v1 connections run the same check in front.c.
 */
#include "server/server-int.h"

#include "base/browser.h"
#include "base/log.h"
#include "gateway/gateway.h"

#include <string.h>

static const char *header(const hreq *r, const char *name) {
        return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

void gp_http_cors(const hreq *r, struct MHD_Response *resp) {
        if (!r->cors)
                return;
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->cors);
        MHD_add_response_header(resp, "Vary", "Origin");
}

static enum MHD_Result preflight(hreq *r) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp)
                return MHD_NO;
        gp_http_cors(r, resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", GP_CORS_ALLOW_METHODS);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", GP_CORS_ALLOW_HEADERS);
        MHD_add_response_header(resp, "Access-Control-Max-Age", GP_CORS_MAX_AGE);
        MHD_add_response_header(resp, "X-Gpupool-Backend", r->d->backend);
        enum MHD_Result ret = MHD_queue_response(r->conn, 204, resp);
        MHD_destroy_response(resp);
        return ret;
}

int gp_http_browser_gate(hreq *r, const char *url, const char *method, enum MHD_Result *ret) {
        const gp_config *cfg = &r->d->cfg;
        const char *clen = header(r, "Content-Length");
        gp_browser_req q = {
                .method = method,
                .content_type = header(r, "Content-Type"),
                .has_body = r->body.len > 0 || r->body_too_big || (clen && strcmp(clen, "0")) ||
                            header(r, "Transfer-Encoding"),
                .origin = header(r, "Origin"),
                .sec_fetch_site = header(r, "Sec-Fetch-Site"),
                .host = header(r, "Host"),
        };
        char msg[512];
        int st = gp_browser_check(&q, (const char (*)[GP_ORIGIN_MAX])cfg->allowed_origins,
                                  (size_t)cfg->n_allowed_origins, &r->cors, msg, sizeof(msg));
        if (!st)
                return 0;
        if (st == 204) {
                *ret = preflight(r);
                return -1;
        }
        gp_debug("http: %s %.200s refused (%d): %s", method, url, st, msg);
        const char *code = st == 415 ? "unsupported_media_type" : "cross_site_request";
        char *body = r->openai ? gp_gw_error_body(st == 415 ? "invalid_request_error" : "permission_error", code, msg)
                               : gp_http_error_body(code, "%s", msg);
        *ret = (enum MHD_Result)gp_http_send_type(r, st, body, NULL);
        return -1;
}
