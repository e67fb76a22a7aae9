"""Differential tests of the kubelet's DRA side: the same scenario through the emulated kubelet
(fixtures/kubelet/dra.py) and the real one of the local cluster, the fake-GPU DRA driver on both, compared.
Needs root, `make kube-bins cluster-bins`; `make cluster`."""
from __future__ import annotations

import pytest

from dpconform.fixtures.config import SuiteConfig
from dpconform.fixtures.dra import claims as claimlib
from dpconform.fixtures.dra.environment import DraEnvironment, bundled_driver_cmd
from dpconform.fixtures.kubelet.dra import DraError
from dpconform.fixtures.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.differential, pytest.mark.timeout(400)]
EVENT_PREFIX = "Failed to prepare dynamic resources: "     # the kubelet's event around the manager's error


@pytest.fixture(scope="module", autouse=True)
def _cluster_host():
    from dpconform.fixtures.cluster.local import unavailable
    reason = unavailable()
    if reason:
        pytest.skip(reason)


def _env(backend: str, defect: str = "") -> DraEnvironment:
    control = "/tmp/dpc-dra-diff.ctl"
    cfg = SuiteConfig(dra=True, backend=backend,
                      plugin_cmd=bundled_driver_cmd(control, f"--defect {defect}" if defect else ""))
    env = DraEnvironment(cfg)
    env.start()
    return env


def _emulated_skipped_claims() -> str:
    env = _env("emulator", "drop-claim")
    try:
        uid = claimlib.new_pod_uid()
        devs = env.devices(2)
        cs = [env.claim([devs[0]], pod_uid=uid), env.claim([devs[1]], pod_uid=uid)]
        with pytest.raises(DraError) as e:
            env.kubelet.prepare_pod(env.pod(cs, uid))
        return str(e.value)
    finally:
        env.close()


def _real_skipped_claims() -> str:
    env = _env("local", "drop-claim")
    try:
        api, ns = env.claim_namespace("dpconform-diff")
        api.create_pod(claimlib.claim_pod("diff", ns, "gpu", ["a", "b"]))

        def event():   # once the kubelet has registered the driver (a pod may come first: "is not registered")
            evs = api.core.list_namespaced_event(ns, field_selector="involvedObject.name=diff").items
            return next((e.message for e in evs if e.reason == "FailedPrepareDynamicResources"
                         and "is not registered" not in e.message), None)
        msg = wait_until(event, 60, "FailedPrepareDynamicResources", interval=0.5, raise_on_timeout=False)
        assert msg, "the real kubelet reported no FailedPrepareDynamicResources within 60 s"
        return msg.removeprefix(EVENT_PREFIX)
    finally:
        env.close()


def test_driver_that_skips_a_claim():
    """K42: a driver leaves a claim out of its answer: the pod's prepare fails with the same text."""
    assert _emulated_skipped_claims() == _real_skipped_claims() == \
        "prepare dynamic resources: NodePrepareResources skipped 1 ResourceClaims"


def _wiped_at_start(backend: str) -> dict[str, bool]:
    """K41: which of three ResourceSlices a kubelet restart leaves: this node's of another driver, another
    node's, and the running driver's own (deleted, then published again by the driver)."""
    from kubernetes import client
    env = _env(backend)
    try:
        res = client.ResourceV1Api(env.api)
        env.wait_slices()
        for name, node in (("other-driver-here", env.node), ("other-node", "elsewhere")):
            body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
                    "spec": {"driver": "other.example.com", "nodeName": node, "devices": [{"name": "d0"}],
                             "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}
            res.create_resource_slice(body)
        assert env.restart_kubelet() is not None, "the driver did not register again"

        def names():
            return {s.metadata.name for s in res.list_resource_slice().items}
        # the real kubelet wipes in the background after its start: wait (bounded) for the sign of it
        wait_until(lambda: "other-driver-here" not in names(), 30, "the wipe", raise_on_timeout=False)
        own = env.wait_slices()
        left = names()
        return {"other driver, this node": "other-driver-here" in left, "other node": "other-node" in left,
                "own, after the driver re-published": bool(own)}
    finally:
        env.close()


def test_kubelet_start_wipes_the_nodes_slices():
    emulated, real = _wiped_at_start("emulator"), _wiped_at_start("local")
    assert emulated == real == {"other driver, this node": False, "other node": True,
                                "own, after the driver re-published": True}, (emulated, real)
