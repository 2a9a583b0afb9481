"""A second server on a port a live server listens on refuses to start.

The HTTP loops listen with SO_REUSEPORT (one socket each), which would let a
second gpupool server of the same user bind the same port beside a live one
(with another data dir, so the one-server-per-store guard does not see it);
the kernel would then send each connection to either daemon at random.
gp_http_bind probes the port with a socket without SO_REUSEPORT first.

Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_port_in_use.py
"""
import socket
import subprocess

import pytest
import requests

from clusterutil import TOKEN
from conftest import SIM_CONFIG, Daemon, free_port, gpupool_bin

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_second_server_on_a_live_servers_port_refuses_to_start(daemon, tmp_path, host):
    cfg = tmp_path / "second.yaml"
    cfg.write_text(SIM_CONFIG)
    p = subprocess.run([gpupool_bin(), "server", "--config", str(cfg), "--listen", "%s:%d" % (host, daemon.port),
                        "--data-dir", str(tmp_path / "second-data")],
                       capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "cannot listen on %s:%d (in use by another process)" % (host, daemon.port) in p.stderr
    # every connection still reaches the first server
    for _ in range(20):
        assert requests.get(daemon.url + "/readyz", timeout=5).status_code == 200


def test_a_server_starts_again_on_the_port_its_predecessor_left(tmp_path):
    first = Daemon(tmp_path)
    first.start()
    port = first.port
    requests.get(first.url + "/healthz", timeout=5)  # a connection, closed: TIME_WAIT on the server side
    first.stop()
    p = subprocess.Popen([gpupool_bin(), "server", "--config", first.config_path, "--listen",
                          "127.0.0.1:%d" % port, "--data-dir", first.data_dir],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        ok = False
        for _ in range(200):
            if p.poll() is not None:
                break
            try:
                ok = requests.get("http://127.0.0.1:%d/readyz" % port, timeout=1).status_code == 200
            except requests.RequestException:
                pass
            if ok:
                break
            subprocess.run(["sleep", "0.05"])
        assert ok, "the restarted server did not come up: %s" % (p.stdout.read() if p.poll() is not None else "")
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_an_agent_on_a_port_an_outgoing_connection_holds_says_so_once(daemon, tmp_path):
    """An agent's port can be taken by any outgoing connection (its ephemeral port comes from the
    same range): the agent exits naming the address and the cause, once."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    held = socket.socket()   # no SO_REUSEADDR, as a client's connection
    port = free_port()
    held.bind(("127.0.0.1", port))
    held.connect(srv.getsockname())
    try:
        cfg = tmp_path / "agent.yaml"
        cfg.write_text(SIM_CONFIG + "node: {name: gpu-a}\n")
        p = subprocess.run([gpupool_bin(), "agent", "--server", daemon.url, "--token", TOKEN, "--config", str(cfg),
                            "--name", "gpu-a", "--listen", "127.0.0.1:%d" % port, "--data-dir",
                            str(tmp_path / "agent-data")],
                           capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
        assert p.returncode == 1, (p.returncode, p.stderr)
        assert "cannot listen on 127.0.0.1:%d: in use by another process" % port in p.stderr, p.stderr
        assert p.stderr.count("cannot listen") == 1, p.stderr
    finally:
        held.close()
        srv.close()

