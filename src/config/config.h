/* config.h - gpupool configuration: defaults, YAML loading, validation.
 *
 * gp_config_defaults() gives the embedded default (DESIGN.md "Config"): every
 * key has a default, so an empty file or no file is a valid config.
 * gp_config_load() overlays a YAML file on the defaults and refuses a bad
 * file with a message naming FILE:LINE and the dotted key.
 * The big lists (tenants, time_rules, gateway.models) are heap arrays the
 * config owns (gp_config_free, gp_config_copy), sized to what the file
 * gives; GP_CFG_MAX_* stay the limits a file may reach.
 * Plain data; no threads.  Lives in config/ (above base/, beside core/).
 */
#ifndef GP_CONFIG_CONFIG_H
#define GP_CONFIG_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/browser.h"
#include "base/user.h"
#include "core/billing.h"
#include "core/quota.h"
#include "core/sched.h"
#include "core/task.h"

#define GP_CFG_MAX_SIM 16        /* entries in gpus.sim */
#define GP_CFG_MAX_RESERVED 64   /* entries in gpus.reserved */
#define GP_CFG_MAX_ADMIN_KEYS 16
#define GP_CFG_MAX_JOIN_TOKENS 16  /* entries in cluster.join_tokens */
#define GP_CFG_MAX_TLS_SANS 32     /* entries in server.tls.sans */
#define GP_CFG_TLS_SAN_MAX 254     /* bytes of one of them, with its NUL (a DNS name's 253) */
#define GP_CFG_MAX_ALERT_RULES 64
#define GP_CFG_ALERT_NAME_MAX 64   /* alerts.rules[].name, with the NUL */
#define GP_CFG_ALERT_WHEN_MAX 128  /* alerts.rules[].when, with the NUL */
#define GP_CFG_ALERT_METRIC_MAX 32
#define GP_CFG_WEBHOOK_MAX 1024
#define GP_CFG_MAX_LAS_THRESHOLDS (GP_SCHED_LAS_MAX_LEVELS - 1) /* entries in scheduler.las_thresholds_s: 9 */
/* one of them at most, GPU-seconds: 317 GPU-years, as simulate's --las-thresholds takes */
#define GP_CFG_LAS_MAX_S 10000000000LL


typedef struct gp_cfg_sim_gpu {
        char name[GP_NAME_MAX];   /* e.g. "NVIDIA GeForce RTX 4090" */
        int64_t memory_mb;        /* 1..1048576 */
        int count;                /* 1..64 */
} gp_cfg_sim_gpu;

/* Comparison of an alert rule's `when` ("METRIC OP NUMBER"). */
typedef enum { GP_CMP_GT = 0, GP_CMP_GE, GP_CMP_LT, GP_CMP_LE, GP_CMP_EQ, GP_CMP_NE } gp_cmp;

/* One alert rule (alerts.rules[]).  `when` is kept as written; the loader
 * splits it into metric, op and threshold.  A bare METRIC means
 * "METRIC > 0".  Metrics: see gp_config_alert_metrics. */
typedef struct gp_cfg_alert_rule {
        char name[GP_CFG_ALERT_NAME_MAX];     /* unique; letters, digits, '_', '-', '.' */
        char when[GP_CFG_ALERT_WHEN_MAX];     /* as written */
        char metric[GP_CFG_ALERT_METRIC_MAX]; /* one of gp_config_alert_metrics */
        gp_cmp op;
        double threshold;                     /* finite */
        int for_s;                            /* condition true this long before firing, 0..86400, default 0 */
        int clear_s;                          /* condition false this long before resolving, 0..86400, default 30 */
        char severity[16];                    /* "info" | "warning" (default) | "critical" */
} gp_cfg_alert_rule;

/* The metrics an alert rule may name, NULL-terminated:
 * gpu_unhealthy, gpu_ecc_uncorrected, gpu_temp_c, node_lost,
 * queue_wait_p95_s, util_pct_while_queued, queued_tasks,
 * tenant_quota_used_pct, tenant_balance. */
extern const char *const gp_config_alert_metrics[];

#define GP_CFG_MAX_TENANTS 128
#define GP_CFG_MAX_TENANT_KEYS 8
#define GP_CFG_MAX_GROUPS 16
#define GP_CFG_KEY_HASH_MAX 72        /* "sha256:" + 64 hex + NUL, padded */

/* One tenant (DESIGN.md "Tenant"): keys map to it; its tier and quota. */
typedef struct gp_cfg_tenant {
        char id[GP_TENANT_MAX];              /* letters, digits, '-', '_', '.' */
        char name[GP_NAME_MAX];              /* display name, default = id */
        char kind[16];                       /* "internal" (default) | "external" */
        char group[GP_TENANT_MAX];           /* group it shares with, default = kind */
        char keys[GP_CFG_MAX_TENANT_KEYS][GP_CFG_KEY_HASH_MAX]; /* "sha256:<hex>" */
        int n_keys;
        int max_priority;                    /* most urgent tier its keys may use, default 0 */
        int default_priority;                /* tier when a request names none, default 5 */
        int weight;                          /* fair-share weight inside a tier, default 1 */
        char run_as[GP_USER_NAME_MAX];       /* Unix user its batch tasks run as, "" = the daemon's */
        gp_quota quota;                      /* quota.*: 0 = unlimited (guaranteed_gpus: none) */
        int gw_max_concurrent;               /* gateway.max_concurrent: requests in flight, 0 = unlimited */
        int64_t gw_rpm;                      /* gateway.rpm: requests per minute, 0 = unlimited */
        int64_t gw_tpm;                      /* gateway.tpm: tokens per minute, 0 = unlimited */
} gp_cfg_tenant;

typedef struct gp_cfg_group {
        char name[GP_TENANT_MAX];
        int share_pct;                       /* cluster share, 1..100 */
} gp_cfg_group;

#define GP_CFG_MAX_TIME_RULES 16
#define GP_CFG_MAX_RULE_QUOTAS 32

/* A tenant's quota while a time rule is in force: an overlay whose fields
 * are GP_QUOTA_UNCHANGED (-1) unless the rule gives them
 * (gp_quota_overlay). */
typedef struct gp_cfg_rule_quota {
        char tenant[GP_TENANT_MAX];
        gp_quota quota;
} gp_cfg_rule_quota;

/* Gateway limits of a tenant, or of every tenant of a group, while a time
 * rule is in force: -1 (GP_QUOTA_UNCHANGED) keeps the tenant's own
 * tenants[].gateway value, 0 lifts the limit.  A tenant's own entry wins
 * over its group's. */
#define GP_CFG_MAX_RULE_GW 32
typedef struct gp_cfg_rule_gw {
        char name[GP_TENANT_MAX];            /* a tenant id or a group name */
        int max_concurrent;
        int64_t rpm, tpm;
} gp_cfg_rule_gw;

/* A daily window (time rules in docs/config.md) that swaps weights, group
 * shares, quotas and gateway limits while local time in `tz` is in [start,
 * end) (end <= start wraps midnight: 22:00-06:00). */
typedef struct gp_cfg_time_rule {
        char name[64];
        int start_min, end_min;              /* minutes after local midnight */
        char tz[64];                         /* IANA zone, default "UTC" */
        bool has_weights;
        uint32_t weights[GP_PRIORITY_LEVELS];
        gp_cfg_group groups[GP_CFG_MAX_GROUPS];
        int n_groups;
        gp_cfg_rule_quota quotas[GP_CFG_MAX_RULE_QUOTAS];
        int n_quotas;
        gp_cfg_rule_gw gw[GP_CFG_MAX_RULE_GW];
        int n_gw;
} gp_cfg_time_rule;

#define GP_CFG_MAX_MODELS 16
#define GP_CFG_MAX_UPSTREAMS 8
#define GP_CFG_MODEL_NAME_MAX 128     /* gateway.models[].name, with the NUL */
#define GP_CFG_URL_MAX 256            /* an upstream base URL, with the NUL */
#define GP_CFG_MAX_SERVE_ARGS 32
#define GP_CFG_SERVE_ARG_MAX 256

/* gateway.models[].serve: a model server gpupool runs on its own GPUs. */
typedef struct gp_cfg_serve {
        bool enabled;                        /* the key was given */
        char command[GP_CFG_MAX_SERVE_ARGS][GP_CFG_SERVE_ARG_MAX]; /* argv; "{port}" is substituted */
        int n_command;
        int gpus;                            /* GPUs per replica, default 1 */
        int64_t memory_mb;                   /* per GPU, default 0 = whole GPUs */
        int port;                            /* 0 = auto (a free port), else 1..65535 */
        char ready[GP_CFG_URL_MAX];          /* readiness path, default "/health" */
        int replicas;                        /* default 1 */
        bool autoscale;                      /* autoscale given */
        int autoscale_min, autoscale_max;    /* replicas, 1..16 */
        int autoscale_queue_depth;           /* queued requests per replica that add one, default 8 */
} gp_cfg_serve;

/* gateway.models[]: one model name the OpenAI-compatible gateway serves. */
typedef struct gp_cfg_model {
        char name[GP_CFG_MODEL_NAME_MAX];    /* the "model" of requests; unique */
        int64_t context;                     /* context window in tokens, default 4096 */
        bool tokenize_off;                   /* tokenize: off (default auto: ask the upstream's /tokenize near the limit) */
        char upstreams[GP_CFG_MAX_UPSTREAMS][GP_CFG_URL_MAX]; /* "http://host:port[/prefix]" */
        int n_upstreams;
        gp_cfg_serve serve;
} gp_cfg_model;

/* gateway: (DESIGN.md "Gateway"). 0 in a limit = unlimited. */
typedef struct gp_cfg_gateway {
        int queue_timeout_sec;               /* wait in the admission queue, default 30 */
        int max_queue;                       /* queued requests in all tiers, default 10000 */
        int max_concurrent;                  /* limits.max_concurrent, default 100 */
        int max_rps;                         /* limits.max_rps, default 0 */
        int64_t max_tokens_per_sec;          /* limits.max_tokens_per_sec, default 0 */
        int connect_timeout_ms;              /* upstream connect, default 2000 */
        int idle_timeout_sec;                /* upstream silent this long -> cut, default 60 */
        int request_timeout_sec;             /* one upstream answer, whole, default 600 */
        int64_t max_response_bytes;          /* non-streaming upstream answer, default 16 MiB */
        int max_upstream_connections;        /* kept-alive + active, all upstreams, default 256 */
        int upstream_down_sec;               /* a failed upstream is skipped this long, default 5 */
        int tokenize_timeout_ms;             /* an upstream /tokenize call, whole, default 300 */
        gp_cfg_model *models;                /* n_models (at most GP_CFG_MAX_MODELS), heap, owned */
        int n_models;
        size_t cap_models;
} gp_cfg_gateway;

typedef struct gp_config {
        char source[PATH_MAX];               /* file loaded, "" for the embedded default */

        /* server */
        char listen[128];                    /* "ADDR:PORT", default "0.0.0.0:8080" */
        char data_dir[PATH_MAX];             /* default "./gpupool-data" */
        int max_connections;                 /* default 1024 */
        int64_t max_body_bytes;              /* default 1 MiB */
        int connection_timeout_s;            /* idle connection cut-off, default 60 */
        int header_timeout_s;                /* a request head arrives whole within it, default 10 */
        int64_t min_body_rate_bytes_s;       /* a body's least average rate after that grace, default 1024 */
        int max_connections_per_ip;          /* open connections from one client address, default 256 */
        int http_threads;                    /* HTTP event loops (each with an MHD daemon), default 2 */
        char allowed_origins[GP_MAX_ALLOWED_ORIGINS][GP_ORIGIN_MAX]; /* web origins whose pages may call
                                                                      * the API (CORS); default none */
        int n_allowed_origins;
        char server_user[GP_USER_NAME_MAX];  /* drop root to this user after binding, "" = stay (default) */
        char tls_cert[PATH_MAX];             /* server.tls.cert: PEM file, "" = the generated one (default) */
        char tls_key[PATH_MAX];              /* server.tls.key: its key, "" with cert "" */
        char tls_ca[PATH_MAX];               /* server.tls.ca: the CA agents pin, "" = the chain's last */
        char tls_sans[GP_CFG_MAX_TLS_SANS][GP_CFG_TLS_SAN_MAX]; /* names added to a generated certificate */
        int n_tls_sans;
        bool tls_plaintext_any;              /* server.tls.plaintext: any (opt-out) | loopback (default) */
        char server_socket[108];             /* the local Unix socket (peer credentials name the caller):
                                                "" = /run/gpupool/PORT.sock as root, else
                                                /tmp/gpupool-UID/PORT.sock; "off" = none */
        char admin_group[GP_USER_NAME_MAX];  /* local users in this Unix group are admins; "" = root only */

        /* auth */
        char admin_keys[GP_CFG_MAX_ADMIN_KEYS][72]; /* "sha256:<64 hex>" */
        int n_admin_keys;
        bool clamp_priority;                 /* auth.over_max_priority: clamp (true) | refuse (default) */

        /* tenants and groups */
        gp_cfg_tenant *tenants;              /* n_tenants (at most GP_CFG_MAX_TENANTS), heap, owned */
        int n_tenants;
        size_t cap_tenants;
        gp_cfg_group groups[GP_CFG_MAX_GROUPS];
        int n_groups;
        gp_cfg_time_rule *time_rules;        /* n_time_rules (at most GP_CFG_MAX_TIME_RULES), heap, owned */
        int n_time_rules;
        size_t cap_time_rules;

        /* store */
        char store_url[PATH_MAX + 16];       /* default "sqlite://<data_dir>/gpupool.db" */
        bool store_sync_full;                /* store.sync: full (default) | normal */
        int store_disk_reserve_mb;           /* store.disk_reserve_mb: the full-disk reserve file, 0..1024 */
        int store_disk_min_free_mb;          /* store.disk_min_free_mb: degraded below this, 0..1024 */

        /* gpus */
        char gpu_backend[8];                 /* "auto" (default) | "nvml" | "sim" | "none" (no GPUs of its own:
                                                a server that is a control plane only) */
        char nvml_library[PATH_MAX];         /* default "libnvidia-ml.so.1" */
        char reserved[GP_CFG_MAX_RESERVED][GP_UUID_MAX]; /* GPU index ("1") or uuid */
        int n_reserved;
        gp_cfg_sim_gpu sim[GP_CFG_MAX_SIM];  /* default: one entry, RTX 4090 24564 MB x4 */
        int n_sim;
        int gpu_poll_ms;                     /* GPU sampling interval, default 2000 */
        bool gpu_watchdog;                   /* stop a sharing task over its memory_mb, default true */
        int64_t watchdog_tolerance_mb;       /* over means above memory_mb + this, default 256 */
        int watchdog_grace_s;                /* stopped after this long over, default 10 */
        bool gpu_mps;                        /* gpus.sharing: mps (shared tasks are MPS clients) | watchdog
                                                (the default) */
        char mps_gpus[GP_CFG_MAX_RESERVED][GP_UUID_MAX]; /* gpus.mps_gpus: the GPUs (index or uuid) sharing
                                                is mps on; none listed = all */
        int n_mps_gpus;
        char mps_control[PATH_MAX];          /* gpus.mps_control, default "nvidia-cuda-mps-control" (PATH) */
        char mps_dir[PATH_MAX];              /* gpus.mps_dir: the daemons' pipe and log dirs; "" = DATA_DIR/mps */

        /* scheduler */
        gp_sched_policy policy;              /* default hybrid; one the daemon runs (gp_sched_policy_daemon) */
        gp_sched_placement placement;        /* default pack */
        int priority_levels;                 /* must be 10 in this version */
        uint32_t weights[GP_PRIORITY_LEVELS];/* default 256,128,...,1,1; each 1..1000000 */
        int max_queue_depth;                 /* per tier, default 10000 */
        int max_array_size;                  /* elements of one job array, 1..100000, default 10000 */
        int queue_timeout_sec;               /* queue_timeout_s of a task that sets none, 0 = none (default) */
        int64_t memory_safety_margin_mb;     /* default 2000 */
        int max_models_per_gpu;              /* default 2 */
        bool backfill;                       /* default true */
        int backfill_depth;                  /* queued tasks examined for backfill, default 1000 */
        int spf_aging_pct;                   /* spf: GPU-ms of credit per 100 ms waited, default 1 */
        bool spf_preempt;                    /* spf: demotion preempts preemptible tasks, default false */
        int n_las_thresholds;                /* scheduler.las_thresholds_s: 1..GP_CFG_MAX_LAS_THRESHOLDS */
        int64_t las_thresholds_s[GP_CFG_MAX_LAS_THRESHOLDS]; /* GPU-seconds where LAS level k+1 starts
                                                (spf's demotion, `gpupool simulate`'s las): each
                                                1..GP_CFG_LAS_MAX_S, increasing; default 3600, 36000 */
        bool preemption_enabled;             /* default true */
        int preemption_grace_sec;            /* default 30 */
        int preemption_max_notice_s;         /* a task's --signal SIG@SECS: SECS clamped to this, default
                                                300; 0 = no notice is given */
        int preemption_min_runtime_sec;      /* default 60 */
        int fairshare_half_life_s;           /* decay of tenant usage, default 86400; 0 = never decays */

        /* tasks */
        int default_lease_ttl_s;             /* default 60 */
        int max_lease_ttl_s;                 /* default 86400 */
        int kill_grace_s;                    /* SIGTERM -> SIGKILL, default 10 */
        int elastic_signal;                  /* told to an elastic task on a resize, default SIGUSR1 */
        int64_t max_log_bytes;               /* per task log cap, default 64 MiB */
        int default_max_retries;             /* default 1 */
        int oom_retry_permille;              /* memory_mb x this / 1000 when requeued for GPU OOM, default 1200 */

        /* monitor */
        int monitor_sample_ms;               /* metrics history and alert evaluation, default 1000 */

        /* alerts */
        char alert_webhook[GP_CFG_WEBHOOK_MAX]; /* "" = none; http:// or https:// URL */
        int alert_webhook_timeout_s;         /* per POST, default 5 */
        int alert_webhook_retries;           /* after the first try, default 5 */
        gp_cfg_alert_rule alert_rules[GP_CFG_MAX_ALERT_RULES]; /* default: gpu_error, node_lost */
        int n_alert_rules;

        /* billing (docs/billing.md): prices, record interval, enforcement */
        gp_bill_prices billing;              /* default: no prices, record_interval_s 300 */
        /* gateway */
        gp_cfg_gateway gw;

        /* agent (gpupool agent on a GPU machine; docs/internals/cluster.md) */
        char agent_listen[128];              /* its read-only status API, "ADDR:PORT", default "0.0.0.0:8081" */
        char agent_data_dir[PATH_MAX];       /* node.json, runs/; default "./gpupool-agent-data" */
        int agent_heartbeat_s;               /* sync interval (long-poll wait), 1..60, default 2 */
        /* node (what an agent joins as) */
        char node_name[GP_NODE_MAX];         /* "" (default) = the short host name at run time; else
                                                1..47 of [A-Za-z0-9._-], not "local" */
        char node_labels[2048];              /* canonical "k=v,k2=v2" sorted by key (base/labels.h), "" = none */
        /* cluster (the server's side) */
        char join_tokens[GP_CFG_MAX_JOIN_TOKENS][72]; /* "sha256:<64 hex>" of join tokens */
        int n_join_tokens;
        int node_timeout_s;                  /* a node without a sync this long is lost, 2..3600, default 10 */
        int fence_s;                         /* an agent without a sync this long stops (fences) its runs; a
                                                lost node's tasks are given away only after it (+ kill grace):
                                                node_timeout_s..3600, default 30 (docs/config.md) */
        /* several servers on one PostgreSQL (docs/deployment.md) */
        char server_id[64];                  /* "" (default) = a single server; else 1..63 of [A-Za-z0-9._-];
                                                env GPUPOOL_SERVER_ID overrides it (server.c) */
        char advertise_url[256];             /* how the others reach this server, "" = unknown */
        int lease_s;                         /* leader lease, renewed every lease_s / 3; 2..600, default 6 */
        int heartbeat_interval_s;            /* registry heartbeat, 1..3600, default 15 */
        int server_timeout_s;                /* a server silent this long is inactive, 2..86400, default 60 */
} gp_config;

/* Is local minute-of-day m (0..1439) inside the rule's window?  A window
 * whose end is not after its start wraps midnight.  Pure. */
bool gp_time_rule_covers(const gp_cfg_time_rule *r, int m);

/* Fill cfg with the embedded default.  Never fails, allocates nothing (the
 * default lists of tenants, time rules and models are empty); whatever cfg
 * held before is overwritten, not freed. */
void gp_config_defaults(gp_config *cfg);

/* The scheduling core's settings as cfg gives them (the daemon's scheduler;
 * `gpupool simulate` starts from these and applies its options).  The
 * queue depth is the core's default: the daemon sets its own. */
void gp_config_sched(const gp_config *cfg, gp_sched_config *sc);

/* Free the lists a loaded config owns (tenants, time_rules, gw.models) and
 * leave cfg as gp_config_defaults() makes it.  NULL is a no-op. */
void gp_config_free(gp_config *cfg);

/* *dst = a deep copy of *src (dst's previous content is overwritten, not
 * freed).  0, or -ENOMEM with *dst untouched. */
int gp_config_copy(gp_config *dst, const gp_config *src);

/* Load a YAML file over the defaults into *cfg (its previous content is
 * overwritten, not freed: gp_config_free it first when it held a loaded
 * config).  On failure returns -EINVAL (bad content), -ENOENT/-EACCES
 * (cannot read) or -ENOMEM, writes "FILE:LINE: KEY: what is wrong" into err
 * (always NUL-terminated when errlen > 0), and leaves *cfg untouched.  On
 * success *cfg owns heap lists: gp_config_free when done. */
int gp_config_load(const char *path, gp_config *cfg, char *err, size_t errlen);

/* The same from a buffer (fuzzing, tests); `name` stands for the file name
 * in messages.  Input is bounded to 1 MiB (-E2BIG beyond). */
int gp_config_load_buffer(const char *name, const char *data, size_t len, gp_config *cfg,
                          char *err, size_t errlen);

/* Cross-field checks (also run by the loaders). 0 or -EINVAL with err. */
int gp_config_validate(const gp_config *cfg, char *err, size_t errlen);

/* Is `name` a group of cfg: in groups, or in a time rule's groups?  A
 * tenant's group must be one of these or the tenant's kind (the default
 * group).  Pure. */
bool gp_config_group_defined(const gp_config *cfg, const char *name);

#endif
