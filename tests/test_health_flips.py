"""HealthFlips (fixtures/health_flips.py): on a real kubelet a health change counts once the kubelet was told,
whichever stream the plugin sent it on. Reproducer: NVIDIA's device plugin sends each change on one stream
only, and the kubelet's takes the first: the suite's own stream never saw the device go Unhealthy, and
LAW-07 failed on the node backend although the kubelet had it Unhealthy."""
from __future__ import annotations

import time

from dpconform.fixtures.health_flips import HealthFlips
from dpconform.kubeletapi import constants, dp

H, U = constants.HEALTHY, constants.UNHEALTHY
R = "nvidia.com/gpu"


class TwoClients:
    """The suite's stream (snaps) and the kubelet's healthy set (None: the emulator, its snapshots are the
    kubelet's own)."""

    def __init__(self, kubelet: set[str] | None):
        self.snaps = [(time.monotonic(), [dp.Device(ID="gpu-0", health=H), dp.Device(ID="gpu-1", health=H)])]
        self.kubelet = kubelet

    def snapshots(self, resource):
        return list(self.snaps)

    def devices(self, resource):
        return {d.ID: d for d in self.snaps[-1][1]}

    def kubelet_healthy(self, resource):
        return None if self.kubelet is None else set(self.kubelet)

    def send(self, **health):
        self.snaps.append((time.monotonic(), [dp.Device(ID=i, health=health.get(i.replace("-", "_"), H))
                                              for i in ("gpu-0", "gpu-1")]))


def test_a_change_only_the_kubelet_was_told_counts():
    side = TwoClients({"gpu-0", "gpu-1"})
    flips = HealthFlips(side)
    flips.note("gpu-0", R)
    assert not flips.reported("gpu-0", U, R)          # nobody told yet
    side.kubelet.discard("gpu-0")                     # the kubelet's stream took the change
    assert flips.reported("gpu-0", U, R)
    assert side.devices(R)["gpu-0"].health == H       # what the old wait read: the suite's stream, silent


def test_a_change_only_the_suites_stream_got_counts():
    side = TwoClients({"gpu-0", "gpu-1"})
    flips = HealthFlips(side)
    flips.note("gpu-0", R)
    side.send(gpu_0=U)
    assert flips.reported("gpu-0", U, R)


def test_recovery_needs_a_message_after_the_flip():
    """The suite's stream never saw the device Unhealthy (the kubelet took that change): its old Healthy is
    no recovery; a new snapshot or the kubelet's healthy set turning back is."""
    side = TwoClients({"gpu-1"})                      # the kubelet has gpu-0 Unhealthy
    flips = HealthFlips(side)
    flips.note("gpu-0", R)
    assert not flips.reported("gpu-0", H, R)
    side.send()                                       # the second change went to the suite's stream
    assert flips.reported("gpu-0", H, R)
    other = TwoClients({"gpu-1"})
    flips = HealthFlips(other)
    flips.note("gpu-0", R)
    other.kubelet.add("gpu-0")
    assert flips.reported("gpu-0", H, R)


def test_on_the_emulator_the_latest_snapshot_decides():
    side = TwoClients(None)
    flips = HealthFlips(side)
    flips.note("gpu-0", R)
    assert not flips.reported("gpu-0", U, R)
    side.send(gpu_0=U)
    assert flips.reported("gpu-0", U, R)


def test_a_dropped_device_is_no_health_change():
    """drop-unhealthy on a real kubelet: the device leaves the kubelet's healthy set because it left the list."""
    side = TwoClients({"gpu-0", "gpu-1"})
    flips = HealthFlips(side)
    flips.note("gpu-0", R)
    side.snaps.append((time.monotonic(), [dp.Device(ID="gpu-1", health=H)]))
    side.kubelet.discard("gpu-0")
    assert not flips.reported("gpu-0", U, R)
