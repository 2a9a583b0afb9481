/* server-int.h - the daemon's state, shared by daemon.c (state, recovery,
 * the decision loop) and http.c (requests, routing, answers).
 *
 * Threads:
 *   - MHD worker threads parse requests.  Reads take d->lock briefly; writes
 *     become a cmd on d's queue and the connection is suspended.
 *   - The loop thread is the only writer: it takes a batch of commands,
 *     applies them and runs the scheduler under d->lock, and stores every
 *     changed task in one transaction.  With store.sync: full the fsync of
 *     that transaction runs on the sync thread (commit.h) while the loop
 *     goes on with the next batch; the batch's answers, supervisor starts
 *     and resize signals go out only once it is durable, and a reader's
 *     answer waits until what it read is (gp_commit_wait).  Readers never
 *     see a change that is not stored.
 *   - The sampler thread reads the GPUs every gpu_poll_ms.
 * Lock order: d->lock before d->rs_lock; d->qlock is a leaf.
 *
 * The cluster code (nodes*.c, coord.c) does not include this file: what it
 * may see and ask of the daemon is cluster-host.h and hreq.h, declared
 * there and defined by the daemon (cluster-host.c, hreq.c, daemon.c,
 * http.c).  A change of a field here changes cluster-host.c, not them.
 */
#ifndef GP_SERVER_SERVER_INT_H
#define GP_SERVER_SERVER_INT_H

#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/i64map.h"
#include "base/list.h"
#include "base/user.h"
#include "config/config.h"
#include "core/array.h"
#include "core/sched.h"
#include "core/task.h"
#include "gpu/gpu.h"
#include "server/cluster-host.h"
#include "server/hreq.h"
#include "store/store.h"

typedef enum cmd_kind {
        CMD_SUBMIT,
        CMD_CANCEL,
        CMD_RELEASE,
        CMD_HEARTBEAT,
        CMD_DRAIN,
        CMD_UNDRAIN,
        CMD_GPU_FAILED,             /* from the sampler: requeue or fail what runs on it */
        CMD_TENANT_PUT,             /* PUT /admin/tenants/{id} */
        CMD_KEY_CREATE,             /* POST /admin/tenants/{id}/keys */
        CMD_WEIGHTS,                /* PUT /admin/scheduler/weights */
        CMD_CREDIT,                 /* POST /admin/tenants/{id}/credit (billing.c) */
        CMD_USAGE_TOKENS,           /* gp_billing_record_tokens: gateway tokens to store */
        CMD_INVOICE,                /* GET /api/v1/invoices of a closed month not yet issued */
        CMD_ARRAY_CANCEL,           /* POST /api/v1/arrays/{id}/cancel: id, array_index */
        CMD_NODE,                   /* an agent's join or sync, a node or join-token admin call (nodes.h) */
        CMD_MEM_EXCEEDED,           /* from the watchdog (nodes-tele.h): stop task op.id, over its memory_mb */
        CMD_COORD_AUDIT,            /* a coordinator write's audit entry and answer (coord.h) */
} cmd_kind;

struct hreq;

/* A command on one task or job array (CANCEL, RELEASE, HEARTBEAT, ARRAY_CANCEL). */
typedef struct cmd_op {
        int64_t id;                 /* the task's, or ARRAY_CANCEL: the array's */
        char tenant[GP_TENANT_MAX]; /* "" = any (admin / no auth); another tenant's task answers 404 */
        char user[GP_USER_NAME_MAX]; /* "" = any; else a local user's own tasks only (peer.h) */
        int64_t array_index;        /* ARRAY_CANCEL: the element's index, -1 = every element */
        bool has_exit_code;         /* RELEASE */
        int exit_code;
} cmd_op;

/* A command is its kind and that kind's payload, nothing else: only the
 * member of the union its kind names is used.  Make it with gp_cmd_new and
 * free it with gp_cmd_free (what its payload owns too). */
typedef struct cmd {
        cmd_kind kind;
        struct cmd *next;           /* in the queue */
        struct hreq *req;           /* answered when done; NULL for none */
        union {
                struct {            /* SUBMIT */
                        gp_task task;        /* the new task (moved in) */
                        gp_array_spec array; /* a job array (n > 0): task is every element's template */
                } submit;
                cmd_op op;          /* CANCEL, RELEASE, HEARTBEAT, ARRAY_CANCEL */
                struct {            /* DRAIN, UNDRAIN, GPU_FAILED */
                        uint32_t gpu;
                        char why[GP_REASON_MAX]; /* GPU_FAILED: what the backend said */
                } gpu;
                struct {            /* TENANT_PUT */
                        char who[96];            /* the actor, for the audit log */
                        gp_cfg_tenant *rec;      /* the new record (owned) */
                } tenant_put;
                struct cmd_key_create { /* KEY_CREATE */
                        char who[96];
                        char tenant[GP_TENANT_MAX];
                        char key[80];            /* the new key, shown once */
                } key_create;
                struct {            /* WEIGHTS */
                        char who[96];
                        uint32_t weights[GP_PRIORITY_LEVELS];
                } weights;
                struct gp_node_cmd *node; /* NODE (owned) */
                struct gp_coord_audit *coord_audit; /* COORD_AUDIT (owned) */
                struct {            /* CREDIT, USAGE_TOKENS, INVOICE (billing.c) */
                        char who[96];
                        struct gp_bill_cmd *p;   /* payload (owned) */
                } bill;
        };
} cmd;

/* A zeroed command of this kind; NULL when the memory is short. */
cmd *gp_cmd_new(cmd_kind kind);
/* Free c and what its payload owns; takes NULL. */
void gp_cmd_free(cmd *c);

/* One HTTP request (MHD's con_cls). */
typedef struct hreq {
        struct MHD_Connection *conn;
        struct gp_daemon *d;
        bool admin;                 /* an admin key, or loopback when no key exists */
        char tenant[GP_TENANT_MAX]; /* the key's tenant; "" for admin */
        char who[96];               /* the actor, for the audit log */
        bool peer;                  /* the kernel named the caller (peer.h): user, uid */
        bool own_only;              /* a local user who is no admin: its own tasks only */
        bool anonymous;             /* keyless, nobody named, on a root daemon: runs no command as root */
        char user[GP_USER_NAME_MAX];
        uint32_t uid;
        gp_buf body;                /* request body, capped */
        bool body_too_big;
        bool started;               /* second handler call seen */
        bool suspended;
        bool answered;              /* status/resp filled by the loop thread */
        int status;
        char *resp;                 /* malloc'd body of the answer */
        const char *ctype;
        int retry_after;            /* seconds, 0 = no header */
        /* long poll (GET task ?wait=) */
        int64_t wait_id;
        int64_t wait_until_ms;
        bool waiting;
        gp_list wlink;              /* in d->waiters (waiting) or d->followers (following) */
        /* log follow */
        int log_fd;
        int64_t log_id;
        int64_t log_offset;         /* follow: the request's offset (the stream position of pos 0) */
        struct gp_runlog_follow *log_follow; /* follow: which run and rank (runlog.c), owned */
        bool following;
        int64_t follow_idle_ms;
        /* gateway (/v1/...) */
        bool openai;                /* errors in the OpenAI shape */
        const char *cors;           /* its Origin, when listed in server.allowed_origins (d->cfg's); else NULL */
        void *gw;                   /* the gateway's request while it has one (gateway.h) */
        struct gp_node *node_held;  /* an agent's sync held by its node (nodes.c), under d->lock */
        struct gp_idem_req *idem;   /* its Idempotency-Key while in flight (idem.h), else NULL */
        bool idem_replayed;         /* the answer is a kept one: Idempotent-Replayed: true */
} hreq;

typedef struct gp_daemon {
        gp_config cfg;
        char self_exe[PATH_MAX];
        char tasks_dir[PATH_MAX];
        const char *backend;        /* "sim" | "nvml" */
        gp_store *ws;               /* loop thread only */
        gp_store *rs;               /* readers, under rs_lock */
        gp_store *cs;               /* the checkpointer thread's (SQLite WAL -> database) */
        pthread_mutex_t rs_lock;
        gp_gpu_backend *gpu;        /* sampler thread (after start) */
        gp_sched *sched;            /* under lock */
        pthread_mutex_t lock;
        gp_i64map tasks;            /* active (queued/running) gp_task*, under lock */
        gp_i64map leases;           /* the running leases among them (TTL checks), under lock */
        gp_i64map watch;            /* task id -> pidfd+1 (as intptr), under lock */
        gp_i64map requeue;          /* batch task id -> malloc'd reason: requeue (not end) when its
                                       supervisor reports, because its GPU failed; loop thread */
        int64_t wd_due_ms;          /* the watchdog's next look at agents' tasks over their memory
                                       (their grace ends; INT64_MAX: none), under lock (nodes-tele.c) */
        gp_i64map oom;              /* of those, the ones the watchdog stopped (-> 1): requeued with
                                       memory_mb x tasks.oom_retry_factor; loop thread */
        int64_t *gone;              /* tasks whose supervisor is gone, unprocessed; loop thread */
        gp_i64map draining;         /* preempted task id -> pidfd+1 of its old run, still stopping; loop thread */
        size_t ndraining;
        gp_i64map ranks;            /* multi-node task id -> ranks that ended well (daemon.c); loop thread */
        gp_i64map lpreempting;      /* preempted leases in their grace period: id -> gp_task*
                                       (t->preempt_deadline_ms set), under lock */
        int64_t *resized;           /* batch tasks resized in this batch: alloc.json + signal after
                                       the commit; loop thread */
        size_t nresized, capresized;
        int64_t *peaked;            /* running tasks whose GPU memory peak grew well past the stored one:
                                       stored with the next batch (nodes-tele.c) */
        size_t npeaked, cappeaked;
        int64_t *deferred;          /* batch tasks to spawn once nothing drains; loop thread */
        size_t ndeferred, capdeferred;
        /* the spawner thread starts supervisors off the loop's path (daemon.c) */
        pthread_t spawner_thread;
        pthread_mutex_t sp_lock;    /* guards the three lists below */
        pthread_cond_t sp_cond;
        int64_t *spq;               /* batch tasks to start, handed over by the loop */
        size_t nspq, capspq;
        int64_t *spfail;            /* (id, -errno) pairs back to the loop: could not start */
        size_t nspfail, capspfail;
        int *strays;                /* pidfds of our children (supervisors) not reaped yet */
        size_t nstrays, capstrays;
        gp_i64map fresh;            /* recovered tasks never started: only where no supervisor ran, under lock */
        int64_t next_rule_check_ms; /* loop thread */
        struct gp_tenants *tenants; /* tenants, keys, time rules, the audit log (tenants.h), under lock */
        size_t ngone, capgone;
        int64_t next_id;            /* under lock */
        uint32_t *gpu_ids;          /* backend index -> sched gpu id */
        size_t ngpus;
        gp_gpu_info *gpu_info;      /* last readings, under lock */
        /* command queue */
        pthread_mutex_t qlock;
        cmd *qhead, *qtail;
        size_t qlen;
        int evfd;                   /* wakes the loop */
        int epfd;                   /* evfd + supervisor pidfds */
        int lock_fd;                /* flock on DATA_DIR/gpupool.lock: one daemon per data dir */
        char hostname[256];         /* gethostname() at start: a Host the DNS-rebinding guard accepts */
        /* long-poll waiters and log followers (hreq.wlink), under lock */
        gp_list waiters;
        gp_list followers;
        bool ready;                 /* /readyz: set (atomically) by the loop after its first full pass */
        int stopping;              /* set once when the daemon stops; __atomic loads and stores (threads poll it) */
        pthread_t loop_thread, sampler_thread, checkpoint_thread;
        struct MHD_Daemon *mhd;     /* mhds[0], NULL when not serving */
#define GP_HTTP_MAX_LOOPS 16
        struct MHD_Daemon *mhds[GP_HTTP_MAX_LOOPS]; /* one per HTTP loop, all on one port */
        struct gp_peer_srv *peer_srv; /* the local Unix socket's daemon (peer.h), NULL = none */
        int nmhd;
        int bound_fds[GP_HTTP_MAX_LOOPS]; /* listening sockets from gp_http_bind, taken by gp_http_start */
        int n_bound;                /* how many; 0 = gp_http_start binds itself */
        struct gp_gw *gw;           /* the inference gateway (gateway/gateway.h), thread-safe */
        /* counters, under lock */
        uint64_t submitted_total, finished_total, failed_total, cancelled_total;
        uint64_t commits, commit_tasks;
        int64_t started_ms;
        struct gp_monitor *mon;     /* metrics registry and history (monitor.h), thread-safe */
        struct gp_alerts *alerts;   /* alert rules and webhook (alerts.h), thread-safe */
        struct gp_billing *bill;    /* metering, credits, invoices (billing.h) */
        struct gp_disk *disk;       /* free-space watch, degraded mode, the reserve (disk.h) */
        struct gp_commit *cm;       /* durable commits: generations, the sync thread (commit.h) */
        struct gp_nodes *nodes;     /* agent nodes and join tokens (nodes.h), under lock */
        struct gp_estimates *est;   /* run-time predictions (estimates.h), under lock */
        struct gp_coord *coord;     /* the coordinator API's handle and heartbeat thread (coord.h) */
        struct gp_idem *idem;       /* Idempotency-Key: keys in flight, answers to keep (idem.h) */
        struct gp_history *history; /* runs ended in this batch, to store with it (history.h) */
        bool nodes_local_drain_changed; /* node local drained or undrained: store "drained" (loop thread) */
        struct gp_mps *mps;         /* gpus.sharing: mps, the MPS control daemons (mps.h) */
} gp_daemon;

/* daemon.c */
/* A new daemon (on the heap) for cfg (copied): store opened and claimed,
 * tasks recovered; no thread runs yet.  0 with *ret, or a negative code
 * with a message in err (nothing left open, *ret NULL). */
int gp_daemon_open(gp_daemon **ret, const gp_config *cfg, char *err, size_t errlen);
/* The same for the leader of several servers (cfg->server_id set): instead
 * of claiming the store, its writer handle is fenced with the leader term
 * `epoch` (gp_store_set_fence): a commit that finds the term taken over
 * logs "lost the lead" and exits the process with 75 at once. */
int gp_daemon_open_lead(gp_daemon **ret, const gp_config *cfg, int64_t epoch, char *err, size_t errlen);
/* The leader's lease surely holds until gp_mono_ms() reaches mono_ms
 * (server.c, at each renewal); each pass of the loop checks it first and
 * stops acting past it (gp_daemon_depose).  Any thread. */
void gp_daemon_lead_until(int64_t mono_ms);
/* This leader may no longer act (its lease ran out: it was frozen, or the
 * database cannot be reached): from now on it only answers reads of what
 * it holds in memory.  Every command (submits, cancels, agent syncs and
 * joins, admin writes) gets 503 with Retry-After, /v1 too, /readyz is 503
 * and /healthz says why; nothing is applied, started, signalled or
 * stored.  There is no way back: server.c exits (75) as soon as the
 * database answers again, and the restarted server follows or leads
 * afresh from what is stored.  Logs why once.  Any thread. */
void gp_daemon_depose(const char *why);
/* Has gp_daemon_depose been called?  Any thread. */
bool gp_daemon_deposed(void);
/* A leader that may have lost its lease (deposed, or its lease clock ran
 * out: it deposes itself here): it answers nothing from memory as if it
 * were current.  false for a single server.  Any thread. */
bool gp_daemon_lead_lost(void);
int gp_daemon_start(gp_daemon *d);
void gp_daemon_stop(gp_daemon *d);
/* Close what d holds and free it (after gp_daemon_stop); takes NULL. */
void gp_daemon_close(gp_daemon *d);
/* Append a task as one JSON object to b; d->lock held by the caller (queue
 * position and reason of a queued task come from the scheduler).
 * 0, -ENOMEM, -E2BIG. */
int gp_daemon_task_write(gp_daemon *d, const gp_task *t, gp_buf *b);
/* A reason written for a task of tenant owner names no other tenant's
 * task: "task N" of another tenant becomes "a task of another tenant"
 * (gp_monitor_hide_task_ids).  d->lock held. */
/* Why queued task t waits (gp_sched_task_reason), or, when no node of the
 * pool can hold it now, that it waits for the pool to grow and why it may.
 * d->lock held. */
void gp_daemon_task_reason(gp_daemon *d, const gp_task *t, char *reason, size_t size, gp_sched_reason *ret);
/* Why queued task t waits, in full, as the task object and the queue say
 * it: the scheduler's reason (also in core, alone, for reason_detail), the
 * nodes' note, the time rule in force when a quota or share holds it, then
 * why it is back in the queue (its own reason: requeued, preempted). */
void gp_daemon_queued_reason(gp_daemon *d, const gp_task *t, char *reason, size_t size, char *core, size_t core_size,
                             gp_sched_reason *ret);
/* The reason's code and arguments for a page in another language
 * (gp_sched_reason), when what is shown starts with the core's text
 * (core); what follows it is "note", said in English.  NULL when there is
 * nothing to say so (no code, or part of it hidden). */
struct json_t *gp_daemon_reason_detail(gp_daemon *d, const char *owner, const gp_sched_reason *r, const char *core,
                                       const char *shown);
void gp_daemon_reason_hide(gp_daemon *d, const char *owner, char *reason, size_t size);
/* Look a task up: active from memory, else from the store. Copies into
 * *ret (gp_task_done after). d->lock must be held. 0, -ENOENT, -GP_ESTORE. */
int gp_daemon_task_lookup(gp_daemon *d, int64_t id, gp_task *ret);
/* The long-poll waiters (GET task ?wait=): link a parked request in, or
 * take it out (a no-op when it is not waiting). d->lock held. */
void gp_daemon_waiter_add(gp_daemon *d, hreq *r);
void gp_daemon_waiter_del(gp_daemon *d, hreq *r);
/* Resume a parked request (long poll / follow) so its handler runs again. */
void gp_http_wake(hreq *r);

/* http.c */
/* Send an answer now from an HTTP handler with this Content-Type (NULL =
 * JSON); takes body (malloc'd; NULL answers 503). */
int gp_http_send_type(hreq *r, int status, char *body, const char *ctype);
/* users.c: local users named by the kernel (peer.h).  After the key
 * check: name r's caller (r->peer, user, uid, own_only, anonymous); 0, or
 * the status to refuse with and msg.  Then, for a new task: the user it
 * records and runs as; 0, -EPERM (message in err: answer 403), -ENOMEM. */
int gp_http_identify_user(hreq *r, bool unix_sock, bool has_key, const char **msg);
int gp_http_submit_user(hreq *r, gp_task *t, char *err, size_t errlen);
/* The same as JSON with an Allow header (a 405's methods). */
int gp_http_send_allow(hreq *r, int status, char *body, const char *allow);
/* cors.c */
/* The browser check of r (base/browser.h) before it is authorized or
 * routed: sets r->cors; 0 = serve it, -1 = refused (403, 415) or a CORS
 * preflight answered (204), with MHD's result in *ret.  Handler thread. */
int gp_http_browser_gate(hreq *r, const char *url, const char *method, enum MHD_Result *ret);
/* Add the CORS headers of r's allowed origin (if any) to resp. */
void gp_http_cors(const hreq *r, struct MHD_Response *resp);
/* One GPU as JSON; d->lock held. */
struct json_t *gp_http_gpu_json(gp_daemon *d, uint32_t g);
int gp_http_start(gp_daemon *d, char *err, size_t errlen);
/* Bind the listening sockets of cfg->listen (one per HTTP loop) before the
 * daemon exists, so that it can drop root (server.user) before it opens
 * anything else; put them in d->bound_fds/n_bound after gp_daemon_open and
 * gp_http_start takes them.  0 with *ret_n fds in ret_fds (the caller
 * closes them if it never starts), or -errno with a message in err. */
int gp_http_bind(const gp_config *cfg, int *ret_fds, int *ret_n, char *err, size_t errlen);
void gp_http_stop(gp_daemon *d);

#endif
