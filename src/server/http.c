/* http.c - the HTTP API on libmicrohttpd: routing, auth, reads, and
 * handing writes to the loop thread (see server-int.h).
 *
 * MHD facts this file relies on (../shared/notes/http-stack.md): answer on
 * the handler's second call, never the first; a suspended connection is
 * resumed exactly once by whoever owns it (the loop thread for writes and
 * long polls, the follower tick for log streams); all parked requests are
 * resumed before MHD_stop_daemon.  Bodies are capped at max_body_bytes
 * (413), connections at max_connections, idle connections time out.
 */
#include "server/server-int.h"

#include "base/browser.h"
#include "base/err.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/url.h"
#include "base/util.h"
#include "server/billing.h"
#include "server/commit.h"
#include "server/disk.h"
#include "server/forward.h"
#include "server/idem.h"
#include "gateway/gateway.h"
#include "server/monitor.h"
#include "server/submit.h"
#include "server/nodes.h"
#include "server/mps.h"
#include "server/nodes-tele.h"
#include "server/estimates.h"
#include "server/peer.h"
#include "server/routes.h"
#include "server/runlog.h"
#include "server/tenants.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define JSON_TYPE "application/json"

/* ------------------------------------------------------------------ */
/* answers                                                             */

char *gp_http_error_body(const char *code, const char *fmt, ...) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        json_t *e = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
        char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
        return s;
}

/* Queue body (malloc'd, taken) as r's answer as it is; allow, when set, is
 * the value of an Allow header (a 405, which shows no state). */
static enum MHD_Result send_answer(hreq *r, int status, char *body, const char *ctype, int retry_after,
                                   const char *allow) {
        if (!body)
                body = gp_http_error_body("unavailable", "out of memory");
        if (!body)
                return MHD_NO;
        struct MHD_Response *resp =
                MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", ctype ? ctype : JSON_TYPE);
        MHD_add_response_header(resp, "X-Gpupool-Backend", r->d->backend);
        gp_http_cors(r, resp);
        if (retry_after > 0) {
                char ra[16];
                snprintf(ra, sizeof(ra), "%d", retry_after);
                MHD_add_response_header(resp, "Retry-After", ra);
        }
        if (allow)
                MHD_add_response_header(resp, "Allow", allow);
        if (r->idem_replayed)
                MHD_add_response_header(resp, "Idempotent-Replayed", "true");
        /* its answer is decided (a kept one is stored by now): a repeat may
         * come the moment the client reads it, before MHD completes r */
        gp_idem_end(r);
        enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
        MHD_destroy_response(resp);
        return ret;
}

/* Send an answer as it is: the loop's answers come here once durable. */
static enum MHD_Result send_now(hreq *r, int status, char *body, const char *ctype, int retry_after) {
        return send_answer(r, status, body, ctype, retry_after, NULL);
}

/* Every answer a handler makes from what it read: sent once all it could
 * have seen is durable (commit.h), or 503 when the disk takes too long. */
static enum MHD_Result send_body(hreq *r, int status, char *body, const char *ctype, int retry_after) {
        if (gp_commit_wait(r->d) < 0) {
                free(body);
                return send_now(r, 503,
                                gp_http_error_body("unavailable", "the store has not confirmed recent changes "
                                                                  "in time; try again"),
                                JSON_TYPE, 5);
        }
        return send_now(r, status, body, ctype, retry_after);
}

int gp_http_send(hreq *r, int status, char *body, int retry_after) {
        return send_body(r, status, body, JSON_TYPE, retry_after);
}

int gp_http_send_allow(hreq *r, int status, char *body, const char *allow) {
        return send_answer(r, status, body, JSON_TYPE, 0, allow);
}

int gp_http_send_type(hreq *r, int status, char *body, const char *ctype) {
        return send_body(r, status, body, ctype ? ctype : JSON_TYPE, 0);
}

static enum MHD_Result send_json(hreq *r, int status, json_t *j) {
        if (j && json_is_object(j) && !json_object_get(j, "backend"))
                json_object_set_new(j, "backend", json_string(r->d->backend));
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return send_body(r, status, s, JSON_TYPE, 0);
}

static enum MHD_Result send_error(hreq *r, int status, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_error(hreq *r, int status, const char *code, const char *fmt, ...) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (r->openai) { /* /v1/: the shape OpenAI clients parse */
                const char *type = status == 401   ? "invalid_request_error"
                                   : status == 403 ? "permission_error"
                                   : status >= 500 ? "server_error"
                                                   : "invalid_request_error";
                if (status == 401)
                        code = "invalid_api_key";
                return send_body(r, status, gp_gw_error_body(type, code, msg), JSON_TYPE, 0);
        }
        return send_body(r, status, gp_http_error_body(code, "%s", msg), JSON_TYPE, 0);
}

void gp_http_answer(hreq *r, int status, char *body, int retry_after) {
        r->status = status;
        r->resp = body;
        r->retry_after = retry_after;
        r->answered = true;
        gp_http_wake(r);
}

void gp_http_wake(hreq *r) {
        if (r->suspended) {
                r->suspended = false;
                MHD_resume_connection(r->conn);
                gp_gw_kick(r->d->gw, r->conn); /* a loop thread drives MHD: have it look now */
        }
}

static void park(hreq *r) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
}

void gp_http_park(hreq *r) {
        park(r);
}

/* ------------------------------------------------------------------ */
/* small parsers                                                       */

static int query_i64(hreq *r, const char *key, int64_t min, int64_t max, int64_t dflt, int64_t *ret) {
        const char *v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
        if (!v) {
                *ret = dflt;
                return 0;
        }
        return gp_parse_i64(v, min, max, ret);
}

static bool addr_loopback(const struct sockaddr *sa) {
        if (!sa)
                return false;
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        }
        if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
                        return true;
                if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
                        return in6->sin6_addr.s6_addr[12] == 127;
        }
        return false;
}

static enum MHD_Result count_fwd_for(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
        (void)kind;
        (void)value;
        if (!strcasecmp(key, GP_FWD_FOR))
                ++*(int *)cls;
        return MHD_YES;
}

/* A loopback peer, and (a request a follower forwarded) a loopback
 * client behind it (forward.h): one X-Gpupool-Forwarded-For line (a
 * follower sends one) naming only loopback addresses. */
static bool is_loopback(struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!ci || !addr_loopback(ci->client_addr))
                return false;
        int lines = 0;
        MHD_get_connection_values(conn, MHD_HEADER_KIND, count_fwd_for, &lines);
        return lines <= 1 && gp_fwd_loopback(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, GP_FWD_FOR));
}

/* Who is asking, from the Authorization header's value (NULL = none),
 * the Host header's (NULL = none) and whether the client is on loopback:
 * *admin, tenant and who (a label for the audit log).  0, or the status
 * to refuse with (401, 403) and msg. */
static int identify(gp_daemon *d, const char *h, const char *host, bool loopback, bool *admin, char *tenant,
                    size_t tlen, char *who, size_t wlen, const char **msg) {
        pthread_mutex_lock(&d->lock);
        bool required = gp_tenants_auth_required(d->tenants);
        pthread_mutex_unlock(&d->lock);
        if (!required) {
                /* DNS rebinding (base/browser.h): a page of another site re-pointed at
                 * 127.0.0.1 names its own domain in Host; it must not be admin */
                if (loopback && !gp_browser_host_local(host, d->hostname,
                                                       (const char (*)[GP_ORIGIN_MAX])d->cfg.allowed_origins,
                                                       (size_t)d->cfg.n_allowed_origins)) {
                        *msg = "no API keys are configured, so Host must name this server by IP address, "
                               "localhost or its host name (another domain may be a web page: DNS "
                               "rebinding); configure keys or server.allowed_origins";
                        return 403;
                }
                if (loopback) {
                        *admin = true;
                        gp_strlcpy(who, "loopback (no keys configured)", wlen);
                        return 0;
                }
                *msg = "no API keys are configured, so only loopback clients are served";
                return 403;
        }
        if (!h || strncmp(h, "Bearer ", 7) != 0 || strlen(h + 7) == 0 || strlen(h + 7) > 512) {
                *msg = "an API key is required (Authorization: Bearer KEY)";
                return 401;
        }
        pthread_mutex_lock(&d->lock);
        int rc = gp_tenants_authenticate(d->tenants, h + 7, admin, tenant, tlen);
        pthread_mutex_unlock(&d->lock);
        if (rc < 0) {
                *msg = "unknown API key";
                return 401;
        }
        char hash[72];
        gp_sha256_key_hash(h + 7, hash);
        snprintf(who, wlen, "%s key %.15s...", *admin ? "admin" : tenant, hash);
        return 0;
}

/* Who is asking: sets r->admin / r->tenant / r->who.  With no key at all
 * (none configured or made) loopback clients are served as admin (the
 * lab workstation case); otherwise a key is needed, and it maps to admin
 * or to one tenant.  0 = allowed; else the answer was queued. */
static int authorize(hreq *r, enum MHD_Result *ret) {
        const char *msg = NULL;
        const char *key = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
        bool unix_sock = gp_peer_conn_is_unix(r->conn);
        int st = unix_sock && !key ? 0 /* the kernel names the caller (peer.h) */
                 : identify(r->d, key, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Host"),
                            unix_sock || is_loopback(r->conn), &r->admin, r->tenant, sizeof(r->tenant), r->who,
                            sizeof(r->who), &msg);
        if (!st)
                st = gp_http_identify_user(r, unix_sock, key != NULL, &msg);
        if (!st)
                return 0;
        *ret = send_error(r, st, st == 401 ? "unauthorized" : "forbidden", "%s", msg);
        return -1;
}

/* May this request see task t?  Admin sees all; a tenant key its own; a
 * local user who is not an admin its own (peer.h). */
static bool may_see(const hreq *r, const char *tenant, const char *user) {
        return r->admin || (!strcmp(r->tenant, tenant) && (!r->own_only || !strcmp(r->user, user)));
}

/* ------------------------------------------------------------------ */
/* reads                                                               */

json_t *gp_http_gpu_json(gp_daemon *d, uint32_t g) {
        gp_sched_gpu_view v;
        if (gp_sched_gpu_get(d->sched, g, &v) < 0)
                return NULL;
        json_t *o = json_object();
        char id[GP_NODE_MAX + 16];
        snprintf(id, sizeof(id), "%s:%d", v.node, v.index);
        json_object_set_new(o, "id", json_string(id));
        json_object_set_new(o, "node", json_string(v.node));
        json_object_set_new(o, "index", json_integer(v.index));
        json_object_set_new(o, "uuid", json_string(v.uuid));
        json_object_set_new(o, "name", json_string(v.name));
        const char *prof = gp_gpu_mig_profile(v.uuid, v.name); /* a MIG instance's, else null */
        json_object_set_new(o, "profile", prof ? json_string(prof) : json_null());
        json_object_set_new(o, "memory_total_mb", json_integer(v.memory_total_mb));
        json_object_set_new(o, "memory_usable_mb", json_integer(v.memory_usable_mb));
        json_object_set_new(o, "memory_allocated_mb", json_integer(v.memory_allocated_mb));
        const gp_gpu_info *info = gp_daemon_gpu_info(d, g); /* the server's own or an agent's */
        json_object_set_new(o, "memory_foreign_mb", /* known where the driver lists processes */
                            info && info->procs_known ? json_integer(v.memory_foreign_mb) : json_null());
        gp_gpu_readings_json(info, o);
        json_object_set_new(o, "healthy", json_boolean(v.healthy));
        json_object_set_new(o, "health_reason", json_string(info ? info->health_reason : ""));
        json_object_set_new(o, "drained", json_boolean(v.drained));
        json_object_set_new(o, "reserved", json_boolean(v.reserved));
        json_object_set_new(o, "exclusive", json_boolean(v.exclusive_held));
        int64_t ids[64];
        int n = gp_sched_gpu_tasks(d->sched, g, ids, 64);
        json_t *ta = json_array();
        for (int i = 0; i < n && i < 64; i++)
                json_array_append_new(ta, json_integer(ids[i]));
        json_object_set_new(o, "tasks", ta);
        const char *models[16];
        n = gp_sched_gpu_models(d->sched, g, models, 16);
        json_t *ma = json_array();
        for (int i = 0; i < n && i < 16; i++)
                json_array_append_new(ma, json_string(models[i]));
        json_object_set_new(o, "models", ma);
        json_object_set_new(o, "backend", json_string(gp_nodes_backend(d, v.node))); /* an agent's sim says so */
        json_object_set_new(o, "isolation", json_string(gp_tele_gpu_isolation(d, g)));
        gp_mps_gpu_json(d, g, o); /* its MPS control daemon, when sharing is mps */
        return o;
}

/* The backends of a list of GPUs, for its "backend": one when all are
 * alike ("sim"), else each once in order ("none+sim", "nvml+sim"): a list
 * with any simulated GPU says "sim" in it.  The server's own with none. */
static void backends_of(const json_t *gpus, const char *own, char *buf, size_t size) {
        size_t i;
        const json_t *g;
        buf[0] = '\0';
        json_array_foreach(gpus, i, g)
                gp_nodes_backends_add(buf, size, json_string_value(json_object_get(g, "backend")));
        if (!buf[0])
                gp_strlcpy(buf, own, size);
}

static enum MHD_Result get_gpus(hreq *r) {
        gp_daemon *d = r->d;
        json_t *a = json_array();
        pthread_mutex_lock(&d->lock);
        for (uint32_t g = 0; g < gp_sched_gpu_count(d->sched); g++) {
                gp_sched_gpu_view gv;
                if (gp_sched_gpu_get(d->sched, g, &gv) < 0 || gv.removed)
                        continue; /* its node left the pool */
                json_t *o = gp_http_gpu_json(d, g);
                if (o && !r->admin) {
                        /* a tenant sees which GPUs are busy, but only its own task ids */
                        json_t *ids = json_object_get(o, "tasks"), *own = json_array(), *v;
                        size_t i;
                        json_array_foreach(ids, i, v) {
                                gp_task *t = gp_i64map_get(&d->tasks, json_integer_value(v));
                                if (t && may_see(r, t->tenant, t->user))
                                        json_array_append(own, v);
                        }
                        json_object_set_new(o, "tasks", own);
                }
                json_array_append_new(a, o);
        }
        pthread_mutex_unlock(&d->lock);
        char backends[64];
        backends_of(a, d->backend, backends, sizeof(backends));
        return send_json(r, 200, json_pack("{s:o,s:s}", "gpus", a, "backend", backends));
}

static enum MHD_Result get_queue(hreq *r) {
        gp_daemon *d = r->d;
        int64_t limit;
        if (query_i64(r, "limit", 1, 10000, 100, &limit) < 0)
                return send_error(r, 400, "invalid_request", "limit: must be an integer 1..10000");
        int64_t *ids = malloc(sizeof(int64_t) * (size_t)limit);
        if (!ids)
                return send_error(r, 503, "unavailable", "out of memory");
        json_t *a = json_array();
        int64_t now = gp_now_ms();
        /* expected starts of the first GP_EST_AHEAD, in the same order (estimates.h) */
        int64_t *eids = malloc(GP_EST_AHEAD * sizeof(*eids)), *starts = malloc(GP_EST_AHEAD * sizeof(*starts));
        double *confs = malloc(GP_EST_AHEAD * sizeof(*confs));
        size_t nest = 0;
        pthread_mutex_lock(&d->lock);
        size_t total = gp_sched_queue_order(d->sched, ids, (size_t)limit);
        size_t n = total < (size_t)limit ? total : (size_t)limit;
        if (eids && starts && confs && gp_est_starts(d, now, eids, starts, confs, &nest) < 0)
                nest = 0;
        for (size_t i = 0; i < n; i++) {
                gp_task *t = gp_i64map_get(&d->tasks, ids[i]);
                if (!t || !may_see(r, t->tenant, t->user))
                        continue; /* positions stay global: others' tasks are counted, not shown */
                char reason[GP_REASON_MAX], sub[40];
                gp_sched_reason why;
                char core[GP_REASON_MAX];
                gp_daemon_queued_reason(d, t, reason, sizeof(reason), core, sizeof(core), &why); /* as the task says it */
                gp_daemon_reason_hide(d, t->tenant, reason, sizeof(reason));
                gp_time_format(t->submitted_ms, sub, sizeof(sub));
                json_t *e = json_pack("{s:I,s:s,s:s,s:i,s:i,s:I,s:I,s:s,s:s,s:I}", "id", (json_int_t)t->id,
                                      "tenant_id", t->tenant, "name", t->name, "priority", t->priority,
                                      "gpu_request", t->gpu_request, "memory_mb", (json_int_t)t->memory_mb,
                                      "queue_position", (json_int_t)(i + 1), "reason", reason, "submitted_at", sub,
                                      "wait_s", (json_int_t)((now - t->submitted_ms) / 1000));
                if (e && t->array_id > 0) { /* an array element: as in the task object */
                        json_object_set_new(e, "array_id", json_integer(t->array_id));
                        json_object_set_new(e, "array_index", json_integer(t->array_index));
                }
                json_t *rd = gp_daemon_reason_detail(d, t->tenant, &why, core, reason);
                if (e && rd)
                        json_object_set_new(e, "reason_detail", rd);
                else
                        json_decref(rd);
                if (e && i < nest && eids[i] == t->id) {
                        char at[40];
                        gp_time_format(starts[i], at, sizeof(at));
                        json_object_set_new(e, "expected_start_at", json_string(at));
                        json_object_set_new(e, "expected_start_confidence", json_real((double)(int)(confs[i] * 100) / 100));
                }
                json_array_append_new(a, e);
        }
        pthread_mutex_unlock(&d->lock);
        free(ids);
        free(eids);
        free(starts);
        free(confs);
        return send_json(r, 200, json_pack("{s:I,s:o}", "total", (json_int_t)total, "tasks", a));
}

typedef struct list_ctx {
        gp_daemon *d;
        gp_buf *out;
        int64_t last;
        int count;
        /* array listings only (the store pages by array alone): */
        const char *tenant;        /* NULL = any */
        const char *user;          /* NULL = any (every listing pages through the rows with it) */
        int state;                 /* -1 = any */
        bool active;               /* queued or running only */
        int rows, limit;           /* rows seen in this page; stop (1) at limit answers */
        int64_t last_row;
} list_ctx;

static int list_cb(const gp_task *st, void *ud) {
        list_ctx *c = ud;
        gp_task *mem = gp_i64map_get(&c->d->tasks, st->id);
        if (c->limit) {
                c->rows++;
                c->last_row = st->id;
                const gp_task *t = mem ? mem : st;
                if ((c->tenant && strcmp(t->tenant, c->tenant) != 0) || (c->user && strcmp(t->user, c->user) != 0) ||
                    (c->state >= 0 && (int)t->state != c->state) ||
                    (c->active && gp_task_state_is_final(t->state)))
                        return 0;
                if (c->count >= c->limit)
                        return 1;
        }
        int r = c->count ? gp_buf_puts(c->out, ",") : 0;
        r = r ? r : gp_daemon_task_write(c->d, mem ? mem : st, c->out);
        c->last = st->id;
        c->count++;
        return r;
}

static int cmp_desc(const void *a, const void *b) {
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
        return (x < y) - (x > y);
}

static enum MHD_Result list_tasks(hreq *r) {
        gp_daemon *d = r->d;
        int64_t limit, after;
        if (query_i64(r, "limit", 1, 1000, 100, &limit) < 0)
                return send_error(r, 400, "invalid_request", "limit: must be an integer 1..1000");
        if (query_i64(r, "after", 1, INT64_MAX, 0, &after) < 0)
                return send_error(r, 400, "invalid_request", "after: must be a task id");
        int64_t array_id;
        if (query_i64(r, "array", 1, INT64_MAX, 0, &array_id) < 0)
                return send_error(r, 400, "invalid_request", "array: must be an array id");
        const char *state = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "state");
        const char *tenant = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "tenant");
        if (tenant && (strlen(tenant) >= GP_TENANT_MAX || !gp_id_ok(tenant, strlen(tenant))))
                return send_error(r, 400, "invalid_request", "tenant: bad tenant id");
        if (!r->admin)
                tenant = r->tenant; /* a tenant key lists its own tasks only */
        const char *user = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "user");
        if (user && !gp_user_name_ok(user, strlen(user)))
                return send_error(r, 400, "invalid_request", "user: bad Unix user name");
        if (r->own_only && user && strcmp(user, r->user) != 0)
                return send_error(r, 403, "forbidden", "user %s lists its own tasks only (admins: root, or "
                                  "auth.admin_group)", r->user);
        if (r->own_only)
                user = r->user; /* a local user lists its own tasks only */
        gp_task_state st = GP_TASK_QUEUED;
        bool active = state && !strcmp(state, "active");
        if (state && !active && gp_task_state_parse(state, &st) < 0)
                return send_error(r, 400, "invalid_request",
                                  "state: one of queued, running, succeeded, failed, cancelled, timeout, lost, active");
        gp_buf out;
        gp_buf_init(&out, 0);
        list_ctx c = {.d = d, .out = &out, .tenant = tenant, .user = user, .state = state && !active ? (int)st : -1,
                      .active = active};
        int rc = gp_buf_puts(&out, "{\"tasks\":[");
        pthread_mutex_lock(&d->lock);
        if (array_id > 0 || (user && !active)) {
                /* one array's elements, or one user's tasks (the filters pick the rows) */
                gp_task_filter f = {.state = -1, .before_id = after, .limit = 1000, .array_id = array_id};
                pthread_mutex_lock(&d->rs_lock);
                while (rc == 0 && c.count < limit) {
                        c.rows = 0;
                        c.limit = (int)limit;
                        rc = gp_store_task_list(d->rs, &f, list_cb, &c);
                        if (rc == 1)
                                rc = 0; /* page filled */
                        if (c.rows < f.limit || c.count >= limit)
                                break;
                        f.before_id = c.last_row;
                }
                pthread_mutex_unlock(&d->rs_lock);
        } else if (active) {
                size_t n = d->tasks.live, k = 0, pos = 0;
                int64_t *ids = malloc(sizeof(int64_t) * (n ? n : 1));
                gp_task *t;
                while (ids && (t = gp_i64map_next(&d->tasks, &pos, NULL)))
                        if ((!after || t->id < after) && (!tenant || !strcmp(t->tenant, tenant)) &&
                            (!user || !strcmp(t->user, user)))
                                ids[k++] = t->id;
                if (ids) {
                        qsort(ids, k, sizeof(int64_t), cmp_desc);
                        for (size_t i = 0; rc == 0 && i < k && c.count < limit; i++)
                                rc = list_cb(gp_i64map_get(&d->tasks, ids[i]), &c);
                } else {
                        rc = -ENOMEM;
                }
                free(ids);
        } else {
                gp_task_filter f = {.state = state ? (int)st : -1, .tenant = tenant, .before_id = after,
                                    .limit = (int)limit};
                pthread_mutex_lock(&d->rs_lock);
                if (rc == 0)
                        rc = gp_store_task_list(d->rs, &f, list_cb, &c);
                pthread_mutex_unlock(&d->rs_lock);
        }
        pthread_mutex_unlock(&d->lock);
        if (rc == 0 && c.count == limit)
                rc = gp_buf_printf(&out, "],\"next_after\":%" PRId64, c.last);
        else if (rc == 0)
                rc = gp_buf_puts(&out, "],\"next_after\":null");
        if (rc == 0)
                rc = gp_buf_printf(&out, ",\"backend\":\"%s\"}", d->backend);
        if (rc < 0) {
                gp_buf_done(&out);
                return send_error(r, 503, "unavailable", "cannot list tasks: %s", gp_strerror(rc));
        }
        return send_body(r, 200, gp_buf_steal(&out), JSON_TYPE, 0);
}

static enum MHD_Result get_task(hreq *r, int64_t id) {
        gp_daemon *d = r->d;
        int64_t wait;
        if (query_i64(r, "wait", 0, 60, 0, &wait) < 0)
                return send_error(r, 400, "invalid_request", "wait: must be 0..60 seconds");
        pthread_mutex_lock(&d->lock);
        gp_task *t = gp_i64map_get(&d->tasks, id);
        if (t && !may_see(r, t->tenant, t->user)) {
                pthread_mutex_unlock(&d->lock);
                return send_error(r, 404, "not_found", "no task %" PRId64, id); /* 404, not 403: ids do not leak */
        }
        if (t && t->state == GP_TASK_QUEUED && wait > 0 && r->wait_id == 0 &&
            !__atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE)) {
                /* long poll: the loop wakes us when it leaves the queue */
                r->wait_id = id;
                r->wait_until_ms = gp_now_ms() + wait * 1000;
                gp_daemon_waiter_add(d, r);
                park(r);
                pthread_mutex_unlock(&d->lock);
                return MHD_YES;
        }
        gp_buf out;
        gp_buf_init(&out, 0);
        int rc = 0;
        if (t) {
                rc = gp_daemon_task_write(d, t, &out);
        } else {
                gp_task ft;
                rc = gp_daemon_task_lookup(d, id, &ft);
                if (rc == 0) {
                        rc = may_see(r, ft.tenant, ft.user) ? gp_daemon_task_write(d, &ft, &out) : -ENOENT;
                        gp_task_done(&ft);
                }
        }
        pthread_mutex_unlock(&d->lock);
        if (rc < 0) {
                gp_buf_done(&out);
                if (rc == -ENOENT)
                        return send_error(r, 404, "not_found", "no task %" PRId64, id);
                return send_error(r, 503, "unavailable", "cannot read task %" PRId64 ": %s", id, gp_strerror(rc));
        }
        return send_body(r, 200, gp_buf_steal(&out), JSON_TYPE, 0);
}

/* ---- logs ---- */

static ssize_t log_reader(void *cls, uint64_t pos, char *buf, size_t max) {
        return gp_runlog_follow_read(cls, pos, buf, max);
}

static enum MHD_Result get_logs(hreq *r, int64_t id) {
        gp_daemon *d = r->d;
        int64_t offset, follow, run, rank;
        if (query_i64(r, "offset", 0, INT64_MAX, 0, &offset) < 0)
                return send_error(r, 400, "invalid_request", "offset: must be a byte offset >= 0");
        if (query_i64(r, "follow", 0, 1, 0, &follow) < 0)
                return send_error(r, 400, "invalid_request", "follow: must be 0 or 1");
        if (query_i64(r, "run", 1, INT64_MAX, 0, &run) < 0)
                return send_error(r, 400, "invalid_request", "run: must be a run number >= 1");
        if (query_i64(r, "rank", 0, GP_MAX_GPUS - 1, 0, &rank) < 0)
                return send_error(r, 400, "invalid_request", "rank: must be a rank >= 0");
        gp_task t;
        pthread_mutex_lock(&d->lock);
        int rc = gp_daemon_task_lookup(d, id, &t);
        pthread_mutex_unlock(&d->lock);
        if (rc == -ENOENT)
                return send_error(r, 404, "not_found", "no task %" PRId64, id);
        if (rc < 0)
                return send_error(r, 503, "unavailable", "store: %s", gp_strerror(rc));
        bool lease = t.is_lease, mine = may_see(r, t.tenant, t.user);
        char why[160];
        int64_t last = gp_runlog_last_run(&t);
        int picked = lease || !mine ? 0 : gp_runlog_pick(d, &t, run, rank, &run, why, sizeof(why));
        gp_task_done(&t);
        if (!mine)
                return send_error(r, 404, "not_found", "no task %" PRId64, id);
        if (lease)
                return send_error(r, 409, "conflict", "task %" PRId64 " is a lease; it has no log", id);
        if (picked < 0)
                return send_error(r, 400, "invalid_request", "%s", why);
        struct MHD_Response *resp;
        if (follow) {
                if (gp_runlog_follow_init(r, id, run, (int)rank, offset) < 0)
                        return send_error(r, 503, "unavailable", "out of memory");
                resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, log_reader, r, NULL);
        } else {
                char path[PATH_MAX];
                int fd = gp_runlog_path(d, id, run, (int)rank, path, sizeof(path)) == 0
                                 ? open(path, O_RDONLY | O_CLOEXEC)
                                 : -1;
                struct stat stt;
                if (fd < 0 || fstat(fd, &stt) < 0 || offset >= stt.st_size) {
                        if (fd >= 0)
                                close(fd);
                        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
                } else {
                        resp = MHD_create_response_from_fd_at_offset64((uint64_t)(stt.st_size - offset), fd,
                                                                       (uint64_t)offset);
                }
        }
        if (!resp)
                return send_error(r, 503, "unavailable", "cannot read the log");
        if (gp_commit_wait(d) < 0) {
                MHD_destroy_response(resp);
                return send_error(r, 503, "unavailable", "the store has not confirmed recent changes in time");
        }
        MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
        MHD_add_response_header(resp, "X-Gpupool-Backend", d->backend);
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        char hv[24];
        snprintf(hv, sizeof(hv), "%" PRId64, run);
        MHD_add_response_header(resp, "X-Gpupool-Run", hv); /* the run sent (first, when following) */
        snprintf(hv, sizeof(hv), "%" PRId64, last);
        MHD_add_response_header(resp, "X-Gpupool-Runs", hv); /* runs started when asked */
        gp_http_cors(r, resp);
        enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
        MHD_destroy_response(resp);
        return ret;
}

/* ---- monitor and admin ---- */

static enum MHD_Result get_sched_stats(hreq *r) {
        gp_daemon *d = r->d;
        gp_sched_stats st;
        pthread_mutex_lock(&d->lock);
        gp_sched_get_stats(d->sched, &st);
        int depth = gp_sched_get_config(d->sched)->max_queue_depth;
        json_t *extra = gp_tenants_stats_json(d->tenants);
        pthread_mutex_unlock(&d->lock);
        json_t *qs = json_array();
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                double u = depth ? 100.0 * (double)st.queued[i] / depth : 0;
                json_array_append_new(qs, json_pack("{s:i,s:I,s:i,s:f,s:I}", "priority", i, "current_depth",
                                                    (json_int_t)st.queued[i], "max_depth", depth,
                                                    "utilization_pct", u, "available_slots",
                                                    (json_int_t)(depth - (int64_t)st.queued[i])));
        }
        double util = st.gpus_total ? 100.0 * st.gpus_busy / st.gpus_total : 0;
        json_t *out = json_pack("{s:I,s:I,s:f,s:I,s:o}", "total_scheduled", (json_int_t)st.total_scheduled,
                                "total_queued_now", (json_int_t)st.queued_total, "overall_utilization", util,
                                "total_running_now", (json_int_t)st.running, "queue_stats", qs);
        if (out && extra)
                json_object_update(out, extra); /* time_rules, tenants (usage against quota) */
        json_decref(extra);
        if (out && d->gw)
                json_object_set_new(out, "gateway", gp_gw_stats_json(d->gw));
        return send_json(r, 200, out);
}

/* Queues by depth, busiest first; equal depths: the more urgent tier
 * first.  (json arrays of {"priority", "depth", ...} objects.) */
static int depth_of(json_t *q) {
        return (int)json_integer_value(json_object_get(q, "depth"));
}

static int busier(const void *a, const void *b) {
        json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
        int dx = depth_of(x), dy = depth_of(y);
        if (dx != dy)
                return dx > dy ? -1 : 1;
        return (int)json_integer_value(json_object_get(x, "priority")) -
               (int)json_integer_value(json_object_get(y, "priority"));
}

/* The top busiest entries of queues (an array it steals), busiest first. */
static json_t *busiest(json_t *queues, size_t top) {
        size_t n = json_array_size(queues);
        json_t *v[GP_PRIORITY_LEVELS * 2], *out = json_array();
        if (n > GP_ARRAY_SIZE(v))
                n = GP_ARRAY_SIZE(v);
        for (size_t i = 0; i < n; i++)
                v[i] = json_array_get(queues, i);
        // cppcheck-suppress uninitvar ; v[0..n) were set just above
        qsort(v, n, sizeof(v[0]), busier);
        for (size_t i = 0; i < n && i < top; i++)
                json_array_append(out, v[i]);
        json_decref(queues);
        return out;
}

/* ?top=N: the N busiest queues (tiers), busiest first (all ten without
 * it); ?tasks=M: the first M queued tasks of each (default 10). */
static enum MHD_Result get_sched_queues(hreq *r) {
        gp_daemon *d = r->d;
        int64_t top, per_q;
        if (query_i64(r, "top", 1, 1000, GP_PRIORITY_LEVELS, &top) < 0)
                return send_error(r, 400, "invalid_request", "top: must be 1..1000 (queues to show, busiest first)");
        if (query_i64(r, "tasks", 0, 1000, 10, &per_q) < 0)
                return send_error(r, 400, "invalid_request", "tasks: must be 0..1000 (tasks shown per queue)");
        json_t *tiers = json_array();
        int per[GP_PRIORITY_LEVELS] = {0};
        json_t *lists[GP_PRIORITY_LEVELS];
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                lists[i] = json_array();
        pthread_mutex_lock(&d->lock);
        gp_sched_stats st;
        gp_sched_get_stats(d->sched, &st);
        size_t total = st.queued_total;
        int64_t *ids = per_q > 0 ? malloc(sizeof(int64_t) * (total ? total : 1)) : NULL;
        if (ids) {
                gp_sched_queue_order(d->sched, ids, total);
                for (size_t i = 0; i < total; i++) {
                        gp_task *t = gp_i64map_get(&d->tasks, ids[i]);
                        if (!t || per[t->priority] >= per_q)
                                continue;
                        per[t->priority]++;
                        json_array_append_new(lists[t->priority],
                                              json_pack("{s:I,s:s,s:I}", "id", (json_int_t)t->id, "tenant_id",
                                                        t->tenant, "queue_position", (json_int_t)(i + 1)));
                }
        }
        pthread_mutex_unlock(&d->lock);
        free(ids);
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                json_array_append_new(tiers, json_pack("{s:i,s:I,s:o}", "priority", i, "depth",
                                                       (json_int_t)st.queued[i], "tasks", lists[i]));
        json_t *out = json_pack("{s:o}", "queues", busiest(tiers, (size_t)top));
        if (out && d->gw) {
                json_t *gq = gp_gw_queues_json(d->gw, (int)per_q);
                if (json_is_array(gq))
                        gq = busiest(gq, (size_t)top);
                json_object_set_new(out, "gateway_queues", gq);
        }
        return send_json(r, 200, out);
}

/* "local:0", "0" or a uuid -> scheduler GPU id. */
static int resolve_gpu(gp_daemon *d, const char *s, uint32_t *ret) {
        char node[GP_NODE_MAX];
        const char *colon = strrchr(s, ':');
        int64_t idx;
        if (gp_sched_gpu_find_uuid(d->sched, s, ret) == 0)
                return 0;
        if (colon && (size_t)(colon - s) < sizeof(node)) {
                memcpy(node, s, (size_t)(colon - s));
                node[colon - s] = '\0';
                if (gp_parse_i64(colon + 1, 0, 100000, &idx) == 0)
                        return gp_sched_gpu_find(d->sched, node, (int)idx, ret);
        }
        if (gp_parse_i64(s, 0, 100000, &idx) == 0)
                return gp_sched_gpu_find(d->sched, "local", (int)idx, ret);
        return -ENOENT;
}

/* ------------------------------------------------------------------ */
/* writes: handed to the loop thread                                   */

static enum MHD_Result post_cmd(hreq *r, cmd *c) {
        c->req = r;
        park(r); /* suspend before posting: the loop may answer at once */
        gp_daemon_post(r->d, c);
        return MHD_YES;
}

int gp_http_post(hreq *r, cmd *c) {
        return post_cmd(r, c);
}

/* seed: the sketch's short path (/api/tasks), whose priority is 0..100 */
static enum MHD_Result submit(hreq *r, bool seed) {
        gp_daemon *d = r->d;
        /* Content-Type is application/json here: gp_http_browser_gate refused
         * any other (415) before routing */
        gp_submit_limits lim = {.default_lease_ttl_s = d->cfg.default_lease_ttl_s,
                                .max_lease_ttl_s = d->cfg.max_lease_ttl_s,
                                .default_max_retries = d->cfg.default_max_retries,
                                .default_priority = 5, .clamp_priority = d->cfg.clamp_priority,
                                .default_queue_timeout_s = d->cfg.queue_timeout_sec, .seed_priority = seed,
                                .max_array_size = d->cfg.max_array_size};
        if (!r->admin) {
                /* a tenant key: its tenant, its default tier, its most urgent tier */
                pthread_mutex_lock(&d->lock);
                const gp_cfg_tenant *tc = gp_tenants_find(d->tenants, r->tenant);
                if (tc) {
                        lim.default_priority = tc->default_priority;
                        lim.max_priority = tc->max_priority;
                }
                pthread_mutex_unlock(&d->lock);
                lim.tenant = r->tenant;
        }
        cmd *c = calloc(1, sizeof(*c));
        if (!c)
                return send_error(r, 503, "unavailable", "out of memory");
        char err[256];
        int rc = gp_submit_parse_array(r->body.data ? r->body.data : "", r->body.len, &lim, &c->submit.task, &c->submit.array, err,
                                       sizeof(err));
        if (rc < 0) {
                free(c);
                if (rc == -ENOMEM)
                        return send_error(r, 503, "unavailable", "out of memory");
                if (rc == -EPERM)
                        return send_error(r, 403, "forbidden", "%s", err);
                return send_error(r, 400, "invalid_request", "%s", err);
        }
        if ((rc = gp_http_submit_user(r, &c->submit.task, err, sizeof(err))) != 0) {
                gp_task_done(&c->submit.task);
                gp_array_spec_done(&c->submit.array);
                free(c);
                if (rc == -ENOMEM)
                        return send_error(r, 503, "unavailable", "out of memory");
                return send_error(r, 403, "forbidden", "%s", err);
        }
        c->kind = CMD_SUBMIT;
        return post_cmd(r, c);
}

static enum MHD_Result task_cmd(hreq *r, cmd_kind kind, int64_t id) {
        cmd *c = calloc(1, sizeof(*c));
        if (!c)
                return send_error(r, 503, "unavailable", "out of memory");
        c->kind = kind;
        c->op.id = id;
        if (!r->admin)
                gp_strlcpy(c->op.tenant, r->tenant, sizeof(c->op.tenant)); /* others' tasks answer 404 */
        if (r->own_only)
                gp_strlcpy(c->op.user, r->user, sizeof(c->op.user));
        if (kind == CMD_RELEASE && r->body.len > 0) {
                json_error_t je;
                json_t *j = json_loadb(r->body.data, r->body.len, JSON_REJECT_DUPLICATES, &je);
                json_t *ec = j ? json_object_get(j, "exit_code") : NULL;
                bool ok = j && json_is_object(j) && json_object_size(j) == (ec ? 1u : 0u) &&
                          (!ec || (json_is_integer(ec) && json_integer_value(ec) >= 0 &&
                                   json_integer_value(ec) <= 255));
                if (ok && ec) {
                        c->op.has_exit_code = true;
                        c->op.exit_code = (int)json_integer_value(ec);
                }
                json_decref(j);
                if (!ok) {
                        free(c);
                        return send_error(r, 400, "invalid_request",
                                          "release body must be {} or {\"exit_code\": 0..255}");
                }
        }
        return post_cmd(r, c);
}

/* ---- job arrays ---- */

typedef struct array_ctx {
        const char *tenant;        /* the caller's tenant, NULL = admin */
        bool denied;               /* an element of another tenant was seen */
        gp_daemon *d;
        int64_t counts[GP_TASK_STATE_COUNT];
        int32_t *idx;
        size_t n, cap;
        int limit;
        int64_t first, last;
        char tenant_id[GP_TENANT_MAX], name[GP_NAME_MAX];
        int rows;
        int64_t last_row;
        const char *user;          /* a local user's own only, NULL = any */
} array_ctx;

static int array_cb(const gp_task *st, void *ud) {
        array_ctx *a = ud;
        a->rows++;
        a->last_row = st->id;
        const gp_task *mem = gp_i64map_get(&a->d->tasks, st->id);
        const gp_task *t = mem ? mem : st;
        if ((a->tenant && strcmp(t->tenant, a->tenant) != 0) || (a->user && strcmp(t->user, a->user) != 0)) {
                a->denied = true;
                return 1;
        }
        if (a->n == a->cap) {
                size_t cap = a->cap ? a->cap * 2 : 1024;
                int32_t *p = realloc(a->idx, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                a->idx = p;
                a->cap = cap;
        }
        a->idx[a->n++] = t->array_index;
        if ((unsigned)t->state < GP_TASK_STATE_COUNT)
                a->counts[t->state]++;
        a->first = t->id; /* newest first: the last row seen is the first element */
        if (!a->last)
                a->last = t->id;
        a->limit = t->array_limit;
        gp_strlcpy(a->tenant_id, t->tenant, sizeof(a->tenant_id));
        gp_strlcpy(a->name, t->name, sizeof(a->name));
        return 0;
}

static int cmp_i32(const void *x, const void *y) {
        int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
        return (a > b) - (a < b);
}

/* GET /api/v1/arrays/{id}: the array with its elements counted by state
 * (read from the store, which holds every element's latest state). */
static enum MHD_Result get_array(hreq *r, int64_t id) {
        gp_daemon *d = r->d;
        array_ctx a = {.tenant = r->admin ? NULL : r->tenant, .user = r->own_only ? r->user : NULL, .d = d};
        gp_task_filter f = {.state = -1, .limit = 1000, .array_id = id};
        int rc = 0;
        pthread_mutex_lock(&d->lock);
        pthread_mutex_lock(&d->rs_lock);
        for (;;) {
                a.rows = 0;
                rc = gp_store_task_list(d->rs, &f, array_cb, &a);
                if (rc != 0 || a.rows < f.limit)
                        break;
                f.before_id = a.last_row;
        }
        pthread_mutex_unlock(&d->rs_lock);
        pthread_mutex_unlock(&d->lock);
        if (rc < 0 && !a.denied) {
                free(a.idx);
                return send_error(r, 503, "unavailable", "cannot read array %" PRId64 ": %s", id, gp_strerror(rc));
        }
        if (a.denied || a.n == 0 || a.first != id) {
                free(a.idx);
                return send_error(r, 404, "not_found", "no array %" PRId64, id); /* ids do not leak */
        }
        qsort(a.idx, a.n, sizeof(*a.idx), cmp_i32);
        char spec[256];
        gp_array_spec_format(a.idx, a.n, a.limit, spec, sizeof(spec));
        free(a.idx);
        gp_buf out;
        gp_buf_init(&out, 0);
        rc = gp_buf_printf(&out, "{\"array_id\":%" PRId64, id);
        rc = rc ? rc : gp_buf_json_field_str(&out, "tenant_id", a.tenant_id);
        rc = rc ? rc : gp_buf_json_field_str(&out, "name", a.name);
        rc = rc ? rc : gp_buf_json_field_str(&out, "array", spec);
        rc = rc ? rc : gp_buf_printf(&out, ",\"count\":%zu,\"limit\":%d,\"first_task_id\":%" PRId64
                                           ",\"last_task_id\":%" PRId64 ",\"counts\":{",
                                     a.n, a.limit, a.first, a.last);
        for (int s = 0; rc == 0 && s < GP_TASK_STATE_COUNT; s++)
                rc = gp_buf_printf(&out, "%s\"%s\":%" PRId64, s ? "," : "", gp_task_state_name((gp_task_state)s),
                                   a.counts[s]);
        rc = rc ? rc : gp_buf_printf(&out, "},\"backend\":\"%s\"}", d->backend);
        if (rc < 0) {
                gp_buf_done(&out);
                return send_error(r, 503, "unavailable", "out of memory");
        }
        return send_body(r, 200, gp_buf_steal(&out), JSON_TYPE, 0);
}

/* POST /api/v1/arrays/{id}/cancel with no body, {} (every element not yet
 * ended) or {"index": N} (one element). */
static enum MHD_Result array_cancel(hreq *r, int64_t id) {
        int64_t index = -1;
        if (r->body.len > 0) {
                json_error_t je;
                json_t *j = json_loadb(r->body.data, r->body.len, JSON_REJECT_DUPLICATES, &je);
                if (!j)
                        return send_error(r, 415, "unsupported_media_type",
                                          "the body must be JSON: {} or {\"index\": N}");
                json_t *ix = json_object_get(j, "index");
                bool ok = json_is_object(j) && json_object_size(j) == (ix ? 1u : 0u) &&
                          (!ix || (json_is_integer(ix) && json_integer_value(ix) >= 0 &&
                                   json_integer_value(ix) <= GP_ARRAY_INDEX_MAX));
                if (ok && ix)
                        index = json_integer_value(ix);
                json_decref(j);
                if (!ok)
                        return send_error(r, 400, "invalid_request",
                                          "cancel body must be {} or {\"index\": 0..%d}", GP_ARRAY_INDEX_MAX);
        }
        cmd *c = calloc(1, sizeof(*c));
        if (!c)
                return send_error(r, 503, "unavailable", "out of memory");
        c->kind = CMD_ARRAY_CANCEL;
        c->op.id = id;
        c->op.array_index = index;
        if (!r->admin)
                gp_strlcpy(c->op.tenant, r->tenant, sizeof(c->op.tenant)); /* others' arrays answer 404 */
        if (r->own_only)
                gp_strlcpy(c->op.user, r->user, sizeof(c->op.user));
        return post_cmd(r, c);
}

/* POST /admin/gpus/{gpu}/drain|undrain: gid as the path names it. */
static enum MHD_Result gpu_cmd(hreq *r, cmd_kind kind, const char *gid) {
        gp_daemon *d = r->d;
        uint32_t g;
        pthread_mutex_lock(&d->lock);
        int rc = resolve_gpu(d, gid, &g);
        pthread_mutex_unlock(&d->lock);
        if (rc < 0)
                return send_error(r, 404, "not_found", "no GPU '%s' (use local:INDEX, INDEX or the uuid)", gid);
        cmd *c = calloc(1, sizeof(*c));
        if (!c)
                return send_error(r, 503, "unavailable", "out of memory");
        c->kind = kind;
        c->gpu.gpu = g;
        return post_cmd(r, c);
}

/* ------------------------------------------------------------------ */
/* the inference gateway (/v1/...)                                     */

/* The key's tenant, its tiers and its gateway limits; admin keys and
 * keyless loopback callers are the tenant "default". */
static void gw_caller(gp_daemon *d, const char *tenant, bool admin, gp_gw_caller *who) {
        *who = (gp_gw_caller){.max_priority = 0, .default_priority = 5, .clamp_priority = d->cfg.clamp_priority,
                              .limits = {.weight = 1}};
        gp_strlcpy(who->tenant, tenant[0] ? tenant : "default", sizeof(who->tenant));
        pthread_mutex_lock(&d->lock);
        const gp_cfg_tenant *tc = gp_tenants_find(d->tenants, who->tenant);
        if (tc) {
                if (!admin) {
                        who->max_priority = tc->max_priority;
                        who->default_priority = tc->default_priority;
                }
                /* tenants[].gateway, or a time rule's limits while it is in force */
                gp_tenants_gw_limits(d->tenants, tc, &who->limits.max_concurrent, &who->limits.rpm,
                                     &who->limits.tpm);
                who->limits.weight = (uint32_t)tc->weight;
        }
        pthread_mutex_unlock(&d->lock);
}

/* The gateway's own /v1 connections ask here who calls (gp_gw_on_auth). */
static int gw_auth(void *ud, const char *authorization, const char *host, const struct sockaddr *client,
                   const char *forwarded_for, gp_gw_caller *who, char *msg, size_t msglen) {
        gp_daemon *d = ud;
        if (gp_daemon_deposed()) { /* usage could not be stored */
                gp_strlcpy(msg, "this server lost the lead: try again (another server leads once the database answers)",
                           msglen);
                return 503;
        }
        bool admin = false;
        char tenant[GP_TENANT_MAX] = "", label[128];
        const char *why = NULL;
        bool loopback = addr_loopback(client) && gp_fwd_loopback(forwarded_for);
        int st = identify(d, authorization, host, loopback, &admin, tenant, sizeof(tenant), label, sizeof(label),
                          &why);
        if (st) {
                gp_strlcpy(msg, why, msglen);
                return st;
        }
        gw_caller(d, tenant, admin, who);
        return gp_billing_check_gateway(d, who->tenant, msg, msglen);
}

static enum MHD_Result gateway_route(hreq *r, const char *url, const char *method) {
        gp_daemon *d = r->d;
        if (r->body_too_big)
                return send_error(r, 413, "payload_too_large", "request body over %" PRId64 " bytes",
                                  d->cfg.max_body_bytes);
        if (!d->gw)
                return send_error(r, 503, "unavailable", "the gateway is not running");
        gp_gw_caller who;
        gw_caller(d, r->tenant, r->admin, &who);
        char msg[256];
        if (gp_billing_check_gateway(d, who.tenant, msg, sizeof(msg)))
                return send_error(r, 402, "insufficient_balance", "%s", msg);
        who.cors_origin = r->cors;
        return gp_gw_handle(d->gw, r->conn, url, method, &who, r->body.data, r->body.len, &r->gw);
}

/* ------------------------------------------------------------------ */
/* routing: this file's rows of the route table (routes.h)              */

/* What /healthz and /readyz of a deposed leader say, at once (they show
 * nothing a batch it could not store changed). */
static char *deposed_body(gp_daemon *d) {
        json_t *j = json_pack("{s:s,s:s,s:s}", "status", "degraded", "reason",
                              "lost the lead: the database cannot be reached; answering nothing", "backend", d->backend);
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return s;
}

/* a full disk is "degraded", still 200: a liveness probe must not
 * restart a daemon that serves reads and cancels (docs/deployment.md) */
static int h_healthz(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_daemon *d = r->d;
        if (gp_daemon_deposed()) /* alive: a restart would not bring the database back */
                return send_now(r, 200, deposed_body(r->d), JSON_TYPE, 0);
        return gp_disk_degraded(d) ? send_json(r, 200, json_pack("{s:s,s:s}", "status", "degraded", "reason",
                                                                 gp_disk_message(d)))
                                   : send_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

static int h_readyz(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_daemon *d = r->d;
        if (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE) || __atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE))
                return send_json(r, 503, json_pack("{s:s}", "status", "starting"));
        if (gp_daemon_deposed())
                return send_now(r, 503, deposed_body(r->d), JSON_TYPE, 0);
        if (gp_disk_degraded(d)) /* still ready: reads and cancels are served */
                return send_json(r, 200, json_pack("{s:s,s:s,s:s}", "status", "ready", "store", "degraded", "reason",
                                                   gp_disk_message(d)));
        return send_json(r, 200, json_pack("{s:s}", "status", "ready"));
}

/* POST /api/tasks (the alias) is the sketch's short path, whose priority is 0..100 */
static int h_submit(hreq *r, const gp_route_arg *a) {
        return submit(r, a->alias);
}

static int h_list_tasks(hreq *r, const gp_route_arg *a) {
        (void)a;
        return list_tasks(r);
}

static int h_get_task(hreq *r, const gp_route_arg *a) {
        return get_task(r, a->id);
}

static int h_cancel(hreq *r, const gp_route_arg *a) {
        return task_cmd(r, CMD_CANCEL, a->id);
}

static int h_heartbeat(hreq *r, const gp_route_arg *a) {
        return task_cmd(r, CMD_HEARTBEAT, a->id);
}

static int h_release(hreq *r, const gp_route_arg *a) {
        return task_cmd(r, CMD_RELEASE, a->id);
}

static int h_logs(hreq *r, const gp_route_arg *a) {
        return get_logs(r, a->id);
}

static int h_get_array(hreq *r, const gp_route_arg *a) {
        return get_array(r, a->id);
}

static int h_array_cancel(hreq *r, const gp_route_arg *a) {
        return array_cancel(r, a->id);
}

static int h_gpus(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_gpus(r);
}

static int h_queue(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_queue(r);
}

static int h_sched_stats(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_sched_stats(r);
}

static int h_sched_queues(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_sched_queues(r);
}

static int h_drain(hreq *r, const gp_route_arg *a) {
        return gpu_cmd(r, CMD_DRAIN, a->name);
}

static int h_undrain(hreq *r, const gp_route_arg *a) {
        return gpu_cmd(r, CMD_UNDRAIN, a->name);
}

/* the gateway's rows: handler() sends every /v1 path to it before the table */
static int h_gateway(hreq *r, const gp_route_arg *a) {
        return gateway_route(r, a->url, a->method);
}

const gp_route gp_http_routes[] = {
        {GP_GET, "/healthz", GP_ROUTE_OPEN, h_healthz, NULL, 0},
        {GP_GET, "/readyz", GP_ROUTE_OPEN, h_readyz, NULL, 0},
        {GP_GET, "/api/v1/tasks", GP_ROUTE_TENANT, h_list_tasks, NULL, 0},
        {GP_POST, "/api/v1/tasks", GP_ROUTE_TENANT, h_submit, NULL, 0},
        {GP_GET, "/api/v1/tasks/{task}", GP_ROUTE_TENANT, h_get_task, NULL, 0},
        {GP_DELETE, "/api/v1/tasks/{task}", GP_ROUTE_TENANT, h_cancel, NULL, 0},
        {GP_POST, "/api/v1/tasks/{task}/cancel", GP_ROUTE_TENANT, h_cancel, NULL, 0},
        {GP_POST, "/api/v1/tasks/{task}/heartbeat", GP_ROUTE_TENANT, h_heartbeat, NULL, 0},
        {GP_POST, "/api/v1/tasks/{task}/release", GP_ROUTE_TENANT, h_release, NULL, 0},
        {GP_GET, "/api/v1/tasks/{task}/logs", GP_ROUTE_TENANT, h_logs, NULL, 0},
        {GP_GET, "/api/v1/arrays/{array}", GP_ROUTE_TENANT, h_get_array, NULL, 0},
        {GP_POST, "/api/v1/arrays/{array}/cancel", GP_ROUTE_TENANT, h_array_cancel, NULL, 0},
        {GP_GET, "/api/v1/gpus", GP_ROUTE_TENANT, h_gpus, NULL, 0},
        {GP_GET, "/api/v1/queue", GP_ROUTE_TENANT, h_queue, NULL, 0},
        {GP_GET, "/admin/scheduler/stats", GP_ROUTE_ADMIN, h_sched_stats, NULL, 0},
        {GP_GET, "/admin/scheduler/queues", GP_ROUTE_ADMIN, h_sched_queues, NULL, 0},
        {GP_POST, "/admin/gpus/{gpu}/drain", GP_ROUTE_ADMIN, h_drain, NULL, 0},
        {GP_POST, "/admin/gpus/{gpu}/undrain", GP_ROUTE_ADMIN, h_undrain, NULL, 0},
        {GP_GET, "/v1/models", GP_ROUTE_TENANT, h_gateway, NULL, GP_ROUTE_GATEWAY},
        {GP_GET, "/v1/models/{model*}", GP_ROUTE_TENANT, h_gateway, NULL, GP_ROUTE_GATEWAY},
        {GP_POST, "/v1/chat/completions", GP_ROUTE_TENANT, h_gateway, NULL, GP_ROUTE_GATEWAY},
        {GP_POST, "/v1/completions", GP_ROUTE_TENANT, h_gateway, NULL, GP_ROUTE_GATEWAY},
        {GP_POST, "/v1/embeddings", GP_ROUTE_TENANT, h_gateway, NULL, GP_ROUTE_GATEWAY},
        {0, NULL, 0, NULL, NULL, 0},
};

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
        gp_daemon *d = cls;
        hreq *r = *con_cls;
        if (!r) {
                r = calloc(1, sizeof(*r));
                if (!r)
                        return MHD_NO;
                r->conn = conn;
                r->d = d;
                r->log_fd = -1;
                gp_buf_init(&r->body, (size_t)d->cfg.max_body_bytes);
                *con_cls = r;
                enum MHD_Result ret;
                return gp_fwd_mhd_refuse_bad_framing(conn, &ret) ? ret : MHD_YES;
        }
        if (*upload_data_size) {
                if (!r->body_too_big && gp_buf_append(&r->body, upload_data, *upload_data_size) < 0)
                        r->body_too_big = true;
                *upload_data_size = 0;
                return MHD_YES;
        }
        if (r->gw)
                return gp_gw_resume(d->gw, conn, r->gw);
        if (r->answered) {
                char *body = r->resp;
                r->resp = NULL;
                r->answered = false;
                return send_now(r, r->status, body, r->ctype ? r->ctype : JSON_TYPE, r->retry_after);
        }
        if (r->wait_id && !r->waiting) /* woken long poll: answer with the task now */
                return get_task(r, r->wait_id);
        if (!r->started) {
                r->started = true;
                r->openai = gp_gw_is_path(url);
                enum MHD_Result ret;
                /* no web page may change state here: cross-site and non-JSON writes end now */
                if (gp_http_browser_gate(r, url, method, &ret) < 0)
                        return ret;
                if (r->openai && gp_peer_conn_is_unix(conn))
                        return send_error(r, 404, "not_found", "the gateway (/v1) is served on server.listen, "
                                          "not on the local socket");
                if (r->openai) /* the gateway answers every /v1 path (its rows are listed only) */
                        return authorize(r, &ret) < 0 ? ret : gateway_route(r, url, method);
                /* the route table (routes.h): open paths (probes, the dashboard's page and assets,
                 * which hold no data) carry no key; the others are identified first */
                gp_route_match m;
                gp_route_find(url, method, &m);
                if (!m.open && authorize(r, &ret) < 0)
                        return ret;
                if (!m.open && gp_daemon_lead_lost()) /* another server may lead: what we hold may be stale */
                        return send_now(r, 503,
                                        gp_http_error_body("unavailable",
                                                           "this server lost the lead (it cannot reach the "
                                                           "database to prove it still leads): it answers "
                                                           "nothing from what it holds, which may be stale; try "
                                                           "another server, or again in a moment"),
                                        JSON_TYPE, 1);
                int iret;
                if (gp_idem_begin(r, &m, url, method, &iret)) /* a kept answer, or the key refused */
                        return (enum MHD_Result)iret;
                return (enum MHD_Result)gp_route_serve(r, &m);
        }
        /* called again with nothing queued for it: route it again, as on its first call */
        if (r->openai)
                return gateway_route(r, url, method);
        gp_route_match m;
        gp_route_find(url, method, &m);
        return (enum MHD_Result)gp_route_serve(r, &m);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
        gp_daemon *d = cls;
        hreq *r = *con_cls;
        if (!r)
                return;
        pthread_mutex_lock(&d->lock);
        gp_daemon_waiter_del(d, r);
        gp_nodes_req_gone(d, r);
        if (r->following)
                gp_list_del(&r->wlink);
        pthread_mutex_unlock(&d->lock);
        if (r->gw)
                gp_gw_completed(d->gw, r->gw);
        if (r->log_fd >= 0)
                close(r->log_fd);
        gp_runlog_follow_done(r);
        gp_idem_end(r);
        free(r->resp);
        gp_buf_done(&r->body);
        free(r);
        *con_cls = NULL;
}

static int parse_listen(const char *s, struct sockaddr_in *ret) {
        char host[64];
        const char *colon = strrchr(s, ':');
        int64_t port;
        if (!colon || (size_t)(colon - s) >= sizeof(host) || gp_parse_i64(colon + 1, 1, 65535, &port) < 0)
                return -EINVAL;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
        memset(ret, 0, sizeof(*ret));
        ret->sin_family = AF_INET;
        ret->sin_port = htons((uint16_t)port);
        if (!strcmp(host, "") || !strcmp(host, "*"))
                ret->sin_addr.s_addr = htonl(INADDR_ANY);
        else if (!strcmp(host, "localhost"))
                ret->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        else if (inet_pton(AF_INET, host, &ret->sin_addr) != 1)
                return -EINVAL;
        return 0;
}

/* MHD's percent-decoder for paths and query arguments: base/url.h's, which
 * keeps %00..%1F, %7F and %2F as written (no value cut short by a NUL, no
 * path segment made by an escaped '/'). */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s) {
        (void)cls;
        (void)conn;
        return gp_url_unescape(s);
}

/* Connections start and close: the gateway's loop counts them against
 * max_connections and times their requests (header_timeout_s,
 * min_body_rate_bytes_s: libmicrohttpd times idle connections only). */
static void notify_conn(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe) {
        (void)cls;
        if (toe == MHD_CONNECTION_NOTIFY_STARTED)
                gp_gw_mhd_conn_started(conn, socket_context);
        else
                gp_gw_mhd_conn_closed(socket_context);
}

/* handler(), after telling the gateway's timers how far the request got:
 * its head is whole (first call), body bytes came, or the body is whole. */
static enum MHD_Result timed_handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                     const char *version, const char *upload_data, size_t *upload_data_size,
                                     void **con_cls) {
        gp_gw_mhd_progress(conn, *con_cls == NULL, *upload_data_size);
        return handler(cls, conn, url, method, version, upload_data, upload_data_size, con_cls);
}

/* completed(), after telling the timers the connection waits for its next request. */
static void timed_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                            enum MHD_RequestTerminationCode toe) {
        gp_gw_mhd_request_done(conn);
        completed(cls, conn, con_cls, toe);
}

static void stop_daemons(gp_daemon *d) {
        gp_peer_stop(d->peer_srv);
        d->peer_srv = NULL;
        for (int i = 0; i < d->nmhd; i++)
                MHD_stop_daemon(d->mhds[i]);
        d->nmhd = 0;
}

/* The gateway's token counts of each request go to billing (stored with
 * the loop's next batch). */
static void bill_tokens(void *ud, const char *tenant, const char *model, int64_t prompt, int64_t completion) {
        gp_daemon *d = ud;
        int rc = gp_billing_record_tokens(d, tenant, model, prompt, completion, gp_now_ms());
        if (rc < 0)
                gp_warn("gateway: tokens of tenant %s (model %s) not recorded: %s", tenant, model, gp_strerror(rc));
}

/* libmicrohttpd's messages go to our log.  Its complaints that TCP_CORK
 * cannot be set are dropped: they come for relayed connections (front.c),
 * which reach it over a socketpair, where there is nothing to push. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
        (void)cls;
        char msg[512];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        size_t n = strlen(msg);
        while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
                msg[--n] = '\0';
        if (strstr(msg, "TCP_CORK") || strstr(msg, "TCP_NODELAY") || strstr(msg, "push the data from buffers"))
                return;
        gp_warn("http: %s", msg);
}

/* One listening socket of the port (SO_REUSEPORT: every loop has its own,
 * and the kernel spreads the connections).  The fd, or -errno. */
static int listen_on(const struct sockaddr_in *sa) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
            bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0 || listen(fd, 4096) < 0) {
                int e = -errno;
                close(fd);
                return e;
        }
        return fd;
}

/* Whether another process listens on sa already.  SO_REUSEPORT lets
 * sockets of the same user share a port, so a second gpupool server (or any
 * program of the same user that sets it) would bind beside a live one and
 * the kernel would split the connections between the two.  A socket without
 * SO_REUSEPORT cannot bind where one listens: this probe is bound and
 * closed before the real sockets are made.  0, or -EADDRINUSE (or -errno). */
static int port_free(const struct sockaddr_in *sa) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1; /* SO_REUSEADDR: a previous run's TIME_WAIT connections do not count */
        int rc = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
                                 bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0
                         ? -errno
                         : 0;
        close(fd);
        return rc;
}

/* The number of HTTP loops (and listening sockets) of a config. */
static int http_loops(const gp_config *cfg) {
        int n = cfg->http_threads < 1 ? 1 : cfg->http_threads;
        return n > GP_HTTP_MAX_LOOPS ? GP_HTTP_MAX_LOOPS : n;
}

int gp_http_bind(const gp_config *cfg, int *ret_fds, int *ret_n, char *err, size_t errlen) {
        struct sockaddr_in sa;
        if (parse_listen(cfg->listen, &sa) < 0) {
                snprintf(err, errlen, "listen: '%s' is not ADDR:PORT (IPv4)", cfg->listen);
                return -EINVAL;
        }
        int n = http_loops(cfg);
        int prc = port_free(&sa);
        if (prc < 0) {
                snprintf(err, errlen, "cannot listen on %s (%s)", cfg->listen,
                         prc == -EADDRINUSE ? "in use by another process" : strerror(-prc));
                return prc;
        }
        for (int i = 0; i < n; i++) {
                int fd = listen_on(&sa);
                if (fd < 0) {
                        while (i > 0)
                                close(ret_fds[--i]);
                        snprintf(err, errlen, "cannot listen on %s (%s)", cfg->listen,
                                 fd == -EADDRINUSE ? "in use" : strerror(-fd));
                        return fd;
                }
                ret_fds[i] = fd;
        }
        *ret_n = n;
        return 0;
}

int gp_http_start(gp_daemon *d, char *err, size_t errlen) {
        struct sockaddr_in sa;
        if (parse_listen(d->cfg.listen, &sa) < 0) {
                snprintf(err, errlen, "listen: '%s' is not ADDR:PORT (IPv4)", d->cfg.listen);
                return -EINVAL;
        }
        /* server.http_threads event loops, each with its own listening socket on the same
         * port (SO_REUSEPORT spreads the connections) and its own MHD daemon in external
         * epoll mode; a loop serves /v1 connections itself and hands the others to its
         * daemon, together with the gateway's upstream transfers (no hand-offs between
         * threads; see docs/internals/gateway.md) */
        int n = d->cfg.http_threads < 1 ? 1 : d->cfg.http_threads;
        if (n > GP_HTTP_MAX_LOOPS)
                n = GP_HTTP_MAX_LOOPS;
        int grc = gp_gw_new(&d->cfg, n, &d->gw, err, errlen);
        if (grc < 0)
                return grc;
        unsigned flags = MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
        unsigned per = (unsigned)(d->cfg.max_connections + n - 1) / (unsigned)n;
        int lfds[GP_HTTP_MAX_LOOPS];
        for (int i = 0; i < n; i++)
                lfds[i] = -1;
        for (int i = 0; i < n; i++) {
                /* sockets bound before the daemon dropped root (gp_http_bind) */
                lfds[i] = i < d->n_bound ? d->bound_fds[i] : listen_on(&sa);
                struct MHD_Daemon *m =
                        lfds[i] < 0 ? NULL
                                    : MHD_start_daemon(flags, 0, NULL, NULL, timed_handler, d,
                                                       MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, /* first: MHD says so */
                                                       MHD_OPTION_CONNECTION_LIMIT, per, MHD_OPTION_CONNECTION_TIMEOUT,
                                                       (unsigned)d->cfg.connection_timeout_s,
                                                       MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16 * 1024,
                                                       MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                                                       MHD_OPTION_NOTIFY_COMPLETED, timed_completed, d,
                                                       MHD_OPTION_NOTIFY_CONNECTION, notify_conn, NULL, MHD_OPTION_END);
                if (!m) {
                        int e = lfds[i] < 0 ? lfds[i] : -ENOMEM;
                        for (int k = 0; k <= i; k++)
                                if (lfds[k] >= 0)
                                        close(lfds[k]);
                        stop_daemons(d);
                        gp_gw_free(d->gw);
                        d->gw = NULL;
                        if (e == -ENOMEM)
                                snprintf(err, errlen, "cannot start the HTTP daemon (out of memory)");
                        else
                                snprintf(err, errlen, "cannot listen on %s (%s)", d->cfg.listen,
                                         e == -EADDRINUSE ? "in use" : strerror(-e));
                        return e == -ENOMEM ? e : -EADDRINUSE;
                }
                d->mhds[d->nmhd++] = m;
        }
        d->mhd = d->mhds[0];
        /* the local socket (peer.h): optional by default, required when configured */
        char perr[256];
        if (gp_peer_serve(&d->cfg, handler, completed, d, &d->peer_srv, perr, sizeof(perr)) < 0) {
                if (d->cfg.server_socket[0]) {
                        snprintf(err, errlen, "%s", perr);
                        stop_daemons(d);
                        gp_gw_free(d->gw);
                        d->gw = NULL;
                        return -EINVAL;
                }
                gp_warn("%s; local users are not served a socket (the CLI uses TCP)", perr);
        }
        gp_gw_on_usage(d->gw, bill_tokens, d);
        gp_gw_on_auth(d->gw, gw_auth, d);
        gp_gw_set_backend(d->gw, d->backend);
        grc = gp_gw_run(d->gw, d->mhds, lfds, d->nmhd, err, errlen);
        if (grc < 0) {
                stop_daemons(d);
                d->mhd = NULL;
                gp_gw_free(d->gw);
                d->gw = NULL;
                return grc;
        }
        return 0;
}

void gp_http_stop(gp_daemon *d) {
        if (!d->mhd)
                return;
        gp_gw_quiesce(d->gw); /* no new connections; the open ones are served */
        gp_peer_quiesce(d->peer_srv);
        /* the loop answers what is queued; parked reads are woken */
        for (int i = 0; i < 50; i++) {
                pthread_mutex_lock(&d->qlock);
                bool empty = d->qhead == NULL;
                pthread_mutex_unlock(&d->qlock);
                if (empty)
                        break;
                usleep(20 * 1000);
        }
        pthread_mutex_lock(&d->lock);
        __atomic_store_n(&d->stopping, 1, __ATOMIC_RELEASE);
        gp_list *l;
        while ((l = gp_list_first(&d->waiters))) {
                hreq *r = GP_LIST_ENTRY(l, hreq, wlink);
                gp_daemon_waiter_del(d, r);
                gp_http_wake(r);
        }
        while ((l = gp_list_first(&d->followers))) {
                hreq *f = GP_LIST_ENTRY(l, hreq, wlink);
                gp_list_del(l);
                f->following = false;
                gp_http_wake(f);
        }
        gp_nodes_release(d); /* agents' held syncs: answered now (they come back to the next server) */
        pthread_mutex_unlock(&d->lock);
        usleep(100 * 1000); /* the loop thread still drives MHD: woken requests are answered */
        gp_commit_http_closing(d); /* answers waiting for the disk go out; later ones are 503 */
        gp_gw_stop(d->gw);  /* answers parked gateway requests, then the loops (and MHD driving) end */
        stop_daemons(d);
        d->mhd = NULL;
        gp_gw_free(d->gw);
        d->gw = NULL;
}
