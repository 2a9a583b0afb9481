/* fuzz-fields.h - the fuzz targets' reading of an input as fields
 * separated by '\n' (header only: each target is one program). */
#ifndef GP_FUZZ_FIELDS_H
#define GP_FUZZ_FIELDS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The next field of [*p, end) as a NUL-terminated copy in a buffer of
 * exactly its size (ASan catches a read past it); *p moves past its '\n'.
 * NULL when out of memory. */
static inline char *fuzz_field(const uint8_t **p, const uint8_t *end) {
        const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
        const uint8_t *e = nl ? nl : end;
        size_t n = (size_t)(e - *p);
        char *s = malloc(n + 1);
        if (s) {
                memcpy(s, *p, n);
                s[n] = '\0';
        }
        *p = nl ? nl + 1 : end;
        return s;
}

#endif
