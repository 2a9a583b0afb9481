"""No tenant sees another: the isolation matrix over every endpoint.

One daemon with an admin key and two tenants, A (`aardvark-team`) and B
(`zebrafish-corp`), with work for both: batch tasks and a lease running,
tasks queued, finished leases (billing segments), token records with
distinctive figures, and gateway requests through an OpenAI-like upstream
(gw_upstream.py).  Then a table of EVERY endpoint (method, path, access:
open / tenant / admin) is walked:

  - no key: 401 (the open ones answer);
  - A's key on an admin route: 403;
  - A's key on a tenant route: the raw answer never holds B's tenant id,
    B's task names, B's task ids or B's distinctive token figures; asking
    for B by id answers 404 (ids do not leak);
  - the admin key sees both.

The table must cover every route the server has.  live_routes() is the
source of truth: the server's own route table (src/server/routes.h), read
from GET /admin/routes ({method, path, who, aliases} per row).  The test
fails when a row of the live table is missing from MATRIX, when MATRIX has
a route the table does not, or when the table's "who" differs from
MATRIX's; and the same between the table and docs/api.md (every
"METHOD /path" the reference documents, and the access column of its "Who
may call what" table: documented_routes()).  Each live row's "who" is then
walked with no key, the other tenant's ids, A's own key and the admin key.
A few undocumented paths are probed for 404.

A second test sets a quota, fills it and sees the tenant_quota_used_pct
alert fire through GET /api/v1/alerts (for the admin and the tenant, not
for the other tenant).
"""
import hashlib
import json
import os
import re
import time

import pytest
import requests

from conftest import REPO
from gw_upstream import Upstream

pytestmark = pytest.mark.e2e

ADMIN, KEY_A, KEY_B = "iso-admin-key", "iso-key-of-a", "iso-key-of-b"
A, B = "aardvark-team", "zebrafish-corp"
B_MARK = "zebrafish"                    # in B's id and in every name B gives its tasks
B_PROMPT, B_COMPLETION = 987653, 123457  # B's token figures: numbers nobody else has
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD")


def h(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def config(upstream_url, a_max_concurrent=20):
    return ("gpus: {backend: sim}\n"
            "auth: {admin_keys: [\"%s\"]}\n"
            "monitor: {sample_ms: 200}\n"
            "tenants:\n"
            "  - {id: %s, keys: [\"%s\"], max_priority: 0, default_priority: 5,\n"
            "     quota: {max_concurrent: %d, max_gpus: 8}}\n"
            "  - {id: %s, keys: [\"%s\"], max_priority: 0, default_priority: 5,\n"
            "     quota: {max_concurrent: 20, max_gpus: 8}}\n"
            "alerts:\n"
            "  rules:\n"
            "    - {name: quota_full, when: \"tenant_quota_used_pct >= 100\", clear_s: 0}\n"
            "    - {name: gpu_error, when: gpu_unhealthy, severity: critical}\n"
            "gateway:\n"
            "  limits: {max_concurrent: 100}\n"
            "  models:\n"
            "    - {name: m1, context: 4096, upstreams: [\"%s\"]}\n"
            % (h(ADMIN), A, h(KEY_A), a_max_concurrent, B, h(KEY_B), upstream_url))


def call(d, method, path, key=None, **kw):
    headers = kw.pop("headers", {})
    if key:
        headers["Authorization"] = "Bearer " + key
    kw.setdefault("timeout", 20)
    s = requests.Session()
    s.trust_env = False
    return s.request(method, d.url + path, headers=headers, **kw)


def wait_for(fn, timeout=15, what="condition"):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.1)


# ---- the source of truth: which routes the server has ------------------------

API_MD = os.path.join(REPO, "docs", "api.md")
ROUTE_RE = re.compile(r"\b(%s) (/[^\s`,|)]*)" % "|".join(METHODS))


def normalize(path):
    """'/api/v1/monitor/history?metric=M' -> '/api/v1/monitor/history'; '{anything}' -> '{}'."""
    path = path.split("?", 1)[0].rstrip(".:;")
    return re.sub(r"\{[^}/]*\}", "{}", path)


def expand(path):
    """'/api/v1/tenants[/{id}]' -> both forms."""
    m = re.search(r"\[([^\]]*)\]", path)
    if not m:
        return [path]
    return expand(path[:m.start()] + path[m.end():]) + expand(path[:m.start()] + m.group(1) + path[m.end():])


def documented_routes():
    """Every (METHOD, path template) docs/api.md documents, with its access
    ('open' | 'tenant' | 'admin', or None where the docs do not say)."""
    with open(API_MD, encoding="utf-8") as f:
        text = f.read()
    routes = {}
    for method, path in ROUTE_RE.findall(text):
        for p in expand(path):
            routes.setdefault((method, normalize(p)), None)
    # the access column of the "Who may call what" table
    section = text.split("### Who may call what", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[1] not in ("open", "tenant", "admin", "agent"):
            continue
        for method, path in ROUTE_RE.findall(cells[0]):
            for p in expand(path):
                routes[(method, normalize(p))] = cells[1]
    return routes


def live_routes(d):
    """The server's route table: {(METHOD, path template): who} for every
    row, and for every /api/v1/ row its /api/ alias (the same who); and the
    set of the rows themselves (aliases left out)."""
    r = call(d, "GET", "/admin/routes", ADMIN)
    assert r.status_code == 200, r.text
    routes, rows = {}, set()
    for row in r.json()["routes"]:
        assert row["who"] in ("open", "tenant", "admin", "agent"), row
        key = (row["method"], normalize(row["path"]))
        assert key not in rows, "the route table has %s %s twice" % key
        rows.add(key)
        routes[key] = row["who"]
        for alias in row["aliases"]:
            routes[(row["method"], normalize(alias))] = row["who"]
    return routes, rows


def compare(table, rows, other, name):
    """other ({route: access}) against the live table: every row of the table
    is in other, everything in other is a row or an alias of one, with the
    same access."""
    missing = sorted(rows - set(other))
    assert not missing, "routes of the server's table missing from %s: %s" % (name, missing)
    extra = sorted(set(other) - set(table))
    assert not extra, "routes in %s that the server's table does not have: %s" % (name, extra)
    for route, acc in other.items():
        assert acc == table[route], "%s %s: the server's table says %s, %s says %s" % (
            route + (table[route], name, acc))


# ---- the matrix --------------------------------------------------------------
#
# (method, path template, access, how to call it with A's key: a function of
# the fixture's world returning (concrete path, json body or None, expected
# status)).  Mutating tenant routes act on A's own throw-away tasks.

def fresh_a_lease(w):
    r = call(w.d, "POST", "/api/v1/tasks", KEY_A, json={"name": "aardvark-tmp", "memory_mb": 10, "lease_ttl_s": 600})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def fresh_a_array(w):
    r = call(w.d, "POST", "/api/v1/tasks", KEY_A,
             json={"name": "aardvark-arr", "memory_mb": 10, "command": ["sleep", "60"], "array": "0-1%1"})
    assert r.status_code == 201, r.text
    return r.json()["array_id"]


def chat_body():
    return {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


MATRIX = [
    ("GET", "/healthz", "open", lambda w: ("/healthz", None, 200)),
    ("GET", "/readyz", "open", lambda w: ("/readyz", None, 200)),
    ("GET", "/", "open", lambda w: ("/", None, 200)),
    ("GET", "/index.html", "open", lambda w: ("/index.html", None, 200)),
    ("GET", "/favicon.ico", "open", lambda w: ("/favicon.ico", None, 200)),
    ("GET", "/static/{}", "open", lambda w: ("/static/app.js", None, 200)),
    ("POST", "/api/v1/tasks", "tenant",
     lambda w: ("/api/v1/tasks", {"name": "aardvark-x", "memory_mb": 10, "lease_ttl_s": 600}, 201)),
    ("POST", "/api/tasks", "tenant",
     lambda w: ("/api/tasks", {"name": "aardvark-y", "memory_mb": 10, "lease_ttl_s": 600}, 201)),
    ("GET", "/api/v1/tasks", "tenant", lambda w: ("/api/v1/tasks?limit=1000", None, 200)),
    ("GET", "/api/v1/tasks/{}", "tenant", lambda w: ("/api/v1/tasks/%d" % w.a_lease, None, 200)),
    ("GET", "/api/tasks/{}", "tenant", lambda w: ("/api/tasks/%d" % w.a_lease, None, 200)),
    ("DELETE", "/api/v1/tasks/{}", "tenant", lambda w: ("/api/v1/tasks/%d" % fresh_a_lease(w), None, 200)),
    ("POST", "/api/v1/tasks/{}/cancel", "tenant",
     lambda w: ("/api/v1/tasks/%d/cancel" % fresh_a_lease(w), {}, 200)),
    ("POST", "/api/v1/tasks/{}/heartbeat", "tenant",
     lambda w: ("/api/v1/tasks/%d/heartbeat" % w.a_lease, {}, 200)),
    ("POST", "/api/v1/tasks/{}/release", "tenant",
     lambda w: ("/api/v1/tasks/%d/release" % fresh_a_lease(w), {}, 200)),
    ("GET", "/api/v1/tasks/{}/logs", "tenant", lambda w: ("/api/v1/tasks/%d/logs" % w.a_batch, None, 200)),
    ("GET", "/api/v1/tasks/{}/runs", "tenant", lambda w: ("/api/v1/tasks/%d/runs" % w.a_batch, None, 200)),
    ("GET", "/api/v1/runs", "tenant", lambda w: ("/api/v1/runs?limit=1000", None, 200)),
    ("GET", "/api/v1/arrays/{}", "tenant", lambda w: ("/api/v1/arrays/%d" % fresh_a_array(w), None, 200)),
    ("POST", "/api/v1/arrays/{}/cancel", "tenant",
     lambda w: ("/api/v1/arrays/%d/cancel" % fresh_a_array(w), {}, 200)),
    ("GET", "/api/v1/gpus", "tenant", lambda w: ("/api/v1/gpus", None, 200)),
    ("GET", "/api/v1/nodes", "tenant", lambda w: ("/api/v1/nodes", None, 200)),
    ("GET", "/api/v1/nodes/{}", "tenant", lambda w: ("/api/v1/nodes/local", None, 200)),
    # agents carry a join token or their node's credential, never an API key
    ("POST", "/agent/v1/join", "agent", lambda w: ("/agent/v1/join", {"name": "aardvark-node"}, 401)),
    ("POST", "/agent/v1/sync", "agent", lambda w: ("/agent/v1/sync", {"node": "aardvark-node", "seq": 1}, 401)),
    ("POST", "/agent/v1/cert", "agent",
     lambda w: ("/agent/v1/cert", {"node": "aardvark-node", "public_key": "-----BEGIN PUBLIC KEY-----\n"}, 401)),
    # the CA certificate is public: agents fetch it before they trust the server (issue 22)
    ("GET", "/agent/v1/ca", "open", lambda w: ("/agent/v1/ca", None, 200)),
    ("GET", "/api/v1/queue", "tenant", lambda w: ("/api/v1/queue?limit=10000", None, 200)),
    ("GET", "/api/v1/tenants", "tenant", lambda w: ("/api/v1/tenants", None, 200)),
    ("GET", "/api/v1/tenants/{}", "tenant", lambda w: ("/api/v1/tenants/" + A, None, 200)),
    ("GET", "/api/v1/monitor/metrics", "tenant", lambda w: ("/api/v1/monitor/metrics", None, 200)),
    ("GET", "/api/monitor/metrics", "tenant", lambda w: ("/api/monitor/metrics", None, 200)),
    ("GET", "/api/v1/monitor/history", "tenant",
     lambda w: ("/api/v1/monitor/history?metric=tenant_running&since=-600", None, 200)),
    ("GET", "/api/v1/alerts", "tenant", lambda w: ("/api/v1/alerts", None, 200)),
    ("GET", "/api/v1/usage", "tenant", lambda w: ("/api/v1/usage?group_by=tenant", None, 200)),
    ("GET", "/api/v1/invoices", "tenant", lambda w: ("/api/v1/invoices", None, 200)),
    ("GET", "/v1/models", "tenant", lambda w: ("/v1/models", None, 200)),
    ("GET", "/v1/models/{}", "tenant", lambda w: ("/v1/models/m1", None, 200)),
    ("POST", "/v1/chat/completions", "tenant", lambda w: ("/v1/chat/completions", chat_body(), 200)),
    ("POST", "/v1/completions", "tenant",
     lambda w: ("/v1/completions", {"model": "m1", "prompt": "hi", "max_tokens": 4}, 200)),
    ("POST", "/v1/embeddings", "tenant", lambda w: ("/v1/embeddings", {"model": "m1", "input": "hi"}, 200)),
    ("GET", "/metrics", "admin", lambda w: ("/metrics", None, 200)),
    ("GET", "/admin/scheduler/stats", "admin", lambda w: ("/admin/scheduler/stats", None, 200)),
    ("GET", "/admin/scheduler/queues", "admin", lambda w: ("/admin/scheduler/queues?top=1000", None, 200)),
    ("GET", "/admin/scheduler/weights", "admin", lambda w: ("/admin/scheduler/weights", None, 200)),
    ("PUT", "/admin/scheduler/weights", "admin",
     lambda w: ("/admin/scheduler/weights", {"weights": [256, 128, 64, 32, 16, 8, 4, 2, 1, 1]}, 200)),
    ("GET", "/admin/audit", "admin", lambda w: ("/admin/audit", None, 200)),
    ("GET", "/admin/routes", "admin", lambda w: ("/admin/routes", None, 200)),
    ("POST", "/admin/gpus/{}/drain", "admin", lambda w: ("/admin/gpus/local:3/drain", {}, 200)),
    ("POST", "/admin/gpus/{}/undrain", "admin", lambda w: ("/admin/gpus/local:3/undrain", {}, 200)),
    ("POST", "/admin/nodes/{}/drain", "admin", lambda w: ("/admin/nodes/local/drain", {}, 200)),
    ("POST", "/admin/nodes/{}/undrain", "admin", lambda w: ("/admin/nodes/local/undrain", {}, 200)),
    ("POST", "/admin/nodes/{}/remove", "admin", lambda w: ("/admin/nodes/local/remove", {}, 409)),
    ("GET", "/admin/join-tokens", "admin", lambda w: ("/admin/join-tokens", None, 200)),
    ("POST", "/admin/join-tokens", "admin", lambda w: ("/admin/join-tokens", {}, 201)),
    ("DELETE", "/admin/join-tokens/{}", "admin", lambda w: ("/admin/join-tokens/jt_999", None, 404)),
    ("GET", "/api/v1/coordinator/servers", "admin", lambda w: ("/api/v1/coordinator/servers", None, 200)),
    ("POST", "/api/v1/coordinator/servers/register", "admin",
     lambda w: ("/api/v1/coordinator/servers/register", {"server_id": "iso-s2", "url": "http://127.0.0.1:9"}, 200)),
    ("POST", "/api/v1/coordinator/servers/unregister/{}", "admin",
     lambda w: ("/api/v1/coordinator/servers/unregister/iso-none", {}, 404)),
    ("POST", "/api/v1/coordinator/heartbeat", "admin",
     lambda w: ("/api/v1/coordinator/heartbeat", {"server_id": "iso-s3", "url": "http://127.0.0.1:9"}, 200)),
    ("GET", "/api/v1/coordinator/cluster", "admin", lambda w: ("/api/v1/coordinator/cluster", None, 200)),
    ("POST", "/api/v1/coordinator/locks/acquire", "admin",
     lambda w: ("/api/v1/coordinator/locks/acquire", {"lock_id": "iso", "owner": "iso", "timeout": 60}, 200)),
    ("POST", "/api/v1/coordinator/locks/release", "admin",
     lambda w: ("/api/v1/coordinator/locks/release", {"lock_id": "iso-none", "owner": "iso"}, 404)),
    ("GET", "/api/v1/coordinator/locks", "admin", lambda w: ("/api/v1/coordinator/locks", None, 200)),
    ("GET", "/api/v1/coordinator/health", "open", lambda w: ("/api/v1/coordinator/health", None, 200)),
    ("GET", "/admin/tenants/{}", "admin", lambda w: ("/admin/tenants/" + A, None, 200)),
    ("PUT", "/admin/tenants/{}", "admin", lambda w: ("/admin/tenants/" + A, {"weight": 1}, 200)),
    ("POST", "/admin/tenants/{}/keys", "admin", lambda w: ("/admin/tenants/%s/keys" % A, {}, 201)),
    ("POST", "/admin/tenants/{}/credit", "admin", lambda w: ("/admin/tenants/%s/credit" % A, {"amount": "1"}, 200)),
    ("POST", "/admin/usage/tokens", "admin",
     lambda w: ("/admin/usage/tokens", {"tenant_id": A, "model": "m1", "prompt_tokens": 1, "completion_tokens": 1},
                200)),
]

# A's key naming B (or B's task): 404, the same as for an id that does not exist
B_PROBES = [
    ("GET", lambda w: "/api/v1/tasks/%d" % w.b_lease),
    ("GET", lambda w: "/api/tasks/%d" % w.b_lease),
    ("GET", lambda w: "/api/v1/tasks/%d/logs" % w.b_batch),
    ("GET", lambda w: "/api/v1/tasks/%d/runs" % w.b_batch),
    ("GET", lambda w: "/api/v1/runs?tenant=" + B),
    ("POST", lambda w: "/api/v1/tasks/%d/cancel" % w.b_lease),
    ("DELETE", lambda w: "/api/v1/tasks/%d" % w.b_lease),
    ("POST", lambda w: "/api/v1/tasks/%d/heartbeat" % w.b_lease),
    ("POST", lambda w: "/api/v1/tasks/%d/release" % w.b_lease),
    ("GET", lambda w: "/api/v1/arrays/%d" % w.b_array),
    ("POST", lambda w: "/api/v1/arrays/%d/cancel" % w.b_array),
    ("GET", lambda w: "/api/v1/tenants/" + B),
    ("GET", lambda w: "/api/tenants/" + B),
    ("GET", lambda w: "/api/v1/usage?tenant=" + B),
    ("GET", lambda w: "/api/v1/invoices?tenant=" + B),
    ("GET", lambda w: "/api/v1/monitor/history?metric=tenant_running&tenant=" + B),
    ("GET", lambda w: "/api/v1/monitor/history?metric=tenant_gpus&gpu=" + B),
    ("GET", lambda w: "/api/v1/monitor/history?metric=queued&tenant=" + B),
    ("GET", lambda w: "/api/monitor/history?metric=tenant_queued&tenant=" + B),
]

UNDOCUMENTED = ["/api/v1/nope", "/api/v2/tasks", "/api/v1/tasks/1/nope", "/api/v1/monitor/nope", "/admin/nope",
                "/admin/tenants/%s/nope" % A, "/metricsx", "/api/v1/gpus/extra", "/v1/nope", "/nope.html"]


class World:
    pass


@pytest.fixture
def world(daemon_factory):
    up = Upstream("iso-up")
    d = daemon_factory(config(up.url), key=ADMIN)
    w = World()
    w.d = d
    # B's work, with names that carry B's mark
    def sub(key, **body):
        body.setdefault("memory_mb", 10)
        r = call(d, "POST", "/api/v1/tasks", key, json=body)
        assert r.status_code == 201, r.text
        return r.json()

    w.b_lease = sub(KEY_B, name="zebrafish-lease", lease_ttl_s=600)["id"]
    w.b_batch = sub(KEY_B, name="zebrafish-batch", command=["sh", "-c", "echo zebrafish-output"])["id"]
    # a job array of B's that has ended (so the pool figures below stay B's lease alone)
    w.b_array = sub(KEY_B, name="zebrafish-array", command=["true"], array="0-2")["array_id"]
    wait_for(lambda: call(d, "GET", "/api/v1/arrays/%d" % w.b_array, KEY_B).json()["counts"]["succeeded"] == 3,
             what="B's array to end")
    w.a_lease = sub(KEY_A, name="aardvark-lease", lease_ttl_s=600)["id"]
    w.a_batch = sub(KEY_A, name="aardvark-batch", command=["sh", "-c", "echo aardvark-output"])["id"]
    # a finished lease each: a billing segment each
    done = {}
    for key, name in ((KEY_A, "aardvark-done"), (KEY_B, "zebrafish-done")):
        t = sub(key, name=name, lease_ttl_s=600, gpu_request=1)
        time.sleep(0.3)
        assert call(d, "POST", "/api/v1/tasks/%d/release" % t["id"], key, json={}).status_code == 200
        done[key] = t["id"]
    # queued work of both: gangs of 4 whole GPUs wait while the leases share GPUs; B's is first in line
    w.b_queued = sub(KEY_B, name="zebrafish-queued", gpu_request=4, memory_mb=0, priority=0, lease_ttl_s=600)["id"]
    w.a_queued = sub(KEY_A, name="aardvark-queued", gpu_request=4, memory_mb=0, lease_ttl_s=600)["id"]
    w.b_ids = [w.b_lease, w.b_batch, w.b_queued, done[KEY_B]]
    # token records with figures only B has, and gateway requests of both
    r = call(d, "POST", "/admin/usage/tokens", ADMIN,
             json={"tenant_id": B, "model": "m1", "prompt_tokens": B_PROMPT, "completion_tokens": B_COMPLETION})
    assert r.status_code == 200, r.text
    for key in (KEY_A, KEY_B, KEY_B):
        r = call(d, "POST", "/v1/chat/completions", key, json=chat_body())
        assert r.status_code == 200, r.text
    # the sampler has seen the running work of both (history series of both)
    wait_for(lambda: B in call(d, "GET", "/api/v1/monitor/history?metric=tenant_running&since=-600",
                               ADMIN).text, what="B's history series")
    wait_for(lambda: call(d, "GET", "/api/v1/tasks/%d" % w.b_batch, KEY_B).json()["state"] == "succeeded",
             what="B's batch task to end")
    wait_for(lambda: call(d, "GET", "/api/v1/tasks/%d" % w.a_batch, KEY_A).json()["state"] == "succeeded",
             what="A's batch task to end")
    yield w
    up.stop()


def leaks(text, w):
    """What of B's appears in an answer's raw text (empty: nothing)."""
    found = []
    if B_MARK in text:
        found.append("B's id or task names")
    for n in (B_PROMPT, B_COMPLETION):
        if str(n) in text:
            found.append("B's token figure %d" % n)
    for tid in w.b_ids:
        pats = [r'"id":\s*%d\b' % tid,                     # a task object
                r'\btask %d\b' % tid,                        # a reason or message naming it
                r'"key":\s*"%d"' % tid,                      # usage grouped by task
                r'"tasks":\s*\[(\d+,\s*)*%d(,\s*\d+)*\]' % tid]  # a GPU's task ids
        for p in pats:
            m = re.search(p, text)
            if m:
                found.append("B's task id %d in ...%s..." % (tid, text[max(0, m.start() - 80):m.end() + 40]))
                break
    return found


# ---- the tests -----------------------------------------------------------------

def test_matrix_covers_every_route_the_server_has(world):
    table, rows = live_routes(world.d)
    matrix = {(m, p): acc for m, p, acc, _ in MATRIX}
    compare(table, rows, matrix, "the isolation MATRIX")
    documented = documented_routes()
    for route, acc in documented.items():
        assert acc is not None, "%s %s has no row in docs/api.md's 'Who may call what' table" % route
    compare(table, rows, documented, "docs/api.md")


def test_every_row_of_the_live_table_enforces_its_who(world):
    """Each row of the server's table, as the table says: no key is 401 but
    where it is open; A's key on an admin row is 403; a tenant row answers A
    (what it answers is checked against B's data elsewhere); an admin row
    answers the admin key."""
    table, rows = live_routes(world.d)
    how = {(m, p): f for m, p, _, f in MATRIX}
    for method, path in sorted(rows):
        who = table[(method, path)]
        concrete, body, want = how[(method, path)](world) if who == "open" or method == "GET" else \
            (re.sub(r"\{\}", "1", path), {}, None)
        r = call(world.d, method, concrete, None, json=body)
        assert r.status_code == (200 if who == "open" else 401), (method, concrete, who, r.status_code, r.text[:200])
        if who == "admin":
            r = call(world.d, method, concrete, KEY_A, json=body)
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", (method, concrete, r.text[:200])
        if method == "GET":  # (the writes are answered in the tests below, on fresh tasks)
            key = ADMIN if who == "admin" else KEY_A
            r = call(world.d, method, concrete, key, json=body)
            assert r.status_code == want, (method, concrete, who, r.status_code, r.text[:200])


def test_a_method_a_path_lacks_gets_405_with_the_paths_methods(world):
    d = world.d
    for method, path, allow, use in (("PUT", "/api/v1/tasks", "GET, HEAD, POST", "use GET or POST"),
                                     ("PATCH", "/api/tasks/1", "GET, HEAD, DELETE", "use GET or DELETE"),
                                     ("GET", "/api/v1/tasks/1/cancel", "POST", "use POST"),
                                     ("DELETE", "/admin/tenants/" + A, "PUT, GET, HEAD", "use PUT or GET"),
                                     ("POST", "/admin/scheduler/weights", "GET, HEAD, PUT", "use GET or PUT"),
                                     ("POST", "/healthz", "GET, HEAD", "use GET")):
        r = call(d, method, path, ADMIN, json={} if method != "GET" else None)
        assert r.status_code == 405, (method, path, r.status_code, r.text[:200])
        assert r.json()["error"] == {"code": "method_not_allowed", "message": use}, (method, path, r.text)
        assert r.headers["Allow"] == allow, (method, path, r.headers)
    # a tenant key on an admin path: 403 before the method is looked at
    r = call(d, "DELETE", "/admin/tenants/" + A, KEY_A)
    assert r.status_code == 403 and "Allow" not in r.headers, r.text


def test_matrix_matches_the_docs():
    documented = documented_routes()
    matrix = {(m, p): acc for m, p, acc, _ in MATRIX}
    assert len(matrix) == len(MATRIX), "a route is twice in MATRIX"
    missing = sorted(set(documented) - set(matrix))
    assert not missing, "routes documented in docs/api.md but not in the isolation MATRIX: %s" % missing
    undocumented = sorted(set(matrix) - set(documented))
    assert not undocumented, "routes in MATRIX that docs/api.md does not document: %s" % undocumented
    for route, acc in documented.items():
        assert acc is not None, "%s %s has no row in docs/api.md's 'Who may call what' table" % route
        assert acc == matrix[route], "%s %s: docs say %s, MATRIX says %s" % (route + (acc, matrix[route]))


def test_route_parser_reads_methods_paths_and_optional_parts():
    assert normalize("/api/v1/monitor/history?metric=M&since=S") == "/api/v1/monitor/history"
    assert normalize("/admin/gpus/{id}/drain") == "/admin/gpus/{}/drain"
    assert sorted(expand("/api/v1/tenants[/{id}]")) == ["/api/v1/tenants", "/api/v1/tenants/{id}"]
    assert ROUTE_RE.findall("`GET /a/{x}`, POST /b?c=d | x") == [("GET", "/a/{x}"), ("POST", "/b?c=d")]


def test_no_key_is_401_except_on_open_routes(world):
    for method, path, acc, how in MATRIX:
        concrete, body, _ = how(world) if acc == "open" or method == "GET" else (None, None, None)
        if concrete is None:  # a mutating route: no need to make a task for a refused call
            concrete = re.sub(r"\{\}", "1", path)
            body = {}
        r = call(world.d, method, concrete, None, json=body)
        if acc == "open":
            assert r.status_code == 200, (method, concrete, r.status_code, r.text[:200])
        else:
            assert r.status_code == 401, (method, concrete, r.status_code, r.text[:200])


def test_tenant_key_on_admin_routes_is_403(world):
    for method, path, acc, how in MATRIX:
        if acc != "admin":
            continue
        concrete, body, _ = how(world)
        r = call(world.d, method, concrete, KEY_A, json=body)
        assert r.status_code == 403, (method, concrete, r.status_code, r.text[:200])
        assert r.json()["error"]["code"] == "forbidden"
        assert not leaks(r.text, world), (method, concrete, leaks(r.text, world))


def test_tenant_key_never_sees_the_other_tenant(world):
    checked = 0
    for method, path, acc, how in MATRIX:
        if acc == "admin":
            continue
        concrete, body, want = how(world)
        variants = [concrete]
        if concrete.startswith("/api/v1/"):  # every /api/v1/ path also answers under /api/
            variants.append("/api/" + concrete[len("/api/v1/"):])
        for v in variants:
            if v != concrete and method != "GET":
                continue  # the aliases of writes would only make more tasks
            r = call(world.d, method, v, KEY_A, json=body)
            assert r.status_code == want, (method, v, r.status_code, r.text[:300])
            found = leaks(r.text, world)
            assert not found, "%s %s with A's key shows %s: %s" % (method, v, found, r.text[:500])
            checked += 1
    assert checked > 30


def test_tenant_key_sees_its_own_data(world):
    d = world.d
    snap = call(d, "GET", "/api/v1/monitor/metrics", KEY_A).json()
    assert [t["id"] for t in snap["tenants"]] == [A]
    assert snap["tenants"][0]["running"] >= 1
    assert [t["tenant_id"] for t in snap["gateway"]["tenants"]] == [A]
    assert snap["tenants"][0]["running"] == 1
    assert snap["tasks_running"] == 2  # pool figures stay: B's running lease is counted, not named
    hist = call(d, "GET", "/api/v1/monitor/history?metric=tenant_running&since=-600", KEY_A).json()
    assert [s["labels"] for s in hist["series"]] == [{"tenant": A}]
    hist = call(d, "GET", "/api/v1/monitor/history?metric=tenant_running&tenant=%s&since=-600" % A, KEY_A).json()
    assert [s["labels"] for s in hist["series"]] == [{"tenant": A}]
    assert len(call(d, "GET", "/api/v1/monitor/history?metric=running&since=-600", KEY_A).json()["series"]) == 1
    q = call(d, "GET", "/api/v1/queue", KEY_A).json()
    assert [t["id"] for t in q["tasks"]] == [world.a_queued]
    assert q["total"] == 2 and q["tasks"][0]["queue_position"] == 2  # positions stay global: B's P0 is first
    gpus = call(d, "GET", "/api/v1/gpus", KEY_A).json()["gpus"]
    assert sum(len(g["tasks"]) for g in gpus) >= 1  # its own running tasks
    assert [t["id"] for t in call(d, "GET", "/api/v1/tenants", KEY_A).json()["tenants"]] == [A]
    assert call(d, "GET", "/api/v1/usage?group_by=tenant", KEY_A).json()["tenant_id"] == A
    log = call(d, "GET", "/api/v1/tasks/%d/logs" % world.a_batch, KEY_A)
    assert "aardvark-output" in log.text


def test_tenant_key_naming_the_other_tenant_gets_404_like_an_unknown_id(world):
    for method, path in B_PROBES:
        p = path(world)
        r = call(world.d, method, p, KEY_A, json={} if method != "GET" else None)
        assert r.status_code == 404, (method, p, r.status_code, r.text[:200])
        assert r.json()["error"]["code"] == "not_found"
        # (a task's 404 names the id the caller gave: that tells it nothing)
        assert not leaks(re.sub(r"no (task|array) \d+", "", r.text), world), (method, p, r.text)
        # the same answer as for an id nobody has
        unknown = p.replace(B, "nobody-here").replace("/%d" % world.b_lease, "/999999") \
                   .replace("/%d" % world.b_batch, "/999998")
        r2 = call(world.d, method, unknown, KEY_A, json={} if method != "GET" else None)
        assert r2.status_code == 404, (method, unknown, r2.status_code, r2.text[:200])
    # B's things are still there: A's calls changed nothing
    t = call(world.d, "GET", "/api/v1/tasks/%d" % world.b_lease, KEY_B).json()
    assert t["state"] == "running"
    a = call(world.d, "GET", "/api/v1/arrays/%d" % world.b_array, KEY_B).json()
    assert a["counts"]["succeeded"] == 3 and a["count"] == 3, a
    # listing B's array's elements with A's key: none of them
    r = call(world.d, "GET", "/api/v1/tasks?array=%d" % world.b_array, KEY_A)
    assert r.status_code == 200 and r.json()["tasks"] == [], r.text[:300]


def test_admin_sees_both_tenants(world):
    d = world.d
    for path in ("/api/v1/monitor/metrics", "/api/v1/tenants", "/api/v1/usage?group_by=tenant",
                 "/api/v1/tasks?limit=1000", "/api/v1/queue", "/admin/scheduler/stats",
                 "/admin/scheduler/queues?top=100",
                 "/api/v1/monitor/history?metric=tenant_running&since=-600", "/metrics"):
        r = call(d, "GET", path, ADMIN)
        assert r.status_code == 200, (path, r.text[:200])
        assert A in r.text and B in r.text, (path, r.text[:500])
    snap = call(d, "GET", "/api/v1/monitor/metrics", ADMIN).json()
    assert {t["tenant_id"] for t in snap["gateway"]["tenants"]} == {A, B}
    usage = call(d, "GET", "/api/v1/usage?group_by=tenant", ADMIN).text
    assert str(B_PROMPT) in usage


def test_every_admin_route_answers_the_admin(world):
    for method, path, acc, how in MATRIX:
        if acc != "admin":
            continue
        concrete, body, want = how(world)
        r = call(world.d, method, concrete, ADMIN, json=body)
        assert r.status_code == want, (method, concrete, r.status_code, r.text[:200])


def test_undocumented_paths_are_404(world):
    for p in UNDOCUMENTED:
        r = call(world.d, "GET", p, ADMIN)
        assert r.status_code == 404, (p, r.status_code, r.text[:200])
        r = call(world.d, "GET", p, KEY_A)
        assert r.status_code in (403, 404), (p, r.status_code)  # /admin/... is 403 for a tenant key first
        assert not leaks(r.text, world)


def test_quota_alert_fires_when_a_tenant_fills_its_quota(daemon_factory):
    up = Upstream("iso-up2")
    try:
        d = daemon_factory(config(up.url, a_max_concurrent=2), key=ADMIN)

        def quota_alerts(key):
            r = call(d, "GET", "/api/v1/alerts", key)
            assert r.status_code == 200, r.text
            body = r.json()
            return [a for a in body["alerts"] if a["rule"] == "quota_full"], body

        rule = [x for x in quota_alerts(ADMIN)[1]["rules"] if x["name"] == "quota_full"][0]
        assert rule["active"] is True
        time.sleep(1)
        assert quota_alerts(ADMIN)[0] == []  # nothing used: nothing fires
        ids = []
        for i in range(2):
            r = call(d, "POST", "/api/v1/tasks", KEY_A, json={"name": "fill-%d" % i, "memory_mb": 10,
                                                               "lease_ttl_s": 600})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        fired = wait_for(lambda: quota_alerts(ADMIN)[0], what="the quota alert to fire")
        assert [(a["subject"], a["state"]) for a in fired] == [(A, "firing")]
        assert fired[0]["value"] >= 100
        assert [a["subject"] for a in quota_alerts(KEY_A)[0]] == [A]  # the tenant sees its own alert
        mine, body_b = quota_alerts(KEY_B)
        assert mine == [] and A not in json.dumps(body_b)  # the other tenant does not
        snap_b = call(d, "GET", "/api/v1/monitor/metrics", KEY_B).json()
        snap_a = call(d, "GET", "/api/v1/monitor/metrics", KEY_A).json()
        assert snap_a["alerts_firing"] == snap_b["alerts_firing"] + 1
        # under the quota again: it resolves (clear_s 0) and is listed as resolved
        assert call(d, "POST", "/api/v1/tasks/%d/release" % ids[0], KEY_A, json={}).status_code == 200
        wait_for(lambda: not quota_alerts(ADMIN)[0], what="the quota alert to resolve")
        resolved = call(d, "GET", "/api/v1/alerts", ADMIN).json()["resolved"]
        assert any(a["rule"] == "quota_full" and a["subject"] == A for a in resolved)
        assert not any(a["subject"] == A for a in call(d, "GET", "/api/v1/alerts", KEY_B).json()["resolved"])
    finally:
        up.stop()


def test_a_queued_tasks_reason_does_not_name_the_other_tenants_task(daemon_factory):
    """A task of A waiting behind B's task is told so without B's task id."""
    up = Upstream("iso-up3")
    try:
        d = daemon_factory(config(up.url), key=ADMIN)

        def sub(key, **body):
            r = call(d, "POST", "/api/v1/tasks", key, json=dict(body, lease_ttl_s=600))
            assert r.status_code == 201, r.text
            return r.json()["id"]

        sub(KEY_B, name="zebrafish-share", memory_mb=10)
        b_gang = sub(KEY_B, name="zebrafish-gang", gpu_request=4, memory_mb=0, priority=0)
        a_one = sub(KEY_A, name="aardvark-one", gpu_request=1, memory_mb=0, priority=5)
        w = World()
        w.b_ids = [b_gang]
        for path in ("/api/v1/tasks/%d" % a_one, "/api/v1/queue", "/api/v1/tasks?state=queued"):
            r = call(d, "GET", path, KEY_A)
            assert r.status_code == 200, r.text
            assert not leaks(r.text, w), (path, leaks(r.text, w))
        a = call(d, "GET", "/api/v1/tasks/%d" % a_one, KEY_A).json()
        assert a["state"] == "queued", a
        assert "waiting behind a task of another tenant (P0)" in a["reason"], a  # told why, without the id
        # the reason is written for the task's owner: the admin finds the head in the queue
        q = call(d, "GET", "/api/v1/queue", ADMIN).json()["tasks"]
        assert [t["id"] for t in q] == [b_gang, a_one]
    finally:
        up.stop()
