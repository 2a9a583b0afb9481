/* test-billing.c - the pricing rules (core/billing.h), including the
 * worked example of docs/billing.md, figure for figure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "core/billing.h"

#define H (3600 * 1000LL)
#define MIN (60 * 1000LL)

static gp_bill_prices doc_prices(void) {
        gp_bill_prices p;
        memset(&p, 0, sizeof(p));
        p.enabled = true;
        gp_strlcpy(p.currency, "USD", sizeof(p.currency));
        p.min_billing_ms = 60 * 1000;
        gp_strlcpy(p.gpu[0].gpu_model, "*A100*", sizeof(p.gpu[0].gpu_model));
        p.gpu[0].per_gpu_hour = 2000000; /* 2.00 */
        gp_strlcpy(p.gpu[1].gpu_model, "*", sizeof(p.gpu[1].gpu_model));
        p.gpu[1].per_gpu_hour = 1000000; /* 1.00 */
        p.n_gpu = 2;
        gp_strlcpy(p.tokens[0].model, "llama*", sizeof(p.tokens[0].model));
        p.tokens[0].per_1k_prompt = 500;      /* 0.0005 */
        p.tokens[0].per_1k_completion = 1500; /* 0.0015 */
        p.n_tokens = 1;
        p.tiers[0] = (gp_bill_tier){100, 900000};
        p.tiers[1] = (gp_bill_tier){500, 800000};
        p.n_tiers = 2;
        gp_strlcpy(p.windows[0].name, "night", sizeof(p.windows[0].name));
        p.windows[0].start_min = 22 * 60;
        p.windows[0].end_min = 6 * 60;
        gp_strlcpy(p.windows[0].tz, "UTC", sizeof(p.windows[0].tz));
        p.windows[0].multiplier_ppm = 500000; /* 0.5 */
        p.n_windows = 1;
        return p;
}

static gp_bill_segment seg(int64_t task, const char *model, int64_t milli, int64_t start, int64_t end, int kind) {
        gp_bill_segment s;
        memset(&s, 0, sizeof(s));
        s.task_id = task;
        gp_strlcpy(s.tenant, "acme", sizeof(s.tenant));
        gp_strlcpy(s.gpu_model, model, sizeof(s.gpu_model));
        s.gpus_milli = milli;
        s.start_ms = start;
        s.end_ms = end;
        s.run_start_ms = start;
        s.gpu_ms = gp_bill_gpu_ms(start, end, milli);
        s.end_kind = kind;
        s.month = gp_bill_month_of(end);
        return s;
}

static const gp_bill_line *line(const gp_bill_invoice *inv, int kind, const char *name) {
        for (size_t i = 0; i < inv->nlines; i++)
                if (inv->lines[i].kind == kind && !strcmp(inv->lines[i].name, name))
                        return &inv->lines[i];
        return NULL;
}

/* docs/billing.md, "A worked example": the same records, the same cents. */
static void test_worked_example_of_the_docs_gives_169_52(void **st) {
        (void)st;
        gp_bill_prices p = doc_prices();
        int64_t nov = gp_bill_month_start_ms(202611);
        gp_bill_segment s[] = {
                /* task 1: two A100s, Nov 2 10:00 -> Nov 4 10:00 (two nights of 8 h) */
                seg(1, "NVIDIA A100-SXM4-80GB", 2000, nov + 1 * 24 * H + 10 * H, nov + 3 * 24 * H + 10 * H,
                    GP_BILL_TASK_END),
                /* task 2: one RTX 4090, Nov 10 12:00 -> 22:00, crosses 100 GPU-hours */
                seg(2, "NVIDIA GeForce RTX 4090", 1000, nov + 9 * 24 * H + 12 * H, nov + 9 * 24 * H + 22 * H,
                    GP_BILL_TASK_END),
                /* task 3: half a 4090 for 20 s: billed the 60 s minimum */
                seg(3, "NVIDIA GeForce RTX 4090", 500, nov + 11 * 24 * H + 12 * H, nov + 11 * 24 * H + 12 * H + 20000,
                    GP_BILL_TASK_END),
        };
        gp_bill_tokens t;
        memset(&t, 0, sizeof(t));
        gp_strlcpy(t.tenant, "acme", sizeof(t.tenant));
        gp_strlcpy(t.model, "llama-3-8b", sizeof(t.model));
        t.prompt_tokens = 120000;
        t.completion_tokens = 30000;
        gp_bill_invoice inv;
        gp_bill_zones z = {{NULL}};
        /* records in any order give the same invoice */
        gp_bill_segment rev[] = {s[2], s[0], s[1]};
        assert_int_equal(gp_bill_price(&p, &z, rev, 3, &t, 1, &inv), 0);
        assert_int_equal(inv.nlines, 4);
        const gp_bill_line *a100 = line(&inv, GP_BILL_LINE_GPU, "NVIDIA A100-SXM4-80GB");
        const gp_bill_line *r4090 = line(&inv, GP_BILL_LINE_GPU, "NVIDIA GeForce RTX 4090");
        const gp_bill_line *disc = line(&inv, GP_BILL_LINE_DISCOUNT, "");
        const gp_bill_line *tok = line(&inv, GP_BILL_LINE_TOKENS, "llama-3-8b");
        assert_non_null(a100);
        assert_non_null(r4090);
        assert_non_null(disc);
        assert_non_null(tok);
        assert_int_equal(a100->gpu_ms, 96 * H);            /* 96 GPU-hours */
        assert_int_equal(a100->amount_cents, 16000);       /* 64 h x 2.00 + 32 h x 2.00 x 0.5 */
        assert_int_equal(r4090->gpu_ms, 10 * H + 10000);   /* 10 h + 20 s x 0.5 */
        assert_int_equal(r4090->billed_gpu_ms, 10 * H + 30000); /* the minimum: 60 s x 0.5 */
        assert_int_equal(r4090->amount_cents, 1001);       /* 10.008333 h x 1.00 */
        assert_int_equal(disc->amount_cents, -60);         /* 6.008333 h x 1.00 x 0.1 */
        assert_int_equal(tok->amount_cents, 11);           /* 120 x 0.0005 + 30 x 0.0015 = 0.105 */
        assert_int_equal(inv.total_cents, 16952);
        assert_int_equal(inv.tasks, 3);
        /* order of lines: GPU lines by name, the discount, tokens */
        assert_int_equal(inv.lines[0].kind, GP_BILL_LINE_GPU);
        assert_string_equal(inv.lines[0].name, "NVIDIA A100-SXM4-80GB");
        assert_int_equal(inv.lines[2].kind, GP_BILL_LINE_DISCOUNT);
        assert_int_equal(inv.lines[3].kind, GP_BILL_LINE_TOKENS);
        gp_bill_invoice inv2;
        assert_int_equal(gp_bill_price(&p, &z, s, 3, &t, 1, &inv2), 0);
        assert_int_equal(inv2.total_cents, inv.total_cents);
        gp_bill_invoice_done(&inv);
        gp_bill_invoice_done(&inv2);
}

static void test_segments_of_a_run_cost_the_same_as_the_whole_run(void **st) {
        (void)st;
        gp_bill_prices p = doc_prices();
        gp_bill_zones z = {{NULL}};
        int64_t t0 = gp_bill_month_start_ms(202611) + 5 * H;
        gp_bill_segment whole = seg(7, "A100", 1000, t0, t0 + 20 * H, GP_BILL_TASK_END);
        gp_bill_segment parts[4];
        for (int i = 0; i < 4; i++) {
                parts[i] = seg(7, "A100", 1000, t0 + i * 5 * H, t0 + (i + 1) * 5 * H,
                               i == 3 ? GP_BILL_TASK_END : GP_BILL_INTERVAL);
                parts[i].run_start_ms = t0;
        }
        gp_bill_invoice a, b;
        assert_int_equal(gp_bill_price(&p, &z, &whole, 1, NULL, 0, &a), 0);
        assert_int_equal(gp_bill_price(&p, &z, parts, 4, NULL, 0, &b), 0);
        assert_int_equal(a.total_cents, b.total_cents);
        assert_int_equal(a.gpu_ms, b.gpu_ms);
        assert_int_equal(b.tasks, 1);
        gp_bill_invoice_done(&a);
        gp_bill_invoice_done(&b);
}

static void test_minimum_period_applies_only_when_the_task_ends(void **st) {
        (void)st;
        gp_bill_prices p = doc_prices();
        p.n_windows = 0;
        p.n_tiers = 0;
        p.min_billing_ms = 3600 * 1000; /* one hour */
        gp_bill_zones z = {{NULL}};
        int64_t t0 = gp_bill_month_start_ms(202611);
        gp_bill_segment pre = seg(1, "A100", 1000, t0, t0 + 10 * MIN, GP_BILL_RUN_END);
        gp_bill_segment end = seg(2, "A100", 1000, t0, t0 + 10 * MIN, GP_BILL_TASK_END);
        gp_bill_invoice a, b;
        assert_int_equal(gp_bill_price(&p, &z, &pre, 1, NULL, 0, &a), 0);
        assert_int_equal(gp_bill_price(&p, &z, &end, 1, NULL, 0, &b), 0);
        assert_int_equal(a.total_cents, 33);  /* 10 min of 2.00/h, preempted: no minimum */
        assert_int_equal(b.total_cents, 200); /* billed the full hour */
        gp_bill_invoice_done(&a);
        gp_bill_invoice_done(&b);
}

static void test_window_in_a_zone_follows_its_local_time(void **st) {
        (void)st;
        gp_bill_prices p = doc_prices();
        p.n_tiers = 0;
        p.min_billing_ms = 0;
        gp_tz sh;
        assert_int_equal(gp_tz_load("Asia/Shanghai", &sh), 0);
        gp_bill_zones z = {{&sh}};
        /* 22:00-06:00 Shanghai is 14:00-22:00 UTC */
        int64_t day = gp_bill_month_start_ms(202611) + 24 * H;
        gp_bill_segment in = seg(1, "x", 1000, day + 14 * H, day + 22 * H, GP_BILL_INTERVAL);
        gp_bill_segment out = seg(2, "x", 1000, day + 22 * H, day + 30 * H, GP_BILL_INTERVAL);
        assert_int_equal(gp_bill_segment_list_micros(&p, &z, &in), 4000000);  /* 8 h x 1.00 x 0.5 */
        assert_int_equal(gp_bill_segment_list_micros(&p, &z, &out), 8000000); /* 8 h x 1.00 */
}

static void test_no_matching_price_is_free_and_empty_month_is_zero(void **st) {
        (void)st;
        gp_bill_prices p = doc_prices();
        p.n_gpu = 1; /* only *A100* */
        gp_bill_zones z = {{NULL}};
        int64_t t0 = gp_bill_month_start_ms(202611);
        gp_bill_segment s = seg(1, "H100", 1000, t0, t0 + H, GP_BILL_TASK_END);
        gp_bill_invoice inv;
        assert_int_equal(gp_bill_price(&p, &z, &s, 1, NULL, 0, &inv), 0);
        assert_int_equal(inv.total_cents, 0);
        assert_int_equal(inv.lines[0].gpu_ms, H);
        gp_bill_invoice_done(&inv);
        assert_int_equal(gp_bill_price(&p, &z, NULL, 0, NULL, 0, &inv), 0);
        assert_int_equal(inv.nlines, 0);
        assert_int_equal(inv.total_cents, 0);
        gp_bill_invoice_done(&inv);
}

static void test_absurd_records_and_prices_are_refused_not_wrapped(void **st) {
        (void)st;
        gp_bill_prices p = doc_prices();
        gp_bill_zones z = {{NULL}};
        gp_bill_invoice inv;
        /* longer than ten years, or more GPUs than a gang may hold */
        gp_bill_segment s = seg(1, "A100", 1000, 0, GP_BILL_SPAN_MAX_MS + 1, GP_BILL_TASK_END);
        assert_int_equal(gp_bill_price(&p, &z, &s, 1, NULL, 0, &inv), -ERANGE);
        s = seg(1, "A100", (GP_MAX_GPUS + 1) * 1000, 0, H, GP_BILL_TASK_END);
        assert_int_equal(gp_bill_price(&p, &z, &s, 1, NULL, 0, &inv), -ERANGE);
        /* the largest prices on the longest runs: more cents than int64 holds
         * (each such segment is 1.4e14 cents; 70000 of them pass 9.2e18) */
        p.n_windows = 0;
        p.n_tiers = 0;
        p.gpu[0].per_gpu_hour = p.gpu[1].per_gpu_hour = GP_BILL_MONEY_MAX;
        enum { N = 70000 };
        gp_bill_segment *many = calloc(N, sizeof(*many));
        assert_non_null(many);
        for (int i = 0; i < N; i++)
                many[i] = seg(i + 1, "A100", GP_MAX_GPUS * 1000, 0, GP_BILL_SPAN_MAX_MS, GP_BILL_TASK_END);
        assert_int_equal(gp_bill_price(&p, &z, many, N, NULL, 0, &inv), -ERANGE);
        gp_bill_tokens t;
        memset(&t, 0, sizeof(t));
        gp_strlcpy(t.model, "llama", sizeof(t.model));
        t.prompt_tokens = INT64_MAX / 4;
        p.tokens[0].per_1k_prompt = GP_BILL_MONEY_MAX;
        gp_bill_tokens ts[8];
        for (int i = 0; i < 8; i++)
                ts[i] = t;
        assert_int_equal(gp_bill_price(&p, &z, NULL, 0, ts, 8, &inv), -ERANGE);
        /* one of each still fits */
        assert_int_equal(gp_bill_price(&p, &z, many, 1, NULL, 0, &inv), 0);
        assert_int_equal(inv.total_cents, (int64_t)GP_MAX_GPUS * 8784000000000LL); /* GPUs x 87840 h x 10^8 */
        gp_bill_invoice_done(&inv);
        free(many);
}

static void test_money_text_is_parsed_exactly_or_refused(void **st) {
        (void)st;
        int64_t v;
        assert_int_equal(gp_bill_parse_micros("2.5", 3, GP_BILL_MONEY_MAX, &v), 0);
        assert_int_equal(v, 2500000);
        assert_int_equal(gp_bill_parse_micros("0.000001", 8, GP_BILL_MONEY_MAX, &v), 0);
        assert_int_equal(v, 1);
        assert_int_equal(gp_bill_parse_micros("12", 2, GP_BILL_MONEY_MAX, &v), 0);
        assert_int_equal(v, 12000000);
        assert_int_equal(gp_bill_parse_micros("0.0000001", 9, GP_BILL_MONEY_MAX, &v), -EINVAL);
        assert_int_equal(gp_bill_parse_micros("-1", 2, GP_BILL_MONEY_MAX, &v), -EINVAL);
        assert_int_equal(gp_bill_parse_micros("1e3", 3, GP_BILL_MONEY_MAX, &v), -EINVAL);
        assert_int_equal(gp_bill_parse_micros("1.", 2, GP_BILL_MONEY_MAX, &v), -EINVAL);
        assert_int_equal(gp_bill_parse_micros(".5", 2, GP_BILL_MONEY_MAX, &v), -EINVAL);
        assert_int_equal(gp_bill_parse_micros("1.5", 3, 1000000, &v), -ERANGE);
        assert_int_equal(gp_bill_parse_micros("99999999999999999999999", 23, GP_BILL_MONEY_MAX, &v), -ERANGE);
        char b[32];
        gp_bill_format_cents(-1234, b, sizeof(b));
        assert_string_equal(b, "-12.34");
        gp_bill_format_cents(5, b, sizeof(b));
        assert_string_equal(b, "0.05");
        gp_bill_format_micros(2500000, b, sizeof(b));
        assert_string_equal(b, "2.5");
        gp_bill_format_micros(3000000, b, sizeof(b));
        assert_string_equal(b, "3");
}

static void test_months_are_utc_calendar_months(void **st) {
        (void)st;
        int m;
        assert_int_equal(gp_bill_month_parse("2026-11", &m), 0);
        assert_int_equal(m, 202611);
        assert_int_equal(gp_bill_month_parse("2026-13", &m), -EINVAL);
        assert_int_equal(gp_bill_month_parse("2026-1", &m), -EINVAL);
        assert_int_equal(gp_bill_month_next(202612), 202701);
        int64_t s = gp_bill_month_start_ms(202611);
        assert_int_equal(s, 1793491200000LL); /* 2026-11-01T00:00:00Z */
        assert_int_equal(gp_bill_month_of(s), 202611);
        assert_int_equal(gp_bill_month_of(s - 1), 202610);
        assert_int_equal(gp_bill_month_start_ms(202603), 1772323200000LL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_worked_example_of_the_docs_gives_169_52),
                cmocka_unit_test(test_segments_of_a_run_cost_the_same_as_the_whole_run),
                cmocka_unit_test(test_minimum_period_applies_only_when_the_task_ends),
                cmocka_unit_test(test_window_in_a_zone_follows_its_local_time),
                cmocka_unit_test(test_no_matching_price_is_free_and_empty_month_is_zero),
                cmocka_unit_test(test_absurd_records_and_prices_are_refused_not_wrapped),
                cmocka_unit_test(test_money_text_is_parsed_exactly_or_refused),
                cmocka_unit_test(test_months_are_utc_calendar_months),
        };
        return cmocka_run_group_tests_name("billing", tests, NULL, NULL);
}
