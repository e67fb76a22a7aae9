"""A vendor's first hour with `dpconform run`: no false green, the cause and the fix in one line, no traceback
of the suite's code on the console.

The plugins are the kinds vendors write first: one that exits at once because its driver library is missing,
one with the kubelet's device-plugin dir compiled in, a command with a misspelt placeholder; and a directory
with no config file, or a misnamed one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import dpconform

FAKEGPU = f"{sys.executable} -m dpconform fakegpu --plugin-dir {{plugin_dir}}"
DEFECTIVE = FAKEGPU + " --defect accept-unknown-id"      # fails ALC-04
NVML_MISSING = "E1207 nvidia.go:42] failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"
BIND_FAILS = ("Could not start device plugin: listen unix /var/lib/kubelet/device-plugins/vendor.sock: "
              "bind: no such file or directory")


def dpconform_run(cwd, *args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpconform", "run", "-q", "-p", "no:randomly", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


def terminal_env() -> dict:
    """The environment of a vendor's terminal: pytest prints a failure's whole message in its short summary
    where CI or BUILD_NUMBER is set (a CI log), and one trimmed line on a terminal."""
    return {k: v for k, v in os.environ.items() if k not in ("CI", "BUILD_NUMBER")}


def plugin_script(tmp_path, name: str, *lines: str) -> str:
    """A plugin that prints `lines` on stderr and exits 1, as a Go plugin does when its setup fails."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + "".join(f"echo '{ln}' >&2\n" for ln in lines) + "exit 1\n")
    path.chmod(0o755)
    return str(path)


def error_lines(proc) -> list[str]:
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("ERROR")]


# -- 1. no false green -------------------------------------------------------------------------------------
def test_no_plugin_given_is_a_usage_error_not_the_bundled_plugins_pass(tmp_path):
    proc = dpconform_run(tmp_path)
    errors = error_lines(proc)
    assert proc.returncode == 4 and len(errors) == 1, proc.stdout[-2000:] + proc.stderr
    assert "no plugin to check" in errors[0] and "--plugin-cmd bundled" in errors[0], errors
    (tmp_path / "dpconform.yml").write_text(f"plugin-cmd: {FAKEGPU}\n")
    proc = dpconform_run(tmp_path)
    assert proc.returncode == 4 and "found dpconform.yml" in error_lines(proc)[0], proc.stdout + proc.stderr
    (tmp_path / "dpconform.yaml").write_text("resource: vendor.com/gpu\n")
    proc = dpconform_run(tmp_path)
    assert proc.returncode == 4 and "dpconform.yaml has no plugin-cmd" in error_lines(proc)[0], proc.stderr


def test_the_bundled_plugin_when_asked_for_by_name(tmp_path):
    proc = dpconform_run(tmp_path, "--plugin-cmd", "bundled", "--checks", "REG-01")
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr


# -- 2. a stored report keeps its verdict ------------------------------------------------------------------
def test_a_stored_report_with_failures_does_not_pass(tmp_path):
    proc = dpconform_run(tmp_path, "--plugin-cmd", DEFECTIVE, "--checks", "ALC-04,REG-01", "--report", "r.json")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "failed" and doc["passed"] is False
    assert all("thresholds" not in c for c in doc["checks"]), "each check repeats the run's thresholds"
    report = dpconform.load_report(tmp_path / "r.json")
    assert not report.passed and report.exit_code == 1 and [c.id for c in report.failed()] == ["ALC-04"]
    # a report written before reports carried a verdict: decided from its checks
    del doc["verdict"], doc["passed"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert not dpconform.load_report(tmp_path / "old.json").passed


# -- 3. a plugin that exits before registering -------------------------------------------------------------
def test_a_plugin_that_exits_at_once_fails_reg01_once_and_blocks_the_rest(tmp_path):
    plugin = plugin_script(tmp_path, "no-nvml.sh", NVML_MISSING)
    proc = dpconform_run(tmp_path, "--plugin-cmd", plugin, "--report", "r.json", env=terminal_env())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    outcomes = {c["id"]: c["outcome"] for c in doc["checks"]}
    assert outcomes.pop("REG-01") == "failed"
    assert {o for o in outcomes.values()} <= {"blocked", "skipped"}, outcomes
    assert all(c["blocked_by"] == "REG-01" for c in doc["checks"] if c["outcome"] == "blocked")
    reg01 = dpconform.load_report(tmp_path / "r.json").check("REG-01")
    assert NVML_MISSING in reg01.got and "code 1" in reg01.got, reg01
    assert "Register" not in reg01.fix, reg01.fix             # it exited: calling Register is not its fix
    # the console: the suite's own code is not in it, the plugin's words come twice (got, its output)
    assert "Traceback" not in out and "fixtures/" not in out and "During handling" not in out, out[-4000:]
    assert out.count(NVML_MISSING) <= 2, out[-4000:]
    assert "ROOT CAUSE REG-01" in out
    # in a CI log pytest's short summary adds the whole message: a third time, and no more
    ci = dpconform_run(tmp_path, "--plugin-cmd", plugin, env={**terminal_env(), "CI": "true"})
    assert ci.returncode == 1 and (ci.stdout + ci.stderr).count(NVML_MISSING) <= 3, ci.stdout[-4000:]
    assert "dpconform verdict: FAILED (1 failed, " in out and " blocked)" in out, out[-1000:]


# -- 4. the kubelet's device-plugin dir compiled in --------------------------------------------------------
def test_a_plugin_with_the_default_dir_compiled_in_is_told_how_to_point_it_at_the_runs(tmp_path):
    plugin = plugin_script(tmp_path, "fixed-path.sh", "Starting GRPC server for vendor.com/gpu", BIND_FAILS)
    proc = dpconform_run(tmp_path, "--plugin-cmd", plugin, "--report", "r.json")
    assert proc.returncode == 1, proc.stdout[-3000:]
    fix = dpconform.load_report(tmp_path / "r.json").check("REG-01").fix
    assert "{plugin_dir}" in fix and "$DP_PLUGIN_DIR" in fix and "--isolate" in fix, fix


# -- 5. a misspelt placeholder -----------------------------------------------------------------------------
def test_a_misspelt_placeholder_is_refused_with_the_nearest_one(tmp_path):
    for cmd in (f"{sys.executable} -m dpconform fakegpu --plugin-dir {{plugin_dirr}}",
                f"{sys.executable} -m dpconform fakegpu --plugin-dir={{plugin-dir}}"):
        proc = dpconform_run(tmp_path, "--plugin-cmd", cmd)
        errors = error_lines(proc)
        assert proc.returncode == 4 and len(errors) == 1 and "did you mean {plugin_dir}?" in errors[0], \
            proc.stdout + proc.stderr
    # the shell's own ${VAR} and JSON braces are not placeholders
    proc = dpconform_run(tmp_path, "--plugin-cmd", "sh -c 'exec \"$0\" -m dpconform fakegpu --plugin-dir \"$1\" "
                         "${NOTHING:-}' " + f"{sys.executable} {{plugin_dir}} '{{\"a\": 1}}'", "--checks", "REG-01")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr


# -- 6. help and version -----------------------------------------------------------------------------------
def test_run_help_is_dpconforms_own_with_pytests_one_line_away(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dpconform", "run", "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines[0] == "usage: dpconform run [options]", proc.stdout[:500] + proc.stderr
    assert any("--plugin-cmd" in ln for ln in lines[:10]) and "dpconform run --pytest-help" in proc.stdout
    assert "pytest.main()" not in proc.stdout and len(lines) < 250, len(lines)
    assert any(ln.strip().startswith("--strict") and "advisory checks fail" in ln for ln in lines)
    version = subprocess.run([sys.executable, "-m", "dpconform", "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("dpconform "), version.stdout + version.stderr


def test_an_unknown_flag_gets_one_line_with_the_nearest(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dpconform", "run", "--plugin-cmnd", "x"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == ["ERROR: dpconform run: unknown option --plugin-cmnd (did you mean "
                                                "--plugin-cmd?); dpconform run --help lists the options"], proc.stderr


def test_a_usage_error_exits_4_in_every_subcommand(tmp_path):
    """Exit 2 is "interrupted" (pytest's, dpconform run's); a usage error is 4 everywhere, in one line."""
    for args in (["diff"], ["report"], ["config", "--bogus"], ["checks", "--bogus"], ["nosuch"]):
        proc = subprocess.run([sys.executable, "-m", "dpconform", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 4 and len(lines) == 1 and lines[0].startswith("ERROR: dpconform"), (args, proc.stderr)


# -- 8. JUnit, as a CI dashboard shows it ------------------------------------------------------------------
def _cases(path) -> dict:
    import xml.etree.ElementTree as ET
    return {c.get("name"): c for c in ET.parse(path).getroot().iter("testcase")}


def test_junit_cases_are_checks_with_their_outcomes(tmp_path):
    (tmp_path / "dpconform.yaml").write_text(f"plugin-cmd: {DEFECTIVE}\nchecks: [ALC-04, POD-01]\njunitxml: j.xml\n"
                                             "waivers:\n  - {check: ALC-04, reason: disputed}\n")
    proc = dpconform_run(tmp_path)
    assert proc.returncode == 0 and "PytestWarning" not in proc.stdout + proc.stderr, proc.stdout[-3000:]
    cases = _cases(tmp_path / "j.xml")
    waived = next(c for n, c in cases.items() if n.startswith("ALC-04 "))
    assert waived.get("name").endswith("[waived]") and waived.get("classname") == "dpconform.ALC", waived.attrib
    assert "WAIVED" in waived.find("system-out").text and "disputed" in waived.find("system-out").text
    props = {p.get("name"): p.get("value") for p in waived.iter("property")}
    assert props["check"] == "ALC-04" and props["outcome"] == "waived", props
    assert any(n.startswith("POD-01 a pod asking for 1 device") for n in cases), list(cases)

    plugin = plugin_script(tmp_path, "no-nvml.sh", NVML_MISSING)
    proc = dpconform_run(tmp_path, "--plugin-cmd", plugin, "--checks", "REG-01,ALC-01", "--junitxml", "k.xml")
    cases = _cases(tmp_path / "k.xml")
    reg01 = next(c for n, c in cases.items() if n.startswith("REG-01 "))
    assert reg01.find("failure") is not None and NVML_MISSING in reg01.find("system-out").text
    blocked = next(c for n, c in cases.items() if n.startswith("ALC-01 ")).find("skipped")
    assert blocked.get("type") == "blocked" and "blocked by REG-01" in blocked.get("message"), blocked.attrib


# -- 10. a warned check's line says what was seen and the fix ----------------------------------------------
def test_a_warn_line_gives_got_and_fix():
    from dpconform.fixtures.report_collector import warn_line
    message = "expected: a socket name of its own\n  got: 'fakegpu.sock' twice\n  fix: name it per start"
    assert warn_line(message) == "got 'fakegpu.sock' twice; fix: name it per start"
    assert warn_line("a finding of another shape\nmore") == "a finding of another shape"


# -- 11. no advice that contradicts the suite's own findings ---------------------------------------------
def test_no_fix_names_a_socket_by_the_second_or_one_vendors_pci_id():
    """A socket named by the second collides when a plugin starts twice in one second (the sample plugin's
    does, PRS-01's relaunch); a label with NVIDIA's PCI vendor ID selects no other vendor's nodes."""
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[1]
    text = "\n".join(p.read_text() for p in [*root.glob("conformance/*.py"), root / "fixtures" / "checks.py"])
    assert not re.search(r"dp\.<unix[ -]time>", text)
    assert "pci-10de" not in text


# -- 7. every mistake at once, before anything starts ------------------------------------------------------
def test_config_print_names_every_mistake_with_the_nearest_id(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dpconform", "config", "--print", "--backend", "kinnd",
                           "--register-timeout", "-5", "--checks", "REG-1,ALC-01,XYZ-99"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    errors = error_lines(proc)
    assert proc.returncode == 4 and len(errors) == 4, proc.stdout + proc.stderr
    assert "'kinnd' is not one of" in errors[0] and "--register-timeout must be positive" in errors[1]
    assert "'REG-1' (did you mean REG-01?)" in errors[2] and "'XYZ-99'" in errors[3]


def test_a_run_takes_an_area_and_names_every_unknown_id_from_the_file(tmp_path):
    (tmp_path / "dpconform.yaml").write_text("plugin-cmd: bundled\nchecks: [REG, law7]\nskip-checks: [REG-88]\n")
    proc = dpconform_run(tmp_path)
    errors = error_lines(proc)
    assert proc.returncode == 4 and len(errors) == 2, proc.stdout + proc.stderr
    assert "dpconform.yaml: checks: unknown check ID 'LAW7' (did you mean LAW-07?)" in errors[0], errors
    assert "dpconform.yaml: skip-checks: unknown check ID 'REG-88'" in errors[1], errors
    (tmp_path / "dpconform.yaml").write_text("plugin-cmd: bundled\nchecks: [REG]\n"
                                             "skip-checks: [REG-05, REG-06, REG-07, REG-08]\n")
    proc = dpconform_run(tmp_path)
    assert proc.returncode == 0 and "4 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr


# -- 3. "error": the suite could not run the check; its traceback in the report, not on the console ---------
def run_check_file(tmp_path, text: str) -> subprocess.CompletedProcess:
    """pytest with the suite's plugin on one file of checks `text` (JSON report r.json); it must fail."""
    (tmp_path / "test_checks.py").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "pytest", "test_checks.py", "-p", "dpconform.fixtures.pytest_plugin",
                           "-p", "no:randomly", "-p", "no:cacheprovider", "--report", "r.json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc


SUITE_BUG = '''
import pytest
from dpconform.fixtures.checks import check


@pytest.fixture
def broken():
    raise RuntimeError("the suite's own bug")


@check("REG-01")
def test_REG_01_x(broken):
    """REG-01: x."""
'''


def test_an_error_is_one_line_on_the_console_and_its_traceback_in_the_report(tmp_path):
    proc = run_check_file(tmp_path, SUITE_BUG)
    assert "RuntimeError: the suite's own bug" in proc.stdout and "def broken" not in proc.stdout, proc.stdout
    entry = json.loads((tmp_path / "r.json").read_text())["checks"][0]
    assert entry["outcome"] == "error" and "def broken" in entry["traceback"], entry


# -- 9. numbers kept ---------------------------------------------------------------------------------------
def test_alc08_keeps_its_numbers_on_a_pass_and_diff_shows_them_moving(tmp_path):
    proc = dpconform_run(tmp_path, "--plugin-cmd", "bundled", "--checks", "ALC-08", "--report", "r.json")
    assert proc.returncode == 0, proc.stdout[-2000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    numbers = doc["checks"][0]["measured"]
    assert set(numbers) == {"allocate_p50_ms", "allocate_p99_ms", "allocate_calls"} and numbers["allocate_p50_ms"] > 0
    numbers["allocate_p99_ms"] *= 4
    (tmp_path / "old.json").write_text(json.dumps(doc))
    diff = subprocess.run([sys.executable, "-m", "dpconform", "diff", "old.json", "r.json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert diff.returncode == 0 and "ALC-08  allocate_p99_ms:" in diff.stdout and "(x0.25)" in diff.stdout, diff.stdout


def test_grpc_cores_own_log_lines_do_not_read_as_the_plugins():
    from dpconform.fixtures.check_reports import without_grpc_core_logs
    core = "I1207 06:57:32.408350   29892 fork_posix.cc:71] Other threads are currently calling into gRPC"
    sections = [("Captured stderr call", core), ("Captured stderr setup", f"{core}\nthe suite's own line"),
                ("plugin output, harness 1 (x)", "E1207 nvidia.go:42] failed to initialize NVML")]
    assert without_grpc_core_logs(sections) == [("Captured stderr setup", "the suite's own line"), sections[2]]


def test_a_manifests_values_are_shown_as_yaml_not_python():
    from dpconform.fixtures.checks import shown
    assert shown({"privileged": True, "capabilities": {"drop": ["ALL"]}}) == "{privileged: true, capabilities: {drop: [ALL]}}"
    assert shown("system-node-critical") == "system-node-critical"


RPC_FAILS = '''
import grpc
from dpconform.fixtures.checks import check


class Unimplemented(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNIMPLEMENTED

    def details(self):
        return "method GetPreferredAllocation not implemented"


@check("PRF-01")
def test_PRF_01_x():
    """PRF-01: x."""
    try:
        raise KeyError("while handling something")
    except KeyError:
        raise Unimplemented()
'''


def test_an_rpc_the_check_needed_fails_in_one_line_not_grpcs_repr(tmp_path):
    proc = run_check_file(tmp_path, RPC_FAILS)
    assert "failed where the check needed its answer: UNIMPLEMENTED: method GetPreferredAllocation" in proc.stdout
    assert "During handling" not in proc.stdout and "raise Unimplemented" not in proc.stdout, proc.stdout
    entry = json.loads((tmp_path / "r.json").read_text())["checks"][0]
    assert entry["outcome"] == "failed" and "raise Unimplemented" in entry["traceback"], entry
