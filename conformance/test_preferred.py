"""PRF – GetPreferredAllocation (K18). The kubelet fixes bad answers silently, so the suite must check them."""
import datetime

import grpc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dpconform.fixtures.checks import check, expect, fail
from dpconform.fixtures.responses import numa_nodes


@pytest.fixture
def prf(harness):
    if not harness.options.get_preferred_allocation_available:
        pytest.skip("plugin does not advertise get_preferred_allocation_available")
    ids = harness.healthy_ids()
    if not ids:
        pytest.skip("no healthy devices")
    return harness, ids


def sizes(n: int) -> list[int]:
    """Request sizes worth asking for out of n devices: every size up to 4, then powers of two and the
    last two (a sample, so the checks take the same time for 4 devices or 4096)."""
    picks = {1, 2, 3, 4, n // 2, n - 1, n} | {2 ** k for k in range(n.bit_length())}
    return sorted(s for s in picks if 1 <= s <= n)


def cases(ids):
    """Representative requests: (available, must_include, size)."""
    out = [(ids, [], size) for size in sizes(len(ids))]
    out += [(ids, [ids[-1]], min(2, len(ids))), (ids[1:] or ids, [], 1), (ids, ids[:1], len(ids))]
    return out


def violations(available, must, size, answer) -> list[str]:
    """PRF-01..04 broken by one answer."""
    got = list(answer)
    problems = []
    if not set(got) <= set(available):
        problems.append(f"PRF-01: {sorted(set(got) - set(available))} not in available_deviceIDs")
    if len(got) != size:
        problems.append(f"PRF-02: size {len(got)} != allocation_size {size}")
    if not set(must) <= set(got):
        problems.append(f"PRF-03: must_include {sorted(set(must) - set(got))} missing")
    if len(set(got)) != len(got):
        problems.append("PRF-04: duplicate IDs")
    return problems


def ask(h, available, must, size):
    try:
        return list(h.preferred(available, must, size).container_responses[0].deviceIDs)
    except grpc.RpcError as exc:
        fail(f"an answer for available={available} must={must} size={size}", f"{exc.code().name}: {exc.details()}",
             "answer every satisfiable GetPreferredAllocation request")
    except IndexError:
        fail("one ContainerPreferredAllocationResponse per request", "none", "answer each container request")


def _check_rule(prf, rule):
    h, ids = prf
    for available, must, size in cases(ids):
        got = ask(h, available, must, size)
        bad = [p for p in violations(available, must, size, got) if p.startswith(rule)]
        expect(not bad, f"{rule} for available={available} must={must} size={size}", f"{got}: {bad}",
               "return exactly allocation_size distinct IDs from available_deviceIDs including every must_include ID")


@check("PRF-01", spec="K18")
def test_PRF_01_subset(prf):
    """PRF-01: the result is a subset of available_deviceIDs."""
    _check_rule(prf, "PRF-01")


@check("PRF-02", spec="K18")
def test_PRF_02_size(prf):
    """PRF-02: the result has exactly allocation_size IDs."""
    _check_rule(prf, "PRF-02")


@check("PRF-03", spec="K18")
def test_PRF_03_must_include(prf):
    """PRF-03: the result contains every must_include_deviceID."""
    _check_rule(prf, "PRF-03")


@check("PRF-04", spec="K18")
def test_PRF_04_no_duplicates(prf):
    """PRF-04: no duplicate IDs in the result."""
    _check_rule(prf, "PRF-04")


@check("PRF-05", "advisory", spec="K27")
def test_PRF_05_numa_packing(prf):
    """PRF-05: when one NUMA node can hold the request, the result lies on one NUMA node."""
    h, ids = prf
    devs = h.devices()
    by_node: dict[int, list[str]] = {}
    for i in ids:
        for n in numa_nodes(devs[i]):
            by_node.setdefault(n, []).append(i)
    if len(by_node) < 2:
        pytest.skip("needs devices on at least 2 NUMA nodes")
    size = max(len(v) for v in by_node.values())
    got = ask(h, ids, [], size)
    nodes = set().union(*(numa_nodes(devs[i]) for i in got if i in devs))
    expect(len(nodes) == 1, f"{size} devices on one NUMA node", f"{got} on nodes {sorted(nodes)}",
           "prefer devices that share a NUMA node")


@check("PRF-06", spec="K18")
def test_PRF_06_generated(prf, suite_config):
    """PRF-06: PRF-01..04 hold over generated inputs (hypothesis; the failing case is shrunk and printed)."""
    h, ids = prf

    @st.composite
    def requests(draw):
        available = draw(st.lists(st.sampled_from(ids), min_size=1, unique=True))
        must = draw(st.lists(st.sampled_from(available), unique=True))
        size = draw(st.integers(min_value=max(1, len(must)), max_value=len(available)))
        return available, must, size

    # fixed cases first, every run (random draws alone may miss a rule at small example counts): a
    # must_include the natural choice would not contain, the whole set, a single device
    @settings(max_examples=suite_config.thresholds.hypothesis_examples, deadline=datetime.timedelta(seconds=5),
              suppress_health_check=list(HealthCheck), database=None)
    @given(requests())
    @example((list(ids), [ids[-1]], 1))
    @example((list(ids), [ids[-1]], min(2, len(ids))))
    @example((list(ids), [], len(ids)))
    @example((ids[:1], [], 1))
    def prop(req):
        available, must, size = req
        got = ask(h, available, must, size)
        bad = violations(available, must, size, got)
        expect(not bad, "a subset of available, of the requested size, with must_include, no duplicates",
               f"available={available} must={must} size={size} -> {got}: {bad}",
               "answer from available_deviceIDs only, exactly allocation_size IDs, must_include_deviceIDs first")

    prop()


@check("PRF-07", spec="K18")
def test_PRF_07_impossible_request(prf):
    """PRF-07: allocation_size > available gets an error or a best effort, never a crash."""
    h, ids = prf
    try:
        h.preferred(ids[:1], [], len(ids) + 1)
    except grpc.RpcError:
        pass
    expect(h.plugin.running and h.answers(), "the plugin still serving after an impossible request",
           f"it stopped (exit {h.plugin.returncode})", "return an error or a best effort for impossible sizes")
