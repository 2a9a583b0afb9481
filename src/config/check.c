/* check.c - `gpupool config check FILE` (see check.h): run by
 * gpupool-server --check-config FILE, which `gpupool config check` execs,
 * so that the client never links libyaml.  It checks what the server's
 * loader checks, nothing it cannot know without starting (ports free,
 * directories writable, the store reachable). */
#include "config/check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/sched.h"

int gp_config_check(const char *path, FILE *out, FILE *err) {
        gp_config *cfg = malloc(sizeof(*cfg));
        char why[1024];
        if (!cfg) {
                fprintf(err, "gpupool config: out of memory\n");
                return 1;
        }
        gp_config_defaults(cfg);
        int r = gp_config_load(path, cfg, why, sizeof(why));
        if (r < 0) {
                fprintf(err, "%s\n", why[0] ? why : strerror(-r));
                free(cfg);
                return 1;
        }
        int sim_gpus = 0;
        for (int i = 0; i < cfg->n_sim; i++)
                sim_gpus += cfg->sim[i].count;
        fprintf(out, "%s: ok\n", path);
        fprintf(out, "  listen      %s\n", cfg->listen);
        fprintf(out, "  data_dir    %s\n", cfg->data_dir);
        fprintf(out, "  store       %s\n", cfg->store_url[0] ? cfg->store_url : "sqlite (in data_dir)");
        fprintf(out, "  gpus        %s", cfg->gpu_backend);
        if (!strcmp(cfg->gpu_backend, "sim"))
                fprintf(out, " (%d simulated)", sim_gpus);
        fputc('\n', out);
        fprintf(out, "  scheduler   %s, %s\n", gp_sched_policy_name(cfg->policy),
                gp_sched_placement_name(cfg->placement));
        fprintf(out, "  admin keys  %d%s\n", cfg->n_admin_keys,
                cfg->n_admin_keys ? "" : " (no keys: the API is open to anyone who can reach it)");
        fprintf(out, "  tenants     %d\n", cfg->n_tenants);
        fprintf(out, "  join tokens %d\n", cfg->n_join_tokens);
        if (cfg->server_id[0])
                fprintf(out, "  server_id   %s\n", cfg->server_id);
        gp_config_free(cfg);
        free(cfg);
        return 0;
}
