"""The load scenarios' command-line options (`pytest -m load --load-profile smoke|full|PATH ...`).

A plugin, not scenarios/conftest.py: pytest parses the command line before it collects, so an option
defined in a conftest below the root is unknown to `pytest -m load --load-profile full` run from the
repo root (it reads scenarios/ only through `testpaths`). The root conftest.py lists this module in
`pytest_plugins`, so the options exist in every run from the repo. Fixtures stay in scenarios/conftest.py.

One pytest limit no plugin here can lift: before any plugin is loaded, pytest takes a bare option value
that is an existing path for a test path, and picks its rootdir and conftests from it. A path inside the
repo is harmless; one outside it (`--baseline /elsewhere/old.json`) leaves pyproject.toml and this plugin
unread ("unrecognized arguments"). Give those as `--baseline=/elsewhere/old.json` (the Makefile does).
"""
from __future__ import annotations

import pathlib

import pytest

from dpconform.scenarios import profile as profiles

PROFILE_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser):
    g = parser.getgroup("dpconform-load", "dpconform: load scenarios (pytest -m load)")
    g.addoption("--load-profile", default="smoke",
                help="smoke (seconds, default), full (minutes) or a YAML file shaped like scenarios/profiles/*.yaml; "
                     "given twice, the last one wins")
    g.addoption("--load-out", default="reports/load",
                help="directory for the per-scenario JSON, PNG plots and load-results.json (default reports/load)")
    g.addoption("--baseline", metavar="OLD.json",
                help="results of an earlier run (load-results.json or one scenario's JSON): fail on regressions")
    g.addoption("--regression-ratio", type=float, default=1.5,
                help="with --baseline: fail when a p50/p95/p99 grows by more than this factor or throughput "
                     "falls by more than it (default 1.5)")
    g.addoption("--load-processes", type=int, metavar="N",
                help="run each scenario in locust's distributed mode: a master and N worker processes on this host "
                     "(for more than one host: python -m dpconform.scenarios.runner --master / --worker, see the README)")
    g.addoption("--load-generator", choices=("locust", "ghz"),
                help="plugin_allocate_burst's generator: locust users (default) or ghz, native, for plugins faster "
                     "than Python can time (`make bin/ghz` builds it)")
    g.addoption("--regression-min-ms", type=float, default=0.5,
                help="with --baseline: ignore latency growth smaller than this many ms (scheduler noise; default 0.5)")


def pytest_configure(config):
    processes = config.getoption("load_processes", None)
    if processes is not None and processes < 1:
        raise pytest.UsageError(f"--load-processes must be at least 1, got {processes}")
    if config.getoption("regression_ratio", 1.5) <= 1.0:
        raise pytest.UsageError("--regression-ratio must be > 1 (e.g. 1.5 = fail when 50% slower)")
    if config.getoption("load_generator", None) == "ghz":
        from dpconform.scenarios import ghz
        if ghz.unavailable():
            raise pytest.UsageError(f"--load-generator ghz: {ghz.unavailable()}")
    baseline = config.getoption("baseline", None)
    if baseline and not pathlib.Path(baseline).is_file():
        raise pytest.UsageError(f"--baseline {baseline}: no such file")
    try:
        config.stash[PROFILE_KEY] = profiles.load(config.getoption("load_profile", "smoke"))
    except profiles.ProfileError as e:
        raise pytest.UsageError(f"--load-profile: {e}") from None
