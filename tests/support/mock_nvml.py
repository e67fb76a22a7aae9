"""Our mock NVML library (tools/mock-nvml) for the tests: built when missing or stale, loaded as NVML by a
process whose LD_LIBRARY_PATH names its dir, and the NVML functions a process called that it answers
"Not Supported" (its stubs log them to DPCONFORM_MOCK_NVML_UNSUPPORTED_LOG)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.make_built import REPO, make_built

SOURCES = [REPO / "tools" / "mock-nvml" / f for f in ("go.mod", "go.sum", "main.go", "profiles.go", "control.go",
                                                       "gen_stubs.py")]


def built() -> Path:
    return make_built("bin/mock-nvml/libnvidia-ml.so.1", SOURCES)


def with_mock(lib: Path, **env: str) -> dict:
    return dict(os.environ, LD_LIBRARY_PATH=str(lib.parent), **env)


def pynvml_says(lib: Path, code: str, **env: str) -> dict:
    """What `code` (pynvml imported, nvmlInit done; it sets `out`) leaves in `out`, run in a process that
    loads the mock library as NVML."""
    prog = "import json, pynvml\npynvml.nvmlInit()\nout = {}\n" + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    r = subprocess.run([sys.executable, "-c", prog], env=with_mock(lib, **env), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def unsupported_calls(log: Path) -> set[str]:
    return set(log.read_text().split()) if log.exists() else set()
