/* array.h - job array specs, as Slurm's sbatch --array takes them.
 *
 * Pure: text in, a sorted list of element indices and a throttle out.  No
 * I/O, no globals; thread-safe.  Fuzzed through fuzz/fuzz-submit.c (the
 * submit body's "array" field) and unit-tested in tests/unit/test-array.c.
 *
 * Grammar (Slurm's): ITEM[,ITEM]...[%LIMIT] where ITEM is N, A-B or A-B:STEP;
 * indices are 0..GP_ARRAY_INDEX_MAX, A <= B, STEP >= 1; LIMIT >= 1 caps how
 * many elements run at once.  Indices given twice count once.  The element
 * count is bounded by the caller's max (at most GP_ARRAY_MAX_ELEMS) before
 * anything is allocated, so "0-4000000" costs nothing to refuse.
 */
#ifndef GP_CORE_ARRAY_H
#define GP_CORE_ARRAY_H

#include <stddef.h>
#include <stdint.h>

#define GP_ARRAY_INDEX_MAX 9999999  /* largest element index (Slurm's MaxArraySize is far below) */
#define GP_ARRAY_MAX_ELEMS 100000   /* hard bound on elements per array (max_array_size's ceiling) */
#define GP_ARRAY_SPEC_MAX 1024      /* bytes of a spec */

typedef struct gp_array_spec {
        int32_t *idx;               /* n indices, ascending, distinct; owned */
        size_t n;                   /* 0 = no array */
        int limit;                  /* %N: most elements running at once, 0 = no cap */
} gp_array_spec;

/* Parse s[0..len) into *ret (idx malloc'd; free with gp_array_spec_done).
 * max_elems (1..GP_ARRAY_MAX_ELEMS) bounds the count.  0, or -EINVAL with a
 * message in err ("array: step must be >= 1 in '0-15:0'"), -E2BIG (more
 * than max_elems elements, message in err), -ENOMEM.  *ret written only on
 * success. */
int gp_array_spec_parse(const char *s, size_t len, size_t max_elems, gp_array_spec *ret, char *err,
                        size_t errlen);

/* A task or an element of a job array as Slurm names it: "ID" (a task id
 * >= 1; *index -1) or "ID_INDEX" (element INDEX, 0..GP_ARRAY_INDEX_MAX, of
 * job array ID: 12_7).  0, or -EINVAL with nothing written.  What the CLI
 * takes (status, cancel, logs, history -j) and the runs API's ?job=. */
int gp_array_ref_parse(const char *s, int64_t *id, int64_t *index);

/* Free idx; takes NULL and a zeroed spec; leaves the spec zeroed. */
void gp_array_spec_done(gp_array_spec *a);

/* Write the indices back in Slurm's compact form ("0-15:4,17%2"): runs of
 * three or more with one step become A-B[:STEP].  Always NUL-terminates;
 * a result that does not fit ends in "...".  Returns the length it needed
 * (like snprintf). */
size_t gp_array_spec_format(const int32_t *idx, size_t n, int limit, char *buf, size_t size);

#endif
