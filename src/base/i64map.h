/* i64map.h - hash map from positive int64 keys to pointers.
 * Open addressing with linear probing; keys must be > 0.  Embedded by value
 * (gp_i64map_init / gp_i64map_done; done does not free the values).
 * Not thread-safe. */
#ifndef GP_BASE_I64MAP_H
#define GP_BASE_I64MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct gp_i64map {
        int64_t *keys;   /* 0 empty, -1 deleted */
        void **vals;
        size_t cap, used, live;
} gp_i64map;

void gp_i64map_init(gp_i64map *m);
void gp_i64map_done(gp_i64map *m);
/* NULL if absent. */
void *gp_i64map_get(const gp_i64map *m, int64_t key);
/* Insert or replace. 0, -EINVAL (key <= 0), -ENOMEM. */
int gp_i64map_put(gp_i64map *m, int64_t key, void *val);
/* Remove; returns the value or NULL. */
void *gp_i64map_del(gp_i64map *m, int64_t key);
/* Iterate: start with *pos = 0; returns the next value or NULL at the end. */
void *gp_i64map_next(const gp_i64map *m, size_t *pos, int64_t *ret_key);

#endif
