/* cgroup.c - a cgroup per run (cgroup.h; design: docs/internals/exec.md
 * "cgroups").
 *
 * Invariants: every path is built with a checked snprintf; every file read
 * is bounded (PROCS_MAX_BYTES, SMALL_MAX_BYTES); a run's cgroup is made
 * only below the caller's own cgroup of each hierarchy (never the root
 * unless the caller is there); gp_cgroup_enter makes only write(2) calls.
 */
#include "exec/cgroup.h"

#include "base/util.h"
#include "exec/exec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ROOT_V1 "/sys/fs/cgroup"
#define DAEMON_LEAF "gpupool-daemon"
#define CPU_PERIOD_US 100000
#define SMALL_MAX_BYTES 4096              /* /proc/self/cgroup, controllers, events, oom_control */
#define PROCS_MAX_BYTES ((size_t)1 << 20) /* a cgroup.procs: ~130k pids */
#define RMDIR_TRIES 200                   /* 5 ms apart: a second for the kernel to let go */

static const char *const v2_roots[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
static const char *const v1_ctrls[GP_CGROUP_HIER] = {"memory", "cpu", "freezer"};

/* Read at most max-1 bytes of path into buf (NUL-terminated).  Length or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t max) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t got = 0;
        while (got + 1 < max) {
                ssize_t n = read(fd, buf + got, max - 1 - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int e = errno;
                        close(fd);
                        return -e;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        close(fd);
        buf[got] = '\0';
        return (ssize_t)got;
}

static int write_str(const char *path, const char *s) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t len = strlen(s);
        ssize_t n;
        do
                n = write(fd, s, len);
        while (n < 0 && errno == EINTR);
        int e = n < 0 ? errno : (size_t)n != len ? EIO : 0;
        close(fd);
        return -e;
}

static int join(char *out, size_t size, const char *a, const char *b) {
        int n = snprintf(out, size, "%s/%s", a, b);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* The caller's cgroup path in the hierarchy of ctrl (NULL: the v2 one,
 * "0::/path") from /proc/self/cgroup.  0 or -ENOENT. */
static int own_path(const char *ctrl, char *out, size_t size) {
        char buf[SMALL_MAX_BYTES];
        if (read_small("/proc/self/cgroup", buf, sizeof(buf)) < 0)
                return -ENOENT;
        for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = '\0';
                const char *list = c1 + 1, *path = c2 + 1;
                bool hit = false;
                if (!ctrl) {
                        hit = !strcmp(line, "0") && list[0] == '\0';
                } else {
                        char l[256];
                        snprintf(l, sizeof(l), "%s", list);
                        for (char *s2 = NULL, *w = strtok_r(l, ",", &s2); w; w = strtok_r(NULL, ",", &s2))
                                hit = hit || !strcmp(w, ctrl);
                }
                if (hit && path[0] == '/') {
                        int n = snprintf(out, size, "%s", strcmp(path, "/") ? path : "");
                        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
                }
        }
        return -ENOENT;
}

/* Is word a space-separated word of s? */
static bool has_word(const char *s, const char *word) {
        size_t wl = strlen(word);
        for (const char *p = s; (p = strstr(p, word)); p += wl)
                if ((p == s || p[-1] == ' ' || p[-1] == '\n') && (p[wl] == ' ' || p[wl] == '\n' || !p[wl]))
                        return true;
        return false;
}

/* v2: the dir runs go under (the caller's cgroup, or its parent when the
 * caller sits in the daemon's leaf), and whether memory and cpu may be
 * enabled there.  0 or -ENOENT (*why set). */
static int v2_base(char *base, size_t size, bool *ret_root, char *why, size_t why_size) {
        char own[GP_CGROUP_PATH_MAX];
        if (own_path(NULL, own, sizeof(own)) < 0) {
                snprintf(why, why_size, "this process has no cgroup2 path in /proc/self/cgroup");
                return -ENOENT;
        }
        const char *leaf = strrchr(own, '/');
        if (leaf && !strcmp(leaf + 1, DAEMON_LEAF))
                own[leaf - own] = '\0';
        for (size_t i = 0; i < sizeof(v2_roots) / sizeof(v2_roots[0]); i++) {
                char f[GP_CGROUP_PATH_MAX + 32], ctl[SMALL_MAX_BYTES];
                int n = snprintf(base, size, "%s%s", v2_roots[i], own);
                if (n < 0 || (size_t)n >= size || join(f, sizeof(f), base, "cgroup.controllers") < 0 ||
                    read_small(f, ctl, sizeof(ctl)) < 0)
                        continue;
                if (has_word(ctl, "memory") && has_word(ctl, "cpu")) {
                        *ret_root = own[0] == '\0';
                        return 0;
                }
        }
        snprintf(why, why_size, "no cgroup2 mount offers the memory and cpu controllers to this process's cgroup");
        return -ENOENT;
}

/* v1: the caller's dir in the hierarchy of ctrl.  0 or -ENOENT. */
static int v1_base(const char *ctrl, char *base, size_t size) {
        char own[GP_CGROUP_PATH_MAX];
        if (own_path(ctrl, own, sizeof(own)) < 0)
                return -ENOENT;
        int n = snprintf(base, size, "%s/%s%s", ROOT_V1, ctrl, own);
        if (n < 0 || (size_t)n >= size)
                return -ENAMETOOLONG;
        struct stat st;
        return stat(base, &st) == 0 && S_ISDIR(st.st_mode) && access(base, W_OK) == 0 ? 0 : -ENOENT;
}

int gp_cgroup_detect(char *why, size_t why_size) {
        char base[GP_CGROUP_PATH_MAX], f[GP_CGROUP_PATH_MAX + 32], w2[200];
        bool root;
        if (v2_base(base, sizeof(base), &root, w2, sizeof(w2)) == 0)
                return 2;
        if (v1_base("memory", base, sizeof(base)) == 0 && join(f, sizeof(f), base, "memory.limit_in_bytes") == 0 &&
            access(f, W_OK) == 0)
                return 1;
        snprintf(why, why_size, "no usable cgroup: %s, and no writable cgroup v1 memory hierarchy under %s/memory", w2,
                 ROOT_V1);
        return 0;
}

const char *gp_cgroup_version_name(int version) {
        return version == 2 ? "v2" : version == 1 ? "v1" : NULL;
}

/* Read a cgroup.procs (bounded) into a pid array.  Count or -errno. */
static int read_pids(const char *dir, pid_t **ret) {
        char f[GP_CGROUP_PATH_MAX + 32];
        if (join(f, sizeof(f), dir, "cgroup.procs") < 0)
                return -ENAMETOOLONG;
        char *buf = malloc(PROCS_MAX_BYTES);
        if (!buf)
                return -ENOMEM;
        ssize_t len = read_small(f, buf, PROCS_MAX_BYTES);
        if (len < 0) {
                free(buf);
                return (int)len;
        }
        size_t cap = 0, n = 0;
        pid_t *v = NULL;
        for (char *p = buf; *p;) {
                char *end;
                long x = strtol(p, &end, 10);
                if (end == p)
                        break;
                if (x > 0 && x <= INT32_MAX) {
                        if (n == cap) {
                                cap = cap ? cap * 2 : 16;
                                pid_t *nv = realloc(v, cap * sizeof(*v));
                                if (!nv) {
                                        free(v);
                                        free(buf);
                                        return -ENOMEM;
                                }
                                v = nv;
                        }
                        v[n++] = (pid_t)x;
                }
                p = end;
                while (*p == '\n' || *p == ' ')
                        p++;
        }
        free(buf);
        *ret = v;
        return (int)n;
}

static int setup(char *why, size_t why_size);

/* rmdir the empty run cgroups in dir whose supervisor is gone (killed
 * before it could remove them); one with processes stays (rmdir refuses). */
static void sweep_dir(const char *dir) {
        DIR *dp = opendir(dir);
        if (!dp)
                return;
        struct dirent *e;
        int seen = 0;
        // cppcheck-suppress readdirCalled ; this stream is read by one thread (the daemon's start)
        while ((e = readdir(dp)) && seen++ < 65536) {
                const char *dash = strrchr(e->d_name, '-');
                if (strncmp(e->d_name, "gpupool-task-", 13) || !dash || !dash[1])
                        continue;
                char *end;
                long pid = strtol(dash + 1, &end, 10);
                char p[GP_CGROUP_PATH_MAX + 300];
                if (*end || pid <= 0 || pid > INT32_MAX || kill((pid_t)pid, 0) == 0 || errno != ESRCH ||
                    (size_t)snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) >= sizeof(p))
                        continue;
                (void)rmdir(p);
        }
        closedir(dp);
}

/* Every hierarchy's base: sweep_dir. */
static void sweep(int version) {
        char base[GP_CGROUP_PATH_MAX], w2[200];
        bool root;
        if (version == 2 && v2_base(base, sizeof(base), &root, w2, sizeof(w2)) == 0)
                sweep_dir(base);
        for (int i = 0; version == 1 && i < GP_CGROUP_HIER; i++)
                if (v1_base(v1_ctrls[i], base, sizeof(base)) == 0)
                        sweep_dir(base);
}

int gp_cgroup_setup(char *why, size_t why_size) {
        int v = setup(why, why_size);
        sweep(v);
        return v;
}

static int setup(char *why, size_t why_size) {
        char base[GP_CGROUP_PATH_MAX], own[GP_CGROUP_PATH_MAX], f[GP_CGROUP_PATH_MAX + 64], w2[200];
        bool root;
        if (v2_base(base, sizeof(base), &root, w2, sizeof(w2)) < 0)
                return gp_cgroup_detect(why, why_size);
        if (join(f, sizeof(f), base, "cgroup.subtree_control") < 0)
                return 0;
        char ctl[SMALL_MAX_BYTES];
        if (read_small(f, ctl, sizeof(ctl)) >= 0 && has_word(ctl, "memory") && has_word(ctl, "cpu"))
                return 2;
        if (write_str(f, "+memory +cpu") == 0)
                return 2;
        if (root || own_path(NULL, own, sizeof(own)) < 0) {
                snprintf(why, why_size, "cannot enable +memory +cpu in %s", f);
                return 0;
        }
        /* processes in base: the daemon moves itself into a leaf beside
         * the runs (cgroup2 allows controllers only below a cgroup without
         * processes: a unit with Delegate=yes).  Only itself: other
         * processes there are not its to move, and then there are no limits */
        char leaf[GP_CGROUP_PATH_MAX + 32], lprocs[GP_CGROUP_PATH_MAX + 64], me[24];
        if (join(leaf, sizeof(leaf), base, DAEMON_LEAF) < 0 || join(lprocs, sizeof(lprocs), leaf, "cgroup.procs") < 0 ||
            (mkdir(leaf, 0755) < 0 && errno != EEXIST)) {
                snprintf(why, why_size, "cannot make %s: %s", leaf, strerror(errno));
                return 0;
        }
        snprintf(me, sizeof(me), "%d", (int)getpid());
        int rc = write_str(lprocs, me);
        if (rc == 0 && (rc = write_str(f, "+memory +cpu")) == 0)
                return 2;
        snprintf(why, why_size,
                 "cannot enable +memory +cpu in %s: %s (other processes share this cgroup: run the "
                 "daemon in a unit of its own with Delegate=yes)",
                 f, strerror(-rc));
        return 0;
}

static int write_limit(const char *dir, const char *file, const char *val, bool optional, char *why, size_t why_size) {
        char f[GP_CGROUP_PATH_MAX + 64];
        int rc = join(f, sizeof(f), dir, file);
        if (rc == 0)
                rc = write_str(f, val);
        if (rc == -ENOENT && optional)
                return 0;
        if (rc < 0)
                snprintf(why, why_size, "cannot write %s into %s: %s", val, f, strerror(-rc));
        return rc;
}

/* Make dir (a leftover of the same name, after a crash and a reused pid,
 * is emptied and taken over). */
static int make_dir(gp_cgroup *cg, const char *parent, const char *name, bool freezer, char *why, size_t why_size) {
        char *d = cg->dir[cg->n];
        if (join(d, GP_CGROUP_PATH_MAX, parent, name) < 0) {
                snprintf(why, why_size, "cgroup path below %.200s is too long", parent);
                return -ENAMETOOLONG;
        }
        if (mkdir(d, 0755) < 0 && errno != EEXIST) {
                int e = errno;
                snprintf(why, why_size, "cannot make the cgroup %s: %s", d, strerror(e));
                return -e;
        }
        cg->is_freezer[cg->n] = freezer;
        cg->procs_fd[cg->n] = -1;
        cg->n++;
        return 0;
}

int gp_cgroup_create(int64_t task_id, const gp_cgroup_limits *lim, gp_cgroup *ret, char *why, size_t why_size) {
        gp_cgroup cg;
        memset(&cg, 0, sizeof(cg));
        for (int i = 0; i < GP_CGROUP_HIER; i++)
                cg.procs_fd[i] = -1;
        if (lim)
                cg.limits = *lim;
        char name[64], base[GP_CGROUP_PATH_MAX], w2[200], val[48];
        snprintf(name, sizeof(name), "gpupool-task-%" PRId64 "-%d", task_id, (int)getpid());
        bool root;
        int rc = 0;
        if (v2_base(base, sizeof(base), &root, w2, sizeof(w2)) == 0) {
                char f[GP_CGROUP_PATH_MAX + 32], ctl[SMALL_MAX_BYTES];
                if (join(f, sizeof(f), base, "cgroup.subtree_control") < 0 || read_small(f, ctl, sizeof(ctl)) < 0 ||
                    ((!has_word(ctl, "memory") || !has_word(ctl, "cpu")) && write_str(f, "+memory +cpu") < 0)) {
                        /* not set up (gp_cgroup_setup): no limits can be had here */
                        snprintf(why, why_size, "memory and cpu are not enabled in %s", f);
                        *ret = cg;
                        return 1;
                }
                cg.version = 2;
                if ((rc = make_dir(&cg, base, name, false, why, why_size)) < 0)
                        goto fail;
                if (cg.limits.cpus > 0) {
                        snprintf(val, sizeof(val), "%lld %d", (long long)cg.limits.cpus * CPU_PERIOD_US, CPU_PERIOD_US);
                        if ((rc = write_limit(cg.dir[0], "cpu.max", val, false, why, why_size)) < 0)
                                goto fail;
                }
                if (cg.limits.host_memory_mb > 0) {
                        snprintf(val, sizeof(val), "%" PRId64, cg.limits.host_memory_mb << 20);
                        if ((rc = write_limit(cg.dir[0], "memory.max", val, false, why, why_size)) < 0 ||
                            (rc = write_limit(cg.dir[0], "memory.swap.max", "0", true, why, why_size)) < 0)
                                goto fail;
                }
                /* an OOM kill stops the whole run, not one of its processes */
                if ((rc = write_limit(cg.dir[0], "memory.oom.group", "1", true, why, why_size)) < 0)
                        goto fail;
        } else {
                char f[GP_CGROUP_PATH_MAX + 32];
                if (v1_base("memory", base, sizeof(base)) < 0 ||
                    join(f, sizeof(f), base, "memory.limit_in_bytes") < 0 || access(f, W_OK) < 0) {
                        snprintf(why, why_size, "no usable cgroup: %s, and no writable cgroup v1 memory hierarchy", w2);
                        *ret = cg;
                        return 1;
                }
                cg.version = 1;
                for (int i = 0; i < GP_CGROUP_HIER; i++) {
                        if (i > 0 && v1_base(v1_ctrls[i], base, sizeof(base)) < 0)
                                continue; /* cpu, freezer: used where mounted */
                        if ((rc = make_dir(&cg, base, name, i == 2, why, why_size)) < 0)
                                goto fail;
                        const char *d = cg.dir[cg.n - 1];
                        if (i == 0 && cg.limits.host_memory_mb > 0) {
                                snprintf(val, sizeof(val), "%" PRId64, cg.limits.host_memory_mb << 20);
                                if ((rc = write_limit(d, "memory.limit_in_bytes", val, false, why, why_size)) < 0 ||
                                    (rc = write_limit(d, "memory.memsw.limit_in_bytes", val, true, why, why_size)) < 0)
                                        goto fail;
                        } else if (i == 1 && cg.limits.cpus > 0) {
                                snprintf(val, sizeof(val), "%lld", (long long)cg.limits.cpus * CPU_PERIOD_US);
                                if ((rc = write_limit(d, "cpu.cfs_period_us", "100000", false, why, why_size)) < 0 ||
                                    (rc = write_limit(d, "cpu.cfs_quota_us", val, false, why, why_size)) < 0)
                                        goto fail;
                        }
                }
                if (cg.limits.cpus > 0 && !(cg.n > 1 && !cg.is_freezer[1])) {
                        snprintf(why, why_size, "no writable cgroup v1 cpu hierarchy for the CPU limit");
                        rc = -ENOENT;
                        goto fail;
                }
        }
        for (int i = 0; i < cg.n; i++) {
                char f[GP_CGROUP_PATH_MAX + 32];
                if ((rc = join(f, sizeof(f), cg.dir[i], "cgroup.procs")) < 0 ||
                    (cg.procs_fd[i] = open(f, O_WRONLY | O_CLOEXEC)) < 0) {
                        rc = rc < 0 ? rc : -errno;
                        snprintf(why, why_size, "cannot open %s: %s", f, strerror(-rc));
                        goto fail;
                }
        }
        /* a leftover of the same name (a crash, a reused pid): empty */
        for (int i = 0; i < 50 && gp_cgroup_kill(&cg) == 1; i++)
                nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
        *ret = cg;
        return 0;
fail:
        gp_cgroup_remove(&cg);
        return rc;
}

int gp_cgroup_enter(const gp_cgroup *cg) {
        for (int i = 0; cg && i < cg->n; i++) {
                ssize_t n;
                do
                        n = write(cg->procs_fd[i], "0", 1);
                while (n < 0 && errno == EINTR);
                if (n < 0)
                        return -errno;
        }
        return 0;
}

int gp_cgroup_kill(const gp_cgroup *cg) {
        if (!cg || cg->version == 0 || cg->n == 0)
                return 0;
        char f[GP_CGROUP_PATH_MAX + 32];
        const char *freezer = NULL;
        for (int i = 0; i < cg->n; i++)
                if (cg->is_freezer[i])
                        freezer = cg->dir[i];
        if (cg->version == 2 && join(f, sizeof(f), cg->dir[0], "cgroup.kill") == 0)
                (void)write_str(f, "1"); /* the kernel kills, forks included; absent before 5.14 */
        if (freezer && join(f, sizeof(f), freezer, "freezer.state") == 0)
                (void)write_str(f, "FROZEN"); /* no fork slips past the loop below */
        pid_t *pids = NULL;
        int n = read_pids(cg->dir[0], &pids);
        for (int i = 0; i < n; i++)
                kill(pids[i], SIGKILL);
        free(pids);
        if (freezer)
                (void)write_str(f, "THAWED"); /* SIGKILLed frozen processes die once thawed */
        return n < 0 ? n : n > 0;
}

/* The number after "key " in a "key value" per line file. */
static int64_t keyed(const char *dir, const char *file, const char *key) {
        char f[GP_CGROUP_PATH_MAX + 32], buf[SMALL_MAX_BYTES];
        if (join(f, sizeof(f), dir, file) < 0 || read_small(f, buf, sizeof(buf)) < 0)
                return 0;
        size_t kl = strlen(key);
        for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
                if (!strncmp(p, key, kl) && p[kl] == ' ')
                        return strtoll(p + kl + 1, NULL, 10);
        return 0;
}

int64_t gp_cgroup_oom_kills(const gp_cgroup *cg) {
        if (!cg || cg->version == 0 || cg->n == 0)
                return 0;
        if (cg->version == 2)
                return keyed(cg->dir[0], "memory.events", "oom_kill");
        return keyed(cg->dir[0], "memory.oom_control", "oom_kill");
}

void gp_cgroup_note_result(const gp_cgroup *cg, gp_exec_result *res) {
        bool failed = (res->end == GP_EXEC_EXITED && res->exit_code != 0) || res->end == GP_EXEC_SIGNALED;
        int64_t k = failed ? gp_cgroup_oom_kills(cg) : 0;
        if (k <= 0)
                return;
        char m[sizeof(res->message) + 160];
        if (cg->limits.host_memory_mb > 0)
                snprintf(m, sizeof(m),
                         "host_memory_exceeded: over its RAM limit of %" PRId64 " MiB, the kernel "
                         "killed %" PRId64 " of its processes; %.80s",
                         cg->limits.host_memory_mb, k, res->message);
        else
                snprintf(m, sizeof(m),
                         "host_memory_exceeded: out of RAM, the kernel killed %" PRId64 " of its "
                         "processes; %.80s",
                         k, res->message);
        gp_strlcpy(res->message, m, sizeof(res->message));
}

int gp_cgroup_remove(gp_cgroup *cg) {
        if (!cg)
                return 0;
        int rc = 0;
        for (int i = cg->n - 1; i >= 0; i--) {
                if (cg->procs_fd[i] >= 0)
                        close(cg->procs_fd[i]);
                cg->procs_fd[i] = -1;
                int t = 0, r;
                while ((r = rmdir(cg->dir[i])) < 0 && errno == EBUSY && ++t < RMDIR_TRIES)
                        nanosleep(&(struct timespec){.tv_nsec = 5 * 1000 * 1000}, NULL);
                if (r < 0 && errno != ENOENT && rc == 0)
                        rc = -errno;
        }
        cg->n = 0;
        cg->version = 0;
        return rc;
}

/* Take parent/name into cg when it exists (gp_cgroup_reap). */
static void take_dir(gp_cgroup *cg, const char *parent, const char *name, bool freezer) {
        char *d = cg->dir[cg->n];
        if (join(d, GP_CGROUP_PATH_MAX, parent, name) < 0 || access(d, F_OK) < 0)
                return;
        cg->is_freezer[cg->n] = freezer;
        cg->procs_fd[cg->n] = -1;
        cg->n++;
}

int gp_cgroup_reap(int64_t task_id, int64_t sup_pid) {
        gp_cgroup cg;
        memset(&cg, 0, sizeof(cg));
        char name[64], base[GP_CGROUP_PATH_MAX], w2[200];
        snprintf(name, sizeof(name), "gpupool-task-%" PRId64 "-%" PRId64, task_id, sup_pid);
        bool root;
        if (v2_base(base, sizeof(base), &root, w2, sizeof(w2)) == 0) {
                cg.version = 2;
                take_dir(&cg, base, name, false);
        } else {
                cg.version = 1;
                for (int i = 0; i < GP_CGROUP_HIER; i++)
                        if (v1_base(v1_ctrls[i], base, sizeof(base)) == 0)
                                take_dir(&cg, base, name, i == 2);
        }
        if (cg.n == 0)
                return 0;
        int left = 1;
        for (int i = 0; i < 20 && (left = gp_cgroup_kill(&cg)) == 1; i++)
                nanosleep(&(struct timespec){.tv_nsec = 5 * 1000 * 1000}, NULL);
        if (left == 1)
                return 1; /* still there: the dirs stay (removing would fail) */
        int rc = gp_cgroup_remove(&cg);
        return rc == -EBUSY ? 1 : rc;
}

static int get_limit(const json_t *o, const char *key, int64_t max, int64_t *ret) {
        json_t *v = json_object_get(o, key);
        if (!v || json_is_null(v)) {
                *ret = 0;
                return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)
                return -EINVAL;
        *ret = json_integer_value(v);
        return 0;
}

int gp_cgroup_limits_get(const json_t *o, gp_cgroup_limits *ret) {
        int64_t c, m;
        if (get_limit(o, "cpus", GP_CGROUP_MAX_CPUS, &c) < 0 ||
            get_limit(o, "host_memory_mb", GP_CGROUP_MAX_MEMORY_MB, &m) < 0)
                return -EINVAL;
        *ret = (gp_cgroup_limits){.cpus = (int)c, .host_memory_mb = m};
        return 0;
}

int gp_cgroup_limits_set(json_t *o, const gp_cgroup_limits *lim) {
        if (!lim)
                return 0;
        if (lim->cpus < 0 || lim->cpus > GP_CGROUP_MAX_CPUS || lim->host_memory_mb < 0 ||
            lim->host_memory_mb > GP_CGROUP_MAX_MEMORY_MB)
                return -EINVAL;
        if (lim->cpus > 0 && json_object_set_new(o, "cpus", json_integer(lim->cpus)) < 0)
                return -ENOMEM;
        if (lim->host_memory_mb > 0 && json_object_set_new(o, "host_memory_mb", json_integer(lim->host_memory_mb)) < 0)
                return -ENOMEM;
        return 0;
}
