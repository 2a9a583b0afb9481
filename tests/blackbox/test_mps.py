"""gpus.sharing: mps (issue 25): shared tasks on the server's own GPUs run
as clients of one NVIDIA MPS control daemon per GPU.

No GPU here: the GPUs are the fake NVML's, and nvidia-cuda-mps-control is
the stand-in in tests/mps/ (a script that behaves as NVIDIA documents the
control daemon: `-d` daemonises and writes its pid file and control socket
in CUDA_MPS_PIPE_DIRECTORY, refuses a second daemon there, and `quit` on a
front end's stdin stops it).  gpupool finds it on PATH exactly as it finds
NVIDIA's; the stand-in appends what it was run with and told to
FAKE_MPS_RECORD.  The daemons are counted as live processes (/proc), not
taken from the API's word."""
import json
import os
import re
import signal
import time

from apiutil import kill9, pid_alive, reap_supervisors, restart, wait_for
from clusterutil import cluster, server_config
from test_cluster import fake_nvml_lib

assert reap_supervisors and cluster  # fixtures, imported so that they apply here

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDIN_DIR = os.path.join(REPO, "tests", "mps")
H100 = 'gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-%s-0000-0000-0000-%012d mem_total_mb=81559 procs=env\n'
H100_MB = 81559


def mps_daemons(root):
    """{pid: pipe dir} of the live stand-in control daemons (`-d` processes)
    whose pipe directory lies under root."""
    found = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = f.read().split(b"\0")
            if not any(a.endswith(b"/nvidia-cuda-mps-control") for a in argv) or b"-d" not in argv:
                continue
            with open("/proc/%s/environ" % p, "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        pipe = env.get(b"CUDA_MPS_PIPE_DIRECTORY", b"").decode()
        if pipe.startswith(str(root)) and pid_alive(int(p)):
            found[int(p)] = pipe
    return found


def kill_daemons(root):
    for pid in mps_daemons(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def records(path, event=None):
    try:
        with open(str(path)) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError:
        return []
    return [r for r in rows if event is None or r["event"] == event]


def waiter(out, name):
    """A task command: writes its environment to OUT/NAME.env, then runs
    until OUT/NAME.stop exists."""
    os.makedirs(str(out), exist_ok=True)
    return ["sh", "-c", "env > %s/%s.env.tmp && mv %s/%s.env.tmp %s/%s.env; "
            "while [ ! -e %s/%s.stop ]; do sleep 0.05; done" % ((out, name) * 4)]


def env_of(out, name):
    try:
        with open(os.path.join(str(out), name + ".env")) as f:
            return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    except OSError:
        return None


def stop(out, name):
    open(os.path.join(str(out), name + ".stop"), "w").close()


def start_mps_server(tmp_path, monkeypatch, daemon_factory, gpus_extra=""):
    tmp_path.mkdir(exist_ok=True)
    nvml = tmp_path / "nvml.conf"
    nvml.write_text("".join(H100 % ("a1b2c3d4", i) for i in range(2)))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(nvml))
    monkeypatch.setenv("PATH", STANDIN_DIR + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("FAKE_MPS_RECORD", str(tmp_path / "mps-record"))
    return daemon_factory('gpus: {backend: nvml, poll_ms: 200, sharing: mps, nvml_library: "%s"%s}\n'
                          'tasks: {kill_grace_s: 1}\n' % (fake_nvml_lib(), gpus_extra))


def task(d, tid):
    return d.api("GET", "/api/v1/tasks/%d" % tid).json()


def gpu(d, index):
    return [g for g in d.api("GET", "/api/v1/gpus").json()["gpus"] if g["index"] == index][0]


def test_shared_tasks_are_clients_of_one_daemon_per_gpu_which_quits_after_the_last(tmp_path, monkeypatch,
                                                                                   daemon_factory):
    out, rec = tmp_path / "out", tmp_path / "mps-record"
    try:
        d = start_mps_server(tmp_path, monkeypatch, daemon_factory)
        g0 = gpu(d, 0)
        assert g0["isolation"] == "mps" and g0["mps"] == {"daemon": "stopped", "pid": None, "error": None}, g0
        assert not mps_daemons(tmp_path)  # none before the first MPS task
        # the task's own env cannot loosen its limits: gpupool's variables come last
        r1 = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "a"), "memory_mb": 20000, "compute_pct": 30,
                                                  "env": {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=80000M",
                                                          "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}})
        r2 = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "b"), "memory_mb": 8000})
        assert r1.status_code == 201 and r2.status_code == 201, (r1.text, r2.text)
        a, b = r1.json()["id"], r2.json()["id"]
        ea = wait_for(lambda: env_of(out, "a"), timeout=15, what="task a's environment")
        eb = wait_for(lambda: env_of(out, "b"), timeout=15, what="task b's environment")
        ta, tb = task(d, a), task(d, b)
        assert ta["gpus"][0]["index"] == tb["gpus"][0]["index"] == 0, (ta, tb)  # packed on GPU 0
        pipe = os.path.join(d.data_dir, "mps", "0", "pipe")
        for e, mb, pct in ((ea, 20000, "30"), (eb, 8000, str(-(-8000 * 100 // H100_MB)))):
            assert os.path.realpath(e["CUDA_MPS_PIPE_DIRECTORY"]) == os.path.realpath(pipe), e
            assert e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=%dM" % mb, e
            assert e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == pct, e
            assert e["CUDA_VISIBLE_DEVICES"] == g0["uuid"], e  # the daemon sees one GPU: named by uuid
        assert ta["isolation"] == tb["isolation"] == "mps", (ta, tb)
        assert ta["compute_pct"] == 30 and tb["compute_pct"] == 10, (ta, tb)
        # exactly one daemon, for GPU 0, started once with its GPU and directories
        live = mps_daemons(tmp_path)
        assert len(live) == 1 and os.path.realpath(list(live.values())[0]) == os.path.realpath(pipe), live
        starts = records(rec, "start")
        assert len(starts) == 1 and starts[0]["pid"] == list(live)[0], starts
        assert starts[0]["env"]["CUDA_VISIBLE_DEVICES"] == g0["uuid"]
        assert os.path.realpath(starts[0]["env"]["CUDA_MPS_LOG_DIRECTORY"]) == os.path.realpath(
            os.path.join(d.data_dir, "mps", "0", "log"))
        assert gpu(d, 0)["mps"] == {"daemon": "running", "pid": list(live)[0], "error": None}
        assert gpu(d, 1)["mps"]["daemon"] == "stopped" and gpu(d, 1)["isolation"] == "mps"
        st = d.cli("status", str(b))
        assert re.search(r"isolation: +mps \(an MPS client: at most 8000 MB of GPU memory, 10% of its compute\)",
                         st.stdout), st.stdout
        assert tb["cuda_visible_devices"] == g0["uuid"], tb
        gl = d.cli("gpus")
        row = [ln for ln in gl.stdout.splitlines() if ln.startswith("local:0 ")]
        assert "ISOLATION" in gl.stdout and row and " mps " in row[0], gl.stdout
        # a whole-GPU task on such a GPU: nobody beside it, no MPS client
        rw = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "w")})
        w = rw.json()["id"]
        ew = wait_for(lambda: env_of(out, "w"), timeout=15, what="the whole-GPU task's environment")
        assert "CUDA_MPS_PIPE_DIRECTORY" not in ew and task(d, w)["isolation"] == "none", ew
        assert task(d, w)["gpus"][0]["index"] == 1 and len(mps_daemons(tmp_path)) == 1
        # one client left: the daemon stays
        stop(out, "a")
        wait_for(lambda: task(d, a)["state"] == "succeeded", timeout=15, what="task a's end")
        time.sleep(1.5)
        assert list(mps_daemons(tmp_path)) == list(live), "the daemon went while a client ran"
        # the last one ends: told to quit, gone
        stop(out, "b")
        stop(out, "w")
        wait_for(lambda: task(d, b)["state"] == "succeeded", timeout=15, what="task b's end")
        wait_for(lambda: not mps_daemons(tmp_path), timeout=15, what="the daemon to quit")
        assert [r["command"] for r in records(rec, "command")] == ["quit"], records(rec)
        assert len(records(rec, "exit")) == 1
        assert wait_for(lambda: gpu(d, 0)["mps"]["daemon"] == "stopped", timeout=5)
        assert not os.path.exists(os.path.join(pipe, "nvidia-cuda-mps-control.pid"))
        with open(d.log_path) as f:
            log = f.read()
        assert "GPU 0: MPS control daemon started (pid %d" % list(live)[0] in log
        assert "GPU 0: no MPS client left" in log
        # a new MPS task starts a new daemon
        r3 = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "c"), "memory_mb": 1000})
        wait_for(lambda: env_of(out, "c"), timeout=15, what="task c's environment")
        assert len(mps_daemons(tmp_path)) == 1 and len(records(rec, "start")) == 2
        stop(out, "c")
        wait_for(lambda: task(d, r3.json()["id"])["state"] == "succeeded", timeout=15)
        wait_for(lambda: not mps_daemons(tmp_path), timeout=15, what="the second daemon to quit")
    finally:
        kill_daemons(tmp_path)


def test_a_daemon_that_cannot_start_fails_the_task_with_the_reason(tmp_path, monkeypatch, daemon_factory):
    out = tmp_path / "out"
    try:
        monkeypatch.setenv("FAKE_MPS_FAIL", "cannot load the NVIDIA driver (stand-in)")
        d = start_mps_server(tmp_path, monkeypatch, daemon_factory)
        r = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "x"), "memory_mb": 4000, "max_retries": 3})
        tid = r.json()["id"]
        t = wait_for(lambda: (lambda x: x if x["state"] == "failed" else None)(task(d, tid)), timeout=20)
        assert t["reason"].startswith("mps: the MPS control daemon of GPU 0 could not start: "), t
        assert "exited with 1: cannot load the NVIDIA driver (stand-in)" in t["reason"], t
        assert env_of(out, "x") is None  # the command never ran (outside MPS)
        g = gpu(d, 0)["mps"]
        assert g["daemon"] == "failed" and "cannot load the NVIDIA driver" in g["error"], g
        assert not mps_daemons(tmp_path)
        # a whole-GPU task needs no daemon: it runs
        rw = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "w")})
        wait_for(lambda: env_of(out, "w"), timeout=15, what="the whole-GPU task's environment")
        stop(out, "w")
        wait_for(lambda: task(d, rw.json()["id"])["state"] == "succeeded", timeout=15)
        # no such program: said so
        monkeypatch.delenv("FAKE_MPS_FAIL")
        d2 = start_mps_server(tmp_path / "two", monkeypatch, daemon_factory,
                   gpus_extra=', mps_control: "%s"' % (tmp_path / "no-such-mps-control"))
        r = d2.api("POST", "/api/v1/tasks", json={"command": waiter(out, "y"), "memory_mb": 4000})
        tid = r.json()["id"]
        t = wait_for(lambda: (lambda x: x if x["state"] == "failed" else None)(task(d2, tid)), timeout=20)
        assert "no-such-mps-control: not found" in t["reason"], t
    finally:
        kill_daemons(tmp_path)


def test_a_restarted_server_adopts_its_live_daemon_and_clears_a_dead_ones(tmp_path, monkeypatch, daemon_factory):
    out, rec = tmp_path / "out", tmp_path / "mps-record"
    try:
        d = start_mps_server(tmp_path, monkeypatch, daemon_factory)
        r = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "a"), "memory_mb": 4000})
        a = r.json()["id"]
        wait_for(lambda: env_of(out, "a"), timeout=15, what="task a's environment")
        live = mps_daemons(tmp_path)
        assert len(live) == 1, live
        kill9(d)
        restart(d)  # the task ran on; its daemon too
        time.sleep(1.5)  # the loop's looks
        assert mps_daemons(tmp_path) == live and len(records(rec, "start")) == 1
        assert task(d, a)["state"] == "running" and task(d, a)["isolation"] == "mps"
        assert gpu(d, 0)["mps"] == {"daemon": "running", "pid": list(live)[0], "error": None}
        with open(d.log_path) as f:
            assert "GPU 0: adopted its running MPS control daemon (pid %d)" % list(live)[0] in f.read()
        stop(out, "a")
        wait_for(lambda: task(d, a)["state"] == "succeeded", timeout=15)
        wait_for(lambda: not mps_daemons(tmp_path), timeout=15, what="the adopted daemon to quit")
        # a daemon that died while the server was down: its pipe dir is cleared, a new one starts
        r = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "b"), "memory_mb": 4000})
        b = r.json()["id"]
        wait_for(lambda: env_of(out, "b"), timeout=15, what="task b's environment")
        old = list(mps_daemons(tmp_path))
        kill9(d)
        for pid in old:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not mps_daemons(tmp_path), timeout=5)
        pipe = os.path.join(d.data_dir, "mps", "0", "pipe")
        assert os.path.exists(os.path.join(pipe, "nvidia-cuda-mps-control.pid"))  # left behind
        restart(d)
        wait_for(lambda: not os.path.exists(os.path.join(pipe, "nvidia-cuda-mps-control.pid")), timeout=5,
                 what="the stale pid file to be cleared")
        with open(d.log_path) as f:
            assert "GPU 0: its MPS control daemon is gone; cleared" in f.read()
        stop(out, "b")
        wait_for(lambda: task(d, b)["state"] == "succeeded", timeout=15)
        r = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "c"), "memory_mb": 4000})
        wait_for(lambda: env_of(out, "c"), timeout=15, what="task c's environment")
        assert len(mps_daemons(tmp_path)) == 1 and len(records(rec, "start")) == 3  # a's, b's, c's
        stop(out, "c")
    finally:
        kill_daemons(tmp_path)


def test_compute_pct_and_sharing_are_checked(tmp_path, monkeypatch, daemon_factory):
    try:
        d = start_mps_server(tmp_path, monkeypatch, daemon_factory)
        for body, what in (({"command": ["true"], "memory_mb": 1000, "compute_pct": 0}, "compute_pct"),
                           ({"command": ["true"], "memory_mb": 1000, "compute_pct": 101}, "compute_pct"),
                           ({"command": ["true"], "memory_mb": 1000, "compute_pct": "50"}, "compute_pct"),
                           ({"command": ["true"], "compute_pct": 50}, "share a GPU"),
                           ({"memory_mb": 1000, "compute_pct": 50}, "batch tasks")):
            r = d.api("POST", "/api/v1/tasks", json=body)
            assert r.status_code == 400 and what in r.json()["error"]["message"], (body, r.text)
        out = d.cli("submit", "--mem", "1000", "--compute-pct", "40", "--", "sleep", "30")
        assert out.returncode == 0, out.stderr
        tid = int(re.search(r"\d+", out.stdout).group(0))
        assert task(d, tid)["compute_pct"] == 40
        d.api("POST", "/api/v1/tasks/%d/cancel" % tid)
        bad = d.cli("submit", "--mem", "1000", "--compute-pct", "0", "--", "true")
        assert bad.returncode == 2 and "--compute-pct" in bad.stderr, bad.stderr
        # a config that names a sharing mode gpupool does not know is refused
        cfg = tmp_path / "bad.yaml"
        cfg.write_text("gpus: {backend: sim, sharing: hami}\n")
        chk = d.cli("server", "--config", str(cfg), "--data-dir", str(tmp_path / "bad-data"), "--listen",
                    "127.0.0.1:0", timeout=20)
        assert chk.returncode != 0 and "gpus.sharing" in chk.stderr and "hami" in chk.stderr, chk
    finally:
        kill_daemons(tmp_path)


def test_a_shared_task_on_an_agent_is_a_client_of_the_agents_daemon(cluster, tmp_path):
    """The server's gpus.sharing: mps covers its agents' GPUs: the start
    says the run is an MPS client, the agent runs the GPU's daemon (found
    on its PATH, under its data dir), quits it after the run, and a
    restarted agent keeps the daemon of a run that still goes on."""
    out, rec = tmp_path / "out", tmp_path / "mps-record"
    try:
        cluster.start_server(server_config().replace(
            "gpus: {backend: none}", "gpus: {backend: none, sharing: mps}"))
        nvml = tmp_path / "nvml-agent.conf"
        nvml.write_text("".join(H100 % ("e5f6e5f6", i) for i in range(2)))
        env = {"FAKE_NVML_CONFIG": str(nvml), "PATH": STANDIN_DIR + os.pathsep + os.environ["PATH"],
               "FAKE_MPS_RECORD": str(rec)}
        a = cluster.agent("mps-a", gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % fake_nvml_lib(), env=env)
        gpus = cluster.server.api("GET", "/api/v1/gpus", timeout=10).json()["gpus"]
        assert [g["isolation"] for g in gpus] == ["mps", "mps"], gpus
        assert gpus[0]["mps"] == {"daemon": None, "pid": None, "error": None}, gpus[0]
        t1 = cluster.submit(waiter(out, "a"), memory_mb=20000, compute_pct=35)
        t2 = cluster.submit(waiter(out, "b"), memory_mb=8000)
        ea = wait_for(lambda: env_of(out, "a"), timeout=20, what="run a's environment")
        eb = wait_for(lambda: env_of(out, "b"), timeout=20, what="run b's environment")
        x1, x2 = cluster.task(t1["id"]), cluster.task(t2["id"])
        assert x1["gpus"][0]["index"] == x2["gpus"][0]["index"] == 0 and x1["isolation"] == "mps", (x1, x2)
        pipe = os.path.join(a.data_dir, "mps", "0", "pipe")
        for e, mb, pct in ((ea, 20000, "35"), (eb, 8000, "10")):
            assert os.path.realpath(e["CUDA_MPS_PIPE_DIRECTORY"]) == os.path.realpath(pipe), e
            assert e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=%dM" % mb, e
            assert e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == pct, e
            assert e["CUDA_VISIBLE_DEVICES"] == gpus[0]["uuid"], e
        live = mps_daemons(tmp_path)
        assert len(live) == 1 and os.path.realpath(list(live.values())[0]) == os.path.realpath(pipe), live
        assert len(records(rec, "start")) == 1
        # the agent restarts: the runs go on, and so does their daemon
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait(timeout=10)
        a.start()
        time.sleep(2)
        assert mps_daemons(tmp_path) == live and len(records(rec, "start")) == 1
        stop(out, "a")
        cluster.wait_task(t1["id"], "succeeded", timeout=20)
        time.sleep(1.5)
        assert mps_daemons(tmp_path) == live, "the daemon went while a client ran"
        stop(out, "b")
        cluster.wait_task(t2["id"], "succeeded", timeout=20)
        wait_for(lambda: not mps_daemons(tmp_path), timeout=15, what="the agent's daemon to quit")
        assert [r["command"] for r in records(rec, "command")] == ["quit"], records(rec)
    finally:
        kill_daemons(tmp_path)


def test_a_daemon_that_cannot_start_on_an_agent_fails_the_run_with_the_reason(cluster, tmp_path):
    out = tmp_path / "out"
    try:
        cluster.start_server(server_config().replace(
            "gpus: {backend: none}", "gpus: {backend: none, sharing: mps}"))
        nvml = tmp_path / "nvml-agent.conf"
        nvml.write_text(H100 % ("f7f8f7f8", 0))
        env = {"FAKE_NVML_CONFIG": str(nvml), "PATH": STANDIN_DIR + os.pathsep + os.environ["PATH"],
               "FAKE_MPS_FAIL": "no driver on this node (stand-in)"}
        cluster.agent("mps-f", gpus='gpus: {backend: nvml, nvml_library: "%s"}\n' % fake_nvml_lib(), env=env)
        t = cluster.submit(waiter(out, "x"), memory_mb=4000, max_retries=0)
        t = cluster.wait_task(t["id"], "failed", timeout=30)
        assert "mps: the MPS control daemon of GPU 0 could not start: " in t["reason"], t
        assert "no driver on this node (stand-in)" in t["reason"], t
        assert env_of(out, "x") is None and not mps_daemons(tmp_path)
    finally:
        kill_daemons(tmp_path)


def test_a_preempted_clients_daemon_stays_until_its_run_has_stopped(tmp_path, monkeypatch, daemon_factory):
    """A preempted MPS client's run may take its grace to stop: its daemon
    stays while it does, and quits once it is gone (the task waits in the
    queue, no other client runs)."""
    out = tmp_path / "out"
    try:
        nvml = tmp_path / "nvml.conf"
        nvml.write_text(H100 % ("c0c0c0c0", 0))
        monkeypatch.setenv("FAKE_NVML_CONFIG", str(nvml))
        monkeypatch.setenv("PATH", STANDIN_DIR + os.pathsep + os.environ["PATH"])
        d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, sharing: mps, nvml_library: "%s"}\n'
                           'scheduler: {preemption: {enabled: true, min_runtime_sec: 0, grace_sec: 5}}\n'
                           'tasks: {kill_grace_s: 5}\n' % fake_nvml_lib())
        os.makedirs(str(out))
        # on SIGTERM it lingers 3 s (a checkpoint), then exits
        slow = ["sh", "-c", "echo $$ > %s/slow.pid; trap 'sleep 3; exit 0' TERM; "
                "while :; do sleep 0.1; done" % out]
        r = d.api("POST", "/api/v1/tasks", json={"command": slow, "memory_mb": 30000, "priority": 9,
                                                 "preemptible": True})
        low = r.json()["id"]
        wait_for(lambda: os.path.exists(str(out / "slow.pid")), timeout=15, what="the client's start")
        pid = int(open(str(out / "slow.pid")).read())
        live = mps_daemons(tmp_path)
        assert len(live) == 1, live
        r = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "urgent"), "priority": 0})
        urgent = r.json()["id"]
        wait_for(lambda: task(d, low)["state"] == "queued", timeout=10, what="the client's preemption")
        time.sleep(1.5)  # its run stops in its grace: the loop looks at the daemons meanwhile
        assert pid_alive(pid), "the preempted run should still be stopping"
        assert mps_daemons(tmp_path) == live, "its daemon went while the preempted run still ran"
        wait_for(lambda: not pid_alive(pid), timeout=15, what="the preempted run to end")
        wait_for(lambda: not mps_daemons(tmp_path), timeout=15, what="the daemon to quit after it")
        ew = wait_for(lambda: env_of(out, "urgent"), timeout=15, what="the urgent whole-GPU task")
        assert "CUDA_MPS_PIPE_DIRECTORY" not in ew and task(d, urgent)["isolation"] == "none"
        stop(out, "urgent")
    finally:
        kill_daemons(tmp_path)


def test_clients_on_two_gpus_get_one_daemon_each(tmp_path, monkeypatch, daemon_factory):
    out, rec = tmp_path / "out", tmp_path / "mps-record"
    try:
        d = start_mps_server(tmp_path, monkeypatch, daemon_factory)
        gpus = {g["index"]: g for g in d.api("GET", "/api/v1/gpus").json()["gpus"]}
        # 70000 + 30000 MB do not fit one GPU (81559 - 2000 usable): one on each
        a = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "a"), "memory_mb": 70000}).json()["id"]
        b = d.api("POST", "/api/v1/tasks", json={"command": waiter(out, "b"), "memory_mb": 30000}).json()["id"]
        ea = wait_for(lambda: env_of(out, "a"), timeout=15, what="task a's environment")
        eb = wait_for(lambda: env_of(out, "b"), timeout=15, what="task b's environment")
        ia, ib = task(d, a)["gpus"][0]["index"], task(d, b)["gpus"][0]["index"]
        assert {ia, ib} == {0, 1}, (ia, ib)
        live = mps_daemons(tmp_path)
        assert sorted(os.path.basename(os.path.dirname(p)) for p in live.values()) == ["0", "1"], live
        for e, i in ((ea, ia), (eb, ib)):
            assert e["CUDA_VISIBLE_DEVICES"] == gpus[i]["uuid"], e
            assert e["CUDA_MPS_PIPE_DIRECTORY"].endswith("/mps/%d/pipe" % i), e
        starts = records(rec, "start")
        assert sorted(s["env"]["CUDA_VISIBLE_DEVICES"] for s in starts) == sorted(g["uuid"] for g in gpus.values())
        stop(out, "a")
        wait_for(lambda: len(mps_daemons(tmp_path)) == 1, timeout=15, what="GPU %d's daemon to quit" % ia)
        assert list(mps_daemons(tmp_path).values())[0].endswith("/mps/%d/pipe" % ib)
        stop(out, "b")
        wait_for(lambda: not mps_daemons(tmp_path), timeout=15, what="the other daemon to quit")
    finally:
        kill_daemons(tmp_path)
