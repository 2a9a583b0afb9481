/* fuzz-submit.c - libFuzzer target for the task submission parser
 * (POST /api/v1/tasks bodies, src/server/submit.c).
 *
 * Checks the contract, not only the absence of crashes: on success the
 * task is within its documented bounds (priority 0..9, 1..GP_MAX_GPUS
 * GPUs, NUL-terminated strings, a spec that is valid JSON for batch tasks
 * and none for leases); on failure the code is -EINVAL or -ENOMEM and the
 * message is a non-empty NUL-terminated string.  Any violation aborts.
 * Bodies go through gp_submit_parse_array (so "array" specs, core/array.c,
 * are fuzzed too): a parsed array has 1..max_array_size distinct indices
 * in ascending order, 0..GP_ARRAY_INDEX_MAX, a limit >= 0, belongs to a
 * batch task, and formats back to a spec that parses to the same list. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/submit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        /* the first byte picks the caller: no tenant key, or key of tenant
         * "t1" allowed P3 and more relaxed, refusing or clamping */
        gp_submit_limits lim = {.default_lease_ttl_s = 60, .max_lease_ttl_s = 86400, .default_max_retries = 1,
                                .default_priority = 5};
        if (size >= 2 && data[0] == 'K') {
                lim.tenant = "t1";
                lim.max_priority = 3;
                lim.clamp_priority = data[1] == 'C';
                data += 2;
                size -= 2;
        }
        lim.max_array_size = 5000;
        gp_task t;
        gp_array_spec a;
        char err[256];
        memset(err, 'x', sizeof(err));
        int r = gp_submit_parse_array((const char *)data, size, &lim, &t, &a, err, sizeof(err));
        if (r < 0) {
                if ((r != -EINVAL && r != -ENOMEM && r != -EPERM) || !memchr(err, '\0', sizeof(err)) ||
                    (r != -ENOMEM && !err[0]))
                        abort();
                return 0;
        }
        if (t.priority < 0 || t.priority > 9 || t.gpu_request < 1 || t.gpu_request > GP_MAX_GPUS ||
            t.memory_mb < 0 || !memchr(t.tenant, '\0', sizeof(t.tenant)) || !memchr(t.name, '\0', sizeof(t.name)) ||
            !memchr(t.model, '\0', sizeof(t.model)) || !memchr(t.gpu_model, '\0', sizeof(t.gpu_model)) ||
            t.is_lease != (t.spec == NULL) || (t.memory_mb == 0 && !t.exclusive) ||
            t.priority < lim.max_priority || (lim.tenant && strcmp(t.tenant, lim.tenant)))
                abort();
        if (t.spec) {
                json_t *j = json_loads(t.spec, 0, NULL);
                if (!j || !json_is_array(json_object_get(j, "command")))
                        abort();
                json_decref(j);
        }
        if (a.n > 0) {
                if (a.n > 5000 || !a.idx || t.is_lease || a.limit < 0)
                        abort();
                for (size_t i = 0; i < a.n; i++)
                        if (a.idx[i] < 0 || a.idx[i] > GP_ARRAY_INDEX_MAX || (i && a.idx[i] <= a.idx[i - 1]))
                                abort();
                /* format and parse again: the same elements and limit */
                size_t need = gp_array_spec_format(a.idx, a.n, a.limit, NULL, 0);
                char *buf = malloc(need + 1);
                if (!buf)
                        abort();
                gp_array_spec_format(a.idx, a.n, a.limit, buf, need + 1);
                gp_array_spec b;
                char e2[160];
                if (need <= GP_ARRAY_SPEC_MAX) {
                        if (gp_array_spec_parse(buf, need, 5000, &b, e2, sizeof(e2)) != 0 || b.n != a.n ||
                            b.limit != a.limit || memcmp(a.idx, b.idx, a.n * sizeof(*a.idx)) != 0)
                                abort();
                        gp_array_spec_done(&b);
                }
                free(buf);
        } else if (a.idx) {
                abort();
        }
        gp_array_spec_done(&a);
        gp_task_done(&t);
        return 0;
}
