"""The coordinator API (docs/api.md "Coordinator") on one real server with
its SQLite store: the server registry (its own heartbeats, registration,
heartbeats of others, active/inactive after server_timeout_s), /cluster
with an agent node joined, named locks (exclusion, expiry and a larger
fencing token, renew keeps the token, owner checks on release), bad input,
who may call what, `gpupool servers`, and the audit log of every registry
and lock write (GET /admin/audit: who, when, what, its object).
"""
import calendar
import hashlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import time
import urllib.parse
import uuid

import pytest
import requests

from apiutil import KeyedDaemon, reap_supervisors  # noqa: F401 (fixture)
from clusterutil import TOKEN, cluster, sha, sim_gpus  # noqa: F401 (fixture)
from conftest import Daemon, _require_bin

pytestmark = pytest.mark.e2e

C = "/api/v1/coordinator"
HB_S, TIMEOUT_S = 1, 3


# A single server on SQLite has no server_id (several servers need PostgreSQL): its id in the
# registry is its host name.  On PostgreSQL the tests name it s1 (it leads: no other server).
ME = socket.gethostname()


def cfg(server_id=None, extra=""):
    sid = "server_id: %s, " % server_id if server_id else ""
    return ("gpus: {backend: sim, sim: [{name: \"Sim 16G\", memory_mb: 16000, count: 2}]}\n"
            "cluster: {%sheartbeat_interval_s: %d, server_timeout_s: %d}\n" % (sid, HB_S, TIMEOUT_S)
            + extra)


@pytest.fixture
def srv(tmp_path):
    _require_bin()
    d = Daemon(tmp_path, cfg())
    d.me = ME
    try:
        d.start()
    except RuntimeError as e:
        d.stop()
        pytest.fail(str(e))
    yield d
    d.stop()


def get(d, path, **kw):
    r = d.api("GET", C + path, timeout=10, **kw)
    return r


def post(d, path, body, **kw):
    return d.api("POST", C + path, json=body, timeout=10, **kw)


def servers(d):
    r = get(d, "/servers")
    assert r.status_code == 200, r.text
    return {s["server_id"]: s for s in r.json()["servers"]}


def test_own_registration_and_heartbeats(srv):
    s = servers(srv)
    assert list(s) == [srv.me]
    me = s[srv.me]
    assert me["url"] == srv.url and me["role"] == "leader" and me["active"] is True
    assert me["started_ms"] <= me["last_heartbeat_ms"]
    first = me["last_heartbeat_ms"]
    time.sleep(HB_S * 2 + 0.5)
    assert servers(srv)[srv.me]["last_heartbeat_ms"] > first
    h = requests.get(srv.url + C + "/health", timeout=10)
    assert h.status_code == 200
    assert h.json() == {"server_id": srv.me, "store_reachable": True, "leader_known": True, "leader": srv.me,
                        "role": "leader"}


def test_register_heartbeat_inactive_unregister(srv):
    registry_body(srv)


def registry_body(srv):
    r = post(srv, "/servers/register", {"server_id": "s2", "url": "http://127.0.0.1:9"})
    assert r.status_code == 200, r.text
    assert r.json()["server_id"] == "s2" and r.json()["role"] == "follower" and r.json()["active"]
    r = post(srv, "/heartbeat", {"server_id": "s3", "url": "http://127.0.0.1:10", "role": "standby", "load": 0.5})
    assert r.status_code == 200, r.text
    assert r.json()["leader"] == srv.me
    s = servers(srv)
    assert set(s) == {srv.me, "s2", "s3"}
    assert s["s3"]["role"] == "standby" and s["s3"]["load"] == 0.5 and s["s3"]["active"]
    # a follower that claims to lead is shown as a follower: s1 leads
    assert post(srv, "/heartbeat", {"server_id": "s2", "url": "http://127.0.0.1:9", "role": "leader"}).status_code == 200
    assert servers(srv)["s2"]["role"] == "follower"
    c = get(srv, "/cluster").json()
    assert c["active_servers"] == 3 and c["leader"] == srv.me
    # no heartbeats from s2 and s3 for server_timeout_s: inactive; s1 beats itself
    time.sleep(TIMEOUT_S + 1.0)
    s = servers(srv)
    assert not s["s2"]["active"] and not s["s3"]["active"] and s[srv.me]["active"]
    c = get(srv, "/cluster").json()
    assert c["active_servers"] == 1 and len(c["servers"]) == 3
    # a heartbeat makes it active again
    assert post(srv, "/heartbeat", {"server_id": "s3", "url": "http://127.0.0.1:10"}).status_code == 200
    assert servers(srv)["s3"]["active"]
    r = post(srv, "/servers/unregister/s2", {})
    assert r.status_code == 200 and r.json()["unregistered"] is True
    assert post(srv, "/servers/unregister/s2", {}).status_code == 404
    assert "s2" not in servers(srv)
    # the registry is in the store: a restart keeps it
    srv.stop()
    srv.start()
    assert set(servers(srv)) == {srv.me, "s3"}


def test_cluster_figures_with_an_agent_node(cluster):  # noqa: F811
    cluster.start_server("gpus: {backend: none}\n"
                         "cluster: {join_tokens: [\"%s\"], node_timeout_s: 3}\n"
                         "tasks: {kill_grace_s: 2}\n" % sha(TOKEN))
    d = cluster.server
    c = get(d, "/cluster").json()
    assert c["total_workers"] == 0 and c["total_load"] == 0 and c["leader"] == ME
    cluster.agent("gpu-a", gpus=sim_gpus(2))
    c = get(d, "/cluster").json()
    assert c["total_workers"] == 1 and c["total_load"] == 0
    assert c["active_servers"] == 1 and [s["server_id"] for s in c["servers"]] == [ME]
    t = cluster.submit(["sleep", "60"], gpu_request=1)
    cluster.wait_task(t["id"], "running")
    c = get(d, "/cluster").json()
    assert c["total_load"] == pytest.approx(0.5)
    d.api("POST", "/api/v1/tasks/%d/cancel" % t["id"], json={}, timeout=10)


def test_cluster_counts_local_gpus(srv):
    c = get(srv, "/cluster").json()
    assert c["total_workers"] == 1  # node local, with its 2 simulated GPUs
    r = srv.api("POST", "/api/v1/tasks", json={"name": "l", "lease_ttl_s": 600, "gpu_request": 1}, timeout=10)
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 10
    while get(srv, "/cluster").json()["total_load"] != pytest.approx(0.5):
        assert time.monotonic() < deadline, get(srv, "/cluster").text
        time.sleep(0.1)


def acquire(d, lock, owner, timeout=60):
    return post(d, "/locks/acquire", {"lock_id": lock, "owner": owner, "timeout": timeout})


def release(d, lock, owner):
    return post(d, "/locks/release", {"lock_id": lock, "owner": owner})


def test_locks_exclusion_renew_expiry_and_release(srv):
    locks_body(srv)


def locks_body(srv):
    a = acquire(srv, "dl", "w1", timeout=2)
    assert a.status_code == 200, a.text
    tok1 = a.json()["fencing_token"]
    assert a.json()["acquired"] is True and tok1 >= 1
    # another owner: 409 with the holder
    b = acquire(srv, "dl", "w2")
    assert b.status_code == 409, b.text
    assert b.json()["acquired"] is False and b.json()["owner"] == "w1"
    assert b.json()["expires_ms"] == a.json()["expires_ms"]
    # the owner renews: the same token, a later expiry
    time.sleep(0.3)
    r = acquire(srv, "dl", "w1", timeout=2)
    assert r.status_code == 200
    assert r.json()["fencing_token"] == tok1 and r.json()["expires_ms"] > a.json()["expires_ms"]
    # another lock gets its own, larger token
    o = acquire(srv, "other", "w9")
    assert o.status_code == 200 and o.json()["fencing_token"] > tok1
    held = {l["lock_id"]: l for l in get(srv, "/locks").json()["locks"]}
    assert set(held) == {"dl", "other"} and held["dl"]["owner"] == "w1" and held["dl"]["fencing_token"] == tok1
    # release checks the owner
    assert release(srv, "dl", "w2").status_code == 409
    assert release(srv, "nope", "w1").status_code == 404
    # expiry: w2 gets it with a larger token than any before
    time.sleep(2.3)
    assert "dl" not in {l["lock_id"] for l in get(srv, "/locks").json()["locks"]}
    assert release(srv, "dl", "w1").status_code == 404  # expired: not held
    b = acquire(srv, "dl", "w2")
    assert b.status_code == 200, b.text
    assert b.json()["fencing_token"] > o.json()["fencing_token"]
    assert acquire(srv, "dl", "w1").status_code == 409
    r = release(srv, "dl", "w2")
    assert r.status_code == 200 and r.json()["released"] is True
    assert release(srv, "dl", "w2").status_code == 404
    c = acquire(srv, "dl", "w1")
    assert c.status_code == 200 and c.json()["fencing_token"] > b.json()["fencing_token"]
    # tokens survive a restart: the counter is in the store
    srv.stop()
    srv.start()
    assert acquire(srv, "dl", "w2").status_code == 409
    n = acquire(srv, "fresh", "w3")
    assert n.status_code == 200 and n.json()["fencing_token"] > c.json()["fencing_token"]


LONG = "x" * 129


@pytest.mark.parametrize("path,body", [
    ("/locks/acquire", {"lock_id": "a", "owner": "o"}),
    ("/locks/acquire", {"lock_id": "a", "owner": "o", "timeout": 0}),
    ("/locks/acquire", {"lock_id": "a", "owner": "o", "timeout": 86401}),
    ("/locks/acquire", {"lock_id": "a", "owner": "o", "timeout": 1.5}),
    ("/locks/acquire", {"lock_id": "a", "owner": "o", "timeout": "10"}),
    ("/locks/acquire", {"lock_id": "", "owner": "o", "timeout": 10}),
    ("/locks/acquire", {"lock_id": LONG, "owner": "o", "timeout": 10}),
    ("/locks/acquire", {"lock_id": "a", "owner": "o\n", "timeout": 10}),
    ("/locks/acquire", {"lock_id": 5, "owner": "o", "timeout": 10}),
    ("/locks/acquire", {"lock_id": "a", "owner": "o", "timeout": 10, "extra": 1}),
    ("/locks/acquire", [1, 2]),
    ("/locks/release", {"lock_id": "a"}),
    ("/locks/release", {"lock_id": "a", "owner": LONG}),
    ("/servers/register", {"server_id": "s9"}),
    ("/servers/register", {"server_id": "a/b", "url": "http://x"}),
    ("/servers/register", {"server_id": "s9", "url": "http://x", "role": "king"}),
    ("/servers/register", {"server_id": "s9", "url": "u" * 256}),
    ("/heartbeat", {"server_id": "s9", "url": "http://x", "load": 1.5}),
    ("/heartbeat", {"server_id": "s9", "url": "http://x", "load": "low"}),
    ("/heartbeat", {"server_id": LONG, "url": "http://x"}),
    ("/heartbeat", {"server_id": "s\x019", "url": "http://x"}),
])
def test_bad_input_is_400_and_changes_nothing(srv, path, body):
    before_s = servers(srv)
    before_l = get(srv, "/locks").json()["locks"]
    r = post(srv, path, body)
    assert r.status_code == 400, (body, r.status_code, r.text)
    assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"]["message"]
    assert servers(srv).keys() == before_s.keys()
    assert get(srv, "/locks").json()["locks"] == before_l


def test_bad_json_body_and_unknown_server_path(srv):
    r = srv.api("POST", C + "/locks/acquire", data="{nope", headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400
    assert post(srv, "/servers/unregister/", {}).status_code == 404
    assert post(srv, "/servers/unregister/" + "y" * 129, {}).status_code == 404


ADMIN, TENANT = "coord-admin-key", "coord-tenant-key"


def h(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def test_admin_only_except_health(tmp_path):
    _require_bin()
    d = KeyedDaemon(tmp_path, cfg(extra="auth: {admin_keys: [\"%s\"]}\n"
                                      "tenants:\n  - {id: t1, keys: [\"%s\"]}\n" % (h(ADMIN), h(TENANT))), ADMIN)
    try:
        d.start()
        routes = [("GET", "/servers", None), ("POST", "/servers/register", {"server_id": "x", "url": "http://x"}),
                  ("POST", "/servers/unregister/s1", {}), ("POST", "/heartbeat", {"server_id": "x", "url": "u"}),
                  ("GET", "/cluster", None), ("POST", "/locks/acquire", {"lock_id": "a", "owner": "o", "timeout": 5}),
                  ("POST", "/locks/release", {"lock_id": "a", "owner": "o"}), ("GET", "/locks", None)]
        for method, path, body in routes:
            kw = {"json": body} if body is not None else {}
            r = d.api(method, C + path, timeout=10, **kw)
            assert r.status_code == 401, (path, r.status_code)
            r = d.api(method, C + path, headers={"Authorization": "Bearer " + TENANT}, timeout=10, **kw)
            assert r.status_code == 403, (path, r.status_code)
        # nothing changed: s1 still registered, no lock held
        hdr = {"Authorization": "Bearer " + ADMIN}
        s = d.api("GET", C + "/servers", headers=hdr, timeout=10).json()["servers"]
        assert [x["server_id"] for x in s] == [ME]
        assert d.api("GET", C + "/locks", headers=hdr, timeout=10).json()["locks"] == []
        r = d.api("GET", C + "/health", timeout=10)
        assert r.status_code == 200 and r.json()["server_id"] == ME
        # the /api/ alias answers the same
        assert d.api("GET", "/api/coordinator/cluster", headers=hdr, timeout=10).status_code == 200
    finally:
        d.stop()


def test_gpupool_servers(srv):
    assert post(srv, "/servers/register", {"server_id": "s2", "url": "http://127.0.0.1:9"}).status_code == 200
    p = srv.cli("servers")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["SERVER", "URL", "ROLE", "STATE", "HEARTBEAT", "LOAD"]
    rows = {ln.split()[0]: ln.split() for ln in lines[1:]}
    assert rows[srv.me][1] == srv.url and rows[srv.me][2] == "leader" and rows[srv.me][3] == "active"
    assert rows["s2"][2] == "follower"
    p = srv.cli("--json", "servers")
    assert p.returncode == 0, p.stderr
    ids = [s["server_id"] for s in json.loads(p.stdout)["servers"]]
    assert ids == sorted([srv.me, "s2"])
    assert "servers" in srv.cli("help").stdout


# ---- the same on PostgreSQL (GPUPOOL_TEST_PG_URL, tests/pg/start-pg.sh) ----

@pytest.fixture
def pg_srv(tmp_path):
    _require_bin()
    base = os.environ.get("GPUPOOL_TEST_PG_URL")
    if not base:
        pytest.skip("GPUPOOL_TEST_PG_URL is not set (tests/pg/start-pg.sh starts a server)")
    if not shutil.which("psql"):
        pytest.skip("psql not installed")
    name = "gp_coord_%s" % uuid.uuid4().hex[:12]
    subprocess.run(["psql", base, "-v", "ON_ERROR_STOP=1", "-qc", "CREATE DATABASE %s" % name],
                   check=True, capture_output=True, timeout=60)
    u = urllib.parse.urlsplit(base)
    url = "%s://%s/%s%s" % (u.scheme, u.netloc, name, "?" + u.query if u.query else "")
    d = Daemon(tmp_path, cfg("s1", extra='store: {url: "%s"}\n' % url))
    d.me = "s1"
    try:
        d.start()
        yield d
    except RuntimeError as e:
        pytest.fail(str(e))
    finally:
        d.stop()
        subprocess.run(["psql", base, "-qc", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name],
                       capture_output=True, timeout=60)


def test_registry_on_postgres(pg_srv):
    registry_body(pg_srv)


def test_locks_on_postgres(pg_srv):
    locks_body(pg_srv)


# ---- every registry and lock write is audited (GET /admin/audit) ----

def coord_audit(d, **kw):
    r = d.api("GET", "/admin/audit", timeout=10, **kw)
    assert r.status_code == 200, r.text
    return [a for a in r.json()["audit"] if a["action"].startswith("coordinator.")]


def at_ms(at):
    """The audit's "at" (2026-11-27T15:01:02.345Z) in ms since the epoch."""
    return calendar.timegm(time.strptime(at[:19], "%Y-%m-%dT%H:%M:%S")) * 1000 + int(at[20:23])


def audit_body(d, who, hdr=None):
    """who: what every entry's "who" starts with."""
    kw = {"headers": hdr} if hdr else {}
    t0 = int(time.time() * 1000) - 2000

    def call(path, body, status=200):
        r = post(d, path, body, **kw)
        assert r.status_code == status, (path, body, r.status_code, r.text)
        return r.json()

    call("/servers/register", {"server_id": "s2", "url": "http://127.0.0.1:9"})
    # heartbeats that move only the time and the load are not audited (one a second would bury the log);
    # nor are this server's own beats (every HB_S)
    for load in (0.1, 0.2, 0.3):
        call("/heartbeat", {"server_id": "s2", "url": "http://127.0.0.1:9", "load": load})
    time.sleep(HB_S * 2 + 0.5)
    # a heartbeat that changes the role is; so is one that registers an unknown server
    call("/heartbeat", {"server_id": "s2", "url": "http://127.0.0.1:9", "role": "standby"})
    call("/heartbeat", {"server_id": "s3", "url": "http://127.0.0.1:10"})
    call("/servers/unregister/s3", {})
    # locks: acquire, renew (same token), release; an expired lock taken by another owner (a steal)
    a = call("/locks/acquire", {"lock_id": "dl", "owner": "w1", "timeout": 30})
    time.sleep(0.05)
    n = call("/locks/acquire", {"lock_id": "dl", "owner": "w1", "timeout": 60})
    call("/locks/release", {"lock_id": "dl", "owner": "w1"})
    e = call("/locks/acquire", {"lock_id": "ex", "owner": "w1", "timeout": 1})
    gone = call("/locks/acquire", {"lock_id": "gone", "owner": "w5", "timeout": 1})
    time.sleep(1.3)
    # both expired: w2 takes "ex"; the grant also removes the expired "gone", audited as its expiry
    st = call("/locks/acquire", {"lock_id": "ex", "owner": "w2", "timeout": 30})
    # what writes nothing is not audited: a refused acquire or release, an unknown server, bad input
    call("/locks/acquire", {"lock_id": "ex", "owner": "w3", "timeout": 30}, 409)
    call("/locks/release", {"lock_id": "ex", "owner": "w3"}, 409)
    call("/locks/release", {"lock_id": "nope", "owner": "w1"}, 404)
    call("/servers/unregister/s9", {}, 404)
    call("/servers/register", {"server_id": "s4"}, 400)
    t1 = int(time.time() * 1000) + 2000

    entries = coord_audit(d, **kw)
    assert [(x["action"], x["target"]) for x in entries] == [
        ("coordinator.server.register", "s2"),
        ("coordinator.server.heartbeat", "s2"),
        ("coordinator.server.heartbeat", "s3"),
        ("coordinator.server.unregister", "s3"),
        ("coordinator.lock.acquire", "dl"),
        ("coordinator.lock.renew", "dl"),
        ("coordinator.lock.release", "dl"),
        ("coordinator.lock.acquire", "ex"),
        ("coordinator.lock.acquire", "gone"),
        ("coordinator.lock.expire", "gone"),
        ("coordinator.lock.steal", "ex"),
    ], entries
    times = [at_ms(x["at"]) for x in entries]
    reg, hb2, hb3, unreg, acq, ren, rel, acq2, acq3, exp, steal = entries
    assert all(x["who"].startswith(who) for x in entries if x is not exp), [x["who"] for x in entries]
    assert t0 <= times[0] and times == sorted(times) and times[-1] <= t1, (t0, times, t1)
    # an expiry is nobody's act: it ended at its expires_ms, and a later grant removed it
    assert exp["who"] == "lock expiry" and at_ms(exp["at"]) == gone["expires_ms"] and exp["new"] is None
    assert exp["old"]["owner"] == "w5" and exp["old"]["fencing_token"] == gone["fencing_token"]
    assert reg["old"] is None and reg["new"]["url"] == "http://127.0.0.1:9" and reg["new"]["role"] == "follower"
    assert hb2["old"]["role"] == "follower" and hb2["new"]["role"] == "standby"
    assert hb3["old"] is None and hb3["new"]["url"] == "http://127.0.0.1:10"
    assert unreg["old"]["url"] == "http://127.0.0.1:10" and unreg["new"] is None
    assert acq["old"] is None and acq["new"]["owner"] == "w1"
    assert acq["new"]["fencing_token"] == a["fencing_token"] and acq["new"]["expires_ms"] == a["expires_ms"]
    assert ren["old"]["expires_ms"] == a["expires_ms"] and ren["new"]["expires_ms"] == n["expires_ms"]
    assert ren["old"]["fencing_token"] == ren["new"]["fencing_token"] == a["fencing_token"]
    assert rel["old"]["owner"] == "w1" and rel["new"] is None
    assert acq2["new"]["fencing_token"] == e["fencing_token"]
    assert steal["old"]["owner"] == "w1" and steal["old"]["expires_ms"] == e["expires_ms"]
    assert steal["new"]["owner"] == "w2" and steal["new"]["fencing_token"] == st["fencing_token"]
    assert steal["old"]["expires_ms"] <= at_ms(steal["at"])
    # stored before the answers: a restart keeps them
    d.stop()
    d.start()
    assert coord_audit(d, **kw) == entries


def test_registry_and_lock_writes_are_audited_with_who_and_when(tmp_path):
    _require_bin()
    d = KeyedDaemon(tmp_path, cfg(extra="auth: {admin_keys: [\"%s\"]}\n" % h(ADMIN)), ADMIN)
    try:
        d.start()
        audit_body(d, "admin key %s..." % h(ADMIN)[:15], {"Authorization": "Bearer " + ADMIN})
    finally:
        d.stop()


def test_audit_on_postgres(pg_srv):
    # no keys: a loopback caller is served as admin, named by the kernel (peer.h)
    audit_body(pg_srv, "user %s (uid %d, loopback)" % (pwd.getpwuid(os.getuid()).pw_name, os.getuid()))
