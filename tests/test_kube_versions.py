"""The Kubernetes releases the suite judges against come from one table (fixtures/kube_versions.py), and
the emulator behaves as the kubelet of the release it is given: the behaviours that differ between the
supported releases (K9/K14 several endpoints per resource from 1.37, K27 hints over the NUMA nodes that
hold devices from 1.36), each as the kubelet source of that release reads."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from dpconform.fixtures import kube_versions
from dpconform.fixtures.config import SuiteConfig
from dpconform.fixtures.kubelet import topology as topo
from dpconform.fixtures.kubelet.fakeplugin import FakePlugin, dev
from dpconform.kubeletapi import dp

RES = "example.com/dev"
OLDEST, NEWEST = kube_versions.RELEASES[0], kube_versions.RELEASES[-1]


def test_the_default_is_the_newest_release_and_each_is_named_three_ways():
    assert kube_versions.release() == kube_versions.DEFAULT
    assert kube_versions.NEWEST == NEWEST and (kube_versions.DEFAULT == NEWEST or os.environ.get(kube_versions.ENV))
    for r in kube_versions.RELEASES:
        assert kube_versions.release(r.name) == kube_versions.release("v" + r.name) == kube_versions.release(r.tag) == r
        assert kube_versions.bin_dir(r.name).name == r.tag


def test_an_unsupported_release_is_one_line_naming_the_supported_ones():
    with pytest.raises(ValueError) as e:
        SuiteConfig(kube_version="1.20").validate()
    names = ", ".join(r.name for r in kube_versions.RELEASES)
    assert str(e.value) == f"--kube-version '1.20' is not a supported release; use one of {names} (default {NEWEST.name})"


# Where a release tag may stand outside the table: the per-release Go modules, generated stubs, Go modules
# and checksums (other modules' versions look alike), and the upstream DRA driver's recorded verdicts with the README line that
# quotes them (a recording says which build it was made with).
RECORDINGS = ("tools/kube/", "fixtures/dra/upstream-verdicts.json", "README.md")


def test_no_file_outside_the_table_names_a_release_tag():
    """A release is chosen in one place: a file that names a tag (v1.N.P) of its own would go stale when
    the table moves on (as the pins of an unsupported release did: stubs, the kind images, a Go tool's module)."""
    files = subprocess.run(["git", "ls-files"], cwd=kube_versions.REPO, capture_output=True, text=True,
                           timeout=30).stdout.split()
    tag = re.compile(r"\bv1\.(3\d|[4-9]\d)\.\d+\b")
    found = []
    for f in files:
        if f == "fixtures/kube_versions.py" or f.endswith((".sum", ".mod", "_pb2.py", "_pb2.pyi", "_pb2_grpc.py")) or \
                f.startswith(RECORDINGS[0]) or (f in RECORDINGS and all(
                    "recorded" in line or "driver" in line for line in _lines_naming(kube_versions.REPO / f, tag))):
            continue
        found += [f"{f}: {line.strip()}" for line in _lines_naming(kube_versions.REPO / f, tag)]
    assert not found, "name the release through fixtures/kube_versions.py:\n" + "\n".join(found)


def _lines_naming(path, tag) -> list[str]:
    try:
        text = path.read_text()
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return []
    return [line for line in text.splitlines() if tag.search(line)]


def test_the_makefile_reads_the_table():
    out = subprocess.run([sys.executable, str(kube_versions.REPO / "fixtures" / "kube_versions.py"), "tags"],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == [r.tag for r in kube_versions.RELEASES]
    for args, tag in (([], NEWEST.tag), ([f"KUBE_VERSION={OLDEST.tag}"], OLDEST.tag)):
        dry = subprocess.run(["make", "-n", "-B", "kube-bins", *args], cwd=kube_versions.REPO, capture_output=True,
                             text=True, timeout=60)
        assert f"bin/{tag}/kubelet" in dry.stdout and f"tools/kube/{tag} " in dry.stdout, dry.stdout + dry.stderr


def test_k27_hints_range_over_the_device_numa_nodes_from_1_36():
    """Devices on node 0 of a two-node machine: 1.35 also offers the wider {0,1}, not preferred; from 1.36 the
    masks range over node 0 only (topology_hints.go deviceNUMANodes)."""
    devices = {"d0": dev("d0", numa=0), "d1": dev("d1", numa=0)}
    for release in kube_versions.RELEASES:
        over = kube_versions.holds("hints-over-device-numa-nodes", release.name)
        hints = topo.generate_device_hints([0, 1], devices, set(devices), set(), 1, over_device_nodes=over)
        want = [topo.TopologyHint(0b01, True)] + ([] if release.minor >= 36 else [topo.TopologyHint(0b11, False)])
        assert hints == want, release.name


@pytest.fixture
def started(make_emu):
    """An emulator behaving as the kubelet of a release (tests/conftest.py's make_emu)."""
    return lambda release: make_emu(kube_version=release)


@pytest.fixture
def made():
    """The fake plugins a test started, stopped after it."""
    out: list[FakePlugin] = []
    yield out
    for p in out:
        p.stop()


def plugin(emu, name: str, devices, made: list) -> FakePlugin:
    p = FakePlugin(emu.plugin_dir, RES, devices, dp.DevicePluginOptions())
    p.socket_name = name
    made.append(p.start())
    return p


def test_k9_k14_a_second_instance_is_added_and_only_the_last_ones_end_counts_from_1_37(started, made):
    """1.37 (endpointStore): a surge's second instance is added beside the first; the first one's exit keeps
    the devices healthy (the newest serves the calls); the last one's exit turns them unhealthy."""
    emu = started(NEWEST.name)
    first = plugin(emu, "first.sock", [dev("d0"), dev("d1")], made)
    assert first.register() is None
    emu.wait_until(lambda: emu.allocatable(RES) == 2, 5, "the first instance's devices")
    second = plugin(emu, "second.sock", [dev("d0"), dev("d1")], made)
    assert second.register() is None
    first.stop()
    emu.wait_until(lambda: emu.endpoint(RES) is not None and emu.endpoint(RES).socket_path.endswith("second.sock"),
                   5, "the second instance serving")
    assert emu.allocatable(RES) == 2, "the first instance's exit took the devices away"
    second.stop()
    emu.wait_until(lambda: emu.allocatable(RES) == 0, 5, "the last instance's exit to count")


@pytest.mark.parametrize("slow_kubelet", [False, True], ids=["", "slow-kubelet"])
def test_k9_a_registration_on_a_connected_socket_is_refused_from_1_37(started, made, monkeypatch, slow_kubelet):
    """The refused registration leaves the first one serving. The device is allocatable once its first
    ListAndWatch message is in, which comes after Register returns: make test once read it before that
    (0 == 1); slow-kubelet (the emulator handles each message 0.3 s late) made that certain, until the test
    waited for it."""
    if slow_kubelet:
        from dpconform.fixtures.kubelet.connections import PluginConnections
        on_devices = PluginConnections.on_devices

        def late(self, ep, resp):
            time.sleep(0.3)
            on_devices(self, ep, resp)
        monkeypatch.setattr(PluginConnections, "on_devices", late)
    emu = started(NEWEST.name)
    first = plugin(emu, "dp.sock", [dev("d0")], made)
    assert first.register() is None
    emu.wait_until(lambda: emu.allocatable(RES) == 1, 5, "the first instance's device")
    again = first.register()
    assert again is not None and f"device plugin already connected: {emu.plugin_dir}/dp.sock" in again
    assert emu.allocatable(RES) == 1, "the refused registration took the device away"


def test_k9_before_1_37_the_newest_registration_replaces_the_first(started, made):
    emu = started(OLDEST.name)
    first = plugin(emu, "first.sock", [dev("a0")], made)
    assert first.register() is None
    second = plugin(emu, "second.sock", [dev("b0"), dev("b1")], made)
    assert second.register() is None
    emu.wait_until(lambda: sorted(emu.devices(RES)) == ["b0", "b1"], 5, "the second instance's devices")
    assert first.register() is None, "a registration on the same socket is accepted before 1.37"


def test_k9_before_1_37_the_replaced_instance_going_takes_the_newest_down(started, made):
    """Until 1.36 the replaced instance's stream stays open; when it ends the kubelet disconnects the
    resource's current client (the newest instance): every device unhealthy, the surge-update finding."""
    emu = started(OLDEST.name)
    first = plugin(emu, "first.sock", [dev("d0"), dev("d1")], made)
    assert first.register() is None
    second = plugin(emu, "second.sock", [dev("d0"), dev("d1")], made)
    assert second.register() is None
    emu.wait_until(lambda: emu.allocatable(RES) == 2 and emu.endpoint(RES).socket_path.endswith("second.sock"),
                   5, "the second instance serving")
    first.stop()
    emu.wait_until(lambda: emu.allocatable(RES) == 0, 5, "the first instance's exit to take the devices down")
    assert emu.capacity(RES) == 2
