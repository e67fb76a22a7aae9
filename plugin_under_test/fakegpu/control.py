"""The fake-GPU control channel: a unix socket speaking one JSON object per line, each answered by one line.

    {"op": "set_health", "id": "fakegpu-0", "health": "Unhealthy"}  -> {"ok": true}
    {"op": "list"}  -> {"ok": true, "devices": [{"id": ..., "health": ..., "numa": 0|null}, ...]}
    {"op": "ping"}  -> {"ok": true}
    anything wrong  -> {"ok": false, "error": "..."}
A set_health answer comes after the change is applied to the device table (and so queued for ListAndWatch).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import threading

from kubeletapi import constants
from plugin_under_test.kit import DeviceState

log = logging.getLogger("dpconform.fakegpu.control")

HEALTH_VALUES = (constants.HEALTHY, constants.UNHEALTHY)


def handle(state: DeviceState, numa: dict, request) -> dict:
    if not isinstance(request, dict):
        return {"ok": False, "error": "request must be a JSON object"}
    op = request.get("op")
    if op == "ping":
        return {"ok": True}
    if op == "list":
        return {"ok": True, "devices": [
            {"id": d.ID, "health": d.health, "numa": numa.get(d.ID)} for d in state.snapshot()]}
    if op == "set_health":
        device_id, health = request.get("id"), request.get("health")
        if health not in HEALTH_VALUES:
            return {"ok": False, "error": f"health must be Healthy or Unhealthy, not {health!r}"}
        if not isinstance(device_id, str) or not state.set_health(device_id, health):
            return {"ok": False, "error": f"unknown device ID {device_id!r}"}
        log.info("control: %s -> %s", device_id, health)
        return {"ok": True}
    return {"ok": False, "error": f"unknown op {op!r}; ops: set_health, list, ping"}


class ControlServer:
    def __init__(self, path: str, state: DeviceState, numa: dict):
        self.path = os.path.abspath(path)
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                for line in self.rfile:
                    try:
                        reply = handle(outer.state, outer.numa, json.loads(line))
                    except ValueError as e:
                        reply = {"ok": False, "error": f"bad JSON: {e}"}
                    self.wfile.write((json.dumps(reply) + "\n").encode())
                    self.wfile.flush()

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.state, self.numa = state, numa
        if os.path.lexists(self.path):
            os.unlink(self.path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._server = Server(self.path, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        daemon=True, name="fakegpu-control")

    def start(self) -> None:
        self._thread.start()
        log.info("control channel on %s", self.path)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def request(path: str, message: dict, timeout: float = 10.0) -> dict:
    """Send one request to a control socket and return the decoded answer (OSError if unreachable)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps(message) + "\n").encode())
        with s.makefile("rb") as f:
            line = f.readline()
    if not line:
        raise OSError(f"no answer from control socket {path}")
    return json.loads(line)
