"""Black-box test of the crash rules under bursts of batch submits.

Batch submits are answered as soon as the task is stored; the daemon's
spawner thread starts the supervisors afterwards, many at once
(docs/internals/exec.md, "Starting many").  This test kill -9s the daemon
in the middle of a burst of batch submits, at several points, restarts it
on the same data dir, and checks the rules that must survive any crash:
  - every submit answered 201 names a task that exists after the restart;
  - no task ran twice (each task appends its id to a file: one line each);
  - no task ran whose `running` state was not stored (every id in the file
    is a task that was stored as started, and ended succeeded).

Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build \
     /usr/bin/python3 -m pytest -q tests/blackbox/test_spawn_crash.py
"""
import collections
import threading

import pytest
import requests

from apiutil import kill9, reap_supervisors, restart, task, wait_for

pytestmark = pytest.mark.e2e
assert reap_supervisors  # autouse fixture, imported so that it applies here

# 32 simulated GPUs, tasks of 64 MiB: hundreds run at once
CONFIG = ("gpus: {backend: sim, sim: [{name: x, memory_mb: 24564, count: 32}]}\n"
          "scheduler: {max_queue_depth: 100000}\n")
FINAL = {"succeeded", "failed", "cancelled", "timeout", "lost"}


def burst(d, argv, answered, stop, nthreads=8):
    """Submit batch tasks from nthreads connections until stop is set;
    the ids of the 201 answers go to answered."""
    def worker():
        s = requests.Session()
        body = {"tenant_id": "t", "name": "burst", "gpu_request": 1, "memory_mb": 64, "command": argv}
        while not stop.is_set():
            try:
                r = s.post(d.url + "/api/v1/tasks", json=body, timeout=5)
            except requests.RequestException:
                return  # the daemon is gone
            if r.status_code == 201:
                answered.append(r.json()["id"])
    threads = [threading.Thread(target=worker) for _ in range(nthreads)]
    for t in threads:
        t.start()
    return threads


@pytest.mark.parametrize("kill_after", [[1, 40, 300]])
def test_kill9_during_batch_bursts_loses_no_answered_task_and_runs_none_twice(daemon_factory, tmp_path,
                                                                               kill_after):
    d = daemon_factory(CONFIG)
    runs = tmp_path / "runs.txt"
    runs.write_text("")
    argv = ["sh", "-c", 'echo "$GPUPOOL_TASK_ID" >> "$0"', str(runs)]
    answered = []
    for n in kill_after:
        stop = threading.Event()
        start = len(answered)
        threads = burst(d, argv, answered, stop)
        wait_for(lambda: len(answered) - start >= n, 20, "%d answered submits" % n, interval=0.001)
        kill9(d)  # during the burst: submits, commits and spawns in flight
        stop.set()
        for t in threads:
            t.join(10)
        restart(d)

    # everything answered exists and ends; nothing is left running
    assert len(answered) >= sum(kill_after)

    def all_final():
        return all(task(d, i)["state"] in FINAL for i in answered)
    wait_for(all_final, 120, "every answered task to end", interval=0.2)
    states = {i: task(d, i) for i in answered}

    lines = [ln for ln in runs.read_text().split("\n") if ln]
    count = collections.Counter(int(x) for x in lines)
    twice = {i: c for i, c in count.items() if c > 1}
    assert not twice, "tasks that ran more than once: %r" % twice
    for i in count:
        t = states.get(i) or task(d, i)  # also ones whose answer was lost in the kill
        assert t["started_at"], "task %d ran but was never stored as started: %r" % (i, t)
        assert t["state"] == "succeeded", t
    for i, t in states.items():
        # a task stored as succeeded ran exactly once
        if t["state"] == "succeeded":
            assert count.get(i) == 1, (i, t)
        else:
            assert t["state"] != "lost" or "supervisor" in t["reason"], t
