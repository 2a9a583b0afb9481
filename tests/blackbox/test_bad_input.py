"""Black-box tests of bad input: every malformed request gets a clear
error ({"error": {"code", "message"}} with a fitting status) and changes
nothing (no task stored, no id used, no GPU touched); a bad config file
stops the server at start with FILE:LINE and the key named.

Run: make blackbox, or
  GPUPOOL_BIN=/tmp/b-bb/gpupool GPUPOOL_BUILD=/tmp/b-bb /usr/bin/python3 -m pytest -q tests/blackbox/test_bad_input.py
"""
import json

import pytest

from apiutil import assert_error, gpus, lease, reap_supervisors, run_server, sha256_key, submit

pytestmark = pytest.mark.e2e
assert reap_supervisors  # autouse fixture, imported so that it applies here

JSON = {"Content-Type": "application/json"}

# (raw body, words the message must contain; a tuple is a choice)
BAD_SUBMITS = [
    ('{"gpu_request": 1,', ["JSON"]),
    ("", ["JSON"]),
    ("[1, 2]", ["object"]),
    ('"a string"', [("object", "JSON")]),
    ("null", [("object", "JSON")]),
    ("42", [("object", "JSON")]),
    ('{"gpu_request": "2"}', ["gpu_request"]),
    ('{"gpu_request": 0}', ["gpu_request"]),
    ('{"gpu_request": 1.5}', ["gpu_request"]),
    ('{"gpu_request": 1025}', ["gpu_request"]),
    ('{"memory_mb": -1}', ["memory_mb"]),
    ('{"memory_mb": "4096"}', ["memory_mb"]),
    ('{"priority": 12}', ["priority", "0..9"]),
    ('{"priority": -1}', ["priority", "0..9"]),
    ('{"priority": "urgent"}', ["priority"]),
    ('{"priority": true}', ["priority"]),
    ('{"gpu_requests": 1}', ["gpu_requests"]),
    ('{"tenant_id": "a b"}', ["tenant_id"]),
    ('{"tenant_id": ""}', ["tenant_id"]),
    ('{"tenant_id": 7}', ["tenant_id"]),
    ('{"name": "%s"}' % ("x" * 5000), ["name"]),
    ('{"exclusive": "yes"}', ["exclusive"]),
    ('{"timeout_s": -5}', ["timeout_s"]),
    ('{"queue_timeout_s": "1"}', ["queue_timeout_s"]),
    ('{"lease_ttl_s": 0}', ["lease_ttl_s"]),
    ('{"max_retries": 101}', ["max_retries"]),
    ('{"gpu_request": 1, "gpu_request": 2}', ["JSON"]),
    ('{"command": []}', ["command"]),
    ('{"command": [1]}', ["command"]),
    ('{"command": "sleep 1"}', ["command"]),
    ('{"command": [""]}', ["command"]),
    ('{"command": ["true"], "lease_ttl_s": 5}', ["lease_ttl_s"]),
    ('{"command": ["true"], "env": {"1ABC": "v"}}', ["env"]),
    ('{"command": ["true"], "env": {"A=B": "v"}}', ["env"]),
    ('{"command": ["true"], "env": {"A B": "v"}}', ["env"]),
    ('{"command": ["true"], "env": {"": "v"}}', ["env"]),
    ('{"command": ["true"], "env": {"OK": 1}}', ["env"]),
    ('{"command": ["true"], "env": ["A=1"]}', ["env"]),
    ('{"command": ["true"], "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}}', ["CUDA_VISIBLE_DEVICES"]),
    ('{"command": ["true"], "env": {"GPUPOOL_TASK_ID": "1"}}', ["GPUPOOL_TASK_ID"]),
    ('{"command": ["true"], "workdir": "relative/dir"}', ["workdir"]),
    ('{"env": {"A": "b"}}', ["env"]),
    ('{"elastic": {"min_gpus": 2, "max_gpus": 2}}', ["max_gpus", "greater"]),
    ('{"elastic": {"min_gpus": 1}}', ["elastic.max_gpus", "missing"]),
    ('{"elastic": {"min_gpus": 1, "max_gpus": 257}}', ["elastic.max_gpus"]),
    ('{"elastic": {"min_gpus": 0, "max_gpus": 4}}', ["elastic.min_gpus"]),
    ('{"elastic": {"min_gpus": 1, "max_gpus": 4, "step": 1}}', ["elastic", "step"]),
    ('{"elastic": [1, 4]}', ["elastic"]),
    ('{"gpu_request": 2, "elastic": {"min_gpus": 1, "max_gpus": 4}}', ["differ"]),
    ('{"memory_mb": 1000, "elastic": {"min_gpus": 1, "max_gpus": 4}}', ["whole GPUs"]),
    # text fields: no control characters (tab, NEL included), line separators or bidi overrides
    ('{"name": "a\\tb"}', ["name", "control characters"]),
    ('{"name": "a\\nb"}', ["name", "control characters"]),
    ('{"name": "a\\u0085b"}', ["name", "control characters"]),
    ('{"name": "a\\u009bb"}', ["name", "control characters"]),
    ('{"name": "a\\u007fb"}', ["name", "control characters"]),
    ('{"name": "a\\u2028b"}', ["name", "line or paragraph separator"]),
    ('{"name": "a\\u2029b"}', ["name", "line or paragraph separator"]),
    ('{"name": "invoice\\u202egpj.exe"}', ["name", "bidirectional"]),
    ('{"name": "a\\u2066b"}', ["name", "bidirectional"]),
    ('{"name": "a\\u0000b"}', ["JSON"]),
    ('{"model": "deepseek\\t7b"}', ["model", "control characters"]),
    ('{"model": "deepseek\\u2028"}', ["model", "line or paragraph separator"]),
    ('{"gpu_model": "A100\\u0085"}', ["gpu_model", "control characters"]),
    ('{"tenant_id": "a\\tb"}', ["tenant_id"]),
]


def assert_nothing_changed(d):
    r = d.api("GET", "/api/v1/tasks")
    assert r.status_code == 200 and r.json()["tasks"] == [], r.text
    assert d.api("GET", "/api/v1/queue").json()["total"] == 0
    m = d.api("GET", "/api/v1/monitor/metrics").json()
    assert m["submitted_total"] == 0 and m["tasks_running"] == 0 and m["tasks_queued"] == 0
    for g in gpus(d):
        assert g["tasks"] == [] and g["memory_allocated_mb"] == 0 and g["drained"] is False


def test_bad_submissions_are_refused_and_change_nothing(daemon):
    problems = []
    for body, words in BAD_SUBMITS:
        r = daemon.api("POST", "/api/v1/tasks", data=body.encode(), headers=JSON)
        try:
            msg = assert_error(r, 400, "invalid_request")
            for w in words:   # a tuple: any of these
                assert any(x in msg for x in (w if isinstance(w, tuple) else (w,))), \
                    "message %r does not name %r" % (msg, w)
            assert r.headers["X-Gpupool-Backend"] == "sim"
        except (AssertionError, ValueError) as e:
            problems.append("%s -> %s %s (%s)" % (body[:80], r.status_code, r.text[:200], e))
    assert not problems, "\n".join(problems)
    assert_nothing_changed(daemon)
    # no id was used up by the refusals
    assert lease(daemon, memory_mb=100)["id"] == 1


def test_a_body_over_max_body_bytes_is_413(daemon):
    big = json.dumps({"name": "x" * (2 * 1024 * 1024)})
    r = daemon.api("POST", "/api/v1/tasks", data=big.encode(), headers=JSON)
    assert_error(r, 413, "payload_too_large")
    assert_nothing_changed(daemon)
    # the server still answers afterwards
    assert daemon.api("GET", "/healthz").status_code == 200


def test_a_small_max_body_bytes_is_enforced(daemon_factory):
    d = daemon_factory("gpus: {backend: sim}\nserver: {max_body_bytes: 1024}\n")
    ok = submit(d, name="y" * 100, memory_mb=10, lease_ttl_s=60)
    r = d.api("POST", "/api/v1/tasks", json={"name": "x" * 2000})
    assert_error(r, 413, "payload_too_large")
    assert [t["id"] for t in d.api("GET", "/api/v1/tasks").json()["tasks"]] == [ok["id"]]


def test_a_body_must_be_declared_json(daemon):
    # a text/plain or form body is what any web page can make a browser send
    # without a preflight: refused (415) before it is parsed (tests/blackbox/test_browser.py)
    for ctype in ("text/plain", "application/x-www-form-urlencoded"):
        r = daemon.api("POST", "/api/v1/tasks", data=b'{"memory_mb": 100}', headers={"Content-Type": ctype})
        assert "application/json" in assert_error(r, 415, "unsupported_media_type")
    r = daemon.api("POST", "/api/v1/tasks", data=b'{"memory_mb": 100}',
                   headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 201, r.text
    r = daemon.api("POST", "/api/v1/tasks", data=b'memory_mb=100', headers={"Content-Type": "application/json"})
    assert "not valid JSON" in assert_error(r, 400, "invalid_request")
    assert len(daemon.api("GET", "/api/v1/tasks").json()["tasks"]) == 1


BAD_REQUESTS = [  # (method, path, status)
    ("GET", "/api/v1/tasks/999", 404),
    ("GET", "/api/tasks/999", 404),
    ("POST", "/api/v1/tasks/999/cancel", 404),
    ("DELETE", "/api/v1/tasks/999", 404),
    ("POST", "/api/v1/tasks/999/heartbeat", 404),
    ("POST", "/api/v1/tasks/999/release", 404),
    ("GET", "/api/v1/tasks/999/logs", 404),
    ("GET", "/api/v1/tasks/abc", 404),
    ("GET", "/api/v1/tasks/0", 404),
    ("GET", "/api/v1/tasks/-1", 404),
    ("GET", "/api/v1/tasks/1x", 404),
    ("GET", "/api/v1/tasks/99999999999999999999999", 404),
    ("POST", "/api/v1/tasks/abc/cancel", 404),
    ("POST", "/api/v1/tasks/1/explode", 404),
    ("GET", "/api/v1/nope", 404),
    ("GET", "/nope", 404),
    ("GET", "/admin/nope", 404),
    ("POST", "/admin/gpus/local:7/drain", 404),
    ("PUT", "/api/v1/tasks", 405),
    ("PATCH", "/api/v1/tasks", 405),
    ("PUT", "/api/v1/tasks/1", 405),
    ("GET", "/api/v1/tasks/1/cancel", 405),
    ("GET", "/api/v1/tasks/1/heartbeat", 405),
    ("POST", "/api/v1/tasks/1/logs", 405),
    ("POST", "/healthz", 405),
    ("DELETE", "/readyz", 405),
    ("GET", "/api/v1/tasks?limit=0", 400),
    ("GET", "/api/v1/tasks?limit=1001", 400),
    ("GET", "/api/v1/tasks?limit=abc", 400),
    ("GET", "/api/v1/tasks?after=x", 400),
    ("GET", "/api/v1/tasks?state=sleeping", 400),
    ("GET", "/api/v1/queue?limit=-1", 400),
    ("GET", "/api/v1/tasks/1?wait=61", 400),
    ("GET", "/api/v1/tasks/1?wait=soon", 400),
    # escapes: %00 must not cut a path or query value short, %2F must not add a path segment
    ("GET", "/api/v1/tasks?state=queued%00x", 400),
    ("GET", "/api/v1/tasks?tenant=default%00x", 400),
    ("GET", "/api/v1/tasks?tenant=a%09b", 400),
    ("GET", "/api/v1/tasks?limit=5%00", 400),
    ("GET", "/api/v1/queue?limit=5%00", 400),
    ("GET", "/api/v1/tenants/default%00x", 404),
    ("PUT", "/admin/tenants/default%00x", 400),
    ("PUT", "/admin/tenants/x%2Fkeys", 400),
    ("POST", "/admin/tenants/default%2Fkeys", 400),
    ("PUT", "/admin/tenants/a%0Ab", 400),
]


def test_bad_paths_methods_and_queries_get_clear_errors_and_change_nothing(daemon):
    problems = []
    for method, path, status in BAD_REQUESTS:
        r = daemon.api(method, path, timeout=10)
        code = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}[status]
        try:
            assert_error(r, status, code)
            assert r.headers["X-Gpupool-Backend"] == "sim"
        except (AssertionError, ValueError) as e:
            problems.append("%s %s -> %s %s (%s)" % (method, path, r.status_code, r.text[:200], e))
    assert not problems, "\n".join(problems)
    assert_nothing_changed(daemon)
    # no tenant was made or changed, no key created
    assert [t["id"] for t in daemon.api("GET", "/api/v1/tenants").json()["tenants"]] in ([], ["default"])
    assert daemon.api("GET", "/admin/audit").json()["audit"] == []


def test_escaped_nul_or_slash_reaches_no_task_and_no_tenant(daemon):
    # before: MHD decoded %00 into a NUL that cut "1%00" to task 1, "alpha%00x" to tenant alpha,
    # and %2F into a '/' that turned PUT /admin/tenants/alpha%2Fkeys into a key for alpha
    t = lease(daemon, memory_mb=1000)
    assert t["id"] == 1
    r = daemon.api("PUT", "/admin/tenants/alpha", json={"weight": 2})
    assert r.status_code == 201, r.text
    for method, path, status in [("GET", "/api/v1/tasks/1%00", 404), ("GET", "/api/v1/tasks/1%00x", 404),
                                 ("POST", "/api/v1/tasks/1%00/cancel", 404),
                                 ("POST", "/api/v1/tasks/1%2Fcancel", 404), ("DELETE", "/api/v1/tasks/1%00", 404),
                                 ("PUT", "/admin/tenants/alpha%00x", 400), ("POST", "/admin/tenants/alpha%2Fkeys", 400),
                                 ("GET", "/api/v1/tenants/alpha%00", 404)]:
        r = daemon.api(method, path, json={"weight": 9} if method == "PUT" else None)
        code = {400: "invalid_request", 404: "not_found"}[status]
        assert_error(r, status, code)
    # nothing changed: the lease runs, alpha has no key and weight 2, no other tenant appeared
    got = daemon.api("GET", "/api/v1/tasks/1").json()
    assert got["state"] == "running" and got["gpus"] == t["gpus"], got
    tenants = daemon.api("GET", "/api/v1/tenants").json()["tenants"]
    assert [x["id"] for x in tenants if x["id"] != "default"] == ["alpha"], tenants
    alpha = [x for x in tenants if x["id"] == "alpha"][0]
    assert alpha["keys"] == 0 and alpha["weight"] == 2, alpha
    assert [a["action"] for a in daemon.api("GET", "/admin/audit").json()["audit"]] == ["tenant.create"]
    # an escaped character that is not a control or '/' still works
    assert daemon.api("GET", "/api/v1/tenants/%61lpha").json()["id"] == "alpha"


def test_a_bad_release_body_changes_nothing(daemon):
    t = lease(daemon, memory_mb=1000)
    for body in ('{"exit_code": "3"}', '{"exit_code": -1}', '{"exit_code": 256}', "[3]",
                 '{"exit_code": 0, "extra": 1}', "{bad"):
        r = daemon.api("POST", "/api/v1/tasks/%d/release" % t["id"], data=body.encode(), headers=JSON)
        assert_error(r, 400, "invalid_request")
        got = daemon.api("GET", "/api/v1/tasks/%d" % t["id"]).json()
        assert got["state"] == "running" and got["gpus"] == t["gpus"], (body, got)


# ---- bad config files -----------------------------------------------------------

BAD_CONFIGS = [
    # (text, line, key)
    ("gpus: {backend: sim}\nserver:\n  listen: \"127.0.0.1:1\"\n  lisen: \"x\"\n", 4, "server.lisen"),
    ("gpus: {backend: sim}\n\nscheduler:\n  max_queue_depth: lots\n", 4, "scheduler.max_queue_depth"),
    ("gpus:\n  backend: sim\n  poll_ms: \"200\"\n", 3, "gpus.poll_ms"),
    ("gpus:\n  backend: cuda\n", 2, "gpus.backend"),
    ("gpus: {backend: sim}\nauth:\n  admin_keys: [\"plaintext-secret\"]\n", 3, "auth.admin_keys"),
    ("gpus: {backend: sim}\nscheduler:\n  weights: [1, 2, 3]\n", 3, "scheduler.weights"),
    ("gpus: {backend: sim}\nnonsense: 1\n", 2, "nonsense"),
    # quotas: the same reader as PUT /admin/tenants/{id}
    ("gpus: {backend: sim}\ntenants:\n  - id: a\n    quota: {max_gpus: 0.0004}\n", 4, "tenants[0].quota.max_gpus"),
    # text: no tab / NEL / line separators in names
    ("gpus: {backend: sim}\ntenants:\n  - id: a\n    name: \"A\\tB\"\n", 4, "tenants[0].name"),
    ("gpus: {backend: sim}\ntenants:\n  - id: a\n    name: \"A\\NB\"\n", 4, "tenants[0].name"),
    ("gpus: {backend: sim}\ntenants:\n  - id: a\n    name: \"A\\LB\"\n", 4, "tenants[0].name"),
    # a key hash given to two owners: the second is named, and the first
    ("gpus: {backend: sim}\nauth:\n  admin_keys: [\"%s\"]\ntenants:\n  - id: a\n    keys: [\"%s\"]\n"
     % (sha256_key("k1"), sha256_key("k1")), 6, "tenants[0].keys[0]: this key hash is already an admin key"),
    ("gpus: {backend: sim}\ntenants:\n  - {id: a, keys: [\"%s\"]}\n  - id: b\n    keys: [\"%s\"]\n"
     % (sha256_key("k1"), sha256_key("k1")), 5, "already given to tenant \"a\" (tenants[0].keys[0], line 3)"),
    # references: an undefined group, shares over 100%, a time rule naming an unknown tenant
    ("gpus: {backend: sim}\ntenants:\n  - id: a\n    group: gpu_team\n", 4, "tenants[0].group"),
    ("gpus: {backend: sim}\ngroups:\n  - {name: internal, share_pct: 80}\n  - {name: external, share_pct: 30}\n",
     4, "groups[1]: the group shares add up to 110%"),
    ("gpus: {backend: sim}\ntenants: [{id: a}]\ntime_rules:\n  - name: day\n    start: \"08:00\"\n    end: \"18:00\"\n"
     "    quotas:\n      dept_b: {max_gpus: 2}\n", 8, "time_rules[0].quotas.dept_b"),
]


@pytest.mark.parametrize("text,line,key", BAD_CONFIGS, ids=[c[2][:40] for c in BAD_CONFIGS])
def test_a_bad_config_file_stops_the_server_naming_file_line_and_key(tmp_path, text, line, key):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    r = run_server(["--config", str(cfg), "--listen", "127.0.0.1:1", "--data-dir", str(tmp_path / "data")])
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "%s:%d" % (cfg, line) in r.stderr or "bad.yaml:%d" % line in r.stderr, r.stderr
    assert key in r.stderr, r.stderr
    assert "plaintext-secret" not in r.stderr
    assert not (tmp_path / "data").exists()
