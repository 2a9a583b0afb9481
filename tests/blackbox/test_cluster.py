"""Black-box tests of a cluster (issue 15, "many machines"): a real control
plane (`gpupool server` with `gpus: {backend: none}`) and real `gpupool
agent` processes on loopback with simulated GPUs (one with the fake NVML),
tested against what DESIGN.md "Cluster", docs/internals/cluster.md,
docs/api.md (Nodes, Agents), docs/deployment.md ("A cluster: three nodes")
and docs/cli.md promise: joining and its refusals, tasks on nodes (their
environment, logs -f, cancel, exit codes, timeouts, node selectors, run
--node), drain/undrain/remove, node loss and return (stale runs killed,
never twice at once), agent and server kill -9 and restart, multi-node
tasks.  The network partition is in test_cluster_partition.py.

Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build \
     /usr/bin/python3 -m pytest -q tests/blackbox/test_cluster.py
"""
import hashlib
import json
import os
import re
import signal
import time

import pytest
import requests

from apiutil import pid_alive, reap_supervisors, wait_for
from clusterutil import (NODE_TIMEOUT_S, TOKEN, agent_post, assert_no_overlap, cluster, live_tickers, log_has,
                         now_us, runs_from_marks, sim_gpus, ticker_cmd, ticker_pids)
from conftest import REPO

pytestmark = pytest.mark.e2e
assert reap_supervisors and cluster  # fixtures, imported so that they apply here


def ok(r):
    assert r.returncode == 0, (r.args, r.returncode, r.stdout, r.stderr)
    return r.stdout


# ---- joining ------------------------------------------------------------------

def test_join_with_config_token_shows_node_with_gpus_labels_and_heartbeat(cluster):
    s = cluster.start_server()
    before_ms = int(time.time() * 1000)
    a = cluster.agent("gpu-a", gpus=sim_gpus(2, "Sim A100", 40000), labels={"zone": "a", "ib": "yes"})
    log_has(a.log_path, "joined as gpu-a")
    log_has(s.log_path, "node gpu-a joined (2 GPUs")
    n = cluster.node("gpu-a")
    assert n["state"] == "ready"
    assert n["labels"] == {"zone": "a", "ib": "yes", "gpupool/node": "gpu-a"}
    assert n["address"] == "https://127.0.0.1:%d" % a.port
    assert n["gpus_total"] == 2 and n["gpus_busy"] == 0 and n["runs"] == 0
    assert [(g["index"], g["name"], g["memory_mb"], g["healthy"], g["drained"]) for g in n["gpus"]] == \
        [(0, "Sim A100", 40000, True, False), (1, "Sim A100", 40000, True, False)]
    assert n["version"] and n["backend"] == "sim"
    assert n["joined_ms"] >= before_ms - 1000
    # heartbeats keep coming (agent heartbeat_s 1)
    hb1 = n["last_heartbeat_ms"]
    wait_for(lambda: cluster.node("gpu-a")["last_heartbeat_ms"] > hb1, 5, "a newer heartbeat")
    # the node file holds the credential, mode 0600; the token is not in it
    st = os.stat(os.path.join(a.data_dir, "node.json"))
    assert st.st_mode & 0o777 == 0o600
    assert re.fullmatch(r"gpn_[0-9a-f]{64}", a.credential())
    # the control plane has no local GPUs; its GPU list is the node's GPUs
    # the control plane has no local GPUs; its GPU list is the node's GPUs, simulated and saying so
    gl = s.api("GET", "/api/v1/gpus").json()
    assert gl["backend"] == "sim", gl
    assert sorted((g["id"], g["backend"]) for g in gl["gpus"]) == [("gpu-a:0", "sim"), ("gpu-a:1", "sim")]
    assert "backend: sim (simulated GPUs)" in ok(cluster.cli("gpus"))
    # gpupool nodes: a row with the state, GPUs, model, labels, address
    out = ok(cluster.cli("nodes"))
    row = [ln for ln in out.splitlines() if ln.startswith("gpu-a ")]
    assert row, out
    assert re.search(r"\bready\b", row[0]) and "0/2" in row[0] and "Sim A100" in row[0], row
    assert "zone=a" in row[0] and "ib=yes" in row[0] and "gpupool/node" not in row[0], row
    assert "https://127.0.0.1:%d" % a.port in row[0]
    # the agent's own status API
    # (rendered once a second by the agent's loop)
    h = wait_for(lambda: (lambda h: h["server_reachable"] and h)(requests.get(a.status_url() + "/health",
                                                                             timeout=5).json()),
                 5, "the agent's /health saying the server is reachable")
    assert h["node"] == "gpu-a" and h["backend"] == "sim" and h["runs"] == 0, h
    assert a.running()


def test_join_with_created_token_and_refusals(cluster):
    cluster.start_server()
    # a token made with `gpupool join-token create` joins
    r = cluster.cli("join-token", "create")
    tok = ok(r).strip()
    assert re.fullmatch(r"gpj_[0-9a-f]{64}\.[0-9a-f]{64}", tok), r.stdout  # SECRET.CA_HASH
    assert "gpupool agent --server" in r.stderr
    a = cluster.agent("api-node", token=tok)
    assert cluster.node("api-node")["state"] == "ready"
    # ... and is listed, without the token itself
    lst = ok(cluster.cli("join-token", "list"))
    assert tok not in lst and "api" in lst and "config" in lst, lst
    # revoked: no new node joins with it (exit 77); the node that joined stays
    tid = [t["id"] for t in cluster.server.api("GET", "/admin/join-tokens").json()["tokens"]
           if t["source"] == "api"][0]
    assert ok(cluster.cli("join-token", "revoke", tid)).strip() == "%s: revoked" % tid
    b = cluster.agent("revoked-node", token=tok, wait=False)
    assert b.wait_exit() == 77, b.log()
    assert cluster.node("revoked-node") is None
    assert cluster.node("api-node")["state"] == "ready" and a.running()
    # expired (--ttl 1s): refused once the second has passed
    tok2 = ok(cluster.cli("join-token", "create", "--ttl", "1s")).strip()
    time.sleep(1.3)
    c = cluster.agent("late-node", token=tok2, wait=False)
    assert c.wait_exit() == 77, c.log()
    assert cluster.node("late-node") is None
    # a token the server never made: refused
    d = cluster.agent("stranger", token="gpj_" + "0" * 64, wait=False)
    assert d.wait_exit() == 77, d.log()
    assert cluster.node("stranger") is None


def test_wrong_token_cannot_take_over_a_node_and_credentials_are_per_node(cluster):
    s = cluster.start_server()
    a = cluster.agent("gpu-a")
    b = cluster.agent("gpu-b")
    # a second agent under gpu-a's name with a wrong token: it has no credential and cannot join
    imp = cluster.agent("gpu-a", token="gpj_" + "1" * 64, wait=False)
    assert imp.wait_exit() == 77, imp.log()
    assert not os.path.exists(os.path.join(imp.data_dir, "node.json"))
    # a sync with no node credential (the join token, an API-style key, nothing) is 401
    for bearer in (TOKEN, "gpn_" + "0" * 64, ""):
        st, body = agent_post(s.url, "/agent/v1/sync", {"node": "gpu-a", "seq": now_us(), "wait_ms": 0}, bearer)
        assert st == 401, (bearer, st, body)
    assert cluster.node("gpu-a")["state"] == "ready" and a.running()
    # a task runs on one node X; a full sync naming X with the other node's credential and no
    # runs (it would lose X's run if it were taken) is 401 and changes nothing
    t = cluster.submit(ticker_cmd(cluster.tmp / "tb"))
    t = cluster.wait_task(t["id"], "running")
    wait_for(lambda: live_tickers(cluster.tmp / "tb"), 10, "the task's process")  # "running" comes before python
    x = t["nodes"][0]
    other = {"gpu-a": b, "gpu-b": a}[x]
    st, body = agent_post(s.url, "/agent/v1/sync", {"node": x, "seq": now_us() + 10 ** 9, "full": True,
                                                     "wait_ms": 0, "runs": []}, other.credential())
    assert st == 401, body
    assert "error" in body
    time.sleep(0.5)
    t2 = cluster.task(t["id"])
    assert t2["state"] == "running" and t2["retries"] == 0 and t2["nodes"] == [x], t2
    assert cluster.node(x)["state"] == "ready" and a.running() and b.running()
    assert len(live_tickers(cluster.tmp / "tb")) == 1


def test_replayed_sync_is_409_and_changes_nothing(cluster):
    s = cluster.start_server()
    a = cluster.agent("gpu-a")
    t = cluster.submit(ticker_cmd(cluster.tmp / "t"))
    t = cluster.wait_task(t["id"], "running")
    wait_for(lambda: live_tickers(cluster.tmp / "t"), 10, "the task's process")
    # freeze the agent so that the test speaks for the node alone
    a.signal(signal.SIGSTOP)
    try:
        cred = a.credential()
        seq = now_us() + 1000   # above anything the agent sent (it is stopped)
        run = {"task": t["id"], "epoch": 1, "rank": 0, "state": "running"}
        st, body = agent_post(s.url, "/agent/v1/sync", {"node": "gpu-a", "seq": seq, "full": True, "wait_ms": 0,
                                                         "runs": [run]}, cred)
        assert st == 200, body
        assert body["seq"] == seq and not body.get("stop"), body
        # the same seq again, now claiming the run ended with 0: 409, and the task still runs
        ended = dict(run, state="exited", result={"end": "exited", "exit_code": 0, "signal": 0,
                                                  "finished_ms": int(time.time() * 1000),
                                                  "message": "exited with code 0"})
        for sq in (seq, seq - 1):
            st, body = agent_post(s.url, "/agent/v1/sync", {"node": "gpu-a", "seq": sq, "full": True,
                                                             "wait_ms": 0, "runs": [ended]}, cred)
            assert st == 409, (sq, st, body)
            assert "error" in body
        time.sleep(0.3)
        t2 = cluster.task(t["id"])
        assert t2["state"] == "running" and t2["exit_code"] is None, t2
    finally:
        a.signal(signal.SIGCONT)
    # the agent goes on (its seq is wall-clock microseconds; a 409 makes it back off and send full)
    cluster.cli("cancel", t["id"])
    cluster.wait_task(t["id"], "cancelled", timeout=20)
    assert a.running()


# ---- tasks on nodes -------------------------------------------------------------

ENV_CMD = ("echo NODE=$GPUPOOL_NODE; echo CVD=$CUDA_VISIBLE_DEVICES; echo RANK=$GPUPOOL_NODE_RANK; "
           "echo NNODES=$GPUPOOL_NNODES; echo TASK=$GPUPOOL_TASK_ID; echo GPUS=$GPUPOOL_GPUS; "
           "for i in 1 2 3; do echo line$i; sleep 0.3; done; echo bye; exit 7")


def test_task_on_a_node_env_logs_follow_and_exit_code(cluster):
    cluster.start_server()
    a = cluster.agent("gpu-a")
    r = cluster.cli("submit", "--gpus", "2", "--name", "envy", "--", "sh", "-c", ENV_CMD)
    tid = int(ok(r).strip())
    # logs -f streams the remote task to its end and then exits
    f = cluster.cli("logs", "-f", tid, timeout=30)
    assert f.returncode == 0, (f.returncode, f.stderr)
    out = f.stdout
    assert "NODE=gpu-a\n" in out and "RANK=0\n" in out and "NNODES=1\n" in out, out
    assert "TASK=%d\n" % tid in out
    assert "CVD=0,1\n" in out and "GPUS=gpu-a:0,gpu-a:1\n" in out, out
    assert out.index("line1") < out.index("line2") < out.index("line3") < out.index("bye"), out
    t = cluster.wait_task(tid, "failed")
    # an ended task keeps where it ran (sacct's NodeList): its node and GPUs
    assert t["exit_code"] == 7 and t["nodes"] == ["gpu-a"], t
    assert [(g["node"], g["index"]) for g in t["gpus"]] == [("gpu-a", 0), ("gpu-a", 1)], t
    assert "7" in t["reason"], t
    # the server keeps the log (it outlives the node's copy)
    assert cluster.logs(tid) == out
    st = ok(cluster.cli("status", tid))
    assert re.search(r"exit code:\s+7", st), st
    log_has(a.log_path, "run %d.1.0 acked" % tid)
    assert not os.path.exists(os.path.join(a.data_dir, "runs", "%d.1.0" % tid))
    # exit 0 is succeeded
    t0 = cluster.submit(["sh", "-c", "echo fine"])
    t0 = cluster.wait_task(t0["id"], "succeeded")
    assert t0["exit_code"] == 0 and cluster.logs(t0["id"]) == "fine\n"


def test_cancel_and_timeout_end_remote_runs(cluster):
    cluster.start_server()
    cluster.agent("gpu-a")
    d1, d2 = cluster.tmp / "c1", cluster.tmp / "c2"
    t1 = cluster.submit(ticker_cmd(d1))
    t2 = cluster.submit(ticker_cmd(d2), timeout_s=1)
    cluster.wait_task(t1["id"], "running")
    wait_for(lambda: live_tickers(d1), 10, "task 1's process")
    r = cluster.cli("cancel", t1["id"], timeout=30)
    assert ok(r).strip() == "cancelled", (r.stdout, r.stderr)
    t1 = cluster.wait_task(t1["id"], "cancelled")
    pid1 = list(ticker_pids(d1))[0]
    wait_for(lambda: not pid_alive(pid1), 5, "the cancelled run's process to end")
    assert runs_from_marks(d1)[pid1][3], "the run got SIGTERM (its end mark)"
    t2 = cluster.wait_task(t2["id"], "timeout", timeout=15)
    assert t2["reason"] == "timed out after 1 s" and t2["exit_code"] == 143, t2
    assert not live_tickers(d2)
    (first, last, node, ended), = runs_from_marks(d2).values()
    assert ended and node == "gpu-a" and 0.8 <= last - first <= 4, (first, last)


def test_two_agents_share_the_queue(cluster):
    cluster.start_server()
    cluster.agent("gpu-a", gpus=sim_gpus(1))
    cluster.agent("gpu-b", gpus=sim_gpus(1))
    ids = [cluster.submit(["sh", "-c", "echo $GPUPOOL_NODE; sleep 0.8"])["id"] for _ in range(4)]
    # two at a time, one on each node
    wait_for(lambda: sorted(n for i in ids for n in cluster.task(i)["nodes"]) == ["gpu-a", "gpu-b"], 10,
             "one task running on each node")
    q = [cluster.task(i) for i in ids]
    assert sum(t["state"] == "queued" for t in q) == 2, q
    for i in ids:
        cluster.wait_task(i, "succeeded", timeout=20)
    where = sorted(cluster.logs(i).strip() for i in ids)
    assert where == ["gpu-a", "gpu-a", "gpu-b", "gpu-b"], where


def test_node_selector_places_only_on_matching_nodes(cluster):
    cluster.start_server()
    cluster.agent("gpu-a", labels={"zone": "a"})
    cluster.agent("gpu-b", labels={"zone": "b"})
    ids = [int(ok(cluster.cli("submit", "--node-selector", "zone=b", "--", "sh", "-c",
                              "echo $GPUPOOL_NODE; sleep 0.3")).strip()) for _ in range(3)]
    pinned = int(ok(cluster.cli("submit", "--node-selector", "gpupool/node=gpu-a", "--", "sh", "-c",
                                "echo $GPUPOOL_NODE")).strip())
    for i in ids + [pinned]:
        cluster.wait_task(i, "succeeded", timeout=20)
    assert [cluster.logs(i) for i in ids] == ["gpu-b\n"] * 3
    assert cluster.logs(pinned) == "gpu-a\n"
    assert cluster.task(ids[0])["node_selector"] == {"zone": "b"}
    # no node has zone=c: it waits, and says why
    w = int(ok(cluster.cli("submit", "--node-selector", "zone=c", "--", "true")).strip())
    time.sleep(1.0)
    t = cluster.task(w)
    assert t["state"] == "queued", t
    assert t["reason"] and ("zone" in t["reason"] or "selector" in t["reason"] or "label" in t["reason"]), t
    st = ok(cluster.cli("status", w))
    assert "node selector" in st and "zone=c" in st, st


def test_run_node_holds_a_lease_on_that_node(cluster):
    cluster.start_server()
    cluster.agent("gpu-a")
    cluster.agent("gpu-b")
    for node in ("gpu-b", "gpu-a", "gpu-b"):
        r = cluster.cli("run", "--node", node, "--gpus", "2", "--", "sh", "-c",
                        "curl -s $GPUPOOL_API/api/v1/tasks/$GPUPOOL_TASK_ID; echo; echo CVD=$CUDA_VISIBLE_DEVICES",
                        timeout=30)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        first = r.stdout.splitlines()[0]
        t = json.loads(first)
        assert t["kind"] == "lease" and t["state"] == "running", t
        assert t["nodes"] == [node] and {g["node"] for g in t["gpus"]} == {node}, t
        assert t["node_selector"] == {"gpupool/node": node}, t
        assert "CVD=0,1" in r.stdout
        assert cluster.task(t["id"])["state"] == "succeeded"
    # GPUPOOL_NODE in the environment does the same
    r = cluster.cli("run", "--", "sh", "-c", "curl -s $GPUPOOL_API/api/v1/tasks/$GPUPOOL_TASK_ID",
                    env=cluster.server.env(GPUPOOL_NODE="gpu-a"), timeout=30)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["nodes"] == ["gpu-a"]


# ---- drain, undrain, remove ----------------------------------------------------

def test_drain_takes_no_new_work_and_lets_runs_finish_then_undrain(cluster):
    cluster.start_server()
    cluster.agent("gpu-a", gpus=sim_gpus(1))
    cluster.agent("gpu-b", gpus=sim_gpus(1))
    t1 = cluster.submit(ticker_cmd(cluster.tmp / "t1", secs=1.5))
    t1 = cluster.wait_task(t1["id"], "running")
    x = t1["nodes"][0]
    y = {"gpu-a": "gpu-b", "gpu-b": "gpu-a"}[x]
    assert ok(cluster.cli("node", "drain", x)).strip() == "%s: draining" % x
    assert ok(cluster.cli("node", "drain", x)).strip() == "%s: draining" % x   # idempotent
    n = cluster.node(x)
    assert n["state"] == "draining" and all(g["drained"] for g in n["gpus"]), n
    row = [ln for ln in ok(cluster.cli("nodes")).splitlines() if ln.startswith(x + " ")]
    assert row and "draining" in row[0], row
    # new work goes to the other node only; the draining node's run goes on to its end
    t2 = cluster.submit(ticker_cmd(cluster.tmp / "t2"))
    t2 = cluster.wait_task(t2["id"], "running")
    assert t2["nodes"] == [y], t2
    t3 = cluster.submit(["sh", "-c", "echo $GPUPOOL_NODE"])
    t1 = cluster.wait_task(t1["id"], "succeeded", timeout=10)
    assert t1["exit_code"] == 0 and "ticker done" in cluster.logs(t1["id"])
    time.sleep(0.7)
    t3 = cluster.task(t3["id"])
    assert t3["state"] == "queued", t3       # x is idle but draining, y is busy
    assert cluster.node(x)["gpus_busy"] == 0
    # undrain: x takes work again
    assert ok(cluster.cli("node", "undrain", x)).strip() == "%s: ready" % x
    t3 = cluster.wait_task(t3["id"], "succeeded", timeout=10)
    assert cluster.logs(t3["id"]) == x + "\n"
    assert cluster.node(x)["state"] == "ready"
    cluster.cli("cancel", t2["id"])


def test_remove_requeues_runs_revokes_the_credential_and_the_agent_exits_78(cluster):
    s = cluster.start_server()
    agents = {"gpu-a": cluster.agent("gpu-a", gpus=sim_gpus(1)), "gpu-b": cluster.agent("gpu-b", gpus=sim_gpus(1))}
    d = cluster.tmp / "t1"
    t1 = cluster.submit(ticker_cmd(d), max_retries=1)
    t1 = cluster.wait_task(t1["id"], "running")
    x = t1["nodes"][0]
    y = {"gpu-a": "gpu-b", "gpu-b": "gpu-a"}[x]
    ax = agents[x]
    wait_for(lambda: live_tickers(d), 10, "the run on " + x)
    old_pid = live_tickers(d)[0]
    cred = ax.credential()
    r = cluster.cli("node", "remove", x)
    assert r.returncode == 0, r.stderr
    # its run is stopped first; the node leaves once it has ended (never two runs at once)
    assert "draining" in r.stdout, r.stdout
    # the agent learns it was removed, stops its runs and exits 78
    assert ax.wait_exit(timeout=15) == 78, ax.log()
    assert "removed" in ax.log()
    wait_for(lambda: not pid_alive(old_pid), 10, "the removed node's run to be stopped")
    # its task went back to the queue (one retry) and runs on the other node
    t1 = cluster.wait_task(t1["id"], "running", where=lambda t: t["nodes"] == [y], timeout=15)
    assert t1["retries"] == 1, t1
    n = cluster.node(x)
    assert n["state"] == "left", n
    # its GPUs leave the pool: no longer counted, never usable
    m = s.api("GET", "/api/v1/monitor/metrics").json()
    assert m["gpus_usable"] == 1, m
    left = [g for g in s.api("GET", "/api/v1/gpus").json()["gpus"] if g["node"] == x]
    assert all(not g["healthy"] or g["drained"] for g in left), left
    # its credential works no more
    st, body = agent_post(s.url, "/agent/v1/sync", {"node": x, "seq": now_us(), "wait_ms": 0}, cred)
    assert st == 401 and "removed" in json.dumps(body), (st, body)
    # removing it again, removing local, an unknown node: exit 1
    r = cluster.cli("node", "remove", x)
    assert r.returncode == 1 and "conflict" in r.stderr, r.stderr
    r = cluster.cli("node", "remove", "no-such-node")
    assert r.returncode == 1 and "not_found" in r.stderr, r.stderr
    row = [ln for ln in ok(cluster.cli("nodes")).splitlines() if ln.startswith(x + " ")]
    assert row and "left" in row[0], row
    cluster.cli("cancel", t1["id"])
    cluster.wait_task(t1["id"], "cancelled")


def test_removed_node_gpus_leave_the_inventory(cluster):
    # api.md: "its GPUs leave the pool"; cluster.md: "its GPUs leave the inventory"
    s = cluster.start_server()
    cluster.agent("gpu-a", gpus=sim_gpus(1))
    cluster.agent("gpu-b", gpus=sim_gpus(1))
    ok(cluster.cli("node", "remove", "gpu-a"))
    m = s.api("GET", "/api/v1/monitor/metrics").json()
    assert m["gpus_usable"] == 1
    assert [g["id"] for g in s.api("GET", "/api/v1/gpus").json()["gpus"]] == ["gpu-b:0"]
    assert m["gpus_total"] == 1, m


def test_remove_of_a_reachable_node_never_runs_a_task_twice_at_once(cluster):
    # the removed node still answers: its run is stopped (SIGTERM, kill_grace_s) and the
    # task goes back to the queue; it must not start elsewhere while the old run still runs
    cluster.start_server()
    cluster.agent("gpu-a", gpus=sim_gpus(1))
    cluster.agent("gpu-b", gpus=sim_gpus(1))
    d = cluster.tmp / "t"
    t = cluster.submit(ticker_cmd(d, term_delay=1.0), max_retries=1)
    t = cluster.wait_task(t["id"], "running")
    x = t["nodes"][0]
    wait_for(lambda: live_tickers(d), 10, "the run on " + x)
    ok(cluster.cli("node", "remove", x))
    cluster.wait_task(t["id"], "running", where=lambda t: t["nodes"] and t["nodes"][0] != x, timeout=15)
    wait_for(lambda: len(ticker_pids(d)) == 2, 10, "the second run")
    time.sleep(1.5)
    assert_no_overlap(d)
    cluster.cli("cancel", t["id"])


# ---- node loss ------------------------------------------------------------------

def test_lost_node_requeues_or_fails_its_tasks_ends_leases_and_kills_stale_runs_when_back(cluster):
    s = cluster.start_server()
    a = cluster.agent("gpu-a", gpus=sim_gpus(3))
    d1, d2 = cluster.tmp / "retry", cluster.tmp / "noretry"
    # tasks that opted out of fencing (test_cluster_fence.py has the default): they go at node_timeout_s
    t1 = cluster.submit(ticker_cmd(d1), max_retries=1, on_node_lost="requeue")
    t2 = cluster.submit(ticker_cmd(d2), max_retries=0, on_node_lost="requeue")
    r = s.api("POST", "/api/v1/tasks", json={"gpu_request": 1, "lease_ttl_s": 600}, timeout=10)
    assert r.status_code == 201, r.text
    lease = r.json()
    for t in (t1, t2, lease):
        cluster.wait_task(t["id"], "running", where=lambda t: t["nodes"] == ["gpu-a"])
    wait_for(lambda: len(live_tickers(d1)) == 1 and len(live_tickers(d2)) == 1, 10, "both runs")
    p1, p2 = live_tickers(d1)[0], live_tickers(d2)[0]
    a.signal(signal.SIGSTOP)
    stopped = time.time()
    try:
        cluster.wait_node("gpu-a", "lost", timeout=NODE_TIMEOUT_S + 5)
        lost_after = time.time() - stopped
        assert lost_after >= NODE_TIMEOUT_S - 1.5, lost_after
        t1 = cluster.wait_task(t1["id"], "queued", timeout=5)
        assert t1["retries"] == 1 and "gpu-a" in t1["reason"], t1
        t2 = cluster.wait_task(t2["id"], "failed", timeout=5)
        assert "gpu-a" in t2["reason"], t2
        lz = cluster.wait_task(lease["id"], "lost", timeout=5)
        assert "gpu-a" in lz["reason"], lz
        row = [ln for ln in ok(cluster.cli("nodes")).splitlines() if ln.startswith("gpu-a ")]
        assert row and "lost" in row[0], row
        assert "node gpu-a lost" in s.full_log()
        # a cut-off node's runs of tasks that opted out of fencing go on while it is away
        assert pid_alive(p1) and pid_alive(p2)
    finally:
        a.signal(signal.SIGCONT)
    back = time.time()
    # the agent is back: the node is ready, the runs given away are stale and killed
    cluster.wait_node("gpu-a", "ready", timeout=10)
    wait_for(lambda: not pid_alive(p1) and not pid_alive(p2), 10, "the stale runs to be killed")
    log_has(a.log_path, "run %d.1.0 stale: stopping it" % t1["id"])
    # the task that had a retry left starts again there (epoch 2), after the old run ended
    t1 = cluster.wait_task(t1["id"], "running", timeout=10)
    wait_for(lambda: len(ticker_pids(d1)) == 2, 10, "the second run of task %d" % t1["id"])
    runs = assert_no_overlap(d1)
    assert len(runs) == 2 and runs[0][1] <= back + 5, runs
    assert live_tickers(d1) != [p1] and len(live_tickers(d1)) == 1
    assert cluster.task(t2["id"])["state"] == "failed"
    assert cluster.task(lease["id"])["state"] == "lost"
    cluster.cli("cancel", t1["id"])


def test_agent_killed_and_restarted_elsewhere_while_lost_only_one_run_remains(cluster):
    cluster.start_server()
    agents = {"gpu-a": cluster.agent("gpu-a", gpus=sim_gpus(1)), "gpu-b": cluster.agent("gpu-b", gpus=sim_gpus(1))}
    d = cluster.tmp / "t"
    # the run takes 1.5 s to stop after SIGTERM (a checkpoint)
    t = cluster.submit(ticker_cmd(d, term_delay=1.5), max_retries=2, on_node_lost="requeue")
    t = cluster.wait_task(t["id"], "running")
    x = t["nodes"][0]
    y = {"gpu-a": "gpu-b", "gpu-b": "gpu-a"}[x]
    wait_for(lambda: live_tickers(d), 10, "the run on " + x)
    old = live_tickers(d)[0]
    agents[x].kill9()
    assert pid_alive(old), "the run goes on under its supervisor"
    cluster.wait_node(x, "lost", timeout=NODE_TIMEOUT_S + 5)
    t = cluster.wait_task(t["id"], "running", where=lambda t: t["nodes"] == [y], timeout=10)
    assert t["retries"] == 1
    wait_for(lambda: len(ticker_pids(d)) == 2, 10, "the run on " + y)
    # a task for x's GPU, queued while x is away
    d2 = cluster.tmp / "u"
    u = cluster.submit(ticker_cmd(d2, secs=1), node_selector={"gpupool/node": x})
    # x's agent comes back: it finds its old run at start-up and the server has it stopped as stale
    agents[x].start()
    cluster.wait_node(x, "ready", timeout=10)
    log_has(agents[x].log_path, "found at start-up: running, re-attached")
    wait_for(lambda: not pid_alive(old), 10, "the stale run on %s to be killed" % x)
    log_has(agents[x].log_path, "stale: stopping it")
    time.sleep(0.5)
    live = live_tickers(d)
    assert len(live) == 1 and ticker_pids(d)[live[0]][0] == y, (live, ticker_pids(d))
    t = cluster.task(t["id"])
    assert t["state"] == "running" and t["nodes"] == [y] and t["retries"] == 1, t
    # the queued task started on x only once the stale run had let go of its GPU
    u = cluster.wait_task(u["id"], "succeeded", timeout=15)
    stale = runs_from_marks(d)[old]
    (u_run,) = runs_from_marks(d2).values()
    assert stale[3] and u_run[0] >= stale[1], (stale, u_run)
    cluster.cli("cancel", t["id"])


# ---- agent and server restarts ------------------------------------------------------

def test_agent_kill9_and_restart_reattaches_and_the_task_ends_once(cluster):
    cluster.start_server()
    a = cluster.agent("gpu-a")
    d = cluster.tmp / "t"
    t = cluster.submit(ticker_cmd(d, secs=3))
    t = cluster.wait_task(t["id"], "running")
    wait_for(lambda: live_tickers(d), 10, "the run")
    pid = live_tickers(d)[0]
    a.kill9()
    time.sleep(0.5)
    assert pid_alive(pid), "the run goes on under its supervisor"
    assert cluster.task(t["id"])["state"] == "running"
    a.start()       # well within node_timeout_s: the node is never lost
    log_has(a.log_path, "run %d.1.0 found at start-up: running, re-attached" % t["id"])
    t = cluster.wait_task(t["id"], "succeeded", timeout=15)
    assert t["exit_code"] == 0 and t["retries"] == 0, t
    assert list(ticker_pids(d)) == [pid], "it ran once"
    log = cluster.logs(t["id"])
    assert log.startswith("ticker %d on gpu-a rank 0\n" % pid) and log.endswith("ticker done\n"), log
    assert "lost" not in cluster.server.full_log()
    log_has(a.log_path, "run %d.1.0 acked" % t["id"])


def nvml_agent(cluster, name, n=2):
    """An agent on the fake NVML with GPUs whose uuids are its own (GPU-<name>-...)."""
    lib = fake_nvml_lib()
    script = cluster.tmp / ("nvml-%s.conf" % name)
    tag = hashlib.sha256(name.encode()).hexdigest()[:8]
    script.write_text("".join('gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-%s-0000-0000-0000-%012d mem_total_mb=81559\n'
                              % (tag, i) for i in range(n)))
    return cluster.agent(name, gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % lib,
                         env={"FAKE_NVML_CONFIG": str(script)})


def test_server_kill9_and_restart_stops_nothing_and_loses_nothing(cluster):
    s = cluster.start_server()
    nvml_agent(cluster, "gpu-a")
    nvml_agent(cluster, "gpu-b")
    d1, d2 = cluster.tmp / "t1", cluster.tmp / "t2"
    t1 = cluster.submit(ticker_cmd(d1, secs=4))
    t2 = cluster.submit(ticker_cmd(d2, secs=4))
    short = cluster.submit(["sh", "-c", "echo short-start; sleep 1; echo short-end"])
    for t in (t1, t2, short):
        cluster.wait_task(t["id"], "running")
    # acknowledged while every node is partly busy: a whole node is needed, so it waits
    big = cluster.submit(["sh", "-c", "echo big on $GPUPOOL_NODE"], gpu_request=2)
    assert big["state"] == "queued", big
    wait_for(lambda: live_tickers(d1) and live_tickers(d2), 10, "both runs")
    p1, p2 = live_tickers(d1)[0], live_tickers(d2)[0]
    s.kill9()
    time.sleep(1.5)              # the short task ends while the server is down
    assert pid_alive(p1) and pid_alive(p2), "runs go on without the server"
    s.start()
    for a in cluster.agents:
        assert a.running(), a.log()
    t1 = cluster.wait_task(t1["id"], "succeeded", timeout=20)
    t2 = cluster.wait_task(t2["id"], "succeeded", timeout=20)
    short = cluster.wait_task(short["id"], "succeeded", timeout=20)
    assert cluster.logs(short["id"]) == "short-start\nshort-end\n"
    big = cluster.wait_task(big["id"], "succeeded", timeout=20)
    assert cluster.logs(big["id"]).startswith("big on gpu-")
    for t in (t1, t2, short, big):
        assert t["retries"] == 0 and t["exit_code"] == 0, (t["id"], t["reason"], s.full_log()[-3000:])
    assert list(ticker_pids(d1)) == [p1] and list(ticker_pids(d2)) == [p2], "each ran once"
    for n in ("gpu-a", "gpu-b"):
        assert cluster.node(n)["state"] == "ready"
    assert " lost" not in s.full_log(), s.full_log()[-3000:]


def test_server_restart_keeps_remote_tasks_on_sim_gpus_of_several_nodes(cluster):
    # every sim agent's GPU 0 has the uuid SIM-00000000-...: a restart must still put each
    # running task back on its own node's GPU, not requeue it
    s = cluster.start_server()
    cluster.agent("gpu-a", gpus=sim_gpus(1))
    cluster.agent("gpu-b", gpus=sim_gpus(1))
    ts = [cluster.submit(ticker_cmd(cluster.tmp / ("t%d" % i)))["id"] for i in range(2)]
    for i in ts:
        cluster.wait_task(i, "running")
    s.kill9()
    s.start()
    time.sleep(1.5)
    for i in ts:
        t = cluster.task(i)
        assert t["state"] == "running" and t["retries"] == 0, (t, s.full_log()[-2000:])
    for i in range(2):
        assert len(ticker_pids(cluster.tmp / ("t%d" % i))) == 1


# ---- the fake NVML on an agent ---------------------------------------------------------

def fake_nvml_lib():
    build = os.environ.get("GPUPOOL_BUILD") or os.path.join(REPO, "build")
    lib = os.path.join(build, "fakenvml", "libnvidia-ml.so.1")
    if not os.path.exists(lib):
        pytest.skip("fake NVML not built (%s); run make blackbox" % lib)
    return os.path.abspath(lib)


def test_agent_on_nvml_reports_its_gpus_and_runs_tasks_on_them(cluster):
    lib = fake_nvml_lib()
    script = cluster.tmp / "fake-nvml.conf"
    script.write_text(
        'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-11111111-0000-0000-0000-000000000001 mem_total_mb=81559\n'
        'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-11111111-0000-0000-0000-000000000002 mem_total_mb=81559 '
        'mem_used_mb=1200 util=40\n')
    cluster.start_server()
    a = cluster.agent("h100", gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % lib,
                      env={"FAKE_NVML_CONFIG": str(script)})
    n = cluster.node("h100")
    assert n["backend"] == "nvml" and n["gpus_total"] == 2, n
    assert [(g["index"], g["uuid"], g["name"], g["memory_mb"]) for g in n["gpus"]] == [
        (0, "GPU-11111111-0000-0000-0000-000000000001", "NVIDIA H100 80GB HBM3", 81559),
        (1, "GPU-11111111-0000-0000-0000-000000000002", "NVIDIA H100 80GB HBM3", 81559)]
    row = [ln for ln in ok(cluster.cli("nodes")).splitlines() if ln.startswith("h100 ")]
    assert row and "NVIDIA H100 80GB HBM3" in row[0] and "0/2" in row[0], row
    t = cluster.submit(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES $GPUPOOL_GPUS $CUDA_DEVICE_ORDER"],
                       gpu_request=2, gpu_model="*H100*")
    t = cluster.wait_task(t["id"], "succeeded")
    assert cluster.logs(t["id"]) == "0,1 h100:0,h100:1 PCI_BUS_ID\n"
    # a gpu_model no node has can never be placed
    r = cluster.server.api("POST", "/api/v1/tasks", json={"command": ["true"], "gpu_model": "*4090*"})
    assert r.status_code in (201, 422), r.text
    assert a.running()
    # a mixed pool: the real (here fake) NVML GPUs and a simulated node's, each saying which it is
    gl = cluster.server.api("GET", "/api/v1/gpus").json()
    assert gl["backend"] == "nvml" and {g["backend"] for g in gl["gpus"]} == {"nvml"}, gl
    cluster.agent("sim-b", gpus=sim_gpus(1))
    gl = cluster.server.api("GET", "/api/v1/gpus").json()
    assert gl["backend"] == "nvml+sim", gl
    assert {(g["node"], g["backend"]) for g in gl["gpus"]} == {("h100", "nvml"), ("sim-b", "sim")}, gl
    assert "backend: nvml+sim (some GPUs simulated)" in ok(cluster.cli("gpus"))
    # a task says the backend of the GPUs it ran on, not the control plane's "none": one on the
    # simulated node says sim, as every answer about simulated GPUs must
    assert cluster.task(t["id"])["backend"] == "nvml"
    s = cluster.wait_task(cluster.submit(["true"], node_selector={"gpupool/node": "sim-b"})["id"], "succeeded")
    assert s["backend"] == "sim" and "backend:              sim" in ok(cluster.cli("status", str(s["id"])))
    q = cluster.submit(["true"], gpu_model="*A100*")  # no node has one: queued, no GPUs, the server's
    assert cluster.task(q["id"])["backend"] == "none"


def test_server_sigterm_with_agents_connected_exits_cleanly(cluster):
    # agents hold a long-poll sync at the server at almost every moment
    s = cluster.start_server()
    cluster.agent("gpu-a")
    cluster.agent("gpu-b")
    time.sleep(1.2)
    s.proc.send_signal(signal.SIGTERM)
    rc = s.proc.wait(timeout=10)
    log = s.full_log()
    assert "Fatal error" not in log, log[-2000:]
    assert rc == 0, (rc, log[-2000:])


# ---- multi-node tasks (whole nodes, fewest, all or nothing) ----------------------------

RANK_CMD = ("echo rank=$GPUPOOL_NODE_RANK nnodes=$GPUPOOL_NNODES node=$GPUPOOL_NODE master=$MASTER_ADDR:$MASTER_PORT "
            "cvd=$CUDA_VISIBLE_DEVICES >> %s/ranks; sleep 0.5")


def three_nodes(cluster):
    cluster.start_server()
    return {n: cluster.agent(n, gpus=sim_gpus(2)) for n in ("gpu-a", "gpu-b", "gpu-c")}


def test_multinode_task_takes_two_whole_nodes_with_torchrun_variables(cluster):
    three_nodes(cluster)
    d = cluster.tmp / "mn"
    d.mkdir()
    r = cluster.cli("submit", "--gpus", "4", "--", "sh", "-c", RANK_CMD % d)
    tid = int(ok(r).strip())
    t = cluster.wait_task(tid, "running", timeout=10)
    assert len(t["nodes"]) == 2 and len(set(t["nodes"])) == 2, t
    assert len(t["gpus"]) == 4 and {g["node"] for g in t["gpus"]} == set(t["nodes"]), t
    st = ok(cluster.cli("status", tid))
    assert "nodes (by rank)" in st, st
    t = cluster.wait_task(tid, "succeeded", timeout=15)
    lines = sorted(open(d / "ranks").read().splitlines())
    assert len(lines) == 2, lines
    nodes = cluster.nodes()
    rank0 = [ln for ln in lines if ln.startswith("rank=0 ")][0]
    rank1 = [ln for ln in lines if ln.startswith("rank=1 ")][0]
    host0 = rank0.split("node=")[1].split()[0]
    master_host = nodes[host0]["address"].split("//")[1].rsplit(":", 1)[0]
    port = 29500 + tid % 1000
    for ln in (rank0, rank1):
        assert "nnodes=2" in ln and "master=%s:%d" % (master_host, port) in ln and "cvd=0,1" in ln, lines
    assert rank0.split("node=")[1].split()[0] != rank1.split("node=")[1].split()[0]
    assert t["exit_code"] == 0


def test_multinode_one_rank_failing_fails_the_task_and_stops_the_other(cluster):
    three_nodes(cluster)
    d = cluster.tmp / "mn"
    os.makedirs(d)
    # rank 1 fails after 1 s; rank 0 would tick for a minute, and takes 1.5 s to stop after SIGTERM
    cmd = (["sh", "-c", 'if [ "$GPUPOOL_NODE_RANK" = 1 ]; then sleep 1; exit 3; fi; exec "$@"', "sh"] +
           ticker_cmd(d, term_delay=1.5))
    t = cluster.submit(cmd, gpu_request=4)
    t = cluster.wait_task(t["id"], "running", timeout=10)
    rank0 = t["nodes"][0]
    # a task for rank 0's GPUs waits in the queue meanwhile
    d2 = cluster.tmp / "u"
    u = cluster.submit(ticker_cmd(d2, secs=1), gpu_request=2, node_selector={"gpupool/node": rank0})
    t = cluster.wait_task(t["id"], ("failed",), timeout=20)
    assert t["exit_code"] == 3, t
    wait_for(lambda: ticker_pids(d) and not live_tickers(d), 10, "rank 0 to be stopped")
    assert len(ticker_pids(d)) == 1
    # it got them only once rank 0 had let go
    u = cluster.wait_task(u["id"], "succeeded", timeout=15)
    (r0,) = runs_from_marks(d).values()
    (u_run,) = runs_from_marks(d2).values()
    assert r0[3] and u_run[2] == rank0 and u_run[0] >= r0[1], (r0, u_run)


def test_multinode_task_requeued_whole_when_one_node_is_lost(cluster):
    agents = three_nodes(cluster)
    d = cluster.tmp / "mn"
    # a rank takes 1.5 s to stop after SIGTERM (a checkpoint): the second run must not start beside it
    t = cluster.submit(ticker_cmd(d, term_delay=1.5), gpu_request=4, max_retries=1, on_node_lost="requeue")
    t = cluster.wait_task(t["id"], "running", timeout=10)
    first = list(t["nodes"])
    wait_for(lambda: len(live_tickers(d)) == 2, 10, "both ranks")
    # the first run's pids, taken now: the second run may start on first[0] too
    survivor_pid = [p for p, (n, _) in ticker_pids(d).items() if n == first[0]][0]
    gone = first[1]
    agents[gone].kill9()
    cluster.wait_node(gone, "lost", timeout=NODE_TIMEOUT_S + 5)
    # the rank on the surviving node is stopped, and the task runs again on two live nodes
    t = cluster.wait_task(t["id"], "running", where=lambda t: gone not in t["nodes"] and t["retries"] == 1,
                          timeout=15)
    assert len(t["nodes"]) == 2, t
    wait_for(lambda: not pid_alive(survivor_pid), 10, "the surviving rank of the first run to be stopped")
    # (the lost node's run lives on under its supervisor: its agent is gone, not its runs)
    def live_elsewhere():
        return [p for p in live_tickers(d) if ticker_pids(d)[p][0] != gone]
    wait_for(lambda: len(live_elsewhere()) >= 2, 10, "the second run's ranks")
    live_nodes = sorted(ticker_pids(d)[p][0] for p in live_elsewhere())
    assert live_nodes == sorted(t["nodes"]), (live_nodes, t)
    # on the surviving node the second run started only once the first had ended
    runs = runs_from_marks(d)
    old = runs[survivor_pid]
    assert old[3], old
    new = [r for p, r in runs.items() if p != survivor_pid and r[2] == first[0]]
    assert len(new) == 1 and new[0][0] >= old[1], (old, new)
    cluster.cli("cancel", t["id"])
