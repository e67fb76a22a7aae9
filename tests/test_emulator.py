"""Kubelet emulator: registration, ListAndWatch, admission and Allocate (docs/kubelet-behaviours.md K1-K23)."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile

import grpc
import pytest

from dpconform.fixtures.kubelet import Container, KubeletEmulator, Pod
from dpconform.fixtures.kubelet.fakeplugin import FakePlugin, dev
from dpconform.fixtures.kubelet.names import is_extended_resource_name
from dpconform.kubeletapi import constants, dp

RES = "example.com/dev"


@pytest.fixture
def emu(make_emu):
    return make_emu()


@pytest.fixture
def make_plugin():
    made = []

    def make(emu, devices=None, resource=RES, register=True, **opts):
        p = FakePlugin(emu.plugin_dir, resource, devices if devices is not None else [dev("d0"), dev("d1")],
                       dp.DevicePluginOptions(**opts)).start()
        made.append(p)
        if register:
            assert p.register() is None
            if p.devices:
                emu.wait_until(lambda: emu.capacity(resource) == len(p.devices), 5, "devices")
        return p
    yield make
    for p in made:
        p.stop()


def one(name, n=1, res=RES):
    return Pod(name, [Container("c", {res: n})])


# -- A. registration -------------------------------------------------------------------------------
def test_k2_start_cleans_sockets_keeps_checkpoint_and_files():
    d = tempfile.mkdtemp(dir="/tmp", prefix="emu")
    pd = os.path.join(d, "device-plugins")
    os.makedirs(pd)
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(pd, "stale.sock"))
    s.close()
    open(os.path.join(pd, "regular-file"), "w").close()
    os.mkdir(os.path.join(pd, "subdir"))
    emu = KubeletEmulator(d).start()
    try:
        assert sorted(os.listdir(pd)) == ["kubelet.sock", "regular-file", "subdir"]
    finally:
        emu.stop()
        shutil.rmtree(d)
    assert not os.path.exists(os.path.join(pd, "kubelet.sock"))


def test_k4_unsupported_version_error_text_and_code(emu, make_plugin):
    p = make_plugin(emu, register=False)
    err = p.register(version="v1alpha1")
    assert err == 'requested API version "v1alpha1" is not supported by kubelet. Supported version is ["v1beta1"]'
    assert p.last_register_code == grpc.StatusCode.UNKNOWN
    reg = emu.registrations[-1]
    assert not reg.accepted and reg.error == err
    # counted before checking (K4/K30)
    assert emu.metrics.sample("kubelet_device_plugin_registration_total", {"resource_name": RES}) == 1


@pytest.mark.parametrize("name,ok", [
    ("example.com/dev", True), ("nvidia.com/gpu", True), ("a.b/c_d.e-f", True),
    ("gpu", False), ("kubernetes.io/gpu", False), ("example.kubernetes.io/gpu", False),
    ("requests.example.com/gpu", False), ("Example.com/gpu", False), ("example.com/", False),
    ("example.com/-gpu", False), ("example.com/gpu-", False), ("example.com/" + "a" * 64, False),
    ("example.com/" + "a" * 63, True), ("a/b/c", False), ("/gpu", False), ("exa mple.com/gpu", False),
])
def test_k5_extended_resource_name_rules(name, ok):
    assert is_extended_resource_name(name) is ok


def test_k4_invalid_resource_name_error_text(emu, make_plugin):
    p = make_plugin(emu, register=False)
    assert p.register(resource="kubernetes.io/gpu") == 'the ResourceName "kubernetes.io/gpu" is invalid'
    assert p.last_register_code == grpc.StatusCode.UNKNOWN
    assert emu.rpcs("GetDevicePluginOptions") == []          # rejected before dialing


def test_k6_dial_failure_text(make_emu, make_plugin):
    emu = make_emu(dial_timeout_s=0.5)
    p = make_plugin(emu, register=False)
    err = p.register(endpoint="nobody-listens.sock")
    assert err == "failed to dial device plugin: context deadline exceeded"
    assert not emu.registrations[-1].accepted


def test_k7_options_failure_plugin_unused(emu, make_plugin):
    p = make_plugin(emu, register=False)
    p.options_error = "options broken"
    err = p.register()
    assert err == "failed to get device plugin options: rpc error: code = Unknown desc = options broken"
    assert len(emu.rpcs("GetDevicePluginOptions")) == 1
    assert emu.rpcs("ListAndWatch") == [] and p.streams_opened == 0
    assert emu.endpoint(RES) is None


def test_k7_options_deadline(make_emu, make_plugin):
    emu = make_emu(rpc_timeout_s=0.3)
    p = make_plugin(emu, register=False)
    p.options_delay_s = 2
    err = p.register()
    assert err.startswith("failed to get device plugin options: would block the node")
    rec = emu.rpcs("GetDevicePluginOptions")[0]
    assert rec.would_block_node and rec.code == "DEADLINE_EXCEEDED"


def test_k7_options_from_rpc_not_from_request(emu, make_plugin):
    p = make_plugin(emu, register=False, pre_start_required=True)   # what GetDevicePluginOptions answers
    assert p.register(options=dp.DevicePluginOptions(get_preferred_allocation_available=True)) is None
    reg = emu.wait_for_registration(RES)
    assert reg.request.options.get_preferred_allocation_available and reg.options.pre_start_required
    assert emu.endpoint(RES).options.pre_start_required


def test_reject_registrations_hook(emu, make_plugin):
    p = make_plugin(emu, register=False)
    emu.reject_registrations = "go away"
    assert p.register() == "go away"
    emu.reject_registrations = None
    assert p.register() is None
    assert [r.accepted for r in emu.registrations] == [False, True]


def test_k9_newest_registration_wins(emu, make_plugin):
    """The default release (several endpoints per resource, tests/test_kube_versions.py has the others)."""
    old = make_plugin(emu, [dev("a0")])
    new = make_plugin(emu, [dev("b0"), dev("b1")])
    assert sorted(emu.devices(RES)) == ["b0", "b1"]
    old.stop()                                               # the old instance going away changes nothing
    r = emu.admit(one("p"))
    assert r.admitted and r.containers["c"].devices[RES][0].startswith("b")
    assert emu.allocatable(RES) == 2 and emu.stream_state(RES) == ("open", None)
    assert len(new.calls) == 1


# -- B. ListAndWatch ---------------------------------------------------------------------------------
def test_k11_k12_health_transitions_capacity(emu, make_plugin):
    p = make_plugin(emu, [dev("d0")])
    assert (emu.capacity(RES), emu.allocatable(RES)) == (1, 1)
    p.set_health("d0", constants.UNHEALTHY)
    emu.wait_until(lambda: emu.allocatable(RES) == 0, 5)
    assert emu.capacity(RES) == 1
    p.set_health("d0", constants.HEALTHY)
    emu.wait_until(lambda: emu.allocatable(RES) == 1, 5)
    assert [len(s) for _, s in emu.snapshots(RES)] == [1, 1, 1]
    times = [t for t, _ in emu.snapshots(RES)]
    assert times == sorted(times)


@pytest.mark.parametrize("health", ["", "healthy", "HEALTHY", "Unhealthy", "ok"])
def test_k11_only_exact_healthy_counts(emu, make_plugin, health):
    make_plugin(emu, [dev("d0"), dev("d1", health=health)])
    assert (emu.capacity(RES), emu.allocatable(RES)) == (2, 1)


def test_k12_resource_appears_after_first_message(emu, make_plugin):
    make_plugin(emu, [])
    emu.wait_for_snapshot(RES)
    assert RES in emu.resources() and emu.capacity(RES) == 0


def test_k14_stream_end_unhealthy_then_deleted_after_grace(make_emu, make_plugin):
    emu = make_emu(grace_period_s=0.3)
    p = make_plugin(emu, [dev("d0"), dev("d1")])
    p.end_stream()
    emu.wait_until(lambda: emu.stream_state(RES)[0] == "ended", 5)
    assert (emu.capacity(RES), emu.allocatable(RES)) in [(2, 0), (0, 0)]
    emu.wait_until(lambda: RES not in emu.resources(), 5, "resource deletion")
    assert (emu.capacity(RES), emu.allocatable(RES)) == (0, 0)
    assert p.streams_opened == 1 and len(emu.rpcs("ListAndWatch")) == 1   # never re-opened


def test_k14_stream_end_keeps_capacity(emu, make_plugin):
    p = make_plugin(emu, [dev("d0"), dev("d1")])
    p.stop()
    emu.wait_until(lambda: emu.stream_state(RES)[0] == "ended", 5)
    assert (emu.capacity(RES), emu.allocatable(RES)) == (2, 0)
    assert emu.read_checkpoint_file()["Data"]["RegisteredDevices"][RES] == []


def test_hostile_device_lists(emu, make_plugin):
    weird = [dev(""), dev("x" * 300), dev("dup"), dev("dup", health="bad"), dev("ü/\n"), dev("n", numa=[-5, 1000, 3])]
    p = make_plugin(emu, weird, register=True)
    p.set_devices([dev(f"d{i}") for i in range(20000)])
    emu.wait_until(lambda: emu.capacity(RES) == 20000, 10)
    assert emu.admit(one("p", 3)).admitted


# -- C. allocation -------------------------------------------------------------------------------------
def test_k17_one_request_per_container_and_resource(emu, make_plugin):
    p = make_plugin(emu, [dev(f"d{i}") for i in range(4)])
    q = make_plugin(emu, [dev("x0")], resource="example.com/other")
    r = emu.admit(Pod("p", [Container("a", {RES: 2, "example.com/other": 1}), Container("b", {RES: 1})]))
    assert r.admitted
    allocs = emu.rpcs("Allocate")
    assert [(a.resource, len(a.request.container_requests)) for a in allocs] == [
        (RES, 1), ("example.com/other", 1), (RES, 1)]
    assert [list(a.request.container_requests[0].devices_ids) for a in allocs] == [["d0", "d1"], ["x0"], ["d2"]]
    assert r.containers["a"].devices == {RES: ["d0", "d1"], "example.com/other": ["x0"]}
    assert len(p.calls) == 2 and len(q.calls) == 1
    assert emu.metrics.sample("kubelet_device_plugin_alloc_duration_seconds_count", {"resource_name": RES}) == 2


def test_k18_k20_unavailable_text(emu, make_plugin):
    make_plugin(emu, [dev("d0")])
    r = emu.admit(one("p", 2))
    assert not r.admitted and r.reason == "UnexpectedAdmissionError"
    assert r.message == ("Allocate failed due to requested number of devices unavailable for example.com/dev. "
                         "Requested: 2, Available: 1, which is unexpected")


def test_k18_no_healthy_devices_text(emu, make_plugin):
    make_plugin(emu, [dev("d0", health="Unhealthy")])
    r = emu.admit(one("p"))
    assert r.message == ("Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
                         "example.com/dev, which is unexpected")


def test_k18_unregistered_device_text(make_emu, make_plugin):
    emu = make_emu(grace_period_s=0.2)
    p = make_plugin(emu, [dev("d0"), dev("d1")])
    assert emu.admit(one("a")).admitted
    p.stop()
    emu.wait_until(lambda: RES not in emu.resources(), 5)
    r = emu.admit(one("b"))
    assert r.message == "Allocate failed due to cannot allocate unregistered device example.com/dev, which is unexpected"


def test_k16_unknown_resource_ignored(emu):
    r = emu.admit(one("p", res="example.com/nobody"))
    assert r.admitted and r.containers["c"].devices == {}


def test_k19_zero_container_responses_text(emu, make_plugin):
    p = make_plugin(emu)
    p.allocate = lambda req, ctx: dp.AllocateResponse()
    r = emu.admit(one("p"))
    assert r.message == "Allocate failed due to no containers return in allocation response , which is unexpected"
    assert emu.allocatable(RES) == 2 and emu.assignments(r.pod_uid) == {}


def test_k19_empty_answer_strands_devices_until_a_pod_leaves(emu, make_plugin):
    """The kubelet keeps the devices of an answer without container responses in allocatedDevices
    (it restores the cache only after an RPC error); the next regeneration, when a pod holding devices
    has left, frees them. Compared with the real kubelet in tests/test_differential.py."""
    p = make_plugin(emu)
    real = p.allocate
    p.allocate = lambda req, ctx: dp.AllocateResponse()
    assert not emu.admit(one("empty")).admitted                  # d0 stranded
    p.allocate = real
    held = emu.admit(one("holder"))                               # d1: the only one left
    assert held.admitted and held.containers["c"].devices[RES] == ["d1"]
    r = emu.admit(one("none-left"))
    assert "requested number of devices unavailable for example.com/dev. Requested: 1, Available: 0" in r.message
    emu.remove(held.pod_uid)                                      # a pod holding devices left: regenerated
    again = emu.admit(Pod("both", [Container("c", {RES: 2})]))
    assert again.admitted, again.message


def test_k19_rpc_error_frees_stranded_devices(emu, make_plugin):
    p = make_plugin(emu)
    real = p.allocate
    p.allocate = lambda req, ctx: dp.AllocateResponse()
    assert not emu.admit(one("empty")).admitted                  # d0 stranded

    def fail(req, ctx):
        ctx.abort(grpc.StatusCode.INTERNAL, "down")
    p.allocate = fail
    assert "rpc error" in emu.admit(one("rpc-error")).message    # the kubelet regenerates its cache here
    p.allocate = real
    assert emu.admit(Pod("both", [Container("c", {RES: 2})])).admitted


def test_k19_rpc_error_passed_unchanged(emu, make_plugin):
    p = make_plugin(emu)

    def fail(req, ctx):
        ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad ids")
    p.allocate = fail
    r = emu.admit(one("p"))
    assert r.message == "Allocate failed due to rpc error: code = InvalidArgument desc = bad ids, which is unexpected"


def test_k19_extra_responses_ignored(emu, make_plugin):
    p = make_plugin(emu)

    def two(req, ctx):
        resp = dp.AllocateResponse()
        resp.container_responses.add().envs["A"] = "first"
        resp.container_responses.add().envs["A"] = "second"
        return resp
    p.allocate = two
    assert emu.admit(one("p")).containers["c"].envs == {"A": "first"}


def test_allocate_deadline_would_block_node(make_emu, make_plugin):
    import threading
    emu = make_emu(allocate_timeout_s=0.3)
    p = make_plugin(emu)
    release = threading.Event()

    def stuck(req, ctx):
        release.wait(5)
        return dp.AllocateResponse(container_responses=[dp.ContainerAllocateResponse()])
    p.allocate = stuck
    try:
        r = emu.admit(one("p"))
    finally:
        release.set()
    assert not r.admitted and "would block the node" in r.message
    rec = emu.rpcs("Allocate")[0]
    assert rec.would_block_node and "would block the node" in rec.error


def test_k21_merge_across_resources(emu, make_plugin):
    a = make_plugin(emu, [dev("a0")], resource="example.com/a")
    b = make_plugin(emu, [dev("b0")], resource="example.com/b")

    def resp(tag):
        def f(req, ctx):
            r = dp.ContainerAllocateResponse()
            r.envs["SHARED"] = tag
            r.envs[f"ONLY_{tag}"] = "1"
            r.annotations["k"] = tag
            r.mounts.add(container_path="/same", host_path=f"/h/{tag}")
            r.devices.add(container_path="/dev/same", host_path=f"/dev/{tag}", permissions="rw")
            r.cdi_devices.add(name="vendor.com/class=all")
            r.cdi_devices.add(name=f"vendor.com/class={tag}")
            return dp.AllocateResponse(container_responses=[r])
        return f
    a.allocate, b.allocate = resp("a"), resp("b")
    c = emu.admit(Pod("p", [Container("c", {"example.com/a": 1, "example.com/b": 1})])).containers["c"]
    assert c.envs == {"SHARED": "a", "ONLY_a": "1", "ONLY_b": "1"}
    assert c.annotations == {"k": "a"}
    assert [m.host_path for m in c.mounts] == ["/h/a"]
    assert [d.host_path for d in c.device_specs] == ["/dev/a"]
    assert c.cdi_devices == ["vendor.com/class=all", "vendor.com/class=a", "vendor.com/class=b"]


def test_k18_get_preferred_allocation_used(emu, make_plugin):
    p = make_plugin(emu, [dev(f"d{i}") for i in range(4)], get_preferred_allocation_available=True)
    p.preferred = lambda req: dp.PreferredAllocationResponse(container_responses=[
        dp.ContainerPreferredAllocationResponse(deviceIDs=["d3", "d1"])])
    r = emu.admit(one("p", 2))
    assert r.containers["c"].devices[RES] == ["d1", "d3"]
    req = emu.rpcs("GetPreferredAllocation")[0].request.container_requests[0]
    assert sorted(req.available_deviceIDs) == ["d0", "d1", "d2", "d3"]
    assert list(req.must_include_deviceIDs) == [] and req.allocation_size == 2


def test_k18_bad_preferred_answer_silently_filled(emu, make_plugin):
    p = make_plugin(emu, [dev(f"d{i}") for i in range(4)], get_preferred_allocation_available=True)
    p.preferred = lambda req: dp.PreferredAllocationResponse(container_responses=[
        dp.ContainerPreferredAllocationResponse(deviceIDs=["nope", "d2", "d2", "zzz", "d3", "d0"])])
    r = emu.admit(one("p", 2))
    assert r.admitted
    got = r.containers["c"].devices[RES]
    assert len(got) == 2 and set(got) <= {"d0", "d2", "d3"}
    p.preferred = lambda req: dp.PreferredAllocationResponse()        # empty answer: kubelet picks
    r2 = emu.admit(one("q", 2))
    assert r2.admitted and len(set(r2.containers["c"].devices[RES]) - set(got)) == 2


def test_k18_preferred_not_called_when_not_advertised(emu, make_plugin):
    p = make_plugin(emu, [dev("d0"), dev("d1")])
    p.preferred = lambda req: pytest.fail("must not be called")
    assert emu.admit(one("p")).admitted and emu.rpcs("GetPreferredAllocation") == []


def test_k18_preferred_error_text(emu, make_plugin):
    make_plugin(emu, [dev("d0"), dev("d1")], get_preferred_allocation_available=True)   # p.preferred None -> UNIMPLEMENTED
    r = emu.admit(one("p"))
    assert r.message == ("Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: "
                         "rpc error: code = Unimplemented desc = not implemented, which is unexpected")


def test_k18_reuse_no_rpc_on_readmission(emu, make_plugin):
    make_plugin(emu)
    pod = one("p")
    first = emu.admit(pod)
    second = emu.admit(pod)
    assert second.containers["c"].devices == first.containers["c"].devices
    assert len(emu.rpcs("Allocate")) == 1


def test_k23_init_container_devices_reused(emu, make_plugin):
    make_plugin(emu, [dev("d0"), dev("d1"), dev("d2")])
    pod = Pod("p", init_containers=[Container("init", {RES: 2})], containers=[Container("app", {RES: 2})])
    r = emu.admit(pod)
    assert r.containers["init"].devices[RES] == r.containers["app"].devices[RES]
    assert len(emu.rpcs("Allocate")) == 2 and emu.allocatable(RES) == 3
    assert emu.admit(one("other")).containers["c"].devices[RES] == ["d2"]


def test_k23_sidecar_keeps_its_devices(emu, make_plugin):
    make_plugin(emu, [dev("d0"), dev("d1"), dev("d2")])
    pod = Pod("p", init_containers=[Container("side", {RES: 1}, restart_policy="Always")],
              containers=[Container("app", {RES: 2})])
    r = emu.admit(pod)
    assert not set(r.containers["side"].devices[RES]) & set(r.containers["app"].devices[RES])


def test_k22_pre_start_container(emu, make_plugin):
    p = make_plugin(emu, pre_start_required=True)
    r = emu.admit(one("p"))
    assert r.containers["c"].start_error is None
    pre = emu.rpcs("PreStartContainer")
    assert len(pre) == 1 and list(pre[0].request.devices_ids) == r.containers["c"].devices[RES]
    p.pre_start_error = "not now"
    assert emu.start_container(r.pod_uid, "c") == (
        "device plugin PreStartContainer rpc failed with err: rpc error: code = Unknown desc = not now")


def test_k22_no_pre_start_when_not_required(emu, make_plugin):
    make_plugin(emu)
    emu.admit(one("p"))
    assert emu.rpcs("PreStartContainer") == []


def test_remove_frees_devices(emu, make_plugin):
    make_plugin(emu, [dev("d0")])
    r = emu.admit(one("p"))
    assert not emu.admit(one("q")).admitted
    assert emu.remove(r.pod_uid)
    assert emu.admit(one("q")).admitted
