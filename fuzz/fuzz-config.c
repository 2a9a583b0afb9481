/* fuzz-config.c - libFuzzer target for the YAML config loader.
 *
 * Feeds the input to gp_config_load_buffer() and checks the contract, not
 * only the absence of crashes: on success the result passes
 * gp_config_validate(); on failure the code is one of the documented ones,
 * the message is non-empty, NUL-terminated and names the file, and the
 * caller's struct is byte-for-byte unchanged.  Any violation aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static gp_config cfg, before;
        char err[512];

        gp_config_defaults(&cfg);
        memcpy(cfg.listen, "192.0.2.1:1234", sizeof("192.0.2.1:1234")); /* not a default */
        cfg.kill_grace_s = 3;
        memcpy(&before, &cfg, sizeof(cfg));
        memset(err, 'x', sizeof(err));

        int r = gp_config_load_buffer("fuzz.yaml", (const char *)data, size, &cfg, err, sizeof(err));
        if (!memchr(err, '\0', sizeof(err))) {
                fprintf(stderr, "message not NUL-terminated\n");
                abort();
        }
        if (r == 0) {
                if (err[0] || strcmp(cfg.source, "fuzz.yaml") != 0) {
                        fprintf(stderr, "success with message \"%s\" / source \"%s\"\n", err, cfg.source);
                        abort();
                }
                if (gp_config_validate(&cfg, err, sizeof(err)) != 0) {
                        fprintf(stderr, "loaded config fails validation: %s\n", err);
                        abort();
                }
                gp_config_free(&cfg);
                return 0;
        }
        if (r != -EINVAL && r != -ENOMEM && r != -E2BIG) {
                fprintf(stderr, "unexpected return code %d (%s)\n", r, err);
                abort();
        }
        if (strncmp(err, "fuzz.yaml", 9) != 0 || strlen(err) < 12) {
                fprintf(stderr, "bad message for %d: \"%s\"\n", r, err);
                abort();
        }
        if (memcmp(&cfg, &before, sizeof(cfg)) != 0) {
                fprintf(stderr, "failed load (%s) changed the config\n", err);
                abort();
        }
        return 0;
}
