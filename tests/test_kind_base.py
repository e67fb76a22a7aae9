"""kind's base image built offline (fixtures/cluster/kind_base.py) boots as kind starts its nodes: in the
private Docker Engine, privileged, systemd as PID 1 reaches running (or degraded: kubelet waits for a
kubeadm config) and containerd answers crictl. Marked kind: root, docker.io and debootstrap
(`make kind-deps`), bin/runc-wrapper and bin/crictl; `make kind` runs it."""
from __future__ import annotations

import pytest

from dpconform.fixtures.cluster.engine import PrivateDocker
from dpconform.fixtures.cluster.kind_base import build_base_image
from dpconform.fixtures.waiting import wait_until

pytestmark = pytest.mark.kind
NODE = "dpconform-kind-base-test"
# how kind v0.33.0 runs a node container (pkg/cluster/internal/providers/docker/provision.go), less its ports
NODE_ARGS = ("--privileged", "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
             "--tmpfs", "/tmp", "--tmpfs", "/run", "--volume", "/var", "--volume", "/lib/modules:/lib/modules:ro",
             "--hostname", NODE, "--name", NODE, "--detach")


@pytest.mark.timeout(900)
def test_base_image_boots_systemd_and_containerd():
    with PrivateDocker() as docker:
        image = build_base_image(docker)

        def system_state() -> str:
            return docker.docker("exec", NODE, "systemctl", "is-system-running", check=False).stdout.strip()

        docker.docker("run", *NODE_ARGS, image)
        state = wait_until(lambda: system_state() in ("running", "degraded") and system_state(), 120,
                           "systemd in the node to finish starting", interval=0.5,
                           on_timeout=lambda: docker.docker("logs", NODE, check=False).stdout[-1500:])
        failed = docker.docker("exec", NODE, "systemctl", "list-units", "--failed", "--no-legend", check=False).stdout
        assert state == "running" or "kubelet" in failed and failed.count("\n") == 1, failed
        assert docker.docker("exec", NODE, "systemctl", "is-active", "containerd").stdout.strip() == "active"
        info = docker.docker("exec", NODE, "crictl", "info", check=False)
        assert info.returncode == 0 and '"RuntimeReady"' in info.stdout, info.stdout[-1500:] + info.stderr
