"""A pod through the scheduler is Running before its container has printed anything: what the container
printed about itself is read once it is all there (fixtures/backends/cluster_pods.py pod_report). Reproducer:
make cluster-periodic, on a loaded host, failed CLU-03 with "AttributeError: 'NoneType' object has no
attribute 'env'" for two defect runs: the check read the pod's log right after Running."""
from __future__ import annotations

from types import SimpleNamespace

from dpconform.fixtures.backends.cluster_pods import ApiPodAccess
from dpconform.fixtures.node import images

REPORT = [images.REPORT_BEGIN, "--- env", "DPCONFORM_FAKEGPU=fakegpu-1", "--- dev", images.REPORT_END]


class LateLog:
    """The API server's log of a container that prints its report on its `after`-th read."""

    def __init__(self, after: int):
        self.after, self.reads = after, 0

    def pod_log(self, name: str, container: str) -> str:
        self.reads += 1
        return "\n".join(REPORT) if self.reads >= self.after else ""


def access(api) -> ApiPodAccess:
    view = SimpleNamespace(check_alive=lambda: None)
    pods = ApiPodAccess(view)
    pods.api = api
    return pods


def test_the_report_is_read_once_the_container_has_printed_it():
    api = LateLog(after=3)
    report = access(api).pod_report("clu-03-0")
    assert report is not None and report.env == {"DPCONFORM_FAKEGPU": "fakegpu-1"} and api.reads == 3


def test_a_container_that_never_prints_gives_none_after_the_timeout():
    api = LateLog(after=10 ** 9)
    assert access(api).pod_report("clu-03-0", timeout=0.5) is None and api.reads > 1
