"""PRS – plugin crash, restart and a second instance (K9, K14, K24, K25)."""
import os
import threading

import grpc
import pytest

from dpconform.fixtures.checks import SOCKET_PER_START, check, expect, fail, needs_release
from dpconform.fixtures.outcomes import HarnessError
from dpconform.fixtures.kubelet import Container, Pod
from dpconform.fixtures.manifest import daemonsets, surges
from dpconform.fixtures.waiting import wait_until
from dpconform.kubeletapi import constants, dp


@check("PRS-01", spec="K9")
def test_PRS_01_relaunch_after_sigkill(make_harness):
    """PRS-01: after SIGKILL (its socket file left behind) a relaunched plugin starts, serves and registers."""
    h = make_harness()
    h.start()
    h.kill_plugin()
    since = h.relaunch_plugin()
    try:
        h.wait_registered(since=since)
    except HarnessError as exc:
        fail("the relaunched plugin to register", str(exc).splitlines()[0],
             "on start, remove a stale socket file (or use a fresh name) before listening")
    expect(h.answers(), "the new endpoint answering", "no answer", "serve on the endpoint you register")


@check("PRS-02", "advisory")
def test_PRS_02_sigterm(make_harness, suite_config):
    """PRS-02: on SIGTERM the plugin exits within the timeout and removes its socket."""
    t = suite_config.thresholds.sigterm_timeout
    h = make_harness()
    endpoint = h.start().request.endpoint
    code = h.lifecycle.terminate(t)
    expect(code is not None, f"exit within {t:g}s of SIGTERM", "still running", "handle SIGTERM: stop the server and exit")
    expect(not h.backend.socket_exists(endpoint), "its socket removed", f"{endpoint} left in the plugin dir",
           "remove your socket file on shutdown")


@check("PRS-03", spec="K24, K25")
def test_PRS_03_assignments_survive_crash(make_harness):
    """PRS-03: after a crash and relaunch, devices of running pods are still advertised and not handed out again."""
    h = make_harness()
    h.start()
    if len(h.wait_devices()) < 2:
        pytest.skip("needs at least 2 devices (one held by a running pod, one for a new pod)")
    before = h.admit(Pod("prs-03-before", containers=[Container("c", limits={h.resource: 1})]))
    expect(before.admitted, "the first pod admitted", f"{before.reason}: {before.message}",
           "advertise healthy devices the kubelet can allocate")
    held = set(before.containers["c"].devices[h.resource])
    h.kill_plugin()
    now = h.wait_snapshot(h.wait_registered(since=h.relaunch_plugin()).time)
    expect(held <= set(now), f"the running pod's devices {sorted(held)} still advertised", f"{sorted(now)}",
           "advertise the same IDs after a restart")
    free = len(h.healthy_ids()) - len(held)
    expect(free > 0, "healthy devices beside the running pod's after the relaunch",
           f"healthy {h.healthy_ids()}, held {sorted(held)}", "advertise every device again after a restart")
    after = h.admit(Pod("prs-03-after", containers=[Container("c", limits={h.resource: free})]))
    got = set(after.containers["c"].devices[h.resource]) if after.admitted else set()
    expect(after.admitted and not (got & held), f"{free} other devices for a new pod",
           f"{after.message or sorted(got)}", "keep device IDs stable so the kubelet's checkpoint still matches them")


@check("PRS-04", spec="K9, K14")
def test_PRS_04_surge_second_instance(make_harness, suite_config):
    """PRS-04: a second instance started beside the running one (a DaemonSet surge update starts the new
    pod before the old one goes) registers; the node keeps the devices allocatable while both run and
    after the first one exits, and a new pod gets a device. From kubelet 1.37, which keeps an endpoint per
    instance (K9, K14); before, the kubelet replaces the first instance's endpoint and its exit takes the
    resource down whatever the plugin does, so the check does not apply (MAN-04 and CLU-11 advise)."""
    cfg = suite_config
    release = needs_release("several-endpoints-per-resource", cfg.kube_version,
                            "before 1.37 a second instance replaces the "
                            "first one's endpoint (K9) and the first one's exit takes the resource down whatever the plugin does")
    if cfg.manifest and not any(surges(ds) for ds in daemonsets(cfg.manifest)):
        pytest.skip("its DaemonSet (--manifest) updates without a surge (maxSurge 0, the default, or OnDelete): "
                    "no second instance runs beside the first (MAN-04 advises on that choice)")
    h = make_harness()
    first = h.start()
    h.wait_devices()
    listed = len(h.healthy_ids())
    wait_until(lambda: h.backend.allocatable(h.resource) == listed, cfg.thresholds.node_status_timeout,
               f"allocatable {h.resource} at {listed}", alive=h.backend.check_alive, raise_on_timeout=False)
    healthy = h.backend.allocatable(h.resource)      # what the surge must keep
    second = h.second_instance()
    if second is None:
        pytest.skip("the plugin runs as a DaemonSet: its surge update is CLU-11's")
    runner, since = second

    def theirs(r) -> bool:
        """A registration since the second instance started and not on the first one's endpoint (where the
        kubelet side knows endpoints: the first one may register again meanwhile)."""
        return r.time >= since and not (r.request.endpoint and r.request.endpoint == first.request.endpoint)
    wait_until(lambda: any(theirs(r) and r.accepted for r in h.registrations) or not runner.running,
               cfg.thresholds.register_timeout, "the second instance's registration", alive=h.backend.check_alive,
               raise_on_timeout=False)
    if not any(theirs(r) and r.accepted for r in h.registrations):
        # refused ones; on the first one's endpoint too when there are no others (a socket name reused)
        refused = [r for r in h.registrations if theirs(r)] or [r for r in h.registrations if r.time >= since]
        got = (f"refused by the kubelet {release}: {refused[0].error}" if refused else
               f"no registration within {cfg.thresholds.register_timeout:g}s" +
               ("" if runner.running else f" (it exited with code {runner.returncode}:\n{runner.output(1500)})"))
        if refused and "already connected" in (refused[0].error or ""):
            fix = (f"{SOCKET_PER_START}: the kubelet refuses a registration on the socket of a connected instance "
                   "(this matters where the DaemonSet updates with maxSurge above 0; --manifest judges by yours)")
        elif not refused and not runner.running:
            fix = ("let a second instance start beside the first (hold no host port, lock or socket name the "
                   "first one holds), or update the DaemonSet with maxUnavailable 1, maxSurge 0: capacity then "
                   "drops during the update (MAN-04)")
        else:
            fix = "register the second instance under a socket name of its own while the first one still runs"
        fail("the second instance registered beside the running one", got, fix)
    both = h.backend.allocatable(h.resource)
    expect(both == healthy, f"allocatable {h.resource} {healthy} while both instances run", f"{both}",
           "advertise every device from the new instance as well: the kubelet lists the newest instance's devices")
    # what each instance sends from now on, on streams of the suite's own: the first until it is gone
    window = cfg.thresholds.sigterm_timeout + cfg.thresholds.snapshot_timeout + cfg.thresholds.health_timeout
    heard = StreamRecorder(h.stub(os.path.join(h.backend.plugin_dir, first.request.endpoint)), window)
    new = next(r for r in h.registrations if theirs(r) and r.accepted).request.endpoint
    heard_new = StreamRecorder(h.stub(os.path.join(h.backend.plugin_dir, new)), window) if new else None
    wait_until(lambda: heard.updates, cfg.thresholds.snapshot_timeout, "the first instance's snapshot",
               raise_on_timeout=False)
    h.stop_plugin()                           # the old pod deleted after the new one is ready
    if h.backend.wait_ends_taken_in(1, cfg.thresholds.health_timeout):   # settled: what it shows now, it keeps
        dropped = h.backend.allocatable(h.resource) < healthy
    else:
        dropped = wait_until(lambda: h.backend.allocatable(h.resource) < healthy, cfg.thresholds.health_timeout,
                             "allocatable to drop", alive=h.backend.check_alive, raise_on_timeout=False)
    last = heard.close()
    if heard_new is not None:
        if dropped:   # did the second instance end its stream (LAW-05's rule)? ours began later than the kubelet's
            wait_until(lambda: heard_new.ended_by_plugin, cfg.thresholds.health_timeout, "the second instance's "
                       "stream to end", raise_on_timeout=False)
        heard_new.close()
        if dropped and heard_new.ended_by_plugin:
            h.memory.block("stream-ended", "the second instance's ListAndWatch stream ended while it ran")
    if dropped:
        unhealthy = sorted(d.ID for d in last if d.health != constants.HEALTHY)
        fail(f"allocatable {h.resource} still {healthy} for {cfg.thresholds.health_timeout:g}s after the first "
             "instance exited", f"{h.backend.allocatable(h.resource)}" +
             (f"; the first instance's last ListAndWatch update before it exited listed {unhealthy} Unhealthy"
              if unhealthy else "; the first instance's last update listed every device Healthy"),
             "send no Unhealthy update from the instance that exits: the kubelet applies every instance's "
             "ListAndWatch update to the resource, the new instance's devices included" if unhealthy else
             "keep the second instance's ListAndWatch stream open and its devices Healthy when the first one exits")
    pod = h.admit(Pod("prs-04", containers=[Container("c", limits={h.resource: 1})]))
    expect(pod.admitted, "a pod admitted on the second instance's devices", f"{pod.reason}: {pod.message}",
           "serve Allocate on the second instance's endpoint")


class StreamRecorder:
    """A ListAndWatch stream of the suite's own to one instance, read in a thread until it ends (the
    instance exits) or `timeout` passes: every update it sent."""

    def __init__(self, stub, timeout: float):
        self.updates: list[list[dp.Device]] = []
        self.ended_by_plugin = False          # the stream ended on the plugin's side, not by close()
        self._stream = stub.ListAndWatch(dp.Empty(), timeout=timeout)
        self._thread = threading.Thread(target=self._read, daemon=True, name="prs-04-stream")
        self._thread.start()

    def _read(self) -> None:
        try:
            for msg in self._stream:
                self.updates.append(list(msg.devices))
            self.ended_by_plugin = True
        except grpc.RpcError as e:  # the instance went, the deadline passed, or close(): what it sent is recorded
            self.ended_by_plugin = e.code() not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED)

    def close(self) -> list[dp.Device]:
        """End the stream; the last update heard (none: [])."""
        self._stream.cancel()
        self._thread.join(5)
        return self.updates[-1] if self.updates else []
