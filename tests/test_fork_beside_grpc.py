"""Stress: a test worker with gRPC threads at work starts a child process, and the child always gets to exec.

The reproducer for make test's "the run exited (code -6) before the run's private mount namespace" in
tests/test_no_leftovers.py, whose log held only gRPC's "epoll_wait error: Bad file descriptor" abort. The
test started the run with a preexec_fn: that makes subprocess use a plain fork() and run Python in the
child before exec; gRPC's fork handlers skip themselves while other threads are in a call ("Other threads
are currently calling into gRPC, skipping fork() handlers"), and the child, holding gRPC's state, now and
then aborted in its poller before the exec. Here, with a server and four callers busy in the same process,
the old way (a preexec_fn that set SIGINT's disposition) failed this test in 2 of 3 runs of 2000 starts (a Go
build beside); the way test_no_leftovers starts its run now (no Python between fork and exec) never has.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STARTS = 2000
# A process with a gRPC server and four callers in flight, starting STARTS children the way
# test_no_leftovers starts its run; prints how many ended otherwise than exit 0, and the first such output.
BUSY_GRPC_STARTS = '''
import os, sys, tempfile, threading
from concurrent import futures
import grpc
from tests.support.host import start_in_own_session
echo = grpc.method_handlers_generic_handler("t.T", {"E": grpc.unary_unary_rpc_method_handler(lambda r, c: r)})
server = grpc.server(futures.ThreadPoolExecutor(4), handlers=(echo,))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
done = threading.Event()
def call():
    e = grpc.insecure_channel(f"127.0.0.1:{port}").unary_unary("/t.T/E")
    while not done.is_set():
        try:
            e(b"x", timeout=5)
        except grpc.RpcError:
            pass
callers = [threading.Thread(target=call) for _ in range(4)]
for t in callers:
    t.start()
bad, first = 0, ""
with tempfile.TemporaryFile() as log:
    for _ in range(int(sys.argv[1])):
        log.seek(0); log.truncate()
        code = start_in_own_session(["true"], dict(os.environ), log).wait(30)
        if code != 0:
            bad += 1
            log.seek(0)
            first = first or f"exit {code}: " + log.read().decode(errors="replace")[-500:]
done.set()
for t in callers:
    t.join(10)
server.stop(None)
print(bad, first)
'''


def test_children_started_beside_busy_grpc_all_exec():
    done = subprocess.run([sys.executable, "-c", BUSY_GRPC_STARTS, str(STARTS)], cwd=REPO, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    bad, _, first = done.stdout.strip().partition(" ")
    assert bad == "0", f"{bad} of {STARTS} children did not reach their exec: {first}"
