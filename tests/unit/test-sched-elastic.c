/* test-sched-elastic.c - elastic tasks in the scheduling core: a task with
 * {gpus = min, elastic_max_gpus = max} starts once its minimum fits, grows
 * onto idle whole GPUs of its node when nothing that may start waits, and
 * gives grown GPUs back (last grown first) to let the task whose turn it is
 * start, before anything is preempted.  Also: checks of the request,
 * restore with a grown count, accounting over resizes (share, tenant
 * usage, attained service), and a property test of random workloads
 * (ownership invariants, bounded changes per run, no ping-pong). */
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
#include "sched-fixture.h"


static gp_sched *mk_cfg(gp_sched_policy policy, bool preemption, int64_t min_run_ms) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = policy;
        c.preemption = preemption;
        c.preempt_min_runtime_ms = min_run_ms;
        c.las_min_run_ms = min_run_ms;
        c.las_thresholds_ms[0] = 60 * SEC;
        c.las_thresholds_ms[1] = 600 * SEC;
        c.fairshare_half_life_ms = 0; /* usage is the plain integral: exact numbers */
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        return s;
}

static gp_sched *mk(void) {
        return mk_cfg(GP_SCHED_HYBRID, false, 0);
}

static gp_sched_req rq(int64_t id, const char *tenant, int prio, int gpus) {
        gp_sched_req r = {.id = id, .tenant = tenant, .priority = prio, .gpus = gpus};
        return r;
}

static gp_sched_req erq(int64_t id, const char *tenant, int prio, int min, int max) {
        gp_sched_req r = rq(id, tenant, prio, min);
        r.elastic_max_gpus = max;
        return r;
}

static void tenant(gp_sched *s, const char *name, const char *group, int max_conc, int64_t max_milli) {
        gp_sched_tenant_cfg c = {.weight = 1, .group = group, .quota = {.max_concurrent = max_conc, .max_gpus_milli = max_milli}};
        assert_int_equal(gp_sched_tenant_set(s, name, &c), 0);
}

static gp_sched_task_view view(gp_sched *s, int64_t id) {
        gp_sched_task_view v;
        assert_int_equal(gp_sched_task_get(s, id, &v), 0);
        return v;
}

static int ngpus(gp_sched *s, int64_t id) {
        gp_sched_task_view v = view(s, id);
        assert_true(v.running);
        return v.n_gpus;
}

static bool is_running(gp_sched *s, int64_t id) {
        gp_sched_task_view v;
        return gp_sched_task_get(s, id, &v) == 0 && v.running;
}

static gp_sched_tenant_view usage(gp_sched *s, const char *t, int64_t now) {
        gp_sched_tenant_view u;
        assert_int_equal(gp_sched_tenant_usage(s, t, now, &u), 0);
        return u;
}

static bool holds(gp_sched *s, uint32_t gpu, int64_t id) {
        int64_t ids[256];
        int n = gp_sched_gpu_tasks(s, gpu, ids, 256);
        assert_true(n <= 256);
        for (int i = 0; i < n; i++)
                if (ids[i] == id)
                        return true;
        return false;
}

/* ---- the request ---- */

static void test_elastic_max_must_exceed_min_and_stay_within_a_gang(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 4);
        gp_sched_req r = erq(1, "t", 5, 2, 2);
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = erq(1, "t", 5, 2, 1);
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = erq(1, "t", 5, 2, -1);
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = erq(1, "t", 5, 2, GP_NODE_MAX_GPUS + 1);
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = erq(1, "t", 5, 2, GP_NODE_MAX_GPUS);
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
        r = rq(2, "t", 5, 2); /* 0: not elastic */
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
        char why[128];
        r = erq(3, "t", 5, 2, 3);
        r.memory_mb = 90000; /* ignored: an elastic task takes whole GPUs */
        assert_int_equal(gp_sched_check_feasible(s, &r, why, sizeof(why)), 0);
        gp_sched_free(s);
}

/* ---- starting and growing ---- */

static void test_elastic_task_starts_at_its_minimum_when_only_that_fits(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 4);
        run_out o = {0};
        enq(s, rq(1, "t", 5, 2));
        assert_int_equal(run(s, SEC, &o), 1);
        enq(s, erq(2, "t", 5, 2, 4));
        assert_int_equal(run(s, 2 * SEC, &o), 1);
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 2);
        assert_non_null(d);
        assert_int_equal(d->n_gpus, 2);
        assert_int_equal(ngpus(s, 2), 2);
        assert_int_equal(view(s, 2).gpus_milli, 2000);
        /* an elastic task is not started below its minimum */
        enq(s, erq(3, "t", 5, 1, 2));
        assert_int_equal(run(s, 3 * SEC, &o), 0);
        assert_false(is_running(s, 3));
        free(o.d);
        gp_sched_free(s);
}

static void test_elastic_task_grows_onto_idle_gpus_up_to_its_max(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 8);
        run_out o = {0};
        enq(s, erq(1, "t", 5, 2, 5));
        /* it starts on its minimum, then the grow pass of the same run
         * takes idle GPUs: the RESIZE lists the kept GPUs first */
        assert_int_equal(run(s, SEC, &o), 2);
        assert_int_equal(o.d[0].kind, GP_DECIDE_START);
        assert_int_equal(o.d[0].n_gpus, 2);
        assert_int_equal(o.d[1].kind, GP_DECIDE_RESIZE);
        assert_int_equal(o.d[1].id, 1);
        assert_int_equal(o.d[1].n_gpus, 5);
        assert_memory_equal(o.d[1].gpus, o.d[0].gpus, 2 * sizeof(uint32_t));
        assert_int_equal(ngpus(s, 1), 5);
        gp_sched_task_view v = view(s, 1);
        assert_memory_equal(v.gpus, o.d[1].gpus, 5 * sizeof(uint32_t));
        for (int i = 0; i < 5; i++) {
                assert_true(holds(s, v.gpus[i], 1));
                gp_sched_gpu_view g;
                assert_int_equal(gp_sched_gpu_get(s, v.gpus[i], &g), 0);
                assert_true(g.exclusive_held);
                assert_int_equal(g.memory_allocated_mb, g.memory_usable_mb);
        }
        /* not beyond its max, however many GPUs are idle */
        assert_int_equal(run(s, 2 * SEC, &o), 0);
        gp_sched_stats stt;
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.gpus_busy, 5);
        assert_int_equal(usage(s, "t", 2 * SEC).gpus_milli, 5000);
        /* the idle GPUs left are whole and usable: a gang of 3 starts at once */
        enq(s, rq(2, "u", 5, 3));
        assert_int_equal(run(s, 3 * SEC, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 2));
        free(o.d);
        gp_sched_free(s);
}

static void test_elastic_task_grows_only_on_its_node(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 2);
        add_node(s, "b", 4);
        run_out o = {0};
        enq(s, rq(1, "t", 5, 3));
        assert_int_equal(run(s, SEC, &o), 1); /* on b (the only node that fits) */
        enq(s, erq(2, "t", 5, 1, 6));
        run(s, 2 * SEC, &o);
        /* best fit: b (1 idle), then grows onto nothing more there */
        assert_int_equal(ngpus(s, 2), 1);
        assert_int_equal(count_kind(&o, GP_DECIDE_RESIZE), 0);
        gp_sched_task_view v = view(s, 2);
        gp_sched_gpu_view g;
        gp_sched_gpu_get(s, v.gpus[0], &g);
        assert_string_equal(g.node, "b");
        free(o.d);
        gp_sched_free(s);
}

static void test_elastic_task_grows_onto_the_closest_gpus_first(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 4);
        /* 0-3 and 1-2 are linked; everything else far */
        for (uint32_t a = 0; a < 4; a++)
                for (uint32_t b = a + 1; b < 4; b++)
                        assert_int_equal(gp_sched_gpu_set_distance(s, a, b, (a + b == 3) ? 0 : 3), 0);
        run_out o = {0};
        enq(s, erq(1, "t", 5, 1, 2));
        assert_int_equal(run(s, SEC, &o), 2);
        const gp_sched_decision *d = find(&o, GP_DECIDE_RESIZE, 1);
        assert_non_null(d);
        assert_int_equal(d->n_gpus, 2);
        assert_int_equal(d->gpus[0] + d->gpus[1], 3);
        free(o.d);
        gp_sched_free(s);
}

static void test_elastic_task_does_not_grow_while_a_runnable_task_waits(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 4);
        run_out o = {0};
        enq(s, rq(1, "t", 5, 2));
        enq(s, erq(2, "t", 5, 1, 3));
        run(s, SEC, &o);
        assert_int_equal(ngpus(s, 2), 2);
        /* a gang of 4 waits; 1 ends: two GPUs idle, but the gang cannot
         * start even if the elastic task gave back all it grew */
        enq(s, rq(3, "u", 5, 4));
        assert_int_equal(gp_sched_remove_at(s, 1, 2 * SEC), 0);
        assert_int_equal(run(s, 2 * SEC, &o), 0);
        assert_int_equal(ngpus(s, 2), 2);
        assert_false(is_running(s, 3));
        char why[256];
        assert_int_equal(gp_sched_task_reason(s, 3, why, sizeof(why)), 0);
        assert_non_null(strstr(why, "next in line"));
        /* the gang is cancelled: now the idle GPUs are taken */
        assert_int_equal(gp_sched_remove(s, 3), 0);
        assert_int_equal(run(s, 3 * SEC, &o), 1);
        assert_int_equal(o.d[0].kind, GP_DECIDE_RESIZE);
        assert_int_equal(ngpus(s, 2), 3);
        free(o.d);
        gp_sched_free(s);
}

static void test_elastic_task_grows_while_queued_tasks_are_held_by_quota(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 4);
        tenant(s, "capped", NULL, 1, 0);
        run_out o = {0};
        enq(s, rq(1, "capped", 5, 1));
        enq(s, rq(2, "capped", 5, 1)); /* held: max_concurrent 1 */
        enq(s, erq(3, "t", 5, 1, 4));
        run(s, SEC, &o);
        assert_false(is_running(s, 2));
        assert_int_equal(ngpus(s, 3), 3);
        /* and the held task, once its quota allows, takes back a grown GPU */
        assert_int_equal(gp_sched_remove_at(s, 1, 2 * SEC), 0);
        run(s, 2 * SEC, &o);
        /* task 1's GPU was idle: the held task starts there, no shrink */
        assert_non_null(find(&o, GP_DECIDE_START, 2));
        assert_null(find(&o, GP_DECIDE_RESIZE, 3));
        free(o.d);
        gp_sched_free(s);
}

/* A tenant's first task that its quota can never admit (a quota lowered
 * after it was queued) holds back none of the tenant's other tasks (they
 * could not delay it), and does not stop growth. */
static void grows_past_a_tenant_held_by_its_first_task(gp_sched_policy policy) {
        gp_sched *s = mk_cfg(policy, false, 0);
        add_node(s, "n", 4);
        tenant(s, "capped", NULL, 0, 1000);
        run_out o = {0};
        enq(s, rq(1, "capped", 5, 2)); /* needs 2 GPUs, may hold 1: never starts */
        enq(s, rq(2, "capped", 5, 1)); /* fits its quota: starts beside the blocked one */
        enq(s, erq(3, "t", 5, 1, 4));
        run(s, SEC, &o);
        assert_false(is_running(s, 1));
        assert_true(is_running(s, 2));
        assert_int_equal(ngpus(s, 3), 3);
        assert_int_equal(run(s, SEC, &o), 0);
        free(o.d);
        gp_sched_free(s);
}

static void test_elastic_task_grows_past_a_tenant_held_by_its_first_task(void **st) {
        (void)st;
        grows_past_a_tenant_held_by_its_first_task(GP_SCHED_HYBRID);
        grows_past_a_tenant_held_by_its_first_task(GP_SCHED_STRICT);
        grows_past_a_tenant_held_by_its_first_task(GP_SCHED_FIFO);
        grows_past_a_tenant_held_by_its_first_task(GP_SCHED_LAS);
}

static void test_growth_respects_tenant_max_gpus_and_unusable_gpus(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 5);
        gp_sched_gpu_desc d = {.node = "n", .index = 5, .uuid = "GPU-n-5", .name = "NVIDIA GeForce RTX 4090",
                               .memory_total_mb = MEM, .reserved = true};
        uint32_t resv;
        assert_int_equal(gp_sched_gpu_add(s, &d, &resv), 0);
        assert_int_equal(gp_sched_gpu_set_drained(s, 3, true), 0);
        assert_int_equal(gp_sched_gpu_set_healthy(s, 4, false), 0);
        tenant(s, "t", NULL, 0, 2000);
        run_out o = {0};
        enq(s, erq(1, "t", 5, 1, 6));
        run(s, SEC, &o);
        assert_int_equal(ngpus(s, 1), 2); /* its tenant's max_gpus */
        assert_int_equal(usage(s, "t", SEC).gpus_milli, 2000);
        tenant(s, "t", NULL, 0, 0);
        run(s, 2 * SEC, &o);
        assert_int_equal(ngpus(s, 1), 3); /* 0, 1, 2: not drained 3, unhealthy 4, reserved 5 */
        for (uint32_t g = 3; g <= resv; g++)
                assert_false(holds(s, g, 1));
        assert_int_equal(gp_sched_gpu_set_drained(s, 3, false), 0);
        run(s, 3 * SEC, &o);
        assert_int_equal(ngpus(s, 1), 4);
        assert_true(holds(s, 3, 1));
        /* max_concurrent is about tasks: a tenant at it still grows */
        tenant(s, "t", NULL, 1, 0);
        assert_int_equal(gp_sched_gpu_set_healthy(s, 4, true), 0);
        run(s, 4 * SEC, &o);
        assert_int_equal(ngpus(s, 1), 5);
        free(o.d);
        gp_sched_free(s);
}

static void test_growth_respects_group_share_while_another_group_waits(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 4);
        assert_int_equal(gp_sched_group_set(s, "g1", 50), 0);
        assert_int_equal(gp_sched_group_set(s, "g2", 50), 0);
        tenant(s, "a", "g1", 0, 0);
        tenant(s, "b", "g2", 0, 1000);
        run_out o = {0};
        /* b waits for 2 GPUs but may hold only 1: b's group stays needy */
        enq(s, rq(1, "b", 5, 2));
        enq(s, erq(2, "a", 5, 1, 4));
        run(s, SEC, &o);
        assert_false(is_running(s, 1));
        /* g1 may grow to its share (2 GPUs) but not borrow past it while
         * g2 has a task waiting below its share */
        assert_int_equal(ngpus(s, 2), 2);
        /* once nobody of another group waits, it borrows the idle GPUs */
        assert_int_equal(gp_sched_remove(s, 1), 0);
        run(s, 2 * SEC, &o);
        assert_int_equal(ngpus(s, 2), 4);
        free(o.d);
        gp_sched_free(s);
}

/* g1 is below its share with a task waiting (one that its tenant's quota
 * keeps from starting), which holds g2's task at g2's share in the first
 * pass.  But g1 can start nothing on the capacity held (its waiting task
 * can never be admitted; growth is opportunistic), so the GPU does not
 * idle: the second pass (work conservation) starts g2's task there, and
 * g1's elastic task does not grow into it. */
static void test_a_gpu_a_group_cannot_use_goes_to_the_task_its_share_held(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 4);
        assert_int_equal(gp_sched_group_set(s, "g1", 50), 0);
        assert_int_equal(gp_sched_group_set(s, "g2", 50), 0);
        tenant(s, "a", "g1", 0, 0);
        tenant(s, "a2", "g1", 0, 1000);
        tenant(s, "b", "g2", 0, 0);
        run_out o = {0};
        enq(s, rq(1, "b", 5, 1));
        enq(s, rq(2, "b", 5, 1));
        enq(s, erq(3, "a", 5, 1, 4));
        enq(s, rq(4, "a2", 5, 2)); /* waits in g1 for ever: 2 GPUs, a2 may hold 1 */
        enq(s, rq(5, "b", 5, 1));  /* would take g2 past its share while g1 claims */
        run(s, SEC, &o);
        assert_true(is_running(s, 1) && is_running(s, 2));
        assert_non_null(find(&o, GP_DECIDE_START, 5));
        assert_int_equal(ngpus(s, 3), 1);
        assert_int_equal(run(s, 2 * SEC, &o), 0); /* and it stays so: nothing moves back and forth */
        assert_int_equal(ngpus(s, 3), 1);
        assert_true(is_running(s, 5));
        free(o.d);
        gp_sched_free(s);
}

/* ---- shrinking ---- */

/* 4 GPUs: R (preemptible, P9) on one, E (1..3) grown onto the others, the
 * GPU of a finished task last.  Three P0 tasks of 1 GPU arrive one by
 * one: E gives back its last grown GPU, then the other one, and only then
 * (preemption on) is R preempted. */
static void shrink_case(bool preemption) {
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, preemption, 10 * SEC);
        add_node(s, "n", 4);
        run_out o = {0};
        gp_sched_req r = rq(1, "t", 9, 1);
        r.preemptible = true;
        enq(s, r);
        enq(s, rq(2, "t", 9, 1));
        enq(s, erq(3, "e", 5, 1, 3));
        run(s, SEC, &o);
        assert_int_equal(ngpus(s, 3), 2);
        gp_sched_task_view e = view(s, 3);
        uint32_t first = e.gpus[0], grown1 = e.gpus[1];
        uint32_t g2 = view(s, 2).gpus[0];
        assert_int_equal(gp_sched_remove_at(s, 2, 2 * SEC), 0);
        assert_int_equal(run(s, 2 * SEC, &o), 1);
        assert_int_equal(ngpus(s, 3), 3);
        assert_int_equal(o.d[0].gpus[2], g2); /* grown last */

        enq(s, rq(10, "w", 0, 1));
        assert_int_equal(run(s, 100 * SEC, &o), 2);
        assert_int_equal(o.d[0].kind, GP_DECIDE_RESIZE);
        assert_int_equal(o.d[0].id, 3);
        assert_int_equal(o.d[0].n_gpus, 2);
        assert_int_equal(o.d[0].gpus[0], first);
        assert_int_equal(o.d[0].gpus[1], grown1);
        assert_int_equal(o.d[1].kind, GP_DECIDE_START);
        assert_int_equal(o.d[1].id, 10);
        assert_int_equal(o.d[1].gpus[0], g2);
        assert_true(is_running(s, 1));

        enq(s, rq(11, "w", 0, 1));
        assert_int_equal(run(s, 101 * SEC, &o), 2);
        assert_int_equal(o.d[0].kind, GP_DECIDE_RESIZE);
        assert_int_equal(o.d[0].n_gpus, 1);
        assert_int_equal(o.d[0].gpus[0], first);
        assert_int_equal(find(&o, GP_DECIDE_START, 11)->gpus[0], grown1);
        assert_true(is_running(s, 1));
        assert_int_equal(ngpus(s, 3), 1);

        /* E is at its minimum: nothing more to give back */
        enq(s, rq(12, "w", 0, 1));
        run(s, 102 * SEC, &o);
        assert_int_equal(count_kind(&o, GP_DECIDE_RESIZE), 0);
        assert_int_equal(ngpus(s, 3), 1);
        if (preemption) {
                assert_non_null(find(&o, GP_DECIDE_PREEMPT, 1));
                assert_non_null(find(&o, GP_DECIDE_START, 12));
        } else {
                assert_int_equal(o.n, 0);
                assert_true(is_running(s, 1));
                assert_false(is_running(s, 12));
        }
        free(o.d);
        gp_sched_free(s);
}

static void test_shrinks_last_grown_first_before_preempting(void **st) {
        (void)st;
        shrink_case(true);
}

static void test_shrinks_last_grown_first_with_preemption_off(void **st) {
        (void)st;
        shrink_case(false);
}

static void test_shrinks_the_fewest_gpus_on_the_best_node(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 4);
        add_node(s, "b", 4);
        run_out o = {0};
        enq(s, erq(1, "e", 5, 1, 4));
        run(s, SEC, &o);
        assert_int_equal(ngpus(s, 1), 4); /* all of a */
        enq(s, rq(2, "t", 5, 1));
        enq(s, erq(3, "e", 5, 1, 2));
        run(s, 2 * SEC, &o);
        assert_int_equal(ngpus(s, 3), 2); /* at its max on b, one GPU of b idle */
        /* a task of 2: on a, task 1 would give back 2; on b, task 3 gives 1 */
        enq(s, rq(4, "w", 5, 2));
        assert_int_equal(run(s, 3 * SEC, &o), 2);
        const gp_sched_decision *d = find(&o, GP_DECIDE_RESIZE, 3);
        assert_non_null(d);
        assert_int_equal(d->n_gpus, 1);
        assert_null(find(&o, GP_DECIDE_RESIZE, 1));
        assert_int_equal(ngpus(s, 1), 4);
        const gp_sched_decision *w = find(&o, GP_DECIDE_START, 4);
        assert_non_null(w);
        gp_sched_gpu_view a, b;
        gp_sched_gpu_get(s, w->gpus[0], &a);
        gp_sched_gpu_get(s, w->gpus[1], &b);
        assert_string_equal(a.node, "b");
        assert_string_equal(b.node, "b");
        free(o.d);
        gp_sched_free(s);
}

static void test_does_not_shrink_when_the_task_could_not_start_anyway(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 0);
        add_node(s, "n", 4);
        assert_int_equal(gp_sched_group_set(s, "g", 50), 0);
        assert_int_equal(gp_sched_group_set(s, "h", 50), 0);
        tenant(s, "g1", "g", 0, 0);
        tenant(s, "h1", "h", 0, 0);
        tenant(s, "h2", "h", 0, 1000);
        run_out o = {0};
        enq(s, rq(1, "g1", 5, 1));
        enq(s, rq(2, "g1", 5, 1));
        enq(s, erq(3, "h1", 5, 1, 2));
        run(s, SEC, &o);
        assert_int_equal(ngpus(s, 3), 2);
        /* h2 waits for 2 GPUs but may hold 1: it counts as waiting in h
         * without being able to start */
        enq(s, rq(4, "h2", 5, 2));
        /* g's task could go (h is at its share, so g may borrow)... but
         * only with a GPU of task 3, and then h would be below its share
         * with a task waiting: g is held.  So nothing shrinks. */
        enq(s, rq(5, "g1", 5, 1));
        run(s, 2 * SEC, &o);
        assert_int_equal(count_kind(&o, GP_DECIDE_RESIZE), 0);
        assert_int_equal(o.n, 0);
        assert_int_equal(ngpus(s, 3), 2);
        assert_int_equal(usage(s, "h1", 2 * SEC).gpus_milli, 2000);
        gp_sched_group_view gv;
        assert_int_equal(gp_sched_group_usage(s, "h", &gv), 0);
        assert_int_equal(gv.gpus_milli, 2000);
        assert_false(is_running(s, 5));
        /* and a task its quota holds shrinks nothing either */
        tenant(s, "q", NULL, 1, 0);
        enq(s, rq(6, "q", 0, 1));
        enq(s, rq(7, "q", 0, 1));
        assert_int_equal(gp_sched_remove(s, 5), 0);
        assert_int_equal(gp_sched_remove_at(s, 1, 3 * SEC), 0);
        run(s, 3 * SEC, &o);
        assert_non_null(find(&o, GP_DECIDE_START, 6));
        assert_int_equal(count_kind(&o, GP_DECIDE_RESIZE), 0);
        assert_false(is_running(s, 7));
        free(o.d);
        gp_sched_free(s);
}

static void test_shrink_comes_before_the_reservation_and_backfill(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 4);
        run_out o = {0};
        gp_sched_req r = rq(1, "t", 5, 2);
        r.timeout_ms = 1000 * SEC;
        enq(s, r);
        enq(s, erq(2, "e", 5, 1, 2));
        run(s, SEC, &o);
        assert_int_equal(ngpus(s, 2), 2);
        /* a P0 gang of 2: E gives one back, one GPU is still missing, so a
         * reservation; a short task behind it may backfill elsewhere but
         * nothing shrank for nothing */
        enq(s, rq(3, "w", 0, 3));
        run(s, 2 * SEC, &o);
        assert_int_equal(o.n, 0);
        assert_int_equal(ngpus(s, 2), 2);
        /* the 2-GPU task ends: 2 idle + 1 given back = 3 */
        assert_int_equal(gp_sched_remove_at(s, 1, 3 * SEC), 0);
        assert_int_equal(run(s, 3 * SEC, &o), 2);
        assert_int_equal(o.d[0].kind, GP_DECIDE_RESIZE);
        assert_int_equal(o.d[1].kind, GP_DECIDE_START);
        assert_int_equal(o.d[1].id, 3);
        assert_false(o.d[1].backfilled);
        free(o.d);
        gp_sched_free(s);
}

/* Behind a reservation, a task of a tenant within its guarantee may
 * reclaim (preemption on): it too is served by shrinking first, never on
 * the reserved GPUs. */
static void test_reclaim_behind_the_reservation_shrinks_first(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 0);
        add_node(s, "a", 4);
        add_node(s, "b", 2);
        gp_sched_tenant_cfg own = {.weight = 1, .quota = {.guaranteed_gpus_milli = 2000}};
        assert_int_equal(gp_sched_tenant_set(s, "own", &own), 0);
        run_out o = {0};
        gp_sched_req big = rq(1, "t", 5, 4);
        big.timeout_ms = 3600 * SEC;
        enq(s, big);
        gp_sched_req e = erq(2, "x", 5, 1, 2);
        e.preemptible = true;
        enq(s, e);
        run(s, SEC, &o);
        assert_int_equal(ngpus(s, 2), 2); /* all of b */
        enq(s, rq(3, "w", 0, 4)); /* blocked: a reservation on a */
        enq(s, rq(4, "own", 5, 1));
        assert_int_equal(run(s, 100 * SEC, &o), 2);
        assert_int_equal(o.d[0].kind, GP_DECIDE_RESIZE);
        assert_int_equal(o.d[0].id, 2);
        assert_int_equal(o.d[0].n_gpus, 1);
        assert_int_equal(o.d[1].kind, GP_DECIDE_START);
        assert_int_equal(o.d[1].id, 4);
        assert_true(o.d[1].backfilled);
        gp_sched_gpu_view g;
        gp_sched_gpu_get(s, o.d[1].gpus[0], &g);
        assert_string_equal(g.node, "b");
        assert_false(is_running(s, 3));
        free(o.d);
        gp_sched_free(s);
}

static void test_las_shrinks_before_preempting(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_LAS, false, 5 * SEC);
        add_node(s, "n", 2);
        run_out o = {0};
        gp_sched_req r = rq(1, "t", 5, 1);
        r.preemptible = true;
        enq(s, r);
        enq(s, erq(2, "e", 5, 1, 2));
        run(s, 0, &o);
        assert_int_equal(ngpus(s, 2), 1);
        /* task 1 passes the first threshold (60 GPU-s) */
        assert_int_equal(gp_sched_remove_at(s, 1, 0), 0);
        r.id = 3;
        enq(s, r);
        run(s, 0, &o);
        assert_true(is_running(s, 3));
        /* task 2 grows onto nothing (full); now task 3 has served a lot */
        enq(s, rq(4, "w", 5, 1));
        run(s, 100 * SEC, &o);
        /* no elastic GPU to give: task 3 (a later queue) is preempted */
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 3));
        assert_non_null(find(&o, GP_DECIDE_START, 4));
        assert_int_equal(gp_sched_remove_at(s, 4, 101 * SEC), 0);
        /* 4 gone: 3 (queued again) goes back, E cannot grow while it waits */
        run(s, 101 * SEC, &o);
        assert_true(is_running(s, 3));
        assert_int_equal(ngpus(s, 2), 1);
        assert_int_equal(gp_sched_remove_at(s, 3, 102 * SEC), 0);
        run(s, 102 * SEC, &o);
        assert_int_equal(ngpus(s, 2), 2);
        /* a new task (queue 0) arrives: E gives back its grown GPU rather
         * than being preempted */
        enq(s, rq(5, "w", 5, 1));
        run(s, 103 * SEC, &o);
        assert_int_equal(count_kind(&o, GP_DECIDE_PREEMPT), 0);
        assert_non_null(find(&o, GP_DECIDE_RESIZE, 2));
        assert_non_null(find(&o, GP_DECIDE_START, 5));
        assert_int_equal(ngpus(s, 2), 1);
        free(o.d);
        gp_sched_free(s);
}

/* ---- restore and accounting ---- */

static void test_restore_running_accepts_min_to_max_gpus(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 6);
        uint32_t g[6] = {4, 0, 2, 1, 3, 5};
        gp_sched_req r = erq(1, "t", 5, 2, 4);
        assert_int_equal(gp_sched_restore_running(s, &r, g, 1, 500), -EINVAL); /* below min */
        assert_int_equal(gp_sched_restore_running(s, &r, g, 5, 500), -EINVAL); /* above max */
        gp_sched_req plain = rq(2, "t", 5, 2);
        assert_int_equal(gp_sched_restore_running(s, &plain, g + 3, 3, 500), -EINVAL);
        assert_int_equal(gp_sched_restore_running(s, &r, g, 3, 500), 0);
        gp_sched_task_view v = view(s, 1);
        assert_int_equal(v.n_gpus, 3);
        assert_memory_equal(v.gpus, g, 3 * sizeof(uint32_t));
        assert_int_equal(v.gpus_milli, 3000);
        assert_int_equal(usage(s, "t", 500).gpus_milli, 3000);
        /* its GPUs are whole: nothing else fits on them */
        assert_int_equal(gp_sched_restore_running(s, &plain, g + 2, 2, 500), -EINVAL);
        assert_int_equal(gp_sched_restore_running(s, &plain, g + 3, 2, 500), 0);
        /* a task needing 2 GPUs: one idle (5) + the last grown of task 1 (2) */
        run_out o = {0};
        enq(s, rq(3, "w", 5, 2));
        assert_int_equal(run(s, SEC, &o), 2);
        assert_int_equal(o.d[0].kind, GP_DECIDE_RESIZE);
        assert_int_equal(o.d[0].n_gpus, 2);
        assert_memory_equal(o.d[0].gpus, g, 2 * sizeof(uint32_t));
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 3);
        assert_non_null(d);
        assert_true((d->gpus[0] == 2 && d->gpus[1] == 5) || (d->gpus[0] == 5 && d->gpus[1] == 2));
        free(o.d);
        gp_sched_free(s);
}

static void test_share_usage_and_attained_service_follow_resizes(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 3);
        run_out o = {0};
        enq(s, erq(1, "e", 5, 1, 3));
        run(s, 0, &o);
        assert_int_equal(ngpus(s, 1), 3);
        /* 0..10 s on 3 GPUs */
        enq(s, rq(2, "w", 5, 2));
        run(s, 10 * SEC, &o);
        assert_int_equal(ngpus(s, 1), 1);
        assert_int_equal(view(s, 1).gpus_milli, 1000);
        assert_int_equal(usage(s, "e", 10 * SEC).gpus_milli, 1000);
        /* 10..30 s on 1 GPU */
        int64_t a;
        assert_int_equal(gp_sched_task_attained(s, 1, 30 * SEC, &a), 0);
        assert_int_equal(a, 3 * 10 * SEC + 1 * 20 * SEC);
        gp_sched_tenant_view u = usage(s, "e", 30 * SEC);
        assert_true(u.fair_share_usage > 49.999 && u.fair_share_usage < 50.001); /* GPU-seconds */
        assert_int_equal(gp_sched_remove_at(s, 2, 30 * SEC), 0);
        run(s, 30 * SEC, &o);
        assert_int_equal(ngpus(s, 1), 3);
        assert_int_equal(usage(s, "e", 30 * SEC).gpus_milli, 3000);
        /* 30..40 s on 3 GPUs again */
        assert_int_equal(gp_sched_task_attained(s, 1, 40 * SEC, &a), 0);
        assert_int_equal(a, 80 * SEC);
        u = usage(s, "e", 40 * SEC);
        assert_true(u.fair_share_usage > 79.999 && u.fair_share_usage < 80.001);
        /* requeued, it waits at its minimum and keeps what it attained */
        assert_int_equal(gp_sched_requeue_at(s, 1, 40 * SEC), 0);
        gp_sched_task_view v = view(s, 1);
        assert_false(v.running);
        assert_int_equal(usage(s, "e", 40 * SEC).gpus_milli, 0);
        assert_int_equal(gp_sched_task_attained(s, 1, 50 * SEC, &a), 0);
        assert_int_equal(a, 80 * SEC);
        enq(s, rq(3, "w", 5, 2));
        run(s, 50 * SEC, &o);
        /* task 1 goes first (lower id) on its minimum, task 3 takes the rest */
        assert_true(is_running(s, 1));
        assert_true(is_running(s, 3));
        assert_int_equal(ngpus(s, 1), 1);
        free(o.d);
        gp_sched_free(s);
}

/* ---- property: random workloads ---- */

typedef struct prop_stats {
        int starts, preempts, grows, shrinks;
        uint64_t hash;
} prop_stats;

#define PMAX 4096
#define PGPUS 16
static const char *const PNAMES[] = {"a", "b", "c", "d"};

typedef struct ptask {
        int min, max;              /* max 0: not elastic */
        int tenant;
        bool preemptible;
        int n;                     /* GPUs held as last reported (0 = not running) */
        uint32_t gpus[GP_NODE_MAX_GPUS];
} ptask;

static void check_invariants(gp_sched *s, const ptask *pt, const int64_t *live, int nlive, int64_t now) {
        int owners[PGPUS] = {0};
        int64_t milli[4] = {0};
        int running[4] = {0};
        for (int k = 0; k < nlive; k++) {
                int64_t id = live[k];
                gp_sched_task_view v = view(s, id);
                if (!v.running)
                        continue;
                const ptask *p = &pt[id];
                if (p->max) {
                        assert_true(v.n_gpus >= p->min && v.n_gpus <= p->max);
                        assert_int_equal(v.gpus_milli, 1000 * v.n_gpus);
                } else {
                        assert_int_equal(v.n_gpus, p->min);
                }
                /* what the decisions said is what the core holds */
                assert_int_equal(v.n_gpus, p->n);
                assert_memory_equal(v.gpus, p->gpus, (size_t)p->n * sizeof(uint32_t));
                for (int i = 0; i < v.n_gpus; i++) {
                        assert_true(v.gpus[i] < PGPUS);
                        assert_true(holds(s, v.gpus[i], id));
                        owners[v.gpus[i]]++;
                        for (int j = 0; j < i; j++)
                                assert_true(v.gpus[i] != v.gpus[j]);
                }
                milli[p->tenant] += v.gpus_milli;
                running[p->tenant]++;
        }
        for (uint32_t g = 0; g < gp_sched_gpu_count(s); g++) {
                gp_sched_gpu_view gv;
                assert_int_equal(gp_sched_gpu_get(s, g, &gv), 0);
                /* no GPU over-committed, and every task on it is one we know runs there */
                assert_int_equal(gv.ntasks, owners[g]);
                assert_true(gv.memory_allocated_mb <= gv.memory_usable_mb);
                if (gv.exclusive_held)
                        assert_int_equal(gv.ntasks, 1);
        }
        for (int t = 0; t < 4; t++) {
                gp_sched_tenant_view u;
                if (gp_sched_tenant_usage(s, PNAMES[t], now, &u) < 0)
                        continue;
                assert_int_equal(u.gpus_milli, milli[t]);
                assert_int_equal(u.running, running[t]);
        }
        assert_true(usage(s, "b", now).gpus_milli <= 6000);
}

static prop_stats random_elastic_workload(gp_sched_policy policy, bool preemption, unsigned seed, int steps) {
        gp_sched *s = mk_cfg(policy, preemption, 5 * SEC);
        if (policy == GP_SCHED_LAS && !preemption) {
                gp_sched_config c = *gp_sched_get_config(s);
                gp_sched_free(s);
                c.las_preempt = false;
                assert_int_equal(gp_sched_new(&c, &s), 0);
        }
        add_node(s, "a", 8);
        add_node(s, "b", 4);
        add_node(s, "c", 4);
        assert_int_equal(gp_sched_group_set(s, "internal", 60), 0);
        assert_int_equal(gp_sched_group_set(s, "external", 40), 0);
        tenant(s, "a", "internal", 0, 0);
        tenant(s, "b", "internal", 5, 6000);
        tenant(s, "c", "external", 0, 0);
        /* d: never configured */
        static ptask pt[PMAX];
        memset(pt, 0, sizeof(pt));
        static int grown_at[PMAX]; /* 1 + the step of its latest growth */
        memset(grown_at, 0, sizeof(grown_at));
        static int64_t live[PMAX];
        int nlive = 0;
        int64_t next = 1, now = 0;
        prop_stats ps = {.hash = 1469598103934665603ULL};
        run_out o = {0};
        srand(seed);
        for (int step = 0; step < steps; step++) {
                now += 1 + rand() % 4000;
                int op = rand() % 8;
                if (op < 4 && nlive < ((step / 250) % 2 ? 30 : 10) && next < PMAX) {
                        int ti = rand() % 4;
                        bool el = rand() % 3 == 0;
                        gp_sched_req r = {.id = next, .tenant = PNAMES[ti], .priority = rand() % 10,
                                          .gpus = 1 + (rand() % 4 == 0 ? rand() % 3 : 0),
                                          .memory_mb = (rand() % 3) ? 0 : 1 + rand() % 20000,
                                          .preemptible = rand() % 2 != 0};
                        if (el)
                                r.elastic_max_gpus = r.gpus + 1 + rand() % 5;
                        if (rand() % 4 == 0)
                                r.timeout_ms = (1 + rand() % 60) * SEC;
                        assert_int_equal(gp_sched_enqueue(s, &r), 0);
                        pt[next] = (ptask){.min = r.gpus, .max = r.elastic_max_gpus, .tenant = ti,
                                           .preemptible = r.preemptible};
                        live[nlive++] = next++;
                } else if (op < 6 && nlive) {
                        /* a task ends (mostly a running one) or is cancelled */
                        int k = rand() % nlive;
                        for (int j = 0; j < nlive && rand() % 4 && !pt[live[k]].n; j++)
                                k = (k + 1) % nlive;
                        assert_int_equal(gp_sched_remove_at(s, live[k], now), 0);
                        pt[live[k]].n = 0;
                        live[k] = live[--nlive];
                } else if (op == 6 && nlive) {
                        /* a running task's GPU fails: it is queued again */
                        int64_t id = live[rand() % nlive];
                        if (pt[id].n) {
                                assert_int_equal(gp_sched_requeue_at(s, id, now), 0);
                                pt[id].n = 0;
                        }
                } else if (op == 7) {
                        /* drain or undrain a GPU (what runs there stays) */
                        assert_int_equal(gp_sched_gpu_set_drained(s, (uint32_t)(rand() % PGPUS), rand() % 3 == 0), 0);
                }
                run(s, now, &o);
                int starts = 0, started_gpus = 0, changes = 0, shrinks = 0, grows = 0;
                for (size_t i = 0; i < o.n; i++) {
                        const gp_sched_decision *d = &o.d[i];
                        ps.hash = (ps.hash ^ (uint64_t)(d->id * 4 + d->kind)) * 1099511628211ULL;
                        for (int j = 0; j < d->n_gpus; j++)
                                ps.hash = (ps.hash ^ d->gpus[j]) * 1099511628211ULL;
                        ptask *p = &pt[d->id];
                        switch (d->kind) {
                        case GP_DECIDE_START:
                                starts++;
                                started_gpus += d->n_gpus;
                                assert_int_equal(p->n, 0);
                                assert_int_equal(d->n_gpus, p->min); /* starts at its minimum */
                                break;
                        case GP_DECIDE_PREEMPT:
                                ps.preempts++;
                                changes++;
                                assert_true(p->preemptible);
                                assert_int_equal(d->n_gpus, p->n);
                                assert_memory_equal(d->gpus, p->gpus, (size_t)p->n * sizeof(uint32_t));
                                p->n = 0;
                                continue;
                        case GP_DECIDE_RESIZE:
                                assert_true(p->max > 0);
                                assert_true(p->n > 0);
                                assert_true(d->n_gpus >= p->min && d->n_gpus <= p->max);
                                assert_true(d->n_gpus != p->n);
                                if (d->n_gpus < p->n) {
                                        /* a shrink keeps a prefix (the last grown go) and
                                         * makes room for a START later in this run */
                                        assert_memory_equal(d->gpus, p->gpus, (size_t)d->n_gpus * sizeof(uint32_t));
                                        bool start_after = false;
                                        for (size_t j = i + 1; j < o.n && !start_after; j++)
                                                start_after = o.d[j].kind == GP_DECIDE_START;
                                        assert_true(start_after);
                                        ps.shrinks++;
                                        shrinks++;
                                        changes++;
                                } else {
                                        /* a growth keeps what it held, comes after every
                                         * start of the run, and only when nothing waits
                                         * that could start (checked by the second run) */
                                        assert_memory_equal(d->gpus, p->gpus, (size_t)p->n * sizeof(uint32_t));
                                        ps.grows++;
                                        grows++;
                                        assert_true(grown_at[d->id] != step + 1); /* once per run */
                                        grown_at[d->id] = step + 1;
                                        for (size_t j = i + 1; j < o.n; j++)
                                                assert_int_not_equal(o.d[j].kind, GP_DECIDE_START);
                                }
                                break;
                        default:
                                break;
                        }
                        p->n = d->n_gpus;
                        memcpy(p->gpus, d->gpus, (size_t)d->n_gpus * sizeof(uint32_t));
                }
                ps.starts += starts;
                /* bounded: every preemption or shrink is for a start of this
                 * run; a shrink gives at least one GPU the started task
                 * takes; each task grows at most once per run (above) */
                assert_true(changes <= GP_NODE_MAX_GPUS * starts);
                assert_true(shrinks <= started_gpus);
                assert_true(grows <= nlive);
                check_invariants(s, pt, live, nlive, now);
                /* no ping-pong: run again at the same time with nothing
                 * changed.  The core may still decide there without any
                 * elastic task (the starts of the first run change the
                 * order, so another task may be first in line, take the
                 * reservation or preempt; a victim requeued behind the
                 * walk may start).  But nothing grows unless a task that
                 * waited starts (or a preemption frees GPUs), and no task
                 * grown in the first run gives a GPU back */
                run(s, now, &o);
                for (size_t i = 0; i < o.n; i++) {
                        const gp_sched_decision *d = &o.d[i];
                        ptask *p = &pt[d->id];
                        if (d->kind == GP_DECIDE_RESIZE && d->n_gpus > p->n) {
                                /* a growth only after this run started a task that
                                 * waited (growth waits for it) or preempted one */
                                assert_true(count_kind(&o, GP_DECIDE_START) + count_kind(&o, GP_DECIDE_PREEMPT) > 0);
                        } else if (d->kind == GP_DECIDE_RESIZE) {
                                assert_true(grown_at[d->id] != step + 1);
                        }
                        p->n = d->kind == GP_DECIDE_PREEMPT ? 0 : d->n_gpus;
                        memcpy(p->gpus, d->gpus, (size_t)d->n_gpus * sizeof(uint32_t));
                }
                check_invariants(s, pt, live, nlive, now);
        }
        free(o.d);
        gp_sched_free(s);
        return ps;
}

static void test_random_elastic_workloads_keep_invariants_without_ping_pong(void **st) {
        (void)st;
        static const gp_sched_policy pol[] = {GP_SCHED_HYBRID, GP_SCHED_STRICT, GP_SCHED_FIFO, GP_SCHED_LAS};
        for (int p = 0; p < 4; p++) {
                for (unsigned seed = 1; seed <= 3; seed++) {
                        bool pre = seed != 3; /* seed 3 without preemption */
                        prop_stats a = random_elastic_workload(pol[p], pre, seed, 3000);
                        /* it is exercised: growth, shrinking and preemption all happen */
                        assert_true(a.grows > 0);
                        assert_true(a.shrinks > 0);
                        /* shrinks and preemptions stay well below the starts */
                        assert_true((a.preempts + a.shrinks) * 2 <= a.starts);
                        prop_stats b = random_elastic_workload(pol[p], pre, seed, 3000);
                        assert_true(a.hash == b.hash);
                        print_message("policy %d seed %u: %d starts, %d grows, %d shrinks, %d preemptions\n",
                                      (int)pol[p], seed, a.starts, a.grows, a.shrinks, a.preempts);
                }
        }
}

/* ---- elastic in whole nodes ---- */

static gp_sched_req nrq(int64_t id, const char *tenant, int prio, int min_nodes, int max_nodes) {
        gp_sched_req r = rq(id, tenant, prio, min_nodes);
        r.elastic_min_nodes = min_nodes;
        r.elastic_max_nodes = max_nodes;
        return r;
}

/* The nodes of a decision's GPUs, in their order, as "a,b" (each once). */
static void dec_nodes(gp_sched *s, const gp_sched_decision *d, char *out, size_t size) {
        size_t o = 0;
        const char *last = NULL;
        out[0] = '\0';
        for (int i = 0; i < d->n_gpus; i++) {
                gp_sched_gpu_view v;
                assert_int_equal(gp_sched_gpu_get(s, d->gpus[i], &v), 0);
                if (last && !strcmp(last, v.node))
                        continue;
                o += (size_t)snprintf(out + o, size - o, "%s%s", o ? "," : "", v.node);
                last = v.node;
        }
}

static void test_elastic_nodes_request_checks(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 2);
        gp_sched_req r = nrq(1, "t", 5, 2, 1); /* max below min */
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = nrq(1, "t", 5, 0, 2); /* min 0 */
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = nrq(1, "t", 5, 1, 2);
        r.gpus = 3; /* gpus must be the minimum in nodes */
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = nrq(1, "t", 5, 1, 2);
        r.elastic_max_gpus = 4; /* not both kinds */
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = nrq(1, "t", 5, 1, GP_SCHED_MAX_ENODES + 1);
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = rq(1, "t", 5, 1);
        r.elastic_min_nodes = 1; /* a minimum without a maximum */
        assert_int_equal(gp_sched_enqueue(s, &r), -EINVAL);
        r = nrq(1, "t", 5, 1, 3);
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
        gp_sched_free(s);
}

static void test_elastic_nodes_start_on_min_grow_by_whole_nodes_and_shrink_last_first(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 4);
        add_node(s, "b", 2);
        add_node(s, "c", 4);
        run_out o = {0};
        char nodes[64];
        /* only node b is wholly free: it starts there on its minimum of one node */
        enq(s, rq(1, "x", 5, 4));
        enq(s, rq(2, "x", 5, 4));
        enq(s, nrq(3, "t", 5, 1, 3));
        run(s, 0, &o);
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 3);
        assert_non_null(d);
        dec_nodes(s, d, nodes, sizeof(nodes));
        assert_string_equal(nodes, "b");
        assert_int_equal(d->n_gpus, 2);
        /* a and c come free: it grows onto both, whole, the nodes it holds first */
        assert_int_equal(gp_sched_remove_at(s, 1, 10 * SEC), 0);
        assert_int_equal(gp_sched_remove_at(s, 2, 10 * SEC), 0);
        run(s, 10 * SEC, &o);
        d = find(&o, GP_DECIDE_RESIZE, 3);
        assert_non_null(d);
        dec_nodes(s, d, nodes, sizeof(nodes));
        assert_string_equal(nodes, "b,a,c");
        assert_int_equal(d->n_gpus, 10);
        assert_int_equal(count_kind(&o, GP_DECIDE_RESIZE), 1);
        /* at its maximum: nothing more */
        run(s, 11 * SEC, &o);
        assert_null(find(&o, GP_DECIDE_RESIZE, 3));
        /* a 4-GPU task waits: the task gives back its last node (c), not more */
        enq(s, rq(4, "y", 5, 4));
        run(s, 12 * SEC, &o);
        d = find(&o, GP_DECIDE_RESIZE, 3);
        assert_non_null(d);
        dec_nodes(s, d, nodes, sizeof(nodes));
        assert_string_equal(nodes, "b,a");
        const gp_sched_decision *w = find(&o, GP_DECIDE_START, 4);
        assert_non_null(w);
        dec_nodes(s, w, nodes, sizeof(nodes));
        assert_string_equal(nodes, "c");
        /* a 2-GPU task: node a goes too (b is its last node but a is in the way of nothing: the
         * last node is given back first) - it keeps its minimum, b */
        enq(s, rq(5, "y", 5, 4));
        run(s, 13 * SEC, &o);
        d = find(&o, GP_DECIDE_RESIZE, 3);
        assert_non_null(d);
        dec_nodes(s, d, nodes, sizeof(nodes));
        assert_string_equal(nodes, "b");
        assert_non_null(find(&o, GP_DECIDE_START, 5));
        /* at its minimum it gives nothing back: a further task waits */
        enq(s, rq(6, "y", 5, 2));
        run(s, 14 * SEC, &o);
        assert_null(find(&o, GP_DECIDE_RESIZE, 3));
        assert_null(find(&o, GP_DECIDE_START, 6));
        char why[256];
        assert_int_equal(ngpus(s, 3), 2);
        /* queued, it says how many whole nodes it waits for */
        enq(s, nrq(7, "t", 5, 2, 2));
        run(s, 15 * SEC, &o);
        assert_int_equal(gp_sched_task_reason(s, 7, why, sizeof(why)), 0);
        if (!strstr(why, "waiting for 2 whole nodes"))
                fail_msg("reason: %s", why);
        free(o.d);
        gp_sched_free(s);
}

static void test_elastic_nodes_shrink_nothing_when_the_waiting_task_still_cannot_start(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 2);
        add_node(s, "b", 2);
        run_out o = {0};
        enq(s, nrq(1, "t", 5, 1, 2));
        run(s, 0, &o);
        assert_int_equal(ngpus(s, 1), 4);
        /* 3 GPUs on one node never fit a 2-GPU node: giving back a node would not help */
        enq(s, rq(2, "y", 5, 3));
        run(s, SEC, &o);
        assert_null(find(&o, GP_DECIDE_RESIZE, 1));
        assert_int_equal(ngpus(s, 1), 4);
        free(o.d);
        gp_sched_free(s);
}

static void test_elastic_nodes_restore_takes_min_to_max_nodes(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 2);
        add_node(s, "b", 2);
        add_node(s, "c", 2);
        gp_sched_req r = nrq(1, "t", 5, 1, 2);
        uint32_t three[] = {0, 1, 2, 3, 4, 5}, two[] = {2, 3, 0, 1};
        assert_int_equal(gp_sched_restore_running(s, &r, three, 6, 0), -EINVAL);
        assert_int_equal(gp_sched_restore_running(s, &r, two, 4, 0), 0);
        assert_int_equal(ngpus(s, 1), 4);
        /* and it shrinks from there, its last node (a) first */
        run_out o = {0};
        enq(s, rq(2, "y", 5, 2));
        run(s, SEC, &o);
        assert_non_null(find(&o, GP_DECIDE_START, 2));
        const gp_sched_decision *d = find(&o, GP_DECIDE_START, 2);
        char nodes[32];
        dec_nodes(s, d, nodes, sizeof(nodes));
        assert_string_equal(nodes, "c"); /* c was idle: nothing had to shrink */
        assert_null(find(&o, GP_DECIDE_RESIZE, 1));
        enq(s, rq(3, "y", 5, 2));
        run(s, 2 * SEC, &o);
        d = find(&o, GP_DECIDE_RESIZE, 1);
        assert_non_null(d);
        dec_nodes(s, d, nodes, sizeof(nodes));
        assert_string_equal(nodes, "b");
        free(o.d);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_elastic_max_must_exceed_min_and_stay_within_a_gang),
                cmocka_unit_test(test_elastic_task_starts_at_its_minimum_when_only_that_fits),
                cmocka_unit_test(test_elastic_task_grows_onto_idle_gpus_up_to_its_max),
                cmocka_unit_test(test_elastic_task_grows_only_on_its_node),
                cmocka_unit_test(test_elastic_task_grows_onto_the_closest_gpus_first),
                cmocka_unit_test(test_elastic_task_does_not_grow_while_a_runnable_task_waits),
                cmocka_unit_test(test_elastic_task_grows_while_queued_tasks_are_held_by_quota),
                cmocka_unit_test(test_elastic_task_grows_past_a_tenant_held_by_its_first_task),
                cmocka_unit_test(test_growth_respects_tenant_max_gpus_and_unusable_gpus),
                cmocka_unit_test(test_growth_respects_group_share_while_another_group_waits),
                cmocka_unit_test(test_a_gpu_a_group_cannot_use_goes_to_the_task_its_share_held),
                cmocka_unit_test(test_shrinks_last_grown_first_before_preempting),
                cmocka_unit_test(test_shrinks_last_grown_first_with_preemption_off),
                cmocka_unit_test(test_shrinks_the_fewest_gpus_on_the_best_node),
                cmocka_unit_test(test_does_not_shrink_when_the_task_could_not_start_anyway),
                cmocka_unit_test(test_shrink_comes_before_the_reservation_and_backfill),
                cmocka_unit_test(test_reclaim_behind_the_reservation_shrinks_first),
                cmocka_unit_test(test_las_shrinks_before_preempting),
                cmocka_unit_test(test_restore_running_accepts_min_to_max_gpus),
                cmocka_unit_test(test_share_usage_and_attained_service_follow_resizes),
                cmocka_unit_test(test_random_elastic_workloads_keep_invariants_without_ping_pong),
                cmocka_unit_test(test_elastic_nodes_request_checks),
                cmocka_unit_test(test_elastic_nodes_start_on_min_grow_by_whole_nodes_and_shrink_last_first),
                cmocka_unit_test(test_elastic_nodes_shrink_nothing_when_the_waiting_task_still_cannot_start),
                cmocka_unit_test(test_elastic_nodes_restore_takes_min_to_max_nodes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
