"""dpconform as a library: `dpconform.run(...)` runs the check catalogue against a plugin and returns a
typed report, for a vendor's own pytest or Python harness.

    import dpconform
    report = dpconform.run(plugin_cmd="./bin/my-plugin --socket-dir {plugin_dir}", resource="vendor.com/gpu")
    assert report.passed, report.failed()

`run` takes the options of `pytest conformance` by name (plugin_cmd, resource, checks, backend, ...), a
config file (or a mapping of its keys), or both; options override the file, as flags do. It runs the
suite in a child process (`dpconform run`, the same entry the CLI uses): the caller's own pytest session,
its plugins and its signal handlers are left alone, and what the suite starts is stopped with it.
The names in PUBLIC are kept stable (tests/test_api.py lists them).
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dpconform.fixtures.outcomes import FAILING, VERDICT_EXIT

PUBLIC = ("run", "load_report", "RunReport", "CheckVerdict", "RunError")


class RunError(RuntimeError):
    """The run did not produce a report: bad options or config (its ERROR lines), or it was stopped."""

    def __init__(self, message: str, exit_code: int | None, output: str = ""):
        super().__init__(message)
        self.exit_code, self.output = exit_code, output


@dataclass(frozen=True)
class CheckVerdict:
    """One check's verdict: its ID, area, severity and outcome (passed, failed, warned, skipped, error,
    blocked, waived), what was expected and got and how to fix it (for a check not passed), the check
    that blocked it, the waiver's reason, how long it took and what the plugin printed."""
    id: str
    area: str
    severity: str
    outcome: str
    expected: str | None = None
    got: str | None = None
    fix: str | None = None
    blocked_by: str | None = None
    waiver: str | None = None
    duration: float = 0.0
    message: str = ""
    output: str = ""

    @property
    def ok(self) -> bool:
        """Whether it does not fail the run (a warned, skipped, blocked or waived check does not)."""
        return self.outcome not in FAILING


@dataclass(frozen=True)
class RunReport:
    """A whole run: its exit status (as `dpconform run`'s), the kubelet release judged against, the
    plugin's facts, each check's verdict, the summary counts, the waivers and what became of them."""
    exit_code: int
    kubelet_release: str
    plugin: dict
    checks: tuple[CheckVerdict, ...]
    summary: dict
    waivers: tuple[dict, ...] = ()
    notes: tuple[str, ...] = ()
    config: dict = field(default_factory=dict)
    path: str | None = None          # the JSON report it was read from
    output: str = ""                 # the run's terminal output (run(..., quiet=True))

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def outcomes(self) -> dict[str, str]:
        return {c.id: c.outcome for c in self.checks}

    def check(self, check_id: str) -> CheckVerdict:
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(f"{check_id} was not run (run: {', '.join(c.id for c in self.checks)})")

    def failed(self) -> list[CheckVerdict]:
        return [c for c in self.checks if not c.ok]


def load_report(path: str | os.PathLike, exit_code: int | None = None, output: str = "") -> RunReport:
    """A RunReport from a JSON report (`--report PATH`) written by any run; its exit_code is the run's
    (given), else the one its verdict stands for (a report written before reports carried a verdict: 1
    when a check failed or erred, else 0)."""
    from dpconform.fixtures.report_render import verdict_parts
    doc = json.loads(pathlib.Path(path).read_text())
    if exit_code is None:
        verdict = doc.get("verdict") or ("failed" if any(c.get("outcome") in FAILING for c in doc.get("checks", []))
                                         else "passed")
        exit_code = VERDICT_EXIT.get(verdict, 1)
    checks = []
    for c in doc.get("checks", []):
        parts = verdict_parts(c.get("message", "")) if c["outcome"] != "passed" else {}
        checks.append(CheckVerdict(id=c["id"], area=c.get("area", c["id"].split("-")[0]), severity=c["severity"],
                                   outcome=c["outcome"], expected=parts.get("expected"), got=parts.get("got"),
                                   fix=parts.get("fix"), blocked_by=c.get("blocked_by"), waiver=c.get("waiver"),
                                   duration=c.get("duration", 0.0), message=c.get("message", ""),
                                   output=c.get("output", "")))
    return RunReport(exit_code=exit_code, kubelet_release=doc.get("kubelet_release", ""), plugin=doc.get("plugin", {}),
                     checks=tuple(checks), summary=doc.get("summary", {}), waivers=tuple(doc.get("waivers", [])),
                     notes=tuple(doc.get("notes", [])), config=doc.get("config", {}), path=str(path), output=output)


def options_argv(options: Mapping[str, object]) -> list[str]:
    """Flags for options given by name (plugin_cmd=..., or the config file's "plugin-cmd"); ValueError
    names an unknown one with the nearest valid name."""
    import difflib
    from dpconform.fixtures import option_table
    by_dest, by_key = option_table.by_dest(), option_table.options()
    argv: list[str] = []
    for name, value in options.items():
        opt = by_dest.get(name) or by_key.get(name)
        if opt is None:
            near = difflib.get_close_matches(name, list(by_dest), n=1)
            raise ValueError(f"unknown option {name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        if opt.key in ("checks", "skip-checks") and not isinstance(value, str):
            value = ",".join(value)
        argv += opt.argv(value)
    return argv


def run(config: str | os.PathLike | Mapping | None = None, *, args: Sequence[str] = (),
        cwd: str | os.PathLike | None = None, quiet: bool = True, timeout: float | None = None,
        **options) -> RunReport:
    """Run the catalogue; the RunReport of the run. `config`: a config file's path or a mapping of its
    keys (waivers included); `options`: options by name, which override it; `args`: more flags as
    `dpconform run` takes them. RunError when no report came (a usage error: its ERROR lines)."""
    with tempfile.TemporaryDirectory(prefix="dpconform-api-") as tmp:
        argv = [sys.executable, "-m", "dpconform", "run", "-p", "no:cacheprovider"]
        if isinstance(config, Mapping):     # checked here (ConfigError names each mistake), passed on as flags
            from dpconform.fixtures import config_file
            config_file.parse(dict(config), "dpconform.run(config=...)")
            argv += options_argv({k: v for k, v in config.items() if k != "waivers"})
            if config.get("waivers"):
                import yaml
                path = pathlib.Path(tmp, "waivers.yaml")
                path.write_text(yaml.safe_dump({"waivers": list(config["waivers"])}))
                argv += ["--config", str(path)]
        elif config is not None:
            argv += ["--config", os.path.abspath(config)]
        report = pathlib.Path(tmp, "report.json")
        argv += [*options_argv(options), *args, "--report", str(report)]
        out = _run(argv, cwd, quiet, timeout)
        if not report.is_file():
            errors = [ln for ln in out[1].splitlines() if ln.startswith("ERROR")]
            raise RunError("\n".join(errors) or f"dpconform run exited {out[0]} without a report", out[0], out[1])
        return load_report(report, exit_code=out[0], output=out[1])


def _run(argv: list[str], cwd, quiet: bool, timeout: float | None) -> tuple[int, str]:
    """(exit code, output when quiet). The child runs in its own session; on a timeout or Ctrl-C here its
    whole group gets SIGINT (the suite cleans up on it), then SIGKILL."""
    from dpconform.fixtures.procs import stop_group
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE if quiet else None,
                            stderr=subprocess.STDOUT if quiet else None, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc, grace=30, sig=signal.SIGINT)
        raise RunError(f"dpconform run still running after {timeout:g} s; stopped", None) from None
    except BaseException:
        stop_group(proc, grace=30, sig=signal.SIGINT)
        raise
    return proc.returncode, out or ""
