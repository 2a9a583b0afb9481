/* exe.h - gpupool's two executables, and finding one from the other.
 *
 * `gpupool` (src/main.c) is what users run: the client, and the batch
 * supervisor `gpupool __supervise DIR`.  It links libc, libjansson and
 * nothing else, so it starts fast.  `gpupool-server` (src/main-server.c)
 * holds the server-side roles and their libraries (libmicrohttpd, SQLite,
 * libpq, libyaml, libcurl); `gpupool server|simulate` exec()s it.  Both
 * are installed in one directory, and each finds the other there. */
#ifndef GP_BASE_EXE_H
#define GP_BASE_EXE_H

#include <stddef.h>

#define GP_EXE_CLIENT "gpupool"
#define GP_EXE_SERVER "gpupool-server"

/* Write to buf the path of the executable `name` in the directory of the
 * running program's own executable (/proc/self/exe).  0; -ENAMETOOLONG
 * when it does not fit in size; -ENOENT / -EACCES (from access(X_OK)) when
 * that file is not there or not executable; another -errno from readlink.
 * buf is written only on success.  Thread-safe. */
int gp_exe_sibling(const char *name, char *buf, size_t size);

#endif
