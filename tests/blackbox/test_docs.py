"""The documentation against the binary: what the docs name exists.

Cheap, mechanical checks that keep docs/ and the READMEs honest:

- every key in docs/config.md's tables is a key the binary knows (its
  "unknown key" message lists the valid keys of each section), and every key
  the binary knows in a documented section is in the tables;
- an integer key's documented range is the one the binary enforces (a value
  one above the maximum is refused with "must be between LO and HI");
- a config that sets every documented scalar default starts the daemon;
- every `gpupool COMMAND` named in docs/cli.md is listed by `gpupool help`,
  and every command `gpupool help` lists has a section in docs/cli.md;
- every metric in docs/metrics.md's tables is exported by GET /metrics of a
  daemon with a tenant and a gateway model (the gateway ones appear only
  with gateway.models), and every exported family is documented;
- every repository path (`src/...`, `bench/...`, `scripts/...`, `tests/...`,
  `examples/...`, `web/...`, `mk/...`, `fuzz/...`, `docs/...`) and every
  relative Markdown link in the docs exists.

Run: GPUPOOL_BIN=$PWD/build/gpupool /usr/bin/python3 -m pytest -q tests/blackbox/test_docs.py
"""
import glob
import json
import os
import re
import subprocess

import pytest
import requests

from conftest import REPO, Daemon, free_port, gpupool_bin

pytestmark = pytest.mark.e2e

DOC_FILES = sorted([os.path.join(REPO, "README.md"), os.path.join(REPO, "README.zh-CN.md")] +
                   glob.glob(os.path.join(REPO, "docs", "*.md")) +
                   glob.glob(os.path.join(REPO, "docs", "internals", "*.md")))

# docs/config.md's "## `x`" sections: the config path their table keys live under
SECTION_PREFIX = {"tenants": "tenants[]", "groups": "groups[]", "time_rules": "time_rules[]"}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------- config.md

def config_rows():
    """[(full key, type, default, range)] of docs/config.md's key tables."""
    rows = []
    prefix = None
    in_table = False
    for line in read(os.path.join(REPO, "docs", "config.md")).splitlines():
        m = re.match(r"^## `([a-z_]+)`", line)
        if m:
            prefix = SECTION_PREFIX.get(m.group(1), m.group(1))
            in_table = False
            continue
        if line.startswith("## "):
            prefix = None
        m = re.search(r"their gateway limits in `(tenants\[\]\.gateway)`", line)
        if m:
            prefix = m.group(1)
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "key":
            in_table = True
            continue
        if not in_table or prefix is None or set(cells[0]) <= set("- "):
            continue
        for key in re.findall(r"`([^`]+)`", cells[0]):
            rows.append((prefix + "." + key, cells[1], cells[2], cells[3] if len(cells) > 3 else ""))
    return rows


def nest(path, leaf_value):
    """The YAML (as JSON, a subset of YAML's flow style) that sets config
    path "a.b[].c" to leaf_value."""
    parts = path.split(".")
    value = leaf_value
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if part.endswith("[]"):
            item = value
            if ".".join(parts[:i + 1]) == "tenants[]" and i + 1 < len(parts):
                item = dict(value, id="docs-probe")  # checked before the item's other errors
            value = {part[:-2]: [item]}
        else:
            value = {part: value}
    return value


def merge(a, b):
    for k, v in b.items():
        if k in a and isinstance(a[k], dict) and isinstance(v, dict):
            merge(a[k], v)
        elif k in a and isinstance(a[k], list) and isinstance(v, list):
            merge(a[k][0], v[0])
        else:
            a[k] = v
    return a


def refuse(tmp_path, cfg, text=None, timeout=5):
    """Start the server with config cfg (a dict, or the YAML text) expecting
    it to refuse: its message, or "(accepted...)" when it started."""
    path = tmp_path / "probe.yaml"
    path.write_text(text if text is not None else json.dumps(cfg) + "\n")
    for _ in range(5):
        try:
            p = subprocess.run([gpupool_bin(), "server", "--config", str(path), "--listen",
                                "127.0.0.1:%d" % free_port(), "--data-dir", str(tmp_path / "probe-data")],
                               capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                               start_new_session=True)
        except subprocess.TimeoutExpired:  # it started: subprocess.run killed it
            return "(accepted: the server started)"
        # the free port was taken by a test running beside this one between free_port() and the
        # server's bind: that says nothing of the config, so try another port
        if p.returncode == 0 or "(in use by another process)" not in p.stderr:
            break
    return p.stderr if p.returncode != 0 else "(accepted: exit 0)"


_valid = {}


def valid_keys(tmp_path, section):
    """The keys the binary accepts in section ("" = top level, "gpus.sim[]"),
    from its own "unknown key" message."""
    if section not in _valid:
        probe = {"zz_docs_probe": 1}
        cfg = nest(section, probe) if section else probe
        msg = refuse(tmp_path, cfg)
        m = re.search(r"unknown key \(valid keys(?: of [^:]+)?: ([^)]*)\)", msg)
        assert m, "no list of valid keys for %r in: %s" % (section, msg)
        _valid[section] = set(k.strip() for k in m.group(1).split(","))
    return _valid[section]


def test_every_documented_config_key_is_known_to_the_binary(tmp_path):
    rows = config_rows()
    assert len(rows) > 100, "docs/config.md's tables were not found (%d rows)" % len(rows)
    unknown = []
    for key, _, _, _ in rows:
        parts = key.split(".")
        for i in range(len(parts)):
            parent = ".".join(parts[:i])
            leaf = parts[i][:-2] if parts[i].endswith("[]") else parts[i]
            if leaf not in valid_keys(tmp_path, parent):
                unknown.append("%s (%s has no key %s)" % (key, parent or "the top level", leaf))
                break
    assert not unknown, "docs/config.md documents keys the binary refuses:\n" + "\n".join(unknown)


def test_every_config_key_of_a_documented_section_is_documented(tmp_path):
    documented = {}
    for key, _, _, _ in config_rows():
        parts = key.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            leaf = parts[i][:-2] if parts[i].endswith("[]") else parts[i]
            documented.setdefault(parent, set()).add(leaf)
    documented[""] = set(k.split(".")[0].rstrip("[]") for k, _, _, _ in config_rows())
    missing = []
    for section, keys in sorted(documented.items()):
        # a section documented by one row only (e.g. serve.autoscale's keys in its range cell) is not a table
        if section and not any(k.startswith(section + ".") and k.count(".") == section.count(".") + 1
                               for k, _, _, _ in config_rows()):
            continue
        for k in sorted(valid_keys(tmp_path, section) - keys):
            missing.append("%s%s" % (section + "." if section else "", k))
    assert not missing, "keys the binary accepts but docs/config.md does not document:\n" + "\n".join(missing)


def bound(text):
    m = re.fullmatch(r"2\^(\d+)|(-?\d+)", text)
    if not m:
        return None
    return 2 ** int(m.group(1)) if m.group(1) is not None else int(m.group(2))


def test_documented_integer_ranges_are_the_binarys(tmp_path):
    wrong = []
    checked = 0
    for key, typ, _, rng in config_rows():
        if not typ.startswith("integer"):
            continue
        m = re.match(r"^`?(2\^\d+|-?\d+)\.\.(2\^\d+|-?\d+)`?(?![\d.^])", rng)
        if not m:
            continue
        lo, hi = bound(m.group(1)), bound(m.group(2))
        msg = refuse(tmp_path, nest(key, hi + 1))
        checked += 1
        if "must be between %d and %d" % (lo, hi) not in msg:
            wrong.append("%s: documented %d..%d; the binary says: %s" % (key, lo, hi, msg.strip()))
    assert checked > 50, "only %d integer ranges found in docs/config.md" % checked
    assert not wrong, "\n".join(wrong)


# keys whose documented default cannot stand in a test's config as written
DEFAULT_SKIP = {"server.listen", "server.data_dir", "server.user", "gpus.backend", "store.url"}


def scalar_default(cell):
    m = re.match(r"^`([^`]*)`", cell) or re.match(r"^([A-Za-z0-9_.-]+)$", cell)
    if not m:
        return None
    text = m.group(1)
    if text == '""':
        return ""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", text) and text not in ("none", "required"):
        return text
    return None


def test_a_config_of_every_documented_default_starts_the_daemon(tmp_path):
    cfg = {"gpus": {"backend": "sim"}, "tenants": [{"id": "docs-tenant"}]}
    n = 0
    for key, typ, default, _ in config_rows():
        value = scalar_default(default)
        if value is None or key in DEFAULT_SKIP or typ.startswith(("list", "mapping")):
            continue
        if "[]" in key and not key.startswith("tenants[]."):
            continue
        merge(cfg, nest(key, value))
        n += 1
    assert n > 60, "only %d scalar defaults found in docs/config.md" % n
    d = Daemon(tmp_path, json.dumps(cfg) + "\n")
    try:
        d.start()
        assert requests.get(d.url + "/readyz", timeout=5).status_code == 200
    finally:
        d.stop()


# ---------------------------------------------------------------- cli.md

def help_commands():
    out = subprocess.run([gpupool_bin(), "help"], capture_output=True, text=True, timeout=10).stdout
    body = out.split("Commands:", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^  ([a-z][a-z-]*) ", body, re.M))


def test_every_command_in_cli_md_is_in_gpupool_help():
    text = read(os.path.join(REPO, "docs", "cli.md"))
    named = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        m = re.match(r"gpupool ([a-z][a-z-]*)", span)
        if m:
            named.add(m.group(1))
    for line in text.splitlines():
        m = re.match(r"^(?:\$ )?gpupool ([a-z][a-z-]*)", line.strip())
        if m:
            named.add(m.group(1))
    commands = help_commands()
    assert {"submit", "ps", "server"} <= commands, "gpupool help lists: %s" % sorted(commands)
    assert len(named) > 10, named
    assert not named - commands, "docs/cli.md names commands that `gpupool help` does not list: %s" % (
        sorted(named - commands))
    sections = set()
    for heading in re.findall(r"^### (.*)$", text, re.M):
        sections.update(re.findall(r"[a-z][a-z-]*", heading.split(" — ")[0]))
    undocumented = commands - sections
    assert not undocumented, "commands of `gpupool help` without a ### section in docs/cli.md: %s" % (
        sorted(undocumented))


# ---------------------------------------------------------------- metrics.md

METRICS_CONFIG = """\
gpus: {backend: sim}
tenants: [{id: docs-tenant}]
gateway:
  models: [{name: docs-model, upstreams: ["http://127.0.0.1:9"]}]
"""


def test_every_documented_metric_is_exported_and_every_export_documented(tmp_path):
    documented = set()
    for line in read(os.path.join(REPO, "docs", "metrics.md")).splitlines():
        m = re.match(r"^\| `(gpupool_[a-z0-9_]+)` \|", line)
        if m:
            documented.add(m.group(1))
    assert len(documented) > 30, documented
    d = Daemon(tmp_path, METRICS_CONFIG)
    try:
        d.start()
        text = requests.get(d.url + "/metrics", timeout=10).text
    finally:
        d.stop()
    exported = set(re.findall(r"^# TYPE (gpupool_[a-z0-9_]+) ", text, re.M))
    assert not documented - exported, "docs/metrics.md lists metrics GET /metrics does not export: %s" % (
        sorted(documented - exported))
    assert not exported - documented, "GET /metrics exports families docs/metrics.md does not list: %s" % (
        sorted(exported - documented))


# ---------------------------------------------------------------- paths

PATH_RE = re.compile(r"(?<![\w./~-])((?:src|bench|scripts|tests|examples|web|mk|fuzz|docs)/[\w./+-]*[\w+])")
# made when something runs (git-ignored), named by the docs as where output goes
GENERATED = {"tests/web/screenshots"}
LINK_RE = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def test_every_repository_path_and_link_in_the_docs_exists():
    missing = []
    for doc in DOC_FILES:
        name = os.path.relpath(doc, REPO)
        for n, line in enumerate(read(doc).splitlines(), 1):
            for m in PATH_RE.finditer(line):
                after = line[m.end():m.end() + 2]
                if after[:1] in ("<", "*", "{", "[") or after == ".{":
                    continue  # a pattern (test-<module>.c, src/**/*.c, exec.{c,h}), not a path
                if m.group(1) in GENERATED:
                    continue
                if not os.path.exists(os.path.join(REPO, m.group(1))):
                    missing.append("%s:%d: %s" % (name, n, m.group(1)))
            for m in LINK_RE.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target):
                    continue
                if not os.path.exists(os.path.join(os.path.dirname(doc), target)):
                    missing.append("%s:%d: link %s" % (name, n, target))
    assert len(DOC_FILES) > 15
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


MD_NAME_RE = re.compile(r"(?<![\w/.-])([A-Za-z][\w.-]*\.md)\b")
OUTSIDE_RE = re.compile(r"(?<![\w.])\.\./[\w.-]+")


def test_the_docs_name_no_file_a_fresh_clone_lacks():
    """A user has the repository, nothing beside it: no ../ paths (such as the
    developers' trace folder) and no Markdown file that is not in the tree."""
    have = set()
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("node_modules", "build")]
        have.update(f for f in files if f.endswith(".md"))
    bad = []
    for doc in DOC_FILES:
        name = os.path.relpath(doc, REPO)
        for n, line in enumerate(read(doc).splitlines(), 1):
            for m in OUTSIDE_RE.finditer(line):
                if os.path.exists(os.path.normpath(os.path.join(os.path.dirname(doc), m.group(0)))):
                    continue  # a relative link inside the tree (docs/internals -> ../api.md)
                bad.append("%s:%d: %s" % (name, n, m.group(0)))
            for m in MD_NAME_RE.finditer(line):
                if os.path.basename(m.group(1)) not in have:
                    bad.append("%s:%d: %s" % (name, n, m.group(1)))
    assert not bad, "files the docs name that a fresh clone does not have:\n" + "\n".join(bad)


# ---------------------------------------------------------------- YAML examples

def yaml_blocks():
    """[(doc, line, text)] of the ```yaml blocks of the docs that are gpupool configs."""
    blocks = []
    for doc in DOC_FILES:
        text = read(doc)
        for m in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
            block = m.group(1)
            if "scrape_configs" in block:  # Prometheus' config, not ours
                continue
            blocks.append((os.path.relpath(doc, REPO), text[:m.start()].count("\n") + 2, block))
    return blocks


def test_config_md_reproduces_examples_gpupool_yaml():
    text = read(os.path.join(REPO, "docs", "config.md"))
    tail = text[text.index("## Example"):]
    block = re.search(r"```yaml\n(.*?)```", tail, re.S).group(1)
    assert block == read(os.path.join(REPO, "examples", "gpupool.yaml")), \
        "docs/config.md's ## Example is not examples/gpupool.yaml as it is"


def test_every_yaml_example_in_the_docs_is_a_config_the_server_accepts(tmp_path):
    bad = []
    n = 0
    for doc, line, block in yaml_blocks():
        # placeholders for key hashes: a distinct real hash each
        counter = iter(range(1, 1000))
        block = re.sub(r'"sha256:(?:<[^">]*>|\.\.\.)"', lambda _: '"sha256:%064x"' % next(counter), block)
        msg = refuse(tmp_path, None, text=block, timeout=2)  # a bad config is refused at once
        n += 1
        # a fragment may name tenants defined elsewhere on the page
        # a block naming a PostgreSQL server or NVML that is not here passes its config and fails later
        if msg.startswith("(accepted") or re.search(r'no tenant "[^"]+" is defined in tenants', msg) or \
                "connect to postgres" in msg or "cannot load NVML library" in msg:
            continue
        bad.append("%s:%d: %s" % (doc, line, msg.strip()))
    assert n > 5, "only %d YAML examples found" % n
    assert not bad, "YAML examples in the docs that the server refuses:\n" + "\n".join(bad)


def test_the_chinese_readme_comments_its_code_in_chinese_and_says_token():
    """README.zh-CN.md: every comment in its code blocks is Chinese (11 of 24
    were English), and an LLM token is "token", as Chinese LLM users write it
    (令牌 reads as an auth token)."""
    text = read(os.path.join(REPO, "README.zh-CN.md"))
    english = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.splitlines():
            m = re.search(r"(?:^|\s)#\s+(\S.*)$", line)
            if m and not re.search("[\u4e00-\u9fff]", m.group(1)):
                english.append(line.strip())
    assert not english, "English comments in README.zh-CN.md's code:\n" + "\n".join(english)
    assert "令牌" not in text
