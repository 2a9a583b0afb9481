/* test-url.c - unit tests of the http:// URL parser (src/base/url.c): the
 * parts of the forms upstreams are written in, and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "base/url.h"

static void expect_parts(const char *url, const char *auth, const char *host, const char *port, const char *path) {
        gp_http_url u;
        assert_int_equal(gp_http_url_parse(url, &u), 0);
        assert_int_equal(u.auth_len, strlen(auth));
        assert_memory_equal(u.auth, auth, u.auth_len);
        assert_int_equal(u.host_len, strlen(host));
        assert_memory_equal(u.host, host, u.host_len);
        assert_string_equal(u.port, port);
        assert_string_equal(u.path, path);
}

static void test_forms(void **state) {
        (void)state;
        expect_parts("http://127.0.0.1:8000", "127.0.0.1:8000", "127.0.0.1", "8000", "");
        expect_parts("http://vllm-0.svc", "vllm-0.svc", "vllm-0.svc", "80", "");
        expect_parts("http://10.0.0.2:8001/prefix/v2", "10.0.0.2:8001", "10.0.0.2", "8001", "/prefix/v2");
        expect_parts("http://[::1]:9000", "[::1]:9000", "::1", "9000", "");
        expect_parts("http://[fe80::1]/p", "[fe80::1]", "fe80::1", "80", "/p");
        expect_parts("http://h:65535", "h:65535", "h", "65535", "");
        expect_parts("http://h:00080", "h:00080", "h", "80", ""); /* leading zeros: the same port */
}

static void test_refusals(void **state) {
        (void)state;
        static const char *const bad[] = {
                "https://h:1", "http://", "http:///x", "http://:80", "http://h:", "http://h:0", "http://h:65536",
                "http://h:123456", "http://h:8a", "http://[::1", "http://[]:80", "http://[::1]x", "http://u@h:80",
                "http://h h:80", "http://h:80/a b", "http://h:80/a?q", "http://h:80/#f", "ftp://h",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                gp_http_url u;
                if (gp_http_url_parse(bad[i], &u) != -EINVAL)
                        fail_msg("accepted %s", bad[i]);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_forms),
                cmocka_unit_test(test_refusals),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
