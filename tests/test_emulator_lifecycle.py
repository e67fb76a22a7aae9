"""Kubelet emulator: checkpoint, restart, PodResources, metrics, HTTP API, CLI (K2, K15, K24-K26, K30-K35)."""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import grpc
import pytest

from dpconform.fixtures.kubelet import Container, KubeletEmulator, Pod
from dpconform.fixtures.kubelet.fakeplugin import FakePlugin, dev
from dpconform.fixtures.kubelet.http_api import HttpApi
from dpconform.kubeletapi import constants, dp, pr, pr_grpc

RES = "example.com/dev"


@pytest.fixture
def env():
    d = tempfile.mkdtemp(dir="/tmp", prefix="emu")
    plugins = []
    emus = []

    def emu_(**kw):
        e = KubeletEmulator(d, **kw).start()
        emus.append(e)
        return e

    def plugin(emu, devices, **opts):
        p = FakePlugin(emu.plugin_dir, RES, devices, dp.DevicePluginOptions(**opts)).start()
        plugins.append(p)
        assert p.register() is None
        emu.wait_until(lambda: emu.allocatable(RES) == sum(x.health == "Healthy" for x in devices), 5)
        return p
    yield emu_, plugin
    for p in plugins:
        p.stop()
    for e in emus:
        e.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_k24_k26_checkpoint_shape(env):
    emu_, plugin = env
    emu = emu_()
    p = plugin(emu, [dev("d0", numa=1), dev("d1")])
    ck = emu.read_checkpoint_file()
    assert ck["Data"]["RegisteredDevices"] == {RES: ["d0", "d1"]} and isinstance(ck["Checksum"], int)
    r = emu.admit(Pod("p", [Container("c", {RES: 2})]))
    (entry,) = emu.read_checkpoint_file()["Data"]["PodDeviceEntries"]
    assert entry["PodUID"] == r.pod_uid and entry["ContainerName"] == "c" and entry["ResourceName"] == RES
    assert entry["DeviceIDs"] == {"-1": ["d1"], "1": ["d0"]}
    resp = dp.ContainerAllocateResponse.FromString(base64.b64decode(entry["AllocResp"]))
    assert resp.envs["FAKE_DEVICES"] == "d0,d1"
    p.set_health("d0", "Unhealthy")                          # K26: every ListAndWatch update
    emu.wait_until(lambda: emu.read_checkpoint_file()["Data"]["RegisteredDevices"][RES] == ["d1"], 5)
    emu.remove(r.pod_uid)                                    # not on a removal: still listed
    assert len(emu.read_checkpoint_file()["Data"]["PodDeviceEntries"]) == 1
    p.set_health("d0", "Healthy")                            # a write before UpdateAllocatedDevices: still
    emu.wait_until(lambda: emu.read_checkpoint_file()["Data"]["RegisteredDevices"][RES] == ["d0", "d1"], 5)
    assert len(emu.read_checkpoint_file()["Data"]["PodDeviceEntries"]) == 1
    emu.admit(Pod("q", [Container("c", {RES: 1})]))            # the allocation drops it first, then writes
    (entry,) = emu.read_checkpoint_file()["Data"]["PodDeviceEntries"]
    assert entry["PodUID"] != r.pod_uid


def test_k15_k25_restart_round_trip(env):
    emu_, plugin = env
    emu = emu_()
    p = plugin(emu, [dev("d0"), dev("d1")])
    pod = Pod("p", [Container("c", {RES: 1})])
    first = emu.admit(pod)
    emu.restart()
    assert not os.path.exists(p.socket_path)                 # K2: plugin socket deleted
    assert os.path.exists(emu.socket_path) and os.path.exists(emu.checkpoint_path)
    assert emu.assignments(pod.uid) == {"c": {RES: first.containers["c"].devices[RES]}}
    assert RES in emu.resources() and (emu.capacity(RES), emu.allocatable(RES)) == (0, 0)
    again = emu.admit(pod)                                   # re-admission: reuse, no RPC
    assert again.admitted and again.containers["c"].devices == first.containers["c"].devices
    assert len(emu.rpcs("Allocate")) == 1
    p2 = plugin(emu, [dev("d0"), dev("d1")])                 # the plugin registers again, new socket
    assert emu.capacity(RES) == 2 and emu.allocatable(RES) == 2
    other = emu.admit(Pod("q", [Container("c", {RES: 1})]))
    assert other.containers["c"].devices[RES] != first.containers["c"].devices[RES]
    assert len(p2.calls) == 1


def test_k25_restart_without_plugin_deleted_after_grace(env):
    emu_, plugin = env
    emu = emu_(grace_period_s=0.2)
    plugin(emu, [dev("d0")])
    emu.restart()
    emu.wait_until(lambda: RES not in emu.resources(), 5)
    assert emu.read_checkpoint_file()["Data"]["RegisteredDevices"] == {}


def test_k25_reads_kubelet_written_checkpoint():
    d = tempfile.mkdtemp(dir="/tmp", prefix="emu")
    try:
        pd = os.path.join(d, "device-plugins")
        os.makedirs(pd)
        resp = dp.ContainerAllocateResponse(envs={"X": "1"})
        doc = {"Data": {"PodDeviceEntries": [{"PodUID": "uid-1", "ContainerName": "c", "ResourceName": RES,
                                              "DeviceIDs": {"0": ["d0"]},
                                              "AllocResp": base64.b64encode(resp.SerializeToString()).decode()}],
                        "RegisteredDevices": {RES: ["d0", "d1"]}},
               "Checksum": 1234567}
        with open(os.path.join(pd, constants.CHECKPOINT_NAME), "w") as f:
            json.dump(doc, f)
        emu = KubeletEmulator(d).start()
        try:
            assert emu.assignments("uid-1") == {"c": {RES: ["d0"]}}
            assert emu.capacity(RES) == 0 and RES in emu.resources()
        finally:
            emu.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_k33_k35_pod_resources(env):
    emu_, plugin = env
    emu = emu_()
    plugin(emu, [dev("d0", numa=0), dev("d1", numa=1), dev("d2")])
    pod = Pod("p", namespace="ns", containers=[Container("app", {RES: 2})],
              init_containers=[Container("side", {RES: 1}, restart_policy="Always"), Container("init", {})])
    assert emu.admit(pod).admitted
    with emu.pod_resources_channel() as ch:
        stub = pr_grpc.PodResourcesListerStub(ch)
        lst = stub.List(pr.ListPodResourcesRequest(), timeout=5)
        (p,) = lst.pod_resources
        assert (p.name, p.namespace) == ("p", "ns")
        assert [c.name for c in p.containers] == ["side", "app"]          # sidecar listed, plain init not
        app = {d.device_ids[0]: [n.ID for n in d.topology.nodes] for d in p.containers[1].devices}
        assert all(len(d.device_ids) == 1 for d in p.containers[1].devices) and len(app) == 2
        alloc = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
        assert sorted((d.device_ids[0], [n.ID for n in d.topology.nodes]) for d in alloc.devices) == [
            ("d0", [0]), ("d1", [1]), ("d2", [])]
        got = stub.Get(pr.GetPodResourcesRequest(pod_name="p", pod_namespace="ns"), timeout=5)
        assert got.pod_resources.name == "p"
        with pytest.raises(grpc.RpcError) as ei:
            stub.Get(pr.GetPodResourcesRequest(pod_name="nope", pod_namespace="ns"), timeout=5)
        assert ei.value.details() == "pod nope in namespace ns not found"
    m = emu.metrics
    assert m.sample("kubelet_pod_resources_endpoint_requests_total", {"server_api_version": "v1"}) == 4
    assert m.pod_resources.value("kubelet_pod_resources_endpoint_errors_get") == 1


def test_k35_rate_limit(env):
    emu_, _ = env
    emu = emu_()
    with emu.pod_resources_channel() as ch:
        stub = pr_grpc.PodResourcesListerStub(ch)
        codes = []
        for _ in range(40):
            try:
                stub.List(pr.ListPodResourcesRequest(), timeout=5)
                codes.append("OK")
            except grpc.RpcError as e:
                codes.append(e.code().name)
    assert "RESOURCE_EXHAUSTED" in codes and codes[:10] == ["OK"] * 10


def test_k30_k32_metric_names(env):
    emu_, plugin = env
    emu = emu_()
    plugin(emu, [dev("d0")])
    emu.admit(Pod("p", [Container("c", {RES: 1})]))
    with emu.pod_resources_channel() as ch:
        stub = pr_grpc.PodResourcesListerStub(ch)
        stub.List(pr.ListPodResourcesRequest(), timeout=5)
        stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
    text = emu.metrics.exposition().decode()
    for name in ["kubelet_device_plugin_registration_total{", "kubelet_device_plugin_alloc_duration_seconds_bucket{",
                 "kubelet_pod_resources_endpoint_requests_total{", "kubelet_pod_resources_endpoint_requests_list{",
                 "kubelet_pod_resources_endpoint_requests_get_allocatable{",
                 "kubelet_topology_manager_admission_requests_total ",
                 "kubelet_topology_manager_admission_errors_total ",
                 "kubelet_topology_manager_admission_duration_ms_bucket{"]:
        assert name in text, name
    assert "fine buckets below 5 ms" in text


def test_http_api_admit_remove(env):
    emu_, plugin = env
    emu = emu_()
    plugin(emu, [dev("d0")])
    api = HttpApi(emu).start()
    try:
        def call(method, path, body=None):
            req = urllib.request.Request(api.url + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None)
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()
        pod = {"name": "a", "namespace": "ns", "uid": "u-1", "containers": [{"name": "c", "limits": {RES: 1}}]}
        code, body = call("POST", "/pods", pod)
        res = json.loads(body)
        assert code == 200 and res["admitted"] and res["containers"]["c"]["devices"] == {RES: ["d0"]}
        code, body = call("POST", "/pods", dict(pod, uid="u-2", name="b"))
        res = json.loads(body)
        assert not res["admitted"] and res["reason"] == "UnexpectedAdmissionError"
        assert json.loads(call("GET", "/resources")[1]) == {RES: {"capacity": 1, "allocatable": 1}}
        assert [p["uid"] for p in json.loads(call("GET", "/pods")[1])] == ["u-1"]
        assert call("DELETE", "/pods/u-1")[0] == 200
        assert call("DELETE", "/pods/u-1")[0] == 404
        assert b"kubelet_device_plugin_registration_total" in call("GET", "/metrics")[1]
        assert call("POST", "/pods", None)[0] == 400
    finally:
        api.stop()


def test_cli_sigint_removes_sockets():
    d = tempfile.mkdtemp(dir="/tmp", prefix="emu")
    sock = os.path.join(d, "device-plugins", "kubelet.sock")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from dpconform.cli import main; sys.exit(main())",
                             "kubelet", "--dir", d, "--grace-period", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "kubelet.sock never appeared"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err.decode()
        assert not os.path.exists(sock)
        assert not os.path.exists(os.path.join(d, "pod-resources", "kubelet.sock"))
        assert b"listening on" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(d, ignore_errors=True)
