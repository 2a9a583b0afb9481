"""Helpers of the cluster black-box tests (test_cluster.py,
test_cluster_partition.py): a real control-plane server (`gpus: {backend:
none}`) and real `gpupool agent` processes on loopback, each with its own
config, data dir and status port.

- `cluster` fixture -> Cluster: `.server` (a ClusterServer, a conftest.Daemon
  that keeps its port across restarts, so agents find it again),
  `.agent(name, ...)` starts an agent and waits until its node is ready,
  `.node(name)`, `.wait_node(name, state)`, `.submit(...)`.
- Agents run in a session of their own; the supervisors they start run in
  sessions of their own too.  When the test ends every agent is killed and
  every supervisor found under the test's tmp_path (agents' runs/*/ and the
  server's tasks/*/) is killed with its session (apiutil.reap_supervisors).
- `ticker_cmd(dir)`: a task command (python3) that writes its pid to
  DIR/pid.<pid>, appends "start/tick/end PID NODE EPOCH_TIME" lines to
  DIR/marks every 0.1 s and ends on SIGTERM with an end mark (exit 143,
  after term_delay seconds more of ticks),
  so that tests can see which runs of a task were alive when and check that
  no two overlapped (`runs_from_marks`, `assert_no_overlap`).
"""
import glob
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import requests

from apiutil import kill_supervisor_sessions, wait_for
from conftest import Daemon, _require_bin, free_port, gpupool_bin, log_tail

TOKEN = "gpj_" + "5a" * 32                 # the config's join token
NODE_TIMEOUT_S = 3
PY = "/usr/bin/python3"


def sha(tok):
    return "sha256:" + hashlib.sha256(tok.encode()).hexdigest()


def server_config(node_timeout_s=NODE_TIMEOUT_S, tokens=(TOKEN,), extra="", fence_s=None, kill_grace_s=2):
    fence = ", fence_s: %d" % fence_s if fence_s is not None else ""
    return ("gpus: {backend: none}\n"
            "cluster: {join_tokens: [%s], node_timeout_s: %d%s}\n"
            "tasks: {kill_grace_s: %d}\n" % (", ".join('"%s"' % sha(t) for t in tokens), node_timeout_s, fence,
                                             kill_grace_s)) + extra


class ClusterServer(Daemon):
    """A Daemon that keeps its port (and so its URL) across restarts and can
    listen on another address (the partition test listens on 0.0.0.0)."""

    def __init__(self, tmp_path, config_text, listen_host="127.0.0.1"):
        super().__init__(tmp_path, config_text)
        self.listen_host = listen_host

    def start(self, timeout=20.0):
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.config_path, "w") as f:
            f.write(self.config_text)
        if self.port is None:
            self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.bin, "server", "--config", self.config_path,
             "--listen", "%s:%d" % (self.listen_host, self.port), "--data-dir", self.data_dir],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("gpupool server exited with %s before it was ready:\n%s"
                                   % (self.proc.returncode, self.log()))
            try:
                if requests.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("gpupool server not ready within %.0f s:\n%s" % (timeout, self.log()))

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()
        self._log = None

    def full_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


def sim_gpus(n, name="Sim GPU 16G", memory_mb=16000):
    return "gpus: {backend: sim, sim: [{name: \"%s\", memory_mb: %d, count: %d}]}\n" % (name, memory_mb, n)


class Agent:
    """One `gpupool agent` process with its config, data dir and log."""

    def __init__(self, tmp_path, server_url, name, token=TOKEN, gpus=None, labels=None, listen_host="127.0.0.1",
                 env=None, netns=None, heartbeat_s=1, extra=()):
        self.name = name
        self.extra = list(extra)    # more agent options (--ca-cert FILE, --insecure-plaintext, ...)
        self.dir = tmp_path / ("agent-" + name)
        n = 0
        while self.dir.exists():    # a second agent of the same name gets its own directory
            n += 1
            self.dir = tmp_path / ("agent-%s-%d" % (name, n))
        self.dir.mkdir()
        self.data_dir = str(self.dir / "data")
        self.config_path = str(self.dir / "agent.yaml")
        self.log_path = str(self.dir / "agent.log")
        self.server_url = server_url
        self.token = token
        self.listen_host = listen_host
        self.port = free_port()
        self.env = env
        self.netns = netns
        lab = ""
        if labels:
            lab = ", labels: {%s}" % ", ".join("%s: \"%s\"" % kv for kv in sorted(labels.items()))
        self.config_text = ((gpus if gpus is not None else sim_gpus(2)) +
                            "agent: {heartbeat_s: %d}\nnode: {name: %s%s}\n" % (heartbeat_s, name, lab))
        self.proc = None
        self._log = None

    def _port_free(self):
        """Whether the agent could bind its port now (with SO_REUSEADDR, as it does)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((self.listen_host, self.port))
                return True
            except OSError:
                return False

    def start(self):
        with open(self.config_path, "w") as f:
            f.write(self.config_text)
        # An agent started again takes its port again; between its stop and this start another
        # process may have taken it (a parallel test's free_port, or any outgoing connection, whose
        # ephemeral port comes from the same range), and the agent would then exit with "cannot
        # listen" (as it should for a configured port in use).  Under the whole suite in parallel
        # that failed a restarted agent's first sync in CI; a test takes a fresh port instead.
        if not self.netns and not self._port_free():
            self.port = free_port()
        argv = [gpupool_bin(), "agent", "--server", self.server_url, "--config", self.config_path,
                "--name", self.name, "--listen", "%s:%d" % (self.listen_host, self.port),
                "--data-dir", self.data_dir]
        if self.token:
            argv[4:4] = ["--token", self.token]
        argv += self.extra
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns] + argv
        env = dict(os.environ)
        for k in ("GPUPOOL_API", "GPUPOOL_API_KEY", "GPUPOOL_NODE", "GPUPOOL_SERVER_URLS", "GPUPOOL_JOIN_TOKEN",
                  "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
            env.pop(k, None)
        env.update(self.env or {})
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        return self

    def wait_exit(self, timeout=15):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("agent %s still running after %.0f s:\n%s" % (self.name, timeout, self.log()))

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        if self._log:
            self._log.close()
            self._log = None

    def log(self):
        return log_tail(self.log_path)

    def credential(self):
        # the server knows the node once the join is stored, a moment before the agent has its
        # answer and has written node.json
        path = os.path.join(self.data_dir, "node.json")
        wait_for(lambda: os.path.exists(path), 10, "the agent to keep its credential in node.json")
        with open(path) as f:
            return json.load(f)["credential"]

    def status_url(self):
        return "http://%s:%d" % (self.listen_host, self.port)


class Cluster:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.server = None
        self.agents = []

    def start_server(self, config_text=None, listen_host="127.0.0.1"):
        d = self.tmp / "server"
        d.mkdir()
        self.server = ClusterServer(d, config_text or server_config(), listen_host)
        try:
            self.server.start()
        except RuntimeError as e:
            self.server.stop()
            pytest.fail(str(e))
        return self.server

    def agent(self, name, wait=True, server_url=None, **kw):
        a = Agent(self.tmp, server_url or self.server.url, name, **kw)
        self.agents.append(a)
        a.start()
        if wait:
            self.wait_node(name, "ready", agent=a)
        return a

    # --- the server's view ---
    def nodes(self):
        r = self.server.api("GET", "/api/v1/nodes", timeout=10)
        assert r.status_code == 200, r.text
        return {n["name"]: n for n in r.json()["nodes"]}

    def node(self, name):
        return self.nodes().get(name)

    def pinned_token(self, token=TOKEN):
        """token as users get it: SECRET.CA_HASH, for agents on https:// (issue 22)."""
        r = self.server.api("GET", "/agent/v1/ca", timeout=10)
        assert r.status_code == 200, r.text
        return token + "." + r.json()["ca_hash"][len("sha256:"):]

    def wait_node(self, name, state, timeout=15, agent=None):
        box = {}

        def check():
            if agent is not None and not agent.running():
                raise AssertionError("agent %s exited with %s:\n%s" % (agent.name, agent.proc.returncode, agent.log()))
            box["n"] = self.node(name)
            return box["n"] is not None and box["n"]["state"] == state and box["n"]

        try:
            n = wait_for(check, timeout, "node %s %s" % (name, state), interval=0.1)
        except AssertionError as e:
            raise AssertionError("%s\nlast: %r\nserver log:\n%s" % (e, box.get("n"), self.server.log()))
        if agent is not None and state == "ready":
            # joined on both sides: the server marks the node ready once the join is stored, a
            # moment before the agent has its answer and writes node.json; killed in between, it
            # would need its token again (CI restarted agents without one in that window, twice)
            agent.credential()
        return n

    def submit(self, command, **body):
        body["command"] = list(command)
        r = self.server.api("POST", "/api/v1/tasks", json=body, timeout=10)
        assert r.status_code == 201, (body, r.status_code, r.text)
        return r.json()

    def task(self, tid):
        r = self.server.api("GET", "/api/v1/tasks/%d" % tid, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    def wait_task(self, tid, states, timeout=15, where=None):
        if isinstance(states, str):
            states = (states,)
        box = {}

        def check():
            box["t"] = self.task(tid)
            return box["t"]["state"] in states and (where is None or where(box["t"]))

        try:
            wait_for(check, timeout, "task %d in %s" % (tid, states), interval=0.1)
        except AssertionError:
            raise AssertionError("task %d not in %s after %.1f s: %r\nserver log:\n%s\nagents:\n%s"
                                 % (tid, states, timeout, box.get("t"), self.server.log(),
                                    "\n".join("--- %s\n%s" % (a.name, a.log()[-3000:]) for a in self.agents)))
        return box["t"]

    def logs(self, tid):
        r = self.server.api("GET", "/api/v1/tasks/%d/logs" % tid, timeout=10)
        assert r.status_code == 200, r.text
        return r.text

    def cli(self, *args, **kw):
        return self.server.cli(*args, **kw)

    def close(self):
        for a in self.agents:
            a.stop()
        if self.server:
            self.server.stop()
        kill_run_sessions(self.tmp)


def kill_run_sessions(root):
    """Kill every supervisor under root with its session: the agents' runs
    and the server's tasks, then ticker tasks whose supervisor is gone."""
    kill_supervisor_sessions(root, "runs")
    kill_supervisor_sessions(root)
    # ticker tasks whose supervisor is already gone: their pid files say who they are
    for pf in glob.glob(os.path.join(str(root), "**", "pid.*"), recursive=True):
        pid = int(pf.rsplit(".", 1)[1])
        if is_ticker(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def cluster(tmp_path):
    _require_bin()
    c = Cluster(tmp_path)
    yield c
    c.close()


# ---- task commands that leave traces ----------------------------------------

TICKER = r"""
import os, signal, sys, time
d, secs, code, term_delay = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
node = os.environ.get("GPUPOOL_NODE", "?")
rank = os.environ.get("GPUPOOL_NODE_RANK", "?")
me = os.getpid()
def mark(what):
    with open(os.path.join(d, "marks"), "a") as f:
        f.write("%s %d %s %s %.3f\n" % (what, me, node, rank, time.time()))
def term(*_):
    stop = time.time() + term_delay    # a run that takes its time to stop (a checkpoint)
    while time.time() < stop:
        mark("tick")
        time.sleep(0.1)
    mark("end")
    os._exit(143)
signal.signal(signal.SIGTERM, term)
tmp = os.path.join(d, ".pid.%d" % me)   # renamed into place whole: a reader never sees it half written
with open(tmp, "w") as f:
    f.write("%d %s %s\n" % (me, node, rank))
os.rename(tmp, os.path.join(d, "pid.%d" % me))
mark("start")
print("ticker", me, "on", node, "rank", rank, flush=True)
end = time.time() + secs
while time.time() < end:
    mark("tick")
    time.sleep(0.1)
mark("end")
print("ticker done", flush=True)
sys.exit(code)
"""
TICKER_TAG = "gpupool-ctest-ticker"


def ticker_cmd(d, secs=60, code=0, term_delay=0):
    """The command of a task that ticks into directory d (see the module doc);
    on SIGTERM it goes on ticking term_delay seconds before it ends."""
    os.makedirs(str(d), exist_ok=True)
    return [PY, "-c", TICKER, str(d), str(secs), str(code), str(term_delay), TICKER_TAG]


def is_ticker(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return TICKER_TAG.encode() in f.read()
    except OSError:
        return False


def ticker_pids(d):
    """pid -> (node, rank) of every start of the ticker in d."""
    out = {}
    for pf in glob.glob(os.path.join(str(d), "pid.*")):
        with open(pf) as f:
            pid, node, rank = f.read().split()
        out[int(pid)] = (node, rank)
    return out


def live_tickers(d):
    from apiutil import pid_alive
    return sorted(p for p in ticker_pids(d) if pid_alive(p) and is_ticker(p))


def runs_from_marks(d):
    """pid -> [first mark time, last mark time, node, ended (an end mark)]."""
    runs = {}
    try:
        with open(os.path.join(str(d), "marks")) as f:
            lines = f.read().splitlines()
    except OSError:
        return runs
    for line in lines:
        parts = line.split()
        if len(parts) != 5:
            continue
        what, pid, node, _rank, t = parts[0], int(parts[1]), parts[2], parts[3], float(parts[4])
        r = runs.setdefault(pid, [t, t, node, False])
        r[0] = min(r[0], t)
        r[1] = max(r[1], t)
        if what == "end":
            r[3] = True
    return runs


def assert_no_overlap(d, slack=0.0):
    """No two runs in d were alive at once (by their marks: a run's life is
    from its first to its last mark; ticks are 0.1 s apart)."""
    runs = sorted(runs_from_marks(d).values())
    for a, b in zip(runs, runs[1:]):
        assert a[1] <= b[0] + slack, "two runs overlap: %r and %r (all: %r)" % (a, b, runs)
    return runs


# ---- raw agent messages -------------------------------------------------------

def agent_post(url, path, body, bearer, timeout=10):
    """POST an agent message with urllib; returns (status, parsed JSON or text)."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + bearer})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def now_us():
    return int(time.time() * 1e6)


# How long a restarted agent's first sync may take to show (in its log, or in what the server
# knows of its node): alone under 5 s.  The CI runs that passed 10, 15 and 30 s (c5d40be, 2f7c9a1,
# 660d422, b4593b2) were most likely agents that never started: their port taken while they were
# down (Agent.start now takes a fresh one); the margin stays for a loaded machine.
FIRST_SYNC_S = 30


def log_has(path_or_fn, needle, timeout=10):
    def text():
        return path_or_fn() if callable(path_or_fn) else open(path_or_fn, "rb").read().decode("utf-8", "replace")

    try:
        wait_for(lambda: needle in text(), timeout, "%r in the log" % needle, interval=0.1)
    except AssertionError as e:  # what the process said instead
        raise AssertionError("%s; the log's end:\n%s" % (e, text()[-4000:])) from None

