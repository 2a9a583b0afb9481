"""Tenants, API keys and isolation, against the real daemon.

Three keys: an admin key and the keys of tenants `alpha` and `beta`.  The
isolation matrix drives every endpoint with the owner's key, the other
tenant's key, the admin key and no key, and checks who may see and touch
what (another tenant's task answers 404, not 403, so ids do not leak).
"""
import hashlib
import sqlite3

import pytest
import requests

from apiutil import reap_supervisors, run_server, wait_for
from conftest import SIM_CONFIG

pytestmark = pytest.mark.e2e

ADMIN, ALPHA, BETA = "admin-secret", "alpha-secret", "beta-secret"


def h(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


CONFIG = """
gpus: {backend: sim}
auth: {admin_keys: ["%s"]}
tenants:
  - {id: alpha, keys: ["%s"], max_priority: 3, default_priority: 5, weight: 2,
     quota: {max_concurrent: 10, max_gpus: 2, guaranteed_gpus: 1}}
  - {id: beta, kind: external, keys: ["%s"], max_priority: 0, default_priority: 7}
""" % (h(ADMIN), h(ALPHA), h(BETA))


def call(d, method, path, key=None, **kw):
    headers = kw.pop("headers", {})
    if key:
        headers["Authorization"] = "Bearer " + key
    kw.setdefault("timeout", 20)
    return requests.request(method, d.url + path, headers=headers, **kw)


def submit(d, key, **body):
    body.setdefault("memory_mb", 100)
    body.setdefault("lease_ttl_s", 600)
    r = call(d, "POST", "/api/v1/tasks", key, json=body)
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture
def d(daemon_factory):
    return daemon_factory(CONFIG)


def test_every_endpoint_needs_a_key_but_probes(d):
    assert call(d, "GET", "/healthz").status_code == 200
    assert call(d, "GET", "/readyz").status_code == 200
    for method, path in [("GET", "/api/v1/tasks"), ("POST", "/api/v1/tasks"), ("GET", "/api/v1/gpus"),
                         ("GET", "/api/v1/queue"), ("GET", "/api/v1/tenants"), ("GET", "/admin/scheduler/stats"),
                         ("GET", "/metrics")]:
        r = call(d, method, path)
        assert r.status_code == 401, (method, path, r.status_code)
        assert r.json()["error"]["code"] == "unauthorized"
        r = call(d, method, path, "not-a-key")
        assert r.status_code == 401, (method, path, r.status_code)


def test_a_key_submits_for_its_own_tenant_only(d):
    t = submit(d, ALPHA)
    assert t["tenant_id"] == "alpha"
    r = call(d, "POST", "/api/v1/tasks", ALPHA, json={"tenant_id": "beta", "memory_mb": 100})
    assert r.status_code == 403
    assert "belongs to tenant alpha" in r.json()["error"]["message"]
    # the admin key submits for any tenant named in the body
    assert submit(d, ADMIN, tenant_id="beta")["tenant_id"] == "beta"


def test_isolation_matrix(d):
    mine = submit(d, ALPHA, name="alpha-lease")
    other = submit(d, BETA, name="beta-lease")
    mid, oid = mine["id"], other["id"]

    # reading one task: owner and admin see it, the other tenant gets 404
    for key, want in [(ALPHA, 200), (ADMIN, 200), (BETA, 404)]:
        assert call(d, "GET", "/api/v1/tasks/%d" % mid, key).status_code == want, key
        assert call(d, "GET", "/api/tasks/%d" % mid, key).status_code == want, key
    # listing: a tenant sees its own tasks only, even when it asks for another's
    ids = lambda r: sorted(t["id"] for t in r.json()["tasks"])
    assert ids(call(d, "GET", "/api/v1/tasks", ALPHA)) == [mid]
    assert ids(call(d, "GET", "/api/v1/tasks?tenant=beta", ALPHA)) == [mid]
    assert ids(call(d, "GET", "/api/v1/tasks?state=active", BETA)) == [oid]
    assert ids(call(d, "GET", "/api/v1/tasks", ADMIN)) == sorted([mid, oid])
    # GPUs: a tenant sees busy GPUs but only its own task ids
    seen = [i for g in call(d, "GET", "/api/v1/gpus", ALPHA).json()["gpus"] for i in g["tasks"]]
    assert seen == [mid]
    seen = sorted(i for g in call(d, "GET", "/api/v1/gpus", ADMIN).json()["gpus"] for i in g["tasks"])
    assert seen == sorted([mid, oid])
    # writes on another tenant's task: 404 and nothing changes
    for method, path in [("POST", "/api/v1/tasks/%d/heartbeat"), ("POST", "/api/v1/tasks/%d/release"),
                         ("POST", "/api/v1/tasks/%d/cancel"), ("DELETE", "/api/v1/tasks/%d"),
                         ("GET", "/api/v1/tasks/%d/logs")]:
        r = call(d, method, path % oid, ALPHA)
        assert r.status_code == 404, (method, path, r.status_code, r.text)
    assert call(d, "GET", "/api/v1/tasks/%d" % oid, ADMIN).json()["state"] == "running"
    # the owner may
    assert call(d, "POST", "/api/v1/tasks/%d/heartbeat" % mid, ALPHA).status_code == 200
    assert call(d, "POST", "/api/v1/tasks/%d/release" % mid, ALPHA).json()["state"] == "succeeded"
    # and the admin may touch anyone's
    assert call(d, "POST", "/api/v1/tasks/%d/cancel" % oid, ADMIN).json()["state"] == "cancelled"
    # tenants: each key sees itself, the admin all
    assert [t["id"] for t in call(d, "GET", "/api/v1/tenants", ALPHA).json()["tenants"]] == ["alpha"]
    assert call(d, "GET", "/api/v1/tenants/beta", ALPHA).status_code == 404
    assert call(d, "GET", "/api/v1/tenants/alpha", ALPHA).status_code == 200
    assert [t["id"] for t in call(d, "GET", "/api/v1/tenants", ADMIN).json()["tenants"]] == ["alpha", "beta"]
    # admin endpoints: 403 for tenant keys, 200 for the admin key
    for method, path, body in [("GET", "/admin/scheduler/stats", None), ("GET", "/admin/scheduler/queues", None),
                               ("POST", "/admin/gpus/local:0/drain", None), ("GET", "/admin/audit", None),
                               ("PUT", "/admin/tenants/alpha", {"weight": 3}),
                               ("POST", "/admin/tenants/alpha/keys", None), ("GET", "/metrics", None)]:
        r = call(d, method, path, BETA, json=body)
        assert r.status_code == 403, (method, path, r.status_code)
        assert r.json()["error"]["code"] == "forbidden"
    for method, path in [("GET", "/admin/scheduler/stats"), ("GET", "/admin/audit"), ("GET", "/metrics")]:
        assert call(d, method, path, ADMIN).status_code == 200, path


def test_queue_shows_own_tasks_with_global_positions(d):
    fill = [submit(d, ADMIN, tenant_id="beta", exclusive=True, memory_mb=0) for _ in range(4)]
    a = submit(d, ALPHA, exclusive=True, memory_mb=0)
    b = submit(d, BETA, exclusive=True, memory_mb=0)
    assert a["state"] == b["state"] == "queued"
    q = call(d, "GET", "/api/v1/queue", BETA).json()
    assert [t["id"] for t in q["tasks"]] == [b["id"]]
    # positions stay global: the same number the admin sees, with alpha's task counted
    full = {t["id"]: t["queue_position"] for t in call(d, "GET", "/api/v1/queue", ADMIN).json()["tasks"]}
    assert sorted(full) == sorted([a["id"], b["id"]])
    assert q["tasks"][0]["queue_position"] == full[b["id"]]
    assert q["total"] == 2 and len(fill) == 4


def test_tiers_follow_the_key(d, daemon_factory):
    # default tier of the key, a less urgent tier on request, never more urgent than allowed
    assert submit(d, ALPHA)["priority"] == 5
    assert submit(d, ALPHA, priority=8)["priority"] == 8
    assert submit(d, ALPHA, priority=3)["priority"] == 3
    r = call(d, "POST", "/api/v1/tasks", ALPHA, json={"priority": "critical", "memory_mb": 100})
    assert r.status_code == 403
    assert "more urgent than this key allows (P3 at most)" in r.json()["error"]["message"]
    assert submit(d, BETA)["priority"] == 7
    assert submit(d, BETA, priority=0)["priority"] == 0
    # clamp instead of refuse when the config says so
    c = daemon_factory(CONFIG.replace('auth: {admin_keys: ["%s"]}' % h(ADMIN),
                                      'auth: {admin_keys: ["%s"], over_max_priority: clamp}' % h(ADMIN)))
    assert submit(c, ALPHA, priority=0)["priority"] == 3


def test_key_create_is_shown_once_stored_as_a_hash_and_survives_restart(d):
    r = call(d, "POST", "/admin/tenants/beta/keys", ADMIN)
    assert r.status_code == 201, r.text
    key = r.json()["key"]
    assert key.startswith("gpk_") and r.json()["hash"] == h(key)
    t = submit(d, key)
    assert t["tenant_id"] == "beta"
    assert call(d, "POST", "/admin/tenants/nobody/keys", ADMIN).status_code == 404
    d.stop()
    d.start()
    assert call(d, "GET", "/api/v1/tasks/%d" % t["id"], key).status_code == 200
    db = sqlite3.connect(d.data_dir + "/gpupool.db")
    dump = "\n".join(db.iterdump())
    db.close()
    assert key not in dump and h(key) in dump


def test_tenant_changes_are_stored_audited_and_survive_restart(d):
    r = call(d, "PUT", "/admin/tenants/alpha", ADMIN, json={"quota": {"max_gpus": 3.5}, "weight": 7})
    assert r.status_code == 200, r.text
    assert r.json()["quota"]["max_gpus"] == 3.5 and r.json()["weight"] == 7
    r = call(d, "PUT", "/admin/tenants/gamma", ADMIN, json={"kind": "external", "default_priority": 6})
    assert r.status_code == 201, r.text
    # bad input changes nothing
    for body in [{"weight": 0}, {"colour": "red"}, {"quota": {"max_gpus": "lots"}},
                 {"default_priority": 1, "max_priority": 4}, {"id": "other"}]:
        r = call(d, "PUT", "/admin/tenants/alpha", ADMIN, json=body)
        assert r.status_code == 400, (body, r.text)
    audit = call(d, "GET", "/admin/audit", ADMIN).json()["audit"]
    assert [a["action"] for a in audit] == ["tenant.update", "tenant.create"]
    assert audit[0]["old"]["weight"] == 2 and audit[0]["new"]["weight"] == 7
    assert audit[0]["who"].startswith("admin key sha256:")
    d.stop()
    d.start()
    t = call(d, "GET", "/api/v1/tenants/alpha", ADMIN).json()
    assert t["weight"] == 7 and t["quota"]["max_gpus"] == 3.5
    assert call(d, "GET", "/api/v1/tenants/gamma", ADMIN).json()["default_priority"] == 6
    assert len(call(d, "GET", "/admin/audit", ADMIN).json()["audit"]) == 2


def test_tier_weights_change_at_run_time_are_stored_and_audited(d):
    r = call(d, "PUT", "/admin/scheduler/weights", ADMIN, json={"weights": [512, 64, 64, 32, 16, 8, 4, 2, 1, 1]})
    assert r.status_code == 200, r.text
    assert r.json()["weights"][0] == 512 and r.json()["in_force"][1] == 64
    for body in [{"weights": [1] * 9}, {"weights": [0] * 10}, {"weights": ["x"] * 10}, {"w": [1] * 10}, [1] * 10]:
        r = call(d, "PUT", "/admin/scheduler/weights", ADMIN, json=body)
        assert r.status_code == 400, (body, r.text)
    assert call(d, "PUT", "/admin/scheduler/weights", ALPHA, json={"weights": [1] * 10}).status_code == 403
    audit = call(d, "GET", "/admin/audit", ADMIN).json()["audit"]
    assert audit[-1]["action"] == "scheduler.weights"
    assert audit[-1]["old"][0] == 256 and audit[-1]["new"][0] == 512
    d.stop()
    d.start()
    assert call(d, "GET", "/admin/scheduler/weights", ADMIN).json()["weights"][:2] == [512, 64]


# ---- guaranteed GPUs are guaranteed (README "Quotas") ----

assert reap_supervisors  # autouse fixture, imported so that it applies here

GUARANTEE_CONFIG = (SIM_CONFIG +
                    "scheduler: {preemption: {enabled: true, grace_sec: 1, min_runtime_sec: 0}}\n"
                    "tenants:\n"
                    "  - {id: owner, quota: {guaranteed_gpus: 1}}\n"
                    "  - {id: other}\n")


def test_guaranteed_gpu_is_reclaimed_from_ordinary_tasks_holding_every_gpu(daemon_factory):
    """The issue: guaranteed_gpus 1 waited forever while another tenant's
    ordinary (not preemptible) tasks held all four GPUs."""
    d = daemon_factory(GUARANTEE_CONFIG)
    other = []
    for i in range(4):
        r = d.api("POST", "/api/v1/tasks", json={"tenant_id": "other", "name": "o%d" % i,
                                                 "command": ["sleep", "600"]})
        assert r.status_code == 201, r.text
        other.append(r.json())
    assert all(t["state"] == "running" and not t["preemptible"] for t in other)
    # three fit beside the owner's unused guarantee; the fourth borrows it, and says so
    assert [t["borrowing"] for t in other] == [False, False, False, True]
    assert "borrowing" in other[3]["reason"] and "guaranteed" in other[3]["reason"]
    st = d.cli("status", str(other[3]["id"]))
    assert st.returncode == 0 and "borrowing" in st.stdout, st
    assert "borrowing" not in d.cli("status", str(other[0]["id"])).stdout
    # the owner comes back for its GPU: the borrower is preempted, the owner runs
    r = d.api("POST", "/api/v1/tasks", json={"tenant_id": "owner", "command": ["sleep", "600"], "priority": 9})
    assert r.status_code == 201, r.text
    mine = r.json()["id"]
    wait_for(lambda: d.api("GET", "/api/v1/tasks/%d" % mine).json()["state"] == "running", timeout=15,
             what="the owner's task to start")
    back = d.api("GET", "/api/v1/tasks/%d" % other[3]["id"]).json()
    assert back["state"] == "queued" and back["preempt_count"] == 1 and back["borrowing"] is False, back
    for t in other[:3]:  # ordinary tasks that borrowed nothing keep running
        assert d.api("GET", "/api/v1/tasks/%d" % t["id"]).json()["state"] == "running"
    for t in other + [{"id": mine}]:
        d.api("POST", "/api/v1/tasks/%d/cancel" % t["id"])

# (PUT body, words the 400 message must contain)
BAD_TENANT_PUTS = [
    ({"quota": {"max_gpus": 0.0004}}, ["quota.max_gpus", "at most 3 decimals", "0.0004"]),
    ({"quota": {"guaranteed_gpus": 0.0001}}, ["quota.guaranteed_gpus", "at most 3 decimals"]),
    ({"quota": {"max_gpus": 1e-9}}, ["quota.max_gpus", "at most 3 decimals"]),
    ({"quota": {"max_gpus": -1}}, ["quota.max_gpus", "between 0 and 1000000 GPUs"]),
    ({"quota": {"max_gpus": 1000000.5}}, ["quota.max_gpus", "between 0 and 1000000 GPUs"]),
    ({"quota": {"max_gpus": "lots"}}, ["quota.max_gpus", "got a string"]),
    ({"quota": {"max_gpus": None}}, ["quota.max_gpus", "got null"]),
    ({"quota": {"max_concurrent": 2.5}}, ["quota.max_concurrent", "whole number"]),
    ({"quota": {"max_concurrent": 5.0}}, ["quota.max_concurrent", "whole number"]),
    ({"quota": {"max_concurrent": 1000001}}, ["quota.max_concurrent", "between 0 and 1000000"]),
    ({"quota": {"max_queued": -1}}, ["quota.max_queued", "between 0 and 1000000"]),
    ({"quota": {"max_gpuz": 1}}, ["quota", "max_gpuz"]),
    ({"quota": {"max_gpus": 1, "guaranteed_gpus": 2}}, ["guaranteed_gpus is above quota.max_gpus"]),
    ({"group": "gpu_team"}, ["group", "gpu_team", "not a group"]),
    ({"name": "a\tb"}, ["name", "control characters"]),
    ({"name": "a\u0085b"}, ["name", "control characters"]),
    ({"name": "a\u2028b"}, ["name", "line or paragraph separator"]),
    ({"name": "a\u202eb"}, ["name", "bidirectional"]),
    ({"group": "a\u2029b"}, ["group", "line or paragraph separator"]),
]


def test_bad_tenant_puts_get_400_and_change_nothing(d):
    before = call(d, "GET", "/api/v1/tenants/alpha", ADMIN).json()
    problems = []
    for body, words in BAD_TENANT_PUTS:
        for tid in ("alpha", "newt"):  # a change, and a creation
            r = call(d, "PUT", "/admin/tenants/" + tid, ADMIN, json=body)
            try:
                assert r.status_code == 400, r.status_code
                err = r.json()["error"]
                assert err["code"] == "invalid_request", err
                for w in words:
                    assert w in err["message"], "message %r does not name %r" % (err["message"], w)
            except (AssertionError, ValueError, KeyError) as e:
                problems.append("%s %s -> %s %s (%s)" % (tid, body, r.status_code, r.text[:200], e))
    assert not problems, "\n".join(problems)
    # nothing changed: alpha reads the same, no tenant was made, nothing audited
    assert call(d, "GET", "/api/v1/tenants/alpha", ADMIN).json() == before
    assert call(d, "GET", "/api/v1/tenants/newt", ADMIN).status_code == 404
    assert [t["id"] for t in call(d, "GET", "/api/v1/tenants", ADMIN).json()["tenants"]] == ["alpha", "beta"]
    assert call(d, "GET", "/admin/audit", ADMIN).json()["audit"] == []
    # exact values pass and read back as given
    r = call(d, "PUT", "/admin/tenants/alpha", ADMIN, json={"quota": {"max_gpus": 0.125, "guaranteed_gpus": 0.001}})
    assert r.status_code == 200, r.text
    assert r.json()["quota"]["max_gpus"] == 0.125 and r.json()["quota"]["guaranteed_gpus"] == 0.001


def test_the_file_and_the_api_refuse_a_quota_in_the_same_words(d, tmp_path):
    r = call(d, "PUT", "/admin/tenants/alpha", ADMIN, json={"quota": {"max_gpus": 0.0004}})
    api_msg = r.json()["error"]["message"]
    assert api_msg.startswith("quota.max_gpus: ")
    cfg = tmp_path / "q.yaml"
    cfg.write_text("gpus: {backend: sim}\ntenants:\n  - id: a\n    quota:\n      max_gpus: 0.0004\n")
    rs = run_server(["--config", str(cfg), "--listen", "127.0.0.1:1", "--data-dir", str(tmp_path / "data")])
    assert rs.returncode == 1, rs.stderr
    assert "%s:5: tenants[0].%s" % (cfg, api_msg) in rs.stderr, (api_msg, rs.stderr)


def test_a_tenant_may_join_only_a_defined_group_or_its_kind(d, daemon_factory):
    # no groups in CONFIG: alpha (internal) may not join "external"; beta's own kind is its default group
    r = call(d, "PUT", "/admin/tenants/alpha", ADMIN, json={"group": "external"})
    assert r.status_code == 400 and "not a group" in r.json()["error"]["message"], r.text
    assert call(d, "GET", "/api/v1/tenants/alpha", ADMIN).json()["group"] == "internal"
    assert call(d, "PUT", "/admin/tenants/beta", ADMIN, json={"group": "external"}).status_code == 200
    g = daemon_factory(CONFIG + "groups: [{name: gpu_team, share_pct: 50}, {name: internal, share_pct: 50}]\n",
                       key=ADMIN)
    r = call(g, "PUT", "/admin/tenants/alpha", ADMIN, json={"group": "gpu_team"})
    assert r.status_code == 200 and r.json()["group"] == "gpu_team", r.text
    r = call(g, "PUT", "/admin/tenants/alpha", ADMIN, json={"group": "gpu_teem"})
    assert r.status_code == 400 and "gpu_team" in r.json()["error"]["message"], r.text
    assert call(g, "GET", "/api/v1/tenants/alpha", ADMIN).json()["group"] == "gpu_team"


QUOTA_CONFIG = """
gpus: {backend: sim}
tenants:
  - {id: a, group: ga}
  - {id: b, group: gb}
  - {id: c, group: ga, quota: {max_gpus: 2}}
  - {id: n, group: gb, quota: {max_gpus: 1}}
groups: [{name: ga, share_pct: 70}, {name: gb, share_pct: 30}]
time_rules:
  - {name: night, start: "00:00", end: "00:01", quotas: {n: {max_gpus: 3}}}
"""


def test_what_a_quota_never_admits_is_refused_and_no_gpu_idles_for_a_share(daemon_factory):
    """Issue 23: a task above its tenant's max_gpus was accepted and then
    blocked the tenant's every later task; groups at 70/30 of 4 GPUs left a
    GPU idle with a task of each group waiting.  Keyless loopback: admin."""
    d = daemon_factory(QUOTA_CONFIG)

    def sub(tenant, gpus=1, secs=60):
        return d.api("POST", "/api/v1/tasks", json={"tenant_id": tenant, "gpu_request": gpus,
                                                    "command": ["sleep", str(secs)]})

    r = sub("c", 3)
    assert r.status_code == 422, r.text
    msg = r.json()["error"]["message"]
    assert "tenant c quota" in msg and "max_gpus of 2" in msg, msg
    # a time rule that allows more at some hour admits it (it waits for the rule)
    r = sub("n", 3)
    assert r.status_code == 201, r.text
    night = r.json()["id"]
    # ...and that task does not hold back n's task that fits now
    r = sub("n", 1)
    assert r.status_code == 201, r.text
    wait_for(lambda: d.api("GET", "/api/v1/tasks/%d" % r.json()["id"]).json()["state"] == "running", 10)
    assert d.api("POST", "/api/v1/tasks/%d/cancel" % night, json={}).status_code == 200
    cur = [t["id"] for t in d.api("GET", "/api/v1/tasks?state=running").json()["tasks"]]
    for t in cur:
        d.api("POST", "/api/v1/tasks/%d/cancel" % t, json={})
    wait_for(lambda: not d.api("GET", "/api/v1/tasks?state=running").json()["tasks"], 20)
    # 70/30 of 4 GPUs: a runs 2, b runs 1 and a short one of a ends
    ids = [sub("a").json()["id"], sub("a").json()["id"], sub("b").json()["id"], sub("a", secs=1).json()["id"]]
    wait_for(lambda: all(d.api("GET", "/api/v1/tasks/%d" % i).json()["state"] == "running" for i in ids), 10)
    qa, qb = sub("a").json()["id"], sub("b").json()["id"]
    wait_for(lambda: d.api("GET", "/api/v1/tasks/%d" % ids[3]).json()["state"] == "succeeded", 10)

    def one_started():
        states = [d.api("GET", "/api/v1/tasks/%d" % i).json()["state"] for i in (qa, qb)]
        return states.count("running") == 1

    wait_for(one_started, 5, "the idle GPU given to one of the two waiting tasks")
    gpus = d.api("GET", "/api/v1/gpus").json()["gpus"]
    assert all(g["tasks"] for g in gpus), gpus
