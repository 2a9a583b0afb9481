"""What the client and the batch supervisor load, and the two executables.

`gpupool` links libc and libjansson only; the server roles are
gpupool-server next to it (exec'd by `gpupool server|simulate`); https://
goes through libcurl loaded with dlopen.  These tests look at what a
running client and a running supervisor have mapped (/proc/PID/maps), so a
server library that creeps back into either fails here.
Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_cli_start.py
"""
import os
import shutil
import subprocess
import time

import pytest

from conftest import free_port, gpupool_bin

SERVER_LIBS = ("libpq", "libsqlite3", "libyaml", "libmicrohttpd", "libcurl", "libssl", "libgnutls",
               "libldap", "libgssapi", "libnghttp2")


def bin_or_skip():
    b = gpupool_bin()
    if not os.access(b, os.X_OK):
        pytest.skip("gpupool binary not built (%s)" % b)
    return b


def server_libs_in(text):
    return sorted({lib for lib in SERVER_LIBS for line in text.splitlines() if "/" + lib in line})


def maps_of(pid):
    with open("/proc/%d/maps" % pid) as f:
        return f.read()


def wait_for(what, fn, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def test_client_binary_links_no_server_library():
    out = subprocess.run(["ldd", bin_or_skip()], capture_output=True, text=True, check=True).stdout
    assert server_libs_in(out) == [], out
    assert "libjansson" in out
    server = os.path.join(os.path.dirname(bin_or_skip()), "gpupool-server")
    out = subprocess.run(["ldd", server], capture_output=True, text=True, check=True).stdout
    assert "libpq" in out and "libmicrohttpd" in out  # the other half has them


def test_running_client_and_supervisor_map_no_server_library(daemon, tmp_path):
    r = daemon.cli("submit", "--", "sh", "-c", "echo started; sleep 30")
    assert r.returncode == 0, r.stderr
    task = int(r.stdout)
    wait_for("task running", lambda: daemon.api("GET", "/api/v1/tasks/%d" % task).json()["state"] == "running")

    # the supervisor: `gpupool __supervise DIR` started by the daemon
    def supervisor():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if len(argv) >= 3 and argv[1] == b"__supervise" and argv[2].startswith(daemon.data_dir.encode()):
                return int(pid), argv[0].decode()
        return None
    spid, sexe = wait_for("the supervisor", supervisor)
    assert os.path.basename(sexe) == "gpupool", sexe
    assert os.path.realpath("/proc/%d/exe" % spid) == os.path.realpath(daemon.bin)
    assert server_libs_in(maps_of(spid)) == []

    # the daemon itself is gpupool-server (same pid as the `gpupool server` it was started as)
    assert os.path.basename(os.path.realpath("/proc/%d/exe" % daemon.proc.pid)) == "gpupool-server"

    # a client that stays: logs -f on the running task
    p = subprocess.Popen([daemon.bin, "logs", "-f", str(task)], env=daemon.env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"started\n"
        assert server_libs_in(maps_of(p.pid)) == []
    finally:
        p.kill()
        p.wait()
        daemon.cli("cancel", task)


def test_https_without_libcurl_says_what_is_missing():
    env = dict(os.environ, GPUPOOL_LIBCURL="/nonexistent/libcurl.so.4")
    env.pop("GPUPOOL_API", None)
    r = subprocess.run([bin_or_skip(), "--api", "https://127.0.0.1:%d" % free_port(), "ps"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "https:// needs libcurl, which cannot be loaded" in r.stderr
    assert "/nonexistent/libcurl.so.4" in r.stderr


def test_https_goes_through_libcurl(daemon):
    # the daemon speaks plain HTTP: libcurl's TLS handshake fails, and says so
    url = "https://127.0.0.1:%d" % daemon.port
    r = daemon.cli("--api", url, "ps", env=daemon.env(GPUPOOL_API=url), timeout=30)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("gpupool: cannot reach %s: " % url)
    assert "SSL" in r.stderr or "TLS" in r.stderr, r.stderr
    url = "https://127.0.0.1:%d" % free_port()
    r = daemon.cli("--api", url, "ps", env=daemon.env(GPUPOOL_API=url), timeout=30)
    assert r.returncode == 3
    assert "Connection refused (is `gpupool server` running?)" in r.stderr


def test_server_without_gpupool_server_next_to_it_says_so(tmp_path):
    lone = tmp_path / "gpupool"
    shutil.copy(bin_or_skip(), lone)
    r = subprocess.run([str(lone), "server", "--listen", "127.0.0.1:%d" % free_port()], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "gpupool server: cannot run gpupool-server (it is installed next to gpupool)" in r.stderr
    r = subprocess.run([str(lone), "version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.startswith("gpupool ")


def test_gpupool_server_run_by_hand_points_to_gpupool():
    server = os.path.join(os.path.dirname(bin_or_skip()), "gpupool-server")
    r = subprocess.run([server, "ps"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "run those" in r.stderr
