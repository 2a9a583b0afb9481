"""The examples do what they say.

- examples/ecommerce/demo.sh cleans up after itself: it submits nine
  `sleep 600` batch tasks, and a server that stops leaves running tasks
  running (by design), so the demo must cancel what it started before it
  exits; else they run on for ten minutes.
- examples/gpupool.yaml's gateway block, uncommented, is a working gateway
  (the file once said the gateway was refused).
"""
import os
import subprocess
import time

import pytest
import requests

from conftest import REPO, Daemon, free_port, gpupool_bin

pytestmark = pytest.mark.e2e

DEMO = os.path.join(REPO, "examples", "ecommerce", "demo.sh")


def _demo_tasks():
    """pids of processes whose cwd is under a demo's temp dir."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink("/proc/%s/cwd" % pid)
        except OSError:
            continue
        if cwd.startswith("/tmp/gp-ecommerce-") and "/tasks/" in cwd:
            found.append(int(pid))
    return found


def test_demo_leaves_no_task_running(tmp_path):
    if os.path.realpath(gpupool_bin()) != os.path.realpath(os.path.join(REPO, "build", "gpupool")):
        pytest.skip("demo.sh runs build/gpupool, not $GPUPOOL_BIN")
    if not os.access(gpupool_bin(), os.X_OK):
        pytest.skip("build/gpupool not built")
    before = set(_demo_tasks())
    r = subprocess.run(["sh", DEMO, str(free_port())], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "inference-p1" in r.stdout  # it did submit its tasks
    left = []
    for _ in range(50):
        left = [p for p in _demo_tasks() if p not in before]
        if not left:
            break
        time.sleep(0.1)
    for p in left:  # do not leave them to the next test either
        try:
            os.kill(p, 9)
        except OSError:
            pass
    assert not left, "demo.sh left %d task processes running" % len(left)


def test_example_config_gateway_block_uncommented_serves_the_gateway(tmp_path):
    if not os.access(gpupool_bin(), os.X_OK):
        pytest.skip("gpupool not built")
    with open(os.path.join(REPO, "examples", "gpupool.yaml")) as f:
        text = f.read()
    assert "refused if present" not in text
    lines = text.split("\n")
    start = lines.index("# gateway:")
    out = lines[:start]
    for ln in lines[start:]:
        if not ln.startswith("#"):
            break
        out.append(ln[2:] if ln.startswith("# ") else ln[1:])
    cfg = "\n".join(out) + "\n"
    # keep its store in the test's dir, and the GPUs simulated
    cfg = cfg.replace('url: "sqlite://./gpupool-data/gpupool.db"', 'url: "sqlite://%s/gp.db"' % tmp_path)
    cfg = cfg.replace("backend: auto", "backend: sim")
    d = Daemon(tmp_path, cfg)
    d.start()
    try:
        r = requests.get(d.url + "/v1/models", timeout=10)
        assert r.status_code == 200, r.text
        assert [m["id"] for m in r.json()["data"]] == ["deepseek-7b"]
    finally:
        d.stop()
