#!/usr/bin/python3
"""cluster.py - the driver of bench/bench-cluster.sh (read that first).

One round: a fresh server (gpus.backend none, store.sync at its default,
data in a temporary directory), a one-node agent `victim` holding a task
`sleep 600`, then one agent `--sim-nodes NODES` joining; then, on that same
server in that order:
  idle   the server's CPU (utime+stime of /proc/PID/stat) over IDLE seconds
         with every node heartbeating (agent.heartbeat_s 2), as % of a core
  death  SIGSTOP the victim agent; poll its task every 50 ms until it is no
         longer running; time from the victim's last heartbeat the server
         saw (GET /api/v1/nodes/victim-0000 last_heartbeat_ms) and from the
         SIGSTOP to the first poll that saw it queued (node_timeout_s 10)
  batch  wrk -t1 -c8 submits TASKS one-GPU tasks `true`, one POST each;
         tasks/s = TASKS / (last finished_at - first submitted_at), the
         server's own timestamps of those tasks
  array  one POST of a job array of TASKS one-GPU tasks `true`, timed the
         same way (the scheduling and dispatch path without the per-request
         submit cost)
  lease  the same wrk client for LEASE_S seconds: bare lease submits/s
         (16 MiB leases, no command: stored and placed, nothing to start)
Each round runs these legs twice, on two fresh servers one after the
other (issue 22): "plain", the agents and wrk on http://127.0.0.1 (plaintext
on loopback), and "tls", the agents on https:// with a join token that
carries the server CA's hash (so each agent fetches and pins the CA, then
verifies every connection against it) and wrk on https:// too.  The driver's
own polling stays on http:// loopback in both.  With --base-build DIR a
leg "base" runs the plain leg on the binaries in DIR (an older commit's
build): the same figures before and after a change, in the same run.
--gpu-poll-ms N sets the server's gpus.poll_ms (how often its agents read
and report their GPUs).
Python: the Debian python3 only (no packages beyond the standard library).
"""
import argparse
import datetime
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

procs = []  # every process this driver started, killed at the end


def port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def req(url, method="GET", body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        r.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(r, timeout=timeout) as f:
        return json.loads(f.read())


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    v = s[s.rindex(")") + 2:].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def spawn(argv, log):
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        try:
            p.send_signal(signal.SIGCONT)
            p.send_signal(sig)
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def until(what, fn, limit_s, every=0.1):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(every)
    raise SystemExit("bench-cluster: %s: not within %d s" % (what, limit_s))


def ready_nodes(url):
    return sum(n["state"] == "ready" for n in req(url + "/api/v1/nodes")["nodes"])


def tasks_above(url, base, array=None):
    """every task with id > base (or of one array): newest first, paged"""
    out, after = [], None
    while True:
        q = "/api/v1/tasks?limit=1000" + ("&array=%d" % array if array else "") + (
            "&after=%d" % after if after else "")
        a = req(url + q)
        page = [t for t in a["tasks"] if t["id"] > base]
        out += page
        if len(page) < len(a["tasks"]) or a["next_after"] is None:
            return out
        after = a["next_after"]


def wrk(url, kind, n=None, secs=None):
    """the same client for both legs: wrk -t1 -c8, keep-alive"""
    argv = ["wrk", "-t1", "-c8", "-d%ds" % (secs or 3600), "-s", "bench/cluster.lua", url, "--", kind]
    if n:
        argv.append(str(n))
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(p)
    created = refused = 0
    dur = 0.0
    for line in p.stdout:
        if "socket errors" in line and " 0 read 0 write 0 timeout 0" not in line:
            print("bench-cluster: wrk %s: %s" % (kind, line.strip()), file=sys.stderr)
        if n and line.startswith("cluster.lua: %d answered" % n):
            p.send_signal(signal.SIGINT)  # wrk's loop would run for -d otherwise
        if line.startswith("cluster.lua: created"):
            w = line.split()
            created, refused, dur = int(w[2]), int(w[4]), float(w[6])
    p.wait()
    return created, refused, dur


def leg_rate(tasks):
    n = len(tasks)
    ok = [t for t in tasks if t["state"] == "succeeded"]
    t0 = min(ts(t["submitted_at"]) for t in tasks)
    t_sub = max(ts(t["submitted_at"]) for t in tasks)
    t_end = max(ts(t["finished_at"]) for t in tasks if t["finished_at"])
    return {"tasks_s": n / max(t_end - t0, 1e-3), "submits_s": n / max(t_sub - t0, 1e-3),
            "secs": t_end - t0, "ok": len(ok), "n": len(tasks)}


def one_round(a, r, tmp, leg):
    d = os.path.join(tmp, "r%d-%s" % (r, leg))
    os.makedirs(d)
    token = "gpj_" + secrets.token_hex(32)
    with open(d + "/server.yaml", "w") as f:
        # every simulated node comes from 127.0.0.1 and holds one or two
        # connections (its held sync, and one to report): room for them all
        # and one job array of all the tasks (the array leg)
        f.write("scheduler: {max_queue_depth: 1000000, max_array_size: %d}\ngpus: {backend: none%s}\n"
                "agent: {heartbeat_s: 2}\n"
                "server: {max_connections: %d, max_connections_per_ip: %d}\n"
                "cluster: {join_tokens: [\"sha256:%s\"], node_timeout_s: 10}\n"
                # a run_as user: wrk's keyless https:// submits reach the server through
                # TLS, so the kernel cannot name their user (issue 23) and a root server
                # would run no command for them (403); the simulated nodes run none anyway
                "tenants: [{id: bench, run_as: nobody}]\n"
                % (min(100000, max(10000, a.tasks)), ", poll_ms: %d" % a.gpu_poll_ms if a.gpu_poll_ms else "",
                   max(1024, 4 * a.nodes + 64), max(256, 4 * a.nodes + 64),
                   hashlib.sha256(token.encode()).hexdigest()))
    # a label on every node: a join with no labels at all may be refused
    # ("label 1 is not key=value", see the docs' section)
    with open(d + "/agent.yaml", "w") as f:
        f.write("gpus: {backend: sim, sim: [{name: H100, memory_mb: 81559, count: 8}]}\n"
                "node: {labels: {bench: \"yes\"}}\n")
    p = port()
    url = "http://127.0.0.1:%d" % p
    build = a.base_build if leg in ("base", "basetls") else a.build
    srv = spawn([build + "/gpupool-server", "server", "--config", d + "/server.yaml", "--listen",
                 "127.0.0.1:%d" % p, "--data-dir", d + "/data"], open(d + "/server.log", "w"))

    def up():
        try:
            return req(url + "/readyz", timeout=2)
        except (urllib.error.URLError, OSError):
            return None
    until("the server's readyz", up, 20)
    ctl = url  # the driver's own requests: plaintext on loopback in both legs
    if leg in ("tls", "basetls"):
        # the token as `join-token create` prints it: SECRET.CAHASH; the agents pin the CA
        token += "." + req(url + "/agent/v1/ca")["ca_hash"][len("sha256:"):]
        url = "https://127.0.0.1:%d" % p
    agent = [build + "/gpupool", "agent", "--server", url, "--token", token, "--config", d + "/agent.yaml"]
    victim = spawn(agent + ["--sim-nodes", "1", "--name", "victim", "--listen", "127.0.0.1:%d" % port(),
                            "--data-dir", d + "/victim"], open(d + "/victim.log", "w"))
    until("the victim's join", lambda: ready_nodes(ctl) == 1, 20)
    vt = req(ctl + "/api/v1/tasks", "POST", {"tenant_id": "bench", "name": "victim", "gpu_request": 1,
                                             "node_selector": {"gpupool/node": "victim-0000"},
                                             # opted out of fencing: what is timed is the loss detection
                                             "on_node_lost": "requeue", "command": ["sleep", "600"]})["id"]
    until("the victim's task to run", lambda: req(ctl + "/api/v1/tasks/%d" % vt)["state"] == "running", 20)

    t0 = time.monotonic()
    sim = spawn(agent + ["--sim-nodes", str(a.nodes), "--name", "sim", "--listen", "127.0.0.1:%d" % port(),
                         "--data-dir", d + "/sim"], open(d + "/sim.log", "w"))
    until("%d nodes ready" % (a.nodes + 1), lambda: ready_nodes(ctl) == a.nodes + 1, 600, 0.2)
    res = {"join_s": time.monotonic() - t0}

    # idle: every node heartbeating, nothing else
    time.sleep(4)
    s0, g0, w0 = cpu_s(srv.pid), cpu_s(sim.pid), time.monotonic()
    time.sleep(a.idle)
    s1, g1, w1 = cpu_s(srv.pid), cpu_s(sim.pid), time.monotonic()
    res["idle_server_pct"] = 100 * (s1 - s0) / (w1 - w0)
    res["idle_agent_pct"] = 100 * (g1 - g0) / (w1 - w0)

    # death: stop the victim's heartbeats
    # The task counts as requeued at the first poll that sees it not running
    # on victim-0000 any more (queued, or already started elsewhere: where
    # node selectors are not enforced yet it starts again at once) with a
    # retry counted.  The last heartbeat is the node's last_heartbeat_ms as
    # read while the node was still ready (every poll reads it).
    hb_ready = req(ctl + "/api/v1/nodes/victim-0000")["last_heartbeat_ms"]
    victim.send_signal(signal.SIGSTOP)
    t_stop = time.time()
    while True:
        t = req(ctl + "/api/v1/tasks/%d" % vt)
        now = time.time()
        if t["state"] != "running" or t["nodes"] != ["victim-0000"]:
            break
        if now - t_stop > 60:
            raise SystemExit("bench-cluster: the victim's task still runs 60 s after SIGSTOP")
        nd = req(ctl + "/api/v1/nodes/victim-0000")
        if nd["state"] == "ready":
            hb_ready = nd["last_heartbeat_ms"]
        time.sleep(0.05)
    node = req(ctl + "/api/v1/nodes/victim-0000")
    res["death_hb_s"] = now - hb_ready / 1000
    res["death_stop_s"] = now - t_stop
    res["death_hb_after_ms"] = node["last_heartbeat_ms"] - hb_ready
    res["death_state"] = "%s on %s, retries %d, node %s (%s)" % (t["state"], ",".join(t["nodes"]) or "-",
                                                                 t["retries"], node["state"], t["reason"])
    if t["retries"] < 1 or node["state"] != "lost" or (
            t["state"] == "queued" and "victim-0000" not in (t["reason"] or "")):
        print("bench-cluster: round %d: the victim's task was not requeued for its node: %s"
              % (r, res["death_state"]), file=sys.stderr)
        res["death_bad"] = 1
    if abs(res["death_hb_after_ms"]) > 100:
        print("bench-cluster: round %d: the lost node's last_heartbeat_ms moved by %d ms after it was lost"
              % (r, res["death_hb_after_ms"]), file=sys.stderr)
    req(ctl + "/api/v1/tasks/%d/cancel" % vt, "POST", {})
    stop(victim)

    # batch: TASKS one-GPU tasks, one POST each, by the same client as the lease leg
    base = vt
    created, refused, _ = wrk(url, "batch", a.tasks)
    if refused >= a.tasks:
        raise SystemExit("bench-cluster: round %d %s: the server refused %d batch submits (created %d); see %s/server.log"
                         % (r, leg, refused, created, d))
    until("the batch tasks to end",
          lambda: not req(ctl + "/api/v1/tasks?state=active&limit=1")["tasks"], 900, 0.2)
    ts_b = tasks_above(ctl, base)
    res["batch"] = leg_rate(ts_b)
    res["batch"]["refused"] = refused

    # array: the same tasks in one request
    arr = req(ctl + "/api/v1/tasks", "POST", {"tenant_id": "bench", "name": "a", "gpu_request": 1,
                                             "command": ["true"], "array": "0-%d" % (a.tasks - 1)}, 120)
    aid = arr.get("array_id") or arr.get("id")

    def arr_done():
        c = req(ctl + "/api/v1/arrays/%d" % aid)["counts"]
        return c["queued"] + c["running"] == 0
    until("the array to end", arr_done, 900, 0.2)
    res["array"] = leg_rate(tasks_above(ctl, 0, aid))

    # lease: bare lease submits/s, the same wrk client
    created, refused, dur = wrk(url, "lease", secs=a.lease_s)
    res["lease_s"] = created / dur if dur else 0.0
    res["lease_refused"] = refused
    stop(sim)
    # a held sync whose agent has gone is answered at its wait's end (2 s);
    # a SIGTERM before that aborts the server (see the docs' section)
    time.sleep(2.5)
    stop(srv)
    if srv.returncode != 0:
        print("bench-cluster: round %d: the server exited %d on SIGTERM; see %s/server.log"
              % (r, srv.returncode, d), file=sys.stderr)
        res["server_rc"] = srv.returncode
    # d stays until the end of the run: on a file system without a journal
    # (ext4 as ext2 here) a freed inode is not reused for a minute or more,
    # and every mkdir of the next leg (a directory per task started) walked
    # past the tens of thousands this leg's removal would free: 40 % of the
    # next server's main thread in perf, whichever leg came second
    return res


def med(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def stat(v, f):
    return ("%s [%s-%s]" % (f, f, f)) % (med(v), min(v), max(v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--idle", type=int, default=30)
    ap.add_argument("--lease-s", type=int, default=5)
    ap.add_argument("--legs", default="plain,tls", help="plain, tls, base, basetls: the order of odd rounds (even rounds "
                    "run them backwards)")
    ap.add_argument("--base-build", default="", help="the build of legs base and basetls (plain and tls, on these "
                    "binaries)")
    ap.add_argument("--gpu-poll-ms", type=int, default=0, help="the server's gpus.poll_ms (its agents read their "
                    "GPUs that often); 0: its default")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    a.base_build = os.path.abspath(a.base_build) if a.base_build else ""
    legs = [x for x in a.legs.split(",") if x]
    if not legs or any(x not in ("plain", "tls", "base", "basetls") for x in legs) or len(set(legs)) != len(legs):
        raise SystemExit("bench-cluster: --legs: a list of plain, tls, base and basetls")
    if ("base" in legs or "basetls" in legs) != bool(a.base_build):
        raise SystemExit("bench-cluster: legs base, basetls and --base-build go together")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="gp-bcluster-", dir="/tmp")
    fs = subprocess.run(["stat", "-f", "-c", "%T", tmp], capture_output=True, text=True).stdout.strip()
    print("bench-cluster: %d nodes x 8 GPUs (one gpupool agent --sim-nodes %d) + 1 victim node, one server "
          "(gpus.backend none, store.sync default, data in %s: %s); %d one-GPU tasks `true` per leg; "
          "wrk -t1 -c8; idle %d s; %d rounds of %s; %d cores, load average %s"
          % (a.nodes, a.nodes, "/tmp", fs, a.tasks, a.idle, a.rounds, " then ".join(legs), os.cpu_count(),
             open("/proc/loadavg").read().split()[0]), flush=True)
    rows = {leg: [] for leg in legs}
    try:
        for r in range(1, a.rounds + 1):
            # the legs' order turns every round (A B, B A, ...): a leg that runs
            # second in a round was seen slower whatever it ran (the first one's
            # writeback and caches), so each leg goes first as often
            for leg in (legs if r % 2 else legs[::-1]):
                x = one_round(a, r, tmp, leg)
                rows[leg].append(x)
                print("  round %d/%d %-7s: join %.1f s; lease %.0f/s; batch %.0f tasks/s (%d/%d succeeded, %d refused), "
                      "array %.0f tasks/s (%d/%d succeeded); idle server %.2f%%, agent %.2f%%; death->queued %.2f s after "
                      "the last heartbeat, %.2f s after SIGSTOP: %s"
                      % (r, a.rounds, leg, x["join_s"], x["lease_s"], x["batch"]["tasks_s"], x["batch"]["ok"],
                         x["batch"]["n"], x["batch"]["refused"], x["array"]["tasks_s"], x["array"]["ok"],
                         x["array"]["n"], x["idle_server_pct"], x["idle_agent_pct"], x["death_hb_s"],
                         x["death_stop_s"], x["death_state"]),
                      file=sys.stderr, flush=True)
    finally:
        for p in procs:
            stop(p, signal.SIGKILL if p.args[0] == "wrk" else signal.SIGTERM)
        shutil.rmtree(tmp, ignore_errors=True)

    def goal(good):
        return "MET" if good else "MISSED"

    def figures(rs):
        def col(f):
            return [f(x) for x in rs]
        lease = col(lambda x: x["lease_s"])
        bt = col(lambda x: x["batch"]["tasks_s"])
        at = col(lambda x: x["array"]["tasks_s"])
        ratio_b = [b / l for b, l in zip(bt, lease)]
        idle = col(lambda x: x["idle_server_pct"])
        hb = col(lambda x: x["death_hb_s"])
        return [
            ("join: %d nodes ready, s" % a.nodes, stat(col(lambda x: x["join_s"]), "%.1f"), ""),
            ("lease submits/s (wrk -t1 -c8)", stat(lease, "%.0f"), ""),
            ("batch submits/s, same client (server's submitted_at)",
             stat(col(lambda x: x["batch"]["submits_s"]), "%.0f"), ""),
            ("batch tasks/s, first submit -> last end", stat(bt, "%.0f"), ""),
            ("  over lease submits/s (same round)", stat(ratio_b, "%.2f"), "0.5: " + goal(med(ratio_b) >= 0.5)),
            ("array tasks/s (one POST --array), submit -> last end", stat(at, "%.0f"), ""),
            ("  over lease submits/s (same round)", stat([b / l for b, l in zip(at, lease)], "%.2f"), ""),
            ("server CPU, %d idle nodes (heartbeat_s 2), %% of a core" % a.nodes, stat(idle, "%.2f"),
             "5%%: %s" % goal(med(idle) < 5)),
            ("agent CPU (%d simulated nodes, one process), %% of a core" % a.nodes,
             stat(col(lambda x: x["idle_agent_pct"]), "%.2f"), ""),
            ("node death -> task queued, from its last heartbeat, s", stat(hb, "%.2f"),
             "11 s: %s" % goal(max(hb) <= 11)),
            ("  from SIGSTOP of its agent, s", stat(col(lambda x: x["death_stop_s"]), "%.2f"), ""),
        ]
    table = {leg: figures(rows[leg]) for leg in legs}
    print("median [min-max] over %d rounds; goals: batch/lease at least 0.5, idle CPU under 5%%, death within 11 s"
          % a.rounds)
    print("%-56s" % "figure" + "".join(" %24s %-10s" % (leg + " median [min-max]", "goal") for leg in legs))
    for i, (name, _, _) in enumerate(table[legs[0]]):
        print("%-56s" % name + "".join(" %24s %-10s" % (table[leg][i][1], table[leg][i][2]) for leg in legs))
    bad = False
    for leg in legs:
        ok = sum(x["batch"]["ok"] + x["array"]["ok"] for x in rows[leg])
        total = sum(x["batch"]["n"] + x["array"]["n"] for x in rows[leg])
        print("%s: tasks succeeded: %d of %d; requeued with the node named: %d of %d rounds"
              % (leg, ok, total, sum(1 for x in rows[leg] if not x.get("death_bad")), len(rows[leg])))
        bad |= ok != total or any(x.get("death_bad") for x in rows[leg])
    print("published figures, NOT measured here (other systems, other hardware):")
    print("  KAI Scheduler: 4,000 jobs on 500 nodes in 397 s (about 10 jobs/s)")
    print("  Apache YuniKorn: 427 pods/s on 2,000 nodes")
    print("  Slurm, tuned: 500 jobs/s")
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
