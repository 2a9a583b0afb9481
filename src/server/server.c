/* server.c - `gpupool server [--config FILE] [--listen ADDR:PORT]
 * [--data-dir DIR]`: option parsing, config, start-up and shutdown. */
#include "server/server.h"

#include "base/log.h"
#include "base/util.h"
#include "server/server-int.h"
#include "server/serve.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The store URL for a log line: userinfo (user:password@) hidden. */
static void redact_url(const char *url, char *out, size_t size) {
        const char *scheme = strstr(url, "://");
        const char *at = scheme ? strchr(scheme + 3, '@') : NULL;
        if (!at) {
                gp_strlcpy(out, url, size);
                return;
        }
        int n = snprintf(out, size, "%.*s***%s", (int)(scheme + 3 - url), url, at);
        if (n < 0 || (size_t)n >= size)
                gp_strlcpy(out, "(store url)", size);
}

static const char usage[] =
        "usage: gpupool server [--config FILE] [--listen ADDR:PORT] [--data-dir DIR]\n"
        "  With no config file the embedded default is used: SQLite in ./gpupool-data,\n"
        "  port 8080, NVML GPUs if the NVIDIA driver is present, else 4 simulated GPUs.\n";

int gp_server_main(int argc, char **argv) {
        const char *config = NULL, *listen = NULL, *data_dir = NULL;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                        fputs(usage, stdout);
                        return 0;
                }
                const char **dst = !strcmp(a, "--config")     ? &config
                                   : !strcmp(a, "--listen")   ? &listen
                                   : !strcmp(a, "--data-dir") ? &data_dir
                                                              : NULL;
                if (!dst || i + 1 >= argc) {
                        fprintf(stderr, "gpupool server: %s '%s'\n%s", dst ? "missing value for" : "unknown option", a,
                                usage);
                        return 2;
                }
                *dst = argv[++i];
        }
        static gp_config cfg;
        char err[1024];
        gp_config_defaults(&cfg);
        if (config && gp_config_load(config, &cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool server: bad config: %s\n", err);
                return 1;
        }
        if (listen && gp_strlcpy(cfg.listen, listen, sizeof(cfg.listen)) >= sizeof(cfg.listen)) {
                fprintf(stderr, "gpupool server: --listen too long\n");
                return 2;
        }
        if (data_dir) {
                char old_default[sizeof(cfg.store_url)];
                gp_config base;
                gp_config_defaults(&base);
                int n = snprintf(old_default, sizeof(old_default), "sqlite://%s/gpupool.db", cfg.data_dir);
                bool derived = (n > 0 && (size_t)n < sizeof(old_default) && !strcmp(cfg.store_url, old_default)) ||
                               !strcmp(cfg.store_url, base.store_url);
                if (gp_strlcpy(cfg.data_dir, data_dir, sizeof(cfg.data_dir)) >= sizeof(cfg.data_dir)) {
                        fprintf(stderr, "gpupool server: --data-dir too long\n");
                        return 2;
                }
                /* the store follows the data dir unless the config names it */
                if (derived) {
                        n = snprintf(cfg.store_url, sizeof(cfg.store_url), "sqlite://%s/gpupool.db", cfg.data_dir);
                        if (n < 0 || (size_t)n >= sizeof(cfg.store_url)) {
                                fprintf(stderr, "gpupool server: --data-dir too long\n");
                                return 2;
                        }
                }
        }
        if (gp_config_validate(&cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool server: bad config: %s\n", err);
                return 1;
        }
        signal(SIGPIPE, SIG_IGN);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &set, NULL); /* threads inherit: only sigwait sees them */

        static gp_daemon d;
        if (gp_daemon_open(&d, &cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool server: %s\n", err);
                gp_daemon_close(&d);
                return 1;
        }
        gp_serve *serve = NULL;
        if (gp_daemon_start(&d) < 0 || gp_http_start(&d, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpupool server: %s\n", err);
                gp_daemon_stop(&d);
                gp_daemon_close(&d);
                return 1;
        }
        if (gp_serve_start(&d, &serve) < 0)
                gp_error("cannot start the model servers of gateway.models[].serve (out of memory or threads)");
        char store[sizeof(cfg.store_url)];
        redact_url(cfg.store_url, store, sizeof(store));
        gp_info("gpupool server listening on %s, data in %s, store %s, %zu GPU(s) from backend %s%s", cfg.listen,
                cfg.data_dir, store, d.ngpus, d.backend,
                !strcmp(d.backend, "sim") ? " (SIMULATED GPUs: no NVIDIA driver found or sim configured)" : "");
        int sig = 0;
        while (sigwait(&set, &sig) == 0 && sig == SIGHUP)
                gp_warn("SIGHUP ignored: this version does not reload its config; restart it to apply changes");
        gp_info("signal %d: stopping (running tasks keep running under their supervisors)", sig);
        gp_serve_stop(serve);
        gp_http_stop(&d);
        gp_daemon_stop(&d);
        gp_daemon_close(&d);
        return 0;
}
