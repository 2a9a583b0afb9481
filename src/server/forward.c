/* forward.c - the forwarded request's head and the loopback rule
 * (forward.h).  Pure. */
#include "server/forward.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/h1.h"

gp_fwd_route gp_fwd_route_of(const char *method, const char *path, bool forwarded_already) {
        bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        if (get && !strcmp(path, "/healthz"))
                return GP_FWD_HEALTH;
        if (get && !strcmp(path, "/readyz"))
                return GP_FWD_READY;
        if (get && (!strcmp(path, "/api/v1/coordinator/health") || !strcmp(path, "/api/coordinator/health")))
                return GP_FWD_COORD_HEALTH;
        if (!strncmp(path, "/agent/", 7) || !strcmp(path, "/agent"))
                return GP_FWD_AGENT;
        return forwarded_already ? GP_FWD_LOOP : GP_FWD_FORWARD;
}

/* RFC 9110 tchar */
static bool token(const char *s) {
        if (!*s)
                return false;
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      strchr("!#$%&'*+-.^_`|~", c)))
                        return false;
        }
        return true;
}

/* visible ASCII, obs-text, SP and HTAB: no CR, LF or other control byte */
static bool value_ok(const char *s) {
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if ((c < 0x20 && c != '\t') || c == 0x7f)
                        return false;
        }
        return true;
}

static bool target_ok(const char *t) {
        size_t n = strlen(t);
        if (!n || t[0] != '/' || n > GP_FWD_TARGET_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)t[i] <= 0x20 || t[i] == 0x7f)
                        return false;
        return true;
}

static bool ours(const char *name) {
        return !strcasecmp(name, GP_FWD_BY) || !strcasecmp(name, GP_FWD_FOR) || !strcasecmp(name, GP_FWD_UID) ||
               !strcasecmp(name, "Expect") ||
               !strcasecmp(name, "Host");
}

int gp_fwd_request_head(gp_buf *out, const char *method, const char *target, const gp_fwd_header *h, size_t nh,
                        const char *fallback_host, const char *server_id, const char *client, int64_t body_len) {
        if (!token(method) || strlen(method) > 15 || !target_ok(target) || body_len < 0 || !value_ok(server_id) ||
            !value_ok(client) || !value_ok(fallback_host))
                return -EINVAL;
        const char *host = NULL;
        for (size_t i = 0; i < nh; i++) {
                if (!token(h[i].name) || !value_ok(h[i].value))
                        return -EINVAL;
                if (!host && !strcasecmp(h[i].name, "Host"))
                        host = h[i].value;
        }
        if (out->len + strlen(target) > GP_FWD_HEAD_MAX)
                return -E2BIG;
        int rc = gp_buf_printf(out, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, host ? host : fallback_host);
        for (size_t i = 0; !rc && i < nh; i++) {
                if (gp_h1_hop_by_hop(h[i].name, strlen(h[i].name)) || ours(h[i].name))
                        continue;
                rc = gp_buf_printf(out, "%s: %s\r\n", h[i].name, h[i].value);
                if (!rc && out->len > GP_FWD_HEAD_MAX)
                        rc = -E2BIG;
        }
        if (!rc)
                rc = gp_buf_printf(out,
                                   "Content-Length: %lld\r\n" GP_FWD_BY ": %s\r\n" GP_FWD_FOR
                                   ": %s\r\n\r\n",
                                   (long long)body_len, server_id, client);
        if (!rc && out->len > GP_FWD_HEAD_MAX)
                rc = -E2BIG;
        return rc;
}

const char *gp_fwd_framing_error(int n_cl, int n_te, const char *te) {
        if (n_cl > 1)
                return "more than one Content-Length";
        if (n_te && n_cl)
                return "Content-Length and Transfer-Encoding together";
        if (n_te > 1 || (n_te && (!te || strcasecmp(te, "chunked"))))
                return "a Transfer-Encoding other than chunked";
        return NULL;
}

typedef struct framing {
        int n_cl, n_te;
        const char *te;
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
        (void)kind;
        framing *f = cls;
        if (!strcasecmp(key, "Content-Length"))
                f->n_cl++;
        else if (!strcasecmp(key, "Transfer-Encoding") && !f->n_te++)
                f->te = value;
        return MHD_YES;
}

bool gp_fwd_mhd_refuse_bad_framing(struct MHD_Connection *c, enum MHD_Result *ret) {
        framing f = {0, 0, NULL};
        MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
        const char *why = gp_fwd_framing_error(f.n_cl, f.n_te, f.te);
        if (!why)
                return false;
        json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", "invalid_request", "message", why);
        char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        struct MHD_Response *resp =
                body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE) : NULL;
        if (!resp) {
                free(body);
                *ret = MHD_NO;
                return true;
        }
        MHD_add_response_header(resp, "Content-Type", "application/json");
        MHD_add_response_header(resp, "Connection", "close");
        *ret = MHD_queue_response(c, 400, resp);
        MHD_destroy_response(resp);
        return true;
}

static bool loopback_literal(const char *s, size_t n) {
        char a[INET6_ADDRSTRLEN + 1];
        while (n && (*s == ' ' || *s == '\t'))
                s++, n--;
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
                n--;
        if (!n || n >= sizeof(a))
                return false;
        memcpy(a, s, n);
        a[n] = '\0';
        struct in_addr v4;
        struct in6_addr v6;
        if (inet_pton(AF_INET, a, &v4) == 1)
                return (ntohl(v4.s_addr) >> 24) == 127;
        if (inet_pton(AF_INET6, a, &v6) == 1)
                return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
        return false;
}

bool gp_fwd_loopback(const char *forwarded_for) {
        if (!forwarded_for)
                return true;
        const char *p = forwarded_for;
        for (;;) {
                const char *comma = strchr(p, ',');
                size_t n = comma ? (size_t)(comma - p) : strlen(p);
                if (!loopback_literal(p, n))
                        return false;
                if (!comma)
                        return true;
                p = comma + 1;
        }
}
