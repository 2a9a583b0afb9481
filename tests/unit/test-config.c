/* test-config.c - the configuration module: the embedded default matches
 * DESIGN.md, a full file overrides every key, every kind of bad input is
 * refused with FILE:LINE and the key and leaves the struct untouched, and
 * the shipped example loads.  Runs from the repository root. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"
#include "base/buf.h"
#include "config/quota.h"
#include "base/tz.h"
#include "base/util.h"

#define KEY_A "sha256:8c6976e5b5410415bde908bd4dee15dfb167a9c873fc4bb8a81f6f2ab448a918"
#define KEY_B "sha256:0000000000000000000000000000000000000000000000000000000000000001"

static int load(const char *yaml, gp_config *cfg, char *err, size_t errlen) {
        return gp_config_load_buffer("t.yaml", yaml, strlen(yaml), cfg, err, errlen);
}

static void test_gpus_sharing_mps_loads_with_its_gpus_and_program(void **state) {
        (void)state;
        gp_config c;
        char err[512];
        assert_int_equal(load("gpus: {backend: sim}\n", &c, err, sizeof(err)), 0);
        assert_false(c.gpu_mps); /* the default: the watchdog */
        assert_string_equal(c.mps_control, "nvidia-cuda-mps-control");
        assert_string_equal(c.mps_dir, "");
        gp_config_free(&c);
        const char *y = "gpus:\n  sharing: mps\n  mps_gpus: [1, \"GPU-8a3c-11\"]\n"
                        "  mps_control: /opt/nvidia/bin/nvidia-cuda-mps-control\n  mps_dir: /run/gpupool-mps\n";
        assert_int_equal(load(y, &c, err, sizeof(err)), 0);
        assert_true(c.gpu_mps);
        assert_int_equal(c.n_mps_gpus, 2);
        assert_string_equal(c.mps_gpus[0], "1");
        assert_string_equal(c.mps_gpus[1], "GPU-8a3c-11");
        assert_string_equal(c.mps_control, "/opt/nvidia/bin/nvidia-cuda-mps-control");
        assert_string_equal(c.mps_dir, "/run/gpupool-mps");
        gp_config_free(&c);
}

static void test_gateway_section_is_loaded(void **state) {
        gp_config c;
        char err[512];
        const char *y = "gateway:\n"
                        "  queue_timeout_sec: 12\n"
                        "  max_queue: 50\n"
                        "  limits: {max_concurrent: 7, max_rps: 200, max_tokens_per_sec: 4000}\n"
                        "  models:\n"
                        "    - name: deepseek-7b\n"
                        "      context: 8192\n"
                        "      tokenize: off\n"
                        "      upstreams: [\"http://127.0.0.1:8000\", \"http://10.0.0.2:8001/prefix\"]\n"
                        "tenants:\n"
                        "  - {id: dept_a, gateway: {max_concurrent: 10, rpm: 600, tpm: 100000}}\n";
        gp_config_defaults(&c);
        assert_int_equal(c.gw.queue_timeout_sec, 30);
        assert_int_equal(c.gw.max_queue, 10000);
        assert_int_equal(c.gw.max_concurrent, 100);
        assert_int_equal(c.gw.n_models, 0);
        assert_int_equal(c.gw.tokenize_timeout_ms, 300);
        if (load(y, &c, err, sizeof(err)) != 0)
                fail_msg("%s", err);
        assert_int_equal(c.gw.queue_timeout_sec, 12);
        assert_int_equal(c.gw.max_queue, 50);
        assert_int_equal(c.gw.max_concurrent, 7);
        assert_int_equal(c.gw.max_rps, 200);
        assert_int_equal(c.gw.max_tokens_per_sec, 4000);
        assert_int_equal(c.gw.n_models, 1);
        assert_string_equal(c.gw.models[0].name, "deepseek-7b");
        assert_int_equal(c.gw.models[0].context, 8192);
        assert_true(c.gw.models[0].tokenize_off);
        assert_int_equal(c.gw.models[0].n_upstreams, 2);
        assert_string_equal(c.gw.models[0].upstreams[1], "http://10.0.0.2:8001/prefix");
        assert_int_equal(c.tenants[0].gw_max_concurrent, 10);
        assert_int_equal(c.tenants[0].gw_rpm, 600);
        assert_int_equal(c.tenants[0].gw_tpm, 100000);
        const char *sv = "gateway:\n"
                         "  models:\n"
                         "    - name: m\n"
                         "      serve: {command: [vllm, serve, x, --port, \"{port}\"], gpus: 2, memory_mb: 20000,\n"
                         "              port: auto, ready: /v1/models, replicas: 3}\n";
        gp_config_free(&c); /* a loaded config owns heap lists (config.h) */
        if (load(sv, &c, err, sizeof(err)) != 0)
                fail_msg("%s", err);
        const gp_cfg_serve *s = &c.gw.models[0].serve;
        assert_false(c.gw.models[0].tokenize_off); /* default auto */
        assert_true(s->enabled);
        assert_int_equal(s->n_command, 5);
        assert_string_equal(s->command[4], "{port}");
        assert_int_equal(s->gpus, 2);
        assert_int_equal(s->memory_mb, 20000);
        assert_int_equal(s->port, 0);
        assert_string_equal(s->ready, "/v1/models");
        assert_int_equal(s->replicas, 3);
        assert_int_equal(c.gw.models[0].n_upstreams, 0);
        gp_config_free(&c);
}

static void test_defaults_match_design(void **state) {
        gp_config c;
        char err[256];
        gp_config_defaults(&c);
        assert_string_equal(c.source, "");
        assert_string_equal(c.listen, "0.0.0.0:8080");
        assert_string_equal(c.data_dir, "./gpupool-data");
        assert_int_equal(c.max_connections, 1024);
        assert_int_equal(c.max_body_bytes, 1 << 20);
        assert_int_equal(c.connection_timeout_s, 60);
        assert_int_equal(c.header_timeout_s, 10);
        assert_int_equal(c.min_body_rate_bytes_s, 1024);
        assert_int_equal(c.max_connections_per_ip, 256);
        assert_int_equal(c.http_threads, 2);
        assert_int_equal(c.n_admin_keys, 0);
        assert_string_equal(c.store_url, "sqlite://./gpupool-data/gpupool.db");
        assert_true(c.store_sync_full);
        assert_string_equal(c.gpu_backend, "auto");
        assert_string_equal(c.nvml_library, "libnvidia-ml.so.1");
        assert_int_equal(c.n_reserved, 0);
        assert_int_equal(c.n_sim, 1);
        assert_string_equal(c.sim[0].name, "NVIDIA GeForce RTX 4090");
        assert_int_equal(c.sim[0].memory_mb, 24564);
        assert_int_equal(c.sim[0].count, 4);
        assert_int_equal(c.gpu_poll_ms, 2000);
        assert_int_equal(c.policy, GP_SCHED_HYBRID);
        assert_int_equal(c.priority_levels, 10);
        static const uint32_t w[10] = {256, 128, 64, 32, 16, 8, 4, 2, 1, 1};
        assert_memory_equal(c.weights, w, sizeof(w));
        assert_int_equal(c.max_queue_depth, 10000);
        assert_int_equal(c.queue_timeout_sec, 0);
        assert_int_equal(c.memory_safety_margin_mb, 2000);
        assert_int_equal(c.max_models_per_gpu, 2);
        assert_true(c.backfill);
        assert_int_equal(c.backfill_depth, 1000);
        assert_false(c.spf_preempt);
        assert_int_equal(c.n_las_thresholds, 2); /* the core's LAS levels: 1 and 10 GPU-hours */
        assert_int_equal(c.las_thresholds_s[0], 3600);
        assert_int_equal(c.las_thresholds_s[1], 36000);
        assert_true(c.preemption_enabled);
        assert_int_equal(c.preemption_grace_sec, 30);
        assert_int_equal(c.preemption_min_runtime_sec, 60);
        assert_int_equal(c.default_lease_ttl_s, 60);
        assert_int_equal(c.max_lease_ttl_s, 86400);
        assert_int_equal(c.kill_grace_s, 10);
        assert_int_equal(c.elastic_signal, SIGUSR1);
        assert_int_equal(c.max_log_bytes, 64 << 20);
        assert_int_equal(c.default_max_retries, 1);
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), 0);
}

static void test_empty_and_comment_only_files_give_defaults(void **state) {
        static const char *const inputs[] = {"", "# nothing\n", "---\n", "server:\n", "~\n"};
        for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
                gp_config c, d;
                char err[256];
                gp_config_defaults(&d);
                memset(&c, 0x5a, sizeof(c));
                assert_int_equal(load(inputs[i], &c, err, sizeof(err)), 0);
                assert_string_equal(c.source, "t.yaml");
                memcpy(d.source, c.source, sizeof(d.source));
                assert_memory_equal(&c, &d, sizeof(c));
        }
}

static const char full_yaml[] =
        "server:\n"
        "  listen: \"127.0.0.1:9090\"\n"
        "  data_dir: /var/lib/gpupool\n"
        "  max_connections: 77\n"
        "  max_body_bytes: 2048\n"
        "  connection_timeout_s: 5\n"
        "  header_timeout_s: 3\n"
        "  min_body_rate_bytes_s: 500\n"
        "  max_connections_per_ip: 9\n"
        "  http_threads: 8\n"
        "auth:\n"
        "  admin_keys: [\"" KEY_A "\", \"" KEY_B "\"]\n"
        "store:\n"
        "  url: \"postgres://gp:secret@db/gpupool\"\n"
        "  sync: normal\n"
        "gpus:\n"
        "  backend: sim\n"
        "  nvml_library: /opt/nvidia/libnvidia-ml.so.1\n"
        "  reserved: [0, \"GPU-8a3c-11\", \"3\"]\n"
        "  sim:\n"
        "    - {name: \"NVIDIA A100-SXM4-80GB\", memory_mb: 81920, count: 8}\n"
        "    - name: \"Tesla T4\"\n"
        "      memory_mb: 15360\n"
        "  poll_ms: 500\n"
        "scheduler:\n"
        "  policy: strict\n"
        "  priority_levels: 10\n"
        "  weights: [1000, 500, 100, 50, 20, 10, 5, 3, 2, 1]\n"
        "  max_queue_depth: 42\n"
        "  queue_timeout_sec: 9\n"
        "  memory_safety_margin_mb: 0\n"
        "  max_models_per_gpu: 3\n"
        "  backfill: no\n"
        "  backfill_depth: 7\n"
        "  spf_preempt: true\n"
        "  las_thresholds_s: [2, 1h, 100000]\n"
        "  preemption: {enabled: false, grace_sec: 4, min_runtime_sec: 600}\n"
        "tasks:\n"
        "  default_lease_ttl_s: 30\n"
        "  max_lease_ttl_s: 3600\n"
        "  kill_grace_s: 2\n"
        "  elastic_signal: SIGWINCH\n"
        "  max_log_bytes: 1048576\n"
        "  default_max_retries: 0\n";

static void test_full_file_overrides_every_key(void **state) {
        gp_config c;
        char err[512];
        gp_config_defaults(&c);
        assert_int_equal(load(full_yaml, &c, err, sizeof(err)), 0);
        assert_string_equal(err, "");
        assert_string_equal(c.source, "t.yaml");
        assert_string_equal(c.listen, "127.0.0.1:9090");
        assert_string_equal(c.data_dir, "/var/lib/gpupool");
        assert_int_equal(c.max_connections, 77);
        assert_int_equal(c.max_body_bytes, 2048);
        assert_int_equal(c.connection_timeout_s, 5);
        assert_int_equal(c.header_timeout_s, 3);
        assert_int_equal(c.min_body_rate_bytes_s, 500);
        assert_int_equal(c.max_connections_per_ip, 9);
        assert_int_equal(c.http_threads, 8);
        assert_int_equal(c.n_admin_keys, 2);
        assert_string_equal(c.admin_keys[0], KEY_A);
        assert_string_equal(c.admin_keys[1], KEY_B);
        assert_string_equal(c.store_url, "postgres://gp:secret@db/gpupool");
        assert_false(c.store_sync_full);
        assert_string_equal(c.gpu_backend, "sim");
        assert_string_equal(c.nvml_library, "/opt/nvidia/libnvidia-ml.so.1");
        assert_int_equal(c.n_reserved, 3);
        assert_string_equal(c.reserved[0], "0");
        assert_string_equal(c.reserved[1], "GPU-8a3c-11");
        assert_string_equal(c.reserved[2], "3");
        assert_int_equal(c.n_sim, 2);
        assert_string_equal(c.sim[0].name, "NVIDIA A100-SXM4-80GB");
        assert_int_equal(c.sim[0].memory_mb, 81920);
        assert_int_equal(c.sim[0].count, 8);
        assert_string_equal(c.sim[1].name, "Tesla T4");
        assert_int_equal(c.sim[1].memory_mb, 15360);
        assert_int_equal(c.sim[1].count, 1); /* count defaults to 1 */
        assert_int_equal(c.gpu_poll_ms, 500);
        assert_int_equal(c.policy, GP_SCHED_STRICT);
        assert_int_equal(c.priority_levels, 10);
        static const uint32_t w[10] = {1000, 500, 100, 50, 20, 10, 5, 3, 2, 1};
        assert_memory_equal(c.weights, w, sizeof(w));
        assert_int_equal(c.max_queue_depth, 42);
        assert_int_equal(c.queue_timeout_sec, 9);
        assert_int_equal(c.memory_safety_margin_mb, 0);
        assert_int_equal(c.max_models_per_gpu, 3);
        assert_false(c.backfill);
        assert_int_equal(c.backfill_depth, 7);
        assert_true(c.spf_preempt);
        assert_int_equal(c.n_las_thresholds, 3);
        assert_int_equal(c.las_thresholds_s[0], 2);
        assert_int_equal(c.las_thresholds_s[1], 3600);
        assert_int_equal(c.las_thresholds_s[2], 100000);
        assert_false(c.preemption_enabled);
        assert_int_equal(c.preemption_grace_sec, 4);
        assert_int_equal(c.preemption_min_runtime_sec, 600);
        assert_int_equal(c.default_lease_ttl_s, 30);
        assert_int_equal(c.max_lease_ttl_s, 3600);
        assert_int_equal(c.kill_grace_s, 2);
        assert_int_equal(c.elastic_signal, SIGWINCH);
        assert_int_equal(c.max_log_bytes, 1048576);
        assert_int_equal(c.default_max_retries, 0);
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), 0);
}

static void test_load_starts_from_defaults_not_from_cfg(void **state) {
        gp_config c;
        char err[256];
        gp_config_defaults(&c);
        c.http_threads = 99;
        assert_int_equal(load("tasks: {kill_grace_s: 3}\n", &c, err, sizeof(err)), 0);
        assert_int_equal(c.kill_grace_s, 3);
        assert_int_equal(c.http_threads, 2);
}

static void test_store_url_follows_data_dir_unless_set(void **state) {
        gp_config c;
        char err[256];
        assert_int_equal(load("server: {data_dir: /srv/gp/}\n", &c, err, sizeof(err)), 0);
        assert_string_equal(c.store_url, "sqlite:///srv/gp/gpupool.db");
        assert_int_equal(load("server: {data_dir: /srv/gp}\nstore: {url: \"sqlite:///x.db\"}\n", &c, err,
                              sizeof(err)),
                         0);
        assert_string_equal(c.store_url, "sqlite:///x.db");
        assert_int_equal(load("store: {url: \"postgresql://h/db\"}\n", &c, err, sizeof(err)), 0);
        assert_string_equal(c.store_url, "postgresql://h/db");
}

static void test_booleans_and_listen_forms_are_accepted(void **state) {
        gp_config c;
        char err[256];
        assert_int_equal(load("scheduler: {backfill: yes, preemption: {enabled: No}}\n", &c, err,
                              sizeof(err)),
                         0);
        assert_true(c.backfill);
        assert_false(c.preemption_enabled);
        assert_int_equal(load("scheduler: {backfill: False}\n", &c, err, sizeof(err)), 0);
        assert_false(c.backfill);
        static const char *const ok[] = {"localhost:8080", "10.0.0.1:65535", "0.0.0.0:1"};
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                char y[128];
                snprintf(y, sizeof(y), "server: {listen: \"%s\"}\n", ok[i]);
                assert_int_equal(load(y, &c, err, sizeof(err)), 0);
                assert_string_equal(c.listen, ok[i]);
        }
}

static void test_allowed_origins_load_and_bad_ones_are_refused_with_file_line(void **state) {
        static gp_config c;
        char err[512];
        assert_int_equal(load("", &c, err, sizeof(err)), 0);
        assert_int_equal(c.n_allowed_origins, 0);
        assert_int_equal(load("server:\n  allowed_origins:\n    - \"https://ui.example.com\"\n"
                              "    - http://127.0.0.1:3000\n    - \"http://[::1]:8080\"\n",
                              &c, err, sizeof(err)),
                         0);
        assert_int_equal(c.n_allowed_origins, 3);
        assert_string_equal(c.allowed_origins[0], "https://ui.example.com");
        assert_string_equal(c.allowed_origins[1], "http://127.0.0.1:3000");
        assert_string_equal(c.allowed_origins[2], "http://[::1]:8080");
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), 0);
        static const struct {
                const char *yaml, *want;
        } bad[] = {
                {"server:\n  allowed_origins:\n    - \"https://ui.example.com/\"\n",
                 "t.yaml:3: server.allowed_origins[0]: an origin has no path"},
                {"server:\n  allowed_origins: [\"https://a.example\", \"ui.example.com\"]\n",
                 "t.yaml:2: server.allowed_origins[1]: the scheme must be http:// or https://"},
                {"server:\n  allowed_origins: [\"https://a.example:443\"]\n",
                 "t.yaml:2: server.allowed_origins[0]: leave out the scheme's default port"},
                {"server:\n  allowed_origins: [\"*\"]\n", "t.yaml:2: server.allowed_origins[0]: the scheme"},
                {"server:\n  allowed_origins: [\"https://a.example\", \"https://A.example\"]\n",
                 "t.yaml:2: server.allowed_origins[1]: origin \"https://A.example\" is listed twice"},
                {"server:\n  allowed_origins: \"https://a.example\"\n", "t.yaml:2: server.allowed_origins: expected a list"},
                {"server:\n  allowed_origins: [{a: 1}]\n", "t.yaml:2: server.allowed_origins[0]: expected an origin"},
                {"server:\n  allowed_origins: [\"https://a.example:99999\"]\n",
                 "t.yaml:2: server.allowed_origins[0]: the port must be 1..65535"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                gp_config_defaults(&c);
                c.kill_grace_s = 7;
                int r = load(bad[i].yaml, &c, err, sizeof(err));
                if (r != -EINVAL || strncmp(err, bad[i].want, strlen(bad[i].want)) != 0)
                        fail_msg("input %zu: got %d \"%s\", want \"%s...\"", i, r, err, bad[i].want);
                assert_int_equal(c.kill_grace_s, 7); /* unchanged */
                assert_int_equal(c.n_allowed_origins, 0);
        }
        /* bounded: at most GP_MAX_ALLOWED_ORIGINS, each under GP_ORIGIN_MAX bytes */
        gp_buf y;
        gp_buf_init(&y, 0);
        assert_int_equal(gp_buf_puts(&y, "server:\n  allowed_origins:\n"), 0);
        for (int i = 0; i <= GP_MAX_ALLOWED_ORIGINS; i++)
                assert_int_equal(gp_buf_printf(&y, "    - \"http://h%d.example\"\n", i), 0);
        assert_int_equal(load(y.data, &c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "t.yaml:35: server.allowed_origins[32]: too many origins (at most 32)"));
        gp_buf_reset(&y);
        assert_int_equal(gp_buf_puts(&y, "server: {allowed_origins: [\"https://"), 0);
        for (int i = 0; i < GP_ORIGIN_MAX; i++)
                assert_int_equal(gp_buf_puts(&y, "a"), 0);
        assert_int_equal(gp_buf_puts(&y, "\"]}\n"), 0);
        assert_int_equal(load(y.data, &c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "t.yaml:1: server.allowed_origins[0]: too long"));
        gp_buf_done(&y);
        /* validate catches a list written in code */
        gp_config_defaults(&c);
        c.n_allowed_origins = 1;
        gp_strlcpy(c.allowed_origins[0], "https://x/", GP_ORIGIN_MAX);
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "server.allowed_origins[0]"));
}

static void test_tenants_groups_and_time_rules_load(void **state) {
        static gp_config c;
        char err[512];
        const char *y = "tenants:\n"
                        "  - id: dept_a\n"
                        "    keys: [\"sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"]\n"
                        "    max_priority: 0\n    default_priority: 2\n    weight: 4\n"
                        "    quota: {max_concurrent: 30, max_gpus: 8, guaranteed_gpus: 0.5}\n"
                        "  - {id: cust_free, kind: external, max_priority: 7, default_priority: 9}\n"
                        "groups: [{name: internal, share_pct: 80}, {name: external, share_pct: 20}]\n"
                        "auth: {over_max_priority: clamp}\n"
                        "time_rules:\n"
                        "  - name: night\n    start: \"18:00\"\n    end: \"08:00\"\n    tz: Asia/Shanghai\n"
                        "    groups: [{name: internal, share_pct: 20}, {name: external, share_pct: 80}]\n"
                        "    quotas: {dept_a: {max_gpus: 2}}\n";
        assert_int_equal(load(y, &c, err, sizeof(err)), 0);
        assert_int_equal(c.n_tenants, 2);
        assert_string_equal(c.tenants[0].id, "dept_a");
        assert_int_equal(c.tenants[0].n_keys, 1);
        assert_int_equal(c.tenants[0].weight, 4);
        assert_int_equal(c.tenants[0].quota.max_concurrent, 30);
        assert_int_equal(c.tenants[0].quota.max_gpus_milli, 8000);
        assert_int_equal(c.tenants[0].quota.guaranteed_gpus_milli, 500);
        assert_string_equal(c.tenants[0].group, "internal");
        assert_string_equal(c.tenants[1].group, "external");
        assert_string_equal(c.tenants[1].name, "cust_free");
        assert_int_equal(c.tenants[1].default_priority, 9);
        assert_true(c.clamp_priority);
        assert_int_equal(c.n_groups, 2);
        assert_int_equal(c.n_time_rules, 1);
        const gp_cfg_time_rule *tr = &c.time_rules[0];
        assert_int_equal(tr->start_min, 18 * 60);
        assert_int_equal(tr->end_min, 8 * 60);
        assert_string_equal(tr->tz, "Asia/Shanghai");
        assert_false(tr->has_weights);
        assert_int_equal(tr->n_groups, 2);
        assert_int_equal(tr->groups[1].share_pct, 80);
        assert_int_equal(tr->n_quotas, 1);
        assert_int_equal(tr->quotas[0].quota.max_gpus_milli, 2000);
        assert_int_equal(tr->quotas[0].quota.max_concurrent, -1); /* unchanged */
        /* 18:00-08:00 wraps midnight */
        assert_true(gp_time_rule_covers(tr, 18 * 60));
        assert_true(gp_time_rule_covers(tr, 23 * 60 + 59));
        assert_true(gp_time_rule_covers(tr, 0));
        assert_true(gp_time_rule_covers(tr, 7 * 60 + 59));
        assert_false(gp_time_rule_covers(tr, 8 * 60));
        assert_false(gp_time_rule_covers(tr, 12 * 60));
}

/* The e-commerce windows with a fake clock: which rule is in force at
 * 10:00 and at 22:00 Beijing time (UTC+8, no DST), and across midnight. */
static void test_day_to_night_switch_with_a_fake_clock(void **state) {
        static gp_config c;
        static gp_tz z;
        char err[512];
        assert_int_equal(gp_config_load("examples/ecommerce/gpupool.yaml", &c, err, sizeof(err)), 0);
        assert_int_equal(c.n_time_rules, 2);
        const gp_cfg_time_rule *day = &c.time_rules[0], *night = &c.time_rules[1];
        assert_string_equal(day->name, "day");
        assert_int_equal(gp_tz_load(day->tz, &z), 0);
        static const struct {
                int64_t utc_s;  /* 2026-11-22 at ... UTC */
                bool day, night;
        } at[] = {
                {1795305600 + 2 * 3600, true, false},          /* 02:00Z = 10:00 in Beijing */
                {1795305600 + 9 * 3600 + 59 * 60, true, false}, /* 17:59 Beijing */
                {1795305600 + 10 * 3600, false, true},         /* 18:00 Beijing: night starts */
                {1795305600 + 14 * 3600, false, true},         /* 22:00 Beijing */
                {1795305600 + 16 * 3600 + 30 * 60, false, true}, /* 00:30 Beijing, after midnight */
                {1795305600 + 24 * 3600, true, false},         /* 08:00 Beijing next day: day again */
        };
        for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
                int m = gp_tz_minute_of_day(&z, at[i].utc_s * 1000);
                assert_int_equal(gp_time_rule_covers(day, m), at[i].day);
                assert_int_equal(gp_time_rule_covers(night, m), at[i].night);
        }
        /* what switches: the group shares, and premium's quota at night */
        assert_int_equal(day->groups[0].share_pct, 80);
        assert_int_equal(night->groups[0].share_pct, 20);
        assert_string_equal(night->quotas[0].tenant, "premium");
        assert_int_equal(night->quotas[0].quota.max_gpus_milli, 6000);
}

static void test_example_file_loads(void **state) {
        gp_config c, d;
        char err[512];
        int r = gp_config_load("examples/gpupool.yaml", &c, err, sizeof(err));
        if (r != 0)
                fail_msg("examples/gpupool.yaml: %d %s", r, err);
        assert_string_equal(c.source, "examples/gpupool.yaml");
        /* it ships no admin key (a sample hash would be a known key) and
         * otherwise shows the defaults */
        assert_int_equal(c.n_admin_keys, 0);
        gp_config_defaults(&d);
        memcpy(d.source, c.source, sizeof(d.source));
        assert_memory_equal(&c, &d, sizeof(c));
}

struct bad {
        const char *yaml;
        const char *want; /* the message starts with this */
        int rc;
};

static const struct bad bad_inputs[] = {
        /* unknown key, with the valid keys listed */
        {"server:\n  listen: \"1.2.3.4:80\"\n  lisen: x\n",
         "t.yaml:3: server.lisen: unknown key (valid keys of server: listen, data_dir,", -EINVAL},
        {"# c\nfoo: 1\n", "t.yaml:2: foo: unknown key (valid keys: server, auth, store, gpus, agent, node, cluster, scheduler, tasks, monitor, alerts, tenants, groups, time_rules, gateway, billing)",
         -EINVAL},
        {"scheduler:\n  preemption:\n    grace: 3\n", "t.yaml:3: scheduler.preemption.grace: unknown key",
         -EINVAL},
        {"gpus:\n  sim:\n    - {name: x, memory_mb: 1, colour: red}\n", "t.yaml:3: gpus.sim[0].colour: unknown key",
         -EINVAL},
        {"server: {server.listen: x}\n", "t.yaml:1: server.server.listen: unknown key", -EINVAL},
        /* sections of the product this version does not implement */
        /* tenants and groups */
        {"tenants:\n  - {name: x}\n", "t.yaml:2: tenants[0]: missing id", -EINVAL},
        {"tenants:\n  - {id: \"a b\"}\n", "t.yaml:2: tenants[0]: id \"a b\": only letters", -EINVAL},
        {"tenants:\n  - {id: a}\n  - {id: a}\n", "t.yaml:3: tenants[1]: tenant \"a\" is defined twice", -EINVAL},
        {"tenants:\n  - {id: a, max_priority: 10}\n", "t.yaml:2: tenants[0].max_priority: must be between 0 and 9",
         -EINVAL},
        {"tenants:\n  - {id: a, default_priority: 1, max_priority: 3}\n",
         "t.yaml:2: tenants[0]: default_priority 1 is more urgent than max_priority 3", -EINVAL},
        {"tenants:\n  - {id: a, quota: {max_gpus: 1.2345}}\n", "t.yaml:2: tenants[0].quota.max_gpus: expected a number",
         -EINVAL},
        /* quotas: config/quota.c's table and reader (the REST API's too) */
        {"tenants:\n  - {id: a, quota: {max_gpus: 0.0004}}\n",
         "t.yaml:2: tenants[0].quota.max_gpus: expected a number of GPUs with at most 3 decimals (e.g. 8 or 0.5), "
         "got 0.0004", -EINVAL},
        {"tenants:\n  - {id: a, quota: {guaranteed_gpus: -1}}\n",
         "t.yaml:2: tenants[0].quota.guaranteed_gpus: must be between 0 and 1000000 GPUs, got -1", -EINVAL},
        {"tenants:\n  - {id: a, quota: {max_gpus: 1000000.5}}\n",
         "t.yaml:2: tenants[0].quota.max_gpus: must be between 0 and 1000000 GPUs, got 1000000.5", -EINVAL},
        {"tenants:\n  - {id: a, quota: {max_gpus: 1e3}}\n",
         "t.yaml:2: tenants[0].quota.max_gpus: expected a number of GPUs with at most 3 decimals", -EINVAL},
        {"tenants:\n  - {id: a, quota: {max_gpus: \"8\"}}\n",
         "t.yaml:2: tenants[0].quota.max_gpus: expected a number of GPUs with at most 3 decimals (e.g. 8 or 0.5), "
         "got the quoted string \"8\"", -EINVAL},
        {"tenants:\n  - {id: a, quota: {max_concurrent: 1.5}}\n",
         "t.yaml:2: tenants[0].quota.max_concurrent: expected a whole number between 0 and 1000000, got 1.5", -EINVAL},
        {"tenants:\n  - {id: a, quota: {max_queued: 1000001}}\n",
         "t.yaml:2: tenants[0].quota.max_queued: must be between 0 and 1000000, got 1000001", -EINVAL},
        {"tenants:\n  - {id: a, quota: {max_concurrent: 010}}\n",
         "t.yaml:2: tenants[0].quota.max_concurrent: expected a whole number between 0 and 1000000, got 010", -EINVAL},
        {"tenants: [{id: a}]\ntime_rules:\n  - {name: x, start: \"20:00\", end: \"01:00\", quotas: {a: {max_gpus: 0.0001}}}\n",
         "t.yaml:3: time_rules[0].quotas.a.max_gpus: expected a number of GPUs with at most 3 decimals", -EINVAL},
        {"tenants: [{id: a}]\ntime_rules:\n  - {name: x, start: \"20:00\", end: \"01:00\", quotas: {a: {max_queued: -2}}}\n",
         "t.yaml:3: time_rules[0].quotas.a.max_queued: must be between 0 and 1000000, got -2", -EINVAL},
        /* text: no tab, NEL, line/paragraph separators or bidi controls in names */
        {"tenants:\n  - {id: a, name: \"x\\ty\"}\n", "t.yaml:2: tenants[0].name: contains control characters", -EINVAL},
        {"tenants:\n  - {id: a, name: \"x\\Ny\"}\n", "t.yaml:2: tenants[0].name: contains control characters",
         -EINVAL},
        {"tenants:\n  - {id: a, name: \"x\\Ly\"}\n",
         "t.yaml:2: tenants[0].name: contains a line or paragraph separator (U+2028, U+2029)", -EINVAL},
        {"gateway:\n  models:\n    - {name: \"m\\u202Ex\", upstreams: [\"http://h:1\"]}\n",
         "t.yaml:3: gateway.models[0].name: contains a bidirectional control character", -EINVAL},
        {"gpus: {sim: [{name: \"a\\u2029\", memory_mb: 1}]}\n",
         "t.yaml:1: gpus.sim[0].name: contains a line or paragraph separator", -EINVAL},
        {"groups: [{name: \"in\\tternal\", share_pct: 10}]\n", "t.yaml:1: groups[0].name: contains control characters",
         -EINVAL},
        /* cross-references: a tenant's group, group shares, tenants named by time rules */
        {"tenants:\n  - {id: a, group: gpu_team}\n",
         "t.yaml:2: tenants[0].group: group \"gpu_team\" is not defined: add it to groups ([{name: gpu_team, "
         "share_pct: N}]) or leave group out (the default is the tenant's kind, internal)", -EINVAL},
        {"groups: [{name: internal, share_pct: 80}]\ntenants:\n  - id: a\n    group: extrenal\n",
         "t.yaml:4: tenants[0].group: group \"extrenal\" is not defined (groups: internal)", -EINVAL},
        {"groups:\n  - {name: internal, share_pct: 80}\n  - {name: external, share_pct: 30}\n",
         "t.yaml:3: groups[1]: the group shares add up to 110% (internal 80, external 30); at most 100", -EINVAL},
        {"groups: [{name: internal, share_pct: 80}, {name: external, share_pct: 20}]\ntime_rules:\n  - name: night\n"
         "    start: \"18:00\"\n    end: \"08:00\"\n    groups:\n      - {name: external, share_pct: 90}\n",
         "t.yaml:7: time_rules[0].groups: while this rule is in force the group shares add up to 170% (internal 80, "
         "external 90); at most 100", -EINVAL},
        {"tenants: [{id: a}]\ntime_rules:\n  - name: day\n    start: \"08:00\"\n    end: \"18:00\"\n    quotas:\n"
         "      a: {max_concurrent: 3}\n      dept_b: {max_gpus: 2}\n",
         "t.yaml:8: time_rules[0].quotas.dept_b: no tenant \"dept_b\" is defined in tenants", -EINVAL},
        /* a key hash has one owner: the second one is named, with the first */
        {"auth: {admin_keys: [\"" KEY_A "\"]}\ntenants:\n  - id: a\n    keys: [\"" KEY_A "\"]\n",
         "t.yaml:4: tenants[0].keys[0]: this key hash is already an admin key (auth.admin_keys[0], line 1); a key "
         "belongs to one owner", -EINVAL},
        {"tenants:\n  - {id: a, keys: [\"" KEY_B "\"]}\n  - id: b\n    keys:\n      - \"" KEY_A "\"\n      - \"" KEY_B
         "\"\n",
         "t.yaml:6: tenants[1].keys[1]: this key hash is already given to tenant \"a\" (tenants[0].keys[0], line 2); "
         "a key belongs to one owner", -EINVAL},
        {"tenants:\n  - {id: a, keys: [\"" KEY_B "\"]}\nauth:\n  admin_keys: [\"" KEY_B "\"]\n",
         "t.yaml:4: auth.admin_keys[0]: this key hash is already given to tenant \"a\" (tenants[0].keys[0], line 2)",
         -EINVAL},
        {"tenants:\n  - {id: a, keys: [\"" KEY_B "\", \"" KEY_B "\"]}\n",
         "t.yaml:2: tenants[0].keys[1]: the same key hash is listed twice (items 0 and 1)", -EINVAL},
        {"tenants:\n  - {id: a, quota: {max_gpus: 2, guaranteed_gpus: 3}}\n",
         "t.yaml:2: tenants[0]: quota.guaranteed_gpus is above quota.max_gpus", -EINVAL},
        {"tenants:\n  - {id: a, keys: [secret]}\n", "t.yaml:2: tenants[0].keys[0]: expected \"sha256:\"", -EINVAL},
        {"tenants:\n  - {id: a, kind: partner}\n", "t.yaml:2: tenants[0].kind:", -EINVAL},
        {"groups:\n  - {name: g, share_pct: 101}\n", "t.yaml:2: groups[0].share_pct: must be between 1 and 100",
         -EINVAL},
        {"auth: {over_max_priority: maybe}\n", "t.yaml:1: auth.over_max_priority:", -EINVAL},
        {"time_rules:\n  - {name: x, start: \"25:00\", end: \"01:00\"}\n",
         "t.yaml:2: time_rules[0].start: expected a time of day", -EINVAL},
        {"time_rules:\n  - {name: x, start: \"20:00\", end: \"01:00\", tz: Mars/Base}\n",
         "t.yaml:2: time_rules[0].tz: Mars/Base is not a time zone", -EINVAL},
        {"time_rules:\n  - {name: x, start: \"20:00\", end: \"01:00\", tz: ../../etc/passwd}\n",
         "t.yaml:2: time_rules[0].tz:", -EINVAL},
        {"time_rules:\n  - {name: x, start: \"20:00\", end: \"20:00\"}\n",
         "t.yaml:2: time_rules[0]: start and end are the same time", -EINVAL},
        {"time_rules:\n  - {name: x, start: \"20:00\"}\n", "t.yaml:2: time_rules[0]: a time rule needs start and end",
         -EINVAL},
        {"time_rules:\n  - {name: x, start: \"20:00\", end: \"01:00\", quotas: {a: {max_gpuz: 1}}}\n",
         "t.yaml:2: time_rules[0].quotas.a.max_gpuz: unknown key", -EINVAL},
        {"time_rules:\n  - {name: x, start: \"20:00\", end: \"01:00\", weights: [1, 2]}\n",
         "t.yaml:2: time_rules[0].weights: expected a list of 10 positive integers", -EINVAL},
        /* gateway: models need a name and upstreams (serve is checked, then refused) */
        {"gateway:\n  models:\n    - {upstreams: [\"http://127.0.0.1:8000\"]}\n", "t.yaml:3: gateway.models[0]: missing name",
         -EINVAL},
        {"gateway:\n  models:\n    - {name: m}\n", "t.yaml:3: gateway.models[0]: model \"m\" needs upstreams or serve",
         -EINVAL},
        {"gateway:\n  models:\n    - {name: m, upstreams: [\"http://h:1/\"]}\n",
         "t.yaml:3: gateway.models[0].upstreams[0]: expected an upstream base URL", -EINVAL},
        /* the OpenAI habit: base URL with /v1 (every request would be /v1/v1/..., 404) */
        {"gateway:\n  models:\n    - {name: m, upstreams: [\"http://h:1/v1\"]}\n",
         "t.yaml:3: gateway.models[0].upstreams[0]: an upstream is the server's base URL without /v1 (the gateway "
         "adds /v1/... itself, as it received it): write \"http://h:1\"", -EINVAL},
        {"gateway:\n  models:\n    - {name: m, upstreams: [\"http://h:99999\"]}\n",
         "t.yaml:3: gateway.models[0].upstreams[0]: expected an upstream base URL", -EINVAL},
        {"gateway:\n  models:\n    - {name: m, upstreams: [\"http://:80\"]}\n",
         "t.yaml:3: gateway.models[0].upstreams[0]: expected an upstream base URL", -EINVAL},
        {"gateway:\n  models:\n    - {name: m, upstreams: [\"http://[::1:80\"]}\n",
         "t.yaml:3: gateway.models[0].upstreams[0]: expected an upstream base URL", -EINVAL},
        {"gateway:\n  models:\n    - {name: m, upstreams: [\"http://h:1\"]}\n    - {name: m, upstreams: [\"http://h:2\"]}\n",
         "t.yaml:4: gateway.models[1]: model \"m\" is defined twice", -EINVAL},
        {"gateway:\n  models:\n    - {name: m, serve: {command: [vllm], autoscale: {min: 3, max: 1}}}\n",
         "t.yaml:3: gateway.models[0].serve.autoscale: min 3 is above max 1", -EINVAL},
        {"gateway:\n  models:\n    - {name: m, serve: {command: [vllm], port: 8000, replicas: 2}}\n",
         "t.yaml:3: gateway.models[0].serve: port 8000 is fixed, so only one replica can run", -EINVAL},
        {"gateway:\n  models:\n    - {name: m, serve: {gpus: 1}}\n", "t.yaml:3: gateway.models[0].serve: missing command",
         -EINVAL},
        {"gateway:\n  limits: {max_rps: -1}\n", "t.yaml:2: gateway.limits.max_rps: ", -EINVAL},
        {"gateway:\n  models:\n    - {name: m, tokenize: always, upstreams: [\"http://h:1\"]}\n",
         "t.yaml:3: gateway.models[0].tokenize: ", -EINVAL},
        {"tenants:\n  - {id: a, gateway: {rpm: x}}\n", "t.yaml:2: tenants[0].gateway.rpm: ", -EINVAL},
        /* billing: money is exact decimal text, lists need their keys */
        {"billing: {prices: [{gpu_model: \"*\", per_gpu_hour: -2}]}\n",
         "t.yaml:1: billing.prices[0].per_gpu_hour: expected a decimal number with at most 6 decimals", -EINVAL},
        {"billing: {prices: [{gpu_model: \"*\", per_gpu_hour: 0.0000001}]}\n",
         "t.yaml:1: billing.prices[0].per_gpu_hour: expected a decimal number", -EINVAL},
        {"billing: {prices: [{gpu_model: \"*\"}]}\n", "t.yaml:1: billing.prices[0]: a price needs per_gpu_hour",
         -EINVAL},
        {"billing: {volume_discounts: [{gpu_hours: 500, factor: 0.8}, {gpu_hours: 100, factor: 0.9}]}\n",
         "t.yaml:1: billing.volume_discounts[1]: gpu_hours must grow", -EINVAL},
        {"billing: {volume_discounts: [{gpu_hours: 100, factor: 1.5}]}\n",
         "t.yaml:1: billing.volume_discounts[0].factor: must be between 0 and 1, got 1.5", -EINVAL},
        {"billing: {time_windows: [{name: n, start: \"22:00\", end: \"06:00\"}]}\n",
         "t.yaml:1: billing.time_windows[0]: a time window needs name, start, end", -EINVAL},
        {"billing: {time_windows: [{name: n, start: \"22:00\", end: \"06:00\", multiplier: 0.5, tz: Mars/Base}]}\n",
         "t.yaml:1: billing.time_windows[0].tz: Mars/Base is not a time zone", -EINVAL},
        {"billing: {token_prices: [{model: \"x*\"}]}\n", "t.yaml:1: billing.token_prices[0]: a token price needs",
         -EINVAL},
        {"billing: {record_interval_s: 0}\n", "t.yaml:1: billing.record_interval_s: must be between 1 and 86400",
         -EINVAL},
        {"billing: {invoices: yes}\n", "t.yaml:1: billing.invoices: unknown key", -EINVAL},
        /* alerts: rules need a name and a `when` over a known metric */
        {"alerts:\n  rules:\n    - {name: x}\n", "t.yaml:3: alerts.rules[0]: missing when", -EINVAL},
        {"alerts:\n  rules:\n    - {when: gpu_temp_c > 80}\n", "t.yaml:3: alerts.rules[0]: missing name", -EINVAL},
        {"alerts:\n  rules:\n    - {name: x, when: \"gpu_tmp > 80\"}\n",
         "t.yaml:3: alerts.rules[0].when: unknown metric (known: gpu_unhealthy,", -EINVAL},
        {"alerts:\n  rules:\n    - {name: x, when: \"gpu_temp_c => 80\"}\n",
         "t.yaml:3: alerts.rules[0].when: expected an operator (>, >=, <, <=, ==, !=)", -EINVAL},
        {"alerts:\n  rules:\n    - {name: x, when: \"gpu_temp_c > hot\"}\n",
         "t.yaml:3: alerts.rules[0].when: expected a number after the operator", -EINVAL},
        {"alerts:\n  rules:\n    - {name: x, when: \"gpu_temp_c > 80 C\"}\n",
         "t.yaml:3: alerts.rules[0].when: unexpected text after the number", -EINVAL},
        {"alerts:\n  rules:\n    - {name: x, when: gpu_unhealthy}\n    - {name: x, when: node_lost}\n",
         "t.yaml:4: alerts.rules[1]: the name \"x\" is used by alerts.rules[0] too", -EINVAL},
        {"alerts:\n  rules:\n    - {name: \"a b\", when: node_lost}\n",
         "t.yaml:2: alerts.rules[0].name: use letters, digits", -EINVAL},
        {"alerts:\n  rules:\n    - {name: x, when: node_lost, severity: page}\n",
         "t.yaml:3: alerts.rules[0].severity: expected one of info, warning, critical; got page", -EINVAL},
        {"alerts:\n  rules:\n    - {name: x, when: node_lost, for_s: -1}\n",
         "t.yaml:3: alerts.rules[0].for_s: must be between 0 and 86400, got -1", -EINVAL},
        {"alerts: {webhook: \"ftp://x/y\"}\n",
         "t.yaml:1: alerts.webhook: expected an http:// or https:// URL (or \"\" for none)", -EINVAL},
        {"alerts: {webhook: \"http://\"}\n", "t.yaml:1: alerts.webhook: expected an http:// or https:// URL",
         -EINVAL},
        {"monitor: {sample_ms: 50}\n", "t.yaml:1: monitor.sample_ms: must be between 100 and 60000, got 50",
         -EINVAL},
        /* wrong types */
        {"server:\n  http_threads: abc\n", "t.yaml:2: server.http_threads: expected a decimal integer, got abc",
         -EINVAL},
        {"server:\n  http_threads: 1.5\n", "t.yaml:2: server.http_threads: expected a decimal integer, got 1.5",
         -EINVAL},
        {"server:\n  http_threads: [1]\n", "t.yaml:2: server.http_threads: expected an integer, got a list",
         -EINVAL},
        {"server:\n  http_threads: \"4\"\n",
         "t.yaml:2: server.http_threads: expected an integer, got the quoted string \"4\"", -EINVAL},
        {"server:\n  http_threads:\n", "t.yaml:2: server.http_threads: expected an integer, got nothing", -EINVAL},
        {"server: {max_body_bytes: 0x100}\n", "t.yaml:1: server.max_body_bytes: expected a decimal integer",
         -EINVAL},
        {"server: {max_body_bytes: 010}\n", "t.yaml:1: server.max_body_bytes: expected a decimal integer",
         -EINVAL},
        {"server: {max_body_bytes: 1MiB}\n", "t.yaml:1: server.max_body_bytes: expected a decimal integer",
         -EINVAL},
        {"scheduler: {backfill: maybe}\n", "t.yaml:1: scheduler.backfill: expected true or false, got maybe",
         -EINVAL},
        {"scheduler: {backfill: 1}\n", "t.yaml:1: scheduler.backfill: expected true or false", -EINVAL},
        {"server: [1, 2]\n", "t.yaml:1: server: expected a mapping of keys, got a list", -EINVAL},
        {"server: {data_dir: {a: 1}}\n", "t.yaml:1: server.data_dir: expected a string, got a mapping", -EINVAL},
        {"- server\n", "t.yaml:1: expected a mapping of sections", -EINVAL},
        {"scheduler: {policy: wfq}\n",
         "t.yaml:1: scheduler.policy: expected one of hybrid, strict, fifo, sef, spf; got wfq", -EINVAL},
        {"gpus: {backend: cuda}\n", "t.yaml:1: gpus.backend: expected one of auto, nvml, sim, none; got cuda", -EINVAL},
        {"store: {sync: off}\n", "t.yaml:1: store.sync: expected one of full, normal; got off", -EINVAL},
        {"tasks: {elastic_signal: SIGKILL}\n",
         "t.yaml:1: tasks.elastic_signal: expected one of SIGUSR1, SIGUSR2, SIGHUP, SIGWINCH, SIGURG, SIGCONT; got SIGKILL",
         -EINVAL},
        {"tasks: {elastic_signal: 10}\n", "t.yaml:1: tasks.elastic_signal: expected one of SIGUSR1", -EINVAL},
        /* out of range */
        {"server:\n  http_threads: 0\n", "t.yaml:2: server.http_threads: must be between 1 and 256, got 0",
         -EINVAL},
        {"server:\n  header_timeout_s: 0\n", "t.yaml:2: server.header_timeout_s: must be between 1 and 3600, got 0",
         -EINVAL},
        {"server:\n  header_timeout_s: 3601\n",
         "t.yaml:2: server.header_timeout_s: must be between 1 and 3600, got 3601", -EINVAL},
        {"server:\n  min_body_rate_bytes_s: 0\n", "t.yaml:2: server.min_body_rate_bytes_s: must be between 1 and",
         -EINVAL},
        {"server:\n  min_body_rate_bytes_s: -5\n", "t.yaml:2: server.min_body_rate_bytes_s: must be between 1 and",
         -EINVAL},
        {"server:\n  max_connections_per_ip: 0\n",
         "t.yaml:2: server.max_connections_per_ip: must be between 1 and 65536, got 0", -EINVAL},
        {"server:\n  max_connections_per_ip: 65537\n",
         "t.yaml:2: server.max_connections_per_ip: must be between 1 and 65536, got 65537", -EINVAL},
        {"server:\n  max_connections: 99999999999999999999999\n",
         "t.yaml:2: server.max_connections: must be between 1 and 65536, got 99999999999999999999999", -EINVAL},
        {"tasks: {max_log_bytes: 2199023255553}\n", "t.yaml:1: tasks.max_log_bytes: must be between", -EINVAL},
        {"scheduler: {priority_levels: 8}\n", "t.yaml:1: scheduler.priority_levels: must be 10", -EINVAL},
        {"gpus:\n  sim:\n    - {name: x, memory_mb: 1, count: 65}\n",
         "t.yaml:3: gpus.sim[0].count: must be between 1 and 64, got 65", -EINVAL},
        {"gpus:\n  sim:\n    - {name: x}\n", "t.yaml:3: gpus.sim[0]: missing memory_mb", -EINVAL},
        {"gpus: {reserved: [1024]}\n", "t.yaml:1: gpus.reserved[0]: expected a GPU index (0..1023)", -EINVAL},
        {"gpus: {reserved: [\"GPU 1\"]}\n", "t.yaml:1: gpus.reserved[0]: expected a GPU index", -EINVAL},
        {"gpus: {reserved: [1, 1]}\n", "t.yaml:1: gpus.reserved[1]: GPU \"1\" is listed twice", -EINVAL},
        {"gpus: {sharing: hami}\n", "t.yaml:1: gpus.sharing: expected one of watchdog, mps", -EINVAL},
        {"gpus: {sharing: mps, mps_gpus: [0, \"0\"]}\n", "t.yaml:1: gpus.mps_gpus[1]: GPU \"0\" is listed twice",
         -EINVAL},
        {"gpus: {mps_gpus: [1]}\n", "t.yaml:1: gpus.mps_gpus: names the GPUs of gpus.sharing: mps; sharing is watchdog", -EINVAL},
        {"gpus: {sharing: mps, mps_control: \"\"}\n", "t.yaml:1: gpus.mps_control", -EINVAL},
        /* weights: exactly 10, each 1..1000000 */
        {"scheduler:\n  policy: hybrid\n  weights: [256, 128, 64, 32, 16, 8, 4, 2, 1]\n",
         "t.yaml:3: scheduler.weights: expected a list of 10 positive integers (P0..P9), got 9", -EINVAL},
        {"scheduler:\n  weights:\n    - 1\n    - 2\n",
         "t.yaml:2: scheduler.weights: expected a list of 10 positive integers (P0..P9), got 2", -EINVAL},
        {"scheduler: {weights: [1,1,1,1,1,1,1,1,1,1,1]}\n",
         "t.yaml:1: scheduler.weights: expected a list of 10 positive integers (P0..P9), got 11", -EINVAL},
        {"scheduler: {weights: [1,1,1,0,1,1,1,1,1,1]}\n",
         "t.yaml:1: scheduler.weights[3]: must be between 1 and 1000000, got 0", -EINVAL},
        {"scheduler: {weights: 5}\n", "t.yaml:1: scheduler.weights: expected a list of 10 positive integers",
         -EINVAL},
        /* las_thresholds_s: 1..9 increasing GPU-seconds, each 1..10^10 */
        {"scheduler:\n  policy: spf\n  las_thresholds_s: 60\n",
         "t.yaml:3: scheduler.las_thresholds_s: expected a list of 1 to 9 increasing GPU-seconds such as [3600, 36000], "
         "got 60", -EINVAL},
        {"scheduler:\n  las_thresholds_s: {a: 1}\n",
         "t.yaml:2: scheduler.las_thresholds_s: expected a list of 1 to 9 increasing GPU-seconds", -EINVAL},
        {"scheduler:\n  las_thresholds_s:\n", "t.yaml:2: scheduler.las_thresholds_s: expected a list of 1 to 9",
         -EINVAL},
        {"scheduler:\n  las_thresholds_s: []\n",
         "t.yaml:2: scheduler.las_thresholds_s: expected a list of 1 to 9 increasing GPU-seconds such as [3600, 36000], "
         "got an empty list", -EINVAL},
        {"scheduler:\n  las_thresholds_s:\n    - 60\n    - 60\n",
         "t.yaml:4: scheduler.las_thresholds_s[1]: must be more than the threshold before it (60), got 60", -EINVAL},
        {"scheduler: {las_thresholds_s: [3600, 1m]}\n",
         "t.yaml:1: scheduler.las_thresholds_s[1]: must be more than the threshold before it (3600), got 60", -EINVAL},
        {"scheduler: {las_thresholds_s: [0, 10]}\n",
         "t.yaml:1: scheduler.las_thresholds_s[0]: must be between 1 and 10000000000, got 0", -EINVAL},
        {"scheduler: {las_thresholds_s: [10, -20]}\n",
         "t.yaml:1: scheduler.las_thresholds_s[1]: must be between 1 and 10000000000, got -20", -EINVAL},
        {"scheduler: {las_thresholds_s: [10000000001]}\n",
         "t.yaml:1: scheduler.las_thresholds_s[0]: must be between 1 and 10000000000, got 10000000001", -EINVAL},
        {"scheduler: {las_thresholds_s: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n",
         "t.yaml:1: scheduler.las_thresholds_s[9]: too many thresholds (at most 9: 10 LAS levels)", -EINVAL},
        {"scheduler: {las_thresholds_s: [1.5]}\n",
         "t.yaml:1: scheduler.las_thresholds_s[0]: expected seconds or a duration such as 90s", -EINVAL},
        {"scheduler: {las_thresholds_s: [\"600\"]}\n", "t.yaml:1: scheduler.las_thresholds_s[0]: expected an integer",
         -EINVAL},
        {"scheduler: {las_thresholds_s: [[1]]}\n", "t.yaml:1: scheduler.las_thresholds_s[0]: expected an integer",
         -EINVAL},
        /* duplicate keys */
        {"server:\n  http_threads: 2\n  http_threads: 3\n",
         "t.yaml:3: server.http_threads: duplicate key (first given at line 2)", -EINVAL},
        {"server: {}\ntasks: {}\nserver: {}\n", "t.yaml:3: server: duplicate key (first given at line 1)", -EINVAL},
        /* YAML syntax errors carry libyaml's line, even after a schema error */
        {"server:\n  listen: \"0.0.0.0:80\"\n   data_dir: x\n", "t.yaml:3: YAML syntax error: ", -EINVAL},
        {"foo: 1\nserver: {listen: [\n", "t.yaml:3: YAML syntax error: ", -EINVAL},
        {"server:\n\t listen: x\n", "t.yaml:2: YAML syntax error: ", -EINVAL},
        {"a: 1\n---\nb: 2\n", "t.yaml:2: only one YAML document is allowed", -EINVAL},
        /* anchors, aliases, tags */
        {"server: &s {http_threads: 3}\ntasks: *s\n", "t.yaml:1: server: anchors and aliases", -EINVAL},
        {"server: {http_threads: !!int 3}\n", "t.yaml:1: server.http_threads: explicit tags", -EINVAL},
        /* listen */
        {"server:\n  listen: 8080\n", "t.yaml:2: server.listen: expected ADDR:PORT", -EINVAL},
        {"server: {listen: \"0.0.0.0:0\"}\n", "t.yaml:1: server.listen: the port must be a number between 1 and 65535",
         -EINVAL},
        {"server: {listen: \"0.0.0.0:65536\"}\n", "t.yaml:1: server.listen: the port must be", -EINVAL},
        {"server: {listen: \"0.0.0.0:http\"}\n", "t.yaml:1: server.listen: the port must be", -EINVAL},
        {"server: {listen: \":8080\"}\n", "t.yaml:1: server.listen: missing address", -EINVAL},
        {"server: {listen: \"300.1.1.1:80\"}\n", "t.yaml:1: server.listen: expected an IPv4 address", -EINVAL},
        {"server: {listen: \"::1:80\"}\n", "t.yaml:1: server.listen: IPv6 addresses are not supported", -EINVAL},
        {"server: {listen: \"[::1]:80\"}\n", "t.yaml:1: server.listen: IPv6 addresses are not supported", -EINVAL},
        {"server: {listen: \"gpu-1.lab:80\"}\n", "t.yaml:1: server.listen: expected an IPv4 address", -EINVAL},
        {"server: {listen: \"a b:80\"}\n", "t.yaml:1: server.listen: expected an IPv4 address", -EINVAL},
        /* admin key hashes */
        {"auth:\n  admin_keys:\n    - \"sha256:ABCDEF\"\n", "t.yaml:3: auth.admin_keys[0]: expected \"sha256:\"",
         -EINVAL},
        {"auth:\n  admin_keys: [\"sha256:8C6976E5B5410415BDE908BD4DEE15DFB167A9C873FC4BB8A81F6F2AB448A918\"]\n",
         "t.yaml:2: auth.admin_keys[0]: expected \"sha256:\" and 64 lowercase hex digits", -EINVAL},
        {"auth: {admin_keys: [\"my-secret-key\"]}\n", "t.yaml:1: auth.admin_keys[0]: expected", -EINVAL},
        {"auth: {admin_keys: \"" KEY_A "\"}\n", "t.yaml:1: auth.admin_keys: expected a list", -EINVAL},
        {"auth: {admin_keys: [\"" KEY_A "\", \"" KEY_A "\"]}\n", "t.yaml:1: auth.admin_keys[1]: the same key hash",
         -EINVAL},
        /* store */
        {"store: {url: \"mysql://root:pw@h/db\"}\n", "t.yaml:1: store.url: expected sqlite://PATH", -EINVAL},
        {"store: {url: \"sqlite://\"}\n", "t.yaml:1: store.url: expected sqlite://PATH", -EINVAL},
        /* strings */
        {"server: {data_dir: \"\"}\n", "t.yaml:1: server.data_dir: must not be empty", -EINVAL},
        {"server: {data_dir: \"a\\u0001b\"}\n", "t.yaml:1: server.data_dir: contains control characters", -EINVAL},
        {"gpus: {sim: [{name: \"a\\0b\", memory_mb: 1}]}\n", "t.yaml:1: gpus.sim[0].name: contains control", -EINVAL},
        /* cross-field checks */
        {"tasks:\n  default_lease_ttl_s: 100000\n",
         "t.yaml:2: tasks.default_lease_ttl_s: must not exceed tasks.max_lease_ttl_s (86400), got 100000", -EINVAL},
        {"tasks:\n  default_lease_ttl_s: 60\n  max_lease_ttl_s: 30\n",
         "t.yaml:3: tasks.max_lease_ttl_s: must be at least tasks.default_lease_ttl_s (60), got 30", -EINVAL},
        {"gpus:\n  backend: sim\n  sim: []\n", "t.yaml:3: gpus.sim: backend sim needs at least one gpus.sim entry",
         -EINVAL},
        /* bad bytes */
        {"server: {data_dir: \xff}\n", "t.yaml:1: YAML syntax error: invalid leading UTF-8 octet", -EINVAL},
};

static void test_bad_input_is_refused_with_file_line_key_and_cfg_unchanged(void **state) {
        for (size_t i = 0; i < sizeof(bad_inputs) / sizeof(bad_inputs[0]); i++) {
                const struct bad *b = &bad_inputs[i];
                gp_config c, before;
                char err[1024];
                gp_config_defaults(&c);
                memcpy(c.listen, "10.9.8.7:6543", sizeof("10.9.8.7:6543"));
                c.kill_grace_s = 7;
                memcpy(&before, &c, sizeof(c));
                memset(err, 'x', sizeof(err));
                int r = load(b->yaml, &c, err, sizeof(err));
                if (r != b->rc || strncmp(err, b->want, strlen(b->want)) != 0)
                        fail_msg("input %zu:\n%s\ngot %d \"%s\"\nwant %d \"%s...\"", i, b->yaml, r, err, b->rc,
                                 b->want);
                if (memcmp(&c, &before, sizeof(c)) != 0)
                        fail_msg("input %zu changed cfg", i);
        }
}

static void test_admin_key_is_never_echoed(void **state) {
        gp_config c;
        char err[1024];
        assert_int_equal(load("auth: {admin_keys: [\"hunter2-plain-key\"]}\n", &c, err, sizeof(err)), -EINVAL);
        assert_null(strstr(err, "hunter2"));
        assert_int_equal(load("store: {url: \"mysql://root:hunter2@db\"}\n", &c, err, sizeof(err)), -EINVAL);
        assert_null(strstr(err, "hunter2"));
}

static void test_too_long_string_is_refused_not_truncated(void **state) {
        gp_config c, before;
        char err[512];
        size_t n = PATH_MAX + 10;
        char *y = malloc(n + 64);
        assert_non_null(y);
        int o = snprintf(y, 64, "server:\n  data_dir: ");
        memset(y + o, 'a', PATH_MAX);
        strcpy(y + o + PATH_MAX, "\n"); /* test code: sized above */
        gp_config_defaults(&c);
        memcpy(&before, &c, sizeof(c));
        assert_int_equal(load(y, &c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml:2: server.data_dir: too long (4096 bytes, at most 4095)");
        assert_memory_equal(&c, &before, sizeof(c));

        /* a long (but fitting) data_dir cannot derive store.url */
        y[o + PATH_MAX - 1] = '\n';
        y[o + PATH_MAX] = '\0';
        assert_int_equal(load(y, &c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml:2: server.data_dir: too long to derive store.url from it; set store.url");

        snprintf(y, n + 64, "gpus:\n  sim: [{name: \"%0*d\", memory_mb: 1}]\n", GP_NAME_MAX, 0);
        assert_int_equal(load(y, &c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml:2: gpus.sim[0].name: too long (128 bytes, at most 127)");
        snprintf(y, n + 64, "gpus:\n  reserved: [\"%0*d\"]\n", GP_UUID_MAX, 7);
        assert_int_equal(load(y, &c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml:2: gpus.reserved[0]: too long (64 bytes, at most 63)");
        assert_memory_equal(&c, &before, sizeof(c));
        free(y);
}

static void test_too_many_entries_are_refused(void **state) {
        gp_config c;
        char err[512], y[8192];
        int o = snprintf(y, sizeof(y), "gpus:\n  reserved: [");
        for (int i = 0; i <= GP_CFG_MAX_RESERVED; i++)
                o += snprintf(y + o, sizeof(y) - (size_t)o, "%s%d", i ? ", " : "", i);
        snprintf(y + o, sizeof(y) - (size_t)o, "]\n");
        assert_int_equal(load(y, &c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml:2: gpus.reserved[64]: too many reserved GPUs (at most 64)");

        o = snprintf(y, sizeof(y), "auth:\n  admin_keys:\n");
        for (int i = 0; i <= GP_CFG_MAX_ADMIN_KEYS; i++)
                o += snprintf(y + o, sizeof(y) - (size_t)o, "    - \"sha256:%064x\"\n", i);
        assert_int_equal(load(y, &c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml:19: auth.admin_keys[16]: too many admin keys (at most 16)");
}

static void test_deep_nesting_and_big_input_are_bounded(void **state) {
        gp_config c;
        char err[512];
        size_t n = 200000;
        char *y = malloc(n + 8);
        assert_non_null(y);
        memcpy(y, "a: ", 3);
        memset(y + 3, '[', n);
        y[n + 3] = '\0';
        assert_int_equal(load(y, &c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml:1: nested too deeply (more than 32 levels)");
        free(y);

        size_t big = (1 << 20) + 1;
        char *z = malloc(big);
        assert_non_null(z);
        memset(z, '#', big);
        assert_int_equal(gp_config_load_buffer("big.yaml", z, big, &c, err, sizeof(err)), -E2BIG);
        assert_string_equal(err, "big.yaml: larger than 1 MiB (1048577 bytes)");
        /* exactly 1 MiB of comment is fine */
        z[big - 2] = '\n';
        assert_int_equal(gp_config_load_buffer("big.yaml", z, big - 1, &c, err, sizeof(err)), 0);
        free(z);
}

static void test_missing_file_is_enoent_with_message(void **state) {
        gp_config c, before;
        char err[512];
        gp_config_defaults(&c);
        memcpy(&before, &c, sizeof(c));
        assert_int_equal(gp_config_load("/nonexistent/gpupool.yaml", &c, err, sizeof(err)), -ENOENT);
        assert_string_equal(err, "/nonexistent/gpupool.yaml: cannot read: No such file or directory");
        assert_memory_equal(&c, &before, sizeof(c));
}

static void test_load_reads_a_file_and_names_it_in_errors(void **state) {
        char path[] = "/tmp/test-config-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        const char *y = "server:\n  listen: \"127.0.0.1:1\"\n  max_connections: -4\n";
        assert_int_equal(write(fd, y, strlen(y)), (ssize_t)strlen(y));
        close(fd);
        gp_config c;
        char err[512], want[600];
        assert_int_equal(gp_config_load(path, &c, err, sizeof(err)), -EINVAL);
        snprintf(want, sizeof(want), "%s:3: server.max_connections: must be between 1 and 65536, got -4", path);
        assert_string_equal(err, want);
        unlink(path);
}

static void test_small_error_buffer_is_terminated(void **state) {
        gp_config c;
        char err[8];
        assert_int_equal(load("nope: 1\n", &c, err, sizeof(err)), -EINVAL);
        assert_int_equal(strlen(err), 7);
        assert_int_equal(load("nope: 1\n", &c, NULL, 0), -EINVAL);
}

/* cluster.server_id and the lease keys (several servers on one PostgreSQL) */
static void test_cluster_server_keys_load_and_are_checked(void **state) {
        gp_config c;
        char err[512];
        gp_config_defaults(&c);
        assert_string_equal(c.server_id, "");
        assert_string_equal(c.advertise_url, "");
        assert_int_equal(c.lease_s, 6);
        assert_int_equal(c.heartbeat_interval_s, 15);
        assert_int_equal(c.server_timeout_s, 60);
        assert_int_equal(load("store: {url: \"postgres://db/gp\"}\n"
                              "cluster: {server_id: s-1.a_b, advertise_url: \"http://10.0.0.5:8080\", lease_s: 2,\n"
                              "          heartbeat_interval_s: 1, server_timeout_s: 86400}\n",
                              &c, err, sizeof(err)),
                         0);
        assert_string_equal(c.server_id, "s-1.a_b");
        assert_string_equal(c.advertise_url, "http://10.0.0.5:8080");
        assert_int_equal(c.lease_s, 2);
        assert_int_equal(c.heartbeat_interval_s, 1);
        assert_int_equal(c.server_timeout_s, 86400);
        gp_config_free(&c);
        /* several servers need PostgreSQL */
        gp_config_defaults(&c);
        assert_int_equal(load("cluster: {server_id: s1}\n", &c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "cluster.server_id"));
        assert_non_null(strstr(err, "PostgreSQL"));
        static const char *const bad[] = {
                "store: {url: \"postgres://db/gp\"}\ncluster: {server_id: \"a b\"}\n",
                "store: {url: \"postgres://db/gp\"}\ncluster: {server_id: \"a/b\"}\n",
                "cluster: {lease_s: 1}\n",
                "cluster: {lease_s: 601}\n",
                "cluster: {heartbeat_interval_s: 0}\n",
                "cluster: {server_timeout_s: 1}\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                gp_config_defaults(&c);
                assert_int_equal(load(bad[i], &c, err, sizeof(err)), -EINVAL);
                assert_non_null(strstr(err, "cluster."));
                assert_string_equal(c.server_id, "");
        }
}

static void test_validate_checks_cross_fields_and_ranges(void **state) {
        gp_config c;
        char err[512];
        gp_config_defaults(&c);
        c.default_lease_ttl_s = 120;
        c.max_lease_ttl_s = 60;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "(config): tasks.max_lease_ttl_s: must be at least tasks.default_lease_ttl_s (120), got 60");

        gp_config_defaults(&c);
        memcpy(c.gpu_backend, "sim", 4);
        c.n_sim = 0;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "(config): gpus.backend: backend sim needs at least one gpus.sim entry");

        gp_config_defaults(&c);
        c.priority_levels = 5;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "(config): scheduler.priority_levels: must be 10, got 5");

        gp_config_defaults(&c);
        c.weights[9] = 0;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "(config): scheduler.weights[9]: must be between 1 and 1000000, got 0");

        gp_config_defaults(&c);
        c.n_las_thresholds = 0;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "(config): scheduler.las_thresholds_s: must have between 1 and 9 entries, got 0");
        c.n_las_thresholds = 10;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "(config): scheduler.las_thresholds_s: must have between 1 and 9 entries, got 10");
        gp_config_defaults(&c);
        c.las_thresholds_s[1] = 3600;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "(config): scheduler.las_thresholds_s[1]: must be more than the threshold before it "
                                 "(3600), got 3600");
        c.las_thresholds_s[0] = 0;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "(config): scheduler.las_thresholds_s[0]: must be between 1 and 10000000000, got 0");

        /* a --listen override is checked the same way as the file */
        gp_config_defaults(&c);
        memcpy(c.source, "x.yaml", 7);
        memcpy(c.listen, "0.0.0.0:99999", 14);
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "x.yaml: server.listen: the port must be a number between 1 and 65535");

        gp_config_defaults(&c);
        c.n_sim = GP_CFG_MAX_SIM + 1;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "gpus.sim: must have between 0 and 16 entries"));

        gp_config_defaults(&c);
        memset(c.data_dir, 'a', sizeof(c.data_dir));
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "(config): server.data_dir: not NUL-terminated");
}

/* The quota reader both the file and PUT /admin/tenants/{id} use: values
 * as written, no rounding, the same words from a YAML scalar and from a
 * JSON number. */
static void test_quota_reader_takes_exact_values_and_never_rounds(void **state) {
        static const struct {
                gp_quota_field f;
                const char *text;
                int64_t want; /* -1: refused */
        } cases[] = {
                {GP_QUOTA_MAX_GPUS, "8", 8000},         {GP_QUOTA_MAX_GPUS, "0.5", 500},
                {GP_QUOTA_MAX_GPUS, "0.125", 125},      {GP_QUOTA_MAX_GPUS, "3.500", 3500},
                {GP_QUOTA_MAX_GPUS, "1000000", 1000000000}, {GP_QUOTA_MAX_GPUS, "0", 0},
                {GP_QUOTA_MAX_GPUS, "0.0004", -1},      {GP_QUOTA_MAX_GPUS, "0.0010", -1},
                {GP_QUOTA_MAX_GPUS, "1000000.001", -1}, {GP_QUOTA_MAX_GPUS, "-0.5", -1},
                {GP_QUOTA_MAX_GPUS, ".5", -1},          {GP_QUOTA_MAX_GPUS, "5.", -1},
                {GP_QUOTA_MAX_GPUS, "+1", -1},          {GP_QUOTA_MAX_GPUS, "1e3", -1},
                {GP_QUOTA_MAX_GPUS, "08", -1},          {GP_QUOTA_MAX_GPUS, "", -1},
                {GP_QUOTA_MAX_GPUS, "99999999999999999999999999999", -1},
                {GP_QUOTA_GUARANTEED_GPUS, "0.001", 1}, {GP_QUOTA_MAX_CONCURRENT, "30", 30},
                {GP_QUOTA_MAX_CONCURRENT, "1000000", 1000000}, {GP_QUOTA_MAX_CONCURRENT, "1000001", -1},
                {GP_QUOTA_MAX_CONCURRENT, "1.0", -1},   {GP_QUOTA_MAX_QUEUED, "-1", -1},
                {GP_QUOTA_MAX_QUEUED, "0x10", -1},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int64_t v = -7;
                char why[256] = "";
                int r = gp_quota_parse(cases[i].f, cases[i].text, strlen(cases[i].text), &v, why, sizeof(why));
                if (cases[i].want < 0 ? (r == 0 || !why[0] || v != -7) : (r != 0 || v != cases[i].want))
                        fail_msg("%s \"%s\": got %d, %lld, \"%s\"", gp_quota_defs[cases[i].f].name, cases[i].text, r,
                                 (long long)v, why);
        }
        /* JSON numbers: what a client sends, and what the server stored (%.17g) */
        int64_t v;
        char why[256];
        assert_int_equal(gp_quota_parse_json_number(GP_QUOTA_MAX_GPUS, false, 0, 3.5, &v, why, sizeof(why)), 0);
        assert_int_equal(v, 3500);
        assert_int_equal(gp_quota_parse_json_number(GP_QUOTA_MAX_GPUS, false, 0, 0.33300000000000002, &v, why,
                                                    sizeof(why)), 0);
        assert_int_equal(v, 333);
        assert_int_equal(gp_quota_parse_json_number(GP_QUOTA_MAX_GPUS, true, 8, 0, &v, why, sizeof(why)), 0);
        assert_int_equal(v, 8000);
        assert_int_equal(gp_quota_parse_json_number(GP_QUOTA_MAX_CONCURRENT, true, 12, 0, &v, why, sizeof(why)), 0);
        assert_int_equal(v, 12);
        assert_int_equal(gp_quota_parse_json_number(GP_QUOTA_MAX_GPUS, false, 0, 0.0004, &v, why, sizeof(why)),
                         -EINVAL);
        assert_string_equal(why, "expected a number of GPUs with at most 3 decimals (e.g. 8 or 0.5), got 0.0004");
        assert_int_equal(gp_quota_parse_json_number(GP_QUOTA_MAX_GPUS, false, 0, 1e-300, &v, why, sizeof(why)),
                         -EINVAL);
        assert_int_equal(gp_quota_parse_json_number(GP_QUOTA_MAX_GPUS, false, 0, 1e300, &v, why, sizeof(why)),
                         -ERANGE);
        assert_string_equal(why, "must be between 0 and 1000000 GPUs, got 1e+300");
        assert_int_equal(gp_quota_parse_json_number(GP_QUOTA_MAX_CONCURRENT, false, 0, 5.0, &v, why, sizeof(why)),
                         -EINVAL);
        assert_string_equal(why, "expected a whole number between 0 and 1000000, got 5.0");
        assert_int_equal(gp_quota_parse_json_number(GP_QUOTA_MAX_QUEUED, true, -3, 0, &v, why, sizeof(why)), -ERANGE);
        assert_string_equal(why, "must be between 0 and 1000000, got -3");
        assert_int_equal(gp_quota_type_error(GP_QUOTA_MAX_GPUS, "a string", why, sizeof(why)), -EINVAL);
        assert_string_equal(why, "expected a number of GPUs with at most 3 decimals (e.g. 8 or 0.5), got a string");
        assert_int_equal(gp_quota_field_find("max_gpus", 8), GP_QUOTA_MAX_GPUS);
        assert_int_equal(gp_quota_field_find("max_gpu", 7), -1);
        assert_int_equal(gp_quota_check(&(gp_quota){.max_gpus_milli = 2000, .guaranteed_gpus_milli = 3000}, why, sizeof(why)), -EINVAL);
        assert_string_equal(why, "quota.guaranteed_gpus is above quota.max_gpus");
        assert_int_equal(gp_quota_check(&(gp_quota){.guaranteed_gpus_milli = 3000}, why, sizeof(why)), 0); /* max 0 = unlimited */
}

/* One validator, one set of words: the file's message for a value is
 * "FILE:LINE: KEY: " + exactly what the JSON reader says of the same value. */
static void test_file_and_json_readers_say_the_same_about_a_quota(void **state) {
        static const struct {
                const char *field, *yaml;
                gp_quota_field f;
                bool is_integer;
                int64_t i;
                double x;
        } cases[] = {
                {"max_gpus", "0.0004", GP_QUOTA_MAX_GPUS, false, 0, 0.0004},
                {"max_gpus", "-1", GP_QUOTA_MAX_GPUS, true, -1, 0},
                {"max_gpus", "2000000", GP_QUOTA_MAX_GPUS, true, 2000000, 0},
                {"guaranteed_gpus", "0.0625", GP_QUOTA_GUARANTEED_GPUS, false, 0, 0.0625},
                {"max_concurrent", "2.5", GP_QUOTA_MAX_CONCURRENT, false, 0, 2.5},
                {"max_queued", "1000001", GP_QUOTA_MAX_QUEUED, true, 1000001, 0},
        };
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
                gp_config c;
                char y[256], err[512], why[256], want[600];
                int64_t v;
                snprintf(y, sizeof(y), "tenants:\n  - id: a\n    quota:\n      %s: %s\n", cases[k].field, cases[k].yaml);
                assert_int_equal(load(y, &c, err, sizeof(err)), -EINVAL);
                assert_true(gp_quota_parse_json_number(cases[k].f, cases[k].is_integer, cases[k].i, cases[k].x, &v, why,
                                                       sizeof(why)) < 0);
                snprintf(want, sizeof(want), "t.yaml:4: tenants[0].quota.%s: %s", cases[k].field, why);
                assert_string_equal(err, want);
        }
}

/* gp_config_validate (a struct built in code, no lines) makes the same
 * cross-reference checks as the loader. */
static void test_validate_checks_key_owners_groups_and_rule_tenants(void **state) {
        static gp_config c;
        char err[512];
        const char *y = "auth: {admin_keys: [\"" KEY_A "\"]}\n"
                        "groups: [{name: internal, share_pct: 60}, {name: external, share_pct: 40}]\n"
                        "tenants:\n  - {id: a, keys: [\"" KEY_B "\"]}\n  - {id: b, kind: external}\n"
                        "time_rules:\n  - {name: n, start: \"18:00\", end: \"08:00\", quotas: {a: {max_gpus: 1}},\n"
                        "     groups: [{name: internal, share_pct: 30}, {name: external, share_pct: 70}]}\n";
        if (load(y, &c, err, sizeof(err)) != 0)
                fail_msg("%s", err);
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), 0);
        assert_true(gp_config_group_defined(&c, "internal"));
        assert_false(gp_config_group_defined(&c, "gpu_team"));

        static gp_config bad;
        assert_int_equal(gp_config_copy(&bad, &c), 0);
        memcpy(bad.tenants[0].keys[0], KEY_A, sizeof(KEY_A));
        assert_int_equal(gp_config_validate(&bad, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml: tenants[0].keys[0]: this key hash is already an admin key "
                                 "(auth.admin_keys[0]); a key belongs to one owner");
        gp_config_free(&bad);
        assert_int_equal(gp_config_copy(&bad, &c), 0);
        memcpy(bad.tenants[1].group, "gpu_team", 9);
        assert_int_equal(gp_config_validate(&bad, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml: tenants[1].group: group \"gpu_team\" is not defined (groups: internal, external)");
        gp_config_free(&bad);
        assert_int_equal(gp_config_copy(&bad, &c), 0);
        bad.groups[1].share_pct = 41;
        assert_int_equal(gp_config_validate(&bad, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml: groups[1]: the group shares add up to 101% (internal 60, external 41); at most 100");
        gp_config_free(&bad);
        assert_int_equal(gp_config_copy(&bad, &c), 0);
        bad.time_rules[0].groups[0].share_pct = 31;
        assert_int_equal(gp_config_validate(&bad, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml: time_rules[0].groups: while this rule is in force the group shares add up "
                                 "to 101% (internal 31, external 70); at most 100");
        gp_config_free(&bad);
        assert_int_equal(gp_config_copy(&bad, &c), 0);
        memcpy(bad.time_rules[0].quotas[0].tenant, "zz", 3);
        assert_int_equal(gp_config_validate(&bad, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "t.yaml: time_rules[0].quotas.zz: no tenant \"zz\" is defined in tenants");
        gp_config_free(&bad);
        gp_config_free(&c);
}

static void test_alerts_section_gives_rules_and_webhook(void **state) {
        gp_config c;
        char err[256];
        /* the default: a failing GPU and a lost node are alerts, no webhook */
        gp_config_defaults(&c);
        assert_int_equal(c.n_alert_rules, 2);
        assert_string_equal(c.alert_rules[0].name, "gpu_error");
        assert_string_equal(c.alert_rules[0].metric, "gpu_unhealthy");
        assert_string_equal(c.alert_rules[1].metric, "node_lost");
        assert_string_equal(c.alert_webhook, "");
        assert_int_equal(c.monitor_sample_ms, 1000);
        const char *y = "monitor: {sample_ms: 500}\n"
                        "alerts:\n"
                        "  webhook: \"http://127.0.0.1:9/hook?token=x\"\n"
                        "  webhook_timeout_s: 2\n"
                        "  webhook_retries: 3\n"
                        "  rules:\n"
                        "    - {name: hot, when: \"gpu_temp_c >= 85.5\", for_s: 10, clear_s: 0, severity: critical}\n"
                        "    - {name: long_queue, when: \"queue_wait_p95_s > 3600\"}\n"
                        "    - {name: idle, when: \"util_pct_while_queued<10\"}\n"
                        "    - {name: lost, when: node_lost}\n";
        int r = load(y, &c, err, sizeof(err));
        if (r)
                fail_msg("%s", err);
        assert_int_equal(c.monitor_sample_ms, 500);
        assert_string_equal(c.alert_webhook, "http://127.0.0.1:9/hook?token=x");
        assert_int_equal(c.alert_webhook_timeout_s, 2);
        assert_int_equal(c.alert_webhook_retries, 3);
        assert_int_equal(c.n_alert_rules, 4); /* the file's list replaces the default rules */
        const gp_cfg_alert_rule *hot = &c.alert_rules[0];
        assert_string_equal(hot->name, "hot");
        assert_string_equal(hot->when, "gpu_temp_c >= 85.5");
        assert_string_equal(hot->metric, "gpu_temp_c");
        assert_int_equal(hot->op, GP_CMP_GE);
        assert_true(hot->threshold > 85.49 && hot->threshold < 85.51);
        assert_int_equal(hot->for_s, 10);
        assert_int_equal(hot->clear_s, 0);
        assert_string_equal(hot->severity, "critical");
        const gp_cfg_alert_rule *lq = &c.alert_rules[1];
        assert_int_equal(lq->op, GP_CMP_GT);
        assert_true(lq->threshold == 3600);
        assert_int_equal(lq->for_s, 0);
        assert_int_equal(lq->clear_s, 30);
        assert_string_equal(lq->severity, "warning");
        assert_int_equal(c.alert_rules[2].op, GP_CMP_LT);
        assert_string_equal(c.alert_rules[2].metric, "util_pct_while_queued");
        /* a bare metric means METRIC > 0 */
        assert_string_equal(c.alert_rules[3].metric, "node_lost");
        assert_int_equal(c.alert_rules[3].op, GP_CMP_GT);
        assert_true(c.alert_rules[3].threshold == 0);
        /* an empty list means no rules; the tenant rules are accepted (inactive for now) */
        assert_int_equal(load("alerts: {rules: []}\n", &c, err, sizeof(err)), 0);
        assert_int_equal(c.n_alert_rules, 0);
        assert_int_equal(load("alerts: {rules: [{name: q, when: \"tenant_quota_used_pct > 90\"}]}\n", &c, err,
                              sizeof(err)),
                         0);
        assert_string_equal(c.alert_rules[0].metric, "tenant_quota_used_pct");
        /* the webhook URL is never echoed (it may carry a token) */
        assert_int_equal(load("alerts: {webhook: \"gopher://secret-token\"}\n", &c, err, sizeof(err)), -EINVAL);
        assert_null(strstr(err, "secret-token"));
        /* validate checks what the struct says too */
        gp_config_defaults(&c);
        c.alert_rules[1].op = (gp_cmp)42;
        assert_int_equal(gp_config_validate(&c, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "alerts.rules[1].when"));
}

static void test_billing_section_loads_prices_tiers_and_windows(void **state) {
        gp_config c;
        char err[256];
        gp_config_defaults(&c);
        assert_int_equal(c.billing.record_interval_s, 300);
        assert_false(c.billing.enabled);
        /* the DESIGN.md example */
        assert_int_equal(load("billing: {prices: [{gpu_model: \"*\", per_gpu_hour: 2.0}], min_billing_sec: 60}\n", &c,
                              err, sizeof(err)),
                         0);
        assert_true(c.billing.enabled);
        assert_int_equal(c.billing.n_gpu, 1);
        assert_int_equal(c.billing.gpu[0].per_gpu_hour, 2000000);
        assert_int_equal(c.billing.min_billing_ms, 60000);
        gp_config_defaults(&c);
        assert_int_equal(load("billing:\n"
                              "  currency: EUR\n"
                              "  record_interval_s: 60\n"
                              "  enforce_balance: true\n"
                              "  prices:\n"
                              "    - {gpu_model: \"*A100*\", per_gpu_hour: \"3.25\"}\n"
                              "    - {per_gpu_hour: 1}\n"
                              "  token_prices:\n"
                              "    - {model: \"llama*\", per_1k_tokens: 0.002}\n"
                              "    - {model: \"*\", per_1k_prompt: 0.001, per_1k_completion: 0.003}\n"
                              "  volume_discounts: [{gpu_hours: 100, factor: 0.9}, {gpu_hours: 500, factor: 0.8}]\n"
                              "  time_windows:\n"
                              "    - {name: night, start: \"22:00\", end: \"06:00\", tz: Asia/Shanghai, multiplier: 0.5}\n",
                              &c, err, sizeof(err)),
                         0);
        assert_string_equal(c.billing.currency, "EUR");
        assert_int_equal(c.billing.record_interval_s, 60);
        assert_true(c.billing.enforce_balance);
        assert_int_equal(c.billing.n_gpu, 2);
        assert_int_equal(c.billing.gpu[0].per_gpu_hour, 3250000);
        assert_string_equal(c.billing.gpu[1].gpu_model, "*");
        assert_int_equal(c.billing.n_tokens, 2);
        assert_int_equal(c.billing.tokens[0].per_1k_prompt, 2000);
        assert_int_equal(c.billing.tokens[0].per_1k_completion, 2000);
        assert_int_equal(c.billing.tokens[1].per_1k_completion, 3000);
        assert_int_equal(c.billing.n_tiers, 2);
        assert_int_equal(c.billing.tiers[1].factor_ppm, 800000);
        assert_int_equal(c.billing.n_windows, 1);
        assert_int_equal(c.billing.windows[0].start_min, 22 * 60);
        assert_int_equal(c.billing.windows[0].end_min, 6 * 60);
        assert_string_equal(c.billing.windows[0].tz, "Asia/Shanghai");
        assert_int_equal(c.billing.windows[0].multiplier_ppm, 500000);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_billing_section_loads_prices_tiers_and_windows),
                cmocka_unit_test(test_alerts_section_gives_rules_and_webhook),
                cmocka_unit_test(test_defaults_match_design),
                cmocka_unit_test(test_gateway_section_is_loaded),
                cmocka_unit_test(test_gpus_sharing_mps_loads_with_its_gpus_and_program),
                cmocka_unit_test(test_empty_and_comment_only_files_give_defaults),
                cmocka_unit_test(test_full_file_overrides_every_key),
                cmocka_unit_test(test_load_starts_from_defaults_not_from_cfg),
                cmocka_unit_test(test_store_url_follows_data_dir_unless_set),
                cmocka_unit_test(test_booleans_and_listen_forms_are_accepted),
                cmocka_unit_test(test_allowed_origins_load_and_bad_ones_are_refused_with_file_line),
                cmocka_unit_test(test_tenants_groups_and_time_rules_load),
                cmocka_unit_test(test_day_to_night_switch_with_a_fake_clock),
                cmocka_unit_test(test_example_file_loads),
                cmocka_unit_test(test_bad_input_is_refused_with_file_line_key_and_cfg_unchanged),
                cmocka_unit_test(test_admin_key_is_never_echoed),
                cmocka_unit_test(test_too_long_string_is_refused_not_truncated),
                cmocka_unit_test(test_too_many_entries_are_refused),
                cmocka_unit_test(test_deep_nesting_and_big_input_are_bounded),
                cmocka_unit_test(test_missing_file_is_enoent_with_message),
                cmocka_unit_test(test_load_reads_a_file_and_names_it_in_errors),
                cmocka_unit_test(test_small_error_buffer_is_terminated),
                cmocka_unit_test(test_validate_checks_cross_fields_and_ranges),
                cmocka_unit_test(test_cluster_server_keys_load_and_are_checked),
                cmocka_unit_test(test_quota_reader_takes_exact_values_and_never_rounds),
                cmocka_unit_test(test_file_and_json_readers_say_the_same_about_a_quota),
                cmocka_unit_test(test_validate_checks_key_owners_groups_and_rule_tenants),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
