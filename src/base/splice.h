/* splice.h - carry bytes both ways between two connected stream sockets
 * (the relays of model replicas on agent nodes: server/relay.c,
 * agent/agent-relay.c).  Thread-safe: uses only its arguments. */
#ifndef GP_BASE_SPLICE_H
#define GP_BASE_SPLICE_H

/* Copies a->b and b->a until both directions have ended (an EOF is passed
 * on as a half close, shutdown(SHUT_WR)), either side fails, or nothing
 * moves for idle_ms (0: no limit).  Blocks the calling thread; closes
 * neither socket. */
void gp_splice_fds(int a, int b, int idle_ms);

#endif
