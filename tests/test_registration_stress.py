"""Stress: quick successive kubelet restarts with a plugin registering (K2, K6, K15).

The reproducer for POD-03's and KRS's "after a kubelet restart the node did not come back: the plugin did
not register within 10s". Found with this test: the bundled kit's plugin saw kubelet.sock missing while
the emulator restarted, served on a new socket at once, and the emulator's start deleted that socket (K2)
between its bind and the kit's look at its inode; the kit then took the missing file for its own and
sent Register naming it, and the emulator's blocking dial (K6, like the kubelet's) held that Register for
its whole 10 s deadline. On the old kit this test failed within the first 40 restarts (at restart 10 and
37 in two runs, the machine busy with a Go build); on the new one 300 restarts pass.

Each restart must be answered by a registration within the register timeout; the first that is not
fails the test with the plugin's log. The count is bounded so the test stays well under a minute. The
upstream sample plugin (make node) restarts its server only 10 s after it sees a new kubelet.sock, so it
gets 8 restarts and the KRS checks' 30 s window.
"""
from __future__ import annotations

import os
import pathlib
import random
import shlex
import sys
import time

import pytest

from dpconform.fixtures import kube_versions
from dpconform.fixtures.kubelet.emulator import KubeletEmulator
from dpconform.fixtures.launcher import PluginProcess
from dpconform.kubeletapi import constants

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLE_PLUGIN = kube_versions.bin_dir() / "sample-device-plugin"
FAKEGPU_CMD = f"{shlex.quote(sys.executable)} -m dpconform fakegpu --plugin-dir {{plugin_dir}}"
# In its own mount namespace (--isolate) the emulator's dir is /var/lib/kubelet/device-plugins: the sample
# plugin registers at that fixed kubelet.sock and watches its socket dir for that path's re-creation.
SAMPLE_CMD = f"env PLUGIN_SOCK_DIR={constants.DEVICE_PLUGIN_DIR} {SAMPLE_PLUGIN}"
REGISTER_TIMEOUT_S = 10
# the sample plugin restarts its server 10 s after it sees a new kubelet.sock (stub.go Watch: a poll that
# is not immediate), so it gets the kubelet-restart window the KRS checks give (--reregister-timeout)
SAMPLE_REREGISTER_TIMEOUT_S = 30


def restart_storm(cmd: str, root: pathlib.Path, restarts: int, seed: int, max_gap_s: float = 0.3,
                  max_down_s: float = 0.2, isolate: bool = False,
                  timeout_s: float = REGISTER_TIMEOUT_S) -> float:
    """Restart the emulator `restarts` times (random gaps, random time down between stop and start) and
    return the slowest re-registration; fail at the first restart the plugin does not answer."""
    rnd = random.Random(seed)
    emu = KubeletEmulator(str(root / "k"))
    (root / "log").mkdir()
    plugin = PluginProcess(cmd, emu.plugin_dir, root / "log", isolate=isolate)
    try:
        emu.start()
        plugin.start()
        emu.wait_for_registration(timeout=timeout_s)
        slowest = 0.0
        for i in range(restarts):
            time.sleep(rnd.uniform(0, max_gap_s))
            before = time.monotonic()
            emu.stop()
            time.sleep(rnd.uniform(0, max_down_s))     # a kubelet is down a while between its stop and start
            emu.start()
            try:
                emu.wait_until(lambda: [r for r in emu.registrations if r.accepted and r.time >= before],
                               timeout_s, "a registration after the restart")
            except TimeoutError:
                late = [f"{r.time - before:+.2f}s accepted={r.accepted} error={r.error}"
                        for r in emu.registrations if r.time >= before]
                pytest.fail(f"restart {i + 1} of {restarts} (seed {seed}): the plugin did not register within "
                            f"{timeout_s:g} s; registrations since: {late}; plugin log:\n"
                            f"{plugin.output(3000)}")
            slowest = max(slowest, time.monotonic() - before)
        return slowest
    finally:
        plugin.close()
        emu.stop()


@pytest.mark.timeout(120)
def test_fakegpu_registers_after_every_quick_restart(tmp_path_factory):
    root = tmp_path_factory.mktemp("storm", numbered=True)
    slowest = restart_storm(FAKEGPU_CMD, root, restarts=120, seed=20)
    print(f"120 restarts, slowest re-registration {slowest:.2f} s")


@pytest.mark.node
@pytest.mark.timeout(400)
def test_sample_plugin_registers_after_every_quick_restart(tmp_path_factory):
    """The upstream sample plugin (bin/sample-device-plugin, make kube-bins) through the same storm. It
    registers at /var/lib/kubelet/device-plugins/kubelet.sock whatever its socket dir: it runs with
    --isolate's bind mount (root)."""
    if not SAMPLE_PLUGIN.exists():
        pytest.skip("bin/sample-device-plugin is not built (make kube-bins)")
    if os.geteuid() != 0:
        pytest.skip("the sample plugin's kubelet.sock path is fixed: its private mount namespace needs root")
    root = tmp_path_factory.mktemp("storm", numbered=True)
    slowest = restart_storm(SAMPLE_CMD, root, restarts=8, seed=20, isolate=True,
                            timeout_s=SAMPLE_REREGISTER_TIMEOUT_S)
    print(f"8 restarts, slowest re-registration {slowest:.2f} s")
