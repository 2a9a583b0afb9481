/* units.c - durations and memory sizes (see units.h).
 *
 * Invariants: every number is checked against the caller's bound before it
 * is multiplied, so no input overflows; a string is accepted only when all
 * of it was read.
 */
#include "base/units.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* Digits s[0..n) as a number <= limit: 0, -EINVAL (no digits, not a
 * digit), -ERANGE (> limit). */
static int digits(const char *s, size_t n, int64_t limit, int64_t *ret) {
        int64_t v = 0;
        if (n == 0)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                int d = s[i] - '0';
                if (d > limit || v > (limit - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        *ret = v;
        return 0;
}

/* v * mul + add within max: 0 or -ERANGE. */
static int scale(int64_t v, int64_t mul, int64_t add, int64_t max, int64_t *ret) {
        if (v > (max - add) / mul)
                return -ERANGE;
        *ret = v * mul + add;
        return 0;
}

/* Slurm's colon and dash forms.  The fields after the first are bounded
 * (59 for minutes and seconds, 23 for hours after a day). */
static int slurm_time(const char *s, size_t n, int64_t max, int64_t *ret) {
        const char *dash = memchr(s, '-', n);
        int64_t days = 0, f[3];
        size_t nf = 0;
        int r;
        if (dash) {
                if ((r = digits(s, (size_t)(dash - s), max / 86400, &days)) < 0)
                        return r;
                n -= (size_t)(dash - s) + 1;
                s = dash + 1;
        }
        /* split the rest at ':' into 1..3 fields */
        for (;;) {
                const char *colon = memchr(s, ':', n);
                size_t len = colon ? (size_t)(colon - s) : n;
                if (nf == 3)
                        return -EINVAL;
                /* the first field of a form without days is unbounded */
                int64_t lim = (nf == 0 && !dash) ? max : 59;
                if (nf == 0 && dash)
                        lim = 23;
                if ((r = digits(s, len, lim, &f[nf])) < 0)
                        return r == -ERANGE && lim < max ? -EINVAL : r;
                nf++;
                if (!colon)
                        break;
                n -= len + 1;
                s = colon + 1;
        }
        int64_t secs;
        if (dash) {
                /* D-HH, D-HH:MM, D-HH:MM:SS */
                secs = f[0] * 3600 + (nf > 1 ? f[1] * 60 : 0) + (nf > 2 ? f[2] : 0);
                return scale(days, 86400, secs, max, ret);
        }
        if (nf == 2) /* MM:SS */
                return scale(f[0], 60, f[1], max, ret);
        if (nf == 3) /* HH:MM:SS */
                return scale(f[0], 3600, f[1] * 60 + f[2], max, ret);
        return -EINVAL; /* a bare number is not handled here */
}

int gp_duration_parse(const char *s, int flags, int64_t max, int64_t *ret) {
        static const struct {
                char unit;
                int64_t mul;
        } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
        if (!s || max < 0)
                return -EINVAL;
        size_t n = strnlen(s, GP_UNITS_MAX_LEN + 1);
        if (n == 0 || n > GP_UNITS_MAX_LEN)
                return -EINVAL;
        int64_t v;
        int r;
        if (memchr(s, ':', n) || memchr(s, '-', n)) {
                if ((r = slurm_time(s, n, max, &v)) < 0)
                        return r;
                *ret = v;
                return 0;
        }
        int64_t mul = flags == GP_DUR_PLAIN_MINUTES ? 60 : 1;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
                if (n > 1 && s[n - 1] == units[i].unit) {
                        mul = units[i].mul;
                        n--;
                        break;
                }
        if ((r = digits(s, n, max, &v)) < 0 || (r = scale(v, mul, 0, max, &v)) < 0)
                return r;
        *ret = v;
        return 0;
}

int gp_size_mb_parse(const char *s, int64_t max_mb, int64_t *ret) {
        if (!s || max_mb < 0)
                return -EINVAL;
        size_t n = strnlen(s, GP_UNITS_MAX_LEN + 1);
        if (n == 0 || n > GP_UNITS_MAX_LEN)
                return -EINVAL;
        /* optional "B" or "iB" after a unit letter */
        if (n >= 3 && s[n - 1] == 'B' && s[n - 2] == 'i')
                n -= 2;
        else if (n >= 2 && (s[n - 1] == 'B' || s[n - 1] == 'b') && !(s[n - 2] >= '0' && s[n - 2] <= '9'))
                n -= 1;
        int64_t v;
        int r;
        char u = s[n - 1];
        if (u >= 'a' && u <= 'z')
                u = (char)(u - 'a' + 'A');
        switch (u) {
        case 'K': /* KiB: rounded up to a whole MiB */
                if ((r = digits(s, n - 1, INT64_MAX - 1023, &v)) < 0)
                        return r;
                v = (v + 1023) / 1024;
                if (v > max_mb)
                        return -ERANGE;
                *ret = v;
                return 0;
        case 'M':
                r = digits(s, n - 1, max_mb, &v);
                break;
        case 'G':
                if ((r = digits(s, n - 1, max_mb / 1024, &v)) == 0)
                        v *= 1024;
                break;
        case 'T':
                if ((r = digits(s, n - 1, max_mb / (1024 * 1024), &v)) == 0)
                        v *= 1024 * 1024;
                break;
        default:
                if (n != strnlen(s, GP_UNITS_MAX_LEN + 1))
                        return -EINVAL; /* "B" alone after digits */
                r = digits(s, n, max_mb, &v);
                break;
        }
        if (r < 0)
                return r;
        *ret = v;
        return 0;
}
