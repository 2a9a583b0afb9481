/* base64.c - strict standard base64 (see base64.h). */
#include "base/base64.h"

#include <errno.h>
#include <stdint.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t gp_base64_encoded_len(size_t n) {
        return (n + 2) / 3 * 4;
}

size_t gp_base64_decoded_max(size_t len) {
        return len / 4 * 3;
}

int gp_base64_encode(const void *src, size_t n, char *out, size_t out_size) {
        const uint8_t *p = src;
        if (n > ((size_t)-1 - 3) / 4 * 3 || out_size < gp_base64_encoded_len(n) + 1)
                return -E2BIG;
        size_t o = 0;
        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t)p[i] << 16;
                if (i + 1 < n)
                        v |= (uint32_t)p[i + 1] << 8;
                if (i + 2 < n)
                        v |= p[i + 2];
                out[o++] = alphabet[(v >> 18) & 63];
                out[o++] = alphabet[(v >> 12) & 63];
                out[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
                out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
        }
        out[o] = '\0';
        return 0;
}

static int sym(char c) {
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

int gp_base64_decode(const char *s, size_t len, void *out, size_t out_size, size_t *ret_n) {
        uint8_t *o = out;
        if (len % 4)
                return -EINVAL;
        size_t need = gp_base64_decoded_max(len) - (len && s[len - 1] == '=') - (len > 1 && s[len - 2] == '=');
        if (out_size < need)
                return -E2BIG;
        size_t n = 0;
        for (size_t i = 0; i < len; i += 4) {
                int last = i + 4 == len;
                int a = sym(s[i]), b = sym(s[i + 1]), c = sym(s[i + 2]), d = sym(s[i + 3]);
                if (a < 0 || b < 0)
                        return -EINVAL;
                if (c < 0 || d < 0) {
                        /* only "xx==" or "xxx=" at the very end */
                        if (!last || s[i + 3] != '=' || (c < 0 && s[i + 2] != '='))
                                return -EINVAL;
                        if (c < 0) {
                                if (b & 15)
                                        return -EINVAL;
                                o[n++] = (uint8_t)(a << 2 | b >> 4);
                        } else {
                                if (c & 3)
                                        return -EINVAL;
                                o[n++] = (uint8_t)(a << 2 | b >> 4);
                                o[n++] = (uint8_t)((b & 15) << 4 | c >> 2);
                        }
                        break;
                }
                o[n++] = (uint8_t)(a << 2 | b >> 4);
                o[n++] = (uint8_t)((b & 15) << 4 | c >> 2);
                o[n++] = (uint8_t)((c & 3) << 6 | d);
        }
        *ret_n = n;
        return 0;
}
