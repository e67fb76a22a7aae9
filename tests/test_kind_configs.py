"""kind-configs/*.yaml decode strictly with kind v0.33.0's own loader (bin/kindcheck), after the
placeholders are filled the way fixtures/cluster/kind.py fills them; a typo is rejected.

bin/kindcheck is built from tools/kindcheck (`make bin/kindcheck`; cached, rebuilt when its go.mod,
go.sum or main.go change). Skipped, saying so, when Go is missing and bin/kindcheck is not there.
"""
from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from dpconform.fixtures.cluster import kind as kindmod
from dpconform.fixtures.cluster.kind import fill_placeholders
from tests.support.make_built import make_built

SOURCES = [kindmod.KIND_MODULE / f for f in ("go.mod", "go.sum", "main.go")]
CONFIGS = sorted(kindmod.CONFIG_DIR.glob("*.yaml"))


@pytest.fixture(scope="module")
def kindcheck() -> Path:
    """bin/kindcheck, built when missing or stale."""
    return make_built("bin/kindcheck", SOURCES)


def filled(path: Path, out_dir: Path) -> Path:
    """The config with its placeholders filled as KindCluster fills them (paths need not exist)."""
    text = fill_placeholders(path.read_text(), {"device_plugin_dir": "/tmp/dpc-kind-x/device-plugins",
                                                "pod_resources_dir": "/tmp/dpc-kind-x/pod-resources",
                                                "cdi_dir": "/tmp/dpc-kind-x/cdi"})
    out = out_dir / path.name
    out.write_text(text)
    return out


def run_kindcheck(binary: Path, *files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *map(str, files)], capture_output=True, text=True, timeout=60)


def test_the_config_set_is_there():
    assert [p.name for p in CONFIGS] == ["cdi.yaml", "default.yaml", "multi-node.yaml", "single-numa-node.yaml"]


def test_every_config_decodes_strictly(kindcheck, tmp_path):
    files = [filled(p, tmp_path) for p in CONFIGS]
    r = run_kindcheck(kindcheck, *files)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{f}: ok" for f in files]


@pytest.mark.parametrize("name,broken,why", [
    ("default.yaml", ("extraMounts:", "extraMount:"), "field extraMount not found in type v1alpha4.Node"),
    ("multi-node.yaml", ("containerPath:", "containerpath:"), "field containerpath not found in type"),
    ("cdi.yaml", ("containerdConfigPatches:", "containerdConfigPatch:"), "field containerdConfigPatch not found"),
    ("single-numa-node.yaml", ("apiVersion: kind.x-k8s.io/v1alpha4", "apiVersion: kind.x-k8s.io/v1alpha3"),
     "unknown apiVersion: kind.x-k8s.io/v1alpha3"),
])
def test_a_broken_config_is_rejected(kindcheck, tmp_path, name, broken, why):
    """Each of our configs with one typo: kind's loader rejects it, naming the file and the field."""
    good = filled(kindmod.CONFIG_DIR / name, tmp_path)
    text = good.read_text()
    old, new = broken
    assert old in text
    bad = tmp_path / f"broken-{name}"
    bad.write_text(text.replace(old, new, 1))
    r = run_kindcheck(kindcheck, good, bad)
    assert r.returncode == 1
    assert r.stdout.splitlines() == [f"{good}: ok"]
    assert r.stderr.startswith(f"{bad}: ") and why in r.stderr, r.stderr


def test_an_unfilled_placeholder_never_reaches_kind():
    """kind would take "{device_plugin_dir}/worker" as a relative path; fill_placeholders refuses to
    pass any placeholder through, so the raw template (or a new placeholder) cannot slip by."""
    raw = (kindmod.CONFIG_DIR / "default.yaml").read_text()
    with pytest.raises(kindmod.KindError, match="unknown placeholder"):
        fill_placeholders(raw, {})


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_shape(path):
    """What the provider and the suite rely on, beyond what kind checks."""
    cfg = yaml.safe_load(fill_placeholders(path.read_text(), {"device_plugin_dir": "/D", "pod_resources_dir": "/P",
                                                              "cdi_dir": "/C"}))
    nodes = cfg["nodes"]
    assert not any("image" in n for n in nodes), "the image comes from the version table (--image), not the config"
    assert nodes[0]["role"] == "control-plane" and "extraMounts" not in nodes[0]
    workers = kindmod.node_names("n", cfg)[1:]
    assert workers and all(node["role"] == "worker" for _, node in workers)
    mounts = kindmod.device_plugin_mounts("n", cfg)
    assert mounts == {name: f"/D/{name.removeprefix('n-')}" for name, _ in workers}
    pod_resources = kindmod.device_plugin_mounts("n", cfg, kindmod.POD_RESOURCES_PATH)
    assert pod_resources == {name: f"/P/{name.removeprefix('n-')}" for name, _ in workers}
    patches = "\n".join(cfg.get("kubeadmConfigPatches") or [])
    containerd = "\n".join(cfg.get("containerdConfigPatches") or [])
    if path.name == "single-numa-node.yaml":
        kubelet = yaml.safe_load(patches)
        assert kubelet == {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                           "topologyManagerPolicy": "single-numa-node"}
    else:
        assert patches == ""
    if path.name == "cdi.yaml":
        assert '[plugins."io.containerd.grpc.v1.cri"]' in containerd and "enable_cdi = true" in containerd
        assert tomllib.loads(containerd) == {"plugins": {"io.containerd.grpc.v1.cri": {
            "enable_cdi": True, "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]}}}
        assert {"hostPath": "/C", "containerPath": "/etc/cdi"} in nodes[1]["extraMounts"]
    else:
        assert containerd == ""
    assert len(workers) == (2 if path.name == "multi-node.yaml" else 1)
