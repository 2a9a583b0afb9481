/* gpu.c - the GPU inventory front: picks a backend and dispatches through
 * its vtable (gpu-int.h).
 *
 * Backend choice: "sim" -> simulated GPUs; "nvml" -> NVML or -GP_ENOGPU;
 * "auto" (also for a NULL name) -> NVML, and simulated GPUs whenever NVML
 * cannot be used for any reason.  When "auto" falls back, the call still
 * succeeds and err (if given) holds why NVML was not used, so the daemon
 * can say so once; on any other success err is "".
 * No global state: everything lives in the backend handle.
 */
#include "gpu/gpu.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "gpu/gpu-int.h"

void gp_gpu_set_err(char *err, size_t errlen, const char *fmt, ...) {
        if (!err || errlen == 0)
                return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        if (n < 0)
                err[0] = '\0';
}

int gp_gpu_open(const gp_gpu_options *opt, gp_gpu_backend **ret, char *err, size_t errlen) {
        gp_gpu_backend *b = NULL;
        int r;

        gp_gpu_set_err(err, errlen, "%s", "");
        if (!opt || !ret) {
                gp_gpu_set_err(err, errlen, "gpu: no options");
                return -EINVAL;
        }
        const char *name = opt->backend ? opt->backend : "auto";

        if (strcmp(name, "sim") == 0) {
                r = gp_gpu_sim_open(opt, &b, err, errlen);
        } else if (strcmp(name, "nvml") == 0) {
                r = gp_gpu_nvml_open(opt, &b, err, errlen);
        } else if (strcmp(name, "auto") == 0) {
                char why[256];
                r = gp_gpu_nvml_open(opt, &b, why, sizeof(why));
                if (r < 0) {
                        r = gp_gpu_sim_open(opt, &b, err, errlen);
                        if (r == 0)
                                gp_gpu_set_err(err, errlen, "NVML not used (%s); using simulated GPUs",
                                               why);
                }
        } else {
                gp_gpu_set_err(err, errlen, "gpu: unknown backend \"%.32s\" (want auto, nvml or sim)",
                               name);
                return -EINVAL;
        }
        if (r < 0)
                return r;
        *ret = b;
        return 0;
}

const char *gp_gpu_backend_name(const gp_gpu_backend *b) {
        return b ? b->ops->name : "none";
}

int gp_gpu_read(gp_gpu_backend *b, gp_gpu_info **ret, size_t *ret_n) {
        if (!b || !ret || !ret_n)
                return -EINVAL;
        return b->ops->read(b, ret, ret_n);
}

int gp_gpu_distance(gp_gpu_backend *b, int a, int b_index, int *ret) {
        if (!b || !ret || a < 0 || b_index < 0)
                return -EINVAL;
        return b->ops->distance(b, a, b_index, ret);
}

int gp_gpu_sim_set_load(gp_gpu_backend *b, int index, int64_t memory_used_mb, int tasks) {
        if (!b)
                return -EINVAL;
        if (!b->ops->sim_set_load)
                return -ENOTSUP;
        return b->ops->sim_set_load(b, index, memory_used_mb, tasks);
}

void gp_gpu_close(gp_gpu_backend *b) {
        if (b)
                b->ops->close(b);
}

const char *gp_gpu_xid_critical(int xid) {
        switch (xid) {
        case 48: return "double-bit ECC error";
        case 62: return "internal micro-controller halt";
        case 63: return "ECC page retirement or row remapping recorded";
        case 64: return "ECC page retirement or row remapping failed";
        case 74: return "NVLink error";
        case 79: return "the GPU has fallen off the bus";
        case 92: return "high single-bit ECC error rate";
        case 94: return "contained ECC error";
        case 95: return "uncontained ECC error";
        case 119: return "GSP RPC timeout";
        case 120: return "GSP error";
        case 140: return "unrecovered ECC error";
        default: return NULL;
        }
}
