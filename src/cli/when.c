/* when.c - times as sacct's -S/-E take them (gp_cli_when_parse, cli-int.h).
 * Invariant: a time is accepted whole or not at all; nothing but the local
 * time zone (for dates without one) is read from outside. */
#include "cli/cli-int.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/util.h"

#define WHEN_MAX 64 /* longest text looked at */

/* Local midnight of the day holding now_ms. */
static int midnight(int64_t now_ms, int64_t *ret) {
        time_t s = (time_t)(now_ms / 1000);
        struct tm tm;
        if (!localtime_r(&s, &tm))
                return -EINVAL;
        tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
        tm.tm_isdst = -1;
        time_t m = mktime(&tm);
        if (m == (time_t)-1)
                return -EINVAL;
        *ret = (int64_t)m * 1000;
        return 0;
}

/* now-N[UNIT] */
static int relative(const char *s, int64_t now_ms, int64_t *ret) {
        static const struct {
                const char *name;
                int64_t ms;
        } units[] = {{"", 1000},         {"s", 1000},           {"seconds", 1000},        {"m", 60000},
                     {"minutes", 60000}, {"h", 3600000},        {"hours", 3600000},       {"d", 86400000},
                     {"days", 86400000}, {"w", 7 * 86400000LL}, {"weeks", 7 * 86400000LL}};
        size_t n = strspn(s, "0123456789");
        char num[20];
        int64_t v;
        if (n == 0 || n >= sizeof(num))
                return -EINVAL;
        memcpy(num, s, n);
        num[n] = '\0';
        if (gp_parse_i64(num, 0, 100LL * 366 * 86400, &v) < 0)
                return -EINVAL;
        for (size_t i = 0; i < GP_ARRAY_SIZE(units); i++)
                if (!strcmp(s + n, units[i].name)) {
                        if (v > now_ms / units[i].ms)
                                return -EINVAL; /* before the epoch */
                        *ret = now_ms - v * units[i].ms;
                        return 0;
                }
        return -EINVAL;
}

/* YYYY-MM-DD[THH:MM[:SS]] in local time. */
static int local_date(const char *s, int64_t *ret) {
        struct tm tm;
        memset(&tm, 0, sizeof(tm));
        const char *end = strptime(s, "%Y-%m-%d", &tm);
        if (!end || end - s != 10)
                return -EINVAL;
        if (*end == 'T' || *end == ' ') {
                const char *e2 = strptime(end + 1, "%H:%M:%S", &tm);
                if (!e2) {
                        tm.tm_sec = 0;
                        e2 = strptime(end + 1, "%H:%M", &tm);
                }
                if (!e2 || *e2)
                        return -EINVAL;
        } else if (*end) {
                return -EINVAL;
        }
        tm.tm_isdst = -1;
        time_t t = mktime(&tm);
        if (t == (time_t)-1 || t < 0)
                return -EINVAL;
        *ret = (int64_t)t * 1000;
        return 0;
}

int gp_cli_when_parse(const char *s, int64_t now_ms, int64_t *ret_ms) {
        int64_t v;
        if (!s || strnlen(s, WHEN_MAX + 1) > WHEN_MAX || now_ms < 0)
                return -EINVAL;
        int r;
        if (!strcmp(s, "now"))
                v = now_ms, r = 0;
        else if (!strcmp(s, "today") || !strcmp(s, "midnight"))
                r = midnight(now_ms, &v);
        else if (!strncmp(s, "now-", 4))
                r = relative(s + 4, now_ms, &v);
        else if ((r = local_date(s, &v)) < 0)
                r = gp_time_parse(s, &v) < 0 || v < 0 ? -EINVAL : 0;
        if (r < 0)
                return -EINVAL;
        *ret_ms = v;
        return 0;
}
