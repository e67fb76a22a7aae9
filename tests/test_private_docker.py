"""The private Docker Engine kind needs on this host (fixtures/cluster/engine.py): Debian's dockerd with
bin/runc-wrapper as its default runtime runs a privileged container, which plain runc refuses here, and
leaves nothing behind: no process, mount, network interface, shim socket or file. Marked kind: root,
Debian's docker.io (`make kind-deps`) and bin/runc-wrapper; `make kind` runs it."""
from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile

import pytest

from dpconform.fixtures.cluster import engine
from dpconform.fixtures.cluster.engine import PrivateDocker
from dpconform.fixtures.node.images import BUSYBOX
from dpconform.fixtures.waiting import wait_until
from tests.support.host import host_state

pytestmark = pytest.mark.kind
IMAGE = "dpconform.local/busybox:1"
DOCKER_KNOWN = (1 << 38) - 1


def busybox_rootfs() -> bytes:
    """A root filesystem tar with Debian's static busybox: what `docker import` takes (no registry)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, arcname="bin/busybox")
    return buf.getvalue()


def cap_mask(status: str, field: str) -> int:
    return int(re.search(rf"^{field}:\s*([0-9a-f]+)$", status, re.M).group(1), 16)


def test_privileged_container_runs_and_nothing_is_left():
    before = host_state()
    host_bound = cap_mask(open("/proc/self/status").read(), "CapBnd")
    with PrivateDocker() as docker:
        imported = subprocess.run(["docker", "import", "-", IMAGE], input=busybox_rootfs(), capture_output=True,
                                  env=dict(os.environ, **docker.env), timeout=120)
        assert imported.returncode == 0, imported.stderr
        docker.docker("network", "create", "dpconform-test")
        status = docker.docker("run", "--rm", "--privileged", "--network", "dpconform-test", IMAGE,
                               "/bin/busybox", "cat", "/proc/self/status").stdout
        # privileged: every capability the host can grant, none it cannot (Debian's Docker 20.10 knows those up
        # to CAP_AUDIT_READ, 37; newer ones it never asks for)
        assert cap_mask(status, "CapEff") == host_bound & DOCKER_KNOWN, status
        if host_bound & DOCKER_KNOWN != DOCKER_KNOWN:      # a capability missing: plain runc refuses
            plain = docker.docker("run", "--rm", "--privileged", "--runtime", "runc", IMAGE, "/bin/busybox", "true",
                                  check=False)
            assert plain.returncode != 0 and "caps" in plain.stderr, plain.stderr
    assert docker.teardown_errors == []
    # the shims the daemon's containerd started are reaped by init a moment after they exit
    wait_until(lambda: host_state() == before, 15, "the engine's processes to be gone", raise_on_timeout=False)
    assert host_state() == before


def test_missing_parts_are_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(engine.kube_versions, "SHARED_BIN", tmp_path)
    with pytest.raises(engine.EngineError, match=r"runc-wrapper missing: run `make bin/runc-wrapper` or "
                                                 r"`dpconform bins runc-wrapper`"):
        PrivateDocker().preflight()
