"""The test upstream itself: tests/upstream/fake-openai.c answers like an
OpenAI-compatible server and obeys its behaviour markers, so a failing
gateway test points at the gateway, not at its upstream.

Run: make BUILD=/tmp/b upstream-check
 (or FAKE_OPENAI_BIN=/tmp/b/tests/fake-openai /usr/bin/python3 -m pytest -q tests/upstream)
"""
import base64
import json
import os
import socket
import struct
import subprocess
import time

import pytest
import requests

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fake_bin():
    return os.environ.get("FAKE_OPENAI_BIN") or os.path.join(REPO, "build", "tests", "fake-openai")


class Upstream:
    def __init__(self, *args):
        b = fake_bin()
        if not os.access(b, os.X_OK):
            pytest.skip("fake-openai not built (%s)" % b)
        self.proc = subprocess.Popen([b, "--listen", "127.0.0.1:0", "--die-with-parent"] + list(args),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["ready"], line
        self.port = int(line[1])
        self.url = "http://127.0.0.1:%d" % self.port

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=5)

    def chat(self, text, **kw):
        body = {"model": kw.pop("model", "m1"), "messages": [{"role": "user", "content": text}]}
        body.update(kw)
        return requests.post(self.url + "/v1/chat/completions", json=body, timeout=10)


@pytest.fixture
def up(tmp_path):
    u = Upstream("--model", "m1", "--name", "up-a", "--context", "64", "--log", str(tmp_path / "log"))
    u.log = tmp_path / "log"
    yield u
    u.stop()


def test_chat_answers_openai_shape_with_usage_and_upstream_id(up):
    r = up.chat("one two three")
    assert r.status_code == 200
    assert r.headers["x-upstream-id"] == "up-a"
    j = r.json()
    assert j["object"] == "chat.completion"
    assert j["choices"][0]["message"] == {"role": "assistant", "content": " ".join("tok%d" % i for i in range(16))}
    assert j["choices"][0]["finish_reason"] == "stop"
    assert j["usage"] == {"prompt_tokens": 3, "completion_tokens": 16, "total_tokens": 19}


def test_max_tokens_caps_the_answer_and_tokens_marker_sets_it(up):
    assert up.chat("x", max_tokens=2).json()["usage"]["completion_tokens"] == 2
    assert up.chat("x", max_tokens=2).json()["choices"][0]["finish_reason"] == "length"
    assert up.chat("x #tokens=5").json()["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4"


def test_stream_sends_one_event_per_token_then_usage_then_done(up):
    r = requests.post(up.url + "/v1/chat/completions", stream=True, timeout=10, json={
        "model": "m1", "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "a b #tokens=4 #slow=50"}]})
    assert r.headers["content-type"] == "text/event-stream"
    t0 = time.monotonic()
    events = [ln[6:] for ln in r.iter_lines(decode_unicode=True) if ln.startswith("data: ")]
    assert time.monotonic() - t0 >= 0.12  # 3 gaps of 50 ms between 4 tokens
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "tok0 tok1 tok2 tok3"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4


def test_completions_and_embeddings_and_tokenize(up):
    r = requests.post(up.url + "/v1/completions", json={"model": "m1", "prompt": "a b c", "max_tokens": 3})
    assert r.json()["choices"][0]["text"] == "tok0 tok1 tok2"
    assert r.json()["usage"]["prompt_tokens"] == 3
    r = requests.post(up.url + "/v1/embeddings", json={"model": "m1", "input": ["a b", "c"], "dimensions": 4})
    j = r.json()
    assert [len(d["embedding"]) for d in j["data"]] == [4, 4] and j["usage"]["prompt_tokens"] == 3
    r = requests.post(up.url + "/v1/embeddings", json={"model": "m1", "input": "a b", "dimensions": 4,
                                                       "encoding_format": "base64"})
    vec = struct.unpack("<4f", base64.b64decode(r.json()["data"][0]["embedding"]))
    assert all(-0.5 <= v <= 0.5 for v in vec)
    r = requests.post(up.url + "/tokenize", json={"model": "m1", "prompt": "a b c d"})
    assert r.json()["count"] == 4 and len(r.json()["tokens"]) == 4
    assert requests.get(up.url + "/v1/models").json()["data"][0]["id"] == "m1"
    assert requests.get(up.url + "/health").status_code == 200


def test_errors_are_openai_shaped(up):
    r = up.chat("x #fail500")
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    r = up.chat("x #fail=429")
    assert r.status_code == 429
    r = up.chat("a b c", max_tokens=62)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = up.chat("x", model="other")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = requests.post(up.url + "/v1/chat/completions", data="{not json", timeout=5)
    assert r.status_code == 400 and "error" in r.json()
    with socket.create_connection(("127.0.0.1", up.port), timeout=5) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (5 << 20))
        assert s.recv(65536).startswith(b"HTTP/1.1 413 ")


def test_stall_never_answers_and_close_cuts_the_answer(up):
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(up.url + "/v1/chat/completions", timeout=0.5,
                      json={"model": "m1", "messages": [{"role": "user", "content": "#stall"}]})
    try:  # Debian's urllib3 does not enforce Content-Length: either it raises or the body is short
        r = up.chat("x #close")
        assert len(r.content) < int(r.headers["content-length"])
    except requests.exceptions.RequestException:
        pass


def test_delay_and_slow_hold_the_answer(up):
    t0 = time.monotonic()
    assert up.chat("x #delay=200").status_code == 200
    assert time.monotonic() - t0 >= 0.2
    t0 = time.monotonic()
    assert up.chat("x #slow=20 #tokens=10").status_code == 200
    assert time.monotonic() - t0 >= 0.2


def test_keep_alive_and_pipelining_answer_in_order(up):
    body = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "p #tokens=1"}]}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    with socket.create_connection(("127.0.0.1", up.port), timeout=5) as s:
        s.sendall(req * 3 + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    assert data.count(b"HTTP/1.1 200 OK") == 4
    assert data.count(b"chatcmpl-") == 3


def test_chunked_request_body_is_accepted(up):
    body = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "c #tokens=2"}]})
    r = requests.post(up.url + "/v1/chat/completions", data=iter([body[:10].encode(), body[10:].encode()]),
                      headers={"Content-Type": "application/json"}, timeout=5)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_fail_all_switch_and_log(up):
    up.chat("logged #tokens=1")
    requests.post(up.url + "/fake/fail-all")
    assert requests.get(up.url + "/health").status_code == 503
    assert up.chat("x").status_code == 503
    requests.post(up.url + "/fake/recover")
    assert up.chat("x").status_code == 200
    up.chat("长" * 200)  # 600 bytes of UTF-8: the log keeps whole characters only
    lines = [json.loads(ln) for ln in up.log.read_bytes().decode("utf-8").splitlines()]
    assert lines[0]["text"] == "logged #tokens=1" and lines[0]["upstream"] == "up-a"
    assert lines[-1]["text"] == "长" * 85


def test_fail_all_flag():
    u = Upstream("--fail-all")
    try:
        assert requests.get(u.url + "/health").status_code == 503
        assert u.chat("x").status_code == 503
    finally:
        u.stop()


def test_hold_waits_for_release(up):
    import threading
    out = {}
    t = threading.Thread(target=lambda: out.update(r=up.chat("held #hold #tokens=2")))
    t.start()
    for _ in range(100):
        if requests.get(up.url + "/fake/stats").json()["held"] == 1:
            break
        time.sleep(0.02)
    time.sleep(0.3)
    assert "r" not in out
    assert requests.post(up.url + "/fake/release").json() == {"released": 1}
    t.join(5)
    assert out["r"].status_code == 200 and out["r"].json()["usage"]["completion_tokens"] == 2


def client_bin():
    b = os.environ.get("DEEPSEEK_CLIENT_BIN") or os.path.join(REPO, "build", "examples", "deepseek-client")
    if not os.access(b, os.X_OK):
        pytest.skip("examples/deepseek-7b/client.c not built (%s)" % b)
    return b


def test_example_client_streams_and_reports_errors():
    """The walk-through's no-GPU path: examples/deepseek-7b/client.c against fake-openai."""
    u = Upstream("--model", "deepseek-7b")
    try:
        env = dict(os.environ, GPUPOOL_API=u.url + "/")
        env.pop("GPUPOOL_API_KEY", None)
        r = subprocess.run([client_bin(), "-n", "4", "Hi there"], env=env, capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "tok0 tok1 tok2 tok3\n"
        assert "[usage] prompt 2, completion 4" in r.stderr
        r = subprocess.run([client_bin(), "-s", "-p", "low", "x #tokens=2"], env=env, capture_output=True, text=True,
                           timeout=20)
        assert r.returncode == 0 and r.stdout == "tok0 tok1\n", r.stderr
        r = subprocess.run([client_bin(), "x #fail500"], env=env, capture_output=True, text=True, timeout=20)
        assert r.returncode == 1 and "HTTP 500" in r.stderr
        r = subprocess.run([client_bin(), "-m", "other", "x"], env=env, capture_output=True, text=True, timeout=20)
        assert r.returncode == 1 and "model_not_found" in r.stderr
        r = subprocess.run([client_bin(), "x #close"], env=env, capture_output=True, text=True, timeout=20)
        assert r.returncode == 1
    finally:
        u.stop()
