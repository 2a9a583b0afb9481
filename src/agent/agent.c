/* agent.c - `gpupool agent` (see agent.h and docs/internals/cluster.md).
 *
 * One thread drives everything: a curl multi handle carries every node's
 * syncs (one node, or N with --sim-nodes), driven through epoll
 * (agent-curl.h: a wake costs what moved, not a look at every sync), and
 * the wait also watches the pidfds of the supervisors, so a run's end
 * wakes the loop.
 * Each node has at most two syncs in flight: one held by the server
 * (long-poll, wait_ms = heartbeat_s * 1000) and, when it has something to
 * report meanwhile, one with wait_ms 0 (which makes the server answer the
 * held one).  The status API (libmicrohttpd, its own thread) serves a
 * JSON snapshot the loop renders once a second under `lock`.
 *
 * Invariants: a run is in a node's table from its start (or its discovery
 * in DATA_DIR/runs at start-up) until the server acks its result; its
 * directory goes only after that ack.  A start of a run in the table is
 * ignored.  A node sends a full sync first, after any failure, and when
 * told to (want_full); otherwise deltas (agent-util.h). */
#include "agent/agent.h"
#include "base/file.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent-curl.h"
#include "agent/agent-fence.h"
#include "agent/agent-mps.h"
#include "agent/agent-tls.h"
#include "agent/agent-util.h"
#include "agent/trust.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/exe.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/util.h"
#include "base/vec.h"
#include "cluster/proto.h"
#include "config/config.h"
#include "exec/exec.h"
#include "gpu/gpu.h"


#define EXIT_REFUSED 77
#define EXIT_REMOVED 78
#define MAX_URLS 16
#define GPU_POLL_MS 2000  /* until the server says its gpus.poll_ms */
#define LOG_GRACE_MS 10000 /* an ended run is reported once its log is shipped, or this long after */
#define MAX_SIM_NODES 5000

typedef struct run {
        gp_proto_run_id id;
        char name[64];                /* TASK.EPOCH.RANK */
        int state;                    /* GP_PROTO_RUNNING | GP_PROTO_EXITED */
        int reported;                 /* state in the last answered sync, -1 never */
        gp_exec_proc proc;
        int pidfd;                    /* -1 when not watched */
        gp_exec_result result;        /* when EXITED */
        int64_t log_pos;              /* log bytes the server has, as far as we know */
        int64_t log_size;             /* size of the log file at the last look */
        int64_t ended_mono;           /* when it ended */
        int64_t sim_end_mono;         /* sim: when the run ends */
        uint32_t listed;              /* the node's full_gen of the full sync that listed it */
        uint64_t gpu_mask[GP_PROTO_MAX_GPUS / 64]; /* its GPUs (the start's CUDA_VISIBLE_DEVICES; an
                                                    elastic run's as last resized) */
        bool elastic;                 /* GPUPOOL_ALLOC_FILE is its GPU set (resizes apply) */
        int elastic_min, elastic_max;
        int mps_gpu;                  /* an MPS client: its GPU's index + 1 (agent-mps.h); 0 = none */
} run;

typedef struct node node;

typedef struct xfer {
        node *n;
        CURL *h;
        struct curl_slist *hdrs;
        char *body;
        gp_buf resp;
        bool join, held, full, more, cut;
        int page;                     /* full: the page it carries */
        int nrep;                     /* runs reported, with the state sent */
        gp_proto_run_id *rep_ids;
        int *rep_states;
        int nlogs;
        gp_proto_run_id *log_ids;
        int64_t *log_ends;
        int64_t sent_mono;            /* when it was sent (the fence deadline counts from it) */
        int url;                      /* the server URL it went to (n->url then) */
} xfer;

struct node {
        char name[GP_NODE_MAX];
        char cred[GP_PROTO_CRED_LEN + 1];
        int64_t seq;
        bool need_full, dirty, gpus_dirty, reachable;
        run *runs;
        size_t n_runs, cap_runs;
        int inflight;
        int failures;
        int64_t next_mono;            /* no new sync before (backoff) */
        int url;                      /* index into the server URLs */
        int heartbeat_s;
        int64_t max_body;             /* the server's body limit (its answers say; 413 too) */
        int page;                     /* the next page of the full sync being sent */
        uint32_t full_gen;            /* bumped at every full sync's first page */
        gp_proto_gpu *gpus;           /* sim nodes: their own copies (uuids name the node) */
        int n_gpus;
        gp_proto_tele *tele;          /* sim nodes: their GPUs' readings now */
        int n_tele;
        gp_proto_tele *sent;          /* the readings last put in a sync, per GPU (deep copies) */
        int n_sent;
        gp_host_info host_sent;       /* the machine as last put in a sync */
        bool host_sent_ok;
        CURLSH *share;                /* its own connections and TLS sessions (see send_xfer) */
};

typedef struct agent {
        gp_config cfg;
        bool sim;
        int n_nodes;
        node *nodes;
        char *urls[MAX_URLS];
        int n_urls;
        char token[GP_PROTO_CRED_LEN + 1];   /* the join token's secret (gpj_<hex>) */
        char token_ca[GP_PROTO_CA_HASH_LEN]; /* its CA pin, "" = none */
        gp_agent_trust trust;         /* how every connection to a server is checked (trust.h) */
        char data_dir[PATH_MAX];
        char runs_dir[PATH_MAX];
        char self_exe[PATH_MAX];
        char address[300];
        char machine_key[GP_PROTO_MACHINE_LEN + 1]; /* DATA_DIR/machine-key: this machine's, kept across restarts */
        char uuid_node[GP_NODE_MAX];  /* sim backend: GPU uuids are SIM-<this>-<index> */
        gp_gpu_backend *gpu;
        gp_proto_gpu *gpus;
        int n_gpus;
        gp_proto_tele *tele;          /* the GPUs' readings now (not with --sim-nodes) */
        int n_tele;
        gp_host_info host;            /* this machine now */
        int poll_ms;                  /* the server's gpus.poll_ms (GPU_POLL_MS until it says) */
        int64_t next_gpus;            /* the next GPU reading, monotonic */
        CURLM *multi;
        int epfd;                     /* the multi handle's sockets (agent-curl.h) */
        const char *backend;
        pthread_mutex_t lock;
        char *status_json;            /* under lock */
        char *health_json;            /* under lock */
        gp_agent_tls *tls;            /* the status listener, over TLS with the node certificate */
        int exit_code;                /* >= 0: stop with it */
        gp_agent_fence fence;         /* DATA_DIR/fence for the supervisors (not with --sim-nodes) */
        gp_mps_pool *mps;             /* its GPUs' MPS control daemons (agent-mps.h; not with --sim-nodes) */
} agent;

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
        (void)sig;
        stop_signal = 1;
}

/* ---------------------------------------------------------------- files */

static int mkdirs(const char *path) {
        char tmp[PATH_MAX];
        if (gp_strlcpy(tmp, path, sizeof(tmp)) >= sizeof(tmp))
                return -ENAMETOOLONG;
        for (char *p = tmp + 1; *p; p++)
                if (*p == '/') {
                        *p = '\0';
                        if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
                                return -errno;
                        *p = '/';
                }
        if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

/* Write data to path atomically (tmp, fsync, rename, fsync the dir), mode 0600. */
static int write_atomic(const char *dir, const char *path, const char *data) {
        return gp_file_write_atomic(dir, path, data, strlen(data), 0600);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void)st;
        (void)ftw;
        if (flag == FTW_DP)
                rmdir(path);
        else
                unlink(path);
        return 0;
}

static void rm_tree(const char *path) {
        nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Credentials: node.json {"name","credential"}; sim-nodes.json {"nodes": {NAME: CRED}}. */
static int save_creds(agent *a) {
        char path[PATH_MAX + 32];
        json_t *j;
        if (a->sim) {
                json_t *m = json_object();
                for (int i = 0; m && i < a->n_nodes; i++)
                        if (a->nodes[i].cred[0])
                                json_object_set_new(m, a->nodes[i].name, json_string(a->nodes[i].cred));
                j = json_pack("{s:o*}", "nodes", m);
                snprintf(path, sizeof(path), "%s/sim-nodes.json", a->data_dir);
        } else {
                j = json_pack("{s:s, s:s}", "name", a->nodes[0].name, "credential", a->nodes[0].cred);
                snprintf(path, sizeof(path), "%s/node.json", a->data_dir);
        }
        char *s = j ? json_dumps(j, JSON_INDENT(1)) : NULL;
        json_decref(j);
        if (!s)
                return -ENOMEM;
        int rc = write_atomic(a->data_dir, path, s);
        free(s);
        return rc;
}

/* DATA_DIR/machine-key: 64 hex digits made at the first start and kept, so
 * that the server knows this machine when it joins again (node.json lost)
 * and refuses another machine under a live node's name.  0 or -errno. */
static int load_machine_key(agent *a) {
        char path[PATH_MAX + 32], buf[GP_PROTO_MACHINE_LEN + 2] = "";
        snprintf(path, sizeof(path), "%s/machine-key", a->data_dir);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t got = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
                close(fd);
        if (got >= GP_PROTO_MACHINE_LEN) {
                buf[GP_PROTO_MACHINE_LEN] = '\0';
                if (gp_proto_machine_ok(buf)) {
                        gp_strlcpy(a->machine_key, buf, sizeof(a->machine_key));
                        return 0;
                }
        }
        uint8_t raw[GP_PROTO_MACHINE_LEN / 2];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return -EIO;
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(a->machine_key + 2 * i, 3, "%02x", raw[i]);
        explicit_bzero(raw, sizeof(raw));
        return write_atomic(a->data_dir, path, a->machine_key);
}

static void load_creds(agent *a) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/%s", a->data_dir, a->sim ? "sim-nodes.json" : "node.json");
        json_t *j = json_load_file(path, 0, NULL);
        if (!j)
                return;
        for (int i = 0; i < a->n_nodes; i++) {
                node *n = &a->nodes[i];
                const char *cred;
                if (a->sim) {
                        cred = json_string_value(json_object_get(json_object_get(j, "nodes"), n->name));
                } else {
                        const char *name = json_string_value(json_object_get(j, "name"));
                        cred = name && !strcmp(name, n->name) ? json_string_value(json_object_get(j, "credential"))
                                                               : NULL;
                        if (name && strcmp(name, n->name))
                                gp_warn("%s is for node %s, not %s: joining again", path, name, n->name);
                }
                if (cred && gp_proto_credential_ok(cred))
                        gp_strlcpy(n->cred, cred, sizeof(n->cred));
        }
        json_decref(j);
}

/* ---------------------------------------------------------------- runs */

static run *find_run(node *n, const gp_proto_run_id *id) {
        for (size_t i = 0; i < n->n_runs; i++)
                if (n->runs[i].id.task == id->task && n->runs[i].id.epoch == id->epoch && n->runs[i].id.rank == id->rank)
                        return &n->runs[i];
        return NULL;
}

static run *add_run(node *n, const gp_proto_run_id *id) {
        run *p = gp_vec_grow(n->runs, &n->cap_runs, n->n_runs + 1, sizeof(*n->runs), 8);
        if (!p)
                return NULL;
        n->runs = p;
        run *r = &n->runs[n->n_runs++];
        memset(r, 0, sizeof(*r));
        r->id = *id;
        gp_agent_run_name(id, r->name, sizeof(r->name));
        r->reported = -1;
        r->pidfd = -1;
        return r;
}

static void drop_run(node *n, run *r) {
        if (r->pidfd >= 0)
                close(r->pidfd);
        *r = n->runs[--n->n_runs];
}

static void run_dir(const agent *a, const run *r, char *out, size_t size) {
        snprintf(out, size, "%s/%s", a->runs_dir, r->name);
}

static void node_gpus(const agent *a, const node *n, const gp_proto_gpu **ret, int *ret_n);

/* Write an elastic run's GPU set (mask) into its alloc.json. */
static int write_alloc(const agent *a, const node *n, const run *r, const gp_proto_mask *mask) {
        const gp_proto_gpu *g;
        int ng;
        char dir[PATH_MAX + 64];
        node_gpus(a, n, &g, &ng);
        run_dir(a, r, dir, sizeof(dir));
        char *js = gp_agent_alloc_json(r->id.task, n->name, r->elastic_min, r->elastic_max, mask, g, ng);
        int rc = js ? gp_exec_write_alloc(dir, js, strlen(js)) : -ENOMEM;
        free(js);
        return rc;
}

/* A resize from the server: the run's new GPU set goes into its
 * alloc.json and the run gets SIGUSR1 (as on the server's own GPUs).  The
 * set it holds then is in the next sync ("alloc"), so a resize that did
 * not arrive or could not be written is sent again. */
static void resize_run(agent *a, node *n, const gp_proto_resize *z) {
        run *r = find_run(n, &z->id);
        if (!r || r->state != GP_PROTO_RUNNING || !r->elastic)
                return;
        r->reported = -1;
        n->dirty = true;
        if (!memcmp(r->gpu_mask, z->gpus.w, sizeof(r->gpu_mask)))
                return;
        char cvd[GP_PROTO_MASK_TEXT];
        gp_proto_mask_format(&z->gpus, cvd, sizeof(cvd));
        int rc = a->sim ? 0 : write_alloc(a, n, r, &z->gpus);
        if (rc == 0)
                memcpy(r->gpu_mask, z->gpus.w, sizeof(r->gpu_mask));
        if (rc == 0 && !a->sim && (rc = gp_exec_notify(&r->proc)) < 0)
                gp_warn("run %s: its GPUs are now %s, but it could not be signalled: %s", r->name, cvd,
                        gp_strerror(rc));
        else if (rc < 0)
                gp_warn("run %s: could not write its new GPUs %s: %s", r->name, cvd, gp_strerror(rc));
        else
                gp_info("run %s resized to GPUs %s", r->name, cvd);
}

static void end_run(node *n, run *r, const gp_exec_result *res) {
        r->state = GP_PROTO_EXITED;
        r->result = *res;
        r->ended_mono = gp_mono_ms();
        if (r->pidfd >= 0) {
                close(r->pidfd);
                r->pidfd = -1;
        }
        n->dirty = true;
        gp_info("run %s ended: %s", r->name, res->message);
}

/* The supervisor of r is gone (or was at start-up): take its result. */
static void collect(agent *a, node *n, run *r) {
        char dir[PATH_MAX + 64];
        gp_exec_result res;
        run_dir(a, r, dir, sizeof(dir));
        if (r->pidfd >= 0)
                gp_exec_reap(r->pidfd);
        if (gp_exec_read_result(dir, &res) < 0) {
                memset(&res, 0, sizeof(res));
                res.end = GP_EXEC_SIGNALED;
                res.exit_code = 137;
                res.signal = 9;
                res.finished_ms = gp_now_ms();
                snprintf(res.message, sizeof(res.message), "its supervisor ended without a result");
                gp_cgroup_reap(r->id.task, r->proc.pid); /* what it left in its cgroup */
        }
        char log[PATH_MAX + 80];
        struct stat st;
        snprintf(log, sizeof(log), "%s/log", dir);
        if (stat(log, &st) == 0)
                r->log_size = st.st_size; /* its end waits for this much output to be shipped */
        end_run(n, r, &res);
}

/* Watch the supervisor of r (recorded in its pidfile), or collect it. */
static void attach(agent *a, node *n, run *r) {
        char dir[PATH_MAX + 64], alloc[PATH_MAX + 80];
        run_dir(a, r, dir, sizeof(dir));
        snprintf(alloc, sizeof(alloc), "%s/alloc.json", dir);
        gp_proto_mask m;
        if (gp_agent_alloc_load(alloc, &m, &r->elastic_min, &r->elastic_max) == 0) {
                r->elastic = true; /* an elastic run: its set as last written */
                memcpy(r->gpu_mask, m.w, sizeof(r->gpu_mask));
        }
        if (gp_exec_read_pidfile(dir, &r->proc) == 0 && gp_exec_alive(&r->proc) &&
            gp_exec_watch(&r->proc, &r->pidfd) == 0) {
                r->state = GP_PROTO_RUNNING;
                r->mps_gpu = gp_agent_mps_marked(dir) + 1; /* its daemon stays while it runs */
                return;
        }
        collect(a, n, r);
}

/* Start-up: every run directory is a run this node holds. */
static void scan_runs(agent *a, node *n) {
        DIR *d = opendir(a->runs_dir);
        struct dirent *e;
        if (!d)
                return;
        /* cppcheck-suppress readdirCalled ; one thread reads this directory stream */
        while ((e = readdir(d))) {
                gp_proto_run_id id;
                if (e->d_name[0] == '.' || gp_agent_run_name_parse(e->d_name, &id) < 0)
                        continue;
                run *r = add_run(n, &id);
                if (!r)
                        break;
                attach(a, n, r);
                gp_info("run %s found at start-up: %s", r->name,
                        r->state == GP_PROTO_RUNNING ? "running, re-attached" : r->result.message);
        }
        closedir(d);
}

static void start_run(agent *a, node *n, const gp_proto_start *s) {
        run *r = find_run(n, &s->id);
        if (r)
                return; /* idempotent: the server may send a start again */
        if (!(r = add_run(n, &s->id)))
                return;
        n->dirty = true;
        for (const char *p = s->gpus; *p;) { /* "node:0,node:1,...": indexes, also of MIG instances */
                const char *colon = strchr(p, ':');
                if (!colon)
                        break;
                char *end;
                long idx = strtol(colon + 1, &end, 10);
                if (end == colon + 1)
                        break;
                if (idx >= 0 && idx < GP_PROTO_MAX_GPUS)
                        r->gpu_mask[idx / 64] |= (uint64_t)1 << (idx % 64);
                p = *end == ',' ? end + 1 : end;
        }
        r->elastic = s->elastic_max > 0;
        r->elastic_min = s->elastic_min;
        r->elastic_max = s->elastic_max;
        if (a->sim) {
                r->state = GP_PROTO_RUNNING;
                double secs = 0;
                if (!strcmp(s->argv[0], "sleep") && s->n_argv >= 2)
                        secs = strtod(s->argv[1], NULL);
                if (!(secs >= 0 && secs < 1e7))
                        secs = 0;
                r->sim_end_mono = gp_mono_ms() + (int64_t)(secs * 1000);
                gp_debug("run %s started on %s (sim)", r->name, n->name);
                return;
        }
        char dir[PATH_MAX + 64];
        run_dir(a, r, dir, sizeof(dir));
        const char **env = calloc((size_t)s->n_env + 8 + GP_MPS_ENV_MAX, sizeof(char *));
        char extra[7][PATH_MAX + 96];
        gp_exec_result fail = {.end = GP_EXEC_SPAWN_FAILED, .exit_code = 127};
        if (!env) {
                fail.finished_ms = gp_now_ms();
                snprintf(fail.message, sizeof(fail.message), "out of memory starting it");
                end_run(n, r, &fail);
                return;
        }
        int ne = 0;
        for (int i = 0; i < s->n_env; i++)
                env[ne++] = s->env[i];
        snprintf(extra[0], sizeof(extra[0]), "GPUPOOL_NODE=%s", n->name);
        snprintf(extra[1], sizeof(extra[1]), "GPUPOOL_NODE_RANK=%d", s->id.rank);
        if (s->nodes_max) /* elastic in whole nodes: torchrun's --nnodes=MIN:MAX */
                snprintf(extra[2], sizeof(extra[2]), "GPUPOOL_NNODES=%d:%d", s->nodes_min, s->nodes_max);
        else
                snprintf(extra[2], sizeof(extra[2]), "GPUPOOL_NNODES=%d", s->nnodes);
        snprintf(extra[3], sizeof(extra[3]), "MASTER_ADDR=%s", s->master_addr);
        snprintf(extra[4], sizeof(extra[4]), "MASTER_PORT=%d", s->master_port);
        snprintf(extra[5], sizeof(extra[5]), "CUDA_DEVICE_ORDER=PCI_BUS_ID");
        for (int i = 0; i < 6; i++)
                env[ne++] = extra[i];
        if (r->elastic) { /* the allocation file exists before the task does */
                int arc = write_alloc(a, n, r, &(gp_proto_mask){{r->gpu_mask[0], r->gpu_mask[1], r->gpu_mask[2],
                                                                   r->gpu_mask[3]}});
                if (arc < 0) {
                        free(env);
                        fail.finished_ms = gp_now_ms();
                        snprintf(fail.message, sizeof(fail.message), "could not write its alloc.json: %s",
                                 gp_strerror(arc));
                        end_run(n, r, &fail);
                        return;
                }
                snprintf(extra[6], sizeof(extra[6]), "GPUPOOL_ALLOC_FILE=%s/alloc.json", dir);
                env[ne++] = extra[6];
        }
        gp_mps_client mc; /* an MPS client: its GPU's daemon runs first; its variables come last (they win) */
        int mps_gpu = -1, mps = a->mps ? gp_agent_mps_prepare(a->mps, s, &mps_gpu, &mc, fail.message,
                                                              sizeof(fail.message)) : 0;
        if (mps < 0) {
                free(env);
                fail.finished_ms = gp_now_ms();
                end_run(n, r, &fail);
                return;
        }
        for (int i = 0; i < GP_MPS_ENV_MAX && mps > 0; i++)
                env[ne++] = mc.env[i];
        gp_exec_spec spec = {
                .task_id = s->id.task, .argv = (const char *const *)s->argv, .env = env,
                .workdir = s->workdir,
                .cuda_visible_devices = mps > 0 ? mc.cuda_visible_devices : s->cuda_visible_devices, .gpus = s->gpus,
                .timeout_s = s->timeout_s, .kill_grace_s = s->kill_grace_s, .preempt_grace_s = s->preempt_grace_s,
                .max_log_bytes = s->max_log_bytes, .run_as = s->run_as, .array_id = s->array_id,
                .array_index = s->array_index, .fence_file = gp_agent_fence_file(&a->fence, s->fence),
                .notice = s->notice, .limits = s->limits,
        };
        int rc = gp_exec_launch(a->self_exe, dir, &spec, GP_EXEC_FRESH, &r->proc);
        free(env);
        if (rc == -EEXIST) {
                attach(a, n, r); /* a supervisor ran there already: never twice */
                return;
        }
        if (rc < 0) {
                fail.finished_ms = gp_now_ms();
                snprintf(fail.message, sizeof(fail.message), "could not start its supervisor: %s", gp_strerror(rc));
                end_run(n, r, &fail);
                return;
        }
        r->state = GP_PROTO_RUNNING;
        if (mps > 0) {
                r->mps_gpu = mps_gpu + 1;
                if ((rc = gp_agent_mps_mark(dir, mps_gpu)) < 0) /* a restart would not know it is a client */
                        gp_warn("run %s: cannot record that it is an MPS client: %s", r->name, strerror(-rc));
        }
        if (gp_exec_watch(&r->proc, &r->pidfd) < 0)
                collect(a, n, r);
        else
                gp_info("run %s started (tenant %s, %s)", r->name, s->tenant, s->argv[0]);
}

static void stop_run(agent *a, node *n, const gp_proto_stop *s) {
        run *r = find_run(n, &s->id);
        if (!r || r->state != GP_PROTO_RUNNING)
                return;
        gp_info("run %s %s: stopping it", r->name, s->why == GP_PROTO_STOP_STALE ? "stale" : gp_proto_stop_name(s->why));
        if (a->sim) {
                gp_exec_result res = {.end = GP_EXEC_CANCELLED, .exit_code = 143, .signal = 15,
                                      .finished_ms = gp_now_ms()};
                snprintf(res.message, sizeof(res.message), "%s",
                         s->why == GP_PROTO_STOP_PREEMPT ? "preempted" : "cancelled");
                end_run(n, r, &res);
                return;
        }
        if (s->why == GP_PROTO_STOP_PREEMPT)
                gp_exec_preempt(&r->proc);
        else
                gp_exec_cancel(&r->proc);
}

static void ack_run(agent *a, node *n, const gp_proto_run_id *id) {
        run *r = find_run(n, id);
        if (!r || r->state != GP_PROTO_EXITED)
                return;
        if (!a->sim) {
                char dir[PATH_MAX + 64];
                run_dir(a, r, dir, sizeof(dir));
                rm_tree(dir);
        }
        gp_info("run %s acked", r->name);
        drop_run(n, r);
}

/* The state a run is reported in: an ended run stays "running" until its
 * log is shipped (or LOG_GRACE_MS passed), so its end never overtakes its
 * output. */
static int shown_state(const agent *a, const run *r, int64_t now) {
        if (r->state != GP_PROTO_EXITED || a->sim)
                return r->state;
        return r->log_pos >= r->log_size || now - r->ended_mono >= LOG_GRACE_MS ? GP_PROTO_EXITED : GP_PROTO_RUNNING;
}

static void look_at_logs(agent *a, node *n) {
        for (size_t i = 0; i < n->n_runs; i++) {
                run *r = &n->runs[i];
                char path[PATH_MAX + 80];
                struct stat st;
                snprintf(path, sizeof(path), "%s/%s/log", a->runs_dir, r->name);
                if (stat(path, &st) == 0) {
                        r->log_size = st.st_size;
                        if (r->log_pos < r->log_size)
                                n->dirty = true;
                }
        }
}

/* ---------------------------------------------------------------- GPUs */

static void tele_free(gp_proto_tele *t, int n) {
        for (int i = 0; i < n; i++)
                free(t[i].procs);
        free(t);
}

/* A deep copy of src into dst (dst->procs owned); its procs are left out
 * when memory is short. */
static void tele_copy(gp_proto_tele *dst, const gp_proto_tele *src) {
        *dst = *src;
        dst->procs = src->n_procs ? malloc((size_t)src->n_procs * sizeof(*src->procs)) : NULL;
        if (dst->procs)
                memcpy(dst->procs, src->procs, (size_t)src->n_procs * sizeof(*src->procs));
        else
                dst->n_procs = 0;
}

/* The running run of n that process pid belongs to (gp_host_descends from
 * its supervisor); NULL for a process that is none of ours. */
static const run *run_of_pid(const node *n, int pid) {
        int64_t roots[256];
        size_t idx[256] = {0}, nr = 0;
        for (size_t k = 0; n && k < n->n_runs && nr < 256; k++)
                if (n->runs[k].state == GP_PROTO_RUNNING && n->runs[k].proc.pid > 0) {
                        roots[nr] = n->runs[k].proc.pid;
                        idx[nr++] = k;
                }
        int w = gp_host_descends(pid, roots, nr);
        return w >= 0 ? &n->runs[idx[w]] : NULL;
}

/* g's readings into t; its processes named by the runs of n they belong
 * to (t->procs malloc'd; left out when memory is short). */
static void to_tele(const gp_gpu_info *g, gp_proto_tele *t, const node *n) {
        *t = (gp_proto_tele){
                .index = g->index, .used_mb = g->memory_used_mb, .util_pct = g->util_pct, .temp_c = g->temp_c,
                .power_mw = g->power_mw, .sm_clock_mhz = g->sm_clock_mhz, .mem_clock_mhz = g->mem_clock_mhz,
                .ecc_corrected = g->ecc_corrected, .ecc_uncorrected = g->ecc_uncorrected,
                .throttle = g->throttle_reasons, .xid_errors = g->xid_errors,
        };
        /* what the protocol bounds (a reading out of them is unknown) */
        if (t->used_mb > ((int64_t)1 << 40))
                t->used_mb = -1;
        if (t->util_pct > 100)
                t->util_pct = -1;
        if (t->temp_c > 300)
                t->temp_c = -1;
        if (t->power_mw > 100000000)
                t->power_mw = -1;
        if (t->sm_clock_mhz > 100000)
                t->sm_clock_mhz = -1;
        if (t->mem_clock_mhz > 100000)
                t->mem_clock_mhz = -1;
        if (!g->healthy)
                gp_strlcpy(t->reason, g->health_reason[0] ? g->health_reason : "unhealthy", sizeof(t->reason));
        for (char *p = t->reason; *p; p++) /* clean text only */
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        *p = ' ';
        t->procs_known = g->procs_known;
        int np = g->n_procs;
        if (np > GP_PROTO_MAX_PROCS)
                np = GP_PROTO_MAX_PROCS;
        if (np > 0)
                t->procs = calloc((size_t)np, sizeof(*t->procs));
        if (t->procs) {
                for (int i = 0; i < np; i++) {
                        const gp_gpu_proc *q = &g->procs[i];
                        if (q->pid < 1 || q->pid > GP_PROTO_MAX_PID)
                                continue;
                        gp_proto_proc *o = &t->procs[t->n_procs++];
                        o->pid = q->pid;
                        o->used_mb = q->used_mb >= 0 && q->used_mb <= ((int64_t)1 << 40) ? q->used_mb : 0;
                        const run *r = run_of_pid(n, q->pid);
                        if (r) {
                                o->task = r->id.task;
                                o->rank = r->id.rank;
                        }
                }
        }
}

/* The simulated backend reports what runs on its GPUs: tell it what n runs
 * (the readings of a sim GPU are a function of its load, gpu/sim.c). */
static void sim_load(agent *a, const node *n) {
        if (strcmp(a->backend, "sim"))
                return;
        for (int gi = 0; gi < a->n_gpus; gi++) {
                int idx = a->gpus[gi].index, tasks = 0;
                for (size_t k = 0; k < n->n_runs && idx >= 0 && idx < GP_PROTO_MAX_GPUS; k++)
                        tasks += n->runs[k].state == GP_PROTO_RUNNING &&
                                 (n->runs[k].gpu_mask[idx / 64] >> (idx % 64) & 1);
                gp_gpu_sim_set_load(a->gpu, idx, 0, tasks);
        }
}

/* A simulated node's readings now (--sim-nodes), into n->tele. */
static void sim_readings(agent *a, node *n) {
        gp_gpu_info *g;
        size_t ng;
        sim_load(a, n);
        if (gp_gpu_read(a->gpu, &g, &ng) < 0)
                return;
        gp_proto_tele *t = calloc(ng ? ng : 1, sizeof(*t));
        if (t) {
                for (size_t i = 0; i < ng && i < GP_PROTO_MAX_GPUS; i++)
                        to_tele(&g[i], &t[i], NULL);
                tele_free(n->tele, n->n_tele);
                n->tele = t;
                n->n_tele = ng < GP_PROTO_MAX_GPUS ? (int)ng : GP_PROTO_MAX_GPUS;
        }
        free(g);
}

static void node_tele(const agent *a, const node *n, const gp_proto_tele **ret, int *ret_n) {
        *ret = a->sim ? n->tele : a->tele;
        *ret_n = a->sim ? n->n_tele : a->n_tele;
}

static const gp_proto_tele *sent_of(const node *n, int index) {
        for (int i = 0; i < n->n_sent; i++)
                if (n->sent[i].index == index)
                        return &n->sent[i];
        return NULL;
}

static int64_t gpu_total_mb(const agent *a, int index) {
        for (int i = 0; i < a->n_gpus; i++)
                if (a->gpus[i].index == index)
                        return a->gpus[i].memory_mb;
        return 0;
}

/* After a reading: a change that matters makes a sync now, not with the
 * next heartbeat (agent-util.h). */
static void tele_check(agent *a, node *n) {
        const gp_proto_tele *cur;
        int nc;
        if (!n->cred[0] || n->need_full)
                return;
        node_tele(a, n, &cur, &nc);
        bool urgent = a->host.cpus >= 1 && (!n->host_sent_ok ||
                                            gp_agent_host_diff(&n->host_sent, &a->host) == GP_AGENT_TELE_URGENT);
        for (int i = 0; !urgent && i < nc; i++) {
                const gp_proto_tele *was = sent_of(n, cur[i].index);
                urgent = !was || gp_agent_tele_diff(was, &cur[i], gpu_total_mb(a, cur[i].index)) ==
                                         GP_AGENT_TELE_URGENT;
        }
        if (urgent)
                n->dirty = true;
}

/* Remember what a sync carries: t (n_t readings) and, when has_host, the
 * machine; all_gpus: t is every GPU (a full sync's first page). */
static void tele_sent(agent *a, node *n, const gp_proto_tele *t, int n_t, bool all_gpus, bool has_host) {
        if (has_host) {
                n->host_sent = a->host;
                n->host_sent_ok = true;
        }
        if (all_gpus) {
                tele_free(n->sent, n->n_sent);
                n->sent = NULL;
                n->n_sent = 0;
        }
        for (int i = 0; i < n_t; i++) {
                gp_proto_tele *was = (gp_proto_tele *)sent_of(n, t[i].index);
                if (!was) {
                        gp_proto_tele *v = realloc(n->sent, (size_t)(n->n_sent + 1) * sizeof(*v));
                        if (!v)
                                return; /* sent again with the next sync */
                        n->sent = v;
                        was = &n->sent[n->n_sent++];
                } else {
                        free(was->procs);
                }
                tele_copy(was, &t[i]);
        }
}

static int read_gpus(agent *a, bool *ret_changed) {
        gp_gpu_info *g;
        size_t ng;
        if (a->n_nodes > 0)
                sim_load(a, &a->nodes[0]);
        int rc = gp_gpu_read(a->gpu, &g, &ng);
        if (rc < 0)
                return rc;
        if (ng > GP_PROTO_MAX_GPUS)
                ng = GP_PROTO_MAX_GPUS;
        gp_proto_gpu *p = calloc(ng ? ng : 1, sizeof(*p));
        gp_proto_tele *t = calloc(ng ? ng : 1, sizeof(*t));
        if (!p || !t) {
                free(p);
                free(t);
                free(g);
                return -ENOMEM;
        }
        for (size_t i = 0; i < ng; i++)
                to_tele(&g[i], &t[i], a->n_nodes > 0 ? &a->nodes[0] : NULL);
        tele_free(a->tele, a->n_tele);
        a->tele = t;
        a->n_tele = (int)ng;
        for (size_t i = 0; i < ng; i++) {
                p[i].index = g[i].index;
                gp_strlcpy(p[i].uuid, g[i].uuid, sizeof(p[i].uuid));
                if (a->uuid_node[0]) /* sim: unique in the pool, the same at every start */
                        snprintf(p[i].uuid, sizeof(p[i].uuid), "SIM-%.40s-%d", a->uuid_node, g[i].index);
                gp_strlcpy(p[i].name, g[i].name, sizeof(p[i].name));
                p[i].memory_mb = g[i].memory_total_mb;
                p[i].healthy = g[i].healthy;
        }
        free(g);
        bool changed = (int)ng != a->n_gpus;
        for (size_t i = 0; !changed && i < ng; i++)
                changed = p[i].healthy != a->gpus[i].healthy || p[i].memory_mb != a->gpus[i].memory_mb ||
                          p[i].index != a->gpus[i].index;
        free(a->gpus);
        a->gpus = p;
        a->n_gpus = (int)ng;
        *ret_changed = changed;
        return 0;
}

static void node_gpus(const agent *a, const node *n, const gp_proto_gpu **ret, int *ret_n) {
        *ret = a->sim ? n->gpus : a->gpus;
        *ret_n = a->sim ? n->n_gpus : a->n_gpus;
}

/* ---------------------------------------------------------------- HTTP client */

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud) {
        xfer *x = ud;
        return gp_buf_append(&x->resp, p, size * nmemb) == 0 ? size * nmemb : 0;
}

static void xfer_free(xfer *x) {
        if (!x)
                return;
        if (x->h)
                curl_easy_cleanup(x->h);
        curl_slist_free_all(x->hdrs);
        free(x->body);
        gp_buf_done(&x->resp);
        free(x->rep_ids);
        free(x->rep_states);
        free(x->log_ids);
        free(x->log_ends);
        free(x);
}

static int send_xfer(agent *a, xfer *x, const char *path, const char *bearer, int wait_ms) {
        node *n = x->n;
        char url[1100], auth[120];
        snprintf(url, sizeof(url), "%s%s", a->urls[n->url], path);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", bearer);
        gp_buf_init(&x->resp, GP_PROTO_MAX_ANSWER);
        x->h = curl_easy_init();
        x->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
        struct curl_slist *h2 = x->hdrs ? curl_slist_append(x->hdrs, auth) : NULL;
        if (!x->h || !h2)
                return -ENOMEM;
        x->hdrs = h2;
        curl_easy_setopt(x->h, CURLOPT_URL, url);
        curl_easy_setopt(x->h, CURLOPT_POSTFIELDS, x->body);
        curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
        curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
        curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
        curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, (long)wait_ms + (long)GP_PROTO_ANSWER_SLACK_MS);
        curl_easy_setopt(x->h, CURLOPT_PROTOCOLS_STR, "http,https");
        gp_agent_trust_apply(&a->trust, x->h);
        /* Each node keeps its connections (and TLS sessions) in a cache of its own:
         * in the multi handle's one cache, every new request of every simulated node
         * walked all the others' idle connections (curl checks each one's liveness,
         * through its TLS filter), a cost that grew with the nodes and with TLS
         * (docs/benchmarks.md, issue 22).  Without a share it still works, slower. */
        if (!n->share && (n->share = curl_share_init()) &&
            (curl_share_setopt(n->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK ||
             curl_share_setopt(n->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)) {
                curl_share_cleanup(n->share);
                n->share = NULL;
        }
        if (n->share)
                curl_easy_setopt(x->h, CURLOPT_SHARE, n->share);
        if (curl_multi_add_handle(a->multi, x->h) != CURLM_OK)
                return -ENOMEM;
        x->sent_mono = gp_mono_ms();
        x->url = n->url;
        n->inflight++;
        return 0;
}

static void start_join(agent *a, node *n) {
        const gp_proto_gpu *g;
        int ng;
        node_gpus(a, n, &g, &ng);
        gp_proto_join m = {.n_gpus = ng, .gpus = (gp_proto_gpu *)g, .resize = true};
        gp_strlcpy(m.name, n->name, sizeof(m.name));
        gp_strlcpy(m.version, GP_VERSION, sizeof(m.version));
        gp_strlcpy(m.address, a->address, sizeof(m.address));
        gp_strlcpy(m.labels, a->cfg.node_labels, sizeof(m.labels));
        gp_strlcpy(m.backend, a->backend, sizeof(m.backend));
        gp_agent_machine(a->machine_key, n->name, m.machine);
        n->seq = gp_agent_next_seq(n->seq, gp_now_ms() * 1000 + (int64_t)(gp_mono_ms() % 1000));
        m.seq = n->seq;
        xfer *x = calloc(1, sizeof(*x));
        if (!x)
                return;
        x->n = n;
        x->join = true;
        if (gp_proto_join_render(&m, &x->body) < 0 || send_xfer(a, x, "/agent/v1/join", a->token, 0) < 0) {
                xfer_free(x);
                n->next_mono = gp_mono_ms() + 1000;
        }
}

/* The most bytes one message of n may have: what the server said (its
 * server.max_body_bytes), 64 KiB before it said anything. */
static size_t body_budget(const node *n) {
        int64_t m = n->max_body >= GP_PROTO_MIN_BODY ? n->max_body : 65536;
        return (size_t)(m < GP_PROTO_MAX_BODY ? m : GP_PROTO_MAX_BODY);
}

/* Build a sync of n (seq taken) within about `budget` bytes: at most
 * max_runs runs and log_cap log bytes.  A full sync is sent in pages: each
 * lists runs not yet listed since its first page (run.listed), and says
 * `more` while some are left.  *ret_idx: the indices of the runs listed
 * (malloc'd).  NULL when out of memory. */
static xfer *build_sync(agent *a, node *n, int wait_ms, size_t budget, int max_runs, size_t log_cap,
                        size_t **ret_idx) {
        int64_t now = gp_mono_ms();
        size_t nr = n->n_runs ? n->n_runs : 1;
        xfer *x = calloc(1, sizeof(*x));
        gp_proto_sync m = {.wait_ms = wait_ms, .full = n->need_full, .page = n->need_full ? n->page : 0};
        gp_proto_run *runs = calloc(nr, sizeof(*runs));
        gp_proto_log *logs = calloc(nr, sizeof(*logs));
        size_t *idx = calloc(nr, sizeof(*idx));
        if (!x || !runs || !logs || !idx)
                goto fail;
        x->n = n;
        x->full = m.full;
        x->page = m.page;
        x->held = wait_ms > 0;
        x->rep_ids = calloc(nr, sizeof(*x->rep_ids));
        x->rep_states = calloc(nr, sizeof(*x->rep_states));
        x->log_ids = calloc(nr, sizeof(*x->log_ids));
        x->log_ends = calloc(nr, sizeof(*x->log_ends));
        if (!x->rep_ids || !x->rep_states || !x->log_ids || !x->log_ends)
                goto fail;
        gp_strlcpy(m.node, n->name, sizeof(m.node));
        n->seq = gp_agent_next_seq(n->seq, gp_now_ms() * 1000 + (int64_t)(gp_mono_ms() % 1000));
        m.seq = n->seq;
        size_t used = 256; /* the envelope */
        if ((m.full && m.page == 0) || n->gpus_dirty) {
                const gp_proto_gpu *g;
                node_gpus(a, n, &g, &m.n_gpus);
                m.gpus = (gp_proto_gpu *)g;
                m.has_gpus = true;
                for (int i = 0; i < m.n_gpus; i++)
                        used += 96 + 6 * (strlen(g[i].uuid) + strlen(g[i].name));
        }
        /* readings: every GPU's in a full sync's first page, else those that changed since sent */
        const gp_proto_tele *cur;
        int ncur;
        bool all = m.full && m.page == 0;
        node_tele(a, n, &cur, &ncur);
        gp_proto_tele *tl = calloc(ncur ? (size_t)ncur : 1, sizeof(*tl)); /* shallow: cur owns the procs */
        if (!tl)
                goto fail;
        for (int i = 0; i < ncur; i++) {
                const gp_proto_tele *was = sent_of(n, cur[i].index);
                if (all || !was || gp_agent_tele_diff(was, &cur[i], gpu_total_mb(a, cur[i].index)) != GP_AGENT_TELE_SAME) {
                        tl[m.n_tele++] = cur[i];
                        used += 320 + 64 * (size_t)cur[i].n_procs;
                }
        }
        m.tele = tl;
        if (a->host.cpus >= 1 &&
            (all || !n->host_sent_ok || gp_agent_host_diff(&n->host_sent, &a->host) != GP_AGENT_TELE_SAME)) {
                m.has_host = true;
                m.host = a->host;
        }
        uint32_t gen = m.full && m.page == 0 ? n->full_gen + 1 : n->full_gen;
        for (size_t i = 0; i < n->n_runs; i++) {
                run *r = &n->runs[i];
                int st = shown_state(a, r, now);
                if (m.full ? r->listed == gen : !gp_agent_run_in_delta(st, r->reported))
                        continue;
                size_t est = 160 + (st == GP_PROTO_EXITED ? 200 + 6 * strlen(r->result.message) : 0);
                if (m.n_runs >= max_runs || (m.n_runs > 0 && used + est > budget)) {
                        x->more = m.full; /* the rest in the next page */
                        x->cut = !m.full; /* the rest in the next delta */
                        break;
                }
                used += est;
                runs[m.n_runs] = (gp_proto_run){.id = r->id, .state = st, .result = r->result,
                                                .has_alloc = r->elastic && st == GP_PROTO_RUNNING};
                memcpy(runs[m.n_runs].alloc.w, r->gpu_mask, sizeof(r->gpu_mask));
                idx[m.n_runs] = i;
                x->rep_ids[x->nrep] = r->id;
                x->rep_states[x->nrep++] = st;
                m.n_runs++;
        }
        m.more = x->more;
        /* logs fill what is left (base64: 4 bytes per 3), never past GP_PROTO_LOG_TOTAL */
        size_t total = 0, room = budget > used ? (budget - used) / 4 * 3 : 0;
        if (room > log_cap)
                room = log_cap;
        for (size_t i = 0; i < n->n_runs && !a->sim; i++) {
                run *r = &n->runs[i];
                if (r->log_pos >= r->log_size || total + 128 >= room)
                        continue;
                size_t want = (size_t)(r->log_size - r->log_pos);
                if (want > GP_PROTO_LOG_CHUNK)
                        want = GP_PROTO_LOG_CHUNK;
                if (want > room - total - 128)
                        want = room - total - 128;
                char path[PATH_MAX + 80];
                snprintf(path, sizeof(path), "%s/%s/log", a->runs_dir, r->name);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                unsigned char *buf = fd >= 0 ? malloc(want) : NULL;
                ssize_t got = buf ? pread(fd, buf, want, r->log_pos) : -1;
                if (fd >= 0)
                        close(fd);
                if (got <= 0) {
                        free(buf);
                        continue;
                }
                logs[m.n_logs] = (gp_proto_log){.id = r->id, .offset = r->log_pos, .len = (size_t)got, .data = buf};
                x->log_ids[x->nlogs] = r->id;
                x->log_ends[x->nlogs++] = r->log_pos + got;
                m.n_logs++;
                total += (size_t)got + 128;
        }
        m.runs = runs;
        m.logs = logs;
        int rc = gp_proto_sync_render(&m, &x->body);
        for (int i = 0; i < m.n_logs; i++)
                free(logs[i].data);
        free(logs);
        free(runs);
        if (rc == 0) /* a sync that fails is followed by a full one, which sends them all again */
                tele_sent(a, n, tl, m.n_tele, all, m.has_host);
        free(tl);
        if (rc < 0) {
                free(idx);
                xfer_free(x);
                return NULL;
        }
        *ret_idx = idx;
        return x;
fail:
        free(runs);
        free(logs);
        free(idx);
        xfer_free(x);
        return NULL;
}

static void start_sync(agent *a, node *n, int wait_ms) {
        size_t budget = body_budget(n), log_cap = GP_PROTO_LOG_TOTAL, *idx = NULL;
        int max_runs = GP_PROTO_MAX_RUNS;
        xfer *x = NULL;
        /* the estimates are generous; should a message come out too big all the same, halve it */
        for (int tries = 0; tries < 24; tries++) {
                if (!(x = build_sync(a, n, wait_ms, budget, max_runs, log_cap, &idx)))
                        break;
                if (strlen(x->body) <= budget || (max_runs == 1 && log_cap == 0))
                        break;
                xfer_free(x);
                free(idx);
                x = NULL;
                idx = NULL;
                max_runs = max_runs > 1 ? max_runs / 2 : 1;
                log_cap = log_cap > 512 ? log_cap / 2 : 0;
        }
        if (!x || send_xfer(a, x, "/agent/v1/sync", n->cred, wait_ms) < 0) {
                xfer_free(x);
                free(idx);
                n->next_mono = gp_mono_ms() + 1000;
                return;
        }
        if (x->full) {
                if (x->page == 0)
                        n->full_gen++;
                for (int i = 0; i < x->nrep; i++)
                        n->runs[idx[i]].listed = n->full_gen;
        }
        free(idx);
        n->dirty = false;
        n->gpus_dirty = false;
}

/* A message of n sent to URL `url` failed (x->url).  The next goes to
 * the next URL, once: with a held sync and a newer one in flight to a
 * frozen server both fail, and the second must not turn back to it. */
static void failed(agent *a, node *n, int url, const char *why) {
        n->failures++;
        n->need_full = true;
        n->page = 0;
        n->dirty = true;
        n->reachable = false;
        int64_t d = gp_agent_backoff_ms(n->failures, (uint32_t)random());
        n->next_mono = gp_mono_ms() + d;
        if (n->failures == 1 || n->failures % 20 == 0 || !a->sim)
                gp_warn("node %s: %s %s (try %d; next in %lld ms)", n->name, a->urls[n->url], why, n->failures,
                        (long long)d);
        if (a->n_urls > 1 && url == n->url)
                n->url = (n->url + 1) % a->n_urls;
}

static void stop_all_runs(agent *a, node *n) {
        for (size_t i = 0; i < n->n_runs; i++)
                if (n->runs[i].state == GP_PROTO_RUNNING && !a->sim)
                        gp_exec_cancel(&n->runs[i].proc);
}

static void done_join(agent *a, xfer *x, long status) {
        node *n = x->n;
        char err[256];
        gp_proto_join_answer ans;
        if (status == 200 && gp_proto_join_answer_parse(x->resp.data ? x->resp.data : "", x->resp.len, &ans, err,
                                                        sizeof(err)) == 0) {
                gp_strlcpy(n->cred, ans.credential, sizeof(n->cred));
                n->heartbeat_s = ans.heartbeat_s;
                n->max_body = ans.max_body;
                n->page = 0;
                n->failures = 0;
                n->need_full = true;
                n->reachable = true;
                if (strcmp(ans.node, n->name))
                        gp_warn("the server calls this node %s, not %s", ans.node, n->name);
                if (n == &a->nodes[0]) /* a new credential: a new node certificate */
                        gp_agent_tls_credential(a->tls, n->cred, true);
                int rc = save_creds(a);
                if (rc < 0) {
                        gp_error("cannot keep the node credential in %s: %s", a->data_dir, strerror(-rc));
                        a->exit_code = 1;
                }
                if (!a->sim || n == &a->nodes[0] || n == &a->nodes[a->n_nodes - 1])
                        gp_info("joined as %s", n->name);
                return;
        }
        if (status == 401 || status == 403) {
                gp_error("node %s: the join token was refused (%ld): %.200s", n->name, status,
                         x->resp.data ? x->resp.data : "");
                a->exit_code = EXIT_REFUSED;
                return;
        }
        if (status == 400) {
                gp_error("node %s: the server refused the join: %.300s", n->name, x->resp.data ? x->resp.data : "");
                a->exit_code = 1;
                return;
        }
        /* 409: another machine holds the name (the node is live), or a replay: try again later,
         * above the node's join seq when the answer says it */
        int64_t last;
        if (status == 409 && x->resp.data && gp_proto_replay_parse(x->resp.data, x->resp.len, &last) == 0 &&
            last > n->seq)
                n->seq = last;
        snprintf(err, sizeof(err), "answered the join with %ld: %.200s", status, x->resp.data ? x->resp.data : "");
        failed(a, n, x->url, err);
}

static void done_sync(agent *a, xfer *x, long status) {
        node *n = x->n;
        char err[256];
        gp_proto_sync_answer ans;
        if (status == 401) {
                const char *body = x->resp.data ? x->resp.data : "";
                if (strstr(body, "removed")) {
                        gp_error("node %s was removed from the cluster: stopping its runs", n->name);
                        stop_all_runs(a, n);
                        a->exit_code = EXIT_REMOVED;
                } else {
                        gp_error("node %s: the server refused its credential: %.200s (remove %s/node.json and join "
                                 "again with a token)", n->name, body, a->data_dir);
                        a->exit_code = EXIT_REFUSED;
                }
                return;
        }
        if (status != 200) {
                int64_t last;
                const char *body = x->resp.data ? x->resp.data : "", *over = strstr(body, "over ");
                if (status == 409 && gp_proto_replay_parse(body, x->resp.len, &last) == 0 && last > n->seq) {
                        /* the server answered: the message was not taken, its seq was below the floor the
                         * server keeps (a new leader starts at the stored floor, ahead of the last seq).
                         * Go on above it at once, at the same server: moving on to the next URL (the frozen
                         * old leader, say) would wait out its timeout while the runs' fence runs down.  Once
                         * only: a second 409 has last <= n->seq and counts as a failure. */
                        n->seq = last;
                        n->need_full = true;
                        n->page = 0;
                        n->dirty = true;
                        n->reachable = false; /* not synced until the next answer ("synced with") */
                        n->next_mono = gp_mono_ms();
                        gp_info("node %s: %s took syncs up to seq %lld; going on above it", n->name,
                                a->urls[n->url], (long long)last);
                        return;
                }
                if (status == 413) /* "request body over N bytes": take N, else halve */
                        n->max_body = over && strtoll(over + 5, NULL, 10) >= GP_PROTO_MIN_BODY
                                              ? strtoll(over + 5, NULL, 10)
                                              : (int64_t)body_budget(n) / 2;
                snprintf(err, sizeof(err), "answered a sync with %ld: %.150s", status, body);
                failed(a, n, x->url, err);
                return;
        }
        if (gp_proto_sync_answer_parse(x->resp.data ? x->resp.data : "", x->resp.len, &ans, err, sizeof(err)) < 0) {
                char why[300];
                snprintf(why, sizeof(why), "sent a bad sync answer: %s", err);
                failed(a, n, x->url, why);
                return;
        }
        if (!n->reachable || n->failures)
                gp_info("node %s: synced with %s", n->name, a->urls[n->url]);
        n->failures = 0;
        n->reachable = true;
        if (x->full && x->more) { /* the next page at once */
                n->page = x->page + 1;
                n->dirty = true;
        } else if (x->full) {
                n->need_full = false;
                n->page = 0;
        }
        if (x->cut)
                n->dirty = true; /* the rest of the delta */
        if (ans.max_body)
                n->max_body = ans.max_body;
        if (ans.gpu_poll_ms && ans.gpu_poll_ms != a->poll_ms) {
                a->poll_ms = ans.gpu_poll_ms;
                if (a->next_gpus > gp_mono_ms() + a->poll_ms)
                        a->next_gpus = gp_mono_ms() + a->poll_ms;
        }
        n->heartbeat_s = ans.heartbeat_s;
        int frc = a->sim ? 0 : gp_agent_fence_synced(&a->fence, x->sent_mono, ans.fence_s);
        if (frc < 0)
                gp_warn("cannot write %s: %s (runs fence at the deadline written before)", a->fence.path,
                        strerror(-frc));
        for (int i = 0; i < x->nrep; i++) {
                run *r = find_run(n, &x->rep_ids[i]);
                if (r)
                        r->reported = x->rep_states[i];
        }
        for (int i = 0; i < x->nlogs; i++) {
                run *r = find_run(n, &x->log_ids[i]);
                if (r && r->log_pos < x->log_ends[i])
                        r->log_pos = x->log_ends[i];
        }
        for (int i = 0; i < ans.n_offsets; i++) {
                run *r = find_run(n, &ans.offsets[i].id);
                if (r)
                        r->log_pos = ans.offsets[i].offset;
        }
        for (size_t i = 0; x->nlogs > 0 && i < n->n_runs; i++)
                if (n->runs[i].log_pos < n->runs[i].log_size)
                        n->dirty = true; /* more output waits: the next sync at once, not in a second */
        for (int i = 0; i < ans.n_ack; i++)
                ack_run(a, n, &ans.ack[i]);
        for (int i = 0; i < ans.n_stop; i++)
                stop_run(a, n, &ans.stop[i]);
        if (ans.n_start && !a->sim && gp_agent_fence_passed_at(&a->fence, gp_mono_ms())) {
                /* an answer that came too late (this agent was stopped): its starts may have been given
                 * away since; a full sync has the server send the current ones again */
                gp_warn("node %s: an answer came after the fence deadline: its %d starts are left out", n->name,
                        ans.n_start);
                n->need_full = true;
                n->dirty = true;
        } else {
                for (int i = 0; i < ans.n_start; i++)
                        start_run(a, n, &ans.start[i]);
        }
        for (int i = 0; i < ans.n_resize; i++)
                resize_run(a, n, &ans.resize[i]);
        if (ans.want_full) {
                n->need_full = true;
                n->page = 0;
                n->dirty = true;
        }
        gp_proto_sync_answer_done(&ans);
}

static void take_answers(agent *a) {
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(a->multi, &left))) {
                if (msg->msg != CURLMSG_DONE)
                        continue;
                xfer *x = NULL;
                long status = 0;
                curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
                curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
                CURLcode cc = msg->data.result;
                curl_multi_remove_handle(a->multi, msg->easy_handle);
                x->n->inflight--;
                if (cc != CURLE_OK && gp_agent_trust_failed(cc) && x->join) {
                        gp_error("node %s: %s: its certificate is not signed by the CA in %s (%s): refusing to "
                                 "send it the join token (someone in the middle, or a server of another cluster)",
                                 x->n->name, a->urls[x->n->url], a->trust.ca_file, curl_easy_strerror(cc));
                        a->exit_code = GP_AGENT_EXIT_UNTRUSTED;
                } else if (cc != CURLE_OK && gp_agent_trust_failed(cc)) {
                        char why[400];
                        snprintf(why, sizeof(why), "failed the check against the CA in %.200s (%.60s): nothing was sent",
                                 a->trust.ca_file, curl_easy_strerror(cc));
                        failed(a, x->n, x->url, why);
                } else if (cc != CURLE_OK) {
                        char why[300];
                        snprintf(why, sizeof(why), "unreachable: %s", curl_easy_strerror(cc));
                        failed(a, x->n, x->url, why);
                } else if (x->join) {
                        done_join(a, x, status);
                } else {
                        done_sync(a, x, status);
                }
                xfer_free(x);
        }
}

/* ---------------------------------------------------------------- status API */

static void render_status(agent *a) {
        json_t *runs = json_array();
        size_t total = 0;
        bool reachable = false;
        for (int i = 0; i < a->n_nodes; i++) {
                node *n = &a->nodes[i];
                reachable |= n->reachable;
                total += n->n_runs;
                for (size_t k = 0; runs && k < n->n_runs && json_array_size(runs) < 10000; k++) {
                        run *r = &n->runs[k];
                        json_t *o = json_pack("{s:s, s:I, s:I, s:i, s:s}", "node", n->name, "task",
                                              (json_int_t)r->id.task, "epoch", (json_int_t)r->id.epoch, "rank",
                                              r->id.rank, "state",
                                              r->state == GP_PROTO_RUNNING ? "running" : "exited");
                        if (o && r->state == GP_PROTO_EXITED)
                                json_object_set_new(o, "message", json_string(r->result.message));
                        json_array_append_new(runs, o);
                }
        }
        json_t *st = json_pack("{s:s, s:s, s:i, s:b, s:o*}", "node", a->nodes[0].name, "backend", a->backend, "nodes",
                               a->n_nodes, "server_reachable", reachable, "runs", runs);
        bool lany;
        const char *ltls = gp_agent_tls_state(a->tls, &lany);
        json_t *h = json_pack("{s:s, s:s, s:b, s:I, s:i, s:s, s:s*, s:s, s:b}", "node", a->nodes[0].name, "backend",
                              a->backend, "server_reachable", reachable, "runs", (json_int_t)total, "nodes", a->n_nodes,
                              "tls", a->trust.mode[0] ? a->trust.mode : "pending", "warning",
                              a->trust.warning[0] ? a->trust.warning : NULL, "listen_tls", ltls,
                              "listen_plaintext_any", lany);
        char *s1 = st ? json_dumps(st, JSON_COMPACT) : NULL, *s2 = h ? json_dumps(h, JSON_COMPACT) : NULL;
        json_decref(st);
        json_decref(h);
        pthread_mutex_lock(&a->lock);
        if (s1) {
                free(a->status_json);
                a->status_json = s1;
        }
        if (s2) {
                free(a->health_json);
                a->health_json = s2;
        }
        pthread_mutex_unlock(&a->lock);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
        (void)version;
        (void)upload;
        (void)con_cls;
        agent *a = cls;
        char *body = NULL;
        unsigned status = 200;
        if (*upload_size)
                return MHD_NO;
        if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
                status = 405;
                body = strdup("{\"error\":\"read-only: GET only\"}");
        } else {
                pthread_mutex_lock(&a->lock);
                if (!strcmp(url, "/health"))
                        body = strdup(a->health_json ? a->health_json : "{}");
                else if (!strcmp(url, "/v1/status"))
                        body = strdup(a->status_json ? a->status_json : "{}");
                pthread_mutex_unlock(&a->lock);
                if (!body && strcmp(url, "/health") && strcmp(url, "/v1/status")) {
                        status = 404;
                        body = strdup("{\"error\":\"not found: GET /health or /v1/status\"}");
                }
        }
        if (!body)
                return MHD_NO;
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "application/json");
        enum MHD_Result ret = MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        return ret;
}

/* ---------------------------------------------------------------- main */

static void usage(FILE *f) {
        fprintf(f, "usage: gpupool agent --server URL[,URL...] --token TOKEN [--config FILE] [--name NODE]\n"
                   "                     [--listen ADDR:PORT] [--data-dir DIR] [--sim-nodes N] [--ca-cert FILE]\n"
                   "                     [--insecure-skip-verify] [--insecure-plaintext] [--insecure-listen-plaintext]\n"
                   "  --server also from GPUPOOL_SERVER_URLS, --token from GPUPOOL_JOIN_TOKEN (needed only to join)\n"
                   "  https:// servers are checked against their CA: the hash a join token carries\n"
                   "  (gpj_SECRET.HASH) or --ca-cert FILE, kept in DATA_DIR/ca.crt; http:// only on loopback\n"
                   "  --listen serves TLS with a node certificate the server issues (DATA_DIR/tls/node.crt);\n"
                   "  plain HTTP there only to loopback clients unless --insecure-listen-plaintext\n"
                   "  exit codes: 0 stopped by SIGTERM (runs go on), 1 could not start, 2 usage,\n"
                   "              77 join token or credential refused, 78 node removed,\n"
                   "              79 the server failed the check (nothing secret was sent)\n");
}

static void short_host(char *out, size_t size) {
        char hn[256] = "";
        gethostname(hn, sizeof(hn) - 1);
        hn[strcspn(hn, ".")] = '\0';
        for (char *p = hn; *p; p++)
                if (!gp_id_ok(p, 1))
                        *p = '-';
        if (!hn[0] || !strcmp(hn, "local"))
                gp_strlcpy(hn, "node", sizeof(hn));
        hn[size > 1 && size - 1 < sizeof(hn) ? size - 1 : sizeof(hn) - 1] = '\0';
        gp_strlcpy(out, hn, size);
}

static int split_urls(agent *a, const char *list) {
        char tmp[4096];
        if (gp_strlcpy(tmp, list, sizeof(tmp)) >= sizeof(tmp))
                return -EINVAL;
        for (char *save = NULL, *u = strtok_r(tmp, ",", &save); u; u = strtok_r(NULL, ",", &save)) {
                size_t n = strlen(u);
                while (n > 0 && u[n - 1] == '/')
                        u[--n] = '\0';
                if (a->n_urls == MAX_URLS || n > 1000 || (strncmp(u, "http://", 7) && strncmp(u, "https://", 8)))
                        return -EINVAL;
                if (!(a->urls[a->n_urls++] = strdup(u)))
                        return -ENOMEM;
        }
        return a->n_urls > 0 ? 0 : -EINVAL;
}

/* The pool's needed(): the GPUs of this agent's running MPS clients. */
static bool mps_needed(void *ud, bool *needed) {
        agent *a = ud;
        for (int i = 0; i < a->n_nodes; i++)
                for (size_t k = 0; k < a->nodes[i].n_runs; k++) {
                        const run *r = &a->nodes[i].runs[k];
                        if (r->state == GP_PROTO_RUNNING && r->mps_gpu > 0 && r->mps_gpu <= GP_MPS_MAX_GPUS)
                                needed[r->mps_gpu - 1] = true;
                }
        return true;
}

static void loop(agent *a) {
        int64_t next_logs = 0, next_status = 0;
        struct pollfd *wfd = NULL;    /* [0]: curl's sockets (agent-curl.h); then supervisors' pidfds */
        size_t cap_wfd = 0;
        while (a->exit_code < 0 && !stop_signal) {
                int64_t now = gp_mono_ms();
                if (now >= a->next_gpus) {
                        bool changed = false;
                        a->next_gpus = now + a->poll_ms;
                        gp_host_read(a->data_dir, &a->host);
                        if (!a->sim && read_gpus(a, &changed) == 0 && changed) {
                                a->nodes[0].gpus_dirty = true;
                                a->nodes[0].dirty = true;
                                gp_info("GPUs changed: reporting them");
                        }
                        for (int i = 0; i < a->n_nodes; i++) {
                                if (a->sim)
                                        sim_readings(a, &a->nodes[i]);
                                tele_check(a, &a->nodes[i]);
                        }
                }
                if (a->mps) /* MPS daemons without clients quit */
                        gp_mps_pool_look(a->mps, now, mps_needed, a);
                if (!a->sim && gp_agent_fence_passed(&a->fence, now))
                        gp_warn("no answered sync for %d s: the runs that fence are stopped by their supervisors",
                                a->fence.fence_s);
                bool logs_now = now >= next_logs;
                if (logs_now)
                        next_logs = now + 1000;
                size_t nw = 1;
                if (!wfd) {
                        struct pollfd *p = gp_vec_grow(wfd, &cap_wfd, 1, sizeof(*wfd), 16);
                        if (!p)
                                break;
                        wfd = p;
                }
                for (int i = 0; i < a->n_nodes; i++) {
                        node *n = &a->nodes[i];
                        for (size_t k = 0; k < n->n_runs; k++) {
                                run *r = &n->runs[k];
                                if (a->sim && r->state == GP_PROTO_RUNNING && now >= r->sim_end_mono) {
                                        gp_exec_result res = {.end = GP_EXEC_EXITED, .finished_ms = gp_now_ms()};
                                        snprintf(res.message, sizeof(res.message), "exited with code 0");
                                        end_run(n, r, &res);
                                }
                                if (r->state == GP_PROTO_EXITED && r->reported != GP_PROTO_EXITED &&
                                    shown_state(a, r, now) == GP_PROTO_EXITED)
                                        n->dirty = true;
                                if (r->pidfd >= 0) {
                                        struct pollfd *p = gp_vec_grow(wfd, &cap_wfd, nw + 1, sizeof(*wfd), 16);
                                        if (p) {
                                                wfd = p;
                                                wfd[nw++] = (struct pollfd){.fd = r->pidfd, .events = POLLIN};
                                        }
                                }
                        }
                        if (!a->sim && logs_now)
                                look_at_logs(a, n);
                        if (now < n->next_mono || n->inflight >= 2)
                                continue;
                        if (!n->cred[0]) {
                                if (n->inflight == 0)
                                        start_join(a, n);
                        } else if (n->inflight == 0) {
                                start_sync(a, n, n->dirty || n->need_full ? 0 : n->heartbeat_s * 1000);
                        } else if (n->dirty && !n->need_full) {
                                start_sync(a, n, 0); /* answers the held one at once */
                        }
                }
                gp_agent_curl_run(a->multi, a->epfd);
                take_answers(a);
                if (now >= next_status) {
                        render_status(a);
                        next_status = now + 1000;
                }
                if (a->exit_code >= 0)
                        break;
                /* a node with more to send now (the next page, more output) does not wait */
                int wait = 200;
                for (int i = 0; i < a->n_nodes && wait; i++) {
                        const node *n = &a->nodes[i];
                        if (n->dirty && n->cred[0] && now >= n->next_mono &&
                            (n->inflight == 0 || (n->inflight == 1 && !n->need_full)))
                                wait = 0;
                }
                gp_agent_curl_wait(a->multi, a->epfd, wfd, nw, wait);
                /* a supervisor ended: its pidfd is readable */
                for (size_t w = 1; w < nw; w++) {
                        if (!(wfd[w].revents & POLLIN))
                                continue;
                        for (int i = 0; i < a->n_nodes; i++)
                                for (size_t k = 0; k < a->nodes[i].n_runs; k++)
                                        if (a->nodes[i].runs[k].pidfd == wfd[w].fd)
                                                collect(a, &a->nodes[i], &a->nodes[i].runs[k]);
                }
        }
        free(wfd);
}

int gp_agent_main(int argc, char **argv) {
        static const struct option opts[] = {
                {"server", required_argument, NULL, 's'}, {"token", required_argument, NULL, 't'},
                {"config", required_argument, NULL, 'c'}, {"name", required_argument, NULL, 'n'},
                {"listen", required_argument, NULL, 'l'}, {"data-dir", required_argument, NULL, 'd'},
                {"sim-nodes", required_argument, NULL, 'N'}, {"help", no_argument, NULL, 'h'},
                {"ca-cert", required_argument, NULL, 'C'}, {"insecure-skip-verify", no_argument, NULL, 'K'},
                {"insecure-plaintext", no_argument, NULL, 'P'},
                {"insecure-listen-plaintext", no_argument, NULL, 'L'}, {NULL, 0, NULL, 0},
        };
        const char *servers = getenv("GPUPOOL_SERVER_URLS"), *token = getenv("GPUPOOL_JOIN_TOKEN");
        const char *config = NULL, *name = NULL, *listen_addr = NULL, *data_dir = NULL, *ca_cert = NULL;
        bool skip_verify = false, plaintext = false, listen_plaintext = false;
        int64_t sim_nodes = 0;
        int c, rc = 1;
        optind = 1;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                switch (c) {
                case 's': servers = optarg; break;
                case 't': token = optarg; break;
                case 'c': config = optarg; break;
                case 'n': name = optarg; break;
                case 'l': listen_addr = optarg; break;
                case 'd': data_dir = optarg; break;
                case 'C': ca_cert = optarg; break;
                case 'K': skip_verify = true; break;
                case 'P': plaintext = true; break;
                case 'L': listen_plaintext = true; break;
                case 'N':
                        if (gp_parse_i64(optarg, 1, MAX_SIM_NODES, &sim_nodes) < 0) {
                                fprintf(stderr, "gpupool agent: --sim-nodes must be 1..%d\n", MAX_SIM_NODES);
                                return 2;
                        }
                        break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "gpupool agent: unexpected argument %s\n", argv[optind]);
                usage(stderr);
                return 2;
        }
        static agent a0;
        agent *a = &a0;
        a->exit_code = -1;
        pthread_mutex_init(&a->lock, NULL);
        char err[1024];
        gp_config_defaults(&a->cfg);
        if (config && gp_config_load(config, &a->cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool agent: %s\n", err);
                return 1;
        }
        if (!servers || split_urls(a, servers) < 0) {
                fprintf(stderr, "gpupool agent: --server URL[,URL...] (http:// or https://, at most %d) is needed\n",
                        MAX_URLS);
                return 2;
        }
        if (token && gp_proto_join_token_split(token, a->token, a->token_ca) < 0) {
                fprintf(stderr, "gpupool agent: a join token is gpj_ and 64 lowercase hex digits, then the server "
                                "CA's hash: a '.' and 64 more\n");
                return 2;
        }
        gp_agent_trust_opts topts = {.ca_cert = ca_cert, .ca_hash = a->token_ca, .insecure_plaintext = plaintext,
                                     .insecure_skip_verify = skip_verify, .urls = a->urls, .n_urls = a->n_urls,
                                     .stop = &stop_signal};
        if (gp_agent_trust_check_urls(&topts, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool agent: %s\n", err);
                return 2;
        }
        char base[GP_NODE_MAX];
        if (name) {
                if (!gp_proto_node_name_ok(name)) {
                        fprintf(stderr, "gpupool agent: --name must be 1..%d of [A-Za-z0-9._-], not local\n",
                                GP_NODE_MAX - 1);
                        return 2;
                }
                gp_strlcpy(base, name, sizeof(base));
        } else if (a->cfg.node_name[0]) {
                gp_strlcpy(base, a->cfg.node_name, sizeof(base));
        } else {
                short_host(base, sizeof(base));
        }
        if (sim_nodes > 0 && strlen(base) > GP_NODE_MAX - 6)
                base[GP_NODE_MAX - 6] = '\0';
        gp_strlcpy(a->data_dir, data_dir ? data_dir : a->cfg.agent_data_dir, sizeof(a->data_dir));
        snprintf(a->runs_dir, sizeof(a->runs_dir), "%.*s/runs", PATH_MAX - 8, a->data_dir);
        if ((rc = mkdirs(a->runs_dir)) < 0) {
                fprintf(stderr, "gpupool agent: cannot make %s: %s\n", a->runs_dir, strerror(-rc));
                return 1;
        }
        a->sim = sim_nodes > 0;
        a->poll_ms = GPU_POLL_MS;
        char cgwhy[400] = "";
        if (!a->sim && (a->host.cgroup = gp_cgroup_setup(cgwhy, sizeof(cgwhy))) > 0) /* a cgroup per run */
                gp_info("cgroups: %s: every run in a cgroup of its own", gp_cgroup_version_name(a->host.cgroup));
        else if (!a->sim)
                gp_warn("cgroups: none usable (%s): runs go without CPU and RAM limits", cgwhy);
        if (!a->sim && (rc = gp_agent_fence_init(&a->fence, a->data_dir)) < 0) {
                fprintf(stderr, "gpupool agent: cannot name the fence file in %s: %s\n", a->data_dir, strerror(-rc));
                return 1;
        }
        if (!a->sim && (rc = gp_exe_sibling(GP_EXE_CLIENT, a->self_exe, sizeof(a->self_exe))) < 0) {
                fprintf(stderr, "gpupool agent: cannot find %s next to this program: %s\n", GP_EXE_CLIENT,
                        strerror(-rc));
                return 1;
        }
        if (!a->sim && (rc = gp_agent_mps_open(&a->cfg, a->data_dir, &a->mps, err, sizeof(err))) < 0) {
                fprintf(stderr, "gpupool agent: %s\n", err);
                return 1;
        }
        if (!strcmp(a->cfg.gpu_backend, "none")) {
                fprintf(stderr, "gpupool agent: gpus.backend none is for a server; an agent needs GPUs\n");
                return 1;
        }
        gp_gpu_options go = {.backend = a->sim ? "sim" : a->cfg.gpu_backend, .nvml_library = a->cfg.nvml_library,
                             .sim = a->cfg.sim, .n_sim = a->cfg.n_sim};
        if ((rc = gp_gpu_open(&go, &a->gpu, err, sizeof(err))) < 0) {
                fprintf(stderr, "gpupool agent: %s\n", err);
                return 1;
        }
        a->backend = gp_gpu_backend_name(a->gpu);
        if (!a->sim && !strcmp(a->backend, "sim"))
                gp_strlcpy(a->uuid_node, base, sizeof(a->uuid_node));
        if ((rc = load_machine_key(a)) < 0) {
                fprintf(stderr, "gpupool agent: cannot keep the machine key in %s: %s\n", a->data_dir, strerror(-rc));
                return 1;
        }
        bool unused;
        if ((rc = read_gpus(a, &unused)) < 0) {
                fprintf(stderr, "gpupool agent: cannot read the GPUs: %s\n", gp_strerror(rc));
                return 1;
        }
        a->n_nodes = a->sim ? (int)sim_nodes : 1;
        a->nodes = calloc((size_t)a->n_nodes, sizeof(*a->nodes));
        if (!a->nodes)
                return 1;
        for (int i = 0; i < a->n_nodes; i++) {
                node *n = &a->nodes[i];
                if (a->sim) {
                        char tmp[GP_NODE_MAX + 16]; /* base was cut to fit NAME-0000 */
                        snprintf(tmp, sizeof(tmp), "%s-%04d", base, i);
                        gp_strlcpy(n->name, tmp, sizeof(n->name));
                } else
                        gp_strlcpy(n->name, base, sizeof(n->name));
                n->need_full = true;
                n->heartbeat_s = a->cfg.agent_heartbeat_s;
                n->url = i % a->n_urls;
                n->next_mono = gp_mono_ms() + (a->sim ? (int64_t)i * 2 : 0); /* spread the joins */
                if (a->sim) {
                        n->gpus = calloc(a->n_gpus ? (size_t)a->n_gpus : 1, sizeof(*n->gpus));
                        if (!n->gpus)
                                return 1;
                        n->n_gpus = a->n_gpus;
                        for (int g = 0; g < a->n_gpus; g++) {
                                n->gpus[g] = a->gpus[g];
                                snprintf(n->gpus[g].uuid, sizeof(n->gpus[g].uuid), "SIM-%.40s-%d", n->name, g);
                        }
                }
        }
        load_creds(a);
        for (int i = 0; i < a->n_nodes; i++)
                if (!a->nodes[i].cred[0] && !a->token[0]) {
                        fprintf(stderr, "gpupool agent: node %s has not joined yet: give --token (or "
                                        "GPUPOOL_JOIN_TOKEN)\n", a->nodes[i].name);
                        return 2;
                }
        if (!a->sim)
                scan_runs(a, &a->nodes[0]);
        struct rlimit rl;
        if (a->sim && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        gp_agent_tls_opts lo = {.data_dir = a->data_dir, .listen = listen_addr ? listen_addr : a->cfg.agent_listen,
                                .plaintext_any = listen_plaintext, .handler = on_request, .handler_cls = a};
        err[0] = '\0';
        if ((rc = gp_agent_tls_open(&lo, &a->tls, a->address, sizeof(a->address), err, sizeof(err))) < 0) {
                fprintf(stderr, "gpupool agent: cannot listen on %s: %s\n", lo.listen,
                        rc == -EINVAL && !err[0] ? "expected IPv4ADDR:PORT" : err);
                return 1;
        }
        struct sigaction sa = {.sa_handler = on_signal};
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        srandom((unsigned)(gp_now_ms() ^ getpid()));
        curl_global_init(CURL_GLOBAL_DEFAULT);
        a->multi = curl_multi_init();
        if (!a->multi || (a->epfd = gp_agent_curl_open(a->multi)) < 0)
                return 1;
        render_status(a);
        topts.data_dir = a->data_dir;
        if ((rc = gp_agent_trust_setup(&topts, &a->trust, err, sizeof(err))) < 0) {
                if (rc != -ECANCELED)
                        gp_error("%s", err);
                gp_agent_tls_stop(a->tls);
                return rc == -ECANCELED ? 0 : rc == -EINVAL ? 2 : rc == -EPERM ? GP_AGENT_EXIT_UNTRUSTED : 1;
        }
        gp_info("gpupool agent %s: %s%s, backend %s, %d GPUs, %s (%s%s%s), data in %s, status on %s", GP_VERSION,
                a->sim ? "simulating nodes from " : "node ", a->nodes[0].name, a->backend, a->n_gpus, a->urls[0],
                a->trust.mode, a->trust.ca_hash[0] ? " against CA " : "", a->trust.ca_hash, a->data_dir, a->address);
        if ((rc = gp_agent_tls_start(a->tls, &a->trust, a->urls, a->n_urls, a->nodes[0].name)) < 0) {
                gp_error("cannot start the node certificate's thread: %s", strerror(-rc));
                gp_agent_tls_stop(a->tls);
                return 1;
        }
        if (a->nodes[0].cred[0])
                gp_agent_tls_credential(a->tls, a->nodes[0].cred, false);
        render_status(a);
        loop(a);
        rc = a->exit_code >= 0 ? a->exit_code : 0;
        gp_info("gpupool agent stops (%d); runs go on under their supervisors", rc);
        gp_agent_tls_stop(a->tls);
        /* leave in-flight syncs: exiting closes them */
        return rc;
}
