/* test-monitor.c - the pure parts of the monitor (src/server/monitor.h):
 * histogram buckets and quantiles, history rings, the registry's bounded
 * tenant labels, GPU-seconds, the windowed wait p95, the Prometheus text
 * and the history JSON.  Time is passed in; nothing here reads a clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/monitor.h"

#define T0 1700000040000LL /* an arbitrary wall-clock ms, a whole minute */

static const double b3[] = {1, 5, 10};

static void test_hist_value_goes_to_first_bucket_whose_bound_is_not_below_it(void **state) {
        gp_hist h;
        gp_hist_init(&h, b3, 3);
        gp_hist_observe(&h, 0);
        gp_hist_observe(&h, 1);   /* le="1": a bound is inclusive */
        gp_hist_observe(&h, 1.01);
        gp_hist_observe(&h, 10);
        gp_hist_observe(&h, 11);  /* above the last bound: +Inf */
        gp_hist_observe(&h, NAN); /* ignored */
        assert_int_equal(h.counts[0], 2);
        assert_int_equal(h.counts[1], 1);
        assert_int_equal(h.counts[2], 1);
        assert_int_equal(h.counts[3], 1);
        assert_int_equal(h.count, 5);
        assert_true(fabs(h.sum - 23.01) < 1e-9);
}

static void test_hist_quantile_interpolates_within_the_bucket(void **state) {
        gp_hist h;
        gp_hist_init(&h, b3, 3);
        assert_true(gp_hist_quantile(&h, 0.95) == 0); /* empty */
        for (int i = 0; i < 10; i++)
                gp_hist_observe(&h, 3); /* all in (1, 5] */
        /* rank 5 of 10 in the bucket 1..5: halfway */
        assert_true(fabs(gp_hist_quantile(&h, 0.5) - 3.0) < 1e-9);
        assert_true(fabs(gp_hist_quantile(&h, 1.0) - 5.0) < 1e-9);
        for (int i = 0; i < 90; i++)
                gp_hist_observe(&h, 0.5);
        /* 90 in [0,1], 10 in (1,5]: p95 is rank 95, 5 into the second bucket */
        assert_true(fabs(gp_hist_quantile(&h, 0.95) - 3.0) < 1e-9);
        assert_true(gp_hist_quantile(&h, 0.5) <= 1.0);
        /* in the +Inf bucket: the last finite bound */
        gp_hist g;
        gp_hist_init(&g, b3, 3);
        gp_hist_observe(&g, 1000);
        assert_true(gp_hist_quantile(&g, 0.95) == 10);
}

static void test_hist_diff_is_the_window_between_two_snapshots(void **state) {
        gp_hist a, b, d;
        gp_hist_init(&a, b3, 3);
        gp_hist_observe(&a, 0.5);
        gp_hist_observe(&a, 7);
        b = a; /* snapshot */
        gp_hist_observe(&a, 7);
        gp_hist_observe(&a, 100);
        gp_hist_diff(&d, &a, &b);
        assert_int_equal(d.count, 2);
        assert_int_equal(d.counts[0], 0);
        assert_int_equal(d.counts[2], 1);
        assert_int_equal(d.counts[3], 1);
        assert_true(fabs(d.sum - 107) < 1e-9);
        /* never negative */
        gp_hist_diff(&d, &b, &a);
        assert_int_equal(d.count, 0);
}

static void test_ring_slot_holds_the_mean_of_its_interval(void **state) {
        gp_ring r;
        gp_point p[8];
        assert_int_equal(gp_ring_init(&r, 1000, 5), 0);
        assert_int_equal(gp_ring_read(&r, 0, p, 8), 0);
        gp_ring_add(&r, T0 + 100, 10);
        gp_ring_add(&r, T0 + 900, 20);
        gp_ring_add(&r, T0 + 1000, 7);
        assert_int_equal(gp_ring_read(&r, 0, p, 8), 2);
        assert_true(p[0].t_ms == T0 && fabs(p[0].v - 15) < 1e-6);
        assert_true(p[1].t_ms == T0 + 1000 && fabs(p[1].v - 7) < 1e-6);
        gp_ring_done(&r);
}

static void test_ring_gap_reads_as_no_value_not_an_old_one(void **state) {
        gp_ring r;
        gp_point p[8];
        assert_int_equal(gp_ring_init(&r, 1000, 5), 0);
        for (int i = 0; i < 5; i++)
                gp_ring_add(&r, T0 + i * 1000, 100 + i); /* fills every slot */
        /* 3 s later: slots T0+5s and +6s were skipped, +7s written */
        gp_ring_add(&r, T0 + 7000, 1);
        size_t n = gp_ring_read(&r, 0, p, 8);
        /* the ring spans T0+3s..T0+7s: 103, 104, (gap), (gap), 1 */
        assert_int_equal(n, 3);
        assert_true(p[0].t_ms == T0 + 3000 && p[0].v == 103);
        assert_true(p[1].t_ms == T0 + 4000 && p[1].v == 104);
        assert_true(p[2].t_ms == T0 + 7000 && p[2].v == 1);
        /* a jump longer than the ring leaves only the new value */
        gp_ring_add(&r, T0 + 100000, 9);
        n = gp_ring_read(&r, 0, p, 8);
        assert_int_equal(n, 1);
        assert_true(p[0].v == 9);
        /* too old for the ring: dropped */
        gp_ring_add(&r, T0 + 1000, 5);
        assert_int_equal(gp_ring_read(&r, 0, p, 8), 1);
        gp_ring_done(&r);
}

static void test_ring_read_since_and_max(void **state) {
        gp_ring r;
        gp_point p[3];
        assert_int_equal(gp_ring_init(&r, 1000, 600), 0);
        for (int i = 0; i < 600; i++)
                gp_ring_add(&r, T0 + i * 1000, i);
        /* since the start of slot 590: 10 points */
        assert_int_equal(gp_ring_read(&r, T0 + 590000, p, 3), 10);
        assert_true(p[0].v == 590 && p[2].v == 592);
        /* since mid-slot: from the next slot */
        assert_int_equal(gp_ring_read(&r, T0 + 598500, p, 3), 1);
        assert_true(p[0].v == 599);
        gp_ring_done(&r);
        assert_int_equal(gp_ring_init(&r, 0, 5), -EINVAL);
        gp_ring_done(&r);
}

/* A sample with n GPUs and the given tenants' (queued, running, gpus). */
static gp_mon_sample *sample(int64_t t, int ngpus) {
        gp_mon_sample *s = calloc(1, sizeof(*s));
        assert_non_null(s);
        s->t_ms = t;
        s->backend = "sim";
        s->ngpus = (size_t)ngpus;
        s->gpus_total = s->gpus_usable = (uint32_t)ngpus;
        gp_hist_init(&s->queued_wait, gp_hist_wait_bounds, gp_hist_wait_nb);
        for (int i = 0; i < ngpus; i++) {
                gp_mon_gpu *g = &s->gpus[i];
                snprintf(g->id, sizeof(g->id), "local:%d", i);
                snprintf(g->node, sizeof(g->node), "local");
                g->index = i;
                snprintf(g->uuid, sizeof(g->uuid), "SIM-%d", i);
                snprintf(g->name, sizeof(g->name), "NVIDIA \"Fake\"\\GPU");
                g->memory_total_mb = 24564;
                g->util_pct = 10 * i;
                g->temp_c = 30 + i;
                g->power_mw = 20000;
                g->sm_clock_mhz = g->mem_clock_mhz = -1;
                g->ecc_corrected = g->ecc_uncorrected = g->xid_errors = -1;
                g->throttle_reasons = i == 0 ? 0x41 : -1;
                g->healthy = true;
        }
        return s;
}

static void test_tenant_labels_are_capped_then_other(void **state) {
        gp_monitor *m;
        assert_int_equal(gp_monitor_new(&m), 0);
        char id[32];
        for (int i = 0; i < GP_MON_MAX_TENANTS + 10; i++) {
                snprintf(id, sizeof(id), "t%d", i);
                gp_monitor_task_submitted(m, id);
        }
        assert_string_equal(gp_monitor_tenant_label(m, "t0"), "t0");
        assert_string_equal(gp_monitor_tenant_label(m, "t63"), "t63");
        assert_string_equal(gp_monitor_tenant_label(m, "t64"), "other");
        assert_string_equal(gp_monitor_tenant_label(m, "someone-new"), "other");
        gp_mon_sample *s = sample(T0, 1);
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_monitor_prometheus(m, s, 1000, &b), 0);
        /* 64 named tenants + "other" with the 10 beyond the cap */
        int n = 0;
        for (const char *p = b.data; (p = strstr(p, "gpupool_tenant_tasks_submitted_total{")); p++)
                n++;
        assert_int_equal(n, GP_MON_MAX_TENANTS + 1);
        assert_non_null(strstr(b.data, "gpupool_tenant_tasks_submitted_total{tenant=\"other\"} 10\n"));
        gp_buf_done(&b);
        free(s);
        gp_monitor_free(m);
}

static void test_prometheus_text_has_help_type_units_and_escaped_labels(void **state) {
        gp_monitor *m;
        assert_int_equal(gp_monitor_new(&m), 0);
        gp_monitor_task_submitted(m, "team-a");
        gp_monitor_task_started(m, "team-a", 5, 2500, false);
        gp_monitor_task_finished(m, "team-a", GP_TASK_SUCCEEDED);
        gp_monitor_sched_pass(m, 40000, 1); /* 40 us */
        gp_mon_sample *s = sample(T0, 2);
        s->queued[5] = 3;
        s->ntenants = 1;
        snprintf(s->tenants[0].id, sizeof(s->tenants[0].id), "team-a");
        s->tenants[0].gpus = 2;
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_monitor_prometheus(m, s, 12345, &b), 0);
        const char *t = b.data;
        assert_non_null(strstr(t, "# HELP gpupool_gpu_utilization_ratio "));
        assert_non_null(strstr(t, "# TYPE gpupool_gpu_utilization_ratio gauge\n"));
        assert_non_null(strstr(t, "gpupool_gpu_utilization_ratio{node=\"local\",gpu=\"1\"} 0.1\n"));
        assert_non_null(strstr(t, "gpupool_gpu_memory_total_bytes{node=\"local\",gpu=\"0\"} 25757220864\n"));
        assert_non_null(strstr(t, "gpupool_gpu_power_watts{node=\"local\",gpu=\"0\"} 20\n"));
        /* a quote and a backslash in a label value are escaped */
        assert_non_null(strstr(t, "name=\"NVIDIA \\\"Fake\\\"\\\\GPU\""));
        /* unknown readings are left out, not reported as 0 */
        assert_null(strstr(t, "gpupool_gpu_sm_clock_hertz{"));
        assert_non_null(strstr(t, "gpupool_gpu_throttled{node=\"local\",gpu=\"0\",reason=\"gpu_idle\"} 1\n"));
        assert_non_null(strstr(t, "gpupool_gpu_throttled{node=\"local\",gpu=\"0\",reason=\"hw_thermal\"} 1\n"));
        assert_null(strstr(t, "gpupool_gpu_throttled{node=\"local\",gpu=\"1\""));
        assert_non_null(strstr(t, "gpupool_queue_tasks{priority=\"5\"} 3\n"));
        assert_non_null(strstr(t, "# TYPE gpupool_queue_wait_seconds histogram\n"));
        assert_non_null(strstr(t, "gpupool_queue_wait_seconds_bucket{le=\"1\"} 0\n"));
        assert_non_null(strstr(t, "gpupool_queue_wait_seconds_bucket{le=\"5\"} 1\n"));
        assert_non_null(strstr(t, "gpupool_queue_wait_seconds_bucket{le=\"+Inf\"} 1\n"));
        assert_non_null(strstr(t, "gpupool_queue_wait_seconds_sum 2.5\n"));
        assert_non_null(strstr(t, "gpupool_scheduler_pass_duration_seconds_bucket{le=\"5e-05\"} 1\n"));
        assert_non_null(strstr(t, "gpupool_tasks_finished_total{state=\"succeeded\"} 1\n"));
        assert_non_null(strstr(t, "gpupool_tenant_gpus{tenant=\"team-a\"} 2\n"));
        assert_non_null(strstr(t, "gpupool_uptime_seconds 12.345\n"));
        /* every sample line belongs to a family announced by HELP and TYPE before it */
        char *copy = strdup(t), *save = NULL, fam[128] = "";
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (!strncmp(line, "# TYPE ", 7)) {
                        sscanf(line + 7, "%127s", fam);
                        continue;
                }
                if (line[0] == '#')
                        continue;
                assert_true(fam[0] && !strncmp(line, fam, strlen(fam)));
                /* no task ids as labels */
                char *lb = strchr(line, '{');
                if (lb) {
                        char *rb = strrchr(line, '}');
                        assert_non_null(rb);
                        *rb = '\0';
                        assert_null(strstr(lb, "task"));
                }
        }
        free(copy);
        gp_buf_done(&b);
        free(s);
        gp_monitor_free(m);
}

static void test_record_keeps_history_and_gpu_seconds(void **state) {
        gp_monitor *m;
        assert_int_equal(gp_monitor_new(&m), 0);
        for (int i = 0; i <= 120; i++) {
                gp_mon_sample *s = sample(T0 + i * 1000, 2);
                s->gpus[1].util_pct = i % 2 ? 100 : 0;
                s->ntenants = 1;
                snprintf(s->tenants[0].id, sizeof(s->tenants[0].id), "lab");
                s->tenants[0].gpus = 2;
                assert_int_equal(gp_monitor_record(m, s), 0);
                free(s);
        }
        gp_buf b;
        gp_buf_init(&b, 0);
        /* 1 s resolution for the last 10 minutes: 11 points since T0+110s */
        assert_int_equal(gp_monitor_history_json(m, "gpu_util_pct", "local:1", T0 + 110000, T0 + 120000, "sim", &b), 0);
        assert_non_null(strstr(b.data, "\"step_s\":1"));
        assert_non_null(strstr(b.data, "{\"labels\":{\"gpu\":\"local:1\"},\"points\":[[1700000150000,0],[1700000151000,100],"));
        assert_null(strstr(b.data, "local:0"));
        gp_buf_reset(&b);
        /* older than 10 minutes: the 1 min rings, means over each minute */
        assert_int_equal(gp_monitor_history_json(m, "gpu_util_pct", "local:1", T0 - 3600000, T0 + 3600000, "sim", &b), 0);
        assert_non_null(strstr(b.data, "\"step_s\":60"));
        assert_non_null(strstr(b.data, "[1700000040000,50],[1700000100000,50],[1700000160000,0]"));
        gp_buf_reset(&b);
        assert_int_equal(gp_monitor_history_json(m, "no_such_metric", NULL, T0, T0, "sim", &b), -ENOENT);
        gp_buf_reset(&b);
        /* 2 GPUs held for 120 s */
        assert_int_equal(gp_monitor_tenant_usage_json(m, &b), 0);
        assert_string_equal(b.data, "{\"lab\":{\"gpu_seconds\":240.0,\"submitted\":0,\"finished\":0}}");
        gp_buf_done(&b);
        gp_monitor_free(m);
}

static void test_wait_p95_counts_recent_starts_and_current_waits(void **state) {
        gp_monitor *m;
        assert_int_equal(gp_monitor_new(&m), 0);
        gp_mon_sample *s = sample(T0, 1);
        /* long ago: 100 quick starts, then a snapshot */
        for (int i = 0; i < 100; i++)
                gp_monitor_task_started(m, "a", 5, 50, false);
        assert_int_equal(gp_monitor_record(m, s), 0);
        assert_true(gp_monitor_wait_p95(m, s, 300000) <= 0.1);
        /* 6 minutes later: the window no longer holds the quick starts */
        s->t_ms = T0 + 360000;
        for (int i = 0; i < 3; i++)
                gp_monitor_task_started(m, "a", 5, 7200000, false); /* 2 h waits */
        double p = gp_monitor_wait_p95(m, s, 300000);
        assert_true(p > 3600 && p <= 7200);
        /* a task still waiting counts with its wait so far */
        gp_monitor *m2;
        assert_int_equal(gp_monitor_new(&m2), 0);
        gp_hist_observe(&s->queued_wait, 5000);
        p = gp_monitor_wait_p95(m2, s, 300000);
        assert_true(p > 3600 && p <= 7200);
        gp_monitor_free(m2);
        free(s);
        gp_monitor_free(m);
}

static void test_history_label_keeps_a_tenant_key_on_its_own_series(void **state) {
        const char *l = "unset";
        /* admin: gpu=, else tenant=, else every series */
        assert_int_equal(gp_monitor_history_label("tenant_running", NULL, "b", NULL, &l), 0);
        assert_string_equal(l, "b");
        assert_int_equal(gp_monitor_history_label("gpu_util_pct", "local:0", NULL, NULL, &l), 0);
        assert_string_equal(l, "local:0");
        assert_int_equal(gp_monitor_history_label("tenant_running", NULL, NULL, NULL, &l), 0);
        assert_null(l);
        /* a tenant key: its own series of a per-tenant metric, whatever it asks */
        assert_int_equal(gp_monitor_history_label("tenant_running", NULL, NULL, "a", &l), 0);
        assert_string_equal(l, "a");
        assert_int_equal(gp_monitor_history_label("tenant_gpus", NULL, "a", "a", &l), 0);
        assert_string_equal(l, "a");
        /* another tenant's series: -ENOENT (404), also through gpu= and on pool metrics */
        l = "unset";
        assert_int_equal(gp_monitor_history_label("tenant_running", NULL, "b", "a", &l), -ENOENT);
        assert_int_equal(gp_monitor_history_label("tenant_running", "b", NULL, "a", &l), -ENOENT);
        assert_int_equal(gp_monitor_history_label("queued", NULL, "b", "a", &l), -ENOENT);
        assert_string_equal(l, "unset"); /* written only on success */
        /* pool and GPU metrics read as an admin's */
        assert_int_equal(gp_monitor_history_label("gpu_temp_c", "local:1", NULL, "a", &l), 0);
        assert_string_equal(l, "local:1");
        assert_int_equal(gp_monitor_history_label("running", NULL, NULL, "a", &l), 0);
        assert_null(l);
        assert_true(gp_monitor_metric_per_tenant("tenant_queued"));
        assert_true(gp_monitor_metric_per_tenant("tenant_quota_used_pct"));
        assert_false(gp_monitor_metric_per_tenant("queued_tasks"));
        assert_false(gp_monitor_metric_per_tenant(NULL));
}

static void test_json_keep_tenant_drops_every_other_tenants_entry(void **state) {
        json_t *a = json_loads("[{\"id\":\"a\",\"n\":1},{\"id\":\"b\",\"n\":2},{\"id\":\"a\",\"n\":3},"
                               "{\"n\":4},{\"id\":5},7,{\"id\":\"other\"}]",
                               0, NULL);
        assert_non_null(a);
        assert_int_equal(gp_monitor_json_keep_tenant(a, "id", "a"), 5);
        char *s = json_dumps(a, JSON_COMPACT);
        assert_string_equal(s, "[{\"id\":\"a\",\"n\":1},{\"id\":\"a\",\"n\":3}]");
        free(s);
        assert_int_equal(gp_monitor_json_keep_tenant(a, "id", "zz"), 2);
        assert_int_equal(json_array_size(a), 0);
        assert_int_equal(gp_monitor_json_keep_tenant(NULL, "id", "a"), 0);
        json_t *o = json_object();
        assert_int_equal(gp_monitor_json_keep_tenant(o, "id", "a"), 0);
        json_decref(o);
        json_decref(a);
}

static bool even_ids_visible(void *ud, int64_t id) {
        (*(int *)ud)++;
        return id % 2 == 0;
}

static void test_hide_task_ids_names_only_visible_tasks(void **state) {
        int calls = 0;
        char r[128] = "waiting behind task 7 (P0), which is next in line; see task 8";
        assert_int_equal(gp_monitor_hide_task_ids(r, sizeof(r), even_ids_visible, &calls), 1);
        assert_string_equal(r, "waiting behind a task of another tenant (P0), which is next in line; see task 8");
        assert_int_equal(calls, 2);
        /* only whole words: "subtask 7", "task 7x", "task" alone stay */
        char s[64] = "subtask 7, task 7x, task, tasks 9";
        assert_int_equal(gp_monitor_hide_task_ids(s, sizeof(s), even_ids_visible, &calls), 0);
        assert_string_equal(s, "subtask 7, task 7x, task, tasks 9");
        /* an id too big to be one is hidden too */
        char big[64] = "task 99999999999999999999999 ahead";
        assert_int_equal(gp_monitor_hide_task_ids(big, sizeof(big), even_ids_visible, &calls), 1);
        assert_string_equal(big, "a task of another tenant ahead");
        /* the longer text is cut to the buffer, NUL-terminated */
        char small[16] = "task 3 ahead";
        assert_int_equal(gp_monitor_hide_task_ids(small, sizeof(small), even_ids_visible, &calls), 1);
        assert_string_equal(small, "a task of anoth");
        assert_int_equal(gp_monitor_hide_task_ids(NULL, 0, even_ids_visible, &calls), 0);
}

static void test_quota_used_pct_is_the_highest_use_of_a_set_limit(void **state) {
        /* no limit set: no value */
        assert_true(gp_monitor_quota_used_pct(5, 0, 3, 0, 2000, 0) < 0);
        assert_true(fabs(gp_monitor_quota_used_pct(0, 4, 0, 0, 0, 0) - 0) < 1e-9);
        assert_true(fabs(gp_monitor_quota_used_pct(1, 4, 0, 0, 0, 0) - 25) < 1e-9);
        /* the highest ratio wins: 2 of 4 tasks, 1.5 of 2 GPUs */
        assert_true(fabs(gp_monitor_quota_used_pct(2, 4, 0, 0, 1500, 2000) - 75) < 1e-9);
        /* queue: 6 of 5 queued is over 100 */
        assert_true(fabs(gp_monitor_quota_used_pct(0, 10, 6, 5, 0, 0) - 120) < 1e-9);
        /* an unset limit does not count however much is used */
        assert_true(fabs(gp_monitor_quota_used_pct(100, 0, 0, 0, 500, 1000) - 50) < 1e-9);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_hist_value_goes_to_first_bucket_whose_bound_is_not_below_it),
                cmocka_unit_test(test_hist_quantile_interpolates_within_the_bucket),
                cmocka_unit_test(test_hist_diff_is_the_window_between_two_snapshots),
                cmocka_unit_test(test_ring_slot_holds_the_mean_of_its_interval),
                cmocka_unit_test(test_ring_gap_reads_as_no_value_not_an_old_one),
                cmocka_unit_test(test_ring_read_since_and_max),
                cmocka_unit_test(test_tenant_labels_are_capped_then_other),
                cmocka_unit_test(test_prometheus_text_has_help_type_units_and_escaped_labels),
                cmocka_unit_test(test_record_keeps_history_and_gpu_seconds),
                cmocka_unit_test(test_wait_p95_counts_recent_starts_and_current_waits),
                cmocka_unit_test(test_history_label_keeps_a_tenant_key_on_its_own_series),
                cmocka_unit_test(test_json_keep_tenant_drops_every_other_tenants_entry),
                cmocka_unit_test(test_quota_used_pct_is_the_highest_use_of_a_set_limit),
                cmocka_unit_test(test_hide_task_ids_names_only_visible_tasks),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
