"""The DRA checks on the local cluster (`pytest conformance --dra --backend local`): the fake-GPU DRA driver
registers with the real kubelet, the real scheduler allocates a pod's claims (DRA-18), and a defect that
breaks the kubelet's path fails there too. Needs root, `make kube-bins cluster-bins`; `make cluster`."""
from __future__ import annotations

import pytest

from dpconform.fixtures import catalogue
from dpconform.plugin_under_test.fakegpu_dra.defects import CLUSTER_DEFECTS
from tests.support.conformance_runner import messages, outcomes, run_dra_suite
from tests.support.verdicts import assert_exact_failures

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
LOCAL = ["--backend", "local"]
# the kubelet's side of a restart is observed on the emulator only
LOCAL_SKIPS = {"DRA-14"}


@pytest.fixture(scope="module", autouse=True)
def _cluster_host():
    from dpconform.fixtures.cluster.local import unavailable
    reason = unavailable()
    if reason:
        pytest.skip(reason)


def test_dra_checks_on_the_local_cluster():
    report, out = run_dra_suite([], extra=LOCAL, timeout=600)
    got = outcomes(report)
    bad = {c: o for c, o in got.items() if o != "passed" and not (o == "skipped" and c in LOCAL_SKIPS)}
    assert not bad, f"{bad}\n{messages(report, bad)}\n{out}"
    assert got.get("DRA-18") == "passed"


@pytest.mark.parametrize("defect", sorted(CLUSTER_DEFECTS))
def test_dra_defect_on_the_local_cluster(defect):
    report, out = run_dra_suite(["--defect", defect], extra=LOCAL, timeout=600)
    assert_exact_failures(f"--dra --defect {defect} --backend local", set(CLUSTER_DEFECTS[defect]), report, out,
                          catalogue.ids(dra=True))
