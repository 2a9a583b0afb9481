/* watchdog.c - the GPU memory watchdog's decisions (watchdog.h). */
#include "core/watchdog.h"

#include <string.h>

gp_wd_action gp_wd_step(const gp_wd_cfg *c, int64_t limit_mb, int64_t used_mb, int64_t now_ms,
                        int64_t *over_since_ms) {
        if (limit_mb <= 0 || used_mb < 0 || *over_since_ms < 0)
                return GP_WD_NONE;
        if (used_mb <= limit_mb + c->tolerance_mb) {
                if (*over_since_ms == 0)
                        return GP_WD_NONE;
                *over_since_ms = 0;
                return GP_WD_UNDER;
        }
        if (*over_since_ms == 0 && c->grace_ms > 0) {
                *over_since_ms = now_ms > 0 ? now_ms : 1; /* 0 means under */
                return GP_WD_OVER;
        }
        if (c->grace_ms <= 0 || now_ms - *over_since_ms >= c->grace_ms) {
                *over_since_ms = -1;
                return GP_WD_STOP;
        }
        return GP_WD_NONE;
}

bool gp_wd_oom_in_output(const char *text, size_t n, const char **ret_what) {
        static const char *const says[] = {
                "CUDA out of memory",              /* PyTorch: torch.OutOfMemoryError's message */
                "torch.OutOfMemoryError",
                "torch.cuda.OutOfMemoryError",
                "CUDA_ERROR_OUT_OF_MEMORY",        /* the driver API (and what wraps it: numba, cupy) */
                "cudaErrorMemoryAllocation",       /* the runtime API */
                "out of memory (cudaErrorMemoryAllocation)",
                "RESOURCE_EXHAUSTED: Out of memory", /* TensorFlow / XLA / JAX */
                "CUBLAS_STATUS_ALLOC_FAILED",
                "CUDNN_STATUS_ALLOC_FAILED",
        };
        for (size_t i = 0; i < sizeof(says) / sizeof(says[0]); i++)
                if (text && memmem(text, n, says[i], strlen(says[i]))) {
                        if (ret_what)
                                *ret_what = says[i];
                        return true;
                }
        return false;
}
