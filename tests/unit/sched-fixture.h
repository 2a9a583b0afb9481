/* sched-fixture.h - helpers shared by the scheduling core's unit tests
 * (test-sched-tenants.c, test-sched-elastic.c): a node of simulated 4090s,
 * enqueueing that must succeed, and one gp_sched_run with its decisions.
 * Include after <cmocka.h> and "core/sched.h"; everything is static. */
#ifndef GP_TESTS_SCHED_FIXTURE_H
#define GP_TESTS_SCHED_FIXTURE_H

#include <stdio.h>

#define MEM 24564 /* 22564 MB usable after the 2000 MB margin */
#define USABLE 22564
#define SEC 1000

/* n GPUs named node:0..n-1, 24 GB each. */
static inline void add_node(gp_sched *s, const char *node, int n) {
        for (int i = 0; i < n; i++) {
                char uuid[64];
                snprintf(uuid, sizeof(uuid), "GPU-%s-%d", node, i);
                gp_sched_gpu_desc d = {.node = node, .index = i, .uuid = uuid, .name = "NVIDIA GeForce RTX 4090",
                                       .memory_total_mb = MEM};
                assert_int_equal(gp_sched_gpu_add(s, &d, NULL), 0);
        }
}

static inline void enq(gp_sched *s, gp_sched_req r) {
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
}

/* The decisions of the last run (the array is reused across runs). */
typedef struct run_out {
        gp_sched_decision *d;
        size_t n, cap;
} run_out;

static inline size_t run(gp_sched *s, int64_t now, run_out *o) {
        o->n = 0;
        assert_int_equal(gp_sched_run(s, now, &o->d, &o->n, &o->cap), 0);
        return o->n;
}

static inline const gp_sched_decision *find(const run_out *o, gp_sched_decision_kind k, int64_t id) {
        for (size_t i = 0; i < o->n; i++)
                if (o->d[i].kind == k && o->d[i].id == id)
                        return &o->d[i];
        return NULL;
}

static inline int count_kind(const run_out *o, gp_sched_decision_kind k) {
        int n = 0;
        for (size_t i = 0; i < o->n; i++)
                n += o->d[i].kind == k;
        return n;
}

#endif
