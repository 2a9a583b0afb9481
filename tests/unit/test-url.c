/* test-url.c - unit tests of the http:// URL parser (src/base/url.c): the
 * parts of the forms upstreams are written in, and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
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

static void expect_unescaped(const char *in, const char *want) {
        char buf[128];
        snprintf(buf, sizeof(buf), "%s", in);
        size_t n = gp_url_unescape(buf);
        assert_string_equal(buf, want);
        assert_int_equal(n, strlen(want));
}

/* the HTTP server's decoder of paths and query values: an escape can
 * neither cut a value short nor add a path segment */
static void test_unescape_keeps_nul_controls_and_slash_escaped(void **state) {
        (void)state;
        expect_unescaped("/admin/tenants/abc", "/admin/tenants/abc");
        expect_unescaped("a%20b%2Bc%41%7e", "a b+cA~");
        expect_unescaped("%e8%ae%ad", "\xe8\xae\xad");
        expect_unescaped("%25", "%");
        expect_unescaped("foo%00bar", "foo%00bar");
        expect_unescaped("foo%0abar%0D%09%1f%7F", "foo%0abar%0D%09%1f%7F");
        expect_unescaped("a%2Fkeys%2f", "a%2Fkeys%2f");
        expect_unescaped("bad%zz%4", "bad%zz%4");
        expect_unescaped("%", "%");
        expect_unescaped("", "");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_forms),
                cmocka_unit_test(test_refusals),
                cmocka_unit_test(test_unescape_keeps_nul_controls_and_slash_escaped),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
