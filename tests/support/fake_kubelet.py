"""A tiny in-test kubelet: the Registration server on DIR/kubelet.sock, shared by the tests of the plugins.

Not the emulator in fixtures/: it only takes registrations (and can reject them) and records them.
Import as `from tests.support.fake_kubelet import FakeKubelet`.
"""
from __future__ import annotations

import os
import stat
import threading
from concurrent import futures

import grpc

from dpconform.kubeletapi import constants, dp, dp_grpc


class FakeKubelet(dp_grpc.RegistrationServicer):
    """Registration server on DIR/kubelet.sock; like the kubelet it dials the plugin and asks its options.

    reject: when set (also settable later as the attribute), every Register is aborted with this message.
    ask_options: when False, Register only records the request (options recorded as None), dialing nothing.
    registrations: (RegisterRequest, DevicePluginOptions | None) pairs, in arrival order.
    on_register: when set, called with each accepted RegisterRequest before Register returns (what a kubelet
    may do on the new endpoint while the plugin's Register call is still open).
    """

    def __init__(self, plugin_dir: str, reject: str | None = None, ask_options: bool = True):
        self.dir = plugin_dir
        self.reject = reject
        self.ask_options = ask_options
        self.registrations: list[tuple[dp.RegisterRequest, dp.DevicePluginOptions | None]] = []
        self._cond = threading.Condition()
        self._server = None
        self.on_register = None

    def Register(self, request, context):
        if self.reject:
            context.abort(grpc.StatusCode.UNKNOWN, self.reject)
        options = None
        if self.ask_options:
            with grpc.insecure_channel("unix://" + os.path.join(self.dir, request.endpoint)) as ch:
                options = dp_grpc.DevicePluginStub(ch).GetDevicePluginOptions(dp.Empty(), timeout=10)
        if self.on_register:
            self.on_register(request)
        with self._cond:
            self.registrations.append((request, options))
            self._cond.notify_all()
        return dp.Empty()

    def start(self) -> "FakeKubelet":
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dp_grpc.add_RegistrationServicer_to_server(self, self._server)
        assert self._server.add_insecure_port("unix://" + os.path.join(self.dir, constants.KUBELET_SOCKET_NAME))
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.stop(0).wait(5)
            self._server = None
        sock = os.path.join(self.dir, constants.KUBELET_SOCKET_NAME)
        if os.path.lexists(sock):
            os.unlink(sock)

    def restart(self) -> None:
        """What a kubelet restart does to the dir (K15): every socket removed, kubelet.sock re-created."""
        self.stop()
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        self.start()

    def wait_registrations(self, count: int = 1, timeout: float = 10
                           ) -> list[tuple[dp.RegisterRequest, dp.DevicePluginOptions | None]]:
        """All registrations so far, once there are at least `count`; TimeoutError after `timeout` s."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.registrations) >= count, timeout):
                raise TimeoutError(f"{len(self.registrations)} registrations after {timeout} s, wanted {count}")
            return list(self.registrations)

    def channel(self, endpoint: str) -> grpc.Channel:
        return grpc.insecure_channel("unix://" + os.path.join(self.dir, endpoint))
