"""Black-box tests of crash recovery: the real gpupool daemon is killed
(SIGKILL, or stopped with SIGTERM) and started again on the same data dir.

DESIGN.md: "A task's process is watched by a small supervisor of its own,
so a daemon restart neither kills running work nor loses an exit code",
and "every transition is stored before it is reported".  So across a
restart: batch tasks keep running without the daemon and their real exit
codes are recorded, queued tasks keep their queue order, leases stay held,
and task ids keep growing.

Run: make blackbox, or
  GPUPOOL_BIN=/tmp/b-bb/gpupool GPUPOOL_BUILD=/tmp/b-bb /usr/bin/python3 -m pytest -q tests/blackbox/test_recovery.py
"""
import os

import pytest

from apiutil import (batch, gpu, gpus, kill9, lease, pid_alive, post, read_pidfile, reap_supervisors, restart,
                     supervisor_pid, task, task_dir, wait_for, wait_state)

pytestmark = pytest.mark.e2e
assert reap_supervisors  # autouse fixture, imported so that it applies here


def running_cmd(tmp_path, name, script):
    """argv of a shell task that first writes its pid to tmp_path/NAME.pid."""
    pidfile = str(tmp_path / (name + ".pid"))
    return pidfile, ["sh", "-c", 'echo $$ > "$0"; ' + script, pidfile]


def test_tasks_that_end_while_the_daemon_is_dead_get_their_real_exit_code(daemon, tmp_path):
    d = daemon
    cmds = [running_cmd(tmp_path, "b%d" % i, "sleep 2; exit 7") for i in range(2)]
    bs = [batch(d, argv, name="b%d" % i) for i, (_, argv) in enumerate(cmds)]
    ls = [lease(d, name="l%d" % i) for i in range(2)]
    for t in bs + ls:
        assert t["state"] == "running", t
    assert all(g["tasks"] for g in gpus(d)), "all four GPUs should be busy"
    # three tasks that need the whole machine wait behind them
    qs = [batch(d, ["sh", "-c", "echo ran"], gpu_request=4, priority=p, name="q%d" % i)
          for i, p in enumerate((5, 5, 2))]
    before = {t["id"]: task(d, t["id"])["queue_position"] for t in qs}
    assert sorted(before.values()) == [1, 2, 3]
    pids = [wait_for(lambda p=p: read_pidfile(p), 5, "pid file " + p) for p, _ in cmds]
    sups = [wait_for(lambda t=t: supervisor_pid(d, t["id"]), 5, "supervisor pid") for t in bs]
    max_id = max(t["id"] for t in bs + ls + qs)

    kill9(d)
    # the work goes on without the daemon
    for pid in pids:
        assert pid_alive(pid), "task process %d died with the daemon" % pid
    for sup, _ in sups:
        assert pid_alive(sup), "supervisor %d died with the daemon" % sup
    for t in bs:
        wait_for(lambda t=t: os.path.exists(os.path.join(task_dir(d, t["id"]), "result.json")), 10,
                 "task %d to end while the daemon is down" % t["id"])
    wait_for(lambda: not any(pid_alive(p) for p in pids), 5, "task processes to exit")

    restart(d)
    for t in bs:
        got = task(d, t["id"])
        assert got["state"] == "failed", got
        assert got["exit_code"] == 7, got
        assert got["finished_at"] is not None
    for t in ls:
        assert task(d, t["id"])["state"] == "running"
    after = {}
    for t in qs:
        got = task(d, t["id"])
        assert got["state"] == "queued", got
        after[t["id"]] = got["queue_position"]
    assert after == before
    q = d.api("GET", "/api/v1/queue").json()
    assert [e["id"] for e in q["tasks"]] == sorted(before, key=before.get)
    # the GPUs of the ended tasks are free again; the leases still hold theirs
    busy = sorted(g["index"] for g in gpus(d) if g["tasks"])
    assert busy == sorted(t["gpus"][0]["index"] for t in ls)

    # ids continue after the highest stored one
    new = lease(d, memory_mb=100, name="new")
    assert new["id"] > max_id

    # the queued tasks run, in queue order, once the GPUs are free
    for t in ls + [new]:
        assert post(d, "/api/v1/tasks/%d/release" % t["id"]).status_code == 200
    done = [wait_state(d, t["id"], ("succeeded", "failed"), timeout=10) for t in qs]
    assert [t["state"] for t in done] == ["succeeded"] * 3, done
    order = sorted(done, key=lambda t: t["started_at"])
    assert [t["id"] for t in order] == sorted(before, key=before.get)
    r = d.api("GET", "/api/v1/tasks/%d/logs" % qs[0]["id"])
    assert r.text == "ran\n"


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_running_tasks_survive_a_restart_and_finish_with_their_real_code(daemon, tmp_path, how):
    d = daemon
    pidfile, argv = running_cmd(tmp_path, "t", "sleep 2; echo finished; exit 5")
    t = batch(d, argv)
    other = batch(d, ["sh", "-c", "sleep 2"])
    pid = wait_for(lambda: read_pidfile(pidfile), 5, "pid file")
    wait_for(lambda: supervisor_pid(d, other["id"]), 5, "second supervisor")
    if how == "kill9":
        kill9(d)
    else:
        d.stop()
        assert d.proc.returncode == 0, d.log()
    assert pid_alive(pid)
    restart(d)
    got = task(d, t["id"])
    assert got["state"] == "running", got
    assert got["gpus"] == t["gpus"] and got["started_at"] == t["started_at"]
    assert gpu(d, t["gpus"][0]["index"])["tasks"] == [t["id"]]
    assert task(d, other["id"])["state"] == "running"
    done = wait_state(d, t["id"], ("succeeded", "failed", "lost", "cancelled"), timeout=10)
    assert done["state"] == "failed" and done["exit_code"] == 5, done
    assert d.api("GET", "/api/v1/tasks/%d/logs" % t["id"]).text == "finished\n"
    o = wait_state(d, other["id"], ("succeeded", "failed", "lost"), timeout=10)
    assert o["state"] == "succeeded" and o["exit_code"] == 0, o
    assert not pid_alive(pid)
    for g in gpus(d):
        assert g["tasks"] == [] and g["memory_allocated_mb"] == 0


def test_a_lease_survives_a_restart_and_can_be_heartbeated_and_released(daemon):
    d = daemon
    t = lease(d, memory_mb=4096, lease_ttl_s=30)
    idx = t["gpus"][0]["index"]
    kill9(d)
    restart(d)
    got = task(d, t["id"])
    assert got["state"] == "running" and got["gpus"] == t["gpus"], got
    g = gpu(d, idx)
    assert g["tasks"] == [t["id"]] and g["memory_allocated_mb"] == 4096
    r = post(d, "/api/v1/tasks/%d/heartbeat" % t["id"])
    assert r.status_code == 200, r.text
    assert r.json()["lease_expires_at"] >= got["lease_expires_at"]
    r = post(d, "/api/v1/tasks/%d/release" % t["id"], {"exit_code": 0})
    assert r.status_code == 200 and r.json()["state"] == "succeeded"
    g = gpu(d, idx)
    assert g["tasks"] == [] and g["memory_allocated_mb"] == 0


def test_a_cancel_while_the_daemon_is_down_is_not_needed_to_end_the_task(daemon, tmp_path):
    """A batch task cancelled just before the daemon dies still ends as
    cancelled (the supervisor records it) once the daemon is back."""
    d = daemon
    pidfile, argv = running_cmd(tmp_path, "c", "exec sleep 30")
    t = batch(d, argv)
    pid = wait_for(lambda: read_pidfile(pidfile), 5, "pid file")
    r = post(d, "/api/v1/tasks/%d/cancel" % t["id"])
    assert r.status_code == 200
    kill9(d)
    wait_for(lambda: not pid_alive(pid), 5, "the cancelled task's process to end")
    restart(d)
    done = wait_state(d, t["id"], ("cancelled", "failed", "lost"), timeout=5)
    assert done["state"] == "cancelled", done


def test_ids_keep_growing_across_restarts(daemon):
    d = daemon
    a = lease(d, memory_mb=100)
    post(d, "/api/v1/tasks/%d/release" % a["id"])
    d.stop()
    restart(d)
    b = lease(d, memory_mb=100)
    assert b["id"] == a["id"] + 1
    assert task(d, a["id"])["state"] == "succeeded"
    kill9(d)
    restart(d)
    c = lease(d, memory_mb=100)
    assert c["id"] == b["id"] + 1


def test_tasks_on_gpus_gone_after_a_restart_are_requeued_or_failed(daemon, tmp_path):
    d = daemon
    keep = [lease(d, name="keep%d" % i, max_retries=1) for i in range(2)]
    retry = lease(d, name="retry", max_retries=1)
    pidfile, argv = running_cmd(tmp_path, "gone", "exec sleep 30")
    doomed = batch(d, argv, name="doomed", max_retries=0)
    assert sorted(t["gpus"][0]["index"] for t in keep) == [0, 1]
    assert retry["gpus"][0]["index"] == 2 and doomed["gpus"][0]["index"] == 3
    pid = wait_for(lambda: read_pidfile(pidfile), 5, "pid file")
    d.stop()
    # the machine comes back with two GPUs
    d.config_text = 'gpus: {backend: sim, sim: [{name: "NVIDIA GeForce RTX 4090", memory_mb: 24564, count: 2}]}\n'
    restart(d)
    assert len(gpus(d)) == 2
    for t in keep:
        got = task(d, t["id"])
        assert got["state"] == "running" and got["gpus"] == t["gpus"], got
    r = task(d, retry["id"])
    assert r["state"] == "queued" and r["retries"] == 1 and r["gpus"] == [] and r["reason"], r
    f = task(d, doomed["id"])
    assert f["state"] == "failed" and f["reason"] and f["finished_at"], f
    wait_for(lambda: not pid_alive(pid), 5, "the process of the task whose GPU is gone to stop")
    # the requeued lease runs when a GPU frees up
    assert post(d, "/api/v1/tasks/%d/release" % keep[0]["id"]).status_code == 200
    got = wait_state(d, retry["id"], ("running",), timeout=3)
    assert got["gpus"] == [{"node": "local", "index": keep[0]["gpus"][0]["index"],
                            "uuid": keep[0]["gpus"][0]["uuid"]}]
