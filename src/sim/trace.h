/* trace.h - job traces for the simulator: a strict CSV parser and the
 * tenant map (trace tenant -> priority and tenant name).
 *
 * Trace format (docs/simulate.md): the header line
 *   job_id,submit_time_s,duration_s,num_gpus,tenant
 * then one job per line, sorted by submit_time_s.  Integers are plain
 * decimal (no sign, no spaces, no exponent); tenant is 1..63 characters of
 * letters, digits, '-', '_', '.' (the daemon's tenant ids).  Lines end with
 * LF or CRLF; only the last line may be empty.  Every bad line is an error
 * naming FILE:LINE and the column; nothing is guessed.
 *
 * Map format: lines "tenant,priority" or "tenant,priority,new_tenant";
 * tenant "*" is the default for tenants not listed (else priority 5, name
 * kept); priority is 0..9 or critical/high/normal/low/background; blank
 * lines and lines starting with '#' are ignored; spaces around fields too.
 *
 * Plain data; no threads; no I/O except gp_*_load reading the named file.
 */
#ifndef GP_SIM_TRACE_H
#define GP_SIM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GP_TRACE_MAX_BYTES ((size_t)1 << 30)   /* file size */
#define GP_TRACE_MAX_LINE 1024                  /* bytes per line, without the newline */
#define GP_TRACE_MAX_JOBS 20000000
#define GP_TRACE_MAX_TENANTS 4096               /* distinct tenants in a trace or a map */
#define GP_TRACE_MAX_ID 1000000000000000LL      /* job_id <= 10^15 */
#define GP_TRACE_MAX_SECONDS 10000000000LL      /* submit_time_s, duration_s <= 10^10 (317 years) */

typedef struct gp_trace_job {
        int64_t job_id;       /* as in the file; unique */
        int64_t submit_s;     /* >= 0, non-decreasing in file order */
        int64_t duration_s;   /* >= 1 */
        int gpus;             /* 1..limits.max_gpus */
        uint32_t tenant;      /* index into gp_trace.tenants */
        int line;             /* line number in the file */
} gp_trace_job;

typedef struct gp_trace {
        gp_trace_job *jobs;   /* n jobs in file order (= submission order) */
        size_t n;
        char **tenants;       /* ntenants distinct names, in order of first use */
        uint32_t ntenants;
        size_t skipped;       /* jobs left out as wider than max_gpus (skip_oversize) */
        int64_t skipped_gpu_s;/* their GPUs x duration */
        int first_skipped_line; /* line of the first one, 0 if none */
} gp_trace;

typedef struct gp_trace_limits {
        int max_gpus;         /* widest job that can run (>= 1) */
        const char *max_gpus_why; /* phrase for messages, e.g. "the GPUs of one node"; may be NULL */
        bool skip_oversize;   /* leave wider jobs out (counted) instead of failing */
} gp_trace_limits;

/* Parse a trace held in memory; `name` stands for the file in messages.
 * On success *ret is a new trace (gp_trace_free).  On failure returns
 * -GP_EPARSE (bad content), -E2BIG (over a GP_TRACE_MAX_* limit) or
 * -ENOMEM, writes "NAME:LINE: column: what is wrong" (or "NAME: what") into
 * err (always NUL-terminated when errlen > 0) and leaves *ret alone.
 * Thread-safe (no shared state). */
int gp_trace_parse(const char *name, const char *data, size_t len, const gp_trace_limits *lim,
                   gp_trace **ret, char *err, size_t errlen);
/* The same from a file (at most GP_TRACE_MAX_BYTES).  Also -ENOENT,
 * -EACCES, -EIO and the like when the file cannot be read. */
int gp_trace_load(const char *path, const gp_trace_limits *lim, gp_trace **ret, char *err, size_t errlen);
/* Takes NULL. */
void gp_trace_free(gp_trace *t);

typedef struct gp_trace_map gp_trace_map;

/* Parse a tenant map (format above).  Same error contract as
 * gp_trace_parse; a map is at most 1 MiB. */
int gp_trace_map_parse(const char *name, const char *data, size_t len, gp_trace_map **ret, char *err,
                       size_t errlen);
int gp_trace_map_load(const char *path, gp_trace_map **ret, char *err, size_t errlen);
/* Priority and tenant name for a trace tenant.  m may be NULL (priority 5,
 * name kept).  *ret_tenant points into m or at `tenant`. */
void gp_trace_map_lookup(const gp_trace_map *m, const char *tenant, int *ret_priority, const char **ret_tenant);
/* Takes NULL. */
void gp_trace_map_free(gp_trace_map *m);

#endif
