"""Model servers of the gateway (gateway.models[].serve) on agent nodes: a
control plane with no GPUs of its own places the replica on a node, the
node's agent runs it, and the gateway forwards requests to it at that
node's host (docs/internals/cluster.md, DESIGN.md "Cluster")."""
import hashlib
import os
import signal
import socket
import subprocess
import time

import requests

from conftest import gpupool_bin

TOKEN = "gpj_" + "5" * 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session():
    s = requests.Session()
    s.trust_env = False  # loopback only, never through a proxy
    return s


def wait_for(pred, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def chat(d, text):
    return session().post(d.url + "/v1/chat/completions", timeout=20,
                          json={"model": "m1", "messages": [{"role": "user", "content": text}], "max_tokens": 4})


def test_a_served_model_runs_on_an_agent_node_and_the_gateway_reaches_it(daemon_factory, tmp_path):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gw_serve_main.py")
    cfg = ("gpus: {backend: none}\n"
           "cluster: {join_tokens: [\"sha256:%s\"], node_timeout_s: 5}\n"
           "gateway:\n"
           "  models:\n"
           "    - name: m1\n"
           "      serve: {command: [\"/usr/bin/python3\", \"%s\", \"{port}\"], gpus: 1, memory_mb: 2000,\n"
           "              port: auto, ready: \"/health\"}\n" % (hashlib.sha256(TOKEN.encode()).hexdigest(), script))
    d = daemon_factory(cfg)
    acfg = tmp_path / "agent.yaml"
    acfg.write_text("gpus: {backend: sim, sim: [{name: \"NVIDIA L4\", memory_mb: 23034, count: 2}]}\n"
                    "agent: {heartbeat_s: 1}\n")
    log = open(tmp_path / "agent.log", "w")
    agent = subprocess.Popen([gpupool_bin(), "agent", "--server", d.url, "--token", TOKEN, "--config", str(acfg),
                              "--name", "infer-1", "--listen", "127.0.0.1:%d" % free_port(),
                              "--data-dir", str(tmp_path / "agent")], stdout=log, stderr=subprocess.STDOUT)
    served = None
    try:
        def replica():
            ts = session().get(d.url + "/api/v1/tasks?state=running", timeout=10).json()["tasks"]
            return [t for t in ts if t["name"] == "serve:m1:0"]
        assert wait_for(lambda: len(replica()) == 1, timeout=30), open(tmp_path / "agent.log").read()
        t = replica()[0]
        assert t["nodes"] == ["infer-1"], t
        # the agent runs it; once it answers its readiness path, the gateway forwards to it there
        assert wait_for(lambda: chat(d, "hi").status_code == 200, timeout=30), chat(d, "hi").text
        r = chat(d, "hi")
        served = int(r.headers["X-Upstream"].split("-")[1])
        out = subprocess.run(["ps", "-o", "args=", "-p", str(served)], capture_output=True, text=True).stdout
        assert "gw_serve_main.py" in out, out
        # its supervisor is the agent's: it runs in the agent's data dir, not the server's
        with open("/proc/%d/environ" % served, "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        assert env[b"GPUPOOL_NODE"] == b"infer-1" and env[b"CUDA_VISIBLE_DEVICES"] in (b"0", b"1"), env
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
        log.close()
        d.stop()
        if served:
            try:
                os.kill(served, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
