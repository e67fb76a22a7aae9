"""One instance of the plugin under test at a time, as on a node (fixtures/plugin_slot.py).

tests/plugins/host_bound.py holds a fixed TCP port and a fixed lock file, as many real plugins do (a
metrics endpoint, a device lock), and exits "bind: address already in use" when it cannot. Before the
slot, checks with a private harness started a second copy beside the run's shared one: 12 checks failed
and 2 errored ("ROOT CAUSE REG-01"). Now the whole catalogue passes, serially and with -n 2 (where a
--plugin-cmd run stays serial, saying so), but PRS-04, which starts a second instance on purpose (a surge
update) and says why it cannot; and a port held by something else is named in the summary.
"""
from __future__ import annotations

import shlex
import socket
import sys

import pytest

from tests.support.conformance_runner import FAST, messages, outcomes, _run

PY = shlex.quote(sys.executable)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_host_bound(tmp_path, port: int, *extra: str) -> tuple[dict, str]:
    control = "{plugin_dir}/../fakegpu.ctl"
    plugin = (f"{PY} -m tests.plugins.host_bound --port {port} --lock {tmp_path}/plugin.lock -- "
              f"--plugin-dir {{plugin_dir}} --control {control}")
    hook = f"{PY} -m dpconform fakegpu health --control {control} {{device}} {{health}}"
    report = str(tmp_path / "report.json")
    argv = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            "--strict", "--plugin-cmd", plugin, "--health-hook", hook, "--expected-devices", "4",
            "--report", report, *FAST, *extra]
    return _run(argv, report, None, timeout=400)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "n2"])
def test_a_plugin_holding_a_port_and_a_lock_passes_the_catalogue(tmp_path, workers):
    report, out = run_host_bound(tmp_path, _free_port(), *workers)
    bad = {c: o for c, o in outcomes(report).items() if o not in ("passed", "skipped")}
    # PRS-04 starts a second instance on purpose (a surge update): a fixed port cannot be held twice
    assert bad == {"PRS-04": "failed"}, f"{bad}\n{out}"
    surge = messages(report, {"PRS-04"})
    assert "address already in use" in surge and "maxUnavailable 1, maxSurge 0" in surge, surge
    assert "held by another process" not in out, out
    if workers:
        assert "--plugin-cmd runs serially: one instance of the plugin at a time" in out, out


def test_a_port_held_by_something_else_is_named_in_the_root_cause(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        report, out = run_host_bound(tmp_path, held.getsockname()[1], "--checks", "REG-01,LAW-01")
    assert outcomes(report).get("REG-01") == "failed", out
    lines = [ln for ln in out.splitlines() if ln.startswith("ROOT CAUSE host resource:")]
    assert len(lines) == 1 and "bind: address already in use" in lines[0] and "REG-01" in lines[0], out


def test_a_private_harness_parks_the_running_one_and_gets_it_back(tmp_path):
    """The rule itself, in a run order that forces a park (the catalogue runs private checks first, so a
    normal run never parks): harness A's fixed-port plugin runs; harness B starts the same plugin, which
    registers only if A's was parked (else B's copy exits 'address already in use'); using A again parks
    B and brings A's back. Fails if the slot does nothing."""
    from dpconform.fixtures.config import SuiteConfig
    from dpconform.fixtures.harness import Harness
    from dpconform.fixtures.plugin_slot import SLOT
    plugin = (f"{PY} -m tests.plugins.host_bound --port {_free_port()} --lock {tmp_path}/plugin.lock -- "
              "--plugin-dir {plugin_dir}")
    cfg = SuiteConfig(plugin_cmd=plugin)
    a, b = Harness(cfg), Harness(cfg)
    try:
        a.start()
        a.wait_devices()
        b.start()
        b.wait_devices()
        assert a.parked and not a.plugin.running, "starting B's plugin parks A's"
        assert "address already in use" not in b.plugin.output(), b.plugin.output()
        a.revive_if_dead()               # what the next check on A does first
        assert a.plugin.running and a.answers(), a.plugin.output()
        assert b.parked and not b.plugin.running, "A's plugin back: B's parked"
    finally:
        b.close()
        a.close()
    assert SLOT._holder is None


@pytest.mark.parametrize("line, conflict", [
    ("metrics: listen tcp 127.0.0.1:9400: bind: address already in use", True),
    ("lock /run/nvidia.lock is held by another process", True),
    ("flock /var/run/plugin.lock: resource temporarily unavailable", True),
    ("could not acquire lock on /dev/gpu0", True),
    ("read /dev/nvidia0: resource temporarily unavailable", False),      # EAGAIN: busy, not held
    ("accept4: resource temporarily unavailable", False),
    ("failed to allocate: device busy", False),
])
def test_host_conflict_names_only_a_held_port_or_lock(line, conflict):
    from dpconform.fixtures.check_reports import host_conflict
    assert (host_conflict(f"starting\n{line}\n") is not None) is conflict, line
