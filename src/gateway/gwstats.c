/* gwstats.c - fixed-bucket histograms of the gateway's request timings
 * (gwstats.h).
 *
 * Invariants: h->count is the sum of h->n[]; min <= max once count > 0;
 * adding never allocates.  The bounds are computed, not stored: bucket i
 * (i < 60) ends at BASE[i % 10] * 10^(i / 10 + lowest exponent), bucket 60
 * at 10^(6 + lowest exponent); the last bucket has no upper bound. */
#include "gateway/gwstats.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

static const double BASE[10] = {1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8};
static const double POW10[] = {1e-3, 1e-2, 1e-1, 1, 1e1, 1e2, 1e3, 1e4, 1e5};

/* Prometheus' bucket bounds: a subset of the fine ones (each is one). */
static const double PROM_SECONDS[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
static const double PROM_RATE[] = {1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000};

double gw_hist_bound(gw_scale s, int i) {
        int e0 = s == GW_SCALE_SECONDS ? 0 : 2; /* index into POW10: 1e-3 s, or 0.1 tokens/s */
        if (i >= GW_HIST_BOUNDS - 1)
                return POW10[e0 + 6];
        return BASE[i % 10] * POW10[e0 + i / 10];
}

void gw_hist_add(gw_hist *h, gw_scale s, double v) {
        if (!(v >= 0)) /* negative or NaN */
                return;
        int lo = 0, hi = GW_HIST_BOUNDS; /* the first bucket whose bound is >= v, in [lo, hi] */
        while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (gw_hist_bound(s, mid) >= v)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        h->n[lo]++;
        h->bsum[lo] += v;
        if (h->count == 0 || v < h->min)
                h->min = v;
        if (h->count == 0 || v > h->max)
                h->max = v;
        h->count++;
        h->sum += v;
}

double gw_hist_quantile(const gw_hist *h, double q) {
        if (h->count == 0)
                return -1;
        double want = q * (double)h->count, seen = 0;
        int i = 0;
        for (; i < GW_HIST_BOUNDS; i++) {
                if (h->n[i] && seen + (double)h->n[i] >= want)
                        break;
                seen += (double)h->n[i];
        }
        /* the bucket's mean: exact for values close together, off by less
         * than the bucket's width otherwise; above the last bound the max */
        double v = i == GW_HIST_BOUNDS ? h->max : h->bsum[i] / (double)h->n[i];
        return v < h->min ? h->min : v > h->max ? h->max : v;
}

/* label="value" with \, " and newlines escaped as the text format wants. */
static int label_pair(gp_buf *b, const char *label, const char *value) {
        if (gp_buf_printf(b, "%s=\"", label) < 0)
                return -ENOMEM;
        for (const char *p = value; *p; p++) {
                const char *e = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
                if (e ? gp_buf_append(b, e, 2) < 0 : gp_buf_append(b, p, 1) < 0)
                        return -ENOMEM;
        }
        return gp_buf_append(b, "\"", 1) < 0 ? -ENOMEM : 0;
}

int gw_hist_prom(gp_buf *b, const char *name, const char *label, const char *value, const gw_hist *h, gw_scale s) {
        const double *les = s == GW_SCALE_SECONDS ? PROM_SECONDS : PROM_RATE;
        _Static_assert(sizeof(PROM_SECONDS) == sizeof(PROM_RATE), "one count of coarse bounds for both scales");
        const size_t nles = sizeof(PROM_SECONDS) / sizeof(PROM_SECONDS[0]);
        uint64_t cum = 0;
        int i = 0;
        for (size_t k = 0; k <= nles; k++) {
                if (k < nles)
                        for (; i < GW_HIST_BOUNDS && gw_hist_bound(s, i) <= les[k] * (1 + 1e-9); i++)
                                cum += h->n[i];
                else
                        cum = h->count;
                if (gp_buf_printf(b, "%s_bucket{", name) < 0 || label_pair(b, label, value) < 0)
                        return -ENOMEM;
                int r = k < nles ? gp_buf_printf(b, ",le=\"%g\"} %" PRIu64 "\n", les[k], cum)
                                 : gp_buf_printf(b, ",le=\"+Inf\"} %" PRIu64 "\n", cum);
                if (r < 0)
                        return -ENOMEM;
        }
        if (gp_buf_printf(b, "%s_sum{", name) < 0 || label_pair(b, label, value) < 0 ||
            gp_buf_printf(b, "} %.6f\n%s_count{", h->sum, name) < 0 || label_pair(b, label, value) < 0 ||
            gp_buf_printf(b, "} %" PRIu64 "\n", h->count) < 0)
                return -ENOMEM;
        return 0;
}

static json_t *quantile_json(const gw_hist *h, gw_scale s, double q) {
        double v = gw_hist_quantile(h, q);
        /* to 0.1 ms (or 0.0001 tokens/s): the buckets are far coarser */
        return v < 0 ? json_null() : json_real(v == 0 ? 0 : round(v * 1e4) / 1e4);
}

int gw_hist_json(json_t *o, const char *prefix, const gw_hist *h, gw_scale s) {
        char k[64];
        snprintf(k, sizeof(k), "%s_p50", prefix);
        if (json_object_set_new(o, k, quantile_json(h, s, 0.5)) < 0)
                return -ENOMEM;
        snprintf(k, sizeof(k), "%s_p95", prefix);
        return json_object_set_new(o, k, quantile_json(h, s, 0.95)) < 0 ? -ENOMEM : 0;
}

int gw_timing_json(json_t *o, const gw_timing *t) {
        if (gw_hist_json(o, "latency_s", &t->latency, GW_SCALE_SECONDS) < 0 ||
            gw_hist_json(o, "ttft_s", &t->ttft, GW_SCALE_SECONDS) < 0 ||
            gw_hist_json(o, "tokens_per_s", &t->rate, GW_SCALE_RATE) < 0 ||
            json_object_set_new(o, "timed_requests", json_integer((json_int_t)t->latency.count)) < 0)
                return -ENOMEM;
        return 0;
}

static const gw_hist *part(const gw_timing *t, int which) {
        return which == 0 ? &t->latency : which == 1 ? &t->ttft : &t->rate;
}

void gw_hist_merge(gw_hist *into, const gw_hist *h) {
        if (!h->count)
                return;
        for (int i = 0; i <= GW_HIST_BOUNDS; i++) {
                into->n[i] += h->n[i];
                into->bsum[i] += h->bsum[i];
        }
        if (!into->count || h->min < into->min)
                into->min = h->min;
        if (!into->count || h->max > into->max)
                into->max = h->max;
        into->count += h->count;
        into->sum += h->sum;
}

int gw_timing_prom(gp_buf *b, const char *prefix, const char *label, const char *const *names,
                   const gw_timing *const *t, size_t n, size_t max_named) {
        static const char *const fam[3] = {"request_duration_seconds", "time_to_first_token_seconds",
                                           "generation_tokens_per_second"};
        static const char *const help[3] = {
                "Time from a gateway request's arrival to the end of its answer (answered requests, status 200).",
                "Time from a gateway request's arrival to the first byte of its answer from the upstream.",
                "Completion tokens per second of generation, per answered request (streamed: from the first byte)."};
        for (int w = 0; w < 3; w++) {
                char name[128];
                snprintf(name, sizeof(name), "%s%s", prefix, fam[w]);
                if (gp_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help[w], name) < 0)
                        return -ENOMEM;
                gw_hist other = {0};
                size_t named = 0;
                for (size_t i = 0; i < n; i++) {
                        const gw_hist *h = part(t[i], w);
                        if (!h->count)
                                continue;
                        if (named == max_named) {
                                gw_hist_merge(&other, h);
                                continue;
                        }
                        named++;
                        if (gw_hist_prom(b, name, label, names[i], h, w == 2 ? GW_SCALE_RATE : GW_SCALE_SECONDS) < 0)
                                return -ENOMEM;
                }
                if (other.count &&
                    gw_hist_prom(b, name, label, "other", &other, w == 2 ? GW_SCALE_RATE : GW_SCALE_SECONDS) < 0)
                        return -ENOMEM;
        }
        return 0;
}
