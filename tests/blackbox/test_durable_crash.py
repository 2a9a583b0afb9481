"""Black-box test of durable submits under a kill -9 (docs/internals/store.md,
"Durable commits").

With store.sync: full a batch's fsync runs while the loop applies the next
one; answers wait until their batch is durable and a reader's answer waits
until what it read is.  This test submits from several connections while
other connections poll GET /api/v1/tasks, kill -9s the daemon in the middle,
restarts it on the same data dir, and checks:
  - every submit answered 201 names a task that exists after the restart;
  - every id a reader saw in a list exists after the restart (no reader
    ever saw a task that was not stored).
It does that at several points of the load.

Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build \
     /usr/bin/python3 -m pytest -q tests/blackbox/test_durable_crash.py
"""
import threading

import pytest
import requests

from apiutil import kill9, reap_supervisors, restart, wait_for

pytestmark = pytest.mark.e2e
assert reap_supervisors  # autouse fixture, imported so that it applies here

# leases only: nothing runs, so the test is about the store alone
CONFIG = ("gpus: {backend: sim, sim: [{name: x, memory_mb: 24564, count: 4}]}\n"
          "scheduler: {max_queue_depth: 100000}\n"
          "store: {sync: full}\n")


def load(d, answered, seen, stop, nsubmit=6, nread=3):
    """Submit leases from nsubmit connections (ids of 201s into answered)
    and list tasks from nread connections (every id seen into seen)."""
    def submitter():
        s = requests.Session()
        body = {"tenant_id": "t", "name": "durable", "gpu_request": 1, "memory_mb": 64,
                "lease_ttl_s": 600}
        while not stop.is_set():
            try:
                r = s.post(d.url + "/api/v1/tasks", json=body, timeout=5)
            except requests.RequestException:
                return  # the daemon is gone
            if r.status_code == 201:
                answered.append(r.json()["id"])

    def reader():
        s = requests.Session()
        while not stop.is_set():
            try:
                r = s.get(d.url + "/api/v1/tasks?limit=200", timeout=5)
            except requests.RequestException:
                return
            if r.status_code == 200:
                seen.update(t["id"] for t in r.json()["tasks"])

    threads = [threading.Thread(target=submitter) for _ in range(nsubmit)]
    threads += [threading.Thread(target=reader) for _ in range(nread)]
    for t in threads:
        t.start()
    return threads


def stored_ids(d):
    """Every task id the restarted daemon has, page by page."""
    ids, after = set(), None
    while True:
        url = d.url + "/api/v1/tasks?limit=1000" + ("&after=%d" % after if after else "")
        r = requests.get(url, timeout=10)
        assert r.status_code == 200, r.text
        ids.update(t["id"] for t in r.json()["tasks"])
        after = r.json()["next_after"]
        if not after:
            return ids


@pytest.mark.parametrize("kill_after", [[1, 50, 400]])
def test_kill9_under_submits_and_reads_loses_nothing_anyone_saw(daemon_factory, kill_after):
    d = daemon_factory(CONFIG)
    answered, seen = [], set()
    for n in kill_after:
        stop = threading.Event()
        start = len(answered)
        threads = load(d, answered, seen, stop)
        wait_for(lambda: len(answered) - start >= n, 30, "%d answered submits" % n, interval=0.001)
        kill9(d)  # during the load: commits, fsyncs and reads in flight
        stop.set()
        for t in threads:
            t.join(10)
        restart(d)
        have = stored_ids(d)
        lost = sorted(set(answered) - have)
        assert not lost, "answered 201 but missing after the restart: %r" % lost[:20]
        ghosts = sorted(seen - have)
        assert not ghosts, "seen by a reader but missing after the restart: %r" % ghosts[:20]
    assert len(answered) >= sum(kill_after)
    assert seen, "the readers saw nothing"
