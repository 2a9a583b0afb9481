/* fuzz-trace.c - libFuzzer target for the simulator's inputs: the CSV trace
 * parser and the tenant map parser (src/sim/trace.c), and, for small
 * traces that parse, the replay itself (src/sim/sim.c).
 *
 * The first byte picks the parser and the limits; the rest is the file.
 * Checked beyond "no crash, no leak, no UB": a failure returns a documented
 * code with a message naming the file, and leaves *ret alone; a parsed
 * trace keeps its promises (sorted, unique ids, widths within the limit,
 * clean tenant names); a replay finishes every job no earlier than its
 * submit time plus its duration and never starts one before it arrives.
 * Any violation aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sim/sim.h"
#include "sim/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(int rc, const char *err, const char *name) {
        if (rc != -GP_EPARSE && rc != -E2BIG && rc != -ENOMEM) {
                fprintf(stderr, "unexpected return code %d (%s)\n", rc, err);
                abort();
        }
        if (!memchr(err, '\0', 512) || strncmp(err, name, strlen(name)) != 0 || strlen(err) < strlen(name) + 4) {
                fprintf(stderr, "bad message for %d: \"%s\"\n", rc, err);
                abort();
        }
}

static void replay(const gp_trace *t, int gpn, bool las) {
        const char *names[64];
        gp_sim_job *jobs = calloc(t->n, sizeof(*jobs));
        if (!jobs)
                return;
        for (uint32_t k = 0; k < t->ntenants && k < 64; k++)
                names[k] = t->tenants[k];
        for (size_t i = 0; i < t->n; i++)
                jobs[i] = (gp_sim_job){.submit_ms = t->jobs[i].submit_s * 1000,
                                       .duration_ms = t->jobs[i].duration_s * 1000, .gpus = t->jobs[i].gpus,
                                       .priority = (int)(t->jobs[i].job_id % 10), .tenant = t->jobs[i].tenant};
        gp_sim_options o = {.gpus = 2 * gpn, .gpus_per_node = gpn, .gpu_name = "G", .gpu_memory_mb = 24564,
                            .tenant_names = names, .ntenants = t->ntenants, .restart_overhead_ms = 1000,
                            .timeline = true};
        gp_sched_config_defaults(&o.sched);
        o.sched.policy = las ? GP_SCHED_LAS : GP_SCHED_HYBRID;
        o.sched.las_thresholds_ms[0] = 5000;
        o.sched.las_thresholds_ms[1] = 50000;
        o.sched.las_min_run_ms = 1000;
        gp_sim_result *r = NULL;
        char err[256];
        int rc = gp_sim_run(jobs, t->n, &o, &r, err, sizeof(err));
        if (rc < 0) {
                if (rc != -ENOMEM) {
                        fprintf(stderr, "replay of a valid trace failed: %d %s\n", rc, err);
                        abort();
                }
                free(jobs);
                return;
        }
        for (size_t i = 0; i < t->n; i++) {
                const gp_sim_job_result *jr = &r->jobs[i];
                if (jr->start_ms < jobs[i].submit_ms || jr->finish_ms < jobs[i].submit_ms + jobs[i].duration_ms ||
                    jr->start_seq >= t->n) {
                        fprintf(stderr, "job %zu: start %lld finish %lld for submit %lld duration %lld\n", i,
                                (long long)jr->start_ms, (long long)jr->finish_ms, (long long)jobs[i].submit_ms,
                                (long long)jobs[i].duration_ms);
                        abort();
                }
        }
        if (!las && r->preemptions) {
                fprintf(stderr, "hybrid preempted\n");
                abort();
        }
        gp_sim_result_free(r);
        free(jobs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        uint8_t mode = data[0];
        const char *text = (const char *)data + 1;
        size_t len = size - 1;
        char err[512];
        memset(err, 'x', sizeof(err));

        if (mode & 0x80) {
                gp_trace_map *m = (gp_trace_map *)0x1;
                int rc = gp_trace_map_parse("fuzz.map", text, len, &m, err, sizeof(err));
                if (rc < 0) {
                        check_error(rc, err, "fuzz.map");
                        if (m != (gp_trace_map *)0x1)
                                abort();
                        return 0;
                }
                int p;
                const char *name;
                gp_trace_map_lookup(m, "6214e9", &p, &name);
                if (p < 0 || p > 9 || !name || !*name)
                        abort();
                gp_trace_map_free(m);
                return 0;
        }
        int gpn = 1 + (mode & 7);
        gp_trace_limits lim = {.max_gpus = gpn, .max_gpus_why = (mode & 8) ? "why" : NULL,
                               .skip_oversize = (mode & 16) != 0};
        gp_trace *t = (gp_trace *)0x1;
        int rc = gp_trace_parse("fuzz.csv", text, len, &lim, &t, err, sizeof(err));
        if (rc < 0) {
                check_error(rc, err, "fuzz.csv");
                if (t != (gp_trace *)0x1)
                        abort();
                return 0;
        }
        if (err[0] || t->n == 0 || t->ntenants == 0 || t->ntenants > GP_TRACE_MAX_TENANTS)
                abort();
        for (size_t i = 0; i < t->n; i++) {
                const gp_trace_job *j = &t->jobs[i];
                if (j->gpus < 1 || j->gpus > gpn || j->duration_s < 1 || j->submit_s < 0 || j->job_id < 0 ||
                    j->tenant >= t->ntenants || (i && j->submit_s < t->jobs[i - 1].submit_s) ||
                    (i && j->line <= t->jobs[i - 1].line))
                        abort();
                for (size_t k = 0; k < i && k < 64; k++)
                        if (t->jobs[k].job_id == j->job_id)
                                abort();
        }
        for (uint32_t k = 0; k < t->ntenants; k++) {
                size_t n = strlen(t->tenants[k]);
                if (n == 0 || n > 63 || strspn(t->tenants[k], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789-_.") != n)
                        abort();
        }
        if (t->n <= 200 && t->ntenants <= 64)
                replay(t, gpn, (mode & 32) != 0);
        gp_trace_free(t);
        return 0;
}
