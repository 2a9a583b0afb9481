/* test-gateway-conns.c - unit tests of the connection guard's pure parts
 * (src/gateway/conns.c): the body-rate rule, and the table of connections
 * per client address the loops and a follower share (src/base/iplimit.c:
 * counting, the limit, removal with backward shifts under many
 * addresses). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "gateway/gw-internal.h"

static struct sockaddr_in v4(uint32_t host) {
        struct sockaddr_in a;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(host);
        a.sin_port = htons(40000);
        return a;
}

static gp_iplimit *table(int max_per_ip, int max_connections) {
        gp_iplimit *l = calloc(1, sizeof(*l));
        assert_non_null(l);
        assert_int_equal(gp_iplimit_init(l, max_per_ip, max_connections), 0);
        return l;
}

static void done(gp_iplimit *l) {
        gp_iplimit_done(l);
        free(l);
}

static void test_body_due_is_zero_within_the_grace_then_grows_at_the_rate(void **state) {
        (void)state;
        assert_int_equal(gw_body_due(1000, 1000, 10000, 1024), 0);
        assert_int_equal(gw_body_due(1000, 11000, 10000, 1024), 0);  /* the grace just ended */
        assert_int_equal(gw_body_due(1000, 12000, 10000, 1024), 1024); /* one second past it */
        assert_int_equal(gw_body_due(1000, 11500, 10000, 1000), 500);
        assert_int_equal(gw_body_due(0, INT64_MAX / 2, 0, (int64_t)1 << 30), INT64_MAX); /* no overflow */
}

static void test_address_over_its_limit_is_refused_until_one_closes(void **state) {
        (void)state;
        gp_iplimit *g = table(3, 100);
        struct sockaddr_in a = v4(0x7f000001), b = v4(0x7f000002);
        for (int i = 0; i < 3; i++)
                assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&a), 0);
        assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&a), -EMFILE);
        assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&b), 0); /* another address is not held back */
        a.sin_port = htons(1); /* the port is not part of the address */
        gp_iplimit_put(g, (struct sockaddr *)&a);
        assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&a), 0);
        assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&a), -EMFILE);
        done(g);
}

static void test_ipv6_and_mapped_addresses_are_counted_and_unix_peers_are_not(void **state) {
        (void)state;
        gp_iplimit *g = table(1, 100);
        struct sockaddr_in6 s6;
        memset(&s6, 0, sizeof(s6));
        s6.sin6_family = AF_INET6;
        inet_pton(AF_INET6, "::ffff:10.0.0.1", &s6.sin6_addr);
        struct sockaddr_in s4 = v4(0x0a000001);
        assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&s4), 0);
        assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&s6), -EMFILE); /* the same client */
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&un), 1);
        assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&un), 1);
        done(g);
}

static void test_removals_keep_every_other_address_findable(void **state) {
        (void)state;
        enum { N = 3000 };
        gp_iplimit *g = table(1, N); /* a table about half full: long probe runs */
        for (uint32_t i = 0; i < N; i++) {
                struct sockaddr_in a = v4(0x0a000000 + i * 7919);
                assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&a), 0);
        }
        for (uint32_t i = 0; i < N; i += 2) {
                struct sockaddr_in a = v4(0x0a000000 + i * 7919);
                gp_iplimit_put(g, (struct sockaddr *)&a);
        }
        for (uint32_t i = 0; i < N; i++) {
                struct sockaddr_in a = v4(0x0a000000 + i * 7919);
                /* the ones still open are at their limit; the closed ones are free again */
                assert_int_equal(gp_iplimit_take(g, (struct sockaddr *)&a), i % 2 ? -EMFILE : 0);
        }
        done(g);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_body_due_is_zero_within_the_grace_then_grows_at_the_rate),
                cmocka_unit_test(test_address_over_its_limit_is_refused_until_one_closes),
                cmocka_unit_test(test_ipv6_and_mapped_addresses_are_counted_and_unix_peers_are_not),
                cmocka_unit_test(test_removals_keep_every_other_address_findable),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
