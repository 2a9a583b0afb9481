/* test-cli-slurm.c - Slurm's habits in the client's command line (args.c)
 * and a script's directive lines (script.c): durations and sizes wherever
 * they go, -t/-G/-J/-D/-W, several ids and --state for cancel, ID_INDEX for
 * status and logs, key create --admin, config check, and #GPUPOOL/#SBATCH
 * lines turned into options (with FILE:LINE errors and warnings).  The
 * end-to-end behaviour against a real server: tests/blackbox/test_cli_slurm.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "cli/cli-int.h"
#include "cli/script.h"

#define ARGV(...) ((char *[]){"gpupool", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"gpupool", __VA_ARGS__}) / sizeof(char *)))

struct parsed {
        gp_cli_cmd c;
        gp_buf err;
        int rc;
};

static void parse(struct parsed *p, int argc, char **argv) {
        gp_cli_cmd_init(&p->c);
        gp_buf_init(&p->err, 1 << 16);
        p->rc = gp_cli_parse(argc, argv, NULL, NULL, &p->c, &p->err);
}

#define PARSE(p, ...) parse(p, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__))

static void done(struct parsed *p) {
        gp_cli_cmd_done(&p->c);
        gp_buf_done(&p->err);
}

static const char *err_text(struct parsed *p) {
        return p->err.data ? p->err.data : "";
}

static int64_t body_int(const gp_cli_cmd *c, const char *k) {
        json_t *v = json_object_get(c->body, k);
        if (!json_is_integer(v))
                fail_msg("body has no integer %s", k);
        return json_integer_value(v);
}

static void test_durations_wherever_a_duration_goes(void **state) {
        (void)state;
        static const struct {
                const char *opt, *val, *field;
                int64_t want;
        } cases[] = {
                {"--timeout", "1h", "timeout_s", 3600},
                {"--timeout", "90s", "timeout_s", 90},
                {"--timeout", "3600", "timeout_s", 3600},    /* plain seconds, as before */
                {"--timeout", "01:00:00", "timeout_s", 3600},
                {"--timeout", "2-00:00:00", "timeout_s", 172800},
                {"--time", "60", "timeout_s", 3600},         /* sbatch --time: plain = minutes */
                {"--time=01:00:00", NULL, "timeout_s", 3600},
                {"-t", "1-12", "timeout_s", 129600},
                {"-t", "30m", "timeout_s", 1800},
                {"--queue-timeout", "7d", "queue_timeout_s", 604800},
                {"--queue-timeout", "12h", "queue_timeout_s", 43200},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct parsed p;
                if (cases[i].val)
                        PARSE(&p, "submit", (char *)cases[i].opt, (char *)cases[i].val, "true");
                else
                        PARSE(&p, "submit", (char *)cases[i].opt, "true");
                if (p.rc != 0)
                        fail_msg("%s %s: %s", cases[i].opt, cases[i].val ? cases[i].val : "", err_text(&p));
                assert_int_equal(body_int(&p.c, cases[i].field), cases[i].want);
                done(&p);
        }
        struct parsed p;
        PARSE(&p, "run", "--ttl", "2m", "--", "true");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.ttl_s, 120);
        done(&p);
        PARSE(&p, "join-token", "create", "--ttl", "1-00:00:00");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.join_ttl_s, 86400);
        done(&p);
}

static void test_bad_durations_are_usage_errors_naming_the_forms(void **state) {
        (void)state;
        static char *bad[][2] = {
                {"--timeout", "1x"}, {"--timeout", "-1h"}, {"--timeout", "1:60"}, {"--time", "abc"},
                {"--timeout", "99999999999d"}, {"--queue-timeout", "1.5h"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct parsed p;
                PARSE(&p, "submit", bad[i][0], bad[i][1], "true");
                assert_int_equal(p.rc, -EINVAL);
                assert_non_null(strstr(err_text(&p), bad[i][0]));
                done(&p);
        }
        struct parsed p;
        PARSE(&p, "submit", "--timeout", "1x", "true");
        assert_non_null(strstr(err_text(&p), "90s, 30m, 12h, 7d or [D-]HH:MM:SS"));
        done(&p);
        PARSE(&p, "run", "--ttl", "2s", "--", "true"); /* below the 3 s floor */
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "out of range"));
        done(&p);
}

static void test_slurm_short_options_and_memory_sizes(void **state) {
        (void)state;
        struct parsed p;
        PARSE(&p, "submit", "-G", "2", "-J", "train", "-D", "/work", "--mem", "8G", "-W", "python3", "x.py");
        assert_int_equal(p.rc, 0);
        assert_int_equal(body_int(&p.c, "gpu_request"), 2);
        assert_string_equal(json_string_value(json_object_get(p.c.body, "name")), "train");
        assert_string_equal(json_string_value(json_object_get(p.c.body, "workdir")), "/work");
        assert_int_equal(body_int(&p.c, "memory_mb"), 8192);
        assert_true(p.c.wait);
        assert_int_equal(p.c.argc_cmd, 2);
        done(&p);
        PARSE(&p, "submit", "--job-name=j", "--chdir=/d", "--mem=8192M", "true");
        assert_int_equal(p.rc, 0);
        assert_string_equal(json_string_value(json_object_get(p.c.body, "name")), "j");
        assert_string_equal(json_string_value(json_object_get(p.c.body, "workdir")), "/d");
        assert_int_equal(body_int(&p.c, "memory_mb"), 8192);
        done(&p);
        PARSE(&p, "submit", "-G2", "-t90", "-Jx", "true"); /* getopt's attached values */
        assert_int_equal(p.rc, 0);
        assert_int_equal(body_int(&p.c, "gpu_request"), 2);
        assert_int_equal(body_int(&p.c, "timeout_s"), 5400);
        assert_string_equal(json_string_value(json_object_get(p.c.body, "name")), "x");
        done(&p);
        PARSE(&p, "ps", "-ax"); /* flags do not take a value */
        assert_int_equal(p.rc, -EINVAL);
        done(&p);
        PARSE(&p, "submit", "--mem", "4096", "true"); /* plain MB, as before */
        assert_int_equal(p.rc, 0);
        assert_int_equal(body_int(&p.c, "memory_mb"), 4096);
        done(&p);
        PARSE(&p, "submit", "--mem", "8X", "true");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "8G or 8192M"));
        done(&p);
        PARSE(&p, "run", "--wait", "--", "true"); /* --wait is submit's */
        assert_int_equal(p.rc, -EINVAL);
        done(&p);
}

static void test_cancel_takes_several_ids_index_and_state(void **state) {
        (void)state;
        struct parsed p;
        PARSE(&p, "cancel", "3", "4_2", "--array", "9", "5");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.n_refs, 4);
        assert_int_equal(p.c.refs[0].id, 3);
        assert_false(p.c.refs[0].array);
        assert_true(p.c.refs[1].array);
        assert_int_equal(p.c.refs[1].id, 4);
        assert_int_equal(p.c.refs[1].index, 2);
        assert_true(p.c.refs[2].array);
        assert_int_equal(p.c.refs[2].index, -1);
        assert_int_equal(p.c.refs[3].id, 5);
        done(&p);
        PARSE(&p, "cancel", "--state", "queued");
        assert_int_equal(p.rc, 0);
        assert_string_equal(p.c.cancel_state, "queued");
        assert_int_equal(p.c.n_refs, 0);
        done(&p);
        PARSE(&p, "cancel", "--state", "succeeded", "3");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "queued, running or active"));
        done(&p);
        PARSE(&p, "cancel", "--tenant", "a", "3"); /* --tenant goes with --state alone */
        assert_int_equal(p.rc, -EINVAL);
        done(&p);
        PARSE(&p, "cancel");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "missing task ID"));
        done(&p);
}

static void test_status_and_logs_take_id_index(void **state) {
        (void)state;
        struct parsed p;
        PARSE(&p, "status", "3_7");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.n_refs, 1);
        assert_true(p.c.refs[0].array);
        assert_int_equal(p.c.refs[0].id, 3);
        assert_int_equal(p.c.refs[0].index, 7);
        done(&p);
        PARSE(&p, "logs", "-f", "12_0");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.refs[0].index, 0);
        done(&p);
        static char *bad[] = {"_1", "3_", "3_x", "0_1", "3_-1", "3_1_2"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                PARSE(&p, "status", bad[i]);
                assert_int_equal(p.rc, -EINVAL);
                done(&p);
        }
}

static void test_key_create_admin_and_config_check_parse(void **state) {
        (void)state;
        struct parsed p;
        PARSE(&p, "key", "create", "--admin");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.admin);
        done(&p);
        PARSE(&p, "key", "create", "--admin", "--tenant", "t");
        assert_int_equal(p.rc, -EINVAL);
        done(&p);
        PARSE(&p, "key", "create");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "--admin"));
        done(&p);
        PARSE(&p, "config", "check", "/etc/gpupool.yaml");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.verb, GP_CLI_CONFIG);
        assert_string_equal(p.c.file, "/etc/gpupool.yaml");
        done(&p);
        PARSE(&p, "config", "check");
        assert_int_equal(p.rc, -EINVAL);
        done(&p);
        PARSE(&p, "config", "lint", "f");
        assert_int_equal(p.rc, -EINVAL);
        done(&p);
}

/* ---- script directives ---- */

struct dirs {
        gp_cli_directives d;
        gp_buf warn, err;
        int rc;
};

static void dirs(struct dirs *x, const char *text) {
        memset(&x->d, 0, sizeof(x->d));
        gp_buf_init(&x->warn, 1 << 16);
        gp_buf_init(&x->err, 1 << 16);
        x->rc = gp_cli_script_directives("job.sh", text, strlen(text), &x->d, &x->warn, &x->err);
}

static void dirs_done(struct dirs *x) {
        gp_cli_directives_done(&x->d);
        gp_buf_done(&x->warn);
        gp_buf_done(&x->err);
}

/* The words joined by spaces, for comparison. */
static void joined(const gp_cli_directives *d, char *out, size_t size) {
        out[0] = '\0';
        for (size_t i = 0; i < d->n; i++) {
                if (i)
                        strncat(out, " ", size - strlen(out) - 1);
                strncat(out, d->words[i], size - strlen(out) - 1);
        }
}

static void test_gpupool_lines_are_options_until_the_first_command(void **state) {
        (void)state;
        struct dirs x;
        char j[512];
        dirs(&x, "#!/bin/bash\n"
                 "# a comment\n"
                 "\n"
                 "#GPUPOOL --gpus 2 --name 'my job'\n"
                 "#GPUPOOL\t--timeout \"1h\"\r\n"
                 "#GPUPOOLX --gpus 9\n"
                 "python3 train.py\n"
                 "#GPUPOOL --gpus 3\n");
        assert_int_equal(x.rc, 0);
        joined(&x.d, j, sizeof(j));
        assert_string_equal(j, "--gpus 2 --name my job --timeout 1h");
        assert_int_equal(x.d.n, 6);
        assert_int_equal(x.d.lines[0], 4);
        assert_int_equal(x.d.lines[5], 5);
        assert_int_equal(x.warn.len, 0);
        dirs_done(&x);
}

static void test_sbatch_lines_translate_what_gpupool_has_and_warn_about_the_rest(void **state) {
        (void)state;
        struct dirs x;
        char j[512];
        dirs(&x, "#!/bin/sh\n"
                 "#SBATCH --job-name=sweep -t 01:00:00\n"
                 "#SBATCH --gres=gpu:a100:2\n"
                 "#SBATCH --mem=64G\n"
                 "#SBATCH -o out.log -p gpu\n"
                 "#SBATCH --array=0-9%2 --chdir /data --mem-per-gpu 8G -G 1\n"
                 "#SBATCH --gres=tmpfs:10G\n"
                 "srun hostname\n");
        assert_int_equal(x.rc, 0);
        joined(&x.d, j, sizeof(j));
        assert_string_equal(j, "--name sweep --time 01:00:00 --gpus 2 --gpu-model *a100* --host-mem 64G "
                               "--array 0-9%2 --workdir /data --mem 8G --gpus 1");
        const char *w = x.warn.data;
        assert_non_null(w);
        assert_null(strstr(w, "job.sh:4:")); /* Slurm's --mem is host memory: --host-mem */
        assert_non_null(strstr(w, "job.sh:5: #SBATCH -o: ignored (gpupool keeps the output"));
        assert_non_null(strstr(w, "job.sh:5: #SBATCH -p: ignored (gpupool has no partitions"));
        assert_null(strstr(w, "out.log")); /* the value went with its option */
        assert_non_null(strstr(w, "job.sh:7: #SBATCH --gres=tmpfs:10G: ignored"));
        dirs_done(&x);
}

static void test_bad_scripts_and_lines_are_refused_with_their_line(void **state) {
        (void)state;
        struct dirs x;
        dirs(&x, "echo no shebang\n");
        assert_int_equal(x.rc, -EINVAL);
        assert_non_null(strstr(x.err.data, "job.sh: not a script"));
        dirs_done(&x);
        dirs(&x, "#!/bin/sh\n#GPUPOOL --name 'open\n");
        assert_int_equal(x.rc, -EINVAL);
        assert_non_null(strstr(x.err.data, "job.sh:2: a quote is not closed"));
        dirs_done(&x);
        dirs(&x, "#!/bin/sh\n\n#SBATCH --gres=gpu::2\n");
        assert_int_equal(x.rc, -EINVAL);
        assert_non_null(strstr(x.err.data, "job.sh:3:"));
        dirs_done(&x);
        dirs(&x, "#!/bin/sh\n#SBATCH --time\n");
        assert_int_equal(x.rc, -EINVAL);
        assert_non_null(strstr(x.err.data, "job.sh:2: #SBATCH --time needs a value"));
        dirs_done(&x);
        /* NUL bytes, and a script over the bound */
        char nul[] = "#!/bin/sh\n\0x";
        gp_cli_directives d = {0};
        gp_buf w, e;
        gp_buf_init(&w, 4096);
        gp_buf_init(&e, 4096);
        assert_int_equal(gp_cli_script_directives("s", nul, sizeof(nul) - 1, &d, &w, &e), -EINVAL);
        gp_buf_reset(&e);
        char *big = malloc(GP_CLI_SCRIPT_MAX + 2);
        assert_non_null(big);
        memset(big, '#', GP_CLI_SCRIPT_MAX + 1);
        big[1] = '!';
        assert_int_equal(gp_cli_script_directives("s", big, GP_CLI_SCRIPT_MAX + 1, &d, &w, &e), -EINVAL);
        assert_non_null(strstr(e.data, "larger than"));
        free(big);
        gp_buf_done(&w);
        gp_buf_done(&e);
}

static void test_directive_words_are_bounded(void **state) {
        (void)state;
        gp_buf t;
        gp_buf_init(&t, 1 << 20);
        gp_buf_puts(&t, "#!/bin/sh\n");
        for (int i = 0; i < GP_CLI_DIRECTIVE_WORDS_MAX / 4 + 1; i++)
                gp_buf_puts(&t, "#GPUPOOL --env A=1 --env B=2\n");
        struct dirs x;
        dirs(&x, t.data);
        assert_int_equal(x.rc, -EINVAL);
        assert_non_null(strstr(x.err.data, "more than"));
        dirs_done(&x);
        gp_buf_done(&t);
}

/* history / acct: sacct's options, checked here */
static void test_history_takes_sacct_options_and_checks_them(void **state) {
        (void)state;
        struct parsed p;
        PARSE(&p, "acct", "-u", "alice", "-s", "requeued", "-S", "now-2h", "-E", "2026-11-27T10:00", "--limit", "5");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.verb, GP_CLI_HISTORY);
        assert_string_equal(p.c.user, "alice");
        assert_string_equal(p.c.state, "requeued");
        assert_string_equal(p.c.since, "now-2h");
        assert_string_equal(p.c.until, "2026-11-27T10:00");
        assert_int_equal(p.c.limit, 5);
        done(&p);
        PARSE(&p, "history", "--starttime", "today", "--endtime", "now", "--me", "--tenant", "t1");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.me);
        assert_string_equal(p.c.tenant, "t1");
        assert_false(p.c.has_job);
        done(&p);
        /* sacct -j: a task (and the array of that id), or an array's element */
        PARSE(&p, "history", "-j", "12");
        assert_int_equal(p.rc, 0);
        assert_true(p.c.has_job);
        assert_int_equal(p.c.job.id, 12);
        assert_int_equal(p.c.job.index, -1);
        done(&p);
        PARSE(&p, "acct", "--jobs", "12_3");
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.c.job.id, 12);
        assert_int_equal(p.c.job.index, 3);
        done(&p);
        static const char *const bad[][2] = {{"-s", "running"}, {"-s", "active"}, {"-S", "now+1h"}, {"-S", "yesterday"},
                                             {"-E", "2026-13-01"}, {"--limit", "0"}, {"-u", "-x"}, {"-j", "0"},
                                             {"-j", "12_"}, {"-j", "_3"}, {"-j", "12,13"}, {"-j", "12_-1"}};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                PARSE(&p, "history", (char *)bad[i][0], (char *)bad[i][1]);
                assert_int_equal(p.rc, -EINVAL);
                done(&p);
        }
        PARSE(&p, "history", "7");
        assert_int_equal(p.rc, -EINVAL);
        assert_non_null(strstr(err_text(&p), "unexpected argument"));
        done(&p);
}

static void test_when_reads_sacct_times(void **state) {
        (void)state;
        int64_t now = 1795790000000LL, v = 0;
        assert_int_equal(gp_cli_when_parse("now", now, &v), 0);
        assert_int_equal(v, now);
        assert_int_equal(gp_cli_when_parse("now-90", now, &v), 0); /* seconds by default */
        assert_int_equal(v, now - 90000);
        assert_int_equal(gp_cli_when_parse("now-2h", now, &v), 0);
        assert_int_equal(v, now - 7200000);
        assert_int_equal(gp_cli_when_parse("now-3days", now, &v), 0);
        assert_int_equal(v, now - 3 * 86400000LL);
        assert_int_equal(gp_cli_when_parse("now-1w", now, &v), 0);
        assert_int_equal(v, now - 7 * 86400000LL);
        assert_int_equal(gp_cli_when_parse("2026-11-27T10:00:00Z", now, &v), 0);
        assert_int_equal(v, 1795773600000LL);
        int64_t day, at;
        assert_int_equal(gp_cli_when_parse("2026-11-27", now, &day), 0);
        assert_int_equal(gp_cli_when_parse("2026-11-27T01:02", now, &at), 0);
        assert_int_equal(at - day, 3720000); /* local time, both */
        assert_int_equal(gp_cli_when_parse("2026-11-27T01:02:03", now, &at), 0);
        assert_int_equal(at - day, 3723000);
        assert_int_equal(gp_cli_when_parse("today", now, &v), 0);
        assert_true(v <= now && now - v < 86400000LL + 3600000LL);
        assert_int_equal(gp_cli_when_parse("midnight", now, &at), 0);
        assert_int_equal(at, v);
        static const char *const bad[] = {"", "now-", "now-x", "now-1y", "now+1", "tomorrow", "2026-11-27T",
                                          "2026-11-27T25:00", "2026-11-27x", "27/11/2026", "now-99999999999999999",
                                          "now-1000000w"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(gp_cli_when_parse(bad[i], now, &v), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_durations_wherever_a_duration_goes),
                cmocka_unit_test(test_bad_durations_are_usage_errors_naming_the_forms),
                cmocka_unit_test(test_slurm_short_options_and_memory_sizes),
                cmocka_unit_test(test_cancel_takes_several_ids_index_and_state),
                cmocka_unit_test(test_status_and_logs_take_id_index),
                cmocka_unit_test(test_key_create_admin_and_config_check_parse),
                cmocka_unit_test(test_gpupool_lines_are_options_until_the_first_command),
                cmocka_unit_test(test_sbatch_lines_translate_what_gpupool_has_and_warn_about_the_rest),
                cmocka_unit_test(test_bad_scripts_and_lines_are_refused_with_their_line),
                cmocka_unit_test(test_directive_words_are_bounded),
                cmocka_unit_test(test_history_takes_sacct_options_and_checks_them),
                cmocka_unit_test(test_when_reads_sacct_times),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
