"""Black-box tests of job arrays (docs/api.md "Job arrays"): the real daemon
on simulated GPUs, driven over HTTP and through the CLI.

Run:
  GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build /usr/bin/python3 -m pytest -q tests/blackbox/test_arrays.py
"""
import json
import os
import time

import pytest

from apiutil import assert_error, kill9, post, reap_supervisors, restart, submit_raw, task, task_dir, wait_for

pytestmark = pytest.mark.e2e
assert reap_supervisors  # autouse fixture, imported so that it applies here


def array(d, spec, command, **body):
    body.update(command=list(command), array=spec)
    r = submit_raw(d, body)
    assert r.status_code == 201, r.text
    return r.json()


def summary(d, aid):
    r = d.api("GET", "/api/v1/arrays/%d" % aid, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def elements(d, aid):
    r = d.api("GET", "/api/v1/tasks?array=%d&limit=1000" % aid, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["tasks"]


def wait_all_ended(d, aid, timeout=30):
    def ended():
        c = summary(d, aid)["counts"]
        return c["queued"] == 0 and c["running"] == 0 and c
    return wait_for(ended, timeout, "array %d to end" % aid, interval=0.1)


def log_of(d, tid):
    with open(os.path.join(task_dir(d, tid), "log")) as f:
        return f.read()


def test_array_creates_one_task_per_index_with_its_env(daemon):
    d = daemon
    cmd = ["sh", "-c", "echo A=$GPUPOOL_ARRAY_ID I=$GPUPOOL_ARRAY_INDEX SJ=$SLURM_ARRAY_JOB_ID "
                       "ST=$SLURM_ARRAY_TASK_ID T=$GPUPOOL_TASK_ID"]
    a = array(d, "1,3,5-9,20-28:4", cmd, name="sweep")
    aid = a["array_id"]
    assert a["count"] == 10 and a["array"] == "1,3,5-9,20-28:4" or a["array"] == "1-5:2,6-9,20-28:4", a
    assert a["first_task_id"] == aid and a["last_task_id"] == aid + 9
    els = sorted(elements(d, aid), key=lambda t: t["id"])
    assert [t["array_index"] for t in els] == [1, 3, 5, 6, 7, 8, 9, 20, 24, 28]
    assert [t["id"] for t in els] == list(range(aid, aid + 10))
    assert all(t["array_id"] == aid and t["name"] == "sweep" for t in els)
    c = wait_all_ended(d, aid)
    assert c["succeeded"] == 10, c
    for t in els:
        out = log_of(d, t["id"]).split()
        assert out == ["A=%d" % aid, "I=%d" % t["array_index"], "SJ=%d" % aid, "ST=%d" % t["array_index"],
                       "T=%d" % t["id"]], out
    # a plain task has no array
    r = submit_raw(d, {"command": ["true"]})
    assert r.status_code == 201 and r.json()["array_id"] is None and r.json()["array_index"] is None


def test_throttle_never_runs_more_than_n(daemon, tmp_path):
    d = daemon
    a = array(d, "0-7%2", ["sleep", "0.4"])
    aid = a["array_id"]
    seen = set()
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        c = summary(d, aid)["counts"]
        assert c["running"] <= 2, c
        seen.add(c["running"])
        if c["succeeded"] == 8:
            break
        q = [t for t in elements(d, aid) if t["state"] == "queued"]
        for t in q[:1]:
            full = task(d, t["id"])
            if full["state"] == "queued" and c["running"] == 2:
                assert "array %d runs 2 at once (%%2)" % aid in full["reason"], full["reason"]
        time.sleep(0.05)
    assert summary(d, aid)["counts"]["succeeded"] == 8
    assert 2 in seen, seen   # it did run two at once (4 GPUs were free)


def test_cancel_whole_array_and_one_element(daemon):
    d = daemon
    a = array(d, "0-5%2", ["sleep", "60"])
    aid = a["array_id"]
    wait_for(lambda: summary(d, aid)["counts"]["running"] == 2, 10, "two running")
    # one queued element by index, as scancel 12_4
    r = post(d, "/api/v1/arrays/%d/cancel" % aid, {"index": 4})
    assert r.status_code == 200 and r.json() == {"array_id": aid, "cancelled": 1, "stopping": 0}, r.text
    el4 = [t for t in elements(d, aid) if t["array_index"] == 4][0]
    assert el4["state"] == "cancelled"
    assert summary(d, aid)["counts"]["queued"] == 3
    # the rest
    r = post(d, "/api/v1/arrays/%d/cancel" % aid, {})
    assert r.status_code == 200, r.text
    assert r.json()["cancelled"] + r.json()["stopping"] == 5, r.text
    c = wait_for(lambda: (lambda c: c["cancelled"] == 6 and c)(summary(d, aid)["counts"]), 20, "all cancelled")
    assert c["running"] == 0 and c["queued"] == 0
    # idempotent; unknown ids and bodies
    r = post(d, "/api/v1/arrays/%d/cancel" % aid)
    assert r.status_code == 200 and r.json()["cancelled"] == 0, r.text
    assert_error(post(d, "/api/v1/arrays/999999/cancel", {}), 404, "not_found")
    assert_error(post(d, "/api/v1/arrays/%d/cancel" % (aid + 1), {}), 404, "not_found")  # an element, not an array
    assert_error(d.api("POST", "/api/v1/arrays/%d/cancel" % aid, data="index=1",
                       headers={"Content-Type": "application/json"}, timeout=10), 415)
    assert_error(post(d, "/api/v1/arrays/%d/cancel" % aid, {"index": -1}), 400, "invalid_request")
    assert_error(post(d, "/api/v1/arrays/%d/cancel" % aid, {"all": True}), 400, "invalid_request")
    assert_error(d.api("GET", "/api/v1/arrays/999999", timeout=10), 404, "not_found")
    assert_error(d.api("DELETE", "/api/v1/arrays/%d" % aid, timeout=10), 405)


QUOTA = ("gpus: {backend: sim}\n"
         "scheduler: {max_array_size: 100}\n"
         "tenants:\n"
         "  - {id: q, quota: {max_queued: 6, max_concurrent: 2}}\n")


def test_quota_takes_an_array_whole_or_not_at_all(daemon_factory):
    d = daemon_factory(QUOTA)
    # every element is queued when the array is taken: 7 elements do not fit max_queued 6,
    # and nothing of them is queued
    r = submit_raw(d, {"tenant_id": "q", "command": ["sleep", "60"], "array": "0-6"})
    assert_error(r, 429, "quota_exceeded")
    assert "none was queued" in r.json()["error"]["message"]
    listed = d.api("GET", "/api/v1/tasks?limit=1000", timeout=10).json()["tasks"]
    assert listed == [], listed
    # 6 fit; 2 start (max_concurrent counts each element), 4 wait
    a = array(d, "0-5", ["sleep", "60"], tenant_id="q")
    c = wait_for(lambda: (lambda c: c["running"] == 2 and c)(summary(d, a["array_id"])["counts"]), 10, "2 running")
    assert c["queued"] == 4
    time.sleep(0.5)
    assert summary(d, a["array_id"])["counts"]["running"] == 2
    # 4 queued: 3 more do not fit (refused whole), 2 do
    assert_error(submit_raw(d, {"tenant_id": "q", "command": ["true"], "array": "0-2"}), 429, "quota_exceeded")
    assert len(d.api("GET", "/api/v1/tasks?limit=1000", timeout=10).json()["tasks"]) == 6
    assert submit_raw(d, {"tenant_id": "q", "command": ["true"], "array": "0-1"}).status_code == 201
    assert_error(submit_raw(d, {"tenant_id": "q", "command": ["true"], "array": "0"}), 429, "quota_exceeded")
    assert submit_raw(d, {"tenant_id": "other", "command": ["true"], "array": "0-1"}).status_code == 201
    # over max_array_size: 400 naming it
    msg = assert_error(submit_raw(d, {"command": ["true"], "array": "0-100"}), 400, "invalid_request")
    assert "max_array_size" in msg


@pytest.mark.parametrize("spec,part", [
    ("5-1", "backwards"), ("0-9:0", "step"), ("0-9%0", "%N"), ("1,,2", "bad item"), ("x", "only digits"),
    ("", "empty"), ("0-20000000", "0..9999999"),
])
def test_bad_specs_are_400_and_queue_nothing(daemon, spec, part):
    d = daemon
    msg = assert_error(submit_raw(d, {"command": ["true"], "array": spec}), 400, "invalid_request")
    assert part in msg, msg
    assert d.api("GET", "/api/v1/tasks", timeout=10).json()["tasks"] == []


def test_bad_array_fields_are_400(daemon):
    d = daemon
    assert_error(submit_raw(d, {"command": ["true"], "array": 12}), 400, "invalid_request")
    msg = assert_error(submit_raw(d, {"array": "0-3"}), 400, "invalid_request")  # a lease
    assert "batch" in msg
    assert_error(d.api("GET", "/api/v1/tasks?array=x", timeout=10), 400, "invalid_request")


def test_half_started_array_survives_kill9(daemon, tmp_path):
    d = daemon
    ran = tmp_path / "ran.txt"
    # every run appends its index once: a duplicate means an element ran twice
    cmd = ["sh", "-c", 'echo $GPUPOOL_ARRAY_INDEX >> "$0"; sleep 1.5', str(ran)]
    a = array(d, "0-5%2", cmd)
    aid = a["array_id"]
    wait_for(lambda: summary(d, aid)["counts"]["running"] == 2, 10, "two running")
    kill9(d)
    restart(d)
    c = summary(d, aid)["counts"]
    assert c["running"] + c["succeeded"] == 2 and c["queued"] == 4, c
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        c = summary(d, aid)["counts"]
        assert c["running"] <= 2, c  # the throttle still holds
        if c["succeeded"] == 6:
            break
        time.sleep(0.05)
    assert summary(d, aid)["counts"]["succeeded"] == 6
    lines = sorted(int(x) for x in ran.read_text().split())
    assert lines == [0, 1, 2, 3, 4, 5], lines   # none lost, none run twice


def test_cli_submit_ps_folding_expand_and_cancel(daemon):
    d = daemon
    r = d.cli("submit", "--name", "sweep", "--array", "0-9%2", "--", "sleep", "60")
    assert r.returncode == 0, r.stderr
    aid = int(r.stdout.strip())
    r = d.cli("submit", "--name", "plain", "--", "sleep", "60")
    plain = int(r.stdout.strip())
    wait_for(lambda: summary(d, aid)["counts"]["running"] == 2, 10, "two running")
    ps = d.cli("ps")
    assert ps.returncode == 0, ps.stderr
    line = [l for l in ps.stdout.splitlines() if l.startswith("%d_[" % aid)]
    assert len(line) == 1, ps.stdout
    assert "%d_[0-9%%2]" % aid in line[0] and "queued 8 running 2" in line[0] and "sweep" in line[0], line
    assert any(l.split()[0] == str(plain) for l in ps.stdout.splitlines()), ps.stdout
    assert len(ps.stdout.splitlines()) == 4, ps.stdout   # backend, header, the array, the plain task
    # expanded: one line per element
    ex = d.cli("ps", "-r")
    ids = [l.split()[0] for l in ex.stdout.splitlines()[2:]]
    # elements as ID_INDEX (Slurm's squeue -r), the plain task by its id
    assert sorted(ids) == sorted(["%d_%d" % (aid, k) for k in range(10)] + [str(plain)]), ex.stdout
    assert d.cli("ps", "--expand").stdout == ex.stdout
    # --json: folded by default, the server's list with --expand
    folded = json.loads(d.cli("ps", "--json").stdout)["tasks"]
    arr = [t for t in folded if t.get("kind") == "array"]
    assert len(arr) == 1 and arr[0]["array_id"] == aid and arr[0]["counts"]["queued"] == 8, folded
    assert len(folded) == 2
    assert len(json.loads(d.cli("ps", "--json", "-r").stdout)["tasks"]) == 11
    # cancel one element (Slurm's ID_INDEX), then the rest
    r = d.cli("cancel", "%d_7" % aid)
    assert r.returncode == 0 and r.stdout.strip() == "cancelled 1, stopping 0", (r.stdout, r.stderr)
    r = d.cli("cancel", "--array", str(aid))
    assert r.returncode == 0 and r.stdout.startswith("cancelled "), (r.stdout, r.stderr)
    wait_for(lambda: summary(d, aid)["counts"]["cancelled"] == 10, 20, "all cancelled")
    assert task(d, plain)["state"] == "running"   # cancelling the array left the plain task alone
    assert "cancelled 10" in d.cli("ps", "--all").stdout
    # usage errors: exit 2, nothing sent
    for args in (["submit", "--array", "5-1", "--", "true"], ["submit", "--array", "0-9%", "--", "true"],
                 ["cancel", "12_x"], ["cancel", "--array", "x"], ["cancel", "--array", "3_1"],
                 ["run", "--array", "0-1", "--", "true"]):
        r = d.cli(*args)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert "usage" in r.stderr, r.stderr
    # the server refuses (exit 1): cancel of an unknown array
    assert d.cli("cancel", "--array", "999999").returncode == 1
