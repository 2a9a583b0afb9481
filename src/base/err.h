/* err.h - the one error contract of gpupool.
 *
 * Every function that can fail returns 0 on success and a negative code on
 * failure: a negated errno value (-ENOMEM, -EINVAL, -ENOENT, ...) or one of
 * the GP_E* codes below, which live above the errno range.  Output
 * parameters are named ret_* and are written only on success.
 */
#ifndef GP_BASE_ERR_H
#define GP_BASE_ERR_H

#include <errno.h>

enum {
        GP_EFIRST = 4096,
        GP_EQUEUEFULL,  /* a queue is at its depth limit */
        GP_ESTATE,      /* the object is in a state that forbids the action */
        GP_EPARSE,      /* malformed input */
        GP_ESTORE,      /* the store failed */
        GP_ENOGPU,      /* no GPU backend could be opened */
        GP_EFENCED,     /* the store handle's leader lease was taken over: nothing was stored */
        GP_EMPS,        /* a GPU's MPS control daemon could not be started */
        GP_ELAST,
};

/* A static, human-readable description of a code returned by a gp_ function
 * (negative or positive; 0 gives "success").  Never NULL. Thread-safe. */
const char *gp_strerror(int code);

#endif
