"""Run-time estimates learned from history and expected starts (issue 26).

A user's repeated jobs get an estimate learned from their finished runs
(kept across a restart: the server relearns from the store), and a queued
task gets an expected start, as `squeue --start` gives one: in the task
object, `gpupool status`, `GET /api/v1/queue` and `gpupool queue`."""
import datetime
import time

import pytest

from apiutil import wait_for
from conftest import Daemon

pytestmark = pytest.mark.e2e


def submit(d, name, secs, gpus=4):
    r = d.api("POST", "/api/v1/tasks", json={"name": name, "gpu_request": gpus, "command": ["sleep", str(secs)]})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def task(d, tid):
    return d.api("GET", "/api/v1/tasks/%d" % tid).json()


def metrics(d):
    r = d.api("GET", "/metrics")
    assert r.status_code == 200, r.text
    out = {}
    for line in r.text.splitlines():
        if line.startswith("gpupool_") and " " in line and "{" not in line:
            k, v = line.split(" ", 1)
            out[k] = float(v)
    return out


def ts(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def test_repeated_jobs_get_a_learned_estimate_and_an_expected_start(tmp_path):
    d = Daemon(tmp_path)
    d.start()
    try:
        first = submit(d, "train", 1)
        assert "estimate" not in task(d, first), "nothing was known yet"
        for _ in range(2):
            submit(d, "train", 1)
        wait_for(lambda: all(task(d, i)["state"] == "succeeded" for i in (first, first + 1, first + 2)), 30)
        # three more of the same job; each takes the whole node (4 GPUs), so two wait
        ids = [submit(d, "train", 1) for _ in range(3)]
        t = task(d, ids[2])
        assert t["state"] == "queued", t
        est = t["estimate"]
        assert est["from"] == "task" and est["runs"] == 3, est
        assert 1 <= est["run_s"] <= 3, est
        assert 0 < est["confidence"] <= 1, est
        # it starts after the two ahead of it: about two estimated runs from now
        at = ts(t["expected_start_at"])
        assert time.time() + 0.5 < at < time.time() + 3 * est["run_s"] + 2, (t["expected_start_at"], est)
        q = d.api("GET", "/api/v1/queue").json()["tasks"]
        row = [x for x in q if x["id"] == ids[2]][0]
        assert row["expected_start_at"] == t["expected_start_at"], (row, t)
        out = d.cli("status", ids[2]).stdout
        assert "run time:" in out and "from 3 runs of its task" in out, out
        assert "expected start:" in out, out
        qo = d.cli("queue").stdout
        assert "EXPECTED START" in qo and t["expected_start_at"][:10] in qo, qo
        # another name of the same size: the wider group answers
        other = submit(d, "eval", 1)
        assert task(d, other)["estimate"]["from"] in ("user", "tenant", "size")
        wait_for(lambda: all(task(d, i)["state"] == "succeeded" for i in ids + [other]), 60)
        # how right the expected starts were: the three that waited (ids[1], ids[2], other) were shown
        # one (the reads above asked for the queue's), started within 2x of it, and the metrics say so
        m = metrics(d)
        assert m["gpupool_expected_starts_total"] == 3, m
        assert m["gpupool_expected_starts_within_2x_total"] == 3, m
        assert m["gpupool_runtime_estimates_total"] >= 3, m
        assert 0 <= m["gpupool_runtime_estimates_within_2x_total"] <= m["gpupool_runtime_estimates_total"], m
        # a restart relearns from the store: the same job is estimated at once
        d.stop()
        d.start()
        again = submit(d, "train", 1)
        est = task(d, again).get("estimate")
        assert est and est["from"] == "task" and est["runs"] >= 6, est
        assert "learned from" in d.log()
    finally:
        d.stop()
