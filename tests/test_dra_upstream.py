"""The DRA checks against a driver nobody here wrote: upstream's test driver (bin/dra-test-driver). Its verdicts
are the ones fixtures/dra/upstream.py states and the README shows."""
import os

import pytest

from fixtures.cluster.controlplane import API_ONLY, control_plane_unavailable
from fixtures.dra import upstream
from fixtures.node.backend import DEFAULT_BIN_DIR
from fixtures.readme import README, section
from tests.conformance_runner import messages, outcomes, run_dra_suite

pytestmark = pytest.mark.dra


def test_readme_shows_the_upstream_verdicts():
    text = section(README.read_text(), upstream.BEGIN, upstream.END)
    assert text is not None and upstream.render() in text, \
        "README's upstream DRA verdicts are stale: run `python -m fixtures.dra.upstream --write`"
    assert f"--plugin-cmd '{upstream.COMMAND}'" in README.read_text(), "README no longer shows upstream.COMMAND"


@pytest.mark.timeout(400)
def test_upstream_test_driver_verdicts():
    missing = control_plane_unavailable(DEFAULT_BIN_DIR, API_ONLY)
    if missing:
        pytest.skip(f"DRA checks need an API server: {missing}")
    if not os.access(DEFAULT_BIN_DIR / "dra-test-driver", os.X_OK):
        pytest.skip("bin/dra-test-driver missing: run `make bin/dra-test-driver`")
    report, out = run_dra_suite([], plugin_cmd=upstream.COMMAND, timeout=360, strict=False)
    got = outcomes(report)
    want = {c: upstream.VERDICTS.get(c, ("passed", ""))[0] for c in got}
    diff = {c: f"{got[c]} (stated: {want[c]})" for c in got if got[c] != want[c]}
    assert not diff, f"the upstream test driver's verdicts changed: {diff}\n{messages(report, diff)}\n{out}"
