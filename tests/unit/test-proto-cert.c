/* test-proto-cert.c - unit tests of src/cluster/proto-cert.c: the node
 * certificate request and answer, and the relay's first line (also fuzzed
 * by fuzz/fuzz-proto-cert.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/proto-cert.h"

#define PUB "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
#define CRT "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

static void test_request_round_trips_and_bad_ones_name_the_field(void **state) {
        (void)state;
        char err[256];
        gp_proto_cert_req q = {.public_key = PUB}, back = {0};
        snprintf(q.node, sizeof(q.node), "gpu-a");
        char *s = NULL;
        assert_int_equal(gp_proto_cert_req_render(&q, &s), 0);
        assert_int_equal(gp_proto_cert_req_parse(s, strlen(s), &back, err, sizeof(err)), 0);
        assert_string_equal(back.node, "gpu-a");
        assert_string_equal(back.public_key, PUB);
        gp_proto_cert_req_done(&back);
        free(s);
        static const struct {
                const char *body, *field;
        } bad[] = {
                {"{\"node\":\"local\",\"public_key\":\"" "x" "\"}", "node"},
                {"{\"node\":\"gpu-a\"}", "public_key"},
                {"{\"node\":\"gpu-a\",\"public_key\":\"-----BEGIN PRIVATE KEY-----\\n\"}", "public_key"},
                {"{\"node\":\"gpu-a\",\"public_key\":\"-----BEGIN PUBLIC KEY-----\\u0001-----END \"}", "public_key"},
                {"[1]", "object"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                gp_proto_cert_req out = {.public_key = (char *)"untouched"};
                err[0] = 0;
                assert_int_equal(gp_proto_cert_req_parse(bad[i].body, strlen(bad[i].body), &out, err, sizeof(err)),
                                 -EINVAL);
                assert_non_null(strstr(err, bad[i].field));
                assert_string_equal(out.public_key, "untouched");
        }
}

static void test_answer_keeps_names_and_refuses_odd_ones(void **state) {
        (void)state;
        char err[256], *s = NULL;
        gp_proto_cert_answer a = {.cert = CRT, .ca = CRT, .not_after_ms = 1900000000000LL, .n_names = 2};
        snprintf(a.names[0], sizeof(a.names[0]), "::1");
        snprintf(a.names[1], sizeof(a.names[1]), "gpu-a.example");
        assert_int_equal(gp_proto_cert_answer_render(&a, &s), 0);
        gp_proto_cert_answer b = {0};
        assert_int_equal(gp_proto_cert_answer_parse(s, strlen(s), &b, err, sizeof(err)), 0);
        assert_int_equal(b.n_names, 2);
        assert_string_equal(b.names[1], "gpu-a.example");
        assert_int_equal(b.not_after_ms, 1900000000000LL);
        gp_proto_cert_answer_done(&b);
        free(s);
        const char *odd = "{\"cert\":\"" "-----BEGIN CERTIFICATE-----\\n-----END \"" ",\"ca\":\"" "-----BEGIN "
                          "CERTIFICATE-----\\n-----END \"" ",\"not_after_ms\":5,\"names\":[\"a b\"]}";
        assert_int_equal(gp_proto_cert_answer_parse(odd, strlen(odd), &b, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "names"));
        assert_null(b.cert);
}

static void test_relay_line_takes_a_run_name_and_a_hex_token_only(void **state) {
        (void)state;
        char name[64], tok[GP_PROTO_RELAY_LINE_MAX];
        const char *ok = "GPUPOOL-RELAY 12.3.0 0123456789abcdef0123456789abcdef\n";
        assert_int_equal(gp_proto_relay_parse(ok, strlen(ok), name, sizeof(name), tok, sizeof(tok)), 0);
        assert_string_equal(name, "12.3.0");
        assert_string_equal(tok, "0123456789abcdef0123456789abcdef");
        static const char *const bad[] = {
                "GPUPOOL-RELAY ../../etc 0123456789abcdef0123456789abcdef\n", /* not a run */
                "GPUPOOL-RELAY 1.2 0123456789abcdef0123456789abcdef\n",       /* two parts */
                "GPUPOOL-RELAY 1..2 0123456789abcdef0123456789abcdef\n",
                "GPUPOOL-RELAY 1.2.3 0123456789abcdef\n",                      /* token too short */
                "GPUPOOL-RELAY 1.2.3 0123456789ABCDEF0123456789abcdef\n",      /* not lowercase hex */
                "GPUPOOL-RELAY 1.2.3 0123456789abcdef0123456789abcdef",        /* no newline */
                "GET / HTTP/1.1\r\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                name[0] = 'x';
                assert_int_equal(gp_proto_relay_parse(bad[i], strlen(bad[i]), name, sizeof(name), tok, sizeof(tok)),
                                 -EINVAL);
                assert_int_equal(name[0], 'x');
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_request_round_trips_and_bad_ones_name_the_field),
                cmocka_unit_test(test_answer_keeps_names_and_refuses_odd_ones),
                cmocka_unit_test(test_relay_line_takes_a_run_name_and_a_hex_token_only),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
