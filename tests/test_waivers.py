"""Waivers (fixtures/waivers.py) in real runs: a waived failure is reported as waived with its reason and
does not fail the run; after its expiry it fails again and the run says why; a waiver whose check passed
is stale; one for an unknown check stops the run before it starts."""
from __future__ import annotations

import datetime
import json
import subprocess
import sys

from dpconform.fixtures import waivers
from dpconform.fixtures.waivers import Waiver

DEFECTIVE = f"{sys.executable} -m dpconform fakegpu --plugin-dir {{plugin_dir}} --defect accept-unknown-id"  # fails ALC-04


def run(tmp_path, waivers_yaml: str, checks="ALC-04,ALC-01"):
    (tmp_path / "dpconform.yaml").write_text(f"plugin-cmd: {DEFECTIVE}\nchecks: {checks}\nreport: r.json\n"
                                             f"waivers:\n{waivers_yaml}")
    proc = subprocess.run([sys.executable, "-m", "dpconform", "run", "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    doc = json.loads((tmp_path / "r.json").read_text()) if (tmp_path / "r.json").is_file() else None
    return proc, doc


def test_a_waived_failure_does_not_fail_the_run_and_says_why(tmp_path):
    proc, doc = run(tmp_path, "  - {check: ALC-04, reason: 'disputed, ticket 7', expires: 2999-01-01}\n"
                              "  - {check: ALC-01, reason: 'flaky last week'}\n")
    assert proc.returncode == 0, proc.stdout[-3000:]
    alc04 = next(c for c in doc["checks"] if c["id"] == "ALC-04")
    assert alc04["outcome"] == "waived" and alc04["waiver"] == "disputed, ticket 7 (until 2999-01-01)"
    assert alc04["message"].startswith("expected: a gRPC error for unknown ID"), alc04["message"]
    assert "plugin output" in alc04["output"]
    assert doc["summary"]["waived"] == 1 and doc["summary"]["failed"] == 0
    assert [(w["check"], w["status"]) for w in doc["waivers"]] == [("ALC-04", "applied"), ("ALC-01", "stale")]
    assert "WAIVED ALC-04: disputed, ticket 7 (until 2999-01-01)" in proc.stdout
    assert "STALE WAIVER ALC-01: the check passed; remove its waiver (flaky last week)" in proc.stdout


def test_an_expired_waiver_fails_again(tmp_path):
    proc, doc = run(tmp_path, "  - {check: ALC-04, reason: disputed, expires: 2020-01-31}\n")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert {c["id"]: c["outcome"] for c in doc["checks"]} == {"ALC-04": "failed", "ALC-01": "passed"}
    assert doc["waivers"][0]["status"] == "expired"
    assert "ALC-04: its waiver expired on 2020-01-31, so it fails again (waived because: disputed)" in doc["notes"]


def test_a_waiver_for_an_unknown_check_is_a_usage_error(tmp_path):
    proc, doc = run(tmp_path, "  - {check: XYZ-01, reason: typo}\n")
    assert proc.returncode == 4 and doc is None
    assert "dpconform.yaml: waivers: unknown check ID 'XYZ-01'; `dpconform checks` lists them" in proc.stderr


def test_status_and_expiry_day():
    w = Waiver("LAW-07", "r", datetime.date(2026, 3, 1))
    assert w.active(datetime.date(2026, 3, 1)) and not w.active(datetime.date(2026, 3, 2))
    day = datetime.date(2026, 1, 1)
    assert [waivers.status(w, o, day) for o in ("waived", "passed", "warned", "skipped", None)] == \
        ["applied", "stale", "stale", "not run", "not run"]
    assert waivers.status(w, "failed", datetime.date(2027, 1, 1)) == "expired"
    assert waivers.for_check([w, Waiver("LAW-07", "later")], "LAW-07", datetime.date(2027, 1, 1)) == \
        (Waiver("LAW-07", "later"), None)
