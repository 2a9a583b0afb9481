/* splice.c - two-way byte copy between sockets (see splice.h).
 * Invariants: at most one block is buffered each way; a direction's EOF is
 * passed on only once what was buffered for it went out. */
#include "base/splice.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>

#define BLOCK 16384

typedef struct way {
        int from, to;
        char buf[BLOCK];
        size_t len, off;
        bool eof;  /* from ended */
        bool done; /* eof passed on */
} way;

/* One step of w: read when empty, write what is buffered.  -1 on a failure. */
static int step(way *w, short rev_from, short rev_to) {
        if (w->off == w->len && !w->eof && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t n = recv(w->from, w->buf, sizeof(w->buf), MSG_DONTWAIT);
                if (n > 0) {
                        w->len = (size_t)n;
                        w->off = 0;
                } else if (n == 0) {
                        w->eof = true;
                } else if (errno != EAGAIN && errno != EINTR) {
                        return -1;
                }
        }
        if (w->off < w->len && (rev_to & (POLLOUT | POLLERR | POLLHUP))) {
                ssize_t n = send(w->to, w->buf + w->off, w->len - w->off, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n > 0)
                        w->off += (size_t)n;
                else if (n < 0 && errno != EAGAIN && errno != EINTR)
                        return -1;
        }
        if (w->eof && w->off == w->len && !w->done) {
                shutdown(w->to, SHUT_WR);
                w->done = true;
        }
        return 0;
}

void gp_splice_fds(int a, int b, int idle_ms) {
        way *w = calloc(2, sizeof(*w));
        if (!w)
                return;
        w[0].from = a;
        w[0].to = b;
        w[1].from = b;
        w[1].to = a;
        while (!(w[0].done && w[1].done)) {
                struct pollfd p[2] = {{.fd = a}, {.fd = b}};
                /* a: readable for way 0 (when it has room), writable for way 1 (when it holds bytes) */
                if (w[0].off == w[0].len && !w[0].eof)
                        p[0].events |= POLLIN;
                if (w[1].off < w[1].len)
                        p[0].events |= POLLOUT;
                if (w[1].off == w[1].len && !w[1].eof)
                        p[1].events |= POLLIN;
                if (w[0].off < w[0].len)
                        p[1].events |= POLLOUT;
                int n = poll(p, 2, idle_ms > 0 ? idle_ms : -1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break; /* idle too long, or poll failed */
                if (step(&w[0], p[0].revents, p[1].revents) < 0 || step(&w[1], p[1].revents, p[0].revents) < 0)
                        break;
                /* a side that hung up takes nothing more: the way to it ends (no busy loop on POLLHUP) */
                for (int i = 0; i < 2; i++)
                        if ((p[i].revents & (POLLHUP | POLLERR)) && !w[1 - i].done) {
                                w[1 - i].eof = w[1 - i].done = true;
                                w[1 - i].off = w[1 - i].len;
                        }
        }
        free(w);
}
