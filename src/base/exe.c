/* exe.c - the path of gpupool's other executable (see exe.h). */
#include "base/exe.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int gp_exe_sibling(const char *name, char *buf, size_t size) {
        char self[PATH_MAX], path[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n < 0)
                return -errno;
        if (n == 0 || (size_t)n >= sizeof(self) - 1)
                return -ENAMETOOLONG;
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (!slash)
                return -ENOENT;
        *slash = '\0';
        int k = snprintf(path, sizeof(path), "%s/%s", self, name);
        if (k < 0 || (size_t)k >= sizeof(path) || (size_t)k >= size)
                return -ENAMETOOLONG;
        if (access(path, X_OK) < 0)
                return -errno;
        memcpy(buf, path, (size_t)k + 1);
        return 0;
}
