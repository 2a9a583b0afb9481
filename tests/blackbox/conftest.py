"""Shared fixtures of the black-box tests: the real gpupool daemon.

`daemon` starts `$GPUPOOL_BIN server --listen 127.0.0.1:<free port>
--data-dir <tmp>` with a config file setting `gpus: {backend: sim}` (four
simulated 24 GB GPUs), waits for GET /readyz to answer 200, and stops it
when the test ends.  `daemon_factory(config_text, key=None)` does the same with a
config of your own (written to a file and passed with --config); `key` is
sent as a Bearer token with the readiness probe when the config sets keys.

Tests that need the daemon are end-to-end tests: mark them with
`pytest.mark.e2e` (or set `pytestmark`) so they can be selected or left
out with `-m e2e` / `-m "not e2e"`.  If $GPUPOOL_BIN does not exist they
are skipped; if the daemon does not come up they fail with its log.

Sanitizer reports: with $GPUPOOL_SAN_LOG_DIR set to the directory that
TSAN_OPTIONS (or ASAN_OPTIONS) names in log_path=DIR/NAME, a test during
which any process (daemon, supervisor, CLI) wrote a report there fails, with
the report; scripts/test-all.sh's ThreadSanitizer stage sets both.

Run: make blackbox  (or GPUPOOL_BIN=build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox)
"""
import os
import signal
import socket
import subprocess
import time

import pytest
import requests

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIM_CONFIG = "gpus: {backend: sim}\n"


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: needs the real gpupool daemon (started by the daemon fixture)")
    config.addinivalue_line("markers", "timing: compares real time with simulated time; left out of the "
                            "sanitizer run, where the daemon is several times slower")


SAN_LOG_DIR = os.environ.get("GPUPOOL_SAN_LOG_DIR")


@pytest.fixture(autouse=True)
def no_sanitizer_reports():
    """Autouse in every test: set up before the daemon fixtures, so checked
    after they stopped their daemons (reports at exit count too)."""
    if not SAN_LOG_DIR:
        yield
        return
    before = set(os.listdir(SAN_LOG_DIR))
    yield
    new = sorted(set(os.listdir(SAN_LOG_DIR)) - before)
    if new:
        texts = []
        for name in new:
            try:
                with open(os.path.join(SAN_LOG_DIR, name), "rb") as f:
                    texts.append("--- %s\n%s" % (name, f.read(20000).decode("utf-8", "replace")))
            except OSError as e:
                texts.append("--- %s: %s" % (name, e))
        pytest.fail("sanitizer report(s) written during this test in %s:\n%s" % (SAN_LOG_DIR, "\n".join(texts)))


def log_tail(path, size=8000):
    """The last size bytes of a process's log file, as text ("" if none)."""
    try:
        with open(path, "rb") as f:
            return f.read()[-size:].decode("utf-8", "replace")
    except OSError:
        return ""


def gpupool_bin():
    return os.environ.get("GPUPOOL_BIN") or os.path.join(REPO, "build", "gpupool")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One gpupool server on a loopback port with its own data dir."""

    def __init__(self, tmp_path, config_text=SIM_CONFIG, extra_args=(), key=None):
        self.bin = gpupool_bin()
        self.dir = tmp_path
        self.data_dir = str(tmp_path / "data")
        self.config_path = str(tmp_path / "gpupool.yaml")
        self.log_path = str(tmp_path / "server.log")
        self.config_text = config_text
        self.extra_args = list(extra_args)
        self.key = key  # sent with the readiness probe when the config requires keys
        self.port = None
        self.url = None
        self.proc = None
        self._log = None

    def start(self, timeout=20.0):
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.config_path, "w") as f:
            f.write(self.config_text)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.bin, "server", "--config", self.config_path,
             "--listen", "127.0.0.1:%d" % self.port, "--data-dir", self.data_dir] + self.extra_args,
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("gpupool server exited with %s before it was ready:\n%s"
                                   % (self.proc.returncode, self.log()))
            try:
                hdrs = {"Authorization": "Bearer " + self.key} if self.key else {}
                if requests.get(self.url + "/readyz", headers=hdrs, timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("gpupool server not ready within %.0f s:\n%s" % (timeout, self.log()))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc:
            # whatever is left in the process group the daemon led (we started it)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._log:
            self._log.close()
            self._log = None

    def log(self):
        return log_tail(self.log_path)

    # --- helpers for tests ---
    def env(self, **extra):
        env = dict(os.environ)
        for k in ("GPUPOOL_API_KEY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
            env.pop(k, None)
        env["GPUPOOL_API"] = self.url
        env.update(extra)
        return env

    def cli(self, *args, env=None, timeout=90, **kw):
        """Run `gpupool ARGS` against this daemon; returns CompletedProcess (text)."""
        return subprocess.run([self.bin] + [str(a) for a in args], env=env or self.env(),
                              capture_output=True, text=True, timeout=timeout, **kw)

    def api(self, method, path, **kw):
        kw.setdefault("timeout", 70)
        return requests.request(method, self.url + path, **kw)


def _require_bin():
    b = gpupool_bin()
    if not os.access(b, os.X_OK):
        pytest.skip("gpupool binary not built (%s); run make" % b)


@pytest.fixture
def daemon(tmp_path):
    _require_bin()
    d = Daemon(tmp_path)
    try:
        d.start()
    except RuntimeError as e:
        d.stop()
        pytest.fail(str(e))
    yield d
    d.stop()


@pytest.fixture
def daemon_factory(tmp_path):
    _require_bin()
    started = []

    def make(config_text=SIM_CONFIG, extra_args=(), key=None):
        sub = tmp_path / ("d%d" % len(started))
        sub.mkdir()
        d = Daemon(sub, config_text, extra_args, key)
        started.append(d)
        try:
            d.start()
        except RuntimeError as e:
            pytest.fail(str(e))
        return d

    yield make
    for d in started:
        d.stop()
