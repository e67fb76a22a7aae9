"""The suite as a user meets it: bad input gets one readable line, a broken plugin never drags the run
out, the MAN checks read manifests, and the NVML plugin on the fake NVML passes the catalogue."""
import shlex
import subprocess
import sys

import pytest

from tests.support.conformance_runner import ROOT, messages, outcomes, run_suite

PY = shlex.quote(sys.executable)
MAN = "--checks=MAN-01,MAN-02,MAN-03,MAN-04,MAN-05"


def pytest_conformance(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, needle", [
    (["--plugin-cmd", "/no/such/plugin --flag"], "--plugin-cmd: '/no/such/plugin' does not exist or is not executable"),
    (["--plugin-cmd", "no-such-plugin-binary"], "--plugin-cmd: 'no-such-plugin-binary' is not on PATH"),
    (["--plugin-cmd", "'unbalanced"], "--plugin-cmd cannot be parsed"),
    (["--health-hook", "ctl {device}"], "--health-hook must contain {device} and {health}"),
    (["--backend", "nope"], "--backend 'nope' is not one of emulator, node, local, kind, kubeconfig"),
    (["--manifest", "/no/such.yaml"], "--manifest /no/such.yaml: no such file"),
    (["--checks", "XYZ-99"], "--checks: unknown check ID 'XYZ-99'; `dpconform checks` lists them"),
    # options a backend declares (fixtures/backends/options.py), validated the same way
    (["--keep-cluster"], "--keep-cluster only applies to --backend kind"),
    (["--numa-nodes", "9"], "--numa-nodes must be 1..8 (the kubelet's limit), got 9"),
    (["--kind-config", "/no/such.yaml", "--backend", "kind"], "--kind-config /no/such.yaml: no such file"),
])
def test_bad_option_is_one_line(args, needle):
    proc = pytest_conformance(*args)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr


def test_unreachable_cluster_is_one_error_line(tmp_path):
    """--backend kubeconfig with an API server that does not answer: exit 4 and one ERROR: line naming the
    server and the fix, not a run of skipped checks."""
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                  "users: [{name: u, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                  "current-context: x\n")
    proc = pytest_conformance("--backend", "kubeconfig", "--kubeconfig", str(kc), "--checks", "REG-01,ALC-01,CLU-01",
                              timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR: --backend kubeconfig" in ln]
    assert len(lines) == 1, proc.stdout + proc.stderr
    assert "the API server at https://127.0.0.1:1 did not answer" in lines[0] and "check that the cluster is up" in lines[0]


def test_a_run_that_checked_nothing_does_not_pass():
    """Every selected check skipped (here a cluster check on the emulator): exit 6 (not pytest's 4, a usage
    error or an unusable cluster) and one ERROR line with the reason; --allow-skips accepts such a run."""
    from dpconform.fixtures.report_collector import NOTHING_CHECKED_EXIT
    proc = pytest_conformance("--checks", "CLU-01,CLU-02")
    assert proc.returncode == NOTHING_CHECKED_EXIT == 6, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("ERROR:")]
    assert len(errors) == 1, proc.stdout
    assert "every selected check (2) was skipped, so nothing was checked" in errors[0], errors[0]
    assert "--backend emulator: this check reads the Node object" in errors[0], errors[0]
    assert "--allow-skips" in errors[0], errors[0]
    proc = pytest_conformance("--checks", "CLU-01,CLU-02", "--allow-skips")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [ln for ln in proc.stdout.splitlines() if ln.startswith("ERROR:")], proc.stdout


def test_plugin_that_never_registers_fails_fast():
    report, out = run_suite([], extra=["--plugin-cmd", "sleep 600"], timeout=120)
    got = outcomes(report)
    assert got["REG-01"] == "failed", out
    reg01 = messages(report, ["REG-01"])     # the report, not the output's tail (42 error lines may push it out)
    assert "never called Register" in reg01 or "did not register" in reg01, reg01 + out
    assert sum(c["duration"] for c in report["checks"]) < 60, "later checks must not wait out the timeout again"


def test_manifest_checks(tmp_path):
    good = ROOT / "plugin_under_test/deploy/nvml-daemonset.yaml"
    proc = pytest_conformance(MAN, "--manifest", str(good), "--strict", "--resource", "nvidia.com/gpu")
    assert proc.returncode == 0, proc.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("mountPath: /var/lib/kubelet/device-plugins", "mountPath: /plugins")
                   .replace("maxUnavailable: 0", "maxUnavailable: 1").replace("maxSurge: 1", "maxSurge: 0"))
    proc = pytest_conformance(MAN, "--manifest", str(bad), "--report", str(tmp_path / "r.json"))
    assert proc.returncode == 1, proc.stdout
    import json
    got = {c["id"]: c["outcome"] for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert got["MAN-01"] == "failed" and got["MAN-04"] == "warned", got
    notyaml = tmp_path / "x.yaml"
    notyaml.write_text("a: [")
    proc = pytest_conformance(MAN, "--manifest", str(notyaml))
    assert "not valid YAML" in proc.stdout, proc.stdout


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="--isolate needs root (unshare + bind mount)")
def test_isolate_serves_a_plugin_with_the_default_path_compiled_in():
    plugin = f"{PY} -m dpconform fakegpu --plugin-dir /var/lib/kubelet/device-plugins"
    report, out = run_suite([], checks=["REG-01", "REG-04", "ALC-01"], extra=["--isolate", "--plugin-cmd", plugin])
    assert set(outcomes(report).values()) == {"passed"}, out
