/* watchdog.c - the GPU memory watchdog's decisions (watchdog.h). */
#include "core/watchdog.h"

gp_wd_action gp_wd_step(const gp_wd_cfg *c, int64_t limit_mb, int64_t used_mb, int64_t now_ms,
                        int64_t *over_since_ms) {
        if (limit_mb <= 0 || used_mb < 0 || *over_since_ms < 0)
                return GP_WD_NONE;
        if (used_mb <= limit_mb + c->tolerance_mb) {
                if (*over_since_ms == 0)
                        return GP_WD_NONE;
                *over_since_ms = 0;
                return GP_WD_UNDER;
        }
        if (*over_since_ms == 0 && c->grace_ms > 0) {
                *over_since_ms = now_ms > 0 ? now_ms : 1; /* 0 means under */
                return GP_WD_OVER;
        }
        if (c->grace_ms <= 0 || now_ms - *over_since_ms >= c->grace_ms) {
                *over_since_ms = -1;
                return GP_WD_STOP;
        }
        return GP_WD_NONE;
}
