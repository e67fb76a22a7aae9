"""Every required check of the catalogue is proven able to fail, and every check fails only when it should.

The catalogue is read from the code (fixtures/catalogue.py: the @check markers and docstrings). For each
defect switch of the fake-GPU plugin (plugin_under_test/fakegpu/defects.py) the WHOLE catalogue runs
against the plugin with that defect, and exactly the defect's listed checks must fail (outcome failed
or error): any other check failing is a false positive. The clean plugin must pass everything with
--strict. The MAN checks read only the manifest, nothing the plugin does: each broken manifest
(MANIFEST_DEFECTS) runs the MAN area against a broken copy of the bundled DaemonSet, with the same
exact-set rule.
"""
import re

import pytest

from dpconform.commands import checks as checks_command
from dpconform.fixtures import catalogue, kube_versions
from dpconform.plugin_under_test.fakegpu.defects import (CLUSTER_DEFECTS, DEFECTS, FORCES_PRE_START, MANIFEST_BASE,
                                               MANIFEST_DEFECTS, NOT_WITH, ONLY_WITH,
                                               PROVEN_ELSEWHERE)
from dpconform.plugin_under_test.fakegpu_dra import defects as dra_defects
from tests.support.conformance_runner import ROOT, messages, outcomes, run_suite
from tests.support.verdicts import FAILED, assert_exact_failures

# Defects too slow for a whole-catalogue run: they run only their own checks and assert that those fail
# (no exact set). defect -> why.
OWN_CHECKS_ONLY: dict[str, str] = {
    "slow-options": "GetDevicePluginOptions sleeps 7 s on every call, the kubelet's during each Register too: "
                    "a whole-catalogue run registers ~30 times and exceeds 10 min (POD-03 alone reaches its "
                    "300 s ceiling). Make the defect slow only outside registration to run it whole.",
}

# One whole-catalogue run against a defect; a run that waits out every timeout must still end.
RUN_TIMEOUT_S = 600

# Defects whose point is a root cause: the checks it prevents must be told so (blocked by that check).
BLOCKS: dict[str, str] = {
    "unserved-endpoint": "REG-04",
    "lowercase-health": "LAW-03",
    "no-snapshot": "LAW-01",
    "no-reregister": "KRS-01",
    "new-ids-after-restart": "LAW-09",
}


# -- the tables agree with the catalogue ------------------------------------------------------------
def test_every_required_check_is_proven_able_to_fail():
    """The defect tables name a proof for every required check. This reads the tables only: the proofs run
    where checks_command.proofs() says (docs/checks.md "proven by"): the fake-GPU DEFECTS and MANIFEST_DEFECTS in
    this file (`make test`), its CLUSTER_DEFECTS in tests/test_cluster_suite.py (`make cluster`), the DRA
    driver's DEFECTS in tests/test_dra_matrix.py (`make dra`) and its CLUSTER_DEFECTS in tests/test_dra_local.py
    (`make cluster`); `make test` runs none of the last three."""
    where = checks_command.PROOF_TESTS
    tables = {"fakegpu": {c for _, checks in DEFECTS.values() for c in checks}
              | {c for _, _, checks in MANIFEST_DEFECTS.values() for c in checks},
              "fakegpu-local": {c for checks in CLUSTER_DEFECTS.values() for c in checks},
              "dra": {c for _, checks in dra_defects.DEFECTS.values() for c in checks},
              "dra-local": {c for checks in dra_defects.CLUSTER_DEFECTS.values() for c in checks}}
    covered = set().union(*tables.values())
    missing = catalogue.ids("required") - covered - set(PROVEN_ELSEWHERE)
    runs = "; ".join(f"{k}: {where[k]} ({checks_command.make_target(where[k])})" for k in tables)
    assert not missing, (f"required checks that nothing proves able to fail: {sorted(missing)}; add a defect "
                         "to plugin_under_test/fakegpu/defects.py (DEFECTS or MANIFEST_DEFECTS) or, for a DRA "
                         f"check, plugin_under_test/fakegpu_dra/defects.py (the proofs run in: {runs})")
    # the DRA proofs are not run by `make test`: the docs say where they run (make dra / make cluster)
    dra_proofs = [p for c in tables["dra"] | tables["dra-local"] for p in checks_command.proofs().get(c, [])
                  if p.startswith("`--dra ")]
    unplaced = [p for p in dra_proofs if not p.endswith(("(`make dra`)", "(`make cluster`)"))]
    assert not unplaced, f"DRA proofs whose docs/checks.md entry does not name the make target that runs them: {unplaced}"


def test_defect_tables_name_catalogue_checks():
    known = catalogue.ids()
    named = {f"DEFECTS[{d!r}]": set(c) for d, (_, c) in DEFECTS.items()}
    named |= {f"MANIFEST_DEFECTS[{d!r}]": set(c) for d, (_, _, c) in MANIFEST_DEFECTS.items()}
    named |= {f"CLUSTER_DEFECTS[{d!r}]": set(c) for d, c in CLUSTER_DEFECTS.items()}
    named["PROVEN_ELSEWHERE"] = set(PROVEN_ELSEWHERE)
    named |= {f"dra DEFECTS[{d!r}]": set(c) for d, (_, c) in dra_defects.DEFECTS.items()}
    unknown = {k: sorted(v - known) for k, v in named.items() if v - known}
    assert not unknown, f"check IDs not in the catalogue: {unknown}"
    assert all(b in kube_versions.SINCE and c in DEFECTS[d][1] for table in (NOT_WITH, ONLY_WITH)
               for d, cs in table.items() for c, b in cs.items())
    keyed = set(OWN_CHECKS_ONLY) | set(CLUSTER_DEFECTS) | set(BLOCKS) | set(NOT_WITH) | set(ONLY_WITH)
    assert keyed <= set(DEFECTS), f"not defect switches: {sorted(keyed - set(DEFECTS))}"
    assert not set(PROVEN_ELSEWHERE) & {c for _, c in DEFECTS.values() for c in c}, "proven twice"


def test_proven_elsewhere_names_real_tests():
    for check, where in PROVEN_ELSEWHERE.items():
        m = re.search(r"`([\w/.]+\.py)::(\w+)`", where)
        assert m, f"PROVEN_ELSEWHERE[{check!r}] must name `path.py::test_name`: {where!r}"
        path = ROOT / m.group(1)
        assert path.is_file() and f"def {m.group(2)}(" in path.read_text(), f"{check}: {m.group(0)} does not exist"


# -- the matrix -------------------------------------------------------------------------------------
def breaks_on_this_release(defect: str) -> tuple[str, ...]:
    """The checks `defect` breaks on the kubelet judged against (NOT_WITH, ONLY_WITH: where that differs)."""
    not_with, only_with = NOT_WITH.get(defect, {}), ONLY_WITH.get(defect, {})
    return tuple(c for c in DEFECTS[defect][1] if not (c in not_with and kube_versions.holds(not_with[c]))
                 and not (c in only_with and not kube_versions.holds(only_with[c])))



@pytest.mark.matrix
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_defect_fails_exactly_its_checks(defect):
    checks = breaks_on_this_release(defect)
    args = ["--defect", defect] + (["--pre-start-required"] if defect in FORCES_PRE_START else [])
    if defect in OWN_CHECKS_ONLY:
        report, out = run_suite(args, checks=list(checks), timeout=RUN_TIMEOUT_S)
        got = outcomes(report)
        not_failed = {c: got.get(c, "not run") for c in checks if got.get(c) not in FAILED}
        assert not not_failed, f"--defect {defect} should fail {list(checks)}, but: {not_failed}\n{out}"
        return
    report, out = run_suite(args, timeout=RUN_TIMEOUT_S)
    assert_exact_failures(f"--defect {defect}", set(checks), report, out, catalogue.ids(dra=False))
    if defect in BLOCKS:
        root = BLOCKS[defect]
        told = sorted(c["id"] for c in report["checks"] if c["outcome"] == "blocked" and c.get("blocked_by") == root)
        assert told, f"--defect {defect}: no check was told it is blocked by {root}\n{out}"


@pytest.mark.matrix
@pytest.mark.parametrize("name", sorted(MANIFEST_DEFECTS))
def test_broken_manifest_fails_exactly_its_checks(name, tmp_path):
    _, edits, checks = MANIFEST_DEFECTS[name]
    text = (ROOT / MANIFEST_BASE).read_text()
    for old, new in edits:
        assert old in text, f"{MANIFEST_BASE} no longer contains {old!r}: update MANIFEST_DEFECTS[{name!r}]"
        text = text.replace(old, new)
    broken = tmp_path / "daemonset.yaml"
    broken.write_text(text)
    man = {c.id for c in catalogue.catalogue() if c.area == "MAN"}
    report, out = run_suite([], checks=sorted(man), extra=["--manifest", str(broken)])
    assert_exact_failures(f"manifest {name}", set(checks), report, out, man)


@pytest.mark.matrix
def test_clean_plugin_passes_everything():
    report, out = run_suite(["--pre-start-required"], extra=["--manifest", str(ROOT / MANIFEST_BASE)],
                            timeout=RUN_TIMEOUT_S)
    got = outcomes(report)
    # CLU checks need a cluster backend: on the emulator they are skipped by capability
    bad = {c: o for c, o in got.items() if o != "passed" and not (o == "skipped" and c.startswith("CLU-"))}
    assert not bad, (f"the clean fake-GPU plugin should pass every check with --strict: {bad}\n"
                     f"{messages(report, bad)}\n{out}")
    assert set(got) == catalogue.ids(dra=False), f"not run: {sorted(catalogue.ids(dra=False) - set(got))}"


def test_rob_01_always_tries_an_impossible_preferred_request():
    """ROB-01 fails on preferred-crash-on-impossible with a single generated example: its explicit examples
    include a GetPreferredAllocation asking for more devices than offered. Random generation alone missed
    that request in 3 of 9 matrix runs (one `make test`, two of six parallel runs under load)."""
    report, out = run_suite(["--defect", "preferred-crash-on-impossible"], checks=["ROB-01"],
                            extra=["--hypothesis-examples", "1"])
    assert outcomes(report) == {"ROB-01": "failed"}, out
    assert "for a malformed preferred request" in messages(report, ["ROB-01"]), messages(report, ["ROB-01"])
