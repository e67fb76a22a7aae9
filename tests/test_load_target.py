"""The target file the load runner reads (dpconform.scenarios.orchestrate.LoadTarget): on every cluster backend
its "cluster" part names the kubeconfig, the run's namespace and the node, read from the backend's cluster
part. (The harness redesign moved the namespace there and the target still read `backend.namespace`:
cluster_admission_burst failed with AttributeError on local and kind, a periodic test only: found when the
burst first ran on kind.)"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from dpconform.fixtures import backends
from dpconform.fixtures.config import SuiteConfig
from dpconform.scenarios.orchestrate import LoadTarget


@pytest.mark.parametrize("name", ["local", "kind", "kubeconfig"])
def test_the_cluster_part_of_the_target(name, tmp_path):
    b = backends.backend_class(name)(SuiteConfig(backend=name), root=str(tmp_path))
    b.node = SimpleNamespace(kubeconfig="/k/config", node_name="worker-1")
    b.cluster.namespace = "dpconform-1234"
    reg = SimpleNamespace(request=SimpleNamespace(resource_name="r/x", version="v1beta1", endpoint="x.sock"))
    opts = SimpleNamespace(get_preferred_allocation_available=False, pre_start_required=False)
    h = SimpleNamespace(backend=b, registration=reg, options=opts, observed=SimpleNamespace(endpoint_path="/p/x.sock"),
                        healthy_ids=lambda: ["d0"], devices=lambda: ["d0"], health_hook=None, plugin_cmd=None)
    target = LoadTarget._target(SimpleNamespace(h=h, http=None, on_cluster=True, control=None, bundled=True))
    assert target["cluster"] == {"kubeconfig": "/k/config", "namespace": "dpconform-1234", "node": "worker-1",
                                 "backend": name}
