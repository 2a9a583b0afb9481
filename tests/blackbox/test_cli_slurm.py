"""Slurm's habits in the gpupool client, and an admin's first ten minutes,
against the real daemon (fixtures in conftest.py: four simulated GPUs):
durations and sizes, -t/-G/-J/-D, scripts with #GPUPOOL/#SBATCH lines
(from a file or stdin, stored at submit), submit --wait, cancel of several
ids and by --state, ID_INDEX in status/logs/ps -r, `key create --admin` and
`config check`.

Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_cli_slurm.py
"""
import hashlib
import json
import os
import re
import subprocess
import time

import pytest

from conftest import SIM_CONFIG, gpupool_bin

pytestmark = pytest.mark.e2e


def task(d, tid):
    r = d.api("GET", "/api/v1/tasks/%s" % tid)
    assert r.status_code == 200, r.text
    return r.json()


def wait_state(d, tid, states, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = task(d, tid)
        if t["state"] in states:
            return t
        time.sleep(0.1)
    raise AssertionError("task %s not in %s: %s" % (tid, states, t))


def submit(d, *args, **kw):
    r = d.cli("submit", *args, **kw)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"\d+\n", r.stdout), r.stdout
    return int(r.stdout)


def all_tasks(d):
    return d.api("GET", "/api/v1/tasks?limit=1000").json()["tasks"]


def test_slurm_options_durations_and_sizes_set_the_task(daemon, tmp_path):
    d = daemon
    tid = submit(d, "-G", "2", "-J", "slurmy", "-t", "60", "--mem", "8G", "-D", str(tmp_path),
                 "--queue-timeout", "30m", "--", "sh", "-c", "pwd")
    t = wait_state(d, tid, ("succeeded",))
    assert t["gpu_request"] == 2 and t["name"] == "slurmy" and t["memory_mb"] == 8192, t
    assert t["timeout_s"] == 3600 and t["queue_timeout_s"] == 1800, t   # --time 60: minutes, as sbatch
    assert d.cli("logs", tid).stdout.strip() == str(tmp_path)             # -D: the working directory
    for args, want in ((["--timeout", "1h"], 3600), (["--time=01:00:00"], 3600), (["--timeout", "90s"], 90),
                       (["--timeout", "1-00:00:00"], 86400), (["--timeout", "3600"], 3600)):
        tid = submit(d, *args, "--mem", "8192M", "true")
        t = task(d, tid)
        assert t["timeout_s"] == want and t["memory_mb"] == 8192, (args, t)
    # the notice of --signal takes a duration too (sbatch's seconds still work)
    tid = submit(d, "--signal", "B:USR1@2m", "true")
    assert task(d, tid)["signal"] == "B:SIGUSR1@120"
    # a bad duration is a usage error naming the forms; nothing is queued
    n = len(all_tasks(d))
    r = d.cli("submit", "--timeout", "1x", "true")
    assert r.returncode == 2 and "90s, 30m, 12h, 7d or [D-]HH:MM:SS" in r.stderr, r.stderr
    assert len(all_tasks(d)) == n


SBATCH_SCRIPT = """#!/bin/sh
#SBATCH --job-name=sweep
#SBATCH --gres=gpu:2
#SBATCH --time=01:00:00
#SBATCH --mem=256M
#SBATCH -o out.%j.log
#GPUPOOL --priority high
echo "args=$*"
echo "self=$0"
exit 3
"""


def test_script_with_sbatch_lines_is_stored_at_submit_and_run_with_wait(daemon, tmp_path):
    d = daemon
    script = tmp_path / "job.sh"
    script.write_text(SBATCH_SCRIPT)
    r = d.cli("submit", "--wait", str(script), "a", "b c")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)   # --wait: the task's exit code
    tid = int(r.stdout.split()[0])
    # the #SBATCH options gpupool has are honoured, the others named with FILE:LINE
    assert "%s:5:" % script not in r.stderr, r.stderr  # Slurm's --mem is host memory: --host-mem
    assert "%s:6: #SBATCH -o: ignored" % script in r.stderr, r.stderr
    assert "ended failed (exit code 3)" in r.stderr, r.stderr
    t = task(d, tid)
    assert t["name"] == "sweep" and t["gpu_request"] == 2 and t["timeout_s"] == 3600 and t["priority"] == 2, t
    assert t["host_memory_mb"] == 256 and t["memory_mb"] == 0, t
    out = d.cli("logs", tid).stdout
    assert "args=a b c" in out, out
    # it ran a copy stored with the task, not the file here
    self_path = re.search(r"self=(\S+)", out).group(1)
    assert self_path != str(script) and "gpupool-script" in self_path, out
    assert not os.path.exists(self_path)   # the copy is removed when the script ends
    assert "script (" in d.cli("status", tid).stdout


def test_the_task_runs_the_script_as_it_was_at_submit(daemon, tmp_path):
    d = daemon
    script = tmp_path / "later.sh"
    script.write_text("#!/bin/sh\nsleep 1\necho version-one\n")
    tid = submit(d, str(script))
    script.write_text("#!/bin/sh\necho version-two\n")   # edited after submit: sbatch semantics
    wait_state(d, tid, ("succeeded",))
    assert d.cli("logs", tid).stdout.strip() == "version-one"


def test_command_line_options_override_the_scripts(daemon, tmp_path):
    d = daemon
    script = tmp_path / "o.sh"
    script.write_text("#!/bin/sh\n#GPUPOOL --gpus 2 --name fromscript\n#SBATCH -t 10\ntrue\n")
    tid = submit(d, "--name", "fromcli", "--timeout", "5m", str(script))
    t = task(d, tid)
    assert t["name"] == "fromcli" and t["gpu_request"] == 2 and t["timeout_s"] == 300, t


def test_script_from_stdin_with_wait(daemon):
    d = daemon
    text = "#!/bin/sh\n#GPUPOOL -J piped --timeout 2m\necho from-stdin\n"
    r = d.cli("submit", "-W", input=text)
    assert r.returncode == 0, r.stderr
    tid = int(r.stdout)
    t = task(d, tid)
    assert t["state"] == "succeeded" and t["name"] == "piped" and t["timeout_s"] == 120, t
    assert d.cli("logs", tid).stdout == "from-stdin\n"
    # not a script: refused before anything is sent
    n = len(all_tasks(d))
    r = d.cli("submit", input="echo no shebang\n")
    assert r.returncode == 2 and "stdin: not a script" in r.stderr, r.stderr
    assert len(all_tasks(d)) == n


def test_bad_directive_is_a_usage_error_with_file_and_line(daemon, tmp_path):
    d = daemon
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/sh\n#GPUPOOL --name ok\n\n#GPUPOOL --gpus many\necho x\n")
    r = d.cli("submit", str(script))
    assert r.returncode == 2, r.stderr
    assert "%s:4: --gpus: expected an integer" % script in r.stderr, r.stderr
    assert all_tasks(d) == []


def test_submit_without_command_on_a_terminal_is_a_usage_error(daemon):
    master, slave = os.openpty()
    try:
        r = subprocess.run([gpupool_bin(), "submit", "--gpus", "1"], env=daemon.env(), stdin=slave,
                           capture_output=True, text=True, timeout=30)
    finally:
        os.close(master)
        os.close(slave)
    assert r.returncode == 2 and "missing COMMAND" in r.stderr, r.stderr
    assert all_tasks(daemon) == []


def test_submit_wait_exits_with_the_tasks_code(daemon):
    d = daemon
    r = d.cli("submit", "--wait", "--", "sh", "-c", "sleep 0.5; exit 5")
    assert r.returncode == 5, (r.stdout, r.stderr)
    r = d.cli("submit", "--wait", "--", "true")
    assert r.returncode == 0, r.stderr
    # an array: 0 only when every element succeeded
    r = d.cli("submit", "--wait", "--array", "0-2", "--", "sh", "-c", 'test "$GPUPOOL_ARRAY_INDEX" != 1')
    assert r.returncode == 1 and "1 of 3 elements did not succeed" in r.stderr, r.stderr
    r = d.cli("submit", "--wait", "--array", "0-2", "--", "true")
    assert r.returncode == 0, r.stderr


def test_cancel_several_ids_and_by_state(daemon):
    d = daemon
    a = submit(d, "sleep", "60")
    b = submit(d, "sleep", "60")
    c = submit(d, "sleep", "60")
    wait_state(d, c, ("running",))
    q = submit(d, "--gpus", "4", "sleep", "60")        # waits: the others hold 3 of 4 GPUs
    assert task(d, q)["state"] == "queued"
    r = d.cli("cancel", a, b)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["%d: cancelled" % a, "%d: cancelled" % b], r.stdout
    r = d.cli("cancel", "--state", "queued")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["%d: cancelled" % q], r.stdout
    assert task(d, c)["state"] == "running"            # not queued: left alone
    r = d.cli("cancel", "--state", "queued", c)
    assert r.returncode == 0 and "not queued: left alone" in r.stdout, r.stdout
    assert task(d, c)["state"] == "running"
    # one unknown id among good ones: the good one is cancelled, exit 1
    r = d.cli("cancel", "999999", c)
    assert r.returncode == 1 and "%d: cancelled" % c in r.stdout, (r.stdout, r.stderr)


def test_id_index_in_status_logs_and_ps(daemon):
    d = daemon
    aid = submit(d, "--array", "1,5,7", "--", "sh", "-c", 'echo "idx=$GPUPOOL_ARRAY_INDEX"')
    for k in range(3):
        wait_state(d, aid + k, ("succeeded",))
    r = d.cli("status", "%d_5" % aid)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^id:\s+%d$" % (aid + 1), r.stdout, re.M), r.stdout
    assert re.search(r"^array:\s+%d_5 \(element 5 of job array %d\)$" % (aid, aid), r.stdout, re.M), r.stdout
    assert d.cli("logs", "%d_7" % aid).stdout == "idx=7\n"
    r = d.cli("status", "%d_3" % aid)
    assert r.returncode == 1 and "has no element 3" in r.stderr, r.stderr
    ps = d.cli("ps", "-a", "-r").stdout
    ids = [l.split()[0] for l in ps.splitlines()[2:]]
    assert ids == ["%d_7" % aid, "%d_5" % aid, "%d_1" % aid], ps


def test_queue_shows_array_elements_as_id_index(daemon):
    d = daemon
    aid = submit(d, "--gpus", "4", "--array", "0-2", "--", "sleep", "60")   # one runs, two wait
    wait_state(d, aid, ("running",))
    q = d.cli("queue")
    assert q.returncode == 0, q.stderr
    ids = [l.split()[1] for l in q.stdout.splitlines()[2:] if l.strip() and not l.startswith("(")]
    assert ids == ["%d_1" % aid, "%d_2" % aid], q.stdout
    assert d.cli("cancel", "--array", aid).returncode == 0


def test_cancel_of_an_arrays_id_warns_and_says_how_to_cancel_all(daemon):
    d = daemon
    aid = submit(d, "--array", "0-1", "--", "sleep", "60")
    wait_state(d, aid + 1, ("running",))
    r = d.cli("cancel", aid)
    assert r.returncode == 0 and r.stdout.strip() == "cancelled", r.stdout
    assert "gpupool cancel --array %d" % aid in r.stderr, r.stderr
    assert task(d, aid + 1)["state"] == "running"
    r = d.cli("cancel", "--array", aid)
    assert r.returncode == 0 and "cancelled" in r.stdout, r.stderr


def run_plain(*args, **kw):
    env = dict(os.environ)
    env.pop("GPUPOOL_API", None)
    env.pop("GPUPOOL_API_KEY", None)
    return subprocess.run([gpupool_bin()] + [str(a) for a in args], env=env, capture_output=True, text=True,
                          timeout=30, **kw)


def test_admin_key_create_pasted_as_sha256sum_works(daemon_factory, tmp_path):
    r = run_plain("key", "create", "--admin")     # no server needed
    assert r.returncode == 0, r.stderr
    key = r.stdout.strip()
    assert re.fullmatch(r"gpa_[0-9a-f]{48}", key), r.stdout
    h = hashlib.sha256(key.encode()).hexdigest()
    assert '- "sha256:%s"' % h in r.stderr, r.stderr    # the line to paste
    assert key not in r.stderr
    assert run_plain("key", "create", "--admin").stdout.strip() != key
    # what `printf %s KEY | sha256sum` prints, pasted as it is
    pasted = subprocess.run(["sha256sum"], input=key, capture_output=True, text=True).stdout.strip()
    cfg = SIM_CONFIG + 'auth:\n  admin_keys:\n    - "%s"\n' % pasted
    f = tmp_path / "keyed.yaml"
    f.write_text(cfg)
    r = run_plain("config", "check", f)
    assert r.returncode == 0 and "ok" in r.stdout and re.search(r"admin keys\s+1", r.stdout), (r.stdout, r.stderr)
    d = daemon_factory(cfg, key=key)
    # keyless over TCP (not the local socket, where root is an admin by the kernel's word)
    assert d.cli("ps", env=d.env(GPUPOOL_SOCKET="off")).returncode == 1
    r = d.cli("--key", key, "ps")
    assert r.returncode == 0, r.stderr


def test_admin_key_json_has_the_key_and_its_hash():
    r = run_plain("key", "create", "--admin", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["hash"] == "sha256:" + hashlib.sha256(j["key"].encode()).hexdigest()


def test_submit_api_script_field_is_checked_and_bounded(daemon):
    d = daemon

    def post(body):
        return d.api("POST", "/api/v1/tasks", json=body)

    r = post({"script": "#!/bin/sh\necho \"$1\"\n", "command": ["arg one"]})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    wait_state(d, tid, ("succeeded",))
    assert d.cli("logs", tid).stdout == "arg one\n"
    for body, needle in (({"script": "echo no shebang\n"}, "must start with #!"),
                         ({"script": 7}, "must be a string"),
                         ({"script": "#!/bin/sh\n" + "x" * 49152}, "longer than 49152 bytes"),
                         ({"script": "#!/bin/sh\n", "command": "a"}, "the script's arguments"),
                         ({"script": "#!/bin/sh\n", "command": [1]}, "command[0]"),
                         ({"script": "#!/bin/sh\n" + "x" * 40000, "array": "0-1999"}, "exceed")):
        r = post(body)
        assert r.status_code == 400 and needle in r.text, (needle, r.status_code, r.text)
    assert [t["id"] for t in all_tasks(d)] == [tid]   # nothing else was queued


def test_config_check_reports_file_line_and_exit_codes(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("gpus: {backend: sim}\ntasks:\n  kill_grace_s: 1:30\n  default_lease_ttl_s: 2m\n")
    r = run_plain("config", "check", good)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("%s: ok\n" % good) and "sim (4 simulated)" in r.stdout, r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: {backend: sim}\ntasks:\n  kill_grace_s: 2h\n")
    r = run_plain("config", "check", bad)
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert "%s:3: tasks.kill_grace_s: must be between 0s and 3600s, got 2h" % bad in r.stderr, r.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text("gpus: {backend: sim}\nscheduler:\n  polcy: fifo\n")
    r = run_plain("config", "check", typo)
    assert r.returncode == 1 and "%s:3:" % typo in r.stderr and "unknown key" in r.stderr, r.stderr
    r = run_plain("config", "check", tmp_path / "missing.yaml")
    assert r.returncode == 1 and "missing.yaml" in r.stderr, r.stderr
    r = run_plain("config", "check")
    assert r.returncode == 2, r.stderr
