"""TOP – topology manager alignment with the plugin's advertised NUMA topology (K27-K29)."""
import pytest

from dpconform.fixtures.checks import check, expect, needs
from dpconform.fixtures.kubelet import Container, Pod
from dpconform.fixtures.responses import ids_referenced, numa_nodes
from dpconform.kubeletapi import constants


def topology_harness(make_harness, policy):
    h = make_harness(topology_policy=policy)
    h.start()
    devs = h.wait_devices()
    by_node: dict[int, list[str]] = {}
    for i, d in devs.items():
        for n in numa_nodes(d):
            by_node.setdefault(n, []).append(i)
    if not by_node:
        pytest.skip("no device reports NUMA topology")
    if len(by_node) < 2:
        pytest.skip("all devices are on one NUMA node")
    return h, devs, by_node


def nodes_of(devs, ids):
    return set().union(*(numa_nodes(devs[i]) for i in ids)) if ids else set()


def given_ids(h, result, name="c"):
    """The devices the container really gets: those its Allocate answer names (else the kubelet's choice)."""
    chosen = result.containers[name].devices[h.resource]
    named = set()
    for rec in h.backend.rpc_log():
        if rec.name == "Allocate" and rec.response is not None and rec.error is None:
            for creq, cresp in zip(rec.request.container_requests, rec.response.container_responses):
                if set(creq.devices_ids) == set(chosen):
                    named = ids_referenced(cresp, h.devices())
    return set(chosen), named


@check("TOP-01", spec="K27, K28")
def test_TOP_01_single_numa_fits(make_harness, suite_config):
    """TOP-01: single-numa-node: a request that fits one NUMA node is admitted on one node."""
    needs(suite_config, "topology-policy")
    needs(suite_config, "rpc-log")
    h, devs, by_node = topology_harness(make_harness, suite_config.topology_policy)
    # occupy one device on the smallest node so the kubelet has to choose another node
    first = min(by_node, key=lambda n: (len(by_node[n]), n))
    h.admit(Pod("top-01-filler", containers=[Container("c", limits={h.resource: 1})]))
    size = max(len(v) for v in by_node.values()) - (1 if len(by_node[first]) == max(map(len, by_node.values())) else 0)
    size = max(1, size)
    res = h.admit(Pod("top-01", containers=[Container("c", limits={h.resource: size})]))
    expect(res.admitted, f"a pod asking for {size} admitted under {suite_config.topology_policy}",
           f"{res.reason}: {res.message}", "report each device's NUMA node correctly")
    chosen, named = given_ids(h, res)
    expect(len(nodes_of(devs, chosen)) == 1, f"{size} devices on one NUMA node", f"{sorted(chosen)}",
           "report each device's NUMA node correctly")
    expect(not named or named == chosen, f"the container to get the allocated devices {sorted(chosen)}",
           f"Allocate's answer names {sorted(named)}", "return artifacts for exactly the requested device IDs")


@check("TOP-02", spec="K29")
def test_TOP_02_single_numa_rejects(make_harness, suite_config):
    """TOP-02: single-numa-node (or restricted): a request no single NUMA node can hold is rejected with
    TopologyAffinityError."""
    needs(suite_config, "topology-policy")
    policy = suite_config.topology_policy
    if policy not in ("single-numa-node", "restricted"):
        pytest.skip(f"--topology-policy {policy} admits requests no NUMA node can hold; "
                    "TOP-02 needs single-numa-node or restricted")
    h, devs, by_node = topology_harness(make_harness, policy)
    if h.health_hook:  # topology must survive health updates too
        dev = h.healthy_ids()[0]
        h.set_health(dev, constants.UNHEALTHY)
        h.wait_health(dev, constants.UNHEALTHY)
        h.set_health(dev, constants.HEALTHY)
        h.wait_health(dev, constants.HEALTHY)
        lost = [i for i, d in h.devices().items() if i in devs and numa_nodes(devs[i]) and not numa_nodes(d)]
        expect(not lost, "topology kept in every snapshot", f"devices lost their NUMA node: {lost}",
               "send the full Device, topology included, in every snapshot")
    size = max(len(v) for v in by_node.values()) + 1
    if size > len(h.healthy_ids()):
        pytest.skip("not enough devices for a request larger than one NUMA node")
    res = h.admit(Pod("top-02", containers=[Container("c", limits={h.resource: size})]))
    expect(not res.admitted and res.reason == "TopologyAffinityError",
           f"a pod asking for {size} rejected with TopologyAffinityError under {policy}",
           f"admitted={res.admitted} {res.reason}: {res.message}", "report each device's NUMA node correctly")


@check("TOP-03", "advisory", spec="K28")
def test_TOP_03_best_effort(make_harness, suite_config):
    """TOP-03: best-effort: admitted, and aligned when possible."""
    needs(suite_config, "topology-policy")
    needs(suite_config, "rpc-log")
    h, devs, by_node = topology_harness(make_harness, "best-effort")
    size = max(len(v) for v in by_node.values())
    res = h.admit(Pod("top-03", containers=[Container("c", limits={h.resource: size})]))
    expect(res.admitted, "admitted", f"{res.reason}: {res.message}", "best-effort admits every pod the node has devices for")
    chosen, _ = given_ids(h, res)
    expect(len(nodes_of(devs, chosen)) == 1, "aligned on one NUMA node", f"{sorted(chosen)}",
           "prefer NUMA-local devices in GetPreferredAllocation")
