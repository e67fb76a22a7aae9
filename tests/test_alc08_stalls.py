"""ALC-08 under a loaded host: a stall of the host lands on a few calls of one measurement, and a p99 over
the limit with a median under it is measured again before it is a verdict; a plugin slow on a few calls
of every measurement, or on most calls, still fails. The reproducer: make test on 4 workers failed ALC-08
on `--defect crash-on-unknown-id` (p50 1.2 ms, p99 145 ms) and on shared-response-race (p50 6.7 ms, p99
116 ms), plugins whose Allocate is fast: `host-stall` below is that measurement, and fails the check as it
was (one measurement); then stalls in two measurements in a row (a third is taken)."""
from __future__ import annotations

import itertools
import time

import pytest

from conformance.test_allocate import test_ALC_08_latency as alc_08
from dpconform.fixtures.config import SuiteConfig, Thresholds
from dpconform.kubeletapi import dp


class Harness:
    """What ALC-08 asks of a harness: healthy IDs and Allocate, whose call N sleeps `stall(N)` seconds."""

    def __init__(self, stall):
        self.calls = itertools.count()
        self.stall = stall

    def healthy_ids(self) -> list[str]:
        return ["d0", "d1"]

    def allocate(self, ids):
        time.sleep(self.stall(next(self.calls)))
        return dp.AllocateResponse(container_responses=[dp.ContainerAllocateResponse()])


CFG = SuiteConfig(thresholds=Thresholds(alloc_calls=100, alloc_p99_ms=20))


def test_a_host_stall_in_one_measurement_is_not_a_verdict():
    h = Harness(lambda n: 0.04 if n in (10, 50, 90) else 0)        # three stalls, the first 100 calls only
    alc_08(h, CFG)
    assert next(h.calls) == 200, "measured again"


def test_host_stalls_in_two_measurements_in_a_row_are_not_a_verdict():
    """make test on 4 workers, --defect new-ids-after-restart: p50 0.95 ms, p99 255 ms; then p50 2.96 ms, p99
    491 ms (the host busy for both): failed with two measurements, passes with a third."""
    h = Harness(lambda n: 0.04 if n in (10, 50, 90, 110, 150, 190) else 0)
    alc_08(h, CFG)
    assert next(h.calls) == 300, "measured a third time"


@pytest.mark.parametrize("stall", [lambda n: 0.04 if n % 100 in (10, 50, 90) else 0,   # a few, every time
                                   lambda n: 0.025],                                 # every call
                         ids=["a-few-calls-every-time", "every-call"])
def test_a_slow_plugin_still_fails(stall):
    h = Harness(stall)
    with pytest.raises(pytest.fail.Exception) as e:
        alc_08(h, CFG)
    assert "p99 < 20 ms over 100 calls" in str(e.value), e.value
    measured = next(h.calls)
    assert measured == (100 if stall(0) else 300), measured      # a median over the limit: no second look
