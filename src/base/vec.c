/* vec.c - see vec.h. */
#include "base/vec.h"

#include <stdint.h>
#include <stdlib.h>

void *gp_vec_grow(void *items, size_t *cap, size_t need, size_t size, size_t first) {
        if (need <= *cap)
                return items;
        if (size == 0)
                return NULL;
        size_t c = *cap ? *cap : (first ? first : 1);
        while (c < need) {
                if (c > SIZE_MAX / 2)
                        return NULL;
                c *= 2;
        }
        if (c > SIZE_MAX / size)
                return NULL;
        void *p = realloc(items, c * size);
        if (!p)
                return NULL;
        *cap = c;
        return p;
}
