/* agent-util.c - pure helpers of the agent (see agent-util.h). */
#include "agent/agent-util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/sha256.h"
#include "exec/alloc.h"

int gp_agent_run_name(const gp_proto_run_id *id, char *out, size_t size) {
        int n = snprintf(out, size, "%lld.%lld.%d", (long long)id->task, (long long)id->epoch, id->rank);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* One decimal field of a name, up to stop ('\0' or '.'). */
static int field(const char **p, char stop, int64_t min, int64_t max, int64_t *ret) {
        const char *s = *p;
        int64_t v = 0;
        size_t n = 0;
        while (s[n] >= '0' && s[n] <= '9') {
                if (v > (max - (s[n] - '0')) / 10)
                        return -EINVAL;
                v = v * 10 + (s[n] - '0');
                n++;
        }
        if (n == 0 || s[n] != stop || (n > 1 && s[0] == '0') || v < min)
                return -EINVAL;
        *p = s + n + (stop != '\0');
        *ret = v;
        return 0;
}

int gp_agent_run_name_parse(const char *name, gp_proto_run_id *ret) {
        int64_t t, e, r;
        const char *p = name;
        if (field(&p, '.', 1, (int64_t)1 << 53, &t) < 0 || field(&p, '.', 1, (int64_t)1 << 53, &e) < 0 ||
            field(&p, '\0', 0, GP_PROTO_MAX_RANK, &r) < 0)
                return -EINVAL;
        ret->task = t;
        ret->epoch = e;
        ret->rank = (int)r;
        return 0;
}

int64_t gp_agent_backoff_ms(int failures, uint32_t rnd) {
        int64_t cap = GP_AGENT_BACKOFF_MIN_MS;
        for (int i = 1; i < failures && cap < GP_AGENT_BACKOFF_MAX_MS; i++)
                cap *= 2;
        if (cap > GP_AGENT_BACKOFF_MAX_MS)
                cap = GP_AGENT_BACKOFF_MAX_MS;
        int64_t half = cap / 2;
        return half + (int64_t)(rnd % (uint32_t)(cap - half + 1));
}

int64_t gp_agent_next_seq(int64_t last, int64_t now_us) {
        return now_us > last ? now_us : last + 1;
}

bool gp_agent_run_in_delta(int state, int reported) {
        return state != reported || state == GP_PROTO_EXITED;
}

bool gp_agent_url_loopback(const char *url) {
        const char *h;
        if (!strncmp(url, "http://", 7))
                h = url + 7;
        else if (!strncmp(url, "https://", 8))
                h = url + 8;
        else
                return false;
        size_t alen = strcspn(h, "/?#");
        if (memchr(h, '@', alen))
                return false;
        char host[64];
        size_t n;
        if (h[0] == '[') {
                const char *close = memchr(h, ']', alen);
                if (!close)
                        return false;
                n = (size_t)(close - h - 1);
                if (n >= sizeof(host) || (close[1] != ':' && close + 1 != h + alen))
                        return false;
                memcpy(host, h + 1, n);
                host[n] = '\0';
                struct in6_addr a6;
                return inet_pton(AF_INET6, host, &a6) == 1 && !memcmp(&a6, &in6addr_loopback, sizeof(a6));
        }
        n = strcspn(h, ":/?#");
        if (n == 0 || n >= sizeof(host))
                return false;
        memcpy(host, h, n);
        host[n] = '\0';
        if (!strcasecmp(host, "localhost"))
                return true;
        struct in_addr a4;
        return inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

void gp_agent_machine(const char *key, const char *name, char out[GP_PROTO_MACHINE_LEN + 1]) {
        char in[GP_PROTO_MACHINE_LEN + GP_NODE_MAX + 2];
        uint8_t h[32];
        int n = snprintf(in, sizeof(in), "%s:%s", key, name);
        gp_sha256(in, n > 0 && (size_t)n < sizeof(in) ? (size_t)n : strlen(in), h);
        for (int i = 0; i < 32; i++)
                snprintf(out + 2 * i, 3, "%02x", h[i]);
        explicit_bzero(in, sizeof(in));
}

static int64_t absdiff(int64_t a, int64_t b) {
        return a > b ? a - b : b - a;
}

/* a and b differ by at least min (one unknown and the other not: always) */
static bool moved(int64_t a, int64_t b, int64_t min) {
        if ((a < 0) != (b < 0))
                return true;
        return absdiff(a, b) >= min;
}

int gp_agent_tele_diff(const gp_proto_tele *was, const gp_proto_tele *now, int64_t total_mb) {
        int64_t mem_step = total_mb / 50 > 256 ? total_mb / 50 : 256;
        int64_t power_step = was->power_mw / 10 > 25000 ? was->power_mw / 10 : 25000;
        bool urgent = moved(was->util_pct, now->util_pct, 10) || moved(was->used_mb, now->used_mb, mem_step) ||
                      moved(was->temp_c, now->temp_c, 5) || moved(was->power_mw, now->power_mw, power_step) ||
                      strcmp(was->reason, now->reason) != 0 || was->ecc_uncorrected != now->ecc_uncorrected ||
                      was->n_procs != now->n_procs || was->procs_known != now->procs_known;
        for (int i = 0; !urgent && i < now->n_procs; i++)
                urgent = was->procs[i].pid != now->procs[i].pid || was->procs[i].task != now->procs[i].task ||
                         moved(was->procs[i].used_mb, now->procs[i].used_mb, 256);
        if (urgent)
                return GP_AGENT_TELE_URGENT;
        bool changed = was->util_pct != now->util_pct || was->used_mb != now->used_mb || was->temp_c != now->temp_c ||
                       was->power_mw != now->power_mw || was->sm_clock_mhz != now->sm_clock_mhz ||
                       was->mem_clock_mhz != now->mem_clock_mhz || was->ecc_corrected != now->ecc_corrected ||
                       was->throttle != now->throttle || was->xid_errors != now->xid_errors;
        for (int i = 0; !changed && i < now->n_procs; i++)
                changed = was->procs[i].used_mb != now->procs[i].used_mb || was->procs[i].rank != now->procs[i].rank;
        return changed ? GP_AGENT_TELE_CHANGED : GP_AGENT_TELE_SAME;
}

int gp_agent_host_diff(const gp_host_info *was, const gp_host_info *now) {
        int64_t step = now->mem_total_mb / 100 > 64 ? now->mem_total_mb / 100 : 64;
        if (was->cpus != now->cpus || moved(was->mem_total_mb, now->mem_total_mb, 1) ||
            moved(was->disk_total_mb, now->disk_total_mb, 1))
                return GP_AGENT_TELE_URGENT;
        return moved(was->mem_avail_mb, now->mem_avail_mb, step) || moved(was->disk_free_mb, now->disk_free_mb, 256)
                       ? GP_AGENT_TELE_CHANGED
                       : GP_AGENT_TELE_SAME;
}

char *gp_agent_alloc_json(int64_t task, const char *node, int min, int max, const gp_proto_mask *m,
                          const gp_proto_gpu *gpus, int ngpus) {
        /* CUDA_VISIBLE_DEVICES as a task's: indexes, a MIG instance by its uuid */
        char cvd[GP_PROTO_MAX_GPUS * 48]; /* a MIG uuid is 40-odd bytes */
        size_t o = 0;
        cvd[0] = '\0';
        for (int i = 0; i < GP_PROTO_MAX_GPUS && o < sizeof(cvd); i++) {
                if (!(m->w[i / 64] & ((uint64_t)1 << (i % 64))))
                        continue;
                const char *mig = NULL;
                for (int k = 0; k < ngpus && !mig; k++)
                        if (gpus[k].index == i && !strncmp(gpus[k].uuid, "MIG-", 4))
                                mig = gpus[k].uuid;
                o += mig ? (size_t)snprintf(cvd + o, sizeof(cvd) - o, "%s%s", o ? "," : "", mig)
                         : (size_t)snprintf(cvd + o, sizeof(cvd) - o, "%s%d", o ? "," : "", i);
        }
        gp_exec_alloc_gpu g[GP_PROTO_MAX_GPUS];
        int n = 0;
        for (int i = 0; i < GP_PROTO_MAX_GPUS; i++) {
                if (!(m->w[i / 64] & ((uint64_t)1 << (i % 64))))
                        continue;
                g[n] = (gp_exec_alloc_gpu){i, node, ""};
                for (int k = 0; k < ngpus; k++)
                        if (gpus[k].index == i)
                                g[n].uuid = gpus[k].uuid;
                n++;
        }
        return gp_exec_alloc_json(task, min, max, cvd, g, n);
}

int gp_agent_alloc_load(const char *path, gp_proto_mask *ret, int *ret_min, int *ret_max) {
        struct stat st;
        if (stat(path, &st) < 0)
                return -ENOENT;
        if (!S_ISREG(st.st_mode) || st.st_size > 65536)
                return -EINVAL;
        json_t *j = json_load_file(path, 0, NULL);
        const char *cvd = json_string_value(json_object_get(j, "cuda_visible_devices"));
        json_int_t min = json_integer_value(json_object_get(j, "min_gpus")),
                   max = json_integer_value(json_object_get(j, "max_gpus"));
        int rc = cvd && min >= 1 && min <= max && max <= GP_PROTO_MAX_GPUS ? gp_proto_mask_parse(cvd, ret) : -EINVAL;
        if (rc == 0) {
                *ret_min = (int)min;
                *ret_max = (int)max;
        }
        json_decref(j);
        return rc;
}
