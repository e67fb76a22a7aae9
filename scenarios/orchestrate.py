"""The pytest side of the load scenarios (never imports locust).

LoadTarget starts what a scenario loads: the kubelet emulator (in this process, with its HTTP API), or
for cluster_admission_burst a cluster backend (its API server is what the scenario loads), and the
plugin under test (its own process group, through dpconform.fixtures.harness), and writes TARGET.json for the
runner. run_scenario() starts `python -m dpconform.scenarios.runner` in its own process group, echoes its
progress lines as they come, and kills the group on timeout, error or Ctrl-C.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field

from dpconform.fixtures.config import SuiteConfig, bundled_health_hook, bundled_plugin_cmd
from dpconform.fixtures.harness import Harness
from dpconform.fixtures.kubelet.http_api import HttpApi
from dpconform.fixtures.procs import killpg, stop_group
from dpconform.fixtures.resources import Resources
from dpconform.fixtures.waiting import wait_until

REPO = pathlib.Path(__file__).resolve().parent.parent


class LoadTarget:
    """Emulator + plugin, registered, devices seen, HTTP API up. A context manager; close() is idempotent.

    plugin_cmd None: the bundled fake-GPU plugin with `devices` devices, a control socket for health flips
    and `plugin_args` appended (e.g. "--defect slow-allocate"). Otherwise the user's command and the
    suite's --health-hook (churn needs one). backend: "emulator" (default) or a cluster backend
    (local, kind, kubeconfig): then the target names the kubeconfig, namespace and node instead of an
    HTTP API, and start() waits until the Node object lists the plugin's healthy devices."""

    def __init__(self, plugin_cmd: str | None = None, cfg: SuiteConfig | None = None, *, devices: int = 8,
                 plugin_args: str = "", startup_timeout: float | None = None, backend: str = "emulator"):
        self.cfg = cfg or SuiteConfig()
        self.bundled = plugin_cmd is None
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="dpc-load-", dir="/tmp"))
        self.control = None
        hook = self.cfg.health_hook
        if self.bundled:
            self.control = str(self.tmp / "fakegpu.ctl")
            plugin_cmd = bundled_plugin_cmd(f"--control {self.control} --devices {devices} {plugin_args}")
            hook = bundled_health_hook(self.control)
        self.expected_devices = devices if self.bundled else None
        self.h = Harness(self.cfg, plugin_cmd=plugin_cmd, health_hook=hook, backend=backend)
        self.on_cluster = "cluster" in self.h.backend.capabilities
        self.http: HttpApi | None = None
        self.startup_timeout = startup_timeout
        self.target_path = self.tmp / "target.json"
        self.target: dict = {}

    def start(self) -> "LoadTarget":
        try:
            self.h.start()
            self.h.wait_devices(self.startup_timeout)
            if self.expected_devices:
                wait_until(lambda: len(self.h.healthy_ids()) >= self.expected_devices, self.h.t.snapshot_timeout,
                           f"{self.expected_devices} healthy devices")
            if self.on_cluster:
                n = len(self.h.healthy_ids())
                wait_until(lambda: self.h.backend.allocatable(self.h.resource) >= n, self.h.t.node_status_timeout,
                           f"the Node to list {n} allocatable {self.h.resource}", alive=self.h.backend.check_alive)
            else:
                self.http = HttpApi(self.h.backend.emulator)
                self.http.start()
            self.target = self._target()
            self.target_path.write_text(json.dumps(self.target, indent=2))
        except BaseException:
            self.close()
            raise
        return self

    def _target(self) -> dict:
        reg, opts = self.h.registration, self.h.options
        b = self.h.backend
        return {
            "endpoint": self.h.observed.endpoint_path, "http": self.http.url if self.http else None,
            "cluster": {"kubeconfig": b.node.kubeconfig, "namespace": b.cluster.namespace, "node": b.cluster.node_name,
                        "backend": b.name} if self.on_cluster else None,
            "resource": reg.request.resource_name,
            "devices": self.h.healthy_ids(), "control": self.control,
            "health_hook": None if self.control else self.h.health_hook,
            "options": {"get_preferred_allocation_available": opts.get_preferred_allocation_available,
                        "pre_start_required": opts.pre_start_required},
            "plugin": {"command": self.h.plugin_cmd, "bundled": self.bundled, "resource": reg.request.resource_name,
                       "version": reg.request.version, "endpoint": reg.request.endpoint,
                       "devices": len(self.h.devices()), "healthy_devices": len(self.h.healthy_ids())},
        }

    def settled(self) -> bool:
        """No pods left and every device allocatable again (after a scenario restored health)."""
        b, res = self.h.backend, self.h.resource
        return not b.pods() and b.allocatable(res) == len(self.target["devices"])

    def close(self) -> None:
        try:
            if self.http is not None:
                self.http.stop()
                self.http = None
        finally:
            try:
                self.h.close()
            finally:
                shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


@dataclass
class RunOutcome:
    scenario: str
    rc: int | None
    result: dict | None
    output: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return list(self.result["slo"]["violations"]) if self.result else []

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.output[-n:])


def run_scenario(scenario: str, profile: str, target_path, out_dir, *, users: int | None = None,
                 duration: float | None = None, spawn_rate: float | None = None, tag: str = "", echo=print, timeout: float | None = None,
                 no_plots: bool = False, processes: int | None = None, burst_size: int | None = None,
                 generator: str | None = None) -> RunOutcome:
    """Run one scenario in its own process (group); return its exit code and result JSON."""
    from dpconform.scenarios import profile as profiles
    s = profiles.load(profile)["scenarios"][scenario]
    dur = duration or float(s["duration_s"])
    timeout = timeout or dur + float(s.get("stop_timeout_s", 5)) + 90   # start-up + plots + slack
    argv = [sys.executable, "-m", "dpconform.scenarios.runner", scenario, "--profile", str(profile),
            "--target", str(target_path), "--out", str(out_dir)]
    if users:
        argv += ["--users", str(users)]
    if duration:
        argv += ["--duration", str(duration)]
    if spawn_rate:
        argv += ["--spawn-rate", str(spawn_rate)]
    if burst_size:
        argv += ["--burst-size", str(burst_size)]
    if tag:
        argv += ["--tag", tag]
    if no_plots:
        argv.append("--no-plots")
    if generator:
        argv += ["--generator", generator]
    if processes:       # locust's distributed mode: a master and this many workers (dpconform.scenarios.runner)
        argv += ["--processes", str(processes)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
        [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=REPO, env=env, start_new_session=True, text=True, bufsize=1)
    timed_out = threading.Event()

    def on_timeout():
        timed_out.set()
        killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, on_timeout)
    timer.daemon = True
    timer.start()
    out: list[str] = []
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            out.append(line)
            echo(line)
        rc = proc.wait(timeout=30)
    finally:
        timer.cancel()
        stop_group(proc, grace=10)        # Ctrl-C or an error here; and anything the runner left in its group
        if proc.poll() is None:
            proc.wait(timeout=10)
        proc.stdout.close()
    if timed_out.is_set():
        out.append(f"[load] {scenario}: killed after {timeout:g} s (timeout)")
    stem = scenario + (f"-{tag}" if tag else "")
    path = pathlib.Path(out_dir) / f"{stem}.json"
    result = json.loads(path.read_text()) if path.exists() and rc in (0, 1) else None
    return RunOutcome(scenario, rc, result, out)


def devices_needed(profile: dict) -> int:
    """How many fake GPUs the bundled plugin needs for every scenario of a profile (the emulator runs
    cluster_admission_burst's burst size too, side by side)."""
    sc = profile["scenarios"]
    need = max(int(b["burst_size"]) * int(b.get("users", 1)) * int(b.get("devices_per_pod", 1))
               for b in (sc["node_admission_burst"], sc["cluster_admission_burst"]))
    churn = sc["churn"]
    need = max(need, int(churn["users"]) + int(churn.get("flip_devices", 1)) + 1)
    return max(8, need)


__all__ = ["LoadTarget", "RunOutcome", "run_scenario", "devices_needed"]


HARNESS_BOUND_RATIO = 2.0  # a plugin within this factor of the floor is not resolved by the generator


def noop_allocate_burst(profile: str, out_dir, *, users: int, duration: float, generator: str | None,
                        tag: str, native: bool | None = None) -> dict:
    """plugin_allocate_burst against the no-op server (scenarios/noop_plugin.py: bin/dp-floor when built;
    native as noop_plugin.running, True raises FloorUnavailable without it): the harness floor of
    `generator` with `users` callers. Returns the Allocate summary, with `server` ("go" or "python");
    raises RuntimeError if the run failed."""
    from dpconform.scenarios import noop_plugin
    server_kind = noop_plugin.kind(native)
    with tempfile.TemporaryDirectory(prefix="dpc-floor-", dir="/tmp") as tmp, \
            noop_plugin.running(tmp, native=server_kind == "go") as (sock, _server):
        target = pathlib.Path(tmp) / "target.json"
        target.write_text(json.dumps({"endpoint": sock, "devices": [f"noop-{i}" for i in range(8)], "options": {},
                                      "plugin": {"command": noop_plugin.describe(server_kind), "noop": True}}))
        o = run_scenario("plugin_allocate_burst", profile, target, out_dir, users=users, duration=duration,
                         tag=tag, echo=lambda line: None, no_plots=True, generator=generator)
    if o.result is None:
        raise RuntimeError(f"the harness floor run failed (exit {o.rc}):\n{o.tail()}")
    return (dict(o.result["requests"].get("Allocate", {})) | {"duration_s": o.result["duration_s"],
                                                               "server": server_kind})


class DraLoadTarget:
    """dra_prepare_burst's target: a DraEnvironment on the emulator backend (API server from bin/, the
    kubelet's DRA side, the driver: --plugin-cmd with --dra, else the bundled fake-GPU DRA driver), and a
    pool of `claims` allocated claims (round robin over the driver's devices: the driver does not judge
    sharing, the scheduler does). BackendUnavailable when this host has no control-plane binaries."""

    def __init__(self, cfg: SuiteConfig, claims: int, backend: str = "emulator"):
        import dataclasses
        from dpconform.fixtures.dra.environment import DraEnvironment
        plugin_cmd = cfg.plugin_cmd if cfg.dra else None     # without --dra, --plugin-cmd is a device plugin
        self.env = DraEnvironment(dataclasses.replace(cfg, dra=True, backend=backend, plugin_cmd=plugin_cmd,
                                                      health_hook=None))
        self.n = claims
        self._made = Resources()      # what _cluster() made
        self.target_path = pathlib.Path(self.env.root) / "target.json"
        self.target: dict = {}

    def __enter__(self) -> "DraLoadTarget":
        from dpconform.fixtures.dra import claims as claimlib
        try:
            self.env.start()
            reg = self.env.require_registered()
            service = self.env.service()
            devs = self.env.devices(1)
            made = []
            for i in range(self.n):
                pool, dev = devs[i % len(devs)]
                c = claimlib.create_allocated(self.env.api, self.env.namespace, f"load-{i}", self.env.driver_name,
                                              pool, [dev], claimlib.new_pod_uid())
                made.append({"namespace": c.metadata.namespace, "name": c.metadata.name, "uid": c.metadata.uid})
        except BaseException:
            self.env.close()
            raise
        self.target = {"dra": {"endpoint": reg.endpoint, "service": service, "claims": made},
                       "devices": [c["name"] for c in made],
                       "plugin": {"driver": reg.info.name, "service": service, "devices": len(devs)}}
        if self.env.cluster is not None:
            try:
                self.target.update(self._cluster(devs))
            except BaseException:
                self.__exit__()
                raise
        self.target_path.write_text(json.dumps(self.target))
        return self

    def _cluster(self, devs) -> dict:
        """cluster_admission_burst with claims: a namespace, a DeviceClass of the driver's devices and a
        one-device ResourceClaimTemplate; pods ask for a claim from it instead of an extended resource."""
        _, ns = self.env.claim_namespace("dpconform-load", self._made)
        return {"cluster": {"kubeconfig": self.env.kubeconfig, "namespace": ns, "node": self.env.node,
                            "claim_template": "gpu"},
                "resource": f"claims of {self.env.driver_name}", "devices": [d for _, d in devs]}

    def __exit__(self, *exc) -> None:
        try:
            self._made.close()    # the namespace, DeviceClass and API client of the cluster burst
        finally:
            self.env.close()
