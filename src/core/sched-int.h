/* sched-int.h - the scheduling core's private header: its state, the helpers
 * its files share, and where each rule lives (below).  Only src/core/sched*.c
 * include it; everyone else uses sched.h.
 *
 * Layout of the state:
 *   - gpus[]: one entry per GPU; a usable GPU (healthy, not drained, not
 *     reserved) that holds shared work (ntasks > 0, not exclusive) sits in
 *     one of the free-memory buckets of its kind (kind = interned GPU name),
 *     so the best shared GPU is found without scanning every GPU;
 *     bmask[kind] has a bit per bucket, set iff the bucket is not empty,
 *     so that search skips the empty ones (bucket_below).
 *   - nodes[]: GPUs grouped by node; a node with k usable idle GPUs sits in
 *     idle list k, so whole-GPU and gang requests find the best-fitting node
 *     without scanning every node.
 *   - tiers[]: one FIFO of queued tasks per queue index q, ordered by id;
 *     q is the priority, except under LAS where it is the task's
 *     attained-service queue (fixed while queued, recomputed on requeue).
 *   - tasks: hash map id -> task for every queued or running task.
 *   - heap: queue deadlines (lazy deletion: stale entries are skipped).
 *   - tn[]: per tenant (id from the tenants intern): settings, running
 *     count and GPU share, decayed usage, and per tier a sorted array of
 *     its queued tasks (tlist) with a Fenwick tree, so the fair-share order
 *     and exact queue positions need no walk of the queue; tiers[q].act
 *     lists the tenants with tasks queued in tier q.
 *   - gr[]: per group (id from the groups intern): share, running share,
 *     tasks waiting; `needy_groups` counts groups below their share with
 *     tasks waiting (what caps the other groups).
 *   - el[]: the running elastic tasks.  An elastic task holds whole GPUs
 *     (excl, mem 0) on one node: gpus[0..nmin) as it started, then the
 *     GPUs it grew onto in the order it took them (each GPU's grow_seq
 *     says when), so a shrink drops a suffix; ngpus is the current count
 *     (nmin while queued), and seg_ms starts the interval over which it
 *     has held ngpus GPUs (attained counts the closed ones).
 * Invariants: a GPU is in a bucket iff usable && !excl && ntasks > 0; a
 * node is in idle list k iff k == its count of usable idle GPUs and k > 0;
 * alloc on a GPU is the sum of the charges of the tasks on it; a queued
 * task is in its tier list and in its tenant's tlist for that tier; a
 * tenant's run_milli is the sum of `share` over its running tasks, and a
 * group's run_milli and waiting are the sums over its tenants (waiting
 * counts the queued tasks of tenants not at their quota); a task is in
 * el[] (at el_idx) iff it is running and elastic, with nmin <= ngpus <=
 * nmax and share == 1000 * ngpus.
 */
#ifndef GP_CORE_SCHED_INT_H
#define GP_CORE_SCHED_INT_H

#include "core/sched.h"

#include "base/err.h"
#include "base/i64map.h"
#include "base/util.h"
#include "base/vec.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SCHED_PRIVATE marks a function of the scheduler that its files share.
 * The build compiles the files as one unit, src/core/sched-all.c (as
 * SQLite builds its amalgamation, where SQLITE_PRIVATE is static): there
 * these functions are static, so libgpupool.a exports no place() or stop()
 * and the compiler inlines across the files as it did when the scheduler
 * was one file.  Each file still compiles alone (cppcheck reads them so). */
#ifdef GP_SCHED_ONE_UNIT
#define SCHED_PRIVATE static
#else
#define SCHED_PRIVATE
#endif

/* Where a run's time goes, for bench/bench-core-phases only: built with
 * -DGP_SCHED_PHASES (mk/bench.mk), the marks below count calls and time
 * them (CLOCK_MONOTONIC: ~20 ns a mark, so a figure includes its own
 * marks); in every other build they are nothing.  Counts are exact and
 * the same on every machine; times are the machine's. */
enum {
        PH_MAKE_ROOM,              /* make_room, the whole call */
        PH_PNODE_MAKE,             /* ... a node's preemption summary made again */
        PH_PLAN,                   /* ... a plan on one node (plan_node in the pass) */
        PH_PREEMPT,                /* ... a victim stopped and requeued (preempt_for) */
        PH_RESERVE,                /* reserve, the whole call */
        PH_RESV_FULL,              /* ... every node's answer for a shape made (laid out, or log overrun) */
        PH_RESV_LOG,               /* ... the answers of the nodes touched since (s->tlog) */
        PH_RESV_LAYOUT,            /* ... a shape laid out (count) */
        PH_GREADY_MAKE,            /* a GPU's ends read from its tasks (count) */
        PH_PLACE,                  /* place, for the task whose turn it is */
        PH_WALK_INIT,              /* walk_init */
        PH_WALK_REFRESH,           /* walk_refresh after a preemption */
        PH_WALK_STEP,              /* a task taken from the walk (count) */
        PH_N
};
#ifdef GP_SCHED_PHASES
#include <time.h>
typedef struct gp_phase {
        uint64_t n, ns;
} gp_phase;
extern gp_phase gp_phases[PH_N];
extern const char *const gp_phase_names[PH_N];
static inline uint64_t ph_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#define PH_START(v) uint64_t v = ph_now()
#define PH_STOP(id, v) (gp_phases[id].n++, gp_phases[id].ns += ph_now() - (v))
#define PH_COUNT(id) (gp_phases[id].n++)
#else
#define PH_START(v) ((void)0)
#define PH_STOP(id, v) ((void)0)
#define PH_COUNT(id) ((void)0)
#endif

#define NIL UINT32_MAX
#define BUCKET_MB 512
#define NBUCKETS 256
#define MAX_KINDS 64
#define MAX_NODE_GPUS 256
#define TOPO_MAX 16                /* topology kept for the first 16 GPUs of a node */
#define STRIDE1 ((uint64_t)1 << 24)
#define TIME_INF INT64_MAX
#define TLOG_CAP 4096               /* node touches logged (a power of two) */
#define RESV_SHAPES 4              /* request shapes the reservation keeps per-node answers for */

enum {
        R_NONE = 0,     /* not examined by the last run */
        R_NO_MEM,       /* a1 = MB needed, a2 = most free on a matching GPU (-1 unknown) */
        R_NO_WHOLE,     /* a1 = GPUs needed, a2 = most idle on one node (-1 unknown) */
        R_GANG_SHARED,  /* a1 = GPUs needed, a2 = MB each */
        R_NO_USABLE,    /* every matching GPU is drained, unhealthy or reserved */
        R_BEHIND_HIGHER,/* a1 = reserved task id, a2 = its priority */
        R_WOULD_DELAY,  /* a1 = reserved task id, a2 = seconds until its estimated start (-1 unknown) */
        R_DEPTH,        /* a1 = backfill depth */
        R_HOL,          /* a1 = blocked task id (backfill off) */
        R_QUOTA_TASKS,  /* a1 = tasks running, a2 = max_concurrent */
        R_QUOTA_GPUS,   /* a1 = milli-GPUs in use, a2 = max_gpus_milli; ra3 = share needed */
        R_GROUP,        /* a1 = group id, a2 = share_pct */
        R_MODELS,       /* a1 = max_models_per_gpu: every GPU that fits holds that many other models */
        R_ARRAY,        /* a1 = array id, a2 = its limit (%N): that many of its members run */
        R_NODES,        /* multi-node: a1 = GPUs needed, a2 = whole nodes free that it may use */
        R_HOST_CPU,     /* a1 = CPUs needed, a2 = most free on a node it may use */
        R_HOST_MEM,     /* a1 = RAM MiB needed, a2 = most free on a node it may use */
        R_ENODES,       /* elastic in nodes: a1 = whole nodes needed, a2 = wholly free ones it may use */
        R_DIAG,         /* why it does not fit is worked out when someone asks (diagnose() scans the
                           pool: in the run it would cost O(GPUs) per blocked task) */
};

#define GP_LABELS_MAX 33           /* label pairs of a node (32 and the implicit gpupool/node), or of a node_selector */
#define LABEL_PART_MAX 63          /* bytes of a label's key or value */
#define NAME_MAX_LEN 255
#define WEIGHT_MAX 1000000

typedef struct stask stask;

typedef struct model_ref {
        uint32_t model;
        int count;
} model_ref;

typedef struct sgpu {
        /* first, in one 64-byte block: what the placement scans (diagnose,
         * reserve, place_*) read of each GPU they look at */
        uint32_t node;
        uint8_t kind;
        bool healthy, drained, reserved;
        bool removed;              /* its node was removed: in no index, counted nowhere */
        bool excl;
        int ntasks;
        int64_t usable, alloc;
        stask **tasks;
        uint32_t bprev, bnext;     /* free-memory bucket list */
        uint32_t resv_stamp;       /* == run stamp: reserved for the blocked task */
        int nmodels;
        model_ref *models;
        /* the rest */
        int util, temp;
        int index;
        int slot;                  /* position in its node's gpu list */
        int bucket;                /* -1 when not listed */
        int tasks_cap, models_cap;
        char *uuid;
        char *name;
        int64_t total;
        int64_t foreign;           /* MB used by processes that are not the pool's (usable less it) */
        uint64_t grow_seq;         /* when an elastic task grew onto it (s->grow_seq) */
} sgpu;

typedef struct snode {
        /* first, together: what make_room's pass over every node reads */
        int ngpus, idle;
        uint64_t kinds;
        int npre;                  /* running reclaimable tasks (preemptible or borrowing; by first GPU) */
        uint16_t pre_tiers;        /* bit p: npre_prio[p] > 0 */
        char *name;
        uint32_t *gpus;
        int cap;
        int npre_prio[GP_PRIORITY_LEVELS];
        uint32_t iprev, inext;     /* idle list */
        bool has_dist;
        uint8_t dist[TOPO_MAX][TOPO_MAX];
        int size;                  /* its GPUs neither removed nor reserved (what a whole-node take holds) */
        uint64_t wkinds;           /* kinds of those GPUs */
        uint32_t *labels;          /* interned "k=v" ids (s->labels), sorted */
        int nlabels;
        unsigned allow;            /* GP_SCHED_NODE_MULTI | GP_SCHED_NODE_ELASTIC: what else it may hold */
} snode;
_Static_assert(GP_PRIORITY_LEVELS <= 16, "snode.pre_tiers has a bit per tier");

/* A node's host CPUs and RAM, in s->nhost beside s->nodes (same index):
 * kept out of snode, whose size the placement's scans feel (bench-core). */
typedef struct shost {
        int cpus;                  /* capacity: online CPUs, 0 = unknown (not limited) */
        int cpus_used;             /* asked for by the running tasks on it */
        int64_t mem_mb;            /* ... and RAM, MiB, 0 = unknown */
        int64_t mem_used;
} shost;

/* The fields are in the order the core reads them: a run's walk reads a
 * queued task's first two cache lines (what it asks, its rules, its
 * reason), the victim search and the reservation a running task's first
 * (what it holds and since when).  At 1,000,000 queued a task is seldom
 * in the cache, and each line more is a miss more per task examined. */
struct stask {
        /* read for every task a pass looks at, queued or running */
        int64_t id;
        uint32_t tenant;
        uint8_t prio;
        uint8_t q;                 /* tier it is (or will be) queued in */
        uint16_t ngpus;            /* GPUs in gpus while running (a multi-node task holds
                                      whole nodes, an elastic one what it grew to), else nmin */
        bool excl, preemptible, running;
        bool host;                 /* asks for host CPUs or RAM (cpus || hmem); beside excl: the
                                      placement predicates read it for every GPU they test */
        bool borrowing;            /* while running: started (not preemptible) on capacity
                                      guaranteed to other tenants, so reclaimable */
        bool multi;                /* takes whole nodes (multi_gen == s->node_gen) */
        bool resv_holder;
        uint8_t rcode;
        int64_t mem;               /* requested per GPU */
        int64_t charge;            /* memory charged per GPU while running */
        int64_t start_ms;
        int64_t timeout_ms;
        int64_t estimate_ms;       /* predicted run time, 0 = none */
        /* second line: the rest of a queued task's request and its reason;
         * a running task's marks */
        uint32_t pstamp;           /* == s->pstamp: marked as a preemption victim */
        uint32_t start_stamp;      /* run stamp of its latest start */
        int64_t share;             /* milli-GPUs held while running */
        uint64_t kinds;            /* allowed GPU kinds */
        uint32_t multi_gen;
        uint32_t rstamp;           /* run in which rcode was set */
        int64_t ra1, ra2;
        struct sarray *arr;        /* its job array (the %N throttle), NULL = none */
        uint16_t nmin, nmax;       /* elastic: least and most GPUs (nmax 0 = not elastic);
                                      ngpus is the current count, nmin while queued */
        uint16_t nodes_min, nodes_max; /* elastic in whole nodes (nodes_max 0 = not); then nmin is
                                          nodes_min (a lower bound of its GPUs), nmax 0 */
        /* then what fewer passes read */
        int64_t ra3;               /* third reason argument */
        uint32_t *sel;             /* node_selector: interned "k=v" ids (s->labels), NULL = any */
        int nsel;
        uint32_t model;            /* 0 = none */
        char *gpu_model;           /* NULL = any */
        uint32_t tl_idx;           /* index in its tenant's tlist of tier q (while queued) */
        int32_t cpus;              /* host CPUs it needs on each of its nodes, 0 = none (in a hole:
                                      the struct keeps its size) */
        int32_t hmem;              /* host RAM (MiB) it needs on each of its nodes, 0 = none */
        bool excl_req;             /* excl as asked (excl is forced on while multi) */
        int64_t submit_ms, deadline_ms;
        uint32_t *gpus;            /* ngpus GPUs while running: gpu1 or the heap (gcap) */
        uint32_t gpu1[2];
        uint32_t gcap;
        uint32_t pos;              /* queue position (valid when pos_gen matches; fifo) */
        stask *prev, *next;        /* tier queue (not fair policies; see tier) */
        int64_t attained;          /* GPU-ms held in finished runs (LAS) */
        int64_t *pre_by;           /* ids of the tasks it was preempted for */
        int n_pre_by, pre_by_cap;
        uint32_t el_idx;           /* index in s->el while running (elastic) */
        int64_t seg_ms;            /* while running: since when it has held ngpus GPUs */
        int64_t okey;              /* order in its tier: by (okey, id); the policy's
                                      order_key, 0 under policies that order by id */
};

/* A tenant's queued tasks of one tier, by id: an array with holes (NULL
 * for removed tasks, their ids kept so the array stays sorted) and a
 * Fenwick tree over the slots counting live ones.  lo is the first live
 * slot; holes are compacted away when they outnumber live slots. */
typedef struct tlist {
        stask **v;
        int64_t *ids;
        uint32_t *fen;             /* 1-based, cap entries */
        uint32_t lo, len, cap, n;
} tlist;

typedef struct stenant {
        uint32_t weight;           /* >= 1 */
        uint32_t group;            /* group id, 0 = none */
        int max_concurrent, max_queued;   /* 0 = unlimited */
        int64_t max_milli, guar_milli;    /* 0 = unlimited / none */
        int running, queued;
        int64_t run_milli;         /* sum of share over its running tasks */
        double usage;              /* decayed milli-GPU-ms, as of usage_ms */
        int64_t usage_ms;
        tlist q[GP_PRIORITY_LEVELS];
        uint32_t act_pos[GP_PRIORITY_LEVELS]; /* 1 + index in tiers[q].act, 0 = absent */
        uint32_t held_stamp;       /* == run stamp: held by its quota in that run */
        uint8_t held_code;         /* ... with this reason */
        int64_t held_a1, held_a2;
        int64_t held_by;           /* ... for this task of its (the first its quota held) */
        uint32_t reclaim_stamp;    /* == run stamp: a reclaim failed in that run */
        uint32_t plan_stamp;       /* preemption planning: plan_milli valid */
        int64_t plan_milli;        /* share of its tasks marked as victims */
        double key;                /* cache: usage/weight at key_ms */
        int64_t key_ms;
        bool key_ok;
} stenant;

typedef struct sgroup {
        uint32_t share_pct;        /* 1..100 */
        int64_t run_milli;
        int64_t waiting;           /* queued tasks of its tenants not at quota */
        int queued;
        bool needy;                /* waiting && run_milli < its share */
        uint32_t held_stamp;       /* == run stamp: at its share in that run */
} sgroup;

/* One tenant's cursor in a tier during a walk of the fair-share order. */
typedef struct went {
        double key;
        int64_t id;                /* id of cur */
        stask *cur;
        uint32_t tenant;
        uint32_t idx;              /* cur's slot in its tlist when last seen (a hint) */
        uint8_t cls;
} went;

typedef struct tier {
        stask *head, *tail;        /* queued tasks in order; kept only for the policies that are not
                                      fair (those walk it): hybrid and strict walk the tenants' lists */
        size_t n;
        uint64_t pass;
        uint32_t *act;             /* tenants with tasks queued here, any order */
        uint32_t nact, act_cap;
} tier;

/* An entry of a min-heap by time (heap_push, heap_pop): the queue
 * deadlines (s->heap: a task id), and when a node's preemption summary
 * stops holding (s->pwake: a node index). */
typedef struct heap_ent {
        int64_t deadline;
        int64_t id;
} heap_ent;

typedef struct intern {
        char **names;              /* names[0] = "" */
        uint32_t n, cap;
        uint32_t *slots;           /* hash -> id+1, 0 empty */
        uint32_t nslots;
} intern;

/* A queue policy (sched-policy.c): everything that differs from one
 * policy to another; the rest of the core asks s->pol, never the policy's
 * number.  One entry per gp_sched_policy in policy_ops[]. */
typedef struct gp_sched_policy_ops {
        const char *name;          /* scheduler.policy, gpupool simulate --policy */
        bool daemon;               /* offered by the daemon's config (scheduler.policy) */
        bool fair;                 /* tenants by fair share inside a tier (walk heaps, fair_rank) */
        bool las;                  /* LAS: the las_* settings are checked and used, LAS preemption */
        bool tier_preempt;         /* cfg.preemption applies (tiers and guarantees) */
        bool demote;               /* inside a tier, tasks go by their LAS level (attained service
                                      over las_thresholds_ms) before order_key, and
                                      spf_preempt lets a task preempt those of its tier or a less
                                      urgent one at a later level (spf) */
        /* the queue (tier) of a task of priority prio with this attained service */
        int (*queue_of)(const gp_sched *s, int prio, int64_t attained);
        /* a queued task's order key: a tier is ordered by (key, id); NULL = 0 */
        int64_t (*order_key)(const gp_sched *s, const stask *t);
        /* which tier goes next, given per-tier cursors and virtual passes; -1 none */
        int (*pick_tier)(const gp_sched *s, stask *const cur[], const uint64_t lp[]);
        /* 1-based position of queued task t in the dispatch order */
        uint32_t (*position)(gp_sched *s, const stask *t);
        /* may_start_any: does h2, first of its tenant in queue q2, come before
         * h, first of the same tenant in queue q? */
        bool (*before)(int q2, const stask *h2, int q, const stask *h);
        /* the grow pass's order of a running elastic task (then by id) */
        int64_t (*grow_key)(const gp_sched *s, const stask *t, int64_t now);
} gp_sched_policy_ops;

extern const gp_sched_policy_ops *const policy_ops[]; /* GP_SCHED_NPOLICIES entries */

typedef struct fit fit;

/* A placement (sched-place.c): which GPUs a task goes to among those that
 * fit.  One entry per gp_sched_placement in placement_ops[]. */
typedef struct gp_sched_placement_ops {
        const char *name;          /* scheduler.placement, gpupool simulate --placement */
        /* choose t's GPUs (avoid: not the reserved ones); false if none fit */
        bool (*place)(const gp_sched *s, const stask *t, bool avoid, fit *f);
} gp_sched_placement_ops;

extern const gp_sched_placement_ops *const placement_ops[]; /* GP_PLACE_N entries */

struct gp_sched {
        gp_sched_config cfg;
        const gp_sched_policy_ops *pol;        /* policy_ops[cfg.policy] */
        const gp_sched_placement_ops *plc;     /* placement_ops[cfg.placement] */
        sgpu *gpus;
        uint32_t ngpus, gpus_cap;
        snode *nodes;
        uint32_t nnodes, nodes_cap;
        shost *nhost;              /* nnodes entries (room for nhost_cap) */
        uint32_t nhost_cap;
        /* nodes by name: open addressing, linear probing, node index or NIL;
         * a power of two, at most half full (nodes are never deleted: a
         * removed node keeps its index) */
        uint32_t *node_ht;
        uint32_t node_ht_cap;
        char *kind_names[MAX_KINDS];
        int nkinds;
        uint32_t buckets[MAX_KINDS][NBUCKETS];
        uint64_t bmask[MAX_KINDS][NBUCKETS / 64]; /* bit b set iff buckets[k][b] is not empty */
        uint32_t idle_lists[MAX_NODE_GPUS + 1];
        uint64_t *ibits[MAX_NODE_GPUS + 1]; /* per idle list: a bit per node in it (its order) */
        uint64_t *pbits[GP_PRIORITY_LEVELS]; /* per tier p: a bit per node whose pre_tiers has p */
        uint32_t ibits_words;      /* words of each bitmap (of pbits' too) */
        int ibits_k;               /* bitmaps 0..ibits_k exist (ibits[0] unused but made) */
        int max_idle;              /* upper bound of non-empty idle list index */
        tier tiers[GP_PRIORITY_LEVELS];
        uint64_t vtime;
        /* task map: open addressing; key 0 empty, -1 tombstone */
        gp_i64map tasks;           /* id -> stask*, every queued or running task */
        size_t ntimed;             /* of them, with a time limit or a predicted run time (run_bound) */
        heap_ent *heap;
        size_t heap_n, heap_cap;
        intern tenants, models;
        uint32_t **model_gpus;     /* per model id: gpu ids where loaded */
        int *model_gpus_n, *model_gpus_cap;
        uint32_t model_gpus_len;
        uint32_t stamp, last_run_stamp;
        /* the run's second pass (work conservation): group shares hold
         * nothing back, only the idle capacity left is handed out */
        bool groups_off;
        int64_t last_resv_id;
        int64_t last_shadow_ms, last_run_ms;
        uint64_t gen, pos_gen;
        size_t running;
        uint64_t total_scheduled, total_backfilled, total_expired;
        uint32_t pstamp;           /* LAS victim marks (see las_plan) */
        stenant *tn;               /* per tenant id */
        uint32_t tn_cap;
        intern groups;
        sgroup *gr;                /* per group id (0 unused) */
        uint32_t gr_cap;
        int needy_groups;
        uint32_t usable_gpus;
        int64_t kind_usable[MAX_KINDS]; /* largest usable MB of a GPU of the kind */
        went *wbuf;                /* walk scratch */
        size_t wcap;
        stask **pv;                /* preemption plan scratch */
        uint32_t pv_n, pv_cap;
        size_t npre;               /* running reclaimable tasks (preemptible or borrowing) */
        uint32_t n_guar;           /* tenants with a guarantee (0: nothing ever borrows) */
        uint64_t total_preempted;
        stask **el;                /* running elastic tasks (t->el_idx), any order */
        uint32_t nel, el_cap;
        uint64_t grow_seq;         /* counts GPUs grown onto (last grown = highest) */
        struct eord *eo;           /* grow pass scratch */
        uint32_t eo_cap;
        gp_i64map arrays;          /* array id -> sarray*, arrays with members queued or running */
        intern labels;             /* "k=v" pairs of node labels and selectors */
        uint32_t node_gen;         /* bumped when nodes' sizes, kinds or labels change */
        uint32_t *mn;              /* multi-node scratch (node ids) */
        uint32_t mn_cap;
        struct arena_blk *arena;   /* decisions' GPU arrays (reset by each run) */
        struct arena_blk *arena_cur; /* the block in use (NULL: none yet in this run) */
        uint32_t *nmod;            /* per node: bumped whenever one of its GPUs, its labels or what
                                      it allows change (node_touch): what the reservation's
                                      cache of per-node answers checks */
        uint32_t nmod_cap;
        struct pspan {             /* per node: its reclaimable tasks' (npre) oldest and newest start,
                                      apart from snode so that make_room's pass reads 16 bytes a node */
                int64_t min, max;
        } *pspan;
        uint32_t pspan_cap;
        uint32_t tlog[TLOG_CAP];   /* the nodes of the last node_touch calls (a ring) */
        uint64_t tlog_n;           /* node_touch calls so far */
        struct resv_cache *rc[RESV_SHAPES]; /* sched-resv.c: per-node answers for recent shapes */
        struct multi_cache *mc;    /* ... and when each node is wholly free, for multi-node tasks */
        struct gready *gready;     /* per GPU: when its memory frees, for every shape (sched-resv.c) */
        uint32_t gready_cap;
        struct gends *gends;       /* ... the ends of those with more than one */
        uint32_t gends_n, gends_cap;
        uint64_t rc_tick;          /* uses of the reservation cache (its LRU clock) */
        struct gpre *gpre;         /* per GPU: what preemption could free there (sched-preempt.c) */
        uint32_t gpre_cap;
        struct pnode *pnode;       /* per node: the same summed up, and its possible victims */
        uint32_t pnode_cap;
        /* sched-preempt.c: per rule set and capacity class, a bit per node that may host a task
         * of that class by preempting, then a bitmap of the nodes changed since their pnode
         * (read whatever the class): together a superset */
        uint64_t *cbits;
        uint32_t cb_words, cb_nodes; /* words of each bitmap; the nodes they were laid out for */
        uint64_t cb_seen;          /* s->tlog_n when the touched nodes were last marked */
        heap_ent *pwake;           /* when a node's pnode stops holding (its until; id: the node) */
        size_t pwake_n, pwake_cap;
        uint32_t nsize[MAX_NODE_GPUS + 1]; /* nodes of each size (snode.size), 0 not counted: idle
                                      list k holds a wholly idle node only if nsize[k] > 0 (last:
                                      1 KB that would move the fields above, read every run) */
        int size_max;              /* the largest k with nsize[k] > 0 (0: none) */
};

/* Node sizes counted: one node's size goes from `from` to `to` (0: none). */
static inline void nsize_move(gp_sched *s, int from, int to) {
        if (from)
                s->nsize[from]--;
        if (to)
                s->nsize[to]++;
        if (to > s->size_max)
                s->size_max = to;
        while (s->size_max > 0 && !s->nsize[s->size_max])
                s->size_max--;
}

/* Node ni's GPUs or rules change (before or after: anything cached of it
 * from before is stale).  The last TLOG_CAP touches are logged, so that a
 * cache can find the nodes changed since it was last brought up to date
 * without a pass over every node. */
static inline void node_touch(gp_sched *s, uint32_t ni) {
        s->nmod[ni]++;
        s->tlog[s->tlog_n++ & (TLOG_CAP - 1)] = ni;
}

static inline const char *intern_name(const intern *in, uint32_t id) {
        return id < in->n ? in->names[id] : "";
}

/* The map of every queued or running task by id (base/i64map). */
static inline stask *map_get(const gp_sched *s, int64_t id) {
        return gp_i64map_get(&s->tasks, id);
}

static inline bool gpu_usable(const sgpu *g) {
        return g->healthy && !g->drained && !g->reserved && !g->removed;
}

static inline int64_t gpu_free(const sgpu *g) {
        return g->excl ? 0 : g->usable - g->alloc;
}

/* The highest non-empty bucket of kind k at or below b, -1 none: what
 * walks the buckets from the fullest down skips the empty ones with. */
static inline int bucket_below(const gp_sched *s, int k, int b) {
        if (b < 0)
                return -1;
        int w = b >> 6;
        uint64_t m = s->bmask[k][w] & (~(uint64_t)0 >> (63 - (b & 63)));
        while (!m) {
                if (--w < 0)
                        return -1;
                m = s->bmask[k][w];
        }
        return (w << 6) + 63 - __builtin_clzll(m);
}

static inline int bucket_of(int64_t free_mb) {
        int64_t b = free_mb / BUCKET_MB;
        if (b < 0)
                return 0;
        return b >= NBUCKETS ? NBUCKETS - 1 : (int)b;
}

/* share_pct of the usable GPUs, in milli-GPUs */
static inline int64_t group_cap(const gp_sched *s, const sgroup *g) {
        return (int64_t)g->share_pct * s->usable_gpus * 10;
}

static inline bool tenant_full(const stenant *T) {
        return (T->max_concurrent > 0 && T->running >= T->max_concurrent) ||
               (T->max_milli > 0 && T->run_milli >= T->max_milli);
}

/* Is T's group held in this run (T not exempt by its guarantee)? */
static inline bool group_held(const gp_sched *s, const stenant *T) {
        return T->group && !s->groups_off && s->gr[T->group].held_stamp == s->stamp &&
               !(T->guar_milli > 0 && T->run_milli < T->guar_milli);
}

/* 0: below its guarantee; 1: no group, or its group below its share;
 * 2: its group at or over its share.  Lower goes first inside a tier. */
static inline uint8_t tenant_class(const gp_sched *s, const stenant *T) {
        if (T->guar_milli > 0 && T->run_milli < T->guar_milli)
                return 0;
        if (T->group && s->gr[T->group].run_milli >= group_cap(s, &s->gr[T->group]))
                return 2;
        return 1;
}

/* milli-GPUs a task with mem MB per GPU holds on a GPU with `usable` MB */
static inline int64_t gpu_share_of(bool excl, int64_t mem, int64_t usable) {
        if (excl || usable <= 0 || mem >= usable)
                return 1000;
        return (1000 * mem + usable - 1) / usable;
}

/* May t ever be preempted by cfg.preemption: marked preemptible, or
 * borrowing someone's guarantee (then only by reclaim). */
static inline bool reclaimable(const stask *t) {
        return t->preemptible || t->borrowing;
}

/* Per tier, the next task: under hybrid and strict a heap of tenants by
 * (class, usage/weight, id of their next task), else the tier list.  A
 * live walk (a run) drops tenants and groups held in this run and re-checks
 * the class of the tenant on top, which only grows as tasks start (a
 * preemption lowers it: walk_refresh). */
typedef struct walk {
        bool fair, live;
        stask *cur[GP_PRIORITY_LEVELS];
        went *h[GP_PRIORITY_LEVELS];
        uint32_t hn[GP_PRIORITY_LEVELS];
} walk;

/* An array's running count and limit (the %N throttle); one per array id
 * with a member queued or running, freed with its last member. */
typedef struct sarray {
        int64_t id;
        int limit;                 /* most members running at once, 0 = no cap */
        int running;               /* members running */
        int members;               /* members queued or running */
} sarray;

/* A block of the decisions' GPU arrays (sched.c, arena_copy). */
struct arena_blk {
        struct arena_blk *next;
        size_t cap, used;          /* in ids */
        uint32_t v[];
};

struct fit {
        int n;
        uint32_t gpus[GP_MAX_GPUS];
};

/* Does node n carry every label of ids[0..k)? */
static inline bool labels_hold(const snode *n, const uint32_t *ids, int k) {
        for (int i = 0; i < k; i++) {
                int j = 0;
                while (j < n->nlabels && n->labels[j] != ids[i])
                        j++;
                if (j == n->nlabels)
                        return false;
        }
        return true;
}

/* Does node ni carry every label t's node_selector asks for? */
static inline bool sel_ok(const gp_sched *s, const stask *t, uint32_t ni) {
        return (!t->nsel || labels_hold(&s->nodes[ni], t->sel, t->nsel)) &&
               (!t->nmax || (s->nodes[ni].allow & GP_SCHED_NODE_ELASTIC));
}

/* Does node ni have t's host CPUs and RAM free now (capacity 0: not limited)? */
static inline bool host_free(const shost *n, const stask *t) {
        return (!n->cpus || n->cpus - n->cpus_used >= t->cpus) && (!n->mem_mb || n->mem_mb - n->mem_used >= t->hmem);
}

/* Does running task t hold a GPU of node ni? */
static inline bool task_on_node(const gp_sched *s, const stask *t, uint32_t ni) {
        for (int i = 0; i < t->ngpus; i++)
                if (s->gpus[t->gpus[i]].node == ni)
                        return true;
        return false;
}

/* The same for the placement predicates: tasks that ask for neither pay one
 * test.  A running task (an elastic one growing) already holds its CPUs and
 * RAM on its nodes; a node it grows onto must have them free. */
static inline bool host_ok(const gp_sched *s, const stask *t, uint32_t ni) {
        return !t->host || (t->running && task_on_node(s, t, ni)) || host_free(&s->nhost[ni], t);
}

/* Add (sign 1) or take back (-1) t's host CPUs and RAM on node ni. */
static inline void host_node(gp_sched *s, const stask *t, uint32_t ni, int sign) {
        s->nhost[ni].cpus_used += sign * t->cpus;
        s->nhost[ni].mem_used += sign * t->hmem;
}

static inline bool kind_ok(const stask *t, const sgpu *g) {
        return (t->kinds >> g->kind) & 1;
}

/* How long the task is expected to run: its time limit, else its
 * predicted run time (estimate_ms: never a limit), else 0 = unknown.
 * Backfill and reservations use it; a task past its prediction is taken
 * to end now, so what it protects is recomputed every run. */
static inline int64_t run_bound(const stask *t) {
        return t->timeout_ms > 0 ? t->timeout_ms : t->estimate_ms;
}

static inline int64_t task_end(const stask *t) {
        return run_bound(t) > 0 ? t->start_ms + run_bound(t) : TIME_INF;
}

static inline uint64_t stride(const gp_sched *s, int tier_i) {
        return STRIDE1 / s->cfg.weights[tier_i];
}

/* LAS queue of a given attained service. */
static inline int las_level(const gp_sched *s, int64_t attained) {
        int l = 0;
        while (l < s->cfg.las_levels - 1 && attained >= s->cfg.las_thresholds_ms[l])
                l++;
        return l;
}

/* Under a demoting policy (spf) a queued task at level l > 0 has
 * DEMOTE_PENALTY x the service at which it left level l - 1 added to its
 * order key (in GPU-ms; 10 gave the lowest average JCT of 1, 10 and 100 on
 * the public traces, docs/benchmarks.md). */
#define DEMOTE_PENALTY 10

/* The attained service (GPU-ms) at which task t leaves level l (l <
 * las_levels - 1): las_thresholds_ms[l]; under a demoting policy, for a
 * task whose predicted GPU time (run_bound x GPUs) is more than the first
 * threshold, every threshold times prediction / first threshold, so that
 * such a task is demoted only once it runs past its prediction. */
static inline int64_t level_end(const gp_sched *s, const stask *t, int l) {
        int64_t thr = s->cfg.las_thresholds_ms[l];
        if (!s->pol->demote)
                return thr;
        double pred = (double)run_bound(t) * (t->ngpus > 0 ? t->ngpus : 1);
        double t0 = (double)s->cfg.las_thresholds_ms[0];
        if (pred <= t0)
                return thr;
        double v = (double)thr * (pred / t0);
        return v > 4e18 ? (int64_t)4e18 : (int64_t)v;
}

/* The level of task t with this attained service. */
static inline int task_level(const gp_sched *s, const stask *t, int64_t attained) {
        int l = 0;
        while (l < s->cfg.las_levels - 1 && attained >= level_end(s, t, l))
                l++;
        return l;
}

/* Does the policy preempt by LAS level (las with las_preempt, spf with
 * spf_preempt)? */
static inline bool level_preempts(const gp_sched *s) {
        return s->pol->las ? s->cfg.las_preempt : s->pol->demote && s->cfg.spf_preempt;
}

/* The LAS level a waiting task competes at: its queue under LAS, the
 * level of its attained service (fixed while it waits) under a demoting
 * policy. */
static inline int wait_level(const gp_sched *s, const stask *t) {
        return s->pol->las ? t->q : task_level(s, t, t->attained);
}

/* GPU-ms t has held, counting a running task up to now (attained holds
 * its finished runs and the closed intervals of this run: an elastic task
 * closes one at each resize). */
static inline int64_t attained_at(const stask *t, int64_t now) {
        if (!t->running || now <= t->seg_ms)
                return t->attained;
        return t->attained + (int64_t)t->ngpus * (now - t->seg_ms);
}

static inline uint32_t task_node(const gp_sched *s, const stask *t) {
        return s->gpus[t->gpus[0]].node;
}

/* Policy order of running elastic tasks for the grow pass (key = tier),
 * or their order by node for shrink planning (key = node). */
typedef struct eord {
        int64_t key;
        int64_t id;
        stask *t;
        int before;                /* grow pass: its GPU count before the pass */
} eord;

/* Does t's array run as many members as its %N allows? */
static inline bool array_full(const stask *t) {
        return t->arr && t->arr->limit > 0 && t->arr->running >= t->arr->limit;
}

/* sched-util.c */
SCHED_PRIVATE void *grow_from(void *p, size_t elem, uint32_t *cap, uint32_t need, uint32_t first);
SCHED_PRIVATE void *grow(void *p, size_t elem, uint32_t *cap, uint32_t need);
SCHED_PRIVATE void intern_done(intern *in);
SCHED_PRIVATE int intern_get(intern *in, const char *s, uint32_t *ret);
SCHED_PRIVATE int map_put(gp_sched *s, stask *t);
SCHED_PRIVATE void map_del(gp_sched *s, int64_t id);
SCHED_PRIVATE int heap_push(heap_ent **h, size_t *n, size_t *cap, int64_t deadline, int64_t id);
SCHED_PRIVATE void heap_pop(heap_ent *h, size_t *n);
SCHED_PRIVATE int intern_find(const intern *in, const char *s, uint32_t *ret);

/* sched.c */
SCHED_PRIVATE const uint32_t *arena_copy(gp_sched *s, const uint32_t *v, int n);
SCHED_PRIVATE int emit(gp_sched_decision **ret, size_t *n, size_t *cap, const gp_sched_decision *d);

/* sched-task.c */
SCHED_PRIVATE void task_free(gp_sched *s, stask *t);
SCHED_PRIVATE int start_on(gp_sched *s, stask *t, const uint32_t *gpus, int n, int64_t now, int borrow);
SCHED_PRIVATE int task_gpus_cap(stask *t, uint32_t n);
SCHED_PRIVATE void stop(gp_sched *s, stask *t, int64_t now);

/* sched-queue.c */
SCHED_PRIVATE int tenant_ensure(gp_sched *s, uint32_t id);
SCHED_PRIVATE void groups_refresh_all(gp_sched *s);
SCHED_PRIVATE void tenant_out(gp_sched *s, stenant *T);
SCHED_PRIVATE void tenant_in(gp_sched *s, stenant *T);
SCHED_PRIVATE bool group_holds(const gp_sched *s, const stenant *T, int64_t share);
SCHED_PRIVATE int gate(const gp_sched *s, const stask *t, int64_t share, int64_t *a1, int64_t *a2, int64_t *a3);
SCHED_PRIVATE uint32_t tl_fen_sum(const tlist *l, uint32_t pos);
SCHED_PRIVATE uint32_t tl_below(const tlist *l, int64_t id);
SCHED_PRIVATE int walk_init(gp_sched *s, walk *w, bool live);
SCHED_PRIVATE void walk_refresh(gp_sched *s, walk *w);
SCHED_PRIVATE void walk_head(gp_sched *s, walk *w, int i);
SCHED_PRIVATE void walk_advance(gp_sched *s, walk *w, int i);
SCHED_PRIVATE int queue_add(gp_sched *s, stask *t);
SCHED_PRIVATE void queue_del(gp_sched *s, stask *t);
SCHED_PRIVATE bool name_ok(const char *n, bool empty_ok);

/* sched-fair.c */
SCHED_PRIVATE void usage_advance(gp_sched *s, stenant *T, int64_t now);
SCHED_PRIVATE double tenant_key(const gp_sched *s, stenant *T);
SCHED_PRIVATE bool fair_order_kept(const gp_sched *s, int64_t now);
SCHED_PRIVATE uint64_t fair_rank(gp_sched *s, const stask *t);

/* sched-policy.c */
SCHED_PRIVATE bool fair_policy(const gp_sched *s);
SCHED_PRIVATE int pick_tier(const gp_sched *s, stask *const cur[], const uint64_t lp[]);
SCHED_PRIVATE int queue_of(const gp_sched *s, const stask *t);

/* sched-place.c */
SCHED_PRIVATE int gpu_attach(gp_sched *s, uint32_t gi, stask *t);
SCHED_PRIVATE void gpu_detach(gp_sched *s, uint32_t gi, stask *t);
SCHED_PRIVATE int64_t share_lb(const gp_sched *s, const stask *t);
SCHED_PRIVATE int64_t fit_share(const gp_sched *s, const stask *t, const uint32_t *gpus, int n);
SCHED_PRIVATE uint64_t kinds_for_glob(const gp_sched *s, const char *glob);
SCHED_PRIVATE bool shared_fits(const gp_sched *s, const stask *t, const sgpu *g, bool avoid);
SCHED_PRIVATE bool idle_fits(const gp_sched *s, const stask *t, const sgpu *g, bool avoid);
SCHED_PRIVATE bool place(const gp_sched *s, const stask *t, bool avoid, fit *f);
SCHED_PRIVATE bool whole_node_ok(const gp_sched *s, const stask *t, uint32_t ni);
SCHED_PRIVATE void multi_refresh(gp_sched *s, stask *t);
SCHED_PRIVATE int pairs_parse(intern *add, const intern *find, const char *text, uint32_t *ids, int max);
SCHED_PRIVATE int find_node(const gp_sched *s, const char *name, uint32_t *ret);
SCHED_PRIVATE void diagnose(gp_sched *s, stask *t);
SCHED_PRIVATE bool models_full(const gp_sched *s, const stask *t, const sgpu *g);
SCHED_PRIVATE int node_units(const gp_sched *s, const stask *t, uint32_t ni);
SCHED_PRIVATE int64_t need_units(const stask *t);

/* sched-resv.c */
SCHED_PRIVATE int64_t reserve(gp_sched *s, stask *t, int64_t now);
SCHED_PRIVATE void resv_free(gp_sched *s);

/* sched-preempt.c */
SCHED_PRIVATE void pre_count(gp_sched *s, const stask *t, int d);
SCHED_PRIVATE int las_make_room(gp_sched *s, stask *t, int64_t now, gp_sched_decision **ret, size_t *ret_n,
                  size_t *ret_cap);
SCHED_PRIVATE bool gpu_could(const gp_sched *s, const sgpu *g, const stask *w, bool avoid);
SCHED_PRIVATE void gpre_free(gp_sched *s);
SCHED_PRIVATE int make_room(gp_sched *s, stask *w, int64_t now, bool after_resv, bool avoid, gp_sched_decision **ret,
              size_t *ret_n, size_t *ret_cap);

/* sched-elastic.c */
SCHED_PRIVATE int shrink_for(gp_sched *s, stask *w, int64_t now, bool avoid, fit *f, gp_sched_decision **ret,
               size_t *ret_n, size_t *ret_cap);
SCHED_PRIVATE int grow_all(gp_sched *s, int64_t now, gp_sched_decision **ret, size_t *ret_n, size_t *ret_cap);
SCHED_PRIVATE int nodes_shrink_for(gp_sched *s, stask *w, int64_t now, bool avoid, fit *f, gp_sched_decision **ret,
                                   size_t *ret_n, size_t *ret_cap);

#endif
