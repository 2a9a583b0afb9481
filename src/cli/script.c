/* script.c - the option lines of a batch script (#GPUPOOL, and #SBATCH for
 * the options that mean the same), as sbatch reads them.
 *
 * A script is text that starts with "#!".  Its directives are the lines
 * that start with "#GPUPOOL" or "#SBATCH" before the first line that is
 * neither blank nor a comment (the first command), as sbatch stops there.
 * A #GPUPOOL line holds gpupool's own options, kept word for word (args.c
 * checks them); an #SBATCH line's options are translated to gpupool's where
 * gpupool has the same thing, and every other one is named in a warning
 * and left out (a script written for Slurm still submits).  Words are split
 * at blanks, with '...' and "..." quoting.  Pure: no I/O, no global state.
 * Bounds: GP_CLI_SCRIPT_MAX bytes in, GP_CLI_DIRECTIVE_WORDS_MAX words out.
 */
#include "cli/script.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_BYTES 4096 /* a directive line longer than this is an error */

void gp_cli_directives_done(gp_cli_directives *d) {
        if (!d)
                return;
        for (size_t i = 0; i < d->n; i++)
                free(d->words[i]);
        free(d->words);
        free(d->lines);
        memset(d, 0, sizeof(*d));
}

static int add_word(gp_cli_directives *d, int line, const char *s, size_t n) {
        if (d->n >= GP_CLI_DIRECTIVE_WORDS_MAX)
                return -E2BIG;
        if (d->n == d->cap) {
                size_t cap = d->cap ? d->cap * 2 : 16;
                char **w = realloc(d->words, cap * sizeof(*w));
                if (!w)
                        return -ENOMEM;
                d->words = w;
                int *l = realloc(d->lines, cap * sizeof(*l));
                if (!l)
                        return -ENOMEM;
                d->lines = l;
                d->cap = cap;
        }
        char *c = strndup(s, n);
        if (!c)
                return -ENOMEM;
        d->words[d->n] = c;
        d->lines[d->n] = line;
        d->n++;
        return 0;
}

/* Split s[0..n) into words at blanks, with quotes; each word is written
 * NUL-terminated into out (n + 1 bytes is always enough) one after the
 * other, and counted in *ret_count.  -EINVAL for an unclosed quote. */
static int split(const char *s, size_t n, char *out, size_t *ret_count) {
        size_t i = 0, count = 0;
        char *o = out;
        while (i < n) {
                while (i < n && (s[i] == ' ' || s[i] == '\t'))
                        i++;
                if (i >= n)
                        break;
                while (i < n && s[i] != ' ' && s[i] != '\t') {
                        char q = s[i];
                        if (q == '\'' || q == '"') {
                                const char *end = memchr(s + i + 1, q, n - i - 1);
                                if (!end)
                                        return -EINVAL;
                                size_t len = (size_t)(end - (s + i + 1));
                                memcpy(o, s + i + 1, len);
                                o += len;
                                i += len + 2;
                        } else {
                                *o++ = s[i++];
                        }
                }
                *o++ = '\0';
                count++;
        }
        *ret_count = count;
        return 0;
}

/* The #SBATCH options gpupool has: Slurm's long and short name, and
 * gpupool's long option. */
static const struct sbatch_opt {
        const char *name;
        char shortc;
        const char *gp; /* NULL: special (gres, gpus) */
} sbatch_opts[] = {
        {"gpus", 'G', NULL},         {"gres", 0, NULL},           {"time", 't', "--time"},
        {"job-name", 'J', "--name"}, {"mem-per-gpu", 0, "--mem"}, {"array", 'a', "--array"},
        {"chdir", 'D', "--workdir"}, {"signal", 0, "--signal"},   {"mem", 0, "--host-mem"},
        {"cpus-per-task", 'c', "--cpus"},
};

/* Why some common #SBATCH options are left out (the warning's reason). */
static const struct {
        const char *name;
        const char *why;
} sbatch_ignored[] = {
        {"output", "gpupool keeps the output: gpupool logs ID"},
        {"error", "gpupool keeps the output: gpupool logs ID"},
        {"partition", "gpupool has no partitions (--node-selector K=V picks nodes by label)"},
};

/* Slurm's short options that take no value (the others take one). */
#define SBATCH_SHORT_FLAGS "hHkOQsvVW"

/* The long name of some short options, for the warning's reason. */
static const char *short_long(char c) {
        switch (c) {
        case 'o':
                return "output";
        case 'e':
                return "error";
        case 'p':
                return "partition";
        default:
                return "";
        }
}

static const char *ignored_why(const char *name) {
        for (size_t i = 0; i < sizeof(sbatch_ignored) / sizeof(sbatch_ignored[0]); i++)
                if (!strcmp(sbatch_ignored[i].name, name))
                        return sbatch_ignored[i].why;
        return "gpupool has no such option";
}

/* GPUs as Slurm writes them: N, TYPE:N (--gpus) or gpu:N, gpu:TYPE:N
 * (--gres).  Adds --gpus N and, with a TYPE, --gpu-model *TYPE*. */
static int add_gpus(gp_cli_directives *d, int line, const char *v, bool gres) {
        if (gres) {
                if (strncmp(v, "gpu:", 4) != 0)
                        return 1; /* another generic resource: not ours */
                v += 4;
        }
        const char *colon = strrchr(v, ':');
        const char *num = colon ? colon + 1 : v;
        int r = add_word(d, line, "--gpus", 6);
        if (r == 0)
                r = add_word(d, line, num, strlen(num));
        if (r == 0 && colon) {
                char model[80];
                size_t tl = (size_t)(colon - v);
                if (tl == 0 || tl + 3 > sizeof(model) || memchr(v, ':', tl))
                        return -EINVAL;
                model[0] = '*';
                memcpy(model + 1, v, tl);
                model[tl + 1] = '*';
                model[tl + 2] = '\0';
                r = add_word(d, line, "--gpu-model", 11);
                if (r == 0)
                        r = add_word(d, line, model, tl + 2);
        }
        return r;
}

static int warn_line(gp_buf *warn, const char *name, int line, const char *fmt, const char *a, const char *b) {
        int r = gp_buf_printf(warn, "%s:%d: ", name, line);
        r |= gp_buf_printf(warn, fmt, a, b);
        r |= gp_buf_puts(warn, "\n");
        return r ? -ENOMEM : 0;
}

/* One #SBATCH line's words w[0..n). */
static int sbatch_line(gp_cli_directives *d, const char *name, int line, char **w, size_t n, gp_buf *warn,
                       gp_buf *err) {
        for (size_t i = 0; i < n; i++) {
                const char *word = w[i], *val = NULL;
                char optname[64];
                const struct sbatch_opt *o = NULL;
                bool has_next = i + 1 < n && w[i + 1][0] != '-';
                if (word[0] != '-' || word[1] == '\0') {
                        int r = warn_line(warn, name, line, "#SBATCH: '%.80s' is not an option; ignored%s", word, "");
                        if (r < 0)
                                return r;
                        continue;
                }
                if (word[1] == '-') {
                        const char *eq = strchr(word + 2, '=');
                        size_t nl = eq ? (size_t)(eq - (word + 2)) : strlen(word + 2);
                        if (nl == 0 || nl >= sizeof(optname))
                                nl = 0;
                        memcpy(optname, word + 2, nl);
                        optname[nl] = '\0';
                        if (eq)
                                val = eq + 1;
                        for (size_t k = 0; k < sizeof(sbatch_opts) / sizeof(sbatch_opts[0]); k++)
                                if (!strcmp(sbatch_opts[k].name, optname))
                                        o = &sbatch_opts[k];
                } else {
                        optname[0] = word[1];
                        optname[1] = '\0';
                        if (word[2])
                                val = word + 2;
                        for (size_t k = 0; k < sizeof(sbatch_opts) / sizeof(sbatch_opts[0]); k++)
                                if (sbatch_opts[k].shortc == word[1])
                                        o = &sbatch_opts[k];
                }
                if (!o) {
                        /* not ours: skip its value when it is the next word */
                        bool flag = word[1] != '-' && strchr(SBATCH_SHORT_FLAGS, word[1]);
                        if (!val && has_next && !flag)
                                i++;
                        int r = warn_line(warn, name, line, "#SBATCH %.80s: ignored (%s)", word,
                                          ignored_why(word[1] == '-' ? optname : short_long(word[1])));
                        if (r < 0)
                                return r;
                        continue;
                }
                if (!val) {
                        if (i + 1 >= n) {
                                gp_buf_printf(err, "%s:%d: #SBATCH %s needs a value", name, line, word);
                                return -EINVAL;
                        }
                        val = w[++i];
                }
                int r;
                if (!o->gp) {
                        r = add_gpus(d, line, val, o->name[2] == 'e'); /* "gres" */
                        if (r == 1) {
                                r = warn_line(warn, name, line, "#SBATCH --gres=%.80s: ignored (%s)", val,
                                              "gpupool schedules GPUs only");
                        } else if (r == -EINVAL) {
                                gp_buf_printf(err, "%s:%d: #SBATCH %s: '%.80s' is not N, TYPE:N or gpu:TYPE:N", name,
                                              line, word, val);
                                return r;
                        }
                } else {
                        r = add_word(d, line, o->gp, strlen(o->gp));
                        if (r == 0)
                                r = add_word(d, line, val, strlen(val));
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

int gp_cli_script_directives(const char *name, const char *text, size_t len, gp_cli_directives *ret, gp_buf *warn,
                             gp_buf *err) {
        gp_cli_directives d = {0};
        char *buf = NULL;
        int r = 0;
        if (len > GP_CLI_SCRIPT_MAX) {
                gp_buf_printf(err, "%s: the script is larger than %zu bytes", name, GP_CLI_SCRIPT_MAX);
                return -EINVAL;
        }
        if (len < 2 || text[0] != '#' || text[1] != '!') {
                gp_buf_printf(err,
                              "%s: not a script: the first line must start with #! and the interpreter "
                              "(e.g. #!/bin/bash)",
                              name);
                return -EINVAL;
        }
        if (memchr(text, '\0', len)) {
                gp_buf_printf(err, "%s: not a script: it contains NUL bytes", name);
                return -EINVAL;
        }
        buf = malloc(LINE_MAX_BYTES + 1);
        if (!buf)
                return -ENOMEM;
        const char *p = memchr(text, '\n', len);
        int line = 1;
        while (p && p + 1 < text + len) {
                const char *s = p + 1, *end = text + len;
                const char *nl = memchr(s, '\n', (size_t)(end - s));
                size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
                p = nl;
                line++;
                if (n && s[n - 1] == '\r')
                        n--;
                size_t lead = 0;
                while (lead < n && (s[lead] == ' ' || s[lead] == '\t'))
                        lead++;
                if (lead == n)
                        continue; /* blank */
                if (s[lead] != '#')
                        break; /* the first command: directives end */
                bool gp = n >= 8 && !memcmp(s, "#GPUPOOL", 8) && (n == 8 || s[8] == ' ' || s[8] == '\t');
                bool sb = n >= 7 && !memcmp(s, "#SBATCH", 7) && (n == 7 || s[7] == ' ' || s[7] == '\t');
                if (!gp && !sb)
                        continue; /* a comment */
                size_t skip = gp ? 8 : 7;
                if (n - skip > LINE_MAX_BYTES) {
                        gp_buf_printf(err, "%s:%d: a directive line longer than %d bytes", name, line, LINE_MAX_BYTES);
                        r = -EINVAL;
                        goto out;
                }
                size_t count;
                if (split(s + skip, n - skip, buf, &count) < 0) {
                        gp_buf_printf(err, "%s:%d: a quote is not closed", name, line);
                        r = -EINVAL;
                        goto out;
                }
                char *w[LINE_MAX_BYTES / 2 + 1];
                char *q = buf;
                for (size_t k = 0; k < count; k++) {
                        w[k] = q;
                        q += strlen(q) + 1;
                }
                if (gp) {
                        for (size_t k = 0; k < count && r == 0; k++)
                                r = add_word(&d, line, w[k], strlen(w[k]));
                } else {
                        r = sbatch_line(&d, name, line, w, count, warn, err);
                }
                if (r == -E2BIG) {
                        gp_buf_printf(err, "%s:%d: more than %d option words in the script's directives", name, line,
                                      GP_CLI_DIRECTIVE_WORDS_MAX);
                        r = -EINVAL;
                }
                if (r < 0)
                        goto out;
        }
        *ret = d;
        memset(&d, 0, sizeof(d));
out:
        free(buf);
        gp_cli_directives_done(&d);
        return r;
}
