/* test-proto.c - unit tests of the agent messages (src/cluster/proto.c),
 * base64 (src/base/base64.c) and node labels (src/base/labels.c): every
 * message renders and parses back to the same struct, and every bound of
 * docs/internals/cluster.md is refused with a message naming the field,
 * leaving the output struct untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base64.h"
#include "base/labels.h"
#include "cluster/proto.h"

#define CRED "gpn_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static bool id_eq(const gp_proto_run_id *a, const gp_proto_run_id *b) {
        return a->task == b->task && a->epoch == b->epoch && a->rank == b->rank;
}

static void gpu_eq(const gp_proto_gpu *a, const gp_proto_gpu *b) {
        assert_int_equal(a->index, b->index);
        assert_string_equal(a->uuid, b->uuid);
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->memory_mb, b->memory_mb);
        assert_int_equal(a->healthy, b->healthy);
}

static void test_base64_round_trips_and_refuses_non_canonical(void **state) {
        (void)state;
        const char *vec[][2] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="},
                                {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
        for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
                char enc[16], dec[16];
                size_t n;
                assert_int_equal(gp_base64_encode(vec[i][0], strlen(vec[i][0]), enc, sizeof(enc)), 0);
                assert_string_equal(enc, vec[i][1]);
                assert_int_equal(gp_base64_decode(enc, strlen(enc), dec, sizeof(dec), &n), 0);
                assert_int_equal(n, strlen(vec[i][0]));
                assert_memory_equal(dec, vec[i][0], n);
        }
        unsigned char all[256], back[256];
        char enc[400];
        size_t n;
        for (int i = 0; i < 256; i++)
                all[i] = (unsigned char)i;
        assert_int_equal(gp_base64_encode(all, 256, enc, sizeof(enc)), 0);
        assert_int_equal(gp_base64_decode(enc, strlen(enc), back, 255, &n), -E2BIG);
        assert_int_equal(gp_base64_decode(enc, strlen(enc), back, sizeof(back), &n), 0);
        assert_int_equal(n, 256);
        assert_memory_equal(back, all, 256);
        const char *bad[] = {"Zg=", "Zh==", "Zm9=", "Zg==Zg==", "Z===", "Zm 9", "Zm9v\n", "====", "Zm-_", "Zm8=a"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                unsigned char out[16];
                assert_int_equal(gp_base64_decode(bad[i], strlen(bad[i]), out, sizeof(out), &n), -EINVAL);
        }
        char small[4];
        assert_int_equal(gp_base64_encode("foo", 3, small, sizeof(small)), -E2BIG);
}

static void test_labels_canonical_sorted_and_refusals(void **state) {
        (void)state;
        char out[GP_LABELS_MAX], err[200];
        assert_int_equal(gp_labels_canon("zone=a,ib=yes,gpu.kind=h100", out, sizeof(out), err, sizeof(err)), 0);
        assert_string_equal(out, "gpu.kind=h100,ib=yes,zone=a");
        assert_int_equal(gp_labels_canon("", out, sizeof(out), err, sizeof(err)), 0);
        assert_string_equal(out, "");
        assert_int_equal(gp_labels_canon("k=", out, sizeof(out), err, sizeof(err)), 0);
        assert_string_equal(out, "k=");
        strcpy(out, "unchanged");
        const char *bad[] = {"a", "a=1,a=2", "=v", "a=b c", "a=1,", ",a=1", "a=x=y", "k\xc3\xa9=v"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                err[0] = '\0';
                assert_int_equal(gp_labels_canon(bad[i], out, sizeof(out), err, sizeof(err)), -EINVAL);
                assert_string_equal(out, "unchanged");
                assert_true(err[0] != '\0');
        }
        char many[600] = "";
        for (int i = 0; i < 33; i++)
                snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sk%d=v", i ? "," : "", i);
        assert_int_equal(gp_labels_canon(many, out, sizeof(out), err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "more than 32"));
        assert_int_equal(gp_labels_canon("a=1,b=2", out, 6, err, sizeof(err)), -EINVAL);
        assert_string_equal(out, "unchanged");
        size_t pos = 0, kn, vn;
        const char *k, *v;
        int n = 0;
        while (gp_labels_next("a=1,bb=", &pos, &k, &kn, &v, &vn))
                n++;
        assert_int_equal(n, 2);
}

static void test_node_names_and_secrets(void **state) {
        (void)state;
        assert_true(gp_proto_node_name_ok("gpu-a.1_x"));
        assert_false(gp_proto_node_name_ok(""));
        assert_false(gp_proto_node_name_ok("local"));
        assert_false(gp_proto_node_name_ok("a b"));
        assert_false(gp_proto_node_name_ok("123456789012345678901234567890123456789012345678"));
        assert_true(gp_proto_node_name_ok("12345678901234567890123456789012345678901234567"));
        assert_true(gp_proto_credential_ok(CRED));
        assert_false(gp_proto_join_token_ok(CRED));
        assert_false(gp_proto_credential_ok("gpn_0123"));
        assert_false(gp_proto_credential_ok(CRED "0"));
}

static void test_join_token_splits_into_secret_and_ca_pin(void **state) {
        (void)state;
        char sec[GP_PROTO_CRED_LEN + 1] = "x", pin[GP_PROTO_CA_HASH_LEN] = "x";
        const char *s64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        char tok[200];
        snprintf(tok, sizeof(tok), "gpj_%s", s64);
        assert_int_equal(gp_proto_join_token_split(tok, sec, pin), 0);
        assert_string_equal(sec, tok);
        assert_string_equal(pin, "");
        snprintf(tok, sizeof(tok), "gpj_%s.%s", s64, "ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00");
        assert_int_equal(gp_proto_join_token_split(tok, sec, pin), 0);
        assert_int_equal(strlen(sec), GP_PROTO_CRED_LEN);
        assert_memory_equal(sec, tok, GP_PROTO_CRED_LEN);
        assert_string_equal(pin, "sha256:ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00");
        assert_true(gp_proto_join_token_ok(sec));
        /* refused: no trace left in the outputs */
        strcpy(sec, "keep");
        strcpy(pin, "keep");
        char bad[8][200];
        snprintf(bad[0], 200, "gpj_%s.", s64);                           /* an empty pin */
        snprintf(bad[1], 200, "gpj_%s.%.63s", s64, s64);                 /* a short pin */
        snprintf(bad[2], 200, "gpj_%s.%s0", s64, s64);                   /* a long one */
        snprintf(bad[3], 200, "gpj_%s:%s", s64, s64);                    /* not a '.' */
        snprintf(bad[4], 200, "gpj_%s.%.63sA", s64, s64);                /* uppercase */
        snprintf(bad[5], 200, "gpn_%s.%s", s64, s64);                    /* a credential */
        snprintf(bad[6], 200, "gpj_%.63s.%s0", s64, s64);                /* a short secret */
        snprintf(bad[7], 200, "gpj_%s.sha256:%.57s", s64, s64);          /* the pin's prefix */
        for (int i = 0; i < 8; i++)
                assert_int_equal(gp_proto_join_token_split(bad[i], sec, pin), -EINVAL);
        assert_int_equal(gp_proto_join_token_split("", sec, pin), -EINVAL);
        assert_string_equal(sec, "keep");
        assert_string_equal(pin, "keep");
}

static void test_join_round_trip(void **state) {
        (void)state;
        gp_proto_gpu g[2] = {{.index = 0, .uuid = "GPU-1", .name = "NVIDIA H100", .memory_mb = 81559, .healthy = true},
                             {.index = 1, .uuid = "GPU-2", .name = "", .memory_mb = 0, .healthy = false}};
        gp_proto_join m = {.name = "gpu-a", .version = "0.10.0", .address = "http://10.0.0.7:8081",
                           .labels = "ib=yes,zone=a", .backend = "nvml", .n_gpus = 2, .gpus = g};
        char *s, err[200];
        assert_int_equal(gp_proto_join_render(&m, &s), 0);
        gp_proto_join p;
        assert_int_equal(gp_proto_join_parse(s, strlen(s), &p, err, sizeof(err)), 0);
        free(s);
        assert_string_equal(p.name, "gpu-a");
        assert_string_equal(p.version, "0.10.0");
        assert_string_equal(p.address, "http://10.0.0.7:8081");
        assert_string_equal(p.labels, "ib=yes,zone=a");
        assert_string_equal(p.backend, "nvml");
        assert_int_equal(p.n_gpus, 2);
        for (int i = 0; i < 2; i++)
                gpu_eq(&p.gpus[i], &g[i]);
        gp_proto_join_done(&p);
        /* an empty labels object is no labels (the flat buffer was read uninitialised: fuzz-proto) */
        const char *empty = "{\"name\":\"n1\",\"labels\":{}}";
        assert_int_equal(gp_proto_join_parse(empty, strlen(empty), &p, err, sizeof(err)), 0);
        assert_string_equal(p.labels, "");
        gp_proto_join_done(&p);
        /* labels of a join come as an object in any order */
        const char *in = "{\"name\":\"n1\",\"labels\":{\"zone\":\"b\",\"a\":\"\"}}";
        assert_int_equal(gp_proto_join_parse(in, strlen(in), &p, err, sizeof(err)), 0);
        assert_string_equal(p.labels, "a=,zone=b");
        assert_int_equal(p.n_gpus, 0);
        assert_null(p.gpus);
        gp_proto_join_done(&p);
        gp_proto_join_done(NULL);

        gp_proto_join_answer a = {.node = "gpu-a", .credential = CRED, .heartbeat_s = 2, .node_timeout_s = 10,
                                  .fence_s = 30}, pa;
        assert_int_equal(gp_proto_join_answer_render(&a, &s), 0);
        assert_int_equal(gp_proto_join_answer_parse(s, strlen(s), &pa, err, sizeof(err)), 0);
        free(s);
        assert_string_equal(pa.node, a.node);
        assert_string_equal(pa.credential, a.credential);
        assert_int_equal(pa.heartbeat_s, 2);
        assert_int_equal(pa.node_timeout_s, 10);
        assert_int_equal(pa.max_body, 0); /* not said */
        assert_int_equal(pa.fence_s, 30);
        /* an older server's answer: no fence_s, no fencing */
        static const char old[] = "{\"node\":\"gpu-a\",\"credential\":\"" CRED "\",\"heartbeat_s\":2}";
        assert_int_equal(gp_proto_join_answer_parse(old, strlen(old), &pa, err, sizeof(err)), 0);
        assert_int_equal(pa.fence_s, 0);
        static const char bad[] = "{\"node\":\"gpu-a\",\"credential\":\"" CRED "\",\"fence_s\":3601}";
        assert_int_equal(gp_proto_join_answer_parse(bad, strlen(bad), &pa, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "fence_s"));
}

/* Issue 22: a join's machine and seq, the answers' max_body, a full sync's
 * pages, and the 409 that carries the last seq. */
static void test_identity_paging_and_replay_fields(void **state) {
        (void)state;
        char *s, err[200];
        gp_proto_join m = {.name = "gpu-a", .seq = 1732512345678001,
                           .machine = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
        gp_proto_join p;
        assert_int_equal(gp_proto_join_render(&m, &s), 0);
        assert_int_equal(gp_proto_join_parse(s, strlen(s), &p, err, sizeof(err)), 0);
        free(s);
        assert_string_equal(p.machine, m.machine);
        assert_int_equal(p.seq, m.seq);
        gp_proto_join_done(&p);
        assert_true(gp_proto_machine_ok(m.machine));
        assert_false(gp_proto_machine_ok("0123"));
        assert_false(gp_proto_machine_ok("0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"));

        gp_proto_join_answer a = {.node = "gpu-a", .credential = CRED, .heartbeat_s = 2, .node_timeout_s = 10,
                                  .max_body = 65536}, pa;
        assert_int_equal(gp_proto_join_answer_render(&a, &s), 0);
        assert_int_equal(gp_proto_join_answer_parse(s, strlen(s), &pa, err, sizeof(err)), 0);
        free(s);
        assert_int_equal(pa.max_body, 65536);

        gp_proto_sync sm = {.node = "n", .seq = 9, .full = true, .page = 3, .more = true}, sp;
        assert_int_equal(gp_proto_sync_render(&sm, &s), 0);
        assert_int_equal(gp_proto_sync_parse(s, strlen(s), &sp, err, sizeof(err)), 0);
        free(s);
        assert_true(sp.full && sp.more);
        assert_int_equal(sp.page, 3);
        gp_proto_sync_done(&sp);
        gp_proto_sync bad = {.node = "n", .seq = 9, .more = true}; /* more without full */
        assert_int_equal(gp_proto_sync_render(&bad, &s), -EINVAL);

        gp_proto_sync_answer am = {.seq = 9, .heartbeat_s = 2, .max_body = 1 << 20}, ap;
        assert_int_equal(gp_proto_sync_answer_render(&am, &s), 0);
        assert_int_equal(gp_proto_sync_answer_parse(s, strlen(s), &ap, err, sizeof(err)), 0);
        free(s);
        assert_int_equal(ap.max_body, 1 << 20);
        gp_proto_sync_answer_done(&ap);

        char *r = gp_proto_replay_render("replayed", 1732512345678001);
        int64_t last = 0;
        assert_int_equal(gp_proto_replay_parse(r, strlen(r), &last), 0);
        assert_int_equal(last, 1732512345678001);
        free(r);
        const char *no[] = {"{\"error\":\"x\"}", "{\"seq\":-1}", "{\"seq\":\"7\"}", "[]", "{"};
        for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
                assert_int_equal(gp_proto_replay_parse(no[i], strlen(no[i]), &last), -EINVAL);
}

static void test_sync_round_trip_with_logs_and_results(void **state) {
        (void)state;
        gp_proto_gpu g = {.index = 3, .uuid = "SIM-0-3", .name = "sim", .memory_mb = 1000, .healthy = true};
        gp_proto_run runs[2] = {{.id = {7, 2, 0}, .state = GP_PROTO_RUNNING},
                                {.id = {5, 1, 3}, .state = GP_PROTO_EXITED,
                                 .result = {.end = GP_EXEC_SIGNALED, .exit_code = 137, .signal = 9,
                                            .finished_ms = 1732512345000, .message = "killed by signal 9"}}};
        unsigned char bin[300];
        for (int i = 0; i < 300; i++)
                bin[i] = (unsigned char)(i * 7);
        gp_proto_log logs[1] = {{.id = {7, 2, 0}, .offset = 4096, .len = sizeof(bin), .data = bin}};
        gp_proto_sync m = {.node = "gpu-a", .seq = 1732512345678001, .full = true, .wait_ms = 2000, .has_gpus = true,
                           .n_gpus = 1, .gpus = &g, .n_runs = 2, .runs = runs, .n_logs = 1, .logs = logs};
        char *s, err[200];
        assert_int_equal(gp_proto_sync_render(&m, &s), 0);
        gp_proto_sync p;
        assert_int_equal(gp_proto_sync_parse(s, strlen(s), &p, err, sizeof(err)), 0);
        free(s);
        assert_string_equal(p.node, "gpu-a");
        assert_int_equal(p.seq, 1732512345678001);
        assert_true(p.full);
        assert_int_equal(p.wait_ms, 2000);
        assert_true(p.has_gpus);
        assert_int_equal(p.n_gpus, 1);
        gpu_eq(&p.gpus[0], &g);
        assert_int_equal(p.n_runs, 2);
        for (int i = 0; i < 2; i++) {
                assert_true(id_eq(&p.runs[i].id, &runs[i].id));
                assert_int_equal(p.runs[i].state, runs[i].state);
                assert_int_equal(p.runs[i].result.end, runs[i].result.end);
                assert_int_equal(p.runs[i].result.exit_code, runs[i].result.exit_code);
                assert_int_equal(p.runs[i].result.signal, runs[i].result.signal);
                assert_int_equal(p.runs[i].result.finished_ms, runs[i].result.finished_ms);
                assert_string_equal(p.runs[i].result.message, runs[i].result.message);
        }
        assert_int_equal(p.n_logs, 1);
        assert_int_equal(p.logs[0].offset, 4096);
        assert_int_equal(p.logs[0].len, sizeof(bin));
        assert_memory_equal(p.logs[0].data, bin, sizeof(bin));
        gp_proto_sync_done(&p);
        /* an idle heartbeat is {"node","seq","wait_ms"} */
        gp_proto_sync idle = {.node = "n", .seq = 9, .wait_ms = 0};
        assert_int_equal(gp_proto_sync_render(&idle, &s), 0);
        assert_string_equal(s, "{\"node\":\"n\",\"seq\":9,\"wait_ms\":0}");
        assert_int_equal(gp_proto_sync_parse(s, strlen(s), &p, err, sizeof(err)), 0);
        free(s);
        assert_false(p.full);
        assert_false(p.has_gpus);
        assert_int_equal(p.n_runs + p.n_logs, 0);
        gp_proto_sync_done(&p);
        gp_proto_sync_done(NULL);
}

static void test_sync_telemetry_round_trip_and_bounds(void **state) {
        (void)state;
        gp_proto_proc procs[2] = {{.pid = 4242, .used_mb = 700, .task = 7, .rank = 1}, {.pid = 99, .used_mb = 12}};
        gp_proto_tele t[2] = {
                {.index = 0, .used_mb = 1000, .util_pct = 37, .temp_c = 55, .power_mw = 210000, .sm_clock_mhz = 1755,
                 .mem_clock_mhz = 2619, .ecc_corrected = 3, .ecc_uncorrected = 0, .throttle = 4, .xid_errors = 2,
                 .n_procs = 2,
                 .procs = procs},
                {.index = 5, .used_mb = -1, .util_pct = -1, .temp_c = -1, .power_mw = -1, .sm_clock_mhz = -1,
                 .mem_clock_mhz = -1, .ecc_corrected = -1, .ecc_uncorrected = -1, .throttle = -1, .xid_errors = -1,
                 .reason = "nvmlDeviceGetTemperature failed: GPU is lost (15)"}};
        gp_proto_sync m = {.node = "gpu-a", .seq = 7, .n_tele = 2, .tele = t, .has_host = true,
                           .host = {.cpus = 96, .mem_total_mb = 2064384, .mem_avail_mb = 1843200,
                                    .disk_total_mb = -1, .disk_free_mb = 7680}};
        char *s, err[200];
        assert_int_equal(gp_proto_sync_render(&m, &s), 0);
        assert_null(strstr(s, "disk_total_mb")); /* unknown: left out */
        gp_proto_sync p;
        assert_int_equal(gp_proto_sync_parse(s, strlen(s), &p, err, sizeof(err)), 0);
        free(s);
        assert_int_equal(p.n_tele, 2);
        const gp_proto_tele *a = &p.tele[0], *b = &p.tele[1];
        assert_int_equal(a->index, 0);
        assert_int_equal(a->used_mb, 1000);
        assert_int_equal(a->util_pct, 37);
        assert_int_equal(a->temp_c, 55);
        assert_int_equal(a->power_mw, 210000);
        assert_int_equal(a->sm_clock_mhz, 1755);
        assert_int_equal(a->mem_clock_mhz, 2619);
        assert_int_equal(a->ecc_corrected, 3);
        assert_int_equal(a->ecc_uncorrected, 0);
        assert_int_equal(a->throttle, 4);
        assert_int_equal(a->xid_errors, 2);
        assert_string_equal(a->reason, "");
        assert_int_equal(a->n_procs, 2);
        assert_int_equal(a->procs[0].pid, 4242);
        assert_int_equal(a->procs[0].used_mb, 700);
        assert_int_equal(a->procs[0].task, 7);
        assert_int_equal(a->procs[0].rank, 1);
        assert_int_equal(a->procs[1].task, 0);
        assert_int_equal(b->index, 5);
        assert_int_equal(b->util_pct, -1);
        assert_int_equal(b->used_mb, -1);
        assert_int_equal(b->throttle, -1);
        assert_int_equal(b->n_procs, 0);
        assert_string_equal(b->reason, "nvmlDeviceGetTemperature failed: GPU is lost (15)");
        assert_true(p.has_host);
        assert_int_equal(p.host.cpus, 96);
        assert_int_equal(p.host.mem_avail_mb, 1843200);
        assert_int_equal(p.host.disk_total_mb, -1);
        assert_int_equal(p.host.disk_free_mb, 7680);
        gp_proto_sync_done(&p);
        /* every bound: refused with the field named, nothing allocated (ASan) */
        static const struct {
                const char *body, *why;
        } bad[] = {
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"index\":0,\"util_pct\":101}]}", "util_pct"},
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"index\":0,\"temp_c\":-1}]}", "temp_c"},
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"index\":256}]}", "index"},
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"util_pct\":1}]}", "index"},
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"index\":1},{\"index\":1}]}", "twice"},
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"index\":0,\"procs\":[{\"pid\":0,\"used_mb\":1}]}]}",
                 "pid"},
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"index\":0,\"procs\":[{\"pid\":5,\"used_mb\":1},"
                 "{\"pid\":5,\"used_mb\":2}]}]}",
                 "twice"},
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"index\":0,\"procs\":[{\"pid\":5}]}]}", "used_mb"},
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"index\":0,\"reason\":\"a\\u0001b\"}]}", "reason"},
                {"{\"node\":\"n\",\"seq\":1,\"telemetry\":{}}", "telemetry"},
                {"{\"node\":\"n\",\"seq\":1,\"host\":{\"cpus\":0}}", "cpus"},
                {"{\"node\":\"n\",\"seq\":1,\"host\":{\"cpus\":2,\"disk_free_mb\":-5}}", "disk_free_mb"},
                {"{\"node\":\"n\",\"seq\":1,\"host\":[]}", "host"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                memset(&p, 0x5a, sizeof(p));
                err[0] = '\0';
                assert_int_equal(gp_proto_sync_parse(bad[i].body, strlen(bad[i].body), &p, err, sizeof(err)), -EINVAL);
                if (!strstr(err, bad[i].why))
                        fail_msg("%s: %s (wanted %s)", bad[i].body, err, bad[i].why);
        }
        /* 65 procs on one GPU: more than GP_PROTO_MAX_PROCS */
        char big[8192];
        size_t off = (size_t)snprintf(big, sizeof(big), "{\"node\":\"n\",\"seq\":1,\"telemetry\":[{\"index\":0,\"procs\":[");
        for (int i = 0; i <= GP_PROTO_MAX_PROCS; i++)
                off += (size_t)snprintf(big + off, sizeof(big) - off, "%s{\"pid\":%d,\"used_mb\":1}", i ? "," : "", i + 1);
        snprintf(big + off, sizeof(big) - off, "]}]}");
        assert_int_equal(gp_proto_sync_parse(big, strlen(big), &p, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "procs"));
        /* the answer's gpu_poll_ms: 0 when absent, else 100..3600000 */
        gp_proto_sync_answer ans = {.seq = 3, .heartbeat_s = 2, .gpu_poll_ms = 250}, q;
        assert_int_equal(gp_proto_sync_answer_render(&ans, &s), 0);
        assert_int_equal(gp_proto_sync_answer_parse(s, strlen(s), &q, err, sizeof(err)), 0);
        free(s);
        assert_int_equal(q.gpu_poll_ms, 250);
        gp_proto_sync_answer_done(&q);
        const char *slow = "{\"seq\":3,\"gpu_poll_ms\":99}";
        assert_int_equal(gp_proto_sync_answer_parse(slow, strlen(slow), &q, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "gpu_poll_ms"));
}

static void test_sync_answer_round_trip_and_start_copy(void **state) {
        (void)state;
        char *argv[] = {"python3", "train.py", "--x=ü", NULL};
        char *env[] = {"K=V", "EMPTY=", "_a1=x=y", NULL};
        gp_proto_start st = {.id = {9, 1, 1}, .nnodes = 2, .master_addr = "10.0.0.7", .master_port = 29509,
                             .tenant = "dept_a", .n_argv = 3, .argv = argv, .n_env = 3, .env = env,
                             .workdir = "/tmp/w", .cuda_visible_devices = "0,1", .gpus = "gpu-a:0,gpu-a:1",
                             .timeout_s = 60, .kill_grace_s = 10, .preempt_grace_s = 30, .max_log_bytes = 104857600,
                             .run_as = "alice", .array_id = 4, .array_index = 2, .fence = true,
                             .notice = {.signo = SIGUSR1, .seconds = 120, .batch_only = true},
                             .mps_memory_mb = 8000, .mps_compute_pct = 10, .mps_uuid = "GPU-8a3c-11"};
        gp_proto_run_id ack[1] = {{5, 1, 0}};
        gp_proto_stop stop[2] = {{{7, 2, 0}, GP_PROTO_STOP_PREEMPT}, {{8, 1, 0}, GP_PROTO_STOP_STALE}};
        gp_proto_offset offs[1] = {{{7, 2, 0}, 4096}};
        gp_proto_sync_answer m = {.seq = 77, .heartbeat_s = 3, .fence_s = 12, .want_full = true, .n_ack = 1, .ack = ack,
                                  .n_start = 1, .start = &st, .n_stop = 2, .stop = stop, .n_offsets = 1,
                                  .offsets = offs};
        char *s, err[200];
        assert_int_equal(gp_proto_sync_answer_render(&m, &s), 0);
        gp_proto_sync_answer p;
        assert_int_equal(gp_proto_sync_answer_parse(s, strlen(s), &p, err, sizeof(err)), 0);
        free(s);
        assert_int_equal(p.seq, 77);
        assert_int_equal(p.heartbeat_s, 3);
        assert_int_equal(p.fence_s, 12);
        assert_true(p.start[0].fence);
        assert_true(p.want_full);
        assert_int_equal(p.n_ack, 1);
        assert_true(id_eq(&p.ack[0], &ack[0]));
        assert_int_equal(p.n_stop, 2);
        for (int i = 0; i < 2; i++) {
                assert_true(id_eq(&p.stop[i].id, &stop[i].id));
                assert_int_equal(p.stop[i].why, stop[i].why);
        }
        assert_int_equal(p.n_offsets, 1);
        assert_true(id_eq(&p.offsets[0].id, &offs[0].id));
        assert_int_equal(p.offsets[0].offset, 4096);
        assert_int_equal(p.n_start, 1);
        gp_proto_start c;
        assert_int_equal(gp_proto_start_copy(&p.start[0], &c), 0);
        gp_proto_sync_answer_done(&p);
        assert_true(id_eq(&c.id, &st.id));
        assert_int_equal(c.nnodes, 2);
        assert_string_equal(c.master_addr, "10.0.0.7");
        assert_int_equal(c.master_port, 29509);
        assert_string_equal(c.tenant, "dept_a");
        assert_int_equal(c.n_argv, 3);
        for (int i = 0; i < 3; i++)
                assert_string_equal(c.argv[i], argv[i]);
        assert_null(c.argv[3]);
        assert_int_equal(c.n_env, 3);
        int found = 0;
        for (int i = 0; i < 3; i++)
                for (int k = 0; k < 3; k++)
                        found += !strcmp(c.env[i], env[k]);
        assert_int_equal(found, 3);
        assert_null(c.env[3]);
        assert_string_equal(c.workdir, "/tmp/w");
        assert_string_equal(c.cuda_visible_devices, "0,1");
        assert_string_equal(c.gpus, "gpu-a:0,gpu-a:1");
        assert_int_equal(c.timeout_s, 60);
        assert_int_equal(c.kill_grace_s, 10);
        assert_int_equal(c.preempt_grace_s, 30);
        assert_int_equal(c.max_log_bytes, 104857600);
        assert_string_equal(c.run_as, "alice");
        assert_int_equal(c.array_id, 4);
        assert_int_equal(c.array_index, 2);
        assert_int_equal(c.notice.signo, SIGUSR1); /* --signal B:SIGUSR1@120 */
        assert_int_equal(c.notice.seconds, 120);
        assert_true(c.notice.batch_only);
        assert_int_equal(c.mps_memory_mb, 8000); /* an MPS client of its GPU's daemon (agent-mps.h) */
        assert_int_equal(c.mps_compute_pct, 10);
        assert_string_equal(c.mps_uuid, "GPU-8a3c-11");
        gp_proto_start_done(&c);
        gp_proto_start_done(NULL);
        /* an empty answer: defaults */
        const char *e = "{\"seq\":5}";
        assert_int_equal(gp_proto_sync_answer_parse(e, strlen(e), &p, err, sizeof(err)), 0);
        assert_int_equal(p.heartbeat_s, 2);
        assert_int_equal(p.n_start + p.n_ack + p.n_stop + p.n_offsets, 0);
        gp_proto_sync_answer_done(&p);
        char *er = gp_proto_error_render("node removed");
        assert_string_equal(er, "{\"error\":\"node removed\"}");
        free(er);
}

/* A message refused: -EINVAL, err contains want, the output untouched. */
enum { JOIN, JOIN_ANSWER, SYNC, SYNC_ANSWER };

static void expect_refused(int kind, const char *msg, const char *want) {
        union {
                gp_proto_join j;
                gp_proto_join_answer ja;
                gp_proto_sync s;
                gp_proto_sync_answer sa;
        } out, before;
        char err[300] = "";
        int r;
        memset(&out, 0xa5, sizeof(out));
        memcpy(&before, &out, sizeof(out));
        size_t n = strlen(msg);
        switch (kind) {
        case JOIN: r = gp_proto_join_parse(msg, n, &out.j, err, sizeof(err)); break;
        case JOIN_ANSWER: r = gp_proto_join_answer_parse(msg, n, &out.ja, err, sizeof(err)); break;
        case SYNC: r = gp_proto_sync_parse(msg, n, &out.s, err, sizeof(err)); break;
        default: r = gp_proto_sync_answer_parse(msg, n, &out.sa, err, sizeof(err)); break;
        }
        if (r != -EINVAL || !strstr(err, want))
                fail_msg("%.200s: got %d '%s', wanted -EINVAL with '%s'", msg, r, err, want);
        assert_memory_equal(&out, &before, sizeof(out));
}

static char *with_runs(int n) {
        size_t cap = (size_t)n * 64 + 100, o = 0;
        char *s = malloc(cap);
        o += (size_t)snprintf(s, cap, "{\"node\":\"a\",\"seq\":1,\"runs\":[");
        for (int i = 0; i < n; i++)
                o += (size_t)snprintf(s + o, cap - o, "%s{\"task\":%d,\"epoch\":1,\"state\":\"running\"}",
                                      i ? "," : "", i + 1);
        snprintf(s + o, cap - o, "]}");
        return s;
}

static void test_every_bound_is_refused(void **state) {
        (void)state;
        expect_refused(JOIN, "[]", "JSON object");
        expect_refused(JOIN, "{", "not JSON");
        expect_refused(JOIN, "{\"name\":\"a\",\"name\":\"b\"}", "not JSON");
        expect_refused(JOIN, "{}", "name is missing");
        expect_refused(JOIN, "{\"name\":\"local\"}", "not 'local'");
        expect_refused(JOIN, "{\"name\":\"a b\"}", "[A-Za-z0-9._-]");
        expect_refused(JOIN, "{\"name\":\"a234567890123456789012345678901234567890123456789\"}", "name");
        expect_refused(JOIN, "{\"name\":7}", "name must be a string");
        expect_refused(JOIN, "{\"name\":\"a\",\"backend\":\"cuda\"}", "backend");
        expect_refused(JOIN, "{\"name\":\"a\",\"version\":\"a\\nb\"}", "version");
        expect_refused(JOIN, "{\"name\":\"a\",\"labels\":[]}", "labels must be an object");
        expect_refused(JOIN, "{\"name\":\"a\",\"labels\":{\"k\":1}}", "label k: value");
        expect_refused(JOIN, "{\"name\":\"a\",\"labels\":{\"k,x=y\":\"v\"}}", "label keys");
        expect_refused(JOIN, "{\"name\":\"a\",\"labels\":{\"k\":\"v,x=y\"}}", "label k: value");
        expect_refused(JOIN, "{\"name\":\"a\",\"gpus\":{}}", "gpus must be an array");
        expect_refused(JOIN, "{\"name\":\"a\",\"gpus\":[{\"index\":0,\"memory_mb\":1}]}", "gpus[0].uuid is missing");
        expect_refused(JOIN, "{\"name\":\"a\",\"gpus\":[{\"index\":256,\"uuid\":\"u\",\"memory_mb\":1}]}",
                       "gpus[0].index must be an integer 0..255");
        expect_refused(JOIN, "{\"name\":\"a\",\"gpus\":[{\"index\":0,\"uuid\":\"u\",\"memory_mb\":-1}]}", "memory_mb");
        expect_refused(JOIN,
                       "{\"name\":\"a\",\"gpus\":[{\"index\":0,\"uuid\":\"u\",\"memory_mb\":1},"
                       "{\"index\":0,\"uuid\":\"v\",\"memory_mb\":1}]}",
                       "gpus[1].index 0 given twice");
        expect_refused(JOIN, "{\"name\":\"a\",\"gpus\":[{\"index\":0,\"uuid\":\"u\",\"memory_mb\":1,\"healthy\":1}]}",
                       "healthy must be true or false");
        {
                char big[400 * 60] = "{\"name\":\"a\",\"gpus\":[";
                for (int i = 0; i < 257; i++)
                        snprintf(big + strlen(big), sizeof(big) - strlen(big),
                                 "%s{\"index\":%d,\"uuid\":\"u\",\"memory_mb\":1}", i ? "," : "", i % 256);
                strcat(big, "]}");
                expect_refused(JOIN, big, "more than 256");
        }
        expect_refused(JOIN, "{\"name\":\"a\",\"machine\":\"abc\"}", "machine must be 64 lowercase hex");
        expect_refused(JOIN, "{\"name\":\"a\",\"seq\":0}", "seq must be an integer 1..");
        expect_refused(JOIN_ANSWER, "{\"node\":\"a\",\"credential\":\"" CRED "\",\"max_body\":1023}", "max_body");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"page\":1}", "page and more belong to a full sync");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"more\":true}", "page and more belong to a full sync");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"full\":true,\"page\":100001}", "page must be");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"max_body\":\"big\"}", "max_body");
        expect_refused(JOIN_ANSWER, "{\"node\":\"a\",\"credential\":\"gpn_12\"}", "credential must be");
        expect_refused(JOIN_ANSWER, "{\"node\":\"a\",\"credential\":\"" CRED "\",\"heartbeat_s\":0}", "heartbeat_s");
        expect_refused(JOIN_ANSWER, "{\"node\":\"a\",\"credential\":\"" CRED "\",\"node_timeout_s\":1}",
                       "node_timeout_s");

        expect_refused(SYNC, "{\"node\":\"a\"}", "seq is missing");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":0}", "seq must be an integer 1..");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1.5}", "seq");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"wait_ms\":30001}", "wait_ms must be an integer 0..30000");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"full\":\"yes\"}", "full must be true or false");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"runs\":[{\"task\":0,\"epoch\":1,\"state\":\"running\"}]}",
                       "runs[0].task");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"runs\":[{\"task\":1,\"epoch\":0,\"state\":\"running\"}]}",
                       "runs[0].epoch");
        expect_refused(SYNC,
                       "{\"node\":\"a\",\"seq\":1,\"runs\":[{\"task\":1,\"epoch\":1,\"rank\":65536,"
                       "\"state\":\"running\"}]}",
                       "runs[0].rank");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"runs\":[{\"task\":1,\"epoch\":1,\"state\":\"gone\"}]}",
                       "state must be running or exited");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"runs\":[{\"task\":1,\"epoch\":1,\"state\":\"exited\"}]}",
                       "without a result");
        expect_refused(SYNC,
                       "{\"node\":\"a\",\"seq\":1,\"runs\":[{\"task\":1,\"epoch\":1,\"state\":\"exited\","
                       "\"result\":{\"end\":\"died\"}}]}",
                       "runs[0].result.end must be");
        expect_refused(SYNC,
                       "{\"node\":\"a\",\"seq\":1,\"runs\":[{\"task\":1,\"epoch\":1,\"state\":\"exited\","
                       "\"result\":{\"end\":\"exited\",\"message\":\"a\\u0000b\"}}]}",
                       "u0000");
        expect_refused(SYNC,
                       "{\"node\":\"a\",\"seq\":1,\"runs\":[{\"task\":1,\"epoch\":1,\"state\":\"running\"},"
                       "{\"task\":1,\"epoch\":1,\"rank\":0,\"state\":\"running\"}]}",
                       "names run 1.1.0 twice");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"logs\":[{\"task\":1,\"epoch\":1,\"offset\":0}]}",
                       "logs[0].data is missing");
        expect_refused(SYNC, "{\"node\":\"a\",\"seq\":1,\"logs\":[{\"task\":1,\"epoch\":1,\"offset\":0,\"data\":\"\"}]}",
                       "logs[0].data is empty");
        expect_refused(SYNC,
                       "{\"node\":\"a\",\"seq\":1,\"logs\":[{\"task\":1,\"epoch\":1,\"offset\":0,\"data\":\"Zg=\"}]}",
                       "not base64");
        expect_refused(SYNC,
                       "{\"node\":\"a\",\"seq\":1,\"logs\":[{\"task\":1,\"epoch\":1,\"offset\":-1,\"data\":\"Zg==\"}]}",
                       "logs[0].offset");
        {
                /* 64 KiB + 3 bytes in one chunk; five 60 KiB chunks in one message */
                size_t n = gp_base64_encoded_len(65539);
                char *b = malloc(n + 1), *msg = malloc(n + 200);
                char *raw = calloc(1, 65539);
                gp_base64_encode(raw, 65539, b, n + 1);
                snprintf(msg, n + 200, "{\"node\":\"a\",\"seq\":1,\"logs\":[{\"task\":1,\"epoch\":1,\"offset\":0,"
                                       "\"data\":\"%s\"}]}", b);
                expect_refused(SYNC, msg, "logs[0].data is longer than");
                free(msg);
                n = gp_base64_encoded_len(60000);
                gp_base64_encode(raw, 60000, b, n + 1);
                size_t cap = 5 * (n + 80) + 100, o = 0;
                msg = malloc(cap);
                o += (size_t)snprintf(msg, cap, "{\"node\":\"a\",\"seq\":1,\"logs\":[");
                for (int i = 0; i < 5; i++)
                        o += (size_t)snprintf(msg + o, cap - o, "%s{\"task\":%d,\"epoch\":1,\"offset\":0,\"data\":\"%s\"}",
                                              i ? "," : "", i + 1, b);
                snprintf(msg + o, cap - o, "]}");
                expect_refused(SYNC, msg, "logs carry more than 262144 bytes");
                free(msg);
                free(b);
                free(raw);
        }
        {
                char *ok = with_runs(4096), *over = with_runs(4097);
                gp_proto_sync p;
                char err[200];
                assert_int_equal(gp_proto_sync_parse(ok, strlen(ok), &p, err, sizeof(err)), 0);
                assert_int_equal(p.n_runs, 4096);
                gp_proto_sync_done(&p);
                expect_refused(SYNC, over, "runs has more than 4096");
                free(ok);
                free(over);
                char *huge = malloc(GP_PROTO_MAX_BODY + 2);
                memset(huge, ' ', GP_PROTO_MAX_BODY + 1);
                huge[GP_PROTO_MAX_BODY + 1] = '\0';
                expect_refused(SYNC, huge, "at most 1048576");
                free(huge);
        }

        expect_refused(SYNC_ANSWER, "{}", "seq is missing");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"x\"],"
                                    "\"notice\":\"SIGKILL@10\"}]}", "notice: signal: 'SIGKILL' is not");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"x\"],"
                                    "\"notice\":\"USR1@86401\"}]}", "1..86400 seconds");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"x\"],"
                                    "\"notice\":7}]}", "notice");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"x\"],"
                                    "\"mps_memory_mb\":100}]}", "mps_memory_mb and mps_compute_pct go together");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"x\"],"
                                    "\"mps_memory_mb\":100,\"mps_compute_pct\":101}]}", "mps_compute_pct");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"x\"],"
                                    "\"mps_memory_mb\":-1,\"mps_compute_pct\":5}]}", "mps_memory_mb");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"ack\":[{\"task\":1}]}", "ack[0].epoch is missing");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"stop\":[{\"task\":1,\"epoch\":1,\"why\":\"now\"}]}",
                       "stop[0].why must be cancel, preempt or stale");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"log_offsets\":[{\"task\":1,\"epoch\":1}]}",
                       "log_offsets[0].offset is missing");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1}]}", "start[0].argv must be");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[]}]}", "1..4096");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"\"]}]}",
                       "argv[0] is empty");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\",3]}]}",
                       "start[0].argv[1] must be a string");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\\u0000b\"]}]}",
                       "u0000");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\"],\"env\":{\"1A\":\"v\"}}]}",
                       "a key must be");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\"],\"env\":{\"A-B\":\"v\"}}]}",
                       "a key must be");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\"],\"env\":{\"A\":1}}]}",
                       "env value must be a string");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\"],\"env\":[]}]}",
                       "env must be an object");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"rank\":2,\"nnodes\":2,\"argv\":[\"a\"]}]}",
                       "rank must be below nnodes");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\"],\"master_port\":70000}]}",
                       "master_port");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\"],\"run_as\":\"a b\"}]}",
                       "run_as");
        expect_refused(SYNC_ANSWER, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\"],\"max_log_bytes\":0}]}",
                       "max_log_bytes");
        expect_refused(SYNC_ANSWER,
                       "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[\"a\"]},{\"task\":1,\"epoch\":1,\"argv\":[\"b\"]}]}",
                       "start names run 1.1.0 twice");
        {
                size_t cap = 4097 * 4 + 200, o = 0;
                char *msg = malloc(cap);
                o += (size_t)snprintf(msg, cap, "{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"argv\":[");
                for (int i = 0; i < 4097; i++)
                        o += (size_t)snprintf(msg + o, cap - o, "%s\"a\"", i ? "," : "");
                snprintf(msg + o, cap - o, "]}]}");
                expect_refused(SYNC_ANSWER, msg, "1..4096");
                free(msg);
        }
}

/* Elastic runs: GPU sets as text, the start's bounds, a run's "alloc" and
 * the answer's "resize" round-trip; bad sets are refused by name. */
static void test_elastic_sets_resizes_and_their_bounds(void **state) {
        (void)state;
        char err[256], text[GP_PROTO_MASK_TEXT];
        gp_proto_mask m;
        assert_int_equal(gp_proto_mask_parse("5,0,255,64", &m), 0);
        assert_int_equal(gp_proto_mask_count(&m), 4);
        gp_proto_mask_format(&m, text, sizeof(text));
        assert_string_equal(text, "0,5,64,255");
        assert_int_equal(gp_proto_mask_parse("", &m), 0);
        assert_int_equal(gp_proto_mask_count(&m), 0);
        const char *bad[] = {"256", "1,1", "01", "-1", "1,", ",1", "1,,2", " 1", "1 ", "a", "99999999999999999999"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(gp_proto_mask_parse(bad[i], &m), -EINVAL);

        /* a sync's run with its set, an answer with a resize and an elastic start */
        gp_proto_run run = {.id = {7, 2, 0}, .state = GP_PROTO_RUNNING, .has_alloc = true};
        assert_int_equal(gp_proto_mask_parse("1,3", &run.alloc), 0);
        gp_proto_sync sy = {.seq = 9, .n_runs = 1, .runs = &run}, sp;
        strcpy(sy.node, "n1");
        char *s = NULL;
        assert_int_equal(gp_proto_sync_render(&sy, &s), 0);
        assert_non_null(strstr(s, "\"alloc\":\"1,3\""));
        assert_int_equal(gp_proto_sync_parse(s, strlen(s), &sp, err, sizeof(err)), 0);
        assert_true(sp.runs[0].has_alloc);
        assert_memory_equal(&sp.runs[0].alloc, &run.alloc, sizeof(run.alloc));
        gp_proto_sync_done(&sp);
        free(s);

        char *argv[] = {"sleep", NULL};
        gp_proto_start st = {.id = {7, 2, 0}, .nnodes = 1, .n_argv = 1, .argv = argv, .elastic_min = 1,
                             .elastic_max = 4, .max_log_bytes = 1};
        gp_proto_resize rz = {.id = {7, 2, 0}};
        assert_int_equal(gp_proto_mask_parse("0,2", &rz.gpus), 0);
        gp_proto_sync_answer a = {.seq = 9, .heartbeat_s = 2, .n_start = 1, .start = &st, .n_resize = 1,
                                  .resize = &rz}, q;
        assert_int_equal(gp_proto_sync_answer_render(&a, &s), 0);
        assert_int_equal(gp_proto_sync_answer_parse(s, strlen(s), &q, err, sizeof(err)), 0);
        assert_int_equal(q.n_resize, 1);
        assert_true(id_eq(&q.resize[0].id, &rz.id));
        assert_memory_equal(&q.resize[0].gpus, &rz.gpus, sizeof(rz.gpus));
        assert_int_equal(q.start[0].elastic_min, 1);
        assert_int_equal(q.start[0].elastic_max, 4);
        gp_proto_sync_answer_done(&q);
        free(s);

        const char *refused[][2] = {
                {"{\"seq\":1,\"resize\":[{\"task\":1,\"epoch\":1,\"rank\":0}]}", "cuda_visible_devices is missing"},
                {"{\"seq\":1,\"resize\":[{\"task\":1,\"epoch\":1,\"rank\":0,\"cuda_visible_devices\":\"\"}]}",
                 "GPU indexes below 256"},
                {"{\"seq\":1,\"resize\":[{\"task\":1,\"epoch\":1,\"rank\":0,\"cuda_visible_devices\":\"0,0\"}]}",
                 "each once"},
                {"{\"seq\":1,\"resize\":[{\"task\":1,\"epoch\":1,\"rank\":0,\"cuda_visible_devices\":\"1\"},"
                 "{\"task\":1,\"epoch\":1,\"rank\":0,\"cuda_visible_devices\":\"2\"}]}",
                 "resize"},
                {"{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"rank\":0,\"argv\":[\"x\"],\"elastic_min\":3,"
                 "\"elastic_max\":2}]}",
                 "elastic_min and elastic_max"},
                {"{\"seq\":1,\"start\":[{\"task\":1,\"epoch\":1,\"rank\":0,\"argv\":[\"x\"],\"elastic_max\":2}]}",
                 "elastic_min and elastic_max"},
        };
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                memset(&q, 0x5a, sizeof(q));
                assert_int_equal(gp_proto_sync_answer_parse(refused[i][0], strlen(refused[i][0]), &q, err, sizeof(err)),
                                 -EINVAL);
                if (!strstr(err, refused[i][1]))
                        fail_msg("%s: error '%s' lacks '%s'", refused[i][0], err, refused[i][1]);
        }
        const char *badrun = "{\"node\":\"n1\",\"seq\":1,\"runs\":[{\"task\":1,\"epoch\":1,\"rank\":0,"
                             "\"state\":\"running\",\"alloc\":\"300\"}]}";
        assert_int_equal(gp_proto_sync_parse(badrun, strlen(badrun), &sp, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "runs[0].alloc"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_base64_round_trips_and_refuses_non_canonical),
                cmocka_unit_test(test_labels_canonical_sorted_and_refusals),
                cmocka_unit_test(test_node_names_and_secrets),
                cmocka_unit_test(test_join_round_trip),
                cmocka_unit_test(test_identity_paging_and_replay_fields),
                cmocka_unit_test(test_sync_round_trip_with_logs_and_results),
                cmocka_unit_test(test_sync_answer_round_trip_and_start_copy),
                cmocka_unit_test(test_sync_telemetry_round_trip_and_bounds),
                cmocka_unit_test(test_every_bound_is_refused),
                cmocka_unit_test(test_join_token_splits_into_secret_and_ca_pin),
                cmocka_unit_test(test_elastic_sets_resizes_and_their_bounds),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
