"""Every run keeps its own log (issue 24): a task that runs several times
(requeued after a node loss, preempted, retried) has one log per run, and a
multi-node task one per rank; GET /api/v1/tasks/{id}/logs serves the
current (or last) run whole by default, ?run=N and ?rank=N the others
(400 invalid_request naming the parameter when they name nothing), and
?follow=1 goes on into the next run after one line that says so
(docs/api.md "Logs", docs/cli.md `gpupool logs`).

What was seen before: after a node-loss requeue `gpupool logs` showed the
old run's first bytes and the new run's first bytes never reached the
server (one file per rank, continued at the old offset); ?rank=1 was
answered with rank 0's log.

Cluster tests run a real control plane and real agents on loopback
(clusterutil.py); the local tests a server on its own simulated GPUs.

Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build \
     /usr/bin/python3 -m pytest -q tests/blackbox/test_runlogs.py
"""
import os
import re
import subprocess
import time

import pytest

from apiutil import gpu, kill9, post, reap_supervisors, restart, submit, task, wait_for
from clusterutil import NODE_TIMEOUT_S, cluster, server_config, sim_gpus
from conftest import REPO

pytestmark = pytest.mark.e2e
assert reap_supervisors and cluster  # fixtures, imported so that they apply here

# prints its first line at once, then ticks until stopped
TICK = ('echo "first $GPUPOOL_NODE $$"; i=0; '
        'while :; do i=$((i+1)); echo "tick $i $GPUPOOL_NODE $$"; sleep 0.2; done')
LOCAL_TICK = TICK.replace("$GPUPOOL_NODE", "local")  # local runs have no GPUPOOL_NODE
MARK = re.compile(r"^--- gpupool: run (\d+) of task (\d+) starts \((.*)\)$", re.M)


def logs(api, tid, **params):
    q = "&".join("%s=%s" % kv for kv in params.items())
    return api("GET", "/api/v1/tasks/%d/logs%s" % (tid, "?" + q if q else ""), timeout=10)


def text(api, tid, **params):
    r = logs(api, tid, **params)
    assert r.status_code == 200, (params, r.status_code, r.text)
    return r.text


def refused(api, tid, param, **params):
    r = logs(api, tid, **params)
    assert r.status_code == 400, (params, r.status_code, r.text)
    err = r.json()["error"]
    assert err["code"] == "invalid_request" and err["message"].startswith(param + ":"), err
    return err["message"]


def follower(server, tid, *extra):
    """`gpupool logs -f ID` in the background: (process, its stdout file)."""
    out = open(str(server.data_dir) + "-follow-%d.out" % tid, "w+")
    p = subprocess.Popen([server.bin, "logs", "-f"] + list(extra) + [str(tid)], env=server.env(), stdout=out,
                         stderr=subprocess.PIPE, text=True)
    return p, out


def followed(p, out, timeout=30):
    try:
        err = p.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("logs -f still running after %d s" % timeout)
    out.seek(0)
    return p.returncode, out.read(), err


# ---- cluster: a node-loss requeue ---------------------------------------------

def test_node_loss_requeue_gives_the_new_run_its_own_whole_log_and_follow_crosses(cluster):
    cluster.start_server()
    a = cluster.agent("gpu-a", gpus=sim_gpus(2))
    t = cluster.submit(["sh", "-c", TICK], gpu_request=2, max_retries=1, on_node_lost="requeue")
    tid = t["id"]
    api = cluster.server.api
    wait_for(lambda: "tick 3 gpu-a" in text(api, tid), 15, "run 1's output on the server")
    f, fout = follower(cluster.server, tid)
    cluster.agent("gpu-b", gpus=sim_gpus(2))
    a.kill9()
    cluster.wait_node("gpu-a", "lost", timeout=NODE_TIMEOUT_S + 5)
    t = cluster.wait_task(tid, "running", where=lambda t: t["nodes"] == ["gpu-b"] and t["retries"] == 1, timeout=15)
    wait_for(lambda: "tick 3 gpu-b" in text(api, tid), 15, "run 2's output on the server")
    # the current run, whole from its first byte, and nothing of run 1's
    cur = text(api, tid)
    assert cur.startswith("first gpu-b "), cur[:200]
    assert "gpu-a" not in cur, cur[:400]
    assert t["runs"] == 2, t
    assert text(api, tid, run=2).startswith(cur)
    old = text(api, tid, run=1)
    assert old.startswith("first gpu-a ") and "tick 3 gpu-a" in old and "gpu-b" not in old, old[:400]
    r = logs(api, tid)
    assert r.headers["X-Gpupool-Run"] == "2" and r.headers["X-Gpupool-Runs"] == "2", dict(r.headers)
    assert "run 3" in refused(api, tid, "run", run=3)
    refused(api, tid, "rank", rank=1)
    # the CLI: the current run, --run for the other, a clear error for none
    c = cluster.cli("logs", tid)
    assert c.returncode == 0 and c.stdout.startswith("first gpu-b ") and "gpu-a" not in c.stdout, (c.stdout[:300],
                                                                                                   c.stderr)
    assert "run 2" in c.stderr and "--run" in c.stderr, c.stderr
    c = cluster.cli("logs", "--run", "1", tid)
    assert c.returncode == 0 and c.stdout.startswith("first gpu-a ") and "gpu-b" not in c.stdout, c.stdout[:300]
    c = cluster.cli("logs", "--run", "3", tid)
    assert c.returncode == 1 and "no run 3" in c.stderr, (c.returncode, c.stderr)
    c = cluster.cli("logs", "--run", "0", tid)
    assert c.returncode == 2 and "--run" in c.stderr, (c.returncode, c.stderr)
    st = cluster.cli("status", tid).stdout
    assert re.search(r"runs:\s+2 \(gpupool logs --run N shows each\)", st), st
    # a server restart breaks the follow's stream: it is taken up again at the same run and byte
    n_before = len(text(api, tid))
    cluster.server.kill9()
    cluster.server.start()
    wait_for(lambda: len(text(api, tid)) > n_before + 20, 15, "run 2 to go on writing after the restart")
    # logs -f, started during run 1, followed the task into run 2 and says so in one line
    assert cluster.cli("cancel", tid).returncode == 0
    rc, out, err = followed(f, fout)
    assert rc == 0, (rc, err)
    marks = MARK.findall(out)
    assert len(marks) == 1, out[-2000:]
    assert marks[0][:2] == ("2", str(tid)) and "requeued (retry 1 of 1)" in marks[0][2] and "gpu-a" in marks[0][2], \
        marks
    before, after = out.split(MARK.search(out).group(0) + "\n")
    assert before.startswith("first gpu-a ") and "gpu-b" not in before, before[:300]
    assert after.startswith("first gpu-b ") and "gpu-a" not in after, after[:300]
    # what it printed after the line is run 2's log as the server keeps it
    assert text(api, tid, run=2).startswith(after)


def test_a_preempted_remote_run_keeps_what_it_wrote_while_stopping(cluster):
    cluster.start_server(server_config(extra="scheduler: {preemption: {enabled: true, min_runtime_sec: 0, "
                                             "grace_sec: 5}}\n"))
    cluster.agent("gpu-a", gpus=sim_gpus(2))
    cmd = 'trap \'echo "got-term $$"; exit 0\' TERM; ' + TICK
    t = cluster.submit(["sh", "-c", cmd], tenant_id="bulk", priority=8, preemptible=True, exclusive=True,
                       gpu_request=2)
    tid = t["id"]
    api = cluster.server.api
    wait_for(lambda: "tick 2 gpu-a" in text(api, tid), 15, "run 1's output")
    pid1 = text(api, tid).split()[2]
    r = api("POST", "/api/v1/tasks", json={"tenant_id": "prod", "priority": 0, "exclusive": True, "gpu_request": 2,
                                           "lease_ttl_s": 600}, timeout=10)
    assert r.status_code == 201, r.text
    urgent = r.json()
    wait_for(lambda: task_of(api, tid)["preempt_count"] == 1, 10, "the preemption")
    # what run 1 wrote after its SIGTERM reaches run 1's log, though the task has moved on
    wait_for(lambda: "got-term %s" % pid1 in text(api, tid, run=1), 15, "run 1's last words")
    wait_for(lambda: task_of(api, urgent["id"])["state"] == "running", 15, "the urgent lease")
    assert api("POST", "/api/v1/tasks/%d/release" % urgent["id"], timeout=10).status_code == 200
    wait_for(lambda: "tick 2 gpu-a" in text(api, tid, run=2), 15, "run 2's output")
    cur = text(api, tid)
    assert cur.startswith("first gpu-a ") and pid1 not in cur and "got-term" not in cur, cur[:300]
    assert cluster.cli("cancel", tid).returncode == 0


def task_of(api, tid):
    r = api("GET", "/api/v1/tasks/%d" % tid, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


# ---- cluster: ranks of a multi-node task --------------------------------------

def test_each_rank_of_a_multinode_task_has_its_own_log(cluster):
    cluster.start_server()
    for n in ("gpu-a", "gpu-b"):
        cluster.agent(n, gpus=sim_gpus(2))
    t = cluster.submit(["sh", "-c", 'echo "rank $GPUPOOL_NODE_RANK on $GPUPOOL_NODE"; '
                                    'if [ "$GPUPOOL_NODE_RANK" = 1 ]; then echo only-rank-1; fi'],
                       gpu_request=4)
    t = cluster.wait_task(t["id"], "succeeded", timeout=20)
    tid, nodes = t["id"], t["nodes"]
    api = cluster.server.api
    assert text(api, tid) == "rank 0 on %s\n" % nodes[0]
    assert text(api, tid, rank=0) == "rank 0 on %s\n" % nodes[0]
    assert text(api, tid, rank=1) == "rank 1 on %s\nonly-rank-1\n" % nodes[1]
    assert text(api, tid, run=1, rank=1) == "rank 1 on %s\nonly-rank-1\n" % nodes[1]
    assert "no rank 2" in refused(api, tid, "rank", rank=2)
    refused(api, tid, "rank", rank=-1)
    refused(api, tid, "rank", rank="x")
    refused(api, tid, "run", run=2)
    c = cluster.cli("logs", "--rank", "1", tid)
    assert c.returncode == 0 and c.stdout == "rank 1 on %s\nonly-rank-1\n" % nodes[1], (c.stdout, c.stderr)
    c = cluster.cli("logs", "--rank", "2", tid)
    assert c.returncode == 1 and "no rank 2" in c.stderr, (c.returncode, c.stderr)
    # a follow of an ended task's rank sends that rank's log and ends
    r = logs(api, tid, rank=1, follow=1)
    assert r.status_code == 200 and r.text == "rank 1 on %s\nonly-rank-1\n" % nodes[1], r.text


def test_a_multinode_task_requeued_after_a_node_loss_has_new_logs_for_every_rank(cluster):
    cluster.start_server()
    agents = {n: cluster.agent(n, gpus=sim_gpus(2)) for n in ("gpu-a", "gpu-b", "gpu-c")}
    rank_tick = TICK.replace("first $GPUPOOL_NODE", "first r$GPUPOOL_NODE_RANK $GPUPOOL_NODE")
    t = cluster.submit(["sh", "-c", rank_tick], gpu_request=4, max_retries=1, on_node_lost="requeue")
    t = cluster.wait_task(t["id"], "running", timeout=10)
    tid, first = t["id"], list(t["nodes"])
    api = cluster.server.api
    for k in (0, 1):
        wait_for(lambda: text(api, tid, rank=k).startswith("first r%d %s " % (k, first[k])), 15, "rank %d" % k)
    agents[first[1]].kill9()
    t = cluster.wait_task(tid, "running", where=lambda t: first[1] not in t["nodes"] and t["retries"] == 1,
                          timeout=NODE_TIMEOUT_S + 20)
    second = list(t["nodes"])
    for k in (0, 1):
        wait_for(lambda: "tick 1 " in text(api, tid, rank=k), 15, "run 2's rank %d" % k)
        cur = text(api, tid, rank=k)
        assert cur.startswith("first r%d %s " % (k, second[k])), (k, cur[:200])
        assert all(ln.split()[-2:-1] == [second[k]] for ln in cur.splitlines()), (k, cur[:400])
        old = text(api, tid, run=1, rank=k)
        assert old.startswith("first r%d %s " % (k, first[k])), (k, old[:200])
        assert old.split()[3] != cur.split()[3], (old[:100], cur[:100])   # another process
    refused(api, tid, "rank", run=2, rank=2)
    assert cluster.cli("cancel", tid).returncode == 0


# ---- local: a preemption on the server's own GPUs -----------------------------

PREEMPT = ("gpus: {backend: sim}\n"
           "scheduler: {preemption: {enabled: true, min_runtime_sec: 0, grace_sec: 0}}\n")


def test_local_preemption_starts_a_new_log_and_follow_goes_on_into_it(daemon_factory):
    d = daemon_factory(PREEMPT)
    t = submit(d, command=["sh", "-c", LOCAL_TICK], tenant_id="bulk", priority=8, preemptible=True, exclusive=True,
               gpu_request=4)
    tid = t["id"]
    wait_for(lambda: "tick 2 local" in text(d.api, tid), 10, "run 1's output")
    first_pid = text(d.api, tid).split()[2]
    f, fout = follower(d, tid)
    time.sleep(0.5)   # the follower is streaming run 1
    urgent = submit(d, tenant_id="prod", priority=0, exclusive=True, gpu_request=4, lease_ttl_s=600)
    assert urgent["state"] == "running", urgent
    got = task(d, tid)
    assert got["state"] == "queued" and got["preempt_count"] == 1, got
    # while it waits, its last run is the one shown
    assert text(d.api, tid).startswith("first local %s\n" % first_pid)
    refused(d.api, tid, "run", run=2)
    assert post(d, "/api/v1/tasks/%d/release" % urgent["id"]).status_code == 200
    wait_for(lambda: task(d, tid)["state"] == "running", 10, "run 2")
    wait_for(lambda: "tick 2 local" in text(d.api, tid), 10, "run 2's output")
    cur = text(d.api, tid)
    assert cur.startswith("first local ") and first_pid not in cur, cur[:300]
    second_pid = cur.split()[2]
    old = text(d.api, tid, run=1)
    assert old.startswith("first local %s\n" % first_pid) and second_pid not in old, old[:300]
    assert task(d, tid)["runs"] == 2 and got["runs"] == 1, got
    # offsets are into the run's own log
    assert text(d.api, tid, run=2, offset=6) == text(d.api, tid, run=2)[6:len(text(d.api, tid, run=2, offset=6)) + 6]
    assert d.cli("cancel", tid).returncode == 0
    rc, out, err = followed(f, fout)
    assert rc == 0, (rc, err)
    marks = MARK.findall(out)
    assert len(marks) == 1 and marks[0][0] == "2" and marks[0][2].startswith("preempted (1 time)"), out[-1500:]
    before, after = out.split(MARK.search(out).group(0) + "\n")
    assert before.startswith("first local %s\n" % first_pid) and second_pid not in before, before[:300]
    assert after.startswith("first local %s\n" % second_pid) and first_pid not in after, after[:300]
    # a follow from run 1, taken up again at an offset (as the CLI does after a break), goes on with the same bytes
    whole = text(d.api, tid, run=1, follow=1)
    assert whole.startswith(before) and MARK.search(whole), whole[-500:]
    cut = len(before) + 10     # inside the line that says run 2 starts
    assert text(d.api, tid, run=1, follow=1, offset=cut) == whole[cut:]


# ---- local: a retry after the task's GPU failed ------------------------------

def fake_nvml():
    build = os.environ.get("GPUPOOL_BUILD") or os.path.join(REPO, "build")
    lib = os.path.join(build, "fakenvml", "libnvidia-ml.so.1")
    if not os.path.exists(lib):
        pytest.skip("fake NVML not built (%s); run make blackbox" % lib)
    return os.path.abspath(lib)


def test_local_retry_after_a_gpu_failure_starts_a_new_log(daemon_factory, tmp_path, monkeypatch):
    lib = fake_nvml()
    script = tmp_path / "fake-nvml.conf"
    # GPU 1 starts failing after a few polls; GPU 0 stays healthy
    script.write_text(
        'gpu name="NVIDIA GeForce RTX 4090" uuid=GPU-4090aaaa-0000-0000-0000-000000000001 mem_total_mb=24564 '
        'mem_used_mb=500 util=5 temp=41 power_mw=30000\n'
        'gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-a100bbbb-0000-0000-0000-000000000002 mem_total_mb=81920 '
        'mem_used_mb=1000 util=37 temp=55 power_mw=210000 fail=memory fail_after=10\n')
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, nvml_library: "%s", poll_ms: 200}\n' % lib)
    hold = submit(d, gpu_model="*4090*", lease_ttl_s=600)     # GPU 0 busy: the task lands on GPU 1
    t = submit(d, command=["sh", "-c", LOCAL_TICK], max_retries=1)
    tid = t["id"]
    assert t["state"] == "running" and t["gpus"][0]["index"] == 1, t
    wait_for(lambda: text(d.api, tid).startswith("first local "), 10, "run 1's output")
    first_pid = text(d.api, tid).split()[2]
    wait_for(lambda: not gpu(d, 1)["healthy"], 15, "GPU 1 to turn unhealthy")
    got = wait_for(lambda: (lambda x: x if x["state"] == "queued" else None)(task(d, tid)), 15,
                   "the task to go back to the queue")
    assert got["retries"] == 1 and got["runs"] == 1, got
    assert post(d, "/api/v1/tasks/%d/release" % hold["id"]).status_code == 200
    wait_for(lambda: task(d, tid)["state"] == "running", 10, "run 2 on GPU 0")
    wait_for(lambda: "tick 1 local" in text(d.api, tid), 10, "run 2's output")
    cur = text(d.api, tid)
    assert cur.startswith("first local ") and first_pid not in cur, cur[:300]
    old = text(d.api, tid, run=1)
    assert old.startswith("first local %s\n" % first_pid) and cur.split()[2] not in old, old[:300]
    assert task(d, tid)["runs"] == 2
    # after a restart the supervisor of run 2 goes on writing run 2's log (its spec names the file)
    n_before = len(cur)
    kill9(d)
    restart(d)
    wait_for(lambda: len(text(d.api, tid)) > n_before + 20, 10, "run 2 to go on writing after the restart")
    assert text(d.api, tid).startswith(cur) and text(d.api, tid, run=1) == old
    assert d.cli("cancel", tid).returncode == 0
    # a follow from run 1 after the end: run 1, the line with why run 2 began, run 2
    whole = text(d.api, tid, run=1, follow=1)
    m = MARK.search(whole)
    assert m and m.group(1) == "2" and m.group(3).startswith("requeued (retry 1 of 1): GPU local:1 failed"), whole
    assert whole.split(m.group(0) + "\n")[1] == text(d.api, tid, run=2)


def test_the_log_cap_is_per_run(daemon_factory):
    d = daemon_factory(PREEMPT + "tasks: {max_log_bytes: 4096}\n")
    burst = ('echo "first local $$"; head -c 6000 /dev/zero | tr "\\0" x; echo; '
             'while :; do echo "tick local $$"; sleep 0.2; done')
    t = submit(d, command=["sh", "-c", burst], tenant_id="bulk", priority=8, preemptible=True, exclusive=True,
               gpu_request=4)
    tid = t["id"]
    wait_for(lambda: "log truncated at 4096 bytes" in text(d.api, tid), 10, "run 1 to reach the cap")
    pid1 = text(d.api, tid).split()[2]
    urgent = submit(d, tenant_id="prod", priority=0, exclusive=True, gpu_request=4, lease_ttl_s=600)
    assert task(d, tid)["preempt_count"] == 1
    assert post(d, "/api/v1/tasks/%d/release" % urgent["id"]).status_code == 200
    wait_for(lambda: task(d, tid)["state"] == "running", 10, "run 2")
    # run 2 has a cap of its own: its first line is there, and it too is cut at 4096 bytes
    wait_for(lambda: "log truncated at 4096 bytes" in text(d.api, tid), 10, "run 2 to reach its cap")
    cur = text(d.api, tid)
    assert cur.startswith("first local ") and pid1 not in cur and len(cur) <= 4096 + 64, (cur[:100], len(cur))
    old = text(d.api, tid, run=1)
    assert old.startswith("first local %s\n" % pid1) and len(old) <= 4096 + 64, (old[:100], len(old))
    assert d.cli("cancel", tid).returncode == 0


def test_log_parameters_are_checked(daemon_factory):
    d = daemon_factory("gpus: {backend: sim}\n")
    hold = submit(d, gpu_request=4, exclusive=True, lease_ttl_s=600)
    t = submit(d, command=["sh", "-c", "echo hi"], gpu_request=1)
    tid = t["id"]
    assert t["state"] == "queued" and t["runs"] == 0, t
    # a task that has not started: its (empty) run 1, nothing else
    assert text(d.api, tid) == "" and text(d.api, tid, run=1) == ""
    assert "no run 2" in refused(d.api, tid, "run", run=2)
    for bad in ("0", "-1", "x", "1x", "99999999999999999999"):
        refused(d.api, tid, "run", run=bad)
    for bad in ("-1", "x", "1024"):
        refused(d.api, tid, "rank", rank=bad)
    refused(d.api, tid, "rank", rank=1)
    r = logs(d.api, hold["id"])
    assert r.status_code == 409, r.text
    assert post(d, "/api/v1/tasks/%d/release" % hold["id"]).status_code == 200
    wait_for(lambda: task(d, tid)["state"] == "succeeded", 10, "the task to run")
    assert text(d.api, tid) == "hi\n" and text(d.api, tid, run=1) == "hi\n" and task(d, tid)["runs"] == 1
    c = d.cli("logs", "--rank", "x", tid)
    assert c.returncode == 2 and "--rank" in c.stderr, (c.returncode, c.stderr)
