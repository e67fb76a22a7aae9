"""NUMA affinity of a PCI device from sysfs, the way NVIDIA's k8s-device-plugin reads it."""
from __future__ import annotations

import os


def sysfs_bus_id(bus_id: bytes | str) -> str:
    """NVML's "00000000:3B:00.0" (8-digit domain) -> sysfs's "0000:3b:00.0" (4-digit, lower case)."""
    text = bus_id.decode(errors="replace") if isinstance(bus_id, (bytes, bytearray)) else str(bus_id)
    text = text.strip("\x00 ").lower()
    domain, sep, rest = text.partition(":")
    if not sep:
        return text
    return f"{int(domain or '0', 16):04x}:{rest}"


def numa_node_from_sysfs(bus_id: bytes | str, root: str = "/sys") -> tuple[bool, int | None]:
    """(found, node): found is False when the file is missing or unreadable (caller may fall back);
    node is None when sysfs says -1 (no NUMA affinity)."""
    path = os.path.join(root, "bus/pci/devices", sysfs_bus_id(bus_id), "numa_node")
    try:
        with open(path) as f:
            value = int(f.read().strip())
    except (OSError, ValueError):
        return False, None
    return True, (value if value >= 0 else None)
