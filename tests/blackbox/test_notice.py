"""Preemption and cancel with notice (issue 25): a task submitted with
"signal": "SIGUSR1@SECS" (gpupool submit --signal [B:]SIG@SECS, as sbatch's
--signal) is sent SIG first when it is preempted or cancelled, and has up to
SECS (at most scheduler.preemption.max_notice_s) to exit before SIGTERM.  A
requeued run finds GPUPOOL_RESTART_COUNT = its earlier runs, so a task that
checkpoints on the signal resumes from its checkpoint.

What is asserted is what the task's processes did (files they wrote, one per
process), not API states.

Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_notice.py
"""
import os
import sys
import time

import pytest

from apiutil import assert_error, post, reap_supervisors, submit, submit_raw, task, wait_for  # noqa: F401
from clusterutil import cluster, server_config, sim_gpus  # noqa: F401

pytestmark = pytest.mark.e2e

PY = "/usr/bin/python3"

CONFIG = ("gpus: {backend: sim}\n"
          "scheduler: {preemption: {enabled: true, min_runtime_sec: 0, grace_sec: 5, max_notice_s: %d}}\n")

# A training loop that checkpoints on SIGUSR1 and exits; a restarted run
# resumes from the checkpoint and, on its second run, finishes.  Every
# process leaves run-<restart count>-<pid>; a checkpoint is written with the
# step reached; SIGTERM is recorded (it must not come when the task exits
# within its notice).
TRAIN = r'''
import os, signal, sys, time
d = sys.argv[1]
rc = os.environ.get("GPUPOOL_RESTART_COUNT", "missing")
open(os.path.join(d, "run-%s-%d" % (rc, os.getpid())), "w").close()
ck = os.path.join(d, "ckpt")
start = int(open(ck).read()) if os.path.exists(ck) else 0
step = start
def checkpoint(sig, frame):
    with open(ck + ".tmp", "w") as f:
        f.write(str(step))
    os.rename(ck + ".tmp", ck)
    open(os.path.join(d, "checkpointed-%s-%d" % (rc, step)), "w").close()
    sys.exit(0)
def term(sig, frame):
    open(os.path.join(d, "sigterm-%s" % rc), "w").close()
    sys.exit(1)
signal.signal(signal.SIGUSR1, checkpoint)
signal.signal(signal.SIGTERM, term)
open(os.path.join(d, "started-%s-from-%d" % (rc, start)), "w").close()
while True:
    step += 1
    time.sleep(0.01)
    if rc == "1" and step >= start + 20:
        open(os.path.join(d, "done-%d" % step), "w").close()
        sys.exit(0)
'''

# Ignores the notice (catches SIGUSR1 and goes on); records when the notice
# and SIGTERM came (monotonic clock, seconds).
STUBBORN = r'''
import os, signal, sys, time
d = sys.argv[1]
def note(name):
    def h(sig, frame):
        with open(os.path.join(d, name), "w") as f:
            f.write(repr(time.monotonic()))
        if name == "term":
            sys.exit(3)
    return h
signal.signal(signal.SIGUSR1, note("usr1"))
signal.signal(signal.SIGTERM, note("term"))
open(os.path.join(d, "started"), "w").close()
while True:
    time.sleep(0.05)
'''


def files(d):
    return sorted(os.listdir(d))


def test_a_preempted_task_checkpoints_on_its_notice_and_resumes_with_restart_count_1(daemon_factory, tmp_path):
    d = daemon_factory(CONFIG % 300)
    work = tmp_path / "work"
    work.mkdir()
    t = submit(d, command=[PY, "-c", TRAIN, str(work)], tenant_id="bulk", priority=8, preemptible=True,
               exclusive=True, gpu_request=4, signal="SIGUSR1@120")
    tid = t["id"]
    assert task(d, tid)["signal"] == "SIGUSR1@120"
    wait_for(lambda: [f for f in files(work) if f.startswith("started-0-from-0")], 10, "the first run")
    time.sleep(0.3)   # some steps
    urgent = submit(d, tenant_id="prod", priority=0, exclusive=True, gpu_request=4, lease_ttl_s=600)
    ck = wait_for(lambda: [f for f in files(work) if f.startswith("checkpointed-0-")], 10, "the checkpoint")
    saved = int(ck[0].split("-")[2])
    assert saved > 0 and int(open(work / "ckpt").read()) == saved
    assert task(d, tid)["preempt_count"] == 1
    assert post(d, "/api/v1/tasks/%d/release" % urgent["id"]).status_code == 200
    wait_for(lambda: [f for f in files(work) if f.startswith("done-")], 20, "the second run to finish")
    wait_for(lambda: task(d, tid)["state"] == "succeeded", 10, "the task to succeed")
    got = files(work)
    runs = [f for f in got if f.startswith("run-")]
    # exactly two processes ran: the first (count 0) and the resumed one (count 1)
    assert len(runs) == 2 and runs[0].startswith("run-0-") and runs[1].startswith("run-1-"), got
    assert "started-1-from-%d" % saved in got, got
    assert not [f for f in got if f.startswith("sigterm")], got   # it exited within its notice
    done = int([f for f in got if f.startswith("done-")][0].split("-")[1])
    assert done == saved + 20, got


def test_a_task_that_ignores_its_notice_gets_sigterm_when_it_ends_clamped_by_max_notice_s(daemon_factory, tmp_path):
    d = daemon_factory(CONFIG % 2)   # the task asks for 600 s; the server gives 2
    work = tmp_path / "work"
    work.mkdir()
    t = submit(d, command=[PY, "-c", STUBBORN, str(work)], exclusive=True, signal="USR1@600")
    assert t["signal"] == "SIGUSR1@600"
    wait_for(lambda: "started" in files(work), 10, "the task to start")
    r = post(d, "/api/v1/tasks/%d/cancel" % t["id"])
    assert r.status_code == 200, r.text
    assert r.json()["reason"] == "cancelling: SIGUSR1 sent, SIGTERM after 2 s (its notice), SIGKILL 10 s later", \
        r.json()
    wait_for(lambda: "term" in files(work), 15, "SIGTERM after the notice")
    usr1 = float(open(work / "usr1").read())
    term = float(open(work / "term").read())
    assert 1.5 <= term - usr1 <= 6, (usr1, term)
    done = wait_for(lambda: (lambda x: x if x["state"] != "running" else None)(task(d, t["id"])), 10, "the end")
    assert done["state"] == "cancelled", done


def test_a_cancel_with_notice_lets_the_task_exit_by_itself(daemon_factory, tmp_path):
    d = daemon_factory(CONFIG % 300)
    work = tmp_path / "work"
    work.mkdir()
    # exits 1 s after the notice: no SIGTERM comes (it has 30 s)
    script = ("import os, signal, sys, time\n"
              "d = sys.argv[1]\n"
              "def h(s, f):\n"
              "    open(os.path.join(d, 'usr2'), 'w').close()\n"
              "    time.sleep(1)\n"
              "    sys.exit(0)\n"
              "signal.signal(signal.SIGUSR2, h)\n"
              "signal.signal(signal.SIGTERM, lambda s, f: open(os.path.join(d, 'term'), 'w').close())\n"
              "open(os.path.join(d, 'started'), 'w').close()\n"
              "while True: time.sleep(0.05)\n")
    r = d.cli("submit", "--signal", "SIGUSR2@30", "--exclusive", "--", PY, "-c", script, str(work))
    assert r.returncode == 0, r.stderr
    tid = int(r.stdout.strip())
    assert task(d, tid)["signal"] == "SIGUSR2@30"
    st = d.cli("status", tid)
    assert st.returncode == 0 and "SIGUSR2@30" in st.stdout, st.stdout
    wait_for(lambda: "started" in files(work), 10, "the task to start")
    t0 = time.monotonic()
    assert post(d, "/api/v1/tasks/%d/cancel" % tid).status_code == 200
    done = wait_for(lambda: (lambda x: x if x["state"] != "running" else None)(task(d, tid)), 15, "the end")
    took = time.monotonic() - t0
    assert done["state"] == "cancelled", done
    assert files(work) == ["started", "usr2"] and 0.9 <= took < 10, (files(work), took)
    assert "within its notice" in done["reason"], done


@pytest.mark.parametrize("value,words", [
    ("SIGKILL@10", "not a signal a task can catch"),
    ("STOP@10", "not a signal a task can catch"),
    ("NOPE@10", "not a signal a task can catch"),
    ("SIGUSR1@0", "1..86400 seconds"),
    ("SIGUSR1@86401", "1..86400 seconds"),
    ("SIGUSR1@99999999999999999999", "1..86400 seconds"),
    ("SIGUSR1", "expected [B:]SIG@SECS"),
    ("SIGUSR1@1x", "not a number of seconds"),
    ({"signal": "USR1"}, "signal.seconds"),
    ({"signal": 9, "seconds": 10}, "not a signal a task can catch"),
    ({"signal": "USR1", "seconds": 10, "extra": 1}, "unknown field"),
    (12, "must be"),
])
def test_a_bad_signal_is_refused_and_nothing_is_queued(daemon, value, words):
    r = submit_raw(daemon, {"command": ["true"], "signal": value})
    msg = assert_error(r, 400)
    assert words in msg, msg
    assert daemon.api("GET", "/api/v1/tasks").json()["tasks"] == []


def test_a_lease_with_a_signal_is_refused(daemon):
    msg = assert_error(submit_raw(daemon, {"signal": "USR1@10"}), 400)
    assert "only for batch tasks" in msg and "signal" in msg, msg


def test_the_signal_in_object_form_and_with_b_prefix_is_stored_canonically(daemon):
    t = submit(daemon, command=["sleep", "0"], signal={"signal": 10, "seconds": 90, "batch_only": True})
    assert t["signal"] == "B:SIGUSR1@90"
    t = submit(daemon, command=["sleep", "0"], signal="b:term@5")
    assert t["signal"] == "B:SIGTERM@5"


def test_the_cli_refuses_a_bad_signal_before_sending(daemon):
    r = daemon.cli("submit", "--signal", "KILL@5", "--", "true")
    assert r.returncode != 0 and "--signal" in r.stderr and "catch" in r.stderr, (r.returncode, r.stderr)
    assert daemon.api("GET", "/api/v1/tasks").json()["tasks"] == []


def test_b_prefix_signals_only_the_command_not_its_children(daemon, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    # the shell traps USR1; its child (python) would record a USR1 it got
    child = ("import os, signal, sys, time\n"
             "signal.signal(signal.SIGUSR1, lambda s, f: open(os.path.join(sys.argv[1], 'child-usr1'), 'w').close())\n"
             "open(os.path.join(sys.argv[1], 'child'), 'w').close()\n"
             "time.sleep(60)\n")
    sh = ('trap \'touch "$1/shell-usr1"; kill $c; exit 0\' USR1; %s -c "$2" "$1" & c=$!; wait $c; wait $c'
          % PY)
    t = submit(daemon, command=["sh", "-c", sh, "sh", str(work), child], exclusive=True, signal="B:USR1@30")
    wait_for(lambda: "child" in files(work), 10, "the child")
    assert post(daemon, "/api/v1/tasks/%d/cancel" % t["id"]).status_code == 200
    wait_for(lambda: task(daemon, t["id"])["state"] != "running", 15, "the end")
    assert "shell-usr1" in files(work) and "child-usr1" not in files(work), files(work)


def test_on_an_agent_a_preempted_task_checkpoints_and_resumes_with_restart_count_1(cluster, tmp_path):
    """The notice travels in the start message; the agent's supervisor gives it."""
    cluster.start_server(server_config(extra="scheduler: {preemption: {enabled: true, min_runtime_sec: 0, "
                                             "grace_sec: 5, max_notice_s: 300}}\n"))
    cluster.agent("gpu-n", gpus=sim_gpus(1))
    work = tmp_path / "work"
    work.mkdir()
    t = cluster.submit([PY, "-c", TRAIN, str(work)], tenant_id="bulk", priority=8, preemptible=True,
                       exclusive=True, signal="SIGUSR1@120")
    tid = t["id"]
    wait_for(lambda: [f for f in files(work) if f.startswith("started-0-from-0")], 15, "the first run on the agent")
    time.sleep(0.3)
    # an urgent batch task takes the node's one GPU; it starts once the victim has let go
    urgent = cluster.submit(["sh", "-c", "touch %s/urgent-ran" % work], tenant_id="prod", priority=0,
                            exclusive=True)
    ck = wait_for(lambda: [f for f in files(work) if f.startswith("checkpointed-0-")], 15, "the checkpoint")
    saved = int(ck[0].split("-")[2])
    cluster.wait_task(urgent["id"], "succeeded", timeout=20)
    wait_for(lambda: [f for f in files(work) if f.startswith("done-")], 30, "the second run to finish")
    cluster.wait_task(tid, "succeeded", timeout=15)
    got = files(work)
    runs = [f for f in got if f.startswith("run-")]
    assert len(runs) == 2 and runs[0].startswith("run-0-") and runs[1].startswith("run-1-"), got
    assert "started-1-from-%d" % saved in got and "urgent-ran" in got, got
    assert not [f for f in got if f.startswith("sigterm")], got
    assert cluster.task(tid)["preempt_count"] == 1


def test_the_memory_watchdog_gives_the_notice_before_it_stops_a_task(daemon_factory, tmp_path, monkeypatch):
    from test_cluster import fake_nvml_lib
    nv = tmp_path / "nvml.conf"
    nv.write_text('gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-abcdabcd-0000-0000-0000-000000000000 '
                  'mem_total_mb=81559 procs=env\n')
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(nv))
    d = daemon_factory('gpus: {backend: nvml, poll_ms: 200, watchdog_grace_s: 1, watchdog_tolerance_mb: 100, '
                       'nvml_library: "%s"}\ntasks: {oom_retry_factor: 1.5, kill_grace_s: 1}\n' % fake_nvml_lib())
    work = tmp_path / "work"
    work.mkdir()
    # uses 2000 MiB (as the fake NVML lists it) against 1000 asked; on SIGUSR1 it saves and exits
    script = ("import os, signal, sys, time\n"
              "d, rc = sys.argv[1], os.environ['GPUPOOL_RESTART_COUNT']\n"
              "signal.signal(signal.SIGUSR1, lambda s, f: (open(os.path.join(d, 'usr1-' + rc), 'w').close(),"
              " sys.exit(0)))\n"
              "signal.signal(signal.SIGTERM, lambda s, f: (open(os.path.join(d, 'term-' + rc), 'w').close(),"
              " sys.exit(1)))\n"
              "open(os.path.join(d, 'run-' + rc), 'w').close()\n"
              "while True: time.sleep(0.05)\n")
    t = submit(d, command=[PY, "-c", script, str(work)], memory_mb=1000, max_retries=1,
               env={"FAKE_NVML_GPU_MB": "2000"}, signal="USR1@60")
    done = wait_for(lambda: (lambda x: x if x["state"] == "failed" else None)(task(d, t["id"])), 40, "the end")
    assert done["reason"].startswith("memory_exceeded"), done
    # two runs (count 0, then 1 after the requeue asking 1500), each told first, none SIGTERMed
    assert files(work) == ["run-0", "run-1", "usr1-0", "usr1-1"], files(work)


def test_an_sbatch_signal_line_in_a_script_is_read(daemon, tmp_path):
    s = tmp_path / "job.sh"
    s.write_text("#!/bin/sh\n#SBATCH --signal=B:USR1@60\n#SBATCH -J ckpt\necho hi\n")
    r = daemon.cli("submit", str(s))
    assert r.returncode == 0, r.stderr
    t = task(daemon, int(r.stdout.strip()))
    assert t["signal"] == "B:SIGUSR1@60" and t["name"] == "ckpt", t
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\n#SBATCH --signal=USR1@0\necho hi\n")
    r = daemon.cli("submit", str(bad))
    assert r.returncode == 2 and "1..86400 seconds" in r.stderr, (r.returncode, r.stderr)


CHILD = ("import os, signal, sys, time\n"
         "signal.signal(signal.SIGUSR1, lambda s, f: open(os.path.join(sys.argv[1], 'child-usr1'), 'w').close())\n"
         "open(os.path.join(sys.argv[1], 'child'), 'w').close()\n"
         "time.sleep(60)\n")


def test_a_script_with_b_signal_gets_it_in_its_shell_and_its_children_do_not(daemon, tmp_path):
    """#SBATCH --signal=B:...: the batch shell is the script, not gpupool's runner around it."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "child.py").write_text(CHILD)
    s = tmp_path / "job.sh"
    s.write_text("#!/bin/sh\n#SBATCH --signal=B:USR1@30\n"
                 "trap 'touch \"$1/shell-usr1-$GPUPOOL_RESTART_COUNT\"; kill $c; exit 0' USR1\n"
                 "%s %s \"$1\" & c=$!\nwait $c\n" % (PY, tmp_path / "child.py"))
    r = daemon.cli("submit", "--exclusive", str(s), str(work))
    assert r.returncode == 0, r.stderr
    tid = int(r.stdout.strip())
    wait_for(lambda: "child" in files(work), 10, "the script's child")
    assert post(daemon, "/api/v1/tasks/%d/cancel" % tid).status_code == 200
    done = wait_for(lambda: (lambda x: x if x["state"] != "running" else None)(task(daemon, tid)), 15, "the end")
    assert done["state"] == "cancelled" and "within its notice" in done["reason"], done
    assert files(work) == ["child", "shell-usr1-0"], files(work)


def test_a_b_script_that_ignores_its_notice_still_has_its_sigterm_grace(daemon_factory, tmp_path):
    d = daemon_factory(CONFIG % 1)
    work = tmp_path / "work"
    work.mkdir()
    s = tmp_path / "job.py"
    s.write_text("#!%s\n#SBATCH --signal=B:USR2@30\n"
                 "import os, signal, sys, time\n"
                 "d = sys.argv[1]\n"
                 "signal.signal(signal.SIGUSR2, lambda s, f: open(os.path.join(d, 'usr2'), 'w').close())\n"
                 "def term(s, f):\n"
                 "    time.sleep(1)\n"
                 "    open(os.path.join(d, 'term-done'), 'w').close()\n"
                 "    sys.exit(0)\n"
                 "signal.signal(signal.SIGTERM, term)\n"
                 "open(os.path.join(d, 'started'), 'w').close()\n"
                 "while True: time.sleep(0.05)\n" % PY)
    r = d.cli("submit", "--exclusive", str(s), str(work))
    assert r.returncode == 0, r.stderr
    tid = int(r.stdout.strip())
    wait_for(lambda: "started" in files(work), 10, "the script")
    assert post(d, "/api/v1/tasks/%d/cancel" % tid).status_code == 200
    done = wait_for(lambda: (lambda x: x if x["state"] != "running" else None)(task(d, tid)), 20, "the end")
    # told (1 s, max_notice_s), then SIGTERM, which it handled for a second: the runner waited for it
    assert done["state"] == "cancelled", done
    assert files(work) == ["started", "term-done", "usr2"], files(work)
