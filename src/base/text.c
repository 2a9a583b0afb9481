/* text.c - the text rule of text.h: one pass over the bytes, decoding
 * UTF-8 and refusing the first character that breaks the rule. */
#include "base/text.h"

#include <errno.h>

#define WHY_CONTROL "contains control characters (no tab, newline, DEL or U+0080..U+009F)"
#define WHY_UTF8 "is not valid UTF-8"
#define WHY_SEPARATOR "contains a line or paragraph separator (U+2028, U+2029)"
#define WHY_BIDI "contains a bidirectional control character (U+202A..U+202E, U+2066..U+2069)"
#define WHY_LONG "is too long"

static int refuse(int rc, const char *why, const char **ret_why) {
        if (ret_why)
                *ret_why = why;
        return rc;
}

int gp_text_check(const char *s, size_t len, size_t max, const char **ret_why) {
        if (len > max)
                return refuse(-E2BIG, WHY_LONG, ret_why);
        if (len && !s)
                return refuse(-EINVAL, WHY_UTF8, ret_why);
        const unsigned char *p = (const unsigned char *)s, *e = p + len;
        while (p < e) {
                unsigned c = *p;
                if (c < 0x80) {
                        if (c < 0x20 || c == 0x7f)
                                return refuse(-EINVAL, WHY_CONTROL, ret_why);
                        p++;
                        continue;
                }
                int n;
                unsigned cp;
                if ((c & 0xe0) == 0xc0) {
                        n = 1;
                        cp = c & 0x1f;
                } else if ((c & 0xf0) == 0xe0) {
                        n = 2;
                        cp = c & 0x0f;
                } else if ((c & 0xf8) == 0xf0) {
                        n = 3;
                        cp = c & 0x07;
                } else {
                        return refuse(-EINVAL, WHY_UTF8, ret_why);
                }
                if (e - p <= n)
                        return refuse(-EINVAL, WHY_UTF8, ret_why);
                for (int i = 1; i <= n; i++) {
                        if ((p[i] & 0xc0) != 0x80)
                                return refuse(-EINVAL, WHY_UTF8, ret_why);
                        cp = (cp << 6) | (p[i] & 0x3f);
                }
                if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
                    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                        return refuse(-EINVAL, WHY_UTF8, ret_why);
                if (cp <= 0x9f)
                        return refuse(-EINVAL, WHY_CONTROL, ret_why);
                if (cp == 0x2028 || cp == 0x2029)
                        return refuse(-EINVAL, WHY_SEPARATOR, ret_why);
                if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
                        return refuse(-EINVAL, WHY_BIDI, ret_why);
                p += n + 1;
        }
        return 0;
}

bool gp_text_valid(const char *s, size_t len, size_t max) {
        return gp_text_check(s, len, max, NULL) == 0;
}
