"""MAN – deployment manifest lint (from the seeds' pitfalls). Reads --manifest PATH (a DaemonSet YAML)."""
import pytest

from dpconform.fixtures import kube_versions
from dpconform.fixtures.checks import check, expect, shown
from dpconform.fixtures.manifest import (DEVICE_PLUGIN_PATH, ManifestError, daemonsets, hostpath_mount_finding, name,
                                         pod_spec, surges, update_strategy)


@pytest.fixture(scope="module")
def manifests(suite_config):
    if not suite_config.manifest:
        pytest.skip("needs --manifest PATH (your plugin's DaemonSet YAML)")
    try:
        return daemonsets(suite_config.manifest)
    except ManifestError as exc:
        pytest.fail(str(exc), pytrace=False)


@check("MAN-01", spec="K1")
def test_MAN_01_hostpath_mount(manifests):
    """MAN-01: the DaemonSet mounts the kubelet device-plugin dir via hostPath at the same path."""
    for ds in manifests:
        finding = hostpath_mount_finding(ds)
        expect(finding is None, f"a hostPath volume {DEVICE_PLUGIN_PATH} mounted at {DEVICE_PLUGIN_PATH}", finding,
               "mount the host's device-plugin dir at the same path, or the kubelet never sees your socket")


@check("MAN-02", "advisory")
def test_MAN_02_least_privilege(manifests):
    """MAN-02: allowPrivilegeEscalation false and capabilities drop ALL."""
    for ds in manifests:
        for c in pod_spec(ds).get("containers", []):
            sc = c.get("securityContext") or {}
            drops = [d.upper() for d in (sc.get("capabilities") or {}).get("drop", [])]
            expect(sc.get("allowPrivilegeEscalation") is False and "ALL" in drops,
                   "allowPrivilegeEscalation: false and capabilities.drop [ALL]",
                   f"{name(ds)}/{c.get('name')}: {shown(sc) if sc else 'no securityContext'}",
                   "drop all capabilities; add back only what the plugin needs, with a comment why")


@check("MAN-03", "advisory")
def test_MAN_03_priority_and_tolerations(manifests, suite_config):
    """MAN-03: priorityClassName system-node-critical and a toleration for the resource's taint."""
    for ds in manifests:
        spec = pod_spec(ds)
        expect(spec.get("priorityClassName") == "system-node-critical", "priorityClassName: system-node-critical",
               f"{name(ds)}: {spec.get('priorityClassName') or 'none'}", "set priorityClassName: system-node-critical in the "
               "pod template (a plugin evicted under pressure takes the node's devices with it)")
        tols = spec.get("tolerations", [])
        keys = {t.get("key") for t in tols}
        wanted = suite_config.resource
        ok = any(t.get("operator") == "Exists" and not t.get("key") for t in tols) or \
            (wanted in keys if wanted else bool(tols))
        expect(ok, f"a toleration for {wanted or 'the resource'} taint", f"{name(ds)}: {shown(tols) if tols else 'none'}",
               "tolerate the taint GPU nodes carry (e.g. key nvidia.com/gpu, operator Exists)")


@check("MAN-04", "advisory", spec="K9, K14")
def test_MAN_04_update_keeps_capacity(manifests, suite_config):
    """MAN-04: the update strategy suits the kubelet's release: from 1.37 a surge (maxUnavailable 0, maxSurge 1) keeps capacity, as the kubelet keeps both instances; before 1.37 a surge leaves the devices unhealthy when the old pod exits (the kubelet replaced its endpoint, K9), so maxSurge 0 (maxUnavailable 1: about a second without the resource) is the safe one."""
    release = kube_versions.release(suite_config.kube_version).name
    several = kube_versions.holds("several-endpoints-per-resource", suite_config.kube_version)
    for ds in manifests:
        strategy = update_strategy(ds)
        ru = strategy.get("rollingUpdate") or {}
        surge = surges(ds)
        on_delete = strategy.get("type") == "OnDelete"
        if several:
            keeps = on_delete or surge or str(ru.get("maxUnavailable", 1)) in ("0", "0%")
            expect(keeps, f"maxUnavailable: 0 with maxSurge: 1 (or OnDelete) for kubelet {release}",
                   f"{name(ds)}: {shown(strategy)}", "during a rolling update the resource disappears from the node between "
                   "old and new pod; from kubelet 1.37 a surge keeps both instances registered where each start "
                   "names its socket afresh (REG-08; PRS-04 checks that your plugin can run twice)")
        else:
            expect(on_delete or not surge, f"maxSurge: 0 (maxUnavailable: 1, or OnDelete) for kubelet {release}",
                   f"{name(ds)}: {shown(strategy)}", f"on kubelet {release} the old pod's exit after a surge marks the "
                   "resource's devices unhealthy although the new pod registered (K9): update with maxUnavailable 1, "
                   "maxSurge 0, or send your device list again after the old pod is gone")


@check("MAN-05", "advisory")
def test_MAN_05_node_selection(manifests):
    """MAN-05: a nodeSelector or node affinity limits the plugin to nodes with the hardware."""
    for ds in manifests:
        spec = pod_spec(ds)
        expect(spec.get("nodeSelector") or (spec.get("affinity") or {}).get("nodeAffinity"),
               "a nodeSelector or nodeAffinity on the nodes with the hardware",
               f"{name(ds)}: runs on every node", "select the nodes with your hardware, e.g. the NFD label "
               "feature.node.kubernetes.io/pci-<class>_<your PCI vendor ID>.present, or a label your node setup sets")
