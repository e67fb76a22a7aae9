"""The kind tests' count of what a run leaves on the host (tests/test_private_docker.py host_state) skips
zombies: an exited process its parent has not reaped yet holds nothing. make kind-periodic failed once on
three `[containerd-shim] <defunct>` the local backend's run had left to init, reaped during the kind run."""
from __future__ import annotations

import shutil
import subprocess

from dpconform.fixtures.waiting import wait_until
from tests.support.host import host_state


def test_a_zombie_shim_is_not_counted_and_a_running_one_is(tmp_path):
    shim = tmp_path / "containerd-shim"
    shutil.copy(shutil.which("sleep"), shim)
    running = subprocess.Popen([str(shim), "30"])
    try:
        assert any("containerd-shim 30" in p for p in host_state()["processes"])
    finally:
        running.kill()                    # not waited for: a zombie until the end of the test
    def state() -> str:
        return subprocess.run(["ps", "-o", "stat=", "-p", str(running.pid)], capture_output=True, text=True).stdout.strip()
    try:
        wait_until(lambda: state().startswith("Z"), 10, "the killed process to become a zombie", interval=0.02)
        assert not [p for p in host_state()["processes"] if "containerd-shim" in p], host_state()["processes"]
    finally:
        running.wait()
