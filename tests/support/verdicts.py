"""How a defect run is judged: exactly the defect's checks fail, and every check reported blocked names one
that failed in the same run (tests/test_defect_matrix.py, tests/test_dra_matrix.py, tests/test_dra_local.py)."""
from __future__ import annotations

from tests.support.conformance_runner import messages, outcomes

# Outcomes that count as "the check failed". Everything else does not: passed, warned, skipped, and
# "blocked" (a check prevented by a root-cause failure elsewhere).
FAILED = {"failed", "error"}

# DRA checks that run pods (capability dra-pods): on the emulator they are skipped by design
EMULATOR_SKIPS = {"DRA-18", "DRA-19", "DRA-21"}


def _outcome_text(report, got, ids) -> str:
    return "\n".join(f"  {c}: {got.get(c, 'not run')}" for c in sorted(ids)) + "\n" + messages(report, ids)


def assert_exact_failures(what: str, expected: set[str], report: dict, out: str, run: set[str]) -> None:
    """Exactly `expected` of the checks `run` failed. A check that a broken rule elsewhere prevented is
    reported blocked by that root cause (fixtures/harness.py), which does not count as failed."""
    got = outcomes(report)
    not_run = run - set(got)
    assert not not_run, f"{what}: checks missing from the report: {sorted(not_run)}\n{out}"
    failed = {c for c, o in got.items() if o in FAILED}
    missing = expected - failed
    assert not missing, (f"{what} should fail {sorted(expected)}, but these did not fail:\n"
                         f"{_outcome_text(report, got, missing)}\n{out}")
    extra = failed - expected
    assert not extra, (f"{what}: checks failing beyond {sorted(expected)} (false positives or a cascade that "
                       f"should be reported as blocked by its root cause):\n{_outcome_text(report, got, extra)}\n{out}")
    assert_blocks_name_failures(what, report, failed)


def assert_blocks_name_failures(what: str, report: dict, failed: set[str]) -> None:
    """What the other checks were told: every check reported blocked names, as its root cause, a check
    that failed in the same run."""
    wrong = {c["id"]: c.get("blocked_by") for c in report["checks"]
             if c["outcome"] == "blocked" and c.get("blocked_by") not in failed}
    assert not wrong, (f"{what}: checks blocked by a root cause that did not fail in this run (failed: "
                       f"{sorted(failed)}): {wrong}\n{messages(report, wrong)}")
