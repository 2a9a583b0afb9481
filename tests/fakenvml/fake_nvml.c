/* fake_nvml.c - a stand-in libnvidia-ml.so.1 for the test suite.
 *
 * It exports the NVML entry points gpupool uses, with NVML's C ABI
 * (nvmlReturn_t an int-sized enum, nvmlDevice_t an opaque pointer, the
 * same structs, error codes and enum values), and behaves like NVML where
 * gpupool could tell the difference:
 *   - every call but nvmlInit* and nvmlErrorString returns
 *     NVML_ERROR_UNINITIALIZED (1) until nvmlInit succeeds, and again after
 *     the matching nvmlShutdown (init is reference counted, like NVML's);
 *   - NULL outputs, bad indices and foreign handles give
 *     NVML_ERROR_INVALID_ARGUMENT (2); a string buffer too small for the
 *     answer gives NVML_ERROR_INSUFFICIENT_SIZE (7), nothing is written;
 *   - an unsupported reading gives NVML_ERROR_NOT_SUPPORTED (3);
 *   - it is thread-safe (one mutex).
 * Built twice by mk/gpu.mk: normally, and with -DFAKE_NVML_NO_TOPOLOGY
 * (no nvmlDeviceGetTopologyCommonAncestor symbol, like an old driver).
 *
 * The GPUs are scripted by the file named in the environment variable
 * FAKE_NVML_CONFIG.  The first nvmlInit (reference count 0 -> 1) reads it;
 * nothing is re-read until the count has dropped back to 0.  No file, an
 * unreadable file or FAKE_NVML_CONFIG unset: nvmlInit returns
 * NVML_ERROR_DRIVER_NOT_LOADED (9), as on a machine without the driver.
 * A malformed file: nvmlInit prints "fake_nvml: FILE:LINE: why" to stderr
 * and returns NVML_ERROR_UNKNOWN (999).
 *
 * Script format: one directive per line; blank lines and lines starting
 * with '#' are ignored; a value may be double-quoted (\" and \\ escape).
 *
 *   init=CODE
 *       nvmlInit returns NVML error CODE (e.g. 9) instead of succeeding.
 *
 *   gpu KEY=VALUE...
 *       One GPU; GPUs get indices 0, 1, ... in file order (at most 64).
 *       name="..."         default "NVIDIA Fake GPU" (at most 95 bytes)
 *       uuid=GPU-...        default GPU-00000000-0000-0000-0000-<index, 12 digits>
 *       mem_total_mb=N      default 16384 (nvmlMemory_t is in bytes: N MiB)
 *       mem_used_mb=N       default 0, at most mem_total_mb: memory in use that
 *                           no listed process holds (a process NVML does not
 *                           list: another PID namespace's, graphics); the
 *                           device's used is this plus its listed processes'
 *       mem_reserved_mb=N   the driver's own reservation, default 0: counted in
 *                           nvmlDeviceGetMemoryInfo's used, apart in _v2's (as
 *                           R510 on; _v2 checks its struct's version)
 *       util=N|na           GPU utilisation percent, default 0; na: NOT_SUPPORTED
 *       mem_util=N          memory utilisation percent, default 0
 *       temp=N|na           degrees C, default 40
 *       power_mw=N|na       milliwatts, default 50000
 *       sm_clock=N|na       SM clock MHz, default 1410
 *       mem_clock=N|na      memory clock MHz, default 1215
 *       ecc_corrected=N|na  volatile corrected ECC errors, default 0
 *       ecc_uncorrected=N|na  volatile uncorrected ECC errors, default 0
 *       throttle=N|na       clocks-throttle-reason bits (decimal), default 0
 *       fail=none|all|LIST  calls that fail for this GPU; LIST is a comma list
 *                           of handle,name,uuid,memory,util,temp,power,topo,
 *                           clock,ecc,throttle,procs,events,mig,memory_v2
 *                           (events: the GPU refuses nvmlDeviceRegisterEvents;
 *                           mig: the MIG calls, nvmlDeviceGetMigMode and the
 *                           rest; memory fails both memory calls, memory_v2
 *                           nvmlDeviceGetMemoryInfo_v2 alone, as a driver
 *                           without it answers, with fail_code=13);
 *                           all = every per-device call (handle included)
 *       fail_code=N         what a failing call returns, default 15
 *                           (NVML_ERROR_GPU_IS_LOST)
 *       fail_after=N        a failing call first succeeds N times (counted
 *                           per GPU and per call), default 0
 *       topo_group=N        default 0; see topology below
 *       xid=N[,N...]        Xid events the GPU raises (at most 16): each is
 *                           delivered once by nvmlEventSetWait_v2 to a set
 *                           this GPU is registered in (nvmlDeviceRegisterEvents
 *                           with nvmlEventTypeXidCriticalError, 0x8); with
 *                           "live", a new list raises its Xids again
 *       procs=none|env      the GPU's compute processes
 *                           (nvmlDeviceGetComputeRunningProcesses_v3/_v2):
 *                           none (default), or env: every live process of
 *                           this machine whose environment has
 *                           FAKE_NVML_GPU_MB=N and whose CUDA_VISIBLE_DEVICES
 *                           names this GPU's index, using N MiB on it, as a
 *                           CUDA program allocating N MiB on each GPU it sees
 *                           (on a MIG instance's handle: the processes whose
 *                           CUDA_VISIBLE_DEVICES names its MIG-... uuid)
 *       procs_tag=T         procs=env lists only processes whose environment also
 *                           has FAKE_NVML_TAG=T (a test's own, not those of
 *                           tests run beside it on the same machine)
 *       pid_offset=N        procs=env's processes are listed as PID + N (default
 *                           0): as a driver names them from another PID
 *                           namespace (the host's, seen from a container)
 *       foreign_mb=N        one more compute process, pid 1 (never a task's),
 *                           using N MiB: a process outside gpupool, such as
 *                           another user's job; default 0 (none)
 *       mig=off|on|LIST     MIG (Multi-Instance GPU).  Without it the GPU
 *                           cannot do MIG: nvmlDeviceGetMigMode and the other
 *                           MIG calls answer NOT_SUPPORTED.  off: capable, MIG
 *                           mode disabled; on: enabled, no instance yet; LIST:
 *                           enabled with these MIG devices in slots 0, 1, ...
 *                           (at most 7, nvmlDeviceGetMaxMigDeviceCount), a
 *                           comma list of profiles G"g."N"gb" or C"c."G"g."N"gb"
 *                           (a compute instance of C of the GPU instance's G
 *                           slices), or "-" for a free slot (NOT_FOUND).  An
 *                           instance has N*1024*96/100 MiB (nvmlDeviceGetMemoryInfo
 *                           and nvmlDeviceGetAttributes_v2's memorySizeMB, so
 *                           NVML's naming rule gives N back when N GB is a
 *                           multiple of an eighth of the board), the uuid
 *                           MIG-<the GPU's uuid less "GPU-", its third group
 *                           SSGC: the slot 01..07, the GPU and compute
 *                           instance's slices> (a new layout, new uuids), and
 *                           answers what a MIG handle
 *                           answers: its uuid, name ("<GPU's name> MIG
 *                           <profile>"), memory, attributes and processes;
 *                           utilisation, temperature, power, clocks, ECC,
 *                           throttle, topology and events are NOT_SUPPORTED
 *                           (the board's are read on the GPU's handle).  The
 *                           GPU's fail= also fails its instances' calls.
 *                           Built with -DFAKE_NVML_NO_MIG, the library has no
 *                           MIG symbol at all (an old driver).
 *
 *   live
 *       Readings follow the file: when its modification time changed,
 *       nvmlDeviceGetHandleByIndex(0, ...) reads it again and takes the new
 *       readings (and failures) of every GPU, as a real GPU's change while
 *       the driver is loaded; a new file that does not parse or has another
 *       number of GPUs is ignored (the old readings stay).
 *
 *   topo A B LEVEL
 *       nvmlDeviceGetTopologyCommonAncestor(A, B) (either order) gives LEVEL:
 *       INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM or its number.
 *       Without a topo line: same device INTERNAL, same topo_group SINGLE,
 *       different groups SYSTEM.
 *
 * Example:
 *   gpu name="NVIDIA A100-SXM4-80GB" mem_total_mb=81920 mem_used_mb=1000 util=37 temp=55 power_mw=210000
 *   gpu name="NVIDIA A100-SXM4-80GB" fail=memory topo_group=1
 *   topo 0 1 HOSTBRIDGE
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define API __attribute__((visibility("default")))

/* --- NVML ABI */
typedef enum nvmlReturn_enum {
        NVML_SUCCESS = 0,
        NVML_ERROR_UNINITIALIZED = 1,
        NVML_ERROR_INVALID_ARGUMENT = 2,
        NVML_ERROR_NOT_SUPPORTED = 3,
        NVML_ERROR_NO_PERMISSION = 4,
        NVML_ERROR_ALREADY_INITIALIZED = 5,
        NVML_ERROR_NOT_FOUND = 6,
        NVML_ERROR_INSUFFICIENT_SIZE = 7,
        NVML_ERROR_INSUFFICIENT_POWER = 8,
        NVML_ERROR_DRIVER_NOT_LOADED = 9,
        NVML_ERROR_TIMEOUT = 10,
        NVML_ERROR_IRQ_ISSUE = 11,
        NVML_ERROR_LIBRARY_NOT_FOUND = 12,
        NVML_ERROR_FUNCTION_NOT_FOUND = 13,
        NVML_ERROR_CORRUPTED_INFOROM = 14,
        NVML_ERROR_GPU_IS_LOST = 15,
        NVML_ERROR_RESET_REQUIRED = 16,
        NVML_ERROR_OPERATING_SYSTEM = 17,
        NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
        NVML_ERROR_IN_USE = 19,
        NVML_ERROR_MEMORY = 20,
        NVML_ERROR_NO_DATA = 21,
        NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
        NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
        NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
        NVML_ERROR_DEPRECATED = 26,
        NVML_ERROR_NOT_READY = 27,
        NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlMemory_st {
        unsigned long long total;
        unsigned long long free;
        unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlUtilization_st {
        unsigned int gpu;
        unsigned int memory;
} nvmlUtilization_t;

typedef enum nvmlTemperatureSensors_enum {
        NVML_TEMPERATURE_GPU = 0,
        NVML_TEMPERATURE_COUNT,
} nvmlTemperatureSensors_t;

typedef enum nvmlGpuLevel_enum {
        NVML_TOPOLOGY_INTERNAL = 0,
        NVML_TOPOLOGY_SINGLE = 10,
        NVML_TOPOLOGY_MULTIPLE = 20,
        NVML_TOPOLOGY_HOSTBRIDGE = 30,
        NVML_TOPOLOGY_NODE = 40,
        NVML_TOPOLOGY_SYSTEM = 50,
} nvmlGpuTopologyLevel_t;
/* --- end of NVML ABI */

#define MAX_GPUS 64
#define MAX_TEXT 96            /* NVML's *_V2_BUFFER_SIZE: 95 bytes + NUL */
#define MAX_LINE 4096
#define MAX_TOPO 256
#define MIB (1024ULL * 1024ULL)
#define MAX_MIG 7              /* MIG devices per GPU (A100, H100) */

enum call { C_HANDLE, C_NAME, C_UUID, C_MEMORY, C_UTIL, C_TEMP, C_POWER, C_TOPO, C_CLOCK, C_ECC,
             C_THROTTLE, C_PROCS, C_EVENTS, C_MIG, C_MEMORY_V2, C_COUNT };
static const char *const call_names[C_COUNT] = {"handle", "name", "uuid",  "memory", "util",    "temp",
                                                "power",  "topo", "clock", "ecc",    "throttle", "procs", "events", "mig", "memory_v2"};

struct fake_mig {
        bool present;                          /* a MIG device in this slot (else NOT_FOUND) */
        unsigned gi, ci;                       /* GPU / compute instance slices */
        unsigned long long gb;                 /* the profile's memory, GB */
        unsigned long long mem_mb;             /* what it has */
        char uuid[MAX_TEXT];
        char profile[32];                      /* as scripted */
};

struct fake_gpu {
        char name[MAX_TEXT];
        char uuid[MAX_TEXT];
        unsigned long long total_mb, used_mb;
        unsigned long long reserved_mb;        /* the driver's own: v1's used counts it, v2's does not */
        long util, mem_util, temp, power_mw;   /* -1: NOT_SUPPORTED */
        long sm_clock, mem_clock;              /* MHz, -1: NOT_SUPPORTED */
        long long ecc_corr, ecc_uncorr;        /* -1: NOT_SUPPORTED */
        long long throttle;                    /* reason bits, -1: NOT_SUPPORTED */
        unsigned fail_mask;                    /* 1 << enum call */
        nvmlReturn_t fail_code;
        unsigned long fail_after;
        unsigned long calls[C_COUNT];          /* calls answered so far, per call */
        long topo_group;
        bool procs_env;                        /* procs=env */
        unsigned long long pid_offset;         /* added to their PIDs */
        char procs_tag[32];                    /* procs_tag=: only processes with FAKE_NVML_TAG=it */
        unsigned long long foreign_mb;         /* foreign_mb=N: pid 1 uses N MiB */
        unsigned long long xid[16];            /* xid=: raised, not yet delivered */
        unsigned n_xid;
        bool registered;                       /* in the event set */
        int mig_mode;                          /* -1: no MIG (NOT_SUPPORTED), 0 off, 1 on */
        struct fake_mig migs[MAX_MIG];         /* slots 0..n_mig-1 scripted */
        unsigned n_mig;
};

struct topo_rule {
        unsigned a, b;
        nvmlGpuTopologyLevel_t level;
        unsigned line;                         /* in the script, for messages */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned refcount;                      /* nvmlInit minus nvmlShutdown */
static struct fake_gpu gpus[MAX_GPUS];
static unsigned n_gpus;
static struct topo_rule topo[MAX_TOPO];
static unsigned n_topo;
static bool live;                              /* the script said "live" */
static char the_set;                           /* the one event set: its address is the handle */
static bool set_made;
static struct timespec script_mtime;           /* of the script as last read */

/* ---- script parsing ---- */

struct parse {
        const char *file;
        unsigned line;
};

static bool perr(const struct parse *p, const char *what, const char *arg) {
        fprintf(stderr, "fake_nvml: %s:%u: %s%s%s\n", p->file, p->line, what, arg ? ": " : "",
                arg ? arg : "");
        return false;
}

static bool parse_ull(const char *s, unsigned long long max, unsigned long long *ret) {
        if (!s || *s < '0' || *s > '9')
                return false;
        errno = 0;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (*end || errno || v > max)
                return false;
        *ret = v;
        return true;
}

/* Next token of a line: KEY=VALUE or a word, VALUE possibly quoted.  The
 * token is unquoted in place; *pos moves past it.  NULL at end of line. */
static char *next_token(char **pos, bool *bad) {
        char *s = *pos;
        while (*s == ' ' || *s == '\t')
                s++;
        if (!*s)
                return NULL;
        char *tok = s, *w = s;
        bool quoted = false;
        for (;;) {
                char c = *s;
                if (!c) {
                        if (quoted)
                                *bad = true;
                        break;
                }
                if (!quoted && (c == ' ' || c == '\t')) {
                        s++;
                        break;
                }
                if (c == '"') {
                        quoted = !quoted;
                        s++;
                        continue;
                }
                if (quoted && c == '\\' && (s[1] == '"' || s[1] == '\\')) {
                        *w++ = s[1];
                        s += 2;
                        continue;
                }
                *w++ = c;
                s++;
        }
        *w = '\0';
        *pos = s;
        return tok;
}

static bool parse_level(const char *s, nvmlGpuTopologyLevel_t *ret) {
        static const struct {
                const char *name;
                nvmlGpuTopologyLevel_t level;
        } names[] = {{"INTERNAL", NVML_TOPOLOGY_INTERNAL},     {"SINGLE", NVML_TOPOLOGY_SINGLE},
                     {"MULTIPLE", NVML_TOPOLOGY_MULTIPLE},     {"HOSTBRIDGE", NVML_TOPOLOGY_HOSTBRIDGE},
                     {"NODE", NVML_TOPOLOGY_NODE},             {"SYSTEM", NVML_TOPOLOGY_SYSTEM}};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                if (strcmp(s, names[i].name) == 0) {
                        *ret = names[i].level;
                        return true;
                }
        }
        unsigned long long v;
        if (!parse_ull(s, 1000, &v))
                return false;
        *ret = (nvmlGpuTopologyLevel_t)v;
        return true;
}

/* A reading: a number up to max, or "na" for NOT_SUPPORTED (-1). */
static bool parse_reading(const char *s, unsigned long long max, long *ret) {
        unsigned long long v;
        if (strcmp(s, "na") == 0) {
                *ret = -1;
                return true;
        }
        if (!parse_ull(s, max, &v))
                return false;
        *ret = (long)v;
        return true;
}

static bool parse_fail(char *s, unsigned *ret) {
        unsigned mask = 0;
        if (strcmp(s, "none") == 0) {
                *ret = 0;
                return true;
        }
        if (strcmp(s, "all") == 0) {
                *ret = (1u << C_COUNT) - 1;
                return true;
        }
        for (char *save = NULL, *w = strtok_r(s, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
                int k = -1;
                for (int i = 0; i < C_COUNT; i++)
                        if (strcmp(w, call_names[i]) == 0)
                                k = i;
                if (k < 0)
                        return false;
                mask |= 1u << k;
        }
        *ret = mask;
        return mask != 0;
}

/* mig=off|on|PROFILE,... (see the top of the file) */
static bool parse_mig(char *val, struct fake_gpu *g) {
        g->n_mig = 0;
        if (!strcmp(val, "off") || !strcmp(val, "on")) {
                g->mig_mode = val[1] == 'n';
                return true;
        }
        g->mig_mode = 1;
        for (char *save = NULL, *w = strtok_r(val, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
                if (g->n_mig >= MAX_MIG)
                        return false;
                struct fake_mig *m = &g->migs[g->n_mig++];
                memset(m, 0, sizeof(*m));
                if (!strcmp(w, "-"))
                        continue;
                unsigned c = 0, gi = 0;
                unsigned long long gb = 0;
                int used = 0;
                if (sscanf(w, "%uc.%ug.%llugb%n", &c, &gi, &gb, &used) == 3 && !w[used]) {
                        /* a compute instance smaller than its GPU instance */
                } else if (used = 0, sscanf(w, "%ug.%llugb%n", &gi, &gb, &used) == 2 && !w[used]) {
                        c = gi;
                } else {
                        return false;
                }
                if (gi < 1 || gi > 7 || c < 1 || c > gi || gb < 1 || gb > 1024 || strlen(w) >= sizeof(m->profile))
                        return false;
                m->present = true;
                m->gi = gi;
                m->ci = c;
                m->gb = gb;
                memcpy(m->profile, w, strlen(w) + 1);
        }
        return g->n_mig > 0;
}

static bool parse_gpu(const struct parse *p, char *pos) {
        if (n_gpus >= MAX_GPUS)
                return perr(p, "too many GPUs", NULL);
        struct fake_gpu *g = &gpus[n_gpus];
        unsigned long long v;
        bool bad = false;
        char *tok;

        memset(g, 0, sizeof(*g));
        snprintf(g->name, sizeof(g->name), "NVIDIA Fake GPU");
        snprintf(g->uuid, sizeof(g->uuid), "GPU-00000000-0000-0000-0000-%012u", n_gpus);
        g->total_mb = 16384;
        g->temp = 40;
        g->power_mw = 50000;
        g->sm_clock = 1410;
        g->mem_clock = 1215;
        g->fail_code = NVML_ERROR_GPU_IS_LOST;
        g->mig_mode = -1;

        while ((tok = next_token(&pos, &bad))) {
                char *val = strchr(tok, '=');
                if (bad)
                        return perr(p, "unterminated quote", tok);
                if (!val)
                        return perr(p, "want KEY=VALUE", tok);
                *val++ = '\0';
                bool ok = true;
                if (strcmp(tok, "name") == 0 || strcmp(tok, "uuid") == 0) {
                        char *dst = tok[0] == 'n' ? g->name : g->uuid;
                        ok = strlen(val) < MAX_TEXT;
                        if (ok)
                                memcpy(dst, val, strlen(val) + 1);
                } else if (strcmp(tok, "mem_total_mb") == 0) {
                        ok = parse_ull(val, 1ULL << 30, &g->total_mb);
                } else if (strcmp(tok, "mem_used_mb") == 0) {
                        ok = parse_ull(val, 1ULL << 30, &g->used_mb);
                } else if (strcmp(tok, "mem_reserved_mb") == 0) {
                        ok = parse_ull(val, 1ULL << 30, &g->reserved_mb);
                } else if (strcmp(tok, "util") == 0) {
                        ok = parse_reading(val, 100, &g->util);
                } else if (strcmp(tok, "mem_util") == 0) {
                        ok = parse_reading(val, 100, &g->mem_util) && g->mem_util >= 0;
                } else if (strcmp(tok, "temp") == 0) {
                        ok = parse_reading(val, 200, &g->temp);
                } else if (strcmp(tok, "power_mw") == 0) {
                        ok = parse_reading(val, 10000000, &g->power_mw);
                } else if (strcmp(tok, "sm_clock") == 0) {
                        ok = parse_reading(val, 100000, &g->sm_clock);
                } else if (strcmp(tok, "mem_clock") == 0) {
                        ok = parse_reading(val, 100000, &g->mem_clock);
                } else if (strcmp(tok, "ecc_corrected") == 0 || strcmp(tok, "ecc_uncorrected") == 0 ||
                           strcmp(tok, "throttle") == 0) {
                        long x;
                        ok = parse_reading(val, 1000000000, &x);
                        if (ok && tok[0] == 't')
                                g->throttle = x;
                        else if (ok && tok[4] == 'c')
                                g->ecc_corr = x;
                        else if (ok)
                                g->ecc_uncorr = x;
                } else if (strcmp(tok, "fail") == 0) {
                        ok = parse_fail(val, &g->fail_mask);
                } else if (strcmp(tok, "fail_code") == 0) {
                        ok = parse_ull(val, 999, &v) && v != 0;
                        g->fail_code = (nvmlReturn_t)v;
                } else if (strcmp(tok, "fail_after") == 0) {
                        ok = parse_ull(val, 1000000, &v);
                        g->fail_after = (unsigned long)v;
                } else if (strcmp(tok, "xid") == 0) {
                        for (char *q = val; ok && *q;) {
                                char *end = strchr(q, ',');
                                if (end)
                                        *end = '\0';
                                ok = g->n_xid < 16 && parse_ull(q, 1000000, &g->xid[g->n_xid]);
                                g->n_xid++;
                                q = end ? end + 1 : q + strlen(q);
                        }
                } else if (strcmp(tok, "mig") == 0) {
                        ok = parse_mig(val, g);
                } else if (strcmp(tok, "procs") == 0) {
                        ok = strcmp(val, "none") == 0 || strcmp(val, "env") == 0;
                        g->procs_env = strcmp(val, "env") == 0;
                } else if (strcmp(tok, "procs_tag") == 0) {
                        ok = strlen(val) > 0 && strlen(val) < sizeof(g->procs_tag);
                        if (ok)
                                memcpy(g->procs_tag, val, strlen(val) + 1);
                } else if (strcmp(tok, "pid_offset") == 0) {
                        ok = parse_ull(val, 1ULL << 30, &g->pid_offset);
                } else if (strcmp(tok, "foreign_mb") == 0) {
                        ok = parse_ull(val, 1ULL << 30, &g->foreign_mb);
                } else if (strcmp(tok, "topo_group") == 0) {
                        ok = parse_ull(val, 1000000, &v);
                        g->topo_group = (long)v;
                } else {
                        return perr(p, "unknown key", tok);
                }
                if (!ok)
                        return perr(p, "bad value for", tok);
        }
        if (g->used_mb > g->total_mb || g->reserved_mb > g->total_mb - g->used_mb)
                return perr(p, "mem_used_mb + mem_reserved_mb above mem_total_mb", NULL);
        unsigned long long sum = 0;
        for (unsigned k = 0; k < g->n_mig; k++) {
                struct fake_mig *m = &g->migs[k];
                if (!m->present)
                        continue;
                m->mem_mb = m->gb * 1024 * 96 / 100;
                sum += m->mem_mb;
                /* MIG-<the GPU's uuid less GPU->, its third group the slot> */
                if (strlen(g->uuid) == 40 && !strncmp(g->uuid, "GPU-", 4))
                        snprintf(m->uuid, sizeof(m->uuid), "MIG-%.9s%02u%u%u%s", g->uuid + 4, k + 1, m->gi, m->ci,
                                 g->uuid + 17);
                else
                        snprintf(m->uuid, sizeof(m->uuid), "MIG-%08x-%02u%u%u-4000-8000-%012u", n_gpus, k + 1, m->gi,
                                 m->ci, n_gpus);
        }
        if (sum > g->total_mb)
                return perr(p, "the MIG instances have more memory than the GPU", NULL);
        n_gpus++;
        return true;
}

static bool parse_topo(const struct parse *p, char *pos) {
        bool bad = false;
        char *a = next_token(&pos, &bad), *b = next_token(&pos, &bad);
        char *l = next_token(&pos, &bad), *extra = next_token(&pos, &bad);
        unsigned long long ia, ib;
        struct topo_rule r;

        if (bad || !a || !b || !l || extra)
                return perr(p, "want: topo A B LEVEL", NULL);
        if (!parse_ull(a, MAX_GPUS - 1, &ia) || !parse_ull(b, MAX_GPUS - 1, &ib))
                return perr(p, "bad GPU index", NULL);
        if (!parse_level(l, &r.level))
                return perr(p, "bad level", l);
        if (n_topo >= MAX_TOPO)
                return perr(p, "too many topo lines", NULL);
        r.a = (unsigned)ia;
        r.b = (unsigned)ib;
        r.line = p->line;
        topo[n_topo++] = r;
        return true;
}

/* Read the script into the globals.  Returns what nvmlInit should say. */
static nvmlReturn_t load_script(void) {
        const char *path = getenv("FAKE_NVML_CONFIG");
        struct parse p = {.file = path, .line = 0};
        nvmlReturn_t init_rc = NVML_SUCCESS;
        char line[MAX_LINE + 2];
        bool ok = true;

        n_gpus = 0;
        n_topo = 0;
        live = false;
        if (!path || !*path)
                return NVML_ERROR_DRIVER_NOT_LOADED;
        FILE *f = fopen(path, "r");
        if (!f)
                return NVML_ERROR_DRIVER_NOT_LOADED;
        struct stat st;
        if (fstat(fileno(f), &st) == 0)
                script_mtime = st.st_mtim;
        while (ok && fgets(line, sizeof(line), f)) {
                p.line++;
                size_t len = strlen(line);
                if (len > 0 && line[len - 1] == '\n')
                        line[--len] = '\0';
                else if (!feof(f))
                        ok = perr(&p, "line too long", NULL);
                if (!ok)
                        break;
                char *s = line;
                while (*s == ' ' || *s == '\t')
                        s++;
                if (!*s || *s == '#')
                        continue;
                if (strncmp(s, "gpu", 3) == 0 && (s[3] == ' ' || s[3] == '\t' || !s[3])) {
                        ok = parse_gpu(&p, s + 3);
                } else if (strncmp(s, "topo", 4) == 0 && (s[4] == ' ' || s[4] == '\t')) {
                        ok = parse_topo(&p, s + 4);
                } else if (strcmp(s, "live") == 0) {
                        live = true;
                } else if (strncmp(s, "init=", 5) == 0) {
                        unsigned long long v;
                        ok = parse_ull(s + 5, 999, &v) || perr(&p, "bad init code", s + 5);
                        if (ok)
                                init_rc = (nvmlReturn_t)v;
                } else {
                        ok = perr(&p, "unknown directive", s);
                }
        }
        fclose(f);
        if (ok) {
                for (unsigned i = 0; i < n_topo; i++) {
                        if (topo[i].a >= n_gpus || topo[i].b >= n_gpus) {
                                p.line = topo[i].line;
                                ok = perr(&p, "topo names a GPU that does not exist", NULL);
                        }
                }
        }
        if (!ok) {
                n_gpus = n_topo = 0;
                return NVML_ERROR_UNKNOWN;
        }
        if (init_rc != NVML_SUCCESS)
                n_gpus = n_topo = 0;
        return init_rc;
}

/* ---- the API ---- */

/* The GPU behind a handle, or NULL if it is not one of ours. */
static struct fake_gpu *gpu_of(nvmlDevice_t dev) {
        uintptr_t p = (uintptr_t)dev, base = (uintptr_t)gpus;
        if (p < base || p >= base + n_gpus * sizeof(gpus[0]) || (p - base) % sizeof(gpus[0]))
                return NULL;
        return &gpus[(p - base) / sizeof(gpus[0])];
}

/* The MIG device behind a handle (its GPU into *ret_g), or NULL if it is
 * none of ours or its slot is free now (a stale handle). */
static struct fake_mig *mig_of(nvmlDevice_t dev, struct fake_gpu **ret_g) {
        uintptr_t p = (uintptr_t)dev;
        for (unsigned i = 0; i < n_gpus; i++) {
                uintptr_t base = (uintptr_t)gpus[i].migs;
                if (p < base || p >= base + sizeof(gpus[i].migs) || (p - base) % sizeof(gpus[i].migs[0]))
                        continue;
                struct fake_mig *m = &gpus[i].migs[(p - base) / sizeof(gpus[i].migs[0])];
                if (!m->present || gpus[i].mig_mode != 1)
                        return NULL;
                *ret_g = &gpus[i];
                return m;
        }
        return NULL;
}

/* Count a call to `c` on g; the scripted error once it is due. */
static nvmlReturn_t scripted(struct fake_gpu *g, enum call c) {
        g->calls[c]++;
        if ((g->fail_mask & (1u << c)) && g->calls[c] > g->fail_after)
                return g->fail_code;
        return NVML_SUCCESS;
}

/* Every device query starts with this: lock, check init and handle.  A
 * MIG device's handle gives its GPU in g and itself in mig_ (else NULL). */
#define DEVICE_CALL(dev, g, c)                                                                   \
        struct fake_gpu *g = NULL;                                                               \
        struct fake_mig *mig_ __attribute__((unused)) = NULL;                                    \
        nvmlReturn_t rc_;                                                                        \
        pthread_mutex_lock(&mu);                                                                 \
        if (!refcount) {                                                                         \
                rc_ = NVML_ERROR_UNINITIALIZED;                                                  \
                goto out;                                                                        \
        }                                                                                        \
        g = gpu_of(dev);                                                                         \
        if (!g && !(mig_ = mig_of(dev, &g))) {                                                   \
                rc_ = NVML_ERROR_INVALID_ARGUMENT;                                               \
                goto out;                                                                        \
        }                                                                                        \
        rc_ = scripted(g, c);                                                                    \
        if (rc_ != NVML_SUCCESS)                                                                 \
                goto out

/* A reading of the board: NOT_SUPPORTED on a MIG device's handle. */
#define BOARD_ONLY                                                                               \
        if (mig_) {                                                                              \
                rc_ = NVML_ERROR_NOT_SUPPORTED;                                                  \
                goto out;                                                                        \
        }

#define DEVICE_END                                                                               \
out:                                                                                             \
        pthread_mutex_unlock(&mu);                                                               \
        return rc_

static nvmlReturn_t do_init(void) {
        nvmlReturn_t rc = NVML_SUCCESS;
        pthread_mutex_lock(&mu);
        if (refcount == 0) {
                memset(gpus, 0, sizeof(gpus));
                set_made = false; /* NVML frees what a shutdown left */
                rc = load_script();
        }
        if (rc == NVML_SUCCESS)
                refcount++;
        pthread_mutex_unlock(&mu);
        return rc;
}

API nvmlReturn_t nvmlInit_v2(void) {
        return do_init();
}

API nvmlReturn_t nvmlInit(void) {
        return do_init();
}

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
        (void)flags;
        return do_init();
}

API nvmlReturn_t nvmlShutdown(void) {
        nvmlReturn_t rc = NVML_SUCCESS;
        pthread_mutex_lock(&mu);
        if (refcount == 0)
                rc = NVML_ERROR_UNINITIALIZED;
        else if (--refcount == 0)
                n_gpus = n_topo = 0;
        pthread_mutex_unlock(&mu);
        return rc;
}

API const char *nvmlErrorString(nvmlReturn_t result) {
        switch (result) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
        case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
        case NVML_ERROR_NOT_FOUND: return "Not Found";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
        case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
        case NVML_ERROR_TIMEOUT: return "Timeout";
        case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
        case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
        case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
        case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
        case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
        case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
        case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
        case NVML_ERROR_IN_USE: return "In use by another client";
        case NVML_ERROR_MEMORY: return "Insufficient Memory";
        case NVML_ERROR_NO_DATA: return "No data";
        case NVML_ERROR_NOT_READY: return "System not ready";
        default: return "Unknown Error";
        }
}

static nvmlReturn_t get_count(unsigned int *count) {
        nvmlReturn_t rc = NVML_SUCCESS;
        pthread_mutex_lock(&mu);
        if (!refcount)
                rc = NVML_ERROR_UNINITIALIZED;
        else if (!count)
                rc = NVML_ERROR_INVALID_ARGUMENT;
        else
                *count = n_gpus;
        pthread_mutex_unlock(&mu);
        return rc;
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
        return get_count(count);
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) {
        return get_count(count);
}

/* "live": read the script again if it changed (mu held, initialised). */
static void follow_script(void) {
        static struct fake_gpu old[MAX_GPUS];
        static struct topo_rule old_topo[MAX_TOPO];
        const char *path = getenv("FAKE_NVML_CONFIG");
        struct stat st;
        if (!live || !path || stat(path, &st) != 0 ||
            (st.st_mtim.tv_sec == script_mtime.tv_sec && st.st_mtim.tv_nsec == script_mtime.tv_nsec))
                return;
        unsigned old_n = n_gpus, old_ntopo = n_topo;
        memcpy(old, gpus, sizeof(gpus));
        memcpy(old_topo, topo, sizeof(topo));
        memset(gpus, 0, sizeof(gpus));
        if (load_script() != NVML_SUCCESS || n_gpus != old_n) {
                memcpy(gpus, old, sizeof(gpus));
                memcpy(topo, old_topo, sizeof(topo));
                n_gpus = old_n;
                n_topo = old_ntopo;
                live = true;
                script_mtime = st.st_mtim; /* not again until it changes again */
                return;
        }
        for (unsigned i = 0; i < n_gpus; i++) { /* fail_after counts on; the event set stays */
                memcpy(gpus[i].calls, old[i].calls, sizeof(gpus[i].calls));
                gpus[i].registered = old[i].registered;
        }
}

static nvmlReturn_t get_handle(unsigned int index, nvmlDevice_t *device) {
        nvmlReturn_t rc;
        pthread_mutex_lock(&mu);
        if (refcount && index == 0)
                follow_script();
        if (!refcount) {
                rc = NVML_ERROR_UNINITIALIZED;
        } else if (!device || index >= n_gpus) {
                rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
                rc = scripted(&gpus[index], C_HANDLE);
                if (rc == NVML_SUCCESS)
                        *device = (nvmlDevice_t)&gpus[index];
        }
        pthread_mutex_unlock(&mu);
        return rc;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
        return get_handle(index, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
        return get_handle(index, device);
}

/* NVML's string contract: the whole answer and its NUL, or nothing. */
static nvmlReturn_t put_text(const char *text, char *buf, unsigned int length) {
        size_t n = strlen(text);
        if (!buf)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (length < n + 1)
                return NVML_ERROR_INSUFFICIENT_SIZE;
        memcpy(buf, text, n + 1);
        return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
        DEVICE_CALL(device, g, C_NAME);
        if (mig_) {
                char full[MAX_TEXT + 40];
                snprintf(full, sizeof(full), "%s MIG %s", g->name, mig_->profile);
                rc_ = put_text(full, name, length);
        } else {
                rc_ = put_text(g->name, name, length);
        }
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
        DEVICE_CALL(device, g, C_UUID);
        rc_ = put_text(mig_ ? mig_->uuid : g->uuid, uuid, length);
        DEVICE_END;
}

struct nvmlProcessInfo_st;
static unsigned list_procs(const struct fake_gpu *g, const struct fake_mig *mig, struct nvmlProcessInfo_st *infos,
                           unsigned cap, unsigned long long *mb_sum);

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
        DEVICE_CALL(device, g, C_MEMORY);
        if (!memory) {
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
                goto out;
        }
        unsigned long long procs_mb;
        list_procs(g, mig_, NULL, 0, &procs_mb);
        memory->total = (mig_ ? mig_->mem_mb : g->total_mb) * MIB;
        memory->used = ((mig_ ? 0 : g->used_mb + g->reserved_mb) + procs_mb) * MIB;
        if (memory->used > memory->total)
                memory->used = memory->total;
        memory->free = memory->total - memory->used;
        DEVICE_END;
}

/* R510's struct: the reservation apart from what is used (nvidia-smi's "used"). */
typedef struct nvmlMemory_v2_st {
        unsigned int version;
        unsigned long long total;
        unsigned long long reserved;
        unsigned long long free;
        unsigned long long used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2U << 24)))

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
        DEVICE_CALL(device, g, C_MEMORY);
        rc_ = scripted(g, C_MEMORY_V2);
        if (rc_ != NVML_SUCCESS)
                goto out;
        if (!memory) {
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
                goto out;
        }
        if (memory->version != NVML_MEMORY_V2) {
                rc_ = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
                goto out;
        }
        unsigned long long procs_mb;
        list_procs(g, mig_, NULL, 0, &procs_mb);
        memory->total = (mig_ ? mig_->mem_mb : g->total_mb) * MIB;
        memory->reserved = mig_ ? 0 : g->reserved_mb * MIB;
        memory->used = ((mig_ ? 0 : g->used_mb) + procs_mb) * MIB;
        if (memory->used > memory->total - memory->reserved)
                memory->used = memory->total - memory->reserved;
        memory->free = memory->total - memory->reserved - memory->used;
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
        DEVICE_CALL(device, g, C_UTIL);
        BOARD_ONLY;
        if (!utilization) {
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        } else if (g->util < 0) {
                rc_ = NVML_ERROR_NOT_SUPPORTED;
        } else {
                utilization->gpu = (unsigned int)g->util;
                utilization->memory = (unsigned int)g->mem_util;
        }
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                          unsigned int *temp) {
        DEVICE_CALL(device, g, C_TEMP);
        BOARD_ONLY;
        if (!temp || sensorType != NVML_TEMPERATURE_GPU)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else if (g->temp < 0)
                rc_ = NVML_ERROR_NOT_SUPPORTED;
        else
                *temp = (unsigned int)g->temp;
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
        DEVICE_CALL(device, g, C_POWER);
        BOARD_ONLY;
        if (!power)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else if (g->power_mw < 0)
                rc_ = NVML_ERROR_NOT_SUPPORTED;
        else
                *power = (unsigned int)g->power_mw;
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
        DEVICE_CALL(device, g, C_CLOCK);
        BOARD_ONLY;
        long v = type == 1 ? g->sm_clock : type == 2 ? g->mem_clock : type == 0 ? g->sm_clock : -2;
        if (!clock || v == -2)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else if (v < 0)
                rc_ = NVML_ERROR_NOT_SUPPORTED;
        else
                *clock = (unsigned int)v;
        DEVICE_END;
}

/* errorType 0 corrected, 1 uncorrected; counterType 0 volatile, 1 aggregate
 * (the fake keeps one count for both). */
API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                             unsigned long long *eccCounts) {
        DEVICE_CALL(device, g, C_ECC);
        BOARD_ONLY;
        long long v = errorType == 0 ? g->ecc_corr : g->ecc_uncorr;
        if (!eccCounts || errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else if (v < 0)
                rc_ = NVML_ERROR_NOT_SUPPORTED;
        else
                *eccCounts = (unsigned long long)v;
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                           unsigned long long *clocksThrottleReasons) {
        DEVICE_CALL(device, g, C_THROTTLE);
        BOARD_ONLY;
        if (!clocksThrottleReasons)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else if (g->throttle < 0)
                rc_ = NVML_ERROR_NOT_SUPPORTED;
        else
                *clocksThrottleReasons = (unsigned long long)g->throttle;
        DEVICE_END;
}

/* nvmlProcessInfo_v2_t, what _v2 and _v3 fill */
typedef struct nvmlProcessInfo_st {
        unsigned int pid;
        unsigned long long usedGpuMemory;
        unsigned int gpuInstanceId;
        unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* Does process pid's environment say it uses GPU index, or the MIG device
 * uuid when that is not NULL (procs=env)?  Its FAKE_NVML_GPU_MB into *mb. */
static bool env_uses(const char *pid, unsigned index, const char *uuid, const char *tag, unsigned long long *mb) {
        char path[64], buf[65536];
        snprintf(path, sizeof(path), "/proc/%s/environ", pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        bool has_mb = false, sees = false, tagged = !tag[0];
        for (size_t off = 0; off < n; off += strlen(buf + off) + 1) {
                const char *e = buf + off;
                if (strncmp(e, "FAKE_NVML_GPU_MB=", 17) == 0)
                        has_mb = parse_ull(e + 17, 1ULL << 30, mb);
                else if (strncmp(e, "FAKE_NVML_TAG=", 14) == 0)
                        tagged = tagged || !strcmp(e + 14, tag);
                else if (strncmp(e, "CUDA_VISIBLE_DEVICES=", 21) == 0 && uuid)
                        for (const char *q = e + 21; *q;) {
                                size_t len = strcspn(q, ",");
                                sees = sees || (len == strlen(uuid) && !strncmp(q, uuid, len));
                                q += len + (q[len] == ',');
                        }
                else if (strncmp(e, "CUDA_VISIBLE_DEVICES=", 21) == 0)
                        for (const char *q = e + 21; *q;) {
                                char *end;
                                unsigned long v = strtoul(q, &end, 10);
                                if (end == q)
                                        break;
                                sees = sees || v == index;
                                q = *end == ',' ? end + 1 : end;
                        }
        }
        return has_mb && sees && tagged;
}

/* The compute processes of GPU g (its MIG instance mig, or NULL): up to cap
 * into infos (may be NULL); returns how many there are, their MiB in *mb. */
static unsigned list_procs(const struct fake_gpu *g, const struct fake_mig *mig, struct nvmlProcessInfo_st *infos,
                           unsigned cap, unsigned long long *mb_sum) {
        unsigned found = 0, index = (unsigned)(g - gpus);
        *mb_sum = 0;
        DIR *dir = g->procs_env ? opendir("/proc") : NULL;
        struct dirent *de;
        while (dir && (de = readdir(dir))) {
                unsigned long long mb;
                if (de->d_name[0] < '1' || de->d_name[0] > '9' || !env_uses(de->d_name, index, mig ? mig->uuid : NULL, g->procs_tag, &mb))
                        continue;
                if (infos && found < cap)
                        infos[found] = (nvmlProcessInfo_t){.pid = (unsigned)(strtoul(de->d_name, NULL, 10) +
                                                                             g->pid_offset),
                                                           .usedGpuMemory = mb * MIB};
                found++;
                *mb_sum += mb;
        }
        if (dir)
                closedir(dir);
        if (g->foreign_mb && !mig) { /* the board's process, not an instance's */
                if (infos && found < cap)
                        infos[found] = (nvmlProcessInfo_t){.pid = 1, .usedGpuMemory = g->foreign_mb * MIB};
                found++;
                *mb_sum += g->foreign_mb;
        }
        return found;
}

static nvmlReturn_t get_procs(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos) {
        DEVICE_CALL(device, g, C_PROCS);
        if (!count) {
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
                goto out;
        }
        unsigned long long mb;
        unsigned found = list_procs(g, mig_, infos, *count, &mb);
        /* NVML: too small a buffer (or none) is INSUFFICIENT_SIZE with the count needed */
        if (found > *count || (!infos && found))
                rc_ = NVML_ERROR_INSUFFICIENT_SIZE;
        *count = found;
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                         nvmlProcessInfo_t *infos) {
        return get_procs(device, infoCount, infos);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                         nvmlProcessInfo_t *infos) {
        return get_procs(device, infoCount, infos);
}

/* --- events: one set at a time (what gpupool makes) */
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlEventData_st {
        nvmlDevice_t device;
        unsigned long long eventType;
        unsigned long long eventData;
        unsigned int gpuInstanceId;
        unsigned int computeInstanceId;
} nvmlEventData_t;
#define XID_EVENT 0x8ULL

API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
        nvmlReturn_t rc = NVML_SUCCESS;
        pthread_mutex_lock(&mu);
        if (!refcount)
                rc = NVML_ERROR_UNINITIALIZED;
        else if (!set)
                rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (set_made)
                rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        else {
                set_made = true;
                *set = (nvmlEventSet_t)&the_set;
        }
        pthread_mutex_unlock(&mu);
        return rc;
}

API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
        DEVICE_CALL(device, g, C_EVENTS);
        BOARD_ONLY;
        if (set != (nvmlEventSet_t)&the_set || !set_made)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else if (types & ~XID_EVENT)
                rc_ = NVML_ERROR_NOT_SUPPORTED; /* NVML: a type the device cannot give */
        else
                g->registered = true;
        DEVICE_END;
}

API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
        nvmlReturn_t rc = NVML_ERROR_TIMEOUT;
        (void)timeoutms; /* nothing else raises events: waiting would only sleep */
        pthread_mutex_lock(&mu);
        if (!refcount) {
                rc = NVML_ERROR_UNINITIALIZED;
        } else if (set != (nvmlEventSet_t)&the_set || !set_made || !data) {
                rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
                for (unsigned i = 0; i < n_gpus && rc == NVML_ERROR_TIMEOUT; i++) {
                        struct fake_gpu *g = &gpus[i];
                        if (!g->registered || !g->n_xid)
                                continue;
                        memset(data, 0, sizeof(*data));
                        data->device = (nvmlDevice_t)g;
                        data->eventType = XID_EVENT;
                        data->eventData = g->xid[0];
                        memmove(&g->xid[0], &g->xid[1], (--g->n_xid) * sizeof(g->xid[0]));
                        rc = NVML_SUCCESS;
                }
        }
        pthread_mutex_unlock(&mu);
        return rc;
}

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
        nvmlReturn_t rc = NVML_SUCCESS;
        pthread_mutex_lock(&mu);
        if (set != (nvmlEventSet_t)&the_set || !set_made)
                rc = NVML_ERROR_INVALID_ARGUMENT;
        else {
                set_made = false;
                for (unsigned i = 0; i < n_gpus; i++)
                        gpus[i].registered = false;
        }
        pthread_mutex_unlock(&mu);
        return rc;
}

#ifndef FAKE_NVML_NO_TOPOLOGY
API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                     nvmlGpuTopologyLevel_t *pathInfo) {
        DEVICE_CALL(device1, g, C_TOPO);
        BOARD_ONLY;
        struct fake_gpu *g2 = gpu_of(device2);
        if (!g2 || !pathInfo) {
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
                goto out;
        }
        rc_ = scripted(g2, C_TOPO);
        if (rc_ != NVML_SUCCESS)
                goto out;
        unsigned a = (unsigned)(g - gpus), b = (unsigned)(g2 - gpus);
        nvmlGpuTopologyLevel_t level = a == b                           ? NVML_TOPOLOGY_INTERNAL
                                       : g->topo_group == g2->topo_group ? NVML_TOPOLOGY_SINGLE
                                                                         : NVML_TOPOLOGY_SYSTEM;
        for (unsigned i = 0; i < n_topo; i++)
                if ((topo[i].a == a && topo[i].b == b) || (topo[i].a == b && topo[i].b == a))
                        level = topo[i].level;
        *pathInfo = level;
        DEVICE_END;
}
#endif

#ifndef FAKE_NVML_NO_MIG
/* ---- MIG ---- */

/* The GPU behind a handle for a MIG call: NOT_SUPPORTED when it cannot do
 * MIG (and on a MIG device's own handle). */
#define MIG_PARENT_CALL(dev, g)                                                                  \
        DEVICE_CALL(dev, g, C_MIG);                                                              \
        if (mig_ || g->mig_mode < 0) {                                                           \
                rc_ = NVML_ERROR_NOT_SUPPORTED;                                                  \
                goto out;                                                                        \
        }

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
        MIG_PARENT_CALL(device, g);
        if (!currentMode || !pendingMode) {
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
                goto out;
        }
        *currentMode = *pendingMode = (unsigned int)g->mig_mode;
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
        MIG_PARENT_CALL(device, g);
        if (!count)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else
                *count = MAX_MIG;
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
        MIG_PARENT_CALL(device, g);
        if (!migDevice || index >= MAX_MIG)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else if (g->mig_mode != 1 || index >= g->n_mig || !g->migs[index].present)
                rc_ = NVML_ERROR_NOT_FOUND;
        else
                *migDevice = (nvmlDevice_t)&g->migs[index];
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
        DEVICE_CALL(device, g, C_MIG);
        if (!isMigDevice)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else
                *isMigDevice = mig_ != NULL;
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
        DEVICE_CALL(migDevice, g, C_MIG);
        if (!device || !mig_)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else
                *device = (nvmlDevice_t)g;
        DEVICE_END;
}

typedef struct nvmlDeviceAttributes_st {
        unsigned int multiprocessorCount;
        unsigned int sharedCopyEngineCount;
        unsigned int sharedDecoderCount;
        unsigned int sharedEncoderCount;
        unsigned int sharedJpegCount;
        unsigned int sharedOfaCount;
        unsigned int gpuInstanceSliceCount;
        unsigned int computeInstanceSliceCount;
        unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* NVML: "currently only supports MIG device handles" */
API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
        DEVICE_CALL(device, g, C_MIG);
        if (!mig_) {
                rc_ = NVML_ERROR_NOT_SUPPORTED;
        } else if (!attributes) {
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        } else {
                memset(attributes, 0, sizeof(*attributes));
                attributes->multiprocessorCount = 14 * mig_->ci; /* an A100's 14 SMs per slice */
                attributes->sharedCopyEngineCount = mig_->gi;
                attributes->sharedDecoderCount = mig_->gi / 2;
                attributes->gpuInstanceSliceCount = mig_->gi;
                attributes->computeInstanceSliceCount = mig_->ci;
                attributes->memorySizeMB = mig_->mem_mb;
        }
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
        DEVICE_CALL(device, g, C_MIG);
        if (!mig_)
                rc_ = NVML_ERROR_NOT_SUPPORTED;
        else if (!id)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else
                *id = (unsigned int)(mig_ - g->migs) + 1;
        DEVICE_END;
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
        DEVICE_CALL(device, g, C_MIG);
        if (!mig_)
                rc_ = NVML_ERROR_NOT_SUPPORTED;
        else if (!id)
                rc_ = NVML_ERROR_INVALID_ARGUMENT;
        else
                *id = 0;
        DEVICE_END;
}
#endif
