/* util.c - time, strict parsing, strings. */
#include "base/util.h"
#include "base/text.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t gp_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t gp_mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void gp_time_format(int64_t ms, char *out, size_t size) {
        if (ms <= 0) {
                if (size)
                        out[0] = '\0';
                return;
        }
        time_t sec = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&sec, &tm);
        snprintf(out, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

static int digits(const char **p, int n, int *ret) {
        int v = 0;
        for (int i = 0; i < n; i++) {
                char c = (*p)[i];
                if (c < '0' || c > '9')
                        return -EINVAL;
                v = v * 10 + (c - '0');
        }
        *p += n;
        *ret = v;
        return 0;
}

int gp_time_parse(const char *s, int64_t *ret_ms) {
        int Y, M, D, h, m, sec, frac = 0;
        const char *p = s;
        if (digits(&p, 4, &Y) || *p++ != '-' || digits(&p, 2, &M) || *p++ != '-' ||
            digits(&p, 2, &D) || (*p != 'T' && *p != 't' && *p != ' '))
                return -EINVAL;
        p++;
        if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &m) || *p++ != ':' ||
            digits(&p, 2, &sec))
                return -EINVAL;
        if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
                return -EINVAL;
        if (*p == '.') {
                p++;
                int nd = 0;
                while (*p >= '0' && *p <= '9') {
                        if (nd < 3)
                                frac = frac * 10 + (*p - '0');
                        nd++;
                        p++;
                }
                if (nd == 0 || nd > 9)
                        return -EINVAL;
                for (; nd < 3; nd++)
                        frac *= 10;
        }
        int off = 0;
        if (*p == 'Z' || *p == 'z') {
                p++;
        } else if (*p == '+' || *p == '-') {
                int sign = *p == '-' ? -1 : 1, oh, om;
                p++;
                if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om) || oh > 23 || om > 59)
                        return -EINVAL;
                off = sign * (oh * 60 + om);
        } else {
                return -EINVAL;
        }
        if (*p)
                return -EINVAL;
        struct tm tm = {.tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D,
                        .tm_hour = h, .tm_min = m, .tm_sec = sec};
        time_t t = timegm(&tm);
        *ret_ms = ((int64_t)t - (int64_t)off * 60) * 1000 + frac;
        return 0;
}

int gp_parse_i64(const char *s, int64_t min, int64_t max, int64_t *ret) {
        if (!s || !*s)
                return -EINVAL;
        const char *p = s;
        if (*p == '-')
                p++;
        if (*p < '0' || *p > '9')
                return -EINVAL;
        errno = 0;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (*end)
                return -EINVAL;
        if (errno == ERANGE || v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

size_t gp_strlcpy(char *dst, const char *src, size_t size) {
        size_t n = strlen(src);
        if (size) {
                size_t c = n < size - 1 ? n : size - 1;
                memcpy(dst, src, c);
                dst[c] = '\0';
        }
        return n;
}

bool gp_id_ok(const char *s, size_t n) {
        if (n == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
                      s[i] == '-' || s[i] == '_' || s[i] == '.'))
                        return false;
        return true;
}

bool gp_str_is_clean(const char *s, size_t len) {
        return gp_text_valid(s, len, len);
}

int gp_thread_detached(void *(*fn)(void *), void *arg, size_t stack) {
        pthread_attr_t at;
        pthread_t t;
        if (pthread_attr_init(&at) != 0)
                return -ENOMEM;
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, stack);
        int e = pthread_create(&t, &at, fn, arg);
        pthread_attr_destroy(&at);
        return -e;
}
