"""One node per session on the real backends (fixtures/backends/shared_node.py hold()): the views of a catalogue
run share one node that outlives each view instead of starting and stopping with every private harness,
and a real kubelet about to start on this host (HostLock.acquire) stops an idle held node first: one
kubelet per host. Stand-in nodes: no root, no kubelet."""
from __future__ import annotations

import pytest

from dpconform.fixtures.backends.shared_node import SharedNode, stop_idle_nodes
from dpconform.fixtures.node.backend import HostLock


class StandInNode:
    def __init__(self, made: list) -> None:
        self.plugin_dir = "/nonexistent"
        self.teardown_errors: list[str] = []
        self.stopped = False
        made.append(self)

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def made():
    out: list[StandInNode] = []
    yield out


@pytest.fixture
def shared(made):
    """The node bookkeeping of a real backend (SharedNode), with stand-in nodes."""
    s = SharedNode("stand-in", lambda cfg: StandInNode(made), lambda cfg: None)
    yield s
    SharedNode.ALL.remove(s)


def test_without_a_hold_each_last_view_stops_the_node(made, shared):
    for _ in range(3):
        shared.acquire(None)
        shared.release()
    assert len(made) == 3 and all(n.stopped for n in made)


def test_a_hold_keeps_one_node_for_all_its_views(made, shared):
    with shared.hold():
        for _ in range(3):
            assert shared.acquire(None) is made[0]
            shared.release()
        assert len(made) == 1 and not made[0].stopped
    assert made[0].stopped, "the hold's end stops the node"


def test_another_kubelet_stops_an_idle_held_node_only(made, shared, tmp_path):
    with shared.hold():
        shared.acquire(None)
        stop_idle_nodes()
        assert not made[0].stopped, "a node a view uses now is not stopped"
        shared.release()
        lock = HostLock(str(tmp_path / "lock"))
        lock.acquire()                       # what a NodeBackend or LocalCluster start does first
        try:
            assert made[0].stopped, "an idle held node gives way to another kubelet"
        finally:
            lock.release()
        assert shared.acquire(None) is made[1], "the next view starts a fresh node"
        shared.release()
    assert made[1].stopped
