/* submit.h - parse and validate a task submission body (POST /api/v1/tasks).
 *
 * Pure: bytes in, a gp_task (without id, state or times) out.  This is the
 * first parser of outside input, so it is strict and bounded: unknown
 * fields, wrong types, out-of-range numbers and oversized strings or lists
 * are refused with a message that names the field.  Fuzzed by
 * fuzz/fuzz-submit.c.  Thread-safe (no shared state).
 */
#ifndef GP_SERVER_SUBMIT_H
#define GP_SERVER_SUBMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/array.h"
#include "core/task.h"

typedef struct gp_submit_limits {
        int default_lease_ttl_s;   /* lease_ttl_s when absent */
        int max_lease_ttl_s;
        int default_max_retries;
        const char *tenant;        /* the caller's tenant (tenant key), NULL = taken from the body */
        int default_priority;      /* tier when the body names none (normally 5) */
        int max_priority;          /* most urgent tier allowed (0 = any) */
        bool clamp_priority;       /* a more urgent request is clamped instead of refused */
        int64_t default_queue_timeout_s; /* queue_timeout_s when absent (0 = none) */
        bool seed_priority;        /* an integer priority is on the seed's 0..100 scale (higher =
                                      more urgent; gp_submit_seed_tier), not a tier 0..9 */
        int max_array_size;        /* most elements of a job array ("array"), 0 = GP_ARRAY_MAX_ELEMS */
} gp_submit_limits;

#define GP_SUBMIT_MAX_ARGS 256
#define GP_SUBMIT_MAX_ARG_BYTES 4096
#define GP_SUBMIT_MAX_ENV 256
#define GP_SUBMIT_MAX_SPEC_BYTES 65536
#define GP_SUBMIT_MAX_SCRIPT_BYTES 49152  /* "script": a batch script stored with the task */
#define GP_SUBMIT_MAX_ARRAY_SCRIPT_BYTES (64 << 20) /* a job array's elements' specs in all, with a script */
/* The script's name in a stored command (argv[3] of the script's runner,
 * see submit.c): how a client recognises a task submitted as a script. */
#define GP_SUBMIT_SCRIPT_ARGV0 "gpupool-script"

/* The tier of a priority on the seed sketch's 0..100 scale (higher is more
 * urgent): (100 - p) * 9 / 100 rounded half up, so 100 -> P0, 50 -> P5,
 * 0 -> P9.  p must be 0..100. */
int gp_submit_seed_tier(int p);
/* Set key of t's spec (JSON text) to value (stolen; NULL: out of memory).
 * 0 or -ENOMEM (the spec unchanged). */
struct json_t;
int gp_submit_spec_set(gp_task *t, const char *key, struct json_t *value);
/* A stored task's elastic_min_nodes/max_nodes, from its spec. */
void gp_submit_spec_nodes(gp_task *t);

/* Parse body[0..len) into *ret (zeroed first; ret->spec is malloc'd for a
 * batch task, NULL for a lease: free with gp_task_done).  The tenant is
 * taken from "tenant_id" (default "default").
 * 0, or -EINVAL with a message in err ("priority: must be 0..9 or a name
 * (critical, high, normal, low, background), got 12"), -EPERM when the
 * body names another tenant than lim->tenant or a tier more urgent than
 * lim->max_priority (unless clamped), or -ENOMEM.
 * On failure *ret holds nothing to free. */
int gp_submit_parse(const char *body, size_t len, const gp_submit_limits *lim, gp_task *ret, char *err,
                    size_t errlen);

/* The same, also taking "array" (a job array spec, core/array.h: "0-1999%50",
 * "1,3,5-9", "0-15:4"): with ret_array non-NULL an "array" field is parsed
 * into *ret_array (zeroed when absent; free with gp_array_spec_done), the
 * task being the template of every element (batch tasks only: an array
 * without "command" is refused); with ret_array NULL, "array" is refused.
 * Errors as gp_submit_parse (a spec over lim->max_array_size elements is
 * -EINVAL, message naming max_array_size).  On failure neither output holds
 * anything to free. */
int gp_submit_parse_array(const char *body, size_t len, const gp_submit_limits *lim, gp_task *ret,
                          gp_array_spec *ret_array, char *err, size_t errlen);

#endif
