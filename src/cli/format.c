/* format.c - the server's JSON turned into what people read: the status
 * block of one task and aligned tables (ps, queue, gpus, nodes, join tokens).
 *
 * Pure: no I/O, no clock (the caller passes now_ms).  Every string that
 * came from the server is sanitised before it is printed (what the text
 * rule of base/text.h refuses - control characters, line separators, bidi
 * controls - and invalid UTF-8 become '?', so a task name cannot move the
 * cursor or change the terminal's colours) and long table cells are cut
 * with an ellipsis.  Column widths are measured in terminal columns, so
 * names in Chinese line up.  Missing or mistyped fields print as "-".
 */
#include "cli/cli-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/text.h"
#include "base/util.h"
#include "base/vec.h"

/* ---- UTF-8 and widths ------------------------------------------------ */

/* Decode one code point; returns its length in bytes or 0 if invalid. */
static size_t utf8_next(const unsigned char *s, size_t len, uint32_t *cp) {
        unsigned c = s[0];
        size_t n;
        uint32_t v;
        if (c < 0x80) {
                *cp = c;
                return 1;
        } else if ((c & 0xe0) == 0xc0) {
                n = 2;
                v = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
                n = 3;
                v = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
                n = 4;
                v = c & 0x07;
        } else {
                return 0;
        }
        if (len < n)
                return 0;
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                v = (v << 6) | (s[i] & 0x3f);
        }
        if ((n == 2 && v < 0x80) || (n == 3 && v < 0x800) || (n == 4 && v < 0x10000) || v > 0x10ffff ||
            (v >= 0xd800 && v <= 0xdfff))
                return 0;
        *cp = v;
        return n;
}

static int cp_width(uint32_t cp) {
        if ((cp >= 0x300 && cp <= 0x36f) || (cp >= 0x200b && cp <= 0x200f) || cp == 0xfe0f)
                return 0;
        if ((cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0x303e) ||
            (cp >= 0x3041 && cp <= 0x33ff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
            (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0xa000 && cp <= 0xa4cf) ||
            (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0xf900 && cp <= 0xfaff) ||
            (cp >= 0xfe30 && cp <= 0xfe4f) || (cp >= 0xff00 && cp <= 0xff60) ||
            (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x1f300 && cp <= 0x1f64f) ||
            (cp >= 0x1f900 && cp <= 0x1f9ff) || (cp >= 0x20000 && cp <= 0x3fffd))
                return 2;
        return 1;
}

size_t gp_cli_display_width(const char *s) {
        const unsigned char *p = (const unsigned char *)s;
        size_t len = strlen(s), w = 0;
        while (len > 0) {
                uint32_t cp;
                size_t n = utf8_next(p, len, &cp);
                if (n == 0) {
                        w++;
                        n = 1;
                } else {
                        w += (size_t)cp_width(cp);
                }
                p += n;
                len -= n;
        }
        return w;
}

/* Append s made safe for a terminal; at most max_cols columns (0 = no
 * limit), cut with an ellipsis.  NULL (a field the server's answer
 * lacks) is "". */
static int put_clean(gp_buf *out, const char *s, size_t max_cols) {
        if (!s)
                s = "";
        const unsigned char *p = (const unsigned char *)s;
        size_t len = strlen(s), w = 0;
        size_t total = max_cols ? gp_cli_display_width(s) : 0;
        int r = 0;
        while (len > 0 && r == 0) {
                uint32_t cp;
                size_t n = utf8_next(p, len, &cp);
                int cw;
                /* the text rule (base/text.h) per character: controls, separators, bidi controls */
                bool bad = n == 0 || !gp_text_valid((const char *)p, n, n);
                if (n == 0)
                        n = 1;
                cw = bad ? 1 : cp_width(cp);
                if (max_cols && total > max_cols && w + (size_t)cw > max_cols - 1) {
                        r = gp_buf_puts(out, "\xe2\x80\xa6"); /* U+2026 */
                        break;
                }
                r = bad ? gp_buf_puts(out, "?") : gp_buf_append(out, p, n);
                w += (size_t)cw;
                p += n;
                len -= n;
        }
        return r;
}

int gp_cli_put_clean(gp_buf *out, const char *s, size_t max_cols) {
        return put_clean(out, s, max_cols);
}

int gp_cli_shell_quote(const char *s, gp_buf *out) {
        bool plain = *s != '\0';
        for (const char *p = s; *p && plain; p++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%_-+=:,./",
                            *p))
                        plain = false;
        if (plain)
                return put_clean(out, s, 0);
        int r = gp_buf_puts(out, "'");
        for (const char *p = s; *p && r == 0; p++) {
                if (*p == '\'') {
                        r = gp_buf_puts(out, "'\\''");
                } else {
                        char one[2] = {*p, 0};
                        /* control bytes: '?' (put_clean), the rest as is */
                        r = ((unsigned char)*p < 0x20 || *p == 0x7f) ? gp_buf_puts(out, "?")
                                                                      : gp_buf_puts(out, one);
                }
        }
        return r ? r : gp_buf_puts(out, "'");
}

/* ---- JSON access ---------------------------------------------------- */

static const char *jstr(const json_t *o, const char *k) {
        json_t *v = json_object_get(o, k);
        return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jint(const json_t *o, const char *k, int64_t *ret) {
        json_t *v = json_object_get(o, k);
        if (json_is_integer(v)) {
                *ret = json_integer_value(v);
                return true;
        }
        if (json_is_real(v)) {
                double d = json_real_value(v);
                if (!(d > -9.0e18 && d < 9.0e18)) /* also false for NaN */
                        return false;
                *ret = (int64_t)d;
                return true;
        }
        return false;
}

static bool jnum(const json_t *o, const char *k, double *ret) {
        json_t *v = json_object_get(o, k);
        if (!json_is_number(v))
                return false;
        *ret = json_number_value(v);
        return true;
}

static bool jbool(const json_t *o, const char *k) {
        return json_is_true(json_object_get(o, k));
}

/* ---- small formatters ----------------------------------------------- */

static int fmt_duration(gp_buf *b, int64_t s) {
        if (s < 0)
                s = 0;
        if (s < 60)
                return gp_buf_printf(b, "%" PRId64 "s", s);
        if (s < 3600)
                return gp_buf_printf(b, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
        if (s < 86400)
                return gp_buf_printf(b, "%" PRId64 "h%02" PRId64 "m", s / 3600, s % 3600 / 60);
        return gp_buf_printf(b, "%" PRId64 "d%02" PRId64 "h", s / 86400, s % 86400 / 3600);
}

static const char *prio_name(int64_t p) {
        switch (p) {
        case 0: return "critical";
        case 2: return "high";
        case 5: return "normal";
        case 7: return "low";
        case 9: return "background";
        default: return NULL;
        }
}

/* seconds since the RFC 3339 time in field k, or -1 */
static int64_t age_s(const json_t *o, const char *k, int64_t now_ms) {
        const char *t = jstr(o, k);
        int64_t ms;
        if (!now_ms || !t || gp_time_parse(t, &ms) < 0)
                return -1;
        return now_ms > ms ? (now_ms - ms) / 1000 : 0;
}

static int backend_line(const json_t *resp, gp_buf *out) {
        const char *b = jstr(resp, "backend");
        if (!b)
                return 0;
        int r = gp_buf_puts(out, "backend: ");
        if (!r)
                r = put_clean(out, b, 64);
        if (!r && strcmp(b, "sim") == 0)
                r = gp_buf_puts(out, " (simulated GPUs)");
        else if (!r && strstr(b, "sim")) /* a mixed cluster: "none+sim", "nvml+sim" */
                r = gp_buf_puts(out, " (some GPUs simulated)");
        return r ? r : gp_buf_puts(out, "\n");
}

/* ---- tables --------------------------------------------------------- */

struct col {
        const char *head;       /* column title */
        size_t max;             /* widest cell in columns, 0 = no limit */
        bool optional;          /* left out when every cell is "" or "-" */
};

struct table {
        const struct col *cols;
        size_t ncols;
        char **cells;           /* row-major, ncols per row, sanitised */
        size_t n, alloc;        /* cells used / allocated */
        gp_buf cell;            /* scratch for building one cell */
};

static void table_init(struct table *t, const struct col *cols, size_t ncols) {
        memset(t, 0, sizeof(*t));
        t->cols = cols;
        t->ncols = ncols;
        gp_buf_init(&t->cell, 64 * 1024);
}

static void table_done(struct table *t) {
        for (size_t i = 0; i < t->n; i++)
                free(t->cells[i]);
        free(t->cells);
        gp_buf_done(&t->cell);
}

/* Add the content of t->cell (reset afterwards) as the next cell. */
static int table_push(struct table *t) {
        size_t col = t->n % t->ncols;
        gp_buf clean;
        gp_buf_init(&clean, 64 * 1024);
        int r = put_clean(&clean, t->cell.data ? t->cell.data : "", t->cols[col].max);
        gp_buf_reset(&t->cell);
        if (r < 0)
                goto fail;
        char **nc = gp_vec_grow(t->cells, &t->alloc, t->n + 1, sizeof(*nc), 64);
        if (!nc) {
                r = -ENOMEM;
                goto fail;
        }
        t->cells = nc;
        t->cells[t->n] = gp_buf_steal(&clean);
        if (!t->cells[t->n])
                return -ENOMEM;
        t->n++;
        return 0;
fail:
        gp_buf_done(&clean);
        return r;
}

/* Push what was built in t->cell, "-" when nothing was. */
static int cell_end(struct table *t) {
        if (t->cell.len == 0) {
                int r = gp_buf_puts(&t->cell, "-");
                if (r < 0)
                        return r;
        }
        return table_push(t);
}

static int cell_str(struct table *t, const char *s) {
        int r = gp_buf_puts(&t->cell, s && *s ? s : "-");
        return r ? r : table_push(t);
}

static int cell_int(struct table *t, const json_t *o, const char *k, const char *prefix,
                    const char *suffix) {
        int64_t v;
        int r = jint(o, k, &v) ? gp_buf_printf(&t->cell, "%s%" PRId64 "%s", prefix, v, suffix)
                               : gp_buf_puts(&t->cell, "-");
        return r ? r : table_push(t);
}

/* GPUs of a task: what it asked for; an elastic one "HELD (MIN-MAX)",
 * HELD being what it holds now while it runs. */
static int cell_gpus(struct table *t, const json_t *task) {
        const json_t *el = json_object_get(task, "elastic");
        int64_t mn, mx;
        if (!json_is_object(el) || !jint(el, "min_gpus", &mn) || !jint(el, "max_gpus", &mx))
                return cell_int(t, task, "gpu_request", "", "");
        size_t held = json_array_size(json_object_get(task, "gpus"));
        int r = gp_buf_printf(&t->cell, "%zu (%" PRId64 "-%" PRId64 ")", held ? held : (size_t)mn, mn, mx);
        return r ? r : table_push(t);
}

static int table_print(struct table *t, gp_buf *out) {
        size_t nrows = t->n / t->ncols, nc = t->ncols;
        size_t *w = calloc(nc, sizeof(*w));
        bool *show = calloc(nc, sizeof(*show));
        int r = 0;
        if (!w || !show) {
                r = -ENOMEM;
                goto out;
        }
        for (size_t c = 0; c < nc; c++) {
                w[c] = strlen(t->cols[c].head);
                show[c] = !t->cols[c].optional;
                for (size_t row = 0; row < nrows; row++) {
                        const char *s = t->cells[row * nc + c];
                        size_t sw = gp_cli_display_width(s);
                        if (sw > w[c])
                                w[c] = sw;
                        if (strcmp(s, "-") != 0 && *s)
                                show[c] = true;
                }
        }
        size_t last = 0;
        for (size_t c = 0; c < nc; c++)
                if (show[c])
                        last = c;
        for (size_t row = 0; row <= nrows && r == 0; row++) {
                bool first = true;
                for (size_t c = 0; c < nc && r == 0; c++) {
                        if (!show[c])
                                continue;
                        const char *s = row == 0 ? t->cols[c].head : t->cells[(row - 1) * nc + c];
                        if (!first)
                                r = gp_buf_puts(out, "  ");
                        first = false;
                        if (!r)
                                r = gp_buf_puts(out, s);
                        if (!r && c != last)
                                r = gp_buf_printf(out, "%*s", (int)(w[c] - gp_cli_display_width(s)), "");
                }
                if (!r)
                        r = gp_buf_puts(out, "\n");
        }
out:
        free(w);
        free(show);
        return r;
}

/* "k=v,k2=v2" of a label object (strings only); hide_node leaves out the
 * implicit gpupool/node. */
static int put_labels(gp_buf *b, const json_t *labels, bool hide_node) {
        const char *k;
        json_t *val;
        bool first = true;
        int r = 0;
        json_object_foreach((json_t *)labels, k, val) {
                if (hide_node && strcmp(k, GP_CLI_NODE_LABEL) == 0)
                        continue;
                r = gp_buf_printf(b, "%s%s=%s", first ? "" : ",", k, json_is_string(val) ? json_string_value(val) : "?");
                if (r < 0)
                        return r;
                first = false;
        }
        return r;
}

/* ---- status --------------------------------------------------------- */

#define LABEL "%-22s"

static int line_start(gp_buf *out, const char *label) {
        char l[40];
        snprintf(l, sizeof(l), "%s:", label);
        return gp_buf_printf(out, LABEL, l);
}

static int line_str(gp_buf *out, const char *label, const char *v) {
        int r = line_start(out, label);
        if (!r)
                r = put_clean(out, v && *v ? v : "-", 0);
        return r ? r : gp_buf_puts(out, "\n");
}

static int line_time(gp_buf *out, const char *label, const json_t *task, const char *k,
                     int64_t now_ms) {
        const char *t = jstr(task, k);
        if (!t)
                return 0;
        int r = line_start(out, label);
        if (!r)
                r = put_clean(out, t, 64);
        int64_t age = age_s(task, k, now_ms);
        if (!r && age >= 0) {
                r = gp_buf_puts(out, " (");
                if (!r)
                        r = fmt_duration(out, age);
                if (!r)
                        r = gp_buf_puts(out, " ago)");
        }
        return r ? r : gp_buf_puts(out, "\n");
}

int gp_cli_format_status(const json_t *task, int64_t now_ms, gp_buf *out) {
        gp_buf v;
        int64_t n;
        int r = 0;
        const char *state = jstr(task, "state");
        bool queued = state && strcmp(state, "queued") == 0;
        bool running = state && strcmp(state, "running") == 0;

        gp_buf_init(&v, 1 << 20);
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        if (jint(task, "id", &n)) {
                gp_buf_reset(&v);
                CHECK(gp_buf_printf(&v, "%" PRId64, n));
                CHECK(line_str(out, "id", v.data));
        }
        int64_t aid, aix;
        if (jint(task, "array_id", &aid) && jint(task, "array_index", &aix)) {
                gp_buf_reset(&v);
                CHECK(gp_buf_printf(&v, "%" PRId64 "_%" PRId64 " (element %" PRId64 " of job array %" PRId64 ")", aid,
                                    aix, aix, aid));
                CHECK(line_str(out, "array", v.data));
        }
        CHECK(line_str(out, "name", jstr(task, "name")));
        CHECK(line_str(out, "tenant", jstr(task, "tenant_id")));
        if (jstr(task, "user"))
                CHECK(line_str(out, "user", jstr(task, "user")));
        if (jstr(task, "workdir"))
                CHECK(line_str(out, "workdir", jstr(task, "workdir")));
        if (jstr(task, "signal")) /* --signal: the notice before it is stopped */
                CHECK(line_str(out, "signal", jstr(task, "signal")));
        if (jstr(task, "kind"))
                CHECK(line_str(out, "kind", jstr(task, "kind")));
        CHECK(line_str(out, "state", state));
        if (running && jbool(task, "borrowing"))
                CHECK(line_str(out, "borrowing", "yes: on GPUs guaranteed to other tenants; they may reclaim them"));
        if (queued && jint(task, "queue_position", &n)) {
                gp_buf_reset(&v);
                CHECK(gp_buf_printf(&v, "%" PRId64, n));
                CHECK(line_str(out, "queue position", v.data));
        }
        const char *reason = jstr(task, "reason");
        if (reason && *reason)
                CHECK(line_str(out, "reason", reason));
        const json_t *est = json_object_get(task, "estimate");
        int64_t est_s = 0, est_runs = 0;
        if (json_is_object(est) && jint(est, "run_s", &est_s) && jint(est, "runs", &est_runs) && jstr(est, "from")) {
                /* what history predicts: "~1h02m (12 runs of this task, confidence 0.73)" */
                gp_buf_reset(&v);
                CHECK(gp_buf_puts(&v, "~"));
                CHECK(fmt_duration(&v, est_s));
                const json_t *c = json_object_get(est, "confidence");
                CHECK(gp_buf_printf(&v, " (from %" PRId64 " run%s of its %s, confidence %.2f)", est_runs,
                                    est_runs == 1 ? "" : "s", jstr(est, "from"),
                                    json_is_number(c) ? json_number_value(c) : 0.0));
                CHECK(line_str(out, "run time", v.data));
        }
        const char *exp_at = jstr(task, "expected_start_at");
        int64_t exp_ms;
        if (queued && exp_at && gp_time_parse(exp_at, &exp_ms) == 0) {
                gp_buf_reset(&v);
                const json_t *c = json_object_get(task, "expected_start_confidence");
                if (now_ms && exp_ms > now_ms) {
                        CHECK(gp_buf_puts(&v, "in ~"));
                        CHECK(fmt_duration(&v, (exp_ms - now_ms + 999) / 1000));
                } else {
                        CHECK(gp_buf_puts(&v, "now, once the scheduler runs"));
                }
                CHECK(gp_buf_printf(&v, " (%s, confidence %.2f)", exp_at, json_is_number(c) ? json_number_value(c) : 0.0));
                CHECK(line_str(out, "expected start", v.data));
        }
        if (jint(task, "priority", &n)) {
                gp_buf_reset(&v);
                const char *pn = prio_name(n);
                CHECK(pn ? gp_buf_printf(&v, "P%" PRId64 " (%s)", n, pn) : gp_buf_printf(&v, "P%" PRId64, n));
                CHECK(line_str(out, "priority", v.data));
        }
        gp_buf_reset(&v);
        if (jint(task, "gpu_request", &n))
                CHECK(gp_buf_printf(&v, "%" PRId64, n));
        else
                CHECK(gp_buf_puts(&v, "-"));
        int64_t mem;
        if (jint(task, "memory_mb", &mem) && mem > 0)
                CHECK(gp_buf_printf(&v, " x %" PRId64 " MB", mem));
        else
                CHECK(gp_buf_puts(&v, jint(task, "gpu_request", &n) && n > 1 ? " (whole GPUs)" : " (whole GPU)"));
        if (jbool(task, "exclusive"))
                CHECK(gp_buf_puts(&v, ", exclusive"));
        CHECK(line_str(out, "GPUs requested", v.data));
        json_t *gpus = json_object_get(task, "gpus");
        if (json_is_array(gpus) && json_array_size(gpus) > 0) {
                size_t i;
                json_t *g;
                gp_buf_reset(&v);
                json_array_foreach(gpus, i, g) {
                        const char *node = jstr(g, "node");
                        int64_t idx;
                        if (i)
                                CHECK(gp_buf_puts(&v, ", "));
                        CHECK(gp_buf_printf(&v, "%s:", node ? node : "?"));
                        CHECK(jint(g, "index", &idx) ? gp_buf_printf(&v, "%" PRId64, idx) : gp_buf_puts(&v, "?"));
                        const char *uuid = jstr(g, "uuid");
                        if (uuid && *uuid)
                                CHECK(gp_buf_printf(&v, " (%s)", uuid));
                }
                CHECK(line_str(out, "GPUs", v.data));
        }
        int64_t used_mb, peak_mb;
        bool has_used = jint(task, "gpu_memory_used_mb", &used_mb), has_peak = jint(task, "gpu_memory_peak_mb", &peak_mb);
        if (has_used || has_peak) { /* what its processes use, as the driver lists them */
                gp_buf_reset(&v);
                if (has_used)
                        CHECK(gp_buf_printf(&v, "%" PRId64 " MB now%s", used_mb, has_peak ? ", " : ""));
                if (has_peak)
                        CHECK(gp_buf_printf(&v, "%" PRId64 " MB at peak", peak_mb));
                CHECK(line_str(out, "GPU memory used", v.data));
        }
        const char *iso = jstr(task, "isolation");
        int64_t cpct;
        if (iso && ((jint(task, "memory_mb", &mem) && mem > 0) || !strcmp(iso, "mig"))) { /* how it is held */
                gp_buf_reset(&v);
                if (!strcmp(iso, "watchdog"))
                        CHECK(gp_buf_puts(&v, "watchdog (stopped when its processes use more than it asked)"));
                else if (!strcmp(iso, "mig"))
                        CHECK(gp_buf_puts(&v, "mig (MIG instances: memory fenced by the hardware)"));
                else if (!strcmp(iso, "mps") && jint(task, "compute_pct", &cpct))
                        CHECK(gp_buf_printf(&v, "mps (an MPS client: at most %" PRId64 " MB of GPU memory, %" PRId64
                                                "%% of its compute)", mem, cpct));
                else if (!strcmp(iso, "mps"))
                        CHECK(gp_buf_printf(&v, "mps (an MPS client: at most %" PRId64 " MB of GPU memory)", mem));
                else
                        CHECK(gp_buf_puts(&v, iso));
                CHECK(line_str(out, "isolation", v.data));
        }
        int64_t cpus = 0, hmem = 0;
        bool has_cpus = jint(task, "cpus", &cpus), has_hmem = jint(task, "host_memory_mb", &hmem);
        if (has_cpus || has_hmem) { /* its cgroup's limits, and whether they hold */
                const char *cg = jstr(task, "cgroup");
                gp_buf_reset(&v);
                if (has_cpus)
                        CHECK(gp_buf_printf(&v, "%" PRId64 " CPUs%s", cpus, has_hmem ? ", " : ""));
                if (has_hmem)
                        CHECK(gp_buf_printf(&v, "%" PRId64 " MB RAM", hmem));
                const char *st = jstr(task, "state");
                if (cg)
                        CHECK(gp_buf_printf(&v, " (cgroup %s)", cg));
                else if (st && strcmp(st, "queued")) /* it ran where nothing holds them */
                        CHECK(gp_buf_puts(&v, " (not enforced: no cgroup on its node)"));
                CHECK(line_str(out, "host limits", v.data));
        }
        json_t *nodes = json_object_get(task, "nodes");
        if (json_is_array(nodes) && json_array_size(nodes) > 0) {
                /* a task's nodes in rank order (rank 0 first: MASTER_ADDR's) */
                size_t i;
                json_t *nd;
                gp_buf_reset(&v);
                json_array_foreach(nodes, i, nd) {
                        CHECK(gp_buf_puts(&v, i ? ", " : ""));
                        CHECK(gp_buf_puts(&v, json_is_string(nd) ? json_string_value(nd) : "?"));
                }
                CHECK(line_str(out, json_array_size(nodes) > 1 ? "nodes (by rank)" : "node", v.data));
        }
        json_t *sel = json_object_get(task, "node_selector");
        if (json_is_object(sel) && json_object_size(sel) > 0) {
                gp_buf_reset(&v);
                CHECK(put_labels(&v, sel, false));
                CHECK(line_str(out, "node selector", v.data));
        }
        const char *cvd = jstr(task, "cuda_visible_devices");
        if (running || (cvd && *cvd))
                CHECK(line_str(out, "CUDA_VISIBLE_DEVICES", cvd));
        json_t *cmd = json_object_get(task, "command");
        if (json_is_array(cmd)) {
                size_t i;
                json_t *w;
                /* a script stored at submit (server/submit.c's runner): its
                 * first line, size and arguments, not the runner */
                const char *a3 = json_string_value(json_array_get(cmd, 3));
                const char *sc = json_string_value(json_array_get(cmd, 4));
                bool script = a3 && sc && !strcmp(a3, GP_CLI_SCRIPT_ARGV0);
                gp_buf_reset(&v);
                if (script) {
                        char *first = strndup(sc, strcspn(sc, "\n"));
                        if (!first)
                                CHECK(-ENOMEM);
                        r = gp_buf_printf(&v, "script (%zu bytes, ", strlen(sc));
                        r = r < 0 ? r : gp_cli_put_clean(&v, first, 60);
                        free(first);
                        CHECK(r < 0 ? r : gp_buf_puts(&v, ")"));
                }
                json_array_foreach(cmd, i, w) {
                        if (script && i < 5)
                                continue;
                        if (i)
                                CHECK(gp_buf_puts(&v, " "));
                        CHECK(gp_cli_shell_quote(json_is_string(w) ? json_string_value(w) : "?", &v));
                }
                CHECK(line_str(out, "command", v.data));
        }
        const char *s;
        if ((s = jstr(task, "model")) && *s)
                CHECK(line_str(out, "model", s));
        if ((s = jstr(task, "gpu_model")) && *s)
                CHECK(line_str(out, "GPU model", s));
        if (jbool(task, "preemptible") || (jint(task, "preempt_count", &n) && n > 0)) {
                gp_buf_reset(&v);
                CHECK(gp_buf_puts(&v, jbool(task, "preemptible") ? "yes" : "no"));
                if (jint(task, "preempt_count", &n) && n > 0)
                        CHECK(gp_buf_printf(&v, " (preempted %" PRId64 " time%s)", n, n == 1 ? "" : "s"));
                CHECK(line_str(out, "preemptible", v.data));
        }
        if (jint(task, "retries", &n) && n > 0) {
                gp_buf_reset(&v);
                CHECK(gp_buf_printf(&v, "%" PRId64, n));
                CHECK(line_str(out, "retries", v.data));
        }
        if (jint(task, "runs", &n) && n > 1) { /* each with its own log */
                gp_buf_reset(&v);
                CHECK(gp_buf_printf(&v, "%" PRId64 " (gpupool logs --run N shows each)", n));
                CHECK(line_str(out, "runs", v.data));
        }
        if (jint(task, "timeout_s", &n) && n > 0) {
                gp_buf_reset(&v);
                CHECK(fmt_duration(&v, n));
                CHECK(line_str(out, "timeout", v.data));
        }
        if (jint(task, "lease_ttl_s", &n) && n > 0) {
                gp_buf_reset(&v);
                CHECK(gp_buf_printf(&v, "%" PRId64 "s", n));
                CHECK(line_str(out, "lease TTL", v.data));
        }
        if (running)
                CHECK(line_time(out, "lease expires", task, "lease_expires_at", 0));
        if (jint(task, "exit_code", &n)) {
                gp_buf_reset(&v);
                CHECK(gp_buf_printf(&v, "%" PRId64, n));
                CHECK(line_str(out, "exit code", v.data));
        }
        CHECK(line_time(out, "submitted", task, "submitted_at", now_ms));
        CHECK(line_time(out, "started", task, "started_at", now_ms));
        CHECK(line_time(out, "finished", task, "finished_at", now_ms));
        int64_t st = -1, fin = -1;
        {
                const char *ts = jstr(task, "started_at"), *tf = jstr(task, "finished_at");
                if (ts && gp_time_parse(ts, &st) < 0)
                        st = -1;
                if (tf && gp_time_parse(tf, &fin) < 0)
                        fin = -1;
                if (st >= 0 && fin < 0 && running && now_ms)
                        fin = now_ms;
        }
        if (st >= 0 && fin >= st) {
                gp_buf_reset(&v);
                CHECK(fmt_duration(&v, (fin - st) / 1000));
                CHECK(line_str(out, "run time", v.data));
        }
        if ((s = jstr(task, "backend"))) {
                gp_buf_reset(&v);
                CHECK(gp_buf_puts(&v, s));
                if (strcmp(s, "sim") == 0)
                        CHECK(gp_buf_puts(&v, " (simulated GPUs)"));
                CHECK(line_str(out, "backend", v.data));
        }
#undef CHECK
out:
        gp_buf_done(&v);
        return r;
}

/* ---- lists ---------------------------------------------------------- */

static json_t *list_of(const json_t *resp, const char *k) {
        json_t *a = json_object_get(resp, k);
        return json_is_array(a) ? a : NULL;
}

size_t gp_cli_ps_array_ids(const json_t *resp, int64_t *ids, size_t max) {
        json_t *tasks = json_object_get(resp, "tasks");
        size_t n = 0, i;
        json_t *t;
        if (!json_is_array(tasks))
                return 0;
        json_array_foreach(tasks, i, t) {
                json_t *a = json_object_get(t, "array_id");
                if (!json_is_integer(a) || json_integer_value(a) <= 0)
                        continue;
                int64_t id = json_integer_value(a);
                bool seen = false;
                for (size_t k = 0; k < n && k < max && !seen; k++)
                        seen = ids[k] == id;
                if (seen)
                        continue;
                if (n < max)
                        ids[n] = id;
                n++;
        }
        return n;
}

json_t *gp_cli_ps_fold(const json_t *resp, json_t *const *arrays, const int64_t *ids, size_t n) {
        json_t *outv = json_deep_copy(resp);
        json_t *list = json_array();
        json_t *tasks = json_object_get(resp, "tasks");
        bool *done = calloc(n ? n : 1, sizeof(*done));
        size_t i;
        json_t *t;
        if (!outv || !list || !done)
                goto oom;
        if (json_is_array(tasks)) {
                json_array_foreach(tasks, i, t) {
                        json_t *a = json_object_get(t, "array_id");
                        size_t k = n;
                        if (json_is_integer(a))
                                for (k = 0; k < n && ids[k] != json_integer_value(a); k++)
                                        ;
                        if (k == n || !arrays[k]) {
                                if (json_array_append(list, t) < 0)
                                        goto oom;
                                continue;
                        }
                        if (done[k])
                                continue;
                        done[k] = true;
                        json_t *e = json_deep_copy(arrays[k]);
                        if (!e)
                                goto oom;
                        static const char *const keep[] = {"name", "tenant_id", "user", "priority",
                                                           "gpu_request", "submitted_at"};
                        for (size_t j = 0; j < GP_ARRAY_SIZE(keep); j++) {
                                json_t *v = json_object_get(t, keep[j]);
                                if (v && !json_object_get(e, keep[j]))
                                        json_object_set(e, keep[j], v);
                        }
                        json_object_set_new(e, "kind", json_string("array"));
                        json_object_del(e, "backend");
                        if (json_array_append_new(list, e) < 0)
                                goto oom;
                }
        }
        if (json_object_set_new(outv, "tasks", list) < 0) {
                list = NULL;
                goto oom;
        }
        free(done);
        return outv;
oom:
        free(done);
        json_decref(list);
        json_decref(outv);
        return NULL;
}

/* "queued 1900 running 50 succeeded 50": the non-zero counts of an array */
static int array_counts(gp_buf *b, const json_t *counts) {
        static const char *const order[] = {"queued", "running", "succeeded", "failed", "cancelled", "timeout", "lost"};
        int r = 0;
        bool any = false;
        for (size_t k = 0; r == 0 && k < GP_ARRAY_SIZE(order); k++) {
                int64_t v;
                if (!jint(counts, order[k], &v) || v <= 0)
                        continue;
                r = gp_buf_printf(b, "%s%s %" PRId64, any ? " " : "", order[k], v);
                any = true;
        }
        return r;
}

/* A task's id cell: an array element as Slurm's squeue -r shows it,
 * ID_INDEX (12_7), the form status, logs and cancel take; else its id. */
static int cell_task_id(struct table *t, const json_t *task) {
        int64_t aid, ix;
        if (jint(task, "array_id", &aid) && jint(task, "array_index", &ix)) {
                int r = gp_buf_printf(&t->cell, "%" PRId64 "_%" PRId64, aid, ix);
                return r < 0 ? r : cell_end(t);
        }
        return cell_int(t, task, "id", "", "");
}

int gp_cli_format_ps(const json_t *resp, int64_t now_ms, bool filtered, gp_buf *out) {
        static const struct col cols[] = {
                {"ID", 0, false},      {"NAME", 32, false}, {"TENANT", 24, false},
                {"USER", 32, true},    {"STATE", 0, false}, {"PRIO", 0, false},
                {"GPUS", 0, false},    {"DEVICES", 24, false}, {"EXIT", 0, true},
                {"AGE", 0, false},
        };
        json_t *tasks = list_of(resp, "tasks");
        struct table t;
        size_t i;
        json_t *task;
        int r = backend_line(resp, out);
        if (r < 0)
                return r;
        if (!tasks || json_array_size(tasks) == 0)
                return gp_buf_puts(out, filtered ? "no tasks\n"
                                                 : "no queued or running tasks (gpupool ps --all "
                                                   "shows finished ones)\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(tasks, i, task) {
                int64_t n;
                const char *kind = jstr(task, "kind");
                if (kind && !strcmp(kind, "array")) {
                        /* a folded job array: 12_[0-1999%50]  queued 1900 running 50 */
                        int64_t aid = 0;
                        jint(task, "array_id", &aid);
                        CHECK(gp_buf_printf(&t.cell, "%" PRId64 "_[", aid));
                        CHECK(gp_cli_put_clean(&t.cell, jstr(task, "array"), 48));
                        CHECK(gp_buf_puts(&t.cell, "]"));
                        CHECK(cell_end(&t));
                        CHECK(cell_str(&t, jstr(task, "name")));
                        CHECK(cell_str(&t, jstr(task, "tenant_id")));
                        CHECK(cell_str(&t, jstr(task, "user")));
                        CHECK(array_counts(&t.cell, json_object_get(task, "counts")));
                        CHECK(cell_end(&t));
                        CHECK(cell_int(&t, task, "priority", "P", ""));
                        CHECK(cell_int(&t, task, "gpu_request", "", " each"));
                        CHECK(cell_str(&t, ""));
                        CHECK(cell_str(&t, ""));
                        n = age_s(task, "submitted_at", now_ms);
                        if (n >= 0)
                                CHECK(fmt_duration(&t.cell, n));
                        CHECK(cell_end(&t));
                        continue;
                }
                CHECK(cell_task_id(&t, task));
                CHECK(cell_str(&t, jstr(task, "name")));
                CHECK(cell_str(&t, jstr(task, "tenant_id")));
                CHECK(cell_str(&t, jstr(task, "user")));
                CHECK(cell_str(&t, jstr(task, "state")));
                CHECK(cell_int(&t, task, "priority", "P", ""));
                CHECK(cell_gpus(&t, task));
                CHECK(cell_str(&t, jstr(task, "cuda_visible_devices")));
                CHECK(cell_int(&t, task, "exit_code", "", ""));
                n = age_s(task, "submitted_at", now_ms);
                if (n >= 0)
                        CHECK(fmt_duration(&t.cell, n));
                CHECK(cell_end(&t));
        }
        CHECK(table_print(&t, out));
        json_t *next = json_object_get(resp, "next_after");
        if (json_is_integer(next))
                CHECK(gp_buf_printf(out, "(newest %zu shown; --limit N shows more)\n",
                                    json_array_size(tasks)));
#undef CHECK
out:
        table_done(&t);
        return r;
}

int gp_cli_format_queue(const json_t *resp, gp_buf *out) {
        static const struct col cols[] = {
                {"POS", 0, false},  {"ID", 0, false},   {"NAME", 32, false}, {"TENANT", 24, false},
                {"PRIO", 0, false}, {"GPUS", 0, false}, {"MEM", 0, false},   {"WAIT", 0, false},
                {"EXPECTED START", 0, false}, {"REASON", 200, true},
        };
        json_t *tasks = list_of(resp, "tasks");
        struct table t;
        size_t i;
        json_t *task;
        int64_t total;
        int r = backend_line(resp, out);
        if (r < 0)
                return r;
        if (!tasks || json_array_size(tasks) == 0)
                return gp_buf_puts(out, "queue is empty\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(tasks, i, task) {
                int64_t n;
                CHECK(cell_int(&t, task, "queue_position", "", ""));
                CHECK(cell_task_id(&t, task));
                CHECK(cell_str(&t, jstr(task, "name")));
                CHECK(cell_str(&t, jstr(task, "tenant_id")));
                CHECK(cell_int(&t, task, "priority", "P", ""));
                CHECK(cell_int(&t, task, "gpu_request", "", ""));
                if (jint(task, "memory_mb", &n) && n > 0)
                        CHECK(gp_buf_printf(&t.cell, "%" PRId64 " MB", n));
                else
                        CHECK(gp_buf_puts(&t.cell, "whole"));
                CHECK(table_push(&t));
                if (jint(task, "wait_s", &n))
                        CHECK(fmt_duration(&t.cell, n));
                CHECK(cell_end(&t));
                /* squeue --start's column: when history says it starts (UTC, to the minute) */
                const char *es = jstr(task, "expected_start_at");
                if (es && strlen(es) >= 16)
                        CHECK(gp_buf_printf(&t.cell, "%.10s %.5sZ", es, es + 11));
                else
                        CHECK(gp_buf_puts(&t.cell, "-"));
                CHECK(table_push(&t));
                CHECK(cell_str(&t, jstr(task, "reason")));
        }
        CHECK(table_print(&t, out));
        if (jint(resp, "total", &total) && total > (int64_t)json_array_size(tasks))
                CHECK(gp_buf_printf(out, "(%zu of %" PRId64 " queued shown)\n", json_array_size(tasks),
                                    total));
#undef CHECK
out:
        table_done(&t);
        return r;
}

int gp_cli_format_gpus(const json_t *resp, gp_buf *out) {
        static const struct col cols[] = {
                {"ID", 0, false},    {"NAME", 40, false}, {"ALLOC/TOTAL", 0, false},
                {"USED", 0, false},  {"UTIL", 0, false},  {"TEMP", 0, false},
                {"POWER", 0, false}, {"STATE", 0, false}, {"ISOLATION", 0, true},
                {"TASKS", 32, false}, {"MODELS", 40, true},
        };
        json_t *gpus = list_of(resp, "gpus");
        struct table t;
        size_t i;
        json_t *g;
        int r = backend_line(resp, out);
        if (r < 0)
                return r;
        if (!gpus || json_array_size(gpus) == 0)
                return gp_buf_puts(out, "no GPUs\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(gpus, i, g) {
                int64_t a, b;
                double d;
                const char *id = jstr(g, "id");
                if (id) {
                        CHECK(cell_str(&t, id));
                } else {
                        const char *node = jstr(g, "node");
                        if (jint(g, "index", &a))
                                CHECK(gp_buf_printf(&t.cell, "%s:%" PRId64, node ? node : "?", a));
                        CHECK(cell_end(&t));
                }
                CHECK(cell_str(&t, jstr(g, "name")));
                if (!jint(g, "memory_allocated_mb", &a))
                        a = 0;
                if (jint(g, "memory_total_mb", &b))
                        CHECK(gp_buf_printf(&t.cell, "%" PRId64 "/%" PRId64 " MB", a, b));
                CHECK(cell_end(&t));
                CHECK(cell_int(&t, g, "memory_used_mb", "", " MB"));
                CHECK(cell_int(&t, g, "util_pct", "", "%"));
                CHECK(cell_int(&t, g, "temp_c", "", "C"));
                if (jnum(g, "power_w", &d))
                        CHECK(gp_buf_printf(&t.cell, "%.0fW", d));
                CHECK(cell_end(&t));
                bool healthy = !json_is_false(json_object_get(g, "healthy"));
                CHECK(gp_buf_puts(&t.cell, healthy ? "ok" : "unhealthy"));
                if (jbool(g, "drained"))
                        CHECK(gp_buf_puts(&t.cell, ",drained"));
                if (jbool(g, "reserved"))
                        CHECK(gp_buf_puts(&t.cell, ",reserved"));
                CHECK(table_push(&t));
                /* how tasks sharing it are held to their memory (docs/isolation.md); none: "-" */
                const char *iso = jstr(g, "isolation");
                const char *mps_daemon = jstr(json_object_get(g, "mps"), "daemon");
                if (iso && strcmp(iso, "none"))
                        CHECK(gp_buf_puts(&t.cell, iso));
                if (iso && !strcmp(iso, "mps") && mps_daemon && !strcmp(mps_daemon, "failed"))
                        CHECK(gp_buf_puts(&t.cell, " (daemon failed)"));
                CHECK(cell_end(&t));
                json_t *list = json_object_get(g, "tasks"), *e;
                size_t k;
                if (json_is_array(list))
                        json_array_foreach(list, k, e) {
                                if (json_is_integer(e))
                                        CHECK(gp_buf_printf(&t.cell, "%s%" PRId64, k ? "," : "",
                                                            (int64_t)json_integer_value(e)));
                        }
                CHECK(cell_end(&t));
                list = json_object_get(g, "models");
                if (json_is_array(list))
                        json_array_foreach(list, k, e) {
                                if (json_is_string(e))
                                        CHECK(gp_buf_printf(&t.cell, "%s%s", k ? "," : "",
                                                            json_string_value(e)));
                        }
                CHECK(cell_end(&t));
        }
        CHECK(table_print(&t, out));
#undef CHECK
out:
        table_done(&t);
        return r;
}

/* The distinct GPU names of a node's "gpus", comma-separated. */
static int put_gpu_models(gp_buf *b, const json_t *gpus) {
        size_t i, k;
        json_t *g;
        int r = 0;
        json_array_foreach(gpus, i, g) {
                const char *name = jstr(g, "name");
                bool seen = false;
                if (!name || !*name)
                        continue;
                for (k = 0; k < i && !seen; k++) {
                        const char *o = jstr(json_array_get(gpus, k), "name");
                        seen = o && strcmp(o, name) == 0;
                }
                if (!seen && (r = gp_buf_printf(b, "%s%s", b->len ? ", " : "", name)) < 0)
                        return r;
        }
        return r;
}

/* "2s ago" for a time in ms since the epoch (field k); nothing when absent. */
static int put_age_ms(gp_buf *b, const json_t *o, const char *k, int64_t now_ms) {
        int64_t ms;
        if (!now_ms || !jint(o, k, &ms) || ms <= 0)
                return 0;
        int r = fmt_duration(b, now_ms > ms ? (now_ms - ms) / 1000 : 0);
        return r ? r : gp_buf_puts(b, " ago");
}

/* A size in MiB as GiB ("7.5G", "120G"); nothing when unknown. */
static int put_gib(gp_buf *b, const json_t *o, const char *key) {
        int64_t mb;
        if (!jint(o, key, &mb) || mb < 0)
                return 0;
        double g = (double)mb / 1024.0;
        return gp_buf_printf(b, g < 10 ? "%.1fG" : "%.0fG", g);
}

int gp_cli_format_nodes(const json_t *resp, int64_t now_ms, gp_buf *out) {
        static const struct col cols[] = {
                {"NAME", 48, false},      {"STATE", 0, false},   {"GPUS", 0, false},
                {"GPU MODEL", 40, false}, {"CPUS", 0, false},    {"MEM FREE", 0, false},
                {"DISK FREE", 0, false},  {"VERSION", 24, false}, {"LABELS", 60, false},
                {"HEARTBEAT", 0, false},  {"ADDRESS", 64, false},
        };
        json_t *nodes = list_of(resp, "nodes");
        struct table t;
        size_t i;
        json_t *nd;
        int r = backend_line(resp, out);
        if (r < 0)
                return r;
        if (!nodes || json_array_size(nodes) == 0)
                return gp_buf_puts(out, "no nodes\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(nodes, i, nd) {
                int64_t busy, total;
                CHECK(cell_str(&t, jstr(nd, "name")));
                CHECK(cell_str(&t, jstr(nd, "state")));
                if (!jint(nd, "gpus_total", &total) && !jint(nd, "gpus", &total))
                        total = -1;
                if (!jint(nd, "gpus_busy", &busy))
                        busy = -1;
                if (total >= 0)
                        CHECK(busy >= 0 ? gp_buf_printf(&t.cell, "%" PRId64 "/%" PRId64, busy, total)
                                        : gp_buf_printf(&t.cell, "%" PRId64, total));
                CHECK(cell_end(&t));
                json_t *gpus = json_object_get(nd, "gpus");
                if (json_is_array(gpus))
                        CHECK(put_gpu_models(&t.cell, gpus));
                CHECK(cell_end(&t));
                CHECK(cell_int(&t, nd, "cpus", "", ""));
                CHECK(put_gib(&t.cell, nd, "memory_available_mb"));
                if (json_is_integer(json_object_get(nd, "memory_available_mb")))
                        CHECK(gp_buf_puts(&t.cell, "/"));
                CHECK(put_gib(&t.cell, nd, "memory_total_mb"));
                CHECK(cell_end(&t));
                CHECK(put_gib(&t.cell, nd, "disk_free_mb"));
                CHECK(cell_end(&t));
                CHECK(cell_str(&t, jstr(nd, "version")));
                json_t *labels = json_object_get(nd, "labels");
                if (json_is_object(labels))
                        CHECK(put_labels(&t.cell, labels, true));
                CHECK(cell_end(&t));
                CHECK(put_age_ms(&t.cell, nd, "last_heartbeat_ms", now_ms));
                CHECK(cell_end(&t));
                CHECK(cell_str(&t, jstr(nd, "address")));
        }
        CHECK(table_print(&t, out));
#undef CHECK
out:
        table_done(&t);
        return r;
}

int gp_cli_format_servers(const json_t *resp, int64_t now_ms, gp_buf *out) {
        static const struct col cols[] = {
                {"SERVER", 48, false}, {"URL", 64, false},     {"ROLE", 0, false},
                {"STATE", 0, false},   {"HEARTBEAT", 0, false}, {"LOAD", 0, false},
        };
        json_t *servers = list_of(resp, "servers"), *sv;
        struct table t;
        size_t i;
        int r = 0;
        if (!servers || json_array_size(servers) == 0)
                return gp_buf_puts(out, "no servers\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(servers, i, sv) {
                CHECK(cell_str(&t, jstr(sv, "server_id")));
                CHECK(cell_str(&t, jstr(sv, "url")));
                CHECK(cell_str(&t, jstr(sv, "role")));
                CHECK(cell_str(&t, json_is_true(json_object_get(sv, "active")) ? "active" : "inactive"));
                CHECK(put_age_ms(&t.cell, sv, "last_heartbeat_ms", now_ms));
                CHECK(cell_end(&t));
                json_t *load = json_object_get(sv, "load");
                if (json_is_number(load))
                        CHECK(gp_buf_printf(&t.cell, "%.0f%%", json_number_value(load) * 100.0));
                CHECK(cell_end(&t));
        }
        CHECK(table_print(&t, out));
#undef CHECK
out:
        table_done(&t);
        return r;
}

int gp_cli_format_join_tokens(const json_t *resp, int64_t now_ms, gp_buf *out) {
        static const struct col cols[] = {
                {"ID", 32, false},    {"CREATED", 0, false}, {"EXPIRES", 0, false},
                {"STATE", 0, false},  {"SOURCE", 16, false},
        };
        json_t *toks = list_of(resp, "tokens"), *tk;
        struct table t;
        size_t i;
        int r = 0;
        if (!toks || json_array_size(toks) == 0)
                return gp_buf_puts(out, "no join tokens ('gpupool join-token create' makes one)\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(toks, i, tk) {
                int64_t exp = 0;
                bool expired = false;
                CHECK(cell_str(&t, jstr(tk, "id")));
                CHECK(put_age_ms(&t.cell, tk, "created_ms", now_ms));
                CHECK(cell_end(&t));
                if (!jint(tk, "expires_ms", &exp) || exp <= 0) {
                        CHECK(gp_buf_puts(&t.cell, "never"));
                } else if (now_ms && exp <= now_ms) {
                        expired = true;
                        CHECK(put_age_ms(&t.cell, tk, "expires_ms", now_ms));
                } else if (now_ms) {
                        CHECK(gp_buf_puts(&t.cell, "in "));
                        CHECK(fmt_duration(&t.cell, (exp - now_ms + 999) / 1000));
                }
                CHECK(cell_end(&t));
                CHECK(cell_str(&t, jbool(tk, "revoked") ? "revoked" : expired ? "expired" : "active"));
                CHECK(cell_str(&t, jstr(tk, "source")));
        }
        CHECK(table_print(&t, out));
#undef CHECK
out:
        table_done(&t);
        return r;
}

/* "2.5" for 2500 milli-GPUs; "-" for 0 (unlimited) when dash. */
static int gpus_cell(struct table *t, const json_t *v, bool dash) {
        double x = json_is_number(v) ? json_number_value(v) : 0;
        char buf[32];
        if (dash && x == 0)
                return cell_str(t, "-");
        snprintf(buf, sizeof(buf), "%g", x);
        return cell_str(t, buf);
}

int gp_cli_format_tenants(const json_t *resp, gp_buf *out) {
        static const struct col cols[] = {
                {"ID", 32, false}, {"KIND", 0, false}, {"GROUP", 16, false}, {"TIERS", 0, false},
                {"WEIGHT", 0, false}, {"RUNNING", 0, false}, {"QUEUED", 0, false}, {"GPUS", 0, false},
                {"MAX GPUS", 0, false}, {"GUARANTEED", 0, false}, {"KEYS", 0, false},
        };
        json_t *ts = list_of(resp, "tenants");
        struct table t;
        size_t i;
        json_t *tn;
        int r = backend_line(resp, out);
        if (r < 0)
                return r;
        if (!ts || json_array_size(ts) == 0)
                return gp_buf_puts(out, "no tenants configured\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(ts, i, tn) {
                json_t *q = json_object_get(tn, "quota"), *u = json_object_get(tn, "usage");
                char tiers[16];
                snprintf(tiers, sizeof(tiers), "P%d..P%d",
                         (int)json_integer_value(json_object_get(tn, "max_priority")),
                         (int)json_integer_value(json_object_get(tn, "default_priority")));
                CHECK(cell_str(&t, jstr(tn, "id")));
                CHECK(cell_str(&t, jstr(tn, "kind")));
                CHECK(cell_str(&t, jstr(tn, "group")));
                CHECK(cell_str(&t, tiers));
                CHECK(cell_int(&t, tn, "weight", "", ""));
                CHECK(cell_int(&t, u, "running", "", ""));
                CHECK(cell_int(&t, u, "queued", "", ""));
                CHECK(gpus_cell(&t, json_object_get(u, "gpus"), false));
                CHECK(gpus_cell(&t, json_object_get(q, "max_gpus"), true));
                CHECK(gpus_cell(&t, json_object_get(q, "guaranteed_gpus"), true));
                CHECK(cell_int(&t, tn, "keys", "", ""));
        }
        CHECK(table_print(&t, out));
#undef CHECK
out:
        table_done(&t);
        return r;
}

/* ---- billing ---- */

/* Append fmt with every "%s" taken from the next argument as a server
 * string (cleaned for a terminal, "?" when NULL); no other conversions. */
static int put_parts(gp_buf *out, const char *fmt, ...) {
        va_list ap;
        int r = 0;
        va_start(ap, fmt);
        for (const char *p = fmt; r == 0 && *p; p++) {
                if (p[0] == '%' && p[1] == 's') {
                        const char *v = va_arg(ap, const char *);
                        r = gp_cli_put_clean(out, v ? v : "?", 0);
                        p++;
                } else {
                        r = gp_buf_append(out, p, 1);
                }
        }
        va_end(ap);
        return r;
}

int gp_cli_format_usage(const json_t *resp, gp_buf *out) {
        static const struct col cols[] = {
                {"KEY", 40, false}, {"GPU-SECONDS", 0, false}, {"TASKS", 0, false}, {"PROMPT TOK", 0, true},
                {"COMPL TOK", 0, true}, {"COST", 0, false},
        };
        json_t *gs = list_of(resp, "groups"), *g, *tot = json_object_get(resp, "total");
        struct table t;
        size_t i;
        const char *cur = jstr(resp, "currency");
        int r = put_parts(out, "usage of %s from %s to %s, by %s (%s, list prices)\n",
                          jstr(resp, "tenant_id") ? jstr(resp, "tenant_id") : "every tenant", jstr(resp, "from"),
                          jstr(resp, "to"), jstr(resp, "group_by"), cur);
        if (r < 0)
                return r;
        if (!gs || json_array_size(gs) == 0)
                return gp_buf_puts(out, "no usage\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(gs, i, g) {
                int64_t ms = 0;
                jint(g, "gpu_ms", &ms);
                if (ms < 0)
                        ms = 0;
                CHECK(cell_str(&t, jstr(g, "key")));
                CHECK(gp_buf_printf(&t.cell, "%" PRId64 ".%03" PRId64, ms / 1000, ms % 1000));
                CHECK(table_push(&t));
                CHECK(cell_int(&t, g, "tasks", "", ""));
                CHECK(cell_int(&t, g, "prompt_tokens", "", ""));
                CHECK(cell_int(&t, g, "completion_tokens", "", ""));
                CHECK(cell_str(&t, jstr(g, "cost")));
        }
        CHECK(table_print(&t, out));
        if (tot)
                CHECK(put_parts(out, "total: %s %s\n", jstr(tot, "cost"), cur ? cur : ""));
#undef CHECK
out:
        table_done(&t);
        return r;
}

int gp_cli_format_invoice(const json_t *resp, gp_buf *out) {
        static const struct col cols[] = {
                {"LINE", 0, false}, {"WHAT", 40, false}, {"GPU-HOURS", 0, true}, {"BILLED", 0, true},
                {"PRICE/H", 0, true}, {"TOKENS", 0, true}, {"AMOUNT", 0, false},
        };
        json_t *ls = list_of(resp, "lines"), *l;
        struct table t;
        size_t i;
        const char *cur = jstr(resp, "currency");
        int r = put_parts(out, "invoice of %s for %s (%s)\n", jstr(resp, "tenant_id"), jstr(resp, "month"),
                          jstr(resp, "status"));
        if (r < 0)
                return r;
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(ls, i, l) {
                const char *kind = jstr(l, "kind");
                bool tok = kind && !strcmp(kind, "tokens");
                CHECK(cell_str(&t, kind));
                CHECK(cell_str(&t, tok ? jstr(l, "model") : jstr(l, "gpu_model")));
                CHECK(cell_str(&t, tok ? NULL : jstr(l, "gpu_hours")));
                CHECK(cell_str(&t, tok ? NULL : jstr(l, "billed_gpu_hours")));
                CHECK(cell_str(&t, jstr(l, "price_per_gpu_hour")));
                if (tok) {
                        int64_t pt = 0, ct = 0;
                        jint(l, "prompt_tokens", &pt);
                        jint(l, "completion_tokens", &ct);
                        CHECK(gp_buf_printf(&t.cell, "%" PRId64 "+%" PRId64, pt, ct));
                        CHECK(table_push(&t));
                } else {
                        CHECK(cell_str(&t, NULL));
                }
                CHECK(cell_str(&t, jstr(l, "amount")));
        }
        if (json_array_size(ls))
                CHECK(table_print(&t, out));
        CHECK(put_parts(out, "total: %s %s\n", jstr(resp, "total"), cur ? cur : ""));
#undef CHECK
out:
        table_done(&t);
        return r;
}

/* ---- runs (GET /api/v1/tasks/{id}/runs, GET /api/v1/runs) ------------ */

/* ms since the epoch as local "YYYY-MM-DDTHH:MM:SS" (sacct's form). */
static int put_when(gp_buf *b, int64_t ms) {
        time_t s = (time_t)(ms / 1000);
        struct tm tm;
        char text[32];
        if (ms <= 0 || !localtime_r(&s, &tm) || strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
                return gp_buf_puts(b, "-");
        return gp_buf_puts(b, text);
}

/* [D-]HH:MM:SS (sacct's Elapsed). */
static int put_elapsed(gp_buf *b, int64_t ms) {
        int64_t s = ms > 0 ? ms / 1000 : 0;
        if (s >= 86400)
                return gp_buf_printf(b, "%" PRId64 "-%02d:%02d:%02d", s / 86400, (int)(s % 86400 / 3600),
                                     (int)(s % 3600 / 60), (int)(s % 60));
        return gp_buf_printf(b, "%02d:%02d:%02d", (int)(s / 3600), (int)(s % 3600 / 60), (int)(s % 60));
}

/* The run's GPUs as NODE:INDEX,... */
static int cell_run_gpus(struct table *t, const json_t *run) {
        const json_t *gs = json_object_get(run, "gpus"), *g;
        size_t i;
        int r = 0;
        json_array_foreach(gs, i, g) {
                if (r == 0 && i > 0)
                        r = gp_buf_puts(&t->cell, ",");
                if (r == 0)
                        r = gp_buf_puts(&t->cell, jstr(g, "id") ? jstr(g, "id") : "?");
        }
        return r ? r : cell_end(t);
}

static int cell_peak(struct table *t, const json_t *run) {
        int64_t mb;
        int r = jint(run, "gpu_memory_peak_mb", &mb) ? gp_buf_printf(&t->cell, "%" PRId64 "M", mb) : 0;
        return r ? r : cell_end(t);
}

static int cell_when(struct table *t, const json_t *run, const char *k) {
        int64_t ms;
        int r = jint(run, k, &ms) ? put_when(&t->cell, ms) : gp_buf_puts(&t->cell, "Unknown");
        return r ? r : table_push(t);
}

static int cell_elapsed(struct table *t, const json_t *run) {
        int64_t ms = 0;
        jint(run, "elapsed_ms", &ms);
        int r = put_elapsed(&t->cell, ms);
        return r ? r : table_push(t);
}

int gp_cli_format_runs(const json_t *resp, gp_buf *out) {
        static const struct col cols[] = {
                {"RUN", 0, false},   {"STATE", 0, false},   {"EXIT", 0, false},  {"START", 0, false},
                {"ELAPSED", 0, false}, {"GPUS", 48, false}, {"PEAK MEM", 0, true}, {"REASON", 60, true},
        };
        json_t *rs = list_of(resp, "items"), *x;
        struct table t;
        size_t i;
        int r = 0;
        if (!rs || json_array_size(rs) == 0)
                return gp_buf_puts(out, "run history: none yet (it has not started)\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        CHECK(gp_buf_puts(out, "run history:\n"));
        json_array_foreach(rs, i, x) {
                CHECK(cell_int(&t, x, "run", "", ""));
                CHECK(cell_str(&t, jstr(x, "state")));
                CHECK(cell_int(&t, x, "exit_code", "", ""));
                CHECK(cell_when(&t, x, "started_ms"));
                CHECK(cell_elapsed(&t, x));
                CHECK(cell_run_gpus(&t, x));
                CHECK(cell_peak(&t, x));
                CHECK(cell_str(&t, jstr(x, "reason")));
        }
        CHECK(table_print(&t, out));
#undef CHECK
out:
        table_done(&t);
        return r;
}

int gp_cli_format_history(const json_t *resp, gp_buf *out) {
        static const struct col cols[] = {
                {"JOBID", 0, false},  {"NAME", 24, true},   {"USER", 0, true},     {"TENANT", 0, false},
                {"STATE", 0, false},  {"EXITCODE", 0, false}, {"START", 0, false}, {"END", 0, false},
                {"ELAPSED", 0, false}, {"GPUS", 48, false}, {"PEAKMEM", 0, true},
        };
        json_t *rs = list_of(resp, "items"), *x;
        struct table t;
        size_t i;
        int r = 0;
        if (!rs || json_array_size(rs) == 0)
                return gp_buf_puts(out, "no runs\n");
        table_init(&t, cols, GP_ARRAY_SIZE(cols));
#define CHECK(x) do { if ((r = (x)) < 0) goto out; } while (0)
        json_array_foreach(rs, i, x) {
                int64_t id = 0, run = 0, aid, aix;
                jint(x, "task_id", &id);
                jint(x, "run", &run);
                /* an array element as ps and sacct name it (12_3), then its run */
                if (jint(x, "array_id", &aid) && jint(x, "array_index", &aix))
                        CHECK(gp_buf_printf(&t.cell, "%" PRId64 "_%" PRId64 ".%" PRId64, aid, aix, run));
                else
                        CHECK(gp_buf_printf(&t.cell, "%" PRId64 ".%" PRId64, id, run));
                CHECK(table_push(&t));
                CHECK(cell_str(&t, jstr(x, "name")));
                CHECK(cell_str(&t, jstr(x, "user")));
                CHECK(cell_str(&t, jstr(x, "tenant")));
                CHECK(cell_str(&t, jstr(x, "state")));
                CHECK(cell_int(&t, x, "exit_code", "", ""));
                CHECK(cell_when(&t, x, "started_ms"));
                CHECK(cell_when(&t, x, "ended_ms"));
                CHECK(cell_elapsed(&t, x));
                CHECK(cell_run_gpus(&t, x));
                CHECK(cell_peak(&t, x));
        }
        CHECK(table_print(&t, out));
#undef CHECK
out:
        table_done(&t);
        return r;
}
