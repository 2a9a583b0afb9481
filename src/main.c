/* main.c - one program, three roles: `gpupool server`, the hidden
 * `gpupool __supervise DIR` (a batch task's supervisor), and every other
 * command, which is the client. */
#include "cli/cli.h"
#include "exec/exec.h"
#include "server/server.h"
#include "sim/simulate.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
        if (argc >= 2 && !strcmp(argv[1], "server"))
                return gp_server_main(argc - 1, argv + 1);
        if (argc >= 2 && !strcmp(argv[1], "simulate"))
                return gp_simulate_main(argc - 1, argv + 1);
        if (argc == 3 && !strcmp(argv[1], "__supervise"))
                return gp_exec_supervise_main(argv[2]);
        if (argc >= 2 && !strcmp(argv[1], "agent")) {
                fprintf(stderr, "gpupool agent: multi-node pools are not part of this version yet\n");
                return 2;
        }
        return gp_cli_main(argc, argv);
}
