"""A pod the kubelet's topology manager refuses although enough free healthy devices could serve it
(fixtures/admission_causes.py topology_refusal): not the running check's rule. Found on kind with
kind-configs/single-numa-node.yaml: the fake GPU names NUMA node 1 on a one-node host, and CLU-05 and PRS-03
failed telling the vendor to fix Allocate and device IDs. Now blocked by LAW-04 where the devices name NUMA
nodes the host lacks, else skipped; a pod asking for more than is free is the check's to judge (POD-02), and
the TOP checks judge every topology refusal themselves. The emulator's topology manager refuses as the
kubelet's does (TOP-01/02 prove it), with a single-numa-node policy."""
from __future__ import annotations

import pytest
from _pytest.outcomes import Skipped

from dpconform.fixtures.config import SuiteConfig
from dpconform.fixtures.harness import Harness
from dpconform.fixtures.kubelet.records import Container, Pod
from dpconform.fixtures.outcomes import Blocked


@pytest.fixture
def h():
    h = Harness(SuiteConfig(), topology_policy="single-numa-node")   # the fake GPU: 4 devices, 2 per NUMA node
    try:
        h.start()
        h.wait_devices()
        yield h
    finally:
        h.close()


def pod(h, n: int, name: str = "p") -> Pod:
    return Pod(name, containers=[Container("c", limits={h.resource: n})])


def test_an_unalignable_pod_skips_a_check_that_needs_it_admitted(h):
    h.memory.current_check = "CLU-05"
    with pytest.raises(Skipped, match=r"topology manager refused a pod asking for 3 of 4 free healthy devices "
                                      r"\(TopologyAffinityError.*topologyManagerPolicy none or best-effort"):
        h.admit(pod(h, 3))


def test_devices_on_numa_nodes_the_host_lacks_block_by_law_04(h, monkeypatch):
    h.memory.current_check = "PRS-03"
    monkeypatch.setattr(h.backend, "host_numa_nodes", lambda: {0})
    with pytest.raises(Blocked, match=r"blocked by LAW-04: .*asking for 3 of 4 .*NUMA nodes this host lacks "
                                      r"\(it has \[0\]\): \{'fakegpu-2': \[1\], 'fakegpu-3': \[1\]\}"):
        h.admit(pod(h, 3))


def test_more_than_is_free_and_the_topology_checks_refusals_are_theirs(h):
    h.memory.current_check = "TOP-02"                 # judges the topology manager's refusals itself
    res = h.admit(pod(h, 3, "top"))
    assert not res.admitted and res.reason == "TopologyAffinityError", res
    h.memory.current_check = "POD-02"
    res = h.admit(pod(h, 5, "too-many"))
    assert not res.admitted and res.reason == "TopologyAffinityError", res
    assert h.admit(pod(h, 2, "holds-2")).admitted     # two held: three more is more than is free
    h.memory.current_check = "CLU-05"
    assert h.admit(pod(h, 3, "three-of-two")).reason == "TopologyAffinityError"
