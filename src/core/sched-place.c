/* sched-place.c - the GPU inventory and where a task goes: the GPU
 * indexes (free-memory buckets, idle lists by node, models loaded), GPU
 * shares, the placement rules (pack, spread: see gp_sched_placement), the
 * reason a task does not fit (the reservation for the blocked task is in
 * sched-resv.c). */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* GPU indexes                                                        */

/* *b from `old` words to nw, the new ones cleared; 0 or -ENOMEM (*b as it was). */
static int bits_grow(uint64_t **b, uint32_t old, uint32_t nw) {
        uint64_t *v = realloc(*b, (size_t)nw * sizeof(*v));
        if (!v)
                return -ENOMEM;
        memset(v + old, 0, (size_t)(nw - old) * sizeof(*v));
        *b = v;
        return 0;
}

/* Room in the idle lists' bitmaps (s->ibits), and the tiers' (s->pbits),
 * for nodes 0..nnodes-1 with up to maxk GPUs: made when nodes and GPUs are
 * added, so that linking a GPU or starting a task never allocates.  0 or
 * -ENOMEM (those grown keep their room). */
static int ibits_ensure(gp_sched *s, int maxk, uint32_t nnodes) {
        uint32_t words = (nnodes + 63) / 64;
        if (words > s->ibits_words) {
                uint32_t nw = s->ibits_words ? s->ibits_words : 4;
                while (nw < words)
                        nw *= 2;
                for (int k = 0; k <= s->ibits_k; k++)
                        if (bits_grow(&s->ibits[k], s->ibits_words, nw) < 0)
                                return -ENOMEM;
                for (int p = 0; p < GP_PRIORITY_LEVELS; p++)
                        if (bits_grow(&s->pbits[p], s->ibits_words, nw) < 0)
                                return -ENOMEM;
                s->ibits_words = nw;
        }
        while (s->ibits_k < maxk) {
                uint64_t *v = calloc(s->ibits_words ? s->ibits_words : 1, sizeof(*v));
                if (!v)
                        return -ENOMEM;
                s->ibits[++s->ibits_k] = v;
        }
        return 0;
}

static void idle_list_del(gp_sched *s, uint32_t ni) {
        snode *n = &s->nodes[ni];
        s->ibits[n->idle][ni >> 6] &= ~((uint64_t)1 << (ni & 63));
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
        /* the list's previous node is the highest marked node below ni
         * (a word scan, not a walk of the list: at 10,000 nodes of one
         * idle count the walk cost a run after a task end ~0.2 ms) */
        uint64_t *b = s->ibits[n->idle];
        uint32_t prev = NIL, w = ni >> 6;
        uint64_t m = b[w] & (((uint64_t)1 << (ni & 63)) - 1);
        while (!m && w > 0)
                m = b[--w];
        if (m)
                prev = (w << 6) + 63 - (uint32_t)__builtin_clzll(m);
        b[ni >> 6] |= (uint64_t)1 << (ni & 63);
        uint32_t cur = prev != NIL ? s->nodes[prev].inext : *head;
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
        node_touch(s, g->node);
        if (g->bucket >= 0) {
                if (g->bprev != NIL)
                        s->gpus[g->bprev].bnext = g->bnext;
                else if ((s->buckets[g->kind][g->bucket] = g->bnext) == NIL)
                        s->bmask[g->kind][g->bucket >> 6] &= ~((uint64_t)1 << (g->bucket & 63));
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
        node_touch(s, g->node);
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
                s->bmask[g->kind][b >> 6] |= (uint64_t)1 << (b & 63);
        }
}

static int model_gpus_add(gp_sched *s, uint32_t model, uint32_t gi) {
        if (model >= s->model_gpus_len) {
                /* three parallel arrays of one length: each grows alike from it */
                uint32_t n = s->model_gpus_len;
                uint32_t **a = grow(s->model_gpus, sizeof(*a), &n, model + 1);
                if (!a)
                        return -ENOMEM;
                s->model_gpus = a;
                n = s->model_gpus_len;
                int *b = grow(s->model_gpus_n, sizeof(*b), &n, model + 1);
                if (!b)
                        return -ENOMEM;
                s->model_gpus_n = b;
                n = s->model_gpus_len;
                int *c = grow(s->model_gpus_cap, sizeof(*c), &n, model + 1);
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
SCHED_PRIVATE int gpu_attach(gp_sched *s, uint32_t gi, stask *t) {
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

SCHED_PRIVATE void gpu_detach(gp_sched *s, uint32_t gi, stask *t) {
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
/* GPU shares                                                         */

/* Least share t can take on any GPU it may use. */
SCHED_PRIVATE int64_t share_lb(const gp_sched *s, const stask *t) {
        if (t->excl)
                return 1000 * (int64_t)t->ngpus;
        int64_t best = 0;
        for (int k = 0; k < s->nkinds; k++)
                if (((t->kinds >> k) & 1) && s->kind_usable[k] > best)
                        best = s->kind_usable[k];
        return (int64_t)t->ngpus * gpu_share_of(false, t->mem, best);
}

/* ------------------------------------------------------------------ */
/* tenants, groups and their per-tier queues                          */

SCHED_PRIVATE int64_t fit_share(const gp_sched *s, const stask *t, const uint32_t *gpus, int n) {
        int64_t sh = 0;
        for (int i = 0; i < n; i++)
                sh += gpu_share_of(t->excl, t->mem, s->gpus[gpus[i]].usable);
        return sh;
}

/* ------------------------------------------------------------------ */
/* inventory                                                          */

SCHED_PRIVATE uint64_t kinds_for_glob(const gp_sched *s, const char *glob) {
        if (!glob)
                return ~(uint64_t)0;
        uint64_t m = 0;
        for (int k = 0; k < s->nkinds; k++)
                if (fnmatch(glob, s->kind_names[k], 0) == 0)
                        m |= (uint64_t)1 << k;
        return m;
}

static uint32_t name_hash(const char *name) {
        uint32_t h = 2166136261u; /* FNV-1a */
        for (const unsigned char *p = (const unsigned char *)name; *p; p++)
                h = (h ^ *p) * 16777619u;
        return h;
}

SCHED_PRIVATE int find_node(const gp_sched *s, const char *name, uint32_t *ret) {
        if (!s->node_ht_cap)
                return -ENOENT;
        uint32_t mask = s->node_ht_cap - 1;
        for (uint32_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
                uint32_t ni = s->node_ht[i];
                if (ni == NIL)
                        return -ENOENT;
                if (strcmp(s->nodes[ni].name, name) == 0) {
                        *ret = ni;
                        return 0;
                }
        }
}

/* Index node ni (its name set) by name; grows the table to keep it at
 * most half full.  0 or -ENOMEM (then the table is as it was). */
static int index_node(gp_sched *s, uint32_t ni) {
        if (2 * ((uint64_t)s->nnodes + 1) > s->node_ht_cap) {
                uint32_t cap = s->node_ht_cap ? 2 * s->node_ht_cap : 64;
                uint32_t *ht = malloc((size_t)cap * sizeof(*ht));
                if (!ht)
                        return -ENOMEM;
                for (uint32_t i = 0; i < cap; i++)
                        ht[i] = NIL;
                for (uint32_t k = 0; k < s->node_ht_cap; k++) {
                        uint32_t x = s->node_ht[k];
                        if (x == NIL)
                                continue;
                        uint32_t i = name_hash(s->nodes[x].name) & (cap - 1);
                        while (ht[i] != NIL)
                                i = (i + 1) & (cap - 1);
                        ht[i] = x;
                }
                free(s->node_ht);
                s->node_ht = ht;
                s->node_ht_cap = cap;
        }
        uint32_t mask = s->node_ht_cap - 1, i = name_hash(s->nodes[ni].name) & mask;
        while (s->node_ht[i] != NIL)
                i = (i + 1) & mask;
        s->node_ht[i] = ni;
        return 0;
}

/* A node's size, kinds and whole-node kinds from its GPUs as they are
 * now (after a GPU was added, removed or revived). */
static void node_refresh(gp_sched *s, uint32_t ni) {
        snode *n = &s->nodes[ni];
        node_touch(s, ni);
        int was = n->size;
        n->size = 0;
        n->kinds = n->wkinds = 0;
        for (int i = 0; i < n->ngpus; i++) {
                const sgpu *g = &s->gpus[n->gpus[i]];
                if (g->removed)
                        continue;
                n->kinds |= (uint64_t)1 << g->kind;
                if (!g->reserved) {
                        n->size++;
                        n->wkinds |= (uint64_t)1 << g->kind;
                }
        }
        nsize_move(s, was, n->size);
        s->node_gen++;
}

/* The largest usable MB of each kind, over the GPUs not removed. */
static void kind_usable_refresh(gp_sched *s) {
        memset(s->kind_usable, 0, sizeof(s->kind_usable));
        for (uint32_t i = 0; i < s->ngpus; i++) {
                const sgpu *g = &s->gpus[i];
                if (!g->removed && g->usable > s->kind_usable[g->kind])
                        s->kind_usable[g->kind] = g->usable;
        }
}

/* The kind of GPU name `name`, made if new (-E2BIG past 64, -ENOMEM). */
/* The kinds some GPU that is not removed has (bit k: kind k). */
static uint64_t kinds_in_use(const gp_sched *s) {
        uint64_t used = 0;
        for (uint32_t i = 0; i < s->ngpus; i++)
                if (!s->gpus[i].removed)
                        used |= (uint64_t)1 << s->gpus[i].kind;
        return used;
}

/* A kind no GPU has any more (its GPUs were all removed), or -1. */
static int kind_unused(const gp_sched *s) {
        uint64_t used = kinds_in_use(s);
        for (int k = 0; k < s->nkinds; k++)
                if (!((used >> k) & 1))
                        return k;
        return -1;
}

int gp_sched_gpu_models_room(const gp_sched *s, const char *const *names, int n) {
        int fresh = 0;
        for (int i = 0; i < n; i++) {
                bool known = false;
                for (int k = 0; k < s->nkinds && !known; k++)
                        known = strcmp(s->kind_names[k], names[i]) == 0;
                for (int j = 0; j < i && !known; j++)
                        known = strcmp(names[j], names[i]) == 0;
                fresh += !known;
        }
        if (fresh == 0 || s->nkinds + fresh <= MAX_KINDS)
                return 0;
        uint64_t used = kinds_in_use(s);
        int unused = 0;
        for (int k = 0; k < s->nkinds; k++)
                unused += !((used >> k) & 1);
        return s->nkinds + fresh - unused <= MAX_KINDS ? 0 : -E2BIG;
}

static int kind_get(gp_sched *s, const char *name) {
        for (int k = 0; k < s->nkinds; k++)
                if (strcmp(s->kind_names[k], name) == 0)
                        return k;
        int kind;
        if (s->nkinds >= MAX_KINDS) {
                /* full: a kind whose GPUs all left is named anew (removed GPUs
                 * are unlinked and out of every node's masks; a revived one
                 * takes its kind again by name) */
                if ((kind = kind_unused(s)) < 0)
                        return -E2BIG;
                char *nm = strdup(name);
                if (!nm)
                        return -ENOMEM;
                free(s->kind_names[kind]);
                s->kind_names[kind] = nm;
                s->kind_usable[kind] = 0;
        } else {
                if (!(s->kind_names[s->nkinds] = strdup(name)))
                        return -ENOMEM;
                kind = s->nkinds++;
        }
        /* a new kind: queued and running tasks with a glob may now match it */
        size_t pos = 0;
        stask *t;
        while ((t = gp_i64map_next(&s->tasks, &pos, NULL)))
                if (t->gpu_model)
                        t->kinds = kinds_for_glob(s, t->gpu_model);
        return kind;
}

/* Bring back removed GPU gi with d's description (same id). */
static int gpu_revive(gp_sched *s, uint32_t gi, const gp_sched_gpu_desc *d) {
        char *uuid = strdup(d->uuid), *name = strdup(d->name);
        int kind = uuid && name ? kind_get(s, d->name) : -ENOMEM;
        if (kind < 0) {
                free(uuid);
                free(name);
                return kind;
        }
        sgpu *g = &s->gpus[gi];
        free(g->uuid);
        free(g->name);
        g->uuid = uuid;
        g->name = name;
        g->kind = (uint8_t)kind;
        g->total = d->memory_total_mb;
        g->foreign = 0;
        g->usable = d->memory_total_mb - s->cfg.memory_safety_margin_mb;
        if (g->usable < 0)
                g->usable = 0;
        g->util = g->temp = -1;
        g->healthy = true;
        g->drained = false;
        g->reserved = d->reserved;
        g->removed = false;
        gpu_link(s, gi);
        if (g->usable > s->kind_usable[kind])
                s->kind_usable[kind] = g->usable;
        if (gpu_usable(g)) {
                s->usable_gpus++;
                groups_refresh_all(s);
        }
        node_refresh(s, g->node);
        s->gen++;
        return 0;
}

int gp_sched_gpu_add(gp_sched *s, const gp_sched_gpu_desc *d, uint32_t *ret_gpu) {
        if (!d || !d->node || !*d->node || !d->uuid || !d->name || d->index < 0 || d->memory_total_mb <= 0)
                return -EINVAL;
        uint32_t ni;
        if (find_node(s, d->node, &ni) == 0) {
                snode *n = &s->nodes[ni];
                for (int i = 0; i < n->ngpus; i++)
                        if (s->gpus[n->gpus[i]].index == d->index) {
                                uint32_t gi = n->gpus[i];
                                if (!s->gpus[gi].removed)
                                        return -EEXIST;
                                int rc = gpu_revive(s, gi, d);
                                if (rc == 0 && ret_gpu)
                                        *ret_gpu = gi;
                                return rc;
                        }
                if (n->ngpus >= MAX_NODE_GPUS)
                        return -E2BIG;
        } else {
                ni = NIL;
        }
        int kind = -1;
        for (int k = 0; k < s->nkinds; k++)
                if (strcmp(s->kind_names[k], d->name) == 0)
                        kind = k;
        if (kind < 0 && s->nkinds >= MAX_KINDS && kind_unused(s) < 0)
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
                shost *nh = grow(s->nhost, sizeof(shost), &s->nhost_cap, s->nnodes + 1);
                if (!nh)
                        return -ENOMEM;
                s->nhost = nh;
                memset(&nh[s->nnodes], 0, sizeof(*nh));
                uint32_t *nm = grow(s->nmod, sizeof(*nm), &s->nmod_cap, s->nnodes + 1);
                if (!nm)
                        return -ENOMEM;
                s->nmod = nm;
                nm[s->nnodes] = 0;
                struct pspan *ps = grow(s->pspan, sizeof(*ps), &s->pspan_cap, s->nnodes + 1);
                if (!ps)
                        return -ENOMEM;
                s->pspan = ps;
                ps[s->nnodes] = (struct pspan){0, 0};
                snode *n = &nodes[s->nnodes];
                memset(n, 0, sizeof(*n));
                if (!(n->name = strdup(d->node)))
                        return -ENOMEM;
                n->iprev = n->inext = NIL;
                n->allow = GP_SCHED_NODE_MULTI | GP_SCHED_NODE_ELASTIC;
                if (index_node(s, s->nnodes) < 0) {
                        free(n->name);
                        return -ENOMEM;
                }
                ni = s->nnodes++;
                uint32_t *mn = grow(s->mn, sizeof(uint32_t), &s->mn_cap, s->nnodes);
                if (!mn)
                        return -ENOMEM; /* (the node stays, with no GPU yet) */
                s->mn = mn;
        }
        snode *n = &s->nodes[ni];
        uint32_t ncap = (uint32_t)n->cap;
        uint32_t *ng = grow(n->gpus, sizeof(uint32_t), &ncap, (uint32_t)n->ngpus + 1);
        if (!ng)
                return -ENOMEM;
        n->gpus = ng;
        n->cap = (int)ncap;
        if (ibits_ensure(s, n->ngpus + 1, s->nnodes) < 0)
                return -ENOMEM;

        sgpu *g = &s->gpus[s->ngpus];
        memset(g, 0, sizeof(*g));
        g->uuid = strdup(d->uuid);
        g->name = strdup(d->name);
        if (!g->uuid || !g->name) {
                free(g->uuid);
                free(g->name);
                return -ENOMEM;
        }
        if (kind < 0 && (kind = kind_get(s, d->name)) < 0) {
                free(g->uuid);
                free(g->name);
                return kind;
        }
        g->node = ni;
        g->index = d->index;
        g->kind = (uint8_t)kind;
        g->total = d->memory_total_mb;
        g->foreign = 0;
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
        if (!g->reserved) {
                n->size++;
                nsize_move(s, n->size - 1, n->size);
                n->wkinds |= (uint64_t)1 << kind;
        }
        s->node_gen++;
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

/* ------------------------------------------------------------------ */
/* nodes: labels, drain, remove                                       */

static bool label_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
               c == '_' || c == '/' || c == '-';
}

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        return (x > y) - (x < y);
}

/* Parse "k=v,k2=v2" (NULL or "" = none): at most GP_LABELS_MAX pairs,
 * key 1..63 and value 0..63 bytes of [A-Za-z0-9._/-].  Each pair's id:
 * interned into `add` when given, else looked up in `find` (an unknown
 * pair gets NIL, which no node carries), else only checked.  ids (max
 * entries) sorted, repeats dropped.  The count, or -EINVAL, -ENOMEM. */
SCHED_PRIVATE int pairs_parse(intern *add, const intern *find, const char *text, uint32_t *ids, int max) {
        int n = 0;
        if (!text || !*text)
                return 0;
        const char *p = text;
        for (;;) {
                const char *k = p;
                while (label_char(*p))
                        p++;
                size_t kl = (size_t)(p - k);
                if (kl < 1 || kl > LABEL_PART_MAX || *p != '=')
                        return -EINVAL;
                const char *v = ++p;
                while (label_char(*p))
                        p++;
                size_t vl = (size_t)(p - v);
                if (vl > LABEL_PART_MAX || (*p != ',' && *p != '\0') || n >= GP_LABELS_MAX)
                        return -EINVAL;
                if (add || find) {
                        if (n >= max)
                                return -EINVAL;
                        char pair[2 * LABEL_PART_MAX + 2];
                        memcpy(pair, k, kl + 1 + vl);
                        pair[kl + 1 + vl] = '\0';
                        uint32_t id = NIL;
                        if (add) {
                                if (intern_get(add, pair, &id) < 0)
                                        return -ENOMEM;
                        } else if (intern_find(find, pair, &id) < 0) {
                                id = NIL;
                        }
                        ids[n] = id;
                }
                n++;
                if (*p == '\0')
                        break;
                p++;
        }
        if (add || find) {
                qsort(ids, (size_t)n, sizeof(*ids), cmp_u32);
                int m = 0;
                for (int i = 0; i < n; i++)
                        if (!m || ids[m - 1] != ids[i])
                                ids[m++] = ids[i];
                n = m;
        }
        return n;
}

int gp_sched_node_set_labels(gp_sched *s, const char *node, const char *labels) {
        uint32_t ni;
        if (!node || find_node(s, node, &ni) < 0)
                return -ENOENT;
        if (pairs_parse(NULL, NULL, labels, NULL, 0) < 0)
                return -EINVAL;
        uint32_t ids[GP_LABELS_MAX];
        int n = pairs_parse(&s->labels, NULL, labels, ids, GP_LABELS_MAX);
        if (n < 0)
                return n;
        uint32_t *v = NULL;
        if (n > 0) {
                if (!(v = malloc((size_t)n * sizeof(*v))))
                        return -ENOMEM;
                memcpy(v, ids, (size_t)n * sizeof(*v));
        }
        snode *nd = &s->nodes[ni];
        free(nd->labels);
        nd->labels = v;
        nd->nlabels = n;
        node_touch(s, ni);
        s->node_gen++;
        s->gen++;
        return 0;
}

int gp_sched_node_set_drained(gp_sched *s, const char *node, bool drained) {
        uint32_t ni;
        if (!node || find_node(s, node, &ni) < 0)
                return -ENOENT;
        const snode *nd = &s->nodes[ni];
        for (int i = 0; i < nd->ngpus; i++)
                gp_sched_gpu_set_drained(s, nd->gpus[i], drained);
        return 0;
}

int gp_sched_node_set_host(gp_sched *s, const char *node, int cpus, int64_t mem_mb) {
        uint32_t ni;
        if (!node || find_node(s, node, &ni) < 0)
                return -ENOENT;
        if (cpus < 0 || cpus > GP_SCHED_MAX_CPUS || mem_mb < 0)
                return -EINVAL;
        s->nhost[ni].cpus = cpus;
        s->nhost[ni].mem_mb = mem_mb;
        return 0;
}

int gp_sched_node_set_allow(gp_sched *s, const char *node, unsigned allow) {
        uint32_t ni;
        if (!node || find_node(s, node, &ni) < 0)
                return -ENOENT;
        if (allow & ~(unsigned)(GP_SCHED_NODE_MULTI | GP_SCHED_NODE_ELASTIC))
                return -EINVAL;
        s->nodes[ni].allow = allow;
        node_touch(s, ni);
        s->node_gen++; /* cached multi-node answers and memos see it */
        return 0;
}

int gp_sched_node_remove(gp_sched *s, const char *node) {
        uint32_t ni;
        if (!node || find_node(s, node, &ni) < 0)
                return -ENOENT;
        const snode *nd = &s->nodes[ni];
        for (int i = 0; i < nd->ngpus; i++)
                if (s->gpus[nd->gpus[i]].ntasks > 0)
                        return -EBUSY;
        bool usable_changed = false;
        for (int i = 0; i < nd->ngpus; i++) {
                uint32_t gi = nd->gpus[i];
                sgpu *g = &s->gpus[gi];
                if (g->removed)
                        continue;
                if (gpu_usable(g)) {
                        s->usable_gpus--;
                        usable_changed = true;
                }
                gpu_unlink(s, gi);
                g->removed = true;
        }
        if (usable_changed)
                groups_refresh_all(s);
        kind_usable_refresh(s);
        node_refresh(s, ni);
        s->gen++;
        return 0;
}

int gp_sched_node_count(const gp_sched *s) {
        int n = 0;
        for (uint32_t i = 0; i < s->nnodes; i++)
                n += s->nodes[i].kinds != 0;
        return n;
}

int gp_sched_node_gpus(const gp_sched *s, const char *node, uint32_t *ids, int max) {
        uint32_t ni;
        if (!node || find_node(s, node, &ni) < 0)
                return -ENOENT;
        const snode *nd = &s->nodes[ni];
        for (int i = 0; i < nd->ngpus && i < max; i++)
                ids[i] = nd->gpus[i];
        return nd->ngpus;
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

int gp_sched_gpu_set_foreign(gp_sched *s, uint32_t gpu, int64_t mb) {
        if (gpu >= s->ngpus)
                return -ENOENT;
        if (mb < 0 || mb > ((int64_t)1 << 40))
                return -EINVAL;
        sgpu *g = &s->gpus[gpu];
        if (g->foreign == mb)
                return 0;
        int64_t usable = g->total - s->cfg.memory_safety_margin_mb - mb;
        if (usable < 0)
                usable = 0;
        gpu_unlink(s, gpu);
        if (g->excl && g->ntasks > 0)
                g->alloc += usable - g->usable; /* a whole-GPU task is charged what is usable (gpu_detach) */
        bool more = usable > g->usable;
        g->usable = usable;
        g->foreign = mb;
        gpu_link(s, gpu);
        s->gen++;
        return more;
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
                if (!s->gpus[i].removed && strcmp(s->gpus[i].uuid, uuid) == 0) {
                        *ret_gpu = i;
                        return 0;
                }
        return -ENOENT;
}

uint32_t gp_sched_gpu_count(const gp_sched *s) {
        return s->ngpus;
}

/* ------------------------------------------------------------------ */
/* placement                                                          */

/* Does max_models_per_gpu keep t off GPU g?  Only when t has a model that
 * g does not hold and g already holds the maximum of other models. */
SCHED_PRIVATE bool models_full(const gp_sched *s, const stask *t, const sgpu *g) {
        int max = s->cfg.max_models_per_gpu;
        if (max <= 0 || !t->model || g->nmodels < max)
                return false;
        for (int i = 0; i < g->nmodels; i++)
                if (g->models[i].model == t->model)
                        return false;
        return true;
}

/* Can GPU g take shared task t now? */
SCHED_PRIVATE bool shared_fits(const gp_sched *s, const stask *t, const sgpu *g, bool avoid) {
        return gpu_usable(g) && !g->excl && kind_ok(t, g) && gpu_free(g) >= t->mem &&
               !(avoid && g->resv_stamp == s->stamp) && !models_full(s, t, g) && sel_ok(s, t, g->node) &&
               host_ok(s, t, g->node);
}

SCHED_PRIVATE bool idle_fits(const gp_sched *s, const stask *t, const sgpu *g, bool avoid) {
        return gpu_usable(g) && g->ntasks == 0 && kind_ok(t, g) && g->usable >= t->mem &&
               !(avoid && g->resv_stamp == s->stamp) && sel_ok(s, t, g->node) && host_ok(s, t, g->node);
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
                uint32_t pick[MAX_NODE_GPUS];
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
                        if (!(nd->kinds & t->kinds) || !sel_ok(s, t, ni))
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
                /* the non-empty buckets, fullest first */
                for (int b = bucket_below(s, k, NBUCKETS - 1); b >= lo; b = bucket_below(s, k, b - 1)) {
                        uint32_t gi = s->buckets[k][b];
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

/* pack (the default): fullest first, keeping whole GPUs free */
static bool place_pack(const gp_sched *s, const stask *t, bool avoid, fit *f) {
        if (t->excl)
                return place_whole(s, t, avoid, f);
        if (t->ngpus == 1)
                return place_shared1(s, t, avoid, f);
        return place_shared_gang(s, t, avoid, f);
}

/* spread: is GPU a better than GPU b?  More free memory (an idle GPU has
 * all its usable memory free), then lower utilisation, then lower
 * temperature (unknown readings, -1, count as lowest), then lower id. */
static bool spread_better(const gp_sched *s, uint32_t a, uint32_t b) {
        const sgpu *x = &s->gpus[a], *y = &s->gpus[b];
        int64_t fx = x->ntasks ? gpu_free(x) : x->usable, fy = y->ntasks ? gpu_free(y) : y->usable;
        if (fx != fy)
                return fx > fy;
        if (x->util != y->util)
                return x->util < y->util;
        if (x->temp != y->temp)
                return x->temp < y->temp;
        return a < b;
}

/* spread (load balance): a single GPU is the best by spread_better of all
 * that fit (model affinity first, as under pack); whole GPUs and gangs go
 * to the node with the most GPUs that fit (then the lowest node), on its
 * best GPUs.  A scan of every GPU per placement: O(GPUs). */
static bool place_spread(const gp_sched *s, const stask *t, bool avoid, fit *f) {
        int n = t->ngpus;
        if (!t->excl && n == 1 && t->model && t->model < s->model_gpus_len) {
                uint32_t bi = NIL;
                for (int i = 0; i < s->model_gpus_n[t->model]; i++) {
                        uint32_t gi = s->model_gpus[t->model][i];
                        if (shared_fits(s, t, &s->gpus[gi], avoid) && (bi == NIL || spread_better(s, gi, bi)))
                                bi = gi;
                }
                if (bi != NIL) {
                        f->n = 1;
                        f->gpus[0] = bi;
                        return true;
                }
        }
        int best_m = 0;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!(nd->kinds & t->kinds) || nd->ngpus < n)
                        continue;
                uint32_t cand[MAX_NODE_GPUS];
                int m = 0;
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (t->excl ? idle_fits(s, t, g, avoid) : shared_fits(s, t, g, avoid))
                                cand[m++] = nd->gpus[i];
                }
                if (m < n)
                        continue;
                /* its best n GPUs, best first (insertion sort: m <= 256) */
                for (int i = 1; i < m; i++) {
                        uint32_t x = cand[i];
                        int j = i;
                        while (j > 0 && spread_better(s, x, cand[j - 1])) {
                                cand[j] = cand[j - 1];
                                j--;
                        }
                        cand[j] = x;
                }
                bool better = n == 1 ? !best_m || spread_better(s, cand[0], f->gpus[0]) : m > best_m;
                if (better) {
                        best_m = m;
                        f->n = n;
                        memcpy(f->gpus, cand, (size_t)n * sizeof(uint32_t));
                }
        }
        return best_m > 0;
}

static const gp_sched_placement_ops pack_ops = {.name = "pack", .place = place_pack};
static const gp_sched_placement_ops spread_ops = {.name = "spread", .place = place_spread};

/* Its length is its highest entry + 1: a placement added to the enum but
 * not here is a compile error. */
const gp_sched_placement_ops *const placement_ops[] = {
        [GP_PLACE_PACK] = &pack_ops,
        [GP_PLACE_SPREAD] = &spread_ops,
};
_Static_assert(sizeof(placement_ops) / sizeof(placement_ops[0]) == GP_PLACE_N,
               "placement_ops[] needs one entry per gp_sched_placement");

const char *gp_sched_placement_name(gp_sched_placement p) {
        return (unsigned)p < GP_PLACE_N ? placement_ops[p]->name : NULL;
}

int gp_sched_placement_parse(const char *name, gp_sched_placement *ret) {
        for (int i = 0; name && i < GP_PLACE_N; i++)
                if (!strcmp(placement_ops[i]->name, name)) {
                        *ret = (gp_sched_placement)i;
                        return 0;
                }
        return -EINVAL;
}

/* ------------------------------------------------------------------ */
/* multi-node tasks: whole nodes                                      */

/* Is t multi-node: more GPUs than the largest node it may use holds
 * (its kinds, not reserved or removed, on nodes its selector allows)?
 * Elastic tasks never are.  Cached until the nodes change (node_gen); a
 * multi-node task takes whole GPUs (excl). */
/* The most GPUs of t's kinds one node its selector allows holds (counted
 * up to t->ngpus: more is the same answer).  Apart from multi_refresh,
 * which the walk calls for every task it reads, so that the walk keeps
 * only the two tests before it. */
__attribute__((noinline)) static int most_on_a_node(const gp_sched *s, const stask *t) {
        int most = 0;
        uint64_t every_kind = s->nkinds >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << s->nkinds) - 1;
        if (!t->nsel && !(every_kind & ~t->kinds)) {
                /* any node, all its GPUs: the largest node (counted by size), not a scan of the
                 * nodes for every such task (at 12,500 nodes, most of a first run with gangs of
                 * two nodes queued) */
                return s->size_max;
        }
        for (uint32_t ni = 0; ni < s->nnodes && most < t->ngpus; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!(nd->wkinds & t->kinds) || nd->size <= most || !sel_ok(s, t, ni))
                        continue;
                int c = 0;
                if (!(nd->wkinds & ~t->kinds))
                        c = nd->size;
                else
                        for (int i = 0; i < nd->ngpus; i++) {
                                const sgpu *g = &s->gpus[nd->gpus[i]];
                                c += !g->removed && !g->reserved && kind_ok(t, g);
                        }
                if (c > most)
                        most = c;
        }
        return most;
}

SCHED_PRIVATE void multi_refresh(gp_sched *s, stask *t) {
        if (t->nodes_max) { /* elastic in nodes: whole nodes, whatever their size */
                t->multi = true;
                t->excl = true;
                t->multi_gen = s->node_gen;
                return;
        }
        if (t->ngpus <= 1 || t->nmax) {
                t->multi = false;
                return;
        }
        if (t->multi_gen == s->node_gen)
                return;
        int most = most_on_a_node(s, t);
        t->multi = most > 0 && t->ngpus > most;
        t->multi_gen = s->node_gen;
        t->excl = t->multi || t->excl_req;
}

/* May multi-node task t take node nd whole (ignoring what runs there)?
 * Every GPU it would hold matches t's kinds and holds t's memory. */
SCHED_PRIVATE bool whole_node_ok(const gp_sched *s, const stask *t, uint32_t ni) {
        const snode *nd = &s->nodes[ni];
        if (nd->size == 0 || (nd->wkinds & ~t->kinds) || !(nd->allow & GP_SCHED_NODE_MULTI) || !sel_ok(s, t, ni))
                return false;
        if (t->mem > 0)
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (!g->removed && !g->reserved && g->usable < t->mem)
                                return false;
                }
        return true;
}

/* What node ni counts toward multi-node task t's need (need_units): its
 * GPUs, or for a task elastic in nodes the node itself. */
SCHED_PRIVATE int node_units(const gp_sched *s, const stask *t, uint32_t ni) {
        return t->nodes_max ? 1 : s->nodes[ni].size;
}

SCHED_PRIVATE int64_t need_units(const stask *t) {
        return t->nodes_max ? t->nodes_min : t->ngpus;
}

/* Write the GPUs of nodes[0..k) (sorted by node number here) to f. */
static void whole_nodes_fit(const gp_sched *s, uint32_t *nodes, int k, fit *f) {
        qsort(nodes, (size_t)k, sizeof(*nodes), cmp_u32);
        f->n = 0;
        for (int j = 0; j < k; j++) {
                const snode *nd = &s->nodes[nodes[j]];
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (!g->removed && !g->reserved)
                                f->gpus[f->n++] = nd->gpus[i];
                }
        }
}

/* Whole nodes for multi-node task t (see "Multi-node tasks" in sched.h):
 * the fully idle nodes it may take, largest first (then lowest number),
 * as few as cover t->ngpus; then each chosen one, the last first, swapped
 * for the smallest unchosen node that still covers the request. */
__attribute__((noinline)) static bool place_multi(const gp_sched *s, const stask *t, bool avoid, fit *f) {
        /* candidates in s->mn: idle list k holds nodes with k idle GPUs; a
         * node is wholly free when that is its size (a drained or
         * unhealthy GPU makes it smaller) */
        uint32_t *c = s->mn;
        int nc = 0;
        int64_t total = 0;
        /* A list k with no node of size k holds no wholly idle node (at 12,500 nodes, walking the
         * partly idle ones cost a first run that queued gangs of two nodes 5x its time).  The
         * walk ends once the nodes so far cover the need exactly (the swap below needs GPUs to
         * spare), or at all for a task elastic in nodes (it takes the largest, no swap). */
        bool done = false;
        for (int k = s->max_idle; k >= 1 && !done; k--) {
                if (!s->nsize[k])
                        continue;
                for (uint32_t ni = s->idle_lists[k]; ni != NIL; ni = s->nodes[ni].inext) {
                        const snode *nd = &s->nodes[ni];
                        if (nd->idle != nd->size || !whole_node_ok(s, t, ni) || !host_ok(s, t, ni))
                                continue;
                        bool resv = false;
                        for (int i = 0; avoid && i < nd->ngpus && !resv; i++)
                                resv = s->gpus[nd->gpus[i]].resv_stamp == s->stamp;
                        if (resv)
                                continue;
                        c[nc++] = ni;
                        total += node_units(s, t, ni);
                        done = total == need_units(t) || (t->nodes_max && total >= need_units(t));
                        if (done)
                                break;
                }
        }
        if (total < need_units(t))
                return false;
        int k = 0;
        int64_t sum = 0;
        while (sum < need_units(t))
                sum += node_units(s, t, c[k++]);
        /* c[0..k) chosen, c[k..nc) not, both largest first (elastic in
         * nodes: the largest nodes, no swap) */
        if (!t->nodes_max && s->nodes[c[nc - 1]].size != s->nodes[c[0]].size)
                for (int j = k - 1; j >= 0; j--) {
                        int sj = s->nodes[c[j]].size, best = -1;
                        for (int u = k; u < nc; u++) {
                                int su = s->nodes[c[u]].size;
                                if (su >= sj || sum - sj + su < t->ngpus)
                                        continue;
                                if (best < 0 || su < s->nodes[c[best]].size ||
                                    (su == s->nodes[c[best]].size && c[u] < c[best]))
                                        best = u;
                        }
                        if (best >= 0) {
                                uint32_t x = c[j];
                                sum += s->nodes[c[best]].size - sj;
                                c[j] = c[best];
                                c[best] = x;
                        }
                }
        whole_nodes_fit(s, c, k, f);
        return true;
}

/* t's GPUs under the configured placement (s->plc); false if none fit */
SCHED_PRIVATE bool place(const gp_sched *s, const stask *t, bool avoid, fit *f) {
        if (t->multi)
                return place_multi(s, t, avoid, f);
        return s->plc->place(s, t, avoid, f);
}

/* Host CPUs or RAM: when no node t may use (its selector, a usable GPU of
 * its kinds) has them free, say so (R_HOST_CPU, R_HOST_MEM) and return
 * true; else false (the GPUs are what it waits for). */
static bool host_short(gp_sched *s, stask *t) {
        int64_t most_cpus = -1, most_mem = -1;
        bool cpus_ok = false, mem_ok = false;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!sel_ok(s, t, ni))
                        continue;
                bool usable = false;
                for (int i = 0; i < nd->ngpus && !usable; i++)
                        usable = kind_ok(t, &s->gpus[nd->gpus[i]]) && gpu_usable(&s->gpus[nd->gpus[i]]);
                if (!usable)
                        continue;
                const shost *h = &s->nhost[ni];
                int64_t fc = h->cpus ? h->cpus - h->cpus_used : INT32_MAX;
                int64_t fm = h->mem_mb ? h->mem_mb - h->mem_used : INT64_MAX;
                cpus_ok = cpus_ok || fc >= t->cpus;
                mem_ok = mem_ok || (fc >= t->cpus && fm >= t->hmem);
                most_cpus = fc > most_cpus ? fc : most_cpus;
                if (fc >= t->cpus && fm > most_mem)
                        most_mem = fm;
        }
        if (most_cpus < 0 || (cpus_ok && mem_ok))
                return false; /* no usable node at all: the GPU diagnosis says so */
        t->rstamp = s->stamp;
        t->rcode = cpus_ok ? R_HOST_MEM : R_HOST_CPU;
        t->ra1 = cpus_ok ? t->hmem : t->cpus;
        t->ra2 = cpus_ok ? most_mem : most_cpus;
        return true;
}

/* Why t cannot be placed right now (for the blocked task: full scan). */
SCHED_PRIVATE void diagnose(gp_sched *s, stask *t) {
        if (t->multi) {
                int64_t free_gpus = 0;
                for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                        const snode *nd = &s->nodes[ni];
                        if (nd->size > 0 && nd->idle == nd->size && whole_node_ok(s, t, ni))
                                free_gpus += node_units(s, t, ni);
                }
                t->rstamp = s->stamp;
                t->rcode = t->nodes_max ? R_ENODES : R_NODES;
                t->ra1 = need_units(t);
                t->ra2 = free_gpus;
                return;
        }
        if (t->host && host_short(s, t))
                return;
        int64_t most_free = -1;
        int most_whole = 0;
        bool any_usable = false;
        int mem_fits = 0, model_full = 0; /* single shared GPUs with room; of them, full of other models */
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                int whole = 0;
                if (!sel_ok(s, t, ni) || !host_ok(s, t, ni))
                        continue;
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
