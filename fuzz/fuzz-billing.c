/* fuzz-billing.c - libFuzzer target for the pricing module (core/billing.c):
 * the money and month text parsers (config values, credit bodies, query
 * strings) and gp_bill_price over arbitrary records and prices.
 *
 * Input: a first line of text, fed to gp_bill_parse_micros and
 * gp_bill_month_parse; the rest is raw bytes read as up to 64 segments, 8
 * token records, and the prices, tiers and windows (each field taken from
 * the bytes, within what the config loader and the store accept).
 * Checked beyond "no crash, no leak, no UB": a parsed amount is within
 * its bound and prints back to the same value; a month round-trips; an
 * invoice's total is the sum of its lines, its GPU time the sum of the
 * segments', the discount never positive, and prices and usage that are
 * all non-negative never give a negative total.  Any violation aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/billing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct rd {
        const uint8_t *p;
        size_t n;
} rd;

static uint64_t take(rd *r, int bytes) {
        uint64_t v = 0;
        for (int i = 0; i < bytes; i++) {
                v = v << 8 | (r->n ? *r->p : 0);
                if (r->n) {
                        r->p++;
                        r->n--;
                }
        }
        return v;
}

static void check_text(const char *s, size_t n) {
        int64_t v;
        int rc = gp_bill_parse_micros(s, n, GP_BILL_MONEY_MAX, &v);
        if (rc == 0) {
                char b[48];
                int64_t back;
                if (v < 0 || v > GP_BILL_MONEY_MAX)
                        abort();
                gp_bill_format_micros(v, b, sizeof(b));
                if (gp_bill_parse_micros(b, strlen(b), GP_BILL_MONEY_MAX, &back) != 0 || back != v)
                        abort();
        } else if (rc != -EINVAL && rc != -ERANGE) {
                abort();
        }
        char z[16];
        if (n < sizeof(z)) {
                memcpy(z, s, n);
                z[n] = '\0';
                int m;
                if (gp_bill_month_parse(z, &m) == 0) {
                        char b[16];
                        gp_bill_month_format(m, b, sizeof(b));
                        if (strcmp(b, z) || gp_bill_month_of(gp_bill_month_start_ms(m)) != m)
                                abort();
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const uint8_t *nl = memchr(data, '\n', size);
        size_t tl = nl ? (size_t)(nl - data) : size;
        check_text((const char *)data, tl);
        rd r = {nl ? nl + 1 : data + size, nl ? size - tl - 1 : 0};

        gp_bill_prices p;
        memset(&p, 0, sizeof(p));
        static const char *const globs[] = {"*", "*A100*", "A?00", "[AB]*", "H100", ""};
        p.n_gpu = (int)(take(&r, 1) % 4);
        for (int i = 0; i < p.n_gpu; i++) {
                snprintf(p.gpu[i].gpu_model, sizeof(p.gpu[i].gpu_model), "%s", globs[take(&r, 1) % 6]);
                p.gpu[i].per_gpu_hour = (int64_t)(take(&r, 5) % (GP_BILL_MONEY_MAX + 1));
        }
        p.n_tokens = (int)(take(&r, 1) % 3);
        for (int i = 0; i < p.n_tokens; i++) {
                snprintf(p.tokens[i].model, sizeof(p.tokens[i].model), "%s", globs[take(&r, 1) % 6]);
                p.tokens[i].per_1k_prompt = (int64_t)(take(&r, 5) % (GP_BILL_MONEY_MAX + 1));
                p.tokens[i].per_1k_completion = (int64_t)(take(&r, 5) % (GP_BILL_MONEY_MAX + 1));
        }
        p.n_tiers = (int)(take(&r, 1) % 4);
        int64_t h = 0;
        for (int i = 0; i < p.n_tiers; i++) {
                h += 1 + (int64_t)(take(&r, 3) % 100000);
                p.tiers[i].gpu_hours = h;
                p.tiers[i].factor_ppm = (int64_t)(take(&r, 3) % 1000001);
        }
        p.n_windows = (int)(take(&r, 1) % 3);
        for (int i = 0; i < p.n_windows; i++) {
                p.windows[i].start_min = (int)(take(&r, 2) % 1440);
                p.windows[i].end_min = (int)(take(&r, 2) % 1440);
                if (p.windows[i].end_min == p.windows[i].start_min)
                        p.windows[i].end_min = (p.windows[i].start_min + 1) % 1440;
                p.windows[i].multiplier_ppm = (int64_t)(take(&r, 4) % 100000001);
        }
        p.min_billing_ms = (int64_t)(take(&r, 3) % 86401) * 1000;

        gp_bill_segment segs[64];
        gp_bill_tokens toks[8];
        size_t ns = take(&r, 1) % 65, nt = take(&r, 1) % 9;
        static const char *const names[] = {"NVIDIA A100", "B200", "H100", "", "A800"};
        int64_t total_gpu_ms = 0;
        for (size_t i = 0; i < ns; i++) {
                gp_bill_segment *g = &segs[i];
                memset(g, 0, sizeof(*g));
                g->task_id = (int64_t)(take(&r, 1) % 8) + 1;
                snprintf(g->gpu_model, sizeof(g->gpu_model), "%s", names[take(&r, 1) % 5]);
                g->gpus_milli = (int64_t)(take(&r, 2) % (GP_MAX_GPUS * 1000 + 2));
                g->start_ms = (int64_t)(take(&r, 6) % ((int64_t)1 << 42));
                g->end_ms = g->start_ms + (int64_t)(take(&r, 5) % (GP_BILL_SPAN_MAX_MS + 2));
                g->run_start_ms = g->start_ms - (int64_t)(take(&r, 4) % 1000000);
                if (g->run_start_ms < 0)
                        g->run_start_ms = 0;
                g->gpu_ms = gp_bill_gpu_ms(g->start_ms, g->end_ms, g->gpus_milli);
                g->end_kind = (int)(take(&r, 1) % 3);
                g->month = 202611;
                total_gpu_ms += g->gpu_ms;
        }
        for (size_t i = 0; i < nt; i++) {
                memset(&toks[i], 0, sizeof(toks[i]));
                snprintf(toks[i].model, sizeof(toks[i].model), "%s", names[take(&r, 1) % 5]);
                toks[i].prompt_tokens = (int64_t)(take(&r, 8) % ((uint64_t)INT64_MAX / 4));
                toks[i].completion_tokens = (int64_t)(take(&r, 3));
                toks[i].month = 202611;
        }
        gp_bill_invoice inv;
        int rc = gp_bill_price(&p, NULL, segs, ns, toks, nt, &inv);
        if (rc == -ERANGE || rc == -ENOMEM)
                return 0;
        if (rc != 0)
                abort();
        int64_t sum = 0, gpu = 0;
        for (size_t i = 0; i < inv.nlines; i++) {
                sum += inv.lines[i].amount_cents;
                if (inv.lines[i].kind == GP_BILL_LINE_GPU)
                        gpu += inv.lines[i].gpu_ms;
                if (inv.lines[i].kind == GP_BILL_LINE_DISCOUNT && inv.lines[i].amount_cents > 0)
                        abort();
        }
        if (sum != inv.total_cents || gpu != total_gpu_ms || inv.gpu_ms != total_gpu_ms || inv.total_cents < 0)
                abort();
        for (size_t i = 0; i < ns; i++)
                if (gp_bill_segment_list_micros(&p, NULL, &segs[i]) < 0)
                        abort();
        gp_bill_invoice_done(&inv);
        return 0;
}
