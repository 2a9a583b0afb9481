/* test-gateway-stats.c - unit tests of the gateway's timing histograms
 * (gateway/gwstats.h): bucket placement, quantiles against the true ones,
 * merging, and the Prometheus text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gwstats.h"

static void test_an_empty_histogram_has_no_quantile(void **st) {
        (void)st;
        gw_hist h = {0};
        assert_true(gw_hist_quantile(&h, 0.5) < 0);
        gw_hist_add(&h, GW_SCALE_SECONDS, -1);
        gw_hist_add(&h, GW_SCALE_SECONDS, NAN);
        assert_int_equal(h.count, 0);
}

static void test_bounds_rise_and_cover_six_decades(void **st) {
        (void)st;
        for (int i = 1; i < GW_HIST_BOUNDS; i++) {
                assert_true(gw_hist_bound(GW_SCALE_SECONDS, i) > gw_hist_bound(GW_SCALE_SECONDS, i - 1));
                assert_true(gw_hist_bound(GW_SCALE_RATE, i) > gw_hist_bound(GW_SCALE_RATE, i - 1));
        }
        assert_true(fabs(gw_hist_bound(GW_SCALE_SECONDS, 0) - 0.001) < 1e-12);
        assert_true(fabs(gw_hist_bound(GW_SCALE_SECONDS, GW_HIST_BOUNDS - 1) - 1000) < 1e-9);
        assert_true(fabs(gw_hist_bound(GW_SCALE_RATE, 0) - 0.1) < 1e-12);
        assert_true(fabs(gw_hist_bound(GW_SCALE_RATE, GW_HIST_BOUNDS - 1) - 100000) < 1e-6);
}

static void test_values_close_together_give_their_own_quantiles(void **st) {
        (void)st;
        gw_hist h = {0};
        double v[] = {0.301, 0.302, 0.305, 0.309};
        for (int i = 0; i < 4; i++)
                gw_hist_add(&h, GW_SCALE_SECONDS, v[i]);
        double p50 = gw_hist_quantile(&h, 0.5);
        assert_true(p50 >= 0.301 && p50 <= 0.309);
        assert_true(gw_hist_quantile(&h, 0.95) <= 0.309);
}

/* 1..1000 ms, uniform: each quantile within one bucket (25%) of the truth. */
static void test_quantiles_of_a_spread_are_within_a_bucket(void **st) {
        (void)st;
        gw_hist h = {0};
        for (int i = 1; i <= 1000; i++)
                gw_hist_add(&h, GW_SCALE_SECONDS, i / 1000.0);
        double qs[] = {0.1, 0.5, 0.9, 0.95, 0.99};
        for (int k = 0; k < 5; k++) {
                double want = qs[k], got = gw_hist_quantile(&h, qs[k]);
                assert_true(got >= want / 1.25 && got <= want * 1.25);
        }
        assert_int_equal(h.count, 1000);
        assert_true(fabs(h.sum - 500.5) < 1e-6);
}

static void test_a_value_over_the_last_bound_is_kept_as_the_max(void **st) {
        (void)st;
        gw_hist h = {0};
        gw_hist_add(&h, GW_SCALE_SECONDS, 5000);
        assert_int_equal(h.n[GW_HIST_BOUNDS], 1);
        assert_true(gw_hist_quantile(&h, 0.5) == 5000);
}

static void test_merge_adds_counts_sums_and_extremes(void **st) {
        (void)st;
        gw_hist a = {0}, b = {0}, m = {0};
        gw_hist_add(&a, GW_SCALE_RATE, 10);
        gw_hist_add(&b, GW_SCALE_RATE, 1000);
        gw_hist_merge(&m, &a);
        gw_hist_merge(&m, &b);
        assert_int_equal(m.count, 2);
        assert_true(m.min == 10 && m.max == 1000 && m.sum == 1010);
        assert_true(gw_hist_quantile(&m, 0.95) == 1000);
}

static void test_prometheus_buckets_are_cumulative_and_end_with_the_count(void **st) {
        (void)st;
        gw_hist h = {0};
        gw_hist_add(&h, GW_SCALE_SECONDS, 0.02);
        gw_hist_add(&h, GW_SCALE_SECONDS, 0.3);
        gw_hist_add(&h, GW_SCALE_SECONDS, 0.5); /* on a bound: counted at le="0.5" */
        gw_hist_add(&h, GW_SCALE_SECONDS, 400);
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gw_hist_prom(&b, "x_seconds", "tenant", "a\"b", &h, GW_SCALE_SECONDS), 0);
        assert_non_null(strstr(b.data, "x_seconds_bucket{tenant=\"a\\\"b\",le=\"0.01\"} 0\n"));
        assert_non_null(strstr(b.data, "x_seconds_bucket{tenant=\"a\\\"b\",le=\"0.025\"} 1\n"));
        assert_non_null(strstr(b.data, "x_seconds_bucket{tenant=\"a\\\"b\",le=\"0.25\"} 1\n"));
        assert_non_null(strstr(b.data, "x_seconds_bucket{tenant=\"a\\\"b\",le=\"0.5\"} 3\n"));
        assert_non_null(strstr(b.data, "x_seconds_bucket{tenant=\"a\\\"b\",le=\"300\"} 3\n"));
        assert_non_null(strstr(b.data, "x_seconds_bucket{tenant=\"a\\\"b\",le=\"+Inf\"} 4\n"));
        assert_non_null(strstr(b.data, "x_seconds_count{tenant=\"a\\\"b\"} 4\n"));
        assert_non_null(strstr(b.data, "x_seconds_sum{tenant=\"a\\\"b\"} 400.820000\n"));
        gp_buf_done(&b);
}

static void test_families_name_the_first_tenants_and_fold_the_rest(void **st) {
        (void)st;
        static gw_timing t[3];
        memset(t, 0, sizeof(t));
        for (int i = 0; i < 3; i++)
                gw_hist_add(&t[i].latency, GW_SCALE_SECONDS, 0.1);
        const char *names[3] = {"a", "b", "c"};
        const gw_timing *tp[3] = {&t[0], &t[1], &t[2]};
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gw_timing_prom(&b, "p_", "tenant", names, tp, 3, 2), 0);
        assert_non_null(strstr(b.data, "# TYPE p_request_duration_seconds histogram\n"));
        assert_non_null(strstr(b.data, "# TYPE p_time_to_first_token_seconds histogram\n"));
        assert_non_null(strstr(b.data, "# TYPE p_generation_tokens_per_second histogram\n"));
        assert_non_null(strstr(b.data, "p_request_duration_seconds_count{tenant=\"a\"} 1\n"));
        assert_non_null(strstr(b.data, "p_request_duration_seconds_count{tenant=\"b\"} 1\n"));
        assert_null(strstr(b.data, "tenant=\"c\""));
        assert_non_null(strstr(b.data, "p_request_duration_seconds_count{tenant=\"other\"} 1\n"));
        assert_null(strstr(b.data, "p_time_to_first_token_seconds_count")); /* no values: no series */
        gp_buf_done(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_an_empty_histogram_has_no_quantile),
                cmocka_unit_test(test_bounds_rise_and_cover_six_decades),
                cmocka_unit_test(test_values_close_together_give_their_own_quantiles),
                cmocka_unit_test(test_quantiles_of_a_spread_are_within_a_bucket),
                cmocka_unit_test(test_a_value_over_the_last_bound_is_kept_as_the_max),
                cmocka_unit_test(test_merge_adds_counts_sums_and_extremes),
                cmocka_unit_test(test_prometheus_buckets_are_cumulative_and_end_with_the_count),
                cmocka_unit_test(test_families_name_the_first_tenants_and_fold_the_rest),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
