/* batch.c - `gpupool submit`: a COMMAND, a script (a local file that
 * starts with "#!", or stdin when no COMMAND is given), and --wait.
 *
 * A script is sent whole and stored with the task ("script" in the submit
 * body, docs/api.md), as sbatch stores it: the task runs that copy.  Its
 * directives (script.c) are options placed before the command line's
 * own, and the whole is parsed again by gp_cli_parse, so an option given
 * on the command line overrides the script's and every option is checked
 * by the one parser.  Each directive line is first parsed alone, so that a
 * bad one is reported as SCRIPT:LINE.
 *
 * --wait follows the task (long poll while queued, then a poll every
 * second) until it ends, and exits with its exit code (an array: 0 when
 * every element succeeded, else 1), as sbatch --wait does.
 */
#include "cli/cli-int.h"
#include "cli/unix.h"
#include "cli/script.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

#define WAIT_POLL_S 30            /* ?wait= of the long poll while queued */
#define WAIT_UNREACHABLE_MS 60000 /* --wait rides out a server outage this long */

/* Read at most GP_CLI_SCRIPT_MAX + 1 bytes of fd into *ret (NUL-terminated,
 * owned).  0 or -errno. */
static int read_all(int fd, char **ret, size_t *ret_len) {
        size_t cap = GP_CLI_SCRIPT_MAX + 2, len = 0;
        char *b = malloc(cap);
        if (!b)
                return -ENOMEM;
        while (len < cap - 1) {
                ssize_t n = read(fd, b + len, cap - 1 - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int r = -errno;
                        free(b);
                        return r;
                }
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        b[len] = '\0';
        *ret = b;
        *ret_len = len;
        return 0;
}

/* COMMAND's first word as a local script: 1 with its text when it names a
 * regular file here that starts with "#!", 0 when it is not one (a command
 * for the node), -errno when it cannot be read. */
static int local_script(const char *path, char **ret, size_t *ret_len) {
        struct stat st;
        char head[2];
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return 0;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || pread(fd, head, 2, 0) != 2 || head[0] != '#' ||
            head[1] != '!') {
                close(fd);
                return 0;
        }
        int r = read_all(fd, ret, ret_len);
        close(fd);
        return r < 0 ? r : 1;
}

/* Print the first line of a parser message as NAME:LINE: why. */
static void directive_error(FILE *err, const char *name, int line, const gp_buf *msg) {
        const char *m = msg->data ? msg->data : "bad option";
        const char *prefix = "gpupool submit: ";
        if (!strncmp(m, prefix, strlen(prefix)))
                m += strlen(prefix);
        size_t n = strcspn(m, "\n");
        fprintf(err, "gpupool submit: %s:%d: %.*s\n", name, line, (int)n, m);
}

/* Check each directive line alone: ["gpupool", "submit", WORDS..., "true"]. */
static int check_lines(const gp_cli_directives *d, const char *name, FILE *err) {
        size_t i = 0;
        while (i < d->n) {
                size_t j = i;
                while (j < d->n && d->lines[j] == d->lines[i])
                        j++;
                char **av = calloc(j - i + 4, sizeof(*av));
                if (!av)
                        return -ENOMEM;
                int ac = 0;
                av[ac++] = (char *)"gpupool";
                av[ac++] = (char *)"submit";
                for (size_t k = i; k < j; k++)
                        av[ac++] = d->words[k];
                av[ac++] = (char *)"true";
                gp_cli_cmd one;
                gp_buf msg;
                gp_cli_cmd_init(&one);
                gp_buf_init(&msg, 64 * 1024);
                int r = gp_cli_parse(ac, av, NULL, NULL, &one, &msg);
                if (r == -EINVAL)
                        directive_error(err, name, d->lines[i], &msg);
                gp_buf_done(&msg);
                gp_cli_cmd_done(&one);
                free(av);
                if (r < 0)
                        return r;
                i = j;
        }
        return 0;
}

/* argv with the directives' words put before the command line's options:
 * argv[0..verb_at], WORDS, argv[verb_at+1..cmd_at), "--", ARGS. */
static char **merged_argv(int argc, char **argv, const gp_cli_cmd *c, const gp_cli_directives *d, char **args,
                          int nargs, int *ret_argc) {
        char **av = calloc((size_t)argc + d->n + (size_t)nargs + 2, sizeof(*av));
        if (!av)
                return NULL;
        int ac = 0;
        for (int k = 0; k <= c->verb_at; k++)
                av[ac++] = argv[k];
        for (size_t k = 0; k < d->n; k++)
                av[ac++] = d->words[k];
        for (int k = c->verb_at + 1; k < c->cmd_at && k < argc; k++)
                av[ac++] = argv[k];
        if (!(c->cmd_at > c->verb_at + 1 && strcmp(argv[c->cmd_at - 1], "--") == 0))
                av[ac++] = (char *)"--";
        for (int k = 0; k < nargs; k++)
                av[ac++] = args[k];
        *ret_argc = ac;
        return av;
}

/* The task's (or array's) end: its exit code for the shell. */
static int wait_end(const gp_cli_cmd *c, FILE *err, int64_t id, bool array) {
        gp_cli_conn conn = {.api = c->api, .key = c->key, .cacert = c->cacert};
        int64_t down_since = 0;
        char path[96];
        for (;;) {
                gp_cli_resp r = {0};
                gp_buf msg;
                bool queued = false;
                if (array)
                        snprintf(path, sizeof(path), "/api/v1/arrays/%" PRId64, id);
                else
                        snprintf(path, sizeof(path), "/api/v1/tasks/%" PRId64 "?wait=%d", id, WAIT_POLL_S);
                gp_buf_init(&msg, 4096);
                int rc = gp_cli_http_json(&conn, "GET", path, NULL, GP_CLI_REQUEST_TIMEOUT_S, &r, &msg);
                if (rc == -EHOSTUNREACH) {
                        /* a server restart or failover: keep waiting a while */
                        if (!down_since)
                                down_since = gp_mono_ms();
                        if (gp_mono_ms() - down_since < WAIT_UNREACHABLE_MS) {
                                gp_buf_done(&msg);
                                sleep(1);
                                continue;
                        }
                }
                down_since = 0;
                int ex = gp_cli_check(err, rc, &r, &msg);
                gp_buf_done(&msg);
                if (ex != GP_CLI_EXIT_OK) {
                        gp_cli_resp_done(&r);
                        return ex;
                }
                if (array) {
                        json_t *n = json_object_get(r.json, "counts");
                        int64_t q = json_integer_value(json_object_get(n, "queued"));
                        int64_t run = json_integer_value(json_object_get(n, "running"));
                        int64_t ok = json_integer_value(json_object_get(n, "succeeded"));
                        int64_t all = json_integer_value(json_object_get(r.json, "count"));
                        gp_cli_resp_done(&r);
                        if (q + run == 0) {
                                if (ok == all)
                                        return GP_CLI_EXIT_OK;
                                fprintf(err,
                                        "gpupool: job array %" PRId64 ": %" PRId64 " of %" PRId64
                                        " elements did not succeed ('gpupool ps -a -r' lists them)\n",
                                        id, all - ok, all);
                                return 1;
                        }
                } else {
                        const char *st = json_string_value(json_object_get(r.json, "state"));
                        json_t *code = json_object_get(r.json, "exit_code");
                        if (!st) {
                                gp_cli_resp_done(&r);
                                fprintf(err, "gpupool: unexpected answer from the server (no state)\n");
                                return GP_CLI_EXIT_REFUSED;
                        }
                        queued = strcmp(st, "queued") == 0;
                        if (!queued && strcmp(st, "running") != 0) {
                                int ex2 = 0;
                                if (strcmp(st, "succeeded") != 0) {
                                        json_int_t x = json_is_integer(code) ? json_integer_value(code) : 0;
                                        ex2 = x > 0 && x < 256 ? (int)x : 1;
                                        gp_buf b;
                                        gp_buf_init(&b, 256);
                                        gp_cli_put_clean(&b, st, 32);
                                        fprintf(err, "gpupool: task %" PRId64 " ended %s", id, b.data ? b.data : "");
                                        if (json_is_integer(code))
                                                fprintf(err, " (exit code %" JSON_INTEGER_FORMAT ")",
                                                        json_integer_value(code));
                                        fputc('\n', err);
                                        gp_buf_done(&b);
                                }
                                gp_cli_resp_done(&r);
                                return ex2;
                        }
                        gp_cli_resp_done(&r);
                }
                if (!queued)
                        sleep(1); /* running: the long poll answers at once, so pace it */
        }
}

int gp_cli_cmd_submit(int argc, char **argv, const gp_cli_cmd *c, FILE *out, FILE *err) {
        char *text = NULL, **av = NULL;
        size_t len = 0;
        const char *name = NULL;
        gp_cli_directives d = {0};
        gp_cli_cmd c2;
        gp_buf msg, warn;
        const gp_cli_cmd *use = c;
        int ex = GP_CLI_EXIT_USAGE, r;

        gp_cli_cmd_init(&c2);
        gp_buf_init(&msg, 64 * 1024);
        gp_buf_init(&warn, 64 * 1024);
        if (c->no_command) {
                /* a terminal, or nothing on stdin: no script either */
                r = isatty(STDIN_FILENO) ? 0 : read_all(STDIN_FILENO, &text, &len);
                if (r == 0 && len == 0) {
                        fprintf(err,
                                "gpupool submit: missing COMMAND (or a script on stdin; to hold GPUs for a "
                                "command run here, use gpupool run)\n\nusage: %s\n",
                                gp_cli_usage(GP_CLI_SUBMIT));
                        goto out;
                }
                name = "stdin";
        } else {
                name = c->argv_cmd[0];
                r = local_script(name, &text, &len);
                if (r == 0)
                        name = NULL; /* a command for the node: sent as it is */
        }
        if (r < 0) {
                fprintf(err, "gpupool submit: cannot read %s: %s\n", name, gp_strerror(r));
                ex = GP_CLI_EXIT_REFUSED;
                goto out;
        }
        if (name) {
                r = gp_cli_script_directives(name, text, len, &d, &warn, &msg);
                if (warn.len)
                        fputs(warn.data, err);
                if (r == -EINVAL) {
                        fprintf(err, "gpupool submit: %s\n", msg.data ? msg.data : "bad script");
                        goto out;
                }
                if (r < 0 || (r = check_lines(&d, name, err)) < 0) {
                        if (r == -ENOMEM)
                                fprintf(err, "gpupool: out of memory\n");
                        ex = r == -EINVAL ? GP_CLI_EXIT_USAGE : GP_CLI_EXIT_REFUSED;
                        goto out;
                }
                int ac, nargs = c->no_command ? 0 : c->argc_cmd - 1;
                av = merged_argv(argc, argv, c, &d, c->no_command ? NULL : c->argv_cmd + 1, nargs, &ac);
                if (!av) {
                        fprintf(err, "gpupool: out of memory\n");
                        ex = GP_CLI_EXIT_REFUSED;
                        goto out;
                }
                c2.env_node = c->env_node;
                gp_buf_reset(&msg);
                r = gp_cli_parse(ac, av, getenv("GPUPOOL_API"), getenv("GPUPOOL_API_KEY"), &c2, &msg);
                if (r < 0) {
                        fprintf(err, "%s", r == -EINVAL && msg.data ? msg.data : "gpupool: out of memory\n");
                        ex = r == -EINVAL ? GP_CLI_EXIT_USAGE : GP_CLI_EXIT_REFUSED;
                        goto out;
                }
                json_t *s = json_stringn(text, len);
                if (!s) {
                        fprintf(err, "gpupool submit: %s: not UTF-8 text (the API carries text only)\n", name);
                        goto out;
                }
                if (json_object_set_new(c2.body, "script", s) < 0 ||
                    (!json_object_get(c2.body, "command") &&
                     json_object_set_new(c2.body, "command", json_array()) < 0)) {
                        fprintf(err, "gpupool: out of memory\n");
                        ex = GP_CLI_EXIT_REFUSED;
                        goto out;
                }
                use = &c2;
                /* the script's task is made where it was submitted, too (unix.h) */
                if ((r = gp_cli_add_origin(&c2, err)) < 0) {
                        if (r == -ENOMEM)
                                fprintf(err, "gpupool: out of memory\n");
                        ex = r == -ENOMEM ? GP_CLI_EXIT_REFUSED : GP_CLI_EXIT_USAGE;
                        goto out;
                }
        }
        gp_cli_resp resp;
        ex = gp_cli_call(use, err, "POST", "/api/v1/tasks", use->body, &resp);
        if (ex)
                goto out;
        json_t *id = json_object_get(resp.json, "id");
        bool array = false;
        if (!id) {
                id = json_object_get(resp.json, "array_id"); /* a job array: its id */
                array = true;
        }
        if (use->json) {
                json_dumpf(resp.json, out, JSON_INDENT(2));
                fputc('\n', out);
        } else if (json_is_integer(id)) {
                fprintf(out, "%" PRId64 "\n", (int64_t)json_integer_value(id));
        }
        if (!json_is_integer(id)) {
                fprintf(err, "gpupool: the server's answer has no task id\n");
                ex = GP_CLI_EXIT_REFUSED;
        } else if (use->wait) {
                fflush(out);
                ex = wait_end(use, err, (int64_t)json_integer_value(id), array);
        }
        gp_cli_resp_done(&resp);
out:
        free(av);
        free(text);
        gp_cli_directives_done(&d);
        gp_cli_cmd_done(&c2);
        gp_buf_done(&msg);
        gp_buf_done(&warn);
        return ex;
}
