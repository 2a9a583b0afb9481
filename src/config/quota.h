/* quota.h - a tenant's quota fields, read the same way everywhere.
 *
 * The values live in one type, gp_quota (core/quota.h).  Its four fields
 * (tenants[].quota and time_rules[].quotas in the config file, "quota" of
 * PUT /admin/tenants/{id}) have one table here: name, decimals allowed,
 * range, place in gp_quota.  The config reader and the REST reader both
 * look a key up with gp_quota_field_find, read its value through
 * gp_quota_parse / gp_quota_parse_json_number and store it with
 * gp_quota_set, so they accept the same values and refuse the others with
 * the same words; neither rounds (0.0004 GPUs is refused, never read as 0,
 * which would mean unlimited).  Pure; thread-safe; no allocation.
 */
#ifndef GP_CONFIG_QUOTA_H
#define GP_CONFIG_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/quota.h"

typedef enum {
        GP_QUOTA_MAX_CONCURRENT = 0, /* running tasks, int */
        GP_QUOTA_MAX_QUEUED,         /* queued tasks, int */
        GP_QUOTA_MAX_GPUS,           /* GPUs, stored in 1/1000 GPU (int64_t) */
        GP_QUOTA_GUARANTEED_GPUS,    /* GPUs, stored in 1/1000 GPU (int64_t) */
        GP_QUOTA_NFIELDS
} gp_quota_field;

typedef struct gp_quota_def {
        const char *name;  /* the key inside quota: "max_gpus" */
        int decimals;      /* decimals allowed as written: 0 (a count) or 3 (GPUs) */
        int64_t max;       /* largest value as written; the smallest is 0 (0 = unlimited, guaranteed: none) */
        int64_t scale;     /* stored value = written value * scale (1, or 1000 for GPUs) */
        size_t off;        /* the member of gp_quota */
        size_t size;       /* sizeof the member: an int or an int64_t */
} gp_quota_def;

/* The table, indexed by gp_quota_field. */
extern const gp_quota_def gp_quota_defs[GP_QUOTA_NFIELDS];

/* The field called `name` (n bytes), or -1. */
int gp_quota_field_find(const char *name, size_t n);

/* Read field f's value from its text s[0..n) as written (a YAML plain
 * scalar): a decimal number, no exponent, no '+', at most
 * gp_quota_defs[f].decimals decimals, 0..max.  0 and *ret = the stored
 * value (max_gpus "0.5" -> 500); or -EINVAL (not such a number) / -ERANGE,
 * with why = "expected ..., got TEXT" / "must be between ..., got TEXT"
 * (no key; TEXT shown cut and without control characters). */
int gp_quota_parse(gp_quota_field f, const char *s, size_t n, int64_t *ret, char *why, size_t whylen);

/* The same for a JSON number: an integer is read as its decimal text, a
 * real as the shortest decimal text that reads back as the same double,
 * with at least one decimal ("5.0": refused for a count, as in the file). */
int gp_quota_parse_json_number(gp_quota_field f, bool is_integer, int64_t i, double x, int64_t *ret, char *why,
                               size_t whylen);

/* why = field f's "expected ..., got WHAT" for a value of the wrong type
 * (WHAT: "a string", "a list", ...).  Returns -EINVAL. */
int gp_quota_type_error(gp_quota_field f, const char *what, char *why, size_t whylen);

/* Store a value read by gp_quota_parse* into field f of *q. */
void gp_quota_set(gp_quota *q, gp_quota_field f, int64_t v);

/* (The rule on a whole quota, guaranteed_gpus <= max_gpus, is
 * gp_quota_check in core/quota.h.) */

#endif
