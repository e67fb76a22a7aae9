"""The differential tests' results, per real kubelet, for the fidelity table (fixtures/node/fidelity.py):
reports/fidelity-<node|local>.json, {"backend": ..., "release": the tag judged against, "results": {test id: outcome}}, written at the end of
a session that ran any (also under xdist: the outcome travels in the report's user_properties)."""
from __future__ import annotations

import json
import pathlib
import shutil
import tempfile

import pytest

from dpconform.fixtures import kube_versions
from dpconform.fixtures.kubelet.emulator import KubeletEmulator
from tests.support import sample_plugin_files

REPORTS = pathlib.Path(__file__).resolve().parents[1] / "reports"
_results: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="session", autouse=True)
def _sample_plugin_files():
    """The tests that run the upstream sample plugin (node, local cluster, differential, DaemonSet) leave
    none of its /tmp/<device ID> files, or the directories a runtime made for its mounts, behind."""
    made = [p for p in sample_plugin_files.PATHS if not p.exists()]
    yield
    sample_plugin_files.remove(made)


@pytest.fixture
def make_emu():
    """Started kubelet emulators in fresh dirs (make_emu(**kwargs)), stopped and removed afterwards."""
    made = []

    def make(**kw):
        d = tempfile.mkdtemp(dir="/tmp", prefix="emu")
        kw.setdefault("grace_period_s", 300)
        emu = KubeletEmulator(d, **kw).start()
        made.append((emu, d))
        return emu
    yield make
    for emu, d in made:
        emu.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    callspec = getattr(item, "callspec", None)
    real = callspec.params.get("real") if callspec else None
    if real and item.get_closest_marker("differential") is not None:
        rep.user_properties.append(("fidelity_backend", real))


def pytest_runtest_logreport(report):
    real = dict(report.user_properties).get("fidelity_backend")
    if real is None:
        return
    name = report.nodeid.rsplit("::", 1)[-1]
    if report.when == "call" or report.outcome != "passed":   # a failed or skipped setup counts too
        _results.setdefault(real, {})[name] = report.outcome


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):     # an xdist worker: the controller writes
        return
    for real, results in _results.items():
        REPORTS.mkdir(exist_ok=True)
        release = kube_versions.DEFAULT.tag           # the release this session judged against
        (REPORTS / f"fidelity-{real}.json").write_text(json.dumps({"backend": real, "release": release,
                                                                   "results": results}, indent=1, sort_keys=True))


@pytest.fixture
def stand_in_busybox(tmp_path, monkeypatch) -> pathlib.Path:
    """The file the image writer takes for the images' busybox (fixtures/node/images.py BUSYBOX): a test of
    how an image is written needs none of the node tier's busybox-static (make test runs without it)."""
    from dpconform.fixtures.node import images
    path = tmp_path / "busybox-stand-in"
    path.write_bytes(b"#!/bin/sh\n# stands in for a static busybox\n")
    monkeypatch.setattr(images, "BUSYBOX", str(path))
    return path
