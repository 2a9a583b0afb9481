/* test-forward.c - unit tests of what a follower sends the leader
 * (src/server/forward.c): which requests are forwarded, the forwarded
 * head byte for byte, the heads it refuses to write, and the loopback rule
 * the leader applies to a forwarded request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "base/buf.h"
#include "base/h1.h"
#include "server/forward.h"

static void test_routes(void **state) {
        (void)state;
        assert_int_equal(gp_fwd_route_of("GET", "/healthz", false), GP_FWD_HEALTH);
        assert_int_equal(gp_fwd_route_of("HEAD", "/healthz", true), GP_FWD_HEALTH);
        assert_int_equal(gp_fwd_route_of("GET", "/readyz", false), GP_FWD_READY);
        /* the coordinator's health is about the server asked: a follower answers it */
        assert_int_equal(gp_fwd_route_of("GET", "/api/v1/coordinator/health", false), GP_FWD_COORD_HEALTH);
        assert_int_equal(gp_fwd_route_of("HEAD", "/api/coordinator/health", true), GP_FWD_COORD_HEALTH);
        assert_int_equal(gp_fwd_route_of("POST", "/api/v1/coordinator/health", false), GP_FWD_FORWARD);
        assert_int_equal(gp_fwd_route_of("GET", "/api/v1/coordinator/servers", false), GP_FWD_FORWARD);
        assert_int_equal(gp_fwd_route_of("POST", "/healthz", false), GP_FWD_FORWARD); /* the leader's 405 */
        assert_int_equal(gp_fwd_route_of("POST", "/agent/v1/sync", false), GP_FWD_AGENT);
        assert_int_equal(gp_fwd_route_of("POST", "/agent", false), GP_FWD_AGENT);
        assert_int_equal(gp_fwd_route_of("GET", "/agents", false), GP_FWD_FORWARD);
        assert_int_equal(gp_fwd_route_of("POST", "/api/v1/tasks", false), GP_FWD_FORWARD);
        assert_int_equal(gp_fwd_route_of("POST", "/api/v1/tasks", true), GP_FWD_LOOP);
        assert_int_equal(gp_fwd_route_of("POST", "/v1/chat/completions", false), GP_FWD_FORWARD);
}

static void test_head_is_exact(void **state) {
        (void)state;
        gp_fwd_header h[] = {
                {"Host", "ctl-b:8080"},
                {"Authorization", "Bearer k"},
                {"Content-Type", "application/json"},
                {"Connection", "keep-alive"},         /* hop-by-hop: dropped */
                {"Transfer-Encoding", "chunked"},     /* the follower sends Content-Length */
                {"Content-Length", "999"},            /* ... its own */
                {"Expect", "100-continue"},           /* answered by the follower already */
                {"X-Gpupool-Forwarded-For", "127.0.0.1"}, /* a client's own: replaced */
                {"x-gpupool-forwarded-by", "s9"},
                {"X-Gpupool-Forwarded-Uid", "0"},     /* a client's own: dropped (users.c) */
                {"Origin", "http://ctl-b:8080"},
        };
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_fwd_request_head(&b, "POST", "/api/v1/tasks?x=%20y", h, sizeof(h) / sizeof(h[0]),
                                             "ctl-a:8080", "s2", "10.0.0.9", 17),
                         0);
        assert_string_equal(b.data, "POST /api/v1/tasks?x=%20y HTTP/1.1\r\n"
                                    "Host: ctl-b:8080\r\n"
                                    "Authorization: Bearer k\r\n"
                                    "Content-Type: application/json\r\n"
                                    "Origin: http://ctl-b:8080\r\n"
                                    "Content-Length: 17\r\n"
                                    "X-Gpupool-Forwarded-By: s2\r\n"
                                    "X-Gpupool-Forwarded-For: 10.0.0.9\r\n\r\n");
        /* and it reads back as one request with what was meant */
        gp_h1_request r;
        assert_int_equal(gp_h1_parse_request(b.data, b.len, GP_FWD_HEAD_MAX, &r), 0);
        assert_int_equal(r.head_len, b.len);
        assert_int_equal(r.content_length, 17);
        assert_false(r.chunked);
        assert_true(r.keep_alive); /* HTTP/1.1: the follower may send its next request on it */
        gp_buf_done(&b);
}

static void test_no_host_takes_the_fallback(void **state) {
        (void)state;
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_fwd_request_head(&b, "GET", "/", NULL, 0, "10.0.0.5:8080", "s2", "::1", 0), 0);
        assert_string_equal(b.data, "GET / HTTP/1.1\r\nHost: 10.0.0.5:8080\r\nContent-Length: 0\r\n"
                                    "X-Gpupool-Forwarded-By: s2\r\n"
                                    "X-Gpupool-Forwarded-For: ::1\r\n\r\n");
        gp_buf_done(&b);
}

static void expect_refused(const char *method, const char *target, const char *name, const char *value, int code) {
        gp_fwd_header h[] = {{name, value}};
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_fwd_request_head(&b, method, target, h, 1, "h", "s2", "1.2.3.4", 0), code);
        gp_buf_done(&b);
}

static void test_refusals(void **state) {
        (void)state;
        expect_refused("POST", "/x", "X-A", "a\r\nX-Injected: 1", -EINVAL); /* no header smuggled in */
        expect_refused("POST", "/x", "X-A", "a\nb", -EINVAL);
        expect_refused("POST", "/x", "X A", "a", -EINVAL);
        expect_refused("POST", "/x", "", "a", -EINVAL);
        expect_refused("PO ST", "/x", "X-A", "a", -EINVAL);
        expect_refused("", "/x", "X-A", "a", -EINVAL);
        expect_refused("POST", "x", "X-A", "a", -EINVAL);                /* not origin form */
        expect_refused("POST", "http://h/x", "X-A", "a", -EINVAL);
        expect_refused("POST", "/x y", "X-A", "a", -EINVAL);
        expect_refused("POST", "/x\r\nHost: evil", "X-A", "a", -EINVAL);
        expect_refused("POST", "", "X-A", "a", -EINVAL);
        static char longt[GP_FWD_TARGET_MAX + 2];
        memset(longt, 'a', sizeof(longt) - 1);
        longt[0] = '/';
        expect_refused("GET", longt, "X-A", "a", -EINVAL);
        static char longv[GP_FWD_HEAD_MAX];
        memset(longv, 'v', sizeof(longv) - 1);
        expect_refused("GET", "/", "X-A", longv, -E2BIG);
        /* a tab inside a value is allowed */
        expect_refused("GET", "/", "X-A", "a\tb", 0);
}

static void test_loopback_rule(void **state) {
        (void)state;
        assert_true(gp_fwd_loopback(NULL));                  /* not forwarded: the peer decides */
        assert_true(gp_fwd_loopback("127.0.0.1"));
        assert_true(gp_fwd_loopback("127.9.8.7"));
        assert_true(gp_fwd_loopback("::1"));
        assert_true(gp_fwd_loopback("::ffff:127.0.0.1"));
        assert_true(gp_fwd_loopback(" 127.0.0.1 , ::1 "));
        assert_false(gp_fwd_loopback("10.1.2.3"));
        assert_false(gp_fwd_loopback("127.0.0.1, 10.1.2.3"));
        assert_false(gp_fwd_loopback("10.1.2.3, 127.0.0.1"));
        assert_false(gp_fwd_loopback(""));
        assert_false(gp_fwd_loopback(","));
        assert_false(gp_fwd_loopback("localhost"));          /* names are not trusted */
        assert_false(gp_fwd_loopback("127.0.0.1:80"));
        assert_false(gp_fwd_loopback("?"));                  /* a value too long to keep */
        assert_false(gp_fwd_loopback("::ffff:10.0.0.1"));
}

static void test_framing(void **state) {
        (void)state;
        assert_null(gp_fwd_framing_error(0, 0, NULL));
        assert_null(gp_fwd_framing_error(1, 0, NULL));
        assert_null(gp_fwd_framing_error(0, 1, "chunked"));
        assert_null(gp_fwd_framing_error(0, 1, "Chunked"));
        assert_non_null(gp_fwd_framing_error(2, 0, NULL));          /* two lengths: which one? */
        assert_non_null(gp_fwd_framing_error(1, 1, "chunked"));     /* a length and chunks */
        assert_non_null(gp_fwd_framing_error(0, 1, "gzip"));        /* a coding we cannot frame */
        assert_non_null(gp_fwd_framing_error(0, 1, "gzip, chunked")); /* refused as a whole: we decode none */
        assert_non_null(gp_fwd_framing_error(0, 2, "chunked"));
        assert_non_null(gp_fwd_framing_error(0, 1, NULL));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_routes),
                cmocka_unit_test(test_head_is_exact),
                cmocka_unit_test(test_no_host_takes_the_fallback),
                cmocka_unit_test(test_refusals),
                cmocka_unit_test(test_loopback_rule),
                cmocka_unit_test(test_framing),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
