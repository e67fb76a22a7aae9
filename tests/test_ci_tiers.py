"""The CI tiers (.ci/tiers.py, run by .ci/run and `make periodic`): stage budgets bound the gate, a stage past
its budget is stopped with all it started, a run killed from outside (SIGKILL, of the runner or of its whole
process group) leaves no process behind, and the stage table counts what pytest said."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIERS_PY = ROOT / ".ci" / "tiers.py"
CI_LIMIT_S = 90 * 60          # what the project's CI allows .ci/run


def _tiers():
    if "dpc_ci_tiers" not in sys.modules:        # .ci/ is not a package: load the file by its path
        spec = importlib.util.spec_from_file_location("dpc_ci_tiers", TIERS_PY)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["dpc_ci_tiers"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["dpc_ci_tiers"]


def test_presubmit_budgets_bound_the_gate():
    """The stages' budgets (each a hard timeout) end a run whose every stage hangs before CI's limit, so it
    still reports; background stages run beside the others."""
    tiers = _tiers()
    worst = tiers.worst_case_s(tiers.PRESUBMIT)
    assert worst < CI_LIMIT_S, f"presubmit budgets end a run at {worst} s, not below CI's {CI_LIMIT_S} s"
    assert tiers.worst_case_s([tiers.Stage("a", "", 10, background=True), tiers.Stage("b", "", 5),
                               tiers.Stage("c", "", 1, after=("a",))]) == 11
    for s in tiers.PRESUBMIT:
        if s.background:
            waits = [w for w in tiers.PRESUBMIT if s.name in w.after]
            assert waits, f"background stage {s.name} is never waited for"
    # the same check does not run in both tiers at full cost
    pre = {s.cmd for s in tiers.PRESUBMIT if s.cmd.startswith("make ")}
    per = {s.cmd for s in tiers.PERIODIC if s.cmd.startswith("make ") and s.name != "venv"}
    assert not pre & per, sorted(pre & per)


def test_pytest_counts_sum_every_summary_line():
    tiers = _tiers()
    text = ("==== 41 passed, 2 skipped, 434 deselected in 465.92s (0:07:45) ====\n"
            "=== 1 failed, 3 passed, 1 error in 2.0s ===\n"
            "E   3 passed, 9 failed  (a line of a test's own output, not pytest's summary)\n"
            "E    +  where 3 = <built-in method count>('== [100%]\\n1 failed, 73 skipped, 21 deselected in 3.72s\\n')\n")
    assert tiers.pytest_counts(text) == {"passed": 44, "failed": 1, "skipped": 2, "error": 1}
    assert tiers.pytest_counts("bench: the floor is below every plugin measured\n") == {}


def _plan(tmp_path: Path, stages: list[dict]) -> Path:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(stages))
    return p


def _run(tmp_path: Path, plan: Path, **kw) -> subprocess.Popen:
    """The runner on `plan`, its temp dirs (build copy, stage logs) in tmp_path/tmp."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "DPC_CI_REPORTS": str(tmp_path / "reports"), "TMPDIR": str(tmp_path / "tmp")}
    return subprocess.Popen([sys.executable, str(TIERS_PY), "--plan", str(plan)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _alive(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln]


def _wait_gone(marker: str, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = _alive(marker)
        if not left:
            return []
        time.sleep(0.2)
    return _alive(marker)


def test_a_stage_past_its_budget_is_stopped_with_all_it_started(tmp_path):
    mark = f"{os.getpid()}7101"
    plan = _plan(tmp_path, [
        {"name": "hangs", "cmd": f"(setsid sleep {mark} &); sleep {mark}", "budget_s": 2},
        {"name": "after it", "cmd": "echo '=== 2 passed in 0.1s ==='", "budget_s": 20}])
    p = _run(tmp_path, plan)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 1, out
    assert "STAGE hangs EXCEEDED ITS BUDGET of 2 s" in out, out
    assert not _wait_gone(f"sleep {mark}"), out
    table = (tmp_path / "reports" / "ci-times.txt").read_text()
    assert "| hangs | - | 2 |" in table and "over budget" in table, table
    assert "| after it | - | 20 |" in table and "| 2 | 0 | 0 | passed |" in table, table
    assert "| - | - | - | over budget (2 s): stopped |" in table, table
    assert not list((tmp_path / "tmp").iterdir()), "the run left temp dirs"


def _containment_or_skip():
    tiers = _tiers()
    if os.geteuid() != 0 or tiers._cgroup2_root() is None:
        pytest.skip("needs root and a cgroup v2 hierarchy (without them a process that calls setsid escapes)")


@pytest.mark.parametrize("kill", ["runner", "process group"])
def test_a_killed_run_leaves_nothing(tmp_path, kill):
    """SIGKILL of .ci/run's runner (or of its whole process group, as a CI timeout does) mid-run: the
    foreground stage, a background stage and a process that left its process group all die."""
    _containment_or_skip()
    mark = f"{os.getpid()}72{len(kill)}"
    started = tmp_path / "started"
    plan = _plan(tmp_path, [
        {"name": "build", "cmd": f"sleep {mark}", "budget_s": 600, "background": True},
        {"name": "tests", "cmd": f"(setsid sleep {mark} &); touch {started}; sleep {mark}", "budget_s": 600},
        {"name": "wait", "cmd": "true", "budget_s": 600, "after": ["build"]}])
    p = _run(tmp_path, plan, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not started.exists() or len(_alive(f"sleep {mark}")) < 3:
            assert time.monotonic() < deadline and p.poll() is None, p.stdout.read() if p.poll() is not None else "no start"
            time.sleep(0.1)
        if kill == "runner":
            os.kill(p.pid, signal.SIGKILL)
        else:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)
        assert not _wait_gone(f"sleep {mark}"), "left running after SIGKILL of the CI run"
    finally:
        for ln in _alive(f"sleep {mark}"):
            os.kill(int(ln.split()[0]), signal.SIGKILL)
    deadline = time.monotonic() + 15          # the watchdog removes the run's cgroup once it is empty
    while ((cgroups := list(Path(_tiers()._cgroup2_root()).rglob(f"dpconform-ci-{p.pid}")))
           or list((tmp_path / "tmp").iterdir())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not cgroups, cgroups
    assert not list((tmp_path / "tmp").iterdir()), "a killed run left its temp dirs (the watchdog removes them)"


def test_make_test_selects_what_pyproject_selects():
    """make test names the default selection itself: it must be
    pyproject.toml's, or a test would run in no target."""
    import re
    addopts = re.search(r"-m '([^']+)'", (ROOT / "pyproject.toml").read_text()).group(1)
    marks = re.search(r"^TEST_MARKS\s*=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).strip()
    assert marks == addopts, (marks, addopts)


def test_presubmit_judges_the_newest_and_the_oldest_release_and_periodic_the_rest():
    """A release between the two ends costs the periodic tier, not every change."""
    tiers = _tiers()
    from dpconform.fixtures import kube_versions
    tags = [r.tag for r in kube_versions.RELEASES]
    pre = {s.release for s in tiers.PRESUBMIT if s.name.startswith("make node")}
    per = {s.release for s in tiers.PERIODIC if s.name.startswith("make node")}
    assert pre == {tags[0], tags[-1]}, pre
    assert per == set(tags[1:-1]) and not pre & per, per
    for tag in tags[1:-1]:
        assert f"KUBE_VERSION={tag}" not in next(s.cmd for s in tiers.PRESUBMIT if s.name == "go-build")


def _hide_tools():
    spec = importlib.util.spec_from_file_location("dpc_hide_tier_tools", ROOT / ".ci" / "hide_tier_tools.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_make_test_runs_with_the_other_tiers_packages_hidden():
    """The presubmit's make test runs through .ci/hide_tier_tools.py, which names every package the node and
    kind targets install: a test that needs one fails in CI, not first on a user's fresh machine."""
    tiers, hide = _tiers(), _hide_tools()
    assert next(s.cmd for s in tiers.PRESUBMIT if s.name == "make test") == f"{tiers.HIDE_TIER_TOOLS} make test"
    from dpconform.fixtures.cluster import engine
    from dpconform.fixtures.node import backend
    installed = set(backend.APT_PACKAGES) | set(backend.TEST_TOOLS.values()) | set(engine.DEPS.values())
    assert installed <= set(hide.TIER_PACKAGES), sorted(installed - set(hide.TIER_PACKAGES))


def test_hidden_paths_and_bin_are_gone_inside_and_back_outside(tmp_path, monkeypatch, capfd):
    """A file that is there (here /usr/bin/env stands for a package's program) and the working dir's bin/ are
    gone for the command, and nothing outside changes."""
    hide = _hide_tools()
    if hide.why_not():
        pytest.skip(f"hiding needs root and unshare ({hide.why_not()}); CI runs as root")
    env = os.path.realpath(shutil.which("env"))
    assert env.startswith("/usr/")
    monkeypatch.setattr(hide, "KNOWN_FILES", (*hide.KNOWN_FILES, env))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "kubelet").write_text("")
    monkeypatch.chdir(tmp_path)
    inside = f'test ! -e {env} && test ! -e /usr/lib/cni && test -z "$(ls -A bin)" && test -x /bin/sh'
    assert hide.main(["sh", "-c", inside]) == 0
    assert os.path.exists(env) and (tmp_path / "bin" / "kubelet").exists()
    assert hide.main(["sh", "-c", "exit 3"]) == 3
    assert "runs as on a fresh machine" in capfd.readouterr().out


def test_a_red_run_names_its_failed_tests_and_exits_non_zero(tmp_path):
    """What failed is on the run's last lines (pytest's short summary lines of every stage), not only in a
    stage's log: a red periodic is not silent."""
    plan = _plan(tmp_path, [
        {"name": "red", "cmd": "echo 'FAILED tests/test_x.py::test_y[a] - AssertionError: CLU-12 passed'; "
                               "echo 'ERROR tests/test_z.py::test_w - TimeoutError: no registration'; "
                               "echo '=== 1 failed, 3 passed, 1 error in 2.0s ==='; exit 1", "budget_s": 20},
        {"name": "green", "cmd": "echo '=== 2 passed in 0.1s ==='", "budget_s": 20}])
    p = _run(tmp_path, plan)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 1, out
    tail = out[out.index("== plan: failed tests (2)"):]
    assert "[red] FAILED tests/test_x.py::test_y[a] - AssertionError: CLU-12 passed" in tail, out
    assert "[red] ERROR tests/test_z.py::test_w - TimeoutError: no registration" in tail, out
    assert out.rstrip().endswith("== plan: FAILED"), out


def test_a_sigterm_ed_run_still_writes_its_table(tmp_path):
    """A tier stopped with SIGTERM (a CI cancel, `timeout`) stops its running stage and still prints and writes
    the table: what passed, what was interrupted, what never ran (before: killed at once, no table)."""
    mark = f"{os.getpid()}7301"
    started = tmp_path / "started"
    plan = _plan(tmp_path, [
        {"name": "first", "cmd": "echo '=== 2 passed in 0.1s ==='", "budget_s": 20},
        {"name": "long", "cmd": f"touch {started}; sleep {mark}", "budget_s": 600},
        {"name": "never", "cmd": "true", "budget_s": 20}])
    p = _run(tmp_path, plan)
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline and p.poll() is None, "the long stage never started"
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM and "INTERRUPTED" in out, out
    assert not _wait_gone(f"sleep {mark}"), out
    table = (tmp_path / "reports" / "ci-times.txt").read_text()
    assert "| first | - | 20 |" in table and "| 2 | 0 | 0 | passed |" in table, table
    assert "interrupted (SIGTERM)" in table and "| never | - | 20 | 0 | - | - | - | not run |" in table, table
