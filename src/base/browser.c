/* browser.c - the cross-site request check (see browser.h).  Pure: it
 * reads only its arguments. */
#include "base/browser.h"

#include "base/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* An origin or a Host header split: host without brackets, port 0 when
 * not written. */
typedef struct hostport {
        const char *host;
        size_t host_len;
        int port;      /* 1..65535, 0 = not written */
        bool v6;       /* host was a [bracketed] literal */
} hostport;

static bool host_char(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
               c == '_';
}

static bool v6_char(unsigned char c) {
        return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9') || c == ':' || c == '.';
}

/* "host[:port]" in s[0..n) -> *hp.  0, or -EINVAL with *why. */
static int parse_hostport(const char *s, size_t n, hostport *hp, const char **why) {
        const char *end = s + n, *colon;
        memset(hp, 0, sizeof(*hp));
        if (n && *s == '[') {
                const char *rb = memchr(s, ']', n);
                if (!rb || rb == s + 1) {
                        *why = "an IPv6 address is written in brackets, e.g. [::1]";
                        return -EINVAL;
                }
                for (const char *p = s + 1; p < rb; p++)
                        if (!v6_char((unsigned char)*p)) {
                                *why = "bad character in the IPv6 address";
                                return -EINVAL;
                        }
                hp->host = s + 1;
                hp->host_len = (size_t)(rb - s - 1);
                hp->v6 = true;
                colon = rb + 1 < end ? rb + 1 : NULL;
                if (colon && *colon != ':') {
                        *why = "nothing may follow the host but :PORT";
                        return -EINVAL;
                }
        } else {
                colon = memchr(s, ':', n);
                hp->host = s;
                hp->host_len = colon ? (size_t)(colon - s) : n;
                for (size_t i = 0; i < hp->host_len; i++)
                        if (!host_char((unsigned char)s[i])) {
                                *why = s[i] == '/' ? "an origin has no path (not even a trailing /)"
                                                   : "the host may hold letters, digits, '-', '.' and '_' only";
                                return -EINVAL;
                        }
        }
        if (!hp->host_len) {
                *why = "the host is missing";
                return -EINVAL;
        }
        if (colon) {
                char num[8];
                size_t pn = (size_t)(end - colon - 1);
                int64_t port;
                if (pn == 0 || pn >= sizeof(num)) {
                        *why = "the port must be 1..65535";
                        return -EINVAL;
                }
                memcpy(num, colon + 1, pn);
                num[pn] = '\0';
                if (gp_parse_i64(num, 1, 65535, &port) < 0) {
                        *why = memchr(num, '/', pn) ? "an origin has no path (not even a trailing /)"
                                                    : "the port must be 1..65535";
                        return -EINVAL;
                }
                hp->port = (int)port;
        }
        return 0;
}

/* "http[s]://host[:port]" -> *hp and *ret_default_port.  0 or -EINVAL. */
static int parse_origin(const char *s, hostport *hp, int *ret_default_port, const char **why) {
        int dflt;
        size_t skip;
        if (!strncasecmp(s, "http://", 7)) {
                dflt = 80;
                skip = 7;
        } else if (!strncasecmp(s, "https://", 8)) {
                dflt = 443;
                skip = 8;
        } else {
                *why = "the scheme must be http:// or https://";
                return -EINVAL;
        }
        size_t n = strlen(s + skip);
        if (memchr(s + skip, '@', n)) {
                *why = "an origin has no user name";
                return -EINVAL;
        }
        if (parse_hostport(s + skip, n, hp, why) < 0)
                return -EINVAL;
        *ret_default_port = dflt;
        return 0;
}

bool gp_browser_origin_ok(const char *s, const char **why) {
        hostport hp;
        int dflt;
        if (strlen(s) >= GP_ORIGIN_MAX) {
                *why = "too long (at most 255 bytes)";
                return false;
        }
        if (parse_origin(s, &hp, &dflt, why) < 0)
                return false;
        if (hp.port == dflt) {
                *why = "leave out the scheme's default port (browsers send the origin without it)";
                return false;
        }
        return true;
}

/* Is h[0..n) (no brackets) an IPv4 or IPv6 address literal? */
static bool ip_literal(const char *h, size_t n, bool v6) {
        char buf[64];
        unsigned char addr[16];
        if (n >= sizeof(buf))
                return false;
        memcpy(buf, h, n);
        buf[n] = '\0';
        return inet_pton(v6 ? AF_INET6 : AF_INET, buf, addr) == 1;
}

static bool host_is(const hostport *hp, const char *name) {
        return hp->host_len == strlen(name) && !strncasecmp(hp->host, name, hp->host_len);
}

bool gp_browser_host_local(const char *host, const char *hostname, const char (*allowed)[GP_ORIGIN_MAX],
                           size_t nallowed) {
        hostport hp;
        const char *why;
        if (!host)
                return true; /* no Host: an HTTP/1.0 client; every browser sends one */
        size_t n = strlen(host);
        if (n == 0 || n >= GP_ORIGIN_MAX || parse_hostport(host, n, &hp, &why) < 0)
                return false;
        if (ip_literal(hp.host, hp.host_len, hp.v6))
                return true;
        if (host_is(&hp, "localhost"))
                return true;
        const char sfx[] = ".localhost"; /* RFC 6761: always loopback */
        if (hp.host_len > sizeof(sfx) - 1 &&
            !strncasecmp(hp.host + hp.host_len - (sizeof(sfx) - 1), sfx, sizeof(sfx) - 1))
                return true;
        if (hostname && *hostname && host_is(&hp, hostname))
                return true;
        /* a single label ("gpubox", an /etc/hosts alias) is resolved on this network, never
         * through a domain an attacker's page could be served from */
        if (!memchr(hp.host, '.', hp.host_len))
                return true;
        for (size_t i = 0; i < nallowed; i++) {
                hostport ho;
                int dflt;
                if (parse_origin(allowed[i], &ho, &dflt, &why) == 0 && ho.host_len == hp.host_len &&
                    !strncasecmp(ho.host, hp.host, hp.host_len))
                        return true;
        }
        return false;
}

bool gp_browser_state_changing(const char *method) {
        return strcmp(method, "GET") && strcmp(method, "HEAD") && strcmp(method, "OPTIONS");
}

/* Does Origin o name the origin the request was sent to (Host h)? */
static bool same_origin(const char *o, const char *h) {
        hostport ho, hh;
        int dflt;
        const char *why;
        if (!h || parse_origin(o, &ho, &dflt, &why) < 0 || parse_hostport(h, strlen(h), &hh, &why) < 0)
                return false;
        int po = ho.port ? ho.port : dflt, ph = hh.port ? hh.port : dflt;
        return ho.v6 == hh.v6 && po == ph && ho.host_len == hh.host_len &&
               !strncasecmp(ho.host, hh.host, ho.host_len);
}

static const char *find_allowed(const char *o, const char (*allowed)[GP_ORIGIN_MAX], size_t n) {
        if (!o)
                return NULL;
        for (size_t i = 0; i < n; i++)
                if (!strcasecmp(o, allowed[i]))
                        return allowed[i];
        return NULL;
}

/* s shown in a message: printable ASCII, at most 100 bytes. */
static void shown(const char *s, char *out, size_t size) {
        size_t k = 0;
        for (size_t i = 0; s[i] && k + 4 < size && i < 100; i++)
                out[k++] = s[i] >= ' ' && s[i] < 0x7f && s[i] != '"' ? s[i] : '?';
        if (s[0] && strlen(s) > 100 && k + 4 < size) {
                memcpy(out + k, "...", 3);
                k += 3;
        }
        out[k] = '\0';
}

/* Is the Content-Type value's media type application/json? */
static bool is_json(const char *ct) {
        while (*ct == ' ' || *ct == '\t')
                ct++;
        size_t n = strcspn(ct, ";");
        while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
                n--;
        return n == 16 && !strncasecmp(ct, "application/json", 16);
}

int gp_browser_check(const gp_browser_req *q, const char (*allowed)[GP_ORIGIN_MAX], size_t nallowed,
                     const char **ret_cors, char *msg, size_t msglen) {
        char a[112], b[112];
        const char *ok = find_allowed(q->origin, allowed, nallowed);
        *ret_cors = ok;
        msg[0] = '\0';
        if (!strcmp(q->method, "OPTIONS") && q->origin) {
                if (ok)
                        return 204;
                shown(q->origin, a, sizeof(a));
                snprintf(msg, msglen,
                         "CORS preflight refused: origin \"%s\" is not listed in server.allowed_origins", a);
                return 403;
        }
        if (!gp_browser_state_changing(q->method))
                return 0;
        if (!ok) {
                const char *sfs = q->sec_fetch_site;
                if (q->origin && !same_origin(q->origin, q->host)) {
                        shown(q->origin, a, sizeof(a));
                        shown(q->host ? q->host : "", b, sizeof(b));
                        snprintf(msg, msglen,
                                 "cross-site request refused: Origin \"%s\" is not this server's origin (Host \"%s\") "
                                 "and is not listed in server.allowed_origins; a web page on another site cannot "
                                 "change state here",
                                 a, b);
                        return 403;
                }
                if (sfs && strcasecmp(sfs, "same-origin") && strcasecmp(sfs, "none")) {
                        shown(sfs, a, sizeof(a));
                        snprintf(msg, msglen,
                                 "cross-site request refused (Sec-Fetch-Site: %s): a web page on another site cannot "
                                 "change state here unless its origin is listed in server.allowed_origins",
                                 a);
                        return 403;
                }
        }
        if (q->content_type ? !is_json(q->content_type) : q->has_body) {
                if (q->content_type)
                        shown(q->content_type, a, sizeof(a));
                snprintf(msg, msglen,
                         "unsupported Content-Type %s%s%s: a request that changes state must send "
                         "Content-Type: application/json (or no body and no Content-Type)",
                         q->content_type ? "\"" : "(none sent with a body", q->content_type ? a : ")",
                         q->content_type ? "\"" : "");
                return 415;
        }
        return 0;
}
