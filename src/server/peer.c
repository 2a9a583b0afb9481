/* peer.c - local callers known from the kernel (peer.h): the Unix
 * socket's listener and daemon, SO_PEERCRED, and the owner of a TCP
 * loopback client's socket.
 *
 * Invariants: the socket file is ours (made here, removed at stop); a
 * stale one is replaced only when it is a socket nobody answers on; an
 * identity is only what the kernel reports, never a header or a body.
 */
#include "server/peer.h"

#include "base/util.h"

#include <errno.h>
#include <dirent.h>
#include <grp.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct gp_peer_srv {
        struct MHD_Daemon *mhd;
        char path[108];
        bool dflt;                  /* in a default directory: removed when empty */
};

static int listen_port(const char *listen) {
        const char *c = listen ? strrchr(listen, ':') : NULL;
        int64_t p;
        return c && gp_parse_i64(c + 1, 1, 65535, &p) == 0 ? (int)p : 0;
}

int gp_peer_socket_path(const gp_config *cfg, char *path, size_t size) {
        const char *s = cfg->server_socket;
        int n;
        if (!strcmp(s, "off"))
                n = snprintf(path, size, "%s", "");
        else if (s[0])
                n = snprintf(path, size, "%s", s);
        else if (geteuid() == 0)
                n = snprintf(path, size, "/run/gpupool/%d.sock", listen_port(cfg->listen));
        else
                n = snprintf(path, size, "/tmp/gpupool-%u/%d.sock", (unsigned)geteuid(), listen_port(cfg->listen));
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* The default socket's directory: made 0755 when missing; an existing one
 * must be ours (in /tmp another user could have made it first). */
static int make_dir(const char *path, char *err, size_t errlen) {
        char dir[108];
        gp_strlcpy(dir, path, sizeof(dir));
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
                return 0;
        *slash = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                int e = errno;
                snprintf(err, errlen, "server.socket: cannot create %s: %s", dir, strerror(e));
                return -e;
        }
        struct stat st;
        if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
                snprintf(err, errlen, "server.socket: %s is not a directory of this daemon's user (uid %u)", dir,
                         (unsigned)geteuid());
                return -EACCES;
        }
        return 0;
}

/* A socket file left by a server that is gone: nobody accepts on it. */
static bool stale(const struct sockaddr_un *sa) {
        struct stat st;
        if (lstat(sa->sun_path, &st) < 0 || !S_ISSOCK(st.st_mode))
                return false;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return false;
        int rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
        int e = errno;
        close(fd);
        return rc < 0 && e == ECONNREFUSED;
}

/* The default directory holds one socket per port: those of servers that
 * died (kill -9 leaves its file) go, so the directory does not fill up. */
static void sweep(const char *path) {
        char dir[108];
        gp_strlcpy(dir, path, sizeof(dir));
        char *slash = strrchr(dir, '/');
        if (!slash)
                return;
        *slash = '\0';
        DIR *dp = opendir(dir);
        if (!dp)
                return;
        struct dirent *e;
        int seen = 0;
        // cppcheck-suppress readdirCalled ; one thread (start-up) reads this directory stream
        while ((e = readdir(dp)) && seen++ < 4096) {
                size_t n = strlen(e->d_name);
                struct sockaddr_un sa;
                memset(&sa, 0, sizeof(sa));
                sa.sun_family = AF_UNIX;
                if (n < 6 || strcmp(e->d_name + n - 5, ".sock") != 0 ||
                    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, e->d_name) >= (int)sizeof(sa.sun_path))
                        continue;
                struct stat st;
                if (lstat(sa.sun_path, &st) == 0 && st.st_uid == geteuid() && stale(&sa))
                        unlink(sa.sun_path);
        }
        closedir(dp);
}

int gp_peer_serve(const gp_config *cfg, MHD_AccessHandlerCallback handler, MHD_RequestCompletedCallback completed,
                  void *cls, gp_peer_srv **ret, char *err, size_t errlen) {
        *ret = NULL;
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        if (gp_peer_socket_path(cfg, sa.sun_path, sizeof(sa.sun_path)) < 0) {
                snprintf(err, errlen, "server.socket: the path is longer than %zu bytes", sizeof(sa.sun_path) - 1);
                return -ENAMETOOLONG;
        }
        if (!sa.sun_path[0])
                return 0;
        if (sa.sun_path[0] != '/') {
                snprintf(err, errlen, "server.socket: %s is not an absolute path (or \"off\")", sa.sun_path);
                return -EINVAL;
        }
        bool dflt = !cfg->server_socket[0];
        int rc = dflt ? make_dir(sa.sun_path, err, errlen) : 0;
        if (rc < 0)
                return rc;
        if (dflt)
                sweep(sa.sun_path);
        /* bound and listening under a name of its own first, then renamed into place:
         * another server's sweep never sees it bound but not yet listening */
        struct sockaddr_un tmp = sa;
        if (snprintf(tmp.sun_path, sizeof(tmp.sun_path), "%s.%d", sa.sun_path, (int)getpid()) >=
            (int)sizeof(tmp.sun_path)) {
                snprintf(err, errlen, "server.socket: the path is longer than %zu bytes", sizeof(sa.sun_path) - 8);
                return -ENAMETOOLONG;
        }
        unlink(tmp.sun_path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        /* another server that stops may remove the empty directory just now: once more */
        bool bound = fd >= 0 && (bind(fd, (const struct sockaddr *)&tmp, sizeof(tmp)) == 0 ||
                                 (errno == ENOENT && dflt && make_dir(sa.sun_path, err, errlen) == 0 &&
                                  bind(fd, (const struct sockaddr *)&tmp, sizeof(tmp)) == 0));
        if (!bound || chmod(tmp.sun_path, 0666) < 0 || listen(fd, 128) < 0 ||
            (!dflt && stale(&sa) && unlink(sa.sun_path) < 0 && errno != ENOENT) ||
            (access(sa.sun_path, F_OK) == 0 && (errno = EADDRINUSE)) || rename(tmp.sun_path, sa.sun_path) < 0) {
                int e = errno;
                snprintf(err, errlen, "server.socket: cannot listen on %s: %s", sa.sun_path,
                         e == EADDRINUSE ? "in use (another server?)" : strerror(e));
                if (fd >= 0)
                        close(fd);
                unlink(tmp.sun_path);
                return -e;
        }
        gp_peer_srv *s = calloc(1, sizeof(*s));
        if (!s) {
                close(fd);
                unlink(sa.sun_path);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        gp_strlcpy(s->path, sa.sun_path, sizeof(s->path));
        s->dflt = dflt;
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                         MHD_USE_ERROR_LOG;
        s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, handler, cls, MHD_OPTION_LISTEN_SOCKET, fd,
                                  MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                                  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_s,
                                  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16 * 1024,
                                  MHD_OPTION_NOTIFY_COMPLETED, completed, cls, MHD_OPTION_END);
        if (!s->mhd) {
                close(fd);
                unlink(s->path);
                free(s);
                snprintf(err, errlen, "server.socket: cannot start its HTTP daemon");
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

/* The socket file goes, and a default directory left empty with it. */
static void unlink_socket(const gp_peer_srv *s) {
        if (unlink(s->path) < 0 || !s->dflt)
                return;
        char dir[108];
        gp_strlcpy(dir, s->path, sizeof(dir));
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = '\0';
                rmdir(dir); /* fails while another server's socket is there: that is fine */
        }
}

void gp_peer_quiesce(gp_peer_srv *s) {
        if (!s)
                return;
        MHD_socket fd = MHD_quiesce_daemon(s->mhd);
        if (fd != MHD_INVALID_SOCKET)
                close(fd);
        unlink_socket(s);
}

void gp_peer_stop(gp_peer_srv *s) {
        if (!s)
                return;
        MHD_stop_daemon(s->mhd);   /* closes the listening socket */
        unlink_socket(s);
        free(s);
}

const char *gp_peer_path(const gp_peer_srv *s) {
        return s ? s->path : "";
}

static int conn_fd(struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        return ci ? ci->connect_fd : -1;
}

bool gp_peer_conn_is_unix(struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        return ci && ci->client_addr && ci->client_addr->sa_family == AF_UNIX;
}

static unsigned hexval(const char **p, int maxdigits, bool *ok) {
        unsigned v = 0;
        int n = 0;
        for (; n < maxdigits; n++, (*p)++) {
                char c = **p;
                int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
                if (d < 0)
                        break;
                v = v * 16 + (unsigned)d;
        }
        if (n == 0)
                *ok = false;
        return v;
}

/* "0100007F:1F90" -> address (as the kernel prints it: the in-memory
 * value of s_addr) and port (host order). */
static const char *addr_port(const char *p, uint32_t *addr, uint16_t *port, bool *ok) {
        while (*p == ' ')
                p++;
        *addr = hexval(&p, 8, ok);
        if (*p != ':')
                *ok = false;
        else
                p++;
        *port = (uint16_t)hexval(&p, 4, ok);
        if (*p != ' ')
                *ok = false;
        return p;
}

int gp_peer_tcp_line(const char *line, uint32_t *laddr, uint16_t *lport, uint32_t *raddr, uint16_t *rport,
                     uid_t *uid) {
        /* "  sl  local_address rem_address   st tx_queue:rx_queue tr:tm->when retrnsmt   uid ..." */
        const char *p = strchr(line, ':');
        if (!p)
                return -EINVAL;
        bool ok = true;
        uint16_t lp, rp;
        uint32_t la, ra;
        p = addr_port(p + 1, &la, &lp, &ok);
        p = addr_port(p, &ra, &rp, &ok);
        if (!ok)
                return -EINVAL;
        /* st, tx:rx, tr:when, retrnsmt, then uid (decimal) */
        for (int f = 0; f < 4; f++) {
                while (*p == ' ')
                        p++;
                if (!*p)
                        return -EINVAL;
                while (*p && *p != ' ')
                        p++;
        }
        while (*p == ' ')
                p++;
        int64_t u = 0, ino = 0;
        int n = 0;
        for (; *p >= '0' && *p <= '9' && n < 10; p++, n++)
                u = u * 10 + (*p - '0');
        if (n == 0 || *p != ' ' || u > UINT32_MAX)
                return -EINVAL;
        /* timeout, then inode: 0 for a socket no process holds any more (closed, in
         * FIN_WAIT or TIME_WAIT), whose uid column the kernel prints as 0 (root) */
        while (*p == ' ')
                p++;
        while (*p >= '0' && *p <= '9')
                p++;
        while (*p == ' ')
                p++;
        for (n = 0; *p >= '0' && *p <= '9' && n < 20; p++, n++)
                ino = ino * 10 + (*p - '0');
        if (n == 0 || (*p != ' ' && *p != '\0' && *p != '\n'))
                return -EINVAL;
        *laddr = la;
        *lport = lp;
        *raddr = ra;
        *rport = rp;
        if (ino == 0)
                return -ESRCH;
        *uid = (uid_t)u;
        return 0;
}

/* The same through sock_diag (what ss uses): one exact lookup of the
 * socket by its four-tuple in the kernel's hash, where /proc/net/tcp is a
 * scan of every socket.  0; -ESRCH (no process holds it); -ENOENT (no
 * such socket); -EOPNOTSUPP and other -errno: try /proc. */
static int tcp_owner_diag(const struct sockaddr_in *cli, const struct sockaddr_in *srv, uid_t *ret) {
        int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (fd < 0)
                return -EOPNOTSUPP;
        struct timeval tv = {.tv_sec = 1};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        struct {
                struct nlmsghdr nlh;
                struct inet_diag_req_v2 r;
        } req;
        memset(&req, 0, sizeof(req));
        req.nlh.nlmsg_len = sizeof(req);
        req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
        req.nlh.nlmsg_flags = NLM_F_REQUEST;
        req.nlh.nlmsg_seq = 1;
        req.r.sdiag_family = AF_INET;
        req.r.sdiag_protocol = IPPROTO_TCP;
        req.r.idiag_states = ~0u;
        req.r.id.idiag_sport = cli->sin_port;   /* the socket's own end: the client's */
        req.r.id.idiag_dport = srv->sin_port;
        req.r.id.idiag_src[0] = cli->sin_addr.s_addr;
        req.r.id.idiag_dst[0] = srv->sin_addr.s_addr;
        req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
        req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
        union {
                struct nlmsghdr h;
                char b[8192];
        } ans;
        ssize_t n = -1;
        int rc = -EOPNOTSUPP;
        if (send(fd, &req, sizeof(req), 0) == (ssize_t)sizeof(req))
                n = recv(fd, ans.b, sizeof(ans.b), 0);
        close(fd);
        const struct nlmsghdr *h = &ans.h;
        if (n > 0 && NLMSG_OK(h, (size_t)n)) {
                if (h->nlmsg_type == NLMSG_ERROR && h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
                        const struct nlmsgerr *e = NLMSG_DATA(h);
                        rc = e->error == -ENOENT ? -ENOENT : -EOPNOTSUPP;
                } else if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
                           h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
                        const struct inet_diag_msg *m = NLMSG_DATA(h);
                        if (m->id.idiag_sport != cli->sin_port || m->id.idiag_dport != srv->sin_port ||
                            m->id.idiag_src[0] != cli->sin_addr.s_addr || m->id.idiag_dst[0] != srv->sin_addr.s_addr)
                                rc = -ENOENT;
                        else if (m->idiag_inode == 0)
                                rc = -ESRCH; /* closed, TIME_WAIT: the kernel says uid 0 for those */
                        else {
                                *ret = m->idiag_uid;
                                rc = 0;
                        }
                }
        }
        return rc;
}

/* The uid owning the TCP socket at cli (the client's end of our
 * connection whose local end is srv): sock_diag, else the /proc/net/tcp
 * line whose local end is cli and remote end srv. */
static int tcp_owner(const struct sockaddr_in *cli, const struct sockaddr_in *srv, uid_t *ret) {
        int d = tcp_owner_diag(cli, srv, ret);
        if (d == 0 || d == -ESRCH || d == -ENOENT)
                return d;
        FILE *f = fopen("/proc/net/tcp", "re");
        if (!f)
                return -errno;
        char line[512];
        int rc = -ENOENT;
        int lines = 0;
        while (rc == -ENOENT && lines++ < 1000000 && fgets(line, sizeof(line), f)) {
                uint32_t la = 0, ra = 0;
                uint16_t lp = 0, rp = 0;
                uid_t u = 0;
                int r = gp_peer_tcp_line(line, &la, &lp, &ra, &rp, &u);
                if (r != -EINVAL && la == cli->sin_addr.s_addr && lp == ntohs(cli->sin_port) &&
                    ra == srv->sin_addr.s_addr && rp == ntohs(srv->sin_port)) {
                        if (r < 0)
                                break; /* the client's end is closed: nobody to name */
                        *ret = u;
                        rc = 0;
                }
        }
        fclose(f);
        return rc;
}

static int fill(uid_t uid, gid_t gid, const char *admin_group, gp_peer *ret) {
        char buf[1024];
        struct passwd pw, *found = NULL;
        if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) != 0 || !found ||
            !gp_user_name_ok(pw.pw_name, strlen(pw.pw_name)) || strlen(pw.pw_name) >= GP_USER_NAME_MAX)
                return -ENOENT;
        gp_peer p;
        memset(&p, 0, sizeof(p));
        p.uid = uid;
        p.gid = gid;
        gp_strlcpy(p.name, pw.pw_name, sizeof(p.name));
        p.admin = uid == 0;
        if (!p.admin && admin_group && admin_group[0]) {
                char gbuf[4096];
                struct group gr, *g = NULL;
                gp_user u;
                if (getgrnam_r(admin_group, &gr, gbuf, sizeof(gbuf), &g) == 0 && g &&
                    gp_user_lookup(p.name, &u) == 0) {
                        p.admin = gid == g->gr_gid;
                        for (int i = 0; i < u.ngroups && !p.admin; i++)
                                p.admin = u.groups[i] == g->gr_gid;
                }
        }
        *ret = p;
        return 0;
}

int gp_peer_of_conn(struct MHD_Connection *conn, const char *admin_group, gp_peer *ret) {
        int fd = conn_fd(conn);
        if (fd < 0)
                return -ENOENT;
        if (gp_peer_conn_is_unix(conn)) {
                struct ucred cr;
                socklen_t l = sizeof(cr);
                if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0)
                        return -errno;
                return fill(cr.uid, cr.gid, admin_group, ret);
        }
        struct sockaddr_in cli, srv;
        socklen_t cl = sizeof(cli), sl = sizeof(srv);
        if (getpeername(fd, (struct sockaddr *)&cli, &cl) < 0 || getsockname(fd, (struct sockaddr *)&srv, &sl) < 0)
                return -errno;
        if (cli.sin_family != AF_INET || srv.sin_family != AF_INET)
                return -ENOENT;
        uid_t uid = (uid_t)-1;
        int rc = tcp_owner(&cli, &srv, &uid);
        if (rc < 0)
                return rc;
        char buf[1024];
        struct passwd pw, *found = NULL;
        gid_t gid = getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found ? pw.pw_gid : (gid_t)-1;
        return fill(uid, gid, admin_group, ret);
}

int gp_peer_of_uid(uid_t uid, const char *admin_group, gp_peer *ret) {
        char buf[1024];
        struct passwd pw, *found = NULL;
        if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) != 0 || !found)
                return -ENOENT;
        return fill(uid, pw.pw_gid, admin_group, ret);
}

const char *gp_peer_run_as(const char *name) {
        char buf[1024];
        struct passwd pw, *found = NULL;
        if (getpwnam_r(name, &pw, buf, sizeof(buf), &found) == 0 && found && pw.pw_uid == geteuid())
                return NULL;
        return name;
}

void gp_peer_self_name(char *out, size_t size) {
        char buf[1024];
        struct passwd pw, *found = NULL;
        if (getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &found) == 0 && found && strlen(pw.pw_name) < size)
                gp_strlcpy(out, pw.pw_name, size);
        else if (size)
                out[0] = '\0';
}
