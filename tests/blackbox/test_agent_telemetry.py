"""Agents' GPUs as first-class as the server's (issue 24, telemetry): every
node's GPU readings, sampled on the agent from NVML (the fake libnvidia-ml
that the real loader opens) at the server's gpus.poll_ms, reach
/api/v1/gpus, /api/v1/nodes, `gpupool gpus`, `gpupool nodes` and /metrics
with a node label; a change that matters arrives at once, a lost node's
readings are not shown, a bad reading is refused."""
import os
import re
import signal
import subprocess
import time

import requests

from apiutil import kill9, restart, reap_supervisors, wait_for
from clusterutil import agent_post, cluster, now_us, server_config, sim_gpus
from test_cluster import fake_nvml_lib

assert reap_supervisors and cluster  # fixtures, imported so that they apply here

H100 = 'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-%s-0000-0000-0000-%012d mem_total_mb=81559 %s\n'


def config(node_timeout_s=10, extra=""):
    return server_config(node_timeout_s=node_timeout_s, extra=extra).replace(
        "gpus: {backend: none}", "gpus: {backend: none, poll_ms: 200}")


def script(cluster, name, lines, live=True):
    p = cluster.tmp / ("nvml-%s.conf" % name)
    text = ("live\n" if live else "") + "".join(lines)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, p)  # the agent never reads half a file
    return p


def nvml_agent(cluster, name, lines, **kw):
    p = script(cluster, name, lines)
    return cluster.agent(name, gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % fake_nvml_lib(),
                         env={"FAKE_NVML_CONFIG": str(p)}, **kw)


def gpus_of(cluster, node):
    r = cluster.server.api("GET", "/api/v1/gpus")
    assert r.status_code == 200, r.text
    return {g["index"]: g for g in r.json()["gpus"] if g["node"] == node}


def wait_gpu(cluster, node, index, pred, timeout=15):
    box = {}

    def check():
        box["g"] = gpus_of(cluster, node).get(index)
        return box["g"] is not None and pred(box["g"])
    assert wait_for(check, timeout=timeout), box.get("g")
    return box["g"]


def metric(text, name, **labels):
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name):line.index("}") + 1]))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_agent_gpu_readings_reach_api_cli_nodes_and_metrics(cluster):
    cluster.start_server(config())
    nvml_agent(cluster, "tel-a", [
        H100 % ("aaaaaaaa", 0, "mem_used_mb=1000 util=37 temp=55 power_mw=210000 sm_clock=1755 ecc_corrected=3"),
        H100 % ("aaaaaaaa", 1, "util=0 temp=31 power_mw=70000")])
    nvml_agent(cluster, "tel-b", [H100 % ("bbbbbbbb", 0, "mem_used_mb=20480 util=88 temp=71 power_mw=650000")])

    g = wait_gpu(cluster, "tel-a", 0, lambda g: g["util_pct"] is not None)
    assert (g["util_pct"], g["temp_c"], g["memory_used_mb"], g["power_w"]) == (37, 55, 1000, 210.0), g
    assert g["backend"] == "nvml" and g["healthy"] is True
    g1 = wait_gpu(cluster, "tel-a", 1, lambda g: g["util_pct"] is not None)
    assert (g1["util_pct"], g1["temp_c"], g1["power_w"]) == (0, 31, 70.0), g1
    gb = wait_gpu(cluster, "tel-b", 0, lambda g: g["util_pct"] is not None)
    assert (gb["util_pct"], gb["temp_c"], gb["memory_used_mb"], gb["power_w"]) == (88, 71, 20480, 650.0), gb

    # the node: its machine (this one: both agents run here) and its GPUs' readings
    n = cluster.node("tel-a")
    assert n["cpus"] == os.cpu_count(), n
    assert n["memory_total_mb"] > 0 and 0 <= n["memory_available_mb"] <= n["memory_total_mb"], n
    st = os.statvfs(cluster.tmp)
    assert abs(n["disk_total_mb"] - st.f_blocks * st.f_frsize // 2**20) <= 1, n
    assert 0 <= n["disk_free_mb"] <= n["disk_total_mb"] and n["telemetry_ms"] > 0, n
    assert n["version"] and n["version"] == cluster.server.api("GET", "/api/v1/version").json().get("version", n["version"])
    assert [(x["index"], x["util_pct"], x["temp_c"]) for x in n["gpus"]] == [(0, 37, 55), (1, 0, 31)], n["gpus"]

    # the CLI shows them as it shows the server's own
    out = cluster.cli("gpus")
    assert out.returncode == 0, out.stderr
    row = [ln for ln in out.stdout.splitlines() if ln.startswith("tel-b:0 ")]
    assert row and "20480 MB" in row[0] and "88%" in row[0] and "71C" in row[0] and "650W" in row[0], out.stdout
    out = cluster.cli("nodes")
    assert out.returncode == 0, out.stderr
    row = [ln for ln in out.stdout.splitlines() if ln.startswith("tel-a ")]
    assert row and re.search(r"\b%d\b" % os.cpu_count(), row[0]), out.stdout

    # /metrics, with the node label
    text = requests.get(cluster.server.url + "/metrics", timeout=5).text
    assert metric(text, "gpupool_gpu_utilization_ratio", node="tel-a", gpu="0") == 0.37, text
    assert metric(text, "gpupool_gpu_utilization_ratio", node="tel-b", gpu="0") == 0.88
    assert metric(text, "gpupool_gpu_temperature_celsius", node="tel-b", gpu="0") == 71
    assert metric(text, "gpupool_gpu_memory_used_bytes", node="tel-a", gpu="0") == 1000 * 2**20
    assert metric(text, "gpupool_gpu_power_watts", node="tel-a", gpu="1") == 70
    assert metric(text, "gpupool_gpu_sm_clock_hertz", node="tel-a", gpu="0") == 1755e6
    assert metric(text, "gpupool_gpu_ecc_errors_total", node="tel-a", gpu="0", type="corrected") == 3

    # history, as the local GPUs': per-second points of the agent GPU's readings
    def series(m, gpu):
        r = cluster.server.api("GET", "/api/v1/monitor/history?metric=%s&gpu=%s&since=-60" % (m, gpu))
        assert r.status_code == 200, r.text
        s = r.json()["series"]
        return s[0]["points"] if s else []
    pts = wait_for(lambda: len(series("gpu_util_pct", "tel-b:0")) >= 2 and series("gpu_util_pct", "tel-b:0"), 15,
                   "two history points of tel-b:0")
    assert {p[1] for p in pts} == {88}, pts
    assert {p[1] for p in series("gpu_temp_c", "tel-b:0")} == {71}
    assert {p[1] for p in series("gpu_memory_used_mb", "tel-a:0")} == {1000}


def test_a_change_arrives_at_once_and_a_lost_node_shows_none(cluster):
    # heartbeat 5 s, node timeout long: only an urgent change makes a sync before the next heartbeat
    cluster.start_server(config(node_timeout_s=8, extra="agent: {heartbeat_s: 5}\n"))
    a = nvml_agent(cluster, "tel-c", [H100 % ("cccccccc", 0, "util=5 temp=40")], heartbeat_s=5)
    wait_gpu(cluster, "tel-c", 0, lambda g: g["util_pct"] == 5)
    time.sleep(1)
    script(cluster, "tel-c", [H100 % ("cccccccc", 0, "util=95 temp=40")])
    t0 = time.monotonic()
    wait_gpu(cluster, "tel-c", 0, lambda g: g["util_pct"] == 95, timeout=10)
    assert time.monotonic() - t0 < 4.5, "an urgent change waited for the heartbeat"
    # a small change rides with the next heartbeat, within heartbeat_s
    script(cluster, "tel-c", [H100 % ("cccccccc", 0, "util=95 temp=42")])
    wait_gpu(cluster, "tel-c", 0, lambda g: g["temp_c"] == 42, timeout=5 + 5)
    # an unhealthy reading says why
    script(cluster, "tel-c", [H100 % ("cccccccc", 0, "util=95 temp=42 fail=temp fail_code=15")])
    g = wait_gpu(cluster, "tel-c", 0, lambda g: g["temp_c"] is None, timeout=10)
    assert g["healthy"] is False and "nvmlDeviceGetTemperature" in g["health_reason"], g

    # a node that stops answering: once lost, its GPUs show no readings (they would be stale)
    a.signal(signal.SIGSTOP)
    try:
        cluster.wait_node("tel-c", "lost", timeout=20)
        g = gpus_of(cluster, "tel-c")[0]
        assert (g["util_pct"], g["temp_c"], g["memory_used_mb"], g["power_w"]) == (None, None, None, None), g
        n = cluster.node("tel-c")
        assert n["cpus"] is None and n["telemetry_ms"] is None, n
    finally:
        a.signal(signal.SIGCONT)
    # back: a full sync brings them all again
    wait_gpu(cluster, "tel-c", 0, lambda g: g["util_pct"] == 95, timeout=20)
    assert cluster.node("tel-c")["cpus"] == os.cpu_count()


def test_sim_agent_readings_follow_its_runs(cluster):
    """An agent on simulated GPUs reports the sim model's readings of what
    runs there (gpu/sim.c: 35 % per task), per GPU, marked sim."""
    cluster.start_server(config())
    cluster.agent("tel-s", gpus=sim_gpus(2))
    wait_gpu(cluster, "tel-s", 1, lambda g: g["util_pct"] == 0)
    t = cluster.submit(["sleep", "30"])
    t = cluster.wait_task(t["id"], "running")
    busy = t["gpus"][0]["index"]
    g = wait_gpu(cluster, "tel-s", busy, lambda g: g["util_pct"] == 35)
    assert g["backend"] == "sim" and g["temp_c"] == 30 + 35 // 2, g
    assert gpus_of(cluster, "tel-s")[1 - busy]["util_pct"] == 0
    cluster.server.api("POST", "/api/v1/tasks/%d/cancel" % t["id"])
    wait_gpu(cluster, "tel-s", busy, lambda g: g["util_pct"] == 0)


def test_bad_readings_are_refused_and_change_nothing(cluster):
    cluster.start_server(config())
    a = nvml_agent(cluster, "tel-d", [H100 % ("dddddddd", 0, "util=20 temp=50")])
    wait_gpu(cluster, "tel-d", 0, lambda g: g["util_pct"] == 20)
    cred = a.credential()
    for bad, why in [({"index": 0, "util_pct": 101}, "util_pct"), ({"index": 0, "temp_c": -3}, "temp_c"),
                     ({"index": 300}, "index"), ({"index": 0, "procs": [{"pid": 0, "used_mb": 1}]}, "pid"),
                     ({"index": 0, "reason": "bad\u0001text"}, "reason")]:
        st, body = agent_post(cluster.server.url, "/agent/v1/sync",
                              {"node": "tel-d", "seq": now_us(), "telemetry": [bad]}, cred)
        assert st == 400 and why in str(body), (bad, st, body)
    st, body = agent_post(cluster.server.url, "/agent/v1/sync",
                          {"node": "tel-d", "seq": now_us(), "host": {"cpus": 0}}, cred)
    assert st == 400 and "cpus" in str(body), body
    # without the node's credential nothing is taken
    st, body = agent_post(cluster.server.url, "/agent/v1/sync",
                          {"node": "tel-d", "seq": now_us(), "telemetry": [{"index": 0, "util_pct": 99}]},
                          "gpn_" + "0" * 64)
    assert st == 401, body
    g = gpus_of(cluster, "tel-d")[0]
    assert g["util_pct"] == 20 and g["healthy"], g


def task_mem(cluster_or_daemon_api, tid):
    t = cluster_or_daemon_api("GET", "/api/v1/tasks/%d" % tid).json()
    return t["gpu_memory_used_mb"], t["gpu_memory_peak_mb"]


MEM_TASK = ["sh", "-c", "FAKE_NVML_GPU_MB=900 sleep 3 & FAKE_NVML_GPU_MB=200 exec sleep 60"]


def test_a_task_shows_its_processes_gpu_memory_now_and_at_peak_on_an_agent(cluster):
    """The fake NVML lists every process whose environment says it uses
    GPU memory on a GPU it sees (procs=env); the agent charges each to the
    run whose supervisor it descends from, the server sums them per task."""
    cluster.start_server(config())
    nvml_agent(cluster, "tel-m", [H100 % ("eeeeeeee", i, "procs=env") for i in range(2)])
    # a process of nobody's task on GPU 0 is listed by the driver but charged to no task
    stray = subprocess.Popen(["sleep", "60"], env=dict(os.environ, FAKE_NVML_GPU_MB="5000",
                                                       CUDA_VISIBLE_DEVICES="0"))
    try:
        t = cluster.submit(MEM_TASK, gpu_request=2)
        t = cluster.wait_task(t["id"], "running")
        api = cluster.server.api
        # both processes on both GPUs at first, then the short one ends
        assert wait_for(lambda: task_mem(api, t["id"])[1] == 2 * (900 + 200), timeout=15), task_mem(api, t["id"])
        assert wait_for(lambda: task_mem(api, t["id"]) == (2 * 200, 2 * 1100), timeout=15), task_mem(api, t["id"])
        out = cluster.cli("status", str(t["id"]))
        assert out.returncode == 0 and "400 MB now, 2200 MB at peak" in out.stdout, out.stdout
        cluster.server.api("POST", "/api/v1/tasks/%d/cancel" % t["id"])
        t = cluster.wait_task(t["id"], "cancelled")
        assert t["gpu_memory_used_mb"] is None, t  # not running: nothing now
    finally:
        stray.kill()
        stray.wait()


def test_a_task_on_the_servers_own_gpus_shows_its_gpu_memory(daemon_factory, tmp_path, monkeypatch):
    script = tmp_path / "nvml.conf"
    script.write_text("".join(H100 % ("ffffffff", i, "procs=env") for i in range(2)))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, nvml_library: "%s"}\n' % fake_nvml_lib())
    r = d.api("POST", "/api/v1/tasks", json={"command": MEM_TASK, "gpu_request": 1})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    assert wait_for(lambda: task_mem(d.api, tid)[1] == 1100, timeout=15), task_mem(d.api, tid)
    assert wait_for(lambda: task_mem(d.api, tid) == (200, 1100), timeout=15), task_mem(d.api, tid)
    # the peak was stored (it grew past 256 MiB): a restarted server still knows it
    kill9(d)
    restart(d)
    assert wait_for(lambda: task_mem(d.api, tid) == (200, 1100), timeout=15), task_mem(d.api, tid)
    # on simulated GPUs nobody lists processes: null, not 0
    s = daemon_factory("gpus: {backend: sim}\n")
    r = s.api("POST", "/api/v1/tasks", json={"command": ["sleep", "30"]})
    tid = r.json()["id"]
    assert wait_for(lambda: s.api("GET", "/api/v1/tasks/%d" % tid).json()["state"] == "running", timeout=10)
    time.sleep(0.5)
    assert task_mem(s.api, tid) == (None, None)
