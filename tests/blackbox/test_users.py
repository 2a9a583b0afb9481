"""Local users known from the kernel (issue 23; DESIGN.md, Trust).

A root server with a local socket (server.socket, peer credentials); real
throw-away Unix users (useradd, named with this test's pid, removed at the
end) run the real CLI.  A task runs as its submitter (uid, groups, HOME),
in the directory it was submitted from, with the submitter's environment
(--export ALL by default, NONE, NAME,...); users see and cancel their own
tasks, root all; a keyless request nobody is named for never runs a
command as root.  The README's tour runs verbatim as such a user.
"""
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time

import pytest
import requests

pytestmark = pytest.mark.e2e

if os.geteuid() != 0:
    pytest.skip("needs root (useradd, a root server)", allow_module_level=True)


class User:
    """A throw-away Unix user with a home and a work directory of its own."""

    def __init__(self, tag):
        self.name = "gpt%d%s" % (os.getpid() % 100000, tag)
        subprocess.run(["userdel", "-r", self.name], capture_output=True)
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", self.name], check=True, capture_output=True)
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid, self.home = pw.pw_uid, pw.pw_gid, pw.pw_dir
        self.work = tempfile.mkdtemp(prefix="gpupool-%s-" % self.name)
        os.chmod(self.work, 0o755)
        os.chown(self.work, self.uid, self.gid)

    def remove(self):
        # what it still runs (a test that failed half-way) goes first: its processes, by pid
        for p in os.listdir("/proc"):
            try:
                if p.isdigit() and os.stat("/proc/" + p).st_uid == self.uid:
                    os.kill(int(p), 9)
            except OSError:
                pass
        subprocess.run(["userdel", "-r", self.name], capture_output=True)
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.rmtree("/tmp/gpupool-%d" % self.uid, ignore_errors=True)   # a server of this user's socket dir

    def env(self, daemon, **extra):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.home, "USER": self.name,
               "LOGNAME": self.name, "GPUPOOL_API": daemon.url, "LANG": "C.UTF-8"}
        env.update(extra)
        return env

    def cli(self, daemon, *args, env=None, cwd=None, timeout=90):
        """gpupool ARGS as this user (its uid, gid and groups), in its work dir."""
        def become():
            os.setgroups(os.getgrouplist(self.name, self.gid))
            os.setgid(self.gid)
            os.setuid(self.uid)
        return subprocess.run([daemon.bin] + [str(a) for a in args], env=env or self.env(daemon),
                              cwd=cwd or self.work, preexec_fn=become, capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture
def users():
    made = []

    def make(tag):
        u = User(tag)
        made.append(u)
        return u

    yield make
    for u in made:
        u.remove()


@pytest.fixture
def server(daemon_factory):
    return daemon_factory("gpus: {backend: sim}\n")


def task(d, tid):
    r = d.api("GET", "/api/v1/tasks/%d" % tid)
    assert r.status_code == 200, r.text
    return r.json()


def wait_final(d, tid, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = task(d, tid)
        if t["state"] not in ("queued", "running"):
            return t
        time.sleep(0.1)
    raise AssertionError("task %d did not end: %s" % (tid, task(d, tid)))


def submit(user, d, *args, **kw):
    r = user.cli(d, "submit", *args, **kw)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def log_of(d, tid):
    with open(os.path.join(d.data_dir, "tasks", str(tid), "log")) as f:
        return f.read()


def ps_ids(out):
    """The task ids of `gpupool ps` output (first column below the header)."""
    return [ln.split()[0] for ln in out.splitlines()[2:] if ln.strip()]


def processes_of(uid, word):
    """Live processes of uid whose command line has word (from /proc)."""
    n = 0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if os.stat("/proc/" + p).st_uid != uid:
                continue
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if word.encode() in f.read():
                    n += 1
        except OSError:
            pass
    return n


def test_task_runs_as_its_submitter_in_its_directory_with_its_environment(server, users):
    a = users("a")
    script = 'id -u; id -g; pwd; echo "FOO=$FOO"; echo "HOME=$HOME"; echo "USER=$USER"; echo "SHELL=$SHELL"'
    tid = submit(a, server, "--", "sh", "-c", script, env=a.env(server, FOO="bar baz"))
    t = wait_final(server, tid)
    assert t["state"] == "succeeded", t
    assert t["user"] == a.name
    assert t["workdir"] == a.work
    lines = log_of(server, tid).splitlines()
    assert lines[0] == str(a.uid)
    assert lines[1] == str(a.gid)
    assert lines[2] == a.work
    assert "FOO=bar baz" in lines
    assert "HOME=%s" % a.home in lines
    assert "USER=%s" % a.name in lines
    assert "SHELL=/bin/sh" in lines
    # the user reads its own log through the CLI
    r = a.cli(server, "logs", tid)
    assert r.returncode == 0, r.stderr
    assert "FOO=bar baz" in r.stdout


def test_export_none_and_a_list_choose_what_arrives(server, users):
    a = users("e")
    env = a.env(server, FOO="one", BAR="two", PATH="/opt/nothing:/usr/bin:/bin")
    script = 'echo "FOO=$FOO"; echo "BAR=$BAR"; echo "PATH=$PATH"'
    tid = submit(a, server, "--export", "NONE", "--", "sh", "-c", script, env=env)
    assert wait_final(server, tid)["state"] == "succeeded"
    out = log_of(server, tid).splitlines()
    assert "FOO=" in out and "BAR=" in out
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in out   # a minimal PATH, not the daemon's
    tid = submit(a, server, "--export", "FOO,QUX=3", "--", "sh", "-c", script + '; echo "QUX=$QUX"', env=env)
    assert wait_final(server, tid)["state"] == "succeeded"
    out = log_of(server, tid).splitlines()
    assert "FOO=one" in out and "BAR=" in out and "QUX=3" in out
    # ALL (the default) carries the submitter's PATH
    tid = submit(a, server, "--", "sh", "-c", script, env=env)
    assert wait_final(server, tid)["state"] == "succeeded"
    assert "PATH=/opt/nothing:/usr/bin:/bin" in log_of(server, tid).splitlines()


def test_a_directory_the_user_cannot_enter_ends_the_task_with_the_reason(server, users):
    a = users("w")
    private = tempfile.mkdtemp(prefix="gpupool-root-only-")
    try:
        os.chmod(private, 0o700)
        tid = submit(a, server, "--workdir", private, "--", "true")
        t = wait_final(server, tid)
        assert t["state"] == "failed", t
        assert "cannot enter workdir" in t["reason"] and "Permission denied" in t["reason"], t["reason"]
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_users_see_and_cancel_only_their_own_tasks_and_root_all(server, users):
    a, b = users("a"), users("b")
    ta = submit(a, server, "--", "sleep", "300")
    tb = submit(b, server, "--", "sleep", "301")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (processes_of(a.uid, "300") < 1 or processes_of(b.uid, "301") < 1):
        time.sleep(0.1)
    assert processes_of(a.uid, "300") == 1 and processes_of(b.uid, "301") == 1

    r = a.cli(server, "ps")
    assert r.returncode == 0, r.stderr
    ids = ps_ids(r.stdout)
    assert str(ta) in ids and str(tb) not in ids
    assert a.name in r.stdout and b.name not in r.stdout
    r = a.cli(server, "ps", "--me")
    assert r.returncode == 0 and ps_ids(r.stdout) == [str(ta)]
    r = a.cli(server, "ps", "-u", b.name)
    assert r.returncode == 1 and "own tasks only" in r.stderr
    r = a.cli(server, "status", tb)
    assert r.returncode == 1 and "not_found" in r.stderr

    # A cannot cancel B's task: 404, and B's process lives on
    r = a.cli(server, "cancel", tb)
    assert r.returncode == 1 and "not_found" in r.stderr, (r.stdout, r.stderr)
    r = a.cli(server, "cancel", "-u", b.name)
    assert r.returncode == 1
    time.sleep(0.5)
    assert task(server, tb)["state"] == "running"
    assert processes_of(b.uid, "301") == 1

    # root sees both (with their users) and may cancel anyone's
    r = server.cli("ps")
    assert r.returncode == 0, r.stderr
    assert a.name in r.stdout and b.name in r.stdout
    r = server.cli("ps", "-u", b.name)
    assert ps_ids(r.stdout) == [str(tb)]
    r = server.cli("cancel", tb)
    assert r.returncode == 0, r.stderr
    # A cancels its own with scancel's -u
    r = a.cli(server, "cancel", "--me")
    assert r.returncode == 0, r.stderr
    assert "cancelled 1" in r.stdout
    for tid in (ta, tb):
        assert wait_final(server, tid)["state"] == "cancelled"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and processes_of(a.uid, "300") + processes_of(b.uid, "301"):
        time.sleep(0.1)
    assert processes_of(a.uid, "300") == 0 and processes_of(b.uid, "301") == 0


def test_admin_group_members_see_everyone(daemon_factory, users):
    a, b = users("a"), users("g")
    group = "gpg%d" % (os.getpid() % 100000)
    subprocess.run(["groupdel", group], capture_output=True)
    subprocess.run(["groupadd", group], check=True)
    try:
        subprocess.run(["usermod", "-aG", group, b.name], check=True)
        d = daemon_factory("gpus: {backend: sim}\nauth: {admin_group: %s}\n" % group)
        ta = submit(a, d, "--", "sleep", "30")
        r = b.cli(d, "ps")
        assert r.returncode == 0 and str(ta) in ps_ids(r.stdout), r.stdout
        r = b.cli(d, "cancel", ta)
        assert r.returncode == 0, r.stderr
        assert wait_final(d, ta)["state"] == "cancelled"
    finally:
        subprocess.run(["groupdel", group], capture_output=True)


def test_keyless_tcp_names_the_socket_owner_and_no_one_runs_nothing_as_root(server, users):
    a = users("t")
    before = len(server.api("GET", "/api/v1/tasks?limit=1000").json()["tasks"])
    # a request a follower forwarded (or any the kernel cannot name): refused, nothing runs
    r = server.api("POST", "/api/v1/tasks", json={"command": ["touch", "/tmp/gpupool-must-not-exist"]},
                   headers={"X-Gpupool-Forwarded-For": "127.0.0.1"})
    assert r.status_code == 403, r.text
    assert "local socket" in r.json()["error"]["message"]
    assert len(server.api("GET", "/api/v1/tasks?limit=1000").json()["tasks"]) == before
    # a lease runs nothing: still served
    r = server.api("POST", "/api/v1/tasks", json={"gpu_request": 1},
                   headers={"X-Gpupool-Forwarded-For": "127.0.0.1"})
    assert r.status_code in (200, 201), r.text
    server.api("POST", "/api/v1/tasks/%d/release" % r.json()["id"])
    # plain TCP from user A (curl, no key): the kernel's socket table names A
    r = subprocess.run(["curl", "-s", "-X", "POST", "-H", "Content-Type: application/json", "-d",
                        '{"command": ["id", "-u"]}', server.url + "/api/v1/tasks"],
                       preexec_fn=lambda: (os.setgid(a.gid), os.setuid(a.uid)), capture_output=True, text=True)
    t = r.stdout and __import__("json").loads(r.stdout)
    assert t and t["user"] == a.name, r.stdout
    assert wait_final(server, t["id"])["state"] == "succeeded"
    assert log_of(server, t["id"]).strip() == str(a.uid)
    # a client that closes its socket right after its request: the kernel then shows the
    # socket as nobody's (uid 0); that must never make the request root's
    code = ("import socket, sys\n"
            "body = b'{\"command\": [\"id\", \"-u\"]}'\n"
            "req = (b'POST /api/v1/tasks HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nContent-Type: application/json\\r\\n'\n"
            "       b'Content-Length: %d\\r\\n\\r\\n' % len(body)) + body\n"
            "for _ in range(30):\n"
            "    s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
            "    s.sendall(req)\n"
            "    s.close()\n")
    subprocess.run(["/usr/bin/python3", "-c", code, str(server.port)], check=True, timeout=60,
                   preexec_fn=lambda: (os.setgid(a.gid), os.setuid(a.uid)))
    time.sleep(1)
    for t in server.api("GET", "/api/v1/tasks?limit=1000").json()["tasks"]:
        if t["kind"] == "batch":
            assert t["user"] == a.name, t
            wait_final(server, t["id"])
            assert log_of(server, t["id"]).strip() == str(a.uid), t


def test_the_socket_is_used_by_default_and_names_the_caller(server, users):
    a = users("s")
    path = "/run/gpupool/%d.sock" % server.port
    st = os.stat(path)
    assert st.st_mode & 0o777 == 0o666
    # the CLI with GPUPOOL_API unset talks to 127.0.0.1:8080; with it set to a loopback URL it
    # finds the socket of that port: the API's "who" in the audit of a submit is not needed,
    # the task's user is
    tid = submit(a, server, "--", "true")
    assert task(server, tid)["user"] == a.name
    # off: plain TCP, where the kernel still names the user on a root server
    tid = submit(a, server, "--", "true", env=a.env(server, GPUPOOL_SOCKET="off"))
    t = wait_final(server, tid)
    assert t["user"] == a.name and t["state"] == "succeeded"
    # the gateway is not served on the socket
    r = subprocess.run(["curl", "-s", "--unix-socket", path, "http://x/v1/models"], capture_output=True, text=True)
    assert "not on the local socket" in r.stdout
    # a server that stops takes its socket away
    server.stop()
    assert not os.path.exists(path)


def test_a_server_that_is_not_root_serves_its_own_user_and_runs_nothing_as_another(tmp_path, users):
    from conftest import Daemon
    a, b = users("o"), users("p")
    d = Daemon(tmp_path, "gpus: {backend: sim}\nserver: {user: %s}\n" % a.name)
    d.data_dir = os.path.join(a.work, "data")   # the server's user must reach and own it
    os.mkdir(d.data_dir, 0o700)
    os.chown(d.data_dir, a.uid, a.gid)
    d.start()
    try:
        _not_root_server(d, a, b)
    finally:
        d.stop()


def _not_root_server(d, a, b):
    path = "/tmp/gpupool-%d/%d.sock" % (a.uid, d.port)
    st = os.stat(path)
    assert st.st_uid == a.uid
    # its own user: over the socket (found by the CLI), as itself, where it was
    tid = submit(a, d, "--", "sh", "-c", "id -u; pwd")
    t = wait_final(d, tid)
    assert t["user"] == a.name and t["state"] == "succeeded", t
    assert log_of(d, tid).split() == [str(a.uid), a.work]
    # another user on that socket: the server cannot run as it, so it refuses (never runs as A)
    r = subprocess.run(["curl", "-s", "--unix-socket", path, "-H", "Content-Type: application/json", "-d",
                        '{"command": ["true"]}', "http://localhost/api/v1/tasks"],
                       preexec_fn=lambda: (os.setgid(b.gid), os.setuid(b.uid)), capture_output=True, text=True)
    assert "cannot run tasks as %s" % b.name in r.stdout, r.stdout
    # B's CLI does not use a socket of another user's server: plain TCP, as before this change
    r = b.cli(d, "ps")
    assert r.returncode == 0, r.stderr


def test_a_queued_users_task_keeps_its_user_directory_and_environment_across_a_restart(server, users):
    from apiutil import restart
    a = users("q")
    # every GPU held by a lease: A's task waits in the queue
    r = server.api("POST", "/api/v1/tasks", json={"gpu_request": 4, "lease_ttl_s": 120})
    assert r.status_code == 201, r.text
    lease = r.json()["id"]
    tid = submit(a, server, "--", "sh", "-c", 'id -u; pwd; echo "V=$V"', env=a.env(server, V="kept"))
    assert task(server, tid)["state"] == "queued"
    restart(server)
    assert task(server, tid)["user"] == a.name
    assert server.api("POST", "/api/v1/tasks/%d/release" % lease).status_code == 200
    assert wait_final(server, tid)["state"] == "succeeded"
    assert log_of(server, tid).splitlines() == [str(a.uid), a.work, "V=kept"]


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_tour(name):
    """The first block of README NAME with `$ gpupool` lines: [(command, README's output lines)],
    comments dropped."""
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
        text = f.read()
    block = next(b.split("```", 1)[0] for b in text.split("```sh\n")[1:] if "\n$ gpupool " in b)
    steps = []
    for ln in block.splitlines():
        if ln.startswith("$ "):
            steps.append((re.split(r"\s{2,}#", ln[2:])[0].strip(), []))
        elif ln.strip() and not ln.lstrip().startswith("#") and steps:
            steps[-1][1].append(ln.strip())
    return steps


def test_readme_tour_runs_verbatim_as_a_new_user(server, users):
    """The README's tour, each line as README.md writes it (read from the file; ids as the server gave
    them), by a real user; README.zh-CN.md's tour is the same commands."""
    tour = readme_tour("README.md")
    assert [c for c, _ in readme_tour("README.zh-CN.md")] == [c for c, _ in tour]
    assert tour[0][0] == "gpupool submit --gpus 2 --mem 8000 -- python3 train.py", tour[0]
    u = users("r")
    files = {
        "train.py": "import os, time\n"
                    "if os.environ.get('GPUPOOL_ARRAY_ID'):\n"
                    "    time.sleep(120)\n"
                    "with open('trained.txt', 'w') as f:\n"
                    "    f.write('%d %s %s\\n' % (os.getuid(), os.getcwd(), os.environ['CUDA_VISIBLE_DEVICES']))\n"
                    "print('trained')\n",
        "eval.py": "import os\nopen('evaluated.txt', 'w').write(os.environ['GPUPOOL_TASK_ID'])\n",
        "job.sh": "#!/bin/sh\n#SBATCH --job-name=job\n#SBATCH --time=5:00\n#GPUPOOL --gpus 1\necho job ran\n",
        "my-tool": "#!/bin/sh\necho tool on $CUDA_VISIBLE_DEVICES\n",
    }
    for name, body in files.items():
        path = os.path.join(u.work, name)
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, 0o755)
        os.chown(path, u.uid, u.gid)

    ids = {}   # README's id -> the server's

    def run(line):
        words = [re.sub(r"^(\d+)", lambda m: ids.get(m.group(1), m.group(1)), w) for w in line.split()]
        r = u.cli(server, *words[1:])
        assert r.returncode == 0, (line, words, r.stdout, r.stderr)
        return r.stdout

    ran = []
    for cmd, out in tour:
        if cmd.startswith("gpupool cancel 20 21 22_3"):
            # ids the README makes up: two tasks and an array of this user's, as the server numbers them
            ids["20"], ids["21"] = (str(submit(u, server, "--", "sleep", "60")) for _ in range(2))
            ids["22"] = str(submit(u, server, "--array", "0-3", "--", "sleep", "60"))
        stdout = run(cmd)
        ran.append(cmd)
        if out and re.fullmatch(r"\d+", out[0]):   # a submit's id, as the README shows it
            ids[out[0]] = stdout.strip()
        if cmd.startswith("gpupool logs -f"):
            assert "trained" in stdout, stdout
            tid = int(ids["7"])
            t = task(server, tid)
            assert t["state"] == "succeeded" and t["exit_code"] == 0, t
            with open(os.path.join(u.work, "trained.txt")) as f:
                uid, cwd, cvd = f.read().split()
            assert (int(uid), cwd, len(cvd.split(","))) == (u.uid, u.work, 2)
            assert os.stat(os.path.join(u.work, "trained.txt")).st_uid == u.uid
        if cmd.startswith("gpupool submit --array"):
            assert re.search(r"%s_\[0-1999%%50\]" % ids["12"], run("gpupool ps")), run("gpupool ps")
        if cmd.startswith("gpupool cancel 12_7"):
            assert task(server, int(ids["12"]) + 7)["state"] == "cancelled"
            run("gpupool cancel --array 12")   # "all of them", as its comment says
        if cmd.startswith("gpupool submit --wait"):
            assert "job ran" not in stdout and re.fullmatch(r"\d+\n", stdout), stdout
        if cmd.startswith("gpupool cancel 20 21 22_3"):
            for k in ("20", "21"):
                assert wait_final(server, int(ids[k]))["state"] == "cancelled"
            assert wait_final(server, int(ids["22"]) + 3)["state"] == "cancelled"
            assert task(server, int(ids["22"]))["state"] == "running"
        if cmd.startswith("gpupool ps -r"):
            assert re.search(r"^%s_2 " % ids["22"], stdout, re.M), stdout
        if cmd.startswith("gpupool run"):
            assert "tool on" in stdout, stdout
    assert len(ran) == len(tour) >= 15, ran
    with open(os.path.join(u.work, "evaluated.txt")) as f:
        assert int(f.read()) > 0
    server.cli("cancel", "--state", "running")


# ---- several servers (PostgreSQL): a follower forwards its local client's identity ----

from test_ha import pair, pg_db  # noqa: E402,F401  (fixtures; skipped without GPUPOOL_TEST_PG_URL)


def test_a_local_user_submitting_through_a_follower_runs_as_itself(pair, users):
    s1, s2 = pair
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and s2.health() != "follower":
        time.sleep(0.1)
    a = users("f")
    # the CLI through the follower's TCP port: the follower's kernel names A, the leader believes it
    tid = submit(a, s2, "--", "id", "-u", env=a.env(s2, GPUPOOL_SOCKET="off"))
    t = wait_final(s1, tid)
    assert t["user"] == a.name and t["state"] == "succeeded", t
    assert log_of(s1, tid).strip() == str(a.uid)

    def as_a():
        os.setgid(a.gid)
        os.setuid(a.uid)
    forged = ["-H", "X-Gpupool-Forwarded-Uid: 0", "-H", "Content-Type: application/json",
              "-d", '{"command": ["id", "-u"]}']
    # a uid A writes itself is dropped by the follower, which names A
    r = subprocess.run(["curl", "-s", "-X", "POST"] + forged + [s2.url + "/api/v1/tasks"],
                       preexec_fn=as_a, capture_output=True, text=True)
    t = __import__("json").loads(r.stdout)
    assert t["user"] == a.name, r.stdout
    # sent straight to the leader as if forwarded: not from a server's uid, so nobody: 403
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-H",
                        "X-Gpupool-Forwarded-For: 127.0.0.1"] + forged + [s1.url + "/api/v1/tasks"],
                       preexec_fn=as_a, capture_output=True, text=True)
    assert r.stdout == "403", r.stdout
