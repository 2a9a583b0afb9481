"""Black-box tests of TLS on the server's listener (src/gateway/front.c,
src/base/tls*.c, src/server/tls-setup.c), with real certificates: the
server's own generated CA, and CAs and certificates openssl makes here.

What they show: curl --cacert DATA_DIR/tls/ca.crt and openssl s_client
verify the server on its one port (the API, /v1, keep-alive across both);
plaintext is served to loopback, refused off loopback (from a network
namespace joined by a veth pair) unless server.tls.plaintext is any; a
wrong CA and an expired certificate fail verification; a handshake that
never finishes is cut at server.header_timeout_s; the certificate files
reload without a restart, under load, and a bad new file is refused."""
import hashlib
import http.client
import os
import re
import signal
import socket
import ssl
import stat
import subprocess
import threading
import time

import pytest
import requests

import conftest
from conftest import SIM_CONFIG, gpupool_bin
from netnsutil import veth_netns

pytestmark = pytest.mark.e2e

ADMIN = "tls-admin-key"


def sha256_key(k):
    return "sha256:" + hashlib.sha256(k.encode()).hexdigest()


def run(*argv, timeout=30, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)


def curl(url, *extra, ns=None):
    argv = ["curl", "-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}", "--noproxy", "*"] + list(extra) + [url]
    if ns:
        argv = ["ip", "netns", "exec", ns] + argv
    r = run(*argv)
    body, _, code = r.stdout.rpartition("\n")
    return r.returncode, code, body, r.stderr


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def openssl_pin(path):
    pub = run("openssl", "x509", "-in", path, "-pubkey", "-noout").stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=pub.encode(),
                         capture_output=True, timeout=10).stdout
    return "sha256:" + hashlib.sha256(der).hexdigest()


class Pki:
    """A CA of the test's own, made by openssl, and certificates it signs."""

    def __init__(self, d, name="test-ca"):
        self.d = str(d)
        os.makedirs(self.d, exist_ok=True)
        self.ca = os.path.join(self.d, "ca.crt")
        self.ca_key = os.path.join(self.d, "ca.key")
        r = run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", self.ca_key, "-out", self.ca, "-days", "30", "-subj", "/CN=" + name)
        assert r.returncode == 0, r.stderr
        self.serial = 100

    def issue(self, name, days=30, sans="DNS:localhost,IP:127.0.0.1"):
        """(cert, key) paths of a new server certificate; days < 0: expired."""
        self.serial += 1
        key = os.path.join(self.d, name + ".key")
        csr = os.path.join(self.d, name + ".csr")
        crt = os.path.join(self.d, name + ".crt")
        ext = os.path.join(self.d, name + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\nextendedKeyUsage=serverAuth\n" % sans)
        r = run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                "-out", csr, "-subj", "/CN=" + name)
        assert r.returncode == 0, r.stderr
        r = run("openssl", "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-set_serial",
                str(self.serial), "-days", str(days), "-extfile", ext, "-out", crt)
        assert r.returncode == 0, r.stderr
        return crt, key


def served_cn(port, cafile):
    """The common name of the certificate a new handshake gets (verified against cafile)."""
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            subject = dict(x[0] for x in t.getpeercert()["subject"])
            return subject["commonName"]


def replace(src, dst):
    """Put src's bytes at dst by a rename, as a deploy tool does."""
    tmp = dst + ".new"
    with open(src, "rb") as f, open(tmp, "wb") as g:
        g.write(f.read())
    os.rename(tmp, dst)


# ---------------------------------------------------------------------------


def test_generated_ca_verifies_with_curl_and_openssl_on_every_path(daemon_factory):
    cfg = SIM_CONFIG + 'auth: {admin_keys: ["%s"]}\n' % sha256_key(ADMIN)
    d = daemon_factory(cfg, key=ADMIN)
    tls = os.path.join(d.data_dir, "tls")
    ca = os.path.join(tls, "ca.crt")
    for name, mode in (("ca.crt", 0o644), ("ca.key", 0o600), ("server.crt", 0o644), ("server.key", 0o600)):
        st = os.stat(os.path.join(tls, name))
        assert stat.S_IMODE(st.st_mode) == mode, (name, oct(st.st_mode))
    # the pin the server logs is kubeadm's hash of the CA's public key
    assert "agents pin CA %s" % openssl_pin(ca) in d.log()
    wait_for(lambda: "(TLS; plaintext to loopback only)" in d.log(), 15, "the start-up line")  # logged after /healthz
    base = "https://127.0.0.1:%d" % d.port
    rc, code, body, err = curl(base + "/healthz", "--cacert", ca)
    assert (rc, code) == (0, "200"), err
    rc, code, body, err = curl("https://localhost:%d/api/v1/gpus" % d.port, "--cacert", ca,
                               "-H", "Authorization: Bearer " + ADMIN)
    assert (rc, code) == (0, "200"), err
    assert '"gpus"' in body or "[" in body
    rc, code, body, err = curl(base + "/api/v1/gpus", "--cacert", ca)
    assert (rc, code) == (0, "401"), (err, body)
    rc, code, body, err = curl(base + "/v1/models", "--cacert", ca, "-H", "Authorization: Bearer " + ADMIN)
    assert (rc, code) == (0, "200"), (err, body)
    assert '"object":"list"' in body.replace(" ", "")
    # openssl s_client verifies the chain and the name
    r = run("openssl", "s_client", "-connect", "127.0.0.1:%d" % d.port, "-CAfile", ca, "-verify_return_error",
            "-verify_hostname", "localhost", input="")
    assert "Verify return code: 0 (ok)" in r.stdout, r.stdout + r.stderr
    # the loopback plaintext the CLI and every other test use still works
    assert requests.get(d.url + "/healthz", timeout=10).status_code == 200
    # one TLS connection: /v1 (served by the front), then the API (relayed to MHD), then /v1 again
    ctx = ssl.create_default_context(cafile=ca)
    c = http.client.HTTPSConnection("127.0.0.1", d.port, context=ctx, timeout=10)
    hdr = {"Authorization": "Bearer " + ADMIN}
    socks = set()
    for path in ("/v1/models", "/healthz", "/api/v1/queue", "/v1/models"):
        c.request("GET", path, headers=hdr)
        r = c.getresponse()
        r.read()
        assert r.status == 200, path
        socks.add(id(c.sock))
    assert len(socks) == 1  # all four on the one connection
    c.close()
    # a first request not for /v1 over TLS, then /v1 on the same connection
    c = http.client.HTTPSConnection("localhost", d.port, context=ctx, timeout=10)
    c.request("GET", "/healthz")
    r = c.getresponse()
    assert r.status == 200 and b'"ok"' in r.read()
    s = c.sock
    c.request("GET", "/v1/models", headers=hdr)
    r = c.getresponse()
    assert r.status == 200 and b"list" in r.read()
    assert c.sock is s
    c.close()


def test_the_client_binary_links_no_tls_library():
    """TLS is the server's (build/gpupool-server): the CLI, build/gpupool,
    keeps libc and libjansson (mk/tls.mk)."""
    import shutil
    if not shutil.which("ldd") or not os.access(gpupool_bin(), os.X_OK):
        pytest.skip("needs ldd and the built client")
    libs = run("ldd", gpupool_bin()).stdout
    assert "libjansson" in libs, libs
    assert "gnutls" not in libs and "libssl" not in libs and "libmicrohttpd" not in libs, libs
    server = os.path.join(os.path.dirname(gpupool_bin()), "gpupool-server")
    assert "libgnutls" in run("ldd", server).stdout


def test_wrong_ca_fails_verification(daemon, tmp_path):
    other = Pki(tmp_path / "other", "not-the-server-ca")
    rc, code, body, err = curl("https://127.0.0.1:%d/healthz" % daemon.port, "--cacert", other.ca)
    assert rc == 60, (rc, err)  # peer certificate cannot be authenticated with the given CA
    r = run("openssl", "s_client", "-connect", "127.0.0.1:%d" % daemon.port, "-CAfile", other.ca,
            "-verify_return_error", input="")
    assert r.returncode != 0
    assert "Verify return code: 0 (ok)" not in r.stdout
    # the right CA still works on the same server
    ca = os.path.join(daemon.data_dir, "tls", "ca.crt")
    assert curl("https://127.0.0.1:%d/healthz" % daemon.port, "--cacert", ca)[:2] == (0, "200")


def test_expired_certificate_is_served_and_refused_by_curl(daemon_factory, tmp_path):
    pki = Pki(tmp_path / "pki")
    crt, key = pki.issue("expired", days=-1)
    assert run("openssl", "x509", "-in", crt, "-noout", "-checkend", "0").returncode != 0  # really expired
    cfg = SIM_CONFIG + "server:\n  tls: {cert: %s, key: %s, ca: %s}\n" % (crt, key, pki.ca)
    d = daemon_factory(cfg)
    assert "has expired" in d.log() or "expired" in d.log()
    rc, code, body, err = curl("https://127.0.0.1:%d/healthz" % d.port, "--cacert", pki.ca)
    assert rc == 60 and "expired" in err, (rc, err)
    r = run("openssl", "s_client", "-connect", "127.0.0.1:%d" % d.port, "-CAfile", pki.ca, input="")
    assert "certificate has expired" in r.stdout + r.stderr
    # what the server sends is that certificate
    m = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", r.stdout, re.S)
    assert m
    with open(crt) as f:
        assert m.group(0).split() == f.read().strip().split()
    # no CA file of ours was made: the configured files are used
    assert not os.path.exists(os.path.join(d.data_dir, "tls", "ca.key"))


def test_handshake_not_finished_in_header_timeout_is_cut(daemon_factory):
    d = daemon_factory(SIM_CONFIG + "server: {header_timeout_s: 1}\n")
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    s.sendall(b"\x16\x03\x01")  # the start of a ClientHello, never finished
    t0 = time.monotonic()
    s.settimeout(10)
    try:
        got = s.recv(100)
    except ConnectionResetError:
        got = b""
    took = time.monotonic() - t0
    assert got == b"" and took < 4, (got, took)
    s.close()


def test_bad_values_of_server_tls_are_refused_with_file_and_line(tmp_path):
    cases = [
        ("server:\n  tls:\n    plaintext: sometimes\n", "plaintext"),
        ("server:\n  tls:\n    sans: [\"bad name\"]\n", "sans"),
        ("server:\n  tls:\n    cert: /x.crt\n", "server.tls"),
        ("server:\n  tls:\n    ca: /x.crt\n", "server.tls.ca"),
    ]
    for i, (text, what) in enumerate(cases):
        p = tmp_path / ("c%d.yaml" % i)
        p.write_text(SIM_CONFIG + text)
        r = run(gpupool_bin(), "server", "--config", str(p), "--listen", "127.0.0.1:1",
                "--data-dir", str(tmp_path / ("d%d" % i)))
        assert r.returncode == 1, (text, r.stderr)
        assert str(p) in r.stderr and what in r.stderr, (text, r.stderr)
        assert re.search(r":\d+", r.stderr), r.stderr


def test_reload_under_load_answers_every_request_and_new_handshakes_get_the_new_cert(daemon_factory, tmp_path):
    pki = Pki(tmp_path / "pki")
    a_crt, a_key = pki.issue("cert-a")
    b_crt, b_key = pki.issue("cert-b")
    live_crt, live_key = str(tmp_path / "live.crt"), str(tmp_path / "live.key")
    replace(a_crt, live_crt)
    replace(a_key, live_key)
    d = daemon_factory(SIM_CONFIG + "server:\n  tls: {cert: %s, key: %s, ca: %s}\n" % (live_crt, live_key, pki.ca))
    assert served_cn(d.port, pki.ca) == "cert-a"
    stop = threading.Event()
    results = {"ok": 0, "fail": []}

    def load(new_conns):
        sess = requests.Session()
        while not stop.is_set():
            try:
                if new_conns:
                    r = requests.get("https://localhost:%d/healthz" % d.port, verify=pki.ca, timeout=10)
                else:
                    r = sess.get("https://localhost:%d/healthz" % d.port, verify=pki.ca, timeout=10)
                if r.status_code == 200:
                    results["ok"] += 1
                else:
                    results["fail"].append(r.status_code)
            except requests.RequestException as e:
                results["fail"].append(repr(e))

    threads = [threading.Thread(target=load, args=(n,)) for n in (True, True, False)]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        before = results["ok"]
        replace(b_key, live_key)  # key first: a look between the two renames sees a mismatch and waits
        replace(b_crt, live_crt)
        wait_for(lambda: served_cn(d.port, pki.ca) == "cert-b", 15, "the new certificate")
        time.sleep(1)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert results["fail"] == [], results["fail"][:5]
    assert results["ok"] > before > 0
    assert "tls: certificate reloaded from %s" % live_crt in d.log()
    # a bad new file is refused: the current certificate stays
    with open(live_crt, "w") as f:
        f.write("not a certificate\n")
    wait_for(lambda: "new certificate refused" in d.log(), 15, "the refusal in the log")
    assert served_cn(d.port, pki.ca) == "cert-b"
    assert requests.get("https://localhost:%d/healthz" % d.port, verify=pki.ca, timeout=10).status_code == 200
    # and SIGHUP reads the files at once
    replace(a_crt, live_crt)
    replace(a_key, live_key)
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: served_cn(d.port, pki.ca) == "cert-a", 15, "the certificate after SIGHUP")
    assert d.proc.poll() is None


# --- off loopback: a network namespace joined by a veth pair -----------------




@pytest.fixture
def netns():
    """(namespace, root address, namespace address), cleaned up at the end."""
    with veth_netns("gptls", 214) as (ns, _, root_addr, ns_addr):
        yield ns, root_addr, ns_addr


def reach(ns, url, *extra):
    """curl from the namespace, once the veth carries packets."""
    deadline = time.monotonic() + 10
    while True:
        res = curl(url, *extra, ns=ns)
        if res[0] != 7 or time.monotonic() > deadline:  # 7: could not connect (link not up yet)
            return res
        time.sleep(0.2)


FREE_PORT = conftest.free_port  # the fixture's own, before a test sets its port


def on_a_port(monkeypatch, start):
    """start(port) with a port the daemon fixture will use too (its free_port
    gives that one). A port found free can be taken before the daemon binds it
    (an outgoing connection of a parallel test, CI once): another is tried."""
    for attempt in range(5):
        port = FREE_PORT()
        monkeypatch.setattr(conftest, "free_port", lambda: port)
        try:
            return start(port)
        except pytest.fail.Exception as e:
            if "in use by another process" not in str(e) or attempt == 4:
                raise


def on_all_addresses(daemon_factory, monkeypatch, cfg):
    """A daemon listening on 0.0.0.0 (the fixture's --listen 127.0.0.1 is
    overridden: the last --listen wins); probed on 127.0.0.1 as usual."""
    return on_a_port(monkeypatch, lambda port: daemon_factory(cfg, extra_args=("--listen", "0.0.0.0:%d" % port)))


def test_plaintext_off_loopback_is_refused_and_tls_served(daemon_factory, netns, monkeypatch):
    ns, host, _ = netns
    d = on_all_addresses(daemon_factory, monkeypatch, SIM_CONFIG)
    url = "%s:%d/healthz" % (host, d.port)
    ca = os.path.join(d.data_dir, "tls", "ca.crt")
    rc, code, body, err = reach(ns, "http://" + url)
    assert (rc, code) == (0, "400"), (rc, code, err)
    assert "https://" in body and "tls_required" in body
    # the generated certificate names this machine's interface addresses
    rc, code, body, err = reach(ns, "https://" + url, "--cacert", ca)
    assert (rc, code) == (0, "200"), (rc, err)
    # a /v1 request in plaintext from off loopback is refused too
    rc, code, body, err = reach(ns, "http://%s:%d/v1/models" % (host, d.port))
    assert code == "400" and "tls_required" in body
    # loopback keeps plaintext
    assert requests.get("http://127.0.0.1:%d/healthz" % d.port, timeout=10).status_code == 200


def test_plaintext_any_serves_plaintext_off_loopback_and_says_so(daemon_factory, netns, monkeypatch):
    ns, host, _ = netns
    d = on_all_addresses(daemon_factory, monkeypatch, SIM_CONFIG + "server:\n  tls: {plaintext: any}\n")
    rc, code, body, err = reach(ns, "http://%s:%d/healthz" % (host, d.port))
    assert (rc, code) == (0, "200"), (rc, err)
    log = d.log()
    assert re.search(r"warn server\.tls\.plaintext is any", log), log
    # the start-up line comes once start-up is over, which may be a moment after /healthz answers
    wait_for(lambda: "plaintext to ANY address" in d.log(), 15, "the start-up line saying plaintext to ANY address")
    # TLS is still served on the same port
    ca = os.path.join(d.data_dir, "tls", "ca.crt")
    rc, code, body, err = reach(ns, "https://%s:%d/healthz" % (host, d.port), "--cacert", ca)
    assert (rc, code) == (0, "200"), (rc, err)


# --- several servers: a follower's listener and its forwarding to an https:// leader ---


@pytest.fixture
def pg_db():
    """A fresh database on GPUPOOL_TEST_PG_URL's server; skipped without one."""
    import shutil
    import urllib.parse
    import uuid
    base = os.environ.get("GPUPOOL_TEST_PG_URL")
    if not base or not shutil.which("psql"):
        pytest.skip("GPUPOOL_TEST_PG_URL is not set or psql is missing (tests/pg/start-pg.sh starts a server)")
    name = "gp_tls_%s" % uuid.uuid4().hex[:12]
    subprocess.run(["psql", base, "-v", "ON_ERROR_STOP=1", "-qc", "CREATE DATABASE %s" % name],
                   check=True, capture_output=True, timeout=60)
    u = urllib.parse.urlsplit(base)
    yield "%s://%s/%s%s" % (u.scheme, u.netloc, name, "?" + u.query if u.query else "")
    subprocess.run(["psql", base, "-qc", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name],
                   capture_output=True, timeout=60)


def cluster_server(daemon_factory, monkeypatch, name, pg, crt, key, ca):
    """A server of a cluster on pg, advertising https://localhost:PORT, with the given certificate."""
    def start(port):
        cfg = SIM_CONFIG + ('store: {url: "%s"}\ncluster: {server_id: %s, lease_s: 2, advertise_url: "https://localhost:%d"}\n'
                            "server:\n  tls: {cert: %s, key: %s, ca: %s}\n" % (pg, name, port, crt, key, ca))
        return daemon_factory(cfg), port
    return on_a_port(monkeypatch, start)


def follower_health(port, ca):
    try:
        r = requests.get("https://localhost:%d/healthz" % port, verify=ca, timeout=2)
        return r.json().get("status") if r.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


def test_follower_serves_tls_and_forwards_to_an_https_leader(daemon_factory, monkeypatch, pg_db, tmp_path):
    pki = Pki(tmp_path / "pki")
    c1, k1 = pki.issue("s1")
    c2, k2 = pki.issue("s2")
    s1, p1 = cluster_server(daemon_factory, monkeypatch, "s1", pg_db, c1, k1, pki.ca)
    # daemon_factory waits for /readyz: s1 leads.  s2 follows: its /readyz is 503, so start it by hand
    monkeypatch.undo()
    p2 = conftest.free_port()
    cfg2 = SIM_CONFIG + ('store: {url: "%s"}\ncluster: {server_id: s2, lease_s: 2, advertise_url: "https://localhost:%d"}\n'
                         "server:\n  tls: {cert: %s, key: %s, ca: %s}\n" % (pg_db, p2, c2, k2, pki.ca))
    s2, log = start_follower(tmp_path, "s2", cfg2, p2)
    try:
        wait_for(lambda: follower_health(p2, pki.ca) == "follower", 20, "s2 to follow over TLS")
        # over TLS to the follower, forwarded over TLS to the leader
        r = requests.post("https://localhost:%d/api/v1/tasks" % p2, json={"gpu_request": 1, "lease_ttl_s": 60},
                          verify=pki.ca, timeout=15)
        assert r.status_code == 201, (r.text, s2.log())
        assert r.headers.get("X-Gpupool-Forwarded-By") == "s2"
        tid = r.json()["id"]
        r = requests.get("https://localhost:%d/api/v1/tasks/%d" % (p1, tid), verify=pki.ca, timeout=15)
        assert r.status_code == 200 and r.json()["id"] == tid
        # loopback plaintext to the follower still works (and is forwarded over TLS too)
        r = requests.get("http://127.0.0.1:%d/api/v1/tasks/%d" % (p2, tid), timeout=15)
        assert r.status_code == 200 and r.json()["id"] == tid
        # openssl verifies the follower's listener
        o = run("openssl", "s_client", "-connect", "127.0.0.1:%d" % p2, "-CAfile", pki.ca, "-verify_return_error",
                "-verify_hostname", "localhost", input="")
        assert "Verify return code: 0 (ok)" in o.stdout
        assert served_cn(p2, pki.ca) == "s2"
    finally:
        s2.stop()
        log.close()


@pytest.mark.parametrize("why", ["another CA", "another name"])
def test_follower_refuses_a_leader_whose_certificate_does_not_verify(daemon_factory, monkeypatch, pg_db, tmp_path,
                                                                     why):
    good = Pki(tmp_path / "good")
    if why == "another CA":  # the leader's certificate is not from the follower's CA
        evil = Pki(tmp_path / "evil", "another-ca")
        c1, k1 = evil.issue("s1")
    else:  # from the right CA, but it does not name the host of the leader's URL (localhost)
        evil = good
        c1, k1 = good.issue("s1", sans="DNS:ctl-a.example.org,IP:10.9.9.9")
    c2, k2 = good.issue("s2")
    s1, p1 = cluster_server(daemon_factory, monkeypatch, "s1", pg_db, c1, k1, evil.ca)
    monkeypatch.undo()
    p2 = conftest.free_port()
    cfg2 = SIM_CONFIG + ('store: {url: "%s"}\ncluster: {server_id: s2, lease_s: 2, advertise_url: "https://localhost:%d"}\n'
                         "server:\n  tls: {cert: %s, key: %s, ca: %s}\n" % (pg_db, p2, c2, k2, good.ca))
    s2, log = start_follower(tmp_path, "s2", cfg2, p2)
    try:
        wait_for(lambda: follower_health(p2, good.ca) == "follower", 20, "s2 to follow")
        r = requests.post("https://localhost:%d/api/v1/tasks" % p2, json={"gpu_request": 1, "lease_ttl_s": 60},
                          verify=good.ca, timeout=15)
        assert r.status_code == 503, r.text
        assert "TLS failed" in r.text
        # nothing reached the leader
        r = requests.get("http://127.0.0.1:%d/api/v1/tasks" % p1, timeout=15)
        assert r.status_code == 200 and r.json()["tasks"] == [], r.text
    finally:
        s2.stop()
        log.close()


def start_follower(tmp_path, name, cfg, port):
    """A server started by hand (it follows: its /readyz stays 503); (Daemon, log file)."""
    (tmp_path / name).mkdir()
    s = conftest.Daemon(tmp_path / name, cfg)
    os.makedirs(s.data_dir, exist_ok=True)
    with open(s.config_path, "w") as f:
        f.write(cfg)
    log = open(s.log_path, "ab")
    s.proc = subprocess.Popen([s.bin, "server", "--config", s.config_path, "--listen", "127.0.0.1:%d" % port,
                               "--data-dir", s.data_dir], stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    return s, log


def test_servers_of_one_store_share_the_generated_ca_and_forward_over_tls(daemon_factory, monkeypatch, pg_db,
                                                                        tmp_path):
    cfg = SIM_CONFIG + 'store: {url: "%s"}\ncluster: {server_id: %s, lease_s: 2, advertise_url: "https://localhost:%d"}\n'
    s1, p1 = on_a_port(monkeypatch, lambda port: (daemon_factory(cfg % (pg_db, "s1", port)), port))
    monkeypatch.undo()
    p2 = conftest.free_port()
    s2, log = start_follower(tmp_path, "s2", cfg % (pg_db, "s2", p2), p2)
    try:
        ca1 = os.path.join(s1.data_dir, "tls", "ca.crt")
        ca2 = os.path.join(s2.data_dir, "tls", "ca.crt")
        wait_for(lambda: follower_health(p2, ca1) == "follower", 30, "s2 to follow, verified with s1's CA")
        with open(ca1) as f1, open(ca2) as f2:
            assert f1.read() == f2.read()  # one CA: agents pinned to it can follow either server
        assert openssl_pin(ca1) in s2.log()
        assert "now the cluster's" in s1.log() and "is now this server's" in s2.log()
        # each server has a certificate of its own from that CA
        assert run("openssl", "verify", "-CAfile", ca1, os.path.join(s2.data_dir, "tls", "server.crt")).returncode == 0
        assert served_cn(p1, ca1) and served_cn(p2, ca1)
        # a request to the follower over TLS reaches the leader over TLS (verified with the shared CA)
        r = requests.post("https://localhost:%d/api/v1/tasks" % p2, json={"gpu_request": 1, "lease_ttl_s": 60},
                          verify=ca1, timeout=15)
        assert r.status_code == 201, (r.text, s2.log())
        assert r.headers.get("X-Gpupool-Forwarded-By") == "s2"
        r = requests.get("https://localhost:%d/api/v1/tasks/%d" % (p1, r.json()["id"]), verify=ca1, timeout=15)
        assert r.status_code == 200
    finally:
        s2.stop()
        log.close()
