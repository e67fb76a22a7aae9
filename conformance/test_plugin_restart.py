"""PRS – plugin crash and restart (K9, K24, K25)."""
import pytest

from dpconform.fixtures.checks import check, expect, fail
from dpconform.fixtures.outcomes import HarnessError
from dpconform.fixtures.kubelet import Container, Pod


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
