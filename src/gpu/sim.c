/* sim.c - simulated GPUs, for machines without NVIDIA hardware and for tests.
 *
 * The GPUs come from the config's gpus.sim entries, expanded in order
 * (entry 0's `count` GPUs first), so GPU i's name and memory never change
 * while the config does not.  uuid is "SIM-<index as 8 digits>-0000-0000-
 * 0000-000000000000", a function of the index alone.
 *
 * Readings are a pure function of what gp_gpu_sim_set_load() last said
 * (no randomness, no clock), so tests can assert them:
 *   util    = min(100, 35 * tasks)          (idle: 0)
 *   temp    = 30 + util / 2   degrees C      (idle: 30, full: 80)
 *   power   = 20 W + util * 4.3 W, in mW     (idle: 20 W, full: 450 W)
 *   used    = the memory set, capped at the GPU's total
 *   clocks  = SM 210 MHz + util * 23 MHz, memory 405 MHz idle / 10501 MHz busy
 *   ECC     = 0 corrected, 0 uncorrected; throttle = 0x1 (idle) when util is 0
 * Simulated GPUs are always healthy and have no topology (-ENOTSUP).
 * Invariant: 0 <= load[i].used_mb <= gpus[i].memory_total_mb, tasks >= 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "config/config.h"
#include "gpu/gpu-int.h"

#define SIM_DEFAULT_NAME "NVIDIA GeForce RTX 4090"
#define SIM_DEFAULT_MB 24564
#define SIM_DEFAULT_COUNT 4
#define SIM_MAX_MB 1048576
#define SIM_MAX_COUNT 64

#define SIM_IDLE_TEMP_C 30
#define SIM_IDLE_POWER_MW 20000
#define SIM_POWER_MW_PER_PCT 4300
#define SIM_UTIL_PER_TASK 35
#define SIM_IDLE_SM_MHZ 210
#define SIM_SM_MHZ_PER_PCT 23
#define SIM_IDLE_MEM_MHZ 405
#define SIM_BUSY_MEM_MHZ 10501
#define SIM_THROTTLE_IDLE 0x1      /* nvmlClocksThrottleReasonGpuIdle */

typedef struct sim_gpu {
        char name[GP_NAME_MAX];   /* from the spec */
        int64_t total_mb;         /* from the spec */
        int64_t used_mb;          /* last set, capped at total_mb */
        int tasks;                /* last set, >= 0 */
} sim_gpu;

typedef struct sim_backend {
        gp_gpu_backend base;      /* first: the vtable */
        size_t n;                 /* GPUs, 1..GP_CFG_MAX_SIM * SIM_MAX_COUNT */
        sim_gpu *gpus;            /* n entries, owned */
} sim_backend;

static int sim_read(gp_gpu_backend *b, gp_gpu_info **ret, size_t *ret_n) {
        sim_backend *s = (sim_backend *)b;
        gp_gpu_info *v = calloc(s->n, sizeof(*v));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < s->n; i++) {
                const sim_gpu *g = &s->gpus[i];
                gp_gpu_info *o = &v[i];
                int util = g->tasks > 100 / SIM_UTIL_PER_TASK ? 100 : g->tasks * SIM_UTIL_PER_TASK;

                o->index = (int)i;
                snprintf(o->uuid, sizeof(o->uuid), "SIM-%08d-0000-0000-0000-000000000000", (int)i);
                gp_strlcpy(o->name, g->name, sizeof(o->name));
                o->memory_total_mb = g->total_mb;
                o->memory_used_mb = g->used_mb;
                o->util_pct = util;
                o->temp_c = SIM_IDLE_TEMP_C + util / 2;
                o->power_mw = SIM_IDLE_POWER_MW + util * SIM_POWER_MW_PER_PCT;
                o->sm_clock_mhz = SIM_IDLE_SM_MHZ + util * SIM_SM_MHZ_PER_PCT;
                o->mem_clock_mhz = util ? SIM_BUSY_MEM_MHZ : SIM_IDLE_MEM_MHZ;
                o->ecc_corrected = 0;
                o->ecc_uncorrected = 0;
                o->throttle_reasons = util ? 0 : SIM_THROTTLE_IDLE;
                o->healthy = true;
                o->health_reason[0] = '\0';
        }
        *ret = v;
        *ret_n = s->n;
        return 0;
}

static int sim_distance(gp_gpu_backend *b, int a, int b_index, int *ret) {
        sim_backend *s = (sim_backend *)b;
        if ((size_t)a >= s->n || (size_t)b_index >= s->n)
                return -EINVAL;
        return -ENOTSUP;
}

static int sim_set_load(gp_gpu_backend *b, int index, int64_t memory_used_mb, int tasks) {
        sim_backend *s = (sim_backend *)b;
        if (index < 0 || (size_t)index >= s->n || memory_used_mb < 0 || tasks < 0)
                return -EINVAL;
        sim_gpu *g = &s->gpus[index];
        g->used_mb = memory_used_mb > g->total_mb ? g->total_mb : memory_used_mb;
        g->tasks = tasks;
        return 0;
}

static void sim_close(gp_gpu_backend *b) {
        sim_backend *s = (sim_backend *)b;
        free(s->gpus);
        free(s);
}

static const gp_gpu_ops sim_ops = {
        .name = "sim",
        .read = sim_read,
        .distance = sim_distance,
        .sim_set_load = sim_set_load,
        .close = sim_close,
};

/* Check one spec; 0 or -EINVAL with a message naming entry i. */
static int check_spec(const gp_cfg_sim_gpu *e, int i, char *err, size_t errlen) {
        size_t len = strnlen(e->name, sizeof(e->name));
        if (len == 0 || len == sizeof(e->name) || !gp_str_is_clean(e->name, len)) {
                gp_gpu_set_err(err, errlen, "gpus.sim[%d].name: must be 1..%zu clean characters", i,
                               sizeof(e->name) - 1);
                return -EINVAL;
        }
        if (e->memory_mb < 1 || e->memory_mb > SIM_MAX_MB) {
                gp_gpu_set_err(err, errlen, "gpus.sim[%d].memory_mb: %lld not in 1..%d", i,
                               (long long)e->memory_mb, SIM_MAX_MB);
                return -EINVAL;
        }
        if (e->count < 1 || e->count > SIM_MAX_COUNT) {
                gp_gpu_set_err(err, errlen, "gpus.sim[%d].count: %d not in 1..%d", i, e->count,
                               SIM_MAX_COUNT);
                return -EINVAL;
        }
        return 0;
}

int gp_gpu_sim_open(const gp_gpu_options *opt, gp_gpu_backend **ret, char *err, size_t errlen) {
        gp_cfg_sim_gpu def = {.name = SIM_DEFAULT_NAME, .memory_mb = SIM_DEFAULT_MB,
                              .count = SIM_DEFAULT_COUNT};
        const gp_cfg_sim_gpu *spec = opt->sim;
        int n_spec = opt->n_sim;
        size_t n = 0;
        int r;

        if (n_spec == 0) {
                spec = &def;
                n_spec = 1;
        } else if (n_spec < 0 || n_spec > GP_CFG_MAX_SIM || !spec) {
                gp_gpu_set_err(err, errlen, "gpus.sim: %d entries (want 0..%d)", n_spec,
                               GP_CFG_MAX_SIM);
                return -EINVAL;
        }
        for (int i = 0; i < n_spec; i++) {
                r = check_spec(&spec[i], i, err, errlen);
                if (r < 0)
                        return r;
                n += (size_t)spec[i].count;
        }

        sim_backend *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->gpus = calloc(n, sizeof(*s->gpus));
        if (!s->gpus) {
                free(s);
                return -ENOMEM;
        }
        s->base.ops = &sim_ops;
        s->n = n;
        size_t k = 0;
        for (int i = 0; i < n_spec; i++) {
                for (int c = 0; c < spec[i].count; c++, k++) {
                        gp_strlcpy(s->gpus[k].name, spec[i].name, sizeof(s->gpus[k].name));
                        s->gpus[k].total_mb = spec[i].memory_mb;
                }
        }
        *ret = &s->base;
        return 0;
}
