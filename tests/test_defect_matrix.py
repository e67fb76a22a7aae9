"""Every required check of CHECKS.md is proven able to fail: the fake-GPU plugin breaks its rule on purpose.

For each defect switch, the suite runs the checks that defect must break and this test asserts they
fail; the clean plugin must pass the whole catalogue with --strict.
"""
import pytest

from plugin_under_test.fakegpu.defects import DEFECTS, FORCES_PRE_START
from tests.conformance_runner import messages, outcomes, run_suite

CATALOGUE_REQUIRED = {
    "REG-01", "REG-02", "REG-03", "REG-04", "REG-06", "OPT-01", "OPT-02", "OPT-03",
    "LAW-01", "LAW-02", "LAW-03", "LAW-04", "LAW-05", "LAW-07", "LAW-08", "LAW-09",
    "ALC-01", "ALC-02", "ALC-03", "ALC-04", "ALC-05", "ALC-07", "ALC-08", "ALC-09",
    "PRF-01", "PRF-02", "PRF-03", "PRF-04", "PRF-06", "PRF-07", "PRE-01",
    "KRS-01", "KRS-02", "KRS-03", "KRS-04", "PRS-01", "PRS-03",
    "TOP-01", "TOP-02", "POD-01", "POD-02", "POD-03", "POD-04", "ROB-01", "ROB-02",
}
# REG-01 fails for any plugin that never registers; it has no defect of its own beyond the
# launch errors tested in tests/test_suite_usage.py.
PROVEN_ELSEWHERE = {"REG-01"}


def test_every_required_check_has_a_defect():
    covered = {c for _, checks in DEFECTS.values() for c in checks}
    missing = CATALOGUE_REQUIRED - covered - PROVEN_ELSEWHERE
    assert not missing, f"required checks with no defect that makes them fail: {sorted(missing)}"


@pytest.mark.matrix
@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_defect_fails_its_checks(defect):
    _, checks = DEFECTS[defect]
    args = ["--defect", defect] + (["--pre-start-required"] if defect in FORCES_PRE_START else [])
    report, out = run_suite(args, checks=list(checks))
    got = outcomes(report)
    not_failed = {c: got.get(c, "not run") for c in checks if got.get(c) not in ("failed", "error")}
    assert not not_failed, f"--defect {defect} should fail {list(checks)}, but: {not_failed}\n{out}"


@pytest.mark.matrix
def test_clean_plugin_passes_everything():
    report, out = run_suite(["--pre-start-required"],
                            extra=["--manifest", "plugin_under_test/deploy/nvml-daemonset.yaml"])
    got = outcomes(report)
    bad = {c: o for c, o in got.items() if o != "passed"}
    assert not bad, (f"the clean fake-GPU plugin should pass every check with --strict: {bad}\n"
                     f"{messages(report, bad)}\n{out}")
    assert CATALOGUE_REQUIRED - PROVEN_ELSEWHERE <= set(got) | {"REG-01"}, sorted(CATALOGUE_REQUIRED - set(got))
