"""Registrations seen through the kubelet's metrics (fixtures/backends/registrations.py:MetricsRegistrations,
the kind and kubeconfig backends): a restarted kubelet counts from 0, so a re-registration after a restart
shows as the same count as before; the process start time tells the two kubelets apart (a real kind run's
KRS-01 failed on it)."""
from __future__ import annotations

from dpconform.fixtures.backends.registrations import MetricsRegistrations


def metrics(count: int, started: float) -> str:
    return (f'kubelet_device_plugin_registration_total{{resource_name="example.com/dev"}} {count}\n'
            f"process_start_time_seconds {started}\n")


class Sink:
    name = "kind"

    def __init__(self):
        self.seen = []

    def accepted(self, reg):
        self.seen.append(reg)


def test_a_registration_after_a_kubelet_restart_is_seen():
    texts = iter([metrics(1, 100.0), metrics(2, 100.0), metrics(1, 250.0), metrics(1, 250.0), metrics(3, 250.0)])
    sink = Sink()
    watch = MetricsRegistrations(lambda: next(texts), sink)
    watch.POLL_S = 0
    watch.skip_seen()                  # 1 already counted
    watch.poll()                       # 2: one new
    assert len(sink.seen) == 1
    watch.poll()                       # restarted, 1 since: one new (the count alone looks unchanged)
    assert len(sink.seen) == 2
    watch.poll()                       # the same kubelet, still 1: nothing new
    assert len(sink.seen) == 2
    watch.poll()                       # 3: two new
    assert len(sink.seen) == 4
