/* sched-queue.c - tenants, groups and queues: tenant and group state and
 * settings, the quota and group-share gates, each tenant's sorted lists of
 * queued tasks, the per-tier FIFOs with their order statistics, and the
 * walk of the queue in dispatch order (per tier, tenants by fair share). */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* tenants and groups                                                 */

/* Make tn[id] exist (a new tenant: weight 1, no limits). 0 / -ENOMEM. */
SCHED_PRIVATE int tenant_ensure(gp_sched *s, uint32_t id) {
        if (id < s->tn_cap)
                return 0;
        uint32_t cap = s->tn_cap;
        stenant *tn = grow_from(s->tn, sizeof(*tn), &cap, id + 1, 16);
        if (!tn)
                return -ENOMEM;
        memset(tn + s->tn_cap, 0, (size_t)(cap - s->tn_cap) * sizeof(*tn));
        for (uint32_t i = s->tn_cap; i < cap; i++)
                tn[i].weight = 1;
        s->tn = tn;
        s->tn_cap = cap;
        return 0;
}

/* ------------------------------------------------------------------ */
/* tenants, groups and their per-tier queues                          */

static int group_ensure(gp_sched *s, uint32_t id) {
        if (id < s->gr_cap)
                return 0;
        uint32_t cap = s->gr_cap;
        sgroup *gr = grow(s->gr, sizeof(*gr), &cap, id + 1);
        if (!gr)
                return -ENOMEM;
        memset(gr + s->gr_cap, 0, (size_t)(cap - s->gr_cap) * sizeof(*gr));
        for (uint32_t i = s->gr_cap; i < cap; i++)
                gr[i].share_pct = 100;
        s->gr = gr;
        s->gr_cap = cap;
        return 0;
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

SCHED_PRIVATE void groups_refresh_all(gp_sched *s) {
        for (uint32_t gi = 1; gi < s->groups.n; gi++)
                group_refresh(s, gi);
}

/* Every change to a tenant is bracketed by tenant_out / tenant_in, which
 * take its contribution out of its group and put it back. */
SCHED_PRIVATE void tenant_out(gp_sched *s, stenant *T) {
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

SCHED_PRIVATE void tenant_in(gp_sched *s, stenant *T) {
        if (!T->group)
                return;
        sgroup *g = &s->gr[T->group];
        g->run_milli += T->run_milli;
        g->queued += T->queued;
        if (!tenant_full(T))
                g->waiting += T->queued;
        group_refresh(s, T->group);
}

/* ------------------------------------------------------------------ */
/* quotas and group shares (gates)                                    */

/* Would a group cap hold a task of tenant T taking `share`?  Not while T
 * stays within its guarantee, nor while no task of another group that is
 * below its own share waits. */
SCHED_PRIVATE bool group_holds(const gp_sched *s, const stenant *T, int64_t share) {
        if (s->groups_off)
                return false;
        const sgroup *g = &s->gr[T->group];
        if (T->guar_milli > 0 && T->run_milli + share <= T->guar_milli)
                return false;
        if (g->run_milli + share <= group_cap(s, g))
                return false;
        return s->needy_groups - (g->needy ? 1 : 0) > 0;
}

/* The rule of t's tenant or group that holds t back if it takes `share`:
 * a reason code (0 = none) and its arguments. */
SCHED_PRIVATE int gate(const gp_sched *s, const stask *t, int64_t share, int64_t *a1, int64_t *a2, int64_t *a3) {
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

/* ------------------------------------------------------------------ */
/* a tenant's queued tasks of one tier (tlist)                        */

static void tl_fen_add(tlist *l, uint32_t pos, int d) {
        for (; pos <= l->cap; pos += pos & (~pos + 1))
                l->fen[pos] += (uint32_t)d;
}

/* ------------------------------------------------------------------ */
/* tenants, groups and their per-tier queues                          */

SCHED_PRIVATE uint32_t tl_fen_sum(const tlist *l, uint32_t pos) {
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

/* The first slot of l in [lo, len) whose id is not below `id` (len: none);
 * ids stay sorted over the slots, emptied ones included. */
static uint32_t tl_lower(const tlist *l, int64_t id) {
        uint32_t a = l->lo, b = l->len;
        while (a < b) {
                uint32_t m = a + (b - a) / 2;
                if (l->ids[m] < id)
                        a = m + 1;
                else
                        b = m;
        }
        return a;
}

/* Slot j of l takes x (NULL: a hole) in place of what it held; `was`:
 * whether that was a task (a slot at or past len never was). */
static void tl_put(tlist *l, uint32_t j, stask *x, int64_t id, bool was) {
        l->v[j] = x;
        l->ids[j] = id;
        if (x)
                x->tl_idx = j;
        int d = (x != NULL) - was;
        if (d)
                tl_fen_add(l, j + 1, d);
}

/* Insert t at its place by id.  A task requeued after preemption belongs
 * near the head, behind the slots its tier's starts emptied: the slots
 * between are moved by one, towards the free side that is nearer, rather
 * than the list rebuilt (1,000 tasks a tenant's tier at 1,000,000
 * queued).  0 or -ENOMEM (l unchanged). */
static int tl_insert(tlist *l, stask *t) {
        if (l->len < l->cap && (l->len == 0 || l->ids[l->len - 1] < t->id)) {
                l->v[l->len] = t;
                l->ids[l->len] = t->id;
                t->tl_idx = l->len++;
                l->n++;
                tl_fen_add(l, l->len, 1);
                return 0;
        }
        uint32_t a = tl_lower(l, t->id);
        if (a < l->len && l->ids[a] == t->id) {
                /* its own slot from before it started, empty since */
                tl_put(l, a, t, t->id, false);
                l->n++;
                return 0;
        }
        /* t goes between slots a - 1 and a */
        uint32_t left = l->lo > 0 ? a - l->lo : UINT32_MAX, right = l->len < l->cap ? l->len - a : UINT32_MAX;
        if (left == UINT32_MAX && right == UINT32_MAX)
                return tl_rebuild(l, t);
        if (left <= right) {
                for (uint32_t j = l->lo - 1; j + 1 < a; j++)
                        tl_put(l, j, l->v[j + 1], l->ids[j + 1], l->v[j] != NULL);
                tl_put(l, a - 1, t, t->id, a > l->lo && l->v[a - 1] != NULL);
                l->lo--;
        } else {
                for (uint32_t j = l->len; j > a; j--)
                        tl_put(l, j, l->v[j - 1], l->ids[j - 1], j < l->len && l->v[j] != NULL);
                tl_put(l, a, t, t->id, a < l->len && l->v[a] != NULL);
                l->len++;
        }
        l->n++;
        return 0;
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
SCHED_PRIVATE uint32_t tl_below(const tlist *l, int64_t id) {
        return tl_fen_sum(l, tl_lower(l, id));
}

/* The slot of l's r-th queued task (1-based, r <= l->n): a descent of
 * the Fenwick tree (l->cap is a power of two). */
static uint32_t tl_kth(const tlist *l, uint32_t r) {
        uint32_t pos = 0;
        for (uint32_t step = l->cap; step; step >>= 1)
                if (pos + step <= l->cap && l->fen[pos + step] < r) {
                        pos += step;
                        r -= l->fen[pos];
                }
        return pos; /* slot pos holds Fenwick position pos + 1 */
}

/* ------------------------------------------------------------------ */
/* tenants with tasks queued per tier                                 */

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

/* ------------------------------------------------------------------ */
/* tenants, groups and their per-tier queues                          */

static void act_del(gp_sched *s, int q, uint32_t tid) {
        tier *tr = &s->tiers[q];
        uint32_t i = s->tn[tid].act_pos[q] - 1, last = tr->act[--tr->nact];
        tr->act[i] = last;
        s->tn[last].act_pos[q] = i + 1;
        s->tn[tid].act_pos[q] = 0;
}

/* ------------------------------------------------------------------ */
/* walking the queue in dispatch order                                */

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

SCHED_PRIVATE int walk_init(gp_sched *s, walk *w, bool live) {
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
                went *nb = gp_vec_grow(s->wbuf, &s->wcap, total, sizeof(*nb), 64);
                if (!nb)
                        return -ENOMEM;
                s->wbuf = nb;
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

/* Classes may have dropped (a preemption freed share): re-sort the tiers
 * where one did.  Most preemptions move no tenant across its guarantee
 * or its group across its share, and then nothing is re-sorted. */
SCHED_PRIVATE void walk_refresh(gp_sched *s, walk *w) {
        if (!w->fair)
                return;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                bool changed = false;
                for (uint32_t j = 0; j < w->hn[i]; j++) {
                        uint8_t c = tenant_class(s, &s->tn[w->h[i][j].tenant]);
                        changed |= c != w->h[i][j].cls;
                        w->h[i][j].cls = c;
                }
                if (changed)
                        went_heapify(w->h[i], w->hn[i]);
        }
}

/* Bring w->cur[i] up to date (live walks). */
SCHED_PRIVATE void walk_head(gp_sched *s, walk *w, int i) {
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
SCHED_PRIVATE void walk_advance(gp_sched *s, walk *w, int i) {
        if (!w->fair) {
                w->cur[i] = w->cur[i]->next;
                if (w->cur[i])
                        __builtin_prefetch(w->cur[i]); /* as below */
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
        /* its turn comes after the task just taken is dealt with: have it
         * on its way (at 1,000,000 queued a task is seldom in the cache,
         * and a blocked run examines up to backfill_depth of them) */
        if (w->cur[i])
                __builtin_prefetch(w->cur[i]);
}

/* ------------------------------------------------------------------ */
/* queues                                                             */

/* The last task of t's tier before t by id (NULL: none), for a policy
 * that orders a tier by id alone: each tenant's tasks of the tier are
 * sorted by id (tlist), so it is the latest of their predecessors,
 * O(tenants queued in the tier x log n), not a walk of the tier (a task
 * requeued after preemption belongs near its head).  A tenant whose first
 * queued task comes after t, or whose slot before t's place (a hole keeps
 * its id) is not after the best found, is passed by after one read; the
 * predecessor is the nearest live slot before t's place, found by a few
 * steps back, else by the Fenwick tree. */
static stask *tier_pred_by_id(const gp_sched *s, const stask *t) {
        const tier *q = &s->tiers[t->q];
        stask *best = NULL;
        for (uint32_t j = 0; j < q->nact; j++) {
                const tlist *l = &s->tn[q->act[j]].q[t->q];
                if (l->ids[l->lo] >= t->id)
                        continue; /* none of its tasks before t */
                uint32_t a = tl_lower(l, t->id); /* > l->lo */
                if (best && l->ids[a - 1] <= best->id)
                        continue;
                stask *p = NULL;
                for (uint32_t k = a; k > l->lo && a - k < 8 && !p; k--)
                        p = l->v[k - 1];
                if (!p)
                        p = l->v[tl_kth(l, tl_fen_sum(l, a))];
                if (!best || p->id > best->id)
                        best = p;
        }
        return best;
}

/* Count t in its tier and, for a policy that walks the tier (not fair:
 * hybrid and strict walk the tenants' lists, and nothing reads the tier
 * list there), link it at its place.  The policy is fixed for the
 * scheduler's life, so a tier list is either always kept or never. */
static void tier_insert(gp_sched *s, stask *t) {
        tier *q = &s->tiers[t->q];
        if (q->n == 0 && q->pass < s->vtime)
                q->pass = s->vtime;
        q->n++;
        s->gen++;
        if (s->pol->fair)
                return;
        stask *after = q->tail;
        if (after && !s->pol->order_key && after->id > t->id)
                after = tier_pred_by_id(s, t);
        else
                while (after && (after->okey > t->okey || (after->okey == t->okey && after->id > t->id)))
                        after = after->prev;
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
}

static void tier_remove(gp_sched *s, stask *t) {
        tier *q = &s->tiers[t->q];
        q->n--;
        s->gen++;
        if (s->pol->fair)
                return;
        if (t->prev)
                t->prev->next = t->next;
        else
                q->head = t->next;
        if (t->next)
                t->next->prev = t->prev;
        else
                q->tail = t->prev;
        t->prev = t->next = NULL;
}

/* Queue t in its tier t->q and in its tenant's list. 0 or -ENOMEM
 * (nothing changed). */
SCHED_PRIVATE int queue_add(gp_sched *s, stask *t) {
        stenant *T = &s->tn[t->tenant];
        tlist *l = &T->q[t->q];
        if (l->n == 0 && act_add(s, t->q, t->tenant) < 0)
                return -ENOMEM;
        if (tl_insert(l, t) < 0) {
                if (l->n == 0)
                        act_del(s, t->q, t->tenant);
                return -ENOMEM;
        }
        tier_insert(s, t);
        tenant_out(s, T);
        T->queued++;
        tenant_in(s, T);
        return 0;
}

SCHED_PRIVATE void queue_del(gp_sched *s, stask *t) {
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
/* tenant and group settings                                          */

SCHED_PRIVATE bool name_ok(const char *n, bool empty_ok) {
        if (!n || !*n)
                return empty_ok;
        return strnlen(n, NAME_MAX_LEN + 1) <= NAME_MAX_LEN;
}

/* ------------------------------------------------------------------ */
/* tenants and groups: settings and usage                             */

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

int gp_sched_group_usage(gp_sched *s, const char *group, struct gp_sched_group_usage *ret) {
        uint32_t gid;
        if (!group || !*group || intern_find(&s->groups, group, &gid) < 0 || gid >= s->gr_cap)
                return -ENOENT;
        const sgroup *g = &s->gr[gid];
        *ret = (gp_sched_group_view){.queued = g->queued, .gpus_milli = g->run_milli,
                                      .share_milli = group_cap(s, g), .share_pct = g->share_pct};
        return 0;
}
