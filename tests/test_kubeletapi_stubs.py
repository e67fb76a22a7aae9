"""The checked-in stubs are exactly what grpcio-tools makes from the pinned k8s.io/kubelet protos."""
import pathlib
import shutil

import pytest

from kubeletapi import constants, dp, generate

ROOT = pathlib.Path(generate.__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("go") is None, reason="go is needed to fetch the pinned .proto files")
def test_regenerated_stubs_match_checked_in(tmp_path):
    files = generate.generate(tmp_path)
    assert len(files) == 9
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
