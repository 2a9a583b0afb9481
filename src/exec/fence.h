/* fence.h - the fence file: how an agent tells the supervisors of its runs
 * until when they may go on (docs/internals/cluster.md "Fencing").
 *
 * The agent writes a deadline on CLOCK_MONOTONIC (milliseconds, the
 * machine's own clock, the same for every process of the boot): the
 * time it sent its last sync that the server answered, plus the fence
 * time the server gave.  A supervisor whose spec names the file stops its
 * command once that deadline has passed or the file is gone, whether the
 * agent is cut off, stopped (SIGSTOP) or dead.  A restarted agent that
 * syncs again moves the deadline on, and the runs go on.
 *
 * The file is replaced whole (NAME.tmp, rename), never fsynced: after a
 * reboot no supervisor is left to read it.  Pure file I/O, no state, no
 * logging; any thread.
 */
#ifndef GP_EXEC_FENCE_H
#define GP_EXEC_FENCE_H

#include <stdint.h>

#define GP_FENCE_POLL_MS 250 /* how often a supervisor reads its fence file */

/* Write deadline_mono_ms into path (replaced whole).  0 or a negative
 * errno. */
int gp_fence_write(const char *path, int64_t deadline_mono_ms);

/* Read the deadline in path into *ret_deadline_mono_ms.  0; -ENOENT when
 * there is no such file; -EINVAL when it does not hold a deadline; another
 * negative errno when it could not be read. */
int gp_fence_read(const char *path, int64_t *ret_deadline_mono_ms);

#endif
