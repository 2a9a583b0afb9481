/* hreq.c - the readers of a request that hreq.h gives route modules that
 * do not see its layout (server-int.h). */
#include "server/hreq.h"

#include <microhttpd.h>

#include "server/server-int.h"

struct gp_daemon *gp_http_daemon(const hreq *r) {
        return r->d;
}

const char *gp_http_who(const hreq *r) {
        return r->who;
}

const char *gp_http_body(const hreq *r, size_t *ret_len) {
        *ret_len = r->body.len;
        return r->body.data ? r->body.data : "";
}

const char *gp_http_header(const hreq *r, const char *name) {
        return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}
