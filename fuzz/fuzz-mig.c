/* fuzz-mig.c - libFuzzer target for what gpupool reads of a MIG instance
 * (src/gpu/mig.c): gp_gpu_is_mig and gp_gpu_mig_profile over a device's
 * uuid and name (an agent sends both in its inventory), and
 * gp_gpu_mig_profile_name over the numbers NVML's
 * nvmlDeviceGetAttributes_v2 gives (a driver's answer).
 *
 * The input is split at '\n' into: uuid, name, then the numbers' text
 * ("GI CI MEMORY BOARD SIZE", decimal, SIZE the buffer, 0..63).  Each
 * string is copied into a buffer of exactly its size (plus the NUL), so
 * ASan catches a read past it.  Checks: a profile is NULL unless the uuid
 * starts "MIG-", else a non-empty tail of the name after " MIG " with no
 * " MIG " in it; a profile name is written only on success, fits SIZE,
 * reads back as [Cc.]Gg.Ngb with the slices given and N at most the board's
 * GB (rounded up); a failure is -EINVAL or -ENOSPC and leaves the buffer
 * unchanged.  Any violation aborts. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

#include "fuzz-fields.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_profile(const char *uuid, const char *name) {
        const char *p = gp_gpu_mig_profile(uuid, name);
        if (!p)
                return;
        if (!gp_gpu_is_mig(uuid) || strncmp(uuid, "MIG-", 4))
                abort();
        size_t nl = strlen(name);
        if (p < name + 5 || p > name + nl || !*p || strncmp(p - 5, " MIG ", 5) || strstr(p, " MIG "))
                abort();
}

static void check_name(const char *nums) {
        unsigned long long gi = 0, ci = 0, mem = 0, board = 0, sz = 0;
        if (sscanf(nums, "%llu %llu %llu %llu %llu", &gi, &ci, &mem, &board, &sz) != 5 || sz > 63 ||
            gi > UINT32_MAX || ci > UINT32_MAX)
                return;
        char buf[64];
        memset(buf, 'x', sizeof(buf));
        int r = gp_gpu_mig_profile_name((unsigned)gi, (unsigned)ci, mem, board, buf, (size_t)sz);
        if (r == -EINVAL || r == -ENOSPC) {
                for (size_t i = 0; i < sizeof(buf); i++)
                        if (buf[i] != 'x' && i >= sz)
                                abort(); /* nothing past the size given */
                return;
        }
        if (r != 0 || !memchr(buf, '\0', (size_t)sz))
                abort();
        unsigned g = 0, c = 0;
        unsigned long long n = 0;
        int used = 0;
        if (sscanf(buf, "%uc.%ug.%llugb%n", &c, &g, &n, &used) == 3 && !buf[used]) {
                if (c != ci || g != gi || c >= g)
                        abort();
        } else if (used = 0, sscanf(buf, "%ug.%llugb%n", &g, &n, &used) == 2 && !buf[used]) {
                if (g != gi || ci != gi)
                        abort();
        } else {
                abort();
        }
        if (n > (board + 1023) / 1024 || !mem || mem > board)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const uint8_t *p = data, *end = data + size;
        char *uuid = fuzz_field(&p, end), *name = fuzz_field(&p, end), *nums = fuzz_field(&p, end);
        if (uuid && name)
                check_profile(uuid, name);
        if (nums)
                check_name(nums);
        free(uuid);
        free(name);
        free(nums);
        return 0;
}
