"""LAW – ListAndWatch: snapshots, IDs, health, topology, stream lifetime (K11-K14)."""
import time

import grpc
import pytest

from dpconform.fixtures.checks import advise, check, expect, fail
from dpconform.fixtures.responses import absent_numa_nodes, snapshot_problems
from dpconform.fixtures.root_causes import Rule, declare
from dpconform.kubeletapi import constants, dp

ROOT_CAUSES = declare(
    Rule("LAW-01", "no-snapshot"),
    Rule("LAW-03", "unknown-health"),
    Rule("LAW-05", "stream-ended"),
    Rule("LAW-07", "health-not-sent"),
    Rule("LAW-07", "device-dropped", owners=("LAW-07", "POD-05")),   # POD-05: what the pod's status then shows
    Rule("LAW-09", "ids-changed-after-plugin-restart"),
    # the topology checks judge the topology manager's refusals themselves
    Rule("LAW-04", "numa-node-absent", owners=("LAW-04", "TOP-01", "TOP-02", "TOP-03")),
)


@check("LAW-01", spec="K11")
def test_LAW_01_first_snapshot_in_time(harness, suite_config):
    """LAW-01: a new ListAndWatch stream gets its first snapshot within the timeout."""
    t = suite_config.thresholds.snapshot_timeout
    stream = harness.stub().ListAndWatch(dp.Empty(), timeout=t)
    try:
        next(stream)
    except grpc.RpcError as exc:
        fail(f"a snapshot within {t:g}s", f"{exc.code().name}: {exc.details()}",
             "send the full device list as soon as ListAndWatch is called")
    except StopIteration:
        fail(f"a snapshot within {t:g}s", "the stream ended without one", "send the device list, then keep the stream open")
    finally:
        stream.cancel()


def _snapshot_rule(h, check_id, expected, fix):
    for devs in h.snapshots():
        problems = snapshot_problems(devs)[check_id]
        expect(not problems, expected, "; ".join(problems), fix)


@check("LAW-02", spec="K11")
def test_LAW_02_device_ids(harness):
    """LAW-02: device IDs are non-empty, unique within a snapshot and at most 63 characters."""
    _snapshot_rule(harness, "LAW-02", "non-empty, unique IDs of at most 63 characters",
                   "give each device its own short ID (the API limits them to 63 characters)")


@check("LAW-03", spec="K11")
def test_LAW_03_health_strings(harness):
    """LAW-03: health is exactly "Healthy" or "Unhealthy"; anything else counts as unhealthy."""
    _snapshot_rule(harness, "LAW-03", 'health "Healthy" or "Unhealthy"',
                   "use pluginapi.Healthy / pluginapi.Unhealthy: the kubelet treats other strings as unhealthy")


@check("LAW-04", spec="K13")
def test_LAW_04_numa_ids(harness):
    """LAW-04: topology NUMA IDs are non-negative (an advisory warning if a node does not exist on the host)."""
    _snapshot_rule(harness, "LAW-04", "NUMA IDs >= 0", "omit topology for devices with no NUMA affinity instead of -1")
    host_nodes = harness.backend.host_numa_nodes()
    missing = absent_numa_nodes(harness.devices().values(), host_nodes)
    if missing:
        advise(f"NUMA nodes that exist on the host {sorted(host_nodes)}", f"devices on other nodes: {missing}",
               "report the node the host's sysfs gives for the device's PCI address (/sys/bus/pci/devices/<addr>/"
               "numa_node): a plugin in a container sees the host's only where the host's /sys is what it reads; "
               "a node the host lacks makes the topology manager refuse the pods it aligns")


@check("LAW-05", spec="K14")
def test_LAW_05_stream_stays_open(harness, suite_config):
    """LAW-05: the stream stays open while the plugin is healthy; a closed stream makes all devices unhealthy."""
    hold = suite_config.thresholds.stream_hold
    harness.observe(hold, until=lambda: harness.observed.stream_state()[0] == "ended")
    state, err = harness.observed.stream_state()
    expect(state == "open", f"ListAndWatch open for {hold:g}s", f"{state} ({err})",
           "keep ListAndWatch open until the plugin stops; the kubelet never calls it again")


@check("LAW-06", "advisory")
def test_LAW_06_no_snapshot_spam(harness, suite_config):
    """LAW-06: no more than spam_rate unchanged snapshots per second on average."""
    harness.observe(suite_config.thresholds.storm_window)
    snaps = [(t, devs) for t, devs in harness.observed.timed_snapshots() if t >= harness.started_at]
    unchanged = sum(1 for (_, a), (_, b) in zip(snaps, snaps[1:]) if list(a) == list(b))
    span = time.monotonic() - harness.started_at
    rate = unchanged / span
    expect(rate <= suite_config.thresholds.spam_rate, f"<= {suite_config.thresholds.spam_rate:g} unchanged snapshots/s",
           f"{rate:.1f}/s ({unchanged} in {span:.1f}s)", "send a snapshot only when something changed")


def _require_hook(h):
    if not h.health_hook:
        pytest.skip("needs --health-hook 'CMD {device} {health}' to flip a device's health")


@check("LAW-07", spec="K12")
def test_LAW_07_health_transitions(harness, suite_config, request):
    """LAW-07: a health change shows in the next snapshot within the window, and recovery too (where the
    plugin marks a device Healthy again while it runs: its health hook exits 3 where it does not)."""
    _require_hook(harness)
    t = suite_config.thresholds.health_timeout
    device = harness.healthy_ids()[0]
    harness.set_health(device, constants.UNHEALTHY)
    if not harness.wait_health(device, constants.UNHEALTHY, t, raise_on_timeout=False):
        now = harness.devices().get(device)
        fail(f"{device} Unhealthy in a snapshot within {t:g}s", f"{now}".strip() if now else
             f"{device} no longer listed", "push a new ListAndWatch snapshot when a device's health changes" if now
             else "keep a failed device listed, with health Unhealthy (a device that leaves the list is not "
                  "reported failed: the kubelet keeps it Healthy in a pod's status)")
    if not harness.set_health(device, constants.HEALTHY):
        request.node.user_properties.append(("dpconform_note", f"saw {device} go Unhealthy; the plugin does "
                                             "not mark a device Healthy again while it runs (its health hook says so), "
                                             "so recovery was not checked: the suite restarted it"))
        return
    if not harness.wait_health(device, constants.HEALTHY, t, raise_on_timeout=False):
        fail(f"{device} Healthy again within {t:g}s", "still unhealthy", "push recovery too")


@check("LAW-08")
def test_LAW_08_expected_device_count(harness, suite_config):
    """LAW-08: the advertised device count equals --expected-devices (no overcommit)."""
    if suite_config.expected_devices is None:
        pytest.skip("needs --expected-devices N (the number of physical devices on this host)")
    n = len(harness.devices())
    expect(n == suite_config.expected_devices, f"{suite_config.expected_devices} devices", f"{n} advertised",
           "advertise exactly the devices present")


@check("LAW-09", spec="K24, K25")
def test_LAW_09_stable_ids(make_harness):
    """LAW-09: after a plugin restart the same devices come back under the same IDs (the checkpoint uses IDs)."""
    h = make_harness()
    h.start()
    before = set(h.wait_devices())
    after = set(h.restart_and_wait(h.restart_plugin))
    expect(after == before, f"the same IDs {sorted(before)}", f"{sorted(after)}",
           "derive IDs from stable hardware facts (serial, UUID, PCI address), not from start order or time")
