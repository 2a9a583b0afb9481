/* labels.c - node labels in canonical form (see labels.h). */
#include "base/labels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool part_ok(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                      c == '_' || c == '/' || c == '-'))
                        return false;
        }
        return true;
}

bool gp_label_key_ok(const char *s, size_t n) {
        return n >= 1 && n <= GP_LABEL_PART_MAX && part_ok(s, n);
}

bool gp_label_value_ok(const char *s, size_t n) {
        return n <= GP_LABEL_PART_MAX && part_ok(s, n);
}

typedef struct span {
        const char *k, *v;
        size_t kn, vn;
} span;

static int span_cmp(const void *a, const void *b) {
        const span *x = a, *y = b;
        size_t n = x->kn < y->kn ? x->kn : y->kn;
        int c = memcmp(x->k, y->k, n);
        if (c)
                return c;
        return x->kn < y->kn ? -1 : x->kn > y->kn;
}

int gp_labels_canon(const char *in, char *out, size_t size, char *err, size_t errlen) {
        span s[GP_LABELS_N];
        size_t n = 0, len = strlen(in);
        for (size_t i = 0; i < len;) {
                const char *item = in + i;
                const char *end = memchr(item, ',', len - i);
                size_t ilen = end ? (size_t)(end - item) : len - i;
                const char *eq = memchr(item, '=', ilen);
                if (n == GP_LABELS_N) {
                        snprintf(err, errlen, "more than %d labels", GP_LABELS_N);
                        return -EINVAL;
                }
                if (!eq) {
                        snprintf(err, errlen, "label %zu is not key=value", n + 1);
                        return -EINVAL;
                }
                s[n] = (span){.k = item, .kn = (size_t)(eq - item), .v = eq + 1, .vn = ilen - (size_t)(eq - item) - 1};
                if (!gp_label_key_ok(s[n].k, s[n].kn)) {
                        snprintf(err, errlen, "label %zu: key must be 1..%d of [A-Za-z0-9._/-]", n + 1,
                                 GP_LABEL_PART_MAX);
                        return -EINVAL;
                }
                if (!gp_label_value_ok(s[n].v, s[n].vn)) {
                        snprintf(err, errlen, "label %.*s: value must be 0..%d of [A-Za-z0-9._/-]", (int)s[n].kn,
                                 s[n].k, GP_LABEL_PART_MAX);
                        return -EINVAL;
                }
                n++;
                i += ilen + 1;
                if (end && i == len) {
                        snprintf(err, errlen, "labels end with ','");
                        return -EINVAL;
                }
        }
        if (n > 1)
                qsort(s, n, sizeof(*s), span_cmp);
        size_t need = 1;
        for (size_t i = 0; i < n; i++) {
                if (i > 0 && span_cmp(&s[i - 1], &s[i]) == 0) {
                        snprintf(err, errlen, "label %.*s given twice", (int)s[i].kn, s[i].k);
                        return -EINVAL;
                }
                need += s[i].kn + 1 + s[i].vn + (i > 0);
        }
        if (need > size) {
                snprintf(err, errlen, "labels take %zu bytes, at most %zu", need - 1, size ? size - 1 : 0);
                return -EINVAL;
        }
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        out[o++] = ',';
                memcpy(out + o, s[i].k, s[i].kn);
                o += s[i].kn;
                out[o++] = '=';
                memcpy(out + o, s[i].v, s[i].vn);
                o += s[i].vn;
        }
        out[o] = '\0';
        return 0;
}

bool gp_labels_next(const char *canon, size_t *pos, const char **ret_key, size_t *ret_klen, const char **ret_val,
                    size_t *ret_vlen) {
        const char *p = canon + *pos;
        if (!*p)
                return false;
        size_t ilen = strcspn(p, ",");
        const char *eq = memchr(p, '=', ilen);
        if (!eq)
                return false;
        *ret_key = p;
        *ret_klen = (size_t)(eq - p);
        *ret_val = eq + 1;
        *ret_vlen = ilen - (size_t)(eq - p) - 1;
        *pos += ilen + (p[ilen] == ',');
        return true;
}
