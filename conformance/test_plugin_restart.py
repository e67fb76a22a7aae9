"""PRS – plugin crash and restart (K9, K24, K25)."""
import os
import signal
import time

from fixtures.checks import check, expect, fail
from fixtures.harness import HarnessError
from fixtures.kubelet import Container, Pod


@check("PRS-01", spec="K9")
def test_PRS_01_relaunch_after_sigkill(make_harness):
    """PRS-01: after SIGKILL (its socket file left behind) a relaunched plugin starts, serves and registers."""
    h = make_harness()
    h.start()
    h.plugin.kill()
    h.relaunch_plugin()
    try:
        h.wait_registered(count=2)
    except HarnessError as exc:
        fail("the relaunched plugin to register", str(exc).splitlines()[0],
             "on start, remove a stale socket file (or use a fresh name) before listening")
    expect(h.answers(), "the new endpoint answering", "no answer", "serve on the endpoint you register")


@check("PRS-02", "advisory")
def test_PRS_02_sigterm(make_harness, suite_config):
    """PRS-02: on SIGTERM the plugin exits within the timeout and removes its socket."""
    h = make_harness()
    h.start()
    sock = h.endpoint_path
    t0 = time.monotonic()
    h.plugin.signal(signal.SIGTERM)
    code = h.plugin.wait_exit(suite_config.thresholds.sigterm_timeout)
    expect(code is not None, f"exit within {suite_config.thresholds.sigterm_timeout:g}s of SIGTERM",
           "still running", "handle SIGTERM: stop the server and exit")
    expect(not os.path.exists(sock), "its socket removed", f"{sock} left behind (after {time.monotonic() - t0:.1f}s)",
           "remove your socket file on shutdown")


@check("PRS-03", spec="K24, K25")
def test_PRS_03_assignments_survive_crash(make_harness):
    """PRS-03: after a crash and relaunch, devices of running pods are still advertised and not handed out again."""
    h = make_harness()
    h.start()
    h.wait_devices()
    before = h.emu.admit(Pod("prs-03-before", containers=[Container("c", limits={h.resource: 1})]))
    expect(before.admitted, "the first pod admitted", before.message, "")
    held = set(before.containers["c"].devices[h.resource])
    h.plugin.kill()
    seen = len(h.emu.snapshots(h.resource))
    h.relaunch_plugin()
    h.wait_registered(count=2)
    now = h.wait_new_snapshot(seen)
    expect(held <= set(now), f"the running pod's devices {sorted(held)} still advertised", f"{sorted(now)}",
           "advertise the same IDs after a restart")
    free = len(h.healthy_ids()) - len(held)
    if free > 0:
        after = h.emu.admit(Pod("prs-03-after", containers=[Container("c", limits={h.resource: free})]))
        got = set(after.containers["c"].devices[h.resource]) if after.admitted else set()
        expect(after.admitted and not (got & held), f"{free} other devices for a new pod",
               f"{after.message or sorted(got)}", "")
