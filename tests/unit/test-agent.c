/* test-agent.c - unit tests of the agent's pure pieces
 * (src/agent/agent-util.c): run directory names, the retry backoff, the
 * sync seq, and which runs a delta sync carries; and its fence deadline
 * (src/agent/agent-fence.c, in a temporary directory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "agent/agent-fence.h"
#include "agent/agent-util.h"
#include "exec/fence.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Issue 22: each node of one agent has its own machine value, the same at
 * every start, and the key itself is not in it. */
static void test_machine_value_is_per_node_and_stable(void **state) {
        (void)state;
        const char *key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        char a[GP_PROTO_MACHINE_LEN + 1], a2[GP_PROTO_MACHINE_LEN + 1], b[GP_PROTO_MACHINE_LEN + 1];
        gp_agent_machine(key, "gpu-a", a);
        gp_agent_machine(key, "gpu-a", a2);
        gp_agent_machine(key, "gpu-b", b);
        assert_true(gp_proto_machine_ok(a));
        assert_string_equal(a, a2);
        assert_string_not_equal(a, b);
        assert_string_not_equal(a, key);
        /* the value is sha256("KEY:NAME") in hex */
        gp_agent_machine("k", "n", a);
        assert_string_equal(a, "a6643027690d1f7db431f6392681a8846da9d43503a2bdd93f74553a9b1a9bee");
}

static void test_run_names_round_trip_and_refuse_junk(void **state) {
        (void)state;
        gp_proto_run_id id = {.task = 7, .epoch = 2, .rank = 3}, back;
        char name[64];
        assert_int_equal(gp_agent_run_name(&id, name, sizeof(name)), 0);
        assert_string_equal(name, "7.2.3");
        assert_int_equal(gp_agent_run_name_parse(name, &back), 0);
        assert_int_equal(back.task, 7);
        assert_int_equal(back.epoch, 2);
        assert_int_equal(back.rank, 3);
        assert_int_equal(gp_agent_run_name(&id, name, 5), -ENAMETOOLONG);
        const char *bad[] = {"", "7", "7.2", "7.2.", "0.1.0", "7.0.0", "07.1.0", "7.1.65536", "7.1.0.1", "-7.1.0",
                             "7.1.x", "99999999999999999999.1.0", ".tmp", "7.1.0 "};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(gp_agent_run_name_parse(bad[i], &back), -EINVAL);
        assert_int_equal(gp_agent_run_name_parse("9007199254740992.1.65535", &back), 0);
}

static void test_backoff_doubles_to_ten_seconds_with_jitter(void **state) {
        (void)state;
        for (int f = 1; f < 40; f++) {
                int64_t cap = 200;
                for (int i = 1; i < f && cap < 10000; i++)
                        cap *= 2;
                if (cap > 10000)
                        cap = 10000;
                for (uint32_t rnd = 0; rnd < 5000; rnd += 97) {
                        int64_t d = gp_agent_backoff_ms(f, rnd * 2654435761u);
                        assert_true(d >= cap / 2 && d <= cap);
                }
        }
        assert_true(gp_agent_backoff_ms(1, 0) == 100);
        assert_true(gp_agent_backoff_ms(100, 0xffffffffu) <= 10000);
}

static void test_seq_grows_even_when_the_clock_goes_back(void **state) {
        (void)state;
        assert_int_equal(gp_agent_next_seq(0, 1000), 1000);
        assert_int_equal(gp_agent_next_seq(1000, 900), 1001);
        assert_int_equal(gp_agent_next_seq(1000, 1000), 1001);
        assert_int_equal(gp_agent_next_seq(1000, 5000), 5000);
}

static void test_delta_carries_changes_and_unacked_exits(void **state) {
        (void)state;
        assert_true(gp_agent_run_in_delta(GP_PROTO_RUNNING, -1));
        assert_false(gp_agent_run_in_delta(GP_PROTO_RUNNING, GP_PROTO_RUNNING));
        assert_true(gp_agent_run_in_delta(GP_PROTO_EXITED, GP_PROTO_RUNNING));
        assert_true(gp_agent_run_in_delta(GP_PROTO_EXITED, GP_PROTO_EXITED));
}

static void test_only_loopback_urls_may_go_in_clear(void **state) {
        (void)state;
        const char *yes[] = {"http://127.0.0.1:8080", "http://127.9.8.7", "http://localhost:1/x", "http://LOCALHOST",
                             "http://[::1]:8080", "http://[::1]", "https://127.0.0.1:8080/", "http://127.0.0.1/a?b"};
        const char *no[] = {"http://10.0.0.5:8080", "http://128.0.0.1", "http://localhost.evil.com",
                            "http://user@127.0.0.1:8080", "http://[::2]:80", "http://[::1", "http://", "ftp://127.0.0.1",
                            "http://127.0.0.1.nip.io", "http://0.0.0.0:8080", "http://[::ffff:127.0.0.1]:1",
                            "http://127.1:80", "http://gpu-a:8080", "127.0.0.1:8080"};
        for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
                assert_true(gp_agent_url_loopback(yes[i]));
        for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
                assert_false(gp_agent_url_loopback(no[i]));
}

static void test_fence_deadline_counts_from_the_send_and_only_moves_forward(void **state) {
        (void)state;
        char dir[] = "/tmp/gp-agent-fence-XXXXXX";
        assert_non_null(mkdtemp(dir));
        gp_agent_fence f;
        assert_int_equal(gp_agent_fence_init(&f, dir), 0);
        assert_true(f.path[0] == '/' && strstr(f.path, "/fence"));
        /* a server that asks for no fencing: no file, runs get none */
        assert_int_equal(gp_agent_fence_synced(&f, 1000, 0), 0);
        assert_null(gp_agent_fence_file(&f, true));
        assert_int_equal(access(f.path, F_OK), -1);
        /* fence_s 30, a sync sent at 1000 answered: deadline 31000 */
        assert_int_equal(gp_agent_fence_synced(&f, 1000, 30), 0);
        int64_t v;
        assert_int_equal(gp_fence_read(f.path, &v), 0);
        assert_int_equal(v, 31000);
        assert_string_equal(gp_agent_fence_file(&f, true), f.path);
        assert_null(gp_agent_fence_file(&f, false)); /* the task opted out */
        /* an older sync answered late does not move it back */
        assert_int_equal(gp_agent_fence_synced(&f, 500, 30), 0);
        assert_int_equal(gp_fence_read(f.path, &v), 0);
        assert_int_equal(v, 31000);
        assert_false(gp_agent_fence_passed_at(&f, 30999));
        assert_true(gp_agent_fence_passed_at(&f, 31000));
        assert_false(gp_agent_fence_passed(&f, 30000));
        assert_true(gp_agent_fence_passed(&f, 31000));
        assert_false(gp_agent_fence_passed(&f, 32000)); /* said once */
        assert_int_equal(gp_agent_fence_synced(&f, 40000, 30), 0);
        assert_int_equal(gp_fence_read(f.path, &v), 0);
        assert_int_equal(v, 70000);
        assert_true(gp_agent_fence_passed(&f, 70000)); /* a new deadline passing is said again */
        unlink(f.path);
        rmdir(dir);
        assert_int_equal(gp_agent_fence_init(&f, "/nonexistent/gp-agent-dir"), -ENOENT);
}

static void test_telemetry_goes_with_the_heartbeat_or_at_once(void **state) {
        (void)state;
        gp_proto_tele a = {.index = 0, .used_mb = 1000, .util_pct = 30, .temp_c = 50, .power_mw = 200000,
                           .sm_clock_mhz = 1400, .mem_clock_mhz = 2600, .ecc_corrected = 0, .ecc_uncorrected = 0,
                           .throttle = 0};
        gp_proto_tele b = a;
        int64_t total = 81920; /* 2 %: 1638 MiB */
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_SAME);
        b.temp_c = 52;   /* small: with the next heartbeat */
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_CHANGED);
        b = a;
        b.sm_clock_mhz = 1980;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_CHANGED);
        b = a;
        b.used_mb = 1000 + 1637;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_CHANGED);
        b.used_mb = 1000 + 1638;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        b = a;
        b.util_pct = 39;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_CHANGED);
        b.util_pct = 40;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        b = a;
        b.temp_c = 55;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        b = a;
        b.power_mw = 224999; /* 10 % of 200 W is 20 W: the 25 W floor holds */
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_CHANGED);
        b.power_mw = 225000;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        b = a;
        b.util_pct = -1; /* a reading lost is news */
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        b = a;
        strcpy(b.reason, "GPU is lost");
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        b = a;
        b.ecc_uncorrected = 1;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        /* processes: one that comes or goes is urgent; growth by 256 MiB too */
        gp_proto_proc p1[1] = {{.pid = 10, .used_mb = 500, .task = 4}}, p2[1] = {{.pid = 10, .used_mb = 700, .task = 4}};
        b = a;
        b.n_procs = 1;
        b.procs = p1;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        a.n_procs = 1;
        a.procs = p1;
        b.procs = p2;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_CHANGED);
        p2[0].used_mb = 756;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        p2[0].used_mb = 500;
        p2[0].pid = 11;
        assert_int_equal(gp_agent_tele_diff(&a, &b, total), GP_AGENT_TELE_URGENT);
        /* the machine */
        gp_host_info h = {.cpus = 8, .mem_total_mb = 32000, .mem_avail_mb = 20000, .disk_total_mb = 100000,
                          .disk_free_mb = 50000}, k = h;
        assert_int_equal(gp_agent_host_diff(&h, &k), GP_AGENT_TELE_SAME);
        k.mem_avail_mb = 20000 - 319; /* 1 % of 32000 = 320 */
        assert_int_equal(gp_agent_host_diff(&h, &k), GP_AGENT_TELE_SAME);
        k.mem_avail_mb = 20000 - 320;
        assert_int_equal(gp_agent_host_diff(&h, &k), GP_AGENT_TELE_CHANGED);
        k.mem_avail_mb = 100; /* free memory is never urgent */
        assert_int_equal(gp_agent_host_diff(&h, &k), GP_AGENT_TELE_CHANGED);
        k = h;
        k.disk_free_mb = 50000 - 255;
        assert_int_equal(gp_agent_host_diff(&h, &k), GP_AGENT_TELE_SAME);
        k.disk_free_mb = 0;
        assert_int_equal(gp_agent_host_diff(&h, &k), GP_AGENT_TELE_CHANGED);
        k = h;
        k.cpus = 7;
        assert_int_equal(gp_agent_host_diff(&h, &k), GP_AGENT_TELE_URGENT);
        k = h;
        k.mem_total_mb = 64000;
        assert_int_equal(gp_agent_host_diff(&h, &k), GP_AGENT_TELE_URGENT);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_run_names_round_trip_and_refuse_junk),
                cmocka_unit_test(test_machine_value_is_per_node_and_stable),
                cmocka_unit_test(test_backoff_doubles_to_ten_seconds_with_jitter),
                cmocka_unit_test(test_seq_grows_even_when_the_clock_goes_back),
                cmocka_unit_test(test_delta_carries_changes_and_unacked_exits),
                cmocka_unit_test(test_only_loopback_urls_may_go_in_clear),
                cmocka_unit_test(test_fence_deadline_counts_from_the_send_and_only_moves_forward),
                cmocka_unit_test(test_telemetry_goes_with_the_heartbeat_or_at_once),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
