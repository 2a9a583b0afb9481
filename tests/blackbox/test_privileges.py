"""Privileges: the daemon drops root (server.user / --user), and batch
tasks run as their tenant's Unix user (tenants[].run_as).

The tests make throw-away system users (useradd -M --system) and remove
them afterwards; they need root and are skipped otherwise.  Directories a
dropped daemon or a task user must reach are made under /tmp with modes
that let them (pytest's tmp_path lies under a 0700 directory).
"""
import os
import pathlib
import pwd
import shutil
import subprocess
import tempfile
import time

import pytest
import requests

from apiutil import batch, kill_supervisor_sessions, reap_supervisors, task, wait_state  # noqa: F401
from conftest import SIM_CONFIG, Daemon, _require_bin, free_port, gpupool_bin

pytestmark = pytest.mark.e2e

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (useradd, and a daemon that starts as root)")


@pytest.fixture
def make_user():
    """make_user() -> (name, uid, gid): a new system user, no home, deleted
    (with its processes gone) when the test ends."""
    made = []

    def make():
        name = "gpt%d%d" % (os.getpid() % 100000, len(made))
        subprocess.run(["userdel", name], capture_output=True)   # left over by a killed run
        r = subprocess.run(["useradd", "-M", "--system", "-s", "/usr/sbin/nologin", name],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip("useradd failed: %s" % r.stderr.strip())
        made.append(name)
        pw = pwd.getpwnam(name)
        return name, pw.pw_uid, pw.pw_gid

    yield make
    for name in made:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def shared_dir():
    """A directory under /tmp every user can reach (mode 1777, like /tmp)."""
    d = tempfile.mkdtemp(prefix="gpupool-priv-")
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def uid_of(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Uid:"):
                return [int(x) for x in line.split()[1:]]
    raise AssertionError("no Uid line")


def groups_of(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Groups:"):
                return [int(x) for x in line.split()[1:]]
    raise AssertionError("no Groups line")


def logs(d, tid):
    r = d.api("GET", "/api/v1/tasks/%d/logs" % tid, timeout=10)
    assert r.status_code == 200, r.text
    return r.text


class PrivDaemon(Daemon):
    """A daemon on a data dir of our choosing, which start() does not make
    (Daemon.start would, as root), optionally started through `prefix`
    (e.g. setpriv to start it as another user)."""

    def __init__(self, tmp_path, data_dir, config_text, extra_args=(), prefix=()):
        super().__init__(tmp_path, config_text, extra_args)
        self.data_dir = data_dir
        self.prefix = list(prefix)

    def start(self, timeout=20.0):
        with open(self.config_path, "w") as f:
            f.write(self.config_text)
        os.chmod(self.config_path, 0o644)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.prefix + [self.bin, "server", "--config", self.config_path, "--listen", "127.0.0.1:%d" % self.port,
                           "--data-dir", self.data_dir] + self.extra_args,
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("gpupool server exited with %s:\n%s" % (self.proc.returncode, self.log()))
            try:
                if requests.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("gpupool server not ready within %.0f s:\n%s" % (timeout, self.log()))


@pytest.fixture
def daemons():
    started = []
    yield started
    for d in started:
        d.stop()
        kill_supervisor_sessions(d.data_dir)


def run_server(args, timeout=30):
    return subprocess.run([gpupool_bin(), "server"] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# ---- server.user -------------------------------------------------------------

@needs_root
def test_server_user_drops_root_and_still_serves_and_runs_tasks(tmp_path, make_user, shared_dir, daemons):
    _require_bin()
    name, uid, gid = make_user()
    data = os.path.join(shared_dir, "data")   # does not exist: the daemon makes it for the user
    d = PrivDaemon(tmp_path, data, SIM_CONFIG + "server: {user: %s}\n" % name)
    daemons.append(d)
    d.start()
    assert uid_of(d.proc.pid) == [uid, uid, uid, uid], d.log()
    assert 0 not in groups_of(d.proc.pid)
    assert "dropped root" in d.log() and "running as root" not in d.log()
    st = os.stat(data)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, gid, 0o700)
    assert os.stat(os.path.join(data, "gpupool.db")).st_uid == uid
    # still serves, and runs tasks (as the user, supervisor included)
    assert requests.get(d.url + "/api/v1/gpus", timeout=10).status_code == 200
    t = batch(d, ["sh", "-c", "id -u; cat /proc/$PPID/status | grep ^Uid"], memory_mb=10)
    t = wait_state(d, t["id"], ["succeeded", "failed"], timeout=30)
    assert t["state"] == "succeeded", t
    out = logs(d, t["id"]).split()
    assert out[0] == str(uid) and out[2:6] == [str(uid)] * 4, out


@needs_root
def test_server_user_refuses_a_data_dir_of_another_owner(tmp_path, make_user, shared_dir):
    _require_bin()
    name, uid, _ = make_user()
    data = os.path.join(shared_dir, "data")
    os.mkdir(data)   # root's
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SIM_CONFIG + "server: {user: %s}\n" % name)
    r = run_server(["--config", cfg, "--listen", "127.0.0.1:%d" % free_port(), "--data-dir", data])
    assert r.returncode == 1, r.stderr
    assert "belongs to uid 0" in r.stderr and name in r.stderr and "chown" in r.stderr, r.stderr
    assert os.listdir(data) == [] and os.stat(data).st_uid == 0   # nothing made in it, nothing chowned


@needs_root
def test_user_option_drops_root_too(tmp_path, make_user, shared_dir, daemons):
    _require_bin()
    name, uid, _ = make_user()
    data = os.path.join(shared_dir, "data")
    os.mkdir(data, 0o700)
    os.chown(data, uid, -1)   # an existing data dir of the user's is used as it is
    d = PrivDaemon(tmp_path, data, SIM_CONFIG, extra_args=["--user", name])
    daemons.append(d)
    d.start()
    assert uid_of(d.proc.pid) == [uid] * 4
    assert requests.get(d.url + "/api/v1/gpus", timeout=10).status_code == 200


def test_an_unknown_server_user_stops_the_start_with_file_and_line(tmp_path):
    _require_bin()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SIM_CONFIG + "server:\n  user: no-such-user-gp\n")
    r = run_server(["--config", cfg, "--listen", "127.0.0.1:%d" % free_port(), "--data-dir", tmp_path / "data"])
    assert r.returncode == 1, r.stderr
    assert "c.yaml:3" in r.stderr and "server.user" in r.stderr and "no-such-user-gp" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "data")
    r = run_server(["--user", "no-such-user-gp", "--listen", "127.0.0.1:%d" % free_port(),
                    "--data-dir", tmp_path / "data"])
    assert r.returncode == 1 and "no-such-user-gp" in r.stderr and "no such Unix user" in r.stderr, r.stderr


@needs_root
def test_a_root_daemon_without_server_user_warns(daemon):
    assert "running as root without server.user" in daemon.log()


# ---- tenants[].run_as --------------------------------------------------------

RUN_AS_CONFIG = SIM_CONFIG + """tenants:
  - {id: a, run_as: %s}
  - {id: b, run_as: %s}
  - {id: c}
"""


def finish(d, t):
    return wait_state(d, t["id"], ["succeeded", "failed"], timeout=30)


@needs_root
def test_tasks_run_as_their_tenants_user_and_cannot_read_each_others_files(tmp_path, make_user, shared_dir,
                                                                            daemons):
    _require_bin()
    ua, uid_a, gid_a = make_user()
    ub, uid_b, _ = make_user()
    data = os.path.join(shared_dir, "data")   # reachable by the users: only the task dirs keep them out
    d = PrivDaemon(tmp_path, data, RUN_AS_CONFIG % (ua, ub))
    daemons.append(d)
    d.start()
    secret = os.path.join(shared_dir, "secret")
    ta = finish(d, batch(d, ["sh", "-c", "umask 077; echo top-secret > %s; id -u; id -g; pwd; "
                                         "echo mine > mine && echo wrote-cwd" % secret], tenant_id="a", memory_mb=10))
    assert ta["state"] == "succeeded", ta
    out = logs(d, ta["id"]).split()
    assert out[0] == str(uid_a) and out[1] == str(gid_a), out
    work = os.path.join(data, "tasks", str(ta["id"]), "work")
    assert out[2] == os.path.realpath(work) and out[3] == "wrote-cwd", out
    st = os.stat(secret)
    assert st.st_uid == uid_a and st.st_mode & 0o777 == 0o600
    assert os.stat(work).st_uid == uid_a and os.stat(os.path.dirname(work)).st_uid == 0

    tb = finish(d, batch(d, ["sh", "-c", "id -u; cat %s" % secret], tenant_id="b", memory_mb=10))
    assert tb["state"] == "failed" and tb["exit_code"] != 0, tb
    lb = logs(d, tb["id"])
    assert lb.split()[0] == str(uid_b), lb
    assert "Permission denied" in lb and "top-secret" not in lb, lb

    # nor A's task dir: its log, spec and work dir stay out of B's reach
    tdir = os.path.dirname(work)
    tb2 = finish(d, batch(d, ["sh", "-c", "cat %s/log; ls %s; cat %s/mine" % (tdir, tdir, work)], tenant_id="b",
                          memory_mb=10))
    lb2 = logs(d, tb2["id"])
    assert tb2["state"] == "failed" and lb2.count("Permission denied") == 3 and "mine" not in lb2.replace(
        work + "/mine", ""), lb2

    # a tenant without run_as runs as the daemon's user (root here)
    tc = finish(d, batch(d, ["id", "-u"], tenant_id="c", memory_mb=10))
    assert tc["state"] == "succeeded" and logs(d, tc["id"]).split()[0] == "0", tc

    # the user's HOME, USER and LOGNAME, unless the task's env says otherwise
    te = finish(d, batch(d, ["sh", "-c", "echo $USER $LOGNAME $HOME"], tenant_id="a", memory_mb=10,
                         env={"LOGNAME": "mine"}))
    assert logs(d, te["id"]).split() == [ua, "mine", pwd.getpwnam(ua).pw_dir], te


@needs_root
def test_run_as_enters_workdir_with_the_users_rights(make_user, shared_dir, daemon_factory):
    ua, _, _ = make_user()
    d = daemon_factory(RUN_AS_CONFIG % (ua, ua))
    private = os.path.join(shared_dir, "root-only")
    os.mkdir(private, 0o700)
    t = finish(d, batch(d, ["true"], tenant_id="a", memory_mb=10, workdir=private))
    assert t["state"] == "failed", t
    assert "workdir" in t["reason"] and "run_as" in t["reason"] and "ermission denied" in t["reason"], t


@needs_root
def test_run_as_with_server_user_is_refused_at_start(tmp_path, make_user):
    _require_bin()
    srv, _, _ = make_user()
    ua, _, _ = make_user()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(RUN_AS_CONFIG % (ua, ua))
    r = run_server(["--config", cfg, "--user", srv, "--listen", "127.0.0.1:%d" % free_port(),
                    "--data-dir", tmp_path / "data"])
    assert r.returncode == 1 and "run_as '%s'" % ua in r.stderr and "server.user '%s'" % srv in r.stderr, r.stderr


@needs_root
def test_run_as_on_a_daemon_that_is_not_root_fails_the_task_naming_run_as(tmp_path, make_user, shared_dir,
                                                                          daemons):
    _require_bin()
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) not installed")
    srv, srv_uid, srv_gid = make_user()
    ua, _, _ = make_user()
    data = os.path.join(shared_dir, "data")
    os.mkdir(data, 0o700)
    os.chown(data, srv_uid, srv_gid)
    conf_dir = os.path.join(shared_dir, "conf")   # the log and config: tmp_path is out of its reach
    os.mkdir(conf_dir)
    # started as that user by someone else (a service manager), not through server.user
    d = PrivDaemon(pathlib.Path(conf_dir), data, RUN_AS_CONFIG % (ua, ua),
                   prefix=["setpriv", "--reuid", str(srv_uid), "--regid", str(srv_gid), "--clear-groups"])
    daemons.append(d)
    d.start()
    assert uid_of(d.proc.pid)[0] == srv_uid
    t = finish(d, batch(d, ["id", "-u"], tenant_id="a", memory_mb=10))
    assert t["state"] == "failed", t
    assert "run_as '%s'" % ua in t["reason"] and "not root" in t["reason"], t
    assert logs(d, t["id"]).strip() == "[gpupool: %s]" % t["reason"]


def test_an_unknown_run_as_user_stops_the_start_with_file_and_line(tmp_path):
    _require_bin()
    cfg = tmp_path / "c.yaml"
    for value, what in [("no-such-user-gp", "no Unix user"), ("'bad name'", "not a Unix user name"),
                        ("'12345'", "not a Unix user name")]:
        cfg.write_text(SIM_CONFIG + "tenants:\n  - id: a\n    run_as: %s\n" % value)
        r = run_server(["--config", cfg, "--listen", "127.0.0.1:%d" % free_port(), "--data-dir", tmp_path / "data"])
        assert r.returncode == 1, r.stderr
        assert "c.yaml:4" in r.stderr and "run_as" in r.stderr and what in r.stderr, r.stderr
