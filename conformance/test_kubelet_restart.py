"""KRS – kubelet restart: sockets deleted, kubelet.sock re-created; the plugin must register again (K15)."""
import os

import pytest

from fixtures.checks import check, expect, fail
from fixtures.harness import HarnessError


@pytest.fixture
def restarted(make_harness, suite_config):
    """A private kubelet + plugin, registered, then the kubelet restarted once."""
    h = make_harness()
    first = h.start()
    before = set(h.wait_devices())
    seen = len(h.emu.snapshots(h.resource))
    h.restart_kubelet()
    try:
        second = h.wait_registered(count=2, timeout=suite_config.thresholds.reregister_timeout)
    except HarnessError as exc:
        fail(f"a new registration within {suite_config.thresholds.reregister_timeout:g}s of the kubelet restart",
             str(exc).splitlines()[0], "watch kubelet.sock (re-created on restart) or your own socket (deleted) and "
             "restart your server and register again")
    return h, first, second, before, seen


@check("KRS-01", spec="K15")
def test_KRS_01_reregisters(restarted):
    """KRS-01: after a kubelet restart the plugin registers again within the timeout."""
    h, first, second, _, _ = restarted
    expect(second.accepted, "an accepted registration", second.error or "", "")


@check("KRS-02", spec="K15, K25")
def test_KRS_02_same_devices(restarted):
    """KRS-02: the device set after re-registration equals the one before."""
    h, _, _, before, seen = restarted
    after = set(h.wait_new_snapshot(seen))
    expect(after == before, f"the same devices {sorted(before)}", f"{sorted(after)}",
           "advertise the same IDs after re-registering (pods' checkpointed devices refer to them)")


@check("KRS-03", spec="K15")
def test_KRS_03_new_endpoint_works(restarted):
    """KRS-03: Allocate works on the new endpoint; the old socket is gone."""
    h, first, second, _, seen = restarted
    h.wait_new_snapshot(seen)
    ids = h.healthy_ids()
    if not ids:
        fail("healthy devices after re-registration", "none", "advertise your devices on the new stream")
    h.allocate(ids[:1])
    if first.request.endpoint != second.request.endpoint:
        old = os.path.join(h.emu.plugin_dir, first.request.endpoint)
        expect(not os.path.exists(old), "the old socket removed", f"{old} still exists",
               "serve only on the new socket")


@check("KRS-04", spec="K15")
def test_KRS_04_repeated_restarts(make_harness, suite_config):
    """KRS-04: several kubelet restarts in a row, each followed by re-registration, without leaking threads or files."""
    th = suite_config.thresholds
    h = make_harness()
    h.start()
    h.wait_devices()
    h.restart_kubelet()  # the first restart may create lasting machinery (watchers); measure after it
    h.wait_registered(count=2, timeout=th.reregister_timeout)
    threads0, fds0 = h.plugin.resource_usage()
    for i in range(th.restart_rounds):
        h.restart_kubelet()
        try:
            h.wait_registered(count=3 + i, timeout=th.reregister_timeout)
        except HarnessError as exc:
            fail(f"re-registration after restart {i + 2}", str(exc).splitlines()[0], "re-register after every restart")
    threads1, fds1 = h.plugin.resource_usage()
    expect(threads1 - threads0 <= th.leak_bound and fds1 - fds0 <= th.leak_bound,
           f"threads and open files stable (+{th.leak_bound} at most) over {th.restart_rounds} restarts",
           f"threads {threads0} -> {threads1}, open files {fds0} -> {fds1}",
           "stop the old server, close its channel and join its threads before starting the new one")
