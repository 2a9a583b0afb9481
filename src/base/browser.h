/* browser.h - what a web browser may make the server do (cross-site
 * request forgery and CORS), decided from a request's head alone.
 *
 * A page on any web site can make the browser that shows it send a POST
 * to http://127.0.0.1:8080 with a text/plain, form or multipart body and
 * no preflight; with no API keys configured a loopback client is admin.
 * So a request that changes state (any method but GET, HEAD and OPTIONS)
 * is served only when
 *   - it comes from no browser, or from the server's own origin, or from
 *     an origin listed in server.allowed_origins: its Origin header (when
 *     sent) names the origin the request was sent to (Origin's host:port
 *     equals the Host header) and Sec-Fetch-Site (when sent) is
 *     "same-origin" or "none" -- else 403;
 *   - its body is JSON: Content-Type application/json (parameters such as
 *     "; charset=utf-8" allowed), which a page can send elsewhere only
 *     after a CORS preflight -- else 415.  A request with no body and no
 *     Content-Type (`curl -X POST .../heartbeat`) is served.
 * An OPTIONS request with an Origin is a CORS preflight: answered 204
 * (with the Access-Control-* headers) for a listed origin, 403 otherwise.
 * Answers to a listed origin carry Access-Control-Allow-Origin (that
 * origin, never "*") and Vary: Origin.  Pure; thread-safe.
 */
#ifndef GP_BASE_BROWSER_H
#define GP_BASE_BROWSER_H

#include <stdbool.h>
#include <stddef.h>

#define GP_ORIGIN_MAX 256         /* an origin "scheme://host[:port]", with the NUL */
#define GP_MAX_ALLOWED_ORIGINS 32 /* entries in server.allowed_origins */

/* The headers of a CORS preflight answer (besides Access-Control-Allow-Origin
 * and Vary: Origin). */
#define GP_CORS_ALLOW_METHODS "GET, HEAD, POST, PUT, DELETE"
#define GP_CORS_ALLOW_HEADERS "Authorization, Content-Type, X-Priority"
#define GP_CORS_MAX_AGE "600"

/* A request's head, as far as the check needs it.  NULL = header absent. */
typedef struct gp_browser_req {
        const char *method;         /* "POST", ... (never NULL) */
        const char *content_type;   /* Content-Type */
        bool has_body;              /* a body was sent (Content-Length > 0, chunked, or bytes came) */
        const char *origin;         /* Origin */
        const char *sec_fetch_site; /* Sec-Fetch-Site */
        const char *host;           /* Host */
} gp_browser_req;

/* Decide about request q.  allowed[0..nallowed) are the exact origins of
 * server.allowed_origins (compared case-insensitively).  Returns
 *   0    serve it;
 *   204  it is a CORS preflight from an allowed origin: answer 204 with the
 *        GP_CORS_* headers;
 *   403  a state-changing request from another site, or a preflight from
 *        an origin not allowed: refuse, with no CORS headers;
 *   415  a state-changing request whose body is not declared JSON.
 * *ret_cors is set always: the allowed origin (pointing into allowed) that
 * answers must name in Access-Control-Allow-Origin, or NULL for none.
 * msg receives the reason for 403 and 415 (NUL-terminated; msglen > 0). */
int gp_browser_check(const gp_browser_req *q, const char (*allowed)[GP_ORIGIN_MAX], size_t nallowed,
                     const char **ret_cors, char *msg, size_t msglen);

/* Is the method one that may change state (anything but GET, HEAD and
 * OPTIONS)? */
bool gp_browser_state_changing(const char *method);

/* The DNS-rebinding guard.  With no API keys configured every loopback
 * client is admin, and a page of another site whose name the attacker
 * re-points at 127.0.0.1 is, to the browser, same-origin with this
 * server: it could read answers and send JSON writes.  Such a request
 * names the attacker's domain in Host.  True when Host (its value, NULL
 * when absent) names this machine by address or by a name that cannot be
 * re-pointed from outside: an IPv4 or [IPv6] literal, "localhost" or
 * "*.localhost", the machine's host name (hostname, may be NULL), a
 * single label with no dot (an /etc/hosts alias: no public DNS name an
 * attacker's page could live at), or the host of an origin in
 * allowed[0..nallowed); any port.  An absent Host is
 * true (HTTP/1.0 clients; browsers always send it). */
bool gp_browser_host_local(const char *host, const char *hostname, const char (*allowed)[GP_ORIGIN_MAX],
                           size_t nallowed);

/* Is s an origin server.allowed_origins may list: "http://" or "https://",
 * a host name, IPv4 or [IPv6] literal, an optional ":PORT" (1..65535, not
 * the scheme's default, which browsers leave out), nothing after it (no
 * path, not even "/"), under GP_ORIGIN_MAX bytes.  On false *why says what
 * is wrong (a static string). */
bool gp_browser_origin_ok(const char *s, const char **why);

#endif
