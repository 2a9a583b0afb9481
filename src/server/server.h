/* server.h - `gpupool server`: the scheduler daemon on this machine. */
#ifndef GP_SERVER_SERVER_H
#define GP_SERVER_SERVER_H

/* Parse the server's options (argv[0] = "server"), load the config, recover
 * the stored state, serve until SIGINT/SIGTERM.  Returns the process exit
 * code: 0 after a clean stop, 1 when it cannot start (message on stderr),
 * 2 for a usage error. */
int gp_server_main(int argc, char **argv);

#endif
