/* file.c - atomic whole-file writes (file.h). */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

int gp_file_write_atomic(const char *dir, const char *path, const void *data, size_t len, mode_t mode) {
        char tmp[PATH_MAX + 16];
        if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
                return -ENAMETOOLONG;
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        if (fd < 0)
                return -errno;
        const char *p = data;
        size_t off = 0;
        int rc = 0;
        while (off < len) {
                ssize_t w = write(fd, p + off, len - off);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0) {
                        rc = -errno;
                        break;
                }
                off += (size_t)w;
        }
        if (rc == 0 && fsync(fd) < 0)
                rc = -errno;
        close(fd);
        if (rc == 0 && rename(tmp, path) < 0)
                rc = -errno;
        if (rc < 0) {
                unlink(tmp);
                return rc;
        }
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
        }
        return 0;
}
