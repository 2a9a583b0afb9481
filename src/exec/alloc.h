/* alloc.h - the allocation file of an elastic task (GPUPOOL_ALLOC_FILE):
 * one format, written by the server for its own tasks and by agents for
 * theirs (gp_exec_write_alloc puts it in place). */
#ifndef GP_EXEC_ALLOC_H
#define GP_EXEC_ALLOC_H

#include <stdint.h>

typedef struct gp_exec_alloc_gpu {
        int index;
        const char *node;
        const char *uuid;
} gp_exec_alloc_gpu;

/* {"task_id", "n_gpus", "min_gpus", "max_gpus", "cuda_visible_devices",
 * "gpus": [{"index", "node", "uuid"}]} and a newline, for task with the
 * n GPUs g (CUDA_VISIBLE_DEVICES cvd).  malloc'd; NULL when out of memory. */
char *gp_exec_alloc_json(int64_t task, int min, int max, const char *cvd, const gp_exec_alloc_gpu *g, int n);

#endif
