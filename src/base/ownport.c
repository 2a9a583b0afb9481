/* ownport.c - see ownport.h. */
#include "base/ownport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>

static uint64_t own[65536 / 64]; /* bit p: port p is a socket of ours, bound, open */

static bool loopback4(const struct sockaddr *sa) {
        return sa && sa->sa_family == AF_INET &&
               (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
}

int gp_ownport_bind(int fd, const struct sockaddr *dest) {
        if (!loopback4(dest))
                return 0;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof(sa);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
                return -errno;
        int port = ntohs(sa.sin_port);
        if (port <= 0)
                return -EADDRNOTAVAIL;
        __atomic_fetch_or(&own[port >> 6], (uint64_t)1 << (port & 63), __ATOMIC_SEQ_CST);
        return port;
}

void gp_ownport_forget(int port) {
        if (port <= 0 || port > 65535)
                return;
        __atomic_fetch_and(&own[port >> 6], ~((uint64_t)1 << (port & 63)), __ATOMIC_SEQ_CST);
}

void gp_ownport_forget_fd(int fd) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 && loopback4((struct sockaddr *)&sa))
                gp_ownport_forget(ntohs(sa.sin_port));
}

bool gp_ownport_is_own(const struct sockaddr *peer) {
        if (!loopback4(peer))
                return false;
        int port = ntohs(((const struct sockaddr_in *)peer)->sin_port);
        return (__atomic_load_n(&own[port >> 6], __ATOMIC_SEQ_CST) >> (port & 63)) & 1;
}
