/* sched-resv.c - the reservation for the blocked task (EASY backfill):
 * the GPUs it will start on first, marked for the run, and when.
 *
 * A run that ends blocked asks this once, and with every GPU busy it is
 * asked after every task end.  Working it out reads every GPU of the pool
 * (and every task on a shared one), so at 100,000 GPUs it cost ~8 ms a
 * run.  Most of that answer does not change from one run to the next: a
 * node's GPUs' ready times depend on what runs there, not on the clock.
 * So the answer of each node for a request shape is kept (resv_cache: up
 * to RESV_SHAPES shapes, least recently used replaced) and made again
 * only for the nodes touched since (s->nmod, bumped by every change of a
 * node's GPUs, labels or rules: node_touch, which logs the node in
 * s->tlog so that no pass over the nodes finds them); the node is found
 * down a min-tree per gang size over the answers (index_choice), built
 * when a blocked task of that size first asks.  A shape asked for the
 * first time lays out every node's answer; it reads each GPU's ends and
 * the memory they free (gready, kept per GPU for every shape), not the
 * GPU's tasks.  The choice is the same as
 * a full scan's, ties included (tests/unit/test-sched-resv.c checks it
 * against one on random workloads). */
#include "core/sched-int.h"

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

/* When GPU g could host t, from the running tasks' end bounds, not yet
 * clamped to the clock: INT64_MIN when it can now whatever the time,
 * TIME_INF when a task in the way has no bound.  The time it could host t
 * at `now` is the later of the two (gpu_ready_at); keeping the clock out
 * is what lets a node's answer be kept from run to run. */
__attribute__((always_inline)) static inline int64_t gpu_ready_raw(const gp_sched *s, const sgpu *g,
                                                                   const stask *t) {
        /* full of other models: free for t at the latest when all on it ended */
        if (t->excl || g->excl || models_full(s, t, g)) {
                int64_t m = INT64_MIN;
                for (int i = 0; i < g->ntasks; i++)
                        if (task_end(g->tasks[i]) > m)
                                m = task_end(g->tasks[i]);
                return m;
        }
        if (gpu_free(g) >= t->mem)
                return INT64_MIN;
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
                        return task_end(sorted[i]);
        }
        return TIME_INF;
}

/* ------------------------------------------------------------------ */
/* per GPU: its tasks' ends, for every request shape                  */

/* What gpu_ready_raw reads of a GPU's tasks: their ends in order and the
 * memory free once each has passed.  A request shape the reservation has
 * not seen lays out every node's answer (12,500 nodes at 100,000 GPUs),
 * and reading every GPU's tasks for it cost ~20 ms at 1,000,000 queued
 * (a cache miss a task); this is made once per change of the GPU's node
 * (s->nmod) and read by every shape.  Per GPU 32 bytes (s->gready) hold
 * one end; a GPU with more has its ends in s->gends (given at the first
 * make that needs it, kept since), and one with more distinct ends than
 * GREADY_N is read from its tasks as before (over). */
#define GREADY_N 12                /* in bench-core's mixed pool 1 shared GPU in 1,000 has more */
typedef struct gends {
        int64_t end[GREADY_N];     /* the tasks' ends, ascending, ties merged */
        int32_t charge[GREADY_N];  /* MB charged by the tasks ended by end[i] (64 tasks at most,
                                      each under INT32_MAX / 64) */
} gends;

typedef struct gready {
        uint32_t node, seen;       /* made for this node at this s->nmod (node NIL: never) */
        uint32_t more;             /* 1 + its index in s->gends, 0 = none */
        uint8_t n;                 /* distinct ends */
        bool over;                 /* more of them (or over 64 tasks): read the tasks */
        int32_t charge1;           /* n == 1: the charge of the tasks ending at end1 */
        int64_t end1;              /* n == 1: their end */
} gready;

static int gready_ready(gp_sched *s) {
        if (s->gready_cap >= s->ngpus)
                return 0;
        uint32_t old = s->gready_cap;
        gready *v = grow(s->gready, sizeof(*v), &s->gready_cap, s->ngpus);
        if (!v)
                return -ENOMEM;
        for (uint32_t i = old; i < s->gready_cap; i++)
                v[i] = (gready){.node = NIL}; /* made at first read */
        s->gready = v;
        return 0;
}

/* r's ends and charges: inline for one end, else its gends */
static const int64_t *gready_end(const gp_sched *s, const gready *r) {
        return r->n > 1 ? s->gends[r->more - 1].end : &r->end1;
}

static const int32_t *gready_charge(const gp_sched *s, const gready *r) {
        return r->n > 1 ? s->gends[r->more - 1].charge : &r->charge1;
}

static void gready_make(gp_sched *s, const sgpu *g, gready *r) {
        PH_COUNT(PH_GREADY_MAKE);
        int64_t end[GREADY_N];
        int32_t charge[GREADY_N];
        int n = 0;
        bool over = g->ntasks > 64;
        for (int i = 0; i < g->ntasks && !over; i++) {
                const stask *x = g->tasks[i];
                if (x->charge > INT32_MAX / 64) {
                        over = true; /* a GPU of petabytes: its sums would not fit */
                        break;
                }
                int64_t e = task_end(x);
                int32_t c = (int32_t)x->charge;
                int j = n;
                while (j > 0 && end[j - 1] > e)
                        j--;
                if (j > 0 && end[j - 1] == e) {
                        charge[j - 1] += c;
                        continue;
                }
                if (n == GREADY_N) {
                        over = true;
                        break;
                }
                for (int k = n; k > j; k--) {
                        end[k] = end[k - 1];
                        charge[k] = charge[k - 1];
                }
                end[j] = e;
                charge[j] = c;
                n++;
        }
        for (int j = 1; j < n; j++)
                charge[j] += charge[j - 1];
        if (!over && n > 1 && !r->more) {
                if (s->gends_n == s->gends_cap) {
                        gends *v = grow(s->gends, sizeof(*v), &s->gends_cap, s->gends_n + 1);
                        if (v)
                                s->gends = v;
                }
                if (s->gends_n < s->gends_cap)
                        r->more = ++s->gends_n;
                else
                        over = true; /* no memory: read from the tasks */
        }
        r->node = g->node;
        r->seen = s->nmod[g->node];
        r->n = (uint8_t)(over ? 0 : n);
        r->over = over;
        if (over || n == 0)
                return;
        if (n == 1) {
                r->end1 = end[0];
                r->charge1 = charge[0];
                return;
        }
        gends *m = &s->gends[r->more - 1];
        memcpy(m->end, end, (size_t)n * sizeof(end[0]));
        memcpy(m->charge, charge, (size_t)n * sizeof(charge[0]));
}

/* gpu_ready_raw of GPU gi for t, from its gready (the same answer: the
 * first end by which enough memory is free is the same whichever of the
 * tasks ending then is counted first). */
static int64_t gready_raw(gp_sched *s, uint32_t gi, const stask *t) {
        const sgpu *g = &s->gpus[gi];
        bool whole = t->excl || g->excl || models_full(s, t, g);
        int64_t free_mb = gpu_free(g);
        if (g->ntasks == 0 || (!whole && free_mb >= t->mem))
                return INT64_MIN; /* free for t now: no task is read */
        gready *r = &s->gready[gi];
        if (r->node != g->node || r->seen != s->nmod[g->node])
                gready_make(s, g, r);
        if (r->over)
                return gpu_ready_raw(s, g, t);
        const int64_t *end = gready_end(s, r);
        if (whole)
                return end[r->n - 1];
        const int32_t *charge = gready_charge(s, r);
        for (int i = 0; i < r->n; i++)
                if (free_mb + charge[i] >= t->mem)
                        return end[i];
        return TIME_INF;
}

static inline int64_t gpu_ready_at(const gp_sched *s, const sgpu *g, const stask *t, int64_t now) {
        int64_t r = gpu_ready_raw(s, g, t);
        return r > now ? r : now;
}

/* A walk over the leaves of a min-tree (tree[1] the root, leaf P + ni for
 * node ni) whose key is at most cut, in node order: down the subtrees whose
 * least key is at most cut, left first, on a stack as deep as the tree. */
typedef struct leaf_walk {
        uint32_t st[64];
        int sp;
} leaf_walk;

static void leaves_start(leaf_walk *w, const uint64_t *tr, uint64_t cut) {
        w->sp = 0;
        if (tr[1] <= cut)
                w->st[w->sp++] = 1;
}

/* The next such node, NIL when none is left. */
static uint32_t leaves_next(leaf_walk *w, const uint64_t *tr, uint32_t P, uint64_t cut) {
        while (w->sp) {
                uint32_t i = w->st[--w->sp];
                if (tr[i] > cut)
                        continue;
                if (i >= P)
                        return i - P;
                w->st[w->sp++] = 2 * i + 1; /* right after left: node order */
                w->st[w->sp++] = 2 * i;
        }
        return NIL;
}

/* ------------------------------------------------------------------ */
/* multi-node tasks: when each node is wholly free                    */

/* A multi-node task takes nodes whole, on whole GPUs (t->excl), so a
 * node's answer is the same for every such task: the last end of a task on
 * the GPUs it would hold (those not removed or reserved), TIME_INF when one
 * of them is not usable, INT64_MIN when none runs a task.  Which nodes a
 * task may take (whole_node_ok) is read when it asks.  So one answer per
 * node, made again when the node changed (s->nmod, as the shapes'
 * answers), and a min-tree over them: the reservation reads the nodes free
 * first, not every GPU (the scan it replaces cost ~1.7 ms a run at 100,000
 * GPUs while a gang of two nodes waited). */
struct multi_cache {
        uint32_t node_gen;         /* s->node_gen when laid out */
        uint32_t nnodes, P;        /* P: leaves of the tree, a power of two >= nnodes */
        uint32_t *seen;            /* per node: s->nmod[ni] its answer is of */
        int64_t *raw;              /* per node: its answer */
        uint64_t *tree;            /* the least raw (order-keeping unsigned) below; tree[1] the
                                      root, leaf P + ni; UINT64_MAX past nnodes */
        uint32_t *pick;            /* scratch: the nodes chosen (nnodes) */
        struct mheap *heap;        /* scratch: subtrees by (least raw, first leaf), P entries at most */
        uint64_t tlog_seen;        /* s->tlog_n when every answer was last made current */
        bool stale;                /* laid out since: every answer is to be made */
};

/* a subtree of the tree (index i), by its least answer, then its first node */
struct mheap {
        uint64_t key;
        uint32_t i, first;
};

static uint64_t time_key(int64_t t) {
        return (uint64_t)t ^ ((uint64_t)1 << 63);
}

static void multi_free(gp_sched *s) {
        struct multi_cache *c = s->mc;
        if (!c)
                return;
        free(c->seen);
        free(c->raw);
        free(c->tree);
        free(c->pick);
        free(c->heap);
        free(c);
        s->mc = NULL;
}

/* The cache for the nodes as they are (NULL when memory is short). */
static struct multi_cache *multi_for(gp_sched *s) {
        struct multi_cache *c = s->mc;
        if (c && c->node_gen == s->node_gen && c->nnodes == s->nnodes)
                return c;
        multi_free(s);
        uint32_t n = s->nnodes, P = 1;
        while (P < n)
                P *= 2;
        c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        s->mc = c;
        c->seen = malloc(((size_t)n + 1) * sizeof(*c->seen));
        c->raw = malloc(((size_t)n + 1) * sizeof(*c->raw));
        c->tree = malloc(2 * (size_t)P * sizeof(*c->tree));
        c->pick = malloc(((size_t)n + 1) * sizeof(*c->pick));
        c->heap = malloc(((size_t)P + 2) * sizeof(*c->heap));
        if (!c->seen || !c->raw || !c->tree || !c->pick || !c->heap) {
                multi_free(s);
                return NULL;
        }
        for (uint32_t ni = 0; ni < n; ni++)
                c->seen[ni] = s->nmod[ni] - 1; /* made at first use */
        for (uint32_t i = 0; i < 2 * P; i++)
                c->tree[i] = UINT64_MAX;
        c->node_gen = s->node_gen;
        c->nnodes = n;
        c->P = P;
        c->stale = true;
        return c;
}

/* Node ni's answer made again, and its path up the tree (t: any
 * multi-node task; gready_raw reads only that it takes whole GPUs). */
static void multi_fill(gp_sched *s, struct multi_cache *c, const stask *t, uint32_t ni) {
        const snode *nd = &s->nodes[ni];
        int64_t ready = INT64_MIN;
        for (int i = 0; i < nd->ngpus && ready != TIME_INF; i++) {
                const sgpu *g = &s->gpus[nd->gpus[i]];
                if (g->removed || g->reserved)
                        continue;
                int64_t r = gpu_usable(g) ? gready_raw(s, nd->gpus[i], t) : TIME_INF;
                if (r > ready)
                        ready = r;
        }
        c->raw[ni] = ready;
        c->seen[ni] = s->nmod[ni];
        uint64_t *tr = c->tree;
        uint32_t i = c->P + ni;
        tr[i] = time_key(ready);
        for (i >>= 1; i >= 1; i >>= 1) {
                uint64_t m = tr[2 * i] < tr[2 * i + 1] ? tr[2 * i] : tr[2 * i + 1];
                if (tr[i] == m)
                        break;
                tr[i] = m;
        }
}

/* Every answer current: the nodes touched since (s->tlog), or all when the
 * log was overrun or c laid out. */
static void multi_refresh_all(gp_sched *s, struct multi_cache *c, const stask *t) {
        if (c->stale || s->tlog_n - c->tlog_seen > TLOG_CAP) {
                for (uint32_t ni = 0; ni < c->nnodes; ni++)
                        if (c->seen[ni] != s->nmod[ni])
                                multi_fill(s, c, t, ni);
                c->stale = false;
        } else {
                for (uint64_t j = c->tlog_seen; j < s->tlog_n; j++) {
                        uint32_t ni = s->tlog[j & (TLOG_CAP - 1)];
                        if (ni < c->nnodes && c->seen[ni] != s->nmod[ni])
                                multi_fill(s, c, t, ni);
                }
        }
        c->tlog_seen = s->tlog_n;
}

/* The leftmost leaf under tree index i (its first node). */
static uint32_t first_leaf(const struct multi_cache *c, uint32_t i) {
        while (i < c->P)
                i *= 2;
        return i;
}

static bool mheap_less(const struct mheap *a, const struct mheap *b) {
        return a->key != b->key ? a->key < b->key : a->first < b->first;
}

static void mheap_push(struct multi_cache *c, uint32_t *n, uint64_t key, uint32_t i) {
        struct mheap e = {key, i, first_leaf(c, i)};
        uint32_t j = (*n)++;
        while (j > 0 && mheap_less(&e, &c->heap[(j - 1) / 2])) {
                c->heap[j] = c->heap[(j - 1) / 2];
                j = (j - 1) / 2;
        }
        c->heap[j] = e;
}

static struct mheap mheap_pop(struct multi_cache *c, uint32_t *n) {
        struct mheap top = c->heap[0], x = c->heap[--*n];
        uint32_t j = 0;
        for (;;) {
                uint32_t l = 2 * j + 1, m = l;
                if (l >= *n)
                        break;
                if (l + 1 < *n && mheap_less(&c->heap[l + 1], &c->heap[l]))
                        m = l + 1;
                if (!mheap_less(&c->heap[m], &x))
                        break;
                c->heap[j] = c->heap[m];
                j = m;
        }
        c->heap[j] = x;
        return top;
}

/* The multi-node case of reserve(): the nodes t may take whole that will
 * be free first (a node is free when every task on it may have ended; a
 * drained or unhealthy GPU keeps it from being free at a known time), by
 * (that time, no earlier than now; node number), until they hold t's need;
 * every GPU of them is marked.  The nodes free now come first, by number
 * (a walk down the subtrees whose least answer is not after now); then
 * the others by answer and number (the subtrees in a heap by their least
 * answer and first node: a subtree's nodes all come before those of a
 * later one of the same least answer), so the choice is a full sort's. */
__attribute__((noinline)) static int64_t reserve_multi(gp_sched *s, stask *t, int64_t now) {
        struct multi_cache *c = gready_ready(s) < 0 ? NULL : multi_for(s);
        if (!c)
                return TIME_INF; /* no reservation: backfill goes on as if none */
        multi_refresh_all(s, c, t);
        const uint64_t *tr = c->tree;
        uint64_t unow = time_key(now);
        int64_t need = need_units(t), sum = 0, at = TIME_INF;
        uint32_t k = 0;
        /* free now: in node order */
        leaf_walk lw;
        leaves_start(&lw, tr, unow);
        for (uint32_t ni; sum < need && (ni = leaves_next(&lw, tr, c->P, unow)) != NIL;) {
                if (!whole_node_ok(s, t, ni))
                        continue;
                c->pick[k++] = ni;
                sum += node_units(s, t, ni);
                at = now;
        }
        /* then by (answer, node) */
        uint32_t hn = 0;
        if (sum < need)
                mheap_push(c, &hn, tr[1], 1);
        while (hn && sum < need) {
                struct mheap e = mheap_pop(c, &hn);
                if (e.i < c->P) { /* one out, two in: at most P entries */
                        mheap_push(c, &hn, tr[2 * e.i], 2 * e.i);
                        mheap_push(c, &hn, tr[2 * e.i + 1], 2 * e.i + 1);
                        continue;
                }
                uint32_t ni = e.i - c->P;
                if (ni >= c->nnodes || c->raw[ni] <= now || !whole_node_ok(s, t, ni))
                        continue; /* padding, or free now (taken above, or not its) */
                c->pick[k++] = ni;
                sum += node_units(s, t, ni);
                at = c->raw[ni];
        }
        if (sum < need)
                return TIME_INF;
        for (uint32_t j = 0; j < k; j++) {
                const snode *nd = &s->nodes[c->pick[j]];
                for (int i = 0; i < nd->ngpus; i++)
                        s->gpus[nd->gpus[i]].resv_stamp = s->stamp;
        }
        return at;
}

/* ------------------------------------------------------------------ */
/* per-node answers, kept per request shape                           */

/* What a node's answer reads of the blocked task, all but its GPU count
 * (so gangs of 2, 4 and 8 whole GPUs share one). */
typedef struct resv_shape {
        bool excl, elastic;
        int64_t mem;
        uint64_t kinds;
        uint32_t model;
        int nsel;
        uint32_t sel[GP_LABELS_MAX];
} resv_shape;

struct resv_cache {
        resv_shape shape;
        uint32_t node_gen;         /* s->node_gen when laid out (nodes' GPU counts) */
        uint32_t nnodes;
        uint64_t used;             /* s->rc_tick at its last use */
        uint32_t *seen;            /* per node: s->nmod[ni] its answer is of */
        uint32_t *off;             /* per node: its first entry in ent */
        uint16_t *cnt;             /* per node: its GPUs t may wait for, ent[off..off+cnt) sorted
                                      by (raw ready time, GPU) */
        gpu_end *ent;              /* t = gpu_ready_raw */
        uint64_t tlog_seen;        /* s->tlog_n when every node's answer was last made current */
        bool stale;                /* laid out since: every node's answer is to be made */
        uint32_t P;                /* leaves of each tree: a power of two >= nnodes */
        uint64_t *tree[MAX_NODE_GPUS + 1]; /* per GPU count k (NULL: not built): a tree of the
                                      least key_k over nodes, tree[1] the root, leaves at P.. */
        int kmax;                  /* the largest k with a tree (0: none) */
        int cmax;                  /* at least the most GPUs a node's answer holds (cnt) */
};

/* Node ni's key for a task of k GPUs: the raw time its k-th GPU is ready,
 * in an order-keeping unsigned form; UINT64_MAX when it has fewer than k
 * GPUs t may wait for (INT64_MAX, TIME_INF, shares UINT64_MAX - 1 with
 * INT64_MAX - 1: a tie the query breaks on the times themselves). */
static uint64_t node_key(const struct resv_cache *c, uint32_t ni, int k) {
        if (c->cnt[ni] < k)
                return UINT64_MAX;
        uint64_t u = (uint64_t)c->ent[c->off[ni] + (uint32_t)k - 1].t ^ ((uint64_t)1 << 63);
        return u == UINT64_MAX ? UINT64_MAX - 1 : u;
}

static void tree_set(struct resv_cache *c, int k, uint32_t ni) {
        uint64_t *tr = c->tree[k];
        uint32_t i = c->P + ni;
        tr[i] = node_key(c, ni, k);
        for (i >>= 1; i >= 1; i >>= 1) {
                uint64_t m = tr[2 * i] < tr[2 * i + 1] ? tr[2 * i] : tr[2 * i + 1];
                if (tr[i] == m)
                        break;
                tr[i] = m;
        }
}

static void trees_free(struct resv_cache *c) {
        for (int k = 1; k <= c->kmax; k++) {
                free(c->tree[k]);
                c->tree[k] = NULL;
        }
        c->kmax = 0;
}

/* The tree for k, built if it was not (NULL when memory is short). */
static uint64_t *tree_for(struct resv_cache *c, int k) {
        if (c->tree[k])
                return c->tree[k];
        uint64_t *tr = malloc(2 * (size_t)c->P * sizeof(*tr));
        if (!tr)
                return NULL;
        for (uint32_t i = 0; i < c->P; i++)
                tr[c->P + i] = i < c->nnodes ? node_key(c, i, k) : UINT64_MAX;
        for (uint32_t i = c->P; i-- > 1;)
                tr[i] = tr[2 * i] < tr[2 * i + 1] ? tr[2 * i] : tr[2 * i + 1];
        tr[0] = UINT64_MAX;
        if (k > c->kmax)
                c->kmax = k;
        return c->tree[k] = tr;
}

static void shape_of(const stask *t, resv_shape *r) {
        memset(r, 0, sizeof(*r));
        r->excl = t->excl;
        r->elastic = t->nmax != 0;
        r->mem = t->mem;
        r->kinds = t->kinds;
        r->model = t->model;
        r->nsel = t->nsel;
        if (t->nsel > 0)
                memcpy(r->sel, t->sel, (size_t)t->nsel * sizeof(*t->sel));
}

static void cache_arrays_free(struct resv_cache *c) {
        trees_free(c);
        free(c->seen);
        free(c->off);
        free(c->cnt);
        free(c->ent);
}

static void cache_drop(struct resv_cache *c) {
        if (!c)
                return;
        cache_arrays_free(c);
        free(c);
}

SCHED_PRIVATE void resv_free(gp_sched *s) {
        multi_free(s);
        for (int i = 0; i < RESV_SHAPES; i++) {
                cache_drop(s->rc[i]);
                s->rc[i] = NULL;
        }
        free(s->gready);
        free(s->gends);
        s->gready = NULL;
        s->gends = NULL;
        s->gready_cap = s->gends_n = s->gends_cap = 0;
}

/* Lay c out for the nodes as they are (every node's answer to be made). */
static int cache_layout(gp_sched *s, struct resv_cache *c) {
        PH_COUNT(PH_RESV_LAYOUT);
        uint32_t n = s->nnodes;
        size_t total = 0;
        for (uint32_t ni = 0; ni < n; ni++)
                total += (size_t)s->nodes[ni].ngpus;
        uint32_t *seen = malloc(((size_t)n + 1) * sizeof(*seen)), *off = malloc(((size_t)n + 1) * sizeof(*off));
        uint16_t *cnt = malloc(((size_t)n + 1) * sizeof(*cnt));
        gpu_end *ent = malloc((total + 1) * sizeof(*ent));
        if (!seen || !off || !cnt || !ent) {
                free(seen);
                free(off);
                free(cnt);
                free(ent);
                return -ENOMEM;
        }
        size_t o = 0;
        for (uint32_t ni = 0; ni < n; ni++) {
                seen[ni] = s->nmod[ni] - 1; /* made at first use */
                off[ni] = (uint32_t)o;
                cnt[ni] = 0;
                o += (size_t)s->nodes[ni].ngpus;
        }
        cache_arrays_free(c);
        c->seen = seen;
        c->off = off;
        c->cnt = cnt;
        c->ent = ent;
        c->nnodes = n;
        c->node_gen = s->node_gen;
        c->stale = true;
        c->cmax = 0;
        c->P = 1;
        while (c->P < n)
                c->P *= 2;
        return 0;
}

/* The cache for t's shape, laid out for the nodes as they are; NULL when
 * memory is short. */
static struct resv_cache *cache_for(gp_sched *s, const stask *t) {
        resv_shape sh;
        shape_of(t, &sh);
        s->rc_tick++;
        int slot = -1;
        for (int i = 0; i < RESV_SHAPES; i++)
                if (s->rc[i] && !memcmp(&s->rc[i]->shape, &sh, sizeof(sh))) {
                        slot = i;
                        break;
                }
        if (slot < 0) {
                /* an empty slot, else the least recently used */
                slot = 0;
                for (int i = 0; i < RESV_SHAPES; i++) {
                        if (!s->rc[i]) {
                                slot = i;
                                break;
                        }
                        if (s->rc[i]->used < s->rc[slot]->used)
                                slot = i;
                }
                if (!s->rc[slot] && !(s->rc[slot] = calloc(1, sizeof(struct resv_cache))))
                        return NULL;
                s->rc[slot]->shape = sh;
                s->rc[slot]->node_gen = s->node_gen - 1; /* laid out below */
        }
        struct resv_cache *c = s->rc[slot];
        c->used = s->rc_tick;
        if ((c->node_gen != s->node_gen || c->nnodes != s->nnodes) && cache_layout(s, c) < 0) {
                cache_drop(c);
                s->rc[slot] = NULL;
                return NULL;
        }
        return c;
}

/* Node ni's answer for t: its GPUs t may wait for, by raw ready time. */
static void node_fill(gp_sched *s, struct resv_cache *c, const stask *t, uint32_t ni) {
        const snode *nd = &s->nodes[ni];
        gpu_end *ge = c->ent + c->off[ni];
        int m = 0;
        if ((nd->kinds & t->kinds) && sel_ok(s, t, ni))
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (!gpu_usable(g) || !kind_ok(t, g) || g->usable < t->mem)
                                continue;
                        if (!t->excl && g->excl && g->ntasks == 0)
                                continue;
                        ge[m++] = (gpu_end){gready_raw(s, nd->gpus[i], t), nd->gpus[i]};
                }
        /* at most a node's GPUs: insertion sort (cmp_gpu_end is a total
         * order, so the result is qsort's) */
        for (int i = 1; i < m; i++) {
                gpu_end x = ge[i];
                int j = i;
                while (j > 0 && cmp_gpu_end(&ge[j - 1], &x) > 0) {
                        ge[j] = ge[j - 1];
                        j--;
                }
                ge[j] = x;
        }
        c->cnt[ni] = (uint16_t)m;
        if (m > c->cmax)
                c->cmax = m;
        c->seen[ni] = s->nmod[ni];
        for (int k = 1; k <= c->kmax; k++)
                if (c->tree[k])
                        tree_set(c, k, ni);
}

/* Every node's answer current: those touched since the last time (from
 * s->tlog), or all when the log has been overrun or c was laid out. */
static void cache_refresh(gp_sched *s, struct resv_cache *c, const stask *t) {
        PH_START(ph_fill);
        if (c->stale || s->tlog_n - c->tlog_seen > TLOG_CAP) {
                for (uint32_t ni = 0; ni < c->nnodes; ni++)
                        if (c->seen[ni] != s->nmod[ni])
                                node_fill(s, c, t, ni);
                c->stale = false;
                PH_STOP(PH_RESV_FULL, ph_fill);
        } else {
                for (uint64_t j = c->tlog_seen; j < s->tlog_n; j++) {
                        uint32_t ni = s->tlog[j & (TLOG_CAP - 1)];
                        if (ni < c->nnodes && c->seen[ni] != s->nmod[ni])
                                node_fill(s, c, t, ni);
                }
                PH_STOP(PH_RESV_LOG, ph_fill);
        }
        c->tlog_seen = s->tlog_n;
}

/* How many of node ni's GPUs are ready at `now` (entries sorted). */
static int ready_at(const struct resv_cache *c, uint32_t ni, int64_t now) {
        const gpu_end *e = c->ent + c->off[ni];
        int m = c->cnt[ni], ready = 0;
        while (ready < m && e[ready].t <= now)
                ready++;
        return ready;
}

/* The choice of reserve() from the tree of k: the node where the k-th GPU
 * is ready first, then the one with the most GPUs ready now, then the
 * lowest numbered.  When the least key is after `now`, the nodes of that
 * key are the candidates, found down the subtrees that hold one, in node
 * order.  Else every node whose k-th GPU is ready now is one (all read
 * `now`), and the most GPUs ready now decides: a node has j ready iff its
 * key for j is not after `now`, so the choice is the first node, down the
 * tree of the largest such j, whose key for j is not after `now` (the
 * trees of k and more are built for it; without memory for them every
 * candidate is read). */
static void index_choice(struct resv_cache *c, const uint64_t *tr, int k, int64_t now, uint32_t *best,
                         int64_t *best_t, int *best_ready) {
        uint64_t mk = tr[1];
        *best = NIL;
        if (mk == UINT64_MAX)
                return; /* no node has k GPUs t may wait for */
        uint64_t unow = (uint64_t)now ^ ((uint64_t)1 << 63);
        bool later = mk > unow;        /* no node ready now */
        for (int j = c->cmax; !later && j >= k; j--) {
                const uint64_t *tj = tree_for(c, j);
                if (!tj)
                        break;
                if (tj[1] > unow)
                        continue; /* no node has j ready now */
                uint32_t i = 1;
                while (i < c->P)
                        i = tj[2 * i] <= unow ? 2 * i : 2 * i + 1;
                *best = i - c->P;
                *best_t = now;
                *best_ready = ready_at(c, *best, now);
                return;
        }
        uint64_t cut = later ? mk : unow; /* the candidates' keys are at most this */
        leaf_walk lw;
        leaves_start(&lw, tr, cut);
        for (uint32_t ni; (ni = leaves_next(&lw, tr, c->P, cut)) != NIL;) {
                int64_t node_t = later ? c->ent[c->off[ni] + (uint32_t)k - 1].t : now;
                if (*best != NIL && node_t > *best_t)
                        continue;
                int ready = ready_at(c, ni, now);
                if (*best == NIL || node_t < *best_t || ready > *best_ready) {
                        *best = ni;
                        *best_t = node_t;
                        *best_ready = ready;
                }
        }
}

/* Mark the GPUs the blocked task t will start on first; returns the
 * estimated start (TIME_INF when unknown or impossible).  The node is the
 * one where t's ngpus-th GPU is ready first, then the one with the most
 * GPUs ready now, then the lowest numbered; on it, the GPUs ready now by
 * number, then the others by ready time. */
SCHED_PRIVATE int64_t reserve(gp_sched *s, stask *t, int64_t now) {
        if (t->multi)
                return reserve_multi(s, t, now);
        struct resv_cache *c = gready_ready(s) < 0 ? NULL : cache_for(s, t);
        if (!c)
                return TIME_INF; /* no reservation: backfill goes on as if none */
        int k = t->ngpus;
        if (k > MAX_NODE_GPUS)
                return TIME_INF; /* more than a node holds */
        cache_refresh(s, c, t);
        const uint64_t *tr = tree_for(c, k);
        if (!tr)
                return TIME_INF; /* as above */
        int64_t best_t = TIME_INF;
        int best_ready = -1;
        uint32_t best = NIL;
        index_choice(c, tr, k, now, &best, &best_t, &best_ready);
        if (best == NIL)
                return TIME_INF;
        /* the first k at `now`: those ready now, which all read `now`, by
         * GPU number; then the rest as sorted */
        const gpu_end *e = c->ent + c->off[best];
        uint32_t now_gpus[MAX_NODE_GPUS] = {0};
        for (int i = 0; i < best_ready; i++) {
                int j = i;
                while (j > 0 && now_gpus[j - 1] > e[i].gi) {
                        now_gpus[j] = now_gpus[j - 1];
                        j--;
                }
                now_gpus[j] = e[i].gi;
        }
        for (int i = 0; i < k; i++)
                s->gpus[i < best_ready ? now_gpus[i] : e[i].gi].resv_stamp = s->stamp;
        return best_t;
}
