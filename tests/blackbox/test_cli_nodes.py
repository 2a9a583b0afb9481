"""The client's node commands against the real daemon (issue 15, many
machines): `gpupool nodes`, `node drain|undrain|remove`, `join-token
create|list|revoke`, `--node-selector` and `run --node` / GPUPOOL_NODE.

A single server is one node, `local`; agents are tested elsewhere
(tests/blackbox/test_agent*.py). Tests not marked e2e need only the binary.
Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_cli_nodes.py
"""
import json
import os
import re
import subprocess
import time

import pytest

from conftest import free_port, gpupool_bin


def run_plain(*args, env_extra=None, timeout=30):
    b = gpupool_bin()
    if not os.access(b, os.X_OK):
        pytest.skip("gpupool binary not built (%s)" % b)
    env = dict(os.environ)
    for k in ("GPUPOOL_API", "GPUPOOL_API_KEY", "GPUPOOL_NODE"):
        env.pop(k, None)
    env.update(env_extra or {})
    return subprocess.run([b] + list(args), env=env, capture_output=True, text=True, timeout=timeout)


def wait_state(d, task_id, states, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        t = d.api("GET", "/api/v1/tasks/%s" % task_id).json()
        if t["state"] in states or time.monotonic() > deadline:
            assert t["state"] in states, t
            return t
        time.sleep(0.1)


# ---- without a server: every bad value is a usage error (2), nothing is sent

@pytest.mark.parametrize("args,needle", [
    (["submit", "--node-selector", "zone", "--", "true"], "--node-selector: expected KEY=VALUE, got 'zone'"),
    (["submit", "--node-selector", "zo ne=a", "--", "true"], "--node-selector: bad label key 'zo ne'"),
    (["submit", "--node-selector", "zone=a b", "--", "true"], "--node-selector: bad label value 'a b'"),
    (["submit", "--node-selector", "k=" + "v" * 64, "--", "true"], "--node-selector: bad label value"),
    (["submit", "--node-selector", "a=1", "--node-selector", "a=2", "true"], "label 'a' is selected twice"),
    (["submit", "--gpus", "1025", "true"], "--gpus: 1025 is out of range 1..1024"),
    (["submit", "--node", "gpu-a", "true"], "option --node does not apply here"),
    (["run", "--node", "a/b", "--", "true"], "--node: 'a/b' is not a node name"),
    (["node"], "missing subcommand: drain, undrain or remove"),
    (["node", "drain"], "missing node NAME"),
    (["node", "reboot", "local"], "unknown subcommand 'reboot'"),
    (["node", "drain", "bad name"], "'bad name' is not a node name"),
    (["join-token"], "missing subcommand: create, list or revoke"),
    (["join-token", "revoke"], "missing token ID"),
    (["join-token", "create", "--ttl", "soon"], "--ttl: expected a duration such as 3600, 90s, 30m, 12h, 7d or [D-]HH:MM:SS"),
    (["join-token", "list", "--ttl", "1h"], "--ttl applies to 'create' only"),
])
def test_bad_node_values_exit_2_before_any_request(args, needle):
    # the port is closed: a request would give exit 3, so 2 proves nothing was sent
    url = "http://127.0.0.1:%d" % free_port()
    r = run_plain("--api", url, *args)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert needle in r.stderr, r.stderr
    assert "\nusage: gpupool " in r.stderr
    assert r.stdout == ""


def test_bad_gpupool_node_is_a_usage_error_naming_it():
    url = "http://127.0.0.1:%d" % free_port()
    r = run_plain("--api", url, "run", "--", "true", env_extra={"GPUPOOL_NODE": "no such/node"})
    assert r.returncode == 2
    assert "GPUPOOL_NODE: 'no such/node' is not a node name" in r.stderr


def test_help_lists_the_node_commands_and_the_agent():
    r = run_plain("help")
    assert r.returncode == 0
    for cmd in ("nodes", "node", "join-token", "agent"):
        assert re.search(r"^  %s +\S" % re.escape(cmd), r.stdout, re.M), r.stdout
    assert "join this machine to a server as a node (see docs/deployment.md)" in r.stdout
    r = run_plain("help", "run")
    assert "--node NAME" in r.stdout and "GPUPOOL_NODE" in r.stdout
    r = run_plain("help", "submit")
    assert "--node-selector K=V" in r.stdout and "1..1024" in r.stdout


# ---- against a single server: node "local" (needs the server side of issue 15)

@pytest.mark.e2e
def test_nodes_shows_local_with_its_gpus_and_heartbeat(daemon):
    r = daemon.cli("nodes")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "backend: sim (simulated GPUs)"
    assert re.match(r"NAME\s+STATE\s+GPUS\s+GPU MODEL\s+CPUS\s+MEM FREE\s+DISK FREE\s+VERSION\s+LABELS\s+HEARTBEAT\s+"
                    r"ADDRESS$", lines[1]), lines[1]
    # local: ready, 0 of 4 busy, its model, this machine's CPUs, memory and disk, the server's version, no labels
    # but the implicit one (hidden), a fresh heartbeat
    assert re.match(r"local\s+ready\s+0/4\s+\S.*\s+%d\s+[\d.]+G/[\d.]+G\s+[\d.]+G\s+\d+\.\d+\.\d+\S*\s+-\s+\d+s ago\s+-$"
                    % os.cpu_count(), lines[2]), r.stdout
    assert "gpupool/node" not in r.stdout
    j = json.loads(daemon.cli("--json", "nodes").stdout)
    local = [n for n in j["nodes"] if n["name"] == "local"][0]
    assert local["labels"]["gpupool/node"] == "local"
    assert local["gpus_total"] == 4 and local["address"] == ""
    # a running task makes a GPU busy
    r = daemon.cli("submit", "--gpus", "2", "--", "sleep", "30")
    assert r.returncode == 0, r.stderr
    tid = int(r.stdout)
    wait_state(daemon, tid, {"running"})
    assert re.search(r"^local\s+ready\s+2/4\s", daemon.cli("nodes").stdout, re.M)
    assert daemon.cli("cancel", tid).returncode == 0


@pytest.mark.e2e
def test_node_drain_and_undrain_local(daemon):
    r = daemon.cli("node", "drain", "local")
    assert (r.returncode, r.stdout) == (0, "local: draining\n"), r.stderr
    assert re.search(r"^local\s+draining\s", daemon.cli("nodes").stdout, re.M)
    # nothing new starts on a drained node
    r = daemon.cli("submit", "--", "true")
    assert r.returncode == 0, r.stderr
    tid = int(r.stdout)
    time.sleep(0.5)
    assert daemon.api("GET", "/api/v1/tasks/%d" % tid).json()["state"] == "queued"
    r = daemon.cli("node", "undrain", "local")
    assert (r.returncode, r.stdout) == (0, "local: ready\n"), r.stderr
    wait_state(daemon, tid, {"succeeded"})
    j = json.loads(daemon.cli("--json", "node", "drain", "local").stdout)
    assert j["name"] == "local" and j["state"] == "draining"
    assert daemon.cli("node", "undrain", "local").returncode == 0


@pytest.mark.e2e
def test_node_remove_local_and_unknown_nodes_are_refused(daemon):
    r = daemon.cli("node", "remove", "local")
    assert r.returncode == 1
    assert r.stderr.startswith("gpupool: "), r.stderr
    assert "local" in r.stderr
    assert r.stdout == ""
    r = daemon.cli("node", "drain", "ghost")
    assert r.returncode == 1
    assert "ghost" in r.stderr
    # local is still there and ready
    assert re.search(r"^local\s+ready\s", daemon.cli("nodes").stdout, re.M)


@pytest.mark.e2e
def test_join_token_create_list_revoke(daemon):
    r = daemon.cli("join-token", "list")
    assert r.returncode == 0, r.stderr
    r = daemon.cli("join-token", "create", "--ttl", "1h")
    assert r.returncode == 0, r.stderr
    # the token alone, with the hash of the server's CA after the '.' (issue 22)
    assert re.fullmatch(r"gpj_[0-9a-f]{64}\.[0-9a-f]{64}\n", r.stdout), r.stdout
    token = r.stdout.strip()
    assert "gpupool agent --server %s --token %s" % (daemon.url, token) in r.stderr
    r = daemon.cli("--json", "join-token", "list")
    toks = json.loads(r.stdout)["tokens"]
    assert toks and not any("token" in t for t in toks)  # never shown again
    mine = [t for t in toks if not t["revoked"] and t["expires_ms"] > 0]
    assert len(mine) == 1
    tid = mine[0]["id"]
    assert re.search(r"^%s\s+\d+s ago\s+in (59m\d\ds|1h00m)\s+active\s+api$" % re.escape(tid),
                     daemon.cli("join-token", "list").stdout, re.M)
    r = daemon.cli("join-token", "revoke", tid)
    assert (r.returncode, r.stdout) == (0, "%s: revoked\n" % tid), r.stderr
    assert re.search(r"^%s\s.*\srevoked\s+api$" % re.escape(tid), daemon.cli("join-token", "list").stdout, re.M)
    r = daemon.cli("join-token", "revoke", "jt_999999")
    assert r.returncode == 1
    # without --ttl: no expiry
    r = daemon.cli("--json", "join-token", "create")
    assert r.returncode == 0
    assert json.loads(r.stdout)["expires_ms"] == 0


@pytest.mark.e2e
def test_node_selector_places_on_matching_nodes_and_status_shows_nodes(daemon):
    r = daemon.cli("submit", "--node-selector", "gpupool/node=local", "--", "sleep", "30")
    assert r.returncode == 0, r.stderr
    tid = int(r.stdout)
    t = wait_state(daemon, tid, {"running"})
    assert t["node_selector"] == {"gpupool/node": "local"}
    assert t["nodes"] == ["local"]
    st = daemon.cli("status", tid).stdout
    assert re.search(r"^node:\s+local$", st, re.M), st
    assert re.search(r"^node selector:\s+gpupool/node=local$", st, re.M), st
    assert daemon.cli("cancel", tid).returncode == 0
    # no node has the label: it waits (and says why), it does not run elsewhere
    r = daemon.cli("submit", "--node-selector", "zone=nowhere", "--", "true")
    if r.returncode == 0:
        tid = int(r.stdout)
        time.sleep(0.5)
        t = daemon.api("GET", "/api/v1/tasks/%d" % tid).json()
        assert t["state"] == "queued" and t["reason"], t
        daemon.cli("cancel", tid)
    else:
        assert r.returncode == 1 and "zone" in r.stderr, r.stderr


@pytest.mark.e2e
def test_run_node_and_gpupool_node_pin_the_lease_to_this_machine(daemon):
    r = daemon.cli("run", "--node", "local", "--", "sh", "-c", "echo gpus=$GPUPOOL_GPUS")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^gpus=local:\d", r.stdout, re.M), r.stdout
    r = daemon.cli("run", "--", "sh", "-c", "echo gpus=$GPUPOOL_GPUS", env=daemon.env(GPUPOOL_NODE="local"))
    assert r.returncode == 0, r.stderr
    leases = daemon.api("GET", "/api/v1/tasks?state=succeeded&limit=2").json()["tasks"]
    assert all(t["node_selector"] == {"gpupool/node": "local"} for t in leases), leases
