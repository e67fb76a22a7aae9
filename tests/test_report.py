"""The reports people read (fixtures/report_render.py) and `dpconform diff` (dpconform/commands/diff.py), on
the documents of a real run: a plugin with a defect, a waiver, a blocked check."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

import pytest

from dpconform.fixtures import report_render

DEFECTIVE = f"{sys.executable} -m dpconform fakegpu --plugin-dir {{plugin_dir}} --defect accept-unknown-id"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run: ALC-04 fails (the defect), ALC-01 waived-but-passing (stale), HTML, Markdown and JSON."""
    d = tmp_path_factory.mktemp("report")
    (d / "dpconform.yaml").write_text(f"plugin-cmd: {DEFECTIVE}\nchecks: [ALC-04, ALC-01, REG-01]\nreport: r.json\n"
                                      "html: r.html\nmarkdown: r.md\nwaivers:\n  - {check: ALC-01, reason: old}\n")
    proc = subprocess.run([sys.executable, "-m", "dpconform", "run", "-q"], cwd=d, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    return d


def test_html_is_one_self_contained_file_with_the_failure(run):
    page = (run / "r.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "FAILED: 2 passed, 1 failed" in page
    assert not re.search(r"<script|<link|src=\"(?!data:)", page), "the HTML must need nothing beside itself"
    section = page.split('<section class="check failed" id="ALC-04">', 1)[1].split("</section>", 1)[0]
    assert "<th>expected</th><td><pre>a gRPC error for unknown ID" in section
    assert "<th>fix</th><td><pre>reject IDs you did not advertise" in section
    assert "<details><summary>plugin output</summary><pre>--- plugin output, harness 1" in section
    for fact in ("plugin command", "kubelet release judged against", "backend", "dpconform.io/fakegpu"):
        assert fact in page
    assert "<td>ALC-01</td><td>stale</td><td>old</td>" in page
    # a link only where there is a section to go to; each check with its title
    assert 'href="#ALC-04"' in page and 'href="#REG-01"' not in page
    assert "<td>the plugin registers within the timeout of its start</td>" in page


def test_markdown_for_a_job_summary(run):
    md = (run / "r.md").read_text()
    assert md.startswith("## dpconform: FAILED: 2 passed, 1 failed\n")
    assert "| ALC Allocate | 1 | 1 | 0 | 0 | 0 | 0 | 0 |" in md
    assert "### ALC-04: failed (required) – an unknown device ID gets a gRPC error and the plugin keeps serving\n"\
           "- **expected**: a gRPC error for unknown ID" in md
    assert "<summary>passed checks</summary>" in md and "| REG-01 | the plugin registers within" in md
    assert "| ALC-01 | stale | old | - |" in md


def test_expected_got_fix_are_read_from_a_message():
    msg = "Failed: expected: A\n  got: B\n   on two lines\n  fix: C\nexpected: second finding\n  got: X\n  fix: Y"
    assert report_render.verdict_parts(msg) == {"expected": "A", "got": "B\n   on two lines", "fix": "C"}
    assert report_render.verdict_parts("the plugin died") == {}


def dpconform_diff(*args):
    return subprocess.run([sys.executable, "-m", "dpconform", "diff", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_diff_lists_changed_outcomes_and_fails_on_a_regression(run, tmp_path):
    new = json.loads((run / "r.json").read_text())
    old = copy.deepcopy(new)
    for c in old["checks"]:
        c["outcome"] = "passed"
    old["checks"].append({"id": "TOP-01", "outcome": "passed", "message": ""})
    (tmp_path / "old.json").write_text(json.dumps(old))
    proc = dpconform_diff(tmp_path / "old.json", run / "r.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"ALC-04\s+passed -> failed  WORSE  \(success: container_responses", proc.stdout), proc.stdout
    assert re.search(r"TOP-01\s+passed -> \(not run\)$", proc.stdout, re.M), proc.stdout
    proc = dpconform_diff(run / "r.json", tmp_path / "old.json")
    assert proc.returncode == 0 and "ALC-04  failed -> passed" in proc.stdout and "WORSE" not in proc.stdout
    assert dpconform_diff(run / "r.json", run / "r.json").stdout.endswith("  none\n")


def test_diff_of_load_results_uses_the_baseline_rule(tmp_path):
    def result(p99_us, rps):
        return {"scenarios": {"plugin_allocate_burst": {"primary": "Allocate", "requests": {"Allocate": {
            "count": 1000, "failures": 0, "rps": rps, "p50_us": 900.0, "p95_us": 1500.0, "p99_us": p99_us}}}}}
    (tmp_path / "old.json").write_text(json.dumps(result(2000.0, 900.0)))
    (tmp_path / "new.json").write_text(json.dumps(result(5000.0, 880.0)))
    proc = dpconform_diff(tmp_path / "old.json", tmp_path / "new.json")
    assert proc.returncode == 1 and "plugin_allocate_burst: Allocate: p99 5.00 ms vs baseline 2.00 ms" in proc.stdout, proc.stdout
    assert dpconform_diff(tmp_path / "old.json", tmp_path / "new.json", "--regression-ratio", "3").returncode == 0


def test_diff_input_errors_are_one_line(run, tmp_path):
    (tmp_path / "x.json").write_text("[]")
    for args, needle in (((tmp_path / "nope.json", run / "r.json"), "nope.json: no such file"),
                         ((tmp_path / "x.json", run / "r.json"), "neither a conformance report"),
                         ((run / "r.html", run / "r.json"), "r.html: not JSON")):
        proc = dpconform_diff(*args)
        assert proc.returncode == 4 and proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr


PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63"
                    "646060f80f000203018076c4a5e90000000049454e44ae426082")


def test_report_merges_load_results_and_inlines_their_plots(run, tmp_path):
    """`dpconform report`: the run's reports again, with a load run's numbers and its plots (found beside the
    results when the paths inside them are gone: an artifact downloaded elsewhere)."""
    (tmp_path / "burst-histogram.png").write_bytes(PNG)
    (tmp_path / "load-results.json").write_text(json.dumps({"scenarios": {"burst": {
        "requests": {"Allocate": {"count": 10, "failures": 0, "rps": 5.0, "p50_us": 1500.0, "p99_us": 2500.0}},
        "slo": {"passed": False, "violations": ["Allocate: p99 2.50 ms > SLO 2 ms"]},
        "files": {"histogram": "/elsewhere/burst-histogram.png"}}}}))
    proc = subprocess.run([sys.executable, "-m", "dpconform", "report", str(run / "r.json"), "--load",
                           str(tmp_path / "load-results.json"), "--html", str(tmp_path / "x.html"), "--markdown",
                           str(tmp_path / "x.md")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "x.html").read_text()
    assert '<img alt="burst-histogram.png" src="data:image/png;base64,iVBORw0KGgo' in page
    assert "<td>Allocate</td><td>10</td><td>0</td><td>5.0</td><td>1.50</td><td>2.50</td>" in page
    assert "| burst | Allocate | 10 | 0 | 5.0 | 1.50 | 2.50 | Allocate: p99 2.50 ms > SLO 2 ms |" in (tmp_path / "x.md").read_text()
    assert "ALC-04" in page      # the conformance part is still there
