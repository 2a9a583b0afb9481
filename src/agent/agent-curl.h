/* agent-curl.h - the agent's transfers driven through epoll
 * (curl_multi_socket_action), so that each wake costs what moved, not a
 * look at every transfer.
 *
 * curl_multi_perform and curl_multi_poll look at every transfer of the
 * multi handle at every call: a poll(2) of each socket, a walk of each
 * connection's filters (its TLS one too), and one poll(2) of them all.
 * With --sim-nodes 1000 every node holds a sync open, so each answer that
 * woke the agent cost some 2,000 such looks; under TLS more (issue 22,
 * docs/benchmarks.md).  Here curl says which sockets to watch (an epoll
 * set, level triggered) and is told which are ready.
 *
 * Single-threaded: every call from the agent's loop. */
#ifndef GP_AGENT_CURL_H
#define GP_AGENT_CURL_H

#include <curl/curl.h>
#include <poll.h>
#include <stddef.h>

/* Makes the epoll set of m and has curl keep it (call before the first
 * transfer is added).  The epoll descriptor, or -errno. */
int gp_agent_curl_open(CURLM *m);

/* Moves the transfers whose sockets are ready or whose timers are due
 * (new transfers start here: curl gives them a timer of 0). */
void gp_agent_curl_run(CURLM *m, int epfd);

/* Waits until one of curl's sockets or of fds[1..n) is ready, curl's next
 * timer, or wait_ms (-1: no limit but curl's).  fds[0] is taken for the
 * epoll set; revents of fds[1..n) say which were ready. */
void gp_agent_curl_wait(CURLM *m, int epfd, struct pollfd *fds, size_t n, int wait_ms);

#endif
