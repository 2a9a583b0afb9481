/* test-browser.c - unit tests of the cross-site request check
 * (src/base/browser.c): which requests a web page could have made are
 * refused (403, 415), which are served, preflights, and the origins
 * server.allowed_origins accepts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/browser.h"

static const char allowed[][GP_ORIGIN_MAX] = {"https://ui.example.com", "http://127.0.0.1:3000"};

static int check(const char *method, const char *ctype, bool body, const char *origin, const char *sfs,
                 const char *host, const char **cors) {
        gp_browser_req q = {.method = method, .content_type = ctype, .has_body = body, .origin = origin,
                            .sec_fetch_site = sfs, .host = host};
        char msg[512];
        const char *c = (const char *)1;
        int st = gp_browser_check(&q, allowed, 2, &c, msg, sizeof(msg));
        if (st == 403 || st == 415)
                assert_true(strlen(msg) > 20); /* a refusal says why */
        if (cors)
                *cors = c;
        return st;
}

static void test_non_json_bodies_are_refused_with_415(void **state) {
        (void)state;
        static const char *const bad[] = {"text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "text/plain; charset=utf-8",
                                          "application/jsonx", "application/json-patch+json", "", "json"};
        static const char *const methods[] = {"POST", "PUT", "DELETE", "PATCH", "FOO"};
        for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++)
                for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                        assert_int_equal(check(methods[m], bad[i], true, NULL, NULL, "h:1", NULL), 415);
                        /* naming a non-JSON type without a body is refused too */
                        assert_int_equal(check(methods[m], bad[i], false, NULL, NULL, "h:1", NULL), 415);
                }
        /* a body with no Content-Type at all */
        assert_int_equal(check("POST", NULL, true, NULL, NULL, "h:1", NULL), 415);
}

static void test_json_and_bodyless_requests_are_served(void **state) {
        (void)state;
        static const char *const good[] = {"application/json", "Application/JSON", "application/json; charset=utf-8",
                                           " application/json ;charset=UTF-8", "application/json\t"};
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
                assert_int_equal(check("POST", good[i], true, NULL, NULL, "h:1", NULL), 0);
        assert_int_equal(check("POST", NULL, false, NULL, NULL, "h:1", NULL), 0); /* curl -X POST .../heartbeat */
        assert_int_equal(check("DELETE", NULL, false, NULL, NULL, NULL, NULL), 0);
}

static void test_reads_are_not_checked(void **state) {
        (void)state;
        const char *cors;
        assert_int_equal(check("GET", "text/plain", true, "https://evil.example", "cross-site", "h:1", &cors), 0);
        assert_null(cors);
        assert_int_equal(check("HEAD", NULL, false, "null", "cross-site", "h:1", NULL), 0);
        assert_false(gp_browser_state_changing("GET"));
        assert_false(gp_browser_state_changing("OPTIONS"));
        assert_true(gp_browser_state_changing("POST"));
        assert_true(gp_browser_state_changing("get")); /* methods are case-sensitive: not a read */
}

static void test_cross_site_origins_are_refused_with_403(void **state) {
        (void)state;
        const char *J = "application/json";
        assert_int_equal(check("POST", J, true, "https://evil.example", NULL, "127.0.0.1:8080", NULL), 403);
        assert_int_equal(check("POST", J, true, "null", NULL, "127.0.0.1:8080", NULL), 403);
        assert_int_equal(check("POST", NULL, false, "http://127.0.0.1:8081", NULL, "127.0.0.1:8080", NULL), 403);
        assert_int_equal(check("POST", J, true, "http://localhost:8080", NULL, "127.0.0.1:8080", NULL), 403);
        assert_int_equal(check("POST", J, true, "http://127.0.0.1:8080", NULL, NULL, NULL), 403); /* no Host */
        assert_int_equal(check("POST", J, true, "http://127.0.0.1:8080/x", NULL, "127.0.0.1:8080", NULL), 403);
        assert_int_equal(check("POST", J, true, "ftp://127.0.0.1:8080", NULL, "127.0.0.1:8080", NULL), 403);
        assert_int_equal(check("POST", J, true, "http://127.0.0.1:8080", NULL, "127.0.0.1:8080x", NULL), 403);
        /* cross-site beats a text/plain body: 403 first */
        assert_int_equal(check("POST", "text/plain", true, "https://evil.example", NULL, "h", NULL), 403);
        /* Sec-Fetch-Site alone */
        assert_int_equal(check("POST", J, true, NULL, "cross-site", "h:1", NULL), 403);
        assert_int_equal(check("POST", J, true, NULL, "same-site", "h:1", NULL), 403);
        assert_int_equal(check("DELETE", NULL, false, NULL, "cross-site", "h:1", NULL), 403);
        assert_int_equal(check("POST", J, true, "http://h:1", "cross-site", "h:1", NULL), 403);
        assert_int_equal(check("POST", J, true, NULL, "bogus", "h:1", NULL), 403);
}

static void test_the_servers_own_origin_is_served(void **state) {
        (void)state;
        const char *J = "application/json", *cors;
        assert_int_equal(check("POST", J, true, "http://127.0.0.1:8080", "same-origin", "127.0.0.1:8080", &cors), 0);
        assert_null(cors);
        assert_int_equal(check("POST", J, true, "http://GPU-Box.lab:8080", NULL, "gpu-box.lab:8080", NULL), 0);
        assert_int_equal(check("POST", J, true, "http://[::1]:8080", NULL, "[::1]:8080", NULL), 0);
        assert_int_equal(check("POST", J, true, "http://h", NULL, "h:80", NULL), 0);      /* default ports */
        assert_int_equal(check("POST", J, true, "https://h", NULL, "h", NULL), 0);        /* behind a TLS proxy */
        assert_int_equal(check("POST", J, true, "https://h", NULL, "h:443", NULL), 0);
        assert_int_equal(check("POST", J, true, "http://h:80", NULL, "h", NULL), 0);
        assert_int_equal(check("POST", J, true, "http://h:443", NULL, "h", NULL), 403);
        assert_int_equal(check("POST", J, true, NULL, "none", "h", NULL), 0); /* typed into the address bar */
        assert_int_equal(check("POST", J, true, NULL, "same-origin", "h", NULL), 0);
        /* same origin, but a form body: 415 */
        assert_int_equal(check("POST", "application/x-www-form-urlencoded", true, "http://h:1", "same-origin",
                               "h:1", NULL), 415);
}

static void test_allowed_origins_are_served_with_cors(void **state) {
        (void)state;
        const char *J = "application/json", *cors = NULL;
        assert_int_equal(check("POST", J, true, "https://ui.example.com", "cross-site", "127.0.0.1:8080", &cors), 0);
        assert_string_equal(cors, "https://ui.example.com");
        assert_int_equal(check("PUT", J, true, "HTTPS://UI.example.com", "same-site", "h", &cors), 0);
        assert_string_equal(cors, "https://ui.example.com");
        assert_int_equal(check("GET", NULL, false, "http://127.0.0.1:3000", "cross-site", "h", &cors), 0);
        assert_string_equal(cors, "http://127.0.0.1:3000");
        /* allowed, but still JSON only */
        assert_int_equal(check("POST", "text/plain", true, "https://ui.example.com", NULL, "h", &cors), 415);
        /* near misses are not allowed */
        assert_int_equal(check("POST", J, true, "https://ui.example.com:444", NULL, "h", &cors), 403);
        assert_null(cors);
        assert_int_equal(check("POST", J, true, "http://ui.example.com", NULL, "h", NULL), 403);
        assert_int_equal(check("POST", J, true, "https://ui.example.com.evil.example", NULL, "h", NULL), 403);
}

static void test_preflights(void **state) {
        (void)state;
        const char *cors;
        assert_int_equal(check("OPTIONS", NULL, false, "https://ui.example.com", NULL, "h", &cors), 204);
        assert_string_equal(cors, "https://ui.example.com");
        assert_int_equal(check("OPTIONS", NULL, false, "https://evil.example", NULL, "h", &cors), 403);
        assert_null(cors);
        assert_int_equal(check("OPTIONS", NULL, false, "null", NULL, "h", NULL), 403);
        assert_int_equal(check("OPTIONS", NULL, false, NULL, NULL, "h", NULL), 0); /* not a preflight: routed */
}

static void test_messages_name_the_expected_type_and_cleaned_values(void **state) {
        (void)state;
        char msg[512];
        const char *cors;
        gp_browser_req q = {.method = "POST", .content_type = "text/plain\x01\"", .has_body = true, .host = "h"};
        assert_int_equal(gp_browser_check(&q, allowed, 2, &cors, msg, sizeof(msg)), 415);
        assert_non_null(strstr(msg, "application/json"));
        assert_non_null(strstr(msg, "\"text/plain??\""));
        char big[600];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        memcpy(big, "http://", 7);
        q = (gp_browser_req){.method = "POST", .content_type = "application/json", .origin = big, .host = "h"};
        char small[40];
        assert_int_equal(gp_browser_check(&q, allowed, 2, &cors, small, sizeof(small)), 403);
        assert_int_equal(strlen(small), sizeof(small) - 1); /* truncated, terminated */
}

static void test_allowed_origin_syntax(void **state) {
        (void)state;
        static const char *const good[] = {"https://ui.example.com", "http://127.0.0.1:3000", "http://[::1]:8080",
                                           "https://a-b.c_d.example:8443", "http://localhost"};
        static const char *const bad[] = {
                "ui.example.com", "ftp://x", "https://", "https://ui.example.com/", "https://ui.example.com/app",
                "https://ui.example.com:0", "https://ui.example.com:65536", "https://ui.example.com:",
                "https://ui.example.com:443", "http://h:80", "https://u@h", "https://h?x", "https://h#x",
                "https://h h", "https://[::1", "https://[]", "https://[::1]x", "null", "*", "https://*.example.com",
        };
        const char *why;
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
                if (!gp_browser_origin_ok(good[i], &why))
                        fail_msg("refused %s: %s", good[i], why);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                why = NULL;
                if (gp_browser_origin_ok(bad[i], &why))
                        fail_msg("accepted %s", bad[i]);
                assert_non_null(why);
        }
        char big[GP_ORIGIN_MAX + 8];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        memcpy(big, "https://", 8);
        assert_false(gp_browser_origin_ok(big, &why));
}

static void test_rebinding_guard_takes_only_names_of_this_machine(void **state) {
        (void)state;
        static const char *const local[] = {"127.0.0.1:8080", "127.0.0.1", "10.1.2.3:80", "[::1]:8080", "[::1]",
                                            "localhost", "LOCALHOST:8080", "gpu.localhost:9", "ws7:8080",
                                            "WS7", "ui.example.com", "ui.example.com:8080", "gpubox",
                                            "x:80"};
        static const char *const remote[] = {"evil.example", "evil.example:8080", "127.0.0.1.evil.example",
                                             "localhost.evil.example", "ws7.evil.example", "ws7.",
                                             "", "[::1", "evil.example:99999", "a b", "x.ui.example.com"};
        for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
                if (!gp_browser_host_local(local[i], "ws7", allowed, 2))
                        fail_msg("refused Host %s", local[i]);
        for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++)
                if (gp_browser_host_local(remote[i], "ws7", allowed, 2))
                        fail_msg("accepted Host %s", remote[i]);
        assert_true(gp_browser_host_local(NULL, "ws7", allowed, 2)); /* HTTP/1.0, no Host */
        assert_false(gp_browser_host_local("ws7.lab.example", NULL, NULL, 0));
        assert_false(gp_browser_host_local("ws7.lab.example", "", NULL, 0));
        assert_true(gp_browser_host_local("ws7.lab.example", "ws7.lab.example", NULL, 0));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_non_json_bodies_are_refused_with_415),
                cmocka_unit_test(test_json_and_bodyless_requests_are_served),
                cmocka_unit_test(test_reads_are_not_checked),
                cmocka_unit_test(test_cross_site_origins_are_refused_with_403),
                cmocka_unit_test(test_the_servers_own_origin_is_served),
                cmocka_unit_test(test_allowed_origins_are_served_with_cors),
                cmocka_unit_test(test_preflights),
                cmocka_unit_test(test_messages_name_the_expected_type_and_cleaned_values),
                cmocka_unit_test(test_allowed_origin_syntax),
                cmocka_unit_test(test_rebinding_guard_takes_only_names_of_this_machine),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
