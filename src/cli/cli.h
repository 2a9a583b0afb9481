/* cli.h - the command-line client of gpupool (submit, run, ps, status,
 * cancel, logs, gpus, queue, nodes, version, help).
 *
 * The client talks to a gpupool server over its HTTP API (docs/api.md) -
 * plain HTTP/1.1 of its own, libcurl (loaded with dlopen) only for
 * https:// - and prints tables, a status block or the server's JSON.  It
 * keeps no state between runs.  Commands and exit codes: docs/cli.md.
 */
#ifndef GP_CLI_CLI_H
#define GP_CLI_CLI_H

/* Exit codes of every client command. */
enum {
        GP_CLI_EXIT_OK = 0,          /* done */
        GP_CLI_EXIT_REFUSED = 1,     /* the server said no (its message is printed) */
        GP_CLI_EXIT_USAGE = 2,       /* bad command line (a usage line is printed) */
        GP_CLI_EXIT_UNREACHABLE = 3, /* the server could not be reached */
};

/* Run one client command.  argv[0] is the program name, argv[1] the command
 * (or client options before it: --api, --key, --json); argv[argc] must be
 * NULL as for main().  Reads GPUPOOL_API and GPUPOOL_API_KEY from the
 * environment, writes results to stdout and messages to stderr, and returns
 * the process exit code (GP_CLI_EXIT_*, or for `run` the local command's
 * exit code).  `run` installs signal handlers for its duration and restores
 * them.  Not thread-safe: call from the main thread, once at a time. */
int gp_cli_main(int argc, char **argv);

#endif
