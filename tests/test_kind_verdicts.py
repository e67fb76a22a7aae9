"""kind beside local, check by check (dpconform.fixtures.cluster.kind_verdicts): the README holds the recording as
rendered, and a run is judged against the other backend and against the recording. The runs themselves are
tests/test_kind_offline.py's (`make kind`)."""
from __future__ import annotations

import json

import pytest

from dpconform.fixtures.cluster import kind_verdicts as kv


def test_readme_holds_the_recording_as_rendered():
    assert kv.readme_body() == kv.render(), f"the README's kind verdicts are stale: run {kv.RECORD_CMD}"


def test_the_recording_agrees_check_by_check():
    rec = kv.load()
    assert rec, f"nothing recorded: run make kind, then {kv.RECORD_CMD}"
    assert kv.rv.differences(rec["local"]["outcomes"], rec["kind"]["outcomes"], {}, "local", "kind") == []
    assert len(rec["kind"]["outcomes"]) > 50


def _reports(tmp_path, rec: dict, kind_changes: dict[str, str]) -> tuple:
    paths = []
    for backend in kv.BACKENDS:
        outcomes = dict(rec[backend]["outcomes"], **(kind_changes if backend == "kind" else {}))
        doc = {"kubelet_release": rec["release"],
               "checks": [{"id": c, "outcome": o, "message": "expected: x\ngot: y" if o == "failed" else ""}
                          for c, o in outcomes.items()]}
        paths.append(tmp_path / f"{backend}.json")
        paths[-1].write_text(json.dumps(doc))
    return tuple(paths)


def test_a_run_is_judged_against_the_other_backend_and_the_recording(tmp_path, monkeypatch):
    monkeypatch.setattr(kv, "RUN_FILE", tmp_path / "run.json")
    rec = kv.load()
    run, problems = kv.take(*_reports(tmp_path, rec, {}))
    assert problems == [] and json.loads((tmp_path / "run.json").read_text()) == run
    passed = sorted(c for c, o in rec["kind"]["outcomes"].items() if o == "passed" and c not in kv.rv.HOST_DEPENDENT)
    run, problems = kv.take(*_reports(tmp_path, rec, {passed[0]: "failed", passed[1]: "warned"}))
    assert problems == [f"{passed[0]}: local passed, kind failed (expected: x)",
                        f"kind {passed[0]}: recorded passed, now failed (expected: x)"]
    with pytest.raises(AssertionError, match="record them: python -m dpconform.fixtures.cluster.kind_verdicts"):
        kv.assert_agree(*_reports(tmp_path, rec, {passed[0]: "skipped"}))


def test_the_table_shows_a_difference_first():
    rec = {"release": "1.37", "local": {"outcomes": {"REG-01": "passed", "KRS-04": "passed", "LAW-04": "warned"}},
           "kind": {"outcomes": {"REG-01": "passed", "KRS-04": "skipped", "LAW-04": "warned"}}}
    lines = kv.render(rec).splitlines()
    assert "3 checks, 1 with different verdicts." in lines[0]
    assert lines[4:] == ["| passed | skipped | 1: KRS-04 |", "| passed | passed | 1: REG-01 |",
                         "| warned | warned | 1: LAW-04 |"]


def test_record_refuses_a_file_that_is_not_a_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(kv, "RECORDING", tmp_path / "rec.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"checks": []}')
    assert kv.main(["--record", str(bad)]) == 2
    assert "make kind writes it" in capsys.readouterr().out
    assert not (tmp_path / "rec.json").exists()
