"""What can never run is refused, also once the pool could have grown
(issue 23): on a single machine, `join-token create` turned the 422 for
impossible requests off for good, even after the token was revoked.  A
request no node can hold waits only while a join token is live (or a lost
node may come back), and its reason says so."""
import time

import pytest

from conftest import Daemon

pytestmark = pytest.mark.e2e


def _submit(d, **kw):
    body = {"gpu_request": 1, "command": ["sleep", "30"]}
    body.update(kw)
    return d.api("POST", "/api/v1/tasks", json=body)


def test_impossible_requests_wait_only_while_a_join_token_is_live(tmp_path):
    d = Daemon(tmp_path)
    d.start()
    try:
        assert _submit(d, gpu_request=9).status_code == 422
        r = d.api("POST", "/admin/join-tokens", json={"ttl_s": 3600})
        assert r.status_code in (200, 201), r.text
        tok = r.json()["id"]
        r = _submit(d, gpu_request=9)
        assert r.status_code == 201, r.text
        waiting = r.json()["id"]
        reason = d.api("GET", "/api/v1/tasks/%d" % waiting).json()["reason"]
        assert "waits for one to join" in reason and "a join token is live" in reason, reason
        q = d.api("GET", "/api/v1/queue").json()
        rows = q["tasks"] if isinstance(q, dict) else q
        assert any("a join token is live" in t["reason"] for t in rows), q
        assert d.api("DELETE", "/admin/join-tokens/%s" % tok).status_code in (200, 204)
        r = _submit(d, gpu_request=9)
        assert r.status_code == 422, r.text
        assert "can never run here" in r.json()["error"]["message"]
        r = _submit(d, gpu_model="*A100*")
        assert r.status_code == 422, r.text
        # an expired token is not live either
        r = d.api("POST", "/admin/join-tokens", json={"ttl_s": 1})
        assert r.status_code in (200, 201), r.text
        assert _submit(d, gpu_request=9).status_code == 201
        time.sleep(1.2)
        assert _submit(d, gpu_request=9).status_code == 422
    finally:
        d.stop()
