"""DRA – Dynamic Resource Allocation drivers (kubelet plugins): registration, ResourceSlices, prepare and
unprepare, restarts, health (K39-K47). Run with `--dra`; the driver is a black box started by --plugin-cmd."""
from __future__ import annotations

import re
import threading

import grpc
import pytest

from dpconform.fixtures.checks import check, expect, fail, needs, needs_release
from dpconform.fixtures.dra import claims as claimlib
from dpconform.fixtures.dra.environment import (DEFAULT_EXTENDED_RESOURCE, probe_service, refused_for_versions,
                                                serves_health)
from dpconform.fixtures.kubelet.dra import DraError
from dpconform.fixtures.outcomes import Blocked
from dpconform.fixtures.kubelet.goerr import rpc_error_text
from dpconform.fixtures.kubelet.pluginwatcher import DRA_HEALTH_SERVICES, DRA_PLUGIN_TYPE, DRA_SERVICES
from dpconform.fixtures.waiting import wait_until

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
CDI_ID = re.compile(r"^([^/=]+/[^/=]+)=(.+)$")


def _answer(resp, claim) -> tuple[list[tuple], str]:
    """(sorted (pool, device, request names, CDI IDs) of the claim's answer, its error)."""
    r = resp.claims.get(claim.metadata.uid)
    if r is None:
        return [], "(no answer for this claim)"
    return sorted((d.pool_name, d.device_name, tuple(sorted(d.request_names)), tuple(d.cdi_device_ids))
                  for d in r.devices), r.error


def _prepared(dra, cs: list) -> object:
    """NodePrepareResources for the claims, each expected to succeed (a failure of the call or of a claim
    fails the check with the driver's text)."""
    try:
        resp = dra.prepare(cs)
    except grpc.RpcError as e:
        fail(f"NodePrepareResources for {len(cs)} allocated claim(s) to succeed", rpc_error_text(e),
             "prepare every claim whose allocation names your devices; report a problem per claim (error field)")
    for c in cs:
        _, err = _answer(resp, c)
        expect(not err, f"claim {c.metadata.name} prepared", f"error: {err}",
               "an allocated claim naming your node's devices must prepare")
    return resp


def _unprepared(dra, cs: list, what: str) -> None:
    """NodeUnprepareResources for the claims, expected to succeed for each."""
    fix = "unprepare each claim you prepared and answer each by its UID"
    try:
        r = dra.unprepare(cs)
    except grpc.RpcError as e:
        fail(f"NodeUnprepareResources of {what} to succeed", rpc_error_text(e), fix)
    for c in cs:
        res = r.claims.get(c.metadata.uid)
        expect(res is not None and not res.error, f"{what} unprepared",
               "no answer for it" if res is None else f"error: {res.error}", fix)


# ---------------------------------------------------------------- registration
@check("DRA-01", spec="K39")
def test_DRA_01_registers(dra):
    """DRA-01: the driver registers: its socket in plugins_registry answers GetInfo with type DRAPlugin and the kubelet accepts it – else the kubelet never calls it."""
    reg = dra.first
    fix = ("serve pluginregistration.Registration on <plugins_registry>/<driver>-reg.sock after the DRA endpoint "
           "serves (k8s.io/dynamic-resource-allocation/kubeletplugin does both)")
    expect(reg is not None, f"a registration socket in {dra.registry_dir} within {dra.t.register_timeout:g}s",
           "none appeared", fix)
    expect(reg.info is not None, "GetInfo to answer within 1 s", reg.error or "", fix)
    expect(reg.info.type == DRA_PLUGIN_TYPE, f'GetInfo type "{DRA_PLUGIN_TYPE}"', f'"{reg.info.type}": {reg.error}',
           f'answer type "{DRA_PLUGIN_TYPE}" (the kubelet has no other handler for a DRA driver)')
    if reg.notify_error is not None and not reg.registered:   # from 1.36 a failed notification undoes it: DRA-05
        raise Blocked("DRA-05", reg.error or reg.notify_error)
    if not reg.registered and not refused_for_versions(reg):          # refused for its versions: DRA-04
        fail("the kubelet to accept the registration", reg.error or "refused", fix)


@check("DRA-02", spec="K39, K41")
def test_DRA_02_name(dra):
    """DRA-02: GetInfo names the driver as its ResourceSlices do, a DNS subdomain – the kubelet finds the driver of a claim by that name."""
    name = dra.require_info().info.name
    expect(DNS_SUBDOMAIN.match(name) and len(name) <= 253, "a DNS subdomain (lower case, digits, '-', '.')",
           repr(name), "name the driver like a domain you own, e.g. gpu.example.com")
    dra.wait_slices()
    drivers = sorted({s.spec.driver for s in dra.slices(any_driver=True)})
    if not drivers:
        dra.devices(1)                      # blocked by DRA-06
    expect(drivers == [name], f"the node's ResourceSlices to name driver {name!r}", f"{drivers}",
           "use one name in GetInfo and in spec.driver of your ResourceSlices")


@check("DRA-03", spec="K39")
def test_DRA_03_serves_before_registering(dra):
    """DRA-03: the DRA endpoint GetInfo names accepts connections when GetInfo answers – the kubelet may call it at once."""
    reg = dra.require_info()
    expect(reg.endpoint_serving, f"{reg.endpoint} to accept connections when GetInfo returned",
           "it did not", "start the DRA gRPC server before creating the registration socket")


@check("DRA-04", spec="K40")
def test_DRA_04_versions(dra):
    """DRA-04: supported_versions lists a DRA service the kubelet speaks, and every listed one answers – the kubelet calls the first it knows."""
    reg = dra.require_info()
    offered = list(reg.info.supported_versions)
    known = [s for s in offered if s in DRA_SERVICES]
    expect(known, f"one of {list(DRA_SERVICES)} in supported_versions", f"{offered} ({reg.error or 'refused'})",
           'list "v1.DRAPlugin" (what the supported kubelets call) and "v1beta1.DRAPlugin" (older ones) and serve both')
    broken = {s: p for s in known if (p := probe_service(reg.endpoint, s, dra.t.rpc_timeout))}
    expect(not broken, f"each listed service ({known}) to answer NodePrepareResources",
           "; ".join(f"{s}: {p}" for s, p in broken.items()), "serve every service you list, or list only those you serve")


@check("DRA-05", spec="K39")
def test_DRA_05_notify(dra):
    """DRA-05: NotifyRegistrationStatus is answered – the kubelet treats a failed notification as a failed registration (from 1.36 it undoes the registration and retries it, so the driver is never called; before, it stayed registered)."""
    reg = dra.require_info()
    expect(reg.notified is not None, "the kubelet to have sent NotifyRegistrationStatus", "it did not", "(suite bug)")
    expect(reg.notify_error is None, "NotifyRegistrationStatus to return OK", reg.notify_error or "",
           "answer NotifyRegistrationStatus with an empty RegistrationStatusResponse; log a refusal, do not fail")


# ---------------------------------------------------------------- ResourceSlices
@check("DRA-06", spec="K41")
def test_DRA_06_slices_valid(dra):
    """DRA-06: the driver publishes valid ResourceSlices for its node: unique DNS-label device names per pool, complete pools – the scheduler allocates only from them."""
    slices = dra.wait_slices()
    expect(slices, f"ResourceSlices with spec.nodeName={dra.node} and spec.driver={dra.driver_name}", "none",
           "publish your node's devices (kubeletplugin.Helper.PublishResources)")
    pools: dict[str, list] = {}
    for s in slices:
        pools.setdefault(s.spec.pool.name, []).append(s)
    problems = []
    for pool, items in pools.items():
        gen = max(s.spec.pool.generation for s in items)
        current = [s for s in items if s.spec.pool.generation == gen]
        if any(s.spec.pool.resource_slice_count != len(current) for s in current):
            problems.append(f"pool {pool}: resourceSliceCount {current[0].spec.pool.resource_slice_count}, "
                            f"{len(current)} slices of generation {gen}")
        names = [d.name for s in current for d in s.spec.devices or []]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            problems.append(f"pool {pool}: devices listed twice: {dup}")
        bad = [n for n in names if not DNS_LABEL.match(n or "")]
        if bad:
            problems.append(f"pool {pool}: device names that are not DNS labels: {bad}")
        if not names:
            problems.append(f"pool {pool}: no devices")
    expect(not problems, "every pool complete, every device once, named as a DNS label", "; ".join(problems),
           "publish each device once per pool; keep resourceSliceCount equal to the slices of the newest generation")


# ---------------------------------------------------------------- prepare / unprepare
@check("DRA-07", spec="K42")
def test_DRA_07_answers_every_claim(dra):
    """DRA-07: NodePrepareResources answers every claim it was given, by UID, and no other – the kubelet fails a pod whose claims are skipped."""
    devs = dra.devices(2)
    cs = [dra.claim([devs[0]]), dra.claim([devs[1]])]
    try:
        resp = dra.prepare(cs)
    except grpc.RpcError as e:
        fail("NodePrepareResources for two allocated claims to answer", rpc_error_text(e),
             "prepare each claim and answer each by its UID")
    asked = {c.metadata.uid for c in cs}
    expect(set(resp.claims) == asked, f"answers for exactly {sorted(asked)}", f"{sorted(resp.claims)}",
           "put one entry per requested claim UID into NodePrepareResourcesResponse.claims")


@check("DRA-08", spec="K42")
def test_DRA_08_devices_match_allocation(dra):
    """DRA-08: the devices prepared for a claim are those its allocation names for this driver, with their request names – a container gets what the scheduler chose."""
    devs = dra.devices(3)
    c = dra.claim(devs[1:3])
    resp = _prepared(dra, [c])
    got = sorted((p, d, r) for p, d, r, _ in _answer(resp, c)[0])
    want = sorted((p, d, (r,)) for r, p, d in claimlib.devices_of(c))
    expect(got == want, f"(pool, device, request) = {want}", f"{got}",
           "answer status.allocation.devices.results of your driver, one Device per result")


def _results(claim) -> list:
    """The allocation results of a claim (all drivers)."""
    alloc = claim.status.allocation if claim.status else None
    return list((alloc.devices.results if alloc and alloc.devices else None) or [])


def _published(dra) -> set[tuple[str, str]]:
    """(pool, device) of the devices the driver's ResourceSlices for the node list, newest generation per pool."""
    newest: dict[str, int] = {}
    slices = dra.slices()
    for s in slices:
        newest[s.spec.pool.name] = max(newest.get(s.spec.pool.name, s.spec.pool.generation), s.spec.pool.generation)
    return {(s.spec.pool.name, d.name) for s in slices if s.spec.pool.generation == newest[s.spec.pool.name]
            for d in s.spec.devices or []}


def _names(devices) -> list[str]:
    """(driver, pool, device) -> "pool/device", sorted."""
    return sorted(f"{p}/{d}" for _, p, d in devices)


def _specs_by_id(dra) -> dict[str, dict]:
    """CDI device ID -> the spec file's device entry, over the CDI dir."""
    out = {}
    for fname, spec in dra.cdi_files().items():
        kind = spec.get("kind") if isinstance(spec, dict) else None
        for d in (spec.get("devices") or []) if kind else []:
            if isinstance(d, dict) and d.get("name"):
                out[f"{kind}={d['name']}"] = {"file": fname, **d}
    return out


def _shared_cdi_ids(dra, ids: list[str], other) -> set[str]:
    """The IDs of `ids` that the driver also answers for another claim (`other`, prepared and unprepared
    here): a driver-wide CDI device (the upstream example driver's "common" one), which it keeps while it
    runs, not a claim's own device that unprepare must remove."""
    if not ids:
        return set()
    theirs = {i for *_, cdi in _answer(_prepared(dra, [other]), other)[0] for i in cdi}
    _unprepared(dra, [other], "a second prepared claim")
    return set(ids) & theirs


@check("DRA-09", spec="K43, K44")
def test_DRA_09_cdi_ids_resolve(dra):
    """DRA-09: each CDI device ID a prepare returns is defined by a spec file in the CDI dir, and unprepare removes the claim's own – else the runtime cannot start the container, or leaks specs."""
    c, other = dra.claim(), dra.claim()
    resp = _prepared(dra, [c])
    ids = [i for *_, cdi in _answer(resp, c)[0] for i in cdi]
    shared = _shared_cdi_ids(dra, ids, other)
    if not ids:
        pytest.skip("the driver returns no CDI device IDs (it injects devices another way)")
    bad = [i for i in ids if not CDI_ID.match(i)]
    expect(not bad, "CDI IDs of the form vendor/class=name", f"{bad}", "return qualified CDI device names")
    specs = _specs_by_id(dra)
    missing = [i for i in ids if i not in specs]
    expect(not missing, f"spec files in {dra.cdi_dir} defining {ids}", f"undefined: {missing}",
           "write the CDI spec (kind vendor/class, a device of that name) before NodePrepareResources returns; "
           "--cdi-dir tells where")
    no_edits = [i for i in ids if not specs[i].get("containerEdits")]
    expect(not no_edits, "each CDI device to carry containerEdits", f"without: {no_edits}",
           "give each device the edits a container needs (device nodes, env, mounts)")
    _unprepared(dra, [c], "the prepared claim")
    left = [i for i in ids if i in _specs_by_id(dra) and i not in shared]
    expect(not left, "the claim's own CDI devices gone after NodeUnprepareResources", f"still defined: {left}",
           "remove the claim's CDI spec file when you unprepare it")


@check("DRA-10", spec="K42, K45")
def test_DRA_10_prepare_idempotent(dra):
    """DRA-10: preparing a prepared claim again succeeds with the same answer – the kubelet re-sends prepare after its restart and after failures."""
    c = dra.claim()
    first = _answer(_prepared(dra, [c]), c)[0]
    try:
        again = dra.prepare([c])
    except grpc.RpcError as e:
        fail("a second NodePrepareResources for the same claim to succeed", rpc_error_text(e),
             "treat prepare of a prepared claim as success and answer what you answered before")
    got, err = _answer(again, c)
    expect(not err and got == first, f"the same answer: {first}", f"{got} error={err!r}",
           "treat prepare of a prepared claim as success and answer what you answered before")


@check("DRA-11", spec="K44")
def test_DRA_11_unprepare_idempotent(dra):
    """DRA-11: unprepare of a claim never prepared, and of one already unprepared, succeeds – the kubelet's reconcile loop sends such calls."""
    never = dra.claim()
    done = dra.claim()
    _prepared(dra, [done])
    problems = []
    for what, cs in (("a claim never prepared", [never]), ("a prepared claim", [done]),
                     ("the same claim again", [done])):
        try:
            r = dra.unprepare(cs)
        except grpc.RpcError as e:
            problems.append(f"{what}: {rpc_error_text(e)}")
            continue
        uid = cs[0].metadata.uid
        if uid not in r.claims:
            problems.append(f"{what}: no answer for its UID")
        elif r.claims[uid].error:
            problems.append(f"{what}: {r.claims[uid].error}")
    expect(not problems, "NodeUnprepareResources to succeed each time", "; ".join(problems),
           "treat unprepare of an unknown or already unprepared claim as success")


@check("DRA-12", severity="advisory", spec="K42")
def test_DRA_12_per_claim_errors(dra):
    """DRA-12: a claim that cannot be prepared (not allocated) gets its own error while the other claims of the call prepare – the response has an error per claim for that."""
    good = dra.claim()
    bad = claimlib.create_unallocated(dra.api, dra.namespace, f"unalloc-{good.metadata.name}")
    dra.resources.add("deleting the unallocated claim", lambda: claimlib.delete(dra.api, dra.namespace, bad.metadata.name))
    fix = "prepare claims one by one and put a failure into that claim's error field, not the call's status"
    try:
        resp = dra.prepare([good, bad])
    except grpc.RpcError as e:
        fail("the call to succeed with an error for the unallocated claim only", rpc_error_text(e), fix)
    devs, err = _answer(resp, good)
    expect(not err and devs, "the allocated claim prepared", f"error={err!r} devices={devs}", fix)
    _, bad_err = _answer(resp, bad)
    expect(bad.metadata.uid in resp.claims and bad_err, "an error for the unallocated claim",
           "none" if bad.metadata.uid in resp.claims else "no answer for it", "check status.allocation; report its absence")


# The codes of a NodePrepareResources that the driver refused as a whole: its handler answered with an error
# (kubeletplugin returns UNKNOWN for any error of its claim lookup, "claim ... got replaced"; others use
# status codes). UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED are not among them: they say the call never got
# an answer from the driver's logic (a dead or hung driver), and prove nothing about the UID comparison.
WHOLE_CALL_REFUSALS = frozenset({
    grpc.StatusCode.UNKNOWN, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED, grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INTERNAL,
})


@check("DRA-13", spec="K42")
def test_DRA_13_replaced_claim(dra):
    """DRA-13: a claim replaced by a new one of the same name (new UID) is not prepared under the old UID: the driver answers it with an error, or refuses the call (not by dying or hanging) – else a pod gets the devices of a claim that is not its own."""
    c = dra.claim()
    old_uid = c.metadata.uid
    claimlib.delete(dra.api, dra.namespace, c.metadata.name)
    new = dra.claim(name=c.metadata.name)
    stale = type("Stale", (), {})()
    stale.metadata = type("M", (), {"namespace": c.metadata.namespace, "name": c.metadata.name, "uid": old_uid})()
    what = f"claim {c.metadata.name} with UID {old_uid} (now {new.metadata.uid})"
    fix = "compare the claim's UID from the API server with the request's; refuse a mismatch"
    try:
        resp = dra.prepare([stale])
    except grpc.RpcError as e:
        code = e.code()
        if code == grpc.StatusCode.UNAVAILABLE:        # a driver that dies on the call: its exit takes a moment
            wait_until(lambda: not dra.driver.running, 2, "the driver to exit", interval=0.1, raise_on_timeout=False)
        if not dra.driver.running:
            fail(f"an error for {what}", f"the driver died on the call (exit {dra.driver.returncode}): "
                 f"{rpc_error_text(e)}", f"{fix}, and answer it; never exit on a claim you cannot prepare")
        if code not in WHOLE_CALL_REFUSALS:
            seen = (f"no answer within {dra.t.rpc_timeout:g}s (the driver hangs on it)"
                    if code == grpc.StatusCode.DEADLINE_EXCEEDED else f"not a refusal: {rpc_error_text(e)}")
            fail(f"an error for {what} (a per-claim error, or the call refused with "
                 f"{'/'.join(sorted(s.name for s in WHOLE_CALL_REFUSALS))})", seen,
                 f"{fix} at once: the claim read from the API server has another UID; do not wait for it to change")
        return                              # refused as a whole: not prepared either
    devs, err = _answer(resp, stale)
    expect(err or not devs, f"an error for {what}", f"prepared: {devs}", fix)
    expect(dra.driver.running, "the driver still running after answering", f"exit {dra.driver.returncode}",
           "never exit on a claim you cannot prepare")


@check("DRA-16", spec="K42")
def test_DRA_16_concurrent_prepares(dra):
    """DRA-16: concurrent NodePrepareResources calls for distinct claims each get their own devices – the kubelet prepares pods in parallel."""
    dra.service()
    devs = dra.devices(2)
    n = min(len(devs), 4)
    for rnd in range(3):
        cs = [dra.claim([devs[i]]) for i in range(n)]
        results: list = [None] * n
        barrier = threading.Barrier(n)

        def one(i: int) -> None:
            barrier.wait(timeout=10)
            try:
                results[i] = dra.prepare([cs[i]])
            except grpc.RpcError as e:
                results[i] = e
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=dra.t.rpc_timeout + 15)
        wrong = []
        for i, r in enumerate(results):
            if isinstance(r, grpc.RpcError) or r is None:
                wrong.append(f"{cs[i].metadata.name}: {rpc_error_text(r) if r else 'no answer'}")
                continue
            got = [(p, d) for p, d, *_ in _answer(r, cs[i])[0]]
            if got != [devs[i]]:
                wrong.append(f"{cs[i].metadata.name} (allocated {devs[i][1]}) got {[d for _, d in got]}")
        expect(not wrong, f"{n} concurrent prepares each answered with its own device", "; ".join(wrong),
               "keep no per-call state in shared fields; lock what you share")
        _unprepared(dra, cs, "the claims")


@check("DRA-17", severity="advisory", spec="K46")
def test_DRA_17_health_stream(dra):
    """DRA-17: NodeWatchResources reports an injected fault on exactly that device – the kubelet shows it in the pod's status (alpha)."""
    if not dra.health_hook:
        pytest.skip("no --health-hook: the suite cannot make a device unhealthy")
    from dpconform.kubeletapi import drah
    (pool, victim), = dra.devices(2)[1:2]
    stub = dra.health_stub()
    stream = stub.NodeWatchResources(drah.NodeWatchResourcesRequest(), timeout=dra.t.health_timeout + 10)
    dra.resources.add("cancelling the health stream", stream.cancel)
    seen = []
    try:
        first = next(stream)
        seen.append(first)
        dra.set_health(victim, "Unhealthy")
        for msg in stream:
            seen.append(msg)
            bad = {(d.device.pool_name, d.device.device_name) for d in msg.devices if d.health == drah.UNHEALTHY}
            if bad:
                expect(bad == {(pool, victim)}, f"only {pool}/{victim} UNHEALTHY", f"UNHEALTHY: {sorted(bad)}",
                       "report the health of each device under its own pool and name")
                return
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNIMPLEMENTED:
            pytest.skip("the driver does not serve v1alpha1.DRAResourceHealth")
        fail(f"{pool}/{victim} reported UNHEALTHY within {dra.t.health_timeout:g}s", rpc_error_text(e),
             "send a NodeWatchResourcesResponse when a device's health changes")
    fail(f"{pool}/{victim} reported UNHEALTHY", f"{len(seen)} messages, none with it", "send health changes")


@check("DRA-18", spec="K42, K43, K44")
def test_DRA_18_pod_end_to_end(dra, request):
    """DRA-18: a pod with two claims from a ResourceClaimTemplate is scheduled onto the node and runs on devices the driver's ResourceSlices list while it runs, prepared as allocated (the answer the kubelet recorded names those devices, with CDI IDs the spec files define), and is deleted cleanly (its claims unprepared) – the path every user's pod takes."""
    needs(dra, "dra-pods")
    dra.require_cluster()
    from kubernetes import client
    from dpconform.fixtures.cluster.api import report_of
    api, ns = dra.claim_namespace("dpconform-dra-18")
    res = client.ResourceV1Api(api.client)
    api.create_pod(claimlib.claim_pod("dra-18", ns, "gpu", ["gpu-a", "gpu-b"]))
    pod = _running_pod(api, ns, "dra-18", "prepare every claim the kubelet sends (see the kubelet's "
                                          "FailedPrepareDynamicResources event)")
    names = [c.resource_claim_name for c in pod.status.resource_claim_statuses or []]
    expect(len(names) == 2, "two ResourceClaims made for the pod", f"{names}", "(the cluster's claim controller)")
    driver = dra.driver_name
    claims = [res.read_namespaced_resource_claim(n, ns) for n in names]
    allocated = {c.metadata.name: sorted((r.driver, r.pool, r.device) for r in _results(c)) for c in claims}
    expect(all(allocated.values()), "both claims allocated", f"{allocated}", "publish devices the DeviceClass selects")
    # allocated from the driver: devices its slices list (the pool's newest generation) while the pod uses them
    wanted = {x for devs in allocated.values() for x in devs}
    seen: dict[str, set] = {}

    def all_published() -> bool:
        seen["published"] = {(driver, pool, d) for pool, d in _published(dra)}
        return wanted <= seen["published"]
    expect(wait_until(all_published, 5, "the allocated devices in the driver's ResourceSlices", interval=0.5,
                      raise_on_timeout=False),
           f"the pod's allocated devices {_names(wanted)} listed in the ResourceSlices of {driver} while it runs",
           f"not listed: {_names(wanted - seen['published'])}; the slices list {_names(seen['published'])}",
           "publish every device of the node for as long as it exists, allocated or not: the scheduler tracks "
           "allocations in the claims, a device missing from the slices is one the driver does not offer")
    # the driver's answer to the kubelet's NodePrepareResources (its checkpoint, written before the containers start)
    prepared = dra.kubelet_prepared()
    specs = _specs_by_id(dra)
    wrong, undefined = [], []
    for c in claims:
        devs = prepared.get(c.metadata.uid, {}).get(driver)
        if devs is None:
            wrong.append(f"{c.metadata.name}: the kubelet recorded no answer of {driver} for it")
            continue
        answered = sorted((driver, d.get("PoolName"), d.get("DeviceName")) for d in devs)
        if answered != allocated[c.metadata.name]:
            wrong.append(f"{c.metadata.name}: allocated {_names(allocated[c.metadata.name])}, "
                         f"prepared as {_names(answered)}")
        undefined += [f"{c.metadata.name}: {i}" for d in devs for i in d.get("CDIDeviceIDs") or [] if i not in specs]
    expect(not wrong, "the driver's prepare answer to name each claim's allocated devices", "; ".join(wrong),
           "answer status.allocation.devices.results of your driver, one Device per result")
    expect(not undefined, f"the CDI device IDs of the prepare answer defined by spec files in {dra.cdi_dir} while "
           "the pod runs", f"undefined: {undefined}", "write each claim's CDI spec before NodePrepareResources returns "
           "and keep it until NodeUnprepareResources")
    report = report_of(api, "dra-18", "c")
    cdi = report is not None and any(k.startswith("DPCONFORM_GPU") for k in report.env) if dra.cfg.bundled else None
    request.node.user_properties.append(("dpconform_note", "CDI devices injected into the container"
                                         if cdi else "CDI devices not seen in the container (containerd 1.6 has no CDI)"
                                         if cdi is not None else "CDI injection not checked (not the bundled driver)"))
    try:
        api.delete_pod("dra-18", timeout=60, grace=None)
    except TimeoutError:
        pod = api.read_pod("dra-18")
        fail("the pod gone within 60 s of its deletion (the kubelet unprepares its claims first)",
             f"still there: {pod.status.phase if pod else '?'}", "unprepare claims (unknown ones too) without error")


@check("DRA-20", spec="K46")
def test_DRA_20_health_service_listed(dra, suite_config):
    """DRA-20: a driver that serves DRAResourceHealth lists it in GetInfo's supported_versions, and every health service it lists answers – from kubelet 1.37 the kubelet opens the health stream only for a driver that lists one, so an unlisted service's device health never reaches a pod's status."""
    cfg = suite_config
    needs_release("dra-health-listed", cfg.kube_version,
                  "before 1.37 the kubelet opens v1alpha1.DRAResourceHealth whatever "
                  "the driver lists")
    reg = dra.require_registered()          # a refused driver is watched by nobody (DRA-01, DRA-04, DRA-05)
    offered = list(reg.info.supported_versions)
    served = [s for s in DRA_HEALTH_SERVICES if serves_health(reg.endpoint, s, dra.t.rpc_timeout)]
    listed = [s for s in offered if s in DRA_HEALTH_SERVICES]
    if not served and not listed:
        pytest.skip("the driver serves no DRAResourceHealth (health reporting is optional)")
    expect(listed, f"{served[0] if served else 'a health service'} in supported_versions", f"{offered}",
           f"add {served[0]!r} to GetInfo's supported_versions: from kubelet 1.37 the kubelet watches the health of a "
           "driver that lists it, and of no other" if served else "list the health services you serve")
    unserved = [s for s in listed if s not in served]
    expect(not unserved, f"each listed health service ({listed}) answering NodeWatchResources", f"not: {unserved}",
           "serve every health service you list (the kubelet picks the newest listed one it speaks)")


@check("DRA-21", severity="advisory", spec="K46")
def test_DRA_21_health_in_pod_status(dra, suite_config):
    """DRA-21: a fault the driver reports on a running pod's claimed device shows in the pod's status (allocatedResourcesStatus "claim:<name>", from kubelet 1.36; from 1.37 only for a driver that lists its health service, DRA-20) – what a user sees of a failed device."""
    cfg = suite_config
    needs_release("allocated-resources-status", cfg.kube_version,
                  "the kubelet shows device health in a pod's status from "
                  "1.36 (ResourceHealthStatus, alpha and off before)")
    if not dra.health_hook:
        pytest.skip("no --health-hook: the suite cannot make a device unhealthy")
    needs(dra, "dra-pods")
    dra.require_cluster()
    from kubernetes import client

    from dpconform.fixtures.pod_status import allocated_resources_status
    api, ns = dra.claim_namespace("dpconform-dra-21")
    api.create_pod(claimlib.claim_pod("dra-21", ns, "gpu", ["gpu-a"]))
    pod = _running_pod(api, ns, "dra-21", "prepare every claim the kubelet sends")
    name = pod.status.resource_claim_statuses[0].resource_claim_name
    claim = client.ResourceV1Api(api.client).read_namespaced_resource_claim(name, ns)
    _, pool, device = sorted((r.driver, r.pool, r.device) for r in _results(claim))[0]

    def status() -> dict[str, str]:
        return allocated_resources_status(api.read_pod("dra-21")).get("c", {}).get("claim:gpu-a", {})

    def shown() -> str | None:
        return next((h for rid, h in status().items() if rid.endswith(device)), None)
    t = cfg.thresholds.node_status_timeout
    dra.set_health(device, "Unhealthy")
    if not wait_until(lambda: shown() == "Unhealthy", t, f"{device} Unhealthy in pod dra-21's status",
                      interval=0.5, raise_on_timeout=False):
        others = sorted(rid for rid in status() if not rid.endswith(device))
        if others and shown() is None:   # the kubelet shows the devices the driver said it prepared
            raise Blocked("DRA-08", f"the pod's status shows the health of {others}, the devices NodePrepareResources "
                                    f"answered, not of {pool}/{device}, the one its claim was allocated")
        listed = [s for s in dra.require_info().info.supported_versions if s in DRA_HEALTH_SERVICES]
        fail(f"{pool}/{device} Unhealthy in the pod's allocatedResourcesStatus within {t:g}s of the fault",
             f"{shown() or 'not shown'}" + ("" if listed else "; no health service in supported_versions"),
             "report the fault on the health stream under the device's own pool and name" if listed else
             "list your DRAResourceHealth service in supported_versions (DRA-20)")


def _running_pod(api, ns: str, name: str, fix: str):
    """Pod `name` once Running; fails with its phase and last events when it is not within 60 s."""
    from dpconform.fixtures.cluster.api import fatal_state

    def running(p):
        if p is None:
            return None
        if fatal_state(p):
            return p
        return p if p.status.phase == "Running" else None
    try:
        pod = api.wait_pod(name, running, 60, f"pod {name} to run")
    except TimeoutError:
        pod = api.read_pod(name)
        events = api.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        seen = "; ".join(f"{e.reason}: {e.message}" for e in events[-4:]) or "no events"
        fail("the pod Running within 60 s", f"phase {pod.status.phase if pod else '?'}; {seen}", fix)
    expect(pod.status.phase == "Running", "the pod Running", f"{fatal_state(pod)}", fix)
    return pod


@check("DRA-19", spec="K16, K42")
def test_DRA_19_extended_resource(dra, suite_config):
    """DRA-19: a pod asking for an extended resource in its limits (`<resource>: 1`, as a device plugin's users write it) runs on one of the driver's devices through a DeviceClass naming that resource (extendedResourceName; kubelet 1.36+, GA in 1.37): the scheduler allocates the device in a claim it makes for the pod, and the driver prepares that claim as allocated – the path from a device plugin to DRA without changing pod specs."""
    cfg = suite_config
    needs_release("dra-extended-resource", cfg.kube_version,
                  "an extended resource is served by a DRA driver from 1.36 "
                  "(DRAExtendedResource, alpha and off before)")
    needs(dra, "dra-pods")
    dra.require_cluster()
    from kubernetes import client

    from dpconform.fixtures.cluster.api import workload_pod
    resource = cfg.resource or DEFAULT_EXTENDED_RESOURCE
    api, ns = dra.claim_namespace("dpconform-dra-19", extended_resource=resource)
    api.create_pod(workload_pod("dra-19", ns, {"c": {resource: 1}}))
    pod = _running_pod(api, ns, "dra-19", "prepare the claim the scheduler makes for an extended resource (annotated "
                                          "resource.kubernetes.io/extended-resource-claim) like any other claim")
    made = pod.status.extended_resource_claim_status
    if made is None or not made.resource_claim_name:
        pytest.skip(f"pod dra-19 runs, but not on a claim for {resource}: something else on the node serves it "
                    "(a device plugin?)")
    claim = client.ResourceV1Api(api.client).read_namespaced_resource_claim(made.resource_claim_name, ns)
    driver = dra.driver_name
    allocated = sorted((r.driver, r.pool, r.device) for r in _results(claim))
    expect(allocated and all(d[0] == driver for d in allocated), f"the claim {claim.metadata.name} allocated from "
           f"{driver}", f"{allocated}", "publish devices the DeviceClass selects")
    devs = dra.kubelet_prepared().get(claim.metadata.uid, {}).get(driver)
    answered = sorted((driver, d.get("PoolName"), d.get("DeviceName")) for d in devs or [])
    expect(answered == allocated, f"the driver's prepare answer for {claim.metadata.name} to name {_names(allocated)}",
           f"{_names(answered)}" if devs is not None else "the kubelet recorded no answer",
           "answer status.allocation.devices.results of your driver, one Device per result")
    try:
        api.delete_pod("dra-19", timeout=60, grace=None)
    except TimeoutError:
        fail("the pod gone within 60 s of its deletion (the kubelet unprepares its claim first)", "still there",
             "unprepare claims without error")


# ---------------------------------------------------------------- restarts (run last: they restart shared parts)
@check("DRA-14", spec="K45, K39")
def test_DRA_14_kubelet_restart(dra):
    """DRA-14: after a kubelet restart the driver is registered again, its ResourceSlices are back, the kubelet's repeated prepare of a prepared claim succeeds and unprepare works – pods keep running across kubelet updates."""
    needs(dra, "dra-kubelet-view")
    kubelet = dra.require_kubelet()
    uid = claimlib.new_pod_uid()
    c = dra.claim(pod_uid=uid)
    pod = dra.pod([c], uid)
    try:
        before = kubelet.prepare_pod(pod)
    except DraError as e:
        fail("the kubelet to prepare the pod's claim", str(e), "prepare allocated claims")
    reg = dra.restart_kubelet()
    expect(reg is not None, f"the driver registered again within {dra.t.register_timeout:g}s of the restart",
           "; ".join(r.error or "?" for r in dra.attempts()[-3:]) or "no attempt",
           "keep the registration socket and answer GetInfo every time the kubelet asks")
    back = wait_until(dra.slices, dra.t.slice_republish_timeout, "the driver's ResourceSlices", interval=0.2,
                      raise_on_timeout=False)
    expect(back, f"the driver's ResourceSlices published again within {dra.t.slice_republish_timeout:g}s (the restarted "
           "kubelet deleted the node's slices)", "none", "re-create your slices when they are deleted "
           "(kubeletplugin's slice controller watches them)")
    try:
        after = kubelet.prepare_pod(pod)
    except DraError as e:
        fail("the restarted kubelet's prepare (re-sent: it keeps no 'prepared' mark) to succeed", str(e),
             "treat prepare of a prepared claim as success")
    # until 1.36 the kubelet appends the re-sent answer to the devices it restored from its checkpoint (the
    # same CDI IDs twice, harmless; from 1.37 it replaces them, K45); compared as sets
    same = {k: sorted(set(v)) for k, v in after.items()} == {k: sorted(set(v)) for k, v in before.items()}
    expect(same, f"the same CDI devices {before}", f"{after}", "answer a repeated prepare as the first")
    try:
        kubelet.unprepare_pod(pod)
    except DraError as e:
        fail("unprepare after the kubelet restart to succeed", str(e), "unprepare claims prepared before")


@check("DRA-15", spec="K45, K44")
def test_DRA_15_plugin_restart(dra):
    """DRA-15: a restarted driver registers again, still knows the claims it prepared (prepare answers the same, unprepare removes their CDI specs) – drivers are updated under running pods."""
    dra.require_registered()
    c1, c2 = dra.claim(), dra.claim()
    a1, a2 = (_answer(_prepared(dra, [c]), c)[0] for c in (c1, c2))
    reg = dra.restart_driver()
    expect(reg is not None, f"the driver registered again within {dra.t.register_timeout:g}s of its restart",
           "; ".join(r.error or "?" for r in dra.attempts()[-3:]) or "no attempt",
           "on start, remove stale sockets, serve, then create the registration socket again")
    try:
        again = dra.prepare([c2])
    except grpc.RpcError as e:
        fail("prepare of a claim prepared before the restart to succeed", rpc_error_text(e),
             "keep prepared claims on disk (the kubelet re-sends prepare)")
    got, err = _answer(again, c2)
    expect(not err and got == a2, f"the same answer {a2}", f"{got} error={err!r}", "answer from what you stored")
    shared = {i for *_, cdi in a2 for i in cdi}            # in both answers: a driver-wide device (see DRA-09)
    ids = [i for *_, cdi in a1 for i in cdi if i not in shared]
    _unprepared(dra, [c1], "a claim prepared before the restart")
    left = [i for i in ids if i in _specs_by_id(dra)]
    expect(not left, "its CDI devices removed", f"still defined after the restart and unprepare: {left}",
           "keep prepared claims on disk (e.g. a checkpoint in your plugin dir) so unprepare can clean up")
