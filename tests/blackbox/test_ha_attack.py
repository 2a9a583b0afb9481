"""Attacks on a follower (docs/deployment.md, "Several servers"; docs/api.md,
"Several servers"): an outside client talks to s2, the follower that
forwards every request to s1, the leader, and tries to gain something on
the way.

The servers are test_ha.py's (Server, pg_db, _psql, LEASE_S).  Here s1
advertises the URL of a recording TCP relay (Relay) in front of its port,
so the follower's requests pass through it on their way to the leader and
the test can read exactly what the leader was sent (how many requests,
with which heads and bodies).  Every attack then checks that the client
got a clear error (or a faithful answer), that nothing was stored (psql on
the shared database, and a read through the leader) and that the next
ordinary request through the follower works.

They were written by a tester who did not write the follower, from its
documented contract; the defects they found are fixed, and they stay as
regression tests.  One known limit is not tested here: the follower's
forwards all come from its own address, so with many clients through it
they share the leader's server.max_connections_per_ip for that address
(docs/deployment.md, "Several servers").

Needs GPUPOOL_TEST_PG_URL and psql, as test_ha.py.
"""
import hashlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest
import requests

from apiutil import batch, reap_supervisors, wait_for  # noqa: F401  (reap_supervisors: autouse)
from rawhttp import RawConn
from conftest import SIM_CONFIG, _require_bin
from test_ha import LEASE_S, Server, _psql, pg_db, stop_all  # noqa: F401  (pg_db: a fixture)

pytestmark = pytest.mark.e2e


# ---- a recording relay between the follower and the leader --------------------

class Relay:
    """Listens on 127.0.0.1:port and relays every connection to target
    (set once the leader has started), recording the bytes sent toward
    the leader, per connection."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.target = None
        self.lock = threading.Lock()
        self.conns = []        # [bytearray sent toward the leader] per connection
        self.open = 0          # connections open right now
        self.alive = []        # per connection: still open (both ways)
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            rec = bytearray()
            with self.lock:
                self.conns.append(rec)
                self.alive.append(True)
                self.open += 1
                n = len(self.conns) - 1
            done = threading.Event()
            threading.Thread(target=self._pipe, args=(c, u, rec, done, n), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, None, done, n), daemon=True).start()

    def _pipe(self, src, dst, rec, done, n):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if rec is not None:
                    with self.lock:
                        rec += b
                dst.sendall(b)
        except OSError:
            pass
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass
        if done.is_set():  # the second direction ended too: the connection is over
            src.close()
            dst.close()
            with self.lock:
                self.open -= 1
                self.alive[n] = False
        done.set()

    def stop(self):
        self.stopped = True
        self.sock.close()

    def open_carrying(self, needle):
        """How many open connections carried a request whose target holds needle."""
        with self.lock:
            streams = [(bytes(r), a) for r, a in zip(self.conns, self.alive)]
        return sum(1 for st, a in streams if a and any(needle in q[1] for q in parse_requests(st)
                                                         if isinstance(q[1], str)))

    def mark(self):
        """A point in the recording: requests() after it."""
        with self.lock:
            return [len(r) for r in self.conns]

    def requests(self, since=None):
        """The requests the leader was sent (after mark() since), parsed
        as HTTP/1.1 frames them: [(method, target, {header: [values]},
        body)].  Garbage that is no request head is returned as
        ("?", bytes, {}, b"")."""
        with self.lock:
            streams = [bytes(r) for r in self.conns]
        out = []
        for i, s in enumerate(streams):
            if since is not None:
                s = s[since[i]:] if i < len(since) else s
            out.extend(parse_requests(s))
        return out


def parse_requests(s):
    out = []
    while s:
        end = s.find(b"\r\n\r\n")
        if end < 0:
            out.append(("?", s, {}, b""))
            break
        head, s = s[:end].decode("latin-1"), s[end + 4:]
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            out.append(("?", head.encode("latin-1"), {}, b""))
            break
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs.setdefault(k.strip().lower(), []).append(v.strip())
        body = b""
        if "chunked" in ",".join(hdrs.get("transfer-encoding", [])).lower():
            while True:
                nl = s.find(b"\r\n")
                if nl < 0:
                    break
                n = int(s[:nl].split(b";")[0], 16)
                body += s[nl + 2:nl + 2 + n]
                s = s[nl + 2 + n + 2:]
                if n == 0:
                    break
        elif "content-length" in hdrs:
            n = int(hdrs["content-length"][0])
            body, s = s[:n], s[n:]
        out.append((parts[0], parts[1], hdrs, body))
    return out


# ---- the servers ----------------------------------------------------------------

ADMIN, KEY_A, KEY_B = "attack-admin-key", "attack-key-of-a", "attack-key-of-b"
A, B = "tenant-a", "tenant-b"


def h(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


KEYED = ("auth: {admin_keys: [\"%s\"]}\n"
         "tenants:\n"
         "  - {id: %s, keys: [\"%s\"], max_priority: 0, default_priority: 5}\n"
         "  - {id: %s, keys: [\"%s\"], max_priority: 0, default_priority: 5}\n"
         % (h(ADMIN), A, h(KEY_A), B, h(KEY_B)))


class Srv(Server):
    """test_ha's Server with more config and a chosen advertise_url."""

    def __init__(self, tmp_path, name, pg, extra="", advertise=None):
        super().__init__(tmp_path, name, pg)
        cluster = "cluster: {server_id: %s, lease_s: %d%s}\n" % (
            name, LEASE_S, ', advertise_url: "%s"' % advertise if advertise else "")
        self.config_text = SIM_CONFIG + extra + 'store: {url: "%s"}\n' % pg + cluster


class Cluster:
    def __init__(self, s1, s2, relay):
        self.s1, self.s2, self.relay = s1, s2, relay


def stop_cluster(c):
    stop_all(c.s1, c.s2)
    c.relay.stop()


@pytest.fixture
def make_cluster(tmp_path, pg_db):
    """make_cluster(extra_config): s1 leading, s2 following, s1 advertising
    the relay; both stopped when the test ends."""
    _require_bin()
    made = []

    def make(extra=""):
        sub = tmp_path / ("c%d" % len(made))
        sub.mkdir()
        relay = Relay()
        s1 = Srv(sub, "s1", pg_db, extra, advertise=relay.url)
        s2 = Srv(sub, "s2", pg_db, extra)
        c = Cluster(s1, s2, relay)
        made.append(c)
        s1.start()
        relay.target = s1.port
        wait_for(s1.ready, 20, "s1 to lead")
        s2.start()
        wait_for(lambda: s2.health() == "follower", 10, "s2 to follow")
        return c

    try:
        yield make
    finally:
        for c in made:
            stop_cluster(c)


@pytest.fixture
def plain(make_cluster):
    """No keys: loopback clients only."""
    return make_cluster()


@pytest.fixture
def plain_any(make_cluster):
    """No keys, and plaintext served off loopback too (server.tls.plaintext:
    any), so that a plain client on another address meets the auth rules
    rather than the TLS rule (its 400 tls_required: test_tls.py)."""
    return make_cluster("server: {tls: {plaintext: any}}\n")


@pytest.fixture
def keyed(make_cluster):
    """An admin key and tenants A and B with a key each."""
    return make_cluster(KEYED)


def session():
    s = requests.Session()
    s.trust_env = False
    return s


def call(url, method, path, key=None, **kw):
    headers = kw.pop("headers", {})
    if key:
        headers["Authorization"] = "Bearer " + key
    kw.setdefault("timeout", 15)
    return session().request(method, url + path, headers=headers, **kw)


def err(r):
    try:
        return r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


# ---- raw sockets ----------------------------------------------------------------

def nonloopback_source():
    """A local IPv4 address that is not loopback, usable as the source of a
    connection to 127.0.0.1 (the server then sees a non-loopback peer); None
    when the machine has none."""
    cands = []
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True,
                             text=True, timeout=5).stdout
        cands = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    except (OSError, subprocess.SubprocessError):
        pass
    for a in cands:
        if a.startswith("127."):
            continue
        l = socket.socket()
        try:
            l.bind(("127.0.0.1", 0))
            l.listen(1)
            c = socket.socket()
            c.settimeout(2)
            c.bind((a, 0))
            c.connect(l.getsockname())
            peer = l.accept()[0]
            ok = peer.getpeername()[0] == a
            peer.close()
            c.close()
            if ok:
                return a
        except OSError:
            continue
        finally:
            l.close()
    return None


class Raw(RawConn):
    """One client connection on a raw socket; answers as (status,
    {header: value}, body)."""

    def __init__(self, port, source="127.0.0.1", timeout=10.0):
        super().__init__(port, source, timeout)

    def response(self, timeout=10.0):
        """One whole final answer (interim 1xx ones are skipped).  Raises
        EOFError when the server closed before a whole answer (the bytes it
        sent are in the message), socket.timeout when none came in time."""
        while True:
            r = super().response(timeout=timeout)
            if not 100 <= r.status < 200:
                return r.status, {k.lower(): v for k, v in r.headers}, r.body

    def closed(self, timeout=5.0):
        """True when the server closes the connection (after what it already
        sent) within timeout; False if it is still open then."""
        return self.ended(timeout)[0] is not None


def answer(c, timeout):
    """c's next answer as Raw.response gives it, or ("closed", message) /
    ("timeout", bytes) / ("reset", bytes) when none came whole."""
    try:
        return c.response(timeout)
    except EOFError as e:
        return ("closed", str(e))
    except socket.timeout:
        return ("timeout", c.buf)
    except ConnectionResetError:
        return ("reset", c.buf)


def one(port, data, source="127.0.0.1", timeout=10.0):
    """Send data on a new connection; the first answer as answer() gives it."""
    c = Raw(port, source, timeout)
    try:
        c.send(data)
        return answer(c, timeout)
    finally:
        c.close()


SUBMIT = b'{"gpu_request": 1, "command": ["true"], "name": "%s"}'


def submit_bytes(name, extra=b"", body=None):
    """A raw POST /api/v1/tasks whose body names the task."""
    body = SUBMIT % name.encode() if body is None else body
    return (b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def stored_names(c):
    out = _psql(c.s1.store_url, "SELECT name FROM tasks ORDER BY id")
    return out.split("\n") if out else []


def follower_works(c, key=None):
    """An ordinary request through the follower is answered at once, by the leader."""
    t0 = time.monotonic()
    r = call(c.s2.url, "GET", "/api/v1/tasks", key, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers.get("X-Gpupool-Forwarded-By") == "s2"
    assert time.monotonic() - t0 < 3, time.monotonic() - t0
    assert c.s1.proc.poll() is None and c.s2.proc.poll() is None


# ---- keys -------------------------------------------------------------------------

def test_keys_are_checked_through_the_follower_as_by_the_leader(keyed):
    """No key, a wrong key, tenant A on tenant B's task, a tenant key on
    /admin/*: through the follower the same answer as from the leader
    directly, and nothing changes."""
    c = keyed
    r = call(c.s1.url, "POST", "/api/v1/tasks", KEY_B, json={"gpu_request": 1, "command": ["sleep", "60"],
                                                             "name": "b-task"})
    assert r.status_code == 201, r.text
    tb = r.json()["id"]
    r = call(c.s1.url, "POST", "/api/v1/tasks", KEY_A, json={"gpu_request": 1, "command": ["sleep", "60"],
                                                             "name": "a-task"})
    assert r.status_code == 201, r.text
    ta = r.json()["id"]
    wait_for(lambda: call(c.s1.url, "GET", "/api/v1/tasks/%d" % tb, KEY_B).json()["state"] == "running", 10,
             "b-task to run")
    before = _psql(c.s1.store_url, "SELECT id, tenant, state FROM tasks ORDER BY id")
    lo = {"X-Gpupool-Forwarded-For": "127.0.0.1"}
    cases = [
        # method, path, key, body, headers, expected status, code
        ("GET", "/api/v1/tasks", None, None, {}, 401, "unauthorized"),
        ("GET", "/api/v1/tasks", "not-a-key", None, {}, 401, "unauthorized"),
        ("GET", "/api/v1/tasks", None, None, lo, 401, "unauthorized"),
        ("GET", "/api/v1/tasks", None, None, {"X-Gpupool-Forwarded-By": "s2"}, None, None),
        ("POST", "/api/v1/tasks", None, {"gpu_request": 1, "command": ["true"], "name": "nokey"}, {}, 401,
         "unauthorized"),
        ("POST", "/api/v1/tasks", "not-a-key", {"gpu_request": 1, "command": ["true"], "name": "badkey"}, {},
         401, "unauthorized"),
        ("POST", "/api/v1/tasks", KEY_A, {"gpu_request": 1, "command": ["true"], "name": "as-b",
                                          "tenant_id": B}, {}, 403, "forbidden"),
        ("GET", "/api/v1/tasks/%d" % tb, KEY_A, None, {}, 404, "not_found"),
        ("GET", "/api/v1/tasks/%d/logs" % tb, KEY_A, None, {}, 404, "not_found"),
        ("POST", "/api/v1/tasks/%d/cancel" % tb, KEY_A, None, {}, 404, "not_found"),
        ("DELETE", "/api/v1/tasks/%d" % tb, KEY_A, None, {}, 404, "not_found"),
        ("POST", "/api/v1/tasks/%d/cancel" % tb, None, None, {}, 401, "unauthorized"),
        ("GET", "/api/v1/tenants/%s" % B, KEY_A, None, {}, 404, "not_found"),
        ("GET", "/admin/scheduler/stats", KEY_A, None, {}, 403, "forbidden"),
        ("GET", "/admin/scheduler/stats", KEY_A, None, lo, 403, "forbidden"),
        ("GET", "/metrics", KEY_A, None, {}, 403, "forbidden"),
        ("PUT", "/admin/tenants/evil", KEY_A, {"weight": 1}, {}, 403, "forbidden"),
        ("POST", "/admin/tenants/%s/credit" % A, KEY_A, {"amount_cents": 100000}, {}, 403, "forbidden"),
        ("POST", "/admin/tenants/%s/keys" % A, KEY_A, None, {}, 403, "forbidden"),
        ("POST", "/api/v1/coordinator/servers/register", KEY_A, {"server_id": "s1", "url": "http://127.0.0.1:9"},
         {}, 403, "forbidden"),
        ("POST", "/admin/tenants/%s/credit" % A, None, {"amount_cents": 100000}, {}, 401, "unauthorized"),
    ]
    for method, path, key, body, hdrs, status, code in cases:
        got = []
        for s in (c.s1, c.s2):  # directly, then through the follower
            kw = {"headers": dict(hdrs)}
            if body is not None:
                kw["json"] = body
            r = call(s.url, method, path, key, **kw)
            got.append((r.status_code, err(r)))
        what = (method, path, key, hdrs)
        if status is None:  # a client's X-Gpupool-Forwarded-By: not forwarded again (503), the leader's 401
            assert got == [(401, "unauthorized"), (503, "standby")], (what, got)
        else:
            assert got == [(status, code), (status, code)], (what, got)
    # nothing changed: the store, and the leader's answers
    assert _psql(c.s1.store_url, "SELECT id, tenant, state FROM tasks ORDER BY id") == before
    assert set(stored_names(c)) == {"a-task", "b-task"}
    assert call(c.s1.url, "GET", "/api/v1/tasks/%d" % tb, KEY_B).json()["state"] == "running"
    assert call(c.s1.url, "GET", "/api/v1/tasks/%d" % ta, KEY_A).json()["state"] == "running"
    assert call(c.s1.url, "GET", "/admin/tenants/evil", ADMIN).status_code == 404
    bal = call(c.s1.url, "GET", "/api/v1/tenants/%s" % A, ADMIN).json()["billing"]["credits_cents"]
    assert bal == 0, bal
    srv = _psql(c.s1.store_url, "SELECT url FROM coord_servers WHERE server_id = 's1'")
    assert srv == c.relay.url, srv
    # the owners still see their own through the follower
    r = call(c.s2.url, "GET", "/api/v1/tasks", KEY_A)
    assert r.status_code == 200 and [t["id"] for t in r.json()["tasks"]] == [ta], r.text
    follower_works(c, ADMIN)


# ---- X-Gpupool-Forwarded-For / -By sent by a client ----------------------------------

def code_of(answer):
    """The error code of a raw answer (status, headers, body), or None."""
    try:
        return json.loads(answer[2])["error"]["code"]
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def get_bytes(path=b"/api/v1/tasks", extra=b""):
    return b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n"


def test_forwarded_for_from_a_client_only_lowers_its_rights(plain_any):
    """No keys: only loopback clients are served.  Sent to the leader
    directly, an X-Gpupool-Forwarded-For that names any non-loopback address
    (alone or in a list) is 403; a client on a non-loopback
    address gets 403 from the leader and through the follower whatever
    headers it sends, and the follower tells the leader its real address."""
    c = plain_any
    refused = [b"10.1.2.3", b"127.0.0.1, 10.1.2.3", b"10.1.2.3, 127.0.0.1", b"::1,10.1.2.3", b"localhost",
               b"0.0.0.0", b"192.0.2.77"]
    for v in refused:
        for path in (b"/api/v1/tasks", b"/admin/scheduler/stats", b"/v1/models"):
            a = one(c.s1.port, get_bytes(path, b"X-Gpupool-Forwarded-For: " + v + b"\r\n"))
            assert a[0] == 403 and code_of(a) == "forbidden", (v, path, a)
    a = one(c.s1.port, submit_bytes("direct-xff", b"X-Gpupool-Forwarded-For: 10.1.2.3\r\n"))
    assert a[0] == 403, a
    assert stored_names(c) == []

    ext = nonloopback_source()
    if ext is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    lo = b"X-Gpupool-Forwarded-For: 127.0.0.1\r\n"
    attempts = [
        get_bytes(),
        get_bytes(extra=lo),
        get_bytes(extra=b"x-gpupool-forwarded-for: 127.0.0.1\r\n"),
        get_bytes(extra=lo + lo),
        get_bytes(extra=b"X-Gpupool-Forwarded-For: ::1\r\n"),
        get_bytes(extra=b"X-A: b\nX-Gpupool-Forwarded-For: 127.0.0.1\r\n"),   # a bare LF in the head
        get_bytes(b"/admin/scheduler/stats", lo),
        get_bytes(b"/v1/models", lo),
        submit_bytes("ext-1"),
        submit_bytes("ext-2", lo),
    ]
    m = c.relay.mark()
    for req in attempts:
        for port in (c.s2.port, c.s1.port):
            a = one(port, req, source=ext)
            if isinstance(a[0], int) and a[0] == 400 and port == c.s2.port:
                continue  # a head the follower refuses to forward is fine
            assert a[0] == 403 and code_of(a) == "forbidden", (port, req[:120], a)
        # straight to the leader, claiming to be the follower
        a = one(c.s1.port, req.replace(b"Host: x\r\n", b"Host: x\r\nX-Gpupool-Forwarded-By: s2\r\n" + lo),
                source=ext)
        assert a[0] == 403 and code_of(a) == "forbidden", (req[:120], a)
    seen = c.relay.requests(m)
    assert seen, "nothing was forwarded"
    for method, target, hdrs, _ in seen:
        xff = ",".join(hdrs.get("x-gpupool-forwarded-for", []))
        assert ext in [a.strip() for a in xff.split(",")], (method, target, hdrs)
    assert stored_names(c) == []
    follower_works(c)


def test_a_second_forwarded_for_line_counts_too(plain):
    """Sent to the leader directly, two X-Gpupool-Forwarded-For lines are
    one list (RFC 9110 5.3: field lines of one name are combined with
    commas), so "127.0.0.1" then "10.1.2.3" names a non-loopback address:
    403, as for "127.0.0.1, 10.1.2.3" on one line (docs/api.md: "every
    address listed here")."""
    c = plain
    for lines in ((b"10.1.2.3", b"127.0.0.1"), (b"127.0.0.1", b"10.1.2.3")):
        extra = b"".join(b"X-Gpupool-Forwarded-For: %s\r\n" % v for v in lines)
        a = one(c.s1.port, get_bytes(b"/api/v1/tasks", extra))
        assert a[0] == 403 and code_of(a) == "forbidden", (lines, a)
        a = one(c.s1.port, submit_bytes("two-lines", extra + b"X-Gpupool-Forwarded-By: s2\r\n"))
        assert a[0] == 403 and code_of(a) == "forbidden", (lines, a)
    assert stored_names(c) == []


def test_a_client_cannot_make_the_follower_loop_or_forward_elsewhere(plain):
    """A request that carries X-Gpupool-Forwarded-By (any spelling) is not
    forwarded (503 standby); an absolute-form target or a Host naming
    another server sends nothing anywhere but to the leader, once."""
    c = plain
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(8)
    trap.settimeout(0.5)
    trap_port = trap.getsockname()[1]
    m = c.relay.mark()
    for extra in (b"X-Gpupool-Forwarded-By: s9\r\n", b"X-Gpupool-Forwarded-By:\r\n",
                  b"x-gpupool-forwarded-by: s1\r\n", b"X-GPUPOOL-FORWARDED-BY: s2\r\n",
                  b"X-A: b\nX-Gpupool-Forwarded-By: s9\r\n"):
        for req in (get_bytes(extra=extra), submit_bytes("loop", extra)):
            a = one(c.s2.port, req)
            assert a[0] == 503 and code_of(a) == "standby", (extra, a)
            assert a[1].get("retry-after") == "1", a
    assert c.relay.requests(m) == []
    for target in (b"http://127.0.0.1:%d/api/v1/tasks" % trap_port, b"//127.0.0.1:%d/api/v1/tasks" % trap_port,
                   b"http://127.0.0.1:%d/api/v1/tasks" % c.s2.port):
        a = one(c.s2.port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert isinstance(a[0], int) and 400 <= a[0] < 500, (target, a)
    a = one(c.s2.port, get_bytes(extra=b"").replace(b"Host: x", b"Host: 127.0.0.1:%d" % trap_port))
    assert a[0] == 200, a
    a = one(c.s2.port, get_bytes().replace(b"Host: x", b"Host: 127.0.0.1:%d" % c.s2.port))
    assert a[0] == 200, a
    with pytest.raises(socket.timeout):
        trap.accept()
    trap.close()
    seen = c.relay.requests(m)
    # the two with a Host of their own reached the leader once each; "//host/path" may reach it as a path
    assert [t for _, t, _, _ in seen if t == "/api/v1/tasks"] == ["/api/v1/tasks"] * 2, seen
    assert len(seen) <= 3, seen
    follower_works(c)


# ---- malformed requests and smuggling ----------------------------------------------------

def send_big(port, head, body_piece, total, timeout=10.0, tail=b""):
    """Send head, then body_piece until total bytes of body were sent or the
    server stopped reading, then tail; the answer as one() gives it."""
    r = Raw(port, timeout=timeout)
    try:
        r.send(head)
        sent = 0
        try:
            while sent < total:
                r.send(body_piece)
                sent += len(body_piece)
            r.send(tail)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
        return answer(r, timeout)
    finally:
        r.close()


def test_malformed_requests_get_an_error_or_reach_the_leader_once(plain):
    """Raw requests to the follower: each gets an error from the follower
    (nothing forwarded) or is forwarded once, faithfully, and the leader's
    answer is relayed.  Only what was asked for is stored."""
    c = plain
    chunk_body = SUBMIT % b"chunked-ok"
    cases = [
        # label, request, statuses accepted, forwarded: 0, 1 or None (0 or 1)
        ("bare CR in a header value", get_bytes(extra=b"X-A: b\rX-Gpupool-Forwarded-By: s9\r\n"), {400}, 0),
        ("NUL in a header value", get_bytes(extra=b"X-A: a\x00b\r\n"), {400, 200}, None),
        ("obs-fold", get_bytes(extra=b"X-A: b\r\n X-B: c\r\n"), {400}, 0),
        ("a header over 64 KiB", get_bytes(extra=b"X-Big: " + b"a" * (70 << 10) + b"\r\n"), {400, 413, 431}, 0),
        ("2000 headers, 80 KiB", get_bytes(extra=b"".join(b"X-H%04d: %s\r\n" % (i, b"v" * 30) for i in range(2000))),
         {400, 413, 431}, 0),
        ("a URL of 100 KiB", get_bytes(b"/api/v1/tasks?x=" + b"a" * (100 << 10)), {400, 414, 431}, 0),
        ("a bad method", b"FOO /api/v1/tasks HTTP/1.1\r\nHost: x\r\n\r\n", {400, 405, 501}, None),
        ("a bad version", b"GET /api/v1/tasks HTTP/9.9\r\nHost: x\r\n\r\n", {400, 505}, 0),
        ("no version", b"GET /api/v1/tasks\r\nHost: x\r\n\r\n", {400}, 0),
        ("Content-Length -1", submit_bytes("neg-cl").replace(b"Content-Length: ", b"Content-Length: -"), {400}, 0),
        ("Content-Length 1e20", b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         b"Content-Length: 100000000000000000000\r\n\r\n" + SUBMIT % b"huge-cl", {400, 413}, 0),
        ("Content-Length with a list", submit_bytes("cl-list").replace(b"Content-Length: ", b"Content-Length: 5, "),
         {400}, 0),
        ("a chunk size that overflows", b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         b"Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n" + SUBMIT % b"chunk-overflow", {400, 413}, 0),
        ("a chunked body", b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(chunk_body), chunk_body), {201}, 1),
        ("Expect: 100-continue", submit_bytes("expect-ok", b"Expect: 100-continue\r\n"), {201}, 1),
        ("HTTP/1.0, no Host", b"GET /api/v1/tasks HTTP/1.0\r\n\r\n", {200}, 1),
    ]
    for label, req, ok, fwd in cases:
        m = c.relay.mark()
        a = one(c.s2.port, req, timeout=5)
        assert a[0] in ok, (label, a)
        seen = c.relay.requests(m)
        if fwd == 0:
            assert seen == [], (label, seen)
        else:
            assert len(seen) == (fwd if fwd is not None else len(seen)) and len(seen) <= 1, (label, seen)
            if seen:
                assert a[1].get("x-gpupool-forwarded-by") == "s2", (label, a)
        for _, _, hdrs, _ in seen:  # RFC 9110 5.5: never forwarded as it came
            assert "\x00" not in repr(hdrs) and "\\x00" not in repr(hdrs), (label, hdrs)
        if label == "a chunked body":
            assert seen[0][3] == chunk_body, seen
    # bodies over server.max_body_bytes (1 MiB): 413 from the follower, nothing forwarded
    m = c.relay.mark()
    big = 2 << 20
    a = send_big(c.s2.port, b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % big, b" " * 65536, big)
    assert a[0] == 413, a
    piece = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    a = send_big(c.s2.port, b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n", piece, big, tail=b"0\r\n\r\n")
    assert a[0] == 413, a
    assert c.relay.requests(m) == []
    # two requests pipelined on one connection: two answers, in order; the leader saw two
    m = c.relay.mark()
    r = Raw(c.s2.port)
    try:
        r.send(submit_bytes("pipe-1") + get_bytes(b"/api/v1/tasks/999999") + submit_bytes("pipe-2"))
        answers = [r.response(5) for _ in range(3)]
    finally:
        r.close()
    assert [a[0] for a in answers] == [201, 404, 201], answers
    assert json.loads(answers[0][2])["name"] == "pipe-1" and json.loads(answers[2][2])["name"] == "pipe-2"
    assert [(mt, t) for mt, t, _, _ in c.relay.requests(m)] == [
        ("POST", "/api/v1/tasks"), ("GET", "/api/v1/tasks/999999"), ("POST", "/api/v1/tasks")]
    assert sorted(stored_names(c)) == ["chunked-ok", "expect-ok", "pipe-1", "pipe-2"]
    follower_works(c)


def read_all(port, data, timeout=2.0):
    """Send data, then read every answer until the server closes or is
    silent for timeout: ([(status, headers, body)], closed)."""
    r = Raw(port, timeout=timeout)
    answers = []
    try:
        r.send(data)
        while True:
            try:
                answers.append(r.response(timeout))
            except (EOFError, ConnectionResetError):
                return answers, True
            except socket.timeout:
                return answers, False
    finally:
        r.close()


SMUGGLE_PATHS = [b"/api/v1/tasks", b"/v1/chat/completions"]


@pytest.mark.parametrize("path", SMUGGLE_PATHS, ids=lambda p: p.decode())
def test_two_content_lengths_are_refused(plain, path):
    """A request with two different Content-Length values has no framing
    anyone can agree on (RFC 9112 6.3: the server MUST answer 400 and close
    the connection).  Read by its second Content-Length it is one submit
    whose body ends with what looks like a second request; the follower
    must not turn that into a second request to the leader.  (The leader,
    sent the same bytes directly, answers 400 and closes on /v1 paths, its
    gateway's own front; on /api/v1 paths it also takes the first
    Content-Length and stores both.)"""
    c = plain
    outer = SUBMIT % b"outer-2cl"
    inner = submit_bytes("smuggled-2cl")
    req = (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(outer), len(outer) + len(inner)) + outer + inner)
    m = c.relay.mark()
    answers, closed = read_all(c.s2.port, req)
    seen = [(mt, t, b) for mt, t, _, b in c.relay.requests(m)]
    names = stored_names(c)
    assert [a[0] for a in answers] == [400], (answers, seen, names)
    assert seen == [] and names == [], (seen, names)
    assert closed
    follower_works(c)


@pytest.mark.parametrize("path", SMUGGLE_PATHS, ids=lambda p: p.decode())
def test_content_length_and_chunked_reach_the_leader_once_at_most(plain, path):
    """Transfer-Encoding: chunked and a Content-Length on one request (RFC
    9112 6.1 and 6.3: chunked wins, and the server MUST close the
    connection after answering, or refuse it with 400).  By its
    Content-Length the request is one submit whose body holds "0" and a
    whole second request; the follower must not forward that second one.
    (The leader, sent the same bytes directly, answers 400 and closes on
    /v1 paths; on /api/v1 paths it also serves both.)"""
    c = plain
    inner = submit_bytes("smuggled-te")
    req = (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % (5 + len(inner)) + inner)
    m = c.relay.mark()
    answers, closed = read_all(c.s2.port, req)
    seen = [(mt, t, b) for mt, t, _, b in c.relay.requests(m)]
    names = stored_names(c)
    assert len(answers) <= 1 and len(seen) <= 1, (answers, seen, names)
    assert "smuggled-te" not in names, (answers, seen, names)
    assert closed, answers
    follower_works(c)


def test_a_transfer_coding_that_is_not_chunked_is_refused_at_once(plain):
    """Transfer-Encoding other than chunked (RFC 9112 6.1: chunked not the
    final coding of a request: the server MUST answer 400 and close; 6.1,
    an unknown coding: 501).  The follower answers at once and forwards
    nothing; it does not sit on the connection until its header timeout.
    (The leader, sent the same directly, also waits: 408 after its
    header_timeout_s.)"""
    c = plain
    body = SUBMIT % b"te-gzip"
    for te in (b"gzip", b"identity"):
        req = (b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: %s\r\nContent-Length: %d\r\n\r\n" % (te, len(body)) + body)
        m = c.relay.mark()
        t0 = time.monotonic()
        a = one(c.s2.port, req, timeout=5)
        took = time.monotonic() - t0
        assert a[0] in (400, 501), (te, a, "%.1f s" % took)
        assert c.relay.requests(m) == []
    assert stored_names(c) == []
    follower_works(c)


# ---- slow clients ---------------------------------------------------------------------

HEADER_TIMEOUT = 3  # a server.header_timeout_s shorter than the default 10 s: the same code, sooner


def slow_clients(port):
    """50 clients that send half a head and stop, 25 that send a whole head
    and the start of a 1000-byte body, 100 that send nothing."""
    slow = []
    for _ in range(50):
        r = Raw(port, source="127.0.0.2")
        r.send(b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        slow.append(r)
    for _ in range(25):
        r = Raw(port, source="127.0.0.3")
        r.send(b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: 1000\r\n\r\n{\"gpu_request\": 1, ")
        slow.append(r)
    slow.extend(Raw(port, source="127.0.0.4") for _ in range(100))
    return slow


def test_slow_clients_of_the_follower_hold_up_nobody(plain):
    """While 175 slow or silent clients hold connections to the follower,
    other clients are served through it at once, and none of the slow
    requests reaches the leader."""
    c = plain
    m = c.relay.mark()
    slow = slow_clients(c.s2.port)
    try:
        t0 = time.monotonic()
        for _ in range(5):
            follower_works(c)
        r = call(c.s2.url, "POST", "/api/v1/tasks", json={"gpu_request": 1, "command": ["true"], "name": "normal"})
        assert r.status_code == 201, r.text
        assert time.monotonic() - t0 < 5
        assert not any(x.closed(0.001) for x in slow), "a slow client was cut before server.header_timeout_s"
    finally:
        for x in slow:
            x.close()
    assert [(mt, t) for mt, t, _, _ in c.relay.requests(m)] == [("GET", "/api/v1/tasks")] * 5 + [
        ("POST", "/api/v1/tasks")]
    assert stored_names(c) == ["normal"]
    follower_works(c)


def test_the_follower_cuts_slow_clients_after_its_header_timeout(make_cluster):
    """server.header_timeout_s (and min_body_rate_bytes_s after it) bound a
    slow client "on every path" (docs/config.md); the follower is a server
    like any: with header_timeout_s 3 the slow clients above are cut about
    3 s after they came (the loop looks about once a second), as the leader
    cuts the same clients sent to it directly."""
    c = make_cluster("server: {header_timeout_s: %d}\n" % HEADER_TIMEOUT)
    cut = {}
    for s in (c.s1, c.s2):
        slow = slow_clients(s.port)
        t0 = time.monotonic()
        try:
            try:
                wait_for(lambda: all(x.closed(0.001) for x in slow), HEADER_TIMEOUT + 4, "%s to cut them" % s.name)
                cut[s.name] = "cut after %.1f s" % (time.monotonic() - t0)
            except AssertionError:
                cut[s.name] = "%d of %d still open after %.1f s" % (
                    sum(1 for x in slow if not x.closed(0.001)), len(slow), time.monotonic() - t0)
        finally:
            for x in slow:
                x.close()
    print("slow clients cut after: %r" % cut)
    for name in cut:
        assert cut[name].startswith("cut after "), cut
        took = float(cut[name].split()[2])
        assert HEADER_TIMEOUT - 0.5 <= took <= HEADER_TIMEOUT + 2.5, cut
    follower_works(c)


def test_one_address_cannot_take_every_connection_of_the_follower(plain):
    """server.max_connections_per_ip (default 256) holds on a follower as on
    any server: of 600 connections from one address, 256 are kept and the
    rest refused (429 too_many_connections, or closed), and a client on
    another address is served.  The leader, given the same 600 directly,
    does so."""
    c = plain
    for s in (c.s1, c.s2):  # the leader first: what a server does
        conns = [Raw(s.port, source="127.0.0.4") for _ in range(600)]
        try:
            try:
                wait_for(lambda: sum(1 for x in conns if x.closed(0.001)) >= 600 - 256, 3, "the refusals")
            except AssertionError:
                pass  # counted below
            refused = [x for x in conns if x.closed(0.001)]
            for x in refused:
                assert x.buf == b"" or (x.buf.startswith(b"HTTP/1.1 429 ") and b"too_many_connections" in x.buf), \
                    x.buf[:300]
            try:
                r = call(s.url, "GET", "/api/v1/tasks", timeout=5)
                other = r.status_code
            except requests.RequestException as e:
                other = repr(e)
            assert (len(refused), other) == (600 - 256, 200), (s.name, "refused", len(refused), "another address got",
                                                               other)
        finally:
            for x in conns:
                x.close()
    follower_works(c)


# ---- streams -------------------------------------------------------------------------

def test_a_followed_log_through_the_follower_survives_clients_that_hang_up(plain):
    """`gpupool logs -f` through the follower streams a task's output as it
    is written, to its end.  A client that goes away in the middle (the CLI
    killed, a raw client that resets its connection) leaves nothing behind:
    the follower lets go of the leader's stream, and the next requests,
    and the next followed log, work."""
    c = plain
    ticker = batch(c.s2, ["sh", "-c", "while :; do echo tick; sleep 0.2; done"], gpu_request=1)["id"]
    short = batch(c.s2, ["sh", "-c", "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.3; done"], gpu_request=1)["id"]
    env = c.s2.env(GPUPOOL_API=c.s2.url)
    for _ in range(3):
        p = subprocess.Popen([c.s2.bin, "logs", "-f", str(ticker)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            assert p.stdout.readline() == b"tick\n"
            wait_for(lambda: c.relay.open_carrying("follow=") == 1, 5, "the stream to be carried to the leader")
        finally:
            p.kill()
            p.wait()
        wait_for(lambda: c.relay.open_carrying("follow=") == 0, 5, "the follower to let go of the leader's stream")
        follower_works(c)
    for _ in range(3):
        r = Raw(c.s2.port)
        r.send(get_bytes(b"/api/v1/tasks/%d/logs?follow=1" % ticker))
        wait_for(lambda: r.closed(0.05) or b"tick" in r.buf, 5, "output")
        assert b"tick" in r.buf and r.buf.startswith(b"HTTP/1.1 200 "), r.buf[:300]
        r.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        r.close()  # a reset
        wait_for(lambda: c.relay.open_carrying("follow=") == 0, 5, "the follower to let go of the leader's stream")
        follower_works(c)
    r = subprocess.run([c.s2.bin, "logs", "-f", str(short)], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["line%d" % i for i in range(1, 7)], r.stdout
    r = call(c.s2.url, "POST", "/api/v1/tasks/%d/cancel" % ticker)
    assert r.status_code == 200 and r.json()["state"] in ("running", "cancelled"), r.text
    wait_for(lambda: _psql(c.s1.store_url, "SELECT state FROM tasks WHERE id = %d" % ticker) == "cancelled", 12,
             "the ticker to be cancelled")
    assert c.s1.ready() and c.s2.health() == "follower"
    follower_works(c)


# ---- the leader goes away while a request is on its way ------------------------------------

def long_poll_in_flight(c, tid, wait_s):
    """GET /api/v1/tasks/{tid}?wait= through the follower in a thread, once
    the leader has been sent it: returns a box that gets "status" (the
    answer's status and error code, or the exception's name) and "took"."""
    box = {}
    m = c.relay.mark()

    def run():
        t0 = time.monotonic()
        try:
            r = call(c.s2.url, "GET", "/api/v1/tasks/%d?wait=%d" % (tid, wait_s), timeout=80)
            box["status"] = (r.status_code, err(r))
        except requests.RequestException as e:
            box["status"] = type(e).__name__ + ": " + str(e)[:200]
        box["took"] = time.monotonic() - t0

    th = threading.Thread(target=run, daemon=True)
    th.start()
    box["thread"] = th
    wait_for(lambda: any(("?wait=%d" % wait_s) in t for _, t, _, _ in c.relay.requests(m)), 10,
             "the long poll to reach the leader")
    return box


def queued_task(c):
    """A task that stays queued (a task holding all 4 GPUs goes first)."""
    blocker = batch(c.s2, ["sleep", "60"], gpu_request=4)["id"]
    tid = batch(c.s2, ["true"], gpu_request=1, name="waits")["id"]
    return blocker, tid


def after_the_takeover(c, tid):
    """s2 leads; requests to it work; what was stored is there."""
    wait_for(lambda: c.s2.health() == "ok", LEASE_S + 10, "s2 to lead")
    r = call(c.s2.url, "GET", "/api/v1/tasks/%d" % tid)
    assert r.status_code == 200 and r.json()["state"] == "queued", r.text
    r = call(c.s2.url, "POST", "/api/v1/tasks", json={"gpu_request": 1, "command": ["true"], "name": "after"})
    assert r.status_code == 201, r.text
    assert _psql(c.s2.store_url, "SELECT count(*) FROM tasks WHERE name = 'after'") == "1"
    assert c.s2.ready()


def test_kill9_of_the_leader_during_a_forwarded_long_poll(plain):
    """The leader dies (kill -9) while the follower waits for its answer to
    a long poll: the client gets 502 leader_unreachable (or the answer) at
    once, not a hang, and once the follower leads it serves."""
    c = plain
    _, tid = queued_task(c)
    box = long_poll_in_flight(c, tid, 5)
    os.kill(c.s1.proc.pid, signal.SIGKILL)
    c.s1.proc.wait(timeout=10)
    c.relay.stop()  # as a dead leader's port: refused from now on
    box["thread"].join(80)
    print("long poll through the follower, leader killed: %r" % box)
    assert box.get("status") in ((502, "leader_unreachable"), (200, None)), box
    assert box["took"] < 10, box
    after_the_takeover(c, tid)


def test_a_frozen_leader_during_a_forwarded_long_poll(plain):
    """The leader freezes (SIGSTOP, as a VM pause or a partition) while the
    follower waits for its answer to a long poll; the follower takes over
    when the lease runs out.  The client gets 502 leader_unreachable (the
    leader went away before its answer came: docs/api.md) or the answer,
    not a hang past about 75 s and not a connection closed without an
    answer."""
    c = plain
    _, tid = queued_task(c)
    box = long_poll_in_flight(c, tid, 2)
    os.kill(c.s1.proc.pid, signal.SIGSTOP)
    try:
        box["thread"].join(80)
        print("long poll through the follower, leader frozen: %r" % box)
        assert box.get("status") in ((502, "leader_unreachable"), (200, None)), (box, c.s2.log())
        assert box["took"] < 75, box
        after_the_takeover(c, tid)
    finally:
        os.kill(c.s1.proc.pid, signal.SIGCONT)


class Trap:
    """A listener that records what each connection sends it for a moment
    and answers nothing."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.settimeout(0.3)
            got = b""
            try:
                while b"\r\n\r\n" not in got:
                    b = c.recv(65536)
                    if not b:
                        break
                    got += b
            except OSError:
                pass
            c.close()
            self.conns.append(got)

    def stop(self):
        self.sock.close()


# ---- the registry names where the follower forwards ----------------------------------------

def test_an_api_client_cannot_redirect_the_followers_traffic(keyed):
    """The follower forwards to the URL the registry holds for the leader.
    Registering the leader's id again through the API (an admin key may
    call POST /api/v1/coordinator/servers/register) must not make the
    follower loop, nor send the other clients' requests, with their API
    keys, to a URL of the caller's choosing."""
    c = keyed
    # the follower's own URL: no loop, a clear 503 standby at worst, then back to the leader
    r = call(c.s2.url, "POST", "/api/v1/coordinator/servers/register", ADMIN,
             json={"server_id": "s1", "url": c.s2.url, "role": "leader"})
    assert r.status_code == 200, r.text
    for _ in range(10):
        t0 = time.monotonic()
        r = call(c.s2.url, "GET", "/api/v1/tasks", KEY_A, timeout=10)
        assert (r.status_code, err(r)) in ((200, None), (503, "standby")), r.text
        assert time.monotonic() - t0 < 2
        time.sleep(0.1)
    # a URL of the caller's: a listener that records what it is sent
    trap = Trap()
    try:
        r = call(c.s1.url, "POST", "/api/v1/coordinator/servers/register", ADMIN,
                 json={"server_id": "s1", "url": trap.url, "role": "leader"})
        assert r.status_code == 200, r.text
        deadline = time.monotonic() + 2 * LEASE_S
        while time.monotonic() < deadline:
            try:
                call(c.s2.url, "GET", "/api/v1/tasks", KEY_A, timeout=5)
            except requests.RequestException:
                pass
            time.sleep(0.1)
        leaked = [b for b in trap.conns if KEY_A.encode() in b]
        assert not trap.conns, "the follower sent %d connection(s) to the registered URL, %d with tenant A's key" % (
            len(trap.conns), len(leaked))
    finally:
        trap.stop()
