/* history.h - every run of a task kept after it ended: where (its nodes
 * and GPUs), when, how it ended and its peak GPU memory (issue 24, "Where
 * it ran, kept"; docs/api.md "Runs", docs/internals/store.md "Runs").
 *
 * A run ends in three places of the loop: finish() (the task ends with
 * it), requeue_mem() (back to the queue after a node or GPU loss, a fence,
 * a GPU out-of-memory stop) and preempt().  Each calls gp_history_run_end
 * while the task still holds the run's GPUs; the record waits in memory
 * and is stored by gp_history_store in the transaction of the batch that
 * ended the run (commit_once), so a run is kept exactly when its end is.
 * Rows live in the store's task_runs (store/runs.h), capped per task.
 * Loop-side functions: the loop thread, d->lock held. */
#ifndef GP_SERVER_HISTORY_H
#define GP_SERVER_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/task.h"
#include "server/routes.h"

struct gp_daemon;

/* A run of t starts (t->state running, its GPUs set): its peak GPU
 * memory is counted from zero (gp_task.gpu_mem_peak_mb is the run's). */
void gp_history_run_start(struct gp_daemon *d, gp_task *t);
/* The current run of t ends now: state is how ("succeeded", "failed",
 * "cancelled", "timeout", "lost", "preempted", "requeued"), reason why
 * (NULL: t->reason).  Called before t leaves the run (its GPUs, started_ms
 * and state still those of the run).  A second call for the same run in
 * the same batch (a requeue that found no retries left, then finish)
 * updates how it ended and keeps the GPUs of the first.  A task that is
 * not running and has no pending record (a queued task cancelled) has no
 * run to end: nothing happens.  Out of memory stops the daemon (the run's
 * end must be stored with the batch). */
void gp_history_run_end(struct gp_daemon *d, const gp_task *t, const char *state, const char *reason, int64_t now);
/* Are records waiting for the batch's transaction? */
bool gp_history_pending(struct gp_daemon *d);
/* Inside the batch's transaction on d->ws: put the waiting records.  A
 * record the store refuses as malformed (-EINVAL: nothing of it written)
 * is left out with a warning and never fails the batch.  0 or the store's
 * error (the batch is then tried again, records kept). */
int gp_history_store(struct gp_daemon *d);
/* The batch is committed: forget the records. */
void gp_history_stored(struct gp_daemon *d);
/* Copy src into dst (size >= 1 bytes, always NUL-terminated) as text the
 * store takes (base/text.h's rule): a C0 control or DEL becomes a space,
 * a byte that does not start an acceptable character (broken UTF-8, a C1
 * control, a bidirectional override) '?', and a character that does not
 * fit whole is left out.  Pure; any thread. */
void gp_history_clean(char *dst, size_t size, const char *src);
/* Free what the module holds (gp_daemon close). */
void gp_history_close(struct gp_daemon *d);

/* GET /api/v1/tasks/{task}/runs and GET /api/v1/runs (routes.h). */
extern const gp_route gp_history_routes[];

#endif
