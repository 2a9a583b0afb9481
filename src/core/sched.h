/* sched.h - the scheduling core: state and time in, decisions out.
 *
 * Pure: no I/O, no clock reads, no locks, no logging.  The daemon, the trace
 * simulator and the benchmarks drive this same code.  A gp_sched holds the
 * GPU inventory (nodes and GPUs), the queued tasks (one FIFO per priority
 * tier) and the running tasks with their placements.
 *
 * One call, gp_sched_run(), makes every decision that is due at `now`:
 * queued tasks whose queue timeout passed are expired, then tasks are taken
 * in policy order (hybrid: P0 strict, P1..P9 by weighted fair queuing;
 * strict; fifo; las, see below; sef) and placed.  When the task whose turn it is cannot be placed
 * it gets a reservation (the GPUs it will start on first) and, with backfill
 * on, later tasks may start only where they cannot delay it (EASY backfill).
 *
 * Placement: memory must fit within memory_total - memory_safety_margin;
 * a task with memory_mb 0 or exclusive takes whole GPUs; a GPU that already
 * has the task's model is preferred; shared tasks go to GPUs already shared
 * (most free memory first) before idle ones, keeping whole GPUs free for
 * exclusive and gang work; exclusive tasks take idle GPUs on the node with
 * the fewest idle GPUs that fits (best fit); a multi-GPU task is all or
 * nothing on one node, choosing the closest GPUs when topology is known.
 * A task that asks for more GPUs than the largest node it may use holds
 * takes whole nodes instead: see "Multi-node tasks" below.
 * That is placement "pack"; "spread" (cfg.placement) balances load instead:
 * a task goes to the GPUs with the most free memory (an idle GPU before a
 * shared one), then the lowest utilisation, then the lowest temperature
 * (then the lowest id); whole GPUs and gangs go to the node with the most
 * that fit.  Model affinity comes first under both.
 *
 * Ids: GPUs are numbered 0..n-1 in the order added; tasks keep the caller's
 * int64 id, and FIFO order inside a tier is by that id (the daemon assigns
 * increasing ids, so id order is submission order).
 *
 * Tenants (see "Tenants, quotas, groups and preemption" below): inside a
 * tier the next task comes from the tenant with the least decayed usage per
 * unit of weight (fair share); per-tenant quotas and per-group shares hold
 * tasks back without blocking others; with `preemption` on, the task whose
 * turn it is may preempt less urgent preemptible work or reclaim its
 * tenant's guaranteed GPUs.  A tenant never configured behaves like one
 * with weight 1, no limits and no group.
 *
 * Not thread-safe: the caller serialises all calls on one gp_sched.
 */
#ifndef GP_CORE_SCHED_H
#define GP_CORE_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/quota.h"
#include "core/task.h"

typedef struct gp_sched gp_sched;

typedef enum gp_sched_policy {
        GP_SCHED_HYBRID = 0,  /* P0 strict, P1..P9 weighted fair queuing */
        GP_SCHED_STRICT,      /* lowest tier number first */
        GP_SCHED_FIFO,        /* submission order, tiers ignored */
        GP_SCHED_LAS,         /* least attained service first (see "LAS" below) */
        GP_SCHED_SEF,         /* shortest expected first: by timeout_ms (the run-time
                                 estimate), tasks without one last, ties by id; tiers
                                 ignored as in fifo; never preempts */
        GP_SCHED_SPF,         /* shortest predicted GPU time first within a tier, aged:
                                 by estimate_ms (else timeout_ms) x GPUs, less
                                 spf_aging_pct/100 GPU-ms for each ms waited, so no
                                 wait grows without bound; a task with no estimate is
                                 taken as short (as LAS takes a new job); tiers strict.
                                 A task preempted past a LAS level (see "LAS"
                                 below; thresholds scaled up by a prediction longer
                                 than the first) waits with a finite penalty of 10x
                                 the service it was demoted at, and with spf_preempt a task
                                 preempts preemptible ones of its tier or a less
                                 urgent one at a later level (demotion) */
        GP_SCHED_NPOLICIES    /* not a policy: the count */
} gp_sched_policy;

/* The policy's name ("hybrid", "strict", "fifo", "las", "sef"), or NULL
 * for a value that is not a policy. */
const char *gp_sched_policy_name(gp_sched_policy p);
/* The policy of a name.  0 or -EINVAL (not a policy's name). */
int gp_sched_policy_parse(const char *name, gp_sched_policy *ret);
/* Can the daemon run it (scheduler.policy)?  las is for replays only
 * (gpupool simulate): its settings are not config keys. */
bool gp_sched_policy_daemon(gp_sched_policy p);

/* Placement: which GPU a task goes to among those it fits (see
 * "Placement" above for pack; gp_sched_config.placement). */
typedef enum gp_sched_placement {
        GP_PLACE_PACK = 0,    /* fullest first, keeping whole GPUs free (the default) */
        GP_PLACE_SPREAD,      /* load balance: most free memory, then lowest
                                 utilisation, then lowest temperature */
        GP_PLACE_N            /* not a placement: the count */
} gp_sched_placement;

/* "pack", "spread", or NULL; and back: 0 or -EINVAL. */
const char *gp_sched_placement_name(gp_sched_placement p);
int gp_sched_placement_parse(const char *name, gp_sched_placement *ret);

/* LAS (in the manner of Tiresias' discretized 2D-LAS): a task's attained
 * service is the GPU time it has held so far (GPUs x run time, summed over
 * its runs).  Queues 0..las_levels-1 replace the priority tiers: a task is
 * in queue k when its attained service is at least las_thresholds_ms[k-1]
 * and below las_thresholds_ms[k]; queues are served strictly in order, FIFO
 * by id inside a queue; priorities are ignored.  A queued task's queue is
 * fixed while it waits (its service does not grow); a running task moves
 * down as it runs.  With las_preempt, when the task whose turn it is cannot
 * be placed, running preemptible tasks of a later queue that have run at
 * least las_min_run_ms (anti-thrashing) are preempted to make room on one
 * node (whole GPUs are freed; the fewest GPUs, then the most-served tasks,
 * are chosen) and come back as GP_DECIDE_PREEMPT.  Victims are always of a
 * strictly later queue than the task they make room for, so one run cannot
 * cycle.  spf uses the same levels inside each priority tier: a queued
 * task at level l > 0 has 10x the service at which it left level l - 1
 * added to its order key (so aging still bounds its wait), its thresholds are
 * las_thresholds_ms[k] x max(1, predicted GPU time / las_thresholds_ms[0])
 * (so a task predicted long is demoted only once it runs past its
 * prediction), and the victims are of its tier or a less urgent one, at a
 * strictly later level. */
#define GP_SCHED_LAS_MAX_LEVELS GP_PRIORITY_LEVELS

typedef struct gp_sched_config {
        gp_sched_policy policy;
        uint32_t weights[GP_PRIORITY_LEVELS]; /* each >= 1 */
        int max_queue_depth;                  /* per tier, >= 1 */
        int64_t memory_safety_margin_mb;      /* >= 0 */
        bool backfill;
        int backfill_depth;                   /* tasks examined after a reservation, >= 0 */
        /* LAS and spf's demotion (checked and used only under those policies): */
        int las_levels;                       /* queues, 1..GP_SCHED_LAS_MAX_LEVELS */
        int64_t las_thresholds_ms[GP_SCHED_LAS_MAX_LEVELS - 1]; /* GPU-ms where queue k+1 starts;
                                                 first las_levels-1 used, > 0, increasing */
        bool las_preempt;                     /* preempt tasks of later queues */
        int64_t las_min_run_ms;               /* least run time before a preemption, >= 0 */
        int spf_aging_pct;                    /* spf: GPU-ms of credit per 100 ms waited, 0..100000 */
        bool spf_preempt;                     /* spf: demotion preempts (las_min_run_ms applies); default
                                                 false: spf then never preempts */
        /* fair share and preemption (hybrid, strict, fifo; see below): */
        int64_t fairshare_half_life_ms;       /* decay of tenant usage, >= 0; 0 = never decays */
        bool preemption;                      /* preempt less urgent / borrowed work */
        int64_t preempt_min_runtime_ms;       /* least run time before a task may be preempted, >= 0 */
        int max_models_per_gpu;               /* distinct models on one GPU, >= 0; 0 = unlimited
                                                 (see "Models per GPU" below) */
        gp_sched_placement placement;         /* GP_PLACE_PACK (0) unless set */
} gp_sched_config;

/* Models per GPU: with max_models_per_gpu > 0, a task with a model is not
 * placed on a GPU that already holds that many distinct models other than
 * its own (it may always join a GPU that holds its own model, and an idle
 * GPU holds none).  Tasks without a model are not limited and do not count.
 * A task held back only by this rule waits with the reason "every GPU that
 * fits holds N models (max_models_per_gpu)"; the core never stops a model
 * to make room (the daemon's serve loop unloads idle served models).  A
 * reservation counts a model-full GPU as free only once every task on it
 * may have ended. */

/* The defaults of DESIGN.md (hybrid, 256..1 weights, depth 10000, margin
 * 2000 MB, backfill on with depth 1000); for LAS: 3 queues split at 1 and
 * 10 GPU-hours, preemption on, 60 s least run time; fair-share half-life
 * 1 day; `preemption` off with a 60 s least run time; max_models_per_gpu 0
 * (unlimited: the daemon sets it from its config). */
void gp_sched_config_defaults(gp_sched_config *cfg);

/* 0, -EINVAL (bad config), -ENOMEM. */
int gp_sched_new(const gp_sched_config *cfg, gp_sched **ret);
/* Takes NULL. */
void gp_sched_free(gp_sched *s);
/* Change tier weights at once (runtime change). 0 or -EINVAL. */
int gp_sched_set_weights(gp_sched *s, const uint32_t weights[GP_PRIORITY_LEVELS]);
const gp_sched_config *gp_sched_get_config(const gp_sched *s);
/* Change the per-tier queue depth limit (tasks already queued stay).
 * 0 or -EINVAL. */
int gp_sched_set_max_queue_depth(gp_sched *s, int depth);

/* ---- inventory ---- */

typedef struct gp_sched_gpu_desc {
        const char *node;           /* node name, copied */
        int index;                  /* index on the node */
        const char *uuid;           /* copied */
        const char *name;           /* model name for gpu_model globs, copied */
        int64_t memory_total_mb;    /* > 0 */
        bool reserved;              /* never used for work */
} gp_sched_gpu_desc;

/* Add a GPU. Nodes are created on first use. 0, -EINVAL, -EEXIST (same
 * node+index twice), -E2BIG (more than 256 GPUs on a node or 64 GPU
 * names), -ENOMEM.  Adding a node+index whose GPU was removed (with its
 * node, gp_sched_node_remove) revives that GPU under its old id, with the
 * uuid, name, memory and reserved flag of d, healthy and not drained. */
int gp_sched_gpu_add(gp_sched *s, const gp_sched_gpu_desc *d, uint32_t *ret_gpu);
/* Topology distance between two GPUs of one node (0 closest .. 3). */
int gp_sched_gpu_set_distance(gp_sched *s, uint32_t a, uint32_t b, int distance);
/* Health and maintenance.  An unhealthy or drained GPU gets no new work;
 * what runs on it is left alone (the caller decides). 0 or -ENOENT. */
int gp_sched_gpu_set_healthy(gp_sched *s, uint32_t gpu, bool healthy);
int gp_sched_gpu_set_drained(gp_sched *s, uint32_t gpu, bool drained);
/* Latest readings, used as tie-breaks between equally good GPUs. */
int gp_sched_gpu_set_load(gp_sched *s, uint32_t gpu, int util_pct, int temp_c);
/* GPU memory used by processes that are not the pool's (another user's
 * job, a display server: "foreign"), as the driver lists them: what the
 * GPU offers new work shrinks by it (usable = total - the safety margin -
 * foreign, at least 0); tasks already there stay.  1 when it offers more
 * than before (a run may start something now), 0, -ENOENT, -EINVAL (mb
 * below 0 or over 2^40). */
int gp_sched_gpu_set_foreign(gp_sched *s, uint32_t gpu, int64_t mb);
/* Find a GPU by node name and index. 0 or -ENOENT. */
int gp_sched_gpu_find(const gp_sched *s, const char *node, int index, uint32_t *ret_gpu);
/* Room for GPUs of these model names (repeats and known ones count once
 * or not at all; a model whose GPUs were all removed frees its place):
 * 0, or -E2BIG when the scheduler's model table (64) cannot hold them. */
int gp_sched_gpu_models_room(const gp_sched *s, const char *const *names, int n);
/* Find a GPU (not removed) by uuid. 0 or -ENOENT. */
int gp_sched_gpu_find_uuid(const gp_sched *s, const char *uuid, uint32_t *ret_gpu);
/* GPU ids are 0..gp_sched_gpu_count()-1, removed GPUs included (their
 * view says `removed`). */
uint32_t gp_sched_gpu_count(const gp_sched *s);

/* ---- nodes ----
 *
 * A node is the GPUs added under one name.  Labels ("k=v" pairs) let a
 * task choose nodes (gp_sched_req.node_selector).  A removed node's GPUs
 * leave the inventory: they get no work and count nowhere (stats, group
 * shares, multi-node sizes, feasibility); gp_sched_gpu_get still answers
 * for their ids with `removed` set, and gp_sched_gpu_find still finds
 * them (so the caller can tell a removed GPU from an unknown one).  Adding
 * a GPU to the node again revives it (gp_sched_gpu_add). */

/* Set a node's labels, replacing any: "k=v,k2=v2" (NULL or "" = none);
 * at most 32 pairs, key 1..63 and value 0..63 bytes of [A-Za-z0-9._/-].
 * 0, -ENOENT (no such node), -EINVAL (bad labels; nothing changed),
 * -ENOMEM. */
int gp_sched_node_set_labels(gp_sched *s, const char *node, const char *labels);
/* Set a node's host capacity: online CPUs (0..GP_SCHED_MAX_CPUS) and RAM
 * in MiB (>= 0); 0 = unknown, not limited.  What running tasks asked for
 * is kept.  0, -ENOENT (no such node), -EINVAL. */
int gp_sched_node_set_host(gp_sched *s, const char *node, int cpus, int64_t mem_mb);
/* Drain or undrain every GPU of a node (gp_sched_gpu_set_drained).
 * 0 or -ENOENT. */
int gp_sched_node_set_drained(gp_sched *s, const char *node, bool drained);
/* Take a node's GPUs out of the inventory.  0, -ENOENT, -EBUSY (a task
 * runs on one of its GPUs: requeue or remove it first; nothing changed).
 * Removing a removed node again is 0. */
int gp_sched_node_remove(gp_sched *s, const char *node);
/* What a node may hold besides one-node tasks that are not elastic
 * (both, unless set): a part of a multi-node task (GP_SCHED_NODE_MULTI),
 * an elastic task (GP_SCHED_NODE_ELASTIC).  The daemon keeps multi-node
 * tasks off its own GPUs (node local) and elastic tasks on them only.
 * 0, -ENOENT, -EINVAL (another bit). */
#define GP_SCHED_NODE_MULTI 1u
#define GP_SCHED_NODE_ELASTIC 2u
int gp_sched_node_set_allow(gp_sched *s, const char *node, unsigned allow);
/* Nodes with at least one GPU that is not removed. */
int gp_sched_node_count(const gp_sched *s);
/* Ids of a node's GPUs (removed ones included), in the order added:
 * writes up to max, returns how many there are, or -ENOENT. */
int gp_sched_node_gpus(const gp_sched *s, const char *node, uint32_t *ids, int max);

typedef struct gp_sched_gpu_view {
        const char *node, *uuid, *name;   /* owned by the scheduler, valid until it changes */
        int index;
        int64_t memory_total_mb;
        int64_t memory_usable_mb;         /* total minus the safety margin and the foreign memory */
        int64_t memory_foreign_mb;        /* gp_sched_gpu_set_foreign's */
        int64_t memory_allocated_mb;      /* sum over tasks on it (whole = usable) */
        int ntasks;
        bool exclusive_held, healthy, drained, reserved;
        bool removed;                     /* its node was removed (gp_sched_node_remove) */
        int util_pct, temp_c;
} gp_sched_gpu_view;

/* 0 or -ENOENT. */
int gp_sched_gpu_get(const gp_sched *s, uint32_t gpu, gp_sched_gpu_view *ret);
/* Ids of the tasks running on a GPU: writes up to max, returns how many
 * there are (may be more than max). */
int gp_sched_gpu_tasks(const gp_sched *s, uint32_t gpu, int64_t *ids, int max);
/* Models loaded on a GPU (from tasks with a model): up to max names,
 * returns how many there are. */
int gp_sched_gpu_models(const gp_sched *s, uint32_t gpu, const char **names, int max);

/* ---- tasks ---- */

typedef struct gp_sched_req {
        int64_t id;                 /* > 0, unique */
        const char *tenant;         /* interned by the scheduler */
        int priority;               /* 0..9 */
        int gpus;                   /* 1..GP_MAX_GPUS (more than a node holds: whole nodes) */
        int64_t memory_mb;          /* per GPU; 0 = whole GPU */
        bool exclusive;             /* whole GPUs even with memory_mb */
        bool preemptible;
        const char *model;          /* NULL or "" = none */
        const char *gpu_model;      /* glob on the GPU name; NULL or "" = any */
        int64_t timeout_ms;         /* expected run time bound, 0 = unknown */
        int64_t estimate_ms;        /* predicted run time (core/predict.h), 0 = none: orders sef
                                       when set, and is never a limit (nothing is stopped by it) */
        int64_t submit_ms;
        int64_t queue_deadline_ms;  /* expire if still queued then; 0 = never */
        int elastic_max_gpus;       /* 0 = not elastic; else gpus < this <= GP_NODE_MAX_GPUS:
                                       starts on `gpus` (its minimum), may grow to this
                                       (see "Elastic tasks" below) */
        bool borrowing;             /* gp_sched_restore_running only: it was started
                                       borrowing (GP_DECIDE_START's borrowing); else ignored */
        bool readmit;               /* accepted before (a retry, or queued again after a
                                       restart): its tenant's max_queued does not apply */
        int64_t array_id;           /* > 0: a member of this job array (see "Job arrays"), 0 = none */
        int array_limit;            /* its array's %N: most members running at once, 0 = no cap;
                                       every member of one array carries the same */
        const char *node_selector;  /* "k=v,k2=v2": only nodes whose labels hold every pair;
                                       NULL or "" = any node (syntax as gp_sched_node_set_labels) */
        int elastic_min_nodes;      /* 0 = not elastic in nodes; else 1 <= this == gpus and
                                       <= elastic_max_nodes <= GP_SCHED_MAX_ENODES: whole nodes
                                       (see "Elastic in whole nodes" below); not with
                                       elastic_max_gpus */
        int elastic_max_nodes;
        int cpus;                   /* CPUs it needs on each node it runs on, 0..GP_SCHED_MAX_CPUS, 0 = none */
        int64_t host_memory_mb;     /* RAM (MiB) it needs on each node, >= 0, 0 = none (see "Host
                                       CPUs and RAM" below) */
} gp_sched_req;

#define GP_SCHED_MAX_ENODES 1024    /* most nodes of a task elastic in nodes */

/* Host CPUs and RAM: a node may have a capacity (gp_sched_node_set_host);
 * a task that asks for cpus or host_memory_mb is placed only on nodes
 * whose capacity less what its running tasks asked for covers the request
 * (a multi-node task: on each of its nodes).  A node of unknown capacity
 * (0) is not limited.  A blocked task that no node could take now for
 * lack of CPUs or RAM waits with the reason "waiting: needs 8 CPUs, most
 * free on a node is 4" (codes no_cpus, no_host_memory); one that no node
 * could ever take (every matching node's capacity is smaller) is
 * infeasible (gp_sched_check_feasible).  Tasks that ask for neither are
 * placed exactly as before.  Reservations and backfill reason about GPUs
 * only: a task may backfill onto a node's free CPUs. */
#define GP_SCHED_MAX_CPUS 65536
#define GP_SCHED_MAX_HOST_MB INT32_MAX  /* host_memory_mb bound (2 PiB) */

/* Multi-node tasks: a task whose `gpus` is more than the GPUs (not
 * reserved) of the largest node it may use (GPUs matching gpu_model, on
 * nodes matching node_selector, not removed) takes whole nodes: every GPU
 * of each node it takes (reserved ones aside), all idle, healthy and not
 * drained; only nodes all of whose GPUs match its gpu_model and hold its
 * memory_mb; all or nothing.  The nodes: as few as possible (largest
 * first, then lowest node number), then each chosen node, the last first,
 * is swapped for the smallest node not chosen that still covers the
 * request (fewest GPUs beyond it; ties: lowest node number).  Its START
 * lists every GPU of those nodes grouped by node, nodes in node order, so
 * a 12-GPU task on 8-GPU nodes holds 16 GPUs, and its share, quotas and
 * usage count the 16.  When it is the task whose turn it is and cannot
 * start, it reserves the nodes that will be free first by the running
 * tasks' time limits (EASY backfill: later tasks start on them only when
 * they end before that).  A multi-node task may be preempted (all its GPUs
 * are freed) but does not itself preempt or shrink elastic tasks: it waits
 * for whole nodes.  Elastic tasks are never multi-node (one node: a
 * request whose minimum no node holds is infeasible).  Which tasks are
 * multi-node is decided again when the inventory or labels change. */

/* Elastic in whole nodes: a task with elastic_max_nodes takes whole nodes
 * (as a multi-node task does, whatever their size, on nodes that allow
 * GP_SCHED_NODE_MULTI): it starts on elastic_min_nodes of them (the
 * largest idle ones first), and its START lists their GPUs grouped by
 * node.  Later runs change it by whole nodes, reported as RESIZE with the
 * whole new GPU set, the nodes it keeps first and in their order:
 *   - grow: in the grow pass (as elastic tasks: no task that may start is
 *     left waiting), it takes one more wholly idle node at a time (the
 *     largest, then lowest number) up to elastic_max_nodes, while its
 *     tenant and group stay within their limits and the task stays within
 *     GP_MAX_GPUS; the new node's GPUs come last.
 *   - shrink: when the task W whose turn it is cannot be placed (and
 *     before elastic tasks shrink for it or anything is preempted), such
 *     tasks above their minimum give back their last node, one node at a
 *     time, the task with the most nodes above its minimum first (ties:
 *     the highest id), until W fits; nothing shrinks unless W then starts.
 * Its reason while queued says how many whole nodes it waits for. */

/* Job arrays: members of one array (same array_id) are ordinary tasks in
 * every respect (order, quotas, placement), except that with array_limit
 * N > 0 a member does not start while N members of its array run; it
 * waits with the reason "array ID runs N at once (%N)".  The throttle
 * holds that member only: its tenant's other tasks, and other arrays, go
 * on in the same run (each throttled member costs O(1) in a run).  The
 * running count is rebuilt by gp_sched_restore_running after a restart. */

/* Can this request ever run on the inventory (ignoring what is busy,
 * drained or unhealthy, but not reserved or removed GPUs)?  0, or -EINVAL
 * with a reason in why ("no GPU has 90000 MB usable (largest: 22564 MB)",
 * "needs 4 whole nodes of 8 GPUs, 3 exist"). */
int gp_sched_check_feasible(const gp_sched *s, const gp_sched_req *r, char *why, size_t size);

/* Queue a task.  0, -EEXIST, -EINVAL, -GP_EQUEUEFULL (its tier is at
 * max_queue_depth), -EDQUOT (its tenant has max_queued tasks queued, and
 * the request is not a readmit: a quota, to be answered as one, never as
 * the errno's "Disk quota exceeded"),
 * -ENOMEM.  Does not place it: call gp_sched_run. */
int gp_sched_enqueue(gp_sched *s, const gp_sched_req *r);
/* Would n more tasks of tenant with this priority be queued (n calls of
 * gp_sched_enqueue, not readmits)?  0, -GP_EQUEUEFULL (the tier would
 * pass max_queue_depth) or -EDQUOT (the tenant would pass max_queued).
 * The daemon asks it before queueing a job array, so that an array is
 * taken whole or not at all.  O(1). */
int gp_sched_enqueue_room(const gp_sched *s, const char *tenant, int priority, size_t n);
/* Put a task that was running before a restart back on its GPUs.
 * 0, -EEXIST, -EINVAL (GPU ids bad or memory does not fit), -ENOMEM. */
int gp_sched_restore_running(gp_sched *s, const gp_sched_req *r, const uint32_t *gpus, int n,
                             int64_t start_ms);
/* Forget a task (it ended or was cancelled): unqueue it or free its GPUs.
 * A running task's run counts (attained service, tenant usage) up to the
 * time of the last gp_sched_run.  0 or -ENOENT. */
int gp_sched_remove(gp_sched *s, int64_t id);
/* The same, with the run counted up to now_ms (the time it ended; the
 * daemon should use this: between runs the core knows no time). */
int gp_sched_remove_at(gp_sched *s, int64_t id, int64_t now_ms);
/* Put a running task back into its queue (preempted, or its GPU failed),
 * freeing its GPUs; it keeps its place by id. 0, -ENOENT, -GP_ESTATE.
 * Its attained service (LAS) counts the run up to the time of the last
 * gp_sched_run (the core reads no clock). */
int gp_sched_requeue(gp_sched *s, int64_t id);
/* The same, with the run counted up to now_ms. */
int gp_sched_requeue_at(gp_sched *s, int64_t id, int64_t now_ms);
/* Attained service of a task: GPU-ms held over all its runs, a running
 * task counted up to now_ms.  Tracked under every policy; only LAS orders
 * by it.  0 or -ENOENT. */
int gp_sched_task_attained(const gp_sched *s, int64_t id, int64_t now_ms, int64_t *ret_gpu_ms);

typedef enum gp_sched_decision_kind {
        GP_DECIDE_START = 0,   /* start task on gpus[0..n_gpus) */
        GP_DECIDE_EXPIRE,      /* queued past its queue deadline: end it */
        GP_DECIDE_PREEMPT,     /* running task stopped and queued again (LAS with
                                  las_preempt, or cfg.preemption); gpus[0..n_gpus)
                                  are the GPUs it held.  In the same run a START
                                  follows for the task it made room for.  Callers
                                  that do not handle a kind must ignore it. */
        GP_DECIDE_RESIZE,      /* a running elastic task's GPU set changed: gpus[0..n_gpus)
                                  is its whole new set (GPUs it keeps first, in their old
                                  order; grown ones after them) */
} gp_sched_decision_kind;

typedef struct gp_sched_decision {
        gp_sched_decision_kind kind;
        int64_t id;
        int n_gpus;
        const uint32_t *gpus;  /* n_gpus GPU ids (dec.gpus[j]); they live in an arena the
                                  scheduler owns: valid until the next gp_sched_run or
                                  gp_sched_free (copy what must outlive that) */
        bool backfilled;       /* START past a blocked, reserved task */
        bool borrowing;        /* START of a task that is not preemptible on capacity guaranteed to
                                  other tenants: it runs reclaimable (see "Borrowing" below) */
} gp_sched_decision;

/* Make every decision due at now.  Decisions are appended to *ret (a
 * growing array the caller owns and frees; *ret_n updated).  The state is
 * already updated when it returns (started tasks are running on their GPUs,
 * expired ones are gone).  0 or -ENOMEM (state consistent: decisions made
 * before the failure are kept and reported).  The GPU arrays of the
 * decisions of earlier runs are invalid once it is called (see
 * gp_sched_decision.gpus): the caller should start each run with *ret_n
 * at 0. */
int gp_sched_run(gp_sched *s, int64_t now_ms, gp_sched_decision **ret, size_t *ret_n,
                 size_t *ret_cap);

/* Earliest future time a run would expire something (queue deadline), or
 * INT64_MAX. */
int64_t gp_sched_next_deadline(const gp_sched *s);
/* Earliest time after now_ms at which a run could decide something that
 * no submission or task end triggers: a queue deadline, or (LAS with
 * preemption, while tasks wait) a running task passing a queue threshold
 * or its least run time so that it may be preempted.  INT64_MAX if none.
 * O(GPUs) under LAS, O(1) otherwise.  A caller that runs the core at this
 * time makes the same decisions the core would make if it were run
 * continuously. */
int64_t gp_sched_next_wakeup(const gp_sched *s, int64_t now_ms);

/* For replays (gpupool simulate), which call gp_sched_run at every event
 * and tick: true when a run at now_ms can be left out because it would
 * decide nothing, and nothing a later run decides depends on it.  That is
 * when no deadline is due, preemption has nothing to act on and no elastic
 * task runs, and either no GPU could take any task (every usable GPU is
 * held whole), or `unchanged` (the caller changed nothing since the last
 * gp_sched_run, which decided nothing), no task has a time limit and the
 * fair-share order of the tenants is the same at now_ms as at that run.
 * A run left out leaves the waiting tasks' reasons as the last run set
 * them (the daemon always runs).  O(GPUs + tenants log tenants). */
bool gp_sched_run_idle(const gp_sched *s, int64_t now_ms, bool unchanged);

typedef struct gp_sched_task_view {
        int64_t id;
        bool running;
        int priority;
        int queue_position;         /* 1-based while queued, 0 when running */
        int n_gpus;
        const uint32_t *gpus;       /* while running, n_gpus ids; owned by the scheduler, valid
                                       until the task's state next changes (a run, a requeue,
                                       a remove) */
        int64_t start_ms;
        int64_t gpus_milli;         /* while running: its GPU share (see gp_sched_tenant_cfg) */
        bool borrowing;             /* while running: borrowing others' guarantees (reclaimable) */
} gp_sched_task_view;

/* 0 or -ENOENT.  The queue position is exact and needs no queue walk:
 * O(tenants queued in the task's tier x log n) under hybrid and strict
 * (keys of the last run, classes as they are now), O(log n) under las,
 * O(queue) once after each change under fifo. */
int gp_sched_task_get(gp_sched *s, int64_t id, gp_sched_task_view *ret);
/* Why a queued task waits, as a sentence for people. Always NUL-terminates.
 * 0 or -ENOENT. */
int gp_sched_task_reason(gp_sched *s, int64_t id, char *buf, size_t size);
/* The same, and what it is made of (ret may be NULL): the reason's code
 * ("no_whole_gpu", "quota_gpus", ...; "" while running) and its arguments
 * as text, so a page can say it in another language.  The English text is
 * the code's template with {0}.. the arguments and {x} " matching 'GLOB'"
 * and " on nodes labelled K=V,..." (glob and labels bare in ret);
 * reserved: "; next in line, GPUs reserved" follows. */
#define GP_SCHED_REASON_ARGS 4
typedef struct gp_sched_reason {
        char code[32];
        char args[GP_SCHED_REASON_ARGS][64];
        int nargs;
        char glob[64];
        char labels[160];
        bool reserved;
} gp_sched_reason;
int gp_sched_task_reason_ex(gp_sched *s, int64_t id, char *buf, size_t size, gp_sched_reason *ret);
/* Queued task ids in dispatch order (position 1 first): up to max written,
 * returns the number queued. */
size_t gp_sched_queue_order(gp_sched *s, int64_t *ids, size_t max);

typedef struct gp_sched_stats {
        size_t queued[GP_PRIORITY_LEVELS];   /* per tier (LAS: per queue) */
        size_t queued_total;
        size_t running;
        uint64_t total_scheduled;   /* starts since creation */
        uint64_t total_backfilled;
        uint64_t total_expired;
        uint32_t gpus_total, gpus_usable, gpus_busy; /* busy: at least one task */
        int64_t memory_usable_mb, memory_allocated_mb;
        uint64_t total_preempted;   /* PREEMPT decisions since creation */
} gp_sched_stats;

void gp_sched_get_stats(const gp_sched *s, gp_sched_stats *ret);

/* ---- tenants, quotas, groups and preemption ----
 *
 * GPU share: a task holds, per GPU, 1000 milli-GPUs when it has the GPU to
 * itself (exclusive or memory_mb 0), else ceil(1000 * memory_mb / usable MB
 * of that GPU); its share is the sum over its GPUs (two tasks on halves of
 * one GPU hold 500 + 500).  Quotas and group shares count these.
 *
 * Order (hybrid and strict; fifo and las keep their own): tiers as above;
 * inside a tier, tenants whose running share is below their guarantee come
 * first, then tenants with no group or whose group is below its share,
 * then the rest; within each class the tenant with the lowest
 * decayed_usage / weight goes next (ties: the oldest next task), FIFO by
 * id inside a tenant.  Decayed usage is the tenant's GPU-share-time,
 * halved every fairshare_half_life_ms, advanced from the `now` given to
 * gp_sched_run (a queue position uses the time of the last run).
 *
 * Gates (every policy): a task starts only if its tenant stays within
 * max_concurrent and max_gpus_milli, and its group within share_pct of the
 * usable GPUs while a task of another group that is below its own share
 * waits (else a group may borrow idle GPUs; a tenant within its guarantee
 * is never held by its group).  A held task takes no reservation and
 * blocks no one; the rest of its tenant's (group's) queue waits with it
 * for the rest of that run.
 *
 * Preemption (cfg.preemption, policies other than las): when the task W
 * whose turn it is cannot be placed, running preemptible tasks V that have
 * run preempt_min_runtime_ms and were not started in the same run may be
 * preempted if (a) V's tier is less urgent than W's and V does not run
 * within its tenant's guarantee (or V is W's tenant's), or (b) W's tenant
 * stays within its guarantee by starting W and V's tenant stays at or
 * above its own guarantee without V (reclaim; tasks further back in the
 * queue may reclaim too, never on the reserved GPUs).  A task is never
 * preempted for a task it preempted before.  Victims are on one node: the
 * fewest GPUs, then the least lost work (GPU-time run), then the highest
 * ids; nothing is preempted unless W then starts (gates included).  Each
 * victim comes back as GP_DECIDE_PREEMPT, already queued again at its
 * place by id, and W's START follows in the same run.
 *
 * Borrowing (as Kueue and Volcano treat it): capacity lent from someone's
 * guarantee is always reclaimable.  A task that is not preemptible starts
 * as an ordinary task only within its tenant's own guarantee or within the
 * capacity nobody else is guaranteed (usable GPUs minus every running
 * share minus the other tenants' unused guarantees); else it starts
 * borrowing (GP_DECIDE_START's borrowing, gp_sched_task_view's borrowing)
 * and, while it runs, is a victim for reclaim (b) like a preemptible task
 * (never for rule (a)).  Without guarantees nothing ever borrows.  The
 * flag is fixed for the run; a preempted task decides again at its next
 * start.  Reclaim needs cfg.preemption. */

typedef struct gp_sched_tenant_cfg {
        uint32_t weight;            /* fair-share weight inside a tier, 1..1000000 (0 = 1) */
        const char *group;          /* NULL/"" = no group; copied */
        gp_quota quota;             /* max_concurrent (running tasks), max_queued (queued tasks:
                                       gp_sched_enqueue -EDQUOT), max_gpus_milli, guaranteed_gpus_milli;
                                       0 = unlimited / none */
} gp_sched_tenant_cfg;

/* Create a tenant or change all of its settings at once (tasks already
 * queued or running stay).  0, -EINVAL (empty name, name or group longer
 * than 255 bytes, negative limit, weight above 1000000), -ENOMEM. */
int gp_sched_tenant_set(gp_sched *s, const char *tenant, const gp_sched_tenant_cfg *cfg);
/* Cluster share of a group, 1..100 percent of the usable GPUs (a group
 * never set has 100).  0, -EINVAL, -ENOMEM. */
int gp_sched_group_set(gp_sched *s, const char *group, uint32_t share_pct);

/* (C allows no typedef with the function's name: use `struct
 * gp_sched_tenant_usage` or its typedef gp_sched_tenant_view.) */
typedef struct gp_sched_tenant_usage {
        int running, queued;
        int64_t gpus_milli;         /* share of its running tasks */
        double fair_share_usage;    /* decayed GPU-seconds at now_ms */
} gp_sched_tenant_view;

/* Usage of a tenant against its quota. 0 or -ENOENT (never seen). */
int gp_sched_tenant_usage(gp_sched *s, const char *tenant, int64_t now_ms, struct gp_sched_tenant_usage *ret);
/* Set a tenant's decayed usage (GPU-seconds as of now_ms), e.g. restored
 * after a restart.  Creates the tenant.  0, -EINVAL, -ENOMEM. */
int gp_sched_tenant_set_usage(gp_sched *s, const char *tenant, int64_t now_ms, double gpu_seconds);

typedef struct gp_sched_group_usage {
        int queued;                 /* queued tasks of its tenants */
        int64_t gpus_milli;         /* share of its running tasks */
        int64_t share_milli;        /* share_pct of the usable GPUs */
        uint32_t share_pct;
} gp_sched_group_view;

/* Usage of a group against its share. 0 or -ENOENT (never named by
 * gp_sched_group_set or a tenant). */
int gp_sched_group_usage(gp_sched *s, const char *group, struct gp_sched_group_usage *ret);

/* ---- elastic tasks ----
 *
 * A task with elastic_max_gpus > gpus is elastic: it starts like any task
 * once `gpus` (its minimum) fit, always on whole GPUs (memory_mb and
 * exclusive are ignored for placement), and later runs grow and shrink it
 * on the node it started on:
 *   - grow: at the end of a run in which no queued task is left that its
 *     gates (quota, group share) allow to start, a running elastic task
 *     below its maximum takes idle whole GPUs of its node (healthy, not
 *     drained, not reserved), closest first, while its tenant and group
 *     stay within their limits; tasks grow in policy order (tier, then id).
 *   - shrink: when the task W whose turn it is cannot be placed, elastic
 *     tasks give back GPUs above their minimum (the last grown first), the
 *     fewest that let W start, before any task is preempted and whether or
 *     not preemption is on; nothing shrinks unless W then starts.
 * Either comes back as GP_DECIDE_RESIZE with the whole new GPU set; W's
 * START follows a shrink in the same run.  Growth never happens while a
 * task that could start waits, and shrinking happens only for one, so a
 * task never grows onto GPUs it must give back in the next run with
 * nothing else changed.  The GPU share, quotas, fair-share usage and
 * attained service count the GPUs held over each interval.
 * gp_sched_restore_running takes an elastic task with any GPU count from
 * its minimum to its maximum. */

#endif
