"""spf's demotion in the real daemon (issue 26): with `scheduler.policy:
spf`, `spf_preempt: true` and `preemption.enabled`, a preemptible task that
has held more GPU time than the first of `scheduler.las_thresholds_s` is
preempted for a task of its tier that has not run that far, and runs again
once that task ended (Tiresias-style LAS demotion).  The thresholds are
small here ([2, 20] GPU-seconds) so that it happens in seconds; one GPU.

What is asserted is what the tasks' processes did: each writes its pid to a
file (ROLE-RUN.pid, RUN = GPUPOOL_RESTART_COUNT) and then records which pids
of the other task were alive ("seen" file); since each writes its pid
before it looks, two processes that overlapped cannot both miss each other.
The test also checks, by pid, that the first run of A is gone before B's
process exists.  Every wait is a poll with a deadline.

Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_spf_preempt.py
"""
import datetime
import os
import time

import pytest

from apiutil import pid_alive, read_pidfile, reap_supervisors, submit, task, wait_for  # noqa: F401

pytestmark = pytest.mark.e2e

PY = "/usr/bin/python3"
THRESHOLD_S = 2   # the first of las_thresholds_s below

# one GPU; a small first level; preemption as soon as a task crosses it
CONFIG = ("gpus:\n"
          "  backend: sim\n"
          "  sim: [{name: \"NVIDIA Test GPU\", memory_mb: 24564, count: 1}]\n"
          "scheduler:\n"
          "  policy: spf\n"
          "  spf_preempt: %(spf_preempt)s\n"
          "%(thresholds)s"
          "  preemption: {enabled: true, min_runtime_sec: 0, grace_sec: 5}\n")
THRESHOLDS = "  las_thresholds_s: [%d, 20]\n" % THRESHOLD_S

# A task's process: ROLE-RUN.pid first, then ROLE-RUN.seen = the pid files of
# the other role whose process is alive now; then it runs until the file
# stop-ROLE exists (A's second run ends at once: it is the run after B).
TASK = r'''
import os, sys, time
d, role = sys.argv[1], sys.argv[2]
run = os.environ.get("GPUPOOL_RESTART_COUNT", "missing")
def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return False
    return s[s.rindex(")") + 2] not in "ZX"
tmp = os.path.join(d, ".%s-%s.tmp" % (role, run))
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.rename(tmp, os.path.join(d, "%s-%s.pid" % (role, run)))
seen = []
for name in sorted(os.listdir(d)):
    if name.endswith(".pid") and not name.startswith(role + "-"):
        try:
            pid = int(open(os.path.join(d, name)).read())
        except (OSError, ValueError):
            continue
        if alive(pid):
            seen.append(name)
with open(os.path.join(d, ".%s-%s.seen.tmp" % (role, run)), "w") as f:
    f.write(" ".join(seen))
os.rename(os.path.join(d, ".%s-%s.seen.tmp" % (role, run)), os.path.join(d, "%s-%s.seen" % (role, run)))
if role == "a" and run != "0":
    sys.exit(0)
while not os.path.exists(os.path.join(d, "stop-" + role)):
    time.sleep(0.05)
'''


def ts(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def start_task(d, work, role, preemptible):
    return submit(d, name="spf-" + role, command=[PY, "-c", TASK, str(work), role], gpu_request=1,
                  exclusive=True, priority=5, preemptible=preemptible)["id"]


def pid_of(work, name):
    return read_pidfile(str(work / (name + ".pid")))


def seen(work, name):
    """The pid files of the other task whose process ROLE-RUN saw alive
    once its own pid was written (waits for it to look)."""
    path = work / (name + ".seen")
    wait_for(path.exists, 10, "%s to look at the other task" % name)
    return path.read_text().split()


def pidfiles(work):
    return sorted(f for f in os.listdir(work) if f.endswith(".pid"))


def first_run_of_a(d, work, preemptible=True):
    a = start_task(d, work, "a", preemptible)
    a_pid = wait_for(lambda: pid_of(work, "a-0"), 15, "A's first process")
    t = wait_for(lambda: (lambda x: x if x.get("started_at") else None)(task(d, a)), 5, "A's started_at")
    assert t["state"] == "running", t
    return a, a_pid, ts(t["started_at"])


@pytest.mark.parametrize("b_submitted", ["before", "after"])
def test_a_task_past_its_level_is_preempted_for_one_that_has_not_run_that_far(daemon_factory, tmp_path,
                                                                                b_submitted):
    d = daemon_factory(CONFIG % {"spf_preempt": "true", "thresholds": THRESHOLDS})
    work = tmp_path / "work"
    work.mkdir()
    a, a_pid, a_started = first_run_of_a(d, work)
    if b_submitted == "after":
        # A has held the GPU past the first level: B preempts it at once
        wait_for(lambda: time.time() > a_started + THRESHOLD_S + 0.3, 10, "A past its first level")
        assert pid_alive(a_pid) and task(d, a)["state"] == "running"
    b = start_task(d, work, "b", False)

    # B's process appears only once A's first process is gone; never both
    def b_started():
        if pid_of(work, "b-0"):
            return True
        assert pid_of(work, "a-0") == a_pid and pidfiles(work) == ["a-0.pid"], pidfiles(work)
        return False

    wait_for(b_started, 15, "B to start")
    assert not pid_alive(a_pid), "A's first process still runs beside B's"
    assert seen(work, "b-0") == [], \
        "B's process saw A's process alive"
    tb = task(d, b)
    assert tb["state"] == "running", tb
    # A was demoted only once it held more than the first threshold (the daemon's own clock)
    assert ts(tb["started_at"]) >= a_started + THRESHOLD_S - 0.01, (a_started, tb["started_at"])

    # A is queued again (preempted once), and no process of it runs while B holds the GPU
    ta = wait_for(lambda: (lambda x: x if x["state"] == "queued" else None)(task(d, a)), 10, "A queued again")
    assert ta["preempt_count"] == 1, ta
    assert pidfiles(work) == ["a-0.pid", "b-0.pid"], pidfiles(work)
    assert pid_alive(pid_of(work, "b-0"))

    # B ends: A runs again (its second run), after B's process is gone
    (work / "stop-b").touch()
    wait_for(lambda: pid_of(work, "a-1"), 15, "A's second run")
    assert seen(work, "a-1") == [], \
        "A's second run saw B's process alive"
    assert not pid_alive(pid_of(work, "b-0"))
    assert pid_of(work, "a-1") != a_pid
    wait_for(lambda: task(d, a)["state"] == "succeeded", 10, "A to succeed")
    wait_for(lambda: task(d, b)["state"] == "succeeded", 10, "B to succeed")
    assert task(d, a)["preempt_count"] == 1
    # exactly three processes ran: A, B, A again
    assert pidfiles(work) == ["a-0.pid", "a-1.pid", "b-0.pid"], pidfiles(work)


@pytest.mark.parametrize("case", ["spf_preempt off", "A not preemptible", "default thresholds"])
def test_without_demotion_b_waits_and_a_is_never_stopped(daemon_factory, tmp_path, case):
    d = daemon_factory(CONFIG % {"spf_preempt": "false" if case == "spf_preempt off" else "true",
                                 "thresholds": "" if case == "default thresholds" else THRESHOLDS})
    work = tmp_path / "work"
    work.mkdir()
    a, a_pid, a_started = first_run_of_a(d, work, preemptible=case != "A not preemptible")
    b = start_task(d, work, "b", False)
    # twice the first threshold: the positive case preempts within about a second of crossing it
    until = a_started + 2 * THRESHOLD_S + 1

    def watched():
        assert pid_alive(a_pid), "A was stopped"
        assert pidfiles(work) == ["a-0.pid"], pidfiles(work)
        tb = task(d, b)
        assert tb["state"] == "queued", tb
        return time.time() >= until

    wait_for(watched, 2 * THRESHOLD_S + 15, "the observation window")
    ta = task(d, a)
    assert ta["state"] == "running" and ta["preempt_count"] == 0, ta
    # A ends by itself: only then does B start
    (work / "stop-a").touch()
    wait_for(lambda: pid_of(work, "b-0"), 15, "B to start after A ended")
    assert seen(work, "b-0") == [], \
        "B's process saw A's process alive"
    wait_for(lambda: task(d, a)["state"] == "succeeded", 10, "A to succeed")
    assert task(d, a)["preempt_count"] == 0
    (work / "stop-b").touch()
    wait_for(lambda: task(d, b)["state"] == "succeeded", 10, "B to succeed")
    assert pidfiles(work) == ["a-0.pid", "b-0.pid"], pidfiles(work)
