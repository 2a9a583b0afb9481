/* disk.c - the daemon on a full disk: free-space watch, degraded mode, the
 * reserve file.  See disk.h for the contract and the threads.
 *
 * Invariants:
 *   - degraded is only changed by the loop thread (or gp_disk_open before
 *     the threads start); other threads read it with __atomic loads;
 *   - the reserve is held (a file of store.disk_reserve_mb allocated
 *     blocks) only while not degraded, or when nothing could be released;
 *     it is given back the moment the daemon becomes degraded, so the
 *     writes that shrink the work (cancels, releases, task ends) find room;
 *   - leaving degraded mode needs room for the reserve plus twice the low
 *     mark, so releasing the reserve never makes the daemon leave at once.
 */
#include "server/disk.h"

#include "server/server-int.h"

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define RESERVE_NAME "gpupool.reserve"
#define CHECK_EVERY_MS 1000 /* while degraded */

struct gp_disk {
        char dir[PATH_MAX];           /* the directory watched (the database's) */
        char reserve[PATH_MAX];       /* dir/gpupool.reserve */
        char msg_dir[PATH_MAX + 96];  /* "the disk holding the data directory DIR is full" */
        char msg_server[96];          /* PostgreSQL: the server's disk */
        const char *msg;              /* one of the two, atomic pointer */
        bool pg;                      /* the store is PostgreSQL */
        int degraded;                 /* atomic */
        bool held;                    /* the reserve file is allocated */
        int64_t reserve_bytes;        /* store.disk_reserve_mb */
        int64_t low_bytes;            /* store.disk_min_free_mb */
        int64_t next_check_ms;        /* mono ms; degraded only */
};

static struct gp_disk *D(gp_daemon *d) {
        return d->disk;
}

/* Free bytes for an unprivileged writer in the watched directory, or -1. */
static int64_t free_bytes(const struct gp_disk *k) {
        struct statvfs v;
        if (statvfs(k->dir, &v) < 0)
                return -1;
        return (int64_t)v.f_bavail * (int64_t)v.f_frsize;
}

static int make_reserve(struct gp_disk *k) {
        if (k->reserve_bytes == 0)
                return 0;
        int fd = open(k->reserve, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        int e = ftruncate(fd, k->reserve_bytes) < 0 ? errno : 0; /* a larger one from an older config shrinks */
        if (!e)
                e = posix_fallocate(fd, 0, k->reserve_bytes);
        close(fd);
        if (e) {
                unlink(k->reserve); /* a half reserve only hides space */
                return -e;
        }
        k->held = true;
        return 0;
}

static void release_reserve(struct gp_disk *k) {
        if (unlink(k->reserve) < 0 && errno != ENOENT)
                gp_warn("cannot remove the disk reserve %s: %s", k->reserve, strerror(errno));
        k->held = false;
}

static void enter(struct gp_disk *k, const char *msg, const char *why) {
        bool had = k->held;
        release_reserve(k);
        __atomic_store_n(&k->msg, msg, __ATOMIC_RELEASE);
        __atomic_store_n(&k->degraded, 1, __ATOMIC_RELEASE);
        k->next_check_ms = gp_mono_ms() + CHECK_EVERY_MS;
        gp_warn("store degraded: %s (%s); new work is refused with 507 until space is freed, reads, cancels, "
                "releases and task ends go on%s",
                msg, why, had ? "; the disk reserve was given back for them" : "");
}

int gp_disk_open(gp_daemon *d, char *err, size_t errlen) {
        struct gp_disk *k = calloc(1, sizeof(*k));
        if (!k) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        d->disk = k;
        k->reserve_bytes = (int64_t)d->cfg.store_disk_reserve_mb << 20;
        k->low_bytes = (int64_t)d->cfg.store_disk_min_free_mb << 20;
        const char *url = d->cfg.store_url;
        bool in_data_dir = true;
        if (!strncmp(url, "sqlite://", 9)) {
                const char *path = url + 9, *slash = strrchr(path, '/');
                if (!slash)
                        gp_strlcpy(k->dir, ".", sizeof(k->dir));
                else if (slash == path)
                        gp_strlcpy(k->dir, "/", sizeof(k->dir));
                else if ((size_t)(slash - path) < sizeof(k->dir))
                        snprintf(k->dir, sizeof(k->dir), "%.*s", (int)(slash - path), path);
                struct stat a, b;
                in_data_dir = stat(k->dir, &a) == 0 && stat(d->cfg.data_dir, &b) == 0 && a.st_dev == b.st_dev &&
                              a.st_ino == b.st_ino;
        } else {
                k->pg = true;
        }
        if (!k->dir[0] || in_data_dir)
                gp_strlcpy(k->dir, d->cfg.data_dir, sizeof(k->dir));
        if (snprintf(k->reserve, sizeof(k->reserve), "%s/" RESERVE_NAME, k->dir) >= (int)sizeof(k->reserve)) {
                snprintf(err, errlen, "data dir path too long");
                return -ENAMETOOLONG;
        }
        snprintf(k->msg_dir, sizeof(k->msg_dir), "the disk holding the %s directory %s is full",
                 in_data_dir ? "data" : "database", k->dir);
        snprintf(k->msg_server, sizeof(k->msg_server), "the PostgreSQL server's disk is full");
        k->msg = k->msg_dir;
        struct stat st;
        k->held = stat(k->reserve, &st) == 0 && S_ISREG(st.st_mode);
        if (k->held && (k->reserve_bytes == 0 || st.st_size != k->reserve_bytes ||
                        (int64_t)st.st_blocks * 512 < k->reserve_bytes))
                release_reserve(k); /* none wanted, or not the size configured: made again below */
        int64_t avail = free_bytes(k);
        if (avail >= 0 && avail < k->low_bytes) {
                char why[64];
                snprintf(why, sizeof(why), "%" PRId64 " bytes free at start", avail);
                enter(k, k->msg_dir, why);
                return 0;
        }
        if (!k->held && k->reserve_bytes > 0) {
                int rc = make_reserve(k);
                if (rc < 0)
                        gp_warn("no disk reserve (%s: %s): on a full disk cancels may not be storable", k->reserve,
                                gp_strerror(rc));
        }
        return 0;
}

void gp_disk_close(gp_daemon *d) {
        free(d->disk);
        d->disk = NULL;
}

bool gp_disk_check(gp_daemon *d) {
        struct gp_disk *k = D(d);
        if (!k)
                return false;
        bool degraded = __atomic_load_n(&k->degraded, __ATOMIC_ACQUIRE);
        int64_t now = gp_mono_ms();
        if (degraded && now < k->next_check_ms)
                return true;
        int64_t avail = free_bytes(k);
        if (avail < 0)
                return degraded; /* cannot tell: no change */
        if (!degraded) {
                if (avail < k->low_bytes) {
                        char why[64];
                        snprintf(why, sizeof(why), "%" PRId64 " bytes free", avail);
                        enter(k, k->msg_dir, why);
                        return true;
                }
                return false;
        }
        k->next_check_ms = now + CHECK_EVERY_MS;
        if (avail < 2 * k->low_bytes + (k->held ? 0 : k->reserve_bytes))
                return true;
        if (!k->held && make_reserve(k) < 0)
                return true; /* taken again meanwhile: next time */
        __atomic_store_n(&k->degraded, 0, __ATOMIC_RELEASE);
        gp_info("store no longer degraded: %" PRId64 " bytes free in %s, the disk reserve is back; accepting new work",
                free_bytes(k), k->dir);
        return false;
}

void gp_disk_store_full(gp_daemon *d, const char *detail) {
        struct gp_disk *k = D(d);
        if (!k)
                return;
        if (!__atomic_load_n(&k->degraded, __ATOMIC_ACQUIRE)) {
                enter(k, k->pg ? k->msg_server : k->msg_dir, detail);
                return;
        }
        k->next_check_ms = gp_mono_ms() + CHECK_EVERY_MS;
        if (k->held)
                release_reserve(k);
}

bool gp_disk_degraded(gp_daemon *d) {
        return d->disk && __atomic_load_n(&d->disk->degraded, __ATOMIC_ACQUIRE);
}

const char *gp_disk_message(gp_daemon *d) {
        return d->disk ? __atomic_load_n(&d->disk->msg, __ATOMIC_ACQUIRE) : "";
}

char *gp_disk_error_body(gp_daemon *d) {
        return gp_http_error_body("insufficient_storage",
                                  "%s: new work cannot be stored, try again later (reads, cancels and releases "
                                  "still work)",
                                  gp_disk_message(d));
}

int gp_disk_prometheus(gp_daemon *d, gp_buf *b) {
        return gp_buf_printf(b,
                             "# HELP gpupool_store_degraded 1 while the store's disk is full: new work is refused "
                             "with 507.\n# TYPE gpupool_store_degraded gauge\ngpupool_store_degraded %d\n",
                             gp_disk_degraded(d) ? 1 : 0);
}
