"""A model server for the gateway's serve: tests: gw_upstream on the port
given as the first argument, named after its pid (X-Upstream)."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gw_upstream import Upstream  # noqa: E402

Upstream(name="served-%d" % os.getpid(), port=int(sys.argv[1]))
while True:
    time.sleep(3600)
