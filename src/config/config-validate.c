/* config-validate.c - gp_config_validate's checks (the schema's ranges
 * again, for a struct filled by code rather than by the loader) and the
 * cross-references of a loaded file (key owners, groups, the tenants and
 * groups time rules name), with FILE:LINE of what they name. */
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

/* ---- validation ---- */

int field_index(const char *key) {
        for (size_t i = 0; i < cfg_nfields; i++)
                if (!strcmp(cfg_fields[i].key, key))
                        return (int)i;
        return -1;
}

struct vctx {
        const gp_config *cfg;
        const int *lines; /* per field, from the loader; NULL from gp_config_validate */
        char *err;
        size_t errlen;
};

__attribute__((format(printf, 3, 4))) static int vfail(struct vctx *v, const char *key,
                                                      const char *fmt, ...) {
        char src[PATH_MAX];
        int line = 0;
        if (strnlen(v->cfg->source, sizeof(v->cfg->source)) < sizeof(v->cfg->source) &&
            v->cfg->source[0])
                gp_strlcpy(src, v->cfg->source, sizeof(src));
        else
                gp_strlcpy(src, "(config)", sizeof(src));
        if (v->lines) {
                /* "a.b[3].c" is reported on the line of "a.b" */
                char base[128];
                gp_strlcpy(base, key, sizeof(base));
                char *br = strchr(base, '[');
                if (br)
                        *br = '\0';
                int idx = field_index(base);
                if (idx >= 0)
                        line = v->lines[idx];
        }
        va_list ap;
        va_start(ap, fmt);
        cfg_vmsg(v->err, v->errlen, src, line, key, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static bool terminated(const char *s, size_t size) {
        return memchr(s, '\0', size) != NULL;
}

/* Numbers and plain strings of the table, for the struct at base. */
static int check_fields(struct vctx *v, const char *sim_prefix, int sim_i, const void *base) {
        for (size_t i = 0; i < cfg_nfields; i++) {
                const struct field *f = &cfg_fields[i];
                /* list items ("gpus.sim[]", "alerts.rules[]") are checked per item */
                bool is_item = strstr(f->key, "[]") != NULL;
                if (is_item != (sim_prefix != NULL))
                        continue;
                size_t pl = sim_prefix ? strlen(sim_prefix) : 0;
                if (is_item && (strncmp(f->key, sim_prefix, pl) != 0 || f->key[pl] != '.'))
                        continue;
                char key[128];
                if (is_item)
                        snprintf(key, sizeof(key), "%.*s[%d].%s", (int)(pl - 2), sim_prefix, sim_i,
                                 strrchr(f->key, '.') + 1);
                else
                        gp_strlcpy(key, f->key, sizeof(key));
                const char *p = (const char *)base + f->off;
                int64_t x;
                switch (f->kind) {
                case K_INT:
                case K_I64:
                        if (f->kind == K_INT) {
                                int iv;
                                memcpy(&iv, p, sizeof(iv));
                                x = iv;
                        } else {
                                memcpy(&x, p, sizeof(x));
                        }
                        if (x < f->min || x > f->max) {
                                if (f->min == f->max)
                                        return vfail(v, key, "must be %lld, got %lld", (long long)f->min,
                                                     (long long)x);
                                return vfail(v, key, "must be between %lld and %lld, got %lld",
                                             (long long)f->min, (long long)f->max, (long long)x);
                        }
                        break;
                case K_STR:
                        if (!terminated(p, f->size))
                                return vfail(v, key, "not NUL-terminated");
                        if (strlen(p) < (size_t)f->min)
                                return vfail(v, key, "must not be empty");
                        if (!gp_str_is_clean(p, strlen(p)))
                                return vfail(v, key, "contains control characters");
                        break;
                default:
                        break;
                }
        }
        return 0;
}

int validate_impl(const gp_config *cfg, const int *lines, char *err, size_t errlen) {
        struct vctx v = {cfg, lines, err, errlen};
        const char *why;
        int r = check_fields(&v, NULL, 0, cfg);
        if (r < 0)
                return r;

        if (!terminated(cfg->listen, sizeof(cfg->listen)))
                return vfail(&v, "server.listen", "not NUL-terminated");
        if (check_listen(cfg->listen, &why) < 0)
                return vfail(&v, "server.listen", "%s", why);
        if (!cfg->tls_cert[0] != !cfg->tls_key[0])
                return vfail(&v, cfg->tls_cert[0] ? "server.tls.cert" : "server.tls.key",
                             "server.tls.cert and server.tls.key go together: set both, or neither (the server "
                             "then makes its own CA and certificate in DATA_DIR/tls)");
        if (cfg->tls_ca[0] && !cfg->tls_cert[0])
                return vfail(&v, "server.tls.ca", "needs server.tls.cert and server.tls.key");

        if (cfg->n_admin_keys < 0 || cfg->n_admin_keys > GP_CFG_MAX_ADMIN_KEYS)
                return vfail(&v, "auth.admin_keys", "must have between 0 and %d keys, got %d",
                             GP_CFG_MAX_ADMIN_KEYS, cfg->n_admin_keys);
        for (int i = 0; i < cfg->n_admin_keys; i++) {
                const char *k = cfg->admin_keys[i];
                if (!terminated(k, sizeof(cfg->admin_keys[i])) || !admin_key_ok(k, strlen(k))) {
                        char key[64];
                        snprintf(key, sizeof(key), "auth.admin_keys[%d]", i);
                        return vfail(&v, key, "expected \"sha256:\" and 64 lowercase hex digits");
                }
        }

        if (!terminated(cfg->store_url, sizeof(cfg->store_url)) || !store_url_ok(cfg->store_url))
                return vfail(&v, "store.url", "expected sqlite://PATH, postgres://... or postgresql://...");
        if (!terminated(cfg->server_id, sizeof(cfg->server_id)))
                return vfail(&v, "cluster.server_id", "not NUL-terminated");
        for (const char *q = cfg->server_id; *q; q++)
                if (!isalnum((unsigned char)*q) && *q != '.' && *q != '_' && *q != '-')
                        return vfail(&v, "cluster.server_id", "expected 1..63 of A-Z a-z 0-9 . _ -");
        if (cfg->server_id[0] && !strncmp(cfg->store_url, "sqlite://", 9))
                return vfail(&v, "cluster.server_id",
                             "several servers need a shared PostgreSQL store (store.url: postgres://...), "
                             "not sqlite://");

        bool backend_ok = false;
        if (terminated(cfg->gpu_backend, sizeof(cfg->gpu_backend)))
                for (size_t i = 0; i < GP_ARRAY_SIZE(cfg_backend_names); i++)
                        backend_ok |= !strcmp(cfg->gpu_backend, cfg_backend_names[i]);
        if (!backend_ok)
                return vfail(&v, "gpus.backend", "expected one of auto, nvml, sim");

        if (cfg->n_reserved < 0 || cfg->n_reserved > GP_CFG_MAX_RESERVED)
                return vfail(&v, "gpus.reserved", "must have between 0 and %d entries, got %d",
                             GP_CFG_MAX_RESERVED, cfg->n_reserved);
        for (int i = 0; i < cfg->n_reserved; i++) {
                const char *s = cfg->reserved[i];
                if (!terminated(s, sizeof(cfg->reserved[i])) || !reserved_ok(s, strlen(s))) {
                        char key[64];
                        snprintf(key, sizeof(key), "gpus.reserved[%d]", i);
                        return vfail(&v, key, "expected a GPU index (0..%d) or a GPU uuid",
                                     MAX_GPU_INDEX);
                }
        }

        if (cfg->n_mps_gpus < 0 || cfg->n_mps_gpus > GP_CFG_MAX_RESERVED)
                return vfail(&v, "gpus.mps_gpus", "must have between 0 and %d entries, got %d", GP_CFG_MAX_RESERVED,
                             cfg->n_mps_gpus);
        for (int i = 0; i < cfg->n_mps_gpus; i++) {
                const char *s = cfg->mps_gpus[i];
                if (!terminated(s, sizeof(cfg->mps_gpus[i])) || !reserved_ok(s, strlen(s))) {
                        char key[64];
                        snprintf(key, sizeof(key), "gpus.mps_gpus[%d]", i);
                        return vfail(&v, key, "expected a GPU index (0..%d) or a GPU uuid", MAX_GPU_INDEX);
                }
        }
        if (cfg->n_mps_gpus > 0 && !cfg->gpu_mps)
                return vfail(&v, "gpus.mps_gpus", "names the GPUs of gpus.sharing: mps; sharing is watchdog");
        if (!terminated(cfg->mps_control, sizeof(cfg->mps_control)) || !cfg->mps_control[0])
                return vfail(&v, "gpus.mps_control", "expected a program name or path");
        if (!terminated(cfg->mps_dir, sizeof(cfg->mps_dir)) || strlen(cfg->mps_dir) > PATH_MAX - 64)
                return vfail(&v, "gpus.mps_dir", "expected a path of at most %d bytes", PATH_MAX - 64);

        if (cfg->n_allowed_origins < 0 || cfg->n_allowed_origins > GP_MAX_ALLOWED_ORIGINS)
                return vfail(&v, "server.allowed_origins", "must have between 0 and %d entries, got %d",
                             GP_MAX_ALLOWED_ORIGINS, cfg->n_allowed_origins);
        for (int i = 0; i < cfg->n_allowed_origins; i++) {
                const char *owhy;
                if (!terminated(cfg->allowed_origins[i], GP_ORIGIN_MAX) ||
                    !gp_browser_origin_ok(cfg->allowed_origins[i], &owhy)) {
                        char key[64];
                        snprintf(key, sizeof(key), "server.allowed_origins[%d]", i);
                        return vfail(&v, key, "expected SCHEME://HOST[:PORT]");
                }
        }

        if (cfg->n_sim < 0 || cfg->n_sim > GP_CFG_MAX_SIM)
                return vfail(&v, "gpus.sim", "must have between 0 and %d entries, got %d", GP_CFG_MAX_SIM,
                             cfg->n_sim);
        for (int i = 0; i < cfg->n_sim; i++) {
                r = check_fields(&v, "gpus.sim[]", i, &cfg->sim[i]);
                if (r < 0)
                        return r;
        }

        if (!gp_sched_policy_daemon(cfg->policy)) {
                const char *names[GP_SCHED_NPOLICIES];
                gp_sched_policy pols[GP_SCHED_NPOLICIES];
                size_t n = daemon_policies(names, pols);
                char list[128] = "";
                for (size_t i = 0; i < n; i++)
                        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "", names[i]);
                return vfail(&v, "scheduler.policy", "expected one of %s", list);
        }
        if ((unsigned)cfg->placement >= GP_PLACE_N)
                return vfail(&v, "scheduler.placement", "expected one of pack, spread");
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                if (cfg->weights[i] < 1 || cfg->weights[i] > WEIGHT_MAX) {
                        char key[64];
                        snprintf(key, sizeof(key), "scheduler.weights[%d]", i);
                        return vfail(&v, key, "must be between 1 and %d, got %u", WEIGHT_MAX,
                                     cfg->weights[i]);
                }
        if (cfg->n_las_thresholds < 1 || cfg->n_las_thresholds > GP_CFG_MAX_LAS_THRESHOLDS)
                return vfail(&v, "scheduler.las_thresholds_s", "must have between 1 and %d entries, got %d",
                             GP_CFG_MAX_LAS_THRESHOLDS, cfg->n_las_thresholds);
        for (int i = 0; i < cfg->n_las_thresholds; i++) {
                int64_t x = cfg->las_thresholds_s[i];
                if (x >= 1 && x <= GP_CFG_LAS_MAX_S && (i == 0 || x > cfg->las_thresholds_s[i - 1]))
                        continue;
                char key[64];
                snprintf(key, sizeof(key), "scheduler.las_thresholds_s[%d]", i);
                if (x < 1 || x > GP_CFG_LAS_MAX_S)
                        return vfail(&v, key, "must be between 1 and %lld, got %lld", (long long)GP_CFG_LAS_MAX_S,
                                     (long long)x);
                return vfail(&v, key, "must be more than the threshold before it (%lld), got %lld",
                             (long long)cfg->las_thresholds_s[i - 1], (long long)x);
        }

        if (!terminated(cfg->alert_webhook, sizeof(cfg->alert_webhook)) || !webhook_ok(cfg->alert_webhook))
                return vfail(&v, "alerts.webhook", "expected an http:// or https:// URL (or \"\" for none)");
        if (cfg->n_alert_rules < 0 || cfg->n_alert_rules > GP_CFG_MAX_ALERT_RULES)
                return vfail(&v, "alerts.rules", "must have between 0 and %d entries, got %d",
                             GP_CFG_MAX_ALERT_RULES, cfg->n_alert_rules);
        for (int i = 0; i < cfg->n_alert_rules; i++) {
                const gp_cfg_alert_rule *ar = &cfg->alert_rules[i];
                char key[64];
                r = check_fields(&v, "alerts.rules[]", i, ar);
                if (r < 0)
                        return r;
                snprintf(key, sizeof(key), "alerts.rules[%d].name", i);
                if (!name_ok(ar->name))
                        return vfail(&v, key, "use letters, digits, '_', '-' and '.' only");
                for (int j = 0; j < i; j++)
                        if (!strcmp(cfg->alert_rules[j].name, ar->name))
                                return vfail(&v, key, "the name \"%s\" is used by alerts.rules[%d] too", ar->name,
                                             j);
                snprintf(key, sizeof(key), "alerts.rules[%d].when", i);
                if (!terminated(ar->metric, sizeof(ar->metric)) || !alert_metric_ok(ar->metric) ||
                    (unsigned)ar->op > GP_CMP_NE || !isfinite(ar->threshold))
                        return vfail(&v, key, "expected METRIC or METRIC OP NUMBER");
                bool sev_ok = false;
                if (terminated(ar->severity, sizeof(ar->severity)))
                        for (size_t k = 0; k < GP_ARRAY_SIZE(cfg_severity_names); k++)
                                sev_ok |= !strcmp(ar->severity, cfg_severity_names[k]);
                if (!sev_ok) {
                        snprintf(key, sizeof(key), "alerts.rules[%d].severity", i);
                        return vfail(&v, key, "expected one of info, warning, critical");
                }
        }

        /* cross-field rules: name the key the file set, if any */
        if (cfg->max_lease_ttl_s < cfg->default_lease_ttl_s) {
                bool max_set = lines && lines[field_index("tasks.max_lease_ttl_s")];
                bool def_set = lines && lines[field_index("tasks.default_lease_ttl_s")];
                if (def_set && !max_set)
                        return vfail(&v, "tasks.default_lease_ttl_s",
                                     "must not exceed tasks.max_lease_ttl_s (%d), got %d",
                                     cfg->max_lease_ttl_s, cfg->default_lease_ttl_s);
                return vfail(&v, "tasks.max_lease_ttl_s",
                             "must be at least tasks.default_lease_ttl_s (%d), got %d",
                             cfg->default_lease_ttl_s, cfg->max_lease_ttl_s);
        }
        if (cfg->fence_s < cfg->node_timeout_s) {
                /* a node still ready must not have fenced its runs */
                return vfail(&v, "cluster.fence_s",
                             "cluster.fence_s (%d) must be at least cluster.node_timeout_s (%d)", cfg->fence_s,
                             cfg->node_timeout_s);
        }
        if (!strcmp(cfg->gpu_backend, "sim") && cfg->n_sim < 1) {
                bool sim_set = lines && lines[field_index("gpus.sim")];
                return vfail(&v, sim_set ? "gpus.sim" : "gpus.backend",
                             "backend sim needs at least one gpus.sim entry");
        }
        return 0;
}

/* ---- cross-references: key owners, groups, tenants named by rules ---- */

bool gp_config_group_defined(const gp_config *cfg, const char *name) {
        for (int g = 0; g < cfg->n_groups; g++)
                if (!strcmp(cfg->groups[g].name, name))
                        return true;
        for (int r = 0; r < cfg->n_time_rules; r++)
                for (int g = 0; g < cfg->time_rules[r].n_groups; g++)
                        if (!strcmp(cfg->time_rules[r].groups[g].name, name))
                                return true;
        return false;
}

__attribute__((format(printf, 6, 7))) static int rfail(const gp_config *cfg, char *err, size_t errlen, int line,
                                                      const char *key, const char *fmt, ...) {
        char src[PATH_MAX];
        if (strnlen(cfg->source, sizeof(cfg->source)) < sizeof(cfg->source) && cfg->source[0])
                gp_strlcpy(src, cfg->source, sizeof(src));
        else
                gp_strlcpy(src, "(config)", sizeof(src));
        va_list ap;
        va_start(ap, fmt);
        cfg_vmsg(err, errlen, src, line, key, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* "a 80, b 30" into out (cut with "..." when long). */
static void list_shares(const gp_cfg_group *g, int n, const gp_cfg_group *over, int n_over, char *out,
                        size_t size) {
        size_t o = 0;
        out[0] = '\0';
        for (int i = 0; i < n + n_over && o + 4 < size; i++) {
                const gp_cfg_group *x = i < n ? &g[i] : &over[i - n];
                int pct = x->share_pct;
                bool skip = false;
                if (i < n) /* a base group: the rule's share wins */
                        for (int k = 0; k < n_over; k++)
                                if (!strcmp(over[k].name, x->name))
                                        pct = over[k].share_pct;
                if (i >= n) /* a rule's group: listed already if the base has it */
                        for (int k = 0; k < n; k++)
                                skip |= !strcmp(g[k].name, x->name);
                if (skip)
                        continue;
                int w = snprintf(out + o, size - o, "%s%s %d", o ? ", " : "", x->name, pct);
                if (w < 0 || (size_t)w >= size - o) {
                        memcpy(out + size - 4, "...", 4);
                        return;
                }
                o += (size_t)w;
        }
}

/* Checks across sections, after every section was read: a key hash has
 * one owner, a tenant's group exists, group shares add up to at most 100
 * (also with each time rule in force), a time rule's quotas name defined
 * tenants.  refs gives the lines (NULL: gp_config_validate, no lines). */
int check_refs(const gp_config *cfg, const struct reflines *refs, char *err, size_t errlen) {
        char key[128], d[96], list[256];
        int n_t = cfg->n_tenants < 0 ? 0 : cfg->n_tenants > GP_CFG_MAX_TENANTS ? GP_CFG_MAX_TENANTS : cfg->n_tenants;
        int n_g = cfg->n_groups < 0 ? 0 : cfg->n_groups > GP_CFG_MAX_GROUPS ? GP_CFG_MAX_GROUPS : cfg->n_groups;
        int n_r = cfg->n_time_rules < 0 ? 0 : cfg->n_time_rules > GP_CFG_MAX_TIME_RULES ? GP_CFG_MAX_TIME_RULES
                                                                                            : cfg->n_time_rules;
        int n_a = cfg->n_admin_keys < 0 ? 0 : cfg->n_admin_keys > GP_CFG_MAX_ADMIN_KEYS ? GP_CFG_MAX_ADMIN_KEYS
                                                                                         : cfg->n_admin_keys;
        /* key owners (the loader refuses these at the second key already) */
        for (int t = 0; t < n_t; t++) {
                const gp_cfg_tenant *tt = &cfg->tenants[t];
                for (int k = 0; k < tt->n_keys && k < GP_CFG_MAX_TENANT_KEYS; k++) {
                        snprintf(key, sizeof(key), "tenants[%d].keys[%d]", t, k);
                        int line = refs ? refs->tenant_key[t][k] : 0;
                        for (int a = 0; a < n_a; a++)
                                if (!strncmp(cfg->admin_keys[a], tt->keys[k], sizeof(tt->keys[k])))
                                        return rfail(cfg, err, errlen, line, key,
                                                     "this key hash is already an admin key (auth.admin_keys[%d]); "
                                                     "a key belongs to one owner", a);
                        for (int u = 0; u <= t; u++)
                                for (int m = 0; m < cfg->tenants[u].n_keys && m < GP_CFG_MAX_TENANT_KEYS &&
                                                (u < t || m < k); m++)
                                        if (!strncmp(cfg->tenants[u].keys[m], tt->keys[k], sizeof(tt->keys[k])))
                                                return rfail(cfg, err, errlen, line, key,
                                                             "this key hash is already given to tenant \"%s\" "
                                                             "(tenants[%d].keys[%d]); a key belongs to one owner",
                                                             cfg->tenants[u].id, u, m);
                }
        }
        /* a tenant's group: defined in groups (or a time rule's groups), or its kind (the default) */
        for (int t = 0; t < n_t; t++) {
                const gp_cfg_tenant *tt = &cfg->tenants[t];
                if (gp_config_group_defined(cfg, tt->group) || !strcmp(tt->group, tt->kind))
                        continue;
                snprintf(key, sizeof(key), "tenants[%d].group", t);
                cfg_show(tt->group, strnlen(tt->group, sizeof(tt->group)), d, sizeof(d));
                list[0] = '\0';
                for (int g = 0; g < n_g; g++) {
                        size_t o = strlen(list);
                        snprintf(list + o, sizeof(list) - o, "%s%s", g ? ", " : "", cfg->groups[g].name);
                }
                if (n_g)
                        return rfail(cfg, err, errlen, refs ? refs->tenant_group[t] : 0, key,
                                     "group \"%s\" is not defined (groups: %s)", d, list);
                return rfail(cfg, err, errlen, refs ? refs->tenant_group[t] : 0, key,
                             "group \"%s\" is not defined: add it to groups ([{name: %s, share_pct: N}]) or "
                             "leave group out (the default is the tenant's kind, %s)", d, d, tt->kind);
        }
        /* group shares: at most 100% together, also while a time rule is in force */
        int sum = 0;
        for (int g = 0; g < n_g; g++) {
                sum += cfg->groups[g].share_pct;
                if (sum > 100) {
                        list_shares(cfg->groups, g + 1, NULL, 0, list, sizeof(list));
                        snprintf(key, sizeof(key), "groups[%d]", g);
                        return rfail(cfg, err, errlen, refs ? refs->group[g] : 0, key,
                                     "the group shares add up to %d%% (%s); at most 100", sum, list);
                }
        }
        for (int r = 0; r < n_r; r++) {
                const gp_cfg_time_rule *tr = &cfg->time_rules[r];
                int ng = tr->n_groups < 0 ? 0 : tr->n_groups > GP_CFG_MAX_GROUPS ? GP_CFG_MAX_GROUPS : tr->n_groups;
                if (ng == 0)
                        continue;
                sum = 0;
                for (int g = 0; g < n_g; g++) {
                        int pct = cfg->groups[g].share_pct;
                        for (int k = 0; k < ng; k++)
                                if (!strcmp(tr->groups[k].name, cfg->groups[g].name))
                                        pct = tr->groups[k].share_pct;
                        sum += pct;
                }
                for (int k = 0; k < ng; k++) {
                        bool base = false;
                        for (int g = 0; g < n_g; g++)
                                base |= !strcmp(tr->groups[k].name, cfg->groups[g].name);
                        if (!base)
                                sum += tr->groups[k].share_pct;
                }
                if (sum > 100) {
                        list_shares(cfg->groups, n_g, tr->groups, ng, list, sizeof(list));
                        snprintf(key, sizeof(key), "time_rules[%d].groups", r);
                        return rfail(cfg, err, errlen, refs ? refs->rule_group[r][ng - 1] : 0, key,
                                     "while this rule is in force the group shares add up to %d%% (%s); at most 100",
                                     sum, list);
                }
        }
        /* a time rule's quotas name tenants of the file */
        for (int r = 0; r < n_r; r++) {
                const gp_cfg_time_rule *tr = &cfg->time_rules[r];
                for (int k = 0; k < tr->n_quotas && k < GP_CFG_MAX_RULE_QUOTAS; k++) {
                        const char *id = tr->quotas[k].tenant;
                        bool known = false;
                        for (int t = 0; t < n_t && !known; t++)
                                known = !strncmp(cfg->tenants[t].id, id, sizeof(tr->quotas[k].tenant));
                        if (known)
                                continue;
                        cfg_show(id, strnlen(id, sizeof(tr->quotas[k].tenant)), d, sizeof(d));
                        snprintf(key, sizeof(key), "time_rules[%d].quotas.%s", r, d);
                        return rfail(cfg, err, errlen, refs ? refs->rule_quota[r][k] : 0, key,
                                     "no tenant \"%s\" is defined in tenants", d);
                }
                /* its gateway limits name tenants or groups */
                for (int k = 0; k < tr->n_gw && k < GP_CFG_MAX_RULE_GW; k++) {
                        const char *id = tr->gw[k].name;
                        size_t idn = strnlen(id, sizeof(tr->gw[k].name));
                        bool known = idn < sizeof(tr->gw[k].name) && gp_config_group_defined(cfg, id);
                        for (int t = 0; t < n_t && !known; t++)
                                known = !strncmp(cfg->tenants[t].id, id, sizeof(tr->gw[k].name)) ||
                                        !strncmp(cfg->tenants[t].group, id, sizeof(tr->gw[k].name));
                        if (known)
                                continue;
                        cfg_show(id, idn, d, sizeof(d));
                        snprintf(key, sizeof(key), "time_rules[%d].gateway.%s", r, d);
                        return rfail(cfg, err, errlen, refs ? refs->rule_gw[r][k] : 0, key,
                                     "\"%s\" is neither a tenant of tenants nor a group", d);
                }
        }
        return 0;
}

int gp_config_validate(const gp_config *cfg, char *err, size_t errlen) {
        if (err && errlen)
                err[0] = '\0';
        int r = validate_impl(cfg, NULL, err, errlen);
        return r < 0 ? r : check_refs(cfg, NULL, err, errlen);
}

