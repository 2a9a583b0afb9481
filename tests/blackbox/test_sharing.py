"""Sharing rules through the real daemon: quotas, time rules, preemption
and reclaim of guaranteed GPUs (the pure rules are unit-tested in
tests/unit/test-sched-tenants.c; here they act on real tasks)."""
import datetime
import os
import time

import pytest
import requests

pytestmark = pytest.mark.e2e

from apiutil import reap_supervisors  # noqa: F401  (autouse: kills leftover task processes)


def post(d, path, **body):
    return requests.post(d.url + path, json=body, timeout=20)


def submit(d, **body):
    body.setdefault("lease_ttl_s", 600) if "command" not in body else None
    r = post(d, "/api/v1/tasks", **body)
    assert r.status_code == 201, r.text
    return r.json()


def get(d, tid):
    r = requests.get(d.url + "/api/v1/tasks/%d" % tid, timeout=20)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(pred, timeout=15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("condition not met in %.0f s" % timeout)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_a_tenant_over_its_gpu_quota_waits_with_the_reason(daemon_factory):
    d = daemon_factory("gpus: {backend: sim}\ntenants:\n  - {id: a, quota: {max_gpus: 1.5}}\n")
    one = submit(d, tenant_id="a", exclusive=True)
    half = submit(d, tenant_id="a", memory_mb=10000)        # 10000 of 22564 MB: 0.444 GPU
    over = submit(d, tenant_id="a", memory_mb=10000)
    assert one["state"] == half["state"] == "running"
    assert over["state"] == "queued"
    assert "tenant a quota" in over["reason"]
    usage = requests.get(d.url + "/api/v1/tenants/a", timeout=20).json()["usage"]
    assert usage["running"] == 2 and usage["queued"] == 1 and 1.4 < usage["gpus"] < 1.5
    # other tenants are not held back by a's quota
    assert submit(d, tenant_id="b", exclusive=True)["state"] == "running"
    # when a's running work ends, its queued task starts
    post(d, "/api/v1/tasks/%d/release" % one["id"])
    assert wait_for(lambda: get(d, over["id"])["state"] == "running")


def test_a_time_rule_in_force_now_swaps_the_quota(daemon_factory):
    now = datetime.datetime.now(datetime.timezone.utc)
    start = (now - datetime.timedelta(minutes=1)).strftime("%H:%M")
    end = (now + datetime.timedelta(minutes=3)).strftime("%H:%M")
    later = (now + datetime.timedelta(minutes=5)).strftime("%H:%M")
    later2 = (now + datetime.timedelta(minutes=9)).strftime("%H:%M")
    d = daemon_factory(
        "gpus: {backend: sim}\n"
        "tenants:\n  - {id: a, quota: {max_concurrent: 3}}\n"
        "time_rules:\n"
        "  - {name: busy-hours, start: \"%s\", end: \"%s\", tz: UTC, quotas: {a: {max_concurrent: 1}}}\n"
        "  - {name: not-yet, start: \"%s\", end: \"%s\", tz: UTC, quotas: {a: {max_concurrent: 2}}}\n"
        % (start, end, later, later2))
    t = requests.get(d.url + "/api/v1/tenants/a", timeout=20).json()
    assert t["quota"]["max_concurrent"] == 1
    assert t["quota_configured"]["max_concurrent"] == 3
    first = submit(d, tenant_id="a", memory_mb=100)
    second = submit(d, tenant_id="a", memory_mb=100)
    assert first["state"] == "running" and second["state"] == "queued"
    assert "1 of 1 tasks running" in second["reason"]
    assert "(time rule busy-hours in force)" in second["reason"]
    assert "time rule busy-hours" in d.log() and "is in force" in d.log()
    stats = requests.get(d.url + "/admin/scheduler/stats", timeout=20).json()
    assert {r["name"]: r["in_force"] for r in stats["time_rules"]} == {"busy-hours": True, "not-yet": False}
    a = [t for t in stats["tenants"] if t["id"] == "a"][0]
    assert a["quota"]["max_concurrent"] == 1 and a["usage"]["running"] == 1 and a["usage"]["queued"] == 1


PREEMPT = ("gpus: {backend: sim}\n"
           "scheduler: {preemption: {enabled: true, min_runtime_sec: 0}}\n"
           "tasks: {kill_grace_s: 1}\n")


def test_an_urgent_task_preempts_a_less_urgent_preemptible_batch_task(daemon_factory):
    d = daemon_factory(PREEMPT)
    low = [submit(d, tenant_id="bulk", priority=7, preemptible=True, command=["sleep", "60"]) for _ in range(4)]
    wait_for(lambda: all(get(d, t["id"])["state"] == "running" for t in low))
    pids = {}
    for t in low:
        pidfile = os.path.join(d.data_dir, "tasks", str(t["id"]), "supervisor.pid")
        wait_for(lambda: os.path.exists(pidfile))
        pids[t["id"]] = int(open(pidfile).read().split()[0])
    urgent = submit(d, tenant_id="prod", priority=1, command=["sh", "-c", "echo started; sleep 60"])
    # one victim goes back to the queue with preempt_count 1 and its process ends
    victims = wait_for(lambda: [t for t in low if get(d, t["id"])["preempt_count"] == 1])
    assert len(victims) == 1
    v = get(d, victims[0]["id"])
    assert v["state"] == "queued" and "preempted" in v["reason"]
    wait_for(lambda: not pid_alive(pids[v["id"]]))
    # the urgent task runs once the victim's process is gone
    assert wait_for(lambda: get(d, urgent["id"])["state"] == "running")
    # non-preemptible and more urgent work is never a victim
    assert all(get(d, t["id"])["preempt_count"] == 0 for t in low if t["id"] != v["id"])


def test_a_preempted_lease_without_grace_is_lost_at_its_next_heartbeat(daemon_factory):
    d = daemon_factory(PREEMPT.replace("min_runtime_sec: 0", "min_runtime_sec: 0, grace_sec: 0"))
    leases = [submit(d, tenant_id="bulk", priority=8, preemptible=True, exclusive=True) for _ in range(4)]
    urgent = submit(d, tenant_id="prod", priority=0, exclusive=True)
    assert urgent["state"] == "running"
    lost = [t for t in leases if get(d, t["id"])["state"] == "queued"]
    assert len(lost) == 1 and get(d, lost[0]["id"])["preempt_count"] == 1
    r = post(d, "/api/v1/tasks/%d/heartbeat" % lost[0]["id"])
    assert r.status_code == 409


def test_a_preempted_lease_is_preempting_until_its_deadline_then_lost(daemon_factory):
    d = daemon_factory(PREEMPT.replace("min_runtime_sec: 0", "min_runtime_sec: 0, grace_sec: 3"))
    leases = [submit(d, tenant_id="bulk", priority=8, preemptible=True, exclusive=True) for _ in range(4)]
    before = time.time()
    # it runs on for a while, so that the lost lease stays queued to be looked at
    urgent = submit(d, tenant_id="prod", priority=0, command=["sh", "-c", "echo started; sleep 10"])
    victims = [t for t in leases if get(d, t["id"])["preempt_count"] == 1]
    assert len(victims) == 1
    v = get(d, victims[0]["id"])
    assert v["state"] == "preempting"
    deadline = datetime.datetime.fromisoformat(v["preempt_deadline"].replace("Z", "+00:00")).timestamp()
    assert before + 2 <= deadline <= time.time() + 3.5
    # the holder is told, not refused, while the grace lasts
    r = post(d, "/api/v1/tasks/%d/heartbeat" % v["id"])
    assert r.status_code == 200 and r.json()["state"] == "preempting" and r.json()["preempt_deadline"]
    # the urgent batch task holds the GPU but its process waits for the holder to let go
    assert get(d, urgent["id"])["state"] == "running"
    log = os.path.join(d.data_dir, "tasks", str(urgent["id"]), "log")
    time.sleep(1)
    assert not os.path.exists(log) or "started" not in open(log).read()
    # nobody let go: after the deadline the lease is lost, queued again, and the task starts
    wait_for(lambda: get(d, v["id"])["state"] == "queued", timeout=10)
    assert "lost after the 3 s grace period" in get(d, v["id"])["reason"]
    assert post(d, "/api/v1/tasks/%d/heartbeat" % v["id"]).status_code == 409
    assert wait_for(lambda: os.path.exists(log) and "started" in open(log).read(), timeout=10)
    assert time.time() >= deadline - 0.2


def test_a_preempted_lease_released_in_its_grace_ends_and_lets_the_urgent_task_go(daemon_factory):
    d = daemon_factory(PREEMPT.replace("min_runtime_sec: 0", "min_runtime_sec: 0, grace_sec: 60"))
    leases = [submit(d, tenant_id="bulk", priority=8, preemptible=True, exclusive=True) for _ in range(4)]
    urgent = submit(d, tenant_id="prod", priority=0, command=["sh", "-c", "echo started"])
    v = [t for t in leases if get(d, t["id"])["state"] == "preempting"][0]
    r = post(d, "/api/v1/tasks/%d/release" % v["id"], exit_code=0)
    assert r.status_code == 200 and r.json()["state"] == "succeeded"
    assert "after it was preempted" in r.json()["reason"]
    log = os.path.join(d.data_dir, "tasks", str(urgent["id"]), "log")
    assert wait_for(lambda: os.path.exists(log) and "started" in open(log).read(), timeout=10)
    assert get(d, urgent["id"])["state"] in ("running", "succeeded")


def test_a_preempted_batch_task_gets_the_preemption_grace_not_the_cancel_grace(daemon_factory, tmp_path):
    d = daemon_factory(PREEMPT.replace("min_runtime_sec: 0", "min_runtime_sec: 0, grace_sec: 4"))
    mark = tmp_path / "term"
    stubborn = ("trap 'echo term >> %s' TERM; echo up; while true; do sleep 0.1; done" % mark)
    low = [submit(d, tenant_id="bulk", priority=7, preemptible=True, command=["sh", "-c", stubborn])
           for _ in range(4)]
    for t in low:
        log = os.path.join(d.data_dir, "tasks", str(t["id"]), "log")
        wait_for(lambda: os.path.exists(log) and "up" in open(log).read())
    pids = {t["id"]: int(open(os.path.join(d.data_dir, "tasks", str(t["id"]), "supervisor.pid")).read().split()[0])
            for t in low}
    submit(d, tenant_id="prod", priority=1, command=["true"])
    v = wait_for(lambda: [t for t in low if get(d, t["id"])["preempt_count"] == 1])[0]
    wait_for(lambda: mark.exists())  # SIGTERM came, the task ignores it
    time.sleep(2)  # past tasks.kill_grace_s (1 s): still running, since the grace is 4 s
    assert pid_alive(pids[v["id"]])
    assert wait_for(lambda: not pid_alive(pids[v["id"]]), timeout=10)
    # back in the queue, it runs again once the urgent task is done
    assert wait_for(lambda: get(d, v["id"])["state"] == "running", timeout=10)
    assert get(d, v["id"])["preempt_count"] == 1


def test_reclaim_returns_guaranteed_gpus_to_their_owner(daemon_factory):
    d = daemon_factory(PREEMPT + "tenants:\n  - {id: owner, quota: {guaranteed_gpus: 2}}\n  - {id: borrower}\n")
    # the owner is idle: the borrower may use all four GPUs
    borrowed = [submit(d, tenant_id="borrower", preemptible=True, exclusive=True) for _ in range(4)]
    assert all(t["state"] == "running" for t in borrowed)
    # the owner comes back (same tier): its guarantee is reclaimed at once
    mine = [submit(d, tenant_id="owner", exclusive=True) for _ in range(2)]
    assert all(t["state"] == "running" for t in mine), [t["reason"] for t in mine]
    back = [t for t in borrowed if get(d, t["id"])["state"] in ("queued", "preempting")]
    assert len(back) == 2
    # a third owner task beyond the guarantee does not reclaim more
    extra = submit(d, tenant_id="owner", exclusive=True)
    assert extra["state"] == "queued"
    assert sum(get(d, t["id"])["state"] == "running" for t in borrowed) == 2
