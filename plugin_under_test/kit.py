"""A small device-plugin server kit (deviceplugin v1beta1) for the reference plugins.

    state = DeviceState([dp.Device(ID="dev-0", health="Healthy")])
    server = PluginServer(MyServicer(state), plugin_dir=DIR, resource_name="example.com/dev",
                          options=dp.DevicePluginOptions())
    sys.exit(server.run(stop_event))   # serve, register, re-register after kubelet restarts

The servicer is a dp_grpc.DevicePluginServicer subclass; `stream_snapshots(state, context)` gives it a
ListAndWatch that sends a full snapshot at once and one per change, and ends when the server stops.
Registration follows docs/kubelet-behaviours.md: serve first, then Register (K6); a rejected Register makes
`run` return 1 (K10: the plugin should terminate); a re-created kubelet.sock or a vanished own
socket means the kubelet restarted: serve on a NEW socket name and register again (K9, K15).
"""
from __future__ import annotations

import logging
import os
import stat
import sys
import threading
import time
from concurrent import futures
from typing import Iterator, NoReturn

import grpc

from dpconform.kubeletapi import constants, dp, dp_grpc

log = logging.getLogger("dpconform.kit")

__all__ = ["DeviceState", "PluginServer", "RegistrationError", "stream_snapshots", "setup_logging"]


def setup_logging(level: str | int = "INFO") -> None:
    """Log to stderr with timestamps (idempotent)."""
    logging.basicConfig(stream=sys.stderr, level=level,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                        datefmt="%Y-%m-%dT%H:%M:%S")


def exit_now(code: int) -> NoReturn:
    """Exit a plugin process that has stopped serving and cleaned up at once, as a Go binary does: the
    interpreter's own teardown of gRPC (about 20 ms here) would otherwise add to every stop the suite times."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class RegistrationError(Exception):
    """Register failed. `rejected` is True when the kubelet answered with an error (version, resource
    name, dial failure...), False when the kubelet could not be reached at all."""

    def __init__(self, message: str, *, rejected: bool, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.rejected = rejected
        self.code = code


class DeviceState:
    """Thread-safe device table. Every change bumps `version` and wakes `wait_changed` callers."""

    def __init__(self, devices: list[dp.Device] | None = None):
        self._cond = threading.Condition()
        self._devices: list[dp.Device] = []
        self._by_id: dict[str, list[dp.Device]] = {}    # lookups in O(1): plugins with thousands of devices
        self._version = 0
        self._streams: set = set()      # the contexts of the ListAndWatch streams open now (ended_by)
        if devices:
            self.set_devices(devices)

    @property
    def version(self) -> int:
        with self._cond:
            return self._version

    def set_devices(self, devices: list[dp.Device]) -> None:
        with self._cond:
            self._devices = [_copy(d) for d in devices]
            self._by_id = {}
            for d in self._devices:
                self._by_id.setdefault(d.ID, []).append(d)
            self._bump()

    def set_health(self, device_id: str, health: str) -> bool:
        """Set one device's health; False if the ID is unknown. No change -> no new version."""
        with self._cond:
            found = self._by_id.get(device_id)
            if not found:
                return False
            if any(d.health != health for d in found):
                for d in found:
                    d.health = health
                self._bump()
            return True

    def get(self, device_id: str) -> dp.Device | None:
        with self._cond:
            found = self._by_id.get(device_id)
            return _copy(found[0]) if found else None

    def snapshot(self) -> list[dp.Device]:
        with self._cond:
            return [_copy(d) for d in self._devices]

    def wait_changed(self, version: int, timeout: float | None = None,
                     until: threading.Event | None = None) -> int:
        """Block until the version differs from `version`, `until` is set (see ended_by) or the timeout
        passes; return the version."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or (until is not None and until.is_set()),
                                timeout)
            return self._version

    def ended_by(self, context: grpc.ServicerContext) -> threading.Event:
        """An Event set when the RPC of `context` ends (client gone, server stopping); it also wakes
        wait_changed(until=it) at once, so a stream's thread ends with its RPC instead of at its next poll
        (a server's stop waits for that thread)."""
        done = threading.Event()

        def ended():
            done.set()
            with self._cond:
                self._streams.discard(context)
                self._cond.notify_all()
        with self._cond:
            self._streams.add(context)
        if not context.add_callback(ended):      # the RPC has ended already
            ended()
        return done

    def end_streams(self) -> None:
        """End every open stream now (the server is stopping): a ListAndWatch never finishes on its own,
        so a server's stop would otherwise wait out its whole grace for them."""
        with self._cond:
            streams = list(self._streams)
        for context in streams:
            context.cancel()

    def _bump(self) -> None:
        self._version += 1
        self._cond.notify_all()


def _copy(device: dp.Device) -> dp.Device:
    d = dp.Device()
    d.CopyFrom(device)
    return d


def stream_snapshots(state: DeviceState, context: grpc.ServicerContext,
                     poll_s: float = 0.5) -> Iterator[dp.ListAndWatchResponse]:
    """ListAndWatch body: the full snapshot at once, then one per change, until the RPC is cancelled
    (client gone or server stopped; the wait times out every `poll_s` to notice)."""
    version = state.version
    ended = state.ended_by(context)
    yield dp.ListAndWatchResponse(devices=state.snapshot())
    while context.is_active():
        new = state.wait_changed(version, timeout=poll_s, until=ended)
        if new != version and context.is_active():
            version = new
            yield dp.ListAndWatchResponse(devices=state.snapshot())


class PluginServer:
    """Serves one DevicePlugin servicer on a unix socket in `plugin_dir` and registers it."""

    poll_interval_s = 0.02  # how often run() stats kubelet.sock and our socket
    retry_interval_s = 0.25  # how often run() retries Register while the kubelet is unreachable
    max_workers = 16

    def __init__(self, servicer: dp_grpc.DevicePluginServicer, *, plugin_dir: str, resource_name: str,
                 options: dp.DevicePluginOptions, socket_name: str | None = None,
                 version: str = constants.VERSION, register_timeout_s: float = 10,
                 socket_prefix: str = "dp", state: DeviceState | None = None):
        self.servicer = servicer
        self.state = state                # whose streams stop() ends first (None: they wait out the grace)
        self.plugin_dir = os.path.abspath(plugin_dir)
        self.resource_name = resource_name
        self.options = options            # sent in RegisterRequest (the kubelet asks the servicer anyway)
        self.version = version
        self.register_timeout_s = register_timeout_s
        self.socket_prefix = socket_prefix
        self._fixed_name = socket_name
        self.generation = 0               # bumped by every start()
        self.socket_name = socket_name or self.new_socket_name()
        self.registrations = 0            # successful registrations
        self._server: grpc.Server | None = None
        self._socket_ino: int | None = None
        self._lock = threading.Lock()

    # -- naming and paths -------------------------------------------------------------------------
    def new_socket_name(self) -> str:
        """A fresh name per start (K9): reusing one name races the previous instance."""
        return self._fixed_name or f"{self.socket_prefix}-{time.time_ns()}.sock"

    @property
    def socket_path(self) -> str:
        return os.path.join(self.plugin_dir, self.socket_name)

    @property
    def kubelet_socket(self) -> str:
        return os.path.join(self.plugin_dir, constants.KUBELET_SOCKET_NAME)

    # -- serving ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Bind a gRPC server on plugin_dir/socket_name (a stale file of that name is removed first)."""
        with self._lock:
            if self._server is not None:
                return
            os.makedirs(self.plugin_dir, exist_ok=True)
            path = self.socket_path
            if os.path.lexists(path):
                log.info("removing stale socket %s", path)
                os.unlink(path)
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.max_workers,
                                                            thread_name_prefix="dp-rpc"))
            dp_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
            try:
                port = server.add_insecure_port("unix://" + path)
            except RuntimeError as e:
                port = 0
                log.error("cannot bind %s: %s", path, e)
            if not port:
                raise OSError(f"cannot listen on unix socket {path}")
            # The file's identity right after the bind: a kubelet starting now deletes every socket in
            # the dir, and a file gone before this line leaves None, which _own_socket_ok reads as gone.
            self._socket_ino = _ino(path)
            server.start()
            self._server = server
            self.generation += 1
            log.info("serving %s on %s", self.resource_name, path)

    def stop(self, grace_s: float = 0.1) -> None:
        """Stop the server (the streams of `state` end at once; other in-flight calls get `grace_s`) and
        remove our socket file."""
        with self._lock:
            server, self._server = self._server, None
            if server is None:
                return
            if self.state is not None:
                self.state.end_streams()
            # bounded: a plugin told to stop exits within about a second even when gRPC's stop never reports
            # done (make test once saw PRS-02's SIGTERM, sent as the kubelet's first calls arrived, take >5 s here)
            if not server.stop(grace_s).wait(grace_s + 1):
                log.warning("the gRPC server did not report its stop within %.1f s; going on", grace_s + 1)
            path = self.socket_path
            if self._socket_ino is not None and _ino(path) == self._socket_ino:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            self._socket_ino = None
            log.info("stopped serving on %s", path)

    def restart(self) -> None:
        """Stop, then serve again on a NEW socket name."""
        self.stop()
        self.socket_name = self.new_socket_name()
        self.start()

    @property
    def serving(self) -> bool:
        return self._server is not None

    def _own_socket_ok(self) -> bool:
        """Our server still serves on the file it bound (a kubelet's start deletes every socket in the
        dir, K2). True while nothing is bound yet (a subclass may bind later)."""
        if not self.serving:
            return True
        return self._socket_ino is not None and _ino(self.socket_path) == self._socket_ino

    def _superseded(self, kubelet: tuple[int, int] | None) -> str | None:
        """Why a Register sent to the kubelet.sock of identity `kubelet` can no longer succeed, if so."""
        if not self._own_socket_ok():
            return "our socket was deleted (a kubelet start removes every socket in the dir)"
        now = _identity(self.kubelet_socket)
        if now != kubelet:
            return "kubelet.sock was re-created" if now is not None else "kubelet.sock was removed"
        return None

    # -- registration -----------------------------------------------------------------------------
    def register(self) -> None:
        """Call kubelet.sock Registration.Register with a deadline; raise RegistrationError on failure."""
        request = dp.RegisterRequest(version=self.version, endpoint=self.registered_endpoint(),
                                     resource_name=self.resource_name, options=self.options)
        kubelet = _identity(self.kubelet_socket)
        # A private subchannel pool: a shared one may still be backing off from the previous kubelet.
        with grpc.insecure_channel("unix://" + self.kubelet_socket,
                                   options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            call = dp_grpc.RegistrationStub(channel).Register.future(request, timeout=self.register_timeout_s)
            try:
                # The kubelet dials our endpoint while the call is open (K6): a kubelet restart meanwhile
                # deletes our socket, and that dial would hold the call for its whole deadline. Give up
                # on such a call at once; run() serves on a new socket and registers again.
                while True:
                    try:
                        call.result(timeout=self.poll_interval_s)
                        break
                    except grpc.FutureTimeoutError:
                        reason = self._superseded(kubelet)
                        if reason:
                            call.cancel()
                            raise RegistrationError(f"Register {self.resource_name} at {self.kubelet_socket} "
                                                    f"abandoned: {reason}", rejected=False,
                                                    code=grpc.StatusCode.CANCELLED) from None
            except grpc.RpcError as e:
                code = e.code()
                unreachable = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
                raise RegistrationError(f"Register {self.resource_name} at {self.kubelet_socket}: "
                                        f"{code.name}: {e.details()}", rejected=not unreachable, code=code) from None
        self.registrations += 1
        log.info("registered %s (endpoint %s, version %s)", self.resource_name, self.socket_name, self.version)
        self.on_registered(self.registrations)

    # -- hooks for subclasses ---------------------------------------------------------------------
    def registered_endpoint(self) -> str:
        """The endpoint RegisterRequest names: the socket we serve on."""
        return self.socket_name

    def on_registered(self, count: int) -> None:
        """Called after every successful registration."""

    def on_tick(self) -> None:
        """Called once per run() poll."""

    def on_registration_rejected(self, error: RegistrationError, stop_event: threading.Event) -> int:
        """The kubelet rejected us: the proto says a plugin should terminate (K10). Return the exit code."""
        log.error("registration rejected, exiting: %s", error)
        return 1

    # -- main loop --------------------------------------------------------------------------------
    def run(self, stop_event: threading.Event) -> int:
        """Serve and register, then watch for kubelet restarts until `stop_event`; return an exit code."""
        self.start()
        try:
            registered_with = None       # kubelet.sock identity at our last good registration
            last_try = float("-inf")
            while not stop_event.is_set():
                kubelet = _identity(self.kubelet_socket)
                own_ok = self._own_socket_ok()
                # A missing kubelet.sock is a kubelet that is down: its start deletes every socket in the
                # dir (K2), so a new socket made now would be gone before Register. Wait for the new one.
                renewed = kubelet is not None and registered_with is not None and kubelet != registered_with
                if renewed or not own_ok:
                    log.info("kubelet restarted (%s): serving on a new socket",
                             "kubelet.sock re-created" if renewed else "our socket vanished")
                    self.restart()
                    registered_with, last_try = None, float("-inf")
                if (registered_with is None and kubelet is not None
                        and time.monotonic() - last_try >= self.retry_interval_s):
                    last_try = time.monotonic()
                    try:
                        self.register()
                        registered_with = kubelet
                    except RegistrationError as e:
                        if e.rejected:
                            return self.on_registration_rejected(e, stop_event)
                        log.warning("kubelet not reachable yet, will retry: %s", e)
                self.on_tick()
                stop_event.wait(self.poll_interval_s)
            return 0
        finally:
            self.on_exit()
            self.stop()

    def on_exit(self) -> None:
        """Called once when run() ends (SIGTERM, a rejected registration), before the server stops."""


def _ino(path: str) -> int | None:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return None


def _identity(path: str) -> tuple[int, int] | None:
    """(inode, ctime_ns) of a socket file, None if missing: a re-created file gets a new identity."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    return (st.st_ino, st.st_ctime_ns)
