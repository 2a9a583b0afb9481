"""A client connection on a raw socket, for the black-box tests that send
what no HTTP library would (smuggling, slow and pipelined requests, bad
framing) and look at exactly what comes back (test_gateway_front.py,
test_connections.py, test_ha_attack.py).

Answers are parsed from one buffer, so pipelined answers are read one
after the other; the bytes of an answer not yet whole stay in `buf`."""
import json
import socket
import time


class Resp:
    def __init__(self, version, status, headers, body, framing):
        self.version = version
        self.status = status
        self.headers = headers        # [(name, value)] as sent
        self.body = body
        self.framing = framing        # "length", "chunked", "close" or "none"

    def header(self, name):
        vals = [v for n, v in self.headers if n.lower() == name.lower()]
        return vals[0] if vals else None

    def json(self):
        return json.loads(self.body)


def parse_answer(buf, head_method=False, eof=False):
    """The whole answer at the start of buf, as (Resp, bytes it took), or
    None while more bytes are needed (a body framed by the close of the
    connection is whole only at eof)."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buf[:end].split(b"\r\n")
    version, status = lines[0].split(b" ", 2)[:2]
    headers = []
    for line in lines[1:]:
        n, v = line.split(b":", 1)
        headers.append((n.decode("latin-1"), v.strip().decode("latin-1")))
    r = Resp(version.decode(), int(status), headers, b"", "none")
    at = end + 4
    if head_method or r.status < 200 or r.status in (204, 304):
        return r, at
    if (r.header("Transfer-Encoding") or "").lower() == "chunked":
        r.framing = "chunked"
        while True:
            eol = buf.find(b"\r\n", at)
            if eol < 0:
                return None
            size = int(buf[at:eol].split(b";")[0], 16)
            at = eol + 2
            if size == 0:
                break
            if len(buf) < at + size + 2:
                return None
            r.body += buf[at:at + size]
            assert buf[at + size:at + size + 2] == b"\r\n", buf[at:at + size + 2]
            at += size + 2
        while True:  # trailers, up to an empty line
            eol = buf.find(b"\r\n", at)
            if eol < 0:
                return None
            line, at = buf[at:eol], eol + 2
            if not line:
                return r, at
    if r.header("Content-Length") is not None:
        n = int(r.header("Content-Length"))
        if len(buf) < at + n:
            return None
        r.framing = "length"
        r.body = buf[at:at + n]
        return r, at + n
    if not eof:
        return None
    r.framing = "close"
    r.body = buf[at:]
    return r, len(buf)


class RawConn:
    """One client connection to 127.0.0.1:port, from the loopback address
    source when one is given."""

    def __init__(self, port, source=None, timeout=5.0):
        self.t0 = time.monotonic()
        self.timeout = timeout
        if source:
            self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.s.settimeout(timeout)
            self.s.bind((source, 0))
            self.s.connect(("127.0.0.1", port))
        else:
            self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        b = self.s.recv(65536)
        if not b:
            raise EOFError("connection closed; %d bytes unparsed: %r" % (len(self.buf), self.buf[:300]))
        self.buf += b

    def response(self, head_method=False, timeout=None):
        """The next whole answer (a Resp).  Raises EOFError when the server
        closed before one was whole, socket.timeout when a read waited
        longer than timeout (the connection's own by default)."""
        self.s.settimeout(self.timeout if timeout is None else timeout)
        while True:
            got = parse_answer(self.buf, head_method)
            if got:
                break
            try:
                self._fill()
            except EOFError:
                got = parse_answer(self.buf, head_method, eof=True)
                if not got:
                    raise
                break
        r, used = got
        self.buf = self.buf[used:]
        return r

    def ended(self, timeout):
        """Wait up to timeout for the server to end the connection:
        (seconds it took, or None when it stayed open that long; the bytes
        that came meanwhile, which are added to buf too)."""
        t0 = time.monotonic()
        end = t0 + timeout
        got = b""
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    return None, got
                self.s.settimeout(left)
                b = self.s.recv(65536)
                if not b:
                    return time.monotonic() - t0, got
                got += b
                self.buf += b
        except socket.timeout:
            return None, got
        except ConnectionResetError:
            return time.monotonic() - t0, got

    def close(self):
        self.s.close()
