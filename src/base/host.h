/* host.h - what a machine has: online CPUs, memory and the free space of
 * a filesystem, for `gpupool nodes` (an agent reports its own; the server
 * its own as node "local"). */
#ifndef GP_BASE_HOST_H
#define GP_BASE_HOST_H

#include <stddef.h>
#include <stdint.h>

typedef struct gp_host_info {
        int cpus;                    /* online CPUs, >= 1 */
        int64_t mem_total_mb;        /* -1 unknown */
        int64_t mem_avail_mb;        /* MemAvailable of /proc/meminfo, -1 unknown */
        int64_t disk_total_mb;       /* of the filesystem that holds dir, -1 unknown */
        int64_t disk_free_mb;        /* what an unprivileged user may still write there */
        int cgroup;                  /* the cgroup version its runs get (0 none, 1, 2: exec/cgroup.h); set by
                                        the caller, gp_host_read leaves it alone */
} gp_host_info;

/* The parent of process pid (/proc/PID/stat), 0 when it is gone. */
int gp_host_parent(int pid);
/* Which of roots[0..n) pid is, or descends from (up to 64 generations):
 * its index, or -1.  A supervisor is a child subreaper, so what its task
 * starts stays below it even when orphaned. */
int gp_host_descends(int pid, const int64_t *roots, size_t n);

/* Read this machine's; dir names the filesystem (the data dir).  Readings
 * that fail are -1; never fails as a whole. */
void gp_host_read(const char *dir, gp_host_info *ret);

#endif
