/* agent-fence.c - the agent's fence deadline (see agent-fence.h). */
#include "agent/agent-fence.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/fence.h"

int gp_agent_fence_init(gp_agent_fence *f, const char *data_dir) {
        memset(f, 0, sizeof(*f));
        char *abs = realpath(data_dir, NULL);
        if (!abs)
                return -errno;
        int n = snprintf(f->path, sizeof(f->path), "%s/fence", abs);
        free(abs);
        return n >= (int)sizeof(f->path) ? -ENAMETOOLONG : 0;
}

int gp_agent_fence_synced(gp_agent_fence *f, int64_t sent_mono, int fence_s) {
        f->fence_s = fence_s;
        if (fence_s <= 0)
                return 0;
        int64_t until = sent_mono + (int64_t)fence_s * 1000;
        if (until <= f->until)
                return 0;
        int rc = gp_fence_write(f->path, until);
        if (rc == 0) {
                f->until = until;
                f->passed = false;
        }
        return rc;
}

const char *gp_agent_fence_file(const gp_agent_fence *f, bool want) {
        /* no deadline written yet (it could not be): the run finds no file and fences at once */
        return want && f->fence_s > 0 ? f->path : NULL;
}

bool gp_agent_fence_passed_at(const gp_agent_fence *f, int64_t now) {
        return f->fence_s > 0 && f->until > 0 && now >= f->until;
}

bool gp_agent_fence_passed(gp_agent_fence *f, int64_t now) {
        if (f->until <= 0 || now < f->until || f->passed)
                return false;
        f->passed = true;
        return true;
}
