"""Black-box tests of the inference gateway (/v1/...): the real daemon in
front of an OpenAI-like upstream (gw_upstream.py) started by the test."""
import hashlib
import json
import shutil
import socket
import subprocess
import threading
import time

import pytest
import requests

from gw_upstream import Upstream

pytestmark = pytest.mark.e2e

KEY_A, KEY_B = "key-of-dept-a", "key-of-dept-b"


def h(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def config(upstreams, limits="{max_concurrent: 100}", queue="", models_extra="", tenants="", context=4096,
           model_opts=""):
    ups = ", ".join('"%s"' % u for u in upstreams)
    return ("gpus: {backend: sim}\n"
            "gateway:\n"
            "  %s\n"
            "  limits: %s\n"
            "  models:\n"
            "    - {name: m1, context: %d, upstreams: [%s]%s}\n"
            "%s%s" % (queue or "queue_timeout_sec: 30", limits, context, ups, model_opts, models_extra, tenants))


@pytest.fixture
def up():
    u = Upstream("up1")
    yield u
    u.stop()


def session():
    s = requests.Session()
    s.trust_env = False
    return s


def chat(d, text, stream=False, headers=None, s=None, timeout=30, **extra):
    body = {"model": "m1", "messages": [{"role": "user", "content": text}], "max_tokens": 16}
    if stream:
        body["stream"] = True
    body.update(extra)
    return (s or session()).post(d.url + "/v1/chat/completions", json=body, headers=headers or {},
                                 timeout=timeout, stream=stream)


def stats(d, key=None):
    hdr = {"Authorization": "Bearer " + key} if key else {}
    return session().get(d.url + "/admin/scheduler/stats", headers=hdr, timeout=10).json()["gateway"]


def wait_for(pred, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def test_models_lists_the_configured_models(daemon_factory, up):
    d = daemon_factory(config([up.url]))
    r = session().get(d.url + "/v1/models", timeout=10)
    assert r.status_code == 200
    j = r.json()
    assert j["object"] == "list"
    assert [m["id"] for m in j["data"]] == ["m1"]
    assert r.headers["X-Gpupool-Backend"] == "sim"


def test_plain_answer_is_passed_byte_for_byte_and_usage_counted(daemon_factory, up):
    d = daemon_factory(config([up.url]))
    r = chat(d, "hi")
    assert r.status_code == 200
    assert r.headers["X-Upstream"] == "up1"  # upstream headers kept
    assert r.headers["X-Gpupool-Backend"] == "sim"  # like every answer of a daemon on simulated GPUs
    assert r.content.startswith(b'{\n "id": "chatcmpl-1"')  # its own formatting, not re-encoded
    assert r.json()["choices"][0]["message"]["content"] == "hello from up1"
    assert up.received[0]["body"]["max_tokens"] == 16
    st = stats(d)
    assert st["total_admitted"] == 1
    assert st["in_flight"] == 0
    for o in st["tenants"] + st["models"]:  # timings (test_latency_first_token_...): one measured
        timing = {k: o.pop(k) for k in ("latency_s_p50", "latency_s_p95", "ttft_s_p50", "ttft_s_p95",
                                        "tokens_per_s_p50", "tokens_per_s_p95", "timed_requests")}
        assert timing["timed_requests"] == 1 and 0 <= timing["ttft_s_p50"] <= timing["latency_s_p50"] < 10, timing
    assert st["tenants"] == [{"tenant_id": "default", "requests": 1, "in_flight": 0, "queued": 0,
                              "prompt_tokens": 11, "completion_tokens": 7, "rejected": 0}]
    assert abs(st["models"][0].pop("last_used_ms") / 1000 - time.time()) < 60  # wall clock of the request
    assert st["models"] == [{"model": "m1", "queued": 0, "in_flight": 0, "requests": 1,
                             "prompt_tokens": 11, "completion_tokens": 7, "unloaded": 0}]
    assert st["models_unloaded"] == 0


def test_tokens_of_each_request_are_billed_to_its_tenant_and_model(daemon_factory, up):
    d = daemon_factory(config([up.url]) +
                       "billing: {token_prices: [{model: \"m*\", per_1k_prompt: 1, per_1k_completion: 2}]}\n")
    for _ in range(3):
        assert chat(d, "hi").status_code == 200

    def billed():
        r = session().get(d.url + "/api/v1/usage?tenant=default&group_by=model", timeout=10)
        assert r.status_code == 200, r.text
        g = [x for x in r.json()["groups"] if x["key"] == "m1"]
        return g[0] if g and g[0]["completion_tokens"] == 21 else None

    assert wait_for(billed)
    g = billed()
    assert g["prompt_tokens"] == 33 and g["completion_tokens"] == 21
    # 33 prompt tokens at 1 per 1k and 21 completion tokens at 2 per 1k: 0.075, shown as cents
    assert g["cost"] == "0.08"


def test_tokens_counted_just_before_a_clean_stop_are_stored(daemon_factory, up):
    d = daemon_factory(config([up.url]))
    for _ in range(2):
        assert chat(d, "hi").status_code == 200
    d.stop()   # SIGTERM within the second the sums wait for
    d.start()
    r = session().get(d.url + "/api/v1/usage?tenant=default&group_by=model", timeout=10).json()
    assert [(g["key"], g["prompt_tokens"], g["completion_tokens"]) for g in r["groups"]] == [("m1", 22, 14)]


def test_stream_strips_the_usage_chunk_the_client_did_not_ask_for(daemon_factory, up):
    d = daemon_factory(config([up.url]))
    r = chat(d, "chunks:4", stream=True)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    data = [l for l in r.iter_lines() if l.startswith(b"data: ")]
    assert data[-1] == b"data: [DONE]"
    chunks = [json.loads(l[6:]) for l in data[:-1]]
    assert len(chunks) == 4
    assert all(c["choices"] for c in chunks)  # no usage-only chunk
    # the gateway asked for the usage on the way up
    assert up.received[0]["body"]["stream_options"]["include_usage"] is True


@pytest.mark.parametrize("tail", [
    b"}",                          # no stream_options: spliced into the client's text
    b"}\r\n \t",                  # whitespace after the object
    b', "stream_options": {}}',    # present without include_usage: rebuilt
    b', "stream_options": null}',
])
def test_stream_asks_the_upstream_for_usage_and_keeps_the_rest_of_the_body(daemon_factory, up, tail):
    d = daemon_factory(config([up.url]))
    raw = (b'{"model": "m1", "messages": [{"role": "user", "content": "chunks:3"}], "max_tokens": 16,'
           b' "stream": true, "user": "u\\"}", "n": 1' + tail)
    r = session().post(d.url + "/v1/chat/completions", data=raw, headers={"Content-Type": "application/json"},
                       timeout=30, stream=True)
    assert r.status_code == 200
    data = [l for l in r.iter_lines() if l.startswith(b"data: ")]
    assert data[-1] == b"data: [DONE]"
    assert all(json.loads(l[6:])["choices"] for l in data[:-1])  # the usage chunk was dropped
    got = up.received[0]["body"]
    assert got == {"model": "m1", "messages": [{"role": "user", "content": "chunks:3"}], "max_tokens": 16,
                   "stream": True, "user": 'u"}', "n": 1, "stream_options": {"include_usage": True}}


def test_stream_keeps_the_usage_chunk_when_asked(daemon_factory, up):
    d = daemon_factory(config([up.url]))
    r = chat(d, "chunks:2", stream=True, stream_options={"include_usage": True})
    data = [l for l in r.iter_lines() if l.startswith(b"data: ")]
    last = json.loads(data[-2][6:])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 2


def test_stream_is_passed_on_as_it_arrives(daemon_factory, up):
    d = daemon_factory(config([up.url]))
    t0 = time.monotonic()
    r = chat(d, "chunks:5 gap:0.3", stream=True)
    first = None
    for line in r.iter_lines():
        if line.startswith(b"data: ") and first is None:
            first = time.monotonic() - t0
    total = time.monotonic() - t0
    assert total >= 1.2
    assert first is not None and first < 0.6, (first, total)


def test_context_length_exceeded_is_refused_before_the_upstream(daemon_factory, up):
    d = daemon_factory(config([up.url], context=100))
    r = chat(d, "x" * 400, max_tokens=50)  # ~100 prompt tokens + 50
    assert r.status_code == 400
    e = r.json()["error"]
    assert e["code"] == "context_length_exceeded"
    assert e["type"] == "invalid_request_error"
    assert "maximum context length is 100 tokens" in e["message"]
    assert up.received == []


# Exact prompt tokens from the upstream's /tokenize (gw_upstream counts a
# token per word; the gateway estimates ~4 bytes a token + 4 per message + 3).
# context 100: "x" * 400 is one word but an estimate of 107.

def test_prompt_far_from_the_context_never_asks_tokenize(daemon_factory):
    u = Upstream("up1", tokenize="on")
    try:
        d = daemon_factory(config([u.url], context=100))
        assert chat(d, "hi there").status_code == 200  # estimate 4+2+3 + 16: far below 80
        assert u.tokenized == []
        assert stats(d)["tokenize_calls"] == 0
    finally:
        u.stop()


def test_estimate_over_the_context_but_exact_count_fits_is_forwarded(daemon_factory):
    u = Upstream("up1", tokenize="on")
    try:
        d = daemon_factory(config([u.url], context=100))
        r = chat(d, "x" * 400, max_tokens=50)  # estimate 107 + 50, exact 1 + 50
        assert r.status_code == 200, r.text
        assert len(u.tokenized) == 1
        assert u.tokenized[0]["body"] == {"model": "m1", "messages": [{"role": "user", "content": "x" * 400}]}
        assert len(u.received) == 1 and u.received[0]["body"]["max_tokens"] == 50  # forwarded as sent
        st = stats(d)
        assert st["tokenize_calls"] == 1 and st["tokenize_fallbacks"] == 0 and st["context_length_errors"] == 0
    finally:
        u.stop()


def test_exact_count_over_the_context_is_refused_with_the_exact_numbers(daemon_factory):
    u = Upstream("up1", tokenize="on")
    try:
        d = daemon_factory(config([u.url], context=100))
        # 90 words in 180 bytes: estimate 4+45+3 = 52, + 30 = 82 fits; exact 90 + 30 = 120 does not
        r = chat(d, "a " * 90, max_tokens=30)
        assert r.status_code == 400, r.text
        e = r.json()["error"]
        assert e["code"] == "context_length_exceeded" and e["type"] == "invalid_request_error"
        assert "maximum context length is 100 tokens" in e["message"]
        assert "you requested 120 tokens (90 in the messages, 30 in the completion)" in e["message"]
        assert u.received == []
        assert stats(d)["context_length_errors"] == 1
        # without max_tokens the estimate alone (52) is far from the context: not asked, forwarded
        r = chat(d, "a " * 90, max_tokens=None)
        assert r.status_code == 200, r.text
        assert len(u.tokenized) == 1
    finally:
        u.stop()


def test_upstream_without_tokenize_is_remembered_and_the_estimate_used(daemon_factory):
    u = Upstream("up1", tokenize="off")
    try:
        d = daemon_factory(config([u.url], context=100))
        for _ in range(2):
            r = chat(d, "x" * 400, max_tokens=50)
            assert r.status_code == 400
            assert "you requested 157 tokens (107 in the messages, 50 in the completion)" in r.json()["error"]["message"]
        assert len(u.tokenized) == 1  # the 404 is remembered: asked once
        r = chat(d, "x" * 300, max_tokens=10)  # estimate 82 + 10: near, fits
        assert r.status_code == 200
        assert len(u.tokenized) == 1
        assert u.received and stats(d)["tokenize_fallbacks"] == 3
    finally:
        u.stop()


def test_tokenize_off_in_the_config_uses_the_estimate(daemon_factory):
    u = Upstream("up1", tokenize="on")
    try:
        d = daemon_factory(config([u.url], context=100, model_opts=", tokenize: off"))
        assert chat(d, "x" * 400, max_tokens=50).status_code == 400
        assert chat(d, "x" * 300, max_tokens=10).status_code == 200
        assert u.tokenized == []
    finally:
        u.stop()


def test_stalled_tokenize_falls_back_to_the_estimate_within_the_bound(daemon_factory):
    u = Upstream("up1", tokenize="stall", stall_sec=5)
    try:
        d = daemon_factory(config([u.url], context=100,
                                  queue="queue_timeout_sec: 30\n  tokenize_timeout_ms: 300\n  upstream_down_sec: 1"))
        t0 = time.monotonic()
        r = chat(d, "x" * 400, max_tokens=50)  # the estimate refuses once the count does not come
        dt = time.monotonic() - t0
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert 0.25 <= dt < 2.0, dt
        t0 = time.monotonic()
        r = chat(d, "x" * 300, max_tokens=10)  # the estimate lets it through, without waiting again:
        dt = time.monotonic() - t0             # a stalled /tokenize is not asked for upstream_down_sec
        assert r.status_code == 200
        assert dt < 0.25, dt
        assert len(u.tokenized) == 1
        assert stats(d)["tokenize_fallbacks"] == 2
        time.sleep(1.2)  # upstream_down_sec (1 here) later it is asked again
        t0 = time.monotonic()
        assert chat(d, "x" * 300, max_tokens=10).status_code == 200
        assert 0.25 <= time.monotonic() - t0 < 2.0
        assert len(u.tokenized) == 2  # a timeout is not taken for "no /tokenize"
    finally:
        u.stop()


def test_unknown_model_is_404_in_openai_shape(daemon_factory, up):
    d = daemon_factory(config([up.url]))
    r = session().post(d.url + "/v1/chat/completions", json={"model": "nope", "messages": []}, timeout=10)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"


def test_full_queue_answers_429_with_rate_limit_headers(daemon_factory, up):
    d = daemon_factory(config([up.url], limits="{max_concurrent: 1, max_rps: 1000}", queue="max_queue: 1"))
    res = {}
    ta = threading.Thread(target=lambda: res.setdefault("a", chat(d, "sleep:1.5")))
    ta.start()
    assert wait_for(lambda: len(up.received) == 1)
    tb = threading.Thread(target=lambda: res.setdefault("b", chat(d, "second")))
    tb.start()
    assert wait_for(lambda: stats(d)["total_queued_now"] == 1)
    r = chat(d, "third")
    assert r.status_code == 429
    e = r.json()["error"]
    assert e["code"] == "rate_limit_exceeded"
    assert int(r.headers["retry-after"]) >= 1
    assert int(r.headers["retry-after-ms"]) >= 1
    assert "x-ratelimit-limit-requests" in r.headers
    assert "x-ratelimit-remaining-requests" in r.headers
    assert "x-ratelimit-reset-requests" in r.headers
    ta.join()
    tb.join()
    assert res["a"].status_code == 200 and res["b"].status_code == 200
    assert stats(d)["rejected_total"] == 1


def test_wait_over_queue_timeout_answers_429(daemon_factory, up):
    d = daemon_factory(config([up.url], limits="{max_concurrent: 1}", queue="queue_timeout_sec: 1"))
    ta = threading.Thread(target=lambda: chat(d, "sleep:2.5"))
    ta.start()
    assert wait_for(lambda: len(up.received) == 1)
    t0 = time.monotonic()
    r = chat(d, "late")
    waited = time.monotonic() - t0
    assert r.status_code == 429
    assert 0.8 <= waited <= 2.2
    assert r.headers.get("retry-after")
    ta.join()
    assert stats(d)["timeouts_total"] == 1


def test_p0_goes_first_then_tiers_in_order_under_saturation(daemon_factory, up):
    d = daemon_factory(config([up.url], limits="{max_concurrent: 1}"))
    ta = threading.Thread(target=lambda: chat(d, "sleep:1.0 blocker"))
    ta.start()
    assert wait_for(lambda: len(up.received) == 1)
    threads = []
    for tier in (9, 7, 5, 0):
        t = threading.Thread(target=lambda tier=tier: chat(d, "tier%d" % tier, headers={"X-Priority": str(tier)}))
        t.start()
        threads.append(t)
        assert wait_for(lambda: stats(d)["total_queued_now"] == len(threads))
    q = session().get(d.url + "/admin/scheduler/queues?top=5", timeout=10).json()["gateway_queues"]
    assert [x["depth"] for x in q if x["priority"] in (0, 5, 7, 9)] == [1, 1, 1, 1]
    ta.join()
    for t in threads:
        t.join()
    order = [x for x in up.texts() if x.startswith("tier")]
    assert order[0] == "tier0"
    assert order[1] == "tier5"  # weights 8 > 2 > 1: one each, most weighted first
    assert set(order) == {"tier0", "tier5", "tier7", "tier9"}


def test_x_priority_cannot_be_more_urgent_than_the_key_allows(daemon_factory, up):
    tenants = ("auth: {admin_keys: [\"%s\"]}\n"
               "tenants:\n"
               "  - {id: dept_a, keys: [\"%s\"], max_priority: 3, default_priority: 5}\n" % (h("admin"), h(KEY_A)))
    d = daemon_factory(config([up.url], tenants=tenants), key="admin")
    r = chat(d, "hi", headers={"Authorization": "Bearer " + KEY_A, "X-Priority": "0"})
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "permission_error"
    r = chat(d, "hi", headers={"Authorization": "Bearer " + KEY_A, "X-Priority": "low"})
    assert r.status_code == 200
    r = chat(d, "hi", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"


def test_tenant_max_concurrent_holds_only_that_tenant(daemon_factory, up):
    tenants = ("auth: {admin_keys: [\"%s\"]}\n"
               "tenants:\n"
               "  - {id: dept_a, keys: [\"%s\"], gateway: {max_concurrent: 1, rpm: 600, tpm: 100000}}\n"
               "  - {id: dept_b, keys: [\"%s\"]}\n" % (h("admin"), h(KEY_A), h(KEY_B)))
    d = daemon_factory(config([up.url], tenants=tenants), key="admin")
    A = {"Authorization": "Bearer " + KEY_A}
    B = {"Authorization": "Bearer " + KEY_B}
    done = {}

    def run(name, hdr):
        chat(d, "sleep:0.8 " + name, headers=hdr)
        done[name] = time.monotonic()

    t0 = time.monotonic()
    ts = [threading.Thread(target=run, args=(n, A if n.startswith("a") else B)) for n in ("a1", "a2", "b1")]
    for t in ts:
        t.start()
        time.sleep(0.05)
    for t in ts:
        t.join()
    assert done["b1"] - t0 < 1.4  # dept_b was not held back by dept_a's limit
    assert done["a2"] - t0 >= 1.5  # dept_a's second waited for its first
    t = session().get(d.url + "/api/v1/tenants/dept_a", headers=A, timeout=10).json()
    assert t["gateway"] == {"max_concurrent": 1, "rpm": 600, "tpm": 100000}
    assert t["gateway_usage"]["requests"] == 2
    assert t["gateway_usage"]["prompt_tokens"] == 22 and t["gateway_usage"]["completion_tokens"] == 14


def test_tenant_rpm_limit_answers_429_after_the_queue_timeout(daemon_factory, up):
    tenants = ("auth: {admin_keys: [\"%s\"]}\n"
               "tenants:\n"
               "  - {id: dept_a, keys: [\"%s\"], gateway: {rpm: 2}}\n" % (h("admin"), h(KEY_A)))
    d = daemon_factory(config([up.url], tenants=tenants, queue="queue_timeout_sec: 1"), key="admin")
    A = {"Authorization": "Bearer " + KEY_A}
    # every answer tells the client where it stands, as OpenAI's API does
    r = chat(d, "1", headers=A)
    assert r.status_code == 200
    assert r.headers["x-ratelimit-limit-requests"] == "2"
    assert r.headers["x-ratelimit-remaining-requests"] == "1"
    assert "x-ratelimit-reset-requests" in r.headers and "retry-after" not in r.headers
    r = chat(d, "2", headers=A)
    assert r.status_code == 200 and r.headers["x-ratelimit-remaining-requests"] == "0"
    r = chat(d, "3", headers=A)
    assert r.status_code == 429
    assert r.headers["x-ratelimit-limit-requests"] == "2"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    assert int(r.headers["retry-after-ms"]) > 1000


def test_client_hang_up_while_queued_frees_its_place(daemon_factory, up):
    d = daemon_factory(config([up.url], limits="{max_concurrent: 1}", queue="max_queue: 1"))
    ta = threading.Thread(target=lambda: chat(d, "sleep:1.5"))
    ta.start()
    assert wait_for(lambda: len(up.received) == 1)
    body = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "gone"}]}).encode()
    s = socket.create_connection(("127.0.0.1", d.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    assert wait_for(lambda: stats(d)["total_queued_now"] == 1)
    s.close()
    assert wait_for(lambda: stats(d)["total_queued_now"] == 0, timeout=2)
    assert stats(d)["client_gone_while_queued"] == 1
    r = chat(d, "after")  # the place is free again: queued, not refused
    assert r.status_code == 200
    ta.join()
    assert "gone" not in up.texts()


def test_failed_upstream_is_skipped_and_the_request_retried(daemon_factory, up):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_url = "http://127.0.0.1:%d" % dead.getsockname()[1]
    dead.close()  # nothing listens there
    d = daemon_factory(config([dead_url, up.url]))
    for i in range(6):
        r = chat(d, "r%d" % i)
        assert r.status_code == 200, r.text
    st = stats(d)
    ups = {u["url"]: u for u in st["upstreams"]}
    assert ups[dead_url]["failures"] >= 1
    assert ups[dead_url]["healthy"] is False
    assert ups[up.url]["requests"] == 6


def test_all_upstreams_down_is_502_in_openai_shape(daemon_factory):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    url = "http://127.0.0.1:%d" % dead.getsockname()[1]
    dead.close()
    d = daemon_factory(config([url]))
    r = chat(d, "x")
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"


def test_upstream_5xx_goes_to_another_upstream(daemon_factory, up):
    up2 = Upstream("up2")
    try:
        d = daemon_factory(config([up.url, up2.url]))
        # error:503 fails on whichever upstream takes it first; the retry on the other fails too
        r = chat(d, "error:503")
        assert r.status_code == 503
        assert len(up.received) + len(up2.received) == 2
    finally:
        up2.stop()


def test_embeddings_are_passed_through(daemon_factory, up):
    d = daemon_factory(config([up.url]))
    r = session().post(d.url + "/v1/embeddings", json={"model": "m1", "input": "abc"}, timeout=10)
    assert r.status_code == 200
    assert r.json()["data"][0]["embedding"] == [0.1, 0.2]
    assert up.received[0]["path"] == "/v1/embeddings"


def test_bad_gateway_config_is_refused_with_the_key(tmp_path):
    import subprocess
    from conftest import gpupool_bin
    cfg = tmp_path / "c.yaml"
    cfg.write_text("gateway:\n  models:\n    - {name: m1, upstreams: [\"ftp://x\"]}\n")
    p = subprocess.run([gpupool_bin(), "server", "--config", str(cfg), "--data-dir", str(tmp_path / "d")],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode != 0
    assert "gateway.models[0].upstreams" in p.stderr + p.stdout


def test_silent_upstream_is_cut_after_idle_timeout(daemon_factory, up):
    d = daemon_factory(config([up.url], queue="queue_timeout_sec: 30\n  idle_timeout_sec: 1"))
    t0 = time.monotonic()
    r = chat(d, "sleep:4")
    took = time.monotonic() - t0
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"
    assert 0.9 <= took < 2.5, took
    # a stream that goes quiet between chunks is cut too: the client sees its end early
    t0 = time.monotonic()
    r = chat(d, "chunks:3 gap:3", stream=True)
    with pytest.raises(requests.RequestException):
        for _ in r.iter_lines():
            pass
    assert time.monotonic() - t0 < 2.5


def kill_marked(marker):
    """Kill the model servers whose command line carries marker (they outlive the daemon)."""
    import os
    import signal as sig
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read():
                    os.kill(int(pid), sig.SIGKILL)
        except OSError:
            pass


def test_autoscale_starts_a_replica_when_requests_wait(daemon_factory, tmp_path):
    import os
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gw_serve_main.py")
    marker = "marker-%s" % tmp_path.name
    cfg = ("gpus: {backend: sim}\n"
           "gateway:\n"
           "  limits: {max_concurrent: 1}\n"
           "  models:\n"
           "    - name: m1\n"
           "      serve: {command: [\"/usr/bin/python3\", \"%s\", \"{port}\", \"%s\"], gpus: 1, memory_mb: 2000,\n"
           "              autoscale: {min: 1, max: 2, queue_depth: 1}}\n" % (script, marker))
    d = daemon_factory(cfg)
    try:
        def running(name):
            ts = session().get(d.url + "/api/v1/tasks?state=running", timeout=10).json()["tasks"]
            return [t for t in ts if t["name"] == name]
        assert wait_for(lambda: chat(d, "hi").status_code == 200, timeout=20)
        assert running("serve:m1:1") == []  # min 1
        ts = [threading.Thread(target=lambda: chat(d, "sleep:1.5")) for _ in range(4)]
        for t in ts:
            t.start()
        assert wait_for(lambda: len(running("serve:m1:1")) == 1, timeout=15)
        for t in ts:
            t.join()
    finally:
        d.stop()
        kill_marked(marker)


def test_served_model_runs_as_a_task_becomes_an_upstream_and_is_restarted(daemon_factory):
    import os
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gw_serve_main.py")
    cfg = ("gpus: {backend: sim}\n"
           "gateway:\n"
           "  models:\n"
           "    - name: m1\n"
           "      serve: {command: [\"/usr/bin/python3\", \"%s\", \"{port}\"], gpus: 1, memory_mb: 2000,\n"
           "              port: auto, ready: \"/health\"}\n" % script)
    d = daemon_factory(cfg)
    # a task of the tenant gpupool runs it
    def serve_task():
        ts = session().get(d.url + "/api/v1/tasks?state=running", timeout=10).json()["tasks"]
        return [t for t in ts if t["name"] == "serve:m1:0"]
    assert wait_for(lambda: len(serve_task()) == 1, timeout=20)
    t = serve_task()[0]
    assert t["tenant_id"] == "gpupool" and t["gpu_request"] == 1 and t["gpus"]
    # ready -> an upstream: requests are served by it
    assert wait_for(lambda: chat(d, "hi").status_code == 200, timeout=20)
    first = chat(d, "hi").headers["X-Upstream"]
    assert first.startswith("served-")
    # it crashes: its task ends, a new one starts, and the model answers again
    chat(d, "die:3")
    assert wait_for(lambda: any(x["id"] != t["id"] for x in serve_task()), timeout=30)
    assert wait_for(lambda: chat(d, "again").status_code == 200, timeout=30)
    second = chat(d, "again").headers["X-Upstream"]
    assert second != first
    # model servers outlive the daemon (like every task); this test's one goes with it
    d.stop()
    os.kill(int(second.split("-")[1]), 9)


def test_metrics_and_monitor_snapshot_cover_the_gateway(daemon_factory, up):
    d = daemon_factory(config([up.url]))
    assert chat(d, "hi").status_code == 200
    text = session().get(d.url + "/metrics", timeout=10).text
    assert "gpupool_gateway_configured 1" in text
    assert 'gpupool_gateway_requests_total{model="m1"} 1' in text
    assert 'gpupool_gateway_tokens_total{model="m1",kind="prompt"} 11' in text
    assert 'gpupool_gateway_tokens_total{model="m1",kind="completion"} 7' in text
    assert 'gpupool_gateway_upstream_up{model="m1",url="%s"} 1' % up.url in text
    assert 'gpupool_gateway_queue_requests{priority="0"} 0' in text
    snap = session().get(d.url + "/api/v1/monitor/metrics", timeout=10).json()
    assert snap["gateway"]["configured"] is True
    assert snap["gateway"]["total_admitted"] == 1


def prom_samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


@pytest.mark.timing  # real seconds against the upstream's sleeps: the sanitizer builds are slower (p95 0.905 s seen)
def test_latency_first_token_and_tokens_per_second_per_model_and_tenant(daemon_factory, up):
    tenants = ("auth: {admin_keys: [\"%s\"]}\n"
               "tenants:\n"
               "  - {id: dept_a, keys: [\"%s\"]}\n"
               "  - {id: dept_b, keys: [\"%s\"]}\n" % (h("admin"), h(KEY_A), h(KEY_B)))
    d = daemon_factory(config([up.url], tenants=tenants), key="admin")
    A = {"Authorization": "Bearer " + KEY_A}
    B = {"Authorization": "Bearer " + KEY_B}
    # dept_a: whole answers after 0.3 s (7 completion tokens each)
    for i in range(4):
        assert chat(d, "sleep:0.3 a%d" % i, headers=A).status_code == 200
    # an upstream error is not an answer: not timed
    assert chat(d, "error:500", headers=A).status_code >= 500
    # dept_b: streamed, first chunk after 0.2 s, then 5 chunks 0.1 s apart (5 completion tokens)
    for i in range(3):
        r = chat(d, "sleep:0.2 chunks:5 gap:0.1 b%d" % i, stream=True, headers=B)
        assert r.status_code == 200
        assert b"[DONE]" in r.content
    g = stats(d, key="admin")
    ten = {t["tenant_id"]: t for t in g["tenants"]}
    a, b = ten["dept_a"], ten["dept_b"]
    assert a["timed_requests"] == 4 and b["timed_requests"] == 3
    for q in ("p50", "p95"):
        assert 0.29 <= a["latency_s_" + q] <= 0.45, a
        assert 0.29 <= a["ttft_s_" + q] <= 0.45, a
        assert 7 / 0.45 <= a["tokens_per_s_" + q] <= 7 / 0.29, a
        assert 0.69 <= b["latency_s_" + q] <= 0.9, b
        assert 0.19 <= b["ttft_s_" + q] <= 0.35, b
        # decoding rate: 5 tokens from the first byte to the end (5 gaps of 0.1 s)
        assert 5 / 0.6 <= b["tokens_per_s_" + q] <= 5 / 0.49, b
    m = {x["model"]: x for x in g["models"]}["m1"]
    assert m["timed_requests"] == 7
    assert 0.29 <= m["latency_s_p50"] <= 0.45, m  # 4 of 7 near 0.3 s (a histogram bucket wide)
    assert 0.69 <= m["latency_s_p95"] <= 0.9, m
    assert 0.19 <= m["ttft_s_p50"] <= 0.45, m
    # the same in /metrics: histograms by model and by tenant
    text = session().get(d.url + "/metrics", headers={"Authorization": "Bearer admin"}, timeout=10).text
    p = subprocess.run([shutil.which("promtool") or "promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    s = prom_samples(text)
    assert s['gpupool_gateway_request_duration_seconds_count{model="m1"}'] == 7
    assert s['gpupool_gateway_request_duration_seconds_bucket{model="m1",le="0.25"}'] == 0
    assert s['gpupool_gateway_request_duration_seconds_bucket{model="m1",le="0.5"}'] == 4
    assert s['gpupool_gateway_request_duration_seconds_bucket{model="m1",le="+Inf"}'] == 7
    assert s['gpupool_gateway_tenant_request_duration_seconds_count{tenant="dept_a"}'] == 4
    assert s['gpupool_gateway_tenant_request_duration_seconds_bucket{tenant="dept_b",le="0.5"}'] == 0
    assert s['gpupool_gateway_tenant_request_duration_seconds_bucket{tenant="dept_b",le="1"}'] == 3
    assert 0.69 * 3 <= s['gpupool_gateway_tenant_request_duration_seconds_sum{tenant="dept_b"}'] <= 0.9 * 3
    assert s['gpupool_gateway_tenant_time_to_first_token_seconds_bucket{tenant="dept_b",le="0.1"}'] == 0
    assert s['gpupool_gateway_tenant_time_to_first_token_seconds_bucket{tenant="dept_b",le="0.5"}'] == 3
    assert s['gpupool_gateway_tenant_generation_tokens_per_second_bucket{tenant="dept_b",le="5"}'] == 0
    assert s['gpupool_gateway_tenant_generation_tokens_per_second_bucket{tenant="dept_b",le="10"}'] <= 3
    assert s['gpupool_gateway_tenant_generation_tokens_per_second_bucket{tenant="dept_b",le="25"}'] == 3
    assert s['gpupool_gateway_generation_tokens_per_second_count{model="m1"}'] == 7
