/* gateway.h - the OpenAI-compatible inference gateway: /v1/models,
 * /v1/chat/completions, /v1/completions and /v1/embeddings on the daemon's
 * port, forwarded to model servers (upstreams) under admission control.
 *
 * Threads: server.http_threads event loops (gp_gw_run).  Each drives its
 * own MHD daemon (external epoll mode, all on one port), its own upstream
 * client (upclient.h: keep-alive connection pools to the upstreams) and an epoll
 * set that also watches queued clients for hang-ups.  MHD calls
 * gp_gw_handle / gp_gw_resume / gp_gw_completed and the response reader
 * on the loop that owns the connection, and that loop alone works on the
 * request.  Admission state (core/admit.h), the upstream table and the
 * counters are shared under one gateway mutex held briefly; the daemon's
 * lock is never taken here (docs/internals/gateway.md).
 *
 * A request's life: its loop checks and parses it, answers errors at once,
 * else parks (suspends) the connection and queues it for admission (a
 * prompt whose estimate is near the model's context is first counted by an
 * upstream's POST /tokenize, on the loop, and checked again); when
 * admitted (by any loop) its own loop picks the least-loaded healthy
 * upstream and sends it; when the answer is complete (non-streaming) or its
 * first bytes arrive (streaming) the connection is resumed and answered.  A
 * streaming answer is passed on as it arrives: the reader parks the
 * connection when nothing is buffered and the loop resumes it on the next
 * bytes.
 */
#ifndef GP_GATEWAY_GATEWAY_H
#define GP_GATEWAY_GATEWAY_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "config/config.h"
#include "core/admit.h"

typedef struct gp_gw gp_gw;

/* Who is calling, as the server's auth found it. */
typedef struct gp_gw_caller {
        char tenant[GP_TENANT_MAX];       /* tenant id (never empty) */
        int max_priority;                 /* most urgent tier allowed */
        int default_priority;             /* tier when X-Priority is absent */
        bool clamp_priority;              /* X-Priority above the max: clamp (true) or 403 */
        gp_admit_tenant_limits limits;    /* tenant's gateway limits and weight */
        const char *cors_origin;          /* MHD path: the allowed origin its answers name in
                                           * Access-Control-Allow-Origin (outlives the request); NULL = none */
} gp_gw_caller;

/* Make the gateway from cfg->gw (copied).  0, or -errno with a message
 * in err.  Nothing runs until gp_gw_run. */
int gp_gw_new(const gp_config *cfg, int nloops, gp_gw **ret, char *err, size_t errlen);

/* Who calls on a connection the gateway serves itself: from the
 * Authorization, Host and X-Gpupool-Forwarded-For headers' values (NULL
 * when absent) and the client's address, fill who.  0, or the HTTP status to refuse with (401,
 * 402, 403, 503) and its message in msg.  Any loop thread. */
typedef int gp_gw_auth_fn(void *ud, const char *authorization, const char *host, const struct sockaddr *client,
                          const char *forwarded_for, gp_gw_caller *who, char *msg, size_t msglen);
/* Set before gp_gw_run; without it front connections are refused (403). */
void gp_gw_on_auth(gp_gw *g, gp_gw_auth_fn *fn, void *ud);

/* Start the nloops loop threads.  Loop i accepts on lfds[i] (listening,
 * non-blocking; all on one port with SO_REUSEPORT, or -1 for none) and
 * drives mhds[i] (started with MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET,
 * no internal thread).  A connection whose first request is for /v1 is
 * served by the loop itself (front.c); any other is handed to mhds[i]
 * with MHD_add_connection.  One thread serves its connections, their
 * upstream transfers and admission with no hand-off between threads.
 * The loops own the listening sockets from here on.  0, or -errno with a
 * message in err. */
int gp_gw_run(gp_gw *g, struct MHD_Daemon *const *mhds, const int *lfds, int n, char *err, size_t errlen);

/* MHD's connection notification (MHD_OPTION_NOTIFY_CONNECTION), from the
 * loop running that daemon (or from MHD_stop_daemon once the loops ended).
 * started: the loop counts the connection with its own ones against
 * server.max_connections (beyond it new connections wait in the kernel's
 * queue) and watches it for server.header_timeout_s and
 * server.min_body_rate_bytes_s (the record goes to *socket_context; none
 * when out of memory: then it is only counted).  closed: lets go of both. */
void gp_gw_mhd_conn_started(struct MHD_Connection *conn, void **socket_context);
void gp_gw_mhd_conn_closed(void **socket_context);

/* What a request on an MHD connection does, for the same timers, from the
 * access handler before it runs: first (*con_cls was NULL: the head is
 * whole), body bytes arriving (*upload_data_size), or neither (the body is
 * whole: the request is served, parked or not, and timed no more).
 * request_done: MHD_OPTION_NOTIFY_COMPLETED (the connection is idle until
 * its next request's first bytes).  Loop thread; a connection with no
 * record is ignored. */
void gp_gw_mhd_progress(struct MHD_Connection *conn, bool first, size_t body_bytes);
void gp_gw_mhd_request_done(struct MHD_Connection *conn);

/* Stop accepting connections (the loops close their listening sockets
 * soon after); the open ones are served.  Any thread. */
void gp_gw_quiesce(gp_gw *g);

/* Answer every parked request (503) and resume it, and stop the thread.
 * Call before MHD_stop_daemon.  Takes NULL. */
void gp_gw_stop(gp_gw *g);

/* Another thread resumed conn: make its loop run MHD now.  Any thread;
 * takes a NULL g. */
void gp_gw_kick(gp_gw *g, struct MHD_Connection *conn);

/* Free after MHD_stop_daemon (every request completed).  Takes NULL. */
void gp_gw_free(gp_gw *g);

/* Is url a gateway path ("/v1/...")? */
bool gp_gw_is_path(const char *url);

/* Serve a /v1/ request whose body is complete (the handler's last call).
 * Either queues an answer now, or parks the connection and sets *slot to
 * the request (then every later handler call goes to gp_gw_resume, and
 * gp_gw_completed must be called from the completion callback).  Any MHD
 * worker thread. */
enum MHD_Result gp_gw_handle(gp_gw *g, struct MHD_Connection *conn, const char *url, const char *method,
                             const gp_gw_caller *who, const char *body, size_t len, void **slot);

/* A resumed /v1/ request: queue its answer (or park again). */
enum MHD_Result gp_gw_resume(gp_gw *g, struct MHD_Connection *conn, void *slot);

/* The connection of *slot ended (MHD's completion callback). */
void gp_gw_completed(gp_gw *g, void *slot);

/* An OpenAI-shaped error body {"error":{"message","type","param":null,
 * "code"}} (malloc'd, NULL on out of memory). */
char *gp_gw_error_body(const char *type, const char *code, const char *message);

/* A served replica's upstream (model servers gpupool runs): on adds it
 * (or turns it back on), off stops sending it requests.  0, -ENOENT for an
 * unknown model, -ENOSPC when the model has GP_CFG_MAX_UPSTREAMS already.
 * Any thread. */
int gp_gw_upstream_set(gp_gw *g, const char *model_name, const char *url, bool on);

/* A model's requests waiting for admission and in flight now (autoscale).
 * 0 or -ENOENT.  Any thread. */
int gp_gw_model_load(gp_gw *g, const char *model_name, int *ret_waiting, int *ret_in_flight);

/* When a model was last used: the wall-clock ms (gp_now_ms) of its last
 * request that reached admission (answered or not), 0 when none came
 * since the gateway started.  For unloading the least recently used idle
 * served model.  0 or -ENOENT.  Any thread. */
int gp_gw_model_last_used(gp_gw *g, const char *model_name, int64_t *ret_ms);

/* Count one served replica of the model stopped as the least recently used
 * idle model (stats: models[].unloaded, models_unloaded).  0 or -ENOENT.
 * Any thread. */
int gp_gw_model_unloaded(gp_gw *g, const char *model_name);

/* Visibility (any thread): {"total_admitted", "total_queued_now",
 * "in_flight", "queue_stats": [...], ...} for /admin/scheduler/stats;
 * the waiting requests per tier (top per tier) for /admin/scheduler/queues;
 * one tenant's counters (NULL when the tenant never used the gateway). */
json_t *gp_gw_stats_json(gp_gw *g);
json_t *gp_gw_queues_json(gp_gw *g, int top);
json_t *gp_gw_tenant_json(gp_gw *g, const char *tenant);

/* Token usage of one ended request (prompt and completion tokens as the
 * upstream reported them, or estimated), for billing. */
typedef void gp_gw_usage_fn(void *ud, const char *tenant, const char *model, int64_t prompt_tokens,
                            int64_t completion_tokens);
/* Call fn(ud, ...) after each request, on a gateway loop thread, with no
 * lock held.  Set it before gp_gw_run; NULL = none. */
void gp_gw_on_usage(gp_gw *g, gp_gw_usage_fn *fn, void *ud);

/* Name the GPU backend ("sim" or "nvml", a string that outlives the
 * gateway) for the X-Gpupool-Backend header of every /v1 answer, as the
 * rest of the API does.  Before gp_gw_run. */
void gp_gw_set_backend(gp_gw *g, const char *name);

/* Append the gateway's Prometheus families to b (gpupool_gateway_configured
 * always; the rest when models are configured).  g may be NULL.  0,
 * -ENOMEM, -E2BIG.  Any thread. */
int gp_gw_prometheus(gp_gw *g, gp_buf *b);

/* Pure helpers (unit-tested). */
/* Estimated prompt tokens of a request body's messages/prompt/input
 * (about 4 bytes a token, plus 4 per chat message). */
int64_t gp_gw_estimate_tokens(const json_t *req);
/* Is a prompt near the context, so worth counting exactly?  estimate +
 * max_tokens (what the request set; 0 when it set none) over 80% of
 * context. */
bool gp_gw_near_context(int64_t estimate, int64_t max_tokens, int64_t context);
/* The body of a vLLM-style POST /tokenize for a request body: chat
 * {"model","messages"} (the server applies the chat template, so the count
 * is what the model sees), completions {"model","prompt"} when the prompt
 * is one string.  malloc'd; NULL when the request has nothing to send
 * (token ids, a list of prompts) or out of memory. */
char *gp_gw_tokenize_body(const json_t *req);
/* The "count" of a /tokenize answer (the first "count": key; the rest of
 * the body is not parsed).  0, -ENOENT (no count), -EINVAL (not a
 * non-negative integer of at most 12 digits). */
int gp_gw_tokenize_count(const char *p, size_t n, int64_t *ret_count);
/* The 400 context_length_exceeded message, worded as OpenAI words it.
 * 0, or -E2BIG when size is too small (buf holds a cut message). */
int gp_gw_context_message(char *buf, size_t size, int64_t context, int64_t prompt, int64_t max_tokens);
/* X-Priority value -> tier: "0".."9", "P0".."P9", critical/high/normal/low/background.
 * -EINVAL otherwise. */
int gp_gw_parse_priority(const char *s);

/* An SSE filter: fed the upstream's bytes, emits complete lines for the
 * client, takes the usage from a chunk that has one, counts content chunks,
 * and drops the usage-only chunk (choices empty) when strip is set. */
typedef struct gp_gw_sse {
        char *line;                       /* partial line carried to the next feed */
        size_t len, cap;
        bool strip;                       /* drop the usage-only chunk */
        bool drop_blank;                  /* the blank line ending a dropped event */
        bool usage_seen;
        int64_t prompt_tokens, completion_tokens; /* from the usage chunk */
        int64_t chunks;                   /* data chunks with content (a token estimate) */
} gp_gw_sse;
/* Feed n bytes; the client's bytes are appended with out(ud, p, n), which
 * returns 0 or a negative errno (then feeding stops with it).  A line over
 * 1 MiB is -E2BIG.  gp_gw_sse_done frees the line buffer. */
int gp_gw_sse_feed(gp_gw_sse *s, const char *p, size_t n, int (*out)(void *ud, const char *p, size_t n), void *ud);
/* Flush a last line without a newline (end of stream). */
int gp_gw_sse_end(gp_gw_sse *s, int (*out)(void *ud, const char *p, size_t n), void *ud);
void gp_gw_sse_done(gp_gw_sse *s);

#endif
