"""`dpconform bins` (fixtures/bins.py): the programs a pip-installed dpconform builds without the
repository, built the way the Makefile builds them in a checkout, into the per-user cache; every
"missing binary" message names it."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dpconform.fixtures import bins, kube_versions

ROOT = Path(__file__).resolve().parents[1]


def makefile_builds() -> dict[str, tuple]:
    """program -> (wrapper module, package, extra ldflags, cgo, buildmode, path under bin/) as the Makefile's
    rules build them."""
    text = (ROOT / "Makefile").read_text()
    out = {name: ("kube", pkg, "", False, "", name) for name, pkg in
           re.findall(r"^bin/%/([a-z-]+): \$\(KUBE_MODULE\)\n\t\$\(call kube_build,\$\*,(\S+),\$@\)", text, re.M)}
    variables = dict(re.findall(r"^([A-Z_]+) = (\S+)$", text, re.M))
    for name, module, flags, pkg in re.findall(r"^bin/([a-z-]+):.*\n\t@mkdir -p bin\n\tcd tools/(\S+) && \$\(GOBUILD\) "
                                               r"-ldflags '-s -w ?([^']*)' -o \.\./\.\./\$@ (\S+)", text, re.M):
        flags = re.sub(r"\$\(([A-Z_]+):v%=%\)", lambda m: variables[m.group(1)].removeprefix("v"), flags)
        out[name] = (module, pkg, re.sub(r"\$\(([A-Z_]+)\)", lambda m: variables[m.group(1)], flags), False, "", name)
    # cgo: one rule per program, its target a path or a variable naming one
    for target, module, mode, pkg in re.findall(r"^(\S+):.*\n(?:\t@.*\n)?\tcd tools/(\S+) && (?:.*\\\n)*?.*\$\(CGO_GOBUILD\) "
                                                r"(?:-buildmode=(\S+) )?-ldflags '-s -w' -o \.\./\.\./\$@ (\S+)", text, re.M):
        path = variables.get(target[2:-1], target) if target.startswith("$(") else target
        rel = path.removeprefix("bin/")
        name = rel.split("/")[0] if "/" in rel else rel
        out[name] = (module, pkg, "", True, mode, rel)
    return out


def test_the_makefile_and_dpconform_bins_build_the_same_programs():
    made = makefile_builds()
    ours = {p.name: (p.module, p.package, p.ldflags, p.cgo, p.buildmode, p.out or p.name) for p in bins.PROGRAMS}
    assert len(made) >= 10 and made == ours
    kube_build = (ROOT / "Makefile").read_text().split("kube_build = ", 1)[1].split("\n\n", 1)[0]
    for key in ("gitVersion=$(1)", "gitMajor=1", "gitMinor=$(word 2,$(subst ., ,$(1)))", "gitTreeState=clean",
                "buildDate=1970-01-01T00:00:00Z"):
        assert key in kube_build, key
    tag = kube_versions.NEWEST.tag
    assert f"version.gitVersion={tag} " in bins.release_ldflags(tag)
    assert f"version.gitMinor={kube_versions.NEWEST.minor} " in bins.release_ldflags(tag)
    assert all(p in (ROOT / "Makefile").read_text() for p in bins.KUBE_VERSION_PKGS)


def test_missing_binaries_name_dpconform_bins(monkeypatch):
    older = kube_versions.bin_dir(kube_versions.RELEASES[0].tag)
    name = kube_versions.RELEASES[0].name
    assert kube_versions.build_hint("kube-bins", kube_versions.bin_dir()) == "run `make kube-bins` or `dpconform bins`"
    monkeypatch.setattr(kube_versions, "CHECKOUT", False)
    assert kube_versions.build_hint("cluster-bins", older) == f"run `dpconform bins --kube-version {name}`"
    from dpconform.fixtures.cluster.controlplane import control_plane_unavailable
    assert f"missing: run `dpconform bins --kube-version {name}`" in control_plane_unavailable(Path("/nowhere") / older.name)


def test_installed_it_builds_into_the_per_user_cache(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != kube_versions.BIN_ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    probe = ("import pathlib, dpconform.fixtures.kube_versions as k; k.CHECKOUT = False; "
             "print(k._bin_root())")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == str(tmp_path / "dpconform" / "bin")


def dpconform_bins(*args, bin_dir):
    env = dict(os.environ, **{kube_versions.BIN_ENV: str(bin_dir)})
    return subprocess.run([sys.executable, "-m", "dpconform", "bins", *args], env=env, capture_output=True, text=True,
                          timeout=900)


def test_bad_input_is_one_line(tmp_path):
    proc = dpconform_bins("kubelett", bin_dir=tmp_path)
    assert proc.returncode == 4 and proc.stderr.startswith("ERROR: unknown program(s) kubelett; choose from kubelet,")
    proc = dpconform_bins("--kube-version", "1.20", bin_dir=tmp_path)
    assert proc.returncode == 4 and proc.stderr.startswith("ERROR: --kube-version '1.20' is not a supported release")


@pytest.mark.node          # Go and the module proxy (a warm Go cache: seconds)
def test_bins_builds_shows_progress_and_keeps_what_is_up_to_date(tmp_path):
    proc = dpconform_bins("dp-floor", "sample-device-plugin", bin_dir=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[1/2] dp-floor (.)" in proc.stdout and "[2/2] sample-device-plugin" in proc.stdout
    plugin = tmp_path / kube_versions.DEFAULT.tag / "sample-device-plugin"    # the release this run judges against
    assert os.access(tmp_path / "dp-floor", os.X_OK) and os.access(plugin, os.X_OK)
    assert f"built {plugin} in " in proc.stdout
    again = dpconform_bins("dp-floor", "sample-device-plugin", bin_dir=tmp_path)
    assert again.returncode == 0 and "0 of 2 program(s) to build" in again.stdout, again.stdout
    listed = dpconform_bins("--list", bin_dir=tmp_path).stdout
    assert re.search(r"^dp-floor\s+built\s+" + re.escape(str(tmp_path / "dp-floor")), listed, re.M), listed
    assert re.search(r"^kubelet\s+missing or stale", listed, re.M), listed
