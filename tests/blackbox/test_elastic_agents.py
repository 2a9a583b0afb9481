"""Elastic tasks on agent nodes (issue 24): an elastic task (elastic
min_gpus..max_gpus) runs on any node.  On an agent's node it starts with its
allocation file (GPUPOOL_ALLOC_FILE) written by the agent, grows onto idle
GPUs of that node, shrinks for a task that waits, and is told each time as on
the server's own GPUs: its agent rewrites the file and sends it SIGUSR1.

What is asserted is what the task's process read from its file when it was
signalled (lines it appended to a file of the test's), beside the server's
view.

Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_elastic_agents.py
"""
import json
import os
import signal
import time

import pytest

from apiutil import reap_supervisors, wait_for  # noqa: F401  (reap_supervisors: autouse)
from conftest import free_port
from clusterutil import TOKEN, agent_post, cluster, now_us, server_config, sim_gpus  # noqa: F401

pytestmark = pytest.mark.e2e

CONFIG = server_config(extra="scheduler: {preemption: {enabled: true, min_runtime_sec: 0}}\n")

# Appends "<event> <CUDA_VISIBLE_DEVICES> <alloc.json>" to OUT at start and on every SIGUSR1.
SCRIPT = ('out="$1"; '
          'trap \'echo "alloc $CUDA_VISIBLE_DEVICES $(tr -d "\\n" < "$GPUPOOL_ALLOC_FILE")" >> "$out"\' USR1; '
          'echo "start $CUDA_VISIBLE_DEVICES $(tr -d "\\n" < "$GPUPOOL_ALLOC_FILE")" >> "$out"; '
          'i=0; while [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done')


def told(path, event=None):
    """The allocations the task read, in order: (event, CUDA_VISIBLE_DEVICES, alloc)."""
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path).read().splitlines():
        ev, cvd, js = line.split(" ", 2)
        if event is None or ev == event:
            out.append((ev, cvd, json.loads(js)))
    return out


def last_n(path, event=None):
    """How many GPUs the task last read (0 before its start)."""
    seen = told(path, event)
    return seen[-1][2]["n_gpus"] if seen else 0


def gpu_set(t):
    return sorted(g["index"] for g in t["gpus"])


def test_an_elastic_task_on_an_agent_grows_shrinks_and_is_told_by_its_agent(cluster, tmp_path):
    cluster.start_server(CONFIG)
    cluster.agent("gpu-a", gpus=sim_gpus(4))
    out = str(tmp_path / "told")
    el = cluster.submit(["sh", "-c", SCRIPT, "sh", out], elastic={"min_gpus": 1, "max_gpus": 4})
    # nothing else waits: it takes the node's four GPUs
    wait_for(lambda: len(cluster.task(el["id"])["gpus"]) == 4, 15, "the elastic task to hold 4 GPUs")
    t = cluster.task(el["id"])
    assert t["state"] == "running" and {g["node"] for g in t["gpus"]} == {"gpu-a"}, t
    start = wait_for(lambda: told(out, "start"), 15, "the task to start on the agent")
    _, cvd, alloc = start[0]
    assert alloc["task_id"] == el["id"] and alloc["min_gpus"] == 1 and alloc["max_gpus"] == 4
    assert alloc["cuda_visible_devices"] == cvd and alloc["n_gpus"] == len(alloc["gpus"]) >= 1
    assert {g["node"] for g in alloc["gpus"]} == {"gpu-a"} and all(g["uuid"] for g in alloc["gpus"])
    # the growth after its start reaches it too
    wait_for(lambda: last_n(out) == 4, 15, "the task to read 4 GPUs")

    # a 2-GPU task: the elastic task gives two GPUs back (nobody is preempted)
    other = cluster.submit(["sleep", "60"], gpu_request=2, exclusive=True)
    cluster.wait_task(other["id"], "running", timeout=15)
    e = cluster.task(el["id"])
    assert e["state"] == "running" and e["preempt_count"] == 0 and len(e["gpus"]) == 2, e
    o = cluster.task(other["id"])
    assert not set(gpu_set(e)) & set(gpu_set(o))
    shrunk = wait_for(lambda: [x for x in told(out, "alloc") if x[2]["n_gpus"] == 2], 15,
                      "the task to be told of its 2 GPUs")
    assert sorted(g["index"] for g in shrunk[-1][2]["gpus"]) == gpu_set(e)
    assert shrunk[-1][2]["cuda_visible_devices"] == ",".join(str(i) for i in gpu_set(e))

    # the other task ends: it grows back, and is told
    assert cluster.server.api("POST", "/api/v1/tasks/%d/cancel" % other["id"]).status_code == 200
    wait_for(lambda: len(cluster.task(el["id"])["gpus"]) == 4, 20, "the elastic task to grow back")
    wait_for(lambda: last_n(out, "alloc") == 4, 15, "the task to be told of 4 GPUs again")
    assert cluster.server.api("POST", "/api/v1/tasks/%d/cancel" % el["id"]).status_code == 200
    cluster.wait_task(el["id"], "cancelled", timeout=15)


def test_an_agent_restarted_under_an_elastic_run_keeps_telling_it(cluster, tmp_path):
    """The agent finds the run's alloc.json at start-up: the run is still
    elastic, reports its GPU set, and a later resize reaches it."""
    cluster.start_server(CONFIG)
    a = cluster.agent("gpu-a", gpus=sim_gpus(4))
    out = str(tmp_path / "told")
    el = cluster.submit(["sh", "-c", SCRIPT, "sh", out], elastic={"min_gpus": 2, "max_gpus": 4})
    wait_for(lambda: last_n(out) == 4, 20, "the task to read 4 GPUs")
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    a.start()
    cluster.wait_node("gpu-a", "ready", agent=a)
    other = cluster.submit(["sleep", "60"], gpu_request=1, exclusive=True)
    cluster.wait_task(other["id"], "running", timeout=15)
    assert len(cluster.task(el["id"])["gpus"]) == 3
    wait_for(lambda: last_n(out, "alloc") == 3, 15, "the task to be told of 3 GPUs")
    assert cluster.task(el["id"])["state"] == "running"


def test_an_agent_that_does_not_apply_resizes_gets_no_elastic_task(cluster, tmp_path):
    """A node whose agent did not say it applies resizes (an older agent)
    takes ordinary work but no elastic task: it could not be told when GPUs
    are taken from it."""
    cluster.start_server(CONFIG)
    gpus = [{"index": i, "uuid": "GPU-old-%d" % i, "name": "Old GPU", "memory_mb": 16000, "healthy": True}
            for i in range(2)]
    st, ans = agent_post(cluster.server.url, "/agent/v1/join",
                         {"name": "old-n", "version": "0.9", "backend": "sim", "machine": "ab" * 32,
                          "seq": now_us(), "gpus": gpus}, TOKEN)
    assert st == 200, ans
    full = {"node": "old-n", "seq": now_us(), "full": True, "runs": [], "gpus": gpus}
    st, ans = agent_post(cluster.server.url, "/agent/v1/sync", full, ans["credential"])
    assert st == 200, ans
    cluster.wait_node("old-n", "ready")
    el = cluster.submit(["sleep", "30"], elastic={"min_gpus": 1, "max_gpus": 2})
    plain = cluster.submit(["sleep", "30"], gpu_request=1, exclusive=True)
    time.sleep(1.5)
    assert cluster.task(plain["id"])["state"] == "running"
    e = cluster.task(el["id"])
    assert e["state"] == "queued" and e["gpus"] == [], e


# A rank of a task elastic in nodes: leaves "<node>.<pid>.start" with what it was told, and
# "<node>.<pid>.end" with the time when it is stopped.
RANK = ('d="$1"; f="$d/$GPUPOOL_NODE.$$"; '
        'echo "$GPUPOOL_NODE_RANK $GPUPOOL_NNODES $CUDA_VISIBLE_DEVICES $(date +%s.%N)" > "$f.start"; '
        'trap \'date +%s.%N > "$f.end"; exit 0\' TERM; '
        'i=0; while [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done')


def ranks(work):
    """{pid: (node, rank, nnodes, ended_at or None)} of every rank process that ran."""
    out = {}
    for name in os.listdir(work):
        if not name.endswith(".start"):
            continue
        node, pid = name[:-len(".start")].rsplit(".", 1)
        rank, nn, _cvd, t0 = open(os.path.join(work, name)).read().split()
        end = os.path.join(work, "%s.%s.end" % (node, pid))
        out[int(pid)] = (node, int(rank), nn, float(t0),
                         float(open(end).read()) if os.path.exists(end) else None)
    return out


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def live_ranks(work):
    return {pid: v for pid, v in ranks(work).items() if alive(pid) and v[4] is None}


def nodes_of(t):
    seen = []
    for g in t["gpus"]:
        if g["node"] not in seen:
            seen.append(g["node"])
    return seen


def test_a_task_elastic_in_nodes_grows_to_its_max_gives_a_node_back_and_takes_it_again(cluster, tmp_path):
    cluster.start_server(CONFIG)
    for name in ("en-a", "en-b", "en-c"):
        cluster.agent(name, gpus=sim_gpus(2))
    work = tmp_path / "work"
    work.mkdir()
    el = cluster.submit(["sh", "-c", RANK, "sh", str(work)], elastic_nodes={"min_nodes": 1, "max_nodes": 3})
    assert el["elastic_nodes"] == {"min_nodes": 1, "max_nodes": 3}, el
    # nothing else waits: one process on each of the three nodes, told MIN:MAX
    live = wait_for(lambda: len(live_ranks(work)) == 3 and live_ranks(work), 20, "three ranks")
    assert sorted(v[0] for v in live.values()) == ["en-a", "en-b", "en-c"]
    assert sorted(v[1] for v in live.values()) == [0, 1, 2] and {v[2] for v in live.values()} == {"1:3"}
    t = cluster.task(el["id"])
    assert len(t["gpus"]) == 6 and t["state"] == "running"
    order = nodes_of(t)
    rank_of = {v[0]: v[1] for v in live.values()}
    assert [rank_of[n] for n in order] == [0, 1, 2], (order, rank_of)

    # a 2-GPU task: the task gives back its last node; that node's rank stops first
    other = cluster.submit(["sh", "-c", "date +%%s.%%N > %s/other-began.txt; sleep 60" % work], gpu_request=2,
                           exclusive=True)
    cluster.wait_task(other["id"], "running", timeout=20)
    t = cluster.task(el["id"])
    assert nodes_of(t) == order[:2] and t["state"] == "running"
    assert cluster.task(other["id"])["gpus"][0]["node"] == order[2]
    started = float(wait_for(lambda: os.path.exists(work / "other-began.txt") and open(work / "other-began.txt").read(),
                             15, "the other task's start"))
    gone = [v for v in ranks(work).values() if v[0] == order[2]]
    assert len(gone) == 1 and gone[0][4] is not None and gone[0][4] <= started, gone
    assert len(live_ranks(work)) == 2

    # it ends: the task takes the node again, with a new process there
    assert cluster.server.api("POST", "/api/v1/tasks/%d/cancel" % other["id"]).status_code == 200
    live = wait_for(lambda: len(live_ranks(work)) == 3 and live_ranks(work), 20, "the third rank again")
    again = [pid for pid, v in live.items() if v[0] == order[2]]
    assert len(again) == 1 and again[0] not in [p for p, v in ranks(work).items() if v[4] is not None]
    time.sleep(1.0)  # the old run's end must not have ended the task
    assert cluster.task(el["id"])["state"] == "running" and len(live_ranks(work)) == 3

    assert cluster.server.api("POST", "/api/v1/tasks/%d/cancel" % el["id"]).status_code == 200
    cluster.wait_task(el["id"], "cancelled", timeout=20)
    wait_for(lambda: not live_ranks(work), 15, "every rank to stop")


def test_elastic_nodes_bad_requests_are_refused(cluster):
    cluster.start_server(CONFIG)
    for body, words in [({"min_nodes": 2, "max_nodes": 1}, "below min_nodes"),
                        ({"max_nodes": 0}, "elastic_nodes.max_nodes"),
                        ({"min_nodes": 1}, "max_nodes: missing"),
                        ({"min_nodes": 1, "max_nodes": 2, "gpus": 3}, "unknown field"),
                        ("1:2", "must be an object")]:
        r = cluster.server.api("POST", "/api/v1/tasks", json={"command": ["true"], "elastic_nodes": body})
        assert r.status_code == 400 and words in r.text, (body, r.text)
    r = cluster.server.api("POST", "/api/v1/tasks", json={"command": ["true"], "gpu_request": 2,
                                                          "elastic_nodes": {"max_nodes": 2}})
    assert r.status_code == 400 and "leave out gpu_request" in r.text, r.text
    r = cluster.server.api("POST", "/api/v1/tasks", json={"elastic_nodes": {"max_nodes": 2}})
    assert r.status_code == 400 and "only for batch tasks" in r.text, r.text
    assert cluster.server.api("GET", "/api/v1/tasks").json()["tasks"] == []


# One torchrun agent per node, elastic over MIN:MAX nodes with c10d's rendezvous at rank 0's
# node; each worker (one per node, gloo on CPU) leaves "world-<node>-<pid>" with its rank and the
# world size it joined, then checks that size with an all_reduce every 0.2 s.  torchrun 1.13 on
# Python 3.11 needs --redirects/--tee of 1 or 2 (its 0 and 3 fail to parse there).  The rendezvous
# port is the test's own free one, not MASTER_PORT (29500 + task id mod 1000): every test server's
# first task has id 1, and another run of this test on the machine would hold 29501.
WORKER = r'''
import os, sys, time
import torch, torch.distributed as dist
out = sys.argv[1]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
with open(os.path.join(out, "world-%s-%d" % (os.environ["GPUPOOL_NODE"], os.getpid())), "w") as f:
    f.write("%d %d %f\n" % (r, w, time.time()))
for _ in range(3000):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert int(t.item()) == w
    time.sleep(0.2)
'''
TORCHRUN = ('exec /usr/bin/torchrun --nnodes="$GPUPOOL_NNODES" --nproc_per_node=1 --rdzv_backend=c10d '
            '--rdzv_endpoint="$MASTER_ADDR:$3" --rdzv_id="task-$GPUPOOL_TASK_ID" '
            '--rdzv_conf=last_call_timeout=1 --max_restarts=20 --monitor_interval=1 --redirects 2 --tee 1 '
            '"$1" "$2"')


def worlds(work):
    """[(joined_at, node, rank, world)] of every worker that joined, oldest first."""
    out = []
    for name in os.listdir(work):
        if name.startswith("world-"):
            node = name.split("-", 1)[1].rsplit("-", 1)[0]
            r, w, at = open(os.path.join(work, name)).read().split()
            out.append((float(at), node, int(r), int(w)))
    return sorted(out)


def latest_group(work, size):
    """The last `size` workers to join, if they form one world of that size with ranks 0..size-1."""
    ws = worlds(work)[-size:]
    if len(ws) == size and all(w[3] == size for w in ws) and sorted(w[2] for w in ws) == list(range(size)):
        return ws
    return None


@pytest.mark.skipif(not os.path.exists("/usr/bin/torchrun"), reason="needs Debian's python3-torch "
                    "(scripts/install-deps.sh test installs it)")
def test_torchrun_elastic_grows_from_one_node_to_two_and_back(cluster, tmp_path):
    cluster.start_server(CONFIG)
    cluster.agent("tr-a", gpus=sim_gpus(1))
    work = tmp_path / "work"
    work.mkdir()
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    el = cluster.submit(["sh", "-c", TORCHRUN, "sh", str(worker), str(work), str(free_port())],
                        elastic_nodes={"min_nodes": 1, "max_nodes": 2})
    # alone on its minimum: a world of one
    g1 = wait_for(lambda: latest_group(work, 1), 60, "a world of one on node tr-a")
    assert g1[0][1] == "tr-a"
    # a second node joins the pool: the task grows onto it and both workers agree on two
    cluster.agent("tr-b", gpus=sim_gpus(1))
    g2 = wait_for(lambda: latest_group(work, 2), 90, "a world of two")
    assert sorted(w[1] for w in g2) == ["tr-a", "tr-b"]
    assert [g["node"] for g in cluster.task(el["id"])["gpus"]] == ["tr-a", "tr-b"]
    # a task needs a GPU: the node is given back; the worker left on tr-a goes on in a world of one
    other = cluster.submit(["sleep", "120"], gpu_request=1, exclusive=True)
    cluster.wait_task(other["id"], "running", timeout=60)
    assert cluster.task(other["id"])["gpus"][0]["node"] == "tr-b"
    g3 = wait_for(lambda: worlds(work)[-1][0] > g2[-1][0] and latest_group(work, 1), 90,
                  "a world of one again after the shrink")
    assert g3[0][1] == "tr-a"
    t = cluster.task(el["id"])
    assert t["state"] == "running" and [g["node"] for g in t["gpus"]] == ["tr-a"], t
    for tid in (other["id"], el["id"]):
        assert cluster.server.api("POST", "/api/v1/tasks/%d/cancel" % tid).status_code == 200
    cluster.wait_task(el["id"], "cancelled", timeout=30)
