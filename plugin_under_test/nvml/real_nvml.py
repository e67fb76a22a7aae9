"""The real NVML backend: pynvml's own names plus `numa_node(handle)` (sysfs first, then NVML)."""
from __future__ import annotations

from pynvml import *  # noqa: F401,F403  (pynvml has no __all__: every public name, errors included)
import pynvml as _pynvml

from .sysfs import numa_node_from_sysfs

SYSFS_ROOT = "/sys"


def numa_node(handle) -> int | None:
    """NUMA node of a GPU: /sys/bus/pci/devices/<busid>/numa_node, else nvmlDeviceGetNumaNodeId.

    None means "no NUMA affinity" (sysfs says -1, or neither source knows)."""
    bus_id = _pynvml.nvmlDeviceGetPciInfo(handle).busId
    found, node = numa_node_from_sysfs(bus_id, root=SYSFS_ROOT)
    if found:
        return node
    getter = getattr(_pynvml, "nvmlDeviceGetNumaNodeId", None)
    if getter is None:
        return None
    try:
        value = int(getter(handle))
    except _pynvml.NVMLError:
        return None
    return value if value >= 0 else None
