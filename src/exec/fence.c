/* fence.c - the fence file (see fence.h).  The file holds one decimal
 * number and a newline, at most 31 bytes. */
#include "exec/fence.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

#define FENCE_MAX_BYTES 31

int gp_fence_write(const char *path, int64_t deadline_mono_ms) {
        char tmp[PATH_MAX], text[FENCE_MAX_BYTES + 1];
        if (!path || !path[0] || deadline_mono_ms < 0)
                return -EINVAL;
        if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
                return -ENAMETOOLONG;
        int n = snprintf(text, sizeof(text), "%lld\n", (long long)deadline_mono_ms);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        ssize_t w = write(fd, text, (size_t)n);
        int rc = w == n ? 0 : (w < 0 ? -errno : -EIO);
        if (close(fd) < 0 && rc == 0)
                rc = -errno;
        if (rc == 0 && rename(tmp, path) < 0)
                rc = -errno;
        if (rc < 0)
                unlink(tmp);
        return rc;
}

int gp_fence_read(const char *path, int64_t *ret_deadline_mono_ms) {
        char text[FENCE_MAX_BYTES + 2];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = read(fd, text, sizeof(text) - 1);
        int err = errno;
        close(fd);
        if (n < 0)
                return -err;
        if (n == 0 || n > FENCE_MAX_BYTES || text[n - 1] != '\n')
                return -EINVAL;
        text[n - 1] = '\0';
        int64_t v;
        if (gp_parse_i64(text, 0, INT64_MAX, &v) < 0)
                return -EINVAL;
        *ret_deadline_mono_ms = v;
        return 0;
}
