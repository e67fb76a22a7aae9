"""The fake-GPU device plugin: devices, the DevicePlugin servicer, the NUMA-packing preferred policy.

Defects (defects.py) are small branches marked `# defect <name>`.
"""
from __future__ import annotations

import itertools
import logging
import os
import stat
import threading
import time
import uuid

import grpc

from dpconform.kubeletapi import constants, dp, dp_grpc
from dpconform.protocols.trace import trace_line
from dpconform.plugin_under_test.kit import DeviceState, PluginServer, RegistrationError
from dpconform.plugin_under_test.fakegpu.config import Config
from dpconform.plugin_under_test.fakegpu.defects import FORCES_PREFERRED, FORCES_PRE_START

log = logging.getLogger("dpconform.fakegpu")

ENV_VISIBLE = "FAKEGPU_VISIBLE_DEVICES"
CDI_KIND = "dpconform.io/fakegpu"
MOUNT_PATH = "/usr/local/fakegpu"

_SHARED_BUFFER: list[str] = []   # defect shared-response-race
_LEAKED: list = []               # defect leak-on-reregister
_PROCESS_SUFFIX = uuid.uuid4().hex[:6]  # defect new-ids-after-restart


def trace(rpc: str, **fields) -> None:
    """Log one kubelet call as JSON (DEBUG): what the plugin was asked, seen from the plugin's side, so
    tests compare what two kubelets sent the same plugin (tests/test_differential.py)."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s", trace_line(rpc, **fields))


def _short(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")


class FakeGpus:
    """The device table of one plugin process: IDs, NUMA nodes, the fake device nodes on disk."""

    def __init__(self, cfg: Config, dev_dir: str):
        self.cfg = cfg
        self.dev_dir = dev_dir
        layout = cfg.numa_layout()
        if cfg.has("overcommit"):  # defect overcommit: one device more than configured
            layout = layout + [layout[-1] if layout else None]
        self.ids: list[str] = []
        self.numa: dict[str, int | None] = {}
        for index, node in enumerate(layout):
            device_id = cfg.device_id(index)
            if cfg.has("new-ids-after-restart"):  # defect new-ids-after-restart
                device_id += "-" + _PROCESS_SUFFIX
            self.ids.append(device_id)
            self.numa[device_id] = node
        self.order = {device_id: i for i, device_id in enumerate(self.ids)}
        self.state = DeviceState([self._device(i) for i in self.ids])
        self._first_version = self.state.version
        self.id_suffix = ""  # defect renumber-on-reregister

    def _device(self, device_id: str) -> dp.Device:
        d = dp.Device(ID=device_id, health=constants.HEALTHY)
        if self.numa[device_id] is not None:
            d.topology.nodes.add(ID=self.numa[device_id])
        return d

    def host_path(self, device_id: str) -> str:
        return os.path.join(self.dev_dir, device_id)

    def create_nodes(self) -> None:
        """The dir of the fake device nodes; each node is made when its device is first allocated
        (ensure_node), so a plugin with thousands of devices starts as fast as one with four."""
        os.makedirs(self.dev_dir, exist_ok=True)
        if self.cfg.mounts:
            os.makedirs(os.path.join(self.dev_dir, "lib"), exist_ok=True)

    def ensure_node(self, device_id: str) -> None:
        """One "device node" per GPU: as root a character device (a copy of /dev/null, so a container
        runtime passes it into containers as it would a real GPU's), else a plain file."""
        path = self.host_path(device_id)
        if os.geteuid() != 0:
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write(f"fake GPU {device_id}\n")
            return
        try:
            if stat.S_ISCHR(os.lstat(path).st_mode):
                return
            os.unlink(path)
        except FileNotFoundError:
            pass
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.stat("/dev/null").st_rdev)
        except FileExistsError:   # a concurrent Allocate of the same device made it
            pass

    def remove_nodes(self) -> None:
        for device_id in self.ids:
            try:
                os.unlink(self.host_path(device_id))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(os.path.join(self.dev_dir, "lib"))
        except OSError:
            pass

    def advertised(self) -> list[dp.Device]:
        """The snapshot ListAndWatch sends."""
        devices = self.state.snapshot()
        if devices and self.cfg.has("bad-health-string") and devices[-1].health == constants.HEALTHY:
            devices[-1].health = "healthy"  # defect bad-health-string
        if self.cfg.has("lowercase-health"):  # defect lowercase-health: every device, in lower case
            for d in devices:
                d.health = d.health.lower()
        if devices and self.cfg.has("negative-numa"):
            del devices[-1].topology.nodes[:]  # defect negative-numa
            devices[-1].topology.nodes.add(ID=-1)
        if self.cfg.has("topology-lost-on-update") and self.state.version > self._first_version:
            for d in devices:
                d.ClearField("topology")  # defect topology-lost-on-update
        if self.id_suffix:
            for d in devices:
                d.ID += self.id_suffix  # defect renumber-on-reregister
        if self.cfg.has("drop-unhealthy"):  # defect drop-unhealthy: a failed device leaves the list
            devices = [d for d in devices if d.health == constants.HEALTHY]
        if devices and self.cfg.has("duplicate-ids"):
            devices.append(devices[0])  # defect duplicate-ids
        return devices


def preferred(available: list[str], must_include: list[str], size: int,
              numa: dict[str, int | None], order: dict[str, int]) -> list[str]:
    """NUMA packing: must_include first; the rest from the fewest NUMA nodes (counting the nodes
    must_include already uses) that can hold it, lowest node IDs, then lowest device IDs.
    Raises ValueError for an impossible request."""
    available = list(dict.fromkeys(available))
    must = list(dict.fromkeys(must_include))
    if size < 0:
        raise ValueError(f"allocation_size {size} is negative")
    if size > len(available):
        raise ValueError(f"allocation_size {size} is more than the {len(available)} available devices")
    if len(must) > size:
        raise ValueError(f"{len(must)} must_include devices do not fit allocation_size {size}")
    missing = [d for d in must if d not in available]
    if missing:
        raise ValueError(f"must_include devices not in available_deviceIDs: {', '.join(map(_short, missing))}")
    rest = [d for d in available if d not in must]
    need = size - len(must)
    if need == 0:
        return must

    def node_key(n):
        return (n is None, n if n is not None else 0)
    by_node: dict = {}
    for d in sorted(rest, key=lambda d: (order.get(d, len(order)), d)):
        by_node.setdefault(numa.get(d), []).append(d)
    used = {numa.get(d) for d in must}
    nodes = sorted(by_node, key=node_key)
    best = None
    for k in range(1, len(nodes) + 1):
        for combo in itertools.combinations(nodes, k):
            if sum(len(by_node[n]) for n in combo) < need:
                continue
            key = (len(used | set(combo)), k, [node_key(n) for n in combo])
            if best is None or key < best[0]:
                best = (key, combo)
        if best is not None:
            break
    # Fill from nodes must_include already uses first, then in node order.
    combo = sorted(best[1], key=lambda n: (n not in used, node_key(n)))
    chosen = [d for n in combo for d in by_node[n]][:need]
    return must + sorted(chosen, key=lambda d: (order.get(d, len(order)), d))


class FakeGpuServicer(dp_grpc.DevicePluginServicer):
    def __init__(self, cfg: Config, gpus: FakeGpus):
        self.cfg = cfg
        self.gpus = gpus
        self.server: PluginServer | None = None  # set by FakeGpuServer (stream counting per socket)
        self._streams: dict[int, int] = {}
        self._handed_out: set[str] = set()   # defect exclusive-allocate
        self._lock = threading.Lock()

    def options(self) -> dp.DevicePluginOptions:
        defects = set(self.cfg.defects)
        return dp.DevicePluginOptions(
            pre_start_required=self.cfg.pre_start_required or bool(defects & FORCES_PRE_START),
            get_preferred_allocation_available=(self.cfg.get_preferred_allocation_available
                                                or bool(defects & FORCES_PREFERRED)))

    # -- RPCs -------------------------------------------------------------------------------------
    def GetDevicePluginOptions(self, request, context):
        trace("GetDevicePluginOptions")
        if self.cfg.has("slow-options"):
            time.sleep(7)  # defect slow-options
        if self.cfg.has("options-error"):
            context.abort(grpc.StatusCode.INTERNAL, "fake GPU options unavailable (defect options-error)")
        return self.options()

    def ListAndWatch(self, request, context):
        trace("ListAndWatch")
        done = self.gpus.state.ended_by(context)
        generation = self.server.generation if self.server else 0
        with self._lock:
            self._streams[generation] = self._streams.get(generation, 0) + 1
            first_stream = self._streams[generation] == 1
        if self.cfg.has("no-snapshot") or (self.cfg.has("single-stream") and not first_stream):
            done.wait()  # defect no-snapshot / single-stream: hold the stream open, never send
            return
        state = self.gpus.state
        version = state.version
        yield dp.ListAndWatchResponse(devices=self.gpus.advertised())
        opened = time.monotonic()
        while context.is_active():
            if self.cfg.has("end-stream") and time.monotonic() - opened >= 2:
                return  # defect end-stream
            if self.cfg.has("snapshot-spam"):
                if not done.wait(0.05):  # defect snapshot-spam
                    yield dp.ListAndWatchResponse(devices=self.gpus.advertised())
                continue
            if self.cfg.has("ignore-health-change"):
                done.wait(0.5)  # defect ignore-health-change: never push
                continue
            new = state.wait_changed(version, timeout=0.5, until=done)
            if new != version and context.is_active():
                version = new
                yield dp.ListAndWatchResponse(devices=self.gpus.advertised())

    def GetPreferredAllocation(self, request, context):
        if self.cfg.has("preferred-unimplemented"):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "GetPreferredAllocation not implemented")
        response = dp.PreferredAllocationResponse()
        trace("GetPreferredAllocation", requests=[
            {"available": sorted(c.available_deviceIDs), "must_include": sorted(c.must_include_deviceIDs),
             "size": c.allocation_size} for c in request.container_requests])
        for creq in request.container_requests:
            available, must, size = list(creq.available_deviceIDs), list(creq.must_include_deviceIDs), creq.allocation_size
            if self.cfg.has("preferred-crash-on-impossible") and size > len(available):
                os._exit(4)  # defect preferred-crash-on-impossible
            try:
                if self.cfg.has("ignore-must-include"):  # defect ignore-must-include
                    others = [d for d in available if d not in must]
                    ids = preferred(others if len(others) >= size else available, [], size,
                                    self.gpus.numa, self.gpus.order)
                else:
                    ids = preferred(available, must, size, self.gpus.numa, self.gpus.order)
            except ValueError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"GetPreferredAllocation: {e}")
            ids = self._bend_preferred(ids, available, must, size)
            response.container_responses.add(deviceIDs=ids)
        return response

    def _bend_preferred(self, ids: list[str], available: list[str], must: list[str], size: int) -> list[str]:
        if self.cfg.has("preferred-not-subset"):  # defect preferred-not-subset
            bogus = "fakegpu-not-available"
            free = [i for i, d in enumerate(ids) if d not in must]
            if free:
                ids[free[-1]] = bogus
            else:
                ids.append(bogus)
        if self.cfg.has("preferred-wrong-size"):  # defect preferred-wrong-size
            extra = [d for d in available if d not in ids]
            ids = ids + extra[:1] if extra else ids[:-1]
        if self.cfg.has("preferred-duplicates") and ids:  # defect preferred-duplicates
            ids = ids[:-1] + [ids[0]] if len(ids) >= 2 else ids + [ids[0]]
        return ids

    def Allocate(self, request, context):
        trace("Allocate", requests=[sorted(c.devices_ids) for c in request.container_requests])
        if self.cfg.has("garbage-ids-crash") and any(  # defect garbage-ids-crash
                len(c.devices_ids) > 1000 or any(len(i) > 1024 for i in c.devices_ids)
                for c in request.container_requests):
            os._exit(5)
        delay_ms = 150.0 if self.cfg.has("slow-allocate") else self.cfg.allocate_latency_ms  # defect slow-allocate
        if delay_ms:
            time.sleep(delay_ms / 1000)
        # defect broken-after-reregister: the state is lost once it serves anew for a restarted kubelet (before
        # its Register call returns: the kubelet may call Allocate on the new endpoint before that)
        if self.cfg.has("broken-after-reregister") and self.server and self.server.generation > 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "device state lost")
        responses = []
        for creq in request.container_requests:
            ids = list(creq.devices_ids)
            self._check_ids(ids, context)
            if self.cfg.has("partial-allocate") and len(ids) > 2:  # defect partial-allocate
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "at most 2 devices per container")
            if self.cfg.has("exclusive-allocate"):  # defect exclusive-allocate
                with self._lock:
                    taken = set(ids) & self._handed_out
                    self._handed_out |= set(ids)
                if taken:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"already allocated: {sorted(taken)}")
            if self.cfg.has("allocate-wrong-devices"):  # defect allocate-wrong-devices
                ids = self.gpus.ids[:len(ids)]
            responses.append(self._container_response(ids))
        if self.cfg.has("empty-response"):
            responses = []  # defect empty-response
        if self.cfg.has("wrong-response-count"):
            responses = responses[:1] or [dp.ContainerAllocateResponse()]  # defect wrong-response-count
        return dp.AllocateResponse(container_responses=responses)

    def _check_ids(self, ids: list[str], context) -> None:
        resource = self.cfg.resource
        if not ids:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"no device IDs requested for {resource}")
        for device_id in ids:
            device = self.gpus.state.get(device_id)
            if device is None:
                if self.cfg.has("crash-on-unknown-id"):
                    os._exit(3)  # defect crash-on-unknown-id
                if self.cfg.has("accept-unknown-id"):
                    continue  # defect accept-unknown-id
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"unknown device ID {_short(device_id)} for {resource} ({len(self.gpus.ids)} devices: "
                              f"{self.gpus.ids[0] if self.gpus.ids else ''}...)")
            if device.health != constants.HEALTHY and not self.cfg.has("allocate-unhealthy"):  # defect allocate-unhealthy
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              f"device {device_id} of {resource} is {device.health}; cannot allocate it")
        if len(set(ids)) != len(ids):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"duplicate device IDs in request for {resource}")

    def _container_response(self, ids: list[str]) -> dp.ContainerAllocateResponse:
        if self.cfg.has("shared-response-race"):  # defect shared-response-race
            _SHARED_BUFFER.clear()
            _SHARED_BUFFER.extend(ids)
            time.sleep(0.005)    # the window in which concurrent calls overwrite the buffer (ALC-07)
            ids = list(_SHARED_BUFFER)
        r = dp.ContainerAllocateResponse()
        r.envs[ENV_VISIBLE] = ",".join(ids)
        for device_id in ids:
            if device_id in self.gpus.order:     # not an unknown ID some defect lets through
                self.gpus.ensure_node(device_id)
            r.devices.add(container_path=f"/dev/{device_id}", host_path=self.gpus.host_path(device_id),
                          permissions="rw")
        if self.cfg.mounts:
            r.mounts.add(container_path=MOUNT_PATH, host_path=os.path.join(self.gpus.dev_dir, "lib"), read_only=True)
        if self.cfg.cdi:
            for device_id in ids:
                r.cdi_devices.add(name=f"{CDI_KIND}={device_id}")
        if self.cfg.annotations is True:
            r.annotations["dpconform.io/fakegpu-devices"] = ",".join(ids)
        elif self.cfg.annotations:
            r.annotations.update(self.cfg.annotations)
        if self.cfg.has("bad-response"):  # defect bad-response
            r.envs["1-BAD NAME"] = "x"
            for spec in r.devices:
                spec.container_path = spec.container_path.lstrip("/")
                spec.permissions = "x"
        if self.cfg.has("nondeterministic"):
            r.envs["FAKEGPU_NONCE"] = uuid.uuid4().hex  # defect nondeterministic
        return r

    def PreStartContainer(self, request, context):
        trace("PreStartContainer", devices=sorted(request.devices_ids))
        if self.cfg.has("prestart-unimplemented"):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "PreStartContainer not implemented")  # defect
        if self.cfg.has("prestart-fails"):
            context.abort(grpc.StatusCode.INTERNAL, "fake GPU failed to initialise (defect prestart-fails)")
        if not self.cfg.has("prestart-accepts-unknown"):  # defect prestart-accepts-unknown
            unknown = [d for d in request.devices_ids if self.gpus.state.get(d) is None]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"PreStartContainer: unknown device IDs {', '.join(map(_short, unknown[:5]))}")
        return dp.PreStartContainerResponse()


class FakeGpuServer(PluginServer):
    """PluginServer plus the registration/lifecycle defects."""

    max_workers = 64

    def __init__(self, cfg: Config, servicer: FakeGpuServicer):
        self.cfg = cfg
        fixed = cfg.has("fixed-socket-name") or cfg.has("stale-socket-crash")
        options = servicer.options()
        super().__init__(
            servicer, plugin_dir=cfg.plugin_dir,
            resource_name="fakegpu" if cfg.has("invalid-resource-name") else cfg.resource,  # defect invalid-resource-name
            options=options,
            socket_name="fakegpu.sock" if fixed else None,  # defect fixed-socket-name / stale-socket-crash
            version="v1alpha1" if cfg.has("wrong-version") else constants.VERSION,  # defect wrong-version
            socket_prefix="fakegpu", state=servicer.gpus.state)
        if cfg.has("options-mismatch"):  # defect options-mismatch
            self.options = dp.DevicePluginOptions(
                pre_start_required=not options.pre_start_required,
                get_preferred_allocation_available=not options.get_preferred_allocation_available)
        servicer.server = self
        self._deferred_bind = cfg.has("register-before-serving")
        self._last_storm = 0.0

    def start(self) -> None:
        if self._deferred_bind:
            return  # defect register-before-serving: bind only after Register was sent
        if self.cfg.has("stale-socket-crash") and os.path.lexists(self.socket_path):
            log.error("cannot listen on %s: address in use", self.socket_path)  # defect stale-socket-crash
            raise SystemExit(1)
        super().start()

    def register(self) -> None:
        if not self._deferred_bind:
            return super().register()
        # defect register-before-serving: Register goes out first, the server binds 0.3 s later.
        self._deferred_bind = False
        outcome: list = []

        def call():
            try:
                PluginServer.register(self)
                outcome.append(None)
            except RegistrationError as e:
                outcome.append(e)
        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        time.sleep(0.3)
        self.start()
        caller.join()
        if outcome and outcome[0] is not None:
            raise outcome[0]

    def registered_endpoint(self) -> str:
        if self.cfg.has("unserved-endpoint"):  # defect unserved-endpoint: names a socket nobody serves
            return "fakegpu-unserved.sock"
        return super().registered_endpoint()

    def on_registration_rejected(self, error, stop_event) -> int:
        if self.cfg.has("ignore-register-failure"):  # defect ignore-register-failure
            while not stop_event.wait(1):
                pass
            return 0
        return super().on_registration_rejected(error, stop_event)

    def on_exit(self) -> None:
        if self.cfg.has("unhealthy-on-exit"):  # defect unhealthy-on-exit: a "drain" reported to the kubelet
            for device_id in self.servicer.gpus.ids:
                self.servicer.gpus.state.set_health(device_id, constants.UNHEALTHY)
            time.sleep(0.5)     # the open ListAndWatch streams send it before the server stops

    def on_tick(self) -> None:
        if self.cfg.has("register-storm") and self.registrations and time.monotonic() - self._last_storm >= 0.5:
            self._last_storm = time.monotonic()  # defect register-storm
            try:
                self.register()
            except RegistrationError as e:
                log.warning("%s", e)

    def new_socket_name(self) -> str:
        if self.cfg.has("renumber-on-reregister"):  # defect renumber-on-reregister: new IDs per restart
            # generation counts the servers started so far: none before the first registration
            self.servicer.gpus.id_suffix = f"-r{self.generation}" if self.generation else ""
        return super().new_socket_name()

    def on_registered(self, count: int) -> None:
        if self.cfg.has("leak-on-reregister") and count > 1:  # defect leak-on-reregister
            never = threading.Event()
            threading.Thread(target=never.wait, daemon=True, name=f"leak-{count}").start()
            _LEAKED.append(never)
            _LEAKED.extend(open(os.devnull) for _ in range(20))

    def run(self, stop_event: threading.Event) -> int:
        if not self.cfg.has("no-reregister"):
            return super().run(stop_event)
        # defect no-reregister: register once, never watch for kubelet restarts
        self.start()
        try:
            self.register()
        except RegistrationError as e:
            log.error("registration failed, exiting: %s", e)
            self.stop()
            return 1
        try:
            while not stop_event.wait(0.5):
                pass
            return 0
        finally:
            self.stop()
