/* cluster-host.c - the daemon's side of cluster-host.h: what the node
 * registry and the coordinator may see and ask of the daemon, each a
 * field of gp_daemon (server-int.h) or a command it queues.  The locks
 * and threads are cluster-host.h's; nothing here takes a lock but
 * gp_daemon_lock. */
#include "server/cluster-host.h"

#include <pthread.h>

#include "server/daemon-int.h"
#include "server/server-int.h"

void gp_daemon_lock(gp_daemon *d) {
        pthread_mutex_lock(&d->lock);
}

void gp_daemon_unlock(gp_daemon *d) {
        pthread_mutex_unlock(&d->lock);
}

const gp_config *gp_daemon_cfg(const gp_daemon *d) {
        return &d->cfg;
}

gp_sched *gp_daemon_sched(gp_daemon *d) {
        return d->sched;
}

gp_task *gp_daemon_task(gp_daemon *d, int64_t id) {
        return gp_i64map_get(&d->tasks, id);
}

gp_task *gp_daemon_task_next(gp_daemon *d, size_t *pos) {
        return gp_i64map_next(&d->tasks, pos, NULL);
}

gp_store *gp_daemon_store(gp_daemon *d) {
        return d->ws;
}

const char *gp_daemon_backend(const gp_daemon *d) {
        return d->backend;
}

size_t gp_daemon_local_gpus(const gp_daemon *d, const uint32_t **ret_ids) {
        *ret_ids = d->gpu_ids;
        return d->ngpus;
}

const gp_gpu_info *gp_daemon_local_info(const gp_daemon *d) {
        return d->gpu_info;
}

int64_t gp_daemon_started_ms(const gp_daemon *d) {
        return d->started_ms;
}

const char *gp_daemon_hostname(const gp_daemon *d) {
        return d->hostname;
}

bool gp_daemon_stopping(const gp_daemon *d) {
        return __atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE);
}

struct gp_tenants *gp_daemon_tenants(gp_daemon *d) {
        return d->tenants;
}

struct gp_monitor *gp_daemon_monitor(gp_daemon *d) {
        return d->mon;
}

cmd *gp_cmd_node(struct gp_node_cmd *nc) {
        cmd *c = gp_cmd_new(CMD_NODE);
        if (c)
                c->node = nc;
        return c;
}

cmd *gp_cmd_coord_audit(struct gp_coord_audit *a) {
        cmd *c = gp_cmd_new(CMD_COORD_AUDIT);
        if (c)
                c->coord_audit = a;
        return c;
}

cmd *gp_cmd_mem_exceeded(int64_t task) {
        cmd *c = gp_cmd_new(CMD_MEM_EXCEEDED);
        if (c)
                c->op.id = task;
        return c;
}

void gp_daemon_drained_changed(gp_daemon *d) {
        d->nodes_local_drain_changed = true;
}

void gp_daemon_peak_grew(gp_daemon *d, int64_t id) {
        for (size_t i = 0; i < d->npeaked; i++)
                if (d->peaked[i] == id)
                        return;
        grow_ids(&d->peaked, d->npeaked, &d->cappeaked);
        d->peaked[d->npeaked++] = id;
}

int64_t gp_daemon_wd_due(const gp_daemon *d) {
        return d->wd_due_ms;
}

void gp_daemon_set_wd_due(gp_daemon *d, int64_t ms) {
        d->wd_due_ms = ms;
}

struct gp_nodes *gp_daemon_nodes(const gp_daemon *d) {
        return d->nodes;
}

void gp_daemon_set_nodes(gp_daemon *d, struct gp_nodes *ns) {
        d->nodes = ns;
}

struct gp_coord *gp_daemon_coord(const gp_daemon *d) {
        return d->coord;
}

void gp_daemon_set_coord(gp_daemon *d, struct gp_coord *c) {
        d->coord = c;
}

struct gp_node *gp_http_node_held(const hreq *r) {
        return r->node_held;
}

void gp_http_set_node_held(hreq *r, struct gp_node *n) {
        r->node_held = n;
}
