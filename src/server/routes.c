/* routes.c - the REST API's route table at work (see routes.h): finds the
 * row of a request, answers 403 / 404 / 405 / 413 the same way for every
 * path, parses the path's parameter once, and lists the table
 * (GET /admin/routes).
 *
 * Invariants: a pattern has at most one parameter; rows of the same path
 * sit next to each other in one module's rows and have the same "who"
 * (the 403 before a 405 comes from the first); a path is matched once per
 * request (gp_route_find, no allocation).
 */
#include "server/routes.h"

#include "base/buf.h"
#include "base/util.h"
#include "server/ca.h"
#include "server/history.h"
#include "server/node-cert.h"
#include "server/server-int.h"

#include <inttypes.h>
#include <jansson.h>
#include <string.h>

/* the row in force for /admin/routes itself */
static const gp_route self_routes[] = {
        {GP_GET, "/admin/routes", GP_ROUTE_ADMIN, gp_route_list, NULL, 0},
        {0, NULL, 0, NULL, NULL, 0},
};

static const gp_route *const tables[] = {gp_http_routes, gp_billing_routes, gp_tenants_routes, gp_monitor_routes,
                                         gp_nodes_routes, gp_ca_routes, gp_node_cert_routes, gp_coord_routes, gp_history_routes,
                                         self_routes};

static unsigned method_bit(const char *m) {
        if (!strcmp(m, "GET") || !strcmp(m, "HEAD"))
                return GP_GET;
        if (!strcmp(m, "POST"))
                return GP_POST;
        if (!strcmp(m, "PUT"))
                return GP_PUT;
        if (!strcmp(m, "DELETE"))
                return GP_DELETE;
        return 0;
}

static const char *const method_names[] = {"GET", "POST", "PUT", "DELETE"};

/* The parameter "{kind}" (kind of klen bytes) got seg (n bytes): into a,
 * or the error into m. */
static void param(const char *kind, size_t klen, const char *seg, size_t n, unsigned flags, gp_route_match *m) {
        gp_route_arg *a = &m->arg;
        bool is_task = klen == 4 && !memcmp(kind, "task", 4), is_array = klen == 5 && !memcmp(kind, "array", 5);
        if (is_task || is_array) {
                char num[24];
                if (n == 0 || n >= sizeof(num)) {
                        m->bad = 404;
                } else {
                        memcpy(num, seg, n);
                        num[n] = '\0';
                        if (gp_parse_i64(num, 1, INT64_MAX, &a->id) < 0)
                                m->bad = 404;
                }
                if (m->bad)
                        m->bad_msg = is_task ? "task ids are positive integers" : "array ids are positive integers";
                return;
        }
        if (klen == 6 && !memcmp(kind, "tenant", 6)) {
                bool empty_ok = n == 0 && (flags & GP_ROUTE_EMPTY_OK);
                if (!empty_ok && (n >= GP_TENANT_MAX || !gp_id_ok(seg, n))) {
                        m->bad = flags & GP_ROUTE_BAD_404 ? 404 : 400;
                        m->bad_msg = flags & GP_ROUTE_BAD_404 ? "no such tenant"
                                                              : "tenant ids are letters, digits, '-', '_' and '.'";
                        return;
                }
        } else if (n == 0 || n >= sizeof(a->name)) { /* {gpu} and the like: one segment, resolved by the handler */
                m->bad = 404;
                m->bad_msg = "no such path";
                return;
        }
        memcpy(a->name, seg, n);
        a->name[n] = '\0';
}

/* Does u (the url, or its part after /api[/v1]/) fit pattern p?  Fills
 * the parameter into m (m->bad on a bad one: the path still fits). */
static bool fits(const char *p, const char *u, unsigned flags, gp_route_match *m) {
        while (*p) {
                if (*p == '{') {
                        const char *end = strchr(p, '}');
                        size_t klen = (size_t)(end - p - 1);
                        if (klen && p[klen] == '*') { /* the rest of the path */
                                m->arg.rest = u;
                                u += strlen(u);
                        } else {
                                size_t n = strcspn(u, "/");
                                param(p + 1, klen, u, n, flags, m);
                                u += n;
                        }
                        p = end + 1;
                        continue;
                }
                if (*p != *u)
                        return false;
                p++;
                u++;
        }
        return *u == '\0';
}

void gp_route_find(const char *url, const char *method, gp_route_match *m) {
        memset(m, 0, sizeof(*m));
        m->arg.url = url;
        m->arg.method = method;
        /* every /api/v1/ path also answers under /api/ */
        const char *api = NULL;
        if (!strncmp(url, "/api/v1/", 8)) {
                api = url + 8;
        } else if (!strncmp(url, "/api/", 5)) {
                api = url + 5;
                m->arg.alias = true;
        }
        unsigned want = method_bit(method);
        for (size_t t = 0; t < GP_ARRAY_SIZE(tables); t++) {
                for (const gp_route *row = tables[t]; row->path; row++) {
                        if (m->any) { /* the path's other rows follow its first */
                                if (strcmp(row->path, m->any->path))
                                        return;
                        } else {
                                bool v1 = !strncmp(row->path, "/api/v1/", 8);
                                if (v1 ? !api || !fits(row->path + 8, api, row->flags, m)
                                       : !fits(row->path, url, row->flags, m)) {
                                        m->bad = 0; /* a parameter of a row that did not fit */
                                        m->bad_msg = NULL;
                                        continue;
                                }
                                m->any = row;
                                m->open = true;
                        }
                        m->allow |= row->methods;
                        m->open = m->open && (row->who == GP_ROUTE_OPEN || row->who == GP_ROUTE_AGENT);
                        if ((row->methods & want) && !m->row)
                                m->row = row;
                }
                if (m->any)
                        return;
        }
}

static int send_error(hreq *r, int status, const char *code, const char *msg) {
        return gp_http_send(r, status, gp_http_error_body(code, "%s", msg), 0);
}

/* "use GET or POST" and "GET, HEAD, POST" from the methods of m's path, in
 * the order of its rows. */
static void allow_texts(const gp_route_match *m, char *use, size_t ulen, char *allow, size_t alen) {
        const char *names[8];
        size_t n = 0;
        unsigned seen = 0;
        for (const gp_route *row = m->any; row->path && !strcmp(row->path, m->any->path); row++)
                for (size_t i = 0; i < GP_ARRAY_SIZE(method_names); i++)
                        if ((row->methods & (1u << i)) && !(seen & (1u << i)) && n < GP_ARRAY_SIZE(names)) {
                                seen |= 1u << i;
                                names[n++] = method_names[i];
                        }
        size_t uo = (size_t)snprintf(use, ulen, "use");
        size_t ao = 0;
        allow[0] = '\0';
        for (size_t i = 0; i < n; i++) {
                if (uo < ulen)
                        uo += (size_t)snprintf(use + uo, ulen - uo, "%s%s", i == 0 ? " " : i + 1 == n ? " or " : ", ",
                                               names[i]);
                if (ao < alen)
                        ao += (size_t)snprintf(allow + ao, alen - ao, "%s%s%s", i ? ", " : "", names[i],
                                               !strcmp(names[i], "GET") ? ", HEAD" : "");
        }
}

int gp_route_serve(hreq *r, const gp_route_match *m) {
        const char *url = m->arg.url;
        char msg[600];
        if (!m->any) {
                if (!strncmp(url, "/admin/", 7) && !r->admin) {
                        snprintf(msg, sizeof(msg), "%.500s needs an admin key", url);
                        return send_error(r, 403, "forbidden", msg);
                }
                snprintf(msg, sizeof(msg), "no such path: %.16s %.500s", m->arg.method, url);
                return send_error(r, 404, "not_found", msg);
        }
        const gp_route *row = m->row ? m->row : m->any;
        if (row->who == GP_ROUTE_ADMIN && !r->admin) {
                if (!row->deny)
                        snprintf(msg, sizeof(msg), "%.500s needs an admin key", url);
                return send_error(r, 403, "forbidden", row->deny ? row->deny : msg);
        }
        if (m->bad)
                return send_error(r, m->bad, m->bad == 400 ? "invalid_request" : "not_found", m->bad_msg);
        if (!m->row) {
                char allow[64];
                allow_texts(m, msg, sizeof(msg), allow, sizeof(allow));
                return gp_http_send_allow(r, 405, gp_http_error_body("method_not_allowed", "%s", msg), allow);
        }
        if (row->who != GP_ROUTE_OPEN && r->body_too_big) {
                snprintf(msg, sizeof(msg), "request body over %" PRId64 " bytes", r->d->cfg.max_body_bytes);
                return send_error(r, 413, "payload_too_large", msg);
        }
        return row->fn(r, &m->arg);
}

static const char *who_name(gp_route_who w) {
        return w == GP_ROUTE_OPEN ? "open" : w == GP_ROUTE_TENANT ? "tenant" : w == GP_ROUTE_AGENT ? "agent" : "admin";
}

int gp_route_list(hreq *r, const gp_route_arg *a) {
        (void)a;
        json_t *rows = json_array();
        for (size_t t = 0; t < GP_ARRAY_SIZE(tables); t++)
                for (const gp_route *row = tables[t]; row->path; row++)
                        for (size_t i = 0; i < GP_ARRAY_SIZE(method_names); i++) {
                                if (!(row->methods & (1u << i)))
                                        continue;
                                json_t *o = json_pack("{s:s,s:s,s:s,s:[]}", "method", method_names[i], "path",
                                                      row->path, "who", who_name(row->who), "aliases");
                                if (o && !strncmp(row->path, "/api/v1/", 8)) {
                                        char alias[256];
                                        snprintf(alias, sizeof(alias), "/api/%s", row->path + 8);
                                        json_array_append_new(json_object_get(o, "aliases"), json_string(alias));
                                }
                                if (o && (row->flags & GP_ROUTE_GATEWAY))
                                        json_object_set_new(o, "gateway", json_true());
                                json_array_append_new(rows, o);
                        }
        json_t *out = json_pack("{s:o,s:s}", "routes", rows, "backend", r->d->backend);
        char *s = out ? json_dumps(out, JSON_COMPACT) : NULL;
        json_decref(out);
        return gp_http_send(r, 200, s, 0);
}
