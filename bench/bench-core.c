/* bench-core.c - the scheduling core alone: place 100,000 queued tasks onto
 * 10,000 simulated GPUs (1,250 nodes of 8) and report decisions per second.
 *
 * Usage: bench-core [--tasks N] [--nodes N] [--gpus-per-node N] [--seed S]
 * Prints one line per scenario; the baseline in the same run is the FIFO
 * policy without backfill, so the figures are comparable as ratios.
 * Workloads (seeded, reproducible), on 80 GB GPUs:
 *   all-fit: 100% shared single-GPU tasks of 1-8 GB, so every task is
 *            placed in the first run (the "place 100,000 tasks" figure);
 *   mixed:   60% shared single-GPU tasks of 1-16 GB, 25% whole GPUs, 15%
 *            gangs of 2/4/8 whole GPUs: the cluster fills, the rest waits,
 *            then 1,000 task ends are replayed one run each (steady state).
 * Priorities 0..9 at random; half the tasks have a timeout.
 *
 * Multi-tenant scenarios run the same tasks (same shapes, priorities and
 * timeouts) spread over 100 tenants: weights 1..4, a fifth of them with
 * max_concurrent 300, a seventh with max_gpus 150, a tenth with 40
 * guaranteed GPUs, 60 tenants in group "internal" (80%) and 40 in
 * "external" (20%); half the tasks are preemptible.  Their steady state
 * advances the clock 1 s per task end (usage accrues, least run times
 * pass), and the plain hybrid scenario is run on the same clock as their
 * reference: each line ends with decisions/s as a ratio of that plain
 * figure (first run and steady state; decisions = starts + preemptions). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sched.h"

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t xr(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

typedef struct scenario {
        const char *name;
        gp_sched_policy policy;
        bool backfill;
        bool all_fit;   /* only shared 1-8 GB tasks: all 100k fit at once */
        int tenants;    /* 0: every task of tenant "t" */
        bool preempt;
        int64_t step_ms;   /* clock advance per steady-state round (0: 1 ms from 2000) */
        bool reference;    /* the plain figure the multi-tenant lines compare to */
} scenario;

static double ref_first = 0, ref_steady = 0;

static uint64_t rng2 = 0x9e3779b97f4a7c15ULL; /* tenants and preemptible: keeps the task shapes of rng */
static uint64_t xr2(void) {
        rng2 ^= rng2 << 13;
        rng2 ^= rng2 >> 7;
        rng2 ^= rng2 << 17;
        return rng2;
}

static int setup_tenants(gp_sched *s, int n) {
        if (gp_sched_group_set(s, "internal", 80) < 0 || gp_sched_group_set(s, "external", 20) < 0)
                return -1;
        for (int i = 0; i < n; i++) {
                char name[16];
                snprintf(name, sizeof(name), "t%03d", i);
                gp_sched_tenant_cfg c = {.weight = 1 + (uint32_t)(i % 4),
                                         .group = i < n * 6 / 10 ? "internal" : "external",
                                         .max_concurrent = i % 5 == 0 ? 300 : 0,
                                         .max_gpus_milli = i % 7 == 0 ? 150000 : 0,
                                         .guaranteed_gpus_milli = i % 10 == 0 ? 40000 : 0};
                if (gp_sched_tenant_set(s, name, &c) < 0)
                        return -1;
        }
        return 0;
}

static int run_one(const scenario *sc, int ntasks, int nodes, int per_node, uint64_t seed) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = sc->policy;
        c.backfill = sc->backfill;
        c.max_queue_depth = ntasks;
        c.preemption = sc->preempt;
        gp_sched *s;
        if (gp_sched_new(&c, &s) < 0)
                return 1;
        if (sc->tenants && setup_tenants(s, sc->tenants) < 0)
                return 1;
        static char names[1000][16];
        for (int i = 0; i < sc->tenants && i < 1000; i++)
                snprintf(names[i], sizeof(names[i]), "t%03d", i);
        rng2 = 0x9e3779b97f4a7c15ULL;
        char node[32], uuid[48];
        for (int n = 0; n < nodes; n++)
                for (int i = 0; i < per_node; i++) {
                        snprintf(node, sizeof(node), "node%04d", n);
                        snprintf(uuid, sizeof(uuid), "GPU-%04d-%d", n, i);
                        gp_sched_gpu_desc d = {.node = node, .index = i, .uuid = uuid,
                                               .name = "NVIDIA A100-SXM4-80GB", .memory_total_mb = 81920};
                        if (gp_sched_gpu_add(s, &d, NULL) < 0)
                                return 1;
                }
        rng = seed;
        double t0 = now_s();
        for (int i = 0; i < ntasks; i++) {
                gp_sched_req r = {.id = i + 1, .tenant = "t", .priority = (int)(xr() % 10)};
                uint64_t k = sc->all_fit ? 0 : xr() % 100;
                if (sc->all_fit) {
                        r.gpus = 1;
                        r.memory_mb = 1024 * (1 + (int64_t)(xr() % 8));
                } else if (k < 60) {
                        r.gpus = 1;
                        r.memory_mb = 1024 * (1 + (int64_t)(xr() % 16));
                } else if (k < 85) {
                        r.gpus = 1;
                } else {
                        static const int g[] = {2, 4, 8};
                        r.gpus = g[xr() % 3];
                }
                r.timeout_ms = (xr() % 2) ? (int64_t)(60 + xr() % 3600) * 1000 : 0;
                if (sc->tenants) {
                        r.tenant = names[xr2() % (uint64_t)sc->tenants];
                        r.preemptible = xr2() % 2;
                }
                if (gp_sched_enqueue(s, &r) < 0)
                        return 1;
        }
        double t1 = now_s();
        gp_sched_decision *d = NULL;
        size_t n = 0, cap = 0;
        if (gp_sched_run(s, 1000, &d, &n, &cap) < 0)
                return 1;
        double t2 = now_s();
        /* steady state: finish 1,000 random running tasks, one run each */
        size_t started = n, more = 0, starts = 0;
        double t3 = now_s();
        /* the running tasks: what the first run started (ids kept current
         * below as later runs start and preempt) */
        size_t idcap = (size_t)ntasks;
        int64_t *ids = malloc(sizeof(int64_t) * idcap);
        if (!ids)
                return 1;
        for (size_t i = 0; i < n; i++)
                ids[i] = d[i].id;
        size_t nids = n;
        int rounds = 1000;
        for (int i = 0; i < rounds && nids; i++) {
                size_t k = xr() % nids;
                int64_t now = sc->step_ms ? 1000 + (int64_t)(i + 1) * sc->step_ms : 2000 + i;
                gp_sched_remove_at(s, ids[k], now);
                ids[k] = ids[--nids];
                n = 0;
                gp_sched_run(s, now, &d, &n, &cap);
                more += n;
                if (!sc->step_ms)
                        continue; /* the original scenarios keep their exact workload */
                for (size_t j = 0; j < n; j++) {
                        if (d[j].kind == GP_DECIDE_START) {
                                starts++;
                                if (nids < idcap)
                                        ids[nids++] = d[j].id;
                        } else if (d[j].kind == GP_DECIDE_PREEMPT) {
                                for (size_t m = 0; m < nids; m++)
                                        if (ids[m] == d[j].id) {
                                                ids[m] = ids[--nids];
                                                break;
                                        }
                        }
                }
        }
        double t4 = now_s();
        gp_sched_stats st;
        gp_sched_get_stats(s, &st);
        double first = started / (t2 - t1), steady = more / (t4 - t3);
        printf("%-26s enqueue %7.0f k/s | first run: %6zu started in %7.1f ms = %8.0f decisions/s | "
               "steady: %4d ends, %5zu decisions, %6.1f us/run = %7.0f decisions/s | busy %u/%u GPUs, queued %zu",
               sc->name, ntasks / (t1 - t0) / 1000, started, (t2 - t1) * 1000, first, rounds, more,
               (t4 - t3) / rounds * 1e6, steady, st.gpus_busy, st.gpus_total, st.queued_total);
        if (sc->preempt)
                printf(", preempted %" PRIu64, st.total_preempted);
        if (sc->reference) {
                ref_first = first;
                ref_steady = steady;
        } else if (sc->tenants && ref_first > 0 && ref_steady > 0) {
                printf(" | vs plain: first %.2f, steady %.2f", first / ref_first, steady / ref_steady);
        }
        printf("\n");
        (void)starts;
        free(ids);
        free(d);
        gp_sched_free(s);
        return 0;
}

int main(int argc, char **argv) {
        int ntasks = 100000, nodes = 1250, per_node = 8;
        uint64_t seed = 42;
        for (int i = 1; i + 1 < argc; i += 2) {
                if (!strcmp(argv[i], "--tasks"))
                        ntasks = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--nodes"))
                        nodes = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--gpus-per-node"))
                        per_node = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--seed"))
                        seed = strtoull(argv[i + 1], NULL, 10);
                else {
                        fprintf(stderr, "usage: %s [--tasks N] [--nodes N] [--gpus-per-node N] [--seed S]\n", argv[0]);
                        return 2;
                }
        }
        if (ntasks < 1 || nodes < 1 || per_node < 1 || per_node > 256) {
                fprintf(stderr, "bench-core: bad sizes\n");
                return 2;
        }
        printf("bench-core: %d queued tasks onto %d GPUs (%d nodes x %d), seed %" PRIu64 "\n", ntasks,
               nodes * per_node, nodes, per_node, seed);
        static const scenario sc[] = {
                {.name = "all-fit fifo", .policy = GP_SCHED_FIFO, .all_fit = true},
                {.name = "all-fit hybrid+bf", .policy = GP_SCHED_HYBRID, .backfill = true, .all_fit = true},
                {.name = "mixed fifo, no bf", .policy = GP_SCHED_FIFO},
                {.name = "mixed strict+bf", .policy = GP_SCHED_STRICT, .backfill = true},
                {.name = "mixed hybrid+bf", .policy = GP_SCHED_HYBRID, .backfill = true},
                {.name = "plain hybrid+bf, 1 s steps", .policy = GP_SCHED_HYBRID, .backfill = true, .step_ms = 1000,
                 .reference = true},
                {.name = "100 tenants", .policy = GP_SCHED_HYBRID, .backfill = true, .tenants = 100, .step_ms = 1000},
                {.name = "100 tenants + preemption", .policy = GP_SCHED_HYBRID, .backfill = true, .tenants = 100,
                 .preempt = true, .step_ms = 1000},
        };
        for (size_t i = 0; i < sizeof(sc) / sizeof(sc[0]); i++)
                if (run_one(&sc[i], ntasks, nodes, per_node, seed))
                        return 1;
        return 0;
}
