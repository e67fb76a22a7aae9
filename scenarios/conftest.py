"""Fixtures of the load scenarios (`pytest -m load`).

The dpconform pytest plugin (fixtures/pytest_plugin.py) provides --plugin-cmd, --health-hook and the
`suite_config` fixture; the load-specific options are in scenarios/pytest_options.py (both are loaded by
the top-level conftest, so the options are known when the command line is parsed).
"""
from __future__ import annotations

import json
import pathlib

import pytest

from dpconform.scenarios.pytest_options import PROFILE_KEY


def pytest_collection_modifyitems(config, items):
    """Per-test timeout from the profile: the scenario's duration plus start-up and plotting slack."""
    prof = config.stash[PROFILE_KEY]
    longest = max(float(s["duration_s"]) + float(s.get("stop_timeout_s", 5)) for s in prof["scenarios"].values())
    here = pathlib.Path(__file__).parent
    for item in items:
        if item.get_closest_marker("load") and here in pathlib.Path(str(item.fspath)).parents \
                and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(longest + 180))
    # --dra: the DRA driver's scenario (dra_prepare_burst) only; without it, the device plugin's only
    from dpconform.fixtures.pytest_plugin import CONFIG_KEY
    dra = config.stash[CONFIG_KEY].dra           # the flag's, or the config file's
    other = [i for i in items if i.get_closest_marker("load") and here in pathlib.Path(str(i.fspath)).parents
             and (i.name.startswith("test_dra_") != dra)]
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = [i for i in items if i not in other]


@pytest.fixture(scope="session")
def load_profile(pytestconfig) -> dict:
    return pytestconfig.stash[PROFILE_KEY]


@pytest.fixture(scope="session")
def load_out(pytestconfig) -> pathlib.Path:
    out = pathlib.Path(pytestconfig.getoption("load_out")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="session")
def load_results(load_out, load_profile):
    """Collects each scenario's result; written to LOAD_OUT/load-results.json at the end (a --baseline file)."""
    results: dict[str, dict] = {}
    yield results
    if results:
        (load_out / "load-results.json").write_text(json.dumps(
            {"profile": load_profile["name"], "scenarios": results}, indent=2))


@pytest.fixture
def load_echo(pytestconfig):
    """Write a line to the terminal now, past output capture (progress lines while a scenario runs)."""
    tr = pytestconfig.pluginmanager.getplugin("terminalreporter")
    capman = pytestconfig.pluginmanager.getplugin("capturemanager")

    def echo(line: str) -> None:
        if tr is None or capman is None:
            return
        with capman.global_and_fixture_disabled():
            tr.write_line(line)
    return echo
