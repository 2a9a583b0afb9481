/* nodes-run.c - a run's start and log copy on the server (nodes-run.h).
 * Invariants: a start is rendered from the task's stored spec at the time
 * it is sent; the log copy of each run and rank (runlog.h) only grows, by
 * chunks that begin where it ends, up to max_log_bytes. */
#include "server/nodes-run.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "server/nodes-fence.h"
#include "server/nodes-int.h"
#include "server/nodes.h"
#include "server/nodes-tele.h"
#include "server/mps.h"
#include "server/runlog.h"
#include "server/hostlim.h"
#include "server/cluster-host.h"
#include "server/tenants.h"

static void oom(void) {
        gp_error("out of memory in the node registry; stopping");
        _exit(70);
}

/* The number of t's nodes, and the node of rank `rank` (as in nodes.c). */
static int nnodes(const gp_task *t) {
        int k = 0;
        for (int i = 0; i < t->n_gpus; i++)
                if (i == 0 || strcmp(t->gpus[i - 1].node, t->gpus[i].node))
                        k++;
        return k;
}

static const char *node_at(const gp_task *t, int rank) {
        int k = -1;
        for (int i = 0; i < t->n_gpus; i++)
                if (i == 0 || strcmp(t->gpus[i - 1].node, t->gpus[i].node))
                        if (++k == rank)
                                return t->gpus[i].node;
        return NULL;
}

int gp_nodes_start_of(gp_daemon *d, const gp_task *t, const char *node, int rank, gp_proto_start *s) {
        memset(s, 0, sizeof(*s));
        json_t *spec = json_loads(t->spec ? t->spec : "", 0, NULL);
        json_t *cmdv = json_object_get(spec, "command"), *env = json_object_get(spec, "env");
        size_t na = json_array_size(cmdv), ne = json_object_size(env);
        if (!spec || na == 0 || na > GP_PROTO_MAX_ARGV || ne + 2 > GP_PROTO_MAX_ENV) {
                json_decref(spec);
                return -EINVAL;
        }
        s->id = (gp_proto_run_id){t->id, gp_task_run_epoch(t), rank};
        s->nnodes = nnodes(t);
        gp_nodes_host(d, node_at(t, 0), s->master_addr, sizeof(s->master_addr));
        s->master_port = 29500 + (int)(t->id % 1000);
        gp_strlcpy(s->tenant, t->tenant, sizeof(s->tenant));
        s->argv = calloc(na + 1, sizeof(char *));
        s->env = calloc(ne + 3, sizeof(char *));
        if (!s->argv || !s->env)
                oom();
        for (size_t i = 0; i < na; i++)
                if (!(s->argv[s->n_argv++] = strdup(json_string_value(json_array_get(cmdv, i)) ?: "")))
                        oom();
        const char *k;
        json_t *v;
        json_object_foreach(env, k, v) {
                if (asprintf(&s->env[s->n_env], "%s=%s", k, json_string_value(v) ?: "") < 0)
                        oom();
                s->n_env++;
        }
        if (!(s->env[s->n_env++] = strdup("CUDA_DEVICE_ORDER=PCI_BUS_ID")))
                oom();
        /* earlier runs of the task (as spawn() sets it for a local run) */
        if (asprintf(&s->env[s->n_env], "GPUPOOL_RESTART_COUNT=%" PRId64, s->id.epoch - 1) < 0)
                oom();
        s->n_env++;
        s->notice = gp_notice_of_spec(spec, gp_daemon_cfg(d)->preemption_max_notice_s);
        if (gp_cgroup_limits_get(spec, &s->limits) < 0) /* checked at submit */
                s->limits = (gp_cgroup_limits){0};
        s->workdir = strdup(json_string_value(json_object_get(spec, "workdir")) ?: "");
        if (!s->workdir)
                oom();
        json_decref(spec);
        size_t oc = 0, og = 0;
        for (int i = 0; i < t->n_gpus; i++) {
                if (strcmp(t->gpus[i].node, node))
                        continue;
                size_t left = oc < sizeof(s->cuda_visible_devices) ? sizeof(s->cuda_visible_devices) - oc : 0;
                oc += gp_gpu_is_mig(t->gpus[i].uuid) /* a MIG instance by its uuid (docs/isolation.md) */
                              ? (size_t)snprintf(s->cuda_visible_devices + oc, left, "%s%s", oc ? "," : "",
                                                 t->gpus[i].uuid)
                              : (size_t)snprintf(s->cuda_visible_devices + oc, left, "%s%d", oc ? "," : "",
                                                 t->gpus[i].index);
                og += (size_t)snprintf(s->gpus + og, og < sizeof(s->gpus) ? sizeof(s->gpus) - og : 0, "%s%s:%d",
                                       og ? "," : "", node, t->gpus[i].index);
        }
        s->timeout_s = t->timeout_s;
        s->kill_grace_s = gp_daemon_cfg(d)->kill_grace_s;
        s->preempt_grace_s = gp_daemon_cfg(d)->preemption_grace_sec;
        s->max_log_bytes = gp_daemon_cfg(d)->max_log_bytes;
        const char *ra = gp_tenants_run_as(gp_daemon_tenants(d), t->tenant);
        gp_strlcpy(s->run_as, ra ? ra : "", sizeof(s->run_as));
        s->array_id = t->array_id;
        s->array_index = t->array_index;
        s->fence = gp_task_fences(t);
        if (t->elastic_max_nodes > 0) { /* GPUPOOL_NNODES=MIN:MAX, for torchrun --nnodes */
                s->nodes_min = t->elastic_min_nodes;
                s->nodes_max = t->elastic_max_nodes < GP_PROTO_MAX_RANK + 1 ? t->elastic_max_nodes : GP_PROTO_MAX_RANK + 1;
        }
        if (t->elastic_max_gpus > 0) { /* its agent writes GPUPOOL_ALLOC_FILE and applies resizes */
                s->elastic_min = t->gpu_request;
                s->elastic_max = t->elastic_max_gpus < GP_PROTO_MAX_GPUS ? t->elastic_max_gpus : GP_PROTO_MAX_GPUS;
        }
        if (gp_mps_client_of(d, t, &s->mps_compute_pct, s->mps_uuid, sizeof(s->mps_uuid))) /* its agent's daemon */
                s->mps_memory_mb = t->memory_mb;
        return 0;
}

void gp_nodes_task_mask(const gp_task *t, const char *node, gp_proto_mask *ret) {
        memset(ret, 0, sizeof(*ret));
        for (int i = 0; i < t->n_gpus; i++)
                if (!strcmp(t->gpus[i].node, node) && t->gpus[i].index >= 0 && t->gpus[i].index < GP_PROTO_MAX_GPUS)
                        ret->w[t->gpus[i].index / 64] |= (uint64_t)1 << (t->gpus[i].index % 64);
}

static void log_path(gp_daemon *d, gp_proto_run_id id, char *buf, size_t size) {
        if (id.rank < 0 || gp_runlog_path(d, id.task, id.epoch, id.rank, buf, size) < 0)
                buf[0] = '\0';
}

int64_t gp_nodes_log_size(gp_daemon *d, gp_proto_run_id id) {
        char path[PATH_MAX];
        struct stat st;
        log_path(d, id, path, sizeof(path));
        return path[0] && stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

int gp_nodes_take_log(gp_daemon *d, const gp_proto_log *lg, bool create, int64_t *ret_size) {
        char path[PATH_MAX];
        log_path(d, lg->id, path, sizeof(path));
        int fd = path[0] ? open(path, O_WRONLY | (create ? O_CREAT : 0) | O_APPEND | O_CLOEXEC, 0600) : -1;
        if (fd < 0 && create) {
                char dir[PATH_MAX];
                if (gp_daemon_task_path(d, lg->id.task, NULL, dir, sizeof(dir)) == 0 && mkdir(dir, 0700) == 0)
                        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        }
        if (fd < 0)
                return -errno;
        struct stat st;
        int64_t size = fstat(fd, &st) == 0 ? (int64_t)st.st_size : -1;
        if (size == lg->offset && gp_daemon_cfg(d)->max_log_bytes > size) {
                size_t len = lg->len;
                if ((int64_t)len > gp_daemon_cfg(d)->max_log_bytes - size)
                        len = (size_t)(gp_daemon_cfg(d)->max_log_bytes - size);
                ssize_t w = write(fd, lg->data, len);
                if (w > 0)
                        size += w;
        }
        close(fd);
        if (size < 0)
                return -EIO;
        *ret_size = size;
        return 0;
}

/* ---- node JSON (GET /api/v1/nodes) ---- */

json_t *gp_nodes_labels_json(const char *canon, const char *name) {
        json_t *o = gp_proto_labels_to_json(canon);
        if (o)
                json_object_set_new(o, "gpupool/node", json_string(name));
        return o;
}

/* A node's GPUs as the scheduler sees them, with busy and run counts. */
json_t *gp_nodes_sched_gpus_json(gp_daemon *d, const char *node, const uint32_t *sids, int n, int *busy, int *runs) {
        json_t *a = json_array();
        gp_i64map seen;
        gp_i64map_init(&seen);
        *busy = *runs = 0;
        for (int i = 0; a && i < n; i++) {
                gp_sched_gpu_view v;
                if (sids[i] == UINT32_MAX || gp_sched_gpu_get(gp_daemon_sched(d), sids[i], &v) < 0)
                        continue;
                int64_t ids[64];
                int k = gp_sched_gpu_tasks(gp_daemon_sched(d), sids[i], ids, 64);
                for (int j = 0; j < k && j < 64; j++)
                        if (!gp_i64map_get(&seen, ids[j]) && gp_i64map_put(&seen, ids[j], (void *)1) == 0)
                                (*runs)++;
                if (v.ntasks > 0)
                        (*busy)++;
                json_t *o = json_pack("{s:i,s:s,s:s,s:I,s:b,s:b,s:i}", "index", v.index, "uuid", v.uuid, "name", v.name,
                                      "memory_mb", (json_int_t)v.memory_total_mb, "healthy", v.healthy, "drained",
                                      v.drained, "tasks", v.ntasks);
                if (o)
                        gp_gpu_readings_json(gp_daemon_gpu_info(d, sids[i]), o);
                json_array_append_new(a, o);
        }
        gp_i64map_done(&seen);
        (void)node;
        return a;
}

/* The server's own GPUs as node "local" (NULL when it has none). */
json_t *gp_nodes_local_json(gp_daemon *d) {
        const uint32_t *ids;
        size_t ngpus = gp_daemon_local_gpus(d, &ids);
        if (ngpus == 0)
                return NULL;
        int busy, runs;
        json_t *g = gp_nodes_sched_gpus_json(d, "local", ids, (int)ngpus, &busy, &runs);
        bool drained = true;
        for (size_t i = 0; i < ngpus; i++) {
                gp_sched_gpu_view v;
                if (gp_sched_gpu_get(gp_daemon_sched(d), ids[i], &v) == 0)
                        drained = drained && v.drained;
        }
        json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:s,s:s,s:I,s:I,s:i,s:i,s:i,s:o}", "name", "local", "state",
                              drained ? "draining" : "ready", "address", "", "labels", gp_nodes_labels_json("", "local"),
                              "version", GP_VERSION, "backend", gp_daemon_backend(d), "last_heartbeat_ms",
                              (json_int_t)gp_now_ms(), "joined_ms", (json_int_t)gp_daemon_started_ms(d),
                              "gpus_total", (int)ngpus, "gpus_busy", busy, "runs", runs, "gpus", g);
        gp_host_info h;
        gp_host_read(gp_daemon_cfg(d)->data_dir, &h); /* the server's own machine */
        h.cgroup = gp_hostlim_version();
        if (o)
                gp_node_host_json(&h, gp_now_ms(), o);
        return o;
}

json_t *gp_nodes_node_json(gp_daemon *d, const gp_node *n) {
        uint32_t *sids = n->ngpus ? calloc((size_t)n->ngpus, sizeof(*sids)) : NULL;
        if (n->ngpus && !sids)
                return NULL;
        for (int i = 0; i < n->ngpus; i++)
                sids[i] = n->state == GP_NODE_LEFT ? UINT32_MAX : n->gpus[i].sid;
        int busy, runs;
        json_t *g = gp_nodes_sched_gpus_json(d, n->name, sids, n->ngpus, &busy, &runs);
        free(sids);
        if (n->state == GP_NODE_LEFT) { /* its GPUs as it had them */
                json_decref(g);
                g = json_array();
                for (int i = 0; g && i < n->ngpus; i++)
                        json_array_append_new(g, json_pack("{s:i,s:s,s:s,s:I,s:b,s:b,s:i}", "index", n->gpus[i].g.index,
                                                           "uuid", n->gpus[i].g.uuid, "name", n->gpus[i].g.name,
                                                           "memory_mb", (json_int_t)n->gpus[i].g.memory_mb, "healthy",
                                                           false, "drained", true, "tasks", 0));
        }
        json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:s,s:s,s:I,s:I,s:i,s:i,s:i,s:o,s:b}", "name", n->name, "state",
                              gp_node_state_name(n->state), "address", n->address, "labels",
                              gp_nodes_labels_json(n->labels, n->name), "version", n->version, "backend", n->backend,
                              "last_heartbeat_ms", (json_int_t)n->hb_ms, "joined_ms", (json_int_t)n->joined_ms,
                              "gpus_total", n->ngpus, "gpus_busy", busy, "runs", runs, "gpus", g, "synced", !n->restored);
        const gp_node_tele *t = gp_nodes_tele(d, n->name); /* none while lost or left */
        if (o)
                gp_node_host_json(gp_node_tele_host(t), gp_node_tele_at(t), o);
        return o;
}
