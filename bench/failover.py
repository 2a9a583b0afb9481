#!/usr/bin/python3
"""failover.py - failover time of several servers on one PostgreSQL
(docs/deployment.md, "Several servers"), loopback only.

  GPUPOOL_TEST_PG_URL=$(tests/pg/start-pg.sh) bench/failover.py [KILLS] [LEASE_S]

Starts two servers, s1 and s2 (sim GPUs, data dirs of their own under a
temp dir, cluster.lease_s LEASE_S, default 6) on a fresh database of that
PostgreSQL, then KILLS times (default 20): submits a lease task to the
leader, kill -9s the leader, and measures
  ready:  the kill to the other server's /readyz 200 (it leads);
  submit: the kill to the first 201 of a submit tried every 50 ms through
          the URL list "URL1,URL2" as the CLI does (past a dead one or a
          503 standby: a follower with no leader to forward to);
checks that every task submitted before a kill is still there (queued or
running) on the new leader, and starts the killed server again (a follower).
Prints one line per kill and then median and worst of each.
Needs build/gpupool (GPUPOOL_BIN overrides) and psql.
"""
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

BIN = os.environ.get("GPUPOOL_BIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                    "gpupool")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=2):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None
    except (OSError, ValueError):
        return None, None


def submit_any(urls):
    """One submit through the list, as gpupool does: past unreachable and standby."""
    for u in urls:
        st, j = http("POST", u + "/api/v1/tasks", {"gpu_request": 1, "lease_ttl_s": 3600})
        if st is None or (st == 503 and j and j.get("error", {}).get("code") == "standby"):
            continue
        return st, j
    return None, None


class Server:
    def __init__(self, root, name, pg, lease_s):
        self.name = name
        self.dir = os.path.join(root, name)
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
        self.cfg = os.path.join(self.dir, "gpupool.yaml")
        with open(self.cfg, "w") as f:
            f.write('gpus: {backend: sim}\nstore: {url: "%s"}\ncluster: {server_id: %s, lease_s: %d}\n'
                    % (pg, name, lease_s))
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None

    def start(self):
        log = open(os.path.join(self.dir, "server.log"), "ab")
        self.proc = subprocess.Popen([BIN, "server", "--config", self.cfg, "--listen", "127.0.0.1:%d" % self.port,
                                      "--data-dir", os.path.join(self.dir, "data")], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if http("GET", self.url + "/healthz", timeout=1)[0] == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("%s did not start" % self.name)

    def ready(self):
        return http("GET", self.url + "/readyz", timeout=1)[0] == 200

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def main():
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    lease_s = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    base = os.environ.get("GPUPOOL_TEST_PG_URL")
    if not base:
        sys.exit("failover.py: set GPUPOOL_TEST_PG_URL (tests/pg/start-pg.sh prints one)")
    db = "gp_failover_%s" % uuid.uuid4().hex[:12]
    subprocess.run(["psql", base, "-v", "ON_ERROR_STOP=1", "-qc", "CREATE DATABASE %s" % db], check=True,
                   capture_output=True, timeout=60)
    u = urllib.parse.urlsplit(base)
    pg = "%s://%s/%s%s" % (u.scheme, u.netloc, db, "?" + u.query if u.query else "")
    root = tempfile.mkdtemp(prefix="gp-failover-")
    servers = [Server(root, "s1", pg, lease_s), Server(root, "s2", pg, lease_s)]
    ready_t, submit_t, ids = [], [], []
    try:
        servers[0].start()
        while not servers[0].ready():
            time.sleep(0.05)
        servers[1].start()
        leader, standby = servers
        urls = [s.url for s in servers]
        for i in range(kills):
            st, j = submit_any(urls)
            assert st == 201, (st, j)
            ids.append(j["id"])
            # at a random point of the leader's renewal cycle (the loop
            # would otherwise lock onto one phase of it)
            time.sleep(random.uniform(0, lease_s))
            leader.kill9()
            t0 = time.monotonic()
            got_ready = got_submit = None
            while got_ready is None or got_submit is None:
                now = time.monotonic()
                if now - t0 > lease_s + 30:
                    raise RuntimeError("no failover within %d s (kill %d)" % (lease_s + 30, i + 1))
                if got_ready is None and standby.ready():
                    got_ready = time.monotonic() - t0
                if got_submit is None:
                    st, j = submit_any(urls)
                    if st == 201:
                        got_submit = time.monotonic() - t0
                        ids.append(j["id"])
                time.sleep(0.05)
            for tid in ids:
                st, t = http("GET", "%s/api/v1/tasks/%d" % (standby.url, tid), timeout=5)
                assert st == 200 and t["state"] in ("queued", "running"), (tid, st, t)
            ready_t.append(got_ready)
            submit_t.append(got_submit)
            print("kill %2d: ready %.2f s, first submit %.2f s, %d tasks all there" % (i + 1, got_ready, got_submit,
                                                                                   len(ids)), flush=True)
            leader.start()  # back as a follower
            leader, standby = standby, leader
            # leases of the tasks hold GPUs: cancel them all now and then
            if len(ids) >= 3:
                for tid in ids:
                    http("POST", "%s/api/v1/tasks/%d/cancel" % (leader.url, tid), timeout=5)
                ids = []
        print("lease_s %d, %d kills: ready median %.2f s, worst %.2f s; first submit median %.2f s, worst %.2f s"
              % (lease_s, kills, statistics.median(ready_t), max(ready_t), statistics.median(submit_t),
                 max(submit_t)))
    finally:
        for s in servers:
            s.stop()
        subprocess.run(["psql", base, "-qc", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db], capture_output=True,
                       timeout=60)


if __name__ == "__main__":
    main()
