"""CLU (continued) – the plugin as users deploy it: a DaemonSet (--plugin-manifest, --plugin-image) installed,
its pod deleted, rolled, rolled back and uninstalled through the API server, while workload pods hold
devices. Runs on the cluster backends with --plugin-manifest and --resource; skipped otherwise."""
import time

import pytest

from dpconform.fixtures.host import stray_sockets
from dpconform.fixtures import kube_versions
from dpconform.fixtures.checks import check, expect, fail, needs
from dpconform.fixtures.manifest import hostpath_mount_finding
from dpconform.fixtures.waiting import wait_until


@pytest.fixture
def deployment(make_harness, suite_config):
    """(harness on the cluster, the plugin's DaemonSet, not installed yet); uninstalled after the check."""
    cfg = suite_config
    if not cfg.plugin_manifest:
        pytest.skip("needs --plugin-manifest PATH (your plugin's DaemonSet) and --resource NAME on a cluster backend")
    h = make_harness()
    needs(h, "cluster")
    h.backend.start()
    h.backend.before_plugin_start()       # the node is this check's: other harnesses' plugins are parked
    ds = h.plugin.daemonset()
    h.resources.add(f"uninstalling daemonset {ds.name}", ds.uninstall)
    return h, ds


def _bound(cfg) -> float:
    """Registration plus the Node status catching up: how long capacity may take after a pod starts."""
    return cfg.thresholds.register_timeout + cfg.thresholds.node_status_timeout


def _resources(h, cfg) -> tuple[int, int]:
    return h.backend.cluster.node_resources(cfg.resource)


def _installed(h, ds, cfg) -> int:
    """Install and wait for the plugin's devices on the Node; the device count. Fails the check (naming
    the MAN finding that explains it, if one does) when they never show."""
    since = time.monotonic()
    ds.install()
    finding = hostpath_mount_finding(ds.body)
    why = f"; MAN-01 explains it: {finding}" if finding else ""
    try:
        ds.wait_rolled_out(_bound(cfg))
    except TimeoutError as e:
        fail(f"daemonset {ds.name}'s pod running and ready on node {h.backend.cluster.node_name}", f"{e}{why}",
             "make the plugin's pod start (image, volumes, tolerations, priority) and report ready")
    seen = {}

    def registered():     # by the kubelet first: the Node may still list an earlier install's devices
        seen["v"] = _resources(h, cfg)
        return _registered_since(h, since) and seen["v"][1] > 0
    if not wait_until(registered, _bound(cfg), f"{cfg.resource} on the Node", raise_on_timeout=False, interval=0.25):
        fail(f"Node {h.backend.cluster.node_name} to list {cfg.resource} within {_bound(cfg):g}s of the plugin's pod "
             f"being ready", f"capacity/allocatable {seen['v'][0]}/{seen['v'][1]}, "
             f"{'a' if _registered_since(h, since) else 'no'} registration since the install{why}",
             "register with the kubelet through /var/lib/kubelet/device-plugins/kubelet.sock on the host "
             "(a hostPath mount at the same path)")
    return seen["v"][0]


def _workload(h, cfg, name: str, n: int):
    """A pod through the scheduler holding n devices: (pod name, its devices, its container state)."""
    out = h.backend.cluster.schedule(name, {cfg.resource: n})
    pod = out.pod.metadata.name
    h.resources.add(f"removing pod {pod}", lambda: h.backend.cluster.delete_pod(pod))
    unhealthy = "no healthy devices" in (out.message or "")    # refused before any Allocate call
    expect(out.running, f"pod {pod} asking for {n} {cfg.resource} Running", f"{out.phase} {out.reason}: {out.message}",
           "keep the devices advertised Healthy while the plugin runs (the kubelet held none healthy and never "
           "called Allocate)" if unhealthy else "answer Allocate for every device the kubelet picks")
    devices = h.backend.cluster.assignments(out.pod.metadata.uid).get("c", {}).get(cfg.resource, [])
    return pod, sorted(devices), _state(out.pod)


def _state(p) -> dict[str, tuple]:
    """{container: (container ID, restarts, running)} of a pod object."""
    return {cs.name: (cs.container_id, cs.restart_count, bool(cs.state and cs.state.running))
            for cs in (p.status.container_statuses if p else None) or []}


def _kept(h, pod: str, before: dict, what: str) -> None:
    now = _state(h.backend.cluster.read_pod(pod))
    expect(now == before, f"pod {pod} untouched by {what} (same container, not restarted, running)",
           f"before {before}, after {now}", "never restart or fail running containers when the plugin restarts")


def _registered_since(h, since: float) -> bool:
    """Whether the kubelet accepted a registration after `since` (a time.monotonic())."""
    return any(r.accepted and r.time >= since for r in h.registrations)


def _capacity_back(h, cfg, n: int, what: str, since: float, fix: str | None = None) -> None:
    """The new plugin pod registered after `since` (a time.monotonic()), then the Node lists n of n again.
    The registration comes first: the Node's status lags behind the kubelet (it may still show the old
    pod's devices while the kubelet holds none healthy, and a pod placed then is refused)."""
    expect(wait_until(lambda: _registered_since(h, since), _bound(cfg),
                      "a registration", raise_on_timeout=False, interval=0.25),
           f"the plugin's new pod registered within {_bound(cfg):g}s of {what}",
           f"no registration since; registrations: {len(h.registrations)}",
           "register with the kubelet as soon as the pod starts")
    seen = {}

    def back():
        seen["v"] = _resources(h, cfg)
        return seen["v"] == (n, n)
    expect(wait_until(back, _bound(cfg), "capacity back", raise_on_timeout=False, interval=0.25),
           f"capacity/allocatable {n}/{n} back within {_bound(cfg):g}s of {what}", f"{seen['v'][0]}/{seen['v'][1]}",
           fix or "re-register and advertise the same devices when the plugin's pod is replaced")


def _no_double_allocation(h, cfg, n: int, held: list[str], name: str) -> None:
    """The rest of the devices go to a new pod: none of them is one a running pod holds."""
    _, got, _ = _workload(h, cfg, name, n - len(held))
    expect(not set(got) & set(held), f"pod {name} gets devices other than {held} (held by a running pod)",
           f"{got}", "advertise the same device IDs after a restart so the kubelet's checkpoint still holds")


@check("CLU-09", spec="K1, K8")
def test_CLU_09_install_registers(deployment, suite_config):
    """CLU-09: installed as a DaemonSet, the plugin registers on every selected node within the bound and its
    devices show on the Node; when they never do, the MAN finding that explains it is named."""
    h, ds = deployment
    n = _installed(h, ds, suite_config)
    expect(n > 0, f"{suite_config.resource} capacity on the Node", f"{n}", "advertise at least one device")


@check("CLU-10", spec="K14, K15")
def test_CLU_10_pod_deleted_recovers(deployment, suite_config):
    """CLU-10: the plugin's pod deleted (as a crash would): the DaemonSet brings it back, capacity returns
    within the bound, a running pod keeps its devices and no device is handed out twice."""
    h, ds, cfg = *deployment, suite_config
    n = _installed(h, ds, cfg)
    pod, held, state = _workload(h, cfg, "clu-10-held", 1)
    old = {p.metadata.name for p in ds.pods()}
    since = time.monotonic()
    for name in old:
        ds.delete_pod(name)
    wait_until(lambda: ds.rolled_out() and not old & {p.metadata.name for p in ds.pods()}, _bound(cfg),
               "a new plugin pod", raise_on_timeout=False, interval=0.25)
    _capacity_back(h, cfg, n, "the plugin pod's deletion", since)
    _kept(h, pod, state, "the plugin pod's deletion")
    if n > 1:
        _no_double_allocation(h, cfg, n, held, "clu-10-rest")


def _zero_window(h, cfg, until) -> float:
    """Seconds the Node's allocatable was 0 while polling until `until()` holds (bounded)."""
    zero, last, t_end = 0.0, time.monotonic(), time.monotonic() + _bound(cfg) * 2
    while time.monotonic() < t_end:
        done = until()
        now = time.monotonic()
        if _resources(h, cfg)[1] == 0:
            zero += now - last
        last = now
        if done:
            break
        time.sleep(0.2)
    return zero


@check("CLU-11", spec="K14, K15")
def test_CLU_11_rolling_update(deployment, suite_config):
    """CLU-11: a rolling update (the pod template changed) completes within the bound, no running pod loses
    its devices, no device is allocated twice, capacity is back after; the time with allocatable 0 is
    reported."""
    h, ds, cfg = *deployment, suite_config
    n = _installed(h, ds, cfg)
    pod, held, state = _workload(h, cfg, "clu-11-held", 1)
    since = time.monotonic()
    ds.update({"metadata": {"annotations": {"dpconform.io/rollout": str(time.time_ns())}}})
    zero = _zero_window(h, cfg, ds.rolled_out)
    if not ds.rolled_out():
        fail(f"the rolling update of daemonset {ds.name} done within {_bound(cfg) * 2:g}s",
             f"not rolled out: {ds.pod_states()} ({ds.read().spec.update_strategy.type})",
             "use updateStrategy RollingUpdate (maxSurge 1, maxUnavailable 0 keeps capacity during the update)")
    print(f"CLU-11: allocatable {cfg.resource} was 0 for {zero:.1f}s during the rollout")
    ru = ds.read().spec.update_strategy.rolling_update
    surge = ru is not None and str(ru.max_surge or 0) not in ("0", "0%")
    several = kube_versions.holds("several-endpoints-per-resource", cfg.kube_version)
    _capacity_back(h, cfg, n, "the rolling update", since, fix=(
        f"a surge update (maxSurge > 0) runs old and new pod at once: on kubelet {kube_versions.release(cfg.kube_version).name} "
        "the replaced pod's disconnect marks your devices unhealthy after the new one registered (K9): resend your "
        "device list after registering, or update with maxUnavailable 1, maxSurge 0") if surge and not several else None)
    _kept(h, pod, state, "the rolling update")
    if n > 1:
        _no_double_allocation(h, cfg, n, held, "clu-11-rest")


@check("CLU-12", spec="K15")
def test_CLU_12_rollback(deployment, suite_config):
    """CLU-12: after an update, a rollback to the previous revision restores the old pod template, and
    capacity is back after it."""
    h, ds, cfg = *deployment, suite_config
    n = _installed(h, ds, cfg)
    before = ds.template()
    ds.update({"metadata": {"annotations": {"dpconform.io/rollout": str(time.time_ns())}}})
    ds.wait_rolled_out(_bound(cfg) * 2)
    since = time.monotonic()
    try:
        ds.rollback()
        ds.wait_rolled_out(_bound(cfg) * 2)
    except Exception as e:  # noqa: BLE001 - an API error or a rollout that never ends: the finding
        fail(f"a rollback of daemonset {ds.name} to its previous revision", str(e).splitlines()[0],
             "keep previous revisions (spec.revisionHistoryLimit > 0) so a bad update can be undone")
    after = ds.template()
    expect(after == before, "the pod template as it was before the update", f"{after} (before: {before})",
           "roll back with the previous ControllerRevision's template")
    _capacity_back(h, cfg, n, "the rollback", since)


@check("CLU-13", spec="K14")
def test_CLU_13_uninstall(deployment, suite_config):
    """CLU-13: uninstalled, the Node's allocatable drops to 0, a new pod is refused, and nothing of the plugin
    is left on the node (no socket in the device-plugin dir)."""
    h, ds, cfg = *deployment, suite_config
    plugin_dir = h.backend.plugin_dir
    before = set(stray_sockets(plugin_dir))
    _installed(h, ds, cfg)
    ours = set(stray_sockets(plugin_dir)) - before
    ds.uninstall()
    seen = {}

    def gone():
        seen["v"] = _resources(h, cfg)
        return seen["v"][1] == 0
    expect(wait_until(gone, _bound(cfg), "allocatable 0", raise_on_timeout=False, interval=0.25),
           f"allocatable {cfg.resource} 0 within {_bound(cfg):g}s of the uninstall", f"{seen['v']}",
           "stop serving (and let the kubelet see the stream end) when the pod goes")
    out = h.backend.cluster.schedule("clu-13-after", {cfg.resource: 1}, pending_for=2)
    h.resources.add("removing pod clu-13-after", lambda: h.backend.cluster.delete_pod(out.pod.metadata.name))
    expect(not out.running, "a pod asking for the uninstalled resource refused", f"{out.phase}",
           "nothing: the kubelet refuses it once the plugin is gone")
    left = sorted(set(stray_sockets(plugin_dir)) & ours)
    expect(not left, f"no socket of the plugin left in {plugin_dir}", f"{left}",
           "remove your socket when you get SIGTERM (the pod's termination)")
