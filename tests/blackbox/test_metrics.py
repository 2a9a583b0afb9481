"""Black-box tests of monitoring and alerts against the real daemon:
GET /metrics passes `promtool check metrics` (Debian's prometheus package)
with bounded labels, the JSON snapshot keeps its first fields, the history
rings answer at 1 s resolution, an alert fires once and resolves once and
reaches a webhook (a http.server in this test, on loopback), a failing GPU
on the fake NVML raises the default gpu_error alert, and with keys the data
needs one while the page does not.

Run: make blackbox, or
  GPUPOOL_BIN=/tmp/b/gpupool GPUPOOL_BUILD=/tmp/b /usr/bin/python3 -m pytest -q tests/blackbox/test_metrics.py
"""
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time

import pytest
import requests

from conftest import REPO

pytestmark = pytest.mark.e2e


def wait_for(fn, timeout, what):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.1)


def submit(d, **body):
    r = d.api("POST", "/api/v1/tasks", json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()


def cancel_all(d):
    for t in d.api("GET", "/api/v1/tasks?state=active&limit=1000").json()["tasks"]:
        d.api("POST", "/api/v1/tasks/%d/cancel" % t["id"])
    wait_for(lambda: not d.api("GET", "/api/v1/tasks?state=active").json()["tasks"], 20, "tasks to end")


def promtool():
    p = shutil.which("promtool")
    if not p:
        pytest.fail("promtool not found: install Debian's prometheus package (scripts/install-deps.sh test)")
    return p


def samples(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, "bad line: %r" % line
        labels = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


class Hook:
    """A webhook receiver on 127.0.0.1 that records every JSON POST."""

    def __init__(self, fail_first=0):
        self.posts = []
        self.fail_first = fail_first
        self.requests = 0
        hook = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                hook.requests += 1
                if hook.requests <= hook.fail_first:
                    self.send_response(503)
                else:
                    hook.posts.append((self.headers.get("Content-Type"), json.loads(body)))
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d/hook" % self.srv.server_address[1]
        self.th = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.th.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def hook():
    h = Hook(fail_first=1)
    yield h
    h.close()


def test_metrics_pass_promtool_and_keep_labels_bounded(daemon):
    # work from many tenants: more than the 64 label values the daemon keeps
    batch = submit(daemon, tenant_id="lab", gpu_request=2, command=["sleep", "1"])
    for i in range(70):
        submit(daemon, tenant_id="team-%02d" % i, lease_ttl_s=600)
    refused = daemon.api("POST", "/api/v1/tasks", json={"gpu_request": 1025}, timeout=10)
    assert refused.status_code == 400
    infeasible = daemon.api("POST", "/api/v1/tasks", json={"gpu_request": 8}, timeout=10)
    assert infeasible.status_code == 422
    wait_for(lambda: daemon.api("GET", "/api/v1/tasks/%d" % batch["id"]).json()["state"] == "succeeded", 15,
             "the batch task to end")
    time.sleep(1.5)  # a monitor tick
    r = daemon.api("GET", "/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    p = subprocess.run([promtool(), "check", "metrics"], input=r.text, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    s = samples(r.text)
    names = {n for n, _ in s}
    for fam in ("gpupool_gpu_utilization_ratio", "gpupool_gpu_memory_used_bytes", "gpupool_gpu_temperature_celsius",
                "gpupool_gpu_power_watts", "gpupool_gpu_sm_clock_hertz", "gpupool_gpu_ecc_errors_total",
                "gpupool_gpu_throttled", "gpupool_queue_tasks", "gpupool_tasks_submitted_total",
                "gpupool_tasks_finished_total", "gpupool_queue_wait_seconds_bucket",
                "gpupool_scheduler_pass_duration_seconds_bucket", "gpupool_schedule_failures_total",
                "gpupool_tenant_gpus", "gpupool_tenant_gpu_seconds_total", "gpupool_node_up",
                "gpupool_gateway_configured"):
        assert fam in names, fam
    assert s[("gpupool_info", frozenset({("backend", "sim")}))] == 1
    assert s[("gpupool_tasks_finished_total", frozenset({("state", "succeeded")}))] == 1
    assert s[("gpupool_schedule_failures_total", frozenset({("reason", "infeasible")}))] == 1
    assert s[("gpupool_tasks_submitted_total", frozenset())] == 71
    # four GPUs busy with leases, the rest queued: P5 holds them
    assert s[("gpupool_queue_tasks", frozenset({("priority", "5")}))] == 66
    assert s[("gpupool_queue_wait_seconds_count", frozenset())] == 5
    # bounded labels: 64 tenants by name, then "other"; never a task id
    tenants = {dict(l)["tenant"] for n, l in s if n == "gpupool_tenant_tasks_submitted_total"}
    assert len(tenants) == 65 and "other" in tenants, sorted(tenants)
    assert s[("gpupool_tenant_tasks_submitted_total", frozenset({("tenant", "other")}))] == 71 - 64
    for n, l in s:
        assert not {k for k, _ in l} & {"id", "task", "task_id"}, (n, l)
    cancel_all(daemon)


def test_json_snapshot_keeps_its_first_fields_and_adds_readings(daemon):
    submit(daemon, tenant_id="lab", lease_ttl_s=600)
    time.sleep(1.2)
    j = daemon.api("GET", "/api/v1/monitor/metrics").json()
    for k in ("gpus_total", "gpus_usable", "gpus_busy", "utilization_pct", "tasks_queued", "tasks_running",
              "queued_by_priority", "scheduled_total", "submitted_total", "finished_total", "failed_total",
              "cancelled_total", "uptime_s", "backend"):
        assert k in j, k
    assert j["gpus_total"] == 4 and j["gpus_busy"] == 1 and j["tasks_running"] == 1
    assert j["backend"] == "sim"
    assert len(j["gpus"]) == 4
    busy = [g for g in j["gpus"] if g["tasks"] == 1]
    assert len(busy) == 1 and busy[0]["util_pct"] == 35 and busy[0]["sm_clock_mhz"] > 210
    assert busy[0]["throttle_reasons"] == [] and j["gpus"][3 if busy[0]["index"] != 3 else 0]["throttle_reasons"] == ["gpu_idle"]
    lab = [t for t in j["tenants"] if t["id"] == "lab"][0]
    assert lab["running"] == 1 and lab["gpus"] == 1 and lab["quota"] is None
    assert j["gateway"] == {"configured": False}
    assert daemon.api("GET", "/api/monitor/metrics").status_code == 200  # the short path of the sketch
    assert daemon.api("POST", "/api/v1/monitor/metrics").status_code == 405
    cancel_all(daemon)


def test_history_answers_at_one_second_resolution(daemon):
    submit(daemon, tenant_id="lab", lease_ttl_s=600)
    time.sleep(3.5)
    h = daemon.api("GET", "/api/v1/monitor/history?metric=gpu_util_pct&since=-10").json()
    assert h["step_s"] == 1 and h["metric"] == "gpu_util_pct"
    assert sorted(s["labels"]["gpu"] for s in h["series"]) == ["local:0", "local:1", "local:2", "local:3"]
    pts = max((s["points"] for s in h["series"]), key=lambda p: max(v for _, v in p))
    assert len(pts) >= 3
    assert all(b[0] - a[0] >= 1000 for a, b in zip(pts, pts[1:]))
    assert pts[-1][1] == 35
    one = daemon.api("GET", "/api/v1/monitor/history?metric=tenant_gpus&tenant=lab&since=-5").json()
    assert [s["labels"] for s in one["series"]] == [{"tenant": "lab"}] and one["series"][0]["points"][-1][1] == 1
    old = daemon.api("GET", "/api/v1/monitor/history?metric=running&since=-7200").json()
    assert old["step_s"] == 60 and old["series"][0]["points"]
    assert daemon.api("GET", "/api/v1/monitor/history?metric=nope").status_code == 404
    assert daemon.api("GET", "/api/v1/monitor/history?metric=running&since=yesterday").status_code == 400
    assert "gpu_temp_c" in daemon.api("GET", "/api/v1/monitor/history").json()["metrics"]
    cancel_all(daemon)


def test_alert_fires_once_resolves_once_and_reaches_the_webhook(daemon_factory, hook):
    # a simulated GPU warms to 47 C with one task on it, 30 C idle
    d = daemon_factory("gpus: {backend: sim}\nmonitor: {sample_ms: 200}\n"
                       "alerts:\n  webhook: \"%s\"\n  webhook_retries: 3\n"
                       "  rules:\n    - {name: gpu_hot, when: \"gpu_temp_c > 40\", clear_s: 1, severity: critical}\n"
                       % hook.url)
    t = submit(d, tenant_id="lab", command=["sleep", "3"])
    gpu = "local:%d" % t["gpus"][0]["index"]
    wait_for(lambda: len(hook.posts) >= 1, 10, "the firing POST (after one refused delivery)")
    ctype, fired = hook.posts[0]
    assert ctype == "application/json"
    assert fired["rule"] == "gpu_hot" and fired["state"] == "firing" and fired["subject"] == gpu
    assert fired["value"] == 47 and fired["threshold"] == 40 and fired["severity"] == "critical"
    assert fired["backend"] == "sim" and fired["started_at"] and fired["resolved_at"] is None
    active = d.api("GET", "/api/v1/alerts").json()["alerts"]
    assert [(a["rule"], a["subject"], a["state"]) for a in active] == [("gpu_hot", gpu, "firing")]
    wait_for(lambda: len(hook.posts) >= 2, 15, "the resolved POST")
    resolved = hook.posts[1][1]
    assert resolved["state"] == "resolved" and resolved["subject"] == gpu and resolved["value"] == 30
    assert resolved["started_at"] == fired["started_at"] and resolved["resolved_at"]
    time.sleep(2)  # nothing more: it fired once and resolved once
    assert len(hook.posts) == 2, hook.posts
    assert hook.requests == 3  # the first delivery was refused (503) and retried
    a = d.api("GET", "/api/v1/alerts").json()
    assert a["alerts"] == [] and a["resolved"][0]["rule"] == "gpu_hot"
    s = samples(d.api("GET", "/metrics").text)
    assert s[("gpupool_alert_events_total", frozenset({("event", "fired")}))] == 1
    assert s[("gpupool_alert_events_total", frozenset({("event", "resolved")}))] == 1
    assert s[("gpupool_alert_webhook_deliveries_total", frozenset({("result", "ok")}))] == 2
    log = d.log()
    assert log.count("alert gpu_hot FIRING on %s" % gpu) == 1 and log.count("alert gpu_hot resolved on %s" % gpu) == 1


def fake_lib():
    build = os.environ.get("GPUPOOL_BUILD") or os.path.join(REPO, "build")
    lib = os.path.join(build, "fakenvml", "libnvidia-ml.so.1")
    if not os.path.exists(lib):
        pytest.skip("fake NVML not built (%s); run make blackbox" % lib)
    return os.path.abspath(lib)


def test_failing_gpu_on_nvml_raises_the_default_gpu_error_alert(daemon_factory, hook, tmp_path, monkeypatch):
    script = tmp_path / "nvml.conf"
    # GPU 1's temperature call starts failing after a few reads: NVML says the GPU is lost
    script.write_text('gpu name="NVIDIA A100-SXM4-80GB" mem_total_mb=81920 temp=50 sm_clock=1410 ecc_corrected=3 throttle=4\n'
                      'gpu name="NVIDIA A100-SXM4-80GB" mem_total_mb=81920 fail=temp fail_after=4\n')
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: nvml, nvml_library: "%s", poll_ms: 200}\n'
                       'monitor: {sample_ms: 200}\nalerts: {webhook: "%s"}\n' % (fake_lib(), hook.url))
    wait_for(lambda: len(hook.posts) >= 1, 15, "the gpu_error alert")
    a = hook.posts[0][1]
    assert (a["rule"], a["subject"], a["state"], a["backend"]) == ("gpu_error", "local:1", "firing", "nvml")
    s = samples(d.api("GET", "/metrics").text)
    assert s[("gpupool_gpu_healthy", frozenset({("node", "local"), ("gpu", "1")}))] == 0
    assert s[("gpupool_gpu_sm_clock_hertz", frozenset({("node", "local"), ("gpu", "0")}))] == 1410e6
    assert s[("gpupool_gpu_ecc_errors_total", frozenset({("node", "local"), ("gpu", "0"), ("type", "corrected")}))] == 3
    assert s[("gpupool_gpu_throttled", frozenset({("node", "local"), ("gpu", "0"), ("reason", "sw_power_cap")}))] == 1
    assert ("gpupool_gpu_info", frozenset({("node", "local"), ("gpu", "0"), ("backend", "nvml"),
                                           ("uuid", "GPU-00000000-0000-0000-0000-000000000000"),
                                           ("name", "NVIDIA A100-SXM4-80GB")})) in s
    p = subprocess.run([promtool(), "check", "metrics"], input=d.api("GET", "/metrics").text,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    time.sleep(1)
    assert len(hook.posts) == 1  # a GPU that stays lost fires once


def test_with_keys_the_data_needs_a_key_and_the_page_does_not(daemon_factory):
    key = "monitor-test-key"
    d = daemon_factory('gpus: {backend: sim}\nauth: {admin_keys: ["sha256:%s"]}\n'
                       % hashlib.sha256(key.encode()).hexdigest(), key=key)
    for path in ("/metrics", "/api/v1/monitor/metrics", "/api/v1/monitor/history?metric=running", "/api/v1/alerts"):
        assert d.api("GET", path).status_code == 401, path
        assert d.api("GET", path, headers={"Authorization": "Bearer " + key}).status_code == 200, path
    page = d.api("GET", "/")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert "<title>gpupool</title>" in page.text
    assert d.api("GET", "/static/app.js").status_code == 200
    assert d.api("GET", "/static/nope.js").status_code == 404
    assert d.api("POST", "/").status_code in (401, 405)
