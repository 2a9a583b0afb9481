"""Black-box tests of the gateway's own HTTP/1.1 front (src/gateway/front.c)
and upstream client (src/gateway/upclient.c): the real daemon over
loopback, spoken to with raw sockets where a protocol detail matters.

The front keeps a connection whose first request is for /v1 and hands any
other to libmicrohttpd; a later non-/v1 request on a /v1 connection is
relayed to it.  The upstream side is checked against a small scripted
upstream written here (RawUpstream): a thread accepting on 127.0.0.1:0 and
answering with the bytes each test gives it."""
import hashlib
import json
import socket
import struct
import threading
import time

import pytest
import requests

from gw_upstream import Upstream
from rawhttp import RawConn

pytestmark = pytest.mark.e2e

DEAD = "http://127.0.0.1:9"  # an upstream nobody asks in the tests that use it


def h(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def config(upstreams=(DEAD,), server="", gateway="", tenants=""):
    ups = ", ".join('"%s"' % u for u in upstreams)
    return ("gpus: {backend: sim}\n"
            "%s"
            "gateway:\n"
            "  queue_timeout_sec: 30\n"
            "  limits: {max_concurrent: 100}\n"
            "%s"
            "  models:\n"
            "    - {name: m1, context: 4096, upstreams: [%s]}\n"
            "%s" % (("server: {%s}\n" % server) if server else "", gateway, ups, tenants))


@pytest.fixture
def up():
    u = Upstream("up1")
    yield u
    u.stop()


def session():
    s = requests.Session()
    s.trust_env = False
    return s


def stats(d):
    return session().get(d.url + "/admin/scheduler/stats", timeout=10).json()["gateway"]


def wait_for(pred, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def chat_body(text, stream=False, **extra):
    b = {"model": "m1", "messages": [{"role": "user", "content": text}], "max_tokens": 16}
    if stream:
        b["stream"] = True
    b.update(extra)
    return json.dumps(b).encode()


def post(path, body, version="1.1", extra=b""):
    return (b"POST %s HTTP/%s\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
            % (path.encode(), version.encode(), len(body), extra, body))


def get(path, version="1.1", method="GET", extra=b""):
    return b"%s %s HTTP/%s\r\nHost: x\r\n%s\r\n" % (method.encode(), path.encode(), version.encode(), extra)


# ---------------------------------------------------------------------------
# a raw client

class Conn(RawConn):
    def closed_within(self, timeout):
        """Seconds until the server closed the connection (nothing more
        sent), or None when it stayed open that long."""
        t, got = self.ended(timeout)
        assert got == b"", "unexpected bytes %r" % got
        return t


@pytest.fixture
def conns():
    made = []

    def make(port, timeout=5.0):
        c = Conn(port, timeout=timeout)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def assert_openai_error(r, status, code, type_="invalid_request_error"):
    assert r.status == status, (r.status, r.body)
    assert r.header("Content-Type") == "application/json"
    e = r.json()["error"]
    assert e["code"] == code and e["type"] == type_ and e["message"]
    assert "param" in e


# ---------------------------------------------------------------------------
# 1. relay between the front and MHD

def test_v1_then_api_then_v1_on_one_connection_are_all_answered_in_order(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/v1/models"))
    r = c.response()
    assert r.status == 200 and [m["id"] for m in r.json()["data"]] == ["m1"]
    c.send(get("/api/v1/gpus"))  # not /v1: relayed to MHD on the same socket
    r = c.response()
    assert r.status == 200, r.body
    assert len(r.json()["gpus"]) == 4
    c.send(get("/v1/models/m1"))
    r = c.response()
    assert r.status == 200 and r.json()["id"] == "m1"
    c.send(get("/v1/models"))
    r = c.response()
    assert r.status == 200 and r.json()["object"] == "list"
    assert c.closed_within(0.3) is None  # still a keep-alive connection


def test_relayed_requests_pipelined_in_one_write_are_answered_in_order(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/v1/models") + get("/api/v1/gpus") + get("/v1/models/m1") + get("/healthz"))
    assert c.response().json()["object"] == "list"
    assert len(c.response().json()["gpus"]) == 4
    assert c.response().json()["id"] == "m1"
    assert c.response().json()["status"] == "ok"


def test_api_first_then_v1_on_one_connection_both_answered(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/api/v1/gpus"))  # MHD owns this connection from its first byte
    r = c.response()
    assert r.status == 200 and len(r.json()["gpus"]) == 4
    c.send(get("/v1/models"))
    r = c.response()
    assert r.status == 200 and [m["id"] for m in r.json()["data"]] == ["m1"]


def test_post_with_a_body_relayed_to_mhd_after_a_v1_request(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/v1/models"))
    assert c.response().status == 200
    body = json.dumps({"name": "relayed", "memory_mb": 10, "lease_ttl_s": 600}).encode()
    c.send(b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body))
    time.sleep(0.1)
    c.send(body)  # the body after its head, in a write of its own
    r = c.response()
    assert r.status == 201, r.body
    tid = r.json()["id"]
    c.send(get("/api/v1/tasks/%d" % tid))
    r = c.response()
    assert r.status == 200 and r.json()["name"] == "relayed"



def test_relayed_request_with_connection_close_ends_the_connection_after_its_answer(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/v1/models"))
    assert c.response().status == 200
    c.send(get("/api/v1/gpus", extra=b"Connection: close\r\n"))
    r = c.response()
    assert r.status == 200 and len(r.json()["gpus"]) == 4
    assert c.closed_within(2) is not None


def test_large_bodies_and_answers_go_through_the_relay_whole(daemon_factory, conns):
    # an admin key: a relayed connection is a socketpair to MHD, whose peer the kernel cannot
    # name, so a keyless root client there would be no one (and run no command)
    import hashlib
    key = b"relay-key"
    d = daemon_factory(config() + 'auth: {admin_keys: ["sha256:%s"]}\n' % hashlib.sha256(key).hexdigest(),
                       key=key.decode())
    auth = b"Authorization: Bearer " + key + b"\r\n"
    c = conns(d.port, timeout=10)
    c.send(get("/v1/models", extra=auth))
    assert c.response().status == 200
    ids = []
    for i in range(6):  # ~60 KB each: more than a socketpair holds, in one write with the next
        body = json.dumps({"name": "big%d" % i, "memory_mb": 10,
                           "command": ["/bin/true"] + [("%d" % i) * 3000] * 20}).encode()
        c.send(b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
               b"Content-Length: %d\r\n\r\n%s" % (auth, len(body), body))
        r = c.response()
        assert r.status == 201, r.body
        ids.append(r.json()["id"])
    c.send(get("/api/v1/tasks?limit=100", extra=auth) + get("/v1/models/m1", extra=auth))
    r = c.response()
    assert r.status == 200
    listed = r.body.decode()
    assert all(("%d" % i) * 3000 in listed for i in range(6)), len(r.body)  # ~360 KB back, whole
    assert c.response().json()["id"] == "m1"


# ---------------------------------------------------------------------------
# 2. pipelining

def test_three_v1_requests_in_one_write_get_three_answers_in_order(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/v1/models") + get("/v1/models/m1") + get("/v1/models/nope"))
    a, b, e = c.response(), c.response(), c.response()
    assert a.status == 200 and a.json()["object"] == "list"
    assert b.status == 200 and b.json()["id"] == "m1"
    assert e.status == 404 and e.json()["error"]["code"] == "model_not_found"
    assert c.closed_within(0.3) is None


def test_pipelined_chat_completion_is_answered_before_the_requests_behind_it(daemon_factory, conns, up):
    d = daemon_factory(config([up.url]))
    c = conns(d.port)
    c.send(get("/v1/models") + post("/v1/chat/completions", chat_body("sleep:0.3 first")) +
           get("/v1/models/m1") + post("/v1/chat/completions", chat_body("second")))
    a = c.response()
    assert a.status == 200 and a.json()["object"] == "list"
    b = c.response()
    assert b.status == 200 and b.json()["choices"][0]["message"]["content"] == "hello from up1"
    m = c.response()
    assert m.status == 200 and m.json()["id"] == "m1"
    x = c.response()
    assert x.status == 200 and x.header("X-Upstream") == "up1"
    assert up.texts() == ["sleep:0.3 first", "second"]


# ---------------------------------------------------------------------------
# 3. Expect: 100-continue

def test_expect_100_continue_gets_the_interim_line_before_the_body_is_sent(daemon_factory, conns, up):
    d = daemon_factory(config([up.url]))
    c = conns(d.port)
    body = chat_body("after continue")
    head = post("/v1/chat/completions", body, extra=b"Expect: 100-continue\r\n")[:-len(body)]
    c.send(head)
    r = c.response()  # nothing else was sent: it must come now
    assert (r.version, r.status) == ("HTTP/1.1", 100)
    assert r.headers == []
    assert up.received == []
    c.send(body)
    r = c.response()
    assert r.status == 200 and r.json()["choices"][0]["message"]["content"] == "hello from up1"
    assert up.texts() == ["after continue"]


def test_expect_100_continue_with_a_body_over_the_limit_gets_413_not_100(daemon_factory, conns):
    d = daemon_factory(config(server="max_body_bytes: 2048"))
    c = conns(d.port)
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n"
           b"Expect: 100-continue\r\n\r\n")
    r = c.response()
    assert_openai_error(r, 413, "payload_too_large")
    assert c.closed_within(2) is not None


# ---------------------------------------------------------------------------
# 4. chunked request bodies

def test_chunked_request_body_reaches_the_upstream_whole(daemon_factory, conns, up):
    d = daemon_factory(config([up.url]))
    c = conns(d.port)
    body = chat_body("a chunked body " + "x" * 300)
    pieces = [body[:7], body[7:100], body[100:101], body[101:]]
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")
    for i, p in enumerate(pieces):
        ext = b";ext=1" if i == 1 else b""
        c.send(b"%x%s\r\n%s\r\n" % (len(p), ext, p))
        time.sleep(0.05)  # in several reads
    c.send(b"0\r\nX-Trailer: t\r\n\r\n")
    r = c.response()
    assert r.status == 200, r.body
    assert len(up.received) == 1
    assert up.received[0]["body"] == json.loads(body)
    # and the connection carries the next request
    c.send(get("/v1/models"))
    assert c.response().status == 200


# ---------------------------------------------------------------------------
# 5. refused requests: 413, 431, 400, each closing the connection

def test_body_over_max_body_bytes_is_413_and_the_connection_closed(daemon_factory, conns, up):
    d = daemon_factory(config([up.url], server="max_body_bytes: 2048"))
    c = conns(d.port)
    c.send(post("/v1/chat/completions", chat_body("y" * 3000)))
    r = c.response()
    assert_openai_error(r, 413, "payload_too_large")
    assert "2048" in r.json()["error"]["message"]
    assert r.header("Connection") == "close"
    assert c.closed_within(2) is not None
    # a chunked body that grows over the limit is refused the same way
    c = conns(d.port)
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
           b"400\r\n" + b"z" * 0x400 + b"\r\n" + b"400\r\n" + b"z" * 0x400 + b"\r\n" + b"10\r\n" + b"z" * 16 + b"\r\n")
    r = c.response()
    assert_openai_error(r, 413, "payload_too_large")
    assert c.closed_within(2) is not None
    assert up.received == []
    # a body just under the limit is fine
    body = chat_body("w" * 1800)
    assert len(body) <= 2048
    c = conns(d.port)
    c.send(post("/v1/chat/completions", body))
    assert c.response().status == 200


def test_request_head_over_64k_is_431_and_the_connection_closed(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (65 * 1024) + b"\r\n\r\n")
    r = c.response()
    assert_openai_error(r, 431, "bad_request")
    assert c.closed_within(2) is not None
    # just under 64 KiB is served
    c = conns(d.port)
    c.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (60 * 1024) + b"\r\n\r\n")
    assert c.response().status == 200


@pytest.mark.parametrize("line", [b"GET /v1/models HTTP/1.1 junk", b"GET /v1/models HTTP/2.0",
                                  b"GET /v1/models  HTTP/1.1", b"GET /v1/mod\x01els HTTP/1.1"])
def test_malformed_request_line_is_400_and_the_connection_closed(daemon_factory, conns, line):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(line + b"\r\nHost: x\r\n\r\n" + get("/v1/models"))
    r = c.response()
    assert_openai_error(r, 400, "bad_request")
    assert r.header("Connection") == "close"
    assert c.closed_within(2) is not None  # the request behind it is not served


def test_v1_path_over_512_bytes_is_414_and_the_connection_closed(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/v1/models/" + "m" * 600))
    r = c.response()
    assert_openai_error(r, 414, "bad_request")
    assert c.closed_within(2) is not None
    c = conns(d.port)
    c.send(get("/v1/models?" + "q" * 600))  # the query does not count
    assert c.response().status == 200


# ---------------------------------------------------------------------------
# 6. HEAD

def test_head_v1_models_has_the_content_length_of_get_and_no_body(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/v1/models"))
    g = c.response()
    # HEAD then GET in one write: the GET's status line follows the HEAD's head directly
    c.send(get("/v1/models", method="HEAD") + get("/v1/models/m1"))
    r = c.response(head_method=True)
    assert r.status == 200
    assert int(r.header("Content-Length")) == len(g.body)
    assert r.header("Content-Type") == "application/json"
    assert c.buf.startswith(b"HTTP/1.1 ") or c.buf == b""
    n = c.response()
    assert n.status == 200 and n.json()["id"] == "m1"


# ---------------------------------------------------------------------------
# 7. HTTP/1.0

def test_http10_request_is_answered_then_the_connection_closed(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/v1/models", version="1.0"))
    r = c.response()
    assert r.status == 200 and r.json()["object"] == "list"
    assert r.framing == "length"
    assert (r.header("Connection") or "").lower() != "keep-alive"
    assert c.closed_within(2) is not None


def test_http10_with_keep_alive_stays_open_for_the_next_request(daemon_factory, conns):
    d = daemon_factory(config())
    c = conns(d.port)
    c.send(get("/v1/models", version="1.0", extra=b"Connection: keep-alive\r\n"))
    r = c.response()
    assert r.status == 200
    assert r.header("Connection").lower() == "keep-alive"
    assert r.framing == "length"
    assert c.closed_within(0.3) is None
    c.send(get("/v1/models/m1", version="1.0", extra=b"Connection: keep-alive\r\n"))
    assert c.response().json()["id"] == "m1"


def test_stream_to_http10_client_is_unframed_and_ends_with_the_close(daemon_factory, conns, up):
    d = daemon_factory(config([up.url]))
    c = conns(d.port)
    # gaps between the chunks: the answer's head goes out before its end is known
    # (a stream already whole when the client is first written to goes with a Content-Length)
    c.send(post("/v1/chat/completions", chat_body("chunks:3 gap:0.2", stream=True), version="1.0",
                extra=b"Connection: keep-alive\r\n"))
    r = c.response()
    assert r.status == 200
    assert r.header("Content-Type").startswith("text/event-stream")
    assert r.header("Transfer-Encoding") is None and r.header("Content-Length") is None
    assert r.framing == "close"  # read until the server closed
    events = [e for e in r.body.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events), r.body[:200]  # no chunk sizes in between
    assert events[-1] == b"data: [DONE]"
    assert [json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events[:-1]] == ["t0 ", "t1 ", "t2 "]


def test_request_sent_with_the_clients_close_is_answered_then_the_connection_closed(daemon_factory, conns):
    # (/v1/models is answered in the event that reads it, so this is deterministic; a request that
    # waits for an upstream is ended by a close that comes in an event of its own, by design)
    d = daemon_factory(config())
    for _ in range(3):
        c = conns(d.port)
        c.send(get("/v1/models"))
        c.s.shutdown(socket.SHUT_WR)  # the request and the client's end of sending together
        r = c.response()
        assert r.status == 200, r.body
        assert c.closed_within(1.5) is not None  # nothing more can come: the server closes too

# ---------------------------------------------------------------------------
# 8. connection timeouts

def test_idle_keep_alive_connection_is_closed_after_connection_timeout(daemon_factory, conns):
    d = daemon_factory(config(server="connection_timeout_s: 2"))
    c = conns(d.port, timeout=8)
    c.send(get("/v1/models"))
    assert c.response().status == 200
    t = c.closed_within(6)
    assert t is not None and 1.5 <= t <= 4.2, t


def test_half_a_request_head_is_cut_after_connection_timeout(daemon_factory, conns):
    d = daemon_factory(config(server="connection_timeout_s: 2"))
    a = conns(d.port, timeout=8)
    a.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")  # no blank line: the head never ends
    b = conns(d.port, timeout=8)
    b.send(b"GET /v1/mo")  # not even the whole target
    c = conns(d.port, timeout=8)  # nothing at all
    e = conns(d.port, timeout=8)
    e.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\"")  # half a body
    t0 = time.monotonic()
    for k in (a, b, c, e):
        assert k.closed_within(6) is not None
        assert time.monotonic() - t0 <= 4.5
    # a head trickled in past the timeout is cut too, though bytes keep coming
    k = conns(d.port, timeout=8)
    t0 = time.monotonic()
    k.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
    cut = None
    while cut is None and time.monotonic() - t0 < 8:
        try:
            k.send(b"X-A: b\r\n")
        except OSError:
            cut = time.monotonic() - t0
            break
        if k.closed_within(0.4) is not None:
            cut = time.monotonic() - t0
    assert cut is not None and cut <= 4.5, cut


def test_idle_connection_relayed_to_mhd_is_closed_after_connection_timeout(daemon_factory, conns):
    d = daemon_factory(config(server="connection_timeout_s: 2"))
    c = conns(d.port, timeout=8)
    c.send(get("/v1/models"))
    assert c.response().status == 200
    c.send(get("/api/v1/gpus"))
    assert c.response().status == 200
    t = c.closed_within(6)
    assert t is not None and t <= 4.5, t


def test_client_that_stops_reading_a_stream_is_cut_after_connection_timeout(daemon_factory, up):
    d = daemon_factory(config([up.url], server="connection_timeout_s: 2"))
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # little room in the kernel for what we leave
    s.settimeout(10)
    try:
        s.connect(("127.0.0.1", d.port))
        s.sendall(post("/v1/chat/completions", chat_body("chunks:60000", stream=True)))
        assert wait_for(lambda: len(up.received) == 1)
        # we read nothing: the gateway buffers up to its bound, pauses the upstream, then gives up
        assert wait_for(lambda: stats(d)["in_flight"] == 0, timeout=20)
        got = b""
        try:
            while True:
                b = s.recv(1 << 20)
                if not b:
                    break
                got += b
        except ConnectionResetError:
            pass
        assert got.startswith(b"HTTP/1.1 200 ")
        assert b"data: [DONE]" not in got  # cut, not finished
        assert b"\r\n0\r\n\r\n" not in got  # and not ended as if whole
    finally:
        s.close()


# ---------------------------------------------------------------------------
# 9. client hang-up while upstream

def test_client_hang_up_while_upstream_ends_the_request_at_once(daemon_factory, conns, up):
    d = daemon_factory(config([up.url]))
    c = conns(d.port)
    c.send(post("/v1/chat/completions", chat_body("sleep:4 slow")))
    assert wait_for(lambda: len(up.received) == 1)
    assert stats(d)["in_flight"] == 1
    t0 = time.monotonic()
    c.close()
    assert wait_for(lambda: stats(d)["in_flight"] == 0, timeout=3)
    assert time.monotonic() - t0 < 1.5  # the upstream would answer after 4 s
    # the gateway still serves
    c2 = conns(d.port)
    c2.send(post("/v1/chat/completions", chat_body("after")))
    assert c2.response().status == 200


def test_client_hang_up_mid_stream_ends_the_request_at_once(daemon_factory, conns, up):
    d = daemon_factory(config([up.url]))
    c = conns(d.port)
    c.send(post("/v1/chat/completions", chat_body("chunks:20 gap:0.2", stream=True)))
    while b"data: " not in c.buf:
        c._fill()
    assert c.buf.startswith(b"HTTP/1.1 200")
    assert stats(d)["in_flight"] == 1
    t0 = time.monotonic()
    c.close()
    assert wait_for(lambda: stats(d)["in_flight"] == 0, timeout=3)
    assert time.monotonic() - t0 < 1.0  # the stream had 3 s to go


# ---------------------------------------------------------------------------
# 10. upstream protocol cases, against a scripted raw upstream

class UpConn:
    def __init__(self, s, n):
        self.s = s
        self.n = n          # 0 for the upstream's first connection
        self.buf = b""

    def request(self):
        """(head, body) of the next request, or None when the gateway closed."""
        try:
            while b"\r\n\r\n" not in self.buf:
                b = self.s.recv(65536)
                if not b:
                    return None
                self.buf += b
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            n = 0
            for l in head.split(b"\r\n")[1:]:
                k, v = l.split(b":", 1)
                if k.strip().lower() == b"content-length":
                    n = int(v)
            while len(self.buf) < n:
                b = self.s.recv(65536)
                if not b:
                    return None
                self.buf += b
            body, self.buf = self.buf[:n], self.buf[n:]
            return head, body
        except OSError:
            return None

    def send(self, data):
        try:
            self.s.sendall(data)
        except OSError:
            pass


class RawUpstream:
    """Accepts on 127.0.0.1:0; each connection goes to serve(conn) in a
    thread of its own.  Requests served are recorded in `requests` as
    (connection number, head, body)."""

    def __init__(self, serve):
        self.serve = serve
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.url = "http://127.0.0.1:%d" % self.ls.getsockname()[1]
        self.requests = []
        self.nconns = 0
        self.lock = threading.Lock()
        self.socks = []
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self):
        while True:
            try:
                s, _ = self.ls.accept()
            except OSError:
                return
            with self.lock:
                n = self.nconns
                self.nconns += 1
                self.socks.append(s)
            threading.Thread(target=self._run, args=(UpConn(s, n),), daemon=True).start()

    def _run(self, c):
        try:
            self.serve(self, c)
        finally:
            try:
                c.s.close()
            except OSError:
                pass

    def next_request(self, c):
        r = c.request()
        if r:
            with self.lock:
                self.requests.append((c.n, r[0], r[1]))
        return r

    def stop(self):
        self.ls.close()
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass


@pytest.fixture
def raw_upstream():
    made = []

    def make(serve):
        u = RawUpstream(serve)
        made.append(u)
        return u

    yield make
    for u in made:
        u.stop()


ANSWER = json.dumps({"id": "x", "object": "chat.completion", "model": "m1",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": "raw"},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
                    indent=2).encode() + b"\n"


def plain_answer(body=ANSWER, extra=b""):
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
            % (len(body), extra, body))


def ask(d, text, conn=None, conns=None):
    c = conn or conns(d.port, timeout=10)
    c.send(post("/v1/chat/completions", chat_body(text)))
    return c.response()


def test_chunked_upstream_answer_is_passed_whole_and_byte_exact_with_a_content_length(daemon_factory, conns,
                                                                                     raw_upstream):
    def serve(u, c):
        while u.next_request(c):
            c.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Upstream: raw\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n")
            for i in range(0, len(ANSWER), 50):
                piece = ANSWER[i:i + 50]
                c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                time.sleep(0.02)  # the gateway sees the answer in many reads
            c.send(b"0\r\nX-Trailer: t\r\n\r\n")  # a trailer: still the end of this answer only

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    c = conns(d.port)
    for _ in range(2):  # and the kept upstream connection carries a second exchange
        r = ask(d, "hi", conn=c)
        assert r.status == 200
        assert r.framing == "length" and r.header("Transfer-Encoding") is None
        assert int(r.header("Content-Length")) == len(ANSWER)
        assert r.body == ANSWER
        assert r.header("X-Upstream") == "raw"
    assert u.nconns == 1


def test_upstream_100_continue_before_the_answer_is_skipped(daemon_factory, conns, raw_upstream):
    def serve(u, c):
        while u.next_request(c):
            c.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            time.sleep(0.05)
            c.send(b"HTTP/1.1 102 Processing\r\nX-Info: 1\r\n\r\n" + plain_answer())

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    c = conns(d.port)
    r = ask(d, "hi", conn=c)
    assert r.status == 200 and r.body == ANSWER
    assert c.buf == b""  # the interim answers were not passed on


def test_upstream_http10_answer_without_length_is_read_until_close(daemon_factory, conns, raw_upstream):
    def serve(u, c):
        if u.next_request(c):
            c.send(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
            for i in range(0, len(ANSWER), 64):
                c.send(ANSWER[i:i + 64])
                time.sleep(0.01)
            c.s.shutdown(socket.SHUT_WR)

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    c = conns(d.port)
    for _ in range(2):  # each on a new upstream connection
        r = ask(d, "hi", conn=c)
        assert r.status == 200
        assert r.body == ANSWER and int(r.header("Content-Length")) == len(ANSWER)
    assert u.nconns == 2


def test_upstream_http10_answer_sent_whole_with_its_close_is_not_waited_on(daemon_factory, conns, raw_upstream):
    def serve(u, c):
        if u.next_request(c):
            # head, body and the close in one go: they may reach the gateway in one event
            c.send(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + ANSWER)
            c.s.shutdown(socket.SHUT_WR)

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    c = conns(d.port)
    for i in range(5):
        t0 = time.monotonic()
        r = ask(d, "hi %d" % i, conn=c)
        assert r.status == 200 and r.body == ANSWER, (i, r.body)
        assert time.monotonic() - t0 < 2, i


def test_upstream_closing_each_kept_connection_after_answering_does_not_fail_the_next(daemon_factory, conns,
                                                                                     raw_upstream):
    def serve(u, c):
        if u.next_request(c):
            c.send(plain_answer())  # says nothing of closing (HTTP/1.1: kept), then closes
            c.s.close()

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    c = conns(d.port)
    for i in range(5):
        r = ask(d, "hi %d" % i, conn=c)
        assert r.status == 200, (i, r.body)
        assert r.body == ANSWER
    st = stats(d)
    assert st["upstream_errors"] == 0 and st["retries"] == 0


@pytest.mark.parametrize("how", ["close", "reset"])
def test_request_on_a_kept_connection_the_upstream_dropped_is_sent_again_on_a_new_one(daemon_factory, conns,
                                                                                       raw_upstream, how):
    def serve(u, c):
        if not u.next_request(c):
            return
        c.send(plain_answer())
        if c.n == 0:
            u.next_request(c)  # the next request on this kept connection: dropped unanswered
            if how == "reset":
                c.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        while u.next_request(c):
            c.send(plain_answer())

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    c = conns(d.port)
    assert ask(d, "one", conn=c).status == 200
    r = ask(d, "two", conn=c)  # sent on the kept connection, which closes without answering
    assert r.status == 200 and r.body == ANSWER
    bodies = [(n, json.loads(b)["messages"][0]["content"]) for n, _, b in u.requests]
    assert bodies == [(0, "one"), (0, "two"), (1, "two")]
    st = stats(d)
    assert st["upstream_errors"] == 0 and st["retries"] == 0  # the client never knew


@pytest.mark.parametrize("status_line", [b"HTTP/1.1 2000 OK", b"HTTX/1.1 200 OK", b"HTTP/1.1 200OK",
                                         b"garbage"])
def test_malformed_upstream_status_line_is_502_bad_gateway(daemon_factory, conns, raw_upstream, status_line):
    def serve(u, c):
        while u.next_request(c):
            c.send(status_line + b"\r\nContent-Length: 2\r\n\r\n{}")

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    r = ask(d, "hi", conns=conns)
    assert_openai_error(r, 502, "bad_gateway", "upstream_error")
    assert stats(d)["upstream_errors"] == 1


def test_upstream_head_over_64k_is_502_bad_gateway(daemon_factory, conns, raw_upstream):
    def serve(u, c):
        while u.next_request(c):
            c.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" +
                   b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 8000) for i in range(9)) +
                   b"Content-Length: 2\r\n\r\n{}")

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    r = ask(d, "hi", conns=conns)
    assert_openai_error(r, 502, "bad_gateway", "upstream_error")


def test_upstream_connection_close_answer_then_next_request_uses_a_new_connection(daemon_factory, conns,
                                                                                raw_upstream):
    def serve(u, c):
        if u.next_request(c):
            c.send(plain_answer(extra=b"Connection: close\r\n"))
            time.sleep(0.5)  # and only then closes: the gateway must not wait for it, nor reuse it

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    c = conns(d.port)
    t0 = time.monotonic()
    for i in range(2):
        r = ask(d, "n%d" % i, conn=c)
        assert r.status == 200 and r.body == ANSWER
        assert r.header("Connection") is None  # hop-by-hop: not passed on
    assert time.monotonic() - t0 < 0.9
    assert [n for n, _, _ in u.requests] == [0, 1]


def test_upstream_stream_read_until_close_reaches_the_client_chunked(daemon_factory, conns, raw_upstream):
    events = [b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {"content": "e%d" % i}, "finish_reason": None}]}).encode() + b"\n\n" for i in range(3)]

    def serve(u, c):
        if u.next_request(c):
            c.send(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
            for e in events + [b"data: [DONE]\n\n"]:
                c.send(e)
                time.sleep(0.1)
            c.s.shutdown(socket.SHUT_WR)

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    c = conns(d.port)
    c.send(post("/v1/chat/completions", chat_body("s", stream=True)))
    r = c.response()
    assert r.status == 200 and r.framing == "chunked"
    assert r.body == b"".join(events) + b"data: [DONE]\n\n"
    c.send(get("/v1/models"))  # the client's connection is kept
    assert c.response().status == 200


def test_upstream_answer_with_both_content_length_and_chunked_is_502(daemon_factory, conns, raw_upstream):
    def serve(u, c):
        while u.next_request(c):
            c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    r = ask(d, "hi", conns=conns)
    assert_openai_error(r, 502, "bad_gateway", "upstream_error")


def test_upstream_closing_mid_answer_is_502_not_a_short_answer(daemon_factory, conns, raw_upstream):
    def serve(u, c):
        while u.next_request(c):
            c.send(plain_answer()[:-10])  # Content-Length promises 10 bytes more
            c.s.shutdown(socket.SHUT_WR)
            return

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url]))
    r = ask(d, "hi", conns=conns)
    assert_openai_error(r, 502, "bad_gateway", "upstream_error")


def test_upstream_answer_over_max_response_bytes_is_502(daemon_factory, conns, raw_upstream):
    big = b"[" + b"1," * 6000 + b"1]"

    def serve(u, c):
        while u.next_request(c):
            c.send(plain_answer(big))

    u = raw_upstream(serve)
    d = daemon_factory(config([u.url], gateway="  max_response_bytes: 8192\n"))
    r = ask(d, "hi", conns=conns)
    assert_openai_error(r, 502, "bad_gateway", "upstream_error")
    assert "8192" in r.json()["error"]["message"]


# ---------------------------------------------------------------------------
# 11. API keys on the front

ADMIN, KEY_A = "admin-secret", "key-of-dept-a"


def test_v1_needs_a_valid_api_key_when_keys_are_configured(daemon_factory, conns, up):
    tenants = ("auth: {admin_keys: [\"%s\"]}\n"
               "tenants:\n"
               "  - {id: dept_a, keys: [\"%s\"]}\n" % (h(ADMIN), h(KEY_A)))
    d = daemon_factory(config([up.url], tenants=tenants), key=ADMIN)
    c = conns(d.port)
    c.send(get("/v1/models"))
    r = c.response()
    assert_openai_error(r, 401, "invalid_api_key")
    c.send(get("/v1/models", extra=b"Authorization: Bearer not-a-key\r\n"))
    r = c.response()
    assert_openai_error(r, 401, "invalid_api_key")
    c.send(get("/v1/models", extra=b"Authorization: Bearer " + KEY_A.encode() + b"\r\n"))
    r = c.response()
    assert r.status == 200 and r.json()["data"][0]["id"] == "m1"
    c.send(post("/v1/chat/completions", chat_body("keyed"),
                extra=b"Authorization: Bearer " + KEY_A.encode() + b"\r\n"))
    r = c.response()
    assert r.status == 200
    c.send(post("/v1/chat/completions", chat_body("unkeyed")))
    assert_openai_error(c.response(), 401, "invalid_api_key")
    assert up.texts() == ["keyed"]


# ---------------------------------------------------------------------------
# server.max_connections: the front's connections and MHD's count together

def test_connection_beyond_max_connections_waits_until_one_closes(daemon_factory, conns):
    d = daemon_factory(config(server="max_connections: 2, http_threads: 1"))
    time.sleep(0.3)  # the readiness probe's connection is gone
    # both hold a request in progress: not idle, so not closed to make room (test_connections.py)
    c1 = conns(d.port)
    c1.send(b"GET /v1/models HTTP/1.1\r\n")  # the front's
    c2 = conns(d.port)
    c2.send(b"GET /api/v1/gpus HTTP/1.1\r\n")  # MHD's
    time.sleep(0.3)
    c3 = conns(d.port, timeout=1.0)
    c3.send(get("/v1/models"))  # the kernel holds it: nobody takes it yet
    with pytest.raises(socket.timeout):
        c3.s.settimeout(1.0)
        c3.s.recv(1)
    c1.close()  # a slot frees: the waiting connection is taken and answered
    c3.s.settimeout(5.0)
    assert c3.response().status == 200
    c2.send(b"Host: x\r\n\r\n")
    assert c2.response().status == 200
    c2.close()
    c1 = conns(d.port)
    c1.send(get("/api/v1/gpus"))
    assert c1.response().status == 200
