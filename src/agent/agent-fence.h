/* agent-fence.h - the agent's side of fencing (docs/internals/cluster.md
 * "Fencing"): it keeps DATA_DIR/fence (exec/fence.h) at the time it sent
 * its last sync that the server answered plus the server's fence_s, and
 * the supervisors of its runs stop their commands once that has passed.
 * The deadline only moves forward.  Loop thread only. */
#ifndef GP_AGENT_FENCE_H
#define GP_AGENT_FENCE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct gp_agent_fence {
        char path[PATH_MAX];          /* absolute: supervisors run in / */
        int fence_s;                  /* the server's, 0 = it asks for none */
        int64_t until;                /* the deadline written (mono ms), 0 = none yet */
        bool passed;                  /* said in the log that it passed */
} gp_agent_fence;

/* Name the file under data_dir (made absolute).  0 or a negative errno. */
int gp_agent_fence_init(gp_agent_fence *f, const char *data_dir);
/* A sync sent at sent_mono was answered with fence_s: move the deadline
 * on (and write it) when it is later.  0 or a negative errno (the
 * deadline in the file stays where it was: runs fence early, never late). */
int gp_agent_fence_synced(gp_agent_fence *f, int64_t sent_mono, int fence_s);
/* The file runs started now are to watch: the path, or NULL when the
 * server asks for no fencing or the task opted out (want false). */
const char *gp_agent_fence_file(const gp_agent_fence *f, bool want);
/* Has the deadline passed at now (runs that fence stop; none may start)? */
bool gp_agent_fence_passed_at(const gp_agent_fence *f, int64_t now);
/* true once, when the deadline has passed at now (for a log line). */
bool gp_agent_fence_passed(gp_agent_fence *f, int64_t now);

#endif
