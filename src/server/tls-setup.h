/* tls-setup.h - the server's listener TLS from its config (server.tls):
 * the names of a generated certificate, the keeper, its reload thread. */
#ifndef GP_SERVER_TLS_SETUP_H
#define GP_SERVER_TLS_SETUP_H

#include <stddef.h>

#include "base/tls-keep.h"
#include "config/config.h"

/* Opens the keeper of cfg's credentials (making DATA_DIR/tls's when no
 * cert is configured), starts its reload thread and makes it the process's
 * listener keeper (gp_tls_set_listener).  Logs the choice of
 * server.tls.plaintext: any as a warning.  0, or a negative code with a
 * message in err.  Call once, from the main thread, before the listeners
 * accept. */
int gp_server_tls_start(const gp_config *cfg, char *err, size_t errlen);
/* A few words for the start-up line: how the listener serves. */
const char *gp_server_tls_mode(void);
/* SIGHUP: look at the certificate files now. */
void gp_server_tls_reload(void);
/* Stops the reload thread (the process is ending). */
void gp_server_tls_stop(void);

#endif
