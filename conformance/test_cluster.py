"""CLU – the cluster's view: the Node object, the scheduler, pod status, kubelet restarts under running
pods, the kubelet's metrics through the API server. Runs on the cluster backends (local, kind,
kubeconfig); skipped elsewhere with the reason."""
import re

import pytest

from dpconform.fixtures.checks import advise, check, expect, fail, needs
from dpconform.fixtures.outcomes import HarnessError
from dpconform.fixtures.kubelet import Container, Pod
from dpconform.fixtures.responses import ids_named
from dpconform.fixtures.waiting import wait_until
from dpconform.kubeletapi import constants


@pytest.fixture
def cluster(harness, suite_config):
    needs(harness, "cluster")
    return harness


def _node_shows(h, capacity: int, allocatable: int, timeout: float) -> tuple[int, int] | None:
    """Wait until the Node's (capacity, allocatable) are the given ones; None if they are, else the last seen."""
    seen = {}

    def ok():
        seen["v"] = h.backend.cluster.node_resources(h.resource)
        return seen["v"] == (capacity, allocatable)
    return None if wait_until(ok, timeout, "the Node's capacity", raise_on_timeout=False, interval=0.2) else seen["v"]


@check("CLU-01", spec="K20")
def test_CLU_01_node_capacity(cluster, suite_config):
    """CLU-01: the Node's capacity equals the advertised devices and its allocatable the healthy ones,
    within the node-status bound – what the scheduler sees."""
    h, t = cluster, suite_config.thresholds.node_status_timeout
    latest = h.snapshots()[-1]          # as sent: a duplicate ID is two entries to the plugin, one to the kubelet
    want = (len(latest), sum(1 for d in latest if d.health == constants.HEALTHY))
    got = _node_shows(h, *want, t)
    if got is not None:
        fail(f"Node {h.backend.cluster.node_name} capacity/allocatable {want[0]}/{want[1]} {h.resource} (as advertised) "
             f"within {t:g}s", f"{got[0]}/{got[1]} (advertised: {[d.ID for d in latest]})",
             "advertise each device once, with a unique ID, and keep the ListAndWatch stream open")


@check("CLU-02", spec="K12, K20")
def test_CLU_02_unhealthy_lowers_allocatable(cluster, suite_config):
    """CLU-02: an Unhealthy device lowers the Node's allocatable only, and its recovery restores it."""
    h, t = cluster, suite_config.thresholds.node_status_timeout
    if not h.health_hook:
        pytest.skip("needs --health-hook 'CMD {device} {health}' to flip a device's health")
    n, dev = len(h.devices()), h.healthy_ids()[0]
    healthy = len(h.healthy_ids())
    h.set_health(dev, constants.UNHEALTHY)
    got = _node_shows(h, n, healthy - 1, t)
    expect(got is None, f"capacity {n}, allocatable {healthy - 1} within {t:g}s of {dev} turning Unhealthy",
           f"{got}", "send a snapshot with the device Unhealthy when it fails")
    h.set_health(dev, constants.HEALTHY)
    got = _node_shows(h, n, healthy, t)
    expect(got is None, f"allocatable back to {healthy} after {dev} recovers", f"{got}",
           "send a snapshot with the device Healthy again when it recovers")


def _admitted(res, what: str):
    expect(res.admitted, f"{what} admitted", f"{res.reason}: {res.message}",
           "answer Allocate with one ContainerAllocateResponse for the requested devices")


@check("CLU-03", spec="K17, K21")
def test_CLU_03_scheduled_pod_gets_its_device(cluster, suite_config):
    """CLU-03: pods through the scheduler run, and each container shows what Allocate returned for the
    devices the kubelet gave it (read from the container's own output)."""
    h = cluster
    ids = set(h.devices())
    for i in range(2):     # the second pod gets a device other than the lowest
        out = h.backend.cluster.schedule(f"clu-03-{i}", {h.resource: 1})
        h.resources.add(f"removing pod {out.pod.metadata.name}", lambda p=out.pod.metadata.name: h.backend.cluster.delete_pod(p))
        expect(out.running, f"pod {i + 1} asking for 1 {h.resource} Running", f"{out.phase} {out.reason}: {out.message}",
               "answer Allocate for every device the kubelet picks")
        name = out.pod.metadata.name
        given = {i for c in h.backend.cluster.assignments(out.pod.metadata.uid).values() for i in c.get(h.resource, [])}
        report = h.backend.cluster.pod_report(name)
        expect(report is not None, f"pod {i + 1}'s container to print its environment once Running",
               "no output from it", "check what Allocate gives the container (a mount or device node it cannot "
               "use stops it before its first line)")
        env = report.env
        named = ids_named(env.values(), ids)
        expect(not named or named == given, f"the container's env to name its device {sorted(given)}",
               f"it names {sorted(named)} ({ {k: v for k, v in env.items() if ids_named([v], ids)} })",
               "build the ContainerAllocateResponse from the requested device IDs")


@check("CLU-04", spec="K18")
def test_CLU_04_too_many_pending(cluster, suite_config):
    """CLU-04: a pod asking for more devices than the node has stays Pending: the scheduler says
    Insufficient <resource>."""
    h = cluster
    have = suite_config.expected_devices or len(h.healthy_ids())
    out = h.backend.cluster.schedule("clu-04", {h.resource: have + 1}, pending_for=2.0)
    h.resources.add("removing pod clu-04", lambda: h.backend.cluster.delete_pod(out.pod.metadata.name))
    expect(out.phase == "Pending" and f"Insufficient {h.resource}" in out.message,
           f"Pending, PodScheduled=False: Insufficient {h.resource} (asked for {have + 1})",
           f"{out.phase} {out.reason}: {out.message}", "advertise only the devices that exist (no overcommit)")


@check("CLU-05", spec="K18, K20")
def test_CLU_05_bound_pod_without_free_device(cluster, suite_config):
    """CLU-05: a pod bound to the node past the scheduler when no device is free fails admission with
    UnexpectedAdmissionError."""
    h = cluster
    have = suite_config.expected_devices or len(h.healthy_ids())
    filler = h.admit(Pod("clu-05-all", containers=[Container("c", limits={h.resource: have})]))
    _admitted(filler, f"a pod asking for all {have} devices")
    res = h.admit(Pod("clu-05-one-more", containers=[Container("c", limits={h.resource: 1})]))
    expect(not res.admitted and res.reason == "UnexpectedAdmissionError",
           "UnexpectedAdmissionError for a pod bound to a node with no free device",
           f"admitted={res.admitted} {res.reason}: {res.message}", "advertise only the devices that exist")


@check("CLU-06", spec="K15, K24, K25")
def test_CLU_06_kubelet_restart_keeps_running_pods(make_harness, suite_config):
    """CLU-06: after a kubelet restart, running pods keep their containers and devices (kubernetes#118559,
    init + app container pods too: #124345) and allocatable returns; a pod created before the plugin
    re-registers is reported (#133382)."""
    needs(suite_config, "cluster")
    needs(suite_config, "kubelet-restart")
    t = suite_config.thresholds
    h = make_harness()
    h.start()
    h.wait_devices()
    if len(h.healthy_ids()) < 2:
        pytest.skip("needs at least 2 devices")
    plain = h.admit(Pod("clu-06-app", containers=[Container("c", limits={h.resource: 1})]))
    init = h.admit(Pod("clu-06-init", init_containers=[Container("init", limits={h.resource: 1})],
                       containers=[Container("app", limits={h.resource: 1})]))
    for r, what in ((plain, "a pod"), (init, "a pod with an init and an app container")):
        _admitted(r, what)
    before = {uid: h.backend.cluster.container_state(uid) for uid in (plain.pod_uid, init.pod_uid)}
    since = h.restart_kubelet()
    early = h.admit(Pod("clu-06-early", containers=[Container("c", limits={h.resource: 1})]))
    try:
        h.wait_registered(since=since, timeout=t.reregister_timeout)
    except HarnessError as exc:
        fail(f"the plugin registered again within {t.reregister_timeout:g}s, allocatable back",
             str(exc).splitlines()[0], "re-register after every kubelet restart")
    if not early.admitted:
        advise("a pod created right after the kubelet restart to be admitted once the plugin is back",
               f"{early.reason}: {early.message} (kubernetes#133382)",
               "re-register as fast as you can after kubelet.sock is re-created")
    got = _node_shows(h, len(h.devices()), len(h.healthy_ids()), t.node_status_timeout)
    expect(got is None, "allocatable back after the restart", f"{got}", "re-register after every kubelet restart")
    for uid, was in before.items():
        now = h.backend.cluster.container_state(uid)
        expect(now == was, "the running pod's containers untouched by the kubelet restart (same IDs, no restarts)",
               f"before {was}, after {now}",
               "advertise the same device IDs after re-registering: the kubelet re-admits running pods against them")


@check("CLU-07", spec="K14, K20")
def test_CLU_07_plugin_stop_and_back(make_harness, suite_config):
    """CLU-07: when the plugin stops, allocatable drops to 0 and a new pod is refused; when it is back,
    capacity and allocatable return with the same devices."""
    needs(suite_config, "cluster")
    t = suite_config.thresholds
    h = make_harness()
    h.start()
    before = sorted(h.wait_devices())
    h.stop_plugin()
    got = _node_shows(h, len(before), 0, t.node_status_timeout)
    expect(got is None, "allocatable 0 once the plugin is gone", f"capacity/allocatable {got}",
           "stop serving ListAndWatch when you exit (the kubelet then marks every device unhealthy)")
    res = h.admit(Pod("clu-07-no-plugin", containers=[Container("c", limits={h.resource: 1})]))
    expect(not res.admitted, "a new pod refused while the plugin is down", f"admitted with {res.containers}",
           "do not leave a serving socket behind when you exit")
    reg = h.wait_registered(since=h.relaunch_plugin(), timeout=t.reregister_timeout)
    after = sorted(h.wait_snapshot(reg.time))
    got = _node_shows(h, len(before), len(h.healthy_ids()), t.node_status_timeout)
    expect(got is None and after == before, f"capacity back with the same devices {before}",
           f"devices {after}, capacity/allocatable {got}",
           "derive device IDs from stable hardware facts so a restart brings back the same devices")


_BUCKET = re.compile(r'^kubelet_device_plugin_alloc_duration_seconds_bucket\{(?P<labels>[^}]*)\} (?P<v>\S+)$', re.M)


def _alloc_buckets(metrics: str, resource: str) -> dict[float, float]:
    out = {}
    for m in _BUCKET.finditer(metrics):
        labels = dict(kv.split("=", 1) for kv in m.group("labels").split(","))
        if labels.get("resource_name", "").strip('"') == resource:
            le = labels["le"].strip('"')
            out[float("inf") if le == "+Inf" else float(le)] = float(m.group("v"))
    return out


def _registrations(metrics: str, resource: str) -> float:
    m = re.search(rf'^kubelet_device_plugin_registration_total\{{resource_name="{re.escape(resource)}"\}} (\S+)$',
                  metrics, re.M)
    return float(m.group(1)) if m else 0.0


@check("CLU-08", "advisory", spec="K30")
def test_CLU_08_kubelet_metrics(cluster, suite_config):
    """CLU-08: the kubelet's own metrics through the API server count the plugin's registrations and
    the Allocates of the suite's pods, each under the Allocate latency bound as the kubelet measured it."""
    h, th = cluster, suite_config.thresholds
    m0 = h.backend.cluster.kubelet_metrics()
    expect(_registrations(m0, h.resource) >= 1, f"kubelet_device_plugin_registration_total{{{h.resource}}} >= 1",
           f"{_registrations(m0, h.resource)}", "register with the kubelet on this node")
    b0 = _alloc_buckets(m0, h.resource)
    res = h.admit(Pod("clu-08", containers=[Container("c", limits={h.resource: 1})]))
    _admitted(res, "a pod asking for 1 device")
    b1 = _alloc_buckets(h.backend.cluster.kubelet_metrics(), h.resource)
    total = b1.get(float("inf"), 0) - b0.get(float("inf"), 0)
    expect(total >= 1, "the kubelet's Allocate histogram to count the pod's Allocate", f"+{total:g}",
           "(the kubelet counts every Allocate it makes)")
    limit = th.alloc_p99_ms / 1000
    le = min((b for b in b1 if b >= limit), default=float("inf"))
    fast = b1.get(le, 0) - b0.get(le, 0)
    expect(fast == total, f"every Allocate the kubelet timed under {th.alloc_p99_ms:g} ms",
           f"{total - fast:g} of {total:g} slower", "keep Allocate fast: do slow work at startup")
