"""The upstream sample device plugin as users deploy it: its DaemonSet (plugin_under_test/deploy), its image,
copies of the manifest each built to break one lifecycle check (CLU-09..13), and a catalogue run on a cluster
backend (tests/test_daemonset_lifecycle.py on the local cluster, tests/test_kind_offline.py on kind)."""
from __future__ import annotations

import json
import subprocess
import sys

from dpconform.fixtures import kube_versions
from tests.support.conformance_runner import ROOT

MANIFEST = ROOT / "plugin_under_test" / "deploy" / "sample-device-plugin-daemonset.yaml"
RESOURCE = "example.com/resource"
LIFECYCLE = ["CLU-09", "CLU-10", "CLU-11", "CLU-12", "CLU-13"]
_MOUNT = "              mountPath: /var/lib/kubelet/device-plugins\n"
_IMAGE_LINE = "          imagePullPolicy: IfNotPresent\n"
# The plugin's second pod (the DaemonSet's replacement) idles instead of serving: a marker in the host
# dir (per run: the namespace) tells it apart from the first.
_IDLE_ON_RESTART = _IMAGE_LINE + """          command: ["/bin/sh", "-c", "m=/var/lib/kubelet/device-plugins/.dpc-ran-$POD_NS; if [ -e $m ]; then exec sleep 2147483647; fi; touch $m; exec /bin/plugin"]
"""
# The plugin never sees SIGTERM (a shell as PID 1 that does not pass it on), so it dies by SIGKILL after
# the grace period and cannot remove its socket.
_NO_SIGTERM = _IMAGE_LINE + """          command: ["/bin/sh", "-c", "/bin/plugin & wait"]
"""
_POD_NS = """            - name: POD_NS
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
"""

# broken manifest -> (edits to the shipped manifest, the checks to run, the checks that must fail)
BROKEN = {
    "no-hostpath-mount": ([(_MOUNT, "              mountPath: /plugins\n")], ["CLU-09"], {"CLU-09"}),
    "idle-on-restart": ([(_IMAGE_LINE, _IDLE_ON_RESTART), ("          env:\n", "          env:\n" + _POD_NS)],
                        ["CLU-09", "CLU-10"], {"CLU-10"}),
    "on-delete-updates": ([("    type: RollingUpdate\n", "    type: OnDelete\n"),
                           ("      maxUnavailable: 1\n      maxSurge: 0\n", "")], ["CLU-11"], {"CLU-11"}),
    # a real finding, not a made-up defect: see the manifest's comment. Up to 1.36 only: from 1.37 the kubelet
    # keeps both instances and a surge keeps capacity, so CLU-11 passes (what MAN-04 recommends there)
    "surge-update": ([("      maxUnavailable: 1\n      maxSurge: 0\n", "      maxUnavailable: 0\n      maxSurge: 1\n")],
                     ["CLU-11"], set() if kube_versions.holds("several-endpoints-per-resource") else {"CLU-11"}),
    "sigterm-never-reaches-plugin": ([(_IMAGE_LINE, _NO_SIGTERM)], ["CLU-13"], {"CLU-13"}),
    "no-revision-history": ([("  revisionHistoryLimit: 5\n", "  revisionHistoryLimit: 0\n")], ["CLU-12"], {"CLU-12"}),
}



def write_image(path) -> str:
    """The sample plugin's image archive (busybox and the static binary; fixtures/node/images.py)."""
    from dpconform.fixtures.node import images
    images.write_plugin_image(str(path), "dpconform.local/sample-device-plugin:1", str(kube_versions.bin_dir() / "sample-device-plugin"))
    return str(path)


def broken_manifest(name: str, tmp_path):
    """A copy of the shipped manifest with BROKEN[name]'s edits."""
    text = MANIFEST.read_text()
    for old, new in BROKEN[name][0]:
        assert old in text, f"{MANIFEST.name} no longer contains {old!r}: update BROKEN[{name!r}]"
        text = text.replace(old, new, 1)
    broken = tmp_path / f"{name}.yaml"
    broken.write_text(text)
    return broken


def run(manifest, image: str, checks: list[str], tmp_path, backend=("--backend", "local")) -> tuple[dict, str]:
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance", "-q", "-s", "-p", "no:cacheprovider",
                           *backend, "--plugin-manifest", str(manifest), "--plugin-image", image,
                           "--resource", RESOURCE, "--checks", ",".join(checks), "--report", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=800)
    out = proc.stdout[-8000:] + proc.stderr[-2000:]
    assert report.exists(), f"no report (exit {proc.returncode}):\n{out}"
    return json.loads(report.read_text()), out
