/* agent-curl.c - the agent's transfers driven through epoll (see
 * agent-curl.h).
 *
 * Invariants: the epoll set holds what curl last asked for each of its
 * sockets (CURLMOPT_SOCKETFUNCTION); a socket curl closed has left the set
 * with its close (curl's sockets are never dup'd), so a later socket with
 * the same number is added anew (MOD says ENOENT). */
#include "agent/agent-curl.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "base/log.h"

#define EVENTS 256    /* ready sockets taken per epoll_wait */
#define DRAIN 16      /* epoll_waits per run at most: the loop comes back soon */

static int on_socket(CURL *e, curl_socket_t s, int what, void *ud, void *sp) {
        (void)e;
        (void)sp;
        int epfd = (int)(intptr_t)ud;
        if (what == CURL_POLL_REMOVE) {
                (void)epoll_ctl(epfd, EPOLL_CTL_DEL, s, NULL); /* gone already when curl closed it first */
                return 0;
        }
        struct epoll_event ev = {.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) |
                                           ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u),
                                 .data.fd = s};
        if (epoll_ctl(epfd, EPOLL_CTL_MOD, s, &ev) == 0)
                return 0;
        if (errno == ENOENT && epoll_ctl(epfd, EPOLL_CTL_ADD, s, &ev) == 0)
                return 0;
        /* the transfer cannot be watched: it ends at its own timeout (CURLOPT_TIMEOUT_MS)
         * and is sent again.  Not -1: curl would mark the whole multi handle dead */
        gp_warn("agent: cannot watch a connection's socket: %s", strerror(errno));
        return 0;
}

int gp_agent_curl_open(CURLM *m) {
        int epfd = epoll_create1(EPOLL_CLOEXEC);
        if (epfd < 0)
                return -errno;
        if (curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, on_socket) != CURLM_OK ||
            curl_multi_setopt(m, CURLMOPT_SOCKETDATA, (void *)(intptr_t)epfd) != CURLM_OK) {
                close(epfd);
                return -EINVAL;
        }
        return epfd;
}

void gp_agent_curl_run(CURLM *m, int epfd) {
        struct epoll_event ev[EVENTS];
        int running;
        for (int round = 0; round < DRAIN; round++) {
                int n = epoll_wait(epfd, ev, EVENTS, 0);
                for (int i = 0; i < n; i++) {
                        uint32_t e = ev[i].events;
                        int bits = ((e & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) ? CURL_CSELECT_IN : 0) |
                                   ((e & EPOLLOUT) ? CURL_CSELECT_OUT : 0) | ((e & EPOLLERR) ? CURL_CSELECT_ERR : 0);
                        curl_multi_socket_action(m, ev[i].data.fd, bits, &running);
                }
                if (n < EVENTS)
                        break;
        }
        long t = -1;
        if (curl_multi_timeout(m, &t) == CURLM_OK && t == 0)
                curl_multi_socket_action(m, CURL_SOCKET_TIMEOUT, 0, &running);
}

void gp_agent_curl_wait(CURLM *m, int epfd, struct pollfd *fds, size_t n, int wait_ms) {
        long t = -1;
        if (curl_multi_timeout(m, &t) == CURLM_OK && t >= 0 && (wait_ms < 0 || t < wait_ms))
                wait_ms = (int)t;
        fds[0] = (struct pollfd){.fd = epfd, .events = POLLIN};
        for (size_t i = 1; i < n; i++)
                fds[i].revents = 0;
        if (poll(fds, (nfds_t)n, wait_ms) < 0 && errno != EINTR)
                gp_debug("agent: poll: %s", strerror(errno));
}
