/* users.c - who a request is when the kernel names it, and whom its task
 * runs as (DESIGN.md, Trust: local users; issue 23).
 *
 * authorize() (http.c) asks gp_http_identify_user after the key check:
 *   - on the Unix socket (peer.h) the caller is its peer's user: an admin
 *     when uid 0 or in auth.admin_group, else tenant "default" (or its
 *     key's tenant) seeing and cancelling its own tasks only;
 *   - a keyless TCP loopback caller of a root daemon is the owner of its
 *     socket, the same way; when the kernel does not say (a request a
 *     follower forwarded, a socket already gone) it stays unnamed
 *     (r->anonymous): it may read as before but runs no command as root.
 * A daemon that is not root keeps today's rule on TCP (keyless loopback is
 * admin, its tasks run as the daemon's user).
 *
 * submit() asks gp_http_submit_user which user the new task records: a
 * named caller's own (an admin's only when the task's tenant has no
 * run_as), else the tenant's run_as, else the daemon's own.
 */
#include "server/server-int.h"

#include "base/util.h"
#include "server/forward.h"
#include "server/peer.h"
#include "server/submit.h"
#include "server/tenants.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void name_caller(hreq *r, const gp_peer *p, bool keyed, bool unix_sock) {
        r->peer = true;
        r->uid = p->uid;
        gp_strlcpy(r->user, p->name, sizeof(r->user));
        if (!keyed) {
                r->admin = p->admin;
                if (!p->admin)
                        gp_strlcpy(r->tenant, "default", sizeof(r->tenant));
                r->own_only = !p->admin;
                snprintf(r->who, sizeof(r->who), "user %s (uid %u, %s)%s", p->name, (unsigned)p->uid,
                         unix_sock ? "local socket" : "loopback", p->admin ? " admin" : "");
        }
}

int gp_http_identify_user(hreq *r, bool unix_sock, bool has_key, const char **msg) {
        gp_daemon *d = r->d;
        pthread_mutex_lock(&d->lock);
        bool keyed = has_key && gp_tenants_auth_required(d->tenants);
        pthread_mutex_unlock(&d->lock);
        gp_peer p;
        if (unix_sock) {
                if (gp_peer_of_conn(r->conn, d->cfg.admin_group, &p) < 0) {
                        *msg = "the local socket cannot tell who you are (your uid has no passwd entry)";
                        return 403;
                }
                name_caller(r, &p, keyed, true);
                return 0;
        }
        if (keyed || !r->admin || geteuid() != 0 || r->openai)
                return 0; /* a key's caller, a daemon that cannot switch users anyway, or the
                           * gateway (/v1 runs no command; its keyless loopback callers stay as before) */
        /* keyless loopback on a root daemon: the owner of the client's socket; or, for a
         * request a follower on this machine forwarded, the uid its kernel named */
        bool fwd = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, GP_FWD_FOR) != NULL;
        const char *fu = fwd ? MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, GP_FWD_UID) : NULL;
        int64_t uid;
        if (gp_peer_of_conn(r->conn, d->cfg.admin_group, &p) < 0 ||
            (fwd && (!fu || p.uid != geteuid() || gp_parse_i64(fu, 0, UINT32_MAX - 1, &uid) < 0 ||
                     gp_peer_of_uid((uid_t)uid, d->cfg.admin_group, &p) < 0)))
                r->anonymous = true;
        else
                name_caller(r, &p, false, false);
        return 0;
}

/* The spec of a task of a named caller starts from a clean environment:
 * what the caller sent (the CLI sends its own, as sbatch --export). */
static int mark_clean_env(gp_task *t) {
        return gp_submit_spec_set(t, "clean_env", json_true());
}

int gp_http_submit_user(hreq *r, gp_task *t, char *err, size_t errlen) {
        gp_daemon *d = r->d;
        bool batch = !t->is_lease && t->spec;
        uid_t me = geteuid();
        pthread_mutex_lock(&d->lock);
        const char *ra = gp_tenants_run_as(d->tenants, t->tenant);
        if (ra)
                gp_strlcpy(t->user, ra, sizeof(t->user));
        pthread_mutex_unlock(&d->lock);
        /* an admin submitting for a tenant with run_as: that user (as before);
         * anyone else named by the kernel: itself */
        if (r->peer && (!r->admin || !t->user[0])) {
                if (batch && me != 0 && me != r->uid) {
                        char self[GP_USER_NAME_MAX];
                        gp_peer_self_name(self, sizeof(self));
                        snprintf(err, errlen,
                                 "this server runs as %s (uid %u), not root, so it cannot run tasks as %s (uid %u); "
                                 "run a server of your own, or use one that runs as root",
                                 self[0] ? self : "another user", (unsigned)me, r->user, (unsigned)r->uid);
                        return -EPERM;
                }
                gp_strlcpy(t->user, r->user, sizeof(t->user));
                if (batch && (gp_peer_conn_is_unix(r->conn) || r->uid != me))
                        return mark_clean_env(t);
                return 0;
        }
        if (t->user[0])
                return 0;
        if (r->anonymous && batch && me == 0) {
                snprintf(err, errlen,
                         "no identity (no API key, and the kernel does not say whose request it is): a root "
                         "server runs no command for it. Use the local socket (%s; gpupool does by default), an "
                         "API key, or tenants[].run_as",
                         gp_peer_path(d->peer_srv)[0] ? gp_peer_path(d->peer_srv) : "server.socket");
                return -EPERM;
        }
        gp_peer_self_name(t->user, sizeof(t->user));
        return 0;
}
