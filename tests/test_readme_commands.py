"""Every command README.md shows in a code block is run here, from the repo root, as the README spells it.

The commands are read out of README.md's code blocks (fenced and indented; `\\` continuations joined,
`# comments` dropped). Each one a user would type (first word make, pytest, dpconform, python or curl)
must be claimed by exactly one entry of SPECS, a pattern on the command, which says how to run it:
  - SUBST: placeholders replaced ("/usr/local/bin/my-plugin ..." -> the bundled fake-GPU plugin); each
    must still occur in the README's command, so a README edit that drops one fails here instead of
    silently testing something else;
  - APPEND: options added, only to send outputs to a temp dir or shorten what the README calls minutes;
  - what to assert on besides exit 0: the summary table, the JSON report, the result files.
`make` targets get REPORT_DIR=<tmp>/reports in their environment (the Makefile's own variable) and
outputs go to a temp dir. Files a command reads by a relative path (my.yaml, the baseline) are written
under the repo's reports/ (ignored by git), in a directory of the test's own that is removed afterwards:
an absolute path there would not be what the README shows, and pytest takes a bare existing path outside
the repo for a test path when it looks for its rootdir (`--load-profile /elsewhere/my.yaml` fails with
"unrecognized arguments"; `--load-profile=/elsewhere/my.yaml` works). A README command no spec claims,
or a spec whose command left the README, fails test_every_readme_command_is_covered.

The commands take ~2.5 min together (two whole conformance runs of ~40 s each, four load runs of 8-16 s),
one test each, so `make test -n 2` spreads them over its workers like the defect matrix's suite runs: at
most two heavy subprocesses at once, whichever tests they belong to. (No xdist_group: pytest 9.2 keeps
the node ID in `_id`, so pytest-xdist 3.8's `--dist loadgroup`, which rewrites `item._nodeid`, groups
nothing.)
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from typing import Callable

import pytest
import yaml

from dpconform.fixtures import kube_versions
from dpconform.fixtures.waiting import wait_until
from dpconform.fixtures.node import release_verdicts
from tests.support.verdicts import EMULATOR_SKIPS

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
VENV_BIN = pathlib.Path(sys.executable).parent        # .venv/bin: pytest, dpconform, python
COMMAND_WORDS = ("make", "pytest", "dpconform", "python", "curl")
FAKEGPU = "python -m dpconform fakegpu --plugin-dir {plugin_dir}"   # stands in for "your plugin"


# ----- reading the README ---------------------------------------------------------------------------
def code_blocks(text: str) -> list[list[str]]:
    """Fenced (```) blocks and indented (4 spaces after a blank line) blocks, as lists of lines."""
    blocks: list[list[str]] = []
    lines = text.splitlines()
    i, prev_blank = 0, True
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            body, i = [], i + 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append(body)
            i, prev_blank = i + 1, False
            continue
        if prev_blank and line.startswith("    ") and line.strip():
            body = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            blocks.append(body)
            prev_blank = True
            continue
        prev_blank = not line.strip()
        i += 1
    return blocks


def strip_comment(line: str) -> str:
    """Drop a shell comment (` # ...` outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def readme_commands(text: str | None = None) -> list[str]:
    """The commands of README.md's code blocks a user would type, whitespace collapsed."""
    out = []
    for block in code_blocks(README.read_text() if text is None else text):
        joined, cur = [], ""
        for line in block:
            cur += line.strip() + " "
            if not line.rstrip().endswith("\\"):
                joined.append(cur)
                cur = ""
            else:
                cur = cur.rstrip()[:-1]
        for cmd in joined:
            cmd = " ".join(strip_comment(cmd).split())
            if cmd.split(" ", 1)[0] in COMMAND_WORDS:
                out.append(cmd)
    return out


# ----- how each command is run ------------------------------------------------------------------------
@dataclasses.dataclass
class Spec:
    id: str
    match: str                                  # regex, re.match against the README command
    subst: tuple[tuple[str, str], ...] = ()     # (README text, what runs); <TMP>, <REL>: see Where
    append: str = ""                            # options added (outputs to <TMP>, a shorter run)
    timeout: float = 120
    check: Callable[[str, "Where"], None] | None = None       # (output, where) -> asserts
    prepare: Callable[["Where"], None] | None = None          # writes what the command reads (my.yaml, ...)
    fallback: str | None = None                 # run this when the README does not show the command (yet)
    runner: str = "run"                         # "run": one subprocess; "session": test_emulator_session
    exempt: str | None = None                   # why it is not run here
    marks: tuple = ()
    exit_codes: tuple[int, ...] = (0,)          # what the command may exit with (1: a documented finding)

    def build(self, readme_cmd: str, where: "Where") -> str:
        cmd = readme_cmd
        for old, new in self.subst:
            assert old in cmd, (f"README command changed: {old!r} is no longer in `{readme_cmd}`; update "
                                f"SPECS[{self.id}] in tests/test_readme_commands.py")
            cmd = cmd.replace(old, new)
        if self.append:
            cmd = f"{cmd} {self.append}"
        return cmd.replace("<TMP>", str(where.tmp)).replace("<REL>", where.rel)


@dataclasses.dataclass
class Where:
    tmp: pathlib.Path   # <TMP>: the test's temp dir (absolute), for outputs
    rel: str            # <REL>: reports/.readme-commands-XXXX, relative to the repo root, for inputs

    @property
    def rel_path(self) -> pathlib.Path:
        assert self.rel.startswith("reports/.readme-commands-"), self.rel
        return ROOT / self.rel


def _report(path: pathlib.Path) -> dict[str, str]:
    assert path.is_file(), f"no JSON report at {path}"
    return {c["id"]: c["outcome"] for c in json.loads(path.read_text())["checks"]}


def pytest_summary(out: str) -> str:
    """pytest's last line: '2 passed, 1 skipped, 264 deselected in 7.47s'."""
    found = re.findall(r"^=+ (.+ in [\d.]+s(?: \([\d:]+\))?) =+$", out, re.M)
    assert found, f"no pytest summary line in:\n{_tail(out, 3000)}"
    return found[-1]


def _no_failures(outcomes: dict[str, str], warned_ok: tuple[str, ...] = ()) -> None:
    bad = {i: o for i, o in outcomes.items() if o not in ("passed", "skipped") and not (o == "warned" and i in warned_ok)}
    assert not bad, f"checks not passed: {bad}"


# On a real host with one NUMA node the bundled fake GPU's second NUMA node is a true LAW-04 warning.
REAL_HOST_WARNINGS = ("LAW-04",)


def check_make_conformance(out: str, w: Where) -> None:
    assert "dpconform conformance summary" in out
    assert re.search(r"^area\s+pass\s+fail\s+warn\s+skip\s+err", out, re.M), "no per-area table"
    assert re.search(r"^REG registration\s+[1-9]\d*\s+0\s", out, re.M), "REG row: passes and 0 failed expected"
    assert "registered dpconform.io/fakegpu (4 devices)" in out
    assert re.search(r"^\s+env\s+FAKEGPU_VISIBLE_DEVICES=", out, re.M), "no 'what a container gets' lines"
    report = w.tmp / "reports" / "conformance.json"
    assert f"JSON report: {report}" in out
    outcomes = _report(report)
    _no_failures(outcomes)
    assert len(outcomes) >= 50 and outcomes["REG-01"] == outcomes["ALC-01"] == "passed", outcomes


def check_own_plugin(out: str, w: Where) -> None:
    outcomes = _report(w.tmp / "my-plugin.json")
    _no_failures(outcomes)
    # --resource and --expected-devices reached the checks that use them
    assert outcomes["REG-03"] == "passed" and outcomes["LAW-08"] == "passed", outcomes
    assert "registered dpconform.io/fakegpu (4 devices)" in out


def check_dpconform_run(out: str, w: Where) -> None:
    assert _report(w.tmp / "run.json") == {"REG-01": "passed", "ALC-01": "passed"}
    assert re.match(r"2 passed\b", pytest_summary(out)), pytest_summary(out)


def readme_configs(text: str | None = None) -> list[str]:
    """The dpconform.yaml examples of README.md: its yaml blocks whose first line is `# dpconform.yaml`."""
    blocks = re.findall(r"```yaml\n(# dpconform\.yaml\n.*?)```", README.read_text() if text is None else text, re.S)
    assert len(blocks) >= 3, "README.md: the fake GPU's, the sample plugin's and a DaemonSet's dpconform.yaml"
    return blocks


def write_vendor_config(w: Where) -> None:
    """The README's fake-GPU dpconform.yaml, as it stands, where the commands read it (<REL>/)."""
    (w.rel_path / "dpconform.yaml").write_text(readme_configs()[0])


def check_dpconform_run_config(out: str, w: Where) -> None:
    outcomes = _report(w.rel_path / "conformance.json")
    assert outcomes["LAW-08"] == "waived" and {o for c, o in outcomes.items() if c != "LAW-08"} == {"passed"}, outcomes
    assert "WAIVED LAW-08: the 5th device ships with firmware 2.1" in out, out[-3000:]
    for name in ("junit.xml", "conformance.html", "conformance.md"):
        assert (w.rel_path / name).is_file(), name


def check_config_print(out: str, w: Where) -> None:
    shown = yaml.safe_load(out)
    assert shown["backend"] == "node" and shown["resource"] == "dpconform.io/fakegpu", out
    assert shown["report"] == str(w.rel_path / "conformance.json") and shown["waivers"][0]["check"] == "LAW-08"


def write_two_reports(w: Where) -> None:
    """main's last report (LAW-08 passed) and this one (LAW-08 failed), as `dpconform diff` reads them."""
    for name, outcome in (("main.json", "passed"), ("conformance.json", "failed")):
        (w.rel_path / name).write_text(json.dumps({"kubelet_release": kube_versions.NEWEST.tag, "checks": [
            {"id": "LAW-08", "outcome": outcome, "message": "expected: 5 devices\n  got: 4\n  fix: advertise all"}]}))


def check_diff(out: str, w: Where) -> None:
    assert re.search(r"LAW-08\s+passed -> failed  WORSE  \(4\)", out), out


def check_dpconform_checks(out: str, w: Where) -> None:
    ids = re.findall(r"^([A-Z]{3}-\d\d)\s+(required|advisory)\b", out, re.M)
    assert len(ids) >= 50, f"expected the whole catalogue, got {len(ids)} rows:\n{out[-2000:]}"
    assert ("REG-01", "required") in ids


def _load_results(path: pathlib.Path) -> dict:
    assert path.is_file(), f"no {path}"
    return json.loads(path.read_text())


EMULATOR_SCENARIOS = {"plugin_allocate_burst", "node_admission_burst", "churn"}


def check_pytest_load(out: str, w: Where) -> None:
    # cluster_admission_burst needs a cluster backend: skipped on the emulator (pytest -rs says why)
    assert re.match(r"3 passed, 1 skipped\b", pytest_summary(out)), pytest_summary(out)
    r = _load_results(w.tmp / "load" / "load-results.json")
    assert r["profile"] == "smoke" and set(r["scenarios"]) == EMULATOR_SCENARIOS, r.keys()
    assert r["scenarios"]["plugin_allocate_burst"]["requests"]["Allocate"]["count"] > 0


def check_pytest_load_ghz(out: str, w: Where) -> None:
    assert re.match(r"1 passed\b", pytest_summary(out)), pytest_summary(out)
    r = _load_results(w.tmp / "load" / "load-results.json")["scenarios"]["plugin_allocate_burst"]
    assert r["extra"]["generator"]["name"] == "ghz" and r["requests"]["Allocate"]["count"] > 0, r["extra"]
    floor = r["harness_floor"]
    assert floor["generator"] == "ghz" and floor["p50_us"] > 0 and isinstance(floor["harness_bound"], bool), floor
    assert "harness floor (ghz, " in out


def check_pytest_load_processes(out: str, w: Where) -> None:
    check_pytest_load(out, w)
    r = _load_results(w.tmp / "load" / "load-results.json")
    for name, sc in r["scenarios"].items():
        assert sc["extra"]["distributed"]["workers"] == 2, (name, sc["extra"])


def check_make_load(out: str, w: Where) -> None:
    assert ", profile smoke" in out and ", profile full" not in out, "ARGS' --load-profile smoke did not win"
    assert re.match(r"3 passed, 1 skipped\b", pytest_summary(out)), pytest_summary(out)
    assert _load_results(w.tmp / "reports" / "load" / "load-results.json")["profile"] == "smoke"


def check_full_collect(out: str, w: Where) -> None:
    for name in ("test_plugin_allocate_burst", "test_node_admission_burst", "test_churn",
                 "test_cluster_admission_burst"):
        assert f"scenarios/test_load.py::{name}" in out, out[-2000:]


def write_my_profile(w: Where) -> None:
    """my.yaml: the smoke profile at 1 s per scenario."""
    prof = yaml.safe_load((ROOT / "scenarios" / "profiles" / "smoke.yaml").read_text())
    prof["name"] = "my"
    for s in prof["scenarios"].values():
        s["duration_s"] = 1
    (w.rel_path / "my.yaml").write_text(yaml.safe_dump(prof))


def check_my_profile(out: str, w: Where) -> None:
    r = _load_results(w.tmp / "load" / "load-results.json")
    assert r["profile"] == "my", r["profile"]
    assert {"plugin_allocate_burst", "node_admission_burst"} <= set(r["scenarios"]), r["scenarios"].keys()
    # churn: no health control; cluster_admission_burst: no cluster backend
    assert re.match(r"2 passed, 2 skipped\b", pytest_summary(out)), pytest_summary(out)


def write_baseline(w: Where) -> None:
    """A baseline far slower than any real run, and for plugin_allocate_burst only: that one is compared
    (and cannot regress), the other two are skipped saying the baseline has no result for them."""
    slow = {"count": 1, "failures": 0, "rps": 0.001, "p50_us": 1e9, "p95_us": 1e9, "p99_us": 1e9}
    (w.rel_path / "baseline.json").write_text(json.dumps(
        {"profile": "smoke", "scenarios": {"plugin_allocate_burst": {
            "primary": "Allocate", "requests": {"Allocate": slow}, "total": slow}}}))


def check_baseline(out: str, w: Where) -> None:
    assert re.match(r"1 passed, 3 skipped\b", pytest_summary(out)), pytest_summary(out)
    assert f"--baseline {w.rel}/baseline.json has no result for node_admission_burst" in out, out[-3000:]


def check_bench_fidelity(out: str, w: Where) -> None:
    r = json.loads((w.tmp / "bench-fidelity.json").read_text())
    assert r["max_sustainable_rps"]["locust"] > 0 and r["fidelity"]["concurrency_1"]["locust"]["count"] > 0, r
    assert "locust: max sustainable Allocate rate against the no-op server" in out
    if "ghz" in r["max_sustainable_rps"]:    # bin/ghz built (make node builds it)
        assert r["max_sustainable_rps"]["ghz"] > 0 and "ghz: max sustainable" in out


def check_load_local(out: str, w: Where) -> dict:
    """All four scenarios ran (the emulator's three, the cluster burst); the cluster result holds its
    ratios to the same burst on the emulator, and the run printed them."""
    assert re.match(r"4 passed\b", pytest_summary(out)), pytest_summary(out)
    r = _load_results(w.tmp / "load" / "load-results.json")
    assert set(r["scenarios"]) == EMULATOR_SCENARIOS | {"cluster_admission_burst"}, r["scenarios"].keys()
    burst = r["scenarios"]["cluster_admission_burst"]
    assert burst["requests"]["running"]["count"] >= burst["extra"]["burst_size_effective"], burst["requests"]
    assert burst["requests"]["running"]["failures"] == 0, burst["errors"]
    ratios = burst["compare"]["ratios"]
    assert {"running/admit p50", "running/admit p99", "burst/burst max"} <= set(ratios), ratios
    assert "cluster_admission_burst vs node_admission_burst on the emulator" in out, out[-3000:]
    return burst


def check_load_local_processes(out: str, w: Where) -> None:
    burst = check_load_local(out, w)
    dist = burst["extra"]["distributed"]
    assert dist["workers"] == 2 and len(dist["requests_per_worker"]) == 2, dist
    assert burst["total"]["count"] == sum(dist["requests_per_worker"].values()), (burst["total"], dist)


def check_node(out: str, w: Where) -> None:
    line = next((ln for ln in out.splitlines() if "--backend node unavailable" in ln), None)
    if line and not (w.tmp / "node.json").exists():
        pytest.skip(line.strip())
    outcomes = _report(w.tmp / "node.json")
    _no_failures(outcomes, REAL_HOST_WARNINGS)
    assert sum(o == "passed" for o in outcomes.values()) >= 30, outcomes
    release_verdicts.assert_recorded("fakegpu", w.tmp / "node.json")     # the README's what-changed table


def check_local(out: str, w: Where) -> None:
    outcomes = _report(w.tmp / "local.json")
    _no_failures(outcomes, REAL_HOST_WARNINGS)
    assert all(outcomes.get(f"CLU-0{i}") == "passed" for i in range(1, 8)), outcomes


def write_sample_plugin_image(w: Where) -> None:
    from dpconform.fixtures.node import images
    w.rel_path.mkdir(parents=True, exist_ok=True)
    images.write_plugin_image(str(w.rel_path / "sample-device-plugin.tar"), "dpconform.local/sample-device-plugin:1",
                              str(kube_versions.bin_dir() / "sample-device-plugin"))


def check_daemonset_catalogue(out: str, w: Where) -> None:
    """The whole catalogue against the DaemonSet's plugin: it registers, allocates, restarts and crashes
    through the DaemonSet runner; the only failure is the sample plugin's CLU-06 finding (README), and
    its report carries the plugin pod's log."""
    outcomes = _report(w.tmp / "ds-catalogue.json")
    failed = {c for c, o in outcomes.items() if o in ("failed", "error")}
    assert failed <= {"CLU-06"}, {c: outcomes[c] for c in failed}
    must_pass = {"REG-01", "REG-07", "REG-08", "LAW-01", "ALC-01", "ALC-04", "PRS-01", "PRS-02", "PRS-03", "KRS-01",
                 "ROB-01", "CLU-01", *(f"CLU-{i:02d}" for i in range(9, 14))}
    assert {c for c in must_pass if outcomes.get(c) != "passed"} == set(), {c: outcomes.get(c) for c in must_pass}
    assert outcomes.get("KRS-04") == "skipped", outcomes.get("KRS-04")
    assert {f"MAN-0{i}" for i in range(1, 6)} <= {c for c, o in outcomes.items() if o in ("passed", "warned")}
    if failed:
        assert "--- pod sample-device-plugin-" in out, "no plugin pod log in the failure report"


def check_daemonset(out: str, w: Where) -> None:
    outcomes = _report(w.tmp / "daemonset.json")
    assert outcomes == {f"CLU-{i:02d}": "passed" for i in range(9, 14)}, outcomes


def _dra_report(where: "Where") -> dict[str, str]:
    report = json.loads((where.tmp / "dra.json").read_text())
    return {c["id"]: c["outcome"] for c in report["checks"]}


def check_dra(out: str, where: "Where") -> None:
    got = _dra_report(where)
    assert got and all(c.startswith("DRA-") for c in got), got
    assert {c for c, o in got.items() if o != "passed"} == EMULATOR_SKIPS, got    # pods: --backend local only


def check_dra_local(out: str, where: "Where") -> None:
    got = _dra_report(where)
    assert {c for c, o in got.items() if o != "passed"} == {"DRA-14"}, got     # DRA-14: the emulator only


def check_pytest_load_dra(out: str, w: Where) -> None:
    assert re.match(r"1 passed\b", pytest_summary(out)), pytest_summary(out)
    r = _load_results(w.tmp / "load" / "load-results.json")["scenarios"]["dra_prepare_burst"]
    assert r["requests"]["NodePrepareResources"]["count"] > 0 and r["requests"]["burst"]["failures"] == 0, r["requests"]


def check_pytest_load_dra_local(out: str, w: Where) -> None:
    assert re.match(r"2 passed\b", pytest_summary(out)), pytest_summary(out)
    r = _load_results(w.tmp / "load" / "load-results.json")["scenarios"]["dra_cluster_burst"]
    assert r["requests"]["running"]["count"] > 0 and r["requests"]["running"]["failures"] == 0, r["requests"]


SPECS = [
    Spec("make-conformance", r"make conformance$", timeout=300, check=check_make_conformance),
    Spec("make-test", r"make test$", exempt="this file runs inside it (`make test`; CI runs it through .ci/run)"),
    Spec("own-plugin", r"pytest conformance --plugin-cmd ",
         subst=(("/usr/local/bin/my-plugin --socket-dir {plugin_dir}", FAKEGPU),
                ("--resource vendor.com/gpu", "--resource dpconform.io/fakegpu"),
                ("--report my-plugin.json", "--report <TMP>/my-plugin.json")),
         timeout=300, check=check_own_plugin),
    Spec("dpconform-run", r"dpconform run --plugin-cmd\b", subst=(('"..."', f'"{FAKEGPU}"'),),
         append="--checks REG-01,ALC-01 --report <TMP>/run.json", check=check_dpconform_run),
    Spec("dpconform-run-config", r"dpconform run --config ", subst=(("vendor/dpconform.yaml", "<REL>/dpconform.yaml"),),
         prepare=write_vendor_config, timeout=180, check=check_dpconform_run_config),
    Spec("config-print", r"dpconform config --print ", subst=(("vendor/dpconform.yaml", "<REL>/dpconform.yaml"),),
         prepare=write_vendor_config, timeout=60, check=check_config_print),
    Spec("diff", r"dpconform diff ", subst=(("vendor/conformance.json", "<REL>/conformance.json"),
                                           ("main.json", "<REL>/main.json")),
         prepare=write_two_reports, timeout=60, check=check_diff, exit_codes=(1,)),   # 1: LAW-08 got worse
    Spec("bins-list", r"dpconform bins --list$", timeout=60,
         check=lambda out, w: (re.search(r"^kubelet\s+(built|missing or stale)\s+/", out, re.M) or pytest.fail(out))),
    Spec("dpconform-checks", r"dpconform checks\b", fallback="dpconform checks", timeout=60,
         check=check_dpconform_checks),
    Spec("kubelet", r"dpconform kubelet\b", runner="session",
         subst=(("/tmp/kl", "<TMP>/kl"), ("127.0.0.1:8080", "127.0.0.1:0"),
                ("[--topology-policy single-numa-node]", "--topology-policy single-numa-node"))),
    Spec("fakegpu", r"dpconform fakegpu --plugin-dir ", runner="session", subst=(("/tmp/kl", "<TMP>/kl"),)),
    Spec("curl-pods", r"curl -s -XPOST \S+/pods", runner="session", subst=(("127.0.0.1:8080", "<HTTP>"),)),
    Spec("curl-metrics", r"curl -s \S+/metrics", runner="session", subst=(("127.0.0.1:8080", "<HTTP>"),)),
    Spec("node", r"pytest conformance --backend node\b", append="--report <TMP>/node.json", timeout=480,
         check=check_node, marks=(pytest.mark.node,)),
    Spec("local", r"pytest conformance --backend local(?! --plugin-manifest)\b", append="--report <TMP>/local.json",
         timeout=600, check=check_local, marks=(pytest.mark.cluster,)),
    Spec("daemonset", r"pytest conformance --backend local --plugin-manifest .* --checks ", timeout=600,
         subst=(("reports/sample-device-plugin.tar", "<REL>/sample-device-plugin.tar"),),
         append="--report <TMP>/daemonset.json", prepare=write_sample_plugin_image, check=check_daemonset,
         marks=(pytest.mark.cluster,)),
    Spec("daemonset-catalogue", r"pytest conformance --backend local --plugin-manifest \S+ --plugin-image \S+ --resource \S+$",
         timeout=600, subst=(("reports/sample-device-plugin.tar", "<REL>/sample-device-plugin.tar"),),
         append="--report <TMP>/ds-catalogue.json", prepare=write_sample_plugin_image, check=check_daemonset_catalogue,
         exit_codes=(0, 1), marks=(pytest.mark.cluster,)),   # 1: the sample plugin's CLU-06 finding
    Spec("dra", r"pytest conformance --dra$", append="--report <TMP>/dra.json", timeout=180, check=check_dra,
         marks=(pytest.mark.dra,)),
    Spec("dra-local", r"pytest conformance --dra --backend local$", append="--report <TMP>/dra.json", timeout=300,
         check=check_dra_local, marks=(pytest.mark.cluster,)),
    Spec("dra-upstream", r"pytest conformance --dra --plugin-cmd ", exempt="tests/test_dra_upstream.py runs it "
         "(fixtures/dra/upstream.py COMMAND, which it checks the README shows)"),
    Spec("pytest-load-dra", r"pytest -m load --dra$", append="--load-out=<TMP>/load", timeout=180,
         check=check_pytest_load_dra, marks=(pytest.mark.dra,)),
    Spec("pytest-load-dra-local", r"pytest -m load --dra --backend local$", append="--load-out=<TMP>/load",
         timeout=300, check=check_pytest_load_dra_local, marks=(pytest.mark.cluster,)),
    Spec("make-dra", r"make dra$", exempt="CI runs it through .ci/run (Go: the control-plane binaries); this file's "
         "dra specs run inside it"),
    Spec("make-cluster", r"make cluster$", exempt="CI runs it in two parts: make cluster-smoke in .ci/run (presubmit), "
         "make cluster-periodic in make periodic (root, Go); the latter runs the `local` spec"),
    Spec("pytest-load", r"pytest -m load$", append="--load-out <TMP>/load", check=check_pytest_load),
    Spec("pytest-load-processes", r"pytest -m load --load-processes=", append="--load-out=<TMP>/load", timeout=240,
         check=check_pytest_load_processes),
    Spec("pytest-load-local", r"pytest -m load --backend local$", append="--load-out=<TMP>/load", timeout=480,
         check=check_load_local, marks=(pytest.mark.cluster,)),
    Spec("pytest-load-local-processes", r"pytest -m load --backend local --load-processes=2$",
         append="--load-out=<TMP>/load", timeout=480, check=check_load_local_processes, marks=(pytest.mark.cluster,)),
    Spec("kind-offline", r"pytest conformance --backend kind --kind-offline$", exempt="tests/test_kind_offline.py "
         "runs it beside --backend local and checks their verdicts agree (make kind-periodic)"),
    Spec("pytest-load-kind", r"pytest -m load --backend kind --kind-offline$", append="--load-out=<TMP>/load", timeout=600,
         check=check_load_local, marks=(pytest.mark.kind,)),
    Spec("pytest-load-ghz", r"pytest -m load --load-generator ghz$", append="-k plugin_allocate_burst --load-out=<TMP>/load",
         timeout=240, check=check_pytest_load_ghz, marks=(pytest.mark.node,)),   # bin/ghz: built by make node
    Spec("make-bench", r"make bench$", exempt="the periodic tier runs it (make periodic; root, Go: ghz and the sample plugin)"),
    Spec("pytest-load-full", r"pytest -m load --load-profile full\b", timeout=60, check=check_full_collect,
         # the full profile runs minutes: here the command line and profile are accepted and the scenarios collected
         append="--load-out <TMP>/load --collect-only -q"),
    # <TMP>/reports/load exists beforehand: the Makefile must pass it as --load-out=PATH (see above)
    Spec("make-load", r"make load\b", check=check_make_load, prepare=lambda w: (w.tmp / "reports" / "load").mkdir(parents=True)),
    Spec("pytest-load-my", r"pytest -m load --load-profile my\.yaml ",
         subst=(("my.yaml", "<REL>/my.yaml"), ("./my-plugin --dir {plugin_dir}", FAKEGPU)),
         append="--load-out <TMP>/load", prepare=write_my_profile, check=check_my_profile),
    Spec("pytest-load-baseline", r"pytest -m load --baseline ",
         subst=(("reports/load/load-results.json", "<REL>/baseline.json"),),
         append="--load-out <TMP>/load -rs", prepare=write_baseline, check=check_baseline),
    Spec("bench-fidelity", r"python -m dpconform\.scenarios\.bench_fidelity\b", timeout=120, check=check_bench_fidelity,
         append="--duration 0.5 --users 1 --out <TMP>"),   # README: the default 4 s x 8 measurements
]
BY_ID = {s.id: s for s in SPECS}


def claims(commands: list[str]) -> dict[str, list[str]]:
    """README command -> ids of the specs that match it."""
    return {c: [s.id for s in SPECS if re.match(s.match, c)] for c in commands}


def readme_command(spec: Spec) -> str:
    found = [c for c in readme_commands() if re.match(spec.match, c)]
    if not found and spec.fallback:
        return spec.fallback
    assert len(found) == 1, f"SPECS[{spec.id}] ({spec.match!r}) should match one README command, matches {found}"
    return found[0]


# ----- running ------------------------------------------------------------------------------------------
def command_env(tmp: pathlib.Path) -> dict[str, str]:
    """This environment, as a user's shell would have it: the venv first on PATH, nothing of the pytest run
    (xdist worker variables) or of an outer make (MAKEFLAGS would pass `make test ARGS=...` on)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["REPORT_DIR"] = str(tmp / "reports")
    return env


def _tail(text: str, n: int = 6000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


def _stop(proc: subprocess.Popen, grace: float = 15) -> None:
    """Ctrl-C the command's process group (pytest cleans up on it), SIGKILL what is left after grace s."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_command(cmd: str, tmp: pathlib.Path, timeout: float, exit_codes: tuple[int, ...] = (0,)) -> str:
    """Run `cmd` with bash from the repo root; its output (stdout and stderr); fail unless it exits with
    one of `exit_codes`."""
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=ROOT, env=command_env(tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        out, _ = proc.communicate()
        pytest.fail(f"`{cmd}` still running after {timeout:g} s; its output:\n{_tail(out)}")
    assert proc.returncode in exit_codes, f"`{cmd}` exited {proc.returncode}; its output:\n{_tail(out)}"
    return out


# ----- the tests ----------------------------------------------------------------------------------------
def test_readme_parsing():
    text = ("x\n```\nmake a   # c\npytest b \\\n    --x \"y # z\"\nnot a command\n```\n\n"
            "    dpconform q  # c\n    curl -s h | grep m\n\ntext\n")
    assert readme_commands(text) == ["make a", 'pytest b --x "y # z"', "dpconform q", "curl -s h | grep m"]


def test_every_readme_command_is_covered():
    """Each README command is claimed by exactly one spec; each spec's command is still in the README
    (or has a fallback) with every placeholder it substitutes."""
    commands = readme_commands()
    assert "make conformance" in commands, commands
    problems = [f"`{c}`: no spec in tests/test_readme_commands.py runs it" for c, ids in claims(commands).items()
                if not ids]
    problems += [f"`{c}`: claimed by several specs {ids}" for c, ids in claims(commands).items() if len(ids) > 1]
    for spec in SPECS:
        found = [c for c in commands if re.match(spec.match, c)]
        if not found and not spec.fallback:
            problems.append(f"SPECS[{spec.id}]: README no longer shows a command matching {spec.match!r}")
        problems += [f"SPECS[{spec.id}]: {old!r} not in `{c}`" for c in found for old, _ in spec.subst
                     if old not in c]
    assert not problems, "\n".join(problems)


RUN_SPECS = [pytest.param(s, id=s.id, marks=[pytest.mark.timeout(s.timeout + 60), *s.marks])
             for s in SPECS if s.runner == "run" and not s.exempt]


@pytest.mark.parametrize("spec", RUN_SPECS)
def test_readme_command(spec: Spec, tmp_path):
    w = Where(tmp_path, f"reports/.readme-commands-{uuid.uuid4().hex[:8]}")
    reports_existed = (ROOT / "reports").exists()
    try:
        if spec.prepare:
            w.rel_path.mkdir(parents=True)
            spec.prepare(w)
        out = run_command(spec.build(readme_command(spec), w), tmp_path, spec.timeout, spec.exit_codes)
        spec.check(out, w)
    finally:
        shutil.rmtree(w.rel_path, ignore_errors=True)
        if not reports_existed:
            try:
                (ROOT / "reports").rmdir()   # only if still empty
            except OSError:
                pass


def _http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


@pytest.mark.timeout(120)
def test_emulator_session():
    """The "On its own" block: the emulator with its HTTP API, the fake GPU registering with it (each in
    its own shell, as the README says), then the two curl lines against the API."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="dpc-rd-", dir="/tmp"))   # short: kubelet.sock path < 108 bytes
    w = Where(tmp, "")
    procs: list[subprocess.Popen] = []
    logs = {}
    try:
        def start(spec_id: str) -> subprocess.Popen:
            spec = BY_ID[spec_id]
            log = logs[spec_id] = tmp / f"{spec_id}.log"
            p = subprocess.Popen(["bash", "-c", "exec " + spec.build(readme_command(spec), w)], cwd=ROOT,
                                 env=command_env(tmp), stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                 start_new_session=True)
            procs.append(p)
            return p

        def alive() -> None:
            for p, name in zip(procs, logs):
                if p.poll() is not None:
                    raise AssertionError(f"{name} exited {p.returncode}:\n{_tail(logs[name].read_text())}")

        start("kubelet")
        m = wait_until(lambda: re.search(r"HTTP API on (http://[\d.]+:\d+)", logs["kubelet"].read_text()), 30,
                       "the emulator's 'HTTP API on' line", alive=alive)
        url = m.group(1)
        start("fakegpu")
        res = wait_until(lambda: json.loads(_http_get(url + "/resources")).get("dpconform.io/fakegpu", {})
                         .get("allocatable"), 30, "dpconform.io/fakegpu allocatable on the emulator", alive=alive,
                         transient=(OSError,))
        assert res == 4, res
        if not shutil.which("curl"):
            pytest.skip("curl is not installed: the README's two curl lines were not run (the rest was)")
        for spec_id in ("curl-pods", "curl-metrics"):
            spec = BY_ID[spec_id]
            cmd = spec.build(readme_command(spec), w).replace("<HTTP>", url.removeprefix("http://"))
            out = run_command(cmd, tmp, 30)
            if spec_id == "curl-pods":
                admit = json.loads(out)
                assert admit["admitted"] is True, admit
                assert len(admit["containers"]["c"]["devices"]["dpconform.io/fakegpu"]) == 1, admit
            else:
                assert re.search(r"^kubelet_device_plugin_registration_total\{.*\} 1", out, re.M), out
                assert "kubelet_device_plugin_alloc_duration_seconds" in out, out
    finally:
        for p in reversed(procs):
            _stop(p, grace=10)
        shutil.rmtree(tmp, ignore_errors=True)


def test_readme_config_examples_are_valid():
    """Each dpconform.yaml the README shows parses without a mistake (the fake GPU's also runs above)."""
    from dpconform.fixtures import config_file
    for text in readme_configs():
        config_file.parse(yaml.safe_load(text), "README.md")
