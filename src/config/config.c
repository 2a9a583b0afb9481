/* config.c - gpupool configuration: embedded default, YAML loader, checks.
 *
 * The loader walks libyaml's event stream with a schema-driven recursive
 * descent: `cfg_fields` below is the schema (every accepted dotted key with its
 * type, place in the struct and range), and the same table drives the range
 * checks of gp_config_validate().  Invariants:
 *   - the first error stops the walk; nothing is skipped or guessed;
 *   - the file is parsed into a heap copy of the defaults and copied to the
 *     caller's struct only after every check passed (*cfg is untouched on
 *     failure);
 *   - nesting is bounded by the schema (a value of the wrong shape is refused
 *     before anything inside it is read) and by MAX_DEPTH as a backstop;
 *     input is bounded by CFG_MAX_INPUT; anchors, aliases and explicit tags are
 *     refused, so no alias expansion can blow up;
 *   - every message is "FILE:LINE: dotted.key: what is wrong" and never
 *     echoes an admin key or a store URL with credentials;
 *   - no global state: every function is reentrant and may run on any
 *     thread, on distinct structs.
 */
#include "config/config-int.h"
#include "base/tz.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "base/buf.h"
#include "base/keyhash.h"
#include "base/text.h"
#include "base/units.h"
#include "base/labels.h"
#include "base/util.h"
#include "base/url.h"
#include "base/vec.h"
#include "config/quota.h"
#include "base/user.h"

#define CFG_MAX_INPUT ((size_t)1 << 20) /* bytes of YAML accepted */

#define CFG(m) offsetof(gp_config, m), sizeof(((gp_config *)0)->m)
#define SIM(m) offsetof(gp_cfg_sim_gpu, m), sizeof(((gp_cfg_sim_gpu *)0)->m)
#define RULE(m) offsetof(gp_cfg_alert_rule, m), sizeof(((gp_cfg_alert_rule *)0)->m)
#define TEN(m) offsetof(gp_cfg_tenant, m), sizeof(((gp_cfg_tenant *)0)->m)
#define GRP(m) offsetof(gp_cfg_group, m), sizeof(((gp_cfg_group *)0)->m)
#define TR(m) offsetof(gp_cfg_time_rule, m), sizeof(((gp_cfg_time_rule *)0)->m)
#define RQ(m) offsetof(gp_cfg_rule_quota, m), sizeof(((gp_cfg_rule_quota *)0)->m)
#define RG(m) offsetof(gp_cfg_rule_gw, m), sizeof(((gp_cfg_rule_gw *)0)->m)
#define BILL(m) offsetof(gp_config, billing.m), sizeof(((gp_config *)0)->billing.m)
#define BGP(m) offsetof(gp_bill_gpu_price, m), sizeof(((gp_bill_gpu_price *)0)->m)
#define BTP(m) offsetof(gp_bill_token_price, m), sizeof(((gp_bill_token_price *)0)->m)
#define BTI(m) offsetof(gp_bill_tier, m), sizeof(((gp_bill_tier *)0)->m)
#define BWI(m) offsetof(gp_bill_window, m), sizeof(((gp_bill_window *)0)->m)
#define GW(m) offsetof(gp_config, gw.m), sizeof(((gp_config *)0)->gw.m)
#define MOD(m) offsetof(gp_cfg_model, m), sizeof(((gp_cfg_model *)0)->m)
#define SRV(m) offsetof(gp_cfg_serve, m), sizeof(((gp_cfg_serve *)0)->m)
#define NOSTORE 0, 0

const struct field cfg_fields[] = {
        {"server", K_SECTION, NOSTORE, 0, 0, NULL},
        {"server.listen", K_CUSTOM, CFG(listen), 1, 127, parse_listen},
        {"server.data_dir", K_STR, CFG(data_dir), 1, PATH_MAX - 1, NULL},
        {"server.max_connections", K_INT, CFG(max_connections), 1, 65536, NULL},
        {"server.max_body_bytes", K_I64, CFG(max_body_bytes), 1024, (int64_t)1 << 30, NULL},
        {"server.connection_timeout_s", K_INT, CFG(connection_timeout_s), 1, 86400, NULL},
        {"server.header_timeout_s", K_INT, CFG(header_timeout_s), 1, 3600, NULL},
        {"server.min_body_rate_bytes_s", K_I64, CFG(min_body_rate_bytes_s), 1, (int64_t)1 << 30, NULL},
        {"server.max_connections_per_ip", K_INT, CFG(max_connections_per_ip), 1, 65536, NULL},
        {"server.http_threads", K_INT, CFG(http_threads), 1, 256, NULL},
        {"server.allowed_origins", K_CUSTOM, CFG(allowed_origins), 0, GP_MAX_ALLOWED_ORIGINS, parse_items},
        {"server.user", K_CUSTOM, CFG(server_user), 0, 0, parse_unix_user},
        {"server.tls", K_SECTION, NOSTORE, 0, 0, NULL},
        {"server.tls.cert", K_STR, CFG(tls_cert), 0, PATH_MAX - 1, NULL},
        {"server.tls.key", K_STR, CFG(tls_key), 0, PATH_MAX - 1, NULL},
        {"server.tls.ca", K_STR, CFG(tls_ca), 0, PATH_MAX - 1, NULL},
        {"server.tls.sans", K_CUSTOM, CFG(tls_sans), 0, GP_CFG_MAX_TLS_SANS, parse_items},
        {"server.tls.plaintext", K_CUSTOM, CFG(tls_plaintext_any), 0, 0, parse_tls_plaintext},
        {"server.socket", K_STR, CFG(server_socket), 0, 107, NULL},

        {"auth", K_SECTION, NOSTORE, 0, 0, NULL},
        {"auth.admin_keys", K_CUSTOM, CFG(admin_keys), 0, GP_CFG_MAX_ADMIN_KEYS, parse_items},
        {"auth.admin_group", K_STR, CFG(admin_group), 0, GP_USER_NAME_MAX - 1, NULL},
        {"auth.over_max_priority", K_CUSTOM, CFG(clamp_priority), 0, 0, parse_over_max},

        {"store", K_SECTION, NOSTORE, 0, 0, NULL},
        {"store.url", K_CUSTOM, CFG(store_url), 1, PATH_MAX + 15, parse_store_url},
        {"store.sync", K_CUSTOM, CFG(store_sync_full), 0, 0, parse_store_sync},
        {"store.disk_reserve_mb", K_INT, CFG(store_disk_reserve_mb), 0, 1024, NULL},
        {"store.disk_min_free_mb", K_INT, CFG(store_disk_min_free_mb), 0, 1024, NULL},

        {"gpus", K_SECTION, NOSTORE, 0, 0, NULL},
        {"gpus.backend", K_CUSTOM, CFG(gpu_backend), 0, 0, parse_backend},
        {"gpus.nvml_library", K_STR, CFG(nvml_library), 1, PATH_MAX - 1, NULL},
        {"gpus.reserved", K_CUSTOM, CFG(reserved), 0, GP_CFG_MAX_RESERVED, parse_items},
        {"gpus.sim", K_CUSTOM, CFG(sim), 0, GP_CFG_MAX_SIM, parse_items},
        {"gpus.sim[].name", K_STR, SIM(name), 1, GP_NAME_MAX - 1, NULL},
        {"gpus.sim[].memory_mb", K_I64, SIM(memory_mb), 1, 1048576, NULL},
        {"gpus.sim[].count", K_INT, SIM(count), 1, 64, NULL},
        {"gpus.poll_ms", K_INT, CFG(gpu_poll_ms), 100, 3600000, NULL},
        {"gpus.watchdog", K_BOOL, CFG(gpu_watchdog), 0, 0, NULL},
        {"gpus.watchdog_tolerance_mb", K_I64, CFG(watchdog_tolerance_mb), 0, 1048576, NULL},
        {"gpus.watchdog_grace_s", K_INT, CFG(watchdog_grace_s), 0, 3600, NULL},
        {"gpus.sharing", K_CUSTOM, CFG(gpu_mps), 0, 0, parse_sharing},
        {"gpus.mps_gpus", K_CUSTOM, CFG(mps_gpus), 0, GP_CFG_MAX_RESERVED, parse_items},
        {"gpus.mps_control", K_STR, CFG(mps_control), 1, PATH_MAX - 1, NULL},
        {"gpus.mps_dir", K_STR, CFG(mps_dir), 0, PATH_MAX - 64, NULL},

        {"agent", K_SECTION, NOSTORE, 0, 0, NULL},
        {"agent.listen", K_CUSTOM, CFG(agent_listen), 1, 127, parse_listen},
        {"agent.data_dir", K_STR, CFG(agent_data_dir), 1, PATH_MAX - 1, NULL},
        {"agent.heartbeat_s", K_INT, CFG(agent_heartbeat_s), 1, 60, NULL},

        {"node", K_SECTION, NOSTORE, 0, 0, NULL},
        {"node.name", K_CUSTOM, CFG(node_name), 0, 0, parse_node_name},
        {"node.labels", K_CUSTOM, CFG(node_labels), 0, 0, parse_node_labels},

        {"cluster", K_SECTION, NOSTORE, 0, 0, NULL},
        {"cluster.join_tokens", K_CUSTOM, CFG(join_tokens), 0, GP_CFG_MAX_JOIN_TOKENS, parse_items},
        {"cluster.node_timeout_s", K_INT, CFG(node_timeout_s), 2, 3600, NULL},
        {"cluster.fence_s", K_INT, CFG(fence_s), 2, 3600, NULL},
        {"cluster.server_id", K_STR, CFG(server_id), 0, 63, NULL},
        {"cluster.advertise_url", K_STR, CFG(advertise_url), 0, 255, NULL},
        {"cluster.lease_s", K_INT, CFG(lease_s), 2, 600, NULL},
        {"cluster.heartbeat_interval_s", K_INT, CFG(heartbeat_interval_s), 1, 3600, NULL},
        {"cluster.server_timeout_s", K_INT, CFG(server_timeout_s), 2, 86400, NULL},

        {"scheduler", K_SECTION, NOSTORE, 0, 0, NULL},
        {"scheduler.policy", K_CUSTOM, CFG(policy), 0, 0, parse_policy},
        {"scheduler.placement", K_CUSTOM, CFG(placement), 0, 0, parse_placement},
        {"scheduler.priority_levels", K_INT, CFG(priority_levels), GP_PRIORITY_LEVELS,
         GP_PRIORITY_LEVELS, NULL},
        {"scheduler.weights", K_CUSTOM, CFG(weights), 1, WEIGHT_MAX, parse_weights},
        {"scheduler.max_queue_depth", K_INT, CFG(max_queue_depth), 1, 1000000, NULL},
        {"scheduler.max_array_size", K_INT, CFG(max_array_size), 1, 100000, NULL},
        {"scheduler.queue_timeout_sec", K_INT, CFG(queue_timeout_sec), 0, 86400, NULL},
        {"scheduler.memory_safety_margin_mb", K_I64, CFG(memory_safety_margin_mb), 0, 1048576, NULL},
        {"scheduler.max_models_per_gpu", K_INT, CFG(max_models_per_gpu), 1, 64, NULL},
        {"scheduler.backfill", K_BOOL, CFG(backfill), 0, 0, NULL},
        {"scheduler.backfill_depth", K_INT, CFG(backfill_depth), 1, 1000000, NULL},
        {"scheduler.spf_aging_pct", K_INT, CFG(spf_aging_pct), 0, 100000, NULL},
        {"scheduler.spf_preempt", K_BOOL, CFG(spf_preempt), 0, 0, NULL},
        {"scheduler.las_thresholds_s", K_CUSTOM, CFG(las_thresholds_s), 1, GP_CFG_LAS_MAX_S, parse_las_thresholds},
        {"scheduler.preemption", K_SECTION, NOSTORE, 0, 0, NULL},
        {"scheduler.preemption.enabled", K_BOOL, CFG(preemption_enabled), 0, 0, NULL},
        {"scheduler.preemption.grace_sec", K_INT, CFG(preemption_grace_sec), 0, 86400, NULL},
        {"scheduler.preemption.max_notice_s", K_INT, CFG(preemption_max_notice_s), 0, 86400, NULL},
        {"scheduler.preemption.min_runtime_sec", K_INT, CFG(preemption_min_runtime_sec), 0, 604800,
         NULL},
        {"scheduler.fairshare_half_life_s", K_INT, CFG(fairshare_half_life_s), 0, 31536000, NULL},

        {"tasks", K_SECTION, NOSTORE, 0, 0, NULL},
        {"tasks.default_lease_ttl_s", K_INT, CFG(default_lease_ttl_s), 1, 604800, NULL},
        {"tasks.max_lease_ttl_s", K_INT, CFG(max_lease_ttl_s), 1, 2592000, NULL},
        {"tasks.kill_grace_s", K_INT, CFG(kill_grace_s), 0, 3600, NULL},
        {"tasks.max_log_bytes", K_I64, CFG(max_log_bytes), 4096, (int64_t)1 << 40, NULL},
        {"tasks.default_max_retries", K_INT, CFG(default_max_retries), 0, 100, NULL},
        {"tasks.oom_retry_factor", K_CUSTOM, CFG(oom_retry_permille), 1000, 4000, parse_permille},
        {"tasks.elastic_signal", K_CUSTOM, CFG(elastic_signal), 0, 0, parse_signal},

        {"monitor", K_SECTION, NOSTORE, 0, 0, NULL},
        {"monitor.sample_ms", K_INT, CFG(monitor_sample_ms), 100, 60000, NULL},

        {"alerts", K_SECTION, NOSTORE, 0, 0, NULL},
        {"alerts.webhook", K_CUSTOM, CFG(alert_webhook), 0, GP_CFG_WEBHOOK_MAX - 1, parse_webhook},
        {"alerts.webhook_timeout_s", K_INT, CFG(alert_webhook_timeout_s), 1, 300, NULL},
        {"alerts.webhook_retries", K_INT, CFG(alert_webhook_retries), 0, 100, NULL},
        {"alerts.rules", K_CUSTOM, CFG(alert_rules), 0, GP_CFG_MAX_ALERT_RULES, parse_items},
        {"alerts.rules[].name", K_STR, RULE(name), 1, GP_CFG_ALERT_NAME_MAX - 1, NULL},
        {"alerts.rules[].when", K_CUSTOM, RULE(when), 1, GP_CFG_ALERT_WHEN_MAX - 1, parse_when},
        {"alerts.rules[].for_s", K_INT, RULE(for_s), 0, 86400, NULL},
        {"alerts.rules[].clear_s", K_INT, RULE(clear_s), 0, 86400, NULL},
        {"alerts.rules[].severity", K_CUSTOM, RULE(severity), 0, 0, parse_severity},

        {"tenants", K_CUSTOM, CFG(tenants), 0, GP_CFG_MAX_TENANTS, parse_items},
        {"tenants[].id", K_STR, TEN(id), 1, GP_TENANT_MAX - 1, NULL},
        {"tenants[].name", K_STR, TEN(name), 0, GP_NAME_MAX - 1, NULL},
        {"tenants[].kind", K_CUSTOM, TEN(kind), 0, 0, parse_tenant_kind},
        {"tenants[].group", K_STR, TEN(group), 1, GP_TENANT_MAX - 1, NULL},
        {"tenants[].keys", K_CUSTOM, TEN(keys), 0, GP_CFG_MAX_TENANT_KEYS, parse_items},
        {"tenants[].max_priority", K_INT, TEN(max_priority), 0, GP_PRIORITY_LEVELS - 1, NULL},
        {"tenants[].default_priority", K_INT, TEN(default_priority), 0, GP_PRIORITY_LEVELS - 1, NULL},
        {"tenants[].weight", K_INT, TEN(weight), 1, 1000000, NULL},
        {"tenants[].run_as", K_CUSTOM, TEN(run_as), 0, 0, parse_unix_user},
        {"tenants[].quota", K_SECTION, NOSTORE, 0, 0, NULL},
        /* quota cfg_fields: names, types and ranges are config/quota.c's table */
        {"tenants[].quota.max_concurrent", K_CUSTOM, TEN(quota), 0, 0, parse_quota},
        {"tenants[].quota.max_queued", K_CUSTOM, TEN(quota), 0, 0, parse_quota},
        {"tenants[].quota.max_gpus", K_CUSTOM, TEN(quota), 0, 0, parse_quota},
        {"tenants[].quota.guaranteed_gpus", K_CUSTOM, TEN(quota), 0, 0, parse_quota},
        {"tenants[].gateway", K_SECTION, NOSTORE, 0, 0, NULL},
        {"tenants[].gateway.max_concurrent", K_INT, TEN(gw_max_concurrent), 0, 1000000, NULL},
        {"tenants[].gateway.rpm", K_I64, TEN(gw_rpm), 0, 100000000, NULL},
        {"tenants[].gateway.tpm", K_I64, TEN(gw_tpm), 0, (int64_t)1 << 40, NULL},
        {"groups", K_CUSTOM, CFG(groups), 0, GP_CFG_MAX_GROUPS, parse_items},
        {"groups[].name", K_STR, GRP(name), 1, GP_TENANT_MAX - 1, NULL},
        {"groups[].share_pct", K_INT, GRP(share_pct), 1, 100, NULL},
        {"time_rules", K_CUSTOM, CFG(time_rules), 0, GP_CFG_MAX_TIME_RULES, parse_items},
        {"time_rules[].name", K_STR, TR(name), 1, 63, NULL},
        {"time_rules[].start", K_CUSTOM, TR(start_min), 0, 0, parse_hhmm},
        {"time_rules[].end", K_CUSTOM, TR(end_min), 0, 0, parse_hhmm},
        {"time_rules[].tz", K_CUSTOM, TR(tz), 0, 0, parse_tz},
        {"time_rules[].weights", K_CUSTOM, TR(weights), 0, 0, parse_rule_weights},
        {"time_rules[].groups", K_CUSTOM, TR(groups), 0, GP_CFG_MAX_GROUPS, parse_items},
        {"time_rules[].quotas", K_CUSTOM, TR(quotas), 0, GP_CFG_MAX_RULE_QUOTAS, parse_rule_quotas},
        {"time_rules[].gateway", K_CUSTOM, TR(gw), 0, GP_CFG_MAX_RULE_GW, parse_rule_gw},
        {"time_rules[].gateway{}.max_concurrent", K_INT, RG(max_concurrent), 0, 1000000, NULL},
        {"time_rules[].gateway{}.rpm", K_I64, RG(rpm), 0, 100000000, NULL},
        {"time_rules[].gateway{}.tpm", K_I64, RG(tpm), 0, (int64_t)1 << 40, NULL},
        {"time_rules[].quotas{}.max_concurrent", K_CUSTOM, RQ(quota), 0, 0, parse_quota},
        {"time_rules[].quotas{}.max_queued", K_CUSTOM, RQ(quota), 0, 0, parse_quota},
        {"time_rules[].quotas{}.max_gpus", K_CUSTOM, RQ(quota), 0, 0, parse_quota},
        {"time_rules[].quotas{}.guaranteed_gpus", K_CUSTOM, RQ(quota), 0, 0, parse_quota},
        {"gateway", K_SECTION, NOSTORE, 0, 0, NULL},
        {"gateway.queue_timeout_sec", K_INT, GW(queue_timeout_sec), 1, 86400, NULL},
        {"gateway.max_queue", K_INT, GW(max_queue), 1, 1000000, NULL},
        {"gateway.limits", K_SECTION, NOSTORE, 0, 0, NULL},
        {"gateway.limits.max_concurrent", K_INT, GW(max_concurrent), 0, 1000000, NULL},
        {"gateway.limits.max_rps", K_INT, GW(max_rps), 0, 10000000, NULL},
        {"gateway.limits.max_tokens_per_sec", K_I64, GW(max_tokens_per_sec), 0, (int64_t)1 << 40, NULL},
        {"gateway.connect_timeout_ms", K_INT, GW(connect_timeout_ms), 1, 600000, NULL},
        {"gateway.idle_timeout_sec", K_INT, GW(idle_timeout_sec), 1, 86400, NULL},
        {"gateway.request_timeout_sec", K_INT, GW(request_timeout_sec), 1, 86400, NULL},
        {"gateway.max_response_bytes", K_I64, GW(max_response_bytes), 4096, (int64_t)1 << 32, NULL},
        {"gateway.max_upstream_connections", K_INT, GW(max_upstream_connections), 1, 65536, NULL},
        {"gateway.upstream_down_sec", K_INT, GW(upstream_down_sec), 1, 3600, NULL},
        {"gateway.tokenize_timeout_ms", K_INT, GW(tokenize_timeout_ms), 10, 60000, NULL},
        {"gateway.models", K_CUSTOM, GW(models), 0, GP_CFG_MAX_MODELS, parse_items},
        {"gateway.models[].name", K_STR, MOD(name), 1, GP_CFG_MODEL_NAME_MAX - 1, NULL},
        {"gateway.models[].context", K_I64, MOD(context), 1, 100000000, NULL},
        {"gateway.models[].tokenize", K_CUSTOM, MOD(tokenize_off), 0, 0, parse_tokenize},
        {"gateway.models[].upstreams", K_CUSTOM, MOD(upstreams), 0, GP_CFG_MAX_UPSTREAMS, parse_items},
        {"gateway.models[].serve", K_CUSTOM, MOD(serve), 0, 0, parse_serve},
        {"gateway.models[].serve.command", K_CUSTOM, SRV(command), 1, GP_CFG_MAX_SERVE_ARGS,
         parse_items},
        {"gateway.models[].serve.gpus", K_INT, SRV(gpus), 1, 64, NULL},
        {"gateway.models[].serve.memory_mb", K_I64, SRV(memory_mb), 0, 1048576, NULL},
        {"gateway.models[].serve.port", K_CUSTOM, SRV(port), 0, 65535, parse_serve_port},
        {"gateway.models[].serve.ready", K_STR, SRV(ready), 1, GP_CFG_URL_MAX - 1, NULL},
        {"gateway.models[].serve.replicas", K_INT, SRV(replicas), 1, 16, NULL},
        {"gateway.models[].serve.autoscale", K_CUSTOM, SRV(autoscale), 0, 0, parse_autoscale},
        {"gateway.models[].serve.autoscale.min", K_INT, SRV(autoscale_min), 1, 16, NULL},
        {"gateway.models[].serve.autoscale.max", K_INT, SRV(autoscale_max), 1, 16, NULL},
        {"gateway.models[].serve.autoscale.queue_depth", K_INT, SRV(autoscale_queue_depth), 1, 1000000, NULL},
        {"billing", K_SECTION, NOSTORE, 0, 0, NULL},
        {"billing.currency", K_STR, BILL(currency), 1, 7, NULL},
        {"billing.record_interval_s", K_INT, BILL(record_interval_s), 1, 86400, NULL},
        {"billing.min_billing_sec", K_CUSTOM, BILL(min_billing_ms), 0, 86400, parse_secs_ms},
        {"billing.enforce_balance", K_BOOL, BILL(enforce_balance), 0, 0, NULL},
        {"billing.prices", K_CUSTOM, BILL(gpu), 0, GP_BILL_MAX_GPU_PRICES, parse_items},
        {"billing.prices[].gpu_model", K_STR, BGP(gpu_model), 1, GP_MODEL_MAX - 1, NULL},
        {"billing.prices[].per_gpu_hour", K_CUSTOM, BGP(per_gpu_hour), 0, GP_BILL_MONEY_MAX, parse_money},
        {"billing.token_prices", K_CUSTOM, BILL(tokens), 0, GP_BILL_MAX_TOKEN_PRICES, parse_items},
        {"billing.token_prices[].model", K_STR, BTP(model), 1, GP_MODEL_MAX - 1, NULL},
        {"billing.token_prices[].per_1k_tokens", K_CUSTOM, BTP(per_1k_prompt), 1, GP_BILL_MONEY_MAX, parse_money},
        {"billing.token_prices[].per_1k_prompt", K_CUSTOM, BTP(per_1k_prompt), 0, GP_BILL_MONEY_MAX, parse_money},
        {"billing.token_prices[].per_1k_completion", K_CUSTOM, BTP(per_1k_completion), 0, GP_BILL_MONEY_MAX,
         parse_money},
        {"billing.volume_discounts", K_CUSTOM, BILL(tiers), 0, GP_BILL_MAX_TIERS, parse_items},
        {"billing.volume_discounts[].gpu_hours", K_I64, BTI(gpu_hours), 1, 100000000, NULL},
        {"billing.volume_discounts[].factor", K_CUSTOM, BTI(factor_ppm), 0, 1000000, parse_money},
        {"billing.time_windows", K_CUSTOM, BILL(windows), 0, GP_BILL_MAX_WINDOWS, parse_items},
        {"billing.time_windows[].name", K_STR, BWI(name), 1, 63, NULL},
        {"billing.time_windows[].start", K_CUSTOM, BWI(start_min), 0, 0, parse_hhmm},
        {"billing.time_windows[].end", K_CUSTOM, BWI(end_min), 0, 0, parse_hhmm},
        {"billing.time_windows[].tz", K_CUSTOM, BWI(tz), 0, 0, parse_bill_tz},
        {"billing.time_windows[].multiplier", K_CUSTOM, BWI(multiplier_ppm), 0, 100000000, parse_money},
};

#define N_FIELDS GP_ARRAY_SIZE(cfg_fields)
const size_t cfg_nfields = N_FIELDS;
_Static_assert(GP_ARRAY_SIZE(cfg_fields) <= CFG_MAX_FIELDS, "raise CFG_MAX_FIELDS");

const char *const cfg_backend_names[4] = {"auto", "nvml", "sim", "none"};
const char *const cfg_sync_names[2] = {"full", "normal"};
static const char *const plaintext_names[] = {"loopback", "any"};
const char *const cfg_severity_names[3] = {"info", "warning", "critical"};
const char *const cfg_cmp_names[6] = {">", ">=", "<", "<=", "==", "!="}; /* gp_cmp order */

const char *const gp_config_alert_metrics[] = {
        "gpu_unhealthy",  "gpu_ecc_uncorrected",   "gpu_temp_c",   "node_lost",
        "queue_wait_p95_s", "util_pct_while_queued", "queued_tasks", "tenant_quota_used_pct",
        "tenant_balance", NULL,
};

/* Lines (0 = not in the file) of the things the cross-reference checks
 * (check_refs: keys, groups, tenants named by time rules) report on. */

/* ---- the embedded default ---- */

static const uint32_t default_weights[GP_PRIORITY_LEVELS] = {256, 128, 64, 32, 16, 8, 4, 2, 1, 1};

/* "sqlite://<data_dir>/gpupool.db", trailing slashes of data_dir dropped.
 * 0 or -ENAMETOOLONG (out untouched then). */
static int derive_store_url(const char *data_dir, char *out, size_t size) {
        size_t n = strlen(data_dir);
        while (n > 1 && data_dir[n - 1] == '/')
                n--;
        const char *sep = (n == 1 && data_dir[0] == '/') ? "" : "/";
        char tmp[sizeof(((gp_config *)0)->store_url)];
        int w = snprintf(tmp, sizeof(tmp), "sqlite://%.*s%sgpupool.db", (int)n, data_dir, sep);
        if (w < 0 || (size_t)w >= sizeof(tmp) || (size_t)w >= size)
                return -ENAMETOOLONG;
        memcpy(out, tmp, (size_t)w + 1);
        return 0;
}

void gp_config_sched(const gp_config *cfg, gp_sched_config *sc) {
        gp_sched_config_defaults(sc);
        sc->policy = cfg->policy;
        sc->placement = cfg->placement;
        memcpy(sc->weights, cfg->weights, sizeof(sc->weights));
        sc->memory_safety_margin_mb = cfg->memory_safety_margin_mb;
        sc->backfill = cfg->backfill;
        sc->backfill_depth = cfg->backfill_depth;
        sc->spf_aging_pct = cfg->spf_aging_pct;
        sc->preemption = cfg->preemption_enabled;
        sc->preempt_min_runtime_ms = (int64_t)cfg->preemption_min_runtime_sec * 1000;
        sc->spf_preempt = cfg->spf_preempt && cfg->preemption_enabled;
        sc->las_min_run_ms = sc->preempt_min_runtime_ms;
        sc->las_levels = cfg->n_las_thresholds + 1; /* spf's demotion levels (scheduler.las_thresholds_s) */
        for (int i = 0; i < cfg->n_las_thresholds; i++)
                sc->las_thresholds_ms[i] = cfg->las_thresholds_s[i] * 1000;
        sc->fairshare_half_life_ms = (int64_t)cfg->fairshare_half_life_s * 1000;
        sc->max_models_per_gpu = cfg->max_models_per_gpu;
}

void gp_config_defaults(gp_config *cfg) {
        memset(cfg, 0, sizeof(*cfg));
        gp_strlcpy(cfg->listen, "0.0.0.0:8080", sizeof(cfg->listen));
        gp_strlcpy(cfg->data_dir, "./gpupool-data", sizeof(cfg->data_dir));
        cfg->max_connections = 1024;
        cfg->max_body_bytes = (int64_t)1 << 20;
        cfg->connection_timeout_s = 60;
        cfg->header_timeout_s = 10;
        cfg->min_body_rate_bytes_s = 1024;
        cfg->max_connections_per_ip = 256;
        cfg->http_threads = 2;

        cfg->n_admin_keys = 0;

        derive_store_url(cfg->data_dir, cfg->store_url, sizeof(cfg->store_url));
        cfg->store_sync_full = true;
        cfg->store_disk_reserve_mb = 4;
        cfg->store_disk_min_free_mb = 1;

        gp_strlcpy(cfg->gpu_backend, "auto", sizeof(cfg->gpu_backend));
        gp_strlcpy(cfg->nvml_library, "libnvidia-ml.so.1", sizeof(cfg->nvml_library));
        cfg->n_reserved = 0;
        gp_strlcpy(cfg->sim[0].name, "NVIDIA GeForce RTX 4090", sizeof(cfg->sim[0].name));
        cfg->sim[0].memory_mb = 24564;
        cfg->sim[0].count = 4;
        cfg->n_sim = 1;
        cfg->gpu_poll_ms = 2000;
        cfg->gpu_watchdog = true;
        cfg->watchdog_tolerance_mb = 256;
        cfg->watchdog_grace_s = 10;
        cfg->gpu_mps = false;
        cfg->n_mps_gpus = 0;
        gp_strlcpy(cfg->mps_control, "nvidia-cuda-mps-control", sizeof(cfg->mps_control));

        gp_strlcpy(cfg->agent_listen, "0.0.0.0:8081", sizeof(cfg->agent_listen));
        gp_strlcpy(cfg->agent_data_dir, "./gpupool-agent-data", sizeof(cfg->agent_data_dir));
        cfg->agent_heartbeat_s = 2;
        cfg->node_timeout_s = 10;
        cfg->fence_s = 30;
        cfg->lease_s = 6;
        cfg->heartbeat_interval_s = 15;
        cfg->server_timeout_s = 60;

        cfg->policy = GP_SCHED_HYBRID;
        cfg->placement = GP_PLACE_PACK;
        cfg->priority_levels = GP_PRIORITY_LEVELS;
        memcpy(cfg->weights, default_weights, sizeof(cfg->weights));
        cfg->max_queue_depth = 10000;
        cfg->max_array_size = 10000;
        cfg->queue_timeout_sec = 0; /* tasks wait as long as it takes unless the config says */
        cfg->memory_safety_margin_mb = 2000;
        cfg->max_models_per_gpu = 2;
        cfg->backfill = true;
        cfg->backfill_depth = 1000;
        cfg->spf_aging_pct = 1;
        cfg->n_las_thresholds = 2; /* the core's LAS levels: 1 and 10 GPU-hours */
        cfg->las_thresholds_s[0] = 3600;
        cfg->las_thresholds_s[1] = 36000;
        cfg->preemption_enabled = true;
        cfg->preemption_grace_sec = 30;
        cfg->preemption_max_notice_s = 300;
        cfg->preemption_min_runtime_sec = 60;
        cfg->fairshare_half_life_s = 86400;

        cfg->default_lease_ttl_s = 60;
        cfg->max_lease_ttl_s = 86400;
        cfg->kill_grace_s = 10;
        cfg->elastic_signal = SIGUSR1;
        cfg->max_log_bytes = (int64_t)64 << 20;
        cfg->default_max_retries = 1;
        cfg->oom_retry_permille = 1200;

        cfg->monitor_sample_ms = 1000;

        cfg->alert_webhook[0] = '\0';
        cfg->alert_webhook_timeout_s = 5;
        cfg->alert_webhook_retries = 5;
        /* out of the box: a failing GPU and a lost node are alerts */
        static const struct {
                const char *name, *when, *metric;
        } def_rules[] = {{"gpu_error", "gpu_unhealthy", "gpu_unhealthy"}, {"node_lost", "node_lost", "node_lost"}};
        for (size_t i = 0; i < GP_ARRAY_SIZE(def_rules); i++) {
                gp_cfg_alert_rule *r = &cfg->alert_rules[i];
                gp_strlcpy(r->name, def_rules[i].name, sizeof(r->name));
                gp_strlcpy(r->when, def_rules[i].when, sizeof(r->when));
                gp_strlcpy(r->metric, def_rules[i].metric, sizeof(r->metric));
                r->op = GP_CMP_GT;
                r->threshold = 0;
                r->for_s = 0;
                r->clear_s = 30;
                gp_strlcpy(r->severity, "critical", sizeof(r->severity));
        }
        cfg->n_alert_rules = (int)GP_ARRAY_SIZE(def_rules);

        gp_strlcpy(cfg->billing.currency, "USD", sizeof(cfg->billing.currency));
        cfg->billing.record_interval_s = 300;
        cfg->gw.queue_timeout_sec = 30;
        cfg->gw.max_queue = 10000;
        cfg->gw.max_concurrent = 100;
        cfg->gw.max_rps = 0;
        cfg->gw.max_tokens_per_sec = 0;
        cfg->gw.connect_timeout_ms = 2000;
        cfg->gw.idle_timeout_sec = 60;
        cfg->gw.request_timeout_sec = 600;
        cfg->gw.max_response_bytes = (int64_t)16 << 20;
        cfg->gw.max_upstream_connections = 256;
        cfg->gw.upstream_down_sec = 5;
        cfg->gw.tokenize_timeout_ms = 300;
        cfg->gw.n_models = 0;
}

/* ---- messages ---- */

void cfg_vmsg(char *err, size_t errlen, const char *src, int line, const char *key,
                 const char *fmt, va_list ap) {
        if (!err || errlen == 0)
                return;
        int n;
        if (line > 0 && key && *key)
                n = snprintf(err, errlen, "%s:%d: %s: ", src, line, key);
        else if (line > 0)
                n = snprintf(err, errlen, "%s:%d: ", src, line);
        else if (key && *key)
                n = snprintf(err, errlen, "%s: %s: ", src, key);
        else
                n = snprintf(err, errlen, "%s: ", src);
        if (n < 0)
                n = 0;
        if ((size_t)n < errlen)
                vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
}

/* Report an error at `line` about the current path.  Returns -EINVAL. */
__attribute__((format(printf, 3, 4))) int cfg_fail(struct ctx *c, int line, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        cfg_vmsg(c->err, c->errlen, c->name, line, c->path, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

int cfg_ev_line(const yaml_event_t *ev) {
        size_t l = ev->start_mark.line + 1;
        return l > INT_MAX ? INT_MAX : (int)l;
}

/* A printable, bounded rendering of a user's scalar for a message:
 * control characters become '?', long values are cut at a UTF-8 boundary. */
const char *cfg_show(const char *s, size_t len, char *out, size_t size) {
        size_t max = size > 48 ? 44 : size - 4, o = 0;
        bool cut = len > max;
        size_t n = cut ? max : len;
        if (cut)
                while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
                        n--;
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)s[i];
                out[o++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
        }
        if (cut) {
                memcpy(out + o, "...", 3);
                o += 3;
        }
        out[o] = '\0';
        return out;
}

bool cfg_is_null(const yaml_event_t *ev) {
        if (ev->type != YAML_SCALAR_EVENT || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                return false;
        const char *v = (const char *)ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        return n == 0 || (n == 1 && v[0] == '~') ||
               (n == 4 && (!memcmp(v, "null", 4) || !memcmp(v, "Null", 4) || !memcmp(v, "NULL", 4)));
}

/* What the user gave, for "expected X, got Y". */
const char *cfg_describe(const yaml_event_t *ev, char *out, size_t size) {
        char tmp[64];
        switch (ev->type) {
        case YAML_SEQUENCE_START_EVENT:
                return "a list";
        case YAML_MAPPING_START_EVENT:
                return "a mapping";
        case YAML_SCALAR_EVENT:
                if (cfg_is_null(ev))
                        return "nothing (null)";
                cfg_show((const char *)ev->data.scalar.value, ev->data.scalar.length, tmp, sizeof(tmp));
                if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
                        snprintf(out, size, "%s", tmp);
                else
                        snprintf(out, size, "the quoted string \"%s\"", tmp);
                return out;
        default:
                return "something else";
        }
}

void cfg_path_push(struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cfg_path_push(struct ctx *c, const char *fmt, ...) {
        size_t room = sizeof(c->path) - c->pathlen;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(c->path + c->pathlen, room, fmt, ap);
        va_end(ap);
        if (n < 0)
                n = 0;
        c->pathlen = (size_t)n < room ? c->pathlen + (size_t)n : sizeof(c->path) - 1;
}

void cfg_path_pop(struct ctx *c, size_t len) {
        c->pathlen = len;
        c->path[len] = '\0';
}

/* ---- events ---- */

static int syntax_error(struct ctx *c) {
        yaml_parser_t *p = &c->parser;
        size_t line;
        /* the key cannot be known reliably here: name only the line */
        c->pathlen = 0;
        c->path[0] = '\0';
        if (p->error == YAML_MEMORY_ERROR) {
                cfg_fail(c, 0, "out of memory while parsing");
                return -ENOMEM;
        }
        if (p->error == YAML_READER_ERROR) {
                size_t end = p->problem_offset < c->len ? p->problem_offset : c->len;
                line = 1;
                for (size_t i = 0; i < end; i++)
                        line += c->data[i] == '\n';
                return cfg_fail(c, line > INT_MAX ? INT_MAX : (int)line, "YAML syntax error: %s",
                            p->problem ? p->problem : "unreadable input");
        }
        line = p->problem_mark.line + 1;
        if (p->context)
                return cfg_fail(c, line > INT_MAX ? INT_MAX : (int)line,
                            "YAML syntax error: %s (%s at line %zu)",
                            p->problem ? p->problem : "unknown problem", p->context,
                            p->context_mark.line + 1);
        return cfg_fail(c, line > INT_MAX ? INT_MAX : (int)line, "YAML syntax error: %s",
                    p->problem ? p->problem : "unknown problem");
}

/* Next event; refuses aliases, anchors and explicit tags.  On success the
 * caller owns *ev (yaml_event_delete); on failure nothing is held. */
int cfg_next(struct ctx *c, yaml_event_t *ev) {
        if (!yaml_parser_parse(&c->parser, ev))
                return syntax_error(c);
        const yaml_char_t *anchor = NULL, *tag = NULL;
        switch (ev->type) {
        case YAML_ALIAS_EVENT:
                anchor = ev->data.alias.anchor;
                break;
        case YAML_SCALAR_EVENT:
                anchor = ev->data.scalar.anchor;
                tag = ev->data.scalar.tag;
                break;
        case YAML_SEQUENCE_START_EVENT:
                anchor = ev->data.sequence_start.anchor;
                tag = ev->data.sequence_start.tag;
                break;
        case YAML_MAPPING_START_EVENT:
                anchor = ev->data.mapping_start.anchor;
                tag = ev->data.mapping_start.tag;
                break;
        default:
                break;
        }
        int r = 0;
        if (ev->type == YAML_ALIAS_EVENT || anchor)
                r = cfg_fail(c, cfg_ev_line(ev), "anchors and aliases (&name, *name) are not supported");
        else if (tag)
                r = cfg_fail(c, cfg_ev_line(ev), "explicit tags (!!type) are not supported");
        if (r < 0)
                yaml_event_delete(ev);
        return r;
}

/* ---- scalars ---- */

/* Strict decimal integer in [min, max] from a plain scalar. */
int cfg_scalar_int(struct ctx *c, const yaml_event_t *ev, int64_t min, int64_t max,
                      int64_t *ret) {
        char d[96];
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev) ||
            ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                return cfg_fail(c, cfg_ev_line(ev), "expected an integer, got %s", cfg_describe(ev, d, sizeof(d)));
        const char *v = (const char *)ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        size_t i = v[0] == '-' ? 1 : 0;
        bool ok = n > i && n < 32 && strlen(v) == n;
        for (size_t j = i; ok && j < n; j++)
                ok = v[j] >= '0' && v[j] <= '9';
        if (ok && v[i] == '0' && n > i + 1)
                ok = false; /* 010: octal in YAML 1.1, decimal elsewhere: refuse */
        int64_t x;
        int r = ok ? gp_parse_i64(v, min, max, &x) : -EINVAL;
        if (r == -ERANGE && min == max)
                return cfg_fail(c, cfg_ev_line(ev), "must be %lld (the only value this version supports), got %s",
                            (long long)min, cfg_describe(ev, d, sizeof(d)));
        if (r == -ERANGE)
                return cfg_fail(c, cfg_ev_line(ev), "must be between %lld and %lld, got %s", (long long)min,
                            (long long)max, cfg_describe(ev, d, sizeof(d)));
        if (r < 0)
                return cfg_fail(c, cfg_ev_line(ev), "expected a decimal integer, got %s",
                            cfg_describe(ev, d, sizeof(d)));
        *ret = x;
        return 0;
}

/* A key in seconds (*_s, *_sec; not a rate such as *_bytes_s). */
static bool key_is_secs(const char *key) {
        size_t n = strlen(key);
        return (n > 2 && !strcmp(key + n - 2, "_s") && !(n > 8 && !strcmp(key + n - 8, "_bytes_s"))) ||
               (n > 4 && !strcmp(key + n - 4, "_sec"));
}

/* MB (*_mb): an integer, or a size as the CLI takes it (8G, 8192M). */
int cfg_scalar_mb(struct ctx *c, const yaml_event_t *ev, int64_t min, int64_t max, int64_t *ret) {
        char d[96];
        int64_t x;
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev))
                return cfg_scalar_int(c, ev, min, max, ret); /* its message for what is not a scalar */
        const char *v = (const char *)ev->data.scalar.value;
        size_t sign = v[0] == '-' ? 1 : 0;
        if (strlen(v) != ev->data.scalar.length || strspn(v + sign, "0123456789") == ev->data.scalar.length - sign)
                return cfg_scalar_int(c, ev, min, max, ret);
        int r = gp_size_mb_parse(v, max, &x);
        if (r == -ERANGE || (r == 0 && x < min))
                return cfg_fail(c, cfg_ev_line(ev), "must be between %lld and %lld MB, got %s", (long long)min, (long long)max,
                            cfg_describe(ev, d, sizeof(d)));
        if (r < 0)
                return cfg_fail(c, cfg_ev_line(ev), "expected MB or a size such as 8G or 8192M, got %s",
                            cfg_describe(ev, d, sizeof(d)));
        *ret = x;
        return 0;
}

/* Seconds: an integer, or a duration as the CLI takes it (base/units.h:
 * 90s, 30m, 12h, 7d, [D-]HH:MM:SS). */
int cfg_scalar_secs(struct ctx *c, const yaml_event_t *ev, int64_t min, int64_t max, int64_t *ret) {
        char d[96];
        int64_t x;
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev))
                return cfg_scalar_int(c, ev, min, max, ret); /* its message for what is not a scalar */
        const char *v = (const char *)ev->data.scalar.value;
        size_t sign = v[0] == '-' ? 1 : 0;
        if (strlen(v) != ev->data.scalar.length || strspn(v + sign, "0123456789") == ev->data.scalar.length - sign)
                return cfg_scalar_int(c, ev, min, max, ret);
        int r = gp_duration_parse(v, GP_DUR_PLAIN_SECONDS, max, &x);
        if (r == -ERANGE || (r == 0 && x < min))
                return cfg_fail(c, cfg_ev_line(ev), "must be between %llds and %llds, got %s", (long long)min, (long long)max,
                            cfg_describe(ev, d, sizeof(d)));
        if (r < 0)
                return cfg_fail(c, cfg_ev_line(ev), "expected seconds or a duration such as 90s, 30m, 12h, 7d or HH:MM:SS, "
                            "got %s", cfg_describe(ev, d, sizeof(d)));
        *ret = x;
        return 0;
}

int cfg_scalar_bool(struct ctx *c, const yaml_event_t *ev, bool *ret) {
        char d[96];
        if (ev->type == YAML_SCALAR_EVENT && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
                const char *v = (const char *)ev->data.scalar.value;
                if (strlen(v) != ev->data.scalar.length)
                        goto bad;
                if (!strcasecmp(v, "true") || !strcasecmp(v, "yes")) {
                        *ret = true;
                        return 0;
                }
                if (!strcasecmp(v, "false") || !strcasecmp(v, "no")) {
                        *ret = false;
                        return 0;
                }
        }
bad:
        return cfg_fail(c, cfg_ev_line(ev), "expected true or false, got %s", cfg_describe(ev, d, sizeof(d)));
}

/* A string scalar (plain or quoted) of minlen..size-1 bytes, clean UTF-8.
 * Never echoes the value (it may be a secret). */
int cfg_scalar_str(struct ctx *c, const yaml_event_t *ev, char *dst, size_t size, size_t minlen) {
        char d[96];
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev))
                return cfg_fail(c, cfg_ev_line(ev), "expected a string, got %s", cfg_describe(ev, d, sizeof(d)));
        const char *v = (const char *)ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        if (n >= size)
                return cfg_fail(c, cfg_ev_line(ev), "too long (%zu bytes, at most %zu)", n, size - 1);
        if (n < minlen)
                return cfg_fail(c, cfg_ev_line(ev), "must not be empty");
        const char *why;
        if (strlen(v) != n)
                return cfg_fail(c, cfg_ev_line(ev), "contains control characters (NUL)");
        if (gp_text_check(v, n, size - 1, &why) < 0)
                return cfg_fail(c, cfg_ev_line(ev), "%s", why);
        memcpy(dst, v, n);
        memset(dst + n, 0, size - n); /* zero-padded: the struct compares with memcmp */
        return 0;
}

int cfg_scalar_enum(struct ctx *c, const yaml_event_t *ev, const char *const *names, size_t n,
                       size_t *ret) {
        char d[96], list[128];
        if (ev->type == YAML_SCALAR_EVENT && !cfg_is_null(ev))
                for (size_t i = 0; i < n; i++)
                        if (strlen(names[i]) == ev->data.scalar.length &&
                            !memcmp(names[i], ev->data.scalar.value, ev->data.scalar.length)) {
                                *ret = i;
                                return 0;
                        }
        size_t o = 0;
        list[0] = '\0';
        for (size_t i = 0; i < n && o < sizeof(list); i++) {
                int w = snprintf(list + o, sizeof(list) - o, "%s%s", i ? ", " : "", names[i]);
                if (w < 0)
                        break;
                o += (size_t)w;
        }
        return cfg_fail(c, cfg_ev_line(ev), "expected one of %s; got %s", list, cfg_describe(ev, d, sizeof(d)));
}

/* ---- checks shared by the loader and gp_config_validate ---- */

/* "ADDR:PORT": IPv4, [IPv6] or a host name; port 1..65535. */
int check_listen(const char *s, const char **why) {
        const char *colon = strrchr(s, ':');
        if (!colon) {
                *why = "expected ADDR:PORT, e.g. 0.0.0.0:8080";
                return -EINVAL;
        }
        int64_t port;
        if (gp_parse_i64(colon + 1, 1, 65535, &port) < 0 || colon[1] == '-') {
                *why = "the port must be a number between 1 and 65535";
                return -EINVAL;
        }
        size_t hl = (size_t)(colon - s);
        char host[128];
        if (hl == 0) {
                *why = "missing address before the port (use 0.0.0.0:PORT for all addresses)";
                return -EINVAL;
        }
        if (hl >= sizeof(host)) {
                *why = "address too long";
                return -EINVAL;
        }
        memcpy(host, s, hl);
        host[hl] = '\0';
        /* what the server binds: an IPv4 address, or localhost */
        if (host[0] == '[' || strchr(host, ':')) {
                *why = "IPv6 addresses are not supported by this version; use an IPv4 address such as "
                       "127.0.0.1 or 0.0.0.0";
                return -EINVAL;
        }
        if (!strcmp(host, "localhost"))
                return 0;
        unsigned char a[4];
        if (strspn(host, "0123456789.") != hl || inet_pton(AF_INET, host, a) != 1) {
                *why = "expected an IPv4 address (e.g. 0.0.0.0 for all, 127.0.0.1 for this machine) or localhost";
                return -EINVAL;
        }
        return 0;
}

bool admin_key_ok(const char *s, size_t n) {
        if (n != 7 + 64 || memcmp(s, "sha256:", 7) != 0)
                return false;
        for (size_t i = 7; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

/* sqlite://PATH | postgres://... | postgresql://... with something after "://". */
bool store_url_ok(const char *s) {
        static const char *const schemes[] = {"sqlite://", "postgres://", "postgresql://"};
        for (size_t i = 0; i < GP_ARRAY_SIZE(schemes); i++) {
                size_t n = strlen(schemes[i]);
                if (!strncmp(s, schemes[i], n))
                        return s[n] != '\0';
        }
        return false;
}

/* A GPU index ("0".."1023") or a uuid-like token (no spaces/control chars). */
bool reserved_ok(const char *s, size_t n) {
        if (n == 0 || n >= GP_UUID_MAX || strlen(s) != n)
                return false;
        if (strspn(s, "0123456789") == n) {
                int64_t x;
                return gp_parse_i64(s, 0, MAX_GPU_INDEX, &x) == 0 && (s[0] != '0' || n == 1);
        }
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)s[i];
                if (ch <= 0x20 || ch == 0x7f)
                        return false;
        }
        return gp_str_is_clean(s, n);
}

/* ---- the walk ---- */

static int find_field(const char *prefix, const char *key, size_t klen) {
        size_t pl = strlen(prefix);
        if (klen == 0 || klen > 64 || memchr(key, '.', klen) || memchr(key, '[', klen) ||
            memchr(key, '\0', klen))
                return -1;
        for (size_t i = 0; i < N_FIELDS; i++) {
                const char *k = cfg_fields[i].key;
                if (pl) {
                        if (strncmp(k, prefix, pl) != 0 || k[pl] != '.')
                                continue;
                        k += pl + 1;
                }
                if (strlen(k) == klen && !memcmp(k, key, klen))
                        return (int)i;
        }
        return -1;
}

static void valid_keys(const char *prefix, char *out, size_t size) {
        size_t pl = strlen(prefix), o = 0;
        out[0] = '\0';
        for (size_t i = 0; i < N_FIELDS && o < size; i++) {
                const char *k = cfg_fields[i].key;
                if (cfg_fields[i].kind == K_UNSUPPORTED)
                        continue;
                if (pl) {
                        if (strncmp(k, prefix, pl) != 0 || k[pl] != '.')
                                continue;
                        k += pl + 1;
                }
                if (strchr(k, '.') || strchr(k, '['))
                        continue;
                int w = snprintf(out + o, size - o, "%s%s", o ? ", " : "", k);
                if (w < 0)
                        break;
                o += (size_t)w;
        }
}

int cfg_parse_map(struct ctx *c, const char *prefix, void *base);

int parse_value(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        void *p = (char *)base + f->off;
        char d[96];
        int64_t x;
        bool b = false;
        int r;
        switch (f->kind) {
        case K_SECTION:
                if (cfg_is_null(ev))
                        return 0; /* "server:" with everything commented out */
                if (ev->type != YAML_MAPPING_START_EVENT)
                        return cfg_fail(c, cfg_ev_line(ev), "expected a mapping of keys, got %s",
                                    cfg_describe(ev, d, sizeof(d)));
                return cfg_parse_map(c, f->key, base);
        case K_INT:
        case K_I64: {
                size_t kl = strlen(f->key);
                if (key_is_secs(f->key))
                        r = cfg_scalar_secs(c, ev, f->min, f->max, &x);
                else if (kl > 3 && !strcmp(f->key + kl - 3, "_mb"))
                        r = cfg_scalar_mb(c, ev, f->min, f->max, &x);
                else
                        r = cfg_scalar_int(c, ev, f->min, f->max, &x);
                if (r == 0 && f->kind == K_INT)
                        *(int *)p = (int)x;
                if (r == 0 && f->kind == K_I64)
                        *(int64_t *)p = x;
                return r;
        }
        case K_BOOL:
                r = cfg_scalar_bool(c, ev, &b);
                if (r == 0)
                        *(bool *)p = b;
                return r;
        case K_STR:
                return cfg_scalar_str(c, ev, p, f->size, (size_t)f->min);
        case K_CUSTOM:
                return f->fn(c, f, base, ev);
        case K_UNSUPPORTED:
        default:
                return cfg_fail(c, cfg_ev_line(ev), "not supported by this version of gpupool yet");
        }
}

/* Read the keys of a mapping whose start event was consumed, up to and
 * including its end event.  prefix is the schema key of the mapping
 * ("" for the top level); member offsets are relative to base. */
int cfg_parse_map(struct ctx *c, const char *prefix, void *base) {
        int first[N_FIELDS];
        int r = 0;
        memset(first, 0, sizeof(first));
        if (++c->depth > MAX_DEPTH) {
                r = cfg_fail(c, c->key_line, "nested too deeply (more than %d levels)", MAX_DEPTH);
                goto out;
        }
        for (;;) {
                yaml_event_t kev, vev;
                char d[96], list[512];
                r = cfg_next(c, &kev);
                if (r < 0)
                        goto out;
                if (kev.type == YAML_MAPPING_END_EVENT) {
                        yaml_event_delete(&kev);
                        break;
                }
                int kline = cfg_ev_line(&kev);
                if (kev.type != YAML_SCALAR_EVENT) {
                        r = cfg_fail(c, kline, "expected a key, got %s", cfg_describe(&kev, d, sizeof(d)));
                        yaml_event_delete(&kev);
                        goto out;
                }
                size_t saved = c->pathlen;
                int idx = find_field(prefix, (const char *)kev.data.scalar.value, kev.data.scalar.length);
                if (idx < 0) {
                        cfg_path_push(c, "%s%s", saved ? "." : "",
                                  cfg_show((const char *)kev.data.scalar.value, kev.data.scalar.length, d,
                                       sizeof(d)));
                        valid_keys(prefix, list, sizeof(list));
                        r = cfg_fail(c, kline, "unknown key (valid keys%s%s: %s)", *prefix ? " of " : "",
                                 *prefix ? prefix : "", list);
                        yaml_event_delete(&kev);
                        goto out;
                }
                yaml_event_delete(&kev);
                const struct field *f = &cfg_fields[idx];
                const char *leaf = f->key + (*prefix ? strlen(prefix) + 1 : 0);
                cfg_path_push(c, "%s%s", saved ? "." : "", leaf);
                if (first[idx]) {
                        r = cfg_fail(c, kline, "duplicate key (first given at line %d)", first[idx]);
                        goto out;
                }
                first[idx] = kline;
                if (f->kind == K_UNSUPPORTED) {
                        r = cfg_fail(c, kline, "not supported by this version of gpupool yet");
                        goto out;
                }
                r = cfg_next(c, &vev);
                if (r < 0)
                        goto out;
                c->key_line = kline;
                r = parse_value(c, f, base, &vev);
                yaml_event_delete(&vev);
                if (r < 0)
                        goto out;
                c->line[idx] = kline;
                cfg_path_pop(c, saved);
        }
out:
        c->depth--;
        return r;
}


/* A list (or null = empty) whose items go to fn; ret_n = number of items.
 * `what` describes the expected list for the type error. */
int cfg_parse_list(struct ctx *c, const yaml_event_t *ev, const char *what, item_fn fn, void *arg,
                      int *ret_n) {
        char d[96];
        int n = 0, r = 0;
        if (cfg_is_null(ev)) {
                *ret_n = 0;
                return 0;
        }
        if (ev->type != YAML_SEQUENCE_START_EVENT)
                return cfg_fail(c, cfg_ev_line(ev), "expected %s, got %s", what, cfg_describe(ev, d, sizeof(d)));
        if (++c->depth > MAX_DEPTH) {
                r = cfg_fail(c, cfg_ev_line(ev), "nested too deeply (more than %d levels)", MAX_DEPTH);
                goto out;
        }
        for (;;) {
                yaml_event_t iev;
                r = cfg_next(c, &iev);
                if (r < 0)
                        goto out;
                if (iev.type == YAML_SEQUENCE_END_EVENT) {
                        yaml_event_delete(&iev);
                        break;
                }
                size_t saved = c->pathlen;
                cfg_path_push(c, "[%d]", n);
                r = fn(c, n, &iev, arg);
                yaml_event_delete(&iev);
                if (r < 0)
                        goto out;
                cfg_path_pop(c, saved);
                if (n < INT_MAX)
                        n++;
        }
        *ret_n = n;
out:
        c->depth--;
        return r;
}

int parse_listen(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        char tmp[sizeof(((gp_config *)0)->listen)], d[96];
        const char *why;
        memset(tmp, 0, sizeof(tmp));
        int r = cfg_scalar_str(c, ev, tmp, sizeof(tmp), 1);
        if (r < 0)
                return r;
        if (check_listen(tmp, &why) < 0)
                return cfg_fail(c, cfg_ev_line(ev), "%s; got \"%s\"", why, cfg_show(tmp, strlen(tmp), d, sizeof(d)));
        memcpy((char *)base + f->off, tmp, sizeof(tmp));
        return 0;
}

/* A key hash belongs to one owner: the admin keys or one tenant.  Refuses
 * `hash`, met at the current line, if an owner read before (the admin keys,
 * or tenants[0..n_tenants) other than `self`) has it; the message names
 * that owner and its line. */
int key_owned_already(struct ctx *c, const char *hash, int self, int line) {
        const gp_config *cfg = c->cfg;
        for (int j = 0; j < cfg->n_admin_keys; j++)
                if (!strcmp(cfg->admin_keys[j], hash))
                        return cfg_fail(c, line, "this key hash is already an admin key (auth.admin_keys[%d], line %d); "
                                    "a key belongs to one owner", j, c->refs.admin_key[j]);
        int nt = self >= 0 ? self : cfg->n_tenants;
        for (int t = 0; t < nt; t++)
                for (int k = 0; k < cfg->tenants[t].n_keys; k++)
                        if (!strcmp(cfg->tenants[t].keys[k], hash))
                                return cfg_fail(c, line, "this key hash is already given to tenant \"%s\" "
                                            "(tenants[%d].keys[%d], line %d); a key belongs to one owner",
                                            cfg->tenants[t].id, t, k, c->refs.tenant_key[t][k]);
        return 0;
}

static int admin_key_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        gp_config *cfg = arg;
        char tmp[sizeof(cfg->admin_keys[0])];
        memset(tmp, 0, sizeof(tmp));
        if (i >= GP_CFG_MAX_ADMIN_KEYS)
                return cfg_fail(c, cfg_ev_line(ev), "too many admin keys (at most %d)", GP_CFG_MAX_ADMIN_KEYS);
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev) ||
            !gp_key_hash_parse((const char *)ev->data.scalar.value, ev->data.scalar.length, tmp))
                return cfg_fail(c, cfg_ev_line(ev),
                            "expected \"sha256:\" and 64 lowercase hex digits, the SHA-256 of the key "
                            "(not the key itself; e.g. printf %%s KEY | sha256sum, or gpupool key create --admin)");
        for (int j = 0; j < i; j++)
                if (!strcmp(cfg->admin_keys[j], tmp))
                        return cfg_fail(c, cfg_ev_line(ev), "the same key hash is listed twice (items %d and %d)",
                                    j, i);
        int r = key_owned_already(c, tmp, -1, cfg_ev_line(ev));
        if (r < 0)
                return r;
        memcpy(cfg->admin_keys[i], tmp, sizeof(tmp));
        c->refs.admin_key[i] = cfg_ev_line(ev);
        return 0;
}

/* cluster.join_tokens[]: hashes only, like admin keys (a join token is a
 * secret; the server never stores one in clear). */
static int join_token_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        gp_config *cfg = arg;
        char tmp[sizeof(cfg->join_tokens[0])];
        memset(tmp, 0, sizeof(tmp));
        if (i >= GP_CFG_MAX_JOIN_TOKENS)
                return cfg_fail(c, cfg_ev_line(ev), "too many join tokens (at most %d)", GP_CFG_MAX_JOIN_TOKENS);
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev) ||
            !gp_key_hash_parse((const char *)ev->data.scalar.value, ev->data.scalar.length, tmp))
                return cfg_fail(c, cfg_ev_line(ev),
                            "expected \"sha256:\" and 64 lowercase hex digits, the SHA-256 of the join token "
                            "(not the token itself; e.g. printf %%s gpj_... | sha256sum)");
        for (int j = 0; j < i; j++)
                if (!strcmp(cfg->join_tokens[j], tmp))
                        return cfg_fail(c, cfg_ev_line(ev), "the same token hash is listed twice (items %d and %d)", j, i);
        memcpy(cfg->join_tokens[i], tmp, sizeof(tmp));
        return 0;
}

/* node.name: "" = the host name at run time; else what the agent protocol
 * accepts (cluster/proto.h gp_proto_node_name_ok: the same rule). */
int parse_node_name(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_config *cfg = base;
        char tmp[sizeof(cfg->node_name) + 1], d[96];
        memset(tmp, 0, sizeof(tmp));
        if (ev->type == YAML_SCALAR_EVENT && ev->data.scalar.length >= sizeof(cfg->node_name))
                return cfg_fail(c, cfg_ev_line(ev), "a node name is at most %zu bytes", sizeof(cfg->node_name) - 1);
        int r = cfg_scalar_str(c, ev, tmp, sizeof(tmp), 0);
        if (r < 0)
                return r;
        size_t n = strlen(tmp);
        if (n > 0 && (!gp_id_ok(tmp, n) || !strcmp(tmp, "local")))
                return cfg_fail(c, cfg_ev_line(ev), "%s is not a node name (1..%zu of [A-Za-z0-9._-], not \"local\"; "
                            "\"\" = the host name)", cfg_show(tmp, n, d, sizeof(d)), sizeof(cfg->node_name) - 1);
        memcpy(cfg->node_name, tmp, sizeof(cfg->node_name));
        return 0;
}

/* node.labels: a mapping of key: value, kept in canonical form. */
int parse_node_labels(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_config *cfg = base;
        char flat[GP_LABELS_N * (2 * GP_LABEL_PART_MAX + 2) + 1], canon[sizeof(cfg->node_labels)], d[96], why[200];
        size_t o = 0;
        int n = 0, r;
        flat[0] = '\0';
        memset(canon, 0, sizeof(canon));
        if (cfg_is_null(ev)) {
                cfg->node_labels[0] = '\0';
                return 0;
        }
        if (ev->type != YAML_MAPPING_START_EVENT)
                return cfg_fail(c, cfg_ev_line(ev), "expected a mapping of labels {key: value}, got %s",
                            cfg_describe(ev, d, sizeof(d)));
        for (;;) {
                yaml_event_t kev, vev;
                if ((r = cfg_next(c, &kev)) < 0)
                        return r;
                if (kev.type == YAML_MAPPING_END_EVENT) {
                        yaml_event_delete(&kev);
                        break;
                }
                int line = cfg_ev_line(&kev);
                if (kev.type != YAML_SCALAR_EVENT) {
                        yaml_event_delete(&kev);
                        return cfg_fail(c, line, "expected a label key");
                }
                const char *k = (const char *)kev.data.scalar.value;
                size_t kn = kev.data.scalar.length;
                if (!gp_label_key_ok(k, kn)) {
                        r = cfg_fail(c, line, "label key %s: 1..%d of [A-Za-z0-9._/-]", cfg_show(k, kn, d, sizeof(d)),
                                 GP_LABEL_PART_MAX);
                        yaml_event_delete(&kev);
                        return r;
                }
                if ((r = cfg_next(c, &vev)) < 0) {
                        yaml_event_delete(&kev);
                        return r;
                }
                const char *v = (const char *)vev.data.scalar.value;
                size_t vn = vev.type == YAML_SCALAR_EVENT ? vev.data.scalar.length : 0;
                if (vev.type != YAML_SCALAR_EVENT || !gp_label_value_ok(v, vn) || ++n > GP_LABELS_N) {
                        if (n > GP_LABELS_N)
                                r = cfg_fail(c, line, "more than %d labels", GP_LABELS_N);
                        else
                                r = cfg_fail(c, line, "label %s: the value must be 0..%d of [A-Za-z0-9._/-]",
                                         cfg_show(k, kn, d, sizeof(d)), GP_LABEL_PART_MAX);
                        yaml_event_delete(&kev);
                        yaml_event_delete(&vev);
                        return r;
                }
                o += (size_t)snprintf(flat + o, sizeof(flat) - o, "%s%.*s=%.*s", o ? "," : "", (int)kn, k, (int)vn,
                                      v);
                yaml_event_delete(&kev);
                yaml_event_delete(&vev);
        }
        if (gp_labels_canon(flat, canon, sizeof(canon), why, sizeof(why)) < 0)
                return cfg_fail(c, c->key_line, "%s", why);
        memcpy(cfg->node_labels, canon, sizeof(canon));
        return 0;
}

int parse_store_url(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_config *cfg = base;
        char tmp[sizeof(cfg->store_url)], d[96];
        memset(tmp, 0, sizeof(tmp));
        int r = cfg_scalar_str(c, ev, tmp, sizeof(tmp), 1);
        if (r < 0)
                return r;
        if (!store_url_ok(tmp)) {
                /* cfg_show only the scheme: the rest may hold a password */
                const char *sep = strstr(tmp, "://");
                size_t n = sep ? (size_t)(sep - tmp) + 3 : 0;
                return cfg_fail(c, cfg_ev_line(ev),
                            "expected sqlite://PATH, postgres://... or postgresql://...; got \"%s...\"",
                            cfg_show(tmp, n, d, sizeof(d)));
        }
        memcpy(cfg->store_url, tmp, sizeof(tmp));
        c->store_url_set = true;
        return 0;
}

int parse_store_sync(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        size_t i;
        int r = cfg_scalar_enum(c, ev, cfg_sync_names, GP_ARRAY_SIZE(cfg_sync_names), &i);
        if (r == 0)
                ((gp_config *)base)->store_sync_full = i == 0;
        return r;
}

int parse_tls_plaintext(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        size_t i;
        int r = cfg_scalar_enum(c, ev, plaintext_names, GP_ARRAY_SIZE(plaintext_names), &i);
        if (r == 0)
                ((gp_config *)base)->tls_plaintext_any = i == 1;
        return r;
}

/* server.tls.sans[]: a host name or an IP address, as a certificate names it. */
static int tls_san_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        gp_config *cfg = arg;
        char d[96];
        if (i >= GP_CFG_MAX_TLS_SANS)
                return cfg_fail(c, cfg_ev_line(ev), "too many names (at most %d)", GP_CFG_MAX_TLS_SANS);
        const char *v = (const char *)ev->data.scalar.value;
        size_t n = ev->type == YAML_SCALAR_EVENT ? ev->data.scalar.length : 0;
        bool ok = ev->type == YAML_SCALAR_EVENT && !cfg_is_null(ev) && n > 0 && n < GP_CFG_TLS_SAN_MAX;
        for (size_t k = 0; ok && k < n; k++)
                ok = (v[k] >= 'a' && v[k] <= 'z') || (v[k] >= 'A' && v[k] <= 'Z') || (v[k] >= '0' && v[k] <= '9') ||
                     v[k] == '.' || v[k] == '-' || v[k] == ':' || v[k] == '*';
        if (!ok)
                return cfg_fail(c, cfg_ev_line(ev), "expected a host name or an IP address (at most %d bytes) such as "
                            "\"gpupool.example.com\" or \"10.0.0.5\", got %s", GP_CFG_TLS_SAN_MAX - 1,
                            cfg_describe(ev, d, sizeof(d)));
        memset(cfg->tls_sans[i], 0, sizeof(cfg->tls_sans[i]));
        memcpy(cfg->tls_sans[i], v, n);
        return 0;
}

int parse_backend(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_config *cfg = base;
        size_t i;
        int r = cfg_scalar_enum(c, ev, cfg_backend_names, GP_ARRAY_SIZE(cfg_backend_names), &i);
        if (r == 0) {
                memset(cfg->gpu_backend, 0, sizeof(cfg->gpu_backend));
                gp_strlcpy(cfg->gpu_backend, cfg_backend_names[i], sizeof(cfg->gpu_backend));
        }
        return r;
}

/* Signals an elastic task may be told about a new GPU set with: catchable
 * ones whose default action the supervisor does not need. */
static const char *const signal_names[] = {"SIGUSR1", "SIGUSR2", "SIGHUP", "SIGWINCH", "SIGURG", "SIGCONT"};
static const int signal_numbers[] = {SIGUSR1, SIGUSR2, SIGHUP, SIGWINCH, SIGURG, SIGCONT};

int parse_signal(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        size_t i;
        int r = cfg_scalar_enum(c, ev, signal_names, GP_ARRAY_SIZE(signal_names), &i);
        if (r == 0)
                ((gp_config *)base)->elastic_signal = signal_numbers[i];
        return r;
}

/* The policies the daemon runs, by name from the core's table. */
size_t daemon_policies(const char *names[GP_SCHED_NPOLICIES], gp_sched_policy pols[GP_SCHED_NPOLICIES]) {
        size_t n = 0;
        for (int p = 0; p < GP_SCHED_NPOLICIES; p++)
                if (gp_sched_policy_daemon((gp_sched_policy)p)) {
                        pols[n] = (gp_sched_policy)p;
                        names[n++] = gp_sched_policy_name((gp_sched_policy)p);
                }
        return n;
}

int parse_policy(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        const char *names[GP_SCHED_NPOLICIES];
        gp_sched_policy pols[GP_SCHED_NPOLICIES];
        size_t i, n = daemon_policies(names, pols);
        int r = cfg_scalar_enum(c, ev, names, n, &i);
        if (r == 0)
                ((gp_config *)base)->policy = pols[i];
        return r;
}

int parse_placement(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        const char *names[GP_PLACE_N];
        for (int p = 0; p < GP_PLACE_N; p++)
                names[p] = gp_sched_placement_name((gp_sched_placement)p);
        size_t i;
        int r = cfg_scalar_enum(c, ev, names, GP_PLACE_N, &i);
        if (r == 0)
                ((gp_config *)base)->placement = (gp_sched_placement)i;
        return r;
}

/* An item of a list of GPUs (gpus.reserved, gpus.mps_gpus): an index or
 * a uuid, each once, at most GP_CFG_MAX_RESERVED. */
static int gpu_item(struct ctx *c, int i, const yaml_event_t *ev, char (*list)[GP_UUID_MAX], const char *what) {
        char tmp[GP_UUID_MAX], d[96];
        if (i >= GP_CFG_MAX_RESERVED)
                return cfg_fail(c, cfg_ev_line(ev), "too many %s GPUs (at most %d)", what, GP_CFG_MAX_RESERVED);
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev))
                return cfg_fail(c, cfg_ev_line(ev), "expected a GPU index or uuid, got %s",
                            cfg_describe(ev, d, sizeof(d)));
        const char *v = (const char *)ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        if (n >= sizeof(tmp))
                return cfg_fail(c, cfg_ev_line(ev), "too long (%zu bytes, at most %d)", n, GP_UUID_MAX - 1);
        if (!reserved_ok(v, n))
                return cfg_fail(c, cfg_ev_line(ev),
                            "expected a GPU index (0..%d) or a GPU uuid without spaces, got %s",
                            MAX_GPU_INDEX, cfg_describe(ev, d, sizeof(d)));
        memset(tmp, 0, sizeof(tmp));
        memcpy(tmp, v, n);
        for (int j = 0; j < i; j++)
                if (!strcmp(list[j], tmp))
                        return cfg_fail(c, cfg_ev_line(ev), "GPU \"%s\" is listed twice", tmp);
        memcpy(list[i], tmp, sizeof(tmp));
        return 0;
}

static int reserved_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        return gpu_item(c, i, ev, ((gp_config *)arg)->reserved, "reserved");
}

static int mps_gpu_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        return gpu_item(c, i, ev, ((gp_config *)arg)->mps_gpus, "MPS");
}

/* gpus.sharing: how shared tasks (memory_mb) share a GPU. */
int parse_sharing(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        static const char *const names[] = {"watchdog", "mps"};
        size_t i;
        (void)f;
        int r = cfg_scalar_enum(c, ev, names, 2, &i);
        if (r == 0)
                ((gp_config *)base)->gpu_mps = i == 1;
        return r;
}

static int origin_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        gp_config *cfg = arg;
        char tmp[GP_ORIGIN_MAX], d[96];
        const char *why;
        if (i >= GP_MAX_ALLOWED_ORIGINS)
                return cfg_fail(c, cfg_ev_line(ev), "too many origins (at most %d)", GP_MAX_ALLOWED_ORIGINS);
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev))
                return cfg_fail(c, cfg_ev_line(ev), "expected an origin such as \"https://ui.example.com\", got %s",
                            cfg_describe(ev, d, sizeof(d)));
        const char *v = (const char *)ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        if (n >= sizeof(tmp))
                return cfg_fail(c, cfg_ev_line(ev), "too long (%zu bytes, at most %d)", n, GP_ORIGIN_MAX - 1);
        memset(tmp, 0, sizeof(tmp));
        memcpy(tmp, v, n);
        if (strlen(tmp) != n || !gp_browser_origin_ok(tmp, &why))
                return cfg_fail(c, cfg_ev_line(ev), "%s; expected SCHEME://HOST[:PORT] such as \"https://ui.example.com\", "
                            "got %s", strlen(tmp) != n ? "contains a NUL" : why, cfg_describe(ev, d, sizeof(d)));
        for (int j = 0; j < i; j++)
                if (!strcasecmp(cfg->allowed_origins[j], tmp))
                        return cfg_fail(c, cfg_ev_line(ev), "origin \"%s\" is listed twice", tmp);
        memcpy(cfg->allowed_origins[i], tmp, sizeof(tmp));
        return 0;
}

static void sim_init(struct ctx *c, void *item) {
        ((gp_cfg_sim_gpu *)item)->count = 1;
}

static int sim_done(struct ctx *c, void *owner, void *item, int i, int line) {
        gp_cfg_sim_gpu *s = item;
        if (!s->name[0])
                return cfg_fail(c, line, "missing name");
        if (s->memory_mb <= 0)
                return cfg_fail(c, line, "missing memory_mb");
        return 0;
}

int weight_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        uint32_t *w = arg;
        int64_t x;
        int r = cfg_scalar_int(c, ev, 1, WEIGHT_MAX, &x);
        if (r == 0 && i < GP_PRIORITY_LEVELS)
                w[i] = (uint32_t)x;
        return r;
}

/* The 10 tier weights of a list (scheduler.weights, time_rules[].weights)
 * into w; w untouched on failure. */
int cfg_read_weights(struct ctx *c, const yaml_event_t *ev, uint32_t w[GP_PRIORITY_LEVELS]) {
        uint32_t tmp[GP_PRIORITY_LEVELS];
        char d[96];
        int n, r;
        if (ev->type != YAML_SEQUENCE_START_EVENT)
                return cfg_fail(c, c->key_line, "expected a list of %d positive integers (P0..P9), got %s",
                            GP_PRIORITY_LEVELS, cfg_describe(ev, d, sizeof(d)));
        r = cfg_parse_list(c, ev, "a list", weight_item, tmp, &n);
        if (r < 0)
                return r;
        if (n != GP_PRIORITY_LEVELS)
                return cfg_fail(c, c->key_line, "expected a list of %d positive integers (P0..P9), got %d",
                            GP_PRIORITY_LEVELS, n);
        memcpy(w, tmp, sizeof(tmp));
        return 0;
}

int parse_weights(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_config *cfg = base;
        return cfg_read_weights(c, ev, cfg->weights);
}

/* ---- lists: one table, one walker ---- */

/* Every list key of the schema (a K_CUSTOM row whose fn is parse_items):
 * where its items and their count live in the owner (the struct the row's
 * offset is relative to), and how an item is read.  A list of mappings
 * (size > 0) has its items checked to be mappings within the row's max,
 * zeroed, given their defaults (init), read by the schema rows under
 * item_prefix and checked as a whole (done); a heap list (cap_off) grows
 * with gp_vec_grow.  A list of scalars hands each item to `scalar`.
 * Adding a list = one row here + its rows in cfg_fields[]. */
struct list_def {
        const char *key;         /* the cfg_fields[] key */
        const char *expected;    /* "expected EXPECTED, got ..." for a value that is not a list */
        size_t n_off;            /* the int count in the owner */
        item_fn scalar;          /* a list of scalars: reads item i into the owner */
        size_t size;             /* a list of mappings: one item */
        size_t cap_off;          /* heap lists: the size_t capacity in the owner (the row's member is the pointer) */
        const char *item_prefix; /* schema key of an item, default KEY "[]" */
        const char *what;        /* "too many WHAT (at most MAX)" */
        const char *shape;       /* "expected a mapping SHAPE, got ..." ("" = none) */
        void (*init)(struct ctx *c, void *item);
        int (*done)(struct ctx *c, void *owner, void *item, int i, int line);
        void (*after)(void *owner); /* once the list was read */
};

/* a list of scalars: item_fn reads item i into the owner */
#define SCALARS(k, exp, type, n, fn) {.key = k, .expected = exp, .n_off = offsetof(type, n), .scalar = fn}
/* a list of mappings in a fixed array (the row's member) */
#define MAPPINGS(k, exp, type, n, item, wh, sh, in, dn) \
        {.key = k, .expected = exp, .n_off = offsetof(type, n), .size = sizeof(item), .what = wh, .shape = sh, \
         .init = in, .done = dn}
/* a list of mappings on the heap (the row's member points to it) */
#define HEAP_MAPPINGS(k, exp, type, n, cap, item, wh, sh, in, dn) \
        {.key = k, .expected = exp, .n_off = offsetof(type, n), .size = sizeof(item), .cap_off = offsetof(type, cap), \
         .what = wh, .shape = sh, .init = in, .done = dn}
#define BILLING(k, n, item, in, dn) \
        {.key = k, .expected = "a list of mappings", .n_off = offsetof(gp_config, billing.n), .size = sizeof(item), \
         .what = "entries", .shape = "", .init = in, .done = dn, .after = bill_after}

static const struct list_def lists[] = {
        SCALARS("server.allowed_origins", "a list of origins such as \"https://ui.example.com\"", gp_config,
                n_allowed_origins, origin_item),
        SCALARS("server.tls.sans", "a list of host names and IP addresses", gp_config, n_tls_sans, tls_san_item),
        SCALARS("auth.admin_keys", "a list of \"sha256:<hex>\" strings", gp_config, n_admin_keys, admin_key_item),
        SCALARS("cluster.join_tokens", "a list of \"sha256:<hex>\" strings", gp_config, n_join_tokens,
                join_token_item),
        SCALARS("gpus.reserved", "a list of GPU indexes or uuids", gp_config, n_reserved, reserved_item),
        SCALARS("gpus.mps_gpus", "a list of GPU indexes or uuids", gp_config, n_mps_gpus, mps_gpu_item),
        MAPPINGS("gpus.sim", "a list of {name, memory_mb, count}", gp_config, n_sim, gp_cfg_sim_gpu,
                 "simulated GPU kinds", "{name, memory_mb, count}", sim_init, sim_done),
        MAPPINGS("alerts.rules", "a list of {name, when, for_s, clear_s, severity}", gp_config, n_alert_rules,
                 gp_cfg_alert_rule, "alert rules", "{name, when, for_s, clear_s, severity}", rule_init, rule_done),
        HEAP_MAPPINGS("tenants", "a list of tenants {id, keys, max_priority, default_priority, weight, quota}",
                      gp_config, n_tenants, cap_tenants, gp_cfg_tenant, "tenants", "{id, keys, max_priority, quota, ...}",
                      tenant_init, tenant_done),
        SCALARS("tenants[].keys", "a list of \"sha256:<hex>\" strings", gp_cfg_tenant, n_keys, tenant_key_item),
        MAPPINGS("groups", "a list of {name, share_pct}", gp_config, n_groups, gp_cfg_group, "groups",
                 "{name, share_pct}", NULL, group_done),
        HEAP_MAPPINGS("time_rules", "a list of {name, start, end, tz, weights, groups, quotas}", gp_config,
                      n_time_rules, cap_time_rules, gp_cfg_time_rule, "time rules",
                      "{name, start, end, tz, weights, groups, quotas}", time_rule_init, time_rule_done),
        {.key = "time_rules[].groups", .expected = "a list of {name, share_pct}",
         .n_off = offsetof(gp_cfg_time_rule, n_groups), .size = sizeof(gp_cfg_group), .item_prefix = "groups[]",
         .what = "groups", .shape = "{name, share_pct}", .done = rule_group_done},
        HEAP_MAPPINGS("gateway.models", "a list of models {name, context, upstreams, serve}", gp_config, gw.n_models,
                      gw.cap_models, gp_cfg_model, "models", "{name, context, upstreams, serve}", model_init,
                      model_done),
        SCALARS("gateway.models[].upstreams", "a list of \"http://HOST:PORT\" URLs", gp_cfg_model, n_upstreams,
                upstream_item),
        SCALARS("gateway.models[].serve.command", "a list of strings (the argv of the model server)", gp_cfg_serve,
                n_command, serve_arg_item),
        BILLING("billing.prices", n_gpu, gp_bill_gpu_price, bill_gpu_init, bill_gpu_done),
        BILLING("billing.token_prices", n_tokens, gp_bill_token_price, bill_token_init, bill_token_done),
        BILLING("billing.volume_discounts", n_tiers, gp_bill_tier, bill_tier_init, bill_tier_done),
        BILLING("billing.time_windows", n_windows, gp_bill_window, bill_window_init, bill_window_done),
};

struct items {
        const struct list_def *l;
        const struct field *f;
        void *owner;
        char prefix[64];
};

/* Room for item i: the array itself, or the heap array grown. */
static void *item_slot(struct ctx *c, struct items *it, int i, int line) {
        const struct list_def *l = it->l;
        char *owner = it->owner;
        if (!l->cap_off)
                return owner + it->f->off + (size_t)i * l->size;
        void *arr;
        memcpy(&arr, owner + it->f->off, sizeof(arr));
        void *p = gp_vec_grow(arr, (size_t *)(void *)(owner + l->cap_off), (size_t)i + 1, l->size, 4);
        if (!p) {
                cfg_fail(c, line, "out of memory");
                return NULL;
        }
        memcpy(owner + it->f->off, &p, sizeof(p));
        return (char *)p + (size_t)i * l->size;
}

static int map_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        struct items *it = arg;
        const struct list_def *l = it->l;
        char d[96];
        int line = cfg_ev_line(ev);
        if (i >= it->f->max)
                return cfg_fail(c, line, "too many %s (at most %lld)", l->what, (long long)it->f->max);
        if (ev->type != YAML_MAPPING_START_EVENT)
                return cfg_fail(c, line, "expected a mapping%s%s, got %s", *l->shape ? " " : "", l->shape,
                            cfg_describe(ev, d, sizeof(d)));
        void *item = item_slot(c, it, i, line);
        if (!item)
                return -ENOMEM;
        memset(item, 0, l->size);
        if (l->init)
                l->init(c, item);
        int r = cfg_parse_map(c, it->prefix, item);
        if (r < 0)
                return r;
        return l->done ? l->done(c, it->owner, item, i, line) : 0;
}

int parse_items(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        struct items it = {NULL, f, base, ""};
        for (size_t i = 0; i < GP_ARRAY_SIZE(lists) && !it.l; i++)
                if (!strcmp(lists[i].key, f->key))
                        it.l = &lists[i];
        if (!it.l)
                return cfg_fail(c, cfg_ev_line(ev), "not a list of the schema");
        int *count = (int *)(void *)((char *)base + it.l->n_off), n = 0, r;
        if (it.l->item_prefix)
                gp_strlcpy(it.prefix, it.l->item_prefix, sizeof(it.prefix));
        else
                snprintf(it.prefix, sizeof(it.prefix), "%s[]", f->key);
        *count = 0;
        if (it.l->scalar)
                r = cfg_parse_list(c, ev, it.l->expected, it.l->scalar, base, &n);
        else
                r = cfg_parse_list(c, ev, it.l->expected, map_item, &it, &n);
        if (r < 0)
                return r;
        *count = n;
        if (it.l->after)
                it.l->after(base);
        return 0;
}

/* Free the heap lists of cfg (those with a cap_off in lists[] whose
 * owner is gp_config itself). */
void gp_config_free(gp_config *cfg) {
        if (!cfg)
                return;
        free(cfg->tenants);
        free(cfg->time_rules);
        free(cfg->gw.models);
        cfg->tenants = NULL;
        cfg->time_rules = NULL;
        cfg->gw.models = NULL;
        cfg->n_tenants = cfg->n_time_rules = cfg->gw.n_models = 0;
        cfg->cap_tenants = cfg->cap_time_rules = cfg->gw.cap_models = 0;
}

static void *dup_items(const void *items, int n, size_t size, size_t *cap) {
        *cap = 0;
        if (n <= 0 || !items)
                return NULL;
        void *p = malloc((size_t)n * size);
        if (p) {
                memcpy(p, items, (size_t)n * size);
                *cap = (size_t)n;
        }
        return p;
}

int gp_config_copy(gp_config *dst, const gp_config *src) {
        gp_config t = *src;
        t.tenants = dup_items(src->tenants, src->n_tenants, sizeof(*src->tenants), &t.cap_tenants);
        t.time_rules = dup_items(src->time_rules, src->n_time_rules, sizeof(*src->time_rules), &t.cap_time_rules);
        t.gw.models = dup_items(src->gw.models, src->gw.n_models, sizeof(*src->gw.models), &t.gw.cap_models);
        if ((src->n_tenants > 0 && !t.tenants) || (src->n_time_rules > 0 && !t.time_rules) ||
            (src->gw.n_models > 0 && !t.gw.models)) {
                gp_config_free(&t);
                return -ENOMEM;
        }
        *dst = t;
        return 0;
}


static int check_syntax(struct ctx *c) {
        int depth = 0, docs = 0;
        for (;;) {
                yaml_event_t ev;
                if (!yaml_parser_parse(&c->parser, &ev))
                        return syntax_error(c);
                yaml_event_type_t t = ev.type;
                int line = cfg_ev_line(&ev);
                yaml_event_delete(&ev);
                if (t == YAML_STREAM_END_EVENT)
                        return 0;
                if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1)
                        return cfg_fail(c, line, "only one YAML document is allowed (found a second \"---\")");
                if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
                        if (++depth > MAX_DEPTH)
                                return cfg_fail(c, line, "nested too deeply (more than %d levels)",
                                            MAX_DEPTH);
                } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
                        depth--;
                }
        }
}

/* The document: empty, null, or one mapping of sections. */
int parse_stream(struct ctx *c) {
        yaml_event_t ev;
        char d[96], list[256];
        int r = cfg_next(c, &ev); /* stream start */
        if (r < 0)
                return r;
        yaml_event_delete(&ev);
        r = cfg_next(c, &ev);
        if (r < 0)
                return r;
        if (ev.type == YAML_STREAM_END_EVENT) { /* empty file or only comments */
                yaml_event_delete(&ev);
                return 0;
        }
        yaml_event_delete(&ev); /* document start */
        r = cfg_next(c, &ev);
        if (r < 0)
                return r;
        if (ev.type == YAML_MAPPING_START_EVENT) {
                c->key_line = cfg_ev_line(&ev);
                r = cfg_parse_map(c, "", c->cfg);
        } else if (!cfg_is_null(&ev)) {
                valid_keys("", list, sizeof(list));
                r = cfg_fail(c, cfg_ev_line(&ev), "expected a mapping of sections (%s) at the top level, got %s",
                         list, cfg_describe(&ev, d, sizeof(d)));
        }
        yaml_event_delete(&ev);
        if (r < 0)
                return r;
        r = cfg_next(c, &ev); /* document end */
        if (r < 0)
                return r;
        yaml_event_delete(&ev);
        r = cfg_next(c, &ev);
        if (r < 0)
                return r;
        if (ev.type != YAML_STREAM_END_EVENT)
                r = cfg_fail(c, cfg_ev_line(&ev), "only one YAML document is allowed (found a second \"---\")");
        yaml_event_delete(&ev);
        return r;
}

/* ---- loading ---- */

__attribute__((format(printf, 4, 5))) static int file_fail(char *err, size_t errlen, const char *name,
                                                          const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        cfg_vmsg(err, errlen, name, 0, NULL, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

int gp_config_load_buffer(const char *name, const char *data, size_t len, gp_config *cfg, char *err,
                          size_t errlen) {
        struct ctx *c = NULL;
        gp_config *tmp = NULL;
        int r;
        if (err && errlen)
                err[0] = '\0';
        if (!name)
                name = "(config)";
        if (!data && len) {
                file_fail(err, errlen, name, "no data");
                return -EINVAL;
        }
        if (len > CFG_MAX_INPUT) {
                file_fail(err, errlen, name, "larger than 1 MiB (%zu bytes)", len);
                return -E2BIG;
        }
        if (strlen(name) >= sizeof(cfg->source)) {
                file_fail(err, errlen, "(config)", "file name too long");
                return -ENAMETOOLONG;
        }
        tmp = malloc(sizeof(*tmp));
        c = calloc(1, sizeof(*c));
        if (!tmp || !c) {
                file_fail(err, errlen, name, "out of memory");
                r = -ENOMEM;
                goto free_mem;
        }
        gp_config_defaults(tmp);
        memcpy(tmp->source, name, strlen(name)); /* fits: checked above; rest is zero */
        c->name = name;
        c->data = data;
        c->len = len;
        c->err = err;
        c->errlen = errlen;
        c->cfg = tmp;
        if (!yaml_parser_initialize(&c->parser)) {
                file_fail(err, errlen, name, "out of memory");
                r = -ENOMEM;
                goto free_mem;
        }
        yaml_parser_set_input_string(&c->parser, (const unsigned char *)(data ? data : ""), len);
        r = check_syntax(c);
        yaml_parser_delete(&c->parser);
        if (r < 0)
                goto free_mem;
        if (!yaml_parser_initialize(&c->parser)) {
                file_fail(err, errlen, name, "out of memory");
                r = -ENOMEM;
                goto free_mem;
        }
        yaml_parser_set_input_string(&c->parser, (const unsigned char *)(data ? data : ""), len);
        r = parse_stream(c);
        yaml_parser_delete(&c->parser);
        if (r < 0)
                goto free_mem;

        if (!c->store_url_set) {
                int dl = c->line[field_index("server.data_dir")];
                if (derive_store_url(tmp->data_dir, tmp->store_url, sizeof(tmp->store_url)) < 0) {
                        c->pathlen = 0;
                        gp_strlcpy(c->path, "server.data_dir", sizeof(c->path));
                        r = cfg_fail(c, dl, "too long to derive store.url from it; set store.url");
                        goto free_mem;
                }
        }
        if (!c->line[field_index("cluster.fence_s")] && tmp->fence_s < tmp->node_timeout_s)
                tmp->fence_s = tmp->node_timeout_s; /* the default follows a long node_timeout_s */
        r = validate_impl(tmp, c->line, err, errlen);
        if (r == 0)
                r = check_refs(tmp, &c->refs, err, errlen);
        if (r < 0)
                goto free_mem;
        memcpy(cfg, tmp, sizeof(*tmp)); /* cfg owns tmp's lists from now on */
        if (err && errlen)
                err[0] = '\0';
        free(c);
        free(tmp);
        return 0;
free_mem:
        if (tmp)
                gp_config_free(tmp);
        free(c);
        free(tmp);
        return r;
}

/* Read at most CFG_MAX_INPUT bytes of a file.  0, -errno, -E2BIG or -ENOMEM. */
static int read_file(const char *path, gp_buf *b) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        int r = 0;
        struct stat st;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                goto close_fd;
        }
        if (S_ISDIR(st.st_mode)) {
                r = -EISDIR;
                goto close_fd;
        }
        for (;;) {
                char chunk[65536];
                ssize_t n = read(fd, chunk, sizeof(chunk));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        goto close_fd;
                }
                if (n == 0)
                        break;
                r = gp_buf_append(b, chunk, (size_t)n);
                if (r < 0)
                        goto close_fd;
        }
close_fd:
        close(fd);
        return r;
}

int gp_config_load(const char *path, gp_config *cfg, char *err, size_t errlen) {
        gp_buf b;
        if (err && errlen)
                err[0] = '\0';
        if (!path || !*path)
                return file_fail(err, errlen, "(config)", "no file name given");
        gp_buf_init(&b, CFG_MAX_INPUT);
        int r = read_file(path, &b);
        if (r == -E2BIG)
                file_fail(err, errlen, path, "larger than 1 MiB");
        else if (r < 0)
                file_fail(err, errlen, path, "cannot read: %s", strerror(-r));
        else
                r = gp_config_load_buffer(path, b.data, b.len, cfg, err, errlen);
        gp_buf_done(&b);
        return r;
}
