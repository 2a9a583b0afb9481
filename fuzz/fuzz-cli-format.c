/* fuzz-cli-format.c - libFuzzer target for the client's rendering of
 * server answers (src/cli/format.c): the input is parsed as JSON and given
 * to every formatter.
 *
 * Checks the sanitising contract: whatever the server sends, the text
 * printed is valid UTF-8 with no control character other than '\n' (so an
 * answer cannot drive the terminal), and formatting fails only with
 * -ENOMEM or -E2BIG.  Any violation aborts. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const gp_buf *b) {
        if (!b->data)
                return;
        const char *p = b->data, *end = b->data + b->len;
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
                if (!gp_str_is_clean(p, n) || memchr(p, '\t', n))
                        abort();
                p += n + 1;
        }
        if (strlen(b->data) != b->len)
                abort();
}

static void run(int (*fn)(const json_t *, gp_buf *), const json_t *j) {
        gp_buf b;
        gp_buf_init(&b, 1 << 24);
        int r = fn(j, &b);
        if (r < 0 && r != -ENOMEM && r != -E2BIG)
                abort();
        if (r == 0)
                check_text(&b);
        gp_buf_done(&b);
}

static int status_at(const json_t *j, gp_buf *b) {
        return gp_cli_format_status(j, 1795000000000, b);
}

static int ps_at(const json_t *j, gp_buf *b) {
        return gp_cli_format_ps(j, 1795000000000, false, b);
}

static int nodes_at(const json_t *j, gp_buf *b) {
        return gp_cli_format_nodes(j, 1795000000000, b);
}

static int join_tokens_at(const json_t *j, gp_buf *b) {
        return gp_cli_format_join_tokens(j, 1795000000000, b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        json_t *j = json_loadb((const char *)data, size, 0, NULL);
        if (!j)
                return 0;
        run(status_at, j);
        run(ps_at, j);
        run(gp_cli_format_queue, j);
        run(gp_cli_format_gpus, j);
        run(nodes_at, j);
        run(join_tokens_at, j);
        run(gp_cli_format_usage, j);
        run(gp_cli_format_invoice, j);
        run(gp_cli_format_runs, j);
        run(gp_cli_format_history, j);
        json_decref(j);
        return 0;
}
