"""Black-box tests of the daemon on the NVML backend, with the fake
libnvidia-ml built by mk/gpu.mk ($GPUPOOL_BUILD/fakenvml/libnvidia-ml.so.1)
scripted through FAKE_NVML_CONFIG (format: tests/fakenvml/fake_nvml.c).

Covers: the scripted GPUs show up in GET /api/v1/gpus with backend "nvml"
(and nothing says "sim"), gpu_model globs pick the right GPU, a GPU whose
NVML calls start failing turns unhealthy with a reason and gets no new work,
and `backend: nvml` without a usable library refuses to start.

Run: make blackbox, or
  GPUPOOL_BIN=/tmp/b-bb/gpupool GPUPOOL_BUILD=/tmp/b-bb /usr/bin/python3 -m pytest -q tests/blackbox/test_nvml.py
"""
import os

import pytest

from apiutil import gpu, gpus, lease, pid_alive, post, reap_supervisors, run_server, submit_raw, task, wait_for, wait_state
from conftest import REPO

pytestmark = pytest.mark.e2e
assert reap_supervisors  # autouse fixture, imported so that it applies here

UUID_RTX = "GPU-4090aaaa-0000-0000-0000-000000000001"
UUID_A100 = "GPU-a100bbbb-0000-0000-0000-000000000002"


def fake_lib():
    build = os.environ.get("GPUPOOL_BUILD") or os.path.join(REPO, "build")
    lib = os.path.join(build, "fakenvml", "libnvidia-ml.so.1")
    if not os.path.exists(lib):
        pytest.skip("fake NVML not built (%s); run make blackbox" % lib)
    return os.path.abspath(lib)


@pytest.fixture
def nvml_daemon(daemon_factory, tmp_path, monkeypatch):
    """start(script, extra_gpus_keys) -> daemon on the fake NVML."""
    lib = fake_lib()

    def start(script, extra=""):
        path = tmp_path / "fake-nvml.conf"
        path.write_text(script)
        monkeypatch.setenv("FAKE_NVML_CONFIG", str(path))
        return daemon_factory("gpus: {backend: nvml, nvml_library: \"%s\"%s}\n" % (lib, extra))

    return start


TWO_GPUS = (
    "# index 0: a 4090, index 1: an A100\n"
    'gpu name="NVIDIA GeForce RTX 4090" uuid=%s mem_total_mb=24564 mem_used_mb=500 util=5 temp=41 power_mw=30000\n'
    'gpu name="NVIDIA A100-SXM4-80GB" uuid=%s mem_total_mb=81920 mem_used_mb=1000 util=37 temp=55 power_mw=210000\n'
    % (UUID_RTX, UUID_A100))


def test_scripted_gpus_are_reported_with_backend_nvml(nvml_daemon):
    d = nvml_daemon(TWO_GPUS)
    r = d.api("GET", "/api/v1/gpus")
    assert r.status_code == 200
    assert r.headers["X-Gpupool-Backend"] == "nvml"
    body = r.json()
    assert body["backend"] == "nvml"
    assert "sim" not in r.text.lower(), r.text
    gs = body["gpus"]
    assert [g["index"] for g in gs] == [0, 1]
    rtx, a100 = gs
    assert (rtx["name"], rtx["uuid"], rtx["memory_total_mb"]) == ("NVIDIA GeForce RTX 4090", UUID_RTX, 24564)
    assert (a100["name"], a100["uuid"], a100["memory_total_mb"]) == ("NVIDIA A100-SXM4-80GB", UUID_A100, 81920)
    assert (rtx["memory_used_mb"], rtx["util_pct"], rtx["temp_c"], rtx["power_w"]) == (500, 5, 41, 30.0)
    assert (a100["memory_used_mb"], a100["util_pct"], a100["temp_c"], a100["power_w"]) == (1000, 37, 55, 210.0)
    for g in gs:
        assert g["healthy"] is True and g["backend"] == "nvml" and g["id"] == "local:%d" % g["index"]
    n = d.api("GET", "/api/v1/nodes").json()["nodes"][0]
    assert n["name"] == "local" and n["backend"] == "nvml" and n["gpus_total"] == 2
    assert [g["healthy"] for g in n["gpus"]] == [True, True]
    m = d.api("GET", "/api/v1/monitor/metrics")
    assert m.headers["X-Gpupool-Backend"] == "nvml" and m.json()["gpus_total"] == 2
    h = d.api("GET", "/healthz")
    assert h.headers["X-Gpupool-Backend"] == "nvml"


def test_memory_used_leaves_out_the_drivers_reservation_as_nvidia_smi_does(nvml_daemon):
    # An idle H200 on R580: nvidia-smi says 0 MiB used, nvmlDeviceGetMemoryInfo (v1) 615, since v1
    # counts the driver's own reservation in; _v2 has it apart.  A driver without _v2 (13) is read
    # v1's way; any other failure of _v2 is the GPU's.
    d = nvml_daemon(
        'gpu name="NVIDIA H200" mem_total_mb=143771 mem_used_mb=0 mem_reserved_mb=615\n'
        'gpu name="NVIDIA H200" mem_total_mb=143771 mem_used_mb=11213 mem_reserved_mb=614\n'
        'gpu name="NVIDIA A100-SXM4-80GB" mem_total_mb=81920 mem_used_mb=1000 mem_reserved_mb=500 '
        'fail=memory_v2 fail_code=13\n'
        'gpu name="NVIDIA A100-SXM4-80GB" mem_total_mb=81920 mem_reserved_mb=500 fail=memory_v2 fail_after=2\n',
        ", poll_ms: 200")
    gs = d.api("GET", "/api/v1/gpus").json()["gpus"]
    assert [(g["memory_total_mb"], g["memory_used_mb"], g["healthy"]) for g in gs[:3]] == [
        (143771, 0, True), (143771, 11213, True), (81920, 1500, True)]
    bad = wait_for(lambda: [g for g in gpus(d) if g["index"] == 3 and not g["healthy"]], 10,
                   "GPU 3 to turn unhealthy")[0]
    assert "nvmlDeviceGetMemoryInfo" in bad["health_reason"], bad
    text = d.cli("gpus").stdout
    assert "0/143771 MB  0 MB" in text, text


def test_gpu_model_glob_places_the_task_on_the_matching_gpu(nvml_daemon):
    d = nvml_daemon(TWO_GPUS)
    t = lease(d, gpu_model="*A100*", memory_mb=1000)
    assert t["state"] == "running" and t["backend"] == "nvml"
    assert t["gpus"][0]["index"] == 1 and t["gpus"][0]["uuid"] == UUID_A100
    assert t["cuda_visible_devices"] == "1"
    t2 = lease(d, gpu_model="*4090*", memory_mb=1000)
    assert t2["gpus"][0]["uuid"] == UUID_RTX
    r = submit_raw(d, {"gpu_model": "H100*"})
    assert r.status_code == 422, r.text
    # more memory than the 4090 has: only the A100 can take it
    t3 = lease(d, memory_mb=40000)
    assert t3["gpus"][0]["uuid"] == UUID_A100


def test_a_gpu_whose_nvml_calls_fail_turns_unhealthy_and_gets_no_new_work(nvml_daemon):
    # the A100's memory query answers 6 times (2 at start, then one per
    # sample), then fails as a lost GPU; the daemon samples every 200 ms
    script = TWO_GPUS.replace("power_mw=210000", "power_mw=210000 fail=memory fail_after=6")
    d = nvml_daemon(script, ", poll_ms: 200")
    bad = wait_for(lambda: [g for g in gpus(d) if g["index"] == 1 and not g["healthy"]], 10,
                   "GPU 1 to turn unhealthy")[0]
    assert bad["uuid"] == UUID_A100 and bad["name"] == "NVIDIA A100-SXM4-80GB"
    assert bad["health_reason"], bad
    assert "Memory" in bad["health_reason"] or "memory" in bad["health_reason"]
    assert gpu(d, 0)["healthy"] is True
    n = d.api("GET", "/api/v1/nodes").json()["nodes"][0]
    assert n["gpus_total"] == 2 and [g["healthy"] for g in n["gpus"]] == [True, False]
    # new work avoids it: one exclusive task runs on the 4090, the next waits
    first = lease(d)
    assert first["state"] == "running" and first["gpus"][0]["index"] == 0
    second = lease(d)
    assert second["state"] == "queued" and task(d, second["id"])["reason"]
    small = lease(d, memory_mb=100)
    assert small["state"] == "queued"
    assert gpu(d, 1)["tasks"] == []
    # once the 4090 is free the waiting task goes there, not to the bad GPU
    assert post(d, "/api/v1/tasks/%d/release" % first["id"]).status_code == 200
    s = wait_state(d, second["id"], ("running",), timeout=5)
    assert s["gpus"][0]["index"] == 0


def test_a_gpu_failing_from_the_start_is_unhealthy_and_unused(nvml_daemon):
    script = TWO_GPUS.replace("power_mw=30000", "power_mw=30000 fail=temp")
    d = nvml_daemon(script)
    g0 = gpu(d, 0)
    assert g0["healthy"] is False and "Temperature" in g0["health_reason"], g0
    assert g0["name"] == "NVIDIA GeForce RTX 4090"   # still known by name and uuid
    t = lease(d, memory_mb=1000)
    assert t["gpus"][0]["index"] == 1


def run_refused(tmp_path, config, env_extra=None):
    cfg = tmp_path / "gpupool.yaml"
    cfg.write_text(config)
    env = dict(os.environ)
    env.pop("FAKE_NVML_CONFIG", None)
    env.update(env_extra or {})
    return run_server(["--config", str(cfg), "--listen", "127.0.0.1:1", "--data-dir", str(tmp_path / "data")],
                      env=env)


def test_nvml_backend_with_a_missing_library_refuses_to_start(tmp_path):
    fake_lib()
    missing = str(tmp_path / "no-such-dir" / "libnvidia-ml.so.1")
    r = run_refused(tmp_path, 'gpus: {backend: nvml, nvml_library: "%s"}\n' % missing)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "no-such-dir/libnvidia-ml.so.1" in r.stderr, r.stderr
    assert "nvml" in r.stderr.lower()


def test_nvml_backend_without_a_driver_refuses_to_start(tmp_path):
    lib = fake_lib()
    # no FAKE_NVML_CONFIG: the fake's nvmlInit says the driver is not loaded
    r = run_refused(tmp_path, 'gpus: {backend: nvml, nvml_library: "%s"}\n' % lib)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "nvmlInit" in r.stderr, r.stderr


def test_auto_backend_falls_back_to_sim_without_a_driver(daemon_factory, monkeypatch, tmp_path):
    lib = fake_lib()
    monkeypatch.delenv("FAKE_NVML_CONFIG", raising=False)
    d = daemon_factory('gpus: {backend: auto, nvml_library: "%s"}\n' % lib)
    r = d.api("GET", "/api/v1/gpus")
    assert r.headers["X-Gpupool-Backend"] == "sim" and r.json()["backend"] == "sim"
    assert len(r.json()["gpus"]) == 4


def test_auto_backend_uses_nvml_when_it_loads(daemon_factory, monkeypatch, tmp_path):
    lib = fake_lib()
    script = tmp_path / "one.conf"
    script.write_text('gpu name="NVIDIA L4" mem_total_mb=23034\n')
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(script))
    d = daemon_factory('gpus: {backend: auto, nvml_library: "%s"}\n' % lib)
    r = d.api("GET", "/api/v1/gpus")
    assert r.headers["X-Gpupool-Backend"] == "nvml"
    assert [g["name"] for g in r.json()["gpus"]] == ["NVIDIA L4"]


def test_a_task_on_a_gpu_that_fails_is_requeued_or_failed(nvml_daemon, tmp_path):
    script = TWO_GPUS.replace("power_mw=210000", "power_mw=210000 fail=memory fail_after=6")
    d = nvml_daemon(script, ", poll_ms: 200")
    hold = lease(d, gpu_model="*4090*")       # GPU 0 busy: the batch task lands on the A100
    pidfile = tmp_path / "on-a100.pid"
    t = submit_raw(d, {"command": ["sh", "-c", 'echo $$ > "$0"; exec sleep 30', str(pidfile)],
                       "max_retries": 1}).json()
    assert t["state"] == "running" and t["gpus"][0]["uuid"] == UUID_A100, t
    assert hold["gpus"][0]["index"] == 0
    wait_for(lambda: not gpu(d, 1)["healthy"], 10, "GPU 1 to turn unhealthy")
    # one retry left: back to the queue (nothing else fits: GPU 0 is held) ...
    got = wait_for(lambda: (lambda x: x if x["state"] != "running" else None)(task(d, t["id"])), 3,
                   "the task to leave the failed GPU")
    assert got["state"] == "queued" and got["retries"] == 1 and got["reason"], got
    # ... and its process on the lost GPU is stopped
    pid = int(pidfile.read_text())
    wait_for(lambda: not pid_alive(pid), 12, "the process on the lost GPU to stop")
