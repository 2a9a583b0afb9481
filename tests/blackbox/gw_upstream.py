"""A small OpenAI-like upstream for the gateway's black-box tests.

Serves POST /v1/chat/completions, /v1/completions, /v1/embeddings with
HTTP/1.1 keep-alive.  What it does is steered by the last user message
(or the prompt): "sleep:S" waits S seconds first, "error:CODE" answers that
status with an OpenAI error, "chunks:N" streams N content chunks,
"gap:S" waits S seconds between streamed chunks, "die:CODE" makes the
process exit with CODE (a crashing model server).  Every answer carries
X-Upstream: NAME; every request is recorded in `received` (body dict,
arrival time) in arrival order.

POST /tokenize (vLLM style: {"model","messages"} or {"model","prompt"} ->
{"count":N,"max_model_len":0,"tokens":[...]}) counts a token per
whitespace-separated word of every message's content (or of the prompt).
`tokenize` switches it: "off" (the default, like OpenAI's API) answers
404, "on" counts, "stall" waits `stall_sec` before counting.  Its calls are
recorded in `tokenized`, not in `received`.
"""
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _text(body):
    msgs = body.get("messages")
    if isinstance(msgs, list) and msgs:
        c = msgs[-1].get("content", "")
        return c if isinstance(c, str) else ""
    p = body.get("prompt", body.get("input", ""))
    return p if isinstance(p, str) else ""


def _words(body):
    """Tokens of a /tokenize body: whitespace-separated words."""
    msgs = body.get("messages")
    if isinstance(msgs, list):
        n = 0
        for m in msgs:
            c = m.get("content", "") if isinstance(m, dict) else ""
            if isinstance(c, list):
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            n += len(c.split()) if isinstance(c, str) else 0
        return n
    p = body.get("prompt", "")
    return len(p.split()) if isinstance(p, str) else 0


def _opt(text, key, default):
    for word in text.split():
        if word.startswith(key + ":"):
            return word.split(":", 1)[1]
    return default


class Upstream:
    def __init__(self, name="up1", port=0, tokenize="off", stall_sec=3.0):
        self.name = name
        self.tokenize = tokenize
        self.stall_sec = stall_sec
        self.tokenized = []
        self.received = []
        self.lock = threading.Lock()
        up = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY, as model servers set it: without it a chunk written
            # after the headers waits ~40 ms for the delayed ACK (timings are tested)
            disable_nagle_algorithm = True

            def log_message(self, *a):
                pass

            def do_GET(self):
                body = b'{"status":"ok"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(n)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                if self.path == "/tokenize":
                    self.tokenize_(body)
                    return
                with up.lock:
                    up.received.append({"path": self.path, "body": body, "t": time.monotonic()})
                text = _text(body)
                if _opt(text, "die", ""):
                    os._exit(int(_opt(text, "die", "1")))  # a crashing model server
                time.sleep(float(_opt(text, "sleep", "0")))
                code = int(_opt(text, "error", "0"))
                if code:
                    err = json.dumps({"error": {"message": "upstream says %d" % code, "type": "server_error",
                                                "param": None, "code": None}}).encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(err)))
                    self.send_header("X-Upstream", up.name)
                    self.end_headers()
                    self.wfile.write(err)
                    return
                if body.get("stream"):
                    self.stream(body, text)
                    return
                if self.path.endswith("/embeddings"):
                    out = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
                           "model": body.get("model"), "usage": {"prompt_tokens": 3, "total_tokens": 3}}
                else:
                    out = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body.get("model"),
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello from " + up.name},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}
                data = json.dumps(out, indent=1).encode()  # odd spacing: the gateway must not re-encode
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Upstream", up.name)
                self.end_headers()
                self.wfile.write(data)

            def tokenize_(self, body):
                with up.lock:
                    up.tokenized.append({"body": body, "t": time.monotonic(), "mode": up.tokenize})
                if up.tokenize == "off":
                    data, code = b'{"detail":"Not Found"}', 404
                else:
                    if up.tokenize == "stall":
                        time.sleep(up.stall_sec)
                    n = _words(body)
                    data = json.dumps({"count": n, "max_model_len": 0, "tokens": list(range(1000, 1000 + n))}).encode()
                    code = 200
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the gateway gave up waiting

            def stream(self, body, text):
                n = int(_opt(text, "chunks", "3"))
                gap = float(_opt(text, "gap", "0"))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("X-Upstream", up.name)
                self.end_headers()

                def chunk(obj):
                    line = ("data: " + json.dumps(obj) + "\n\n").encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()

                usage = (body.get("stream_options") or {}).get("include_usage")
                for i in range(n):
                    chunk({"id": "c", "object": "chat.completion.chunk", "choices": [
                        {"index": 0, "delta": {"content": "t%d " % i}, "finish_reason": None}],
                        "usage": None})
                    if gap:
                        time.sleep(gap)
                if usage:
                    chunk({"id": "c", "object": "chat.completion.chunk", "choices": [],
                           "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}})
                done = b"data: [DONE]\n\n"
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", port), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def texts(self):
        with self.lock:
            return [_text(r["body"]) for r in self.received]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
