/* url.c - http:// URLs (see url.h). */
#include "base/url.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int gp_http_url_parse(const char *url, gp_http_url *u) {
        if (strncmp(url, "http://", 7) != 0)
                return -EINVAL;
        const char *a = url + 7, *end = a + strcspn(a, "/");
        if (end == a || (size_t)(end - a) >= 256)
                return -EINVAL;
        u->auth = a;
        u->auth_len = (size_t)(end - a);
        u->path = end;
        const char *colon;
        if (*a == '[') {
                const char *rb = memchr(a, ']', (size_t)(end - a));
                if (!rb || rb == a + 1)
                        return -EINVAL;
                u->host = a + 1;
                u->host_len = (size_t)(rb - a - 1);
                colon = rb + 1 < end ? rb + 1 : NULL;
                if (colon && *colon != ':')
                        return -EINVAL;
        } else {
                colon = memchr(a, ':', (size_t)(end - a));
                u->host = a;
                u->host_len = colon ? (size_t)(colon - a) : (size_t)(end - a);
                if (!u->host_len)
                        return -EINVAL;
        }
        for (size_t i = 0; i < u->host_len; i++) {
                unsigned char ch = (unsigned char)u->host[i];
                if (ch <= ' ' || ch >= 0x7f || ch == '@' || ch == '[' || ch == ']' || ch == '/')
                        return -EINVAL;
        }
        if (colon) {
                size_t n = (size_t)(end - colon - 1);
                if (n < 1 || n > 5)
                        return -EINVAL;
                long p = 0;
                for (size_t i = 0; i < n; i++) {
                        if (colon[1 + i] < '0' || colon[1 + i] > '9')
                                return -EINVAL;
                        p = p * 10 + (colon[1 + i] - '0');
                }
                if (p < 1 || p > 65535)
                        return -EINVAL;
                char *w = u->port + sizeof(u->port); /* "%ld" by hand: this runs once per upstream request */
                *--w = '\0';
                do {
                        *--w = (char)('0' + p % 10);
                        p /= 10;
                } while (p);
                memmove(u->port, w, (size_t)(u->port + sizeof(u->port) - w));
        } else {
                strcpy(u->port, "80");
        }
        for (const char *p = u->path; *p; p++)
                if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || *p == '?' || *p == '#')
                        return -EINVAL;
        return 0;
}


static int hexval(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

size_t gp_url_unescape(char *s) {
        char *w = s;
        const char *r = s;
        while (*r) {
                int hi, lo;
                if (r[0] == '%' && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0) {
                        unsigned char ch = (unsigned char)(hi * 16 + lo);
                        if (ch >= 0x20 && ch != 0x7f && ch != '/') {
                                *w++ = (char)ch;
                                r += 3;
                                continue;
                        }
                }
                *w++ = *r++;
        }
        *w = '\0';
        return (size_t)(w - s);
}
