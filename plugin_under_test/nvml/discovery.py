"""GPU discovery through an NVML backend: one device per GPU, identified by UUID."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from dpconform.kubeletapi import constants, dp

log = logging.getLogger("dpconform.nvml")


@dataclass
class Gpu:
    index: int
    uuid: str
    name: str
    bus_id: str          # as NVML reports it, e.g. "00000000:3B:00.0"
    numa: int | None     # None: no NUMA affinity -> no TopologyInfo
    handle: Any


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode(errors="replace").rstrip("\x00")
    return str(value)


def discover(nvml: Any) -> list[Gpu]:
    """Enumerate GPUs (nvmlInit must have succeeded). NUMA comes from the backend's numa_node()."""
    gpus = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        try:
            name = _text(nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError:
            name = "unknown"
        bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        try:
            numa = nvml.numa_node(handle)
        except nvml.NVMLError as e:
            log.warning("GPU %d (%s): NUMA node unknown: %s", index, uuid, e)
            numa = None
        gpus.append(Gpu(index=index, uuid=uuid, name=name, bus_id=bus_id, numa=numa, handle=handle))
        log.info("GPU %d: %s %s bus %s NUMA %s", index, uuid, name, bus_id, "none" if numa is None else numa)
    return gpus


def to_device(gpu: Gpu, health: str = constants.HEALTHY) -> dp.Device:
    device = dp.Device(ID=gpu.uuid, health=health)
    if gpu.numa is not None:
        device.topology.CopyFrom(dp.TopologyInfo(nodes=[dp.NUMANode(ID=gpu.numa)]))
    return device


def topology_levels(nvml: Any, gpus: list[Gpu]) -> dict[tuple[str, str], int]:
    """Pairwise nvmlDeviceGetTopologyCommonAncestor levels by UUID (lower = closer). Pairs NVML cannot
    answer count as NVML_TOPOLOGY_SYSTEM (the farthest)."""
    levels: dict[tuple[str, str], int] = {}
    far = int(nvml.NVML_TOPOLOGY_SYSTEM)
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            try:
                level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(a.handle, b.handle))
            except nvml.NVMLError as e:
                log.debug("common ancestor %s/%s unknown: %s", a.uuid, b.uuid, e)
                level = far
            levels[(a.uuid, b.uuid)] = levels[(b.uuid, a.uuid)] = level
    return levels
