"""`dpconform checks [--markdown|--json]`: the check catalogue (dpconform.fixtures.catalogue) for people: a
table in the terminal, docs/checks.md with how the project proves each check can fail (the bundled plugins'
defect tables), JSON.

    python -m dpconform.commands.checks --write    regenerate docs/checks.md
    python -m dpconform.commands.checks --lint     list the docstrings that do not follow the convention
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
import textwrap

from dpconform.fixtures.catalogue import BEHAVIOURS_DOC, ROOT, Check, catalogue, problems
from dpconform.fixtures.checks import AREAS
from dpconform.fixtures.usage import UsageParser

DOC_PATH = ROOT / "docs" / "checks.md"
WRITE_CMD = "python -m dpconform.commands.checks --write"


# -- rendering ---------------------------------------------------------------------------------------
def table(checks: list[Check] | None = None, width: int | None = None) -> str:
    """The catalogue as a plain-text table grouped by area: ID, severity, spec items, title."""
    checks = catalogue() if checks is None else checks
    width = width or max(80, min(shutil.get_terminal_size((120, 24)).columns, 160))
    spec_w = max([len(", ".join(c.spec)) for c in checks] + [4])
    head = f"{'ID':<7} {'severity':<9} {'spec':<{spec_w}}  "
    title_w = max(30, width - len(head))
    lines, area = [], None
    lines.append(f"{head}title")
    for c in checks:
        if c.area != area:
            area = c.area
            lines.append(f"{area} {c.area_name}")
        wrapped = textwrap.wrap(c.title, title_w) or [""]
        lines.append(f"{c.id:<7} {c.severity:<9} {', '.join(c.spec) or '-':<{spec_w}}  {wrapped[0]}")
        lines += [" " * len(head) + w for w in wrapped[1:]]
    req = sum(c.required for c in checks)
    lines.append("")
    lines.append(f"{len(checks)} checks: {req} required, {len(checks) - req} advisory. Why each matters and "
                 f"what proves it can fail: docs/checks.md (dpconform checks --markdown); spec items: {BEHAVIOURS_DOC}.")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _spec_links(spec: tuple[str, ...]) -> str:
    if not spec:
        return "–"
    return ", ".join(f"[{s}](kubelet-behaviours.md#{s.split('.')[0].lower()})" for s in spec)


# The tests that run each defect table against the bundled plugin or driver (the "proven by" column).
PROOF_TESTS = {
    "fakegpu": "tests/test_defect_matrix.py",          # DEFECTS and MANIFEST_DEFECTS of the fake-GPU plugin
    "fakegpu-local": "tests/test_cluster_suite.py",    # its CLUSTER_DEFECTS
    "dra": "tests/test_dra_matrix.py",                 # DEFECTS of the fake-GPU DRA driver
    "dra-local": "tests/test_dra_local.py",            # its CLUSTER_DEFECTS
}
# pytest marks that `make test` deselects (pyproject.toml addopts), and the make target that runs each
_TARGET_OF_MARK = (("cluster", "make cluster"), ("dra", "make dra"), ("node", "make node"),
                   ("differential", "make node"), ("load", "make load"))


def make_target(test_file: str) -> str:
    """The make target that runs the tests of `test_file` (repo-relative): by the module's pytestmark, a
    mark that `make test` deselects names its own target; else "make test"."""
    import ast
    tree = ast.parse((ROOT / test_file).read_text())
    marks = " ".join(ast.unparse(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets))
    for mark, target in _TARGET_OF_MARK:
        if re.search(rf"\bmark\.{mark}\b", marks):
            return target
    return "make test"


def _where(test_file: str) -> str:
    """" (`make dra`)" for a proof that `make test` does not run, "" for one it does."""
    target = make_target(test_file)
    return "" if target == "make test" else f" (`{target}`)"


def proofs() -> dict[str, list[str]]:
    """Check ID -> how the project proves it can fail (fake-GPU defects, broken manifests, other tests), each
    followed by the make target that runs the proof when it is not `make test`."""
    from dpconform.plugin_under_test.fakegpu import defects
    out: dict[str, list[str]] = {}
    for name, (_, checks) in defects.DEFECTS.items():
        for c in checks:
            out.setdefault(c, []).append(f"`--defect {name}`{_where(PROOF_TESTS['fakegpu'])}")
    for name, checks in getattr(defects, "CLUSTER_DEFECTS", {}).items():
        for c in checks:
            out.setdefault(c, []).append(f"`--defect {name}` on `--backend local`{_where(PROOF_TESTS['fakegpu-local'])}")
    for name, (_, _, checks) in defects.MANIFEST_DEFECTS.items():
        for c in checks:
            out.setdefault(c, []).append(f"manifest `{name}`{_where(PROOF_TESTS['fakegpu'])}")
    for c, where in defects.PROVEN_ELSEWHERE.items():
        m = re.search(r"`([\w/.]+\.py)::", where)
        out.setdefault(c, []).append(where + (_where(m.group(1)) if m else ""))
    from dpconform.plugin_under_test.fakegpu_dra import defects as dra_defects
    for name, (_, checks) in dra_defects.DEFECTS.items():
        for c in checks:
            out.setdefault(c, []).append(f"`--dra --defect {name}`{_where(PROOF_TESTS['dra'])}")
    for name, checks in dra_defects.CLUSTER_DEFECTS.items():
        for c in checks:
            out.setdefault(c, []).append(f"`--dra --defect {name}` on `--backend local`{_where(PROOF_TESTS['dra-local'])}")
    return out


def _thresholds_md() -> list[str]:
    from dpconform.fixtures.config import Thresholds
    lines = ["| option | default | what it sets |", "|---|---|---|"]
    for f in dataclasses.fields(Thresholds):
        lines.append(f"| `--{f.name.replace('_', '-')}` | {f.default:g} | {_md(Thresholds.HELP[f.name])} |")
    return lines


def markdown(checks: list[Check] | None = None) -> str:
    """docs/checks.md: the catalogue as Markdown, one table per area."""
    checks = catalogue() if checks is None else checks
    proof = proofs()
    req = sum(c.required for c in checks)
    areas = [a for a in AREAS if any(c.area == a for c in checks)]
    out = [
        "# Conformance checks",
        "",
        f"<!-- Generated from the @check markers and docstrings in conformance/ by `{WRITE_CMD}`. "
        "Do not edit by hand: change the docstring or the marker and regenerate. -->",
        "",
        f"{len(checks)} checks in {len(areas)} areas: {req} required, {len(checks) - req} advisory. "
        "`dpconform checks` prints the same list in a terminal.",
        "",
        "- **required** checks fail the run. **advisory** checks are reported as warnings and fail only with "
        "`--strict`.",
        "- A check that needs something the plugin does not offer (an option it does not advertise, a "
        "`--health-hook`, a `--manifest`, a capability the backend lacks) is skipped at run time, with the "
        "reason in the report.",
        "- **kubelet**: the kubelet behaviours the check rests on, numbered as in "
        "[kubelet-behaviours.md](kubelet-behaviours.md).",
        "- **proven by**: how the project's own tests show that the check can fail, and where that proof runs: "
        "a proof without a make target in brackets runs in `make test`; one marked (`make dra`), (`make cluster`) "
        "runs only in that target (`make cluster` needs root; `make test` deselects both). `--defect NAME` is a "
        "defect switch of the bundled fake-GPU plugin (`dpconform fakegpu --defect NAME`, listed in "
        "`plugin_under_test/fakegpu/defects.py`); `tests/test_defect_matrix.py` runs the whole catalogue "
        "against the plugin with each one and asserts that exactly the listed checks fail (known cascades and "
        "defects too slow for a whole run are marked there). `manifest NAME` is "
        "a broken copy of `plugin_under_test/deploy/nvml-daemonset.yaml` given to `--manifest`; "
        "\"on `--backend local`\" is the switch on a one-node cluster (`tests/test_cluster_suite.py`). "
        "`--dra --defect NAME` is a defect switch of the fake-GPU DRA driver "
        "(`plugin_under_test/fakegpu_dra/defects.py`), run against every DRA check with the same exact-set rule by "
        f"`{PROOF_TESTS['dra']}` ({make_target(PROOF_TESTS['dra'])}: the emulator backend) and, "
        f"on `--backend local`, by `{PROOF_TESTS['dra-local']}` ({make_target(PROOF_TESTS['dra-local'])}).",
        "- Each check is the test `test_<ID>_...` in `conformance/test_<area>.py`; run a few with "
        "`--checks REG-01,LAW-02`.",
        "",
        "| area | checks |",
        "|---|---|",
    ]
    for a in areas:
        members = [c for c in checks if c.area == a]
        out.append(f"| [{a} – {AREAS[a]}](#{a.lower()}) | {len(members)} "
                   f"({sum(c.required for c in members)} required) |")
    for a in areas:
        members = [c for c in checks if c.area == a]
        out += ["", f'<a id="{a.lower()}"></a>', "", f"## {a} – {AREAS[a]}", "",
                f"Tests: `{members[0].path}`", "",
                "| ID | severity | what is checked | why | kubelet | proven by |",
                "|---|---|---|---|---|---|"]
        for c in members:
            out.append(f"| {c.id} | {c.severity} | {_md(c.title)} | {_md(c.why) or '–'} | {_spec_links(c.spec)} "
                       f"| {'; '.join(proof.get(c.id, [])) or '–'} |")
    out += ["", "## Thresholds", "",
            "Every time limit and size a check uses is an option of `pytest conformance` / `dpconform run`; "
            "the JSON report echoes the values used.", ""]
    out += _thresholds_md()
    return "\n".join(out) + "\n"


def stale() -> bool:
    return not DOC_PATH.exists() or DOC_PATH.read_text() != markdown()


def main(argv: list[str] | None = None, *, developer: bool = False) -> int:
    """`dpconform checks [--markdown|--json]`; `python -m dpconform.commands.checks` also offers --write and --lint."""
    p = UsageParser(prog="python -m dpconform.commands.checks" if developer else "dpconform checks",
                    description="The conformance check catalogue, read from the checks' markers "
                                "and docstrings: ID, severity, kubelet behaviours, title.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--markdown", action="store_true", help="print the catalogue as Markdown (what docs/checks.md holds)")
    g.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    if developer:
        g.add_argument("--write", action="store_true", help=f"regenerate {DOC_PATH.relative_to(ROOT)}")
        g.add_argument("--lint", action="store_true",
                       help="list docstrings that break the convention 'ID: title – why' (exit 1 if any)")
    args = p.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown())
    elif args.json:
        print(json.dumps([c.as_dict() for c in catalogue()], indent=2))
    elif getattr(args, "write", False):
        DOC_PATH.parent.mkdir(parents=True, exist_ok=True)
        text = markdown()
        changed = not DOC_PATH.exists() or DOC_PATH.read_text() != text
        DOC_PATH.write_text(text)
        print(f"{DOC_PATH.relative_to(ROOT)}: {'written' if changed else 'up to date'} "
              f"({len(catalogue())} checks)")
    elif getattr(args, "lint", False):
        found = problems(why=True)
        print("\n".join(found) if found else "every check docstring follows 'ID: title – why'")
        return 1 if found else 0
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main(developer=True))
