/* nodes-fence.c - node liveness and fencing time rules (see nodes-fence.h). */
#include "server/nodes-fence.h"

#include <jansson.h>
#include <string.h>

#include "cluster/proto.h"

int64_t gp_pause_clock_look(gp_pause_clock *c, int64_t mono) {
        int64_t gap = c->last_mono > 0 ? mono - c->last_mono : 0;
        if (mono > c->last_mono)
                c->last_mono = mono;
        if (gap < GP_PAUSE_MIN_MS)
                return 0;
        c->paused_ms += gap;
        return gap;
}

int64_t gp_fence_giveaway_ms(int fence_s, int kill_grace_s) {
        return (int64_t)fence_s * 1000 + (int64_t)kill_grace_s * 1000 + GP_FENCE_MARGIN_MS;
}

int64_t gp_nodes_start_grace_ms(int heartbeat_s, int node_timeout_s) {
        return (int64_t)heartbeat_s * 1000 + GP_PROTO_ANSWER_SLACK_MS + GP_PROTO_RETRY_MAX_MS +
               (int64_t)node_timeout_s * 1000;
}

bool gp_task_fences(const gp_task *t) {
        if (t->is_lease || !t->spec)
                return false;
        if (!strstr(t->spec, "on_node_lost")) /* most specs: no parse */
                return true;
        json_t *spec = json_loads(t->spec, 0, NULL);
        const char *v = json_string_value(json_object_get(spec, "on_node_lost"));
        bool requeue = v && !strcmp(v, "requeue");
        json_decref(spec);
        return !requeue;
}
