/* config-sections.c - the parsers of the config's alerts, tenants,
 * groups, time rules, billing and gateway sections and of the scheduler's
 * LAS thresholds: each a value_fn of the schema table (config.c) or an
 * item hook of its lists, with the walk's rules (config-int.h): the first
 * error stops the walk, every message names FILE:LINE and the dotted key,
 * nothing is echoed that could be a secret. */
#include "config/config-int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/keyhash.h"
#include "base/labels.h"
#include "base/text.h"
#include "base/units.h"
#include "base/url.h"
#include "base/user.h"
#include "base/util.h"
#include "base/vec.h"
#include "config/quota.h"

/* ---- alerts ---- */

/* "" (no webhook) or http(s)://HOST... without spaces or control characters. */
bool webhook_ok(const char *s) {
        if (!*s)
                return true;
        size_t n = !strncmp(s, "http://", 7) ? 7 : !strncmp(s, "https://", 8) ? 8 : 0;
        if (!n || !s[n] || s[n] == '/')
                return false;
        for (const char *p = s; *p; p++)
                if ((unsigned char)*p <= 0x20 || *p == 0x7f)
                        return false;
        return true;
}

bool name_ok(const char *s) {
        size_t n = strlen(s);
        return n > 0 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == n;
}

bool alert_metric_ok(const char *m) {
        for (int i = 0; gp_config_alert_metrics[i]; i++)
                if (!strcmp(m, gp_config_alert_metrics[i]))
                        return true;
        return false;
}

/* "METRIC" or "METRIC OP NUMBER" into the rule.  0 or -EINVAL with why. */
static int split_when(const char *s, gp_cfg_alert_rule *r, const char **why) {
        const char *p = s;
        while (*p == ' ')
                p++;
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
        char metric[GP_CFG_ALERT_METRIC_MAX];
        memset(metric, 0, sizeof(metric)); /* zero-padded: the struct compares with memcmp */
        *why = "expected METRIC or METRIC OP NUMBER, e.g. \"gpu_temp_c > 85\"";
        if (n == 0 || n >= sizeof(metric))
                return -EINVAL;
        memcpy(metric, p, n);
        metric[n] = '\0';
        if (!alert_metric_ok(metric)) {
                *why = "unknown metric (known: gpu_unhealthy, gpu_ecc_uncorrected, gpu_temp_c, node_lost, "
                       "queue_wait_p95_s, util_pct_while_queued, queued_tasks, tenant_quota_used_pct, "
                       "tenant_balance)";
                return -EINVAL;
        }
        p += n;
        while (*p == ' ')
                p++;
        gp_cmp op = GP_CMP_GT;
        double thr = 0;
        if (*p) {
                size_t on = strspn(p, "<>=!");
                bool found = false;
                for (size_t i = 0; i < GP_ARRAY_SIZE(cfg_cmp_names); i++)
                        if (on && strlen(cfg_cmp_names[i]) == on && !strncmp(p, cfg_cmp_names[i], on)) {
                                op = (gp_cmp)i;
                                found = true;
                        }
                if (!found) {
                        *why = "expected an operator (>, >=, <, <=, ==, !=) after the metric";
                        return -EINVAL;
                }
                p += on;
                while (*p == ' ')
                        p++;
                char *end;
                errno = 0;
                thr = strtod(p, &end);
                if (end == p || errno || !isfinite(thr) || fabs(thr) > 1e15) {
                        *why = "expected a number after the operator";
                        return -EINVAL;
                }
                p = end;
                while (*p == ' ')
                        p++;
                if (*p) {
                        *why = "unexpected text after the number";
                        return -EINVAL;
                }
        }
        memcpy(r->metric, metric, sizeof(metric));
        r->op = op;
        r->threshold = thr;
        return 0;
}

int parse_when(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_alert_rule *r = base;
        char tmp[GP_CFG_ALERT_WHEN_MAX], d[96];
        const char *why;
        memset(tmp, 0, sizeof(tmp));
        int rc = cfg_scalar_str(c, ev, tmp, sizeof(tmp), 1);
        if (rc < 0)
                return rc;
        if (split_when(tmp, r, &why) < 0)
                return cfg_fail(c, cfg_ev_line(ev), "%s; got \"%s\"", why, cfg_show(tmp, strlen(tmp), d, sizeof(d)));
        memcpy(r->when, tmp, sizeof(tmp));
        return 0;
}

int parse_severity(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_alert_rule *r = base;
        size_t i;
        int rc = cfg_scalar_enum(c, ev, cfg_severity_names, GP_ARRAY_SIZE(cfg_severity_names), &i);
        if (rc == 0) {
                memset(r->severity, 0, sizeof(r->severity));
                gp_strlcpy(r->severity, cfg_severity_names[i], sizeof(r->severity));
        }
        return rc;
}

int parse_webhook(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_config *cfg = base;
        char tmp[GP_CFG_WEBHOOK_MAX];
        memset(tmp, 0, sizeof(tmp));
        int r = cfg_scalar_str(c, ev, tmp, sizeof(tmp), 0);
        if (r < 0)
                return r;
        /* never echo it: a webhook URL may carry a token */
        if (!webhook_ok(tmp))
                return cfg_fail(c, cfg_ev_line(ev), "expected an http:// or https:// URL (or \"\" for none)");
        memcpy(cfg->alert_webhook, tmp, sizeof(tmp));
        return 0;
}

void rule_init(struct ctx *c, void *item) {
        gp_cfg_alert_rule *r = item;
        r->clear_s = 30;
        gp_strlcpy(r->severity, "warning", sizeof(r->severity));
}

int rule_done(struct ctx *c, void *owner, void *item, int i, int line) {
        gp_config *cfg = owner;
        gp_cfg_alert_rule *r = item;
        if (!r->name[0])
                return cfg_fail(c, line, "missing name");
        if (!r->when[0])
                return cfg_fail(c, line, "missing when (e.g. \"gpu_temp_c > 85\")");
        for (int j = 0; j < i; j++)
                if (!strcmp(cfg->alert_rules[j].name, r->name))
                        return cfg_fail(c, line, "the name \"%s\" is used by alerts.rules[%d] too", r->name, j);
        return 0;
}

int parse_over_max(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        static const char *const names[] = {"refuse", "clamp"};
        size_t i;
        int r = cfg_scalar_enum(c, ev, names, GP_ARRAY_SIZE(names), &i);
        if (r == 0)
                ((gp_config *)base)->clamp_priority = i == 1;
        return r;
}

int parse_tenant_kind(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        static const char *const names[] = {"internal", "external"};
        gp_cfg_tenant *t = base;
        size_t i;
        int r = cfg_scalar_enum(c, ev, names, GP_ARRAY_SIZE(names), &i);
        if (r == 0) {
                memset(t->kind, 0, sizeof(t->kind));
                gp_strlcpy(t->kind, names[i], sizeof(t->kind));
        }
        return r;
}

/* A quota field (tenants[].quota.*, time_rules[].quotas.*.*): read by
 * config/quota.c, the reader the REST API uses too; the field is the key's
 * last part, the member (f->off) the gp_quota it goes into. */
int parse_quota(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        const char *name = strrchr(f->key, '.') + 1;
        int q = gp_quota_field_find(name, strlen(name));
        char d[96], why[192];
        int64_t v;
        if (q < 0)
                return cfg_fail(c, cfg_ev_line(ev), "not a quota field");
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev) || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
                gp_quota_type_error((gp_quota_field)q, cfg_describe(ev, d, sizeof(d)), why, sizeof(why));
                return cfg_fail(c, cfg_ev_line(ev), "%s", why);
        }
        if (gp_quota_parse((gp_quota_field)q, (const char *)ev->data.scalar.value, ev->data.scalar.length, &v, why,
                           sizeof(why)) < 0)
                return cfg_fail(c, cfg_ev_line(ev), "%s", why);
        gp_quota_set((gp_quota *)((char *)base + f->off), (gp_quota_field)q, v);
        return 0;
}

int tenant_key_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        gp_cfg_tenant *t = arg;
        if (i >= GP_CFG_MAX_TENANT_KEYS)
                return cfg_fail(c, cfg_ev_line(ev), "too many keys (at most %d)", GP_CFG_MAX_TENANT_KEYS);
        char tmp[sizeof(t->keys[i])];
        memset(tmp, 0, sizeof(tmp));
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev) ||
            !gp_key_hash_parse((const char *)ev->data.scalar.value, ev->data.scalar.length, tmp))
                return cfg_fail(c, cfg_ev_line(ev),
                            "expected \"sha256:\" and 64 lowercase hex digits, the SHA-256 of the key "
                            "(not the key itself; e.g. printf %%s KEY | sha256sum)");
        for (int j = 0; j < i; j++)
                if (!strcmp(t->keys[j], tmp))
                        return cfg_fail(c, cfg_ev_line(ev), "the same key hash is listed twice (items %d and %d)", j, i);
        int self = (int)(t - c->cfg->tenants), r = key_owned_already(c, tmp, self, cfg_ev_line(ev));
        if (r < 0)
                return r;
        memcpy(t->keys[i], tmp, sizeof(tmp));
        c->refs.tenant_key[self][i] = cfg_ev_line(ev);
        return 0;
}

void tenant_init(struct ctx *c, void *item) {
        gp_cfg_tenant *t = item;
        t->default_priority = 5;
        t->weight = 1;
        c->line[field_index("tenants[].group")] = 0; /* set again by cfg_parse_map if this tenant names its group */
}

int tenant_done(struct ctx *c, void *owner, void *item, int i, int line) {
        gp_config *cfg = owner;
        gp_cfg_tenant *t = item;
        c->refs.tenant_group[i] = c->line[field_index("tenants[].group")];
        if (!t->id[0])
                return cfg_fail(c, line, "missing id");
        if (!gp_id_ok(t->id, strlen(t->id)))
                return cfg_fail(c, line, "id \"%s\": only letters, digits, '-', '_' and '.'", t->id);
        if (!t->kind[0])
                gp_strlcpy(t->kind, "internal", sizeof(t->kind));
        if (!t->name[0])
                gp_strlcpy(t->name, t->id, sizeof(t->name));
        if (!t->group[0])
                gp_strlcpy(t->group, t->kind, sizeof(t->group));
        if (t->default_priority < t->max_priority)
                return cfg_fail(c, line, "default_priority %d is more urgent than max_priority %d", t->default_priority,
                            t->max_priority);
        char why[128];
        if (gp_quota_check(&t->quota, why, sizeof(why)) < 0)
                return cfg_fail(c, line, "%s", why);
        for (int j = 0; j < i; j++)
                if (!strcmp(cfg->tenants[j].id, t->id))
                        return cfg_fail(c, line, "tenant \"%s\" is defined twice (tenants[%d] too)", t->id, j);
        return 0;
}

/* Item i of a `groups` list (the top-level one or a time rule's), in
 * `groups`; its line goes to refline[i]. */
static int group_check(struct ctx *c, const gp_cfg_group *groups, int i, int line, int *refline) {
        const gp_cfg_group *g = &groups[i];
        if (!g->name[0] || !g->share_pct)
                return cfg_fail(c, line, "a group needs name and share_pct");
        refline[i] = line;
        for (int j = 0; j < i; j++)
                if (!strcmp(groups[j].name, g->name))
                        return cfg_fail(c, line, "group \"%s\" is defined twice", g->name);
        return 0;
}

int group_done(struct ctx *c, void *owner, void *item, int i, int line) {
        return group_check(c, ((gp_config *)owner)->groups, i, line, c->refs.group);
}

int rule_group_done(struct ctx *c, void *owner, void *item, int i, int line) {
        gp_cfg_time_rule *tr = owner;
        return group_check(c, tr->groups, i, line, c->refs.rule_group[tr - c->cfg->time_rules]);
}

bool gp_time_rule_covers(const gp_cfg_time_rule *r, int m) {
        if (r->start_min < r->end_min)
                return m >= r->start_min && m < r->end_min;
        return m >= r->start_min || m < r->end_min;
}

int parse_hhmm(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        char d[96];
        const char *v = (const char *)ev->data.scalar.value;
        if (ev->type != YAML_SCALAR_EVENT || ev->data.scalar.length != 5 || v[2] != ':' || v[0] < '0' || v[0] > '2' ||
            v[1] < '0' || v[1] > '9' || v[3] < '0' || v[3] > '5' || v[4] < '0' || v[4] > '9' ||
            (v[0] - '0') * 10 + (v[1] - '0') > 23)
                return cfg_fail(c, cfg_ev_line(ev), "expected a time of day \"HH:MM\" (00:00..23:59), got %s",
                            cfg_describe(ev, d, sizeof(d)));
        *(int *)((char *)base + f->off) = ((v[0] - '0') * 10 + (v[1] - '0')) * 60 + (v[3] - '0') * 10 + (v[4] - '0');
        return 0;
}

/* A time zone's name (a scalar of at most n-1 bytes) into out[n], only if
 * this machine knows the zone; out is unchanged otherwise.  The zone is
 * loaded on the heap (gp_tz is large), so the loader stays re-entrant. */
static int read_tz(struct ctx *c, const yaml_event_t *ev, char *out, size_t n) {
        char tmp[GP_TZ_NAME_MAX], d[96];
        if (n > sizeof(tmp))
                n = sizeof(tmp);
        memset(tmp, 0, sizeof(tmp));
        int rc = cfg_scalar_str(c, ev, tmp, n, 1);
        if (rc < 0)
                return rc;
        gp_tz *z = malloc(sizeof(*z));
        if (!z)
                return cfg_fail(c, cfg_ev_line(ev), "out of memory");
        rc = gp_tz_load(tmp, z);
        free(z);
        if (rc < 0)
                return cfg_fail(c, cfg_ev_line(ev), "%s is not a time zone this machine knows (an IANA name such as "
                            "Asia/Shanghai or UTC; tzdata holds them)", cfg_show(tmp, strlen(tmp), d, sizeof(d)));
        memcpy(out, tmp, n);
        return 0;
}

int parse_tz(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_time_rule *r = base;
        return read_tz(c, ev, r->tz, sizeof(r->tz));
}

/* server.user, tenants[].run_as: a user name that exists on this machine
 * now (checked at load, like time zones, so a typo stops the start with
 * FILE:LINE; a user deleted later fails at use, with a message). */
int parse_unix_user(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        char tmp[GP_USER_NAME_MAX], d[96];
        int rc = cfg_scalar_str(c, ev, tmp, sizeof(tmp), 1);
        if (rc < 0)
                return rc;
        size_t n = strlen(tmp);
        if (!gp_user_name_ok(tmp, n))
                return cfg_fail(c, cfg_ev_line(ev), "%s is not a Unix user name (letters, digits, '_', '-', '.', not all "
                            "digits)", cfg_show(tmp, n, d, sizeof(d)));
        gp_user u;
        rc = gp_user_lookup(tmp, &u);
        if (rc == -ENOENT)
                return cfg_fail(c, cfg_ev_line(ev), "no Unix user %s on this machine (getent passwd %s finds nothing; "
                            "create it first, e.g. useradd --system)", cfg_show(tmp, n, d, sizeof(d)), tmp);
        if (rc < 0)
                return cfg_fail(c, cfg_ev_line(ev), "cannot look up Unix user %s: %s", cfg_show(tmp, n, d, sizeof(d)),
                            rc == -E2BIG ? "in too many groups" : strerror(-rc));
        memcpy((char *)base + f->off, tmp, sizeof(tmp));
        return 0;
}

int parse_rule_weights(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_time_rule *tr = base;
        int r = cfg_read_weights(c, ev, tr->weights);
        if (r == 0)
                tr->has_weights = true;
        return r;
}

/* scheduler.las_thresholds_s: 1..GP_CFG_MAX_LAS_THRESHOLDS GPU-seconds
 * (integers or durations such as 1h), each 1..GP_CFG_LAS_MAX_S and more
 * than the one before; the config is untouched on failure. */
#define LAS_EXPECTED "expected a list of 1 to %d increasing GPU-seconds such as [3600, 36000], got "

struct las_read {
        int64_t v[GP_CFG_MAX_LAS_THRESHOLDS];
};

static int las_threshold_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        struct las_read *lr = arg;
        int64_t x;
        if (i >= GP_CFG_MAX_LAS_THRESHOLDS)
                return cfg_fail(c, cfg_ev_line(ev), "too many thresholds (at most %d: %d LAS levels)",
                                GP_CFG_MAX_LAS_THRESHOLDS, GP_SCHED_LAS_MAX_LEVELS);
        int r = cfg_scalar_secs(c, ev, 1, GP_CFG_LAS_MAX_S, &x);
        if (r < 0)
                return r;
        if (i > 0 && x <= lr->v[i - 1])
                return cfg_fail(c, cfg_ev_line(ev), "must be more than the threshold before it (%lld), got %lld",
                                (long long)lr->v[i - 1], (long long)x);
        lr->v[i] = x;
        return 0;
}

int parse_las_thresholds(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_config *cfg = base;
        struct las_read lr;
        char d[96];
        int n, r;
        (void)f;
        if (ev->type != YAML_SEQUENCE_START_EVENT)
                return cfg_fail(c, c->key_line, LAS_EXPECTED "%s", GP_CFG_MAX_LAS_THRESHOLDS,
                                cfg_describe(ev, d, sizeof(d)));
        r = cfg_parse_list(c, ev, "a list", las_threshold_item, &lr, &n);
        if (r < 0)
                return r;
        if (n < 1)
                return cfg_fail(c, c->key_line, LAS_EXPECTED "an empty list", GP_CFG_MAX_LAS_THRESHOLDS);
        memcpy(cfg->las_thresholds_s, lr.v, (size_t)n * sizeof(lr.v[0]));
        cfg->n_las_thresholds = n;
        return 0;
}

/* quotas: {TENANT: {max_concurrent, max_gpus, guaranteed_gpus, max_queued}, ...} */
/* A time rule's mapping of names to settings ({dept_a: {max_gpus: 8}}):
 * each key a name (1..GP_TENANT_MAX-1 bytes, listed once), each value a
 * mapping parsed by cfg_parse_map under `prefix`.  The items are `size` bytes
 * apart from `items`, each starting with its name (char[GP_TENANT_MAX]);
 * init fills an item before its mapping is read; lines[i] gets the line of
 * item i's key.  null empties it. */
struct keyed {
        const char *prefix;       /* "time_rules[].quotas{}" */
        const char *keys;         /* what the keys are: "tenant ids" */
        const char *value;        /* the value's keys, for messages: "{max_concurrent, max_gpus, ...}" */
        const char *example;      /* "{dept_a: {max_gpus: 8}}" */
        void *items;
        size_t size;
        int max;
        void (*init)(void *item);
        int *lines;
        int *ret_n;
};

int parse_keyed(struct ctx *c, const yaml_event_t *ev, const struct keyed *k) {
        char d[96];
        if (cfg_is_null(ev)) {
                *k->ret_n = 0;
                return 0;
        }
        if (ev->type != YAML_MAPPING_START_EVENT)
                return cfg_fail(c, cfg_ev_line(ev), "expected a mapping of %s to settings, e.g. %s, got %s", k->keys,
                            k->example, cfg_describe(ev, d, sizeof(d)));
        int n = 0, r = 0;
        if (++c->depth > MAX_DEPTH) {
                r = cfg_fail(c, cfg_ev_line(ev), "nested too deeply (more than %d levels)", MAX_DEPTH);
                goto out;
        }
        for (;;) {
                yaml_event_t kev, vev;
                if ((r = cfg_next(c, &kev)) < 0)
                        goto out;
                if (kev.type == YAML_MAPPING_END_EVENT) {
                        yaml_event_delete(&kev);
                        break;
                }
                int kline = cfg_ev_line(&kev);
                size_t saved = c->pathlen;
                if (kev.type != YAML_SCALAR_EVENT || kev.data.scalar.length == 0 ||
                    kev.data.scalar.length >= GP_TENANT_MAX) {
                        r = cfg_fail(c, kline, "expected one of the %s as the key, got %s", k->keys,
                                 cfg_describe(&kev, d, sizeof(d)));
                        yaml_event_delete(&kev);
                        goto out;
                }
                if (n >= k->max) {
                        r = cfg_fail(c, kline, "too many %s (at most %d)", k->keys, k->max);
                        yaml_event_delete(&kev);
                        goto out;
                }
                char *item = (char *)k->items + (size_t)n * k->size;
                memset(item, 0, k->size);
                memcpy(item, kev.data.scalar.value, kev.data.scalar.length);
                k->init(item);
                yaml_event_delete(&kev);
                k->lines[n] = kline;
                cfg_path_push(c, ".%s", item);
                for (int j = 0; j < n; j++)
                        if (!strcmp((const char *)k->items + (size_t)j * k->size, item)) {
                                r = cfg_fail(c, kline, "listed twice");
                                goto out;
                        }
                if ((r = cfg_next(c, &vev)) < 0)
                        goto out;
                if (vev.type != YAML_MAPPING_START_EVENT) {
                        r = cfg_fail(c, kline, "expected a mapping %s, got %s", k->value, cfg_describe(&vev, d, sizeof(d)));
                        yaml_event_delete(&vev);
                        goto out;
                }
                yaml_event_delete(&vev);
                c->key_line = kline;
                if ((r = cfg_parse_map(c, k->prefix, item)) < 0)
                        goto out;
                cfg_path_pop(c, saved);
                n++;
        }
        *k->ret_n = n;
out:
        c->depth--;
        return r;
}

static void rule_quota_init(void *item) {
        ((gp_cfg_rule_quota *)item)->quota = GP_QUOTA_OVERLAY_NONE;
}

int parse_rule_quotas(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_time_rule *tr = base;
        const struct keyed k = {.prefix = "time_rules[].quotas{}", .keys = "tenant ids",
                                .value = "{max_concurrent, max_gpus, guaranteed_gpus, max_queued}",
                                .example = "{dept_a: {max_gpus: 8}}", .items = tr->quotas,
                                .size = sizeof(tr->quotas[0]), .max = GP_CFG_MAX_RULE_QUOTAS, .init = rule_quota_init,
                                .lines = c->refs.rule_quota[tr - c->cfg->time_rules], .ret_n = &tr->n_quotas};
        return parse_keyed(c, ev, &k);
}

static void rule_gw_init(void *item) {
        gp_cfg_rule_gw *g = item;
        g->max_concurrent = GP_QUOTA_UNCHANGED;
        g->rpm = g->tpm = GP_QUOTA_UNCHANGED;
}

int parse_rule_gw(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_time_rule *tr = base;
        const struct keyed k = {.prefix = "time_rules[].gateway{}", .keys = "tenant ids and group names",
                                .value = "{max_concurrent, rpm, tpm}", .example = "{external: {max_concurrent: 8}}",
                                .items = tr->gw, .size = sizeof(tr->gw[0]), .max = GP_CFG_MAX_RULE_GW,
                                .init = rule_gw_init, .lines = c->refs.rule_gw[tr - c->cfg->time_rules],
                                .ret_n = &tr->n_gw};
        return parse_keyed(c, ev, &k);
}

void time_rule_init(struct ctx *c, void *item) {
        gp_cfg_time_rule *tr = item;
        tr->start_min = tr->end_min = -1;
        gp_strlcpy(tr->tz, "UTC", sizeof(tr->tz));
}

int time_rule_done(struct ctx *c, void *owner, void *item, int i, int line) {
        gp_config *cfg = owner;
        gp_cfg_time_rule *tr = item;
        if (!tr->name[0])
                return cfg_fail(c, line, "missing name");
        if (tr->start_min < 0 || tr->end_min < 0)
                return cfg_fail(c, line, "a time rule needs start and end (\"HH:MM\")");
        if (tr->start_min == tr->end_min)
                return cfg_fail(c, line, "start and end are the same time: the window would be empty");
        for (int j = 0; j < i; j++)
                if (!strcmp(cfg->time_rules[j].name, tr->name))
                        return cfg_fail(c, line, "the name \"%s\" is used by time_rules[%d] too", tr->name, j);
        return 0;
}

/* ---- billing ---- */

/* A decimal amount (plain or quoted: 2, 2.5, "0.0005") into micro-units,
 * or a factor into ppm; f->max bounds it.  f->min == 1 marks
 * per_1k_tokens, which sets the prompt and the completion price. */
int parse_money(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        char d[96];
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev))
                return cfg_fail(c, cfg_ev_line(ev), "expected a decimal number such as 2.5, got %s", cfg_describe(ev, d, sizeof(d)));
        int64_t v;
        int r = gp_bill_parse_micros((const char *)ev->data.scalar.value, ev->data.scalar.length, f->max, &v);
        if (r == -ERANGE) {
                char m[32];
                gp_bill_format_micros(f->max, m, sizeof(m));
                return cfg_fail(c, cfg_ev_line(ev), "must be between 0 and %s, got %s", m, cfg_describe(ev, d, sizeof(d)));
        }
        if (r < 0)
                return cfg_fail(c, cfg_ev_line(ev), "expected a decimal number with at most 6 decimals (no sign, no "
                            "exponent), got %s", cfg_describe(ev, d, sizeof(d)));
        *(int64_t *)((char *)base + f->off) = v;
        if (f->min == 1) /* per_1k_tokens: both prices */
                ((gp_bill_token_price *)base)->per_1k_completion = v;
        return 0;
}

/* A factor such as 1.2 (at most 3 decimals, f->min..f->max thousandths)
 * stored as an int of thousandths. */
int parse_permille(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        char d[96];
        int64_t v = 0;
        int r = ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev)
                        ? -EINVAL
                        : gp_bill_parse_micros((const char *)ev->data.scalar.value, ev->data.scalar.length,
                                               f->max * 1000, &v);
        if ((r < 0 && r != -ERANGE) || (r == 0 && v % 1000 != 0))
                return cfg_fail(c, cfg_ev_line(ev), "expected a decimal number such as 1.2 (at most 3 decimals), got %s",
                                cfg_describe(ev, d, sizeof(d)));
        if (r == -ERANGE || v < f->min * 1000 || v > f->max * 1000)
                return cfg_fail(c, cfg_ev_line(ev), "must be between %.3g and %.3g, got %s", f->min / 1000.0,
                                f->max / 1000.0, cfg_describe(ev, d, sizeof(d)));
        *(int *)((char *)base + f->off) = (int)(v / 1000);
        return 0;
}

/* Whole seconds (f->min..f->max) stored as milliseconds. */
int parse_secs_ms(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        int64_t x;
        int r = cfg_scalar_secs(c, ev, f->min, f->max, &x);
        if (r == 0)
                *(int64_t *)((char *)base + f->off) = x * 1000;
        return r;
}

int parse_bill_tz(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_bill_window *w = base;
        return read_tz(c, ev, w->tz, sizeof(w->tz));
}

void bill_gpu_init(struct ctx *c, void *item) {
        gp_bill_gpu_price *g = item;
        g->gpu_model[0] = '*';
        g->per_gpu_hour = -1;
}

int bill_gpu_done(struct ctx *c, void *owner, void *item, int i, int line) {
        if (((gp_bill_gpu_price *)item)->per_gpu_hour < 0)
                return cfg_fail(c, line, "a price needs per_gpu_hour");
        return 0;
}

void bill_token_init(struct ctx *c, void *item) {
        gp_bill_token_price *t = item;
        t->per_1k_prompt = t->per_1k_completion = -1;
}

int bill_token_done(struct ctx *c, void *owner, void *item, int i, int line) {
        gp_bill_token_price *t = item;
        if (!t->model[0])
                return cfg_fail(c, line, "a token price needs model (a glob such as \"llama*\")");
        if (t->per_1k_prompt < 0 || t->per_1k_completion < 0)
                return cfg_fail(c, line, "a token price needs per_1k_tokens, or per_1k_prompt and "
                            "per_1k_completion");
        return 0;
}

void bill_tier_init(struct ctx *c, void *item) {
        ((gp_bill_tier *)item)->factor_ppm = -1;
}

int bill_tier_done(struct ctx *c, void *owner, void *item, int i, int line) {
        const gp_bill_prices *p = &((gp_config *)owner)->billing;
        gp_bill_tier *t = item;
        if (t->gpu_hours <= 0 || t->factor_ppm < 0)
                return cfg_fail(c, line, "a volume discount needs gpu_hours and factor (e.g. {gpu_hours: 100, "
                            "factor: 0.9})");
        if (i > 0 && t->gpu_hours <= p->tiers[i - 1].gpu_hours)
                return cfg_fail(c, line, "gpu_hours must grow from one volume discount to the cfg_next");
        return 0;
}

void bill_window_init(struct ctx *c, void *item) {
        gp_bill_window *w = item;
        w->start_min = w->end_min = -1;
        w->multiplier_ppm = -1;
        gp_strlcpy(w->tz, "UTC", sizeof(w->tz));
}

int bill_window_done(struct ctx *c, void *owner, void *item, int i, int line) {
        const gp_bill_prices *p = &((gp_config *)owner)->billing;
        gp_bill_window *w = item;
        if (!w->name[0] || w->start_min < 0 || w->end_min < 0 || w->multiplier_ppm < 0)
                return cfg_fail(c, line, "a time window needs name, start, end (\"HH:MM\") and multiplier");
        if (w->start_min == w->end_min)
                return cfg_fail(c, line, "start and end are the same time: the window would be empty");
        for (int j = 0; j < i; j++)
                if (!strcmp(p->windows[j].name, w->name))
                        return cfg_fail(c, line, "the name \"%s\" is used by time_windows[%d] too", w->name, j);
        return 0;
}

void bill_after(void *owner) {
        ((gp_config *)owner)->billing.enabled = true;
}

/* First pass: the whole stream is well-formed YAML and nested at most
 * MAX_DEPTH deep and holds one document, so a syntax error is reported as such even when a schema
 * error comes earlier in the file (an indentation slip otherwise shows up as
 * a misplaced key). */
/* ---- gateway ---- */

/* "http://HOST[:PORT][/PREFIX]" without a trailing slash, query or spaces. */
static bool upstream_url_ok(const char *s, size_t n) {
        if (n < 8 || n >= GP_CFG_URL_MAX || strncmp(s, "http://", 7) != 0 || s[n - 1] == '/')
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)s[i] <= ' ' || s[i] == '?' || s[i] == '#' || (unsigned char)s[i] >= 0x7f)
                        return false;
        char url[GP_CFG_URL_MAX];
        memcpy(url, s, n);
        url[n] = '\0';
        gp_http_url u;
        return gp_http_url_parse(url, &u) == 0; /* what the gateway's client can reach: host, port 1..65535 */
}

int upstream_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        gp_cfg_model *m = arg;
        if (i >= GP_CFG_MAX_UPSTREAMS)
                return cfg_fail(c, cfg_ev_line(ev), "too many upstreams (at most %d)", GP_CFG_MAX_UPSTREAMS);
        if (ev->type != YAML_SCALAR_EVENT || cfg_is_null(ev) ||
            !upstream_url_ok((const char *)ev->data.scalar.value, ev->data.scalar.length))
                return cfg_fail(c, cfg_ev_line(ev), "expected an upstream base URL \"http://HOST[:PORT][/PREFIX]\" (port 1..65535, no trailing slash)");
        /* the OpenAI habit: a base URL ending in /v1 would make every request /v1/v1/... (404) */
        const char *v = (const char *)ev->data.scalar.value;
        size_t vn = ev->data.scalar.length;
        if (vn >= 3 && !strncmp(v + vn - 3, "/v1", 3)) {
                char fix[GP_CFG_URL_MAX];
                snprintf(fix, sizeof(fix), "%.*s", (int)(vn - 3), v);
                return cfg_fail(c, cfg_ev_line(ev), "an upstream is the server's base URL without /v1 (the gateway adds "
                            "/v1/... itself, as it received it): write \"%s\"", fix);
        }
        memset(m->upstreams[i], 0, sizeof(m->upstreams[i]));
        memcpy(m->upstreams[i], ev->data.scalar.value, ev->data.scalar.length);
        return 0;
}

int serve_arg_item(struct ctx *c, int i, const yaml_event_t *ev, void *arg) {
        gp_cfg_serve *sv = arg;
        if (i >= GP_CFG_MAX_SERVE_ARGS)
                return cfg_fail(c, cfg_ev_line(ev), "too many arguments (at most %d)", GP_CFG_MAX_SERVE_ARGS);
        if (ev->type != YAML_SCALAR_EVENT)
                return cfg_fail(c, cfg_ev_line(ev), "expected a string");
        return cfg_scalar_str(c, ev, sv->command[i], sizeof(sv->command[i]), i == 0 ? 1 : 0);
}

int parse_serve_port(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_serve *sv = base;
        if (ev->type == YAML_SCALAR_EVENT && ev->data.scalar.length == 4 &&
            !memcmp(ev->data.scalar.value, "auto", 4)) {
                sv->port = 0;
                return 0;
        }
        int64_t x;
        int r = cfg_scalar_int(c, ev, 1, 65535, &x);
        if (r == 0)
                sv->port = (int)x;
        return r;
}

/* gateway.models[].tokenize: auto (ask the upstream's /tokenize when the
 * estimate is near the context) or off (the estimate alone). */
static const char *const tokenize_names[] = {"auto", "off"};

int parse_tokenize(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_model *m = base;
        size_t i;
        (void)f;
        int r = cfg_scalar_enum(c, ev, tokenize_names, GP_ARRAY_SIZE(tokenize_names), &i);
        if (r == 0)
                m->tokenize_off = i == 1;
        return r;
}

int parse_autoscale(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_serve *sv = base;
        char d[96];
        if (cfg_is_null(ev))
                return 0;
        if (ev->type != YAML_MAPPING_START_EVENT)
                return cfg_fail(c, cfg_ev_line(ev), "expected a mapping {min, max, queue_depth}, got %s",
                            cfg_describe(ev, d, sizeof(d)));
        int line = cfg_ev_line(ev);
        sv->autoscale = true;
        sv->autoscale_min = 1;
        sv->autoscale_max = 1;
        sv->autoscale_queue_depth = 8;
        int r = cfg_parse_map(c, "gateway.models[].serve.autoscale", sv);
        if (r == 0 && sv->autoscale_min > sv->autoscale_max)
                return cfg_fail(c, line, "min %d is above max %d", sv->autoscale_min, sv->autoscale_max);
        return r;
}

int parse_serve(struct ctx *c, const struct field *f, void *base, const yaml_event_t *ev) {
        gp_cfg_model *m = base;
        gp_cfg_serve *sv = &m->serve;
        char d[96];
        if (cfg_is_null(ev))
                return 0;
        if (ev->type != YAML_MAPPING_START_EVENT)
                return cfg_fail(c, cfg_ev_line(ev), "expected a mapping {command, gpus, memory_mb, port, ready, ...}, got %s",
                            cfg_describe(ev, d, sizeof(d)));
        int line = cfg_ev_line(ev);
        memset(sv, 0, sizeof(*sv));
        sv->enabled = true;
        sv->gpus = 1;
        sv->replicas = 1;
        gp_strlcpy(sv->ready, "/health", sizeof(sv->ready));
        int r = cfg_parse_map(c, "gateway.models[].serve", sv);
        if (r < 0)
                return r;
        if (sv->n_command < 1)
                return cfg_fail(c, line, "missing command");
        if (sv->ready[0] != '/')
                return cfg_fail(c, line, "ready must be a path starting with '/'");
        int reps = sv->autoscale ? sv->autoscale_min : sv->replicas;
        if (sv->port && (reps > 1 || (sv->autoscale && sv->autoscale_max > 1)))
                return cfg_fail(c, line, "port %d is fixed, so only one replica can run (use port: auto)", sv->port);
        return 0;
}

void model_init(struct ctx *c, void *item) {
        ((gp_cfg_model *)item)->context = 4096;
}

int model_done(struct ctx *c, void *owner, void *item, int i, int line) {
        gp_cfg_gateway *gw = &((gp_config *)owner)->gw;
        gp_cfg_model *m = item;
        if (!m->name[0])
                return cfg_fail(c, line, "missing name");
        if (!gp_str_is_clean(m->name, strlen(m->name)) || strchr(m->name, '"') || strchr(m->name, '\\'))
                return cfg_fail(c, line, "name \"%s\": no control characters, quotes or backslashes", m->name);
        if (m->n_upstreams == 0 && !m->serve.enabled)
                return cfg_fail(c, line, "model \"%s\" needs upstreams or serve", m->name);
        for (int j = 0; j < i; j++)
                if (!strcmp(gw->models[j].name, m->name))
                        return cfg_fail(c, line, "model \"%s\" is defined twice (gateway.models[%d] too)", m->name, j);
        return 0;
}

