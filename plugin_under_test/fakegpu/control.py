"""The fake-GPU control channel (protocols/control_socket.py: one JSON object per line, each
answered by one line):

    {"op": "set_health", "id": "fakegpu-0", "health": "Unhealthy"}  -> {"ok": true}
    {"op": "list"}  -> {"ok": true, "devices": [{"id": ..., "health": ..., "numa": 0|null}, ...]}
    {"op": "ping"}  -> {"ok": true}
    anything wrong  -> {"ok": false, "error": "..."}
A set_health answer comes after the change is applied to the device table (and so queued for ListAndWatch).
Clients use control_socket.request (re-exported here as `request`).
"""
from __future__ import annotations

import logging

from dpconform.kubeletapi import constants
from dpconform.protocols.control_socket import ControlServer, request
from dpconform.plugin_under_test.kit import DeviceState

__all__ = ["HEALTH_VALUES", "handle", "request", "server"]

log = logging.getLogger("dpconform.fakegpu.control")

HEALTH_VALUES = (constants.HEALTHY, constants.UNHEALTHY)


def handle(state: DeviceState, numa: dict, req: dict) -> dict:
    op = req.get("op")
    if op == "ping":
        return {"ok": True}
    if op == "list":
        return {"ok": True, "devices": [
            {"id": d.ID, "health": d.health, "numa": numa.get(d.ID)} for d in state.snapshot()]}
    if op == "set_health":
        device_id, health = req.get("id"), req.get("health")
        if health not in HEALTH_VALUES:
            return {"ok": False, "error": f"health must be Healthy or Unhealthy, not {health!r}"}
        if not isinstance(device_id, str) or not state.set_health(device_id, health):
            return {"ok": False, "error": f"unknown device ID {device_id!r}"}
        log.info("control: %s -> %s", device_id, health)
        return {"ok": True}
    return {"ok": False, "error": f"unknown op {op!r}; ops: set_health, list, ping"}


def server(path: str, state: DeviceState, numa: dict) -> ControlServer:
    """The control server for one device table (not started)."""
    return ControlServer(path, lambda req: handle(state, numa, req), name="fakegpu-control")
