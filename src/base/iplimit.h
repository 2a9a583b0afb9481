/* iplimit.h - open connections per client address
 * (server.max_connections_per_ip), shared by threads: the server's HTTP
 * loops (gateway/front.c) and a follower's connection threads
 * (server/follower.c) count their connections here.
 *
 * An open-addressing table of addresses (IPv6, IPv4 mapped), hashed with
 * a random seed so that an outsider cannot pick addresses that collide,
 * sized for at most half full; a mutex that is a leaf lock. */
#ifndef GP_BASE_IPLIMIT_H
#define GP_BASE_IPLIMIT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct gp_ipslot gp_ipslot;

typedef struct gp_iplimit {
        pthread_mutex_t mu;        /* the table */
        gp_ipslot *t;              /* linear probing; count 0 = free */
        size_t cap;                /* a power of two, over twice max_connections */
        int per_ip;                /* the limit */
} gp_iplimit;

/* A table for max_connections open connections, per_ip from one address.
 * 0 or -ENOMEM (then done may still be called). */
int gp_iplimit_init(gp_iplimit *l, int per_ip, int max_connections);
/* Free the table; takes a zeroed one and a failed init. */
void gp_iplimit_done(gp_iplimit *l);
/* Count a new connection from sa: 0 (counted: put it when it closes), 1
 * (not an IP address: not counted) or -EMFILE (its address holds per_ip
 * already).  Any thread. */
int gp_iplimit_take(gp_iplimit *l, const struct sockaddr *sa);
/* A counted connection from sa closed.  Any thread. */
void gp_iplimit_put(gp_iplimit *l, const struct sockaddr *sa);

#endif
