/* gwstats.h - the gateway's latency, time-to-first-token and tokens/s
 * histograms (gwstats.c).
 *
 * A gw_hist is a fixed array of buckets: no allocation when a value is
 * added, so the gateway's loops record each ended request under the lock
 * they already hold (g->lock).  Bucket bounds run 1, 1.25, 1.5, 2, 2.5, 3,
 * 4, 5, 6, 8 times a power of ten over six decades (seconds: 1 ms to
 * 1000 s; tokens/s: 0.1 to 100000), so a quantile read from it is within
 * one bucket (at most 25%) of the true value, and within [min, max] of
 * what was recorded; values close together (in one bucket) give their mean.  Prometheus sees a coarser subset of the bounds. */
#ifndef GP_GATEWAY_GWSTATS_H
#define GP_GATEWAY_GWSTATS_H

#include "base/buf.h"

#include <jansson.h>
#include <stdint.h>

#define GW_HIST_BOUNDS 61               /* finite upper bounds; one more bucket above the last */

typedef enum { GW_SCALE_SECONDS, GW_SCALE_RATE } gw_scale;

typedef struct gw_hist {
        uint64_t n[GW_HIST_BOUNDS + 1]; /* values in (bound[i-1], bound[i]]; n[GW_HIST_BOUNDS] above the last */
        double bsum[GW_HIST_BOUNDS + 1]; /* the sum of bucket i's values (its mean places a quantile in it) */
        uint64_t count;                 /* values added */
        double sum;                     /* their sum */
        double min, max;                /* the smallest and largest (valid when count > 0) */
} gw_hist;

/* The request timings of one model or one tenant. */
typedef struct gw_timing {
        gw_hist latency;                /* seconds: the request reached the gateway .. its answer ended */
        gw_hist ttft;                   /* seconds: .. the answer's first byte came from the upstream */
        gw_hist rate;                   /* completion tokens / generation time, per request */
} gw_timing;

/* Add v (negative or NaN values are ignored).  No allocation; the caller
 * serialises adds and reads of one histogram. */
void gw_hist_add(gw_hist *h, gw_scale s, double v);
/* The q-quantile (0 < q < 1) of what h holds: the mean of the bucket it
 * falls in, clamped to [min, max]; -1 when h is empty.  Pure. */
double gw_hist_quantile(const gw_hist *h, double q);
/* Bucket i's upper bound (i < GW_HIST_BOUNDS).  Pure. */
double gw_hist_bound(gw_scale s, int i);
/* Append h as Prometheus histogram samples of family name with one label
 * (label="value"; the value is escaped): cumulative _bucket lines at the
 * scale's coarse bounds and +Inf, then _sum and _count.  0 or -ENOMEM. */
int gw_hist_prom(gp_buf *b, const char *name, const char *label, const char *value, const gw_hist *h, gw_scale s);
/* Set the fields "<prefix>_p50" and "<prefix>_p95" of object o (null
 * when h is empty).  0 or -ENOMEM. */
int gw_hist_json(json_t *o, const char *prefix, const gw_hist *h, gw_scale s);

/* Set o's "latency_s_p50/p95", "ttft_s_p50/p95", "tokens_per_s_p50/p95"
 * and "timed_requests" from t.  0 or -ENOMEM. */
int gw_timing_json(json_t *o, const gw_timing *t);
/* Add h's values to into.  Pure. */
void gw_hist_merge(gw_hist *into, const gw_hist *h);
/* The three histogram families <prefix>request_duration_seconds,
 * <prefix>time_to_first_token_seconds and
 * <prefix>generation_tokens_per_second (HELP and TYPE always), with a
 * series label="names[i]" for each t[i] that has values: the first
 * max_named of them by name, the rest together as "other" (label values
 * stay bounded).  0 or -ENOMEM. */
int gw_timing_prom(gp_buf *b, const char *prefix, const char *label, const char *const *names,
                   const gw_timing *const *t, size_t n, size_t max_named);

#endif
