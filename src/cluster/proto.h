/* proto.h - the agent <-> server messages (docs/internals/cluster.md) as
 * plain C structs, with parse and render for both directions.
 *
 * Pure: jansson and memory only, no I/O, no clock, no logging.  Parsing
 * checks everything the contract bounds (name charset and length, labels,
 * counts of GPUs/runs/starts, string lengths, seq > 0, wait_ms 0..30000,
 * base64, log chunk sizes, argv 1..4096 entries, env keys) and fails with
 * -EINVAL and a message in the caller's err buffer (-ENOMEM when memory is
 * short); on failure the output struct is untouched and nothing is
 * allocated.  Unknown keys are ignored (a newer peer may add some).  A
 * parsed struct owns its arrays and strings: free it with its _done
 * function (takes a zeroed or half-built struct; callers that build a
 * struct by hand may use the same layout and the same _done when every
 * pointer is malloc'd).  Render functions return a malloc'd compact JSON
 * text (caller frees); they trust their input (render what you built, or
 * what a parse produced) and fail only with -ENOMEM or -EINVAL (a field
 * out of range that the peer would refuse).
 * Thread-safe: no shared state.
 */
#ifndef GP_CLUSTER_PROTO_H
#define GP_CLUSTER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/host.h"
#include "base/labels.h"
#include "core/task.h"
#include "exec/exec.h"

#define GP_PROTO_MAX_BODY (1 << 20)        /* an agent request (join, sync) */
#define GP_PROTO_MAX_ANSWER (16 << 20)     /* a server answer (starts carry argv and env) */
#define GP_PROTO_MAX_GPUS 256              /* GPUs of one node */
#define GP_PROTO_MAX_RUNS 4096             /* runs / acks / starts / stops / logs / offsets per message */
#define GP_PROTO_LOG_CHUNK (64 * 1024)     /* most log bytes of one run in one sync */
#define GP_PROTO_RETRY_MAX_MS 10000        /* longest an agent waits between tries while the server is away */
#define GP_PROTO_ANSWER_SLACK_MS 15000     /* an agent waits this long for an answer beyond its wait_ms */
#define GP_PROTO_LOG_TOTAL (256 * 1024)    /* most log bytes in one sync */
#define GP_PROTO_MAX_WAIT_MS 30000
#define GP_PROTO_MAX_ARGV 4096             /* argv entries of a start (at least 1) */
#define GP_PROTO_MAX_ENV 4096              /* env entries of a start */
#define GP_PROTO_ARG_MAX (128 * 1024)      /* bytes of one argv entry or env value */
#define GP_PROTO_MAX_RANK 65535            /* rank < nnodes <= GP_PROTO_MAX_RANK + 1 */
#define GP_PROTO_CRED_LEN 68               /* "gpn_" + 64 hex */
#define GP_PROTO_ADDR_MAX 256              /* address, master_addr */
#define GP_PROTO_VERSION_MAX 64
#define GP_PROTO_BACKEND_MAX 16
#define GP_PROTO_MACHINE_LEN 64            /* a machine key: 64 lowercase hex digits */
#define GP_PROTO_MIN_BODY 1024             /* the smallest body limit a server may announce (max_body) */
#define GP_PROTO_MAX_PAGE 100000           /* pages of one full sync */

/* A node name: 1..GP_NODE_MAX-1 bytes of [A-Za-z0-9._-], not "local". */
bool gp_proto_node_name_ok(const char *s);
/* "gpj_" / "gpn_" followed by 64 lowercase hex digits. */
bool gp_proto_join_token_ok(const char *s);
bool gp_proto_credential_ok(const char *s);
/* 64 lowercase hex digits (a machine key, docs/internals/cluster.md). */
bool gp_proto_machine_ok(const char *s);

/* A join token as users get it: "gpj_<64 hex>" (the secret, what the
 * server hashes and knows) and, after a '.', the 64 hex digits of the
 * server CA's pin (SHA-256 of its DER SubjectPublicKeyInfo, kubeadm's
 * discovery-token-ca-cert-hash), with which an agent checks the server
 * before it sends the secret.  At most GP_PROTO_JOIN_TOKEN_MAX bytes. */
#define GP_PROTO_JOIN_TOKEN_MAX (GP_PROTO_CRED_LEN + 1 + 64)
#define GP_PROTO_CA_HASH_LEN 72            /* "sha256:" + 64 hex + NUL */
/* Split a join token (with or without the pin) into its secret
 * ("gpj_<64 hex>") and the pin as "sha256:<64 hex>" ("" when the token has
 * none).  Hex digits must be lowercase.  0, or -EINVAL (outputs untouched). */
int gp_proto_join_token_split(const char *s, char ret_secret[GP_PROTO_CRED_LEN + 1],
                              char ret_ca_hash[GP_PROTO_CA_HASH_LEN]);

typedef struct gp_proto_gpu {
        int index;                   /* 0..GP_PROTO_MAX_GPUS-1, unique in the message */
        char uuid[GP_UUID_MAX];      /* 1.. bytes, clean text */
        char name[GP_NAME_MAX];      /* clean text, may be "" */
        int64_t memory_mb;           /* total, >= 0 */
        bool healthy;
} gp_proto_gpu;

/* Telemetry of one GPU, sampled on the agent at the server's gpu_poll_ms
 * (the sync answer's gpu_poll_ms).  Observations, not state: the server
 * keeps the last ones in memory and stores none.  -1 = unknown for every
 * reading (JSON: the key is absent). */
#define GP_PROTO_MAX_PROCS 64              /* processes listed per GPU */
#define GP_PROTO_MAX_PID 4194304           /* Linux's PID_MAX_LIMIT */

typedef struct gp_proto_proc {
        int pid;                     /* 1..GP_PROTO_MAX_PID, on the agent's machine */
        int64_t used_mb;             /* >= 0: the process's memory on this GPU */
        int64_t task;                /* the task whose run started it, 0 = none of ours */
        int rank;                    /* that run's rank (0..GP_PROTO_MAX_RANK) */
} gp_proto_proc;

typedef struct gp_proto_tele {
        int index;                   /* a GPU of the node, unique in the message */
        int64_t used_mb;             /* -1, or 0..2^40 */
        int util_pct;                /* -1, or 0..100 */
        int temp_c;                  /* -1, or 0..300 */
        int power_mw;                /* -1, or 0..100000000 */
        int sm_clock_mhz;            /* -1, or 0..100000 */
        int mem_clock_mhz;           /* -1, or 0..100000 */
        int64_t ecc_corrected;       /* -1, or 0..2^53 */
        int64_t ecc_uncorrected;
        int64_t throttle;            /* NVML clocks-throttle-reason bits, -1 or 0..2^53 */
        int64_t xid_errors;          /* Xid events since the agent's reader started, -1 or 0..2^53 */
        char reason[128];            /* why the GPU is unhealthy, clean text, "" when healthy */
        bool procs_known;            /* the driver listed its processes ("procs" present, may be []) */
        int n_procs;                 /* 0..GP_PROTO_MAX_PROCS */
        gp_proto_proc *procs;        /* owned, NULL when none */
} gp_proto_tele;


/* One run: one start of a task on one node. */
typedef struct gp_proto_run_id {
        int64_t task;                /* > 0 */
        int64_t epoch;               /* >= 1 (gp_task_run_epoch) */
        int rank;                    /* 0..GP_PROTO_MAX_RANK */
} gp_proto_run_id;

/* POST /agent/v1/join */
typedef struct gp_proto_join {
        char name[GP_NODE_MAX];                /* gp_proto_node_name_ok */
        char version[GP_PROTO_VERSION_MAX];    /* agent version, clean text */
        char address[GP_PROTO_ADDR_MAX];       /* "http://host:port", clean text, may be "" */
        char labels[GP_LABELS_MAX];            /* canonical (base/labels.h); JSON: an object */
        char backend[GP_PROTO_BACKEND_MAX];    /* "nvml" | "sim" */
        char machine[GP_PROTO_MACHINE_LEN + 1]; /* the machine's key (gp_proto_machine_ok); "" = absent */
        int64_t seq;                           /* > 0; 0 = absent (the server refuses such a join) */
        bool resize;                           /* the agent applies "resize" (elastic runs); old agents: false */
        int n_gpus;                            /* 0..GP_PROTO_MAX_GPUS */
        gp_proto_gpu *gpus;                    /* owned, NULL when none */
} gp_proto_join;

typedef struct gp_proto_join_answer {
        char node[GP_NODE_MAX];
        char credential[GP_PROTO_CRED_LEN + 1]; /* gp_proto_credential_ok */
        int heartbeat_s;                        /* 1..60 */
        int node_timeout_s;                     /* 2..3600 */
        int fence_s;                            /* 0..3600: runs that fence stop after this long without
                                                 * an answered sync (0 = the server does not ask it) */
        int64_t max_body;                       /* the server's body limit; 0 = not said, else >= GP_PROTO_MIN_BODY */
} gp_proto_join_answer;

typedef enum gp_proto_run_state {
        GP_PROTO_RUNNING = 0,
        GP_PROTO_EXITED,
} gp_proto_run_state;

/* A set of a node's GPU indexes (0..GP_PROTO_MAX_GPUS-1); in JSON the
 * CUDA_VISIBLE_DEVICES form "0,1,5" (ascending, each index once). */
typedef struct gp_proto_mask {
        uint64_t w[GP_PROTO_MAX_GPUS / 64];
} gp_proto_mask;

/* "0,1,5" (at most GP_PROTO_MAX_GPUS indexes < GP_PROTO_MAX_GPUS, each
 * once, any order; "" is the empty set) into *ret: 0 or -EINVAL. */
int gp_proto_mask_parse(const char *s, gp_proto_mask *ret);
/* The ascending "0,1,5" form into buf (size >= GP_PROTO_MASK_TEXT). */
#define GP_PROTO_MASK_TEXT (GP_PROTO_MAX_GPUS * 4 + 1)
void gp_proto_mask_format(const gp_proto_mask *m, char *buf, size_t size);
int gp_proto_mask_count(const gp_proto_mask *m);

typedef struct gp_proto_run {
        gp_proto_run_id id;
        gp_proto_run_state state;
        bool has_alloc;              /* an elastic run: "alloc" is its GPU set as the agent last applied it */
        gp_proto_mask alloc;
        gp_exec_result result;       /* when EXITED; message clean text */
} gp_proto_run;

typedef struct gp_proto_log {
        gp_proto_run_id id;
        int64_t offset;              /* >= 0: where data starts in the run's log */
        size_t len;                  /* 1..GP_PROTO_LOG_CHUNK */
        unsigned char *data;         /* owned, len bytes; JSON: base64 */
} gp_proto_log;

/* POST /agent/v1/sync */
typedef struct gp_proto_sync {
        char node[GP_NODE_MAX];
        int64_t seq;                 /* > 0 */
        bool full;
        int page;                    /* full: this page of the full sync, 0..GP_PROTO_MAX_PAGE (0 starts one) */
        bool more;                   /* full: more pages follow (only with full) */
        int wait_ms;                 /* 0..GP_PROTO_MAX_WAIT_MS */
        bool has_gpus;               /* "gpus" present (full syncs, changes) */
        int n_gpus;
        gp_proto_gpu *gpus;
        int n_runs;
        gp_proto_run *runs;          /* a run id at most once */
        int n_logs;                  /* sum of len <= GP_PROTO_LOG_TOTAL */
        gp_proto_log *logs;
        int n_tele;                  /* GPUs whose readings changed since the last sync (all in a full one) */
        gp_proto_tele *tele;         /* an index at most once */
        bool has_host;
        gp_host_info host;           /* the agent's machine (cpus 1..65536, sizes -1 or 0..2^40 MiB) */
} gp_proto_sync;

typedef struct gp_proto_start {
        gp_proto_run_id id;
        int nnodes;                  /* 1..GP_PROTO_MAX_RANK+1, > rank */
        char master_addr[GP_PROTO_ADDR_MAX];
        int master_port;             /* 0..65535 */
        char tenant[GP_TENANT_MAX];
        int n_argv;                  /* 1..GP_PROTO_MAX_ARGV */
        char **argv;                 /* owned, n_argv strings + a NULL */
        int n_env;                   /* 0..GP_PROTO_MAX_ENV */
        char **env;                  /* owned, "K=V" strings + a NULL (K: [A-Za-z_][A-Za-z0-9_]*) */
        char *workdir;               /* owned, "" = the run's directory */
        char cuda_visible_devices[GP_PROTO_MAX_GPUS * 5];  /* this node's GPUs, "0,1,..." */
        char gpus[GP_PROTO_MAX_GPUS * (GP_NODE_MAX + 5)]; /* GPUPOOL_GPUS, "node:i,..." (this node's) */
        int64_t timeout_s;           /* >= 0 */
        int kill_grace_s;            /* 0..86400 */
        int preempt_grace_s;         /* 0..86400 */
        int64_t max_log_bytes;       /* > 0 */
        char run_as[64];             /* "" or a Unix user name */
        int64_t array_id;            /* >= 0 */
        int64_t array_index;         /* >= 0 */
        bool fence;                  /* stopped when the node loses contact (the answer's fence_s);
                                        false: the task opted out (on_node_lost requeue) */
        gp_notice notice;            /* "notice": "[B:]SIG@SECS" (base/notice.h), signo 0 = none (absent);
                                        already clamped by the server's max_notice_s */
        int elastic_min, elastic_max; /* an elastic run (1 <= min <= max <= GP_PROTO_MAX_GPUS): its GPUs
                                         change by "resize"; both 0 = not elastic */
        int nodes_min, nodes_max;    /* a task elastic in whole nodes (1 <= min <= max <= GP_PROTO_MAX_RANK + 1):
                                        its ranks come and go; GPUPOOL_NNODES is "MIN:MAX"; both 0 = not */
        int64_t mps_memory_mb;       /* > 0: an MPS client (gpus.sharing: mps) of its one GPU's control
                                        daemon, which the agent starts: its pinned memory limit, MB
                                        (0..16777216; 0 = none, absent) */
        int mps_compute_pct;         /* its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 1..100 (with mps_memory_mb) */
        char mps_uuid[GP_UUID_MAX];  /* its GPU's uuid ("" = not known: the index is used) */
        gp_cgroup_limits limits;     /* "cpus", "host_memory_mb": its cgroup's limits (absent: none) */
} gp_proto_start;

/* A running elastic run's new GPU set on its node (sent until the agent
 * reports that set as its "alloc"). */
typedef struct gp_proto_resize {
        gp_proto_run_id id;
        gp_proto_mask gpus;          /* 1.. indexes */
} gp_proto_resize;

typedef enum gp_proto_stop_why {
        GP_PROTO_STOP_CANCEL = 0,
        GP_PROTO_STOP_PREEMPT,
        GP_PROTO_STOP_STALE,
} gp_proto_stop_why;

typedef struct gp_proto_stop {
        gp_proto_run_id id;
        gp_proto_stop_why why;
} gp_proto_stop;

typedef struct gp_proto_offset {
        gp_proto_run_id id;
        int64_t offset;              /* >= 0 */
} gp_proto_offset;

typedef struct gp_proto_sync_answer {
        int64_t seq;                 /* the sync's seq, > 0 */
        int heartbeat_s;             /* 1..60 */
        int fence_s;                 /* 0..3600, as in the join answer */
        bool want_full;
        int64_t max_body;            /* the server's body limit; 0 = not said, else >= GP_PROTO_MIN_BODY */
        int gpu_poll_ms;             /* how often to sample the GPUs; 0 = not said, else 100..3600000 */
        int n_ack;
        gp_proto_run_id *ack;
        int n_start;
        gp_proto_start *start;
        int n_stop;
        gp_proto_stop *stop;
        int n_offsets;
        gp_proto_offset *offsets;
        int n_resize;
        gp_proto_resize *resize;     /* a run id at most once */
} gp_proto_sync_answer;

/* Parse (data[0..len), not NUL-terminated necessarily).  0, -EINVAL (err
 * says why; nothing allocated), -ENOMEM.  A body over GP_PROTO_MAX_BODY
 * (requests) or GP_PROTO_MAX_ANSWER (answers) is -EINVAL. */
int gp_proto_join_parse(const char *data, size_t len, gp_proto_join *ret, char *err, size_t errlen);
int gp_proto_join_answer_parse(const char *data, size_t len, gp_proto_join_answer *ret, char *err, size_t errlen);
int gp_proto_sync_parse(const char *data, size_t len, gp_proto_sync *ret, char *err, size_t errlen);
int gp_proto_sync_answer_parse(const char *data, size_t len, gp_proto_sync_answer *ret, char *err, size_t errlen);

/* Render as compact JSON; *ret is malloc'd (caller frees).  0, -ENOMEM,
 * -EINVAL (a log chunk over GP_PROTO_LOG_CHUNK, a count over its bound). */
int gp_proto_join_render(const gp_proto_join *m, char **ret);
int gp_proto_join_answer_render(const gp_proto_join_answer *m, char **ret);
int gp_proto_sync_render(const gp_proto_sync *m, char **ret);
int gp_proto_sync_answer_render(const gp_proto_sync_answer *m, char **ret);

/* Free what the struct owns and zero it.  Take NULL. */
void gp_proto_join_done(gp_proto_join *m);
void gp_proto_sync_done(gp_proto_sync *m);
void gp_proto_start_done(gp_proto_start *s);
void gp_proto_sync_answer_done(gp_proto_sync_answer *m);

/* Deep copy of a start (for an agent keeping it past the answer).
 * 0 or -ENOMEM (*ret untouched). */
int gp_proto_start_copy(const gp_proto_start *s, gp_proto_start *ret);

/* "exited", "signaled", "timeout", "cancelled", "spawn_failed"; and back
 * (-EINVAL for anything else). */
const char *gp_proto_end_name(gp_exec_end end);
int gp_proto_end_parse(const char *s, gp_exec_end *ret);
/* "cancel", "preempt", "stale"; and back. */
const char *gp_proto_stop_name(gp_proto_stop_why why);
int gp_proto_stop_parse(const char *s, gp_proto_stop_why *ret);

/* The error answer {"error": msg}, malloc'd.  NULL only when out of memory. */
char *gp_proto_error_render(const char *msg);
/* The 409 answer to a replayed sync: {"error": msg, "seq": last}, where
 * last is the last seq the server took from the node (so that a real
 * agent goes on above it).  NULL only when out of memory. */
char *gp_proto_replay_render(const char *msg, int64_t last);
/* The "seq" of such an answer into *ret: 0, or -EINVAL (not one). */
int gp_proto_replay_parse(const char *data, size_t len, int64_t *ret);

/* Labels: canonical string (base/labels.h) <-> JSON object.  _from_json
 * takes an object of string values: 0, or -EINVAL with err (out
 * untouched).  _to_json returns a new object (caller decrefs) or NULL when
 * out of memory; canon must be canonical. */
struct json_t;
int gp_proto_labels_from_json(const struct json_t *obj, char out[GP_LABELS_MAX], char *err, size_t errlen);
struct json_t *gp_proto_labels_to_json(const char *canon);

#endif
