"""Differential tests: the same scenario on the kubelet emulator and on the real kubelet, same plugin,
compared field by field. The real kubelet twice: standalone (node backend; `make node`, needs root and
`make kube-bins`) and as the node of the local cluster, pods through the API server (local backend,
marked cluster; `make cluster`, also needs `make cluster-bins`). Skipped with one line otherwise.

    make node        # or: .venv/bin/python -m pytest tests/test_differential.py -m "differential and not cluster" -n 0
    make cluster     # the same scenarios against the local cluster

Plugins: the bundled fake-GPU plugin (as root it makes its device nodes real char devices,
which the runtime passes into containers) and the upstream sample device plugin (bin/sample-device-plugin).
Differences that are the real kubelet's behaviour and not the emulator's are fixed in fixtures/kubelet/;
the ones that stay are asserted as such here (KNOWN below) so a change on either side shows up.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import time
import uuid

import grpc
import pytest

from dpconform.fixtures import kube_versions
from dpconform.fixtures.config import SuiteConfig, bundled_health_hook, bundled_plugin_cmd
from dpconform.fixtures.kubelet import Container, Pod
from dpconform.fixtures.launcher import PluginProcess
from dpconform.fixtures.node.differential import (assert_same, checkpoint_view, metric_samples, plugin_calls, plugin_error_line,
                                        pr_allocatable, pr_list_topology, run_both, wait_pr_allocatable)
from dpconform.fixtures.podresources import get_pod, list_pods
from dpconform.fixtures.backends.node import node_unavailable
from dpconform.fixtures.waiting import wait_until
from dpconform.kubeletapi import constants, pr, pr_grpc
from dpconform.plugin_under_test.fakegpu.plugin import ENV_VISIBLE
from tests.support.checkpoint_history import checkpoint_history

pytestmark = [pytest.mark.differential, pytest.mark.timeout(300)]

SAMPLE_CMD = "env PLUGIN_SOCK_DIR={plugin_dir} {kube_bin}/sample-device-plugin"
FAKEGPU = "dpconform.io/fakegpu"
SAMPLE = "example.com/resource"


@pytest.fixture(params=["node", pytest.param("local", marks=pytest.mark.cluster)])
def real(request) -> str:
    """Which real kubelet the emulator is compared with."""
    if request.param == "local":
        from dpconform.fixtures.cluster.local import unavailable
        reason = unavailable()
        if reason:
            pytest.skip(reason)
    return request.param


@pytest.fixture(scope="module", autouse=True)
def _node_host():
    reason = node_unavailable()
    if reason:
        pytest.skip(reason)
    yield


@pytest.fixture(scope="module", autouse=True)
def _one_node_per_module(_node_host):
    """One real node (one local cluster) for all of this module's scenarios: the cases compare facts of
    their own (their resource names, deltas), not a fresh kubelet's totals, and each removes its pods."""
    from dpconform.fixtures.backends.cluster import LocalClusterBackend
    from dpconform.fixtures.backends.node import NodeKubeletBackend
    with NodeKubeletBackend.hold(), LocalClusterBackend.hold():
        yield


@pytest.fixture
def fresh_node():
    """A scenario that reads the kubelet's whole history (its checkpoint file) gets a node of its own: the
    idle held one stops, and the scenario's first view starts a new one."""
    from dpconform.fixtures.backends.node import stop_idle_nodes
    stop_idle_nodes()


@pytest.fixture
def fake_dev_dir():
    """A dev dir of real char devices for fake-GPU commands given explicitly (not the bundled default)."""
    d = tempfile.mkdtemp(prefix="dpcd-", dir="/tmp")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def fakegpu_cmd(dev_dir: str, *args: str) -> str:
    return bundled_plugin_cmd(f"--dev-dir {dev_dir} " + " ".join(args))


def traced_fakegpu(dev_dir: str, *args: str) -> dict:
    """Harness arguments for the fake GPU with its call trace on (plugin_calls) and a health hook."""
    control = os.path.join(dev_dir, "fakegpu.ctl")
    return {"plugin_cmd": fakegpu_cmd(dev_dir, "--control", control, "--log-level", "DEBUG", *args),
            "health_hook": bundled_health_hook(control)}


def _cfg(plugin_cmd=None) -> SuiteConfig:
    # --isolate for the emulator side: the sample plugin registers at the fixed
    # /var/lib/kubelet/device-plugins/kubelet.sock whatever PLUGIN_SOCK_DIR says (the node backend uses it)
    return SuiteConfig(plugin_cmd=plugin_cmd, backend="node", backend_options={"isolate": True})


def _admit(h, name, limits=None, containers=None):
    pod = Pod(name, containers=containers or [Container("c", limits=limits or {})])
    res = h.backend.admit(pod)
    return pod, res


def _fact_admission(h, pod, res) -> dict:
    """Admission as the pod status shows it (the real kubelet: the raw status.message it wrote)."""
    msg = res.status_message if h.backend.name == "emulator" else h.backend.pod_view(pod.uid)[0]
    return {"admitted": res.admitted, "reason": res.reason, "status_message": msg}


# -- registration ------------------------------------------------------------------------------------
@pytest.mark.parametrize("defect", ["wrong-version", "invalid-resource-name"])
def test_registration_rejected(defect, fake_dev_dir, real):
    """The kubelet's error text (emulator record vs the real kubelet's log) and what the plugin got."""
    def scenario(h):
        h.start(register=False)
        wait_until(lambda: h.registrations or not h.plugin.running, 10, "a registration attempt")
        h.plugin.wait_exit(10)
        reg = h.registrations[0]
        return {"accepted": reg.accepted, "kubelet_error": reg.error, "resource": reg.request.resource_name,
                "plugin_saw": plugin_error_line(h), "exit_code": h.plugin.returncode}
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--defect", defect)), scenario, real=real)
    assert_same(got)


# -- capacity / allocatable over the plugin's lifecycle ------------------------------------------------
def _lifecycle(resource: str, health: bool):
    def scenario(h):
        f = {}
        h.start()
        ids = sorted(h.wait_devices())
        f["initial"] = wait_pr_allocatable(h, resource, ids)
        if health:
            h.set_health(ids[0], constants.UNHEALTHY)
            h.wait_health(ids[0], constants.UNHEALTHY)
            f["after_unhealthy"] = wait_pr_allocatable(h, resource, ids[1:])
            h.set_health(ids[0], constants.HEALTHY)
            h.wait_health(ids[0], constants.HEALTHY)
            f["after_recovery"] = wait_pr_allocatable(h, resource, ids)
        h.plugin.stop()
        f["after_plugin_stop"] = wait_pr_allocatable(h, resource, [])
        pod, res = _admit(h, "no-plugin", {resource: 1})
        f["admit_after_plugin_stop"] = _fact_admission(h, pod, res)
        h.backend.remove(pod.uid)
        h.restart_kubelet()
        f["after_kubelet_restart_without_plugin"] = pr_allocatable(h, resource)
        pod, res = _admit(h, "restarted-no-plugin", {resource: 1})
        f["admit_after_kubelet_restart_without_plugin"] = _fact_admission(h, pod, res)
        h.backend.remove(pod.uid)
        h.wait_registered(since=h.relaunch_plugin(), timeout=30)
        f["after_reregister"] = wait_pr_allocatable(h, resource, ids)
        return f
    return scenario


def test_allocatable_lifecycle_fakegpu(real):
    got = run_both(_cfg(), _lifecycle(FAKEGPU, health=True), real=real)
    assert_same(got)


def test_allocatable_lifecycle_sample(real):
    got = run_both(_cfg(SAMPLE_CMD), _lifecycle(SAMPLE, health=False), real=real)
    assert_same(got)


# -- K12: device health in the pod's status (allocatedResourcesStatus) --------------------------------------
def _health_in_pod_status(h) -> dict:
    """What the pod's status shows for its device: once admitted, after the plugin reports it Unhealthy,
    after recovery (None where the kubelet shows nothing: before 1.36)."""
    h.start()
    h.wait_devices()
    pod, res = _admit(h, "health", {FAKEGPU: 1})
    dev = res.containers["c"].devices[FAKEGPU][0]

    def shown(want):
        def now():
            return h.backend.device_health_in_status(res.pod_uid).get("c", {}).get(FAKEGPU, {}).get(dev)
        wait_until(lambda: now() == want, 5, f"{dev} {want} in the pod's status", raise_on_timeout=False)
        return now()
    f = {"admitted": shown(constants.HEALTHY)}
    if f["admitted"] is None:           # the kubelet shows no device health (before 1.36)
        h.backend.remove(pod.uid)
        return f
    h.set_health(dev, constants.UNHEALTHY)
    f["unhealthy"] = shown(constants.UNHEALTHY)
    h.set_health(dev, constants.HEALTHY)
    f["recovered"] = shown(constants.HEALTHY)
    h.backend.remove(pod.uid)
    return f


@pytest.mark.parametrize("defect", ["none", "drop-unhealthy"])
def test_device_health_in_pod_status(defect, fake_dev_dir, real):
    """K12 from 1.36: the kubelet shows each allocated device's health in the pod's status and updates it
    when the plugin reports a change; a device the plugin drops from its list shows Healthy."""
    extra = () if defect == "none" else ("--defect", defect)
    cfg = _cfg()
    got = run_both(cfg, _health_in_pod_status, real=real, **traced_fakegpu(fake_dev_dir, *extra))
    assert_same(got)


# -- the Node's capacity and allocatable (a cluster's view only) -------------------------------------------
def _capacity(resource: str):
    def scenario(h):
        h.start()
        ids = sorted(h.wait_devices())
        n, f = len(ids), {}

        def settled(cap: int, alloc: int) -> tuple[int, int]:
            def now():
                return h.backend.capacity(resource), h.backend.allocatable(resource)
            wait_until(lambda: now() == (cap, alloc), h.t.node_status_timeout, f"capacity {cap}, allocatable {alloc}",
                       raise_on_timeout=False)
            return now()
        f["initial"] = settled(n, n)
        h.set_health(ids[0], constants.UNHEALTHY)
        h.wait_health(ids[0], constants.UNHEALTHY)
        f["one_unhealthy"] = settled(n, n - 1)
        h.set_health(ids[0], constants.HEALTHY)
        h.wait_health(ids[0], constants.HEALTHY)
        f["recovered"] = settled(n, n)
        h.plugin.stop()
        f["plugin_stopped"] = settled(n, 0)     # capacity stays for the 5-minute grace period
        return f
    return scenario


def test_capacity_with_unhealthy_device(real):
    """Capacity counts every advertised device, allocatable only the healthy ones; after the plugin stops
    allocatable is 0 while capacity stays (the grace period). Only a cluster has the Node object."""
    if real == "node":
        pytest.skip("a standalone kubelet has no Node object: compared on the local cluster")
    got = run_both(_cfg(), _capacity(FAKEGPU), real=real)
    assert_same(got)


# -- which devices a pod gets ----------------------------------------------------------------------------
def _choice(resource: str, n: int):
    def scenario(h):
        h.start()
        h.wait_devices()
        pod, res = _admit(h, "choice", {resource: n})
        try:
            return {"admitted": res.admitted, "devices": sorted(res.containers["c"].devices.get(resource, [])),
                    "healthy": h.healthy_ids()}
        finally:
            h.backend.remove(pod.uid)
    return scenario


def test_device_choice_with_preferred(fake_dev_dir, real):
    """The plugin's GetPreferredAllocation answer decides on both kubelets."""
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--numa-nodes", "2")), _choice(FAKEGPU, 2), real=real)
    assert_same(got)


def test_device_choice_without_preferred(fake_dev_dir, real):
    """Without GetPreferredAllocation the kubelet chooses itself. KNOWN: the real kubelet takes from an
    unordered set (any N free devices); the emulator takes the lowest IDs (deterministic). Both: N
    distinct healthy devices."""
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--no-preferred")), _choice(FAKEGPU, 2), real=real)
    for side in got.values():
        assert side["admitted"] and len(side["devices"]) == 2 and set(side["devices"]) <= set(side["healthy"]), got
    assert got["emulator"]["devices"] == got["emulator"]["healthy"][:2], got


# -- what the container really sees ---------------------------------------------------------------------
_STD_DEVS = re.compile(r"^/dev/(null|zero|full|random|urandom|tty|console|ptmx|pts/.*|fuse|net/tun|kmsg)$")


def _container_view(resource: str):
    def scenario(h):
        h.start()
        ids = sorted(h.wait_devices())
        pod, res = _admit(h, "view", {resource: len(ids)})
        try:
            assert res.admitted, res
            return dict(_what_container_sees(h, pod, res.containers["c"]),
                        devices_ids=sorted(res.containers["c"].devices.get(resource, [])))
        finally:
            h.backend.remove(pod.uid)
    return scenario


def _what_container_sees(h, pod, alloc) -> dict:
    """env, device nodes, mounts (and which read-only) of container "c": on a real kubelet what the
    container itself printed, less what the same pod without devices gets; on the emulator its
    ContainerAllocation (what it says the runtime is given)."""
    if h.backend.name != "emulator":
        rep = h.backend.pod_view(pod.uid)[1]
        bpod, base = _admit(h, "baseline", {})   # the same pod without devices: what the runtime adds
        brep = h.backend.pod_view(bpod.uid)[1]
        h.backend.remove(bpod.uid)
        env = {k: v for k, v in rep.env.items() if brep.env.get(k) != v and k != "HOSTNAME"}
        devs = sorted(p for p in _char_devices(rep.dev) if p not in set(_char_devices(brep.dev))
                      and not _STD_DEVS.match(p))
        base_mounts = {m.target for m in brep.mounts}
        mounts = sorted({m.target for m in rep.mounts} - base_mounts)
        ro = sorted(m.target for m in rep.mounts if m.target in mounts and "ro" in m.options.split(","))
    else:
        env = dict(alloc.envs)
        devs = sorted(d.container_path for d in alloc.device_specs)
        mounts = sorted({m.container_path for m in alloc.mounts})
        ro = sorted(m.container_path for m in alloc.mounts if m.read_only)
    # KNOWN: the real kubelet sends devices_ids in Go set order (arbitrary), the emulator sorted;
    # a plugin that lists them in an env var shows that order: compare as sets
    env = {k: ",".join(sorted(v.split(","))) for k, v in env.items()}
    return {"env": env, "dev": devs, "mounts": mounts, "read_only": ro}


def _char_devices(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        parts = line.split()
        if parts and parts[0][:1] in ("c", "b") and parts[-1].startswith("/dev/"):
            out.append(parts[-1])
    return sorted(set(out))


def test_container_view_fakegpu(fake_dev_dir, real):
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--mounts")), _container_view(FAKEGPU), real=real)
    assert_same(got)


def test_container_view_sample(real):
    got = run_both(_cfg(SAMPLE_CMD), _container_view(SAMPLE), real=real)
    assert_same(got)


# -- PodResources List and admission failures -------------------------------------------------------
def _list_and_reject(resource: str, *, preferred: bool):
    """preferred: the plugin implements GetPreferredAllocation, so which container gets which device is
    decided by it on both kubelets. Without it the real kubelet takes from an unordered set (KNOWN, see
    test_device_choice_without_preferred): then only each container's layout and the devices in use are
    compared, not which container holds which."""
    def scenario(h):
        h.start()
        ids = sorted(h.wait_devices())
        f = {}
        pod, res = _admit(h, "too-many", {resource: len(ids) + 1})
        f["too_many"] = _fact_admission(h, pod, res)
        h.backend.remove(pod.uid)
        half = len(ids) // 2
        pod, res = _admit(h, "two", containers=[Container("a", limits={resource: half}),
                                                Container("b", limits={resource: len(ids) - half})])
        try:
            f["two_admitted"] = res.admitted
            listing = pr_list_topology(h)
            f["list"] = listing if preferred else {
                c: [(r, len(dev_ids), numa) for r, dev_ids, numa in devs] for c, devs in listing.items()}
            f["in_use"] = sorted(i for devs in listing.values() for _, dev_ids, _ in devs for i in dev_ids)
        finally:
            h.backend.remove(pod.uid)
        f["list_after_remove"] = pr_list_topology(h)
        return f
    return scenario


def test_pod_resources_and_rejection_fakegpu(real):
    got = run_both(_cfg(), _list_and_reject(FAKEGPU, preferred=True), real=real)
    assert_same(got)


def test_pod_resources_and_rejection_sample(real):
    got = run_both(_cfg(SAMPLE_CMD), _list_and_reject(SAMPLE, preferred=False), real=real)
    assert_same(got)


# -- K19: an Allocate answer without container responses ----------------------------------------------
def test_empty_allocate_response_strands_devices(fake_dev_dir, real):
    """K19: the admission fails with the kubelet's text, and the devices of that call stay counted as
    allocated (the kubelet restores its allocatedDevices after an RPC error, not after this one): with
    two devices the third one-device pod finds none available."""
    def scenario(h):
        h.start()
        h.wait_devices()
        f = {}
        for i in range(3):
            pod, res = _admit(h, f"empty-{i}", {FAKEGPU: 1})
            f[f"pod{i}"] = _fact_admission(h, pod, res)
            h.backend.remove(pod.uid)
        return f
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--devices", "2", "--defect", "empty-response")), scenario,
                   real=real)
    assert_same(got)
    assert "Available: 0" in got["emulator"]["pod2"]["status_message"], got["emulator"]


# -- K5: other resource-name rules --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["kubernetes.io/fakegpu", "requests.example.com/fakegpu", "Example.com/fakegpu",
                                  "example.com/" + "g" * 64, "example.com/-fakegpu"])
def test_resource_name_rules(name, fake_dev_dir, real):
    """K5: each rule of a valid extended resource name, as the kubelet words its refusal."""
    def scenario(h):
        h.start(register=False)
        wait_until(lambda: h.registrations or not h.plugin.running, 10, "a registration attempt")
        reg = h.registrations[0]
        return {"accepted": reg.accepted, "kubelet_error": reg.error}
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--resource", name)), scenario, real=real)
    assert_same(got)


# -- K2: the device-plugin directory cleaned at kubelet start ------------------------------------------
def test_plugin_dir_cleanup_on_start(real):
    """K2: a kubelet (re)start removes every unix socket in the device-plugin dir, keeps regular files,
    subdirectories and its checkpoint."""
    import socket as _socket

    def scenario(h):
        h.start()
        h.wait_devices()
        d = h.backend.plugin_dir
        planted = {"stray.sock": "socket", "notes.txt": "file", "subdir": "dir"}
        s = _socket.socket(_socket.AF_UNIX)
        s.bind(os.path.join(d, "stray.sock"))
        s.close()
        with open(os.path.join(d, "notes.txt"), "w") as f:
            f.write("kept?")
        os.mkdir(os.path.join(d, "subdir"))
        try:
            endpoint = h.registration.request.endpoint
            h.restart_kubelet()
            left = set(os.listdir(d))
            return {"planted_left": sorted(n for n in planted if n in left),
                    "plugin_socket_left": endpoint in left, "kubelet_sock": "kubelet.sock" in left,
                    "checkpoint": constants.CHECKPOINT_NAME in left}
        finally:
            for n in planted:
                path = os.path.join(d, n)
                if os.path.isdir(path):
                    os.rmdir(path)
                elif os.path.lexists(path):
                    os.unlink(path)
    got = run_both(_cfg(), scenario, real=real)
    assert_same(got)


# -- K6 / K7: the dial during Register and the options call -------------------------------------------
def _registration_outcome(h, timeout: float = 30) -> dict:
    h.start(register=False)
    wait_until(lambda: (h.registrations and h.registrations[0].accepted is not None) or not h.plugin.running,
               timeout, "a registration outcome")
    reg = h.registrations[0]
    out = {"accepted": reg.accepted, "kubelet_error": reg.error}
    if reg.accepted:   # what the kubelet lists (the fake GPU's default: 4 devices)
        out["allocatable"] = wait_pr_allocatable(h, FAKEGPU, [f"fakegpu-{i}" for i in range(4)])
    return out


def test_register_before_serving(fake_dev_dir, real):
    """K6: the kubelet dials the plugin's socket before Register returns (blocking, 10 s)."""
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--defect", "register-before-serving")), _registration_outcome,
                   real=real)
    assert_same(got)


def test_slow_options_call(fake_dev_dir, real):
    """K7: GetDevicePluginOptions has no deadline during registration: a plugin that answers in 7 s still
    registers. (How often it is called is not compared: the node backend probes the plugin's socket with
    that call itself.)"""
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--defect", "slow-options")), _registration_outcome, real=real)
    assert_same(got)


def test_failing_options_call(fake_dev_dir, real):
    """K7: a GetDevicePluginOptions that fails fails the registration, with the kubelet's text."""
    def scenario(h):
        out = _registration_outcome(h)
        out["allocatable"] = pr_allocatable(h, FAKEGPU)
        return out
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--defect", "options-error")), scenario, real=real)
    assert_same(got)


# -- K9: a new registration replaces the endpoint -----------------------------------------------------
def test_reregistration_replaces_endpoint(fake_dev_dir, real):
    """K9: a plugin registering its socket again every 0.5 s. Until 1.36 each registration replaces the
    endpoint: the devices stay allocatable and the next Allocate goes to the newest. From 1.37 a registration
    on a socket still connected is refused ("device plugin already connected"), and the first one serves."""
    several = kube_versions.holds("several-endpoints-per-resource")

    def scenario(h):
        h.start()
        ids = sorted(h.wait_devices())
        f = {}
        if several:
            wait_until(lambda: len(h.registrations) >= 3, 30, "the storm's registrations")
            f["refused"] = sorted({re.sub(r"[^/\s]+\.sock", "<its socket>", (r.error or "").replace(
                h.backend.plugin_dir, "<plugin dir>")) for r in h.registrations if not r.accepted})
        else:
            h.wait_registered(count=3, timeout=30)
        f["allocatable"] = wait_pr_allocatable(h, FAKEGPU, ids)
        pod, res = _admit(h, "after-storm", {FAKEGPU: 1})
        h.backend.remove(pod.uid)
        f["admitted"] = res.admitted
        return f
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--defect", "register-storm")), scenario, real=real)
    assert_same(got)


# -- K11: health strings other than "Healthy" ----------------------------------------------------------
def test_health_string_not_exact(fake_dev_dir, real):
    """K11: a device whose health is "healthy" (lower case) is not healthy: not allocatable."""
    def scenario(h):
        h.start()
        ids = sorted(h.wait_devices())
        return {"allocatable": wait_pr_allocatable(h, FAKEGPU, ids[:-1])}
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--defect", "bad-health-string")), scenario, real=real)
    assert_same(got)


# -- K16 / K22 / K23: container order, PreStartContainer, init containers and sidecars -----------------
def _calls(h, *rpcs: str) -> list[dict]:
    return [c for c in plugin_calls(h) if c["rpc"] in rpcs]


def test_init_containers_and_prestart(fake_dev_dir, real):
    """K16: init containers are allocated first; K23: a finished init container's devices go to the
    next container; K22: PreStartContainer for every container start, with its device IDs."""
    def scenario(h):
        h.start()
        h.wait_devices()
        pod = Pod("init", init_containers=[Container("init", limits={FAKEGPU: 2})],
                  containers=[Container("c", limits={FAKEGPU: 2}), Container("d", limits={FAKEGPU: 1})])
        res = h.backend.admit(pod)
        try:
            return {"admitted": res.admitted, "list": pr_list_topology(h),
                    "calls": _calls(h, "GetPreferredAllocation", "Allocate", "PreStartContainer")}
        finally:
            h.backend.remove(pod.uid)
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--pre-start-required", "--log-level", "DEBUG")), scenario,
                   real=real)
    assert_same(got)


def test_sidecar_keeps_its_devices(fake_dev_dir, real):
    """K23: a restartable (sidecar) init container keeps its devices: the next init container and the
    app container cannot reuse them; K33: List shows the sidecar, not the finished init container."""
    def scenario(h):
        h.start()
        h.wait_devices()
        pod = Pod("sidecar", init_containers=[Container("side", limits={FAKEGPU: 1}, restart_policy="Always"),
                                              Container("init", limits={FAKEGPU: 3})],
                  containers=[Container("c", limits={FAKEGPU: 3})])
        res = h.backend.admit(pod)
        try:
            return {"admitted": res.admitted, "list": pr_list_topology(h),
                    "calls": _calls(h, "GetPreferredAllocation", "Allocate")}
        finally:
            h.backend.remove(pod.uid)
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--log-level", "DEBUG")), scenario, real=real)
    assert_same(got)


def test_prestart_failure(fake_dev_dir, real):
    """K22: how a failing PreStartContainer shows: admitted, the container does not start."""
    def scenario(h):
        h.start()
        h.wait_devices()
        pod = Pod("prestart-fails", containers=[Container("c", limits={FAKEGPU: 1})])
        if h.backend.name == "emulator":
            res = h.backend.admit(pod)
            err = res.containers["c"].start_error if res.admitted else None
        else:
            # the real kubelet admits the pod; the container waits with the PreStartContainer error as
            # CreateContainerConfigError (the node backend ends such a pod with that line)
            with pytest.raises(Exception, match="CreateContainerConfigError") as e:
                h.backend.admit(pod)
            err = str(e.value).splitlines()[0].split("CreateContainerConfigError: ", 1)[1]
        h.backend.remove(pod.uid)
        return {"start_error": err, "prestart_calls": len(plugin_calls(h, "PreStartContainer")) > 0}
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--defect", "prestart-fails", "--log-level", "DEBUG")), scenario,
                   real=real)
    assert_same(got)


# -- K24 / K26: the checkpoint file ---------------------------------------------------------------------
def test_checkpoint_file(real, fresh_node):
    """K24: the checkpoint's structure and entries; K26: when it is rewritten: after a ListAndWatch
    message and an allocation, not on a pod's removal (the removed pod stays listed until an
    UpdateAllocatedDevices, here a PodResources List, drops it before the next write). Each view waits for
    the write its row is about (tests/support/checkpoint_history.py)."""
    got = run_both(_cfg(), checkpoint_history, real=real)
    assert_same(got)


# -- K30 / K31 / K32: the kubelet's metrics -------------------------------------------------------------
_METRICS = ("kubelet_device_plugin_", "kubelet_pod_resources_endpoint_", "kubelet_topology_manager_admission_")


def test_metrics(fake_dev_dir, real):
    """K30–K32: which series move, and by how much, for one registration, one admitted pod and one call
    of each PodResources method; the families' types; the histograms' buckets."""
    def delta(before, after, *prefixes):
        return {f"{n}{dict(lb)}": after[(n, lb)] - before.get((n, lb), 0) for n, lb in sorted(after)
                if n.startswith(prefixes) and not n.endswith(("_bucket", "_sum"))
                and after[(n, lb)] != before.get((n, lb), 0)}

    # a resource name of its own: the real kubelet of the node backend lives for the whole session
    resource = f"metrics-{uuid.uuid4().hex[:8]}.dpconform.io/gpu"

    def scenario(h):
        h.start()
        h.wait_devices()
        after_reg, _ = metric_samples(h, _METRICS)
        f = {"registration": {k: v for k, v in delta({}, after_reg, *_METRICS).items() if resource in k}}
        pod, res = _admit(h, "metrics", {resource: 1})
        after_pod, _ = metric_samples(h, _METRICS)
        # PodResources not counted here: the node backend itself asks GetAllocatableResources while admitting
        f["admission"] = delta(after_reg, after_pod, "kubelet_device_plugin_", "kubelet_topology_manager_")
        sock = h.backend.pod_resources_socket()
        list_pods(sock)
        pr_allocatable(h, resource)
        try:
            get_pod(sock, "nonexistent", "default")
        except grpc.RpcError as e:
            f["get_unknown"] = e.details()
        after_pr, types = metric_samples(h, _METRICS)
        f["pod_resources_calls"] = delta(after_pod, after_pr, *_METRICS)
        f["types"] = types
        h.backend.remove(pod.uid)
        for hist in ("kubelet_device_plugin_alloc_duration_seconds", "kubelet_topology_manager_admission_duration_ms"):
            f[f"{hist}_le"] = sorted({float(dict(lb)["le"]) for n, lb in after_pr if n == f"{hist}_bucket"})
        return f
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--resource", resource)), scenario, real=real)
    assert_same(got, known=("kubelet_device_plugin_alloc_duration_seconds_le",))   # the emulator's fine buckets


# -- K35: PodResources Get -------------------------------------------------------------------------------
def test_pod_resources_get(fake_dev_dir, real):
    """K35: Get for a running pod (its devices) and for an unknown one (the error)."""
    def scenario(h):
        h.start()
        h.wait_devices()
        pod, res = _admit(h, "getme", {FAKEGPU: 1})
        sock = h.backend.pod_resources_socket()
        try:
            name, ns = next((p.name, p.namespace) for p in list_pods(sock).pod_resources
                            if any(c.devices for c in p.containers))
            got = get_pod(sock, name, ns).pod_resources
            f = {"containers": sorted((c.name, sorted(i for d in c.devices for i in d.device_ids))
                                      for c in got.containers)}
            try:
                get_pod(sock, "nonexistent", ns)
            except grpc.RpcError as e:
                f["unknown"] = (e.code().name, e.details().replace(ns, "NS"))
            f["burst_of_40_refused"] = _rate_limited_calls(sock, 40) > 0
            return f
        finally:
            h.backend.remove(pod.uid)
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir)), scenario, real=real)
    assert_same(got)


def _rate_limited_calls(sock: str, n: int) -> int:
    """n List calls at once, no retry: how many the kubelet refused with RESOURCE_EXHAUSTED (K35)."""
    refused = 0
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        stub = pr_grpc.PodResourcesListerStub(ch)
        for _ in range(n):
            try:
                stub.List(pr.ListPodResourcesRequest(), timeout=5)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                refused += 1
    return refused


# -- K18: GetPreferredAllocation failing, and reuse of held devices -------------------------------------
def test_preferred_rpc_failure_text(fake_dev_dir, real):
    """K18: a failing GetPreferredAllocation fails the admission with the kubelet's text."""
    def scenario(h):
        h.start()
        h.wait_devices()
        pod, res = _admit(h, "pref-fails", {FAKEGPU: 1})
        try:
            return _fact_admission(h, pod, res)
        finally:
            h.backend.remove(pod.uid)
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--defect", "preferred-unimplemented")), scenario, real=real)
    assert_same(got)


def test_held_devices_reused_after_kubelet_restart(fake_dev_dir, real):
    """K18 step 1, K25: a running pod keeps its devices over a kubelet restart: restored from the
    checkpoint, re-admitted without a new Allocate call."""
    def scenario(h):
        h.start()
        ids = sorted(h.wait_devices())
        pod, res = _admit(h, "held", {FAKEGPU: 2})
        try:
            before = pr_list_topology(h)
            calls = len(plugin_calls(h, "Allocate"))
            h.restart_and_wait(h.restart_kubelet)
            wait_pr_allocatable(h, FAKEGPU, ids)
            # a registered kubelet lists the pod again once it has synced its pods from the API server
            wait_until(lambda: pr_list_topology(h) == before, 15, "the pod listed again", raise_on_timeout=False)
            return {"admitted": res.admitted, "list_before": before, "list_after": pr_list_topology(h),
                    "allocate_calls_after_restart": len(plugin_calls(h, "Allocate")) - calls,
                    "allocate_calls_before": calls}
        finally:
            h.backend.remove(pod.uid)
    got = run_both(_cfg(), scenario, real=real, **traced_fakegpu(fake_dev_dir))
    assert_same(got)


# -- K27 / K28 / K29: topology manager policies on this host's NUMA nodes -------------------------------
def _host_numa_nodes() -> int:
    return len([n for n in os.listdir("/sys/devices/system/node") if re.fullmatch(r"node\d+", n)]) or 1


@pytest.mark.parametrize("policy", ["single-numa-node", "restricted", "best-effort"])
def test_topology_policies(policy, fake_dev_dir, real):
    """K27–K29 on the NUMA nodes this host has (the emulator given the same layout): the fake GPU puts
    half its devices on NUMA node 0 and half on node 1, which a single-NUMA host does not have. A pod
    that fits on node 0, one that cannot, and what the topology manager counted."""
    def scenario(h):
        h.start()
        h.wait_devices()
        f = {}
        for n in (2, 3):
            before, _ = metric_samples(h, ("kubelet_topology_manager_admission_",))
            pod, res = _admit(h, f"topo-{n}", {FAKEGPU: n})
            f[f"request_{n}"] = dict(_fact_admission(h, pod, res),
                                     devices=sorted(res.containers["c"].devices.get(FAKEGPU, [])) if res.admitted else [])
            after, _ = metric_samples(h, ("kubelet_topology_manager_admission_",))
            f[f"request_{n}_metrics"] = {k[0]: after[k] - before.get(k, 0) for k in after
                                         if k[0].endswith("_total") and after[k] != before.get(k, 0)}
            h.backend.remove(pod.uid)
        return f
    base = _cfg(fakegpu_cmd(fake_dev_dir, "--numa-nodes", "2"))
    cfg = dataclasses.replace(base, backend_options={**base.backend_options, "numa_nodes": _host_numa_nodes()})
    got = run_both(cfg, scenario, real=real, topology_policy=policy)
    assert_same(got)


# -- K21: several resources in one container -------------------------------------------------------------
def test_two_resources_in_one_container(fake_dev_dir, real):
    """K21: the answers for two resources merged into one container: device nodes and mounts of both;
    the variable both plugins set holds one plugin's value (the kubelet takes the first in its map order,
    so which one is not fixed on either side)."""
    second = "dpconform.io/fakenic"

    def scenario(h):
        h.start()
        h.wait_devices()
        other = PluginProcess(fakegpu_cmd(os.path.join(fake_dev_dir, "nic"), "--resource", second,
                                          "--id-scheme", "uuid", "--devices", "2", "--numa-nodes", "0"),
                              h.backend.plugin_dir, h.root)
        try:
            other.start()
            nic_ids = wait_until(lambda: sorted(pr_allocatable(h, second)), 15, f"{second} listed")
            pod, res = _admit(h, "two", {FAKEGPU: 2, second: 1})
            try:
                assert res.admitted, res
                seen = _what_container_sees(h, pod, res.containers["c"])
                got = res.containers["c"].devices
                env_value = seen["env"].pop(ENV_VISIBLE, None)
                seen["env_visible_from_one_plugin"] = env_value in (",".join(sorted(got.get(FAKEGPU, []))),
                                                                    ",".join(sorted(got.get(second, []))))
                seen["dev"] = [d.replace(nic_id, "NIC") for d in seen["dev"] for nic_id in nic_ids if nic_id in d
                               ] + [d for d in seen["dev"] if not any(n in d for n in nic_ids)]
                seen["counts"] = {r: len(v) for r, v in sorted(got.items())}
                return seen
            finally:
                h.backend.remove(pod.uid)
        finally:
            other.stop()
    got = run_both(_cfg(fakegpu_cmd(fake_dev_dir, "--mounts")), scenario, real=real)
    assert_same(got)


# -- K14: the resource removed after the endpoint's grace period -----------------------------------------
EMULATOR_GRACE_S = 5.0


@pytest.mark.timeout(600)
def test_resource_removed_after_grace_period(real):
    """K14: after the plugin stops, capacity stays and allocatable is 0 for the grace period (5 minutes),
    then the resource goes (capacity 0) and the checkpoint no longer names it. Only a cluster shows it:
    the kubelet deletes the resource when it computes the Node's status. The emulator's grace period is
    shortened to 5 s (the real one is waited for): compared are the states and the removal time as a
    multiple of the grace period."""
    if real == "node":
        pytest.skip("a standalone kubelet computes no Node status, where the resource is removed: local cluster")

    def scenario(h):
        grace = constants.ENDPOINT_STOP_GRACE_PERIOD_S
        if h.backend.name == "emulator":
            h.backend.emulator.grace_period_s = grace = EMULATOR_GRACE_S
        h.start()
        n = len(h.wait_devices())
        wait_until(lambda: h.backend.capacity(FAKEGPU) == n, h.t.node_status_timeout, "capacity listed")
        t_begin = time.monotonic()      # the kubelet's grace clock starts while stop() runs (the stream ends)
        h.plugin.stop()
        t0 = time.monotonic()

        def state():
            return h.backend.capacity(FAKEGPU), h.backend.allocatable(FAKEGPU)
        wait_until(lambda: state() == (n, 0), h.t.node_status_timeout, "allocatable 0", raise_on_timeout=False)
        f = {"after_stop": state()}
        wait_until(lambda: state()[0] == 0, grace * 1.3 + 10, "the resource removed", interval=0.2,
                   raise_on_timeout=False)
        now = time.monotonic()
        elapsed, since_begin = now - t0, now - t_begin
        f["removed"] = state()
        # the kubelet checks the grace period when it computes the Node's status (every second here), the
        # emulator every second: on time, within a quarter of the period (a busy host delays status updates);
        # not before the period counted from the start of the stop (its clock may start before stop() returns)
        f["removed_after_the_grace_period"] = grace <= since_begin and elapsed <= grace * 1.25 + 2
        print(f"{h.backend.name}: resource removed {elapsed:.1f} s after the plugin stopped ({since_begin:.1f} s "
              f"after the stop began; grace {grace:g} s)")
        f["checkpoint_names_it"] = FAKEGPU in checkpoint_view(h)["registered"]
        return f
    got = run_both(_cfg(), scenario, real=real)
    assert_same(got)
