"""The node backend end to end: real kubelet + containerd + the upstream sample device plugin.

Needs root and `make kube-bins`; skipped (one-line reason) otherwise. Run: `make node`, or
    .venv/bin/python -m pytest tests/test_node_backend.py -m node -n 0
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dpconform.fixtures import kube_versions
from dpconform.fixtures.procs import alive, stop_group
from dpconform.fixtures.node import NodeBackend, NodeUnavailable, check_host
from dpconform.fixtures.node.util import pids_with_arg
from tests.support.conformance_runner import messages, outcomes

pytestmark = [pytest.mark.node, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PLUGIN = kube_versions.bin_dir() / "sample-device-plugin"
RESOURCE = "example.com/resource"
SAMPLE_DEVICES = ("Dev-1", "Dev-2")


def _skip_unless_node_host() -> None:
    try:
        check_host()
    except NodeUnavailable as e:
        pytest.skip(str(e))


def test_sample_device_plugin_on_real_kubelet(tmp_path):
    _skip_unless_node_host()
    daemons: list[int] = []
    with NodeBackend(keep_logs_dir=tmp_path / "logs") as node:
        base = node.base
        daemons = [node.kubelet.daemon.pid, node.containerd.daemon.pid]
        plugin_log = open(tmp_path / "sample-device-plugin.log", "wb")
        plugin = subprocess.Popen([str(SAMPLE_PLUGIN)], env={"PATH": os.environ.get("PATH", ""),
                                                             "PLUGIN_SOCK_DIR": node.plugin_dir},
                                  stdout=plugin_log, stderr=plugin_log, start_new_session=True)
        try:
            assert node.wait_for_resource(RESOURCE, count=2, timeout=30) == 2
            assert node.allocatable_devices()[RESOURCE] == list(SAMPLE_DEVICES)

            r = node.run_static_pod("dp-sample", limits={RESOURCE: 1})
            assert r.admitted, f"{r.reason}: {r.message}"
            assert r.report is not None
            given = [m for m in r.report.mounts if m.target in {f"/tmp/{d}" for d in SAMPLE_DEVICES}]
            assert len(given) == 1, f"expected one /tmp/Dev-N mount, got {r.report.mounts}"

            # PodResources agrees on which device the container got
            pods = {p.name: p for p in node.pod_resources().pod_resources}
            assert r.pod_name in pods
            devs = [d for c in pods[r.pod_name].containers for d in c.devices if d.resource_name == RESOURCE]
            assert [i for d in devs for i in d.device_ids] == [given[0].target.rsplit("/", 1)[1]]
            assert "kubelet_device_plugin_registration_total" in node.metrics()

            node.delete_static_pod("dp-sample")

            # more than there is: the kubelet refuses the pod at admission
            r = node.run_static_pod("dp-too-many", limits={RESOURCE: 3})
            assert not r.admitted and r.phase == "Failed"
            assert r.reason == "UnexpectedAdmissionError" and RESOURCE in r.message, (r.reason, r.message)
            node.delete_static_pod("dp-too-many")

            # a kubelet restart re-creates kubelet.sock; the sample plugin registers again
            node.restart_kubelet()
            assert node.wait_for_resource(RESOURCE, count=2, timeout=30) == 2
        finally:
            stop_group(plugin, grace=10)
            plugin_log.close()

    # torn down: no daemon of ours, nothing running from our root, root gone
    assert not [p for p in daemons if alive(p)]
    assert not pids_with_arg(base)
    assert not os.path.exists(base)
    assert not os.path.exists(os.path.join(node.plugin_dir, "kubelet.sock"))
    assert not any(os.path.isdir(os.path.join("/sys/fs/cgroup", h, "kubepods")) for h in os.listdir("/sys/fs/cgroup"))


def test_a_dead_kubelet_ends_a_wait_at_once():
    """The one wait lets fatal errors through: the real kubelet killed during a wait fails it within
    2 s naming the kubelet, instead of waiting out the re-registration timeout."""
    from dpconform.fixtures.backends import KubeletDied
    from dpconform.fixtures.backends.node import node_unavailable
    from dpconform.fixtures.config import SuiteConfig
    from dpconform.fixtures.harness import Harness
    reason = node_unavailable()
    if reason:
        pytest.skip(reason)
    import time
    h = Harness(SuiteConfig(backend="node"))
    try:
        h.start()
        h.wait_devices()
        h.backend.node.kubelet.daemon.proc.kill()
        t0 = time.monotonic()
        with pytest.raises(KubeletDied, match="kubelet"):
            h.wait_registered(count=2, timeout=60)
        assert time.monotonic() - t0 < 2
    finally:
        h.close()


def test_nvml_plugin_on_fake_nvml_on_real_kubelet():
    """The NVML plugin (fake NVML, 8 GPUs on 2 NUMA nodes) passes what the node backend runs; the one
    finding is LAW-04's advisory: this host has one NUMA node, the fake GPUs claim two."""
    _skip_unless_node_host()
    py = shlex.quote(sys.executable)
    ctl = "{plugin_dir}/../nvml.ctl"
    report_path = REPO / "reports" / f".nvml-node-{os.getpid()}.json"
    report_path.parent.mkdir(exist_ok=True)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--backend", "node", "-n", "0",
             "--plugin-cmd", f"{py} -m dpconform nvml-plugin --nvml fake --health-recovery --control {ctl} "
                             "--plugin-dir {plugin_dir}",
             "--health-hook", f"{py} -m dpconform nvml-plugin health --control {ctl} {{device}} {{health}}",
             "--expected-devices", "8", "--resource", "nvidia.com/gpu", "--report", str(report_path)],
            cwd=REPO, capture_output=True, text=True, timeout=280)
        report = json.loads(report_path.read_text())
    finally:
        report_path.unlink(missing_ok=True)
    got = outcomes(report)
    bad = {c: o for c, o in got.items() if o not in ("passed", "skipped") and (c, o) != ("LAW-04", "warned")}
    assert not bad, f"{bad}\n{messages(report, bad)}\n{proc.stdout[-4000:]}"
    assert sum(o == "passed" for o in got.values()) >= 40, got
