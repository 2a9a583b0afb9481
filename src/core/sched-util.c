/* sched-util.c - the scheduling core's small containers: string interning
 * (tenants, groups, models), the task map by id and the queue-deadline
 * heap.  No scheduling rule lives here. */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* small helpers                                                      */

/* gp_vec_grow for the core's uint32_t capacities, doubling from `first`.
 * A capacity doubled up to `need` stays under 2 * need, so need <= 2^31
 * keeps it a uint32_t; a larger need is refused (NULL, nothing changed). */
SCHED_PRIVATE void *grow_from(void *p, size_t elem, uint32_t *cap, uint32_t need, uint32_t first) {
        if (need <= *cap)
                return p; /* the common case stays inline (bench-core: a call per decision shows) */
        if (need > (UINT32_C(1) << 31))
                return NULL;
        size_t c = *cap;
        void *q = gp_vec_grow(p, &c, need, elem, first);
        if (q)
                *cap = (uint32_t)c;
        return q;
}

SCHED_PRIVATE void *grow(void *p, size_t elem, uint32_t *cap, uint32_t need) {
        return grow_from(p, elem, cap, need, 8);
}

static uint64_t hash_str(const char *s) {
        uint64_t h = 1469598103934665603ULL;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ULL;
        return h;
}

SCHED_PRIVATE void intern_done(intern *in) {
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
SCHED_PRIVATE int intern_get(intern *in, const char *s, uint32_t *ret) {
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

/* ------------------------------------------------------------------ */
/* task map                                                           */

SCHED_PRIVATE int map_put(gp_sched *s, stask *t) {
        int rc = gp_i64map_put(&s->tasks, t->id, t);
        if (rc >= 0 && run_bound(t) > 0)
                s->ntimed++;
        return rc;
}

SCHED_PRIVATE void map_del(gp_sched *s, int64_t id) {
        const stask *t = map_get(s, id);
        if (t && run_bound(t) > 0)
                s->ntimed--;
        gp_i64map_del(&s->tasks, id);
}

/* ------------------------------------------------------------------ */
/* min-heaps by time: queue deadlines, preemption summaries           */

/* Into the min-heap h[0..*n) (grown as needed): 0 or -ENOMEM (h as it was). */
SCHED_PRIVATE int heap_push(heap_ent **h, size_t *n, size_t *cap, int64_t deadline, int64_t id) {
        if (*n == *cap) {
                heap_ent *v = gp_vec_grow(*h, cap, *n + 1, sizeof(*v), 64);
                if (!v)
                        return -ENOMEM;
                *h = v;
        }
        heap_ent *v = *h;
        size_t i = (*n)++;
        while (i > 0) {
                size_t p = (i - 1) / 2;
                if (v[p].deadline <= deadline)
                        break;
                v[i] = v[p];
                i = p;
        }
        v[i] = (heap_ent){deadline, id};
        return 0;
}

/* The least entry of h[0..*n) out (*n > 0). */
SCHED_PRIVATE void heap_pop(heap_ent *h, size_t *n) {
        heap_ent last = h[--*n];
        size_t i = 0, m = *n;
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= m)
                        break;
                if (c + 1 < m && h[c + 1].deadline < h[c].deadline)
                        c++;
                if (last.deadline <= h[c].deadline)
                        break;
                h[i] = h[c];
                i = c;
        }
        if (m)
                h[i] = last;
}

/* ------------------------------------------------------------------ */
/* small helpers                                                      */

/* id of s if interned (0 for NULL or ""), without interning it. */
SCHED_PRIVATE int intern_find(const intern *in, const char *s, uint32_t *ret) {
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
