/* main-server.c - `gpupool-server`: the server-side roles of gpupool,
 * `gpupool server` (the daemon), `gpupool simulate` and `gpupool agent`.  It is not run by
 * hand: `gpupool server ...` exec()s it with its own argv (src/main.c), so
 * argv[1] is the role (or --check-config FILE, which `gpupool config
 * check FILE` runs, config/check.h).  It links every library the server uses; the
 * supervisors it starts are `gpupool __supervise` (the light executable
 * next to it, base/exe.h), not this one. */
#include "agent/agent.h"
#include "config/check.h"
#include "server/server.h"
#include "sim/simulate.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
        if (argc >= 2 && !strcmp(argv[1], "server"))
                return gp_server_main(argc - 1, argv + 1);
        if (argc >= 2 && !strcmp(argv[1], "simulate"))
                return gp_simulate_main(argc - 1, argv + 1);
        if (argc >= 2 && !strcmp(argv[1], "agent"))
                return gp_agent_main(argc - 1, argv + 1);
        if (argc == 3 && !strcmp(argv[1], "--check-config")) /* `gpupool config check FILE` */
                return gp_config_check(argv[2], stdout, stderr);
        fprintf(stderr, "gpupool-server: started by `gpupool server` and `gpupool simulate`; run those\n");
        return 2;
}
