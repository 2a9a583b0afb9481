/* test-gpu.c - the GPU inventory (src/gpu/) through its public header.
 *
 * NVML is exercised through the real loader: opt.nvml_library points at
 * the fake libnvidia-ml.so.1 that mk/gpu.mk builds in $GPUPOOL_BUILD/fakenvml
 * (default "build"), and each test scripts its GPUs in a temporary file
 * named by FAKE_NVML_CONFIG (format: top of tests/fakenvml/fake_nvml.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "config/config.h"
#include "gpu/gpu.h"

static char lib_path[4096];        /* the fake NVML */
static char lib_notopo_path[4096]; /* the fake NVML without topology */
static char script_path[64];       /* current FAKE_NVML_CONFIG file, "" if none */
/* What the running test has open, so teardown can close it even when an
 * assertion ends the test early (else NVML would stay initialised with the
 * old script and the failure would spill into the next tests). */
static gp_gpu_backend *live;
static void *live_dl;

static int group_setup(void **state) {
        const char *build = getenv("GPUPOOL_BUILD");
        if (!build || !*build)
                build = "build";
        snprintf(lib_path, sizeof(lib_path), "%s/fakenvml/libnvidia-ml.so.1", build);
        snprintf(lib_notopo_path, sizeof(lib_notopo_path), "%s/fakenvml/notopo/libnvidia-ml.so.1",
                 build);
        if (access(lib_path, R_OK) != 0 || access(lib_notopo_path, R_OK) != 0) {
                fprintf(stderr, "test-gpu: fake NVML missing at %s (build it: make %s)\n", lib_path,
                        lib_path);
                return -1;
        }
        return 0;
}

static int teardown(void **state) {
        gp_gpu_close(live);
        live = NULL;
        if (live_dl)
                dlclose(live_dl);
        live_dl = NULL;
        if (script_path[0])
                unlink(script_path);
        script_path[0] = '\0';
        unsetenv("FAKE_NVML_CONFIG");
        return 0;
}

/* Write the fake NVML's script and point FAKE_NVML_CONFIG at it. */
static void script(const char *text) {
        if (script_path[0])
                unlink(script_path);
        snprintf(script_path, sizeof(script_path), "/tmp/test-gpu-nvml-XXXXXX");
        int fd = mkstemp(script_path);
        assert_true(fd >= 0);
        size_t len = strlen(text);
        assert_int_equal(write(fd, text, len), (ssize_t)len);
        close(fd);
        assert_int_equal(setenv("FAKE_NVML_CONFIG", script_path, 1), 0);
}

static gp_gpu_backend *open_backend(const char *backend, const char *library) {
        gp_gpu_options opt = {.backend = backend, .nvml_library = library};
        gp_gpu_backend *b = NULL;
        char err[256];
        int r = gp_gpu_open(&opt, &b, err, sizeof(err));
        if (r != 0)
                fail_msg("gp_gpu_open(%s): %s: %s", backend, gp_strerror(r), err);
        assert_non_null(b);
        live = b;
        return b;
}

static void close_backend(gp_gpu_backend *b) {
        assert_ptr_equal(b, live);
        gp_gpu_close(b);
        live = NULL;
}

static void *open_fake(void) {
        live_dl = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
        assert_non_null(live_dl);
        return live_dl;
}

static void close_fake(void *dl) {
        assert_ptr_equal(dl, live_dl);
        dlclose(dl);
        live_dl = NULL;
}

static gp_gpu_info *read_all(gp_gpu_backend *b, size_t want) {
        gp_gpu_info *v = NULL;
        size_t n = 0;
        assert_int_equal(gp_gpu_read(b, &v, &n), 0);
        assert_int_equal(n, want);
        for (size_t i = 0; i < n; i++)
                assert_int_equal(v[i].index, (int)i);
        return v;
}

static const char *three_gpus =
        "# three GPUs as on a mixed box\n"
        "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-a0000000-0000-0000-0000-000000000001 "
        "mem_total_mb=81920 mem_used_mb=1000 util=37 temp=55 power_mw=210000\n"
        "\n"
        "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-a0000000-0000-0000-0000-000000000002 "
        "mem_total_mb=81920 mem_used_mb=0 util=0 temp=31 power_mw=61000\n"
        "gpu name=\"NVIDIA GeForce RTX 4090\" uuid=GPU-b0000000-0000-0000-0000-000000000003 "
        "mem_total_mb=24564 mem_used_mb=23000 util=100 temp=83 power_mw=449000\n";

static void test_nvml_reads_scripted_gpus(void **state) {
        script(three_gpus);
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        assert_string_equal(gp_gpu_backend_name(b), "nvml");

        gp_gpu_info *v = read_all(b, 3);
        assert_string_equal(v[0].name, "NVIDIA A100-SXM4-80GB");
        assert_string_equal(v[0].uuid, "GPU-a0000000-0000-0000-0000-000000000001");
        assert_int_equal(v[0].memory_total_mb, 81920);
        assert_int_equal(v[0].memory_used_mb, 1000);
        assert_int_equal(v[0].util_pct, 37);
        assert_int_equal(v[0].temp_c, 55);
        assert_int_equal(v[0].power_mw, 210000);

        assert_string_equal(v[1].uuid, "GPU-a0000000-0000-0000-0000-000000000002");
        assert_int_equal(v[1].memory_used_mb, 0);
        assert_int_equal(v[1].util_pct, 0);
        assert_int_equal(v[1].temp_c, 31);
        assert_int_equal(v[1].power_mw, 61000);

        assert_string_equal(v[2].name, "NVIDIA GeForce RTX 4090");
        assert_string_equal(v[2].uuid, "GPU-b0000000-0000-0000-0000-000000000003");
        assert_int_equal(v[2].memory_total_mb, 24564);
        assert_int_equal(v[2].memory_used_mb, 23000);
        assert_int_equal(v[2].util_pct, 100);
        assert_int_equal(v[2].temp_c, 83);
        assert_int_equal(v[2].power_mw, 449000);
        for (int i = 0; i < 3; i++) {
                assert_true(v[i].healthy);
                assert_string_equal(v[i].health_reason, "");
        }
        free(v);
        close_backend(b);
}

static void test_nvml_marks_gpu_unhealthy_on_error(void **state) {
        script("gpu uuid=GPU-0 mem_total_mb=40960\n"
               "gpu uuid=GPU-1 mem_total_mb=40960 fail=memory\n"
               "gpu uuid=GPU-2 mem_total_mb=40960 mem_used_mb=5\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        gp_gpu_info *v = read_all(b, 3);

        assert_false(v[1].healthy);
        assert_non_null(strstr(v[1].health_reason, "nvmlDeviceGetMemoryInfo"));
        assert_non_null(strstr(v[1].health_reason, "GPU is lost"));
        assert_string_equal(v[1].uuid, "GPU-1");

        assert_true(v[0].healthy);
        assert_string_equal(v[0].health_reason, "");
        assert_true(v[2].healthy);
        assert_int_equal(v[2].memory_total_mb, 40960);
        assert_int_equal(v[2].memory_used_mb, 5);
        free(v);
        close_backend(b);
}

static void test_nvml_lost_gpu_keeps_its_identity(void **state) {
        /* Every call on GPU 0 answers three times (open: the MIG probe's
         * handle and the first reading; the first read), then the GPU falls
         * off the bus. */
        script("gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-h100 mem_total_mb=81559 "
               "mem_used_mb=700 util=12 fail=all fail_after=3\n"
               "gpu uuid=GPU-other\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);

        gp_gpu_info *v = read_all(b, 2);
        assert_true(v[0].healthy);
        assert_int_equal(v[0].util_pct, 12);
        free(v);

        v = read_all(b, 2);
        assert_false(v[0].healthy);
        assert_non_null(strstr(v[0].health_reason, "nvmlDeviceGetHandleByIndex_v2"));
        assert_non_null(strstr(v[0].health_reason, "GPU is lost"));
        assert_string_equal(v[0].uuid, "GPU-h100");
        assert_string_equal(v[0].name, "NVIDIA H100 80GB HBM3");
        assert_int_equal(v[0].memory_total_mb, 81559);
        assert_int_equal(v[0].util_pct, -1);
        assert_int_equal(v[0].temp_c, -1);
        assert_int_equal(v[0].power_mw, -1);
        assert_true(v[1].healthy);
        free(v);
        close_backend(b);
}

static void test_nvml_unsupported_readings_are_unknown_not_unhealthy(void **state) {
        script("gpu name=\"Tesla T4\" mem_total_mb=15360 util=na temp=na power_mw=na\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        gp_gpu_info *v = read_all(b, 1);
        assert_true(v[0].healthy);
        assert_string_equal(v[0].name, "Tesla T4");
        assert_int_equal(v[0].memory_total_mb, 15360);
        assert_int_equal(v[0].util_pct, -1);
        assert_int_equal(v[0].temp_c, -1);
        assert_int_equal(v[0].power_mw, -1);
        free(v);
        close_backend(b);
}

static void test_nvml_other_reading_error_is_unhealthy(void **state) {
        script("gpu util=50 fail=power fail_code=999\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        gp_gpu_info *v = read_all(b, 1);
        assert_false(v[0].healthy);
        assert_string_equal(v[0].health_reason,
                            "nvmlDeviceGetPowerUsage: Unknown Error (999)");
        assert_int_equal(v[0].util_pct, 50);
        free(v);
        close_backend(b);
}

static void test_nvml_strings_are_bounded_and_printable(void **state) {
        char text[512], name95[96], uuid95[96];
        memset(name95, 'N', 95);
        name95[95] = '\0';
        memset(uuid95, 'U', 95);
        uuid95[95] = '\0';
        snprintf(text, sizeof(text), "gpu name=%s uuid=%s\ngpu name=\"bad\001name\"\n", name95,
                 uuid95);
        script(text);
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        gp_gpu_info *v = read_all(b, 2);
        assert_string_equal(v[0].name, name95);        /* fits GP_NAME_MAX */
        assert_int_equal(strlen(v[0].uuid), GP_UUID_MAX - 1); /* cut to the field */
        assert_memory_equal(v[0].uuid, uuid95, GP_UUID_MAX - 1);
        assert_string_equal(v[1].name, "bad?name");
        assert_true(v[0].healthy && v[1].healthy);
        free(v);
        close_backend(b);
}

static void test_nvml_distance_follows_topology(void **state) {
        script("gpu topo_group=0\n"
               "gpu topo_group=0\n"
               "gpu topo_group=1\n"
               "gpu topo_group=1\n"
               "gpu topo_group=2\n"
               "topo 0 3 HOSTBRIDGE\n"
               "topo 1 3 NODE\n"
               "topo 2 3 INTERNAL\n"
               "topo 1 4 MULTIPLE\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        int d = -1;

        assert_int_equal(gp_gpu_distance(b, 0, 0, &d), 0);
        assert_int_equal(d, 0);
        assert_int_equal(gp_gpu_distance(b, 0, 1, &d), 0); /* same group: SINGLE */
        assert_int_equal(d, 1);
        assert_int_equal(gp_gpu_distance(b, 1, 0, &d), 0);
        assert_int_equal(d, 1);
        assert_int_equal(gp_gpu_distance(b, 1, 4, &d), 0); /* MULTIPLE */
        assert_int_equal(d, 1);
        assert_int_equal(gp_gpu_distance(b, 0, 3, &d), 0); /* HOSTBRIDGE */
        assert_int_equal(d, 2);
        assert_int_equal(gp_gpu_distance(b, 3, 1, &d), 0); /* NODE */
        assert_int_equal(d, 2);
        assert_int_equal(gp_gpu_distance(b, 2, 3, &d), 0); /* INTERNAL */
        assert_int_equal(d, 0);
        assert_int_equal(gp_gpu_distance(b, 0, 2, &d), 0); /* other group: SYSTEM */
        assert_int_equal(d, 3);

        d = 42;
        assert_int_equal(gp_gpu_distance(b, 0, 5, &d), -EINVAL);
        assert_int_equal(gp_gpu_distance(b, -1, 0, &d), -EINVAL);
        assert_int_equal(d, 42);
        close_backend(b);
}

static void test_nvml_without_topology_symbol_distance_is_enotsup(void **state) {
        script("gpu\ngpu\n");
        gp_gpu_backend *b = open_backend("nvml", lib_notopo_path);
        int d = 42;
        assert_int_equal(gp_gpu_distance(b, 0, 1, &d), -ENOTSUP);
        assert_int_equal(d, 42);
        gp_gpu_info *v = read_all(b, 2);
        assert_true(v[0].healthy && v[1].healthy);
        free(v);
        close_backend(b);
}

static void test_nvml_missing_library_fails_with_enogpu(void **state) {
        gp_gpu_options opt = {.backend = "nvml", .nvml_library = "/nonexistent/libnvidia-ml.so.1"};
        gp_gpu_backend *b = NULL;
        char err[256] = "";
        assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), -GP_ENOGPU);
        assert_null(b);
        assert_non_null(strstr(err, "/nonexistent/libnvidia-ml.so.1"));
}

static void test_nvml_init_failure_fails_with_nvml_reason(void **state) {
        script("init=9\ngpu\n");
        gp_gpu_options opt = {.backend = "nvml", .nvml_library = lib_path};
        gp_gpu_backend *b = NULL;
        char err[256] = "";
        assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), -GP_ENOGPU);
        assert_null(b);
        assert_non_null(strstr(err, "nvmlInit_v2"));
        assert_non_null(strstr(err, "Driver Not Loaded"));
}

static void test_nvml_without_gpus_fails_with_enogpu(void **state) {
        script("# no GPU at all\n");
        gp_gpu_options opt = {.backend = "nvml", .nvml_library = lib_path};
        gp_gpu_backend *b = NULL;
        char err[256] = "";
        assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), -GP_ENOGPU);
        assert_null(b);
        assert_non_null(strstr(err, "no GPU"));
}

static void test_nvml_set_load_is_not_supported(void **state) {
        script("gpu\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        assert_int_equal(gp_gpu_sim_set_load(b, 0, 100, 1), -ENOTSUP);
        close_backend(b);
}

static void test_nvml_close_shuts_nvml_down(void **state) {
        script("gpu\ngpu\n");
        /* Hold the same library instance to look at NVML's state. */
        void *dl = open_fake();
        int (*count)(unsigned int *) = (int (*)(unsigned int *))dlsym(dl, "nvmlDeviceGetCount_v2");
        assert_non_null(count);
        unsigned int n = 0;

        gp_gpu_backend *b = open_backend("nvml", lib_path);
        assert_int_equal(count(&n), 0);
        assert_int_equal(n, 2);
        close_backend(b);
        assert_int_equal(count(&n), 1); /* NVML_ERROR_UNINITIALIZED */
        close_fake(dl);
}

static void test_auto_uses_nvml_when_it_works(void **state) {
        script(three_gpus);
        gp_gpu_backend *b = open_backend("auto", lib_path);
        assert_string_equal(gp_gpu_backend_name(b), "nvml");
        close_backend(b);
}

static void test_auto_falls_back_to_sim_without_library(void **state) {
        gp_gpu_options opt = {.backend = "auto", .nvml_library = "/nonexistent/libnvidia-ml.so.1"};
        gp_gpu_backend *b = NULL;
        char err[256] = "";
        assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), 0);
        live = b;
        assert_string_equal(gp_gpu_backend_name(b), "sim");
        assert_non_null(strstr(err, "NVML")); /* why it fell back, for the log */
        gp_gpu_info *v = read_all(b, 4);
        free(v);
        close_backend(b);
}

static void test_auto_falls_back_to_sim_when_nvml_has_no_gpu(void **state) {
        script("");
        gp_gpu_backend *b = open_backend("auto", lib_path);
        assert_string_equal(gp_gpu_backend_name(b), "sim");
        close_backend(b);
}

static void test_sim_default_is_four_rtx_4090(void **state) {
        gp_gpu_backend *b = open_backend("sim", NULL);
        assert_string_equal(gp_gpu_backend_name(b), "sim");
        gp_gpu_info *v = read_all(b, 4);
        for (int i = 0; i < 4; i++) {
                char want[GP_UUID_MAX];
                snprintf(want, sizeof(want), "SIM-%08d-0000-0000-0000-000000000000", i);
                assert_string_equal(v[i].uuid, want);
                assert_string_equal(v[i].name, "NVIDIA GeForce RTX 4090");
                assert_int_equal(v[i].memory_total_mb, 24564);
                assert_int_equal(v[i].memory_used_mb, 0);
                assert_int_equal(v[i].util_pct, 0);
                assert_int_equal(v[i].temp_c, 30);
                assert_int_equal(v[i].power_mw, 20000);
                assert_true(v[i].healthy);
                assert_string_equal(v[i].health_reason, "");
        }
        free(v);
        int d = 42;
        assert_int_equal(gp_gpu_distance(b, 0, 1, &d), -ENOTSUP);
        assert_int_equal(d, 42);
        close_backend(b);
}

static void test_sim_uses_configured_kinds_in_order(void **state) {
        gp_cfg_sim_gpu spec[2] = {
                {.name = "NVIDIA A100-SXM4-80GB", .memory_mb = 81920, .count = 2},
                {.name = "Tesla T4", .memory_mb = 15360, .count = 1},
        };
        gp_gpu_options opt = {.backend = "sim", .sim = spec, .n_sim = 2};
        gp_gpu_backend *b = NULL;
        char err[256];
        assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), 0);
        live = b;
        gp_gpu_info *v = read_all(b, 3);
        assert_string_equal(v[0].name, "NVIDIA A100-SXM4-80GB");
        assert_string_equal(v[1].name, "NVIDIA A100-SXM4-80GB");
        assert_int_equal(v[1].memory_total_mb, 81920);
        assert_string_equal(v[2].name, "Tesla T4");
        assert_int_equal(v[2].memory_total_mb, 15360);
        assert_string_equal(v[2].uuid, "SIM-00000002-0000-0000-0000-000000000000");
        free(v);
        close_backend(b);
}

static void test_sim_rejects_bad_spec(void **state) {
        gp_cfg_sim_gpu spec[1] = {{.name = "X", .memory_mb = 1024, .count = 0}};
        gp_gpu_options opt = {.backend = "sim", .sim = spec, .n_sim = 1};
        gp_gpu_backend *b = NULL;
        char err[256] = "";
        assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), -EINVAL);
        assert_null(b);
        assert_non_null(strstr(err, "count"));

        spec[0].count = 1;
        spec[0].memory_mb = 0;
        assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "memory_mb"));

        spec[0].memory_mb = 1024;
        spec[0].name[0] = '\0';
        assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "name"));
        assert_null(b);
}

static void test_sim_set_load_changes_readings(void **state) {
        gp_gpu_backend *b = open_backend("sim", NULL);

        assert_int_equal(gp_gpu_sim_set_load(b, 1, 8000, 1), 0);
        gp_gpu_info *v = read_all(b, 4);
        assert_int_equal(v[1].memory_used_mb, 8000);
        assert_int_equal(v[1].util_pct, 35);
        assert_int_equal(v[1].temp_c, 47);
        assert_int_equal(v[1].power_mw, 170500);
        assert_int_equal(v[0].util_pct, 0); /* the others stay idle */
        assert_int_equal(v[0].memory_used_mb, 0);
        int util1 = v[1].util_pct, temp1 = v[1].temp_c, power1 = v[1].power_mw;
        free(v);

        assert_int_equal(gp_gpu_sim_set_load(b, 1, 16000, 2), 0);
        v = read_all(b, 4);
        assert_true(v[1].util_pct > util1);
        assert_true(v[1].temp_c > temp1);
        assert_true(v[1].power_mw > power1);
        free(v);

        /* Saturates; memory cannot exceed the board. */
        assert_int_equal(gp_gpu_sim_set_load(b, 1, 100000, 7), 0);
        v = read_all(b, 4);
        assert_int_equal(v[1].memory_used_mb, 24564);
        assert_int_equal(v[1].util_pct, 100);
        assert_int_equal(v[1].temp_c, 80);
        assert_int_equal(v[1].power_mw, 450000);
        free(v);

        assert_int_equal(gp_gpu_sim_set_load(b, 1, 0, 0), 0);
        v = read_all(b, 4);
        assert_int_equal(v[1].memory_used_mb, 0);
        assert_int_equal(v[1].util_pct, 0);
        assert_int_equal(v[1].temp_c, 30);
        assert_int_equal(v[1].power_mw, 20000);
        free(v);
        close_backend(b);
}

static void test_nvml_reads_clocks_ecc_and_throttle_reasons(void **state) {
        script("gpu mem_total_mb=81920 sm_clock=1980 mem_clock=1593 ecc_corrected=12 ecc_uncorrected=2 "
               "throttle=68\n"
               "gpu mem_total_mb=24564\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        gp_gpu_info *v = read_all(b, 2);
        assert_int_equal(v[0].sm_clock_mhz, 1980);
        assert_int_equal(v[0].mem_clock_mhz, 1593);
        assert_int_equal(v[0].ecc_corrected, 12);
        assert_int_equal(v[0].ecc_uncorrected, 2);
        assert_int_equal(v[0].throttle_reasons, 0x44); /* sw power cap + hw thermal */
        assert_true(v[0].healthy);
        /* the fake's defaults */
        assert_int_equal(v[1].sm_clock_mhz, 1410);
        assert_int_equal(v[1].mem_clock_mhz, 1215);
        assert_int_equal(v[1].ecc_corrected, 0);
        assert_int_equal(v[1].ecc_uncorrected, 0);
        assert_int_equal(v[1].throttle_reasons, 0);
        free(v);
        close_backend(b);
}

static void test_nvml_diagnostics_unknown_not_unhealthy_when_unsupported_or_failing(void **state) {
        /* GeForce-like: no ECC; a second GPU whose clock/ECC/throttle calls fail */
        script("gpu ecc_corrected=na ecc_uncorrected=na sm_clock=na\n"
               "gpu fail=clock,ecc,throttle fail_code=999\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        gp_gpu_info *v = read_all(b, 2);
        assert_int_equal(v[0].ecc_corrected, -1);
        assert_int_equal(v[0].ecc_uncorrected, -1);
        assert_int_equal(v[0].sm_clock_mhz, -1);
        assert_int_equal(v[0].mem_clock_mhz, 1215);
        assert_true(v[0].healthy);
        assert_int_equal(v[1].sm_clock_mhz, -1);
        assert_int_equal(v[1].mem_clock_mhz, -1);
        assert_int_equal(v[1].ecc_uncorrected, -1);
        assert_int_equal(v[1].throttle_reasons, -1);
        assert_true(v[1].healthy);
        assert_string_equal(v[1].health_reason, "");
        free(v);
        close_backend(b);
}

static void test_nvml_lost_gpu_has_unknown_diagnostics(void **state) {
        script("gpu fail=handle\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        gp_gpu_info *v = read_all(b, 1);
        assert_false(v[0].healthy);
        assert_int_equal(v[0].sm_clock_mhz, -1);
        assert_int_equal(v[0].ecc_uncorrected, -1);
        assert_int_equal(v[0].throttle_reasons, -1);
        free(v);
        close_backend(b);
}

static void test_nvml_xid_events_count_and_a_critical_one_makes_the_gpu_unhealthy(void **state) {
        script("gpu xid=13,31\n"      /* an application's faults: counted, the GPU stays usable */
               "gpu xid=79\n"          /* fallen off the bus */
               "gpu\n"
               "gpu xid=48 fail=events\n"); /* refuses to register: counts none, not known */
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        gp_gpu_info *v = read_all(b, 4);
        assert_int_equal(v[0].xid_errors, 2);
        assert_int_equal(v[0].last_xid, 31);
        assert_true(v[0].healthy);
        assert_int_equal(v[1].xid_errors, 1);
        assert_false(v[1].healthy);
        assert_string_equal(v[1].health_reason, "Xid 79: the GPU has fallen off the bus (reset the GPU)");
        assert_int_equal(v[2].xid_errors, 0);
        assert_true(v[2].healthy);
        assert_int_equal(v[3].xid_errors, -1);
        assert_true(v[3].healthy);
        free(v);
        /* an event is taken once; the GPU it made unhealthy stays so while the backend is open */
        v = read_all(b, 4);
        assert_int_equal(v[0].xid_errors, 2);
        assert_false(v[1].healthy);
        free(v);
        close_backend(b);
        assert_null(gp_gpu_xid_critical(13));
        assert_non_null(gp_gpu_xid_critical(48));
}

static void test_nvml_uncorrectable_ecc_errors_that_appear_make_the_gpu_unhealthy(void **state) {
        script("live\ngpu ecc_uncorrected=2\n");
        gp_gpu_backend *b = open_backend("nvml", lib_path);
        gp_gpu_info *v = read_all(b, 1);
        assert_true(v[0].healthy); /* errors from before it was watched: said, not acted on */
        free(v);
        usleep(20000);             /* a new modification time */
        FILE *f = fopen(script_path, "w");
        assert_non_null(f);
        fputs("live\ngpu ecc_uncorrected=3\n", f);
        fclose(f);
        v = read_all(b, 1);
        assert_false(v[0].healthy);
        assert_int_equal(v[0].ecc_uncorrected, 3);
        assert_string_equal(v[0].health_reason, "uncorrectable ECC errors: 3, 2 when first read (reset the GPU)");
        free(v);
        close_backend(b);
}

static void test_sim_derives_clocks_and_idle_throttle_from_load(void **state) {
        gp_gpu_backend *b = open_backend("sim", NULL);
        assert_int_equal(gp_gpu_sim_set_load(b, 2, 4000, 1), 0);
        gp_gpu_info *v = read_all(b, 4);
        /* idle: base clocks, the idle throttle reason, no ECC errors */
        assert_int_equal(v[0].sm_clock_mhz, 210);
        assert_int_equal(v[0].mem_clock_mhz, 405);
        assert_int_equal(v[0].throttle_reasons, 0x1);
        assert_int_equal(v[0].ecc_corrected, 0);
        assert_int_equal(v[0].ecc_uncorrected, 0);
        /* busy: clocks up, not throttled */
        assert_int_equal(v[2].sm_clock_mhz, 210 + 35 * 23);
        assert_int_equal(v[2].mem_clock_mhz, 10501);
        assert_int_equal(v[2].throttle_reasons, 0);
        free(v);
        close_backend(b);
}

static void test_sim_set_load_rejects_bad_arguments(void **state) {
        gp_gpu_backend *b = open_backend("sim", NULL);
        assert_int_equal(gp_gpu_sim_set_load(b, 4, 0, 0), -EINVAL);
        assert_int_equal(gp_gpu_sim_set_load(b, -1, 0, 0), -EINVAL);
        assert_int_equal(gp_gpu_sim_set_load(b, 0, -1, 0), -EINVAL);
        assert_int_equal(gp_gpu_sim_set_load(b, 0, 0, -1), -EINVAL);
        gp_gpu_info *v = read_all(b, 4);
        assert_int_equal(v[0].util_pct, 0);
        free(v);
        close_backend(b);
}

static void test_bad_backend_name_is_einval(void **state) {
        gp_gpu_options opt = {.backend = "cuda"};
        gp_gpu_backend *b = NULL;
        char err[256] = "";
        assert_int_equal(gp_gpu_open(&opt, &b, err, sizeof(err)), -EINVAL);
        assert_null(b);
        assert_non_null(strstr(err, "cuda"));
        gp_gpu_close(NULL);
}

/* The fake must behave like NVML where the loader could notice. */
static void test_fake_nvml_refuses_calls_before_init(void **state) {
        script("gpu name=\"NVIDIA A100-SXM4-80GB\"\n");
        void *dl = open_fake();
        int (*init)(void) = (int (*)(void))dlsym(dl, "nvmlInit_v2");
        int (*shutdown)(void) = (int (*)(void))dlsym(dl, "nvmlShutdown");
        int (*count)(unsigned int *) = (int (*)(unsigned int *))dlsym(dl, "nvmlDeviceGetCount_v2");
        int (*handle)(unsigned int, void **) =
                (int (*)(unsigned int, void **))dlsym(dl, "nvmlDeviceGetHandleByIndex_v2");
        int (*name)(void *, char *, unsigned int) =
                (int (*)(void *, char *, unsigned int))dlsym(dl, "nvmlDeviceGetName");
        assert_true(init && shutdown && count && handle && name);
        unsigned int n = 0;
        void *dev = NULL;
        char buf[96];

        assert_int_equal(count(&n), 1);    /* UNINITIALIZED */
        assert_int_equal(shutdown(), 1);
        assert_int_equal(init(), 0);
        assert_int_equal(count(&n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(handle(1, &dev), 2); /* INVALID_ARGUMENT */
        assert_int_equal(handle(0, &dev), 0);
        memset(buf, 'x', sizeof(buf));
        assert_int_equal(name(dev, buf, 8), 7); /* INSUFFICIENT_SIZE, nothing written */
        assert_int_equal(buf[0], 'x');
        assert_int_equal(name(dev, buf, sizeof(buf)), 0);
        assert_string_equal(buf, "NVIDIA A100-SXM4-80GB");
        assert_int_equal(shutdown(), 0);
        assert_int_equal(name(dev, buf, sizeof(buf)), 1);
        close_fake(dl);
}

/* Foreign memory: listed processes of no task, plus what the device uses
 * beyond every listed process past the slack, unless the list may be cut. */
static void test_foreign_memory_counts_what_no_listed_process_holds(void **state) {
        (void)state;
        /* device 45000: tasks' 15000 and a stranger's 1000 listed, 29000 unlisted */
        assert_int_equal(gp_gpu_foreign_mb(45000, 16000, 1000, 2, GP_GPU_MAX_PROCS), 1000 + 29000);
        /* within the slack: the driver's own */
        assert_int_equal(gp_gpu_foreign_mb(16000 + GP_GPU_UNLISTED_SLACK_MB, 16000, 1000, 2, GP_GPU_MAX_PROCS), 1000);
        assert_int_equal(gp_gpu_foreign_mb(16000 + GP_GPU_UNLISTED_SLACK_MB + 1, 16000, 1000, 2, GP_GPU_MAX_PROCS),
                         1000 + GP_GPU_UNLISTED_SLACK_MB + 1);
        /* listed more than the device said (a reading's skew): no less than the listed */
        assert_int_equal(gp_gpu_foreign_mb(10000, 16000, 1000, 2, GP_GPU_MAX_PROCS), 1000);
        /* the device's use unknown, or a list at the cap (maybe cut): the listed only */
        assert_int_equal(gp_gpu_foreign_mb(-1, 16000, 1000, 2, GP_GPU_MAX_PROCS), 1000);
        assert_int_equal(gp_gpu_foreign_mb(90000, 16000, 1000, GP_GPU_MAX_PROCS, GP_GPU_MAX_PROCS), 1000);
        /* bounded as the scheduler takes it */
        assert_int_equal(gp_gpu_foreign_mb(INT64_MAX / 2, 0, 0, 0, GP_GPU_MAX_PROCS), (int64_t)1 << 40);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_foreign_memory_counts_what_no_listed_process_holds),
                cmocka_unit_test_teardown(test_nvml_reads_scripted_gpus, teardown),
                cmocka_unit_test_teardown(test_nvml_marks_gpu_unhealthy_on_error, teardown),
                cmocka_unit_test_teardown(test_nvml_lost_gpu_keeps_its_identity, teardown),
                cmocka_unit_test_teardown(test_nvml_unsupported_readings_are_unknown_not_unhealthy,
                                          teardown),
                cmocka_unit_test_teardown(test_nvml_other_reading_error_is_unhealthy, teardown),
                cmocka_unit_test_teardown(test_nvml_strings_are_bounded_and_printable, teardown),
                cmocka_unit_test_teardown(test_nvml_distance_follows_topology, teardown),
                cmocka_unit_test_teardown(test_nvml_without_topology_symbol_distance_is_enotsup,
                                          teardown),
                cmocka_unit_test_teardown(test_nvml_missing_library_fails_with_enogpu, teardown),
                cmocka_unit_test_teardown(test_nvml_init_failure_fails_with_nvml_reason, teardown),
                cmocka_unit_test_teardown(test_nvml_without_gpus_fails_with_enogpu, teardown),
                cmocka_unit_test_teardown(test_nvml_set_load_is_not_supported, teardown),
                cmocka_unit_test_teardown(test_nvml_close_shuts_nvml_down, teardown),
                cmocka_unit_test_teardown(test_auto_uses_nvml_when_it_works, teardown),
                cmocka_unit_test_teardown(test_auto_falls_back_to_sim_without_library, teardown),
                cmocka_unit_test_teardown(test_auto_falls_back_to_sim_when_nvml_has_no_gpu,
                                          teardown),
                cmocka_unit_test_teardown(test_sim_default_is_four_rtx_4090, teardown),
                cmocka_unit_test_teardown(test_sim_uses_configured_kinds_in_order, teardown),
                cmocka_unit_test_teardown(test_sim_rejects_bad_spec, teardown),
                cmocka_unit_test_teardown(test_sim_set_load_changes_readings, teardown),
                cmocka_unit_test_teardown(test_sim_derives_clocks_and_idle_throttle_from_load, teardown),
                cmocka_unit_test_teardown(test_nvml_reads_clocks_ecc_and_throttle_reasons, teardown),
                cmocka_unit_test_teardown(test_nvml_diagnostics_unknown_not_unhealthy_when_unsupported_or_failing,
                                          teardown),
                cmocka_unit_test_teardown(test_nvml_lost_gpu_has_unknown_diagnostics, teardown),
                cmocka_unit_test_teardown(test_nvml_xid_events_count_and_a_critical_one_makes_the_gpu_unhealthy,
                                          teardown),
                cmocka_unit_test_teardown(test_nvml_uncorrectable_ecc_errors_that_appear_make_the_gpu_unhealthy,
                                          teardown),
                cmocka_unit_test_teardown(test_sim_set_load_rejects_bad_arguments, teardown),
                cmocka_unit_test_teardown(test_bad_backend_name_is_einval, teardown),
                cmocka_unit_test_teardown(test_fake_nvml_refuses_calls_before_init, teardown),
        };
        return cmocka_run_group_tests(tests, group_setup, NULL);
}
