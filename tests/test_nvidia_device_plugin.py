"""NVIDIA's device plugin (the version tools/nvidia-device-plugin/go.mod pins), a plugin nobody here wrote, through
the whole catalogue on the emulator: built from the Go module proxy (`make bin/nvidia-device-plugin`), NVML from
our mock library (bin/mock-nvml on LD_LIBRARY_PATH: an 8-GPU DGX A100), its compiled-in socket path served by
--isolate, its own DaemonSet manifest from its module for the MAN checks, and the mock's control socket as its
health hook.

The verdict, and why each finding is what it is (from the kubelet's source and from how NVIDIA deploys it):
- passed, with four advisories: REG-08 (a fixed socket name, nvidia-gpu.sock), ALC-09 (it allocates a device it
  reports Unhealthy: the kubelet itself asks only for healthy ones, devicemanager's devicesToAllocate), MAN-04 and
  MAN-05 (its DaemonSet rolls without a surge and runs on every node);
- PRS-04 skipped: its DaemonSet updates with maxSurge 0, so a second instance never runs beside the first (without
  --manifest PRS-04 fails it: the kubelet refuses the second instance on the reused socket name);
- REG-06 passes after 30 s: it retries a rejected Register every 30 s (REG-06's window is 35 s for that reason);
- LAW-07 checks the Unhealthy transition only: it never marks a GPU Healthy again while it runs (its hook says so);
- the TOP checks run: it reads a GPU's NUMA node from sysfs (/sys/bus/pci/devices/<bus id>/numa_node), so its
  command mounts a tree with the mock's GPUs over that dir in its private mount namespace (--isolate's).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpconform.fixtures.cluster import kind as kindmod
from dpconform.fixtures.node import release_verdicts
from tests.support.conformance_runner import FAST, _run, outcomes
from tests.support.make_built import REPO, make_built
from dpconform.plugin_under_test.nvml.sysfs import sysfs_bus_id
from tests.support.mock_nvml import built as mock_built, pynvml_says, unsupported_calls

WRAPPER = REPO / "tools" / "nvidia-device-plugin"
ADVISED = {"ALC-09", "MAN-04", "MAN-05", "REG-08"}

pytestmark = [pytest.mark.third_party,
              pytest.mark.skipif(os.geteuid() != 0, reason="--isolate (its compiled-in socket path) needs root")]


def manifest() -> str:
    """Its static DaemonSet, from its module (deployments/static/nvidia-device-plugin.yml)."""
    r = subprocess.run([kindmod._go() or "go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/k8s-device-plugin"], cwd=WRAPPER,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    return os.path.join(r.stdout.strip(), "deployments", "static", "nvidia-device-plugin.yml")


def pci_tree(mock: Path, root: Path) -> Path:
    """root/<bus id>/numa_node for each GPU of the mock's node, as sysfs has them for real GPUs."""
    gpus = pynvml_says(mock, """
    hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    out["gpus"] = [[pynvml.nvmlDeviceGetPciInfo(h).busId, pynvml.nvmlDeviceGetNumaNodeId(h)] for h in hs]
    """)["gpus"]
    for bus_id, numa in gpus:
        (root / sysfs_bus_id(bus_id)).mkdir(parents=True)
        (root / sysfs_bus_id(bus_id) / "numa_node").write_text(f"{numa}\n")
    return root


def run_catalogue(tmp_path, monkeypatch, *backend_args: str) -> tuple[dict, dict, str, set[str]]:
    """The whole catalogue on NVIDIA's plugin: (report, outcomes by check, console, the NVML functions it called
    that the mock answers "Not Supported": its stubs log them)."""
    plugin = make_built("bin/nvidia-device-plugin", [WRAPPER / "go.mod", WRAPPER / "go.sum"])
    mock = mock_built()
    tree = pci_tree(mock, tmp_path / "pci-devices")
    mount = f"sh -c 'mount --bind {tree} /sys/bus/pci/devices && exec {plugin}'"
    # its compiled-in socket path: the emulator serves it in --isolate's mount namespace, where the sysfs tree is
    # mounted too; a real kubelet serves it for real, so the mount goes in a namespace of the plugin's own
    real = "--backend" in backend_args
    cmd = f"unshare -m --propagation private {mount}" if real else mount
    ctl = str(tmp_path / "nvml.ctl")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(mock.parent))           # the run passes them on to the plugin
    monkeypatch.setenv("DPCONFORM_MOCK_NVML_CONTROL", ctl)
    unsupported = tmp_path / "unsupported.log"
    monkeypatch.setenv("DPCONFORM_MOCK_NVML_UNSUPPORTED_LOG", str(unsupported))
    report = str(tmp_path / "report.json")
    fast = list(FAST)
    fast[fast.index("--rejected-retry-window") + 1] = "35"            # its retry comes after 30 s
    doc, out = _run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider",
                     *([] if real else ["--isolate"]),
                     "--plugin-cmd", cmd, "--resource", "nvidia.com/gpu", "--expected-devices", "8",
                     "--manifest", manifest(), "--health-hook",
                     f"{sys.executable} -m dpconform nvml-plugin health --control {ctl} {{device}} {{health}}",
                     "--report", report, *backend_args, *fast], report, None, timeout=600)
    return doc, outcomes(doc), out, unsupported_calls(unsupported)


# What NVIDIA's plugin may call that the mock answers "Not Supported", and why that is what a real node answers.
NOT_SUPPORTED_AS_ON_A_NODE = {
    "nvmlDeviceGetNvLinkState": "GPUs without NVLink answer so (the mock's GPUs have none): its allocator then "
                                "aligns by PCIe topology (nvmlDeviceGetTopologyCommonAncestor)",
}


def test_nvidia_device_plugin_passes_the_catalogue_on_the_emulator(tmp_path, monkeypatch):
    doc, got, out, unsupported = run_catalogue(tmp_path, monkeypatch)
    assert doc["verdict"] == "passed" and doc["plugin"]["devices"] == 8, out
    assert {c for c, o in got.items() if o == "warned"} == ADVISED, out
    assert not {c for c, o in got.items() if o in ("failed", "error")}, out
    assert got["PRS-04"] == "skipped" and got["REG-06"] == "passed" and got["LAW-07"] == "passed", out
    assert {got[c] for c in ("TOP-01", "TOP-02", "TOP-03")} == {"passed"}, out
    assert any("does not mark a device Healthy again" in n for n in doc["notes"]), doc["notes"]
    assert unsupported <= set(NOT_SUPPORTED_AS_ON_A_NODE), f"NVML functions the mock does not implement: {unsupported}"


@pytest.mark.node
def test_nvidia_device_plugin_passes_the_catalogue_on_the_real_kubelet(tmp_path, monkeypatch):
    """On a real kubelet the suite's own ListAndWatch stream is a second client, and this plugin sends each
    health change on one stream only (the kubelet's, waiting first): LAW-07 passes from the kubelet's view
    (fixtures/health_flips.py; before, it failed: "health-not-sent")."""
    doc, got, out, unsupported = run_catalogue(tmp_path, monkeypatch, "--backend", "node")
    assert not {c for c, o in got.items() if o in ("failed", "error")}, out
    assert doc["verdict"] == "passed" and doc["plugin"]["devices"] == 8, out
    assert got["LAW-07"] == "passed" and got["PRS-04"] == "skipped", out
    # LAW-04 warns where the host has fewer NUMA nodes than the mock's GPUs name (a one-node host: its sysfs tree)
    assert {c for c, o in got.items() if o == "warned"} <= ADVISED | set(release_verdicts.HOST_DEPENDENT), out
    assert unsupported <= set(NOT_SUPPORTED_AS_ON_A_NODE), f"NVML functions the mock does not implement: {unsupported}"
    release_verdicts.assert_recorded("nvidia", tmp_path / "report.json")     # the README's release table
