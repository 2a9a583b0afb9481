/* quota.c - the quota field table and its one reader (see quota.h).
 * Invariant: every refusal text is made here, so the config file and the
 * REST API say the same thing about the same value. */
#include "config/quota.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define Q(m) offsetof(gp_quota, m), sizeof(((gp_quota *)0)->m)

const gp_quota_def gp_quota_defs[GP_QUOTA_NFIELDS] = {
        [GP_QUOTA_MAX_CONCURRENT] = {"max_concurrent", 0, 1000000, 1, Q(max_concurrent)},
        [GP_QUOTA_MAX_QUEUED] = {"max_queued", 0, 1000000, 1, Q(max_queued)},
        [GP_QUOTA_MAX_GPUS] = {"max_gpus", 3, 1000000, 1000, Q(max_gpus_milli)},
        [GP_QUOTA_GUARANTEED_GPUS] = {"guaranteed_gpus", 3, 1000000, 1000, Q(guaranteed_gpus_milli)},
};

void gp_quota_set(gp_quota *q, gp_quota_field f, int64_t v) {
        char *p = (char *)q + gp_quota_defs[f].off;
        if (gp_quota_defs[f].size == sizeof(int))
                *(int *)p = (int)v; /* in range: gp_quota_parse's max fits an int */
        else
                *(int64_t *)p = v;
}

#define MAX_TEXT 32 /* longest number text read: more is refused, never cut */

int gp_quota_field_find(const char *name, size_t n) {
        for (int i = 0; i < GP_QUOTA_NFIELDS; i++)
                if (strlen(gp_quota_defs[i].name) == n && !memcmp(gp_quota_defs[i].name, name, n))
                        return i;
        return -1;
}

/* A printable, bounded copy of a user's text for a message. */
static const char *shown(const char *s, size_t n, char *out, size_t size) {
        size_t o = 0, max = size - 4;
        for (size_t i = 0; i < n && o < max; i++) {
                unsigned char ch = (unsigned char)s[i];
                out[o++] = (ch < 0x20 || ch >= 0x7f) ? '?' : (char)ch;
        }
        if (n > max) {
                memcpy(out + o, "...", 3);
                o += 3;
        }
        out[o] = '\0';
        return out;
}

static int syntax(gp_quota_field f, const char *got, char *why, size_t whylen) {
        const gp_quota_def *d = &gp_quota_defs[f];
        if (d->decimals == 0)
                snprintf(why, whylen, "expected a whole number between 0 and %" PRId64 ", got %s", d->max, got);
        else
                snprintf(why, whylen, "expected a number of GPUs with at most %d decimals (e.g. 8 or 0.5), got %s",
                         d->decimals, got);
        return -EINVAL;
}

int gp_quota_type_error(gp_quota_field f, const char *what, char *why, size_t whylen) {
        return syntax(f, what, why, whylen);
}

int gp_quota_parse(gp_quota_field f, const char *s, size_t n, int64_t *ret, char *why, size_t whylen) {
        const gp_quota_def *d = &gp_quota_defs[f];
        char got[48];
        shown(s, n, got, sizeof(got));
        size_t i = 0;
        bool neg = false;
        int64_t whole = 0, frac = 0;
        int nd = 0;
        if (n == 0 || n > MAX_TEXT || memchr(s, '\0', n))
                return syntax(f, got, why, whylen);
        if (s[0] == '-') {
                neg = true;
                i++;
        }
        size_t start = i;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
                if (whole > INT64_MAX / 100) /* far out of range: keep counting digits, stop growing */
                        continue;
                whole = whole * 10 + (s[i] - '0');
        }
        if (i == start || (s[start] == '0' && i - start > 1)) /* no digits; 010 (octal in YAML 1.1) */
                return syntax(f, got, why, whylen);
        if (i < n && s[i] == '.') {
                for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++, nd++)
                        if (nd < 18)
                                frac = frac * 10 + (s[i] - '0');
                if (nd == 0)
                        return syntax(f, got, why, whylen);
        }
        if (i != n || nd > d->decimals)
                return syntax(f, got, why, whylen);
        bool zero = whole == 0 && frac == 0;
        if ((neg && !zero) || whole > d->max || (whole == d->max && frac > 0)) {
                if (d->decimals == 0)
                        snprintf(why, whylen, "must be between 0 and %" PRId64 ", got %s", d->max, got);
                else
                        snprintf(why, whylen, "must be between 0 and %" PRId64 " GPUs, got %s", d->max, got);
                return -ERANGE;
        }
        for (int k = nd; k < d->decimals; k++)
                frac *= 10;
        *ret = whole * d->scale + frac;
        return 0;
}

int gp_quota_parse_json_number(gp_quota_field f, bool is_integer, int64_t i, double x, int64_t *ret, char *why,
                               size_t whylen) {
        char text[64];
        if (is_integer) {
                snprintf(text, sizeof(text), "%" PRId64, i);
        } else if (!isfinite(x) || fabs(x) >= 1e15) {
                snprintf(text, sizeof(text), "%g", x);
                if (isfinite(x) && x > 0) {
                        if (gp_quota_defs[f].decimals == 0)
                                snprintf(why, whylen, "must be between 0 and %" PRId64 ", got %s",
                                         gp_quota_defs[f].max, text);
                        else
                                snprintf(why, whylen, "must be between 0 and %" PRId64 " GPUs, got %s",
                                         gp_quota_defs[f].max, text);
                        return -ERANGE;
                }
                return syntax(f, text, why, whylen);
        } else {
                /* the shortest fixed-point text that reads back as x, one decimal at least */
                int d = 1;
                for (; d <= 20; d++) {
                        snprintf(text, sizeof(text), "%.*f", d, x);
                        if (strtod(text, NULL) == x)
                                break;
                }
                if (d > 20)
                        snprintf(text, sizeof(text), "%.20f", x);
        }
        return gp_quota_parse(f, text, strlen(text), ret, why, whylen);
}
