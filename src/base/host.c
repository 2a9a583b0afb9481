/* host.c - this machine's CPUs, memory and disk (host.h). */
#include "base/host.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <unistd.h>

static int64_t meminfo_mb(const char *key) {
        FILE *f = fopen("/proc/meminfo", "re");
        char line[256];
        long long kb = -1;
        size_t n = strlen(key);
        while (f && kb < 0 && fgets(line, sizeof(line), f))
                if (!strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%lld", &kb) != 1)
                        kb = -1;
        if (f)
                fclose(f);
        return kb < 0 ? -1 : kb / 1024;
}

int gp_host_parent(int pid) {
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        ssize_t got = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (got <= 0)
                return 0;
        buf[got] = '\0';
        const char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
        char st;
        int ppid;
        return p && sscanf(p + 1, " %c %d", &st, &ppid) == 2 && ppid > 0 ? ppid : 0;
}

int gp_host_descends(int pid, const int64_t *roots, size_t n) {
        for (int hops = 0; pid > 1 && hops < 64; hops++) {
                for (size_t i = 0; i < n; i++)
                        if (roots[i] == pid)
                                return (int)i;
                pid = gp_host_parent(pid);
        }
        return -1;
}

void gp_host_read(const char *dir, gp_host_info *h) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        h->cpus = cpus >= 1 && cpus <= 65536 ? (int)cpus : 1;
        struct sysinfo si;
        h->mem_total_mb = sysinfo(&si) == 0 ? (int64_t)((uint64_t)si.totalram * si.mem_unit >> 20) : -1;
        h->mem_avail_mb = meminfo_mb("MemAvailable");
        struct statvfs vs;
        if (dir && statvfs(dir, &vs) == 0) {
                h->disk_total_mb = (int64_t)((uint64_t)vs.f_blocks * vs.f_frsize >> 20);
                h->disk_free_mb = (int64_t)((uint64_t)vs.f_bavail * vs.f_frsize >> 20);
        } else {
                h->disk_total_mb = h->disk_free_mb = -1;
        }
}
