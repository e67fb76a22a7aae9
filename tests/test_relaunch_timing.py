"""A verdict does not depend on how fast the harness relaunches a crashed plugin (PRS-01, PRS-03).

tests/plugins/per_second_socket.py names its socket by the second and exits "address in use" when that
file is left from a SIGKILLed instance: relaunched within the crash's second it fails, a second later it
passes. The harness relaunches a crash as the kubelet does once its PLEG's next relist (every 1 s) sees the
container dead, modelled as the start of the next wall-clock second, so the verdict is the same every run
(it flipped between runs before: failed on the emulator, passed and then failed on the node backend).
"""
from __future__ import annotations

import shlex
import sys

from tests.support.conformance_runner import FAST, _run, outcomes

PY = shlex.quote(sys.executable)


def test_a_plugin_naming_its_socket_by_the_second_gets_one_verdict(tmp_path):
    for run in range(3):
        report = str(tmp_path / f"report-{run}.json")
        argv = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                "--plugin-cmd", f"{PY} -m tests.plugins.per_second_socket --plugin-dir {{plugin_dir}}",
                "--report", report, *FAST]
        got, out = _run(argv, report, ["PRS-01", "PRS-03"], timeout=200)
        assert outcomes(got) == {"PRS-01": "passed", "PRS-03": "passed"}, f"run {run + 1}:\n{out}"
