/* main.c - `gpupool`, the program users run: every client command, and
 * the hidden `gpupool __supervise DIR` that each batch task's supervisor
 * runs.  Both need only libc and libjansson, and this executable links
 * nothing else, so a command (and each task's supervisor) starts in about
 * the time of a program that links libc alone.
 *
 * The server-side roles (`gpupool server`, `gpupool simulate`, `gpupool agent`) need the
 * heavy libraries (libmicrohttpd, SQLite, libpq, libyaml, libcurl): they
 * are a second executable, gpupool-server (src/main-server.c), installed
 * next to this one, which these two words exec() with the same argv - the
 * same process, so its pid, signals and exit code are the daemon's.  See
 * base/exe.h and docs/internals/cli.md. */
#include "base/exe.h"
#include "cli/cli.h"
#include "exec/exec.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int exec_server(char **argv) {
        char path[PATH_MAX];
        int rc = gp_exe_sibling(GP_EXE_SERVER, path, sizeof(path));
        if (rc == 0) {
                execv(path, argv);
                rc = -errno;
        }
        fprintf(stderr, "gpupool %s: cannot run %s (it is installed next to gpupool): %s\n", argv[1],
                rc == -ENOENT || rc == -EACCES ? GP_EXE_SERVER : path, strerror(-rc));
        return 1;
}

int main(int argc, char **argv) {
        if (argc >= 2 && (!strcmp(argv[1], "server") || !strcmp(argv[1], "simulate") || !strcmp(argv[1], "agent")))
                return exec_server(argv);
        if (argc == 3 && !strcmp(argv[1], "__supervise"))
                return gp_exec_supervise_main(argv[2]);
        return gp_cli_main(argc, argv);
}
