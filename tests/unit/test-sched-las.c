/* test-sched-las.c - the least-attained-service policy of the scheduling
 * core (GP_SCHED_LAS): queues by attained GPU time, preemption with a least
 * run time, wake-up times, and that no other policy ever preempts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/sched.h"

/* queue 0 below 10 GPU-s, queue 1 below 100 GPU-s, queue 2 after */
static gp_sched *mk_las(bool preempt, int64_t min_run_ms) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = GP_SCHED_LAS;
        c.las_levels = 3;
        c.las_thresholds_ms[0] = 10000;
        c.las_thresholds_ms[1] = 100000;
        c.las_preempt = preempt;
        c.las_min_run_ms = min_run_ms;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        return s;
}

static void add_node(gp_sched *s, const char *node, int n) {
        for (int i = 0; i < n; i++) {
                char uuid[64];
                snprintf(uuid, sizeof(uuid), "GPU-%s-%d", node, i);
                gp_sched_gpu_desc d = {.node = node, .index = i, .uuid = uuid, .name = "NVIDIA GeForce RTX 4090",
                                       .memory_total_mb = 24564};
                assert_int_equal(gp_sched_gpu_add(s, &d, NULL), 0);
        }
}

static void enq(gp_sched *s, int64_t id, int gpus, bool preemptible) {
        gp_sched_req r = {.id = id, .tenant = "t", .priority = 5, .gpus = gpus, .preemptible = preemptible};
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
}

typedef struct run_out {
        gp_sched_decision *d;
        size_t n, cap;
} run_out;

static size_t run(gp_sched *s, int64_t now, run_out *o) {
        o->n = 0;
        assert_int_equal(gp_sched_run(s, now, &o->d, &o->n, &o->cap), 0);
        return o->n;
}

static bool is_running(gp_sched *s, int64_t id) {
        gp_sched_task_view v;
        return gp_sched_task_get(s, id, &v) == 0 && v.running;
}

static int count_kind(const run_out *o, gp_sched_decision_kind k) {
        int n = 0;
        for (size_t i = 0; i < o->n; i++)
                n += o->d[i].kind == k;
        return n;
}

static const gp_sched_decision *find(const run_out *o, gp_sched_decision_kind k, int64_t id) {
        for (size_t i = 0; i < o->n; i++)
                if (o->d[i].kind == k && o->d[i].id == id)
                        return &o->d[i];
        return NULL;
}

static void test_las_new_task_preempts_one_with_more_service(void **st) {
        (void)st;
        gp_sched *s = mk_las(true, 5000);
        add_node(s, "n1", 1);
        run_out o = {0};
        enq(s, 1, 1, true);
        assert_int_equal(run(s, 0, &o), 1);
        enq(s, 2, 1, true);
        /* at 20 s task 1 has 20 GPU-s: queue 1; task 2 (queue 0) takes its GPU */
        assert_int_equal(run(s, 20000, &o), 2);
        assert_int_equal(o.d[0].kind, GP_DECIDE_PREEMPT);
        assert_int_equal(o.d[0].id, 1);
        assert_int_equal(o.d[0].n_gpus, 1);
        assert_int_equal(o.d[1].kind, GP_DECIDE_START);
        assert_int_equal(o.d[1].id, 2);
        assert_int_equal(o.d[1].gpus[0], o.d[0].gpus[0]);
        assert_false(is_running(s, 1));
        assert_true(is_running(s, 2));
        int64_t a;
        assert_int_equal(gp_sched_task_attained(s, 1, 99999, &a), 0);
        assert_int_equal(a, 20000); /* queued: does not grow */
        assert_int_equal(gp_sched_task_attained(s, 2, 23000, &a), 0);
        assert_int_equal(a, 3000);
        free(o.d);
        gp_sched_free(s);
}

static void test_las_no_preemption_before_least_run_time(void **st) {
        (void)st;
        gp_sched *s = mk_las(true, 30000);
        add_node(s, "n1", 1);
        run_out o = {0};
        enq(s, 1, 1, true);
        run(s, 0, &o);
        enq(s, 2, 1, true);
        assert_int_equal(run(s, 20000, &o), 0);
        /* the core names the moment task 1 becomes preemptible */
        assert_int_equal(gp_sched_next_wakeup(s, 20000), 30000);
        assert_int_equal(run(s, 29999, &o), 0);
        assert_int_equal(run(s, 30000, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 1));
        assert_non_null(find(&o, GP_DECIDE_START, 2));
        free(o.d);
        gp_sched_free(s);
}

static void test_las_same_queue_is_never_preempted_and_wakeup_is_threshold(void **st) {
        (void)st;
        gp_sched *s = mk_las(true, 1000);
        add_node(s, "n1", 2);
        run_out o = {0};
        enq(s, 1, 2, true); /* 2 GPUs: 10 GPU-s after 5 s */
        run(s, 0, &o);
        enq(s, 2, 1, true);
        assert_int_equal(run(s, 3000, &o), 0); /* 6 GPU-s: still queue 0 */
        assert_int_equal(gp_sched_next_wakeup(s, 3000), 5000);
        assert_int_equal(run(s, 5000, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 1));
        assert_non_null(find(&o, GP_DECIDE_START, 2));
        /* task 1 waits in queue 1; task 2 passes it only on reaching queue 2
         * (100 GPU-s, at 105 s): no preemption inside queue 1 */
        assert_int_equal(gp_sched_next_wakeup(s, 5000), 105000);
        assert_int_equal(run(s, 60000, &o), 0);
        assert_true(is_running(s, 2));
        assert_int_equal(run(s, 105000, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 2));
        assert_non_null(find(&o, GP_DECIDE_START, 1));
        free(o.d);
        gp_sched_free(s);
}

static void test_las_victims_are_the_most_served_tasks(void **st) {
        (void)st;
        gp_sched *s = mk_las(true, 0);
        add_node(s, "n1", 4);
        run_out o = {0};
        /* four 1-GPU tasks started 10 s apart: 40, 30, 20, 10 GPU-s at 40 s */
        for (int i = 1; i <= 4; i++) {
                enq(s, i, 1, true);
                assert_int_equal(run(s, (i - 1) * 10000, &o), 1);
        }
        enq(s, 5, 2, true);
        run(s, 40000, &o);
        assert_int_equal(count_kind(&o, GP_DECIDE_PREEMPT), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 1));
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 2));
        assert_non_null(find(&o, GP_DECIDE_START, 5));
        assert_true(is_running(s, 3) && is_running(s, 4) && is_running(s, 5));
        free(o.d);
        gp_sched_free(s);
}

static void test_las_prefers_the_node_where_fewest_gpus_are_preempted(void **st) {
        (void)st;
        gp_sched *s = mk_las(true, 0);
        add_node(s, "a", 4);
        add_node(s, "b", 4);
        run_out o = {0};
        enq(s, 1, 4, true); /* fills a */
        for (int i = 2; i <= 5; i++)
                enq(s, i, 1, true); /* fill b */
        assert_int_equal(run(s, 0, &o), 5);
        enq(s, 6, 2, true);
        run(s, 100000, &o);
        /* freeing 2 GPUs of b preempts 2 GPUs; a would cost 4 */
        assert_int_equal(count_kind(&o, GP_DECIDE_PREEMPT), 2);
        assert_null(find(&o, GP_DECIDE_PREEMPT, 1));
        assert_true(is_running(s, 1));
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 6);
        assert_non_null(d);
        gp_sched_gpu_view v;
        gp_sched_gpu_get(s, d->gpus[0], &v);
        assert_string_equal(v.node, "b");
        free(o.d);
        gp_sched_free(s);
}

static void test_las_never_preempts_a_task_that_is_not_preemptible(void **st) {
        (void)st;
        gp_sched *s = mk_las(true, 0);
        add_node(s, "n1", 1);
        run_out o = {0};
        enq(s, 1, 1, false);
        run(s, 0, &o);
        enq(s, 2, 1, true);
        assert_int_equal(run(s, 500000, &o), 0);
        assert_int_equal(gp_sched_next_wakeup(s, 500000), INT64_MAX);
        assert_true(is_running(s, 1));
        free(o.d);
        gp_sched_free(s);
}

static void test_las_without_preemption_only_orders(void **st) {
        (void)st;
        gp_sched *s = mk_las(false, 0);
        add_node(s, "n1", 1);
        run_out o = {0};
        enq(s, 1, 1, true);
        run(s, 0, &o);
        enq(s, 2, 1, true);
        assert_int_equal(run(s, 500000, &o), 0);
        assert_true(is_running(s, 1));
        free(o.d);
        gp_sched_free(s);
}

/* Service adds up over runs; inside a queue the order is by id, so an old
 * task pushed down still goes before a newer task of the same queue. */
static void test_las_service_accumulates_and_queue_is_fifo_by_id(void **st) {
        (void)st;
        gp_sched *s = mk_las(true, 0);
        add_node(s, "n1", 1);
        run_out o = {0};
        enq(s, 1, 1, true);
        run(s, 0, &o);
        enq(s, 2, 1, true);
        run(s, 20000, &o); /* 1 preempted with 20 GPU-s (queue 1) */
        assert_true(is_running(s, 2));
        enq(s, 3, 1, true);
        /* 2 reaches queue 1 at 30 s; 3 (queue 0) preempts it */
        assert_int_equal(gp_sched_next_wakeup(s, 20000), 30000);
        run(s, 30000, &o);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 2));
        assert_non_null(find(&o, GP_DECIDE_START, 3));
        assert_int_equal(gp_sched_remove(s, 3), 0);
        /* 1 and 2 both in queue 1: 1 first (lower id) */
        int64_t ids[4];
        assert_int_equal(gp_sched_queue_order(s, ids, 4), 2);
        assert_int_equal(ids[0], 1);
        assert_int_equal(ids[1], 2);
        gp_sched_task_view v;
        assert_int_equal(gp_sched_task_get(s, 2, &v), 0);
        assert_int_equal(v.queue_position, 2);
        run(s, 31000, &o);
        assert_non_null(find(&o, GP_DECIDE_START, 1));
        int64_t a;
        assert_int_equal(gp_sched_task_attained(s, 1, 36000, &a), 0);
        assert_int_equal(a, 25000);
        free(o.d);
        gp_sched_free(s);
}

static void test_las_config_is_checked_only_for_las(void **st) {
        (void)st;
        gp_sched_config c;
        gp_sched *s = NULL;
        gp_sched_config_defaults(&c);
        c.las_levels = 0;
        c.las_thresholds_ms[0] = -5;
        assert_int_equal(gp_sched_new(&c, &s), 0); /* hybrid ignores them */
        gp_sched_free(s);
        c.policy = GP_SCHED_LAS;
        assert_int_equal(gp_sched_new(&c, &s), -EINVAL);
        gp_sched_config_defaults(&c);
        c.policy = GP_SCHED_LAS;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        gp_sched_free(s);
        c.las_thresholds_ms[1] = c.las_thresholds_ms[0]; /* not increasing */
        assert_int_equal(gp_sched_new(&c, &s), -EINVAL);
        c.las_levels = 1; /* one queue: no thresholds used */
        assert_int_equal(gp_sched_new(&c, &s), 0);
        gp_sched_free(s);
        c.las_levels = GP_SCHED_LAS_MAX_LEVELS + 1;
        assert_int_equal(gp_sched_new(&c, &s), -EINVAL);
        c.las_levels = 2;
        c.las_min_run_ms = -1;
        assert_int_equal(gp_sched_new(&c, &s), -EINVAL);
        c.policy = GP_SCHED_NPOLICIES; /* the first value that is no policy */
        c.las_min_run_ms = 0;
        assert_int_equal(gp_sched_new(&c, &s), -EINVAL);
}

/* (Not LAS: the core remembers, within a run, that a request fitted when
 * it could use the reserved GPUs, to word waiting reasons cheaply.)  A
 * start in between must make it ask again. */
static void test_reason_memo_forgets_fits_after_a_start(void **st) {
        (void)st;
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = GP_SCHED_FIFO;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_node(s, "n1", 4);
        run_out o = {0};
        for (int id = 1; id <= 2; id++) {
                gp_sched_req r = {.id = id, .tenant = "t", .priority = 5, .gpus = 1, .timeout_ms = 100000};
                assert_int_equal(gp_sched_enqueue(s, &r), 0);
        }
        assert_int_equal(run(s, 0, &o), 2);
        gp_sched_req head = {.id = 3, .tenant = "t", .priority = 5, .gpus = 4};
        gp_sched_req two = {.id = 5, .tenant = "t", .priority = 5, .gpus = 2};
        gp_sched_req quick = {.id = 6, .tenant = "t", .priority = 5, .gpus = 1, .timeout_ms = 10000};
        gp_sched_req two_again = {.id = 7, .tenant = "t", .priority = 5, .gpus = 2};
        assert_int_equal(gp_sched_enqueue(s, &head), 0);
        assert_int_equal(gp_sched_enqueue(s, &two), 0);
        assert_int_equal(gp_sched_enqueue(s, &quick), 0);
        assert_int_equal(gp_sched_enqueue(s, &two_again), 0);
        /* 3 reserves the 2 idle GPUs; 5 would fit on them; 6 ends before 3
         * can start and takes one; then 7 no longer fits even on them */
        assert_int_equal(run(s, 1000, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 6));
        char why[256];
        assert_int_equal(gp_sched_task_reason(s, 5, why, sizeof(why)), 0);
        assert_non_null(strstr(why, "fits only on GPUs reserved for task 3"));
        assert_int_equal(gp_sched_task_reason(s, 7, why, sizeof(why)), 0);
        assert_null(strstr(why, "reserved for task 3"));
        assert_non_null(strstr(why, "gang of 2 whole GPUs"));
        free(o.d);
        gp_sched_free(s);
}

/* A random workload driven like the simulator drives the core: runs at
 * event times and at every wake-up.  Invariants: GPU books balance, every
 * preemption victim was in a later queue than some task started in the same
 * run, had run at least the least run time, and the tasks the core holds
 * are exactly the live ones.  Under the other policies nothing is ever
 * preempted. */
static void random_workload(gp_sched_policy policy) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = policy;
        c.las_thresholds_ms[0] = 20000;
        c.las_thresholds_ms[1] = 200000;
        c.las_min_run_ms = 3000;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_node(s, "a", 8);
        add_node(s, "b", 4);
        srand(4242);
        run_out o = {0};
        int64_t live[4096], started_at[4096] = {0};
        int nlive = 0;
        int64_t next = 1, now = 0;
        int preemptions = 0;
        for (int step = 0; step < 3000; step++) {
                int64_t wake = gp_sched_next_wakeup(s, now);
                now += 1 + rand() % 2000;
                if (wake > 0 && wake < now && rand() % 2)
                        now = wake;
                int op = rand() % 3;
                if (op < 2 && nlive < 4000) {
                        gp_sched_req r = {.id = next, .tenant = "t", .priority = rand() % 10,
                                          .gpus = 1 + (rand() % 4 == 0 ? rand() % 4 : 0),
                                          .memory_mb = (rand() % 4) ? 0 : 1 + rand() % 20000,
                                          .preemptible = rand() % 4 != 0};
                        if (gp_sched_enqueue(s, &r) == 0)
                                live[nlive++] = next;
                        next++;
                } else if (nlive) {
                        int k = rand() % nlive;
                        assert_int_equal(gp_sched_remove(s, live[k]), 0);
                        live[k] = live[--nlive];
                }
                run(s, now, &o);
                int min_start_q = 100;
                for (size_t i = 0; i < o.n; i++) {
                        if (o.d[i].kind == GP_DECIDE_START) {
                                int64_t a;
                                assert_int_equal(gp_sched_task_attained(s, o.d[i].id, now, &a), 0);
                                int q = a >= 200000 ? 2 : a >= 20000 ? 1 : 0;
                                if (q < min_start_q)
                                        min_start_q = q;
                                if (o.d[i].id < 4096)
                                        started_at[o.d[i].id] = now;
                        }
                }
                for (size_t i = 0; i < o.n; i++) {
                        if (o.d[i].kind != GP_DECIDE_PREEMPT)
                                continue;
                        assert_int_equal(policy, GP_SCHED_LAS);
                        preemptions++;
                        int64_t a;
                        assert_int_equal(gp_sched_task_attained(s, o.d[i].id, now, &a), 0);
                        int q = a >= 200000 ? 2 : a >= 20000 ? 1 : 0;
                        assert_true(q > min_start_q);
                        if (o.d[i].id < 4096)
                                assert_true(now - started_at[o.d[i].id] >= 3000);
                }
                for (uint32_t g = 0; g < gp_sched_gpu_count(s); g++) {
                        gp_sched_gpu_view v;
                        gp_sched_gpu_get(s, g, &v);
                        assert_true(v.memory_allocated_mb <= v.memory_usable_mb);
                        assert_true(v.memory_allocated_mb >= 0);
                        if (v.exclusive_held)
                                assert_int_equal(v.ntasks, 1);
                        if (v.ntasks == 0)
                                assert_int_equal(v.memory_allocated_mb, 0);
                }
        }
        gp_sched_stats stt;
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.queued_total + stt.running, (size_t)nlive);
        if (policy == GP_SCHED_LAS)
                assert_true(preemptions > 0);
        free(o.d);
        gp_sched_free(s);
}

static void test_las_random_workload_keeps_books_and_preempts_only_later_queues(void **st) {
        (void)st;
        random_workload(GP_SCHED_LAS);
}

static void test_other_policies_never_preempt(void **st) {
        (void)st;
        random_workload(GP_SCHED_HYBRID);
        random_workload(GP_SCHED_STRICT);
        random_workload(GP_SCHED_FIFO);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_las_new_task_preempts_one_with_more_service),
                cmocka_unit_test(test_las_no_preemption_before_least_run_time),
                cmocka_unit_test(test_las_same_queue_is_never_preempted_and_wakeup_is_threshold),
                cmocka_unit_test(test_las_victims_are_the_most_served_tasks),
                cmocka_unit_test(test_las_prefers_the_node_where_fewest_gpus_are_preempted),
                cmocka_unit_test(test_las_never_preempts_a_task_that_is_not_preemptible),
                cmocka_unit_test(test_las_without_preemption_only_orders),
                cmocka_unit_test(test_las_service_accumulates_and_queue_is_fifo_by_id),
                cmocka_unit_test(test_las_config_is_checked_only_for_las),
                cmocka_unit_test(test_reason_memo_forgets_fits_after_a_start),
                cmocka_unit_test(test_las_random_workload_keeps_books_and_preempts_only_later_queues),
                cmocka_unit_test(test_other_policies_never_preempt),
        };
        return cmocka_run_group_tests_name("sched-las", tests, NULL, NULL);
}
