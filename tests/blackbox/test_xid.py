"""GPU errors (issue 25, part): NVML Xid events, read through the real
loader from the fake libnvidia-ml (xid=... in its script, raised when the
script changes: live), are counted per GPU (gpupool_gpu_xid_errors_total);
a critical one (79: fallen off the bus, 48: double-bit ECC, ...) makes the
GPU unhealthy with the Xid in its reason, and what ran there is requeued as
for any failed GPU; an application's Xid (13, 31, 43) leaves it usable.
On the server's own GPUs and on an agent's."""
import os
import re

import requests

from apiutil import pid_alive, reap_supervisors, wait_for
from clusterutil import cluster, server_config
from test_cluster import fake_nvml_lib

assert reap_supervisors and cluster  # fixtures, imported so that they apply here

GPU = 'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-%s-0000-0000-0000-%012d mem_total_mb=81559 %s\n'


def write(path, tag, extras):
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write("live\n" + "".join(GPU % (tag, i, x) for i, x in enumerate(extras)))
    os.replace(tmp, str(path))


def xid_metric(url, node, gpu):
    text = requests.get(url + "/metrics", timeout=5).text
    m = re.search(r'^gpupool_gpu_xid_errors_total\{node="%s",gpu="%d"\} (\S+)$' % (node, gpu), text, re.M)
    return float(m.group(1)) if m else None


def gpu_of(api, node, index):
    return [g for g in api("GET", "/api/v1/gpus").json()["gpus"] if g["node"] == node and g["index"] == index][0]


def test_a_critical_xid_on_a_servers_gpu_requeues_its_task(daemon_factory, tmp_path, monkeypatch):
    script = tmp_path / "nvml.conf"
    write(script, "aaaa1111", ["", ""])
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, nvml_library: "%s"}\n' % fake_nvml_lib())
    marks = tmp_path / "pid"
    r = d.api("POST", "/api/v1/tasks", json={"command": ["sh", "-c", "echo $$ >> %s; exec sleep 60" % marks],
                                             "max_retries": 1})
    tid = r.json()["id"]
    assert wait_for(lambda: os.path.exists(str(marks)), timeout=10)
    t = d.api("GET", "/api/v1/tasks/%d" % tid).json()
    on = t["gpus"][0]["index"]
    first = int(open(str(marks)).read().split()[0])
    assert xid_metric(d.url, "local", on) == 0
    # an application's fault on its GPU: counted, nothing else
    write(script, "aaaa1111", ["xid=13" if i == on else "" for i in range(2)])
    assert wait_for(lambda: xid_metric(d.url, "local", on) == 1, timeout=10)
    g = gpu_of(d.api, "local", on)
    assert g["healthy"] and d.api("GET", "/api/v1/tasks/%d" % tid).json()["retries"] == 0
    # it falls off the bus: unhealthy, saying why; the task goes to the other GPU
    write(script, "aaaa1111", ["xid=79" if i == on else "" for i in range(2)])
    assert wait_for(lambda: not gpu_of(d.api, "local", on)["healthy"], timeout=10)
    assert gpu_of(d.api, "local", on)["health_reason"] == "Xid 79: the GPU has fallen off the bus (reset the GPU)"
    assert xid_metric(d.url, "local", on) == 2
    t = wait_for(lambda: (lambda x: x if x["retries"] == 1 and x["state"] == "running" else None)(
        d.api("GET", "/api/v1/tasks/%d" % tid).json()), timeout=20)
    assert t["gpus"][0]["index"] == 1 - on, t
    assert wait_for(lambda: not pid_alive(first), timeout=10), "the run on the failed GPU outlived its stop"


def test_an_agents_gpu_with_a_critical_xid_turns_unhealthy_and_its_task_moves(cluster):
    cluster.start_server(server_config(node_timeout_s=10).replace(
        "gpus: {backend: none}", "gpus: {backend: none, poll_ms: 200}"))
    script = cluster.tmp / "nvml-xid.conf"
    write(script, "bbbb2222", ["", ""])
    cluster.agent("xid-a", gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % fake_nvml_lib(),
                  env={"FAKE_NVML_CONFIG": str(script)})
    t = cluster.submit(["sleep", "60"], max_retries=1)
    t = cluster.wait_task(t["id"], "running")
    on = t["gpus"][0]["index"]
    write(script, "bbbb2222", ["xid=48" if i == on else "" for i in range(2)])
    api = cluster.server.api
    assert wait_for(lambda: not gpu_of(api, "xid-a", on)["healthy"], timeout=15)
    assert gpu_of(api, "xid-a", on)["health_reason"] == "Xid 48: double-bit ECC error (reset the GPU)"
    assert wait_for(lambda: xid_metric(cluster.server.url, "xid-a", on) == 1, timeout=10)
    t = wait_for(lambda: (lambda x: x if x["retries"] == 1 and x["state"] == "running" else None)(
        cluster.task(t["id"])), timeout=20)
    assert t["gpus"][0]["index"] == 1 - on, t
