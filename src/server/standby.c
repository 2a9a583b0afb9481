/* standby.c - what a server that does not lead answers (cluster.server_id
 * set, another server holds the leader lease; docs/deployment.md "Several
 * servers").
 *
 * One small MHD daemon per listening socket of gp_http_bind (each on a dup
 * of it, so stopping the standby leaves the sockets to the real HTTP loops
 * of the daemon once this server leads; quiesced before stopping, so MHD
 * never shuts the shared socket down).  Every request gets 503 with
 * Retry-After: 1 and {"error": {"code": "standby", ...}} naming the leader,
 * except GET /healthz (200 {"status": "standby"}): the process is alive.
 * /readyz is 503 like the rest: a load balancer sends nothing here.
 * Request bodies are read and dropped (at most STANDBY_BODY_MAX bytes, then
 * the connection is answered at once). */
#include "server/standby.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/util.h"

#define STANDBY_BODY_MAX (1 << 20)

struct gp_standby {
        struct MHD_Daemon *mhd[GP_STANDBY_MAX_FDS];
        int n;
        char id[64];            /* this server's id */
        pthread_mutex_t lock;
        char leader[64];        /* under lock: "" = unknown */
};

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, char *body, int retry) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "application/json");
        if (retry)
                MHD_add_response_header(resp, "Retry-After", "1");
        enum MHD_Result r = MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        return r;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
        (void)version;
        (void)upload_data;
        gp_standby *sb = cls;
        size_t *seen = *con_cls;
        if (!seen) {
                if (!(seen = calloc(1, sizeof(*seen))))
                        return MHD_NO;
                *con_cls = seen;
                return MHD_YES;
        }
        if (*upload_data_size) {
                *seen += *upload_data_size;
                *upload_data_size = 0;
                if (*seen <= STANDBY_BODY_MAX)
                        return MHD_YES;
        }
        if (!strcmp(method, "GET") && !strcmp(url, "/healthz")) {
                char *body = strdup("{\"status\": \"standby\"}");
                return body ? answer(c, 200, body, 0) : MHD_NO;
        }
        char leader[64], msg[256];
        pthread_mutex_lock(&sb->lock);
        gp_strlcpy(leader, sb->leader, sizeof(leader));
        pthread_mutex_unlock(&sb->lock);
        snprintf(msg, sizeof(msg), "server %s is standby; the leader is %s", sb->id,
                 leader[0] ? leader : "not known yet");
        json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", "standby", "message", msg);
        char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return body ? answer(c, 503, body, 1) : MHD_NO;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
        (void)cls;
        (void)c;
        (void)toe;
        free(*con_cls);
        *con_cls = NULL;
}

static void quiet(void *cls, const char *fmt, va_list ap) {
        (void)cls;
        (void)fmt;
        (void)ap;
}

int gp_standby_start(const char *server_id, const int *fds, int n, gp_standby **ret) {
        gp_standby *sb = calloc(1, sizeof(*sb));
        if (!sb)
                return -ENOMEM;
        pthread_mutex_init(&sb->lock, NULL);
        gp_strlcpy(sb->id, server_id, sizeof(sb->id));
        for (int i = 0; i < n && i < GP_STANDBY_MAX_FDS; i++) {
                int fd = dup(fds[i]); /* MHD closes its own; fds[i] stays for the daemon */
                if (fd < 0) {
                        gp_standby_stop(sb);
                        return -errno;
                }
                sb->mhd[i] = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC, 0, NULL, NULL, handler,
                                              sb, MHD_OPTION_EXTERNAL_LOGGER, quiet, NULL, MHD_OPTION_LISTEN_SOCKET,
                                              fd, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_LIMIT,
                                              256u, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
                if (!sb->mhd[i]) {
                        close(fd);
                        gp_standby_stop(sb);
                        return -ENOMEM;
                }
                sb->n = i + 1;
        }
        *ret = sb;
        return 0;
}

void gp_standby_set_leader(gp_standby *sb, const char *leader) {
        if (!sb)
                return;
        pthread_mutex_lock(&sb->lock);
        gp_strlcpy(sb->leader, leader ? leader : "", sizeof(sb->leader));
        pthread_mutex_unlock(&sb->lock);
}

void gp_standby_stop(gp_standby *sb) {
        if (!sb)
                return;
        for (int i = 0; i < sb->n; i++)
                if (sb->mhd[i]) {
                        /* quiesced first: stopping alone would shutdown() the
                         * socket, which the dup shares with the daemon's */
                        MHD_socket fd = MHD_quiesce_daemon(sb->mhd[i]);
                        MHD_stop_daemon(sb->mhd[i]);
                        if (fd != MHD_INVALID_SOCKET)
                                close(fd);
                }
        pthread_mutex_destroy(&sb->lock);
        free(sb);
}
