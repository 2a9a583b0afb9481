/* gpu-int.h - what the GPU backends share with gpu.c: the vtable and the
 * backend constructors.  Not for use outside src/gpu/.
 *
 * A backend is a struct whose first member is a gp_gpu_backend (so a
 * pointer to it is also a pointer to the base); gpu.c only ever goes
 * through base.ops.  Every op gets a non-NULL backend of its own kind and
 * arguments gpu.c has already checked (index ranges excepted: the backend
 * owns its GPU count).
 */
#ifndef GP_GPU_GPU_INT_H
#define GP_GPU_GPU_INT_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"

/* Most GPUs one backend will report; a larger count from NVML is refused. */
#define GP_GPU_MAX 1024

typedef struct gp_gpu_ops {
        const char *name;      /* "nvml" | "sim", what gp_gpu_backend_name returns */
        /* Snapshot: *ret malloc'd array of *ret_n entries. 0 / -ENOMEM / -EIO. */
        int (*read)(gp_gpu_backend *b, gp_gpu_info **ret, size_t *ret_n);
        /* 0..3 into *ret, or -EINVAL (bad index) / -ENOTSUP / -EIO. */
        int (*distance)(gp_gpu_backend *b, int a, int b_index, int *ret);
        /* NULL when the backend has no notion of load (gpu.c then says -ENOTSUP). */
        int (*sim_set_load)(gp_gpu_backend *b, int index, int64_t memory_used_mb, int tasks);
        /* Release everything, including b itself. */
        void (*close)(gp_gpu_backend *b);
} gp_gpu_ops;

struct gp_gpu_backend {
        const gp_gpu_ops *ops; /* never NULL */
};

/* NVML through dlopen(opt->nvml_library).  -GP_ENOGPU with a message in err
 * when the library cannot be loaded, lacks a required symbol, fails to
 * initialise or reports no GPU; -ENOMEM. */
int gp_gpu_nvml_open(const gp_gpu_options *opt, gp_gpu_backend **ret, char *err, size_t errlen);

/* Simulated GPUs from opt->sim / opt->n_sim (default one RTX 4090 x4 entry
 * when n_sim == 0).  -EINVAL with a message in err for a bad spec; -ENOMEM. */
int gp_gpu_sim_open(const gp_gpu_options *opt, gp_gpu_backend **ret, char *err, size_t errlen);

/* Write a message into err (NUL-terminated, truncated to errlen); takes
 * err == NULL or errlen == 0. */
void gp_gpu_set_err(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

#endif
