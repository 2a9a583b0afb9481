/* nodes-join.c - the limits of a join's labels and GPUs (nodes-join.h).
 * Invariants: nothing changes here; a refusal names what is wrong. */
#include "server/nodes-join.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/labels.h"
#include "core/sched.h"
#include "server/cluster-host.h"

static int refuse(int *status, int st, char *msg, size_t size, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static int refuse(int *status, int st, char *msg, size_t size, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, size, fmt, ap);
        va_end(ap);
        *status = st;
        return -EINVAL;
}

int gp_nodes_join_limits(gp_daemon *d, const gp_proto_join *j, gp_nodes_uuid_owner_fn owner, const void *self,
                         int *status, char *msg, size_t size) {
        size_t pos = 0, kn, vn;
        const char *k, *v;
        while (gp_labels_next(j->labels, &pos, &k, &kn, &v, &vn))
                if (kn >= 8 && !strncmp(k, "gpupool/", 8))
                        return refuse(status, 400, msg, size, "label %.*s: keys under gpupool/ are the server's "
                                      "(gpupool/node is every node's name)", (int)kn, k);
        const char *names[GP_PROTO_MAX_GPUS];
        int nmodels = 0;
        for (int i = 0; i < j->n_gpus; i++) {
                const char *uuid = j->gpus[i].uuid;
                bool seen = false;
                for (int x = 0; x < i; x++) {
                        if (!strcmp(j->gpus[x].uuid, uuid))
                                return refuse(status, 400, msg, size, "GPUs %d and %d have the same uuid %s",
                                              j->gpus[x].index, j->gpus[i].index, uuid);
                        seen |= !strcmp(j->gpus[x].name, j->gpus[i].name);
                }
                if (!seen)
                        names[nmodels++] = j->gpus[i].name;
                const char *o = owner(d, uuid, self);
                if (o)
                        return refuse(status, 409, msg, size, "GPU %d: uuid %s is a GPU of node %s (a GPU is in "
                                      "the pool once)", j->gpus[i].index, uuid, o);
                gp_sched_gpu_view gv;
                const uint32_t *local;
                size_t nlocal = gp_daemon_local_gpus(d, &local);
                for (size_t x = 0; x < nlocal; x++)
                        if (gp_sched_gpu_get(gp_daemon_sched(d), local[x], &gv) == 0 && !strcmp(gv.uuid, uuid))
                                return refuse(status, 409, msg, size, "GPU %d: uuid %s is a GPU of node local "
                                              "(this server's)", j->gpus[i].index, uuid);
        }
        if (nmodels > GP_NODES_MODELS_MAX)
                return refuse(status, 409, msg, size, "%d GPU models on one node; at most %d", nmodels,
                              GP_NODES_MODELS_MAX);
        if (gp_sched_gpu_models_room(gp_daemon_sched(d), names, nmodels) < 0)
                return refuse(status, 409, msg, size, "the pool knows 64 GPU models, its most, and this node's "
                              "would add more; remove nodes whose models are no longer needed");
        return 0;
}
