"""DRA-01 on the local cluster compares a settled registration (issue 43: on our own driver, after the 60-odd
tests before it, DRA-01 failed with "the kubelet has not registered this socket (its registration started)").

The suite took the kubelet's first attempt as soon as its plugin manager logged "RegisterPlugin started", and
judged it before the handler had finished: on a busy host that is a refusal that never happened. The
reproducer is the busy kubelet made certain: the registration shows in its actual state only 0.6 s after it
started. The old wait returned the unfinished attempt at once.
"""
from __future__ import annotations

import time
from types import SimpleNamespace as NS

from dpconform.fixtures.dra.kubelet_view import KubeletRegistration
from dpconform.fixtures.dra.sides import LocalClusterDraSide
from dpconform.fixtures.kubelet.pluginwatcher import PluginRegistration

SOCKET = "/var/lib/kubelet/plugins_registry/gpu.example.com-reg.sock"


def side(kubelet_says) -> LocalClusterDraSide:
    s = object.__new__(LocalClusterDraSide)
    s.t = NS(register_timeout=5.0)
    s._own_handshake = lambda: PluginRegistration(socket=SOCKET)
    s._kubelet_says = kubelet_says
    return s


def test_a_registration_still_going_is_waited_for():
    t0 = time.monotonic()
    s = side(lambda socket: KubeletRegistration(started=True, registered=time.monotonic() - t0 > 0.6))
    reg = s.wait_attempt(0, "register", False, lambda: None)
    assert reg is not None and reg.registered and reg.error is None, reg


def test_a_failed_registration_is_settled_at_once():
    s = side(lambda socket: KubeletRegistration(started=True, error="RegisterPlugin error -- no versions"))
    t0 = time.monotonic()
    reg = s.wait_attempt(0, "register", False, lambda: None)
    assert reg is not None and not reg.registered and "no versions" in reg.error and time.monotonic() - t0 < 2


def test_one_never_finished_is_reported_started_after_the_bound():
    s = side(lambda socket: KubeletRegistration(started=True))
    s.t = NS(register_timeout=1.0)
    reg = s.wait_attempt(0, "register", False, lambda: None)
    assert reg is not None and not reg.registered and "(its registration started)" in reg.error, reg
