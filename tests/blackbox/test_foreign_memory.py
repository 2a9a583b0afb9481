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
