"""Every task in a cgroup of its own: CPU and RAM limits, and a kill that
reaches what left the task's process group (issue 25; docs/isolation.md
"CPU and RAM", docs/internals/exec.md "cgroups").

Real cgroups, as root, on the machine's own hierarchies (v1 or v2): a task
whose child double-forks a `sleep` into a session of its own (setsid) is
still killed when the task is cancelled and when it ends (counted by pid);
a task limited to 64 MiB of RAM that allocates 300 MB is OOM-killed alone
(its neighbour lives on) and ends failed with reason host_memory_exceeded;
`--cpus 1` is the cgroup's CPU quota (read from the file); the cgroup's
directory is gone once the run has ended.  Skipped, saying why, where the
machine has no writable cgroup.
"""
import os
import signal
import time

import pytest

from apiutil import (batch, pid_alive, reap_supervisors, submit_raw, supervisor_pid, task,  # noqa: F401
                     wait_for, wait_state)
from clusterutil import cluster  # noqa: F401

pytestmark = pytest.mark.e2e

CG = "/sys/fs/cgroup"


def cgroup_version():
    """2 or 1 as the server will find it (exec/cgroup.c), else None."""
    own2 = None
    with open("/proc/self/cgroup") as f:
        lines = f.read().splitlines()
    for line in lines:
        num, ctrls, path = line.split(":", 2)
        if num == "0" and ctrls == "":
            own2 = path
    for root in (CG, CG + "/unified"):
        try:
            with open(root + (own2 or "/").rstrip("/") + "/cgroup.controllers") as f:
                ctl = f.read().split()
        except OSError:
            continue
        if "memory" in ctl and "cpu" in ctl:
            return 2
    for line in lines:
        num, ctrls, path = line.split(":", 2)
        if "memory" in ctrls.split(","):
            d = CG + "/memory" + (path if path != "/" else "")
            if os.access(d + "/memory.limit_in_bytes", os.W_OK):
                return 1
    return None


VERSION = cgroup_version() if os.geteuid() == 0 else None
need_cgroup = pytest.mark.skipif(VERSION is None, reason="this machine has no writable cgroup (v2 with memory and cpu, "
                                                         "or v1 memory) for this user: nothing to limit with")


def require(d):
    """The cgroup version the server found (its node local's), or skip,
    saying why (cgroup2 where the daemon shares its cgroup with other
    processes: only a unit with Delegate=yes may enable controllers)."""
    global VERSION
    local = [x for x in d.api("GET", "/api/v1/nodes").json()["nodes"] if x["name"] == "local"][0]
    if local["cgroup"] is None:
        why = [line for line in d.log().splitlines() if "cgroups:" in line]
        pytest.skip("the server runs tasks without cgroups here: %s" % (why[-1] if why else "?"))
    VERSION = int(local["cgroup"][1])
    return VERSION


def proc_cgroups(pid):
    """{controller or "": path} of a live process."""
    out = {}
    with open("/proc/%d/cgroup" % pid) as f:
        for line in f.read().splitlines():
            _, ctrls, path = line.split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    return out


def cg_dirs(pid):
    """The absolute cgroup dirs of pid that the supervisor made (memory, cpu; or the v2 one)."""
    cgs = proc_cgroups(pid)
    if VERSION == 2:
        root = CG if os.path.exists(CG + "/cgroup.controllers") else CG + "/unified"
        return {"memory": root + cgs[""], "cpu": root + cgs[""]}
    return {"memory": CG + "/memory" + cgs["memory"], "cpu": CG + "/cpu" + cgs["cpu"]}


def read(path):
    with open(path) as f:
        return f.read()


def read_pid(path, timeout=10):
    def get():
        try:
            s = read(path).strip()
            return int(s) if s else None
        except (OSError, ValueError):
            return None
    return wait_for(get, timeout, "pid in %s" % path)


# a child that leaves the task's process group and session: setsid -f
# forks, the child starts a new session, writes its pid and becomes sleep
ESCAPE = "setsid -f sh -c 'echo $$ > %s; exec sleep 300'"


@need_cgroup
def test_a_process_that_left_its_group_is_killed_on_cancel(daemon, tmp_path):
    require(daemon)
    pf = tmp_path / "escaped.pid"
    t = batch(daemon, ["sh", "-c", ESCAPE % pf + "; exec sleep 300"])
    wait_state(daemon, t["id"], "running")
    pid = read_pid(str(pf))
    assert pid_alive(pid)
    assert os.getsid(pid) == pid, "the sleep leads a session of its own: out of the task's group"
    dirs = cg_dirs(pid)
    assert "gpupool-task-%d-" % t["id"] in dirs["memory"], dirs
    assert os.path.isdir(dirs["memory"])
    r = daemon.api("POST", "/api/v1/tasks/%d/cancel" % t["id"])
    assert r.status_code in (200, 202), r.text
    wait_state(daemon, t["id"], "cancelled", timeout=20)
    # the supervisor writes result.json after the cgroup is empty and gone
    assert not pid_alive(pid), "the escaped sleep outlived its cancelled task"
    for d in set(dirs.values()):
        assert not os.path.exists(d), "cgroup dir %s left behind" % d


@need_cgroup
def test_a_process_that_left_its_group_is_killed_when_the_task_ends(daemon, tmp_path):
    require(daemon)
    pf = tmp_path / "escaped.pid"
    t = batch(daemon, ["sh", "-c", ESCAPE % pf + "; while [ ! -s %s ]; do sleep 0.05; done; exit 0" % pf])
    pid = read_pid(str(pf))
    t = wait_state(daemon, t["id"], "succeeded", timeout=20)
    assert t["exit_code"] == 0
    assert not pid_alive(pid), "the escaped sleep outlived its task"
    assert t["cgroup"] == ("v%d" % VERSION)


@need_cgroup
def test_a_lost_runs_processes_are_killed_with_its_cgroup(daemon, tmp_path):
    """A supervisor killed with SIGKILL cannot clean up: the server, which
    finds the run lost, kills what is left in its cgroup and removes it."""
    require(daemon)
    pf = tmp_path / "escaped.pid"
    t = batch(daemon, ["sh", "-c", ESCAPE % pf + "; exec sleep 300"])
    pid = read_pid(str(pf))
    wait_state(daemon, t["id"], "running")
    dirs = cg_dirs(pid)
    sup = supervisor_pid(daemon, t["id"])
    assert sup
    os.kill(sup[0], signal.SIGKILL)
    wait_state(daemon, t["id"], "lost", timeout=20)
    wait_for(lambda: not pid_alive(pid), 10, "the escaped sleep gone")
    for d in set(dirs.values()):
        assert not os.path.exists(d), "cgroup dir %s left behind" % d


PY_ALLOC = "import time; time.sleep(0.3); b = b'x' * (300 << 20); print('allocated', len(b))"


@need_cgroup
def test_a_task_over_its_ram_is_oom_killed_alone(daemon, tmp_path):
    require(daemon)
    pf = tmp_path / "neighbour.pid"
    n = batch(daemon, ["sh", "-c", "echo $$ > %s; exec sleep 300" % pf], host_memory_mb=64)
    npid = read_pid(str(pf))
    wait_state(daemon, n["id"], "running")
    # through the CLI: --host-mem 64M
    r = daemon.cli("submit", "--host-mem", "64M", "--", "/usr/bin/python3", "-c", PY_ALLOC)
    assert r.returncode == 0, r.stderr
    tid = int(r.stdout.strip())
    t = wait_state(daemon, tid, ("failed", "succeeded"), timeout=30)
    assert t["state"] == "failed", t
    assert t["reason"].startswith("host_memory_exceeded:"), t["reason"]
    assert "64 MiB" in t["reason"], t["reason"]
    assert t["host_memory_mb"] == 64 and t["cpus"] is None
    # the neighbour, in a cgroup of its own, lives on
    assert pid_alive(npid)
    assert task(daemon, n["id"])["state"] == "running"
    log = daemon.cli("logs", str(tid))
    assert "allocated" not in log.stdout
    daemon.api("POST", "/api/v1/tasks/%d/cancel" % n["id"])  # its cgroup goes with it
    wait_state(daemon, n["id"], "cancelled", timeout=20)
    assert not pid_alive(npid)


@need_cgroup
def test_cpus_and_host_memory_are_written_into_the_cgroup_and_it_is_removed_after(daemon, tmp_path):
    require(daemon)
    pf = tmp_path / "task.pid"
    t = batch(daemon, ["sh", "-c", "echo $$ > %s; exec sleep 300" % pf], cpus=1, host_memory_mb=256)
    pid = read_pid(str(pf))
    t = wait_state(daemon, t["id"], "running")
    assert t["cpus"] == 1 and t["host_memory_mb"] == 256 and t["cgroup"] == "v%d" % VERSION
    dirs = cg_dirs(pid)
    if VERSION == 2:
        assert read(dirs["cpu"] + "/cpu.max").split() == ["100000", "100000"]
        assert int(read(dirs["memory"] + "/memory.max")) == 256 << 20
    else:
        assert int(read(dirs["cpu"] + "/cpu.cfs_period_us")) == 100000
        assert int(read(dirs["cpu"] + "/cpu.cfs_quota_us")) == 100000
        assert int(read(dirs["memory"] + "/memory.limit_in_bytes")) == 256 << 20
    assert str(pid) in read(dirs["memory"] + "/cgroup.procs").split()
    st = daemon.cli("status", str(t["id"]))
    assert "1 CPUs, 256 MB RAM (cgroup v%d)" % VERSION in st.stdout, st.stdout
    r = daemon.api("POST", "/api/v1/tasks/%d/cancel" % t["id"])
    assert r.status_code in (200, 202), r.text
    wait_state(daemon, t["id"], "cancelled", timeout=20)
    for d in set(dirs.values()):
        assert not os.path.exists(d), "cgroup dir %s left behind" % d


@need_cgroup
def test_a_task_without_limits_still_gets_a_cgroup_of_its_own(daemon, tmp_path):
    require(daemon)
    pf = tmp_path / "task.pid"
    t = batch(daemon, ["sh", "-c", "echo $$ > %s; exec sleep 300" % pf])
    pid = read_pid(str(pf))
    t = wait_state(daemon, t["id"], "running")
    assert t["cpus"] is None and t["host_memory_mb"] is None
    dirs = cg_dirs(pid)
    assert "gpupool-task-%d-" % t["id"] in dirs["memory"]
    if VERSION == 1:
        assert int(read(dirs["cpu"] + "/cpu.cfs_quota_us")) == -1
    daemon.api("POST", "/api/v1/tasks/%d/cancel" % t["id"])
    wait_state(daemon, t["id"], "cancelled", timeout=20)
    assert not pid_alive(pid)


def test_bad_cpus_and_host_memory_are_refused(daemon):
    for body, word in (({"command": ["true"], "cpus": 0}, "cpus"),
                       ({"command": ["true"], "cpus": 4097}, "cpus"),
                       ({"command": ["true"], "cpus": "2"}, "cpus"),
                       ({"command": ["true"], "host_memory_mb": -1}, "host_memory_mb"),
                       ({"command": ["true"], "host_memory_mb": 1.5}, "host_memory_mb"),
                       ({"cpus": 2}, "cpus")):  # a lease has no processes to limit
        r = submit_raw(daemon, body)
        assert r.status_code == 400, (body, r.text)
        assert word in r.text, r.text
    r = daemon.cli("submit", "--cpus", "0", "--", "true")
    assert r.returncode != 0 and "--cpus" in r.stderr
    r = daemon.cli("submit", "--host-mem", "lots", "--", "true")
    assert r.returncode != 0 and "--host-mem" in r.stderr
    time.sleep(0)  # nothing was queued
    assert daemon.api("GET", "/api/v1/tasks").json()["tasks"] == []


def test_tasks_are_placed_by_the_cpus_they_ask_for(daemon):
    """The server's own node has this machine's CPUs: a task asking for
    more is refused at submit (no node could ever hold it); one that asks
    for what the running tasks leave free waits, saying so, and starts
    when they end."""
    n = os.cpu_count()
    r = submit_raw(daemon, {"command": ["true"], "cpus": n + 1})
    assert r.status_code >= 400, r.text
    assert "no node has %d CPUs (most on a node: %d)" % (n + 1, n) in r.text, r.text
    a = batch(daemon, ["sleep", "300"], cpus=n)
    wait_state(daemon, a["id"], "running")
    b = batch(daemon, ["sleep", "300"], cpus=1)
    c = batch(daemon, ["sleep", "300"])  # asks for no CPUs: GPUs are all it needs
    wait_state(daemon, c["id"], "running")

    def waiting():
        t = task(daemon, b["id"])
        return t["state"] == "queued" and "needs 1 CPUs, most free on a node is 0" in t["reason"] and t
    t = wait_for(waiting, 10, "task %d waiting for CPUs" % b["id"])
    assert t["reason_detail"]["code"] == "no_cpus", t
    daemon.api("POST", "/api/v1/tasks/%d/cancel" % a["id"])
    wait_state(daemon, b["id"], "running", timeout=20)
    for x in (b, c):
        daemon.api("POST", "/api/v1/tasks/%d/cancel" % x["id"])
        wait_state(daemon, x["id"], "cancelled", timeout=20)


def test_nodes_say_their_cgroup(daemon):
    nodes = daemon.api("GET", "/api/v1/nodes").json()["nodes"]
    local = [x for x in nodes if x["name"] == "local"][0]
    if VERSION == 1 or VERSION is None:  # v1: what the machine offers is what runs get
        assert local["cgroup"] == ("v1" if VERSION else None), local
    else:
        assert local["cgroup"] in ("v2", None), local
    assert local["cpus"] == os.cpu_count()


@need_cgroup
def test_an_agents_run_is_limited_and_killed_in_its_cgroup_too(cluster, tmp_path):
    """The agent starts runs with the same supervisor: its node reports
    its cgroup, a run over its RAM ends host_memory_exceeded, and an
    escaped process dies with a cancelled run."""
    cluster.start_server()
    cluster.agent("gpu-a")
    node = cluster.node("gpu-a")
    wait_for(lambda: cluster.node("gpu-a").get("cgroup") == "v%d" % VERSION, 15, "gpu-a reports its cgroup")
    assert node["cpus"] == os.cpu_count() or node["cpus"] is None
    t = cluster.submit(["/usr/bin/python3", "-c", PY_ALLOC], host_memory_mb=64, cpus=1)
    t = cluster.wait_task(t["id"], ("failed", "succeeded"), timeout=30)
    assert t["state"] == "failed" and t["reason"].startswith("host_memory_exceeded:"), t
    assert t["nodes"] == ["gpu-a"] and t["cgroup"] == "v%d" % VERSION, t
    pf = tmp_path / "escaped.pid"
    e = cluster.submit(["sh", "-c", ESCAPE % pf + "; exec sleep 300"])
    pid = read_pid(str(pf), timeout=20)
    assert os.getsid(pid) == pid
    r = cluster.server.api("POST", "/api/v1/tasks/%d/cancel" % e["id"])
    assert r.status_code in (200, 202), r.text
    cluster.wait_task(e["id"], "cancelled", timeout=30)
    wait_for(lambda: not pid_alive(pid), 10, "the escaped sleep gone")
