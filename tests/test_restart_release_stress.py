"""Stress: a plugin stopped and started again at once, on the real kubelet and on the emulator (K9).

From CI (make node, the sample plugin's release verdicts on 1.37, once): "the plugin exited (code 2)
before registering; rejected registrations: ['device plugin already connected: .../dp.1796579147']". The
sample plugin names its socket by the second it starts (dp.<unix seconds>); the suite had started a new
instance within the second of the one before, and the kubelet still held the old instance's endpoint: it
drops it in the goroutine that reads the ended ListAndWatch stream, and from 1.37 endpoints are kept per
socket path. Its kubelet log shows the margin: the next Register 20-30 ms after "Device plugin
disconnected". On a node that never happens: a container is started again only after the kubelet saw the
old one end. The suite now waits for the kubelet side to drop the ended instance's endpoints before a
start (Backend.before_plugin_start; the real kubelet's from its log, fixtures/backends/kubelet_clients.py).

test_restarts_when_the_kubelet_notices_an_end_late reproduces it every time: the emulator handles a
stream's end 1.5 s late, and a plugin with a fixed socket name meets the old endpoint's path at once (it
failed on round 1 before the wait). The real-kubelet loops did not reproduce it here (350 restarts, also
with three busy loops and the kubelet at nice 19); they stay as the guard that the wait reads the real
kubelet's log right (one client held while the plugin runs) and costs nothing.
"""
from __future__ import annotations

import shlex
import sys
import time

import pytest

from dpconform.fixtures.config import SuiteConfig
from dpconform.fixtures.harness import Harness

SAMPLE_CMD = "env PLUGIN_SOCK_DIR={plugin_dir} {kube_bin}/sample-device-plugin"
LATE = 1.5
FIXED_SOCKET_CMD = (f"{shlex.quote(sys.executable)} -m dpconform fakegpu --plugin-dir {{plugin_dir}} "
                    f"--defect fixed-socket-name")


def restart_rounds(backend: str, cmd: str, rounds: int, **options) -> None:
    """Stop and start the plugin `rounds` times, each start at once after the stop; every start must be
    accepted (the first rejection fails with the kubelet's text)."""
    cfg = SuiteConfig(plugin_cmd=cmd, backend=backend, backend_options=options)
    with Harness(cfg) as h:
        h.start()
        for i in range(rounds):
            clients = getattr(h.backend, "_kubelet_clients", None)     # a real kubelet: what its log says
            if clients is not None:
                assert clients().held() == {h.observed.resource: 1}
            since = h.lifecycle.restart()
            try:
                h.observed.wait_registered(since=since, timeout=10)
            except Exception as e:   # noqa: BLE001 - the round and the kubelet's answers, then the error
                refused = [r.error for r in h.registrations if not r.accepted]
                pytest.fail(f"round {i + 1} of {rounds}: {type(e).__name__}: {e}; refused: {refused}")


@pytest.mark.timeout(120)
def test_fixed_socket_restarts_on_the_emulator():
    restart_rounds("emulator", FIXED_SOCKET_CMD, 15)


@pytest.mark.timeout(120)
def test_restarts_when_the_kubelet_notices_an_end_late(monkeypatch):
    """The race made certain: the emulator handles a ListAndWatch stream's end LATE seconds after it ends
    (a kubelet busy on a loaded host), and the plugin names the same socket every time. Without the wait
    for the kubelet to let go, the second start's registration was refused on every run of this test:
    "device plugin already connected" (1.37)."""
    from dpconform.fixtures.kubelet.connections import PluginConnections
    on_end = PluginConnections.on_stream_end

    def late(self, ep, error):
        time.sleep(LATE)
        on_end(self, ep, error)
    monkeypatch.setattr(PluginConnections, "on_stream_end", late)
    restart_rounds("emulator", FIXED_SOCKET_CMD, 3)


@pytest.mark.node
@pytest.mark.timeout(300)
@pytest.mark.parametrize("cmd, rounds", [(SAMPLE_CMD, 40), (FIXED_SOCKET_CMD, 20)], ids=["sample", "fixed-socket"])
def test_restarts_on_the_real_kubelet(cmd, rounds):
    from dpconform.fixtures.backends.node import node_unavailable
    reason = node_unavailable()
    if reason:
        pytest.skip(reason)
    restart_rounds("node", cmd, rounds)


# -- the real kubelet's clients, read from its log (fixtures/backends/kubelet_clients.py) ----------------
LOG_137 = '''\
I1206 18:11:02.283306   17336 server.go:87] "Starting device plugin registration server"
I1206 18:11:02.286340   17336 handler.go:89] "Connected to new client" resource="example.com/resource" socketPath="/var/lib/kubelet/device-plugins/dp.1"
I1206 18:11:02.299640   17336 handler.go:120] "Deregistered client" name="example.com/resource" socketPath="/var/lib/kubelet/device-plugins/dp.1"
I1206 18:11:02.299710   17336 client.go:115] "Device plugin disconnected" resource="example.com/resource"
I1206 18:11:02.327738   17336 handler.go:89] "Connected to new client" resource="example.com/resource" socketPath="/var/lib/kubelet/device-plugins/dp.2"
I1206 18:11:02.414180   17336 handler.go:89] "Connected to new client" resource="example.com/resource" socketPath="/var/lib/kubelet/device-plugins/dp.3"
I1206 18:11:02.414180   17336 handler.go:89] "Connected to new client" resource="other.com/x" socketPath="/var/lib/kubelet/device-plugins/x"
'''
# until 1.36: one client per resource, no socket path; a replaced instance's end disconnects the newest
LOG_136 = '''\
I1206 18:11:02.286340   17336 handler.go:94] "Connected to new client" resource="example.com/resource"
I1206 18:11:02.327738   17336 handler.go:94] "Connected to new client" resource="example.com/resource"
I1206 18:11:02.299710   17336 client.go:114] "Device plugin disconnected" resource="example.com/resource"
'''


def test_kubelet_clients_from_the_log(tmp_path):
    from dpconform.fixtures.backends.kubelet_clients import KubeletClients
    log = tmp_path / "kubelet.log"
    log.write_text(LOG_137)
    clients = KubeletClients(lambda: str(log))
    clients.ours.add("example.com/resource")
    assert clients.held() == {"example.com/resource": 2}       # dp.2 and dp.3 (not the other plugin's)
    with open(log, "a") as f:
        f.write('I1206 18:11:03.0 17336 client.go:115] "Device plugin disconnected" resource="example.com/resource"\n'
                'I1206 18:11:03.1 17336 client.go:115] "Device plugin disconnected" resource="example.com/res')
    assert clients.held() == {"example.com/resource": 1}       # a line still being written waits
    with open(log, "a") as f:
        f.write('ource"\n')
    assert clients.held() == {} and clients.wait_released(timeout=0.1) == {}
    with open(log, "a") as f:
        f.write(LOG_137.splitlines(keepends=True)[4])
        f.write('I1206 18:11:04.0 17400 server.go:87] "Starting device plugin registration server"\n')
    assert clients.held() == {}                                 # a restarted kubelet holds none

    old = tmp_path / "kubelet-136.log"
    old.write_text(LOG_136)
    clients = KubeletClients(lambda: str(old))
    clients.ours.add("example.com/resource")
    assert clients.held() == {}
    assert KubeletClients(lambda: None).held() == {}            # no log (a foreign node): nothing known
