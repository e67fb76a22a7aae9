"""PRS-04 (a second instance beside the first, as a surge update starts it) judged by how the plugin is deployed:
a DaemonSet that rolls with maxSurge 0 (the default, NVIDIA's) never runs two instances, so PRS-04 is skipped for
it; one that surges gets PRS-04's verdict, and so does a run without --manifest."""
from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.conformance_runner import outcomes, run_suite

DAEMONSET = Path(__file__).resolve().parents[1] / "plugin_under_test" / "deploy" / "fakegpu-daemonset.yaml"


def manifest(tmp_path: Path, max_surge: int) -> str:
    ds = yaml.safe_load(DAEMONSET.read_text())
    ds["spec"]["updateStrategy"] = {"type": "RollingUpdate",
                                    "rollingUpdate": {"maxUnavailable": 1 - max_surge, "maxSurge": max_surge}}
    path = tmp_path / f"surge-{max_surge}.yaml"
    path.write_text(yaml.safe_dump(ds))
    return str(path)


def test_prs04_follows_the_update_strategy(tmp_path):
    broken = ["--defect", "fixed-socket-name"]      # the kubelet refuses a second instance on its socket
    got = {}
    for label, extra in (("no manifest", []), ("maxSurge 1", ["--manifest", manifest(tmp_path, 1)]),
                         ("maxSurge 0", ["--manifest", manifest(tmp_path, 0)])):
        report, out = run_suite(broken, checks=["PRS-04"], extra=extra)
        got[label] = outcomes(report)["PRS-04"]
    assert got == {"no manifest": "failed", "maxSurge 1": "failed", "maxSurge 0": "skipped"}, got
