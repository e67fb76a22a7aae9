"""Kubelet emulator: topology manager hints, policies and scopes (docs/kubelet-behaviours.md K18.3-4, K27-K29)."""
from __future__ import annotations

import shutil
import tempfile

import pytest

from dpconform.fixtures.kubelet import Container, KubeletEmulator, Pod
from dpconform.fixtures.kubelet import topology as topo
from dpconform.fixtures.kubelet.fakeplugin import FakePlugin, dev
from dpconform.kubeletapi import dp

RES = "example.com/gpu"
MSG = "Resources cannot be allocated with Topology locality"


@pytest.fixture
def setup():
    made = []

    def make(policy, scope="container", devices=None, **opts):
        d = tempfile.mkdtemp(dir="/tmp", prefix="emu")
        emu = KubeletEmulator(d, topology_policy=policy, topology_scope=scope, numa_nodes=[0, 1]).start()
        devices = devices if devices is not None else [dev("d0", numa=0), dev("d1", numa=0),
                                                       dev("d2", numa=1), dev("d3", numa=1)]
        p = FakePlugin(emu.plugin_dir, RES, devices, dp.DevicePluginOptions(**opts)).start()
        made.append((emu, p, d))
        assert p.register() is None
        emu.wait_until(lambda: emu.capacity(RES) == len(devices), 5)
        return emu, p
    yield make
    for emu, p, d in made:
        p.stop()
        emu.stop()
        shutil.rmtree(d, ignore_errors=True)


def pod(name, *counts):
    return Pod(name, [Container(f"c{i}", {RES: n}) for i, n in enumerate(counts)])


def devs(r, c="c0"):
    return r.containers[c].devices[RES]


def test_k27_hint_generation():
    all_devs = {"d0": dev("d0", numa=0), "d1": dev("d1", numa=0), "d2": dev("d2", numa=1), "d3": dev("d3", numa=1)}
    hints = topo.generate_device_hints([0, 1], all_devs, set(all_devs), set(), 2)
    assert hints == [topo.TopologyHint(0b01, True), topo.TopologyHint(0b10, True), topo.TopologyHint(0b11, False)]
    hints = topo.generate_device_hints([0, 1], all_devs, {"d1", "d3"}, set(), 2)
    assert hints == [topo.TopologyHint(0b11, False)]        # min affinity counts all devices, not free ones
    hints = topo.generate_device_hints([0, 1], all_devs, set(all_devs), set(), 3)
    assert hints == [topo.TopologyHint(0b11, True)]


def test_k28_none_policy_ignores_numa(setup):
    emu, _ = setup("none")
    assert devs(emu.admit(pod("a", 1))) == ["d0"]
    assert devs(emu.admit(pod("b", 2))) == ["d1", "d2"]
    assert emu.metrics.sample("kubelet_topology_manager_admission_requests_total") == 2


def test_k28_best_effort_aligns_and_admits_unaligned(setup):
    emu, _ = setup("best-effort")
    a = emu.admit(pod("a", 1))
    assert devs(a) == ["d0"]
    assert devs(emu.admit(pod("b", 2))) == ["d2", "d3"]      # aligned on NUMA 1, not d1+d2
    c = emu.admit(pod("c", 1))
    assert devs(c) == ["d1"]
    emu.remove(c.pod_uid)
    emu.remove(emu.pods()[1].uid)                            # free d2, d3 -> free: d1, d2, d3
    assert emu.remove(a.pod_uid)
    r = emu.admit(pod("d", 3))
    assert r.admitted and len(devs(r)) == 3


def _split_free(emu):
    """Leave d1 (NUMA 0) and d3 (NUMA 1) free."""
    a = emu.admit(pod("a", 1))
    b = emu.admit(pod("b", 1))
    c = emu.admit(pod("c", 1))
    assert (devs(a), devs(b), devs(c)) == (["d0"], ["d1"], ["d2"])
    emu.remove(b.pod_uid)


def test_k28_restricted_rejects_non_preferred(setup):
    emu, _ = setup("restricted")
    _split_free(emu)
    r = emu.admit(pod("x", 2))
    assert (r.admitted, r.reason, r.message) == (False, "TopologyAffinityError", MSG)
    assert emu.metrics.sample("kubelet_topology_manager_admission_errors_total") == 1
    assert emu.rpcs("Allocate")[-1].request.container_requests[0].devices_ids == ["d2"]   # no Allocate for x


def test_k28_best_effort_admits_what_restricted_rejects(setup):
    emu, _ = setup("best-effort")
    _split_free(emu)
    r = emu.admit(pod("x", 2))
    assert r.admitted and devs(r) == ["d1", "d3"]


def test_k28_restricted_admits_preferred_multi_numa(setup):
    emu, _ = setup("restricted")
    r = emu.admit(pod("x", 3))
    assert r.admitted and len(devs(r)) == 3


def test_k28_single_numa_node(setup):
    emu, _ = setup("single-numa-node")
    r = emu.admit(pod("a", 2))
    assert devs(r) == ["d0", "d1"]
    r = emu.admit(pod("b", 3))
    assert (r.admitted, r.reason, r.message) == (False, "TopologyAffinityError", MSG)


def test_k28_single_numa_node_device_without_topology_is_dont_care(setup):
    emu, _ = setup("single-numa-node", devices=[dev("a"), dev("b"), dev("c")])
    assert emu.admit(pod("a", 3)).admitted


def test_k28_unsatisfiable_best_effort_falls_to_device_manager_error(setup):
    emu, _ = setup("best-effort")
    r = emu.admit(pod("a", 5))
    assert r.reason == "UnexpectedAdmissionError" and "requested number of devices unavailable" in r.message


def test_k28_pod_scope_vs_container_scope(setup):
    emu, _ = setup("single-numa-node", scope="container")
    r = emu.admit(pod("a", 1, 2))
    assert r.admitted and devs(r, "c0") == ["d0"] and devs(r, "c1") == ["d2", "d3"]
    emu2, _ = setup("single-numa-node", scope="pod")
    r = emu2.admit(pod("a", 1, 2))
    assert (r.admitted, r.reason) == (False, "TopologyAffinityError")
    r = emu2.admit(pod("b", 1, 1))
    assert r.admitted and sorted(devs(r, "c0") + devs(r, "c1")) == ["d0", "d1"]


def test_k18_hint_split_then_preferred_within_aligned(setup):
    emu, p = setup("best-effort", get_preferred_allocation_available=True)
    p.preferred = lambda req: dp.PreferredAllocationResponse(container_responses=[
        dp.ContainerPreferredAllocationResponse(deviceIDs=["d1", "d2"])])
    r = emu.admit(pod("a", 1))
    req = emu.rpcs("GetPreferredAllocation")[0].request.container_requests[0]
    assert sorted(req.available_deviceIDs) == ["d0", "d1"] and req.allocation_size == 1
    assert devs(r) == ["d1"]                                # answer intersected with the aligned set


def test_k18_preferred_over_whole_set_after_aligned(setup):
    """Fewer aligned devices than needed: take all aligned, then ask over the whole available set
    with the aligned ones as must_include (K18.4)."""
    emu, p = setup("best-effort", devices=[dev("d0", numa=0), dev("d1", numa=0), dev("n0"), dev("n1")],
                   get_preferred_allocation_available=True)
    p.preferred = lambda req: dp.PreferredAllocationResponse(container_responses=[
        dp.ContainerPreferredAllocationResponse(deviceIDs=["n1", "d0", "d1"])])
    r = emu.admit(pod("b", 3))
    (call,) = [c.request.container_requests[0] for c in emu.rpcs("GetPreferredAllocation")]
    assert call.allocation_size == 3
    assert sorted(call.must_include_deviceIDs) == ["d0", "d1"]
    assert sorted(call.available_deviceIDs) == ["d0", "d1", "n0", "n1"]
    assert devs(r) == ["d0", "d1", "n1"]
