/* vec.h - growing an array by doubling, written once.
 *
 * A growable array is three fields of its owner (items, n, cap); gp_vec_grow
 * makes room, the owner appends:
 *
 *     gp_task **p = gp_vec_grow(s->items, &s->cap, s->n + 1, sizeof *s->items, 64);
 *     if (!p)
 *             return -ENOMEM;
 *     s->items = p;
 *     s->items[s->n++] = t;
 *
 * Pure; no state of its own; thread-safe as its arguments are.
 */
#ifndef GP_BASE_VEC_H
#define GP_BASE_VEC_H

#include <stddef.h>

/* Room for at least `need` elements of `size` bytes in `items` (capacity
 * *cap; items may be NULL when *cap is 0).  When *cap < need the capacity
 * doubles (starting at `first`, at least 1) until it holds `need`.  Returns
 * the array to use from now on (items itself when it already had room) and
 * updates *cap; or NULL (items and *cap unchanged, nothing freed) when the
 * memory is short or need * size overflows. */
void *gp_vec_grow(void *items, size_t *cap, size_t need, size_t size, size_t first);

#endif
