/* test-mig.c - MIG instances as devices of their own (src/gpu/mig.c and the
 * nvml backend's MIG part), through the public header.
 *
 * NVML is the fake libnvidia-ml.so.1 that mk/gpu.mk builds in
 * $GPUPOOL_BUILD/fakenvml (default "build"), loaded by the real loader; its
 * nomig/ variant has no MIG symbol (an old driver).  Each test scripts its
 * GPUs in a temporary file named by FAKE_NVML_CONFIG (format: top of
 * tests/fakenvml/fake_nvml.c, mig=...).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/err.h"
#include "cli/cli-int.h"
#include "gpu/gpu.h"

static char lib_path[4096], lib_nomig_path[4096];
static char script_path[64]; /* current FAKE_NVML_CONFIG file, "" if none */
static gp_gpu_backend *live; /* closed by teardown even when a test fails early */

static int group_setup(void **state) {
        const char *build = getenv("GPUPOOL_BUILD");
        if (!build || !*build)
                build = "build";
        snprintf(lib_path, sizeof(lib_path), "%s/fakenvml/libnvidia-ml.so.1", build);
        snprintf(lib_nomig_path, sizeof(lib_nomig_path), "%s/fakenvml/nomig/libnvidia-ml.so.1", build);
        if (access(lib_path, R_OK) != 0 || access(lib_nomig_path, R_OK) != 0) {
                fprintf(stderr, "test-mig: fake NVML missing at %s (build it: make %s)\n", lib_nomig_path,
                        lib_nomig_path);
                return -1;
        }
        return 0;
}

static int teardown(void **state) {
        gp_gpu_close(live);
        live = NULL;
        if (script_path[0])
                unlink(script_path);
        script_path[0] = '\0';
        unsetenv("FAKE_NVML_CONFIG");
        return 0;
}

static void script(const char *text) {
        if (!script_path[0]) {
                snprintf(script_path, sizeof(script_path), "/tmp/test-mig-nvml-XXXXXX");
                int fd = mkstemp(script_path);
                assert_true(fd >= 0);
                close(fd);
        }
        char tmp[96];
        snprintf(tmp, sizeof(tmp), "%s.new", script_path);
        FILE *f = fopen(tmp, "w");
        assert_non_null(f);
        assert_int_equal(fputs(text, f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
        assert_int_equal(rename(tmp, script_path), 0);
        assert_int_equal(setenv("FAKE_NVML_CONFIG", script_path, 1), 0);
}

static gp_gpu_backend *open_nvml(const char *library) {
        gp_gpu_options opt = {.backend = "nvml", .nvml_library = library};
        gp_gpu_backend *b = NULL;
        char err[256];
        int r = gp_gpu_open(&opt, &b, err, sizeof(err));
        if (r != 0)
                fail_msg("gp_gpu_open: %s: %s", gp_strerror(r), err);
        live = b;
        return b;
}

static gp_gpu_info *read_n(gp_gpu_backend *b, size_t want) {
        gp_gpu_info *v = NULL;
        size_t n = 0;
        assert_int_equal(gp_gpu_read(b, &v, &n), 0);
        assert_int_equal(n, want);
        return v;
}

static void test_profile_name_follows_nvidias_rule(void **state) {
        char p[32];
        /* A100-SXM4-40GB (40960 MiB) */
        assert_int_equal(gp_gpu_mig_profile_name(1, 1, 4864, 40960, p, sizeof(p)), 0);
        assert_string_equal(p, "1g.5gb");
        assert_int_equal(gp_gpu_mig_profile_name(3, 3, 20096, 40960, p, sizeof(p)), 0);
        assert_string_equal(p, "3g.20gb");
        assert_int_equal(gp_gpu_mig_profile_name(7, 7, 40192, 40960, p, sizeof(p)), 0);
        assert_string_equal(p, "7g.40gb");
        /* H100 80GB HBM3 (81559 MiB): 1g.10gb, 1g.20gb, 3g.40gb */
        assert_int_equal(gp_gpu_mig_profile_name(1, 1, 9856, 81559, p, sizeof(p)), 0);
        assert_string_equal(p, "1g.10gb");
        assert_int_equal(gp_gpu_mig_profile_name(1, 1, 19968, 81559, p, sizeof(p)), 0);
        assert_string_equal(p, "1g.20gb");
        assert_int_equal(gp_gpu_mig_profile_name(3, 3, 40192, 81559, p, sizeof(p)), 0);
        assert_string_equal(p, "3g.40gb");
        /* a compute instance of 1 slice in a 3-slice GPU instance */
        assert_int_equal(gp_gpu_mig_profile_name(3, 1, 40192, 81559, p, sizeof(p)), 0);
        assert_string_equal(p, "1c.3g.40gb");
        strcpy(p, "kept");
        assert_int_equal(gp_gpu_mig_profile_name(0, 0, 4864, 40960, p, sizeof(p)), -EINVAL);
        assert_int_equal(gp_gpu_mig_profile_name(1, 2, 4864, 40960, p, sizeof(p)), -EINVAL);
        assert_int_equal(gp_gpu_mig_profile_name(1, 1, 0, 40960, p, sizeof(p)), -EINVAL);
        assert_int_equal(gp_gpu_mig_profile_name(1, 1, 50000, 40960, p, sizeof(p)), -EINVAL);
        assert_string_equal(p, "kept");
        assert_int_equal(gp_gpu_mig_profile_name(1, 1, 4864, 40960, p, 4), -ENOSPC);
}

static void test_profile_of_a_devices_name(void **state) {
        const char *mig = "MIG-aaaa1111-0001-0000-0000-000000000000";
        assert_true(gp_gpu_is_mig(mig));
        assert_true(gp_gpu_is_mig("MIG-GPU-aaaa1111-0000-0000-0000-000000000000/1/0")); /* before R470 */
        assert_false(gp_gpu_is_mig("GPU-aaaa1111-0000-0000-0000-000000000000"));
        assert_false(gp_gpu_is_mig(NULL));
        assert_string_equal(gp_gpu_mig_profile(mig, "NVIDIA A100-SXM4-80GB MIG 1g.10gb"), "1g.10gb");
        assert_string_equal(gp_gpu_mig_profile(mig, "Odd MIG Board MIG 1c.2g.20gb"), "1c.2g.20gb");
        assert_null(gp_gpu_mig_profile(mig, "NVIDIA A100-SXM4-80GB"));
        assert_null(gp_gpu_mig_profile(mig, "NVIDIA A100 MIG "));
        assert_null(gp_gpu_mig_profile("GPU-1", "NVIDIA A100-SXM4-80GB MIG 1g.10gb"));
}

static const char *mixed =
        "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-aaaa1111-0000-0000-0000-000000000000 mem_total_mb=81920 "
        "temp=50 util=30 topo_group=0\n"
        "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-bbbb2222-0000-0000-0000-000000000000 mem_total_mb=81920 "
        "temp=61 util=40 power_mw=200000 topo_group=1 mig=1g.10gb,-,2g.20gb\n"
        "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-cccc3333-0000-0000-0000-000000000000 mem_total_mb=81920 "
        "mig=on\n"
        "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-dddd4444-0000-0000-0000-000000000000 mem_total_mb=81920 "
        "mig=off topo_group=1\n";

static void test_nvml_mig_instances_replace_their_gpu(void **state) {
        script(mixed);
        gp_gpu_backend *b = open_nvml(lib_path);
        /* GPU 0 and 3 whole at their NVML indexes; GPU 2 in MIG mode with no
         * instance offers nothing; GPU 1's two instances come after the GPUs */
        gp_gpu_info *v = read_n(b, 4);
        assert_int_equal(v[0].index, 0);
        assert_string_equal(v[0].uuid, "GPU-aaaa1111-0000-0000-0000-000000000000");
        assert_int_equal(v[0].util_pct, 30);
        assert_int_equal(v[1].index, 3);
        assert_string_equal(v[1].uuid, "GPU-dddd4444-0000-0000-0000-000000000000");
        assert_string_equal(v[1].name, "NVIDIA A100-SXM4-80GB");

        assert_int_equal(v[2].index, 4);
        assert_string_equal(v[2].uuid, "MIG-bbbb2222-0111-0000-0000-000000000000");
        assert_string_equal(v[2].name, "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
        assert_string_equal(gp_gpu_mig_profile(v[2].uuid, v[2].name), "1g.10gb");
        assert_int_equal(v[2].memory_total_mb, 10 * 1024 * 96 / 100);
        assert_true(v[2].healthy);
        assert_int_equal(v[2].util_pct, -1); /* NOT_SUPPORTED on a MIG handle */
        assert_int_equal(v[2].temp_c, 61);   /* the board's */
        assert_int_equal(v[2].power_mw, -1); /* the board's is not the instance's */
        assert_int_equal(v[2].sm_clock_mhz, 1410);
        assert_true(v[2].procs_known);

        assert_int_equal(v[3].index, 5); /* slot 2: slot 1 is free */
        assert_string_equal(v[3].uuid, "MIG-bbbb2222-0322-0000-0000-000000000000");
        assert_string_equal(v[3].name, "NVIDIA A100-SXM4-80GB MIG 2g.20gb");
        assert_int_equal(v[3].memory_total_mb, 20 * 1024 * 96 / 100);
        free(v);

        int d = -1;
        assert_int_equal(gp_gpu_distance(b, 2, 3, &d), 0); /* two instances of one board */
        assert_int_equal(d, 0);
        assert_int_equal(gp_gpu_distance(b, 2, 0, &d), 0); /* GPU 1 and GPU 0: other groups */
        assert_int_equal(d, 3);
        assert_int_equal(gp_gpu_distance(b, 3, 1, &d), 0); /* GPU 1 and GPU 3: one group */
        assert_int_equal(d, 1);
        assert_int_equal(gp_gpu_distance(b, 0, 4, &d), -EINVAL);
}

static void test_nvml_without_mig_symbols_every_gpu_is_whole(void **state) {
        script(mixed);
        gp_gpu_backend *b = open_nvml(lib_nomig_path);
        gp_gpu_info *v = read_n(b, 4);
        for (int i = 0; i < 4; i++) {
                assert_int_equal(v[i].index, i);
                assert_false(gp_gpu_is_mig(v[i].uuid));
                assert_int_equal(v[i].memory_total_mb, 81920);
                assert_true(v[i].healthy);
        }
        free(v);
}

static void test_nvml_mig_instance_that_goes_is_unhealthy_until_reopen(void **state) {
        script("live\n"
               "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-eeee5555-0000-0000-0000-000000000000 mem_total_mb=81559 "
               "mig=1g.10gb,1g.10gb\n");
        gp_gpu_backend *b = open_nvml(lib_path);
        gp_gpu_info *v = read_n(b, 2);
        assert_true(v[0].healthy && v[1].healthy);
        assert_string_equal(v[1].uuid, "MIG-eeee5555-0211-0000-0000-000000000000");
        free(v);
        /* the operator destroys the second instance (the file's time must move) */
        sleep(1);
        script("live\n"
               "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-eeee5555-0000-0000-0000-000000000000 mem_total_mb=81559 "
               "mig=1g.10gb,-\n");
        v = read_n(b, 2);
        assert_true(v[0].healthy);
        assert_false(v[1].healthy);
        assert_non_null(strstr(v[1].health_reason, "is gone (the MIG layout changed"));
        assert_string_equal(v[1].uuid, "MIG-eeee5555-0211-0000-0000-000000000000"); /* keeps its identity */
        assert_string_equal(v[1].name, "NVIDIA H100 80GB HBM3 MIG 1g.10gb");
        free(v);
        /* the board is lost: every instance with it */
        sleep(1);
        script("live\n"
               "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-eeee5555-0000-0000-0000-000000000000 mem_total_mb=81559 "
               "mig=1g.10gb,- fail=all\n");
        v = read_n(b, 2);
        assert_false(v[0].healthy);
        assert_non_null(strstr(v[0].health_reason, "GPU is lost"));
        free(v);
        gp_gpu_close(b);
        live = NULL;
        /* reopened: the new layout, one instance */
        script("gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-eeee5555-0000-0000-0000-000000000000 mem_total_mb=81559 "
               "mig=1g.10gb,-\n");
        b = open_nvml(lib_path);
        v = read_n(b, 1);
        assert_int_equal(v[0].index, 1);
        assert_true(v[0].healthy);
        free(v);
}

static void test_nvml_only_mig_gpus_without_instances_offer_no_device(void **state) {
        script("gpu mig=on\n");
        gp_gpu_backend *b = open_nvml(lib_path);
        gp_gpu_info *v = read_n(b, 0);
        free(v);
}

static void test_fake_nvml_refuses_bad_mig_scripts(void **state) {
        static const char *bad[] = {
                "gpu mig=8g.10gb\n",
                "gpu mig=2c.1g.10gb\n",
                "gpu mig=1g.10\n",
                "gpu mig=\n",
                "gpu mig=1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb\n",
                "gpu mem_total_mb=8192 mig=1g.10gb\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                script(bad[i]);
                gp_gpu_options opt = {.backend = "nvml", .nvml_library = lib_path};
                gp_gpu_backend *b = NULL;
                char err[256] = "";
                assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), -GP_ENOGPU);
                assert_null(b);
                assert_non_null(strstr(err, "nvmlInit_v2 failed"));
        }
}

static char *format_gpus(const char *js) {
        json_error_t e;
        json_t *j = json_loads(js, 0, &e);
        assert_non_null(j);
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_gpus(j, &b), 0);
        json_decref(j);
        return gp_buf_steal(&b);
}

static void test_gpus_table_shows_a_mig_instance_and_its_isolation(void **state) {
        char *s = format_gpus("{\"backend\":\"nvml\",\"gpus\":["
                              "{\"id\":\"local:0\",\"name\":\"NVIDIA A100-SXM4-80GB\",\"isolation\":\"watchdog\","
                              "\"memory_total_mb\":81920,\"healthy\":true,\"tasks\":[]},"
                              "{\"id\":\"local:4\",\"uuid\":\"MIG-1\",\"name\":\"NVIDIA A100-SXM4-80GB MIG 1g.10gb\","
                              "\"profile\":\"1g.10gb\",\"isolation\":\"mig\",\"memory_total_mb\":9830,"
                              "\"healthy\":true,\"tasks\":[7]}]}");
        assert_non_null(strstr(s, "ISOLATION"));
        assert_non_null(strstr(s, "NVIDIA A100-SXM4-80GB MIG 1g.10gb ")); /* not cut */
        assert_non_null(strstr(s, " mig "));
        assert_non_null(strstr(s, " watchdog "));
        free(s);
        /* a pool where nothing is isolated: no column */
        s = format_gpus("{\"backend\":\"sim\",\"gpus\":[{\"id\":\"local:0\",\"name\":\"X\",\"isolation\":\"none\","
                        "\"memory_total_mb\":100,\"healthy\":true,\"tasks\":[]}]}");
        assert_null(strstr(s, "ISOLATION"));
        free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_profile_name_follows_nvidias_rule),
                cmocka_unit_test(test_profile_of_a_devices_name),
                cmocka_unit_test(test_gpus_table_shows_a_mig_instance_and_its_isolation),
                cmocka_unit_test_teardown(test_nvml_mig_instances_replace_their_gpu, teardown),
                cmocka_unit_test_teardown(test_nvml_without_mig_symbols_every_gpu_is_whole, teardown),
                cmocka_unit_test_teardown(test_nvml_mig_instance_that_goes_is_unhealthy_until_reopen, teardown),
                cmocka_unit_test_teardown(test_nvml_only_mig_gpus_without_instances_offer_no_device, teardown),
                cmocka_unit_test_teardown(test_fake_nvml_refuses_bad_mig_scripts, teardown),
        };
        return cmocka_run_group_tests(tests, group_setup, NULL);
}
