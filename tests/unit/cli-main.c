/* cli-main.c - the client alone, for tests and trials until src/main.c
 * dispatches to gp_cli_main (built as $(BUILD)/tests/gpupool-cli by mk/cli.mk). */
#include "cli/cli.h"

int main(int argc, char **argv) {
        return gp_cli_main(argc, argv);
}
