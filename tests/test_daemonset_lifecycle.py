"""The plugin as users deploy it (conformance/test_daemonset.py, CLU-09..13): the upstream sample device
plugin as a DaemonSet on the local cluster passes the lifecycle checks, and each check fails on a copy of
its manifest built to break that check's rule. Needs root and the cluster binaries (`make cluster`)."""
from __future__ import annotations

import pytest

from tests.support.conformance_runner import messages, outcomes
from tests.support.sample_daemonset import BROKEN, LIFECYCLE, MANIFEST, broken_manifest, run, write_image

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]


@pytest.fixture(scope="module", autouse=True)
def _cluster_host():
    from dpconform.fixtures.cluster.local import unavailable
    reason = unavailable()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    return write_image(tmp_path_factory.mktemp("img") / "sample-device-plugin.tar")


@pytest.mark.smoke
def test_sample_plugin_daemonset_lifecycle(image, tmp_path):
    report, out = run(MANIFEST, image, LIFECYCLE, tmp_path)
    got = outcomes(report)
    bad = {c: o for c, o in got.items() if o != "passed"}
    assert not bad and set(got) == set(LIFECYCLE), f"{got}\n{messages(report, bad)}\n{out}"
    assert "CLU-11: allocatable example.com/resource was 0 for" in out, out


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_manifest_fails_its_check(name, image, tmp_path):
    _, checks, must_fail = BROKEN[name]
    report, out = run(broken_manifest(name, tmp_path), image, checks, tmp_path)
    got = outcomes(report)
    failed = {c for c, o in got.items() if o in ("failed", "error")}
    assert failed == must_fail, f"{name}: {got}\n{messages(report, got)}\n{out}"
    if name == "no-hostpath-mount":
        assert "MAN-01 explains it" in messages(report, ["CLU-09"]), messages(report, ["CLU-09"])
