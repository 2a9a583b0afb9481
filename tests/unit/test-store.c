/* test-store.c - the durable store (src/store/) against real databases.
 *
 * Every generic case runs once per backend: SQLite on files in a fresh
 * mkdtemp directory per test, and PostgreSQL (in its own group) when
 * GPUPOOL_TEST_PG_URL is set (tests/pg/start-pg.sh prints one); without it
 * the PostgreSQL cases are reported as SKIPPED, never silently dropped.
 * Each PostgreSQL case runs in a fresh schema (search_path set through the
 * URL's options) that is dropped afterwards, so runs are independent.
 * Corruption is made with raw SQL through a separate connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "core/array.h"
#include "store/store.h"
#include "store/coord.h"
#include "store/idem.h"
#include "store/runs.h"

/* ---- fixture: one database per test ---- */

typedef struct fixture fixture;

typedef struct backend {
        const char *name;
        int (*setup)(fixture *fx);          /* make a fresh database, fill fx->url */
        void (*teardown)(fixture *fx);      /* remove it */
        void (*raw_exec)(fixture *fx, const char *sql); /* outside the store; asserts success */
} backend;

struct fixture {
        const backend *be;
        bool skip;                  /* backend not configured: the test calls skip() */
        char dir[PATH_MAX];         /* sqlite: temp dir */
        char db_path[PATH_MAX + 16]; /* sqlite: the database file */
        char url[PATH_MAX + 512];   /* what gp_store_open gets */
        char schema[64];            /* postgres: the per-test schema */
};

static void rm_rf(const char *dir) {
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", dir);
}

static int sqlite_setup(fixture *fx) {
        snprintf(fx->dir, sizeof(fx->dir), "/tmp/gp-test-store-XXXXXX");
        if (!mkdtemp(fx->dir))
                return -1;
        snprintf(fx->db_path, sizeof(fx->db_path), "%s/gp.db", fx->dir);
        snprintf(fx->url, sizeof(fx->url), "sqlite://%s", fx->db_path);
        return 0;
}

static void sqlite_teardown(fixture *fx) {
        if (fx->dir[0])
                rm_rf(fx->dir);
}

static void sqlite_raw_exec(fixture *fx, const char *sql) {
        sqlite3 *db = NULL;
        char *msg = NULL;
        assert_int_equal(sqlite3_open(fx->db_path, &db), SQLITE_OK);
        sqlite3_busy_timeout(db, 5000);
        int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
        if (rc != SQLITE_OK)
                fprintf(stderr, "raw sql failed: %s: %s\n", sql, msg ? msg : "?");
        sqlite3_free(msg);
        sqlite3_close(db);
        assert_int_equal(rc, SQLITE_OK);
}

static const backend sqlite_backend = {"sqlite", sqlite_setup, sqlite_teardown, sqlite_raw_exec};

/* PostgreSQL: a fresh schema per test in the database GPUPOOL_TEST_PG_URL
 * names; the store reaches it through search_path in the URL's options. */

static void quiet_notices(void *arg, const char *msg) {
        (void)arg;
        (void)msg;
}

static PGconn *pg_raw_connect(void) {
        PGconn *c = PQconnectdb(getenv("GPUPOOL_TEST_PG_URL"));
        if (PQstatus(c) != CONNECTION_OK) {
                fprintf(stderr, "cannot connect to GPUPOOL_TEST_PG_URL: %s", PQerrorMessage(c));
                PQfinish(c);
                return NULL;
        }
        PQsetNoticeProcessor(c, quiet_notices, NULL);
        /* never hang a test run on a lock */
        PQclear(PQexec(c, "SET lock_timeout = '10s'"));
        return c;
}

static int pg_exec_on(PGconn *c, const char *sql) {
        PGresult *res = PQexec(c, sql);
        ExecStatusType st = PQresultStatus(res);
        int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
        if (!ok)
                fprintf(stderr, "raw sql failed: %s: %s", sql, PQresultErrorMessage(res));
        PQclear(res);
        return ok ? 0 : -1;
}

static int pg_setup(fixture *fx) {
        static int counter;
        const char *base = getenv("GPUPOOL_TEST_PG_URL");
        char sql[256];
        if (!base || !*base) {
                fx->skip = true;
                return 0;
        }
        snprintf(fx->schema, sizeof(fx->schema), "gp_test_%d_%d", (int)getpid(), ++counter);
        PGconn *c = pg_raw_connect();
        if (!c)
                return -1;
        snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s", fx->schema, fx->schema);
        int r = pg_exec_on(c, sql);
        PQfinish(c);
        if (r < 0)
                return -1;
        /* options=-c search_path=<schema>, percent-encoded */
        snprintf(fx->url, sizeof(fx->url), "%s%coptions=-c%%20search_path%%3D%s&application_name=%s", base,
                 strchr(base, '?') ? '&' : '?', fx->schema, fx->schema);
        return 0;
}

static void pg_teardown(fixture *fx) {
        char sql[256];
        if (fx->skip || !fx->schema[0])
                return;
        PGconn *c = pg_raw_connect();
        if (!c)
                return;
        /* a failed test may have left a handle in a transaction holding
         * locks: end its session first so the drop cannot wait on it */
        snprintf(sql, sizeof(sql),
                 "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = '%s' "
                 "AND pid <> pg_backend_pid()",
                 fx->schema);
        pg_exec_on(c, sql);
        snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS %s CASCADE", fx->schema);
        pg_exec_on(c, sql);
        PQfinish(c);
}

static void pg_raw_exec(fixture *fx, const char *sql) {
        char *full = NULL;
        PGconn *c = pg_raw_connect();
        assert_non_null(c);
        assert_true(asprintf(&full, "SET search_path TO %s; %s", fx->schema, sql) > 0);
        int r = pg_exec_on(c, full);
        free(full);
        PQfinish(c);
        assert_int_equal(r, 0);
}

static const backend pg_backend = {"postgres", pg_setup, pg_teardown, pg_raw_exec};

static int fx_setup(void **state) {
        const backend *be = *state;
        fixture *fx = calloc(1, sizeof(*fx));
        if (!fx)
                return -1;
        fx->be = be;
        if (be->setup(fx) < 0) {
                free(fx);
                return -1;
        }
        *state = fx;
        return 0;
}

static int fx_teardown(void **state) {
        fixture *fx = *state;
        fx->be->teardown(fx);
        free(fx);
        return 0;
}

#define FX(state)                               \
        fixture *fx = *(state);                 \
        if (fx->skip)                           \
                skip()

static gp_store *open_store(fixture *fx) {
        gp_store *s = NULL;
        char err[512] = "";
        gp_store_options opt = {.sync_full = true, .busy_timeout_ms = 5000};
        int r = gp_store_open(fx->url, &opt, &s, err, sizeof(err));
        if (r != 0)
                fail_msg("gp_store_open(%s): %d %s", fx->be->name, r, err);
        return s;
}

/* ---- task helpers ---- */

static const gp_task_state state_cycle[] = {GP_TASK_QUEUED, GP_TASK_RUNNING, GP_TASK_SUCCEEDED,
                                            GP_TASK_FAILED, GP_TASK_CANCELLED};

/* A plain record whose fields derive from id. */
static gp_task make_task(int64_t id, const char *tenant, gp_task_state state) {
        gp_task t;
        memset(&t, 0, sizeof(t));
        t.id = id;
        snprintf(t.tenant, sizeof(t.tenant), "%s", tenant);
        snprintf(t.name, sizeof(t.name), "task-%" PRId64, id);
        t.priority = (int)(id % 10);
        t.gpu_request = 1;
        t.state = state;
        t.submitted_ms = 1700000000000 + id;
        return t;
}

/* Every field set to something other than its zero value. */
static gp_task make_full_task(int64_t id) {
        gp_task t = make_task(id, "tenant-\xc3\xbc-1", GP_TASK_RUNNING);
        snprintf(t.name, sizeof(t.name), "a \"quoted\" name, with 'both'");
        snprintf(t.model, sizeof(t.model), "deepseek-7b");
        snprintf(t.gpu_model, sizeof(t.gpu_model), "A100*");
        snprintf(t.node_selector, sizeof(t.node_selector), "ib=yes,zone=a");
        snprintf(t.user, sizeof(t.user), "alice");
        t.gpu_mem_seen = true; /* its run's GPU memory peak */
        t.gpu_mem_peak_mb = 4321;
        t.priority = 3;
        t.gpu_request = 3;
        t.memory_mb = (int64_t)1 << 40;
        t.exclusive = true;
        t.preemptible = true;
        t.borrowing = true;
        t.array_id = id > 1 ? id - 1 : id;
        t.array_index = 1999;
        t.array_limit = 50;
        t.is_lease = false;
        t.timeout_s = 3600;
        t.queue_timeout_s = 60;
        t.lease_ttl_s = 45;
        t.max_retries = 2;
        t.retries = 1;
        t.preempt_count = 4;
        t.has_exit_code = true;
        t.exit_code = -9;
        snprintf(t.reason, sizeof(t.reason), "preempted by task 7; requeued");
        t.submitted_ms = 1700000000123;
        t.started_ms = 1700000001456;
        t.finished_ms = INT64_MAX;
        t.heartbeat_ms = INT64_MIN;
        t.sup_pid = 4242;
        t.sup_start = 987654321;
        t.elastic_max_gpus = GP_MAX_GPUS;
        t.spec = strdup("{\"command\":[\"python3\",\"train.py\",\"--x=\\\"y\\\"\"],"
                        "\"env\":{\"K\":\"V \xe4\xb8\xad\"},\"workdir\":\"/data\"}");
        t.n_gpus = 3;
        t.gpus = calloc(3, sizeof(*t.gpus));
        assert_non_null(t.spec);
        assert_non_null(t.gpus);
        for (int i = 0; i < 3; i++) {
                snprintf(t.gpus[i].node, sizeof(t.gpus[i].node), "node-%d", i);
                t.gpus[i].index = 7 - i;
                snprintf(t.gpus[i].uuid, sizeof(t.gpus[i].uuid), "GPU-%08d-aaaa-bbbb-cccc-\"q\"", i);
        }
        return t;
}

static void assert_task_equal(const gp_task *a, const gp_task *b) {
        assert_int_equal(a->id, b->id);
        assert_string_equal(a->tenant, b->tenant);
        assert_string_equal(a->name, b->name);
        assert_string_equal(a->model, b->model);
        assert_string_equal(a->gpu_model, b->gpu_model);
        assert_string_equal(a->node_selector, b->node_selector);
        assert_string_equal(a->user, b->user);
        assert_int_equal(a->gpu_mem_seen, b->gpu_mem_seen);
        assert_int_equal(a->gpu_mem_seen ? a->gpu_mem_peak_mb : 0, b->gpu_mem_seen ? b->gpu_mem_peak_mb : 0);
        assert_int_equal(a->priority, b->priority);
        assert_int_equal(a->gpu_request, b->gpu_request);
        assert_int_equal(a->memory_mb, b->memory_mb);
        assert_int_equal(a->exclusive, b->exclusive);
        assert_int_equal(a->preemptible, b->preemptible);
        assert_int_equal(a->borrowing, b->borrowing);
        assert_int_equal(a->array_id, b->array_id);
        assert_int_equal(a->array_index, b->array_index);
        assert_int_equal(a->array_limit, b->array_limit);
        assert_int_equal(a->is_lease, b->is_lease);
        assert_int_equal(a->timeout_s, b->timeout_s);
        assert_int_equal(a->queue_timeout_s, b->queue_timeout_s);
        assert_int_equal(a->lease_ttl_s, b->lease_ttl_s);
        assert_int_equal(a->max_retries, b->max_retries);
        assert_int_equal(a->retries, b->retries);
        assert_int_equal(a->preempt_count, b->preempt_count);
        assert_int_equal(a->state, b->state);
        assert_int_equal(a->has_exit_code, b->has_exit_code);
        if (a->has_exit_code)
                assert_int_equal(a->exit_code, b->exit_code);
        assert_string_equal(a->reason, b->reason);
        assert_int_equal(a->submitted_ms, b->submitted_ms);
        assert_int_equal(a->started_ms, b->started_ms);
        assert_int_equal(a->finished_ms, b->finished_ms);
        assert_int_equal(a->heartbeat_ms, b->heartbeat_ms);
        assert_int_equal(a->sup_pid, b->sup_pid);
        assert_int_equal(a->sup_start, b->sup_start);
        assert_int_equal(a->elastic_max_gpus, b->elastic_max_gpus);
        if (a->spec || b->spec) {
                assert_non_null(a->spec);
                assert_non_null(b->spec);
                assert_string_equal(a->spec, b->spec);
        }
        assert_int_equal(a->n_gpus, b->n_gpus);
        if (a->n_gpus == 0) {
                assert_null(a->gpus);
                assert_null(b->gpus);
        }
        for (int i = 0; i < a->n_gpus; i++) {
                assert_string_equal(a->gpus[i].node, b->gpus[i].node);
                assert_int_equal(a->gpus[i].index, b->gpus[i].index);
                assert_string_equal(a->gpus[i].uuid, b->gpus[i].uuid);
        }
}

static void put_ok(gp_store *s, const gp_task *t) {
        int r = gp_store_task_put(s, t);
        if (r != 0)
                fail_msg("put %" PRId64 ": %d %s", t->id, r, gp_store_errmsg(s));
}

static void put_simple(gp_store *s, int64_t id, const char *tenant, gp_task_state state) {
        gp_task t = make_task(id, tenant, state);
        put_ok(s, &t);
}

static bool exists(gp_store *s, int64_t id) {
        gp_task t;
        int r = gp_store_task_get(s, id, &t);
        if (r == -ENOENT)
                return false;
        if (r != 0)
                fail_msg("get %" PRId64 ": %d %s", id, r, gp_store_errmsg(s));
        gp_task_done(&t);
        return true;
}

static int64_t max_id(gp_store *s) {
        int64_t v = -1;
        int r = gp_store_task_max_id(s, &v);
        if (r != 0)
                fail_msg("max_id: %d %s", r, gp_store_errmsg(s));
        return v;
}

/* Collects ids (and checks each record is whole) from list callbacks. */
typedef struct collect {
        int64_t ids[2048];
        int n;
        int stop_after;  /* > 0: return 7 after this many */
} collect;

static int collect_cb(const gp_task *t, void *ud) {
        collect *c = ud;
        if (c->n < (int)(sizeof(c->ids) / sizeof(c->ids[0])))
                c->ids[c->n++] = t->id;
        if (c->stop_after > 0 && c->n >= c->stop_after)
                return 7;
        return 0;
}

static int list_ids(gp_store *s, int state, const char *tenant, int64_t before, int limit, collect *c) {
        gp_task_filter f = {.state = state, .tenant = tenant, .before_id = before, .limit = limit};
        memset(c, 0, sizeof(*c));
        return gp_store_task_list(s, &f, collect_cb, c);
}

/* ---- generic cases ---- */

static void test_put_get_round_trips_every_field(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        gp_task full = make_full_task(42), got;

        put_ok(s, &full);
        assert_int_equal(gp_store_task_get(s, 42, &got), 0);
        assert_task_equal(&full, &got);
        gp_task_done(&got);

        /* strings at their longest, no exit code, no spec, no gpus */
        gp_task edge = make_task(43, "", GP_TASK_QUEUED);
        memset(edge.tenant, 't', sizeof(edge.tenant) - 1);
        memset(edge.name, 'n', sizeof(edge.name) - 1);
        memset(edge.model, 'm', sizeof(edge.model) - 1);
        memset(edge.gpu_model, 'g', sizeof(edge.gpu_model) - 1);
        memset(edge.reason, 'r', sizeof(edge.reason) - 1);
        edge.is_lease = true;
        put_ok(s, &edge);
        assert_int_equal(gp_store_task_get(s, 43, &got), 0);
        assert_task_equal(&edge, &got);
        assert_false(got.has_exit_code);
        assert_null(got.spec);
        gp_task_done(&got);

        /* and the same seen from a second handle */
        gp_store *s2 = open_store(fx);
        assert_int_equal(gp_store_task_get(s2, 42, &got), 0);
        assert_task_equal(&full, &got);
        gp_task_done(&got);
        gp_store_close(s2);

        assert_int_equal(gp_store_task_get(s, 44, &got), -ENOENT);
        gp_task_done(&full);
        gp_store_close(s);
}

static void test_second_put_replaces_the_record(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        gp_task full = make_full_task(5), got;
        collect c;

        put_simple(s, 5, "a", GP_TASK_QUEUED);
        put_ok(s, &full);
        assert_int_equal(gp_store_task_get(s, 5, &got), 0);
        assert_task_equal(&full, &got);
        gp_task_done(&got);

        /* and back: heap fields and exit code go away again */
        gp_task plain = make_task(5, "b", GP_TASK_FAILED);
        put_ok(s, &plain);
        assert_int_equal(gp_store_task_get(s, 5, &got), 0);
        assert_task_equal(&plain, &got);
        gp_task_done(&got);

        assert_int_equal(list_ids(s, -1, NULL, 0, 1000, &c), 0);
        assert_int_equal(c.n, 1);
        gp_task_done(&full);
        gp_store_close(s);
}

static const char *tenant_of(int64_t id) {
        static const char *const t[] = {"a", "b", "c"};
        return t[id % 3];
}

static gp_task_state state_of(int64_t id) {
        return state_cycle[(id / 2) % 5];
}

static void fill_30(gp_store *s) {
        assert_int_equal(gp_store_begin(s), 0);
        for (int64_t id = 1; id <= 30; id++)
                put_simple(s, id, tenant_of(id), state_of(id));
        assert_int_equal(gp_store_commit(s), 0);
}

/* Expected ids, newest first, matching a filter. */
static int expect_ids(int state, const char *tenant, int64_t before, int limit, int64_t *out) {
        int n = 0;
        for (int64_t id = 30; id >= 1 && n < limit; id--) {
                if (before > 0 && id >= before)
                        continue;
                if (state >= 0 && (int)state_of(id) != state)
                        continue;
                if (tenant && strcmp(tenant, tenant_of(id)) != 0)
                        continue;
                out[n++] = id;
        }
        return n;
}

static void check_list(gp_store *s, int state, const char *tenant, int64_t before, int limit) {
        int64_t want[64];
        collect c;
        int n = expect_ids(state, tenant, before, limit, want);
        int r = list_ids(s, state, tenant, before, limit, &c);
        if (r != 0)
                fail_msg("list: %d %s", r, gp_store_errmsg(s));
        assert_int_equal(c.n, n);
        for (int i = 0; i < n; i++)
                assert_int_equal(c.ids[i], want[i]);
}

static void test_list_is_newest_first_and_filters(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        fill_30(s);

        check_list(s, -1, NULL, 0, 1000);
        for (int st = 0; st < GP_TASK_STATE_COUNT; st++)
                check_list(s, st, NULL, 0, 1000);
        check_list(s, -1, "a", 0, 1000);
        check_list(s, -1, "b", 0, 3);
        check_list(s, -1, "nobody", 0, 1000);
        check_list(s, GP_TASK_RUNNING, "c", 0, 1000);
        check_list(s, GP_TASK_QUEUED, "a", 20, 1000);
        check_list(s, -1, NULL, 0, 1);
        check_list(s, -1, NULL, 11, 5);
        check_list(s, -1, NULL, 1, 5); /* nothing below id 1 */

        collect c;
        assert_int_equal(list_ids(s, -1, NULL, 0, 30, &c), 0);
        assert_int_equal(c.n, 30);
        assert_int_equal(c.ids[0], 30);
        assert_int_equal(c.ids[29], 1);
        gp_store_close(s);
}

static void test_list_pages_by_before_id(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        fill_30(s);
        int64_t all[64];
        int n_all = expect_ids(-1, "a", 0, 1000, all), seen = 0, pages = 0;
        int64_t before = 0;
        for (;;) {
                collect c;
                assert_int_equal(list_ids(s, -1, "a", before, 3, &c), 0);
                if (c.n == 0)
                        break;
                assert_true(c.n <= 3);
                for (int i = 0; i < c.n; i++)
                        assert_int_equal(c.ids[i], all[seen++]);
                before = c.ids[c.n - 1];
                pages++;
        }
        assert_int_equal(seen, n_all);
        assert_int_equal(pages, (n_all + 2) / 3);
        gp_store_close(s);
}

static void test_list_rejects_bad_limits_and_honours_stop(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        collect c;
        fill_30(s);
        assert_int_equal(list_ids(s, -1, NULL, 0, 0, &c), -EINVAL);
        assert_non_null(strstr(gp_store_errmsg(s), "limit"));
        assert_int_equal(list_ids(s, -1, NULL, 0, 1001, &c), -EINVAL);
        assert_int_equal(list_ids(s, -1, NULL, 0, -5, &c), -EINVAL);
        assert_int_equal(list_ids(s, GP_TASK_STATE_COUNT, NULL, 0, 10, &c), -EINVAL);
        assert_int_equal(c.n, 0);

        memset(&c, 0, sizeof(c));
        c.stop_after = 3;
        gp_task_filter f = {.state = -1, .limit = 1000};
        assert_int_equal(gp_store_task_list(s, &f, collect_cb, &c), 7);
        assert_int_equal(c.n, 3);
        /* the handle is fine afterwards */
        check_list(s, -1, NULL, 0, 1000);
        gp_store_close(s);
}

static void test_load_active_returns_queued_and_running_oldest_first(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        collect c;
        fill_30(s);
        memset(&c, 0, sizeof(c));
        assert_int_equal(gp_store_task_load_active(s, collect_cb, &c), 0);
        int n = 0;
        for (int64_t id = 1; id <= 30; id++) {
                gp_task_state st = state_of(id);
                if (st != GP_TASK_QUEUED && st != GP_TASK_RUNNING)
                        continue;
                assert_true(n < c.n);
                assert_int_equal(c.ids[n], id);
                n++;
        }
        assert_int_equal(c.n, n);
        assert_true(n > 0 && n < 30);
        gp_store_close(s);
}

static void test_rollback_of_1000_puts_leaves_nothing(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        assert_int_equal(gp_store_begin(s), 0);
        for (int64_t id = 2; id <= 1001; id++) {
                gp_task t = make_full_task(id);
                put_ok(s, &t);
                gp_task_done(&t);
        }
        put_simple(s, 1, "changed", GP_TASK_FAILED);
        assert_true(exists(s, 500)); /* the transaction sees its own writes */
        assert_int_equal(gp_store_rollback(s), 0);
        assert_int_equal(max_id(s), 1);
        assert_false(exists(s, 2));
        assert_false(exists(s, 1001));
        gp_task got;
        assert_int_equal(gp_store_task_get(s, 1, &got), 0);
        assert_string_equal(got.tenant, "a");
        assert_int_equal(got.state, GP_TASK_QUEUED);
        gp_task_done(&got);
        gp_store_close(s);

        s = open_store(fx);
        assert_int_equal(max_id(s), 1);
        /* rollback outside a transaction is a harmless no-op */
        assert_int_equal(gp_store_rollback(s), 0);
        gp_store_close(s);
}

static void test_commit_is_seen_after_close_and_reopen(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        assert_int_equal(max_id(s), 0);
        assert_int_equal(gp_store_begin(s), 0);
        for (int64_t id = 1; id <= 100; id++)
                put_simple(s, id, tenant_of(id), state_of(id));
        assert_int_equal(gp_store_commit(s), 0);
        put_simple(s, 101, "solo", GP_TASK_QUEUED); /* outside a transaction */
        gp_store_close(s);

        gp_store *s2 = open_store(fx);
        assert_int_equal(max_id(s2), 101);
        for (int64_t id = 1; id <= 101; id++)
                assert_true(exists(s2, id));
        collect c;
        assert_int_equal(list_ids(s2, -1, NULL, 0, 1000, &c), 0);
        assert_int_equal(c.n, 101);
        gp_store_close(s2);
}

/* With manual_checkpoint a writer's commits only grow the WAL; a
 * checkpoint from another handle copies it into the database, without
 * losing or hiding anything, and refuses to run inside a transaction. */
static void test_manual_checkpoint_moves_the_wal_without_losing_rows(void **state) {
        FX(state);
        gp_store *w = NULL, *c = NULL;
        char err[512] = "";
        gp_store_options opt = {.sync_full = true, .busy_timeout_ms = 5000, .manual_checkpoint = true};
        assert_int_equal(gp_store_open(fx->url, &opt, &w, err, sizeof(err)), 0);
        assert_int_equal(gp_store_open(fx->url, &opt, &c, err, sizeof(err)), 0);
        for (int64_t id = 1; id <= 300; id++) {
                assert_int_equal(gp_store_begin(w), 0);
                put_simple(w, id, tenant_of(id), state_of(id));
                assert_int_equal(gp_store_commit(w), 0);
        }
        int pages = -1;
        assert_int_equal(gp_store_checkpoint(c, &pages), 0);
        if (!strcmp(fx->be->name, "sqlite"))
                assert_true(pages > 0); /* nothing checkpointed on the commits' path */
        else
                assert_int_equal(pages, 0);
        assert_int_equal(gp_store_begin(c), 0);
        assert_int_not_equal(gp_store_checkpoint(c, NULL), 0);
        assert_int_equal(gp_store_rollback(c), 0);
        gp_store_close(w);
        gp_store_close(c);
        gp_store *r = open_store(fx);
        assert_int_equal(max_id(r), 300);
        for (int64_t id = 1; id <= 300; id++)
                assert_true(exists(r, id));
        gp_store_close(r);
}

static void test_reader_sees_committed_rows_but_not_the_open_transaction(void **state) {
        FX(state);
        gp_store *w = open_store(fx), *r = open_store(fx);
        collect c;

        assert_int_equal(gp_store_begin(w), 0);
        for (int64_t id = 1; id <= 10; id++)
                put_simple(w, id, "a", GP_TASK_QUEUED);
        assert_int_equal(gp_store_commit(w), 0);

        assert_int_equal(gp_store_begin(w), 0);
        for (int64_t id = 11; id <= 20; id++)
                put_simple(w, id, "a", GP_TASK_QUEUED);
        put_simple(w, 3, "a", GP_TASK_RUNNING);

        /* while the writer's transaction is open */
        assert_int_equal(max_id(r), 10);
        assert_true(exists(r, 5));
        assert_false(exists(r, 15));
        assert_int_equal(list_ids(r, -1, NULL, 0, 1000, &c), 0);
        assert_int_equal(c.n, 10);
        assert_int_equal(list_ids(r, GP_TASK_RUNNING, NULL, 0, 1000, &c), 0);
        assert_int_equal(c.n, 0);
        memset(&c, 0, sizeof(c));
        assert_int_equal(gp_store_task_load_active(r, collect_cb, &c), 0);
        assert_int_equal(c.n, 10);

        assert_int_equal(gp_store_commit(w), 0);
        assert_int_equal(max_id(r), 20);
        assert_true(exists(r, 15));
        assert_int_equal(list_ids(r, GP_TASK_RUNNING, NULL, 0, 1000, &c), 0);
        assert_int_equal(c.n, 1);
        assert_int_equal(c.ids[0], 3);
        gp_store_close(r);
        gp_store_close(w);
}

static void test_list_by_array_gives_its_elements_newest_first(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        assert_int_equal(gp_store_begin(s), 0);
        for (int64_t id = 1; id <= 9; id++) {
                gp_task t = make_task(id, id % 2 ? "a" : "b", GP_TASK_QUEUED);
                if (id >= 3 && id <= 7) { /* array 3: indices 10, 12, .. 18 */
                        t.array_id = 3;
                        t.array_index = (int)(10 + 2 * (id - 3));
                        t.array_limit = 2;
                }
                put_ok(s, &t);
                gp_task_done(&t);
        }
        assert_int_equal(gp_store_commit(s), 0);
        collect c = {0};
        gp_task_filter f = {.state = -1, .limit = 1000, .array_id = 3};
        assert_int_equal(gp_store_task_list(s, &f, collect_cb, &c), 0);
        int64_t want[] = {7, 6, 5, 4, 3};
        assert_int_equal(c.n, 5);
        assert_memory_equal(c.ids, want, sizeof(want));
        /* paged; state and tenant do not narrow an array listing */
        memset(&c, 0, sizeof(c));
        gp_task_filter f2 = {.state = GP_TASK_RUNNING, .tenant = "zz", .limit = 2, .array_id = 3, .before_id = 6};
        assert_int_equal(gp_store_task_list(s, &f2, collect_cb, &c), 0);
        assert_int_equal(c.n, 2);
        assert_int_equal(c.ids[0], 5);
        assert_int_equal(c.ids[1], 4);
        memset(&c, 0, sizeof(c));
        gp_task_filter none = {.state = -1, .limit = 10, .array_id = 99};
        assert_int_equal(gp_store_task_list(s, &none, collect_cb, &c), 0);
        assert_int_equal(c.n, 0);
        gp_store_close(s);
}

static void test_meta_set_get_and_missing_key(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        char buf[64];

        assert_int_equal(gp_store_meta_get(s, "next_id", buf, sizeof(buf)), -ENOENT);
        assert_int_equal(gp_store_meta_set(s, "next_id", "1234"), 0);
        assert_int_equal(gp_store_meta_get(s, "next_id", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "1234");
        assert_int_equal(gp_store_meta_set(s, "next_id", "99999"), 0);
        assert_int_equal(gp_store_meta_get(s, "next_id", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "99999");
        assert_int_equal(gp_store_meta_set(s, "empty", ""), 0);
        assert_int_equal(gp_store_meta_get(s, "empty", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "");

        /* exactly fitting, and one byte too long */
        assert_int_equal(gp_store_meta_get(s, "next_id", buf, 6), 0);
        assert_int_equal(gp_store_meta_get(s, "next_id", buf, 5), -E2BIG);

        /* the store's own key is readable but reserved */
        assert_int_equal(gp_store_meta_get(s, "schema_version", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "8");
        assert_int_equal(gp_store_meta_set(s, "schema_version", "9"), -EINVAL);
        assert_int_equal(gp_store_meta_set(s, "", "x"), -EINVAL);

        /* inside a rolled-back transaction nothing sticks */
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_meta_set(s, "next_id", "1"), 0);
        assert_int_equal(gp_store_rollback(s), 0);
        gp_store_close(s);

        s = open_store(fx);
        assert_int_equal(gp_store_meta_get(s, "next_id", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "99999");
        gp_store_close(s);
}

/* Corrupt one column of row id with raw SQL, then check every reader
 * reports -GP_ESTORE naming the column. */
static void expect_corrupt(fixture *fx, gp_store *s, int64_t id, const char *column) {
        gp_task t;
        collect c;
        int r = gp_store_task_get(s, id, &t);
        if (r != -GP_ESTORE)
                fail_msg("get of corrupt row %" PRId64 " (%s): %d", id, column, r);
        if (!strstr(gp_store_errmsg(s), column))
                fail_msg("message \"%s\" does not name %s", gp_store_errmsg(s), column);
        assert_int_equal(list_ids(s, -1, NULL, 0, 1000, &c), -GP_ESTORE);
}

static void test_corrupt_rows_are_reported_not_crashed_on(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        static char sql[72 * 1024];
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        gp_task full = make_full_task(2);
        put_ok(s, &full);
        gp_task_done(&full);

        /* one corruption at a time, repaired before the next */
        static const struct {
                const char *column;
                const char *bad;
        } cases[] = {
                {"state", "'bogus'"},
                {"state", "'queued-but-much-longer-than-any-state-name'"},
                {"state", "'Queued'"},
                {"gpus", "'not json'"},
                {"gpus", "'{\"node\":\"x\"}'"},
                {"gpus", "'[{\"node\":\"n\",\"index\":-1,\"uuid\":\"u\"}]'"},
                {"gpus", "'[{\"node\":\"n\",\"index\":1}]'"},
                {"tenant", NULL}, /* 300 bytes: filled below */
                {"reason", NULL},
                {"gpus", NULL},   /* GP_MAX_GPUS + 1 entries */
                {"gpus", NULL},   /* node too long */
                {"priority", "1099511627776"},
                {"exclusive", "2"},
                {"exit_code", "-1099511627776"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                static char big[64 * 1024];
                const char *bad = cases[i].bad;
                if (!bad && (strcmp(cases[i].column, "tenant") == 0 || strcmp(cases[i].column, "reason") == 0)) {
                        memset(big, 'x', 300);
                        big[0] = '\'';
                        big[299] = '\'';
                        big[300] = '\0';
                        bad = big;
                } else if (!bad && i == 9) {
                        size_t n = (size_t)snprintf(big, sizeof(big), "'[");
                        for (int g = 0; g < GP_MAX_GPUS + 1; g++)
                                n += (size_t)snprintf(big + n, sizeof(big) - n,
                                                      "%s{\"node\":\"n\",\"index\":%d,\"uuid\":\"u\"}",
                                                      g ? "," : "", g);
                        snprintf(big + n, sizeof(big) - n, "]'");
                        bad = big;
                } else if (!bad) {
                        char node[100];
                        memset(node, 'n', 99);
                        node[99] = '\0';
                        snprintf(big, sizeof(big), "'[{\"node\":\"%s\",\"index\":0,\"uuid\":\"u\"}]'", node);
                        bad = big;
                }
                snprintf(sql, sizeof(sql), "UPDATE tasks SET %s = %s WHERE id = 2", cases[i].column, bad);
                fx->be->raw_exec(fx, sql);
                expect_corrupt(fx, s, 2, cases[i].column);
                /* the healthy row and the handle still work */
                assert_true(exists(s, 1));
                put_simple(s, 3, "a", GP_TASK_QUEUED);
                assert_true(exists(s, 3));
                /* repair by rewriting the record */
                full = make_full_task(2);
                put_ok(s, &full);
                gp_task_done(&full);
                assert_true(exists(s, 2));
        }

        /* load_active meets a corrupt active row too */
        fx->be->raw_exec(fx, "UPDATE tasks SET gpus = '[1,2' WHERE id = 2");
        collect c;
        memset(&c, 0, sizeof(c));
        assert_int_equal(gp_store_task_load_active(s, collect_cb, &c), -GP_ESTORE);
        assert_non_null(strstr(gp_store_errmsg(s), "gpus"));
        gp_store_close(s);
}

static void test_failed_commit_stores_nothing_and_handle_stays_usable(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        put_simple(s, 1, "a", GP_TASK_QUEUED);

        assert_int_equal(gp_store_begin(s), 0);
        for (int64_t id = 2; id <= 65; id++)
                put_simple(s, id, "a", GP_TASK_QUEUED);
        put_simple(s, 1, "a", GP_TASK_SUCCEEDED);
        assert_int_equal(gp_store_meta_set(s, "k", "v"), 0);
        gp_store_fail_after(s, 1);
        assert_int_equal(gp_store_commit(s), -GP_ESTORE);
        assert_non_null(strstr(gp_store_errmsg(s), "injected fault"));
        assert_non_null(strstr(gp_store_errmsg(s), "commit"));

        /* nothing of the batch, seen from this handle and from a fresh one */
        assert_int_equal(max_id(s), 1);
        gp_store *s2 = open_store(fx);
        assert_int_equal(max_id(s2), 1);
        gp_task got;
        assert_int_equal(gp_store_task_get(s2, 1, &got), 0);
        assert_int_equal(got.state, GP_TASK_QUEUED);
        gp_task_done(&got);
        char buf[8];
        assert_int_equal(gp_store_meta_get(s2, "k", buf, sizeof(buf)), -ENOENT);
        gp_store_close(s2);

        /* the handle is outside any transaction and works */
        assert_int_equal(gp_store_rollback(s), 0);
        assert_int_equal(gp_store_begin(s), 0);
        put_simple(s, 2, "a", GP_TASK_QUEUED);
        assert_int_equal(gp_store_commit(s), 0);
        assert_int_equal(max_id(s), 2);
        gp_store_close(s);
}

static void test_failed_put_dooms_the_transaction(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        assert_int_equal(gp_store_begin(s), 0);
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        gp_store_fail_after(s, 2);
        put_simple(s, 2, "a", GP_TASK_QUEUED);
        gp_task t = make_task(3, "a", GP_TASK_QUEUED);
        assert_int_equal(gp_store_task_put(s, &t), -GP_ESTORE);
        /* further work in the doomed transaction is refused */
        t.id = 4;
        assert_int_equal(gp_store_task_put(s, &t), -GP_ESTORE);
        assert_int_equal(gp_store_commit(s), -GP_ESTORE);
        assert_non_null(strstr(gp_store_errmsg(s), "rolled back"));
        assert_int_equal(max_id(s), 0);
        /* and the handle recovers */
        put_simple(s, 5, "a", GP_TASK_QUEUED);
        assert_int_equal(max_id(s), 5);
        gp_store_close(s);
}

/* Make the n-th statement of a batch fail for every n: the batch is either
 * entirely stored or not at all, and the handle keeps working. */
static void test_fault_at_every_step_is_all_or_nothing(void **state) {
        FX(state);
        bool saw_success = false;
        for (int n = 1; n <= 12 && !saw_success; n++) {
                gp_store *s = open_store(fx);
                int64_t base = 100 * n;
                gp_store_fail_after(s, n);
                int r = gp_store_begin(s);
                for (int64_t id = base; r == 0 && id < base + 5; id++) {
                        gp_task t = make_full_task(id);
                        r = gp_store_task_put(s, &t);
                        gp_task_done(&t);
                }
                if (r == 0)
                        r = gp_store_meta_set(s, "batch", "x");
                if (r == 0)
                        r = gp_store_commit(s);
                else
                        assert_int_equal(gp_store_rollback(s), 0);
                gp_store_fail_after(s, 0);
                if (r == 0)
                        saw_success = true;
                else
                        assert_int_equal(r, -GP_ESTORE);

                gp_store *check = open_store(fx);
                int stored = 0;
                for (int64_t id = base; id < base + 5; id++)
                        stored += exists(check, id);
                assert_int_equal(stored, r == 0 ? 5 : 0);
                gp_store_close(check);

                put_simple(s, base + 50, "after", GP_TASK_QUEUED);
                assert_true(exists(s, base + 50));
                gp_store_close(s);
        }
        assert_true(saw_success); /* the walk reached past the last statement */
}

static void test_invalid_record_is_refused_and_nothing_written(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        gp_task t = make_task(9, "a", GP_TASK_RUNNING);
        gp_task_gpu gpus[GP_MAX_GPUS + 1];
        memset(gpus, 0, sizeof(gpus));
        t.n_gpus = GP_MAX_GPUS + 1;
        t.gpus = gpus;
        assert_int_equal(gp_store_task_put(s, &t), -EINVAL);
        assert_non_null(strstr(gp_store_errmsg(s), "n_gpus"));
        t.n_gpus = 0;
        t.gpus = NULL;
        t.state = GP_TASK_STATE_COUNT;
        assert_int_equal(gp_store_task_put(s, &t), -EINVAL);
        t.state = GP_TASK_QUEUED;
        memset(t.tenant, 'x', sizeof(t.tenant)); /* no NUL */
        assert_int_equal(gp_store_task_put(s, &t), -EINVAL);
        assert_int_equal(max_id(s), 0);

        /* a refused record does not doom the transaction it was in */
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_task_put(s, &t), -EINVAL);
        put_simple(s, 10, "a", GP_TASK_QUEUED);
        assert_int_equal(gp_store_commit(s), 0);
        assert_int_equal(max_id(s), 10);
        gp_store_close(s);
}

static int reenter_cb(const gp_task *t, void *ud) {
        gp_store *s = ud;
        gp_task got;
        return gp_store_task_get(s, t->id, &got);
}

static void test_callback_cannot_reenter_the_handle(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        gp_task_filter f = {.state = -1, .limit = 10};
        assert_int_equal(gp_store_task_list(s, &f, reenter_cb, s), -EBUSY);
        assert_int_equal(gp_store_task_load_active(s, reenter_cb, s), -EBUSY);
        assert_true(exists(s, 1));
        gp_store_close(s);
}

static void test_transaction_misuse_is_reported(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        assert_int_equal(gp_store_commit(s), -GP_ESTORE);
        assert_non_null(strstr(gp_store_errmsg(s), "no transaction"));
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_begin(s), -GP_ESTORE);
        /* a misuse does not doom the open transaction */
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        assert_int_equal(gp_store_commit(s), 0);
        assert_int_equal(max_id(s), 1);
        gp_store_close(s);
}

static void test_newer_schema_version_is_refused(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        gp_store_close(s);
        fx->be->raw_exec(fx, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
        char err[512] = "";
        assert_int_equal(gp_store_open(fx->url, NULL, &s, err, sizeof(err)), -GP_ESTORE);
        assert_non_null(strstr(err, "newer"));
}

/* ---- SQLite-only cases ---- */

static void test_sqlite_bad_urls_are_einval_with_message(void **state) {
        gp_store *s = NULL;
        char err[256];
        const char *bad[] = {"mysql://x", "sqlite://", "", "sqlite:/x.db", "/plain/path.db"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                err[0] = '\0';
                assert_int_equal(gp_store_open(bad[i], NULL, &s, err, sizeof(err)), -EINVAL);
                assert_true(strlen(err) > 10);
        }
        assert_int_equal(gp_store_open("mysql://user:secret@h/db", NULL, &s, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "mysql"));
        assert_null(strstr(err, "secret"));
        assert_int_equal(gp_store_open(NULL, NULL, &s, err, sizeof(err)), -EINVAL);
        gp_store_close(NULL);
}

static void test_sqlite_creates_missing_parent_directories(void **state) {
        FX(state);
        char url[PATH_MAX + 64], path[PATH_MAX + 64];
        struct stat sb;
        snprintf(url, sizeof(url), "sqlite://%s/a/b/c/gp.db", fx->dir);
        snprintf(path, sizeof(path), "%s/a/b/c/gp.db", fx->dir);
        gp_store *s = NULL;
        char err[256];
        assert_int_equal(gp_store_open(url, NULL, &s, err, sizeof(err)), 0);
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        gp_store_close(s);
        assert_int_equal(stat(path, &sb), 0);

        /* relative to the working directory */
        char cwd[PATH_MAX];
        assert_non_null(getcwd(cwd, sizeof(cwd)));
        assert_int_equal(chdir(fx->dir), 0);
        int r = gp_store_open("sqlite://./rel-data/x.db", NULL, &s, err, sizeof(err));
        int st = stat("rel-data/x.db", &sb);
        assert_int_equal(chdir(cwd), 0);
        assert_int_equal(r, 0);
        assert_int_equal(st, 0);
        gp_store_close(s);
}

static void test_sqlite_unusable_files_are_estore_with_message(void **state) {
        FX(state);
        char path[PATH_MAX + 64], url[PATH_MAX + 80], err[512];
        gp_store *s = NULL;

        /* a regular file where a directory must be */
        snprintf(path, sizeof(path), "%s/file", fx->dir);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("this is not a database, it is a text file long enough to have a header\n", f);
        fclose(f);
        snprintf(url, sizeof(url), "sqlite://%s/file/sub.db", fx->dir);
        assert_int_equal(gp_store_open(url, NULL, &s, err, sizeof(err)), -GP_ESTORE);
        assert_true(strlen(err) > 10);

        /* a file that is not a database */
        snprintf(url, sizeof(url), "sqlite://%s", path);
        err[0] = '\0';
        assert_int_equal(gp_store_open(url, NULL, &s, err, sizeof(err)), -GP_ESTORE);
        assert_non_null(strstr(err, "not a database"));
}

static void test_sqlite_text_in_integer_column_is_reported(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        fx->be->raw_exec(fx, "UPDATE tasks SET memory_mb = 'lots' WHERE id = 1");
        gp_task t;
        assert_int_equal(gp_store_task_get(s, 1, &t), -GP_ESTORE);
        assert_non_null(strstr(gp_store_errmsg(s), "memory_mb"));
        fx->be->raw_exec(fx, "UPDATE tasks SET memory_mb = 0, name = x'00ff' WHERE id = 1");
        assert_int_equal(gp_store_task_get(s, 1, &t), -GP_ESTORE);
        assert_non_null(strstr(gp_store_errmsg(s), "name"));
        gp_store_close(s);
}

static void test_sqlite_normal_sync_store_works(void **state) {
        FX(state);
        gp_store *s = NULL;
        char err[256];
        gp_store_options opt = {.sync_full = false};
        assert_int_equal(gp_store_open(fx->url, &opt, &s, err, sizeof(err)), 0);
        assert_int_equal(gp_store_begin(s), 0);
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        assert_int_equal(gp_store_commit(s), 0);
        gp_store_close(s);
        s = open_store(fx);
        assert_true(exists(s, 1));
        gp_store_close(s);
}

/* A database on a full disk (a 2 MiB tmpfs, as root): the commit fails,
 * gp_store_full says why (and an ordinary failure does not), nothing is
 * stored, and once space is back the same handle stores again. */
static void test_sqlite_full_disk_is_told_apart_and_the_handle_recovers(void **state) {
        FX(state);
        if (geteuid() != 0)
                skip(); /* mounting a tmpfs needs root */
        char cmd[PATH_MAX + 64];
        snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=2m tmpfs '%s' 2>/dev/null", fx->dir);
        if (system(cmd) != 0)
                skip();
        gp_store *s = open_store(fx);
        char filler[PATH_MAX + 16];
        snprintf(filler, sizeof(filler), "%s/filler", fx->dir);
        FILE *f = fopen(filler, "w");
        assert_non_null(f);
        static char chunk[4096];
        while (fwrite(chunk, 1, sizeof(chunk), f) == sizeof(chunk) && fflush(f) == 0)
                ;
        fclose(f);
        char *spec = malloc(512 << 10);
        assert_non_null(spec);
        memset(spec, 'x', (512 << 10) - 1);
        spec[(512 << 10) - 1] = '\0';
        gp_task t = make_task(1, "a", GP_TASK_QUEUED);
        t.spec = spec;
        int rc = gp_store_begin(s);
        if (rc == 0)
                rc = gp_store_task_put(s, &t);
        if (rc == 0)
                rc = gp_store_commit(s);
        else
                gp_store_rollback(s);
        assert_int_equal(rc, -GP_ESTORE);
        assert_true(gp_store_full(s));
        gp_store_fail_after(s, 1); /* an ordinary failure is not "full" */
        assert_int_equal(gp_store_begin(s), -GP_ESTORE);
        assert_false(gp_store_full(s));
        assert_int_equal(unlink(filler), 0);
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_task_put(s, &t), 0);
        assert_int_equal(gp_store_commit(s), 0);
        assert_false(gp_store_full(s));
        gp_task got;
        assert_int_equal(gp_store_task_get(s, 1, &got), 0);
        assert_int_equal(strlen(got.spec), (512 << 10) - 1);
        gp_task_done(&got);
        free(spec);
        gp_store_close(s);
        snprintf(cmd, sizeof(cmd), "umount '%s'", fx->dir);
        assert_int_equal(system(cmd), 0);
}

/* ---- PostgreSQL-only cases ---- */

static gp_bill_segment make_seg(int64_t task, const char *tenant, int64_t start, int64_t end, int month);

/* A usage row the server refuses in a pipelined batch fails the batch and
 * the message names the task it was for. */
static void test_postgres_refused_usage_row_names_its_task(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        assert_int_equal(gp_store_begin(s), 0);
        put_simple(s, 1, "a", GP_TASK_SUCCEEDED);
        gp_bill_segment g = make_seg(77, "a", 1, 2, 202611);
        snprintf(g.gpu_model, sizeof(g.gpu_model), "bad \xff\xfe utf-8");
        int r = gp_store_usage_add(s, &g);
        if (r == 0)
                r = gp_store_commit(s);
        assert_int_equal(r, -GP_ESTORE);
        if (!strstr(gp_store_errmsg(s), "usage add (task 77)"))
                fail_msg("message \"%s\" does not name task 77", gp_store_errmsg(s));
        gp_store_rollback(s);
        assert_false(exists(s, 1));
        gp_store_close(s);
}

/* The server refuses a put (invalid UTF-8 in a UTF8 database) in the middle
 * of a pipelined batch: the batch fails as a whole, the message names the
 * task, and the handle works afterwards. */
static void test_postgres_refused_put_in_batch_fails_the_commit(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        for (int bad_at = 5; bad_at <= 300; bad_at += 295) {
                assert_int_equal(gp_store_begin(s), 0);
                for (int64_t id = 2; id <= 301; id++) {
                        gp_task t = make_task(id, "a", GP_TASK_QUEUED);
                        if (id == bad_at)
                                snprintf(t.name, sizeof(t.name), "bad \xff\xfe utf-8");
                        int r = gp_store_task_put(s, &t);
                        if (r < 0) { /* reported at a sync point inside the batch */
                                assert_int_equal(r, -GP_ESTORE);
                                break;
                        }
                }
                assert_int_equal(gp_store_commit(s), -GP_ESTORE);
                char want[32];
                snprintf(want, sizeof(want), "id %d", bad_at);
                if (!strstr(gp_store_errmsg(s), want))
                        fail_msg("message \"%s\" does not name %s", gp_store_errmsg(s), want);
                assert_int_equal(gp_store_rollback(s), 0);
                assert_int_equal(max_id(s), 1);
        }
        /* a read inside the transaction also reports the refused put */
        assert_int_equal(gp_store_begin(s), 0);
        gp_task t = make_task(2, "a", GP_TASK_QUEUED);
        snprintf(t.tenant, sizeof(t.tenant), "\xc3");
        (void)gp_store_task_put(s, &t);
        assert_int_equal(gp_store_task_max_id(s, &t.id), -GP_ESTORE);
        assert_int_equal(gp_store_commit(s), -GP_ESTORE);
        assert_int_equal(max_id(s), 1);
        put_simple(s, 2, "a", GP_TASK_QUEUED);
        assert_int_equal(max_id(s), 2);
        gp_store_close(s);
}

static void test_postgres_unreachable_server_is_estore_without_password(void **state) {
        gp_store *s = NULL;
        char err[512] = "";
        int r = gp_store_open("postgresql://gpuser:s3cret-pw@127.0.0.1:1/gp?connect_timeout=2", NULL, &s, err,
                              sizeof(err));
        assert_int_equal(r, -GP_ESTORE);
        assert_true(strlen(err) > 10);
        assert_null(strstr(err, "s3cret"));
        err[0] = '\0';
        r = gp_store_open("postgres://127.0.0.1:1/gp?connect_timeout=2", NULL, &s, err, sizeof(err));
        assert_int_equal(r, -GP_ESTORE);
        assert_non_null(strstr(err, "connect"));
}

static void test_postgres_reconnects_after_losing_the_connection(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        char sql[256];
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        snprintf(sql, sizeof(sql),
                 "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = '%s' "
                 "AND pid <> pg_backend_pid()",
                 fx->schema);
        fx->be->raw_exec(fx, sql);
        /* the call that finds the connection dead fails; the next reconnects
         * (terminate with a timeout waits until the session is gone) */
        gp_task t;
        assert_int_equal(gp_store_task_get(s, 1, &t), -GP_ESTORE);
        assert_true(exists(s, 1));
        assert_int_equal(gp_store_begin(s), 0);
        put_simple(s, 2, "a", GP_TASK_QUEUED);
        assert_int_equal(gp_store_commit(s), 0);
        assert_int_equal(max_id(s), 2);

        /* lost inside a transaction: the transaction fails as a whole */
        assert_int_equal(gp_store_begin(s), 0);
        put_simple(s, 3, "a", GP_TASK_QUEUED);
        fx->be->raw_exec(fx, sql);
        t = make_task(4, "a", GP_TASK_QUEUED);
        int r = gp_store_task_put(s, &t); /* pipelined: may only fail later */
        assert_true(r == 0 || r == -GP_ESTORE);
        /* a read must not reconnect behind the transaction's back ... */
        assert_int_equal(gp_store_task_get(s, 1, &t), -GP_ESTORE);
        /* ... so later puts cannot be stored outside it */
        t = make_task(5, "a", GP_TASK_QUEUED);
        assert_int_equal(gp_store_task_put(s, &t), -GP_ESTORE);
        assert_int_equal(gp_store_commit(s), -GP_ESTORE);
        assert_int_equal(gp_store_rollback(s), 0);
        assert_int_equal(max_id(s), 2);
        assert_false(exists(s, 5));
        gp_store_close(s);
}


/* ---- one server per store ---- */

static gp_store_owner owner(const char *host, int64_t pid, const char *listen) {
        gp_store_owner o;
        memset(&o, 0, sizeof(o));
        snprintf(o.host, sizeof(o.host), "%s", host);
        o.pid = pid;
        snprintf(o.listen, sizeof(o.listen), "%s", listen);
        o.since_ms = 1795000000000;
        return o;
}

/* A PostgreSQL session ends a moment after its client closed it: retry a
 * claim that may still meet the closed handle's lock. */
static int claim_soon(gp_store *s, const gp_store_owner *me) {
        int r = -EBUSY;
        for (int i = 0; i < 100 && r == -EBUSY; i++) {
                if ((r = gp_store_claim(s, me, NULL)) == -EBUSY)
                        usleep(50 * 1000);
        }
        return r;
}

/* The first server's claim holds until its handle closes; a second is
 * refused with who holds it, and can claim once the first is gone. */
static void test_second_claim_is_refused_naming_the_owner(void **state) {
        FX(state);
        gp_store *a = open_store(fx), *b = open_store(fx);
        gp_store_owner me = owner("host-a", 4242, "127.0.0.1:8080"), you = owner("host-b", 77, "0.0.0.0:9090");
        gp_store_owner other;
        assert_int_equal(gp_store_claim(a, &me, NULL), 0);
        assert_int_equal(gp_store_claim(a, &me, NULL), 0); /* again on the same handle: fine */
        memset(&other, 0, sizeof(other));
        assert_int_equal(gp_store_claim(b, &you, &other), -EBUSY);
        assert_string_equal(other.host, "host-a");
        assert_int_equal(other.pid, 4242);
        assert_string_equal(other.listen, "127.0.0.1:8080");
        assert_int_equal(other.since_ms, 1795000000000);
        const char *msg = gp_store_errmsg(b);
        assert_non_null(strstr(msg, "another gpupool server"));
        assert_non_null(strstr(msg, "host host-a, pid 4242, listening on 127.0.0.1:8080, since 2026-"));
        /* the refused handle still works for plain reads and writes */
        put_simple(b, 1, "t", GP_TASK_QUEUED);
        assert_true(exists(a, 1));
        /* a claim is no use inside a transaction */
        assert_int_equal(gp_store_begin(a), 0);
        assert_int_equal(gp_store_claim(a, &me, NULL), -EINVAL);
        assert_int_equal(gp_store_rollback(a), 0);
        gp_store_close(a);
        assert_int_equal(claim_soon(b, &you), 0);
        gp_store *c = open_store(fx);
        assert_int_equal(gp_store_claim(c, &me, &other), -EBUSY);
        assert_string_equal(other.host, "host-b");
        assert_int_equal(other.pid, 77);
        gp_store_close(c);
        gp_store_close(b);
}

static gp_store_idem idem_row(const char *key, int status, const char *body, int64_t created) {
        gp_store_idem r;
        memset(&r, 0, sizeof(r));
        snprintf(r.caller, sizeof(r.caller), "tenant:t");
        snprintf(r.key, sizeof(r.key), "%s", key);
        memset(r.fp, 'a', GP_IDEM_FP_LEN);
        r.status = status;
        r.body = (char *)body;
        r.created_ms = created;
        return r;
}

/* A kept answer is there exactly when its transaction committed; the
 * first answer of a key wins; bad rows are refused; pruning drops the old
 * and keeps the newest within the bound. */
static void test_idem_answers_follow_their_transaction_and_are_pruned(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        gp_store_idem a = idem_row("k1", 201, "{\"id\":1}", 1000), got;
        assert_int_equal(gp_store_idem_put(s, &a), -EINVAL); /* outside a transaction */
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_idem_put(s, &a), 0);
        assert_int_equal(gp_store_rollback(s), 0);
        assert_int_equal(gp_store_idem_get(s, "tenant:t", "k1", &got), -ENOENT);
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_idem_put(s, &a), 0);
        gp_store_idem again = idem_row("k1", 409, "{}", 2000);
        assert_int_equal(gp_store_idem_put(s, &again), 0); /* the first answer wins */
        gp_store_idem bad = idem_row("k\x01", 201, "{}", 1000);
        assert_int_equal(gp_store_idem_put(s, &bad), -EINVAL);
        assert_int_equal(gp_store_commit(s), 0);
        assert_int_equal(gp_store_idem_get(s, "tenant:t", "k1", &got), 0);
        assert_int_equal(got.status, 201);
        assert_string_equal(got.body, "{\"id\":1}");
        assert_string_equal(got.ctype, "");
        assert_int_equal(got.created_ms, 1000);
        assert_int_equal(strlen(got.fp), GP_IDEM_FP_LEN);
        free(got.body);
        assert_int_equal(gp_store_idem_get(s, "tenant:u", "k1", &got), -ENOENT); /* per caller */
        assert_int_equal(gp_store_begin(s), 0);
        for (int i = 2; i <= 5; i++) {
                char k[16];
                snprintf(k, sizeof(k), "k%d", i);
                gp_store_idem r = idem_row(k, 200, "x", 1000 * i);
                snprintf(r.ctype, sizeof(r.ctype), "text/csv");
                assert_int_equal(gp_store_idem_put(s, &r), 0);
        }
        assert_int_equal(gp_store_idem_prune(s, 2000, 100), 0); /* k1 (1000) goes */
        assert_int_equal(gp_store_commit(s), 0);
        assert_int_equal(gp_store_idem_get(s, "tenant:t", "k1", &got), -ENOENT);
        assert_int_equal(gp_store_idem_get(s, "tenant:t", "k2", &got), 0);
        assert_string_equal(got.ctype, "text/csv");
        free(got.body);
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_idem_prune(s, 0, 2), 0); /* the newest two stay */
        assert_int_equal(gp_store_commit(s), 0);
        assert_int_equal(gp_store_idem_get(s, "tenant:t", "k3", &got), -ENOENT);
        assert_int_equal(gp_store_idem_get(s, "tenant:t", "k4", &got), 0);
        free(got.body);
        assert_int_equal(gp_store_idem_get(s, "tenant:t", "k5", &got), 0);
        free(got.body);
        assert_int_equal(gp_store_idem_get(s, "tenant:t", "", &got), -EINVAL);
        gp_store_close(s);
}

/* ---- the runs of tasks (store/runs.h) ---- */

static gp_store_run run_row(int64_t task, int64_t run, const char *tenant, const char *user, const char *state,
                            int64_t started, int64_t ended, gp_task_gpu *gpus, int n) {
        gp_store_run r;
        memset(&r, 0, sizeof(r));
        r.task_id = task;
        r.run = run;
        snprintf(r.tenant, sizeof(r.tenant), "%s", tenant);
        snprintf(r.user, sizeof(r.user), "%s", user);
        snprintf(r.name, sizeof(r.name), "job-%" PRId64, task);
        snprintf(r.state, sizeof(r.state), "%s", state);
        snprintf(r.reason, sizeof(r.reason), "why %" PRId64 ".%" PRId64, task, run);
        r.started_ms = started;
        r.ended_ms = ended;
        r.gpu_mem_peak_mb = -1;
        r.gpus = gpus;
        r.n_gpus = n;
        return r;
}

typedef struct runs_seen {
        int n;
        int64_t task[256], run[256], id[256];
        gp_store_run first; /* the first row, its gpus copied below */
        gp_task_gpu gpus[4];
} runs_seen;

static int runs_cb(const gp_store_run *r, void *ud) {
        runs_seen *x = ud;
        if (x->n == 0) {
                x->first = *r;
                for (int i = 0; i < r->n_gpus && i < 4; i++)
                        x->gpus[i] = r->gpus[i];
                x->first.gpus = NULL;
        }
        if (x->n < 256) {
                x->task[x->n] = r->task_id;
                x->run[x->n] = r->run;
                x->id[x->n] = r->id;
        }
        x->n++;
        return 0;
}

static runs_seen list_runs(gp_store *s, gp_store_run_filter f) {
        runs_seen x;
        memset(&x, 0, sizeof(x));
        if (!f.limit)
                f.limit = GP_RUNS_LIST_MAX;
        assert_int_equal(gp_store_run_list(s, &f, runs_cb, &x), 0);
        return x;
}

static void test_runs_are_kept_with_their_transaction_filtered_and_capped(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        gp_task_gpu g[2] = {{"node-a", 3, "GPU-aaaa"}, {"node-b", 0, "GPU-bbbb"}};
        gp_store_run r1 = run_row(7, 1, "t1", "alice", "preempted", 1000, 2000, g, 2);
        assert_int_equal(gp_store_run_put(s, &r1), -EINVAL); /* outside a transaction */
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_run_put(s, &r1), 0);
        assert_int_equal(gp_store_rollback(s), 0);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.task_id = 7}).n, 0); /* rolled back: not kept */

        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_run_put(s, &r1), 0);
        gp_store_run r2 = run_row(7, 2, "t1", "alice", "requeued", 3000, 4000, g, 1);
        r2.gpu_mem_peak_mb = 1234;
        assert_int_equal(gp_store_run_put(s, &r2), 0);
        gp_store_run r3 = run_row(7, 3, "t1", "alice", "failed", 5000, 9000, g + 1, 1);
        r3.has_exit_code = true;
        r3.exit_code = -3;
        assert_int_equal(gp_store_run_put(s, &r3), 0);
        gp_store_run r8 = run_row(8, 1, "t2", "bob", "succeeded", 6000, 7000, NULL, 0);
        r8.has_exit_code = true;
        r8.array_id = 5; /* element 3 of job array 5 */
        r8.array_index = 3;
        assert_int_equal(gp_store_run_put(s, &r8), 0);
        /* refused, and nothing of it written: bad text, state, times, gpus */
        gp_store_run bad = r8;
        bad.run = 2;
        snprintf(bad.reason, sizeof(bad.reason), "line\nbreak");
        assert_int_equal(gp_store_run_put(s, &bad), -EINVAL);
        bad = r8;
        snprintf(bad.state, sizeof(bad.state), "running");
        assert_int_equal(gp_store_run_put(s, &bad), -EINVAL);
        bad = r8;
        bad.ended_ms = bad.started_ms - 1;
        assert_int_equal(gp_store_run_put(s, &bad), -EINVAL);
        bad = r8;
        bad.n_gpus = 1; /* gpus NULL */
        assert_int_equal(gp_store_run_put(s, &bad), -EINVAL);
        bad = r8;
        bad.array_index = GP_ARRAY_INDEX_MAX + 1;
        assert_int_equal(gp_store_run_put(s, &bad), -EINVAL);
        bad = r8;
        bad.array_id = -1;
        assert_int_equal(gp_store_run_put(s, &bad), -EINVAL);
        bad = r8;
        bad.array_id = 0; /* an index without an array */
        assert_int_equal(gp_store_run_put(s, &bad), -EINVAL);
        assert_int_equal(gp_store_commit(s), 0);

        /* a task's runs, oldest first, every field back */
        runs_seen x = list_runs(s, (gp_store_run_filter){.task_id = 7});
        assert_int_equal(x.n, 3);
        assert_int_equal(x.run[0], 1);
        assert_int_equal(x.run[2], 3);
        assert_string_equal(x.first.tenant, "t1");
        assert_string_equal(x.first.user, "alice");
        assert_string_equal(x.first.name, "job-7");
        assert_string_equal(x.first.state, "preempted");
        assert_string_equal(x.first.reason, "why 7.1");
        assert_false(x.first.has_exit_code);
        assert_int_equal(x.first.started_ms, 1000);
        assert_int_equal(x.first.ended_ms, 2000);
        assert_int_equal(x.first.gpu_mem_peak_mb, -1);
        assert_int_equal(x.first.n_gpus, 2);
        assert_string_equal(x.gpus[0].node, "node-a");
        assert_int_equal(x.gpus[0].index, 3);
        assert_string_equal(x.gpus[0].uuid, "GPU-aaaa");
        assert_string_equal(x.gpus[1].node, "node-b");
        x = list_runs(s, (gp_store_run_filter){.task_id = 7, .state = "failed"});
        assert_int_equal(x.n, 1);
        assert_true(x.first.has_exit_code);
        assert_int_equal(x.first.exit_code, -3);
        x = list_runs(s, (gp_store_run_filter){.task_id = 7, .state = "requeued"});
        assert_int_equal(x.first.gpu_mem_peak_mb, 1234);
        assert_int_equal(x.first.array_id, 0); /* no array */
        assert_int_equal(x.first.array_index, 0);
        x = list_runs(s, (gp_store_run_filter){.task_id = 8});
        assert_int_equal(x.first.array_id, 5);
        assert_int_equal(x.first.array_index, 3);
        /* sacct -j: a task and its array's elements, or one element */
        assert_int_equal(list_runs(s, (gp_store_run_filter){.job = 5, .job_index = -1}).n, 1); /* task 8 */
        assert_int_equal(list_runs(s, (gp_store_run_filter){.job = 8, .job_index = -1}).n, 1); /* itself */
        assert_int_equal(list_runs(s, (gp_store_run_filter){.job = 7, .job_index = -1}).n, 3);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.job = 5, .job_index = 3}).n, 1);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.job = 5, .job_index = 2}).n, 0);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.job = 8, .job_index = 3}).n, 0); /* no array 8 */
        assert_int_equal(list_runs(s, (gp_store_run_filter){.job = 5, .job_index = -1, .state = "failed"}).n, 0);

        /* every task: newest stored first; the filters */
        x = list_runs(s, (gp_store_run_filter){0});
        assert_int_equal(x.n, 4);
        assert_int_equal(x.task[0], 8);
        assert_int_equal(x.task[3], 7);
        assert_int_equal(x.run[3], 1);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.tenant = "t2"}).n, 1);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.user = "alice"}).n, 3);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.user = "alice", .tenant = "t2"}).n, 0);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.since_ms = 4000}).n, 3);   /* ended 4000, 9000, 7000 */
        assert_int_equal(list_runs(s, (gp_store_run_filter){.until_ms = 4000}).n, 1);   /* ended 2000 */
        runs_seen page = list_runs(s, (gp_store_run_filter){.limit = 2});
        assert_int_equal(page.n, 2);
        x = list_runs(s, (gp_store_run_filter){.before_id = page.id[1]});
        assert_int_equal(x.n, 2);
        assert_int_equal(x.task[0], 7);
        assert_int_equal(x.run[0], 2);

        /* the same (task, run) again replaces its row */
        assert_int_equal(gp_store_begin(s), 0);
        snprintf(r3.state, sizeof(r3.state), "lost");
        assert_int_equal(gp_store_run_put(s, &r3), 0);
        assert_int_equal(gp_store_commit(s), 0);
        x = list_runs(s, (gp_store_run_filter){.task_id = 7});
        assert_int_equal(x.n, 3);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.state = "lost"}).n, 1);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.state = "failed"}).n, 0);

        /* a task keeps its last GP_RUNS_KEEP runs */
        assert_int_equal(gp_store_begin(s), 0);
        for (int64_t n = 1; n <= GP_RUNS_KEEP + 2; n++) {
                gp_store_run r = run_row(9, n, "t1", "alice", "preempted", n * 10, n * 10 + 5, g, 1);
                assert_int_equal(gp_store_run_put(s, &r), 0);
        }
        assert_int_equal(gp_store_commit(s), 0);
        x = list_runs(s, (gp_store_run_filter){.task_id = 9});
        assert_int_equal(x.n, GP_RUNS_KEEP);
        assert_int_equal(x.run[0], 3);
        assert_int_equal(x.run[GP_RUNS_KEEP - 1], GP_RUNS_KEEP + 2);

        /* bad filters */
        runs_seen none;
        memset(&none, 0, sizeof(none));
        assert_int_equal(gp_store_run_list(s, &(gp_store_run_filter){.limit = 0}, runs_cb, &none), -EINVAL);
        assert_int_equal(gp_store_run_list(s, &(gp_store_run_filter){.job = 5, .job_index = -2, .limit = 10}, runs_cb,
                                           &none),
                         -EINVAL);
        assert_int_equal(gp_store_run_list(s, &(gp_store_run_filter){.job = -1, .limit = 10}, runs_cb, &none), -EINVAL);
        assert_int_equal(gp_store_run_list(s, &(gp_store_run_filter){.limit = GP_RUNS_LIST_MAX + 1}, runs_cb, &none),
                         -EINVAL);
        assert_int_equal(gp_store_run_list(s, &(gp_store_run_filter){.limit = 1, .state = "running"}, runs_cb, &none),
                         -EINVAL);
        assert_int_equal(none.n, 0);

        /* a failed statement dooms the batch: none of its runs is kept */
        assert_int_equal(gp_store_begin(s), 0);
        gp_store_run r10 = run_row(10, 1, "t1", "alice", "succeeded", 1, 2, NULL, 0);
        assert_int_equal(gp_store_run_put(s, &r10), 0);
        gp_store_fail_after(s, 1);
        gp_store_run r11 = run_row(11, 1, "t1", "alice", "succeeded", 1, 2, NULL, 0);
        int rc = gp_store_run_put(s, &r11); /* PostgreSQL pipelines: the commit may be the one to tell */
        assert_true(rc == 0 || rc == -GP_ESTORE);
        assert_int_equal(gp_store_commit(s), -GP_ESTORE);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.task_id = 10}).n, 0);
        assert_int_equal(list_runs(s, (gp_store_run_filter){.task_id = 11}).n, 0);

        /* a damaged row is an error, not a wrong answer */
        fx->be->raw_exec(fx, "UPDATE task_runs SET gpus = 'not json' WHERE task_id = 8");
        assert_int_equal(gp_store_run_list(s, &(gp_store_run_filter){.task_id = 8, .limit = 10}, runs_cb, &none),
                         -GP_ESTORE);
        assert_non_null(strstr(gp_store_errmsg(s), "task runs"));
        gp_store_close(s);
}

/* A cluster's members share the store, one live process per server id,
 * and a single server and members exclude each other either way round. */
static void test_postgres_members_and_a_single_server_exclude_each_other(void **state) {
        FX(state);
        gp_store *a = open_store(fx), *b = open_store(fx), *c = open_store(fx);
        gp_store_owner me = owner("host-a", 11, "127.0.0.1:1"), you = owner("host-b", 22, "127.0.0.1:2"), other;
        assert_int_equal(gp_store_claim_member(a, "s1", &me, NULL), 0);
        memset(&other, 0, sizeof(other));
        assert_int_equal(gp_store_claim_member(b, "s1", &you, &other), -EEXIST);
        assert_int_equal(other.pid, 11);
        assert_non_null(strstr(gp_store_errmsg(b), "server_id 's1' is in use by a live server"));
        assert_int_equal(gp_store_claim_member(b, "s2", &you, NULL), 0);
        assert_int_equal(gp_store_claim(c, &me, NULL), -EADDRINUSE);
        assert_non_null(strstr(gp_store_errmsg(c), "the servers of a cluster"));
        gp_store_close(a);
        gp_store_close(b);
        int r = -EADDRINUSE;
        for (int i = 0; i < 100 && r == -EADDRINUSE; i++) /* the closed sessions end a moment later */
                if ((r = gp_store_claim(c, &me, NULL)) == -EADDRINUSE)
                        usleep(50 * 1000);
        assert_int_equal(r, 0);
        gp_store *d = open_store(fx);
        memset(&other, 0, sizeof(other));
        assert_int_equal(gp_store_claim_member(d, "s1", &you, &other), -EBUSY);
        assert_int_equal(other.pid, 11);
        assert_non_null(strstr(gp_store_errmsg(d), "without cluster.server_id"));
        gp_store_close(d);
        gp_store_close(c);
}

/* The owner text read from a file is bounded and never trusted: torn or
 * hostile content gives empty fields and no control characters. */
static void test_owner_text_round_trips_and_survives_garbage(void **state) {
        (void)state;
        gp_store_owner o = owner("h", 9, "[::1]:80"), back;
        char text[1024], msg[700];
        int n = gp_store_owner_to_text(&o, text, sizeof(text));
        assert_true(n > 0);
        gp_store_owner_from_text(text, (size_t)n, &back);
        assert_memory_equal(&o, &back, sizeof(o));
        assert_int_equal(gp_store_owner_to_text(&o, text, 8), -ENOSPC);
        const char junk[] = "pid=-3\nsince_ms=12x\nhost=evil\x1b[2Jname\nlisten\n=\nhost";
        gp_store_owner_from_text(junk, sizeof(junk) - 1, &back);
        assert_int_equal(back.pid, 0);
        assert_int_equal(back.since_ms, 0);
        assert_string_equal(back.host, "evil[2Jname");
        assert_string_equal(back.listen, "");
        gp_store_owner_from_text("", 0, &back);
        gp_store_owner_format(&back, msg, sizeof(msg));
        assert_string_equal(msg, "host (unknown), pid (unknown), listening on (unknown), since (unknown)");
}

/* A lost connection loses the session's lock: the next call takes it
 * again; if another server took the store meanwhile, calls fail. */
static void test_postgres_claim_is_taken_again_after_reconnect(void **state) {
        FX(state);
        gp_store *a = open_store(fx), *b = open_store(fx);
        gp_store_owner me = owner("host-a", 1, "a:1"), you = owner("host-b", 2, "b:2"), other;
        char sql[256];
        assert_int_equal(gp_store_claim(a, &me, NULL), 0);
        assert_int_equal(gp_store_claim(b, &you, NULL), -EBUSY);
        snprintf(sql, sizeof(sql),
                 "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = '%s' "
                 "AND pid <> pg_backend_pid() AND pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory')",
                 fx->schema);
        fx->be->raw_exec(fx, sql);
        gp_task t;
        assert_int_equal(gp_store_task_get(a, 1, &t), -GP_ESTORE); /* finds the connection dead */
        put_simple(a, 1, "t", GP_TASK_QUEUED);                      /* reconnected, claimed again */
        assert_int_equal(gp_store_claim(b, &you, &other), -EBUSY);
        assert_string_equal(other.host, "host-a");
        /* now b takes the store while a's session is gone: a must not write */
        fx->be->raw_exec(fx, sql);
        assert_int_equal(gp_store_task_get(a, 1, &t), -GP_ESTORE);
        assert_int_equal(gp_store_claim(b, &you, NULL), 0);
        t = make_task(2, "t", GP_TASK_QUEUED);
        assert_int_equal(gp_store_task_put(a, &t), -GP_ESTORE);
        assert_non_null(strstr(gp_store_errmsg(a), "another server has claimed the store"));
        assert_non_null(strstr(gp_store_errmsg(a), "host-b"));
        assert_false(exists(b, 2));
        gp_store_close(b);
        /* b gone: a claims again (at its next call, once b's session ended) and goes on */
        int r = -GP_ESTORE;
        t = make_task(3, "t", GP_TASK_QUEUED);
        for (int i = 0; i < 100 && r < 0; i++) {
                if ((r = gp_store_task_put(a, &t)) < 0)
                        usleep(50 * 1000);
        }
        assert_int_equal(r, 0);
        assert_true(exists(a, 3));
        gp_store_close(a);
}

/* ---- the leader lease and the fence ---- */

static gp_task_state state_of_in(gp_store *s, int64_t id) {
        gp_task t;
        assert_int_equal(gp_store_task_get(s, id, &t), 0);
        gp_task_state st = t.state;
        gp_task_done(&t);
        return st;
}

static int fenced_calls;
static void count_fenced(void *ud) {
        (void)ud;
        fenced_calls++;
}

static void test_postgres_lease_acquire_renew_expire_takeover(void **state) {
        FX(state);
        gp_store *a = open_store(fx), *b = open_store(fx);
        int64_t ea = 0, eb = 0;
        gp_store_lease held;
        assert_int_equal(gp_store_lease_get(a, &held), 0);
        assert_string_equal(held.holder, "");
        assert_string_equal(held.url, "");
        assert_int_equal(gp_store_lease_acquire(a, "s1", "http://10.0.0.5:8080", 1000, &ea), 0);
        assert_int_equal(ea, 1);
        assert_int_equal(gp_store_lease_acquire(b, "s2", "http://10.0.0.6:8080", 1000, &eb), -EBUSY);
        assert_non_null(strstr(gp_store_errmsg(b), "s1"));
        assert_int_equal(gp_store_lease_get(b, &held), 0);
        assert_string_equal(held.holder, "s1");
        assert_string_equal(held.url, "http://10.0.0.5:8080"); /* a refused acquire did not touch it */
        assert_int_equal(held.epoch, 1);
        assert_true(held.left_ms > 0 && held.left_ms <= 1000);
        /* renewing keeps it past its first expiry */
        for (int i = 0; i < 4; i++) {
                usleep(400 * 1000);
                assert_int_equal(gp_store_lease_renew(a, "s1", ea, 1000), 0);
                assert_int_equal(gp_store_lease_acquire(b, "s2", "", 1000, &eb), -EBUSY);
        }
        /* left to expire: the other takes it over, with the next epoch */
        usleep(1100 * 1000);
        assert_int_equal(gp_store_lease_acquire(b, "s2", "http://10.0.0.6:8080", 1000, &eb), 0);
        assert_int_equal(eb, 2);
        assert_int_equal(gp_store_lease_get(a, &held), 0);
        assert_string_equal(held.holder, "s2");
        assert_string_equal(held.url, "http://10.0.0.6:8080"); /* the url comes with the lease */
        assert_int_equal(gp_store_lease_renew(a, "s1", ea, 1000), -ESTALE);
        assert_int_equal(gp_store_lease_renew(b, "s2", eb, 1000), 0);
        /* released: taken at once, epoch 3; a stale release changes nothing */
        assert_int_equal(gp_store_lease_release(a, "s1", ea), 0);
        assert_int_equal(gp_store_lease_acquire(a, "s1", "", 1000, &ea), -EBUSY);
        assert_int_equal(gp_store_lease_release(b, "s2", eb), 0);
        assert_int_equal(gp_store_lease_acquire(a, "s1", "", 1000, &ea), 0);
        assert_int_equal(ea, 3);
        /* bad arguments change nothing */
        assert_int_equal(gp_store_lease_acquire(a, "", "", 1000, &ea), -EINVAL);
        assert_int_equal(gp_store_lease_acquire(a, "s1", "", 0, &ea), -EINVAL);
        assert_int_equal(gp_store_lease_acquire(a, "s1", "http://x\r\nHost: evil", 1000, &ea), -EINVAL);
        assert_int_equal(gp_store_lease_acquire(a, "s1", NULL, 1000, &ea), -EINVAL);
        assert_int_equal(ea, 3);
        gp_store_close(a);
        gp_store_close(b);
}

static void test_postgres_fenced_handle_stores_nothing_after_a_takeover(void **state) {
        FX(state);
        gp_store *a = open_store(fx), *b = open_store(fx);
        int64_t ea = 0, eb = 0;
        assert_int_equal(gp_store_lease_acquire(a, "s1", "", 500, &ea), 0);
        fenced_calls = 0;
        assert_int_equal(gp_store_set_fence(a, "s1", ea, count_fenced, NULL), 0);
        /* while it leads, its writes go through, in and outside transactions */
        put_simple(a, 1, "t", GP_TASK_QUEUED);
        assert_int_equal(gp_store_begin(a), 0);
        gp_task t = make_task(2, "t", GP_TASK_QUEUED);
        assert_int_equal(gp_store_task_put(a, &t), 0);
        assert_int_equal(gp_store_commit(a), 0);
        assert_true(exists(b, 1) && exists(b, 2));
        /* a pauses past its lease; b takes over */
        usleep(600 * 1000);
        assert_int_equal(gp_store_lease_acquire(b, "s2", "", 5000, &eb), 0);
        assert_true(eb > ea);
        /* a's transaction is refused whole, and it is told so */
        assert_int_equal(gp_store_begin(a), 0);
        t = make_task(3, "t", GP_TASK_QUEUED);
        assert_int_equal(gp_store_task_put(a, &t), 0);
        t = make_task(1, "t", GP_TASK_CANCELLED);
        assert_int_equal(gp_store_task_put(a, &t), 0);
        assert_int_equal(gp_store_commit(a), -GP_EFENCED);
        assert_non_null(strstr(gp_store_errmsg(a), "lost the leader lease"));
        assert_int_equal(fenced_calls, 1);
        assert_false(exists(b, 3));
        assert_int_equal(state_of_in(b, 1), GP_TASK_QUEUED);
        /* so is a write outside a transaction, and a meta set */
        t = make_task(4, "t", GP_TASK_QUEUED);
        assert_int_equal(gp_store_task_put(a, &t), -GP_EFENCED);
        assert_int_equal(gp_store_meta_set(a, "k", "v"), -GP_EFENCED);
        assert_int_equal(fenced_calls, 3);
        assert_false(exists(b, 4));
        char buf[8];
        assert_int_equal(gp_store_meta_get(b, "k", buf, sizeof(buf)), -ENOENT);
        /* the handle is still usable for reads, outside any transaction */
        assert_true(exists(a, 1));
        /* b, fenced with its own term, writes */
        assert_int_equal(gp_store_set_fence(b, "s2", eb, NULL, NULL), 0);
        put_simple(b, 5, "t", GP_TASK_QUEUED);
        assert_true(exists(a, 5));
        gp_store_close(a);
        gp_store_close(b);
}

static void test_sqlite_lease_is_not_supported(void **state) {
        FX(state);
        gp_store *a = open_store(fx);
        int64_t e = 0;
        assert_int_equal(gp_store_lease_acquire(a, "s1", "", 1000, &e), -ENOTSUP);
        assert_int_equal(gp_store_set_fence(a, "s1", 1, NULL, NULL), -ENOTSUP);
        put_simple(a, 1, "t", GP_TASK_QUEUED);
        assert_true(exists(a, 1));
        gp_store_close(a);
}

/* ---- metering ---- */

static gp_bill_segment make_seg(int64_t task, const char *tenant, int64_t start, int64_t end, int month) {
        gp_bill_segment g;
        memset(&g, 0, sizeof(g));
        g.task_id = task;
        snprintf(g.tenant, sizeof(g.tenant), "%s", tenant);
        snprintf(g.gpu_model, sizeof(g.gpu_model), "NVIDIA A100");
        g.gpus_milli = 500;
        g.memory_mb = 8000;
        g.start_ms = start;
        g.end_ms = end;
        g.gpu_ms = gp_bill_gpu_ms(start, end, 500);
        g.run_start_ms = start;
        g.end_kind = GP_BILL_TASK_END;
        g.month = month;
        return g;
}

typedef struct seg_collect {
        gp_bill_segment seg[64];
        gp_bill_tokens tok[64];
        int n;
} seg_collect;

static int seg_cb(const gp_bill_segment *g, void *ud) {
        seg_collect *c = ud;
        if (c->n < 64)
                c->seg[c->n] = *g;
        c->n++;
        return 0;
}

static int tok_cb(const gp_bill_tokens *t, void *ud) {
        seg_collect *c = ud;
        if (c->n < 64)
                c->tok[c->n] = *t;
        c->n++;
        return 0;
}

/* Segments and token records are stored in the caller's transaction (a
 * rollback drops them with the task change), come back field for field,
 * and filter by tenant, task, month and time. */
static void test_usage_rows_round_trip_filter_and_follow_the_transaction(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        assert_int_equal(gp_store_begin(s), 0);
        put_simple(s, 1, "a", GP_TASK_SUCCEEDED);
        gp_bill_segment g = make_seg(1, "a", 1000, 5000, 202611);
        assert_int_equal(gp_store_usage_add(s, &g), 0);
        assert_int_equal(gp_store_rollback(s), 0);
        seg_collect c = {.n = 0};
        gp_usage_filter all = {0};
        assert_int_equal(gp_store_usage_list(s, &all, seg_cb, &c), 0);
        assert_int_equal(c.n, 0);
        assert_false(exists(s, 1));

        assert_int_equal(gp_store_begin(s), 0);
        put_simple(s, 1, "a", GP_TASK_SUCCEEDED);
        assert_int_equal(gp_store_usage_add(s, &g), 0);
        gp_bill_segment g2 = make_seg(2, "b", 500, 9000, 202612);
        g2.end_kind = GP_BILL_INTERVAL;
        assert_int_equal(gp_store_usage_add(s, &g2), 0);
        gp_bill_segment g3 = make_seg(1, "a", 5000, 7000, 202612);
        assert_int_equal(gp_store_usage_add(s, &g3), 0);
        gp_bill_tokens t;
        memset(&t, 0, sizeof(t));
        snprintf(t.tenant, sizeof(t.tenant), "a");
        snprintf(t.model, sizeof(t.model), "llama-3-8b");
        t.prompt_tokens = 1200;
        t.completion_tokens = 345;
        t.at_ms = 4242;
        t.month = 202611;
        assert_int_equal(gp_store_tokens_add(s, &t), 0);
        assert_int_equal(gp_store_commit(s), 0);
        gp_store_close(s);

        s = open_store(fx);
        c.n = 0;
        assert_int_equal(gp_store_usage_list(s, &all, seg_cb, &c), 0);
        assert_int_equal(c.n, 3);
        /* by start */
        assert_int_equal(c.seg[0].task_id, 2);
        assert_int_equal(c.seg[1].task_id, 1);
        assert_int_equal(c.seg[1].start_ms, 1000);
        assert_int_equal(c.seg[1].end_ms, 5000);
        assert_int_equal(c.seg[1].gpus_milli, 500);
        assert_int_equal(c.seg[1].memory_mb, 8000);
        assert_int_equal(c.seg[1].gpu_ms, 2000);
        assert_int_equal(c.seg[1].end_kind, GP_BILL_TASK_END);
        assert_int_equal(c.seg[1].month, 202611);
        assert_string_equal(c.seg[1].gpu_model, "NVIDIA A100");
        assert_int_equal(c.seg[0].end_kind, GP_BILL_INTERVAL);
        gp_usage_filter f = {.tenant = "a"};
        c.n = 0;
        assert_int_equal(gp_store_usage_list(s, &f, seg_cb, &c), 0);
        assert_int_equal(c.n, 2);
        f = (gp_usage_filter){.task_id = 1, .month_min = 202612};
        c.n = 0;
        assert_int_equal(gp_store_usage_list(s, &f, seg_cb, &c), 0);
        assert_int_equal(c.n, 1);
        assert_int_equal(c.seg[0].start_ms, 5000);
        f = (gp_usage_filter){.from_ms = 6000, .to_ms = 8000}; /* overlaps: g2 and g3 */
        c.n = 0;
        assert_int_equal(gp_store_usage_list(s, &f, seg_cb, &c), 0);
        assert_int_equal(c.n, 2);
        f = (gp_usage_filter){.tenant = "a", .month_max = 202611};
        c.n = 0;
        assert_int_equal(gp_store_tokens_list(s, &f, tok_cb, &c), 0);
        assert_int_equal(c.n, 1);
        assert_string_equal(c.tok[0].model, "llama-3-8b");
        assert_int_equal(c.tok[0].prompt_tokens, 1200);
        assert_int_equal(c.tok[0].completion_tokens, 345);
        assert_int_equal(c.tok[0].at_ms, 4242);
        f = (gp_usage_filter){.tenant = "b"};
        c.n = 0;
        assert_int_equal(gp_store_tokens_list(s, &f, tok_cb, &c), 0);
        assert_int_equal(c.n, 0);
        /* bad records are refused before the database sees them */
        gp_bill_segment bad = make_seg(3, "a", 9000, 100, 202611);
        assert_int_equal(gp_store_usage_add(s, &bad), -EINVAL);
        bad = make_seg(3, "a", 100, 9000, 202613);
        assert_int_equal(gp_store_usage_add(s, &bad), -EINVAL);
        t.prompt_tokens = -1;
        assert_int_equal(gp_store_tokens_add(s, &t), -EINVAL);
        /* a fault on the insert dooms the batch like a task put */
        assert_int_equal(gp_store_begin(s), 0);
        put_simple(s, 9, "a", GP_TASK_SUCCEEDED);
        gp_store_fail_after(s, 1);
        g = make_seg(9, "a", 1, 2, 202611);
        assert_int_equal(gp_store_usage_add(s, &g), -GP_ESTORE);
        assert_int_equal(gp_store_commit(s), -GP_ESTORE);
        assert_false(exists(s, 9));
        gp_store_close(s);
}

/* ---- schema migrations ---- */

/* Take the database the fixture's store made back to the schema of
 * version v (1..7): drop what later versions added, and record v.  A
 * version 1 database also loses the metering tables (they came later and
 * are created if missing at every open), and one of 6 or before its task
 * runs table (which version 8 makes where it is missing). */
static void downgrade_to(fixture *fx, int v) {
        char sql[128];
        fx->be->raw_exec(fx, "DROP INDEX task_runs_array");
        fx->be->raw_exec(fx, "ALTER TABLE task_runs DROP COLUMN array_id");
        fx->be->raw_exec(fx, "ALTER TABLE task_runs DROP COLUMN array_index");
        if (v < 7) {
                fx->be->raw_exec(fx, "DROP TABLE task_runs");
                fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN gpu_mem_peak");
        }
        if (v < 6)
                fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN unix_user");
        if (v < 5)
                fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN node_selector");
        if (v < 4)
                fx->be->raw_exec(fx, "DROP INDEX tasks_array");
        if (v < 4) {
                fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN array_id");
                fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN array_index");
                fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN array_limit");
        }
        if (v < 3)
                fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN borrowing");
        if (v < 2)
                fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN elastic_max");
        if (v < 2) {
                fx->be->raw_exec(fx, "DROP TABLE usage");
                fx->be->raw_exec(fx, "DROP TABLE usage_tokens");
        }
        snprintf(sql, sizeof(sql), "UPDATE meta SET value = '%d' WHERE key = 'schema_version'", v);
        fx->be->raw_exec(fx, sql);
}

/* A database of schema version v opens, is migrated to the current
 * version, keeps its tasks (the columns added later read as 0) and its
 * usage rows, and takes records with every field afterwards. */
static void check_migrates_from(fixture *fx, int v) {
        gp_store *s = open_store(fx);
        gp_task t = make_full_task(5);
        t.gpu_mem_seen = false; /* the column of version 7: -1, not read */
        t.gpu_mem_peak_mb = 0;
        if (v < 6)
                t.user[0] = '\0'; /* the column of version 6 */
        if (v < 5)
                t.node_selector[0] = '\0'; /* the column of version 5 */
        if (v < 4) {
                t.array_id = 0; /* columns of version 4 */
                t.array_index = 0;
                t.array_limit = 0;
        }
        if (v < 3)
                t.borrowing = false;
        if (v < 2)
                t.elastic_max_gpus = 0;
        put_ok(s, &t);
        gp_bill_segment g = make_seg(5, "a", 1000, 5000, 202611);
        assert_int_equal(gp_store_usage_add(s, &g), 0);
        gp_store_run run = run_row(5, 1, "a", "alice", "succeeded", 1000, 2000, NULL, 0);
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_run_put(s, &run), 0);
        assert_int_equal(gp_store_commit(s), 0);
        gp_store_close(s);
        downgrade_to(fx, v);

        s = open_store(fx);
        char ver[16];
        assert_int_equal(gp_store_meta_get(s, "schema_version", ver, sizeof(ver)), 0);
        assert_string_equal(ver, "8");
        gp_task got;
        assert_int_equal(gp_store_task_get(s, 5, &got), 0);
        assert_task_equal(&t, &got);
        gp_task_done(&got);
        seg_collect c = {.n = 0};
        gp_usage_filter all = {0};
        assert_int_equal(gp_store_usage_list(s, &all, seg_cb, &c), 0);
        assert_int_equal(c.n, v < 2 ? 0 : 1); /* version 1 had no usage table */
        assert_int_equal(gp_store_usage_add(s, &g), 0);
        /* a run kept before version 8 is of no array; one put since keeps its array */
        runs_seen x = list_runs(s, (gp_store_run_filter){.task_id = 5});
        assert_int_equal(x.n, v < 7 ? 0 : 1); /* dropped with its table above */
        if (x.n)
                assert_int_equal(x.first.array_id, 0);
        run.run = 2;
        run.array_id = 4;
        run.array_index = 1;
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_run_put(s, &run), 0);
        assert_int_equal(gp_store_commit(s), 0);
        x = list_runs(s, (gp_store_run_filter){0});
        assert_int_equal(x.first.run, 2); /* newest first */
        assert_int_equal(x.first.array_id, 4);
        assert_int_equal(x.first.array_index, 1);
        gp_task full = make_full_task(6);
        put_ok(s, &full);
        assert_int_equal(gp_store_task_get(s, 6, &got), 0);
        assert_task_equal(&full, &got);
        gp_task_done(&got);
        gp_task_done(&full);
        gp_task_done(&t);
        gp_store_close(s);
        /* opening again finds nothing to do */
        s = open_store(fx);
        assert_int_equal(max_id(s), 6);
        gp_store_close(s);
}

static void test_version_1_database_is_migrated_keeping_its_tasks(void **state) {
        FX(state);
        check_migrates_from(fx, 1);
}

static void test_version_2_database_is_migrated_keeping_its_tasks(void **state) {
        FX(state);
        check_migrates_from(fx, 2);
}

static void test_version_3_database_is_migrated_keeping_its_tasks(void **state) {
        FX(state);
        check_migrates_from(fx, 3);
}

static void test_version_4_database_is_migrated_keeping_its_tasks(void **state) {
        FX(state);
        check_migrates_from(fx, 4);
}

static void test_version_5_database_is_migrated_keeping_its_tasks(void **state) {
        FX(state);
        check_migrates_from(fx, 5);
}

static void test_version_6_database_is_migrated_keeping_its_tasks(void **state) {
        FX(state);
        check_migrates_from(fx, 6);
}

static void test_version_7_database_is_migrated_keeping_its_tasks_and_runs(void **state) {
        FX(state);
        check_migrates_from(fx, 7);
}

/* A migration that fails half-way stores nothing of the whole run: here
 * version 2 applies, version 3 meets a column that is already there, and
 * the database is left at version 1 as it was, so it migrates once the
 * obstacle is gone. */
static void test_failed_migration_leaves_the_old_version_whole(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        put_simple(s, 1, "a", GP_TASK_QUEUED);
        gp_store_close(s);
        downgrade_to(fx, 1);
        fx->be->raw_exec(fx, "ALTER TABLE tasks ADD COLUMN borrowing INTEGER NOT NULL DEFAULT 0");
        char err[512] = "";
        assert_int_equal(gp_store_open(fx->url, NULL, &s, err, sizeof(err)), -GP_ESTORE);
        assert_non_null(strstr(err, "migrate to schema version 3"));
        /* version 2's column was rolled back with the rest */
        fx->be->raw_exec(fx, "ALTER TABLE tasks ADD COLUMN elastic_max INTEGER NOT NULL DEFAULT 0");
        fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN elastic_max");
        fx->be->raw_exec(fx, "ALTER TABLE tasks DROP COLUMN borrowing");
        s = open_store(fx);
        assert_true(exists(s, 1));
        char ver[16];
        assert_int_equal(gp_store_meta_get(s, "schema_version", ver, sizeof(ver)), 0);
        assert_string_equal(ver, "8");
        gp_store_close(s);
}

static void test_schema_version_that_is_not_a_number_is_refused(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        gp_store_close(s);
        fx->be->raw_exec(fx, "UPDATE meta SET value = '2x' WHERE key = 'schema_version'");
        char err[512] = "";
        assert_int_equal(gp_store_open(fx->url, NULL, &s, err, sizeof(err)), -GP_ESTORE);
        assert_non_null(strstr(err, "schema_version: not a number"));
}


/* ---- the coordinator's tables (store/coord.h) ---- */

static gp_coord_server make_server(const char *id, const char *role, int64_t load) {
        gp_coord_server sv;
        memset(&sv, 0, sizeof(sv));
        snprintf(sv.server_id, sizeof(sv.server_id), "%s", id);
        snprintf(sv.url, sizeof(sv.url), "http://%s:8080", id);
        snprintf(sv.role, sizeof(sv.role), "%s", role);
        sv.load_milli = load;
        return sv;
}

struct sv_list {
        gp_coord_server v[8];
        int n;
};

static int sv_collect(const gp_coord_server *sv, void *ud) {
        struct sv_list *l = ud;
        if (l->n < 8)
                l->v[l->n] = *sv;
        l->n++;
        return 0;
}

static void test_coord_registry_heartbeats_and_unregister(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        int64_t now1 = 0, now2 = 0, clock = 0;
        gp_coord_server a = make_server("s1", "leader", 250), b = make_server("s2", "follower", 0);
        assert_int_equal(gp_store_coord_heartbeat(s, &a, true, &now1, NULL), 0);
        assert_int_equal(gp_store_coord_heartbeat(s, &b, false, NULL, NULL), 0); /* a new one registers */
        assert_int_equal(gp_store_coord_now(s, &clock), 0);
        assert_true(clock >= now1 && clock > 1700000000000);
        struct sv_list l = {0};
        assert_int_equal(gp_store_coord_servers(s, sv_collect, &l, NULL), 0);
        assert_int_equal(l.n, 2);
        assert_string_equal(l.v[0].server_id, "s1");
        assert_string_equal(l.v[0].url, "http://s1:8080");
        assert_string_equal(l.v[0].role, "leader");
        assert_int_equal(l.v[0].load_milli, 250);
        assert_int_equal(l.v[0].started_ms, now1);
        assert_int_equal(l.v[0].last_heartbeat_ms, now1);
        assert_string_equal(l.v[1].server_id, "s2");
        int64_t started2 = l.v[1].started_ms;

        /* a heartbeat moves last_heartbeat_ms, keeps started_ms; register resets it */
        usleep(5000);
        b.load_milli = 900;
        snprintf(b.role, sizeof(b.role), "standby");
        gp_coord_server was;
        memset(&was, 0x55, sizeof(was));
        assert_int_equal(gp_store_coord_heartbeat(s, &b, false, &now2, &was), 0); /* the row before, too */
        assert_string_equal(was.server_id, "s2");
        assert_string_equal(was.role, "follower");
        assert_int_equal(was.load_milli, 0);
        assert_int_equal(was.started_ms, started2);
        assert_true(now2 > now1);
        memset(&l, 0, sizeof(l));
        assert_int_equal(gp_store_coord_servers(s, sv_collect, &l, NULL), 0);
        assert_int_equal(l.v[1].last_heartbeat_ms, now2);
        assert_int_equal(l.v[1].started_ms, started2);
        assert_int_equal(l.v[1].load_milli, 900);
        assert_string_equal(l.v[1].role, "standby");
        assert_int_equal(gp_store_coord_heartbeat(s, &b, true, &now2, NULL), 0);
        memset(&l, 0, sizeof(l));
        assert_int_equal(gp_store_coord_servers(s, sv_collect, &l, NULL), 0);
        assert_int_equal(l.v[1].started_ms, now2);

        /* bad records change nothing */
        gp_coord_server bad = make_server("s3", "king", 0);
        assert_int_equal(gp_store_coord_heartbeat(s, &bad, true, NULL, NULL), -EINVAL);
        bad = make_server("s3", "leader", 1001);
        assert_int_equal(gp_store_coord_heartbeat(s, &bad, true, NULL, NULL), -EINVAL);
        bad = make_server("", "leader", 0);
        assert_int_equal(gp_store_coord_heartbeat(s, &bad, true, NULL, NULL), -EINVAL);
        bad = make_server("s3", "leader", 0);
        memset(bad.server_id, 'x', sizeof(bad.server_id)); /* not NUL-terminated */
        assert_int_equal(gp_store_coord_heartbeat(s, &bad, true, NULL, NULL), -EINVAL);
        /* inside another transaction: refused */
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_coord_heartbeat(s, &a, false, NULL, NULL), -EINVAL);
        assert_int_equal(gp_store_rollback(s), 0);

        memset(&was, 0x55, sizeof(was));
        assert_int_equal(gp_store_coord_unregister(s, "s2", &was), 0); /* the row it removed */
        assert_string_equal(was.server_id, "s2");
        assert_string_equal(was.role, "standby");
        assert_int_equal(was.load_milli, 900);
        assert_int_equal(gp_store_coord_unregister(s, "s2", NULL), -ENOENT);
        gp_coord_server fresh = make_server("s4", "follower", 0);
        memset(&was, 0x55, sizeof(was));
        assert_int_equal(gp_store_coord_heartbeat(s, &fresh, false, NULL, &was), 0);
        assert_string_equal(was.server_id, ""); /* none before */
        assert_int_equal(gp_store_coord_unregister(s, "s4", NULL), 0);
        memset(&l, 0, sizeof(l));
        assert_int_equal(gp_store_coord_servers(s, sv_collect, &l, NULL), 0);
        assert_int_equal(l.n, 1);

        /* durable: another handle (another server) sees it */
        gp_store *s2 = open_store(fx);
        memset(&l, 0, sizeof(l));
        assert_int_equal(gp_store_coord_servers(s2, sv_collect, &l, NULL), 0);
        assert_int_equal(l.n, 1);
        assert_string_equal(l.v[0].server_id, "s1");
        gp_store_close(s2);
        gp_store_close(s);
}

static void test_coord_registry_is_bounded(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        char id[32];
        for (int i = 0; i < GP_COORD_MAX_SERVERS; i++) {
                snprintf(id, sizeof(id), "srv-%04d", i);
                gp_coord_server sv = make_server(id, "follower", 0);
                assert_int_equal(gp_store_coord_heartbeat(s, &sv, true, NULL, NULL), 0);
        }
        gp_coord_server extra = make_server("one-too-many", "follower", 0);
        assert_int_equal(gp_store_coord_heartbeat(s, &extra, true, NULL, NULL), -ENOSPC);
        gp_coord_server known = make_server("srv-0007", "standby", 0);
        assert_int_equal(gp_store_coord_heartbeat(s, &known, false, NULL, NULL), 0); /* known ones still beat */
        struct sv_list l = {0};
        assert_int_equal(gp_store_coord_servers(s, sv_collect, &l, NULL), 0);
        assert_int_equal(l.n, GP_COORD_MAX_SERVERS);
        gp_store_close(s);
}

struct lock_list {
        gp_coord_lock v[8];
        int n;
};

static int lock_collect(const gp_coord_lock *lk, void *ud) {
        struct lock_list *l = ud;
        if (l->n < 8)
                l->v[l->n] = *lk;
        l->n++;
        return 0;
}

/* Expired rows of other locks: each grant removes at most
 * GP_COORD_SWEEP_MAX, the longest expired first, and says which. */
static void test_coord_grant_sweeps_expired_locks_and_names_them(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        gp_coord_lock l;
        gp_coord_grant g;
        char id[16];
        for (int i = 0; i < GP_COORD_SWEEP_MAX + 4; i++) {
                snprintf(id, sizeof(id), "e%02d", i);
                /* all expire together, after the last is made (each grant sweeps what expired before it) */
                assert_int_equal(gp_store_coord_lock_acquire(s, id, "w1", 1000, &l, NULL), 0);
        }
        usleep(1100 * 1000);
        assert_int_equal(gp_store_coord_lock_acquire(s, "live", "w2", 60000, &l, &g), 0);
        assert_string_equal(g.prev.lock_id, "");
        assert_int_equal(g.nexpired, GP_COORD_SWEEP_MAX);
        for (size_t i = 0; i < g.nexpired; i++) {
                assert_string_equal(g.expired[i].owner, "w1");
                assert_true(g.expired[i].expires_ms <= l.acquired_ms);
        }
        assert_int_equal(gp_store_coord_lock_acquire(s, "live2", "w2", 60000, &l, &g), 0);
        assert_int_equal(g.nexpired, 4); /* the rest */
        assert_int_equal(gp_store_coord_lock_acquire(s, "live3", "w2", 60000, &l, &g), 0);
        assert_int_equal(g.nexpired, 0);
        /* a renewal removes nothing */
        assert_int_equal(gp_store_coord_lock_acquire(s, "live3", "w2", 60000, &l, &g), 0);
        assert_int_equal(g.nexpired, 0);
        struct lock_list ll = {0};
        assert_int_equal(gp_store_coord_locks(s, lock_collect, &ll, NULL), 0);
        assert_int_equal(ll.n, 3);
        gp_store_close(s);
}

static void test_coord_locks_exclusion_renew_expiry_release(void **state) {
        FX(state);
        gp_store *s = open_store(fx), *t = open_store(fx); /* two servers on one store */
        gp_coord_lock l, h;
        gp_coord_grant g;
        memset(&g, 0x55, sizeof(g));
        assert_int_equal(gp_store_coord_lock_acquire(s, "dl", "w1", 60000, &l, &g), 0);
        assert_string_equal(g.prev.lock_id, ""); /* not held before */
        assert_int_equal(g.nexpired, 0);
        int64_t tok1 = l.fencing_token;
        assert_true(tok1 >= 1);
        assert_string_equal(l.owner, "w1");
        assert_true(l.expires_ms - l.acquired_ms == 60000);
        /* another owner, through the other handle: busy, told who holds it */
        assert_int_equal(gp_store_coord_lock_acquire(t, "dl", "w2", 60000, &h, NULL), -EBUSY);
        assert_string_equal(h.owner, "w1");
        assert_int_equal(h.fencing_token, tok1);
        /* the owner renews: the same token */
        int64_t exp1 = l.expires_ms;
        assert_int_equal(gp_store_coord_lock_acquire(t, "dl", "w1", 120000, &l, &g), 0);
        assert_int_equal(l.fencing_token, tok1);
        assert_int_equal(g.prev.fencing_token, tok1); /* a renewal: the same token, the old expiry */
        assert_int_equal(g.prev.expires_ms, exp1);
        assert_true(l.expires_ms - l.acquired_ms >= 120000);
        /* another lock: a larger token */
        assert_int_equal(gp_store_coord_lock_acquire(s, "other", "w1", 1, &l, NULL), 0);
        int64_t tok2 = l.fencing_token;
        assert_true(tok2 > tok1);
        /* it expires: another owner gets it with a larger token still */
        usleep(20000);
        struct lock_list ll = {0};
        assert_int_equal(gp_store_coord_locks(s, lock_collect, &ll, NULL), 0);
        assert_int_equal(ll.n, 1);
        assert_string_equal(ll.v[0].lock_id, "dl");
        assert_int_equal(gp_store_coord_lock_release(s, "other", "w1", &h), -ENOENT);
        assert_int_equal(gp_store_coord_lock_acquire(t, "other", "w2", 60000, &l, &g), 0);
        assert_true(l.fencing_token > tok2);
        assert_string_equal(g.prev.owner, "w1"); /* it took over w1's expired lock */
        assert_int_equal(g.prev.fencing_token, tok2);
        assert_true(g.prev.expires_ms <= l.acquired_ms);
        assert_int_equal(g.nexpired, 0); /* its own expired row is prev, not a swept one */
        int64_t tok3 = l.fencing_token;
        /* release checks the owner */
        assert_int_equal(gp_store_coord_lock_release(s, "dl", "w2", &h), -EBUSY);
        assert_string_equal(h.owner, "w1");
        assert_int_equal(gp_store_coord_lock_release(s, "nope", "w2", &h), -ENOENT);
        assert_int_equal(gp_store_coord_lock_release(s, "dl", "w1", &h), 0);
        assert_int_equal(h.fencing_token, tok1);
        assert_int_equal(gp_store_coord_lock_release(s, "dl", "w1", &h), -ENOENT);
        assert_int_equal(gp_store_coord_lock_acquire(t, "dl", "w2", 60000, &l, NULL), 0);
        assert_true(l.fencing_token > tok3);
        /* bad arguments change nothing */
        char longer[GP_COORD_ID_MAX + 2];
        memset(longer, 'a', sizeof(longer) - 1);
        longer[sizeof(longer) - 1] = '\0';
        assert_int_equal(gp_store_coord_lock_acquire(s, "", "w1", 1000, &l, NULL), -EINVAL);
        assert_int_equal(gp_store_coord_lock_acquire(s, longer, "w1", 1000, &l, NULL), -EINVAL);
        assert_int_equal(gp_store_coord_lock_acquire(s, "x", "w1", 0, &l, NULL), -EINVAL);
        assert_int_equal(gp_store_coord_lock_acquire(s, "x", "w1", GP_COORD_TIMEOUT_MAX_MS + 1, &l, NULL), -EINVAL);
        assert_int_equal(gp_store_coord_lock_release(s, "x", "", &l), -EINVAL);
        memset(&ll, 0, sizeof(ll));
        assert_int_equal(gp_store_coord_locks(t, lock_collect, &ll, NULL), 0);
        assert_int_equal(ll.n, 2);
        assert_string_equal(ll.v[0].lock_id, "dl");
        assert_string_equal(ll.v[0].owner, "w2");
        assert_string_equal(ll.v[1].lock_id, "other");
        gp_store_close(t);
        gp_store_close(s);
}

static void test_coord_lock_fault_at_every_step_grants_nothing(void **state) {
        FX(state);
        gp_store *s = open_store(fx);
        gp_coord_lock l, h;
        assert_int_equal(gp_store_coord_lock_acquire(s, "base", "w0", 60000, &l, NULL), 0);
        int64_t base = l.fencing_token;
        int failed = 0;
        for (int n = 1; n < 20; n++) {
                gp_store_fail_after(s, n);
                int r = gp_store_coord_lock_acquire(s, "x", "w1", 60000, &l, NULL);
                gp_store_fail_after(s, 0);
                if (r == 0)
                        break;
                assert_int_equal(r, -GP_ESTORE);
                failed++;
                /* nothing of it stuck: not held, and the counter did not move */
                assert_int_equal(gp_store_coord_lock_release(s, "x", "w1", &h), -ENOENT);
        }
        assert_true(failed >= 5);
        assert_int_equal(l.fencing_token, base + 1);
        gp_store_close(s);
}


/* Several handles (servers) race for the same locks at once: each lock is
 * granted to exactly one owner, every token once. */
enum { RACERS = 4, RACE_LOCKS = 25 };

struct racer {
        fixture *fx;
        int idx;
        int64_t tokens[RACE_LOCKS];  /* 0 = not granted */
        int errors;
};

static void *race_main(void *arg) {
        struct racer *rc = arg;
        gp_store *s = NULL;
        char err[512];
        gp_store_options opt = {.sync_full = true, .busy_timeout_ms = 10000};
        if (gp_store_open(rc->fx->url, &opt, &s, err, sizeof(err)) < 0) {
                rc->errors++;
                return NULL;
        }
        char owner[32], id[32];
        snprintf(owner, sizeof(owner), "racer-%d", rc->idx);
        for (int i = 0; i < RACE_LOCKS; i++) {
                gp_coord_lock l;
                snprintf(id, sizeof(id), "race-%d", i);
                int r = gp_store_coord_lock_acquire(s, id, owner, 60000, &l, NULL);
                if (r == 0)
                        rc->tokens[i] = l.fencing_token;
                else if (r != -EBUSY)
                        rc->errors++;
        }
        gp_store_close(s);
        return NULL;
}

static void test_coord_racing_servers_never_share_a_lock(void **state) {
        FX(state);
        gp_store *s = open_store(fx); /* the schema, before the racers */
        struct racer rc[RACERS];
        pthread_t th[RACERS];
        for (int i = 0; i < RACERS; i++) {
                memset(&rc[i], 0, sizeof(rc[i]));
                rc[i].fx = fx;
                rc[i].idx = i;
                assert_int_equal(pthread_create(&th[i], NULL, race_main, &rc[i]), 0);
        }
        for (int i = 0; i < RACERS; i++)
                pthread_join(th[i], NULL);
        int64_t seen[RACE_LOCKS];
        for (int k = 0; k < RACE_LOCKS; k++) {
                int holders = 0;
                for (int i = 0; i < RACERS; i++) {
                        assert_int_equal(rc[i].errors, 0);
                        if (rc[i].tokens[k]) {
                                holders++;
                                seen[k] = rc[i].tokens[k];
                        }
                }
                assert_int_equal(holders, 1);
                for (int j = 0; j < k; j++)
                        assert_true(seen[j] != seen[k]);
        }
        gp_store_close(s);
}

#define GENERIC_TESTS(be)                                                                                              \
        cmocka_unit_test_prestate_setup_teardown(test_put_get_round_trips_every_field, fx_setup, fx_teardown,          \
                                                 (void *)(be)),                                                        \
                cmocka_unit_test_prestate_setup_teardown(test_runs_are_kept_with_their_transaction_filtered_and_capped,\
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_second_put_replaces_the_record, fx_setup, fx_teardown,   \
                                                         (void *)(be)),                                                \
                cmocka_unit_test_prestate_setup_teardown(test_list_is_newest_first_and_filters, fx_setup, fx_teardown, \
                                                         (void *)(be)),                                                \
                cmocka_unit_test_prestate_setup_teardown(test_list_pages_by_before_id, fx_setup, fx_teardown,          \
                                                         (void *)(be)),                                                \
                cmocka_unit_test_prestate_setup_teardown(test_list_rejects_bad_limits_and_honours_stop, fx_setup,      \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_load_active_returns_queued_and_running_oldest_first,     \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_rollback_of_1000_puts_leaves_nothing, fx_setup,          \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_commit_is_seen_after_close_and_reopen, fx_setup,         \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_manual_checkpoint_moves_the_wal_without_losing_rows,     \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_reader_sees_committed_rows_but_not_the_open_transaction, \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_list_by_array_gives_its_elements_newest_first, fx_setup, \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_meta_set_get_and_missing_key, fx_setup, fx_teardown,     \
                                                         (void *)(be)),                                                \
                cmocka_unit_test_prestate_setup_teardown(test_corrupt_rows_are_reported_not_crashed_on, fx_setup,      \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_failed_commit_stores_nothing_and_handle_stays_usable,    \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_failed_put_dooms_the_transaction, fx_setup, fx_teardown, \
                                                         (void *)(be)),                                                \
                cmocka_unit_test_prestate_setup_teardown(test_fault_at_every_step_is_all_or_nothing, fx_setup,         \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_invalid_record_is_refused_and_nothing_written, fx_setup, \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_callback_cannot_reenter_the_handle, fx_setup,            \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_transaction_misuse_is_reported, fx_setup, fx_teardown,   \
                                                         (void *)(be)),                                                \
                cmocka_unit_test_prestate_setup_teardown(test_newer_schema_version_is_refused, fx_setup, fx_teardown,  \
                                                         (void *)(be)),                                                \
                cmocka_unit_test_prestate_setup_teardown(test_version_1_database_is_migrated_keeping_its_tasks,        \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_version_2_database_is_migrated_keeping_its_tasks,        \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_version_3_database_is_migrated_keeping_its_tasks,        \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_version_4_database_is_migrated_keeping_its_tasks,        \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_version_5_database_is_migrated_keeping_its_tasks,        \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_version_6_database_is_migrated_keeping_its_tasks,        \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(                                                      \
                        test_version_7_database_is_migrated_keeping_its_tasks_and_runs, fx_setup, fx_teardown,        \
                        (void *)(be)),                                                                                 \
                cmocka_unit_test_prestate_setup_teardown(test_failed_migration_leaves_the_old_version_whole, fx_setup, \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_schema_version_that_is_not_a_number_is_refused,          \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_usage_rows_round_trip_filter_and_follow_the_transaction, \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_second_claim_is_refused_naming_the_owner, fx_setup,      \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_coord_registry_heartbeats_and_unregister, fx_setup,      \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_coord_registry_is_bounded, fx_setup, fx_teardown,        \
                                                         (void *)(be)),                                                \
                cmocka_unit_test_prestate_setup_teardown(test_coord_locks_exclusion_renew_expiry_release, fx_setup,    \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_coord_grant_sweeps_expired_locks_and_names_them,         \
                                                         fx_setup, fx_teardown, (void *)(be)),                         \
                cmocka_unit_test_prestate_setup_teardown(test_coord_lock_fault_at_every_step_grants_nothing, fx_setup, \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_coord_racing_servers_never_share_a_lock, fx_setup,       \
                                                         fx_teardown, (void *)(be)),                                   \
                cmocka_unit_test_prestate_setup_teardown(test_idem_answers_follow_their_transaction_and_are_pruned,    \
                                                         fx_setup, fx_teardown, (void *)(be))

int main(void) {
        const backend *sq = &sqlite_backend;
        const struct CMUnitTest sqlite_tests[] = {
                GENERIC_TESTS(sq),
                cmocka_unit_test(test_sqlite_bad_urls_are_einval_with_message),
                cmocka_unit_test(test_owner_text_round_trips_and_survives_garbage),
                cmocka_unit_test_prestate_setup_teardown(test_sqlite_creates_missing_parent_directories,
                                                         fx_setup, fx_teardown, (void *)sq),
                cmocka_unit_test_prestate_setup_teardown(test_sqlite_unusable_files_are_estore_with_message,
                                                         fx_setup, fx_teardown, (void *)sq),
                cmocka_unit_test_prestate_setup_teardown(test_sqlite_text_in_integer_column_is_reported,
                                                         fx_setup, fx_teardown, (void *)sq),
                cmocka_unit_test_prestate_setup_teardown(test_sqlite_normal_sync_store_works, fx_setup,
                                                         fx_teardown, (void *)sq),
                cmocka_unit_test_prestate_setup_teardown(test_sqlite_lease_is_not_supported, fx_setup,
                                                         fx_teardown, (void *)sq),
                cmocka_unit_test_prestate_setup_teardown(test_sqlite_full_disk_is_told_apart_and_the_handle_recovers,
                                                         fx_setup, fx_teardown, (void *)sq),
        };
        const backend *pg = &pg_backend;
        const struct CMUnitTest pg_tests[] = {
                GENERIC_TESTS(pg),
                cmocka_unit_test(test_postgres_unreachable_server_is_estore_without_password),
                cmocka_unit_test_prestate_setup_teardown(test_postgres_refused_put_in_batch_fails_the_commit,
                                                         fx_setup, fx_teardown, (void *)pg),
                cmocka_unit_test_prestate_setup_teardown(test_postgres_reconnects_after_losing_the_connection,
                                                         fx_setup, fx_teardown, (void *)pg),
                cmocka_unit_test_prestate_setup_teardown(test_postgres_refused_usage_row_names_its_task,
                                                         fx_setup, fx_teardown, (void *)pg),
                cmocka_unit_test_prestate_setup_teardown(test_postgres_claim_is_taken_again_after_reconnect,
                                                         fx_setup, fx_teardown, (void *)pg),
                cmocka_unit_test_prestate_setup_teardown(test_postgres_lease_acquire_renew_expire_takeover,
                                                         fx_setup, fx_teardown, (void *)pg),
                cmocka_unit_test_prestate_setup_teardown(test_postgres_fenced_handle_stores_nothing_after_a_takeover,
                                                         fx_setup, fx_teardown, (void *)pg),
                cmocka_unit_test_prestate_setup_teardown(test_postgres_members_and_a_single_server_exclude_each_other,
                                                         fx_setup, fx_teardown, (void *)pg),
        };
        int failed = cmocka_run_group_tests_name("store-sqlite", sqlite_tests, NULL, NULL);
        if (!getenv("GPUPOOL_TEST_PG_URL") || !*getenv("GPUPOOL_TEST_PG_URL"))
                fprintf(stderr, "store-postgres: GPUPOOL_TEST_PG_URL is not set, PostgreSQL cases are "
                                "skipped (tests/pg/start-pg.sh starts a server)\n");
        failed += cmocka_run_group_tests_name("store-postgres", pg_tests, NULL, NULL);
        return failed;
}
