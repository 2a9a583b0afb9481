/* test-config-cluster.c - unit tests of the config keys of issue 15
 * (agent.*, node.*, cluster.*, gpus.backend: none; src/config/config.c):
 * defaults, values as loaded, and refusals naming file, line and key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"

#define H64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_defaults(void **state) {
        (void)state;
        static gp_config c;
        gp_config_defaults(&c);
        assert_string_equal(c.agent_listen, "0.0.0.0:8081");
        assert_string_equal(c.agent_data_dir, "./gpupool-agent-data");
        assert_int_equal(c.agent_heartbeat_s, 2);
        assert_string_equal(c.node_name, "");
        assert_string_equal(c.node_labels, "");
        assert_int_equal(c.n_join_tokens, 0);
        assert_int_equal(c.node_timeout_s, 10);
        assert_int_equal(c.fence_s, 30);
}

static void test_keys_load_and_labels_are_canonical(void **state) {
        (void)state;
        static gp_config c;
        char err[512];
        const char *y = "agent: {listen: \"127.0.0.1:9001\", data_dir: /tmp/ag, heartbeat_s: 5}\n"
                        "node:\n  name: gpu-a.1\n  labels: {zone: a, ib: \"yes\", a/b: \"\"}\n"
                        "cluster: {join_tokens: [\"sha256:" H64 "\"], node_timeout_s: 30}\n"
                        "gpus: {backend: none}\n";
        assert_int_equal(gp_config_load_buffer("t.yaml", y, strlen(y), &c, err, sizeof(err)), 0);
        assert_string_equal(c.agent_listen, "127.0.0.1:9001");
        assert_string_equal(c.agent_data_dir, "/tmp/ag");
        assert_int_equal(c.agent_heartbeat_s, 5);
        assert_string_equal(c.node_name, "gpu-a.1");
        assert_string_equal(c.node_labels, "a/b=,ib=yes,zone=a");
        assert_int_equal(c.n_join_tokens, 1);
        assert_string_equal(c.join_tokens[0], "sha256:" H64);
        assert_int_equal(c.node_timeout_s, 30);
        assert_int_equal(c.fence_s, 30);
        assert_string_equal(c.gpu_backend, "none");
        gp_config_free(&c);
}

static void expect_refused(const char *y, const char *want) {
        static gp_config c, before;
        char err[512] = "";
        memset(&c, 0x3c, sizeof(c));
        memcpy(&before, &c, sizeof(c));
        int r = gp_config_load_buffer("t.yaml", y, strlen(y), &c, err, sizeof(err));
        if (r != -EINVAL || !strstr(err, want))
                fail_msg("%s: got %d '%s', wanted '%s'", y, r, err, want);
        assert_memory_equal(&c, &before, sizeof(c));
}

static void test_bad_values_are_refused_with_file_line_key(void **state) {
        (void)state;
        expect_refused("agent:\n  heartbeat_s: 61\n", "t.yaml:2: agent.heartbeat_s");
        expect_refused("agent:\n  heartbeat_s: 0\n", "agent.heartbeat_s");
        expect_refused("agent:\n  listen: nope\n", "t.yaml:2: agent.listen");
        expect_refused("node:\n  name: local\n", "t.yaml:2: node.name");
        expect_refused("node:\n  name: \"a b\"\n", "node.name");
        expect_refused("node:\n  name: a23456789012345678901234567890123456789012345678\n", "at most 47");
        expect_refused("node:\n  labels: [a]\n", "node.labels: expected a mapping");
        expect_refused("node:\n  labels:\n    zone: \"a,b=c\"\n", "t.yaml:3: node.labels: label zone");
        expect_refused("node:\n  labels:\n    \"a=b\": c\n", "label key");
        expect_refused("node:\n  labels:\n    zone: {x: 1}\n", "label zone");
        expect_refused("cluster:\n  join_tokens: [\"gpj_" H64 "\"]\n", "t.yaml:2: cluster.join_tokens[0]");
        expect_refused("cluster:\n  join_tokens: [\"sha256:" H64 "\", \"sha256:" H64 "\"]\n", "listed twice");
        expect_refused("cluster:\n  node_timeout_s: 1\n", "cluster.node_timeout_s");
        expect_refused("cluster:\n  node_timeout_s: 3601\n", "cluster.node_timeout_s");
        expect_refused("gpus:\n  backend: gone\n", "gpus.backend");
        char many[4096] = "node:\n  labels:\n";
        for (int i = 0; i < 33; i++)
                snprintf(many + strlen(many), sizeof(many) - strlen(many), "    k%d: v\n", i);
        expect_refused(many, "more than 32 labels");
}

static void test_fence_s_defaults_to_at_least_node_timeout_and_may_not_be_below_it(void **state) {
        (void)state;
        static gp_config c;
        char err[512];
        const char *y = "cluster: {node_timeout_s: 45}\n";
        assert_int_equal(gp_config_load_buffer("t.yaml", y, strlen(y), &c, err, sizeof(err)), 0);
        assert_int_equal(c.fence_s, 45); /* the default follows a long node timeout */
        gp_config_free(&c);
        y = "cluster: {node_timeout_s: 3, fence_s: 4}\n";
        assert_int_equal(gp_config_load_buffer("t.yaml", y, strlen(y), &c, err, sizeof(err)), 0);
        assert_int_equal(c.fence_s, 4);
        gp_config_free(&c);
        expect_refused("cluster: {node_timeout_s: 10, fence_s: 5}\n", "cluster.fence_s");
        expect_refused("cluster: {fence_s: 3601}\n", "cluster.fence_s");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_keys_load_and_labels_are_canonical),
                cmocka_unit_test(test_bad_values_are_refused_with_file_line_key),
                cmocka_unit_test(test_fence_s_defaults_to_at_least_node_timeout_and_may_not_be_below_it),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
