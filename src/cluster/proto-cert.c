/* proto-cert.c - parse and render the node certificate messages (see
 * proto-cert.h).  Invariants: a failed parse allocates nothing and leaves
 * *ret as it was; every string is bounded and checked before it is kept. */
#include "cluster/proto-cert.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cluster/proto.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* A PEM block as we accept one: begins with "-----BEGIN <what>-----",
 * printable ASCII and newlines only, at most GP_PROTO_CERT_PEM_MAX bytes. */
static bool pem_ok(const char *s, size_t len, const char *what) {
        char begin[64];
        snprintf(begin, sizeof(begin), "-----BEGIN %s-----", what);
        if (len == 0 || len > GP_PROTO_CERT_PEM_MAX || strncmp(s, begin, strlen(begin)) ||
            !strstr(s, "-----END "))
                return false;
        for (size_t i = 0; i < len; i++)
                if (!((s[i] >= 0x20 && s[i] < 0x7f) || s[i] == '\n' || s[i] == '\r'))
                        return false;
        return true;
}

/* A host name or an IP address: [A-Za-z0-9.:_-] only. */
static bool name_ok(const char *s) {
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                      strchr(".:_-", *s)))
                        return false;
        return true;
}

/* The PEM string of o[key] into a malloc'd copy. */
static int take_pem(json_t *o, const char *key, const char *what, char **ret, char *err, size_t errlen) {
        json_t *v = json_object_get(o, key);
        if (!json_is_string(v) || !pem_ok(json_string_value(v), json_string_length(v), what))
                return fail(err, errlen, "\"%s\" must be a PEM %s of at most %d bytes", key, what,
                            GP_PROTO_CERT_PEM_MAX);
        char *s = strndup(json_string_value(v), json_string_length(v));
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static json_t *load(const char *data, size_t len, char *err, size_t errlen) {
        json_error_t je;
        if (len > GP_PROTO_MAX_BODY) {
                fail(err, errlen, "message too large");
                return NULL;
        }
        json_t *o = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(o)) {
                fail(err, errlen, "expected a JSON object%s%s", o ? "" : ": ", o ? "" : je.text);
                json_decref(o);
                return NULL;
        }
        return o;
}

int gp_proto_cert_req_parse(const char *data, size_t len, gp_proto_cert_req *ret, char *err, size_t errlen) {
        json_t *o = load(data, len, err, errlen);
        if (!o)
                return -EINVAL;
        gp_proto_cert_req m = {0};
        int rc;
        const char *node = json_string_value(json_object_get(o, "node"));
        if (!node || !gp_proto_node_name_ok(node)) {
                rc = fail(err, errlen, "\"node\" must be a node name");
                goto out;
        }
        gp_strlcpy(m.node, node, sizeof(m.node));
        if ((rc = take_pem(o, "public_key", "PUBLIC KEY", &m.public_key, err, errlen)) < 0)
                goto out;
        *ret = m;
out:
        json_decref(o);
        return rc;
}

int gp_proto_cert_req_render(const gp_proto_cert_req *m, char **ret) {
        json_t *o = json_pack("{s:s, s:s}", "node", m->node, "public_key", m->public_key ? m->public_key : "");
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

void gp_proto_cert_req_done(gp_proto_cert_req *m) {
        free(m->public_key);
        m->public_key = NULL;
}

int gp_proto_cert_answer_parse(const char *data, size_t len, gp_proto_cert_answer *ret, char *err, size_t errlen) {
        json_t *o = load(data, len, err, errlen);
        if (!o)
                return -EINVAL;
        gp_proto_cert_answer m = {0};
        int rc;
        json_t *na = json_object_get(o, "not_after_ms"), *names = json_object_get(o, "names");
        if (!json_is_integer(na) || json_integer_value(na) <= 0 || json_integer_value(na) > (1LL << 53)) {
                rc = fail(err, errlen, "\"not_after_ms\" must be a time in ms");
                goto out;
        }
        m.not_after_ms = json_integer_value(na);
        if (names && (!json_is_array(names) || json_array_size(names) > GP_PROTO_CERT_NAMES)) {
                rc = fail(err, errlen, "\"names\" must be an array of at most %d names", GP_PROTO_CERT_NAMES);
                goto out;
        }
        for (size_t i = 0; names && i < json_array_size(names); i++) {
                json_t *v = json_array_get(names, i);
                const char *s = json_string_value(v);
                if (!s || !json_string_length(v) || json_string_length(v) >= GP_PROTO_CERT_NAME_MAX ||
                    strlen(s) != json_string_length(v) ||
                    !name_ok(s)) {
                        rc = fail(err, errlen, "\"names\"[%zu] must be a host name or address", i);
                        goto out;
                }
                gp_strlcpy(m.names[m.n_names++], s, GP_PROTO_CERT_NAME_MAX);
        }
        if ((rc = take_pem(o, "cert", "CERTIFICATE", &m.cert, err, errlen)) < 0 ||
            (rc = take_pem(o, "ca", "CERTIFICATE", &m.ca, err, errlen)) < 0) {
                gp_proto_cert_answer_done(&m);
                goto out;
        }
        *ret = m;
out:
        json_decref(o);
        return rc;
}

int gp_proto_cert_answer_render(const gp_proto_cert_answer *m, char **ret) {
        json_t *names = json_array();
        for (int i = 0; names && i < m->n_names && i < GP_PROTO_CERT_NAMES; i++)
                json_array_append_new(names, json_string(m->names[i]));
        json_t *o = json_pack("{s:s, s:s, s:I, s:o*}", "cert", m->cert ? m->cert : "", "ca", m->ca ? m->ca : "",
                              "not_after_ms", (json_int_t)m->not_after_ms, "names", names);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

void gp_proto_cert_answer_done(gp_proto_cert_answer *m) {
        free(m->cert);
        free(m->ca);
        m->cert = m->ca = NULL;
}

int gp_proto_relay_parse(const char *line, size_t len, char *name, size_t name_size, char *token, size_t token_size) {
        size_t m = strlen(GP_PROTO_RELAY_MAGIC);
        if (!line || len < m + 1 || len > GP_PROTO_RELAY_LINE_MAX || memcmp(line, GP_PROTO_RELAY_MAGIC, m) ||
            line[len - 1] != '\n')
                return -EINVAL;
        const char *p = line + m, *end = line + len - 1;
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        if (!sp)
                return -EINVAL;
        size_t nl = (size_t)(sp - p), tl = (size_t)(end - sp - 1);
        if (nl == 0 || nl >= name_size || tl < GP_PROTO_RELAY_TOKEN_MIN || tl >= token_size)
                return -EINVAL;
        int dots = 0;
        for (const char *q = p; q < sp; q++) {
                if (*q == '.')
                        dots++;
                else if (*q < '0' || *q > '9')
                        return -EINVAL;
        }
        if (dots != 2 || p[0] == '.' || sp[-1] == '.' || memmem(p, nl, "..", 2))
                return -EINVAL;
        for (const char *q = sp + 1; q < end; q++)
                if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f')))
                        return -EINVAL;
        memcpy(name, p, nl);
        name[nl] = '\0';
        memcpy(token, sp + 1, tl);
        token[tl] = '\0';
        return 0;
}

int gp_proto_relay_refusal(char *buf, size_t size, const char *why) {
        char body[300];
        int bl = snprintf(body, sizeof(body), "{\"error\":{\"type\":\"relay_error\",\"message\":\"%s\"}}", why);
        if (bl < 0 || (size_t)bl >= sizeof(body))
                return -1;
        int ml = snprintf(buf, size,
                          "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                          "Connection: close\r\n\r\n%s",
                          bl, body);
        return ml < 0 || (size_t)ml >= size ? -1 : ml;
}
