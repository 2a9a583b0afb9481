"""A network namespace joined to ours by a veth pair, for tests that need a
peer off loopback (partitions, plaintext refusals).  Its names and subnet
come from the test process's pid, so xdist workers never collide; it is
removed at the end.  Needs root and `ip netns`: skipped (with the reason)
otherwise."""
import contextlib
import os
import subprocess

import pytest

from apiutil import wait_for

PY = "/usr/bin/python3"


def ip(*args, check=True):
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=10)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


@contextlib.contextmanager
def veth_netns(prefix, octet):
    """(namespace, root-side veth, root address, namespace address): the
    10.OCTET.N.0/30 link, N from the pid; the link carries packets when
    this yields."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a network namespace")
    tag = "%s%d" % (prefix, os.getpid() % 100000)
    ns, v0, v1 = tag, tag + "a", tag + "b"
    try:
        r = ip("netns", "add", ns, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip("ip netns is unavailable: %s" % e)
    if r.returncode != 0:
        pytest.skip("ip netns is unavailable: %s" % r.stderr.strip())
    net = "10.%d.%d" % (octet, os.getpid() % 250)
    try:
        try:
            ip("link", "add", v0, "type", "veth", "peer", "name", v1)
            ip("link", "set", v1, "netns", ns)
            ip("addr", "add", net + ".1/30", "dev", v0)
            ip("link", "set", v0, "up")
            ip("netns", "exec", ns, "ip", "addr", "add", net + ".2/30", "dev", v1)
            ip("netns", "exec", ns, "ip", "link", "set", v1, "up")
            ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
            # the link carries packets once a TCP connect to the root side gets an answer (refused is fine)
            probe = ("import socket\ntry:\n socket.create_connection(('%s.1', 9), timeout=1)\n"
                     "except ConnectionRefusedError:\n pass\n" % net)
            wait_for(lambda: subprocess.run(["ip", "netns", "exec", ns, PY, "-c", probe],
                                            capture_output=True, timeout=10).returncode == 0, 10, "the veth link")
        except (RuntimeError, FileNotFoundError) as e:
            pytest.skip("cannot set up the namespace: %s" % e)
        yield ns, v0, net + ".1", net + ".2"
    finally:
        ip("link", "del", v0, check=False)
        ip("netns", "del", ns, check=False)
