"""The check catalogue read from the code (fixtures/catalogue.py), docs/checks.md and `dpconform checks`
(dpconform/commands/checks.py)."""
import pathlib
import re

import pytest

from dpconform import cli
from dpconform.commands import checks as checks_command
from dpconform.fixtures import catalogue
from dpconform.fixtures.checks import AREAS
from dpconform.plugin_under_test.fakegpu.defects import DEFECTS

BEHAVIOURS = catalogue.ROOT / catalogue.BEHAVIOURS_DOC

# Files, owned elsewhere, that still cite the spec files users do not have (CHECKS.md,
# SPEC-kubelet.md) instead of docs/checks.md, `dpconform checks` or docs/kubelet-behaviours.md. The test
# below fails for any other file that cites them; remove an entry once its file is fixed.
KNOWN_STALE_CITATIONS: set[str] = set()
STALE_CITATION = re.compile(r"CHECKS\.md|SPEC-kubelet\.md")
THIS = pathlib.Path(__file__).resolve().relative_to(catalogue.ROOT)


def test_docs_checks_md_is_up_to_date():
    assert checks_command.DOC_PATH.exists() and checks_command.DOC_PATH.read_text() == checks_command.markdown(), (
        f"docs/checks.md is stale (a check's marker or docstring, or a defect, changed): "
        f"run `{checks_command.WRITE_CMD}` and commit the result")


def test_catalogue_has_every_check_once_and_follows_the_convention():
    checks = catalogue.catalogue()
    assert len(checks) >= 50, len(checks)
    assert not catalogue.problems(), "\n".join(catalogue.problems())
    assert {c.area for c in checks} <= set(AREAS)
    assert all(c.title and not c.title.startswith(c.id) for c in checks)


@pytest.mark.parametrize("doc, expected", [
    ("REG-01: the plugin registers within the timeout – a node only gets devices after that.",
     ("REG-01", "the plugin registers within the timeout", "A node only gets devices after that.")),
    ("ALC-01: one device -> exactly one response (zero fails admission).",
     ("ALC-01", "one device -> exactly one response (zero fails admission)", "")),
    ("POD-03: over random sequences no device is in two live containers, and\n    PodResources agrees - "
     "else two pods share a GPU",
     ("POD-03", "over random sequences no device is in two live containers, and PodResources agrees",
      "Else two pods share a GPU.")),
    ("no ID here", (None, "no ID here", "")),
    (None, (None, "", "")),
])
def test_docstring_convention(doc, expected):
    assert catalogue.parse_docstring(doc)[:3] == expected


def test_spec_items_are_defined_in_kubelet_behaviours_md():
    text = BEHAVIOURS.read_text()
    defined = set(re.findall(r'<a id="(k\d+)"></a>', text))
    assert defined == {f"k{i}" for i in range(1, 48)}, sorted(defined)
    cited = {s.split(".")[0].lower(): c.id for c in catalogue.catalogue() for s in c.spec}
    undefined = {k: v for k, v in cited.items() if k not in defined}
    assert not undefined, f"checks cite kubelet behaviours that {catalogue.BEHAVIOURS_DOC} does not define: {undefined}"


def test_defects_name_catalogue_checks():
    unknown = {d: sorted(set(c) - catalogue.ids()) for d, (_, c) in DEFECTS.items() if set(c) - catalogue.ids()}
    assert not unknown, unknown


def test_dpconform_checks_prints_the_table(capsys):
    assert cli.main(["checks"]) == 0
    out = capsys.readouterr().out
    for c in catalogue.catalogue():
        line = next((l for l in out.splitlines() if l.startswith(c.id + " ")), "")
        assert c.severity in line and ", ".join(c.spec or ("-",)) in line, (c.id, line)
    assert "docs/checks.md" in out


def test_dpconform_checks_markdown_is_docs_checks_md(capsys):
    assert cli.main(["checks", "--markdown"]) == 0
    assert capsys.readouterr().out == checks_command.markdown()


def test_no_stale_citations_of_the_spec_files():
    root = catalogue.ROOT
    skip = {".git", ".venv", "node_modules", "build", "dist"}
    found = set()
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if path.suffix not in (".py", ".md") or not path.is_file() or skip & set(rel.parts) \
                or any(p.endswith(".egg-info") for p in rel.parts) or rel == THIS:
            continue
        if STALE_CITATION.search(path.read_text(errors="replace")):
            found.add(str(rel))
    new = sorted(found - KNOWN_STALE_CITATIONS)
    assert not new, (f"{new} cite CHECKS.md or SPEC-kubelet.md, which users do not have: cite docs/checks.md "
                     "(or `dpconform checks`) and docs/kubelet-behaviours.md")
