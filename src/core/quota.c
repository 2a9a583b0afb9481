/* quota.c - the rules on a whole quota (see quota.h). */
#include "core/quota.h"

#include <errno.h>
#include <stdio.h>

bool gp_quota_nonneg(const gp_quota *q) {
        return q->max_concurrent >= 0 && q->max_queued >= 0 && q->max_gpus_milli >= 0 &&
               q->guaranteed_gpus_milli >= 0;
}

int gp_quota_check(const gp_quota *q, char *why, size_t whylen) {
        if (!gp_quota_nonneg(q)) {
                snprintf(why, whylen, "quota: a limit is negative");
                return -EINVAL;
        }
        if (q->max_gpus_milli > 0 && q->guaranteed_gpus_milli > q->max_gpus_milli) {
                snprintf(why, whylen, "quota.guaranteed_gpus is above quota.max_gpus");
                return -EINVAL;
        }
        return 0;
}

void gp_quota_overlay(gp_quota *q, const gp_quota *over) {
        if (over->max_concurrent >= 0)
                q->max_concurrent = over->max_concurrent;
        if (over->max_queued >= 0)
                q->max_queued = over->max_queued;
        if (over->max_gpus_milli >= 0)
                q->max_gpus_milli = over->max_gpus_milli;
        if (over->guaranteed_gpus_milli >= 0)
                q->guaranteed_gpus_milli = over->guaranteed_gpus_milli;
}
