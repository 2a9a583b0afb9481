/* nvml.c - GPUs through NVIDIA's NVML, loaded at run time with dlopen.
 *
 * There is no build-time dependency on the driver: the few NVML types and
 * constants used are declared here with NVML's ABI (nvmlReturn_t and the
 * enums are int-sized; nvmlDevice_t is an opaque pointer), and every entry
 * point is looked up with dlsym.  nvmlDeviceGetTopologyCommonAncestor is
 * optional (distance then says -ENOTSUP); every other symbol is required.
 *
 * Invariants:
 *  - Between open and close NVML is initialised exactly once by this handle
 *    (nvmlInit_v2 ... nvmlShutdown) and the library stays loaded.
 *  - The GPU count is fixed at open (1..GP_GPU_MAX); hot-plug needs a reopen.
 *  - gpus[i] caches the last identity and memory NVML gave for GPU i, so a
 *    GPU that later stops answering is still reported under its uuid/name.
 *    open() reads every GPU once to fill the cache.
 *  - Every string NVML writes goes into a zeroed buffer whose size is passed
 *    to NVML and whose last byte is forced to NUL; it is then copied into
 *    the fixed-size fields of gp_gpu_info, with non-printable bytes replaced
 *    by '?' when the text is not clean UTF-8.
 *  - A failing device call is a property of that GPU (healthy=false and a
 *    reason naming the call and nvmlErrorString), never an error of
 *    gp_gpu_read.  NOT_SUPPORTED on utilisation, temperature or power only
 *    makes that reading -1.
 *  - The compute processes of a GPU (nvmlDeviceGetComputeRunningProcesses,
 *    _v3 or _v2: one layout) are optional like the diagnostics: an error
 *    lists none.
 *  - Xid events (nvmlDeviceRegisterEvents, nvmlEventSetWait_v2; optional):
 *    every read first takes the ones waiting, without waiting.  Each counts
 *    (xid_errors); a critical one (gp_gpu_xid_critical: the GPU needs a
 *    reset) makes its GPU unhealthy for as long as the backend is open,
 *    with the Xid in the reason.  Uncorrectable ECC errors that appear
 *    while it is open (the count above the one at open) do the same.
 *  - Clocks, ECC counts and throttle reasons are diagnostics: their symbols
 *    are optional (old drivers) and any error reading them (GeForce cards
 *    answer NOT_SUPPORTED for ECC) only makes the reading -1; they never
 *    decide health.
 *  - MIG (docs/isolation.md): the devices reported are fixed at open.  A
 *    GPU whose current MIG mode is enabled is replaced by its MIG instances
 *    (nvmlDeviceGetMigDeviceHandleByIndex over 0..nvmlDeviceGetMaxMigDeviceCount,
 *    NOT_FOUND slots skipped), each a device of its own: uuid "MIG-...",
 *    memory from the MIG handle, name "<board> MIG <profile>" with the
 *    profile from nvmlDeviceGetAttributes_v2 (gp_gpu_mig_profile_name).  A
 *    whole GPU keeps NVML's index; the MIG instances are numbered after the
 *    last GPU (nb->n_phys, n_phys + 1, ...) in GPU then MIG-index order; the
 *    array is in index order.  An instance that later stops answering or
 *    answers with another uuid (the layout changed) is unhealthy until a
 *    reopen reads the new layout.  Readings of the board (temperature,
 *    clocks, ECC, Xid events) are its parent GPU's; utilisation and
 *    processes the MIG handle's (NOT_SUPPORTED: -1 / none); power -1 (the
 *    board's is not the instance's).  Without the four MIG symbols (an old
 *    driver) every GPU is a whole GPU.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "gpu/gpu-int.h"

/* --- NVML ABI, declared from the public API reference (nvml.h is not used). */
typedef int nvmlReturn_t;                 /* enum nvmlReturn_enum */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef int nvmlTemperatureSensors_t;     /* enum */
typedef int nvmlGpuTopologyLevel_t;       /* enum */

typedef struct nvmlMemory_st {
        unsigned long long total;         /* bytes */
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned long long free;
        unsigned long long used;
} nvmlMemory_t;

/* nvmlDeviceGetMemoryInfo_v2 (R510 on): the driver's own reservation apart,
 * so `used` is what nvidia-smi shows (v1's counts the reservation in). */
typedef struct nvmlMemory_v2_st {
        unsigned int version;             /* NVML_MEMORY_V2 */
        unsigned long long total;
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned long long reserved;
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned long long free;
        unsigned long long used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2U << 24))) /* NVML_STRUCT_VERSION */

typedef struct nvmlUtilization_st {
        unsigned int gpu;                 /* percent of time a kernel ran */
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int memory;              /* percent of time memory was read/written */
} nvmlUtilization_t;

typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlEventData_st {
        nvmlDevice_t device;
        unsigned long long eventType;
        unsigned long long eventData;     /* the Xid, for an Xid event */
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int gpuInstanceId;
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int computeInstanceId;
} nvmlEventData_t;
#define NVML_EVENT_TYPE_XID_CRITICAL_ERROR 0x8ULL /* nvmlEventTypeXidCriticalError: every Xid */

/* nvmlDeviceAttributes_t (nvmlDeviceGetAttributes_v2: MIG device handles only) */
typedef struct nvmlDeviceAttributes_st {
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int multiprocessorCount;
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int sharedCopyEngineCount;
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int sharedDecoderCount;
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int sharedEncoderCount;
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int sharedJpegCount;
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int sharedOfaCount;
        unsigned int gpuInstanceSliceCount;
        unsigned int computeInstanceSliceCount;
        unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;
#define NVML_DEVICE_MIG_ENABLE 1
#define MAX_MIG_SLOTS 64          /* MIG handles looked for per GPU (A100/H100 have 7) */

/* nvmlProcessInfo_v2_t, also what _v3 takes */
typedef struct nvmlProcessInfo_st {
        unsigned int pid;
        unsigned long long usedGpuMemory; /* bytes, NVML_VALUE_NOT_AVAILABLE when unknown */
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int gpuInstanceId;
        // cppcheck-suppress unusedStructMember ; NVML's layout: the library writes it
        unsigned int computeInstanceId;
} nvmlProcessInfo_t;
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

enum {
        NVML_SUCCESS = 0,
        NVML_ERROR_NOT_SUPPORTED = 3,
        NVML_ERROR_NOT_FOUND = 6,
        NVML_ERROR_FUNCTION_NOT_FOUND = 13,
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};
enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };                      /* nvmlClockType_t */
enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };              /* nvmlEccCounterType_t */
enum {
        NVML_TOPOLOGY_INTERNAL = 0,
        NVML_TOPOLOGY_SINGLE = 10,
        NVML_TOPOLOGY_MULTIPLE = 20,
        NVML_TOPOLOGY_HOSTBRIDGE = 30,
        NVML_TOPOLOGY_NODE = 40,
        NVML_TOPOLOGY_SYSTEM = 50,
};
/* NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE are 96. */
#define NVML_STR_BUF 96
/* --- end of NVML ABI */

#define DEFAULT_LIBRARY "libnvidia-ml.so.1"
#define MIB (1024ULL * 1024ULL)
#define MAX_TEMP_C 1000

typedef struct nvml_fns {
        nvmlReturn_t (*init)(void);
        nvmlReturn_t (*shutdown)(void);
        const char *(*error_string)(nvmlReturn_t);
        nvmlReturn_t (*get_count)(unsigned int *);
        nvmlReturn_t (*get_handle)(unsigned int, nvmlDevice_t *);
        nvmlReturn_t (*get_name)(nvmlDevice_t, char *, unsigned int);
        nvmlReturn_t (*get_uuid)(nvmlDevice_t, char *, unsigned int);
        nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t *);
        nvmlReturn_t (*get_memory_v2)(nvmlDevice_t, nvmlMemory_v2_t *);                   /* may be NULL */
        nvmlReturn_t (*get_util)(nvmlDevice_t, nvmlUtilization_t *);
        nvmlReturn_t (*get_temp)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *);
        nvmlReturn_t (*get_power)(nvmlDevice_t, unsigned int *);
        nvmlReturn_t (*get_topo)(nvmlDevice_t, nvmlDevice_t, nvmlGpuTopologyLevel_t *); /* may be NULL */
        nvmlReturn_t (*get_clock)(nvmlDevice_t, int, unsigned int *);                      /* may be NULL */
        nvmlReturn_t (*get_ecc)(nvmlDevice_t, int, int, unsigned long long *);             /* may be NULL */
        nvmlReturn_t (*get_throttle)(nvmlDevice_t, unsigned long long *);                  /* may be NULL */
        nvmlReturn_t (*get_procs)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);      /* may be NULL */
        nvmlReturn_t (*event_set_create)(nvmlEventSet_t *);                                /* the four: */
        nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t); /* all or none */
        nvmlReturn_t (*event_wait)(nvmlEventSet_t, nvmlEventData_t *, unsigned int);
        nvmlReturn_t (*event_set_free)(nvmlEventSet_t);
        nvmlReturn_t (*get_mig_mode)(nvmlDevice_t, unsigned int *, unsigned int *);           /* the four */
        nvmlReturn_t (*get_max_mig)(nvmlDevice_t, unsigned int *);                            /* MIG ones: */
        nvmlReturn_t (*get_mig_handle)(nvmlDevice_t, unsigned int, nvmlDevice_t *);           /* all or */
        nvmlReturn_t (*get_attributes)(nvmlDevice_t, nvmlDeviceAttributes_t *);               /* none */
} nvml_fns;

/* One physical GPU: what belongs to the board. */
typedef struct nvml_gpu {
        nvmlDevice_t dev;         /* its handle (NULL before one was had): Xid events name it */
        char name[GP_NAME_MAX];   /* last name NVML gave, "" before (its MIG instances' start) */
        bool events;              /* registered for Xid events */
        int64_t xids;             /* Xid events seen */
        int last_xid, fatal_xid;  /* the last, and the last critical one (0: none) */
        int64_t ecc_base;         /* uncorrectable ECC errors at the first reading, -1 before */
        int64_t board_mb;         /* its memory total (a MIG profile's name needs it), 0 before */
} nvml_gpu;

/* One device reported: a whole GPU or a MIG instance of one. */
typedef struct nvml_dev {
        unsigned int phys;        /* its GPU, < n_phys */
        int mig;                  /* its MIG handle's index under phys; -1: the whole GPU */
        int index;                /* what gp_gpu_info.index says */
        char name[GP_NAME_MAX];   /* last name NVML gave, "" before */
        char uuid[GP_UUID_MAX];   /* last uuid NVML gave, "" before */
        int64_t total_mb;         /* last memory total, 0 before */
        int64_t used_mb;          /* last memory used, 0 before */
} nvml_dev;

typedef struct nvml_backend {
        gp_gpu_backend base;      /* first: the vtable */
        void *dl;                 /* dlopen handle, owned */
        nvml_fns fn;              /* resolved entry points */
        unsigned int n_phys;      /* GPUs, 1..GP_GPU_MAX */
        nvml_gpu *gpus;           /* n_phys entries, owned */
        unsigned int n;           /* devices reported, 0..GP_GPU_MAX, in index order */
        nvml_dev *devs;           /* n entries, owned */
        nvmlEventSet_t events;    /* Xid events, NULL without the event API */
} nvml_backend;

static const char *errstr(const nvml_backend *nb, nvmlReturn_t rc) {
        const char *s = nb->fn.error_string(rc);
        return s ? s : "unknown NVML error";
}

/* Copy NVML text (already NUL-terminated) into a field; keep it printable. */
static void copy_text(char *dst, size_t size, const char *src) {
        gp_strlcpy(dst, src, size);
        size_t len = strlen(dst);
        if (gp_str_is_clean(dst, len))
                return;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)dst[i];
                if (c < 0x20 || c > 0x7e)
                        dst[i] = '?';
        }
}

static void mark_unhealthy(const nvml_backend *nb, gp_gpu_info *o, const char *call,
                           nvmlReturn_t rc) {
        o->healthy = false;
        snprintf(o->health_reason, sizeof(o->health_reason), "%s: %.80s (%d)", call,
                 errstr(nb, rc), rc);
}

/* An optional reading: value, -1 when NOT_SUPPORTED; other errors are the
 * GPU's (returns false after marking it). */
static bool optional_reading(const nvml_backend *nb, gp_gpu_info *o, const char *call,
                             nvmlReturn_t rc, unsigned int v, unsigned int max, int *ret) {
        if (rc == NVML_ERROR_NOT_SUPPORTED) {
                *ret = -1;
                return true;
        }
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, call, rc);
                return false;
        }
        *ret = v > max ? -1 : (int)v;
        return true;
}

/* Clocks, ECC counts, throttle reasons (the board's): -1 unless NVML
 * answers; the compute processes of dev (the GPU or a MIG instance of it). */
/* Are the processes NVML listed this process's to see?  Older drivers name
 * them by their PIDs in the host's PID namespace (driver 580 lists only the
 * reader's namespace's, under its PIDs: seen on an H200); run in a
 * namespace of its own (a container without the host's PIDs), gpupool would
 * find none of them, or others of the same number, and take a task's memory
 * for a stranger's (foreign memory it then keeps free: the task counted twice).
 * So a reading with a PID this process cannot see lists no process at all
 * (per task memory, the watchdog and foreign memory wait for one it can),
 * and three such readings in a row are logged once, with the remedy.  A
 * process that ended between the listing and the look is listed again
 * once, without it. */
static int first_unseen(const gp_gpu_info *o) {
        for (int k = 0; k < o->n_procs; k++)
                if (kill(o->procs[k].pid, 0) < 0 && errno == ESRCH)
                        return o->procs[k].pid;
        return 0;
}

/* A reading whose first unseen PID is unseen (0: none): true when it may
 * stand. */
static bool pids_seen(int unseen) {
        static int streak, warned; /* atomic */
        if (!unseen) {
                __atomic_store_n(&streak, 0, __ATOMIC_RELAXED);
                return true;
        }
        if (__atomic_add_fetch(&streak, 1, __ATOMIC_RELAXED) >= 3 &&
            !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                gp_warn("NVML lists GPU process %d, which this process cannot see: gpupool runs in a PID namespace "
                        "other than the driver's (a container without the host's PIDs?), so GPU memory per task, the "
                        "memory watchdog and foreign memory are off; run it in the host's (docker run --pid=host, "
                        "Kubernetes hostPID: true)", unseen);
        return false;
}

static void read_diagnostics(const nvml_backend *nb, nvmlDevice_t board, nvmlDevice_t dev, gp_gpu_info *o) {
        unsigned int mhz;
        unsigned long long n;
        if (nb->fn.get_clock) {
                mhz = 0;
                if (nb->fn.get_clock(board, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS && mhz <= 100000)
                        o->sm_clock_mhz = (int)mhz;
                mhz = 0;
                if (nb->fn.get_clock(board, NVML_CLOCK_MEM, &mhz) == NVML_SUCCESS && mhz <= 100000)
                        o->mem_clock_mhz = (int)mhz;
        }
        if (nb->fn.get_ecc) {
                n = 0;
                if (nb->fn.get_ecc(board, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &n) == NVML_SUCCESS &&
                    n <= (unsigned long long)INT64_MAX)
                        o->ecc_corrected = (int64_t)n;
                n = 0;
                if (nb->fn.get_ecc(board, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n) == NVML_SUCCESS &&
                    n <= (unsigned long long)INT64_MAX)
                        o->ecc_uncorrected = (int64_t)n;
        }
        if (nb->fn.get_throttle) {
                n = 0;
                if (nb->fn.get_throttle(board, &n) == NVML_SUCCESS && n <= (unsigned long long)INT64_MAX)
                        o->throttle_reasons = (int64_t)n;
        }
        if (nb->fn.get_procs) {
                static __thread nvmlProcessInfo_t p[4 * GP_GPU_MAX_PROCS];
                int unseen = 0;
                for (int tries = 0; tries < 2; tries++) {
                        unsigned int cnt = 4 * GP_GPU_MAX_PROCS;
                        memset(p, 0, sizeof(p));
                        o->n_procs = 0;
                        o->procs_known = nb->fn.get_procs(dev, &cnt, p) == NVML_SUCCESS;
                        if (o->procs_known)
                                for (unsigned int k = 0;
                                     k < cnt && k < 4 * GP_GPU_MAX_PROCS && o->n_procs < GP_GPU_MAX_PROCS; k++) {
                                        if (p[k].pid == 0 || p[k].pid > INT_MAX)
                                                continue;
                                        gp_gpu_proc *q = &o->procs[o->n_procs++];
                                        q->pid = (int)p[k].pid;
                                        q->used_mb = p[k].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE
                                                             ? -1
                                                             : (int64_t)(p[k].usedGpuMemory / MIB);
                                }
                        unseen = o->procs_known ? first_unseen(o) : 0;
                        if (!unseen)
                                break;
                }
                if (o->procs_known && !pids_seen(unseen)) {
                        o->procs_known = false; /* whose they are cannot be told: none is charged */
                        o->n_procs = 0;
                }
        }
}

static void init_info(gp_gpu_info *o, int index) {
        memset(o, 0, sizeof(*o));
        o->index = index;
        o->util_pct = o->temp_c = o->power_mw = -1;
        o->sm_clock_mhz = o->mem_clock_mhz = -1;
        o->ecc_corrected = o->ecc_uncorrected = o->throttle_reasons = -1;
        o->healthy = true;
}

/* Uncorrectable ECC errors that appeared on the board since the first
 * reading make it unhealthy. */
static void ecc_health(nvml_gpu *p, gp_gpu_info *o) {
        if (o->ecc_uncorrected >= 0 && p->ecc_base < 0)
                p->ecc_base = o->ecc_uncorrected;
        if (o->ecc_uncorrected > p->ecc_base && p->ecc_base >= 0 && o->healthy) {
                o->healthy = false;
                snprintf(o->health_reason, sizeof(o->health_reason),
                         "uncorrectable ECC errors: %lld, %lld when first read (reset the GPU)",
                         (long long)o->ecc_uncorrected, (long long)p->ecc_base);
        }
}

/* The board's Xids and the cached identity into o. */
static void finish(const nvml_gpu *p, const nvml_dev *c, gp_gpu_info *o) {
        o->xid_errors = p->events ? p->xids : -1;
        o->last_xid = p->last_xid;
        if (p->fatal_xid && o->healthy) {
                o->healthy = false;
                snprintf(o->health_reason, sizeof(o->health_reason), "Xid %d: %s (reset the GPU)", p->fatal_xid,
                         gp_gpu_xid_critical(p->fatal_xid));
        }
        gp_strlcpy(o->name, c->name, sizeof(o->name));
        gp_strlcpy(o->uuid, c->uuid, sizeof(o->uuid));
        o->memory_total_mb = c->total_mb;
        o->memory_used_mb = c->used_mb;
}

/* A string from NVML (name, uuid) into a zeroed buffer, forced NUL-terminated. */
static nvmlReturn_t get_text(nvmlReturn_t (*f)(nvmlDevice_t, char *, unsigned int), nvmlDevice_t dev,
                             char buf[NVML_STR_BUF]) {
        memset(buf, 0, NVML_STR_BUF);
        nvmlReturn_t rc = f(dev, buf, NVML_STR_BUF);
        buf[NVML_STR_BUF - 1] = '\0';
        return rc;
}

/* A device's memory total and use, MiB.  v2 where the driver has it: its
 * `used` leaves out the driver's own reservation (about 600 MiB of an idle
 * H200 with R580), as nvidia-smi does; v1's counts it, so an idle GPU would
 * show as used.  A driver that has the symbol but not the call for this
 * device or this version answers v1's way. */
static nvmlReturn_t read_memory(const nvml_backend *nb, nvmlDevice_t dev, int64_t *total_mb, int64_t *used_mb) {
        nvmlReturn_t rc;
        if (nb->fn.get_memory_v2) {
                nvmlMemory_v2_t m2;
                memset(&m2, 0, sizeof(m2));
                m2.version = NVML_MEMORY_V2;
                rc = nb->fn.get_memory_v2(dev, &m2);
                if (rc == NVML_SUCCESS) {
                        *total_mb = (int64_t)(m2.total / MIB);
                        *used_mb = (int64_t)(m2.used / MIB);
                        return rc;
                }
                if (rc != NVML_ERROR_NOT_SUPPORTED && rc != NVML_ERROR_FUNCTION_NOT_FOUND &&
                    rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
                        return rc;
        }
        nvmlMemory_t mem;
        memset(&mem, 0, sizeof(mem));
        rc = nb->fn.get_memory(dev, &mem);
        if (rc == NVML_SUCCESS) {
                *total_mb = (int64_t)(mem.total / MIB);
                *used_mb = (int64_t)(mem.used / MIB);
        }
        return rc;
}

/* Ask NVML about whole GPU c: refresh the cache, fill o.  Stops at the
 * first failing call (a lost GPU tends to time out on every call). */
static void read_whole(nvml_backend *nb, nvml_dev *c, gp_gpu_info *o) {
        nvml_gpu *p = &nb->gpus[c->phys];
        nvmlDevice_t dev = NULL;
        char buf[NVML_STR_BUF];
        nvmlUtilization_t util;
        unsigned int v;
        nvmlReturn_t rc;

        rc = nb->fn.get_handle(c->phys, &dev);
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, "nvmlDeviceGetHandleByIndex_v2", rc);
                goto identity;
        }
        p->dev = dev;

        rc = get_text(nb->fn.get_name, dev, buf);
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, "nvmlDeviceGetName", rc);
                goto identity;
        }
        copy_text(c->name, sizeof(c->name), buf);
        gp_strlcpy(p->name, c->name, sizeof(p->name));

        rc = get_text(nb->fn.get_uuid, dev, buf);
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, "nvmlDeviceGetUUID", rc);
                goto identity;
        }
        copy_text(c->uuid, sizeof(c->uuid), buf);

        rc = read_memory(nb, dev, &c->total_mb, &c->used_mb);
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, "nvmlDeviceGetMemoryInfo", rc);
                goto identity;
        }
        p->board_mb = c->total_mb;

        memset(&util, 0, sizeof(util));
        rc = nb->fn.get_util(dev, &util);
        if (!optional_reading(nb, o, "nvmlDeviceGetUtilizationRates", rc, util.gpu, 100,
                              &o->util_pct))
                goto identity;

        v = 0;
        rc = nb->fn.get_temp(dev, NVML_TEMPERATURE_GPU, &v);
        if (!optional_reading(nb, o, "nvmlDeviceGetTemperature", rc, v, MAX_TEMP_C, &o->temp_c))
                goto identity;

        v = 0;
        rc = nb->fn.get_power(dev, &v);
        if (!optional_reading(nb, o, "nvmlDeviceGetPowerUsage", rc, v, INT_MAX, &o->power_mw))
                goto identity;

        read_diagnostics(nb, dev, dev, o);
        ecc_health(p, o);

identity:
        finish(p, c, o);
}

/* The parent's name and memory, once: a MIG instance's name needs them. */
static bool read_board(nvml_backend *nb, nvml_gpu *p, nvmlDevice_t board, gp_gpu_info *o) {
        char buf[NVML_STR_BUF];
        nvmlReturn_t rc;
        if (!p->name[0]) {
                rc = get_text(nb->fn.get_name, board, buf);
                if (rc != NVML_SUCCESS) {
                        mark_unhealthy(nb, o, "nvmlDeviceGetName", rc);
                        return false;
                }
                copy_text(p->name, sizeof(p->name), buf);
        }
        if (p->board_mb <= 0) {
                int64_t used_mb = 0;
                rc = read_memory(nb, board, &p->board_mb, &used_mb);
                if (rc != NVML_SUCCESS) {
                        mark_unhealthy(nb, o, "nvmlDeviceGetMemoryInfo", rc);
                        return false;
                }
        }
        return true;
}

/* Ask NVML about MIG instance c (the board's readings from its parent). */
static void read_mig(nvml_backend *nb, nvml_dev *c, gp_gpu_info *o) {
        nvml_gpu *p = &nb->gpus[c->phys];
        nvmlDevice_t board = NULL, dev = NULL;
        char buf[NVML_STR_BUF], uuid[GP_UUID_MAX], profile[32];
        nvmlDeviceAttributes_t at;
        nvmlUtilization_t util;
        unsigned int v;
        nvmlReturn_t rc;

        rc = nb->fn.get_handle(c->phys, &board);
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, "nvmlDeviceGetHandleByIndex_v2", rc);
                goto identity;
        }
        p->dev = board;
        if (!read_board(nb, p, board, o))
                goto identity;

        rc = nb->fn.get_mig_handle(board, (unsigned int)c->mig, &dev);
        if (rc == NVML_ERROR_NOT_FOUND) {
                o->healthy = false;
                snprintf(o->health_reason, sizeof(o->health_reason),
                         "MIG instance %d of GPU %u is gone (the MIG layout changed: restart gpupool to read it)",
                         c->mig, c->phys);
                goto identity;
        }
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, "nvmlDeviceGetMigDeviceHandleByIndex", rc);
                goto identity;
        }

        rc = get_text(nb->fn.get_uuid, dev, buf);
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, "nvmlDeviceGetUUID", rc);
                goto identity;
        }
        copy_text(uuid, sizeof(uuid), buf);
        if (c->uuid[0] && strcmp(uuid, c->uuid)) { /* NVML reuses handles: another instance now */
                o->healthy = false;
                snprintf(o->health_reason, sizeof(o->health_reason),
                         "MIG instance %d of GPU %u is now %.48s (the MIG layout changed: restart gpupool)",
                         c->mig % 100, c->phys % 10000, uuid);
                goto identity;
        }
        gp_strlcpy(c->uuid, uuid, sizeof(c->uuid));

        memset(&at, 0, sizeof(at));
        rc = nb->fn.get_attributes(dev, &at);
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, "nvmlDeviceGetAttributes_v2", rc);
                goto identity;
        }
        if (gp_gpu_mig_profile_name(at.gpuInstanceSliceCount, at.computeInstanceSliceCount, at.memorySizeMB,
                                    (uint64_t)p->board_mb, profile, sizeof(profile)) < 0)
                snprintf(profile, sizeof(profile), "%ug", at.gpuInstanceSliceCount % 1000);
        snprintf(c->name, sizeof(c->name), "%.95s MIG %.24s", p->name, profile);

        rc = read_memory(nb, dev, &c->total_mb, &c->used_mb);
        if (rc != NVML_SUCCESS) {
                mark_unhealthy(nb, o, "nvmlDeviceGetMemoryInfo", rc);
                goto identity;
        }

        memset(&util, 0, sizeof(util)); /* most drivers: NOT_SUPPORTED on a MIG handle */
        rc = nb->fn.get_util(dev, &util);
        if (!optional_reading(nb, o, "nvmlDeviceGetUtilizationRates", rc, util.gpu, 100, &o->util_pct))
                goto identity;

        v = 0;
        rc = nb->fn.get_temp(board, NVML_TEMPERATURE_GPU, &v);
        if (!optional_reading(nb, o, "nvmlDeviceGetTemperature", rc, v, MAX_TEMP_C, &o->temp_c))
                goto identity;

        read_diagnostics(nb, board, dev, o);
        ecc_health(p, o);

identity:
        finish(p, c, o);
}

static void read_one(nvml_backend *nb, unsigned int j, gp_gpu_info *o) {
        nvml_dev *c = &nb->devs[j];
        init_info(o, c->index);
        if (c->mig < 0)
                read_whole(nb, c, o);
        else
                read_mig(nb, c, o);
}

/* Take the Xid events waiting (never waits): count them on their GPU. */
static void take_events(nvml_backend *nb) {
        nvmlEventData_t e;
        for (int k = 0; nb->events && k < 1024; k++) {
                memset(&e, 0, sizeof(e));
                if (nb->fn.event_wait(nb->events, &e, 0) != NVML_SUCCESS)
                        return; /* NVML_ERROR_TIMEOUT: none left */
                if (!(e.eventType & NVML_EVENT_TYPE_XID_CRITICAL_ERROR))
                        continue;
                for (unsigned int i = 0; i < nb->n_phys; i++) {
                        nvml_gpu *c = &nb->gpus[i];
                        if (!c->dev || c->dev != e.device)
                                continue;
                        c->xids++;
                        c->last_xid = e.eventData <= INT_MAX ? (int)e.eventData : INT_MAX;
                        if (gp_gpu_xid_critical(c->last_xid))
                                c->fatal_xid = c->last_xid;
                }
        }
}

static int nvml_read(gp_gpu_backend *b, gp_gpu_info **ret, size_t *ret_n) {
        nvml_backend *nb = (nvml_backend *)b;
        gp_gpu_info *v = calloc(nb->n ? nb->n : 1, sizeof(*v));
        if (!v)
                return -ENOMEM;
        take_events(nb);
        for (unsigned int i = 0; i < nb->n; i++)
                read_one(nb, i, &v[i]);
        *ret = v;
        *ret_n = nb->n;
        return 0;
}

/* NVML's common-ancestor level onto gp_gpu_distance's 0..3. */
static int level_to_distance(nvmlGpuTopologyLevel_t level) {
        switch (level) {
        case NVML_TOPOLOGY_INTERNAL: return 0;   /* same board */
        case NVML_TOPOLOGY_SINGLE:               /* one PCIe switch */
        case NVML_TOPOLOGY_MULTIPLE: return 1;   /* several switches, no host bridge */
        case NVML_TOPOLOGY_HOSTBRIDGE:           /* same host bridge */
        case NVML_TOPOLOGY_NODE: return 2;       /* same CPU / NUMA node */
        case NVML_TOPOLOGY_SYSTEM: return 3;     /* across CPUs */
        default: return -EIO;
        }
}

static int nvml_distance(gp_gpu_backend *b, int a, int b_index, int *ret) {
        nvml_backend *nb = (nvml_backend *)b;
        nvmlDevice_t da = NULL, db = NULL;
        nvmlGpuTopologyLevel_t level = -1;

        if ((unsigned int)a >= nb->n || (unsigned int)b_index >= nb->n)
                return -EINVAL;
        if (!nb->fn.get_topo)
                return -ENOTSUP;
        unsigned int pa = nb->devs[a].phys, pb = nb->devs[b_index].phys;
        if (pa == pb) { /* one device, or two MIG instances of one board */
                *ret = 0;
                return 0;
        }
        if (nb->fn.get_handle(pa, &da) != NVML_SUCCESS || nb->fn.get_handle(pb, &db) != NVML_SUCCESS)
                return -EIO;
        nvmlReturn_t rc = nb->fn.get_topo(da, db, &level);
        if (rc == NVML_ERROR_NOT_SUPPORTED)
                return -ENOTSUP;
        if (rc != NVML_SUCCESS)
                return -EIO;
        int d = level_to_distance(level);
        if (d < 0)
                return d;
        *ret = d;
        return 0;
}

/* Which MIG slots of GPU i hold an instance: a bit each in *ret.  false
 * when the GPU is not in MIG mode (or MIG cannot be read: an old driver,
 * a GPU that does not answer), so it counts as a whole GPU. */
static bool mig_slots(nvml_backend *nb, unsigned int i, uint64_t *ret) {
        nvmlDevice_t dev = NULL, mdev;
        unsigned int cur = 0, pending = 0, max = 0;
        *ret = 0;
        if (!nb->fn.get_mig_mode || nb->fn.get_handle(i, &dev) != NVML_SUCCESS)
                return false;
        nb->gpus[i].dev = dev;
        /* NOT_SUPPORTED: a GPU without MIG; a pending mode waits for a GPU reset */
        if (nb->fn.get_mig_mode(dev, &cur, &pending) != NVML_SUCCESS || cur != NVML_DEVICE_MIG_ENABLE)
                return false;
        if (nb->fn.get_max_mig(dev, &max) != NVML_SUCCESS)
                max = 0;
        for (unsigned int k = 0; k < max && k < MAX_MIG_SLOTS; k++) {
                mdev = NULL;
                if (nb->fn.get_mig_handle(dev, k, &mdev) == NVML_SUCCESS && mdev) /* NOT_FOUND: a free slot */
                        *ret |= UINT64_C(1) << k;
        }
        if (!*ret) {
                char uuid[NVML_STR_BUF];
                if (get_text(nb->fn.get_uuid, dev, uuid) != NVML_SUCCESS)
                        uuid[0] = '\0';
                gp_warn("GPU %u (%.48s) is in MIG mode with no MIG instance: it offers no device until the operator "
                        "makes some (nvidia-smi mig -cgi PROFILES -C) and gpupool restarts (docs/isolation.md)",
                        i, uuid);
        }
        return true;
}

/* nb->devs: every whole GPU at NVML's index, then the MIG instances. */
static int list_devices(nvml_backend *nb, char *err, size_t errlen) {
        uint64_t *slots = calloc(nb->n_phys, sizeof(*slots));
        bool *mig = calloc(nb->n_phys, sizeof(*mig));
        size_t total = 0;
        int r = -ENOMEM;
        if (!slots || !mig)
                goto out;
        for (unsigned int i = 0; i < nb->n_phys; i++) {
                mig[i] = mig_slots(nb, i, &slots[i]);
                total += mig[i] ? (size_t)__builtin_popcountll(slots[i]) : 1;
        }
        r = -GP_ENOGPU;
        if (total > GP_GPU_MAX) {
                gp_gpu_set_err(err, errlen,
                               "NVML reports %zu devices (GPUs and MIG instances), more than the %d "
                               "supported",
                               total, GP_GPU_MAX);
                goto out;
        }
        r = -ENOMEM;
        nb->devs = calloc(total ? total : 1, sizeof(*nb->devs));
        if (!nb->devs)
                goto out;
        for (unsigned int i = 0; i < nb->n_phys; i++)
                if (!mig[i])
                        nb->devs[nb->n++] = (nvml_dev){.phys = i, .mig = -1, .index = (int)i};
        int next = (int)nb->n_phys; /* the first MIG instance's index */
        for (unsigned int i = 0; i < nb->n_phys; i++)
                for (int k = 0; mig[i] && k < MAX_MIG_SLOTS; k++)
                        if (slots[i] >> k & 1)
                                nb->devs[nb->n++] = (nvml_dev){.phys = i, .mig = k, .index = next++};
        r = 0;
out:
        free(slots);
        free(mig);
        return r;
}

static void nvml_close(gp_gpu_backend *b) {
        nvml_backend *nb = (nvml_backend *)b;
        if (nb->events)
                nb->fn.event_set_free(nb->events);
        nb->fn.shutdown();
        dlclose(nb->dl);
        free(nb->gpus);
        free(nb->devs);
        free(nb);
}

static const gp_gpu_ops nvml_ops = {
        .name = "nvml",
        .read = nvml_read,
        .distance = nvml_distance,
        .sim_set_load = NULL,
        .close = nvml_close,
};

/* Resolve one symbol into a function pointer field; a missing required
 * symbol fails the open. */
#define LOAD(field, sym, required)                                                           \
        do {                                                                                 \
                void *p_ = dlsym(dl, sym);                                                   \
                if (!p_ && (required)) {                                                     \
                        gp_gpu_set_err(err, errlen, "NVML library \"%s\" lacks %s", lib, sym); \
                        goto fail_dl;                                                        \
                }                                                                            \
                fn.field = (__typeof__(fn.field))p_;                                         \
        } while (0)

int gp_gpu_nvml_open(const gp_gpu_options *opt, gp_gpu_backend **ret, char *err, size_t errlen) {
        const char *lib = opt->nvml_library && opt->nvml_library[0] ? opt->nvml_library
                                                                      : DEFAULT_LIBRARY;
        nvml_fns fn;
        nvml_backend *nb = NULL;
        unsigned int n = 0;
        nvmlReturn_t rc;
        int r = -GP_ENOGPU;

        memset(&fn, 0, sizeof(fn));
        dlerror();
        void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!dl) {
                const char *why = dlerror();
                gp_gpu_set_err(err, errlen, "cannot load NVML library \"%s\": %s", lib,
                               why ? why : "dlopen failed");
                return -GP_ENOGPU;
        }
        LOAD(init, "nvmlInit_v2", true);
        LOAD(shutdown, "nvmlShutdown", true);
        LOAD(error_string, "nvmlErrorString", true);
        LOAD(get_count, "nvmlDeviceGetCount_v2", true);
        LOAD(get_handle, "nvmlDeviceGetHandleByIndex_v2", true);
        LOAD(get_name, "nvmlDeviceGetName", true);
        LOAD(get_uuid, "nvmlDeviceGetUUID", true);
        LOAD(get_memory, "nvmlDeviceGetMemoryInfo", true);
        LOAD(get_memory_v2, "nvmlDeviceGetMemoryInfo_v2", false);
        LOAD(get_util, "nvmlDeviceGetUtilizationRates", true);
        LOAD(get_temp, "nvmlDeviceGetTemperature", true);
        LOAD(get_power, "nvmlDeviceGetPowerUsage", true);
        LOAD(get_topo, "nvmlDeviceGetTopologyCommonAncestor", false);
        LOAD(get_clock, "nvmlDeviceGetClockInfo", false);
        LOAD(get_ecc, "nvmlDeviceGetTotalEccErrors", false);
        LOAD(get_throttle, "nvmlDeviceGetCurrentClocksThrottleReasons", false);
        LOAD(event_set_create, "nvmlEventSetCreate", false);
        LOAD(register_events, "nvmlDeviceRegisterEvents", false);
        LOAD(event_wait, "nvmlEventSetWait_v2", false);
        LOAD(event_set_free, "nvmlEventSetFree", false);
        LOAD(get_mig_mode, "nvmlDeviceGetMigMode", false);
        LOAD(get_max_mig, "nvmlDeviceGetMaxMigDeviceCount", false);
        LOAD(get_mig_handle, "nvmlDeviceGetMigDeviceHandleByIndex", false);
        LOAD(get_attributes, "nvmlDeviceGetAttributes_v2", false);
        if (!fn.get_mig_mode || !fn.get_max_mig || !fn.get_mig_handle || !fn.get_attributes)
                fn.get_mig_mode = NULL; /* an old driver: no MIG */
        LOAD(get_procs, "nvmlDeviceGetComputeRunningProcesses_v3", false);
        if (!fn.get_procs)
                LOAD(get_procs, "nvmlDeviceGetComputeRunningProcesses_v2", false);

        rc = fn.init();
        if (rc != NVML_SUCCESS) {
                const char *s = fn.error_string(rc);
                gp_gpu_set_err(err, errlen, "nvmlInit_v2 failed: %.80s (%d)", s ? s : "?", rc);
                goto fail_dl;
        }
        rc = fn.get_count(&n);
        if (rc != NVML_SUCCESS) {
                const char *s = fn.error_string(rc);
                gp_gpu_set_err(err, errlen, "nvmlDeviceGetCount_v2 failed: %.80s (%d)", s ? s : "?",
                               rc);
                goto fail_init;
        }
        if (n == 0) {
                gp_gpu_set_err(err, errlen, "NVML reports no GPU");
                goto fail_init;
        }
        if (n > GP_GPU_MAX) {
                gp_gpu_set_err(err, errlen, "NVML reports %u GPUs, more than the %d supported", n,
                               GP_GPU_MAX);
                goto fail_init;
        }

        r = -ENOMEM;
        nb = calloc(1, sizeof(*nb));
        if (!nb)
                goto fail_init;
        nb->gpus = calloc(n, sizeof(*nb->gpus));
        if (!nb->gpus)
                goto fail_nb;
        nb->base.ops = &nvml_ops;
        nb->dl = dl;
        nb->fn = fn;
        nb->n_phys = n;
        for (unsigned int i = 0; i < n; i++)
                nb->gpus[i].ecc_base = -1;
        if ((r = list_devices(nb, err, errlen)) < 0)
                goto fail_gpus;

        /* Learn every device's identity now, so one lost later keeps it. */
        for (unsigned int j = 0; j < nb->n; j++) {
                static __thread gp_gpu_info scratch;
                read_one(nb, j, &scratch);
        }
        /* Xid events, where the driver has them (a GPU may refuse: it then counts none) */
        if (fn.event_set_create && fn.register_events && fn.event_wait && fn.event_set_free &&
            fn.event_set_create(&nb->events) == NVML_SUCCESS) {
                bool any = false;
                for (unsigned int i = 0; i < n; i++) {
                        nvml_gpu *c = &nb->gpus[i];
                        c->events = c->dev && fn.register_events(c->dev, NVML_EVENT_TYPE_XID_CRITICAL_ERROR,
                                                                 nb->events) == NVML_SUCCESS;
                        any = any || c->events;
                }
                if (!any) {
                        fn.event_set_free(nb->events);
                        nb->events = NULL;
                }
        }
        *ret = &nb->base;
        return 0;

fail_gpus:
        free(nb->gpus);
fail_nb:
        free(nb);
fail_init:
        fn.shutdown();
fail_dl:
        dlclose(dl);
        return r;
}
