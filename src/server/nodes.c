/* nodes.c - the pool's nodes: join, sync, liveness, drain and removal
 * (docs/internals/cluster.md is the contract; nodes.h the boundaries).
 *
 * Threads: the handlers of the agent routes run on MHD threads.  They parse and
 * authenticate, and a sync that only says "alive" (no runs, GPUs or logs)
 * is answered there, or held until there is something to send; every
 * other message becomes a command for the loop thread, which applies it
 * in its batch and answers once the batch is durable.  Everything here is
 * under d->lock.
 */
#include "server/nodes.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/labels.h"
#include "base/list.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/util.h"
#include "base/vec.h"
#include "cluster/ident.h"
#include "server/ca.h"
#include "server/commit.h"
#include "server/monitor.h"
#include "server/nodes-fence.h"
#include "server/nodes-int.h"
#include "server/nodes-join.h"
#include "server/nodes-run.h"
#include "server/nodes-tele.h"
#include "server/runlog.h"
#include "server/cluster-host.h"
#include "server/tenants.h"

#define MAX_NODES 5000          /* nodes that have not left */
#define MAX_RECORDS 10000       /* nodes kept, left ones included (the oldest left one makes room) */
#define ANSWER_BUDGET (8 << 20) /* estimated bytes of the starts of one sync answer (the agent takes 16 MiB) */
#define NODE_META_MAX (1 << 20) /* a stored node record or index */


/* A run in a node's fullset (one rank of a task per node; epochs stay far below 2^20). */
#define FULL_KEY(task, epoch) ((int64_t)(((uint64_t)(task) << 20) ^ ((uint64_t)(epoch) & 0xfffff)))

static int64_t name_key(const char *s) {
        uint64_t h = 1469598103934665603ull;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ull;
        return (int64_t)(h >> 1);
}

static void oom(void) {
        gp_error("out of memory in the node registry; stopping");
        _exit(70);
}

/* n's record is to be stored with this batch. */
static void mark_dirty(gp_nodes *ns, gp_node *n) {
        if (n->dirty)
                return;
        gp_node **v = gp_vec_grow(ns->dirty, &ns->capdirty, ns->ndirty + 1, sizeof(*v), 16);
        if (!v)
                oom();
        ns->dirty = v;
        v[ns->ndirty++] = n;
        n->dirty = true;
}

/* n has something new to send: gp_nodes_flush looks at it (and only the
 * nodes so marked, never all of them). */
static void touch(gp_nodes *ns, gp_node *n) {
        if (n->touched)
                return;
        gp_node **v = gp_vec_grow(ns->touched, &ns->captouched, ns->ntouched + 1, sizeof(*v), 16);
        if (!v)
                oom();
        ns->touched = v;
        v[ns->ntouched++] = n;
        n->touched = true;
}

static gp_node *find(gp_nodes *ns, const char *name) {
        gp_node *n = gp_i64map_get(&ns->by_name, name_key(name));
        return n && !strcmp(n->name, name) ? n : NULL;
}

/* ---- events and outboxes ---- */

static gp_node_ev *event(gp_nodes *ns, gp_node_ev_kind kind, int64_t task, int rank) {
        gp_node_ev *v = gp_vec_grow(ns->ev, &ns->capev, ns->nev + 1, sizeof(*v), 16);
        if (!v)
                oom();
        ns->ev = v;
        gp_node_ev *e = &v[ns->nev++];
        memset(e, 0, sizeof(*e));
        e->kind = kind;
        e->task = task;
        e->rank = rank;
        return e;
}

/* Put run id into one of n's run-id outboxes (starts, resizes), once. */
static void push_id(gp_nodes *ns, gp_node *n, gp_proto_run_id **box, size_t *len, size_t *cap, gp_proto_run_id id) {
        touch(ns, n);
        for (size_t i = 0; i < *len; i++)
                if ((*box)[i].task == id.task && (*box)[i].epoch == id.epoch)
                        return;
        gp_proto_run_id *v = gp_vec_grow(*box, cap, *len + 1, sizeof(*v), 8);
        if (!v)
                oom();
        *box = v;
        v[(*len)++] = id;
}

static void push_start(gp_nodes *ns, gp_node *n, gp_proto_run_id id) {
        push_id(ns, n, &n->ostart, &n->nostart, &n->capostart, id);
}

static void push_resize(gp_nodes *ns, gp_node *n, gp_proto_run_id id) {
        push_id(ns, n, &n->oresize, &n->noresize, &n->caporesize, id);
}

static void push_stop(gp_nodes *ns, gp_node *n, gp_proto_run_id id, gp_proto_stop_why why) {
        touch(ns, n);
        for (size_t i = 0; i < n->nostop; i++)
                if (n->ostop[i].id.task == id.task && n->ostop[i].id.epoch == id.epoch &&
                    n->ostop[i].id.rank == id.rank)
                        return;
        gp_proto_stop *v = gp_vec_grow(n->ostop, &n->capostop, n->nostop + 1, sizeof(*v), 8);
        if (!v)
                oom();
        n->ostop = v;
        v[n->nostop++] = (gp_proto_stop){id, why};
}

/* ---- a task's nodes ---- */

bool gp_nodes_remote(const gp_task *t) {
        return t->n_gpus > 0 && strcmp(t->gpus[0].node, "local") != 0;
}

/* The rank of node `name` among t's nodes (distinct, in GPU order), or -1. */
static int rank_of(const gp_task *t, const char *name) {
        int rank = -1;
        const char *prev = NULL;
        for (int i = 0; i < t->n_gpus; i++) {
                if (!prev || strcmp(prev, t->gpus[i].node)) {
                        rank++;
                        prev = t->gpus[i].node;
                        if (!strcmp(prev, name))
                                return rank;
                }
        }
        return -1;
}

/* The node of rank `rank` of t (NULL if none). */
static const char *node_at(const gp_task *t, int rank) {
        int k = -1;
        for (int i = 0; i < t->n_gpus; i++)
                if (i == 0 || strcmp(t->gpus[i - 1].node, t->gpus[i].node))
                        if (++k == rank)
                                return t->gpus[i].node;
        return NULL;
}

/* Is this run t's current run on node n?  Not a run of a task elastic
 * in nodes that gave n up (stopped, not as a cancel, in this very epoch):
 * if the task takes n again, its new rank there may carry the old run's
 * id, and the old run's end is not the task's. */
static bool current(const gp_task *t, const gp_node *n, gp_proto_run_id id) {
        if (!t || t->state != GP_TASK_RUNNING || t->is_lease || !gp_nodes_remote(t) ||
            id.epoch != gp_task_run_epoch(t) || rank_of(t, n->name) != id.rank)
                return false;
        intptr_t st = t->elastic_max_nodes > 0 ? (intptr_t)gp_i64map_get(&n->stopping, id.task) : 0;
        return !st || ((st - 1) >> 2) != id.epoch || ((st - 1) & 3) == GP_PROTO_STOP_CANCEL;
}

/* ---- the registry ---- */

static void look_at_clock(gp_nodes *ns);

static void hb_touch(gp_nodes *ns, gp_node *n, int64_t now) {
        look_at_clock(ns); /* a pause found now is not this node's */
        n->hb_ms = now;
        n->hb_mono = gp_mono_ms();
        n->paused_at = ns->pause.paused_ms;
        gp_list_del(&n->hb);
        if (n->state == GP_NODE_READY || n->state == GP_NODE_DRAINING) {
                gp_list_add_tail(&ns->by_hb, &n->hb);
                gp_list_del(&n->fl); /* back: its runs go on */
        }
}

/* When (monotonic) n has been silent for ms of the server's running time:
 * a step of the wall clock neither hastens a give-away nor a loss. */
static int64_t silent_until(const gp_nodes *ns, const gp_node *n, int64_t ms) {
        return n->hb_mono + ms + (ns->pause.paused_ms - n->paused_at);
}

static gp_node *node_new(gp_nodes *ns, const char *name) {
        if (ns->n >= MAX_RECORDS)
                return NULL;
        gp_node *n = calloc(1, sizeof(*n));
        gp_node **v = gp_vec_grow(ns->v, &ns->cap, ns->n + 1, sizeof(*v), 16);
        if (!n || !v) {
                free(n);
                if (v)
                        ns->v = v;
                return NULL;
        }
        ns->v = v;
        gp_strlcpy(n->name, name, sizeof(n->name));
        gp_list_init(&n->hb);
        gp_list_init(&n->hl);
        gp_list_init(&n->fl);
        gp_i64map_init(&n->seen);
        gp_i64map_init(&n->stopping);
        gp_i64map_init(&n->fullset);
        n->full_page = -1;
        if (gp_i64map_put(&ns->by_name, name_key(name), n) < 0) {
                free(n);
                return NULL;
        }
        v[ns->n++] = n;
        ns->index_dirty = true;
        return n;
}

/* Put node n's GPUs into the scheduler (or revive them) with its labels;
 * usable unless the node is lost or left; drained with the node. */
static void node_inventory(gp_daemon *d, gp_node *n) {
        for (int i = 0; i < n->ngpus; i++) {
                node_gpu *g = &n->gpus[i];
                gp_sched_gpu_desc desc = {.node = n->name, .index = g->g.index, .uuid = g->g.uuid,
                                          .name = g->g.name, .memory_total_mb = g->g.memory_mb > 0 ? g->g.memory_mb : 1};
                int rc = gp_sched_gpu_add(gp_daemon_sched(d), &desc, &g->sid);
                if (rc == -EEXIST)
                        rc = gp_sched_gpu_find(gp_daemon_sched(d), n->name, g->g.index, &g->sid);
                if (rc < 0) {
                        gp_warn("node %s: GPU %d not added to the pool: %s", n->name, g->g.index, gp_strerror(rc));
                        g->sid = UINT32_MAX;
                        continue;
                }
                /* no new work before its agent synced since this server started */
                bool up = g->g.healthy && !n->restored && (n->state == GP_NODE_READY || n->state == GP_NODE_DRAINING);
                gp_sched_gpu_set_healthy(gp_daemon_sched(d), g->sid, up);
        }
        gp_sched_node_set_drained(gp_daemon_sched(d), n->name, n->drain);
        /* an agent runs parts of multi-node tasks, and elastic tasks when it applies resizes
         * (an older agent would not tell its task that GPUs were taken away) */
        gp_sched_node_set_allow(gp_daemon_sched(d), n->name,
                                GP_SCHED_NODE_MULTI | (n->resize ? GP_SCHED_NODE_ELASTIC : 0));
        /* its labels (at most GP_LABELS_N, no gpupool/ key: checked at join) and the implicit one */
        char labels[GP_LABELS_MAX + 80];
        snprintf(labels, sizeof(labels), "%s%sgpupool/node=%s", n->labels, n->labels[0] ? "," : "", n->name);
        int lrc = gp_sched_node_set_labels(gp_daemon_sched(d), n->name, labels);
        if (lrc < 0)
                gp_warn("node %s: its labels are not the scheduler's: %s", n->name, gp_strerror(lrc));
}

/* Put n's GPU uuids into the index (add) or take them out. */
static void uuid_index(gp_nodes *ns, gp_node *n, bool add) {
        for (int i = 0; i < n->ngpus; i++) {
                int64_t key = name_key(n->gpus[i].g.uuid);
                if (add && gp_i64map_put(&ns->by_uuid, key, n) < 0)
                        oom();
                if (!add && gp_i64map_get(&ns->by_uuid, key) == n)
                        gp_i64map_del(&ns->by_uuid, key);
        }
}

/* Every task on GPU sid (all of them, however many share it): *ret_n ids
 * in a malloc'd array. */
static int64_t *gpu_tasks(gp_daemon *d, uint32_t sid, int *ret_n) {
        int64_t few[64];
        int k = gp_sched_gpu_tasks(gp_daemon_sched(d), sid, few, 64);
        int64_t *v = malloc((size_t)(k > 0 ? k : 1) * sizeof(*v));
        if (!v)
                oom();
        if (k <= 64)
                memcpy(v, few, (size_t)k * sizeof(*v));
        else
                k = gp_sched_gpu_tasks(gp_daemon_sched(d), sid, v, k);
        *ret_n = k;
        return v;
}

/* Every active task with a GPU on node n: ids into *ret (malloc'd). */
static size_t node_tasks(gp_daemon *d, const gp_node *n, int64_t **ret) {
        int64_t *v = NULL;
        size_t nv = 0, cap = 0;
        for (int i = 0; i < n->ngpus; i++) {
                if (n->gpus[i].sid == UINT32_MAX)
                        continue;
                int k;
                int64_t *ids = gpu_tasks(d, n->gpus[i].sid, &k);
                for (int j = 0; j < k; j++) {
                        bool dup = false;
                        for (size_t x = 0; x < nv && !dup; x++)
                                dup = v[x] == ids[j];
                        if (dup)
                                continue;
                        int64_t *w = gp_vec_grow(v, &cap, nv + 1, sizeof(*w), 16);
                        if (!w)
                                oom();
                        v = w;
                        v[nv++] = ids[j];
                }
                free(ids);
        }
        *ret = v;
        return nv;
}

/* Forget a full sync in pages that n was sending. */
static void full_reset(gp_node *n) {
        gp_i64map_done(&n->fullset);
        gp_i64map_init(&n->fullset);
        n->full_page = -1;
}

/* Node n is gone for its tasks (lost, removed): every task on it gets an
 * event, and what was to be sent to it is dropped.  Or, with only_unfenced
 * (a node just lost), only its tasks that do not fence get events (leases,
 * on_node_lost requeue); the others wait for the fence (gp_nodes_tick). */
static void node_gone(gp_daemon *d, gp_node *n, const char *why, bool only_unfenced) {
        int64_t *ids;
        size_t k = node_tasks(d, n, &ids);
        for (size_t i = 0; i < k; i++) {
                gp_task *t = gp_daemon_task(d, ids[i]);
                if (!t || t->state != GP_TASK_RUNNING || (only_unfenced && gp_task_fences(t)))
                        continue;
                gp_node_ev *e = event(gp_daemon_nodes(d), GP_NODE_EV_LOST, t->id, rank_of(t, n->name));
                gp_strlcpy(e->why, why, sizeof(e->why));
        }
        free(ids);
        for (int i = 0; i < n->ngpus; i++)
                if (n->gpus[i].sid != UINT32_MAX)
                        gp_sched_gpu_set_healthy(gp_daemon_sched(d), n->gpus[i].sid, false);
        if (only_unfenced)
                return;
        n->nostart = n->nostop = n->noresize = 0;
        gp_i64map_done(&n->seen);
        gp_i64map_init(&n->seen);
        gp_i64map_done(&n->stopping);
        gp_i64map_init(&n->stopping);
        full_reset(n);
}

/* ---- storing ---- */

int gp_nodes_store(gp_daemon *d) {
        gp_nodes *ns = gp_daemon_nodes(d);
        gp_store *ws = gp_daemon_store(d);
        char key[GP_NODE_MAX + 8];
        for (size_t i = 0; i < ns->ndirty; i++) {
                gp_node *n = ns->dirty[i];
                char *rec = gp_node_record(n);
                snprintf(key, sizeof(key), "node:%s", n->name);
                int rc = rec ? gp_store_meta_set(ws, key, rec) : -ENOMEM;
                free(rec);
                if (rc < 0)
                        return rc == -ENOMEM ? -GP_ESTORE : rc;
        }
        for (size_t i = 0; i < ns->nforgot; i++) {
                snprintf(key, sizeof(key), "node:%s", ns->forgot[i]);
                int rc = gp_store_meta_set(ws, key, "{}");
                if (rc < 0)
                        return rc;
        }
        if (ns->index_dirty) {
                gp_buf b;
                gp_buf_init(&b, NODE_META_MAX);
                for (size_t i = 0; i < ns->n; i++)
                        gp_buf_printf(&b, "%s%s", i ? "\n" : "", ns->v[i]->name);
                int rc = gp_buf_append(&b, "", 1) == 0 ? gp_store_meta_set(ws, "nodes", b.data) : -GP_ESTORE;
                gp_buf_done(&b);
                if (rc < 0)
                        return rc;
        }
        if (ns->tok_dirty) {
                char *rec = gp_nodes_tokens_record(ns);
                int rc = rec ? gp_store_meta_set(ws, "join_tokens", rec) : -GP_ESTORE;
                free(rec);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

bool gp_nodes_pending(const gp_daemon *d) {
        const gp_nodes *ns = gp_daemon_nodes(d);
        return ns->ndirty || ns->index_dirty || ns->tok_dirty || ns->nforgot;
}

void gp_nodes_stored(gp_daemon *d) {
        gp_nodes *ns = gp_daemon_nodes(d);
        for (size_t i = 0; i < ns->ndirty; i++)
                ns->dirty[i]->dirty = false;
        ns->ndirty = 0;
        ns->nforgot = 0;
        ns->index_dirty = ns->tok_dirty = false;
}

int gp_nodes_open(gp_daemon *d, char *err, size_t errlen) {
        gp_nodes *ns = calloc(1, sizeof(*ns));
        char *buf = malloc(NODE_META_MAX);
        gp_store *ws = gp_daemon_store(d);
        if (!ns || !buf) {
                free(ns);
                free(buf);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        gp_i64map_init(&ns->by_name);
        gp_i64map_init(&ns->by_uuid);
        gp_list_init(&ns->by_hb);
        gp_list_init(&ns->unseen);
        gp_list_init(&ns->held);
        gp_list_init(&ns->fencing);
        gp_daemon_set_nodes(d, ns);
        int64_t now = gp_now_ms();
        int rc = gp_store_meta_get(ws, "join_tokens", buf, NODE_META_MAX);
        if (rc == 0 && gp_nodes_tokens_from_record(ns, buf) < 0) {
                snprintf(err, errlen, "the stored join tokens are damaged");
                free(buf);
                return -GP_ESTORE;
        }
        rc = gp_store_meta_get(ws, "nodes", buf, NODE_META_MAX);
        char *index = rc == 0 ? strdup(buf) : NULL;
        char *save = NULL;
        for (char *name = index ? strtok_r(index, "\n", &save) : NULL; name; name = strtok_r(NULL, "\n", &save)) {
                char key[GP_NODE_MAX + 8];
                snprintf(key, sizeof(key), "node:%s", name);
                gp_node *n = gp_proto_node_name_ok(name) ? node_new(ns, name) : NULL;
                if (!n || gp_store_meta_get(ws, key, buf, NODE_META_MAX) < 0 || gp_node_from_record(n, buf) < 0) {
                        snprintf(err, errlen, "the stored record of node %.48s is missing or damaged", name);
                        free(index);
                        free(buf);
                        return -GP_ESTORE;
                }
                n->restored = n->state != GP_NODE_LEFT; /* no new work there before it synced */
                ns->nrestored += n->restored;
                if (n->state != GP_NODE_LEFT) {
                        uuid_index(ns, n, true);
                        node_inventory(d, n);
                } else
                        gp_node_set_gpus(n, NULL, 0); /* left: its GPUs are not the pool's */
                n->hb_ms = now;
                n->hb_mono = gp_mono_ms();
                if (n->state == GP_NODE_READY || n->state == GP_NODE_DRAINING)
                        gp_list_add_tail(&ns->unseen, &n->hb); /* its first sync moves it to by_hb */
        }
        /* a start, a restart or a failover: an agent may still wait for
         * the old server's answer, then up to GP_PROTO_RETRY_MAX_MS between
         * tries, so a node known from the store is lost only when it has
         * not synced node_timeout_s after that (its tasks run on meanwhile);
         * it gets no new work before it synced (node_inventory) */
        const gp_config *cfg = gp_daemon_cfg(d);
        ns->grace_until = now + gp_nodes_start_grace_ms(cfg->agent_heartbeat_s, cfg->node_timeout_s);
        ns->index_dirty = false;
        free(index);
        free(buf);
        return 0;
}

void gp_nodes_close(gp_daemon *d) {
        gp_nodes *ns = gp_daemon_nodes(d);
        if (!ns)
                return;
        for (size_t i = 0; i < ns->n; i++) {
                gp_node *n = ns->v[i];
                free(n->gpus);
                gp_node_tele_free(n->tele);
                free(n->ostart);
                free(n->ostop);
                free(n->oresize);
                gp_i64map_done(&n->seen);
                gp_i64map_done(&n->stopping);
                gp_i64map_done(&n->fullset);
                free(n);
        }
        free(ns->v);
        gp_i64map_done(&ns->by_name);
        gp_i64map_done(&ns->by_uuid);
        free(ns->tok);
        free(ns->ev);
        free(ns->dirty);
        free(ns->forgot);
        free(ns->touched);
        free(ns);
        gp_daemon_set_nodes(d, NULL);
}

/* ---- answers ---- */

/* Is a run whose GPUs went back to the pool still stopping on n (one
 * preempted, or a rank of a multi-node task that was requeued or ended
 * elsewhere)?  Then nothing starts there: its GPUs are not free until it
 * has stopped, and the next run of its own task must not overlap it.  (A
 * cancelled run keeps its GPUs until it ends.) */
static bool stops_pending(const gp_node *n) {
        size_t pos = 0;
        void *v;
        while ((v = gp_i64map_next(&n->stopping, &pos, NULL)))
                if ((((intptr_t)v - 1) & 3) != GP_PROTO_STOP_CANCEL)
                        return true;
        return false;
}

/* The run id of n has ended (its end reported or acknowledged): a stop
 * of it no longer holds anything back. */
static void stop_done(gp_node *n, gp_proto_run_id id) {
        intptr_t st = (intptr_t)gp_i64map_get(&n->stopping, id.task);
        if (st && ((st - 1) >> 2) == id.epoch)
                gp_i64map_del(&n->stopping, id.task);
}

/* Has n anything to be sent now? */
static bool sendable(const gp_node *n) {
        return n->nostop || n->noresize || (n->nostart && !stops_pending(n));
}

/* The body limit agents are told (server.max_body_bytes, at most what they may send). */
static int64_t max_body(const gp_daemon *d) {
        int64_t m = gp_daemon_cfg(d)->max_body_bytes;
        m = m < GP_PROTO_MAX_BODY ? m : GP_PROTO_MAX_BODY;
        return m < GP_PROTO_MIN_BODY ? GP_PROTO_MIN_BODY : m;
}

/* The answer to a sync of node n with seq: the exited runs of msg that
 * are no longer current are acknowledged (their end is stored), and what
 * waits for n goes out.  Takes n's outbox.  NULL when out of memory. */
static char *render_answer(gp_daemon *d, gp_node *n, int64_t seq, const gp_proto_sync *msg, const node_reply *rp) {
        const gp_config *cfg = gp_daemon_cfg(d);
        gp_proto_sync_answer a = {.seq = seq, .heartbeat_s = cfg->agent_heartbeat_s, .fence_s = cfg->fence_s,
                                  .max_body = max_body(d), .gpu_poll_ms = cfg->gpu_poll_ms,
                                  .want_full = (rp && rp->want_full) || (!n->synced && !(msg && msg->full))};
        if (msg && msg->n_runs) {
                a.ack = calloc((size_t)msg->n_runs, sizeof(*a.ack));
                if (!a.ack)
                        oom();
                for (int i = 0; i < msg->n_runs; i++) {
                        const gp_proto_run *r = &msg->runs[i];
                        if (r->state == GP_PROTO_EXITED && !current(gp_daemon_task(d, r->id.task), n, r->id)) {
                                a.ack[a.n_ack++] = r->id;
                                stop_done(n, r->id);
                        }
                }
        }
        if (n->nostart && !stops_pending(n)) {
                /* a page of the starts: at most GP_PROTO_MAX_RUNS and about
                 * ANSWER_BUDGET bytes (at least one); the rest goes with the
                 * next answer, which comes at once (sendable) */
                int cap = n->nostart < GP_PROTO_MAX_RUNS ? (int)n->nostart : GP_PROTO_MAX_RUNS;
                size_t i = 0, bytes = 0;
                a.start = calloc((size_t)cap, sizeof(*a.start));
                if (!a.start)
                        oom();
                for (; i < n->nostart && a.n_start < cap && (a.n_start == 0 || bytes < ANSWER_BUDGET); i++) {
                        gp_task *t = gp_daemon_task(d, n->ostart[i].task);
                        if (!current(t, n, n->ostart[i]))
                                continue; /* ended or moved meanwhile */
                        if (gp_nodes_start_of(d, t, n->name, n->ostart[i].rank, &a.start[a.n_start]) < 0) {
                                gp_warn("task %" PRId64 ": its stored spec cannot be sent to node %s", t->id, n->name);
                                continue;
                        }
                        bytes += 2048 + 6 * (t->spec ? strlen(t->spec) : 0); /* JSON may escape each byte in 6 */
                        a.n_start++;
                }
                memmove(n->ostart, n->ostart + i, (n->nostart - i) * sizeof(*n->ostart));
                n->nostart -= i;
        }
        if (n->noresize) {
                /* each with the run's GPUs as they are now (several resizes in a row: the last) */
                size_t i = 0;
                if (!(a.resize = calloc(n->noresize < GP_PROTO_MAX_RUNS ? n->noresize : GP_PROTO_MAX_RUNS,
                                        sizeof(*a.resize))))
                        oom();
                for (; i < n->noresize && a.n_resize < GP_PROTO_MAX_RUNS; i++) {
                        gp_task *t = gp_daemon_task(d, n->oresize[i].task);
                        if (!current(t, n, n->oresize[i]) || t->elastic_max_gpus <= 0)
                                continue;
                        a.resize[a.n_resize].id = n->oresize[i];
                        gp_nodes_task_mask(t, n->name, &a.resize[a.n_resize++].gpus);
                }
                memmove(n->oresize, n->oresize + i, (n->noresize - i) * sizeof(*n->oresize));
                n->noresize -= i;
        }
        size_t nstop = n->nostop < GP_PROTO_MAX_RUNS ? n->nostop : GP_PROTO_MAX_RUNS;
        a.stop = n->ostop;
        a.n_stop = (int)nstop;
        if (rp) {
                a.offsets = rp->off;
                a.n_offsets = (int)(rp->noff < GP_PROTO_MAX_RUNS ? rp->noff : GP_PROTO_MAX_RUNS); /* hints only */
        }
        char *body = NULL;
        if (gp_proto_sync_answer_render(&a, &body) < 0)
                body = NULL;
        if (n->ostop) /* NULL while no stop was ever queued */
                memmove(n->ostop, n->ostop + nstop, (n->nostop - nstop) * sizeof(*n->ostop));
        n->nostop -= nstop;
        a.stop = NULL;
        a.n_stop = 0;
        a.offsets = NULL;
        a.n_offsets = 0;
        gp_proto_sync_answer_done(&a);
        return body;
}

/* Hold r (a sync of n with seq) until there is something to send or its
 * wait (at most half of node_timeout_s) is over.  d->lock held. */
static void hold(gp_daemon *d, gp_node *n, struct hreq *r, int64_t seq, int64_t wait, int64_t now) {
        if (wait > (int64_t)gp_daemon_cfg(d)->node_timeout_s * 500)
                wait = (int64_t)gp_daemon_cfg(d)->node_timeout_s * 500;
        n->held = r;
        n->held_seq = seq;
        n->held_until = (now + wait) / 100 * 100; /* on 100 ms ticks, never past the agent's wait: the loop ends many in one pass */
        gp_http_set_node_held(r, n);
        /* the list stays in deadline order only while every wait is alike: insert by deadline */
        gp_list *held = &gp_daemon_nodes(d)->held, *at = held;
        while (at->prev != held && GP_LIST_ENTRY(at->prev, gp_node, hl)->held_until > n->held_until)
                at = at->prev;
        gp_list_insert_after(at->prev, &n->hl);
}

static void unhold(gp_nodes *ns, gp_node *n) {
        gp_list_del(&n->hl);
        n->held = NULL;
        (void)ns;
}

/* Answer n's held sync now (from any thread, d->lock held). */
/* Answer n's held sync: with what waits for n (send), or empty (the wait
 * is over, a newer sync came, the node is lost, removed or joined anew,
 * the server stops: what waits stays for the next sync, or is moot). */
static void answer_held(gp_daemon *d, gp_node *n, uint64_t gen, bool loop, bool send) {
        struct hreq *r = n->held;
        int64_t seq = n->held_seq;
        unhold(gp_daemon_nodes(d), n);
        char *body = NULL;
        if (send) {
                body = render_answer(d, n, seq, NULL, NULL);
        } else {
                const gp_config *cfg = gp_daemon_cfg(d);
                gp_proto_sync_answer a = {.seq = seq, .heartbeat_s = cfg->agent_heartbeat_s,
                                          .fence_s = cfg->fence_s, .want_full = !n->synced,
                                          .max_body = max_body(d), .gpu_poll_ms = cfg->gpu_poll_ms};
                if (gp_proto_sync_answer_render(&a, &body) < 0)
                        body = NULL;
        }
        if (loop)
                gp_commit_answer(d, gen, r, body ? 200 : 503, body, body ? 0 : 1);
        else
                gp_http_answer(r, body ? 200 : 503, body, body ? 0 : 1);
}

void gp_nodes_req_gone(gp_daemon *d, struct hreq *r) {
        gp_nodes *ns = gp_daemon_nodes(d);
        gp_node *n = ns ? gp_http_node_held(r) : NULL;
        if (!n)
                return;
        if (n->held == r)
                unhold(ns, n);
        gp_http_set_node_held(r, NULL);
}

bool gp_nodes_growable(const gp_daemon *d, int64_t now, char *why, size_t size) {
        const gp_nodes *ns = gp_daemon_nodes(d);
        bool live = gp_daemon_cfg(d)->n_join_tokens > 0;
        for (size_t i = 0; !live && i < ns->ntok; i++)
                live = !ns->tok[i].revoked && (ns->tok[i].expires_ms <= 0 || ns->tok[i].expires_ms > now);
        if (live) {
                snprintf(why, size, "a join token is live");
                return true;
        }
        for (size_t i = 0; i < ns->n; i++)
                if (ns->v[i]->state == GP_NODE_LOST) {
                        snprintf(why, size, "node %s is lost and may come back", ns->v[i]->name);
                        return true;
                }
        return false;
}

void gp_nodes_release(gp_daemon *d) {
        gp_list *l;
        while (gp_daemon_nodes(d) && (l = gp_list_first(&gp_daemon_nodes(d)->held)))
                answer_held(d, GP_LIST_ENTRY(l, gp_node, hl), 0, false, false);
}

void gp_nodes_flush(gp_daemon *d, uint64_t gen) {
        gp_nodes *ns = gp_daemon_nodes(d);
        size_t k = 0;
        for (size_t i = 0; i < ns->ntouched; i++) {
                gp_node *n = ns->touched[i];
                if (n->held && sendable(n))
                        answer_held(d, n, gen, true, true);
                if (sendable(n) && !n->held)
                        ns->touched[k++] = n; /* starts held back (a run stopping): look again */
                else
                        n->touched = false;
        }
        ns->ntouched = k;
}

/* A removed node whose runs have all ended (or that is lost) leaves: its
 * credential stops working, its tasks (if any are left) are requeued, its
 * GPUs leave the inventory once they let go. */
static void finish_remove(gp_daemon *d, gp_node *n, int64_t now) {
        char why[GP_REASON_MAX];
        snprintf(why, sizeof(why), "node %s was removed from the pool", n->name);
        gp_list_del(&n->fl);
        node_gone(d, n, why, false);
        if (n->held)
                answer_held(d, n, gp_commit_applied(d), true, false);
        n->removing = false;
        uuid_index(gp_daemon_nodes(d), n, false); /* its GPUs' uuids are free for another node */
        n->state = GP_NODE_LEFT;
        n->left_ms = now;
        n->cred[0] = '\0';
        mark_dirty(gp_daemon_nodes(d), n);
        gp_list_del(&n->hb);
        n->leaving = true;
        gp_info("node %s has left the pool", n->name);
}

/* ---- time ---- */

/* No sync from n for node_timeout_s (or since the start's grace): no new
 * work there, its leases and tasks that do not fence go now; the others
 * once its runs have surely fenced (fenced()). */
static void lose(gp_daemon *d, gp_node *n) {
        gp_list_del(&n->hb);
        n->state = GP_NODE_LOST;
        mark_dirty(gp_daemon_nodes(d), n);
        if (n->held)
                answer_held(d, n, gp_commit_applied(d), true, false);
        char why[GP_REASON_MAX];
        snprintf(why, sizeof(why), "node %s lost: no heartbeat for %d s", n->name, gp_daemon_cfg(d)->node_timeout_s);
        gp_warn("%s; its runs that fence stop there %d s after its last sync, and their tasks go back to the "
                "queue then", why, gp_daemon_cfg(d)->fence_s);
        node_gone(d, n, why, true);
        gp_list_del(&n->fl);
        gp_list_add_tail(&gp_daemon_nodes(d)->fencing, &n->fl);
}

/* Lost node n's runs have fenced (fence_s + kill grace after its last
 * sync): its tasks go back to the queue; a removal finishes. */
static void fenced(gp_daemon *d, gp_node *n, int64_t now) {
        gp_list_del(&n->fl);
        if (n->removing) {
                finish_remove(d, n, now);
                return;
        }
        char why[GP_REASON_MAX];
        snprintf(why, sizeof(why), "node %s lost: no heartbeat for %d s; its run there was fenced", n->name,
                 gp_daemon_cfg(d)->fence_s);
        gp_warn("%s", why);
        node_gone(d, n, why, false);
}

/* Has the server's clock jumped since the last look (it did not run)?
 * The gap counts against no node: silent_until leaves it out, and the
 * start's grace moves on by it. */
static void look_at_clock(gp_nodes *ns) {
        int64_t gap = gp_pause_clock_look(&ns->pause, gp_mono_ms());
        if (gap == 0)
                return;
        ns->grace_until += gap;
        gp_warn("the server did not run for %lld ms (paused or stalled): not held against any node", (long long)gap);
}

void gp_nodes_tick(gp_daemon *d, int64_t now) {
        gp_nodes *ns = gp_daemon_nodes(d);
        gp_list *l;
        while ((l = gp_list_first(&ns->held))) {
                gp_node *n = GP_LIST_ENTRY(l, gp_node, hl);
                if (n->held_until > now)
                        break;
                answer_held(d, n, gp_commit_applied(d), true, true); /* its wait is over: whatever waits goes */
        }
        look_at_clock(ns);
        int64_t timeout = (int64_t)gp_daemon_cfg(d)->node_timeout_s * 1000, mono = gp_mono_ms();
        while ((l = gp_list_first(&ns->by_hb)) && silent_until(ns, GP_LIST_ENTRY(l, gp_node, hb), timeout) <= mono)
                lose(d, GP_LIST_ENTRY(l, gp_node, hb));
        while (now >= ns->grace_until && (l = gp_list_first(&ns->unseen)))
                lose(d, GP_LIST_ENTRY(l, gp_node, hb));
        int64_t give = gp_fence_giveaway_ms(gp_daemon_cfg(d)->fence_s, gp_daemon_cfg(d)->kill_grace_s);
        GP_LIST_FOR_EACH_SAFE(f, &ns->fencing) { /* lost nodes: few */
                gp_node *n = GP_LIST_ENTRY(f, gp_node, fl);
                if (silent_until(ns, n, give) <= mono)
                        fenced(d, n, now);
        }
}

void gp_nodes_settle(gp_daemon *d) {
        gp_nodes *ns = gp_daemon_nodes(d);
        for (size_t i = 0; i < ns->n; i++) {
                gp_node *n = ns->v[i];
                if (n->removing) {
                        int64_t *ids;
                        size_t k = node_tasks(d, n, &ids);
                        free(ids);
                        if (k == 0)
                                finish_remove(d, n, gp_now_ms());
                }
                if (!n->leaving)
                        continue;
                int rc = gp_sched_node_remove(gp_daemon_sched(d), n->name);
                if (rc == 0 || rc == -ENOENT)
                        n->leaving = false;
                else if (rc != -EBUSY)
                        gp_warn("node %s: its GPUs could not leave the pool: %s", n->name, gp_strerror(rc));
        }
}

int64_t gp_nodes_next_ms(gp_daemon *d) {
        gp_nodes *ns = gp_daemon_nodes(d);
        int64_t next = INT64_MAX, now = gp_now_ms(), mono = gp_mono_ms(); /* monotonic deadlines as wall time */
        gp_list *l = gp_list_first(&ns->held);
        if (l)
                next = GP_LIST_ENTRY(l, gp_node, hl)->held_until;
        l = gp_list_first(&ns->by_hb);
        if (l) {
                int64_t e = now + silent_until(ns, GP_LIST_ENTRY(l, gp_node, hb),
                                               (int64_t)gp_daemon_cfg(d)->node_timeout_s * 1000) - mono;
                if (e < next)
                        next = e;
        }
        if (!gp_list_empty(&ns->unseen) && ns->grace_until < next)
                next = ns->grace_until;
        int64_t give = gp_fence_giveaway_ms(gp_daemon_cfg(d)->fence_s, gp_daemon_cfg(d)->kill_grace_s);
        GP_LIST_FOR_EACH(f, &ns->fencing) {
                int64_t e = now + silent_until(ns, GP_LIST_ENTRY(f, gp_node, fl), give) - mono;
                if (e < next)
                        next = e;
        }
        return next;
}

/* ---- starts and stops ---- */

void gp_nodes_start(gp_daemon *d, const gp_task *t) {
        int64_t epoch = gp_task_run_epoch(t);
        gp_runlog_started(d, t); /* its logs are copied here, one per rank */
        for (int rank = 0;; rank++) {
                const char *name = node_at(t, rank);
                if (!name)
                        break;
                gp_node *n = find(gp_daemon_nodes(d), name);
                if (n)
                        push_start(gp_daemon_nodes(d), n, (gp_proto_run_id){t->id, epoch, rank});
        }
}

void gp_nodes_resized(gp_daemon *d, const gp_task *t) {
        if (t->elastic_max_nodes > 0) { /* its new ranks start (an agent takes a start it holds as done) */
                gp_nodes_start(d, t);
                return;
        }
        gp_node *n = t->n_gpus ? find(gp_daemon_nodes(d), t->gpus[0].node) : NULL;
        if (n && t->elastic_max_gpus > 0) /* one node: rank 0 */
                push_resize(gp_daemon_nodes(d), n, (gp_proto_run_id){t->id, gp_task_run_epoch(t), 0});
}

/* Stop run id on n: a start not sent yet is not sent at all, and there
 * is no run to wait for (a stop of an older run stays pending); else the
 * stop goes out and, but for a cancel, holds n's starts until it ended. */
static void stop_run(gp_nodes *ns, gp_node *n, gp_proto_run_id id, gp_proto_stop_why why) {
        bool unsent = false;
        for (size_t i = 0; i < n->nostart && !unsent; i++)
                if (n->ostart[i].task == id.task) {
                        n->ostart[i] = n->ostart[--n->nostart];
                        unsent = true;
                }
        push_stop(ns, n, id, why);
        if (!unsent && gp_i64map_put(&n->stopping, id.task, (void *)(intptr_t)(((id.epoch << 2) | why) + 1)) < 0)
                oom();
}

void gp_nodes_stop(gp_daemon *d, const gp_task *t, gp_proto_stop_why why) {
        int64_t epoch = gp_task_run_epoch(t);
        for (int rank = 0;; rank++) {
                const char *name = node_at(t, rank);
                if (!name)
                        break;
                gp_node *n = find(gp_daemon_nodes(d), name);
                if (n)
                        stop_run(gp_daemon_nodes(d), n, (gp_proto_run_id){t->id, epoch, rank}, why);
        }
}

void gp_nodes_gave_up(gp_daemon *d, const gp_task *t, const gp_task_gpu *was, int was_n) {
        int64_t epoch = gp_task_run_epoch(t);
        for (int i = 0, rank = -1; i < was_n; i++) {
                if (i > 0 && !strcmp(was[i - 1].node, was[i].node))
                        continue;
                rank++;
                gp_node *n = rank_of(t, was[i].node) == rank ? NULL : find(gp_daemon_nodes(d), was[i].node);
                if (n)
                        stop_run(gp_daemon_nodes(d), n, (gp_proto_run_id){t->id, epoch, rank}, GP_PROTO_STOP_PREEMPT);
        }
}

const gp_node_ev *gp_nodes_events(gp_daemon *d, size_t *ret_n) {
        *ret_n = gp_daemon_nodes(d)->nev;
        return gp_daemon_nodes(d)->ev;
}

void gp_nodes_events_clear(gp_daemon *d) {
        gp_daemon_nodes(d)->nev = 0;
}

void gp_nodes_reason_note(gp_daemon *d, char *reason, size_t size) {
        int k = gp_daemon_nodes(d) ? gp_daemon_nodes(d)->nrestored : 0;
        size_t l = strlen(reason);
        if (k > 0 && strstr(reason, "unhealthy") && l < size)
                snprintf(reason + l, size - l, " (%d node%s not synced since the server started: no work there until "
                         "its agent reports)", k, k == 1 ? "" : "s");
}

struct gp_node_tele *gp_nodes_tele(gp_daemon *d, const char *node) {
        gp_node *n = gp_daemon_nodes(d) ? find(gp_daemon_nodes(d), node) : NULL;
        return n && (n->state == GP_NODE_READY || n->state == GP_NODE_DRAINING) ? n->tele : NULL;
}

const char *gp_nodes_backend(gp_daemon *d, const char *node) {
        gp_node *n = node && strcmp(node, "local") ? find(gp_daemon_nodes(d), node) : NULL;
        return n && n->backend[0] ? n->backend : gp_daemon_backend(d);
}

void gp_nodes_backends_add(char *buf, size_t size, const char *b) {
        if (!b || !*b)
                return;
        size_t bl = strlen(b), off = strlen(buf);
        for (const char *p = buf; *p;) {
                size_t l = strcspn(p, "+");
                if (l == bl && !strncmp(p, b, l))
                        return;
                p += l + (p[l] == '+');
        }
        if (off + bl + 2 < size)
                snprintf(buf + off, size - off, "%s%s", off ? "+" : "", b);
}

void gp_nodes_host(gp_daemon *d, const char *node, char *buf, size_t size) {
        buf[0] = '\0';
        gp_node *n = node ? find(gp_daemon_nodes(d), node) : NULL;
        if (!n)
                return;
        const char *p = strstr(n->address, "://");
        p = p ? p + 3 : n->address;
        size_t len;
        if (*p == '[') { /* [v6]:port */
                const char *e = strchr(p, ']');
                len = e ? (size_t)(e - p + 1) : strlen(p);
        } else {
                len = strcspn(p, ":/");
        }
        if (len >= size)
                len = size - 1;
        memcpy(buf, p, len);
        buf[len] = '\0';
}

void gp_nodes_address(gp_daemon *d, const char *node, char *buf, size_t size) {
        gp_node *n = node ? find(gp_daemon_nodes(d), node) : NULL;
        gp_strlcpy(buf, n ? n->address : "", size);
}

/* ---- applying the commands ---- */

static void reply_offset(node_reply *rp, gp_proto_run_id id, int64_t off) {
        gp_proto_offset *v = gp_vec_grow(rp->off, &rp->capoff, rp->noff + 1, sizeof(*v), 8);
        if (!v)
                oom();
        rp->off = v;
        v[rp->noff++] = (gp_proto_offset){id, off};
}

/* A GPU report of node n: health changes go to the scheduler; a GPU that
 * failed under a task takes the task with it (an event). */
/* Another device at a joined GPU's index, or none (m lists them all): a
 * new GPU or MIG layout (docs/isolation.md#mig-instances). */
static bool gpu_moved(gp_node *n, const node_gpu *mine, const gp_proto_gpu *g) {
        if (g && !strcmp(g->uuid, mine->g.uuid))
                return false;
        if (mine->g.healthy)
                gp_warn("node %s: GPU %d is %s%s, not %s: no new work there until the node is removed and joins "
                        "again (a new GPU or MIG layout?)",
                        n->name, mine->g.index, g ? "now " : "gone", g ? g->uuid : "", mine->g.uuid);
        return true;
}

/* A joined GPU's health from the agent's list (g NULL: not in it). */
static void take_gpu(gp_daemon *d, gp_node *n, node_gpu *mine, const gp_proto_gpu *g) {
        bool was = mine->g.healthy, moved = gpu_moved(n, mine, g);
        mine->g.healthy = g && g->healthy && !moved;
        if (g && !moved)
                mine->g.memory_mb = g->memory_mb > 0 ? g->memory_mb : mine->g.memory_mb;
        gp_sched_gpu_set_healthy(gp_daemon_sched(d), mine->sid, mine->g.healthy && !n->restored);
        if (was && !mine->g.healthy) {
                int k;
                int64_t *ids = gpu_tasks(d, mine->sid, &k);
                for (int j = 0; j < k; j++) {
                        gp_task *t = gp_daemon_task(d, ids[j]);
                        if (!t || t->state != GP_TASK_RUNNING)
                                continue;
                        gp_node_ev *e = event(gp_daemon_nodes(d), GP_NODE_EV_LOST, t->id, rank_of(t, n->name));
                        snprintf(e->why, sizeof(e->why), "GPU %s:%d failed", n->name, mine->g.index);
                }
                free(ids);
        }
}

/* m lists every GPU of the node: each joined one takes its health; GPUs
 * are named at join, so a new one needs a new join. */
static void take_gpus(gp_daemon *d, gp_node *n, const gp_proto_sync *m) {
        for (int k = 0; k < n->ngpus; k++) {
                node_gpu *mine = &n->gpus[k];
                const gp_proto_gpu *g = NULL;
                for (int i = 0; i < m->n_gpus && !g; i++)
                        if (m->gpus[i].index == mine->g.index)
                                g = &m->gpus[i];
                if (mine->sid != UINT32_MAX)
                        take_gpu(d, n, mine, g);
        }
}

static void apply_sync(gp_daemon *d, gp_node_cmd *nc, node_reply *rp, int64_t now) {
        gp_nodes *ns = gp_daemon_nodes(d);
        const gp_proto_sync *m = &nc->sync;
        gp_node *n = find(ns, m->node);
        if (!n || n->state == GP_NODE_LEFT) {
                rp->status = 401;
                snprintf(rp->error, sizeof(rp->error), "node removed");
                return;
        }
        if (m->seq > n->seq_floor) { /* stored with this batch, before the answer */
                n->seq_floor = gp_ident_seq_floor(m->seq, now * 1000);
                mark_dirty(ns, n);
        }
        /* a full sync in pages: the runs of every page are gathered, and
         * runs it lacks are looked at only after its last page */
        bool last_page = false;
        if (m->full) {
                if (m->page == 0)
                        full_reset(n);
                if (m->page != n->full_page && m->page != 0) {
                        full_reset(n); /* a page of a full sync the server did not see begin: start again */
                        rp->want_full = true;
                } else {
                        n->full_page = m->more ? m->page + 1 : -1;
                        last_page = !m->more;
                        for (int i = 0; i < m->n_runs; i++)
                                if (gp_i64map_put(&n->fullset, FULL_KEY(m->runs[i].id.task, m->runs[i].id.epoch),
                                                  (void *)1) < 0)
                                        oom();
                }
        }
        if (n->state == GP_NODE_LOST) {
                n->state = n->drain ? GP_NODE_DRAINING : GP_NODE_READY;
                mark_dirty(gp_daemon_nodes(d), n);
                hb_touch(ns, n, now);
                node_inventory(d, n);
                gp_info("node %s is back (%s)", n->name, gp_node_state_name(n->state));
        }
        if (m->has_gpus)
                take_gpus(d, n, m);
        for (int i = 0; i < m->n_logs; i++) {
                const gp_proto_log *lg = &m->logs[i];
                int64_t size;
                /* a run stopping here (preempted, a rank of a requeued task) keeps its last words */
                intptr_t st = (intptr_t)gp_i64map_get(&n->stopping, lg->id.task);
                bool cur = current(gp_daemon_task(d, lg->id.task), n, lg->id);
                if ((cur || (st && ((st - 1) >> 2) == lg->id.epoch)) && gp_nodes_take_log(d, lg, cur, &size) == 0)
                        reply_offset(rp, lg->id, size);
        }
        for (int i = 0; i < m->n_runs; i++) {
                const gp_proto_run *r = &m->runs[i];
                gp_task *t = gp_daemon_task(d, r->id.task);
                bool cur = current(t, n, r->id);
                if (r->state == GP_PROTO_RUNNING) {
                        if (!cur) {
                                /* an old run (its node was lost, or its task
                                 * moved on): nothing starts here until it ends */
                                push_stop(gp_daemon_nodes(d), n, r->id, GP_PROTO_STOP_STALE);
                                if (!gp_i64map_get(&n->stopping, r->id.task) &&
                                    gp_i64map_put(&n->stopping, r->id.task,
                                                  (void *)(intptr_t)(((r->id.epoch << 2) | GP_PROTO_STOP_STALE) + 1)) < 0)
                                        oom();
                                continue;
                        }
                        if (gp_i64map_put(&n->seen, r->id.task, (void *)(intptr_t)r->id.epoch) < 0)
                                oom();
                        intptr_t st = (intptr_t)gp_i64map_get(&n->stopping, r->id.task);
                        if (st && m->full && ((st - 1) >> 2) == r->id.epoch)
                                push_stop(gp_daemon_nodes(d), n, r->id, (gp_proto_stop_why)((st - 1) & 3));
                        if (m->full)
                                reply_offset(rp, r->id, gp_nodes_log_size(d, r->id));
                        if (r->has_alloc && t->elastic_max_gpus > 0) { /* its GPUs as its agent knows them */
                                gp_proto_mask now_mask;
                                gp_nodes_task_mask(t, n->name, &now_mask);
                                if (memcmp(&now_mask, &r->alloc, sizeof(now_mask)))
                                        push_resize(gp_daemon_nodes(d), n, r->id);
                        }
                        continue;
                }
                /* exited: the end of a current run is the task's business;
                 * any other is only acknowledged */
                if ((intptr_t)gp_i64map_get(&n->seen, r->id.task) == r->id.epoch)
                        gp_i64map_del(&n->seen, r->id.task);
                stop_done(n, r->id);
                if (cur && n->removing) { /* stopped for the removal: back to the queue */
                        gp_node_ev *e = event(ns, GP_NODE_EV_LOST, r->id.task, r->id.rank);
                        snprintf(e->why, sizeof(e->why), "node %s was removed from the pool", n->name);
                } else if (cur && r->result.end == GP_EXEC_FENCED) { /* not the task's doing: requeued */
                        gp_node_ev *e = event(ns, GP_NODE_EV_LOST, r->id.task, r->id.rank);
                        snprintf(e->why, sizeof(e->why), "node %s lost contact with the server; its run was fenced",
                                 n->name);
                } else if (cur) {
                        gp_node_ev *e = event(ns, GP_NODE_EV_RUN_ENDED, r->id.task, r->id.rank);
                        e->result = r->result;
                }
        }
        if (last_page) {
                /* runs the server knows here that the agent does not hold */
                int64_t *ids;
                size_t k = node_tasks(d, n, &ids);
                for (size_t i = 0; i < k; i++) {
                        gp_task *t = gp_daemon_task(d, ids[i]);
                        if (!t || t->state != GP_TASK_RUNNING || t->is_lease || !gp_nodes_remote(t))
                                continue;
                        gp_proto_run_id id = {t->id, gp_task_run_epoch(t), rank_of(t, n->name)};
                        if (gp_i64map_get(&n->fullset, FULL_KEY(id.task, id.epoch)))
                                continue; /* held */
                        if ((intptr_t)gp_i64map_get(&n->seen, t->id) == id.epoch) {
                                gp_node_ev *e = event(ns, GP_NODE_EV_LOST, t->id, id.rank);
                                snprintf(e->why, sizeof(e->why), "node %s lost its run", n->name);
                                gp_i64map_del(&n->seen, t->id);
                        } else {
                                push_start(gp_daemon_nodes(d), n, id); /* it may never have got it */
                        }
                }
                free(ids);
                /* a stop waits for a run's end; a run the agent does not hold has none to come */
                size_t pos = 0;
                int64_t task;
                void *v;
                while ((v = gp_i64map_next(&n->stopping, &pos, &task))) {
                        int64_t epoch = ((intptr_t)v - 1) >> 2;
                        if (!gp_i64map_get(&n->fullset, FULL_KEY(task, epoch))) {
                                gp_i64map_del(&n->stopping, task);
                                pos = 0; /* the map changed under the walk: start again */
                        }
                }
                full_reset(n);
                n->synced = true;
                if (n->restored) {
                        n->restored = false;
                        ns->nrestored--;
                        node_inventory(d, n); /* its GPUs take new work from now on */
                }
        } else if (!n->synced && !m->full) {
                rp->want_full = true;
        }
}

static bool token_ok(gp_daemon *d, const char *token, int64_t now) {
        char h[72];
        gp_sha256_key_hash(token, h);
        bool ok = false;
        for (int i = 0; i < gp_daemon_cfg(d)->n_join_tokens; i++)
                ok |= !strcmp(h, gp_daemon_cfg(d)->join_tokens[i]);
        gp_nodes *ns = gp_daemon_nodes(d);
        for (size_t i = 0; i < ns->ntok; i++)
                if (!ns->tok[i].revoked && (!ns->tok[i].expires_ms || ns->tok[i].expires_ms > now))
                        ok |= !strcmp(h, ns->tok[i].hash);
        explicit_bzero(h, sizeof(h));
        return ok;
}


/* ---- node JSON (GET /api/v1/nodes, admin answers) ---- */

static char *dump(json_t *j) {
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return s;
}

static char *error_body(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *error_body(const char *code, const char *fmt, ...) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return gp_http_error_body(code, "%s", msg);
}

/* ---- the loop's side of the commands ---- */

/* Is n live for a join under its name: ready or draining (synced within
 * node_timeout_s, or known from the store and not yet lost), being
 * removed, or holding runs? */
static bool node_live(gp_daemon *d, gp_node *n) {
        size_t pos = 0;
        if (n->state == GP_NODE_READY || n->state == GP_NODE_DRAINING || n->removing ||
            gp_i64map_next(&n->stopping, &pos, NULL))
                return true;
        if (n->state != GP_NODE_LOST)
                return false;
        int64_t *ids;
        size_t k = node_tasks(d, n, &ids);
        free(ids);
        return k > 0;
}

/* The name of the node (not left, not self) that has GPU uuid, or NULL (nodes-join.h). */
static const char *uuid_owner(gp_daemon *d, const char *uuid, const void *self) {
        const gp_node *o = gp_i64map_get(&gp_daemon_nodes(d)->by_uuid, name_key(uuid));
        return o && o != self ? o->name : NULL;
}

/* A new node for a join: room among the nodes not left (MAX_NODES), and
 * among those kept (MAX_RECORDS: the node that left first goes for good).
 * NULL when there is none. */
static gp_node *node_room(gp_daemon *d, const char *name) {
        gp_nodes *ns = gp_daemon_nodes(d);
        size_t live = 0, old = SIZE_MAX;
        for (size_t i = 0; i < ns->n; i++) {
                const gp_node *x = ns->v[i];
                if (x->state != GP_NODE_LEFT)
                        live++;
                else if (!x->dirty && !x->touched && !x->leaving && !x->held &&
                         (old == SIZE_MAX || x->left_ms < ns->v[old]->left_ms))
                        old = i;
        }
        if (live >= MAX_NODES)
                return NULL;
        if (ns->n >= MAX_RECORDS) {
                if (old == SIZE_MAX)
                        return NULL;
                gp_node *x = ns->v[old];
                char(*fv)[GP_NODE_MAX] = gp_vec_grow(ns->forgot, &ns->capforgot, ns->nforgot + 1, sizeof(*fv), 8);
                if (!fv)
                        oom();
                ns->forgot = fv;
                gp_strlcpy(fv[ns->nforgot++], x->name, GP_NODE_MAX); /* its record is emptied with this batch */
                gp_i64map_del(&ns->by_name, name_key(x->name));
                ns->v[old] = ns->v[--ns->n];
                ns->index_dirty = true;
                gp_info("node %s (left) is forgotten to make room for node %s", x->name, name);
                free(x->gpus);
                free(x->ostart);
                free(x->ostop);
                gp_i64map_done(&x->seen);
                gp_i64map_done(&x->stopping);
                gp_i64map_done(&x->fullset);
                free(x);
        }
        return node_new(ns, name);
}

static void apply_join(gp_daemon *d, gp_node_cmd *nc, int64_t now, int *status, char **body) {
        gp_nodes *ns = gp_daemon_nodes(d);
        gp_proto_join *j = &nc->join;
        if (!token_ok(d, nc->token, now)) {
                *status = 401;
                *body = gp_proto_error_render("bad join token (unknown, revoked or expired)");
                return;
        }
        gp_node *n = find(ns, j->name);
        if (!n && gp_i64map_get(&ns->by_name, name_key(j->name))) {
                *status = 409;
                *body = gp_proto_error_render("that node name cannot be used here; choose another (--name)");
                return;
        }
        char mh[72] = "", msg[400] = "";
        if (j->machine[0])
                gp_sha256_key_hash(j->machine, mh);
        gp_ident_known k = {.exists = n != NULL};
        if (n) {
                k.left = n->state == GP_NODE_LEFT;
                k.live = node_live(d, n);
                k.join_seq = n->join_seq;
                k.machine = n->machine;
        }
        gp_ident_join verdict = gp_ident_join_check(&k, j->seq, mh[0] ? mh + 7 : "", now * 1000);
        switch (verdict) {
        case GP_IDENT_JOIN_OK: break;
        case GP_IDENT_JOIN_INCOMPLETE:
                *status = 400;
                snprintf(msg, sizeof(msg), "a join must carry seq and machine (this agent is older than the server)");
                break;
        case GP_IDENT_JOIN_AHEAD:
                *status = 400;
                snprintf(msg, sizeof(msg), "seq is more than an hour ahead of the server's clock (check the clocks)");
                break;
        case GP_IDENT_JOIN_REPLAY:
                *status = 409;
                snprintf(msg, sizeof(msg), "replayed join: node %s was made by a join with this seq or a later one; "
                         "nothing changed", n->name);
                break;
        case GP_IDENT_JOIN_LIVE:
                *status = 409;
                snprintf(msg, sizeof(msg), "node %s is live (another machine holds that name); to replace a machine: "
                         "gpupool node remove %s (POST /admin/nodes/%s/remove), then join", n->name, n->name, n->name);
                break;
        }
        if (!msg[0] && gp_nodes_join_limits(d, j, uuid_owner, n, status, msg, sizeof(msg)) == 0 && !n && !(n = node_room(d, j->name))) {
                *status = 409;
                snprintf(msg, sizeof(msg), "the server holds its most nodes (%d not left, %d kept); remove some",
                         MAX_NODES, MAX_RECORDS);
        }
        if (msg[0]) {
                explicit_bzero(mh, sizeof(mh));
                /* a replay's 409 says the node's join seq, so that a real agent's next join goes above it */
                *body = verdict == GP_IDENT_JOIN_REPLAY ? gp_proto_replay_render(msg, k.join_seq)
                                                        : gp_proto_error_render(msg);
                return;
        }
        bool fresh = !k.exists;
        gp_strlcpy(n->machine, mh + 7, sizeof(n->machine));
        explicit_bzero(mh, sizeof(mh));
        n->join_seq = j->seq;
        if (!fresh) {
                /* a new install under a known name: what ran there is the new
                 * agent's to report (not held: lost, or started again) */
                if (n->held)
                        answer_held(d, n, gp_commit_applied(d), true, false);
                gp_i64map_done(&n->seen);
                gp_i64map_init(&n->seen);
        }
        char h[72];
        gp_sha256_key_hash(nc->secret, h);
        gp_strlcpy(n->cred, h + 7, sizeof(n->cred));
        explicit_bzero(h, sizeof(h));
        gp_strlcpy(n->address, j->address, sizeof(n->address));
        n->resize = j->resize;
        gp_strlcpy(n->labels, j->labels, sizeof(n->labels));
        gp_strlcpy(n->version, j->version, sizeof(n->version));
        gp_strlcpy(n->backend, j->backend, sizeof(n->backend));
        uuid_index(ns, n, false);
        gp_node_set_gpus(n, j->gpus, j->n_gpus);
        uuid_index(ns, n, true);
        if (fresh || n->state == GP_NODE_LEFT) {
                n->joined_ms = now;
                n->left_ms = 0;
                n->drain = false;
                n->leaving = false; /* its GPUs are the pool's again (node_inventory revives them) */
        }
        n->removing = false; /* a new install under its name: the removal is over */
        n->state = n->drain ? GP_NODE_DRAINING : GP_NODE_READY;
        n->synced = false;
        full_reset(n);
        ns->nrestored -= n->restored;
        n->restored = false; /* a join is contact: its GPUs take work */
        mark_dirty(gp_daemon_nodes(d), n);
        hb_touch(ns, n, now);
        node_inventory(d, n);
        gp_info("node %s joined (%d GPUs, %s, %s)", n->name, n->ngpus, n->backend, n->address[0] ? n->address : "no address");
        const gp_config *cfg = gp_daemon_cfg(d);
        gp_proto_join_answer a = {.heartbeat_s = cfg->agent_heartbeat_s, .node_timeout_s = cfg->node_timeout_s,
                                  .fence_s = cfg->fence_s, .max_body = max_body(d)};
        gp_strlcpy(a.node, n->name, sizeof(a.node));
        gp_strlcpy(a.credential, nc->secret, sizeof(a.credential));
        *status = 200;
        if (gp_proto_join_answer_render(&a, body) < 0)
                *body = NULL;
        explicit_bzero(&a, sizeof(a));
}

static void apply_admin(gp_daemon *d, gp_node_cmd *nc, int64_t now, int *status, char **body) {
        gp_nodes *ns = gp_daemon_nodes(d);
        if (!strcmp(nc->node, "local")) {
                if (nc->op == GP_NODE_OP_REMOVE) {
                        *status = 409;
                        *body = error_body("conflict", "node local is this server's own GPUs; it cannot be removed");
                        return;
                }
                const uint32_t *ids;
                size_t ngpus = gp_daemon_local_gpus(d, &ids);
                for (size_t i = 0; i < ngpus; i++)
                        gp_sched_gpu_set_drained(gp_daemon_sched(d), ids[i], nc->op == GP_NODE_OP_DRAIN);
                gp_daemon_drained_changed(d);
                gp_info("node local %s by %s", nc->op == GP_NODE_OP_DRAIN ? "drained" : "undrained", nc->who);
                *status = 200;
                *body = dump(gp_nodes_local_json(d));
                return;
        }
        gp_node *n = find(ns, nc->node);
        if (!n) {
                *status = 404;
                *body = error_body("not_found", "no node %s", nc->node);
                return;
        }
        if (n->state == GP_NODE_LEFT) {
                *status = 409;
                *body = error_body("conflict", "node %s has left the pool (it may join again)", n->name);
                return;
        }
        switch (nc->op) {
        case GP_NODE_OP_DRAIN:
        case GP_NODE_OP_UNDRAIN:
                n->drain = nc->op == GP_NODE_OP_DRAIN;
                if (n->state != GP_NODE_LOST)
                        n->state = n->drain ? GP_NODE_DRAINING : GP_NODE_READY;
                gp_sched_node_set_drained(gp_daemon_sched(d), n->name, n->drain);
                break;
        case GP_NODE_OP_REMOVE: {
                /* its runs are stopped; each task goes back to the queue once its
                 * run has ended (so it never runs twice at once), at once if the
                 * node is lost; then the node has left (gp_nodes_settle) */
                n->removing = true;
                n->drain = true;
                if (n->state != GP_NODE_LOST)
                        n->state = GP_NODE_DRAINING;
                gp_sched_node_set_drained(gp_daemon_sched(d), n->name, true);
                int64_t *ids;
                size_t k = node_tasks(d, n, &ids);
                for (size_t i = 0; i < k; i++) {
                        gp_task *t = gp_daemon_task(d, ids[i]);
                        if (!t || t->state != GP_TASK_RUNNING)
                                continue;
                        if (t->is_lease) { /* no process to wait for */
                                gp_node_ev *e = event(ns, GP_NODE_EV_LOST, t->id, rank_of(t, n->name));
                                snprintf(e->why, sizeof(e->why), "node %s was removed from the pool", n->name);
                                continue;
                        }
                        gp_proto_run_id id = {t->id, gp_task_run_epoch(t), rank_of(t, n->name)};
                        push_stop(gp_daemon_nodes(d), n, id, GP_PROTO_STOP_STALE);
                        if (gp_i64map_put(&n->stopping, t->id,
                                          (void *)(intptr_t)(((id.epoch << 2) | GP_PROTO_STOP_STALE) + 1)) < 0)
                                oom();
                }
                free(ids);
                if (n->state == GP_NODE_LOST && gp_list_empty(&n->fl)) /* else when its runs have fenced */
                        finish_remove(d, n, now);
                break;
        }
        default:
                break;
        }
        mark_dirty(gp_daemon_nodes(d), n);
        gp_info("node %s: %s by %s", n->name, gp_node_state_name(n->state), nc->who);
        *status = 200;
        *body = dump(gp_nodes_node_json(d, n));
}

static void apply_token(gp_daemon *d, gp_node_cmd *nc, int64_t now, int *status, char **body) {
        gp_nodes *ns = gp_daemon_nodes(d);
        if (nc->op == GP_NODE_OP_TOKEN_REVOKE) {
                for (size_t i = 0; i < ns->ntok; i++)
                        if (!strcmp(ns->tok[i].id, nc->token_id)) {
                                ns->tok[i].revoked = true;
                                ns->tok_dirty = true;
                                gp_info("join token %s revoked by %s", nc->token_id, nc->who);
                                *status = 200;
                                *body = dump(json_pack("{s:s,s:b}", "id", nc->token_id, "revoked", true));
                                return;
                        }
                *status = 404;
                *body = error_body("not_found", "no join token %s", nc->token_id);
                return;
        }
        if (ns->ntok >= GP_NODES_MAX_TOKENS) {
                *status = 409;
                *body = error_body("conflict", "%d join tokens exist; revoke some first", GP_NODES_MAX_TOKENS);
                return;
        }
        jtoken *v = gp_vec_grow(ns->tok, &ns->captok, ns->ntok + 1, sizeof(*v), 8);
        if (!v)
                oom();
        ns->tok = v;
        jtoken *t = &v[ns->ntok++];
        memset(t, 0, sizeof(*t));
        snprintf(t->id, sizeof(t->id), "jt_%" PRId64, ++ns->next_tok);
        gp_sha256_key_hash(nc->secret, t->hash);
        t->created_ms = now;
        t->expires_ms = nc->ttl_s > 0 ? now + nc->ttl_s * 1000 : 0;
        ns->tok_dirty = true;
        gp_info("join token %s made by %s", t->id, nc->who);
        *status = 201;
        /* the token users get carries the CA's pin (gpj_SECRET.HEX): agents check the server with it */
        char pin[72] = "", tok[GP_PROTO_JOIN_TOKEN_MAX + 1];
        if (gp_ca_pin(pin) == 0)
                snprintf(tok, sizeof(tok), "%s.%s", nc->secret, pin + 7);
        else
                gp_strlcpy(tok, nc->secret, sizeof(tok));
        *body = dump(json_pack("{s:s,s:s,s:I,s:s?}", "id", t->id, "token", tok, "expires_ms",
                               (json_int_t)t->expires_ms, "ca_hash", pin[0] ? pin : NULL));
        explicit_bzero(tok, sizeof(tok));
}

void gp_nodes_apply(gp_daemon *d, gp_node_cmd *nc, int64_t now, int *status, char **body) {
        *status = 200;
        *body = NULL;
        switch (nc->op) {
        case GP_NODE_OP_JOIN: apply_join(d, nc, now, status, body); break;
        case GP_NODE_OP_SYNC:
                nc->reply = calloc(1, sizeof(*nc->reply));
                if (!nc->reply)
                        oom();
                apply_sync(d, nc, nc->reply, now);
                break;
        case GP_NODE_OP_DRAIN:
        case GP_NODE_OP_UNDRAIN:
        case GP_NODE_OP_REMOVE: apply_admin(d, nc, now, status, body); break;
        case GP_NODE_OP_TOKEN_CREATE:
        case GP_NODE_OP_TOKEN_REVOKE: apply_token(d, nc, now, status, body); break;
        }
}

/* Would the answer to msg be empty (nothing acknowledged, sent or asked)? */
static bool answer_empty(gp_daemon *d, const gp_node *n, const gp_proto_sync *msg, const node_reply *rp) {
        if (sendable(n) || rp->noff || rp->want_full || (!n->synced && !msg->full))
                return false;
        for (int i = 0; i < msg->n_runs; i++)
                if (msg->runs[i].state == GP_PROTO_EXITED &&
                    !current(gp_daemon_task(d, msg->runs[i].id.task), n, msg->runs[i].id))
                        return false;
        return true;
}

bool gp_nodes_answer(gp_daemon *d, gp_node_cmd *nc, struct hreq *req, int *status, char **body) {
        node_reply *rp = nc->reply;
        gp_node *n = find(gp_daemon_nodes(d), nc->sync.node);
        if (!rp || rp->status || !n) {
                *status = rp && rp->status ? rp->status : 401;
                *body = gp_proto_error_render(rp && rp->error[0] ? rp->error : "node removed");
                return true;
        }
        /* nothing to say (e.g. a multi-node rank's end repeated until its task
         * ends): held like a quiet sync, so that the agent does not ask again
         * at once */
        if (answer_empty(d, n, &nc->sync, rp) && nc->sync.wait_ms > 0 && !n->held && nc->sync.seq == n->seq &&
            !gp_daemon_stopping(d)) {
                hold(d, n, req, nc->sync.seq, nc->sync.wait_ms, gp_now_ms());
                return false;
        }
        *status = 200;
        *body = render_answer(d, n, nc->sync.seq, &nc->sync, rp);
        return true;
}

void gp_node_cmd_free(gp_node_cmd *nc) {
        if (!nc)
                return;
        gp_proto_join_done(&nc->join);
        gp_proto_sync_done(&nc->sync);
        if (nc->reply)
                free(nc->reply->off);
        free(nc->reply);
        explicit_bzero(nc->secret, sizeof(nc->secret));
        explicit_bzero(nc->token, sizeof(nc->token));
        free(nc);
}

/* ---- HTTP handlers (MHD threads) ---- */

/* The bearer secret of r into out (checked by ok), or -1. */
static int bearer(struct hreq *r, bool (*ok)(const char *), char *out, size_t size) {
        const char *h = gp_http_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
        if (!h || strncmp(h, "Bearer ", 7) || strlen(h + 7) >= size || !ok(h + 7))
                return -1;
        gp_strlcpy(out, h + 7, size);
        return 0;
}

static int send_proto_error(struct hreq *r, int status, const char *msg) {
        return gp_http_send(r, status, gp_proto_error_render(msg), status == 503 ? 1 : 0);
}

static gp_node_cmd *node_cmd(gp_node_op op) {
        gp_node_cmd *nc = calloc(1, sizeof(*nc));
        if (nc)
                nc->op = op;
        return nc;
}

static int post(struct hreq *r, gp_node_cmd *nc) {
        cmd *c = gp_cmd_node(nc);
        if (!c) {
                gp_node_cmd_free(nc);
                return gp_http_send(r, 503, NULL, 1);
        }
        return gp_http_post(r, c);
}

static int make_secret(const char *prefix, char out[GP_PROTO_CRED_LEN + 1]) {
        uint8_t raw[32];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return -EIO;
        size_t o = (size_t)snprintf(out, GP_PROTO_CRED_LEN + 1, "%s", prefix);
        for (size_t i = 0; i < sizeof(raw); i++)
                o += (size_t)snprintf(out + o, GP_PROTO_CRED_LEN + 1 - o, "%02x", raw[i]);
        explicit_bzero(raw, sizeof(raw));
        return 0;
}

static bool join_token_ok(const char *s) {
        char sec[GP_PROTO_CRED_LEN + 1], pin[GP_PROTO_CA_HASH_LEN];
        bool ok = gp_proto_join_token_split(s, sec, pin) == 0;
        explicit_bzero(sec, sizeof(sec));
        return ok;
}

static int h_join(struct hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_node_cmd *nc = node_cmd(GP_NODE_OP_JOIN);
        char err[256];
        if (!nc)
                return gp_http_send(r, 503, NULL, 1);
        char tok[GP_PROTO_JOIN_TOKEN_MAX + 1], pin[GP_PROTO_CA_HASH_LEN];
        int brc = bearer(r, join_token_ok, tok, sizeof(tok));
        if (brc == 0) /* the server knows the secret alone; a pin after it is the agent's */
                gp_proto_join_token_split(tok, nc->token, pin);
        explicit_bzero(tok, sizeof(tok));
        if (brc < 0) {
                gp_node_cmd_free(nc);
                return send_proto_error(r, 401, "a join token is required (Authorization: Bearer gpj_...)");
        }
        size_t blen;
        const char *data = gp_http_body(r, &blen);
        int rc = gp_proto_join_parse(data, blen, &nc->join, err, sizeof(err));
        if (rc < 0 || make_secret("gpn_", nc->secret) < 0) {
                gp_node_cmd_free(nc);
                return send_proto_error(r, rc == -EINVAL ? 400 : 503, rc == -EINVAL ? err : "try again");
        }
        return post(r, nc);
}

static bool equal_hash(const char *cred, const char *hex) {
        char h[72];
        gp_sha256_key_hash(cred, h);
        bool ok = hex[0] && !strcmp(h + 7, hex);
        explicit_bzero(h, sizeof(h));
        return ok;
}

int gp_nodes_cred_host(gp_daemon *d, const char *node, const char *cred, char *host, size_t size) {
        gp_daemon_lock(d);
        gp_node *n = gp_daemon_nodes(d) ? find(gp_daemon_nodes(d), node) : NULL;
        int rc = !n || n->state == GP_NODE_LEFT ? -ENOENT : equal_hash(cred, n->cred) ? 0 : -EPERM;
        if (rc == 0)
                gp_nodes_host(d, node, host, size);
        gp_daemon_unlock(d);
        return rc;
}

static int h_sync(struct hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_daemon *d = gp_http_daemon(r);
        char cred[GP_PROTO_CRED_LEN + 1], err[256];
        if (bearer(r, gp_proto_credential_ok, cred, sizeof(cred)) < 0)
                return send_proto_error(r, 401, "the node's credential is required (Authorization: Bearer gpn_...)");
        gp_node_cmd *nc = node_cmd(GP_NODE_OP_SYNC);
        if (!nc)
                return gp_http_send(r, 503, NULL, 1);
        size_t blen;
        const char *data = gp_http_body(r, &blen);
        int rc = gp_proto_sync_parse(data, blen, &nc->sync, err, sizeof(err));
        if (rc < 0) {
                gp_node_cmd_free(nc);
                return send_proto_error(r, rc == -EINVAL ? 400 : 503, rc == -EINVAL ? err : "try again");
        }
        const gp_proto_sync *m = &nc->sync;
        int64_t now = gp_now_ms();
        gp_daemon_lock(d);
        gp_node *n = find(gp_daemon_nodes(d), m->node);
        int status = 0;
        const char *msg = NULL;
        if (!n || !equal_hash(cred, n->cred)) {
                status = 401;
                msg = n && n->state == GP_NODE_LEFT ? "node removed" : "bad credential for this node";
        } else {
                switch (gp_ident_seq_check(m->seq, n->seq, now * 1000)) {
                case GP_IDENT_SEQ_OK: break;
                case GP_IDENT_SEQ_REPLAY:
                        status = 409; /* with the last seq taken, so that the real agent goes on above it */
                        msg = "replayed message: seq is not above the last one taken";
                        break;
                case GP_IDENT_SEQ_AHEAD:
                        status = 400;
                        msg = "seq is more than an hour ahead of the server's clock (check the clocks); nothing changed";
                        break;
                }
        }
        explicit_bzero(cred, sizeof(cred));
        if (status) {
                int64_t last = n ? n->seq : 0;
                gp_daemon_unlock(d);
                gp_node_cmd_free(nc);
                if (status == 409)
                        return gp_http_send(r, 409, gp_proto_replay_render(msg, last), 0);
                return send_proto_error(r, status, msg);
        }
        n->seq = m->seq;
        if (n->state != GP_NODE_LOST)
                hb_touch(gp_daemon_nodes(d), n, now);
        int64_t touched[256];
        size_t ntouched = 0;
        if ((m->n_tele || m->has_host) && gp_node_tele_take(&n->tele, m, now, touched, 256, &ntouched) < 0)
                gp_warn("node %s: no memory for its GPUs' readings; the last ones stay", n->name);
        bool more = false; /* memory of processes not the pool's shrinks what a GPU offers */
        for (int i = 0; i < m->n_tele; i++) {
                const gp_proto_tele *g = &m->tele[i];
                int64_t foreign = 0, listed = 0;
                for (int k = 0; g->procs_known && k < g->n_procs; k++) {
                        foreign += g->procs[k].task == 0 ? g->procs[k].used_mb : 0;
                        listed += g->procs[k].used_mb;
                }
                foreign = gp_gpu_foreign_mb(g->used_mb, listed, foreign, g->n_procs, GP_PROTO_MAX_PROCS);
                for (int k = 0; g->procs_known && k < n->ngpus; k++)
                        if (n->gpus[k].g.index == g->index && n->gpus[k].sid != UINT32_MAX)
                                more |= gp_sched_gpu_set_foreign(gp_daemon_sched(d), n->gpus[k].sid, foreign) > 0;
        }
        if (more)
                gp_daemon_kick(d); /* a run may start something there now */
        gp_tele_node_synced(d, n->name, m, touched, ntouched); /* its tasks' readings, its CPUs and RAM */
        if (n->held) /* a newer sync: the held one goes now, empty */
                answer_held(d, n, 0, false, false);
        bool quiet = !m->full && !m->has_gpus && m->n_runs == 0 && m->n_logs == 0 && n->synced &&
                     n->state != GP_NODE_LOST && m->seq <= n->seq_floor; /* else its new floor is stored first */
        if (!quiet) {
                gp_daemon_unlock(d);
                return post(r, nc);
        }
        if (!sendable(n) && m->wait_ms > 0 && !gp_daemon_stopping(d)) {
                hold(d, n, r, m->seq, m->wait_ms, now);
                gp_http_park(r);
                gp_daemon_unlock(d);
                gp_daemon_kick(d); /* the loop learns the new deadline */
                gp_node_cmd_free(nc);
                return MHD_YES;
        }
        char *body = render_answer(d, n, m->seq, NULL, NULL);
        gp_daemon_unlock(d);
        gp_node_cmd_free(nc);
        return gp_http_send(r, body ? 200 : 503, body, body ? 0 : 1);
}

static int h_nodes(struct hreq *r, const gp_route_arg *a) {
        gp_daemon *d = gp_http_daemon(r);
        gp_daemon_lock(d);
        json_t *out;
        if (a->name[0]) {
                gp_node *n = find(gp_daemon_nodes(d), a->name);
                out = !strcmp(a->name, "local") ? gp_nodes_local_json(d) : n ? gp_nodes_node_json(d, n) : NULL;
                if (!out) {
                        gp_daemon_unlock(d);
                        return gp_http_send(r, 404, error_body("not_found", "no node %s", a->name), 0);
                }
        } else {
                json_t *list = json_array();
                json_t *l = gp_nodes_local_json(d);
                if (l)
                        json_array_append_new(list, l);
                for (size_t i = 0; list && i < gp_daemon_nodes(d)->n; i++)
                        json_array_append_new(list, gp_nodes_node_json(d, gp_daemon_nodes(d)->v[i]));
                out = json_pack("{s:s,s:o}", "backend", gp_daemon_backend(d), "nodes", list);
        }
        gp_daemon_unlock(d);
        char *body = dump(out);
        if (gp_commit_wait(d) < 0) {
                free(body);
                return gp_http_send(r, 503, error_body("unavailable", "the disk is slow; try again"), 1);
        }
        return gp_http_send(r, body ? 200 : 503, body, 0);
}

/* An admin's command on a node or a join token (name), handed to the loop. */
static int post_admin(struct hreq *r, gp_node_op op, const char *name) {
        gp_node_cmd *nc = node_cmd(op);
        if (!nc)
                return gp_http_send(r, 503, NULL, 1);
        gp_strlcpy(nc->who, gp_http_who(r), sizeof(nc->who));
        if (op == GP_NODE_OP_TOKEN_REVOKE)
                gp_strlcpy(nc->token_id, name, sizeof(nc->token_id));
        else
                gp_strlcpy(nc->node, name, sizeof(nc->node));
        return post(r, nc);
}

static int h_node_op(struct hreq *r, const gp_route_arg *a) {
        const char *tail = strrchr(a->url, '/');
        return post_admin(r, !strcmp(tail, "/drain")     ? GP_NODE_OP_DRAIN
                             : !strcmp(tail, "/undrain") ? GP_NODE_OP_UNDRAIN
                                                         : GP_NODE_OP_REMOVE,
                          a->name);
}

static int h_token_create(struct hreq *r, const gp_route_arg *a) {
        (void)a;
        int64_t ttl = 0;
        size_t blen;
        const char *data = gp_http_body(r, &blen);
        if (blen) {
                json_error_t je;
                json_t *j = json_loadb(data, blen, 0, &je);
                json_t *v = json_object_get(j, "ttl_s");
                bool ok = json_is_object(j) && (!v || (json_is_integer(v) && json_integer_value(v) >= 0 &&
                                                       json_integer_value(v) <= 10LL * 365 * 86400));
                ttl = v ? json_integer_value(v) : 0;
                json_decref(j);
                if (!ok)
                        return gp_http_send(r, 400, error_body("invalid_request", "expected {\"ttl_s\": seconds, 0..315360000}"), 0);
        }
        gp_node_cmd *nc = node_cmd(GP_NODE_OP_TOKEN_CREATE);
        if (!nc || make_secret("gpj_", nc->secret) < 0) {
                gp_node_cmd_free(nc);
                return gp_http_send(r, 503, NULL, 1);
        }
        nc->ttl_s = ttl;
        gp_strlcpy(nc->who, gp_http_who(r), sizeof(nc->who));
        return post(r, nc);
}

static int h_token_revoke(struct hreq *r, const gp_route_arg *a) {
        return post_admin(r, GP_NODE_OP_TOKEN_REVOKE, a->name);
}

static int h_tokens(struct hreq *r, const gp_route_arg *a) {
        (void)a;
        gp_daemon *d = gp_http_daemon(r);
        json_t *list = json_array();
        gp_daemon_lock(d);
        for (int i = 0; list && i < gp_daemon_cfg(d)->n_join_tokens; i++)
                json_array_append_new(list, json_pack("{s:s,s:I,s:I,s:b,s:s}", "id", "config", "created_ms", (json_int_t)0,
                                                      "expires_ms", (json_int_t)0, "revoked", false, "source", "config"));
        for (size_t i = 0; list && i < gp_daemon_nodes(d)->ntok; i++) {
                const jtoken *t = &gp_daemon_nodes(d)->tok[i];
                json_array_append_new(list, json_pack("{s:s,s:I,s:I,s:b,s:s}", "id", t->id, "created_ms",
                                                      (json_int_t)t->created_ms, "expires_ms", (json_int_t)t->expires_ms,
                                                      "revoked", t->revoked, "source", "api"));
        }
        gp_daemon_unlock(d);
        return gp_http_send(r, list ? 200 : 503, dump(json_pack("{s:o}", "tokens", list)), 0);
}

int gp_nodes_count_ready(gp_daemon *d) {
        const uint32_t *ids;
        int n = gp_daemon_local_gpus(d, &ids) > 0;
        const gp_nodes *ns = gp_daemon_nodes(d);
        for (size_t i = 0; ns && i < ns->n; i++)
                n += ns->v[i]->state == GP_NODE_READY || ns->v[i]->state == GP_NODE_DRAINING;
        return n;
}

size_t gp_nodes_mon(gp_daemon *d, struct gp_mon_sample *s) {
        size_t k = 0;
        const gp_nodes *ns = gp_daemon_nodes(d);
        for (size_t i = 0; ns && i < ns->n && k < GP_MON_MAX_NODES; i++) {
                const gp_node *n = ns->v[i];
                if (n->state == GP_NODE_LEFT)
                        continue;
                gp_strlcpy(s->nodes[k].name, n->name, sizeof(s->nodes[k].name));
                s->nodes[k].up = n->state != GP_NODE_LOST;
                k++;
        }
        return k;
}

const gp_route gp_nodes_routes[] = {
        {GP_POST, "/agent/v1/join", GP_ROUTE_AGENT, h_join, NULL, 0},
        {GP_POST, "/agent/v1/sync", GP_ROUTE_AGENT, h_sync, NULL, 0},
        {GP_GET, "/api/v1/nodes", GP_ROUTE_TENANT, h_nodes, NULL, 0},
        {GP_GET, "/api/v1/nodes/{gpu}", GP_ROUTE_TENANT, h_nodes, NULL, 0},
        {GP_POST, "/admin/nodes/{gpu}/drain", GP_ROUTE_ADMIN, h_node_op, NULL, 0},
        {GP_POST, "/admin/nodes/{gpu}/undrain", GP_ROUTE_ADMIN, h_node_op, NULL, 0},
        {GP_POST, "/admin/nodes/{gpu}/remove", GP_ROUTE_ADMIN, h_node_op, NULL, 0},
        {GP_GET, "/admin/join-tokens", GP_ROUTE_ADMIN, h_tokens, NULL, 0},
        {GP_POST, "/admin/join-tokens", GP_ROUTE_ADMIN, h_token_create, NULL, 0},
        {GP_DELETE, "/admin/join-tokens/{gpu}", GP_ROUTE_ADMIN, h_token_revoke, NULL, 0},
        {0, NULL, 0, NULL, NULL, 0},
};
