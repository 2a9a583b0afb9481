/* sched.c - the scheduling core (see sched.h for the contract).
 *
 * Layout of the state:
 *   - gpus[]: one entry per GPU; a usable GPU (healthy, not drained, not
 *     reserved) that holds shared work (ntasks > 0, not exclusive) sits in
 *     one of the free-memory buckets of its kind (kind = interned GPU name),
 *     so the best shared GPU is found without scanning every GPU.
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
#include "core/sched.h"

#include "base/err.h"
#include "base/i64map.h"
#include "base/util.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define BUCKET_MB 512
#define NBUCKETS 256
#define MAX_KINDS 64
#define MAX_NODE_GPUS 256
#define TOPO_MAX 16                /* topology kept for the first 16 GPUs of a node */
#define STRIDE1 ((uint64_t)1 << 24)
#define TIME_INF INT64_MAX

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
};

#define NAME_MAX_LEN 255
#define WEIGHT_MAX 1000000

typedef struct stask stask;

typedef struct model_ref {
        uint32_t model;
        int count;
} model_ref;

typedef struct sgpu {
        uint32_t node;
        int index;
        char *uuid;
        char *name;
        uint8_t kind;
        int64_t total, usable, alloc;
        int util, temp;
        bool healthy, drained, reserved, excl;
        int ntasks;
        stask **tasks;
        int tasks_cap;
        model_ref *models;
        int nmodels, models_cap;
        uint32_t bprev, bnext;     /* free-memory bucket list */
        int bucket;                /* -1 when not listed */
        uint32_t resv_stamp;       /* == run stamp: reserved for the blocked task */
        int slot;                  /* position in its node's gpu list */
        uint64_t grow_seq;         /* when an elastic task grew onto it (s->grow_seq) */
} sgpu;

typedef struct snode {
        char *name;
        uint32_t *gpus;
        int ngpus, cap;
        uint64_t kinds;
        int idle;
        int npre;                  /* running reclaimable tasks (preemptible or borrowing; by first GPU) */
        int npre_prio[GP_PRIORITY_LEVELS];
        int64_t pre_min_start, pre_max_start; /* their oldest and newest start (when npre) */
        uint32_t iprev, inext;     /* idle list */
        bool has_dist;
        uint8_t dist[TOPO_MAX][TOPO_MAX];
} snode;

struct stask {
        int64_t id;
        uint32_t tenant;
        uint8_t prio, ngpus;
        bool excl, preemptible, running;
        bool borrowing;            /* while running: started (not preemptible) on capacity
                                      guaranteed to other tenants, so reclaimable */
        int64_t mem;               /* requested per GPU */
        int64_t charge;            /* memory charged per GPU while running */
        uint32_t model;            /* 0 = none */
        char *gpu_model;           /* NULL = any */
        uint64_t kinds;            /* allowed GPU kinds */
        int64_t timeout_ms, submit_ms, deadline_ms, start_ms;
        uint32_t gpus[GP_MAX_GANG];
        stask *prev, *next;        /* tier queue */
        uint8_t rcode;
        bool resv_holder;
        uint32_t rstamp;           /* run in which rcode was set */
        int64_t ra1, ra2;
        uint32_t pos;              /* queue position (valid when pos_gen matches; fifo) */
        uint32_t seq;              /* order in its tier (see tier.fen) */
        uint8_t q;                 /* tier it is (or will be) queued in */
        int64_t attained;          /* GPU-ms held in finished runs (LAS) */
        uint32_t pstamp;           /* == s->pstamp: marked as a preemption victim */
        int64_t ra3;               /* third reason argument */
        uint32_t tl_idx;           /* index in its tenant's tlist of tier q (while queued) */
        uint32_t start_stamp;      /* run stamp of its latest start */
        int64_t share;             /* milli-GPUs held while running */
        int64_t *pre_by;           /* ids of the tasks it was preempted for */
        int n_pre_by, pre_by_cap;
        uint8_t nmin, nmax;        /* elastic: least and most GPUs (nmax 0 = not elastic);
                                      ngpus is the current count, nmin while queued */
        uint32_t el_idx;           /* index in s->el while running (elastic) */
        int64_t seg_ms;            /* while running: since when it has held ngpus GPUs */
        struct sarray *arr;        /* its job array (the %N throttle), NULL = none */
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
        stask *head, *tail;
        size_t n;
        uint64_t pass;
        /* order statistics: seq numbers follow list order; fen is a Fenwick
         * tree over seq (1-based) counting live tasks, so "how many ahead of
         * t in its tier" is O(log n) */
        uint32_t *fen;
        uint32_t fen_cap;          /* seqs 1..fen_cap-1 usable */
        uint32_t next_seq;
        uint32_t *act;             /* tenants with tasks queued here, any order */
        uint32_t nact, act_cap;
} tier;

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

struct gp_sched {
        gp_sched_config cfg;
        sgpu *gpus;
        uint32_t ngpus, gpus_cap;
        snode *nodes;
        uint32_t nnodes, nodes_cap;
        char *kind_names[MAX_KINDS];
        int nkinds;
        uint32_t buckets[MAX_KINDS][NBUCKETS];
        uint32_t idle_lists[MAX_NODE_GPUS + 1];
        int max_idle;              /* upper bound of non-empty idle list index */
        tier tiers[GP_PRIORITY_LEVELS];
        uint64_t vtime;
        /* task map: open addressing; key 0 empty, -1 tombstone */
        gp_i64map tasks;           /* id -> stask*, every queued or running task */
        size_t ntimed;             /* of them, with a time limit (timeout_ms > 0) */
        heap_ent *heap;
        size_t heap_n, heap_cap;
        intern tenants, models;
        uint32_t **model_gpus;     /* per model id: gpu ids where loaded */
        int *model_gpus_n, *model_gpus_cap;
        uint32_t model_gpus_len;
        uint32_t stamp, last_run_stamp;
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
};

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

static void *grow(void *p, size_t elem, uint32_t *cap, uint32_t need) {
        if (need <= *cap)
                return p;
        uint32_t n = *cap ? *cap : 8;
        while (n < need)
                n *= 2;
        void *q = realloc(p, (size_t)n * elem);
        if (!q)
                return NULL;
        *cap = n;
        return q;
}

static uint64_t hash_str(const char *s) {
        uint64_t h = 1469598103934665603ULL;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ULL;
        return h;
}

static void intern_done(intern *in) {
        for (uint32_t i = 0; i < in->n; i++)
                free(in->names[i]);
        free(in->names);
        free(in->slots);
}

static int intern_rehash(intern *in, uint32_t nslots) {
        uint32_t *slots = calloc(nslots, sizeof(*slots));
        if (!slots)
                return -ENOMEM;
        for (uint32_t id = 1; id < in->n; id++) {
                uint32_t h = (uint32_t)hash_str(in->names[id]) & (nslots - 1);
                while (slots[h])
                        h = (h + 1) & (nslots - 1);
                slots[h] = id + 1;
        }
        free(in->slots);
        in->slots = slots;
        in->nslots = nslots;
        return 0;
}

/* id of s (0 for NULL or ""), interning it. 0 / -ENOMEM. */
static int intern_get(intern *in, const char *s, uint32_t *ret) {
        if (!s || !*s) {
                *ret = 0;
                return 0;
        }
        if (in->n == 0) {
                in->names = calloc(8, sizeof(char *));
                if (!in->names || !(in->names[0] = strdup("")))
                        return -ENOMEM;
                in->n = 1;
                in->cap = 8;
        }
        if ((in->n + 1) * 2 > in->nslots && intern_rehash(in, in->nslots ? in->nslots * 2 : 64) < 0)
                return -ENOMEM;
        uint32_t h = (uint32_t)hash_str(s) & (in->nslots - 1);
        while (in->slots[h]) {
                uint32_t id = in->slots[h] - 1;
                if (strcmp(in->names[id], s) == 0) {
                        *ret = id;
                        return 0;
                }
                h = (h + 1) & (in->nslots - 1);
        }
        char **names = grow(in->names, sizeof(char *), &in->cap, in->n + 1);
        if (!names)
                return -ENOMEM;
        in->names = names;
        if (!(names[in->n] = strdup(s)))
                return -ENOMEM;
        in->slots[h] = in->n + 1;
        *ret = in->n++;
        return 0;
}

static const char *intern_name(const intern *in, uint32_t id) {
        return id < in->n ? in->names[id] : "";
}

/* ------------------------------------------------------------------ */
/* task map                                                            */

/* The map of every queued or running task by id (base/i64map). */
static stask *map_get(const gp_sched *s, int64_t id) {
        return gp_i64map_get(&s->tasks, id);
}

static int map_put(gp_sched *s, stask *t) {
        int rc = gp_i64map_put(&s->tasks, t->id, t);
        if (rc >= 0 && t->timeout_ms > 0)
                s->ntimed++;
        return rc;
}

static void map_del(gp_sched *s, int64_t id) {
        const stask *t = map_get(s, id);
        if (t && t->timeout_ms > 0)
                s->ntimed--;
        gp_i64map_del(&s->tasks, id);
}

/* ------------------------------------------------------------------ */
/* deadline heap                                                       */

static int heap_push(gp_sched *s, int64_t deadline, int64_t id) {
        if (s->heap_n == s->heap_cap) {
                size_t n = s->heap_cap ? s->heap_cap * 2 : 64;
                heap_ent *h = realloc(s->heap, n * sizeof(*h));
                if (!h)
                        return -ENOMEM;
                s->heap = h;
                s->heap_cap = n;
        }
        size_t i = s->heap_n++;
        while (i > 0) {
                size_t p = (i - 1) / 2;
                if (s->heap[p].deadline <= deadline)
                        break;
                s->heap[i] = s->heap[p];
                i = p;
        }
        s->heap[i] = (heap_ent){deadline, id};
        return 0;
}

static void heap_pop(gp_sched *s) {
        heap_ent last = s->heap[--s->heap_n];
        size_t i = 0, n = s->heap_n;
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= n)
                        break;
                if (c + 1 < n && s->heap[c + 1].deadline < s->heap[c].deadline)
                        c++;
                if (last.deadline <= s->heap[c].deadline)
                        break;
                s->heap[i] = s->heap[c];
                i = c;
        }
        if (n)
                s->heap[i] = last;
}

/* ------------------------------------------------------------------ */
/* GPU indexes                                                         */

static bool gpu_usable(const sgpu *g) {
        return g->healthy && !g->drained && !g->reserved;
}

static int64_t gpu_free(const sgpu *g) {
        return g->excl ? 0 : g->usable - g->alloc;
}

static int bucket_of(int64_t free_mb) {
        int64_t b = free_mb / BUCKET_MB;
        if (b < 0)
                return 0;
        return b >= NBUCKETS ? NBUCKETS - 1 : (int)b;
}

static void idle_list_del(gp_sched *s, uint32_t ni) {
        snode *n = &s->nodes[ni];
        if (n->iprev != NIL)
                s->nodes[n->iprev].inext = n->inext;
        else
                s->idle_lists[n->idle] = n->inext;
        if (n->inext != NIL)
                s->nodes[n->inext].iprev = n->iprev;
        n->iprev = n->inext = NIL;
}

static void idle_list_add(gp_sched *s, uint32_t ni) {
        snode *n = &s->nodes[ni];
        /* keep lists in node order so choices are deterministic */
        uint32_t *head = &s->idle_lists[n->idle];
        uint32_t prev = NIL, cur = *head;
        while (cur != NIL && cur < ni) {
                prev = cur;
                cur = s->nodes[cur].inext;
        }
        n->iprev = prev;
        n->inext = cur;
        if (prev != NIL)
                s->nodes[prev].inext = ni;
        else
                *head = ni;
        if (cur != NIL)
                s->nodes[cur].iprev = ni;
        if (n->idle > s->max_idle)
                s->max_idle = n->idle;
}

/* Take a GPU out of every index before its state changes. */
static void gpu_unlink(gp_sched *s, uint32_t gi) {
        sgpu *g = &s->gpus[gi];
        if (g->bucket >= 0) {
                if (g->bprev != NIL)
                        s->gpus[g->bprev].bnext = g->bnext;
                else
                        s->buckets[g->kind][g->bucket] = g->bnext;
                if (g->bnext != NIL)
                        s->gpus[g->bnext].bprev = g->bprev;
                g->bucket = -1;
                g->bprev = g->bnext = NIL;
        }
        if (gpu_usable(g) && g->ntasks == 0) {
                snode *n = &s->nodes[g->node];
                if (n->idle > 0)
                        idle_list_del(s, g->node);
                n->idle--;
                if (n->idle > 0)
                        idle_list_add(s, g->node);
        }
}

/* Put a GPU back into the indexes after its state changed. */
static void gpu_link(gp_sched *s, uint32_t gi) {
        sgpu *g = &s->gpus[gi];
        if (!gpu_usable(g))
                return;
        if (g->ntasks == 0) {
                snode *n = &s->nodes[g->node];
                if (n->idle > 0)
                        idle_list_del(s, g->node);
                n->idle++;
                idle_list_add(s, g->node);
        } else if (!g->excl) {
                int b = bucket_of(gpu_free(g));
                g->bucket = b;
                g->bprev = NIL;
                g->bnext = s->buckets[g->kind][b];
                if (g->bnext != NIL)
                        s->gpus[g->bnext].bprev = gi;
                s->buckets[g->kind][b] = gi;
        }
}

static int model_gpus_add(gp_sched *s, uint32_t model, uint32_t gi) {
        if (model >= s->model_gpus_len) {
                uint32_t n = s->model_gpus_len ? s->model_gpus_len : 8;
                while (n <= model)
                        n *= 2;
                uint32_t **a = realloc(s->model_gpus, n * sizeof(*a));
                if (!a)
                        return -ENOMEM;
                s->model_gpus = a;
                int *b = realloc(s->model_gpus_n, n * sizeof(*b));
                if (!b)
                        return -ENOMEM;
                s->model_gpus_n = b;
                int *c = realloc(s->model_gpus_cap, n * sizeof(*c));
                if (!c)
                        return -ENOMEM;
                s->model_gpus_cap = c;
                for (uint32_t i = s->model_gpus_len; i < n; i++) {
                        a[i] = NULL;
                        b[i] = c[i] = 0;
                }
                s->model_gpus_len = n;
        }
        uint32_t cap = (uint32_t)s->model_gpus_cap[model];
        uint32_t *v = grow(s->model_gpus[model], sizeof(uint32_t), &cap, (uint32_t)s->model_gpus_n[model] + 1);
        if (!v)
                return -ENOMEM;
        s->model_gpus[model] = v;
        s->model_gpus_cap[model] = (int)cap;
        v[s->model_gpus_n[model]++] = gi;
        return 0;
}

static void model_gpus_del(gp_sched *s, uint32_t model, uint32_t gi) {
        uint32_t *v = s->model_gpus[model];
        int n = s->model_gpus_n[model];
        for (int i = 0; i < n; i++)
                if (v[i] == gi) {
                        v[i] = v[n - 1];
                        s->model_gpus_n[model]--;
                        return;
                }
}

/* Put a task on a GPU (index bookkeeping included). */
static int gpu_attach(gp_sched *s, uint32_t gi, stask *t) {
        sgpu *g = &s->gpus[gi];
        uint32_t cap = (uint32_t)g->tasks_cap;
        stask **v = grow(g->tasks, sizeof(*v), &cap, (uint32_t)g->ntasks + 1);
        if (!v)
                return -ENOMEM;
        g->tasks = v;
        g->tasks_cap = (int)cap;
        if (t->model) {
                int i;
                for (i = 0; i < g->nmodels; i++)
                        if (g->models[i].model == t->model)
                                break;
                if (i == g->nmodels) {
                        uint32_t mc = (uint32_t)g->models_cap;
                        model_ref *m = grow(g->models, sizeof(*m), &mc, (uint32_t)g->nmodels + 1);
                        if (!m)
                                return -ENOMEM;
                        g->models = m;
                        g->models_cap = (int)mc;
                        if (model_gpus_add(s, t->model, gi) < 0)
                                return -ENOMEM;
                        g->models[g->nmodels++] = (model_ref){t->model, 0};
                }
                g->models[i].count++;
        }
        gpu_unlink(s, gi);
        g->tasks[g->ntasks++] = t;
        g->alloc += t->charge;
        if (t->excl)
                g->excl = true;
        gpu_link(s, gi);
        return 0;
}

static void gpu_detach(gp_sched *s, uint32_t gi, stask *t) {
        sgpu *g = &s->gpus[gi];
        gpu_unlink(s, gi);
        for (int i = 0; i < g->ntasks; i++)
                if (g->tasks[i] == t) {
                        memmove(&g->tasks[i], &g->tasks[i + 1], (size_t)(g->ntasks - i - 1) * sizeof(stask *));
                        g->ntasks--;
                        break;
                }
        g->alloc -= t->charge;
        if (t->excl)
                g->excl = false;
        if (t->model)
                for (int i = 0; i < g->nmodels; i++)
                        if (g->models[i].model == t->model) {
                                if (--g->models[i].count == 0) {
                                        model_gpus_del(s, t->model, gi);
                                        g->models[i] = g->models[--g->nmodels];
                                }
                                break;
                        }
        gpu_link(s, gi);
}

/* ------------------------------------------------------------------ */
/* tenants, groups and their per-tier queues                           */

/* id of s if interned (0 for NULL or ""), without interning it. */
static int intern_find(const intern *in, const char *s, uint32_t *ret) {
        if (!s || !*s) {
                *ret = 0;
                return 0;
        }
        if (!in->nslots)
                return -ENOENT;
        uint32_t h = (uint32_t)hash_str(s) & (in->nslots - 1);
        while (in->slots[h]) {
                uint32_t id = in->slots[h] - 1;
                if (strcmp(in->names[id], s) == 0) {
                        *ret = id;
                        return 0;
                }
                h = (h + 1) & (in->nslots - 1);
        }
        return -ENOENT;
}

/* Make tn[id] exist (a new tenant: weight 1, no limits). 0 / -ENOMEM. */
static int tenant_ensure(gp_sched *s, uint32_t id) {
        if (id < s->tn_cap)
                return 0;
        uint32_t cap = s->tn_cap ? s->tn_cap : 16;
        while (cap <= id)
                cap *= 2;
        stenant *tn = realloc(s->tn, (size_t)cap * sizeof(*tn));
        if (!tn)
                return -ENOMEM;
        memset(tn + s->tn_cap, 0, (size_t)(cap - s->tn_cap) * sizeof(*tn));
        for (uint32_t i = s->tn_cap; i < cap; i++)
                tn[i].weight = 1;
        s->tn = tn;
        s->tn_cap = cap;
        return 0;
}

static int group_ensure(gp_sched *s, uint32_t id) {
        if (id < s->gr_cap)
                return 0;
        uint32_t cap = s->gr_cap ? s->gr_cap : 8;
        while (cap <= id)
                cap *= 2;
        sgroup *gr = realloc(s->gr, (size_t)cap * sizeof(*gr));
        if (!gr)
                return -ENOMEM;
        memset(gr + s->gr_cap, 0, (size_t)(cap - s->gr_cap) * sizeof(*gr));
        for (uint32_t i = s->gr_cap; i < cap; i++)
                gr[i].share_pct = 100;
        s->gr = gr;
        s->gr_cap = cap;
        return 0;
}

/* share_pct of the usable GPUs, in milli-GPUs */
static int64_t group_cap(const gp_sched *s, const sgroup *g) {
        return (int64_t)g->share_pct * s->usable_gpus * 10;
}

static void group_refresh(gp_sched *s, uint32_t gi) {
        if (!gi)
                return;
        sgroup *g = &s->gr[gi];
        bool needy = g->waiting > 0 && g->run_milli < group_cap(s, g);
        if (needy != g->needy) {
                g->needy = needy;
                s->needy_groups += needy ? 1 : -1;
        }
}

static void groups_refresh_all(gp_sched *s) {
        for (uint32_t gi = 1; gi < s->groups.n; gi++)
                group_refresh(s, gi);
}

static bool tenant_full(const stenant *T) {
        return (T->max_concurrent > 0 && T->running >= T->max_concurrent) ||
               (T->max_milli > 0 && T->run_milli >= T->max_milli);
}

/* Every change to a tenant is bracketed by tenant_out / tenant_in, which
 * take its contribution out of its group and put it back. */
static void tenant_out(gp_sched *s, stenant *T) {
        T->key_ok = false;
        if (!T->group)
                return;
        sgroup *g = &s->gr[T->group];
        g->run_milli -= T->run_milli;
        g->queued -= T->queued;
        if (!tenant_full(T))
                g->waiting -= T->queued;
        group_refresh(s, T->group);
}

static void tenant_in(gp_sched *s, stenant *T) {
        if (!T->group)
                return;
        sgroup *g = &s->gr[T->group];
        g->run_milli += T->run_milli;
        g->queued += T->queued;
        if (!tenant_full(T))
                g->waiting += T->queued;
        group_refresh(s, T->group);
}

/* Decayed usage (milli-GPU-ms) at `now`: what it was at usage_ms halved
 * every half-life, plus the running share integrated with the same decay.
 * A time before usage_ms gives the stored value. */
static double usage_at(const gp_sched *s, const stenant *T, int64_t now) {
        int64_t dt = now - T->usage_ms;
        if (dt <= 0)
                return T->usage;
        double hl = (double)s->cfg.fairshare_half_life_ms;
        if (hl <= 0)
                return T->usage + (double)T->run_milli * (double)dt;
        double x = (double)dt / hl;
        return T->usage * exp2(-x) + (double)T->run_milli * (hl / M_LN2) * -expm1(-x * M_LN2);
}

static void usage_advance(gp_sched *s, stenant *T, int64_t now) {
        if (now > T->usage_ms) {
                T->usage = usage_at(s, T, now);
                T->usage_ms = now;
        }
}

/* decayed usage per unit of weight at the last run (cached) */
static double tenant_key(const gp_sched *s, stenant *T) {
        if (!T->key_ok || T->key_ms != s->last_run_ms) {
                T->key = usage_at(s, T, s->last_run_ms) / T->weight;
                T->key_ms = s->last_run_ms;
                T->key_ok = true;
        }
        return T->key;
}

/* Is T's group held in this run (T not exempt by its guarantee)? */
static bool group_held(const gp_sched *s, const stenant *T) {
        return T->group && s->gr[T->group].held_stamp == s->stamp &&
               !(T->guar_milli > 0 && T->run_milli < T->guar_milli);
}

/* 0: below its guarantee; 1: no group, or its group below its share;
 * 2: its group at or over its share.  Lower goes first inside a tier. */
static uint8_t tenant_class(const gp_sched *s, const stenant *T) {
        if (T->guar_milli > 0 && T->run_milli < T->guar_milli)
                return 0;
        if (T->group && s->gr[T->group].run_milli >= group_cap(s, &s->gr[T->group]))
                return 2;
        return 1;
}

/* milli-GPUs a task with mem MB per GPU holds on a GPU with `usable` MB */
static int64_t gpu_share_of(bool excl, int64_t mem, int64_t usable) {
        if (excl || usable <= 0 || mem >= usable)
                return 1000;
        return (1000 * mem + usable - 1) / usable;
}

/* Least share t can take on any GPU it may use. */
static int64_t share_lb(const gp_sched *s, const stask *t) {
        if (t->excl)
                return 1000 * (int64_t)t->ngpus;
        int64_t best = 0;
        for (int k = 0; k < s->nkinds; k++)
                if (((t->kinds >> k) & 1) && s->kind_usable[k] > best)
                        best = s->kind_usable[k];
        return (int64_t)t->ngpus * gpu_share_of(false, t->mem, best);
}

static int64_t fit_share(const gp_sched *s, const stask *t, const uint32_t *gpus, int n) {
        int64_t sh = 0;
        for (int i = 0; i < n; i++)
                sh += gpu_share_of(t->excl, t->mem, s->gpus[gpus[i]].usable);
        return sh;
}

/* Would a group cap hold a task of tenant T taking `share`?  Not while T
 * stays within its guarantee, nor while no task of another group that is
 * below its own share waits. */
static bool group_holds(const gp_sched *s, const stenant *T, int64_t share) {
        const sgroup *g = &s->gr[T->group];
        if (T->guar_milli > 0 && T->run_milli + share <= T->guar_milli)
                return false;
        if (g->run_milli + share <= group_cap(s, g))
                return false;
        return s->needy_groups - (g->needy ? 1 : 0) > 0;
}

/* The rule of t's tenant or group that holds t back if it takes `share`:
 * a reason code (0 = none) and its arguments. */
static int gate(const gp_sched *s, const stask *t, int64_t share, int64_t *a1, int64_t *a2, int64_t *a3) {
        const stenant *T = &s->tn[t->tenant];
        if (T->max_concurrent > 0 && T->running >= T->max_concurrent) {
                *a1 = T->running;
                *a2 = T->max_concurrent;
                return R_QUOTA_TASKS;
        }
        if (T->max_milli > 0 && T->run_milli + share > T->max_milli) {
                *a1 = T->run_milli;
                *a2 = T->max_milli;
                *a3 = share;
                return R_QUOTA_GPUS;
        }
        if (T->group && group_holds(s, T, share)) {
                *a1 = T->group;
                *a2 = s->gr[T->group].share_pct;
                return R_GROUP;
        }
        return 0;
}

static void tl_fen_add(tlist *l, uint32_t pos, int d) {
        for (; pos <= l->cap; pos += pos & (~pos + 1))
                l->fen[pos] += (uint32_t)d;
}

static uint32_t tl_fen_sum(const tlist *l, uint32_t pos) {
        uint32_t r = 0;
        for (; pos > 0; pos -= pos & (~pos + 1))
                r += l->fen[pos];
        return r;
}

/* Rebuild l without holes, with room to grow, inserting `extra` (if not
 * NULL) at its place by id.  0 or -ENOMEM (l unchanged). */
static int tl_rebuild(tlist *l, stask *extra) {
        uint32_t need = l->n + (extra != NULL), cap = 8;
        while (cap < 2 * need)
                cap *= 2;
        stask **v = malloc((size_t)cap * sizeof(*v));
        int64_t *ids = malloc((size_t)cap * sizeof(*ids));
        uint32_t *fen = calloc((size_t)cap + 1, sizeof(*fen));
        if (!v || !ids || !fen) {
                free(v);
                free(ids);
                free(fen);
                return -ENOMEM;
        }
        uint32_t k = 0;
        for (uint32_t i = l->lo; i < l->len; i++) {
                stask *x = l->v[i];
                if (!x)
                        continue;
                if (extra && extra->id < x->id) {
                        v[k] = extra;
                        ids[k] = extra->id;
                        extra->tl_idx = k++;
                        extra = NULL;
                }
                v[k] = x;
                ids[k] = x->id;
                x->tl_idx = k++;
        }
        if (extra) {
                v[k] = extra;
                ids[k] = extra->id;
                extra->tl_idx = k++;
        }
        for (uint32_t j = 1; j <= k; j++)
                fen[j] = 1;
        for (uint32_t j = 1; j <= cap; j++) {
                uint32_t p = j + (j & (~j + 1));
                if (p <= cap)
                        fen[p] += fen[j];
        }
        free(l->v);
        free(l->ids);
        free(l->fen);
        l->v = v;
        l->ids = ids;
        l->fen = fen;
        l->lo = 0;
        l->len = l->n = k;
        l->cap = cap;
        return 0;
}

/* Squeeze the holes out of l within its arrays (no allocation). */
static void tl_compact(tlist *l) {
        uint32_t k = 0;
        for (uint32_t i = l->lo; i < l->len; i++) {
                stask *x = l->v[i];
                if (!x)
                        continue;
                l->v[k] = x;
                l->ids[k] = l->ids[i];
                x->tl_idx = k++;
        }
        memset(l->fen, 0, ((size_t)l->cap + 1) * sizeof(*l->fen));
        for (uint32_t j = 1; j <= k; j++)
                l->fen[j] = 1;
        for (uint32_t j = 1; j <= l->cap; j++) {
                uint32_t p = j + (j & (~j + 1));
                if (p <= l->cap)
                        l->fen[p] += l->fen[j];
        }
        l->lo = 0;
        l->len = k;
}

static int tl_insert(tlist *l, stask *t) {
        if (l->len < l->cap && (l->len == 0 || l->ids[l->len - 1] < t->id)) {
                l->v[l->len] = t;
                l->ids[l->len] = t->id;
                t->tl_idx = l->len++;
                l->n++;
                tl_fen_add(l, l->len, 1);
                return 0;
        }
        return tl_rebuild(l, t);
}

static void tl_remove(tlist *l, stask *t) {
        l->v[t->tl_idx] = NULL;
        tl_fen_add(l, t->tl_idx + 1, -1);
        if (--l->n == 0) {
                l->lo = l->len = 0; /* every tree entry is 0 again */
                return;
        }
        while (!l->v[l->lo])
                l->lo++;
        if (l->len - l->lo > 2 * l->n + 64) {
                /* shrink arrays much larger than needed, else squeeze in place */
                if (l->cap > 8 * (l->n + 64) && tl_rebuild(l, NULL) == 0)
                        return;
                tl_compact(l);
        }
}

/* queued tasks of l with an id below `id` */
static uint32_t tl_below(const tlist *l, int64_t id) {
        uint32_t a = l->lo, b = l->len;
        while (a < b) {
                uint32_t m = a + (b - a) / 2;
                if (l->ids[m] < id)
                        a = m + 1;
                else
                        b = m;
        }
        return tl_fen_sum(l, a);
}

static int act_add(gp_sched *s, int q, uint32_t tid) {
        tier *tr = &s->tiers[q];
        uint32_t *a = grow(tr->act, sizeof(*a), &tr->act_cap, tr->nact + 1);
        if (!a)
                return -ENOMEM;
        tr->act = a;
        a[tr->nact++] = tid;
        s->tn[tid].act_pos[q] = tr->nact;
        return 0;
}

static void act_del(gp_sched *s, int q, uint32_t tid) {
        tier *tr = &s->tiers[q];
        uint32_t i = s->tn[tid].act_pos[q] - 1, last = tr->act[--tr->nact];
        tr->act[i] = last;
        s->tn[last].act_pos[q] = i + 1;
        s->tn[tid].act_pos[q] = 0;
}

/* May t ever be preempted by cfg.preemption: marked preemptible, or
 * borrowing someone's guarantee (then only by reclaim). */
static bool reclaimable(const stask *t) {
        return t->preemptible || t->borrowing;
}

/* Running reclaimable tasks per node and tier, with their oldest and
 * newest start (to skip or bound nodes quickly).  Called after a start and
 * before a stop (t still on its GPUs). */
static void pre_count(gp_sched *s, const stask *t, int d) {
        if (!reclaimable(t))
                return;
        snode *n = &s->nodes[s->gpus[t->gpus[0]].node];
        n->npre += d;
        n->npre_prio[t->prio] += d;
        s->npre += (size_t)(ptrdiff_t)d;
        if (d > 0) {
                if (n->npre == 1 || t->start_ms < n->pre_min_start)
                        n->pre_min_start = t->start_ms;
                if (n->npre == 1 || t->start_ms > n->pre_max_start)
                        n->pre_max_start = t->start_ms;
                return;
        }
        if (!n->npre || (t->start_ms != n->pre_min_start && t->start_ms != n->pre_max_start))
                return;
        bool first = true;
        for (int i = 0; i < n->ngpus; i++) {
                const sgpu *g = &s->gpus[n->gpus[i]];
                for (int k = 0; k < g->ntasks; k++) {
                        const stask *x = g->tasks[k];
                        if (x == t || !reclaimable(x) || x->gpus[0] != n->gpus[i])
                                continue;
                        if (first || x->start_ms < n->pre_min_start)
                                n->pre_min_start = x->start_ms;
                        if (first || x->start_ms > n->pre_max_start)
                                n->pre_max_start = x->start_ms;
                        first = false;
                }
        }
}

static bool was_preempted_by(const stask *t, int64_t id) {
        for (int i = 0; i < t->n_pre_by; i++)
                if (t->pre_by[i] == id)
                        return true;
        return false;
}

/* ---- walking the queue in dispatch order ---- */

static bool fair_policy(const gp_sched *s) {
        return s->cfg.policy == GP_SCHED_HYBRID || s->cfg.policy == GP_SCHED_STRICT;
}

static bool went_less(const went *a, const went *b) {
        if (a->cls != b->cls)
                return a->cls < b->cls;
        if (a->key != b->key)
                return a->key < b->key;
        return a->id < b->id;
}

static void went_down(went *h, uint32_t n, uint32_t i) {
        for (;;) {
                uint32_t c = 2 * i + 1;
                if (c >= n)
                        return;
                if (c + 1 < n && went_less(&h[c + 1], &h[c]))
                        c++;
                if (!went_less(&h[c], &h[i]))
                        return;
                went x = h[i];
                h[i] = h[c];
                h[c] = x;
                i = c;
        }
}

static void went_heapify(went *h, uint32_t n) {
        for (uint32_t i = n / 2; i-- > 0;)
                went_down(h, n, i);
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

static int walk_init(gp_sched *s, walk *w, bool live) {
        memset(w, 0, sizeof(*w));
        w->fair = fair_policy(s);
        w->live = live;
        if (!w->fair) {
                for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                        w->cur[i] = s->tiers[i].head;
                return 0;
        }
        size_t total = 0;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                total += s->tiers[i].nact;
        if (total > s->wcap) {
                size_t cap = s->wcap ? s->wcap : 64;
                while (cap < total)
                        cap *= 2;
                went *b = realloc(s->wbuf, cap * sizeof(*b));
                if (!b)
                        return -ENOMEM;
                s->wbuf = b;
                s->wcap = cap;
        }
        went *b = s->wbuf;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                const tier *tr = &s->tiers[i];
                w->h[i] = b;
                for (uint32_t j = 0; j < tr->nact; j++) {
                        stenant *T = &s->tn[tr->act[j]];
                        const tlist *l = &T->q[i];
                        b[j] = (went){.key = tenant_key(s, T), .id = l->ids[l->lo], .cur = l->v[l->lo],
                                      .tenant = tr->act[j], .idx = l->lo, .cls = tenant_class(s, T)};
                }
                w->hn[i] = tr->nact;
                went_heapify(b, tr->nact);
                b += tr->nact;
                w->cur[i] = w->hn[i] ? w->h[i][0].cur : NULL;
        }
        return 0;
}

/* Classes may have dropped (a preemption freed share): re-sort. */
static void walk_refresh(gp_sched *s, walk *w) {
        if (!w->fair)
                return;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                for (uint32_t j = 0; j < w->hn[i]; j++)
                        w->h[i][j].cls = tenant_class(s, &s->tn[w->h[i][j].tenant]);
                went_heapify(w->h[i], w->hn[i]);
        }
}

/* Bring w->cur[i] up to date (live walks). */
static void walk_head(gp_sched *s, walk *w, int i) {
        went *h = w->h[i];
        while (w->hn[i]) {
                const stenant *T = &s->tn[h[0].tenant];
                if (T->held_stamp == s->stamp || group_held(s, T)) {
                        h[0] = h[--w->hn[i]];
                        went_down(h, w->hn[i], 0);
                        continue;
                }
                uint8_t c = tenant_class(s, T);
                if (c != h[0].cls) {
                        h[0].cls = c;
                        went_down(h, w->hn[i], 0);
                        continue;
                }
                w->cur[i] = h[0].cur;
                return;
        }
        w->cur[i] = NULL;
}

/* w->cur[i] has been taken: move on (before the task changes state). */
static void walk_advance(gp_sched *s, walk *w, int i) {
        if (!w->fair) {
                w->cur[i] = w->cur[i]->next;
                return;
        }
        went *h = w->h[i];
        /* from the slot arrays alone: the next task is not touched until
         * its turn (a cache miss saved per step) */
        const tlist *l = &s->tn[h[0].tenant].q[i];
        uint32_t k = h[0].idx < l->len && l->v[h[0].idx] == h[0].cur ? h[0].idx : h[0].cur->tl_idx;
        while (++k < l->len && !l->v[k])
                ;
        if (k < l->len) {
                h[0].cur = l->v[k];
                h[0].id = l->ids[k];
                h[0].idx = k;
        } else {
                h[0] = h[--w->hn[i]];
        }
        went_down(h, w->hn[i], 0);
        w->cur[i] = w->hn[i] ? h[0].cur : NULL;
}

/* ------------------------------------------------------------------ */
/* lifecycle                                                           */

void gp_sched_config_defaults(gp_sched_config *cfg) {
        static const uint32_t w[GP_PRIORITY_LEVELS] = {256, 128, 64, 32, 16, 8, 4, 2, 1, 1};
        memset(cfg, 0, sizeof(*cfg));
        cfg->policy = GP_SCHED_HYBRID;
        memcpy(cfg->weights, w, sizeof(w));
        cfg->max_queue_depth = 10000;
        cfg->memory_safety_margin_mb = 2000;
        cfg->backfill = true;
        cfg->backfill_depth = 1000;
        cfg->las_levels = 3;
        cfg->las_thresholds_ms[0] = 3600LL * 1000;
        cfg->las_thresholds_ms[1] = 36000LL * 1000;
        cfg->las_preempt = true;
        cfg->las_min_run_ms = 60 * 1000;
        cfg->fairshare_half_life_ms = 24LL * 3600 * 1000;
        cfg->preemption = false;
        cfg->preempt_min_runtime_ms = 60 * 1000;
}

static int check_las(const gp_sched_config *cfg) {
        if (cfg->policy != GP_SCHED_LAS)
                return 0;
        if (cfg->las_levels < 1 || cfg->las_levels > GP_SCHED_LAS_MAX_LEVELS || cfg->las_min_run_ms < 0)
                return -EINVAL;
        for (int i = 0; i < cfg->las_levels - 1; i++)
                if (cfg->las_thresholds_ms[i] <= 0 || (i > 0 && cfg->las_thresholds_ms[i] <= cfg->las_thresholds_ms[i - 1]))
                        return -EINVAL;
        return 0;
}

static int check_weights(const uint32_t *w) {
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                if (w[i] < 1 || w[i] > 1000000)
                        return -EINVAL;
        return 0;
}

int gp_sched_new(const gp_sched_config *cfg, gp_sched **ret) {
        if (!cfg || cfg->policy > GP_SCHED_LAS || check_weights(cfg->weights) < 0 ||
            cfg->max_queue_depth < 1 || cfg->memory_safety_margin_mb < 0 || cfg->backfill_depth < 0 ||
            check_las(cfg) < 0 || cfg->fairshare_half_life_ms < 0 || cfg->preempt_min_runtime_ms < 0 ||
            cfg->max_models_per_gpu < 0)
                return -EINVAL;
        gp_sched *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->cfg = *cfg;
        memset(s->buckets, 0xff, sizeof(s->buckets));
        memset(s->idle_lists, 0xff, sizeof(s->idle_lists));
        *ret = s;
        return 0;
}

/* An array's running count and limit (the %N throttle); one per array id
 * with a member queued or running, freed with its last member. */
typedef struct sarray {
        int64_t id;
        int limit;                 /* most members running at once, 0 = no cap */
        int running;               /* members running */
        int members;               /* members queued or running */
} sarray;

static void task_free(gp_sched *s, stask *t) {
        if (!t)
                return;
        if (t->arr && --t->arr->members == 0) {
                gp_i64map_del(&s->arrays, t->arr->id);
                free(t->arr);
        }
        free(t->gpu_model);
        free(t->pre_by);
        free(t);
}

void gp_sched_free(gp_sched *s) {
        if (!s)
                return;
        size_t pos = 0;
        stask *t;
        while ((t = gp_i64map_next(&s->tasks, &pos, NULL)))
                task_free(s, t);
        gp_i64map_done(&s->tasks);
        gp_i64map_done(&s->arrays); /* each freed with its last task above */
        for (uint32_t i = 0; i < s->ngpus; i++) {
                free(s->gpus[i].uuid);
                free(s->gpus[i].name);
                free(s->gpus[i].tasks);
                free(s->gpus[i].models);
        }
        free(s->gpus);
        for (uint32_t i = 0; i < s->nnodes; i++) {
                free(s->nodes[i].name);
                free(s->nodes[i].gpus);
        }
        free(s->nodes);
        for (int i = 0; i < s->nkinds; i++)
                free(s->kind_names[i]);
        for (uint32_t i = 0; i < s->model_gpus_len; i++)
                free(s->model_gpus[i]);
        free(s->model_gpus);
        free(s->model_gpus_n);
        free(s->model_gpus_cap);
        free(s->heap);
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                free(s->tiers[i].fen);
                free(s->tiers[i].act);
        }
        for (uint32_t i = 0; i < s->tn_cap; i++)
                for (int q = 0; q < GP_PRIORITY_LEVELS; q++) {
                        free(s->tn[i].q[q].v);
                        free(s->tn[i].q[q].ids);
                        free(s->tn[i].q[q].fen);
                }
        free(s->tn);
        free(s->gr);
        free(s->wbuf);
        free(s->pv);
        free(s->el);
        free(s->eo);
        intern_done(&s->tenants);
        intern_done(&s->models);
        intern_done(&s->groups);
        free(s);
}

int gp_sched_set_weights(gp_sched *s, const uint32_t weights[GP_PRIORITY_LEVELS]) {
        if (check_weights(weights) < 0)
                return -EINVAL;
        memcpy(s->cfg.weights, weights, sizeof(s->cfg.weights));
        s->gen++;
        return 0;
}

int gp_sched_set_max_queue_depth(gp_sched *s, int depth) {
        if (depth < 1)
                return -EINVAL;
        s->cfg.max_queue_depth = depth;
        return 0;
}

const gp_sched_config *gp_sched_get_config(const gp_sched *s) {
        return &s->cfg;
}

/* ------------------------------------------------------------------ */
/* inventory                                                           */

static uint64_t kinds_for_glob(const gp_sched *s, const char *glob) {
        if (!glob)
                return ~(uint64_t)0;
        uint64_t m = 0;
        for (int k = 0; k < s->nkinds; k++)
                if (fnmatch(glob, s->kind_names[k], 0) == 0)
                        m |= (uint64_t)1 << k;
        return m;
}

static int find_node(const gp_sched *s, const char *name, uint32_t *ret) {
        for (uint32_t i = 0; i < s->nnodes; i++)
                if (strcmp(s->nodes[i].name, name) == 0) {
                        *ret = i;
                        return 0;
                }
        return -ENOENT;
}

int gp_sched_gpu_add(gp_sched *s, const gp_sched_gpu_desc *d, uint32_t *ret_gpu) {
        if (!d || !d->node || !*d->node || !d->uuid || !d->name || d->index < 0 || d->memory_total_mb <= 0)
                return -EINVAL;
        uint32_t ni;
        if (find_node(s, d->node, &ni) == 0) {
                snode *n = &s->nodes[ni];
                if (n->ngpus >= MAX_NODE_GPUS)
                        return -E2BIG;
                for (int i = 0; i < n->ngpus; i++)
                        if (s->gpus[n->gpus[i]].index == d->index)
                                return -EEXIST;
        } else {
                ni = NIL;
        }
        int kind = -1;
        for (int k = 0; k < s->nkinds; k++)
                if (strcmp(s->kind_names[k], d->name) == 0)
                        kind = k;
        if (kind < 0 && s->nkinds >= MAX_KINDS)
                return -E2BIG;

        sgpu *gpus = grow(s->gpus, sizeof(sgpu), &s->gpus_cap, s->ngpus + 1);
        if (!gpus)
                return -ENOMEM;
        s->gpus = gpus;
        if (ni == NIL) {
                snode *nodes = grow(s->nodes, sizeof(snode), &s->nodes_cap, s->nnodes + 1);
                if (!nodes)
                        return -ENOMEM;
                s->nodes = nodes;
                snode *n = &nodes[s->nnodes];
                memset(n, 0, sizeof(*n));
                if (!(n->name = strdup(d->node)))
                        return -ENOMEM;
                n->iprev = n->inext = NIL;
                ni = s->nnodes++;
        }
        snode *n = &s->nodes[ni];
        uint32_t ncap = (uint32_t)n->cap;
        uint32_t *ng = grow(n->gpus, sizeof(uint32_t), &ncap, (uint32_t)n->ngpus + 1);
        if (!ng)
                return -ENOMEM;
        n->gpus = ng;
        n->cap = (int)ncap;

        sgpu *g = &s->gpus[s->ngpus];
        memset(g, 0, sizeof(*g));
        g->uuid = strdup(d->uuid);
        g->name = strdup(d->name);
        if (!g->uuid || !g->name) {
                free(g->uuid);
                free(g->name);
                return -ENOMEM;
        }
        if (kind < 0) {
                if (!(s->kind_names[s->nkinds] = strdup(d->name))) {
                        free(g->uuid);
                        free(g->name);
                        return -ENOMEM;
                }
                kind = s->nkinds++;
                /* a new kind: queued and running tasks with a glob may now match it */
                size_t pos = 0;
                stask *t;
                while ((t = gp_i64map_next(&s->tasks, &pos, NULL)))
                        if (t->gpu_model)
                                t->kinds = kinds_for_glob(s, t->gpu_model);
        }
        g->node = ni;
        g->index = d->index;
        g->kind = (uint8_t)kind;
        g->total = d->memory_total_mb;
        g->usable = d->memory_total_mb - s->cfg.memory_safety_margin_mb;
        if (g->usable < 0)
                g->usable = 0;
        g->util = g->temp = -1;
        g->healthy = true;
        g->reserved = d->reserved;
        g->bucket = -1;
        g->bprev = g->bnext = NIL;
        g->slot = n->ngpus;
        uint32_t gi = s->ngpus++;
        n->gpus[n->ngpus++] = gi;
        n->kinds |= (uint64_t)1 << kind;
        gpu_link(s, gi);
        if (g->usable > s->kind_usable[kind])
                s->kind_usable[kind] = g->usable;
        if (gpu_usable(g)) {
                s->usable_gpus++;
                groups_refresh_all(s);
        }
        s->gen++;
        if (ret_gpu)
                *ret_gpu = gi;
        return 0;
}

int gp_sched_gpu_set_distance(gp_sched *s, uint32_t a, uint32_t b, int distance) {
        if (a >= s->ngpus || b >= s->ngpus || distance < 0 || distance > 255)
                return -EINVAL;
        sgpu *ga = &s->gpus[a], *gb = &s->gpus[b];
        if (ga->node != gb->node)
                return -EINVAL;
        if (ga->slot >= TOPO_MAX || gb->slot >= TOPO_MAX)
                return 0; /* beyond what we keep: treated as unknown */
        snode *n = &s->nodes[ga->node];
        if (!n->has_dist) {
                memset(n->dist, 1, sizeof(n->dist));
                n->has_dist = true;
        }
        n->dist[ga->slot][gb->slot] = n->dist[gb->slot][ga->slot] = (uint8_t)distance;
        return 0;
}

static int gpu_set_flag(gp_sched *s, uint32_t gi, bool *flag, bool v) {
        if (gi >= s->ngpus)
                return -ENOENT;
        if (*flag == v)
                return 0;
        bool was = gpu_usable(&s->gpus[gi]);
        gpu_unlink(s, gi);
        *flag = v;
        gpu_link(s, gi);
        if (was != gpu_usable(&s->gpus[gi])) {
                s->usable_gpus += was ? -1u : 1u;
                groups_refresh_all(s); /* group shares are of the usable GPUs */
        }
        s->gen++;
        return 0;
}

int gp_sched_gpu_set_healthy(gp_sched *s, uint32_t gpu, bool healthy) {
        if (gpu >= s->ngpus)
                return -ENOENT;
        return gpu_set_flag(s, gpu, &s->gpus[gpu].healthy, healthy);
}

int gp_sched_gpu_set_drained(gp_sched *s, uint32_t gpu, bool drained) {
        if (gpu >= s->ngpus)
                return -ENOENT;
        return gpu_set_flag(s, gpu, &s->gpus[gpu].drained, drained);
}

int gp_sched_gpu_set_load(gp_sched *s, uint32_t gpu, int util_pct, int temp_c) {
        if (gpu >= s->ngpus)
                return -ENOENT;
        s->gpus[gpu].util = util_pct;
        s->gpus[gpu].temp = temp_c;
        return 0;
}

int gp_sched_gpu_find(const gp_sched *s, const char *node, int index, uint32_t *ret_gpu) {
        uint32_t ni;
        if (!node || find_node(s, node, &ni) < 0)
                return -ENOENT;
        const snode *n = &s->nodes[ni];
        for (int i = 0; i < n->ngpus; i++)
                if (s->gpus[n->gpus[i]].index == index) {
                        *ret_gpu = n->gpus[i];
                        return 0;
                }
        return -ENOENT;
}

int gp_sched_gpu_find_uuid(const gp_sched *s, const char *uuid, uint32_t *ret_gpu) {
        for (uint32_t i = 0; uuid && i < s->ngpus; i++)
                if (strcmp(s->gpus[i].uuid, uuid) == 0) {
                        *ret_gpu = i;
                        return 0;
                }
        return -ENOENT;
}

uint32_t gp_sched_gpu_count(const gp_sched *s) {
        return s->ngpus;
}

int gp_sched_gpu_get(const gp_sched *s, uint32_t gpu, gp_sched_gpu_view *ret) {
        if (gpu >= s->ngpus)
                return -ENOENT;
        const sgpu *g = &s->gpus[gpu];
        *ret = (gp_sched_gpu_view){
                .node = s->nodes[g->node].name, .uuid = g->uuid, .name = g->name,
                .index = g->index, .memory_total_mb = g->total, .memory_usable_mb = g->usable,
                .memory_allocated_mb = g->alloc, .ntasks = g->ntasks, .exclusive_held = g->excl,
                .healthy = g->healthy, .drained = g->drained, .reserved = g->reserved,
                .util_pct = g->util, .temp_c = g->temp,
        };
        return 0;
}

int gp_sched_gpu_tasks(const gp_sched *s, uint32_t gpu, int64_t *ids, int max) {
        if (gpu >= s->ngpus)
                return 0;
        const sgpu *g = &s->gpus[gpu];
        for (int i = 0; i < g->ntasks && i < max; i++)
                ids[i] = g->tasks[i]->id;
        return g->ntasks;
}

int gp_sched_gpu_models(const gp_sched *s, uint32_t gpu, const char **names, int max) {
        if (gpu >= s->ngpus)
                return 0;
        const sgpu *g = &s->gpus[gpu];
        for (int i = 0; i < g->nmodels && i < max; i++)
                names[i] = intern_name(&s->models, g->models[i].model);
        return g->nmodels;
}

/* ------------------------------------------------------------------ */
/* placement                                                           */

typedef struct fit {
        int n;
        uint32_t gpus[GP_MAX_GANG];
} fit;

static bool kind_ok(const stask *t, const sgpu *g) {
        return (t->kinds >> g->kind) & 1;
}

/* Does max_models_per_gpu keep t off GPU g?  Only when t has a model that
 * g does not hold and g already holds the maximum of other models. */
static bool models_full(const gp_sched *s, const stask *t, const sgpu *g) {
        int max = s->cfg.max_models_per_gpu;
        if (max <= 0 || !t->model || g->nmodels < max)
                return false;
        for (int i = 0; i < g->nmodels; i++)
                if (g->models[i].model == t->model)
                        return false;
        return true;
}

/* Can GPU g take shared task t now? */
static bool shared_fits(const gp_sched *s, const stask *t, const sgpu *g, bool avoid) {
        return gpu_usable(g) && !g->excl && kind_ok(t, g) && gpu_free(g) >= t->mem &&
               !(avoid && g->resv_stamp == s->stamp) && !models_full(s, t, g);
}

static bool idle_fits(const gp_sched *s, const stask *t, const sgpu *g, bool avoid) {
        return gpu_usable(g) && g->ntasks == 0 && kind_ok(t, g) && g->usable >= t->mem &&
               !(avoid && g->resv_stamp == s->stamp);
}

/* Better tie-break between two GPUs with equal standing: cooler, less busy, lower id. */
static bool load_better(const sgpu *a, const sgpu *b) {
        if (a->util != b->util)
                return a->util < b->util;
        return a->temp < b->temp;
}

/* Choose n GPUs among cand[0..m) of one node, closest together when the
 * node's topology is known, else the first n (lowest index). */
static void choose_close(const gp_sched *s, const snode *nd, const uint32_t *cand, int m, int n,
                         uint32_t *out) {
        if (!nd->has_dist || n == 1 || m == n) {
                memcpy(out, cand, (size_t)n * sizeof(uint32_t));
                return;
        }
        int best_cost = -1;
        for (int seed = 0; seed < m; seed++) {
                int sa = s->gpus[cand[seed]].slot;
                uint32_t pick[GP_MAX_GANG];
                bool used[MAX_NODE_GPUS] = {false};
                int np = 0;
                pick[np++] = cand[seed];
                used[seed] = true;
                while (np < n) {
                        int bj = -1, bd = 1 << 30;
                        for (int j = 0; j < m; j++) {
                                if (used[j])
                                        continue;
                                int sb = s->gpus[cand[j]].slot;
                                int d = (sa < TOPO_MAX && sb < TOPO_MAX) ? nd->dist[sa][sb] : 255;
                                if (d < bd) {
                                        bd = d;
                                        bj = j;
                                }
                        }
                        // cppcheck-suppress negativeIndex ; n < m here, so an unused candidate (bj >= 0) always exists
                        used[bj] = true;
                        pick[np++] = cand[bj];
                }
                int cost = 0;
                for (int i = 0; i < n; i++)
                        for (int j = i + 1; j < n; j++) {
                                int x = s->gpus[pick[i]].slot, y = s->gpus[pick[j]].slot;
                                cost += (x < TOPO_MAX && y < TOPO_MAX) ? nd->dist[x][y] : 255;
                        }
                if (best_cost < 0 || cost < best_cost) {
                        best_cost = cost;
                        memcpy(out, pick, (size_t)n * sizeof(uint32_t));
                }
        }
}

/* Whole GPUs: best-fit node (fewest idle GPUs that still fit). */
static bool place_whole(const gp_sched *s, const stask *t, bool avoid, fit *f) {
        int n = t->ngpus;
        for (int k = n; k <= s->max_idle; k++) {
                for (uint32_t ni = s->idle_lists[k]; ni != NIL; ni = s->nodes[ni].inext) {
                        const snode *nd = &s->nodes[ni];
                        if (!(nd->kinds & t->kinds))
                                continue;
                        uint32_t cand[MAX_NODE_GPUS];
                        int m = 0;
                        for (int i = 0; i < nd->ngpus; i++)
                                if (idle_fits(s, t, &s->gpus[nd->gpus[i]], avoid))
                                        cand[m++] = nd->gpus[i];
                        if (m < n)
                                continue;
                        choose_close(s, nd, cand, m, n, f->gpus);
                        f->n = n;
                        return true;
                }
        }
        return false;
}

/* One shared GPU: model affinity first, then the shared GPU with the most
 * free memory, then an idle GPU on the best-fitting node. */
static bool place_shared1(const gp_sched *s, const stask *t, bool avoid, fit *f) {
        const sgpu *best = NULL;
        uint32_t bi = NIL;
        if (t->model && t->model < s->model_gpus_len) {
                for (int i = 0; i < s->model_gpus_n[t->model]; i++) {
                        uint32_t gi = s->model_gpus[t->model][i];
                        const sgpu *g = &s->gpus[gi];
                        if (!shared_fits(s, t, g, avoid))
                                continue;
                        if (!best || gpu_free(g) > gpu_free(best) ||
                            (gpu_free(g) == gpu_free(best) && gi < bi)) {
                                best = g;
                                bi = gi;
                        }
                }
                if (best)
                        goto found;
        }
        int lo = bucket_of(t->mem);
        for (int k = 0; k < s->nkinds; k++) {
                if (!((t->kinds >> k) & 1))
                        continue;
                for (int b = NBUCKETS - 1; b >= lo; b--) {
                        uint32_t gi = s->buckets[k][b];
                        if (gi == NIL)
                                continue;
                        if (best && b < bucket_of(gpu_free(best)))
                                break;
                        const sgpu *kb = NULL;
                        uint32_t kbi = NIL;
                        int looked = 0;
                        for (; gi != NIL && looked < 8; gi = s->gpus[gi].bnext) {
                                const sgpu *g = &s->gpus[gi];
                                if (!shared_fits(s, t, g, avoid))
                                        continue;
                                looked++;
                                if (!kb || gpu_free(g) > gpu_free(kb) ||
                                    (gpu_free(g) == gpu_free(kb) && load_better(g, kb)) ||
                                    (gpu_free(g) == gpu_free(kb) && !load_better(kb, g) && gi < kbi)) {
                                        kb = g;
                                        kbi = gi;
                                }
                        }
                        if (!kb)
                                continue;
                        if (!best || gpu_free(kb) > gpu_free(best) ||
                            (gpu_free(kb) == gpu_free(best) && kbi < bi)) {
                                best = kb;
                                bi = kbi;
                        }
                        break;
                }
        }
        if (best)
                goto found;
        return place_whole(s, t, avoid, f);
found:
        f->n = 1;
        f->gpus[0] = bi;
        return true;
}

/* Several shared GPUs on one node: the node with the fewest fitting GPUs
 * that still has enough (best fit); already-shared GPUs before idle ones. */
static bool place_shared_gang(const gp_sched *s, const stask *t, bool avoid, fit *f) {
        int n = t->ngpus, best_m = 0;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!(nd->kinds & t->kinds) || nd->ngpus < n)
                        continue;
                uint32_t cand[MAX_NODE_GPUS];
                int m = 0;
                for (int pass = 0; pass < 2; pass++)
                        for (int i = 0; i < nd->ngpus; i++) {
                                const sgpu *g = &s->gpus[nd->gpus[i]];
                                if (shared_fits(s, t, g, avoid) && ((g->ntasks > 0) == (pass == 0)))
                                        cand[m++] = nd->gpus[i];
                        }
                if (m < n || (best_m && m >= best_m))
                        continue;
                best_m = m;
                choose_close(s, nd, cand, m, n, f->gpus);
                f->n = n;
                if (m == n)
                        break;
        }
        return best_m > 0;
}

static bool place(const gp_sched *s, const stask *t, bool avoid, fit *f) {
        if (t->excl)
                return place_whole(s, t, avoid, f);
        if (t->ngpus == 1)
                return place_shared1(s, t, avoid, f);
        return place_shared_gang(s, t, avoid, f);
}

/* Why t cannot be placed right now (for the blocked task: full scan). */
static void diagnose(gp_sched *s, stask *t) {
        int64_t most_free = -1;
        int most_whole = 0;
        bool any_usable = false;
        int mem_fits = 0, model_full = 0; /* single shared GPUs with room; of them, full of other models */
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                int whole = 0;
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (!kind_ok(t, g) || !gpu_usable(g))
                                continue;
                        any_usable = true;
                        if (!g->excl && gpu_free(g) >= t->mem) {
                                mem_fits++;
                                model_full += models_full(s, t, g);
                        }
                        if (gpu_free(g) > most_free)
                                most_free = gpu_free(g);
                        if (g->ntasks == 0 && g->usable >= t->mem)
                                whole++;
                }
                if (whole > most_whole)
                        most_whole = whole;
        }
        t->rstamp = s->stamp;
        if (!any_usable) {
                t->rcode = R_NO_USABLE;
        } else if (t->excl) {
                t->rcode = R_NO_WHOLE;
                t->ra1 = t->ngpus;
                t->ra2 = most_whole;
        } else if (t->ngpus == 1 && mem_fits > 0 && model_full == mem_fits) {
                t->rcode = R_MODELS;
                t->ra1 = s->cfg.max_models_per_gpu;
                t->ra2 = 0;
        } else if (t->ngpus == 1) {
                t->rcode = R_NO_MEM;
                t->ra1 = t->mem;
                t->ra2 = most_free;
        } else {
                t->rcode = R_GANG_SHARED;
                t->ra1 = t->ngpus;
                t->ra2 = t->mem;
        }
}

/* ------------------------------------------------------------------ */
/* reservation for the blocked task (EASY backfill)                    */

static int64_t task_end(const stask *t) {
        return t->timeout_ms > 0 ? t->start_ms + t->timeout_ms : TIME_INF;
}

typedef struct gpu_end {
        int64_t t;
        uint32_t gi;
} gpu_end;

static int cmp_gpu_end(const void *a, const void *b) {
        const gpu_end *x = a, *y = b;
        if (x->t != y->t)
                return (x->t > y->t) - (x->t < y->t);
        return (x->gi > y->gi) - (x->gi < y->gi);
}

/* Earliest time GPU g could host t, from the running tasks' end bounds
 * (TIME_INF when a task in the way has no bound). */
static int64_t gpu_ready_at(const gp_sched *s, const sgpu *g, const stask *t, int64_t now) {
        /* full of other models: free for t at the latest when all on it ended */
        if (t->excl || g->excl || models_full(s, t, g)) {
                int64_t m = now;
                for (int i = 0; i < g->ntasks; i++)
                        if (task_end(g->tasks[i]) > m)
                                m = task_end(g->tasks[i]);
                return m;
        }
        if (gpu_free(g) >= t->mem)
                return now;
        if (g->ntasks > 64)
                return TIME_INF;
        /* free memory grows as tasks end, earliest end first */
        const stask *sorted[64];
        int n = g->ntasks;
        for (int i = 0; i < n; i++) {
                int j = i;
                while (j > 0 && task_end(sorted[j - 1]) > task_end(g->tasks[i])) {
                        sorted[j] = sorted[j - 1];
                        j--;
                }
                sorted[j] = g->tasks[i];
        }
        int64_t freed = gpu_free(g);
        for (int i = 0; i < n; i++) {
                freed += sorted[i]->charge;
                if (freed >= t->mem)
                        return task_end(sorted[i]) > now ? task_end(sorted[i]) : now;
        }
        return TIME_INF;
}

/* Mark the GPUs the blocked task t will start on first; returns the
 * estimated start (TIME_INF when unknown or impossible). */
static int64_t reserve(gp_sched *s, stask *t, int64_t now) {
        int64_t best_t = TIME_INF;
        int best_ready = -1;
        uint32_t best_gpus[GP_MAX_GANG];
        bool found = false;
        gpu_end ge[MAX_NODE_GPUS];
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!(nd->kinds & t->kinds) || nd->ngpus < t->ngpus)
                        continue;
                int m = 0, ready = 0;
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (!gpu_usable(g) || !kind_ok(t, g) || g->usable < t->mem)
                                continue;
                        if (!t->excl && g->excl && g->ntasks == 0)
                                continue;
                        ge[m].gi = nd->gpus[i];
                        ge[m].t = gpu_ready_at(s, g, t, now);
                        if (ge[m].t == now)
                                ready++;
                        m++;
                }
                if (m < t->ngpus)
                        continue;
                /* at most a node's GPUs: insertion sort (cmp_gpu_end is a
                 * total order, so the result is qsort's; this runs for
                 * every node in every blocked run, where qsort's own cost
                 * dominated) */
                for (int i = 1; i < m; i++) {
                        gpu_end x = ge[i];
                        int j = i;
                        while (j > 0 && cmp_gpu_end(&ge[j - 1], &x) > 0) {
                                ge[j] = ge[j - 1];
                                j--;
                        }
                        ge[j] = x;
                }
                int64_t node_t = ge[t->ngpus - 1].t;
                if (!found || node_t < best_t || (node_t == best_t && ready > best_ready)) {
                        found = true;
                        best_t = node_t;
                        best_ready = ready;
                        for (int i = 0; i < t->ngpus; i++)
                                best_gpus[i] = ge[i].gi;
                }
        }
        if (!found)
                return TIME_INF;
        for (int i = 0; i < t->ngpus; i++)
                s->gpus[best_gpus[i]].resv_stamp = s->stamp;
        return best_t;
}

/* ------------------------------------------------------------------ */
/* queues                                                              */

static void fen_add(tier *q, uint32_t i, int v) {
        for (; i < q->fen_cap; i += i & (~i + 1))
                q->fen[i] += (uint32_t)v;
}

static uint32_t fen_sum(const tier *q, uint32_t i) {
        uint32_t r = 0;
        for (; i > 0; i -= i & (~i + 1))
                r += q->fen[i];
        return r;
}

/* Number the tier's tasks 1..n in list order and rebuild the tree with
 * room for growth. 0 or -ENOMEM (tree left as it was). */
static int tier_renumber(tier *q) {
        uint32_t cap = 64;
        while (cap < 2 * (q->n + 1))
                cap *= 2;
        uint32_t *fen = calloc(cap, sizeof(*fen));
        if (!fen)
                return -ENOMEM;
        free(q->fen);
        q->fen = fen;
        q->fen_cap = cap;
        uint32_t seq = 0;
        for (stask *t = q->head; t; t = t->next) {
                t->seq = ++seq;
                fen_add(q, seq, 1);
        }
        q->next_seq = seq;
        return 0;
}

static int tier_insert(gp_sched *s, stask *t) {
        tier *q = &s->tiers[t->q];
        if (q->n == 0 && q->pass < s->vtime)
                q->pass = s->vtime;
        stask *after = q->tail;
        while (after && after->id > t->id)
                after = after->prev;
        bool at_tail = after == q->tail;
        if (at_tail && q->next_seq + 1 >= q->fen_cap) {
                /* out of numbers: renumber the current list first */
                if (tier_renumber(q) < 0)
                        return -ENOMEM;
        }
        t->prev = after;
        t->next = after ? after->next : q->head;
        if (t->next)
                t->next->prev = t;
        else
                q->tail = t;
        if (after)
                after->next = t;
        else
                q->head = t;
        q->n++;
        s->gen++;
        if (at_tail) {
                t->seq = ++q->next_seq;
                fen_add(q, t->seq, 1);
        } else if (tier_renumber(q) < 0) {
                /* cannot keep the order statistics: undo the insertion */
                q->n--;
                if (t->prev)
                        t->prev->next = t->next;
                else
                        q->head = t->next;
                if (t->next)
                        t->next->prev = t->prev;
                else
                        q->tail = t->prev;
                return -ENOMEM;
        }
        return 0;
}

static void tier_remove(gp_sched *s, stask *t) {
        tier *q = &s->tiers[t->q];
        if (t->prev)
                t->prev->next = t->next;
        else
                q->head = t->next;
        if (t->next)
                t->next->prev = t->prev;
        else
                q->tail = t->prev;
        t->prev = t->next = NULL;
        q->n--;
        fen_add(q, t->seq, -1);
        if (q->n == 0) {
                /* empty: numbering starts over */
                memset(q->fen, 0, q->fen_cap * sizeof(*q->fen));
                q->next_seq = 0;
        }
        s->gen++;
}

/* Which tier goes next, given per-tier cursors and virtual passes. */
static int pick_tier(const gp_sched *s, stask *const cur[], const uint64_t lp[]) {
        int best = -1;
        switch (s->cfg.policy) {
        case GP_SCHED_STRICT:
        case GP_SCHED_LAS:
                for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                        if (cur[i])
                                return i;
                return -1;
        case GP_SCHED_FIFO:
                for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                        if (cur[i] && (best < 0 || cur[i]->id < cur[best]->id))
                                best = i;
                return best;
        case GP_SCHED_HYBRID:
        default:
                if (cur[0])
                        return 0;
                for (int i = 1; i < GP_PRIORITY_LEVELS; i++)
                        if (cur[i] && (best < 0 || lp[i] < lp[best]))
                                best = i;
                return best;
        }
}

static uint64_t stride(const gp_sched *s, int tier_i) {
        return STRIDE1 / s->cfg.weights[tier_i];
}

/* Queue t in its tier t->q and in its tenant's list. 0 or -ENOMEM
 * (nothing changed). */
static int queue_add(gp_sched *s, stask *t) {
        stenant *T = &s->tn[t->tenant];
        tlist *l = &T->q[t->q];
        if (l->n == 0 && act_add(s, t->q, t->tenant) < 0)
                return -ENOMEM;
        if (tl_insert(l, t) < 0) {
                if (l->n == 0)
                        act_del(s, t->q, t->tenant);
                return -ENOMEM;
        }
        if (tier_insert(s, t) < 0) {
                tl_remove(l, t);
                if (l->n == 0)
                        act_del(s, t->q, t->tenant);
                return -ENOMEM;
        }
        tenant_out(s, T);
        T->queued++;
        tenant_in(s, T);
        return 0;
}

static void queue_del(gp_sched *s, stask *t) {
        stenant *T = &s->tn[t->tenant];
        tlist *l = &T->q[t->q];
        tier_remove(s, t);
        tl_remove(l, t);
        if (l->n == 0)
                act_del(s, t->q, t->tenant);
        tenant_out(s, T);
        T->queued--;
        tenant_in(s, T);
}

/* ------------------------------------------------------------------ */
/* tasks                                                               */

static int req_check(const gp_sched_req *r) {
        if (!r || r->id <= 0 || r->priority < 0 || r->priority >= GP_PRIORITY_LEVELS || r->gpus < 1 ||
            r->gpus > GP_MAX_GANG || r->memory_mb < 0 || r->timeout_ms < 0 || r->queue_deadline_ms < 0 ||
            (r->elastic_max_gpus != 0 && (r->elastic_max_gpus <= r->gpus || r->elastic_max_gpus > GP_MAX_GANG)) ||
            r->array_id < 0 || r->array_limit < 0)
                return -EINVAL;
        return 0;
}

/* LAS queue of a given attained service. */
static int las_level(const gp_sched *s, int64_t attained) {
        int l = 0;
        while (l < s->cfg.las_levels - 1 && attained >= s->cfg.las_thresholds_ms[l])
                l++;
        return l;
}

/* GPU-ms t has held, counting a running task up to now (attained holds
 * its finished runs and the closed intervals of this run: an elastic task
 * closes one at each resize). */
static int64_t attained_at(const stask *t, int64_t now) {
        if (!t->running || now <= t->seg_ms)
                return t->attained;
        return t->attained + (int64_t)t->ngpus * (now - t->seg_ms);
}

/* The tier a (not running) task belongs in. */
static int queue_of(const gp_sched *s, const stask *t) {
        return s->cfg.policy == GP_SCHED_LAS ? las_level(s, t->attained) : t->prio;
}

static int task_from_req(gp_sched *s, const gp_sched_req *r, stask **ret) {
        stask *t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->id = r->id;
        t->prio = (uint8_t)r->priority;
        t->ngpus = (uint8_t)r->gpus;
        t->excl = r->exclusive || r->memory_mb == 0;
        t->preemptible = r->preemptible;
        t->mem = r->memory_mb;
        t->timeout_ms = r->timeout_ms;
        t->submit_ms = r->submit_ms;
        t->deadline_ms = r->queue_deadline_ms;
        t->nmin = (uint8_t)r->gpus;
        t->nmax = (uint8_t)r->elastic_max_gpus;
        if (t->nmax) {
                /* elastic tasks hold whole GPUs */
                t->excl = true;
                t->mem = 0;
        }
        if (intern_get(&s->tenants, r->tenant, &t->tenant) < 0 || tenant_ensure(s, t->tenant) < 0 ||
            intern_get(&s->models, r->model, &t->model) < 0)
                goto oom;
        if (r->gpu_model && *r->gpu_model) {
                if (!(t->gpu_model = strdup(r->gpu_model)))
                        goto oom;
        }
        t->kinds = kinds_for_glob(s, t->gpu_model);
        t->q = (uint8_t)queue_of(s, t);
        if (r->array_id > 0) {
                sarray *a = gp_i64map_get(&s->arrays, r->array_id);
                if (!a) {
                        if (!(a = calloc(1, sizeof(*a))))
                                goto oom;
                        a->id = r->array_id;
                        if (gp_i64map_put(&s->arrays, a->id, a) < 0) {
                                free(a);
                                goto oom;
                        }
                }
                a->limit = r->array_limit; /* every member carries the same */
                a->members++;
                t->arr = a;
        }
        *ret = t;
        return 0;
oom:
        task_free(s, t);
        return -ENOMEM;
}

int gp_sched_check_feasible(const gp_sched *s, const gp_sched_req *r, char *why, size_t size) {
        if (why && size)
                why[0] = '\0';
        if (req_check(r) < 0) {
                if (why)
                        snprintf(why, size, "invalid request");
                return -EINVAL;
        }
        uint64_t kinds = kinds_for_glob(s, (r->gpu_model && *r->gpu_model) ? r->gpu_model : NULL);
        int64_t mem = r->elastic_max_gpus ? 0 : r->memory_mb; /* elastic: whole GPUs */
        int64_t largest = 0;
        int most_on_node = 0;
        bool kind_seen = false;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                int cnt = 0;
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (g->reserved || !((kinds >> g->kind) & 1))
                                continue;
                        kind_seen = true;
                        if (g->usable > largest)
                                largest = g->usable;
                        if (g->usable >= mem && g->usable > 0)
                                cnt++;
                }
                if (cnt >= r->gpus)
                        return 0;
                if (cnt > most_on_node)
                        most_on_node = cnt;
        }
        if (!why)
                return -EINVAL;
        if (s->ngpus == 0)
                snprintf(why, size, "the pool has no GPUs");
        else if (!kind_seen)
                snprintf(why, size, "no GPU matches gpu_model '%s'",
                         r->gpu_model && *r->gpu_model ? r->gpu_model : "*");
        else if (largest < mem)
                snprintf(why, size,
                         "no GPU has %" PRId64 " MB usable (largest: %" PRId64 " MB after the %" PRId64
                         " MB safety margin)",
                         r->memory_mb, largest, s->cfg.memory_safety_margin_mb);
        else
                snprintf(why, size, "no node has %d GPUs that fit (most on one node: %d)", r->gpus,
                         most_on_node);
        return -EINVAL;
}

int gp_sched_enqueue_room(const gp_sched *s, const char *tenant, int priority, size_t n) {
        if (priority < 0 || priority >= GP_PRIORITY_LEVELS)
                return -EINVAL;
        if (s->tiers[s->cfg.policy == GP_SCHED_LAS ? 0 : priority].n + n > (size_t)s->cfg.max_queue_depth)
                return -GP_EQUEUEFULL;
        uint32_t tid;
        if (tenant && intern_find(&s->tenants, tenant, &tid) == 0 && tid < s->tn_cap && s->tn[tid].max_queued > 0 &&
            (size_t)s->tn[tid].queued + n > (size_t)s->tn[tid].max_queued)
                return -EDQUOT;
        return 0;
}

int gp_sched_enqueue(gp_sched *s, const gp_sched_req *r) {
        if (req_check(r) < 0)
                return -EINVAL;
        if (map_get(s, r->id))
                return -EEXIST;
        /* a new task enters tier = its priority (LAS: queue 0) */
        if (s->tiers[s->cfg.policy == GP_SCHED_LAS ? 0 : r->priority].n >= (size_t)s->cfg.max_queue_depth)
                return -GP_EQUEUEFULL;
        uint32_t tid;
        if (!r->readmit && intern_find(&s->tenants, r->tenant, &tid) == 0 && tid < s->tn_cap &&
            s->tn[tid].max_queued > 0 && s->tn[tid].queued >= s->tn[tid].max_queued)
                return -EDQUOT;
        stask *t;
        int rc = task_from_req(s, r, &t);
        if (rc < 0)
                return rc;
        if (map_put(s, t) < 0) {
                task_free(s, t);
                return -ENOMEM;
        }
        if (t->deadline_ms > 0 && heap_push(s, t->deadline_ms, t->id) < 0) {
                map_del(s, t->id);
                task_free(s, t);
                return -ENOMEM;
        }
        if (queue_add(s, t) < 0) {
                map_del(s, t->id);
                task_free(s, t);
                return -ENOMEM;
        }
        return 0;
}

/* Would t, holding share milli-GPUs, take capacity another tenant is
 * guaranteed?  It would not if it stays within its own tenant's guarantee,
 * or fits in what is free beyond the other tenants' unused guarantees
 * (free = usable GPUs minus every running share).  Called before t's share
 * is counted.  O(1) while no tenant has a guarantee, else O(tenants). */
static bool borrows(const gp_sched *s, const stask *t, int64_t share) {
        const stenant *T = &s->tn[t->tenant];
        if (s->n_guar == 0 || (T->guar_milli > 0 && T->run_milli + share <= T->guar_milli))
                return false;
        int64_t used = 0, lent = 0;
        bool any = false;
        for (uint32_t i = 0; i < s->tn_cap; i++) {
                const stenant *U = &s->tn[i];
                used += U->run_milli;
                if (U->guar_milli > 0 && i != t->tenant) {
                        any = true;
                        if (U->guar_milli > U->run_milli)
                                lent += U->guar_milli - U->run_milli;
                }
        }
        if (!any)
                return false;
        int64_t free_milli = (int64_t)s->usable_gpus * 1000 - used;
        return share > free_milli - lent;
}

/* Start t on gpus.  borrow: 1 or 0 says whether it runs borrowing (a
 * restore), -1 decides it (see borrows(); preemptible tasks never borrow:
 * they are reclaimable anyway). */
static int start_on(gp_sched *s, stask *t, const uint32_t *gpus, int n, int64_t now, int borrow) {
        if (t->nmax) {
                stask **el = grow(s->el, sizeof(*el), &s->el_cap, s->nel + 1);
                if (!el)
                        return -ENOMEM;
                s->el = el;
        }
        t->charge = t->excl ? 0 : t->mem;
        int i;
        for (i = 0; i < n; i++) {
                if (t->excl)
                        t->charge = s->gpus[gpus[i]].usable;
                int rc = gpu_attach(s, gpus[i], t);
                if (rc < 0)
                        goto undo;
                t->gpus[i] = gpus[i];
        }
        t->running = true;
        t->ngpus = (uint8_t)n;
        t->start_ms = t->seg_ms = now;
        t->start_stamp = s->stamp;
        if (t->nmax) {
                t->el_idx = s->nel;
                s->el[s->nel++] = t;
        }
        s->running++;
        t->share = fit_share(s, t, gpus, n);
        t->borrowing = !t->preemptible && (borrow >= 0 ? borrow > 0 : borrows(s, t, t->share));
        stenant *T = &s->tn[t->tenant];
        tenant_out(s, T);
        usage_advance(s, T, now);
        T->running++;
        T->run_milli += t->share;
        tenant_in(s, T);
        if (t->arr)
                t->arr->running++;
        pre_count(s, t, 1);
        return 0;
undo:
        while (i-- > 0) {
                if (t->excl)
                        t->charge = s->gpus[gpus[i]].usable;
                gpu_detach(s, gpus[i], t);
        }
        return -ENOMEM;
}

/* Free t's GPUs; its run up to `now` counts as attained service. */
static void stop(gp_sched *s, stask *t, int64_t now) {
        t->attained = attained_at(t, now);
        pre_count(s, t, -1);
        t->borrowing = false;
        for (int i = 0; i < t->ngpus; i++) {
                if (t->excl)
                        t->charge = s->gpus[t->gpus[i]].usable;
                gpu_detach(s, t->gpus[i], t);
        }
        t->running = false;
        s->running--;
        stenant *T = &s->tn[t->tenant];
        tenant_out(s, T);
        usage_advance(s, T, now);
        T->running--;
        T->run_milli -= t->share;
        tenant_in(s, T);
        if (t->arr)
                t->arr->running--;
        t->share = 0;
        if (t->nmax) {
                stask *last = s->el[--s->nel];
                s->el[t->el_idx] = last;
                last->el_idx = t->el_idx;
                t->ngpus = t->nmin; /* queued again at its minimum */
        }
}

int gp_sched_restore_running(gp_sched *s, const gp_sched_req *r, const uint32_t *gpus, int n,
                             int64_t start_ms) {
        if (req_check(r) < 0 || n < r->gpus || n > (r->elastic_max_gpus ? r->elastic_max_gpus : r->gpus))
                return -EINVAL;
        if (map_get(s, r->id))
                return -EEXIST;
        for (int i = 0; i < n; i++) {
                if (gpus[i] >= s->ngpus)
                        return -EINVAL;
                for (int j = 0; j < i; j++)
                        if (gpus[j] == gpus[i])
                                return -EINVAL;
        }
        stask *t;
        int rc = task_from_req(s, r, &t);
        if (rc < 0)
                return rc;
        for (int i = 0; i < n; i++) {
                const sgpu *g = &s->gpus[gpus[i]];
                /* restore is lenient about health (the task is already
                 * there) but not about double-booking */
                if (g->excl || (t->excl && g->ntasks > 0) || (!t->excl && gpu_free(g) < t->mem)) {
                        task_free(s, t);
                        return -EINVAL;
                }
        }
        if (map_put(s, t) < 0) {
                task_free(s, t);
                return -ENOMEM;
        }
        if ((rc = start_on(s, t, gpus, n, start_ms, r->borrowing ? 1 : 0)) < 0) {
                map_del(s, t->id);
                task_free(s, t);
                return rc;
        }
        for (int i = t->nmin; i < n; i++)
                s->gpus[gpus[i]].grow_seq = ++s->grow_seq; /* grown in the order given */
        s->gen++;
        return 0;
}

int gp_sched_remove(gp_sched *s, int64_t id) {
        return gp_sched_remove_at(s, id, s->last_run_ms);
}

int gp_sched_remove_at(gp_sched *s, int64_t id, int64_t now_ms) {
        stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        if (t->running)
                stop(s, t, now_ms);
        else
                queue_del(s, t);
        map_del(s, id);
        task_free(s, t);
        s->gen++;
        return 0;
}

int gp_sched_task_attained(const gp_sched *s, int64_t id, int64_t now_ms, int64_t *ret_gpu_ms) {
        const stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        *ret_gpu_ms = attained_at(t, now_ms);
        return 0;
}

int gp_sched_requeue(gp_sched *s, int64_t id) {
        return gp_sched_requeue_at(s, id, s->last_run_ms);
}

int gp_sched_requeue_at(gp_sched *s, int64_t id, int64_t now_ms) {
        stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        if (!t->running)
                return -GP_ESTATE;
        stop(s, t, now_ms);
        t->rcode = R_NONE;
        t->q = (uint8_t)queue_of(s, t);
        if (queue_add(s, t) < 0) {
                /* cannot queue it again: it is forgotten, the caller must end it */
                map_del(s, t->id);
                task_free(s, t);
                return -ENOMEM;
        }
        return 0;
}

/* ------------------------------------------------------------------ */
/* the decision loop                                                   */

static int emit(gp_sched_decision **ret, size_t *n, size_t *cap, const gp_sched_decision *d) {
        if (*n == *cap) {
                size_t c = *cap ? *cap * 2 : 64;
                gp_sched_decision *p = realloc(*ret, c * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                *ret = p;
                *cap = c;
        }
        (*ret)[(*n)++] = *d;
        return 0;
}

static int expire_due(gp_sched *s, int64_t now, gp_sched_decision **ret, size_t *n, size_t *cap) {
        while (s->heap_n && s->heap[0].deadline <= now) {
                heap_ent e = s->heap[0];
                stask *t = map_get(s, e.id);
                if (!t || t->running || t->deadline_ms != e.deadline) {
                        heap_pop(s);
                        continue;
                }
                gp_sched_decision d = {.kind = GP_DECIDE_EXPIRE, .id = t->id};
                if (emit(ret, n, cap, &d) < 0)
                        return -ENOMEM;
                heap_pop(s);
                queue_del(s, t);
                map_del(s, t->id);
                task_free(s, t);
                s->total_expired++;
        }
        return 0;
}

static void set_reason(gp_sched *s, stask *t, int code, int64_t a1, int64_t a2) {
        t->rcode = (uint8_t)code;
        t->ra1 = a1;
        t->ra2 = a2;
        t->rstamp = s->stamp;
}

/* Within one run nothing is freed, so a request at least as large as one
 * that already failed (same constraints) fails too: skip its placement. */
typedef struct fail_memo {
        int excl_n[2];             /* [avoid]: smallest whole-GPU count that failed, 0 none */
        int64_t shared_mem[2];     /* [avoid]: smallest single shared request that failed, -1 none */
} fail_memo;

/* Not for a shared task with a model under max_models_per_gpu: whether it
 * fits depends on its model, not only on its size. */
static bool memo_applies(const gp_sched *s, const stask *t) {
        return !t->gpu_model && (t->excl || t->ngpus == 1) &&
               (t->excl || !t->model || s->cfg.max_models_per_gpu <= 0);
}

static bool memo_fails(const gp_sched *s, const fail_memo *m, const stask *t, bool avoid) {
        if (!memo_applies(s, t))
                return false;
        /* a failure without the avoid restriction also fails with it */
        for (int a = 0; a <= (int)avoid; a++) {
                if (t->excl && m->excl_n[a] && t->ngpus >= m->excl_n[a])
                        return true;
                if (!t->excl && m->shared_mem[a] >= 0 && t->mem >= m->shared_mem[a])
                        return true;
        }
        return false;
}

/* The other way round: until the next start in the run, a request no
 * larger than one that fitted ignoring the reservation fits too (only used
 * to word the reason of tasks that wait behind the reservation). */
typedef struct fit_memo {
        int excl_n;                /* whole GPUs: count that fitted, 0 none ... */
        int64_t excl_mem;          /* ... with this much memory per GPU */
        int64_t shared_mem;        /* single shared request that fitted, -1 none */
} fit_memo;

static bool fit_memo_fits(const gp_sched *s, const fit_memo *m, const stask *t) {
        if (!memo_applies(s, t))
                return false;
        if (t->excl)
                return m->excl_n && t->ngpus <= m->excl_n && t->mem <= m->excl_mem;
        return m->shared_mem >= 0 && t->mem <= m->shared_mem;
}

static void fit_memo_record(const gp_sched *s, fit_memo *m, const stask *t) {
        if (!memo_applies(s, t))
                return;
        if (t->excl) {
                if (!m->excl_n || (t->ngpus >= m->excl_n && t->mem >= m->excl_mem)) {
                        m->excl_n = t->ngpus;
                        m->excl_mem = t->mem;
                }
        } else if (t->mem > m->shared_mem) {
                m->shared_mem = t->mem;
        }
}

static void memo_record(const gp_sched *s, fail_memo *m, const stask *t, bool avoid) {
        if (!memo_applies(s, t))
                return;
        if (t->excl) {
                if (!m->excl_n[avoid] || t->ngpus < m->excl_n[avoid])
                        m->excl_n[avoid] = t->ngpus;
        } else if (m->shared_mem[avoid] < 0 || t->mem < m->shared_mem[avoid]) {
                m->shared_mem[avoid] = t->mem;
        }
}

/* ------------------------------------------------------------------ */
/* LAS preemption                                                      */

/* May running task v be preempted for a task of queue q? */
static bool las_victim(const gp_sched *s, const stask *v, int q, int64_t now) {
        return v->running && v->preemptible && now - v->start_ms >= s->cfg.las_min_run_ms &&
               las_level(s, attained_at(v, now)) > q;
}

/* Can GPU g take t once the tasks marked with the current pstamp are gone? */
static bool gpu_freed(const gp_sched *s, const sgpu *g, const stask *t) {
        if (!gpu_usable(g) || !kind_ok(t, g) || g->usable < t->mem)
                return false;
        for (int i = 0; i < g->ntasks; i++)
                if (g->tasks[i]->pstamp != s->pstamp)
                        return false;
        return true;
}

/* Mark (with a fresh pstamp) the victims that would free enough whole GPUs
 * for t on node ni: most attained service first, then latest start, then
 * highest id.  Returns the GPUs the marked victims hold in all (the cost),
 * or -1 when the node cannot make room. */
static int las_plan(gp_sched *s, const stask *t, uint32_t ni, int64_t now) {
        const snode *nd = &s->nodes[ni];
        if (!(nd->kinds & t->kinds) || nd->ngpus < t->ngpus)
                return -1;
        if (++s->pstamp == 0) {
                /* wrapped: clear every mark so none is mistaken for current */
                size_t pos = 0;
                stask *pt;
                while ((pt = gp_i64map_next(&s->tasks, &pos, NULL)))
                        pt->pstamp = 0;
                s->pstamp = 1;
        }
        int cost = 0;
        for (;;) {
                int freed = 0;
                for (int i = 0; i < nd->ngpus; i++)
                        freed += gpu_freed(s, &s->gpus[nd->gpus[i]], t);
                if (freed >= t->ngpus)
                        return cost;
                /* the GPU whose least-served unmarked task is the most served */
                const sgpu *best = NULL;
                int64_t best_a = 0, best_start = 0, best_id = 0;
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (g->ntasks == 0 || !gpu_usable(g) || !kind_ok(t, g) || g->usable < t->mem)
                                continue;
                        bool ok = true, any = false;
                        int64_t a = INT64_MAX, st = 0, id = 0;
                        for (int k = 0; k < g->ntasks && ok; k++) {
                                const stask *v = g->tasks[k];
                                if (v->pstamp == s->pstamp)
                                        continue;
                                if (!las_victim(s, v, t->q, now)) {
                                        ok = false;
                                        break;
                                }
                                int64_t va = attained_at(v, now);
                                if (!any || va < a || (va == a && (v->start_ms < st || (v->start_ms == st && v->id < id)))) {
                                        a = va;
                                        st = v->start_ms;
                                        id = v->id;
                                }
                                any = true;
                        }
                        if (!ok || !any)
                                continue;
                        if (!best || a > best_a || (a == best_a && (st > best_start || (st == best_start && id > best_id)))) {
                                best = g;
                                best_a = a;
                                best_start = st;
                                best_id = id;
                        }
                }
                if (!best)
                        return -1;
                for (int k = 0; k < best->ntasks; k++) {
                        stask *v = best->tasks[k];
                        if (v->pstamp != s->pstamp) {
                                v->pstamp = s->pstamp;
                                cost += v->ngpus;
                        }
                }
        }
}

/* Stop running task v and queue it again (its run counts as service). */
static int las_preempt(gp_sched *s, stask *v, int64_t now, gp_sched_decision **ret, size_t *ret_n,
                       size_t *ret_cap) {
        gp_sched_decision d = {.kind = GP_DECIDE_PREEMPT, .id = v->id, .n_gpus = v->ngpus};
        memcpy(d.gpus, v->gpus, (size_t)v->ngpus * sizeof(uint32_t));
        stop(s, v, now);
        v->rcode = R_NONE;
        v->q = (uint8_t)queue_of(s, v);
        s->total_preempted++;
        if (queue_add(s, v) < 0) {
                /* cannot queue it again: forgotten, like gp_sched_requeue */
                map_del(s, v->id);
                task_free(s, v);
                return -ENOMEM;
        }
        return emit(ret, ret_n, ret_cap, &d);
}

/* Make room for t, the task whose turn it is, by preempting tasks of later
 * queues on the node where that costs the fewest GPUs (then the lowest
 * node).  1 if something was preempted, 0 if no node can make room (nothing
 * changed), -ENOMEM. */
static int las_make_room(gp_sched *s, stask *t, int64_t now, gp_sched_decision **ret, size_t *ret_n,
                         size_t *ret_cap) {
        int best_cost = -1;
        uint32_t best = NIL;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                int c = las_plan(s, t, ni, now);
                if (c > 0 && (best_cost < 0 || c < best_cost)) {
                        best_cost = c;
                        best = ni;
                }
        }
        if (best == NIL)
                return 0;
        las_plan(s, t, best, now); /* mark that node's victims again */
        const snode *nd = &s->nodes[best];
        for (;;) {
                stask *v = NULL;
                for (int i = 0; i < nd->ngpus && !v; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        for (int k = 0; k < g->ntasks; k++)
                                if (g->tasks[k]->pstamp == s->pstamp) {
                                        v = g->tasks[k];
                                        break;
                                }
                }
                if (!v)
                        return 1;
                int rc = las_preempt(s, v, now, ret, ret_n, ret_cap);
                if (rc < 0)
                        return rc;
        }
}

/* ------------------------------------------------------------------ */
/* preemption for tiers and guarantees (cfg.preemption)                */

static void pstamp_next(gp_sched *s) {
        if (++s->pstamp == 0) {
                /* wrapped: clear every mark so none is mistaken for current */
                size_t pos = 0;
                stask *pt;
                while ((pt = gp_i64map_next(&s->tasks, &pos, NULL)))
                        pt->pstamp = 0;
                for (uint32_t i = 0; i < s->tn_cap; i++)
                        s->tn[i].plan_stamp = 0;
                s->pstamp = 1;
        }
}

/* share of T's tasks marked as victims in the current plan */
static int64_t plan_milli(const gp_sched *s, const stenant *T) {
        return T->plan_stamp == s->pstamp ? T->plan_milli : 0;
}

static void plan_mark(gp_sched *s, stask *v, bool on) {
        stenant *V = &s->tn[v->tenant];
        if (V->plan_stamp != s->pstamp) {
                V->plan_stamp = s->pstamp;
                V->plan_milli = 0;
        }
        V->plan_milli += on ? v->share : -v->share;
        v->pstamp = on ? s->pstamp : 0;
}

/* May running task v be preempted to make room for w?  rule_a: w is the
 * task whose turn it is, so less urgent tiers may go; reclaim: w's tenant
 * stays within its guarantee by starting w.  A victim's tenant keeps its
 * own guarantee (what the marked victims leave it) unless w is the same
 * tenant's and more urgent. */
static bool victim_ok(const gp_sched *s, const stask *v, const stask *w, int64_t now, bool rule_a, bool reclaim) {
        if (!reclaimable(v) || v->pstamp == s->pstamp || v->start_stamp == s->stamp ||
            now - v->start_ms < s->cfg.preempt_min_runtime_ms || was_preempted_by(w, v->id))
                return false;
        const stenant *V = &s->tn[v->tenant];
        bool borrowed = V->run_milli - plan_milli(s, V) - v->share >= V->guar_milli;
        if (rule_a && v->preemptible && v->prio > w->prio && (v->tenant == w->tenant || borrowed))
                return true; /* a borrowing task that is not preemptible goes only by reclaim */
        return reclaim && v->tenant != w->tenant && borrowed;
}

/* Fewer GPUs, then the shorter run so far, then the higher id. */
static bool victim_better(const stask *a, const stask *b) {
        if (a->ngpus != b->ngpus)
                return a->ngpus < b->ngpus;
        if (a->start_ms != b->start_ms)
                return a->start_ms > b->start_ms;
        return a->id > b->id;
}

/* Could w use GPU g at all (ignoring what runs on it)? */
static bool gpu_could(const gp_sched *s, const sgpu *g, const stask *w, bool avoid) {
        return gpu_usable(g) && kind_ok(w, g) && g->usable >= w->mem && !(avoid && g->resv_stamp == s->stamp);
}

/* Can GPU g host w once the marked victims are gone? */
static bool gpu_room(const gp_sched *s, const sgpu *g, const stask *w, bool avoid) {
        if (!gpu_could(s, g, w, avoid))
                return false;
        int64_t used = 0;
        for (int k = 0; k < g->ntasks; k++) {
                const stask *x = g->tasks[k];
                if (x->pstamp == s->pstamp)
                        continue;
                if (w->excl || x->excl)
                        return false;
                used += x->charge;
        }
        return g->usable - used >= w->mem;
}

static bool node_room(const gp_sched *s, const snode *nd, const stask *w, bool avoid) {
        int n = 0;
        for (int i = 0; i < nd->ngpus; i++)
                if (gpu_room(s, &s->gpus[nd->gpus[i]], w, avoid) && ++n >= w->ngpus)
                        return true;
        return false;
}

/* Most share w can take on node nd (its quota is checked with this). */
static int64_t node_share_ub(const gp_sched *s, const stask *w, const snode *nd) {
        int64_t m = 0;
        for (int i = 0; i < nd->ngpus; i++) {
                const sgpu *g = &s->gpus[nd->gpus[i]];
                if (kind_ok(w, g) && g->usable >= w->mem) {
                        int64_t sh = gpu_share_of(w->excl, w->mem, g->usable);
                        if (sh > m)
                                m = sh;
                }
        }
        return m * w->ngpus;
}

static bool less_urgent_on(const snode *nd, int prio) {
        for (int p = prio + 1; p < GP_PRIORITY_LEVELS; p++)
                if (nd->npre_prio[p])
                        return true;
        return false;
}

/* Mark (fresh pstamp; list in s->pv) the victims that make room for w on
 * node ni: greedily the best victim on a GPU that can be freed for w, until
 * w fits; then the marks not needed after all are dropped, worst first.
 * Returns the GPUs the victims hold (their lost GPU-ms in *ret_lost), or
 * -1 when the node cannot make room, -ENOMEM. */
static int plan_node(gp_sched *s, const stask *w, uint32_t ni, int64_t now, bool rule_a, bool reclaim, bool avoid,
                     int64_t *ret_lost) {
        const snode *nd = &s->nodes[ni];
        pstamp_next(s);
        s->pv_n = 0;
        while (!node_room(s, nd, w, avoid)) {
                stask *best = NULL;
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (g->ntasks == 0 || !gpu_could(s, g, w, avoid) || gpu_room(s, g, w, avoid))
                                continue;
                        int64_t keep = 0;
                        bool blocked = false;
                        stask *gb = NULL;
                        for (int k = 0; k < g->ntasks && !blocked; k++) {
                                stask *x = g->tasks[k];
                                if (x->pstamp == s->pstamp)
                                        continue;
                                if (victim_ok(s, x, w, now, rule_a, reclaim)) {
                                        if (!gb || victim_better(x, gb))
                                                gb = x;
                                } else if (w->excl || x->excl) {
                                        blocked = true;
                                } else {
                                        keep += x->charge;
                                }
                        }
                        if (blocked || !gb || g->usable - keep < w->mem)
                                continue;
                        if (!best || victim_better(gb, best))
                                best = gb;
                }
                if (!best)
                        return -1;
                stask **pv = grow(s->pv, sizeof(*pv), &s->pv_cap, s->pv_n + 1);
                if (!pv)
                        return -ENOMEM;
                s->pv = pv;
                pv[s->pv_n++] = best;
                plan_mark(s, best, true);
        }
        for (uint32_t i = s->pv_n; i-- > 0;) {
                stask *v = s->pv[i];
                plan_mark(s, v, false);
                if (node_room(s, nd, w, avoid)) {
                        memmove(&s->pv[i], &s->pv[i + 1], (s->pv_n - i - 1) * sizeof(*s->pv));
                        s->pv_n--;
                } else {
                        plan_mark(s, v, true);
                }
        }
        int gpus = 0;
        int64_t lost = 0;
        for (uint32_t i = 0; i < s->pv_n; i++) {
                gpus += s->pv[i]->ngpus;
                lost += (int64_t)s->pv[i]->ngpus * (now - s->pv[i]->start_ms);
        }
        *ret_lost = lost;
        return gpus;
}

/* Stop v for w and queue it again at its place by id. */
static int preempt_for(gp_sched *s, stask *v, const stask *w, int64_t now, gp_sched_decision **ret,
                       size_t *ret_n, size_t *ret_cap) {
        if (!was_preempted_by(v, w->id) && v->n_pre_by == v->pre_by_cap) {
                int cap = v->pre_by_cap ? 2 * v->pre_by_cap : 4;
                int64_t *p = realloc(v->pre_by, (size_t)cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                v->pre_by = p;
                v->pre_by_cap = cap;
        }
        gp_sched_decision d = {.kind = GP_DECIDE_PREEMPT, .id = v->id, .n_gpus = v->ngpus};
        memcpy(d.gpus, v->gpus, (size_t)v->ngpus * sizeof(uint32_t));
        if (emit(ret, ret_n, ret_cap, &d) < 0)
                return -ENOMEM;
        if (!was_preempted_by(v, w->id))
                v->pre_by[v->n_pre_by++] = w->id;
        stop(s, v, now);
        v->rcode = R_NONE;
        v->q = (uint8_t)queue_of(s, v);
        s->total_preempted++;
        if (queue_add(s, v) < 0) {
                /* cannot queue it again: forgotten, like gp_sched_requeue */
                map_del(s, v->id);
                task_free(s, v);
                return -ENOMEM;
        }
        return 0;
}

/* Make room for w by preempting on the node where that costs the fewest
 * GPUs, then the least lost work, then the lowest node.  after_resv: w is
 * behind the reserved task, so only reclaim applies and never on reserved
 * GPUs (avoid).  1 if victims were preempted (w then fits, its rules
 * included), 0 if nothing changed, -ENOMEM. */
static int make_room(gp_sched *s, stask *w, int64_t now, bool after_resv, bool avoid, gp_sched_decision **ret,
                     size_t *ret_n, size_t *ret_cap) {
        if (!s->npre)
                return 0;
        const stenant *T = &s->tn[w->tenant];
        bool rule_a = !after_resv;
        bool reclaim_any = T->guar_milli > 0 && T->run_milli + share_lb(s, w) <= T->guar_milli;
        if (!rule_a && !reclaim_any)
                return 0;
        int best = -1;
        int64_t best_lost = 0;
        uint32_t bn = NIL;
        bool ba = false, br = false;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!nd->npre || !(nd->kinds & w->kinds) || nd->ngpus < w->ngpus ||
                    now - nd->pre_min_start < s->cfg.preempt_min_runtime_ms)
                        continue; /* no victim there, or none has run long enough */
                if (best >= 0) {
                        /* cannot beat the best plan: fewer GPUs than it would
                         * need, or as many and at least as much lost work */
                        int glb = w->excl && w->ngpus > nd->idle ? w->ngpus - nd->idle : 1;
                        int64_t llb = (int64_t)glb * (now - nd->pre_max_start);
                        if (glb > best || (glb == best && llb >= best_lost))
                                continue;
                }
                bool a = rule_a && less_urgent_on(nd, w->prio);
                bool r = reclaim_any && T->run_milli + node_share_ub(s, w, nd) <= T->guar_milli;
                if (!a && !r)
                        continue;
                int64_t lost;
                int c = plan_node(s, w, ni, now, a, r, avoid, &lost);
                if (c == -ENOMEM)
                        return c;
                if (c <= 0)
                        continue;
                if (best < 0 || c < best || (c == best && lost < best_lost)) {
                        best = c;
                        best_lost = lost;
                        bn = ni;
                        ba = a;
                        br = r;
                }
        }
        if (bn == NIL)
                return 0;
        int64_t lost, a1, a2, a3;
        if (gate(s, w, node_share_ub(s, w, &s->nodes[bn]), &a1, &a2, &a3))
                return 0; /* it could not start there after all */
        int c = plan_node(s, w, bn, now, ba, br, avoid, &lost); /* mark that node's victims again */
        if (c <= 0)
                return c < 0 && c != -1 ? c : 0;
        for (uint32_t i = 0; i < s->pv_n; i++) {
                int rc = preempt_for(s, s->pv[i], w, now, ret, ret_n, ret_cap);
                if (rc < 0)
                        return rc;
        }
        return 1;
}

/* ------------------------------------------------------------------ */
/* elastic tasks: grow onto idle GPUs, shrink for the task whose turn it is */

/* Close t's current interval at now: what it held so far counts as
 * attained service and, through tenant_out/in, as its tenant's usage. */
static void resize_begin(gp_sched *s, stask *t, int64_t now) {
        t->attained = attained_at(t, now);
        if (now > t->seg_ms)
                t->seg_ms = now;
        stenant *T = &s->tn[t->tenant];
        tenant_out(s, T);
        usage_advance(s, T, now);
}

/* Add idle GPU gi to running elastic task t (it becomes its last GPU).
 * 0 or -ENOMEM (nothing changed). */
static int grow_onto(gp_sched *s, stask *t, uint32_t gi, int64_t now) {
        stenant *T = &s->tn[t->tenant];
        t->charge = s->gpus[gi].usable;
        resize_begin(s, t, now);
        int rc = gpu_attach(s, gi, t);
        if (rc == 0) {
                t->gpus[t->ngpus++] = gi;
                t->share += 1000;
                T->run_milli += 1000;
        }
        tenant_in(s, T);
        return rc;
}

/* Give back t's last GPU (it must be above its minimum). */
static void shrink_one(gp_sched *s, stask *t, int64_t now) {
        stenant *T = &s->tn[t->tenant];
        uint32_t gi = t->gpus[t->ngpus - 1];
        resize_begin(s, t, now);
        t->charge = s->gpus[gi].usable;
        gpu_detach(s, gi, t);
        t->ngpus--;
        t->share -= 1000;
        T->run_milli -= 1000;
        tenant_in(s, T);
}

static int emit_resize(const stask *t, gp_sched_decision **ret, size_t *ret_n, size_t *ret_cap) {
        gp_sched_decision d = {.kind = GP_DECIDE_RESIZE, .id = t->id, .n_gpus = t->ngpus};
        memcpy(d.gpus, t->gpus, (size_t)t->ngpus * sizeof(uint32_t));
        return emit(ret, ret_n, ret_cap, &d);
}

/* Room for `extra` more decisions, so that a change and its report cannot
 * be split by a failed allocation. */
static int emit_room(gp_sched_decision **ret, size_t *ret_n, size_t *ret_cap, size_t extra) {
        if (*ret_n + extra <= *ret_cap)
                return 0;
        size_t c = *ret_cap ? *ret_cap : 64;
        while (c < *ret_n + extra)
                c *= 2;
        gp_sched_decision *p = realloc(*ret, c * sizeof(*p));
        if (!p)
                return -ENOMEM;
        *ret = p;
        *ret_cap = c;
        return 0;
}

static uint32_t task_node(const gp_sched *s, const stask *t) {
        return s->gpus[t->gpus[0]].node;
}

/* Could GPU g take w right now (the test place() uses)? */
static bool fits_now(const gp_sched *s, const stask *w, const sgpu *g, bool avoid) {
        return w->excl ? idle_fits(s, w, g, avoid) : shared_fits(s, w, g, avoid);
}

/* Plan the fewest grown GPUs to give back on node ni so that w fits there:
 * have[i] is the count el[i] would keep (el[i] among the n elastic tasks
 * of the node).  Each step frees, of the tasks' last grown GPUs, the one
 * that is cheapest to reach (GPUs that w could not use, e.g. drained ones,
 * must go too when they were grown later), ties to the last grown.  Returns
 * the GPUs given back, or -1 when the node cannot make room. */
static int shrink_plan(const gp_sched *s, const stask *w, uint32_t ni, stask *const *el, int n, int *have,
                       bool avoid) {
        const snode *nd = &s->nodes[ni];
        if (!(nd->kinds & w->kinds) || nd->ngpus < w->ngpus)
                return -1;
        int need = w->ngpus;
        for (int i = 0; i < nd->ngpus && need > 0; i++)
                need -= fits_now(s, w, &s->gpus[nd->gpus[i]], avoid);
        if (need <= 0)
                return -1; /* not for want of GPUs: shrinking would not help */
        for (int i = 0; i < n; i++)
                have[i] = el[i]->ngpus;
        int cost = 0;
        while (need > 0) {
                int bi = -1, bc = 0;
                uint64_t bseq = 0;
                for (int i = 0; i < n; i++) {
                        const stask *t = el[i];
                        int c = 0;
                        for (int k = have[i] - 1; k >= t->nmin; k--) {
                                c++;
                                if (gpu_could(s, &s->gpus[t->gpus[k]], w, avoid))
                                        break;
                                if (k == t->nmin)
                                        c = 0; /* nothing usable for w to reach */
                        }
                        if (!c)
                                continue;
                        uint64_t seq = s->gpus[t->gpus[have[i] - 1]].grow_seq;
                        if (bi < 0 || c < bc || (c == bc && seq > bseq)) {
                                bi = i;
                                bc = c;
                                bseq = seq;
                        }
                }
                if (bi < 0)
                        return -1;
                have[bi] -= bc;
                cost += bc;
                need--;
        }
        return cost;
}

/* Policy order of running elastic tasks for the grow pass (key = tier),
 * or their order by node for shrink planning (key = node). */
typedef struct eord {
        int64_t key;
        int64_t id;
        stask *t;
        int before;                /* grow pass: its GPU count before the pass */
} eord;

static int cmp_eord(const void *a, const void *b) {
        const eord *x = a, *y = b;
        if (x->key != y->key)
                return x->key < y->key ? -1 : 1;
        return (x->id > y->id) - (x->id < y->id);
}

/* Let w, the task whose turn it is, start by shrinking elastic tasks on the
 * node where that gives back the fewest GPUs (then the lowest node).  On
 * success the shrinks are applied and reported (RESIZE), *f is w's
 * placement and 1 is returned; 0 if no node can make room or w's gates
 * hold it there (nothing changed); -ENOMEM. */
static int shrink_for(gp_sched *s, stask *w, int64_t now, bool avoid, fit *f, gp_sched_decision **ret,
                      size_t *ret_n, size_t *ret_cap) {
        /* the running elastic tasks above their minimum, by node */
        uint32_t m = 0;
        for (uint32_t i = 0; i < s->nel; i++)
                m += s->el[i]->ngpus > s->el[i]->nmin;
        if (!m)
                return 0;
        eord *eo = grow(s->eo, sizeof(*eo), &s->eo_cap, m);
        if (!eo)
                return -ENOMEM;
        s->eo = eo;
        m = 0;
        for (uint32_t i = 0; i < s->nel; i++)
                if (s->el[i]->ngpus > s->el[i]->nmin)
                        eo[m++] = (eord){task_node(s, s->el[i]), s->el[i]->id, s->el[i], 0};
        qsort(eo, m, sizeof(*eo), cmp_eord);
        stask *el[MAX_NODE_GPUS];
        int have[MAX_NODE_GPUS];
        int best = -1;
        uint32_t bn = NIL, bfirst = 0;
        int bcount = 0;
        for (uint32_t i = 0; i < m;) {
                uint32_t ni = (uint32_t)eo[i].key, first = i;
                int n = 0;
                for (; i < m && eo[i].key == ni; i++)
                        el[n++] = eo[i].t; /* at most one per GPU of the node */
                int c = shrink_plan(s, w, ni, el, n, have, avoid);
                if (c > 0 && (best < 0 || c < best)) {
                        best = c;
                        bn = ni;
                        bfirst = first;
                        bcount = n;
                }
        }
        if (bn == NIL)
                return 0;
        int n = bcount;
        for (int i = 0; i < n; i++)
                el[i] = eo[bfirst + (uint32_t)i].t;
        shrink_plan(s, w, bn, el, n, have, avoid);
        /* each shrunk task's RESIZE and w's START */
        if (emit_room(ret, ret_n, ret_cap, (size_t)n + 1) < 0)
                return -ENOMEM;
        uint32_t gone[MAX_NODE_GPUS][GP_MAX_GANG];
        uint8_t had[MAX_NODE_GPUS];
        for (int i = 0; i < n; i++) {
                had[i] = el[i]->ngpus;
                memcpy(gone[i], el[i]->gpus, sizeof(gone[i]));
                while (el[i]->ngpus > have[i])
                        shrink_one(s, el[i], now);
        }
        int64_t a1, a2, a3;
        if (!place(s, w, avoid, f) || gate(s, w, fit_share(s, w, f->gpus, f->n), &a1, &a2, &a3)) {
                /* w could not start after all: grow them back as they were
                 * (their GPUs keep the room they had, nothing to allocate) */
                for (int i = 0; i < n; i++)
                        while (el[i]->ngpus < had[i]) {
                                uint32_t gi = gone[i][el[i]->ngpus];
                                uint64_t seq = s->gpus[gi].grow_seq;
                                int rc = grow_onto(s, el[i], gi, now);
                                if (rc < 0) {
                                        /* (cannot happen: nothing to allocate) report
                                         * what changed, as it is */
                                        for (int k = 0; k < n; k++)
                                                if (el[k]->ngpus != had[k])
                                                        emit_resize(el[k], ret, ret_n, ret_cap);
                                        return rc;
                                }
                                s->gpus[gi].grow_seq = seq;
                        }
                return 0;
        }
        for (int i = 0; i < n; i++)
                if (el[i]->ngpus < had[i] && emit_resize(el[i], ret, ret_n, ret_cap) < 0)
                        return -ENOMEM; /* cannot happen: room was made */
        return 1;
}

/* May t take one more whole GPU?  Its tenant stays within max_gpus_milli
 * and its group within its share (borrowing as for a start), and the
 * growth does not end its group's claim (below its share with tasks
 * waiting) while another group waits: that would release tasks held for
 * it, which would then take the GPUs back. */
static bool grow_ok(const gp_sched *s, const stask *t) {
        const stenant *T = &s->tn[t->tenant];
        if (T->max_milli > 0 && T->run_milli + 1000 > T->max_milli)
                return false;
        if (!T->group)
                return true;
        if (group_holds(s, T, 1000))
                return false;
        const sgroup *g = &s->gr[T->group];
        if (!g->needy)
                return true;
        int64_t waiting = g->waiting;
        if (!tenant_full(T) && T->max_milli > 0 && T->run_milli + 1000 >= T->max_milli)
                waiting -= T->queued;
        if (waiting > 0 && g->run_milli + 1000 < group_cap(s, g))
                return true;
        for (uint32_t gi = 1; gi < s->groups.n && gi < s->gr_cap; gi++)
                if (gi != T->group && s->gr[gi].waiting > 0)
                        return false;
        return true;
}

/* The idle GPU of t's node it should grow onto: usable, of a kind it may
 * use, closest to the GPUs it holds when the topology is known (then the
 * node's order).  NIL if none. */
static uint32_t grow_pick(const gp_sched *s, const stask *t) {
        const snode *nd = &s->nodes[task_node(s, t)];
        uint32_t best = NIL;
        int best_d = 0;
        for (int i = 0; i < nd->ngpus; i++) {
                const sgpu *g = &s->gpus[nd->gpus[i]];
                if (!idle_fits(s, t, g, false))
                        continue;
                int d = 0;
                if (nd->has_dist)
                        for (int k = 0; k < t->ngpus; k++) {
                                int a = g->slot, b = s->gpus[t->gpus[k]].slot;
                                d += (a < TOPO_MAX && b < TOPO_MAX) ? nd->dist[a][b] : 255;
                        }
                if (best == NIL || d < best_d) {
                        best = nd->gpus[i];
                        best_d = d;
                }
        }
        return best;
}

/* Does t's array run as many members as its %N allows? */
static bool array_full(const stask *t) {
        return t->arr && t->arr->limit > 0 && t->arr->running >= t->arr->limit;
}

static bool gate_holds(const gp_sched *s, const stask *t) {
        int64_t a1, a2, a3;
        return gate(s, t, share_lb(s, t), &a1, &a2, &a3) != 0;
}

/* Is a queued task left that its tenant's and group's rules allow to
 * start?  Not taken from the walk: a task skipped because its tenant or
 * group was held by another task in this run may come first in the next
 * run's order and would then take back what grew.  Per tenant and queue
 * only the first task counts: every walk examines a tenant's tasks of a
 * queue by id, and one held holds the rest.  The same holds across queues
 * where the order is fixed (fifo: by id; strict and las: the more urgent
 * queue first; hybrid: P0 first).  O(tenants with tasks queued x queues),
 * asked only when some elastic task could grow. */
static bool may_start_any(const gp_sched *s) {
        gp_sched_policy pol = s->cfg.policy;
        for (int q = 0; q < GP_PRIORITY_LEVELS; q++) {
                const tier *tr = &s->tiers[q];
                for (uint32_t j = 0; j < tr->nact; j++) {
                        const stenant *T = &s->tn[tr->act[j]];
                        const stask *h = T->q[q].v[T->q[q].lo];
                        if (gate_holds(s, h))
                                continue;
                        bool held = false;
                        for (int q2 = 0; q2 < GP_PRIORITY_LEVELS && !held; q2++) {
                                if (q2 == q || !T->q[q2].n)
                                        continue;
                                const stask *h2 = T->q[q2].v[T->q[q2].lo];
                                bool before = pol == GP_SCHED_FIFO ? h2->id < h->id
                                              : pol == GP_SCHED_HYBRID ? q2 == 0
                                                                       : q2 < q;
                                held = before && gate_holds(s, h2);
                        }
                        if (!held)
                                return true;
                }
        }
        return false;
}

static bool can_grow(const gp_sched *s, const stask *t) {
        return t->ngpus < t->nmax && s->nodes[task_node(s, t)].idle > 0;
}

/* The grow pass, at the end of every run: if no task that may start is
 * left waiting (then a reservation, if any, is for a task that is held
 * and protects nothing), elastic tasks below their maximum take idle GPUs
 * of their node, in policy order, passing over them again until none
 * grows (a growth may end another group's claim on idle GPUs and so let
 * a task of the group grow); each grown task is reported once.  0 or
 * -ENOMEM. */
static int grow_all(gp_sched *s, int64_t now, gp_sched_decision **ret, size_t *ret_n, size_t *ret_cap) {
        uint32_t m = 0;
        for (uint32_t i = 0; i < s->nel; i++)
                m += can_grow(s, s->el[i]);
        if (!m || may_start_any(s))
                return 0;
        eord *eo = grow(s->eo, sizeof(*eo), &s->eo_cap, m);
        if (!eo || emit_room(ret, ret_n, ret_cap, m) < 0)
                return -ENOMEM;
        s->eo = eo;
        m = 0;
        for (uint32_t i = 0; i < s->nel; i++) {
                stask *t = s->el[i];
                if (!can_grow(s, t))
                        continue;
                int key = s->cfg.policy == GP_SCHED_LAS    ? las_level(s, attained_at(t, now))
                          : s->cfg.policy == GP_SCHED_FIFO ? 0
                                                           : t->prio;
                eo[m++] = (eord){key, t->id, t, t->ngpus};
        }
        qsort(eo, m, sizeof(*eo), cmp_eord);
        int rc = 0;
        for (bool again = true; again && rc == 0;) {
                again = false;
                for (uint32_t i = 0; i < m && rc == 0; i++) {
                        stask *t = eo[i].t;
                        while (t->ngpus < t->nmax && grow_ok(s, t)) {
                                uint32_t gi = grow_pick(s, t);
                                if (gi == NIL)
                                        break;
                                if ((rc = grow_onto(s, t, gi, now)) < 0)
                                        break;
                                s->gpus[gi].grow_seq = ++s->grow_seq;
                                again = true;
                        }
                }
        }
        for (uint32_t i = 0; i < m; i++)
                if (eo[i].t->ngpus > eo[i].before)
                        emit_resize(eo[i].t, ret, ret_n, ret_cap); /* room was made */
        return rc;
}

/* Set t's reason to a rule of its tenant or group and hold the tenant (or
 * group) for the rest of the run. */
static void hold(gp_sched *s, stask *t, int code, int64_t a1, int64_t a2, int64_t a3) {
        set_reason(s, t, code, a1, a2);
        t->ra3 = a3;
        if (code == R_GROUP) {
                s->gr[a1].held_stamp = s->stamp;
                return;
        }
        stenant *T = &s->tn[t->tenant];
        T->held_stamp = s->stamp;
        T->held_code = (uint8_t)code;
        T->held_a1 = a1;
        T->held_a2 = a2;
}

int gp_sched_run(gp_sched *s, int64_t now, gp_sched_decision **ret, size_t *ret_n, size_t *ret_cap) {
        int rc = 0;
        fail_memo memo = {.shared_mem = {-1, -1}};
        fit_memo fits = {.shared_mem = -1};
        s->stamp++;
        s->last_run_stamp = s->stamp;
        s->last_run_ms = now;
        s->last_resv_id = 0;
        if ((rc = expire_due(s, now, ret, ret_n, ret_cap)) < 0)
                return rc;

        walk w;
        uint64_t lp[GP_PRIORITY_LEVELS], st[GP_PRIORITY_LEVELS];
        if ((rc = walk_init(s, &w, true)) < 0)
                return rc;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                lp[i] = s->tiers[i].pass;
                st[i] = stride(s, i); /* a division: once per run, not per task */
        }
        stask *resv = NULL;
        int64_t shadow = TIME_INF;
        int examined = 0;
        bool preempt_on = s->cfg.preemption && s->cfg.policy != GP_SCHED_LAS;
        for (;;) {
                /* fair walks: which tier goes next depends only on which
                 * are non-empty (and their passes), so only the chosen
                 * tier's head is brought up to date; if held tenants
                 * emptied it, choose again */
                int ti = pick_tier(s, w.cur, lp);
                if (ti < 0)
                        break;
                if (w.fair) {
                        walk_head(s, &w, ti);
                        if (!w.cur[ti])
                                continue;
                }
                stask *t = w.cur[ti];
                walk_advance(s, &w, ti);
                lp[ti] += st[ti];
                t->resv_holder = false;

                /* the rules of its tenant and group come first (a held
                 * task takes no reservation and blocks no one) */
                stenant *T = &s->tn[t->tenant];
                int64_t lb = share_lb(s, t), a1 = 0, a2 = 0, a3 = 0;
                int g;
                if (array_full(t)) {
                        /* its array's %N throttle: holds this task only,
                         * never its tenant (the tenant's other work goes on) */
                        set_reason(s, t, R_ARRAY, t->arr->id, t->arr->limit);
                        continue;
                }
                if (T->held_stamp == s->stamp) {
                        set_reason(s, t, T->held_code, T->held_a1, T->held_a2);
                        t->ra3 = lb;
                        continue;
                }
                if (group_held(s, T)) {
                        set_reason(s, t, R_GROUP, T->group, s->gr[T->group].share_pct);
                        continue;
                }
                if ((g = gate(s, t, lb, &a1, &a2, &a3))) {
                        hold(s, t, g, a1, a2, a3);
                        continue;
                }
                /* within its tenant's guarantee: may reclaim, and is not
                 * held behind a more urgent blocked task (it keeps off the
                 * GPUs reserved for that one) */
                bool guaranteed = T->guar_milli > 0 && T->run_milli + lb <= T->guar_milli;

                bool avoid = false;
                if (resv) {
                        /* tasks further back keep R_NONE for this run: they
                         * wait behind the reserved one (O(depth), not O(queue)) */
                        if (!s->cfg.backfill) {
                                set_reason(s, t, R_HOL, resv->id, 0);
                                break;
                        }
                        if (examined++ >= s->cfg.backfill_depth) {
                                set_reason(s, t, R_DEPTH, s->cfg.backfill_depth, 0);
                                break;
                        }
                        if (t->timeout_ms == 0 && t->q > resv->q && !guaranteed) {
                                set_reason(s, t, R_BEHIND_HIGHER, resv->id, resv->prio);
                                continue;
                        }
                        avoid = !(t->timeout_ms > 0 && shadow != TIME_INF && now + t->timeout_ms <= shadow);
                }
                fit f;
                bool known_fail = memo_fails(s, &memo, t, avoid);
                bool placed = !known_fail && place(s, t, avoid, &f);
                if (placed) {
                        /* on a smaller GPU a shared task holds a larger share */
                        int64_t sh = fit_share(s, t, f.gpus, f.n);
                        if (sh > lb && (g = gate(s, t, sh, &a1, &a2, &a3))) {
                                hold(s, t, g, a1, a2, a3);
                                continue;
                        }
                }
                /* elastic tasks give back grown GPUs before anything is
                 * preempted or reserved: for the task whose turn it is,
                 * and for one that may reclaim behind the reservation */
                bool may_reclaim = preempt_on && resv && guaranteed && T->reclaim_stamp != s->stamp;
                if (!placed && s->nel && (!resv || may_reclaim)) {
                        int pr = shrink_for(s, t, now, avoid, &f, ret, ret_n, ret_cap);
                        if (pr < 0)
                                return pr;
                        if (pr > 0) {
                                memo = (fail_memo){.shared_mem = {-1, -1}};
                                walk_refresh(s, &w);
                                known_fail = false;
                                placed = true;
                        }
                }
                if (!placed && preempt_on && (!resv || may_reclaim)) {
                        int pr = make_room(s, t, now, resv != NULL, avoid, ret, ret_n, ret_cap);
                        if (pr < 0)
                                return pr;
                        if (pr == 0 && resv)
                                T->reclaim_stamp = s->stamp; /* no more tries for it in this run */
                        if (pr > 0) {
                                /* GPUs were freed and shares dropped */
                                memo = (fail_memo){.shared_mem = {-1, -1}};
                                walk_refresh(s, &w);
                                known_fail = false;
                                placed = place(s, t, avoid, &f);
                        }
                }
                if (!placed && !resv && s->cfg.policy == GP_SCHED_LAS && s->cfg.las_preempt) {
                        int pr = las_make_room(s, t, now, ret, ret_n, ret_cap);
                        if (pr < 0)
                                return pr;
                        if (pr > 0) {
                                /* GPUs were freed, so remembered failures no longer
                                 * hold; the victims went to later queues, which
                                 * this walk has not reached yet (strict order) */
                                memo = (fail_memo){.shared_mem = {-1, -1}};
                                for (int j = ti + 1; j < GP_PRIORITY_LEVELS; j++)
                                        w.cur[j] = s->tiers[j].head;
                                known_fail = false;
                                placed = place(s, t, false, &f);
                        }
                }
                if (placed) {
                        fits = (fit_memo){.shared_mem = -1}; /* GPUs are taken now */
                        queue_del(s, t);
                        if ((rc = start_on(s, t, f.gpus, f.n, now, -1)) < 0) {
                                if (queue_add(s, t) < 0) {
                                        map_del(s, t->id);
                                        task_free(s, t);
                                }
                                return rc;
                        }
                        s->vtime = s->tiers[ti].pass;
                        s->tiers[ti].pass += st[ti];
                        s->total_scheduled++;
                        gp_sched_decision d = {.kind = GP_DECIDE_START, .id = t->id, .n_gpus = f.n,
                                               .backfilled = resv != NULL, .borrowing = t->borrowing};
                        memcpy(d.gpus, f.gpus, (size_t)f.n * sizeof(uint32_t));
                        if (resv)
                                s->total_backfilled++;
                        if ((rc = emit(ret, ret_n, ret_cap, &d)) < 0)
                                return rc;
                        continue;
                }
                if (!known_fail)
                        memo_record(s, &memo, t, avoid);
                if (!resv) {
                        resv = t;
                        diagnose(s, t);
                        t->resv_holder = true;
                        shadow = reserve(s, t, now);
                        s->last_resv_id = t->id;
                        s->last_shadow_ms = shadow;
                        continue;
                }
                /* would it fit if it could use the reserved GPUs? */
                bool fits_resv = false;
                if (avoid && !memo_fails(s, &memo, t, false)) {
                        fits_resv = fit_memo_fits(s, &fits, t) || place(s, t, false, &f);
                        if (fits_resv)
                                fit_memo_record(s, &fits, t);
                }
                if (fits_resv)
                        set_reason(s, t, R_WOULD_DELAY, resv->id,
                                   shadow == TIME_INF ? -1 : (shadow - now + 999) / 1000);
                else if (t->excl)
                        set_reason(s, t, R_NO_WHOLE, t->ngpus, -1);
                else if (t->ngpus == 1 && t->model && s->cfg.max_models_per_gpu > 0)
                        diagnose(s, t); /* memory or models: a scan tells which */
                else if (t->ngpus == 1)
                        set_reason(s, t, R_NO_MEM, t->mem, -1);
                else
                        set_reason(s, t, R_GANG_SHARED, t->ngpus, t->mem);
        }
        /* elastic tasks grow if no task that may start is left waiting
         * (the reservation too may be moot: its holder can be held by
         * what started after it in this run) */
        if (s->nel)
                return grow_all(s, now, ret, ret_n, ret_cap);
        return 0;
}

int64_t gp_sched_next_deadline(const gp_sched *s) {
        /* stale heap entries only make this early, never late */
        return s->heap_n ? s->heap[0].deadline : INT64_MAX;
}

int64_t gp_sched_next_wakeup(const gp_sched *s, int64_t now) {
        int64_t w = gp_sched_next_deadline(s);
        if (s->cfg.policy != GP_SCHED_LAS && s->cfg.preemption && s->npre) {
                /* a waiting task may preempt once a task passes its least
                 * run time: a task less urgent than the most urgent waiting
                 * one, or any while a tenant below its guarantee waits */
                int qmin = -1;
                for (int i = 0; i < GP_PRIORITY_LEVELS && qmin < 0; i++)
                        if (s->tiers[i].n)
                                qmin = i;
                bool reclaim = false;
                for (uint32_t ti = 0; qmin >= 0 && ti < s->tn_cap && !reclaim; ti++)
                        reclaim = s->tn[ti].queued && s->tn[ti].guar_milli > s->tn[ti].run_milli;
                for (uint32_t gi = 0; qmin >= 0 && gi < s->ngpus; gi++) {
                        const sgpu *g = &s->gpus[gi];
                        for (int k = 0; k < g->ntasks; k++) {
                                const stask *v = g->tasks[k];
                                bool cand = v->preemptible ? v->prio > qmin || reclaim : v->borrowing && reclaim;
                                if (v->gpus[0] != gi || !cand)
                                        continue;
                                int64_t at = v->start_ms + s->cfg.preempt_min_runtime_ms;
                                if (at > now && at < w)
                                        w = at;
                        }
                }
                return w;
        }
        if (s->cfg.policy != GP_SCHED_LAS || !s->cfg.las_preempt)
                return w;
        int qmin = -1;
        for (int i = 0; i < GP_PRIORITY_LEVELS && qmin < 0; i++)
                if (s->tiers[i].n)
                        qmin = i;
        if (qmin < 0 || qmin >= s->cfg.las_levels - 1)
                return w; /* nothing waits, or nothing can be in a later queue */
        /* when does a running task first become a victim for queue qmin? */
        for (uint32_t gi = 0; gi < s->ngpus; gi++) {
                const sgpu *g = &s->gpus[gi];
                for (int k = 0; k < g->ntasks; k++) {
                        const stask *v = g->tasks[k];
                        if (v->gpus[0] != gi || !v->preemptible)
                                continue; /* each task once, by its first GPU */
                        int64_t at = v->start_ms + s->cfg.las_min_run_ms;
                        if (las_level(s, attained_at(v, now)) <= qmin) {
                                int64_t need = s->cfg.las_thresholds_ms[qmin] - v->attained;
                                int64_t tc = v->seg_ms + (need + v->ngpus - 1) / v->ngpus;
                                if (tc > at)
                                        at = tc;
                        }
                        if (at > now && at < w)
                                w = at;
                }
        }
        return w;
}

/* Could a run at now decide anything that the GPUs' state alone does not
 * rule out?  False only when no deadline is due, preemption (tiers,
 * guarantees, LAS) has nothing to act on and no elastic task runs. */
static bool run_may_act(const gp_sched *s, int64_t now) {
        if (s->heap_n && s->heap[0].deadline <= now) /* stale entries: only "yes" more often */
                return true;
        if (s->nel)
                return true;
        if (s->cfg.policy == GP_SCHED_LAS)
                return s->cfg.las_preempt && s->running > 0;
        if (!s->cfg.preemption || !s->npre)
                return false;
        /* make_room: with no guarantee anywhere nothing is reclaimed, and
         * a task preempts only preemptible tasks less urgent than itself */
        if (s->n_guar)
                return true;
        int qmin = -1;
        for (int i = 0; i < GP_PRIORITY_LEVELS && qmin < 0; i++)
                if (s->tiers[i].n)
                        qmin = i;
        if (qmin < 0)
                return false;
        for (uint32_t gi = 0; gi < s->ngpus; gi++) {
                const sgpu *g = &s->gpus[gi];
                for (int k = 0; k < g->ntasks; k++)
                        if (g->tasks[k]->preemptible && g->tasks[k]->prio > qmin)
                                return true;
        }
        return false;
}

/* No GPU could take any task: every usable GPU is held whole (no idle GPU,
 * none shared). */
static bool no_gpu_free(const gp_sched *s) {
        for (int k = 1; k <= s->max_idle && k <= MAX_NODE_GPUS; k++)
                if (s->idle_lists[k] != NIL)
                        return false;
        for (int k = 0; k < s->nkinds; k++)
                for (int b = 0; b < NBUCKETS; b++)
                        if (s->buckets[k][b] != NIL)
                                return false;
        return true;
}

typedef struct tkey {
        uint8_t cls;
        double then, now;
} tkey;

static int cmp_tkey(const void *a, const void *b) {
        const tkey *x = a, *y = b;
        if (x->cls != y->cls)
                return x->cls < y->cls ? -1 : 1;
        return x->then < y->then ? -1 : x->then > y->then;
}

/* Does every tier order its tenants the same at now as at the last run?
 * The walk of a fair policy merges the tenants' lists by (class, usage per
 * weight), ties by task id; classes do not change with time, usage
 * decays: the merge is the same when every pair of tenants of one class
 * compares the same way (<, = or >) at both times.  Sorted by the old key,
 * that is: equal old keys stay equal, increasing ones stay increasing. */
static bool fair_order_kept(const gp_sched *s, int64_t now) {
        if (!fair_policy(s))
                return true;
        tkey k[64];
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                const tier *tr = &s->tiers[i];
                if (tr->nact < 2)
                        continue;
                if (tr->nact > 64)
                        return false; /* bounded work; just run */
                for (uint32_t j = 0; j < tr->nact; j++) {
                        const stenant *T = &s->tn[tr->act[j]];
                        /* the formula of tenant_key, bit for bit */
                        k[j] = (tkey){.cls = tenant_class(s, T),
                                      .then = usage_at(s, T, s->last_run_ms) / T->weight,
                                      .now = usage_at(s, T, now) / T->weight};
                }
                qsort(k, tr->nact, sizeof(k[0]), cmp_tkey);
                for (uint32_t j = 1; j < tr->nact; j++) {
                        if (k[j].cls != k[j - 1].cls)
                                continue;
                        if (k[j].then == k[j - 1].then ? k[j].now != k[j - 1].now : !(k[j - 1].now < k[j].now))
                                return false;
                }
        }
        return true;
}

bool gp_sched_run_idle(const gp_sched *s, int64_t now_ms, bool unchanged) {
        if (run_may_act(s, now_ms))
                return false;
        if (no_gpu_free(s))
                return true;
        /* the same inputs as the last run, which decided nothing: the same
         * walk, unless time changes it (time limits move the reservation's
         * horizon and what may backfill before it; decay moves the order) */
        return unchanged && s->last_run_stamp && s->ntimed == 0 && now_ms >= s->last_run_ms &&
               fair_order_kept(s, now_ms);
}

/* ------------------------------------------------------------------ */
/* views                                                               */

static void compute_positions(gp_sched *s) {
        if (s->pos_gen == s->gen + 1)
                return;
        stask *cur[GP_PRIORITY_LEVELS];
        uint64_t lp[GP_PRIORITY_LEVELS];
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                cur[i] = s->tiers[i].head;
                lp[i] = s->tiers[i].pass;
        }
        uint32_t pos = 0;
        for (;;) {
                int ti = pick_tier(s, cur, lp);
                if (ti < 0)
                        break;
                cur[ti]->pos = ++pos;
                cur[ti] = cur[ti]->next;
                lp[ti] += stride(s, ti);
        }
        s->pos_gen = s->gen + 1;
}

/* Position of a queued task without walking the queue.  Stride scheduling
 * gives tier j's m-th task (0-based) the virtual time pass_j + m*stride_j;
 * the dispatch order merges tiers by (virtual time, tier index), so the
 * tasks ahead of t (k-th in tier i, at time V) are, per other tier, those
 * with an earlier time (or an equal one in a lower tier), capped at the
 * tier's length.  Exactly the order compute_positions() simulates. */
/* Under hybrid and strict, tasks ahead of t inside its tier: those of
 * tenants that go before t's (class, then usage/weight), and of tenants
 * that tie with it those with a lower id (the walk merges ties by id).
 * O(tenants queued in the tier x log n). */
static uint64_t fair_rank(gp_sched *s, const stask *t) {
        stenant *T = &s->tn[t->tenant];
        int i = t->q;
        uint8_t c = tenant_class(s, T);
        double key = tenant_key(s, T);
        uint64_t ahead = tl_fen_sum(&T->q[i], t->tl_idx);
        const tier *tr = &s->tiers[i];
        for (uint32_t j = 0; j < tr->nact; j++) {
                if (tr->act[j] == t->tenant)
                        continue;
                stenant *U = &s->tn[tr->act[j]];
                uint8_t cu = tenant_class(s, U);
                if (cu > c)
                        continue;
                if (cu < c) {
                        ahead += U->q[i].n;
                        continue;
                }
                double ku = tenant_key(s, U);
                if (ku < key)
                        ahead += U->q[i].n;
                else if (ku == key)
                        ahead += tl_below(&U->q[i], t->id);
        }
        return ahead;
}

static uint32_t position_of(gp_sched *s, const stask *t) {
        const tier *q = &s->tiers[t->q];
        uint64_t k = fair_policy(s) ? fair_rank(s, t) : fen_sum(q, t->seq - 1);
        int i = t->q;
        if (s->cfg.policy == GP_SCHED_STRICT || s->cfg.policy == GP_SCHED_LAS) {
                uint64_t ahead = k;
                for (int j = 0; j < i; j++)
                        ahead += s->tiers[j].n;
                return (uint32_t)(ahead + 1);
        }
        /* hybrid */
        if (i == 0)
                return (uint32_t)(k + 1);
        uint64_t ahead = s->tiers[0].n + k;
        uint64_t V = q->pass + k * stride(s, i);
        for (int j = 1; j < GP_PRIORITY_LEVELS; j++) {
                const tier *o = &s->tiers[j];
                if (j == i || o->n == 0)
                        continue;
                uint64_t sj = stride(s, j), cnt;
                if (j < i)
                        cnt = V >= o->pass ? (V - o->pass) / sj + 1 : 0;
                else
                        cnt = V > o->pass ? (V - o->pass - 1) / sj + 1 : 0;
                ahead += cnt < o->n ? cnt : o->n;
        }
        return (uint32_t)(ahead + 1);
}

int gp_sched_task_get(gp_sched *s, int64_t id, gp_sched_task_view *ret) {
        stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        gp_sched_task_view v = {.id = t->id, .running = t->running, .priority = t->prio,
                                .borrowing = t->running && t->borrowing};
        if (t->running) {
                v.n_gpus = t->ngpus;
                memcpy(v.gpus, t->gpus, t->ngpus * sizeof(uint32_t));
                v.start_ms = t->start_ms;
                v.gpus_milli = t->share;
        } else if (s->cfg.policy == GP_SCHED_FIFO) {
                compute_positions(s);
                v.queue_position = (int)t->pos;
        } else {
                v.queue_position = (int)position_of(s, t);
        }
        *ret = v;
        return 0;
}

size_t gp_sched_queue_order(gp_sched *s, int64_t *ids, size_t max) {
        walk w;
        uint64_t lp[GP_PRIORITY_LEVELS];
        size_t total = 0;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                lp[i] = s->tiers[i].pass;
                total += s->tiers[i].n;
        }
        if (max == 0 || walk_init(s, &w, false) < 0)
                return total; /* out of memory: no ids */
        size_t k = 0;
        while (k < max) {
                int ti = pick_tier(s, w.cur, lp);
                if (ti < 0)
                        break;
                ids[k++] = w.cur[ti]->id;
                walk_advance(s, &w, ti);
                lp[ti] += stride(s, ti);
        }
        return total;
}

static void fmt_need(const stask *t, char *buf, size_t size) {
        if (t->excl)
                snprintf(buf, size, "%d whole GPU%s", t->ngpus, t->ngpus > 1 ? "s" : "");
        else
                snprintf(buf, size, "%d GPU%s with %" PRId64 " MB free", t->ngpus, t->ngpus > 1 ? "s" : "",
                         t->mem);
}

/* milli-GPUs as GPUs: "8", "7.5", "0.182"; with `point` at least one
 * decimal ("8.0"). */
static void fmt_milli(char *buf, size_t size, int64_t v, bool point) {
        if (v < 0)
                v = 0;
        int64_t frac = v % 1000;
        if (frac == 0) {
                snprintf(buf, size, point ? "%" PRId64 ".0" : "%" PRId64, v / 1000);
                return;
        }
        char f[8];
        snprintf(f, sizeof(f), "%03" PRId64, frac);
        for (int i = 2; i > 0 && f[i] == '0'; i--)
                f[i] = '\0';
        snprintf(buf, size, "%" PRId64 ".%s", v / 1000, f);
}

/* The reason of a task held by its tenant's quota or its group's share. */
static void rule_reason(const gp_sched *s, const stask *t, int code, int64_t a1, int64_t a2, int64_t a3, char *buf,
                        size_t size) {
        const char *tn = intern_name(&s->tenants, t->tenant);
        if (!*tn)
                tn = "(none)";
        char used[32], max[32], need[32];
        switch (code) {
        case R_QUOTA_TASKS:
                snprintf(buf, size, "tenant %s quota: %" PRId64 " of %" PRId64 " tasks running", tn, a1, a2);
                break;
        case R_QUOTA_GPUS:
                fmt_milli(used, sizeof(used), a1, true);
                fmt_milli(max, sizeof(max), a2, false);
                fmt_milli(need, sizeof(need), a3, true);
                if (a3 > a2)
                        snprintf(buf, size, "tenant %s quota: this task needs %s GPUs, more than its max of %s", tn,
                                 need, max);
                else if (a1 >= a2)
                        snprintf(buf, size, "tenant %s quota: %s of %s GPUs in use", tn, used, max);
                else
                        snprintf(buf, size, "tenant %s quota: %s of %s GPUs in use, this task needs %s", tn, used,
                                 max, need);
                break;
        default:
                snprintf(buf, size, "group %s is at its %" PRId64 "%% share", intern_name(&s->groups, (uint32_t)a1),
                         a2);
                break;
        }
}

int gp_sched_task_reason(gp_sched *s, int64_t id, char *buf, size_t size) {
        stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        if (size)
                buf[0] = '\0';
        if (t->running)
                return 0;
        char need[96];
        fmt_need(t, need, sizeof(need));
        const char *kindtxt = t->gpu_model ? t->gpu_model : NULL;
        int code = t->rstamp == s->last_run_stamp ? t->rcode : R_NONE;
        int64_t a1 = t->ra1, a2 = t->ra2, a3 = t->ra3;
        if (code == R_NONE && array_full(t)) {
                code = R_ARRAY;
                a1 = t->arr->id;
                a2 = t->arr->limit;
        }
        if (code == R_NONE) /* not examined by the last run: its rules as they are now */
                code = gate(s, t, share_lb(s, t), &a1, &a2, &a3);
        if (code == R_ARRAY) {
                snprintf(buf, size, "array %" PRId64 " runs %" PRId64 " at once (%%%" PRId64 ")", a1, a2, a2);
                return 0;
        }
        if (code == R_QUOTA_TASKS || code == R_QUOTA_GPUS || code == R_GROUP) {
                rule_reason(s, t, code, a1, a2, a3, buf, size);
                return 0;
        }
        char extra[64] = "";
        if (kindtxt)
                snprintf(extra, sizeof(extra), " matching '%s'", kindtxt);
        switch (code) {
        case R_NO_MEM:
                if (t->ra2 >= 0)
                        snprintf(buf, size, "no GPU%s has %" PRId64 " MB free (most free: %" PRId64 " MB)", extra,
                                 t->ra1, t->ra2);
                else
                        snprintf(buf, size, "no GPU%s has %" PRId64 " MB free", extra, t->ra1);
                break;
        case R_NO_WHOLE:
                if (t->ngpus == 1)
                        snprintf(buf, size, "no whole GPU%s is free", extra);
                else if (t->ra2 >= 0)
                        snprintf(buf, size,
                                 "waiting for a gang of %d whole GPUs%s on one node (most free on one node: %" PRId64
                                 ")",
                                 t->ngpus, extra, t->ra2);
                else
                        snprintf(buf, size, "waiting for a gang of %d whole GPUs%s on one node", t->ngpus, extra);
                break;
        case R_MODELS:
                snprintf(buf, size, "every GPU%s that fits holds %" PRId64 " models (max_models_per_gpu)", extra,
                         t->ra1);
                break;
        case R_GANG_SHARED:
                snprintf(buf, size, "waiting for a gang of %d GPUs%s with %" PRId64 " MB free each on one node",
                         (int)t->ra1, extra, t->ra2);
                break;
        case R_NO_USABLE:
                snprintf(buf, size, "every GPU%s is drained, unhealthy or reserved", extra);
                break;
        case R_BEHIND_HIGHER:
                snprintf(buf, size,
                         "waiting behind task %" PRId64 " (P%" PRId64
                         "), which is next in line for GPUs; set timeout_s to let it backfill",
                         t->ra1, t->ra2);
                break;
        case R_WOULD_DELAY:
                if (t->ra2 >= 0)
                        snprintf(buf, size,
                                 "fits only on GPUs reserved for task %" PRId64 "; backfill needs timeout_s <= %" PRId64
                                 " s",
                                 t->ra1, t->ra2);
                else
                        snprintf(buf, size,
                                 "fits only on GPUs reserved for task %" PRId64
                                 ", whose start time is unknown",
                                 t->ra1);
                break;
        case R_DEPTH:
                snprintf(buf, size, "waiting: more than %" PRId64 " tasks ahead are examined first", t->ra1);
                break;
        case R_HOL:
                snprintf(buf, size, "waiting behind task %" PRId64 " (backfill is off)", t->ra1);
                break;
        default:
                if (s->last_resv_id && s->last_resv_id != t->id)
                        snprintf(buf, size, "waiting behind task %" PRId64 ", which is next in line for GPUs",
                                 s->last_resv_id);
                else
                        snprintf(buf, size, "waiting to be scheduled (needs %s)", need);
                return 0;
        }
        if (t->resv_holder && code != R_NONE) {
                size_t l = strlen(buf);
                if (l + 40 < size)
                        snprintf(buf + l, size - l, "; next in line, GPUs reserved");
        }
        return 0;
}

void gp_sched_get_stats(const gp_sched *s, gp_sched_stats *ret) {
        gp_sched_stats st = {0};
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                st.queued[i] = s->tiers[i].n;
                st.queued_total += s->tiers[i].n;
        }
        st.running = s->running;
        st.total_scheduled = s->total_scheduled;
        st.total_backfilled = s->total_backfilled;
        st.total_expired = s->total_expired;
        st.total_preempted = s->total_preempted;
        st.gpus_total = s->ngpus;
        for (uint32_t i = 0; i < s->ngpus; i++) {
                const sgpu *g = &s->gpus[i];
                if (gpu_usable(g)) {
                        st.gpus_usable++;
                        st.memory_usable_mb += g->usable;
                }
                if (g->ntasks > 0)
                        st.gpus_busy++;
                st.memory_allocated_mb += g->alloc;
        }
        *ret = st;
}

/* ------------------------------------------------------------------ */
/* tenants and groups: settings and usage                              */

static bool name_ok(const char *n, bool empty_ok) {
        if (!n || !*n)
                return empty_ok;
        return strnlen(n, NAME_MAX_LEN + 1) <= NAME_MAX_LEN;
}

int gp_sched_tenant_set(gp_sched *s, const char *tenant, const gp_sched_tenant_cfg *cfg) {
        if (!name_ok(tenant, false) || !cfg || !name_ok(cfg->group, true) || cfg->weight > WEIGHT_MAX ||
            !gp_quota_nonneg(&cfg->quota))
                return -EINVAL;
        uint32_t tid, gid;
        if (intern_get(&s->tenants, tenant, &tid) < 0 || tenant_ensure(s, tid) < 0 ||
            intern_get(&s->groups, cfg->group, &gid) < 0 || group_ensure(s, gid) < 0)
                return -ENOMEM;
        stenant *T = &s->tn[tid];
        tenant_out(s, T);
        T->weight = cfg->weight ? cfg->weight : 1;
        T->group = gid;
        T->max_concurrent = cfg->quota.max_concurrent;
        T->max_milli = cfg->quota.max_gpus_milli;
        s->n_guar += (cfg->quota.guaranteed_gpus_milli > 0) - (T->guar_milli > 0);
        T->guar_milli = cfg->quota.guaranteed_gpus_milli;
        T->max_queued = cfg->quota.max_queued;
        tenant_in(s, T);
        s->gen++;
        return 0;
}

int gp_sched_group_set(gp_sched *s, const char *group, uint32_t share_pct) {
        if (!name_ok(group, false) || share_pct < 1 || share_pct > 100)
                return -EINVAL;
        uint32_t gid;
        if (intern_get(&s->groups, group, &gid) < 0 || group_ensure(s, gid) < 0)
                return -ENOMEM;
        s->gr[gid].share_pct = share_pct;
        group_refresh(s, gid);
        s->gen++;
        return 0;
}

int gp_sched_tenant_usage(gp_sched *s, const char *tenant, int64_t now_ms, struct gp_sched_tenant_usage *ret) {
        uint32_t tid;
        if (intern_find(&s->tenants, tenant, &tid) < 0 || tid >= s->tn_cap)
                return -ENOENT;
        const stenant *T = &s->tn[tid];
        *ret = (gp_sched_tenant_view){.running = T->running, .queued = T->queued, .gpus_milli = T->run_milli,
                                       .fair_share_usage = usage_at(s, T, now_ms) / 1e6};
        return 0;
}

int gp_sched_tenant_set_usage(gp_sched *s, const char *tenant, int64_t now_ms, double gpu_seconds) {
        if (!name_ok(tenant, false) || !(gpu_seconds >= 0) || gpu_seconds > 1e15)
                return -EINVAL;
        uint32_t tid;
        if (intern_get(&s->tenants, tenant, &tid) < 0 || tenant_ensure(s, tid) < 0)
                return -ENOMEM;
        stenant *T = &s->tn[tid];
        tenant_out(s, T);
        T->usage = gpu_seconds * 1e6;
        T->usage_ms = now_ms;
        tenant_in(s, T);
        s->gen++;
        return 0;
}

int gp_sched_group_usage(gp_sched *s, const char *group, struct gp_sched_group_usage *ret) {
        uint32_t gid;
        if (!group || !*group || intern_find(&s->groups, group, &gid) < 0 || gid >= s->gr_cap)
                return -ENOENT;
        const sgroup *g = &s->gr[gid];
        *ret = (gp_sched_group_view){.queued = g->queued, .gpus_milli = g->run_milli,
                                      .share_milli = group_cap(s, g), .share_pct = g->share_pct};
        return 0;
}
