/* bench-core.c - the scheduling core alone: place 100,000 queued tasks onto
 * 10,000 simulated GPUs (1,250 nodes of 8) and report decisions per second.
 *
 * Usage: bench-core [--rounds R] [--tasks N] [--nodes N] [--gpus-per-node N] [--seed S] [--only TEXT]
 * (--only: the scenarios whose name contains TEXT, and the plain reference
 * when a multi-tenant one is among them)
 * Every scenario is run R times (default 7), the scenarios interleaved
 * (round 1 of each in turn, then round 2, ...), and each figure is printed
 * as the median and the min-max over the rounds.  The baselines are in the
 * same run: FIFO without backfill for the single-tenant lines, and the
 * plain hybrid scenario on the same clock for the multi-tenant ones, whose
 * ratios are taken round by round (same round, so the same machine load)
 * before their median.
 * Workloads (seeded, reproducible: the counts are checked to be the same
 * in every round), on 80 GB GPUs:
 *   all-fit: 100% shared single-GPU tasks of 1-8 GB, so every task is
 *            placed in the first run (the "place 100,000 tasks" figure);
 *   mixed:   60% shared single-GPU tasks of 1-16 GB, 25% whole GPUs, 15%
 *            gangs of 2/4/8 whole GPUs: the cluster fills, the rest waits,
 *            then 1,000 task ends are replayed one run each (steady state);
 *   2-node gangs: mixed, but a quarter of the gangs take 16 GPUs (two
 *            whole nodes of 8: multi-node tasks, placed and reserved on
 *            whole nodes), on the plain scenario's clock.
 * Priorities 0..9 at random; half the tasks have a timeout.
 *
 * Times are the CPU time of the benchmark's thread (CLOCK_THREAD_CPUTIME_ID):
 * on a shared machine the time it waits for a core is not the core's.
 * What is timed: "first run" is the one gp_sched_run that places the
 * freshly queued tasks (decisions/s = tasks it started / its time; the
 * tasks were just written by the enqueue loop, as in a daemon that has
 * just taken a burst).  "steady" is the time of one gp_sched_run after a
 * task end (us/run), averaged over the 1,000 ends; each end's
 * gp_sched_remove_at is timed with its run, as the daemon does both.
 * Decisions per steady run depend on the workload (with preemption a start
 * may come with preemptions), so the steady comparison is time per run,
 * not decisions per second.
 *
 * Multi-tenant scenarios run the same tasks (same shapes, priorities and
 * timeouts) spread over 100 tenants: weights 1..4, a fifth of them with
 * max_concurrent 300, a seventh with max_gpus 150, a tenth with 40
 * guaranteed GPUs, 60 tenants in group "internal" (80%) and 40 in
 * "external" (20%); half the tasks are preemptible.  Their steady state
 * advances the clock 1 s per task end (usage accrues, least run times
 * pass), and the plain hybrid scenario is run on the same clock as their
 * reference: "vs plain" is the multi-tenant decisions/s over the plain
 * one (first run) and the plain us/run over the multi-tenant one (steady),
 * so 1.00 is as fast as plain and 0.50 half as fast.
 *
 * bench-core-phases (make bench-core-phases) is this program with the
 * core's phase marks compiled in (GP_SCHED_PHASES, src/core/sched-int.h):
 * after the table it prints, per scenario, where the steady runs went:
 * calls of each phase per run (exact: the same on every machine) and its
 * us per run (the mean over the rounds; the marks cost ~20 ns each and
 * are counted in). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sched.h"
#ifdef GP_SCHED_PHASES
#include "core/sched-int.h" /* gp_phases */
#endif

/* The benchmark's own CPU time: the machine is shared (other builds and
 * tests), and time spent descheduled is not the scheduler's. */
static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
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
        bool gangs2;       /* a quarter of the gangs take 16 GPUs: two whole nodes of 8 */
} scenario;


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
                                         .quota = {.max_concurrent = i % 5 == 0 ? 300 : 0,
                                                   .max_gpus_milli = i % 7 == 0 ? 150000 : 0,
                                                   .guaranteed_gpus_milli = i % 10 == 0 ? 40000 : 0}};
                if (gp_sched_tenant_set(s, name, &c) < 0)
                        return -1;
        }
        return 0;
}

/* one round of one scenario */
typedef struct result {
        double enqueue_kps;        /* enqueues per ms */
        size_t started;            /* by the first run (deterministic) */
        double first_ms, first_dps;
        size_t steady_decisions;   /* deterministic */
        double steady_us;          /* per end: remove + run */
        unsigned busy, total;
        size_t queued;
        uint64_t preempted;
        double build_ms;           /* the pool: every gp_sched_gpu_add */
#ifdef GP_SCHED_PHASES
        gp_phase ph[PH_N];         /* the steady runs' */
#endif
} result;

/* ids[m] leaves the running ids (the last takes its place); pos follows. */
static void ids_drop(int64_t *ids, size_t *pos, size_t *nids, size_t m) {
        pos[ids[m]] = (size_t)-1;
        ids[m] = ids[--*nids];
        if (m < *nids)
                pos[ids[m]] = m;
}

static int run_one(const scenario *sc, int ntasks, int nodes, int per_node, uint64_t seed, result *res) {
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
        double tb = now_s();
        for (int n = 0; n < nodes; n++)
                for (int i = 0; i < per_node; i++) {
                        snprintf(node, sizeof(node), "node%04d", n);
                        snprintf(uuid, sizeof(uuid), "GPU-%04d-%d", n, i);
                        gp_sched_gpu_desc d = {.node = node, .index = i, .uuid = uuid,
                                               .name = "NVIDIA A100-SXM4-80GB", .memory_total_mb = 81920};
                        if (gp_sched_gpu_add(s, &d, NULL) < 0)
                                return 1;
                }
        double build_ms = (now_s() - tb) * 1000;
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
                        static const int g[] = {2, 4, 8}, g2[] = {2, 4, 8, 16};
                        r.gpus = sc->gangs2 ? g2[xr() % 4] : g[xr() % 3];
                }
                r.timeout_ms = (xr() % 2) ? (int64_t)(60 + xr() % 3600) * 1000 : 0;
                if (sc->tenants) {
                        r.tenant = names[xr2() % (uint64_t)sc->tenants];
                        r.preemptible = xr2() % 2;
                }
                if (gp_sched_enqueue(s, &r) < 0)
                        return 1;
        }
        /* the decisions buffer is the caller's and a daemon reuses it from
         * run to run: have it allocated and touched before the clock starts
         * (else the first run's time is mostly page faults of its growth) */
        size_t n = 0, cap = (size_t)ntasks + 64;
        gp_sched_decision *d = malloc(cap * sizeof(*d));
        if (!d)
                return 1;
        memset(d, 0, cap * sizeof(*d));
        double t1 = now_s();
        if (gp_sched_run(s, 1000, &d, &n, &cap) < 0)
                return 1;
        double t2 = now_s();
        /* steady state: finish 1,000 random running tasks, one run each */
        size_t started = n, more = 0, starts = 0;
        /* the running tasks: what the first run started (ids kept current
         * below as later runs start and preempt) */
        size_t idcap = (size_t)ntasks;
        int64_t *ids = malloc(sizeof(int64_t) * idcap);
        /* where each id is in ids (-1: not there), so that a preempted
         * task leaves ids without a search of it: the time is the core's */
        size_t *pos = malloc(sizeof(size_t) * ((size_t)ntasks + 1));
        if (!ids || !pos)
                return 1;
        for (int i = 0; i <= ntasks; i++)
                pos[i] = (size_t)-1;
        for (size_t i = 0; i < n; i++) {
                ids[i] = d[i].id;
                pos[d[i].id] = i;
        }
        size_t nids = n;
        int rounds = 1000;
#ifdef GP_SCHED_PHASES
        memset(gp_phases, 0, sizeof(gp_phases));
#endif
        double t3 = now_s(); /* after the bench's own set-up of ids and pos */
        for (int i = 0; i < rounds && nids; i++) {
                size_t k = xr() % nids;
                int64_t now = sc->step_ms ? 1000 + (int64_t)(i + 1) * sc->step_ms : 2000 + i;
                gp_sched_remove_at(s, ids[k], now);
                ids_drop(ids, pos, &nids, k);
                n = 0;
                gp_sched_run(s, now, &d, &n, &cap);
                more += n;
                if (!sc->step_ms)
                        continue; /* the original scenarios keep their exact workload */
                for (size_t j = 0; j < n; j++) {
                        if (d[j].kind == GP_DECIDE_START) {
                                starts++;
                                if (nids < idcap) {
                                        pos[d[j].id] = nids;
                                        ids[nids++] = d[j].id;
                                }
                        } else if (d[j].kind == GP_DECIDE_PREEMPT && pos[d[j].id] != (size_t)-1) {
                                ids_drop(ids, pos, &nids, pos[d[j].id]);
                        }
                }
        }
        double t4 = now_s();
        gp_sched_stats st;
        gp_sched_get_stats(s, &st);
        *res = (result){.enqueue_kps = ntasks / (t1 - t0) / 1000, .started = started, .first_ms = (t2 - t1) * 1000,
                        .first_dps = started / (t2 - t1), .steady_decisions = more,
                        .steady_us = (t4 - t3) / rounds * 1e6, .busy = st.gpus_busy, .total = st.gpus_total,
                        .queued = st.queued_total, .preempted = st.total_preempted, .build_ms = build_ms};
#ifdef GP_SCHED_PHASES
        memcpy(res->ph, gp_phases, sizeof(gp_phases));
#endif
        (void)starts;
        free(pos);
        free(ids);
        free(d);
        gp_sched_free(s);
        return 0;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

/* "median [min-max]" of v[0..n) with printf format f (v is sorted) */
static void stat3(char *buf, size_t size, const char *f, double *v, int n) {
        qsort(v, (size_t)n, sizeof(*v), cmp_double);
        double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
        char a[32], b[32], c[32];
        snprintf(a, sizeof(a), f, med);
        snprintf(b, sizeof(b), f, v[0]);
        snprintf(c, sizeof(c), f, v[n - 1]);
        snprintf(buf, size, "%s [%s-%s]", a, b, c);
}

#define MAX_ROUNDS 99

int main(int argc, char **argv) {
        int ntasks = 100000, nodes = 1250, per_node = 8, nrounds = 7;
        uint64_t seed = 42;
        const char *only = NULL;
        for (int i = 1; i + 1 < argc; i += 2) {
                if (!strcmp(argv[i], "--tasks"))
                        ntasks = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--nodes"))
                        nodes = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--gpus-per-node"))
                        per_node = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--seed"))
                        seed = strtoull(argv[i + 1], NULL, 10);
                else if (!strcmp(argv[i], "--rounds"))
                        nrounds = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--only"))
                        only = argv[i + 1];
                else
                        break;
        }
        if (argc % 2 == 0) {
                fprintf(stderr, "usage: %s [--rounds R] [--tasks N] [--nodes N] [--gpus-per-node N] [--seed S] [--only TEXT]\n",
                        argv[0]);
                return 2;
        }
        if (ntasks < 1 || nodes < 1 || per_node < 1 || per_node > 256 || nrounds < 1 || nrounds > MAX_ROUNDS) {
                fprintf(stderr, "bench-core: bad sizes (rounds 1..%d)\n", MAX_ROUNDS);
                return 2;
        }
        static const scenario sc[] = {
                {.name = "all-fit fifo", .policy = GP_SCHED_FIFO, .all_fit = true},
                {.name = "all-fit hybrid+bf", .policy = GP_SCHED_HYBRID, .backfill = true, .all_fit = true},
                {.name = "mixed fifo, no bf", .policy = GP_SCHED_FIFO},
                {.name = "mixed strict+bf", .policy = GP_SCHED_STRICT, .backfill = true},
                {.name = "mixed hybrid+bf", .policy = GP_SCHED_HYBRID, .backfill = true},
                {.name = "plain hybrid+bf, 1 s steps", .policy = GP_SCHED_HYBRID, .backfill = true, .step_ms = 1000,
                 .reference = true},
                {.name = "2-node gangs, 1 s steps", .policy = GP_SCHED_HYBRID, .backfill = true,
                 .step_ms = 1000, .gangs2 = true},
                {.name = "100 tenants", .policy = GP_SCHED_HYBRID, .backfill = true, .tenants = 100, .step_ms = 1000},
                {.name = "100 tenants + preemption", .policy = GP_SCHED_HYBRID, .backfill = true, .tenants = 100,
                 .preempt = true, .step_ms = 1000},
        };
        enum { NSC = sizeof(sc) / sizeof(sc[0]) };
        static result res[NSC][MAX_ROUNDS];
        int ref = -1;
        bool on[NSC], tenants_on = false;
        for (int i = 0; i < NSC; i++) {
                if (sc[i].reference)
                        ref = i;
                on[i] = !only || strstr(sc[i].name, only);
                tenants_on |= on[i] && sc[i].tenants;
        }
        if (ref >= 0 && tenants_on)
                on[ref] = true;
        else if (ref >= 0 && !on[ref])
                ref = -1;
        printf("bench-core: %d queued tasks onto %d GPUs (%d nodes x %d), seed %" PRIu64
               "; %d rounds, scenarios interleaved;\nfigures: median [min-max] over the rounds, thread CPU time\n",
               ntasks, nodes * per_node, nodes, per_node, seed, nrounds);
        fflush(stdout);
        for (int r = 0; r < nrounds; r++)
                for (int k = 0; k < NSC; k++) {
                        int i = (k + r) % NSC; /* rotate which goes first */
                        if (!on[i])
                                continue;
                        if (run_one(&sc[i], ntasks, nodes, per_node, seed, &res[i][r]))
                                return 1;
                        const result *a = &res[i][0], *b = &res[i][r];
                        if (a->started != b->started || a->steady_decisions != b->steady_decisions ||
                            a->queued != b->queued || a->preempted != b->preempted) {
                                fprintf(stderr, "bench-core: %s: round %d made other decisions than round 1\n",
                                        sc[i].name, r + 1);
                                return 1;
                        }
                }
        printf("%-26s %8s %19s %27s %8s %23s %s\n", "scenario", "started", "first run ms", "first run decisions/s",
               "steady", "steady us/run", "state after");
        for (int i = 0; i < NSC; i++) {
                if (!on[i])
                        continue;
                double v[MAX_ROUNDS];
                char fm[112], fd[112], su[112];
                for (int r = 0; r < nrounds; r++)
                        v[r] = res[i][r].first_ms;
                stat3(fm, sizeof(fm), "%.1f", v, nrounds);
                for (int r = 0; r < nrounds; r++)
                        v[r] = res[i][r].first_dps / 1e6;
                stat3(fd, sizeof(fd), "%.2fM", v, nrounds);
                for (int r = 0; r < nrounds; r++)
                        v[r] = res[i][r].steady_us;
                stat3(su, sizeof(su), "%.0f", v, nrounds);
                const result *a = &res[i][0];
                printf("%-26s %8zu %19s %27s %8zu %23s busy %u/%u, queued %zu", sc[i].name, a->started, fm, fd,
                       a->steady_decisions, su, a->busy, a->total, a->queued);
                if (sc[i].preempt)
                        printf(", preempted %" PRIu64, a->preempted);
                printf("\n");
        }
        {
                /* the pool is the same in every scenario and round */
                double v[NSC * MAX_ROUNDS];
                int nv = 0;
                char fb[112];
                for (int i = 0; i < NSC; i++)
                        for (int r = 0; r < nrounds && on[i]; r++)
                                v[nv++] = res[i][r].build_ms;
                stat3(fb, sizeof(fb), "%.1f", v, nv);
                printf("pool of %d nodes x %d GPUs built (gp_sched_gpu_add each) in ms: %s over every scenario and round\n",
                       nodes, per_node, fb);
        }
        if (ref >= 0) {
                printf("vs plain (%s, same round), then median [min-max]:\n", sc[ref].name);
                printf("  first run: decisions/s over plain's; steady: plain's us/run over its own (1.00 = as fast)\n");
                for (int i = 0; i < NSC; i++) {
                        if (!sc[i].tenants || !on[i])
                                continue;
                        double f[MAX_ROUNDS], st[MAX_ROUNDS];
                        char a[112], b[112];
                        for (int r = 0; r < nrounds; r++) {
                                f[r] = res[i][r].first_dps / res[ref][r].first_dps;
                                st[r] = res[ref][r].steady_us / res[i][r].steady_us;
                        }
                        stat3(a, sizeof(a), "%.2f", f, nrounds);
                        stat3(b, sizeof(b), "%.2f", st, nrounds);
                        printf("  %-26s first run %s, steady %s\n", sc[i].name, a, b);
                }
        }
#ifdef GP_SCHED_PHASES
        printf("phases of the 1,000 steady runs: calls in all (exact), us a run (the mean over the rounds, marks "
               "included; '-': counted only)\n");
        for (int i = 0; i < NSC; i++) {
                if (!on[i])
                        continue;
                printf("  %s\n", sc[i].name);
                for (int p = 0; p < PH_N; p++) {
                        double ns = 0;
                        for (int r = 0; r < nrounds; r++)
                                ns += (double)res[i][r].ph[p].ns;
                        char us[32] = "-";
                        if (p != PH_RESV_LAYOUT && p != PH_GREADY_MAKE && p != PH_WALK_STEP)
                                snprintf(us, sizeof(us), "%.1f", ns / nrounds / 1000.0 / 1000.0);
                        printf("    %-26s %10" PRIu64 " %8s\n", gp_phase_names[p], res[i][0].ph[p].n, us);
                }
        }
#endif
        return 0;
}
