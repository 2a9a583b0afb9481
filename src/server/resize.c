/* resize.c - telling elastic batch tasks of their new GPUs: the
 * allocation file (GPUPOOL_ALLOC_FILE) and its signal, after the new set
 * is stored; on an agent node through its agent (nodes.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "exec/alloc.h"
#include "server/commit.h"
#include "server/daemon-int.h"
#include "server/nodes.h"

/* The allocation file of an elastic batch task (exec/alloc.h).  NULL when
 * out of memory. */
char *gp_alloc_json(const gp_task *t) {
        char cvd[GP_MAX_GPUS * 8];
        cuda_devices(t, cvd, sizeof(cvd));
        gp_exec_alloc_gpu *g = calloc(t->n_gpus > 0 ? (size_t)t->n_gpus : 1, sizeof(*g));
        if (!g)
                return NULL;
        for (int i = 0; i < t->n_gpus; i++)
                g[i] = (gp_exec_alloc_gpu){t->gpus[i].index, t->gpus[i].node, t->gpus[i].uuid};
        char *js = gp_exec_alloc_json(t->id, t->gpu_request, t->elastic_max_gpus, cvd, g, t->n_gpus);
        free(g);
        return js;
}

/* Resized batch tasks (stored now): write their alloc.json, then signal
 * them; on an agent node its agent does, told in its next answer.  One
 * not started yet gets its file when it starts. */
void notify_resized(gp_daemon *d) {
        bool remote = false;
        for (size_t i = 0; i < d->nresized; i++) {
                pthread_mutex_lock(&d->lock);
                gp_task *t = gp_i64map_get(&d->tasks, d->resized[i]);
                if (t && t->state == GP_TASK_RUNNING && gp_nodes_remote(t)) {
                        gp_nodes_resized(d, t); /* its agent writes the file and signals it */
                        remote = true;
                }
                char *js = t && t->state == GP_TASK_RUNNING && t->sup_pid ? gp_alloc_json(t) : NULL;
                gp_exec_proc p = {t ? t->sup_pid : 0, t ? t->sup_start : 0};
                pthread_mutex_unlock(&d->lock);
                if (!js)
                        continue;
                char dir[PATH_MAX];
                task_dir(d, d->resized[i], dir, sizeof(dir));
                int rc = gp_exec_write_alloc(dir, js, strlen(js));
                if (rc == 0)
                        rc = gp_exec_notify(&p);
                if (rc < 0)
                        gp_warn("task %" PRId64 ": could not tell it about its new GPUs: %s", d->resized[i],
                                gp_strerror(rc));
                free(js);
        }
        d->nresized = 0;
        if (remote) {
                pthread_mutex_lock(&d->lock);
                gp_nodes_flush(d, gp_commit_applied(d));
                pthread_mutex_unlock(&d->lock);
        }
}
