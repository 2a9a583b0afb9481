"""GPU memory used by processes outside gpupool ("foreign": another user's
job, a display server) shrinks what the scheduler offers on that GPU (issue
25), on the server's own GPUs and on an agent's.  The fake NVML lists such a
process (pid 1, never a task's) when its script says foreign_mb=N, and
follows its script while loaded ("live"), so the foreign use comes and goes
as a real one would.

Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build /usr/bin/python3 -m pytest -q tests/blackbox/test_foreign_memory.py
"""
import os

from apiutil import reap_supervisors, wait_for
from clusterutil import cluster, server_config
from test_cluster import fake_nvml_lib

assert reap_supervisors and cluster  # fixtures, imported so that they apply here

H100 = 'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-%s-0000-0000-0000-000000000000 mem_total_mb=81559 procs=env%s\n'


def write(path, text):
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write("live\n" + text)
    os.replace(tmp, str(path))  # read whole or not at all


def check_offer(api, gpu_id, script, uuid):
    """The GPU offers total - 2000 (the margin) - foreign; a 50000 MB share beside a 20000 MB one waits
    while 40000 MB are foreign and starts when the foreign process is gone."""
    def gpu():
        return [g for g in api("GET", "/api/v1/gpus").json()["gpus"] if g["id"] == gpu_id][0]
    g = wait_for(lambda: gpu()["memory_foreign_mb"] == 40000 and gpu(), 15, "the foreign 40000 MB")
    assert g["memory_usable_mb"] == 81559 - 2000 - 40000, g
    small = api("POST", "/api/v1/tasks", json={"command": ["sleep", "60"], "memory_mb": 20000}).json()
    big = api("POST", "/api/v1/tasks", json={"command": ["sleep", "60"], "memory_mb": 50000}).json()
    assert wait_for(lambda: api("GET", "/api/v1/tasks/%d" % small["id"]).json()["state"] == "running", 15)
    b = api("GET", "/api/v1/tasks/%d" % big["id"]).json()
    assert b["state"] == "queued", b
    write(script, H100 % (uuid, ""))  # the other user's job ends
    wait_for(lambda: gpu()["memory_foreign_mb"] == 0, 15, "no foreign memory")
    wait_for(lambda: api("GET", "/api/v1/tasks/%d" % big["id"]).json()["state"] == "running", 15, "the 50000 MB share")
    assert gpu()["memory_usable_mb"] == 81559 - 2000
    for t in (small, big):
        api("POST", "/api/v1/tasks/%d/cancel" % t["id"])


def test_foreign_memory_on_the_servers_own_gpu(daemon_factory, tmp_path, monkeypatch):
    script = tmp_path / "nvml.conf"
    write(script, H100 % ("f0f0f0f0", " foreign_mb=40000"))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, nvml_library: "%s"}\n' % fake_nvml_lib())
    check_offer(d.api, "local:0", script, "f0f0f0f0")


def test_foreign_memory_on_an_agents_gpu(cluster, tmp_path):
    cluster.start_server(server_config().replace("gpus: {backend: none}", "gpus: {backend: none, poll_ms: 200}"))
    script = tmp_path / "nvml-agent.conf"
    write(script, H100 % ("f1f1f1f1", " foreign_mb=40000"))
    cluster.agent("fo-a", gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % fake_nvml_lib(),
                  env={"FAKE_NVML_CONFIG": str(script)})
    check_offer(cluster.server.api, "fo-a:0", script, "f1f1f1f1")


def test_a_driver_that_lists_no_processes_shows_no_foreign_memory(daemon):
    g = daemon.api("GET", "/api/v1/gpus").json()["gpus"][0]  # the sim backend lists none
    assert g["memory_foreign_mb"] is None and g["memory_usable_mb"] == g["memory_total_mb"] - 2000, g


def test_processes_named_from_another_pid_namespace_are_charged_to_no_one(daemon_factory, tmp_path, monkeypatch):
    # In a container without the host's PIDs, NVML names a task's process by its host PID, which the
    # server cannot see: taking it for a stranger's would keep the task's own memory free a second
    # time (its share waits beside it). So such a reading lists no process: nothing foreign, no
    # watchdog (isolation none), no memory per task, and the log says why and what to do.
    script = tmp_path / "nvml.conf"
    write(script, H100 % ("f2f2f2f2", " procs_tag=ns pid_offset=3000000"))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, nvml_library: "%s"}\n' % fake_nvml_lib())
    t = d.api("POST", "/api/v1/tasks", json={"command": ["sleep", "60"], "memory_mb": 40000,
                                              "env": {"FAKE_NVML_GPU_MB": "40000", "FAKE_NVML_TAG": "ns"}}).json()
    wait_for(lambda: d.api("GET", "/api/v1/tasks/%d" % t["id"]).json()["state"] == "running", 15)
    wait_for(lambda: "which this process cannot see" in d.log(), 15, "the warning")
    assert "hostPID: true" in d.log()
    g = d.api("GET", "/api/v1/gpus").json()["gpus"][0]
    assert g["memory_foreign_mb"] is None and g["isolation"] == "none", g
    assert g["memory_usable_mb"] == 81559 - 2000, g
    # a second share of 30000 MB fits beside it: its 40000 MB are not counted twice
    t2 = d.api("POST", "/api/v1/tasks", json={"command": ["sleep", "60"], "memory_mb": 30000}).json()
    wait_for(lambda: d.api("GET", "/api/v1/tasks/%d" % t2["id"]).json()["state"] == "running", 15, "the second share")
    assert d.api("GET", "/api/v1/tasks/%d" % t["id"]).json().get("gpu_memory_used_mb") is None
    # the same task seen by its own PID: charged to it, nothing foreign
    write(script, H100 % ("f2f2f2f2", " procs_tag=ns"))
    wait_for(lambda: d.api("GET", "/api/v1/tasks/%d" % t["id"]).json().get("gpu_memory_used_mb") == 40000, 15,
             "the task's memory")
    wait_for(lambda: (lambda g: g["memory_foreign_mb"] == 0 and g["isolation"] == "watchdog")(
        d.api("GET", "/api/v1/gpus").json()["gpus"][0]), 15, "nothing foreign, the watchdog on")
    for x in (t, t2):
        d.api("POST", "/api/v1/tasks/%d/cancel" % x["id"])


def test_memory_no_listed_process_holds_is_foreign_too(daemon_factory, tmp_path, monkeypatch):
    # Seen on an H200 with driver 580: run in a PID namespace of its own, NVML lists only that
    # namespace's processes, so another container's 3.6 GB showed in the device's use and in no
    # process. What the device has in use beyond its listed processes (past 256 MB) is foreign.
    script = tmp_path / "nvml.conf"
    # (procs_tag: the fake lists this test's processes only, not those of tests run beside it)
    write(script, H100 % ("f3f3f3f3", " procs_tag=ul mem_used_mb=30000"))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, nvml_library: "%s"}\n' % fake_nvml_lib())

    def gpu():
        return d.api("GET", "/api/v1/gpus").json()["gpus"][0]
    wait_for(lambda: (lambda g: g["memory_foreign_mb"] == 30000 and g["memory_used_mb"] == 30000 and
                      g["memory_usable_mb"] == 81559 - 2000 - 30000)(gpu()), 15, "the unlisted 30000 MB")
    # a task's own listed process is its, not foreign, and the device's use grows by it
    t = d.api("POST", "/api/v1/tasks", json={"command": ["sleep", "60"], "memory_mb": 20000,
                                              "env": {"FAKE_NVML_GPU_MB": "15000", "FAKE_NVML_TAG": "ul"}}).json()
    wait_for(lambda: d.api("GET", "/api/v1/tasks/%d" % t["id"]).json().get("gpu_memory_used_mb") == 15000, 15,
             "the task's memory")
    wait_for(lambda: (lambda g: g["memory_foreign_mb"] == 30000 and g["memory_used_mb"] == 45000)(gpu()), 15,
             "the task's 15000 MB its own")
    # 200 MB beyond the listed processes is the driver's own: nothing foreign
    write(script, H100 % ("f3f3f3f3", " procs_tag=ul mem_used_mb=200"))
    wait_for(lambda: gpu()["memory_foreign_mb"] == 0, 15, "no foreign memory")
    d.api("POST", "/api/v1/tasks/%d/cancel" % t["id"])
