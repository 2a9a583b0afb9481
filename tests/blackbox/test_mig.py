"""MIG instances as schedulable devices (issue 25, docs/isolation.md),
through the real loader and the fake libnvidia-ml (mig=... in its script):
a GPU in MIG mode is replaced by its MIG instances, each with its own
index, uuid (MIG-...), memory and profile, isolation "mig"; gpu_model globs
match the profile; a task on one runs with CUDA_VISIBLE_DEVICES=MIG-<uuid>;
two tasks run at once on two instances of one board.  On the server's own
GPUs and on an agent's."""
import os
import re

import requests

from apiutil import pid_alive, reap_supervisors, wait_for
from clusterutil import FIRST_SYNC_S, cluster, server_config
from test_cluster import fake_nvml_lib, ok

assert reap_supervisors and cluster  # fixtures, imported so that they apply here

BOARD = "NVIDIA A100-SXM4-80GB"
SCRIPT = (
    # GPU 0: a whole H100; GPU 1: an A100 split 1g.10gb x2 + 2g.20gb; GPU 2: MIG mode, no instance yet
    'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-%(tag)s-0000-0000-0000-000000000000 mem_total_mb=81559\n'
    'gpu name="%(board)s" uuid=GPU-%(tag)s-1111-0000-0000-000000000000 mem_total_mb=81920 temp=47 '
    'mig=1g.10gb,1g.10gb,2g.20gb procs=env\n'
    'gpu name="%(board)s" uuid=GPU-%(tag)s-2222-0000-0000-000000000000 mem_total_mb=81920 mig=on\n')


def gpus_of(api, node):
    return sorted((g for g in api("GET", "/api/v1/gpus").json()["gpus"] if g["node"] == node),
                  key=lambda g: g["index"])


def test_a_servers_mig_instances_are_devices_of_their_own(daemon_factory, tmp_path, monkeypatch):
    script = tmp_path / "nvml.conf"
    script.write_text(SCRIPT % {"tag": "aaaa1111", "board": BOARD})
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, nvml_library: "%s"}\n' % fake_nvml_lib())
    gl = gpus_of(d.api, "local")
    # the H100 at NVML's index 0; the A100 replaced by its instances, numbered after the 3 GPUs; GPU 2 offers none
    assert [(g["index"], g["uuid"], g["name"], g["profile"], g["memory_total_mb"], g["isolation"]) for g in gl] == [
        (0, "GPU-aaaa1111-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3", None, 81559, "watchdog"),
        (3, "MIG-aaaa1111-0111-0000-0000-000000000000", BOARD + " MIG 1g.10gb", "1g.10gb", 9830, "mig"),
        (4, "MIG-aaaa1111-0211-0000-0000-000000000000", BOARD + " MIG 1g.10gb", "1g.10gb", 9830, "mig"),
        (5, "MIG-aaaa1111-0322-0000-0000-000000000000", BOARD + " MIG 2g.20gb", "2g.20gb", 19660, "mig"),
    ], gl
    assert all(g["healthy"] for g in gl), gl
    mig = gl[1]
    assert mig["util_pct"] is None and mig["power_w"] is None and mig["temp_c"] == 47, mig  # the board's temperature
    log = open(d.log_path).read()
    assert log.count("GPU 2 (GPU-aaaa1111-2222-0000-0000-000000000000) is in MIG mode with no MIG instance") == 1, log

    out = ok(d.cli("gpus"))
    assert "ISOLATION" in out, out
    row = [ln for ln in out.splitlines() if ln.startswith("local:5 ")]
    assert row and BOARD + " MIG 2g.20gb" in row[0] and " mig " in row[0], out

    # a task asking a 1g.10gb by its profile: CUDA sees the instance by its uuid
    r = d.cli("submit", "--gpu-model", "*1g.10gb*", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES")
    tid = int(ok(r).strip())
    t = wait_for(lambda: (lambda x: x if x["state"] == "succeeded" else None)(
        d.api("GET", "/api/v1/tasks/%d" % tid).json()), timeout=15)
    cvd = t["cuda_visible_devices"]
    assert cvd in ("MIG-aaaa1111-0111-0000-0000-000000000000", "MIG-aaaa1111-0211-0000-0000-000000000000"), t
    assert t["gpus"][0]["uuid"] == cvd and t["isolation"] == "mig", t
    assert d.api("GET", "/api/v1/tasks/%d/logs" % tid).text == cvd + "\n"
    assert "mig (MIG instances" in ok(d.cli("status", tid))

    # two 1-GPU tasks at once on the two 1g.10gb instances of one board; a third waits
    pids = []
    for k in range(3):
        marks = tmp_path / ("run%d" % k)
        r = d.api("POST", "/api/v1/tasks", json={
            "command": ["sh", "-c", 'echo "$$ $CUDA_VISIBLE_DEVICES" > %s; exec sleep 60' % marks],
            "gpu_model": "*1g.10gb*"})
        assert r.status_code == 201, r.text
        pids.append((r.json()["id"], marks))
    wait_for(lambda: all(os.path.exists(str(m)) for _, m in pids[:2]), timeout=15)
    seen = [open(str(m)).read().split() for _, m in pids[:2]]
    assert sorted(s[1] for s in seen) == ["MIG-aaaa1111-0111-0000-0000-000000000000",
                                          "MIG-aaaa1111-0211-0000-0000-000000000000"], seen
    assert all(pid_alive(int(s[0])) for s in seen), seen  # both run at once
    third = d.api("GET", "/api/v1/tasks/%d" % pids[2][0]).json()
    assert third["state"] == "queued" and not os.path.exists(str(pids[2][1])), third
    busy = {g["index"]: g["tasks"] for g in gpus_of(d.api, "local")}
    assert busy[3] and busy[4] and not busy[0] and not busy[5], busy
    for tid, _ in pids:
        d.api("POST", "/api/v1/tasks/%d/cancel" % tid)

    # a share of an instance: held to it by the watchdog, which reads the instance's processes
    r = d.api("POST", "/api/v1/tasks", json={"command": ["sh", "-c", "FAKE_NVML_GPU_MB=700 exec sleep 60"],
                                             "gpu_model": "*2g.20gb*", "memory_mb": 4000})
    tid = r.json()["id"]
    t = wait_for(lambda: (lambda x: x if x.get("gpu_memory_used_mb") == 700 else None)(
        d.api("GET", "/api/v1/tasks/%d" % tid).json()), timeout=15)
    assert t["isolation"] == "watchdog" and t["gpus"][0]["index"] == 5, t
    d.api("POST", "/api/v1/tasks/%d/cancel" % tid)


def test_an_agents_mig_instances_are_devices_and_run_tasks(cluster):
    cluster.start_server(server_config().replace("gpus: {backend: none}", "gpus: {backend: none, poll_ms: 200}"))
    script = cluster.tmp / "nvml-mig.conf"
    script.write_text(SCRIPT % {"tag": "bbbb2222", "board": BOARD})
    cluster.agent("mig-a", gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % fake_nvml_lib(),
                  env={"FAKE_NVML_CONFIG": str(script)})
    n = cluster.node("mig-a")
    assert [(g["index"], g["uuid"], g["name"]) for g in n["gpus"]] == [
        (0, "GPU-bbbb2222-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3"),
        (3, "MIG-bbbb2222-0111-0000-0000-000000000000", BOARD + " MIG 1g.10gb"),
        (4, "MIG-bbbb2222-0211-0000-0000-000000000000", BOARD + " MIG 1g.10gb"),
        (5, "MIG-bbbb2222-0322-0000-0000-000000000000", BOARD + " MIG 2g.20gb")], n
    want = [(None, "watchdog"), ("1g.10gb", "mig"), ("1g.10gb", "mig"), ("2g.20gb", "mig")]
    # the whole GPU's says watchdog once the agent's first readings (processes listed) are in
    gl = wait_for(lambda: (lambda x: x if [(g["profile"], g["isolation"]) for g in x] == want else None)(
        gpus_of(cluster.server.api, "mig-a")), timeout=10)
    assert all(g["healthy"] and g["backend"] == "nvml" for g in gl), gl
    t = cluster.submit(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES $GPUPOOL_GPUS"], gpu_model="*2g.20gb")
    t = cluster.wait_task(t["id"], "succeeded")
    assert cluster.logs(t["id"]) == "MIG-bbbb2222-0322-0000-0000-000000000000 mig-a:5\n"
    assert t["isolation"] == "mig" and t["cuda_visible_devices"] == "MIG-bbbb2222-0322-0000-0000-000000000000", t
    # a whole-GPU glob never lands on an instance of the A100
    t = cluster.submit(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], gpu_model="*H100*")
    t = cluster.wait_task(t["id"], "succeeded")
    assert cluster.logs(t["id"]) == "0\n" and t["isolation"] == "none", t


NEW_LAYOUT = (
    # GPU 1 made again as one 3g.40gb; GPU 2 back out of MIG mode
    'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-%(tag)s-0000-0000-0000-000000000000 mem_total_mb=81559\n'
    'gpu name="%(board)s" uuid=GPU-%(tag)s-1111-0000-0000-000000000000 mem_total_mb=81920 mig=3g.40gb\n'
    'gpu name="%(board)s" uuid=GPU-%(tag)s-2222-0000-0000-000000000000 mem_total_mb=81920 mig=off\n')


def layout(gl):
    return [(g["index"], g["uuid"], g["name"], g["memory_total_mb"], g["healthy"]) for g in gl]


def test_a_new_mig_layout_is_seen_when_the_server_restarts(daemon_factory, tmp_path, monkeypatch):
    script = tmp_path / "nvml.conf"
    script.write_text(SCRIPT % {"tag": "cccc3333", "board": BOARD})
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, nvml_library: "%s"}\n' % fake_nvml_lib())
    assert [g[0] for g in layout(gpus_of(d.api, "local"))] == [0, 3, 4, 5]
    # the operator's new layout: nothing changes until the restart
    script.write_text(NEW_LAYOUT % {"tag": "cccc3333", "board": BOARD})
    d.stop()
    d.start()
    assert layout(gpus_of(d.api, "local")) == [
        (0, "GPU-cccc3333-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3", 81559, True),
        (2, "GPU-cccc3333-2222-0000-0000-000000000000", BOARD, 81920, True),
        (3, "MIG-cccc3333-0133-0000-0000-000000000000", BOARD + " MIG 3g.40gb", 39321, True)]
    t = d.api("POST", "/api/v1/tasks", json={"command": ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"],
                                             "gpu_model": "*3g.40gb"}).json()
    t = wait_for(lambda: (lambda x: x if x["state"] == "succeeded" else None)(
        d.api("GET", "/api/v1/tasks/%d" % t["id"]).json()), timeout=15)
    assert d.api("GET", "/api/v1/tasks/%d/logs" % t["id"]).text == "MIG-cccc3333-0133-0000-0000-000000000000\n"


def test_a_new_mig_layout_on_an_agent_is_seen_when_it_joins_again(cluster):
    cluster.start_server()
    script = cluster.tmp / "nvml-layout.conf"
    script.write_text(SCRIPT % {"tag": "dddd4444", "board": BOARD})
    a = cluster.agent("mig-b", gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % fake_nvml_lib(),
                      env={"FAKE_NVML_CONFIG": str(script)})
    assert [g[0] for g in layout(gpus_of(cluster.server.api, "mig-b"))] == [0, 3, 4, 5]
    # the operator's new layout and a restarted agent: a node's GPUs are named when it joins, so what
    # moved (index 3 is another instance now; 4 and 5 are gone) takes no work; GPU 0 goes on
    script.write_text(NEW_LAYOUT % {"tag": "dddd4444", "board": BOARD})
    a.stop()
    a.start()
    health = lambda: [(g["index"], g["healthy"]) for g in gpus_of(cluster.server.api, "mig-b")]  # noqa: E731
    wait_for(lambda: health() == [(0, True), (3, False), (4, False), (5, False)], timeout=FIRST_SYNC_S,
             what="moved GPUs down")
    log = cluster.server.log()
    assert ("node mig-b: GPU 3 is now MIG-dddd4444-0133-0000-0000-000000000000, not "
            "MIG-dddd4444-0111-0000-0000-000000000000") in log, log
    assert "node mig-b: GPU 5 is gone, not MIG-dddd4444-0322-0000-0000-000000000000" in log, log
    q = cluster.submit(["true"], gpu_model="*1g.10gb*")
    t = cluster.submit(["true"], gpu_model="*H100*")
    cluster.wait_task(t["id"], "succeeded")
    assert cluster.task(q["id"])["state"] == "queued"
    cluster.server.api("POST", "/api/v1/tasks/%d/cancel" % q["id"])
    # the node leaves and joins again: its new layout
    ok(cluster.cli("node", "remove", "mig-b"))
    assert a.wait_exit() == 78
    cluster.wait_node("mig-b", "left")
    os.unlink(os.path.join(a.data_dir, "node.json"))  # its revoked credential: it joins with its token
    a.start()
    cluster.wait_node("mig-b", "ready", agent=a)
    want = [(0, "GPU-dddd4444-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3", 81559, True),
            (2, "GPU-dddd4444-2222-0000-0000-000000000000", BOARD, 81920, True),
            (3, "MIG-dddd4444-0133-0000-0000-000000000000", BOARD + " MIG 3g.40gb", 39321, True)]
    box = {}
    try:
        wait_for(lambda: box.update(gl=layout(gpus_of(cluster.server.api, "mig-b"))) or box["gl"] == want,
                 timeout=15, what="the new layout")
    except AssertionError:
        raise AssertionError("the server's view of mig-b: %r\nnode: %r\nserver log:\n%s" % (
            box.get("gl"), cluster.node("mig-b"), cluster.server.log()[-3000:]))
    t = cluster.submit(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], gpu_model="*3g.40gb")
    t = cluster.wait_task(t["id"], "succeeded")
    assert cluster.logs(t["id"]) == "MIG-dddd4444-0133-0000-0000-000000000000\n"
