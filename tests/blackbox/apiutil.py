"""Helpers of the black-box API tests (test_api.py, test_recovery.py,
test_nvml.py, test_bad_input.py): small wrappers over the HTTP API of a
running gpupool daemon (conftest.Daemon), polling with deadlines, process
inspection through /proc, and cleanup of the task supervisors a test left
behind.

Supervisors are started in a session of their own (setsid), so they are neither the
daemon's children nor in its process group: stopping the daemon leaves them
(and the tasks) running, on purpose.  The autouse fixture `reap_supervisors`
(import it into a test module) kills, when a test ends, every process in the
session of every supervisor recorded under the test's tmp_path, after the
daemon fixtures have stopped their daemons.
"""
import glob
import hashlib
import os
import signal
import subprocess
import time

import pytest
import requests

from conftest import Daemon, free_port, gpupool_bin

LONG_TTL = 600          # leases that must not expire during a test


# ---- HTTP -----------------------------------------------------------------

def submit_raw(d, body, path="/api/v1/tasks"):
    return d.api("POST", path, json=body, timeout=10)


def submit(d, **body):
    """POST a task; assert 201; return the task object."""
    r = submit_raw(d, body)
    assert r.status_code == 201, (body, r.status_code, r.text)
    return r.json()


def lease(d, **body):
    body.setdefault("lease_ttl_s", LONG_TTL)
    return submit(d, **body)


def batch(d, command, **body):
    body["command"] = list(command)
    return submit(d, **body)


def task(d, tid):
    r = d.api("GET", "/api/v1/tasks/%d" % tid, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def post(d, path, body=None, **kw):
    if body is not None:
        kw["json"] = body
    return d.api("POST", path, timeout=10, **kw)


def gpus(d):
    r = d.api("GET", "/api/v1/gpus", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["gpus"]


def gpu(d, index):
    return [g for g in gpus(d) if g["index"] == index][0]


def fill_gpus(d, n=4):
    """Hold every GPU with an exclusive lease (memory_mb 0 = whole GPU)."""
    held = [lease(d, name="filler-%d" % i) for i in range(n)]
    for t in held:
        assert t["state"] == "running", t
    assert sorted(t["gpus"][0]["index"] for t in held) == list(range(n))
    return held


def assert_error(r, status, code=None):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) >= {"error"}, body
    err = body["error"]
    assert isinstance(err.get("code"), str) and err["code"], body
    assert isinstance(err.get("message"), str) and err["message"], body
    if code:
        assert err["code"] == code, body
    return err["message"]


# ---- waiting ----------------------------------------------------------------

def wait_for(fn, timeout=10.0, what="condition", interval=0.05):
    """Call fn until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1f s waiting for %s (last: %r)" % (timeout, what, last))
        time.sleep(interval)


def wait_state(d, tid, states, timeout=10.0):
    if isinstance(states, str):
        states = (states,)
    box = {}

    def check():
        box["t"] = task(d, tid)
        return box["t"]["state"] in states

    try:
        wait_for(check, timeout, "task %d in %s" % (tid, states))
    except AssertionError:
        raise AssertionError("task %d not in %s after %.1f s: %r" % (tid, states, timeout, box.get("t")))
    return box["t"]


# ---- processes --------------------------------------------------------------

def _stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: fields start after the last ')'
    rest = s[s.rindex(")") + 2:].split()
    return rest  # rest[0] = state (field 3), rest[3] = session (field 6), rest[19] = starttime (22)


def pid_alive(pid):
    """True if the process exists and is not a zombie."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def read_pidfile(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def task_dir(d, tid):
    return os.path.join(d.data_dir, "tasks", str(tid))


def supervisor_pid(d, tid):
    """(pid, starttime) from TASK_DIR/supervisor.pid, or None."""
    try:
        with open(os.path.join(task_dir(d, tid), "supervisor.pid")) as f:
            pid, start = f.read().split()[:2]
        return int(pid), int(start)
    except (OSError, ValueError):
        return None


def session_members(sid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        st = _stat(int(p))
        if st is not None and int(st[3]) == sid:
            out.append(int(p))
    return out


def kill_supervisor_sessions(root, dirname="tasks"):
    """SIGKILL every supervisor whose pid file is under root and every
    process in its session (the daemon's starter child calls setsid before
    it forks the supervisor, so that session holds the supervisor and its
    task's process group and nothing else).  The daemon's supervisors are in
    DATA_DIR/tasks/ID/; an agent's (dirname "runs") in DATA_DIR/runs/T.E.R/."""
    for pf in glob.glob(os.path.join(str(root), "**", dirname, "*", "supervisor.pid"), recursive=True):
        try:
            with open(pf) as f:
                pid, start = (int(x) for x in f.read().split()[:2])
        except (OSError, ValueError):
            continue
        st = _stat(pid)
        if st is None or int(st[19]) != start:
            continue  # gone, or the pid was reused by someone else
        sid = int(st[3])
        if sid <= 1 or sid == os.getsid(0):
            continue  # never our own session
        for p in [pid] + session_members(sid):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(autouse=True)
def reap_supervisors(tmp_path):
    """Autouse in the modules that import it: set up before the daemon
    fixtures, so torn down after them."""
    yield
    kill_supervisor_sessions(tmp_path)


# ---- daemon life ------------------------------------------------------------

def kill9(d):
    """SIGKILL the daemon process alone (not its supervisors)."""
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(timeout=10)
    assert d.proc.returncode == -signal.SIGKILL
    d.stop()   # closes the log; nothing left to kill


def restart(d):
    """Start the daemon again on the same data dir (new port)."""
    if d.proc and d.proc.poll() is None:
        d.stop()
    d.start()
    return d


def run_server(args, env=None, timeout=15):
    """Run `gpupool server ARGS` expecting it to refuse to start."""
    return subprocess.run([gpupool_bin(), "server"] + list(args), env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def sha256_key(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


class KeyedDaemon(Daemon):
    """A daemon with admin keys configured: readiness is probed with a key
    (Daemon.start probes /readyz without one)."""

    def __init__(self, tmp_path, config_text, key):
        super().__init__(tmp_path, config_text)
        self.key = key

    def start(self, timeout=20.0):
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.config_path, "w") as f:
            f.write(self.config_text)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.bin, "server", "--config", self.config_path,
             "--listen", "127.0.0.1:%d" % self.port, "--data-dir", self.data_dir],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        hdr = {"Authorization": "Bearer " + self.key}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("gpupool server exited with %s:\n%s" % (self.proc.returncode, self.log()))
            try:
                if requests.get(self.url + "/readyz", headers=hdr, timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("gpupool server not ready within %.0f s:\n%s" % (timeout, self.log()))
