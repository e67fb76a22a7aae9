"""cluster_admission_burst proven able to fail: a plugin whose Allocate answers no container responses
makes every burst pod fail admission, and the result counts those failures by the kubelet's reason
(after the first burst the kubelet has no devices left: an Allocate that returned no container
responses leaves its devices counted as allocated, so later bursts fail for that reason).
(The healthy path, with its ratio to the emulator and in distributed mode, is the README's
`pytest -m load --backend local` commands: tests/test_readme_commands.py.)

Needs root, `make kube-bins` and `make cluster-bins`; skipped (one-line reason) otherwise. Run: `make cluster`.
"""
from __future__ import annotations

import pytest

from dpconform.fixtures.cluster.local import unavailable
from dpconform.fixtures.config import SuiteConfig
from dpconform.scenarios.orchestrate import LoadTarget, run_scenario

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def test_failures_counted_by_reason(tmp_path):
    why = unavailable()
    if why:
        pytest.skip(why)
    with LoadTarget(None, SuiteConfig(backend="local"), devices=4, plugin_args="--defect empty-response",
                    backend="local") as target:
        outcome = run_scenario("cluster_admission_burst", "smoke", target.target_path, tmp_path, burst_size=4,
                               echo=lambda line: None, no_plots=True)
        left = target.h.backend.cluster.api.pod_names()
    r = outcome.result
    assert r is not None and outcome.rc == 1, f"runner exit {outcome.rc}:\n{outcome.tail()}"
    running = r["requests"]["running"]
    assert running["count"] and running["count"] % 4 == 0 and running["failures"] == running["count"], running
    reasons = {k: v for k, v in r["errors"].items() if k.startswith("running: ")}
    assert sum(reasons.values()) == running["count"], (reasons, running)
    # one entry per cause (pod names stripped): the plugin's empty answer, then (the real kubelet keeps
    # the devices of an Allocate without container responses counted as allocated) no devices left
    empty = [k for k in reasons if "no containers return in allocation response" in k]
    assert len(empty) == 1 and reasons[empty[0]] >= 4, reasons
    assert all("UnexpectedAdmissionError" in k for k in reasons), reasons
    assert any("max_failure_ratio" in v or "failure" in v for v in r["slo"]["violations"]), r["slo"]
    assert not left, f"burst pods left in the namespace after the run: {sorted(left)}"
