"""The reference plugins' control channel: a unix socket speaking one JSON object per line, each
answered by one JSON object on one line. The fake GPU's health control (`dpconform fakegpu --control`)
and the fake NVML's XID injection (`dpconform nvml-plugin --control`) both serve it.

    server = ControlServer(path, handle)     # handle(request: dict) -> dict, called on the server's threads
    server.start(); ...; server.stop()       # stop() removes the socket file (if it is still ours)
    request(path, {"op": "ping"})            # the one client: the decoded answer; OSError if unreachable

A line that is not a JSON object is answered {"ok": false, "error": "..."} without calling handle, and
so is a handle that raises. A connection may send several lines; each gets its answer in order.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import threading
from typing import Callable

log = logging.getLogger("dpconform.control")

Handler = Callable[[dict], dict]


class ControlServer:
    """Serves `handle` on the unix socket `path` (a stale file there is replaced; parent dirs are made)."""

    idle_timeout_s = 60.0   # a connection that sends nothing for this long is closed

    def __init__(self, path: str, handle: Handler, *, name: str = "control"):
        self.path = os.path.abspath(path)
        self.handle = handle
        self.name = name
        outer = self

        class Connection(socketserver.StreamRequestHandler):
            timeout = outer.idle_timeout_s

            def handle(self):
                try:
                    for line in self.rfile:
                        self.wfile.write((json.dumps(outer.answer(line)) + "\n").encode())
                        self.wfile.flush()
                except OSError:  # the client went away or idled out
                    pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        if os.path.lexists(self.path):
            os.unlink(self.path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._server = Server(self.path, Connection)
        self._ino = os.lstat(self.path).st_ino
        # serve_forever notices a shutdown at its next poll: stop() waits that long, every plugin stop
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True, name=name)
        self._stopped = False

    def answer(self, line: bytes) -> dict:
        try:
            request = json.loads(line)
        except ValueError as e:
            return {"ok": False, "error": f"bad JSON: {e}"}
        if not isinstance(request, dict):
            return {"ok": False, "error": "request must be a JSON object"}
        try:
            return self.handle(request)
        except Exception as e:  # noqa: BLE001 - one bad request must not take the channel down
            log.exception("%s: request %r failed", self.name, request)
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}

    def start(self) -> "ControlServer":
        self._thread.start()
        log.info("%s channel on %s", self.name, self.path)
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket file, unless another instance has replaced it. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()
        try:
            if os.lstat(self.path).st_ino == self._ino:
                os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> "ControlServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def request(path: str, message: dict, timeout: float = 10.0) -> dict:
    """Send one request to a control socket and return the decoded answer. OSError if the socket is
    unreachable or closes without answering, ValueError if the answer is not JSON."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps(message) + "\n").encode())
        with s.makefile("rb") as f:
            line = f.readline()
    if not line:
        raise OSError(f"control socket {path}: no answer")
    return json.loads(line)
