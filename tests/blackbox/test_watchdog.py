"""The GPU memory watchdog (issue 25, part): a task that shares a GPU
(asks memory_mb) and whose processes use more than that on one of its GPUs
(+ gpus.watchdog_tolerance_mb) for gpus.watchdog_grace_s is stopped with
reason memory_exceeded and requeued asking memory_mb x
tasks.oom_retry_factor while it has retries, then failed.  On the server's
own GPUs and on an agent's; the fake NVML lists a process as using N MiB on
the GPUs it sees when its environment says FAKE_NVML_GPU_MB=N (procs=env),
so the processes are real and counted, not the API's word."""
import os
import re
import time

import requests

from apiutil import pid_alive, reap_supervisors, wait_for
from clusterutil import cluster, server_config
from test_cluster import fake_nvml_lib

assert reap_supervisors and cluster  # fixtures, imported so that they apply here

H100 = 'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-%s-0000-0000-0000-%012d mem_total_mb=81559 procs=env\n'
WD = "watchdog_grace_s: 1, watchdog_tolerance_mb: 100"


def hog(d, mb, secs=60):
    """A task process that writes its pid into directory d and 'uses' mb MiB
    on each GPU it sees (as the fake NVML lists it)."""
    os.makedirs(str(d), exist_ok=True)
    return ["sh", "-c", "echo $$ >> %s/pids; FAKE_NVML_GPU_MB=%d exec sleep %d" % (d, mb, secs)]


def pids(d):
    try:
        with open(os.path.join(str(d), "pids")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def metric(url, event):
    text = requests.get(url + "/metrics", timeout=5).text
    m = re.search(r'^gpupool_watchdog_events_total\{event="%s"\} (\S+)$' % event, text, re.M)
    return float(m.group(1)) if m else None


def test_a_task_over_its_memory_is_stopped_requeued_with_more_then_failed(daemon_factory, tmp_path, monkeypatch):
    script = tmp_path / "nvml.conf"
    script.write_text("".join(H100 % ("abcdabcd", i) for i in range(2)))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, %s, nvml_library: "%s"}\n'
                       'tasks: {oom_retry_factor: 1.5, kill_grace_s: 1}\n' % (WD, fake_nvml_lib()))
    g = d.api("GET", "/api/v1/gpus").json()["gpus"][0]
    assert g["isolation"] == "watchdog", g  # NVML lists processes and the watchdog is on
    # within its share: runs on, untouched
    ok_dir, hog_dir = tmp_path / "ok", tmp_path / "hog"
    r = d.api("POST", "/api/v1/tasks", json={"command": hog(ok_dir, 900), "memory_mb": 1000, "max_retries": 1})
    ok = r.json()
    # 2000 MB used against 1000 asked: stopped, requeued asking 1500, still over, stopped again, failed
    r = d.api("POST", "/api/v1/tasks", json={"command": hog(hog_dir, 2000), "memory_mb": 1000, "max_retries": 1})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    assert wait_for(lambda: len(pids(hog_dir)) >= 1, timeout=10)
    first = pids(hog_dir)[0]
    t = d.api("GET", "/api/v1/tasks/%d" % tid).json()
    assert t["isolation"] == "watchdog" and t["memory_mb"] == 1000, t

    def requeued():
        x = d.api("GET", "/api/v1/tasks/%d" % tid).json()
        return x if x["retries"] == 1 else None
    t = wait_for(requeued, timeout=20)
    assert t["memory_mb"] == 1500, t  # it runs again at once (room enough): its reason is the new run's
    with open(d.log_path) as f:
        assert "task %d: memory_exceeded: used 2000 MB of 1000 on one of its GPUs: stopping it" % tid in f.read()
    assert wait_for(lambda: not pid_alive(first), timeout=10), "the first run's process outlived its stop"
    t = wait_for(lambda: (lambda x: x if x["state"] == "failed" else None)(d.api("GET", "/api/v1/tasks/%d" % tid).json()),
                 timeout=30)
    assert t["reason"].startswith("memory_exceeded: used 2000 MB of 1500"), t
    assert t["memory_mb"] == 1500  # stored: it asked that for its last run
    assert len(pids(hog_dir)) == 2 and not any(pid_alive(p) for p in pids(hog_dir))
    assert metric(d.url, "stopped") == 2 and metric(d.url, "over") == 2
    # the task within its share ran on all along
    x = d.api("GET", "/api/v1/tasks/%d" % ok["id"]).json()
    assert x["state"] == "running" and x["retries"] == 0 and pid_alive(pids(ok_dir)[0]), x
    assert x["gpu_memory_used_mb"] == 900
    out = d.cli("status", str(ok["id"]))
    assert "isolation" in out.stdout and "watchdog" in out.stdout, out.stdout


def test_a_whole_gpu_task_and_a_disabled_watchdog_leave_tasks_alone(daemon_factory, tmp_path, monkeypatch):
    script = tmp_path / "nvml.conf"
    script.write_text(H100 % ("bcdebcde", 0))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, watchdog: false, nvml_library: "%s"}\n' % fake_nvml_lib())
    assert d.api("GET", "/api/v1/gpus").json()["gpus"][0]["isolation"] == "none"
    r = d.api("POST", "/api/v1/tasks", json={"command": hog(tmp_path / "h", 5000), "memory_mb": 1000})
    tid = r.json()["id"]
    assert wait_for(lambda: d.api("GET", "/api/v1/tasks/%d" % tid).json()["gpu_memory_used_mb"] == 5000, timeout=10)
    time.sleep(1.5)
    t = d.api("GET", "/api/v1/tasks/%d" % tid).json()
    assert t["state"] == "running" and t["isolation"] == "none", t
    d.api("POST", "/api/v1/tasks/%d/cancel" % tid)
    # on: a whole-GPU task has no share to keep to (and nobody beside it)
    script2 = tmp_path / "nvml2.conf"
    script2.write_text(H100 % ("cdefcdef", 0))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script2))
    d2 = daemon_factory('gpus: {backend: nvml, poll_ms: 200, %s, nvml_library: "%s"}\n' % (WD, fake_nvml_lib()))
    r = d2.api("POST", "/api/v1/tasks", json={"command": hog(tmp_path / "w", 70000)})
    tid = r.json()["id"]
    assert wait_for(lambda: d2.api("GET", "/api/v1/tasks/%d" % tid).json()["gpu_memory_used_mb"] == 70000, timeout=10)
    time.sleep(1.5)
    t = d2.api("GET", "/api/v1/tasks/%d" % tid).json()
    assert t["state"] == "running" and t["isolation"] == "none" and t["retries"] == 0, t


def test_the_watchdog_stops_a_task_on_an_agent(cluster):
    cluster.start_server(server_config(node_timeout_s=10).replace(
        "gpus: {backend: none}", "gpus: {backend: none, poll_ms: 200, %s}" % WD))
    script = cluster.tmp / "nvml-wd.conf"
    script.write_text("".join(H100 % ("dededede", i) for i in range(2)))
    cluster.agent("wd-a", gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % fake_nvml_lib(),
                  env={"FAKE_NVML_CONFIG": str(script)})
    d = cluster.tmp / "agent-hog"
    t = cluster.submit(hog(d, 3000), memory_mb=2000, max_retries=0)
    assert wait_for(lambda: pids(d), timeout=15)
    t = cluster.wait_task(t["id"], "failed", timeout=30)
    assert t["reason"].startswith("memory_exceeded: used 3000 MB of 2000"), t
    assert wait_for(lambda: not pid_alive(pids(d)[0]), timeout=15), "the run outlived its stop on the agent"
    assert t["memory_mb"] == 2000  # no retry left: nothing asked more


OOM = ["sh", "-c", "echo step 1; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2;"
       " exit 1"]


def test_a_run_whose_output_says_cuda_oom_is_requeued_asking_more_memory(daemon_factory):
    d = daemon_factory("gpus: {backend: sim}\n")
    r = d.api("POST", "/api/v1/tasks", json={"command": OOM, "memory_mb": 4000, "max_retries": 2})
    tid = r.json()["id"]

    def ended():
        x = d.api("GET", "/api/v1/tasks/%d" % tid).json()
        return x if x["state"] == "failed" else None
    t = wait_for(ended, timeout=20)
    # 4000 -> 4800 -> 5760, then no retry left: failed, saying why
    assert t["retries"] == 2 and t["memory_mb"] == 5760, t
    assert t["reason"].startswith('gpu_out_of_memory: its output says "CUDA out of memory"'), t
    assert t["exit_code"] == 1
    with open(d.log_path) as f:
        log = f.read()
    assert log.count("task %d: gpu_out_of_memory" % tid) == 3
    # a whole-GPU task has no share to grow: it fails as any failed run
    r = d.api("POST", "/api/v1/tasks", json={"command": OOM, "max_retries": 2})
    tid = r.json()["id"]
    t = wait_for(lambda: (lambda x: x if x["state"] == "failed" else None)(d.api("GET", "/api/v1/tasks/%d" % tid).json()),
                 timeout=20)
    assert t["retries"] == 0 and t["memory_mb"] == 0 and "out of memory" not in t["reason"], t
