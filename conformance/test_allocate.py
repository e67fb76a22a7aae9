"""ALC – Allocate (K16-K21). The suite calls the plugin's Allocate directly, as the kubelet does."""
import concurrent.futures
import statistics
import time

import grpc
import pytest

from dpconform.fixtures.checks import check, expect, fail, measured
from dpconform.fixtures.responses import describe, ids_referenced, malformed
from dpconform.fixtures.root_causes import Rule, declare
from dpconform.kubeletapi import constants

ROOT_CAUSES = declare(
    Rule("ALC-01", "no-container-responses"),
    Rule("ALC-01", "admission-refused", "Allocate answers no container responses",
         r"no containers return in allocation response", owners=("ALC-01", "POD-01")),
)


def _alloc_ok(h, *id_lists):
    try:
        return h.allocate(*id_lists)
    except grpc.RpcError as exc:
        fail(f"Allocate({list(id_lists)}) to succeed", f"{exc.code().name}: {exc.details()}",
             "allocate any advertised healthy device")


def _own_ids_only(h, requested, resp) -> str | None:
    """None if the response names only requested devices (or none at all); else what it names."""
    named = ids_referenced(resp, h.devices())
    if named and named != set(requested):
        return f"asked for {sorted(requested)}, response names {sorted(named)}"
    return None


@check("ALC-01", spec="K17, K19")
def test_ALC_01_one_response_per_request(harness):
    """ALC-01: one device -> exactly one ContainerAllocateResponse (zero fails admission on the kubelet)."""
    dev = harness.healthy_ids()[0]
    resp = _alloc_ok(harness, [dev])
    n = len(resp.container_responses)
    expect(n == 1, "1 container response", f"{n}", "return one ContainerAllocateResponse per ContainerAllocateRequest")


@check("ALC-02", spec="K17")
def test_ALC_02_several_requests_in_order(harness):
    """ALC-02: several ContainerAllocateRequests in one call get as many responses, in order."""
    ids = harness.healthy_ids()
    reqs = [[i] for i in ids[:3]]
    if len(reqs) < 2:
        pytest.skip("needs at least 2 healthy devices")
    resp = _alloc_ok(harness, *reqs)
    n = len(resp.container_responses)
    expect(n == len(reqs), f"{len(reqs)} container responses", f"{n}",
           "answer every ContainerAllocateRequest, in the order given")
    for req, cresp in zip(reqs, resp.container_responses):
        wrong = _own_ids_only(harness, req, cresp)
        expect(wrong is None, "response i for request i", wrong or "", "keep responses in request order")


@check("ALC-03")
def test_ALC_03_all_devices_at_once(harness):
    """ALC-03: all advertised healthy devices in one request succeed."""
    ids = harness.healthy_ids()
    resp = _alloc_ok(harness, ids)
    expect(len(resp.container_responses) == 1, "1 container response", f"{len(resp.container_responses)}",
           "return one response per container request")


@check("ALC-04")
def test_ALC_04_unknown_id(harness):
    """ALC-04: an unknown device ID gets a gRPC error and the plugin keeps serving."""
    unknown = "dpconform-no-such-device"
    try:
        resp = harness.allocate([unknown])
    except grpc.RpcError as exc:
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and not harness.plugin.running:
            fail("an error for an unknown ID", f"the plugin died (exit {harness.plugin.returncode})",
                 "validate IDs and return an error instead of crashing")
    else:
        fail(f"a gRPC error for unknown ID {unknown!r}", f"success: {describe(resp)}",
             "reject IDs you did not advertise (the kubelet passes your answer to the runtime unchecked)")
    expect(harness.plugin.running and harness.answers(), "the plugin still serving", "it stopped answering",
           "never exit or hang on bad input")


@check("ALC-05", spec="K21")
def test_ALC_05_well_formed(harness):
    """ALC-05: env names, absolute paths, existing host device nodes, rwm permissions, CDI names, annotation keys."""
    ids = harness.healthy_ids()
    for req in ([ids[0]], ids):
        resp = _alloc_ok(harness, req)
        for cresp in resp.container_responses:
            problems = malformed(cresp, path_exists=harness.backend.host_path_exists)
            expect(not problems, "a well-formed ContainerAllocateResponse", "; ".join(problems),
                   "fix the listed fields: the runtime rejects or misapplies them")


@check("ALC-06", "advisory")
def test_ALC_06_deterministic(harness):
    """ALC-06: the same IDs give the same response."""
    dev = harness.healthy_ids()[:1]
    a, b = _alloc_ok(harness, dev), _alloc_ok(harness, dev)
    expect(a == b, "identical responses for identical requests", f"{describe(a)} vs {describe(b)}",
           "build the response from the IDs only")


@check("ALC-07")
def test_ALC_07_concurrent(harness, suite_config):
    """ALC-07: concurrent Allocate calls all succeed and each answer matches its own request."""
    ids = harness.healthy_ids()
    n = suite_config.thresholds.concurrent_allocs
    reqs = [[ids[i % len(ids)]] for i in range(n)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(harness.allocate, r) for r in reqs]
        results = []
        for req, fut in zip(reqs, futures):
            try:
                results.append((req, fut.result()))
            except grpc.RpcError as exc:
                fail(f"{n} concurrent Allocate calls to succeed", f"{exc.code().name}: {exc.details()}",
                     "make Allocate safe to call concurrently")
    for req, resp in results:
        wrong = _own_ids_only(harness, req, resp.container_responses[0]) if resp.container_responses else "no response"
        expect(wrong is None, "each concurrent answer for its own request", wrong or "",
               "do not share mutable response state between calls")


@check("ALC-08", spec="K16")
def test_ALC_08_latency(harness, suite_config):
    """ALC-08: Allocate p99 under the limit over sequential calls (the kubelet waits forever; the node waits with it)."""
    th = suite_config.thresholds
    ids = harness.healthy_ids()
    # a p99 over the limit with a median under it is measured again before it is a verdict: a loaded host's
    # stalls (a CI runner, the suite's own parallel runs) land on a few calls of one measurement, a slow
    # plugin on both (and one slow on most calls has its median over the limit: no second measurement)
    got = []
    for _ in range(ALC_08_MEASUREMENTS):
        p50, p99 = _allocate_latency(harness, ids, th.alloc_calls)
        got.append(f"p50 {p50:.2f} ms, p99 {p99:.2f} ms")
        if p99 < th.alloc_p99_ms or p50 >= th.alloc_p99_ms:
            break
    measured("allocate_p50_ms", p50)
    measured("allocate_p99_ms", p99)
    measured("allocate_calls", th.alloc_calls)
    if p99 < th.alloc_p99_ms:
        return
    fail(f"p99 < {th.alloc_p99_ms:g} ms over {th.alloc_calls} calls", "; then ".join(got),
         "keep Allocate fast: do slow work at startup or in PreStartContainer")


ALC_08_MEASUREMENTS = 3   # make test on 4 workers saw host stalls land on two measurements in a row


def _allocate_latency(harness, ids: list[str], calls: int) -> tuple[float, float]:
    """(p50, p99) in ms of `calls` sequential Allocate calls. p99 as numpy's default (linear between the
    ranks): of 100 calls, one outlier does not decide it; the sorted list's top element would be the max."""
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        _alloc_ok(harness, [ids[i % len(ids)]])
        times.append((time.perf_counter() - t0) * 1000)
    p99 = statistics.quantiles(times, n=100, method="inclusive")[98] if len(times) > 1 else times[0]
    return statistics.median(times), p99


@check("ALC-09", "advisory", spec="K12")
def test_ALC_09_unhealthy_rejected(harness, suite_config):
    """ALC-09: allocating a device while it is Unhealthy gets an error. Advisory: the kubelet allocates from
    its healthy devices only (devicemanager's devicesToAllocate), so it asks for an Unhealthy one only when an
    app container reuses its init container's device; NVIDIA's device plugin accepts, as most do."""
    if not harness.health_hook:
        pytest.skip("needs --health-hook 'CMD {device} {health}' to flip a device's health")
    t = suite_config.thresholds.health_timeout
    dev = harness.healthy_ids()[0]
    harness.set_health(dev, constants.UNHEALTHY)
    harness.wait_health(dev, constants.UNHEALTHY, t)
    try:
        resp = harness.allocate([dev])
    except grpc.RpcError:
        return
    fail(f"an error allocating Unhealthy {dev}", f"success: {describe(resp)}",
         "refuse to allocate devices you report Unhealthy (the kubelet asks for one only when an app container "
         "reuses its init container's device)")
