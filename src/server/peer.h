/* peer.h - local callers known from the kernel, not from a claim.
 *
 * A local user is named by the kernel: on the server's Unix socket
 * (server.socket) by the connection's peer credentials (SO_PEERCRED), and
 * on TCP loopback, when the daemon runs as root, by the owner of the
 * client's socket in the kernel's socket table (sock_diag, one exact
 * lookup as ss -e does; /proc/net/tcp where that is missing).  Such a caller is a user: a name, uid and gid, an
 * admin when uid 0 or a member of auth.admin_group; its tasks record it
 * and run as it (exec.h), and it sees and cancels its own tasks only
 * unless it is an admin.
 *
 * The socket is served by an MHD daemon of its own (an internal polling
 * thread) with the same routes as server.listen, but the gateway's /v1.
 * Its path: server.socket, or by default /run/gpupool/PORT.sock when the
 * daemon is root, else /tmp/gpupool-UID/PORT.sock (PORT of server.listen:
 * several servers on one machine each have one).  The file is mode 0666:
 * the identity comes from the kernel, not from who may connect.
 */
#ifndef GP_SERVER_PEER_H
#define GP_SERVER_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <microhttpd.h>

#include "base/user.h"
#include "config/config.h"

typedef struct gp_peer {
        uid_t uid;
        gid_t gid;
        char name[GP_USER_NAME_MAX];
        bool admin;                   /* uid 0, or in auth.admin_group */
} gp_peer;

typedef struct gp_peer_srv gp_peer_srv;

/* The socket path of a config into path (size >= 108): "" when
 * server.socket is "off".  0, or -ENAMETOOLONG. */
int gp_peer_socket_path(const gp_config *cfg, char *path, size_t size);

/* Bind the socket (its directory made 0755 when missing; a stale socket
 * file replaced) and serve it with handler/completed (cls = their
 * closure) on a daemon of its own.  *ret = NULL when the socket is off.
 * 0, or -errno with a message in err.  Not thread-safe: start-up. */
int gp_peer_serve(const gp_config *cfg, MHD_AccessHandlerCallback handler, MHD_RequestCompletedCallback completed,
                  void *cls, gp_peer_srv **ret, char *err, size_t errlen);

/* Accept no new connection (the open ones are served); the socket file
 * goes.  Takes NULL. */
void gp_peer_quiesce(gp_peer_srv *s);

/* Stop serving, remove the socket file, free.  Takes NULL. */
void gp_peer_stop(gp_peer_srv *s);

/* Does conn come through the Unix socket? */
bool gp_peer_conn_is_unix(struct MHD_Connection *conn);

/* The socket's path ("" for NULL). */
const char *gp_peer_path(const gp_peer_srv *s);

/* Who is at the other end of conn: the Unix socket's peer credentials,
 * or the owner of a TCP loopback client's socket.  admin_group: the
 * auth.admin_group ("" = none).  0; -ENOENT when the kernel does not say
 * (or the uid has no passwd entry); -errno.  Any thread. */
int gp_peer_of_conn(struct MHD_Connection *conn, const char *admin_group, gp_peer *ret);

/* The same for a uid (a follower forwarded its client's, forward.h). */
int gp_peer_of_uid(uid_t uid, const char *admin_group, gp_peer *ret);

/* The user a task of user name runs as, for exec's run_as: NULL when name
 * is the daemon's own user (no switch), else name.  Any thread. */
const char *gp_peer_run_as(const char *name);

/* The daemon's own user name into buf ("" when it has no passwd entry). */
void gp_peer_self_name(char *buf, size_t size);

/* Parse one line of /proc/net/tcp: its local and remote address and port
 * (IPv4, network byte order as in struct sockaddr_in) and uid.  0;
 * -ESRCH when no process holds the socket any more (inode 0: the kernel
 * then prints uid 0, which must not name root; addresses are written);
 * -EINVAL.  Pure (tested by test-peer). */
int gp_peer_tcp_line(const char *line, uint32_t *laddr, uint16_t *lport, uint32_t *raddr, uint16_t *rport,
                     uid_t *uid);

#endif
