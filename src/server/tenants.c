/* tenants.c - tenants, API keys and the audit log (see tenants.h).
 *
 * Invariants: ts->v holds every tenant, the config's first (changed in
 * place by a stored PUT), then ones created at run time; ids are unique.
 * ts->keys maps key hashes to a tenant id or to admin (""); hashes are
 * unique.  Nothing here keeps a key in the clear.
 */
#include "server/tenants.h"
#include "server/audit-log.h"
#include "gateway/gateway.h"

#include "base/err.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/text.h"
#include "base/tz.h"
#include "base/util.h"
#include "config/quota.h"
#include "server/billing.h"
#include "server/monitor.h"
#include "base/vec.h"
#include "server/routes.h"
#include "server/server-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct gp_key {
        char hash[GP_CFG_KEY_HASH_MAX];  /* "sha256:<hex>" */
        char tenant[GP_TENANT_MAX];      /* "" = admin key */
        bool runtime;                    /* made by the API (stored), not from the config */
        int64_t created_ms;
} gp_key;

_Static_assert((GP_AUDIT_SEG * GP_AUDIT_NSEG) > GP_AUDIT_MAX, "the segments hold the whole audit log");

/* Everything here is under the daemon's lock (tenants.h), the flags and
 * the audit log changed by the loop thread only. */
struct gp_tenants {
        const gp_config *cfg;       /* the file's tenants, keys, groups and time rules; never changed */
        gp_sched *sched;            /* where tenant settings, group shares and weights go */
        gp_store *ws;               /* the loop thread's store: read at start, written in its batch */
        uint32_t weights[GP_PRIORITY_LEVELS]; /* base weights: the file's, or a stored run-time change */
        gp_cfg_tenant *v;           /* every tenant */
        size_t n, cap;
        gp_key *keys;
        size_t nkeys, capkeys;
        json_t *audit;              /* array of the last GP_AUDIT_MAX changes */
        int64_t audit_seq;          /* the sequence number of the next change (audit-log.h) */
        int64_t audit_saved;        /* the first one not stored yet */
        bool audit_legacy;          /* loaded from the single array of before: store it all as segments */
        bool meta_tenants, meta_keys, meta_audit, meta_weights; /* to store in this batch */
        uint32_t rules_mask;        /* time rules in force (bit i = time_rules[i]) */
        gp_tz *rule_tz[GP_CFG_MAX_TIME_RULES]; /* their zones, loaded at start */
};

/* ------------------------------------------------------------------ */
/* tables                                                              */

static gp_cfg_tenant *find_mut(gp_tenants *ts, const char *id) {
        for (size_t i = 0; i < ts->n; i++)
                if (!strcmp(ts->v[i].id, id))
                        return &ts->v[i];
        return NULL;
}

const gp_cfg_tenant *gp_tenants_find(const gp_tenants *ts, const char *id) {
        return find_mut((gp_tenants *)ts, id);
}

int64_t gp_tenants_max_gpus_ever(const gp_tenants *ts, const char *id) {
        const gp_cfg_tenant *t = gp_tenants_find(ts, id);
        if (!t || t->quota.max_gpus_milli <= 0)
                return 0;
        int64_t most = t->quota.max_gpus_milli;
        for (int i = 0; i < ts->cfg->n_time_rules; i++) {
                const gp_cfg_time_rule *r = &ts->cfg->time_rules[i];
                for (int k = 0; k < r->n_quotas; k++) {
                        if (strcmp(r->quotas[k].tenant, id))
                                continue;
                        int64_t m = r->quotas[k].quota.max_gpus_milli;
                        if (m == 0)
                                return 0; /* this rule lifts the limit */
                        if (m > most)
                                most = m;
                }
        }
        return most;
}

static void gw_overlay(const gp_cfg_rule_gw *g, int *mc, int64_t *rpm, int64_t *tpm) {
        if (g->max_concurrent != GP_QUOTA_UNCHANGED)
                *mc = g->max_concurrent;
        if (g->rpm != GP_QUOTA_UNCHANGED)
                *rpm = g->rpm;
        if (g->tpm != GP_QUOTA_UNCHANGED)
                *tpm = g->tpm;
}

void gp_tenants_gw_limits(const gp_tenants *ts, const gp_cfg_tenant *t, int *ret_mc, int64_t *ret_rpm,
                          int64_t *ret_tpm) {
        int mc = t->gw_max_concurrent;
        int64_t rpm = t->gw_rpm, tpm = t->gw_tpm;
        for (int i = 0; i < ts->cfg->n_time_rules; i++) {
                if (!(ts->rules_mask & (1u << i)))
                        continue;
                const gp_cfg_time_rule *r = &ts->cfg->time_rules[i];
                for (int k = 0; k < r->n_gw; k++) /* the group's first: the tenant's own wins */
                        if (!strcmp(r->gw[k].name, t->group) && strcmp(t->group, t->id))
                                gw_overlay(&r->gw[k], &mc, &rpm, &tpm);
                for (int k = 0; k < r->n_gw; k++)
                        if (!strcmp(r->gw[k].name, t->id))
                                gw_overlay(&r->gw[k], &mc, &rpm, &tpm);
        }
        *ret_mc = mc;
        *ret_rpm = rpm;
        *ret_tpm = tpm;
}

size_t gp_tenants_count(const gp_tenants *ts) {
        return ts->n;
}

const gp_cfg_tenant *gp_tenants_at(const gp_tenants *ts, size_t i) {
        return i < ts->n ? &ts->v[i] : NULL;
}

static int tenant_add(gp_tenants *ts, const gp_cfg_tenant *t) {
        gp_cfg_tenant *p = gp_vec_grow(ts->v, &ts->cap, ts->n + 1, sizeof(*p), 16);
        if (!p)
                return -ENOMEM;
        ts->v = p;
        ts->v[ts->n++] = *t;
        return 0;
}

static gp_key *key_find(gp_tenants *ts, const char *hash) {
        for (size_t i = 0; i < ts->nkeys; i++)
                if (!strcmp(ts->keys[i].hash, hash))
                        return &ts->keys[i];
        return NULL;
}

static int key_add(gp_tenants *ts, const char *hash, const char *tenant, bool runtime, int64_t created) {
        if (key_find(ts, hash))
                return -EEXIST;
        if (ts->nkeys >= GP_KEYS_MAX)
                return -E2BIG;
        gp_key *p = gp_vec_grow(ts->keys, &ts->capkeys, ts->nkeys + 1, sizeof(*p), 16);
        if (!p)
                return -ENOMEM;
        ts->keys = p;
        gp_key *k = &ts->keys[ts->nkeys++];
        memset(k, 0, sizeof(*k));
        gp_strlcpy(k->hash, hash, sizeof(k->hash));
        gp_strlcpy(k->tenant, tenant, sizeof(k->tenant));
        k->runtime = runtime;
        k->created_ms = created;
        return 0;
}

bool gp_tenants_auth_required(const gp_tenants *ts) {
        return ts->nkeys > 0;
}

int gp_tenants_authenticate(gp_tenants *ts, const char *key, bool *ret_admin, char *ret_tenant, size_t size) {
        char hash[72];
        gp_sha256_key_hash(key, hash);
        gp_key *k = key_find(ts, hash);
        if (!k)
                return -ENOENT;
        *ret_admin = k->tenant[0] == '\0';
        gp_strlcpy(ret_tenant, k->tenant, size);
        return 0;
}

/* ------------------------------------------------------------------ */
/* time rules                                                          */

/* The tenant as in force now: its own settings with the quotas of the
 * time rules in force laid over them, later rules winning. */
static gp_cfg_tenant effective(const gp_tenants *ts, const gp_cfg_tenant *t) {
        gp_cfg_tenant e = *t;
        for (int i = 0; i < ts->cfg->n_time_rules; i++) {
                if (!(ts->rules_mask & (1u << i)))
                        continue;
                const gp_cfg_time_rule *r = &ts->cfg->time_rules[i];
                for (int k = 0; k < r->n_quotas; k++) {
                        const gp_cfg_rule_quota *q = &r->quotas[k];
                        if (strcmp(q->tenant, t->id))
                                continue;
                        gp_quota_overlay(&e.quota, &q->quota);
                }
        }
        return e;
}

static uint32_t active_mask(const gp_tenants *ts, int64_t now) {
        uint32_t m = 0;
        for (int i = 0; i < ts->cfg->n_time_rules; i++)
                if (ts->rule_tz[i] &&
                    gp_time_rule_covers(&ts->cfg->time_rules[i], gp_tz_minute_of_day(ts->rule_tz[i], now)))
                        m |= 1u << i;
        return m;
}

static void sync_sched(gp_tenants *ts) {
        uint32_t w[GP_PRIORITY_LEVELS];
        memcpy(w, ts->weights, sizeof(w));
        for (int i = 0; i < ts->cfg->n_time_rules; i++)
                if ((ts->rules_mask & (1u << i)) && ts->cfg->time_rules[i].has_weights)
                        memcpy(w, ts->cfg->time_rules[i].weights, sizeof(w));
        gp_sched_set_weights(ts->sched, w);
        for (int g = 0; g < ts->cfg->n_groups; g++) {
                uint32_t share = (uint32_t)ts->cfg->groups[g].share_pct;
                for (int i = 0; i < ts->cfg->n_time_rules; i++) {
                        const gp_cfg_time_rule *r = &ts->cfg->time_rules[i];
                        if (!(ts->rules_mask & (1u << i)))
                                continue;
                        for (int k = 0; k < r->n_groups; k++)
                                if (!strcmp(r->groups[k].name, ts->cfg->groups[g].name))
                                        share = (uint32_t)r->groups[k].share_pct;
                }
                gp_sched_group_set(ts->sched, ts->cfg->groups[g].name, share);
        }
        /* groups named only by time rules */
        for (int i = 0; i < ts->cfg->n_time_rules; i++) {
                const gp_cfg_time_rule *r = &ts->cfg->time_rules[i];
                if (ts->rules_mask & (1u << i))
                        for (int k = 0; k < r->n_groups; k++) {
                                bool base = false;
                                for (int g = 0; g < ts->cfg->n_groups; g++)
                                        base |= !strcmp(ts->cfg->groups[g].name, r->groups[k].name);
                                if (!base)
                                        gp_sched_group_set(ts->sched, r->groups[k].name, (uint32_t)r->groups[k].share_pct);
                        }
        }
        for (size_t i = 0; i < ts->n; i++) {
                gp_cfg_tenant t = effective(ts, &ts->v[i]);
                gp_sched_tenant_cfg c = {
                        .weight = (uint32_t)t.weight, .group = t.group, .quota = t.quota,
                };
                if (gp_sched_tenant_set(ts->sched, t.id, &c) < 0)
                        gp_warn("tenant %s: the scheduler refused its settings", t.id);
        }
}

static void audit(gp_tenants *ts, const char *who, const char *action, const char *target, json_t *old, json_t *new,
                  int64_t now);

bool gp_tenants_tick(gp_tenants *ts, int64_t now, bool force) {
        uint32_t m = active_mask(ts, now);
        if (m == ts->rules_mask && !force)
                return false;
        for (int i = 0; i < ts->cfg->n_time_rules; i++) {
                uint32_t bit = 1u << i;
                if ((m & bit) == (ts->rules_mask & bit) && !(force && (m & bit)))
                        continue;
                const gp_cfg_time_rule *r = &ts->cfg->time_rules[i];
                bool on = m & bit;
                gp_info("time rule %s (%02d:%02d-%02d:%02d %s) %s", r->name, r->start_min / 60, r->start_min % 60,
                        r->end_min / 60, r->end_min % 60, r->tz, on ? "is in force" : "ended");
                if (!force)
                        audit(ts, "time rule", on ? "time_rule.start" : "time_rule.end", r->name, NULL, NULL, now);
        }
        ts->rules_mask = m;
        sync_sched(ts);
        return true;
}

/* ------------------------------------------------------------------ */
/* JSON of a tenant                                                    */

static json_t *gpus_json(int64_t milli) {
        return milli % 1000 ? json_real((double)milli / 1000.0) : json_integer(milli / 1000);
}

/* The tenant as the API shows it (keys as their count, never hashes);
 * `quota` is the one in force now, `quota_configured` its own when a time
 * rule changes it. */
static json_t *quota_json(const gp_cfg_tenant *t) {
        const gp_quota *q = &t->quota;
        return json_pack("{s:i,s:i,s:o,s:o}", "max_concurrent", q->max_concurrent, "max_queued", q->max_queued,
                         "max_gpus", gpus_json(q->max_gpus_milli), "guaranteed_gpus",
                         gpus_json(q->guaranteed_gpus_milli));
}

static json_t *tenant_json(const gp_tenants *ts, const gp_cfg_tenant *base) {
        gp_cfg_tenant now = effective(ts, base), *t = &now;
        int keys = 0;
        for (size_t i = 0; i < ts->nkeys; i++)
                keys += !strcmp(ts->keys[i].tenant, t->id);
        json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:o,s:i}", "id", t->id, "name", t->name, "kind", t->kind,
                              "group", t->group, "max_priority", t->max_priority, "default_priority",
                              t->default_priority, "weight", t->weight, "quota", quota_json(t), "keys", keys);
        if (memcmp(&now, base, sizeof(now)) != 0)
                json_object_set_new(o, "quota_configured", quota_json(base));
        json_object_set_new(o, "gateway", json_pack("{s:i,s:I,s:I}", "max_concurrent", t->gw_max_concurrent, "rpm",
                                                    (json_int_t)t->gw_rpm, "tpm", (json_int_t)t->gw_tpm));
        return o;
}

/* The stored form: as the API shows it, plus the config's key hashes. */
static json_t *tenant_store_json(const gp_tenants *ts, const gp_cfg_tenant *t) {
        json_t *o = tenant_json(ts, t);
        json_object_del(o, "keys");
        json_t *base = json_object_get(o, "quota_configured");
        if (base) /* store the tenant's own quota, not the one a time rule put in force */
                json_object_set(o, "quota", base);
        json_object_del(o, "quota_configured");
        return o;
}

/* quota.FIELD of a PUT body or a stored record, read by config/quota.c
 * (the config file's reader too: same values, same words). */
static int get_quota_field(json_t *v, gp_quota_field f, gp_cfg_tenant *t, char *err, size_t errlen) {
        char why[192];
        int64_t x;
        int rc;
        if (json_is_integer(v) || json_is_real(v))
                rc = gp_quota_parse_json_number(f, json_is_integer(v), json_is_integer(v) ? json_integer_value(v) : 0,
                                                json_is_real(v) ? json_real_value(v) : 0, &x, why, sizeof(why));
        else
                rc = gp_quota_type_error(f, json_is_string(v)   ? "a string"
                                            : json_is_object(v) ? "an object"
                                            : json_is_array(v)  ? "a list"
                                            : json_is_null(v)   ? "null"
                                                                : "true or false",
                                         why, sizeof(why));
        if (rc < 0) {
                snprintf(err, errlen, "quota.%s: %s", gp_quota_defs[f].name, why);
                return -EINVAL;
        }
        gp_quota_set(&t->quota, f, x);
        return 0;
}

static int get_int_field(json_t *o, const char *key, int min, int max, int *dst, char *err, size_t errlen) {
        json_t *v = json_object_get(o, key);
        if (!v)
                return 0;
        if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
                snprintf(err, errlen, "%s: must be an integer %d..%d", key, min, max);
                return -EINVAL;
        }
        *dst = (int)json_integer_value(v);
        return 0;
}

static int get_str_field(json_t *o, const char *key, char *dst, size_t size, char *err, size_t errlen) {
        json_t *v = json_object_get(o, key);
        if (!v)
                return 0;
        const char *why;
        if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= size) {
                snprintf(err, errlen, "%s: must be text of 1..%zu bytes", key, size - 1);
                return -EINVAL;
        }
        if (gp_text_check(json_string_value(v), json_string_length(v), size - 1, &why) < 0) {
                snprintf(err, errlen, "%s: %s", key, why);
                return -EINVAL;
        }
        memset(dst, 0, size);
        memcpy(dst, json_string_value(v), json_string_length(v));
        return 0;
}

/* Overlay a JSON object (PUT body or stored record) on *t.  Unknown
 * fields and bad values are refused with a message naming the field. */
static int tenant_from_json(json_t *o, gp_cfg_tenant *t, char *err, size_t errlen) {
        static const char *const known[] = {"id", "name", "kind", "group", "max_priority", "default_priority",
                                            "weight", "quota", "keys", "gateway", NULL};
        static const char *const gknown[] = {"max_concurrent", "rpm", "tpm", NULL};
        if (!json_is_object(o)) {
                snprintf(err, errlen, "body must be a JSON object");
                return -EINVAL;
        }
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v) {
                bool ok = false;
                for (int i = 0; known[i]; i++)
                        ok |= !strcmp(k, known[i]);
                if (!ok) {
                        snprintf(err, errlen, "unknown field '%.64s'", k);
                        return -EINVAL;
                }
        }
        gp_cfg_tenant n = *t;
        int r = get_str_field(o, "name", n.name, sizeof(n.name), err, errlen);
        r = r ? r : get_str_field(o, "group", n.group, sizeof(n.group), err, errlen);
        r = r ? r : get_int_field(o, "max_priority", 0, GP_PRIORITY_LEVELS - 1, &n.max_priority, err, errlen);
        r = r ? r : get_int_field(o, "default_priority", 0, GP_PRIORITY_LEVELS - 1, &n.default_priority, err, errlen);
        r = r ? r : get_int_field(o, "weight", 1, 1000000, &n.weight, err, errlen);
        if (r < 0)
                return r;
        if ((v = json_object_get(o, "kind"))) {
                const char *s = json_is_string(v) ? json_string_value(v) : "";
                if (strcmp(s, "internal") && strcmp(s, "external")) {
                        snprintf(err, errlen, "kind: must be \"internal\" or \"external\"");
                        return -EINVAL;
                }
                gp_strlcpy(n.kind, s, sizeof(n.kind));
        }
        json_t *q = json_object_get(o, "quota");
        if (q) {
                if (!json_is_object(q)) {
                        snprintf(err, errlen, "quota: must be an object");
                        return -EINVAL;
                }
                json_object_foreach(q, k, v) {
                        int f = gp_quota_field_find(k, strlen(k));
                        if (f < 0) {
                                snprintf(err, errlen, "quota: unknown field '%.64s'", k);
                                return -EINVAL;
                        }
                        if ((r = get_quota_field(v, (gp_quota_field)f, &n, err, errlen)) < 0)
                                return r;
                }
        }
        json_t *gw = json_object_get(o, "gateway");
        if (gw) {
                if (!json_is_object(gw)) {
                        snprintf(err, errlen, "gateway: must be an object {max_concurrent, rpm, tpm}");
                        return -EINVAL;
                }
                json_object_foreach(gw, k, v) {
                        bool ok = false;
                        for (int i = 0; gknown[i]; i++)
                                ok |= !strcmp(k, gknown[i]);
                        if (!ok) {
                                snprintf(err, errlen, "gateway: unknown field '%.64s'", k);
                                return -EINVAL;
                        }
                }
                r = get_int_field(gw, "max_concurrent", 0, 1000000, &n.gw_max_concurrent, err, errlen);
                static const char *const rates[] = {"rpm", "tpm"};
                int64_t *dst[] = {&n.gw_rpm, &n.gw_tpm};
                for (int i = 0; r == 0 && i < 2; i++) {
                        v = json_object_get(gw, rates[i]);
                        if (!v)
                                continue;
                        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                            json_integer_value(v) > ((json_int_t)1 << 40)) {
                                snprintf(err, errlen, "gateway.%s: must be an integer 0..2^40", rates[i]);
                                return -EINVAL;
                        }
                        *dst[i] = json_integer_value(v);
                }
                if (r < 0)
                        return r;
        }
        if (json_object_get(o, "keys") && !json_is_integer(json_object_get(o, "keys"))) {
                snprintf(err, errlen, "keys: keys are made with POST /admin/tenants/{id}/keys");
                return -EINVAL;
        }
        if (n.default_priority < n.max_priority) {
                snprintf(err, errlen, "default_priority %d is more urgent than max_priority %d", n.default_priority,
                         n.max_priority);
                return -EINVAL;
        }
        if (gp_quota_check(&n.quota, err, errlen) < 0)
                return -EINVAL;
        *t = n;
        return 0;
}

static void tenant_defaults(gp_cfg_tenant *t, const char *id) {
        memset(t, 0, sizeof(*t));
        gp_strlcpy(t->id, id, sizeof(t->id));
        gp_strlcpy(t->name, id, sizeof(t->name));
        gp_strlcpy(t->kind, "internal", sizeof(t->kind));
        gp_strlcpy(t->group, "internal", sizeof(t->group));
        t->default_priority = 5;
        t->weight = 1;
}

/* ------------------------------------------------------------------ */
/* start-up                                                            */

static json_t *meta_json(gp_tenants *ts, const char *key) {
        size_t size = 2 * 1024 * 1024;
        char *buf = malloc(size);
        if (!buf)
                return NULL;
        json_t *j = NULL;
        if (gp_store_meta_get(ts->ws, key, buf, size) == 0)
                j = json_loads(buf, 0, NULL);
        free(buf);
        return j;
}

const char *gp_tenants_run_as(const gp_tenants *ts, const char *id) {
        for (int i = 0; id && i < ts->cfg->n_tenants; i++)
                if (!strcmp(ts->cfg->tenants[i].id, id))
                        return ts->cfg->tenants[i].run_as[0] ? ts->cfg->tenants[i].run_as : NULL;
        return NULL;
}

static int load(gp_tenants *ts, char *err, size_t errlen) {
        int rc;
        for (int i = 0; i < ts->cfg->n_admin_keys; i++)
                if ((rc = key_add(ts, ts->cfg->admin_keys[i], "", false, 0)) < 0)
                        goto dup;
        for (int i = 0; i < ts->cfg->n_tenants; i++) {
                const gp_cfg_tenant *t = &ts->cfg->tenants[i];
                if ((rc = tenant_add(ts, t)) < 0)
                        return rc;
                for (int k = 0; k < t->n_keys; k++)
                        if ((rc = key_add(ts, t->keys[k], t->id, false, 0)) < 0)
                                goto dup;
        }
        /* run-time changes stored by earlier runs win over the file */
        json_t *stored = meta_json(ts, "tenants"), *v;
        size_t i;
        json_array_foreach(stored, i, v) {
                const char *id = json_string_value(json_object_get(v, "id"));
                if (!id || strlen(id) >= GP_TENANT_MAX)
                        continue;
                gp_cfg_tenant *t = find_mut(ts, id), n;
                if (!t) {
                        tenant_defaults(&n, id);
                        t = &n;
                }
                char e[200];
                // cppcheck-suppress uninitvar ; t is a stored tenant or n, which tenant_defaults() filled
                gp_cfg_tenant tmp = *t;
                if (tenant_from_json(v, &tmp, e, sizeof(e)) < 0) {
                        gp_warn("stored tenant %s ignored: %s", id, e);
                        continue;
                }
                if (t == &n) {
                        if (tenant_add(ts, &tmp) < 0) {
                                json_decref(stored);
                                return -ENOMEM;
                        }
                } else {
                        *t = tmp;
                }
        }
        json_decref(stored);
        json_t *ks = meta_json(ts, "keys");
        json_array_foreach(ks, i, v) {
                const char *h = json_string_value(json_object_get(v, "hash"));
                const char *tn = json_string_value(json_object_get(v, "tenant"));
                json_int_t at = json_integer_value(json_object_get(v, "created_ms"));
                if (h && tn && strlen(h) < GP_CFG_KEY_HASH_MAX && strlen(tn) < GP_TENANT_MAX)
                        key_add(ts, h, tn, true, at);
        }
        json_decref(ks);
        for (int r = 0; r < ts->cfg->n_time_rules; r++) {
                ts->rule_tz[r] = malloc(sizeof(gp_tz));
                if (!ts->rule_tz[r] || gp_tz_load(ts->cfg->time_rules[r].tz, ts->rule_tz[r]) < 0) {
                        snprintf(err, errlen, "time rule %s: cannot load time zone %s", ts->cfg->time_rules[r].name,
                                 ts->cfg->time_rules[r].tz);
                        return -EINVAL;
                }
        }
        json_t *ws = meta_json(ts, "weights"), *wv;
        if (json_is_array(ws) && json_array_size(ws) == GP_PRIORITY_LEVELS) {
                uint32_t w[GP_PRIORITY_LEVELS];
                bool ok = true;
                json_array_foreach(ws, i, wv) {
                        ok &= json_is_integer(wv) && json_integer_value(wv) >= 1 && json_integer_value(wv) <= 1000000;
                        if (ok)
                                w[i] = (uint32_t)json_integer_value(wv);
                }
                if (ok) /* a stored run-time change wins over the file */
                        // cppcheck-suppress uninitvar ; ok: the array had GP_PRIORITY_LEVELS entries, each stored in w
                        memcpy(ts->weights, w, sizeof(w));
        }
        json_decref(ws);
        if (gp_audit_log_load(ts->ws, GP_AUDIT_MAX, &ts->audit, &ts->audit_seq, &ts->audit_legacy) < 0)
                return -ENOMEM;
        ts->audit_saved = ts->audit_seq;
        return 0;
dup:
        if (rc == -EEXIST)
                snprintf(err, errlen, "config: the same key hash is given to two owners (admin or tenants)");
        else
                snprintf(err, errlen, "config: too many keys");
        return -EINVAL;
}

int gp_tenants_open(gp_tenants **ret, const gp_config *cfg, gp_store *ws, gp_sched *sched, char *err,
                    size_t errlen) {
        gp_tenants *ts = calloc(1, sizeof(*ts));
        if (!ts) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        ts->cfg = cfg;
        ts->ws = ws;
        ts->sched = sched;
        memcpy(ts->weights, cfg->weights, sizeof(ts->weights));
        int rc = load(ts, err, errlen);
        if (rc < 0) {
                gp_tenants_close(ts);
                return rc;
        }
        *ret = ts;
        return 0;
}

void gp_tenants_close(gp_tenants *ts) {
        if (!ts)
                return;
        for (int i = 0; i < GP_CFG_MAX_TIME_RULES; i++)
                free(ts->rule_tz[i]);
        free(ts->v);
        free(ts->keys);
        json_decref(ts->audit);
        free(ts);
}

/* ------------------------------------------------------------------ */
/* changes (loop thread)                                               */

static void audit(gp_tenants *ts, const char *who, const char *action, const char *target, json_t *old, json_t *new,
                  int64_t now) {
        char at[40];
        gp_time_format(now, at, sizeof(at));
        if (json_array_append_new(ts->audit, json_pack("{s:s,s:s,s:s,s:s,s:o,s:o}", "at", at, "who", who, "action",
                                                       action, "target", target, "old", old ? old : json_null(), "new",
                                                       new ? new : json_null())) == 0)
                ts->audit_seq++;
        while (json_array_size(ts->audit) > GP_AUDIT_MAX)
                json_array_remove(ts->audit, 0);
        ts->meta_audit = true;
}

void gp_tenants_audit(gp_tenants *ts, const char *who, const char *action, const char *target, json_t *old,
                      json_t *new, int64_t now) {
        audit(ts, who, action, target, old, new, now);
}

static char *body_of(json_t *j) {
        char *s = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        return s;
}

static json_t *weights_json(const uint32_t *w) {
        json_t *a = json_array();
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++)
                json_array_append_new(a, json_integer(w[i]));
        return a;
}

void gp_tenants_apply(gp_tenants *ts, cmd *c, int64_t now, int *ret_status, char **ret_body) {
        if (c->kind == CMD_WEIGHTS) {
                const char *who = c->weights.who;
                /* the base weights (time rules with weights still win while in force) */
                json_t *old = weights_json(ts->weights);
                memcpy(ts->weights, c->weights.weights, sizeof(ts->weights));
                sync_sched(ts);
                ts->meta_weights = true;
                audit(ts, who, "scheduler.weights", "P0..P9", old, weights_json(c->weights.weights), now);
                gp_info("tier weights changed by %s", who);
                *ret_status = 200;
                *ret_body = body_of(json_pack("{s:o,s:o}", "weights", weights_json(ts->weights), "in_force",
                                              weights_json(gp_sched_get_config(ts->sched)->weights)));
                return;
        }
        if (c->kind == CMD_TENANT_PUT) {
                const gp_cfg_tenant *rec = c->tenant_put.rec;
                const char *who = c->tenant_put.who;
                gp_cfg_tenant *t = find_mut(ts, rec->id);
                json_t *old = t ? tenant_json(ts, t) : NULL;
                bool created = !t;
                if (created && tenant_add(ts, rec) < 0) {
                        json_decref(old);
                        *ret_status = 503;
                        *ret_body = gp_http_error_body("unavailable", "out of memory");
                        return;
                }
                if (!created)
                        *t = *rec;
                t = find_mut(ts, rec->id);
                sync_sched(ts);
                ts->meta_tenants = true;
                audit(ts, who, created ? "tenant.create" : "tenant.update", t->id, old, tenant_json(ts, t), now);
                gp_info("tenant %s %s by %s", t->id, created ? "created" : "changed", who);
                *ret_status = created ? 201 : 200;
                *ret_body = body_of(tenant_json(ts, t));
                return;
        }
        /* CMD_KEY_CREATE: k->tenant names the tenant, k->key the new key */
        struct cmd_key_create *k = &c->key_create;
        char hash[72];
        gp_sha256_key_hash(k->key, hash);
        if (!find_mut(ts, k->tenant)) {
                *ret_status = 404;
                *ret_body = gp_http_error_body("not_found", "no tenant %s", k->tenant);
                return;
        }
        int rc = key_add(ts, hash, k->tenant, true, now);
        if (rc < 0) {
                *ret_status = rc == -E2BIG ? 409 : 503;
                *ret_body = gp_http_error_body(rc == -E2BIG ? "conflict" : "unavailable", "cannot add a key: %s",
                                               gp_strerror(rc));
                return;
        }
        ts->meta_keys = true;
        char shown[24];
        snprintf(shown, sizeof(shown), "%.14s...", hash);
        audit(ts, k->who, "key.create", k->tenant, NULL, json_string(shown), now);
        gp_info("key %s made for tenant %s by %s", shown, k->tenant, k->who);
        *ret_status = 201;
        *ret_body = body_of(json_pack("{s:s,s:s,s:s,s:s}", "key", k->key, "tenant_id", k->tenant, "hash", hash,
                                      "note", "shown once: only its hash is stored"));
        explicit_bzero(k->key, sizeof(k->key));
}

static int store_json(gp_tenants *ts, const char *key, json_t *j) {
        char *s = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (!s)
                return -ENOMEM;
        int rc = gp_store_meta_set(ts->ws, key, s);
        free(s);
        return rc;
}

int gp_tenants_store(gp_tenants *ts) {
        int rc = 0;
        if (ts->meta_tenants) {
                json_t *a = json_array();
                for (size_t i = 0; i < ts->n; i++)
                        json_array_append_new(a, tenant_store_json(ts, &ts->v[i]));
                rc = store_json(ts, "tenants", a);
        }
        if (rc == 0 && ts->meta_keys) {
                json_t *a = json_array();
                for (size_t i = 0; i < ts->nkeys; i++)
                        if (ts->keys[i].runtime)
                                json_array_append_new(a, json_pack("{s:s,s:s,s:I}", "hash", ts->keys[i].hash, "tenant",
                                                                   ts->keys[i].tenant,
                                                                   "created_ms", (json_int_t)ts->keys[i].created_ms));
                rc = store_json(ts, "keys", a);
        }
        if (rc == 0 && ts->meta_weights)
                rc = store_json(ts, "weights", weights_json(ts->weights));
        if (rc == 0 && ts->meta_audit) /* only the segments of the new entries (audit-log.h) */
                rc = gp_audit_log_store(ts->ws, ts->audit, ts->audit_seq, ts->audit_saved, ts->audit_legacy);
        return rc;
}

json_t *gp_tenants_audit_list(const gp_tenants *ts) {
        return json_deep_copy(ts->audit);
}

bool gp_tenants_pending(const gp_tenants *ts) {
        return ts->meta_tenants || ts->meta_keys || ts->meta_audit || ts->meta_weights;
}

void gp_tenants_stored(gp_tenants *ts) {
        if (ts->meta_audit) {
                ts->audit_saved = ts->audit_seq;
                ts->audit_legacy = false;
        }
        ts->meta_tenants = ts->meta_keys = ts->meta_audit = ts->meta_weights = false;
}

/* ------------------------------------------------------------------ */
/* HTTP                                                                */

static int answer_json(hreq *r, int status, json_t *j) {
        if (j && json_is_object(j))
                json_object_set_new(j, "backend", json_string(r->d->backend));
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        r->status = status;
        r->resp = s ? s : gp_http_error_body("unavailable", "out of memory");
        return 1;
}

static int answer_err(hreq *r, int status, const char *code, const char *msg) {
        r->status = status;
        r->resp = gp_http_error_body(code, "%s", msg);
        return 1;
}

/* Usage now, for GET /api/v1/tenants[/{id}]: running and queued tasks,
 * GPUs in use (a memory share counts its fraction) and the decayed usage
 * fair share orders by. ts->lock held. */
static json_t *usage_json(gp_tenants *ts, const char *id) {
        struct gp_sched_tenant_usage u;
        if (gp_sched_tenant_usage(ts->sched, id, gp_now_ms(), &u) < 0)
                memset(&u, 0, sizeof(u));
        return json_pack("{s:i,s:i,s:o,s:f}", "running", u.running, "queued", u.queued, "gpus",
                         gpus_json(u.gpus_milli), "fair_share_usage_gpu_s", u.fair_share_usage);
}

void gp_tenants_rules_in_force(const gp_tenants *ts, char *buf, size_t size) {
        size_t off = 0;
        buf[0] = '\0';
        for (int i = 0; i < ts->cfg->n_time_rules && off < size; i++)
                if (ts->rules_mask & (1u << i)) {
                        int n = snprintf(buf + off, size - off, "%s%s", off ? ", " : "", ts->cfg->time_rules[i].name);
                        if (n < 0)
                                break;
                        off += (size_t)n;
                }
}

json_t *gp_tenants_stats_json(gp_tenants *ts) {
        json_t *rules = json_array(), *list = json_array();
        for (int i = 0; i < ts->cfg->n_time_rules; i++)
                json_array_append_new(rules, json_pack("{s:s,s:b}", "name", ts->cfg->time_rules[i].name, "in_force",
                                                       (ts->rules_mask & (1u << i)) != 0));
        for (size_t i = 0; i < ts->n; i++) {
                gp_cfg_tenant e = effective(ts, &ts->v[i]);
                json_array_append_new(list, json_pack("{s:s,s:o,s:o}", "id", e.id, "usage", usage_json(ts, e.id), "quota",
                                                    quota_json(&e)));
        }
        return json_pack("{s:o,s:o}", "time_rules", rules, "tenants", list);
}

void gp_tenants_quota_used(gp_tenants *ts, int64_t now_ms, void (*fn)(void *ud, const char *tenant, double pct),
                           void *ud) {
        for (size_t i = 0; i < ts->n; i++) {
                gp_cfg_tenant e = effective(ts, &ts->v[i]);
                struct gp_sched_tenant_usage u;
                if (gp_sched_tenant_usage(ts->sched, e.id, now_ms, &u) < 0)
                        memset(&u, 0, sizeof(u));
                double pct = gp_monitor_quota_used_pct(u.running, e.quota.max_concurrent, u.queued,
                                                       e.quota.max_queued, u.gpus_milli, e.quota.max_gpus_milli);
                if (pct >= 0)
                        fn(ud, e.id, pct);
        }
}

/* The tenant's gateway requests and tokens (zeros before its first
 * request).  d->lock held (the gateway's lock nests inside it). */
static void gateway_usage(gp_daemon *d, json_t *o, const char *id) {
        json_t *u = d->gw ? gp_gw_tenant_json(d->gw, id) : NULL;
        if (!u)
                u = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i}", "requests", 0, "in_flight", 0, "queued", 0, "prompt_tokens",
                              0, "completion_tokens", 0, "tokens", 0);
        json_object_set_new(o, "gateway_usage", u);
}

static int get_tenants(hreq *r, const char *id) {
        gp_daemon *d = r->d;
        pthread_mutex_lock(&d->lock);
        json_t *out;
        if (id) {
                const gp_cfg_tenant *t = gp_tenants_find(d->tenants, id);
                if (!t || (!r->admin && strcmp(r->tenant, id))) {
                        pthread_mutex_unlock(&d->lock);
                        return answer_err(r, 404, "not_found", "no such tenant");
                }
                out = tenant_json(d->tenants, t);
                json_object_set_new(out, "usage", usage_json(d->tenants, t->id));
                json_t *bill = gp_billing_tenant_json(d, t->id);
                if (bill)
                        json_object_set_new(out, "billing", bill);
                gateway_usage(d, out, t->id);
        } else {
                json_t *a = json_array();
                for (size_t i = 0; i < d->tenants->n; i++) {
                        const gp_cfg_tenant *t = &d->tenants->v[i];
                        if (!r->admin && strcmp(r->tenant, t->id))
                                continue;
                        json_t *o = tenant_json(d->tenants, t);
                        json_object_set_new(o, "usage", usage_json(d->tenants, t->id));
                        json_t *bill = gp_billing_tenant_json(d, t->id);
                        if (bill)
                                json_object_set_new(o, "billing", bill);
                        gateway_usage(d, o, t->id);
                        json_array_append_new(a, o);
                }
                out = json_pack("{s:o}", "tenants", a);
        }
        pthread_mutex_unlock(&d->lock);
        return answer_json(r, 200, out);
}

/* who: the command's actor field (the audit log's "who"). */
static int post_cmd_tenants(hreq *r, cmd *c, char *who, size_t size) {
        c->req = r;
        gp_strlcpy(who, r->who, size);
        r->suspended = true;
        MHD_suspend_connection(r->conn);
        gp_daemon_post(r->d, c);
        return 2; /* parked: the loop answers */
}

/* The group a PUT names must be one of the config's (as for a tenant of
 * the file, config.c's check_refs), or the tenant's kind (the default).
 * d->cfg's groups do not change at run time: no lock. */
static int group_check(const gp_config *cfg, const gp_cfg_tenant *t, char *err, size_t errlen) {
        if (gp_config_group_defined(cfg, t->group) || !strcmp(t->group, t->kind))
                return 0;
        size_t o = (size_t)snprintf(err, errlen, "group: \"%.63s\" is not a group of the config (groups:", t->group);
        for (int g = 0; g < cfg->n_groups && o < errlen; g++)
                o += (size_t)snprintf(err + o, errlen - o, " %s", cfg->groups[g].name);
        if (o < errlen)
                snprintf(err + o, errlen - o, "%s; or the tenant's kind, %s)", cfg->n_groups ? "" : " none", t->kind);
        return -EINVAL;
}

static int put_tenant(hreq *r, const char *id) {
        gp_daemon *d = r->d;
        json_error_t je;
        json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, JSON_REJECT_DUPLICATES, &je);
        if (!j) {
                char m[200];
                snprintf(m, sizeof(m), "body is not valid JSON: %s", je.text);
                return answer_err(r, 400, "invalid_request", m);
        }
        const char *bid = json_string_value(json_object_get(j, "id"));
        if (bid && strcmp(bid, id)) {
                json_decref(j);
                return answer_err(r, 400, "invalid_request", "id in the body differs from the path");
        }
        gp_cfg_tenant *t = malloc(sizeof(*t));
        if (!t) {
                json_decref(j);
                return answer_err(r, 503, "unavailable", "out of memory");
        }
        pthread_mutex_lock(&d->lock);
        const gp_cfg_tenant *cur = gp_tenants_find(d->tenants, id);
        if (cur)
                *t = *cur;
        else
                tenant_defaults(t, id);
        bool too_many = !cur && d->tenants->n >= 100000;
        pthread_mutex_unlock(&d->lock);
        char err[256];
        int rc = too_many ? -E2BIG : tenant_from_json(j, t, err, sizeof(err));
        if (rc == 0 && json_object_get(j, "group"))
                rc = group_check(&d->cfg, t, err, sizeof(err));
        json_decref(j);
        if (rc < 0) {
                free(t);
                return answer_err(r, rc == -E2BIG ? 409 : 400, rc == -E2BIG ? "conflict" : "invalid_request",
                                  rc == -E2BIG ? "too many tenants" : err);
        }
        cmd *c = gp_cmd_new(CMD_TENANT_PUT);
        if (!c) {
                free(t);
                return answer_err(r, 503, "unavailable", "out of memory");
        }
        c->tenant_put.rec = t;
        return post_cmd_tenants(r, c, c->tenant_put.who, sizeof(c->tenant_put.who));
}

static int create_key(hreq *r, const char *id) {
        uint8_t raw[24];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return answer_err(r, 503, "unavailable", "no randomness for a key");
        cmd *c = gp_cmd_new(CMD_KEY_CREATE);
        if (!c)
                return answer_err(r, 503, "unavailable", "out of memory");
        struct cmd_key_create *k = &c->key_create;
        gp_strlcpy(k->tenant, id, sizeof(k->tenant));
        static const char hex[] = "0123456789abcdef";
        memcpy(k->key, "gpk_", 4);
        for (size_t i = 0; i < sizeof(raw); i++) {
                k->key[4 + 2 * i] = hex[raw[i] >> 4];
                k->key[5 + 2 * i] = hex[raw[i] & 15];
        }
        k->key[4 + 2 * sizeof(raw)] = '\0';
        return post_cmd_tenants(r, c, k->who, sizeof(k->who));
}

static int put_weights(hreq *r) {
        json_error_t je;
        json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, JSON_REJECT_DUPLICATES, &je);
        json_t *w = j ? json_object_get(j, "weights") : NULL, *v;
        cmd *c = NULL;
        bool ok = json_is_object(j) && json_object_size(j) == 1 && json_is_array(w) &&
                  json_array_size(w) == GP_PRIORITY_LEVELS && (c = gp_cmd_new(CMD_WEIGHTS));
        size_t i;
        json_array_foreach(w, i, v) {
                if (!ok)
                        break;
                ok = json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 1000000;
                if (ok)
                        c->weights.weights[i] = (uint32_t)json_integer_value(v);
        }
        json_decref(j);
        if (!ok) {
                gp_cmd_free(c);
                return answer_err(r, 400, "invalid_request",
                                  "body must be {\"weights\": [10 integers 1..1000000, P0..P9]}");
        }
        return post_cmd_tenants(r, c, c->weights.who, sizeof(c->weights.who));
}

static int get_audit(hreq *r) {
        gp_daemon *d = r->d;
        pthread_mutex_lock(&d->lock);
        json_t *a = gp_tenants_audit_list(d->tenants);
        pthread_mutex_unlock(&d->lock);
        return answer_json(r, 200, json_pack("{s:o}", "audit", a ? a : json_array()));
}

/* this module's rows of the route table (routes.h) */

/* The handlers above answer 1 (r->status and r->resp to send now) or 2
 * (parked: the loop answers): MHD's result. */
static int finish(hreq *r, int how) {
        if (how == 2)
                return MHD_YES;
        char *body = r->resp;
        r->resp = NULL;
        return gp_http_send(r, r->status, body, 0);
}

/* GET /api/v1/tenants[/{id}] ("/tenants/" lists them too) */
static int h_tenants(hreq *r, const gp_route_arg *a) {
        return finish(r, get_tenants(r, a->name[0] ? a->name : NULL));
}

static int h_get_weights(hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_daemon *d = r->d;
        pthread_mutex_lock(&d->lock);
        json_t *o = json_pack("{s:o,s:o}", "weights", weights_json(d->tenants->weights), "in_force",
                              weights_json(gp_sched_get_config(d->sched)->weights));
        pthread_mutex_unlock(&d->lock);
        return finish(r, answer_json(r, 200, o));
}

static int h_put_weights(hreq *r, const gp_route_arg *a) {
        (void)a;
        return finish(r, put_weights(r));
}

static int h_audit(hreq *r, const gp_route_arg *a) {
        (void)a;
        return finish(r, get_audit(r));
}

static int h_put_tenant(hreq *r, const gp_route_arg *a) {
        return finish(r, put_tenant(r, a->name));
}

static int h_admin_tenant(hreq *r, const gp_route_arg *a) {
        return finish(r, get_tenants(r, a->name));
}

static int h_create_key(hreq *r, const gp_route_arg *a) {
        return finish(r, create_key(r, a->name));
}

const gp_route gp_tenants_routes[] = {
        {GP_GET, "/api/v1/tenants", GP_ROUTE_TENANT, h_tenants, NULL, 0},
        {GP_GET, "/api/v1/tenants/{tenant}", GP_ROUTE_TENANT, h_tenants, NULL, GP_ROUTE_BAD_404 | GP_ROUTE_EMPTY_OK},
        {GP_GET, "/admin/scheduler/weights", GP_ROUTE_ADMIN, h_get_weights, NULL, 0},
        {GP_PUT, "/admin/scheduler/weights", GP_ROUTE_ADMIN, h_put_weights, NULL, 0},
        {GP_GET, "/admin/audit", GP_ROUTE_ADMIN, h_audit, NULL, 0},
        {GP_PUT, "/admin/tenants/{tenant}", GP_ROUTE_ADMIN, h_put_tenant, NULL, 0},
        {GP_GET, "/admin/tenants/{tenant}", GP_ROUTE_ADMIN, h_admin_tenant, NULL, 0},
        {GP_POST, "/admin/tenants/{tenant}/keys", GP_ROUTE_ADMIN, h_create_key, NULL, 0},
        {0, NULL, 0, NULL, NULL, 0},
};
