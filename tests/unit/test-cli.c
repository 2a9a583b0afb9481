/* test-cli.c - unit tests of the command-line client (src/cli/).
 *
 * Three kinds of test:
 *   - argv -> gp_cli_cmd (gp_cli_parse): validation, the submit body;
 *   - JSON -> text (format.c): status block, aligned tables, sanitising;
 *   - whole commands through gp_cli_main_io against a canned HTTP responder
 *     on a free loopback port (request in, fixed bytes out, as in curl's
 *     tests/data): exit codes 1/2/3, messages, what was sent, streaming,
 *     and `run` (lease, env of the command, heartbeat, lease lost,
 *     Ctrl-C while queued, release with the exit code).
 * The responder is not a gpupool server; end-to-end behaviour against the
 * real daemon is tested in tests/blackbox/test_cli.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"
#include "cli/cli-int.h"

/* ---- helpers -------------------------------------------------------- */

#define ARGV(...) ((char *[]){"gpupool", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"gpupool", __VA_ARGS__}) / sizeof(char *)))

struct parsed {
        gp_cli_cmd c;
        gp_buf err;
        int rc;
};

static void parse_env(struct parsed *p, int argc, char **argv, const char *api, const char *key) {
        gp_cli_cmd_init(&p->c);
        gp_buf_init(&p->err, 1 << 16);
        p->rc = gp_cli_parse(argc, argv, api, key, &p->c, &p->err);
}

static void parse_done(struct parsed *p) {
        gp_cli_cmd_done(&p->c);
        gp_buf_done(&p->err);
}

#define PARSE(p, ...) parse_env(p, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), NULL, NULL)

static const char *err_text(struct parsed *p) {
        return p->err.data ? p->err.data : "";
}

static int64_t body_int(const gp_cli_cmd *c, const char *k) {
        json_t *v = json_object_get(c->body, k);
        assert_true(json_is_integer(v));
        return json_integer_value(v);
}

static const char *body_str(const gp_cli_cmd *c, const char *k) {
        json_t *v = json_object_get(c->body, k);
        assert_true(json_is_string(v));
        return json_string_value(v);
}

/* read a tmpfile back (caller frees) */
static char *slurp(FILE *f) {
        fflush(f);
        long n = ftell(f);
        char *s = calloc(1, (size_t)n + 1);
        assert_non_null(s);
        rewind(f);
        size_t got = fread(s, 1, (size_t)n, f);
        s[got] = '\0';
        return s;
}

struct ran {
        int ex;
        char *out, *err;
};

static void run_cli(struct ran *r, int argc, char **argv) {
        FILE *o = tmpfile(), *e = tmpfile();
        assert_non_null(o);
        assert_non_null(e);
        r->ex = gp_cli_main_io(argc, argv, o, e);
        r->out = slurp(o);
        r->err = slurp(e);
        fclose(o);
        fclose(e);
}

static void ran_done(struct ran *r) {
        free(r->out);
        free(r->err);
}

static int free_port(void) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
        close(fd);
        return ntohs(a.sin_port);
}

/* ---- canned HTTP responder ------------------------------------------ */

struct srv;
typedef char *(*route_fn)(struct srv *s, const char *req);

struct srv {
        int lfd, port;
        pthread_t thr;
        volatile int stop;
        pthread_mutex_t mu;
        int active;             /* connection threads running */
        char *reqs[256];        /* requests seen, in order */
        int nreq;
        route_fn route;
        int n_hb, n_cancel, n_release, n_wait;
        char release_body[256];
        int wait_hold_ms;       /* GET ?wait= holds this long before answering */
};

static char *http_resp(int status, const char *extra, const char *body) {
        char *r;
        int n = asprintf(&r,
                         "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n%s\r\n%s",
                         status, strlen(body), extra ? extra : "", body);
        assert_true(n > 0);
        return r;
}

struct conn_arg {
        struct srv *s;
        int fd;
};

static void *conn_main(void *arg) {
        struct conn_arg *ca = arg;
        struct srv *s = ca->s;
        int fd = ca->fd;
        free(ca);
        gp_buf req;
        gp_buf_init(&req, 1 << 20);
        char buf[4096];
        size_t need = 0;
        for (;;) {
                ssize_t n = recv(fd, buf, sizeof(buf), 0);
                if (n <= 0)
                        break;
                gp_buf_append(&req, buf, (size_t)n);
                char *end = strstr(req.data, "\r\n\r\n");
                if (end && !need) {
                        char *cl = strcasestr(req.data, "Content-Length:");
                        size_t body = cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0;
                        need = (size_t)(end + 4 - req.data) + body;
                }
                if (need && req.len >= need)
                        break;
        }
        char *resp = req.data ? s->route(s, req.data) : NULL;
        pthread_mutex_lock(&s->mu);
        if (s->nreq < 256)
                s->reqs[s->nreq++] = gp_buf_steal(&req);
        pthread_mutex_unlock(&s->mu);
        if (resp) {
                size_t off = 0, len = strlen(resp);
                while (off < len) {
                        ssize_t w = send(fd, resp + off, len - off, MSG_NOSIGNAL);
                        if (w <= 0)
                                break;
                        off += (size_t)w;
                }
                free(resp);
        }
        close(fd);
        gp_buf_done(&req);
        pthread_mutex_lock(&s->mu);
        s->active--;
        pthread_mutex_unlock(&s->mu);
        return NULL;
}

static void *srv_main(void *arg) {
        struct srv *s = arg;
        while (!s->stop) {
                struct pollfd p = {.fd = s->lfd, .events = POLLIN};
                if (poll(&p, 1, 50) <= 0)
                        continue;
                int fd = accept(s->lfd, NULL, NULL);
                if (fd < 0)
                        continue;
                struct conn_arg *ca = malloc(sizeof(*ca));
                ca->s = s;
                ca->fd = fd;
                pthread_t t;
                pthread_mutex_lock(&s->mu);
                s->active++;
                pthread_mutex_unlock(&s->mu);
                pthread_create(&t, NULL, conn_main, ca);
                pthread_detach(t);
        }
        return NULL;
}

static void srv_start(struct srv *s, route_fn route) {
        memset(s, 0, sizeof(*s));
        pthread_mutex_init(&s->mu, NULL);
        s->route = route;
        s->lfd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(s->lfd, 64), 0);
        getsockname(s->lfd, (struct sockaddr *)&a, &len);
        s->port = ntohs(a.sin_port);
        pthread_create(&s->thr, NULL, srv_main, s);
}

static void srv_stop(struct srv *s) {
        s->stop = 1;
        pthread_join(s->thr, NULL);
        close(s->lfd);
        for (int i = 0; i < 300; i++) {
                pthread_mutex_lock(&s->mu);
                int a = s->active;
                pthread_mutex_unlock(&s->mu);
                if (!a)
                        break;
                usleep(10000);
        }
        for (int i = 0; i < s->nreq; i++)
                free(s->reqs[i]);
        pthread_mutex_destroy(&s->mu);
}

static char *srv_api(struct srv *s) {
        static char api[64];
        snprintf(api, sizeof(api), "http://127.0.0.1:%d", s->port);
        return api;
}

static bool starts(const char *req, const char *prefix) {
        return strncmp(req, prefix, strlen(prefix)) == 0;
}

static const char *body_of(const char *req) {
        const char *b = strstr(req, "\r\n\r\n");
        return b ? b + 4 : "";
}

/* ---- parsing -------------------------------------------------------- */

static void test_submit_builds_body_from_every_option(void **state) {
        struct parsed p;
        PARSE(&p, "submit", "--gpus", "2", "--mem=4096", "--priority", "high", "--name", "test-task",
              "--model", "deepseek-7b", "--gpu-model", "*4090*", "--exclusive", "--preemptible",
              "--timeout", "3600", "--queue-timeout", "60", "--env", "A=1", "--env", "B=x=y",
              "--workdir", "/data", "--tenant", "tenant-1", "--", "python3", "train.py", "--lr", "0.1");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.verb, GP_CLI_SUBMIT);
        assert_int_equal(body_int(&p.c, "gpu_request"), 2);
        assert_int_equal(body_int(&p.c, "memory_mb"), 4096);
        assert_int_equal(body_int(&p.c, "priority"), 2);
        assert_string_equal(body_str(&p.c, "name"), "test-task");
        assert_string_equal(body_str(&p.c, "model"), "deepseek-7b");
        assert_string_equal(body_str(&p.c, "gpu_model"), "*4090*");
        assert_true(json_is_true(json_object_get(p.c.body, "exclusive")));
        assert_true(json_is_true(json_object_get(p.c.body, "preemptible")));
        assert_int_equal(body_int(&p.c, "timeout_s"), 3600);
        assert_int_equal(body_int(&p.c, "queue_timeout_s"), 60);
        assert_string_equal(body_str(&p.c, "workdir"), "/data");
        assert_string_equal(body_str(&p.c, "tenant_id"), "tenant-1");
        json_t *env = json_object_get(p.c.body, "env");
        assert_string_equal(json_string_value(json_object_get(env, "A")), "1");
        assert_string_equal(json_string_value(json_object_get(env, "B")), "x=y");
        json_t *cmd = json_object_get(p.c.body, "command");
        assert_int_equal(json_array_size(cmd), 4);
        assert_string_equal(json_string_value(json_array_get(cmd, 0)), "python3");
        assert_string_equal(json_string_value(json_array_get(cmd, 2)), "--lr");
        assert_null(json_object_get(p.c.body, "lease_ttl_s"));
        parse_done(&p);
        PARSE(&p, "submit", "--elastic", "2:8", "train.sh");
        assert_int_equal(p.rc, 0);
        json_t *el = json_object_get(p.c.body, "elastic");
        assert_int_equal(json_integer_value(json_object_get(el, "min_gpus")), 2);
        assert_int_equal(json_integer_value(json_object_get(el, "max_gpus")), 8);
        parse_done(&p);
}

static void test_submit_sends_only_given_fields(void **state) {
        struct parsed p;
        PARSE(&p, "submit", "true");
        assert_int_equal(p.rc, 0);
        assert_int_equal(json_object_size(p.c.body), 1);
        assert_non_null(json_object_get(p.c.body, "command"));
        parse_done(&p);
}

static void test_first_word_starts_command_and_later_options_belong_to_it(void **state) {
        struct parsed p;
        PARSE(&p, "submit", "--gpus", "1", "python3", "x.py", "--gpus", "3", "--json");
        assert_int_equal(p.rc, 0);
        assert_int_equal(body_int(&p.c, "gpu_request"), 1);
        assert_false(p.c.json);
        json_t *cmd = json_object_get(p.c.body, "command");
        assert_int_equal(json_array_size(cmd), 5);
        assert_string_equal(json_string_value(json_array_get(cmd, 4)), "--json");
        parse_done(&p);
}

static void test_client_options_anywhere_before_command_args(void **state) {
        struct parsed p;
        PARSE(&p, "--json", "--api", "http://h:1/", "submit", "--key", "k1", "--gpus", "2", "--api=http://g:2",
              "--", "ls");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.json);
        assert_string_equal(p.c.api, "http://g:2");
        assert_string_equal(p.c.key, "k1");
        parse_done(&p);

        PARSE(&p, "status", "42", "--json", "--api", "10.0.0.1:8080");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.json);
        assert_int_equal(p.c.id, 42);
        assert_string_equal(p.c.api, "http://10.0.0.1:8080");
        parse_done(&p);
}

static void test_priority_accepts_numbers_tiers_and_names(void **state) {
        static const struct {
                char *in;
                int want;
        } ok[] = {{"0", 0}, {"9", 9}, {"P3", 3}, {"p7", 7}, {"critical", 0}, {"HIGH", 2},
                  {"normal", 5}, {"low", 7}, {"background", 9}};
        for (size_t i = 0; i < GP_ARRAY_SIZE(ok); i++) {
                struct parsed p;
                PARSE(&p, "submit", "--priority", ok[i].in, "ls");
                assert_int_equal(p.rc, 0);
                assert_int_equal(body_int(&p.c, "priority"), ok[i].want);
                parse_done(&p);
        }
}

static void test_priority_out_of_range_is_usage_error_naming_range(void **state) {
        static char *bad[] = {"10", "-1", "P10", "urgent", "", "5x"};
        for (size_t i = 0; i < GP_ARRAY_SIZE(bad); i++) {
                struct parsed p;
                PARSE(&p, "submit", "--priority", bad[i], "ls");
                assert_int_equal(p.rc, -EINVAL);
                assert_non_null(strstr(err_text(&p), "--priority"));
                assert_non_null(strstr(err_text(&p), "0..9"));
                assert_non_null(strstr(err_text(&p), "critical|high|normal|low|background"));
                assert_non_null(strstr(err_text(&p), "usage: gpupool submit"));
                parse_done(&p);
        }
}

static void test_numbers_are_strict_and_bounded(void **state) {
        static char *cases[][2] = {
                {"--gpus", "0"},      {"--gpus", "1025"},    {"--gpus", "2x"},   {"--gpus", " 2"},
                {"--gpus", ""},       {"--gpus", "+2"},     {"--mem", "-1"},    {"--mem", "1e3"},
                {"--timeout", "-5"},  {"--timeout", "1.5"}, {"--queue-timeout", "x"},
                {"--mem", "99999999999999999999"},
                {"--elastic", "4"},   {"--elastic", ":4"},  {"--elastic", "1:"}, {"--elastic", "0:4"},
                {"--elastic", "1:257"}, {"--elastic", "1:4:8"}, {"--elastic", "a:b"},
        };
        for (size_t i = 0; i < GP_ARRAY_SIZE(cases); i++) {
                struct parsed p;
                PARSE(&p, "submit", cases[i][0], cases[i][1], "ls");
                assert_int_equal(p.rc, -EINVAL);
                assert_non_null(strstr(err_text(&p), cases[i][0]));
                parse_done(&p);
        }
}

static void test_env_must_contain_equals(void **state) {
        struct parsed p;
        PARSE(&p, "submit", "--env", "FOO", "ls");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--env"));
        assert_non_null(strstr(err_text(&p), "K=V"));
        parse_done(&p);
        PARSE(&p, "submit", "--env", "=v", "ls");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
        PARSE(&p, "submit", "--env", "EMPTY=", "ls");
        assert_int_equal(p.rc, 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(p.c.body, "env"), "EMPTY")), "");
        parse_done(&p);
}

static void test_submit_without_command_is_usage_error(void **state) {
        struct parsed p;
        /* submit: no COMMAND means a script on stdin (cli.c reads it, or says
         * "missing COMMAND" when stdin is a terminal: test_cli_slurm.py) */
        PARSE(&p, "submit", "--gpus", "2");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.no_command);
        assert_null(json_object_get(p.c.body, "command"));
        parse_done(&p);
        PARSE(&p, "submit", "--gpus", "2", "--");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.no_command);
        parse_done(&p);
        PARSE(&p, "run", "--ttl", "9");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
}

static void test_names_must_be_clean_and_short(void **state) {
        char longname[200];
        memset(longname, 'a', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        struct parsed p;
        PARSE(&p, "submit", "--name", longname, "ls");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--name"));
        parse_done(&p);
        PARSE(&p, "submit", "--name", "a\nb", "ls");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
        /* the server's text rule (base/text.h): no tab, NEL, line separators or bidi controls */
        static char *bad[][2] = {{"--name", "a\tb"}, {"--name", "a\xc2\x85" "b"},
                                 {"--model", "m\xe2\x80\xa8"}, {"--gpu-model", "A100\xe2\x80\xae"}};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                PARSE(&p, "submit", bad[i][0], bad[i][1], "ls");
                assert_int_equal(p.rc, -EINVAL);
                assert_non_null(strstr(err_text(&p), bad[i][0]));
                parse_done(&p);
        }
        PARSE(&p, "submit", "--name", "训练任务", "ls");
        assert_int_equal(p.rc, 0);
        parse_done(&p);
        PARSE(&p, "submit", "--tenant", "", "ls");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
}

static void test_run_is_a_lease_with_local_env_and_ttl(void **state) {
        struct parsed p;
        PARSE(&p, "run", "--gpus", "2", "--env", "A=1", "--workdir", "/tmp", "--", "nvidia-smi", "-L");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.verb, GP_CLI_RUN);
        assert_null(json_object_get(p.c.body, "command"));
        assert_null(json_object_get(p.c.body, "env"));
        assert_null(json_object_get(p.c.body, "workdir"));
        assert_int_equal(body_int(&p.c, "lease_ttl_s"), 30);
        assert_int_equal(body_int(&p.c, "gpu_request"), 2);
        assert_int_equal(p.c.n_env, 1);
        assert_string_equal(p.c.env[0], "A=1");
        assert_string_equal(p.c.workdir, "/tmp");
        assert_int_equal(p.c.argc_cmd, 2);
        assert_string_equal(p.c.argv_cmd[0], "nvidia-smi");
        assert_null(p.c.argv_cmd[2]);
        parse_done(&p);

        PARSE(&p, "run", "--ttl", "12", "--", "true");
        assert_int_equal(p.rc, 0);
        assert_int_equal(body_int(&p.c, "lease_ttl_s"), 12);
        parse_done(&p);

        PARSE(&p, "run", "--ttl", "1", "--", "true");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--ttl"));
        parse_done(&p);

        PARSE(&p, "submit", "--ttl", "12", "--", "true");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--ttl"));
        parse_done(&p);
}

static void test_api_and_key_come_from_env_unless_given(void **state) {
        struct parsed p;
        parse_env(&p, ARGC("ps"), ARGV("ps"), NULL, NULL);
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.api, "http://127.0.0.1:8080");
        assert_null(p.c.key);
        parse_done(&p);

        parse_env(&p, ARGC("ps"), ARGV("ps"), "https://gpu.example.com/", "envkey");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.api, "https://gpu.example.com");
        assert_string_equal(p.c.key, "envkey");
        parse_done(&p);

        parse_env(&p, ARGC("ps", "--key", "k2", "--api", "http://x:1"), ARGV("ps", "--key", "k2", "--api", "http://x:1"),
                  "https://gpu.example.com/", "envkey");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.api, "http://x:1");
        assert_string_equal(p.c.key, "k2");
        parse_done(&p);

        parse_env(&p, ARGC("ps"), ARGV("ps"), "ftp://x", NULL);
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "GPUPOOL_API"));
        parse_done(&p);

        PARSE(&p, "ps", "--api", "HTTP://Gpu.Example:1//");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.api, "http://Gpu.Example:1");
        parse_done(&p);
        PARSE(&p, "ps", "--api", "h:1,HTTP://g:2/,https://k");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.api, "http://h:1,http://g:2,https://k");
        parse_done(&p);
        static char *bad_api[] = {"/", "http://", "http:///x", "ftp://h", "http://h/?q=1", "http://h #",
                                  "http://h:1,ftp://g", "http://h:1,", ",http://h:1"};
        for (size_t i = 0; i < GP_ARRAY_SIZE(bad_api); i++) {
                PARSE(&p, "ps", "--api", bad_api[i]);
                assert_int_equal(p.rc, -EINVAL);
                assert_non_null(strstr(err_text(&p), "--api"));
                parse_done(&p);
        }

        PARSE(&p, "ps", "--key", "a b");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
        PARSE(&p, "ps", "--key", "a\r\nX-Evil: 1");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
}

static void test_cacert_names_the_ca_of_https_servers(void **state) {
        struct parsed p;
        PARSE(&p, "ps");
        assert_int_equal(p.rc, 0);
        assert_null(p.c.cacert);
        parse_done(&p);
        PARSE(&p, "--cacert", "/etc/gpupool/ca.crt", "ps", "--api", "https://10.0.0.5:8080");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.cacert, "/etc/gpupool/ca.crt");
        parse_done(&p);
        PARSE(&p, "ca", "--cacert=/tmp/x.pem");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.verb, GP_CLI_CA);
        assert_string_equal(p.c.cacert, "/tmp/x.pem");
        parse_done(&p);
        PARSE(&p, "ps", "--cacert", "");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--cacert"));
        parse_done(&p);
        PARSE(&p, "ca", "extra");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
}

static void test_ps_options_are_validated(void **state) {
        struct parsed p;
        PARSE(&p, "ps", "--all", "--limit", "5", "--state", "failed");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.all);
        assert_int_equal(p.c.limit, 5);
        assert_string_equal(p.c.state, "failed");
        parse_done(&p);
        PARSE(&p, "ps", "--state", "active");
        assert_int_equal(p.rc, 0);
        parse_done(&p);
        PARSE(&p, "ps", "--state", "done");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--state"));
        parse_done(&p);
        PARSE(&p, "ps", "--limit", "0");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
        PARSE(&p, "ps", "--limit", "1001");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
        PARSE(&p, "ps", "extra");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "usage: gpupool ps"));
        parse_done(&p);
}

static void test_task_ids_are_strict(void **state) {
        static char *bad[] = {"0", "-1", "12abc", "", "abc", "1 ", "99999999999999999999"};
        for (size_t i = 0; i < GP_ARRAY_SIZE(bad); i++) {
                struct parsed p;
                PARSE(&p, "status", bad[i]);
                assert_int_equal(p.rc, -EINVAL);
                parse_done(&p);
        }
        struct parsed p;
        PARSE(&p, "logs", "-f", "7");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.follow);
        assert_int_equal(p.c.id, 7);
        parse_done(&p);
        PARSE(&p, "cancel");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "missing task ID"));
        parse_done(&p);
        PARSE(&p, "cancel", "1", "2"); /* several ids: scancel 1 2 */
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.n_refs, 2);
        parse_done(&p);
        PARSE(&p, "status", "1", "2");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
}

static void test_unknown_options_and_commands_are_named(void **state) {
        struct parsed p;
        PARSE(&p, "ps", "--bogus");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--bogus"));
        parse_done(&p);
        PARSE(&p, "frobnicate");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "unknown command 'frobnicate'"));
        parse_done(&p);
        PARSE(&p, "gpus", "--follow");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--follow"));
        parse_done(&p);
        PARSE(&p, "ps", "--limit");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "needs a value"));
        parse_done(&p);
        PARSE(&p, "ps", "--all=yes");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
}

static void test_help_forms(void **state) {
        struct parsed p;
        PARSE(&p, "--help");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.verb, GP_CLI_HELP);
        assert_null(p.c.topic);
        parse_done(&p);
        PARSE(&p, "help", "logs");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.topic, "logs");
        parse_done(&p);
        PARSE(&p, "submit", "--help");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.help);
        parse_done(&p);
        PARSE(&p, "--version");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.verb, GP_CLI_VERSION);
        parse_done(&p);
}

/* ---- formatting ----------------------------------------------------- */

static json_t *load(const char *s) {
        json_error_t e;
        json_t *j = json_loads(s, 0, &e);
        if (!j)
                fail_msg("bad test JSON: %s", e.text);
        return j;
}

static char *format_with(int (*fn)(const json_t *, gp_buf *), const char *js) {
        json_t *j = load(js);
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(fn(j, &b), 0);
        json_decref(j);
        return gp_buf_steal(&b);
}

/* the clock of the node and join-token tables in these tests */
#define NOW_MS INT64_C(1795000000000)

static int nodes_now(const json_t *j, gp_buf *b) {
        return gp_cli_format_nodes(j, NOW_MS, b);
}

static int tokens_now(const json_t *j, gp_buf *b) {
        return gp_cli_format_join_tokens(j, NOW_MS, b);
}

static void test_status_block_shows_queue_position_and_reason_while_queued(void **state) {
        json_t *t = load("{\"id\":42,\"tenant_id\":\"default\",\"name\":\"test-task\",\"kind\":\"batch\","
                         "\"state\":\"queued\",\"priority\":5,\"gpu_request\":2,\"memory_mb\":4096,"
                         "\"command\":[\"python3\",\"train.py\",\"a b\"],\"gpus\":[],\"cuda_visible_devices\":\"\","
                         "\"queue_position\":3,\"reason\":\"waiting for 2 free GPUs\",\"preempt_count\":0,"
                         "\"exit_code\":null,\"submitted_at\":\"2026-11-22T11:40:00.000Z\","
                         "\"started_at\":null,\"finished_at\":null,\"backend\":\"sim\"}");
        gp_buf b;
        gp_buf_init(&b, 0);
        int64_t now;
        assert_int_equal(gp_time_parse("2026-11-22T11:45:00Z", &now), 0);
        assert_int_equal(gp_cli_format_status(t, now, &b), 0);
        const char *s = b.data;
        assert_non_null(strstr(s, "id:                   42\n"));
        assert_non_null(strstr(s, "name:                 test-task\n"));
        assert_non_null(strstr(s, "state:                queued\n"));
        assert_non_null(strstr(s, "queue position:       3\n"));
        assert_non_null(strstr(s, "reason:               waiting for 2 free GPUs\n"));
        assert_non_null(strstr(s, "priority:             P5 (normal)\n"));
        assert_non_null(strstr(s, "GPUs requested:       2 x 4096 MB\n"));
        assert_non_null(strstr(s, "command:              python3 train.py 'a b'\n"));
        assert_non_null(strstr(s, "submitted:            2026-11-22T11:40:00.000Z (5m00s ago)\n"));
        assert_non_null(strstr(s, "backend:              sim (simulated GPUs)\n"));
        assert_null(strstr(s, "exit code"));
        assert_null(strstr(s, "started:"));
        json_decref(t);
        gp_buf_done(&b);
}

static void test_status_block_of_finished_task_shows_devices_exit_code_and_times(void **state) {
        json_t *t = load("{\"id\":7,\"name\":\"\",\"state\":\"failed\",\"priority\":0,\"gpu_request\":1,"
                         "\"memory_mb\":0,\"gpus\":[{\"node\":\"local\",\"index\":1,\"uuid\":\"GPU-1\"}],"
                         "\"cuda_visible_devices\":\"1\",\"queue_position\":null,\"reason\":\"exited with code 3\","
                         "\"exit_code\":3,\"submitted_at\":\"2026-11-22T11:40:00Z\","
                         "\"started_at\":\"2026-11-22T11:40:01Z\",\"finished_at\":\"2026-11-22T11:42:01Z\"}");
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_status(t, 0, &b), 0);
        const char *s = b.data;
        assert_non_null(strstr(s, "name:                 -\n"));
        assert_non_null(strstr(s, "priority:             P0 (critical)\n"));
        assert_non_null(strstr(s, "GPUs requested:       1 (whole GPU)\n"));
        assert_non_null(strstr(s, "GPUs:                 local:1 (GPU-1)\n"));
        assert_non_null(strstr(s, "CUDA_VISIBLE_DEVICES: 1\n"));
        assert_non_null(strstr(s, "exit code:            3\n"));
        assert_non_null(strstr(s, "finished:             2026-11-22T11:42:01Z\n"));
        assert_non_null(strstr(s, "run time:             2m00s\n"));
        assert_null(strstr(s, "queue position"));
        json_decref(t);
        gp_buf_done(&b);
}

/* the column of `word` in `line` must equal the column of `head` in the header */
static size_t col_of(const char *line, const char *word) {
        const char *p = strstr(line, word);
        assert_non_null(p);
        char tmp[512];
        size_t n = (size_t)(p - line);
        assert_true(n < sizeof(tmp));
        memcpy(tmp, line, n);
        tmp[n] = '\0';
        return gp_cli_display_width(tmp);
}

static void test_ps_table_is_aligned_by_display_width(void **state) {
        const char *js = "{\"backend\":\"sim\",\"next_after\":null,\"tasks\":["
                         "{\"id\":10,\"name\":\"训练\",\"tenant_id\":\"default\",\"state\":\"running\",\"priority\":2,"
                         "\"gpu_request\":2,\"cuda_visible_devices\":\"0,1\",\"exit_code\":null},"
                         "{\"id\":9,\"name\":\"a-much-longer-name\",\"tenant_id\":\"t\",\"state\":\"queued\",\"priority\":5,"
                         "\"gpu_request\":1,\"cuda_visible_devices\":\"\",\"exit_code\":null}]}";
        json_t *j = load(js);
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_ps(j, 0, false, &b), 0);
        char *lines[4] = {0};
        int n = 0;
        for (char *save, *l = strtok_r(b.data, "\n", &save); l && n < 4; l = strtok_r(NULL, "\n", &save))
                lines[n++] = l;
        assert_int_equal(n, 4);
        assert_string_equal(lines[0], "backend: sim (simulated GPUs)");
        assert_true(starts(lines[1], "ID  NAME"));
        assert_null(strstr(lines[1], "EXIT"));  /* optional column with no values is left out */
        assert_int_equal(col_of(lines[1], "TENANT"), col_of(lines[2], "default"));
        assert_int_equal(col_of(lines[1], "TENANT"), col_of(lines[3], "t "));
        assert_int_equal(col_of(lines[1], "STATE"), col_of(lines[2], "running"));
        assert_int_equal(col_of(lines[1], "STATE"), col_of(lines[3], "queued"));
        assert_int_equal(col_of(lines[1], "DEVICES"), col_of(lines[2], "0,1"));
        assert_non_null(strstr(lines[2], "P2"));
        assert_true(lines[3][strlen(lines[3]) - 1] != ' '); /* no trailing blanks */
        json_decref(j);
        gp_buf_done(&b);
}

static void test_ps_shows_what_an_elastic_task_holds_and_its_range(void **state) {
        json_t *j = load("{\"tasks\":[{\"id\":3,\"name\":\"trainer\",\"tenant_id\":\"a\",\"state\":\"running\","
                         "\"priority\":5,\"gpu_request\":1,\"elastic\":{\"min_gpus\":1,\"max_gpus\":4},"
                         "\"gpus\":[{\"index\":0},{\"index\":1}],\"cuda_visible_devices\":\"0,1\"},"
                         "{\"id\":4,\"name\":\"waiting\",\"tenant_id\":\"a\",\"state\":\"queued\","
                         "\"priority\":5,\"gpu_request\":2,\"elastic\":{\"min_gpus\":2,\"max_gpus\":8},\"gpus\":[]}]}");
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_ps(j, 0, false, &b), 0);
        assert_non_null(strstr(b.data, "2 (1-4)"));
        assert_non_null(strstr(b.data, "2 (2-8)"));
        json_decref(j);
        gp_buf_done(&b);
}

static void test_empty_lists_say_so(void **state) {
        char *s = format_with(gp_cli_format_queue, "{\"backend\":\"nvml\",\"total\":0,\"tasks\":[]}");
        assert_string_equal(s, "backend: nvml\nqueue is empty\n");
        free(s);
        json_t *j = load("{\"tasks\":[]}");
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_ps(j, 0, false, &b), 0);
        assert_non_null(strstr(b.data, "--all"));
        json_decref(j);
        gp_buf_done(&b);
}

static void test_server_strings_cannot_inject_terminal_escapes(void **state) {
        char *s = format_with(nodes_now,
                              "{\"nodes\":[{\"name\":\"evil\\u001b[2J\\r\\n\",\"state\":\"up\",\"gpus\":4,"
                              "\"gpus_healthy\":4,\"backend\":\"sim\"}]}");
        assert_null(strchr(s, '\x1b'));
        assert_null(strchr(s, '\r'));
        assert_non_null(strstr(s, "evil?[2J??"));
        free(s);
        /* what the server's text rule refuses is not printed either: NEL, line separators, bidi overrides */
        s = format_with(nodes_now, "{\"nodes\":[{\"name\":\"a\\u0085b\\u2028c\\u202ed\",\"state\":\"up\","
                                             "\"gpus\":4,\"gpus_healthy\":4,\"backend\":\"sim\"}]}");
        assert_non_null(strstr(s, "a?b?c?d"));
        assert_null(strstr(s, "\xe2\x80\xa8"));
        assert_null(strstr(s, "\xe2\x80\xae"));
        free(s);
}

static void test_runs_and_history_print_one_line_per_run_as_sacct(void **state) {
        (void)state;
        setenv("TZ", "UTC", 1);
        tzset();
        const char *runs = "{\"task_id\":7,\"runs\":2,\"items\":["
                           "{\"task_id\":7,\"run\":1,\"name\":\"train\",\"user\":\"alice\",\"tenant\":\"acme\","
                           "\"state\":\"requeued\",\"reason\":\"node gpu-a lost\\u001b[2J\",\"exit_code\":null,"
                           "\"started_ms\":1795773600000,\"ended_ms\":1795777323000,\"elapsed_ms\":3723000,"
                           "\"gpu_memory_peak_mb\":30120,\"gpus\":[{\"id\":\"gpu-a:0\"},{\"id\":\"gpu-a:1\"}]},"
                           "{\"task_id\":7,\"run\":2,\"name\":\"train\",\"user\":\"alice\",\"tenant\":\"acme\","
                           "\"state\":\"succeeded\",\"reason\":\"\",\"exit_code\":0,\"started_ms\":1795777400000,"
                           "\"ended_ms\":1795900000000,\"elapsed_ms\":122600000,\"gpu_memory_peak_mb\":null,"
                           "\"gpus\":[{\"id\":\"gpu-b:0\"}]}]}";
        char *s = format_with(gp_cli_format_runs, runs);
        assert_null(strchr(s, '\x1b'));
        assert_non_null(strstr(s, "run history:\nRUN  STATE      EXIT  START                ELAPSED     GPUS"));
        assert_non_null(strstr(s, "\n1    requeued   -     2026-11-27T10:00:00  01:02:03    gpu-a:0,gpu-a:1  30120M"));
        assert_non_null(strstr(s, "node gpu-a lost?[2J"));
        assert_non_null(strstr(s, "\n2    succeeded  0     2026-11-27T11:03:20  1-10:03:20  gpu-b:0"));
        free(s);
        s = format_with(gp_cli_format_history, runs);
        assert_non_null(strstr(s, "JOBID  NAME   USER   TENANT  STATE      EXITCODE  START                END"));
        assert_non_null(strstr(s, "\n7.1    train  alice  acme    requeued   -         2026-11-27T10:00:00  "
                                  "2026-11-27T11:02:03  01:02:03    gpu-a:0,gpu-a:1  30120M\n"));
        assert_non_null(strstr(s, "\n7.2    train  alice  acme    succeeded  0         "));
        free(s);
        /* an element of a job array by its array id and index, as ps and sacct show it */
        s = format_with(gp_cli_format_history,
                        "{\"items\":[{\"task_id\":15,\"run\":2,\"array_id\":12,\"array_index\":3,"
                        "\"name\":\"sweep\",\"user\":\"bob\",\"tenant\":\"acme\",\"state\":\"succeeded\","
                        "\"exit_code\":0,\"started_ms\":1795777400000,\"ended_ms\":1795777401000,"
                        "\"elapsed_ms\":1000,\"gpus\":[]},"
                        "{\"task_id\":16,\"run\":1,\"array_id\":null,\"array_index\":null,"
                        "\"name\":\"solo\",\"user\":\"bob\",\"tenant\":\"acme\",\"state\":\"failed\","
                        "\"exit_code\":1,\"started_ms\":1795777400000,\"ended_ms\":1795777401000,"
                        "\"elapsed_ms\":1000,\"gpus\":[]}]}");
        assert_non_null(strstr(s, "\n12_3.2  sweep"));
        assert_non_null(strstr(s, "\n16.1    solo"));
        assert_null(strstr(s, "15.2"));
        free(s);
        s = format_with(gp_cli_format_history, "{\"items\":[]}");
        assert_string_equal(s, "no runs\n");
        free(s);
        s = format_with(gp_cli_format_runs, "{\"task_id\":7,\"runs\":0,\"items\":[]}");
        assert_string_equal(s, "run history: none yet (it has not started)\n");
        free(s);
}

static void test_usage_and_invoice_tables_show_the_figures_and_no_escapes(void **state) {
        char *s = format_with(gp_cli_format_usage,
                              "{\"tenant_id\":\"acme\\u001b[2J\",\"from\":\"2026-11-01T00:00:00.000Z\",\"to\":\"x\","
                              "\"group_by\":\"model\",\"currency\":\"USD\",\"groups\":[{\"key\":\"NVIDIA A100\","
                              "\"gpu_ms\":345600001,\"tasks\":1,\"prompt_tokens\":0,\"completion_tokens\":0,"
                              "\"cost\":\"160.00\"}],\"total\":{\"cost\":\"160.00\"}}");
        assert_null(strchr(s, '\x1b'));
        assert_non_null(strstr(s, "usage of acme?[2J from 2026-11-01T00:00:00.000Z"));
        assert_non_null(strstr(s, "NVIDIA A100"));
        assert_non_null(strstr(s, "345600.001"));
        assert_non_null(strstr(s, "total: 160.00 USD\n"));
        free(s);
        s = format_with(gp_cli_format_invoice,
                        "{\"tenant_id\":\"acme\",\"month\":\"2026-11\",\"status\":\"issued\",\"currency\":\"USD\","
                        "\"lines\":[{\"kind\":\"gpu\",\"gpu_model\":\"A100\",\"gpu_hours\":\"96\","
                        "\"billed_gpu_hours\":\"96\",\"price_per_gpu_hour\":\"2\",\"amount\":\"160.00\"},"
                        "{\"kind\":\"tokens\",\"model\":\"llama\",\"prompt_tokens\":120000,"
                        "\"completion_tokens\":30000,\"amount\":\"0.11\"}],\"total\":\"160.11\"}");
        assert_non_null(strstr(s, "invoice of acme for 2026-11 (issued)\n"));
        assert_non_null(strstr(s, "120000+30000"));
        assert_non_null(strstr(s, "total: 160.11 USD\n"));
        free(s);
}

static void test_gpus_table_shows_memory_state_and_tasks(void **state) {
        char *s = format_with(gp_cli_format_gpus,
                              "{\"backend\":\"sim\",\"gpus\":[{\"id\":\"local:0\",\"node\":\"local\",\"index\":0,"
                              "\"uuid\":\"GPU-0\",\"name\":\"NVIDIA GeForce RTX 4090\",\"memory_total_mb\":24564,"
                              "\"memory_used_mb\":0,\"memory_allocated_mb\":4096,\"util_pct\":0,\"temp_c\":30,"
                              "\"power_w\":20.0,\"healthy\":true,\"drained\":true,\"reserved\":false,"
                              "\"tasks\":[42,43],\"models\":[]}]}");
        assert_non_null(strstr(s, "backend: sim (simulated GPUs)\n"));
        assert_non_null(strstr(s, "local:0"));
        assert_non_null(strstr(s, "4096/24564 MB"));
        assert_non_null(strstr(s, "ok,drained"));
        assert_non_null(strstr(s, "42,43"));
        assert_non_null(strstr(s, "20W"));
        assert_null(strstr(s, "MODELS"));
        assert_null(strstr(s, "ISOLATION")); /* no isolation said: no column */
        free(s);
        s = format_with(gp_cli_format_gpus,
                        "{\"backend\":\"nvml\",\"gpus\":[{\"id\":\"local:0\",\"name\":\"H100\",\"healthy\":true,"
                        "\"isolation\":\"mps\",\"mps\":{\"daemon\":\"failed\",\"pid\":null,\"error\":\"x\"}},"
                        "{\"id\":\"local:1\",\"name\":\"H100\",\"healthy\":true,\"isolation\":\"watchdog\"},"
                        "{\"id\":\"local:2\",\"name\":\"H100\",\"healthy\":true,\"isolation\":\"none\"}]}");
        assert_non_null(strstr(s, "ISOLATION"));
        assert_non_null(strstr(s, "mps (daemon failed)"));
        assert_non_null(strstr(s, "watchdog"));
        free(s);
}

static void test_long_cells_are_cut_with_ellipsis(void **state) {
        char js[1024];
        char name[101];
        memset(name, 'n', 100);
        name[100] = '\0';
        snprintf(js, sizeof(js), "{\"tasks\":[{\"id\":1,\"name\":\"%s\",\"state\":\"queued\"}]}", name);
        json_t *j = load(js);
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_ps(j, 0, true, &b), 0);
        assert_non_null(strstr(b.data, "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn\xe2\x80\xa6"));
        assert_null(strstr(b.data, "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"));
        json_decref(j);
        gp_buf_done(&b);
}

static void test_display_width_counts_wide_and_combining(void **state) {
        assert_int_equal(gp_cli_display_width("abc"), 3);
        assert_int_equal(gp_cli_display_width("训练"), 4);
        assert_int_equal(gp_cli_display_width("e\xcc\x81"), 1);
        assert_int_equal(gp_cli_display_width("\xff"), 1);
}

/* ---- whole commands ------------------------------------------------- */

static void test_exit_3_when_nothing_listens(void **state) {
        char api[64];
        snprintf(api, sizeof(api), "http://127.0.0.1:%d", free_port());
        struct ran r;
        run_cli(&r, ARGC("--api", api, "ps"), ARGV("--api", api, "ps"));
        assert_int_equal(r.ex, 3);
        assert_non_null(strstr(r.err, "gpupool: cannot reach "));
        assert_non_null(strstr(r.err, api));
        assert_non_null(strstr(r.err, "Connection refused (is `gpupool server` running?)"));
        assert_string_equal(r.out, "");
        ran_done(&r);

        run_cli(&r, ARGC("--api", api, "submit", "--gpus", "1", "--", "true"),
                ARGV("--api", api, "submit", "--gpus", "1", "--", "true"));
        assert_int_equal(r.ex, 3);
        ran_done(&r);
}

static void test_exit_2_with_message_for_usage_errors(void **state) {
        struct ran r;
        run_cli(&r, ARGC("submit", "--gpus", "many", "--", "true"), ARGV("submit", "--gpus", "many", "--", "true"));
        assert_int_equal(r.ex, 2);
        assert_non_null(strstr(r.err, "gpupool submit: --gpus: expected an integer 1..1024, got 'many'\n"));
        assert_non_null(strstr(r.err, "usage: gpupool submit"));
        ran_done(&r);
        run_cli(&r, 1, ARGV(NULL));
        assert_int_equal(r.ex, 2);
        assert_non_null(strstr(r.err, "missing command"));
        ran_done(&r);
        run_cli(&r, ARGC("help", "nope"), ARGV("help", "nope"));
        assert_int_equal(r.ex, 2);
        ran_done(&r);
        run_cli(&r, ARGC("help"), ARGV("help"));
        assert_int_equal(r.ex, 0);
        assert_non_null(strstr(r.out, "submit"));
        assert_non_null(strstr(r.out, "Exit codes"));
        ran_done(&r);
}

static char *route_basic(struct srv *s, const char *req) {
        if (starts(req, "POST /api/v1/tasks "))
                return http_resp(201, NULL, "{\"id\":17,\"state\":\"queued\",\"backend\":\"sim\"}");
        if (starts(req, "GET /api/v1/tasks?") || starts(req, "GET /api/v1/tasks "))
                return http_resp(200, NULL,
                                 "{\"backend\":\"sim\",\"next_after\":null,\"tasks\":[{\"id\":17,\"name\":\"x\","
                                 "\"tenant_id\":\"default\",\"state\":\"queued\",\"priority\":5,\"gpu_request\":1}]}");
        if (starts(req, "POST /api/v1/tasks/17/cancel "))
                return http_resp(200, NULL, "{\"id\":17,\"state\":\"cancelled\"}");
        if (starts(req, "POST /api/v1/tasks/18/cancel "))
                return http_resp(200, NULL, "{\"id\":18,\"state\":\"succeeded\"}");
        if (starts(req, "GET /api/v1/tasks/17/logs?follow=1&run=1&offset=12 "))
                return strdup("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                              "Content-Length: 0\r\n\r\n");
        if (starts(req, "GET /api/v1/tasks/17 "))
                return http_resp(200, NULL, "{\"id\":17,\"state\":\"succeeded\"}");
        if (starts(req, "GET /api/v1/tasks/19/logs?follow=1&run=2 "))
                return strdup("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                              "Content-Length: 6\r\n\r\npart1\n");
        if (starts(req, "GET /api/v1/tasks/19/logs?follow=1&run=2&offset=6 "))
                return strdup("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                              "Content-Length: 6\r\n\r\npart2\n");
        if (starts(req, "GET /api/v1/tasks/19/logs?follow=1&run=2&offset=12 "))
                return strdup("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                              "Content-Length: 6\r\n\r\npart3\n");
        if (starts(req, "GET /api/v1/tasks/19 ")) {
                pthread_mutex_lock(&s->mu);
                int n = s->n_wait++;
                pthread_mutex_unlock(&s->mu);
                /* asked first for its runs (a follow pins the last), then after each stream */
                return http_resp(200, NULL, n <= 1 ? "{\"id\":19,\"state\":\"running\",\"runs\":2}"
                                                   : "{\"id\":19,\"state\":\"succeeded\",\"runs\":2}");
        }
        if (starts(req, "GET /api/v1/tasks/17/logs"))
                return strdup("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                              "Content-Length: 12\r\n\r\nline1\nline2\n");
        if (starts(req, "GET /api/v1/tasks/18/logs"))
                return http_resp(409, NULL, "{\"error\":{\"code\":\"conflict\",\"message\":\"task 18 is a lease\"}}");
        if (starts(req, "GET /api/v1/tasks/404 "))
                return http_resp(404, NULL, "{\"error\":{\"code\":\"not_found\",\"message\":\"no task 404\"}}");
        if (starts(req, "GET /api/v1/gpus "))
                return strdup("HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nConnection: close\r\n"
                              "Content-Length: 21\r\n\r\n<html>proxy down</htm");
        return http_resp(404, NULL, "{\"error\":{\"code\":\"not_found\",\"message\":\"no route\"}}");
}

static char *route_quota(struct srv *s, const char *req) {
        return http_resp(429, "Retry-After: 30\r\n",
                         "{\"error\":{\"code\":\"quota_exceeded\",\"message\":\"tenant default may hold 4 GPUs\"}}");
}

static char *route_standby(struct srv *s, const char *req) {
        return http_resp(503, "Retry-After: 1\r\n",
                         "{\"error\":{\"code\":\"standby\",\"message\":\"server s2 is standby; the leader is s1\"}}");
}

static char *route_busy(struct srv *s, const char *req) {
        return http_resp(503, "Retry-After: 5\r\n",
                         "{\"error\":{\"code\":\"store_unavailable\",\"message\":\"the store is down\"}}");
}

/* GPUPOOL_API / --api "URL1,URL2,...": tried in order, past one that does
 * not answer or answers 503 standby (it did nothing); any other answer,
 * a 503 of another kind included, is the answer. */
static void test_api_list_moves_past_unreachable_and_standby_servers(void **state) {
        struct srv standby, busy, leader;
        srv_start(&standby, route_standby);
        srv_start(&busy, route_busy);
        srv_start(&leader, route_basic);
        char api[256], a_standby[64], a_busy[64];
        snprintf(a_standby, sizeof(a_standby), "%s", srv_api(&standby));
        snprintf(a_busy, sizeof(a_busy), "%s", srv_api(&busy));
        snprintf(api, sizeof(api), "http://127.0.0.1:%d,%s/,%s", free_port(), a_standby, srv_api(&leader));
        struct ran r;
        run_cli(&r, ARGC("--api", api, "submit", "--gpus", "1", "--", "true"),
                ARGV("--api", api, "submit", "--gpus", "1", "--", "true"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "17\n");
        assert_string_equal(r.err, "");
        assert_int_equal(standby.nreq, 1);
        assert_int_equal(leader.nreq, 1);
        ran_done(&r);
        /* a 503 that is not a standby's stops there: the next is not asked */
        snprintf(api, sizeof(api), "%s,%s", a_busy, srv_api(&leader));
        run_cli(&r, ARGC("--api", api, "ps"), ARGV("--api", api, "ps"));
        assert_int_not_equal(r.ex, 0);
        assert_non_null(strstr(r.err, "the store is down"));
        assert_int_equal(leader.nreq, 1);
        ran_done(&r);
        /* all standby: the last answer is shown */
        snprintf(api, sizeof(api), "%s,%s", a_standby, a_standby);
        run_cli(&r, ARGC("--api", api, "ps"), ARGV("--api", api, "ps"));
        assert_int_not_equal(r.ex, 0);
        assert_non_null(strstr(r.err, "standby"));
        ran_done(&r);
        srv_stop(&standby);
        srv_stop(&busy);
        srv_stop(&leader);
}

/* Local users (unix.c): a submit to a loopback server sends where it was
 * made, as sbatch: the directory and (--export) the environment. */
static void test_submit_to_a_local_server_sends_its_directory_and_environment(void **state) {
        struct srv s;
        srv_start(&s, route_basic);
        char *api = srv_api(&s);
        struct ran r;
        char cwd[4096];
        assert_non_null(getcwd(cwd, sizeof(cwd)));
        setenv("GP_CLI_TEST_VAR", "v1", 1);
        setenv("GPUPOOL_SOCKET", "off", 1);
        run_cli(&r, ARGC("--api", api, "submit", "--env", "GP_CLI_TEST_VAR=given", "--", "true"),
                ARGV("--api", api, "submit", "--env", "GP_CLI_TEST_VAR=given", "--", "true"));
        assert_int_equal(r.ex, 0);
        json_t *b = load(body_of(s.reqs[0]));
        assert_string_equal(json_string_value(json_object_get(b, "workdir")), cwd);
        json_t *env = json_object_get(b, "env");
        assert_string_equal(json_string_value(json_object_get(env, "GP_CLI_TEST_VAR")), "given"); /* --env wins */
        assert_string_equal(json_string_value(json_object_get(env, "GPUPOOL_SOCKET")) ?: "absent", "absent");
        assert_true(json_object_size(env) > 1);
        json_decref(b);
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "submit", "--export", "NONE", "--", "true"),
                ARGV("--api", api, "submit", "--export", "NONE", "--", "true"));
        assert_int_equal(r.ex, 0);
        b = load(body_of(s.reqs[1]));
        assert_null(json_object_get(b, "env"));
        assert_non_null(json_object_get(b, "workdir"));
        json_decref(b);
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "submit", "--export", "GP_CLI_TEST_VAR,X=1", "--workdir", "/srv", "--", "true"),
                ARGV("--api", api, "submit", "--export", "GP_CLI_TEST_VAR,X=1", "--workdir", "/srv", "--", "true"));
        assert_int_equal(r.ex, 0);
        b = load(body_of(s.reqs[2]));
        env = json_object_get(b, "env");
        assert_int_equal(json_object_size(env), 2);
        assert_string_equal(json_string_value(json_object_get(env, "GP_CLI_TEST_VAR")), "v1");
        assert_string_equal(json_string_value(json_object_get(env, "X")), "1");
        assert_string_equal(json_string_value(json_object_get(b, "workdir")), "/srv");
        json_decref(b);
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "submit", "--export", "1BAD", "--", "true"),
                ARGV("--api", api, "submit", "--export", "1BAD", "--", "true"));
        assert_int_equal(r.ex, 2);
        assert_non_null(strstr(r.err, "not a variable name"));
        assert_int_equal(s.nreq, 3);
        ran_done(&r);
        unsetenv("GP_CLI_TEST_VAR");
        unsetenv("GPUPOOL_SOCKET");
        srv_stop(&s);
}

static void test_user_options_parse_and_ps_sends_user(void **state) {
        struct parsed p;
        PARSE(&p, "ps", "-u", "alice");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.user, "alice");
        parse_done(&p);
        PARSE(&p, "ps", "--me");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.me);
        parse_done(&p);
        PARSE(&p, "ps", "--user", "bad name");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "not a Unix user name"));
        parse_done(&p);
        PARSE(&p, "cancel", "-u", "bob");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.user, "bob");
        parse_done(&p);
        PARSE(&p, "cancel");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
        PARSE(&p, "submit", "--export", "", "--", "true");
        assert_int_equal(p.rc, -EINVAL);
        parse_done(&p);
        struct srv s;
        srv_start(&s, route_basic);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "ps", "-u", "alice"), ARGV("--api", api, "ps", "-u", "alice"));
        assert_true(starts(s.reqs[0], "GET /api/v1/tasks?state=active&user=alice&limit=1000 HTTP/1.1"));
        ran_done(&r);
        srv_stop(&s);
}

static void test_status_names_the_user_and_directory(void **state) {
        json_t *j = load("{\"id\":2,\"name\":\"a\",\"tenant_id\":\"default\",\"user\":\"alice\","
                         "\"workdir\":\"/home/alice/run\",\"state\":\"running\",\"priority\":5}");
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_status(j, 0, &b), 0);
        assert_non_null(strstr(b.data, "user:"));
        assert_non_null(strstr(b.data, " alice\n"));
        assert_non_null(strstr(b.data, " /home/alice/run\n"));
        json_decref(j);
        gp_buf_done(&b);
}

static void test_ps_shows_a_user_column_when_tasks_have_users(void **state) {
        json_t *j = load("{\"backend\":\"sim\",\"tasks\":[{\"id\":2,\"name\":\"a\",\"tenant_id\":\"default\","
                         "\"user\":\"alice\",\"state\":\"running\",\"priority\":5,\"gpu_request\":1}]}");
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_ps(j, 0, false, &b), 0);
        assert_non_null(strstr(b.data, "TENANT   USER   STATE"));
        assert_non_null(strstr(b.data, "default  alice  running"));
        json_decref(j);
        gp_buf_done(&b);
}

static char *route_flaky(struct srv *s, const char *req) {
        pthread_mutex_lock(&s->mu);
        int n = s->n_wait++;
        pthread_mutex_unlock(&s->mu);
        if (n == 0)
                return http_resp(502, NULL, "{\"error\":{\"code\":\"leader_unreachable\",\"message\":\"gone\"}}");
        if (n == 1)
                return http_resp(409, "Retry-After: 1\r\n",
                                 "{\"error\":{\"code\":\"idempotency_in_flight\",\"message\":\"busy\"}}");
        return route_basic(s, req);
}

/* The Idempotency-Key line of request req, or "" (into out). */
static void idem_key_of(const char *req, char *out, size_t size) {
        const char *k = strstr(req, "\r\nIdempotency-Key: ");
        out[0] = '\0';
        if (!k)
                return;
        k += strlen("\r\nIdempotency-Key: ");
        size_t n = strcspn(k, "\r");
        snprintf(out, size, "%.*s", (int)n, k);
}

/* A write carries one random Idempotency-Key; a 502, a 503 of any kind, a
 * 409 idempotency_in_flight or a lost connection sends it again, with the
 * same key, through the URL list and again after a pause, until a definite
 * answer; a read carries no key. */
static void test_a_write_is_sent_again_with_one_key_until_a_definite_answer(void **state) {
        struct srv flaky, busy;
        srv_start(&flaky, route_flaky);
        srv_start(&busy, route_busy);
        char api[256];
        snprintf(api, sizeof(api), "%s,", srv_api(&busy));
        snprintf(api + strlen(api), sizeof(api) - strlen(api), "%s", srv_api(&flaky));
        struct ran r;
        run_cli(&r, ARGC("--api", api, "submit", "--gpus", "1", "--", "true"),
                ARGV("--api", api, "submit", "--gpus", "1", "--", "true"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "17\n");
        assert_int_equal(flaky.nreq, 3);
        assert_int_equal(busy.nreq, 3); /* asked first in each round */
        char k0[64], k[64];
        idem_key_of(flaky.reqs[0], k0, sizeof(k0));
        assert_int_equal(strlen(k0), 36);
        assert_true(!strncmp(k0, "gpc-", 4));
        for (int i = 0; i < 3; i++) {
                idem_key_of(flaky.reqs[i], k, sizeof(k));
                assert_string_equal(k, k0);
                idem_key_of(busy.reqs[i], k, sizeof(k));
                assert_string_equal(k, k0);
        }
        ran_done(&r);
        /* another command: another key */
        run_cli(&r, ARGC("--api", srv_api(&flaky), "cancel", "17"), ARGV("--api", srv_api(&flaky), "cancel", "17"));
        assert_int_equal(r.ex, 0);
        idem_key_of(flaky.reqs[3], k, sizeof(k));
        assert_int_equal(strlen(k), 36);
        assert_string_not_equal(k, k0);
        ran_done(&r);
        /* a read has no key */
        run_cli(&r, ARGC("--api", srv_api(&flaky), "ps"), ARGV("--api", srv_api(&flaky), "ps"));
        idem_key_of(flaky.reqs[4], k, sizeof(k));
        assert_string_equal(k, "");
        ran_done(&r);
        /* a server that only ever says 503: the window ends it, with its answer */
        setenv("GPUPOOL_WRITE_RETRY_S", "1", 1);
        run_cli(&r, ARGC("--api", srv_api(&busy), "cancel", "17"), ARGV("--api", srv_api(&busy), "cancel", "17"));
        unsetenv("GPUPOOL_WRITE_RETRY_S");
        assert_int_not_equal(r.ex, 0);
        assert_non_null(strstr(r.err, "the store is down"));
        assert_true(busy.nreq >= 5);
        ran_done(&r);
        /* nothing listening: nothing was sent, so no second round */
        char dead[64];
        snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", free_port());
        int64_t t0 = gp_mono_ms();
        run_cli(&r, ARGC("--api", dead, "cancel", "17"), ARGV("--api", dead, "cancel", "17"));
        assert_int_equal(r.ex, 3);
        assert_true(gp_mono_ms() - t0 < 1000);
        ran_done(&r);
        srv_stop(&flaky);
        srv_stop(&busy);
}

static void test_submit_prints_id_and_sends_key_and_body(void **state) {
        struct srv s;
        srv_start(&s, route_basic);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "--key", "sekret", "submit", "--gpus", "2", "--name", "t", "--", "sh", "-c", "echo hi"),
                ARGV("--api", api, "--key", "sekret", "submit", "--gpus", "2", "--name", "t", "--", "sh", "-c", "echo hi"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "17\n");
        assert_int_equal(s.nreq, 1);
        assert_true(starts(s.reqs[0], "POST /api/v1/tasks HTTP/1.1\r\n"));
        assert_non_null(strcasestr(s.reqs[0], "\r\nAuthorization: Bearer sekret\r\n"));
        assert_non_null(strcasestr(s.reqs[0], "\r\nContent-Type: application/json\r\n"));
        json_t *b = load(body_of(s.reqs[0]));
        assert_int_equal(json_integer_value(json_object_get(b, "gpu_request")), 2);
        assert_string_equal(json_string_value(json_array_get(json_object_get(b, "command"), 2)), "echo hi");
        json_decref(b);
        ran_done(&r);

        run_cli(&r, ARGC("--api", api, "--json", "submit", "true"), ARGV("--api", api, "--json", "submit", "true"));
        assert_int_equal(r.ex, 0);
        json_t *t = load(r.out);
        assert_int_equal(json_integer_value(json_object_get(t, "id")), 17);
        json_decref(t);
        ran_done(&r);
        srv_stop(&s);
}

static void test_exit_1_prints_server_error_code_and_message(void **state) {
        struct srv s;
        srv_start(&s, route_quota);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "submit", "true"), ARGV("--api", api, "submit", "true"));
        assert_int_equal(r.ex, 1);
        assert_string_equal(r.err, "gpupool: quota_exceeded: tenant default may hold 4 GPUs (retry after 30 s)\n");
        assert_string_equal(r.out, "");
        ran_done(&r);
        srv_stop(&s);

        srv_start(&s, route_basic);
        api = srv_api(&s);
        run_cli(&r, ARGC("--api", api, "status", "404"), ARGV("--api", api, "status", "404"));
        assert_int_equal(r.ex, 1);
        assert_string_equal(r.err, "gpupool: not_found: no task 404\n");
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "gpus"), ARGV("--api", api, "gpus"));
        assert_int_equal(r.ex, 1);
        assert_non_null(strstr(r.err, "HTTP 502"));
        assert_non_null(strstr(r.err, "<html>proxy down"));
        ran_done(&r);
        srv_stop(&s);
}

static void test_ps_asks_for_active_tasks_and_prints_table(void **state) {
        struct srv s;
        srv_start(&s, route_basic);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "ps", "--limit", "3", "--tenant", "a b"),
                ARGV("--api", api, "ps", "--limit", "3", "--tenant", "a b"));
        assert_int_equal(r.ex, 0);
        /* folding job arrays, ps reads whole pages and shows --limit lines */
        assert_true(starts(s.reqs[0], "GET /api/v1/tasks?state=active&tenant=a%20b&limit=1000 HTTP/1.1"));
        assert_non_null(strstr(r.out, "backend: sim (simulated GPUs)\nID  NAME  TENANT   STATE"));
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "ps", "--all"), ARGV("--api", api, "ps", "--all"));
        assert_int_equal(r.ex, 0);
        assert_true(starts(s.reqs[1], "GET /api/v1/tasks?limit=1000 HTTP/1.1"));
        ran_done(&r);
        /* expanded (-r), one line per task: the server pages by --limit */
        run_cli(&r, ARGC("--api", api, "ps", "-r", "--limit", "3", "--tenant", "a b"),
                ARGV("--api", api, "ps", "-r", "--limit", "3", "--tenant", "a b"));
        assert_int_equal(r.ex, 0);
        assert_true(starts(s.reqs[2], "GET /api/v1/tasks?state=active&tenant=a%20b&limit=3 HTTP/1.1"));
        ran_done(&r);
        srv_stop(&s);
}

static void test_cancel_prints_resulting_state(void **state) {
        struct srv s;
        srv_start(&s, route_basic);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "cancel", "17"), ARGV("--api", api, "cancel", "17"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "cancelled\n");
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "cancel", "18"), ARGV("--api", api, "cancel", "18"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "succeeded\n");
        assert_non_null(strstr(r.err, "already ended"));
        ran_done(&r);
        srv_stop(&s);
}

static void test_logs_stream_to_stdout_and_errors_exit_1(void **state) {
        struct srv s;
        srv_start(&s, route_basic);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "logs", "-f", "17"), ARGV("--api", api, "logs", "-f", "17"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "line1\nline2\n");
        assert_true(starts(s.reqs[0], "GET /api/v1/tasks/17 HTTP/1.1")); /* its runs: none said */
        assert_true(starts(s.reqs[1], "GET /api/v1/tasks/17/logs?follow=1&run=1 HTTP/1.1"));
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "logs", "17"), ARGV("--api", api, "logs", "17"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "line1\nline2\n");
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "logs", "18"), ARGV("--api", api, "logs", "18"));
        assert_int_equal(r.ex, 1);
        assert_string_equal(r.out, "");
        assert_string_equal(r.err, "gpupool: conflict: task 18 is a lease\n");
        ran_done(&r);
        srv_stop(&s);
}

static void test_logs_follow_resumes_when_stream_ends_before_task(void **state) {
        struct srv s;
        srv_start(&s, route_basic);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "logs", "--follow", "19"), ARGV("--api", api, "logs", "--follow", "19"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "part1\npart2\npart3\n");
        ran_done(&r);
        srv_stop(&s);
}

static char *route_huge(struct srv *s, const char *req) {
        size_t n = GP_CLI_BODY_MAX + 4096;
        char *body = malloc(n + 1);
        memset(body, ' ', n);
        body[0] = '{';
        body[n - 1] = '}';
        body[n] = '\0';
        char *r = http_resp(200, NULL, body);
        free(body);
        return r;
}

static void test_answer_larger_than_cap_is_refused(void **state) {
        struct srv s;
        srv_start(&s, route_huge);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "nodes"), ARGV("--api", api, "nodes"));
        assert_int_equal(r.ex, 1);
        assert_non_null(strstr(r.err, "larger than 16 MiB"));
        ran_done(&r);
        srv_stop(&s);
}

/* `run`: a lease that is queued once, then runs on GPUs 1 and 3. */
static const char *lease_hb_answer = "{\"id\":7,\"state\":\"running\"}";
static int lease_hb_status = 200;

static char *route_lease(struct srv *s, const char *req) {
        if (starts(req, "POST /api/v1/tasks "))
                return http_resp(201, NULL, "{\"id\":7,\"state\":\"queued\",\"gpu_request\":2,"
                                            "\"reason\":\"all 4 GPUs busy\"}");
        if (starts(req, "GET /api/v1/tasks/7?wait=30 ")) {
                int hold;
                pthread_mutex_lock(&s->mu);
                s->n_wait++;
                hold = s->wait_hold_ms;
                pthread_mutex_unlock(&s->mu);
                if (hold) {
                        usleep((useconds_t)hold * 1000);
                        return http_resp(200, NULL, "{\"id\":7,\"state\":\"queued\",\"gpu_request\":2,"
                                                    "\"reason\":\"all 4 GPUs busy\"}");
                }
                return http_resp(200, NULL,
                                 "{\"id\":7,\"state\":\"running\",\"gpu_request\":2,\"cuda_visible_devices\":\"1,3\","
                                 "\"gpus\":[{\"node\":\"local\",\"index\":1},{\"node\":\"local\",\"index\":3}]}");
        }
        pthread_mutex_lock(&s->mu);
        char *r = NULL;
        if (starts(req, "POST /api/v1/tasks/7/heartbeat ")) {
                s->n_hb++;
                r = http_resp(lease_hb_status, NULL, lease_hb_answer);
        } else if (starts(req, "POST /api/v1/tasks/7/release ")) {
                s->n_release++;
                snprintf(s->release_body, sizeof(s->release_body), "%s", body_of(req));
                r = http_resp(200, NULL, "{\"id\":7,\"state\":\"succeeded\"}");
        } else if (starts(req, "POST /api/v1/tasks/7/cancel ")) {
                s->n_cancel++;
                r = http_resp(200, NULL, "{\"id\":7,\"state\":\"cancelled\"}");
        }
        pthread_mutex_unlock(&s->mu);
        return r ? r : http_resp(404, NULL, "{\"error\":{\"code\":\"not_found\",\"message\":\"?\"}}");
}

static void test_run_waits_runs_with_gpu_env_and_releases_with_exit_code(void **state) {
        struct srv s;
        char out[] = "/tmp/test-cli-run-XXXXXX";
        int fd = mkstemp(out);
        assert_true(fd >= 0);
        close(fd);
        char script[512];
        snprintf(script, sizeof(script),
                 "echo \"$CUDA_VISIBLE_DEVICES|$GPUPOOL_TASK_ID|$GPUPOOL_GPUS|$MYVAR|$(pwd)\" > %s; sleep 1.5; exit 7",
                 out);
        srv_start(&s, route_lease);
        lease_hb_status = 200;
        lease_hb_answer = "{\"id\":7,\"state\":\"running\"}";
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "run", "--gpus", "2", "--ttl", "3", "--env", "MYVAR=v", "--workdir", "/",
                         "--", "sh", "-c", script),
                ARGV("--api", api, "run", "--gpus", "2", "--ttl", "3", "--env", "MYVAR=v", "--workdir", "/",
                     "--", "sh", "-c", script));
        assert_int_equal(r.ex, 7);
        assert_non_null(strstr(r.err, "waiting for 2 GPU(s): all 4 GPUs busy\n"));
        FILE *f = fopen(out, "r");
        char line[256] = "";
        assert_non_null(f);
        assert_non_null(fgets(line, sizeof(line), f));
        fclose(f);
        unlink(out);
        assert_string_equal(line, "1,3|7|local:1,local:3|v|/\n");
        json_t *lease = load(body_of(s.reqs[0]));
        assert_null(json_object_get(lease, "command"));
        assert_int_equal(json_integer_value(json_object_get(lease, "lease_ttl_s")), 3);
        json_decref(lease);
        assert_true(s.n_hb >= 1); /* 1.5 s run, heartbeat every 1 s */
        assert_int_equal(s.n_release, 1);
        json_t *rel = load(s.release_body);
        assert_int_equal(json_integer_value(json_object_get(rel, "exit_code")), 7);
        json_decref(rel);
        assert_int_equal(s.n_cancel, 0);
        ran_done(&r);
        srv_stop(&s);
}

static void test_run_stops_command_when_lease_is_lost(void **state) {
        struct srv s;
        srv_start(&s, route_lease);
        lease_hb_status = 409;
        lease_hb_answer = "{\"error\":{\"code\":\"conflict\",\"message\":\"lease 7 expired\"}}";
        char *api = srv_api(&s);
        struct ran r;
        int64_t t0 = gp_mono_ms();
        run_cli(&r, ARGC("--api", api, "run", "--ttl", "3", "--", "sleep", "30"),
                ARGV("--api", api, "run", "--ttl", "3", "--", "sleep", "30"));
        assert_true(gp_mono_ms() - t0 < 10000);
        assert_int_equal(r.ex, 128 + SIGTERM);
        assert_non_null(strstr(r.err, "lease 7 was lost"));
        assert_int_equal(s.n_release, 1);
        ran_done(&r);
        srv_stop(&s);
        lease_hb_status = 200;
}

static void test_run_reports_command_not_found_as_127(void **state) {
        struct srv s;
        srv_start(&s, route_lease);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "run", "--", "/nonexistent/cmd"),
                ARGV("--api", api, "run", "--", "/nonexistent/cmd"));
        assert_int_equal(r.ex, 127);
        assert_non_null(strstr(r.err, "cannot run /nonexistent/cmd: No such file or directory"));
        assert_int_equal(s.n_release, 1);
        assert_non_null(strstr(s.release_body, "127"));
        ran_done(&r);
        srv_stop(&s);
}

static void *raise_later(void *arg) {
        usleep(300 * 1000);
        kill(getpid(), SIGINT);
        return NULL;
}

static void test_run_interrupted_while_queued_cancels_the_lease(void **state) {
        struct srv s;
        srv_start(&s, route_lease);
        s.wait_hold_ms = 5000;
        char *api = srv_api(&s);
        struct ran r;
        pthread_t t;
        /* whatever SIGINT was when the suite started (ignored under `cmd &` in a
         * non-interactive shell, default in a terminal) is what the client restores */
        struct sigaction before;
        sigaction(SIGINT, NULL, &before);
        pthread_create(&t, NULL, raise_later, NULL);
        int64_t t0 = gp_mono_ms();
        run_cli(&r, ARGC("--api", api, "run", "--", "true"), ARGV("--api", api, "run", "--", "true"));
        pthread_join(t, NULL);
        assert_true(gp_mono_ms() - t0 < 4000);
        assert_int_equal(r.ex, 128 + SIGINT);
        assert_int_equal(s.n_cancel, 1);
        assert_int_equal(s.n_release, 0);
        assert_non_null(strstr(r.err, "lease 7 cancelled"));
        /* the handler was restored: SIGINT is back to what it was */
        struct sigaction sa;
        sigaction(SIGINT, NULL, &sa);
        assert_true(sa.sa_handler == before.sa_handler);
        assert_int_equal(sa.sa_flags & SA_SIGINFO, before.sa_flags & SA_SIGINFO);
        ran_done(&r);
        srv_stop(&s);
}

/* The client's own HTTP/1.1 (src/cli/http.c): every way an answer's
 * body may be framed, and an answer cut short. */
static char *route_framing(struct srv *s, const char *req) {
        if (starts(req, "GET /api/v1/gpus ")) /* chunked, split mid-JSON, with an extension and a trailer */
                return strdup("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                              "9;x=y\r\n{\"gpus\":[\r\n"
                              "3b\r\n{\"node\":\"n1\",\"index\":0,\"name\":\"Sim-Chunked\",\"state\":\"idle\"}\r\n"
                              "2\r\n]}\r\n0\r\nX-Trailer: 1\r\n\r\n");
        if (starts(req, "GET /api/v1/nodes ")) /* 100 Continue first, then a body ended by the close */
                return strdup("HTTP/1.1 100 Continue\r\n\r\n"
                              "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                              "{\"nodes\":[{\"name\":\"closed-node\",\"state\":\"up\"}]}");
        if (starts(req, "GET /api/v1/tasks/5 ")) /* says 100 bytes, sends 10 */
                return strdup("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"id\":5,\"s");
        if (starts(req, "GET /api/v1/tasks/6 "))
                return strdup("SSH-2.0-OpenSSH_9.2\r\n");
        if (starts(req, "GET /api/v1/tasks/7/logs")) /* a chunked log stream */
                return strdup("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
                              "Connection: close\r\n\r\n6\r\nline1\n\r\n6\r\nline2\n\r\n0\r\n\r\n");
        return http_resp(404, NULL, "{\"error\":{\"code\":\"not_found\",\"message\":\"no route\"}}");
}

static void test_own_http_reads_chunked_interim_and_close_delimited_answers(void **state) {
        struct srv s;
        srv_start(&s, route_framing);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "gpus"), ARGV("--api", api, "gpus"));
        assert_int_equal(r.ex, 0);
        assert_non_null(strstr(r.out, "Sim-Chunked"));
        assert_true(starts(s.reqs[0], "GET /api/v1/gpus HTTP/1.1\r\n"));
        char host[80];
        snprintf(host, sizeof(host), "\r\nHost: 127.0.0.1:%d\r\n", s.port);
        assert_non_null(strstr(s.reqs[0], host));
        assert_null(strcasestr(s.reqs[0], "Content-Length")); /* a GET has no body */
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "nodes"), ARGV("--api", api, "nodes"));
        assert_int_equal(r.ex, 0);
        assert_non_null(strstr(r.out, "closed-node"));
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "logs", "7"), ARGV("--api", api, "logs", "7"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "line1\nline2\n");
        ran_done(&r);
        srv_stop(&s);
}

static void test_own_http_answer_cut_short_or_not_http_exits_3(void **state) {
        struct srv s;
        srv_start(&s, route_framing);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "status", "5"), ARGV("--api", api, "status", "5"));
        assert_int_equal(r.ex, 3);
        assert_non_null(strstr(r.err, "the connection closed before the answer's end"));
        assert_string_equal(r.out, "");
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "status", "6"), ARGV("--api", api, "status", "6"));
        assert_int_equal(r.ex, 3);
        assert_non_null(strstr(r.err, "the answer is not HTTP/1.x"));
        ran_done(&r);
        srv_stop(&s);
}

static void test_own_http_post_without_body_sends_length_0(void **state) {
        struct srv s;
        srv_start(&s, route_basic);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "cancel", "17"), ARGV("--api", api, "cancel", "17"));
        assert_int_equal(r.ex, 0);
        assert_true(starts(s.reqs[0], "POST /api/v1/tasks/17/cancel HTTP/1.1\r\n"));
        assert_non_null(strcasestr(s.reqs[0], "\r\nContent-Length: 0\r\n"));
        assert_null(strcasestr(s.reqs[0], "Content-Type"));
        ran_done(&r);
        srv_stop(&s);
}

/* http:// through a proxy goes to libcurl (dlopen'ed), which reads the
 * proxy variables as it always did; no_proxy keeps it direct. */
static char *route_proxy(struct srv *s, const char *req) {
        if (starts(req, "GET http://gpupool.invalid:9/api/v1/tasks/17 "))
                return http_resp(200, NULL, "{\"id\":17,\"state\":\"running\",\"name\":\"via-proxy\"}");
        return http_resp(404, NULL, "{\"error\":{\"code\":\"not_found\",\"message\":\"no route\"}}");
}

static void test_http_proxy_variables_are_honoured(void **state) {
        struct srv s;
        char proxy[64];
        struct ran r;
        srv_start(&s, route_proxy);
        snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%d", s.port);
        setenv("http_proxy", proxy, 1);
        run_cli(&r, ARGC("--api", "http://gpupool.invalid:9", "status", "17"),
                ARGV("--api", "http://gpupool.invalid:9", "status", "17"));
        assert_int_equal(r.ex, 0);
        assert_non_null(strstr(r.out, "via-proxy"));
        assert_true(starts(s.reqs[0], "GET http://gpupool.invalid:9/api/v1/tasks/17 HTTP/1.1\r\n"));
        ran_done(&r);
        srv_stop(&s);

        /* a proxy that refuses everything, and the server listed in no_proxy */
        srv_start(&s, route_basic);
        char *api = srv_api(&s);
        snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%d", free_port());
        setenv("http_proxy", proxy, 1);
        setenv("no_proxy", "localhost, .example.com,127.0.0.1", 1);
        run_cli(&r, ARGC("--api", api, "status", "17"), ARGV("--api", api, "status", "17"));
        assert_int_equal(r.ex, 0);
        assert_true(starts(s.reqs[0], "GET /api/v1/tasks/17 HTTP/1.1\r\n"));
        ran_done(&r);
        setenv("no_proxy", "127.0.0.10", 1); /* not this host: through the (refusing) proxy */
        run_cli(&r, ARGC("--api", api, "status", "17"), ARGV("--api", api, "status", "17"));
        assert_int_equal(r.ex, 3);
        ran_done(&r);
        unsetenv("http_proxy");
        unsetenv("no_proxy");
        srv_stop(&s);
}

/* ---- nodes and join tokens ----------------------------------------- */

static void test_node_selector_and_node_build_the_body(void **state) {
        struct parsed p;
        PARSE(&p, "submit", "--gpus", "16", "--node-selector", "zone=a", "--node-selector=ib=", "--", "true");
        assert_int_equal(p.rc, 0);
        assert_int_equal(body_int(&p.c, "gpu_request"), 16);
        json_t *sel = json_object_get(p.c.body, "node_selector");
        assert_int_equal(json_object_size(sel), 2);
        assert_string_equal(json_string_value(json_object_get(sel, "zone")), "a");
        assert_string_equal(json_string_value(json_object_get(sel, "ib")), "");
        parse_done(&p);
        PARSE(&p, "submit", "--gpus", "1024", "true");
        assert_int_equal(p.rc, 0);
        assert_int_equal(body_int(&p.c, "gpu_request"), 1024);
        parse_done(&p);
        /* run --node NAME is the selector gpupool/node=NAME, sent with the lease */
        PARSE(&p, "run", "--node", "gpu-a", "--node-selector", "k8s.io/zone=eu-1", "--", "nvidia-smi");
        assert_int_equal(p.rc, 0);
        sel = json_object_get(p.c.body, "node_selector");
        assert_string_equal(json_string_value(json_object_get(sel, "gpupool/node")), "gpu-a");
        assert_string_equal(json_string_value(json_object_get(sel, "k8s.io/zone")), "eu-1");
        parse_done(&p);
        /* no selector unless asked: the body stays what the server knew */
        PARSE(&p, "submit", "true");
        assert_null(json_object_get(p.c.body, "node_selector"));
        parse_done(&p);
}

static void test_run_node_defaults_to_gpupool_node_env(void **state) {
        struct parsed p;
        gp_cli_cmd_init(&p.c);
        gp_buf_init(&p.err, 1 << 16);
        p.c.env_node = "gpu-b";
        p.rc = gp_cli_parse(ARGC("run", "--", "true"), ARGV("run", "--", "true"), NULL, NULL, &p.c, &p.err);
        assert_int_equal(p.rc, 0);
        json_t *sel = json_object_get(p.c.body, "node_selector");
        assert_string_equal(json_string_value(json_object_get(sel, "gpupool/node")), "gpu-b");
        parse_done(&p);
        /* --node (or an explicit gpupool/node selector) wins over the environment */
        gp_cli_cmd_init(&p.c);
        gp_buf_init(&p.err, 1 << 16);
        p.c.env_node = "gpu-b";
        p.rc = gp_cli_parse(ARGC("run", "--node", "gpu-c", "true"), ARGV("run", "--node", "gpu-c", "true"), NULL,
                            NULL, &p.c, &p.err);
        assert_int_equal(p.rc, 0);
        sel = json_object_get(p.c.body, "node_selector");
        assert_string_equal(json_string_value(json_object_get(sel, "gpupool/node")), "gpu-c");
        parse_done(&p);
        /* submit ignores it: a batch task runs where the scheduler puts it */
        gp_cli_cmd_init(&p.c);
        gp_buf_init(&p.err, 1 << 16);
        p.c.env_node = "gpu-b";
        p.rc = gp_cli_parse(ARGC("submit", "true"), ARGV("submit", "true"), NULL, NULL, &p.c, &p.err);
        assert_int_equal(p.rc, 0);
        assert_null(json_object_get(p.c.body, "node_selector"));
        parse_done(&p);
        /* a bad value in the environment is a usage error naming it */
        gp_cli_cmd_init(&p.c);
        gp_buf_init(&p.err, 1 << 16);
        p.c.env_node = "gpu b";
        p.rc = gp_cli_parse(ARGC("run", "true"), ARGV("run", "true"), NULL, NULL, &p.c, &p.err);
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "GPUPOOL_NODE: 'gpu b' is not a node name"));
        parse_done(&p);
}

static void test_bad_node_selectors_are_usage_errors_naming_the_problem(void **state) {
        static const struct {
                const char *arg, *want;
        } bad[] = {
                {"zone", "--node-selector: expected KEY=VALUE, got 'zone' (no '=')"},
                {"=a", "--node-selector: bad label key ''"},
                {"zo ne=a", "--node-selector: bad label key 'zo ne'"},
                {"zone=a b", "--node-selector: bad label value 'a b'"},
                {"zone=a=b", "--node-selector: bad label value 'a=b'"},
                {"zone=\xc3\xa9", "--node-selector: bad label value"},
                {"k=0123456789012345678901234567890123456789012345678901234567890123", "bad label value"},
                {"k123456789012345678901234567890123456789012345678901234567890123=v", "bad label key"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct parsed p;
                PARSE(&p, "submit", "--node-selector", (char *)bad[i].arg, "--", "true");
                assert_int_equal(p.rc, -EINVAL);
                if (!strstr(err_text(&p), bad[i].want))
                        fail_msg("%s: got %s", bad[i].arg, err_text(&p));
                assert_non_null(strstr(err_text(&p), "\nusage: gpupool submit"));
                parse_done(&p);
        }
        struct parsed p;
        /* 63 bytes each are fine */
        PARSE(&p, "submit", "--node-selector",
              "k12345678901234567890123456789012345678901234567890123456789012="
              "012345678901234567890123456789012345678901234567890123456789012",
              "true");
        assert_int_equal(p.rc, 0);
        parse_done(&p);
        PARSE(&p, "submit", "--node-selector", "a=1", "--node-selector", "a=2", "true");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "label 'a' is selected twice"));
        parse_done(&p);
        PARSE(&p, "run", "--node", "x", "--node-selector", "gpupool/node=y", "true");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "(--node sets gpupool/node)"));
        parse_done(&p);
        /* at most 16 pairs */
        char gp[] = "gpupool", sub[] = "submit", ns[] = "--node-selector", tr[] = "true";
        char *argv[64] = {gp, sub};
        char kv[17][16];
        int argc = 2;
        for (int i = 0; i < 17; i++) {
                snprintf(kv[i], sizeof(kv[i]), "k%d=v", i);
                argv[argc++] = ns;
                argv[argc++] = kv[i];
        }
        argv[argc++] = tr;
        argv[argc] = NULL;
        parse_env(&p, argc, argv, NULL, NULL);
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "at most 16 labels"));
        parse_done(&p);
        PARSE(&p, "run", "--node", "no/slash", "true");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--node: 'no/slash' is not a node name"));
        parse_done(&p);
        PARSE(&p, "submit", "--node", "gpu-a", "true");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "option --node does not apply here"));
        parse_done(&p);
        PARSE(&p, "submit", "--gpus", "1025", "true");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--gpus: 1025 is out of range 1..1024"));
        parse_done(&p);
}

static void test_node_and_join_token_subcommands_are_checked(void **state) {
        struct parsed p;
        PARSE(&p, "node", "drain", "gpu-a");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.verb, GP_CLI_NODE);
        assert_string_equal(p.c.sub, "drain");
        assert_string_equal(p.c.target, "gpu-a");
        parse_done(&p);
        PARSE(&p, "join-token", "create", "--ttl", "12h");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.verb, GP_CLI_JOIN_TOKEN);
        assert_int_equal(p.c.join_ttl_s, 12 * 3600);
        parse_done(&p);
        static const struct {
                const char *ttl;
                int64_t s;
        } ttls[] = {{"0", 0}, {"3600", 3600}, {"90s", 90}, {"30m", 1800}, {"7d", 7 * 86400}};
        for (size_t i = 0; i < sizeof(ttls) / sizeof(ttls[0]); i++) {
                PARSE(&p, "join-token", "create", "--ttl", (char *)ttls[i].ttl);
                assert_int_equal(p.rc, 0);
                assert_int_equal(p.c.join_ttl_s, ttls[i].s);
                parse_done(&p);
        }
        PARSE(&p, "join-token", "revoke", "jt_3");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.target, "jt_3");
        parse_done(&p);
        static const struct {
                const char *a[4];
                const char *want;
        } bad[] = {
                {{"node"}, "missing subcommand: drain, undrain or remove"},
                {{"node", "drain"}, "missing node NAME"},
                {{"node", "reboot", "gpu-a"}, "unknown subcommand 'reboot'"},
                {{"node", "drain", "a b"}, "'a b' is not a node name"},
                {{"node", "drain", "a", "b"}, "unexpected argument 'b'"},
                {{"join-token"}, "missing subcommand: create, list or revoke"},
                {{"join-token", "revoke"}, "missing token ID"},
                {{"join-token", "list", "x"}, "unexpected argument 'x'"},
                {{"join-token", "revoke", "a/b"}, "'a/b' is not a token id"},
                {{"join-token", "create", "--ttl", "-1"}, "--ttl: expected a duration"},
                {{"join-token", "create", "--ttl", "5x"}, "--ttl: expected a duration"},
                {{"join-token", "create", "--ttl", "4000d"}, "--ttl: expected a duration"},
                {{"join-token", "list", "--ttl", "1h"}, "--ttl applies to 'create' only"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char gp[] = "gpupool";
                char *argv[8] = {gp};
                int argc = 1;
                for (int k = 0; k < 4 && bad[i].a[k]; k++)
                        argv[argc++] = (char *)bad[i].a[k];
                argv[argc] = NULL;
                parse_env(&p, argc, argv, NULL, NULL);
                assert_int_equal(p.rc, -EINVAL);
                if (!strstr(err_text(&p), bad[i].want))
                        fail_msg("case %zu: got %s", i, err_text(&p));
                assert_non_null(strstr(err_text(&p), "\nusage: gpupool "));
                parse_done(&p);
        }
}

static void test_nodes_table_shows_busy_total_model_labels_and_heartbeat_age(void **state) {
        char *s = format_with(nodes_now,
                "{\"backend\":\"nvml\",\"nodes\":["
                "{\"name\":\"local\",\"state\":\"ready\",\"address\":\"\",\"labels\":{\"gpupool/node\":\"local\"},"
                "\"last_heartbeat_ms\":1795000000000,\"gpus_total\":0,\"gpus_busy\":0,\"runs\":0,\"gpus\":[]},"
                "{\"name\":\"gpu-a\",\"state\":\"draining\",\"address\":\"http://10.0.0.7:8081\","
                "\"labels\":{\"zone\":\"a\",\"gpupool/node\":\"gpu-a\",\"ib\":\"yes\"},"
                "\"last_heartbeat_ms\":1794999998000,\"gpus_total\":8,\"gpus_busy\":2,\"runs\":3,"
                "\"cpus\":96,\"memory_total_mb\":2064384,\"memory_available_mb\":1843200,\"disk_free_mb\":7680,"
                "\"version\":\"0.1.0\","
                "\"gpus\":[{\"index\":0,\"name\":\"NVIDIA H100 80GB HBM3\"},{\"index\":1,\"name\":\"NVIDIA H100 80GB HBM3\"}]},"
                "{\"name\":\"gpu-b\",\"state\":\"lost\",\"address\":\"http://10.0.0.8:8081\",\"labels\":{},"
                "\"last_heartbeat_ms\":1794999700000,\"gpus_total\":2,\"gpus_busy\":0,"
                "\"gpus\":[{\"name\":\"NVIDIA A100\"},{\"name\":\"NVIDIA L4\"}]}]}");
        assert_non_null(strstr(s, "backend: nvml\nNAME   STATE     GPUS  GPU MODEL"));
        assert_true(strstr(s, "\nlocal  ready     0/0   -  ") != NULL);
        assert_non_null(strstr(s, "gpu-a  draining  2/8   NVIDIA H100 80GB HBM3  "));
        assert_non_null(strstr(s, "  96    1800G/2016G  7.5G       0.1.0  "));
        assert_non_null(strstr(s, " 1800G/2016G "));
        assert_non_null(strstr(s, " 7.5G "));
        assert_non_null(strstr(s, " 0.1.0 "));
        assert_non_null(strstr(s, "zone=a,ib=yes"));
        assert_null(strstr(s, "gpupool/node")); /* the implicit label is not shown */
        assert_non_null(strstr(s, "2s ago"));
        assert_non_null(strstr(s, "5m00s ago"));
        assert_non_null(strstr(s, "http://10.0.0.7:8081\n"));
        assert_non_null(strstr(s, "NVIDIA A100, NVIDIA L4"));
        assert_non_null(strstr(s, "gpu-b  lost      0/2"));
        free(s);
        /* an older server's answer (no busy count, no heartbeat): what there is */
        s = format_with(nodes_now, "{\"nodes\":[{\"name\":\"local\",\"gpus\":4,\"state\":\"up\"}]}");
        assert_string_equal(s, "NAME   STATE  GPUS  GPU MODEL  CPUS  MEM FREE  DISK FREE  VERSION  LABELS  HEARTBEAT  ADDRESS\n"
                               "local  up     4     -          -     -         -          -        -       -          -\n");
        free(s);
}

static void test_join_token_table_says_active_expired_or_revoked(void **state) {
        char *s = format_with(tokens_now,
                "{\"tokens\":[{\"id\":\"jt_1\",\"created_ms\":1794999940000,\"expires_ms\":0,\"revoked\":false,"
                "\"source\":\"api\"},"
                "{\"id\":\"jt_2\",\"created_ms\":1794990000000,\"expires_ms\":1795003600000,\"revoked\":false,"
                "\"source\":\"api\"},"
                "{\"id\":\"jt_3\",\"created_ms\":1794990000000,\"expires_ms\":1794999000000,\"revoked\":false,"
                "\"source\":\"api\"},"
                "{\"id\":\"cfg_1\",\"created_ms\":0,\"expires_ms\":0,\"revoked\":true,\"source\":\"config\"}]}");
        assert_string_equal(s, "ID     CREATED    EXPIRES     STATE    SOURCE\n"
                               "jt_1   1m00s ago  never       active   api\n"
                               "jt_2   2h46m ago  in 1h00m    active   api\n"
                               "jt_3   2h46m ago  16m40s ago  expired  api\n"
                               "cfg_1  -          never       revoked  config\n");
        free(s);
        s = format_with(tokens_now, "{\"tokens\":[]}");
        assert_string_equal(s, "no join tokens ('gpupool join-token create' makes one)\n");
        free(s);
}

static void test_status_shows_nodes_by_rank_and_node_selector(void **state) {
        json_t *t = load("{\"id\":9,\"state\":\"running\",\"gpu_request\":16,\"nodes\":[\"gpu-b\",\"gpu-a\"],"
                         "\"node_selector\":{\"zone\":\"a\"},\"gpus\":[],\"backend\":\"nvml\"}");
        gp_buf b;
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_status(t, 0, &b), 0);
        assert_non_null(strstr(b.data, "\nnodes (by rank):      gpu-b, gpu-a\n"));
        assert_non_null(strstr(b.data, "\nnode selector:        zone=a\n"));
        json_decref(t);
        gp_buf_done(&b);
        t = load("{\"id\":9,\"state\":\"queued\",\"gpu_request\":1,\"nodes\":[],\"gpus\":[]}");
        gp_buf_init(&b, 0);
        assert_int_equal(gp_cli_format_status(t, 0, &b), 0);
        assert_null(strstr(b.data, "node"));
        json_decref(t);
        gp_buf_done(&b);
}

static char *route_nodes(struct srv *s, const char *req) {
        if (starts(req, "POST /admin/nodes/gpu-a/drain "))
                return http_resp(200, NULL, "{\"name\":\"gpu-a\",\"state\":\"draining\",\"backend\":\"nvml\"}");
        if (starts(req, "POST /admin/nodes/local/remove "))
                return http_resp(409, NULL, "{\"error\":{\"code\":\"conflict\",\"message\":\"the node local cannot be removed\"}}");
        if (starts(req, "POST /admin/nodes/ghost/undrain "))
                return http_resp(404, NULL, "{\"error\":\"no node ghost\"}");
        if (starts(req, "POST /admin/join-tokens "))
                return http_resp(201, NULL, "{\"id\":\"jt_3\",\"token\":\"gpj_0123abcd\",\"expires_ms\":0}");
        if (starts(req, "GET /admin/join-tokens "))
                return http_resp(200, NULL, "{\"tokens\":[{\"id\":\"jt_3\",\"created_ms\":1,\"expires_ms\":0,"
                                            "\"revoked\":false,\"source\":\"api\"}]}");
        if (starts(req, "DELETE /admin/join-tokens/jt_3 "))
                return http_resp(200, NULL, "{\"id\":\"jt_3\",\"revoked\":true}");
        return http_resp(404, NULL, "{\"error\":{\"code\":\"not_found\",\"message\":\"no route\"}}");
}

static void test_node_and_join_token_commands_send_and_print(void **state) {
        struct srv s;
        srv_start(&s, route_nodes);
        char *api = srv_api(&s);
        struct ran r;
        run_cli(&r, ARGC("--api", api, "node", "drain", "gpu-a"), ARGV("--api", api, "node", "drain", "gpu-a"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "gpu-a: draining\n");
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "node", "remove", "local"), ARGV("--api", api, "node", "remove", "local"));
        assert_int_equal(r.ex, 1);
        assert_string_equal(r.err, "gpupool: conflict: the node local cannot be removed\n");
        ran_done(&r);
        /* an error that is a plain string is shown too */
        run_cli(&r, ARGC("--api", api, "node", "undrain", "ghost"), ARGV("--api", api, "node", "undrain", "ghost"));
        assert_int_equal(r.ex, 1);
        assert_string_equal(r.err, "gpupool: error: no node ghost\n");
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "join-token", "create", "--ttl", "1h"),
                ARGV("--api", api, "join-token", "create", "--ttl", "1h"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "gpj_0123abcd\n");
        assert_non_null(strstr(r.err, "gpupool agent --server http://127.0.0.1:"));
        assert_non_null(strstr(r.err, " --token gpj_0123abcd\n"));
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "join-token", "list"), ARGV("--api", api, "join-token", "list"));
        assert_int_equal(r.ex, 0);
        assert_non_null(strstr(r.out, "jt_3"));
        assert_non_null(strstr(r.out, "active"));
        ran_done(&r);
        run_cli(&r, ARGC("--api", api, "join-token", "revoke", "jt_3"), ARGV("--api", api, "join-token", "revoke", "jt_3"));
        assert_int_equal(r.ex, 0);
        assert_string_equal(r.out, "jt_3: revoked\n");
        ran_done(&r);
        assert_int_equal(s.nreq, 6);
        assert_true(starts(s.reqs[0], "POST /admin/nodes/gpu-a/drain HTTP/1.1\r\n"));
        json_t *b = load(body_of(s.reqs[3]));
        assert_int_equal(json_integer_value(json_object_get(b, "ttl_s")), 3600);
        json_decref(b);
        assert_true(starts(s.reqs[5], "DELETE /admin/join-tokens/jt_3 HTTP/1.1\r\n"));
        srv_stop(&s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_submit_builds_body_from_every_option),
                cmocka_unit_test(test_submit_sends_only_given_fields),
                cmocka_unit_test(test_first_word_starts_command_and_later_options_belong_to_it),
                cmocka_unit_test(test_client_options_anywhere_before_command_args),
                cmocka_unit_test(test_priority_accepts_numbers_tiers_and_names),
                cmocka_unit_test(test_priority_out_of_range_is_usage_error_naming_range),
                cmocka_unit_test(test_numbers_are_strict_and_bounded),
                cmocka_unit_test(test_env_must_contain_equals),
                cmocka_unit_test(test_submit_without_command_is_usage_error),
                cmocka_unit_test(test_names_must_be_clean_and_short),
                cmocka_unit_test(test_run_is_a_lease_with_local_env_and_ttl),
                cmocka_unit_test(test_api_and_key_come_from_env_unless_given),
                cmocka_unit_test(test_cacert_names_the_ca_of_https_servers),
                cmocka_unit_test(test_ps_options_are_validated),
                cmocka_unit_test(test_user_options_parse_and_ps_sends_user),
                cmocka_unit_test(test_ps_shows_a_user_column_when_tasks_have_users),
                cmocka_unit_test(test_status_names_the_user_and_directory),
                cmocka_unit_test(test_submit_to_a_local_server_sends_its_directory_and_environment),
                cmocka_unit_test(test_task_ids_are_strict),
                cmocka_unit_test(test_unknown_options_and_commands_are_named),
                cmocka_unit_test(test_help_forms),
                cmocka_unit_test(test_status_block_shows_queue_position_and_reason_while_queued),
                cmocka_unit_test(test_status_block_of_finished_task_shows_devices_exit_code_and_times),
                cmocka_unit_test(test_ps_table_is_aligned_by_display_width),
                cmocka_unit_test(test_ps_shows_what_an_elastic_task_holds_and_its_range),
                cmocka_unit_test(test_empty_lists_say_so),
                cmocka_unit_test(test_server_strings_cannot_inject_terminal_escapes),
                cmocka_unit_test(test_gpus_table_shows_memory_state_and_tasks),
                cmocka_unit_test(test_usage_and_invoice_tables_show_the_figures_and_no_escapes),
                cmocka_unit_test(test_runs_and_history_print_one_line_per_run_as_sacct),
                cmocka_unit_test(test_long_cells_are_cut_with_ellipsis),
                cmocka_unit_test(test_display_width_counts_wide_and_combining),
                cmocka_unit_test(test_exit_3_when_nothing_listens),
                cmocka_unit_test(test_api_list_moves_past_unreachable_and_standby_servers),
                cmocka_unit_test(test_a_write_is_sent_again_with_one_key_until_a_definite_answer),
                cmocka_unit_test(test_exit_2_with_message_for_usage_errors),
                cmocka_unit_test(test_submit_prints_id_and_sends_key_and_body),
                cmocka_unit_test(test_exit_1_prints_server_error_code_and_message),
                cmocka_unit_test(test_ps_asks_for_active_tasks_and_prints_table),
                cmocka_unit_test(test_cancel_prints_resulting_state),
                cmocka_unit_test(test_logs_stream_to_stdout_and_errors_exit_1),
                cmocka_unit_test(test_logs_follow_resumes_when_stream_ends_before_task),
                cmocka_unit_test(test_answer_larger_than_cap_is_refused),
                cmocka_unit_test(test_run_waits_runs_with_gpu_env_and_releases_with_exit_code),
                cmocka_unit_test(test_run_stops_command_when_lease_is_lost),
                cmocka_unit_test(test_run_reports_command_not_found_as_127),
                cmocka_unit_test(test_run_interrupted_while_queued_cancels_the_lease),
                cmocka_unit_test(test_own_http_reads_chunked_interim_and_close_delimited_answers),
                cmocka_unit_test(test_own_http_answer_cut_short_or_not_http_exits_3),
                cmocka_unit_test(test_own_http_post_without_body_sends_length_0),
                cmocka_unit_test(test_http_proxy_variables_are_honoured),
                cmocka_unit_test(test_node_selector_and_node_build_the_body),
                cmocka_unit_test(test_run_node_defaults_to_gpupool_node_env),
                cmocka_unit_test(test_bad_node_selectors_are_usage_errors_naming_the_problem),
                cmocka_unit_test(test_node_and_join_token_subcommands_are_checked),
                cmocka_unit_test(test_nodes_table_shows_busy_total_model_labels_and_heartbeat_age),
                cmocka_unit_test(test_join_token_table_says_active_expired_or_revoked),
                cmocka_unit_test(test_status_shows_nodes_by_rank_and_node_selector),
                cmocka_unit_test(test_node_and_join_token_commands_send_and_print),
        };
        unsetenv("GPUPOOL_API");
        unsetenv("GPUPOOL_API_KEY");
        unsetenv("http_proxy");
        unsetenv("HTTP_PROXY");
        unsetenv("all_proxy");
        unsetenv("ALL_PROXY");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
