/* test-config-units.c - what a config takes as people write it: seconds as
 * durations (90s, 2m, 1:30, 1h) in every *_s / *_sec key, MB as sizes (8G)
 * in every *_mb key, with FILE:LINE errors naming the bounds, and a key
 * hash pasted from sha256sum. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"

static int load(const char *yaml, gp_config *cfg, char *err, size_t errlen) {
        gp_config_defaults(cfg);
        return gp_config_load_buffer("t.yaml", yaml, strlen(yaml), cfg, err, errlen);
}

static void test_seconds_take_durations(void **state) {
        (void)state;
        gp_config c;
        char err[512];
        int r = load("tasks:\n  kill_grace_s: 1:30\n  default_lease_ttl_s: 2m\n  max_lease_ttl_s: 1d\n"
                     "scheduler:\n  queue_timeout_sec: 1h\n  fairshare_half_life_s: 7d\n"
                     "billing:\n  min_billing_sec: 90s\n",
                     &c, err, sizeof(err));
        if (r != 0)
                fail_msg("%s", err);
        assert_int_equal(c.kill_grace_s, 90);
        assert_int_equal(c.default_lease_ttl_s, 120);
        assert_int_equal(c.max_lease_ttl_s, 86400);
        assert_int_equal(c.queue_timeout_sec, 3600);
        assert_int_equal(c.fairshare_half_life_s, 604800);
        assert_int_equal(c.billing.min_billing_ms, 90000);
        gp_config_free(&c);
        /* plain integers are seconds, as before */
        assert_int_equal(load("tasks: {kill_grace_s: 30}\n", &c, err, sizeof(err)), 0);
        assert_int_equal(c.kill_grace_s, 30);
        gp_config_free(&c);
}

static void test_bad_durations_name_file_line_and_bounds(void **state) {
        (void)state;
        gp_config c;
        char err[512];
        assert_int_equal(load("tasks:\n  kill_grace_s: 2h\n", &c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "t.yaml:2: tasks.kill_grace_s: must be between 0s and 3600s, got 2h"));
        assert_int_equal(load("tasks:\n\n  kill_grace_s: 5x\n", &c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "t.yaml:3:"));
        assert_non_null(strstr(err, "a duration such as 90s"));
        /* a rate is not seconds: no duration forms there */
        assert_int_equal(load("server:\n  min_body_rate_bytes_s: 1m\n", &c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "t.yaml:2:"));
        assert_null(strstr(err, "duration"));
}

static void test_mb_keys_take_sizes(void **state) {
        (void)state;
        gp_config c;
        char err[512];
        int r = load("scheduler:\n  memory_safety_margin_mb: 2G\nstore:\n  disk_reserve_mb: 512M\n"
                     "gpus:\n  backend: sim\n  sim:\n    - {name: X, memory_mb: 80G, count: 2}\n",
                     &c, err, sizeof(err));
        if (r != 0)
                fail_msg("%s", err);
        assert_int_equal(c.memory_safety_margin_mb, 2048);
        assert_int_equal(c.store_disk_reserve_mb, 512);
        assert_int_equal(c.sim[0].memory_mb, 81920);
        gp_config_free(&c);
        assert_int_equal(load("store:\n  disk_reserve_mb: 2G\n", &c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "t.yaml:2: store.disk_reserve_mb: must be between 0 and 1024 MB, got 2G"));
        assert_int_equal(load("store:\n  disk_reserve_mb: 2Q\n", &c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "such as 8G"));
}

static void test_pasted_sha256sum_line_is_a_key_hash(void **state) {
        (void)state;
        gp_config c;
        char err[512];
        const char *hex = "13fb1766986b7ae3f577f97332f1967b0d15ff975d5af88f0b5a6aaad78d4760";
        char yaml[512];
        snprintf(yaml, sizeof(yaml), "auth:\n  admin_keys:\n    - \"%s  -\"\n", hex);
        int r = load(yaml, &c, err, sizeof(err));
        if (r != 0)
                fail_msg("%s", err);
        assert_int_equal(c.n_admin_keys, 1);
        assert_int_equal(strncmp(c.admin_keys[0], "sha256:", 7), 0);
        assert_string_equal(c.admin_keys[0] + 7, hex);
        gp_config_free(&c);
        snprintf(yaml, sizeof(yaml), "tenants:\n  - id: a\n    keys: [\"%s  -\"]\n", hex);
        r = load(yaml, &c, err, sizeof(err));
        if (r != 0)
                fail_msg("%s", err);
        assert_string_equal(c.tenants[0].keys[0] + 7, hex);
        gp_config_free(&c);
        /* the bare key-like hex is still refused, with the way to make a hash */
        snprintf(yaml, sizeof(yaml), "auth:\n  admin_keys:\n    - \"%s\"\n", hex);
        assert_int_equal(load(yaml, &c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "t.yaml:3:"));
        assert_non_null(strstr(err, "gpupool key create --admin"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_seconds_take_durations),
                cmocka_unit_test(test_bad_durations_name_file_line_and_bounds),
                cmocka_unit_test(test_mb_keys_take_sizes),
                cmocka_unit_test(test_pasted_sha256sum_line_is_a_key_hash),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
