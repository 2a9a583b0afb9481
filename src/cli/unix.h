/* unix.h - the client's side of local users (unix.c): the local server's
 * Unix socket, and the directory and environment a submit sends. */
#ifndef GP_CLI_UNIX_H
#define GP_CLI_UNIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cli/cli-int.h"

/* Is host (n bytes, not NUL-terminated) a loopback name or address? */
bool gp_cli_host_loopback(const char *host, size_t n);

/* A connected, non-blocking socket to the local server for host:port
 * ($GPUPOOL_SOCKET, else the default paths for a loopback host), whose
 * server runs as root or as this user; or -errno (use TCP). */
int gp_cli_unix_dial(const char *host, size_t host_len, const char *port);

/* submit: add workdir (the current directory, unless --workdir) and env
 * (per --export; --env entries win) to c->body when the server is local
 * (a loopback URL) or --export was given.  0, -EINVAL (message written to
 * err), -ENOMEM. */
int gp_cli_add_origin(gp_cli_cmd *c, FILE *err);

/* This process's user name (getuid).  0 or -ENOENT. */
int gp_cli_self_name(char *buf, size_t size);

#endif
