/* fuzz-cli-script.c - libFuzzer target for a batch script's directive
 * lines (gp_cli_script_directives, src/cli/script.c): the input is the
 * script.  Checks the contract: -EINVAL with a message naming the script,
 * or -ENOMEM; on success at most GP_CLI_DIRECTIVE_WORDS_MAX words, each a
 * string from a line after the #! line and within the script's lines, and
 * every warning line naming the script.  Any violation aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/script.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        gp_cli_directives d = {0};
        gp_buf warn, err;
        gp_buf_init(&warn, 1 << 20);
        gp_buf_init(&err, 1 << 16);
        int r = gp_cli_script_directives("s.sh", (const char *)data, size, &d, &warn, &err);
        if (r < 0) {
                if (r != -EINVAL && r != -ENOMEM)
                        abort();
                if (r == -EINVAL && (!err.data || strncmp(err.data, "s.sh", 4) != 0))
                        abort();
                if (d.n || d.words)
                        abort();
        } else {
                size_t lines = 1;
                for (size_t i = 0; i < size; i++)
                        lines += data[i] == '\n';
                if (d.n > GP_CLI_DIRECTIVE_WORDS_MAX)
                        abort();
                for (size_t i = 0; i < d.n; i++)
                        if (!d.words[i] || d.lines[i] < 2 || (size_t)d.lines[i] > lines ||
                            (i && d.lines[i] < d.lines[i - 1]))
                                abort();
                for (const char *w = warn.data; w && *w; w = strchr(w, '\n') + 1) {
                        if (strncmp(w, "s.sh:", 5) != 0 || !strchr(w, '\n'))
                                abort();
                }
        }
        gp_cli_directives_done(&d);
        gp_buf_done(&warn);
        gp_buf_done(&err);
        return 0;
}
