"""The backend seam, the cleanup tracker and the one wait: what every check stands on."""
from __future__ import annotations

import pathlib
import re
import time

import pytest

from dpconform.fixtures import backends
from dpconform.fixtures.backends.base import Backend
from dpconform.fixtures.config import SuiteConfig
from dpconform.fixtures.harness import Harness
from dpconform.fixtures.resources import CleanupError, Resources
from dpconform.fixtures.waiting import wait_until
from tests.support.conformance_runner import outcomes, run_suite


# -- the one wait --------------------------------------------------------------------------------
def test_wait_retries_transient_errors_and_names_the_last():
    calls = []

    def cond():
        calls.append(1)
        raise ConnectionRefusedError("not yet")
    with pytest.raises(TimeoutError, match="waiting for the socket .*ConnectionRefusedError"):
        wait_until(cond, 0.2, "the socket", transient=(OSError,))
    assert len(calls) > 1


def test_wait_lets_fatal_errors_through_at_once():
    t0 = time.monotonic()
    with pytest.raises(KeyError):
        wait_until(lambda: {}["gone"], 30, "never", transient=(OSError,))
    assert time.monotonic() - t0 < 1


def test_wait_stops_when_alive_raises():
    state = {"n": 0}

    def alive():
        state["n"] += 1
        if state["n"] > 3:
            raise backends.KubeletDied("the kubelet is gone")
    t0 = time.monotonic()
    with pytest.raises(backends.KubeletDied, match="gone"):
        wait_until(lambda: False, 30, "a registration", alive=alive)
    assert time.monotonic() - t0 < 1


# -- the cleanup tracker ---------------------------------------------------------------------------
def test_resources_undo_newest_first_and_collect_every_error():
    order = []
    r = Resources()
    r.add("first", lambda: order.append("first"))
    r.add("broken", lambda: 1 / 0)
    r.add("last", lambda: order.append("last"))
    with pytest.raises(CleanupError, match="broken: ZeroDivisionError"):
        r.close()
    assert order == ["last", "first"]
    assert len(r) == 0


def test_a_failing_close_leaves_no_other_harness_running():
    """make_harness's teardown: one harness whose close() raises does not keep the others running."""
    r = Resources()
    made = []
    for _ in range(2):
        h = Harness(SuiteConfig(), resources=r)
        r.add(f"closing {h.root}", h.close)
        made.append(h)
        h.start()
    broken = made[0]
    real_close = broken.backend.close

    def close_then_fail():
        real_close()
        raise RuntimeError("backend teardown failed")
    broken.backend.close = close_then_fail
    with pytest.raises(CleanupError, match="backend teardown failed"):
        r.close()
    assert not any(h.plugin.running for h in made)
    assert not any(h.root.exists() for h in made)


# -- the registry ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", backends.names())
def test_every_registered_backend_implements_the_protocol(name):
    cls = backends.backend_class(name)
    assert cls.name == name
    assert cls.capabilities <= set(backends.CAPABILITIES), cls.capabilities - set(backends.CAPABILITIES)
    members = [m for m in dir(Backend) if not m.startswith("_") and m not in ("name", "capabilities", "plugin_dir")]
    missing = [m for m in members if not callable(getattr(cls, m, None))]
    assert not missing, f"{cls.__name__} lacks {missing}"


def test_checks_reach_only_the_harness_and_the_backend_protocol():
    """Every h.backend.<member> (and h.backend.cluster.<member>) a check uses is declared in the protocols,
    and no check module imports a backend's module (fixtures/backends, the node, the cluster providers)."""
    from dpconform.fixtures.backends.base import ClusterView
    root = pathlib.Path(backends.__file__).parents[2] / "conformance"
    declared = set(dir(Backend)) | set(Backend.__annotations__)
    cluster = set(dir(ClusterView)) | set(ClusterView.__annotations__)
    for path in sorted(root.glob("*.py")):
        code = path.read_text()
        for member, sub in re.findall(r"\bh\.backend\.([a-z_]+)(?:\.([a-z_]+))?", code):
            assert member in declared, f"{path.name}: h.backend.{member} is not in the Backend protocol"
            if member == "cluster" and sub:
                assert sub in cluster, f"{path.name}: h.backend.cluster.{sub} is not in the ClusterView protocol"
        bad = re.findall(r"from dpconform\.fixtures\.(backends|node|cluster\.(?:local|kind|foreign|controlplane|daemonset\w*)|"
                         r"dra\.sides)\b", code)
        assert not bad, f"{path.name} imports a backend's module: {bad}"


def test_unknown_backend_is_one_line():
    with pytest.raises(ValueError, match="--backend 'nope' is not one of emulator, node"):
        SuiteConfig(backend="nope").validate()


# -- root causes, not cascades -----------------------------------------------------------------------
def test_rejected_registration_is_one_failure_and_the_rest_blocked():
    report, out = run_suite(["--defect", "wrong-version"])
    got = outcomes(report)
    assert got["REG-02"] == "failed", out
    blocked = {c["id"] for c in report["checks"] if c["outcome"] == "blocked"}
    assert all(c["blocked_by"] == "REG-02" for c in report["checks"] if c["outcome"] == "blocked")
    assert {"ALC-01", "LAW-01", "KRS-01", "POD-01"} <= blocked, got
    assert not {c for c, o in got.items() if o in ("failed", "error")} - {"REG-02"}, got
    assert "ROOT CAUSE REG-02" in out


def test_a_crash_gets_the_next_check_a_fresh_plugin():
    report, out = run_suite(["--defect", "crash-on-unknown-id"], checks=["ALC-04", "ALC-01", "LAW-02"], extra=["-p", "no:randomly", "-n", "0"])
    got = outcomes(report)
    assert got["ALC-04"] == "failed" and got["ALC-01"] == "passed" and got["LAW-02"] == "passed", got
    assert any("fresh one" in n and "ALC_04" in n for n in report["notes"]), report["notes"]
