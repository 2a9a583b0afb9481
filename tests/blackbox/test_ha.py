"""Several servers on one PostgreSQL: one leader, standbys, fenced failover
(docs/deployment.md, "Several servers (active/standby on PostgreSQL)").

Two real servers, s1 and s2, with data dirs of their own, share a fresh
database; cluster.lease_s is 2.  The leader holds a lease row in
PostgreSQL whose epoch fences every commit it makes; a standby answers 503
"standby" (GET /healthz: 200 "standby") and takes over once the lease has
expired.

Needs GPUPOOL_TEST_PG_URL (tests/pg/start-pg.sh prints one; the PostgreSQL
stage of scripts/test-all.sh sets it) and psql; skipped without them.
"""
import os
import shutil
import signal
import subprocess
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
    standby), not for /readyz."""

    def __init__(self, tmp_path, name, pg, lease_s=LEASE_S):
        (tmp_path / name).mkdir()
        cfg = SIM_CONFIG + 'store: {url: "%s"}\ncluster: {server_id: %s, lease_s: %d}\n' % (pg, name, lease_s)
        super().__init__(tmp_path / name, cfg)
        self.name = name

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
        for s in (s1, s2):
            if s.proc and s.proc.poll() is None and s.proc.returncode is None:
                try:
                    os.kill(s.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            s.stop()


def _assert_standby(s, leader):
    r = requests.post(s.url + "/api/v1/tasks", json={"gpu_request": 1, "command": ["true"]}, timeout=5)
    assert r.status_code == 503, r.text
    assert r.headers.get("Retry-After") == "1"
    err = r.json()["error"]
    assert err["code"] == "standby"
    assert "server %s is standby" % s.name in err["message"]
    assert "the leader is %s" % leader in err["message"], err
    assert s.health() == "standby"
    assert requests.get(s.url + "/readyz", timeout=5).status_code == 503
    assert requests.get(s.url + "/api/v1/tasks", timeout=5).status_code == 503


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
    _assert_standby(s2, "s1")
    urls = (s2.url, s1.url)  # the standby first: the CLI moves past it
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
    # its supervisor outlived s1 (same machine, sim GPUs): s2 follows it
    time.sleep(2)
    assert task(s2, tid)["state"] == "running"
    # s1 comes back as a standby; a clean stop of s2 releases the lease, so
    # s1 leads without waiting for it to expire
    s1.stop()
    s1.start()
    wait_for(lambda: s1.health() == "standby", 10, "s1 to come back as standby")
    _assert_standby(s1, "s2")
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
    # restarted, it is a standby behind s2
    s1.stop()
    s1.start()
    wait_for(lambda: s1.health() == "standby", 10, "s1 to come back as standby")
    _assert_standby(s1, "s2")


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
