/* tls-share.h - the CA that the servers of one PostgreSQL store share
 * (cluster.server_id set, generated certificates): see tls-share.c. */
#ifndef GP_SERVER_TLS_SHARE_H
#define GP_SERVER_TLS_SHARE_H

#include <stddef.h>

#include "config/config.h"

/* Makes dir/ca.crt and ca.key the cluster's CA: the one stored in cfg's
 * store, or else this server's (made now if missing), then stored there.
 * Call before the keeper opens dir.  0, or a negative code with a message
 * in err.  Blocks while another server agrees (at most ~45 s). */
int gp_tls_share_ca(const gp_config *cfg, const char *dir, char *err, size_t errlen);

#endif
