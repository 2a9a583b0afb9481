"""Black-box test of unloading the least recently used idle served model:
one simulated GPU, scheduler.max_models_per_gpu 2 and three served models
(gw_serve_main.py as the model server).  Two fit; the third waits until the
least recently used idle one is unloaded, and the most recently used one
stays."""
import os
import threading
import time

import pytest
import requests

pytestmark = pytest.mark.e2e

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gw_serve_main.py")


def session():
    s = requests.Session()
    s.trust_env = False
    return s


def wait_for(pred, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def chat(d, model, text="hi"):
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 16}
    return session().post(d.url + "/v1/chat/completions", json=body, timeout=30)


def gw_stats(d):
    return session().get(d.url + "/admin/scheduler/stats", timeout=10).json()["gateway"]


def serve_tasks(d):
    """{model: task} of the running serve:MODEL:0 tasks."""
    ts = session().get(d.url + "/api/v1/tasks?state=running", timeout=10).json()["tasks"]
    return {t["name"].split(":")[1]: t for t in ts if t["name"].startswith("serve:")}


def kill_marked(marker):
    """Kill the model servers whose command line carries marker (they outlive the daemon)."""
    import signal as sig
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read():
                    os.kill(int(pid), sig.SIGKILL)
        except OSError:
            pass


def config(marker):
    """One GPU, two models a GPU, three served models of 2000 MB."""
    models = "".join(
        "    - name: %s\n"
        "      serve: {command: [\"/usr/bin/python3\", \"%s\", \"{port}\", \"%s\"], gpus: 1, memory_mb: 2000}\n"
        % (m, SCRIPT, marker) for m in ("m1", "m2", "m3"))
    return ("gpus: {backend: sim, sim: [{name: \"NVIDIA GeForce RTX 4090\", memory_mb: 24564, count: 1}]}\n"
            "scheduler: {max_models_per_gpu: 2}\n"
            "gateway:\n"
            "  queue_timeout_sec: 30\n"
            "  models:\n" + models)


def settle(d):
    """Two models fill the GPU; the third waited, and since none was used
    yet one of the first two was unloaded for it: two run, one is off.
    Returns (running {model: task}, the model that is off), both running
    models answering."""
    def settled():
        # a replica being unloaded still shows as a running task until its
        # process exits, but its upstream is off at once: settled means the
        # two running tasks are the two models with a healthy upstream
        st = gw_stats(d)
        ready = {u["model"] for u in st["upstreams"] if u["healthy"]}
        running = serve_tasks(d)
        return len(running) == 2 and st["models_unloaded"] == 1 and ready == set(running)
    assert wait_for(settled, timeout=30), (serve_tasks(d), gw_stats(d))
    running = serve_tasks(d)
    assert len(running) == 2
    off = ({"m1", "m2", "m3"} - set(running)).pop()
    for m in running:
        assert wait_for(lambda m=m: chat(d, m).status_code == 200, timeout=20), m
    return running, off


def test_full_gpu_unloads_the_least_recently_used_idle_model(daemon_factory, tmp_path):
    marker = "marker-%s" % tmp_path.name
    d = daemon_factory(config(marker))
    try:
        running, off = settle(d)
        older, newer = sorted(running)
        # used in this order: `older` is the least recently used, `newer` the most
        time.sleep(0.2)
        assert chat(d, older).status_code == 200
        time.sleep(0.2)
        assert chat(d, newer).status_code == 200
        newer_id = running[newer]["id"]
        # a request for the unloaded model: 503 while it loads, then it
        # starts in place of the least recently used idle model
        r = chat(d, off)
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_ready"
        assert wait_for(lambda: chat(d, off).status_code == 200, timeout=30)
        now = serve_tasks(d)
        assert set(now) == {off, newer}
        assert now[newer]["id"] == newer_id  # the most recently used one stayed
        st = gw_stats(d)
        assert st["models_unloaded"] == 2
        by = {m["model"]: m for m in st["models"]}
        assert by[older]["unloaded"] == 1 and by[newer]["unloaded"] == 0
        # the GPU holds exactly the two models that run
        gpus = session().get(d.url + "/api/v1/gpus", timeout=10).json()
        gpus = gpus["gpus"] if isinstance(gpus, dict) else gpus
        assert len(gpus) == 1 and sorted(gpus[0]["models"]) == sorted([off, newer])
        assert "unloaded, the least recently used idle model" in d.log()
    finally:
        d.stop()
        kill_marked(marker)


def test_models_in_use_are_not_unloaded_and_the_wait_names_the_rule(daemon_factory, tmp_path):
    marker = "marker-%s" % tmp_path.name
    d = daemon_factory(config(marker))
    try:
        running, off = settle(d)
        # both loaded models have a request in flight: neither may go
        slow = [threading.Thread(target=chat, args=(d, m, "sleep:5")) for m in running]
        for t in slow:
            t.start()
        assert wait_for(lambda: sum(m["in_flight"] for m in gw_stats(d)["models"]) == 2, timeout=5)
        r = chat(d, off)
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_ready"
        # its replica waits, saying why, past the unload delay (2 s), and nothing is unloaded
        def queued():
            q = session().get(d.url + "/api/v1/queue", timeout=10).json()["tasks"]
            return [t for t in q if t["name"] == "serve:%s:0" % off]
        assert wait_for(lambda: len(queued()) == 1, timeout=5)
        assert "holds 2 models (max_models_per_gpu)" in queued()[0]["reason"], queued()
        time.sleep(3)
        assert set(serve_tasks(d)) == set(running)
        assert gw_stats(d)["models_unloaded"] == 1
        # once they are idle again, one goes and the waiting model starts
        for t in slow:
            t.join()
        assert wait_for(lambda: off in serve_tasks(d), timeout=20)
        assert gw_stats(d)["models_unloaded"] == 2
        assert len(serve_tasks(d)) == 2
    finally:
        d.stop()
        kill_marked(marker)
