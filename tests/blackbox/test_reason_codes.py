"""The server's reasons as codes (issue 23, src/server/reason-code.c): each
template's words are words the server still writes (a reason reworded in
daemon.c, nodes.c, exec.c ... without its template would lose its code and
show in English on the Chinese page), and every code has its Chinese in the
dashboard (web/static/i18n.js).  Reads the sources; starts nothing."""
import functools
import glob
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def templates():
    with open(os.path.join(REPO, "src", "server", "reason-code.c")) as f:
        src = f.read()
    table = src.split("static const def defs[] = {", 1)[1].split("\n};", 1)[0]
    table = re.sub(r'"\s*\n\s*"', "", table)          # adjacent literals joined
    out = re.findall(r'\{"(\w+)",\s*"((?:[^"\\]|\\.)*)"', table)
    assert len(out) > 40, out
    return [(code, bytes(t, "utf-8").decode("unicode_escape")) for code, t in out]


def fragments():
    """The words of every C string in src/ (reason-code.c's own table left out), cut where a
    printf conversion (%s, %d, "%" PRId64) goes: what the server can write between its arguments."""
    frags = set()
    for p in glob.glob(os.path.join(REPO, "src", "**", "*.c"), recursive=True):
        if p.endswith("reason-code.c"):
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            text = re.sub(r'"\s*\n\s*"', "", f.read())                 # adjacent literals joined
        for lit in re.findall(r'"((?:[^"\\\n]|\\.)*)"', text):
            frags.update(re.split(r"%[-+ #0-9.]*(?:l|ll|z|h)?[a-zA-Z]", lit))
    return frags


def written(piece, frags):
    """Is piece what the server writes: inside one fragment, or a fragment's end, whole fragments
    and a fragment's start, joined where an argument went (a %s that was itself words)?"""
    if any(piece in f for f in frags):
        return True
    whole = [f for f in frags if len(f) >= 4]

    @functools.lru_cache(maxsize=None)
    def rest(s):   # s starts where a fragment starts
        return any(f.startswith(s) for f in frags) or any(s.startswith(f) and rest(s[len(f):]) for f in whole)
    return any(any(f.endswith(piece[:i]) for f in whole) and rest(piece[i:]) for i in range(4, len(piece)))


def test_every_templates_words_are_written_by_the_server():
    frags = fragments()
    missing = []
    for code, t in templates():
        for piece in re.split(r"\{\d\}|\[\d\]", t):
            piece = piece.replace('"', '\\"')
            if len(piece) >= 6 and not written(piece, frags):
                missing.append((code, piece))
    assert not missing, "template words the server no longer writes: %s" % missing


def test_every_code_has_its_chinese_on_the_dashboard():
    with open(os.path.join(REPO, "web", "static", "i18n.js"), encoding="utf-8") as f:
        js = f.read()
    zh = js.split("const reasons = {", 1)[1].split("\n  };", 1)[0]
    keys = set(re.findall(r"^\s*(\w+):", zh, re.M))
    missing = sorted({code for code, _ in templates()} - keys)
    assert not missing, "codes without Chinese in i18n.js: %s" % missing
