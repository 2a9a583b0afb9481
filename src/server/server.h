/* server.h - `gpupool server`: the scheduler daemon on this machine. */
#ifndef GP_SERVER_SERVER_H
#define GP_SERVER_SERVER_H

/* Parse the server's options (argv[0] = "server"), load the config, recover
 * the stored state, serve until SIGINT/SIGTERM.  Returns the process exit
 * code: 0 after a clean stop, 1 when it cannot start (message on stderr),
 * 2 for a usage error, GP_SERVER_EXIT_CONFLICT when another live server
 * holds the store in a way this one cannot join (a single server beside a
 * cluster, either way round, or a second process with a live server's
 * cluster.server_id): the configuration must change, a restart alone
 * will not help (systemd: RestartPreventExitStatus=78). */
#define GP_SERVER_EXIT_CONFLICT 78
int gp_server_main(int argc, char **argv);

#endif
