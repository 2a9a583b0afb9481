"""Black-box test of a full disk: the daemon's data dir is a small tmpfs
that a filler file fills to the last byte.

What must hold (docs/deployment.md, "A full disk"): new work is refused
with 507 + Retry-After and a message naming the data dir, and changes
nothing; reads, /healthz ("degraded", still 200), cancels of queued work,
lease releases and the end of a running task go on and are stored; the
daemon does not exit; once the filler is gone submits work again by
themselves, and everything acknowledged survives a kill -9.

Needs root (mount -t tmpfs); skipped otherwise.

Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_disk_full.py
"""
import errno
import os
import subprocess
import time

import pytest

from apiutil import (assert_error, batch, kill9, kill_supervisor_sessions, lease, pid_alive, post, reap_supervisors,
                     restart, submit_raw, task, wait_for, wait_state)
from conftest import Daemon, _require_bin

pytestmark = pytest.mark.e2e
assert reap_supervisors  # autouse fixture, imported so that it applies here

TMPFS_SIZE = "32m"


@pytest.fixture
def tmpfs_daemon(tmp_path):
    """A daemon whose data dir is a tmpfs of TMPFS_SIZE (unmounted after)."""
    _require_bin()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs for the data dir")
    data = tmp_path / "data"
    data.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + TMPFS_SIZE, "tmpfs", str(data)],
                       capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip("cannot mount a tmpfs (%s)" % m.stderr.strip())
    d = Daemon(tmp_path)
    try:
        d.start()
        yield d
    finally:
        d.stop()
        kill_supervisor_sessions(tmp_path)  # they hold task dirs on the tmpfs
        for _ in range(50):
            if subprocess.run(["umount", str(data)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(data)], capture_output=True)


def fill(path):
    """Write path until the filesystem has no byte left."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 64 << 10, 4096, 512, 1):
            buf = b"\0" * chunk
            while True:
                try:
                    n = f.write(buf)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
                if n < chunk:
                    break
    st = os.statvfs(os.path.dirname(path))
    assert st.f_bavail * st.f_frsize < 4096, "the filler should have taken the last bytes"


def all_tasks(d):
    r = d.api("GET", "/api/v1/tasks?limit=1000", timeout=10)
    assert r.status_code == 200, r.text
    return {t["id"]: t for t in r.json()["tasks"]}


def test_a_full_disk_refuses_new_work_but_reads_cancels_and_ends_go_on(tmpfs_daemon, tmp_path):
    d = tmpfs_daemon
    data = d.data_dir
    assert os.path.getsize(os.path.join(data, "gpupool.reserve")) == 4 << 20, "the reserve is made at start"
    # the machine: three leases and a batch task hold the four GPUs; a batch
    # task and a lease wait behind them
    held = [lease(d, name="held-%d" % i) for i in range(3)]
    go = str(tmp_path / "go")  # outside the tmpfs
    b = batch(d, ["sh", "-c", 'while [ ! -e "$0" ]; do sleep 0.05; done; echo done; exit 3', go], name="runner")
    assert b["state"] == "running", b
    wait_for(lambda: os.path.exists(os.path.join(data, "tasks", str(b["id"]), "supervisor.pid")), 10,
             "the runner's supervisor")
    q_batch = batch(d, ["true"], name="queued-batch")
    q_lease = lease(d, name="queued-lease")
    assert q_batch["state"] == "queued" and q_lease["state"] == "queued"
    acked = {t["id"] for t in held + [b, q_batch, q_lease]}

    fill(os.path.join(data, "filler"))

    # new work: 507 with Retry-After and the disk named; nothing is added
    r = submit_raw(d, {"name": "refused", "lease_ttl_s": 600})
    msg = assert_error(r, 507, "insufficient_storage")
    assert data in msg and "full" in msg, msg
    assert int(r.headers["Retry-After"]) > 0
    assert set(all_tasks(d)) == acked, "a refused submit must change nothing"
    cli = d.cli("submit", "--name", "cli-refused", "--", "true")
    assert cli.returncode == 1, (cli.returncode, cli.stdout, cli.stderr)
    assert "the server's disk is full; try again later" in cli.stderr, cli.stderr

    # reads and health
    assert task(d, q_batch["id"])["state"] == "queued"
    h = d.api("GET", "/healthz", timeout=10)
    assert h.status_code == 200 and h.json()["status"] == "degraded", h.text
    assert data in h.json()["reason"], h.text
    rz = d.api("GET", "/readyz", timeout=10)
    assert rz.status_code == 200 and rz.json().get("store") == "degraded", rz.text
    metrics = d.api("GET", "/metrics", timeout=10).text
    assert "\ngpupool_store_degraded 1\n" in metrics

    # what shrinks the work is stored: a cancel, a release, a task's end
    r = post(d, "/api/v1/tasks/%d/cancel" % q_batch["id"])
    assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
    r = post(d, "/api/v1/tasks/%d/release" % held[0]["id"], {})
    assert r.status_code == 200 and r.json()["state"] == "succeeded", r.text
    # the reserve's room taken too: the runner's output and its result
    # cannot be written; its supervisor survives and keeps the end until
    # there is room (no API calls meanwhile: a commit would wait for space)
    fill(os.path.join(data, "filler2"))
    sup = int(open(os.path.join(data, "tasks", str(b["id"]), "supervisor.pid")).read().split()[0])
    open(go, "w").close()
    time.sleep(1.5)
    assert pid_alive(sup), "the supervisor must survive a full disk"
    assert not os.path.exists(os.path.join(data, "tasks", str(b["id"]), "result.json"))
    os.unlink(os.path.join(data, "filler2"))
    ended = wait_state(d, b["id"], ("failed",), timeout=15)
    assert ended["exit_code"] == 3, ended
    with open(os.path.join(data, "tasks", str(b["id"]), "log")) as f:
        out = f.read()
    assert "bytes of output lost: the disk was full]" in out, out
    # no task starts while its `running` state might not be storable: the
    # GPUs freed above stay free, the queued lease waits
    time.sleep(1.5)
    assert task(d, q_lease["id"])["state"] == "queued"
    assert d.proc.poll() is None, "the daemon must survive a full disk:\n" + d.log()

    # space is back: submits work again by themselves
    os.unlink(os.path.join(data, "filler"))

    def accepted():
        r = submit_raw(d, {"name": "after", "lease_ttl_s": 600})
        return r.json() if r.status_code == 201 else None
    after = wait_for(accepted, 5, "a submit to be accepted once space is back", interval=0.2)
    acked.add(after["id"])
    h = d.api("GET", "/healthz", timeout=10)
    assert h.status_code == 200 and h.json()["status"] == "ok", h.text
    assert "\ngpupool_store_degraded 0\n" in d.api("GET", "/metrics", timeout=10).text
    wait_state(d, q_lease["id"], ("running",), timeout=10)
    assert os.path.getsize(os.path.join(data, "gpupool.reserve")) == 4 << 20, "the reserve is made again"
    log = d.log()
    assert log.count("store degraded:") == 1 and log.count("store no longer degraded") == 1, log

    # nothing acknowledged is lost
    kill9(d)
    restart(d)
    got = all_tasks(d)
    assert set(got) == acked, (sorted(got), sorted(acked))
    assert got[q_batch["id"]]["state"] == "cancelled"
    assert got[held[0]["id"]]["state"] == "succeeded"
    assert got[b["id"]]["state"] == "failed" and got[b["id"]]["exit_code"] == 3
    assert got[q_lease["id"]]["state"] == "running"
    assert got[after["id"]]["state"] in ("queued", "running")
    for t in held[1:]:
        assert got[t["id"]]["state"] == "running"


def test_a_disk_full_at_start_starts_degraded_and_a_cancel_is_stored(tmpfs_daemon):
    d = tmpfs_daemon
    data = d.data_dir
    held = [lease(d, name="held-%d" % i) for i in range(4)]
    q = lease(d, name="queued")
    assert q["state"] == "queued"
    d.stop()
    fill(os.path.join(data, "filler"))
    restart(d)  # the reserve left from the first run is given back at start
    assert d.api("GET", "/healthz", timeout=10).json()["status"] == "degraded"
    assert_error(submit_raw(d, {"name": "refused", "lease_ttl_s": 600}), 507, "insufficient_storage")
    r = post(d, "/api/v1/tasks/%d/cancel" % q["id"])
    assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
    assert d.proc.poll() is None
    os.unlink(os.path.join(data, "filler"))
    kill9(d)
    restart(d)
    assert task(d, q["id"])["state"] == "cancelled", "the cancel made on a full disk must survive"
    for t in held:
        assert task(d, t["id"])["state"] == "running"
    assert d.api("GET", "/healthz", timeout=10).json()["status"] == "ok"


RACE_CONFIG = "gpus: {backend: sim}\nstore: {disk_min_free_mb: 0, disk_reserve_mb: 4}\n"


def test_a_commit_that_finds_the_disk_full_is_stored_with_the_reserve(tmp_path):
    """No free-space margin (disk_min_free_mb: 0), so the free-space check
    cannot see it coming: the first submit on a full disk fails its commit.
    The daemon gives the reserve back and stores that same batch (201, and
    it survives a kill -9), then refuses further submits with 507."""
    _require_bin()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs for the data dir")
    data = tmp_path / "data"
    data.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + TMPFS_SIZE, "tmpfs", str(data)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs")
    d = Daemon(tmp_path, RACE_CONFIG)
    try:
        d.start()
        before = lease(d, name="before")
        fill(os.path.join(d.data_dir, "filler"))
        r = submit_raw(d, {"name": "on-the-edge", "lease_ttl_s": 600})
        assert r.status_code == 201, r.text
        edge = r.json()
        assert "store degraded:" in wait_for(lambda: d.log() if "store degraded:" in d.log() else None, 5,
                                             "the degraded log line")
        assert not os.path.exists(os.path.join(d.data_dir, "gpupool.reserve")), "the reserve is given back"
        assert_error(submit_raw(d, {"name": "refused", "lease_ttl_s": 600}), 507, "insufficient_storage")
        assert d.api("GET", "/healthz", timeout=10).json()["status"] == "degraded"
        assert d.proc.poll() is None
        kill9(d)
        os.unlink(os.path.join(d.data_dir, "filler"))
        restart(d)
        got = all_tasks(d)
        assert set(got) == {before["id"], edge["id"]}, got
    finally:
        d.stop()
        kill_supervisor_sessions(tmp_path)
        for _ in range(50):
            if subprocess.run(["umount", str(data)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(data)], capture_output=True)
