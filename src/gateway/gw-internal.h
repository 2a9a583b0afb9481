/* gw-internal.h - the gateway's records shared by its files: gateway.c
 * (admission, upstream transfers, the MHD side) and front.c (the /v1
 * connections the gateway serves itself).  Not an API: see gateway.h. */
#ifndef GP_GATEWAY_GW_INTERNAL_H
#define GP_GATEWAY_GW_INTERNAL_H

#include "base/iplimit.h"
#include "gateway/gateway.h"
#include "gateway/gwstats.h"
#include "gateway/upclient.h"

#include <pthread.h>
#include <sys/socket.h>

/* What an epoll event's data names: 0 the loop's eventfd, TAG_MHD its MHD
 * daemon's epoll fd, TAG_LISTEN its listening socket; otherwise a pointer
 * (8-aligned) with a tag in its low 3 bits: 0 a gw_req whose MHD client is
 * watched for hang-ups, GP_UC_EV_TAG (2) an upstream connection, TAG_FRONT
 * a front connection's client socket, TAG_RELAY its relay to MHD,
 * TAG_MCONN an MHD connection's socket (a gw_mconn). */
#define TAG_MHD ((uint64_t)1)
#define TAG_LISTEN ((uint64_t)3)
#define TAG_FRONT ((uint64_t)4)
#define TAG_RELAY ((uint64_t)5)
#define TAG_MCONN ((uint64_t)6) /* an MHD connection's socket, watched for a request's first bytes (conns.c) */
#define TAG_MASK ((uint64_t)7)
#define MAX_HEADER_BYTES (64 * 1024)
#define STREAM_HIGH_WATER (1 << 20) /* buffered for a slow client: pause the upstream */
#define STREAM_OUT_START 4096     /* a streamed answer's buffer to begin with (grows by doubling) */
#define TICK_MS 100                /* upstream timeouts are looked at this often */

#define GW_MAX_LOOPS 16
#define TOKENIZE_MAX_BYTES (4 << 20) /* a /tokenize answer (its token list) read at most */

enum { IN_NEW = 1, IN_ABORT = 2, IN_UNPAUSE = 4, IN_START = 8, IN_EXPIRED = 16 };

struct loop;

/* A connection's place in its loop's idle list (conns.c), front and MHD
 * connections alike: connections with no request in progress (a new one
 * that sent nothing yet, a kept-alive one between requests), oldest first.
 * Near server.max_connections the oldest is closed to make room. */
typedef struct gw_idle {
        struct gw_idle *prev, *next;
        int64_t since_ms;          /* idle since (monotonic) */
        int fd;                    /* the client's socket (peeked at before closing: has a request begun?) */
        bool in;                   /* in L->idle */
        bool mhd;                  /* the record is a gw_mconn (else a front fconn) */
} gw_idle;

/* An MHD connection as the loop watches it (conns.c): what its current
 * request is doing, for server.header_timeout_s and
 * server.min_body_rate_bytes_s, which libmicrohttpd 0.9.75 does not know.
 * Made by gp_gw_mhd_conn_started, freed by gp_gw_mhd_conn_closed. */
typedef struct gw_mconn {
        gw_idle idle;              /* first member: the idle list names it */
        struct loop *L;
        struct MHD_Connection *conn;
        int fd;                    /* MHD's socket; in L's epoll set too (TAG_MCONN), edge-triggered */
        struct sockaddr_storage addr; /* the client (counted in the per-address table when ip_counted) */
        bool ip_counted;
        int phase;                 /* MC_* */
        int64_t t0_ms;             /* the phase began (head: its first byte, or accept) */
        uint64_t body_bytes;       /* MC_BODY: received so far */
        bool cut;                  /* shut down by the loop; MHD closes it on its next pass */
        struct gw_mconn *prev, *next; /* L->mconns */
} gw_mconn;

enum { MC_IDLE, MC_HEAD, MC_BODY, MC_BUSY };

typedef struct upstream {
        char url[GP_CFG_URL_MAX];
        bool off;                  /* a served replica that is not (or no longer) ready */
        int inflight;
        int64_t down_until_ms;
        uint64_t requests, failures;
        int tokenize;              /* its POST /tokenize: 0 unknown, 1 answers, -1 absent (404/405) */
        int64_t tok_skip_until_ms; /* its /tokenize timed out or failed: not asked until then */
} upstream;

typedef struct model {
        const gp_cfg_model *cfg;
        upstream ups[GP_CFG_MAX_UPSTREAMS];
        int nups;
        uint64_t requests;         /* ended requests that were admitted */
        uint64_t prompt_tokens, completion_tokens;
        int waiting;               /* its requests in the admission queue now */
        int in_flight;             /* its admitted requests not ended */
        int64_t last_used_ms;      /* wall clock of its last request that reached admission, 0 = none */
        uint64_t unloads;          /* served replicas stopped as the least recently used idle model */
        gw_timing timing;          /* its answered requests' latency, first byte, tokens/s (under g->lock) */
} model;

typedef struct tstats {
        uint64_t prompt_tokens, completion_tokens, errors;
        gw_timing timing;          /* as model.timing, for the tenant's requests */
} tstats;

typedef struct gw_req {
        gp_admit_ticket ticket;
        gp_gw *g;
        struct loop *L;            /* the loop whose MHD daemon serves the connection */
        struct MHD_Connection *conn; /* the MHD side's connection, or NULL ... */
        struct fconn *nc;          /* ... the front's (front.c), NULL once it let go */
        const char *cors;          /* MHD side: gp_gw_caller.cors_origin (its answers' CORS headers) */
        int refs;                  /* atomic (__atomic builtins) */
        int client_fd;
        bool fd_watched;
        bool parked;               /* the connection is suspended */
        bool gw_held;              /* the gateway side still holds it */
        unsigned inbox;            /* IN_* bits while in the inbox */
        struct gw_req *inext;
        /* the request */
        model *m;
        char path[40];             /* "/v1/chat/completions" */
        char *body;                /* what goes upstream (owned) */
        size_t body_len;
        bool stream;
        int64_t prompt_est;
        int64_t max_tokens;        /* what the request set, -1 = none (the rest of the context) */
        bool tok_wanted;           /* count the prompt with an upstream's /tokenize before admission */
        bool tokenizing;           /* the transfer running is the /tokenize call */
        int tok_up;                /* its upstream (index in m->ups), -1 = none */
        char *tok_body;            /* what goes to /tokenize (owned) */
        char tenant[GP_TENANT_MAX];
        int64_t t0_ms;
        int64_t t0_us, sent_us, first_us; /* monotonic µs: arrived; sent to the upstream that answers; its first body byte (0 = none yet) */
        /* the upstream transfer */
        gp_uc_xfer *x;
        int up;                    /* index in m->ups, -1 = none */
        int attempts;
        bool tried[GP_CFG_MAX_UPSTREAMS];
        long status;
        gp_buf hdrs;               /* "Name: value\r\n" lines kept for the client */
        bool retry_5xx;            /* abandon this answer and try another upstream */
        bool too_big;              /* the answer was over max_response_bytes */
        bool paused;
        gp_gw_sse sse;
        gp_buf out;                /* bytes for the client */
        size_t out_off;            /* taken by the reader so far */
        bool running;              /* a transfer runs (x) */
        bool up_done;              /* the upstream answer ended */
        bool up_failed;            /* ... in error */
        bool responding;           /* the MHD response is queued (bytes may have left) */
        bool client_gone;
        bool close_conn;           /* answer by closing the connection */
        /* an answer made by the gateway (errors, 429) */
        int ans_status;
        char *ans_body;
        gp_admit_ratelimit rl;
        bool ans_rl;               /* add the rate-limit headers */
        bool rate_limited;         /* a request or token rate limit applies to its caller (x-ratelimit-* on every answer) */
} gw_req;

typedef struct usage_rec {
        char tenant[GP_TENANT_MAX];
        char model[GP_CFG_MODEL_NAME_MAX];
        int64_t prompt, completion;
} usage_rec;

/* One event loop thread: its own MHD daemon (all of them listen on the
 * same port with SO_REUSEPORT, so the kernel spreads connections), its own
 * upstream client and epoll set.  Requests stay on the loop that got
 * their connection; admission state is shared (under g->lock). */
typedef struct loop {
        gp_gw *g;
        pthread_t thread;
        bool started;
        int epfd, evfd;
        gp_uc *uc;                 /* this loop's upstream connections */
        struct MHD_Daemon *mhd;    /* driven by this loop (external epoll mode) */
        bool mhd_kick;             /* run MHD again before sleeping (a connection was resumed); loop only */
        int nrunning;              /* transfers running; loop only */
        int64_t next_tick_ms;      /* when to look for upstream timeouts; loop only */
        pthread_mutex_t ilock;     /* the inbox (a leaf lock) */
        gw_req *inbox;             /* under ilock */
        gw_req *grave;             /* unreferenced requests, freed by this loop after its batch; loop only */
        gw_req **reqs;             /* the requests this loop's gateway side holds; loop only */
        size_t nreqs, capreqs;
        struct usage_rec *usage;   /* to report after the batch; loop only */
        /* the front (front.c): /v1 connections served without MHD; loop only */
        int lfd;                   /* its listening socket, -1 = none (closed when quiescing) */
        bool accept_paused;        /* lfd left the epoll set: its share of max_connections is taken */
        struct fconn *fconns;      /* its connections */
        int nfconns;
        int nmhdconns;             /* its MHD daemon's connections (gp_gw_mhd_conn) */
        struct fconn *flush;       /* connections with something new to send */
        struct fconn *fgrave;      /* closed ones, freed after the batch */
        int64_t next_sweep_ms;
        /* connection guard (conns.c); loop only */
        gw_mconn *mconns;          /* its MHD daemon's connections */
        gw_idle *idle_head, *idle_tail; /* connections with no request in progress, oldest first */
        int ncut;                  /* MHD connections shut down whose close MHD has not reported */
        int64_t ip_warn_ms;        /* the next per-address refusal is logged from then */
        bool handoff;              /* MHD_add_connection of a front connection runs: ... */
        int64_t handoff_t0;        /* ... its request began then (accept), ... */
        bool handoff_ip;           /* ... and it is counted in the per-address table */
        int64_t date_s;            /* the second date[] is for */
        char date[40];             /* the Date header's value */
        size_t nusage, capusage;
} loop;

extern __thread loop *gw_tl_loop; /* the loop this thread runs, NULL elsewhere */

struct gp_gw {
        gp_gw_auth_fn *auth_fn;    /* who calls on a front connection (gp_gw_on_auth) */
        void *auth_ud;
        int front_max_conns;       /* per loop: server.max_connections / loops */
        int64_t max_body_bytes;    /* server.max_body_bytes */
        int conn_timeout_ms;       /* server.connection_timeout_s */
        char origins[GP_MAX_ALLOWED_ORIGINS][GP_ORIGIN_MAX]; /* server.allowed_origins (front.c's browser check) */
        size_t norigins;
        int64_t header_timeout_ms; /* server.header_timeout_s */
        int64_t min_body_rate;     /* server.min_body_rate_bytes_s */
        gp_iplimit ipl;            /* server.max_connections_per_ip, shared by the loops */
        int quiesce;               /* set by gp_gw_quiesce: close the listening sockets; __atomic */
        gp_gw_usage_fn *usage_fn;   /* billing's token record (gp_gw_on_usage), set before the loops run */
        void *usage_ud;
        gp_cfg_gateway cfg;
        pthread_mutex_t lock;
        loop *loops;               /* [nloops] */
        int nloops;
        int stopping;               /* set once by gp_gw_stop; __atomic loads and stores */
        int nstopped;              /* loops that answered their requests and left */
        bool stopped;              /* all of them */
        gp_admit *admit;
        model models[GP_CFG_MAX_MODELS];
        int nmodels;
        tstats tenants[GP_ADMIT_MAX_TENANTS];
        uint64_t upstream_errors, retries, context_errors;
        uint64_t models_unloaded;  /* sum of the models' unloads */
        uint64_t tokenize_calls, tokenize_fallbacks; /* /tokenize asked; ... that gave no count */
};


/* An immediate answer to a /v1 request (no upstream): status and a
 * malloc'd JSON body (NULL when out of memory). */
typedef struct gw_answer {
        int status;
        char *body;
} gw_answer;

/* gateway.c, for front.c (all on the owning loop unless said) */
/* Check and parse a /v1 request (url without its query).  NULL with *ans
 * set, or a new request with two references (the client side's and the
 * gateway side's) to post with IN_NEW once its client side is set. */
gw_req *gw_request(gp_gw *g, loop *L, const char *url, const char *method, const gp_gw_caller *who,
                   const char *xpriority, const char *body, size_t len, gw_answer *ans);
void gw_post(gw_req *q, unsigned what);
void gw_unref(gw_req *q);
/* Append the x-ratelimit-* header lines ("name: value\r\n") of rl, after
 * retry-after and retry-after-ms with retry. */
int gw_ratelimit_lines(gp_buf *b, const gp_admit_ratelimit *rl, bool retry);
/* The x-ratelimit-* lines of q's tenant now, for an answer from upstream
 * (none when no request or token limit applies to it).  Any loop. */
int gw_answer_ratelimit(gw_req *q, gp_buf *b);
const char *gw_backend(void);

/* A request head as the front reads it (front.c; pure, fuzzed by
 * fuzz/fuzz-gateway-front.c).  Strings are NUL-terminated copies. */
#define GW_FRONT_HEAD_MAX (64 * 1024) /* over it: 431 */
typedef struct gw_front_head {
        size_t head_len;           /* bytes of the head */
        bool v1;                   /* for /v1 (else the rest below is not filled) */
        char method[16];
        bool head;                 /* method HEAD: answers carry no body */
        char url[512];             /* the target up to its query */
        bool keep_alive, http10, expect;
        int64_t clen;              /* body bytes; -1 = chunked */
        bool has_xprio, has_authz; /* the header was sent ("?" when too long to keep) */
        char xprio[32];
        char authz[640];
        /* for the browser check (base/browser.h); "?" when too long to keep */
        bool has_ctype, has_origin, has_sfs, has_host;
        char ctype[128], origin[GP_ORIGIN_MAX], sfs[32], host[256];
        bool has_fwd_for;          /* X-Gpupool-Forwarded-For (server/forward.h); "?" when too long */
        char fwd_for[256];
        const char *cors;          /* set by the check: the allowed origin answers name, or NULL */
} gw_front_head;
/* 0 and *h, -EAGAIN (not whole yet), or the status to refuse with: 400
 * (malformed), 431 (head over GW_FRONT_HEAD_MAX), 414 (target over 511
 * bytes). */
int gw_front_parse_head(const char *in, size_t n, gw_front_head *h);
/* A connection's first bytes b[0..n) (n <= 16): 1 when its request line is
 * for /v1 (the front keeps it), 0 when not (MHD gets it), -1 when more
 * bytes are needed to tell. */
int gw_front_sniff(const char *b, size_t n);

/* front.c, for gateway.c (owning loop) */
void gw_front_init(loop *L);
/* An event of the listening socket (TAG_LISTEN) or of a connection (TAG_FRONT, TAG_RELAY). */
void gw_front_event(loop *L, uint64_t data, uint32_t events);
/* q's answer has news (status, bytes, its end): send it when the batch is done. */
void gw_front_wake(gw_req *q);
/* Send what is due, cut connections past their deadlines, free closed ones. */
void gw_front_flush(loop *L);
void gw_front_sweep(loop *L, int64_t now);
/* The loop stops: send what is due and close every connection. */
void gw_front_close_all(loop *L);
/* Close idle front connection n (conns.c chose it as the oldest idle). */
void gw_front_evict(gw_idle *n);
/* A connection of L ended: take waiting ones again if accepting was paused. */
void gw_front_accept_resume(loop *L);

/* conns.c: the connection guard (owning loop unless said) */
/* n has no request in progress from now / has one again. */
void gw_idle_enter(loop *L, gw_idle *n, int64_t now);
void gw_idle_leave(loop *L, gw_idle *n);
/* A connection was accepted: near the loop's share of max_connections
 * close the oldest idle one. */
void gw_conns_after_accept(loop *L);
/* Once per loop pass: while accepting is paused and a connection waits in
 * the kernel, close the oldest idle one. */
void gw_conns_balance(loop *L);
/* An edge on an MHD connection's socket (TAG_MCONN): before MHD runs. */
void gw_mconn_event(loop *L, uint64_t data);
/* Watch q's MHD client socket for a hang-up (EPOLLRDHUP, data q) while
 * its request waits.  The socket is in L's set already when its MHD
 * connection has a record (TAG_MCONN): the registration is lent to q and
 * given back by gw_unwatch_client (before the connection closes: MHD's
 * completion callback comes first).  0 or -errno. */
int gw_watch_client(loop *L, gw_req *q);
void gw_unwatch_client(gw_req *q);
/* Cut MHD connections past their header deadline or below the body rate. */
void gw_mconn_sweep(loop *L, int64_t now);
/* Body bytes needed by now from a body that began at t0 (the rate after
 * a grace of header_timeout): a body with fewer is too slow.  Pure. */
int64_t gw_body_due(int64_t t0_ms, int64_t now_ms, int64_t grace_ms, int64_t rate);

#endif
