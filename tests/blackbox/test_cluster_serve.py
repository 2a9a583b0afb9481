"""Model servers of the gateway (gateway.models[].serve) on agent nodes: a
control plane with no GPUs of its own places the replica on a node, the
node's agent runs it, and the gateway forwards requests to it at that
node's host (docs/internals/cluster.md, DESIGN.md "Cluster")."""
import os
import signal
import subprocess

import pytest

from apiutil import reap_supervisors, wait_for
from clusterutil import cluster, server_config, sim_gpus

pytestmark = pytest.mark.e2e
assert reap_supervisors and cluster  # fixtures, imported so that they apply here

SERVE_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gw_serve_main.py")


def chat(s, text):
    return s.api("POST", "/v1/chat/completions",
                 json={"model": "m1", "messages": [{"role": "user", "content": text}], "max_tokens": 4})


def test_a_served_model_runs_on_an_agent_node_and_the_gateway_reaches_it(cluster):
    s = cluster.start_server(server_config(extra=(
        "gateway:\n"
        "  models:\n"
        "    - name: m1\n"
        "      serve: {command: [\"/usr/bin/python3\", \"%s\", \"{port}\"], gpus: 1, memory_mb: 2000,\n"
        "              port: auto, ready: \"/health\"}\n" % SERVE_MAIN)))
    cluster.agent("infer-1", gpus=sim_gpus(2, name="NVIDIA L4", memory_mb=23034))

    def replica():
        ts = s.api("GET", "/api/v1/tasks?state=running").json()["tasks"]
        return [t for t in ts if t["name"] == "serve:m1:0"]
    t = wait_for(replica, 30, "the replica to run")[0]
    assert t["nodes"] == ["infer-1"], t
    # the agent runs it; once it answers its readiness path, the gateway forwards to it there
    wait_for(lambda: chat(s, "hi").status_code == 200, 30, "the gateway to answer through the replica")
    served = int(chat(s, "hi").headers["X-Upstream"].split("-")[1])
    out = subprocess.run(["ps", "-o", "args=", "-p", str(served)], capture_output=True, text=True).stdout
    assert "gw_serve_main.py" in out, out
    with open("/proc/%d/environ" % served, "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    assert env[b"GPUPOOL_NODE"] == b"infer-1" and env[b"CUDA_VISIBLE_DEVICES"] in (b"0", b"1"), env
    os.kill(served, signal.SIGKILL)
