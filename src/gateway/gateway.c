/* gateway.c - the inference gateway: event loops that each drive one MHD
 * daemon and one upstream client (upclient.h) on one epoll set, sharing the
 * admission state (see gateway.h for the threads and a request's life, and
 * docs/internals/gateway.md).
 *
 * Threads: a request belongs to the loop whose MHD daemon got its
 * connection (q->L); only that loop's thread touches its fields, except
 * q->refs (atomic), q->inbox/q->inext (under the loop's ilock) and
 * q->ticket (under g->lock, with the admission state, the upstream table
 * and the counters).  g->lock is held briefly, never across I/O.
 *
 * Invariants:
 *   - a gw_req is freed when every holder let go: the MHD side
 *     (gp_gw_completed), the gateway side (its loop, once the request left
 *     the admission queue and its transfer ended) and inbox entries; refs
 *     counts them, and only the owning loop drops the last one;
 *   - a parked connection is resumed exactly once per park, by whoever
 *     changes what it waits for (parked says it is parked);
 *   - the client's socket is in the gateway epoll set (fd_watched) only
 *     while its request waits in the admission queue (the connection is
 *     parked then, so MHD cannot have closed it);
 *   - q->x is the request's upstream exchange while running is set; its
 *     callbacks (up_ops) run on the owning loop, and the exchange is gone
 *     once done ran or stop_transfer cancelled it;
 *   - a request has one transfer at a time: its /tokenize call
 *     (tokenizing, before admission; not an upstream's in-flight request)
 *     or its upstream request.
 */
#include "gateway/gateway.h"
#include "gateway/gw-internal.h"

#include "base/buf.h"
#include "base/log.h"
#include "base/util.h"
#include "gateway/upclient.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

__thread loop *gw_tl_loop;

static int64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void gp_gw_on_usage(gp_gw *g, gp_gw_usage_fn *fn, void *ud) {
        g->usage_fn = fn;
        g->usage_ud = ud;
}

bool gp_gw_is_path(const char *url) {
        return !strncmp(url, "/v1/", 4) || !strcmp(url, "/v1");
}

char *gp_gw_error_body(const char *type, const char *code, const char *message) {
        json_t *e = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", message, "type", type, "param", "code",
                              code);
        char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
        return s;
}

/* ------------------------------------------------------------------ */
/* answers on the MHD side                                             */

/* The GPU backend ("sim" or "nvml") named in every answer's
 * X-Gpupool-Backend header, as the rest of the API does; written once by
 * gp_gw_set_backend before the loops start, only read afterwards. */
static const char *backend_name = "unknown";

void gp_gw_set_backend(gp_gw *g, const char *name) {
        (void)g;
        backend_name = name;
}

/* Copy the kept upstream headers onto resp. */
static void add_upstream_headers(struct MHD_Response *resp, gp_buf *h) {
        char *p = h->data;
        while (p && *p) {
                char *eol = strstr(p, "\r\n");
                if (!eol)
                        break;
                *eol = '\0';
                char *colon = strchr(p, ':');
                if (colon) {
                        *colon = '\0';
                        char *v = colon + 1;
                        while (*v == ' ' || *v == '\t')
                                v++;
                        MHD_add_response_header(resp, p, v);
                        *colon = ':';
                }
                *eol = '\r';
                p = eol + 2;
        }
}

/* An answer to an origin of server.allowed_origins names it (CORS). */
static void add_cors(struct MHD_Response *resp, const char *origin) {
        if (!origin)
                return;
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(resp, "Vary", "Origin");
}

/* Queue a whole answer (body malloc'd, taken) with the header lines of
 * lines ("Name: value\r\n", NULL = none) and the CORS headers of origin
 * cors (NULL = none) added. */
static enum MHD_Result queue_buf(struct MHD_Connection *conn, int status, char *body, const char *ctype,
                                 gp_buf *lines, const char *cors) {
        if (!body)
                return MHD_NO;
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", ctype);
        MHD_add_response_header(resp, "X-Gpupool-Backend", backend_name);
        if (lines)
                add_upstream_headers(resp, lines);
        add_cors(resp, cors);
        enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, resp);
        MHD_destroy_response(resp);
        return ret;
}

static void fmt_reset(int64_t ms, char *out, size_t size) {
        if (ms < 1000)
                snprintf(out, size, "%" PRId64 "ms", ms < 0 ? 0 : ms);
        else if (ms < 60000)
                snprintf(out, size, "%" PRId64 ".%03" PRId64 "s", ms / 1000, ms % 1000);
        else
                snprintf(out, size, "%" PRId64 "m%" PRId64 "s", ms / 60000, (ms % 60000) / 1000);
}

int gw_ratelimit_lines(gp_buf *b, const gp_admit_ratelimit *rl, bool retry) {
        char r[48];
        int rc = retry ? gp_buf_printf(b, "retry-after: %" PRId64 "\r\nretry-after-ms: %" PRId64 "\r\n",
                                       (rl->retry_after_ms + 999) / 1000, rl->retry_after_ms)
                       : 0;
        if (rc == 0 && rl->limit_requests) {
                fmt_reset(rl->reset_requests_ms, r, sizeof(r));
                rc = gp_buf_printf(b,
                                   "x-ratelimit-limit-requests: %" PRId64 "\r\nx-ratelimit-remaining-requests: %" PRId64
                                   "\r\nx-ratelimit-reset-requests: %s\r\n",
                                   rl->limit_requests, rl->remaining_requests, r);
        }
        if (rc == 0 && rl->limit_tokens) {
                fmt_reset(rl->reset_tokens_ms, r, sizeof(r));
                rc = gp_buf_printf(b,
                                   "x-ratelimit-limit-tokens: %" PRId64 "\r\nx-ratelimit-remaining-tokens: %" PRId64
                                   "\r\nx-ratelimit-reset-tokens: %s\r\n",
                                   rl->limit_tokens, rl->remaining_tokens, r);
        }
        return rc;
}

int gw_answer_ratelimit(gw_req *q, gp_buf *b) {
        if (!q->rate_limited)
                return 0;
        gp_admit_ratelimit rl;
        pthread_mutex_lock(&q->g->lock);
        gp_admit_ratelimit_get(q->g->admit, q->ticket.tenant, mono_ms(), &rl);
        pthread_mutex_unlock(&q->g->lock);
        return rl.limit_requests || rl.limit_tokens ? gw_ratelimit_lines(b, &rl, false) : 0;
}

const char *gw_backend(void) {
        return backend_name;
}

/* ------------------------------------------------------------------ */
/* request records                                                     */

static void wake_loop(loop *L) {
        uint64_t one = 1;
        ssize_t w = write(L->evfd, &one, sizeof(one));
        (void)w;
}

static void ref(gw_req *q) {
        __atomic_add_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
}

/* Give q to its loop's inbox (any thread).  With own, the caller's
 * reference moves to the inbox; else the inbox takes a new one. */
static void post_ref(gw_req *q, unsigned what, bool own) {
        loop *L = q->L;
        pthread_mutex_lock(&L->ilock);
        bool was_empty = L->inbox == NULL;
        if (!q->inbox) {
                q->inext = L->inbox;
                L->inbox = q;
                if (!own)
                        ref(q);
        } else if (own) {
                __atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL); /* the inbox entry holds one already */
        }
        q->inbox |= what;
        pthread_mutex_unlock(&L->ilock);
        if (was_empty && gw_tl_loop != L)
                wake_loop(L); /* the loop itself looks at its inbox before it sleeps */
}

static void post(gp_gw *g, gw_req *q, unsigned what) {
        (void)g;
        post_ref(q, what, false);
}

static void req_free(gw_req *q) {
        free(q->body);
        free(q->tok_body);
        free(q->ans_body);
        gp_buf_done(&q->hdrs);
        gp_buf_done(&q->out);
        gp_gw_sse_done(&q->sse);
        free(q);
}

/* Drop one reference (the owning loop's thread).  The last one puts it in
 * the graveyard: an epoll batch the loop is working through may still name
 * it, so it is freed once the batch is done (or by gp_gw_free). */
static void unref(gw_req *q) {
        if (__atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL) == 0) {
                q->inext = q->L->grave;
                q->L->grave = q;
        }
}

void gw_post(gw_req *q, unsigned what) {
        post_ref(q, what, false);
}

void gw_unref(gw_req *q) {
        unref(q);
}

static void free_grave(loop *L) {
        while (L->grave) {
                gw_req *q = L->grave;
                L->grave = q->inext;
                req_free(q);
        }
}

static void unwatch(gp_gw *g, gw_req *q) {
        (void)g;
        if (q->fd_watched) {
                gw_unwatch_client(q);
                q->fd_watched = false;
        }
}

/* The connection of q was resumed: its loop must run MHD. */
static void kick_loop(loop *L) {
        if (gw_tl_loop == L)
                L->mhd_kick = true;
        else
                wake_loop(L);
}

/* Resume the parked connection so its handler runs (owning loop). */
static void wake_conn(gw_req *q) {
        if (q->nc) {
                gw_front_wake(q);
                return;
        }
        if (q->parked && !q->client_gone) {
                q->parked = false;
                MHD_resume_connection(q->conn);
                kick_loop(q->L);
        }
}

/* ------------------------------------------------------------------ */
/* the MHD side                                                        */

static model *find_model(gp_gw *g, const char *name) {
        for (int i = 0; i < g->nmodels; i++)
                if (!strcmp(g->models[i].cfg->name, name))
                        return &g->models[i];
        return NULL;
}

/* Fill an immediate answer: an OpenAI-shaped error. */
static gw_req *ans_error(gw_answer *a, int status, const char *type, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static gw_req *ans_error(gw_answer *a, int status, const char *type, const char *code, const char *fmt, ...) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        a->status = status;
        a->body = gp_gw_error_body(type, code, msg);
        return NULL;
}

static gw_req *ans_json(gw_answer *a, json_t *o) {
        a->status = 200;
        a->body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        return NULL;
}

static json_t *models_json(gp_gw *g) {
        json_t *a = json_array();
        for (int i = 0; i < g->nmodels; i++)
                json_array_append_new(a, json_pack("{s:s,s:s,s:i,s:s,s:I}", "id", g->models[i].cfg->name, "object",
                                                   "model", "created", 0, "owned_by", "gpupool", "context_length",
                                                   (json_int_t)g->models[i].cfg->context));
        return json_pack("{s:s,s:o}", "object", "list", "data", a);
}

gw_req *gw_request(gp_gw *g, loop *L, const char *url, const char *method, const gp_gw_caller *who,
                   const char *xp, const char *body, size_t len, gw_answer *ans) {
        bool post_m = !strcmp(method, "POST");
        if (!strcmp(url, "/v1/models")) {
                if (strcmp(method, "GET") && strcmp(method, "HEAD"))
                        return ans_error(ans, 405, "invalid_request_error", "method_not_allowed", "use GET");
                return ans_json(ans, models_json(g));
        }
        if (!strncmp(url, "/v1/models/", 11)) {
                model *m = find_model(g, url + 11);
                if (!m)
                        return ans_error(ans, 404, "invalid_request_error", "model_not_found",
                                         "The model '%.200s' does not exist", url + 11);
                return ans_json(ans, json_pack("{s:s,s:s,s:i,s:s}", "id", m->cfg->name, "object", "model", "created",
                                               0, "owned_by", "gpupool"));
        }
        bool chat = !strcmp(url, "/v1/chat/completions"), compl = !strcmp(url, "/v1/completions"),
             emb = !strcmp(url, "/v1/embeddings");
        if (!chat && !compl && !emb)
                return ans_error(ans, 404, "invalid_request_error", "not_found", "Unknown path %.200s", url);
        if (!post_m)
                return ans_error(ans, 405, "invalid_request_error", "method_not_allowed", "use POST");
        /* tier: the key's default, or X-Priority asking for a tier no more urgent than the key's max */
        int tier = who->default_priority;
        if (xp) {
                int t = gp_gw_parse_priority(xp);
                if (t < 0)
                        return ans_error(ans, 400, "invalid_request_error", "invalid_priority",
                                         "X-Priority: expected 0..9, P0..P9 or critical/high/normal/low/background");
                if (t < who->max_priority) {
                        if (!who->clamp_priority)
                                return ans_error(ans, 403, "permission_error", "priority_not_allowed",
                                                 "X-Priority %d is more urgent than this key's maximum %d", t,
                                                 who->max_priority);
                        t = who->max_priority;
                }
                tier = t;
        }
        json_error_t je;
        json_t *j = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(j)) {
                json_decref(j);
                return ans_error(ans, 400, "invalid_request_error", "invalid_json",
                                 "We could not parse the JSON body of your request: %.200s", je.text);
        }
        gw_req *q = NULL;
        const char *mname = json_string_value(json_object_get(j, "model"));
        if (!mname) {
                ans_error(ans, 400, "invalid_request_error", "missing_model", "you must provide a model parameter");
                goto out;
        }
        model *m = find_model(g, mname);
        if (!m) {
                ans_error(ans, 404, "invalid_request_error", "model_not_found", "The model '%.200s' does not exist",
                          mname);
                goto out;
        }
        if (chat && !json_is_array(json_object_get(j, "messages"))) {
                ans_error(ans, 400, "invalid_request_error", "invalid_request", "messages: expected an array");
                goto out;
        }
        json_t *mt = json_object_get(j, "max_completion_tokens");
        if (!mt)
                mt = json_object_get(j, "max_tokens");
        if (mt && !json_is_null(mt) && (!json_is_integer(mt) || json_integer_value(mt) < 0)) {
                ans_error(ans, 400, "invalid_request_error", "invalid_request",
                          "max_tokens: expected a non-negative integer");
                goto out;
        }
        int64_t prompt = gp_gw_estimate_tokens(j);
        int64_t ctx = m->cfg->context;
        int64_t mt_set = json_is_integer(mt) ? json_integer_value(mt) : -1;
        int64_t max_tokens = mt_set >= 0 ? mt_set : (emb ? 0 : ctx - prompt);
        if (max_tokens < 0)
                max_tokens = 0;
        /* near the context, an upstream's /tokenize counts exactly (on the loop, before
         * admission): the estimate alone does not refuse then, unless no count comes.
         * max_tokens over the context alone is refused now: no count can help. */
        char *tok_body = NULL;
        if (!emb && !m->cfg->tokenize_off && mt_set <= ctx &&
            gp_gw_near_context(prompt, mt_set < 0 ? 0 : mt_set, ctx))
                tok_body = gp_gw_tokenize_body(j);
        if (!emb && !tok_body && max_tokens > ctx - prompt) {
                char msg[400];
                gp_gw_context_message(msg, sizeof(msg), ctx, prompt, max_tokens);
                pthread_mutex_lock(&g->lock);
                g->context_errors++;
                pthread_mutex_unlock(&g->lock);
                ans->status = 400;
                ans->body = gp_gw_error_body("invalid_request_error", "context_length_exceeded", msg);
                goto out;
        }
        json_t *st = json_object_get(j, "stream");
        bool stream = !emb && json_is_true(st);
        bool client_usage = false;
        char *up_body = NULL;
        size_t up_len = len;
        if (stream) {
                json_t *so = json_object_get(j, "stream_options");
                client_usage = json_is_object(so) && json_is_true(json_object_get(so, "include_usage"));
                if (!client_usage && !so && json_object_size(j) > 0) {
                        /* ask for the usage chunk on the way up (stripped on the way
                         * down): with no stream_options in the body (duplicates are
                         * refused), the key goes in before the object's closing brace
                         * of the client's own text, which saves serializing the whole
                         * request again on every streamed request */
                        static const char key[] = ",\"stream_options\":{\"include_usage\":true}";
                        size_t k = len;
                        while (k > 0 && (body[k - 1] == ' ' || body[k - 1] == '\t' || body[k - 1] == '\n' ||
                                         body[k - 1] == '\r'))
                                k--;
                        if (k > 0 && body[k - 1] == '}' && (up_body = malloc(len + sizeof(key)))) {
                                memcpy(up_body, body, k - 1);
                                memcpy(up_body + k - 1, key, sizeof(key) - 1);
                                memcpy(up_body + k - 1 + sizeof(key) - 1, body + k - 1, len - (k - 1));
                                up_len = len + sizeof(key) - 1;
                                up_body[up_len] = '\0';
                        }
                }
                if (!client_usage && !up_body) {
                        /* ask for the usage chunk on the way up; it is stripped on the way down */
                        if (!json_is_object(so)) {
                                so = json_object();
                                json_object_set_new(j, "stream_options", so);
                        }
                        json_object_set_new(so, "include_usage", json_true());
                        up_body = json_dumps(j, JSON_COMPACT);
                        up_len = up_body ? strlen(up_body) : 0;
                }
        }
        if (!up_body) {
                up_body = malloc(len + 1);
                if (up_body) {
                        memcpy(up_body, body ? body : "", len);
                        up_body[len] = '\0';
                }
        }
        q = up_body ? calloc(1, sizeof(*q)) : NULL;
        if (!q) {
                free(up_body);
                free(tok_body);
                ans_error(ans, 503, "server_error", "unavailable", "out of memory");
                goto out;
        }
        q->g = g;
        q->L = L;
        q->m = m;
        gp_strlcpy(q->path, url, sizeof(q->path));
        q->body = up_body;
        q->body_len = up_len;
        q->stream = stream;
        q->sse.strip = stream && !client_usage;
        q->prompt_est = prompt;
        q->max_tokens = mt_set;
        q->tok_body = tok_body;
        q->tok_wanted = tok_body != NULL;
        q->tok_up = -1;
        q->ticket.tier = tier;
        q->ticket.tokens = prompt + max_tokens;
        q->ticket.ud = q;
        q->up = -1;
        q->client_fd = -1;
        q->t0_ms = mono_ms();
        q->t0_us = mono_us();
        gp_strlcpy(q->tenant, who->tenant, sizeof(q->tenant));
        gp_buf_init(&q->hdrs, MAX_HEADER_BYTES);
        gp_buf_init(&q->out, stream ? 0 : (size_t)g->cfg.max_response_bytes);
        if (stream && (q->out.data = malloc(STREAM_OUT_START))) {
                /* one allocation where doubling from 64 bytes took four more reallocs on
                 * every streamed request (the buffer is drained, not freed, per pass) */
                q->out.alloc = STREAM_OUT_START;
                q->out.data[0] = '\0';
        }
        q->refs = 2; /* the client side and the gateway side */
        q->gw_held = true;
        pthread_mutex_lock(&g->lock);
        int tn = gp_admit_tenant(g->admit, who->tenant, &who->limits, mono_ms());
        pthread_mutex_unlock(&g->lock);
        if (tn < 0 || __atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
                req_free(q);
                q = NULL;
                ans_error(ans, 503, "server_error", "unavailable",
                          tn < 0 ? "too many tenants use the gateway" : "the server is stopping");
                goto out;
        }
        q->ticket.tenant = tn;
        /* the limits gp_admit_ratelimit_get reports: known now, so an answer under none
         * takes no lock for its headers */
        q->rate_limited = g->cfg.max_rps > 0 || g->cfg.max_tokens_per_sec > 0 || who->limits.rpm > 0 || who->limits.tpm > 0;
out:
        json_decref(j);
        return q;
}

enum MHD_Result gp_gw_handle(gp_gw *g, struct MHD_Connection *conn, const char *url, const char *method,
                             const gp_gw_caller *who, const char *body, size_t len, void **slot) {
        gw_answer a = {0};
        const char *xp = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Priority");
        gw_req *q = gw_request(g, gw_tl_loop ? gw_tl_loop : &g->loops[0], url, method, who, xp, body, len, &a);
        if (!q)
                return queue_buf(conn, a.status, a.body, "application/json", NULL, who->cors_origin);
        q->conn = conn;
        q->cors = who->cors_origin;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        q->client_fd = ci ? ci->connect_fd : -1;
        *slot = q;
        q->parked = true;
        MHD_suspend_connection(conn);
        post(g, q, IN_NEW);
        return MHD_YES;
}

/* The streaming reader: hand out what is buffered, park when nothing is. */
static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max) {
        gw_req *q = cls;
        gp_gw *g = q->g;
        (void)pos;
        size_t avail = q->out.len - q->out_off;
        if (avail) {
                size_t n = avail < max ? avail : max;
                memcpy(buf, q->out.data + q->out_off, n);
                q->out_off += n;
                if (q->out_off == q->out.len) {
                        gp_buf_reset(&q->out);
                        q->out_off = 0;
                }
                if (q->paused && q->out.len - q->out_off < STREAM_HIGH_WATER / 2)
                        post(g, q, IN_UNPAUSE);
                return (ssize_t)n;
        }
        if (q->up_done || q->client_gone || __atomic_load_n(&g->stopped, __ATOMIC_ACQUIRE)) {
                bool bad = q->up_failed || !q->up_done;
                return bad ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
        }
        q->parked = true;
        MHD_suspend_connection(q->conn);
        return 0;
}

enum MHD_Result gp_gw_resume(gp_gw *g, struct MHD_Connection *conn, void *slot) {
        gw_req *q = slot;
        if (q->close_conn || q->client_gone)
                return MHD_NO;
        if (q->responding)
                return MHD_YES; /* MHD does not call the handler again once a response is queued */
        if (q->ans_status) {
                char *body = q->ans_body;
                q->ans_body = NULL;
                q->responding = true;
                unwatch(g, q);
                gp_buf lines;
                gp_buf_init(&lines, 0);
                if (q->ans_rl && gw_ratelimit_lines(&lines, &q->rl, true) < 0)
                        gp_buf_reset(&lines);
                enum MHD_Result ret = queue_buf(conn, q->ans_status, body, "application/json", &lines, q->cors);
                gp_buf_done(&lines);
                return ret;
        }
        bool have = q->status > 0 && (q->up_done || q->out.len > q->out_off);
        if (!have) {
                q->parked = true;
                MHD_suspend_connection(conn);
                return MHD_YES;
        }
        struct MHD_Response *resp;
        if (q->up_done && !q->up_failed) {
                /* complete: one buffer, byte for byte */
                size_t n = q->out.len - q->out_off;
                char *b = q->out_off ? NULL : gp_buf_steal(&q->out);
                if (!b) {
                        b = malloc(n + 1);
                        if (b)
                                memcpy(b, q->out.data + q->out_off, n);
                        gp_buf_reset(&q->out);
                        q->out_off = 0;
                }
                resp = b ? MHD_create_response_from_buffer(n, b, MHD_RESPMEM_MUST_FREE) : NULL;
                if (!resp)
                        free(b);
        } else {
                resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, reader, q, NULL);
        }
        if (!resp)
                return MHD_NO;
        add_upstream_headers(resp, &q->hdrs);
        gp_buf rl;
        gp_buf_init(&rl, 0);
        if (gw_answer_ratelimit(q, &rl) == 0)
                add_upstream_headers(resp, &rl);
        gp_buf_done(&rl);
        MHD_add_response_header(resp, "X-Gpupool-Backend", backend_name);
        add_cors(resp, q->cors);
        if (q->stream) {
                MHD_add_response_header(resp, "Cache-Control", "no-cache");
                MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        }
        int status = (int)q->status;
        q->responding = true;
        unwatch(g, q); /* MHD watches the connection from now on */
        enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, resp);
        MHD_destroy_response(resp);
        return ret;
}

void gp_gw_completed(gp_gw *g, void *slot) {
        gw_req *q = slot;
        unwatch(g, q);
        q->client_gone = true;
        q->parked = false;
        if (q->gw_held)
                post(g, q, IN_ABORT);
        unref(q);
}

/* ------------------------------------------------------------------ */
/* a loop: upstream transfers                                          */

static void finish(gp_gw *g, gw_req *q);
static void transfer_done(gp_gw *g, gw_req *q, int rc);
static void tokenize_done(gp_gw *g, gw_req *q, int rc);

static int pick_upstream(gp_gw *g, gw_req *q, int64_t now) {
        model *m = q->m;
        int best = -1;
        for (int pass = 0; pass < 2 && best < 0; pass++)
                for (int i = 0; i < m->nups; i++) {
                        upstream *u = &m->ups[i];
                        if (q->tried[i] || u->off)
                                continue;
                        if (pass == 0 && u->down_until_ms > now)
                                continue;
                        if (best < 0 || (pass == 0 ? u->inflight < m->ups[best].inflight
                                                   : u->down_until_ms < m->ups[best].down_until_ms))
                                best = i;
                }
        return best;
}

/* The transfer of q ended (its exchange is gone): the loop's and the
 * upstream's counts (owning loop). */
static void transfer_released(gp_gw *g, gw_req *q) {
        if (!q->running)
                return;
        q->x = NULL;
        q->running = false;
        q->paused = false;
        q->L->nrunning--;
        if (q->up >= 0) {
                pthread_mutex_lock(&g->lock);
                q->m->ups[q->up].inflight--;
                pthread_mutex_unlock(&g->lock);
        }
}

/* Detach q's transfer, abandoning it when it still runs (owning loop). */
static void stop_transfer(gp_gw *g, gw_req *q) {
        if (!q->running)
                return;
        gp_uc_cancel(q->L->uc, q->x);
        transfer_released(g, q);
}

/* The upstream answer's head: its status, and the headers kept for the
 * client.  A 5xx is abandoned for another upstream when one is left and
 * nothing went to the client yet. */
static int up_head(void *ud, int status, const gp_h1_header *h, size_t n) {
        gw_req *q = ud;
        gp_gw *g = q->g;
        q->status = status;
        gp_buf_reset(&q->hdrs);
        if (q->tokenizing)
                return 0;
        if (status >= 500 && q->attempts < 2 && !q->responding) {
                pthread_mutex_lock(&g->lock);
                bool other = pick_upstream(g, q, mono_ms()) >= 0;
                pthread_mutex_unlock(&g->lock);
                if (other) {
                        q->retry_5xx = true;
                        return -1;
                }
        }
        for (size_t i = 0; i < n; i++) {
                if (gp_h1_hop_by_hop(h[i].name, h[i].name_len) ||
                    (h[i].name_len > 12 && !strncasecmp(h[i].name, "x-ratelimit-", 12)))
                        continue; /* the client's limits are the gateway's (added to the answer), not the upstream's */
                if (gp_buf_append(&q->hdrs, h[i].name, h[i].name_len) < 0 || gp_buf_append(&q->hdrs, ": ", 2) < 0 ||
                    gp_buf_append(&q->hdrs, h[i].value, h[i].value_len) < 0 || gp_buf_append(&q->hdrs, "\r\n", 2) < 0)
                        return -1; /* too many header bytes: fail the transfer */
        }
        return 0;
}

static int out_append(void *ud, const char *p, size_t n) {
        gw_req *q = ud;
        return gp_buf_append(&q->out, p, n);
}

/* The upstream answer's body: kept whole (non-streaming), or filtered and
 * handed on as it comes (streaming), pausing the upstream while the
 * client is slow. */
static int up_data(void *ud, const char *p, size_t len) {
        gw_req *q = ud;
        if (q->client_gone)
                return -1;
        if (q->tokenizing)
                return q->out.len + len > TOKENIZE_MAX_BYTES || gp_buf_append(&q->out, p, len) < 0 ? -1 : 0;
        if (!q->first_us && len)
                q->first_us = mono_us(); /* the answer's first byte (time to first token) */
        if (!q->stream) {
                if (gp_buf_append(&q->out, p, len) < 0) {
                        q->too_big = true; /* over max_response_bytes (nothing of p was kept) */
                        return -1;
                }
                return 0;
        }
        if (q->status == 200) {
                if (gp_gw_sse_feed(&q->sse, p, len, out_append, q) < 0)
                        return -1;
        } else if (gp_buf_append(&q->out, p, len) < 0) {
                return -1;
        }
        if (q->out.len > q->out_off)
                wake_conn(q);
        if (q->out.len - q->out_off >= STREAM_HIGH_WATER) {
                q->paused = true;
                return 1;
        }
        return 0;
}

static void up_done(void *ud, int rc) {
        gw_req *q = ud;
        if (q->tokenizing)
                tokenize_done(q->g, q, rc);
        else
                transfer_done(q->g, q, rc);
}

static const gp_uc_ops up_ops = {.head = up_head, .data = up_data, .done = up_done};

/* Send q to upstream u of its model (path, body, timeouts); the loop
 * counts it running.  -1 when it cannot start. */
static int send_to(gp_gw *g, gw_req *q, const char *url, const char *path, const char *body, size_t len,
                   int connect_ms, int total_ms) {
        gp_uc_req r = {.method = "POST", .path = path, .content_type = "application/json", .body = body,
                       .body_len = len, .connect_timeout_ms = connect_ms,
                       .idle_timeout_ms = g->cfg.idle_timeout_sec * 1000, .total_timeout_ms = total_ms};
        gp_buf_reset(&q->hdrs);
        gp_buf_reset(&q->out);
        q->out_off = 0;
        q->status = 0;
        if (gp_uc_start(q->L->uc, url, &r, &up_ops, q, &q->x) < 0)
                return -1;
        q->running = true;
        q->L->nrunning++;
        return 0;
}

/* Start (or restart) q's transfer on an upstream, on q's loop (the caller
 * is that loop).  -1 when none is left. */
static int start(gp_gw *g, gw_req *q) {
        char url[GP_CFG_URL_MAX];
        pthread_mutex_lock(&g->lock);
        int u = pick_upstream(g, q, mono_ms());
        if (u >= 0) {
                gp_strlcpy(url, q->m->ups[u].url, sizeof(url));
                q->m->ups[u].inflight++;
                q->m->ups[u].requests++;
        }
        pthread_mutex_unlock(&g->lock);
        if (u < 0)
                return -1;
        q->retry_5xx = q->too_big = false;
        gp_gw_sse_done(&q->sse);
        bool strip = q->sse.strip;
        memset(&q->sse, 0, sizeof(q->sse));
        q->sse.strip = strip;
        q->up = u;
        q->tried[u] = true;
        q->attempts++;
        q->sent_us = mono_us();
        q->first_us = 0;
        if (send_to(g, q, url, q->path, q->body, q->body_len, g->cfg.connect_timeout_ms,
                    g->cfg.request_timeout_sec * 1000) < 0) {
                pthread_mutex_lock(&g->lock);
                q->m->ups[u].inflight--;
                pthread_mutex_unlock(&g->lock);
                q->up = -1;
                return -1;
        }
        return 0;
}

/* Ask an upstream of q's model that may have POST /tokenize for the exact
 * prompt tokens (owning loop), bounded by tokenize_timeout_ms.  -1 when
 * none may (the caller goes on with the estimate). */
static int tokenize_start(gp_gw *g, gw_req *q) {
        model *m = q->m;
        int64_t now = mono_ms();
        char url[GP_CFG_URL_MAX];
        int u = -1;
        pthread_mutex_lock(&g->lock);
        for (int i = 0; i < m->nups; i++) {
                const upstream *x = &m->ups[i];
                if (x->off || x->down_until_ms > now || x->tokenize < 0 || x->tok_skip_until_ms > now)
                        continue;
                if (u < 0 || x->inflight < m->ups[u].inflight)
                        u = i;
        }
        if (u >= 0) {
                gp_strlcpy(url, m->ups[u].url, sizeof(url));
                g->tokenize_calls++;
        }
        pthread_mutex_unlock(&g->lock);
        if (u < 0)
                return -1;
        int tmo = g->cfg.tokenize_timeout_ms;
        q->up = -1; /* not counted in the upstream's in-flight requests */
        q->tok_up = u;
        q->tokenizing = true;
        if (send_to(g, q, url, "/tokenize", q->tok_body, strlen(q->tok_body),
                    g->cfg.connect_timeout_ms < tmo ? g->cfg.connect_timeout_ms : tmo, tmo) < 0) {
                q->tokenizing = false;
                return -1;
        }
        return 0;
}

static void counted(gp_gw *g, gw_req *q, int64_t exact);

/* The /tokenize call of q ended (owning loop): remember whether the
 * upstream has the endpoint, then the context check with the count, or
 * with the estimate when none came (error, timeout, odd answer). */
static void tokenize_done(gp_gw *g, gw_req *q, int rc) {
        transfer_released(g, q);
        q->tokenizing = false;
        int64_t count = -1;
        bool ok = rc == GP_UC_OK && q->status == 200 && gp_gw_tokenize_count(q->out.data, q->out.len, &count) == 0;
        if (!ok)
                count = -1;
        int known = ok ? 1 : rc == GP_UC_OK && (q->status == 404 || q->status == 405) ? -1 : 0;
        if (rc != GP_UC_OK && rc != GP_UC_EABORTED && q->tok_up >= 0) {
                /* stalled or unreachable: the next near-limit requests go on with the
                 * estimate at once instead of each waiting tokenize_timeout_ms */
                pthread_mutex_lock(&g->lock);
                q->m->ups[q->tok_up].tok_skip_until_ms = mono_ms() + (int64_t)g->cfg.upstream_down_sec * 1000;
                pthread_mutex_unlock(&g->lock);
        }
        if (known && q->tok_up >= 0) {
                char url[GP_CFG_URL_MAX];
                pthread_mutex_lock(&g->lock);
                upstream *u = &q->m->ups[q->tok_up];
                bool news = u->tokenize != known && known < 0;
                u->tokenize = known;
                gp_strlcpy(url, u->url, sizeof(url));
                pthread_mutex_unlock(&g->lock);
                if (news)
                        gp_info("gateway: upstream %s has no /tokenize (HTTP %ld): model %s's prompts are counted "
                                "by estimate there",
                                url, q->status, q->m->cfg->name);
        }
        gp_buf_reset(&q->hdrs);
        gp_buf_reset(&q->out);
        q->status = 0;
        if (q->client_gone) {
                finish(g, q);
                return;
        }
        counted(g, q, count);
}

/* Answer q with a gateway-made error (the connection is parked). */
static void answer(gw_req *q, int status, const char *type, const char *code, const char *msg) {
        free(q->ans_body);
        q->ans_body = gp_gw_error_body(type, code, msg);
        q->ans_status = status;
        wake_conn(q);
}

/* Owning loop: reported to the usage callback (gp_gw_on_usage) after the batch. */
static void record_usage(loop *g, gw_req *q, int64_t prompt, int64_t completion) {
        if (g->nusage == g->capusage) {
                size_t cap = g->capusage ? g->capusage * 2 : 64;
                usage_rec *u = realloc(g->usage, cap * sizeof(*u));
                if (!u)
                        return;
                g->usage = u;
                g->capusage = cap;
        }
        usage_rec *u = &g->usage[g->nusage++];
        gp_strlcpy(u->tenant, q->tenant, sizeof(u->tenant));
        gp_strlcpy(u->model, q->m->cfg->name, sizeof(u->model));
        u->prompt = prompt;
        u->completion = completion;
}

/* Usage of a complete non-streaming answer: its "usage" object. */
static bool body_usage(const gp_buf *b, int64_t *prompt, int64_t *completion) {
        if (!b->data || !b->len)
                return false;
        const char *k = memmem(b->data, b->len, "\"usage\"", 7);
        if (!k)
                return false;
        const char *p = k + 7, *end = b->data + b->len;
        while (p < end && (*p == ' ' || *p == ':' || *p == '\n' || *p == '\r' || *p == '\t'))
                p++;
        if (p >= end || *p != '{')
                return false;
        json_t *u = json_loadb(p, (size_t)(end - p), JSON_DISABLE_EOF_CHECK, NULL);
        if (!json_is_object(u)) {
                json_decref(u);
                return false;
        }
        *prompt = json_integer_value(json_object_get(u, "prompt_tokens"));
        *completion = json_integer_value(json_object_get(u, "completion_tokens"));
        json_decref(u);
        return true;
}

static void drop_from_list(loop *L, gw_req *q) {
        for (size_t i = 0; i < L->nreqs; i++)
                if (L->reqs[i] == q) {
                        L->reqs[i] = L->reqs[--L->nreqs];
                        return;
                }
}

/* An answered request's timings, into its model's and its tenant's
 * histograms (g->lock held; no allocation).  Generation time, for
 * tokens/s: from the answer's first byte to its end when streamed (the
 * decoding rate), from the request's send to the end otherwise (a whole
 * answer comes at once), or when a stream came in one piece. */
static void record_timing(gp_gw *g, gw_req *q, int64_t completion) {
        int64_t end = mono_us();
        gw_timing *t[2] = {&q->m->timing, &g->tenants[q->ticket.tenant].timing};
        int64_t gen0 = q->stream && q->first_us && end - q->first_us >= 1000 ? q->first_us : q->sent_us;
        for (int i = 0; i < 2; i++) {
                gw_hist_add(&t[i]->latency, GW_SCALE_SECONDS, (double)(end - q->t0_us) / 1e6);
                if (q->first_us)
                        gw_hist_add(&t[i]->ttft, GW_SCALE_SECONDS, (double)(q->first_us - q->t0_us) / 1e6);
                if (completion > 0 && end > gen0)
                        gw_hist_add(&t[i]->rate, GW_SCALE_RATE, (double)completion * 1e6 / (double)(end - gen0));
        }
}

/* The gateway side lets go of q (its transfer and admission ended). */
static void finish(gp_gw *g, gw_req *q) {
        if (!q->gw_held)
                return;
        stop_transfer(g, q);
        bool used = false;
        int64_t prompt = -1, completion = -1;
        pthread_mutex_lock(&g->lock);
        if (q->ticket.state == GP_ADMIT_QUEUED) {
                gp_admit_cancel(g->admit, &q->ticket);
                q->m->waiting--;
        }
        if (q->ticket.state == GP_ADMIT_RUNNING) {
                q->m->in_flight--;
                if (q->stream && q->sse.usage_seen) {
                        prompt = q->sse.prompt_tokens;
                        completion = q->sse.completion_tokens;
                } else if (q->stream && q->up_done && q->status == 200) {
                        prompt = q->prompt_est;
                        completion = q->sse.chunks;
                } else if (!q->stream && q->up_done && !body_usage(&q->out, &prompt, &completion)) {
                        prompt = completion = -1;
                }
                if (q->up_done && !q->up_failed && q->status == 200)
                        record_timing(g, q, completion);
                int64_t real = prompt >= 0 && completion >= 0 ? prompt + completion : (q->up_done ? 0 : -1);
                gp_admit_done(g->admit, &q->ticket, real, mono_ms());
                q->m->requests++;
                if (prompt >= 0 && completion >= 0) {
                        q->m->prompt_tokens += (uint64_t)prompt;
                        q->m->completion_tokens += (uint64_t)completion;
                        tstats *ts = &g->tenants[q->ticket.tenant];
                        ts->prompt_tokens += (uint64_t)prompt;
                        ts->completion_tokens += (uint64_t)completion;
                        used = true;
                }
        }
        pthread_mutex_unlock(&g->lock);
        if (used)
                record_usage(q->L, q, prompt, completion);
        q->gw_held = false;
        unwatch(g, q);
        drop_from_list(q->L, q);
        unref(q);
}

static void count_error(gp_gw *g, gw_req *q) {
        pthread_mutex_lock(&g->lock);
        g->upstream_errors++;
        g->tenants[q->ticket.tenant].errors++;
        pthread_mutex_unlock(&g->lock);
}

/* q's upstream exchange ended with rc (a GP_UC_* result; owning loop):
 * answered, retried once elsewhere, or a 502. */
static void transfer_done(gp_gw *g, gw_req *q, int rc) {
        int64_t now = mono_ms();
        upstream *u = q->up >= 0 ? &q->m->ups[q->up] : NULL;
        transfer_released(g, q);
        bool retry5 = q->retry_5xx;
        if (q->client_gone) {
                finish(g, q);
                return;
        }
        bool failed = rc != GP_UC_OK;
        if (failed && !q->responding) {
                if (u && rc != GP_UC_EABORTED) {
                        char url[GP_CFG_URL_MAX];
                        pthread_mutex_lock(&g->lock);
                        u->failures++;
                        u->down_until_ms = now + (int64_t)g->cfg.upstream_down_sec * 1000;
                        gp_strlcpy(url, u->url, sizeof(url));
                        pthread_mutex_unlock(&g->lock);
                        gp_warn("gateway: upstream %s failed (%s); down for %ds", url, gp_uc_strerror(rc),
                                g->cfg.upstream_down_sec);
                }
                if (q->attempts < 2) {
                        pthread_mutex_lock(&g->lock);
                        g->retries++;
                        pthread_mutex_unlock(&g->lock);
                        if (start(g, q) == 0)
                                return;
                }
                count_error(g, q);
                char msg[300];
                if (rc == GP_UC_EABORTED && q->too_big)
                        snprintf(msg, sizeof(msg), "the upstream answer is over %" PRId64 " bytes",
                                 g->cfg.max_response_bytes);
                else if (retry5)
                        snprintf(msg, sizeof(msg), "the upstream answered %ld", q->status);
                else
                        snprintf(msg, sizeof(msg), "the upstream failed: %s", gp_uc_strerror(rc));
                answer(q, 502, "upstream_error", "bad_gateway", msg);
                finish(g, q);
                return;
        }
        if (q->stream && q->status == 200)
                gp_gw_sse_end(&q->sse, out_append, q);
        q->up_done = true;
        q->up_failed = failed;
        if (failed)
                count_error(g, q);
        wake_conn(q);
        finish(g, q);
}

/* ------------------------------------------------------------------ */
/* a loop: admission                                                   */

/* No upstream of q's model can be tried: 503 while a served model has no
 * ready replica, else 502. */
static void no_upstream(gw_req *q) {
        bool any_on = false;
        pthread_mutex_lock(&q->g->lock);
        for (int i = 0; i < q->m->nups; i++)
                any_on |= !q->m->ups[i].off;
        pthread_mutex_unlock(&q->g->lock);
        if (!any_on) {
                char msg[300];
                snprintf(msg, sizeof(msg), "the model '%.200s' is not ready yet (its server is starting)",
                         q->m->cfg->name);
                answer(q, 503, "server_error", "model_not_ready", msg);
                return;
        }
        answer(q, 502, "upstream_error", "bad_gateway", "no upstream could take the request");
}

static void refuse_429(gp_gw *g, gw_req *q, const char *msg) {
        pthread_mutex_lock(&g->lock);
        gp_admit_ratelimit_get(g->admit, q->ticket.tenant, mono_ms(), &q->rl);
        pthread_mutex_unlock(&g->lock);
        q->ans_rl = true;
        answer(q, 429, "rate_limit_error", "rate_limit_exceeded", msg);
}

/* q's wait passed queue_timeout_sec (owning loop; it left the queue). */
static void on_expired(gp_gw *g, gw_req *q) {
        if (!q->gw_held)
                return;
        unwatch(g, q);
        char msg[200];
        snprintf(msg, sizeof(msg), "Rate limit reached: waited %d s in the queue (tier %d)", g->cfg.queue_timeout_sec,
                 q->ticket.tier);
        refuse_429(g, q, msg);
        finish(g, q);
}

/* q was admitted (owning loop): send it upstream. */
static void on_admitted(gp_gw *g, gw_req *q) {
        if (!q->gw_held || q->running || q->up_done || q->ans_status)
                return;
        unwatch(g, q);
        if (start(g, q) < 0) {
                count_error(g, q);
                no_upstream(q);
                finish(g, q);
        }
}

/* Take what admission decided: expired and admitted tickets.  Those of
 * this loop are handled here; those of other loops go to their inboxes
 * (their transfers live in their loops' upstream clients). */
static void admit_some(gp_gw *g, loop *me) {
        struct {
                gw_req *q;
                unsigned what;
        } got[64];
        size_t n;
        do {
                n = 0;
                int64_t now = mono_ms();
                gp_admit_ticket *t;
                pthread_mutex_lock(&g->lock);
                while (n < 64 && (t = gp_admit_expired(g->admit, now))) {
                        gw_req *q = t->ud;
                        q->m->waiting--;
                        ref(q); /* held until handled or posted: its loop may finish it meanwhile */
                        got[n].q = q;
                        got[n++].what = IN_EXPIRED;
                }
                while (n < 64 && (t = gp_admit_next(g->admit, now))) {
                        gw_req *q = t->ud;
                        q->m->waiting--;
                        q->m->in_flight++;
                        ref(q);
                        got[n].q = q;
                        got[n++].what = IN_START;
                }
                pthread_mutex_unlock(&g->lock);
                for (size_t i = 0; i < n; i++) {
                        gw_req *q = got[i].q;
                        if (q->L != me) {
                                post_ref(q, got[i].what, true);
                                continue;
                        }
                        if (got[i].what == IN_EXPIRED)
                                on_expired(g, q);
                        else
                                on_admitted(g, q);
                        unref(q);
                }
        } while (n == 64);
}

/* Queue q for admission (owning loop). */
static void submit(gp_gw *g, gw_req *q) {
        loop *L = q->L;
        int rc = -ESHUTDOWN;
        if (!__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
                pthread_mutex_lock(&g->lock);
                rc = gp_admit_submit(g->admit, &q->ticket, mono_ms());
                if (rc == 0) {
                        q->m->waiting++;
                        q->m->last_used_ms = gp_now_ms(); /* for unloading the least recently used model */
                }
                pthread_mutex_unlock(&g->lock);
        }
        if (rc == -ESHUTDOWN) {
                answer(q, 503, "server_error", "unavailable", "the server is stopping");
                finish(g, q);
        } else if (rc < 0) {
                refuse_429(g, q, "Rate limit reached: the gateway queue is full");
                finish(g, q);
        } else {
                admit_some(g, L);
                pthread_mutex_lock(&g->lock);
                bool queued = q->ticket.state == GP_ADMIT_QUEUED;
                pthread_mutex_unlock(&g->lock);
                if (queued && q->gw_held && q->client_fd >= 0 && !q->fd_watched) {
                        /* it waits: notice its client hanging up */
                        if (gw_watch_client(L, q) == 0)
                                q->fd_watched = true;
                }
        }
}

/* The context check of a request that waited for a count (owning loop):
 * exact >= 0 is the upstream's count of the prompt, -1 = none came (the
 * estimate decides, as for a request that was never near the context).
 * Refused (400) or submitted. */
static void counted(gp_gw *g, gw_req *q, int64_t exact) {
        int64_t prompt = exact >= 0 ? exact : q->prompt_est;
        int64_t ctx = q->m->cfg->context;
        int64_t max_tokens = q->max_tokens >= 0 ? q->max_tokens : ctx - prompt;
        if (max_tokens < 0)
                max_tokens = 0;
        if (q->tok_wanted && exact < 0) {
                pthread_mutex_lock(&g->lock);
                g->tokenize_fallbacks++;
                pthread_mutex_unlock(&g->lock);
        }
        if (max_tokens > ctx - prompt) {
                char msg[400];
                gp_gw_context_message(msg, sizeof(msg), ctx, prompt, max_tokens);
                pthread_mutex_lock(&g->lock);
                g->context_errors++;
                pthread_mutex_unlock(&g->lock);
                answer(q, 400, "invalid_request_error", "context_length_exceeded", msg);
                finish(g, q);
                return;
        }
        q->prompt_est = prompt;
        q->ticket.tokens = prompt + max_tokens;
        submit(g, q);
}

static void take_inbox(gp_gw *g, loop *L) {
        pthread_mutex_lock(&L->ilock);
        gw_req *list = L->inbox;
        L->inbox = NULL;
        for (gw_req *q = list; q; q = q->inext)
                q->inbox |= 0x100; /* taken: a post from now on makes a new entry */
        pthread_mutex_unlock(&L->ilock);
        while (list) {
                gw_req *q = list;
                pthread_mutex_lock(&L->ilock);
                list = q->inext;
                unsigned what = q->inbox & 0xff;
                q->inbox = 0;
                q->inext = NULL;
                pthread_mutex_unlock(&L->ilock);
                if (q->gw_held) {
                        if ((what & IN_NEW) && !q->client_gone) {
                                if (L->nreqs == L->capreqs) {
                                        size_t cap = L->capreqs ? L->capreqs * 2 : 256;
                                        gw_req **r = realloc(L->reqs, cap * sizeof(*r));
                                        if (r) {
                                                L->reqs = r;
                                                L->capreqs = cap;
                                        }
                                }
                                if (L->nreqs < L->capreqs)
                                        L->reqs[L->nreqs++] = q;
                                if (!q->tok_wanted || tokenize_start(g, q) < 0)
                                        counted(g, q, -1);
                        }
                        if ((what & IN_ABORT) || q->client_gone) {
                                finish(g, q);
                        } else {
                                if (what & IN_EXPIRED)
                                        on_expired(g, q);
                                if (what & IN_START)
                                        on_admitted(g, q);
                                if ((what & IN_UNPAUSE) && q->paused && q->running) {
                                        q->paused = false;
                                        gp_uc_resume(L->uc, q->x);
                                }
                        }
                }
                unref(q); /* the inbox's reference */
        }
}

static void hang_up(gp_gw *g, gw_req *q) {
        unwatch(g, q);
        if (q->responding)
                return; /* MHD sees it itself */
        q->close_conn = true;
        if (q->parked) {
                q->parked = false;
                MHD_resume_connection(q->conn);
                kick_loop(q->L);
        }
        finish(g, q);
}

void gp_gw_kick(gp_gw *g, struct MHD_Connection *conn) {
        if (!g || !g->loops)
                return;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
        for (int i = 0; i < g->nloops; i++)
                if (!ci || g->loops[i].mhd == ci->daemon)
                        kick_loop(&g->loops[i]);
}

/* Let MHD do what is due (the loop thread only). */
static void run_mhd(loop *L) {
        if (L->mhd)
                MHD_run(L->mhd);
}

static void *gw_thread(void *arg) {
        loop *L = arg;
        gp_gw *g = L->g;
        struct epoll_event evs[256];
        gw_tl_loop = L;
        while (!__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
                pthread_mutex_lock(&g->lock);
                int64_t now = mono_ms();
                int64_t until = gp_admit_wake_ms(g->admit, now);
                pthread_mutex_unlock(&g->lock);
                if (L->nrunning && L->next_tick_ms < until)
                        until = L->next_tick_ms < now ? now : L->next_tick_ms; /* upstream timeouts */
                if (gp_uc_due(L->uc))
                        until = now;
                MHD_UNSIGNED_LONG_LONG mt;
                if (L->mhd && MHD_get_timeout(L->mhd, &mt) == MHD_YES && now + (int64_t)mt < until)
                        until = now + (int64_t)mt;
                int timeout = until == INT64_MAX ? 1000 : (int)(until - now > 1000 ? 1000 : until - now);
                pthread_mutex_lock(&L->ilock);
                if (timeout < 0 || L->inbox)
                        timeout = 0; /* posted by this loop itself after it last looked */
                pthread_mutex_unlock(&L->ilock);
                int n = epoll_wait(L->epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), timeout);
                bool mhd_due = n == 0; /* its timeouts */
                for (int i = 0; i < n; i++) {
                        uint64_t d = evs[i].data.u64;
                        mhd_due |= d == TAG_MHD || d == 0; /* 0: a kick, maybe a resume */
                        if ((d & TAG_MASK) == TAG_MCONN && d != TAG_MCONN)
                                gw_mconn_event(L, d); /* before MHD reads what came (conns.c) */
                }
                if (mhd_due)
                        run_mhd(L); /* handlers run here */
                /* requests the events name stay alive until the batch is done: a request
                 * whose last reference goes waits in this loop's graveyard */
                for (int i = 0; i < n; i++) {
                        uint64_t d = evs[i].data.u64;
                        if (d == 0 || d == TAG_MHD || (d & TAG_MASK) == TAG_MCONN) {
                                /* the inbox is looked at below; MHD ran above; MHD's sockets were seen before it */
                        } else if ((d & GP_UC_EV_MASK) == GP_UC_EV_TAG) {
                                gp_uc_event(L->uc, d, evs[i].events);
                        } else if (d == TAG_LISTEN || (d & TAG_MASK) == TAG_FRONT || (d & TAG_MASK) == TAG_RELAY) {
                                gw_front_event(L, d, evs[i].events);
                        } else {
                                gw_req *q = evs[i].data.ptr;
                                if (q->fd_watched)
                                        hang_up(g, q);
                        }
                }
                take_inbox(g, L);
                int64_t t = mono_ms();
                if (t >= L->next_tick_ms) {
                        L->next_tick_ms = t + TICK_MS;
                        gp_uc_tick(L->uc, t);
                }
                gp_uc_dispatch(L->uc); /* exchanges that failed at their start; closed connections freed */
                admit_some(g, L);
                gw_front_sweep(L, t); /* deadlines: connections cut, 408s queued */
                gw_front_flush(L);    /* what this batch answered goes out now */
                gw_conns_balance(L);
                if (__atomic_load_n(&g->quiesce, __ATOMIC_ACQUIRE) && L->lfd >= 0) {
                        close(L->lfd); /* leaves the epoll set with it */
                        L->lfd = -1;
                }
                size_t nu = L->nusage;
                usage_rec *u = NULL;
                if (nu) {
                        u = L->usage;
                        L->usage = NULL;
                        L->nusage = L->capusage = 0;
                }
                free_grave(L);
                if (L->mhd_kick) {
                        L->mhd_kick = false;
                        run_mhd(L); /* answer the resumed connections now, not on the next wake-up */
                }
                for (size_t i = 0; g->usage_fn && i < nu; i++)
                        g->usage_fn(g->usage_ud, u[i].tenant, u[i].model, u[i].prompt, u[i].completion);
                free(u);
        }
        /* stopping: answer everything this loop still holds */
        take_inbox(g, L);
        for (size_t i = L->nreqs; i-- > 0;) {
                if (i >= L->nreqs)
                        continue;
                gw_req *q = L->reqs[i];
                if (!q->responding && !q->ans_status)
                        answer(q, 503, "server_error", "unavailable", "the server is stopping");
                else if (q->responding) {
                        q->up_failed = !q->up_done;
                        wake_conn(q);
                }
                finish(g, q);
        }
        gw_front_close_all(L); /* sends the 503s and the ends queued above, then closes */
        free_grave(L);
        pthread_mutex_lock(&g->lock);
        if (++g->nstopped == g->nloops)
                __atomic_store_n(&g->stopped, true, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&g->lock);
        /* let MHD send what was answered (the 503s, and answers resumed by others) */
        for (int i = 0; i < 20; i++) {
                run_mhd(L);
                usleep(5 * 1000);
        }
        return NULL;
}

/* ------------------------------------------------------------------ */
/* lifecycle and visibility                                            */

static int loop_init(gp_gw *g, loop *L) {
        L->g = g;
        pthread_mutex_init(&L->ilock, NULL);
        L->epfd = epoll_create1(EPOLL_CLOEXEC);
        L->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (L->epfd < 0 || L->evfd < 0)
                return -ENOMEM;
        /* edge-triggered: every write to the eventfd is an edge, so it never needs reading */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = 0};
        if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, L->evfd, &ev) < 0)
                return -errno;
        gw_front_init(L);
        L->uc = gp_uc_new(L->epfd, g->cfg.max_upstream_connections / g->nloops);
        return L->uc ? 0 : -ENOMEM;
}

int gp_gw_new(const gp_config *cfg, int nloops, gp_gw **ret, char *err, size_t errlen) {
        if (nloops < 1)
                nloops = 1;
        if (nloops > GW_MAX_LOOPS)
                nloops = GW_MAX_LOOPS;
        gp_gw *g = calloc(1, sizeof(*g));
        if (!g) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        g->cfg = cfg->gw;
        g->front_max_conns = (cfg->max_connections + nloops - 1) / nloops;
        g->max_body_bytes = cfg->max_body_bytes;
        g->conn_timeout_ms = cfg->connection_timeout_s * 1000;
        memcpy(g->origins, cfg->allowed_origins, sizeof(g->origins));
        g->norigins = (size_t)cfg->n_allowed_origins;
        g->header_timeout_ms = (int64_t)cfg->header_timeout_s * 1000;
        g->min_body_rate = cfg->min_body_rate_bytes_s;
        pthread_mutex_init(&g->lock, NULL);
        for (int i = 0; i < g->cfg.n_models; i++) {
                model *m = &g->models[i];
                m->cfg = &g->cfg.models[i];
                for (int k = 0; k < m->cfg->n_upstreams; k++)
                        gp_strlcpy(m->ups[k].url, m->cfg->upstreams[k], sizeof(m->ups[k].url));
                m->nups = m->cfg->n_upstreams;
        }
        g->nmodels = g->cfg.n_models;
        gp_admit_limits lim = {.max_concurrent = g->cfg.max_concurrent, .max_rps = g->cfg.max_rps,
                               .max_tokens_per_sec = g->cfg.max_tokens_per_sec, .max_queue = g->cfg.max_queue,
                               .queue_timeout_ms = (int64_t)g->cfg.queue_timeout_sec * 1000};
        memcpy(lim.weights, cfg->weights, sizeof(lim.weights));
        g->admit = gp_admit_new(&lim, mono_ms());
        g->loops = calloc((size_t)nloops, sizeof(loop));
        bool ok = g->admit && g->loops && gp_iplimit_init(&g->ipl, cfg->max_connections_per_ip, cfg->max_connections) == 0;
        if (g->loops) {
                for (int i = 0; i < nloops; i++) {
                        g->loops[i].epfd = g->loops[i].evfd = g->loops[i].lfd = -1;
                }
                g->nloops = nloops;
                for (int i = 0; ok && i < nloops; i++)
                        ok = loop_init(g, &g->loops[i]) == 0;
        }
        if (!ok) {
                snprintf(err, errlen, "cannot set the gateway up (out of memory or file descriptors)");
                gp_gw_free(g);
                return -ENOMEM;
        }
        *ret = g;
        return 0;
}

void gp_gw_on_auth(gp_gw *g, gp_gw_auth_fn *fn, void *ud) {
        g->auth_fn = fn;
        g->auth_ud = ud;
}

void gp_gw_quiesce(gp_gw *g) {
        if (!g || !g->loops)
                return;
        __atomic_store_n(&g->quiesce, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < g->nloops; i++)
                if (g->loops[i].started)
                        wake_loop(&g->loops[i]);
}

int gp_gw_run(gp_gw *g, struct MHD_Daemon *const *mhds, const int *lfds, int n, char *err, size_t errlen) {
        if (n != g->nloops) {
                snprintf(err, errlen, "%d HTTP daemons for %d loops", n, g->nloops);
                return -EINVAL;
        }
        /* every loop's fields before any thread starts: gp_gw_kick (any thread) reads
         * every loop's mhd once the first loop serves requests */
        for (int i = 0; i < n; i++) {
                g->loops[i].lfd = lfds ? lfds[i] : -1; /* the loops' own from here on (closed by gp_gw_free at the latest) */
                g->loops[i].mhd = mhds ? mhds[i] : NULL;
        }
        for (int i = 0; i < n; i++) {
                loop *L = &g->loops[i];
                if (L->mhd) {
                        const union MHD_DaemonInfo *di = MHD_get_daemon_info(L->mhd, MHD_DAEMON_INFO_EPOLL_FD);
                        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_MHD};
                        if (!di || epoll_ctl(L->epfd, EPOLL_CTL_ADD, di->epoll_fd, &ev) < 0) {
                                snprintf(err, errlen, "cannot watch the HTTP daemon's epoll fd");
                                gp_gw_stop(g);
                                return -EINVAL;
                        }
                }
                if (L->lfd >= 0) {
                        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
                        if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, L->lfd, &ev) < 0) {
                                snprintf(err, errlen, "cannot watch the listening socket");
                                gp_gw_stop(g);
                                return -EINVAL;
                        }
                }
                if (pthread_create(&L->thread, NULL, gw_thread, L) != 0) {
                        snprintf(err, errlen, "cannot start the gateway thread");
                        gp_gw_stop(g);
                        return -EAGAIN;
                }
                L->started = true;
        }
        return 0;
}

void gp_gw_stop(gp_gw *g) {
        if (!g || !g->loops)
                return;
        __atomic_store_n(&g->stopping, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < g->nloops; i++)
                if (g->loops[i].started)
                        wake_loop(&g->loops[i]);
        for (int i = 0; i < g->nloops; i++)
                if (g->loops[i].started) {
                        pthread_join(g->loops[i].thread, NULL);
                        g->loops[i].started = false;
                }
}

void gp_gw_free(gp_gw *g) {
        if (!g)
                return;
        gp_gw_stop(g);
        for (int i = 0; g->loops && i < g->nloops; i++) {
                loop *L = &g->loops[i];
                /* entries posted by other loops after this one stopped */
                while (L->inbox) {
                        gw_req *q = L->inbox;
                        L->inbox = q->inext;
                        q->inbox = 0;
                        unref(q);
                }
                free_grave(L);
                if (L->lfd >= 0)
                        close(L->lfd);
                gp_uc_free(L->uc);
                if (L->epfd >= 0)
                        close(L->epfd);
                if (L->evfd >= 0)
                        close(L->evfd);
                free(L->reqs);
                free(L->usage);
                pthread_mutex_destroy(&L->ilock);
        }
        free(g->loops);
        gp_admit_free(g->admit);
        gp_iplimit_done(&g->ipl);
        pthread_mutex_destroy(&g->lock);
        free(g);
}

static json_t *tier_stats(const gp_admit_stats *st, int depth) {
        json_t *qs = json_array();
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                double u = depth ? 100.0 * (double)st->queued[i] / depth : 0;
                json_array_append_new(qs, json_pack("{s:i,s:I,s:i,s:f,s:I}", "priority", i, "current_depth",
                                                    (json_int_t)st->queued[i], "max_depth", depth,
                                                    "utilization_pct", u, "available_slots",
                                                    (json_int_t)(depth - (int64_t)st->queued_total)));
        }
        return qs;
}

/* Turn a served replica's upstream on (adding it) or off.  Slots are
 * never removed, so in-flight requests' indexes stay valid. */
int gp_gw_upstream_set(gp_gw *g, const char *model_name, const char *url, bool on) {
        int rc = -ENOENT;
        pthread_mutex_lock(&g->lock);
        model *m = find_model(g, model_name);
        if (m) {
                int i;
                for (i = 0; i < m->nups; i++)
                        if (!strcmp(m->ups[i].url, url))
                                break;
                if (i == m->nups && on) {
                        if (m->nups == GP_CFG_MAX_UPSTREAMS) {
                                /* reuse a slot that is off and idle */
                                for (i = 0; i < m->nups; i++)
                                        if (m->ups[i].off && m->ups[i].inflight == 0)
                                                break;
                        } else {
                                m->nups++;
                        }
                        if (i < m->nups) {
                                memset(&m->ups[i], 0, sizeof(m->ups[i]));
                                gp_strlcpy(m->ups[i].url, url, sizeof(m->ups[i].url));
                        }
                }
                if (i < m->nups) {
                        m->ups[i].off = !on;
                        m->ups[i].down_until_ms = 0;
                        rc = 0;
                } else {
                        rc = on ? -ENOSPC : 0;
                }
        }
        pthread_mutex_unlock(&g->lock);
        return rc;
}

int gp_gw_model_load(gp_gw *g, const char *model_name, int *ret_waiting, int *ret_in_flight) {
        int rc = -ENOENT;
        pthread_mutex_lock(&g->lock);
        model *m = find_model(g, model_name);
        if (m) {
                *ret_waiting = m->waiting;
                *ret_in_flight = m->in_flight;
                rc = 0;
        }
        pthread_mutex_unlock(&g->lock);
        return rc;
}

int gp_gw_model_last_used(gp_gw *g, const char *model_name, int64_t *ret_ms) {
        int rc = -ENOENT;
        pthread_mutex_lock(&g->lock);
        model *m = find_model(g, model_name);
        if (m) {
                *ret_ms = m->last_used_ms;
                rc = 0;
        }
        pthread_mutex_unlock(&g->lock);
        return rc;
}

int gp_gw_model_unloaded(gp_gw *g, const char *model_name) {
        int rc = -ENOENT;
        pthread_mutex_lock(&g->lock);
        model *m = find_model(g, model_name);
        if (m) {
                m->unloads++;
                g->models_unloaded++;
                rc = 0;
        }
        pthread_mutex_unlock(&g->lock);
        return rc;
}

json_t *gp_gw_stats_json(gp_gw *g) {
        gp_admit_stats st;
        pthread_mutex_lock(&g->lock);
        gp_admit_get_stats(g->admit, &st);
        json_t *ups = json_array();
        for (int i = 0; i < g->nmodels; i++)
                for (int k = 0; k < g->models[i].nups; k++) {
                        upstream *u = &g->models[i].ups[k];
                        json_array_append_new(ups, json_pack("{s:s,s:s,s:i,s:b,s:I,s:I}", "model",
                                                             g->models[i].cfg->name, "url", u->url, "in_flight",
                                                             u->inflight, "healthy",
                                                             !u->off && u->down_until_ms <= mono_ms(),
                                                             "requests", (json_int_t)u->requests, "failures",
                                                             (json_int_t)u->failures));
                }
        json_t *tens = json_array();
        size_t nt = gp_admit_tenant_count(g->admit);
        for (size_t i = 0; i < nt; i++) {
                gp_admit_tenant_stats ts;
                if (gp_admit_tenant_stats_get(g->admit, i, &ts) < 0)
                        continue;
                const tstats *t = &g->tenants[i];
                json_t *to;
                json_array_append_new(tens, to = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "tenant_id", ts.id, "requests",
                                                      (json_int_t)ts.requests_total, "in_flight", (json_int_t)ts.running,
                                                      "queued", (json_int_t)ts.queued, "prompt_tokens",
                                                      (json_int_t)t->prompt_tokens, "completion_tokens",
                                                      (json_int_t)t->completion_tokens, "rejected",
                                                      (json_int_t)(ts.rejected_total + ts.expired_total)));
                if (to)
                        gw_timing_json(to, &t->timing);
        }
        json_t *mods = json_array();
        for (int i = 0; i < g->nmodels; i++) {
                const model *m = &g->models[i];
                json_t *mo;
                json_array_append_new(mods, mo = json_pack("{s:s,s:i,s:i,s:I,s:I,s:I,s:I,s:I}", "model", m->cfg->name,
                                                      "queued", m->waiting, "in_flight", m->in_flight, "requests",
                                                      (json_int_t)m->requests, "prompt_tokens",
                                                      (json_int_t)m->prompt_tokens, "completion_tokens",
                                                      (json_int_t)m->completion_tokens, "last_used_ms",
                                                      (json_int_t)m->last_used_ms, "unloaded",
                                                      (json_int_t)m->unloads));
                if (mo)
                        gw_timing_json(mo, &m->timing);
        }
        uint64_t uerr = g->upstream_errors, retries = g->retries, cerr = g->context_errors;
        uint64_t unloaded = g->models_unloaded, tcalls = g->tokenize_calls, tfall = g->tokenize_fallbacks;
        pthread_mutex_unlock(&g->lock);
        json_t *out = json_pack("{s:o,s:o,s:I,s:I,s:I}", "tenants", tens, "models", mods, "models_unloaded",
                                (json_int_t)unloaded, "tokenize_calls", (json_int_t)tcalls, "tokenize_fallbacks",
                                (json_int_t)tfall);
        json_t *base = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:o,s:o}", "total_admitted",
                         (json_int_t)st.admitted_total, "total_queued_now", (json_int_t)st.queued_total, "in_flight",
                         (json_int_t)st.running, "rejected_total", (json_int_t)st.rejected_total, "timeouts_total",
                         (json_int_t)st.expired_total, "client_gone_while_queued", (json_int_t)st.cancelled_total,
                         "upstream_errors", (json_int_t)uerr, "retries", (json_int_t)retries,
                         "context_length_errors", (json_int_t)cerr, "max_queue", g->cfg.max_queue, "queue_stats",
                         tier_stats(&st, g->cfg.max_queue), "upstreams", ups);
        if (base && out)
                json_object_update(base, out);
        json_decref(out);
        return base;
}

/* The timing histograms by model and by tenant (64 by name, then
 * "other", as the daemon's tenant metrics).  g->lock held. */
static int timing_prom(gp_gw *g, gp_buf *b) {
        const char *mnames[GP_CFG_MAX_MODELS];
        const gw_timing *mt[GP_CFG_MAX_MODELS];
        for (int i = 0; i < g->nmodels; i++) {
                mnames[i] = g->models[i].cfg->name;
                mt[i] = &g->models[i].timing;
        }
        int r = gw_timing_prom(b, "gpupool_gateway_", "model", mnames, mt, (size_t)g->nmodels, GP_CFG_MAX_MODELS);
        size_t n = gp_admit_tenant_count(g->admit);
        gp_admit_tenant_stats *ts = calloc(n ? n : 1, sizeof(*ts));
        const char **tnames = calloc(n ? n : 1, sizeof(*tnames));
        const gw_timing **tt = calloc(n ? n : 1, sizeof(*tt));
        size_t k = 0;
        if (!ts || !tnames || !tt)
                r = r ? r : -ENOMEM;
        for (size_t i = 0; r == 0 && i < n; i++)
                if (gp_admit_tenant_stats_get(g->admit, i, &ts[k]) == 0) {
                        tnames[k] = ts[k].id;
                        tt[k++] = &g->tenants[i].timing;
                }
        r = r ? r : gw_timing_prom(b, "gpupool_gateway_tenant_", "tenant", tnames, tt, k, 64);
        free(ts);
        free(tnames);
        free(tt);
        return r;
}

/* Prometheus text (one family at a time: HELP, TYPE, samples). */
static int prom_family(gp_buf *b, const char *name, const char *type, const char *help) {
        return gp_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int gp_gw_prometheus(gp_gw *g, gp_buf *b) {
        int r = prom_family(b, "gpupool_gateway_configured", "gauge",
                            "1 when the LLM gateway has models; its gpupool_gateway_* metrics appear then.");
        r = r ? r : gp_buf_printf(b, "gpupool_gateway_configured %d\n", g && g->nmodels ? 1 : 0);
        if (r || !g || !g->nmodels)
                return r;
        gp_admit_stats st;
        pthread_mutex_lock(&g->lock);
        gp_admit_get_stats(g->admit, &st);
        r = prom_family(b, "gpupool_gateway_queue_requests", "gauge", "Gateway requests waiting for admission, by tier.");
        for (int i = 0; r == 0 && i < GP_PRIORITY_LEVELS; i++)
                r = gp_buf_printf(b, "gpupool_gateway_queue_requests{priority=\"%d\"} %" PRIu64 "\n", i, st.queued[i]);
        r = r ? r : prom_family(b, "gpupool_gateway_in_flight", "gauge", "Gateway requests admitted and not ended.");
        r = r ? r : gp_buf_printf(b, "gpupool_gateway_in_flight %" PRIu64 "\n", st.running);
        r = r ? r : prom_family(b, "gpupool_gateway_admitted_total", "counter", "Gateway requests admitted.");
        r = r ? r : gp_buf_printf(b, "gpupool_gateway_admitted_total %" PRIu64 "\n", st.admitted_total);
        r = r ? r : prom_family(b, "gpupool_gateway_rejected_total", "counter",
                                "Gateway requests answered 429, by reason (queue_full, queue_timeout).");
        r = r ? r : gp_buf_printf(b, "gpupool_gateway_rejected_total{reason=\"queue_full\"} %" PRIu64 "\n"
                                     "gpupool_gateway_rejected_total{reason=\"queue_timeout\"} %" PRIu64 "\n",
                                  st.rejected_total, st.expired_total);
        r = r ? r : prom_family(b, "gpupool_gateway_requests_total", "counter", "Admitted gateway requests that ended, by model.");
        for (int i = 0; r == 0 && i < g->nmodels; i++)
                r = gp_buf_printf(b, "gpupool_gateway_requests_total{model=\"%s\"} %" PRIu64 "\n", g->models[i].cfg->name,
                                  g->models[i].requests);
        r = r ? r : prom_family(b, "gpupool_gateway_tokens_total", "counter",
                                "Tokens of ended gateway requests, by model and kind (prompt, completion).");
        for (int i = 0; r == 0 && i < g->nmodels; i++)
                r = gp_buf_printf(b,
                                  "gpupool_gateway_tokens_total{model=\"%s\",kind=\"prompt\"} %" PRIu64 "\n"
                                  "gpupool_gateway_tokens_total{model=\"%s\",kind=\"completion\"} %" PRIu64 "\n",
                                  g->models[i].cfg->name, g->models[i].prompt_tokens, g->models[i].cfg->name,
                                  g->models[i].completion_tokens);
        r = r ? r : prom_family(b, "gpupool_gateway_upstream_up", "gauge",
                                "1 when an upstream is taking requests (not failed recently, not a replica still starting).");
        int64_t now = mono_ms();
        for (int i = 0; r == 0 && i < g->nmodels; i++)
                for (int k = 0; r == 0 && k < g->models[i].nups; k++) {
                        const upstream *u = &g->models[i].ups[k];
                        r = gp_buf_printf(b, "gpupool_gateway_upstream_up{model=\"%s\",url=\"%s\"} %d\n",
                                          g->models[i].cfg->name, u->url, !u->off && u->down_until_ms <= now);
                }
        r = r ? r : prom_family(b, "gpupool_gateway_upstream_errors_total", "counter",
                                "Gateway requests that failed at an upstream after the retry.");
        r = r ? r : gp_buf_printf(b, "gpupool_gateway_upstream_errors_total %" PRIu64 "\n", g->upstream_errors);
        r = r ? r : timing_prom(g, b);
        pthread_mutex_unlock(&g->lock);
        return r;
}

typedef struct qctx {
        gp_gw *g;
        int top;
        int per[GP_PRIORITY_LEVELS];
        json_t *lists[GP_PRIORITY_LEVELS];
        int64_t now;
        size_t pos;
} qctx;

static int queue_item(const gp_admit_ticket *t, void *ud) {
        qctx *c = ud;
        gw_req *q = t->ud;
        c->pos++;
        if (c->per[t->tier] >= c->top)
                return 0;
        c->per[t->tier]++;
        gp_admit_tenant_stats ts;
        gp_admit_tenant_stats_get(c->g->admit, (size_t)t->tenant, &ts);
        json_array_append_new(c->lists[t->tier],
                              json_pack("{s:s,s:s,s:I,s:I,s:I}", "tenant_id", ts.id, "model", q->m->cfg->name,
                                        "tokens_reserved", (json_int_t)t->tokens, "submitted_order",
                                        (json_int_t)c->pos, "wait_ms", (json_int_t)(c->now - t->enqueued_ms)));
        return 0;
}

json_t *gp_gw_queues_json(gp_gw *g, int top) {
        qctx c = {.g = g, .top = top, .now = mono_ms()};
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                c.lists[i] = json_array();
        gp_admit_stats st;
        pthread_mutex_lock(&g->lock);
        gp_admit_get_stats(g->admit, &st);
        gp_admit_foreach_queued(g->admit, queue_item, &c);
        pthread_mutex_unlock(&g->lock);
        json_t *a = json_array();
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                json_array_append_new(a, json_pack("{s:i,s:I,s:o}", "priority", i, "depth", (json_int_t)st.queued[i],
                                                   "requests", c.lists[i]));
        return a;
}

json_t *gp_gw_tenant_json(gp_gw *g, const char *tenant) {
        json_t *o = NULL;
        pthread_mutex_lock(&g->lock);
        size_t n = gp_admit_tenant_count(g->admit);
        for (size_t i = 0; i < n; i++) {
                gp_admit_tenant_stats ts;
                if (gp_admit_tenant_stats_get(g->admit, i, &ts) < 0 || strcmp(ts.id, tenant))
                        continue;
                tstats *t = &g->tenants[i];
                o = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "requests", (json_int_t)ts.requests_total,
                              "in_flight", (json_int_t)ts.running, "queued", (json_int_t)ts.queued,
                              "prompt_tokens", (json_int_t)t->prompt_tokens, "completion_tokens",
                              (json_int_t)t->completion_tokens, "tokens", (json_int_t)(t->prompt_tokens + t->completion_tokens),
                              "rejected", (json_int_t)ts.rejected_total, "timeouts", (json_int_t)ts.expired_total,
                              "upstream_errors", (json_int_t)t->errors);
                break;
        }
        pthread_mutex_unlock(&g->lock);
        return o;
}
