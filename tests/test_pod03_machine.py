"""POD-03's state machine reports a node that does not come back after a restart as that, in one
message, instead of hypothesis' replay complaints (FlakyStrategyDefinition) hiding the cause."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from dpconform.fixtures.config import SuiteConfig
from dpconform.fixtures.harness import Harness, HarnessError
from dpconform.fixtures.podresources_machine import PodLifecycleMachine


def test_a_restart_that_never_comes_back_is_reported_plainly():
    h = Harness(SuiteConfig())
    try:
        h.start()
        h.wait_devices()
        real_wait, calls = h.observed.wait_snapshot, []

        def wait_snapshot(since, timeout=None):   # the two fixed sequences' restarts come back, no later one
            calls.append(since)
            if len(calls) > 2:
                raise TimeoutError("timed out after 5s waiting for a new ListAndWatch snapshot")
            return real_wait(since, timeout)
        h.observed.wait_snapshot = wait_snapshot   # what the lifecycle waits on after a restart

        with pytest.raises(HarnessError, match=r"POD-03: after a (plugin|kubelet) restart the node did not "
                                               r"come back: timed out .* new ListAndWatch snapshot"):
            PodLifecycleMachine.run(h, settings(max_examples=20, stateful_step_count=10, deadline=None,
                                                database=None, suppress_health_check=list(HealthCheck)))
        assert len(calls) > 2, "no random sequence restarted anything"
    finally:
        PodLifecycleMachine.stuck = PodLifecycleMachine.harness = None
        h.close()
