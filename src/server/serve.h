/* serve.h - model servers gpupool runs itself (gateway.models[].serve).
 *
 * Each replica of a served model is a long-running batch task named
 * "serve:MODEL:N" of the tenant "gpupool", submitted through the daemon's
 * normal task path (so it is placed on GPUs by the scheduler, with model
 * affinity, and its supervisor outlives a daemon restart).  A small thread
 * watches the replicas: it submits a missing one (with a free port when
 * port is auto, given as {port} in the command and SERVE_PORT and
 * PORT in its environment), polls its readiness path once it runs, adds it
 * to the gateway as an upstream when it answers 200, takes it out when its
 * task ends, and submits it again (a crashed server is restarted, after a
 * back-off that grows with quick failures).  With autoscale the replicas
 * between min and max are turned on while requests wait beyond
 * queue_depth per ready replica, and off (task cancelled) after a quiet
 * minute.
 */
#ifndef GP_SERVER_SERVE_H
#define GP_SERVER_SERVE_H

struct gp_daemon;
typedef struct gp_serve gp_serve;

/* Start watching the served models of d->cfg (none: *ret = NULL, 0).
 * 0 or -errno.  Call after gp_http_start (it needs d->gw). */
int gp_serve_start(struct gp_daemon *d, gp_serve **ret);

/* Stop the thread; the model servers keep running (like every task
 * across a daemon restart).  Takes NULL. */
void gp_serve_stop(gp_serve *s);

#endif
