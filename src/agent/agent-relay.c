/* agent-relay.c - the relay to a model replica this agent runs (see
 * agent-relay.h).
 *
 * Invariants: the port dialled is only ever a run's own SERVE_PORT read
 * from its spec.json, on 127.0.0.1; the token is compared in constant
 * time; every size read is bounded (the line GP_PROTO_RELAY_LINE_MAX, spec.json
 * 1 MiB); a relay thread owns both sockets and closes them when it ends;
 * it uses nothing of the listener (whose count it gave back once the
 * line was checked: until then the connection counts against its address). */
#include "agent/agent-relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent-util.h"
#include "base/log.h"
#include "base/splice.h"
#include "base/util.h"
#include "cluster/proto-cert.h"
#include "cluster/proto.h"

#define FIRST_MS 5000         /* the first line within this */
#define CONNECT_MS 5000
#define IDLE_MS (15 * 60000)  /* a relayed connection with no byte either way this long ends */
#define SPEC_MAX (1 << 20)
#define THREAD_STACK (128 * 1024)

typedef struct relay {
        int client, up;
} relay;

/* The run's SERVE_PORT when it runs and its SERVE_RELAY_TOKEN is token: 1..65535, else -errno. */
static int run_port(const char *runs_dir, const char *name, const char *token) {
        char path[PATH_MAX];
        struct stat st;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s/result.json", runs_dir, name) >= sizeof(path))
                return -ENAMETOOLONG;
        if (stat(path, &st) == 0)
                return -ESRCH; /* it ended */
        snprintf(path, sizeof(path), "%s/%s/spec.json", runs_dir, name);
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SPEC_MAX)
                return -ENOENT;
        json_error_t je;
        json_t *j = json_load_file(path, 0, &je);
        json_t *env = json_object_get(j, "env");
        const char *port = NULL, *tok = NULL;
        for (size_t i = 0; i < json_array_size(env); i++) {
                const char *kv = json_string_value(json_array_get(env, i));
                if (kv && !strncmp(kv, "SERVE_PORT=", 11))
                        port = kv + 11;
                else if (kv && !strncmp(kv, "SERVE_RELAY_TOKEN=", 18))
                        tok = kv + 18;
        }
        int64_t v = 0;
        int rc = -EACCES;
        size_t tl = tok ? strlen(tok) : 0;
        if (port && tok && tl >= GP_PROTO_RELAY_TOKEN_MIN && tl == strlen(token) &&
            gp_parse_i64(port, 1, 65535, &v) == 0) {
                unsigned diff = 0;
                for (size_t i = 0; i < tl; i++)
                        diff |= (unsigned char)(tok[i] ^ token[i]);
                rc = diff == 0 ? (int)v : -EACCES;
        }
        json_decref(j);
        return rc;
}

/* A connected socket to 127.0.0.1:port within CONNECT_MS, or -errno. */
static int dial_local(int port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
                int e = -errno;
                close(fd);
                return e;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t el = sizeof(err);
        if (poll(&p, 1, CONNECT_MS) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
                close(fd);
                return err ? -err : -ETIMEDOUT;
        }
        return fd;
}

static void finish(relay *r) {
        close(r->client);
        if (r->up >= 0)
                close(r->up);
        free(r);
}

static void *relay_main(void *arg) {
        relay *r = arg;
        gp_splice_fds(r->client, r->up, IDLE_MS);
        finish(r);
        return NULL;
}

static void refuse(relay *r, const char *why) {
        char msg[600];
        int ml = gp_proto_relay_refusal(msg, sizeof(msg), why);
        if (ml > 0)
                (void)!send(r->client, msg, (size_t)ml, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(r->client, SHUT_WR);
        finish(r);
}

/* Reads the first line, byte by byte (nothing past it), within the deadline. */
static ssize_t read_line(int fd, char *buf, size_t size, int64_t deadline) {
        size_t n = 0;
        while (n < size) {
                int64_t left = deadline - gp_mono_ms();
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (left <= 0 || poll(&p, 1, (int)left) != 1)
                        return -ETIMEDOUT;
                ssize_t k = recv(fd, buf + n, 1, MSG_DONTWAIT);
                if (k == 0)
                        return -ECONNRESET;
                if (k < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                continue;
                        return -errno;
                }
                if (buf[n++] == '\n')
                        return (ssize_t)n;
        }
        return -E2BIG;
}

/* fd, whose first bytes are the relay's magic: its first line read and
 * checked, then carried (a thread of its own) or refused and closed. */
static void take(int fd, const char *runs_dir, int64_t deadline) {
        relay *r = calloc(1, sizeof(*r));
        if (!r) {
                close(fd);
                return;
        }
        r->client = fd;
        r->up = -1;
        char line[GP_PROTO_RELAY_LINE_MAX], name[64], token[GP_PROTO_RELAY_LINE_MAX];
        ssize_t ll = read_line(fd, line, sizeof(line), deadline);
        if (ll < 0 || gp_proto_relay_parse(line, (size_t)ll, name, sizeof(name), token, sizeof(token)) < 0 ||
            gp_agent_run_name_parse(name, &(gp_proto_run_id){0}) < 0) {
                refuse(r, "expected: GPUPOOL-RELAY TASK.EPOCH.RANK TOKEN");
                return;
        }
        int port = run_port(runs_dir, name, token);
        explicit_bzero(token, sizeof(token));
        explicit_bzero(line, sizeof(line));
        if (port < 0) {
                gp_warn("relay: refused for run %s: %s", name,
                        port == -EACCES ? "not a model replica of this node, or a wrong token"
                                        : port == -ESRCH ? "it ended" : "no such run here");
                refuse(r, "no model replica of that name and token runs here");
                return;
        }
        if ((r->up = dial_local(port)) < 0) {
                r->up = -1;
                refuse(r, "the model replica does not answer on its port");
                return;
        }
        if (gp_thread_detached(relay_main, r, THREAD_STACK) < 0)
                refuse(r, "out of threads");
}

int gp_agent_relay_try(int fd, const char *runs_dir, gp_iplimit *ipl, const struct sockaddr *sa) {
        size_t m = strlen(GP_PROTO_RELAY_MAGIC);
        char peek[32];
        int64_t deadline = gp_mono_ms() + FIRST_MS;
        /* enough bytes to tell: the magic, or a first byte that differs from it */
        for (;;) {
                ssize_t k = recv(fd, peek, m, MSG_PEEK | MSG_DONTWAIT);
                if (k > 0 && memcmp(peek, GP_PROTO_RELAY_MAGIC, (size_t)k))
                        return 0;
                if (k == (ssize_t)m)
                        break;
                if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
                        return 0; /* closed or failed: MHD sees that */
                int64_t left = deadline - gp_mono_ms();
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (left <= 0)
                        return 0;
                poll(&p, 1, (int)(left < 50 ? left : 50)); /* a prefix may grow byte by byte */
        }
        /* counted against its address while its line is read and checked (anyone may send the
         * magic and then nothing); then a relay is the server's, not a client's: it does not count
         * (and its thread, which may outlive the listener, touches nothing of it) */
        take(fd, runs_dir, deadline);
        gp_iplimit_put(ipl, sa);
        return 1;
}
