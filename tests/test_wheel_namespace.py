"""Installed, dpconform takes one top-level import name and shadows no other distribution's package.

The wheel is built from the source tree as a user would get it; it is installed into a fresh venv that
already holds a distribution named `fixtures` (as the PyPI `fixtures` of testing-cabal does, with its
`fixtures.Fixture`); afterwards that package is untouched, every dpconform module imports from the
installed wheel (not from this checkout), and `dpconform run` runs checks from an empty directory.
"""
from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

from dpconform.fixtures import kube_versions

ROOT = pathlib.Path(__file__).resolve().parent.parent
_IGNORE = shutil.ignore_patterns(".venv", ".git", "bin", "reports", "build", "*.egg-info", "__pycache__",
                                 ".pytest_cache", ".hypothesis")


def _run(argv, cwd, timeout=240):
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc.stdout


def _wheel(src: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
         cwd=src)
    (whl,) = out.glob("*.whl")
    return whl


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    shutil.copytree(ROOT, src, ignore=_IGNORE)
    ours = _wheel(src, base / "dist")
    # a stand-in for the PyPI `fixtures` distribution: same import name, its own Fixture class
    other = base / "other"
    (other / "fixtures").mkdir(parents=True)
    (other / "fixtures" / "__init__.py").write_text("class Fixture:\n    '''theirs'''\n")
    (other / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "fixtures"
        version = "4.2.0"
        [tool.setuptools]
        packages = ["fixtures"]
        """))
    theirs = _wheel(other, base / "dist-other")
    return base, ours, theirs


def test_the_wheel_holds_one_top_level_package(built):
    _, ours, _ = built
    names = zipfile.ZipFile(ours).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"dpconform"}, tops
    for data in ("dpconform/scenarios/profiles/smoke.yaml", "dpconform/fixtures/dra/upstream-verdicts.json",
                 "dpconform/kubeletapi/deviceplugin/v1beta1/api_pb2.pyi", "dpconform/conformance/test_registration.py",
                 # the Go wrapper modules `dpconform bins` builds from
                 f"dpconform/tools/kube/{kube_versions.NEWEST.tag}/go.sum", "dpconform/tools/kube/tools.go",
                 "dpconform/tools/etcd/go.mod", "dpconform/tools/dp-floor/main.go"):
        assert data in names, f"{data} missing from the wheel"


_PROBE = textwrap.dedent("""\
    import importlib, pkgutil, sys
    import locust  # noqa: F401 - as dpconform's own runner does: gevent patches before grpc loads
    import fixtures
    assert fixtures.Fixture.__doc__ == "theirs", fixtures.__file__
    import dpconform
    assert "/site-packages/dpconform/" in dpconform.__file__, dpconform.__file__
    for info in pkgutil.walk_packages(dpconform.__path__, "dpconform."):
        if info.name.endswith("__main__"):
            continue
        mod = importlib.import_module(info.name)
        assert "/site-packages/dpconform/" in (mod.__file__ or ""), (info.name, mod.__file__)
    from dpconform.fixtures import catalogue
    paths = {c.path for c in catalogue.collect()}
    assert paths and all(p.startswith("conformance/test_") for p in paths), sorted(paths)[:3]
    print("probe ok")
    """)


def test_installed_beside_another_fixtures_package(built):
    base, ours, theirs = built
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=base)
    py = venv / "bin" / "python"
    _run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(theirs)], cwd=base)
    _run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(ours)], cwd=base)
    # dpconform's dependencies come from this venv's site-packages, added as a plain path (its .pth files,
    # the editable finder of this checkout among them, are not run), after the fresh venv's own
    purelib = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=base).strip()
    pathlib.Path(purelib, "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    empty = base / "empty"
    empty.mkdir()
    assert "probe ok" in _run([py, "-c", _PROBE], cwd=empty)
    out = _run([venv / "bin" / "dpconform", "run", "-q", "-p", "no:randomly", "--plugin-cmd", "bundled",
                "--checks", "REG-01,ALC-01"],
               cwd=empty, timeout=180)
    assert "2 passed" in out, out[-2000:]


VENDOR_CONFIG = """\
# what a vendor keeps in their repository: the plugin, what it must offer, the reports, a disputed check
plugin-cmd: {plugin}
resource: example.com/resource
expected-devices: 3          # the sample plugin has 2: LAW-08 fails, and is waived below
isolate: true                # its device-plugin dir is compiled in
skip-checks: [POD-03, KRS-04]   # the two longest (about 3 minutes together); run them nightly
report: reports/conformance.json
junitxml: reports/junit.xml
html: reports/conformance.html
markdown: reports/conformance.md
waivers:
  - check: LAW-08
    reason: this test asks for a device more than the sample plugin has
    expires: 2099-12-31
"""


@pytest.mark.node
def test_vendor_install_runs_the_catalogue_from_a_config_file(built):
    """As a vendor runs it: the wheel in a fresh venv outside the repository, an empty directory holding only
    a dpconform.yaml, the upstream sample plugin (a Go binary), `dpconform run` with no flag. It writes the
    JSON, JUnit, HTML and Markdown reports, and the waived failure shows as waived (exit 0)."""
    plugin = kube_versions.bin_dir() / "sample-device-plugin"
    assert plugin.is_file(), f"{plugin} missing: make kube-bins"
    base, ours, _ = built
    venv = base / "vendor-venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=base)
    py = venv / "bin" / "python"
    _run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(ours)], cwd=base)
    purelib = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=base).strip()
    pathlib.Path(purelib, "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = base / "vendor-repo"
    work.mkdir()
    (work / "dpconform.yaml").write_text(VENDOR_CONFIG.format(plugin=plugin))
    proc = subprocess.run([venv / "bin" / "dpconform", "run", "-q"], cwd=work, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "WAIVED LAW-08: this test asks for a device more than the sample plugin has" in proc.stdout
    reports = work / "reports"
    assert sorted(p.name for p in reports.iterdir()) == ["conformance.html", "conformance.json", "conformance.md",
                                                         "junit.xml"]
    doc = json.loads((reports / "conformance.json").read_text())
    outcome = {c["id"]: c["outcome"] for c in doc["checks"]}
    assert outcome["LAW-08"] == "waived" and outcome["REG-01"] == "passed" and outcome["ALC-01"] == "passed"
    assert "POD-03" not in outcome and doc["summary"]["failed"] == 0 and doc["plugin"]["devices"] == 2
    assert doc["waivers"] == [{"check": "LAW-08", "reason": "this test asks for a device more than the sample plugin "
                               "has", "expires": "2099-12-31", "status": "applied"}]
    assert '<section class="check waived" id="LAW-08">' in (reports / "conformance.html").read_text()
    assert "### LAW-08: waived (required)" in (reports / "conformance.md").read_text()
    junit = (reports / "junit.xml").read_text()
    assert 'name="LAW-08 ' in junit and "[waived]" in junit, junit[-2000:]
