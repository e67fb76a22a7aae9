"""`pytest conformance --backend kind --kind-offline` for real, on this machine: kind v0.33.0 creates the
cluster from the node image built here (fixtures/cluster/kind_base.py, kind_node.py) in the private Docker
Engine (fixtures/cluster/engine.py), the catalogue runs against the fake GPU, and afterwards no process,
container, network interface, mount or file of it is left. One-node (a control plane and one worker,
kind-configs/default.yaml) and two-worker (multi-node.yaml) clusters. On the one-node cluster the whole
catalogue runs, after the same catalogue on `--backend local`: the two must agree check by check and match the
recording the README's table is rendered from (fixtures/cluster/kind_verdicts.py). Marked kind: `make kind`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from dpconform.fixtures.cluster import kind_verdicts
from dpconform.fixtures.waiting import wait_until
from tests.support.conformance_runner import ROOT, messages, outcomes
from tests.support.host import host_state

pytestmark = pytest.mark.kind


def conformance(tmp_path, backend: str, *args, timeout=1200):
    """`pytest conformance --backend BACKEND` (kind: offline) with `args`: (the process, its JSON report's
    path and contents); fails when it wrote no report."""
    report = tmp_path / f"{backend}.json"
    extra = ["--kind-offline"] if backend == "kind" else []
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:randomly", "-p",
                           "no:cacheprovider", "--backend", backend, *extra, "--report", str(report), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert report.is_file(), proc.stdout[-4000:] + proc.stderr[-3000:]
    return proc, report, json.loads(report.read_text())


def run(tmp_path, backend: str, *args, timeout=1200):
    """conformance() that must pass on the fake GPU; the report's path."""
    proc, report, doc = conformance(tmp_path, backend, *args, timeout=timeout)
    bad = {c["id"]: c["outcome"] for c in doc["checks"] if c["outcome"] in ("failed", "error")}
    assert not bad and proc.returncode == 0, (backend, bad, proc.stdout[-4000:])
    assert doc["plugin"]["resource"] == "dpconform.io/fakegpu"
    return report


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("config, checks", [
    ("kind-configs/default.yaml", None),
    pytest.param("kind-configs/multi-node.yaml", "REG-01,REG-03,LAW-01,ALC-01,KRS-01,CLU-01,CLU-02,CLU-03,CLU-04",
                 marks=pytest.mark.smoke),        # the presubmit's (make kind-smoke): about 90 s
    ("kind-configs/multi-node.yaml", ""),         # the whole catalogue, on the first worker (make kind-periodic)
], ids=["one-worker", "two-workers", "two-workers-catalogue"])
def test_catalogue_on_an_offline_kind_cluster(tmp_path, config, checks):
    focus = ["--checks", checks] if checks else []
    local = run(tmp_path, "local") if checks is None else None    # one worker: local first, to compare
    before = host_state()
    kind = run(tmp_path, "kind", "--kind-config", config, *focus)
    if local is not None:
        kind_verdicts.assert_agree(local, kind)
    wait_until(lambda: host_state() == before, 30, "the engine's processes to be gone", raise_on_timeout=False)
    assert host_state() == before


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("broken", [None, "no-hostpath-mount"])
def test_sample_plugin_daemonset_on_an_offline_kind_cluster(tmp_path, broken):
    """The plugin as users deploy it, on kind: the upstream sample plugin's DaemonSet, its image loaded with
    `kind load image-archive`, through the lifecycle checks (CLU-09..13); a copy of its manifest without the
    hostPath mount fails CLU-09 alone, as on the local cluster (tests/test_daemonset_lifecycle.py)."""
    from tests.support import sample_daemonset as ds
    image = ds.write_image(tmp_path / "sample-device-plugin.tar")
    manifest = ds.MANIFEST if broken is None else ds.broken_manifest(broken, tmp_path)
    checks, must_fail = (ds.LIFECYCLE, set()) if broken is None else ds.BROKEN[broken][1:]
    before = host_state()
    report, out = ds.run(manifest, image, checks, tmp_path, backend=("--backend", "kind", "--kind-offline"))
    got = outcomes(report)
    assert set(got) == set(checks), got
    assert {c for c, o in got.items() if o != "passed"} == must_fail, f"{got}\n{messages(report, got)}\n{out}"
    wait_until(lambda: host_state() == before, 30, "the engine's processes to be gone", raise_on_timeout=False)
    assert host_state() == before


FAKEGPU_MANIFEST = ROOT / "plugin_under_test" / "deploy" / "fakegpu-daemonset.yaml"


@pytest.mark.timeout(1500)
def test_fakegpu_daemonset_on_an_offline_kind_cluster(tmp_path):
    """The fake GPU as users would deploy it, on kind: its image written here (fixtures/node/python_image.py:
    this host's Python, the package and gRPC, no registry), loaded with `kind load image-archive`, and its
    DaemonSet (plugin_under_test/deploy/fakegpu-daemonset.yaml) as the plugin runner of the whole catalogue:
    the lifecycle checks CLU-09..13 pass, and so does every other check that runs (the Allocate checks find
    the device nodes it makes on the worker, a hostPath the runtime there uses). About 5 minutes."""
    from dpconform.fixtures.node import python_image
    image = tmp_path / "fakegpu.tar"
    python_image.write_fakegpu_image(str(image))
    before = host_state()
    proc, _, doc = conformance(tmp_path, "kind", "--plugin-manifest", str(FAKEGPU_MANIFEST), "--plugin-image",
                               str(image), "--resource", "dpconform.io/fakegpu")
    got = outcomes(doc)
    bad = {c: o for c, o in got.items() if o in ("failed", "error")}
    assert not bad and proc.returncode == 0, f"{bad}\n{messages(doc, bad)}\n{proc.stdout[-4000:]}"
    assert {got[c] for c in ("CLU-09", "CLU-10", "CLU-11", "CLU-12", "CLU-13", "ALC-01", "REG-01")} == {"passed"}, got
    wait_until(lambda: host_state() == before, 30, "the engine's processes to be gone", raise_on_timeout=False)
    assert host_state() == before


@pytest.mark.timeout(1200)
def test_single_numa_node_policy_on_kind(tmp_path):
    """kind-configs/single-numa-node.yaml: every kubelet's topology manager at single-numa-node. The fake GPU
    names NUMA nodes 0 and 1; where the host lacks one (this project's machines have one NUMA node) the
    policy refuses pods that need devices on it: the checks that need such a pod admitted are blocked by
    LAW-04 (which warns), not failed; POD-02 sees the topology manager reject more devices than there are."""
    proc, _, doc = conformance(tmp_path, "kind", "--kind-config", "kind-configs/single-numa-node.yaml",
                               "--checks", "REG-01,ALC-01,LAW-04,POD-02,CLU-05,PRS-03", timeout=1100)
    got = outcomes(doc)
    assert not {c for c, o in got.items() if o in ("failed", "error")}, (got, proc.stdout[-4000:])
    blocked = {c: m for c, m in ((c["id"], c.get("message") or "") for c in doc["checks"]) if got[c] == "blocked"}
    assert all("blocked by LAW-04" in m and "NUMA nodes this host lacks" in m for m in blocked.values()), blocked
    assert not blocked or got["LAW-04"] == "warned", got
    assert got["POD-02"] == "passed" and got["REG-01"] == got["ALC-01"] == "passed", got


@pytest.mark.timeout(900)
def test_cdi_config_on_the_offline_node_image(tmp_path):
    """kind-configs/cdi.yaml on the offline node image: the cluster starts and the checks pass, and the run says
    that its containerd (Debian's 1.6) has no CDI, so the config's enable_cdi does nothing there."""
    proc, _, doc = conformance(tmp_path, "kind", "--kind-config", "kind-configs/cdi.yaml", "--checks",
                               "REG-01,ALC-01,CLU-01", timeout=800)
    assert set(outcomes(doc).values()) == {"passed"}, proc.stdout[-4000:]
    assert "runs Debian's containerd 1.6, which has no CDI" in proc.stderr, proc.stderr[-3000:]


def _plugins() -> set[str]:
    """The bundled plugin's processes (pid and command line)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True).stdout
    return {ln.strip() for ln in out.splitlines() if "dpconform fakegpu" in ln and " Z" not in ln[:12]}


@pytest.mark.timeout(900)
def test_sigterm_in_the_middle_of_a_kind_run_leaves_nothing(tmp_path):
    """SIGTERM (as `timeout` or a CI job's cancel sends it, to the run's process group) once the plugin serves
    on the kind cluster: the cluster, the private engine and its processes, links, mounts and dirs go, the
    partial report says interrupted, the exit code is pytest's interrupted code."""
    before, plugins_before = host_state(), _plugins()
    report = tmp_path / "kind.json"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:randomly", "-p",
                             "no:cacheprovider", "--backend", "kind", "--kind-offline", "--report", str(report)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        def serving() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the run ended (exit {proc.returncode}) before its plugin served")
            return bool(_plugins() - plugins_before)
        wait_until(serving, 600, "the run's plugin serving on the kind cluster")
        os.kill(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 2, f"exit {proc.returncode}, not pytest's interrupted code:\n{out[-3000:]}"
    doc = json.loads(report.read_text())
    assert doc["verdict"] == "interrupted" and doc["interrupted"] == "SIGTERM", out[-3000:]
    wait_until(lambda: host_state() == before, 30, "the engine's processes to be gone", raise_on_timeout=False)
    assert host_state() == before and not _plugins() - plugins_before, out[-3000:]
