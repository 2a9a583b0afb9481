/* url.h - the http:// URLs gpupool reaches (gateway upstreams):
 * "http://HOST[:PORT][/PATH]", HOST a name, an IPv4 or a [IPv6] literal,
 * PORT 1..65535 (default 80), no user info, query or fragment; and the
 * percent-decoding of the paths and query values gpupool serves.  Pure. */
#ifndef GP_BASE_URL_H
#define GP_BASE_URL_H

#include <stddef.h>

typedef struct gp_http_url {
        const char *auth;          /* host[:port] as written (the Host header) */
        size_t auth_len;
        const char *host;          /* without IPv6 brackets */
        size_t host_len;
        char port[8];              /* decimal, "80" when not written */
        const char *path;          /* "" or "/prefix" (the rest of the URL) */
} gp_http_url;

/* Split url; the pointers point into it.  0, or -EINVAL. */
int gp_http_url_parse(const char *url, gp_http_url *u);

/* Decode %XX escapes of the NUL-terminated s in place, except the escapes
 * of a control character (%00..%1F, %7F) and of '/' (%2F), which stay as
 * written: so an escape can neither cut a path or a value short (%00) nor
 * add a path segment (%2F); the '%' left in place makes the ids, numbers
 * and names read from it invalid.  A '%' not followed by two hex digits
 * stays too.  Returns the new length.  Used as the HTTP server's
 * unescaper for paths and query arguments. */
size_t gp_url_unescape(char *s);

#endif
