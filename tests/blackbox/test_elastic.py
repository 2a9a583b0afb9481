"""Elastic tasks through the real daemon: they start on their minimum, grow
onto idle GPUs, shrink for a task that waits (before anything is
preempted), and are told about every change: a batch task by
GPUPOOL_ALLOC_FILE and a signal, a lease holder in the task and the
heartbeat answer.  (The pure rules are unit-tested in
tests/unit/test-sched-elastic.c.)"""
import json
import os
import sqlite3
import time

import pytest

from apiutil import kill9, post, reap_supervisors, restart, submit, wait_for  # noqa: F401  (reap_supervisors: autouse)
from apiutil import task as get

pytestmark = pytest.mark.e2e

CONFIG = ("gpus: {backend: sim}\n"
          "scheduler: {preemption: {enabled: true, min_runtime_sec: 0}}\n"
          "tasks: {kill_grace_s: 1}\n")

# Prints its allocation at start and on every SIGUSR1, one JSON line each.
SCRIPT = ('trap \'echo "alloc $(tr -d "\\n" < "$GPUPOOL_ALLOC_FILE")"\' USR1; '
          'echo "start $CUDA_VISIBLE_DEVICES $(tr -d "\\n" < "$GPUPOOL_ALLOC_FILE")"; '
          'i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done')


def indexes(t):
    return sorted(g["index"] for g in t["gpus"])


def log_text(d, tid):
    path = os.path.join(d.data_dir, "tasks", str(tid), "log")
    return open(path).read() if os.path.exists(path) else ""


def log_lines(d, tid, prefix):
    return [json.loads(line.split(" ", 1)[1]) for line in log_text(d, tid).splitlines()
            if line.startswith(prefix + " {")]


def test_elastic_batch_task_grows_shrinks_for_a_waiting_task_and_is_told_each_time(daemon_factory):
    d = daemon_factory(CONFIG)
    el = submit(d, name="trainer", command=["sh", "-c", SCRIPT], elastic={"min_gpus": 1, "max_gpus": 4})
    assert el["elastic"] == {"min_gpus": 1, "max_gpus": 4} and el["gpu_request"] == 1
    # nothing else waits: it holds all four GPUs
    wait_for(lambda: len(get(d, el["id"])["gpus"]) == 4)
    start = wait_for(lambda: [line.split(" ", 2) for line in log_text(d, el["id"]).splitlines()
                              if line.startswith("start ")])
    alloc = json.loads(start[0][2])
    assert start[0][1] == ",".join(str(g["index"]) for g in alloc["gpus"])  # CUDA_VISIBLE_DEVICES
    assert alloc["task_id"] == el["id"] and alloc["min_gpus"] == 1 and alloc["max_gpus"] == 4
    assert 1 <= alloc["n_gpus"] <= 4 and len(alloc["gpus"]) == alloc["n_gpus"]

    # a 2-GPU task (not preemptible work in the way, and nothing preemptible at all):
    # the elastic task gives two GPUs back instead of anyone being preempted
    other = submit(d, gpu_request=2, exclusive=True, command=["sleep", "30"])
    assert other["state"] == "running", other["reason"]
    e = get(d, el["id"])
    assert e["state"] == "running" and e["preempt_count"] == 0 and len(e["gpus"]) == 2
    assert not set(indexes(e)) & set(indexes(other))
    told = wait_for(lambda: [a for a in log_lines(d, el["id"], "alloc") if a["n_gpus"] == 2])
    assert sorted(g["index"] for g in told[-1]["gpus"]) == indexes(e)

    # the other task ends: the elastic task grows back onto the idle GPUs
    post(d, "/api/v1/tasks/%d/cancel" % other["id"])
    wait_for(lambda: len(get(d, el["id"])["gpus"]) == 4, timeout=15)
    wait_for(lambda: log_lines(d, el["id"], "alloc") and log_lines(d, el["id"], "alloc")[-1]["n_gpus"] == 4)


def test_elastic_lease_holder_sees_its_gpus_in_the_heartbeat_answer(daemon_factory):
    d = daemon_factory(CONFIG)
    el = submit(d, elastic={"min_gpus": 2, "max_gpus": 4}, lease_ttl_s=600)
    wait_for(lambda: len(get(d, el["id"])["gpus"]) == 4)
    hb = post(d, "/api/v1/tasks/%d/heartbeat" % el["id"]).json()
    assert hb["state"] == "running" and len(hb["gpus"]) == 4
    # a one-GPU task shrinks it by one, not to its minimum
    one = submit(d, exclusive=True, lease_ttl_s=600)
    assert one["state"] == "running"
    hb = post(d, "/api/v1/tasks/%d/heartbeat" % el["id"]).json()
    assert len(hb["gpus"]) == 3 and one["gpus"][0]["index"] not in [g["index"] for g in hb["gpus"]]
    # two more: it is at its minimum and cannot give more; the second waits
    two = submit(d, exclusive=True, lease_ttl_s=600)
    three = submit(d, exclusive=True, lease_ttl_s=600)
    assert two["state"] == "running" and three["state"] == "queued"
    assert len(get(d, el["id"])["gpus"]) == 2


def test_a_grown_elastic_task_keeps_its_gpus_across_a_daemon_crash(daemon_factory):
    d = daemon_factory(CONFIG)
    el = submit(d, command=["sh", "-c", SCRIPT], elastic={"min_gpus": 1, "max_gpus": 3})
    wait_for(lambda: len(get(d, el["id"])["gpus"]) == 3)
    was = get(d, el["id"])
    before = indexes(was)
    kill9(d)
    restart(d)
    after = get(d, el["id"])
    # the same run on the same GPUs: not requeued and started again
    assert after["state"] == "running" and indexes(after) == before
    assert after["retries"] == 0 and after["started_at"] == was["started_at"]
    # the fourth GPU is still free for others
    t = submit(d, exclusive=True, lease_ttl_s=600)
    assert t["state"] == "running" and t["gpus"][0]["index"] not in before


def test_an_elastic_run_is_metered_at_each_gpu_count_for_its_own_time(daemon_factory):
    d = daemon_factory(CONFIG)
    el = submit(d, elastic={"min_gpus": 1, "max_gpus": 4}, lease_ttl_s=600)
    wait_for(lambda: len(get(d, el["id"])["gpus"]) == 4)
    time.sleep(0.3)
    other = submit(d, gpu_request=2, exclusive=True, lease_ttl_s=600)
    assert other["state"] == "running" and len(get(d, el["id"])["gpus"]) == 2
    time.sleep(0.3)
    assert post(d, "/api/v1/tasks/%d/release" % el["id"]).status_code == 200
    started, finished = get(d, el["id"])["started_at"], get(d, el["id"])["finished_at"]
    assert started and finished
    d.stop()
    con = sqlite3.connect(os.path.join(d.data_dir, "gpupool.db"))
    segs = list(con.execute("SELECT start_ms, end_ms, gpu_ms, gpus_milli FROM usage WHERE task_id = ? "
                            "ORDER BY start_ms, id", (el["id"],)))
    con.close()
    # contiguous, four GPUs until the shrink, then two; each billed at its own share
    assert [s[3] for s in segs] == [4000, 2000], segs
    assert segs[0][1] == segs[1][0]
    assert all(s[2] == (s[1] - s[0]) * s[3] // 1000 for s in segs)
    assert segs[0][1] - segs[0][0] >= 250 and segs[1][1] - segs[1][0] >= 250
