/* task.c - task state names, priority names, copy. */
#include "core/task.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const state_names[GP_TASK_STATE_COUNT] = {
        "queued", "running", "succeeded", "failed", "cancelled", "timeout", "lost",
};

const char *gp_task_state_name(gp_task_state s) {
        if ((unsigned)s >= GP_TASK_STATE_COUNT)
                return "unknown";
        return state_names[s];
}

int gp_task_state_parse(const char *s, gp_task_state *ret) {
        for (int i = 0; i < GP_TASK_STATE_COUNT; i++)
                if (strcmp(s, state_names[i]) == 0) {
                        *ret = (gp_task_state)i;
                        return 0;
                }
        return -EINVAL;
}

bool gp_task_state_is_final(gp_task_state s) {
        return s >= GP_TASK_SUCCEEDED && s < GP_TASK_STATE_COUNT;
}

int gp_priority_parse(const char *s, int *ret) {
        static const struct {
                const char *name;
                int prio;
        } names[] = {{"critical", 0}, {"high", 2}, {"normal", 5}, {"low", 7}, {"background", 9}};
        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strcasecmp(s, names[i].name) == 0) {
                        *ret = names[i].prio;
                        return 0;
                }
        if ((s[0] == 'P' || s[0] == 'p') && s[1])
                s++;
        if (s[0] >= '0' && s[0] <= '9' && s[1] == '\0') {
                *ret = s[0] - '0';
                return 0;
        }
        return -EINVAL;
}

int gp_task_copy(gp_task *dst, const gp_task *src) {
        char *spec = NULL;
        gp_task_gpu *gpus = NULL;
        if (src->spec && !(spec = strdup(src->spec)))
                return -ENOMEM;
        if (src->n_gpus > 0) {
                gpus = malloc(sizeof(*gpus) * (size_t)src->n_gpus);
                if (!gpus) {
                        free(spec);
                        return -ENOMEM;
                }
                memcpy(gpus, src->gpus, sizeof(*gpus) * (size_t)src->n_gpus);
        }
        *dst = *src;
        dst->spec = spec;
        dst->gpus = gpus;
        if (!gpus)
                dst->n_gpus = 0;
        return 0;
}

void gp_task_done(gp_task *t) {
        if (!t)
                return;
        free(t->spec);
        t->spec = NULL;
        free(t->gpus);
        t->gpus = NULL;
        t->n_gpus = 0;
}
