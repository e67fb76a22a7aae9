"""K24/K26's scenario: the device manager's checkpoint at each step of one plugin's life (registered, a
pod allocated and removed, a device unhealthy and back). tests/test_differential.py compares it between
the emulator and a real kubelet; tests/test_checkpoint_settled.py runs it against an emulator that writes
late.

Each view is read once the checkpoint shows the change its row is about: a kubelet writes the file after
it has taken the change in (the devices of a ListAndWatch message are in its books, then the file is
rewritten), so a view read as soon as the change is visible elsewhere compares two write timings, not
two behaviours."""
from __future__ import annotations

from dpconform.fixtures.kubelet import Container, Pod
from dpconform.fixtures.node.differential import checkpoint_view
from dpconform.fixtures.podresources import list_pods
from dpconform.fixtures.waiting import wait_until
from dpconform.kubeletapi import constants

FAKEGPU = "dpconform.io/fakegpu"
REWRITE_TIMEOUT_S = 5


def checkpoint_history(h) -> dict:
    h.start()
    ids = sorted(h.wait_devices())
    names: dict[str, str] = {}

    def view(settled) -> dict:
        """The checkpoint once `settled` holds for it, or as it is after REWRITE_TIMEOUT_S (the comparison
        then shows what differs)."""
        wait_until(lambda: settled(checkpoint_view(h, names)), REWRITE_TIMEOUT_S, "the checkpoint rewritten",
                   raise_on_timeout=False)
        return checkpoint_view(h, names)

    def registered(v) -> list[str]:
        return v.get("registered", {}).get(FAKEGPU, [])

    f = {"after_register": view(lambda v: registered(v) == ids)}
    pod = Pod("ckpt", containers=[Container("c", limits={FAKEGPU: 2})])
    res = h.backend.admit(pod)
    names.update({pod.uid: "ckpt", res.pod_uid: "ckpt"})
    f["after_allocate"] = view(lambda v: any(e["pod"] == "ckpt" for e in v.get("entries", [])))
    h.backend.remove(pod.uid)
    f["after_remove"] = checkpoint_view(h, names)      # K26: a removal is not written: nothing to wait for
    h.set_health(ids[-1], constants.UNHEALTHY)
    f["after_unhealthy"] = view(lambda v: ids[-1] not in registered(v))
    list_pods(h.backend.pod_resources_socket())
    h.set_health(ids[-1], constants.HEALTHY)
    f["after_list_and_recovery"] = view(lambda v: ids[-1] in registered(v))
    return f
