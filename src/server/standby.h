/* standby.h - the answers of a server that does not lead (standby.c). */
#ifndef GP_SERVER_STANDBY_H
#define GP_SERVER_STANDBY_H

#define GP_STANDBY_MAX_FDS 16

typedef struct gp_standby gp_standby;

/* Serve the standby answers on dups of the n listening sockets fds (the
 * caller keeps its own).  0, -ENOMEM or -errno. */
int gp_standby_start(const char *server_id, const int *fds, int n, gp_standby **ret);
/* The leader the 503 answers name ("" = not known).  Any thread. */
void gp_standby_set_leader(gp_standby *sb, const char *leader);
/* Stop serving (open connections are closed); takes NULL. */
void gp_standby_stop(gp_standby *sb);

#endif
