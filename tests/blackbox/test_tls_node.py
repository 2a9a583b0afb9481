"""Black-box tests of node certificates and the agent's own port over TLS
(issue 22: "curl --cacert and openssl s_client work against every port";
plaintext only for loopback or an explicit, logged opt-out).  A real server
(its generated CA in DATA_DIR/tls) and real `gpupool agent` processes: the
agent makes its key, the server signs a certificate for it at the join, and
the agent's status port serves it.  What is asserted is what a client sees:
curl and openssl against the port, with the cluster's CA and with another
one, plain HTTP from loopback and from a network namespace, and the files.

Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build \\
     /usr/bin/python3 -m pytest -q tests/blackbox/test_tls_node.py
"""
import json
import os
import re
import socket
import ssl
import stat
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from apiutil import wait_for
from clusterutil import PY, TOKEN, cluster, server_config, sim_gpus
from netnsutil import veth_netns
from test_tls_cluster import ca_hash_of, https_url, make_evil_pki, openssl, pinned, server_ca

pytestmark = pytest.mark.e2e
assert cluster  # a fixture, imported so that it applies here


def health(a):
    return requests.get("http://127.0.0.1:%d/health" % a.port, timeout=5).json()


def node_file(a, name):
    return os.path.join(a.data_dir, "tls", name)


def wait_issued(a):
    def issued():
        try:
            return health(a).get("listen_tls") == "issued"
        except requests.RequestException:
            return False    # not listening yet (an agent just started again)
    wait_for(issued, 20, "the node certificate of %s:\n%s" % (a.name, a.log()))


def curl(url, cacert, netns=None):
    argv = ["curl", "-sS", "--max-time", "10", "--cacert", str(cacert), url]
    if netns:
        argv = ["ip", "netns", "exec", netns] + argv
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def s_client(host, port, cafile):
    r = subprocess.run(["openssl", "s_client", "-connect", "%s:%d" % (host, port), "-CAfile", str(cafile),
                        "-verify_return_error", "-verify_ip", host, "-brief"],
                       input="", capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


def not_after(pem_path):
    out = openssl("x509", "-in", str(pem_path), "-noout", "-enddate").decode()
    return subprocess.run(["date", "-d", out.split("=", 1)[1].strip(), "+%s"], capture_output=True,
                          text=True, check=True).stdout.strip()


def pinned_agent(cluster, s, name, **kw):
    return cluster.agent(name, server_url=https_url(s), token=pinned(TOKEN, ca_hash_of(server_ca(s))), **kw)


def test_the_agent_port_serves_a_certificate_of_the_cluster_ca_to_curl_and_openssl(cluster, tmp_path):
    s = cluster.start_server()
    a = pinned_agent(cluster, s, "gpu-a")
    wait_issued(a)
    # the node's address is https://, and the server issued the certificate (its log says for what)
    assert cluster.node("gpu-a")["address"] == "https://127.0.0.1:%d" % a.port
    assert "node gpu-a: certificate issued for loopback only" in s.full_log()
    # curl and openssl verify the agent's port against the server's CA file
    r = curl("https://127.0.0.1:%d/health" % a.port, server_ca(s))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["node"] == "gpu-a"
    rc, out = s_client("127.0.0.1", a.port, server_ca(s))
    assert rc == 0 and "Verification: OK" in out, out
    # another CA: both refuse it
    evil_ca, _, _ = make_evil_pki(tmp_path / "evil")
    r = curl("https://127.0.0.1:%d/health" % a.port, evil_ca)
    assert r.returncode == 60, (r.returncode, r.stderr)
    rc, out = s_client("127.0.0.1", a.port, evil_ca)
    assert rc != 0 and "verify" in out.lower(), out
    # the key never left the node: it is 0600 there and the certificate holds only its public half
    st = os.stat(node_file(a, "node.key"))
    assert stat.S_IMODE(st.st_mode) == 0o600
    pub_crt = openssl("x509", "-in", node_file(a, "node.crt"), "-noout", "-pubkey")
    pub_key = openssl("pkey", "-in", node_file(a, "node.key"), "-pubout")
    assert pub_crt == pub_key
    # plain HTTP from loopback still works (the CLI on the node, health checks)
    assert requests.get("http://127.0.0.1:%d/v1/status" % a.port, timeout=5).json()["node"] == "gpu-a"


def test_an_agent_stopped_between_the_writes_of_its_certificate_starts_again_and_gets_a_new_one(cluster, tmp_path):
    # a new certificate's key is renamed into place before the certificate: killed between the
    # two, the agent left a pair that does not load, and could not start again (CI saw it exit
    # with "cannot listen on ...: expected IPv4ADDR:PORT")
    s = cluster.start_server()
    a = pinned_agent(cluster, s, "gpu-a")
    wait_issued(a)
    first = open(node_file(a, "node.crt")).read()
    a.stop()
    key = node_file(a, "node.key")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)
    os.chmod(key, 0o600)
    a.start()
    wait_issued(a)
    assert a.running()
    assert open(node_file(a, "node.crt")).read() != first
    assert open(node_file(a, "node.crt.torn")).read() == first and os.path.exists(key + ".torn")
    assert "does not load with" in a.log() and "a new certificate is asked for" in a.log()
    assert curl("https://127.0.0.1:%d/health" % a.port, server_ca(s)).returncode == 0
    cluster.wait_node("gpu-a", "ready", agent=a)


def test_a_machine_that_joins_again_gets_a_new_certificate_and_one_near_its_end_is_renewed(cluster, tmp_path):
    s = cluster.start_server()
    a = pinned_agent(cluster, s, "gpu-a")
    wait_issued(a)
    first = open(node_file(a, "node.crt")).read()
    # joining again (node.json gone, same machine): a new credential, so a new certificate
    a.stop()
    os.unlink(os.path.join(a.data_dir, "node.json"))
    a.start()
    wait_for(lambda: open(node_file(a, "node.crt")).read() != first, 20, "a new certificate:\n" + a.log())
    wait_issued(a)
    assert curl("https://127.0.0.1:%d/health" % a.port, server_ca(s)).returncode == 0
    # node.crt holds the node's certificate alone: its reload names no CA (it has none to name)
    reloads = [ln for ln in a.log().splitlines() if "tls: certificate reloaded from" in ln]
    assert reloads, a.log()
    assert not [ln for ln in reloads if "CA" in ln], reloads
    # a certificate of the CA that ends in 2 days (made here with the CA's key): renewed at the next start
    a.stop()
    d = tmp_path / "short"
    d.mkdir()
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-new", "-key", node_file(a, "node.key"), "-subj", "/CN=short", "-out", str(d / "n.csr"))
    openssl("x509", "-req", "-in", str(d / "n.csr"), "-CA", server_ca(s),
            "-CAkey", os.path.join(s.data_dir, "tls", "ca.key"), "-CAcreateserial", "-days", "2",
            "-out", node_file(a, "node.crt"), "-extfile", str(d / "ext.cnf"))
    short = int(not_after(node_file(a, "node.crt")))
    a.start()
    wait_for(lambda: int(not_after(node_file(a, "node.crt"))) > short + 80 * 86400, 20,
             "the renewed certificate:\n" + a.log())
    assert "ends within 30 days" in a.log()
    wait_for(lambda: curl("https://127.0.0.1:%d/health" % a.port, server_ca(s)).returncode == 0, 10,
             "the renewed certificate served")


def test_a_certificate_needs_the_node_own_credential_and_a_good_key(cluster):
    s = cluster.start_server()
    a = pinned_agent(cluster, s, "gpu-a")
    wait_issued(a)
    url = https_url(s) + "/agent/v1/cert"
    pub = openssl("pkey", "-in", node_file(a, "node.key"), "-pubout").decode()
    body = {"node": "gpu-a", "public_key": pub}
    # no credential, another node's name, a credential of no node: 401, nothing issued
    assert requests.post(url, json=body, verify=server_ca(s), timeout=10).status_code == 401
    bad = "gpn_" + "0" * 64
    r = requests.post(url, json=body, headers={"Authorization": "Bearer " + bad}, verify=server_ca(s), timeout=10)
    assert r.status_code == 401
    cred = a.credential()
    r = requests.post(url, json=dict(body, node="gpu-b"), headers={"Authorization": "Bearer " + cred},
                      verify=server_ca(s), timeout=10)
    assert r.status_code == 401
    # bad input: 400 with a reason
    r = requests.post(url, json=dict(body, public_key="-----BEGIN PUBLIC KEY-----\nxx\n-----END PUBLIC KEY-----\n"),
                      headers={"Authorization": "Bearer " + cred}, verify=server_ca(s), timeout=10)
    assert r.status_code == 400 and "public_key" in r.text
    # the node's own credential: a certificate for its key, of the cluster's CA
    r = requests.post(url, json=body, headers={"Authorization": "Bearer " + cred}, verify=server_ca(s), timeout=10)
    assert r.status_code == 200, r.text
    ans = r.json()
    assert ans["ca"] == open(server_ca(s)).read() and "127.0.0.1" in ans["names"]


@pytest.fixture
def netns():
    """(namespace, root address, namespace address), cleaned up at the end."""
    with veth_netns("gpntls", 215) as (ns, _, root_addr, ns_addr):
        yield ns, root_addr, ns_addr


def test_off_loopback_the_agent_port_is_tls_only_unless_the_logged_opt_out(cluster, netns):
    ns, root_addr, ns_addr = netns
    s = cluster.start_server(config_text=None, listen_host="0.0.0.0")
    tok = pinned(TOKEN, ca_hash_of(server_ca(s)))
    url = "https://%s:%d" % (root_addr, s.port)
    a = cluster.agent("gpu-a", netns=ns, listen_host=ns_addr, server_url=url, token=tok)
    wait_for(lambda: "node gpu-a: certificate issued for %s" % ns_addr in s.full_log(), 20,
             "the certificate:\n" + a.log())
    # from the root namespace (off the agent's loopback): plain HTTP is refused before anything is read
    r = requests.get("http://%s:%d/health" % (ns_addr, a.port), timeout=10)
    assert r.status_code == 400 and "tls_required" in r.text
    # TLS verified against the cluster's CA, by the node's address
    wait_for(lambda: curl("https://%s:%d/health" % (ns_addr, a.port), server_ca(s)).returncode == 0, 15,
             "the agent's port over verified TLS")
    rc, out = s_client(ns_addr, a.port, server_ca(s))
    assert rc == 0 and "Verification: OK" in out, out
    # a node off the server's machine that claims one of the server's own addresses gets no certificate naming it
    # (its key must not pass for the server to other agents)
    pub = openssl("pkey", "-in", node_file(a, "node.key"), "-pubout").decode()
    script = (
        "import json, ssl, sys, time, urllib.request\n"
        "ctx = ssl.create_default_context(cafile=%r)\n"
        "def post(path, body, bearer):\n"
        "    req = urllib.request.Request(%r + path, data=json.dumps(body).encode(), method='POST',\n"
        "        headers={'Content-Type': 'application/json', 'Authorization': 'Bearer ' + bearer})\n"
        "    return json.loads(urllib.request.urlopen(req, context=ctx, timeout=10).read())\n"
        "j = post('/agent/v1/join', {'name': 'evil-1', 'version': 'x', 'address': 'https://%s:9', 'labels': {},\n"
        "         'backend': 'sim', 'machine': 'ab' * 32, 'seq': int(time.time() * 1e6), 'gpus': []}, %r)\n"
        "c = post('/agent/v1/cert', {'node': 'evil-1', 'public_key': %r}, j['credential'])\n"
        "sys.stdout.write(json.dumps(c['names']))\n") % (str(server_ca(s)), url, root_addr, TOKEN, pub)
    out = subprocess.run(["ip", "netns", "exec", ns, PY, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["localhost", "127.0.0.1", "::1"]
    assert "node evil-1: its certificate does not name %s" % root_addr in s.full_log()
    # the opt-out: logged, shown in /health, and plain HTTP from off loopback works
    b = cluster.agent("gpu-b", netns=ns, listen_host=ns_addr, server_url=url, token=tok,
                      extra=["--insecure-listen-plaintext"])
    assert "--insecure-listen-plaintext" in b.log()
    h = requests.get("http://%s:%d/health" % (ns_addr, b.port), timeout=10).json()
    assert h["listen_plaintext_any"] is True and h["node"] == "gpu-b"


# ---- the gateway's traffic to a model replica on an agent node ------------------

SERVE_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gw_serve_main.py")


class Capture:
    """Every frame on one interface (AF_PACKET), as a sniffer on the wire between the namespaces sees it."""

    def __init__(self, ifname):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        self.sock.bind((ifname, 0))
        self.sock.settimeout(0.2)
        self.data = bytearray()
        self.stopping = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stopping:
            try:
                self.data += self.sock.recv(65535)
            except socket.timeout:
                continue
            except OSError:
                return

    def stop(self):
        self.stopping = True
        self.t.join(5)
        # what went by before now is queued on the socket even when the thread
        # lagged (a loaded machine: CI once kept only the first frame): drain it
        self.sock.setblocking(False)
        while True:
            try:
                self.data += self.sock.recv(65535)
            except (BlockingIOError, InterruptedError):
                break
        self.sock.close()
        return bytes(self.data)


@pytest.fixture
def veth():
    """(namespace, root-side interface, root address, namespace address)."""
    with veth_netns("gprly", 216) as v:
        yield v


def health_through(c):
    """GET /health on connection c (the relay's far end answers), and all it answers until it closes."""
    c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    out = b""
    while True:
        b = c.recv(65536)
        if not b:
            return out
        out += b


def relay_line(a, name, token, cafile, ns_addr):
    ctx = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection((ns_addr, a.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=ns_addr) as c:
            c.sendall(("GPUPOOL-RELAY %s %s\n" % (name, token)).encode())
            return health_through(c)


def replica_on_agent(cluster, veth, gateway=""):
    """A server (TLS, listening off loopback) whose model m1 is served on an
    agent in the namespace, answering: (server, agent, chat)."""
    ns, v0, root_addr, ns_addr = veth
    s = cluster.start_server(server_config(extra=(
        "gateway:\n" + gateway +
        "  models:\n"
        "    - name: m1\n"
        "      serve: {command: [\"/usr/bin/python3\", \"%s\", \"{port}\"], gpus: 1, memory_mb: 2000,\n"
        "              port: auto, ready: \"/health\"}\n" % SERVE_MAIN)), listen_host="0.0.0.0")
    a = cluster.agent("infer-1", gpus=sim_gpus(2, name="NVIDIA L4", memory_mb=23034), netns=ns, listen_host=ns_addr,
                      server_url="https://%s:%d" % (root_addr, s.port), token=pinned(TOKEN, ca_hash_of(server_ca(s))))

    def chat(text):
        return s.api("POST", "/v1/chat/completions",
                     json={"model": "m1", "messages": [{"role": "user", "content": text}], "max_tokens": 4})
    wait_for(lambda: chat("warm up").status_code == 200, 60, "the gateway to answer through the replica:\n" +
             s.log()[-3000:])
    assert "reached over TLS through its agent https://%s:%d" % (ns_addr, a.port) in s.full_log()
    return s, a, chat


def test_a_replica_on_an_agent_node_is_reached_over_tls_through_its_agent(cluster, veth):
    ns, v0, root_addr, ns_addr = veth
    s, a, chat = replica_on_agent(cluster, veth)
    # a prompt and its answer, with a sniffer on the wire between the server and the node
    cap = Capture(v0)
    try:
        r = chat("prompt-secret-5d1c4e")
        assert r.status_code == 200, r.text
        assert "hello from served-" in r.json()["choices"][0]["message"]["content"]
    finally:
        wire = cap.stop()
    runs = os.path.join(a.data_dir, "runs")
    name = os.listdir(runs)[0]
    with open(os.path.join(runs, name, "spec.json")) as f:
        env = dict(kv.split("=", 1) for kv in json.load(f)["env"])
    token = env["SERVE_RELAY_TOKEN"]
    assert len(wire) > 300 and b"\x17\x03\x03" in wire  # TLS application data went by
    for clear in (b"prompt-secret-5d1c4e", b"hello from served-", b"chat/completions", token.encode()):
        assert clear not in wire, clear
    # the relay: only the run's own port, only with its token, only over TLS off loopback
    ok = relay_line(a, name, token, server_ca(s), ns_addr)
    assert ok.startswith(b"HTTP/1.") and b" 200 " in ok.split(b"\r\n")[0] and b'"status":"ok"' in ok, ok
    bad = relay_line(a, name, "0" * 64, server_ca(s), ns_addr)
    assert b" 502 " in bad.split(b"\r\n")[0], bad
    bad = relay_line(a, "99.1.0", token, server_ca(s), ns_addr)
    assert b" 502 " in bad.split(b"\r\n")[0], bad
    with socket.create_connection((ns_addr, a.port), timeout=10) as c:
        c.sendall(("GPUPOOL-RELAY %s %s\n" % (name, token)).encode())
        assert b"tls_required" in c.recv(4096)


def test_the_servers_relay_carries_only_its_own_gateways_connections(cluster, veth):
    # the relay's port is on the server's loopback, where any local process (a tenant's task on a
    # server with GPUs) may connect: carried, it would reach the replica past the gateway's keys,
    # quotas and bills, and its idle connections would hold the relay's slots for 15 minutes
    cap = 4
    s, a, chat = replica_on_agent(cluster, veth, gateway="  max_upstream_connections: %d\n" % cap)
    port = int(re.search(r"gateway side 127\.0\.0\.1:(\d+)", s.full_log()).group(1))
    threads = lambda: len(os.listdir("/proc/%d/task" % s.proc.pid))  # noqa: E731
    before = threads()
    # a request of the test's own straight to the relay: refused at once, the replica never sees it
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        out = c.recv(4096)
        assert b" 502 " in out.split(b"\r\n")[0] and b"only this server's gateway may use its relay" in out, out
        try:
            out = health_through(c)
        except OSError:
            out = b""       # reset: the server closed it
    assert b'"status":"ok"' not in out, out
    held = []
    try:
        # 40 more, held open from this side: each is refused and closed at once, none holds a
        # thread or a slot, and the gateway's own requests (more at once than its cap) all go through
        for _ in range(40):
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            held.append(c)
            c.settimeout(10)
            got = c.recv(4096)
            assert b" 502 " in got.split(b"\r\n")[0], got
            c.settimeout(10)
            rest = c.recv(4096)
            assert rest == b"" or rest.startswith(b"{"), rest  # then closed by the server
        assert threads() <= before + cap, (before, threads())
        with ThreadPoolExecutor(8) as ex:
            codes = list(ex.map(lambda i: chat("many-%d" % i).status_code, range(8)))
        assert codes == [200] * 8, codes
    finally:
        for c in held:
            c.close()
    assert "not this server's gateway, refused" in s.full_log()
    assert "more are refused" not in s.full_log()  # the gateway never met the cap


def test_a_relay_line_that_stalls_counts_against_its_address_until_it_is_read(cluster):
    # anyone who reaches the agent's port may send the relay's magic and then nothing: until its
    # line is read and its token checked, such a connection counts as any other client's
    # (PER_IP, 32 from one address), so stalled ones cannot each take a thread without bound
    s = cluster.start_server()
    a = pinned_agent(cluster, s, "gpu-a")
    threads = lambda: len(os.listdir("/proc/%d/task" % a.proc.pid))  # noqa: E731
    before = threads()
    held, refused, other = [], 0, []
    try:
        for _ in range(80):     # quickly: well within the 5 s a line has
            c = socket.create_connection(("127.0.0.1", a.port), timeout=10)
            held.append(c)
            try:
                c.sendall(b"GPUPOOL-RELAY ")
            except OSError:
                pass            # refused and closed already
        time.sleep(1)
        for c in held:
            c.settimeout(0.05)
            try:
                got = c.recv(4096)
            except socket.timeout:
                continue        # held: its line is being waited for
            except OSError:
                got = b""
            if b" 429 " in got.split(b"\r\n")[0] and b"too_many_connections" in got:
                refused += 1
            else:
                other.append(got[:200])
        # 32 from one address at once: the rest are refused at the door
        assert refused >= 40 and not other, (refused, other[:3], before, threads())
        assert threads() <= before + 40, (before, threads())
        # each stalled one gets its answer when its line's time is up, and is closed
        c = held[0]
        c.settimeout(15)
        got = c.recv(4096)
        assert b" 502 " in got.split(b"\r\n")[0] and b"GPUPOOL-RELAY TASK.EPOCH.RANK TOKEN" in got, got
    finally:
        for c in held:
            c.close()
    # the address's count given back: a client of the status API is served again
    wait_for(lambda: requests.get("http://127.0.0.1:%d/health" % a.port, timeout=5).status_code == 200, 15,
             "the agent's /health after the stalled relays")
    assert a.running()
