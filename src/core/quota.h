/* quota.h - a tenant's quota: one type for config, core, time rules, API.
 *
 * gp_quota is embedded whole in every struct that holds a tenant's quota
 * (gp_cfg_tenant, gp_cfg_rule_quota in config/config.h,
 * gp_sched_tenant_cfg in core/sched.h) and copied whole between them.  A
 * time rule's quota is an overlay: a field of -1 (GP_QUOTA_UNCHANGED) keeps
 * the tenant's own value (gp_quota_overlay).  The names, ranges and the
 * text reader of the fields are config/quota.h's table; the rules on a
 * whole quota are here, so the core can use them without the config.
 * Pure; thread-safe; no allocation.
 */
#ifndef GP_CORE_QUOTA_H
#define GP_CORE_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gp_quota {
        int max_concurrent;            /* running tasks, 0 = unlimited */
        int max_queued;                /* queued tasks, 0 = unlimited */
        int64_t max_gpus_milli;        /* GPU share in 1/1000 GPU, 0 = unlimited */
        int64_t guaranteed_gpus_milli; /* 1/1000 GPU, 0 = none */
} gp_quota;

/* In an overlay (a time rule's quota): this field keeps the value below. */
#define GP_QUOTA_UNCHANGED (-1)

/* An overlay that changes nothing (every field GP_QUOTA_UNCHANGED). */
#define GP_QUOTA_OVERLAY_NONE                                                                   \
        ((gp_quota){.max_concurrent = GP_QUOTA_UNCHANGED, .max_queued = GP_QUOTA_UNCHANGED,     \
                    .max_gpus_milli = GP_QUOTA_UNCHANGED, .guaranteed_gpus_milli = GP_QUOTA_UNCHANGED})

/* Is every field >= 0?  (The core's own rule: gp_sched_tenant_set.) */
bool gp_quota_nonneg(const gp_quota *q);

/* A tenant's quota: every field >= 0, and guaranteed_gpus not above
 * max_gpus unless max_gpus is 0 (unlimited).  0, or -EINVAL with why
 * ("quota.guaranteed_gpus is above quota.max_gpus"). */
int gp_quota_check(const gp_quota *q, char *why, size_t whylen);

/* Lay overlay `over` on *q: each field of `over` that is not
 * GP_QUOTA_UNCHANGED (i.e. >= 0) replaces q's. */
void gp_quota_overlay(gp_quota *q, const gp_quota *over);

#endif
