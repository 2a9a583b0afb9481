#!/usr/bin/python3
"""abuse.py - the load tool of bench/bench-abuse.sh (loopback only).

Two modes:

  abuse.py hold PORT IDLE SLOW
      Keeps IDLE connections open that send nothing and SLOW connections
      that send a request head one header line a second and never end it.
      A connection the server closes is opened again at once, so the
      pressure stays the same all the time.  The connections come from
      loopback source addresses 127.0.1.1, 127.0.1.2, ... with at most 200
      each (under server.max_connections_per_ip's default 256: the bench
      measures what admitted abusers cost, not the refusal).  Prints
      "ready N" once all are open, then every 5 s "open N cut N" (cut: how
      many the server has closed so far); runs until killed.

  abuse.py measure PORT KIND SECONDS
      A well-behaved client: one request after the other for SECONDS, each
      on a new connection (connect, send, read the whole answer, close), 5 s
      timeout each.  KIND: healthz (GET /healthz), submit (POST
      /api/v1/tasks, a lease), models (GET /v1/models), chat (POST
      /v1/chat/completions, model bench-model).  Prints one line:
      "KIND n=N fail=F p50_ms=X p99_ms=Y" (a failure: no 2xx answer in 5 s).
"""
import selectors
import socket
import sys
import time

PER_ADDR = 200


def source(i):
    return "127.0.1.%d" % (1 + i // PER_ADDR)


class Hold:
    def __init__(self, port, idle, slow):
        self.port = port
        self.sel = selectors.DefaultSelector()
        self.n = idle + slow
        self.idle = idle
        self.socks = [None] * self.n
        self.begun = [False] * self.n  # a slow connection sent its request line
        self.cut = 0

    def open(self, i):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.bind((source(i), 0))
        try:
            s.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        self.socks[i] = s
        self.sel.register(s, selectors.EVENT_READ, i)
        self.begun[i] = False

    def send(self, i, data):
        try:
            self.socks[i].send(data)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            pass  # the read side sees the close

    def reopen(self, i):
        self.sel.unregister(self.socks[i])
        self.socks[i].close()
        self.cut += 1
        self.open(i)

    def run(self):
        for i in range(self.n):
            self.open(i)
        print("ready %d" % self.n, flush=True)
        next_line = time.monotonic() + 1.0
        next_report = time.monotonic() + 5.0
        k = 0
        while True:
            for key, _ in self.sel.select(timeout=0.2):
                i = key.data
                try:
                    b = self.socks[i].recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    b = b""
                if not b:
                    self.reopen(i)
            now = time.monotonic()
            if now >= next_line:  # one header line a second on each slow connection
                k += 1
                for i in range(self.idle, self.n):
                    if self.begun[i]:
                        self.send(i, b"X-Slow-%d: 1\r\n" % k)
                    else:  # half REST, half /v1
                        self.send(i, b"GET /healthz HTTP/1.1\r\n" if i % 2 else b"GET /v1/models HTTP/1.1\r\n")
                        self.begun[i] = True
                next_line = now + 1.0
            if now >= next_report:
                print("open %d cut %d" % (self.n, self.cut), flush=True)
                next_report = now + 5.0


SUBMIT = (b'{"tenant_id":"bench","name":"b","gpu_request":1,"memory_mb":4096,"priority":5,'
          b'"lease_ttl_s":3600}')
CHAT = b'{"model":"bench-model","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":8}'


def request(kind):
    if kind == "healthz":
        return b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    if kind == "models":
        return b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    body = SUBMIT if kind == "submit" else CHAT
    path = b"/api/v1/tasks" if kind == "submit" else b"/v1/chat/completions"
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path, len(body), body))


def one(port, req):
    """True when a 2xx answer came whole (the server closes after it)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5.0)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(req)
        got = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
        return got.startswith(b"HTTP/1.1 2")
    except OSError:
        return False
    finally:
        s.close()


def measure(port, kind, secs):
    req = request(kind)
    lat = []
    fail = 0
    end = time.monotonic() + secs
    while time.monotonic() < end:
        t0 = time.perf_counter()
        ok = one(port, req)
        dt = (time.perf_counter() - t0) * 1000.0
        if ok:
            lat.append(dt)
        else:
            fail += 1
            lat.append(5000.0)  # a failure counts as the whole timeout in the percentiles
    lat.sort()
    n = len(lat)
    p = lambda q: lat[min(n - 1, int(q * n))] if n else 0.0
    print("%s n=%d fail=%d p50_ms=%.3f p99_ms=%.3f" % (kind, n, fail, p(0.50), p(0.99)), flush=True)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "hold":
        Hold(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])).run()
    elif len(sys.argv) == 5 and sys.argv[1] == "measure":
        measure(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
