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

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from fixtures.config import SuiteConfig, bundled_plugin_cmd
from fixtures.kubelet import Container, Pod
from fixtures.node.differential import (assert_same, plugin_error_line, pr_allocatable, pr_list_topology, run_both,
                                        wait_pr_allocatable)
from fixtures.backends.node import node_unavailable
from fixtures.waiting import wait_until
from kubeletapi import constants

pytestmark = [pytest.mark.differential, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CMD = f"env PLUGIN_SOCK_DIR={{plugin_dir}} {REPO / 'bin' / 'sample-device-plugin'}"
FAKEGPU = "dpconform.io/fakegpu"
SAMPLE = "example.com/resource"


@pytest.fixture(params=["node", pytest.param("local", marks=pytest.mark.cluster)])
def real(request) -> str:
    """Which real kubelet the emulator is compared with."""
    if request.param == "local":
        from fixtures.cluster.local import unavailable
        reason = unavailable()
        if reason:
            pytest.skip(reason)
    return request.param


@pytest.fixture(scope="module", autouse=True)
def _node_host():
    reason = node_unavailable()
    if reason:
        pytest.skip(reason)
    made = [Path("/tmp") / d for d in ("Dev-1", "Dev-2") if not (Path("/tmp") / d).exists()]
    yield
    for p in made:   # the sample plugin's Allocate creates /tmp/<ID>
        if p.exists():
            p.unlink()


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


def _cfg(plugin_cmd=None) -> SuiteConfig:
    # --isolate for the emulator side: the sample plugin registers at the fixed
    # /var/lib/kubelet/device-plugins/kubelet.sock whatever PLUGIN_SOCK_DIR says (the node backend uses it)
    return SuiteConfig(plugin_cmd=plugin_cmd, backend="node", isolate=True)


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
            alloc = res.containers["c"]
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
                # the emulator's ContainerAllocation: what it says the runtime is given (fixtures/kubelet)
                env = dict(alloc.envs)
                devs = sorted(d.container_path for d in alloc.device_specs)
                mounts = sorted({m.container_path for m in alloc.mounts})
                ro = sorted(m.container_path for m in alloc.mounts if m.read_only)
            # KNOWN: the real kubelet sends devices_ids in Go set order (arbitrary), the emulator sorted;
            # a plugin that lists them in an env var shows that order: compare as sets
            env = {k: ",".join(sorted(v.split(","))) for k, v in env.items()}
            return {"devices_ids": sorted(alloc.devices.get(resource, [])), "env": env, "dev": devs,
                    "mounts": mounts, "read_only": ro}
        finally:
            h.backend.remove(pod.uid)
    return scenario


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
