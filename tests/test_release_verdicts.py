"""What changed between releases (dpconform.fixtures.node.release_verdicts): the README holds the recording as
rendered; on a node host each `make node KUBE_VERSION=<tag>` runs the catalogue for the fake GPU (the README's
node command) and the upstream sample plugin (here) on that release's real kubelet and checks the verdicts
against the recording."""
from __future__ import annotations

import subprocess
import sys

import pytest

from dpconform.fixtures import kube_versions
from dpconform.fixtures.node import release_verdicts as rv
from tests.support.conformance_runner import ROOT

# The fake GPU's run is the README's node command (tests/test_readme_commands.py, check_node); the sample plugin's
# is here, with two kubelet restarts for KRS-04 (it re-registers 10 s after each, so five take a minute).
SAMPLE_ARGS = ["--plugin-cmd", "env PLUGIN_SOCK_DIR={plugin_dir} {kube_bin}/sample-device-plugin",
               "--resource", "example.com/resource", "--expected-devices", "2", "--restart-rounds", "2"]


def test_readme_holds_the_recording_as_rendered():
    assert rv.readme_body() == rv.render(), f"the README's release verdicts are stale: run {rv.RECORD_CMD}"


def test_both_plugins_are_recorded_for_every_supported_release():
    rec = rv.load()
    missing = [f"{p} {r.name}" for p in rv.PLUGINS for r in kube_versions.RELEASES if r.name not in rec.get(p, {})]
    assert not missing, f"not recorded: {missing}; run make node KUBE_VERSION=<tag> for each, then {rv.RECORD_CMD}"


def test_a_run_is_compared_check_by_check_with_the_recording():
    rec = rv.load()
    name = kube_versions.NEWEST.name
    recorded = rec["fakegpu"][name]["outcomes"]
    run = {"plugin": "fakegpu", "release": name, "outcomes": dict(recorded), "reasons": {}}
    assert rv.check_run(run) == []
    some = sorted(c for c, o in recorded.items() if o == "passed" and c not in rv.HOST_DEPENDENT)[0]
    run["outcomes"][some], run["reasons"][some] = "failed", "expected: x"
    run["outcomes"]["LAW-04"] = "warned" if recorded.get("LAW-04") != "warned" else "passed"   # host-dependent
    assert rv.check_run(run) == [f"{some}: recorded passed, now failed (expected: x)"]
    warned = sorted(c for c, o in recorded.items() if o == "passed" and c not in rv.HOST_DEPENDENT)[1]
    run["outcomes"][warned] = "warned"                  # an advisory finding that comes and goes with timing
    assert rv.check_run(run) == [f"{some}: recorded passed, now failed (expected: x)"]
    assert rv.check_run(run | {"release": "1.20"}) == ["no verdicts recorded for the fake GPU on 1.20"]


def test_the_table_shows_a_verdict_that_differs_by_release():
    names = [r.name for r in kube_versions.RELEASES]
    runs = {n: {"outcomes": {"REG-01": "passed", "PRS-04": "passed" if n == names[-1] else "skipped"},
                "reasons": {} if n == names[-1] else {"PRS-04": "before 1.37 ..."}} for n in names}
    text = rv.render({"fakegpu": runs})
    assert "| PRS-04 | fake GPU | skipped: before 1.37 ... | skipped: before 1.37 ... | passed |" in text
    assert "| REG-01 |" not in text
    assert "| upstream sample plugin | 1.35 | not recorded |" in text


@pytest.mark.node
@pytest.mark.timeout(600)
def test_sample_plugin_verdicts_on_the_real_kubelet_match_the_recording(tmp_path):
    from dpconform.fixtures.backends.node import node_unavailable
    reason = node_unavailable()
    if reason:
        pytest.skip(reason)
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance", "--backend", "node", "-n", "0", "-q",
                           "-p", "no:randomly", "-p", "no:cacheprovider", "--report", str(report), *SAMPLE_ARGS],
                          cwd=ROOT, capture_output=True, text=True, timeout=540)
    if not report.exists():
        pytest.fail(f"no report (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    rv.assert_recorded("sample", report)
