"""A server restarted right after kill -9 starts (issue 23).

A server killed with SIGKILL can leave its data dir's lock (an flock on
DATA_DIR/gpupool.lock, and SQLite's "<database>-owner") to a child it had
just forked that has not exec'd yet: the child shares the dead server's
open files until its exec closes them.  The restarted server must wait for
that child while the holder named in the lock file is a dead process of
this host, and still refuse at once while the holder is alive.

The stand-in for that child: a process that takes the lock, writes the
owner record as the server does, naming a pid that has exited, and lets the
lock go a while later, as the child's exec would.
"""
import os
import socket
import subprocess
import sys
import time

import pytest

from apiutil import submit
from conftest import Daemon

pytestmark = pytest.mark.e2e

HOLDER = r"""
import fcntl, os, sys, time
fds = []
for path in sys.argv[3:]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, ("host=%s\npid=%s\nlisten=127.0.0.1:1\nsince_ms=%d\n"
                   % (os.uname().nodename, sys.argv[1], int(time.time() * 1000))).encode(), 0)
    fds.append(fd)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _hold(pid, seconds, paths):
    h = subprocess.Popen([sys.executable, "-c", HOLDER, str(pid), str(seconds)] + paths,
                         stdout=subprocess.PIPE, text=True)
    assert h.stdout.readline().strip() == "held"
    return h


def _lock_paths(d):
    return [os.path.join(d.data_dir, "gpupool.lock"), os.path.join(d.data_dir, "gpupool.db-owner")]


def test_restart_waits_for_a_dead_servers_forked_child_to_let_the_lock_go(tmp_path):
    d = Daemon(tmp_path)
    d.start()
    tid = submit(d, gpu_request=1)["id"]
    d.proc.kill()
    d.proc.wait()
    holder = _hold(_dead_pid(), 1.5, _lock_paths(d))
    try:
        t0 = time.monotonic()
        d.start()  # fails with "another gpupool server is using this data dir" without the wait
        waited = time.monotonic() - t0
        assert holder.poll() is not None, "the server started while the lock was still held"
        assert waited >= 1.0, waited
        # the acknowledged task is still there
        assert d.api("GET", "/api/v1/tasks/%d" % tid).status_code == 200
    finally:
        holder.kill()
        d.stop()


def test_a_live_holder_of_the_lock_is_still_refused_at_once(tmp_path):
    d = Daemon(tmp_path)
    d.start()
    d.stop()
    holder = _hold(os.getpid(), 30, _lock_paths(d))  # names a live process: this test
    try:
        t0 = time.monotonic()
        with pytest.raises(RuntimeError) as e:
            d.start(timeout=10)
        assert time.monotonic() - t0 < 4, "a live holder must be refused without waiting"
        assert "another gpupool server is using this" in str(e.value), str(e.value)
        assert "pid %d" % os.getpid() in str(e.value)
        assert "host %s" % socket.gethostname() in str(e.value)
    finally:
        holder.kill()
        d.stop()
