"""The checked-in stubs are exactly what grpcio-tools makes from the newest release's k8s.io/kubelet protos."""
import shutil

import pytest

from dpconform.commands import protos as generate
from dpconform.kubeletapi import constants, dp, dra, drab, drah, drah1

ROOT = generate.STUBS_ROOT


@pytest.mark.skipif(shutil.which("go") is None, reason="go is needed to fetch the pinned .proto files")
def test_regenerated_stubs_match_checked_in(tmp_path):
    files = generate.generate(tmp_path)
    assert len(files) == 3 * len(generate.PROTOS)
    for f in files:
        rel = f.relative_to(tmp_path)
        checked_in = ROOT / rel
        assert checked_in.exists(), f"{rel} is generated but not checked in: run `make protos`"
        assert f.read_text() == checked_in.read_text(), f"{rel} differs from a fresh generation: run `make protos`"


def test_service_paths_match_the_kubelet():
    # gRPC method paths are what the Go kubelet dials: they depend on the proto package names.
    assert dp.DESCRIPTOR.package == "v1beta1"
    assert set(dp.DESCRIPTOR.services_by_name) == {"Registration", "DevicePlugin"}
    assert constants.VERSION in constants.SUPPORTED_VERSIONS


def test_dra_service_paths_match_the_kubelet():
    # the kubelet dials /k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources (and v1beta1),
    # /v1alpha1.DRAResourceHealth/NodeWatchResources and /v1.DRAResourceHealth/...: the gogo options removed,
    # the packages kept
    assert dra.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert drab.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    assert drah.DESCRIPTOR.package == "v1alpha1"
    assert set(dra.DESCRIPTOR.services_by_name["DRAPlugin"].methods_by_name) == {"NodePrepareResources",
                                                                                 "NodeUnprepareResources"}
    assert drah1.DESCRIPTOR.package == "v1"
    for health in (drah, drah1):
        assert "NodeWatchResources" in health.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods_by_name
    assert {f.name for f in dra.Device.DESCRIPTOR.fields} == {"request_names", "pool_name", "device_name",
                                                              "cdi_device_ids", "share_id"}
