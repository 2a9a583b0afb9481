/* test-alerts.c - the alert state machine and rules (src/server/alerts.h):
 * an alert fires once and resolves once, for_s and clear_s hold it back,
 * flapping is damped, a subject that goes away resolves, the API listing,
 * and webhook delivery with retries against a tiny HTTP server in this
 * test (loopback only).  Time is passed in, except for the webhook's real
 * retry backoff (1 s). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "server/alerts.h"

#define S 1000 /* ms */

static void test_step_fires_once_while_the_condition_holds(void **state) {
        gp_alert_sm sm = {0};
        assert_int_equal(gp_alert_step(&sm, false, 0, 0, 0), GP_ALERT_EV_NONE);
        assert_int_equal(gp_alert_step(&sm, true, 1 * S, 0, 0), GP_ALERT_EV_FIRE);
        for (int t = 2; t < 100; t++)
                assert_int_equal(gp_alert_step(&sm, true, t * S, 0, 0), GP_ALERT_EV_NONE);
        assert_int_equal(sm.state, GP_ALERT_FIRING);
        assert_int_equal(sm.fired_ms, 1 * S);
        assert_int_equal(gp_alert_step(&sm, false, 100 * S, 0, 0), GP_ALERT_EV_RESOLVE);
        for (int t = 101; t < 200; t++)
                assert_int_equal(gp_alert_step(&sm, false, t * S, 0, 0), GP_ALERT_EV_NONE);
}

static void test_step_waits_for_s_before_firing(void **state) {
        gp_alert_sm sm = {0};
        assert_int_equal(gp_alert_step(&sm, true, 0, 10 * S, 0), GP_ALERT_EV_NONE);
        assert_int_equal(sm.state, GP_ALERT_PENDING);
        assert_int_equal(gp_alert_step(&sm, true, 9 * S, 10 * S, 0), GP_ALERT_EV_NONE);
        /* a blip shorter than for_s never fires */
        assert_int_equal(gp_alert_step(&sm, false, 9500, 10 * S, 0), GP_ALERT_EV_NONE);
        assert_int_equal(sm.state, GP_ALERT_OK);
        assert_int_equal(gp_alert_step(&sm, true, 11 * S, 10 * S, 0), GP_ALERT_EV_NONE);
        assert_int_equal(gp_alert_step(&sm, true, 20 * S, 10 * S, 0), GP_ALERT_EV_NONE);
        assert_int_equal(gp_alert_step(&sm, true, 21 * S, 10 * S, 0), GP_ALERT_EV_FIRE);
}

static void test_step_resolves_once_after_clear_s(void **state) {
        gp_alert_sm sm = {0};
        assert_int_equal(gp_alert_step(&sm, true, 0, 0, 30 * S), GP_ALERT_EV_FIRE);
        assert_int_equal(gp_alert_step(&sm, false, 1 * S, 0, 30 * S), GP_ALERT_EV_NONE);
        assert_int_equal(sm.state, GP_ALERT_RESOLVING);
        assert_int_equal(gp_alert_step(&sm, false, 30 * S, 0, 30 * S), GP_ALERT_EV_NONE);
        assert_int_equal(gp_alert_step(&sm, false, 31 * S, 0, 30 * S), GP_ALERT_EV_RESOLVE);
        assert_int_equal(gp_alert_step(&sm, false, 32 * S, 0, 30 * S), GP_ALERT_EV_NONE);
        assert_int_equal(sm.state, GP_ALERT_OK);
}

static void test_step_damps_flapping(void **state) {
        /* a condition that flips every second, with clear_s 5: one firing, no
         * resolve while it flaps, one resolve once it has been false 5 s */
        gp_alert_sm sm = {0};
        int fires = 0, resolves = 0;
        for (int t = 0; t < 60; t++) {
                gp_alert_event ev = gp_alert_step(&sm, t % 2 == 0, t * S, 0, 5 * S);
                fires += ev == GP_ALERT_EV_FIRE;
                resolves += ev == GP_ALERT_EV_RESOLVE;
        }
        assert_int_equal(fires, 1);
        assert_int_equal(resolves, 0);
        assert_true(sm.flaps >= 20);
        for (int t = 60; t < 70; t++) {
                gp_alert_event ev = gp_alert_step(&sm, false, t * S, 0, 5 * S);
                fires += ev == GP_ALERT_EV_FIRE;
                resolves += ev == GP_ALERT_EV_RESOLVE;
        }
        assert_int_equal(fires, 1);
        assert_int_equal(resolves, 1);
}

static void test_compare_operators(void **state) {
        assert_true(gp_alert_compare(86, GP_CMP_GT, 85));
        assert_false(gp_alert_compare(85, GP_CMP_GT, 85));
        assert_true(gp_alert_compare(85, GP_CMP_GE, 85));
        assert_true(gp_alert_compare(5, GP_CMP_LT, 10));
        assert_true(gp_alert_compare(10, GP_CMP_LE, 10));
        assert_true(gp_alert_compare(1, GP_CMP_EQ, 1));
        assert_true(gp_alert_compare(0, GP_CMP_NE, 1));
        assert_false(gp_alert_compare(0.0 / 0.0, GP_CMP_NE, 1)); /* NaN never matches */
}

static gp_alerts *rules(const char *yaml, gp_config *cfg) {
        char err[256];
        if (gp_config_load_buffer("t.yaml", yaml, strlen(yaml), cfg, err, sizeof(err)) < 0)
                fail_msg("%s", err);
        gp_alerts *a;
        assert_int_equal(gp_alerts_new(cfg, &a), 0);
        return a;
}

/* One round with the temperature of local:0 (and local:1 when t1 >= 0). */
static size_t round_temp(gp_alerts *a, int64_t now, double t0, double t1, gp_alert_change *ch, size_t max) {
        gp_alerts_begin(a, now);
        gp_alerts_observe(a, "gpu_temp_c", "local:0", t0);
        if (t1 >= 0)
                gp_alerts_observe(a, "gpu_temp_c", "local:1", t1);
        return gp_alerts_end(a, ch, max);
}

static void test_rule_fires_and_resolves_once_per_subject(void **state) {
        gp_config cfg;
        gp_alerts *a = rules("alerts: {rules: [{name: hot, when: \"gpu_temp_c > 80\", clear_s: 2}]}\n", &cfg);
        gp_alert_change ch[8];
        assert_int_equal(round_temp(a, 0, 50, 50, ch, 8), 0);
        assert_int_equal(round_temp(a, 1 * S, 90, 50, ch, 8), 1);
        assert_true(ch[0].fired);
        assert_string_equal(ch[0].rule, "hot");
        assert_string_equal(ch[0].subject, "local:0");
        assert_true(ch[0].value == 90 && ch[0].threshold == 80);
        assert_int_equal(gp_alerts_firing(a), 1);
        for (int t = 2; t < 10; t++)
                assert_int_equal(round_temp(a, t * S, 91, 50, ch, 8), 0);
        /* the second GPU fires on its own */
        assert_int_equal(round_temp(a, 10 * S, 91, 85, ch, 8), 1);
        assert_string_equal(ch[0].subject, "local:1");
        /* cooling: resolved after clear_s, once each */
        assert_int_equal(round_temp(a, 11 * S, 40, 40, ch, 8), 0);
        assert_int_equal(round_temp(a, 12 * S, 40, 40, ch, 8), 0);
        assert_int_equal(round_temp(a, 13 * S, 40, 40, ch, 8), 2);
        assert_false(ch[0].fired);
        assert_false(ch[1].fired);
        assert_int_equal(ch[0].started_ms + ch[1].started_ms, 1 * S + 10 * S);
        assert_int_equal(round_temp(a, 14 * S, 40, 40, ch, 8), 0);
        assert_int_equal(gp_alerts_firing(a), 0);
        gp_alerts_free(a);
}

static void test_subject_that_goes_away_resolves(void **state) {
        gp_config cfg;
        gp_alerts *a = rules("alerts: {rules: [{name: hot, when: \"gpu_temp_c > 80\", clear_s: 0}]}\n", &cfg);
        gp_alert_change ch[8];
        assert_int_equal(round_temp(a, 0, 90, 90, ch, 8), 2);
        /* local:1 is not observed any more */
        assert_int_equal(round_temp(a, 1 * S, 90, -1, ch, 8), 1);
        assert_false(ch[0].fired);
        assert_string_equal(ch[0].subject, "local:1");
        gp_alerts_free(a);
}

static void test_json_lists_active_resolved_and_rules(void **state) {
        gp_config cfg;
        gp_alerts *a = rules("alerts:\n  rules:\n"
                             "    - {name: hot, when: \"gpu_temp_c > 80\", clear_s: 0, severity: critical}\n"
                             "    - {name: quota, when: \"tenant_quota_used_pct > 90\"}\n",
                             &cfg);
        gp_alert_change ch[8];
        round_temp(a, 1700000000000LL, 90, 95, ch, 8);
        round_temp(a, 1700000001000LL, 90, 50, ch, 8); /* local:1 resolves */
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_alerts_json(a, 1700000002000LL, &b), 0);
        assert_int_equal(gp_buf_puts(&b, "}"), 0);
        assert_non_null(strstr(b.data, "{\"alerts\":[{\"rule\":\"hot\",\"when\":\"gpu_temp_c > 80\",\"severity\":\"critical\","
                                       "\"subject\":\"local:0\",\"state\":\"firing\",\"value\":90,\"threshold\":80,"
                                       "\"started_at\":\"2023-11-14T22:13:20.000Z\""));
        assert_non_null(strstr(b.data, "\"resolved\":[{\"rule\":\"hot\""));
        assert_non_null(strstr(b.data, "\"subject\":\"local:1\",\"state\":\"resolved\",\"value\":50"));
        assert_non_null(strstr(b.data, "\"resolved_at\":\"2023-11-14T22:13:21.000Z\""));
        /* the quota rule is evaluated (tenants with a quota in force) */
        assert_non_null(strstr(b.data, "{\"name\":\"quota\",\"when\":\"tenant_quota_used_pct > 90\","
                                       "\"metric\":\"tenant_quota_used_pct\",\"for_s\":0,\"clear_s\":30,"
                                       "\"severity\":\"warning\",\"active\":true}"));
        assert_non_null(strstr(b.data, "\"webhook\":{\"configured\":false,\"queued\":0}"));
        gp_buf_done(&b);
        gp_alerts_free(a);
}

/* One round observing the quota use of tenants a and b (< 0: not observed). */
static size_t round_quota(gp_alerts *a, int64_t now, double qa, double qb, gp_alert_change *ch, size_t max) {
        gp_alerts_begin(a, now);
        gp_alerts_observe(a, "gpu_temp_c", "local:0", 90);
        if (qa >= 0)
                gp_alerts_observe(a, "tenant_quota_used_pct", "acme", qa);
        if (qb >= 0)
                gp_alerts_observe(a, "tenant_quota_used_pct", "globex", qb);
        return gp_alerts_end(a, ch, max);
}

static void test_tenant_key_sees_pool_alerts_and_only_its_own_tenant_alerts(void **state) {
        gp_config cfg;
        gp_alerts *a = rules("alerts:\n  rules:\n"
                             "    - {name: hot, when: \"gpu_temp_c > 80\", clear_s: 0}\n"
                             "    - {name: quota, when: \"tenant_quota_used_pct >= 100\", clear_s: 0}\n"
                             "    - {name: broke, when: \"tenant_balance < 0\"}\n",
                             &cfg);
        gp_alert_change ch[8];
        assert_int_equal(round_quota(a, 1 * S, 100, 150, ch, 8), 3); /* hot, acme, globex fire */
        assert_int_equal(round_quota(a, 2 * S, 100, 10, ch, 8), 1);  /* globex resolves */
        assert_int_equal(gp_alerts_firing(a), 2);
        assert_int_equal(gp_alerts_firing_for(a, NULL), 2);
        assert_int_equal(gp_alerts_firing_for(a, "acme"), 2);
        assert_int_equal(gp_alerts_firing_for(a, "globex"), 1); /* the GPU's only */
        const char *who[] = {NULL, "acme", "globex"};
        for (int k = 0; k < 3; k++) {
                gp_buf b;
                gp_buf_init(&b, 0);
                assert_int_equal(gp_alerts_json_for(a, 3 * S, who[k], &b), 0);
                assert_int_equal(gp_buf_puts(&b, "}"), 0);
                const char *active = strstr(b.data, "\"alerts\":["), *resolved = strstr(b.data, "\"resolved\":[");
                const char *rulesat = strstr(b.data, "\"rules\":[");
                assert_non_null(active);
                assert_non_null(resolved);
                assert_non_null(rulesat);
                /* the pool's alert for everyone */
                assert_non_null(strstr(b.data, "\"subject\":\"local:0\",\"state\":\"firing\""));
                char *acme = strstr(b.data, "\"subject\":\"acme\"");
                char *globex = strstr(b.data, "\"subject\":\"globex\"");
                if (k == 0) { /* admin: acme firing, globex resolved */
                        assert_true(acme && acme < resolved);
                        assert_true(globex && globex > resolved && globex < rulesat);
                } else if (k == 1) {
                        assert_true(acme && acme < resolved);
                        assert_null(globex);
                } else {
                        assert_null(acme);
                        assert_true(globex && globex > resolved && globex < rulesat);
                }
                /* valid JSON shape: no dangling comma where an alert was left out */
                assert_null(strstr(b.data, "[,"));
                assert_null(strstr(b.data, ",,"));
                /* every rule is listed; tenant_balance is not evaluated yet */
                assert_non_null(strstr(b.data, "\"name\":\"broke\""));
                assert_non_null(strstr(b.data, "\"metric\":\"tenant_balance\",\"for_s\":0,\"clear_s\":30,"
                                               "\"severity\":\"warning\",\"active\":false}"));
                gp_buf_done(&b);
        }
        gp_alerts_free(a);
}

/* ---- webhook: a one-thread HTTP server on loopback ---- */

typedef struct hook {
        int fd;                 /* listening socket */
        int port;
        int fail_first;         /* answer 500 to this many requests first */
        int requests;
        char bodies[4][1024];
        int nbodies;
} hook;

static void *hook_main(void *arg) {
        hook *h = arg;
        for (;;) {
                int c = accept(h->fd, NULL, NULL);
                if (c < 0)
                        return NULL;
                char buf[4096];
                size_t n = 0;
                ssize_t k;
                /* headers, then Content-Length bytes */
                while (n < sizeof(buf) - 1 && (k = read(c, buf + n, sizeof(buf) - 1 - n)) > 0) {
                        n += (size_t)k;
                        buf[n] = '\0';
                        char *end = strstr(buf, "\r\n\r\n");
                        char *cl = strcasestr(buf, "Content-Length:");
                        if (end && cl && (size_t)(end + 4 - buf) + (size_t)atoi(cl + 15) <= n)
                                break;
                }
                buf[n] = '\0';
                h->requests++;
                const char *resp;
                if (h->requests <= h->fail_first) {
                        resp = "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                } else {
                        char *body = strstr(buf, "\r\n\r\n");
                        if (body && h->nbodies < 4)
                                snprintf(h->bodies[h->nbodies++], sizeof(h->bodies[0]), "%s", body + 4);
                        resp = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                }
                ssize_t w = write(c, resp, strlen(resp));
                (void)w;
                close(c);
        }
}

static int results_ok, results_failed;
static pthread_mutex_t results_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_result(void *ud, const char *result) {
        pthread_mutex_lock(&results_mu);
        if (!strcmp(result, "ok"))
                results_ok++;
        else
                results_failed++;
        pthread_mutex_unlock(&results_mu);
}

static int results(void) {
        pthread_mutex_lock(&results_mu);
        int n = results_ok + results_failed;
        pthread_mutex_unlock(&results_mu);
        return n;
}

static void test_webhook_posts_json_and_retries_after_a_failure(void **state) {
        hook h = {.fail_first = 1};
        h.fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        assert_int_equal(bind(h.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        socklen_t sl = sizeof(sa);
        getsockname(h.fd, (struct sockaddr *)&sa, &sl);
        h.port = ntohs(sa.sin_port);
        assert_int_equal(listen(h.fd, 8), 0);
        pthread_t th;
        pthread_create(&th, NULL, hook_main, &h);

        char yaml[512];
        snprintf(yaml, sizeof(yaml),
                 "alerts: {webhook: \"http://127.0.0.1:%d/hook\", webhook_retries: 2, webhook_timeout_s: 5,"
                 " rules: [{name: hot, when: \"gpu_temp_c > 80\", clear_s: 0}]}\n",
                 h.port);
        gp_config cfg;
        gp_alerts *a = rules(yaml, &cfg);
        results_ok = results_failed = 0;
        assert_int_equal(gp_alerts_start(a, "sim", on_result, NULL), 0);
        gp_alert_change ch[4];
        size_t n = round_temp(a, 1700000000000LL, 90, -1, ch, 4);
        assert_int_equal(n, 1);
        gp_alerts_enqueue(a, &ch[0]); /* returns at once */
        for (int i = 0; i < 100 && results() < 1; i++)
                usleep(50 * 1000);
        assert_int_equal(results_ok, 1);
        assert_int_equal(h.requests, 2); /* a 500, then after 1 s the retry */
        assert_non_null(strstr(h.bodies[0], "\"rule\":\"hot\""));
        assert_non_null(strstr(h.bodies[0], "\"state\":\"firing\""));
        assert_non_null(strstr(h.bodies[0], "\"subject\":\"local:0\""));
        assert_non_null(strstr(h.bodies[0], "\"backend\":\"sim\""));
        gp_alerts_free(a); /* stops the thread */
        shutdown(h.fd, SHUT_RDWR);
        close(h.fd);
        pthread_join(th, NULL);
}

static void test_webhook_gives_up_after_its_retries(void **state) {
        /* a port nobody listens on: refused at once, 1 retry after 1 s */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        socklen_t sl = sizeof(sa);
        getsockname(fd, (struct sockaddr *)&sa, &sl);
        close(fd);
        char yaml[512];
        snprintf(yaml, sizeof(yaml),
                 "alerts: {webhook: \"http://127.0.0.1:%d/\", webhook_retries: 1,"
                 " rules: [{name: hot, when: \"gpu_temp_c > 80\", clear_s: 0}]}\n",
                 ntohs(sa.sin_port));
        gp_config cfg;
        gp_alerts *a = rules(yaml, &cfg);
        results_ok = results_failed = 0;
        assert_int_equal(gp_alerts_start(a, "sim", on_result, NULL), 0);
        gp_alert_change ch[4];
        assert_int_equal(round_temp(a, 0, 90, -1, ch, 4), 1);
        gp_alerts_enqueue(a, &ch[0]);
        for (int i = 0; i < 100 && results() < 1; i++)
                usleep(50 * 1000);
        assert_int_equal(results_failed, 1);
        assert_int_equal(results_ok, 0);
        gp_alerts_free(a);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_step_fires_once_while_the_condition_holds),
                cmocka_unit_test(test_step_waits_for_s_before_firing),
                cmocka_unit_test(test_step_resolves_once_after_clear_s),
                cmocka_unit_test(test_step_damps_flapping),
                cmocka_unit_test(test_compare_operators),
                cmocka_unit_test(test_rule_fires_and_resolves_once_per_subject),
                cmocka_unit_test(test_subject_that_goes_away_resolves),
                cmocka_unit_test(test_json_lists_active_resolved_and_rules),
                cmocka_unit_test(test_tenant_key_sees_pool_alerts_and_only_its_own_tenant_alerts),
                cmocka_unit_test(test_webhook_posts_json_and_retries_after_a_failure),
                cmocka_unit_test(test_webhook_gives_up_after_its_retries),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
