/* routes.h - the REST API's one route table.
 *
 * Every path the server answers on its libmicrohttpd side is a row: the
 * method(s), the path pattern, who may call it and the handler.  Each
 * module exports its rows (gp_http_routes in http.c, gp_billing_routes,
 * gp_tenants_routes, gp_monitor_routes, gp_nodes_routes, gp_coord_routes,
 * terminated by a row with path NULL); routes.c walks them in that order.  Adding an endpoint is one row
 * plus one handler.
 *
 * Patterns: literal segments and one parameter per path, "{kind}", parsed
 * and checked once, before the handler runs:
 *   {task}, {array}  a positive int64 (a->id); else 404 not_found
 *   {tenant}         gp_id_ok, shorter than GP_TENANT_MAX (a->name); else
 *                    400 invalid_request (GP_ROUTE_BAD_404: 404 not_found)
 *   {gpu}            one segment of 1..127 bytes (a->name; the handler
 *                    resolves it); else 404 not_found
 *   {name*}          the rest of the path, '/'s included (a->rest)
 * A row whose path starts with /api/v1/ also answers under /api/ (the
 * short alias; a->alias says which was called).
 *
 * What the table does, in order, for a request past the browser gate:
 *   - the caller is identified (401 / 403 as before) unless every row of
 *     the path is open (gp_route_find's m->open);
 *   - an unknown path: 403 for a tenant key under /admin/, else 404;
 *   - an admin row and a tenant key: 403 forbidden;
 *   - a bad parameter: its error (above);
 *   - a method the path has no row for: 405 method_not_allowed with an
 *     Allow header and "use GET or POST" made from the rows' methods;
 *   - a body over server.max_body_bytes on a row that is not open: 413;
 *   - the row's handler.
 * "tenant" rows take any valid key; the handler scopes what a tenant key
 * sees to its own tenant.  GET rows answer HEAD too.  The /v1 rows of the
 * inference gateway are listed for GET /admin/routes (and the isolation
 * test); the gateway answers every /v1 path itself (http.c, before the
 * table).
 */
#ifndef GP_SERVER_ROUTES_H
#define GP_SERVER_ROUTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hreq;

typedef enum gp_route_who {
        GP_ROUTE_OPEN,   /* no key needed */
        GP_ROUTE_TENANT, /* any valid key; a tenant key is scoped to its own tenant */
        GP_ROUTE_ADMIN,  /* an admin key (or keyless loopback) */
        GP_ROUTE_AGENT,  /* no API key: the handler checks a join token or the node's credential
                            (nodes.c); bodies are capped as for keyed rows */
} gp_route_who;

/* methods (GET answers HEAD too) */
#define GP_GET 1u
#define GP_POST 2u
#define GP_PUT 4u
#define GP_DELETE 8u

/* flags */
#define GP_ROUTE_BAD_404 1u  /* a bad {tenant}: 404 "no such tenant" (ids do not leak), not 400 */
#define GP_ROUTE_EMPTY_OK 2u /* an empty {tenant} segment ("/tenants/") is allowed: a->name "" */
#define GP_ROUTE_GATEWAY 4u  /* a /v1 path: the gateway answers it (listed only) */

typedef struct gp_route_arg {
        int64_t id;          /* {task}, {array} */
        char name[128];      /* {tenant}, {gpu} */
        const char *rest;    /* {name*}: into url */
        bool alias;          /* called under /api/, not /api/v1/ */
        const char *url;
        const char *method;
} gp_route_arg;

/* A handler: MHD's result (MHD_YES / MHD_NO) as int.  Handler thread. */
typedef int (*gp_route_fn)(struct hreq *r, const gp_route_arg *a);

typedef struct gp_route {
        unsigned methods;    /* GP_GET | GP_POST ... */
        const char *path;    /* NULL ends a module's rows */
        gp_route_who who;
        gp_route_fn fn;
        const char *deny;    /* 403 message for a tenant key; NULL = "PATH needs an admin key" */
        unsigned flags;
} gp_route;

/* The modules' rows (each ends with a row whose path is NULL). */
extern const gp_route gp_http_routes[];
extern const gp_route gp_billing_routes[];
extern const gp_route gp_tenants_routes[];
extern const gp_route gp_monitor_routes[];
extern const gp_route gp_nodes_routes[];
extern const gp_route gp_coord_routes[];

typedef struct gp_route_match {
        const gp_route *row;  /* the row of the path and method; NULL = none */
        const gp_route *any;  /* the first row of the path; NULL = unknown path */
        unsigned allow;       /* the methods of the path */
        bool open;            /* every row of the path is open: no key is asked for */
        int bad;              /* the parameter's error status (400, 404), 0 = fine */
        const char *bad_msg;
        gp_route_arg arg;
} gp_route_match;

/* Look (url, method) up in the table: pure, no allocation.  Fills *m. */
void gp_route_find(const char *url, const char *method, gp_route_match *m);
/* Answer r by m (403 / 404 / 405 / 413 or the row's handler).  r's
 * caller is identified already (unless m->open).  Handler thread. */
int gp_route_serve(struct hreq *r, const gp_route_match *m);
/* GET /admin/routes: the table as JSON (the handler of its row). */
int gp_route_list(struct hreq *r, const gp_route_arg *a);

#endif
