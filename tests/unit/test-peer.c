/* test-peer.c - server/peer.h: the kernel's socket table as the server
 * reads it (the owner of a TCP loopback client's socket), and the socket
 * path of a config. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void test_tcp_line_gives_both_ends_and_the_owner(void **state) {
        (void)state;
        const char *line = "   3: 0100007F:B3A4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1001        0 "
                           "123456 1 0000000000000000 20 4 30 10 -1\n";
        uint32_t la, ra;
        uint16_t lp, rp;
        uid_t uid;
        assert_int_equal(gp_peer_tcp_line(line, &la, &lp, &ra, &rp, &uid), 0);
        assert_int_equal(la, inet_addr("127.0.0.1"));
        assert_int_equal(lp, 0xB3A4);
        assert_int_equal(ra, inet_addr("127.0.0.1"));
        assert_int_equal(rp, 8080);
        assert_int_equal(uid, 1001);
}

static void test_tcp_line_refuses_the_header_and_garbage(void **state) {
        (void)state;
        uint32_t la, ra;
        uint16_t lp, rp;
        uid_t uid = 77;
        const char *bad[] = {
                "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n",
                "",
                "   3: 0100007F:B3A4\n",
                "   3: 0100007F:B3A4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  x1001 0\n",
                "   3: 0100007F:B3A4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  99999999999 0\n",
                "   3: ZZ:B3A4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  0 0\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(gp_peer_tcp_line(bad[i], &la, &lp, &ra, &rp, &uid), -EINVAL);
        assert_int_equal(uid, 77); /* nothing written on failure */
}

/* A socket no process holds (closed: FIN_WAIT2, TIME_WAIT) has inode 0
 * and the kernel prints uid 0 for it: that must never name root. */
static void test_tcp_line_of_a_closed_socket_names_no_one(void **state) {
        (void)state;
        const char *line = "   4: 0100007F:B3A6 0100007F:1F90 05 00000000:00000000 00:00000000 00000000     0        0 "
                           "0 1 0000000000000000 20 4 30 10 -1\n";
        uint32_t la = 0, ra = 0;
        uint16_t lp = 0, rp = 0;
        uid_t uid = 77;
        assert_int_equal(gp_peer_tcp_line(line, &la, &lp, &ra, &rp, &uid), -ESRCH);
        assert_int_equal(uid, 77);
        assert_int_equal(lp, 0xB3A6); /* the ends are given, so the caller knows it was its client */
        assert_int_equal(rp, 8080);
}

static void test_socket_path_follows_the_config(void **state) {
        (void)state;
        gp_config cfg;
        memset(&cfg, 0, sizeof(cfg));
        snprintf(cfg.listen, sizeof(cfg.listen), "0.0.0.0:8080");
        char path[108];
        assert_int_equal(gp_peer_socket_path(&cfg, path, sizeof(path)), 0);
        char want[108];
        if (geteuid() == 0)
                snprintf(want, sizeof(want), "/run/gpupool/8080.sock");
        else
                snprintf(want, sizeof(want), "/tmp/gpupool-%u/8080.sock", (unsigned)geteuid());
        assert_string_equal(path, want);
        snprintf(cfg.server_socket, sizeof(cfg.server_socket), "/srv/gp.sock");
        assert_int_equal(gp_peer_socket_path(&cfg, path, sizeof(path)), 0);
        assert_string_equal(path, "/srv/gp.sock");
        snprintf(cfg.server_socket, sizeof(cfg.server_socket), "off");
        assert_int_equal(gp_peer_socket_path(&cfg, path, sizeof(path)), 0);
        assert_string_equal(path, "");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_tcp_line_gives_both_ends_and_the_owner),
                cmocka_unit_test(test_tcp_line_refuses_the_header_and_garbage),
                cmocka_unit_test(test_tcp_line_of_a_closed_socket_names_no_one),
                cmocka_unit_test(test_socket_path_follows_the_config),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
