/* test-sched-resv.c - the reservation for the blocked task, kept per node
 * from run to run (src/core/sched-resv.c), chooses what a full scan of the
 * pool chooses: the same start time and the same GPUs, ties included,
 * while tasks start and end, the clock moves, GPUs are drained, fail,
 * lose memory to foreign processes and come back, nodes join, change
 * labels and are removed.  The scan is the reservation as it was before
 * the cache (every node, every GPU, every run), kept here as the oracle.
 *
 * The test compiles the scheduler itself (src/core/sched-all.c, the one
 * unit the build makes of it) to reach reserve() and the pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/sched-all.c"

/* The full scan (the reservation before the cache). */
static int64_t reserve_scan(gp_sched *s, const stask *t, int64_t now, uint32_t *gpus) {
        int64_t best_t = TIME_INF;
        int best_ready = -1;
        bool found = false;
        gpu_end ge[MAX_NODE_GPUS];
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!(nd->kinds & t->kinds) || nd->ngpus < t->ngpus || !sel_ok(s, t, ni))
                        continue;
                int m = 0, ready = 0;
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (!gpu_usable(g) || !kind_ok(t, g) || g->usable < t->mem)
                                continue;
                        if (!t->excl && g->excl && g->ntasks == 0)
                                continue;
                        ge[m].gi = nd->gpus[i];
                        ge[m].t = gpu_ready_at(s, g, t, now);
                        ready += ge[m].t == now;
                        m++;
                }
                if (m < t->ngpus)
                        continue;
                qsort(ge, (size_t)m, sizeof(*ge), cmp_gpu_end);
                int64_t node_t = ge[t->ngpus - 1].t;
                if (!found || node_t < best_t || (node_t == best_t && ready > best_ready)) {
                        found = true;
                        best_t = node_t;
                        best_ready = ready;
                        for (int i = 0; i < t->ngpus; i++)
                                gpus[i] = ge[i].gi;
                }
        }
        return found ? best_t : -1;
}

/* The multi-node reservation before its cache: every node's time read from
 * its GPUs, all sorted by (time, node); the first that cover the need.
 * Writes the chosen nodes to nodes[] (*k of them). */
static int64_t reserve_multi_scan(gp_sched *s, const stask *t, int64_t now, uint32_t *nodes, int *k) {
        gpu_end *e = malloc((size_t)s->nnodes * sizeof(*e) + 1);
        assert_non_null(e);
        int m = 0;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!whole_node_ok(s, t, ni))
                        continue;
                int64_t ready = now;
                for (int i = 0; i < nd->ngpus && ready != TIME_INF; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (g->removed || g->reserved)
                                continue;
                        int64_t r = gpu_usable(g) ? gpu_ready_at(s, g, t, now) : TIME_INF;
                        if (r > ready)
                                ready = r;
                }
                e[m++] = (gpu_end){ready, ni};
        }
        qsort(e, (size_t)m, sizeof(*e), cmp_gpu_end);
        int64_t sum = 0, at = TIME_INF;
        *k = 0;
        while (*k < m && sum < need_units(t)) {
                sum += node_units(s, t, e[*k].gi);
                nodes[*k] = e[*k].gi;
                at = e[(*k)++].t;
        }
        free(e);
        if (sum < need_units(t)) {
                *k = 0;
                return -1;
        }
        return at;
}

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static uint64_t xr(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

static int cmp_u32p(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        return (x > y) - (x < y);
}

/* reserve() of multi-node task t and the scan agree: the same time, every
 * GPU of the same nodes marked */
static bool agree_multi(gp_sched *s, stask *t, int64_t now) {
        uint32_t *want = malloc(((size_t)s->nnodes + 1) * sizeof(*want));
        assert_non_null(want);
        int k = 0;
        int64_t w = reserve_multi_scan(s, t, now, want, &k);
        s->stamp++;
        int64_t got = reserve(s, t, now);
        bool *marked = calloc((size_t)s->nnodes + 1, sizeof(*marked));
        assert_non_null(marked);
        for (int j = 0; j < k; j++)
                marked[want[j]] = true;
        for (uint32_t gi = 0; gi < s->ngpus; gi++)
                if ((s->gpus[gi].resv_stamp == s->stamp) != marked[s->gpus[gi].node])
                        fail_msg("multi-node task %" PRId64 " (%d GPUs): GPU %u of node %u %s by reserve(), "
                                 "the scan %s",
                                 t->id, t->ngpus, gi, s->gpus[gi].node,
                                 s->gpus[gi].resv_stamp == s->stamp ? "marked" : "not marked",
                                 marked[s->gpus[gi].node] ? "chose the node" : "did not");
        free(marked);
        free(want);
        if (w < 0) {
                assert_int_equal(got, TIME_INF);
                return false;
        }
        if (got != w)
                fail_msg("multi-node task %" PRId64 " (%d GPUs): reserve() says %" PRId64 ", the scan %" PRId64, t->id,
                         t->ngpus, got, w);
        return true;
}

/* reserve() and the scan agree on t at `now`; returns whether t had a
 * reservation at all */
static bool agree(gp_sched *s, stask *t, int64_t now) {
        uint32_t want[MAX_NODE_GPUS];
        int64_t w = reserve_scan(s, t, now, want);
        s->stamp++;
        int64_t got = reserve(s, t, now);
        uint32_t have[MAX_NODE_GPUS];
        int n = 0;
        for (uint32_t gi = 0; gi < s->ngpus; gi++)
                if (s->gpus[gi].resv_stamp == s->stamp) {
                        assert_true(n < MAX_NODE_GPUS);
                        have[n++] = gi;
                }
        if (w < 0) {
                assert_int_equal(got, TIME_INF);
                assert_int_equal(n, 0);
                return false;
        }
        if (got != w)
                fail_msg("task %" PRId64 " (%d GPUs, %" PRId64 " MB%s): reserve() says %" PRId64 ", the scan %" PRId64,
                         t->id, t->ngpus, t->mem, t->excl ? ", whole" : "", got, w);
        assert_int_equal(n, t->ngpus);
        qsort(want, (size_t)t->ngpus, sizeof(*want), cmp_u32p);
        for (int i = 0; i < n; i++)
                assert_int_equal(have[i], want[i]);
        return true;
}

static void add_gpus(gp_sched *s, const char *node, int n, int64_t mb, const char *name) {
        for (int i = 0; i < n; i++) {
                char uuid[64];
                snprintf(uuid, sizeof(uuid), "GPU-%s-%d", node, i);
                gp_sched_gpu_desc d = {.node = node, .index = i, .uuid = uuid, .name = name, .memory_total_mb = mb};
                assert_int_equal(gp_sched_gpu_add(s, &d, NULL), 0);
        }
}

/* Nodes n00, n01, ... of per_node A100s of 80 GB. */
static void add_nodes(gp_sched *s, int count, int per_node) {
        for (int i = 0; i < count; i++) {
                char node[16];
                snprintf(node, sizeof(node), "n%02d", i);
                add_gpus(s, node, per_node, 81920, "NVIDIA A100-SXM4-80GB");
        }
}

/* wide: many request shapes (more than the cache keeps, so slots are
 * replaced); else three, so every answer after the first comes from the
 * cache and only what changed since is made again. */
static void random_pool_and_work(gp_sched_config *c, int rounds, int models_max, bool wide, bool multi) {
        c->max_models_per_gpu = models_max;
        gp_sched *s;
        assert_int_equal(gp_sched_new(c, &s), 0);
        int nodes = 12;
        for (int i = 0; i < nodes; i++) {
                char node[16];
                snprintf(node, sizeof(node), "n%02d", i);
                add_gpus(s, node, 1 + (int)(xr() % 8), i % 3 ? 81920 : 24564,
                         i % 3 ? "NVIDIA A100-SXM4-80GB" : "NVIDIA GeForce RTX 4090");
                if (i % 4 == 0)
                        assert_int_equal(gp_sched_node_set_labels(s, node, "zone=a"), 0);
        }
        gp_sched_decision *d = NULL;
        size_t n = 0, cap = 0;
        int64_t id = 1, now = 1000;
        int checked = 0, reserved = 0, checked_multi = 0, reserved_multi = 0;
        static const char *const models[] = {NULL, "m1", "m2", "m3"};
        for (int r = 0; r < rounds; r++) {
                /* new work: shared and whole, some bounded, some gangs */
                for (int k = 0; k < (wide ? 6 : 12); k++) {
                        gp_sched_req q = {.id = id++, .tenant = "t", .priority = (int)(xr() % 10)};
                        q.gpus = xr() % 4 ? 1 : 1 + (int)(xr() % 4);
                        static const int64_t narrow_mb[] = {0, 10240, 30720};
                        q.memory_mb = wide ? (xr() % 3 ? 1024 * (1 + (int64_t)(xr() % 30)) : 0) : narrow_mb[xr() % 3];
                        q.exclusive = wide && xr() % 5 == 0;
                        q.timeout_ms = xr() % 3 ? (int64_t)(1 + xr() % 50) * 1000 : 0;
                        q.estimate_ms = xr() % 4 == 0 ? (int64_t)(1 + xr() % 50) * 1000 : 0;
                        q.node_selector = wide && xr() % 6 == 0 ? "zone=a" : NULL;
                        q.gpu_model = wide && xr() % 7 == 0 ? "*4090*" : NULL;
                        q.model = models_max ? models[xr() % 4] : NULL;
                        if (multi && xr() % 8 == 0) { /* wider than any node: whole nodes */
                                q.gpus = 9 + (int)(xr() % 12);
                                q.exclusive = false;
                                q.model = NULL;
                                q.memory_mb = xr() % 3 ? 0 : 20480;
                        } else if (multi && xr() % 16 == 0) { /* elastic in whole nodes */
                                q.gpus = q.elastic_min_nodes = 1 + (int)(xr() % 3);
                                q.elastic_max_nodes = q.elastic_min_nodes + (int)(xr() % 2);
                                q.exclusive = false;
                                q.model = NULL;
                                q.memory_mb = 0;
                        }
                        if (gp_sched_enqueue(s, &q) < 0)
                                id--; /* infeasible here (a gang larger than any node of its kind) */
                }
                now += (int64_t)(xr() % 4000);
                n = 0;
                assert_int_equal(gp_sched_run(s, now, &d, &n, &cap), 0);
                /* every queued task's reservation, as if it were the blocked one */
                size_t pos = 0;
                stask *t;
                while ((t = gp_i64map_next(&s->tasks, &pos, NULL)))
                        if (!t->running && !t->multi) {
                                reserved += agree(s, t, now);
                                checked++;
                        } else if (!t->running) {
                                reserved_multi += agree_multi(s, t, now);
                                checked_multi++;
                        }
                /* some end, the pool changes */
                pos = 0;
                int64_t ends[8];
                int ne = 0;
                while ((t = gp_i64map_next(&s->tasks, &pos, NULL)) && ne < 8)
                        if (t->running && xr() % 3 == 0)
                                ends[ne++] = t->id;
                for (int i = 0; i < ne; i++)
                        assert_int_equal(gp_sched_remove_at(s, ends[i], now), 0);
                uint32_t gi = (uint32_t)(xr() % s->ngpus);
                switch (xr() % 8) {
                case 0:
                        gp_sched_gpu_set_drained(s, gi, !s->gpus[gi].drained);
                        break;
                case 1:
                        gp_sched_gpu_set_healthy(s, gi, !s->gpus[gi].healthy);
                        break;
                case 2:
                        assert_true(gp_sched_gpu_set_foreign(s, gi, (int64_t)(xr() % 3) * 8192) >= 0);
                        break;
                case 3: {
                        char node[16];
                        snprintf(node, sizeof(node), "n%02d", (int)(xr() % (uint64_t)nodes));
                        assert_int_equal(gp_sched_node_set_labels(s, node, xr() % 2 ? "zone=a" : ""), 0);
                        break;
                }
                case 4:
                        if (nodes < 40) { /* a node joins */
                                char node[16];
                                snprintf(node, sizeof(node), "n%02d", nodes++);
                                add_gpus(s, node, 1 + (int)(xr() % 8), 81920, "NVIDIA A100-SXM4-80GB");
                        }
                        break;
                case 5: { /* an idle node leaves (busy ones are refused: -EBUSY) */
                        char node[16];
                        snprintf(node, sizeof(node), "n%02d", (int)(xr() % (uint64_t)nodes));
                        int rc = gp_sched_node_remove(s, node);
                        assert_true(rc == 0 || rc == -EBUSY);
                        break;
                }
                case 6: { /* a node stops or starts taking parts of multi-node tasks */
                        char node[16];
                        snprintf(node, sizeof(node), "n%02d", (int)(xr() % (uint64_t)nodes));
                        assert_int_equal(gp_sched_node_set_allow(s, node, xr() % 3 ? GP_SCHED_NODE_MULTI |
                                                                                          GP_SCHED_NODE_ELASTIC
                                                                                    : GP_SCHED_NODE_ELASTIC),
                                         0);
                        break;
                }
                default:
                        break;
                }
        }
        /* the comparison was not vacuous: most had a reservation */
        if (checked <= rounds || reserved <= checked / 2)
                fail_msg("too few checked: %d queued tasks over %d rounds, %d with a reservation", checked, rounds,
                         reserved);
        if (multi && (checked_multi <= rounds || reserved_multi <= checked_multi / 4))
                fail_msg("too few multi-node checked: %d over %d rounds, %d with a reservation", checked_multi, rounds,
                         reserved_multi);
        free(d);
        gp_sched_free(s);
}

static void cached_reservation_is_the_scans(void **state) {
        (void)state;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        random_pool_and_work(&c, 400, 0, false, false);
}

/* Gangs wider than any node and tasks elastic in whole nodes among them:
 * the multi-node reservation (per-node answers and their tree) chooses the
 * scan's nodes and time, while nodes stop and start allowing them. */
static void cached_multi_node_reservation_is_the_scans(void **state) {
        (void)state;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        random_pool_and_work(&c, 400, 0, false, true);
        random_pool_and_work(&c, 300, 0, true, true);
}

static void cached_reservation_is_the_scans_many_shapes(void **state) {
        (void)state;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        random_pool_and_work(&c, 300, 0, true, false);
}

static void cached_reservation_is_the_scans_with_models(void **state) {
        (void)state;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        random_pool_and_work(&c, 300, 2, true, false);
}

/* More shapes than the cache keeps: answers stay right as slots are
 * replaced and taken again. */
static void more_shapes_than_slots(void **state) {
        (void)state;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        gp_sched *s;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_gpus(s, "a", 8, 81920, "NVIDIA A100-SXM4-80GB");
        add_gpus(s, "b", 8, 81920, "NVIDIA A100-SXM4-80GB");
        /* fill: 16 whole GPUs with staggered ends */
        for (int i = 0; i < 16; i++) {
                gp_sched_req q = {.id = 1 + i, .tenant = "t", .priority = 5, .gpus = 1, .timeout_ms = (int64_t)(16 - i) * 1000};
                assert_int_equal(gp_sched_enqueue(s, &q), 0);
        }
        gp_sched_decision *d = NULL;
        size_t n = 0, cap = 0;
        assert_int_equal(gp_sched_run(s, 0, &d, &n, &cap), 0);
        assert_int_equal(n, 16);
        /* queued: RESV_SHAPES * 2 shapes of memory */
        for (int i = 0; i < RESV_SHAPES * 2; i++) {
                gp_sched_req q = {.id = 100 + i, .tenant = "t", .priority = 5, .gpus = 1 + i % 3,
                                  .memory_mb = 1024 * (1 + i)};
                assert_int_equal(gp_sched_enqueue(s, &q), 0);
        }
        for (int round = 0; round < 3; round++)
                for (int i = 0; i < RESV_SHAPES * 2; i++) {
                        stask *t = map_get(s, 100 + i);
                        assert_non_null(t);
                        assert_true(agree(s, t, 500 + round * 3000));
                }
        /* an end after the slots were filled is seen by each shape */
        assert_int_equal(gp_sched_remove_at(s, 1, 4000), 0);
        for (int i = 0; i < RESV_SHAPES * 2; i++)
                assert_true(agree(s, map_get(s, 100 + i), 4000));
        free(d);
        gp_sched_free(s);
}

/* A round's end: every queued task's reservation against the scan, then
 * up to max_ends running tasks end (each with odds 1 in end_in) and queued
 * ones are cancelled (1 in cancel_in), which keeps a queue that would only
 * grow short.  Returns how many had a reservation. */
static int agree_end_cancel(gp_sched *s, int64_t now, int max_ends, uint64_t end_in, uint64_t cancel_in) {
        int reserved = 0;
        size_t pos = 0;
        stask *t;
        while ((t = gp_i64map_next(&s->tasks, &pos, NULL)))
                if (!t->running)
                        reserved += agree(s, t, now);
        pos = 0;
        int64_t ends[16];
        int ne = 0;
        while ((t = gp_i64map_next(&s->tasks, &pos, NULL)) && ne < max_ends && ne < 16)
                if (t->running && xr() % end_in == 0)
                        ends[ne++] = t->id;
        for (int i = 0; i < ne; i++)
                assert_int_equal(gp_sched_remove_at(s, ends[i], now), 0);
        pos = 0;
        while ((t = gp_i64map_next(&s->tasks, &pos, NULL)))
                if (!t->running && xr() % cancel_in == 0) {
                        assert_int_equal(gp_sched_remove_at(s, t->id, now), 0);
                        pos = 0;
                }
        return reserved;
}

/* Nodes alike, tasks alike: many nodes tie on when their k-th GPU is
 * ready (the same bound, or none), and the GPUs ready now, then the node
 * number, decide; the kept answers decide as the scan does. */
static void ties_between_nodes(void **state) {
        (void)state;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        gp_sched *s;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_nodes(s, 16, 4);
        gp_sched_decision *d = NULL;
        size_t n = 0, cap = 0;
        int64_t id = 1, now = 1000;
        int reserved = 0;
        for (int r = 0; r < 300; r++) {
                for (int k = 0; k < 8; k++) {
                        gp_sched_req q = {.id = id++, .tenant = "t", .priority = 5, .gpus = 1 + (int)(xr() % 3),
                                          .timeout_ms = xr() % 3 ? 10000 : 0};
                        assert_int_equal(gp_sched_enqueue(s, &q), 0);
                }
                now += xr() % 2 ? 0 : 5000;
                n = 0;
                assert_int_equal(gp_sched_run(s, now, &d, &n, &cap), 0);
                reserved += agree_end_cancel(s, now, 6, 4, 3);
        }
        if (reserved < 600)
                fail_msg("only %d reservations compared", reserved);
        free(d);
        gp_sched_free(s);
}

/* Shared GPUs crowded with tasks: many of them end at the same time (the
 * same start and bound), memory freed to the exact megabyte asked for,
 * more distinct ends than a GPU's kept summary holds (gready), and more
 * than 64 tasks on a GPU; the answers are the scan's, which reads the
 * tasks themselves. */
static void crowded_shared_gpus(void **state) {
        (void)state;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.memory_safety_margin_mb = 0; /* whole GPUs of 81,920 MB: sums exact to the megabyte */
        gp_sched *s;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_nodes(s, 6, 2);
        gp_sched_decision *d = NULL;
        size_t n = 0, cap = 0;
        int64_t id = 1, now = 1000;
        int reserved = 0, crowded = 0, tied = 0;
        static const int64_t mb[] = {512, 1024, 2048, 4096, 10240, 20480, 40960};
        for (int r = 0; r < 200; r++) {
                for (int k = 0; k < 40; k++) {
                        gp_sched_req q = {.id = id++, .tenant = "t", .priority = 5, .gpus = 1,
                                          .memory_mb = mb[xr() % (r % 5 == 0 ? 2 : 7)]};
                        uint64_t b = xr() % 4;
                        q.timeout_ms = b == 0 ? 0 : (int64_t)b * 5000;
                        assert_int_equal(gp_sched_enqueue(s, &q), 0);
                }
                now += xr() % 2 ? 0 : 2500;
                n = 0;
                assert_int_equal(gp_sched_run(s, now, &d, &n, &cap), 0);
                for (uint32_t gi = 0; gi < s->ngpus; gi++) {
                        const sgpu *g = &s->gpus[gi];
                        crowded += g->ntasks > 64;
                        for (int i = 1; i < g->ntasks; i++)
                                tied += task_end(g->tasks[i]) != TIME_INF &&
                                        task_end(g->tasks[i]) == task_end(g->tasks[0]);
                }
                reserved += agree_end_cancel(s, now, 10, 5, 2);
        }
        /* exactly: two halves of a GPU, bounded 5 s and 9 s, and a half
         * asked for; 70 tasks ending at once (over 64: no known time) */
        gp_sched_free(s);
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_gpus(s, "h", 1, 81920, "NVIDIA A100-SXM4-80GB");
        add_gpus(s, "m", 1, 81920, "NVIDIA A100-SXM4-80GB");
        add_gpus(s, "e", 1, 81920, "NVIDIA A100-SXM4-80GB");
        assert_int_equal(gp_sched_node_set_labels(s, "e", "exact=1"), 0);
        assert_int_equal(gp_sched_node_set_labels(s, "h", "half=1"), 0);
        assert_int_equal(gp_sched_node_set_labels(s, "m", "many=1"), 0);
        for (int i = 0; i < 2; i++) {
                gp_sched_req q = {.id = 1 + i, .tenant = "t", .priority = 5, .gpus = 1, .memory_mb = 40960,
                                  .timeout_ms = 5000 + 4000 * i, .node_selector = "half=1"};
                assert_int_equal(gp_sched_enqueue(s, &q), 0);
        }
        for (int i = 0; i < 70; i++) {
                gp_sched_req q = {.id = 10 + i, .tenant = "t", .priority = 5, .gpus = 1, .memory_mb = 1024,
                                  .timeout_ms = 7000, .node_selector = "many=1"};
                assert_int_equal(gp_sched_enqueue(s, &q), 0);
        }
        gp_sched_req one = {.id = 90, .tenant = "t", .priority = 5, .gpus = 1, .memory_mb = 40960,
                            .timeout_ms = 5000, .node_selector = "exact=1"};
        assert_int_equal(gp_sched_enqueue(s, &one), 0);
        n = 0;
        assert_int_equal(gp_sched_run(s, 0, &d, &n, &cap), 0);
        assert_int_equal(n, 73);
        /* queued after the run: what is free is exactly what it asks */
        gp_sched_req fits = {.id = 91, .tenant = "t", .priority = 5, .gpus = 1, .memory_mb = 40960,
                             .node_selector = "exact=1"};
        assert_int_equal(gp_sched_enqueue(s, &fits), 0);
        assert_true(agree(s, map_get(s, 91), 0));
        assert_int_equal(reserve(s, map_get(s, 91), 0), 0);
        gp_sched_req half = {.id = 100, .tenant = "t", .priority = 5, .gpus = 1, .memory_mb = 40960,
                             .node_selector = "half=1"};
        gp_sched_req big = {.id = 101, .tenant = "t", .priority = 5, .gpus = 1, .memory_mb = 20480,
                            .node_selector = "many=1"};
        assert_int_equal(gp_sched_enqueue(s, &half), 0);
        assert_int_equal(gp_sched_enqueue(s, &big), 0);
        assert_true(agree(s, map_get(s, 100), 0));
        assert_int_equal(reserve(s, map_get(s, 100), 0), 5000);
        assert_true(agree(s, map_get(s, 101), 0));
        assert_int_equal(reserve(s, map_get(s, 101), 0), TIME_INF); /* 70 tasks: no time known */
        if (reserved < 1000 || crowded < 10 || tied < 100)
                fail_msg("not crowded enough: %d reservations, %d GPUs over 64 tasks, %d tied ends", reserved,
                         crowded, tied);
        free(d);
        gp_sched_free(s);
}

/* Gangs wider than 8 GPUs, on nodes of 16: their own trees. */
static void wide_gangs(void **state) {
        (void)state;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        gp_sched *s;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_gpus(s, "a", 16, 81920, "NVIDIA A100-SXM4-80GB");
        add_gpus(s, "b", 16, 81920, "NVIDIA A100-SXM4-80GB");
        add_gpus(s, "c", 16, 81920, "NVIDIA A100-SXM4-80GB");
        gp_sched_decision *d = NULL;
        size_t n = 0, cap = 0;
        for (int i = 0; i < 48; i++) {
                gp_sched_req q = {.id = 1 + i, .tenant = "t", .priority = 5, .gpus = 1,
                                  .timeout_ms = i % 7 ? (int64_t)(1 + xr() % 40) * 1000 : 0};
                assert_int_equal(gp_sched_enqueue(s, &q), 0);
        }
        assert_int_equal(gp_sched_run(s, 0, &d, &n, &cap), 0);
        assert_int_equal(n, 48);
        static const int widths[] = {9, 12, 16};
        for (int i = 0; i < 3; i++) {
                gp_sched_req q = {.id = 100 + i, .tenant = "t", .priority = 5, .gpus = widths[i]};
                assert_int_equal(gp_sched_enqueue(s, &q), 0);
        }
        int64_t now = 0;
        int reserved = 0;
        for (int round = 0; round < 20; round++) {
                for (int i = 0; i < 3; i++) {
                        stask *t = map_get(s, 100 + i);
                        if (t && !t->running)
                                reserved += agree(s, t, now);
                }
                now += 2000;
                int64_t id = 1 + (int64_t)(xr() % 48);
                stask *t = map_get(s, id);
                if (t && t->running)
                        assert_int_equal(gp_sched_remove_at(s, id, now), 0);
        }
        assert_true(reserved >= 20);
        free(d);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(cached_reservation_is_the_scans),
                cmocka_unit_test(cached_reservation_is_the_scans_many_shapes),
                cmocka_unit_test(cached_multi_node_reservation_is_the_scans),
                cmocka_unit_test(cached_reservation_is_the_scans_with_models),
                cmocka_unit_test(more_shapes_than_slots),
                cmocka_unit_test(ties_between_nodes),
                cmocka_unit_test(wide_gangs),
                cmocka_unit_test(crowded_shared_gpus),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
