"""The Python API (dpconform/api.py): its public names, kept stable; `dpconform.run()` gives the same
verdicts as the CLI on the same plugin; bad options are one line; a RunReport reads any JSON report."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

import dpconform
from dpconform import api

# Checks of several areas and outcomes: passed, failed (the defect's), blocked or skipped ones.
CHECKS = ["REG-01", "REG-03", "ALC-01", "ALC-04", "LAW-02", "LAW-08", "PRF-01", "ROB-02"]
DEFECTIVE = f"{sys.executable} -m dpconform fakegpu --plugin-dir {{plugin_dir}} --defect accept-unknown-id"

STABLE = {
    "run": "(config=None, *, args=(), cwd=None, quiet=True, timeout=None, **options)",
    "load_report": "(path, exit_code=None, output='')",
    "RunReport": ["exit_code", "kubelet_release", "plugin", "checks", "summary", "waivers", "notes", "config",
                  "path", "output"],
    "CheckVerdict": ["id", "area", "severity", "outcome", "expected", "got", "fix", "blocked_by", "waiver",
                     "duration", "message", "output"],
    "RunError": None,
}


def test_the_public_names_are_the_documented_ones():
    """A name, a parameter or a field removed or renamed breaks vendors' code: change it here on purpose only."""
    import inspect
    assert tuple(STABLE) == api.PUBLIC and set(dpconform.__all__) == {"__version__", *STABLE}
    for name, shape in STABLE.items():
        obj = getattr(dpconform, name)
        if isinstance(shape, str):
            bare = inspect.signature(obj).replace(return_annotation=inspect.Signature.empty, parameters=[
                p.replace(annotation=inspect.Parameter.empty) for p in inspect.signature(obj).parameters.values()])
            assert str(bare) == shape, name
        elif shape is not None:
            assert [f.name for f in dataclasses.fields(obj)] == shape, name
    assert {"passed", "outcomes", "check", "failed"} <= set(dir(dpconform.RunReport))


def test_run_gives_the_verdicts_of_the_cli(tmp_path):
    report = dpconform.run(plugin_cmd=DEFECTIVE, checks=CHECKS, cwd=tmp_path)
    cli = tmp_path / "cli.json"
    proc = subprocess.run([sys.executable, "-m", "dpconform", "run", "-q", "--plugin-cmd", DEFECTIVE,
                           "--checks", ",".join(CHECKS), "--report", str(cli)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    doc = json.loads(cli.read_text())
    assert report.outcomes == {c["id"]: c["outcome"] for c in doc["checks"]}
    assert report.exit_code == proc.returncode == 1 and not report.passed
    assert report.kubelet_release == doc["kubelet_release"] and report.plugin["resource"] == "dpconform.io/fakegpu"
    alc04 = report.check("ALC-04")
    assert alc04.outcome == "failed" and alc04.area == "ALC" and alc04.severity == "required"
    assert alc04.expected.startswith("a gRPC error for unknown ID") and alc04.fix.startswith("reject IDs")
    assert alc04.got and "plugin output" in alc04.output
    assert [c.id for c in report.failed()] == ["ALC-04"]
    with pytest.raises(KeyError, match="TOP-01 was not run"):
        report.check("TOP-01")


def test_a_config_mapping_with_waivers(tmp_path):
    report = dpconform.run({"plugin-cmd": DEFECTIVE, "checks": ["ALC-04"],
                            "waivers": [{"check": "ALC-04", "reason": "disputed"}]}, cwd=tmp_path)
    assert report.passed and report.check("ALC-04").outcome == "waived" and report.check("ALC-04").waiver == "disputed"


def test_bad_options_are_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^unknown option 'plugin_cmnd' \(did you mean 'plugin_cmd'\?\)$"):
        dpconform.run(plugin_cmnd="x")
    with pytest.raises(ValueError, match=r"^dpconform.run\(config=...\): expected-devices: must be a whole number"):
        dpconform.run({"expected-devices": "x"})
    with pytest.raises(dpconform.RunError) as e:
        dpconform.run(plugin_cmd="/no/such/plugin", cwd=tmp_path)
    assert e.value.exit_code == 4 and str(e.value) == \
        "ERROR: --plugin-cmd: '/no/such/plugin' does not exist or is not executable"
