"""The DRA checks (conformance/test_dra.py, `--dra`) against the fake-GPU DRA driver: the clean driver passes
every one with --strict, and each defect switch (plugin_under_test/fakegpu_dra/defects.py) fails exactly
its listed checks – on the emulator backend (an API server from bin/: `make cluster-bins`; `make dra`, not
`make test`). A switch that lists none (unpublish-prepared) must fail nothing here: only DRA-18 on the local
cluster catches it (tests/test_dra_local.py)."""
import pytest

from dpconform.fixtures import catalogue
from dpconform.fixtures.cluster.controlplane import API_ONLY, control_plane_unavailable
from dpconform.fixtures.node.backend import DEFAULT_BIN_DIR
from dpconform.plugin_under_test.fakegpu_dra.defects import DEFECTS
from tests.support.conformance_runner import messages, outcomes, run_dra_suite
from tests.support.verdicts import EMULATOR_SKIPS, assert_exact_failures

pytestmark = [pytest.mark.dra,
              pytest.mark.skipif(bool(control_plane_unavailable(DEFAULT_BIN_DIR, API_ONLY)),
                                 reason=f"DRA checks need an API server: "
                                        f"{control_plane_unavailable(DEFAULT_BIN_DIR, API_ONLY)}")]
# shorter bounds keep the matrix quick; each still proves its rule (register-before-serving delays 3 s; the
# fake GPU re-publishes a deleted slice within a second)
FAST = ["--register-timeout", "8", "--health-timeout", "5", "--slice-republish-timeout", "8"]


def test_clean_driver_passes_every_dra_check():
    report, out = run_dra_suite([], extra=FAST)
    got = outcomes(report)
    bad = {c: o for c, o in got.items() if o != "passed" and not (o == "skipped" and c in EMULATOR_SKIPS)}
    assert not bad, f"the clean driver should pass every DRA check with --strict: {bad}\n{messages(report, bad)}\n{out}"
    assert set(got) == catalogue.ids(dra=True), f"not run: {sorted(catalogue.ids(dra=True) - set(got))}"


@pytest.mark.matrix
@pytest.mark.timeout(360)
@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_dra_defect_fails_exactly_its_checks(defect):
    _, checks = DEFECTS[defect]
    report, out = run_dra_suite(["--defect", defect], extra=FAST)
    assert_exact_failures(f"--dra --defect {defect}", set(checks), report, out, catalogue.ids(dra=True))


def test_a_driver_wide_cdi_device_is_no_leak():
    """A driver that answers every claim with a driver-wide CDI device too (--shared-cdi-device, as the upstream
    example driver's "common" one, kept while it runs) passes every DRA check: DRA-09 and DRA-15 before took it
    for a leak of each claim ("still defined: dpconform.io/gpu=common")."""
    report, out = run_dra_suite(["--shared-cdi-device"], extra=FAST)
    got = outcomes(report)
    bad = {c: o for c, o in got.items() if o != "passed" and not (o == "skipped" and c in EMULATOR_SKIPS)}
    assert not bad, f"{bad}\n{messages(report, bad)}\n{out}"


def test_a_claims_own_cdi_device_left_beside_a_shared_one_still_fails():
    report, out = run_dra_suite(["--shared-cdi-device", "--defect", "cdi-leak"], extra=FAST)
    assert_exact_failures("--dra --shared-cdi-device --defect cdi-leak", set(DEFECTS["cdi-leak"][1]), report, out,
                          catalogue.ids(dra=True))
