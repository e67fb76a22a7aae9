"""A program of the checkout's bin/ that a test needs, built by its Makefile target when missing or older than
its sources: under a lock (xdist workers may race here); a skip that says so when Go is missing and it was
never built."""
from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

import pytest

from dpconform.fixtures.cluster import kind as kindmod

REPO = kindmod.REPO
BUILD_TIMEOUT = 900


def make_built(target: str, sources: list[Path]) -> Path:
    path = REPO / target
    go = kindmod._go()
    if go is None and not path.exists():
        pytest.skip(f"Go not found: install Go 1.26+ and run `make {target}`")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fresh = path.exists() and all(path.stat().st_mtime >= s.stat().st_mtime for s in sources)
        if not fresh and go is not None:
            cmd = ["make", "-s", "GO=" + go, target]
            r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
            assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}"
    return path
