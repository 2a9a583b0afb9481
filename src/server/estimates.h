/* estimates.h - what the daemon predicts of its tasks' run times, and when
 * a queued task is expected to start (issue 26).
 *
 * A core/predict.h predictor learns from every batch task that succeeds
 * (its run time: end - start), keyed by tenant, name, GPU count and
 * command; at start it relearns from the newest succeeded tasks in the
 * store, so what it knows survives restarts and failovers.  A task gets
 * its estimate when it is queued (gp_task.estimate_ms, capped by its
 * timeout_s): the scheduler's spf policy orders by it, and backfill and
 * reservations use it where a task has no timeout (never a limit).
 * How right the estimates were is counted as tasks end.  All calls with
 * d->lock held (the loop thread, or start-up).
 */
#ifndef GP_SERVER_ESTIMATES_H
#define GP_SERVER_ESTIMATES_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "core/predict.h"
#include "core/task.h"

struct gp_daemon;
typedef struct gp_estimates gp_estimates;

#define GP_EST_GROUPS 65536         /* groups the predictor holds at most */
#define GP_EST_HISTORY 20000        /* succeeded tasks relearned from at start */

/* Make d->est and relearn from the store (d->ws).  0 or -ENOMEM; a store
 * error only logs (the predictor then starts empty). */
int gp_est_open(struct gp_daemon *d);
void gp_est_close(struct gp_daemon *d);

/* t's estimate now (ret may be NULL); sets nothing.  0 = none. */
int64_t gp_est_predict(struct gp_daemon *d, const gp_task *t, gp_pred_est *ret);

/* t ended: learn its run time if it succeeded, and count whether the
 * estimate it was queued with was within 2x of it. */
void gp_est_ended(struct gp_daemon *d, const gp_task *t);

/* When queued task t is expected to start (ms since the epoch), from the
 * predicted ends of what runs and of the tasks ahead of it in dispatch
 * order, counting GPUs; 0 when it cannot be told (something ahead or
 * running has no estimate and no time limit, or too much is ahead).
 * *ret_confidence: 0..1, the least sure of the estimates it used. */
int64_t gp_est_start(struct gp_daemon *d, const gp_task *t, int64_t now_ms, double *ret_confidence);
/* The same for the queue's first GP_EST_AHEAD tasks at once, in dispatch
 * order: ids[i] expected at starts[i] with confs[i]; *ret_n of them could
 * be told (the rest cannot).  The arrays hold GP_EST_AHEAD entries.
 * 0 or -ENOMEM. */
#define GP_EST_AHEAD 2000
int gp_est_starts(struct gp_daemon *d, int64_t now_ms, int64_t *ids, int64_t *starts, double *confs,
                  size_t *ret_n);

/* Queued task t starts now: judge the first expected start shown for it
 * (recorded by gp_est_starts when someone asked): the wait it foretold
 * from then against the wait it had, within a factor of 2 with
 * GP_EST_START_SLACK_MS of slack for short waits, counted in /metrics
 * (gpupool_expected_starts_*).  Clears the record. */
#define GP_EST_START_SLACK_MS 10000
void gp_est_started(struct gp_daemon *d, gp_task *t, int64_t now_ms);

/* ,"estimate":{...},"expected_start_at":... for t's JSON (queued or
 * running batch tasks with something to say).  0 or -ENOMEM. */
int gp_est_write(struct gp_daemon *d, const gp_task *t, int64_t now_ms, gp_buf *b);

/* Tasks that ended with an estimate, and of them within a factor of 2,
 * since start (the /metrics counters). */
void gp_est_counts(struct gp_daemon *d, uint64_t *ret_estimated, uint64_t *ret_within_2x);

#endif
