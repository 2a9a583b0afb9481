/* fuzz-reason-code.c - libFuzzer target for the server's reasons read back
 * as a code and arguments (gp_reason_code, src/server/reason-code.c): the
 * input is a task's reason text (it holds what users chose: a command, a
 * directory).  Checks the contract: NULL, or an object with a string code
 * and an array of args, each a string or a nested {text, code, args} whose
 * text is part of the input; every argument's text is part of the input;
 * the queued form's note is the input's tail.  Any violation aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/reason-code.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const json_t *o, const char *in, int depth) {
        if (depth > 4 || !json_is_object(o) || !json_is_string(json_object_get(o, "code")))
                abort();
        const json_t *args = json_object_get(o, "args");
        if (!json_is_array(args) || json_array_size(args) > 4)
                abort();
        for (size_t i = 0; i < json_array_size(args); i++) {
                const json_t *a = json_array_get(args, i);
                const char *t = json_is_object(a) ? json_string_value(json_object_get(a, "text"))
                                                  : json_string_value(a);
                if (!t || !strstr(in, t))
                        abort();
                if (json_is_object(a))
                        check(a, in, depth + 1);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size > 1024)
                return 0;
        char in[1025];
        memcpy(in, data, size);
        in[size] = '\0';
        json_t *o = gp_reason_code(in);
        if (o) {
                if (strlen(in) >= 200) /* GP_REASON_MAX: longer texts are not read */
                        abort();
                check(o, in, 0);
                char *s = json_dumps(o, JSON_COMPACT);
                free(s);
                json_decref(o);
        }
        /* the queued form: the first half as the core, the whole as shown */
        char core[513];
        size_t h = strlen(in) / 2;
        memcpy(core, in, h);
        core[h] = '\0';
        json_t *q = gp_reason_code_queued(core, in);
        if (q) {
                check(q, in, 0);
                const char *note = json_string_value(json_object_get(q, "note"));
                if (!note || strcmp(note, in + h) != 0)
                        abort();
                json_decref(q);
        }
        return 0;
}
