"""Where it ran, kept (issue 24): every run of a task (one start: a requeue
after a node or GPU loss and a preemption start the next) keeps, after it
ended, its nodes and GPUs, its start and end, how it ended (succeeded,
failed, cancelled, timeout, lost, preempted, requeued) with why and its
exit code, and its peak GPU memory.  GET /api/v1/tasks/{id}/runs lists a
task's runs (the current one too), GET /api/v1/runs the ended runs of every
task the key may see, newest first, as sacct does; `gpupool status ID`
ends with them, `gpupool history` (alias `acct`) prints them (docs/api.md
"Runs", docs/cli.md `gpupool history`).

What was seen before: a task requeued after a GPU failure or a node loss
showed only the GPUs of its last run; nobody could tell where run 1 ran.

Each run's record is stored in the transaction that ends the run, so a
server restart (kill -9) loses none: every test restarts its server in
between.  Runs on the server's own GPUs (sim with preemption, the fake NVML
with a GPU that fails) and on agents (a node lost: clusterutil.py).

Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build \
     /usr/bin/python3 -m pytest -q tests/blackbox/test_history.py
"""
import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.parse
import uuid

import pytest
import requests

from apiutil import gpu, kill9, post, reap_supervisors, restart, submit, submit_raw, task, wait_for
from clusterutil import NODE_TIMEOUT_S, cluster, server_config, sim_gpus
from conftest import REPO

pytestmark = pytest.mark.e2e
assert reap_supervisors and cluster  # fixtures, imported so that they apply here

PREEMPT = ("gpus: {backend: sim}\n"
           "scheduler: {preemption: {enabled: true, min_runtime_sec: 0, grace_sec: 0}}\n")


def runs(api, tid, **kw):
    r = api("GET", "/api/v1/tasks/%d/runs" % tid, timeout=10, **kw)
    assert r.status_code == 200, (r.status_code, r.text)
    body = r.json()
    assert body["task_id"] == tid, body
    return body["items"]


def history(api, query="", **kw):
    r = api("GET", "/api/v1/runs" + query, timeout=10, **kw)
    assert r.status_code == 200, (r.status_code, r.text)
    return r.json()["items"]


def gpu_ids(run):
    return [g["id"] for g in run["gpus"]]


def refused(api, query, param):
    r = api("GET", "/api/v1/runs" + query, timeout=10)
    assert r.status_code == 400, (query, r.status_code, r.text)
    err = r.json()["error"]
    assert err["code"] == "invalid_request" and err["message"].startswith(param + ":"), err


@pytest.fixture(params=["sqlite", "postgres"])
def store(request):
    """The store's config line: the default SQLite one, or a fresh database on the
    PostgreSQL server of GPUPOOL_TEST_PG_URL (tests/pg/start-pg.sh; skipped without)."""
    if request.param == "sqlite":
        yield ""
        return
    base = os.environ.get("GPUPOOL_TEST_PG_URL")
    if not base or not shutil.which("psql"):
        pytest.skip("GPUPOOL_TEST_PG_URL is not set or psql is missing (tests/pg/start-pg.sh starts a server)")
    name = "gp_hist_%s" % uuid.uuid4().hex[:12]
    subprocess.run(["psql", base, "-v", "ON_ERROR_STOP=1", "-qc", "CREATE DATABASE %s" % name],
                   check=True, capture_output=True, timeout=60)
    u = urllib.parse.urlsplit(base)
    yield 'store: {url: "%s://%s/%s%s"}\n' % (u.scheme, u.netloc, name, "?" + u.query if u.query else "")
    subprocess.run(["psql", base, "-qc", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name],
                   capture_output=True, timeout=60)


# ---- the server's own GPUs: a preemption ------------------------------------

def test_a_preempted_task_keeps_both_runs_where_and_how_they_ended_across_a_restart(daemon_factory, store):
    d = daemon_factory(PREEMPT + store)
    t = submit(d, command=["sh", "-c", "sleep 60"], tenant_id="bulk", priority=8, preemptible=True, exclusive=True,
               gpu_request=4, name="trainer")
    tid = t["id"]
    assert t["state"] == "running"
    first = runs(d.api, tid)
    assert [(r["run"], r["state"], r["ended_ms"]) for r in first] == [(1, "running", None)], first
    assert gpu_ids(first[0]) == ["local:0", "local:1", "local:2", "local:3"], first
    urgent = submit(d, tenant_id="prod", priority=0, exclusive=True, gpu_request=4, lease_ttl_s=600)
    assert urgent["state"] == "running", urgent
    got = task(d, tid)
    assert got["state"] == "queued" and got["preempt_count"] == 1 and got["runs"] == 1, got
    # the ended run: where, when, how
    r1 = runs(d.api, tid)
    assert len(r1) == 1 and r1[0]["state"] == "preempted" and r1[0]["run"] == 1, r1
    assert gpu_ids(r1[0]) == ["local:0", "local:1", "local:2", "local:3"] and r1[0]["nodes"] == ["local"], r1
    assert all(g["uuid"].startswith("SIM-") for g in r1[0]["gpus"]), r1
    assert r1[0]["started_at"] == t["started_at"] and r1[0]["ended_ms"] >= r1[0]["started_ms"], (r1, t)
    assert r1[0]["ended_at"].startswith(time.strftime("%Y-", time.gmtime())) and r1[0]["ended_at"].endswith("Z"), r1
    assert r1[0]["exit_code"] is None and "more urgent task" in r1[0]["reason"], r1
    assert r1[0]["tenant"] == "bulk" and r1[0]["name"] == "trainer", r1
    # nothing is lost by a kill -9 of the server
    kill9(d)
    restart(d)
    assert runs(d.api, tid) == r1
    assert post(d, "/api/v1/tasks/%d/release" % urgent["id"]).status_code == 200
    wait_for(lambda: task(d, tid)["state"] == "running", 10, "run 2")
    two = runs(d.api, tid)
    assert [(r["run"], r["state"]) for r in two] == [(1, "preempted"), (2, "running")], two
    assert d.cli("cancel", tid).returncode == 0
    wait_for(lambda: task(d, tid)["state"] == "cancelled", 15, "the cancel")
    kill9(d)
    restart(d)
    done = runs(d.api, tid)
    assert [(r["run"], r["state"]) for r in done] == [(1, "preempted"), (2, "cancelled")], done
    assert done[0] == r1[0] and done[1]["started_ms"] > r1[0]["ended_ms"] - 1, done
    assert gpu_ids(done[1]) == ["local:0", "local:1", "local:2", "local:3"] and done[1]["ended_ms"], done
    # every task's ended runs, newest first: the lease's one run too
    every = history(d.api)
    assert [(r["task_id"], r["run"], r["state"]) for r in every] == \
        [(tid, 2, "cancelled"), (urgent["id"], 1, "succeeded"), (tid, 1, "preempted")], every
    assert [(r["task_id"], r["run"]) for r in history(d.api, "?state=preempted")] == [(tid, 1)]
    assert [r["task_id"] for r in history(d.api, "?tenant=prod")] == [urgent["id"]]
    assert history(d.api, "?since=%d" % (done[1]["ended_ms"] + 1)) == []
    assert [(r["task_id"], r["run"]) for r in history(d.api, "?until=%d" % r1[0]["ended_ms"])] == []
    assert [(r["task_id"], r["run"]) for r in history(d.api, "?until=%d" % (r1[0]["ended_ms"] + 1))] == [(tid, 1)]
    page = d.api("GET", "/api/v1/runs?limit=2", timeout=10).json()
    assert len(page["items"]) == 2 and page["next_before"], page
    rest = history(d.api, "?before=%d" % page["next_before"])
    assert [(r["task_id"], r["run"]) for r in rest] == [(tid, 1)], rest
    # the CLI: status ends with one line per run; history / acct as sacct
    st = d.cli("status", tid)
    assert st.returncode == 0, st.stderr
    lines = st.stdout.split("run history:\n", 1)[1].splitlines()
    assert lines[0].split()[:3] == ["RUN", "STATE", "EXIT"], st.stdout
    assert lines[1].split()[:2] == ["1", "preempted"] and "local:0,local:1,local:2,local:3" in lines[1], lines
    # (a cancel that finds the run's supervisor not started yet ends it with no exit code: "-")
    code = done[1]["exit_code"]
    assert lines[2].split()[:3] == ["2", "cancelled", "-" if code is None else str(code)], lines
    h = d.cli("history")
    assert h.returncode == 0, h.stderr
    rows = [line.split() for line in h.stdout.splitlines()]
    assert rows[0][:5] == ["JOBID", "NAME", "USER", "TENANT", "STATE"], h.stdout
    assert [r[0] for r in rows[1:]] == ["%d.2" % tid, "%d.1" % urgent["id"], "%d.1" % tid], h.stdout
    assert rows[3][1:2] == ["trainer"] and "preempted" in rows[3], rows
    a = d.cli("acct", "-s", "preempted", "-S", "now-1h", "--json")
    assert a.returncode == 0, a.stderr
    assert [(r["task_id"], r["run"]) for r in json.loads(a.stdout)["items"]] == [(tid, 1)]
    assert d.cli("history", "-S", "now+1h").returncode == 2
    assert d.cli("history", "--state", "running").returncode == 2
    assert "no runs" in d.cli("history", "-E", "1971-01-01").stdout


def test_run_parameters_are_checked(daemon_factory):
    d = daemon_factory("gpus: {backend: sim}\n")
    for q, param in (("?limit=0", "limit"), ("?limit=1001", "limit"), ("?limit=x", "limit"), ("?since=-1", "since"),
                     ("?since=1x", "since"), ("?until=abc", "until"), ("?before=0", "before"),
                     ("?state=running", "state"), ("?state=", "state"), ("?user=%0a", "user"),
                     ("?tenant=" + "t" * 80, "tenant")):
        refused(d.api, q, param)
    assert d.api("GET", "/api/v1/tasks/999/runs", timeout=10).status_code == 404
    t = submit(d, command=["sh", "-c", "exit 3"])
    wait_for(lambda: task(d, t["id"])["state"] == "failed", 10, "the task to fail")
    one = runs(d.api, t["id"])
    assert [(r["run"], r["state"], r["exit_code"]) for r in one] == [(1, "failed", 3)], one
    # a task that never ran has no runs
    hold = submit(d, gpu_request=4, exclusive=True, lease_ttl_s=600)
    q = submit(d, command=["true"], gpu_request=1)
    assert q["state"] == "queued"
    assert d.cli("cancel", q["id"]).returncode == 0
    assert runs(d.api, q["id"]) == []
    assert [r["task_id"] for r in history(d.api)] == [t["id"]]
    assert "run history: none yet" in d.cli("status", q["id"]).stdout
    assert post(d, "/api/v1/tasks/%d/release" % hold["id"]).status_code == 200


# ---- a job array: its elements' runs by array id and index ---------------------

def test_a_job_arrays_runs_name_each_element_as_ps_does_across_a_restart(daemon_factory, store):
    """An element of a job array is shown as ARRAY_INDEX (12_3) by ps, status and
    cancel; its runs keep that id, so that history names it the same (sacct's
    array job ids), after a kill -9 too."""
    d = daemon_factory("gpus: {backend: sim}\n" + store)
    r = submit_raw(d, {"command": ["true"], "array": "0-2", "name": "sweep"})
    assert r.status_code == 201, r.text
    aid = r.json()["array_id"]
    solo = submit(d, command=["true"], name="solo")
    ids = [t["id"] for t in d.api("GET", "/api/v1/tasks?array=%d" % aid, timeout=10).json()["tasks"]]
    assert len(ids) == 3, ids
    for tid in ids + [solo["id"]]:
        wait_for(lambda: task(d, tid)["state"] == "succeeded", 10, "the tasks to end")
    kill9(d)
    restart(d)
    got = {x["task_id"]: x for x in history(d.api)}
    assert sorted(got) == sorted(ids + [solo["id"]]), got
    assert sorted((got[t]["array_id"], got[t]["array_index"]) for t in ids) == [(aid, 0), (aid, 1), (aid, 2)], got
    assert got[solo["id"]]["array_id"] is None and got[solo["id"]]["array_index"] is None, got
    # a task's own runs say it too
    mine = runs(d.api, ids[1])
    assert [(x["array_id"], x["array_index"]) for x in mine] == [(aid, task(d, ids[1])["array_index"])], mine
    out = d.cli("history").stdout
    rows = {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
    assert rows == {"%d_%d.1" % (aid, i) for i in range(3)} | {"%d.1" % solo["id"]}, out
    # sacct -j: the array (whose id is its first element's), one element, a plain task
    def jobs(*args):
        p = d.cli("history", *args)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        return sorted(line.split()[0] for line in p.stdout.splitlines()[1:] if line.strip())
    assert jobs("-j", aid) == ["%d_%d.1" % (aid, i) for i in range(3)]
    assert jobs("--jobs", "%d_2" % aid) == ["%d_2.1" % aid]
    assert jobs("-j", solo["id"]) == ["%d.1" % solo["id"]]
    assert d.cli("history", "-j", "%d_7" % aid).stdout == "no runs\n"
    assert [x["task_id"] for x in history(d.api, "?job=%d_1" % aid)] == [got_id for got_id in ids
                                                                         if got[got_id]["array_index"] == 1]
    for bad in ("0", "x", "%d_" % aid, "_1", "1_-1", "1_10000000", "9" * 20):
        refused(d.api, "?job=" + bad, "job")


# ---- tenants: another tenant's runs are not there ---------------------------

ADMIN, KEY_A, KEY_B = "hist-admin", "hist-key-a", "hist-key-b"


def h(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def test_a_tenant_sees_its_own_runs_only(daemon_factory):
    d = daemon_factory("gpus: {backend: sim}\n"
                       "auth: {admin_keys: [\"%s\"]}\n"
                       "tenants:\n"
                       "  - {id: team-a, keys: [\"%s\"]}\n"
                       "  - {id: team-b, keys: [\"%s\"]}\n" % (h(ADMIN), h(KEY_A), h(KEY_B)), key=ADMIN)

    def api_as(key):
        return lambda method, path, **kw: d.api(method, path, headers={"Authorization": "Bearer " + key}, **kw)

    ids = {}
    for who, key in (("a", KEY_A), ("b", KEY_B)):
        r = api_as(key)("POST", "/api/v1/tasks", json={"command": ["true"], "name": "job-" + who}, timeout=10)
        assert r.status_code == 201, r.text
        ids[who] = r.json()["id"]
    admin = api_as(ADMIN)
    for tid in ids.values():
        wait_for(lambda: admin("GET", "/api/v1/tasks/%d" % tid).json()["state"] == "succeeded", 10, "the tasks")
    a = api_as(KEY_A)
    assert [r["task_id"] for r in runs(a, ids["a"])] == [ids["a"]]
    r = a("GET", "/api/v1/tasks/%d/runs" % ids["b"], timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    assert [x["task_id"] for x in history(a)] == [ids["a"]]
    assert a("GET", "/api/v1/runs?tenant=team-b", timeout=10).status_code == 404
    assert "team-b" not in a("GET", "/api/v1/runs?limit=1000", timeout=10).text
    assert sorted(x["task_id"] for x in history(admin)) == sorted(ids.values())
    assert [x["task_id"] for x in history(admin, "?tenant=team-b")] == [ids["b"]]
    assert d.api("GET", "/api/v1/runs", timeout=10).status_code == 401


# ---- the server's own GPUs: a GPU fails, the task runs again ------------------

def fake_nvml():
    build = os.environ.get("GPUPOOL_BUILD") or os.path.join(REPO, "build")
    lib = os.path.join(build, "fakenvml", "libnvidia-ml.so.1")
    if not os.path.exists(lib):
        pytest.skip("fake NVML not built (%s); run make blackbox" % lib)
    return os.path.abspath(lib)


def test_a_retry_after_a_gpu_failure_keeps_the_failed_gpu_and_each_runs_peak_memory(daemon_factory, tmp_path,
                                                                                    monkeypatch):
    lib = fake_nvml()
    script = tmp_path / "fake-nvml.conf"
    # GPU 1 starts failing after a few polls; GPU 0 stays healthy; both list processes (FAKE_NVML_GPU_MB)
    script.write_text(
        'gpu name="NVIDIA GeForce RTX 4090" uuid=GPU-4090aaaa-0000-0000-0000-000000000001 mem_total_mb=24564 '
        'procs=env\n'
        'gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-a100bbbb-0000-0000-0000-000000000002 mem_total_mb=81920 '
        'procs=env fail=memory fail_after=15\n')
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, nvml_library: "%s", poll_ms: 200}\n' % lib)
    hold = submit(d, gpu_model="*4090*", lease_ttl_s=600)     # GPU 0 busy: the task lands on GPU 1
    mark = tmp_path / "ran-once"
    cmd = ('if [ -e %s ]; then FAKE_NVML_GPU_MB=300 exec sleep 2; fi; touch %s; FAKE_NVML_GPU_MB=700 exec sleep 60'
           % (mark, mark))
    t = submit(d, command=["sh", "-c", cmd], max_retries=1)
    tid = t["id"]
    assert t["state"] == "running" and t["gpus"][0]["index"] == 1, t
    wait_for(lambda: task(d, tid)["gpu_memory_peak_mb"] == 700, 10, "run 1's GPU memory to be seen")
    wait_for(lambda: not gpu(d, 1)["healthy"], 15, "GPU 1 to turn unhealthy")
    wait_for(lambda: task(d, tid)["state"] == "queued", 15, "the task to go back to the queue")
    one = runs(d.api, tid)
    assert len(one) == 1 and one[0]["state"] == "requeued", one
    assert gpu_ids(one[0]) == ["local:1"] and one[0]["gpus"][0]["uuid"] == "GPU-a100bbbb-0000-0000-0000-000000000002"
    assert "GPU local:1" in one[0]["reason"] and one[0]["gpu_memory_peak_mb"] == 700, one
    assert post(d, "/api/v1/tasks/%d/release" % hold["id"]).status_code == 200
    wait_for(lambda: task(d, tid)["state"] == "succeeded", 20, "run 2 on GPU 0 to succeed")
    both = runs(d.api, tid)
    assert [(r["run"], r["state"], r["exit_code"]) for r in both] == [(1, "requeued", None), (2, "succeeded", 0)]
    assert gpu_ids(both[1]) == ["local:0"], both
    # each run's own peak: run 2 used 300 MiB, not run 1's 700
    assert both[1]["gpu_memory_peak_mb"] == 300, both
    # a restart (the fake GPU 1 is healthy again in a new server: nothing runs any more) loses nothing
    kill9(d)
    restart(d)
    assert runs(d.api, tid) == both
    h = d.cli("history", "-s", "requeued")
    assert h.returncode == 0 and "%d.1" % tid in h.stdout and "local:1" in h.stdout and "700M" in h.stdout, h.stdout


# ---- agents: a node is lost, the task runs again elsewhere ------------------

H100 = 'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-%s-0000-0000-0000-%012d mem_total_mb=81559 procs=env\n'
# each process started after the export "uses" 600 MiB on every GPU it sees on gpu-a, 250 on gpu-b (the fake
# NVML reads a process's environment as it was at exec: procs=env)
TICK = ('if [ "$GPUPOOL_NODE" = gpu-a ]; then export FAKE_NVML_GPU_MB=600; else export FAKE_NVML_GPU_MB=250; fi; '
        'echo "first $GPUPOOL_NODE"; while :; do sleep 0.2; done')


def nvml_agent(cluster, name, tag):
    conf = cluster.tmp / ("nvml-%s.conf" % name)
    conf.write_text("".join(H100 % (tag, i) for i in range(2)))
    return cluster.agent(name, gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % fake_nvml(),
                         env={"FAKE_NVML_CONFIG": str(conf)})


def test_a_task_requeued_after_a_node_loss_keeps_the_lost_nodes_run_and_its_peak(cluster):
    cluster.start_server(server_config().replace("gpus: {backend: none}", "gpus: {backend: none, poll_ms: 200}"))
    a = nvml_agent(cluster, "gpu-a", "aaaaaaaa")
    t = cluster.submit(["sh", "-c", TICK], gpu_request=2, max_retries=1, on_node_lost="requeue")
    tid = t["id"]
    api = cluster.server.api
    cluster.wait_task(tid, "running", where=lambda x: x["nodes"] == ["gpu-a"], timeout=15)
    # its sleeps (one at a time; the sh itself was started without the variable): 600 MiB on each GPU, 1200
    wait_for(lambda: task(cluster.server, tid)["gpu_memory_peak_mb"] == 1200, 15, "run 1's GPU memory on gpu-a")
    nvml_agent(cluster, "gpu-b", "bbbbbbbb")
    a.kill9()
    cluster.wait_node("gpu-a", "lost", timeout=NODE_TIMEOUT_S + 5)
    cluster.wait_task(tid, "running", where=lambda x: x["nodes"] == ["gpu-b"] and x["retries"] == 1, timeout=15)
    got = runs(api, tid)
    assert [(r["run"], r["state"]) for r in got] == [(1, "requeued"), (2, "running")], got
    assert got[0]["nodes"] == ["gpu-a"] and gpu_ids(got[0]) == ["gpu-a:0", "gpu-a:1"], got
    assert [g["uuid"] for g in got[0]["gpus"]] == ["GPU-aaaaaaaa-0000-0000-0000-%012d" % i for i in range(2)], got
    assert "gpu-a" in got[0]["reason"] and got[0]["gpu_memory_peak_mb"] == 1200, got
    assert got[1]["nodes"] == ["gpu-b"], got
    # run 2's own peak, from zero: 250 on each GPU, never run 1's 1200
    wait_for(lambda: runs(api, tid)[1]["gpu_memory_peak_mb"] == 500, 15, "run 2's GPU memory on gpu-b")
    cluster.server.kill9()
    cluster.server.start()
    assert runs(api, tid)[0] == got[0]
    # after the restart the server counts run 2's peak again from its next reading
    wait_for(lambda: runs(api, tid)[1]["gpu_memory_peak_mb"] == 500, 15, "run 2's GPU memory after the restart")
    assert cluster.cli("cancel", tid).returncode == 0
    cluster.wait_task(tid, "cancelled", timeout=20)
    done = runs(api, tid)
    assert [(r["run"], r["state"]) for r in done] == [(1, "requeued"), (2, "cancelled")], done
    assert done[1]["nodes"] == ["gpu-b"] and gpu_ids(done[1]) == ["gpu-b:0", "gpu-b:1"], done
    assert done[1]["gpu_memory_peak_mb"] == 500, done
    h = cluster.cli("history")
    assert h.returncode == 0, h.stderr
    assert [line.split()[0] for line in h.stdout.splitlines()[1:]] == ["%d.2" % tid, "%d.1" % tid], h.stdout
    assert "gpu-a:0,gpu-a:1" in h.stdout and "gpu-b:0,gpu-b:1" in h.stdout and "1200M" in h.stdout, h.stdout
