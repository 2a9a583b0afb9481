/* gpu.h - the GPU inventory edge: NVML (dlopen) or simulated GPUs.
 *
 * A backend is opened once, then read periodically (off the request path)
 * to get a snapshot of every GPU on this machine.  Backends sit behind a
 * vtable (gpu-int.h); callers see only this header.  A backend handle is
 * used by one thread at a time.
 */
#ifndef GP_GPU_GPU_H
#define GP_GPU_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/task.h"

#define GP_GPU_MAX_PROCS 64            /* processes listed per GPU (NVML may know more) */

typedef struct gp_gpu_proc {
        int pid;                    /* in the PID namespace of the reader */
        int64_t used_mb;            /* its memory on this GPU, -1 when the driver does not say */
} gp_gpu_proc;

typedef struct gp_gpu_info {
        int index;                  /* on this machine: NVML's index of a whole GPU; a MIG
                                       instance's comes after every GPU's (nvml.c) */
        char uuid[GP_UUID_MAX];     /* "GPU-..." (NVML), "MIG-..." (a MIG instance), "SIM-<n>-..." (sim) */
        char name[GP_NAME_MAX];     /* "NVIDIA GeForce RTX 4090"; "NVIDIA A100-SXM4-80GB MIG 1g.10gb" */
        int64_t memory_total_mb;
        int64_t memory_used_mb;     /* as the device reports it */
        int util_pct;               /* 0..100, -1 unknown */
        int temp_c;                 /* -1 unknown */
        int power_mw;               /* -1 unknown */
        int sm_clock_mhz;           /* current SM clock, -1 unknown */
        int mem_clock_mhz;          /* current memory clock, -1 unknown */
        int64_t ecc_corrected;      /* ECC errors since the driver loaded, -1 unknown / no ECC */
        int64_t ecc_uncorrected;    /* the same, uncorrectable (double-bit) ones */
        int64_t throttle_reasons;   /* NVML clocks-throttle-reason bits (0x1 idle, 0x4 power
                                       cap, 0x20/0x40 thermal, ...), -1 unknown */
        bool healthy;               /* false after an NVML error on this device */
        char health_reason[128];    /* why not healthy, "" when healthy */
        int64_t xid_errors;         /* Xid events seen since the backend opened, -1 unknown (no event API) */
        int last_xid;               /* the last one's Xid, 0 none */
        bool procs_known;           /* the driver listed its compute processes (NVML; sim: never) */
        int n_procs;                /* those processes, at most GP_GPU_MAX_PROCS */
        gp_gpu_proc procs[GP_GPU_MAX_PROCS];
} gp_gpu_info;

/* Memory a device has in use beyond its listed processes' that is taken
 * for granted: the driver's own, and the skew of one reading. */
#define GP_GPU_UNLISTED_SLACK_MB 256

/* The memory on a GPU that no task of the pool holds, from one reading:
 * the listed processes of no task (listed_foreign_mb), and what the device
 * has in use beyond every listed process (listed_mb), past the slack:
 * processes NVML does not list to this reader (another container's: driver
 * 580 lists only the reader's PID namespace's; graphics processes).  The
 * latter not when the list may be cut short (n_procs at max_procs) or the
 * device's use is unknown (device_used_mb < 0). */
static inline int64_t gp_gpu_foreign_mb(int64_t device_used_mb, int64_t listed_mb, int64_t listed_foreign_mb,
                                        int n_procs, int max_procs) {
        int64_t unlisted = device_used_mb - listed_mb;
        if (device_used_mb >= 0 && n_procs < max_procs && unlisted > GP_GPU_UNLISTED_SLACK_MB)
                listed_foreign_mb += unlisted;
        return listed_foreign_mb < ((int64_t)1 << 40) ? listed_foreign_mb : (int64_t)1 << 40;
}

typedef struct gp_gpu_backend gp_gpu_backend;

typedef struct gp_gpu_options {
        const char *backend;        /* "auto" | "nvml" | "sim" */
        const char *nvml_library;   /* path or soname for dlopen */
        const struct gp_cfg_sim_gpu *sim; /* sim specs (config.h), n_sim entries */
        int n_sim;
} gp_gpu_options;

/* Open a backend. "auto" tries NVML and falls back to sim when the library
 * cannot be loaded or reports no GPU.  "nvml" fails with -GP_ENOGPU and a
 * message in err if NVML cannot be used.  0 / -GP_ENOGPU / -EINVAL / -ENOMEM. */
int gp_gpu_open(const gp_gpu_options *opt, gp_gpu_backend **ret, char *err, size_t errlen);

/* "nvml" or "sim". */
const char *gp_gpu_backend_name(const gp_gpu_backend *b);

/* Snapshot of all GPUs: *ret is a malloc'd array of *ret_n entries the caller
 * frees with free().  A device that fails to answer comes back with
 * healthy=false and a reason, not as an error.  0 or -ENOMEM / -EIO. */
int gp_gpu_read(gp_gpu_backend *b, gp_gpu_info **ret, size_t *ret_n);

/* Topology distance between the devices at positions a and b of
 * gp_gpu_read's array (for whole GPUs their indexes): 0 same board /
 * NVLink (two MIG instances of one GPU: 0), 1 same PCIe switch, 2 same host
 * bridge / CPU, 3 across CPUs.
 * -ENOTSUP when the backend does not know (sim, or NVML without topology). */
int gp_gpu_distance(gp_gpu_backend *b, int a, int b_index, int *ret);

/* sim only: tell the backend what runs on a GPU so it can report plausible
 * used memory / utilisation / temperature.  -ENOTSUP for NVML. */
int gp_gpu_sim_set_load(gp_gpu_backend *b, int index, int64_t memory_used_mb, int tasks);

/* An Xid after which NVIDIA says the GPU needs a reset (or a drain and a
 * field diagnostic): what it means, or NULL for the others (an
 * application's fault such as 13, 31 or 43 leaves the GPU usable).  The
 * critical ones: 48 62 63 64 74 79 92 94 95 119 120 140. */
const char *gp_gpu_xid_critical(int xid);

/* Is the device with this uuid a MIG instance ("MIG-...")?  false for NULL. */
bool gp_gpu_is_mig(const char *uuid);

/* A MIG instance's profile ("1g.10gb") from its uuid and name (the text
 * after the name's last " MIG "): a pointer into name, or NULL when the
 * device is no MIG instance or its name carries no profile. */
const char *gp_gpu_mig_profile(const char *uuid, const char *name);

/* NVIDIA's name of a MIG profile from nvmlDeviceGetAttributes' slice counts
 * and memory and the board's memory (MiB): "1g.10gb", or "1c.2g.20gb" when
 * the compute instance has fewer slices than its GPU instance.  0, -EINVAL
 * (counts or sizes out of range), -ENOSPC (buf too small). */
int gp_gpu_mig_profile_name(unsigned gi_slices, unsigned ci_slices, uint64_t memory_mb, uint64_t board_mb,
                            char *buf, size_t size);

/* Close; takes NULL. */
void gp_gpu_close(gp_gpu_backend *b);

#endif
