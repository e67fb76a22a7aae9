"""CLU-12 decides from the revisions the DaemonSet controller keeps, not from whether its history clean-up
has run yet (issue 43: with revisionHistoryLimit 0, the proof passed CLU-12 three runs in four: the rollback
came before the controller deleted the previous revision).

The reproducer is the slow controller made certain: the API server still lists the previous revision (the
clean-up has not run) while the DaemonSet's limit is 0. The old rollback found it and rolled back: CLU-12
passed a manifest whose rollback fails on the vendor's cluster a minute after any update.
"""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from dpconform.fixtures.cluster.api import ApiError
from dpconform.fixtures.cluster.daemonset import PluginDaemonSet


class Api:
    namespace = "dpconform"

    def call(self, what, fn, *args, **kwargs):
        return fn(*args, **kwargs)


class Apps:
    """A DaemonSet with two ControllerRevisions still listed, whatever its limit says."""

    def __init__(self, limit: int):
        self.limit, self.patched = limit, None

    def read_namespaced_daemon_set(self, name, namespace):
        return NS(spec=NS(revision_history_limit=self.limit), metadata=NS(uid="ds-uid"))

    def list_namespaced_controller_revision(self, namespace, label_selector):
        rev = lambda n: NS(revision=n, metadata=NS(owner_references=[NS(uid="ds-uid")]),   # noqa: E731
                           data={"spec": {"template": {"metadata": {"labels": {"rev": str(n)}}}}})
        return NS(items=[rev(2), rev(1)])

    def patch_namespaced_daemon_set(self, name, namespace, body):
        self.patched = body


def daemonset(limit: int) -> PluginDaemonSet:
    ds = object.__new__(PluginDaemonSet)
    ds.api, ds.apps, ds.name, ds.selector = Api(), Apps(limit), "plugin", "app=plugin"
    return ds


def test_no_history_kept_is_no_rollback_even_before_the_clean_up_ran():
    ds = daemonset(limit=0)
    with pytest.raises(ApiError, match="revisionHistoryLimit is 0"):
        ds.rollback()
    assert ds.apps.patched is None


def test_a_kept_previous_revision_is_rolled_back_to():
    ds = daemonset(limit=5)
    assert ds.rollback() == 1
    assert ds.apps.patched[0]["value"] == {"metadata": {"labels": {"rev": "1"}}}
