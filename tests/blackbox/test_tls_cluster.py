"""Black-box tests of the agent channel under TLS (issue 22): "no secret
(token, credential, task env, log) crosses a network in clear, and an agent
acts only on what its server sent".  A real control plane (which serves TLS
on its port with the CA it made in DATA_DIR/tls at first start) and real
`gpupool agent` processes on loopback, with relays in the middle:

- a plain TCP relay that records every byte both ways (a sniffer on the wire;
  its recording is also replayed to the server);
- a relay that terminates TLS with its own certificate, signed by a CA made
  here with openssl (someone in the middle), which either forwards to the
  real server or answers as a server itself, with a forged `start`.

What is asserted is what an attacker would see or get: the relay's recorded
bytes, the server's list of nodes and its log, the processes a forged start
would make (a file it would create).  The CA hash is computed here with
openssl, as kubeadm's documentation computes discovery-token-ca-cert-hash.

Run: GPUPOOL_BIN=$PWD/build/gpupool GPUPOOL_BUILD=$PWD/build \\
     /usr/bin/python3 -m pytest -q tests/blackbox/test_tls_cluster.py
"""
import hashlib
import json
import os
import socket
import ssl
import subprocess
import threading
import time

import pytest
import requests

from apiutil import reap_supervisors, wait_for
from clusterutil import FIRST_SYNC_S, PY, TOKEN, agent_post, cluster, log_has, now_us, sim_gpus
from conftest import free_port
from netnsutil import veth_netns

pytestmark = pytest.mark.e2e
assert reap_supervisors and cluster  # fixtures, imported so that they apply here


# ---- certificates and hashes -------------------------------------------------

def openssl(*args, stdin=None):
    r = subprocess.run(["openssl"] + list(args), input=stdin, capture_output=True, timeout=30)
    assert r.returncode == 0, (args, r.stderr.decode())
    return r.stdout


def ca_hash_of(pem_path):
    """sha256:<hex> of the CA's DER SubjectPublicKeyInfo (kubeadm's recipe:
    openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum)."""
    pub = openssl("x509", "-pubkey", "-noout", "-in", str(pem_path))
    der = openssl("pkey", "-pubin", "-outform", "der", stdin=pub)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def make_evil_pki(d):
    """A CA of our own and a certificate for 127.0.0.1 it signs: what someone
    in the middle presents.  Returns (ca.crt, server.crt, server.key)."""
    d.mkdir(exist_ok=True)
    ca_key, ca_crt = d / "ca.key", d / "ca.crt"
    key, csr, crt, ext = d / "s.key", d / "s.csr", d / "s.crt", d / "ext.cnf"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(ca_key),
            "-out", str(ca_crt), "-subj", "/CN=gpupool-ca", "-days", "2")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
            "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(crt), "-days", "2", "-extfile", str(ext))
    return ca_crt, crt, key


def server_ca(s):
    return os.path.join(s.data_dir, "tls", "ca.crt")


def https_url(s):
    return "https://127.0.0.1:%d" % s.port


def pinned(token, ca_hash):
    return token + "." + ca_hash[len("sha256:"):]


# ---- relays ------------------------------------------------------------------

class Relay:
    """Listens on 127.0.0.1:port; every connection is one entry of .conns:
    {"c2s": bytearray, "s2c": bytearray, "handshake": None|True|False} (for a
    TLS-terminating relay, c2s holds what the client sent after the handshake,
    decrypted).  Modes: "tcp" (bytes pass as they are), "mitm" (TLS ends here
    with our certificate and goes on to the real server over TLS), "fake"
    (TLS ends here and we answer as a server: our own CA, a join answer, and
    a sync answer that starts `forged`)."""

    def __init__(self, target_port, mode="tcp", cert=None, key=None, ca_pem=None, forged=None):
        self.target = target_port
        self.mode = mode
        self.ca_pem = ca_pem
        self.forged = forged
        self.conns = []
        self.lock = threading.Lock()
        self.port = free_port()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(64)
        self.ctx = None
        if mode != "tcp":
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(str(cert), str(key))
        self.stopping = False
        self.threads = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)

    @property
    def url(self):
        return "https://127.0.0.1:%d" % self.port

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            rec = {"c2s": bytearray(), "s2c": bytearray(), "handshake": None}
            with self.lock:
                self.conns.append(rec)
            t = threading.Thread(target=self._serve, args=(c, rec), daemon=True)
            t.start()
            self.threads.append(t)

    def _pump(self, src, dst, buf):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                with self.lock:
                    buf += b
                dst.sendall(b)
        except OSError:
            pass
        for s in (dst, src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _serve(self, c, rec):
        c.settimeout(30)
        if self.ctx:
            try:
                c = self.ctx.wrap_socket(c, server_side=True)
                rec["handshake"] = True
            except (ssl.SSLError, OSError) as e:
                rec["handshake"] = False
                rec["error"] = str(e)
                c.close()
                return
        if self.mode == "fake":
            return self._fake(c, rec)
        try:
            up = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            if self.mode == "mitm":
                cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                cctx.check_hostname = False
                cctx.verify_mode = ssl.CERT_NONE
                up = cctx.wrap_socket(up, server_hostname="127.0.0.1")
        except OSError:
            c.close()
            return
        t = threading.Thread(target=self._pump, args=(up, c, rec["s2c"]), daemon=True)
        t.start()
        self._pump(c, up, rec["c2s"])
        t.join(10)
        c.close()
        up.close()

    def _fake(self, c, rec):
        """Answer every request as a server would, with a forged start."""
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    b = c.recv(65536)
                    if not b:
                        return
                    with self.lock:
                        rec["c2s"] += b
                    buf += b
                head, _, rest = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                n = 0
                for ln in lines[1:]:
                    if ln.lower().startswith("content-length:"):
                        n = int(ln.split(":", 1)[1])
                while len(rest) < n:
                    b = c.recv(65536)
                    if not b:
                        return
                    with self.lock:
                        rec["c2s"] += b
                    rest += b
                body, buf = rest[:n], rest[n:]
                if path == "/agent/v1/ca":
                    ans = {"ca": self.ca_pem, "ca_hash": "sha256:" + "0" * 64}
                elif path == "/agent/v1/join":
                    ans = {"node": json.loads(body)["name"], "credential": "gpn_" + "ab" * 32, "heartbeat_s": 1,
                           "node_timeout_s": 10}
                else:
                    seq = json.loads(body).get("seq", 1)
                    ans = {"seq": seq, "heartbeat_s": 1, "want_full": False, "ack": [], "stop": [],
                           "log_offsets": [], "start": [self.forged]}
                out = json.dumps(ans).encode()
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                          % len(out) + out)
        except (OSError, ValueError, KeyError):
            pass
        finally:
            c.close()

    def client_bytes(self):
        with self.lock:
            return b"".join(bytes(r["c2s"]) for r in self.conns)

    def all_bytes(self):
        with self.lock:
            return b"".join(bytes(r["c2s"]) + bytes(r["s2c"]) for r in self.conns)

    def close(self):
        self.stopping = True
        try:
            self.sock.close()
        except OSError:
            pass


@pytest.fixture
def relays():
    made = []
    yield made
    for r in made:
        r.close()


def forged_start(marker):
    """A start an attacker would add to a sync answer: a command that leaves marker behind."""
    return {"task": 4242, "epoch": 1, "rank": 0, "nnodes": 1, "master_addr": "127.0.0.1", "master_port": 29742,
            "tenant": "default", "argv": ["/bin/sh", "-c", "id > %s" % marker], "env": {}, "workdir": "",
            "cuda_visible_devices": "0", "gpus": "gpu-a:0", "timeout_s": 0, "kill_grace_s": 1,
            "preempt_grace_s": 1, "max_log_bytes": 1048576, "run_as": "", "array_id": 0, "array_index": 0}


def health(a):
    return requests.get(a.status_url() + "/health", timeout=5).json()


def server_joins(s):
    return s.full_log().count("joined (")


# ---- joining over https --------------------------------------------------------

def test_join_over_https_with_the_pinned_token_and_a_restart_uses_the_kept_ca(cluster):
    s = cluster.start_server()
    want = ca_hash_of(server_ca(s))
    # the open route gives the CA, over verified TLS, and the hash openssl computes
    r = requests.get(https_url(s) + "/agent/v1/ca", verify=server_ca(s), timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["ca_hash"] == want
    assert r.json()["ca"] == open(server_ca(s)).read()
    # `gpupool ca` prints it (over https with --cacert)
    out = s.cli("--api", https_url(s), "--cacert", server_ca(s), "ca")
    assert out.returncode == 0 and out.stdout.strip() == want, (out.stdout, out.stderr)
    # without the CA, https from the CLI is refused by the check (exit 3, nothing sent)
    out = s.cli("--api", https_url(s), "ca")
    assert out.returncode == 3 and "--cacert" in out.stderr, (out.stdout, out.stderr)
    a = cluster.agent("gpu-a", server_url=https_url(s), token=pinned(TOKEN, want))
    log_has(a.log_path, "joined as gpu-a")
    assert open(os.path.join(a.data_dir, "ca.crt")).read() == open(server_ca(s)).read()
    assert health(a)["tls"] == "verified" and "warning" not in health(a)
    # a restart, with no token: the kept CA checks the server
    a.stop()
    a.token = None
    a.start()
    log_has(a.log_path, "against CA " + want)
    hb = cluster.node("gpu-a")["last_heartbeat_ms"]
    # 30 s: under TSan, with the suite in parallel, a sync that fails puts the
    # agent in backoff, and a few of those passed 10 s once (the agent does sync)
    wait_for(lambda: cluster.node("gpu-a")["last_heartbeat_ms"] > hb + 500, 30, "syncs of the restarted agent")
    assert a.running()


def test_created_token_carries_the_ca_hash_and_joins(cluster):
    s = cluster.start_server()
    want = ca_hash_of(server_ca(s))
    out = s.cli("--api", https_url(s), "--cacert", server_ca(s), "join-token", "create")
    assert out.returncode == 0, out.stderr
    tok = out.stdout.strip()
    assert tok.startswith("gpj_") and tok.endswith("." + want[7:]), tok
    r = s.api("POST", "/admin/join-tokens", json={})
    assert r.status_code == 201 and r.json()["ca_hash"] == want and r.json()["token"].endswith(want[7:])
    cluster.agent("gpu-a", server_url=https_url(s), token=tok)
    # the server takes the token with its hash too (it hashes the secret before the '.')
    st, ans = agent_post(s.url, "/agent/v1/join", {"name": "raw-node", "version": "t", "address": "", "labels": {},
                                                    "backend": "sim", "gpus": [], "seq": now_us(),
                                                    "machine": "ab" * 32}, r.json()["token"])
    assert st == 200 and ans["credential"].startswith("gpn_"), (st, ans)
    st, ans = agent_post(s.url, "/agent/v1/join", {"name": "raw-node2", "version": "t", "address": "",
                                                    "labels": {}, "backend": "sim", "gpus": [], "seq": now_us(),
                                                    "machine": "cd" * 32},
                         r.json()["token"][:-1] + "x")
    assert st == 401, (st, ans)
    # GPUPOOL_CACERT does what --cacert does
    out = s.cli("--api", https_url(s), "nodes", env=s.env(GPUPOOL_CACERT=server_ca(s)))
    assert out.returncode == 0 and "gpu-a" in out.stdout, out.stderr


def test_a_kept_ca_the_token_does_not_name_is_fetched_again(cluster, tmp_path):
    s = cluster.start_server()
    evil_ca, _, _ = make_evil_pki(tmp_path / "evil")
    a = cluster.agent("gpu-a", wait=False, server_url=https_url(s), token=pinned(TOKEN, ca_hash_of(server_ca(s))))
    a.stop()
    os.makedirs(a.data_dir, exist_ok=True)
    with open(os.path.join(a.data_dir, "ca.crt"), "w") as f:     # left from another cluster
        f.write(open(evil_ca).read())
    a.start()
    cluster.wait_node("gpu-a", "ready", agent=a)
    assert open(os.path.join(a.data_dir, "ca.crt")).read() == open(server_ca(s)).read()
    assert "not the CA the join token names" in a.log()
    # without a token, a kept CA that is not the server's: every sync fails the check, nothing is sent
    a.stop()
    with open(os.path.join(a.data_dir, "ca.crt"), "w") as f:
        f.write(open(evil_ca).read())
    a.token = None
    a.start()
    log_has(a.log_path, "failed the check against the CA", timeout=FIRST_SYNC_S)
    assert a.running()


def test_https_without_a_hash_is_refused_and_ca_cert_or_skip_verify_are_explicit(cluster):
    s = cluster.start_server()
    a = cluster.agent("gpu-a", wait=False, server_url=https_url(s), token=TOKEN)
    assert a.wait_exit() == 2
    assert "checked against its CA" in a.log() and "--ca-cert" in a.log()
    assert server_joins(s) == 0
    # --ca-cert FILE instead of a hash
    b = cluster.agent("gpu-b", server_url=https_url(s), token=TOKEN, extra=["--ca-cert", server_ca(s)])
    assert health(b)["tls"] == "verified"
    # --insecure-skip-verify: works, and says so at start and in /health
    c = cluster.agent("gpu-c", server_url=https_url(s), token=TOKEN, extra=["--insecure-skip-verify"])
    h = health(c)
    assert h["tls"] == "skip-verify" and "not checked" in h["warning"], h
    assert "--insecure-skip-verify" in c.log()


def test_a_server_with_another_ca_is_refused_before_the_token_goes_out(cluster, relays, tmp_path):
    s = cluster.start_server()
    evil_ca, crt, key = make_evil_pki(tmp_path / "evil")
    # someone who answers as a server, with a CA of its own (and a forged start ready)
    marker = tmp_path / "forged-ran"
    fake = Relay(s.port, "fake", crt, key, ca_pem=open(evil_ca).read(), forged=forged_start(marker))
    relays.append(fake)
    a = cluster.agent("gpu-a", wait=False, server_url=fake.url, token=pinned(TOKEN, ca_hash_of(server_ca(s))))
    assert a.wait_exit() == 79
    assert "not the join token's" in a.log() and ca_hash_of(evil_ca) in a.log()
    # it asked for the CA and nothing else: no join, no token
    got = fake.client_bytes()
    assert got.count(b"GET /agent/v1/ca ") >= 1 and b"POST" not in got
    assert TOKEN[4:].encode() not in got and b"gpj_" not in got
    time.sleep(1)
    assert not marker.exists()
    assert not os.path.exists(os.path.join(a.data_dir, "node.json"))


# ---- someone in the middle -------------------------------------------------------

def test_a_tls_relay_in_the_middle_gets_no_token_and_no_join(cluster, relays, tmp_path):
    s = cluster.start_server()
    _, crt, key = make_evil_pki(tmp_path / "evil")
    # it ends TLS with its own certificate and passes everything on to the real server,
    # so the CA it relays is the real one: the hash matches, the certificate does not
    mitm = Relay(s.port, "mitm", crt, key)
    relays.append(mitm)
    a = cluster.agent("gpu-a", wait=False, server_url=mitm.url, token=pinned(TOKEN, ca_hash_of(server_ca(s))))
    assert a.wait_exit() == 79
    assert "not signed by that CA" in a.log(), a.log()
    # the only request it read was the CA's (no secret); after that, a handshake the agent broke
    with mitm.lock:
        conns = [dict(r, c2s=bytes(r["c2s"])) for r in mitm.conns]
    reqs = [r for r in conns if r["c2s"]]
    assert reqs and all(r["c2s"].startswith(b"GET /agent/v1/ca HTTP/1.1\r\n") for r in reqs), conns
    assert all(b"Authorization" not in r["c2s"] for r in reqs)
    assert any(r["handshake"] is False for r in conns) or any(not r["c2s"] for r in conns), conns
    assert b"gpj_" not in mitm.client_bytes() and b"/agent/v1/join" not in mitm.client_bytes()
    assert server_joins(s) == 0 and cluster.nodes() == {}


def test_a_forged_start_is_never_run_by_a_joined_agent(cluster, relays, tmp_path):
    s = cluster.start_server()
    want = ca_hash_of(server_ca(s))
    a = cluster.agent("gpu-a", server_url=https_url(s), token=pinned(TOKEN, want))
    a.stop()
    evil_ca, crt, key = make_evil_pki(tmp_path / "evil")
    marker = tmp_path / "forged-ran"
    fake = Relay(s.port, "fake", crt, key, ca_pem=open(evil_ca).read(), forged=forged_start(marker))
    relays.append(fake)
    # the joined agent (its CA and credential kept) now reaches the fake server: every sync
    # answer there would start `id > marker` as root
    a.server_url = fake.url
    a.token = None
    a.start()
    log_has(a.log_path, "failed the check against the CA", timeout=FIRST_SYNC_S)
    time.sleep(3)
    assert a.running()
    assert not marker.exists()
    assert os.listdir(os.path.join(a.data_dir, "runs")) == []
    with fake.lock:
        assert fake.conns and all(not r["c2s"] for r in fake.conns), fake.conns
    # control: the same fake server does get its start run by an agent that checks nothing
    cluster.agent("gpu-b", wait=False, server_url=fake.url, token=TOKEN, extra=["--insecure-skip-verify"])
    wait_for(lambda: marker.exists() and "uid=" in marker.read_text(), 15,
             "the forged start on the agent that checks nothing")


def test_every_server_url_of_an_agent_is_checked_against_the_same_ca(cluster, relays, tmp_path):
    s = cluster.start_server()
    evil_ca, crt, key = make_evil_pki(tmp_path / "evil")
    marker = tmp_path / "forged-ran"
    fake = Relay(s.port, "fake", crt, key, ca_pem=open(evil_ca).read(), forged=forged_start(marker))
    relays.append(fake)
    # two servers in its list: the real one first (it joins there), then one that is not
    a = cluster.agent("gpu-a", server_url=https_url(s) + "," + fake.url,
                      token=pinned(TOKEN, ca_hash_of(server_ca(s))))
    s.kill9()       # the agent moves on to the next URL
    wait_for(lambda: len(fake.conns) >= 2, 20, "the agent trying the second URL")
    log_has(a.log_path, fake.url + " failed the check against the CA")
    time.sleep(1)
    with fake.lock:
        assert all(not r["c2s"] for r in fake.conns), fake.conns
    assert not marker.exists() and os.listdir(os.path.join(a.data_dir, "runs")) == []
    # the real server back: the agent syncs with it again
    s.start()
    log_has(a.log_path, "gpu-a: synced with " + https_url(s), timeout=30)
    cluster.wait_node("gpu-a", "ready", agent=a, timeout=30)


# ---- a sniffer on the wire, and a replay of what it recorded ------------------------------

def test_a_sniffer_sees_no_token_credential_env_or_log_and_its_replay_does_nothing(cluster, relays, tmp_path):
    s = cluster.start_server()
    want = ca_hash_of(server_ca(s))
    wire = Relay(s.port, "tcp")
    relays.append(wire)
    a = cluster.agent("gpu-a", server_url="https://127.0.0.1:%d" % wire.port, token=pinned(TOKEN, want),
                      gpus=sim_gpus(1))
    cred = a.credential()
    starts = tmp_path / "starts"
    t = cluster.submit([PY, "-c", "import os; open(%r, 'a').write('x'); print('log-marker-7f3a', "
                        "os.environ['HF_TOKEN'])" % str(starts)], env={"HF_TOKEN": "secret-xyz"})
    cluster.wait_task(t["id"], "succeeded", timeout=20)
    wait_for(lambda: "log-marker-7f3a secret-xyz" in cluster.logs(t["id"]), 10, "the task's log at the server")
    time.sleep(1.5)     # a sync or two more over the wire (the log's ack)
    seen = wire.all_bytes()
    assert len(seen) > 2000 and wire.conns[0]["c2s"][:1] == b"\x16", "TLS records expected on the wire"
    for secret in (TOKEN[4:], cred[4:], "secret-xyz", "HF_TOKEN", "log-marker-7f3a", "/agent/v1/join"):
        assert secret.encode() not in seen, secret
    assert starts.read_text() == "x"
    # replay every connection's client bytes to the server: a fresh handshake each, so nothing
    joined = cluster.node("gpu-a")["joined_ms"]
    with wire.lock:
        streams = [bytes(r["c2s"]) for r in wire.conns if r["c2s"]]
    assert streams
    for b in streams:
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
            try:
                c.sendall(b)
                c.settimeout(2)
                while c.recv(65536):
                    pass
            except OSError:
                pass
    time.sleep(1.5)
    assert list(cluster.nodes()) == ["gpu-a"] and cluster.node("gpu-a")["joined_ms"] == joined
    assert server_joins(s) == 1
    # the agent's credential still works (a replayed join would have replaced it) and nothing ran again
    hb = cluster.node("gpu-a")["last_heartbeat_ms"]
    wait_for(lambda: cluster.node("gpu-a")["last_heartbeat_ms"] > hb, 10, "the agent's own syncs")
    assert a.credential() == cred and a.running()
    assert starts.read_text() == "x"


# ---- plaintext -----------------------------------------------------------------------------

def test_plaintext_off_loopback_is_refused_without_the_opt_out(cluster):
    s = cluster.start_server()
    a = cluster.agent("gpu-a", wait=False, server_url="http://192.0.2.10:%d" % s.port, token=TOKEN)
    assert a.wait_exit() == 2
    assert "in clear to http://192.0.2.10" in a.log() and "--insecure-plaintext" in a.log()
    # on loopback plaintext is fine (and says so)
    b = cluster.agent("gpu-b", token=TOKEN)
    assert health(b)["tls"] == "loopback" and "warning" not in health(b)




@pytest.fixture
def netns():
    """(namespace, root address, namespace address), cleaned up at the end."""
    with veth_netns("gptls", 214) as (ns, _, root_addr, ns_addr):
        yield ns, root_addr, ns_addr


def test_plaintext_off_loopback_only_with_the_logged_opt_out_and_https_there_is_checked(cluster, netns):
    ns, root_addr, ns_addr = netns
    s = cluster.start_server(config_text=None, listen_host="0.0.0.0")
    plain = "http://%s:%d" % (root_addr, s.port)
    # from another machine (the namespace): refused by the agent before it connects
    a = cluster.agent("gpu-a", wait=False, netns=ns, listen_host=ns_addr, server_url=plain, token=TOKEN)
    assert a.wait_exit() == 2
    assert "in clear to " + plain in a.log()
    # https:// from there: the server's certificate names its addresses, checked against the pinned CA
    b = cluster.agent("gpu-b", netns=ns, listen_host=ns_addr, server_url="https://%s:%d" % (root_addr, s.port),
                      token=pinned(TOKEN, ca_hash_of(server_ca(s))))
    # its own port is off loopback too: TLS, with the node certificate the server issued (test_tls_node.py)
    def tls_health():
        try:
            h = requests.get("https://%s:%d/health" % (ns_addr, b.port), verify=server_ca(s), timeout=5).json()
        except requests.exceptions.SSLError:
            return None  # the placeholder, until the certificate is issued
        return h.get("listen_tls") == "issued" and h

    hb = wait_for(tls_health, 20, "b's certificate")
    assert hb["tls"] == "verified"
    # the opt-out on both sides: it works, and both the agent's log and its /health say what it costs
    s.stop()
    s.config_text += "server: {tls: {plaintext: any}}\n"
    s.start()
    c = cluster.agent("gpu-c", netns=ns, listen_host=ns_addr, server_url=plain, token=TOKEN,
                      extra=["--insecure-plaintext", "--insecure-listen-plaintext"])
    assert "--insecure-plaintext" in c.log() and "in clear to " + plain in c.log()
    out = subprocess.run(["ip", "netns", "exec", ns, PY, "-c",
                          "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen(%r).read().decode())"
                          % (c.status_url() + "/health")], capture_output=True, text=True, timeout=20)
    h = json.loads(out.stdout)
    assert h["tls"] == "plaintext" and "root" in h["warning"], h
