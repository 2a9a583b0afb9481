/* config-int.h - what the config loader's files share (config.c: the
 * schema table, the YAML walk and loading; config-sections.c: the parsers
 * of the alerts, tenants, time rules, billing and gateway sections;
 * config-validate.c: the checks of gp_config_validate and the
 * cross-references).  Nothing outside src/config/ includes it. */
#ifndef GP_CONFIG_CONFIG_INT_H
#define GP_CONFIG_CONFIG_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "config/config.h"

#define MAX_DEPTH 32                /* nested mappings/lists accepted */
#define CFG_MAX_FIELDS 512          /* rows of the schema table, at most (checked in config.c) */

enum kind {
        K_SECTION,     /* a mapping of further keys */
        K_UNSUPPORTED, /* a DESIGN.md section this version does not implement */
        K_INT,         /* int member, range min..max */
        K_I64,         /* int64_t member, range min..max */
        K_BOOL,        /* bool member */
        K_STR,         /* char[size] member, length min..max */
        K_CUSTOM,      /* parsed by fn */
};

struct ctx;
struct field;
typedef int (*value_fn)(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);

struct field {
        const char *key;  /* dotted key; "[]" stands for a list item */
        enum kind kind;
        size_t off;       /* offset of the member in the base struct */
        size_t size;      /* sizeof the member */
        int64_t min, max; /* numbers: range; strings: length range */
        value_fn fn;      /* K_CUSTOM */
};

int parse_listen(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_store_url(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_store_sync(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_backend(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_sharing(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_policy(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_placement(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_signal(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_weights(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_las_thresholds(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_webhook(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_when(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_severity(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_over_max(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_tenant_kind(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_quota(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_items(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_tls_plaintext(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int field_index(const char *key);
int parse_hhmm(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_tz(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_rule_weights(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_rule_quotas(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_rule_gw(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_money(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_secs_ms(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_permille(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_bill_tz(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_serve(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_serve_port(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_autoscale(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_tokenize(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_unix_user(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_node_name(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);
int parse_node_labels(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev);


struct reflines {
        int admin_key[GP_CFG_MAX_ADMIN_KEYS];
        int tenant_key[GP_CFG_MAX_TENANTS][GP_CFG_MAX_TENANT_KEYS];
        int tenant_group[GP_CFG_MAX_TENANTS];   /* the tenant's own `group:` key */
        int group[GP_CFG_MAX_GROUPS];           /* groups[] items */
        int rule_group[GP_CFG_MAX_TIME_RULES][GP_CFG_MAX_GROUPS];
        int rule_quota[GP_CFG_MAX_TIME_RULES][GP_CFG_MAX_RULE_QUOTAS]; /* the tenant id key */
        int rule_gw[GP_CFG_MAX_TIME_RULES][GP_CFG_MAX_RULE_GW];        /* the tenant or group key */
};

struct ctx {
        yaml_parser_t parser;
        const char *name;         /* file name for messages */
        const char *data;         /* the input, for reader-error line numbers */
        size_t len;
        char *err;                /* caller's message buffer, may be NULL */
        size_t errlen;
        gp_config *cfg;           /* the copy being filled */
        int depth;                /* open mappings and lists */
        char path[256];           /* dotted key of the value being read */
        size_t pathlen;
        int key_line;             /* line of the key whose value is being read */
        int line[CFG_MAX_FIELDS];       /* line where each field was set, 0 = not in the file */
        bool store_url_set;
        struct reflines refs;     /* lines of what check_refs() names */
};

/* a list item's reader (config.c's walker) */
typedef int (*item_fn)(struct ctx *c, int i, const yaml_event_t *ev, void *arg);
#define MAX_GPU_INDEX 1023          /* gpus.reserved as an index */
#define WEIGHT_MAX 1000000

/* Shared by the three files (each described where it is defined). */
__attribute__((format(printf, 3, 4))) int cfg_fail(struct ctx *c, int line, const char *fmt, ...);
int cfg_next(struct ctx *c, yaml_event_t *ev);
const char *cfg_show(const char *s, size_t len, char *out, size_t size);
const char *cfg_describe(const yaml_event_t *ev, char *out, size_t size);
bool cfg_is_null(const yaml_event_t *ev);
int cfg_ev_line(const yaml_event_t *ev);
void cfg_vmsg(char *err, size_t errlen, const char *src, int line, const char *key, const char *fmt, va_list ap);
void cfg_path_push(struct ctx *c, const char *fmt, ...);
void cfg_path_pop(struct ctx *c, size_t len);
int cfg_parse_map(struct ctx *c, const char *prefix, void *base);
int cfg_read_weights(struct ctx *c, const yaml_event_t *ev, uint32_t w[GP_PRIORITY_LEVELS]);
int cfg_parse_list(struct ctx *c, const yaml_event_t *ev, const char *what, item_fn fn, void *arg, int *ret_n);
int cfg_scalar_str(struct ctx *c, const yaml_event_t *ev, char *dst, size_t size, size_t minlen);
int cfg_scalar_int(struct ctx *c, const yaml_event_t *ev, int64_t min, int64_t max, int64_t *ret);
int cfg_scalar_secs(struct ctx *c, const yaml_event_t *ev, int64_t min, int64_t max, int64_t *ret);
int cfg_scalar_enum(struct ctx *c, const yaml_event_t *ev, const char *const *names, size_t n, size_t *ret);
int cfg_scalar_bool(struct ctx *c, const yaml_event_t *ev, bool *ret);
int cfg_scalar_mb(struct ctx *c, const yaml_event_t *ev, int64_t min, int64_t max, int64_t *ret);
bool admin_key_ok(const char *s, size_t n);
bool alert_metric_ok(const char *m);
int check_listen(const char *s, const char **why);
int check_refs(const gp_config *cfg, const struct reflines *refs, char *err, size_t errlen);
size_t daemon_policies(const char *names[GP_SCHED_NPOLICIES], gp_sched_policy pols[GP_SCHED_NPOLICIES]);
int key_owned_already(struct ctx *c, const char *hash, int self, int line);
bool name_ok(const char *s);
bool reserved_ok(const char *s, size_t n);
bool store_url_ok(const char *s);
int validate_impl(const gp_config *cfg, const int *lines, char *err, size_t errlen);
bool webhook_ok(const char *s);
void bill_after(void *owner);
int bill_gpu_done(struct ctx *c, void *owner, void *item, int i, int line);
void bill_gpu_init(struct ctx *c, void *item);
int bill_tier_done(struct ctx *c, void *owner, void *item, int i, int line);
void bill_tier_init(struct ctx *c, void *item);
int bill_token_done(struct ctx *c, void *owner, void *item, int i, int line);
void bill_token_init(struct ctx *c, void *item);
int bill_window_done(struct ctx *c, void *owner, void *item, int i, int line);
void bill_window_init(struct ctx *c, void *item);
int group_done(struct ctx *c, void *owner, void *item, int i, int line);
int model_done(struct ctx *c, void *owner, void *item, int i, int line);
void model_init(struct ctx *c, void *item);
int rule_done(struct ctx *c, void *owner, void *item, int i, int line);
int rule_group_done(struct ctx *c, void *owner, void *item, int i, int line);
void rule_init(struct ctx *c, void *item);
int serve_arg_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg);
int tenant_done(struct ctx *c, void *owner, void *item, int i, int line);
void tenant_init(struct ctx *c, void *item);
int tenant_key_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg);
int time_rule_done(struct ctx *c, void *owner, void *item, int i, int line);
void time_rule_init(struct ctx *c, void *item);
int upstream_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg);
int weight_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg);
extern const char *const cfg_backend_names[4];
extern const char *const cfg_cmp_names[6];
extern const char *const cfg_severity_names[3];
extern const char *const cfg_sync_names[2];

/* The schema (config.c) and its rows. */
extern const struct field cfg_fields[];
extern const size_t cfg_nfields;

#endif
