"""Black-box tests of the connection guard (src/gateway/conns.c, front.c):
no client holds the server.

- server.header_timeout_s: a request head arrives whole within it, counted
  from its first byte (from accept for a connection's first request), on
  the REST path (libmicrohttpd) and the /v1 path (the gateway's front), for
  the first request and for a later one on a kept-alive connection;
- server.min_body_rate_bytes_s: after a grace of header_timeout_s a body
  comes at least this fast;
- server.max_connections_per_ip: further connections from that address are
  refused at accept while the others are served;
- near server.max_connections the oldest idle connections are closed to
  make room, never one with a request in progress.

The daemon runs with small timeouts (header_timeout_s: 2) so that the
tests take seconds; a cut is looked for once a second, hence the slack."""
import time

import pytest
import requests

from rawhttp import RawConn

pytestmark = pytest.mark.e2e

HEADER_TIMEOUT = 2
SWEEP = 1.0       # the loop looks for late requests this often
SLACK = 1.2       # scheduling on a busy machine


def config(server=""):
    base = "header_timeout_s: %d, connection_timeout_s: 30, min_body_rate_bytes_s: 1000" % HEADER_TIMEOUT
    return ("gpus: {backend: sim}\n"
            "server: {%s}\n"
            "gateway:\n"
            "  models:\n"
            "    - {name: m1, context: 4096, upstreams: [\"http://127.0.0.1:9\"]}\n"
            % (base + (", " + server if server else "")))


def session():
    s = requests.Session()
    s.trust_env = False
    return s


class Raw(RawConn):
    """One client connection, from a given loopback address."""

    def trickle_until_cut(self, piece, every, limit):
        """Send piece every `every` seconds until the server ends the
        connection; seconds since connect, and what it sent."""
        end = time.monotonic() + limit
        got = b""
        while time.monotonic() < end:
            try:
                self.s.sendall(piece)
            except OSError:
                return time.monotonic() - self.t0, got
            t, b = self.ended(every)
            got += b
            if t is not None:
                return time.monotonic() - self.t0, got
        return None, got


@pytest.fixture
def raw():
    made = []

    def make(port, source="127.0.0.1", timeout=10.0):
        c = Raw(port, source, timeout)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def assert_timed_out(got):
    """A cut connection may carry a 408 first (best effort: a reset can
    lose it); never anything else."""
    assert got == b"" or got.startswith(b"HTTP/1.1 408 "), got[:200]


def healthy(d, n=5, limit=1.0):
    """A well-behaved client is served meanwhile, quickly."""
    s = session()
    for _ in range(n):
        t0 = time.monotonic()
        assert s.get(d.url + "/healthz", timeout=5).status_code == 200
        assert time.monotonic() - t0 < limit
        t0 = time.monotonic()
        assert s.get(d.url + "/v1/models", timeout=5).status_code == 200
        assert time.monotonic() - t0 < limit


# ---------------------------------------------------------------------------
# header_timeout_s

@pytest.mark.parametrize("path", ["/healthz", "/v1/models"])
def test_trickled_first_head_is_cut_within_header_timeout(daemon_factory, raw, path):
    d = daemon_factory(config())
    c = raw(d.port)
    c.send(b"GET %s HTTP/1.1\r\nHost: x\r\n" % path.encode())
    t, got = c.trickle_until_cut(b"X-Slow: 1\r\n", 0.3, 10)
    assert t is not None, "never cut"
    assert HEADER_TIMEOUT - 0.3 <= t <= HEADER_TIMEOUT + SWEEP + SLACK, t
    assert_timed_out(got)
    healthy(d)


@pytest.mark.parametrize("path", ["/healthz", "/v1/models"])
def test_trickled_head_of_a_kept_alive_connections_second_request_is_cut(daemon_factory, raw, path):
    d = daemon_factory(config())
    c = raw(d.port)
    c.send(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    assert c.response().status == 200
    # idle longer than header_timeout_s: that is connection_timeout_s's business, not a late head
    t, _ = c.ended(HEADER_TIMEOUT + SWEEP + 0.5)
    assert t is None, "an idle kept-alive connection was cut by the header timeout"
    c.send(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    assert c.response().status == 200  # still served
    time.sleep(0.5)
    start = time.monotonic()
    c.send(b"GET %s HTTP/1.1\r\n" % path.encode())  # the next head begins: its clock starts
    t, got = c.trickle_until_cut(b"X-Slow: 1\r\n", 0.3, 10)
    assert t is not None, "never cut"
    since = time.monotonic() - start
    assert HEADER_TIMEOUT - 0.3 <= since <= HEADER_TIMEOUT + SWEEP + SLACK, since
    assert_timed_out(got)
    healthy(d)


def test_connection_that_sends_nothing_is_cut_at_header_timeout_from_accept(daemon_factory, raw):
    d = daemon_factory(config())
    c = raw(d.port)
    t, got = c.ended(10)
    assert t is not None and HEADER_TIMEOUT - 0.3 <= t <= HEADER_TIMEOUT + SWEEP + SLACK, t
    assert_timed_out(got)


def test_many_trickling_clients_do_not_stall_a_normal_one(daemon_factory, raw):
    d = daemon_factory(config())
    slow = []
    for i in range(40):
        c = raw(d.port)
        c.send(b"GET %s HTTP/1.1\r\nHost: x\r\n" % (b"/healthz" if i % 2 else b"/v1/models"))
        slow.append(c)
    for _ in range(3):
        for c in slow:
            try:
                c.send(b"X-Slow: 1\r\n")
            except OSError:
                pass
        healthy(d, n=2, limit=0.5)
        time.sleep(0.3)
    time.sleep(HEADER_TIMEOUT + SWEEP + SLACK)
    for c in slow:
        t, got = c.ended(0.5)
        assert t is not None, "a trickling client outlived the header timeout"
        assert_timed_out(got)


# ---------------------------------------------------------------------------
# min_body_rate_bytes_s

@pytest.mark.parametrize("path", ["/api/v1/tasks", "/v1/chat/completions"])
def test_body_slower_than_the_minimum_rate_is_cut(daemon_factory, raw, path):
    d = daemon_factory(config())
    c = raw(d.port)
    c.send(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
           % path.encode())
    start = time.monotonic()
    t, got = c.trickle_until_cut(b" " * 20, 0.2, 15)  # 100 bytes/s against 1000
    assert t is not None, "never cut"
    since = time.monotonic() - start
    # due after the grace: 1000 B/s * (t - 2 s) > what came by the first look past it
    assert HEADER_TIMEOUT <= since <= HEADER_TIMEOUT + 2 * SWEEP + SLACK, since
    assert_timed_out(got)


@pytest.mark.parametrize("path", ["/api/v1/tasks", "/v1/chat/completions"])
def test_body_at_a_fair_rate_is_taken_whole(daemon_factory, raw, path):
    d = daemon_factory(config())
    c = raw(d.port)
    body = b"{" + b" " * 7998 + b"}"
    c.send(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
           % (path.encode(), len(body)))
    for i in range(0, len(body), 800):  # 4000 B/s for 2 s: over the rate, longer than the grace
        c.send(body[i:i + 800])
        time.sleep(0.2)
    st = c.response().status
    assert st != 408 and 200 <= st < 500, st  # the request was judged on its content


# ---------------------------------------------------------------------------
# max_connections_per_ip

def test_connections_over_the_per_address_limit_are_refused_while_others_are_served(daemon_factory, raw):
    d = daemon_factory(config("max_connections_per_ip: 4").replace("header_timeout_s: 2", "header_timeout_s: 10"))
    time.sleep(0.3)  # the readiness probe's connection is gone
    # five from 127.0.0.1: the loops accept them in any order, so any one of them is the refused one
    cs = [raw(d.port) for _ in range(5)]
    ends = [c.ended(0.3 if i else 1.0) for i, c in enumerate(cs)]
    refused = [i for i, (t, _) in enumerate(ends) if t is not None]
    assert len(refused) == 1, ends
    got = ends[refused[0]][1]
    assert got == b"" or got.startswith(b"HTTP/1.1 429 "), got[:200]
    held = [c for i, c in enumerate(cs) if i not in refused]
    # the four are served, on both paths
    held[0].send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert held[0].response().status == 200
    held[1].send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert held[1].response().status == 200
    # another address is not limited by this one's connections
    other = raw(d.port, source="127.0.0.2")
    other.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert other.response().status == 200
    # a closed connection frees its place
    held[3].close()
    time.sleep(0.2)
    again = raw(d.port)
    again.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert again.response().status == 200


def test_per_address_count_follows_connections_handed_to_libmicrohttpd(daemon_factory, raw):
    d = daemon_factory(config("max_connections_per_ip: 2, http_threads: 1"))
    time.sleep(0.3)
    for _ in range(5):  # MHD's connections open and close: each close frees its place
        a = raw(d.port)
        a.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert a.response().status == 200
        t, _ = a.ended(2)
        assert t is not None
        a.close()
    a = raw(d.port)
    b = raw(d.port)
    a.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    b.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert a.response().status == 200 and b.response().status == 200
    c = raw(d.port)
    t, _ = c.ended(2)
    assert t is not None and t < 1.0, "a third connection was kept"


# ---------------------------------------------------------------------------
# idle connections make room near max_connections

def test_near_the_limit_the_oldest_idle_connections_are_closed_first(daemon_factory, raw):
    # one loop, 10 connections: above 9 the oldest idle one is closed for a new one
    d = daemon_factory(config("max_connections: 10, http_threads: 1, header_timeout_s: 30"
                              ).replace("header_timeout_s: 2, ", ""))
    time.sleep(0.3)
    old_rest = raw(d.port)
    old_rest.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert old_rest.response().status == 200  # kept alive, idle from here (libmicrohttpd's)
    time.sleep(0.1)
    old_front = raw(d.port)
    old_front.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert old_front.response().status == 200  # kept alive, idle (the front's)
    busy = []
    for i in range(7):  # requests in progress: never closed to make room
        c = raw(d.port)
        c.send(b"GET %s HTTP/1.1\r\nHost: x\r\n" % (b"/healthz" if i % 2 else b"/v1/models"))
        busy.append(c)
    time.sleep(0.3)
    assert old_rest.ended(0.2)[0] is None and old_front.ended(0.2)[0] is None  # 9 open: nothing closed yet
    n1 = raw(d.port)
    n1.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert n1.response().status == 200
    t, _ = old_rest.ended(2)
    assert t is not None, "the oldest idle connection was not closed"
    assert old_front.ended(0.3)[0] is None, "more than one idle connection was closed for one new one"
    n2 = raw(d.port)
    n2.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert n2.response().status == 200
    t, _ = old_front.ended(2)
    assert t is not None, "the next oldest idle connection was not closed"
    for c in busy:  # the requests in progress were left alone and are answered
        c.send(b"\r\n")
        assert c.response().status == 200
