/* hostlim.c - see hostlim.h.  The machine's cgroup version is a fact of
 * the process (gp_cgroup_setup may move it into a leaf cgroup), kept in a
 * static written once under pthread_once. */
#include "server/hostlim.h"

#include "base/host.h"
#include "base/log.h"
#include "exec/cgroup.h"
#include "server/daemon-int.h"
#include "server/nodes-tele.h"
#include "server/nodes.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int version;

static void setup(void) {
        char why[400] = "";
        version = gp_cgroup_setup(why, sizeof(why));
        if (version > 0)
                gp_info("cgroups: %s: every task runs in a cgroup of its own (cpus and host_memory_mb are limits)",
                        gp_cgroup_version_name(version));
        else
                gp_warn("cgroups: none usable (%s): tasks run without a cgroup, their cpus and host_memory_mb are "
                        "not enforced",
                        why);
}

void gp_hostlim_setup(void) {
        pthread_once(&once, setup);
}

int gp_hostlim_version(void) {
        pthread_once(&once, setup);
        return version;
}

void gp_hostlim_task_fill(gp_task *t) {
        t->cpus = 0;
        t->host_memory_mb = 0;
        if (!t->spec || (!strstr(t->spec, "\"cpus\"") && !strstr(t->spec, "\"host_memory_mb\"")))
                return; /* most specs: no parse */
        json_t *spec = json_loads(t->spec, 0, NULL);
        gp_cgroup_limits lim;
        if (spec && gp_cgroup_limits_get(spec, &lim) == 0) {
                t->cpus = lim.cpus;
                t->host_memory_mb = lim.host_memory_mb;
        }
        json_decref(spec);
}

void gp_hostlim_local_capacity(gp_daemon *d) {
        gp_host_info h;
        gp_host_read(NULL, &h);
        gp_sched_node_set_host(d->sched, "local", h.cpus, h.mem_total_mb > 0 ? h.mem_total_mb : 0);
}

static int put_limit(gp_buf *b, const char *key, int64_t v) {
        return v > 0 ? gp_buf_printf(b, ",\"%s\":%" PRId64, key, v) : gp_buf_printf(b, ",\"%s\":null", key);
}

int gp_hostlim_task_write(gp_daemon *d, const gp_task *t, const json_t *spec, gp_buf *b) {
        gp_cgroup_limits lim = {0};
        if (spec && gp_cgroup_limits_get(spec, &lim) < 0)
                lim = (gp_cgroup_limits){0};
        int v = 0;
        if (t->n_gpus > 0 && !gp_nodes_remote(t)) {
                v = gp_hostlim_version();
        } else if (t->n_gpus > 0) { /* its first node's, as its agent reported it */
                const gp_host_info *h = gp_node_tele_host(gp_nodes_tele(d, t->gpus[0].node));
                v = h ? h->cgroup : 0;
        }
        const char *name = t->is_lease ? NULL : gp_cgroup_version_name(v);
        int r = put_limit(b, "cpus", lim.cpus);
        r = r ? r : put_limit(b, "host_memory_mb", lim.host_memory_mb);
        return r ? r : name ? gp_buf_printf(b, ",\"cgroup\":\"%s\"", name) : gp_buf_puts(b, ",\"cgroup\":null");
}
