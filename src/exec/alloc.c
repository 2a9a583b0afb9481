/* alloc.c - the allocation file of an elastic task (alloc.h). */
#include "exec/alloc.h"

#include <inttypes.h>

#include "base/buf.h"

char *gp_exec_alloc_json(int64_t task, int min, int max, const char *cvd, const gp_exec_alloc_gpu *g, int n) {
        gp_buf b;
        gp_buf_init(&b, 0);
        int r = gp_buf_printf(&b, "{\"task_id\":%" PRId64 ",\"n_gpus\":%d,\"min_gpus\":%d,\"max_gpus\":%d", task, n,
                              min, max);
        r = r ? r : gp_buf_json_field_str(&b, "cuda_visible_devices", cvd);
        r = r ? r : gp_buf_puts(&b, ",\"gpus\":[");
        for (int i = 0; r == 0 && i < n; i++) {
                r = gp_buf_printf(&b, "%s{\"index\":%d", i ? "," : "", g[i].index);
                r = r ? r : gp_buf_json_field_str(&b, "node", g[i].node);
                r = r ? r : gp_buf_json_field_str(&b, "uuid", g[i].uuid);
                r = r ? r : gp_buf_puts(&b, "}");
        }
        r = r ? r : gp_buf_puts(&b, "]}\n");
        if (r < 0) {
                gp_buf_done(&b);
                return NULL;
        }
        return gp_buf_steal(&b);
}
