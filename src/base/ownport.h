/* ownport.h - the local ports of this process's own TCP connections to its
 * loopback, so that a listener on 127.0.0.1 can tell them from another
 * local process's.
 *
 * A TCP peer on loopback has no credentials (SO_PEERCRED is for Unix
 * sockets), but its port does: a client of this process binds its socket
 * to 127.0.0.1:0 before it connects and notes the port (gp_ownport_bind),
 * and forgets it when it closes the socket (gp_ownport_forget).  While the
 * socket is open no other process can have that local port (nothing here
 * sets SO_REUSEPORT), so a connection accepted from 127.0.0.1:PORT with
 * PORT noted is this process's own (gp_ownport_is_own).  Thread-safe (one
 * bit per port, atomic); no allocation. */
#ifndef GP_BASE_OWNPORT_H
#define GP_BASE_OWNPORT_H

#include <stdbool.h>
#include <sys/socket.h>

/* For a socket about to connect to dest: when dest is IPv4 loopback
 * (127.0.0.0/8), bind fd to 127.0.0.1:0 and note its port; returns the
 * port (give it to gp_ownport_forget when fd is closed), 0 when dest is
 * not loopback (nothing done), -errno when the bind failed (fd unusable
 * for this: close it). */
int gp_ownport_bind(int fd, const struct sockaddr *dest);

/* The port gp_ownport_bind noted is free again (0: nothing to do).  Call
 * it before closing the socket's last descriptor. */
void gp_ownport_forget(int port);

/* The same for a socket known by its descriptor alone (a library's close
 * callback): its local port when gp_ownport_bind bound it (127.0.0.1),
 * nothing for another.  Call it before closing fd. */
void gp_ownport_forget_fd(int fd);

/* Is peer (an accepted connection's) 127.0.0.0/8:PORT with PORT noted? */
bool gp_ownport_is_own(const struct sockaddr *peer);

#endif
