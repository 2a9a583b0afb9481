/* disk.h - the daemon on a full disk (docs/deployment.md, "A full disk").
 *
 * The store's directory (the SQLite database's directory; the data dir for
 * PostgreSQL, where task logs and results live) is watched with statvfs.
 * The daemon is "degraded" while less than store.disk_min_free_mb is free
 * there or since a store commit failed for lack of space: the loop then
 * refuses work that grows the store (submits, admin writes) with 507 before
 * applying it, does not start tasks, and still stores what shrinks the work
 * (cancels, releases, task ends) into the space a reserve file
 * (DIR/gpupool.reserve, store.disk_reserve_mb, made with posix_fallocate at
 * start) gave back when the daemon became degraded.  When the reserve plus
 * twice the minimum is free again (checked at most once a second while
 * degraded) the reserve is made again and the daemon goes on by itself.
 *
 * Threads: gp_disk_open/close at start/stop; gp_disk_check and
 * gp_disk_store_full on the loop thread only; gp_disk_degraded,
 * gp_disk_message and gp_disk_prometheus from any thread (an atomic flag
 * and a message fixed at open).
 */
#ifndef GP_SERVER_DISK_H
#define GP_SERVER_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct gp_daemon;

#define GP_DISK_RETRY_AFTER_S 30                 /* Retry-After of a 507 */

/* Pick the directory to watch, look at its free space, and make the
 * reserve (or, when the disk is already full, become degraded and give an
 * existing reserve back).  Logs what it finds.  0, -ENOMEM or
 * -ENAMETOOLONG (message in err). */
int gp_disk_open(struct gp_daemon *d, char *err, size_t errlen);
/* Free what gp_disk_open made (the reserve file stays for the next start).
 * Takes a daemon whose open failed. */
void gp_disk_close(struct gp_daemon *d);
/* Loop thread, before it applies a batch: look at the free space (every
 * call while healthy; at most once a second while degraded), enter or leave
 * degraded mode (logging once each way, remaking the reserve when leaving).
 * Returns whether the daemon is degraded now. */
bool gp_disk_check(struct gp_daemon *d);
/* Loop thread: a store commit failed because the disk is full (detail:
 * the store's message).  Degraded from now on; the reserve is given back
 * so that the retry can be stored. */
void gp_disk_store_full(struct gp_daemon *d, const char *detail);
/* Any thread: degraded now? */
bool gp_disk_degraded(struct gp_daemon *d);
/* Any thread: "the disk holding the data directory DIR is full" (fixed at
 * open; "" when gp_disk_open did not run). */
const char *gp_disk_message(struct gp_daemon *d);
/* The 507 answer's body (malloc'd; NULL when out of memory). */
char *gp_disk_error_body(struct gp_daemon *d);
/* Append gpupool_store_degraded to a Prometheus exposition.  0 or -ENOMEM. */
int gp_disk_prometheus(struct gp_daemon *d, gp_buf *b);

#endif
