/* mig.c - what gpupool knows of a MIG instance from its identity alone.
 *
 * A MIG instance (a GPU in MIG mode split by the operator, docs/isolation.md)
 * is one schedulable device: NVML's uuid for it starts "MIG-" ("MIG-<uuid>"
 * since driver R470, "MIG-GPU-<uuid>/<gi>/<ci>" before), and the nvml
 * backend names it "<board's name> MIG <profile>".  Everything here is a
 * pure function of those strings or of NVML's numbers, so the server and
 * the agents agree on it without a field of its own in the cluster
 * protocol.
 *
 * The profile name ("1g.10gb", "1c.3g.40gb") is NVIDIA's own rule (as
 * nvidia-smi and the Kubernetes device plugin name profiles): the instance's
 * memory as a fraction of the board's, rounded up to eighths, times the
 * board's memory in GB rounded up, rounded to the nearest GB.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"

#define MIG_SEP " MIG "

bool gp_gpu_is_mig(const char *uuid) {
        return uuid && !strncmp(uuid, "MIG-", 4);
}

int gp_gpu_mig_profile_name(unsigned gi_slices, unsigned ci_slices, uint64_t memory_mb, uint64_t board_mb, char *buf,
                            size_t size) {
        if (!gi_slices || gi_slices > 64 || !ci_slices || ci_slices > gi_slices || !memory_mb || memory_mb > board_mb ||
            board_mb > (UINT64_C(1) << 40))
                return -EINVAL;
        uint64_t eighths = (memory_mb * 8 + board_mb - 1) / board_mb; /* 1..8 */
        uint64_t board_gb = (board_mb + 1023) / 1024;
        uint64_t gb = (eighths * board_gb + 4) / 8;
        int n = ci_slices == gi_slices
                        ? snprintf(buf, size, "%ug.%llugb", gi_slices, (unsigned long long)gb)
                        : snprintf(buf, size, "%uc.%ug.%llugb", ci_slices, gi_slices, (unsigned long long)gb);
        return n < 0 || (size_t)n >= size ? -ENOSPC : 0;
}

const char *gp_gpu_mig_profile(const char *uuid, const char *name) {
        if (!gp_gpu_is_mig(uuid) || !name)
                return NULL;
        const char *p = NULL;
        for (const char *q = strstr(name, MIG_SEP); q; q = strstr(q + 1, MIG_SEP))
                p = q + strlen(MIG_SEP);
        return p && *p ? p : NULL;
}
