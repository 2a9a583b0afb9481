/* coord.c - the coordinator API (coord.h): handlers of
 * /api/v1/coordinator/..., this server's identity and its heartbeat thread.
 *
 * Rules:
 *   - every input is checked before anything is written: ids and owners
 *     1..128 bytes of clean text (no control characters, no '/' in a
 *     server id), urls 1..255 bytes, roles leader|follower|standby, load
 *     0..1, lock timeouts 1..86400 s, unknown body keys refused (400);
 *   - every change is one store transaction (store/coord.c) on c->s,
 *     under c->mu, durable before the answer; a store failure is 503 with
 *     Retry-After and changes nothing;
 *   - times (heartbeats, expiry, "active") are the store's clock;
 *   - a write that changes the registry or a lock is answered by the loop
 *     thread once its audit entry is durable (coord.h "Audit"): the change
 *     is stored first, on c->s, then the entry with the batch of the loop
 *     (a crash between the two loses the entry of a change whose answer
 *     was never sent; the caller's retry, idempotent for its owner, is
 *     audited).
 */
#include "server/coord.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "base/tls-keep.h"
#include "base/util.h"
#include "base/vec.h"
#include "core/sched.h"
#include "server/forward.h"
#include "server/idem.h"
#include "server/nodes.h"
#include "server/cluster-host.h"
#include "server/tenants.h"
#include "store/coord.h"

typedef struct gp_coord {
        pthread_mutex_t mu;             /* the handle, store_ok */
        gp_store *s;                    /* the coordinator's own store handle */
        bool store_ok;                  /* did the last call on s reach the store */
        int64_t checked_mono;           /* when health last asked the store (gp_mono_ms) */
        char id[GP_COORD_ID_MAX + 1];   /* this server */
        int64_t since_ms;               /* its registration, the store's clock: when it began to lead */
        char url[GP_COORD_URL_MAX + 1];
        pthread_t thread;
        bool running;
        pthread_mutex_t stop_mu;
        pthread_cond_t stop_cv;
        bool stop;
} gp_coord;

/* ---- identity, own heartbeat ---- */

const char *gp_coord_leader(gp_daemon *d) {
        return gp_daemon_coord(d) ? gp_daemon_coord(d)->id : "";
}

/* The pool's load: busy GPUs / usable GPUs (0..1000 milli). */
static int64_t load_milli(gp_daemon *d) {
        gp_sched_stats st;
        gp_daemon_lock(d);
        gp_sched_get_stats(gp_daemon_sched(d), &st);
        gp_daemon_unlock(d);
        if (st.gpus_usable == 0)
                return 0;
        int64_t m = (int64_t)st.gpus_busy * 1000 / st.gpus_usable;
        return m > 1000 ? 1000 : m;
}

static const char *my_role(gp_daemon *d) {
        return !strcmp(gp_coord_leader(d), gp_daemon_coord(d)->id) ? "leader" : "follower";
}

int gp_coord_record(gp_store *s, const char *id, const char *url, const char *role, int64_t load_milli, bool register_,
                    int64_t *ret_now) {
        gp_coord_server sv = {.load_milli = load_milli};
        gp_strlcpy(sv.server_id, id, sizeof(sv.server_id));
        gp_strlcpy(sv.url, url, sizeof(sv.url));
        gp_strlcpy(sv.role, role, sizeof(sv.role));
        return gp_store_coord_heartbeat(s, &sv, register_, ret_now, NULL);
}

/* Record this server's heartbeat (c->mu held).  0 or the store's code. */
static int beat(gp_daemon *d, bool register_) {
        gp_coord *c = gp_daemon_coord(d);
        int r = gp_coord_record(c->s, c->id, c->url, my_role(d), load_milli(d), register_,
                                register_ ? &c->since_ms : NULL);
        c->store_ok = r != -GP_ESTORE;
        return r;
}

static void *beat_main(void *arg) {
        gp_daemon *d = arg;
        gp_coord *c = gp_daemon_coord(d);
        bool warned = false;
        for (;;) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += gp_daemon_cfg(d)->heartbeat_interval_s;
                pthread_mutex_lock(&c->stop_mu);
                while (!c->stop && pthread_cond_timedwait(&c->stop_cv, &c->stop_mu, &until) != ETIMEDOUT)
                        ;
                bool stop = c->stop;
                pthread_mutex_unlock(&c->stop_mu);
                if (stop)
                        break;
                pthread_mutex_lock(&c->mu);
                int r = beat(d, false);
                if (r < 0 && !warned)
                        gp_warn("coordinator: heartbeat of %s: %s", c->id, gp_store_errmsg(c->s));
                else if (r == 0 && warned)
                        gp_info("coordinator: heartbeats of %s recorded again", c->id);
                warned = r < 0;
                pthread_mutex_unlock(&c->mu);
        }
        return NULL;
}

/* Clean text of 1..max bytes, NUL-terminated. */
static bool text_ok(const char *s, size_t max) {
        size_t n = s ? strlen(s) : 0;
        return n >= 1 && n <= max && gp_str_is_clean(s, n);
}

void gp_coord_self_url(const gp_config *cfg, char *out, size_t size) {
        /* off loopback the listener serves plaintext only with server.tls.plaintext: any */
        bool lo = !strncmp(cfg->listen, "127.", 4) || !strncmp(cfg->listen, "localhost:", 10);
        if (cfg->advertise_url[0])
                gp_strlcpy(out, cfg->advertise_url, size);
        else
                snprintf(out, size, "%s://%s", lo || cfg->tls_plaintext_any || !gp_tls_listener() ? "http" : "https",
                         cfg->listen);
}

int gp_coord_open(gp_daemon *d, char *err, size_t errlen) {
        gp_coord *c = calloc(1, sizeof(*c));
        if (!c) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        pthread_mutex_init(&c->mu, NULL);
        pthread_mutex_init(&c->stop_mu, NULL);
        pthread_cond_init(&c->stop_cv, NULL);
        gp_daemon_set_coord(d, c);
        const gp_config *cfg = gp_daemon_cfg(d);
        gp_strlcpy(c->id, cfg->server_id[0] ? cfg->server_id : gp_daemon_hostname(d), sizeof(c->id));
        gp_coord_self_url(cfg, c->url, sizeof(c->url));
        if (!text_ok(c->id, GP_COORD_ID_MAX) || strchr(c->id, '/')) {
                snprintf(err, errlen, "cluster.server_id: \"%s\" is not a usable server id (clean text, no '/')",
                         c->id);
                return -EINVAL;
        }
        /* as the daemon's other handles: the checkpoint thread copies the WAL */
        gp_store_options so = {.sync_full = cfg->store_sync_full, .manual_checkpoint = true};
        int rc = gp_store_open(cfg->store_url, &so, &c->s, err, errlen);
        if (rc < 0)
                return rc;
        if ((rc = beat(d, true)) < 0) {
                snprintf(err, errlen, "coordinator: registering %s: %s", c->id, gp_store_errmsg(c->s));
                return rc;
        }
        return 0;
}

int gp_coord_start(gp_daemon *d) {
        gp_coord *c = gp_daemon_coord(d);
        int rc = pthread_create(&c->thread, NULL, beat_main, d);
        if (rc)
                return -rc;
        c->running = true;
        return 0;
}

void gp_coord_stop(gp_daemon *d) {
        gp_coord *c = gp_daemon_coord(d);
        if (!c || !c->running)
                return;
        pthread_mutex_lock(&c->stop_mu);
        c->stop = true;
        pthread_cond_broadcast(&c->stop_cv);
        pthread_mutex_unlock(&c->stop_mu);
        pthread_join(c->thread, NULL);
        c->running = false;
}

void gp_coord_close(gp_daemon *d) {
        gp_coord *c = gp_daemon_coord(d);
        if (!c)
                return;
        gp_coord_stop(d);
        gp_store_close(c->s);
        pthread_mutex_destroy(&c->mu);
        pthread_mutex_destroy(&c->stop_mu);
        pthread_cond_destroy(&c->stop_cv);
        free(c);
        gp_daemon_set_coord(d, NULL);
}

/* ---- answers ---- */

static char *dump(json_t *j) {
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return s;
}

static int send_json(hreq *r, int status, json_t *j) {
        char *body = dump(j);
        return gp_http_send(r, body ? status : 503, body, body ? 0 : 1);
}

static int bad(hreq *r, const char *msg) {
        return gp_http_send(r, 400, gp_http_error_body("invalid_request", "%s", msg), 0);
}

/* A failure of the store call r on c (c->mu held, released here). */
static int store_failed(hreq *r, gp_coord *c, int rc) {
        char msg[512];
        gp_strlcpy(msg, gp_store_errmsg(c->s), sizeof(msg));
        c->store_ok = rc != -GP_ESTORE;
        pthread_mutex_unlock(&c->mu);
        if (rc == -GP_ESTORE)
                return gp_http_send(r, 503, gp_http_error_body("unavailable", "the store: %s; try again", msg), 1);
        return gp_http_send(r, 500, gp_http_error_body("internal", "%s", msg), 0);
}

/* The body as a JSON object whose keys are all in allowed (NULL-ended). */
static json_t *body_object(hreq *r, const char *const *allowed, char *why, size_t whylen) {
        json_error_t je;
        size_t blen;
        const char *data = gp_http_body(r, &blen);
        json_t *j = json_loadb(data, blen, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(j)) {
                snprintf(why, whylen, "the body must be a JSON object%s%s", j ? "" : ": ", j ? "" : je.text);
                json_decref(j);
                return NULL;
        }
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
                bool known = false;
                for (size_t i = 0; allowed[i] && !known; i++)
                        known = !strcmp(k, allowed[i]);
                if (!known) {
                        snprintf(why, whylen, "unknown key \"%.64s\"", k);
                        json_decref(j);
                        return NULL;
                }
        }
        return j;
}

/* A required string field of 1..max clean bytes into out.  NULL or why. */
static const char *str_field(json_t *j, const char *key, size_t max, bool no_slash, char *out, size_t size,
                             char *why, size_t whylen) {
        json_t *v = json_object_get(j, key);
        const char *s = json_string_value(v);
        if (!v) {
                snprintf(why, whylen, "\"%s\" is required", key);
                return why;
        }
        if (!s || json_string_length(v) != strlen(s) || !text_ok(s, max) || (no_slash && strchr(s, '/'))) {
                snprintf(why, whylen, "\"%s\" must be a string of 1..%zu bytes without control characters%s", key,
                         max, no_slash ? " or '/'" : "");
                return why;
        }
        gp_strlcpy(out, s, size);
        return NULL;
}

static const char *active_role(gp_daemon *d, const gp_coord_server *sv) {
        const char *leader = gp_coord_leader(d);
        if (leader[0] && !strcmp(sv->server_id, leader))
                return "leader";
        return !strcmp(sv->role, "leader") ? "follower" : sv->role;
}

/* A server is active while its heartbeats are recent, except a leader
 * not heard from since this server took the lead (the registry is served
 * by the leader): its lease ran out (killed, frozen, cut off), and a
 * deposed leader steps down, so it is not active though its last heartbeat
 * is younger than server_timeout_s.  (One that beats on, claiming to lead,
 * is shown as a follower.) */
static json_t *server_json(gp_daemon *d, const gp_coord_server *sv, int64_t now) {
        const char *leader = gp_coord_leader(d);
        bool deposed = leader[0] && !strcmp(sv->role, "leader") && strcmp(sv->server_id, leader) != 0 &&
                       gp_daemon_coord(d) && sv->last_heartbeat_ms < gp_daemon_coord(d)->since_ms;
        bool active = !deposed && now - sv->last_heartbeat_ms <= (int64_t)gp_daemon_cfg(d)->server_timeout_s * 1000;
        return json_pack("{s:s,s:s,s:s,s:I,s:b,s:I,s:f}", "server_id", sv->server_id, "url", sv->url, "role",
                         active_role(d, sv), "last_heartbeat_ms", (json_int_t)sv->last_heartbeat_ms, "active", active,
                         "started_ms", (json_int_t)sv->started_ms, "load", (double)sv->load_milli / 1000.0);
}

struct servers_ctx {
        gp_coord_server *v;
        size_t n, cap;
};

static int collect_server(const gp_coord_server *sv, void *ud) {
        struct servers_ctx *x = ud;
        gp_coord_server *v = gp_vec_grow(x->v, &x->cap, x->n + 1, sizeof(*v), 16);
        if (!v)
                return -ENOMEM;
        x->v = v;
        x->v[x->n++] = *sv;
        return 0;
}

/* Every server (c->mu taken and released here): the list, the store's
 * time and how many are active; NULL list on failure (answered). */
static json_t *servers_list(hreq *r, int64_t *ret_active, int *ret_answer) {
        gp_daemon *d = gp_http_daemon(r);
        gp_coord *c = gp_daemon_coord(d);
        struct servers_ctx x = {0};
        int64_t now = 0;
        pthread_mutex_lock(&c->mu);
        int rc = gp_store_coord_servers(c->s, collect_server, &x, &now);
        if (rc < 0) {
                free(x.v);
                if (rc == -ENOMEM) {
                        pthread_mutex_unlock(&c->mu);
                        *ret_answer = gp_http_send(r, 503, NULL, 1);
                } else {
                        *ret_answer = store_failed(r, c, rc);
                }
                return NULL;
        }
        c->store_ok = true;
        pthread_mutex_unlock(&c->mu);
        json_t *list = json_array();
        int64_t active = 0;
        for (size_t i = 0; list && i < x.n; i++) {
                json_t *j = server_json(d, &x.v[i], now);
                active += json_is_true(json_object_get(j, "active"));
                json_array_append_new(list, j);
        }
        free(x.v);
        if (!list)
                *ret_answer = gp_http_send(r, 503, NULL, 1);
        *ret_active = active;
        return list;
}

/* ---- audit (coord.h) ---- */

typedef struct audit_entry {
        char who[200];                    /* the caller (hreq.who), and the server that forwarded it */
        char action[40];                  /* coordinator.server.register, coordinator.lock.acquire, ... */
        char target[GP_COORD_ID_MAX + 1]; /* the server id or lock id */
        json_t *old, *new;                /* owned; NULL = null */
        int64_t at_ms;                    /* the store's time of the change */
} audit_entry;

typedef struct gp_coord_audit {
        audit_entry e[1 + GP_COORD_SWEEP_MAX]; /* the write's, and the expiries a grant found */
        size_t n;                              /* entries in e */
        int status;                            /* the answer */
        char *body;                            /* malloc'd */
} gp_coord_audit;

void gp_coord_audit_free(gp_coord_audit *a) {
        if (!a)
                return;
        for (size_t i = 0; i < a->n; i++) {
                json_decref(a->e[i].old);
                json_decref(a->e[i].new);
        }
        free(a->body);
        free(a);
}

void gp_coord_audit_apply(gp_daemon *d, gp_coord_audit *a, int *ret_status, char **ret_body) {
        for (size_t i = 0; i < a->n; i++) {
                audit_entry *e = &a->e[i];
                gp_tenants_audit(gp_daemon_tenants(d), e->who, e->action, e->target, e->old, e->new, e->at_ms);
                e->old = e->new = NULL;
        }
        *ret_status = a->status;
        *ret_body = a->body;
        a->body = NULL;
}

/* Add an entry to a (old and new taken, also when a is NULL or full). */
static void audit_add(gp_coord_audit *a, const char *who, const char *action, const char *target, json_t *old,
                      json_t *new, int64_t at_ms) {
        if (!a || a->n >= sizeof(a->e) / sizeof(a->e[0])) {
                json_decref(old);
                json_decref(new);
                return;
        }
        audit_entry *e = &a->e[a->n++];
        gp_strlcpy(e->who, who, sizeof(e->who));
        gp_strlcpy(e->action, action, sizeof(e->action));
        gp_strlcpy(e->target, target, sizeof(e->target));
        e->old = old;
        e->new = new;
        e->at_ms = at_ms;
}

/* Who asked: the key (or loopback, or local user), and the server that
 * forwarded the call, as it names itself. */
static void caller(hreq *r, char *out, size_t size) {
        const char *via = gp_http_header(r, GP_FWD_BY);
        if (via && text_ok(via, 64))
                snprintf(out, size, "%s via server %s", gp_http_who(r)[0] ? gp_http_who(r) : "unknown", via);
        else
                gp_strlcpy(out, gp_http_who(r)[0] ? gp_http_who(r) : "unknown", size);
}

/* The change is stored: answer r with status and answer (taken) through
 * the loop, which first appends a's entries to the audit log and stores
 * them.  No answer is kept for an Idempotency-Key (docs/api.md: these
 * calls are idempotent by owner).  a NULL or out of memory: 503 (the
 * change stands; sent again, it is audited). */
static int audited_all(hreq *r, gp_coord_audit *a, int status, json_t *answer) {
        char *body = dump(answer);
        cmd *c = a && body ? gp_cmd_coord_audit(a) : NULL;
        if (!c) {
                free(body);
                gp_coord_audit_free(a);
                return gp_http_send(r, 503, gp_http_error_body("unavailable", "out of memory; send it again"), 1);
        }
        a->status = status;
        a->body = body;
        gp_idem_end(r);
        return gp_http_post(r, c);
}

/* The same with one entry, the caller's. */
static int audited(hreq *r, const char *action, const char *target, json_t *old, json_t *new, int64_t at_ms, int status,
                   json_t *answer) {
        gp_coord_audit *a = calloc(1, sizeof(*a));
        char who[sizeof(a->e[0].who)];
        caller(r, who, sizeof(who));
        audit_add(a, who, action, target, old, new, at_ms);
        return audited_all(r, a, status, answer);
}

/* What the audit log shows of a server row and of a lock. */
static json_t *server_audit_json(const gp_coord_server *sv) {
        return json_pack("{s:s,s:s,s:I,s:I}", "url", sv->url, "role", sv->role, "started_ms",
                         (json_int_t)sv->started_ms, "last_heartbeat_ms", (json_int_t)sv->last_heartbeat_ms);
}

static json_t *lock_audit_json(const gp_coord_lock *l) {
        return json_pack("{s:s,s:I,s:I,s:I}", "owner", l->owner, "fencing_token", (json_int_t)l->fencing_token,
                         "acquired_ms", (json_int_t)l->acquired_ms, "expires_ms", (json_int_t)l->expires_ms);
}

/* ---- handlers ---- */

static int h_servers(hreq *r, const gp_route_arg *a) {
        (void)a;
        int64_t active = 0;
        int answer = 0;
        json_t *list = servers_list(r, &active, &answer);
        if (!list)
                return answer;
        return send_json(r, 200, json_pack("{s:o}", "servers", list));
}

static int h_cluster(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_daemon *d = gp_http_daemon(r);
        int64_t active = 0;
        int answer = 0;
        json_t *list = servers_list(r, &active, &answer);
        if (!list)
                return answer;
        gp_sched_stats st;
        gp_daemon_lock(d);
        int workers = gp_nodes_count_ready(d);
        gp_sched_get_stats(gp_daemon_sched(d), &st);
        gp_daemon_unlock(d);
        double load = st.gpus_usable ? (double)st.gpus_busy / st.gpus_usable : 0.0;
        if (load > 1.0)
                load = 1.0;
        return send_json(r, 200,
                         json_pack("{s:o,s:s,s:i,s:f,s:I}", "servers", list, "leader", gp_coord_leader(d),
                                   "total_workers", workers, "total_load", load, "active_servers", (json_int_t)active));
}

static int h_register(hreq *r, const gp_route_arg *a) {
        (void)a;
        static const char *const keys[] = {"server_id", "url", "role", NULL};
        gp_daemon *d = gp_http_daemon(r);
        gp_coord *c = gp_daemon_coord(d);
        char why[256];
        gp_coord_server sv = {0};
        json_t *j = body_object(r, keys, why, sizeof(why));
        if (!j)
                return bad(r, why);
        const char *e = str_field(j, "server_id", GP_COORD_ID_MAX, true, sv.server_id, sizeof(sv.server_id), why,
                                  sizeof(why));
        if (!e)
                e = str_field(j, "url", GP_COORD_URL_MAX, false, sv.url, sizeof(sv.url), why, sizeof(why));
        gp_strlcpy(sv.role, "follower", sizeof(sv.role));
        if (!e && json_object_get(j, "role") &&
            (e = str_field(j, "role", sizeof(sv.role) - 1, false, sv.role, sizeof(sv.role), why, sizeof(why))) == NULL &&
            !gp_coord_role_ok(sv.role))
                e = "\"role\" must be leader, follower or standby";
        json_decref(j);
        if (e)
                return bad(r, e);
        pthread_mutex_lock(&c->mu);
        int64_t now = 0;
        gp_coord_server old;
        int rc = gp_store_coord_heartbeat(c->s, &sv, true, &now, &old);
        if (rc == -ENOSPC) {
                pthread_mutex_unlock(&c->mu);
                return gp_http_send(r, 429, gp_http_error_body("limit_exceeded", "the registry holds %d servers already",
                                                              GP_COORD_MAX_SERVERS), 0);
        }
        if (rc < 0)
                return store_failed(r, c, rc);
        c->store_ok = true;
        pthread_mutex_unlock(&c->mu);
        sv.last_heartbeat_ms = sv.started_ms = now;
        return audited(r, "coordinator.server.register", sv.server_id,
                       old.server_id[0] ? server_audit_json(&old) : NULL, server_audit_json(&sv), now, 200,
                       server_json(d, &sv, now));
}

static int h_unregister(hreq *r, const gp_route_arg *a) {
        gp_daemon *d = gp_http_daemon(r);
        gp_coord *c = gp_daemon_coord(d);
        const char *id = a->rest ? a->rest : "";
        if (!text_ok(id, GP_COORD_ID_MAX) || strchr(id, '/'))
                return gp_http_send(r, 404, gp_http_error_body("not_found", "no such server"), 0);
        pthread_mutex_lock(&c->mu);
        gp_coord_server old;
        int64_t now = 0;
        int rc = gp_store_coord_unregister(c->s, id, &old);
        if (rc == 0 && gp_store_coord_now(c->s, &now) < 0)
                now = gp_now_ms(); /* removed: the audit's time from this clock then */
        if (rc == -ENOENT) {
                c->store_ok = true;
                pthread_mutex_unlock(&c->mu);
                return gp_http_send(r, 404, gp_http_error_body("not_found", "no such server"), 0);
        }
        if (rc < 0)
                return store_failed(r, c, rc);
        c->store_ok = true;
        pthread_mutex_unlock(&c->mu);
        return audited(r, "coordinator.server.unregister", id, server_audit_json(&old), NULL, now, 200,
                       json_pack("{s:s,s:b}", "server_id", id, "unregistered", true));
}

static int h_heartbeat(hreq *r, const gp_route_arg *a) {
        (void)a;
        static const char *const keys[] = {"server_id", "url", "role", "load", NULL};
        gp_daemon *d = gp_http_daemon(r);
        gp_coord *c = gp_daemon_coord(d);
        char why[256];
        gp_coord_server sv = {0};
        json_t *j = body_object(r, keys, why, sizeof(why));
        if (!j)
                return bad(r, why);
        const char *e = str_field(j, "server_id", GP_COORD_ID_MAX, true, sv.server_id, sizeof(sv.server_id), why,
                                  sizeof(why));
        if (!e)
                e = str_field(j, "url", GP_COORD_URL_MAX, false, sv.url, sizeof(sv.url), why, sizeof(why));
        gp_strlcpy(sv.role, "follower", sizeof(sv.role));
        if (!e && json_object_get(j, "role") &&
            (e = str_field(j, "role", sizeof(sv.role) - 1, false, sv.role, sizeof(sv.role), why, sizeof(why))) == NULL &&
            !gp_coord_role_ok(sv.role))
                e = "\"role\" must be leader, follower or standby";
        json_t *load = json_object_get(j, "load");
        if (!e && load) {
                double v = json_number_value(load);
                if (!json_is_number(load) || !(v >= 0.0 && v <= 1.0))
                        e = "\"load\" must be a number 0..1";
                else
                        sv.load_milli = (int64_t)(v * 1000.0 + 0.5);
        }
        json_decref(j);
        if (e)
                return bad(r, e);
        pthread_mutex_lock(&c->mu);
        int64_t now = 0;
        gp_coord_server old;
        int rc = gp_store_coord_heartbeat(c->s, &sv, false, &now, &old);
        if (rc == -ENOSPC) {
                pthread_mutex_unlock(&c->mu);
                return gp_http_send(r, 429, gp_http_error_body("limit_exceeded", "the registry holds %d servers already",
                                                              GP_COORD_MAX_SERVERS), 0);
        }
        if (rc < 0)
                return store_failed(r, c, rc);
        c->store_ok = true;
        pthread_mutex_unlock(&c->mu);
        json_t *answer = json_pack("{s:s,s:I,s:s}", "server_id", sv.server_id, "last_heartbeat_ms", (json_int_t)now,
                                   "leader", gp_coord_leader(d));
        /* audited when it changes the registry: a server it adds, a new url
         * or role, or one that comes back from inactive; not the beats that
         * move only the time and the load (one a second would bury the log) */
        bool added = !old.server_id[0];
        bool back = !added && now - old.last_heartbeat_ms > (int64_t)gp_daemon_cfg(d)->server_timeout_s * 1000;
        if (!added && !back && !strcmp(old.url, sv.url) && !strcmp(old.role, sv.role))
                return send_json(r, 200, answer);
        sv.last_heartbeat_ms = now;
        sv.started_ms = added ? now : old.started_ms;
        return audited(r, "coordinator.server.heartbeat", sv.server_id, added ? NULL : server_audit_json(&old),
                       server_audit_json(&sv), now, 200, answer);
}

/* lock_id and owner of a lock body (and timeout when want_timeout). */
static const char *lock_body(hreq *r, bool want_timeout, char *lock_id, char *owner, int64_t *timeout_s, char *why,
                             size_t whylen) {
        static const char *const acquire_keys[] = {"lock_id", "owner", "timeout", NULL};
        static const char *const release_keys[] = {"lock_id", "owner", NULL};
        json_t *j = body_object(r, want_timeout ? acquire_keys : release_keys, why, whylen);
        if (!j)
                return why;
        const char *e = str_field(j, "lock_id", GP_COORD_ID_MAX, false, lock_id, GP_COORD_ID_MAX + 1, why, whylen);
        if (!e)
                e = str_field(j, "owner", GP_COORD_ID_MAX, false, owner, GP_COORD_ID_MAX + 1, why, whylen);
        if (!e && want_timeout) {
                json_t *t = json_object_get(j, "timeout");
                if (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > 86400)
                        e = "\"timeout\" must be an integer number of seconds, 1..86400";
                else
                        *timeout_s = json_integer_value(t);
        }
        json_decref(j);
        return e;
}

static int h_acquire(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_coord *c = gp_daemon_coord(gp_http_daemon(r));
        char lock_id[GP_COORD_ID_MAX + 1], owner[GP_COORD_ID_MAX + 1], why[256];
        int64_t timeout_s = 0;
        const char *e = lock_body(r, true, lock_id, owner, &timeout_s, why, sizeof(why));
        if (e)
                return bad(r, e);
        gp_coord_lock l;
        gp_coord_grant *g = malloc(sizeof(*g)); /* ~5 KiB: not on an HTTP thread's stack */
        if (!g)
                return gp_http_send(r, 503, gp_http_error_body("unavailable", "out of memory"), 1);
        pthread_mutex_lock(&c->mu);
        int rc = gp_store_coord_lock_acquire(c->s, lock_id, owner, timeout_s * 1000, &l, g);
        if (rc < 0)
                free(g);
        if (rc == -EBUSY || rc == -ENOSPC) {
                c->store_ok = true;
                pthread_mutex_unlock(&c->mu);
                if (rc == -ENOSPC)
                        return gp_http_send(r, 429, gp_http_error_body("limit_exceeded", "%d locks are held already",
                                                                      GP_COORD_MAX_LOCKS), 0);
                json_t *j = json_pack("{s:b,s:s,s:s,s:I}", "acquired", false, "lock_id", lock_id, "owner", l.owner,
                                      "expires_ms", (json_int_t)l.expires_ms);
                json_t *err = json_pack("{s:s,s:s}", "code", "conflict", "message", "the lock is held by another owner");
                if (j && err)
                        json_object_set_new(j, "error", err);
                else
                        json_decref(err);
                return send_json(r, 409, j);
        }
        if (rc < 0)
                return store_failed(r, c, rc);
        c->store_ok = true;
        pthread_mutex_unlock(&c->mu);
        /* a free lock granted; the holder's renewal (its token kept); or a
         * grant over an expired lock: the same owner's again, or another's (a steal) */
        const gp_coord_lock *prev = &g->prev;
        bool had = prev->lock_id[0] != '\0';
        bool renew = had && prev->fencing_token == l.fencing_token;
        const char *action = "coordinator.lock.acquire";
        if (renew)
                action = "coordinator.lock.renew";
        else if (had && strcmp(prev->owner, l.owner) != 0)
                action = "coordinator.lock.steal";
        /* the store's time of the write: the grant's, or the renewal's (its new expiry less the timeout) */
        int64_t at = renew ? l.expires_ms - timeout_s * 1000 : l.acquired_ms;
        gp_coord_audit *au = calloc(1, sizeof(*au));
        /* first the expiries of other locks this grant removed (nobody's act: they ended at expires_ms) */
        for (size_t i = 0; i < g->nexpired; i++)
                audit_add(au, "lock expiry", "coordinator.lock.expire", g->expired[i].lock_id,
                          lock_audit_json(&g->expired[i]), NULL, g->expired[i].expires_ms);
        char who[sizeof(au->e[0].who)];
        caller(r, who, sizeof(who));
        audit_add(au, who, action, l.lock_id, had ? lock_audit_json(prev) : NULL, lock_audit_json(&l), at);
        free(g);
        return audited_all(r, au, 200,
                           json_pack("{s:b,s:s,s:s,s:I,s:I,s:I}", "acquired", true, "lock_id", l.lock_id, "owner",
                                     l.owner, "fencing_token", (json_int_t)l.fencing_token, "acquired_ms",
                                     (json_int_t)l.acquired_ms, "expires_ms", (json_int_t)l.expires_ms));
}

static int h_release(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_coord *c = gp_daemon_coord(gp_http_daemon(r));
        char lock_id[GP_COORD_ID_MAX + 1], owner[GP_COORD_ID_MAX + 1], why[256];
        const char *e = lock_body(r, false, lock_id, owner, NULL, why, sizeof(why));
        if (e)
                return bad(r, e);
        gp_coord_lock l;
        pthread_mutex_lock(&c->mu);
        int rc = gp_store_coord_lock_release(c->s, lock_id, owner, &l);
        if (rc == -EBUSY || rc == -ENOENT) {
                c->store_ok = true;
                pthread_mutex_unlock(&c->mu);
                if (rc == -ENOENT)
                        return gp_http_send(r, 404, gp_http_error_body("not_found", "lock %s is not held", lock_id), 0);
                json_t *j = json_pack("{s:b,s:s,s:s,s:I}", "released", false, "lock_id", lock_id, "owner", l.owner,
                                      "expires_ms", (json_int_t)l.expires_ms);
                json_t *err = json_pack("{s:s,s:s}", "code", "conflict", "message", "the lock is held by another owner");
                if (j && err)
                        json_object_set_new(j, "error", err);
                else
                        json_decref(err);
                return send_json(r, 409, j);
        }
        if (rc < 0)
                return store_failed(r, c, rc);
        int64_t now = 0;
        if (gp_store_coord_now(c->s, &now) < 0)
                now = gp_now_ms(); /* released: the audit's time from this clock then */
        c->store_ok = true;
        pthread_mutex_unlock(&c->mu);
        return audited(r, "coordinator.lock.release", l.lock_id, lock_audit_json(&l), NULL, now, 200,
                       json_pack("{s:b,s:s,s:I}", "released", true, "lock_id", l.lock_id, "fencing_token",
                                 (json_int_t)l.fencing_token));
}

static int collect_lock(const gp_coord_lock *l, void *ud) {
        json_t *list = ud;
        return json_array_append_new(list, json_pack("{s:s,s:s,s:I,s:I,s:I}", "lock_id", l->lock_id, "owner", l->owner,
                                                     "fencing_token", (json_int_t)l->fencing_token, "acquired_ms",
                                                     (json_int_t)l->acquired_ms, "expires_ms",
                                                     (json_int_t)l->expires_ms)) < 0
                       ? -ENOMEM
                       : 0;
}

static int h_locks(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_coord *c = gp_daemon_coord(gp_http_daemon(r));
        json_t *list = json_array();
        if (!list)
                return gp_http_send(r, 503, NULL, 1);
        pthread_mutex_lock(&c->mu);
        int64_t now = 0;
        int rc = gp_store_coord_locks(c->s, collect_lock, list, &now);
        if (rc < 0) {
                json_decref(list);
                if (rc == -ENOMEM) {
                        pthread_mutex_unlock(&c->mu);
                        return gp_http_send(r, 503, NULL, 1);
                }
                return store_failed(r, c, rc);
        }
        c->store_ok = true;
        pthread_mutex_unlock(&c->mu);
        return send_json(r, 200, json_pack("{s:o,s:I}", "locks", list, "now_ms", (json_int_t)now));
}

static int h_health(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_daemon *d = gp_http_daemon(r);
        gp_coord *c = gp_daemon_coord(d);
        int64_t now = 0;
        pthread_mutex_lock(&c->mu);
        /* an open route: the store is asked at most once a second */
        int64_t mono = gp_mono_ms();
        if (c->checked_mono == 0 || mono - c->checked_mono >= 1000) {
                c->store_ok = gp_store_coord_now(c->s, &now) == 0;
                c->checked_mono = mono;
        }
        bool ok = c->store_ok;
        pthread_mutex_unlock(&c->mu);
        const char *leader = gp_coord_leader(d);
        return send_json(r, 200, json_pack("{s:s,s:b,s:b,s:s,s:s}", "server_id", c->id, "store_reachable", ok,
                                           "leader_known", leader[0] != '\0', "leader", leader, "role", my_role(d)));
}

const gp_route gp_coord_routes[] = {
        {GP_GET, "/api/v1/coordinator/servers", GP_ROUTE_ADMIN, h_servers, NULL, 0},
        {GP_POST, "/api/v1/coordinator/servers/register", GP_ROUTE_ADMIN, h_register, NULL, 0},
        {GP_POST, "/api/v1/coordinator/servers/unregister/{id*}", GP_ROUTE_ADMIN, h_unregister, NULL, 0},
        {GP_POST, "/api/v1/coordinator/heartbeat", GP_ROUTE_ADMIN, h_heartbeat, NULL, 0},
        {GP_GET, "/api/v1/coordinator/cluster", GP_ROUTE_ADMIN, h_cluster, NULL, 0},
        {GP_POST, "/api/v1/coordinator/locks/acquire", GP_ROUTE_ADMIN, h_acquire, NULL, 0},
        {GP_POST, "/api/v1/coordinator/locks/release", GP_ROUTE_ADMIN, h_release, NULL, 0},
        {GP_GET, "/api/v1/coordinator/locks", GP_ROUTE_ADMIN, h_locks, NULL, 0},
        {GP_GET, "/api/v1/coordinator/health", GP_ROUTE_OPEN, h_health, NULL, 0},
        {0, NULL, 0, NULL, NULL, 0},
};
