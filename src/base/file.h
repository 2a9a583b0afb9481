/* file.h - writing a whole file so that a crash leaves either the old
 * content or the new, never a mix. */
#ifndef GP_BASE_FILE_H
#define GP_BASE_FILE_H

#include <stddef.h>
#include <sys/types.h>

/* Write data[0..len) to path atomically: PATH.tmp with `mode`, fsync,
 * rename over path, fsync the directory dir (where path lives).  0, or
 * -errno (-ENAMETOOLONG for a path too long) with path untouched and the
 * temporary file removed.  Thread-safe for distinct paths. */
int gp_file_write_atomic(const char *dir, const char *path, const void *data, size_t len, mode_t mode);

#endif
