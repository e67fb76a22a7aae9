"""An in-process stand-in for `pynvml`, configured from a YAML topology (see topologies/*.yaml).

It exposes the pynvml names the NVML plugin uses (nvmlInit, nvmlDeviceGetHandleByIndex, ...,
nvmlEventSetWait, the nvmlEventType* and NVML_TOPOLOGY_* constants) and raises pynvml's REAL error
classes (pynvml.NVMLError_Timeout, NVMLError_NotSupported, NVMLError_GpuIsLost, ...), so the plugin
cannot tell it from the real library. The backend is chosen in exactly one place: backend.load().

Besides pynvml's names it provides `numa_node(handle)` (the real backend reads sysfs; the fake answers
from its YAML) and test hooks:
    inject_xid(device, xid)       an nvmlEventTypeXidCriticalError event on that GPU (index or UUID)
    recover(device)               clears the XID mark and emits nvmlEventTypeGpuRecoveryAction with
                                  NVML_GPU_RECOVERY_ACTION_NONE (only a plugin run with health recovery
                                  enabled listens for it; NVIDIA's plugin never recovers a device)
    fail_next_wait(error, count)  the next `count` nvmlEventSetWait calls raise that NVML error
From outside the process the same hooks are reachable over a small unix-socket control server
(`control=PATH`, protocols/control_socket.py: one JSON request line -> one JSON reply line;
client: control_socket.request) and `dpconform nvml-plugin inject-xid|recover|health|fail-wait`.

Module-level use: `fake_nvml.configure(...)` sets up the default instance; every other module
attribute is looked up on it (PEP 562), so `fake_nvml.nvmlInit()` works like `pynvml.nvmlInit()`.
"""
from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
import yaml

from dpconform.protocols.control_socket import ControlServer

DEFAULT_TOPOLOGY = Path(__file__).with_name("topologies") / "dgx-8gpu-2numa.yaml"

# Re-exported real names: errors and constants come from pynvml itself.
NVMLError = pynvml.NVMLError
_REEXPORT_PREFIXES = ("NVMLError", "NVML_TOPOLOGY_", "NVML_ERROR_", "NVML_GPU_RECOVERY_ACTION_",
                      "nvmlEventType", "NVML_SUCCESS")

# gpuInstanceId / computeInstanceId in an event on a full (non-MIG) GPU: 0xFFFFFFFF in real NVML.
_NO_INSTANCE = 0xFFFFFFFF


def error_class(name: str | int) -> type:
    """The real pynvml error class for a name ("GpuIsLost", "NVMLError_GpuIsLost", "GPU_IS_LOST") or code."""
    if isinstance(name, int) or (isinstance(name, str) and name.isascii() and name.isdigit()):
        return pynvml.nvmlExceptionClass(int(name))
    text = str(name)
    for candidate in (text, "NVMLError_" + text):
        cls = getattr(pynvml, candidate, None)
        if isinstance(cls, type) and issubclass(cls, pynvml.NVMLError):
            return cls
    code = getattr(pynvml, "NVML_ERROR_" + text.upper(), None)
    if isinstance(code, int):
        return pynvml.nvmlExceptionClass(code)
    lowered = {k.lower(): k for k in dir(pynvml) if k.startswith("NVMLError_")}
    key = ("nvmlerror_" + text.replace("_", "")).lower()
    if key in lowered:
        return getattr(pynvml, lowered[key])
    raise ValueError(f"unknown NVML error name {name!r} (e.g. Unknown, GpuIsLost, Timeout, DriverNotLoaded)")


@dataclass
class FakePciInfo:
    """Shaped like pynvml.nvmlPciInfo_t: busId/busIdLegacy are bytes, as ctypes char arrays read back."""
    busId: bytes
    busIdLegacy: bytes
    domain: int
    bus: int
    device: int
    pciDeviceId: int = 0x233010DE
    pciSubSystemId: int = 0x16C110DE


@dataclass
class FakeEventData:
    """Shaped like pynvml.c_nvmlEventData_t."""
    device: "FakeHandle"
    eventType: int
    eventData: int
    gpuInstanceId: int = _NO_INSTANCE
    computeInstanceId: int = _NO_INSTANCE


@dataclass(eq=False)
class FakeHandle:
    index: int
    uuid: str
    name: str
    bus_id: str
    numa: int | None
    pcie_switch: Any = None
    host_bridge: Any = None
    events_supported: bool = True
    xids: list[int] = field(default_factory=list)

    def __repr__(self) -> str:  # handles show up in logs
        return f"<FakeHandle {self.index} {self.uuid}>"


class FakeEventSet:
    def __init__(self) -> None:
        self.queue: "queue.Queue[FakeEventData]" = queue.Queue()
        self.masks: dict[int, int] = {}   # id(handle) -> registered event mask
        self.freed = False


class FakeNvml:
    """One fake NVML library instance. Attributes mirror pynvml's module-level names."""

    def __init__(self, topology: str | os.PathLike | dict | None = None, *, control: str | None = None):
        self._lock = threading.RLock()
        self._refcount = 0
        self._event_sets: list[FakeEventSet] = []
        self._wait_errors: list[type] = []
        self._control_path = control
        self._control: ControlServer | None = None
        self.load_topology(topology)

    # ------------------------------------------------------------------ configuration
    def load_topology(self, topology: str | os.PathLike | dict | None) -> None:
        if topology is None:
            topology = DEFAULT_TOPOLOGY
        if isinstance(topology, dict):
            data = topology
            self.topology_source = "<dict>"
        else:
            path = Path(topology)
            try:
                data = yaml.safe_load(path.read_text()) or {}
            except OSError as exc:
                raise ValueError(f"fake NVML topology {path}: {exc.strerror or exc}") from exc
            self.topology_source = str(path)
        if not isinstance(data, dict) or not isinstance(data.get("devices", []), list):
            raise ValueError(f"fake NVML topology {self.topology_source}: expected a mapping with a 'devices' list")
        self.driver_version = str(data.get("driverVersion", "550.54.15"))
        init_error = data.get("initError")
        self.init_error = error_class(init_error) if init_error else None
        handles = []
        for pos, dev in enumerate(data.get("devices") or []):
            index = int(dev.get("index", pos))
            bus_id = str(dev.get("busId", f"00000000:{0x10 + index * 0x10:02X}:00.0"))
            numa = dev.get("numa")
            handles.append(FakeHandle(
                index=index,
                uuid=str(dev.get("uuid", f"GPU-00000000-0000-4000-8000-{index:012x}")),
                name=str(dev.get("name", "NVIDIA Fake GPU")),
                bus_id=bus_id,
                numa=None if numa is None else int(numa),
                pcie_switch=dev.get("pcieSwitch"),
                host_bridge=dev.get("hostBridge"),
                events_supported=bool(dev.get("eventsSupported", True)),
            ))
        handles.sort(key=lambda h: h.index)
        if [h.index for h in handles] != list(range(len(handles))):
            raise ValueError(f"fake NVML topology {self.topology_source}: device indexes must be 0..N-1")
        if len({h.uuid for h in handles}) != len(handles):
            raise ValueError(f"fake NVML topology {self.topology_source}: duplicate UUIDs")
        self._handles = handles

    # ------------------------------------------------------------------ pynvml names
    def __getattr__(self, name: str) -> Any:
        # Constants and error classes are pynvml's own objects.
        if name.startswith(_REEXPORT_PREFIXES):
            return getattr(pynvml, name)
        raise AttributeError(f"fake NVML has no {name!r}")

    def _check_init(self) -> None:
        if self._refcount <= 0:
            raise pynvml.NVMLError_Uninitialized()

    def _handle(self, handle: Any) -> FakeHandle:
        self._check_init()
        if not isinstance(handle, FakeHandle) or handle not in self._handles:
            raise pynvml.NVMLError_InvalidArgument()
        return handle

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        with self._lock:
            if self.init_error is not None:
                raise self.init_error()
            self._refcount += 1
            if self._refcount == 1 and self._control_path:
                self._start_control()

    def nvmlShutdown(self) -> None:
        with self._lock:
            self._check_init()
            self._refcount -= 1
            if self._refcount == 0:
                self._stop_control()

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self._handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._check_init()
        if not 0 <= int(index) < len(self._handles):
            raise pynvml.NVMLError_InvalidArgument()
        return self._handles[int(index)]

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeHandle:
        self._check_init()
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for h in self._handles:
            if h.uuid == text:
                return h
        raise pynvml.NVMLError_NotFound()

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._handle(handle).index

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._handle(handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._handle(handle).name

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._handle(handle).index

    def nvmlDeviceGetPciInfo(self, handle: Any) -> FakePciInfo:
        h = self._handle(handle)
        domain, bus, rest = h.bus_id.split(":")
        dev = rest.split(".")[0]
        legacy = f"{int(domain, 16):04X}:{bus}:{rest}"
        return FakePciInfo(busId=h.bus_id.encode(), busIdLegacy=legacy.encode(),
                           domain=int(domain, 16), bus=int(bus, 16), device=int(dev, 16))

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        h = self._handle(handle)
        if h.numa is None:
            raise pynvml.NVMLError_NotSupported()
        return h.numa

    def numa_node(self, handle: Any) -> int | None:
        """The backend hook the plugin uses for NUMA affinity (real backend: sysfs, then NVML)."""
        return self._handle(handle).numa

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        a, b = self._handle(device1), self._handle(device2)
        if a is b:
            return pynvml.NVML_TOPOLOGY_INTERNAL
        if a.pcie_switch is not None and a.pcie_switch == b.pcie_switch:
            return pynvml.NVML_TOPOLOGY_SINGLE
        if a.host_bridge is not None and a.host_bridge == b.host_bridge:
            return pynvml.NVML_TOPOLOGY_HOSTBRIDGE
        if a.numa is not None and a.numa == b.numa:
            return pynvml.NVML_TOPOLOGY_NODE
        return pynvml.NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        h = self._handle(handle)
        if not h.events_supported:
            return 0
        return (pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeSingleBitEccError
                | pynvml.nvmlEventTypeDoubleBitEccError | pynvml.nvmlEventTypeGpuRecoveryAction)

    # events
    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._check_init()
        es = FakeEventSet()
        with self._lock:
            self._event_sets.append(es)
        return es

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: FakeEventSet) -> None:
        h = self._handle(handle)
        if not isinstance(eventSet, FakeEventSet) or eventSet.freed:
            raise pynvml.NVMLError_InvalidArgument()
        if not h.events_supported:
            raise pynvml.NVMLError_NotSupported()
        unsupported = int(eventTypes) & ~self.nvmlDeviceGetSupportedEventTypes(h)
        if unsupported:
            raise pynvml.NVMLError_NotSupported()
        with self._lock:
            eventSet.masks[id(h)] = eventSet.masks.get(id(h), 0) | int(eventTypes)

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:
        self._check_init()
        if not isinstance(eventSet, FakeEventSet) or eventSet.freed:
            raise pynvml.NVMLError_InvalidArgument()
        with self._lock:
            if self._wait_errors:
                raise self._wait_errors.pop(0)()
        try:
            return eventSet.queue.get(timeout=max(0, int(timeoutms)) / 1000.0)
        except queue.Empty:
            raise pynvml.NVMLError_Timeout() from None

    nvmlEventSetWait_v2 = nvmlEventSetWait

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        self._check_init()
        with self._lock:
            eventSet.freed = True
            if eventSet in self._event_sets:
                self._event_sets.remove(eventSet)

    # ------------------------------------------------------------------ test hooks
    def resolve(self, device: str | int) -> FakeHandle:
        """A GPU by index ("3", 3) or UUID; ValueError names the known ones otherwise."""
        text = str(device).strip()
        if text.isascii() and text.isdigit() and int(text) < len(self._handles):
            return self._handles[int(text)]
        for h in self._handles:
            if h.uuid == text:
                return h
        known = ", ".join(f"{h.index}={h.uuid}" for h in self._handles)
        raise ValueError(f"unknown GPU {text!r}; known: {known}")

    def _emit(self, h: FakeHandle, event_type: int, data: int) -> tuple[int, int]:
        """Queue the event on every event set that registered it for h; (delivered, sets with h)."""
        delivered = registered = 0
        with self._lock:
            for es in self._event_sets:
                mask = es.masks.get(id(h))
                if mask is None:
                    continue
                registered += 1
                if mask & event_type:
                    es.queue.put(FakeEventData(device=h, eventType=event_type, eventData=int(data)))
                    delivered += 1
        return delivered, registered

    def inject_xid(self, device: str | int, xid: int) -> dict:
        h = self.resolve(device)
        with self._lock:
            h.xids.append(int(xid))
        delivered, registered = self._emit(h, pynvml.nvmlEventTypeXidCriticalError, int(xid))
        return {"ok": True, "device": h.uuid, "index": h.index, "xid": int(xid),
                "delivered": delivered, "eventSets": registered}

    def recover(self, device: str | int) -> dict:
        h = self.resolve(device)
        with self._lock:
            h.xids.clear()
        delivered, registered = self._emit(h, pynvml.nvmlEventTypeGpuRecoveryAction,
                                           pynvml.NVML_GPU_RECOVERY_ACTION_NONE)
        reply = {"ok": True, "device": h.uuid, "index": h.index, "delivered": delivered, "eventSets": registered}
        if delivered == 0:
            reply.update(ok=False, unsupported=True,
                         error=("no event set listens for GPU recovery events on this GPU: the plugin "
                                "does not recover devices (NVIDIA's never does; run it with "
                                "--health-recovery to test recovery on the fake NVML)"))
        return reply

    def fail_next_wait(self, error: str | int = "Unknown", count: int = 1) -> dict:
        cls = error_class(error)
        with self._lock:
            self._wait_errors.extend([cls] * int(count))
        return {"ok": True, "error": cls.__name__, "count": int(count)}

    def status(self) -> dict:
        with self._lock:
            def listeners(h: FakeHandle, bit: int) -> int:
                return sum(1 for es in self._event_sets if es.masks.get(id(h), 0) & bit)
            return {"ok": True, "initialized": self._refcount > 0, "eventSets": len(self._event_sets),
                    "devices": [{"index": h.index, "uuid": h.uuid, "numa": h.numa, "xids": list(h.xids),
                                 "listeners": listeners(h, pynvml.nvmlEventTypeXidCriticalError),
                                 "recoveryListeners": listeners(h, pynvml.nvmlEventTypeGpuRecoveryAction)}
                                for h in self._handles]}

    # ------------------------------------------------------------------ control server
    def handle_request(self, req: dict) -> dict:
        try:
            op = req.get("op")
            if op == "xid":
                return self.inject_xid(req["device"], int(req["xid"]))
            if op == "recover":
                return self.recover(req["device"])
            if op == "wait-error":
                return self.fail_next_wait(req.get("error", "Unknown"), int(req.get("count", 1)))
            if op == "status":
                return self.status()
            return {"ok": False, "error": f"unknown op {op!r} (xid, recover, wait-error, status)"}
        except (KeyError, ValueError, TypeError) as exc:
            return {"ok": False, "error": str(exc)}

    def _start_control(self) -> None:
        assert self._control_path
        self._control = ControlServer(self._control_path, self.handle_request, name="fake-nvml-control").start()

    def _stop_control(self) -> None:
        control, self._control = self._control, None
        if control is not None:
            control.stop()

    def close(self) -> None:
        """Tear down regardless of refcount (tests)."""
        with self._lock:
            self._refcount = 0
            self._stop_control()


# ---------------------------------------------------------------------- module-level default instance
_default: FakeNvml | None = None


def configure(topology: str | os.PathLike | dict | None = None, *, control: str | None = None) -> FakeNvml:
    """(Re)create the module's default instance; returns it."""
    global _default
    if _default is not None:
        _default.close()
    _default = FakeNvml(topology, control=control)
    return _default


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    global _default
    if _default is None:
        _default = FakeNvml()
    return getattr(_default, name)
