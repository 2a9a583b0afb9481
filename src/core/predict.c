/* predict.c - run-time estimates learned from history (predict.h).
 *
 * Each group is a slot of one table, found by a 64-bit hash of its level
 * and key (FNV-1a over the key's fields; a slot keeps the full hash, so two
 * groups share a slot only if their 64-bit hashes collide).  Statistics per
 * group: the count, and a recency-weighted mean and variance of ln(run ms)
 * (weight max(1/n, 1/RECENT): the first runs count equally, then the last
 * RECENT or so dominate, so a user whose jobs got longer is followed).
 * Probing is linear and at most PROBE slots long; a new group that finds
 * neither its slot nor a free one takes the probed slot with the fewest
 * runs.  Invariant: 0 < used <= cap, cap a power of two.
 */
#include "core/predict.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PROBE 16
#define RECENT 32.0
#define MIN_CAP 64
#define MAX_CAP ((size_t)1 << 26)

typedef struct slot {
        uint64_t h;                 /* 0 = free (no key hashes to 0: see key_hash) */
        int32_t n;
        float mean, var;            /* of ln(run ms), recency-weighted */
} slot;

struct gp_pred {
        slot *v;
        size_t cap, used;
};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++)
                h = (h ^ b[i]) * 1099511628211ULL;
        return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) {
        h = fnv(h, s ? s : "", s ? strlen(s) : 0);
        return fnv(h, "", 1); /* a separator: ("ab","c") is not ("a","bc") */
}

static uint64_t key_hash(int level, const gp_pred_key *k) {
        uint64_t h = fnv(14695981039346656037ULL, &level, sizeof(level));
        if (level <= GP_PRED_TENANT)
                h = fnv_str(h, k->tenant);
        if (level <= GP_PRED_USER)
                h = fnv_str(h, k->user);
        if (level <= GP_PRED_NAME) /* TASK and NAME: not USER (2), whose groups span names */
                h = fnv_str(h, k->name);
        if (level != GP_PRED_NAME)
                h = fnv(h, &k->gpus, sizeof(k->gpus));
        if (level == GP_PRED_TASK)
                h = fnv(h, &k->cmd_hash, sizeof(k->cmd_hash));
        return h ? h : 1;
}

int gp_pred_new(size_t max_entries, gp_pred **ret) {
        if (max_entries == 0 || max_entries > MAX_CAP)
                return -EINVAL;
        size_t cap = MIN_CAP;
        while (cap < max_entries)
                cap <<= 1;
        gp_pred *p = calloc(1, sizeof(*p));
        slot *v = calloc(cap, sizeof(*v));
        if (!p || !v) {
                free(p);
                free(v);
                return -ENOMEM;
        }
        p->v = v;
        p->cap = cap;
        *ret = p;
        return 0;
}

void gp_pred_free(gp_pred *p) {
        if (!p)
                return;
        free(p->v);
        free(p);
}

size_t gp_pred_groups(const gp_pred *p) {
        return p->used;
}

static slot *find(const gp_pred *p, uint64_t h) {
        size_t mask = p->cap - 1;
        for (size_t i = 0, at = (size_t)h & mask; i < PROBE; i++, at = (at + 1) & mask) {
                if (p->v[at].h == h)
                        return &p->v[at];
                if (p->v[at].h == 0)
                        return NULL;
        }
        return NULL;
}

/* h's slot, made if need be (a free one, or the weakest in the probe). */
static slot *take(gp_pred *p, uint64_t h) {
        size_t mask = p->cap - 1;
        slot *weakest = NULL;
        for (size_t i = 0, at = (size_t)h & mask; i < PROBE; i++, at = (at + 1) & mask) {
                slot *s = &p->v[at];
                if (s->h == h)
                        return s;
                if (s->h == 0) {
                        p->used++;
                        *s = (slot){.h = h};
                        return s;
                }
                if (!weakest || s->n < weakest->n)
                        weakest = s;
        }
        *weakest = (slot){.h = h};
        return weakest;
}

void gp_pred_observe(gp_pred *p, const gp_pred_key *k, int64_t run_ms) {
        if (!p || !k || run_ms <= 0)
                return;
        double x = log((double)run_ms);
        for (int level = 0; level < GP_PRED_LEVELS; level++) {
                slot *s = take(p, key_hash(level, k));
                if (s->n < INT32_MAX)
                        s->n++;
                double w = 1.0 / s->n > 1.0 / RECENT ? 1.0 / s->n : 1.0 / RECENT;
                double d = x - s->mean;
                double mean = s->mean + w * d;
                s->var = (float)((1 - w) * (s->var + w * d * d));
                s->mean = (float)mean;
        }
}

int gp_pred_estimate(const gp_pred *p, const gp_pred_key *k, int64_t upper_ms, gp_pred_est *ret) {
        *ret = (gp_pred_est){.level = -1};
        if (!p || !k)
                return -1;
        for (int level = 0; level < GP_PRED_LEVELS; level++) {
                const slot *s = find(p, key_hash(level, k));
                if (!s || s->n < (level == GP_PRED_SIZE ? 1 : GP_PRED_MIN_RUNS))
                        continue;
                double ms = exp((double)s->mean);
                if (ms < 1)
                        ms = 1;
                if (ms > 9.0e15)
                        ms = 9.0e15;
                int64_t est = (int64_t)ms;
                if (upper_ms > 0 && est > upper_ms)
                        est = upper_ms;
                /* more runs, a narrower spread and a nearer group are surer */
                double sd = sqrt(s->var > 0 ? (double)s->var : 0);
                double c = (double)s->n / (s->n + 3.0) / (1.0 + sd) * (1.0 - 0.15 * level);
                *ret = (gp_pred_est){.ms = est, .level = level, .n = s->n, .confidence = c < 0 ? 0 : c};
                return level;
        }
        return -1;
}
