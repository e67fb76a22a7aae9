"""The config file (fixtures/config_file.py): every option of `pytest conformance` by name, one line per
mistake, flags over the file over the defaults, `dpconform config --print`, and a file that really
drives a run (from an empty directory, without a flag)."""
from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys

import pytest

from dpconform.fixtures import config_file, option_table
from dpconform.fixtures.config import SuiteConfig, Thresholds
from dpconform.fixtures.waivers import Waiver

FAKEGPU = f"{sys.executable} -m dpconform fakegpu --plugin-dir {{plugin_dir}}"


def dpconform(*args, cwd, timeout=120):
    return subprocess.run([sys.executable, "-m", "dpconform", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_every_option_of_pytest_conformance_is_a_key(tmp_path):
    """The table is read from the plugin's own addoption calls: every flag `pytest conformance --help` shows
    in the dpconform group is a key, and every SuiteConfig field and threshold has one."""
    proc = subprocess.run([sys.executable, "-m", "dpconform", "run", "--pytest-help"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    group = proc.stdout.split("dpconform: device-plugin conformance:", 1)[1].split("\n\n", 1)[0]
    flags = {m for m in re.findall(r"^\s+--([a-z0-9-]+)", group, re.M)}
    assert len(flags) > 30, group
    keys = set(option_table.options())
    assert flags <= keys, sorted(flags - keys)
    for f in [*SuiteConfig.__dataclass_fields__, *Thresholds.__dataclass_fields__]:
        if f not in ("thresholds", "backend_options", "waivers"):
            assert f in option_table.by_dest(), f"SuiteConfig.{f} has no config-file key"


def test_each_mistake_is_one_line_with_the_fix():
    doc = {"plugin-cmnd": "x", "expected-devices": "four", "topology-policy": "all", "dra": "yes",
           "register-timeout": True, "config": "other.yaml",
           "waivers": [{"check": "law7", "reson": "r"}, {"check": "LAW-07", "reason": "r", "expires": "soon"}]}
    with pytest.raises(config_file.ConfigError) as e:
        config_file.parse(doc, "my.yaml")
    assert str(e.value).splitlines() == [
        "my.yaml: unknown key 'plugin-cmnd' (did you mean 'plugin-cmd'?)",
        "my.yaml: expected-devices: must be a whole number, got 'four'",
        "my.yaml: topology-policy: 'all' is not one of none, best-effort, restricted, single-numa-node",
        "my.yaml: dra: must be true or false, got 'yes'",
        "my.yaml: register-timeout: must be a number, got True",
        "my.yaml: config: a config file cannot name another one; give --config on the command line",
        "my.yaml: waivers[1]: unknown key 'reson' (did you mean 'reason'?)",
        "my.yaml: waivers[1]: check must be a check ID such as LAW-07, got 'law7'",
        "my.yaml: waivers[1]: reason must say why the failure is waived",
        "my.yaml: waivers[2]: expires must be a date YYYY-MM-DD, got 'soon'",
    ]


def test_values_are_typed_and_paths_are_relative_to_the_file(tmp_path):
    fc = config_file.parse({"checks": ["reg-01", "ALC-01"], "kube_version": 1.36, "register-timeout": 3,
                            "report": "out/r.json", "junitxml": "/abs/j.xml", "strict": True,
                            "waivers": [{"check": "ALC-04", "reason": "why", "expires": datetime.date(2030, 1, 2)}]},
                           "f", base=tmp_path)
    assert fc.values == {"checks": "reg-01,ALC-01", "kube_version": "1.36", "register_timeout": 3.0,
                         "report": str(tmp_path / "out/r.json"), "xmlpath": "/abs/j.xml", "strict": True}
    assert fc.waivers == (Waiver("ALC-04", "why", datetime.date(2030, 1, 2)),)


def test_flags_override_the_file_and_the_file_the_defaults():
    fc = config_file.FileConfig("f", {"backend": "node", "resource": "a.io/x", "dra": True})
    values = config_file.merged(fc, {"backend": "local", "resource": None, "dra": False})
    assert (values["backend"], values["resource"], values["dra"]) == ("local", "a.io/x", True)
    assert values["topology_policy"] == "single-numa-node" and values["register_timeout"] == 10.0


def test_found_in_the_working_directory_or_pyproject(tmp_path):
    assert config_file.load(cwd=tmp_path) == config_file.FileConfig()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.dpconform]\nresource = "b.io/y"\n')
    fc = config_file.load(cwd=tmp_path)
    assert fc.values == {"resource": "b.io/y"} and "[tool.dpconform]" in fc.source
    (tmp_path / "dpconform.yaml").write_text("resource: c.io/z\n")
    assert config_file.load(cwd=tmp_path).values == {"resource": "c.io/z"}
    with pytest.raises(config_file.ConfigError, match="--config /no/such.yaml: no such file"):
        config_file.load("/no/such.yaml")
    (tmp_path / "bad.yaml").write_text("a: [\n")
    with pytest.raises(config_file.ConfigError, match="bad.yaml: not valid YAML"):
        config_file.load(str(tmp_path / "bad.yaml"))


def test_config_print_shows_the_merged_settings(tmp_path):
    (tmp_path / "dpconform.yaml").write_text("resource: vendor.com/gpu\nbackend: node\nwaivers:\n"
                                             "  - {check: LAW-07, reason: disputed}\n")
    proc = dpconform("config", "--print", "--backend", "local", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"# merged from {tmp_path / 'dpconform.yaml'}")
    shown = __import__("yaml").safe_load(proc.stdout)
    assert shown["resource"] == "vendor.com/gpu" and shown["backend"] == "local"
    assert shown["waivers"] == [{"check": "LAW-07", "reason": "disputed", "expires": None}]
    (tmp_path / "dpconform.yaml").write_text("resorce: x\n")
    proc = dpconform("config", "--print", cwd=tmp_path)
    assert proc.returncode == 4 and proc.stderr.strip() == (
        f"ERROR: {tmp_path / 'dpconform.yaml'}: unknown key 'resorce' (did you mean 'resource'?)")


def test_a_run_reads_the_file_of_its_working_directory(tmp_path):
    """No flag: the plugin, the checks and the reports come from dpconform.yaml; a bad file stops the run
    before anything starts, with one ERROR line per mistake (exit 4)."""
    (tmp_path / "dpconform.yaml").write_text(
        f"plugin-cmd: {FAKEGPU}\nresource: dpconform.io/fakegpu\nchecks: [REG-01, ALC-01]\n"
        "skip-checks: [ALC-01]\nreport: out/r.json\njunitxml: out/junit.xml\n")
    proc = dpconform("run", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    doc = json.loads((tmp_path / "out" / "r.json").read_text())
    assert [c["id"] for c in doc["checks"]] == ["REG-01"] and doc["config"]["resource"] == "dpconform.io/fakegpu"
    assert "REG-01 the plugin registers" in (tmp_path / "out" / "junit.xml").read_text()
    (tmp_path / "dpconform.yaml").write_text("checks: [REG-01]\nexpected-devices: many\nbackend: nowhere\n")
    proc = dpconform("run", "-q", cwd=tmp_path)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR:")]
    assert proc.returncode == 4 and len(errors) == 2, proc.stdout + proc.stderr
    assert "expected-devices: must be a whole number" in errors[0]
    assert "backend: 'nowhere' is not one of emulator, node, local, kind, kubeconfig" in errors[1]
