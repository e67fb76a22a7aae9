"""The layers import one way, and no module imports itself round a circle (every import counts: those inside
a function and those under TYPE_CHECKING too, since each is a dependency a maintainer must hold).

    kubeletapi (wire), protocols (what the suite and the plugins both speak)
      <- fixtures (the seam, the backends, the harness, the pytest plugin, the reports)
      <- conformance, scenarios, dpconform/ (the checks, the load scenarios, the command line: these may
         read the reference plugins' defect tables)
    plugin_under_test (the reference plugins): kubeletapi and protocols only

The root package `dpconform` is the namespace every module lives in (its __init__ imports nothing), so any
module may name it. The checker reads the sources with ast; the last two tests prove it fails on a planted
upward import and a planted lazy circle."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# folder -> its package (setup.py maps the top-level folders onto dpconform's sub-packages)
FOLDERS = {"kubeletapi": "dpconform.kubeletapi", "protocols": "dpconform.protocols", "fixtures": "dpconform.fixtures",
           "conformance": "dpconform.conformance", "scenarios": "dpconform.scenarios",
           "plugin_under_test": "dpconform.plugin_under_test", "dpconform": "dpconform"}
# layer -> the layers it may import (its own included)
MAY_IMPORT = {
    "wire": {"wire"},
    "fixtures": {"wire", "fixtures"},
    "top": {"wire", "fixtures", "top", "plugins"},     # the commands read the plugins' defect tables
    "plugins": {"wire", "plugins"},
}


def layer(module: str) -> str:
    for prefix, name in (("dpconform.kubeletapi", "wire"), ("dpconform.protocols", "wire"),
                         ("dpconform.fixtures", "fixtures"), ("dpconform.plugin_under_test", "plugins")):
        if module == prefix or module.startswith(prefix + "."):
            return name
    return "top"                  # conformance, scenarios, dpconform.commands, dpconform.api, dpconform.cli


def sources() -> dict[str, str]:
    """Module name -> source, for every module of the package."""
    out = {}
    for folder, package in FOLDERS.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path.read_text()
    return out


def imports(modules: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body (a name imported from a package
    counts as that submodule where one exists, else as the package)."""
    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for module, source in modules.items():
        package = module if _is_package(module, modules) else module.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found.update(t for a in node.names if a.name.startswith("dpconform") and (t := known(a.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                if not base.startswith("dpconform"):
                    continue
                for a in node.names:
                    t = known(f"{base}.{a.name}")
                    if t:
                        found.add(t)
        found.discard(module)
        found.discard("dpconform")                 # the namespace (see the module doc)
        edges[module] = found
    return edges


def _is_package(module: str, modules: dict[str, str]) -> bool:
    return any(m.startswith(module + ".") for m in modules)


def upward(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, ts in edges.items() for t in ts if layer(t) not in MAY_IMPORT[layer(m)])


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_layers_import_one_way():
    edges = imports(sources())
    assert len(edges) > 150, len(edges)
    bad = upward(edges)
    assert not bad, "imports against the layers (see this module's doc):\n  " + "\n  ".join(bad)


def test_no_module_imports_itself_round_a_circle():
    found = circles(imports(sources()))
    assert not found, "import circles (lazy and TYPE_CHECKING imports count):\n  " + "\n  ".join(map(str, found))


def test_a_planted_upward_import_fails():
    modules = sources()
    modules["dpconform.fixtures.planted"] = ("def f():\n    from dpconform.conformance import test_registration\n"
                                             "    from dpconform.plugin_under_test.fakegpu import defects\n")
    modules["dpconform.plugin_under_test.planted"] = "from dpconform.fixtures import harness\n"
    assert [e for e in upward(imports(modules)) if "planted" in e] == [
        "dpconform.fixtures.planted -> dpconform.conformance.test_registration",
        "dpconform.fixtures.planted -> dpconform.plugin_under_test.fakegpu.defects",
        "dpconform.plugin_under_test.planted -> dpconform.fixtures.harness"]


def test_a_planted_lazy_circle_fails():
    modules = sources()
    modules["dpconform.fixtures.planted_a"] = "from dpconform.fixtures import planted_b\n"
    modules["dpconform.fixtures.planted_b"] = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                               "    from dpconform.fixtures.planted_c import C\n")
    modules["dpconform.fixtures.planted_c"] = "def c():\n    from . import planted_a\n"
    assert circles(imports(modules)) == [["dpconform.fixtures.planted_a", "dpconform.fixtures.planted_b",
                                          "dpconform.fixtures.planted_c"]]


def test_no_test_module_imports_another():
    """What two test modules share lives in tests/support (a test module imported by another runs its
    module-level code, fixtures and marks twice, and ties two tiers together)."""
    tests = Path(__file__).resolve().parent
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module
                     else [])
            found += [f"{path.relative_to(tests)}: {n}" for n in names if n.startswith("tests.test_")]
    assert not found, "test modules imported by others (move what they share to tests/support):\n  " + "\n  ".join(found)
