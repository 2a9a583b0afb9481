/* task.h - the task record: what a task is, as stored and as shown.
 *
 * This is plain data shared by the daemon (server/), the store (store/) and
 * the scheduler (core/sched.h, which copies only what it needs).  Strings
 * are fixed-size and always NUL-terminated; `spec` and `gpus` are the heap
 * fields, owned by the record (gp_task_copy / gp_task_done).
 *
 * State machine (DESIGN.md):
 *   queued -> running -> succeeded | failed | cancelled | timeout | lost
 *   queued -> cancelled | timeout (queue_timeout_s)
 *   running -> queued (preempted, or its GPU/node failed and retries remain)
 */
#ifndef GP_CORE_TASK_H
#define GP_CORE_TASK_H

#include <stdbool.h>
#include <stdint.h>

#define GP_PRIORITY_LEVELS 10
#define GP_MAX_GPUS 1024        /* most GPUs one task may hold (a multi-node task: whole nodes) */
#define GP_NODE_MAX_GPUS 256    /* most GPUs of one node, and the most an elastic task may grow to
                                   (elastic tasks run on one node) */
#define GP_TENANT_MAX 64
#define GP_NAME_MAX 128
#define GP_MODEL_MAX 128
#define GP_REASON_MAX 200
#define GP_NODE_MAX 48
#define GP_UUID_MAX 64
#define GP_SELECTOR_MAX 512     /* a node selector as text: "k=v,k2=v2", sorted by key */

typedef enum gp_task_state {
        GP_TASK_QUEUED = 0,
        GP_TASK_RUNNING,
        GP_TASK_SUCCEEDED,
        GP_TASK_FAILED,
        GP_TASK_CANCELLED,
        GP_TASK_TIMEOUT,
        GP_TASK_LOST,
        GP_TASK_STATE_COUNT,
} gp_task_state;

typedef struct gp_task_gpu {
        char node[GP_NODE_MAX];  /* node name, "local" for the server's machine */
        int index;               /* GPU index on that node */
        char uuid[GP_UUID_MAX];  /* GPU uuid as the backend reports it */
} gp_task_gpu;

typedef struct gp_task {
        int64_t id;                       /* > 0, assigned by the daemon, never reused */
        char tenant[GP_TENANT_MAX];       /* owning tenant id */
        char name[GP_NAME_MAX];           /* free text, may be "" */
        char model[GP_MODEL_MAX];         /* model the task loads (affinity), may be "" */
        char gpu_model[GP_MODEL_MAX];     /* glob on the GPU's name, "" = any */
        char node_selector[GP_SELECTOR_MAX]; /* labels its nodes must have, "k=v,k2=v2" sorted by
                                             key; "" = any node */
        int priority;                     /* 0 (most urgent) .. 9 */
        int gpu_request;                  /* GPUs wanted, 1..GP_MAX_GPUS */
        int64_t memory_mb;                /* per GPU; 0 = whole GPU */
        int cpus;                         /* CPUs it asks for (its cgroup's quota, placement), 0 = none;
                                             kept in spec ("cpus"), not a column of its own */
        int64_t host_memory_mb;           /* RAM it asks for, MiB, 0 = none; in spec ("host_memory_mb") */
        bool exclusive;                   /* whole GPU(s), no sharing */
        bool preemptible;                 /* may be preempted (tenants issue) */
        bool borrowing;                   /* its current (or last) run started on GPUs guaranteed to
                                             other tenants: reclaimable though not preemptible */
        bool is_lease;                    /* no command: caller holds the GPUs */
        int64_t timeout_s;                /* run time limit, 0 = none */
        int64_t queue_timeout_s;          /* max wait in queue, 0 = none */
        int64_t lease_ttl_s;              /* lease: heartbeat at least this often */
        int max_retries;                  /* requeues allowed after GPU/node failure */
        int retries;                      /* requeues used */
        int preempt_count;                /* times preempted */
        gp_task_state state;
        bool has_exit_code;
        int exit_code;                    /* valid when has_exit_code */
        char reason[GP_REASON_MAX];       /* why it ended / why it waits */
        int64_t submitted_ms;             /* wall-clock ms since epoch */
        int64_t started_ms;               /* 0 while never started */
        int64_t finished_ms;              /* 0 until final */
        int64_t heartbeat_ms;             /* lease: last heartbeat */
        int elastic_max_gpus;             /* 0, or elastic: gpu_request (min) < this <= GP_NODE_MAX_GPUS */
        int elastic_min_nodes;            /* elastic in whole nodes: min..max nodes (gpu_request is the */
        int elastic_max_nodes;            /* minimum); kept in its spec as "elastic_nodes"; 0 = not */
        int64_t array_id;                 /* job array it belongs to (the id of its first member), 0 = none */
        int array_index;                  /* its index in the array (SLURM_ARRAY_TASK_ID), when array_id */
        int array_limit;                  /* the array's %N (most members running at once), 0 = no cap */
        int64_t preempt_deadline_ms;      /* lease being preempted: the holder must let go by
                                             then (state stays queued; not stored) */
        int n_gpus;                       /* entries in gpus while running, else 0 */
        gp_task_gpu *gpus;                /* n_gpus entries, owned; NULL when n_gpus == 0 */
        int64_t sup_pid;                  /* batch: supervisor pid, 0 if none */
        int64_t sup_start;                /* batch: supervisor start time (clock ticks) */
        char user[33];                    /* the Unix user it runs as (GP_USER_NAME_MAX with the NUL):
                                             its submitter's, known from the kernel (a local
                                             socket's peer), else the tenant's run_as or the
                                             daemon's user; "" = not recorded (stores before
                                             schema 6: the tenant's run_as applies) */
        char *spec;                       /* batch: JSON {"command":[..],"env":{..},"workdir":".."}; NULL for a lease; owned */
        int64_t estimate_ms;              /* predicted run time when it was queued (server/estimates.h), 0 =
                                             none; not stored: predicted again at recovery */
        int64_t expected_at_ms;           /* when an expected start was first shown for this wait, 0 = never;
                                             with expected_start_ms, what gpupool_expected_starts_* judge at its
                                             start (server/estimates.h); not stored */
        int64_t expected_start_ms;
        bool gpu_mem_seen;                /* its processes' GPU memory was read (NVML lists processes); stored as a peak of -1 when not */
        int64_t gpu_mem_mb;               /* on the server's own GPUs: their memory at the last sample, MiB */
        int64_t gpu_mem_peak_mb;          /* the most seen at once in its current (or last) run; stored */
        int64_t gpu_mem_peak_stored;      /* gpu_mem_peak_mb as last stored (not stored itself) */
        int64_t gpu_mem_max_gpu_mb;       /* the most on any one of its GPUs at the last sample (watchdog) */
        int64_t wd_over_ms;               /* the watchdog's state (core/watchdog.h): 0 under, -1 stopped */
} gp_task;

/* Which start of the task its current (or last) run is: 1, 2, ...  Every
 * way back to the queue (a retry after its GPU or node failed, a
 * preemption) counts once, so the number grows with every start; agents
 * tell a current run from a stale one by it (docs/internals/cluster.md). */
static inline int64_t gp_task_run_epoch(const gp_task *t) {
        return 1 + (int64_t)t->retries + (int64_t)t->preempt_count;
}

/* "queued", "running", ...; "unknown" for out-of-range values. */
const char *gp_task_state_name(gp_task_state s);
/* Parse a state name. 0 or -EINVAL. */
int gp_task_state_parse(const char *s, gp_task_state *ret);
/* true for succeeded/failed/cancelled/timeout/lost. */
bool gp_task_state_is_final(gp_task_state s);
/* Priority by number "0".."9" or name (critical=0, high=2, normal=5, low=7,
 * background=9), case-insensitive; also "P3". 0 or -EINVAL. */
int gp_priority_parse(const char *s, int *ret);

/* Deep copy (spec and gpus duplicated). 0 or -ENOMEM (dst untouched). */
int gp_task_copy(gp_task *dst, const gp_task *src);
/* Free the heap parts (spec, gpus); the struct itself is the caller's. Takes NULL. */
void gp_task_done(gp_task *t);

#endif
