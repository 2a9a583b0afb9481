"""Black-box tests: no web page can run a command or change state.

A page on any site can make the browser showing it send a POST with a
text/plain, form or multipart body to http://127.0.0.1:PORT without a CORS
preflight, and with no API keys configured a loopback client is admin.  So
every state-changing request (any method but GET, HEAD, OPTIONS) must
declare a JSON body (415 otherwise) and come from no browser, the server's
own origin or an origin in server.allowed_origins (403 otherwise); a
listed origin gets CORS headers and its preflights answered
(src/base/browser.c; checked once in http.c's handler and once in the
gateway's front for its own /v1 connections).

Every non-GET route is listed in ROUTES and driven through both the
libmicrohttpd path and, for /v1, the gateway's front (a connection whose
first request is /v1) and MHD after a non-/v1 first request on one
keep-alive connection.  The daemon runs with no keys (the dangerous case)."""
import http.client
import json

import pytest

from gw_upstream import Upstream

pytestmark = pytest.mark.e2e

ALLOWED = "https://ui.example.com"
EVIL = "https://evil.example"

LEASE = {"name": "l", "memory_mb": 10, "lease_ttl_s": 600}


def config(up_url):
    return ("gpus: {backend: sim}\n"
            "server:\n"
            "  allowed_origins: [\"%s\", \"http://127.0.0.1:3000\"]\n"
            "tenants:\n"
            "  - {id: lab}\n"
            "gateway:\n"
            "  queue_timeout_sec: 30\n"
            "  models:\n"
            "    - {name: m1, context: 4096, upstreams: [\"%s\"]}\n" % (ALLOWED, up_url))


@pytest.fixture
def up():
    u = Upstream("up1")
    yield u
    u.stop()


# ---------------------------------------------------------------------------
# a client that sends exactly the headers given

class Answer:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case name -> value
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "%d %r %r" % (self.status, self.headers, self.body[:300])


def _read(c):
    r = c.getresponse()
    return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())


def send(d, method, path, body=None, headers=None, via="new"):
    """One request on a fresh connection ("new": for /v1 the gateway's front
    serves it), or after GET /api/v1/gpus on the same keep-alive connection
    ("after_get": MHD serves the whole connection, /v1 included)."""
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    try:
        if via == "after_get":
            c.request("GET", "/api/v1/gpus")
            a = _read(c)
            assert a.status == 200, a
        hdrs = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=hdrs)
        return _read(c)
    finally:
        c.close()


def jsend(d, method, path, body=None):
    a = send(d, method, path, body)
    assert a.status < 300, (method, path, a)
    return a.json() if a.body else None


# ---------------------------------------------------------------------------
# every route that may change state: (name, method, path maker, JSON body, statuses when served)
# The path maker gets the daemon and makes what the route needs (a lease to cancel, ...).

def new_lease(d):
    return jsend(d, "POST", "/api/v1/tasks", LEASE)["id"]


def chat(text):
    return {"model": "m1", "messages": [{"role": "user", "content": text}], "max_tokens": 8}


ROUTES = [
    ("submit", "POST", lambda d: "/api/v1/tasks", {"name": "x", "memory_mb": 10, "lease_ttl_s": 600}, (201,)),
    ("submit (alias)", "POST", lambda d: "/api/tasks", {"name": "y", "memory_mb": 10, "lease_ttl_s": 600}, (201,)),
    ("cancel", "POST", lambda d: "/api/v1/tasks/%d/cancel" % new_lease(d), None, (200,)),
    ("cancel (DELETE)", "DELETE", lambda d: "/api/v1/tasks/%d" % new_lease(d), None, (200,)),
    ("heartbeat", "POST", lambda d: "/api/v1/tasks/%d/heartbeat" % new_lease(d), None, (200,)),
    ("release", "POST", lambda d: "/api/v1/tasks/%d/release" % new_lease(d), {"exit_code": 0}, (200,)),
    ("drain", "POST", lambda d: "/admin/gpus/local:3/drain", None, (200,)),
    ("undrain", "POST", lambda d: "/admin/gpus/local:3/undrain", None, (200,)),
    ("tenant create", "PUT", lambda d: "/admin/tenants/newt", {"weight": 3}, (200, 201)),
    ("tenant update", "PUT", lambda d: "/admin/tenants/lab", {"weight": 7}, (200,)),
    ("tenant delete (no such route)", "DELETE", lambda d: "/admin/tenants/lab", None, (405,)),
    ("weights", "PUT", lambda d: "/admin/scheduler/weights", {"weights": [300, 128, 64, 32, 16, 8, 4, 2, 1, 1]},
     (200,)),
    ("credit", "POST", lambda d: "/admin/tenants/lab/credit", {"amount": "1.00"}, (200,)),
    ("usage tokens", "POST", lambda d: "/admin/usage/tokens",
     {"tenant_id": "lab", "model": "m1", "prompt_tokens": 5, "completion_tokens": 1}, (200,)),
    ("alerts (GET only)", "POST", lambda d: "/api/v1/alerts", None, (405,)),
    ("monitor metrics (GET only)", "POST", lambda d: "/api/v1/monitor/metrics", None, (405,)),
    ("monitor history (GET only)", "POST", lambda d: "/api/v1/monitor/history", None, (405,)),
    ("prometheus (GET only)", "POST", lambda d: "/metrics", None, (405,)),
    ("chat (front)", "POST", lambda d: "/v1/chat/completions", chat("hi"), (200,)),
    ("completions (front)", "POST", lambda d: "/v1/completions", {"model": "m1", "prompt": "hi", "max_tokens": 8},
     (200,)),
    ("embeddings (front)", "POST", lambda d: "/v1/embeddings", {"model": "m1", "input": "hi"}, (200,)),
    ("chat (MHD, keep-alive)", "POST", lambda d: "/v1/chat/completions", chat("hi"), (200,)),
    ("embeddings (MHD, keep-alive)", "POST", lambda d: "/v1/embeddings", {"model": "m1", "input": "hi"}, (200,)),
    # last: a key made at run time turns auth on for the rest of the daemon's life
    ("tenant key", "POST", lambda d: "/admin/tenants/lab/keys", None, (201,)),
]


def via(name):
    return "after_get" if "MHD, keep-alive" in name else "new"


def body_of(route):
    return json.dumps(route[3]).encode() if route[3] is not None else None


def state(d, up):
    """What any route could change, read back."""
    tasks = jsend(d, "GET", "/api/v1/tasks?limit=1000")["tasks"]
    gpus = [(g["id"], g["drained"]) for g in jsend(d, "GET", "/api/v1/gpus")["gpus"]]
    tenants = jsend(d, "GET", "/api/v1/tenants")
    audit = jsend(d, "GET", "/admin/audit")["audit"]
    weights = jsend(d, "GET", "/admin/scheduler/weights")
    usage = jsend(d, "GET", "/api/v1/usage")["total"]
    return {"tasks": tasks, "gpus": gpus, "tenants": tenants, "audit": audit, "weights": weights,
            "tokens": (usage["prompt_tokens"], usage["completion_tokens"]), "upstream": len(up.received)}


def error_code(a):
    e = a.json()["error"]
    return e["code"], e["message"]


MULTIPART = (b'--b0undary\r\nContent-Disposition: form-data; name="x"\r\n\r\n'
             b'{"command": ["sh", "-c", "touch /tmp/pwned"]}\r\n--b0undary--\r\n')

NON_JSON = [  # (Content-Type, body) a page may send without a preflight
    ("text/plain", None),
    ("text/plain;charset=UTF-8", None),
    ("application/x-www-form-urlencoded", b"a=1"),
    ("multipart/form-data; boundary=b0undary", MULTIPART),
]


# ---------------------------------------------------------------------------

def test_the_pure_check_has_unit_tests():
    """The decision itself (base/browser.c) is unit-tested in
    tests/unit/test-browser.c; this file drives the daemon."""


def test_non_json_bodies_are_refused_with_415_and_change_nothing(daemon_factory, up):
    d = daemon_factory(config(up.url))
    new_lease(d)  # something to cancel or heartbeat by mistake
    for route in ROUTES:
        name, method, path_of, _, _ = route
        path = path_of(d)
        before = state(d, up)
        for ctype, raw in NON_JSON:
            body = raw if raw is not None else (body_of(route) or b'{"memory_mb": 10}')
            a = send(d, method, path, body, {"Content-Type": ctype}, via=via(name))
            assert a.status == 415, (name, ctype, a)
            code, msg = error_code(a)
            assert code == "unsupported_media_type" and "application/json" in msg, (name, a)
        # a body with no Content-Type at all, and no body but a non-JSON type
        a = send(d, method, path, b'{"exit_code": 0}', {}, via=via(name))
        assert a.status == 415, (name, a)
        a = send(d, method, path, None, {"Content-Type": "text/plain"}, via=via(name))
        assert a.status == 415, (name, a)
        assert state(d, up) == before, name


def test_cross_site_requests_are_refused_with_403_and_change_nothing(daemon_factory, up):
    d = daemon_factory(config(up.url))
    new_lease(d)
    cross = [
        {"Origin": EVIL},
        {"Origin": "null"},
        {"Origin": "http://localhost:%d" % d.port},        # another origin naming this machine
        {"Origin": "http://127.0.0.1:%d" % (d.port + 1)},  # another port
        {"Origin": ALLOWED + ".evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://127.0.0.1:%d" % d.port, "Sec-Fetch-Site": "cross-site"},
    ]
    for route in ROUTES:
        name, method, path_of, _, _ = route
        path = path_of(d)
        before = state(d, up)
        for hdrs in cross:
            h = dict(hdrs)
            body = body_of(route)
            if body is not None:
                h["Content-Type"] = "application/json"
            a = send(d, method, path, body, h, via=via(name))
            assert a.status == 403, (name, hdrs, a)
            code, msg = error_code(a)
            assert code == "cross_site_request" and "server.allowed_origins" in msg, (name, a)
            assert "access-control-allow-origin" not in a.headers, (name, a)
            # text/plain from another site: refused as well
            a = send(d, method, path, b"{}", dict(hdrs, **{"Content-Type": "text/plain"}), via=via(name))
            assert a.status in (403, 415), (name, a)
        assert state(d, up) == before, name
    # the command never ran
    assert not any(t.get("kind") == "batch" for t in jsend(d, "GET", "/api/v1/tasks?limit=1000")["tasks"])


def served(d, route, headers, up):
    name, method, path_of, _, ok = route
    path = path_of(d)
    h = dict(headers)
    body = body_of(route)
    if body is not None:
        h["Content-Type"] = "application/json; charset=utf-8"
    a = send(d, method, path, body, h, via=via(name))
    assert a.status in ok, (name, headers, a)
    return a


def test_same_origin_and_non_browser_requests_work(daemon_factory, up):
    d = daemon_factory(config(up.url))
    own = {"Origin": "http://127.0.0.1:%d" % d.port, "Sec-Fetch-Site": "same-origin"}
    for route in ROUTES[:-1]:
        a = served(d, route, own, up)
        assert "access-control-allow-origin" not in a.headers, (route[0], a)
        served(d, route, {}, up)  # curl, the CLI, scripts: no Origin at all
        served(d, route, {"Sec-Fetch-Site": "none"}, up)  # typed into the address bar
    served(d, ROUTES[-1], own, up)
    assert len(up.received) == 3 * 5  # five /v1 routes, three times each


def test_allowed_origin_works_with_cors_headers_and_its_preflight_is_answered(daemon_factory, up):
    d = daemon_factory(config(up.url))
    hdrs = {"Origin": ALLOWED, "Sec-Fetch-Site": "cross-site"}
    for route in ROUTES:
        name, method, path_of, _, _ = route
        path = path_of(d)
        # the preflight a browser sends first (a JSON body or an Authorization header need one)
        p = send(d, "OPTIONS", path, None, {"Origin": ALLOWED, "Access-Control-Request-Method": method,
                                           "Access-Control-Request-Headers": "authorization,content-type"},
                 via=via(name))
        assert p.status == 204 and p.body == b"", (name, p)
        assert p.headers["access-control-allow-origin"] == ALLOWED, (name, p)
        assert method in p.headers["access-control-allow-methods"], (name, p)
        allow_h = p.headers["access-control-allow-headers"].lower()
        assert all(x in allow_h for x in ("authorization", "content-type", "x-priority")), (name, p)
        assert int(p.headers["access-control-max-age"]) > 0 and "Origin" in p.headers["vary"], (name, p)
        # a preflight from another origin: 403 and no CORS headers
        p = send(d, "OPTIONS", path, None, {"Origin": EVIL, "Access-Control-Request-Method": method}, via=via(name))
        assert p.status == 403 and "access-control-allow-origin" not in p.headers, (name, p)
        # the request itself
        route2 = (name, method, lambda _d, p=path: p) + route[3:]
        a = served(d, route2, hdrs, up)
        assert a.headers.get("access-control-allow-origin") == ALLOWED, (name, a)
        assert "Origin" in a.headers.get("vary", ""), (name, a)
        # still JSON only
        if route[3] is not None and name != "tenant key":
            a = send(d, method, path, b"{}", dict(hdrs, **{"Content-Type": "text/plain"}), via=via(name))
            assert a.status == 415 and a.headers.get("access-control-allow-origin") == ALLOWED, (name, a)
    # reads answer the allowed origin too (the UI reads what it wrote), and only it
    a = send(d, "GET", "/api/v1/gpus", None, {"Origin": ALLOWED, "Authorization": "Bearer x"})
    assert a.headers.get("access-control-allow-origin") == ALLOWED
    a = send(d, "GET", "/healthz", None, {"Origin": EVIL})
    assert a.status == 200 and "access-control-allow-origin" not in a.headers


def test_the_dashboards_same_origin_requests_work(daemon):
    d = daemon
    own = "http://127.0.0.1:%d" % d.port
    page = send(d, "GET", "/", None, {"Sec-Fetch-Site": "none"})
    assert page.status == 200 and b"<html" in page.body.lower()
    # what web/static/app.js sends from the page: cancel (no body), a JSON body with its type
    tid = new_lease(d)
    a = send(d, "POST", "/api/v1/tasks/%d/cancel" % tid, None,
             {"Origin": own, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"})
    assert a.status == 200 and a.json()["state"] == "cancelled", a
    a = send(d, "POST", "/api/v1/tasks", json.dumps(LEASE).encode(),
             {"Origin": own, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"})
    assert a.status == 201, a
    # the same cancel from a page on another site
    a = send(d, "POST", "/api/v1/tasks/%d/cancel" % a.json()["id"], None,
             {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"})
    assert a.status == 403, a
    assert jsend(d, "GET", "/api/v1/tasks?state=active")["tasks"][0]["state"] == "running"


def test_the_attack_a_page_could_make_runs_nothing(daemon, tmp_path):
    """The exact request of the issue: a form a page posts to the daemon."""
    d = daemon
    marker = tmp_path / "pwned"
    cmd = json.dumps({"command": ["sh", "-c", "touch %s" % marker]}).encode()
    for hdrs in ({"Content-Type": "text/plain"},
                 {"Content-Type": "text/plain", "Origin": EVIL, "Sec-Fetch-Site": "cross-site"},
                 {"Content-Type": "application/x-www-form-urlencoded", "Origin": "null"}):
        a = send(d, "POST", "/api/v1/tasks", cmd, hdrs)
        assert a.status in (403, 415), a
    assert jsend(d, "GET", "/api/v1/tasks")["tasks"] == []
    assert not marker.exists()


def test_a_valid_key_does_not_let_another_site_in(daemon_factory):
    import hashlib
    key = "admin-secret-key-1"
    d = daemon_factory("gpus: {backend: sim}\nauth: {admin_keys: [\"sha256:%s\"]}\n"
                       % hashlib.sha256(key.encode()).hexdigest(), key=key)
    auth = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    a = send(d, "POST", "/api/v1/tasks", json.dumps(LEASE).encode(), dict(auth, Origin=EVIL))
    assert a.status == 403, a
    a = send(d, "POST", "/api/v1/tasks", json.dumps(LEASE).encode(), dict(auth, **{"Content-Type": "text/plain"}))
    assert a.status == 415, a
    a = send(d, "POST", "/api/v1/tasks", json.dumps(LEASE).encode(), auth)
    assert a.status == 201, a


def test_dns_rebinding_a_foreign_host_is_not_admin_without_keys(daemon_factory, up):
    """A page at http://evil.example:PORT whose name the attacker re-points at
    127.0.0.1 is same-origin to the browser: its Origin matches its Host.  With
    no keys the server answers only requests whose Host names this machine
    (an IP literal, localhost, its host name, an allowed origin's host)."""
    import socket
    d = daemon_factory(config(up.url))
    evil = "evil.example:%d" % d.port
    body = json.dumps(LEASE).encode()
    hdrs = {"Host": evil, "Origin": "http://" + evil, "Sec-Fetch-Site": "same-origin",
            "Content-Type": "application/json"}
    a = send(d, "POST", "/api/v1/tasks", body, hdrs)
    assert a.status == 403 and "DNS rebinding" in a.json()["error"]["message"], a
    a = send(d, "GET", "/api/v1/tasks", None, {"Host": evil})  # reads leak too
    assert a.status == 403, a
    chat = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "hi"}]}).encode()
    a = send(d, "POST", "/v1/chat/completions", chat, hdrs)  # the gateway's own front
    assert a.status == 403, a
    assert up.received == []
    assert jsend(d, "GET", "/api/v1/tasks")["tasks"] == []
    # names of this machine work, with any port
    for host in ("127.0.0.1:%d" % d.port, "localhost:%d" % d.port, "%s:%d" % (socket.gethostname(), d.port),
                 "ui.example.com"):
        a = send(d, "GET", "/api/v1/tasks", None, {"Host": host})
        assert a.status == 200, (host, a)
    a = send(d, "POST", "/api/v1/tasks", body, {"Host": "localhost:%d" % d.port, "Content-Type": "application/json"})
    assert a.status == 201, a
    # probes and the dashboard's page carry no data: they answer whatever the Host
    assert send(d, "GET", "/healthz", None, {"Host": evil}).status == 200
