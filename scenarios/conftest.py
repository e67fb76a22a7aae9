"""Options and fixtures of the load scenarios (`pytest scenarios -m load`).

The dpconform pytest plugin (fixtures/pytest_plugin.py, loaded by the top-level conftest) provides
--plugin-cmd, --health-hook and the `suite_config` fixture; the options below are the load-specific ones.
"""
from __future__ import annotations

import json
import pathlib

import pytest

from scenarios import profile as profiles


def pytest_addoption(parser):
    g = parser.getgroup("dpconform-load", "dpconform: load scenarios (pytest -m load)")
    g.addoption("--load-profile", default="smoke",
                help="smoke (seconds, default), full (minutes) or a YAML file shaped like scenarios/profiles/*.yaml")
    g.addoption("--load-out", default="reports/load",
                help="directory for the per-scenario JSON, PNG plots and load-results.json (default reports/load)")
    g.addoption("--baseline", metavar="OLD.json",
                help="results of an earlier run (load-results.json or one scenario's JSON): fail on regressions")
    g.addoption("--regression-ratio", type=float, default=1.5,
                help="with --baseline: fail when a p50/p95/p99 grows by more than this factor or throughput "
                     "falls by more than it (default 1.5)")
    g.addoption("--regression-min-ms", type=float, default=0.5,
                help="with --baseline: ignore latency growth smaller than this many ms (scheduler noise; default 0.5)")


def pytest_configure(config):
    if config.getoption("regression_ratio", 1.5) <= 1.0:
        raise pytest.UsageError("--regression-ratio must be > 1 (e.g. 1.5 = fail when 50% slower)")
    baseline = config.getoption("baseline", None)
    if baseline and not pathlib.Path(baseline).is_file():
        raise pytest.UsageError(f"--baseline {baseline}: no such file")
    try:
        config.stash[PROFILE_KEY] = profiles.load(config.getoption("load_profile", "smoke"))
    except profiles.ProfileError as e:
        raise pytest.UsageError(f"--load-profile: {e}") from None


PROFILE_KEY = pytest.StashKey[dict]()


def pytest_collection_modifyitems(config, items):
    """Per-test timeout from the profile: the scenario's duration plus start-up and plotting slack."""
    prof = config.stash[PROFILE_KEY]
    longest = max(float(s["duration_s"]) + float(s.get("stop_timeout_s", 5)) for s in prof["scenarios"].values())
    here = pathlib.Path(__file__).parent
    for item in items:
        if item.get_closest_marker("load") and here in pathlib.Path(str(item.fspath)).parents \
                and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(longest + 180))


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
