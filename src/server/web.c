/* web.c - serves the web dashboard (web/ in the source tree), built into
 * the binary by mk/web.mk as $(BUILD)/gen/web-assets.inc.
 *
 * Every file is answered from its static bytes (never copied), with its
 * Content-Type, a strong ETag and "Cache-Control: no-cache": browsers keep
 * the files and revalidate them, and an If-None-Match that matches gets 304
 * with no body, so a new binary's page is picked up at once while an
 * unchanged one costs no transfer.  The page gets a Content-Security-Policy
 * that allows only its own origin: it loads nothing from the internet.
 * The files hold no data; the page asks for a key (their rows in
 * gp_monitor_routes are open).
 */
#include "server/monitor.h"

#include <string.h>

#include "server/server-int.h"

typedef struct web_file {
        const char *path;           /* URL path, "/index.html", "/static/app.js" */
        const char *ctype;
        const unsigned char *data;
        size_t len;
        const char *etag;           /* with its quotes */
} web_file;

#if defined(__has_include)
#if __has_include("web-assets.inc")
#include "web-assets.inc"
#define HAVE_WEB_ASSETS 1
#endif
#endif
#ifndef HAVE_WEB_ASSETS
static const web_file web_files[] = {{NULL, NULL, NULL, 0, NULL}};
static const size_t web_nfiles = 0;
#endif

#define CSP "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " \
            "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

static const web_file *find(const char *path) {
        // cppcheck-suppress unsignedLessThanZero ; web_nfiles is 0 in a build without the generated assets
        for (size_t i = 0; i < web_nfiles; i++)
                if (web_files[i].path && !strcmp(web_files[i].path, path))
                        return &web_files[i];
        return NULL;
}

bool gp_web_route(hreq *r, const char *url, bool head, enum MHD_Result *ret) {
        (void)head; /* MHD sends no body for HEAD itself */
        const char *path = url;
        if (!strcmp(url, "/"))
                path = "/index.html";
        else if (!strcmp(url, "/favicon.ico"))
                path = "/static/favicon.svg";
        const web_file *f = find(path);
        if (!f) {
                char *b = gp_http_error_body("not_found", "no such file: %s%s", url,
                                             web_nfiles ? "" : " (this binary was built without the dashboard)");
                *ret = gp_mon_send(r, 404, b, b ? strlen(b) : 0, "application/json", "no-store");
                return true;
        }
        const char *inm = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "If-None-Match");
        bool fresh = inm && strstr(inm, f->etag) != NULL;
        struct MHD_Response *resp = fresh ? MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT)
                                          : MHD_create_response_from_buffer(f->len, (void *)f->data,
                                                                            MHD_RESPMEM_PERSISTENT);
        if (!resp) {
                *ret = MHD_NO;
                return true;
        }
        MHD_add_response_header(resp, "ETag", f->etag);
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "X-Gpupool-Backend", r->d->backend);
        if (!fresh)
                MHD_add_response_header(resp, "Content-Type", f->ctype);
        if (!strcmp(path, "/index.html")) {
                MHD_add_response_header(resp, "Content-Security-Policy", CSP);
                MHD_add_response_header(resp, "X-Frame-Options", "DENY");
                MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
        }
        *ret = MHD_queue_response(r->conn, fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return true;
}
