"""PRE – PreStartContainer (K22); skipped unless the plugin sets pre_start_required."""
import grpc
import pytest

from dpconform.fixtures.checks import check, expect, fail
from dpconform.kubeletapi import dp


@pytest.fixture
def pre(harness):
    if not harness.options.pre_start_required:
        pytest.skip("plugin does not advertise pre_start_required")
    return harness


@check("PRE-01", spec="K22")
def test_PRE_01_prestart_allocated(pre, suite_config):
    """PRE-01: PreStartContainer for allocated IDs succeeds within 30 s (the kubelet's timeout)."""
    ids = pre.healthy_ids()[:1]
    pre.allocate(ids)
    try:
        pre.stub().PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids),
                                     timeout=suite_config.thresholds.prestart_timeout)
    except grpc.RpcError as exc:
        fail(f"PreStartContainer({ids}) to succeed within {suite_config.thresholds.prestart_timeout:g}s",
             f"{exc.code().name}: {exc.details()}", "the container will not start until it succeeds")


@check("PRE-02", "advisory", spec="K22")
def test_PRE_02_prestart_unknown(pre):
    """PRE-02: PreStartContainer for unknown IDs gets an error."""
    try:
        pre.stub().PreStartContainer(dp.PreStartContainerRequest(devices_ids=["dpconform-no-such-device"]),
                                     timeout=pre.t.prestart_timeout)
    except grpc.RpcError:
        return
    expect(False, "an error for an unknown ID", "success", "validate IDs in PreStartContainer")
