"""One live server per store (docs/deployment.md, "One server per store").

Two servers on one store would both hand out task id 1 and the same GPUs.
Until several servers are supported, a second server on a store (or data
dir) that a live server uses refuses to start, and says which server holds
it: host name, pid, listen address and since when.  A server that died,
even by SIGKILL, leaves no claim behind.

The PostgreSQL cases need GPUPOOL_TEST_PG_URL (tests/pg/start-pg.sh prints
one; scripts/test-all.sh's PostgreSQL stage sets it) and are skipped
without it; each makes a database of its own there with psql.
"""
import os
import shutil
import signal
import socket
import subprocess
import urllib.parse
import uuid

import pytest

from apiutil import run_server, submit
from conftest import Daemon, SIM_CONFIG

pytestmark = pytest.mark.e2e


def _refused(cfg_path, data_dir, port):
    return run_server(["--config", cfg_path, "--listen", "127.0.0.1:%d" % port, "--data-dir", data_dir])


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _assert_names(out, d):
    assert "another gpupool server is using this" in out, out
    assert "host %s" % socket.gethostname() in out, out
    assert "pid %d" % d.proc.pid in out, out
    assert "listening on 127.0.0.1:%d" % d.port in out, out
    assert "since 20" in out, out


def test_second_server_on_one_data_dir_is_refused_naming_the_first(tmp_path):
    first = Daemon(tmp_path)
    first.start()
    try:
        tid = submit(first, gpu_request=1)["id"]
        r = _refused(first.config_path, first.data_dir, _port())
        assert r.returncode != 0
        _assert_names(r.stderr, first)
        # the first server is untouched and still the only one handing out ids
        assert submit(first, gpu_request=1)["id"] == tid + 1
    finally:
        first.stop()


def test_second_server_on_one_sqlite_file_with_its_own_data_dir_is_refused(tmp_path):
    db = tmp_path / "shared.db"
    cfg = SIM_CONFIG + 'store: {url: "sqlite://%s"}\n' % db
    (tmp_path / "a").mkdir()
    first = Daemon(tmp_path / "a", cfg)
    first.start()
    try:
        cfg_path = str(tmp_path / "b.yaml")
        with open(cfg_path, "w") as f:
            f.write(cfg)
        r = _refused(cfg_path, str(tmp_path / "b-data"), _port())
        assert r.returncode != 0
        assert "store:" in r.stderr, r.stderr
        _assert_names(r.stderr, first)
    finally:
        first.stop()


def test_server_killed_with_sigkill_leaves_no_claim_on_the_data_dir(tmp_path):
    first = Daemon(tmp_path)
    first.start()
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=10)
    first.stop()
    second = Daemon(tmp_path)
    second.start()  # raises (with the log) if it refused
    second.stop()


# ---- PostgreSQL ----

def _pg_url():
    url = os.environ.get("GPUPOOL_TEST_PG_URL")
    if not url:
        pytest.skip("GPUPOOL_TEST_PG_URL is not set (tests/pg/start-pg.sh starts a server)")
    if not shutil.which("psql"):
        pytest.skip("psql not installed")
    return url


@pytest.fixture
def pg_db():
    """A fresh database on the test server; yields its URL."""
    base = _pg_url()
    name = "gp_one_%s" % uuid.uuid4().hex[:12]
    subprocess.run(["psql", base, "-v", "ON_ERROR_STOP=1", "-qc", "CREATE DATABASE %s" % name],
                   check=True, capture_output=True, timeout=60)
    u = urllib.parse.urlsplit(base)
    # by hand: urlunsplit drops the "//" of an empty host (a unix socket URL)
    yield "%s://%s/%s%s" % (u.scheme, u.netloc, name, "?" + u.query if u.query else "")
    subprocess.run(["psql", base, "-qc", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name],
                   capture_output=True, timeout=60)


def test_second_server_on_one_postgres_is_refused_naming_the_first(tmp_path, pg_db):
    cfg = SIM_CONFIG + 'store: {url: "%s"}\n' % pg_db
    (tmp_path / "a").mkdir()
    first = Daemon(tmp_path / "a", cfg)
    first.start()
    try:
        tid = submit(first, gpu_request=1)["id"]
        assert tid == 1
        cfg_path = str(tmp_path / "b.yaml")
        with open(cfg_path, "w") as f:
            f.write(cfg)
        r = _refused(cfg_path, str(tmp_path / "b-data"), _port())
        assert r.returncode != 0
        _assert_names(r.stderr, first)
        assert pg_db not in r.stderr  # a store URL may hold a password
        assert submit(first, gpu_request=1)["id"] == 2
    finally:
        first.stop()


def test_postgres_store_of_a_killed_server_can_be_taken_over(tmp_path, pg_db):
    cfg = SIM_CONFIG + 'store: {url: "%s"}\n' % pg_db
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = Daemon(tmp_path / "a", cfg)
    first.start()
    tid = submit(first, gpu_request=1)["id"]
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=10)
    first.stop()
    # PostgreSQL ends the dead server's session (and its lock) when its
    # socket closes; give it a moment
    second = Daemon(tmp_path / "b", cfg)
    last = None
    for _ in range(50):
        try:
            second.start()
            break
        except RuntimeError as e:
            last = e
            second.stop()
    else:
        raise last
    try:
        # it took over the first server's tasks: ids go on from there
        assert submit(second, gpu_request=1)["id"] == tid + 1
    finally:
        second.stop()
