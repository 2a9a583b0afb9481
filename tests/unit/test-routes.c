/* test-routes.c - unit tests of the route table's lookup
 * (src/server/routes.c, gp_route_find): which row a method and path find,
 * the /api/ aliases, the parameters parsed once (and their errors), the
 * methods of a path, and which paths need no key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "server/routes.h"

static gp_route_match find(const char *method, const char *url) {
        gp_route_match m;
        gp_route_find(url, method, &m);
        return m;
}

static void test_routes_find_the_row_of_a_method_and_path(void **state) {
        (void)state;
        gp_route_match m = find("GET", "/api/v1/tasks/42/logs");
        assert_non_null(m.row);
        assert_string_equal(m.row->path, "/api/v1/tasks/{task}/logs");
        assert_int_equal(m.arg.id, 42);
        assert_int_equal(m.row->who, GP_ROUTE_TENANT);
        assert_false(m.open);
        m = find("DELETE", "/api/v1/tasks/7");
        assert_non_null(m.row);
        assert_int_equal(m.row->methods, GP_DELETE);
        assert_int_equal(m.arg.id, 7);
        m = find("HEAD", "/api/v1/gpus"); /* GET rows answer HEAD */
        assert_non_null(m.row);
        assert_string_equal(m.row->path, "/api/v1/gpus");
}

static void test_routes_api_alias_finds_the_v1_row_and_says_so(void **state) {
        (void)state;
        gp_route_match m = find("POST", "/api/tasks");
        assert_non_null(m.row);
        assert_string_equal(m.row->path, "/api/v1/tasks");
        assert_true(m.arg.alias);
        m = find("POST", "/api/v1/tasks");
        assert_false(m.arg.alias);
        m = find("GET", "/api/monitor/metrics");
        assert_non_null(m.row);
        assert_string_equal(m.row->path, "/api/v1/monitor/metrics");
        assert_null(find("GET", "/api/v2/tasks").any);
        assert_null(find("GET", "/healthzz").any);
}

static void test_routes_bad_parameters_get_their_errors(void **state) {
        (void)state;
        const char *bad_tasks[] = {"/api/v1/tasks/0", "/api/v1/tasks/-1", "/api/v1/tasks/abc",
                                   "/api/v1/tasks/1x", "/api/v1/tasks/99999999999999999999999",
                                   "/api/v1/tasks/abc/cancel"};
        for (size_t i = 0; i < sizeof(bad_tasks) / sizeof(bad_tasks[0]); i++) {
                gp_route_match m = find("GET", bad_tasks[i]);
                assert_non_null(m.any);
                assert_int_equal(m.bad, 404);
        }
        gp_route_match m = find("PUT", "/admin/tenants/x%2Fkeys");
        assert_int_equal(m.bad, 400);
        m = find("POST", "/admin/tenants/lab/credit");
        assert_int_equal(m.bad, 0);
        assert_string_equal(m.arg.name, "lab");
        assert_string_equal(m.row->path, "/admin/tenants/{tenant}/credit");
        m = find("GET", "/api/v1/tenants/default%00x"); /* ids do not leak: 404 */
        assert_int_equal(m.bad, 404);
        m = find("GET", "/api/v1/tenants/"); /* lists them, as before */
        assert_int_equal(m.bad, 0);
        assert_string_equal(m.arg.name, "");
        m = find("POST", "/admin/gpus/local:3/drain");
        assert_string_equal(m.arg.name, "local:3");
        assert_null(find("POST", "/admin/gpus/local:3/explode").any);
        assert_null(find("GET", "/api/v1/tasks/1/nope").any);
}

static void test_routes_a_path_knows_its_methods(void **state) {
        (void)state;
        gp_route_match m = find("PUT", "/api/v1/tasks");
        assert_null(m.row);
        assert_non_null(m.any);
        assert_int_equal(m.allow, GP_GET | GP_POST);
        m = find("PATCH", "/admin/tenants/lab");
        assert_null(m.row);
        assert_int_equal(m.allow, GP_GET | GP_PUT);
        assert_int_equal(m.any->who, GP_ROUTE_ADMIN);
}

static void test_routes_only_open_paths_skip_the_key(void **state) {
        (void)state;
        assert_true(find("GET", "/healthz").open);
        assert_true(find("POST", "/healthz").open); /* a 405, still without a key */
        assert_true(find("GET", "/static/app.js").open);
        assert_string_equal(find("GET", "/static/a/b.js").arg.rest, "a/b.js");
        assert_false(find("GET", "/metrics").open);
        assert_false(find("GET", "/nope").open);
        assert_false(find("GET", "/admin/routes").open);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_routes_find_the_row_of_a_method_and_path),
                cmocka_unit_test(test_routes_api_alias_finds_the_v1_row_and_says_so),
                cmocka_unit_test(test_routes_bad_parameters_get_their_errors),
                cmocka_unit_test(test_routes_a_path_knows_its_methods),
                cmocka_unit_test(test_routes_only_open_paths_skip_the_key),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
