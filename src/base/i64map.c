/* i64map.c - see i64map.h. */
#include "base/i64map.h"

#include <errno.h>
#include <stdlib.h>

static size_t slot(int64_t k, size_t cap) {
        uint64_t x = (uint64_t)k;
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 33;
        return (size_t)x & (cap - 1);
}

void gp_i64map_init(gp_i64map *m) {
        m->keys = NULL;
        m->vals = NULL;
        m->cap = m->used = m->live = 0;
}

void gp_i64map_done(gp_i64map *m) {
        free(m->keys);
        free(m->vals);
        gp_i64map_init(m);
}

void *gp_i64map_get(const gp_i64map *m, int64_t key) {
        if (!m->cap || key <= 0)
                return NULL;
        for (size_t h = slot(key, m->cap);; h = (h + 1) & (m->cap - 1)) {
                if (m->keys[h] == key)
                        return m->vals[h];
                if (m->keys[h] == 0)
                        return NULL;
        }
}

static int resize(gp_i64map *m, size_t cap) {
        int64_t *keys = calloc(cap, sizeof(*keys));
        void **vals = calloc(cap, sizeof(*vals));
        if (!keys || !vals) {
                free(keys);
                free(vals);
                return -ENOMEM;
        }
        for (size_t i = 0; i < m->cap; i++) {
                if (m->keys[i] <= 0)
                        continue;
                size_t h = slot(m->keys[i], cap);
                while (keys[h])
                        h = (h + 1) & (cap - 1);
                keys[h] = m->keys[i];
                vals[h] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
        m->used = m->live;
        return 0;
}

int gp_i64map_put(gp_i64map *m, int64_t key, void *val) {
        if (key <= 0)
                return -EINVAL;
        if (m->cap) {
                for (size_t h = slot(key, m->cap); m->keys[h]; h = (h + 1) & (m->cap - 1))
                        if (m->keys[h] == key) {
                                m->vals[h] = val;
                                return 0;
                        }
        }
        if ((m->used + 1) * 10 > m->cap * 7) {
                size_t cap = m->cap ? m->cap : 16;
                while ((m->live + 1) * 10 > cap * 5)
                        cap *= 2;
                if (resize(m, cap) < 0)
                        return -ENOMEM;
        }
        size_t h = slot(key, m->cap);
        while (m->keys[h] > 0)
                h = (h + 1) & (m->cap - 1);
        if (m->keys[h] == 0)
                m->used++;
        m->keys[h] = key;
        m->vals[h] = val;
        m->live++;
        return 0;
}

void *gp_i64map_del(gp_i64map *m, int64_t key) {
        if (!m->cap || key <= 0)
                return NULL;
        for (size_t h = slot(key, m->cap); m->keys[h]; h = (h + 1) & (m->cap - 1))
                if (m->keys[h] == key) {
                        void *v = m->vals[h];
                        m->keys[h] = -1;
                        m->vals[h] = NULL;
                        m->live--;
                        return v;
                }
        return NULL;
}

void *gp_i64map_next(const gp_i64map *m, size_t *pos, int64_t *ret_key) {
        for (; *pos < m->cap; (*pos)++)
                if (m->keys[*pos] > 0) {
                        if (ret_key)
                                *ret_key = m->keys[*pos];
                        return m->vals[(*pos)++];
                }
        return NULL;
}
