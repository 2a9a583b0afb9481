/* test-sim.c - the trace simulator: the strict CSV parser and tenant map
 * (src/sim/trace.c), the replay (src/sim/sim.c) and its metrics
 * (src/sim/report.c) on tiny traces computed by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sim/report.h"
#include "sim/sim.h"
#include "sim/trace.h"

#define HDR "job_id,submit_time_s,duration_s,num_gpus,tenant\n"

static const gp_trace_limits LIM8 = {.max_gpus = 8, .max_gpus_why = "nodes have 8 GPUs"};

/* Parse text; expect failure whose message contains each of the given
 * fragments (NULL-terminated list). */
static void expect_error(const char *text, const gp_trace_limits *lim, ...) {
        gp_trace *t = (gp_trace *)0x1;
        char err[256];
        int rc = gp_trace_parse("t.csv", text, strlen(text), lim, &t, err, sizeof(err));
        if (rc == 0)
                fail_msg("accepted: %s", text);
        assert_true(rc == -GP_EPARSE || rc == -E2BIG);
        assert_ptr_equal(t, (gp_trace *)0x1); /* untouched */
        va_list ap;
        va_start(ap, lim);
        const char *frag;
        while ((frag = va_arg(ap, const char *)))
                if (!strstr(err, frag))
                        fail_msg("message '%s' lacks '%s'", err, frag);
        va_end(ap);
}

static gp_trace *parse_ok(const char *text, const gp_trace_limits *lim) {
        gp_trace *t = NULL;
        char err[256];
        int rc = gp_trace_parse("t.csv", text, strlen(text), lim, &t, err, sizeof(err));
        if (rc != 0)
                fail_msg("rejected (%d): %s", rc, err);
        return t;
}

static void test_trace_parses_fields_and_interns_tenants(void **st) {
        (void)st;
        gp_trace *t = parse_ok(HDR "0,0,62,1,11cb48\n1,590,66,2,ab\r\n7,590,5,8,11cb48", &LIM8);
        assert_int_equal(t->n, 3);
        assert_int_equal(t->ntenants, 2);
        assert_string_equal(t->tenants[0], "11cb48");
        assert_string_equal(t->tenants[1], "ab");
        assert_int_equal(t->jobs[1].job_id, 1);
        assert_int_equal(t->jobs[1].submit_s, 590);
        assert_int_equal(t->jobs[1].duration_s, 66);
        assert_int_equal(t->jobs[1].gpus, 2);
        assert_int_equal(t->jobs[1].tenant, 1);
        assert_int_equal(t->jobs[1].line, 3);
        assert_int_equal(t->jobs[2].job_id, 7);
        assert_int_equal(t->jobs[2].tenant, 0);
        gp_trace_free(t);
        /* one trailing blank line (as in the source files) is fine */
        t = parse_ok(HDR "0,0,1,1,a\n\n", &LIM8);
        assert_int_equal(t->n, 1);
        gp_trace_free(t);
}

static void test_trace_rejects_missing_or_wrong_header(void **st) {
        (void)st;
        expect_error("0,0,62,1,a\n", &LIM8, "t.csv:1:", "header", NULL);
        expect_error("job_id,submit_time_s,duration_s,num_gpus\n0,0,1,1\n", &LIM8, "t.csv:1:", "header", NULL);
        expect_error("", &LIM8, "t.csv:", "empty file", NULL);
        expect_error(HDR, &LIM8, "no jobs", NULL);
}

static void test_trace_rejects_wrong_column_count_with_line_number(void **st) {
        (void)st;
        expect_error(HDR "0,0,1,1,a\n1,0,1,1\n", &LIM8, "t.csv:3:", "expected 5", "got 4", NULL);
        expect_error(HDR "0,0,1,1,a,extra\n", &LIM8, "t.csv:2:", "got 6", NULL);
        expect_error(HDR "0,0,1,1,a\n\n1,0,1,1,a\n", &LIM8, "t.csv:3:", "empty line", NULL);
}

static void test_trace_rejects_negative_numbers(void **st) {
        (void)st;
        expect_error(HDR "0,0,1,1,a\n1,-5,1,1,a\n", &LIM8, "t.csv:3:", "submit_time_s", "negative", NULL);
        expect_error(HDR "0,0,-1,1,a\n", &LIM8, "t.csv:2:", "duration_s", "negative", NULL);
        expect_error(HDR "-1,0,1,1,a\n", &LIM8, "t.csv:2:", "job_id", "negative", NULL);
        expect_error(HDR "0,0,1,-2,a\n", &LIM8, "t.csv:2:", "num_gpus", "negative", NULL);
}

static void test_trace_rejects_non_integers(void **st) {
        (void)st;
        expect_error(HDR "0,0,1.5,1,a\n", &LIM8, "t.csv:2:", "duration_s", "not an integer", "1.5", NULL);
        expect_error(HDR "0,abc,1,1,a\n", &LIM8, "t.csv:2:", "submit_time_s", "not an integer", NULL);
        expect_error(HDR "0,0,1e3,1,a\n", &LIM8, "duration_s", "not an integer", NULL);
        expect_error(HDR "0, 0,1,1,a\n", &LIM8, "submit_time_s", "not an integer", NULL);
        expect_error(HDR "0,+3,1,1,a\n", &LIM8, "submit_time_s", "not an integer", NULL);
        expect_error(HDR "0,,1,1,a\n", &LIM8, "submit_time_s", "empty", NULL);
        expect_error(HDR "0,99999999999999999999,1,1,a\n", &LIM8, "submit_time_s", "out of range", NULL);
        expect_error(HDR "0,0,0,1,a\n", &LIM8, "duration_s", "out of range 1..", NULL);
        expect_error(HDR "0,0,1,0,a\n", &LIM8, "num_gpus", "out of range", NULL);
}

static void test_trace_rejects_too_many_gpus_for_the_cluster(void **st) {
        (void)st;
        expect_error(HDR "0,0,1,8,a\n1,3,1,16,a\n", &LIM8, "t.csv:3:", "num_gpus", "16", "nodes have 8 GPUs", NULL);
        gp_trace_limits skip = LIM8;
        skip.skip_oversize = true;
        gp_trace *t = parse_ok(HDR "0,0,1,8,a\n1,3,10,16,a\n2,4,1,1,b\n", &skip);
        assert_int_equal(t->n, 2);
        assert_int_equal(t->skipped, 1);
        assert_int_equal(t->skipped_gpu_s, 160);
        assert_int_equal(t->first_skipped_line, 3);
        assert_int_equal(t->jobs[1].job_id, 2);
        gp_trace_free(t);
}

static void test_trace_rejects_unsorted_duplicate_and_bad_tenants(void **st) {
        (void)st;
        expect_error(HDR "0,10,1,1,a\n1,5,1,1,a\n", &LIM8, "t.csv:3:", "sorted", NULL);
        expect_error(HDR "4,0,1,1,a\n5,0,1,1,a\n4,1,1,1,a\n", &LIM8, "t.csv:4:", "job_id", "line 2", NULL);
        expect_error(HDR "0,0,1,1,\n", &LIM8, "t.csv:2:", "tenant", NULL);
        expect_error(HDR "0,0,1,1,a b\n", &LIM8, "t.csv:2:", "tenant", NULL);
        expect_error(HDR "0,0,1,1,aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", &LIM8, "tenant",
                     NULL);
        static const char nul[] = HDR "0,0,1,1,a\n1,0,1\0,1,a\n";
        gp_trace *t = NULL;
        char err[256];
        assert_int_equal(gp_trace_parse("t.csv", nul, sizeof(nul) - 1, &LIM8, &t, err, sizeof(err)), -GP_EPARSE);
        assert_non_null(strstr(err, "t.csv:3:"));
        assert_non_null(strstr(err, "NUL"));
        char longline[2100];
        memset(longline, '1', sizeof(longline));
        memcpy(longline, HDR, strlen(HDR));
        longline[sizeof(longline) - 1] = '\0';
        expect_error(longline, &LIM8, "t.csv:2:", "longer than", NULL);
}

static void test_map_gives_priorities_renames_and_a_default(void **st) {
        (void)st;
        const char *text = "# e-commerce scenario\n"
                           "6214e9,high,dept_a\n"
                           "  11cb48 , 7\n"
                           "*,background,external\n";
        gp_trace_map *m = NULL;
        char err[256];
        assert_int_equal(gp_trace_map_parse("m", text, strlen(text), &m, err, sizeof(err)), 0);
        int p;
        const char *name;
        gp_trace_map_lookup(m, "6214e9", &p, &name);
        assert_int_equal(p, 2);
        assert_string_equal(name, "dept_a");
        gp_trace_map_lookup(m, "11cb48", &p, &name);
        assert_int_equal(p, 7);
        assert_string_equal(name, "11cb48");
        gp_trace_map_lookup(m, "zzz", &p, &name);
        assert_int_equal(p, 9);
        assert_string_equal(name, "external");
        gp_trace_map_free(m);
        gp_trace_map_lookup(NULL, "zzz", &p, &name);
        assert_int_equal(p, 5);
        assert_string_equal(name, "zzz");
}

static void test_map_rejects_bad_lines_with_line_numbers(void **st) {
        (void)st;
        static const struct {
                const char *text, *frag;
        } bad[] = {
                {"a,5\na,6\n", "m:2: tenant: 'a' given twice"},
                {"a,11\n", "m:1: priority"},
                {"a\n", "m:1: expected"},
                {"a,1,b,c\n", "m:1: expected"},
                {"*,1\n*,2\n", "m:2: '*' given twice"},
                {"a b,1\n", "m:1: tenant"},
                {"a,1,b c\n", "m:1: new_tenant"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                gp_trace_map *m = NULL;
                char err[256];
                assert_int_equal(gp_trace_map_parse("m", bad[i].text, strlen(bad[i].text), &m, err, sizeof(err)),
                                 -GP_EPARSE);
                assert_null(m);
                if (!strstr(err, bad[i].frag))
                        fail_msg("'%s' -> '%s', wanted '%s'", bad[i].text, err, bad[i].frag);
        }
}

static void test_percentile_is_nearest_rank(void **st) {
        (void)st;
        double v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
        assert_true(gp_report_percentile(v, 10, 50) == 5);
        assert_true(gp_report_percentile(v, 10, 95) == 10);
        assert_true(gp_report_percentile(v, 10, 90) == 9);
        assert_true(gp_report_percentile(v, 10, 0) == 1);
        assert_true(gp_report_percentile(v, 10, 100) == 10);
        assert_true(gp_report_percentile(v, 1, 99) == 1);
        double w[3] = {10, 14, 15};
        assert_true(gp_report_percentile(w, 3, 50) == 14);
}

static void test_jain_index(void **st) {
        (void)st;
        double a[3] = {1, 1, 1}, b[2] = {1, 0}, c[3] = {1, 2, 3};
        assert_true(fabs(gp_report_jain(a, 3) - 1) < 1e-12);
        assert_true(fabs(gp_report_jain(b, 2) - 0.5) < 1e-12);
        assert_true(fabs(gp_report_jain(c, 3) - 36.0 / 42.0) < 1e-12);
        assert_true(gp_report_jain(NULL, 0) == 1);
}

static const char *const TENANTS[] = {"A", "B"};

/* One GPU; j0 (A) 10 s and j1 (B) 5 s at 0, j2 (A) 1 s at 2. */
static const gp_sim_job TINY[] = {
        {.submit_ms = 0, .duration_ms = 10000, .gpus = 1, .priority = 5, .tenant = 0},
        {.submit_ms = 0, .duration_ms = 5000, .gpus = 1, .priority = 5, .tenant = 1},
        {.submit_ms = 2000, .duration_ms = 1000, .gpus = 1, .priority = 5, .tenant = 0},
};

static gp_sim_options tiny_opts(gp_sched_policy policy) {
        gp_sim_options o = {.gpus = 1, .gpus_per_node = 8, .gpu_name = "G", .gpu_memory_mb = 24564,
                            .tenant_names = TENANTS, .ntenants = 2, .timeline = true};
        gp_sched_config_defaults(&o.sched);
        o.sched.policy = policy;
        o.sched.las_levels = 2;
        o.sched.las_thresholds_ms[0] = 3000;
        o.sched.las_min_run_ms = 0;
        return o;
}

/* The job results of a and b are equal (their GPU arrays by content). */
static void assert_jobs_equal(const gp_sim_result *a, const gp_sim_result *b, size_t n) {
        for (size_t i = 0; i < n; i++) {
                const gp_sim_job_result *x = &a->jobs[i], *y = &b->jobs[i];
                assert_int_equal(x->start_ms, y->start_ms);
                assert_int_equal(x->finish_ms, y->finish_ms);
                assert_int_equal(x->preemptions, y->preemptions);
                assert_int_equal(x->start_seq, y->start_seq);
                assert_int_equal(x->n_gpus, y->n_gpus);
                if (x->n_gpus)
                        assert_memory_equal(x->gpus, y->gpus, (size_t)x->n_gpus * sizeof(uint32_t));
        }
}

static gp_sim_result *sim_ok(const gp_sim_options *o) {
        gp_sim_result *r = NULL;
        char err[256];
        int rc = gp_sim_run(TINY, 3, o, &r, err, sizeof(err));
        if (rc)
                fail_msg("replay failed: %s", err);
        return r;
}

static void test_fifo_replay_metrics_by_hand(void **st) {
        (void)st;
        gp_sim_options o = tiny_opts(GP_SCHED_FIFO);
        gp_sim_result *r = sim_ok(&o);
        /* j0 0-10, j1 10-15, j2 15-16 */
        assert_int_equal(r->jobs[0].start_ms, 0);
        assert_int_equal(r->jobs[1].start_ms, 10000);
        assert_int_equal(r->jobs[2].finish_ms, 16000);
        assert_int_equal(r->jobs[2].start_seq, 2);
        assert_string_equal(r->gpu_labels[r->jobs[1].gpus[0]], "local:0");
        gp_report rep;
        assert_int_equal(gp_report_compute(TINY, 3, r, TENANTS, 1, &rep), 0);
        /* JCT 10, 15, 14; wait 0, 10, 13 */
        assert_true(fabs(rep.jct.avg - 13) < 1e-9);
        assert_true(rep.jct.p50 == 14 && rep.jct.p95 == 15 && rep.jct.p99 == 15 && rep.jct.max == 15);
        assert_true(fabs(rep.wait.avg - 23.0 / 3) < 1e-9);
        assert_true(rep.makespan_s == 16);
        assert_true(fabs(rep.utilisation - 1) < 1e-12);
        assert_int_equal(rep.preemptions, 0);
        /* A: 24 s of JCT for 11 s of work; B: 15 for 5 */
        assert_true(fabs(rep.tenants[0].slowdown - 24.0 / 11) < 1e-12);
        assert_true(fabs(rep.tenants[1].slowdown - 3) < 1e-12);
        double x0 = 11.0 / 24, x1 = 1.0 / 3;
        assert_true(fabs(rep.fairness - (x0 + x1) * (x0 + x1) / (2 * (x0 * x0 + x1 * x1))) < 1e-12);
        assert_true(fabs(rep.tenants[0].share - 11.0 / 16) < 1e-12);
        /* someone waited during [0, 15): A held 10 s of it, B 5 s */
        assert_true(fabs(rep.tenants[0].share_contended - 10.0 / 15) < 1e-12);
        assert_true(fabs(rep.tenants[1].avg_wait_s - 10) < 1e-12);
        /* timeline: busy 1 from 0 to 16, then 0 */
        assert_true(r->ntimeline >= 2);
        assert_int_equal(r->timeline[0].t_ms, 0);
        assert_int_equal(r->timeline[0].queued, 1);
        assert_int_equal(r->timeline[r->ntimeline - 1].t_ms, 16000);
        assert_int_equal(r->timeline[r->ntimeline - 1].busy_gpus, 0);
        gp_report_done(&rep);
        gp_sim_result_free(r);
}

static void test_las_replay_by_hand(void **st) {
        (void)st;
        gp_sim_options o = tiny_opts(GP_SCHED_LAS);
        gp_sim_result *r = sim_ok(&o);
        /* j0 runs 0-3 (3 GPU-s: queue 1), j1 3-6, j2 6-7, then queue 1 by
         * id: j0 7-14, j1 14-16 */
        assert_int_equal(r->jobs[0].finish_ms, 14000);
        assert_int_equal(r->jobs[1].start_ms, 3000);
        assert_int_equal(r->jobs[1].finish_ms, 16000);
        assert_int_equal(r->jobs[2].start_ms, 6000);
        assert_int_equal(r->jobs[2].finish_ms, 7000);
        assert_int_equal(r->jobs[0].preemptions, 1);
        assert_int_equal(r->jobs[1].preemptions, 1);
        assert_int_equal(r->preemptions, 2);
        gp_report rep;
        assert_int_equal(gp_report_compute(TINY, 3, r, TENANTS, 1, &rep), 0);
        assert_true(fabs(rep.jct.avg - 35.0 / 3) < 1e-9);
        assert_int_equal(rep.preempted_jobs, 2);
        gp_report_done(&rep);
        gp_sim_result_free(r);
        /* each restart costs 1 s more */
        o.restart_overhead_ms = 1000;
        r = sim_ok(&o);
        assert_int_equal(r->jobs[0].finish_ms, 15000);
        assert_int_equal(r->jobs[1].finish_ms, 18000);
        gp_sim_result_free(r);
}

/* The daemon kills a preempted batch task: with preempt_loses_work the
 * replay makes the job start over. */
static void test_las_replay_when_preemption_loses_work(void **st) {
        (void)st;
        gp_sim_options o = tiny_opts(GP_SCHED_LAS);
        o.preempt_loses_work = true;
        gp_sim_result *r = sim_ok(&o);
        /* as before until 7; then j0 needs its full 10 s (7-17), j1 its 5 (17-22) */
        assert_int_equal(r->jobs[0].finish_ms, 17000);
        assert_int_equal(r->jobs[1].finish_ms, 22000);
        assert_int_equal(r->jobs[2].finish_ms, 7000);
        gp_sim_result_free(r);
}

/* A preempted job keeps its GPU for its notice (--signal SIG@S: it
 * checkpoints), and nothing starts until it has let go. */
static void test_las_replay_with_a_preemption_notice(void **st) {
        (void)st;
        gp_sim_options o = tiny_opts(GP_SCHED_LAS);
        o.notice_ms = 1000;
        gp_sim_result *r = sim_ok(&o);
        /* j0 0-3, preempted at 3 (7 s left), lets go at 4; j1 4-6 (the core
         * demotes it at 6: 3 s since it decided the start), lets go at 7
         * (3 s left); j2 7-8; then j0 8-15, j1 15-18 */
        assert_int_equal(r->jobs[0].start_ms, 0);
        assert_int_equal(r->jobs[1].start_ms, 4000);
        assert_int_equal(r->jobs[2].start_ms, 7000);
        assert_int_equal(r->jobs[2].finish_ms, 8000);
        assert_int_equal(r->jobs[0].finish_ms, 15000);
        assert_int_equal(r->jobs[1].finish_ms, 18000);
        assert_int_equal(r->preemptions, 2);
        /* the GPU is busy the whole time: while a job drains it holds it */
        assert_int_equal(r->busy_gpu_ms, 18000);
        for (size_t i = 0; i < r->ntimeline; i++)
                assert_true(r->timeline[i].busy_gpus <= 1);
        gp_sim_result_free(r);
        /* no notice: as before */
        o.notice_ms = 0;
        r = sim_ok(&o);
        assert_int_equal(r->jobs[1].start_ms, 3000);
        assert_int_equal(r->jobs[0].finish_ms, 14000);
        gp_sim_result_free(r);
}

/* Tenant settings from the config reach the core: A may run one job. */
static void test_tenant_settings_are_given_to_the_core(void **st) {
        (void)st;
        gp_sim_options o = tiny_opts(GP_SCHED_HYBRID);
        o.gpus = 3;
        gp_sim_result *r = sim_ok(&o);
        assert_int_equal(r->jobs[2].start_ms, 2000);
        gp_sim_result_free(r);
        static const char *const names[] = {"A"};
        static const gp_sched_tenant_cfg cfgs[] = {{.weight = 1, .quota = {.max_concurrent = 1}}};
        o.cfg_tenant_names = names;
        o.cfg_tenants = cfgs;
        o.ncfg_tenants = 1;
        r = sim_ok(&o);
        assert_int_equal(r->jobs[2].start_ms, 10000); /* held until j0 ends */
        assert_int_equal(r->jobs[2].finish_ms, 11000);
        gp_sim_result_free(r);
}

/* With a tick the core also runs between events while jobs wait; fifo's
 * order does not depend on time, so the schedule is the same. */
static void test_tick_runs_the_core_while_jobs_wait(void **st) {
        (void)st;
        gp_sim_options o = tiny_opts(GP_SCHED_FIFO);
        gp_sim_result *a = sim_ok(&o);
        o.tick_ms = 1000;
        gp_sim_result *b = sim_ok(&o);
        /* events at 0, 2, 10, 15, 16; someone waits from 0 to 15 */
        assert_int_equal(a->runs, 5);
        assert_true(b->runs >= 15 && b->runs <= 17);
        assert_jobs_equal(a, b, 3);
        gp_sim_result_free(a);
        gp_sim_result_free(b);
}

static void test_replay_is_deterministic_and_checks_jobs(void **st) {
        (void)st;
        gp_sim_options o = tiny_opts(GP_SCHED_LAS);
        gp_sim_result *a = sim_ok(&o), *b = sim_ok(&o);
        assert_jobs_equal(a, b, 3);
        assert_int_equal(a->busy_gpu_ms, b->busy_gpu_ms);
        gp_sim_result_free(a);
        gp_sim_result_free(b);
        /* a job wider than a node is refused by the core, not truncated */
        gp_sim_job wide = {.submit_ms = 0, .duration_ms = 1000, .gpus = 2, .priority = 5, .tenant = 0};
        gp_sim_result *r = NULL;
        char err[256];
        assert_int_equal(gp_sim_run(&wide, 1, &o, &r, err, sizeof(err)), -EINVAL);
        assert_null(r);
        assert_non_null(strstr(err, "refuses"));
        gp_sim_job unsorted[2] = {TINY[2], TINY[0]};
        assert_int_equal(gp_sim_run(unsorted, 2, &o, &r, err, sizeof(err)), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_trace_parses_fields_and_interns_tenants),
                cmocka_unit_test(test_trace_rejects_missing_or_wrong_header),
                cmocka_unit_test(test_trace_rejects_wrong_column_count_with_line_number),
                cmocka_unit_test(test_trace_rejects_negative_numbers),
                cmocka_unit_test(test_trace_rejects_non_integers),
                cmocka_unit_test(test_trace_rejects_too_many_gpus_for_the_cluster),
                cmocka_unit_test(test_trace_rejects_unsorted_duplicate_and_bad_tenants),
                cmocka_unit_test(test_map_gives_priorities_renames_and_a_default),
                cmocka_unit_test(test_map_rejects_bad_lines_with_line_numbers),
                cmocka_unit_test(test_percentile_is_nearest_rank),
                cmocka_unit_test(test_jain_index),
                cmocka_unit_test(test_fifo_replay_metrics_by_hand),
                cmocka_unit_test(test_las_replay_by_hand),
                cmocka_unit_test(test_las_replay_when_preemption_loses_work),
                cmocka_unit_test(test_las_replay_with_a_preemption_notice),
                cmocka_unit_test(test_tenant_settings_are_given_to_the_core),
                cmocka_unit_test(test_tick_runs_the_core_while_jobs_wait),
                cmocka_unit_test(test_replay_is_deterministic_and_checks_jobs),
        };
        return cmocka_run_group_tests_name("sim", tests, NULL, NULL);
}
