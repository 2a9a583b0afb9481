/* tls-pump.h - TLS for code that speaks plain sockets (the follower's
 * thread-per-connection MHD daemon and its connections to the leader): a
 * thread carries the bytes between a TLS session and one end of a
 * socketpair, whose other end the plain code uses.
 *
 * Server side, gp_tls_acceptor: accepts on a listening socket and gives
 * each connection a thread that waits for its first byte; a TLS
 * ClientHello gets a session with the listener keeper's credentials (as
 * the main listener, gateway/front.c) and its plaintext handed over on a
 * socketpair with the client's address; plaintext from loopback (or any
 * address with server.tls.plaintext: any) is handed over as it is;
 * plaintext from elsewhere gets a 400 saying to use https://.
 *
 * Client side, gp_tls_pump_dial: TLS over a connected socket, the server
 * verified against a CA and a host name.
 *
 * Threads: every pump thread is detached and uses only its own sockets,
 * session and credentials' reference once its connection is handed over,
 * so it may outlive the acceptor and what the handover called. */
#ifndef GP_SERVER_TLS_PUMP_H
#define GP_SERVER_TLS_PUMP_H

#include <stddef.h>
#include <sys/socket.h>

#include "base/iplimit.h"
#include "base/tls-keep.h"

/* Takes fd (a plain connection from sa: a client's socket, or a
 * socketpair end carrying a TLS client's bytes): 0, or -1 when it was not
 * taken (it has been closed then).  Called from an acceptor thread. */
typedef int (*gp_tls_handoff_fn)(void *ud, int fd, const struct sockaddr *sa, socklen_t sl);

typedef struct gp_tls_acceptor gp_tls_acceptor;

/* Accepts on lfd (non-blocking; not closed here) until stopped: each new
 * connection is counted in ipl at once (one over its address's limit gets
 * 429 and is closed), its first byte must come within timeout_ms, and its
 * handshake end within it too.  A connection fn takes keeps its count
 * (whoever closes it puts it back); one not taken is put back here.  0 or
 * -errno. */
int gp_tls_acceptor_start(int lfd, gp_tls_keep *k, int timeout_ms, gp_iplimit *ipl, gp_tls_handoff_fn fn, void *ud,
                          gp_tls_acceptor **ret);
/* Stops accepting and waits (at most a fraction of a second) until no
 * connection thread can call fn any more; pumps already handed over go on
 * until their sockets close.  Takes NULL. */
void gp_tls_acceptor_stop(gp_tls_acceptor *a);

/* TLS over the connected socket fd (taken: closed on failure) to host,
 * whose certificate must chain to ca_pem and name host; the handshake
 * within timeout_ms.  The plain end of a socketpair a pump thread carries,
 * or -errno (-EPROTO: the handshake or the verification failed). */
int gp_tls_pump_dial(int fd, const char *host, const char *ca_pem, size_t ca_len, int timeout_ms);

#endif
