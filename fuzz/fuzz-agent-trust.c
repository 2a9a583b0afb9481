/* fuzz-agent-trust.c - libFuzzer target for what the agent reads from its
 * command line before it trusts a server (issue 22): the join token
 * (gp_proto_join_token_split: gpj_SECRET or gpj_SECRET.CAHASH) and the
 * server URL's loopback rule (gp_agent_url_loopback).
 *
 * Checks the contract: a refused token leaves both outputs byte for byte
 * unchanged; an accepted one is 68 or 133 bytes, its secret is a join
 * token, its pin is "" or "sha256:" + 64 lowercase hex, and secret + '.' +
 * pin's hex is the input again; a URL called loopback starts with http://
 * or https:// and has no '@' before its path. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent-util.h"
#include "cluster/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *s = malloc(size + 1);
        if (!s)
                return 0;
        memcpy(s, data, size);
        s[size] = '\0';
        char sec[GP_PROTO_CRED_LEN + 1], pin[GP_PROTO_CA_HASH_LEN], sec0[sizeof(sec)], pin0[sizeof(pin)];
        memset(sec, 0x5a, sizeof(sec));
        memset(pin, 0x5a, sizeof(pin));
        memcpy(sec0, sec, sizeof(sec));
        memcpy(pin0, pin, sizeof(pin));
        if (gp_proto_join_token_split(s, sec, pin) < 0) {
                if (memcmp(sec, sec0, sizeof(sec)) || memcmp(pin, pin0, sizeof(pin)))
                        abort();
        } else {
                size_t n = strlen(s);
                if ((n != GP_PROTO_CRED_LEN && n != GP_PROTO_JOIN_TOKEN_MAX) || !gp_proto_join_token_ok(sec))
                        abort();
                if (pin[0]) {
                        if (strncmp(pin, "sha256:", 7) || strlen(pin) != 71 ||
                            strspn(pin + 7, "0123456789abcdef") != 64)
                                abort();
                        char back[GP_PROTO_JOIN_TOKEN_MAX + 1];
                        memcpy(back, sec, GP_PROTO_CRED_LEN);
                        back[GP_PROTO_CRED_LEN] = '.';
                        memcpy(back + GP_PROTO_CRED_LEN + 1, pin + 7, 65);
                        if (strcmp(back, s))
                                abort();
                } else if (strcmp(sec, s)) {
                        abort();
                }
        }
        if (gp_agent_url_loopback(s)) {
                const char *h = !strncmp(s, "http://", 7) ? s + 7 : !strncmp(s, "https://", 8) ? s + 8 : NULL;
                if (!h || memchr(h, '@', strcspn(h, "/?#")))
                        abort();
        }
        free(s);
        return 0;
}
