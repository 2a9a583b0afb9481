/* tls-setup.c - server.tls to a running keeper (see tls-setup.h).
 *
 * A generated certificate names: localhost, 127.0.0.1, ::1, the host name,
 * the addresses of the machine's interfaces (IPv6 link-local ones left
 * out: no URL can name them without a zone), the host of
 * cluster.advertise_url, and server.tls.sans. */
#include "server/tls-setup.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "server/tls-share.h"

#define MAX_NAMES (GP_CFG_MAX_TLS_SANS + 64)

static gp_tls_keep *keep;

typedef struct names {
        char v[MAX_NAMES][GP_CFG_TLS_SAN_MAX];
        const char *p[MAX_NAMES];
        size_t n;
} names;

static void add(names *ns, const char *s, size_t len) {
        if (!len || len >= GP_CFG_TLS_SAN_MAX || ns->n >= MAX_NAMES)
                return;
        for (size_t i = 0; i < ns->n; i++)
                if (strlen(ns->v[i]) == len && !strncasecmp(ns->v[i], s, len))
                        return;
        memcpy(ns->v[ns->n], s, len);
        ns->v[ns->n][len] = 0;
        ns->p[ns->n] = ns->v[ns->n];
        ns->n++;
}

/* The host of an http(s)://HOST[:PORT][/...] URL ([v6] unbracketed). */
static void add_url_host(names *ns, const char *url) {
        const char *h = strstr(url, "://");
        if (!h)
                return;
        h += 3;
        if (*h == '[') {
                const char *e = strchr(h, ']');
                if (e)
                        add(ns, h + 1, (size_t)(e - h - 1));
                return;
        }
        size_t n = strcspn(h, ":/?#");
        add(ns, h, n);
}

static void add_interfaces(names *ns) {
        struct ifaddrs *ifa = NULL;
        if (getifaddrs(&ifa) < 0)
                return;
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
                char a[INET6_ADDRSTRLEN];
                if (!i->ifa_addr)
                        continue;
                if (i->ifa_addr->sa_family == AF_INET) {
                        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a, sizeof(a));
                } else if (i->ifa_addr->sa_family == AF_INET6) {
                        const struct in6_addr *x = &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
                        if (IN6_IS_ADDR_LINKLOCAL(x))
                                continue;
                        inet_ntop(AF_INET6, x, a, sizeof(a));
                } else {
                        continue;
                }
                add(ns, a, strlen(a));
        }
        freeifaddrs(ifa);
}

int gp_server_tls_start(const gp_config *cfg, char *err, size_t errlen) {
        names *ns = calloc(1, sizeof(*ns));
        if (!ns)
                return -ENOMEM;
        add(ns, "localhost", 9);
        add(ns, "127.0.0.1", 9);
        add(ns, "::1", 3);
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) == 0)
                add(ns, host, strlen(host));
        add_interfaces(ns);
        add_url_host(ns, cfg->advertise_url);
        for (int i = 0; i < cfg->n_tls_sans; i++)
                add(ns, cfg->tls_sans[i], strlen(cfg->tls_sans[i]));
        char dir[PATH_MAX + 8];
        if ((size_t)snprintf(dir, sizeof(dir), "%s/tls", cfg->data_dir) >= sizeof(dir)) {
                free(ns);
                snprintf(err, errlen, "tls: data dir path too long");
                return -ENAMETOOLONG;
        }
        if (!cfg->tls_cert[0] && mkdir(cfg->data_dir, 0700) < 0 && errno != EEXIST) {
                int e = errno;
                free(ns);
                snprintf(err, errlen, "data dir %s: %s", cfg->data_dir, strerror(e));
                return -e;
        }
        if (!cfg->tls_cert[0] && cfg->server_id[0]) { /* several servers: one CA */
                int sr = gp_tls_share_ca(cfg, dir, err, errlen);
                if (sr < 0) {
                        free(ns);
                        return sr;
                }
        }
        gp_tls_keep_opts o = {.dir = dir, .cert = cfg->tls_cert, .key = cfg->tls_key, .ca = cfg->tls_ca,
                              .sans = ns->p, .nsans = ns->n, .plaintext_any = cfg->tls_plaintext_any};
        char e2[768];
        int r = gp_tls_keep_open(&o, &keep, e2, sizeof(e2));
        free(ns);
        if (r < 0) {
                snprintf(err, errlen, "server.tls: %s", e2);
                return r;
        }
        r = gp_tls_keep_start(keep);
        if (r < 0) {
                gp_tls_keep_free(keep);
                keep = NULL;
                snprintf(err, errlen, "server.tls: cannot start the reload thread: %s", strerror(-r));
                return r;
        }
        gp_tls_set_listener(keep);
        gp_tls_creds *c = gp_tls_keep_get(keep);
        gp_info("tls: serving %s certificate; agents pin CA %s", gp_tls_keep_generated(keep) ? "a generated" : "the "
                "configured", gp_tls_creds_ca_hash(c));
        if (gp_tls_creds_not_after(c) < time(NULL))
                gp_warn("tls: the certificate in %s has expired: clients will refuse it; replace the file (it is "
                        "read again without a restart)", cfg->tls_cert[0] ? cfg->tls_cert : "DATA_DIR/tls/server.crt");
        gp_tls_creds_unref(c);
        if (cfg->tls_plaintext_any)
                gp_warn("server.tls.plaintext is any: plaintext HTTP is served to every address, not only loopback; "
                        "API keys and join tokens can be read on the network");
        return 0;
}

const char *gp_server_tls_mode(void) {
        if (!keep)
                return "plaintext";
        return gp_tls_keep_plaintext_any(keep) ? "TLS, and plaintext to ANY address (server.tls.plaintext: any)"
                                               : "TLS; plaintext to loopback only";
}

void gp_server_tls_reload(void) {
        if (keep) {
                gp_info("SIGHUP: reading the TLS certificate files again (the rest of the config needs a restart)");
                gp_tls_keep_poke(keep);
        }
}

void gp_server_tls_stop(void) {
        gp_tls_set_listener(NULL);
        gp_tls_keep_free(keep);
        keep = NULL;
}
