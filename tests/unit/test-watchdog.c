/* test-watchdog.c - the GPU memory watchdog's decisions (core/watchdog.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/watchdog.h"

static const gp_wd_cfg cfg = {.tolerance_mb = 256, .grace_ms = 10000};

static void test_under_or_at_the_limit_plus_tolerance_is_nothing(void **state) {
        (void)state;
        int64_t since = 0;
        assert_int_equal(gp_wd_step(&cfg, 8000, 0, 1000, &since), GP_WD_NONE);
        assert_int_equal(gp_wd_step(&cfg, 8000, 8000, 2000, &since), GP_WD_NONE);
        assert_int_equal(gp_wd_step(&cfg, 8000, 8256, 3000, &since), GP_WD_NONE);
        assert_int_equal(since, 0);
}

static void test_over_warns_at_once_and_stops_after_the_grace(void **state) {
        (void)state;
        int64_t since = 0;
        assert_int_equal(gp_wd_step(&cfg, 8000, 8257, 1000, &since), GP_WD_OVER);
        assert_int_equal(since, 1000);
        assert_int_equal(gp_wd_step(&cfg, 8000, 9000, 5000, &since), GP_WD_NONE);
        assert_int_equal(gp_wd_step(&cfg, 8000, 9000, 10999, &since), GP_WD_NONE);
        assert_int_equal(gp_wd_step(&cfg, 8000, 9000, 11000, &since), GP_WD_STOP);
        assert_int_equal(since, -1);
        /* said once: a stopped task is not stopped again, whatever comes */
        assert_int_equal(gp_wd_step(&cfg, 8000, 20000, 30000, &since), GP_WD_NONE);
        assert_int_equal(gp_wd_step(&cfg, 8000, 0, 31000, &since), GP_WD_NONE);
}

static void test_going_back_under_starts_the_grace_again(void **state) {
        (void)state;
        int64_t since = 0;
        assert_int_equal(gp_wd_step(&cfg, 8000, 9000, 1000, &since), GP_WD_OVER);
        assert_int_equal(gp_wd_step(&cfg, 8000, 7000, 9000, &since), GP_WD_UNDER);
        assert_int_equal(since, 0);
        assert_int_equal(gp_wd_step(&cfg, 8000, 9000, 12000, &since), GP_WD_OVER);
        assert_int_equal(gp_wd_step(&cfg, 8000, 9000, 21999, &since), GP_WD_NONE);
        assert_int_equal(gp_wd_step(&cfg, 8000, 9000, 22000, &since), GP_WD_STOP);
}

static void test_unknown_use_and_whole_gpu_tasks_are_left_alone(void **state) {
        (void)state;
        int64_t since = 0;
        assert_int_equal(gp_wd_step(&cfg, 0, 80000, 1000, &since), GP_WD_NONE);  /* a whole GPU: no limit */
        assert_int_equal(gp_wd_step(&cfg, -1, 80000, 1000, &since), GP_WD_NONE);
        assert_int_equal(since, 0);
        assert_int_equal(gp_wd_step(&cfg, 8000, 9000, 1000, &since), GP_WD_OVER);
        /* a sample that could not be read changes nothing: the grace is not reset */
        assert_int_equal(gp_wd_step(&cfg, 8000, -1, 6000, &since), GP_WD_NONE);
        assert_int_equal(since, 1000);
        assert_int_equal(gp_wd_step(&cfg, 8000, 9000, 11000, &since), GP_WD_STOP);
}

static void test_no_grace_stops_at_the_first_sample_over(void **state) {
        (void)state;
        gp_wd_cfg now = {.tolerance_mb = 0, .grace_ms = 0};
        int64_t since = 0;
        assert_int_equal(gp_wd_step(&now, 8000, 8000, 0, &since), GP_WD_NONE);
        assert_int_equal(gp_wd_step(&now, 8000, 8001, 0, &since), GP_WD_STOP); /* at time 0 too */
        assert_int_equal(since, -1);
}

static void test_oom_messages_of_the_usual_frameworks_are_recognised(void **state) {
        (void)state;
        const char *what = NULL;
        const char *torch = "Traceback (most recent call last):\n  File \"train.py\", line 9\n"
                            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
                            "79.10 GiB total capacity; 77.52 GiB already allocated)\n";
        assert_true(gp_wd_oom_in_output(torch, strlen(torch), &what));
        assert_string_equal(what, "CUDA out of memory");
        const char *jax = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
                          "to allocate 17179869184 bytes.\n";
        assert_true(gp_wd_oom_in_output(jax, strlen(jax), &what));
        const char *cu = "CUDA error: cudaErrorMemoryAllocation at kernel.cu:42\n";
        assert_true(gp_wd_oom_in_output(cu, strlen(cu), NULL));
        const char *drv = "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in "
                          "CUDA_ERROR_OUT_OF_MEMORY\n";
        assert_true(gp_wd_oom_in_output(drv, strlen(drv), NULL));
        /* host memory, other errors, and a message cut off by the window: not GPU OOM */
        const char *no[] = {"MemoryError: Unable to allocate 8.00 GiB for an array\n",
                            "Killed\n", "RuntimeError: CUDA error: an illegal memory access was encountered\n",
                            "ValueError: out of range\n", ""};
        for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
                assert_false(gp_wd_oom_in_output(no[i], strlen(no[i]), NULL));
        assert_false(gp_wd_oom_in_output(torch, 40, NULL)); /* only what is in the window counts */
        assert_false(gp_wd_oom_in_output(NULL, 0, NULL));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_under_or_at_the_limit_plus_tolerance_is_nothing),
                cmocka_unit_test(test_over_warns_at_once_and_stops_after_the_grace),
                cmocka_unit_test(test_going_back_under_starts_the_grace_again),
                cmocka_unit_test(test_unknown_use_and_whole_gpu_tasks_are_left_alone),
                cmocka_unit_test(test_no_grace_stops_at_the_first_sample_over),
                cmocka_unit_test(test_oom_messages_of_the_usual_frameworks_are_recognised),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
