/* test-sched-tenants.c - multi-tenant sharing in the scheduling core:
 * quotas counted in GPU shares, fair share by decayed usage and weight,
 * group shares with borrowing, preemption of less urgent work, reclaim of
 * guaranteed GPUs, reasons, exact queue positions, and a property test of
 * random workloads (bounded preemptions, no back-and-forth, determinism). */
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
#include "core/sched.h"
#include "sched-fixture.h"


static gp_sched *mk_cfg(gp_sched_policy policy, bool preemption, int64_t min_run_ms) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.policy = policy;
        c.preemption = preemption;
        c.preempt_min_runtime_ms = min_run_ms;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        return s;
}

static gp_sched *mk(void) {
        return mk_cfg(GP_SCHED_HYBRID, false, 0);
}

static gp_sched_req rq(int64_t id, const char *tenant, int prio, int gpus, int64_t mem) {
        gp_sched_req r = {.id = id, .tenant = tenant, .priority = prio, .gpus = gpus, .memory_mb = mem};
        return r;
}

static void enq_pre(gp_sched *s, int64_t id, const char *tenant, int prio, int gpus) {
        gp_sched_req r = rq(id, tenant, prio, gpus, 0);
        r.preemptible = true;
        enq(s, r);
}

static void tenant(gp_sched *s, const char *name, uint32_t weight, const char *group, int max_conc,
                   int64_t max_milli, int64_t guar_milli, int max_queued) {
        gp_sched_tenant_cfg c = {.weight = weight, .group = group,
                                 .quota = {.max_concurrent = max_conc, .max_gpus_milli = max_milli,
                                           .guaranteed_gpus_milli = guar_milli, .max_queued = max_queued}};
        assert_int_equal(gp_sched_tenant_set(s, name, &c), 0);
}

static bool is_running(gp_sched *s, int64_t id) {
        gp_sched_task_view v;
        return gp_sched_task_get(s, id, &v) == 0 && v.running;
}

static int position(gp_sched *s, int64_t id) {
        gp_sched_task_view v;
        assert_int_equal(gp_sched_task_get(s, id, &v), 0);
        return v.queue_position;
}

static void reason(gp_sched *s, int64_t id, char *buf, size_t size) {
        assert_int_equal(gp_sched_task_reason(s, id, buf, size), 0);
}

static gp_sched_tenant_view usage(gp_sched *s, const char *t, int64_t now) {
        gp_sched_tenant_view u;
        assert_int_equal(gp_sched_tenant_usage(s, t, now, &u), 0);
        return u;
}

/* ---- quotas ---- */

static void test_max_concurrent_holds_a_tenant_without_blocking_others(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 4);
        tenant(s, "dept_a", 1, NULL, 2, 0, 0, 0);
        run_out o = {0};
        for (int i = 1; i <= 3; i++)
                enq(s, rq(i, "dept_a", 5, 1, 0));
        enq(s, rq(4, "dept_b", 5, 1, 0));
        assert_int_equal(run(s, SEC, &o), 3);
        assert_true(is_running(s, 1) && is_running(s, 2) && is_running(s, 4));
        char why[256];
        reason(s, 3, why, sizeof(why));
        assert_string_equal(why, "tenant dept_a quota: 2 of 2 tasks running");
        /* the held task took no reservation: another tenant's gang may pass */
        enq(s, rq(5, "dept_b", 9, 1, 0));
        assert_int_equal(run(s, 2 * SEC, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 5));
        /* one ends: the held task goes */
        assert_int_equal(gp_sched_remove(s, 1), 0);
        assert_int_equal(run(s, 3 * SEC, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 3));
        free(o.d);
        gp_sched_free(s);
}

static void test_max_gpus_counts_memory_slices_as_shares(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 2);
        tenant(s, "dept_a", 1, NULL, 0, 1000, 0, 0);
        run_out o = {0};
        enq(s, rq(1, "dept_a", 5, 1, USABLE / 2));
        enq(s, rq(2, "dept_a", 5, 1, USABLE / 2));
        enq(s, rq(3, "dept_a", 5, 1, 1000));
        assert_int_equal(run(s, SEC, &o), 2);
        /* two halves of one GPU are 0.5 + 0.5 */
        assert_int_equal(find(&o, GP_DECIDE_START, 1)->gpus[0], find(&o, GP_DECIDE_START, 2)->gpus[0]);
        gp_sched_task_view v;
        assert_int_equal(gp_sched_task_get(s, 1, &v), 0);
        assert_int_equal(v.gpus_milli, 500);
        gp_sched_tenant_view u = usage(s, "dept_a", SEC);
        assert_int_equal(u.running, 2);
        assert_int_equal(u.queued, 1);
        assert_int_equal(u.gpus_milli, 1000);
        char why[256];
        reason(s, 3, why, sizeof(why));
        assert_string_equal(why, "tenant dept_a quota: 1.0 of 1 GPUs in use");
        gp_sched_task_get(s, 2, &v);
        tenant(s, "dept_a", 1, NULL, 0, 1030, 0, 0); /* room for 0.03 */
        run(s, SEC, &o);
        reason(s, 3, why, sizeof(why));
        assert_string_equal(why, "tenant dept_a quota: 1.0 of 1.03 GPUs in use, this task needs 0.045");
        /* the example: 4096 MB on a 22564 MB GPU is 0.182 */
        enq(s, rq(4, "other", 5, 1, 4096));
        assert_int_equal(run(s, SEC, &o), 1);
        assert_int_equal(gp_sched_task_get(s, 4, &v), 0);
        assert_int_equal(v.gpus_milli, 182);
        /* a whole GPU is 1000 per GPU */
        tenant(s, "dept_a", 1, NULL, 0, 8000, 0, 0);
        assert_int_equal(gp_sched_remove(s, 4), 0);
        assert_int_equal(gp_sched_remove(s, 3), 0);
        enq(s, rq(5, "dept_a", 5, 1, 0));
        assert_int_equal(run(s, SEC, &o), 1);
        assert_int_equal(gp_sched_task_get(s, 5, &v), 0);
        assert_int_equal(v.gpus_milli, 1000);
        assert_int_equal(usage(s, "dept_a", SEC).gpus_milli, 2000);
        free(o.d);
        gp_sched_free(s);
}

static void test_quota_reasons_name_gpus_in_use_and_oversized_tasks(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 8);
        tenant(s, "dept_a", 1, NULL, 0, 8000, 0, 0);
        run_out o = {0};
        enq(s, rq(1, "dept_a", 5, 8, 0));
        enq(s, rq(2, "dept_a", 5, 1, 0));
        enq(s, rq(3, "dept_b", 5, 1, 0));
        assert_int_equal(run(s, SEC, &o), 1);
        char why[256];
        reason(s, 2, why, sizeof(why));
        assert_string_equal(why, "tenant dept_a quota: 8.0 of 8 GPUs in use");
        /* a task of the held tenant that was not examined says the same */
        enq(s, rq(4, "dept_a", 5, 1, 0));
        reason(s, 4, why, sizeof(why));
        assert_string_equal(why, "tenant dept_a quota: 8.0 of 8 GPUs in use");
        /* a task larger than the quota itself */
        tenant(s, "small", 1, NULL, 0, 2000, 0, 0);
        enq(s, rq(5, "small", 5, 4, 0));
        run(s, 2 * SEC, &o);
        reason(s, 5, why, sizeof(why));
        assert_string_equal(why, "tenant small quota: this task needs 4.0 GPUs, more than its max of 2");
        free(o.d);
        gp_sched_free(s);
}

static void test_max_queued_refuses_with_edquot(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 1);
        tenant(s, "t1", 1, NULL, 0, 0, 0, 2);
        gp_sched_req r = rq(1, "t1", 5, 1, 0);
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
        r.id = 2;
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
        r.id = 3;
        assert_int_equal(gp_sched_enqueue(s, &r), -EDQUOT);
        r.tenant = "t2"; /* another tenant is not limited */
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
        run_out o = {0};
        assert_int_equal(run(s, SEC, &o), 1); /* task 1 starts: one queued left for t1 */
        r = rq(4, "t1", 5, 1, 0);
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
        r.id = 5;
        assert_int_equal(gp_sched_enqueue(s, &r), -EDQUOT);
        /* a requeued task is never refused */
        assert_int_equal(gp_sched_requeue(s, 1), 0);
        assert_int_equal(usage(s, "t1", SEC).queued, 3);
        /* nor one accepted before (a retry, or queued again after a restart) */
        r.id = 6;
        assert_int_equal(gp_sched_enqueue(s, &r), -EDQUOT);
        r.readmit = true;
        assert_int_equal(gp_sched_enqueue(s, &r), 0);
        assert_int_equal(usage(s, "t1", SEC).queued, 4);
        free(o.d);
        gp_sched_free(s);
}

static void test_tenant_and_group_settings_are_checked(void **st) {
        (void)st;
        gp_sched *s = mk();
        gp_sched_tenant_cfg c = {.weight = 1};
        assert_int_equal(gp_sched_tenant_set(s, "", &c), -EINVAL);
        assert_int_equal(gp_sched_tenant_set(s, NULL, &c), -EINVAL);
        assert_int_equal(gp_sched_tenant_set(s, "a", NULL), -EINVAL);
        c.quota.max_concurrent = -1;
        assert_int_equal(gp_sched_tenant_set(s, "a", &c), -EINVAL);
        c = (gp_sched_tenant_cfg){.weight = 1000001};
        assert_int_equal(gp_sched_tenant_set(s, "a", &c), -EINVAL);
        c = (gp_sched_tenant_cfg){.quota = {.max_gpus_milli = -5}};
        assert_int_equal(gp_sched_tenant_set(s, "a", &c), -EINVAL);
        char longname[300];
        memset(longname, 'x', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        c = (gp_sched_tenant_cfg){.group = longname};
        assert_int_equal(gp_sched_tenant_set(s, "a", &c), -EINVAL);
        c = (gp_sched_tenant_cfg){0}; /* weight 0 means 1 */
        assert_int_equal(gp_sched_tenant_set(s, "a", &c), 0);
        assert_int_equal(gp_sched_group_set(s, "g", 0), -EINVAL);
        assert_int_equal(gp_sched_group_set(s, "g", 101), -EINVAL);
        assert_int_equal(gp_sched_group_set(s, "", 50), -EINVAL);
        assert_int_equal(gp_sched_group_set(s, "g", 50), 0);
        gp_sched_tenant_view u;
        assert_int_equal(gp_sched_tenant_usage(s, "never", 0, &u), -ENOENT);
        assert_int_equal(gp_sched_tenant_usage(s, "a", 0, &u), 0);
        assert_int_equal(u.running + u.queued, 0);
        gp_sched_group_view gv;
        assert_int_equal(gp_sched_group_usage(s, "g", &gv), 0);
        assert_int_equal(gv.share_pct, 50);
        assert_int_equal(gp_sched_group_usage(s, "nope", &gv), -ENOENT);
        assert_int_equal(gp_sched_tenant_set_usage(s, "a", 0, -1), -EINVAL);
        assert_int_equal(gp_sched_tenant_set_usage(s, "a", 0, NAN), -EINVAL);
        gp_sched_config cfg;
        gp_sched_config_defaults(&cfg);
        assert_int_equal(cfg.fairshare_half_life_ms, 24LL * 3600 * 1000);
        assert_false(cfg.preemption);
        assert_int_equal(cfg.preempt_min_runtime_ms, 60000);
        cfg.fairshare_half_life_ms = -1;
        gp_sched *s2 = NULL;
        assert_int_equal(gp_sched_new(&cfg, &s2), -EINVAL);
        cfg.fairshare_half_life_ms = 0;
        cfg.preempt_min_runtime_ms = -1;
        assert_int_equal(gp_sched_new(&cfg, &s2), -EINVAL);
        gp_sched_free(s);
}

/* ---- fair share ---- */

static void test_tenant_with_heavy_recent_usage_goes_second(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 1);
        run_out o = {0};
        /* heavy runs an hour, then both queue one task; heavy's is older */
        enq(s, rq(1, "heavy", 5, 1, 0));
        assert_int_equal(run(s, 0, &o), 1);
        enq(s, rq(2, "heavy", 5, 1, 0));
        enq(s, rq(3, "light", 5, 1, 0));
        assert_int_equal(run(s, 3600 * SEC, &o), 0);
        assert_true(usage(s, "heavy", 3600 * SEC).fair_share_usage > 3500);
        assert_int_equal(position(s, 3), 1);
        assert_int_equal(position(s, 2), 2);
        int64_t ids[4];
        assert_int_equal(gp_sched_queue_order(s, ids, 4), 2);
        assert_int_equal(ids[0], 3);
        assert_int_equal(ids[1], 2);
        assert_int_equal(gp_sched_remove(s, 1), 0);
        assert_int_equal(run(s, 3600 * SEC, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 3));
        /* with equal (zero) usage the older task goes first: FIFO as before */
        gp_sched *s2 = mk();
        add_node(s2, "n", 1);
        enq(s2, rq(1, "x", 5, 1, 0));
        enq(s2, rq(2, "y", 5, 1, 0));
        enq(s2, rq(3, "x", 5, 1, 0));
        assert_int_equal(gp_sched_queue_order(s2, ids, 4), 3);
        assert_true(ids[0] == 1 && ids[1] == 2 && ids[2] == 3);
        free(o.d);
        gp_sched_free(s);
        gp_sched_free(s2);
}

/* One GPU, both tenants backlogged in one tier, each task runs 10 s: the
 * starts follow the weights. */
static void test_weights_3_to_1_give_3_to_1_starts(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "n", 1);
        tenant(s, "big", 3, NULL, 0, 0, 0, 0);
        tenant(s, "small", 1, NULL, 0, 0, 0, 0);
        int64_t id = 1;
        for (int i = 0; i < 500; i++) {
                enq(s, rq(id++, "small", 5, 1, 0));
                enq(s, rq(id++, "big", 5, 1, 0));
        }
        run_out o = {0};
        int big = 0, small = 0;
        int64_t now = 0;
        for (int i = 0; i < 400; i++) {
                assert_int_equal(run(s, now, &o), 1);
                int64_t tid = o.d[0].id;
                if (tid % 2 == 0)
                        big++;
                else
                        small++;
                now += 10 * SEC;
                assert_int_equal(gp_sched_remove_at(s, tid, now), 0);
        }
        assert_int_equal(big + small, 400);
        assert_true(big >= 295 && big <= 305);
        free(o.d);
        gp_sched_free(s);
}

/* "old" ran 2 GPUs for one half-life from t=0; "recent" runs 1 GPU for
 * 20 minutes either right after (1 h) or three half-lives later (4 h).
 * Right after, old's heavier use counts and recent goes first; three
 * half-lives later old's use has decayed below recent's and old goes
 * first, although its task is newer. */
static void decay_case(int64_t recent_at, int64_t expect_first) {
        gp_sched_config c;
        gp_sched_config_defaults(&c);
        c.fairshare_half_life_ms = 3600 * SEC;
        gp_sched *s = NULL;
        assert_int_equal(gp_sched_new(&c, &s), 0);
        add_node(s, "n", 2);
        run_out o = {0};
        enq(s, rq(1, "old", 5, 2, 0));
        assert_int_equal(run(s, 0, &o), 1);
        assert_int_equal(run(s, 3600 * SEC, &o), 0);
        assert_int_equal(gp_sched_remove(s, 1), 0);
        double u0 = usage(s, "old", 3600 * SEC).fair_share_usage;
        /* 2 GPUs integrated with decay over one half-life: 2 * H/ln2 * (1 - 1/2) */
        assert_true(fabs(u0 - 2 * 3600 / M_LN2 * 0.5) < 1e-6);
        assert_true(fabs(usage(s, "old", 2 * 3600 * SEC).fair_share_usage - u0 / 2) < 1e-6);
        assert_true(fabs(usage(s, "old", 5 * 3600 * SEC).fair_share_usage - u0 / 16) < 1e-6);
        enq(s, rq(2, "recent", 5, 1, 0));
        assert_int_equal(run(s, recent_at, &o), 1);
        assert_int_equal(gp_sched_remove_at(s, 2, recent_at + 1200 * SEC), 0);
        enq(s, rq(3, "recent", 5, 1, 0));
        enq(s, rq(4, "old", 5, 1, 0));
        assert_int_equal(run(s, recent_at + 1200 * SEC, &o), 2);
        assert_int_equal(o.d[0].id, expect_first);
        assert_int_equal(gp_sched_requeue_at(s, 3, recent_at + 1300 * SEC), 0);
        assert_int_equal(gp_sched_requeue_at(s, 4, recent_at + 1300 * SEC), 0);
        assert_int_equal(position(s, expect_first), 1);
        free(o.d);
        gp_sched_free(s);
}

static void test_usage_decays_by_half_every_half_life(void **st) {
        (void)st;
        decay_case(3600 * SEC, 3);
        decay_case(4 * 3600 * SEC, 4);
}

/* Exact positions: the closed form agrees with the simulated dispatch
 * order for many tenants with weights, usage, guarantees and groups, and a
 * run starts the first task of that order. */
static void check_fair_positions(gp_sched_policy policy) {
        gp_sched *s = mk_cfg(policy, false, 0);
        add_node(s, "n", 1);
        static const char *names[] = {"a", "b", "c", "d", "e", "f", "g"};
        tenant(s, "a", 3, NULL, 0, 0, 0, 0);
        tenant(s, "b", 1, "internal", 0, 0, 0, 0);
        tenant(s, "c", 2, "internal", 0, 0, 0, 0);
        tenant(s, "d", 1, "external", 0, 0, 1000, 0);
        tenant(s, "e", 5, "external", 0, 0, 0, 0);
        assert_int_equal(gp_sched_group_set(s, "internal", 80), 0);
        assert_int_equal(gp_sched_group_set(s, "external", 20), 0);
        srand(99);
        int64_t next = 1, now = 0;
        run_out o = {0};
        for (int round = 0; round < 80; round++) {
                for (int i = 0; i < 25; i++) {
                        gp_sched_req r = rq(next++, names[rand() % 7], rand() % 10, 1, 0);
                        assert_int_equal(gp_sched_enqueue(s, &r), 0);
                }
                for (int i = 0; i < 8; i++) {
                        int64_t id = 1 + rand() % (next - 1);
                        gp_sched_task_view v;
                        if (gp_sched_task_get(s, id, &v) == 0 && !v.running)
                                gp_sched_remove(s, id);
                }
                if (round % 3 == 0)
                        gp_sched_tenant_set_usage(s, names[rand() % 7], now, rand() % 1000);
                int64_t ids[4096];
                size_t n = gp_sched_queue_order(s, ids, 4096);
                assert_true(n <= 4096);
                for (size_t i = 0; i < n; i++)
                        assert_int_equal(position(s, ids[i]), (int)(i + 1));
                /* free the GPU at the time of the last run: the head starts
                 * (groups only reorder here: their caps hold nothing with
                 * one GPU... unless another group waits, so check only the
                 * ungrouped case) */
                int64_t running = 0;
                for (int64_t id = 1; id < next; id++)
                        if (is_running(s, id))
                                running = id;
                if (running) {
                        assert_int_equal(gp_sched_remove(s, running), 0);
                        n = gp_sched_queue_order(s, ids, 4096);
                }
                gp_sched_group_view gi, ge;
                gp_sched_group_usage(s, "internal", &gi);
                gp_sched_group_usage(s, "external", &ge);
                int64_t last = now;
                run(s, last, &o);
                if (n && (gi.queued == 0 || ge.queued == 0)) {
                        assert_int_equal(o.n, 1);
                        assert_int_equal(o.d[0].id, ids[0]);
                }
                now += 1000 + rand() % 60000;
                run(s, now, &o);
        }
        free(o.d);
        gp_sched_free(s);
}

static void test_queue_positions_match_fair_share_order_hybrid(void **st) {
        (void)st;
        check_fair_positions(GP_SCHED_HYBRID);
}

static void test_queue_positions_match_fair_share_order_strict(void **st) {
        (void)st;
        check_fair_positions(GP_SCHED_STRICT);
}

/* ---- groups ---- */

static void test_groups_split_80_20_under_contention(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 5);
        add_node(s, "b", 5);
        assert_int_equal(gp_sched_group_set(s, "internal", 80), 0);
        assert_int_equal(gp_sched_group_set(s, "external", 20), 0);
        tenant(s, "dept_a", 1, "internal", 0, 0, 0, 0);
        tenant(s, "cust_x", 1, "external", 0, 0, 0, 0);
        run_out o = {0};
        int64_t id = 1;
        for (int i = 0; i < 12; i++) {
                enq(s, rq(id++, "cust_x", 5, 1, 0)); /* odd ids */
                enq(s, rq(id++, "dept_a", 5, 1, 0)); /* even ids */
        }
        assert_int_equal(run(s, SEC, &o), 10);
        assert_int_equal(usage(s, "dept_a", SEC).gpus_milli, 8000);
        assert_int_equal(usage(s, "cust_x", SEC).gpus_milli, 2000);
        gp_sched_group_view g;
        assert_int_equal(gp_sched_group_usage(s, "external", &g), 0);
        assert_int_equal(g.gpus_milli, 2000);
        assert_int_equal(g.share_milli, 2000);
        assert_int_equal(g.queued, 10);
        /* an internal task ends: internal (below its share) goes next */
        assert_int_equal(gp_sched_remove(s, 2), 0);
        assert_int_equal(run(s, 2 * SEC, &o), 1);
        assert_true(o.d[0].id % 2 == 0);
        /* an external task ends: external goes next, internal is capped */
        assert_int_equal(gp_sched_remove(s, 1), 0);
        assert_int_equal(run(s, 3 * SEC, &o), 1);
        assert_true(o.d[0].id % 2 == 1);
        assert_int_equal(usage(s, "dept_a", SEC).gpus_milli, 8000);
        assert_int_equal(usage(s, "cust_x", SEC).gpus_milli, 2000);
        /* internal below its share goes first in the order, though its tasks are newer */
        assert_int_equal(gp_sched_remove(s, 4), 0);
        assert_int_equal(gp_sched_remove(s, 6), 0);
        int64_t ids[32];
        assert_int_equal(gp_sched_queue_order(s, ids, 32), 12);
        /* internal waits with 20, 22, 24 (12 tasks, 9 started, 2 ended) */
        assert_true(ids[0] == 20 && ids[1] == 22 && ids[2] == 24 && ids[3] % 2 == 1);
        assert_int_equal(run(s, 4 * SEC, &o), 2);
        assert_int_equal(o.d[0].id, ids[0]);
        assert_int_equal(o.d[1].id, ids[1]);
        /* the split under contention, from the other side: external borrowed
         * everything while internal was idle; internal's arrival caps it */
        gp_sched *s2 = mk();
        add_node(s2, "a", 10);
        assert_int_equal(gp_sched_group_set(s2, "internal", 80), 0);
        assert_int_equal(gp_sched_group_set(s2, "external", 20), 0);
        tenant(s2, "dept_a", 1, "internal", 0, 0, 0, 0);
        tenant(s2, "cust_x", 1, "external", 0, 0, 0, 0);
        for (int i = 1; i <= 12; i++)
                enq(s2, rq(i, "cust_x", 5, 1, 0));
        assert_int_equal(run(s2, SEC, &o), 10);
        for (int i = 20; i < 30; i++)
                enq(s2, rq(i, "dept_a", 5, 1, 0));
        assert_int_equal(run(s2, 2 * SEC, &o), 0);
        char why[256];
        reason(s2, 11, why, sizeof(why));
        assert_string_equal(why, "group external is at its 20% share");
        for (int i = 1; i <= 8; i++) {
                assert_int_equal(gp_sched_remove(s2, i), 0);
                assert_int_equal(run(s2, (2 + i) * SEC, &o), 1);
                assert_true(o.d[0].id >= 20);
        }
        assert_int_equal(usage(s2, "dept_a", SEC).gpus_milli, 8000);
        assert_int_equal(usage(s2, "cust_x", SEC).gpus_milli, 2000);
        gp_sched_free(s2);
        free(o.d);
        gp_sched_free(s);
}

static void test_group_borrows_idle_capacity_when_the_other_group_is_idle(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 10);
        assert_int_equal(gp_sched_group_set(s, "internal", 80), 0);
        assert_int_equal(gp_sched_group_set(s, "external", 20), 0);
        tenant(s, "dept_a", 1, "internal", 0, 0, 0, 0);
        tenant(s, "cust_x", 1, "external", 0, 0, 0, 0);
        run_out o = {0};
        for (int i = 1; i <= 12; i++)
                enq(s, rq(i, "dept_a", 5, 1, 0));
        assert_int_equal(run(s, SEC, &o), 10); /* nobody else waits: all 10 */
        assert_int_equal(usage(s, "dept_a", SEC).gpus_milli, 10000);
        char why[256];
        reason(s, 11, why, sizeof(why));
        assert_null(strstr(why, "share"));
        /* external arrives: no preemption for shares, but the next free GPUs go to it */
        enq(s, rq(100, "cust_x", 9, 1, 0));
        enq(s, rq(101, "cust_x", 9, 1, 0));
        assert_int_equal(run(s, 2 * SEC, &o), 0);
        reason(s, 11, why, sizeof(why));
        assert_string_equal(why, "group internal is at its 80% share");
        assert_int_equal(gp_sched_remove(s, 1), 0);
        assert_int_equal(run(s, 3 * SEC, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 100));
        assert_int_equal(gp_sched_remove(s, 2), 0);
        assert_int_equal(run(s, 4 * SEC, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 101));
        /* external is idle again (nothing queued): internal borrows the next one */
        assert_int_equal(gp_sched_remove(s, 3), 0);
        assert_int_equal(run(s, 5 * SEC, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 11));
        free(o.d);
        gp_sched_free(s);
}

/* A tenant within its guarantee is not held by its group's share (and
 * goes first in its tier); the rest of its group still is. */
static void test_guaranteed_tenant_is_not_held_by_its_group_share(void **st) {
        (void)st;
        gp_sched *s = mk();
        add_node(s, "a", 10);
        assert_int_equal(gp_sched_group_set(s, "internal", 80), 0);
        assert_int_equal(gp_sched_group_set(s, "external", 20), 0);
        tenant(s, "dept_a", 1, "internal", 0, 0, 0, 0);
        tenant(s, "dept_g", 1, "internal", 0, 0, 1000, 0);
        tenant(s, "cust_x", 1, "external", 0, 0, 0, 0);
        run_out o = {0};
        for (int i = 1; i <= 12; i++)
                enq(s, rq(i, "dept_a", 5, 1, 0));
        assert_int_equal(run(s, SEC, &o), 10);
        enq(s, rq(20, "cust_x", 5, 1, 0));
        enq(s, rq(21, "cust_x", 5, 1, 0));
        enq(s, rq(30, "dept_g", 5, 1, 0));
        enq(s, rq(31, "dept_g", 5, 1, 0));
        assert_int_equal(position(s, 30), 1);
        assert_int_equal(gp_sched_remove(s, 1), 0);
        assert_int_equal(run(s, 2 * SEC, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 30));
        char why[256];
        reason(s, 11, why, sizeof(why));
        assert_string_equal(why, "group internal is at its 80% share");
        /* beyond its guarantee dept_g is held like the rest of its group */
        assert_int_equal(gp_sched_remove(s, 2), 0);
        assert_int_equal(run(s, 3 * SEC, &o), 1);
        assert_non_null(find(&o, GP_DECIDE_START, 20));
        reason(s, 31, why, sizeof(why));
        assert_string_equal(why, "group internal is at its 80% share");
        free(o.d);
        gp_sched_free(s);
}

/* ---- preemption ---- */

static void test_waiting_task_preempts_a_less_urgent_preemptible_task(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 60 * SEC);
        add_node(s, "n", 1);
        run_out o = {0};
        enq_pre(s, 1, "batch", 5, 1);
        assert_int_equal(run(s, 0, &o), 1);
        enq(s, rq(2, "online", 0, 1, 0));
        assert_int_equal(run(s, 100 * SEC, &o), 2);
        assert_int_equal(o.d[0].kind, GP_DECIDE_PREEMPT);
        assert_int_equal(o.d[0].id, 1);
        assert_int_equal(o.d[0].n_gpus, 1);
        assert_int_equal(o.d[1].kind, GP_DECIDE_START);
        assert_int_equal(o.d[1].id, 2);
        assert_int_equal(o.d[1].gpus[0], o.d[0].gpus[0]);
        assert_false(is_running(s, 1));
        assert_int_equal(position(s, 1), 1);
        gp_sched_stats stt;
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.total_preempted, 1);
        assert_int_equal(usage(s, "batch", 100 * SEC).running, 0);
        /* the same tier never preempts */
        enq(s, rq(3, "online", 5, 1, 0));
        assert_int_equal(gp_sched_remove_at(s, 2, 200 * SEC), 0);
        assert_int_equal(run(s, 200 * SEC, &o), 1); /* 1 restarts: less recent use */
        assert_non_null(find(&o, GP_DECIDE_START, 1));
        assert_int_equal(run(s, 400 * SEC, &o), 0);
        free(o.d);
        gp_sched_free(s);
}

/* A preemption that takes a group below its share lowers its tenants'
 * class in the same run: the tenant of that group with the least usage
 * then goes before a tenant of another group with more, for the room
 * left (walk_refresh; without it the walk keeps the class of before). */
static void test_a_preemption_that_frees_a_group_share_reorders_the_run(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 60 * SEC);
        add_node(s, "n", 3);
        assert_int_equal(gp_sched_group_set(s, "g1", 50), 0);
        assert_int_equal(gp_sched_group_set(s, "g2", 50), 0);
        tenant(s, "a", 1, "g1", 0, 0, 0, 0);
        tenant(s, "v", 1, "g1", 0, 0, 0, 0);
        tenant(s, "b", 1, "g2", 0, 0, 0, 0);
        run_out o = {0};
        enq(s, rq(1, "b", 9, 1, 12000)); /* a slice: 10564 MB left on its GPU */
        enq(s, rq(2, "v", 9, 1, 0));     /* g1 at 2 of its 1.5 GPUs */
        enq_pre(s, 3, "v", 9, 1);        /* the one victim */
        assert_int_equal(run(s, 0, &o), 3);
        enq(s, rq(4, "c", 1, 1, 0));     /* a whole GPU: preempts one of v's */
        enq(s, rq(5, "b", 5, 1, 8000));  /* b has used more than a ... */
        enq(s, rq(6, "a", 5, 1, 8000));  /* ... so a goes first once g1 is below its share */
        assert_int_equal(run(s, 100 * SEC, &o), 3);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 3));
        assert_non_null(find(&o, GP_DECIDE_START, 4));
        assert_non_null(find(&o, GP_DECIDE_START, 6));
        assert_false(is_running(s, 5));
        free(o.d);
        gp_sched_free(s);
}

static void test_never_preempts_non_preemptible_or_too_young_tasks(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 60 * SEC);
        add_node(s, "n", 2);
        run_out o = {0};
        enq(s, rq(1, "batch", 9, 1, 0)); /* not preemptible */
        enq_pre(s, 2, "batch", 9, 1);
        assert_int_equal(run(s, 0, &o), 2);
        enq(s, rq(3, "online", 0, 1, 0));
        assert_int_equal(run(s, 30 * SEC, &o), 0); /* 2 is too young, 1 never */
        char why[256];
        reason(s, 3, why, sizeof(why));
        assert_non_null(strstr(why, "whole GPU"));
        assert_int_equal(gp_sched_next_wakeup(s, 30 * SEC), 60 * SEC);
        {
                /* nothing waits that could preempt (same tier): no wake-up */
                gp_sched *s3 = mk_cfg(GP_SCHED_HYBRID, true, 60 * SEC);
                add_node(s3, "n", 1);
                run_out o3 = {0};
                enq_pre(s3, 1, "batch", 5, 1);
                run(s3, 0, &o3);
                enq(s3, rq(2, "other", 5, 1, 0));
                assert_int_equal(gp_sched_next_wakeup(s3, SEC), INT64_MAX);
                /* but a tenant below its guarantee may reclaim */
                tenant(s3, "other", 1, NULL, 0, 0, 1000, 0);
                assert_int_equal(gp_sched_next_wakeup(s3, SEC), 60 * SEC);
                assert_int_equal(run(s3, 60 * SEC, &o3), 2);
                assert_non_null(find(&o3, GP_DECIDE_START, 2));
                free(o3.d);
                gp_sched_free(s3);
        }
        assert_int_equal(run(s, 59999, &o), 0);
        assert_int_equal(run(s, 60 * SEC, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 2));
        assert_non_null(find(&o, GP_DECIDE_START, 3));
        assert_true(is_running(s, 1));
        /* off by default: the same situation preempts nothing */
        gp_sched *s2 = mk();
        add_node(s2, "n", 1);
        enq_pre(s2, 1, "batch", 9, 1);
        run(s2, 0, &o);
        enq(s2, rq(2, "online", 0, 1, 0));
        assert_int_equal(run(s2, 3600 * SEC, &o), 0);
        assert_int_equal(gp_sched_next_wakeup(s2, 3600 * SEC), INT64_MAX);
        free(o.d);
        gp_sched_free(s);
        gp_sched_free(s2);
}

static void test_never_preempts_when_the_task_still_would_not_start(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 0);
        add_node(s, "n", 2);
        run_out o = {0};
        enq_pre(s, 1, "batch", 9, 1);
        enq(s, rq(2, "batch", 9, 1, 0));
        assert_int_equal(run(s, 0, &o), 2);
        /* a gang of 2 could free only one GPU */
        enq(s, rq(3, "online", 0, 2, 0));
        assert_int_equal(run(s, 100 * SEC, &o), 0);
        assert_true(is_running(s, 1));
        assert_int_equal(gp_sched_remove(s, 3), 0);
        /* a task its own quota holds preempts nothing */
        tenant(s, "capped", 1, NULL, 0, 500, 0, 0);
        enq(s, rq(4, "capped", 0, 1, 0));
        assert_int_equal(run(s, 200 * SEC, &o), 0);
        assert_true(is_running(s, 1));
        /* nor one its group holds */
        assert_int_equal(gp_sched_group_set(s, "g1", 10), 0);
        assert_int_equal(gp_sched_group_set(s, "g2", 90), 0);
        tenant(s, "in_g1", 1, "g1", 0, 0, 0, 0);
        tenant(s, "in_g2", 1, "g2", 0, 0, 0, 0);
        enq(s, rq(5, "in_g2", 9, 1, 0)); /* g2 waits below its share */
        enq(s, rq(6, "in_g1", 0, 1, 0)); /* g1 would go over its 10% */
        assert_int_equal(run(s, 300 * SEC, &o), 0);
        char why[256];
        reason(s, 6, why, sizeof(why));
        assert_string_equal(why, "group g1 is at its 10% share");
        assert_true(is_running(s, 1));
        free(o.d);
        gp_sched_free(s);
}

/* Victims: on one node, the fewest GPUs, then the shortest run, then the
 * highest id; the same state gives the same choice. */
static void test_victims_are_fewest_gpus_then_least_lost_work(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 0);
        add_node(s, "a", 4);
        add_node(s, "b", 4);
        run_out o = {0};
        enq_pre(s, 1, "t", 9, 4); /* fills a node */
        assert_int_equal(run(s, 0, &o), 1);
        enq_pre(s, 2, "t", 9, 2);
        assert_int_equal(run(s, 10 * SEC, &o), 1);
        enq_pre(s, 3, "t", 9, 1);
        assert_int_equal(run(s, 20 * SEC, &o), 1);
        enq_pre(s, 4, "t", 9, 1);
        assert_int_equal(run(s, 30 * SEC, &o), 1);
        /* one GPU: the single-GPU task that ran least (4) */
        enq(s, rq(10, "u", 0, 1, 0));
        assert_int_equal(run(s, 100 * SEC, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 4));
        assert_non_null(find(&o, GP_DECIDE_START, 10));
        /* two GPUs: node b by preempting 2 GPUs (task 2, or 3 and 10's
         * neighbour: 3 is one GPU but 10 is not preemptible), never node a (4) */
        enq(s, rq(11, "u", 0, 2, 0));
        assert_int_equal(run(s, 200 * SEC, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 2));
        assert_true(is_running(s, 1) && is_running(s, 3));
        free(o.d);
        gp_sched_free(s);
}

/* Tenant "owner" is guaranteed 4 GPUs; "borrower" fills all 8 while owner
 * is idle.  When owner needs its GPUs, one run returns them (even for a
 * less urgent tier), and the borrower cannot take them back. */
static void test_reclaim_returns_guaranteed_gpus_to_their_owner_in_one_run(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 60 * SEC);
        add_node(s, "n", 8);
        tenant(s, "owner", 1, NULL, 0, 0, 4000, 0);
        run_out o = {0};
        for (int i = 1; i <= 8; i++)
                enq_pre(s, i, "borrower", 2, 1);
        for (int i = 9; i <= 12; i++)
                enq_pre(s, i, "borrower", 2, 1); /* more borrower work waits */
        assert_int_equal(run(s, 0, &o), 8);
        for (int i = 100; i < 105; i++)
                enq(s, rq(i, "owner", 7, 1, 0));
        assert_int_equal(run(s, 120 * SEC, &o), 8);
        assert_int_equal(count_kind(&o, GP_DECIDE_PREEMPT), 4);
        assert_int_equal(count_kind(&o, GP_DECIDE_START), 4);
        for (int i = 100; i < 104; i++)
                assert_non_null(find(&o, GP_DECIDE_START, i));
        /* victims: the shortest run, then the highest ids */
        for (int i = 5; i <= 8; i++)
                assert_non_null(find(&o, GP_DECIDE_PREEMPT, i));
        gp_sched_tenant_view u = usage(s, "owner", 120 * SEC);
        assert_int_equal(u.gpus_milli, 4000);
        assert_int_equal(u.running, 4);
        /* the fifth would go beyond the guarantee: not reclaimed */
        assert_false(is_running(s, 104));
        /* the borrower's more urgent tasks cannot take them back */
        assert_int_equal(run(s, 1000 * SEC, &o), 0);
        assert_int_equal(usage(s, "owner", 1000 * SEC).gpus_milli, 4000);
        free(o.d);
        gp_sched_free(s);
}

static bool borrowing_of(gp_sched *s, int64_t id) {
        gp_sched_task_view v;
        assert_int_equal(gp_sched_task_get(s, id, &v), 0);
        return v.borrowing;
}

/* The case: a tenant with guaranteed_gpus 1 waited forever while
 * another tenant's ordinary (not preemptible) tasks held every GPU.  A task
 * that would take capacity guaranteed to someone else starts borrowing,
 * and borrowed capacity is reclaimed like preemptible work. */
static void test_guarantee_is_reclaimed_from_ordinary_tasks_that_borrowed_it(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 60 * SEC);
        add_node(s, "n", 4);
        tenant(s, "owner", 1, NULL, 0, 0, 1000, 0);
        run_out o = {0};
        for (int i = 1; i <= 4; i++)
                enq(s, rq(i, "other", 5, 1, 0)); /* not preemptible */
        assert_int_equal(run(s, 0, &o), 4);
        /* three fit beside the owner's unused guarantee; the fourth borrows it */
        for (int i = 1; i <= 3; i++) {
                assert_false(find(&o, GP_DECIDE_START, i)->borrowing);
                assert_false(borrowing_of(s, i));
        }
        assert_true(find(&o, GP_DECIDE_START, 4)->borrowing);
        assert_true(borrowing_of(s, 4));
        /* the owner comes: its task waits until the borrower has run its
         * least run time, then takes its GPU back */
        enq(s, rq(10, "owner", 7, 1, 0));
        assert_int_equal(run(s, 30 * SEC, &o), 0);
        assert_int_equal(gp_sched_next_wakeup(s, 30 * SEC), 60 * SEC);
        assert_int_equal(run(s, 60 * SEC, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 4));
        assert_non_null(find(&o, GP_DECIDE_START, 10));
        assert_false(find(&o, GP_DECIDE_START, 10)->borrowing); /* within its own guarantee */
        for (int i = 1; i <= 3; i++)
                assert_true(is_running(s, i)); /* ordinary tasks that borrowed nothing stay */
        /* the borrower, queued again, cannot take it back, nor can more urgent
         * ordinary work of the other tenant (it would only borrow again) */
        assert_false(borrowing_of(s, 4));
        enq(s, rq(11, "other", 0, 1, 0));
        assert_int_equal(run(s, 1000 * SEC, &o), 0);
        assert_true(is_running(s, 10));
        free(o.d);
        gp_sched_free(s);
}

/* Who borrows: only a task that is not preemptible and would eat into
 * another tenant's unused guarantee.  Nothing borrows without guarantees
 * (so traces without them schedule exactly as before). */
static void test_only_tasks_that_take_others_guarantees_borrow(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 0);
        add_node(s, "n", 4);
        run_out o = {0};
        for (int i = 1; i <= 4; i++)
                enq(s, rq(i, "x", 5, 1, 0));
        assert_int_equal(run(s, 0, &o), 4);
        for (int i = 1; i <= 4; i++)
                assert_false(find(&o, GP_DECIDE_START, i)->borrowing); /* no guarantees anywhere */
        for (int i = 1; i <= 4; i++)
                assert_int_equal(gp_sched_remove(s, i), 0);
        /* a: guarantee 2 GPUs, b: 1.  a's own tasks within its guarantee never
         * borrow, even when that leaves b's guarantee as the only room */
        tenant(s, "a", 1, NULL, 0, 0, 2000, 0);
        tenant(s, "b", 1, NULL, 0, 0, 1000, 0);
        enq(s, rq(5, "a", 5, 1, 0));
        enq(s, rq(6, "a", 5, 1, 0));
        assert_int_equal(run(s, SEC, &o), 2);
        assert_false(find(&o, GP_DECIDE_START, 5)->borrowing || find(&o, GP_DECIDE_START, 6)->borrowing);
        /* a third of a's: one GPU nobody is guaranteed is left: not borrowing */
        enq(s, rq(7, "a", 5, 1, 0));
        assert_int_equal(run(s, 2 * SEC, &o), 1);
        assert_false(find(&o, GP_DECIDE_START, 7)->borrowing);
        /* a fourth takes b's unused guarantee: borrowing */
        enq(s, rq(8, "a", 5, 1, 0));
        assert_int_equal(run(s, 3 * SEC, &o), 1);
        assert_true(find(&o, GP_DECIDE_START, 8)->borrowing);
        /* a preemptible task is reclaimable anyway: never marked */
        assert_int_equal(gp_sched_remove(s, 8), 0);
        enq_pre(s, 9, "a", 5, 1);
        assert_int_equal(run(s, 4 * SEC, &o), 1);
        assert_false(find(&o, GP_DECIDE_START, 9)->borrowing);
        /* a memory share counts its fraction: half a GPU fits beside b's
         * unused guarantee on the GPU 9 frees */
        assert_int_equal(gp_sched_remove(s, 9), 0);
        enq(s, rq(12, "c", 5, 1, USABLE / 2));
        assert_int_equal(run(s, 5 * SEC, &o), 1);
        assert_true(find(&o, GP_DECIDE_START, 12)->borrowing); /* 0 free beyond b's 1000 */
        free(o.d);
        gp_sched_free(s);
}

/* A restart keeps a borrower reclaimable: restore_running takes the flag. */
static void test_restored_borrower_is_still_reclaimable(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 0);
        add_node(s, "n", 1);
        tenant(s, "owner", 1, NULL, 0, 0, 1000, 0);
        gp_sched_req r = rq(1, "other", 5, 1, 0);
        r.borrowing = true;
        uint32_t g = 0;
        assert_int_equal(gp_sched_restore_running(s, &r, &g, 1, 0), 0);
        assert_true(borrowing_of(s, 1));
        run_out o = {0};
        enq(s, rq(2, "owner", 9, 1, 0));
        assert_int_equal(run(s, SEC, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_PREEMPT, 1));
        assert_non_null(find(&o, GP_DECIDE_START, 2));
        /* restored without the flag it is an ordinary task: kept */
        gp_sched *s2 = mk_cfg(GP_SCHED_HYBRID, true, 0);
        add_node(s2, "n", 1);
        tenant(s2, "owner", 1, NULL, 0, 0, 1000, 0);
        r.borrowing = false;
        assert_int_equal(gp_sched_restore_running(s2, &r, &g, 1, 0), 0);
        enq(s2, rq(2, "owner", 9, 1, 0));
        assert_int_equal(run(s2, SEC, &o), 0);
        free(o.d);
        gp_sched_free(s);
        gp_sched_free(s2);
}

/* A task within its tenant's guarantee reclaims even when it is behind a
 * blocked, more urgent task (never on the GPUs reserved for that one). */
static void test_reclaim_also_happens_behind_a_blocked_task(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_STRICT, true, 0);
        add_node(s, "a", 4);
        add_node(s, "b", 2);
        tenant(s, "owner", 1, NULL, 0, 0, 1000, 0);
        run_out o = {0};
        enq(s, rq(1, "other", 5, 4, 0)); /* node a, not preemptible */
        enq_pre(s, 2, "borrower", 5, 1);
        enq_pre(s, 3, "borrower", 5, 1);
        assert_int_equal(run(s, 0, &o), 3);
        enq(s, rq(4, "other", 1, 4, 0)); /* blocked: only node a can host it */
        enq(s, rq(5, "owner", 9, 1, 0));
        assert_int_equal(run(s, 100 * SEC, &o), 2);
        assert_non_null(find(&o, GP_DECIDE_START, 5));
        assert_int_equal(count_kind(&o, GP_DECIDE_PREEMPT), 1);
        assert_false(is_running(s, 4));
        free(o.d);
        gp_sched_free(s);
}

/* ---- property: random workloads ---- */

typedef struct prop_stats {
        int starts, preempts;
        int borrows, reclaimed_borrowers; /* starts that borrowed; borrowers reclaimed */
        uint64_t hash;
} prop_stats;

#define PMAX 8192
static const char *const PNAMES[] = {"a", "b", "c", "d", "e", "f"};

static prop_stats random_workload(gp_sched_policy policy, unsigned seed, int steps) {
        gp_sched *s = mk_cfg(policy, true, 5 * SEC);
        add_node(s, "a", 8);
        add_node(s, "b", 4);
        add_node(s, "c", 4);
        assert_int_equal(gp_sched_group_set(s, "internal", 70), 0);
        assert_int_equal(gp_sched_group_set(s, "external", 30), 0);
        tenant(s, "a", 4, "internal", 6, 8000, 4000, 0);
        tenant(s, "b", 2, "internal", 0, 0, 2000, 0);
        tenant(s, "c", 1, "external", 0, 6000, 2000, 0);
        tenant(s, "d", 1, "external", 4, 0, 0, 0);
        tenant(s, "e", 3, NULL, 0, 0, 1000, 50);
        /* f: never configured */
        static int64_t started[PMAX], tenant_of[PMAX];
        static bool preemptible[PMAX], borrowing[PMAX];
        static int prio[PMAX];
        static unsigned char pairs[PMAX / 8][PMAX / 8]; /* (w / 8, v / 8) coarse filter */
        static int64_t pair_w[PMAX * 4], pair_v[PMAX * 4];
        int npairs = 0;
        memset(pairs, 0, sizeof(pairs));
        memset(started, 0, sizeof(started));
        int64_t live[PMAX];
        int nlive = 0;
        int64_t next = 1, now = 0;
        prop_stats ps = {.hash = 1469598103934665603ULL};
        run_out o = {0};
        srand(seed);
        for (int step = 0; step < steps; step++) {
                int64_t wake = gp_sched_next_wakeup(s, now);
                now += 1 + rand() % 3000;
                if (wake < now && rand() % 2)
                        now = wake > now - 3000 ? wake : now;
                int op = rand() % 4;
                if (op < 2 && nlive < 600 && next < PMAX) {
                        int ti = rand() % 6;
                        gp_sched_req r = {.id = next, .tenant = PNAMES[ti], .priority = rand() % 10,
                                          .gpus = 1 + (rand() % 5 == 0 ? rand() % 4 : 0),
                                          .memory_mb = (rand() % 3) ? 0 : 1 + rand() % 20000,
                                          .preemptible = rand() % 3 != 0};
                        int rc = gp_sched_enqueue(s, &r);
                        assert_true(rc == 0 || rc == -EDQUOT);
                        if (rc == 0) {
                                live[nlive++] = next;
                                tenant_of[next] = ti;
                                preemptible[next] = r.preemptible;
                                prio[next] = r.priority;
                        }
                        next++;
                } else if (op == 2 && nlive) {
                        int k = rand() % nlive;
                        assert_int_equal(gp_sched_remove(s, live[k]), 0);
                        live[k] = live[--nlive];
                } else if (op == 3 && step % 97 == 0) {
                        /* a runtime change of settings (a time rule) */
                        tenant(s, "d", 1 + rand() % 4, rand() % 2 ? "internal" : "external", rand() % 6,
                               (rand() % 8) * 1000, 0, 0);
                }
                run(s, now, &o);
                for (size_t i = 0; i < o.n; i++) {
                        const gp_sched_decision *d = &o.d[i];
                        ps.hash = (ps.hash ^ (uint64_t)(d->id * 4 + d->kind)) * 1099511628211ULL;
                        for (int j = 0; j < d->n_gpus; j++)
                                ps.hash = (ps.hash ^ d->gpus[j]) * 1099511628211ULL;
                        if (d->kind == GP_DECIDE_START) {
                                ps.starts++;
                                started[d->id] = now;
                                borrowing[d->id] = d->borrowing;
                                assert_false(d->borrowing && preemptible[d->id]);
                                ps.borrows += d->borrowing;
                                continue;
                        }
                        if (d->kind != GP_DECIDE_PREEMPT)
                                continue;
                        ps.preempts++;
                        /* the task it makes room for starts in the same run, after it */
                        const gp_sched_decision *w = NULL;
                        for (size_t j = i + 1; j < o.n && !w; j++)
                                if (o.d[j].kind == GP_DECIDE_START)
                                        w = &o.d[j];
                        assert_non_null(w);
                        /* preemptible, or borrowing others' guarantees (then only
                         * reclaimed by a tenant with a guarantee) */
                        assert_true(preemptible[d->id] || borrowing[d->id]);
                        if (!preemptible[d->id]) {
                                int wt0 = (int)tenant_of[w->id];
                                assert_true(wt0 == 0 || wt0 == 1 || wt0 == 2 || wt0 == 4);
                                ps.reclaimed_borrowers++;
                        }
                        assert_true(now - started[d->id] >= 5 * SEC);
                        assert_true(started[d->id] < now);
                        /* less urgent, or reclaim by a tenant with a guarantee */
                        int wt = (int)tenant_of[w->id];
                        assert_true(prio[d->id] > prio[w->id] || wt == 0 || wt == 1 || wt == 2 || wt == 4);
                        /* never back and forth: v never preempted w before */
                        if (pairs[d->id / 8][w->id / 8])
                                for (int k = 0; k < npairs; k++)
                                        assert_false(pair_w[k] == d->id && pair_v[k] == w->id);
                        assert_true(npairs < PMAX * 4);
                        pair_w[npairs] = w->id;
                        pair_v[npairs++] = d->id;
                        pairs[w->id / 8][d->id / 8] = 1;
                }
                /* quotas hold after every run; books balance */
                int run_cnt[6] = {0};
                int64_t run_milli[6] = {0};
                for (int k = 0; k < nlive; k++) {
                        gp_sched_task_view v;
                        assert_int_equal(gp_sched_task_get(s, live[k], &v), 0);
                        if (v.running) {
                                run_cnt[tenant_of[live[k]]]++;
                                run_milli[tenant_of[live[k]]] += v.gpus_milli;
                        }
                }
                for (int ti = 0; ti < 6; ti++) {
                        gp_sched_tenant_view u;
                        if (gp_sched_tenant_usage(s, PNAMES[ti], now, &u) < 0)
                                continue;
                        assert_int_equal(u.running, run_cnt[ti]);
                        assert_int_equal(u.gpus_milli, run_milli[ti]);
                }
                assert_true(usage(s, "a", now).running <= 6 || step == 0);
                assert_true(usage(s, "a", now).gpus_milli <= 8000);
                for (uint32_t g = 0; g < gp_sched_gpu_count(s); g++) {
                        gp_sched_gpu_view v;
                        gp_sched_gpu_get(s, g, &v);
                        assert_true(v.memory_allocated_mb <= v.memory_usable_mb);
                        if (v.exclusive_held)
                                assert_int_equal(v.ntasks, 1);
                }
        }
        gp_sched_stats stt;
        gp_sched_get_stats(s, &stt);
        assert_int_equal(stt.queued_total + stt.running, (size_t)nlive);
        assert_int_equal(stt.total_preempted, (uint64_t)ps.preempts);
        free(o.d);
        gp_sched_free(s);
        return ps;
}

static void test_random_workloads_preempt_boundedly_without_back_and_forth(void **st) {
        (void)st;
        static const gp_sched_policy pol[] = {GP_SCHED_HYBRID, GP_SCHED_STRICT, GP_SCHED_FIFO};
        for (int p = 0; p < 3; p++) {
                for (unsigned seed = 1; seed <= 3; seed++) {
                        prop_stats a = random_workload(pol[p], seed, 3000);
                        /* preemption happens, and stays well below the starts */
                        assert_true(a.preempts > 0);
                        assert_true(a.preempts * 2 <= a.starts);
                        /* deterministic: the same inputs give the same decisions */
                        prop_stats b = random_workload(pol[p], seed, 3000);
                        assert_int_equal(a.starts, b.starts);
                        assert_int_equal(a.preempts, b.preempts);
                        assert_true(a.hash == b.hash);
                        assert_int_equal(a.borrows, b.borrows);
                        print_message("policy %d seed %u: %d starts (%d borrowing), %d preemptions (%d of "
                                      "borrowers)\n",
                                      (int)pol[p], seed, a.starts, a.borrows, a.preempts, a.reclaimed_borrowers);
                }
        }
}

/* gp_sched_run_idle, as gpupool simulate uses it: twin schedulers get the
 * same random whole-GPU workload (tenants of different weights, ticks with
 * nothing new, ends, preemptible tasks); A runs at every step, B leaves out
 * the runs gp_sched_run_idle calls idle.  Every run left out must be one
 * where A decided nothing, and B must decide exactly what A decides. */
static void twin_replay(gp_sched_policy policy, bool preemption, bool timeouts, unsigned seed, int *skipped,
                        int *skipped_free) {
        gp_sched *sc[2];
        for (int k = 0; k < 2; k++) {
                gp_sched_config c;
                gp_sched_config_defaults(&c);
                c.policy = policy;
                c.preemption = preemption;
                c.las_preempt = preemption;
                c.preempt_min_runtime_ms = 30 * SEC;
                c.las_min_run_ms = 30 * SEC;
                c.fairshare_half_life_ms = 600 * SEC; /* decay within the test's span */
                assert_int_equal(gp_sched_new(&c, &sc[k]), 0);
                add_node(sc[k], "a", 4);
                add_node(sc[k], "b", 4);
                tenant(sc[k], "t1", 1, NULL, 0, 0, 0, 0);
                tenant(sc[k], "t2", 2, NULL, 0, 0, 0, 0);
                tenant(sc[k], "t3", 3, NULL, 0, 0, 0, 0);
        }
        static const char *names[] = {"t1", "t2", "t3"};
        run_out o[2] = {{0}};
        srand(seed);
        int64_t next = 1, now = 0, live[512];
        int nlive = 0;
        bool quiet = false;
        for (int step = 0; step < 3000; step++) {
                now += SEC * (1 + rand() % 120);
                int op = rand() % 4; /* 0: submit, 1: end, 2-3: tick */
                if (op == 0 && nlive < 500) {
                        gp_sched_req r = rq(next, names[rand() % 3], rand() % 3 ? 5 : 3, 1 + rand() % 4, 0);
                        r.preemptible = rand() % 2;
                        r.timeout_ms = timeouts && rand() % 2 ? SEC * (1 + rand() % 600) : 0;
                        for (int k = 0; k < 2; k++)
                                enq(sc[k], r);
                        live[nlive++] = next++;
                        quiet = false;
                } else if (op == 1 && nlive) {
                        int i = rand() % nlive;
                        for (int k = 0; k < 2; k++)
                                assert_int_equal(gp_sched_remove_at(sc[k], live[i], now), 0);
                        live[i] = live[--nlive];
                        quiet = false;
                }
                size_t na = run(sc[0], now, &o[0]);
                if (gp_sched_run_idle(sc[1], now, quiet)) {
                        assert_int_equal(na, 0); /* a run left out decides nothing */
                        ++*skipped;
                        gp_sched_stats st;
                        gp_sched_get_stats(sc[1], &st);
                        *skipped_free += st.gpus_busy < st.gpus_total;
                } else {
                        size_t nb = run(sc[1], now, &o[1]);
                        assert_int_equal(na, nb);
                        for (size_t i = 0; i < na; i++) {
                                assert_int_equal(o[0].d[i].kind, o[1].d[i].kind);
                                assert_int_equal(o[0].d[i].id, o[1].d[i].id);
                                assert_memory_equal(o[0].d[i].gpus, o[1].d[i].gpus,
                                                    sizeof(uint32_t) * (size_t)o[0].d[i].n_gpus);
                        }
                        quiet = nb == 0;
                }
                /* the simulator forgets tasks that ended or were preempted
                 * only through the core: drop what is no longer known */
                for (int i = 0; i < nlive;) {
                        gp_sched_task_view v;
                        if (gp_sched_task_get(sc[0], live[i], &v) < 0)
                                live[i] = live[--nlive];
                        else
                                i++;
                }
        }
        for (int k = 0; k < 2; k++) {
                free(o[k].d);
                gp_sched_free(sc[k]);
        }
}

static void test_run_idle_leaves_out_only_runs_that_decide_nothing(void **st) {
        (void)st;
        static const struct {
                gp_sched_policy policy;
                bool preemption, timeouts;
        } cases[] = {
                {GP_SCHED_HYBRID, true, false}, {GP_SCHED_HYBRID, false, false}, {GP_SCHED_STRICT, true, false},
                {GP_SCHED_FIFO, true, false},   {GP_SCHED_LAS, true, false},     {GP_SCHED_LAS, false, false},
                {GP_SCHED_HYBRID, true, true},
        };
        int total = 0, total_free = 0;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int skipped = 0, skipped_free = 0;
                twin_replay(cases[i].policy, cases[i].preemption, cases[i].timeouts, 1000 + (unsigned)i, &skipped,
                            &skipped_free);
                total += skipped;
                total_free += skipped_free;
        }
        /* both kinds of runs left out were exercised */
        assert_true(total > 1000);
        assert_true(total_free > 100);
}

static void test_run_idle_is_false_when_a_run_could_act(void **st) {
        (void)st;
        gp_sched *s = mk_cfg(GP_SCHED_HYBRID, true, 0);
        add_node(s, "a", 2);
        run_out o = {0};
        enq_pre(s, 1, "x", 9, 1);
        enq_pre(s, 2, "x", 9, 1);
        assert_false(gp_sched_run_idle(s, 0, false)); /* idle GPUs */
        assert_int_equal(run(s, 0, &o), 2);
        enq_pre(s, 3, "x", 9, 1);
        assert_true(gp_sched_run_idle(s, SEC, false)); /* every GPU held, nothing less urgent */
        enq_pre(s, 4, "y", 0, 1);
        /* a more urgent task could preempt a P9 one */
        assert_false(gp_sched_run_idle(s, 2 * SEC, false));
        assert_int_equal(run(s, 2 * SEC, &o), 2);
        assert_int_equal(count_kind(&o, GP_DECIDE_PREEMPT), 1);
        assert_int_equal(gp_sched_remove_at(s, 4, 3 * SEC), 0);
        /* a GPU is free again */
        assert_false(gp_sched_run_idle(s, 3 * SEC, false));
        free(o.d);
        gp_sched_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_run_idle_leaves_out_only_runs_that_decide_nothing),
                cmocka_unit_test(test_run_idle_is_false_when_a_run_could_act),
                cmocka_unit_test(test_max_concurrent_holds_a_tenant_without_blocking_others),
                cmocka_unit_test(test_max_gpus_counts_memory_slices_as_shares),
                cmocka_unit_test(test_quota_reasons_name_gpus_in_use_and_oversized_tasks),
                cmocka_unit_test(test_max_queued_refuses_with_edquot),
                cmocka_unit_test(test_guarantee_is_reclaimed_from_ordinary_tasks_that_borrowed_it),
                cmocka_unit_test(test_only_tasks_that_take_others_guarantees_borrow),
                cmocka_unit_test(test_restored_borrower_is_still_reclaimable),
                cmocka_unit_test(test_tenant_and_group_settings_are_checked),
                cmocka_unit_test(test_tenant_with_heavy_recent_usage_goes_second),
                cmocka_unit_test(test_weights_3_to_1_give_3_to_1_starts),
                cmocka_unit_test(test_usage_decays_by_half_every_half_life),
                cmocka_unit_test(test_queue_positions_match_fair_share_order_hybrid),
                cmocka_unit_test(test_queue_positions_match_fair_share_order_strict),
                cmocka_unit_test(test_groups_split_80_20_under_contention),
                cmocka_unit_test(test_group_borrows_idle_capacity_when_the_other_group_is_idle),
                cmocka_unit_test(test_guaranteed_tenant_is_not_held_by_its_group_share),
                cmocka_unit_test(test_waiting_task_preempts_a_less_urgent_preemptible_task),
                cmocka_unit_test(test_a_preemption_that_frees_a_group_share_reorders_the_run),
        cmocka_unit_test(test_never_preempts_non_preemptible_or_too_young_tasks),
                cmocka_unit_test(test_never_preempts_when_the_task_still_would_not_start),
                cmocka_unit_test(test_victims_are_fewest_gpus_then_least_lost_work),
                cmocka_unit_test(test_reclaim_returns_guaranteed_gpus_to_their_owner_in_one_run),
                cmocka_unit_test(test_reclaim_also_happens_behind_a_blocked_task),
                cmocka_unit_test(test_random_workloads_preempt_boundedly_without_back_and_forth),
        };
        return cmocka_run_group_tests_name("sched-tenants", tests, NULL, NULL);
}
