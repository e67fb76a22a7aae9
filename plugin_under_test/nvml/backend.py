"""The single place where the NVML backend is chosen: `real` (pynvml) or `fake[:TOPOLOGY.yaml]`.

Everything else in the plugin receives the returned object and uses only pynvml's names on it,
plus `numa_node(handle)`; it never knows which backend it talks to.
"""
from __future__ import annotations

from typing import Any


def load(spec: str | None = None, *, control: str | None = None) -> Any:
    """spec: None/"", "real" -> pynvml; "fake" -> the bundled 8-GPU/2-NUMA topology; "fake:PATH" -> PATH.
    control: unix socket path for the fake's control server (rejected for the real one)."""
    spec = (spec or "real").strip()
    if spec == "real":
        if control:
            raise ValueError("--control only works with the fake NVML (--nvml fake[:TOPOLOGY.yaml])")
        from . import real_nvml
        return real_nvml
    if spec == "fake" or spec.startswith("fake:"):
        from .fake_nvml import FakeNvml
        path = spec[len("fake:"):] if spec.startswith("fake:") else None
        return FakeNvml(path or None, control=control)
    raise ValueError(f"unknown NVML backend {spec!r}: use 'real', 'fake' or 'fake:TOPOLOGY.yaml'")
