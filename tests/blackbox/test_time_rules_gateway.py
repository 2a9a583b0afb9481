"""Time rules switch gateway limits (issue 23: seed 000's day/night swap of
request concurrency needed a cron job).  A rule's `gateway` names tenants
or groups; a group's entry applies to each of its tenants, a tenant's own
entry wins; a rule not in force changes nothing.  The limit in force is the
one every answer reports in x-ratelimit-limit-requests."""
import datetime
import hashlib

import pytest
import requests

from gw_upstream import Upstream

pytestmark = pytest.mark.e2e

KEYS = {"dept_a": "key-a", "dept_b": "key-b", "dept_c": "key-c"}


def h(k):
    return "sha256:" + hashlib.sha256(k.encode()).hexdigest()


def hhmm(dt):
    return dt.strftime("%H:%M")


def limit_in_force(d, tenant):
    r = requests.post(d.url + "/v1/chat/completions", timeout=20,
                      headers={"Authorization": "Bearer " + KEYS[tenant]},
                      json={"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert r.status_code == 200, r.text
    return r.headers.get("x-ratelimit-limit-requests")


def test_a_time_rule_in_force_sets_gateway_limits_per_group_and_tenant(daemon_factory):
    up = Upstream("up1")
    try:
        now = datetime.datetime.now(datetime.timezone.utc)
        on = (hhmm(now - datetime.timedelta(minutes=2)), hhmm(now + datetime.timedelta(minutes=5)))
        off = (hhmm(now + datetime.timedelta(hours=3)), hhmm(now + datetime.timedelta(hours=4)))
        cfg = ("gpus: {backend: sim}\n"
               "auth: {admin_keys: [\"%s\"]}\n"
               "gateway:\n  models:\n    - {name: m1, upstreams: [\"%s\"]}\n"
               "tenants:\n"
               "  - {id: dept_a, kind: external, keys: [\"%s\"], gateway: {rpm: 1000}}\n"
               "  - {id: dept_b, kind: external, keys: [\"%s\"], gateway: {rpm: 1000}}\n"
               "  - {id: dept_c, keys: [\"%s\"], gateway: {rpm: 1000}}\n"
               "time_rules:\n"
               "  - {name: now, start: \"%s\", end: \"%s\", tz: UTC,\n"
               "     gateway: {external: {rpm: 70}, dept_b: {rpm: 30}}}\n"
               "  - {name: later, start: \"%s\", end: \"%s\", tz: UTC, gateway: {dept_c: {rpm: 5}}}\n"
               % (h("admin"), up.url, h(KEYS["dept_a"]), h(KEYS["dept_b"]), h(KEYS["dept_c"]),
                  on[0], on[1], off[0], off[1]))
        d = daemon_factory(cfg, key="admin")
        assert limit_in_force(d, "dept_a") == "70"     # its group's entry
        assert limit_in_force(d, "dept_b") == "30"     # its own entry wins over its group's
        assert limit_in_force(d, "dept_c") == "1000"   # the rule that names it is not in force
    finally:
        up.stop()


def test_a_time_rule_naming_no_tenant_or_group_is_refused_with_its_line(tmp_path):
    from apiutil import run_server
    p = tmp_path / "g.yaml"
    p.write_text("gpus: {backend: sim}\n"
                 "tenants: [{id: dept_a}]\n"
                 "time_rules:\n"
                 "  - name: r\n"
                 "    start: \"08:00\"\n"
                 "    end: \"18:00\"\n"
                 "    gateway:\n"
                 "      nobody: {rpm: 5}\n")
    r = run_server(["--config", str(p), "--listen", "127.0.0.1:1", "--data-dir", str(tmp_path / "d")])
    assert r.returncode != 0
    assert "g.yaml:8" in r.stderr and "time_rules[0].gateway.nobody" in r.stderr, r.stderr
    assert "neither a tenant of tenants nor a group" in r.stderr, r.stderr
