/* array.c - job array specs (see array.h).
 *
 * Two passes over the text: the first checks the grammar and counts the
 * elements (refusing a count above the bound before allocating), the
 * second fills the index list, which is then sorted and made distinct.
 */
#include "core/array.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) {
        if (errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return rc;
}

/* A decimal number of at most 8 digits at *p (advanced); -1 if none. */
static int64_t number(const char **p, const char *end) {
        const char *q = *p;
        int64_t v = 0;
        int digits = 0;
        while (q < end && *q >= '0' && *q <= '9') {
                if (++digits > 8)
                        return -1;
                v = v * 10 + (*q - '0');
                q++;
        }
        if (!digits)
                return -1;
        *p = q;
        return v;
}

typedef struct item {
        int64_t a, b, step;
} item;

/* One ITEM at *p, up to ',' or end. 0 or -EINVAL. */
static int parse_item(const char **p, const char *end, item *it) {
        int64_t a = number(p, end), b = a, step = 1;
        if (a < 0)
                return -EINVAL;
        if (*p < end && **p == '-') {
                (*p)++;
                if ((b = number(p, end)) < 0)
                        return -EINVAL;
                if (*p < end && **p == ':') {
                        (*p)++;
                        if ((step = number(p, end)) < 0)
                                return -EINVAL;
                }
        }
        if (*p < end && **p != ',')
                return -EINVAL;
        it->a = a;
        it->b = b;
        it->step = step;
        return 0;
}

static int cmp_i32(const void *x, const void *y) {
        int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
        return (a > b) - (a < b);
}

int gp_array_spec_parse(const char *s, size_t len, size_t max_elems, gp_array_spec *ret, char *err,
                        size_t errlen) {
        if (errlen)
                err[0] = '\0';
        if (max_elems < 1 || max_elems > GP_ARRAY_MAX_ELEMS)
                max_elems = GP_ARRAY_MAX_ELEMS;
        if (!s || len == 0)
                return fail(err, errlen, -EINVAL, "array: empty (e.g. \"0-99\", \"1,3,5-9\", \"0-15:4%%2\")");
        if (len > GP_ARRAY_SPEC_MAX)
                return fail(err, errlen, -EINVAL, "array: longer than %d bytes", GP_ARRAY_SPEC_MAX);
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (!((c >= '0' && c <= '9') || c == '-' || c == ',' || c == ':' || c == '%'))
                        return fail(err, errlen, -EINVAL,
                                    "array: only digits and - , : %% are allowed (e.g. \"0-99%%10\")");
        }
        const char *end = s + len, *pct = memchr(s, '%', len);
        int limit = 0;
        if (pct) {
                const char *q = pct + 1;
                int64_t l = number(&q, end);
                if (l < 1 || q != end)
                        return fail(err, errlen, -EINVAL, "array: %%N must be a number >= 1 at the end (e.g. \"0-99%%10\")");
                if (l > GP_ARRAY_MAX_ELEMS)
                        l = GP_ARRAY_MAX_ELEMS; /* a cap above the count caps nothing */
                limit = (int)l;
                end = pct;
        }
        /* pass 1: grammar and count */
        size_t count = 0;
        const char *p = s;
        for (;;) {
                const char *start = p;
                item it;
                if (parse_item(&p, end, &it) < 0) {
                        const char *comma = memchr(start, ',', (size_t)(end - start));
                        int w = (int)((comma ? comma : end) - start);
                        return fail(err, errlen, -EINVAL,
                                    "array: bad item '%.*s' (want N, A-B or A-B:STEP, indices 0..%d)",
                                    w > 64 ? 64 : w, start, GP_ARRAY_INDEX_MAX);
                }
                if (it.a > GP_ARRAY_INDEX_MAX || it.b > GP_ARRAY_INDEX_MAX)
                        return fail(err, errlen, -EINVAL, "array: indices must be 0..%d", GP_ARRAY_INDEX_MAX);
                if (it.b < it.a)
                        return fail(err, errlen, -EINVAL, "array: range %lld-%lld goes backwards", (long long)it.a,
                                    (long long)it.b);
                if (it.step < 1)
                        return fail(err, errlen, -EINVAL, "array: step must be >= 1");
                count += (size_t)((it.b - it.a) / it.step + 1);
                if (count > max_elems)
                        return fail(err, errlen, -E2BIG, "array: more than %zu elements (max_array_size)", max_elems);
                if (p == end)
                        break;
                p++; /* ',' */
                if (p == end)
                        return fail(err, errlen, -EINVAL, "array: trailing ','");
        }
        /* pass 2: fill */
        int32_t *idx = malloc(count * sizeof(*idx));
        if (!idx)
                return -ENOMEM;
        size_t n = 0;
        p = s;
        for (;;) {
                item it;
                parse_item(&p, end, &it); /* checked above */
                for (int64_t v = it.a; v <= it.b; v += it.step)
                        idx[n++] = (int32_t)v;
                if (p == end)
                        break;
                p++;
        }
        qsort(idx, n, sizeof(*idx), cmp_i32);
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
                if (m == 0 || idx[m - 1] != idx[i])
                        idx[m++] = idx[i];
        ret->idx = idx;
        ret->n = m;
        ret->limit = limit;
        return 0;
}

void gp_array_spec_done(gp_array_spec *a) {
        if (!a)
                return;
        free(a->idx);
        memset(a, 0, sizeof(*a));
}

/* append with snprintf semantics: *need counts everything, buf keeps what fits */
static void put(char *buf, size_t size, size_t *need, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void put(char *buf, size_t size, size_t *need, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        size_t off = *need < size ? *need : size;
        int k = vsnprintf(size ? buf + off : NULL, size - off, fmt, ap); /* buf may be NULL when size is 0 */
        va_end(ap);
        if (k > 0)
                *need += (size_t)k;
}

size_t gp_array_spec_format(const int32_t *idx, size_t n, int limit, char *buf, size_t size) {
        size_t need = 0;
        if (size)
                buf[0] = '\0';
        for (size_t i = 0; i < n;) {
                size_t j = i + 1;
                int64_t step = j < n ? (int64_t)idx[j] - idx[i] : 0;
                while (j < n && (int64_t)idx[j] - idx[j - 1] == step)
                        j++;
                const char *sep = i ? "," : "";
                if (j - i >= 3) {
                        if (step == 1)
                                put(buf, size, &need, "%s%d-%d", sep, idx[i], idx[j - 1]);
                        else
                                put(buf, size, &need, "%s%d-%d:%lld", sep, idx[i], idx[j - 1], (long long)step);
                        i = j;
                } else {
                        put(buf, size, &need, "%s%d", sep, idx[i]);
                        i++;
                }
        }
        if (limit > 0)
                put(buf, size, &need, "%%%d", limit);
        if (size && need >= size && size >= 4)
                memcpy(buf + size - 4, "...", 4);
        return need;
}

int gp_array_ref_parse(const char *s, int64_t *id, int64_t *index) {
        char head[24];
        const char *us = strchr(s, '_');
        size_t n = us ? (size_t)(us - s) : strlen(s);
        int64_t v, ix = -1;
        if (n == 0 || n >= sizeof(head))
                return -EINVAL;
        memcpy(head, s, n);
        head[n] = '\0';
        if (gp_parse_i64(head, 1, INT64_MAX, &v) < 0 || (us && gp_parse_i64(us + 1, 0, GP_ARRAY_INDEX_MAX, &ix) < 0))
                return -EINVAL;
        *id = v;
        *index = ix;
        return 0;
}
