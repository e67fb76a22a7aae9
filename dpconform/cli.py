"""`dpconform SUBCOMMAND ...`: a thin dispatcher; each subcommand lives with the code it runs."""
from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "run": ("dpconform.commands.run", "the conformance suite against a plugin (same options as `pytest conformance`)"),
    "config": ("dpconform.fixtures.config_file", "the run's settings: dpconform.yaml merged with flags (--print, --keys)"),
    "report": ("dpconform.commands.report", "HTML and Markdown from a JSON report, with load results and plots"),
    "diff": ("dpconform.commands.diff", "what changed between two reports: check outcomes, load percentiles"),
    "bins": ("dpconform.fixtures.bins", "build the kubelet, control plane and helpers the real backends run (Go)"),
    "checks": ("dpconform.commands.checks", "the check catalogue: ID, severity, kubelet behaviours, title (--markdown, --json)"),
    "kubelet": ("dpconform.fixtures.kubelet.cli", "the kubelet emulator on its own, with an HTTP admit/remove API and /metrics"),
    "fakegpu": ("dpconform.plugin_under_test.fakegpu.cli", "the fake-GPU reference device plugin"),
    "fakegpu-dra": ("dpconform.plugin_under_test.fakegpu_dra.cli", "the fake-GPU reference DRA driver (kubelet plugin)"),
    "nvml-plugin": ("dpconform.plugin_under_test.nvml.cli", "the NVML-backed device plugin for NVIDIA GPUs"),
}


def usage() -> str:
    lines = ["usage: dpconform SUBCOMMAND [options]   (dpconform SUBCOMMAND --help for its options;"
             " dpconform --version)", ""]
    lines += [f"  {name:<12} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 4
    if argv[0] in ("-V", "--version"):
        from dpconform import __version__
        print(f"dpconform {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"ERROR: dpconform: unknown subcommand {name!r}; choose one of: {', '.join(SUBCOMMANDS)}",
              file=sys.stderr)
        return 4
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)
