/* test-base.c - the base mechanics every module uses: gp_vec_grow
 * (growing by doubling), gp_list (the intrusive list) and gp_ownport
 * (this process's loopback connections told from another's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/list.h"
#include "base/ownport.h"
#include "base/vec.h"

static void test_vec_grows_by_doubling_and_keeps_items(void **state) {
        (void)state;
        int *a = NULL;
        size_t cap = 0, n = 0;
        for (int i = 0; i < 1000; i++) {
                int *p = gp_vec_grow(a, &cap, n + 1, sizeof *a, 4);
                assert_non_null(p);
                a = p;
                a[n++] = i;
                assert_true(cap >= n);
        }
        assert_int_equal(cap, 1024); /* 4, 8, ..., 1024 */
        for (int i = 0; i < 1000; i++)
                assert_int_equal(a[i], i);
        /* room already there: the same array, cap unchanged */
        assert_ptr_equal(gp_vec_grow(a, &cap, 10, sizeof *a, 4), a);
        assert_int_equal(cap, 1024);
        /* a jump past double: still a power of two at least need */
        int *p = gp_vec_grow(a, &cap, 5000, sizeof *a, 4);
        assert_non_null(p);
        a = p;
        assert_int_equal(cap, 8192);
        free(a);
}

static void test_vec_refuses_overflow_and_leaves_the_array(void **state) {
        (void)state;
        size_t cap = 0;
        long *a = gp_vec_grow(NULL, &cap, 3, sizeof *a, 0); /* first 0 means 1 */
        assert_non_null(a);
        assert_int_equal(cap, 4);
        a[0] = 7;
        assert_null(gp_vec_grow(a, &cap, SIZE_MAX / 2, sizeof *a, 4));
        assert_null(gp_vec_grow(a, &cap, SIZE_MAX, sizeof *a, 4));
        assert_int_equal(cap, 4);
        assert_int_equal(a[0], 7);
        free(a);
}

typedef struct item {
        int v;
        gp_list link;
} item;

static void expect_order(gp_list *h, const int *want, int n) {
        int i = 0;
        GP_LIST_FOR_EACH(l, h) {
                assert_true(i < n);
                assert_int_equal(GP_LIST_ENTRY(l, item, link)->v, want[i]);
                i++;
        }
        assert_int_equal(i, n);
}

static void test_list_keeps_order_through_adds_and_deletes(void **state) {
        (void)state;
        item it[5];
        gp_list h;
        gp_list_init(&h);
        assert_true(gp_list_empty(&h));
        assert_null(gp_list_first(&h));
        for (int i = 0; i < 5; i++) {
                it[i].v = i;
                gp_list_init(&it[i].link);
        }
        gp_list_add_tail(&h, &it[1].link);
        gp_list_add_tail(&h, &it[2].link);
        gp_list_add_head(&h, &it[0].link);
        gp_list_insert_after(&it[2].link, &it[4].link);
        gp_list_insert_after(&it[2].link, &it[3].link);
        expect_order(&h, (int[]){0, 1, 2, 3, 4}, 5);
        assert_ptr_equal(gp_list_first(&h), &it[0].link);
        assert_ptr_equal(gp_list_last(&h), &it[4].link);

        gp_list_del(&it[0].link); /* first */
        gp_list_del(&it[4].link); /* last */
        gp_list_del(&it[2].link); /* middle */
        gp_list_del(&it[2].link); /* again: it is in no list, nothing changes */
        expect_order(&h, (int[]){1, 3}, 2);

        GP_LIST_FOR_EACH_SAFE(l, &h) gp_list_del(l); /* unlinking while walking */
        assert_true(gp_list_empty(&h));
        assert_null(gp_list_last(&h));
}

static struct sockaddr_in loop4(int port) {
        return (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
}

/* A connection to l from a new socket (bound and noted first when own);
 * the peer address l's accept saw into *peer. */
static int connect_to(int l, int lport, bool own, struct sockaddr_in *peer, int *noted) {
        struct sockaddr_in dst = loop4(lport);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        *noted = own ? gp_ownport_bind(fd, (struct sockaddr *)&dst) : 0;
        assert_int_equal(connect(fd, (struct sockaddr *)&dst, sizeof(dst)), 0);
        socklen_t pl = sizeof(*peer);
        int a = accept(l, (struct sockaddr *)peer, &pl);
        assert_true(a >= 0);
        close(a);
        return fd;
}

static void test_ownport_tells_this_process_connections_from_another_s(void **state) {
        (void)state;
        struct sockaddr_in la = loop4(0);
        socklen_t ll = sizeof(la);
        int l = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(l >= 0);
        assert_int_equal(bind(l, (struct sockaddr *)&la, sizeof(la)), 0);
        assert_int_equal(listen(l, 8), 0);
        assert_int_equal(getsockname(l, (struct sockaddr *)&la, &ll), 0);
        int lport = ntohs(la.sin_port);

        struct sockaddr_in mine, theirs;
        int noted, none;
        int a = connect_to(l, lport, true, &mine, &noted);
        int b = connect_to(l, lport, false, &theirs, &none); /* as another process connects: no note */
        assert_true(noted > 0);
        assert_int_equal(ntohs(mine.sin_port), noted);
        assert_int_equal(none, 0);
        assert_true(gp_ownport_is_own((struct sockaddr *)&mine));
        assert_false(gp_ownport_is_own((struct sockaddr *)&theirs));

        /* closed (forgotten first): the port is no longer ours */
        gp_ownport_forget(noted);
        close(a);
        assert_false(gp_ownport_is_own((struct sockaddr *)&mine));
        /* the same by its descriptor alone (a library's close callback) */
        struct sockaddr_in mine2;
        int noted2, a2 = connect_to(l, lport, true, &mine2, &noted2);
        assert_true(gp_ownport_is_own((struct sockaddr *)&mine2));
        gp_ownport_forget_fd(a2);
        close(a2);
        assert_false(gp_ownport_is_own((struct sockaddr *)&mine2));

        /* off loopback nothing is bound or noted; an IPv6 peer is never ours */
        struct sockaddr_in off = {.sin_family = AF_INET, .sin_port = htons(80), .sin_addr.s_addr = htonl(0x0a000001)};
        int c = socket(AF_INET, SOCK_STREAM, 0);
        assert_int_equal(gp_ownport_bind(c, (struct sockaddr *)&off), 0);
        struct sockaddr_in cs;
        socklen_t cl = sizeof(cs);
        assert_int_equal(getsockname(c, (struct sockaddr *)&cs, &cl), 0);
        assert_int_equal(cs.sin_port, 0);
        struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = mine.sin_port, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
        assert_false(gp_ownport_is_own((struct sockaddr *)&v6));
        close(c);
        close(b);
        close(l);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_vec_grows_by_doubling_and_keeps_items),
                cmocka_unit_test(test_vec_refuses_overflow_and_leaves_the_array),
                cmocka_unit_test(test_list_keeps_order_through_adds_and_deletes),
                cmocka_unit_test(test_ownport_tells_this_process_connections_from_another_s),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
