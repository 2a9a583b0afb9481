/* commit.h - the daemon's durable commits: one batch's fsync runs on a
 * thread of its own while the loop applies the next (docs/internals/store.md,
 * "Durable commits").
 *
 * Generations: every batch that stores something gets the next generation
 * (gp_commit_next, under d->lock, before its transaction), so
 *   applied   >= committed >= durable
 * where committed is the newest batch whose transaction returned (in the
 * WAL, not yet on the disk) and durable the newest one a WAL fsync covered.
 * Nothing of a batch is acknowledged before its generation is durable:
 *   - answers (gp_commit_answer) are sent by whoever sees it durable first;
 *   - effects (supervisor starts, resize signals) are held by the loop
 *     (gp_commit_hold) and released to it when durable (gp_commit_release);
 *   - a reader, whatever it read under d->lock or from the store, waits
 *     before its answer goes out until durable reaches what was applied
 *     then (gp_commit_wait): it can never show an unstored change.
 * A store whose commit is durable by itself (store.sync: normal, or
 * PostgreSQL) makes every generation durable at its commit: no thread, no
 * wait, today's flow.
 *
 * Threads: the loop thread calls next/stored/answer/hold/release; the sync
 * thread (started by gp_commit_start) runs gp_store_sync on d->ws and sends
 * what became durable (under d->lock, as the loop does: a request is
 * freed only under it); MHD threads call gp_commit_wait.  c->mu is a leaf
 * lock (nothing else is taken while it is held).
 */
#ifndef GP_SERVER_COMMIT_H
#define GP_SERVER_COMMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gp_daemon;
struct hreq;

/* The longest a reader waits for the disk before it answers 503. */
#define GP_COMMIT_WAIT_MS 10000

/* d->cm; 0 or -ENOMEM.  Before anything is committed. */
int gp_commit_open(struct gp_daemon *d);
/* Starts the sync thread (only when d->ws defers its syncs). 0 or -errno. */
int gp_commit_start(struct gp_daemon *d);
/* After the loop thread ended: syncs what is committed, sends its
 * answers, ends the thread. */
void gp_commit_stop(struct gp_daemon *d);
void gp_commit_close(struct gp_daemon *d);

/* Loop thread, d->lock held, before the batch's transaction: its
 * generation.  From now on readers wait for it. */
uint64_t gp_commit_next(struct gp_daemon *d);
/* Loop thread: the transaction of generation gen committed.  Without the
 * sync thread (start-up, recovery) it is synced here, at once. */
void gp_commit_stored(struct gp_daemon *d, uint64_t gen);
/* The newest generation applied (what an answer rendered now shows). */
uint64_t gp_commit_applied(struct gp_daemon *d);

/* Answer r (gp_http_answer) once generation gen is durable: now, if it
 * is; else from the sync thread.  Takes body.  d->lock held. */
void gp_commit_answer(struct gp_daemon *d, uint64_t gen, struct hreq *r, int status, char *body, int retry_after);

/* Effects of a batch the loop holds until it is durable (loop thread). */
typedef struct gp_commit_held {
        uint64_t gen;
        int64_t id;                 /* a batch task */
        bool resized;               /* true: tell it its new GPUs; false: start its supervisor */
} gp_commit_held;
void gp_commit_hold(struct gp_daemon *d, uint64_t gen, int64_t id, bool resized);
/* The held effects that are durable now, in the order held: *ret_n of
 * them, valid until the next hold or release.  While some stay held the
 * sync thread wakes the loop (d->evfd) when the first of them is durable. */
const gp_commit_held *gp_commit_release(struct gp_daemon *d, size_t *ret_n);

/* A reader, before it sends what it read (MHD thread, no lock held): wait
 * until every change it could have seen is durable.  0, or -ETIMEDOUT
 * after GP_COMMIT_WAIT_MS (the disk is stuck or full: answer 503), or at
 * once when this leader was deposed with a batch unstored. */
int gp_commit_wait(struct gp_daemon *d);

/* gp_http_stop, before MHD stops: waits (bounded) for the answers still
 * waiting for the disk to go out; any later one is answered 503 at once
 * (the daemon is stopping), so no connection stays suspended. */
void gp_commit_http_closing(struct gp_daemon *d);

#endif
