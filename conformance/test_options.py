"""OPT – GetDevicePluginOptions and the RPCs its options promise (K7)."""
import grpc
import pytest

from dpconform.fixtures.checks import check, fail
from dpconform.fixtures.root_causes import Rule, declare
from dpconform.kubeletapi import dp

ROOT_CAUSES = declare(
    Rule("OPT-01", "registration-rejected", "its GetDevicePluginOptions fails (K7)", r"failed to get device plugin options"),
    Rule("OPT-01", "options-unanswered"),
    Rule("OPT-02", "admission-refused", "GetPreferredAllocation answers UNIMPLEMENTED although the plugin advertises it",
         r"GetPreferredAllocation rpc failed .*Unimplemented"),
    Rule("OPT-02", "preferred-unimplemented"),
)


@check("OPT-01", spec="K7")
def test_OPT_01_options_answer_in_time(harness, suite_config):
    """OPT-01: GetDevicePluginOptions answers within the timeout (the kubelet calls it while registering)."""
    t = suite_config.thresholds.options_timeout
    try:
        harness.stub().GetDevicePluginOptions(dp.Empty(), timeout=t)
    except grpc.RpcError as exc:
        fail(f"an answer within {t:g}s", f"{exc.code().name}: {exc.details()}",
             "answer GetDevicePluginOptions at once from static data")


@check("OPT-02", spec="K7, K18")
def test_OPT_02_preferred_implemented(harness):
    """OPT-02: if get_preferred_allocation_available, GetPreferredAllocation answers a valid request."""
    if not harness.options.get_preferred_allocation_available:
        pytest.skip("plugin does not advertise get_preferred_allocation_available")
    ids = harness.healthy_ids()
    try:
        harness.preferred(ids, [], 1)
    except grpc.RpcError as exc:
        fail(f"GetPreferredAllocation(available={ids}, size 1) to answer", f"{exc.code().name}: {exc.details()}",
             "implement it (the kubelet calls it before every allocation) or set get_preferred_allocation_available=false")


@check("OPT-03", spec="K7, K22")
def test_OPT_03_prestart_implemented(harness):
    """OPT-03: if pre_start_required, PreStartContainer answers a valid request (allocated devices)."""
    if not harness.options.pre_start_required:
        pytest.skip("plugin does not advertise pre_start_required")
    ids = harness.healthy_ids()[:1]
    harness.allocate(ids)
    try:
        harness.client.pre_start(ids)
    except grpc.RpcError as exc:
        fail(f"PreStartContainer({ids}) to answer", f"{exc.code().name}: {exc.details()}",
             "implement it (the kubelet calls it before every container start) or set pre_start_required=false")
