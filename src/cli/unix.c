/* unix.c - the client's side of local users (server/peer.h): the local
 * server's Unix socket, and what a submit sends of where it was made.
 *
 * A URL naming a loopback host (127.0.0.1, localhost, ::1) is first tried
 * on the server's socket for its port: $GPUPOOL_SOCKET when set ("off" =
 * never), else /run/gpupool/PORT.sock (a root server), then
 * /tmp/gpupool-UID/PORT.sock (a server of this user).  The server then
 * knows who we are from the kernel.  A socket is used only when its server
 * runs as root or as this user (SO_PEERCRED of our end): a file someone
 * else made must not receive our environment.  No socket: plain TCP, as
 * before.
 *
 * A submit to a local server (or with --export) sends the directory it was
 * made in (workdir, unless --workdir) and the environment (sbatch
 * --export: ALL by default, NONE, or NAME[=VALUE],...); --env entries win.
 */
#include "cli/cli-int.h"
#include "cli/unix.h"

#include "base/url.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;

#define ENV_VALUE_MAX 4096  /* the server's bound on one value (submit.h) */

bool gp_cli_host_loopback(const char *host, size_t n) {
        return (n == 9 && !strncasecmp(host, "localhost", 9)) || (n == 3 && !memcmp(host, "::1", 3)) ||
               (n == 5 && !memcmp(host, "[::1]", 5)) || (n >= 4 && !memcmp(host, "127.", 4));
}

static int try_path(const char *path) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        gp_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        struct ucred cr;
        socklen_t l = sizeof(cr);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0 || (cr.uid != 0 && cr.uid != getuid())) {
                close(fd);
                return -ECONNREFUSED;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        return fd;
}

int gp_cli_unix_dial(const char *host, size_t host_len, const char *port) {
        const char *env = getenv("GPUPOOL_SOCKET");
        if (env && env[0])
                return strcmp(env, "off") != 0 ? try_path(env) : -ENOENT;
        if (!gp_cli_host_loopback(host, host_len))
                return -ENOENT;
        int64_t p;
        if (!port || gp_parse_i64(port, 1, 65535, &p) < 0)
                return -ENOENT;
        char path[108];
        snprintf(path, sizeof(path), "/run/gpupool/%d.sock", (int)p);
        int fd = try_path(path);
        if (fd >= 0)
                return fd;
        snprintf(path, sizeof(path), "/tmp/gpupool-%u/%d.sock", (unsigned)getuid(), (int)p);
        return try_path(path);
}

static bool name_ok(const char *k, size_t n) {
        if (n == 0 || n > 256 || (k[0] >= '0' && k[0] <= '9'))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') ||
                      k[i] == '_'))
                        return false;
        return true;
}

/* gpupool sets these itself: never sent */
static bool reserved(const char *k, size_t n) {
        return (n == 20 && !strncmp(k, "CUDA_VISIBLE_DEVICES", n)) || (n >= 8 && !strncmp(k, "GPUPOOL_", 8));
}

/* Add NAME=VALUE (n bytes of name) to env unless --env set it already. */
static int put(json_t *env, const char *k, size_t n, const char *v, FILE *err) {
        char key[257];
        if (!name_ok(k, n) || reserved(k, n))
                return 0; /* shell functions (BASH_FUNC_x%%) and gpupool's own are not exported */
        memcpy(key, k, n);
        key[n] = '\0';
        if (json_object_get(env, key))
                return 0;
        if (strlen(v) > ENV_VALUE_MAX) {
                fprintf(err, "gpupool: not exported: %s (its value is over %d bytes)\n", key, ENV_VALUE_MAX);
                return 0;
        }
        json_t *s = json_string(v);
        if (!s) {
                fprintf(err, "gpupool: not exported: %s (its value is not UTF-8)\n", key);
                return 0;
        }
        return json_object_set_new(env, key, s) < 0 ? -ENOMEM : 0;
}

int gp_cli_add_origin(gp_cli_cmd *c, FILE *err) {
        if (!c->body || !json_object_get(c->body, "command"))
                return 0; /* a lease: nothing runs on the server's side */
        const char *exp = c->export_env;
        if (!exp) {
                gp_http_url u;
                bool local = gp_http_url_parse(c->api, &u) == 0 && gp_cli_host_loopback(u.host, u.host_len);
                if (!local)
                        return 0; /* a remote server: our directory and environment mean nothing there */
                exp = "ALL";
        }
        if (!json_object_get(c->body, "workdir")) {
                char cwd[PATH_MAX];
                if (!getcwd(cwd, sizeof(cwd))) {
                        fprintf(err, "gpupool: cannot tell the current directory: %s\n", strerror(errno));
                        return -EINVAL;
                }
                if (json_object_set_new(c->body, "workdir", json_string(cwd)) < 0)
                        return -ENOMEM;
        }
        json_t *env = json_object_get(c->body, "env");
        if (!env) {
                env = json_object();
                if (!env || json_object_set_new(c->body, "env", env) < 0)
                        return -ENOMEM;
        }
        int rc = 0;
        if (!strcasecmp(exp, "ALL")) {
                for (char **e = environ; rc == 0 && e && *e; e++) {
                        const char *eq = strchr(*e, '=');
                        if (eq)
                                rc = put(env, *e, (size_t)(eq - *e), eq + 1, err);
                }
        } else if (strcasecmp(exp, "NONE") != 0) {
                /* NAME[=VALUE],...: those only (and ALL,NAME=VALUE is not Slurm's; keep it simple) */
                const char *p = exp;
                while (rc == 0 && *p) {
                        size_t n = strcspn(p, ",");
                        const char *eq = memchr(p, '=', n);
                        size_t kn = eq ? (size_t)(eq - p) : n;
                        if (!name_ok(p, kn)) {
                                fprintf(err, "gpupool: --export: '%.*s' is not a variable name\n", (int)kn, p);
                                return -EINVAL;
                        }
                        char key[257];
                        memcpy(key, p, kn);
                        key[kn] = '\0';
                        if (eq) {
                                char *v = strndup(eq + 1, n - kn - 1);
                                rc = v ? put(env, p, kn, v, err) : -ENOMEM;
                                free(v);
                        } else if (getenv(key)) {
                                rc = put(env, p, kn, getenv(key), err);
                        }
                        p += n;
                        if (*p == ',')
                                p++;
                }
        }
        if (rc == 0 && json_object_size(env) > GP_CLI_ENV_MAX) {
                fprintf(err, "gpupool: your environment has %zu variables, the server takes at most %d: "
                             "use --export NAME,... (or NONE)\n", json_object_size(env), GP_CLI_ENV_MAX);
                return -EINVAL;
        }
        if (rc == 0 && json_object_size(env) == 0)
                json_object_del(c->body, "env");
        return rc;
}

int gp_cli_self_name(char *buf, size_t size) {
        char pwbuf[1024];
        struct passwd pw, *found = NULL;
        if (getpwuid_r(getuid(), &pw, pwbuf, sizeof(pwbuf), &found) != 0 || !found ||
            gp_strlcpy(buf, pw.pw_name, size) >= size)
                return -ENOENT;
        return 0;
}
