/* trace.c - strict CSV trace parser and tenant map (see trace.h).
 *
 * One pass over the bytes, line by line; every line is bounded
 * (GP_TRACE_MAX_LINE) before it is looked at, every field is copied into a
 * bounded buffer and parsed with gp_parse_i64.  Tenants are interned in a
 * small open-addressing table (at most GP_TRACE_MAX_TENANTS).  Duplicate
 * job ids are found at the end by sorting (id, line) pairs.  On any error
 * everything built so far is freed and the caller's *ret is not touched.
 */
#include "sim/trace.h"

#include "base/err.h"
#include "base/util.h"
#include "base/vec.h"
#include "core/task.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER "job_id,submit_time_s,duration_s,num_gpus,tenant"
#define NFIELDS 5
#define FIELD_MAX 64               /* longest field we look at */
#define MAP_MAX_BYTES ((size_t)1 << 20)

static const char *const COLS[NFIELDS] = {"job_id", "submit_time_s", "duration_s", "num_gpus", "tenant"};

struct gp_trace_map {
        char **tenant;             /* n entries */
        int *prio;
        char **rename;             /* NULL: keep the name */
        size_t n, cap;
        bool has_default;
        int def_prio;
        char *def_rename;
};

static int fail(char *err, size_t errlen, const char *name, int line, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static int fail(char *err, size_t errlen, const char *name, int line, const char *fmt, ...) {
        if (!errlen)
                return 0;
        int k = line > 0 ? snprintf(err, errlen, "%s:%d: ", name, line) : snprintf(err, errlen, "%s: ", name);
        if (k < 0 || (size_t)k >= errlen)
                return 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
        va_end(ap);
        return 0;
}

/* A field as shown in a message: at most 24 bytes, odd bytes as '?'. */
static void show(const char *p, size_t n, char *out, size_t size) {
        size_t k = 0;
        for (size_t i = 0; i < n && k + 4 < size; i++) {
                if (i == 24) {
                        memcpy(out + k, "...", 3);
                        k += 3;
                        break;
                }
                unsigned char c = (unsigned char)p[i];
                out[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
        }
        out[k] = '\0';
}

static bool tenant_char_ok(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
               c == '_' || c == '.';
}

static bool tenant_ok(const char *p, size_t n) {
        if (n == 0 || n >= GP_TENANT_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!tenant_char_ok(p[i]))
                        return false;
        return true;
}

/* ------------------------------------------------------------------ */
/* reading files                                                       */

static int read_file(const char *path, size_t limit, char **ret, size_t *ret_len, char *err, size_t errlen) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                int e = errno;
                fail(err, errlen, path, 0, "cannot open: %s", strerror(e));
                return -e;
        }
        int rc = 0;
        char *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
                if (len == cap) {
                        size_t ncap = cap ? cap * 2 : 65536;
                        if (ncap > limit + 1)
                                ncap = limit + 1;
                        if (ncap <= len) {
                                fail(err, errlen, path, 0, "larger than %zu bytes", limit);
                                rc = -E2BIG;
                                goto out;
                        }
                        char *nb = realloc(buf, ncap);
                        if (!nb) {
                                fail(err, errlen, path, 0, "out of memory");
                                rc = -ENOMEM;
                                goto out;
                        }
                        buf = nb;
                        cap = ncap;
                }
                ssize_t r = read(fd, buf + len, cap - len);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        rc = -errno;
                        fail(err, errlen, path, 0, "cannot read: %s", strerror(errno));
                        goto out;
                }
                if (r == 0)
                        break;
                len += (size_t)r;
        }
        if (len > limit) {
                fail(err, errlen, path, 0, "larger than %zu bytes", limit);
                rc = -E2BIG;
                goto out;
        }
        *ret = buf;
        *ret_len = len;
        buf = NULL;
out:
        free(buf);
        close(fd);
        return rc;
}

/* Next line of data[*pos..len): sets *line and *n (without "\n" or "\r\n").
 * false at the end.  A final line without newline counts. */
static bool next_line(const char *data, size_t len, size_t *pos, const char **line, size_t *n) {
        if (*pos >= len)
                return false;
        const char *p = data + *pos;
        const char *nl = memchr(p, '\n', len - *pos);
        size_t k = nl ? (size_t)(nl - p) : len - *pos;
        *pos += k + (nl ? 1 : 0);
        // cppcheck-suppress knownConditionTrueFalse ; k is 0 for an empty line (nl == p)
        if (k > 0 && p[k - 1] == '\r')
                k--;
        *line = p;
        *n = k;
        return true;
}

/* ------------------------------------------------------------------ */
/* tenants                                                             */

typedef struct interner {
        char **names;
        uint32_t n, cap;
        uint32_t *slots;           /* index+1, 0 empty; 2*GP_TRACE_MAX_TENANTS rounded up */
        uint32_t nslots;
} interner;

static uint32_t hash_bytes(const char *p, size_t n) {
        uint32_t h = 2166136261u;
        for (size_t i = 0; i < n; i++)
                h = (h ^ (unsigned char)p[i]) * 16777619u;
        return h;
}

/* Index of p[0..n), added if new. 0, -E2BIG (too many), -ENOMEM. */
static int intern(interner *in, const char *p, size_t n, uint32_t *ret) {
        if (!in->slots) {
                in->nslots = 8192; /* > 2 * GP_TRACE_MAX_TENANTS: probes stay short */
                if (!(in->slots = calloc(in->nslots, sizeof(uint32_t))))
                        return -ENOMEM;
        }
        uint32_t h = hash_bytes(p, n) & (in->nslots - 1);
        while (in->slots[h]) {
                const char *s = in->names[in->slots[h] - 1];
                if (strlen(s) == n && memcmp(s, p, n) == 0) {
                        *ret = in->slots[h] - 1;
                        return 0;
                }
                h = (h + 1) & (in->nslots - 1);
        }
        if (in->n >= GP_TRACE_MAX_TENANTS)
                return -E2BIG;
        size_t c = in->cap; /* n is bounded by GP_TRACE_MAX_TENANTS */
        char **v = gp_vec_grow(in->names, &c, (size_t)in->n + 1, sizeof(*v), 16);
        if (!v)
                return -ENOMEM;
        in->names = v;
        in->cap = (uint32_t)c;
        if (!(in->names[in->n] = strndup(p, n)))
                return -ENOMEM;
        in->slots[h] = in->n + 1;
        *ret = in->n++;
        return 0;
}

/* ------------------------------------------------------------------ */
/* the trace                                                           */

void gp_trace_free(gp_trace *t) {
        if (!t)
                return;
        for (uint32_t i = 0; i < t->ntenants; i++)
                free(t->tenants[i]);
        free(t->tenants);
        free(t->jobs);
        free(t);
}

typedef struct id_line {
        int64_t id;
        int line;
} id_line;

static int cmp_id_line(const void *a, const void *b) {
        const id_line *x = a, *y = b;
        if (x->id != y->id)
                return (x->id > y->id) - (x->id < y->id);
        return (x->line > y->line) - (x->line < y->line);
}

/* Parse integer field f (index col) into [min, max]; the message says why not. */
static int parse_num(const char *name, int line, int col, const char *p, size_t n, int64_t min, int64_t max,
                     int64_t *ret, char *err, size_t errlen) {
        char buf[FIELD_MAX + 1], shown[32];
        show(p, n, shown, sizeof(shown));
        if (n == 0) {
                fail(err, errlen, name, line, "%s: empty", COLS[col]);
                return -GP_EPARSE;
        }
        if (n > FIELD_MAX) {
                fail(err, errlen, name, line, "%s: not an integer: '%s'", COLS[col], shown);
                return -GP_EPARSE;
        }
        memcpy(buf, p, n);
        buf[n] = '\0';
        int64_t v;
        int rc = gp_parse_i64(buf, INT64_MIN, INT64_MAX, &v);
        if (rc == -EINVAL) {
                fail(err, errlen, name, line, "%s: not an integer: '%s'", COLS[col], shown);
                return -GP_EPARSE;
        }
        if (rc == 0 && v < 0) {
                fail(err, errlen, name, line, "%s: must not be negative: %s", COLS[col], shown);
                return -GP_EPARSE;
        }
        if (rc < 0 || v < min || v > max) {
                fail(err, errlen, name, line, "%s: %s is out of range %lld..%lld", COLS[col], shown, (long long)min,
                     (long long)max);
                return -GP_EPARSE;
        }
        *ret = v;
        return 0;
}

int gp_trace_parse(const char *name, const char *data, size_t len, const gp_trace_limits *lim,
                   gp_trace **ret, char *err, size_t errlen) {
        if (errlen)
                err[0] = '\0';
        if (!name)
                name = "trace";
        if (!lim || lim->max_gpus < 1 || (!data && len)) {
                fail(err, errlen, name, 0, "invalid arguments");
                return -EINVAL;
        }
        if (len > GP_TRACE_MAX_BYTES) {
                fail(err, errlen, name, 0, "larger than %zu bytes", GP_TRACE_MAX_BYTES);
                return -E2BIG;
        }
        if (len && memchr(data, '\0', len)) {
                size_t off = (size_t)((const char *)memchr(data, '\0', len) - data);
                int ln = 1;
                for (size_t i = 0; i < off; i++)
                        ln += data[i] == '\n';
                fail(err, errlen, name, ln, "contains a NUL byte");
                return -GP_EPARSE;
        }
        // cppcheck-suppress unreadVariable ; a defensive start value: every path to fail sets rc
        int rc = 0;
        interner in = {0};
        id_line *ids = NULL;
        gp_trace *t = calloc(1, sizeof(*t));
        if (!t) {
                fail(err, errlen, name, 0, "out of memory");
                return -ENOMEM;
        }
        size_t cap = 0;
        size_t pos = 0, n;
        const char *l;
        int line = 0;
        if (!next_line(data, len, &pos, &l, &n)) {
                fail(err, errlen, name, 0, "empty file: expected the header line '%s'", HEADER);
                rc = -GP_EPARSE;
                goto fail;
        }
        line = 1;
        /* a UTF-8 byte order mark is tolerated before the header */
        if (n >= 3 && memcmp(l, "\xef\xbb\xbf", 3) == 0) {
                l += 3;
                n -= 3;
        }
        if (n != strlen(HEADER) || memcmp(l, HEADER, n) != 0) {
                char shown[32];
                show(l, n, shown, sizeof(shown));
                fail(err, errlen, name, 1, "expected the header line '%s', got '%s'", HEADER, shown);
                rc = -GP_EPARSE;
                goto fail;
        }
        int64_t prev_submit = 0;
        while (next_line(data, len, &pos, &l, &n)) {
                line++;
                if (n == 0) {
                        if (pos >= len)
                                break; /* the newline of the last line */
                        fail(err, errlen, name, line, "empty line");
                        rc = -GP_EPARSE;
                        goto fail;
                }
                if (n > GP_TRACE_MAX_LINE) {
                        fail(err, errlen, name, line, "line longer than %d bytes", GP_TRACE_MAX_LINE);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                const char *f[NFIELDS];
                size_t fl[NFIELDS];
                int nf = 0;
                const char *p = l, *e = l + n;
                for (;;) {
                        const char *c = memchr(p, ',', (size_t)(e - p));
                        const char *fe = c ? c : e;
                        if (nf < NFIELDS) {
                                f[nf] = p;
                                fl[nf] = (size_t)(fe - p);
                        }
                        nf++;
                        if (!c)
                                break;
                        p = c + 1;
                }
                if (nf != NFIELDS) {
                        fail(err, errlen, name, line, "expected %d comma-separated fields (%s), got %d", NFIELDS,
                             HEADER, nf);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                gp_trace_job j = {.line = line};
                int64_t gpus;
                if ((rc = parse_num(name, line, 0, f[0], fl[0], 0, GP_TRACE_MAX_ID, &j.job_id, err, errlen)) < 0 ||
                    (rc = parse_num(name, line, 1, f[1], fl[1], 0, GP_TRACE_MAX_SECONDS, &j.submit_s, err, errlen)) <
                            0 ||
                    (rc = parse_num(name, line, 2, f[2], fl[2], 1, GP_TRACE_MAX_SECONDS, &j.duration_s, err,
                                    errlen)) < 0 ||
                    (rc = parse_num(name, line, 3, f[3], fl[3], 1, 1000000, &gpus, err, errlen)) < 0)
                        goto fail;
                if (!tenant_ok(f[4], fl[4])) {
                        char shown[32];
                        show(f[4], fl[4], shown, sizeof(shown));
                        fail(err, errlen, name, line,
                             "tenant: '%s' is not 1..%d letters, digits, '-', '_' or '.'", shown, GP_TENANT_MAX - 1);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                if (j.submit_s < prev_submit) {
                        fail(err, errlen, name, line,
                             "submit_time_s: %lld is before the previous row's %lld (rows must be sorted by submit time)",
                             (long long)j.submit_s, (long long)prev_submit);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                prev_submit = j.submit_s;
                if (gpus > lim->max_gpus) {
                        if (!lim->skip_oversize) {
                                fail(err, errlen, name, line,
                                     "num_gpus: %lld is more than one job can get on this cluster (%d%s%s)",
                                     (long long)gpus, lim->max_gpus, lim->max_gpus_why ? ": " : "",
                                     lim->max_gpus_why ? lim->max_gpus_why : "");
                                rc = -GP_EPARSE;
                                goto fail;
                        }
                        if (!t->skipped)
                                t->first_skipped_line = line;
                        t->skipped++;
                        t->skipped_gpu_s += gpus * j.duration_s;
                        continue;
                }
                j.gpus = (int)gpus;
                if ((rc = intern(&in, f[4], fl[4], &j.tenant)) < 0) {
                        if (rc == -E2BIG)
                                fail(err, errlen, name, line, "tenant: more than %d distinct tenants",
                                     GP_TRACE_MAX_TENANTS);
                        else
                                fail(err, errlen, name, line, "out of memory");
                        goto fail;
                }
                if (t->n == cap) {
                        if (t->n >= GP_TRACE_MAX_JOBS) {
                                fail(err, errlen, name, line, "more than %d jobs", GP_TRACE_MAX_JOBS);
                                rc = -E2BIG;
                                goto fail;
                        }
                        gp_trace_job *v = gp_vec_grow(t->jobs, &cap, t->n + 1, sizeof(*v), 1024);
                        if (!v) {
                                fail(err, errlen, name, line, "out of memory");
                                rc = -ENOMEM;
                                goto fail;
                        }
                        t->jobs = v;
                }
                t->jobs[t->n++] = j;
        }
        if (t->n == 0) {
                fail(err, errlen, name, 0, "no jobs after the header%s", t->skipped ? " (all too wide, skipped)" : "");
                rc = -GP_EPARSE;
                goto fail;
        }
        /* job ids are unique */
        if (!(ids = malloc(t->n * sizeof(*ids)))) {
                fail(err, errlen, name, 0, "out of memory");
                rc = -ENOMEM;
                goto fail;
        }
        for (size_t i = 0; i < t->n; i++)
                ids[i] = (id_line){t->jobs[i].job_id, t->jobs[i].line};
        qsort(ids, t->n, sizeof(*ids), cmp_id_line);
        for (size_t i = 1; i < t->n; i++)
                if (ids[i].id == ids[i - 1].id) {
                        fail(err, errlen, name, ids[i].line, "job_id: %lld already used on line %d",
                             (long long)ids[i].id, ids[i - 1].line);
                        rc = -GP_EPARSE;
                        goto fail;
                }
        free(ids);
        free(in.slots);
        t->tenants = in.names;
        t->ntenants = in.n;
        *ret = t;
        return 0;
fail:
        free(ids);
        for (uint32_t i = 0; i < in.n; i++)
                free(in.names[i]);
        free(in.names);
        free(in.slots);
        gp_trace_free(t);
        return rc;
}

int gp_trace_load(const char *path, const gp_trace_limits *lim, gp_trace **ret, char *err, size_t errlen) {
        char *data = NULL;
        size_t len = 0;
        int rc = read_file(path, GP_TRACE_MAX_BYTES, &data, &len, err, errlen);
        if (rc < 0)
                return rc;
        rc = gp_trace_parse(path, data, len, lim, ret, err, errlen);
        free(data);
        return rc;
}

/* ------------------------------------------------------------------ */
/* the tenant map                                                      */

void gp_trace_map_free(gp_trace_map *m) {
        if (!m)
                return;
        for (size_t i = 0; i < m->n; i++) {
                free(m->tenant[i]);
                free(m->rename[i]);
        }
        free(m->tenant);
        free(m->prio);
        free(m->rename);
        free(m->def_rename);
        free(m);
}

static int map_add(gp_trace_map *m, const char *tenant, size_t tl, int prio, const char *rn, size_t rl) {
        if (m->n == m->cap) {
                /* three parallel arrays of one capacity: each grows alike from m->cap */
                size_t c = m->cap;
                char **a = gp_vec_grow(m->tenant, &c, m->n + 1, sizeof(*a), 16);
                if (!a)
                        return -ENOMEM;
                m->tenant = a;
                c = m->cap;
                int *b = gp_vec_grow(m->prio, &c, m->n + 1, sizeof(*b), 16);
                if (!b)
                        return -ENOMEM;
                m->prio = b;
                c = m->cap;
                char **r = gp_vec_grow(m->rename, &c, m->n + 1, sizeof(*r), 16);
                if (!r)
                        return -ENOMEM;
                m->rename = r;
                m->cap = c;
        }
        char *t = strndup(tenant, tl), *r = rn ? strndup(rn, rl) : NULL;
        if (!t || (rn && !r)) {
                free(t);
                free(r);
                return -ENOMEM;
        }
        m->tenant[m->n] = t;
        m->prio[m->n] = prio;
        m->rename[m->n] = r;
        m->n++;
        return 0;
}

static const char *map_find(const gp_trace_map *m, const char *tenant, size_t tl, size_t *ret_i) {
        for (size_t i = 0; i < m->n; i++)
                if (strlen(m->tenant[i]) == tl && memcmp(m->tenant[i], tenant, tl) == 0) {
                        *ret_i = i;
                        return m->tenant[i];
                }
        return NULL;
}

int gp_trace_map_parse(const char *name, const char *data, size_t len, gp_trace_map **ret, char *err,
                       size_t errlen) {
        if (errlen)
                err[0] = '\0';
        if (!name)
                name = "map";
        if (!data && len) {
                fail(err, errlen, name, 0, "invalid arguments");
                return -EINVAL;
        }
        if (len > MAP_MAX_BYTES) {
                fail(err, errlen, name, 0, "larger than %zu bytes", MAP_MAX_BYTES);
                return -E2BIG;
        }
        if (len && memchr(data, '\0', len)) {
                fail(err, errlen, name, 0, "contains a NUL byte");
                return -GP_EPARSE;
        }
        gp_trace_map *m = calloc(1, sizeof(*m));
        if (!m) {
                fail(err, errlen, name, 0, "out of memory");
                return -ENOMEM;
        }
        m->def_prio = 5;
        int rc = 0, line = 0;
        size_t pos = 0, n;
        const char *l;
        while (next_line(data, len, &pos, &l, &n)) {
                line++;
                while (n && (l[n - 1] == ' ' || l[n - 1] == '\t'))
                        n--;
                while (n && (l[0] == ' ' || l[0] == '\t')) {
                        l++;
                        n--;
                }
                if (n == 0 || l[0] == '#')
                        continue;
                if (n > GP_TRACE_MAX_LINE) {
                        fail(err, errlen, name, line, "line longer than %d bytes", GP_TRACE_MAX_LINE);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                const char *f[3];
                size_t fl[3];
                int nf = 0;
                const char *p = l, *e = l + n;
                for (;;) {
                        const char *c = memchr(p, ',', (size_t)(e - p));
                        const char *fe = c ? c : e;
                        if (nf < 3) {
                                /* spaces around a field are allowed in this hand-written file */
                                const char *fs = p;
                                while (fs < fe && (*fs == ' ' || *fs == '\t'))
                                        fs++;
                                const char *fz = fe;
                                while (fz > fs && (fz[-1] == ' ' || fz[-1] == '\t'))
                                        fz--;
                                f[nf] = fs;
                                fl[nf] = (size_t)(fz - fs);
                        }
                        nf++;
                        if (!c)
                                break;
                        p = c + 1;
                }
                if (nf != 2 && nf != 3) {
                        fail(err, errlen, name, line, "expected 'tenant,priority' or 'tenant,priority,new_tenant', got %d fields",
                             nf);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                bool is_def = fl[0] == 1 && f[0][0] == '*';
                char shown[32];
                if (!is_def && !tenant_ok(f[0], fl[0])) {
                        show(f[0], fl[0], shown, sizeof(shown));
                        fail(err, errlen, name, line, "tenant: '%s' is not '*' or 1..%d letters, digits, '-', '_' or '.'",
                             shown, GP_TENANT_MAX - 1);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                char pb[16];
                int prio;
                if (fl[1] == 0 || fl[1] >= sizeof(pb)) {
                        prio = -1;
                } else {
                        memcpy(pb, f[1], fl[1]);
                        pb[fl[1]] = '\0';
                        if (gp_priority_parse(pb, &prio) < 0)
                                prio = -1;
                }
                if (prio < 0) {
                        show(f[1], fl[1], shown, sizeof(shown));
                        fail(err, errlen, name, line,
                             "priority: '%s' is not 0..9 or critical, high, normal, low, background", shown);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                if (nf == 3 && !tenant_ok(f[2], fl[2])) {
                        show(f[2], fl[2], shown, sizeof(shown));
                        fail(err, errlen, name, line, "new_tenant: '%s' is not 1..%d letters, digits, '-', '_' or '.'",
                             shown, GP_TENANT_MAX - 1);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                size_t prev;
                if (is_def) {
                        if (m->has_default) {
                                fail(err, errlen, name, line, "'*' given twice");
                                rc = -GP_EPARSE;
                                goto fail;
                        }
                        m->has_default = true;
                        m->def_prio = prio;
                        if (nf == 3 && !(m->def_rename = strndup(f[2], fl[2]))) {
                                rc = -ENOMEM;
                                fail(err, errlen, name, line, "out of memory");
                                goto fail;
                        }
                        continue;
                }
                if (map_find(m, f[0], fl[0], &prev)) {
                        show(f[0], fl[0], shown, sizeof(shown));
                        fail(err, errlen, name, line, "tenant: '%s' given twice", shown);
                        rc = -GP_EPARSE;
                        goto fail;
                }
                if (m->n >= GP_TRACE_MAX_TENANTS) {
                        fail(err, errlen, name, line, "more than %d tenants", GP_TRACE_MAX_TENANTS);
                        rc = -E2BIG;
                        goto fail;
                }
                if ((rc = map_add(m, f[0], fl[0], prio, nf == 3 ? f[2] : NULL, nf == 3 ? fl[2] : 0)) < 0) {
                        fail(err, errlen, name, line, "out of memory");
                        goto fail;
                }
        }
        *ret = m;
        return 0;
fail:
        gp_trace_map_free(m);
        return rc;
}

int gp_trace_map_load(const char *path, gp_trace_map **ret, char *err, size_t errlen) {
        char *data = NULL;
        size_t len = 0;
        int rc = read_file(path, MAP_MAX_BYTES, &data, &len, err, errlen);
        if (rc < 0)
                return rc;
        rc = gp_trace_map_parse(path, data, len, ret, err, errlen);
        free(data);
        return rc;
}

void gp_trace_map_lookup(const gp_trace_map *m, const char *tenant, int *ret_priority, const char **ret_tenant) {
        *ret_priority = 5;
        *ret_tenant = tenant;
        if (!m)
                return;
        size_t i;
        if (map_find(m, tenant, strlen(tenant), &i)) {
                *ret_priority = m->prio[i];
                if (m->rename[i])
                        *ret_tenant = m->rename[i];
                return;
        }
        *ret_priority = m->def_prio;
        if (m->def_rename)
                *ret_tenant = m->def_rename;
}
