/* test-gateway-admit.c - unit and property tests of the gateway's pure
 * admission core (src/core/admit.c), with a fake clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/admit.h"

static const uint32_t W[GP_PRIORITY_LEVELS] = {256, 128, 64, 32, 16, 8, 4, 2, 1, 1};

static gp_admit *mk(int max_concurrent, int max_queue) {
        gp_admit_limits l = {.max_concurrent = max_concurrent, .max_queue = max_queue, .queue_timeout_ms = 30000};
        memcpy(l.weights, W, sizeof(W));
        gp_admit *a = gp_admit_new(&l, 0);
        assert_non_null(a);
        return a;
}

static int tenant(gp_admit *a, const char *id, uint32_t weight) {
        gp_admit_tenant_limits tl = {.weight = weight};
        int t = gp_admit_tenant(a, id, &tl, 0);
        assert_true(t >= 0);
        return t;
}

static gp_admit_ticket *tickets(size_t n) {
        gp_admit_ticket *t = calloc(n, sizeof(*t));
        assert_non_null(t);
        return t;
}

static void submit(gp_admit *a, gp_admit_ticket *t, int tier, int tn, int64_t tokens, int64_t now) {
        t->tier = tier;
        t->tenant = tn;
        t->tokens = tokens;
        assert_int_equal(gp_admit_submit(a, t, now), 0);
}

static void test_admits_at_once_under_the_limits(void **state) {
        gp_admit *a = mk(2, 10);
        int tn = tenant(a, "a", 1);
        gp_admit_ticket *t = tickets(3);
        for (int i = 0; i < 3; i++)
                submit(a, &t[i], 5, tn, 10, 0);
        assert_ptr_equal(gp_admit_next(a, 0), &t[0]);
        assert_ptr_equal(gp_admit_next(a, 0), &t[1]);
        assert_null(gp_admit_next(a, 0)); /* max_concurrent 2 */
        gp_admit_done(a, &t[0], 5, 1);
        assert_ptr_equal(gp_admit_next(a, 1), &t[2]);
        gp_admit_stats st;
        gp_admit_get_stats(a, &st);
        assert_int_equal(st.running, 2);
        assert_int_equal(st.queued_total, 0);
        assert_int_equal(st.admitted_total, 3);
        free(t);
        gp_admit_free(a);
}

static void test_p0_goes_strictly_first(void **state) {
        gp_admit *a = mk(1, 10000);
        int tn = tenant(a, "a", 1);
        gp_admit_ticket *t = tickets(400);
        /* 300 requests of tiers 1..9 wait, then 100 of tier 0 arrive */
        for (int i = 0; i < 300; i++)
                submit(a, &t[i], 1 + i % 9, tn, 1, 0);
        for (int i = 300; i < 400; i++)
                submit(a, &t[i], 0, tn, 1, 1);
        for (int i = 0; i < 100; i++) {
                gp_admit_ticket *x = gp_admit_next(a, 2);
                assert_non_null(x);
                assert_int_equal(x->tier, 0);
                assert_ptr_equal(x, &t[300 + i]); /* FIFO inside the tier */
                gp_admit_done(a, x, -1, 2);
        }
        gp_admit_ticket *x = gp_admit_next(a, 2);
        assert_non_null(x);
        assert_int_not_equal(x->tier, 0);
        free(t);
        gp_admit_free(a);
}

/* Over 1,000 queued requests of tiers 1..4 served one at a time, each
 * tier's share while all wait is within 10% of its weight's share. */
static void test_wfq_shares_within_10pct_of_weights_over_1000_requests(void **state) {
        gp_admit *a = mk(1, 100000);
        int tn = tenant(a, "a", 1);
        const int tiers[] = {1, 2, 3, 4};
        const int per_tier = 1000;
        gp_admit_ticket *t = tickets(4 * per_tier);
        for (int i = 0; i < 4 * per_tier; i++)
                submit(a, &t[i], tiers[i % 4], tn, 1, 0);
        int served[GP_PRIORITY_LEVELS] = {0};
        const int rounds = 1000; /* no tier runs dry in 1,000 picks */
        for (int i = 0; i < rounds; i++) {
                gp_admit_ticket *x = gp_admit_next(a, 1);
                assert_non_null(x);
                served[x->tier]++;
                gp_admit_done(a, x, -1, 1);
        }
        double wsum = 0;
        for (int i = 0; i < 4; i++)
                wsum += W[tiers[i]];
        for (int i = 0; i < 4; i++) {
                double want = rounds * W[tiers[i]] / wsum;
                double got = served[tiers[i]];
                assert_true(got >= want * 0.9 && got <= want * 1.1);
        }
        free(t);
        gp_admit_free(a);
}

static void test_tenants_share_a_tier_by_weight(void **state) {
        gp_admit *a = mk(1, 100000);
        int x = tenant(a, "x", 3), y = tenant(a, "y", 1);
        gp_admit_ticket *t = tickets(2000);
        /* x queued everything first; y still gets its share */
        for (int i = 0; i < 1000; i++)
                submit(a, &t[i], 5, x, 1, 0);
        for (int i = 1000; i < 2000; i++)
                submit(a, &t[i], 5, y, 1, 0);
        int got[2] = {0};
        for (int i = 0; i < 400; i++) {
                gp_admit_ticket *n = gp_admit_next(a, 1);
                got[n->tenant == y]++;
                gp_admit_done(a, n, -1, 1);
        }
        assert_true(got[0] >= 270 && got[0] <= 330); /* 3:1 of 400 = 300:100 */
        free(t);
        gp_admit_free(a);
}

static void test_tenant_over_its_concurrency_does_not_block_others(void **state) {
        gp_admit *a = mk(100, 100);
        gp_admit_tenant_limits tl = {.max_concurrent = 1, .weight = 1};
        int x = gp_admit_tenant(a, "x", &tl, 0);
        int y = tenant(a, "y", 1);
        gp_admit_ticket *t = tickets(3);
        submit(a, &t[0], 5, x, 1, 0);
        submit(a, &t[1], 5, x, 1, 0);
        submit(a, &t[2], 5, y, 1, 0);
        assert_ptr_equal(gp_admit_next(a, 0), &t[0]);
        assert_ptr_equal(gp_admit_next(a, 0), &t[2]); /* x's second waits, y's goes */
        assert_null(gp_admit_next(a, 0));
        gp_admit_done(a, &t[0], -1, 0);
        assert_ptr_equal(gp_admit_next(a, 0), &t[1]);
        free(t);
        gp_admit_free(a);
}

static void test_rpm_limit_holds_requests_until_the_bucket_refills(void **state) {
        gp_admit *a = mk(0, 100);
        gp_admit_tenant_limits tl = {.rpm = 60, .weight = 1}; /* one per second once spent */
        int x = gp_admit_tenant(a, "x", &tl, 0);
        gp_admit_ticket *t = tickets(61);
        for (int i = 0; i < 61; i++)
                submit(a, &t[i], 5, x, 1, 0);
        for (int i = 0; i < 60; i++)
                assert_non_null(gp_admit_next(a, 0));
        assert_null(gp_admit_next(a, 0));
        int64_t wake = gp_admit_wake_ms(a, 0);
        assert_true(wake > 0 && wake <= 1000);
        assert_null(gp_admit_next(a, 500));
        assert_ptr_equal(gp_admit_next(a, 1000), &t[60]);
        gp_admit_ratelimit rl;
        gp_admit_ratelimit_get(a, x, 1000, &rl);
        assert_int_equal(rl.limit_requests, 60);
        assert_int_equal(rl.remaining_requests, 0);
        assert_true(rl.retry_after_ms >= 1 && rl.retry_after_ms <= 1000);
        free(t);
        gp_admit_free(a);
}

static void test_token_reservation_is_corrected_by_real_usage(void **state) {
        gp_admit_limits l = {.max_queue = 100, .queue_timeout_ms = 30000, .max_tokens_per_sec = 1000};
        memcpy(l.weights, W, sizeof(W));
        gp_admit *a = gp_admit_new(&l, 0);
        int x = tenant(a, "x", 1);
        gp_admit_ticket *t = tickets(2);
        submit(a, &t[0], 5, x, 1000, 0); /* reserves the whole second */
        submit(a, &t[1], 5, x, 500, 0);
        assert_ptr_equal(gp_admit_next(a, 0), &t[0]);
        assert_null(gp_admit_next(a, 0));
        gp_admit_done(a, &t[0], 100, 0); /* used 100: 900 come back */
        assert_ptr_equal(gp_admit_next(a, 0), &t[1]);
        gp_admit_tenant_stats ts;
        assert_int_equal(gp_admit_tenant_stats_get(a, (size_t)x, &ts), 0);
        assert_int_equal(ts.tokens_total, 100);
        assert_int_equal(ts.requests_total, 2);
        free(t);
        gp_admit_free(a);
}

static void test_big_request_passes_when_the_bucket_is_full(void **state) {
        gp_admit_limits l = {.max_queue = 100, .queue_timeout_ms = 30000, .max_tokens_per_sec = 100};
        memcpy(l.weights, W, sizeof(W));
        gp_admit *a = gp_admit_new(&l, 0);
        int x = tenant(a, "x", 1);
        gp_admit_ticket t = {0};
        submit(a, &t, 5, x, 5000, 0);
        assert_ptr_equal(gp_admit_next(a, 0), &t);
        gp_admit_free(a);
}

static void test_full_queue_refuses_and_timeout_expires_oldest_first(void **state) {
        gp_admit *a = mk(1, 2);
        int x = tenant(a, "x", 1);
        gp_admit_ticket *t = tickets(4);
        submit(a, &t[0], 5, x, 1, 0);
        assert_ptr_equal(gp_admit_next(a, 0), &t[0]);
        submit(a, &t[1], 5, x, 1, 0);
        submit(a, &t[2], 3, x, 1, 10);
        t[3].tier = 5;
        t[3].tenant = x;
        assert_int_equal(gp_admit_submit(a, &t[3], 20), -EAGAIN);
        assert_int_equal(gp_admit_wake_ms(a, 20), 30000);
        assert_null(gp_admit_expired(a, 29999));
        assert_ptr_equal(gp_admit_expired(a, 30000), &t[1]);
        assert_null(gp_admit_expired(a, 30000));
        assert_ptr_equal(gp_admit_expired(a, 30010), &t[2]);
        gp_admit_stats st;
        gp_admit_get_stats(a, &st);
        assert_int_equal(st.rejected_total, 1);
        assert_int_equal(st.expired_total, 2);
        assert_int_equal(st.queued_total, 0);
        free(t);
        gp_admit_free(a);
}

static void test_cancel_frees_the_place_at_once(void **state) {
        gp_admit *a = mk(1, 1);
        int x = tenant(a, "x", 1);
        gp_admit_ticket *t = tickets(3);
        submit(a, &t[0], 5, x, 1, 0);
        assert_ptr_equal(gp_admit_next(a, 0), &t[0]);
        submit(a, &t[1], 5, x, 1, 0);
        t[2].tier = 5;
        t[2].tenant = x;
        assert_int_equal(gp_admit_submit(a, &t[2], 0), -EAGAIN);
        gp_admit_cancel(a, &t[1]);
        assert_int_equal(t[1].state, GP_ADMIT_NEW);
        assert_int_equal(gp_admit_submit(a, &t[2], 0), 0);
        gp_admit_done(a, &t[0], -1, 0);
        assert_ptr_equal(gp_admit_next(a, 0), &t[2]);
        free(t);
        gp_admit_free(a);
}

static void test_bad_input_is_refused(void **state) {
        gp_admit *a = mk(1, 10);
        gp_admit_tenant_limits tl = {0};
        assert_int_equal(gp_admit_tenant(a, "", &tl, 0), -EINVAL);
        gp_admit_ticket t = {.tier = 10, .tenant = 0};
        assert_int_equal(gp_admit_submit(a, &t, 0), -EINVAL);
        t.tier = 1;
        t.tenant = 3; /* no such tenant */
        assert_int_equal(gp_admit_submit(a, &t, 0), -EINVAL);
        char id[80];
        for (int i = 0; i < GP_ADMIT_MAX_TENANTS; i++) {
                snprintf(id, sizeof(id), "t%d", i);
                assert_true(gp_admit_tenant(a, id, &tl, 0) >= 0);
        }
        assert_int_equal(gp_admit_tenant(a, "one-too-many", &tl, 0), -ENOSPC);
        gp_admit_free(a);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_admits_at_once_under_the_limits),
                cmocka_unit_test(test_p0_goes_strictly_first),
                cmocka_unit_test(test_wfq_shares_within_10pct_of_weights_over_1000_requests),
                cmocka_unit_test(test_tenants_share_a_tier_by_weight),
                cmocka_unit_test(test_tenant_over_its_concurrency_does_not_block_others),
                cmocka_unit_test(test_rpm_limit_holds_requests_until_the_bucket_refills),
                cmocka_unit_test(test_token_reservation_is_corrected_by_real_usage),
                cmocka_unit_test(test_big_request_passes_when_the_bucket_is_full),
                cmocka_unit_test(test_full_queue_refuses_and_timeout_expires_oldest_first),
                cmocka_unit_test(test_cancel_frees_the_place_at_once),
                cmocka_unit_test(test_bad_input_is_refused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
