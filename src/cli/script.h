/* script.h - a batch script's directive lines (#GPUPOOL, #SBATCH) as
 * gpupool options; see script.c for the rules.  Used by cli.c (submit)
 * and tests/unit/test-cli-script.c. */
#ifndef GP_CLI_SCRIPT_H
#define GP_CLI_SCRIPT_H

#include <stddef.h>

#include "base/buf.h"
#include "cli/cli-int.h"

#define GP_CLI_DIRECTIVE_WORDS_MAX 512 /* option words from one script's directives */

/* The options of a script's directives, in order: words[i] came from
 * line lines[i] of the script (1 = the #! line). */
typedef struct gp_cli_directives {
        char **words; /* owned, each owned */
        int *lines;   /* owned */
        size_t n, cap;
} gp_cli_directives;

/* Read the directives of the script text[0..len) (name: how messages call
 * it, "train.sh" or "stdin").  On success *ret holds the option words
 * (free with gp_cli_directives_done) and warn has one "NAME:LINE: ..." line
 * for each #SBATCH option left out.  -EINVAL with "NAME[:LINE]: why" in err
 * when text is not a script (no "#!", larger than GP_CLI_SCRIPT_MAX, NUL
 * bytes) or a directive line is malformed (unclosed quote, too long, too
 * many words, a bad --gres); -ENOMEM.  Thread-safe. */
int gp_cli_script_directives(const char *name, const char *text, size_t len, gp_cli_directives *ret, gp_buf *warn,
                             gp_buf *err);
/* Free what a gp_cli_directives holds and zero it.  Takes NULL. */
void gp_cli_directives_done(gp_cli_directives *d);

#endif
