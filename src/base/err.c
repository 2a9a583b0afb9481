/* err.c - descriptions of gpupool error codes. */
#include "base/err.h"

#include <string.h>

const char *gp_strerror(int code) {
        if (code < 0)
                code = -code;
        switch (code) {
        case 0: return "success";
        case GP_EQUEUEFULL: return "queue is full";
        case GP_ESTATE: return "not allowed in the current state";
        case GP_EPARSE: return "malformed input";
        case GP_ESTORE: return "store failure";
        case GP_ENOGPU: return "no GPU backend available";
        case GP_EFENCED: return "fenced: another server holds the leader lease";
        case GP_EMPS: return "the GPU's MPS control daemon could not be started";
        default: break;
        }
        if (code < GP_EFIRST)
                return strerrordesc_np(code) ? strerrordesc_np(code) : "unknown error";
        return "unknown error";
}
