/* fuzz-cli-args.c - libFuzzer target for the client's command line
 * (gp_cli_parse, src/cli/args.c).
 *
 * The input is split at NUL bytes into argv words (at most 64).  Checks the
 * contract, not only the absence of crashes: a failure is -EINVAL with a
 * message that names the problem and ends with a usage line, or -ENOMEM;
 * a success has an http(s) API URL without a trailing '/', and for submit
 * and run a body within the documented bounds (a non-empty command array
 * for submit unless no COMMAND was given, none and a lease TTL for run).  Any violation aborts. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli-int.h"
#include "core/task.h"

#define MAX_WORDS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_int(const json_t *body, const char *k, int64_t lo, int64_t hi) {
        json_t *v = json_object_get(body, k);
        if (v && (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *copy = malloc(size + 1);
        char *argv[MAX_WORDS + 2];
        int argc = 0;
        if (!copy)
                return 0;
        memcpy(copy, data, size);
        copy[size] = '\0';
        argv[argc++] = "gpupool";
        for (char *p = copy; p <= copy + size && argc <= MAX_WORDS; p += strlen(p) + 1)
                argv[argc++] = p;
        argv[argc] = NULL;

        gp_cli_cmd c;
        gp_buf err;
        gp_cli_cmd_init(&c);
        gp_buf_init(&err, 1 << 16);
        int r = gp_cli_parse(argc, argv, NULL, NULL, &c, &err);
        if (r < 0) {
                if (r != -EINVAL && r != -ENOMEM)
                        abort();
                if (r == -EINVAL && (!err.data || strncmp(err.data, "gpupool", 7) != 0 ||
                                     !strstr(err.data, "\nusage: ")))
                        abort();
        } else {
                size_t n = c.api ? strlen(c.api) : 0;
                if (!n || c.api[n - 1] == '/' ||
                    (strncmp(c.api, "http://", 7) != 0 && strncmp(c.api, "https://", 8) != 0))
                        abort();
                if ((unsigned)c.verb >= GP_CLI_VERB_COUNT)
                        abort();
                /* cancel --state S, -u USER or --me names no id: a bulk cancel */
                if ((c.verb == GP_CLI_STATUS || c.verb == GP_CLI_CANCEL || c.verb == GP_CLI_LOGS) &&
                    !c.help && c.id <= 0 &&
                    !(c.verb == GP_CLI_CANCEL && c.n_refs == 0 && (c.cancel_state || c.user || c.me)))
                        abort();
                if (c.n_refs > GP_CLI_CANCEL_IDS_MAX)
                        abort();
                if ((c.verb == GP_CLI_SUBMIT || c.verb == GP_CLI_RUN) && !c.help) {
                        json_t *cmd = json_object_get(c.body, "command");
                        /* submit without COMMAND: the script comes from stdin (batch.c) */
                        if (c.verb == GP_CLI_SUBMIT && !c.no_command &&
                            (!json_is_array(cmd) || json_array_size(cmd) == 0))
                                abort();
                        if (c.verb == GP_CLI_SUBMIT && c.no_command && cmd)
                                abort();
                        if (c.verb == GP_CLI_RUN && (cmd || c.argc_cmd < 1 || c.argv_cmd[c.argc_cmd] != NULL))
                                abort();
                        check_int(c.body, "gpu_request", 1, GP_MAX_GPUS);
                        check_int(c.body, "priority", 0, 9);
                        check_int(c.body, "memory_mb", 0, GP_CLI_MEM_MAX_MB);
                        check_int(c.body, "lease_ttl_s", GP_CLI_TTL_MIN, GP_CLI_TTL_MAX);
                        char *s = json_dumps(c.body, JSON_COMPACT);
                        if (!s)
                                abort();
                        free(s);
                }
        }
        gp_cli_cmd_done(&c);
        gp_buf_done(&err);
        free(copy);
        return 0;
}
