"""Several servers on one PostgreSQL: one leader, followers, fenced failover
(docs/deployment.md, "Several servers").

Two real servers, s1 and s2, with data dirs of their own, share a fresh
database; cluster.lease_s is 2.  The leader holds a lease row in
PostgreSQL whose epoch fences every commit it makes; a follower answers
the whole API by forwarding each request to the leader (GET /healthz: 200
"follower", /readyz 503) and takes over once the lease has expired.

Needs GPUPOOL_TEST_PG_URL (tests/pg/start-pg.sh prints one; the PostgreSQL
stage of scripts/test-all.sh sets it) and psql; skipped without them.
"""
import calendar
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import uuid

import pytest
import requests

from apiutil import batch, task, wait_for, wait_state
from conftest import Daemon, SIM_CONFIG, _require_bin

pytestmark = pytest.mark.e2e

LEASE_S = 2


def _pg_url():
    url = os.environ.get("GPUPOOL_TEST_PG_URL")
    if not url:
        pytest.skip("GPUPOOL_TEST_PG_URL is not set (tests/pg/start-pg.sh starts a server)")
    if not shutil.which("psql"):
        pytest.skip("psql not installed")
    return url


@pytest.fixture
def pg_db():
    """A fresh database on the test server; yields its URL."""
    base = _pg_url()
    name = "gp_ha_%s" % uuid.uuid4().hex[:12]
    subprocess.run(["psql", base, "-v", "ON_ERROR_STOP=1", "-qc", "CREATE DATABASE %s" % name],
                   check=True, capture_output=True, timeout=60)
    u = urllib.parse.urlsplit(base)
    yield "%s://%s/%s%s" % (u.scheme, u.netloc, name, "?" + u.query if u.query else "")
    subprocess.run(["psql", base, "-qc", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name],
                   capture_output=True, timeout=60)


class Server(Daemon):
    """A server of the cluster: start() waits for its /healthz (leader or
    follower), not for /readyz."""

    def __init__(self, tmp_path, name, pg, lease_s=LEASE_S):
        (tmp_path / name).mkdir()
        cfg = SIM_CONFIG + 'store: {url: "%s"}\ncluster: {server_id: %s, lease_s: %d}\n' % (pg, name, lease_s)
        super().__init__(tmp_path / name, cfg)
        self.name = name
        self.store_url = pg

    def start(self, timeout=20.0):
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.config_path, "w") as f:
            f.write(self.config_text)
        from conftest import free_port
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.bin, "server", "--config", self.config_path, "--listen", "127.0.0.1:%d" % self.port,
             "--data-dir", self.data_dir], stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: self.health() is not None or self.proc.poll() is not None, timeout,
                 "%s to answer /healthz" % self.name)
        assert self.proc.poll() is None, self.log()
        return self

    def health(self):
        try:
            r = requests.get(self.url + "/healthz", timeout=1)
            return r.json().get("status") if r.status_code == 200 else None
        except (requests.RequestException, ValueError):
            return None

    def ready(self):
        try:
            return requests.get(self.url + "/readyz", timeout=1).status_code == 200
        except requests.RequestException:
            return False


def stop_all(*servers):
    """Stop servers, waking any that a test froze (SIGSTOP) first: a stopped
    process would never see the SIGTERM."""
    for s in servers:
        if s.proc and s.proc.poll() is None:
            try:
                os.kill(s.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        s.stop()


@pytest.fixture
def pair(tmp_path, pg_db):
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db)
    s2 = Server(tmp_path, "s2", pg_db)
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        s2.start()
        yield s1, s2
    finally:
        stop_all(s1, s2)


def _assert_follower(s, leader):
    """s follows leader: it answers by forwarding (a submit through it is
    stored by the leader), says so in /healthz, and is not /readyz."""
    wait_for(lambda: s.health() == "follower", 10, "%s to follow" % s.name)
    r = requests.post(s.url + "/api/v1/tasks", json={"gpu_request": 1, "command": ["true"]}, timeout=15)
    assert r.status_code == 201, r.text
    assert r.headers.get("X-Gpupool-Forwarded-By") == s.name
    tid = r.json()["id"]
    r = requests.get(s.url + "/api/v1/tasks/%d" % tid, timeout=15)
    assert r.status_code == 200 and r.json()["id"] == tid, r.text
    h = requests.get(s.url + "/healthz", timeout=5).json()
    assert h == {"status": "follower", "server_id": s.name, "leader": leader}, h
    r = requests.get(s.url + "/readyz", timeout=5)
    assert r.status_code == 503 and r.json()["status"] == "follower", r.text
    return tid


def _cli(s, urls, *args):
    env = s.env(GPUPOOL_API=",".join(urls))
    return s.cli(*args, env=env, timeout=30)


def test_sqlite_store_with_a_server_id_is_refused(tmp_path):
    _require_bin()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SIM_CONFIG + "cluster: {server_id: s1}\n")
    r = subprocess.run([Daemon(tmp_path).bin, "server", "--config", str(cfg), "--listen", "127.0.0.1:1",
                        "--data-dir", str(tmp_path / "d")], capture_output=True, text=True, timeout=15,
                       stdin=subprocess.DEVNULL)
    assert r.returncode != 0
    assert "cluster.server_id" in r.stderr and "PostgreSQL" in r.stderr, r.stderr


def test_kill9_of_the_leader_hands_over_within_the_lease(pair):
    s1, s2 = pair
    _assert_follower(s2, "s1")
    urls = (s2.url, s1.url)  # the follower first: it forwards to s1
    r = _cli(s1, urls, "ps")
    assert r.returncode == 0, r.stderr
    tid = batch(s1, ["sh", "-c", "sleep 30"], gpu_request=1)["id"]
    wait_state(s1, tid, "running")
    queued = batch(s1, ["sh", "-c", "sleep 30"], gpu_request=4)["id"]  # waits for all 4 GPUs
    os.kill(s1.proc.pid, signal.SIGKILL)
    s1.proc.wait(timeout=10)
    t0 = time.monotonic()
    wait_for(s2.ready, LEASE_S + 2 + 10, "s2 to lead")
    took = time.monotonic() - t0
    print("failover after kill -9: s2 ready in %.2f s (lease_s %d)" % (took, LEASE_S))
    assert took <= LEASE_S + 2, took
    assert s2.health() == "ok"
    # the acknowledged tasks are there; the running one kept running
    assert task(s2, tid)["state"] in ("queued", "running")
    assert task(s2, queued)["state"] == "queued"
    # the CLI with both URLs goes past the dead one
    r = _cli(s2, (s1.url, s2.url), "ps")
    assert r.returncode == 0, r.stderr
    assert str(tid) in r.stdout
    assert "s2" in s2.log() and "leads (epoch 2)" in s2.log(), s2.log()
    # the registry: the killed leader's lease ran out, so it is not active, though its last heartbeat is
    # younger than server_timeout_s (60 s)
    r = requests.get(s2.url + "/api/v1/coordinator/servers", timeout=10)
    assert r.status_code == 200, r.text
    roles = {sv["server_id"]: (sv["role"], sv["active"]) for sv in r.json()["servers"]}
    assert roles["s2"] == ("leader", True) and roles["s1"][1] is False, roles
    c = requests.get(s2.url + "/api/v1/coordinator/cluster", timeout=10).json()
    assert c["leader"] == "s2" and c["active_servers"] == 1, c
    # its supervisor outlived s1 (same machine, sim GPUs): s2 follows it
    time.sleep(2)
    assert task(s2, tid)["state"] == "running"
    # s1 comes back as a follower; a clean stop of s2 releases the lease, so
    # s1 leads without waiting for it to expire
    s1.stop()
    s1.start()
    _assert_follower(s1, "s2")
    s2.proc.send_signal(signal.SIGTERM)
    assert s2.proc.wait(timeout=10) == 0
    t0 = time.monotonic()
    wait_for(s1.ready, LEASE_S + 10, "s1 to lead again")
    took = time.monotonic() - t0
    print("after a clean stop of the leader: s1 ready in %.2f s" % took)
    assert took < LEASE_S, took
    assert "released the lead (epoch 2)" in s2.log()
    assert task(s1, queued)["state"] == "queued"


def test_a_frozen_leader_is_fenced_and_steps_down(pair):
    s1, s2 = pair
    tid = batch(s1, ["sh", "-c", "sleep 60"], gpu_request=1)["id"]
    wait_state(s1, tid, "running")
    os.kill(s1.proc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    wait_for(s2.ready, LEASE_S + 2 + 10, "s2 to take over from the frozen s1")
    print("takeover from a frozen leader: s2 ready in %.2f s" % (time.monotonic() - t0))
    assert task(s2, tid)["state"] in ("queued", "running")
    # s1 wakes up believing it leads: a cancel sent to it at once
    os.kill(s1.proc.pid, signal.SIGCONT)
    try:
        r = requests.post(s1.url + "/api/v1/tasks/%d/cancel" % tid, timeout=5)
        answered = r.status_code
    except requests.RequestException:
        answered = None
    # ... is not stored, and s1 steps down by itself
    t1 = time.monotonic()
    s1.proc.wait(timeout=10)
    print("old leader exited %d, %.2f s after SIGCONT (cancel answered %s)"
          % (s1.proc.returncode, time.monotonic() - t1, answered))
    assert s1.proc.returncode == 75, s1.log()
    assert "lost the lead (epoch 1): stepping down" in s1.log(), s1.log()
    assert answered is None or answered >= 500, answered
    time.sleep(0.5)
    assert task(s2, tid)["state"] in ("queued", "running")
    # restarted, it follows s2
    s1.stop()
    s1.start()
    _assert_follower(s1, "s2")


def _psql(url, sql):
    r = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-Atqc", sql], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_commit_after_the_lease_was_taken_stores_nothing(tmp_path, pg_db):
    """The fence itself: the lease row changes hands behind the leader's
    back (its own lease_s is long, so neither its renewal nor its local
    lease clock notices first); the next thing it commits is refused by the
    database, and it steps down."""
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db, lease_s=60)
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        run = batch(s1, ["sh", "-c", "sleep 60"], gpu_request=1)["id"]
        wait_state(s1, run, "running")
        queued = batch(s1, ["sh", "-c", "sleep 60"], gpu_request=4)["id"]
        assert task(s1, queued)["state"] == "queued"
        _psql(pg_db, "UPDATE leader SET holder = 's9', epoch = epoch + 1, expires_at = now() + interval '1 hour'")
        try:
            answered = requests.post(s1.url + "/api/v1/tasks/%d/cancel" % queued, timeout=10).status_code
        except requests.RequestException:
            answered = None
        s1.proc.wait(timeout=10)
        assert s1.proc.returncode == 75, s1.log()
        assert answered is None or answered >= 500, answered
        log = s1.log()
        assert "lost the lead (epoch 1): stepping down\n" in log, log
        assert _psql(pg_db, "SELECT state FROM tasks WHERE id = %d" % queued) == "queued"
        assert _psql(pg_db, "SELECT state FROM tasks WHERE id = %d" % run) == "running"
    finally:
        s1.stop()


def test_a_follower_gives_back_each_closed_connection_to_the_per_address_limit(tmp_path, pg_db):
    """Connections one after another, each closed, never add up against
    server.max_connections_per_ip on a follower: it counted each TLS-port
    connection twice (its acceptor and MHD's) and gave back one, so after
    max_connections_per_ip of them it refused the address for good."""
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db)
    s2 = Server(tmp_path, "s2", pg_db)
    for s in (s1, s2):
        s.config_text += "server: {max_connections_per_ip: 4}\n"
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        s2.start()
        wait_for(lambda: s2.health() == "follower", 20, "s2 to follow")
        for i in range(20):
            with requests.Session() as sess:  # one connection each, closed after
                r = sess.get(s2.url + "/api/v1/tasks", timeout=10)
            assert r.status_code == 200, (i, r.status_code, r.text)
    finally:
        s1.stop()
        s2.stop()


def test_a_follower_answers_the_whole_api(pair):
    """Everything a client does works through the follower: submit (stored
    by the leader before the 201), read, follow a log as it is written,
    cancel, the dashboard, the gateway's /v1, the registry; the browser
    rules and body limits hold on the way; what must not be forwarded is
    not."""
    s1, s2 = pair
    _assert_follower(s2, "s1")
    only_s2 = (s2.url,)
    r = _cli(s2, only_s2, "submit", "--gpus", "1", "--", "sh", "-c", "echo first; sleep 1; echo second")
    assert r.returncode == 0, r.stderr
    tid = int(r.stdout.strip())
    # stored by the leader before the 201 the follower relayed
    assert _psql(s1.store_url, "SELECT count(*) FROM tasks WHERE id = %d" % tid) == "1"
    # a log followed through the follower streams until the task ends
    r = _cli(s2, only_s2, "logs", "-f", str(tid))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-2:] == ["first", "second"], r.stdout
    r = _cli(s2, only_s2, "status", str(tid))
    assert r.returncode == 0 and "succeeded" in r.stdout, r.stdout + r.stderr
    # a queued task cancelled through the follower
    blocker = batch(s2, ["sh", "-c", "sleep 60"], gpu_request=1)["id"]
    wait_state(s2, blocker, "running")
    big = batch(s2, ["sh", "-c", "sleep 60"], gpu_request=4)["id"]
    r = _cli(s2, only_s2, "cancel", str(big))
    assert r.returncode == 0, r.stderr
    assert task(s1, big)["state"] == "cancelled"
    assert _psql(s1.store_url, "SELECT state FROM tasks WHERE id = %d" % big) == "cancelled"
    # the dashboard and the gateway's own front (/v1) through the follower
    r = requests.get(s2.url + "/", timeout=10)
    assert r.status_code == 200 and "<html" in r.text.lower()
    r = requests.get(s2.url + "/v1/models", timeout=10)
    assert r.status_code == 200 and r.json()["object"] == "list", r.text
    # the registry: both servers, each with its role
    r = requests.get(s2.url + "/api/v1/coordinator/servers", timeout=10)
    assert r.status_code == 200, r.text
    roles = {sv["server_id"]: (sv["role"], sv["active"]) for sv in r.json()["servers"]}
    assert roles == {"s1": ("leader", True), "s2": ("follower", True)}, roles
    r = _cli(s2, only_s2, "servers")
    assert r.returncode == 0 and "s2" in r.stdout and "follower" in r.stdout, r.stdout + r.stderr
    # the leader's browser rules apply to what comes through the follower
    r = requests.post(s2.url + "/api/v1/tasks", data='{"gpu_request": 1, "command": ["true"]}',
                      headers={"Content-Type": "text/plain"}, timeout=10)
    assert r.status_code == 415, r.text
    r = requests.post(s2.url + "/api/v1/tasks", json={"gpu_request": 1, "command": ["true"]},
                      headers={"Origin": "http://evil.example"}, timeout=10)
    assert r.status_code == 403 and r.json()["error"]["code"] == "cross_site_request", r.text
    # a body over server.max_body_bytes (1 MiB) is refused by the follower itself
    r = requests.post(s2.url + "/api/v1/tasks", data=b"x" * (2 << 20),
                      headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 413, r.text
    # agents talk to the leader; a request another server forwarded is not forwarded again
    r = requests.post(s2.url + "/agent/v1/sync", json={}, timeout=10)
    assert r.status_code == 503 and r.json()["error"]["code"] == "standby", r.text
    r = requests.get(s2.url + "/api/v1/tasks", headers={"X-Gpupool-Forwarded-By": "s9"}, timeout=10)
    assert r.status_code == 503 and r.json()["error"]["code"] == "standby", r.text
    # no keys are configured: only loopback clients are served.  The leader
    # serves a forwarded request as loopback only when the client behind
    # the follower was on loopback, whatever the follower's own address.
    r = requests.get(s1.url + "/api/v1/tasks", headers={"X-Gpupool-Forwarded-For": "10.1.2.3"}, timeout=10)
    assert r.status_code == 403, r.text
    r = requests.get(s1.url + "/v1/models", headers={"X-Gpupool-Forwarded-For": "10.1.2.3"}, timeout=10)
    assert r.status_code == 403, r.text
    r = requests.get(s1.url + "/api/v1/tasks", headers={"X-Gpupool-Forwarded-For": "127.0.0.1, ::1"}, timeout=10)
    assert r.status_code == 200, r.text


def test_a_followers_coordinator_health_is_its_own_and_its_writes_are_audited(pair):
    """GET /api/v1/coordinator/health asked at a follower describes the
    follower (issue 24: it described the leader): its id, role follower,
    whether its store answers, the leader it knows.  A registry or lock
    write through the follower is in the leader's audit log, with who asked,
    through which server, when, and its object."""
    s1, s2 = pair
    wait_for(lambda: s2.health() == "follower", 10, "s2 to follow")
    for path in ("/api/v1/coordinator/health", "/api/coordinator/health"):
        r = requests.get(s2.url + path, timeout=10)
        assert r.status_code == 200, r.text
        assert "X-Gpupool-Forwarded-By" not in r.headers  # answered by s2 itself
        assert r.json() == {"server_id": "s2", "store_reachable": True, "leader_known": True, "leader": "s1",
                            "role": "follower"}, r.text
    r = requests.get(s1.url + "/api/v1/coordinator/health", timeout=10)
    assert r.json() == {"server_id": "s1", "store_reachable": True, "leader_known": True, "leader": "s1",
                        "role": "leader"}, r.text
    t0 = time.time()
    writes = [("/locks/acquire", {"lock_id": "via-f", "owner": "w1", "timeout": 30}),
              ("/servers/register", {"server_id": "s9", "url": "http://127.0.0.1:9"}),
              ("/heartbeat", {"server_id": "s9", "url": "http://127.0.0.1:9", "load": 0.5}),  # changes nothing
              ("/servers/unregister/s9", {}),
              ("/locks/release", {"lock_id": "via-f", "owner": "w1"})]
    for path, body in writes:
        r = requests.post(s2.url + "/api/v1/coordinator" + path, json=body, timeout=15)
        assert r.status_code == 200, (path, r.text)
        assert r.headers.get("X-Gpupool-Forwarded-By") == "s2"
    audit = requests.get(s2.url + "/admin/audit", timeout=10).json()["audit"]
    coord = [a for a in audit if a["action"].startswith("coordinator.")]
    assert [(a["action"], a["target"]) for a in coord] == [
        ("coordinator.lock.acquire", "via-f"), ("coordinator.server.register", "s9"),
        ("coordinator.server.unregister", "s9"), ("coordinator.lock.release", "via-f")], coord
    for a in coord:
        assert a["who"].startswith("user ") and a["who"].endswith(" via server s2"), a
        at = calendar.timegm(time.strptime(a["at"][:19], "%Y-%m-%dT%H:%M:%S"))
        assert t0 - 3 <= at <= time.time() + 3, a
    assert coord[0]["new"]["owner"] == "w1" and coord[3]["old"]["owner"] == "w1"


def test_failover_under_load_through_a_follower_loses_nothing(pair):
    """Clients write to s2 without pause while s1, the leader, is killed -9:
    submits, cancels of their own queued tasks, credits (1 cent each) and
    token usage records (1 prompt token each).  s2 forwards them, then
    refuses them (503 standby: nothing was sent) while no server leads,
    then leads and stores them itself.  Afterwards the store holds every
    acknowledged write exactly once: every 201 task, every acknowledged
    cancel as cancelled, credits and tokens equal to the acknowledged ones
    (give or take the few answers whose connection broke), and nothing that
    was not asked for; a write s2 had sent to s1 when it died is answered
    once s1 is fenced: its stored answer, or 503 not_carried_out."""
    s1, s2 = pair
    _assert_follower(s2, "s1")
    r = requests.put(s2.url + "/admin/tenants/acme", json={"weight": 1}, timeout=15)
    assert r.status_code == 201, r.text
    blocker = batch(s2, ["sh", "-c", "sleep 60"], gpu_request=4)["id"]  # the submits below stay queued
    stop = threading.Event()
    lock = threading.Lock()
    acked = {"submit": [], "cancel": [], "credit": 0, "tokens": 0}
    unsure = {"submit": 0, "cancel": 0, "credit": 0, "tokens": 0}
    refused = [0]

    def call(kind, method, path, body):
        """The answer's JSON when acknowledged, None when refused or unsure."""
        try:
            r = requests.request(method, s2.url + path, json=body, timeout=15)
        except requests.RequestException:
            with lock:
                unsure[kind] += 1
            time.sleep(0.05)
            return None
        if r.status_code in (200, 201):
            return r.json()
        # a write cut off by the kill is resolved by s2 once s1 is fenced (issue 22): never 502 "maybe"
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] in ("standby", "not_carried_out"), r.text
        with lock:
            refused[0] += 1
        time.sleep(0.05)
        return None

    def submitter(cancel_every):
        n = 0
        while not stop.is_set():
            t = call("submit", "POST", "/api/v1/tasks", {"gpu_request": 1, "command": ["true"]})
            if not t:
                continue
            with lock:
                acked["submit"].append(t["id"])
            n += 1
            if cancel_every and n % cancel_every == 0:
                while not stop.is_set():
                    c = call("cancel", "POST", "/api/v1/tasks/%d/cancel" % t["id"], None)
                    if c:
                        assert c["state"] == "cancelled", c
                        with lock:
                            acked["cancel"].append(t["id"])
                        break

    def biller(kind, path, body):
        while not stop.is_set():
            if call(kind, "POST", path, body):
                with lock:
                    acked[kind] += 1

    threads = [threading.Thread(target=submitter, args=(k,)) for k in (0, 2)]
    threads.append(threading.Thread(target=biller, args=("credit", "/admin/tenants/acme/credit",
                                                         {"amount_cents": 1})))
    threads.append(threading.Thread(target=biller, args=("tokens", "/admin/usage/tokens",
                                                         {"tenant_id": "acme", "model": "m", "prompt_tokens": 1,
                                                          "completion_tokens": 0})))
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked["submit"]) >= 30 and acked["credit"] >= 10, 30, "writes forwarded to s1")
        before = dict(submit=len(acked["submit"]), credit=acked["credit"])
        os.kill(s1.proc.pid, signal.SIGKILL)
        s1.proc.wait(timeout=10)
        wait_for(lambda: s2.health() == "ok", LEASE_S + 2 + 10, "s2 to lead")
        wait_for(lambda: len(acked["submit"]) >= before["submit"] + 30 and acked["credit"] >= before["credit"] + 10,
                 30, "writes stored by s2 as leader")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    print("acknowledged %d submits, %d cancels, %d credits, %d token records; refused %d; unsure %r"
          % (len(acked["submit"]), len(acked["cancel"]), acked["credit"], acked["tokens"], refused[0], unsure))
    ids = acked["submit"]
    assert len(set(ids)) == len(ids)
    rows = dict(line.split("|") for line in _psql(s2.store_url, "SELECT id, state FROM tasks").split())
    stored = {int(k): v for k, v in rows.items()}
    assert set(ids) <= set(stored), sorted(set(ids) - set(stored))
    # the _assert_follower task, the blocker, and at most one per cut-off submit
    assert len(stored) <= len(ids) + 2 + unsure["submit"], (len(stored), len(ids), unsure)
    for tid in acked["cancel"]:
        assert stored[tid] == "cancelled", (tid, stored[tid])
    assert stored[blocker] == "running"
    # credits live in a meta row of the store; s2 read them from there when it took over
    credits = requests.get(s2.url + "/api/v1/tenants/acme", timeout=10).json()["billing"]["credits_cents"]
    assert acked["credit"] <= credits <= acked["credit"] + unsure["credit"], (credits, acked["credit"], unsure)
    tokens = int(_psql(s2.store_url, "SELECT coalesce(sum(prompt_tokens), 0) FROM usage_tokens "
                                     "WHERE tenant = 'acme'"))
    assert acked["tokens"] <= tokens <= acked["tokens"] + unsure["tokens"], (tokens, acked["tokens"], unsure)

class _Postgres:
    """The test's PostgreSQL server (tests/pg/start-pg.sh): stopped and
    started again with the options it was started with (postmaster.opts)."""

    def __init__(self, url):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        self.base = q["host"][0]
        self.data = os.path.join(self.base, "data")
        with open(os.path.join(self.data, "postmaster.opts")) as f:
            argv = shlex.split(f.read())
        self.pg_ctl = os.path.join(os.path.dirname(argv[0]), "pg_ctl")
        self.opts = " ".join(shlex.quote(a) for a in argv[3:])  # after postgres "-D" DIR
        st = os.stat(self.data)
        self.run = [] if os.getuid() == st.st_uid else ["runuser", "-u", pwd.getpwuid(st.st_uid).pw_name, "--"]

    def _ctl(self, *args):
        subprocess.run(self.run + [self.pg_ctl, "-D", self.data, "-w", "-t", "60"] + list(args),
                       check=True, capture_output=True, timeout=90)

    def stop(self):
        self._ctl("stop", "-m", "fast")

    def start(self):
        self._ctl("-l", os.path.join(self.base, "server.log"), "-o", self.opts, "start")


def test_postgresql_going_away_and_coming_back(pair):
    """PostgreSQL stops under a leader and a follower.  The leader cannot
    renew its lease; once lease_s has passed it acts on nothing more (it
    cannot prove it leads) and answers nothing from what it holds (another
    server may lead by then, and what it holds may be stale: issue 22), on
    its own port and through the follower: reads and writes alike get 503
    with Retry-After and change nothing.  When PostgreSQL is back, the old
    leader steps down (75) and the follower leads; every task acknowledged
    before the outage is there, and nothing else."""
    s1, s2 = pair
    acked, running = _before_the_outage(s1, s2)
    pg = _Postgres(s1.store_url)
    pg.stop()
    try:
        t0 = time.monotonic()
        wait_for(lambda: s1.health() == "degraded", LEASE_S + 5, "s1 to stop acting")
        print("leader read-only %.2f s after PostgreSQL stopped" % (time.monotonic() - t0))
        assert "acting on nothing and answering nothing but /healthz" in s1.log(), s1.log()
        assert requests.get(s1.url + "/readyz", timeout=5).status_code == 503
        time.sleep(LEASE_S)  # well past its lease
        for s in (s1, s2):
            # a running task s1 holds in memory: not shown as if current
            for path in ("/api/v1/tasks/%d" % running, "/api/v1/tasks", "/api/v1/gpus"):
                r = requests.get(s.url + path, timeout=5)
                assert r.status_code == 503 and r.headers.get("Retry-After") == "1", r.text
                assert r.json()["error"]["code"] in ("unavailable", "standby"), r.text
            for method, path in (("POST", "/api/v1/tasks"), ("POST", "/api/v1/tasks/%d/cancel" % running)):
                r = requests.request(method, s.url + path, json={"gpu_request": 1, "command": ["true"]},
                                     timeout=10)
                assert r.status_code == 503, r.text
                assert r.headers.get("Retry-After") == "1"
                assert r.json()["error"]["code"] == "unavailable", r.text
            r = requests.post(s.url + "/v1/chat/completions", json={"model": "m", "messages": []}, timeout=10)
            assert r.status_code == 503 and r.headers.get("Retry-After") == "1", r.text
        # each server's coordinator health is its own view: its store does not answer
        for s, role in ((s1, "leader"), (s2, "follower")):
            r = requests.get(s.url + "/api/v1/coordinator/health", timeout=10)
            assert r.status_code == 200, r.text
            h = r.json()
            assert h["server_id"] == s.name and h["role"] == role and h["store_reachable"] is False, h
        assert s1.proc.poll() is None and s2.proc.poll() is None
    finally:
        pg.start()
    _after_the_outage(s1, s2, set(acked) | {running}, running)


def _before_the_outage(s1, s2):
    """Five finished tasks and a running one, submitted through s2."""
    wait_for(lambda: s2.health() == "follower", 10, "s2 to follow")
    acked = [batch(s2, ["true"], gpu_request=1)["id"] for _ in range(5)]
    running = batch(s2, ["sh", "-c", "sleep 60"], gpu_request=1)["id"]
    wait_state(s1, running, "running")
    for tid in acked:  # their ends are stored: nothing is left to store during the outage
        wait_state(s1, tid, "succeeded")
    return acked, running


def _after_the_outage(s1, s2, expected, running):
    """PostgreSQL is back: the old leader steps down (75), the follower
    leads, the store holds exactly the expected tasks, and the old leader
    restarted follows."""
    t1 = time.monotonic()
    s1.proc.wait(timeout=LEASE_S + 10)
    assert s1.proc.returncode == 75, s1.log()
    assert "stepping down (the database answers again)" in s1.log(), s1.log()
    wait_for(lambda: s2.health() == "ok", 30, "s2 to lead once PostgreSQL is back")
    print("s2 leads %.2f s after PostgreSQL started again" % (time.monotonic() - t1))
    stored = set(int(x) for x in _psql(s2.store_url, "SELECT id FROM tasks").split())
    assert stored == expected, stored
    assert task(s2, running)["state"] == "running"
    s1.stop()
    s1.start()
    _assert_follower(s1, "s2")


def test_a_write_when_postgresql_is_gone_is_refused_and_stores_nothing(pair):
    """PostgreSQL stops and a submit comes at once, before the leader's
    lease has run out: its commit fails, so the leader acts on nothing more
    (without exiting) and the submit gets 503 with Retry-After, never 201.
    What it applied but could not store is shown to no reader (503), and it
    is not in the store once PostgreSQL is back.  (Sent to s1 without an
    Idempotency-Key: one, which s2 adds to every write it forwards, makes
    s1 look its answer up first, and that lookup's 503 comes before any
    commit; the keyed write through s2 is refused too.)"""
    s1, s2 = pair
    acked, running = _before_the_outage(s1, s2)
    pg = _Postgres(s1.store_url)
    pg.stop()
    try:
        r = requests.post(s1.url + "/api/v1/tasks", json={"gpu_request": 1, "command": ["true"]}, timeout=15)
        assert r.status_code == 503 and r.headers.get("Retry-After") == "1", r.text
        assert r.json()["error"]["code"] == "unavailable", r.text
        assert "a commit failed" in s1.log(), s1.log()
        r = requests.post(s2.url + "/api/v1/tasks", json={"gpu_request": 1, "command": ["true"]}, timeout=15)
        assert r.status_code == 503 and r.headers.get("Retry-After") == "1", r.text
        assert s1.health() == "degraded"
        r = requests.get(s1.url + "/api/v1/tasks/%d" % running, timeout=15)
        assert r.status_code == 503, r.text  # it could show the unstored submit
        assert s1.proc.poll() is None
    finally:
        pg.start()
    _after_the_outage(s1, s2, set(acked) | {running}, running)


def control_planes(tmp_path, pg_db, cfg):
    """Two servers on pg_db with config cfg (a cluster section, no GPUs of
    their own): s1 leads, s2 follows, both started."""
    servers = []
    for name in ("s1", "s2"):
        (tmp_path / name).mkdir()
        s = Server.__new__(Server)
        Daemon.__init__(s, tmp_path / name, cfg.replace("cluster: {", "cluster: {server_id: %s, lease_s: %d, "
                                                        % (name, LEASE_S), 1) + 'store: {url: "%s"}\n' % pg_db)
        s.name, s.store_url = name, pg_db
        servers.append(s)
    s1, s2 = servers
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        s2.start()
        wait_for(lambda: s2.health() == "follower", 10, "s2 to follow")
    except BaseException:
        stop_all(s1, s2)
        raise
    return s1, s2


def test_failover_keeps_a_task_on_an_agent_node_running(tmp_path, pg_db):
    """Two control-plane servers (no GPUs of their own) and one agent whose
    --server lists the follower first: the follower sends it on to the
    leader (503 standby on /agent/...).  A task runs on the agent's node;
    the leader is killed -9; the follower leads, the agent reconnects to it,
    and the task's one run keeps running to its end, which the new leader
    records."""
    import clusterutil as cu
    _require_bin()
    s1, s2 = control_planes(tmp_path, pg_db, cu.server_config())
    agent = None
    try:
        agent = cu.Agent(tmp_path, "%s,%s" % (s2.url, s1.url), "n1").start()
        wait_for(lambda: any(n["name"] == "n1" and n["state"] == "ready"
                             for n in requests.get(s2.url + "/api/v1/nodes", timeout=5).json()["nodes"]),
                 20, "n1 to join (through the URL list)")
        marks = tmp_path / "marks"
        tid = batch(s2, cu.ticker_cmd(marks, secs=LEASE_S + 6), gpu_request=1)["id"]
        wait_state(s2, tid, "running", timeout=15)
        wait_for(lambda: len(cu.ticker_pids(marks)) == 1, 10, "the task to start on n1")
        assert task(s2, tid)["nodes"] == ["n1"]
        os.kill(s1.proc.pid, signal.SIGKILL)
        s1.proc.wait(timeout=10)
        wait_for(lambda: s2.health() == "ok", LEASE_S + 2 + 10, "s2 to lead")
        wait_state(s2, tid, "succeeded", timeout=LEASE_S + 20)
        runs = cu.assert_no_overlap(marks)
        assert len(runs) == 1 and runs[0][3], runs  # one run, never restarted, ended by itself
        assert len(cu.ticker_pids(marks)) == 1
        assert task(s2, tid)["exit_code"] == 0
    finally:
        if agent:
            agent.stop()
        for s in (s1, s2):
            s.stop()
        cu.kill_run_sessions(tmp_path)


def test_failover_from_a_frozen_leader_loses_no_node_and_stops_no_run(tmp_path, pg_db):
    """Issue 22: with lease_s 2 and node_timeout_s 4 the leader is stopped
    (SIGSTOP, a frozen VM) while an agent's sync is held there.  The
    follower leads after the lease; the agent finds the frozen leader only
    when its wait for the answer runs out (heartbeat_s + 15 s), then
    reaches the new leader, which gave every node known from the store that
    long and more: no node is lost, nothing is requeued, the run of a task
    with no retries goes on (the same process: fence_s 30 is longer than
    the failover)."""
    import clusterutil as cu
    _require_bin()
    s1, s2 = control_planes(tmp_path, pg_db, cu.server_config(node_timeout_s=4, fence_s=30))
    agent = None
    try:
        agent = cu.Agent(tmp_path, "%s,%s" % (s1.url, s2.url), "n1").start()
        wait_for(lambda: any(n["name"] == "n1" and n["state"] == "ready"
                             for n in requests.get(s1.url + "/api/v1/nodes", timeout=5).json()["nodes"]),
                 20, "n1 to join")
        marks = tmp_path / "marks"
        tid = batch(s1, cu.ticker_cmd(marks), gpu_request=1, max_retries=0)["id"]
        wait_state(s1, tid, "running", timeout=15)
        wait_for(lambda: len(cu.live_tickers(marks)) == 1, 10, "the task to start on n1")
        old = cu.live_tickers(marks)[0]
        time.sleep(1.5)   # a sync of n1 is held by s1 now
        os.kill(s1.proc.pid, signal.SIGSTOP)
        frozen = time.time()
        try:
            wait_for(lambda: s2.health() == "ok", LEASE_S + 10, "s2 to lead")

            def synced():
                n = [n for n in requests.get(s2.url + "/api/v1/nodes", timeout=5).json()["nodes"]
                     if n["name"] == "n1"]
                assert n and n[0]["state"] != "lost", n
                return n[0]["synced"]

            wait_for(synced, 40, "n1 to sync with s2")
            took = time.time() - frozen
            t = task(s2, tid)
            assert t["state"] == "running" and t["retries"] == 0, (t, open(s2.log_path, "rb").read().decode("utf-8", "replace")[-4000:])
            assert cu.live_tickers(marks) == [old]
            with open(s2.log_path, "rb") as f:
                log = f.read().decode("utf-8", "replace")
            assert " lost" not in log, log[-3000:]
            assert took < 1 + 15 + 10, took
        finally:
            os.kill(s1.proc.pid, signal.SIGCONT)
        requests.post(s2.url + "/api/v1/tasks/%d/cancel" % tid, timeout=15)
    finally:
        if agent:
            agent.stop()
        for s in (s1, s2):
            s.stop()
        cu.kill_run_sessions(tmp_path)
