"""End-to-end tests of the gpupool command-line client against the real
daemon (fixtures in conftest.py: four simulated GPUs).

Tests marked e2e need the daemon; the others only need the binary.
Run: make blackbox, or
  GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_cli.py
"""
import hashlib
import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import free_port, gpupool_bin


def bin_or_skip():
    b = gpupool_bin()
    if not os.access(b, os.X_OK):
        pytest.skip("gpupool binary not built (%s)" % b)
    return b


def run_plain(*args, env_extra=None, timeout=30):
    env = dict(os.environ)
    env.pop("GPUPOOL_API", None)
    env.pop("GPUPOOL_API_KEY", None)
    env.update(env_extra or {})
    return subprocess.run([bin_or_skip()] + list(args), env=env, capture_output=True, text=True,
                          timeout=timeout)


def wait_state(d, task_id, states, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = d.api("GET", "/api/v1/tasks/%s" % task_id).json()
        if t["state"] in states:
            return t
        time.sleep(0.1)
    raise AssertionError("task %s not in %s after %ss: %s" % (task_id, states, timeout, t))


def submit(d, *args):
    r = d.cli("submit", *args)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"\d+\n", r.stdout), r.stdout
    return int(r.stdout)


# ---- without a server -----------------------------------------------------

def test_version_and_help_need_no_server():
    r = run_plain("version")
    assert r.returncode == 0
    assert r.stdout.startswith("gpupool ")
    r = run_plain("help")
    assert r.returncode == 0
    for cmd in ("submit", "run", "ps", "status", "cancel", "logs", "gpus", "queue", "nodes", "node", "join-token"):
        assert cmd in r.stdout
    r = run_plain("help", "submit")
    assert r.returncode == 0 and "--priority" in r.stdout and "--queue-timeout" in r.stdout


def test_unreachable_server_exits_3_with_hint():
    url = "http://127.0.0.1:%d" % free_port()
    r = run_plain("--api", url, "ps")
    assert r.returncode == 3
    assert r.stderr == ("gpupool: cannot reach %s: Connection refused (is `gpupool server` running?)\n" % url)
    r = run_plain("ps", env_extra={"GPUPOOL_API": url})
    assert r.returncode == 3


def test_usage_errors_exit_2_before_any_request():
    # the port is closed: a request would give exit 3, so 2 proves nothing was sent
    url = "http://127.0.0.1:%d" % free_port()
    for args, needle in [
        (["submit", "--priority", "12", "--", "true"], "0..9"),
        (["submit", "--gpus", "two", "--", "true"], "--gpus"),
        (["submit", "--env", "NOEQUALS", "--", "true"], "--env"),
        (["submit", "--gpus", "1"], "missing COMMAND"),
        (["status", "abc"], "task id"),
        (["ps", "--state", "sleeping"], "--state"),
        (["run", "--ttl", "0", "--", "true"], "--ttl"),
        (["nosuchcommand"], "unknown command"),
    ]:
        r = run_plain("--api", url, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert needle in r.stderr, (args, r.stderr)
        assert "usage: gpupool" in r.stderr, (args, r.stderr)


# ---- against the daemon ---------------------------------------------------

@pytest.mark.e2e
def test_submit_prints_only_the_id_and_status_shows_the_task(daemon):
    tid = submit(daemon, "--name", "hello", "--priority", "high", "--", "sh", "-c", "echo hi")
    t = wait_state(daemon, tid, {"succeeded"})
    assert t["priority"] == 2 and t["name"] == "hello"
    r = daemon.cli("status", tid)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^id:\s+%d$" % tid, r.stdout, re.M)
    assert re.search(r"^name:\s+hello$", r.stdout, re.M)
    assert re.search(r"^state:\s+succeeded$", r.stdout, re.M)
    assert re.search(r"^priority:\s+P2 \(high\)$", r.stdout, re.M)
    assert re.search(r"^exit code:\s+0$", r.stdout, re.M)
    assert re.search(r"^backend:\s+sim \(simulated GPUs\)$", r.stdout, re.M)


@pytest.mark.e2e
def test_json_flag_prints_the_servers_json(daemon):
    r = daemon.cli("--json", "submit", "--gpus", "2", "--mem", "1024", "--", "sleep", "0.2")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)
    assert t["gpu_request"] == 2 and t["memory_mb"] == 1024 and t["backend"] == "sim"
    r = daemon.cli("ps", "--all", "--json")
    assert r.returncode == 0
    assert t["id"] in [x["id"] for x in json.loads(r.stdout)["tasks"]]
    r = daemon.cli("status", t["id"], "--json")
    assert json.loads(r.stdout)["id"] == t["id"]


@pytest.mark.e2e
def test_gpus_table_shows_four_simulated_gpus(daemon):
    r = daemon.cli("gpus")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "backend: sim (simulated GPUs)"
    assert lines[1].startswith("ID ")
    assert len(lines) == 2 + 4
    # aligned: every row has NAME where the header has it
    col = lines[1].index("NAME")
    for row in lines[2:]:
        assert row[col - 2:col] == "  " and row[col] != " "


@pytest.mark.e2e
def test_nodes_and_queue_tables(daemon):
    r = daemon.cli("nodes")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "backend: sim (simulated GPUs)"
    # NAME STATE GPUS(busy/total) GPU MODEL LABELS HEARTBEAT ADDRESS (test_cli_nodes.py has more)
    assert re.search(r"^local\s+ready\s+0/4\s", r.stdout, re.M), r.stdout
    r = daemon.cli("queue")
    assert r.returncode == 0
    assert "queue is empty" in r.stdout
    big = submit(daemon, "--gpus", "4", "--", "sleep", "30")
    wait_state(daemon, big, {"running"})
    waiting = submit(daemon, "--gpus", "1", "--name", "waiter", "--", "true")
    r = daemon.cli("queue")
    assert re.search(r"^1\s+%d\s+waiter\s" % waiting, r.stdout, re.M), r.stdout
    for t in (waiting, big):
        assert daemon.cli("cancel", t).returncode == 0


@pytest.mark.e2e
def test_ps_shows_active_tasks_and_all_with_flag(daemon):
    done = submit(daemon, "--name", "done-one", "--", "true")
    wait_state(daemon, done, {"succeeded"})
    live = submit(daemon, "--name", "live-one", "--", "sleep", "30")
    wait_state(daemon, live, {"running"})
    r = daemon.cli("ps")
    assert r.returncode == 0
    assert "live-one" in r.stdout and "done-one" not in r.stdout
    r = daemon.cli("ps", "--all")
    assert "live-one" in r.stdout and "done-one" in r.stdout
    r = daemon.cli("ps", "--state", "succeeded")
    assert "done-one" in r.stdout and "live-one" not in r.stdout
    r = daemon.cli("ps", "--all", "--limit", "1")
    assert "live-one" in r.stdout and "done-one" not in r.stdout
    assert daemon.cli("cancel", live).stdout == "cancelled\n"


@pytest.mark.e2e
def test_logs_follow_streams_output_as_it_is_written(daemon):
    tid = submit(daemon, "--", "sh", "-c", "echo first; sleep 2; echo second")
    p = subprocess.Popen([daemon.bin, "logs", "-f", str(tid)], env=daemon.env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    first = p.stdout.readline()
    t_first = time.monotonic() - t0
    rest, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert first == "first\n"
    assert rest == "second\n"
    assert t_first < 1.8  # printed before the task ended: not buffered
    r = daemon.cli("logs", tid)
    assert r.returncode == 0 and r.stdout == "first\nsecond\n"


@pytest.mark.e2e
def test_cancel_prints_state_and_is_idempotent(daemon):
    tid = submit(daemon, "--", "sleep", "60")
    wait_state(daemon, tid, {"running"})
    r = daemon.cli("cancel", tid)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "cancelled\n"
    r = daemon.cli("cancel", tid)
    assert r.returncode == 0 and r.stdout == "cancelled\n"


@pytest.mark.e2e
def test_server_refusals_exit_1_with_its_message(daemon):
    r = daemon.cli("status", "999999")
    assert r.returncode == 1
    assert r.stderr.startswith("gpupool: not_found: ")
    r = daemon.cli("submit", "--gpus", "16", "--", "true")
    assert r.returncode == 1
    assert re.match(r"gpupool: [a-z_]+: .+\n$", r.stderr), r.stderr
    assert r.stdout == ""


@pytest.mark.e2e
def test_run_gives_the_command_its_gpus_and_exits_with_its_code(daemon, tmp_path):
    out = tmp_path / "env.txt"
    r = daemon.cli("run", "--gpus", "2", "--env", "EXTRA=1", "--",
                   "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES|$GPUPOOL_TASK_ID|$GPUPOOL_GPUS|$EXTRA" > %s; exit 3' % out)
    assert r.returncode == 3, r.stderr
    cvd, tid, gpus, extra = out.read_text().strip().split("|")
    assert len(cvd.split(",")) == 2
    assert gpus.count("local:") == 2
    assert extra == "1"
    t = daemon.api("GET", "/api/v1/tasks/%s" % tid).json()
    assert t["state"] == "failed" and t["exit_code"] == 3
    assert "command" not in t  # a lease
    # the GPUs are free again
    g = daemon.api("GET", "/api/v1/gpus").json()
    assert all(not x["tasks"] for x in g["gpus"])


@pytest.mark.e2e
def test_run_success_releases_as_succeeded(daemon):
    r = daemon.cli("run", "--", "true")
    assert r.returncode == 0, r.stderr
    tasks = daemon.api("GET", "/api/v1/tasks?limit=1").json()["tasks"]
    assert tasks[0]["state"] == "succeeded"


@pytest.mark.e2e
def test_run_heartbeats_keep_a_short_lease_alive(daemon):
    r = daemon.cli("run", "--ttl", "3", "--", "sleep", "7")
    assert r.returncode == 0, r.stderr
    assert "lost" not in r.stderr
    t = daemon.api("GET", "/api/v1/tasks?limit=1").json()["tasks"][0]
    assert t["state"] == "succeeded"


@pytest.mark.e2e
def test_run_waits_while_gpus_are_busy_and_says_why(daemon):
    big = submit(daemon, "--gpus", "4", "--", "sleep", "3")
    wait_state(daemon, big, {"running"})
    r = daemon.cli("run", "--gpus", "2", "--", "true")
    assert r.returncode == 0, r.stderr
    waits = [l for l in r.stderr.splitlines() if l.startswith("waiting for 2 GPU(s): ")]
    assert len(waits) >= 1
    assert len(waits) == len(set(waits))  # once per change of reason


@pytest.mark.e2e
def test_run_interrupted_while_queued_cancels_the_lease(daemon):
    big = submit(daemon, "--gpus", "4", "--", "sleep", "60")
    wait_state(daemon, big, {"running"})
    p = subprocess.Popen([daemon.bin, "run", "--gpus", "1", "--", "true"], env=daemon.env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    lease = None
    while time.monotonic() < deadline and lease is None:
        for t in daemon.api("GET", "/api/v1/tasks?state=queued").json()["tasks"]:
            lease = t["id"]
        time.sleep(0.1)
    assert lease is not None
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=15)
    assert p.returncode == 130, err
    assert daemon.api("GET", "/api/v1/tasks/%d" % lease).json()["state"] == "cancelled"
    daemon.cli("cancel", big)


@pytest.mark.e2e
def test_run_forwards_sigterm_to_the_command(daemon, tmp_path):
    mark = tmp_path / "got-term"
    script = "trap 'touch %s; exit 5' TERM; echo ready; while :; do sleep 0.1; done" % mark
    p = subprocess.Popen([daemon.bin, "run", "--", "sh", "-c", script], env=daemon.env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=15)
    assert p.returncode == 5, err
    assert mark.exists()
    t = daemon.api("GET", "/api/v1/tasks?limit=1").json()["tasks"][0]
    assert t["state"] == "failed" and t["exit_code"] == 5


@pytest.mark.e2e
def test_key_is_sent_as_bearer_token(daemon_factory):
    key = "test-admin-key-123"
    digest = hashlib.sha256(key.encode()).hexdigest()
    d = daemon_factory("gpus: {backend: sim}\nauth: {admin_keys: [\"sha256:%s\"]}\n" % digest, key=key)
    # over TCP (the local socket names its caller without a key: test_users.py)
    r = d.cli("ps", env=d.env(GPUPOOL_SOCKET="off"))
    assert r.returncode == 1
    assert r.stderr.startswith("gpupool: unauthorized")
    r = d.cli("--key", key, "ps", env=d.env(GPUPOOL_SOCKET="off"))
    assert r.returncode == 0, r.stderr
    r = d.cli("ps", env=d.env(GPUPOOL_API_KEY=key, GPUPOOL_SOCKET="off"))
    assert r.returncode == 0, r.stderr
