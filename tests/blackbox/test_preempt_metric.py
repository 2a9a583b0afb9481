"""A preemption is counted: gpupool_tasks_preempted_total in GET /metrics
and counters.preempted in GET /api/v1/monitor/metrics (the daemon never
called the monitor's counter, so both stayed 0 while preemption worked).

Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_preempt_metric.py
"""
import re

import pytest
import requests

from apiutil import submit, task as get

pytestmark = pytest.mark.e2e

CONFIG = ("gpus: {backend: sim}\n"
          "scheduler: {preemption: {enabled: true, min_runtime_sec: 0, grace_sec: 0}}\n")


def preempted_total(d):
    text = requests.get(d.url + "/metrics", timeout=10).text
    m = re.search(r"^gpupool_tasks_preempted_total (\S+)$", text, re.M)
    assert m, "no gpupool_tasks_preempted_total in /metrics"
    return float(m.group(1))


def test_a_preemption_is_counted_in_the_metrics(daemon_factory):
    d = daemon_factory(CONFIG)
    assert preempted_total(d) == 0
    leases = [submit(d, tenant_id="bulk", priority=8, preemptible=True, exclusive=True) for _ in range(4)]
    assert all(t["state"] == "running" for t in leases)
    urgent = submit(d, tenant_id="prod", priority=0, exclusive=True)
    assert urgent["state"] == "running"
    victims = [t for t in leases if get(d, t["id"])["preempt_count"] == 1]
    assert len(victims) == 1
    assert preempted_total(d) == 1
    snap = requests.get(d.url + "/api/v1/monitor/metrics", timeout=10).json()
    assert snap["counters"]["preempted"] == 1
