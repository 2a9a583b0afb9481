"""Metering and billing against the real daemon (issue 7, docs/billing.md).

Prices are chosen so figures are easy to check: 36000 per GPU-hour is one
cent per GPU-millisecond, so an invoice's total in cents is its billed
GPU-milliseconds.  The kill -9 test reads the SQLite database directly:
every run is billed by contiguous segments from its start to its end,
exactly once, however often the daemon was killed in between.
"""
import calendar
import csv
import hashlib
import io
import random
import sqlite3
import time

import pytest
import requests

from apiutil import kill9, reap_supervisors, restart, wait_for  # noqa: F401 (reap_supervisors: autouse)

pytestmark = pytest.mark.e2e

ADMIN, ALPHA, BETA = "admin-secret", "alpha-secret", "beta-secret"


def h(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


BASE = """
gpus: {backend: sim}
auth: {admin_keys: ["%s"]}
tenants:
  - {id: alpha, keys: ["%s"], max_priority: 0, default_priority: 5}
  - {id: beta, kind: external, keys: ["%s"], max_priority: 0, default_priority: 5}
""" % (h(ADMIN), h(ALPHA), h(BETA))

BILLING = """
billing:
  currency: EUR
  min_billing_sec: 2
  enforce_balance: %s
  prices: [{gpu_model: "*", per_gpu_hour: %s}]
  token_prices: [{model: "*", per_1k_tokens: 1}]
"""


def config(enforce=False, price="36000"):
    return BASE + BILLING % ("true" if enforce else "false", price)


def call(d, method, path, key=ADMIN, **kw):
    headers = kw.pop("headers", {})
    if key:
        headers["Authorization"] = "Bearer " + key
    kw.setdefault("timeout", 20)
    return requests.request(method, d.url + path, headers=headers, **kw)


def ms(ts):
    """RFC 3339 with milliseconds ("...T10:00:00.123Z") to epoch ms."""
    base, frac = ts.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) * 1000 + int(frac[:3].ljust(3, "0"))


def hold(d, key, seconds, gpus=1):
    """A lease of whole GPUs held for `seconds`, then released; the final task."""
    r = call(d, "POST", "/api/v1/tasks", key, json={"gpu_request": gpus, "lease_ttl_s": 600})
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["state"] == "running", t
    time.sleep(seconds)
    r = call(d, "POST", "/api/v1/tasks/%d/release" % t["id"], key, json={})
    assert r.status_code == 200, r.text
    return r.json()


def hours_text(gpu_ms):
    """GPU-hours as the API writes them: 6 decimals, rounded down, no trailing zeros."""
    micro = gpu_ms * 10 // 36
    text = "%d.%06d" % (micro // 10**6, micro % 10**6)
    return text.rstrip("0").rstrip(".")


def run_ms(t):
    return ms(t["finished_at"]) - ms(t["started_at"])


@pytest.fixture
def d(daemon_factory):
    return daemon_factory(config(), key=ADMIN)


def test_usage_and_invoice_figures_follow_the_price_list(d):
    t1 = hold(d, ALPHA, 2.3)               # longer than the minimum: billed as run
    t2 = hold(d, ALPHA, 0.2, gpus=2)       # shorter: billed 2 s on each of 2 GPUs
    used = run_ms(t1) + 2 * run_ms(t2)
    billed = run_ms(t1) + 2 * 2000
    r = call(d, "GET", "/api/v1/usage?group_by=task", ALPHA)
    assert r.status_code == 200, r.text
    u = r.json()
    assert u["tenant_id"] == "alpha" and u["currency"] == "EUR"
    by_task = {g["key"]: g for g in u["groups"]}
    assert by_task[str(t1["id"])]["gpu_ms"] == run_ms(t1)
    assert by_task[str(t2["id"])]["gpu_ms"] == 2 * run_ms(t2)
    assert u["total"]["gpu_ms"] == used
    assert u["total"]["cost_cents"] == used          # list price: one cent per GPU-ms
    r = call(d, "GET", "/api/v1/usage?group_by=model", ALPHA)
    assert [g["key"] for g in r.json()["groups"]] == ["NVIDIA GeForce RTX 4090"]
    inv = call(d, "GET", "/api/v1/invoices", ALPHA).json()
    assert inv["status"] == "open" and inv["tenant_id"] == "alpha"
    gpu_lines = [l for l in inv["lines"] if l["kind"] == "gpu"]
    assert len(gpu_lines) == 1
    assert gpu_lines[0]["gpu_ms"] == used
    assert gpu_lines[0]["billed_gpu_ms"] == billed
    assert gpu_lines[0]["billed_gpu_hours"] == hours_text(billed)
    assert inv["total_cents"] == billed
    assert inv["total"] == "%d.%02d" % (billed // 100, billed % 100)
    assert inv["tasks"] == 2
    # the tenant page's figures
    t = call(d, "GET", "/api/v1/tenants/alpha", ALPHA).json()
    assert t["billing"]["month_to_date_cents"] == billed
    assert t["billing"]["balance_cents"] == -billed


def test_csv_answers_carry_the_same_figures(d):
    hold(d, ALPHA, 0.5)
    j = call(d, "GET", "/api/v1/invoices?tenant=alpha").json()
    r = call(d, "GET", "/api/v1/invoices?tenant=alpha", headers={"Accept": "text/csv"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert rows[-1]["kind"] == "total" and rows[-1]["amount"] == j["total"]
    assert rows[0]["kind"] == "gpu" and rows[0]["name"] == "NVIDIA GeForce RTX 4090"
    r = call(d, "GET", "/api/v1/usage?tenant=alpha&group_by=day", headers={"Accept": "text/csv"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    uj = call(d, "GET", "/api/v1/usage?tenant=alpha&group_by=day").json()
    assert len(rows) == len(uj["groups"]) == 1
    assert rows[0]["day"] == uj["groups"][0]["key"]
    assert rows[0]["cost"] == uj["groups"][0]["cost"]


def test_a_tenant_sees_only_its_own_usage_and_invoices(d):
    hold(d, ALPHA, 0.1)
    hold(d, BETA, 0.1)
    for path in ["/api/v1/usage?tenant=beta", "/api/v1/invoices?tenant=beta", "/api/v1/usage?tenant=nobody",
                 "/api/v1/usage?tenant=a%20b"]:
        assert call(d, "GET", path, ALPHA).status_code == 404, path
    # admin: any tenant id, also one only named by tasks (none here: no usage)
    assert call(d, "GET", "/api/v1/usage?tenant=nobody").json()["groups"] == []
    mine = call(d, "GET", "/api/v1/usage?group_by=task", ALPHA).json()
    everyone = call(d, "GET", "/api/v1/usage?group_by=task").json()
    assert len(mine["groups"]) == 1 and len(everyone["groups"]) == 2
    assert call(d, "GET", "/api/v1/invoices").status_code == 400          # admin: which tenant?
    assert call(d, "GET", "/api/v1/invoices?tenant=beta").status_code == 200
    assert call(d, "POST", "/admin/tenants/alpha/credit", ALPHA, json={"amount": "5"}).status_code == 403
    assert call(d, "GET", "/api/v1/usage", None).status_code == 401
    for bad in ["/api/v1/invoices?month=2026-13", "/api/v1/usage?group_by=week", "/api/v1/usage?from=yesterday"]:
        r = call(d, "GET", bad, ALPHA)
        assert r.status_code == 400, (bad, r.text)


def test_credit_then_402_at_zero_and_running_work_is_not_stopped(daemon_factory):
    d = daemon_factory(config(enforce=True), key=ADMIN)
    body = {"gpu_request": 1, "lease_ttl_s": 600}
    r = call(d, "POST", "/api/v1/tasks", BETA, json=body)
    assert r.status_code == 402, r.text
    err = r.json()["error"]
    assert err["code"] == "insufficient_balance" and "credit" in err["message"]
    # internal tenants are not stopped
    assert call(d, "POST", "/api/v1/tasks", ALPHA, json=body).status_code == 201
    for bad in [{"amount": 1.5}, {"amount": "1.001"}, {}, {"amount": "1", "amount_cents": 100}, {"x": 1}]:
        assert call(d, "POST", "/admin/tenants/beta/credit", json=bad).status_code == 400, bad
    assert call(d, "POST", "/admin/tenants/nobody/credit", json={"amount": "1"}).status_code == 404
    r = call(d, "POST", "/admin/tenants/beta/credit", json={"amount": "5.00", "note": "prepaid"})
    assert r.status_code == 200, r.text
    assert r.json()["credits_cents"] == 500 and r.json()["balance_cents"] == 500
    audit = call(d, "GET", "/admin/audit").json()["audit"]
    e = [a for a in audit if a["action"] == "tenant.credit"][-1]
    assert e["target"] == "beta" and e["old"]["credits_cents"] == 0 and e["new"]["credits_cents"] == 500
    assert e["who"].startswith("admin key")
    keep = call(d, "POST", "/api/v1/tasks", BETA, json=body)
    assert keep.status_code == 201
    t = hold(d, BETA, 1.0)                 # 1 s = 1000 cents > 500: the balance goes below zero
    b = call(d, "GET", "/api/v1/tenants/beta", BETA).json()["billing"]
    assert b["balance_cents"] == 500 - max(run_ms(t), 2000)
    r = call(d, "POST", "/api/v1/tasks", BETA, json=body)
    assert r.status_code == 402
    kept = call(d, "GET", "/api/v1/tasks/%d" % keep.json()["id"], BETA).json()
    assert kept["state"] == "running"      # running work is not killed
    # the credit is stored: it survives a restart
    restart(d)
    assert call(d, "GET", "/api/v1/tenants/beta").json()["billing"]["credits_cents"] == 500


def add_past_usage(db, month_start_ms, month):
    con = sqlite3.connect(db)
    with con:
        con.execute("INSERT INTO usage (task_id, tenant, gpu_model, gpus_milli, memory_mb, start_ms, end_ms, gpu_ms,"
                    " run_start_ms, end_kind, month) VALUES (999, 'alpha', 'NVIDIA A100', 1000, 0, ?, ?, 3600000,"
                    " ?, 2, ?)", (month_start_ms + 3600000, month_start_ms + 7200000, month_start_ms + 3600000, month))
        con.execute("INSERT INTO usage_tokens (tenant, model, prompt_tokens, completion_tokens, at_ms, month)"
                    " VALUES ('alpha', 'llama-3-8b', 1500, 500, ?, ?)", (month_start_ms + 3600000, month))
    con.close()


def test_an_issued_invoice_never_changes_even_after_a_price_change(daemon_factory):
    d = daemon_factory(config(price="2"), key=ADMIN)
    d.stop()
    add_past_usage(d.data_dir + "/gpupool.db", calendar.timegm((2025, 10, 1, 0, 0, 0)) * 1000, 202510)
    restart(d)
    r1 = call(d, "GET", "/api/v1/invoices?tenant=alpha&month=2025-10")
    assert r1.status_code == 200, r1.text
    inv = r1.json()
    assert inv["status"] == "issued" and "issued_at" in inv
    assert inv["total_cents"] == 200 + 200          # 1 GPU-hour at 2.00 + 2000 tokens at 1.00 per 1k
    gpu = [x for x in inv["lines"] if x["kind"] == "gpu"][0]
    assert (gpu["gpu_model"], gpu["gpu_hours"], gpu["price_per_gpu_hour"], gpu["amount"]) == \
        ("NVIDIA A100", "1", "2", "2.00")
    again = call(d, "GET", "/api/v1/invoices?tenant=alpha&month=2025-10", ALPHA)
    assert again.content == r1.content
    # a new price list, a restart: the issued invoice stays byte for byte
    d.stop()
    d.config_text = config(price="9.5")
    d.start()
    r2 = call(d, "GET", "/api/v1/invoices?tenant=alpha&month=2025-10")
    assert r2.content == r1.content
    # ... and so does the balance it implies, while an open month follows the new prices
    assert call(d, "GET", "/api/v1/tenants/alpha").json()["billing"]["charges_cents"] == 400
    hold(d, ALPHA, 0.1)
    cur = call(d, "GET", "/api/v1/invoices?tenant=alpha").json()
    assert cur["status"] == "open"
    assert cur["lines"][0]["price_per_gpu_hour"] == "9.5"


def test_kill9_during_a_stream_of_task_ends_bills_every_run_exactly_once(daemon_factory, tmp_path):
    cfg = config() + "  record_interval_s: 1\n"
    d = daemon_factory(cfg, key=ADMIN)
    rng = random.Random(7)
    ids = []
    for rnd in range(4):
        for _ in range(12):
            secs = rng.choice([0.1, 0.3, 0.7, 1.5, 2.5])
            r = call(d, "POST", "/api/v1/tasks", ALPHA,
                     json={"command": ["sleep", str(secs)], "gpu_request": 1, "memory_mb": 1000})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
            time.sleep(rng.uniform(0.0, 0.15))
        time.sleep(rng.uniform(0.2, 1.2))
        kill9(d)
        time.sleep(rng.uniform(0.1, 0.8))  # tasks end while the daemon is dead too
        restart(d)

    def all_final():
        for tid in ids:
            t = call(d, "GET", "/api/v1/tasks/%d" % tid, ALPHA).json()
            if t["state"] in ("queued", "running"):
                return False
        return True

    wait_for(all_final, timeout=90, what="every task final")
    d.stop()
    con = sqlite3.connect(d.data_dir + "/gpupool.db")
    tasks = {row[0]: row[1:] for row in con.execute(
        "SELECT id, state, started_ms, finished_ms FROM tasks WHERE id IN (%s)" % ",".join(map(str, ids)))}
    segs = {}
    for row in con.execute("SELECT task_id, start_ms, end_ms, gpu_ms, gpus_milli, end_kind, run_start_ms FROM usage"
                           " ORDER BY task_id, start_ms, id"):
        segs.setdefault(row[0], []).append(row[1:])
    con.close()
    assert len(tasks) == len(ids)
    intervals = 0
    for tid in ids:
        state, started, finished = tasks[tid]
        assert state == "succeeded", (tid, state)
        s = segs.get(tid)
        assert s, "task %d ran but was not billed" % tid
        # one run, from its start, in segments that touch end to start: no gap, no overlap
        assert s[0][0] == started, (tid, s)
        for a, b in zip(s, s[1:]):
            assert b[0] == a[1], ("gap or overlap", tid, s)
        assert [k for (_, _, _, _, k, _) in s].count(2) == 1, ("billed as ended more than once", tid, s)
        assert s[-1][4] == 2
        share = s[0][3]                    # 1000 MB of a GPU: a share of it, the same in every segment
        assert 0 < share < 1000 and all(x[3] == share for x in s)
        assert all(x[2] == (x[1] - x[0]) * share // 1000 for x in s)
        assert sum(x[1] - x[0] for x in s) == s[-1][1] - started
        # it ends where the task ended, unless an interval segment was stored a moment after the
        # process exited and before the daemon noticed (then the final segment is empty)
        assert s[-1][1] == finished or (s[-1][1] > finished and s[-1][1] - finished < 1500), (tid, s, finished)
        intervals += len(s) - 1
    assert intervals > 0, "no task was long enough to record an interval segment"


def test_cli_usage_and_invoice(d):
    t = hold(d, ALPHA, 0.3)
    env = d.env(GPUPOOL_API_KEY=ALPHA)
    r = d.cli("usage", "--group-by", "task", env=env)
    assert r.returncode == 0, r.stderr
    assert str(t["id"]) in r.stdout and "total:" in r.stdout
    r = d.cli("usage", "--json", env=env)
    assert r.returncode == 0, r.stderr
    import json
    assert json.loads(r.stdout)["tenant_id"] == "alpha"
    r = d.cli("invoice", env=env)
    assert r.returncode == 0, r.stderr
    assert "invoice of alpha" in r.stdout and "(open)" in r.stdout
    inv = json.loads(d.cli("invoice", "--json", env=env).stdout)
    assert ("total: %s EUR" % inv["total"]) in r.stdout
    # usage errors exit 2, refusals 1
    assert d.cli("invoice", "--month", "2026-1", env=env).returncode == 2
    assert d.cli("usage", "--group-by", "week", env=env).returncode == 2
    assert d.cli("usage", "--tenant", "beta", env=env).returncode == 1
    assert d.cli("invoice", env=d.env(GPUPOOL_API_KEY=ADMIN)).returncode == 1   # admin: which tenant?
    assert d.cli("invoice", "--tenant", "alpha", env=d.env(GPUPOOL_API_KEY=ADMIN)).returncode == 0


def test_gateway_tokens_are_recorded_and_priced(d):
    body = {"tenant_id": "alpha", "model": "llama-3-8b", "prompt_tokens": 1500, "completion_tokens": 500}
    assert call(d, "POST", "/admin/usage/tokens", ALPHA, json=body).status_code == 403
    for bad in [dict(body, prompt_tokens=-1), dict(body, tenant_id="a b"), dict(body, extra=1), {}]:
        assert call(d, "POST", "/admin/usage/tokens", json=bad).status_code == 400, bad
    for _ in range(2):
        r = call(d, "POST", "/admin/usage/tokens", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["recorded"] is True
    u = call(d, "GET", "/api/v1/usage?group_by=model", ALPHA).json()
    g = [x for x in u["groups"] if x["key"] == "llama-3-8b"][0]
    assert (g["prompt_tokens"], g["completion_tokens"]) == (3000, 1000)
    assert g["cost_cents"] == 400                       # 4000 tokens at 1.00 per 1000
    inv = call(d, "GET", "/api/v1/invoices", ALPHA).json()
    line = [x for x in inv["lines"] if x["kind"] == "tokens"][0]
    assert line["model"] == "llama-3-8b" and line["amount_cents"] == 400
    assert inv["total_cents"] == 400


def test_enforce_balance_covers_the_gateway_with_402(daemon_factory):
    """billing.enforce_balance stops an external tenant's /v1 requests too (it
    stopped only its tasks), on both of the server's HTTP paths (the
    gateway's own connections and MHD's keep-alive relay), and a credit lets
    them through again within a second; internal tenants are never stopped."""
    from gw_upstream import Upstream
    u = Upstream("up1")
    try:
        gw = '\ngateway:\n  models:\n    - {name: m, upstreams: ["%s"]}\n' % u.url
        d = daemon_factory(config(enforce=True) + gw, key=ADMIN)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        r = call(d, "POST", "/v1/chat/completions", BETA, json=body)
        assert r.status_code == 402, r.text
        e = r.json()["error"]
        assert e["code"] == "insufficient_balance" and "credit" in e["message"], e
        # a second request on the same connection (MHD serves it when not the first)
        with requests.Session() as s:
            hdr = {"Authorization": "Bearer " + BETA}
            assert s.get(d.url + "/api/v1/tenants/beta", headers=hdr, timeout=10).status_code == 200
            r = s.post(d.url + "/v1/chat/completions", headers=hdr, json=body, timeout=10)
            assert r.status_code == 402, r.text
        assert len(u.received) == 0, "a request of a tenant in debt reached the upstream"
        assert call(d, "POST", "/v1/chat/completions", ALPHA, json=body).status_code == 200
        r = call(d, "POST", "/admin/tenants/beta/credit", json={"amount": "5.00"})
        assert r.status_code == 200, r.text
        wait_for(lambda: call(d, "POST", "/v1/chat/completions", BETA, json=body).status_code == 200, 5)
    finally:
        u.stop()
