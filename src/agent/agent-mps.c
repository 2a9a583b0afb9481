/* agent-mps.c - MPS on an agent's GPUs (agent/agent-mps.h).  Invariant:
 * a run gets the MPS variables only once its GPU's daemon was seen
 * running; which GPUs still have clients is the agent's to say (agent.c
 * asks the pool to look with the runs it has). */
#include "agent/agent-mps.h"

#include "base/err.h"
#include "base/file.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gp_agent_mps_open(const gp_config *cfg, const char *data_dir, gp_mps_pool **ret, char *err, size_t errlen) {
        char d[PATH_MAX];
        int n = cfg->mps_dir[0] ? snprintf(d, sizeof(d), "%s", cfg->mps_dir)
                                : snprintf(d, sizeof(d), "%s/mps", data_dir);
        if (n < 0 || (size_t)n >= sizeof(d)) {
                snprintf(err, errlen, "gpus.mps_dir: too long");
                return -ENAMETOOLONG;
        }
        return gp_mps_pool_new(d, cfg->mps_control, ret, err, errlen);
}

int gp_agent_mps_prepare(gp_mps_pool *p, const gp_proto_start *s, int *ret_index, gp_mps_client *ret, char *why,
                         size_t whylen) {
        if (s->mps_memory_mb <= 0)
                return 0;
        int64_t index;
        if (gp_parse_i64(s->cuda_visible_devices, 0, GP_MPS_MAX_GPUS - 1, &index) < 0) {
                snprintf(why, whylen, "mps: an MPS client has one GPU of index 0..%d, not \"%.32s\"",
                         GP_MPS_MAX_GPUS - 1, s->cuda_visible_devices);
                return -EINVAL;
        }
        char pipe[PATH_MAX], log[PATH_MAX];
        const char *devices = s->mps_uuid[0] ? s->mps_uuid : s->cuda_visible_devices;
        int rc = gp_mps_pool_ensure(p, (int)index, devices, pipe, log, sizeof(pipe));
        if (rc < 0) {
                char err[GP_MPS_ERR_MAX];
                gp_mps_pool_state(p, (int)index, NULL, err, sizeof(err));
                snprintf(why, whylen, "mps: the MPS control daemon of GPU %d could not start: %s", (int)index,
                         err[0] ? err : gp_strerror(rc));
                return rc;
        }
        gp_mps_client_env(pipe, log, s->mps_memory_mb, s->mps_compute_pct, s->mps_uuid, ret);
        *ret_index = (int)index;
        return 1;
}

#define MARK_NAME "mps-gpu"

int gp_agent_mps_mark(const char *run_dir, int index) {
        char text[16], path[PATH_MAX + 16];
        int n = snprintf(text, sizeof(text), "%d\n", index);
        if (snprintf(path, sizeof(path), "%s/%s", run_dir, MARK_NAME) >= (int)sizeof(path))
                return -ENAMETOOLONG;
        return gp_file_write_atomic(run_dir, path, text, (size_t)n, 0600);
}

int gp_agent_mps_marked(const char *run_dir) {
        char path[PATH_MAX + 16], text[16];
        if (snprintf(path, sizeof(path), "%s/%s", run_dir, MARK_NAME) >= (int)sizeof(path))
                return -1;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -1;
        ssize_t n = read(fd, text, sizeof(text) - 1);
        close(fd);
        int64_t v;
        if (n <= 0)
                return -1;
        text[n] = '\0';
        text[strcspn(text, "\n")] = '\0';
        return gp_parse_i64(text, 0, GP_MPS_MAX_GPUS - 1, &v) == 0 ? (int)v : -1;
}
