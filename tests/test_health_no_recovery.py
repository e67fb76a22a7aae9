"""A plugin that does not mark a device Healthy again while it runs (NVIDIA's: a GPU it saw fail stays Unhealthy
until the plugin restarts) says so through its health hook, exit 3 for Healthy: the suite restores health by
restarting it, LAW-07 judges the Unhealthy transition and notes that recovery was not checked, and the checks
that flip health (ALC-09, POD-03, POD-05) neither fail nor error on it."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys

PY = shlex.quote(sys.executable)


def test_a_hook_that_cannot_recover_a_device_gets_the_plugin_restarted(tmp_path):
    ctl = "{plugin_dir}/../fakegpu.ctl"
    hook = tmp_path / "hook.sh"
    hook.write_text(f'#!/bin/sh\n[ "$3" = Healthy ] && exit 3\nexec {PY} -m dpconform fakegpu health --control "$1" "$2" "$3"\n')
    hook.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "dpconform", "run", "-q", "-p", "no:randomly", "--plugin-cmd",
                           f"{PY} -m dpconform fakegpu --plugin-dir {{plugin_dir}} --control {ctl}",
                           "--health-hook", f"{hook} {ctl} {{device}} {{health}}",
                           "--checks", "LAW-07,ALC-09,POD-03,POD-05", "--report", "r.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    doc = json.loads((tmp_path / "r.json").read_text())
    got = {c["id"]: c["outcome"] for c in doc["checks"]}
    assert proc.returncode == 0 and set(got.values()) <= {"passed", "skipped"}, proc.stdout[-4000:]
    assert got["LAW-07"] == "passed" and got["ALC-09"] == "passed", got
    assert any(n.startswith("LAW-07: saw ") and "recovery was not checked" in n for n in doc["notes"]), doc["notes"]


def test_a_hook_that_hangs_is_one_error_and_leaves_nothing(tmp_path, monkeypatch):
    """A hook past its time (make test once saw POD-03 meet a raw TimeoutExpired, which hypothesis then replayed
    as a flaky failure): a HealthFlipError naming the command and the limit; the hook and its children killed."""
    import os
    import time

    import pytest

    from dpconform.fixtures import health_hook
    marker = tmp_path / "child.pid"
    monkeypatch.setattr(health_hook, "HOOK_TIMEOUT_S", 0.5)
    t0 = time.monotonic()
    with pytest.raises(health_hook.HealthFlipError, match=r"health hook did not finish within 0.5s: .*sleep"):
        health_hook.flip("dev-0", "Unhealthy", timeout=0.1, hook=f"sleep 30 & echo $! > {marker}; wait; true {{device}} {{health}}")
    assert time.monotonic() - t0 < 5
    child = int(marker.read_text())
    with open(f"/proc/{child}/stat") if os.path.exists(f"/proc/{child}") else open(os.devnull) as f:
        state = f.read().rsplit(")", 1)[-1].split()[:1]
    assert state in ([], ["Z"]), f"the hook's child {child} still runs"
