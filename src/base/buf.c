/* buf.c - growing byte buffer; see buf.h for the invariants. */
#include "base/buf.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_LIMIT ((size_t)1 << 30)

void gp_buf_init(gp_buf *b, size_t limit) {
        memset(b, 0, sizeof(*b));
        b->limit = limit ? limit : DEFAULT_LIMIT;
}

void gp_buf_done(gp_buf *b) {
        if (!b)
                return;
        free(b->data);
        b->data = NULL;
        b->len = b->alloc = 0;
}

void gp_buf_reset(gp_buf *b) {
        b->len = 0;
        if (b->data)
                b->data[0] = '\0';
}

static int reserve(gp_buf *b, size_t extra) {
        if (extra > b->limit || b->len > b->limit - extra)
                return -E2BIG;
        size_t need = b->len + extra + 1;
        if (need <= b->alloc)
                return 0;
        size_t n = b->alloc ? b->alloc : 64;
        while (n < need)
                n *= 2;
        char *p = realloc(b->data, n);
        if (!p)
                return -ENOMEM;
        b->data = p;
        b->alloc = n;
        return 0;
}

int gp_buf_append(gp_buf *b, const void *p, size_t n) {
        int r = reserve(b, n);
        if (r < 0)
                return r;
        if (n)
                memcpy(b->data + b->len, p, n);
        b->len += n;
        b->data[b->len] = '\0';
        return 0;
}

int gp_buf_puts(gp_buf *b, const char *s) {
        return gp_buf_append(b, s, strlen(s));
}

int gp_buf_vprintf(gp_buf *b, const char *fmt, va_list ap) {
        va_list ap2;
        va_copy(ap2, ap);
        int n = vsnprintf(NULL, 0, fmt, ap2);
        va_end(ap2);
        if (n < 0)
                return -EINVAL;
        int r = reserve(b, (size_t)n);
        if (r < 0)
                return r;
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        b->len += (size_t)n;
        return 0;
}

int gp_buf_printf(gp_buf *b, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = gp_buf_vprintf(b, fmt, ap);
        va_end(ap);
        return r;
}

char *gp_buf_steal(gp_buf *b) {
        char *p = b->data;
        if (!p)
                p = strdup("");
        b->data = NULL;
        b->len = b->alloc = 0;
        return p;
}

int gp_buf_json_str(gp_buf *b, const char *s) {
        static const char hex[] = "0123456789abcdef";
        int r = gp_buf_append(b, "\"", 1);
        const char *run = s;
        for (const char *p = s; r == 0 && *p; p++) {
                unsigned char c = (unsigned char)*p;
                if (c >= 0x20 && c != '"' && c != '\\')
                        continue;
                r = gp_buf_append(b, run, (size_t)(p - run));
                if (r == 0) {
                        char esc[7] = {'\\', (char)c, 0, 0, 0, 0, 0};
                        size_t n = 2;
                        switch (c) {
                        case '"': case '\\': break;
                        case '\n': esc[1] = 'n'; break;
                        case '\t': esc[1] = 't'; break;
                        case '\r': esc[1] = 'r'; break;
                        default:
                                esc[1] = 'u';
                                esc[2] = esc[3] = '0';
                                esc[4] = hex[c >> 4];
                                esc[5] = hex[c & 15];
                                n = 6;
                        }
                        r = gp_buf_append(b, esc, n);
                }
                run = p + 1;
        }
        if (r == 0)
                r = gp_buf_puts(b, run);
        if (r == 0)
                r = gp_buf_append(b, "\"", 1);
        return r;
}

int gp_buf_json_field_str(gp_buf *b, const char *key, const char *v) {
        int r = gp_buf_printf(b, ",\"%s\":", key);
        return r ? r : gp_buf_json_str(b, v);
}

int gp_buf_json_field_time(gp_buf *b, const char *key, int64_t ms) {
        char ts[40];
        if (ms <= 0)
                return gp_buf_printf(b, ",\"%s\":null", key);
        gp_time_format(ms, ts, sizeof(ts));
        return gp_buf_printf(b, ",\"%s\":\"%s\"", key, ts);
}
