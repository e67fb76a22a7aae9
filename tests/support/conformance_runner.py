"""Runs the conformance suite in a subprocess against the bundled fake-GPU plugin and returns its JSON report."""
from __future__ import annotations

import json
import pathlib
import shlex
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Shorter windows and bounds than the defaults keep the matrix fast (it runs the whole catalogue once
# per defect); each still proves its rule against its defect: register-storm registers every 0.5 s,
# end-stream ends 2 s after the first snapshot, leak-on-reregister leaks 20 files per restart,
# slow-allocate takes 150 ms per call, no-reregister and slow-sigterm would wait out the full bounds.
FAST = ["--rejected-retry-window", "10", "--storm-window", "3", "--stream-hold", "4", "--hypothesis-examples", "25", "--restart-rounds", "3",
        "--reregister-timeout", "10", "--alloc-calls", "100", "--sigterm-timeout", "5"]


def run_suite(fakegpu_args: list[str], checks: list[str] | None = None, extra: list[str] | None = None,
              timeout: float = 420) -> tuple[dict, str]:
    """(report, output) of `pytest conformance` against `dpconform fakegpu FAKEGPU_ARGS`."""
    with tempfile.TemporaryDirectory(prefix="dpc-m-", dir="/tmp") as tmp:
        control = "{plugin_dir}/../fakegpu.ctl"  # one per harness: the suite runs several plugins at once
        py = shlex.quote(sys.executable)
        plugin = f"{py} -m dpconform fakegpu --plugin-dir {{plugin_dir}} --control {control} " + shlex.join(fakegpu_args)
        hook = f"{py} -m dpconform fakegpu health --control {control} {{device}} {{health}}"
        report = f"{tmp}/report.json"
        argv = [sys.executable, *(["/tmp/self.py"] if __import__("os").environ.get("DPC_SELF") else ["-m", "pytest"]), "conformance", "-q", "-p", "no:cacheprovider", "--strict",
                "--plugin-cmd", plugin, "--health-hook", hook, "--expected-devices", "4", "--report", report,
                *FAST, *(extra or [])]
        return _run(argv, report, checks, timeout)


def _run(argv: list[str], report: str, checks: list[str] | None, timeout: float) -> tuple[dict, str]:
    """Run the suite's command line; (its JSON report, the output's tail)."""
    if checks:
        argv = [*argv, "--checks", ",".join(checks)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout[-6000:] + proc.stderr[-2000:]
    try:
        return json.loads(pathlib.Path(report).read_text()), out
    except FileNotFoundError:
        raise AssertionError(f"no report written (exit {proc.returncode}):\n{out}") from None


def run_dra_suite(driver_args: list[str], checks: list[str] | None = None, extra: list[str] | None = None,
                  timeout: float = 300, plugin_cmd: str | None = None, strict: bool = True) -> tuple[dict, str]:
    """(report, output) of `pytest conformance --dra` against `dpconform fakegpu-dra DRIVER_ARGS` (with its
    health hook), or against `plugin_cmd` (no health hook)."""
    from dpconform.fixtures.dra.environment import bundled_dra_health_hook, bundled_driver_cmd
    with tempfile.TemporaryDirectory(prefix="dpc-dra-", dir="/tmp") as tmp:
        control = f"{tmp}/dra.ctl"
        report = f"{tmp}/report.json"
        driver = ["--plugin-cmd", plugin_cmd] if plugin_cmd else [
            "--plugin-cmd", bundled_driver_cmd(control, shlex.join(driver_args)),
            "--health-hook", bundled_dra_health_hook(control)]
        argv = [sys.executable, *(["/tmp/self.py"] if __import__("os").environ.get("DPC_SELF") else ["-m", "pytest"]), "conformance", "-q", "-p", "no:cacheprovider",
                *(["--strict"] if strict else []), "--dra", *driver, "--report", report, *(extra or [])]
        return _run(argv, report, checks, timeout)


def outcomes(report: dict) -> dict[str, str]:
    return {c["id"]: c["outcome"] for c in report["checks"]}


def messages(report: dict, ids) -> str:
    """The suite's own failure message for each of `ids` (the output tail may have lost it)."""
    by_id = {c["id"]: c for c in report["checks"]}
    return "\n".join(f"--- {i}: {by_id[i]['message'][-2500:]}" for i in sorted(ids) if i in by_id)
