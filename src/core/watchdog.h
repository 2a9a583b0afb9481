/* watchdog.h - the GPU memory watchdog's decisions (issue 25): a task that
 * shares a GPU (it asked for memory_mb, not the whole GPU) and whose
 * processes use more than that on one of its GPUs is warned at once and
 * stopped once it has stayed over for the grace time.
 *
 * Pure: no I/O, no clock reads, no locks; a sample in, an action out.  The
 * caller keeps each task's over_since_ms (0 while under) between samples
 * and acts on what comes back: the server on its own GPUs' readings and on
 * every agent's (server/nodes-tele.c), the stop through the daemon's loop
 * (the run is stopped and the task requeued with more memory, or failed:
 * docs/isolation.md).
 */
#ifndef GP_CORE_WATCHDOG_H
#define GP_CORE_WATCHDOG_H

#include <stdint.h>

typedef struct gp_wd_cfg {
        int64_t tolerance_mb;        /* over means used > limit + tolerance_mb (>= 0) */
        int64_t grace_ms;            /* stopped after this long over without a break (>= 0) */
} gp_wd_cfg;

typedef enum gp_wd_action {
        GP_WD_NONE = 0,              /* nothing to do */
        GP_WD_OVER,                  /* just went over: say so (event, metric) */
        GP_WD_UNDER,                 /* back under after being over: the grace starts again next time */
        GP_WD_STOP,                  /* over for grace_ms: stop it (said once; over_since_ms is then -1) */
} gp_wd_action;

/* One sample of one task: limit_mb its memory_mb (<= 0: not watched, a
 * whole-GPU task: NONE), used_mb the most its processes use on any one of
 * its GPUs now (< 0: not known: NONE, nothing changes).  *over_since_ms:
 * 0 while under, when it went over while over, -1 once stopped (NONE from
 * then on). */
gp_wd_action gp_wd_step(const gp_wd_cfg *c, int64_t limit_mb, int64_t used_mb, int64_t now_ms,
                        int64_t *over_since_ms);

/* Does the end of a run's output (text, n bytes: its last lines) say it
 * ran out of GPU memory?  The messages of CUDA's runtime and driver APIs,
 * PyTorch, TensorFlow/XLA and JAX (case as they print them); *ret_what
 * the one found (static text).  Used for a failed run of a task that
 * shares a GPU: it is requeued asking more memory, as the watchdog's stop. */
#include <stdbool.h>
#include <stddef.h>
bool gp_wd_oom_in_output(const char *text, size_t n, const char **ret_what);

#endif
