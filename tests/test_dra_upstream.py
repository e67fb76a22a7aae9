"""The DRA checks against a driver nobody here wrote: upstream's test driver (`make dra-driver`: bin/<release>/dra-test-driver). Its verdicts
are those a live run recorded in fixtures/dra/upstream-verdicts.json (fixtures/dra/upstream.py), which the live
test compares with what it sees (`make dra`) and the README's table is rendered from (checked by `make test`)."""
import os

import pytest

from dpconform.fixtures import catalogue
from dpconform.fixtures.cluster.controlplane import API_ONLY, control_plane_unavailable
from dpconform.fixtures.dra import upstream
from dpconform.fixtures.node.backend import DEFAULT_BIN_DIR
from dpconform.fixtures.readme import README, section
from tests.support.conformance_runner import messages, run_dra_suite


def test_readme_shows_the_recorded_upstream_verdicts():
    text = section(README.read_text(), upstream.BEGIN, upstream.END)
    assert text is not None and upstream.render() in text, \
        f"README's upstream DRA verdicts are not those of {upstream.VERDICTS_FILE.name}: run `{upstream.WRITE_CMD}`"
    assert f"--plugin-cmd '{upstream.COMMAND}'" in README.read_text(), "README no longer shows upstream.COMMAND"


def test_recorded_upstream_verdicts_are_of_this_catalogue_and_command():
    recorded = upstream.load()
    assert recorded["command"] == upstream.COMMAND, \
        f"recorded with another command than upstream.COMMAND: record again (`{upstream.RECORD_CMD}`)"
    assert set(recorded["checks"]) == catalogue.ids(dra=True), \
        (f"the recorded run does not cover the DRA checks of the catalogue (missing "
         f"{sorted(catalogue.ids(dra=True) - set(recorded['checks']))}, gone "
         f"{sorted(set(recorded['checks']) - catalogue.ids(dra=True))}): record again (`{upstream.RECORD_CMD}`)")
    assert set(upstream.NOTES) <= set(recorded["checks"]), "upstream.NOTES names checks the recording lacks"


def test_recorded_verdicts_compare_key_facts_not_outcomes_only():
    recorded = upstream.load()["checks"]
    assert upstream.differences(recorded, recorded) == {}
    live = {c: dict(v) for c, v in recorded.items()}
    live["DRA-15"]["got"] = live["DRA-15"]["got"].replace("gpu-0", "gpu-7")         # numbers aside
    assert upstream.differences(live, recorded) == {}
    live["DRA-15"]["got"] = "still defined after the restart and unprepare: []"     # another fact, same outcome
    assert list(upstream.differences(live, recorded)) == ["DRA-15"]
    del live["DRA-01"]
    assert upstream.differences(live, recorded)["DRA-01"].startswith("outcome 'not run' (recorded: 'passed')")


@pytest.mark.dra
@pytest.mark.timeout(400)
def test_upstream_test_driver_verdicts():
    missing = control_plane_unavailable(DEFAULT_BIN_DIR, API_ONLY)
    if missing:
        pytest.skip(f"DRA checks need an API server: {missing}")
    if not os.access(DEFAULT_BIN_DIR / "dra-test-driver", os.X_OK):
        pytest.skip(f"{DEFAULT_BIN_DIR / 'dra-test-driver'} missing: run `make dra-driver`")
    report, out = run_dra_suite([], plugin_cmd=upstream.COMMAND, timeout=360, strict=False)
    live = upstream.verdicts_of(report)
    if os.environ.get(upstream.RECORD_ENV):     # a recording run records; the next run compares with it
        upstream.record(live)
        pytest.skip(f"recorded {len(live)} verdicts into {upstream.VERDICTS_FILE}; now run `{upstream.WRITE_CMD}`, "
                    f"and this test again without {upstream.RECORD_ENV} to compare")
    diff = upstream.differences(live, upstream.load()["checks"])
    assert not diff, (f"the upstream test driver's verdicts differ from {upstream.VERDICTS_FILE.name}: {diff}\n"
                      f"if the change is right, record it: `{upstream.RECORD_CMD}`, then `{upstream.WRITE_CMD}`\n"
                      f"{messages(report, diff)}\n{out}")
