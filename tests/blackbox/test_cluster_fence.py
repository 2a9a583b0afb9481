"""A task never runs twice at once, partitions included; liveness judged
fairly (issue 22; docs/internals/cluster.md "Fencing").

- A node cut off (ip netns link down), its agent stopped (SIGSTOP) or
  killed (kill -9) for longer than cluster.fence_s: the supervisor of the
  run there stops it, and the server starts the task elsewhere only after
  fence_s + kill grace + 2 s.  A sampler reads the live processes of the
  task every 20 ms, on both nodes (they share this machine), and no sample
  may hold two.
- A partition shorter than fence_s stops nothing, even when the node was
  lost meanwhile: the same process runs on.
- The server stopped (SIGSTOP) longer than node_timeout_s: on SIGCONT no
  node is lost and nothing is requeued.  A restarted server places no work
  on a node whose agent is gone.  A task with on_node_lost: requeue goes at
  node_timeout_s (it may run twice at once).

Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build \
     /usr/bin/python3 -m pytest -q tests/blackbox/test_cluster_fence.py
"""
import json
import signal
import threading
import time

import pytest

from apiutil import pid_alive, reap_supervisors, wait_for
from clusterutil import (Cluster, _require_bin, cluster, live_tickers, log_has, runs_from_marks, server_config,
                         sim_gpus, ticker_cmd, ticker_pids)
from test_cluster_partition import ip, netns

pytestmark = pytest.mark.e2e
assert reap_supervisors and cluster and netns  # fixtures, imported so that they apply here

NODE_TIMEOUT_S = 3
FENCE_S = 4
KILL_GRACE_S = 2
GIVEAWAY_S = FENCE_S + KILL_GRACE_S + 2   # when the server gives a lost node's task away, after its last sync


class Sampler:
    """Counts the live runs of the ticker in d every 20 ms in a thread;
    .most is the largest count seen, .seen every pid seen alive."""

    def __init__(self, d):
        self.d = d
        self.most = 0
        self.seen = set()
        self.when_two = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            live = live_tickers(self.d)
            self.seen.update(live)
            if len(live) > self.most:
                self.most = len(live)
                if len(live) >= 2 and self.when_two is None:
                    self.when_two = (time.time(), live)
            self._stop.wait(0.02)

    def stop(self):
        self._stop.set()
        self._t.join(5)


def fence_server(c, **kw):
    # agents in a namespace are off loopback: they join over https:// with the CA-hash token (c.pinned_token())
    return c.start_server(server_config(node_timeout_s=kw.pop("node_timeout_s", NODE_TIMEOUT_S),
                                        fence_s=kw.pop("fence_s", FENCE_S),
                                        kill_grace_s=kw.pop("kill_grace_s", KILL_GRACE_S)), **kw)


def start_on(c, name, d, **body):
    """Submit a ticker task that lands on node name (the only ready node)."""
    t = c.submit(ticker_cmd(d, term_delay=1), **body)
    t = c.wait_task(t["id"], "running", where=lambda t: t["nodes"] == [name])
    wait_for(lambda: live_tickers(d), 10, "the run on " + name)
    return t, live_tickers(d)[0]


def moved_without_overlap(c, t, d, old, sampler, to, timeout):
    """The task runs on node `to`, its old run ended before the new one began."""
    t = c.wait_task(t["id"], "running", where=lambda t: t["nodes"] == [to], timeout=timeout)
    wait_for(lambda: any(ticker_pids(d)[p][0] == to for p in live_tickers(d)), 10, "the run on " + to)
    time.sleep(0.3)
    sampler.stop()
    assert sampler.most == 1, ("two runs alive at once", sampler.when_two)
    assert not pid_alive(old)
    runs = runs_from_marks(d)
    new = [r for p, r in runs.items() if p != old]
    assert len(new) == 1 and runs[old][3] and runs[old][1] < new[0][0], (runs[old], new)
    return t


@pytest.fixture
def fcluster(tmp_path, netns):
    _require_bin()
    c = Cluster(tmp_path)
    yield c, netns
    c.close()


def test_partition_longer_than_fence_stops_the_run_before_the_task_starts_elsewhere(fcluster):
    c, (ns, v0, root_addr, ns_addr) = fcluster
    s = fence_server(c, listen_host="0.0.0.0")
    a = c.agent("gpu-a", gpus=sim_gpus(1), netns=ns, listen_host=ns_addr,
                server_url="https://%s:%d" % (root_addr, s.port), token=c.pinned_token())
    d = c.tmp / "t"
    t, old = start_on(c, "gpu-a", d, max_retries=2)
    assert t["on_node_lost"] == "fence", t
    c.agent("gpu-b", gpus=sim_gpus(1))
    sampler = Sampler(d)
    ip("link", "set", v0, "down")
    cut = time.time()
    try:
        c.wait_node("gpu-a", "lost", timeout=NODE_TIMEOUT_S + 4)
        # lost, but its task stays where it is until the run there has surely stopped
        assert c.task(t["id"])["nodes"] == ["gpu-a"]
        wait_for(lambda: not pid_alive(old), FENCE_S + KILL_GRACE_S + 3, "the cut-off run to fence itself")
        fenced_after = time.time() - cut
        assert fenced_after >= FENCE_S - 1.5, fenced_after
        t = moved_without_overlap(c, t, d, old, sampler, "gpu-b", timeout=GIVEAWAY_S + 5)
        moved_after = time.time() - cut
        assert moved_after >= GIVEAWAY_S - 1.5, moved_after
        assert t["retries"] == 1 and "fenced" in c.server.full_log()
        log_has(a.log_path, "no answered sync for %d s" % FENCE_S)
    finally:
        ip("link", "set", v0, "up")
    # back: the fenced run is reported and acknowledged; one run remains, on gpu-b
    c.wait_node("gpu-a", "ready", timeout=20)
    log_has(a.log_path, "run %d.1.0 acked" % t["id"], timeout=15)
    log_has(a.log_path, "fenced: its node lost contact with the server")
    t = c.task(t["id"])
    assert t["state"] == "running" and t["nodes"] == ["gpu-b"] and t["retries"] == 1, t
    assert len(live_tickers(d)) == 1
    c.cli("cancel", t["id"])


def test_partition_shorter_than_fence_stops_nothing_even_when_the_node_was_lost(fcluster):
    c, (ns, v0, root_addr, ns_addr) = fcluster
    s = fence_server(c, listen_host="0.0.0.0", fence_s=10)
    c.agent("gpu-a", gpus=sim_gpus(1), netns=ns, listen_host=ns_addr, server_url="https://%s:%d" % (root_addr, s.port),
            token=c.pinned_token())
    d = c.tmp / "t"
    t = c.submit(ticker_cmd(d), max_retries=0, node_selector={"gpupool/node": "gpu-a"})
    t = c.wait_task(t["id"], "running")
    wait_for(lambda: live_tickers(d), 10, "the run on gpu-a")
    old = live_tickers(d)[0]
    ip("link", "set", v0, "down")
    try:
        c.wait_node("gpu-a", "lost", timeout=NODE_TIMEOUT_S + 4)
        time.sleep(2)
        assert pid_alive(old)
    finally:
        ip("link", "set", v0, "up")
    c.wait_node("gpu-a", "ready", timeout=20)
    time.sleep(2)
    assert live_tickers(d) == [old], (live_tickers(d), ticker_pids(d))
    t = c.task(t["id"])
    assert t["state"] == "running" and t["nodes"] == ["gpu-a"] and t["retries"] == 0, t
    c.cli("cancel", t["id"])


def test_node_back_after_its_run_fenced_but_before_the_give_away_requeues_the_task(fcluster):
    """fence_s 4, kill grace 10: the server would give the task away 16 s
    after the last sync; the link is back after 6.5 s, when the run has
    fenced itself: its agent reports the end `fenced` of a run that is still
    current, and the task is requeued (not failed), once."""
    c, (ns, v0, root_addr, ns_addr) = fcluster
    s = fence_server(c, listen_host="0.0.0.0", kill_grace_s=10)
    a = c.agent("gpu-a", gpus=sim_gpus(1), netns=ns, listen_host=ns_addr,
                server_url="https://%s:%d" % (root_addr, s.port), token=c.pinned_token())
    d = c.tmp / "t"
    t, old = start_on(c, "gpu-a", d, max_retries=1)
    sampler = Sampler(d)
    ip("link", "set", v0, "down")
    try:
        c.wait_node("gpu-a", "lost", timeout=NODE_TIMEOUT_S + 4)
        wait_for(lambda: not pid_alive(old), FENCE_S + 3, "the cut-off run to fence itself")
        time.sleep(0.5)
        assert c.task(t["id"])["retries"] == 0
    finally:
        ip("link", "set", v0, "up")
    t = c.wait_task(t["id"], "running", where=lambda t: t["retries"] == 1, timeout=12)
    wait_for(lambda: len(live_tickers(d)) == 1 and live_tickers(d) != [old], 10, "the second run")
    time.sleep(0.3)
    sampler.stop()
    assert sampler.most == 1, sampler.when_two
    log_has(c.server.log_path, "node gpu-a lost contact with the server; its run was fenced")
    runs = runs_from_marks(d)
    new = [r for p, r in runs.items() if p != old]
    assert len(new) == 1 and runs[old][3] and runs[old][1] < new[0][0], (runs[old], new)
    assert "fenced: its node lost contact" in open(a.log_path).read()
    c.cli("cancel", t["id"])


def test_agent_stopped_longer_than_fence_its_supervisor_fences_before_the_task_moves(cluster):
    fence_server(cluster)
    a = cluster.agent("gpu-a", gpus=sim_gpus(1))
    d = cluster.tmp / "t"
    t, old = start_on(cluster, "gpu-a", d, max_retries=1)
    cluster.agent("gpu-b", gpus=sim_gpus(1))
    sampler = Sampler(d)
    a.signal(signal.SIGSTOP)
    try:
        cluster.wait_node("gpu-a", "lost", timeout=NODE_TIMEOUT_S + 4)
        wait_for(lambda: not pid_alive(old), FENCE_S + KILL_GRACE_S + 3, "the supervisor to fence the run")
        moved_without_overlap(cluster, t, d, old, sampler, "gpu-b", timeout=GIVEAWAY_S + 5)
    finally:
        a.signal(signal.SIGCONT)
    cluster.wait_node("gpu-a", "ready", timeout=15)
    log_has(a.log_path, "run %d.1.0 acked" % t["id"], timeout=15)
    assert cluster.task(t["id"])["nodes"] == ["gpu-b"]
    cluster.cli("cancel", t["id"])


def test_agent_killed_its_supervisor_fences_and_a_restarted_agent_reports_the_fenced_run(cluster):
    fence_server(cluster)
    a = cluster.agent("gpu-a", gpus=sim_gpus(1))
    d = cluster.tmp / "t"
    t, old = start_on(cluster, "gpu-a", d, max_retries=1)
    cluster.agent("gpu-b", gpus=sim_gpus(1))
    sampler = Sampler(d)
    a.kill9()
    killed = time.time()
    assert pid_alive(old), "the run goes on under its supervisor for now"
    wait_for(lambda: not pid_alive(old), FENCE_S + KILL_GRACE_S + 3, "the supervisor to fence the run")
    assert time.time() - killed >= FENCE_S - 1.5
    moved_without_overlap(cluster, t, d, old, sampler, "gpu-b", timeout=GIVEAWAY_S + 5)
    a.start()
    cluster.wait_node("gpu-a", "ready", timeout=15)
    log_has(a.log_path, "found at start-up: fenced: its node lost contact with the server")
    log_has(a.log_path, "run %d.1.0 acked" % t["id"], timeout=15)
    cluster.cli("cancel", t["id"])


def test_agent_restarted_within_fence_resumes_and_the_run_goes_on(cluster):
    fence_server(cluster, fence_s=6)
    a = cluster.agent("gpu-a", gpus=sim_gpus(1))
    d = cluster.tmp / "t"
    t, old = start_on(cluster, "gpu-a", d, max_retries=0)
    a.kill9()
    time.sleep(2)
    a.start()
    cluster.wait_node("gpu-a", "ready", timeout=10)
    log_has(a.log_path, "running, re-attached")
    time.sleep(6)   # past the first deadline: the restarted agent moved it on
    assert live_tickers(d) == [old]
    t = cluster.task(t["id"])
    assert t["state"] == "running" and t["retries"] == 0, t
    cluster.cli("cancel", t["id"])


def test_server_stopped_longer_than_node_timeout_loses_no_node_and_requeues_nothing(cluster):
    s = fence_server(cluster, fence_s=12)
    cluster.agent("gpu-a", gpus=sim_gpus(1))
    d = cluster.tmp / "t"
    t, old = start_on(cluster, "gpu-a", d, max_retries=0)
    s.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(NODE_TIMEOUT_S + 4)
    finally:
        s.proc.send_signal(signal.SIGCONT)
    time.sleep(NODE_TIMEOUT_S + 1)
    assert cluster.node("gpu-a")["state"] == "ready"
    log = s.full_log()
    assert "did not run for" in log and " lost" not in log, log[-3000:]
    t = cluster.task(t["id"])
    assert t["state"] == "running" and t["retries"] == 0, t
    assert live_tickers(d) == [old]
    cluster.cli("cancel", t["id"])


def test_restarted_server_places_no_work_on_a_node_whose_agent_is_gone(cluster):
    s = fence_server(cluster)
    a = cluster.agent("gpu-a", gpus=sim_gpus(1))
    a.kill9()
    s.kill9()
    s.start()
    n = cluster.node("gpu-a")
    assert n["state"] == "ready" and n["synced"] is False, n
    d = cluster.tmp / "t"
    t = cluster.submit(ticker_cmd(d))
    time.sleep(3)
    t = cluster.task(t["id"])
    assert t["state"] == "queued" and t["retries"] == 0, t
    assert "1 node not synced since the server started" in t["reason"], t
    assert not ticker_pids(d)
    # its agent comes back: it syncs, and then the task starts there
    a.start()
    cluster.wait_node("gpu-a", "ready", agent=a)
    t = cluster.wait_task(t["id"], "running", timeout=10)
    assert cluster.node("gpu-a")["synced"] is True
    wait_for(lambda: live_tickers(d), 10, "the run on gpu-a")
    cluster.cli("cancel", t["id"])


def test_task_that_opts_out_is_requeued_at_node_timeout(cluster):
    fence_server(cluster, fence_s=20)
    a = cluster.agent("gpu-a", gpus=sim_gpus(1))
    d = cluster.tmp / "t"
    t, old = start_on(cluster, "gpu-a", d, max_retries=1, on_node_lost="requeue")
    assert t["on_node_lost"] == "requeue", t
    cluster.agent("gpu-b", gpus=sim_gpus(1))
    a.signal(signal.SIGSTOP)
    stopped = time.time()
    try:
        t = cluster.wait_task(t["id"], "running", where=lambda t: t["nodes"] == ["gpu-b"],
                              timeout=NODE_TIMEOUT_S + 6)
        assert time.time() - stopped < 20 - 2
        wait_for(lambda: len(live_tickers(d)) == 2, 10, "the second run beside the first")
        assert pid_alive(old)   # as documented: it may run twice at once
    finally:
        a.signal(signal.SIGCONT)
    wait_for(lambda: not pid_alive(old), 15, "the stale run to be stopped when its agent is back")
    cluster.cli("cancel", t["id"])


def test_on_node_lost_takes_fence_or_requeue_only(cluster):
    s = fence_server(cluster)
    for bad in ("never", 1, ""):
        r = s.api("POST", "/api/v1/tasks", json={"command": ["true"], "on_node_lost": bad}, timeout=10)
        assert r.status_code == 400 and "on_node_lost" in r.text, r.text
    r = s.api("POST", "/api/v1/tasks", json={"gpu_request": 1, "on_node_lost": "requeue"}, timeout=10)
    assert r.status_code == 400 and "on_node_lost" in r.text, r.text
    # the CLI's flag
    r = cluster.cli("submit", "--json", "--on-node-lost", "requeue", "--", "true")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert json.loads(r.stdout)["on_node_lost"] == "requeue"
    r = cluster.cli("submit", "--on-node-lost", "twice", "--", "true")
    assert r.returncode == 2 and "fence or requeue" in r.stderr, (r.stdout, r.stderr)
