/* fuzz-proto-cert.c - libFuzzer target for the node certificate messages
 * (src/cluster/proto-cert.c): the agent's request (parsed by the server),
 * the server's answer (parsed by the agent), and the first line of a relay
 * to a model replica (parsed by the agent from whoever reaches its port).
 *
 * The first byte picks the parser (bit 1: the relay line; else the low bit).
 * The relay line: a success is a name of digits and two dots and a token of
 * 32+ lowercase hex digits that put back together give the line; a failure
 * writes nothing.  Checks the contract: a
 * failure is -EINVAL with a non-empty message (or -ENOMEM) and leaves the
 * output untouched; a success is within the bounds (PEM blocks that begin
 * as they must, names of the allowed characters), renders, and the
 * rendering parses again to the same text. */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/proto-cert.h"
#include "cluster/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int r, const char *err, size_t n, const void *out, const void *before, size_t osize) {
        if ((r != -EINVAL && r != -ENOMEM) || !memchr(err, '\0', n) || (r == -EINVAL && !err[0]) ||
            memcmp(out, before, osize))
                abort();
}

static void check_pem(const char *s, const char *begin) {
        if (!s || strncmp(s, begin, strlen(begin)) || strlen(s) > GP_PROTO_CERT_PEM_MAX)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        const char *p = (const char *)data + 1;
        size_t n = size - 1;
        char err[256];
        if (data[0] & 2) {
                char name[64], token[GP_PROTO_RELAY_LINE_MAX], line[GP_PROTO_RELAY_LINE_MAX + 64];
                memset(name, 0x5a, sizeof(name));
                memset(token, 0x5a, sizeof(token));
                if (gp_proto_relay_parse(p, n, name, sizeof(name), token, sizeof(token)) < 0) {
                        if (name[0] != 0x5a || token[0] != 0x5a)
                                abort();
                        return 0;
                }
                size_t dots = 0, tl = strlen(token);
                for (const char *q = name; *q; q++)
                        if (*q == '.')
                                dots++;
                        else if (*q < '0' || *q > '9')
                                abort();
                if (dots != 2 || tl < GP_PROTO_RELAY_TOKEN_MIN || strspn(token, "0123456789abcdef") != tl)
                        abort();
                int k = snprintf(line, sizeof(line), "%s%s %s\n", GP_PROTO_RELAY_MAGIC, name, token);
                if (k < 0 || (size_t)k != n || memcmp(line, p, n))
                        abort();
                return 0;
        }
        if (data[0] & 1) {
                gp_proto_cert_answer m, before;
                memset(&m, 0x5a, sizeof(m));
                before = m;
                int r = gp_proto_cert_answer_parse(p, n, &m, err, sizeof(err));
                if (r < 0) {
                        check_err(r, err, sizeof(err), &m, &before, sizeof(m));
                        return 0;
                }
                check_pem(m.cert, "-----BEGIN CERTIFICATE-----");
                check_pem(m.ca, "-----BEGIN CERTIFICATE-----");
                if (m.not_after_ms <= 0 || m.n_names < 0 || m.n_names > GP_PROTO_CERT_NAMES)
                        abort();
                for (int i = 0; i < m.n_names; i++)
                        if (!m.names[i][0] || strspn(m.names[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                 "0123456789.:_-") != strlen(m.names[i]))
                                abort();
                char *s1 = NULL, *s2 = NULL;
                gp_proto_cert_answer m2;
                if (gp_proto_cert_answer_render(&m, &s1) == 0) {
                        if (gp_proto_cert_answer_parse(s1, strlen(s1), &m2, err, sizeof(err)) < 0)
                                abort();
                        if (gp_proto_cert_answer_render(&m2, &s2) == 0 && strcmp(s1, s2))
                                abort();
                        gp_proto_cert_answer_done(&m2);
                }
                free(s1);
                free(s2);
                gp_proto_cert_answer_done(&m);
        } else {
                gp_proto_cert_req m, before;
                memset(&m, 0x5a, sizeof(m));
                before = m;
                int r = gp_proto_cert_req_parse(p, n, &m, err, sizeof(err));
                if (r < 0) {
                        check_err(r, err, sizeof(err), &m, &before, sizeof(m));
                        return 0;
                }
                check_pem(m.public_key, "-----BEGIN PUBLIC KEY-----");
                if (!gp_proto_node_name_ok(m.node))
                        abort();
                char *s1 = NULL, *s2 = NULL;
                gp_proto_cert_req m2;
                if (gp_proto_cert_req_render(&m, &s1) == 0) {
                        if (gp_proto_cert_req_parse(s1, strlen(s1), &m2, err, sizeof(err)) < 0)
                                abort();
                        if (gp_proto_cert_req_render(&m2, &s2) == 0 && strcmp(s1, s2))
                                abort();
                        gp_proto_cert_req_done(&m2);
                }
                free(s1);
                free(s2);
                gp_proto_cert_req_done(&m);
        }
        return 0;
}
