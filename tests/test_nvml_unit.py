"""The NVML plugin's parts, in-process, on the fake NVML (no GPU needed)."""
from __future__ import annotations

import contextlib
import os
import tempfile
import shutil
import time
import types

import grpc
import pynvml
import pytest

from dpconform.kubeletapi import constants, dp
from dpconform.plugin_under_test.kit import DeviceState
from dpconform.plugin_under_test.nvml import backend, cli, real_nvml
from dpconform.plugin_under_test.nvml.allocation import Topology
from dpconform.plugin_under_test.nvml.config import ConfigError, load as load_config
from dpconform.plugin_under_test.nvml.discovery import discover, to_device, topology_levels
from dpconform.protocols import control_socket
from dpconform.plugin_under_test.nvml.fake_nvml import FakeNvml, error_class
from dpconform.plugin_under_test.nvml.health import HealthMonitor, parse_disable_healthchecks
from dpconform.plugin_under_test.nvml.servicer import NvmlServicer
from dpconform.plugin_under_test.nvml.sysfs import numa_node_from_sysfs, sysfs_bus_id

H, U = constants.HEALTHY, constants.UNHEALTHY


@pytest.fixture
def nvml():
    lib = backend.load("fake")
    lib.nvmlInit()
    try:
        yield lib
    finally:
        lib.close()


@pytest.fixture
def gpus(nvml):
    return discover(nvml)


@pytest.fixture
def servicer(nvml, gpus):
    def make(strategies=("envvar",), id_strategy="uuid"):
        state = DeviceState([to_device(g) for g in gpus])
        return NvmlServicer(state, gpus, topology_levels(nvml, gpus), resource_name="nvidia.com/gpu",
                            strategies=list(strategies), id_strategy=id_strategy)
    return make


class AbortContext:
    """Enough of grpc.ServicerContext for unary handlers: abort raises."""
    class Aborted(Exception):
        pass

    def abort(self, code, details):
        self.code, self.details = code, details
        raise self.Aborted(details)


# ------------------------------------------------------------------------------- fake NVML itself
def test_fake_raises_real_pynvml_errors():
    lib = FakeNvml({"devices": [{"uuid": "GPU-a"}], "initError": "DriverNotLoaded"})
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        lib.nvmlInit()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        lib.nvmlDeviceGetCount()
    ok = FakeNvml({"devices": [{"uuid": "GPU-a", "numa": None}]})
    ok.nvmlInit()
    h = ok.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        ok.nvmlDeviceGetNumaNodeId(h)
    es = ok.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_Timeout):
        ok.nvmlEventSetWait(es, 10)
    assert error_class("GPU_IS_LOST") is error_class("GpuIsLost") is pynvml.NVMLError_GpuIsLost
    assert ok.NVML_TOPOLOGY_SYSTEM == pynvml.NVML_TOPOLOGY_SYSTEM
    ok.close()


def test_fake_pci_info_is_shaped_like_pynvml(nvml):
    info = nvml.nvmlDeviceGetPciInfo(nvml.nvmlDeviceGetHandleByIndex(3))
    assert info.busId == b"00000000:5D:00.0" and isinstance(info.busId, bytes)
    assert info.bus == 0x5D


# ------------------------------------------------------------------------------------ discovery
def test_discovery_8_gpus_2_numa_by_uuid(nvml, gpus):
    """One device per GPU, ID = UUID, NUMA from the topology (4 + 4), all Healthy."""
    assert [g.index for g in gpus] == list(range(8))
    devices = [to_device(g) for g in gpus]
    assert all(d.ID.startswith("GPU-") and d.health == H for d in devices)
    assert len({d.ID for d in devices}) == 8
    assert [d.topology.nodes[0].ID for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_device_without_numa_has_no_topology():
    lib = FakeNvml({"devices": [{"uuid": "GPU-x", "numa": None}]})
    lib.nvmlInit()
    [gpu] = discover(lib)
    assert gpu.numa is None and not to_device(gpu).HasField("topology")
    lib.close()


def test_sysfs_numa_lookup(tmp_path):
    assert sysfs_bus_id(b"00000000:3B:00.0\x00") == "0000:3b:00.0"
    node_dir = tmp_path / "bus/pci/devices/0000:3b:00.0"
    node_dir.mkdir(parents=True)
    (node_dir / "numa_node").write_text("1\n")
    assert numa_node_from_sysfs(b"00000000:3B:00.0", root=str(tmp_path)) == (True, 1)
    (node_dir / "numa_node").write_text("-1\n")
    assert numa_node_from_sysfs("00000000:3B:00.0", root=str(tmp_path)) == (True, None)
    assert numa_node_from_sysfs("00000000:AA:00.0", root=str(tmp_path)) == (False, None)


def test_real_backend_numa_falls_back_to_nvml(tmp_path, monkeypatch):
    """Real backend: sysfs first; a missing sysfs entry falls back to nvmlDeviceGetNumaNodeId."""
    monkeypatch.setattr(real_nvml, "SYSFS_ROOT", str(tmp_path))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPciInfo", lambda h: types.SimpleNamespace(busId=b"00000000:3B:00.0"))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetNumaNodeId", lambda h: 1)
    assert real_nvml.numa_node(object()) == 1
    node_dir = tmp_path / "bus/pci/devices/0000:3b:00.0"
    node_dir.mkdir(parents=True)
    (node_dir / "numa_node").write_text("0")
    assert real_nvml.numa_node(object()) == 0
    (node_dir / "numa_node").write_text("-1")
    assert real_nvml.numa_node(object()) is None


# --------------------------------------------------------------------------- preferred allocation
def _pref(servicer_obj, gpus, available, size, must=()):
    uuid = {g.index: g.uuid for g in gpus}
    req = dp.PreferredAllocationRequest(container_requests=[dp.ContainerPreferredAllocationRequest(
        available_deviceIDs=[uuid[i] for i in available], must_include_deviceIDs=[uuid[i] for i in must],
        allocation_size=size)])
    resp = servicer_obj.GetPreferredAllocation(req, AbortContext())
    index = {g.uuid: g.index for g in gpus}
    return sorted(index[d] for d in resp.container_responses[0].deviceIDs)


@pytest.mark.parametrize("available, size, must, expected", [
    (range(8), 2, (), [0, 1]),                 # closest pair (same PCIe switch) on one NUMA node
    (range(8), 4, (), [0, 1, 2, 3]),           # a whole NUMA node
    ([0, 2, 4, 5, 6], 3, (), [4, 5, 6]),       # NUMA first: node 1 can hold all three
    ([0, 2, 4, 6], 2, (), [0, 2]),             # no switch pair free: same NUMA node (NODE level)
    ([1, 2, 3, 4, 5], 2, (), [4, 5]),          # equal pairs: best fit keeps NUMA 0's three together
    ([0, 1, 4, 5], 2, [4], [4, 5]),            # must-include decides the node
    ([0, 4, 5], 2, [0], [0, 4]),               # cross-NUMA when unavoidable
    ([1, 3, 4, 5, 6, 7], 5, (), [1, 4, 5, 6, 7]),  # spans nodes: all of node 1 + one (ties: lowest index)
])
def test_preferred_allocation_packs_numa_then_topology(servicer, gpus, available, size, must, expected):
    assert _pref(servicer(), gpus, list(available), size, must) == expected


def test_preferred_allocation_greedy_path_is_sane(monkeypatch):
    """Beyond the exhaustive limit the greedy path still keeps one NUMA node when it can."""
    import dpconform.plugin_under_test.nvml.allocation as alloc
    monkeypatch.setattr(alloc, "EXHAUSTIVE_LIMIT", 0)
    ids = [f"g{i}" for i in range(16)]
    numa = {d: i // 8 for i, d in enumerate(ids)}
    levels = {(a, b): (10 if ia // 2 == ib // 2 else 40 if numa[a] == numa[b] else 50)
              for ia, a in enumerate(ids) for ib, b in enumerate(ids) if a != b}
    topo = Topology(numa=numa, index={d: i for i, d in enumerate(ids)}, levels=levels)
    chosen = alloc.preferred(ids[6:], [], 4, topo)
    assert len(chosen) == 4 and len({numa[d] for d in chosen}) == 1


# ----------------------------------------------------------------------------------- Allocate
def _allocate(svc, ids):
    req = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])
    return svc.Allocate(req, AbortContext()).container_responses[0]


def test_allocate_envvar(servicer, gpus):
    r = _allocate(servicer(["envvar"]), [gpus[3].uuid, gpus[1].uuid])
    assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{gpus[3].uuid},{gpus[1].uuid}"}
    assert not r.mounts and not r.annotations and not r.cdi_devices


def test_allocate_envvar_index_ids(servicer, gpus):
    r = _allocate(servicer(["envvar"], id_strategy="index"), [gpus[3].uuid, gpus[1].uuid])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == "3,1"


def test_allocate_volume_mounts(servicer, gpus):
    r = _allocate(servicer(["volume-mounts"]), [gpus[0].uuid, gpus[5].uuid])
    assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.host_path, m.container_path) for m in r.mounts] == [
        ("/dev/null", f"/var/run/nvidia-container-devices/{gpus[0].uuid}"),
        ("/dev/null", f"/var/run/nvidia-container-devices/{gpus[5].uuid}")]


def test_allocate_cdi_annotations_and_cri(servicer, gpus):
    r = _allocate(servicer(["cdi-annotations", "cdi-cri"]), [gpus[2].uuid, gpus[6].uuid])
    [(key, value)] = r.annotations.items()
    assert key.startswith("cdi.k8s.io/nvidia-device-plugin_")
    assert value == f"nvidia.com/gpu={gpus[2].uuid},nvidia.com/gpu={gpus[6].uuid}"
    assert [c.name for c in r.cdi_devices] == [f"nvidia.com/gpu={gpus[2].uuid}", f"nvidia.com/gpu={gpus[6].uuid}"]
    assert not r.envs


def test_allocate_unknown_device_is_invalid_argument(servicer, gpus):
    ctx = AbortContext()
    req = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=["GPU-nope"])])
    with pytest.raises(AbortContext.Aborted):
        servicer().Allocate(req, ctx)
    assert ctx.code == grpc.StatusCode.INVALID_ARGUMENT and "GPU-nope" in ctx.details


# -------------------------------------------------------------------------------------- config
def test_config_yaml_env_flags_precedence(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\nflags:\n  failOnInitError: false\n  plugin:\n"
                    "    deviceListStrategy: [volume-mounts, cdi-annotations]\n    deviceIDStrategy: index\n")
    cfg = load_config(str(path), environ={})
    assert (cfg.fail_on_init_error, cfg.device_list_strategy, cfg.device_id_strategy) == \
        (False, ["volume-mounts", "cdi-annotations"], "index")
    cfg = load_config(str(path), environ={"FAIL_ON_INIT_ERROR": "true", "DEVICE_LIST_STRATEGY": "envvar"})
    assert cfg.fail_on_init_error is True and cfg.device_list_strategy == ["envvar"]
    cfg = load_config(str(path), {"fail_on_init_error": False}, environ={"FAIL_ON_INIT_ERROR": "true"})
    assert cfg.fail_on_init_error is False
    cfg = load_config(None, environ={"DP_PLUGIN_DIR": "/x"})  # plugin dir env is read by the default
    assert cfg.resource_name == "nvidia.com/gpu"
    with pytest.raises(ConfigError, match="deviceListStrategy"):
        load_config(None, {"device_list_strategy": "bogus"}, environ={})


def test_plugin_dir_default(monkeypatch):
    monkeypatch.setenv("DP_PLUGIN_DIR", "/tmp/somewhere")
    assert load_config(None, environ={}).plugin_dir == "/tmp/somewhere"
    monkeypatch.delenv("DP_PLUGIN_DIR")
    assert load_config(None, environ={}).plugin_dir == "/var/lib/kubelet/device-plugins"


def test_disable_healthchecks_parsing():
    assert parse_disable_healthchecks("all") == (True, set())
    assert parse_disable_healthchecks("XIDs") == (True, set())
    assert parse_disable_healthchecks("48, 79") == (False, {48, 79})
    assert parse_disable_healthchecks(None) == (False, set())


# -------------------------------------------------------------------------------------- health
@contextlib.contextmanager
def running_monitor(lib, gs, wait_timeout_ms=100, **kw):
    """A started, ready HealthMonitor over the GPUs gs: yields (state, monitor), stops it on exit."""
    state = DeviceState([to_device(g) for g in gs])
    mon = HealthMonitor(lib, gs, state.set_health, wait_timeout_ms=wait_timeout_ms, **kw)
    mon.start()
    try:
        assert mon.ready.wait(5)
        yield state, mon
    finally:
        mon.stop()


@pytest.fixture
def monitored(nvml, gpus):
    """monitored(**kw): a running HealthMonitor on the fake; returns (state, monitor)."""
    with contextlib.ExitStack() as stack:
        yield lambda **kw: stack.enter_context(running_monitor(nvml, gpus, **kw))


def _health(state):
    return {d.ID: d.health for d in state.snapshot()}


def _wait_for(state, predicate, timeout=5.0):
    """Wait on the state's change condition until predicate(health map) holds (5 s budget)."""
    deadline = time.monotonic() + timeout
    version = state.version
    while not predicate(_health(state)):
        left = deadline - time.monotonic()
        assert left > 0, f"condition not reached within {timeout} s: {_health(state)}"
        version = state.wait_changed(version, left)


def _wait_change(state, version, timeout=5.0):
    new = state.wait_changed(version, timeout)
    assert new != version, "no health change within 5 s"
    return new


def test_xid_79_marks_only_that_gpu(nvml, gpus, monitored):
    state, _ = monitored()
    v = state.version
    nvml.inject_xid(5, 13)     # ignored application XID first: events are handled in order
    nvml.inject_xid(3, 79)
    _wait_change(state, v)
    assert _health(state) == {g.uuid: (U if g.index == 3 else H) for g in gpus}


def test_extra_ignored_xid(nvml, gpus, monitored):
    state, _ = monitored(ignored_xids={13, 31, 43, 45, 68, 109, 48})
    v = state.version
    nvml.inject_xid(gpus[2].uuid, 48)
    nvml.inject_xid(gpus[4].uuid, 79)
    _wait_change(state, v)
    assert [u for u, h in _health(state).items() if h == U] == [gpus[4].uuid]


def test_event_wait_failure_marks_all(nvml, gpus, monitored):
    state, _ = monitored()
    nvml.fail_next_wait("Unknown")
    _wait_for(state, lambda h: set(h.values()) == {U})


def test_register_not_supported_marks_unhealthy():
    lib = FakeNvml({"devices": [{"uuid": "GPU-old", "eventsSupported": False}, {"uuid": "GPU-new"}]})
    lib.nvmlInit()
    try:
        with running_monitor(lib, discover(lib), wait_timeout_ms=50) as (state, _):
            assert _health(state) == {"GPU-old": U, "GPU-new": H}
    finally:
        lib.close()


def test_recovery_only_when_enabled(nvml, gpus, monitored):
    state, _ = monitored(recovery=True)
    v = state.version
    nvml.inject_xid(3, 79)
    v = _wait_change(state, v)
    assert _health(state)[gpus[3].uuid] == U
    assert nvml.recover(3)["ok"]
    _wait_change(state, v)
    assert set(_health(state).values()) == {H}


def test_recover_cli_is_unsupported_without_recovery(capsys):
    """The outside-process control path: `recover` exits 3 when the plugin does not listen for it."""
    d = tempfile.mkdtemp(dir="/tmp")
    try:
        ctl = os.path.join(d, "ctl.sock")
        lib = FakeNvml(None, control=ctl)
        lib.nvmlInit()
        gs = discover(lib)
        try:
            with running_monitor(lib, gs) as (state, _):
                assert control_socket.request(ctl, {"op": "status"})["devices"][3]["listeners"] == 1
                assert cli.main(["recover", "--control", ctl, "3"]) == 3
                assert "unsupported" in capsys.readouterr().err
                assert cli.main(["inject-xid", "--control", ctl, "GPU-nope", "79"]) == 1
                assert cli.main(["health", "--control", ctl, gs[3].uuid, "Unhealthy"]) == 0
                _wait_for(state, lambda h: h[gs[3].uuid] == U)
                assert [u for u, h in _health(state).items() if h == U] == [gs[3].uuid]
        finally:
            lib.close()
        assert not os.path.exists(ctl), "control socket left behind"
        assert cli.main(["status", "--control", ctl]) == 4
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------------------------ manifests
def test_deploy_manifests_follow_the_guidance():
    import yaml
    from pathlib import Path
    deploy = Path(__file__).resolve().parents[1] / "plugin_under_test/deploy"
    ds = yaml.safe_load((deploy / "nvml-daemonset.yaml").read_text())
    cm = yaml.safe_load((deploy / "nvml-configmap.yaml").read_text())
    spec = ds["spec"]["template"]["spec"]
    [ctr] = spec["containers"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["nodeSelector"] == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                           "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in ctr["volumeMounts"]}
    assert vols["device-plugin"]["hostPath"]["path"] == mounts["device-plugin"]["mountPath"] \
        == "/var/lib/kubelet/device-plugins"
    assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"]
    config_file = f'{mounts["config"]["mountPath"]}/{vols["config"]["configMap"]["items"][0]["path"]}'
    assert ctr["args"] == ["--config", config_file]
    assert ctr["command"] == ["dpconform", "nvml-plugin"]
    cfg_path = Path(tempfile.mkdtemp(dir="/tmp")) / "config.yaml"
    try:
        cfg_path.write_text(cm["data"]["config.yaml"])
        cfg = load_config(str(cfg_path), environ={})
        assert cfg.nvml == "real" and cfg.fail_on_init_error and cfg.resource_name == "nvidia.com/gpu"
    finally:
        shutil.rmtree(cfg_path.parent, ignore_errors=True)
