"""The NVML plugin's discovery and health thread against the REAL NVML (marker `nvml`).
Skipped with the reason when nvmlInit fails (no driver / no GPU on this machine)."""
from __future__ import annotations

import pytest

from dpconform.kubeletapi import constants
from dpconform.plugin_under_test.kit import DeviceState
from dpconform.plugin_under_test.nvml import backend
from dpconform.plugin_under_test.nvml.discovery import discover, to_device, topology_levels
from dpconform.plugin_under_test.nvml.health import HealthMonitor

pytestmark = pytest.mark.nvml


@pytest.fixture(scope="module")
def nvml():
    lib = backend.load("real")
    try:
        lib.nvmlInit()
    except lib.NVMLError as e:
        pytest.skip(f"real NVML unavailable: nvmlInit failed: {e}")
    try:
        yield lib
    finally:
        lib.nvmlShutdown()


def test_real_discovery(nvml):
    gpus = discover(nvml)
    if not gpus:
        pytest.skip("NVML initialized but reports no GPUs")
    assert len({g.uuid for g in gpus}) == len(gpus)
    assert all(g.uuid.startswith(("GPU-", "MIG-")) for g in gpus)
    assert all(g.numa is None or g.numa >= 0 for g in gpus)
    for g in gpus:
        d = to_device(g)
        assert d.ID == g.uuid and d.health == constants.HEALTHY
    levels = topology_levels(nvml, gpus)
    assert all(0 <= v <= 50 for v in levels.values())


def test_real_health_thread_registers_and_stops(nvml):
    """Event registration works on real GPUs (no GPU turns Unhealthy at start) and the thread stops."""
    gpus = discover(nvml)
    if not gpus:
        pytest.skip("NVML initialized but reports no GPUs")
    state = DeviceState([to_device(g) for g in gpus])
    mon = HealthMonitor(nvml, gpus, state.set_health, wait_timeout_ms=200)
    mon.start()
    thread = mon._thread
    try:
        assert mon.ready.wait(10)
        unhealthy = [d.ID for d in state.snapshot() if d.health != constants.HEALTHY]
        assert not unhealthy, f"GPUs marked Unhealthy at registration (events not supported?): {unhealthy}"
    finally:
        mon.stop(timeout=5)
    assert not thread.is_alive(), "the health thread did not stop within 5 s"
