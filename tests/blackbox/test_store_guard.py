"""One store, one set of servers (issue 22): a server without
cluster.server_id and the servers of a cluster refuse each other on one
PostgreSQL store, whichever starts first; a second process with a live
server's server_id is refused while the first keeps leading; a write sent
twice with one Idempotency-Key is stored once; writes through a follower
while the leader is killed or frozen all get a definite answer.

Needs GPUPOOL_TEST_PG_URL (tests/pg/start-pg.sh prints one; the PostgreSQL
stage of scripts/test-all.sh sets it) and psql; skipped without them.
"""
import os
import signal
import subprocess
import threading
import time
import uuid

import pytest
import requests

from apiutil import run_server, wait_for
from conftest import Daemon, SIM_CONFIG, _require_bin, free_port
from test_ha import Server, pg_db, stop_all  # noqa: F401 (the fixture)

pytestmark = pytest.mark.e2e

EXIT_CONFLICT = 78


def _psql(url, sql):
    out = subprocess.run(["psql", url, "-Atqc", sql], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _task_count(url):
    return int(_psql(url, "SELECT count(*) FROM tasks"))


def _single_cfg(tmp_path, pg):
    path = str(tmp_path / "single.yaml")
    with open(path, "w") as f:
        f.write(SIM_CONFIG + 'store: {url: "%s"}\n' % pg)
    return path


def _cluster_cfg(tmp_path, pg, name):
    path = str(tmp_path / ("%s.yaml" % name))
    with open(path, "w") as f:
        f.write(SIM_CONFIG + 'store: {url: "%s"}\ncluster: {server_id: %s, lease_s: 2}\n' % (pg, name))
    return path


def _submit(url, key=None, timeout=30):
    h = {"Idempotency-Key": key} if key else {}
    return requests.post(url + "/api/v1/tasks", json={"gpu_request": 1, "command": ["sleep", "600"]},
                         headers=h, timeout=timeout)


def test_a_single_server_is_refused_while_a_cluster_uses_the_store(tmp_path, pg_db):
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db)
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        assert _submit(s1.url).status_code == 201
        before = _task_count(pg_db)
        r = run_server(["--config", _single_cfg(tmp_path, pg_db), "--listen", "127.0.0.1:%d" % free_port(),
                        "--data-dir", str(tmp_path / "single-data")], timeout=30)
        assert r.returncode == EXIT_CONFLICT, r.stderr
        assert "the servers of a cluster" in r.stderr and "led by server s1" in r.stderr, r.stderr
        assert pg_db not in r.stderr
        assert _task_count(pg_db) == before
        assert s1.proc.poll() is None and s1.ready()
        assert _submit(s1.url).json()["id"] == before + 1  # the cluster's ids go on
    finally:
        s1.stop()


def test_a_cluster_server_is_refused_while_a_single_server_uses_the_store(tmp_path, pg_db):
    _require_bin()
    (tmp_path / "one").mkdir()
    one = Daemon(tmp_path / "one", SIM_CONFIG + 'store: {url: "%s"}\n' % pg_db)
    one.start()
    try:
        assert _submit(one.url).json()["id"] == 1
        r = run_server(["--config", _cluster_cfg(tmp_path, pg_db, "s1"), "--listen",
                        "127.0.0.1:%d" % free_port(), "--data-dir", str(tmp_path / "s1-data")], timeout=30)
        assert r.returncode == EXIT_CONFLICT, r.stderr
        assert "without cluster.server_id is using this store" in r.stderr, r.stderr
        assert "pid %d" % one.proc.pid in r.stderr, r.stderr
        assert _task_count(pg_db) == 1
        assert _psql(pg_db, "SELECT count(*) FROM leader") == "0"  # it never led
        assert _submit(one.url).json()["id"] == 2
    finally:
        one.stop()


def test_a_second_server_with_a_live_server_id_is_refused_and_the_leader_keeps_leading(tmp_path, pg_db):
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db)
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        epoch = _psql(pg_db, "SELECT epoch FROM leader")
        r = run_server(["--config", _cluster_cfg(tmp_path, pg_db, "s1"), "--listen",
                        "127.0.0.1:%d" % free_port(), "--data-dir", str(tmp_path / "dup-data")], timeout=30)
        assert r.returncode == EXIT_CONFLICT, r.stderr
        assert "server_id 's1' is in use by a live server" in r.stderr, r.stderr
        assert "pid %d" % s1.proc.pid in r.stderr, r.stderr
        time.sleep(3)  # past lease_s: the leader renewed and still leads with its epoch
        assert s1.proc.poll() is None and s1.ready(), s1.log()
        assert _psql(pg_db, "SELECT holder || ' ' || epoch FROM leader") == "s1 " + epoch
        assert _submit(s1.url).status_code == 201
    finally:
        s1.stop()


def test_a_server_id_is_free_again_once_its_server_was_killed(tmp_path, pg_db):
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db)
    again = None
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        tid = _submit(s1.url).json()["id"]
        s1.proc.kill()
        s1.proc.wait(10)
        again = Server(tmp_path, "s1b", pg_db)
        again.config_text = again.config_text.replace("server_id: s1b", "server_id: s1")
        again.start()
        wait_for(again.ready, 20, "s1 to lead again")
        assert requests.get(again.url + "/api/v1/tasks/%d" % tid, timeout=10).status_code == 200
    finally:
        s1.stop()
        if again:
            again.stop()


def test_one_submit_sent_twice_with_one_key_stores_one_task(tmp_path, pg_db):
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db)
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        key = "k-" + uuid.uuid4().hex
        a = _submit(s1.url, key)
        b = _submit(s1.url, key)
        assert a.status_code == 201 and b.status_code == 201, (a.text, b.text)
        assert a.json()["id"] == b.json()["id"]
        assert b.headers.get("Idempotent-Replayed") == "true"
        assert "Idempotent-Replayed" not in a.headers
        assert _task_count(pg_db) == 1
        assert _psql(pg_db, "SELECT count(*) FROM idempotency") == "1"
        # the same key with another request: 422, nothing stored
        c = requests.post(s1.url + "/api/v1/tasks", json={"gpu_request": 2, "command": ["true"]},
                          headers={"Idempotency-Key": key}, timeout=30)
        assert c.status_code == 422, c.text
        assert _task_count(pg_db) == 1
    finally:
        s1.stop()


def _writer(url, stop, out, n_max=400):
    """Submit through url with a key per submit, retrying each with its
    key until it gets a definite answer; out gets (key, id)."""
    i = 0
    while not stop.is_set() and i < n_max:
        key = "w-%d-%s" % (i, uuid.uuid4().hex[:8])
        deadline = time.monotonic() + 40
        answered = None
        tries = 0
        while time.monotonic() < deadline and answered is None:
            tries += 1
            try:
                r = _submit(url, key, timeout=60)
            except requests.RequestException as e:
                out.append(("error", key, repr(e)))
                time.sleep(0.2)
                continue
            if r.status_code == 201:
                answered = r.json()["id"]
                if r.headers.get("Idempotent-Replayed") == "true":
                    out.append(("replayed", key))
            elif r.status_code == 503:
                code = r.json()["error"]["code"]
                out.append(("503", key, code))
                if code == "leader_unreachable":  # undecided: it names the key to send again with
                    assert r.headers.get("Idempotency-Key") == key, r.headers
                time.sleep(0.2)  # not carried out (standby, not_carried_out) or undecided: send it again
            else:
                out.append(("bad", key, r.status_code, r.text))
                return
        out.append(("ok", key, answered, tries))
        i += 1


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_writes_through_a_follower_across_a_leader_failure_are_stored_exactly_once(tmp_path, pg_db, how):
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db)
    s2 = Server(tmp_path, "s2", pg_db)
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        s2.start()
        wait_for(lambda: s2.health() == "follower", 20, "s2 to follow")
        stop = threading.Event()
        outs = [[] for _ in range(3)]
        ths = [threading.Thread(target=_writer, args=(s2.url, stop, o)) for o in outs]
        for t in ths:
            t.start()
        time.sleep(2)
        if how == "kill":
            s1.proc.kill()
        else:
            os.kill(s1.proc.pid, signal.SIGSTOP)
        wait_for(s2.ready, 30, "s2 to lead")
        time.sleep(2)
        stop.set()
        for t in ths:
            t.join(120)
        if how == "stop":
            os.kill(s1.proc.pid, signal.SIGCONT)
            s1.proc.wait(30)  # it finds its lease taken and steps down
            assert s1.proc.returncode == 75
        rows = [r for o in outs for r in o]
        assert not [r for r in rows if r[0] == "bad"], rows
        print("503s: %s; replayed: %d; acknowledged: %d" % (
            sorted(set(r[2] for r in rows if r[0] == "503")), len([r for r in rows if r[0] == "replayed"]),
            len([r for r in rows if r[0] == "ok"])))
        done = [r for r in rows if r[0] == "ok"]
        assert done and all(r[2] is not None for r in done), rows
        # every write answered once is stored exactly once, and nothing else is stored
        ids = [r[2] for r in done]
        assert len(set(ids)) == len(ids), rows
        assert _task_count(pg_db) == len(ids), (rows, _psql(pg_db, "SELECT id FROM tasks ORDER BY id"))
        stored = set(int(x) for x in _psql(pg_db, "SELECT id FROM tasks").split())
        assert stored == set(ids)
    finally:
        stop_all(s1, s2)


def test_a_leader_woken_after_a_takeover_and_cut_off_shows_nothing_stale(tmp_path, pg_db):
    """s1 leads and is frozen; s2 takes over and cancels a task s1 holds as
    queued; PostgreSQL stops and s1 wakes: it cannot learn that it was
    deposed, but its lease ran out, so for as long as it is cut off every
    request it answers is 503 (never the task as queued, issue 22); when
    PostgreSQL is back it steps down (75)."""
    from test_ha import _Postgres
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db)
    s2 = Server(tmp_path, "s2", pg_db)
    pg = _Postgres(pg_db)
    stopped = False
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        s2.start()
        wait_for(lambda: s2.health() == "follower", 20, "s2 to follow")
        blocker = requests.post(s1.url + "/api/v1/tasks", json={"gpu_request": 4, "command": ["sleep", "600"]},
                                timeout=15).json()["id"]
        tid = _submit(s1.url).json()["id"]
        assert requests.get(s1.url + "/api/v1/tasks/%d" % tid, timeout=10).json()["state"] == "queued"
        os.kill(s1.proc.pid, signal.SIGSTOP)
        wait_for(s2.ready, 30, "s2 to lead")
        r = requests.post(s2.url + "/api/v1/tasks/%d/cancel" % tid, timeout=15)
        assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
        pg.stop()
        stopped = True
        os.kill(s1.proc.pid, signal.SIGCONT)
        answers = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for path in ("/api/v1/tasks/%d" % tid, "/api/v1/tasks", "/api/v1/tasks/%d" % blocker, "/api/v1/gpus"):
                r = requests.get(s1.url + path, timeout=5)
                assert r.status_code == 503 and r.headers.get("Retry-After") == "1", r.text
                answers += 1
            time.sleep(0.1)
        assert answers >= 8 and s1.proc.poll() is None
        assert s1.health() == "degraded"
        pg.start()
        stopped = False
        s1.proc.wait(30)
        assert s1.proc.returncode == 75, s1.log()
    finally:
        if stopped:
            pg.start()
        stop_all(s1, s2)


def test_a_write_on_its_way_to_a_frozen_leader_gets_a_definite_answer(tmp_path, pg_db):
    """The leader is frozen, then a submit comes through the follower: it
    is sent (the frozen process's socket takes it) and no answer comes.
    The follower takes over; the old leader is fenced, the store has no
    answer for the write's key: 503 not_carried_out, not a 'maybe'.  Sent
    again with the key the answer names, it is stored once; a resumed old
    leader stores nothing of it."""
    _require_bin()
    s1 = Server(tmp_path, "s1", pg_db)
    s2 = Server(tmp_path, "s2", pg_db)
    try:
        s1.start()
        wait_for(s1.ready, 20, "s1 to lead")
        s2.start()
        wait_for(lambda: s2.health() == "follower", 20, "s2 to follow")
        assert _submit(s2.url).status_code == 201  # task 1, through the follower
        os.kill(s1.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        r = requests.post(s2.url + "/api/v1/tasks", json={"gpu_request": 1, "command": ["sleep", "600"]},
                          timeout=60)  # no key: the follower adds one
        took = time.monotonic() - t0
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "not_carried_out", r.text
        assert r.headers.get("Retry-After") == "1"
        key = r.headers.get("Idempotency-Key")
        assert key and key.startswith("gpf-"), r.headers
        print("definite answer %.2f s after the write was sent to the frozen leader" % took)
        assert _task_count(pg_db) == 1
        wait_for(s2.ready, 30, "s2 to lead")
        a = _submit(s2.url, key)
        b = _submit(s2.url, key)
        assert a.status_code == 201 and b.status_code == 201 and a.json()["id"] == b.json()["id"], (a.text, b.text)
        os.kill(s1.proc.pid, signal.SIGCONT)
        s1.proc.wait(30)
        assert s1.proc.returncode == 75
        assert _task_count(pg_db) == 2
    finally:
        stop_all(s1, s2)
