"""Issue 22: one identity per node, no message locks a node out, and limits
that hold at scale (docs/internals/cluster.md "Identity and credentials",
"Limits").  Real server, real agents (--sim-nodes for the big ones) on
loopback; raw agent messages with agent_post where a test speaks for a
machine that is not there.
"""
import json
import os
import signal
import subprocess
import time

import pytest

from apiutil import wait_for
from clusterutil import (TOKEN, agent_post, cluster, live_tickers, now_us, server_config,  # noqa: F401
                         sim_gpus, ticker_cmd)
from conftest import free_port, gpupool_bin, log_tail

pytestmark = pytest.mark.e2e

MACHINE_A = "a" * 64
MACHINE_B = "b" * 64


def join_body(name, seq, machine=MACHINE_A, gpus=None, labels=None):
    if gpus is None:
        gpus = [{"index": 0, "uuid": "GPU-%s-0" % name, "name": "Forged GPU", "memory_mb": 16000, "healthy": True}]
    return {"name": name, "version": "test", "address": "", "backend": "sim", "machine": machine, "seq": seq,
            "labels": labels or {}, "gpus": gpus}


def cred_of(agent):
    """The agent's credential (its node.json is written just after the server says ready)."""
    path = os.path.join(agent.data_dir, "node.json")
    wait_for(lambda: os.path.exists(path), 10, "the agent's node.json")
    return agent.credential()


def sync_ok(url, name, cred):
    st, body = agent_post(url, "/agent/v1/sync", {"node": name, "seq": now_us(), "full": True, "wait_ms": 0,
                                                  "runs": []}, cred)
    return st, body


class SimAgent:
    """`gpupool agent --sim-nodes N`: N nodes BASE-0000.. in one process."""

    def __init__(self, tmp_path, url, base, n, gpus, heartbeat_s=1):
        self.dir = tmp_path / ("sim-" + base)
        self.dir.mkdir()
        self.config_path = str(self.dir / "agent.yaml")
        with open(self.config_path, "w") as f:
            f.write(gpus + "agent: {heartbeat_s: %d}\n" % heartbeat_s)
        self.log_path = str(self.dir / "agent.log")
        self.port = free_port()
        self.argv = [gpupool_bin(), "agent", "--server", url, "--token", TOKEN, "--config", self.config_path,
                     "--name", base, "--sim-nodes", str(n), "--listen", "127.0.0.1:%d" % self.port,
                     "--data-dir", str(self.dir / "data")]
        self.proc = None

    def start(self):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    def health(self):
        import requests
        return requests.get("http://127.0.0.1:%d/health" % self.port, timeout=5).json()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None

    def log(self):
        return log_tail(self.log_path)


@pytest.fixture
def sims():
    started = []
    yield started
    for a in started:
        a.stop()


def start_sim(cluster, sims, base, n, gpus=None):
    a = SimAgent(cluster.tmp, cluster.server.url, base, n, gpus or sim_gpus(1)).start()
    sims.append(a)
    return a


def tasks(cluster, **q):
    out, after = [], 0
    while True:
        r = cluster.server.api("GET", "/api/v1/tasks", params=dict(q, limit=1000, after_id=after), timeout=30)
        assert r.status_code == 200, r.text
        page = r.json()
        items = page["tasks"] if isinstance(page, dict) else page
        out += items
        if len(items) < 1000:
            return out
        after = items[-1]["id"]


# ---- one identity per node -----------------------------------------------------------------------

def test_join_under_a_live_name_is_refused_and_the_first_agent_keeps_its_one_run(cluster):
    cluster.start_server()
    a = cluster.agent("gpu-a")
    t = cluster.submit(ticker_cmd(cluster.tmp / "t"))
    cluster.wait_task(t["id"], "running")
    wait_for(lambda: len(live_tickers(cluster.tmp / "t")) == 1, 10, "the task's process")
    # a second machine (its own data dir, so its own machine key) under the same name
    b = cluster.agent("gpu-a", wait=False)
    wait_for(lambda: "is live" in b.log(), 10, "the refusal in the second agent's log")
    assert "gpupool node remove gpu-a" in b.log(), b.log()
    time.sleep(2.5)     # the first agent syncs on; the second keeps being refused
    assert a.running() and b.running(), (a.log(), b.log())
    assert not os.path.exists(os.path.join(b.data_dir, "node.json"))
    assert cluster.node("gpu-a")["state"] == "ready"
    t2 = cluster.task(t["id"])
    assert t2["state"] == "running" and t2["retries"] == 0, t2
    assert len(live_tickers(cluster.tmp / "t")) == 1
    st, _ = sync_ok(cluster.server.url, "gpu-a", cred_of(a))
    assert st in (200, 409)     # the first agent's credential still works (409: its own seq raced ahead)


def test_replayed_join_changes_nothing_and_only_the_same_machine_rejoins_a_live_node(cluster):
    s = cluster.start_server()
    seq = now_us()
    body = join_body("forged", seq)
    st, ans = agent_post(s.url, "/agent/v1/join", body, TOKEN)
    assert st == 200, ans
    cred = ans["credential"]
    assert ans["max_body"] == 1 << 20, ans
    assert sync_ok(s.url, "forged", cred)[0] == 200
    # the same request again: 409, no new credential, the first still works
    st, ans = agent_post(s.url, "/agent/v1/join", body, TOKEN)
    assert st == 409 and "replayed join" in ans["error"] and "credential" not in ans, ans
    assert ans["seq"] == seq, ans      # the node's join seq: a real agent's next join goes above it
    assert sync_ok(s.url, "forged", cred)[0] == 200
    # another machine with a fresh seq while the node is live: refused, naming the way to replace it
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("forged", now_us(), MACHINE_B), TOKEN)
    assert st == 409 and "gpupool node remove forged" in ans["error"] and "/admin/nodes/forged/remove" in ans["error"]
    assert sync_ok(s.url, "forged", cred)[0] == 200
    # a join without seq or machine (an older agent) is 400
    for drop in ("seq", "machine"):
        b2 = join_body("forged", now_us())
        del b2[drop]
        st, ans = agent_post(s.url, "/agent/v1/join", b2, TOKEN)
        assert st == 400, (drop, ans)
    # the same machine again (its node.json lost): a new credential, the old one stops working
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("forged", now_us()), TOKEN)
    assert st == 200, ans
    assert sync_ok(s.url, "forged", ans["credential"])[0] == 200
    assert sync_ok(s.url, "forged", cred)[0] == 401
    # removed: another machine may take the name, with a fresh join
    r = s.api("POST", "/admin/nodes/forged/remove", timeout=10)
    assert r.status_code == 200, r.text
    cluster.wait_node("forged", "left")
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("forged", now_us(), MACHINE_B), TOKEN)
    assert st == 200, ans


def test_agent_restarted_keeps_its_identity_and_a_fresh_data_dir_waits_for_lost(cluster):
    cluster.start_server()
    a = cluster.agent("gpu-a")
    key = open(os.path.join(a.data_dir, "machine-key")).read()
    # the server marks the node ready when it answers the join; the agent writes node.json after that
    wait_for(lambda: os.path.exists(os.path.join(a.data_dir, "node.json")), 10, "node.json")
    a.kill9()
    a.start()           # same data dir: node.json and machine-key kept, no join
    cluster.wait_node("gpu-a", "ready", agent=a)
    assert open(os.path.join(a.data_dir, "machine-key")).read() == key
    # node.json removed, machine-key kept: the same machine joins again while the node is live
    a.kill9()
    os.unlink(os.path.join(a.data_dir, "node.json"))
    a.start()
    wait_for(lambda: os.path.exists(os.path.join(a.data_dir, "node.json")), 10, "a new node.json")
    cluster.wait_node("gpu-a", "ready", agent=a)
    assert "is live" not in a.log()


# ---- seq: never locked out -----------------------------------------------------------------------

def test_forged_huge_seq_does_not_lock_out_the_real_agent(cluster):
    s = cluster.start_server()
    a = cluster.agent("gpu-a")
    cred = cred_of(a)
    for seq in (2 ** 63 - 1, now_us() + 2 * 3600 * 10 ** 6):
        st, body = agent_post(s.url, "/agent/v1/sync", {"node": "gpu-a", "seq": seq, "wait_ms": 0}, cred)
        assert st == 400 and "ahead" in body["error"], (seq, st, body)
    # a seq 50 minutes ahead is taken (clocks drift); the real agent is told the last seq and goes on above it
    st, body = agent_post(s.url, "/agent/v1/sync", {"node": "gpu-a", "seq": now_us() + 50 * 60 * 10 ** 6,
                                                     "wait_ms": 0}, cred)
    assert st == 200, body
    hb = cluster.node("gpu-a")["last_heartbeat_ms"]
    wait_for(lambda: cluster.node("gpu-a")["last_heartbeat_ms"] > hb + 1500, 10, "the real agent syncing again")
    t = cluster.submit(["true"])
    cluster.wait_task(t["id"], "succeeded", timeout=20)
    assert cluster.node("gpu-a")["state"] == "ready" and a.running()


def test_replayed_sync_is_refused_after_a_server_restart(cluster):
    s = cluster.start_server()
    a = cluster.agent("gpu-a")
    t = cluster.submit(ticker_cmd(cluster.tmp / "t"))
    t = cluster.wait_task(t["id"], "running")
    a.signal(signal.SIGSTOP)
    try:
        cred = cred_of(a)
        seq = now_us() + 1000
        run = {"task": t["id"], "epoch": 1, "rank": 0, "state": "running"}
        st, body = agent_post(s.url, "/agent/v1/sync", {"node": "gpu-a", "seq": seq, "full": True, "wait_ms": 0,
                                                         "runs": [run]}, cred)
        assert st == 200, body
        s.kill9()
        s.start()
        ended = dict(run, state="exited", result={"end": "exited", "exit_code": 0, "signal": 0,
                                                  "finished_ms": int(time.time() * 1000), "message": "forged"})
        for sq in (seq, seq + 1):  # the message itself, and one a replayer could make up from it
            st, body = agent_post(s.url, "/agent/v1/sync", {"node": "gpu-a", "seq": sq, "full": True,
                                                             "wait_ms": 0, "runs": [ended]}, cred)
            assert st == 409 and body["seq"] >= seq + 1, (sq, st, body)
    finally:
        a.signal(signal.SIGCONT)
    # the real agent resynchronises and its run goes on
    hb = cluster.node("gpu-a")["last_heartbeat_ms"]
    wait_for(lambda: cluster.node("gpu-a")["last_heartbeat_ms"] > hb + 1500, 15, "the real agent syncing again")
    t2 = cluster.task(t["id"])
    assert t2["state"] == "running" and t2["retries"] == 0, t2
    assert len(live_tickers(cluster.tmp / "t")) == 1


# ---- bounded, never broken, by size -------------------------------------------------------------

def array_counts(cluster, aid):
    r = cluster.server.api("GET", "/api/v1/arrays/%d" % aid, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["counts"]


def test_more_than_4096_runs_on_one_node_all_start_a_full_sync_loses_none_and_all_stop(cluster, sims):
    # one simulated node with one big GPU; 4,200 small tasks share it
    s = cluster.start_server(server_config(extra="scheduler: {max_array_size: 10000}\n"))
    a = start_sim(cluster, sims, "big", 1, sim_gpus(1, name="Sim GPU 640G", memory_mb=640000))
    cluster.wait_node("big-0000", "ready")
    n = 4200
    r = s.api("POST", "/api/v1/tasks", json={"command": ["sleep", "3600"], "array": "0-%d" % (n - 1),
                                              "memory_mb": 100}, timeout=60)
    assert r.status_code == 201, r.text
    aid = r.json()["array_id"]
    wait_for(lambda: array_counts(cluster, aid)["running"] == n, 60, "all %d running" % n, interval=0.5)
    wait_for(lambda: a.health()["runs"] == n, 30, "the agent holding all %d runs" % n, interval=0.5)
    # a server restart: the agent's full sync (in pages) lists every run; none is lost or started again
    s.kill9()
    s.start()
    # the agent's first sync is refused (the stored seq floor), then its full sync goes in pages
    # (a 409 with the floor: the agent goes on above it at once)
    wait_for(lambda: "going on above it" in a.log() and "synced with" in a.log().rsplit("going on above it", 1)[-1],
             30, "the agent syncing with the restarted server", interval=0.2)
    time.sleep(3)       # its last page, and then some heartbeats
    c = array_counts(cluster, aid)
    assert c["running"] == n and c["queued"] == 0 and c["lost"] == 0, c
    assert a.health()["runs"] == n
    assert "lost its run" not in s.log() and "lost its run" not in s.full_log()
    assert cluster.node("big-0000")["state"] == "ready"
    # 4,200 stops for one node (paged too): every run stops, every task ends cancelled
    r = s.api("POST", "/api/v1/arrays/%d/cancel" % aid, timeout=60)
    assert r.status_code == 200, r.text
    wait_for(lambda: array_counts(cluster, aid)["cancelled"] == n, 60, "all %d cancelled" % n, interval=0.5)
    wait_for(lambda: a.health()["runs"] == 0, 30, "the agent holding no run", interval=0.5)


def test_small_max_body_with_a_chatty_task_keeps_syncing(cluster):
    cluster.start_server(server_config(extra="server: {max_body_bytes: 65536}\n"))
    a = cluster.agent("gpu-a")
    # 2 MiB of output as fast as the task can write it, then a clean end
    cmd = ["/usr/bin/python3", "-c", "import sys\nfor i in range(16384): sys.stdout.write('%0127d\\n' % i)\n"]
    t = cluster.submit(cmd)
    t = cluster.wait_task(t["id"], "succeeded", timeout=60)
    assert t["exit_code"] == 0, t
    wait_for(lambda: len(cluster.logs(t["id"])) == 16384 * 128, 30, "the whole output at the server",
             interval=0.5)
    assert cluster.node("gpu-a")["state"] == "ready" and a.running()
    # the agent logs a refused sync as "answered a sync with 413: ..." (a bare "413" can be part of a
    # port number in its start-up line)
    assert "answered a sync with 413" not in a.log(), a.log()


def test_gpu_models_are_bounded_at_join_and_freed_by_removal(cluster):
    s = cluster.start_server()

    def gpus(name, models, per=1):
        return [{"index": i, "uuid": "GPU-%s-%d" % (name, i), "name": models[i // per], "memory_mb": 16000,
                 "healthy": True} for i in range(len(models) * per)]

    # 64 GPU names on one node: refused, nothing enters the pool
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("many", now_us(), gpus=gpus(
        "many", ["Model %d" % i for i in range(64)])), TOKEN)
    assert st == 409 and "GPU models on one node" in ans["error"], ans
    assert cluster.node("many") is None
    # eight nodes of eight models each fill the scheduler's 64-model table
    for k in range(8):
        st, ans = agent_post(s.url, "/agent/v1/join", join_body("m%d" % k, now_us(), gpus=gpus(
            "m%d" % k, ["Model %d" % (8 * k + i) for i in range(8)])), TOKEN)
        assert st == 200, (k, ans)
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("late", now_us(), gpus=gpus("late", ["New model"])),
                         TOKEN)
    assert st == 409 and "64 GPU models" in ans["error"], ans
    # a node of a known model still joins
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("same", now_us(), gpus=gpus("same", ["Model 3"])), TOKEN)
    assert st == 200, ans
    # removing a node frees its models
    r = s.api("POST", "/admin/nodes/m7/remove", timeout=10)
    assert r.status_code == 200, r.text
    cluster.wait_node("m7", "left")
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("late", now_us(), gpus=gpus("late", ["New model"])),
                         TOKEN)
    assert st == 200, ans
    wait_for(lambda: cluster.node("late")["gpus"][0]["name"] == "New model", 5, "the new model's GPU in the pool")
    t = cluster.submit(["true"], gpu_model="New model")
    t = cluster.wait_task(t["id"], ("running", "succeeded"), timeout=10)
    assert t["nodes"] == ["late"] or t["gpus"] == [] or t["gpus"][0]["node"] == "late", t


def test_32_labels_are_held_and_gpupool_keys_refused(cluster):
    cluster.start_server()
    labels = {"k%02d" % i: "v%02d" % i for i in range(32)}
    cluster.agent("gpu-a", labels=labels)
    cluster.agent("gpu-b")
    n = cluster.node("gpu-a")
    assert len(n["labels"]) == 33 and n["labels"]["gpupool/node"] == "gpu-a", n["labels"]
    # the 32nd label places work there (the scheduler holds all of them)
    for sel in ({"k31": "v31"}, {"k00": "v00", "k31": "v31"}, {"gpupool/node": "gpu-a"}):
        t = cluster.submit(["sleep", "30"], node_selector=sel)
        t = cluster.wait_task(t["id"], "running", timeout=15)
        assert t["nodes"] == ["gpu-a"], (sel, t)
        cluster.cli("cancel", t["id"])
    # a label under gpupool/ is refused at join with a clear error
    st, ans = agent_post(cluster.server.url, "/agent/v1/join",
                         join_body("sneaky", now_us(), labels={"gpupool/node": "gpu-a"}), TOKEN)
    assert st == 400 and "gpupool/" in ans["error"], ans
    assert cluster.node("sneaky") is None
    b = cluster.agent("gpu-c", labels={"gpupool/zone": "x"}, wait=False)
    assert b.wait_exit() == 1, b.log()
    assert "gpupool/" in b.log()


def test_gpu_uuids_are_unique_in_the_pool(cluster, sims):
    s = cluster.start_server()
    cluster.agent("gpu-a")
    cluster.agent("gpu-b")
    start_sim(cluster, sims, "sim", 3, sim_gpus(2))
    for k in range(3):
        cluster.wait_node("sim-%04d" % k, "ready")
    uuids = [g["uuid"] for n in cluster.nodes().values() for g in n["gpus"]]
    assert len(uuids) == 2 + 2 + 3 * 2 and len(set(uuids)) == len(uuids), uuids
    # stable: the same uuids after the agent restarts
    a_uuids = [g["uuid"] for g in cluster.node("gpu-a")["gpus"]]
    assert a_uuids == ["SIM-gpu-a-0", "SIM-gpu-a-1"], a_uuids
    # a join naming another node's GPU is refused, and so is one that names a GPU twice
    taken = dict(index=0, uuid="SIM-gpu-a-1", name="Forged GPU", memory_mb=16000, healthy=True)
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("thief", now_us(), gpus=[taken]), TOKEN)
    assert st == 409 and "gpu-a" in ans["error"] and "SIM-gpu-a-1" in ans["error"], ans
    twice = [dict(taken, uuid="X-1"), dict(taken, index=1, uuid="X-1")]
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("twice", now_us(), gpus=twice), TOKEN)
    assert st == 400 and "same uuid" in ans["error"], ans
    assert cluster.node("thief") is None and cluster.node("twice") is None
    # once gpu-a is removed its uuids are free
    r = s.api("POST", "/admin/nodes/gpu-a/remove", timeout=10)
    assert r.status_code == 200, r.text
    cluster.wait_node("gpu-a", "left", timeout=20)
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("thief", now_us(), gpus=[taken]), TOKEN)
    assert st == 200, ans


def test_removed_nodes_free_their_slots_at_5000(cluster, sims):
    # every simulated node keeps a held sync open: room for 5,000 connections from loopback
    s = cluster.start_server(server_config(node_timeout_s=30, extra="server: {max_connections: 12000, "
                                                                     "max_connections_per_ip: 12000}\n"))
    t0 = time.monotonic()
    a = start_sim(cluster, sims, "n", 5000, sim_gpus(1))
    wait_for(lambda: sum(1 for n in cluster.nodes().values() if n["state"] == "ready") == 5000, 120,
             "5,000 nodes ready", interval=1)
    joined_s = time.monotonic() - t0
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("extra", now_us()), TOKEN)
    assert st == 409 and "most nodes" in ans["error"], ans
    a.stop()
    for k in range(3):
        r = s.api("POST", "/admin/nodes/n-%04d/remove" % k, timeout=10)
        assert r.status_code == 200, r.text
        cluster.wait_node("n-%04d" % k, "left")
    for k in range(3):
        st, ans = agent_post(s.url, "/agent/v1/join", join_body("extra%d" % k, now_us()), TOKEN)
        assert st == 200, (k, ans)
    st, ans = agent_post(s.url, "/agent/v1/join", join_body("extra9", now_us()), TOKEN)
    assert st == 409 and "most nodes" in ans["error"], ans
    print("5,000 nodes joined in %.1f s" % joined_s)
