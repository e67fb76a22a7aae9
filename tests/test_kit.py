"""dpconform.plugin_under_test.kit: DeviceState, PluginServer registration, ListAndWatch, re-registration, stop;
dpconform.protocols.control_socket: the JSON control channel.

The kubelet side is the tiny in-test Registration server of tests/support/fake_kubelet.py
(the emulator in fixtures/ is not used here).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
import threading

import pytest

from dpconform.kubeletapi import constants, dp, dp_grpc
from dpconform.protocols import control_socket
from dpconform.protocols.control_socket import ControlServer
from dpconform.plugin_under_test.kit import DeviceState, PluginServer, RegistrationError, stream_snapshots
from tests.support.fake_kubelet import FakeKubelet


class Servicer(dp_grpc.DevicePluginServicer):
    def __init__(self, state):
        self.state = state

    def GetDevicePluginOptions(self, request, context):
        return dp.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):
        yield from stream_snapshots(self.state, context, poll_s=0.1)


OPTIONS = dp.DevicePluginOptions(get_preferred_allocation_available=True)


@pytest.fixture
def plugin_dir():
    d = tempfile.mkdtemp(dir="/tmp", prefix="kit-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kubelet(plugin_dir):
    k = FakeKubelet(plugin_dir).start()
    yield k
    k.stop()


@pytest.fixture
def running(plugin_dir, kubelet):
    """A PluginServer.run() in a thread: (server, state, result list)."""
    state = DeviceState([dp.Device(ID="d0", health=constants.HEALTHY), dp.Device(ID="d1", health=constants.HEALTHY)])
    server = PluginServer(Servicer(state), plugin_dir=plugin_dir, resource_name="example.com/dev", options=OPTIONS)
    stop = threading.Event()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(server.run(stop)), daemon=True)
    t.start()
    yield server, state, result
    stop.set()
    t.join(10)
    assert not t.is_alive()


def test_device_state_versions_and_wait():
    state = DeviceState([dp.Device(ID="a", health=constants.HEALTHY)])
    v = state.version
    assert state.wait_changed(v, timeout=0.01) == v          # no change: times out, same version
    assert state.set_health("a", constants.HEALTHY)            # no-op: no new version
    assert state.version == v
    assert not state.set_health("nope", constants.UNHEALTHY)
    done = []
    t = threading.Thread(target=lambda: done.append(state.wait_changed(v, timeout=10)))
    t.start()
    assert state.set_health("a", constants.UNHEALTHY)
    t.join(10)
    assert done == [v + 1]
    snap = state.snapshot()
    snap[0].health = "mutated"                                  # snapshots are copies
    assert state.get("a").health == constants.UNHEALTHY


def test_registers_with_the_right_request(running, kubelet, plugin_dir):
    server, _, _ = running
    (request, options), = kubelet.wait_registrations(1)
    assert request.version == constants.VERSION
    assert request.resource_name == "example.com/dev"
    assert "/" not in request.endpoint and request.endpoint == server.socket_name
    assert stat.S_ISSOCK(os.lstat(os.path.join(plugin_dir, request.endpoint)).st_mode)
    assert request.options == OPTIONS and options.get_preferred_allocation_available


def test_list_and_watch_snapshot_then_changes(running, kubelet):
    _, state, _ = running
    (request, _), = kubelet.wait_registrations(1)
    with kubelet.channel(request.endpoint) as ch:
        stream = dp_grpc.DevicePluginStub(ch).ListAndWatch(dp.Empty(), timeout=20)
        first = next(stream)
        assert [(d.ID, d.health) for d in first.devices] == [("d0", "Healthy"), ("d1", "Healthy")]
        state.set_health("d1", constants.UNHEALTHY)
        second = next(stream)
        assert [(d.ID, d.health) for d in second.devices] == [("d0", "Healthy"), ("d1", "Unhealthy")]
        stream.cancel()


def test_reregisters_on_a_new_socket_after_kubelet_restart(running, kubelet, plugin_dir):
    server, _, _ = running
    (first, _), = kubelet.wait_registrations(1)
    kubelet.restart()
    (_, _), (second, _) = kubelet.wait_registrations(2)
    assert second.endpoint != first.endpoint
    assert not os.path.exists(os.path.join(plugin_dir, first.endpoint))
    assert os.path.exists(os.path.join(plugin_dir, second.endpoint))
    with kubelet.channel(second.endpoint) as ch:
        assert dp_grpc.DevicePluginStub(ch).GetDevicePluginOptions(dp.Empty(), timeout=5) == Servicer(None).GetDevicePluginOptions(None, None)


def test_reregisters_when_own_socket_vanishes(running, kubelet, plugin_dir):
    (first, _), = kubelet.wait_registrations(1)
    os.unlink(os.path.join(plugin_dir, first.endpoint))
    (_, _), (second, _) = kubelet.wait_registrations(2)
    assert second.endpoint != first.endpoint


def test_stop_removes_socket_and_returns_zero(plugin_dir, kubelet):
    server = PluginServer(Servicer(DeviceState()), plugin_dir=plugin_dir, resource_name="example.com/dev",
                          options=OPTIONS)
    stop = threading.Event()
    result = []
    t = threading.Thread(target=lambda: result.append(server.run(stop)), daemon=True)
    t.start()
    kubelet.wait_registrations(1)
    path = server.socket_path
    assert os.path.exists(path)
    stop.set()
    t.join(10)
    assert result == [0]
    assert not os.path.exists(path)
    assert os.listdir(plugin_dir) == [constants.KUBELET_SOCKET_NAME]


def test_rejected_registration_exits_nonzero(plugin_dir, kubelet):
    kubelet.reject = 'requested API version "v1alpha1" is not supported by kubelet'
    server = PluginServer(Servicer(DeviceState()), plugin_dir=plugin_dir, resource_name="example.com/dev",
                          options=OPTIONS)
    assert server.run(threading.Event()) == 1     # returns on its own (K10): no stop needed
    assert not os.path.exists(server.socket_path)


def test_register_raises_registration_error(plugin_dir, kubelet):
    kubelet.reject = "the ResourceName \"bad\" is invalid"
    server = PluginServer(Servicer(DeviceState()), plugin_dir=plugin_dir, resource_name="bad", options=OPTIONS)
    server.start()
    try:
        with pytest.raises(RegistrationError) as err:
            server.register()
        assert err.value.rejected and "is invalid" in str(err.value)
    finally:
        server.stop()


def test_unreachable_kubelet_is_retried(plugin_dir):
    """A kubelet.sock nobody listens on (UNAVAILABLE) is retried, not fatal; the later kubelet gets us."""
    kubelet_sock = os.path.join(plugin_dir, constants.KUBELET_SOCKET_NAME)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(kubelet_sock)
    stale.close()
    server = PluginServer(Servicer(DeviceState()), plugin_dir=plugin_dir, resource_name="example.com/dev",
                          options=OPTIONS)
    server.retry_interval_s = 0.1
    stop = threading.Event()
    t = threading.Thread(target=server.run, args=(stop,), daemon=True)
    t.start()
    kubelet = None
    try:
        os.unlink(kubelet_sock)
        kubelet = FakeKubelet(plugin_dir).start()
        kubelet.wait_registrations(1)
        assert t.is_alive()
    finally:
        stop.set()
        t.join(10)
        if kubelet:
            kubelet.stop()


# -- dpconform.protocols.control_socket: the reference plugins' JSON control channel ------------------
def test_control_socket_answers_each_line_and_reports_bad_input(plugin_dir):
    def handle(req):
        if req.get("op") == "boom":
            raise KeyError("boom")
        return {"ok": True, "echo": req}
    path = os.path.join(plugin_dir, "ctl", "c.sock")  # parent dirs are made
    with ControlServer(path, handle):
        assert control_socket.request(path, {"op": "ping"}) == {"ok": True, "echo": {"op": "ping"}}
        with socket.socket(socket.AF_UNIX) as s:  # several lines on one connection, answered in order
            s.settimeout(5)
            s.connect(path)
            s.sendall(b'{"op": "a"}\nnot json\n[1]\n{"op": "boom"}\n{"op": "b"}\n')
            with s.makefile("rb") as f:
                answers = [json.loads(f.readline()) for _ in range(5)]
        assert answers[0]["echo"] == {"op": "a"} and answers[4]["echo"] == {"op": "b"}
        assert not answers[1]["ok"] and "bad JSON" in answers[1]["error"]
        assert answers[2] == {"ok": False, "error": "request must be a JSON object"}
        assert not answers[3]["ok"] and "boom" in answers[3]["error"]
    assert not os.path.exists(path)
    with pytest.raises(OSError):
        control_socket.request(path, {"op": "ping"}, timeout=2)


def test_control_socket_replaces_a_stale_file_and_leaves_a_successor_alone(plugin_dir):
    path = os.path.join(plugin_dir, "c.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # what a SIGKILLed instance leaves behind
    stale.close()
    first = ControlServer(path, lambda req: {"ok": True, "n": 1}).start()
    second = ControlServer(path, lambda req: {"ok": True, "n": 2}).start()  # a relaunch on the same path
    try:
        first.stop()
        assert control_socket.request(path, {}) == {"ok": True, "n": 2}
    finally:
        second.stop()
    assert not os.path.exists(path)
