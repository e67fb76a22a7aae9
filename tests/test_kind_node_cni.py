"""The CNI config a kind node writes at boot (fixtures/cluster/kind_node.py CNI_SCRIPT): its /24 from the node's
IPv4 address on eth0. kind's network is dual-stack, and the first version took `hostname -i`'s first word, which
on some nodes was the IPv6 address: the bridge plugin then failed every pod sandbox ("invalid CIDR address:
10.244.fc00:...::3.0/24", seen on a kind worker). Here `ip` is a stand-in printing what a dual-stack node shows."""
from __future__ import annotations

import json
import subprocess

from dpconform.fixtures.cluster.kind_node import CNI_SCRIPT

DUAL_STACK = """\
18: eth0    inet6 fc00:f853:ccd:e793::3/64 scope global nodad \\       valid_lft forever preferred_lft forever
18: eth0    inet 172.18.0.3/16 brd 172.18.255.255 scope global eth0\\       valid_lft forever preferred_lft forever
"""


def run_script(tmp_path, ip_output: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "ip"
    # what `ip -4 -o addr show dev eth0` prints: the IPv4 lines only
    ipv4 = "".join(line + "\n" for line in ip_output.splitlines() if " inet " in line)
    stub.write_text(f"#!/bin/sh\ncat <<'OUT'\n{ipv4}OUT\n")
    stub.chmod(0o755)
    script = tmp_path / "cni.sh"
    script.write_text(CNI_SCRIPT)
    return subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "CNI_CONF_DIR": str(tmp_path / "net.d")})


def test_a_dual_stack_node_takes_its_subnet_from_its_ipv4_address(tmp_path):
    proc = run_script(tmp_path, DUAL_STACK)
    assert proc.returncode == 0, proc.stderr
    conf = json.loads((tmp_path / "net.d" / "10-dpconform-bridge.conflist").read_text())
    assert conf["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24"}]]


def test_a_node_without_ipv4_fails_saying_so(tmp_path):
    proc = run_script(tmp_path, DUAL_STACK.splitlines()[0])
    assert proc.returncode == 1 and "eth0 has no IPv4 address" in proc.stderr
    assert not (tmp_path / "net.d" / "10-dpconform-bridge.conflist").exists()
