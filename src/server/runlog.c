/* runlog.c - one log per run of a batch task (runlog.h).
 * Invariants: a run's log is only ever written with that run's output (by
 * its local supervisor, or by nodes-run.c with an agent's chunks of that
 * run while it is current or being stopped on its node), so no run's bytes
 * land in another's file; the follow stream sends what a run's log holds
 * before it says the next run starts, and says so once per run; the stream
 * is a function of the files and the journal, so an offset into it means
 * the same bytes on every request. */
#include "server/runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "core/watchdog.h"
#include "server/server-int.h"

#define RUNS_FILE "runs"
#define RUNS_READ_MAX ((size_t)1 << 20) /* the journal read back for a reason: at most this much */

/* What a followed log stream keeps between reader calls (r->log_follow).
 * The stream is the first run's log from byte 0, then for each later run
 * its line and its log; A = r->log_offset + pos is a position in it (the
 * request's offset is one, so a reconnect goes on where it broke off). */
typedef struct gp_runlog_follow {
        int64_t run;                 /* the run being sent */
        int rank;
        int64_t base;                /* A of byte 0 of the run's log */
        int64_t note_at;             /* A of its line (base - note_len); 0 for the first run */
        char note[GP_REASON_MAX + 128]; /* "--- gpupool: run N of task ID starts (...)" */
        size_t note_len;
} follow;

int gp_runlog_name(int64_t run, int rank, char *buf, size_t size) {
        if (run < 1 || rank < 0 || rank >= GP_MAX_GPUS)
                return -EINVAL;
        int n;
        if (run == 1)
                n = rank == 0 ? snprintf(buf, size, "log") : snprintf(buf, size, "log.r%d", rank);
        else
                n = rank == 0 ? snprintf(buf, size, "log.run%" PRId64, run)
                              : snprintf(buf, size, "log.run%" PRId64 ".r%d", run, rank);
        return n < 0 || (size_t)n >= size ? -EINVAL : 0;
}

int gp_runlog_path(const gp_daemon *d, int64_t task, int64_t run, int rank, char *buf, size_t size) {
        char name[GP_RUNLOG_NAME_MAX];
        int r = gp_runlog_name(run, rank, name, sizeof(name));
        return r < 0 ? r : gp_daemon_task_path(d, task, name, buf, size);
}

int64_t gp_runlog_last_run(const gp_task *t) {
        int64_t e = gp_task_run_epoch(t);
        /* every way back to the queue counts the run that ended, so run e has
         * started exactly when the task runs or ended after a start */
        if (t->state == GP_TASK_RUNNING || (gp_task_state_is_final(t->state) && t->started_ms != 0))
                return e;
        return e - 1;
}

static int task_dir_fd(gp_daemon *d, int64_t task) {
        char dir[PATH_MAX];
        if (gp_daemon_task_path(d, task, NULL, dir, sizeof(dir)) < 0)
                return -ENAMETOOLONG;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        return fd;
}

void gp_runlog_started(gp_daemon *d, const gp_task *t) {
        int nranks = 0;
        for (int i = 0; i < t->n_gpus; i++)
                if (i == 0 || strcmp(t->gpus[i - 1].node, t->gpus[i].node))
                        nranks++;
        if (nranks <= 1) { /* rank 0 always exists (its log may be missing: empty): only the directory */
                char dir[PATH_MAX];
                if (gp_daemon_task_path(d, t->id, NULL, dir, sizeof(dir)) == 0 && mkdir(dir, 0700) < 0 &&
                    errno != EEXIST)
                        gp_warn("task %" PRId64 ": cannot make its directory for logs: %s", t->id, strerror(errno));
                return; /* a file made per start halved the starts/s through agents (bench-cluster) */
        }
        int dfd = task_dir_fd(d, t->id);
        if (dfd < 0) {
                gp_warn("task %" PRId64 ": cannot make its directory for logs: %s", t->id, gp_strerror(dfd));
                return;
        }
        int64_t run = gp_task_run_epoch(t);
        for (int rank = 1; rank < nranks && rank < GP_MAX_GPUS; rank++) {
                char name[GP_RUNLOG_NAME_MAX];
                if (gp_runlog_name(run, rank, name, sizeof(name)) < 0)
                        break;
                int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (fd < 0)
                        gp_warn("task %" PRId64 ": cannot make %s: %s", t->id, name, strerror(errno));
                else
                        close(fd);
        }
        close(dfd);
}

void gp_runlog_requeued(gp_daemon *d, const gp_task *t) {
        if (t->is_lease)
                return;
        int dfd = task_dir_fd(d, t->id);
        int fd = dfd < 0 ? -1 : openat(dfd, RUNS_FILE, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                gp_warn("task %" PRId64 ": cannot note why it was requeued: %s", t->id,
                        dfd < 0 ? gp_strerror(dfd) : strerror(errno));
                if (dfd >= 0)
                        close(dfd);
                return;
        }
        char line[GP_REASON_MAX + 32];
        int n = snprintf(line, sizeof(line), "%" PRId64 " ", gp_task_run_epoch(t));
        for (const char *p = t->reason; *p && n < (int)sizeof(line) - 2; p++)
                line[n++] = (unsigned char)*p < 0x20 || *p == 0x7f ? ' ' : *p; /* one line each */
        line[n++] = '\n';
        if (write(fd, line, (size_t)n) != n)
                gp_warn("task %" PRId64 ": cannot note why it was requeued: %s", t->id, strerror(errno));
        close(fd);
        close(dfd);
}

/* Why run `run` of task began (its last note in the journal) into buf;
 * "" when none is noted. */
static void why_run(gp_daemon *d, int64_t task, int64_t run, char *buf, size_t size) {
        buf[0] = '\0';
        char path[PATH_MAX];
        if (gp_daemon_task_path(d, task, RUNS_FILE, path, sizeof(path)) < 0)
                return;
        FILE *f = fopen(path, "re");
        if (!f)
                return;
        char line[GP_REASON_MAX + 64];
        size_t seen = 0;
        while (seen < RUNS_READ_MAX && fgets(line, sizeof(line), f)) {
                size_t len = strlen(line);
                seen += len;
                if (len == 0 || line[len - 1] != '\n')
                        break; /* a line longer than any we write, or a torn one */
                line[len - 1] = '\0';
                char *sp = strchr(line, ' ');
                int64_t n;
                if (!sp)
                        continue;
                *sp = '\0';
                if (gp_parse_i64(line, 1, INT64_MAX, &n) == 0 && n == run)
                        gp_strlcpy(buf, sp + 1, size);
        }
        fclose(f);
}

static bool rank_exists(const gp_daemon *d, const gp_task *t, int64_t run, int rank) {
        if (rank == 0)
                return true;
        char path[PATH_MAX];
        struct stat st;
        return gp_runlog_path(d, t->id, run, rank, path, sizeof(path)) == 0 && stat(path, &st) == 0;
}

int gp_runlog_pick(const gp_daemon *d, const gp_task *t, int64_t run, int64_t rank, int64_t *ret_run, char *why,
                   size_t why_size) {
        int64_t last = gp_runlog_last_run(t);
        if (run > (last > 0 ? last : 1)) { /* run 1 of a task that has not started yet: empty */
                snprintf(why, why_size, "run: task %" PRId64 " has no run %" PRId64 " (%s%" PRId64 ")", t->id, run,
                         last > 1 ? "its runs: 1.." : "its only run: ", last > 0 ? last : 1);
                return -EINVAL;
        }
        if (run == 0)
                run = last > 0 ? last : 1;
        if (rank < 0 || rank >= GP_MAX_GPUS || (rank > 0 && !rank_exists(d, t, run, (int)rank))) {
                snprintf(why, why_size, "rank: run %" PRId64 " of task %" PRId64 " has no rank %" PRId64, run, t->id,
                         rank);
                return -EINVAL;
        }
        *ret_run = run;
        return 0;
}

int gp_runlog_follow_init(hreq *r, int64_t task, int64_t run, int rank, int64_t offset) {
        follow *f = calloc(1, sizeof(*f));
        if (!f)
                return -ENOMEM;
        f->run = run;
        f->rank = rank;
        r->log_follow = f;
        r->log_id = task;
        r->log_fd = -1;
        r->log_offset = offset;
        return 0;
}

void gp_runlog_follow_done(hreq *r) {
        free(r->log_follow);
        r->log_follow = NULL;
}

/* Bytes of the run's log at stream position at; 0 when none (yet). */
static ssize_t read_run(hreq *r, int64_t at, char *buf, size_t max) {
        follow *f = r->log_follow;
        if (r->log_fd < 0) {
                char path[PATH_MAX];
                if (gp_runlog_path(r->d, r->log_id, f->run, f->rank, path, sizeof(path)) == 0)
                        r->log_fd = open(path, O_RDONLY | O_CLOEXEC);
        }
        if (r->log_fd < 0)
                return 0;
        ssize_t n = pread(r->log_fd, buf, max, (off_t)(at - f->base));
        return n > 0 ? n : 0;
}

/* The run's log is all sent and a later run has started: go on with the
 * next run, its line first.  The line depends only on the journal, so a
 * stream taken up again at an offset sees the same bytes. */
static void next_run(hreq *r) {
        follow *f = r->log_follow;
        struct stat st;
        int64_t size = r->log_fd >= 0 && fstat(r->log_fd, &st) == 0 ? (int64_t)st.st_size : 0;
        if (r->log_fd >= 0)
                close(r->log_fd);
        r->log_fd = -1;
        f->run++;
        char why[GP_REASON_MAX + 1];
        why_run(r->d, r->log_id, f->run, why, sizeof(why));
        int n = snprintf(f->note, sizeof(f->note), "--- gpupool: run %" PRId64 " of task %" PRId64 " starts (%s)\n",
                         f->run, r->log_id, why[0] ? why : "requeued");
        f->note_len = n < 0 ? 0 : (size_t)n >= sizeof(f->note) ? sizeof(f->note) - 1 : (size_t)n;
        if (f->note_len > 0)
                f->note[f->note_len - 1] = '\n';
        f->note_at = f->base + size;
        f->base = f->note_at + (int64_t)f->note_len;
}

ssize_t gp_runlog_follow_read(hreq *r, uint64_t pos, char *buf, size_t max) {
        gp_daemon *d = r->d;
        follow *f = r->log_follow;
        int64_t at = r->log_offset + (int64_t)pos;
        for (;;) {
                if (at < f->base) { /* the run's line (or a part of it) */
                        int64_t from = at - f->note_at;
                        size_t n = from < 0 || from >= (int64_t)f->note_len ? 0 : f->note_len - (size_t)from;
                        if (n > max)
                                n = max;
                        if (n == 0)
                                return MHD_CONTENT_READER_END_WITH_ERROR; /* cannot happen: at >= note_at */
                        memcpy(buf, f->note + from, n);
                        return (ssize_t)n;
                }
                ssize_t n = read_run(r, at, buf, max);
                if (n > 0)
                        return n;
                pthread_mutex_lock(&d->lock);
                gp_task *t = gp_i64map_get(&d->tasks, r->log_id);
                int64_t last = -1;
                if (t) {
                        last = gp_runlog_last_run(t);
                } else {
                        gp_task ft;
                        if (gp_daemon_task_lookup(d, r->log_id, &ft) == 0) {
                                last = gp_runlog_last_run(&ft);
                                gp_task_done(&ft);
                        }
                }
                bool stopping = __atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE);
                if (last > f->run && !stopping) {
                        pthread_mutex_unlock(&d->lock);
                        /* one more read: what the run wrote just before it ended */
                        if ((n = read_run(r, at, buf, max)) > 0)
                                return n;
                        next_run(r);
                        continue;
                }
                if (!t || stopping) {
                        pthread_mutex_unlock(&d->lock);
                        /* one more read: output written just before the end */
                        return (n = read_run(r, at, buf, max)) > 0 ? n : MHD_CONTENT_READER_END_OF_STREAM;
                }
                /* nothing new yet: park until the next follower tick */
                r->following = true;
                gp_list_add_head(&d->followers, &r->wlink);
                gp_http_park(r);
                pthread_mutex_unlock(&d->lock);
                uint64_t one = 1;
                ssize_t w = write(d->evfd, &one, sizeof(one));
                (void)w;
                return 0;
        }
}

bool gp_runlog_says_oom(const gp_daemon *d, const gp_task *t, const char **what) {
        char path[PATH_MAX], tail[8192];
        int64_t run = gp_runlog_last_run(t); /* the run that just ended */
        int fd = run > 0 && gp_runlog_path(d, t->id, run, 0, path, sizeof(path)) == 0 ? open(path, O_RDONLY | O_CLOEXEC)
                                                                                       : -1;
        if (fd < 0)
                return false;
        struct stat st;
        ssize_t n = fstat(fd, &st) == 0 ? pread(fd, tail, sizeof(tail),
                                                 st.st_size > (off_t)sizeof(tail) ? st.st_size - (off_t)sizeof(tail) : 0)
                                        : -1;
        close(fd);
        return n > 0 && gp_wd_oom_in_output(tail, (size_t)n, what);
}
