"""Idempotency-Key on the API's write routes, SQLite store (docs/api.md
"Idempotency-Key"): a write sent again with its key gets the first answer
and changes nothing; the same key with another request is refused.  The
PostgreSQL side and failover: test_store_guard.py."""
import os
import sqlite3
import uuid

import pytest
import requests

from conftest import Daemon, SIM_CONFIG

pytestmark = pytest.mark.e2e


def _db_count(d, sql):
    con = sqlite3.connect("file:%s?mode=ro" % os.path.join(d.data_dir, "gpupool.db"), uri=True)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def _post(d, path, body, key=None):
    h = {"Idempotency-Key": key} if key is not None else {}
    return requests.post(d.url + path, json=body, headers=h, timeout=30)


SUBMIT = {"gpu_request": 1, "command": ["sleep", "600"]}


def test_a_submit_sent_twice_with_one_key_is_stored_once(daemon):
    key = uuid.uuid4().hex
    a = _post(daemon, "/api/v1/tasks", SUBMIT, key)
    b = _post(daemon, "/api/v1/tasks", SUBMIT, key)
    assert a.status_code == 201, a.text
    assert b.status_code == 201 and b.json() == a.json(), (a.text, b.text)
    assert b.headers.get("Idempotent-Replayed") == "true"
    assert "Idempotent-Replayed" not in a.headers
    # the /api/ alias is the same request
    c = _post(daemon, "/api/tasks", SUBMIT, key)
    assert c.status_code == 201 and c.json()["id"] == a.json()["id"]
    assert _db_count(daemon, "SELECT count(*) FROM tasks") == 1
    assert _db_count(daemon, "SELECT count(*) FROM idempotency") == 1
    # without a key, or with another, it is a new request
    assert _post(daemon, "/api/v1/tasks", SUBMIT).json()["id"] == a.json()["id"] + 1
    assert _post(daemon, "/api/v1/tasks", SUBMIT, key + "x").json()["id"] == a.json()["id"] + 2
    assert _db_count(daemon, "SELECT count(*) FROM tasks") == 3


def test_a_key_reused_for_another_request_is_refused_and_changes_nothing(daemon):
    key = "reuse-" + uuid.uuid4().hex
    assert _post(daemon, "/api/v1/tasks", SUBMIT, key).status_code == 201
    r = _post(daemon, "/api/v1/tasks", dict(SUBMIT, gpu_request=2), key)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "idempotency_key_reused"
    r = requests.post(daemon.url + "/api/v1/tasks/1/cancel", headers={"Idempotency-Key": key}, timeout=30)
    assert r.status_code == 422, r.text
    assert _db_count(daemon, "SELECT count(*) FROM tasks") == 1
    assert requests.get(daemon.url + "/api/v1/tasks/1", timeout=10).json()["state"] != "cancelled"


@pytest.mark.parametrize("key", ["", "x" * 256, "bad\tkey"])
def test_a_bad_key_is_refused_before_anything_runs(daemon, key):
    r = _post(daemon, "/api/v1/tasks", SUBMIT, key)
    assert r.status_code == 400, r.text
    assert "Idempotency-Key" in r.json()["error"]["message"]
    assert _db_count(daemon, "SELECT count(*) FROM tasks") == 0


def test_a_cancel_replayed_gives_its_first_answer(daemon):
    tid = _post(daemon, "/api/v1/tasks", SUBMIT).json()["id"]
    key = uuid.uuid4().hex
    a = requests.delete(daemon.url + "/api/v1/tasks/%d" % tid, headers={"Idempotency-Key": key}, timeout=30)
    assert a.status_code == 200 and (a.json()["state"] == "cancelled" or "cancelling" in a.json()["reason"]), a.text
    b = requests.delete(daemon.url + "/api/v1/tasks/%d" % tid, headers={"Idempotency-Key": key}, timeout=30)
    assert b.status_code == 200 and b.json() == a.json()
    assert b.headers.get("Idempotent-Replayed") == "true"


def test_a_not_found_answered_by_the_loop_is_kept_too(daemon):
    key = uuid.uuid4().hex
    a = requests.delete(daemon.url + "/api/v1/tasks/999", headers={"Idempotency-Key": key}, timeout=30)
    assert a.status_code == 404, a.text
    tid = _post(daemon, "/api/v1/tasks", SUBMIT).json()["id"]
    assert tid == 1
    # a 404 the loop answered is kept: the same request gets the same answer
    b = requests.delete(daemon.url + "/api/v1/tasks/999", headers={"Idempotency-Key": key}, timeout=30)
    assert b.status_code == 404 and b.headers.get("Idempotent-Replayed") == "true"


def test_keys_are_kept_across_a_restart(tmp_path):
    d = Daemon(tmp_path)
    d.start()
    key = uuid.uuid4().hex
    try:
        first = _post(d, "/api/v1/tasks", SUBMIT, key).json()
        d.stop()
        d.start()
        again = _post(d, "/api/v1/tasks", SUBMIT, key)
        assert again.status_code == 201 and again.json()["id"] == first["id"]
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert _db_count(d, "SELECT count(*) FROM tasks") == 1
    finally:
        d.stop()
