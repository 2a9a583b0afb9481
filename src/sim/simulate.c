/* simulate.c - `gpupool simulate` (see simulate.h and docs/simulate.md).
 *
 * Command line -> options; trace and map -> the job list (tenants renamed
 * and prioritised by the map); then one replay per (policy, backfill) pair,
 * each with its own fresh core, and the reports printed as a table or JSON.
 * Runs are independent and deterministic: the output depends only on the
 * inputs (wall times are printed only with --timing).
 */
#include "sim/simulate.h"

#include "base/err.h"
#include "base/util.h"
#include "config/config.h"
#include "core/sched.h"
#include "sim/report.h"
#include "sim/sim.h"
#include "sim/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_POLICIES GP_SCHED_NPOLICIES
#define MAX_RUNS (MAX_POLICIES * 2)

static const char USAGE[] =
        "usage: gpupool simulate --trace FILE --gpus N [--nodes N] [--gpus-per-node N]\n"
        "                        [--config FILE] [--policy P[,P...]|all] [--backfill on|off|both]\n"
        "                        [--placement pack|spread]\n"
        "                        [--map FILE] [--oversize error|skip] [--estimates none|exact|learned]\n"
        "                        [--las-thresholds S[,S...]] [--las-min-run S] [--restart-overhead S]\n"
        "                        [--on-preempt resume|restart] [--notice S] [--tick S]\n"
        "                        [--json] [--tenants] [--timing] [--timeline FILE] [--jobs FILE]\n"
        "\n"
        "Replays a CSV trace (job_id,submit_time_s,duration_s,num_gpus,tenant) through the\n"
        "scheduling core the daemon runs, on a virtual clock, and prints JCT, queueing delay,\n"
        "makespan, utilisation, per-tenant share, fairness and preemptions.\n"
        "\n"
        "  --trace FILE            the trace (required)\n"
        "  --gpus N                cluster size (or --nodes N x --gpus-per-node)\n"
        "  --nodes N               number of nodes (default: gpus / gpus-per-node, rounded up)\n"
        "  --gpus-per-node N       GPUs per node, 1..256 (default 8); a job wider than a\n"
        "                          node takes whole nodes, as few as possible\n"
        "  --config FILE           gpupool YAML config: scheduler (policy, weights, backfill,\n"
        "                          preemption, fair share), tenants and groups, gpus.sim[0]\n"
        "  --policy LIST           fifo, strict, hybrid, las, sef, or all (default: the config's)\n"
        "  --placement P           pack or spread (default: the config's)\n"
        "  --backfill on|off|both  (default: the config's)\n"
        "  --map FILE              tenant map: lines 'tenant,priority[,new_tenant]', '*' = default\n"
        "  --oversize error|skip   a job wider than the cluster: fail (default) or leave it out\n"
        "  --estimates none|exact|learned  what the scheduler knows of each job's run time: nothing\n"
        "                          (default), the truth, or what a predictor learned from the jobs\n"
        "                          that ended before it (by tenant and size; sef orders by it)\n"
        "  --las-thresholds LIST   LAS queue limits in GPU-seconds (default: the config's\n"
        "                          scheduler.las_thresholds_s, 3600,36000)\n"
        "  --las-min-run S         least run time before a LAS preemption (default: config, 60)\n"
        "  --spf-aging PCT         spf: GPU-ms of credit per 100 ms a job waits (default: the config's, 1)\n"
        "  --spf-preempt on|off    spf: demotion preempts jobs past their level (default: the config's\n"
        "                          scheduler.spf_preempt, off)\n"
        "  --restart-overhead S    seconds added each time a preempted job restarts (default 0)\n"
        "  --on-preempt MODE       resume: a preempted job keeps its progress (default);\n"
        "                          restart: it starts over, as a killed batch task does\n"
        "  --notice S              a preempted job keeps its GPUs S seconds before they are\n"
        "                          free (a task's --signal SIG@S: it checkpoints); as in the\n"
        "                          daemon, nothing starts meanwhile (default 0: freed at once)\n"
        "  --tick S                also run the scheduler every S seconds while jobs wait, as\n"
        "                          the daemon does every second (default 60; 0: only at events)\n"
        "  --json                  print JSON instead of tables\n"
        "  --tenants               per-tenant tables for every run (default: only for one run)\n"
        "  --timing                include the wall time of each replay\n"
        "  --timeline FILE         CSV of busy GPUs and queue length over time\n"
        "  --jobs FILE             CSV of every job: start, finish, placement, preemptions\n";

typedef struct opts {
        const char *trace, *config, *map, *timeline, *jobs_out;
        int64_t gpus, nodes, gpn;
        int policies[MAX_POLICIES];
        int npolicies;
        int backfill;              /* -1 config, 0 off, 1 on, 2 both */
        int placement;             /* -1 config, else a gp_sched_placement */
        bool skip_oversize, exact, learned, json, tenants, timing, restart_lost;
        int las_levels;            /* 0: default */
        int64_t las_thr_ms[GP_SCHED_LAS_MAX_LEVELS - 1];
        int64_t las_min_run_s;     /* -1: config */
        int64_t spf_aging_pct;     /* -1: the core's default */
        int spf_preempt;           /* -1: the config's */
        int64_t restart_overhead_s;
        int64_t notice_s;          /* 0: none */
        int64_t tick_s;
} opts;

typedef struct run {
        int policy;
        bool backfill;
        gp_sim_result *r;
        gp_report rep;
        double wall_ms;
} run;


static int usage_error(const char *fmt, const char *arg) {
        fprintf(stderr, "gpupool simulate: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n(see gpupool simulate --help)\n");
        return 2;
}

static int parse_policies(const char *s, opts *o) {
        char buf[128];
        if (gp_strlcpy(buf, s, sizeof(buf)) >= sizeof(buf))
                return -EINVAL;
        o->npolicies = 0;
        char *save = NULL;
        for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
                int list[MAX_POLICIES], nl = 0;
                if (!strcmp(p, "all")) {
                        /* the comparison set the tables and tests know
                         * (policies added later are named: --policy sef) */
                        list[nl++] = GP_SCHED_FIFO;
                        list[nl++] = GP_SCHED_STRICT;
                        list[nl++] = GP_SCHED_HYBRID;
                        list[nl++] = GP_SCHED_LAS;
                        list[nl++] = GP_SCHED_SPF;
                } else {
                        gp_sched_policy k;
                        if (gp_sched_policy_parse(p, &k) < 0)
                                return -EINVAL;
                        list[nl++] = (int)k;
                }
                for (int i = 0; i < nl; i++) {
                        bool dup = false;
                        for (int j = 0; j < o->npolicies; j++)
                                dup |= o->policies[j] == list[i];
                        if (!dup)
                                o->policies[o->npolicies++] = list[i];
                }
        }
        return o->npolicies ? 0 : -EINVAL;
}

static int parse_thresholds(const char *s, opts *o) {
        char buf[256];
        if (gp_strlcpy(buf, s, sizeof(buf)) >= sizeof(buf))
                return -EINVAL;
        int n = 0;
        char *save = NULL;
        for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
                int64_t v;
                if (n >= GP_SCHED_LAS_MAX_LEVELS - 1 || gp_parse_i64(p, 1, GP_TRACE_MAX_SECONDS, &v) < 0)
                        return -EINVAL;
                if (n && v * 1000 <= o->las_thr_ms[n - 1])
                        return -EINVAL;
                o->las_thr_ms[n++] = v * 1000;
        }
        if (!n)
                return -EINVAL;
        o->las_levels = n + 1;
        return 0;
}

/* 0, or the exit code of a usage error. */
static int parse_args(int argc, char **argv, opts *o) {
        *o = (opts){.gpn = 0, .backfill = -1, .placement = -1, .las_min_run_s = -1, .spf_aging_pct = -1,
                    .spf_preempt = -1, .tick_s = 60};
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *val = NULL;
                char name[32];
                if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                        fputs(USAGE, stdout);
                        return -1;
                }
                if (strncmp(a, "--", 2) != 0)
                        return usage_error("unexpected argument '%s'", a);
                const char *eq = strchr(a, '=');
                size_t nl = eq ? (size_t)(eq - a) : strlen(a);
                if (nl >= sizeof(name))
                        return usage_error("unknown option '%s'", a);
                memcpy(name, a, nl);
                name[nl] = '\0';
                bool flag = !strcmp(name, "--json") || !strcmp(name, "--tenants") || !strcmp(name, "--timing");
                if (flag) {
                        if (eq)
                                return usage_error("%s takes no value", name);
                        if (!strcmp(name, "--json"))
                                o->json = true;
                        else if (!strcmp(name, "--tenants"))
                                o->tenants = true;
                        else
                                o->timing = true;
                        continue;
                }
                if (eq) {
                        val = eq + 1;
                } else {
                        if (i + 1 >= argc)
                                return usage_error("%s needs a value", name);
                        val = argv[++i];
                }
                int64_t v;
                if (!strcmp(name, "--trace")) {
                        o->trace = val;
                } else if (!strcmp(name, "--config")) {
                        o->config = val;
                } else if (!strcmp(name, "--map")) {
                        o->map = val;
                } else if (!strcmp(name, "--timeline")) {
                        o->timeline = val;
                } else if (!strcmp(name, "--jobs")) {
                        o->jobs_out = val;
                } else if (!strcmp(name, "--gpus")) {
                        if (gp_parse_i64(val, 1, GP_SIM_MAX_GPUS, &o->gpus) < 0)
                                return usage_error("--gpus: expected 1..100000, got '%s'", val);
                } else if (!strcmp(name, "--nodes")) {
                        if (gp_parse_i64(val, 1, GP_SIM_MAX_GPUS, &o->nodes) < 0)
                                return usage_error("--nodes: expected 1..100000, got '%s'", val);
                } else if (!strcmp(name, "--gpus-per-node")) {
                        if (gp_parse_i64(val, 1, GP_SIM_MAX_GPUS_PER_NODE, &o->gpn) < 0)
                                return usage_error("--gpus-per-node: expected 1..256, got '%s'", val);
                } else if (!strcmp(name, "--policy")) {
                        if (parse_policies(val, o) < 0)
                                return usage_error("--policy: expected a list of fifo, strict, hybrid, las, sef or all, got '%s'",
                                                   val);
                } else if (!strcmp(name, "--placement")) {
                        gp_sched_placement pl;
                        if (gp_sched_placement_parse(val, &pl) < 0)
                                return usage_error("--placement: expected pack or spread, got '%s'", val);
                        o->placement = (int)pl;
                } else if (!strcmp(name, "--backfill")) {
                        if (!strcmp(val, "on"))
                                o->backfill = 1;
                        else if (!strcmp(val, "off"))
                                o->backfill = 0;
                        else if (!strcmp(val, "both"))
                                o->backfill = 2;
                        else
                                return usage_error("--backfill: expected on, off or both, got '%s'", val);
                } else if (!strcmp(name, "--oversize")) {
                        if (!strcmp(val, "error"))
                                o->skip_oversize = false;
                        else if (!strcmp(val, "skip"))
                                o->skip_oversize = true;
                        else
                                return usage_error("--oversize: expected error or skip, got '%s'", val);
                } else if (!strcmp(name, "--estimates")) {
                        o->exact = !strcmp(val, "exact");
                        o->learned = !strcmp(val, "learned");
                        if (!o->exact && !o->learned && strcmp(val, "none"))
                                return usage_error("--estimates: expected none, exact or learned, got '%s'", val);
                } else if (!strcmp(name, "--las-thresholds")) {
                        if (parse_thresholds(val, o) < 0)
                                return usage_error("--las-thresholds: expected 1..9 increasing GPU-seconds, got '%s'",
                                                   val);
                } else if (!strcmp(name, "--spf-aging")) {
                        if (gp_parse_i64(val, 0, 100000, &v) < 0)
                                return usage_error("--spf-aging: expected percent 0..100000, got '%s'", val);
                        o->spf_aging_pct = v;
                } else if (!strcmp(name, "--spf-preempt")) {
                        if (strcmp(val, "on") && strcmp(val, "off"))
                                return usage_error("--spf-preempt: expected on or off, got '%s'", val);
                        o->spf_preempt = !strcmp(val, "on");
                } else if (!strcmp(name, "--las-min-run")) {
                        if (gp_parse_i64(val, 0, 10000000, &v) < 0)
                                return usage_error("--las-min-run: expected seconds 0..10000000, got '%s'", val);
                        o->las_min_run_s = v;
                } else if (!strcmp(name, "--on-preempt")) {
                        if (!strcmp(val, "resume"))
                                o->restart_lost = false;
                        else if (!strcmp(val, "restart"))
                                o->restart_lost = true;
                        else
                                return usage_error("--on-preempt: expected resume or restart, got '%s'", val);
                } else if (!strcmp(name, "--notice")) {
                        if (gp_parse_i64(val, 0, 86400, &v) < 0)
                                return usage_error("--notice: expected seconds 0..86400, got '%s'", val);
                        o->notice_s = v;
                } else if (!strcmp(name, "--tick")) {
                        if (gp_parse_i64(val, 0, 86400, &v) < 0)
                                return usage_error("--tick: expected seconds 0..86400, got '%s'", val);
                        o->tick_s = v;
                } else if (!strcmp(name, "--restart-overhead")) {
                        if (gp_parse_i64(val, 0, 10000000, &v) < 0)
                                return usage_error("--restart-overhead: expected seconds 0..10000000, got '%s'", val);
                        o->restart_overhead_s = v;
                } else {
                        return usage_error("unknown option '%s'", name);
                }
        }
        if (!o->trace)
                return usage_error("%s", "--trace FILE is required");
        if (!o->gpn)
                o->gpn = 8;
        if (!o->gpus && !o->nodes)
                return usage_error("%s", "--gpus N (or --nodes N) is required");
        if (!o->gpus) {
                if (o->nodes * o->gpn > GP_SIM_MAX_GPUS)
                        return usage_error("%s", "--nodes x --gpus-per-node: more than 100000 GPUs");
                o->gpus = o->nodes * o->gpn;
        } else if (o->nodes && o->nodes * o->gpn != o->gpus) {
                return usage_error("%s", "--gpus must equal --nodes x --gpus-per-node");
        }
        if (o->gpus < o->gpn)
                o->gpn = o->gpus; /* one node with all the GPUs */
        return 0;
}

/* ------------------------------------------------------------------ */
/* output helpers                                                      */

static const char *policy_name(int p) {
        const char *n = gp_sched_policy_name((gp_sched_policy)p);
        return n ? n : "?";
}

/* ms as seconds: "12" or "12.345". */
static void fmt_s(char *buf, size_t size, int64_t ms) {
        if (ms % 1000 == 0)
                snprintf(buf, size, "%" PRId64, ms / 1000);
        else
                snprintf(buf, size, "%s%" PRId64 ".%03" PRId64, ms < 0 ? "-" : "", (ms < 0 ? -ms : ms) / 1000,
                         (ms < 0 ? -ms : ms) % 1000);
}

static double round_to(double v, double unit) {
        return round(v / unit) * unit;
}

static const run *baseline(const run *runs, int nruns) {
        for (int want = 1; want >= 0; want--)
                for (int i = 0; i < nruns; i++)
                        if (runs[i].policy == GP_SCHED_FIFO && runs[i].backfill == (bool)want)
                                return &runs[i];
        return NULL;
}

static void print_tenants(const run *r) {
        printf("\n%s, backfill %s: per tenant\n", policy_name(r->policy), r->backfill ? "on" : "off");
        printf("  %-16s %7s %10s %7s %10s %11s %11s %9s\n", "tenant", "jobs", "GPU-hours", "share", "share(busy)",
               "avg JCT s", "avg wait s", "slowdown");
        for (uint32_t k = 0; k < r->rep.ntenants; k++) {
                const gp_report_tenant *t = &r->rep.tenants[k];
                if (!t->jobs)
                        continue;
                printf("  %-16s %7zu %10.1f %6.1f%% %10.1f%% %11.0f %11.0f %9.2f\n", t->name, t->jobs, t->gpu_hours,
                       100 * t->share, 100 * t->share_contended, t->avg_jct_s, t->avg_wait_s, t->slowdown);
        }
}

static void print_text(const opts *o, const gp_trace *tr, uint32_t ntenants, const char *gpu_name, int nodes,
                       const run *runs, int nruns) {
        printf("trace:    %s: %zu jobs, %u tenants", o->trace, tr->n, ntenants);
        if (tr->skipped)
                printf(" (%zu wider jobs left out, %.0f GPU-hours)", tr->skipped, (double)tr->skipped_gpu_s / 3600.0);
        printf("\ncluster:  %" PRId64 " GPUs, %d node%s x %" PRId64 " (%s)\n", o->gpus, nodes, nodes > 1 ? "s" : "",
               o->gpn, gpu_name);
        printf("jobs:     whole GPUs, preemptible, run time %s; restart overhead %" PRId64 " s\n",
               o->exact    ? "known to the scheduler"
               : o->learned ? "estimated by the scheduler from the jobs that ended before"
                           : "unknown to the scheduler",
               o->restart_overhead_s);
        if (o->notice_s)
                printf("          a preempted job keeps its GPUs %" PRId64 " s (its notice); starts wait for it\n",
                       o->notice_s);
        if (o->tick_s)
                printf("runs:     at every event and every %" PRId64 " s while jobs wait\n", o->tick_s);
        else
                printf("runs:     at every event\n");
        const run *b = baseline(runs, nruns);
        printf("\n%-7s %-8s %10s %7s %9s %9s %9s %10s %10s %11s %6s %8s %7s", "policy", "backfill", "avg JCT s",
               "vs fifo", "p50 JCT", "p95 JCT", "p99 JCT", "avg wait", "p99 wait", "makespan s", "util", "fairness",
               "preempt");
        if (o->timing)
                printf(" %9s", "wall ms");
        printf("\n");
        for (int i = 0; i < nruns; i++) {
                const run *r = &runs[i];
                const gp_report *p = &r->rep;
                char rel[16] = "-";
                if (b && b->rep.jct.avg > 0)
                        snprintf(rel, sizeof(rel), "%.3f", p->jct.avg / b->rep.jct.avg);
                printf("%-7s %-8s %10.0f %7s %9.0f %9.0f %9.0f %10.0f %10.0f %11.0f %5.1f%% %8.3f %7" PRIu64,
                       policy_name(r->policy), r->backfill ? "on" : "off", p->jct.avg, rel, p->jct.p50, p->jct.p95,
                       p->jct.p99, p->wait.avg, p->wait.p99, p->makespan_s, 100 * p->utilisation, p->fairness,
                       p->preemptions);
                if (o->timing)
                        printf(" %9.1f", r->wall_ms);
                printf("\n");
        }
        if (b)
                printf("(vs fifo: average JCT relative to fifo with backfill %s)\n", b->backfill ? "on" : "off");
        for (int i = 0; o->learned && i < nruns; i++) {
                const gp_sim_result *s = runs[i].r;
                printf("estimates %-7s %-3s: %zu of %zu jobs had one; median error x%.2f, within 2x: %.1f%%\n",
                       policy_name(runs[i].policy), runs[i].backfill ? "bf" : "", s->est_n, s->n,
                       exp(s->est_err_median), 100 * s->est_within_2x);
        }
        if (nruns == 1 || o->tenants)
                for (int i = 0; i < nruns; i++)
                        print_tenants(&runs[i]);
}

static json_t *jdist(const gp_report_dist *d) {
        return json_pack("{s:f,s:f,s:f,s:f,s:f}", "avg", round_to(d->avg, 0.001), "p50", round_to(d->p50, 0.001),
                         "p95", round_to(d->p95, 0.001), "p99", round_to(d->p99, 0.001), "max",
                         round_to(d->max, 0.001));
}

static int print_json(const opts *o, const gp_trace *tr, uint32_t ntenants, const char *gpu_name, int nodes,
                      const run *runs, int nruns) {
        const run *b = baseline(runs, nruns);
        json_t *jr = json_array();
        json_t *root = json_pack("{s:s,s:I,s:I,s:I,s:i,s:{s:I,s:i,s:I,s:s},s:b,s:I,s:I,s:o}", "trace", o->trace, "jobs",
                                 (json_int_t)tr->n, "skipped_jobs", (json_int_t)tr->skipped, "skipped_gpu_hours",
                                 (json_int_t)(tr->skipped_gpu_s / 3600), "tenants", (int)ntenants, "cluster", "gpus",
                                 (json_int_t)o->gpus, "nodes", nodes, "gpus_per_node", (json_int_t)o->gpn, "gpu_name",
                                 gpu_name, "exact_estimates", o->exact, "restart_overhead_s",
                                 (json_int_t)o->restart_overhead_s, "tick_s", (json_int_t)o->tick_s, "runs", jr);
        if (root && o->notice_s && json_object_set_new(root, "notice_s", json_integer((json_int_t)o->notice_s)) < 0) {
                json_decref(root);
                root = NULL;
        }
        if (!root)
                return -ENOMEM;
        json_object_set_new(root, "estimates", json_string(o->exact ? "exact" : o->learned ? "learned" : "none"));
        for (int i = 0; i < nruns; i++) {
                const run *r = &runs[i];
                const gp_report *p = &r->rep;
                json_t *ten = json_array();
                for (uint32_t k = 0; ten && k < p->ntenants; k++) {
                        const gp_report_tenant *t = &p->tenants[k];
                        if (!t->jobs)
                                continue;
                        json_array_append_new(
                                ten, json_pack("{s:s,s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "tenant", t->name, "jobs",
                                               (json_int_t)t->jobs, "gpu_hours", round_to(t->gpu_hours, 0.001),
                                               "share", round_to(t->share, 0.0001), "share_contended",
                                               round_to(t->share_contended, 0.0001), "avg_jct_s",
                                               round_to(t->avg_jct_s, 0.001), "avg_wait_s",
                                               round_to(t->avg_wait_s, 0.001), "slowdown",
                                               round_to(t->slowdown, 0.0001)));
                }
                json_t *jo = json_pack("{s:s,s:b,s:I,s:o,s:o,s:f,s:f,s:f,s:I,s:I,s:I,s:o}", "policy",
                                       policy_name(r->policy), "backfill", r->backfill, "jobs", (json_int_t)p->jobs,
                                       "jct_s", jdist(&p->jct), "wait_s", jdist(&p->wait), "makespan_s",
                                       round_to(p->makespan_s, 0.001), "utilisation", round_to(p->utilisation, 0.0001),
                                       "fairness", round_to(p->fairness, 0.0001), "preemptions",
                                       (json_int_t)p->preemptions, "preempted_jobs", (json_int_t)p->preempted_jobs,
                                       "scheduler_runs", (json_int_t)r->r->runs, "tenants", ten ? ten : json_null());
                if (!jo) {
                        json_decref(root);
                        return -ENOMEM;
                }
                json_object_set_new(jo, "jct_vs_fifo",
                                    b && b->rep.jct.avg > 0 ? json_real(round_to(p->jct.avg / b->rep.jct.avg, 0.0001))
                                                            : json_null());
                if (o->timing)
                        json_object_set_new(jo, "wall_ms", json_real(round_to(r->wall_ms, 0.1)));
                if (o->learned) /* how right the learned estimates were */
                        json_object_set_new(jo, "estimates",
                                            json_pack("{s:I,s:f,s:f}", "jobs", (json_int_t)r->r->est_n,
                                                      "median_error_factor", round_to(exp(r->r->est_err_median), 0.001),
                                                      "within_2x", round_to(r->r->est_within_2x, 0.0001)));
                json_array_append_new(jr, jo);
        }
        if (b)
                json_object_set_new(root, "baseline", json_pack("{s:s,s:b}", "policy", "fifo", "backfill", b->backfill));
        else
                json_object_set_new(root, "baseline", json_null());
        int rc = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(12)) < 0 ? -EIO : 0;
        fputc('\n', stdout);
        json_decref(root);
        return rc;
}

static int write_timeline(const char *path, const run *runs, int nruns, int64_t gpus) {
        FILE *f = fopen(path, "w");
        if (!f)
                return -errno;
        fprintf(f, "policy,backfill,time_s,busy_gpus,utilisation,queued,running\n");
        for (int i = 0; i < nruns; i++) {
                const gp_sim_result *r = runs[i].r;
                for (size_t k = 0; k < r->ntimeline; k++) {
                        const gp_sim_sample *s = &r->timeline[k];
                        char t[32];
                        fmt_s(t, sizeof(t), s->t_ms - r->first_submit_ms);
                        fprintf(f, "%s,%s,%s,%d,%.4f,%d,%d\n", policy_name(runs[i].policy),
                                runs[i].backfill ? "on" : "off", t, s->busy_gpus, (double)s->busy_gpus / (double)gpus,
                                s->queued, s->running);
                }
        }
        int rc = ferror(f) ? -EIO : 0;
        if (fclose(f) != 0 && !rc)
                rc = -errno;
        return rc;
}

static int write_jobs(const char *path, const run *runs, int nruns, const gp_trace *tr, const gp_sim_job *jobs,
                      const char *const *tenant_names) {
        FILE *f = fopen(path, "w");
        if (!f)
                return -errno;
        fprintf(f, "policy,backfill,job_id,tenant,priority,gpus,submit_s,duration_s,start_s,finish_s,jct_s,wait_s,"
                   "preemptions,start_seq,placement\n");
        for (int i = 0; i < nruns; i++) {
                const gp_sim_result *r = runs[i].r;
                for (size_t k = 0; k < r->n; k++) {
                        const gp_sim_job *j = &jobs[k];
                        const gp_sim_job_result *jr = &r->jobs[k];
                        char sub[32], dur[32], st[32], fin[32], jct[32], wait[32];
                        fmt_s(sub, sizeof(sub), j->submit_ms);
                        fmt_s(dur, sizeof(dur), j->duration_ms);
                        fmt_s(st, sizeof(st), jr->start_ms);
                        fmt_s(fin, sizeof(fin), jr->finish_ms);
                        fmt_s(jct, sizeof(jct), jr->finish_ms - j->submit_ms);
                        fmt_s(wait, sizeof(wait), jr->finish_ms - j->submit_ms - j->duration_ms);
                        fprintf(f, "%s,%s,%" PRId64 ",%s,%d,%d,%s,%s,%s,%s,%s,%s,%d,%zu,", policy_name(runs[i].policy),
                                runs[i].backfill ? "on" : "off", tr->jobs[k].job_id, tenant_names[j->tenant],
                                j->priority, j->gpus, sub, dur, st, fin, jct, wait, jr->preemptions, jr->start_seq);
                        for (int g = 0; g < jr->n_gpus; g++)
                                fprintf(f, "%s%s", g ? " " : "", r->gpu_labels[jr->gpus[g]]);
                        fputc('\n', f);
                }
        }
        int rc = ferror(f) ? -EIO : 0;
        if (fclose(f) != 0 && !rc)
                rc = -errno;
        return rc;
}

/* ------------------------------------------------------------------ */
/* main                                                                */

static double wall_ms_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

int gp_simulate_main(int argc, char **argv) {
        opts o;
        int rc = parse_args(argc, argv, &o);
        if (rc == -1)
                return 0; /* --help */
        if (rc)
                return rc;
        int exit_code = 1;
        char err[512];
        gp_config cfg;
        gp_trace *tr = NULL;
        gp_trace_map *map = NULL;
        gp_sim_job *jobs = NULL;
        const char **names = NULL;   /* output tenant names (borrowed from trace or map) */
        uint32_t nnames = 0;
        run runs[MAX_RUNS];
        int nruns = 0;
        const char **tnames = NULL, *gnames[GP_CFG_MAX_GROUPS];
        gp_sched_tenant_cfg *tcfgs = NULL;
        uint32_t gshares[GP_CFG_MAX_GROUPS];
        memset(runs, 0, sizeof(runs));

        gp_config_defaults(&cfg);
        if (o.config && gp_config_load(o.config, &cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool simulate: %s\n", err);
                goto out;
        }
        if (o.map && gp_trace_map_load(o.map, &map, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool simulate: %s\n", err);
                goto out;
        }
        /* a job wider than a node takes whole nodes: only one wider than
         * the cluster (or than one task may hold) cannot run */
        int max_gpus = (int)(o.gpus < GP_MAX_GPUS ? o.gpus : GP_MAX_GPUS);
        char why[96];
        if (o.gpus <= GP_MAX_GPUS)
                snprintf(why, sizeof(why), "the cluster has %" PRId64 " GPUs", o.gpus);
        else
                snprintf(why, sizeof(why), "the scheduler gives one task at most %d GPUs", GP_MAX_GPUS);
        gp_trace_limits lim = {.max_gpus = max_gpus, .max_gpus_why = why, .skip_oversize = o.skip_oversize};
        if ((rc = gp_trace_load(o.trace, &lim, &tr, err, sizeof(err))) < 0) {
                fprintf(stderr, "gpupool simulate: %s\n", err);
                if (rc == -GP_EPARSE && strstr(err, "num_gpus") && strstr(err, "more than"))
                        fprintf(stderr, "(use --oversize skip to leave such jobs out, or a larger --gpus)\n");
                goto out;
        }

        /* trace tenant -> (output tenant, priority) */
        if (!(jobs = calloc(tr->n, sizeof(*jobs))) || !(names = calloc(tr->ntenants, sizeof(*names))))
                goto oom;
        uint32_t *out_of = calloc(tr->ntenants, sizeof(uint32_t));
        int *prio_of = calloc(tr->ntenants, sizeof(int));
        if (!out_of || !prio_of) {
                free(out_of);
                free(prio_of);
                goto oom;
        }
        for (uint32_t k = 0; k < tr->ntenants; k++) {
                const char *nm;
                gp_trace_map_lookup(map, tr->tenants[k], &prio_of[k], &nm);
                uint32_t idx = nnames;
                for (uint32_t i = 0; i < nnames; i++)
                        if (!strcmp(names[i], nm))
                                idx = i;
                if (idx == nnames)
                        names[nnames++] = nm;
                out_of[k] = idx;
        }
        for (size_t i = 0; i < tr->n; i++) {
                const gp_trace_job *t = &tr->jobs[i];
                jobs[i] = (gp_sim_job){.submit_ms = t->submit_s * 1000, .duration_ms = t->duration_s * 1000,
                                       .gpus = t->gpus, .priority = prio_of[t->tenant], .tenant = out_of[t->tenant]};
        }
        free(out_of);
        free(prio_of);

        /* tenants and groups of the config, as the daemon gives them to its
         * core (without time rules: virtual time has no time of day; and
         * without max_queued: every trace job is queued) */
        if (cfg.n_tenants > 0 && (!(tnames = calloc((size_t)cfg.n_tenants, sizeof(*tnames))) ||
                                  !(tcfgs = calloc((size_t)cfg.n_tenants, sizeof(*tcfgs)))))
                goto oom;
        for (int i = 0; i < cfg.n_tenants; i++) {
                const gp_cfg_tenant *t = &cfg.tenants[i];
                tnames[i] = t->id;
                tcfgs[i] = (gp_sched_tenant_cfg){.weight = (uint32_t)t->weight, .group = t->group, .quota = t->quota};
                tcfgs[i].quota.max_queued = 0;
        }
        for (int i = 0; i < cfg.n_groups; i++) {
                gnames[i] = cfg.groups[i].name;
                gshares[i] = (uint32_t)cfg.groups[i].share_pct;
        }
        const char *gpu_name = cfg.n_sim > 0 ? cfg.sim[0].name : "NVIDIA GeForce RTX 4090";
        int64_t gpu_mem = cfg.n_sim > 0 ? cfg.sim[0].memory_mb : 24564;
        if (!o.npolicies) {
                o.policies[0] = (int)cfg.policy;
                o.npolicies = 1;
        }
        int bf_from = o.backfill == -1 ? (cfg.backfill ? 1 : 0) : o.backfill == 2 ? 1 : o.backfill;
        int bf_to = o.backfill == 2 ? 0 : bf_from;
        for (int pi = 0; pi < o.npolicies; pi++) {
                for (int bf = bf_from; bf >= bf_to; bf--) {
                        run *r = &runs[nruns];
                        r->policy = o.policies[pi];
                        r->backfill = bf;
                        gp_sim_options so = {.gpus = (int)o.gpus, .gpus_per_node = (int)o.gpn, .gpu_name = gpu_name,
                                             .gpu_memory_mb = gpu_mem, .exact_estimates = o.exact,
                                             .learned_estimates = o.learned,
                                             .restart_overhead_ms = o.restart_overhead_s * 1000,
                                             .tenant_names = names, .ntenants = nnames,
                                             .timeline = o.timeline != NULL};
                        so.preempt_loses_work = o.restart_lost;
                        so.notice_ms = o.notice_s * 1000;
                        so.tick_ms = o.tick_s * 1000;
                        so.cfg_tenant_names = tnames;
                        so.cfg_tenants = tcfgs;
                        so.ncfg_tenants = (uint32_t)cfg.n_tenants;
                        so.group_names = gnames;
                        so.group_shares = gshares;
                        so.ngroups = (uint32_t)cfg.n_groups;
                        /* as the daemon builds its scheduler, then the options */
                        gp_config_sched(&cfg, &so.sched);
                        so.sched.policy = (gp_sched_policy)r->policy;
                        if (o.placement >= 0)
                                so.sched.placement = (gp_sched_placement)o.placement;
                        so.sched.backfill = bf;
                        /* and LAS from the same preemption keys */
                        so.sched.las_preempt = cfg.preemption_enabled;
                        if (o.las_min_run_s >= 0)
                                so.sched.las_min_run_ms = o.las_min_run_s * 1000LL;
                        if (o.spf_aging_pct >= 0)
                                so.sched.spf_aging_pct = (int)o.spf_aging_pct;
                        if (o.spf_preempt >= 0)
                                so.sched.spf_preempt = o.spf_preempt == 1;
                        if (o.las_levels) {
                                so.sched.las_levels = o.las_levels;
                                memcpy(so.sched.las_thresholds_ms, o.las_thr_ms, sizeof(o.las_thr_ms));
                        }
                        double t0 = wall_ms_now();
                        if ((rc = gp_sim_run(jobs, tr->n, &so, &r->r, err, sizeof(err))) < 0) {
                                fprintf(stderr, "gpupool simulate: %s, backfill %s: %s\n", policy_name(r->policy),
                                        bf ? "on" : "off", err);
                                goto out;
                        }
                        nruns++;
                        if (gp_report_compute(jobs, tr->n, r->r, names, (int)o.gpus, &r->rep) < 0)
                                goto oom;
                        r->wall_ms = wall_ms_now() - t0;
                }
        }
        int nodes = runs[0].r->nodes;
        if (o.json) {
                if (print_json(&o, tr, nnames, gpu_name, nodes, runs, nruns) < 0)
                        goto oom;
        } else {
                print_text(&o, tr, nnames, gpu_name, nodes, runs, nruns);
        }
        if (fflush(stdout) != 0) {
                fprintf(stderr, "gpupool simulate: cannot write the output: %s\n", strerror(errno));
                goto out;
        }
        if (o.timeline && (rc = write_timeline(o.timeline, runs, nruns, o.gpus)) < 0) {
                fprintf(stderr, "gpupool simulate: %s: %s\n", o.timeline, strerror(-rc));
                goto out;
        }
        if (o.jobs_out && (rc = write_jobs(o.jobs_out, runs, nruns, tr, jobs, names)) < 0) {
                fprintf(stderr, "gpupool simulate: %s: %s\n", o.jobs_out, strerror(-rc));
                goto out;
        }
        exit_code = 0;
        goto out;
oom:
        fprintf(stderr, "gpupool simulate: out of memory\n");
out:
        for (int i = 0; i < nruns; i++) {
                gp_report_done(&runs[i].rep);
                gp_sim_result_free(runs[i].r);
        }
        free(names);
        free(jobs);
        free(tnames);
        free(tcfgs);
        gp_config_free(&cfg);
        gp_trace_map_free(map);
        gp_trace_free(tr);
        return exit_code;
}
