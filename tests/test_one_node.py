"""One node per session on the real backends (fixtures/backends/node.py hold()): the views of a catalogue
run share one node that outlives each view instead of starting and stopping with every private harness,
and a real kubelet about to start on this host (HostLock.acquire) stops an idle held node first: one
kubelet per host. Stand-in nodes: no root, no kubelet."""
from __future__ import annotations

from typing import ClassVar

import pytest

from dpconform.fixtures.backends.node import NodeKubeletBackend, _Shared, stop_idle_nodes
from dpconform.fixtures.node.backend import HostLock


class StandInNode:
    def __init__(self, made: list) -> None:
        self.plugin_dir = "/nonexistent"
        self.teardown_errors: list[str] = []
        self.stopped = False
        made.append(self)

    def stop(self) -> None:
        self.stopped = True


def stand_in_backend(made: list) -> type[NodeKubeletBackend]:
    class StandIn(NodeKubeletBackend):
        name: ClassVar[str] = "stand-in"
        _shared: ClassVar[_Shared] = _Shared()

        @classmethod
        def unavailable(cls, cfg):
            return None

        @classmethod
        def make_node(cls, cfg):
            return StandInNode(made)
    return StandIn


def view(cls):
    v = cls.__new__(cls)       # the view's node bookkeeping only (_acquire/_release), no kubelet log to follow
    v.cfg = None
    return v


@pytest.fixture
def made():
    out: list[StandInNode] = []
    yield out


def test_without_a_hold_each_last_view_stops_the_node(made):
    cls = stand_in_backend(made)
    for _ in range(3):
        v = view(cls)
        v._acquire()
        v._release()
    assert len(made) == 3 and all(n.stopped for n in made)


def test_a_hold_keeps_one_node_for_all_its_views(made):
    cls = stand_in_backend(made)
    with cls.hold():
        for _ in range(3):
            v = view(cls)
            assert v._acquire() is made[0]
            v._release()
        assert len(made) == 1 and not made[0].stopped
    assert made[0].stopped, "the hold's end stops the node"


def test_another_kubelet_stops_an_idle_held_node_only(made, tmp_path):
    cls = stand_in_backend(made)
    with cls.hold():
        v = view(cls)
        v._acquire()
        stop_idle_nodes()
        assert not made[0].stopped, "a node a view uses now is not stopped"
        v._release()
        lock = HostLock(str(tmp_path / "lock"))
        lock.acquire()                       # what a NodeBackend or LocalCluster start does first
        try:
            assert made[0].stopped, "an idle held node gives way to another kubelet"
        finally:
            lock.release()
        w = view(cls)
        assert w._acquire() is made[1], "the next view starts a fresh node"
        w._release()
    assert made[1].stopped
