"""The host around a run: what a run could leave behind (host_state, compared before and after), and a
subprocess started in a session of its own without Python between fork and exec."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

from dpconform.fixtures.cluster import engine
from tests.support.conformance_runner import ROOT as REPO


def host_state() -> dict:
    """What a run could leave behind on the host. A zombie is not left running (it holds nothing but its
    PID until its parent or init reaps it): the local backend's exited containerd shims, reparented to
    init, stayed `[containerd-shim] <defunct>` for a while after `--backend local`, and a kind run started
    right after it then counted them as gone (make kind-periodic)."""
    procs = subprocess.run(["ps", "-ww", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    running = [ln.split(None, 1)[1] for ln in procs.splitlines() if len(ln.split(None, 1)) == 2 and
               not ln.split(None, 1)[0].startswith("Z")]
    return {
        "processes": sorted(ln for ln in running if re.search(r"dockerd|containerd-shim|docker-proxy", ln)),
        "links": sorted(os.listdir("/sys/class/net")),
        "mounts": sorted(ln for ln in open("/proc/mounts") if "dpconform-docker" in ln),
        "shims": sorted(os.listdir(engine.SHIM_SOCKETS)) if engine.SHIM_SOCKETS.is_dir() else None,
        "files": [str(p) for p in (engine.DATA_ROOT, engine.EXEC_ROOT, engine.SOCKET, engine.PIDFILE) if p.exists()],
        "temp dirs": sorted(str(p) for pattern in ("dpconform-docker-*", "dpconform-kind-*", "dpc-kind-*")
                            for p in Path(tempfile.gettempdir()).glob(pattern)),
    }


def start_in_own_session(argv: list[str], env: dict[str, str], log) -> subprocess.Popen:
    """argv in its own session, output to log: no Python runs between fork and exec (no preexec_fn), so
    the gRPC threads of this test worker cannot take the child down (tests/test_fork_beside_grpc.py)."""
    return subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
