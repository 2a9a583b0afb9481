/* check.h - `gpupool config check FILE`: load a server config as the
 * server would, and say what is wrong (FILE:LINE) or what it sets. */
#ifndef GP_CONFIG_CHECK_H
#define GP_CONFIG_CHECK_H

#include <stdio.h>

/* Load path with gp_config_load.  Bad: "FILE:LINE: KEY: why" on err,
 * returns 1.  Good: a summary on out (listen address, store, data dir,
 * GPUs, keys, tenants, join tokens), returns 0.  Not thread-safe (it
 * writes to the streams); allocates only while it runs. */
int gp_config_check(const char *path, FILE *out, FILE *err);

#endif
