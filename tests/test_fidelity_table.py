"""The fidelity table (fixtures/node/fidelity.py) is whole and is what the README shows."""
from __future__ import annotations

import ast
import json
import pathlib

from dpconform.fixtures.node import fidelity

DIFFERENTIAL = pathlib.Path(__file__).with_name("test_differential.py")


def test_every_behaviour_has_a_row():
    assert fidelity.covered() == set(fidelity.BEHAVIOURS), sorted(set(fidelity.BEHAVIOURS) ^ fidelity.covered())


def test_rows_name_existing_tests_and_every_test_has_a_row():
    named = {t for r in fidelity.ROWS for t in r.tests}
    existing = {n.name for n in ast.parse(DIFFERENTIAL.read_text()).body
                if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    assert named - existing == set(), "rows name tests that do not exist"
    assert existing - named == set(), "differential tests without a row in the fidelity table"


def test_readme_holds_the_rendered_table():
    assert fidelity.readme_body() == fidelity.render(), "README's fidelity table is stale: python -m dpconform.fixtures.node.fidelity --write"


def test_results_are_checked_against_the_rows(tmp_path, capsys):
    names = {t for r in fidelity.ROWS if not r.node.startswith("not compared") for t in r.tests}
    results = {f"{t}[node]": "passed" for t in names}
    path = tmp_path / "fidelity-node.json"

    def check(res: dict) -> int:
        path.write_text(json.dumps({"backend": "node", "results": res}))
        return fidelity.main(["--results", str(path)])
    assert check(results) == 0
    broken = dict(results, **{"test_checkpoint_file[node]": "failed"})
    del broken["test_metrics[node]"]
    assert check(broken) == 1
    out = capsys.readouterr().out
    assert "test_checkpoint_file[node]: failed" in out and "test_metrics: did not run on node" in out
    assert check({k: "skipped" for k in results}) == 0
    assert "not checked" in capsys.readouterr().out
