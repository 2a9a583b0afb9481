"""A network partition between a node and the server (issue 15): the agent
of node gpu-a runs in its own network namespace, joined to the root
namespace by a veth pair (10.213.N.1/30 on the server's side, .2 in the
namespace); the server listens on 0.0.0.0.  Cutting the link past
node_timeout_s makes gpu-a lost and its task is requeued and started on
gpu-b (a loopback agent); restoring it brings gpu-a back, its old run is
stopped as stale and only one run of the task remains.

The task opts out of fencing (on_node_lost: requeue); test_cluster_fence.py
has the default, where the cut-off run stops before the task moves.

Needs root and `ip netns`; skipped (with the reason) otherwise.
Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build \
     /usr/bin/python3 -m pytest -q tests/blackbox/test_cluster_partition.py
"""
import time

import pytest

from apiutil import pid_alive, reap_supervisors, wait_for
from clusterutil import (NODE_TIMEOUT_S, Cluster, _require_bin, live_tickers, log_has, runs_from_marks, sim_gpus,
                         ticker_cmd, ticker_pids)
from netnsutil import ip, veth_netns

pytestmark = pytest.mark.e2e
assert reap_supervisors  # autouse fixture, imported so that it applies here




@pytest.fixture
def netns():
    """(namespace, root-side veth, root address, namespace address), cleaned up at the end."""
    with veth_netns("gpct", 213) as t:
        yield t


@pytest.fixture
def pcluster(tmp_path, netns):
    _require_bin()
    c = Cluster(tmp_path)
    yield c, netns
    c.close()


def test_partitioned_node_is_lost_task_moves_and_the_stale_run_is_stopped_on_return(pcluster):
    cluster, (ns, v0, root_addr, ns_addr) = pcluster
    # the agent in the namespace is off loopback: it joins over https:// with the CA-hash token
    s = cluster.start_server(listen_host="0.0.0.0")
    a = cluster.agent("gpu-a", gpus=sim_gpus(1), netns=ns, listen_host=ns_addr,
                      server_url="https://%s:%d" % (root_addr, s.port), token=cluster.pinned_token())
    assert cluster.node("gpu-a")["address"] == "https://%s:%d" % (ns_addr, a.port)
    d = cluster.tmp / "t"
    t = cluster.submit(ticker_cmd(d), max_retries=2, on_node_lost="requeue")  # test_cluster_fence.py: the default
    t = cluster.wait_task(t["id"], "running", where=lambda t: t["nodes"] == ["gpu-a"])
    cluster.agent("gpu-b", gpus=sim_gpus(1))
    wait_for(lambda: live_tickers(d), 10, "the run on gpu-a")
    old = live_tickers(d)[0]
    # cut the link
    ip("link", "set", v0, "down")
    cut = time.time()
    restored = None
    try:
        cluster.wait_node("gpu-a", "lost", timeout=NODE_TIMEOUT_S + 6)
        assert time.time() - cut >= NODE_TIMEOUT_S - 1.5
        t = cluster.wait_task(t["id"], "running", where=lambda t: t["nodes"] == ["gpu-b"], timeout=10)
        assert t["retries"] == 1, t
        wait_for(lambda: len(ticker_pids(d)) == 2, 10, "the run on gpu-b")
        # the cut-off node's run of a task that opted out of fencing goes on meanwhile
        assert pid_alive(old)
        assert a.running()
    finally:
        ip("link", "set", v0, "up")
        restored = time.time()
    # back: ready again, the old run is stale and stopped; one run remains, on gpu-b
    cluster.wait_node("gpu-a", "ready", timeout=20)
    wait_for(lambda: not pid_alive(old), 15, "the stale run on gpu-a to be stopped")
    log_has(a.log_path, "run %d.1.0 stale: stopping it" % t["id"])
    live = live_tickers(d)
    assert len(live) == 1 and ticker_pids(d)[live[0]][0] == "gpu-b", (live, ticker_pids(d))
    old_run = runs_from_marks(d)[old]
    assert old_run[1] <= time.time(), old_run
    t = cluster.task(t["id"])
    assert t["state"] == "running" and t["nodes"] == ["gpu-b"] and t["retries"] == 1, t
    assert restored is not None
    cluster.cli("cancel", t["id"])
    cluster.wait_task(t["id"], "cancelled")
