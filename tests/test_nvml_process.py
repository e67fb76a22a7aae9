"""`dpconform nvml-plugin` as a real process on the fake NVML, observed through the kubelet's gRPC API:
the tiny in-test Registration server (tests/support/fake_kubelet.py) on a tmp kubelet.sock, then the plugin's own
ListAndWatch stream.
Health is driven from outside the process, the way the conformance suite's --health-hook does it."""
from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import pytest

from dpconform.fixtures.procs import stop_group
from dpconform.kubeletapi import constants, dp, dp_grpc
from tests.support.fake_kubelet import FakeKubelet

H, U = constants.HEALTHY, constants.UNHEALTHY
REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = REPO / "plugin_under_test/nvml/topologies/dgx-8gpu-2numa.yaml"
UUIDS = [f"GPU-8c0f2d1e-7a41-4f0b-9d55-2b1e6a0c000{i}" for i in range(8)]


class Harness:
    """tmp dir with kubelet.sock (Registration server), the plugin process, its ListAndWatch stream."""

    def __init__(self, *plugin_args: str, topology: Path | str = TOPOLOGY):
        self.dir = tempfile.mkdtemp(dir="/tmp", prefix="nvml-")
        self.plugin_dir = os.path.join(self.dir, "dp")
        os.mkdir(self.plugin_dir)
        self.control = os.path.join(self.dir, "ctl.sock")   # not in the plugin dir
        self.log_path = os.path.join(self.dir, "plugin.log")
        self.kubelet = FakeKubelet(self.plugin_dir, ask_options=False).start()
        self._registered = 0   # registrations wait_registered has handed out
        self.args = [sys.executable, "-m", "dpconform", "nvml-plugin", "--nvml", f"fake:{topology}",
                     "--control", self.control, "--plugin-dir", self.plugin_dir, *plugin_args]
        self.proc: subprocess.Popen | None = None
        self.channel: grpc.Channel | None = None
        self.stream = None
        self.snapshots: "queue.Queue[list[dp.Device] | Exception]" = queue.Queue()

    def start(self) -> "Harness":
        self._log = open(self.log_path, "wb")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO,
                                     env=env, start_new_session=True)
        return self

    def log(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def wait_registered(self, timeout: float = 30) -> dp.RegisterRequest:
        try:
            registrations = self.kubelet.wait_registrations(self._registered + 1, timeout)
        except TimeoutError:
            pytest.fail(f"the plugin did not register within {timeout} s; log:\n{self.log()}")
        request, _ = registrations[self._registered]
        self._registered += 1
        return request

    def watch(self, request: dp.RegisterRequest) -> None:
        self.channel = grpc.insecure_channel("unix://" + os.path.join(self.plugin_dir, request.endpoint))
        self.stub = dp_grpc.DevicePluginStub(self.channel)
        self.stream = self.stub.ListAndWatch(dp.Empty(), timeout=120)

        def reader():
            try:
                for msg in self.stream:
                    self.snapshots.put(list(msg.devices))
            except grpc.RpcError as e:
                self.snapshots.put(e)
        threading.Thread(target=reader, daemon=True).start()

    def next_snapshot(self, timeout: float = 5.0) -> dict[str, str]:
        try:
            item = self.snapshots.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no ListAndWatch snapshot within {timeout} s; log:\n{self.log()}")
        if isinstance(item, Exception):
            pytest.fail(f"ListAndWatch ended: {item}; log:\n{self.log()}")
        return {d.ID: d.health for d in item}

    def ctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dpconform", "nvml-plugin", args[0], "--control",
                               self.control, *args[1:]], cwd=REPO, capture_output=True, text=True, timeout=30,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))

    def close(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
        if self.channel is not None:
            self.channel.close()
        if self.proc is not None:
            stop_group(self.proc, grace=10)
        if hasattr(self, "_log"):
            self._log.close()
        self.kubelet.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def harness():
    made: list[Harness] = []

    def make(*args: str, **kw) -> Harness:
        h = Harness(*args, **kw)
        made.append(h)
        return h.start()
    yield make
    for h in made:
        h.close()


def test_xid_health_through_list_and_watch(harness):
    """XID 79 on GPU 3 -> only GPU 3 Unhealthy within 5 s; the ignored XID 13 before it changes nothing;
    recovery (fake only, --health-recovery) -> Healthy; an event-wait failure -> all Unhealthy."""
    h = harness("--health-recovery")
    reg = h.wait_registered()
    assert reg.resource_name == "nvidia.com/gpu" and reg.version == "v1beta1"
    assert reg.options.get_preferred_allocation_available
    assert reg.endpoint.startswith("nvidia-gpu") and "/" not in reg.endpoint
    h.watch(reg)
    first = h.next_snapshot()
    assert first == {u: H for u in UUIDS}

    # XID 13 (application error, ignored) on GPU 5, then XID 79 on GPU 3: events are handled in order,
    # so the next snapshot would show GPU 5 if XID 13 had changed anything.
    r = h.ctl("inject-xid", "5", "13")
    assert r.returncode == 0, r.stderr
    started = time.monotonic()
    r = h.ctl("inject-xid", "3", "79")
    assert r.returncode == 0, r.stderr
    snap = h.next_snapshot(timeout=5)
    assert time.monotonic() - started < 5
    assert snap == {u: (U if i == 3 else H) for i, u in enumerate(UUIDS)}, \
        "expected exactly GPU 3 Unhealthy after XID 79 (and XID 13 on GPU 5 ignored)"

    # Allocate still answers (NVIDIA does not refuse unhealthy IDs; the kubelet will not pick them).
    resp = h.stub.Allocate(dp.AllocateRequest(container_requests=[
        dp.ContainerAllocateRequest(devices_ids=[UUIDS[0], UUIDS[1]])]), timeout=10)
    assert resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == f"{UUIDS[0]},{UUIDS[1]}"

    # Recovery through the --health-hook form of the control command.
    r = h.ctl("health", UUIDS[3], "Healthy")
    assert r.returncode == 0, r.stderr
    assert h.next_snapshot(timeout=5) == {u: H for u in UUIDS}

    # The event wait itself fails (not a timeout): every GPU goes Unhealthy.
    r = h.ctl("fail-wait", "Unknown")
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 5
    snap = {}
    while set(snap.values()) != {U}:
        snap = h.next_snapshot(timeout=max(0.1, deadline - time.monotonic()))
    assert snap == {u: U for u in UUIDS}


def test_fail_on_init_error_true_exits_with_one_line(harness, tmp_path):
    topo = tmp_path / "broken.yaml"
    topo.write_text("initError: DriverNotLoaded\ndevices: []\n")
    h = harness("--fail-on-init-error", topology=topo)
    try:
        rc = h.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"plugin did not exit on NVML init failure; log:\n{h.log()}")
    assert rc != 0
    errors = [line for line in h.log().splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "failed to initialize NVML: Driver Not Loaded" in errors[0], h.log()
    assert not h.kubelet.registrations


def test_fail_on_init_error_false_registers_zero_devices(harness, tmp_path):
    topo = tmp_path / "broken.yaml"
    topo.write_text("initError: DriverNotLoaded\ndevices: []\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nflags:\n  failOnInitError: false\n")
    h = harness("--config", str(cfg), topology=topo)
    reg = h.wait_registered()
    h.watch(reg)
    assert h.next_snapshot() == {}
    assert h.proc.poll() is None, "the plugin must stay up with failOnInitError=false"
