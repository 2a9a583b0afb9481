/* runlog.h - one log per run of a batch task (issue 24): where each run's
 * output is kept in the task's directory, which runs and ranks a task has,
 * why a run began, and the reader behind GET /api/v1/tasks/{id}/logs
 * (docs/api.md "Logs", docs/internals/runlogs.md).
 *
 * A run is one start of the task, numbered as gp_task_run_epoch numbers it
 * (1, 2, ...: every requeue after a node or GPU loss, a fence, a removal
 * and every preemption makes the next start a new run); a run of a
 * multi-node task has one log per rank.  Files in DATA_DIR/tasks/ID/:
 *   log, log.r1, ...          run 1: rank 0, rank 1, ... (the names of the
 *                             versions before runs had logs of their own,
 *                             so a task's existing log stays its run 1's)
 *   log.run2, log.run2.r1 ... run 2 (and so on)
 *   runs                      one line per requeue: "RUN REASON" (the run
 *                             that comes next and why the one before ended)
 * Functions taking d expect d->lock held unless they say otherwise. */
#ifndef GP_SERVER_RUNLOG_H
#define GP_SERVER_RUNLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/task.h"

struct gp_daemon;
struct hreq;

#define GP_RUNLOG_NAME_MAX 48 /* room for the longest file name above */

/* The file name of run `run` (>= 1), rank `rank` (>= 0) in the task's
 * directory, into buf.  0 or -EINVAL (out of range, or buf too small). */
int gp_runlog_name(int64_t run, int rank, char *buf, size_t size);
/* The same as a full path (DATA_DIR/tasks/ID/NAME). 0, -EINVAL, -ENAMETOOLONG. */
int gp_runlog_path(const struct gp_daemon *d, int64_t task, int64_t run, int rank, char *buf, size_t size);
/* The last run of t that started (its current one while it runs), 0 when
 * it never started.  Pure; any thread. */
int64_t gp_runlog_last_run(const gp_task *t);

/* Does the end of t's last run's output (rank 0, its last 8 KiB) say it ran
 * out of GPU memory (core/watchdog.h gp_wd_oom_in_output)?  *what: the
 * message found. */
bool gp_runlog_says_oom(const struct gp_daemon *d, const gp_task *t, const char **what);

/* A remote run of t starts: make its directory and, for a multi-node
 * task, an empty log for every rank above 0 (one per node in t->gpus, in
 * order), so that a rank is known to exist before its first byte arrives
 * (rank 0 always exists: a log not made yet reads as empty).  A one-node
 * run makes no file: one per start halved the starts/s through agents.
 * Best effort (a failure is logged; the logs are made when output comes). */
void gp_runlog_started(struct gp_daemon *d, const gp_task *t);
/* t has just gone back to the queue (t->reason says why): note that its
 * next run, gp_task_run_epoch(t), follows that.  Best effort, as above. */
void gp_runlog_requeued(struct gp_daemon *d, const gp_task *t);

/* GET /api/v1/tasks/{id}/logs: which log ?run=&rank= names for task t
 * (run 0 = not given: the last run, or 1 when none started), into
 * *ret_run.  0, or -EINVAL with a message for a 400 naming the parameter
 * in why. */
int gp_runlog_pick(const struct gp_daemon *d, const gp_task *t, int64_t run, int64_t rank, int64_t *ret_run,
                   char *why, size_t why_size);
/* Set r up to follow task `task` from run `run`, rank `rank`, starting at
 * byte `offset` of that run's log (r->log_* fields).  0 or -ENOMEM. */
int gp_runlog_follow_init(struct hreq *r, int64_t task, int64_t run, int rank, int64_t offset);
/* The content reader of a followed log (MHD's callback contract): bytes
 * of the run's log; when they are all sent and a later run of the task has
 * started, one line "--- gpupool: run N of task ID starts (...)" and then
 * that run's log; parks r (0) while the task may still write more; the end
 * of the stream once the task has ended and every run's log is sent.
 * Called from an MHD thread; takes d->lock itself. */
ssize_t gp_runlog_follow_read(struct hreq *r, uint64_t pos, char *buf, size_t max);
/* Free what gp_runlog_follow_init set up (takes a request that has none). */
void gp_runlog_follow_done(struct hreq *r);

#endif
