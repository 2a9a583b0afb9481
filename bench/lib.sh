# bench/lib.sh - what the bench scripts share.  Sourced from the
# repository root, where every script cds first: `. bench/lib.sh`.

# free_port: a free TCP port on 127.0.0.1
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_up WHAT URL LOG [TRIES]: wait until URL answers 2xx, trying every
# 0.1 s, TRIES times (default 100); else print "WHAT did not come up:" and
# the server's LOG, and exit 1.
wait_up() {
        _tries=0
        until curl -fs "$2" >/dev/null 2>&1; do
                _tries=$((_tries + 1))
                if [ "$_tries" -ge "${4:-100}" ]; then
                        echo "$1 did not come up:" >&2
                        cat "$3" >&2
                        exit 1
                fi
                sleep 0.1
        done
}
