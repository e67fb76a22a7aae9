"""ROB – robustness against bad input: errors, never a crash."""
import datetime

import grpc
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dpconform.fixtures.checks import check, fail
from dpconform.kubeletapi import dp

weird_ids = st.one_of(st.just(""), st.text(max_size=20), st.text(min_size=1, max_size=3).map(lambda s: s * 21846),
                      st.binary(max_size=16).map(lambda b: b.decode("latin-1")))
id_lists = st.one_of(st.lists(weird_ids, max_size=5), st.integers(1000, 3000).map(lambda n: [f"x{i}" for i in range(n)]))


@check("ROB-01")
def test_ROB_01_malformed_requests(harness, suite_config):
    """ROB-01: generated malformed requests get errors, never a crash; the plugin still answers after each."""
    h = harness

    @settings(max_examples=suite_config.thresholds.hypothesis_examples, deadline=datetime.timedelta(seconds=10),
              suppress_health_check=list(HealthCheck), database=None)
    @given(ids=id_lists, size=st.integers(-5, 5000), kind=st.sampled_from(["allocate", "preferred", "prestart"]))
    @example(ids=["x" * 2000], size=1, kind="allocate")                      # always tried: one huge ID,
    @example(ids=[f"x{i}" for i in range(1001)], size=1, kind="allocate")    # and a huge list,
    @example(ids=["x0"], size=2, kind="preferred")       # and a size beyond the IDs offered: generated ones
    # reach it in most runs, not all (the defect matrix missed preferred-crash-on-impossible 3 times in 9)
    def prop(ids, size, kind):
        try:
            if kind == "allocate":
                h.allocate(ids)
            elif kind == "preferred":
                req = dp.PreferredAllocationRequest(container_requests=[dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=ids, must_include_deviceIDs=ids[:1], allocation_size=max(-2**31, min(size, 2**31 - 1)))])
                h.stub().GetPreferredAllocation(req, timeout=h.t.rpc_timeout)
            else:
                h.stub().PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids), timeout=h.t.rpc_timeout)
        except grpc.RpcError:
            pass
        if not (h.plugin.running and h.answers()):
            fail(f"an error, never a crash, for a malformed {kind} request",
                 f"the plugin stopped answering after {kind} with {len(ids)} IDs (first {ids[:2]!r:.80}) "
                 f"size={size}; exit code {h.plugin.returncode}",
                 "validate every field of a request (ID lengths, counts, sizes) and return an error")

    prop()


@check("ROB-02")
def test_ROB_02_second_stream(harness, suite_config):
    """ROB-02: after a ListAndWatch client disconnects, a new client gets a snapshot."""
    t = suite_config.thresholds.snapshot_timeout
    for attempt in (1, 2):
        stream = harness.stub().ListAndWatch(dp.Empty(), timeout=t)
        try:
            next(stream)
        except (grpc.RpcError, StopIteration) as exc:
            fail(f"stream {attempt} to get a snapshot within {t:g}s", f"{exc}".splitlines()[0][:200],
                 "serve every ListAndWatch caller; a new kubelet connection replaces the old one")
        finally:
            stream.cancel()
