"""The kubelet's own counters in the report (fixtures/kubelet_tally.py): summed over the kubelets of a run, a
restarted kubelet's counting from zero, a kubelet that several harnesses share counted once."""
from __future__ import annotations

import json
import subprocess
import sys

from dpconform.fixtures.kubelet_tally import KubeletTally, add, counters, describe, summary

RES = "vendor.com/gpu"


def metrics(registrations: float, calls: float, seconds: float, buckets: dict[str, float],
            started: str | None = None, resource: str = RES) -> str:
    lines = [f'kubelet_device_plugin_registration_total{{resource_name="{resource}"}} {registrations}',
             f'kubelet_device_plugin_alloc_duration_seconds_count{{resource_name="{resource}"}} {calls}',
             f'kubelet_device_plugin_alloc_duration_seconds_sum{{resource_name="{resource}"}} {seconds}',
             'kubelet_device_plugin_registration_total{resource_name="other.com/nic"} 7']
    lines += [f'kubelet_device_plugin_alloc_duration_seconds_bucket{{le="{le}",resource_name="{resource}"}} {n}'
              for le, n in buckets.items()]
    if started:
        lines.append(f"process_start_time_seconds {started}")
    return "\n".join(lines) + "\n"


class Kubelet:
    """A backend whose kubelet shows `text`."""

    def __init__(self, text: str):
        self.text = text

    def kubelet_metrics(self) -> str:
        return self.text


def test_counters_are_the_resources_own():
    got = counters(metrics(2, 10, 0.05, {"0.005": 9, "0.01": 10, "+Inf": 10}), RES)
    assert got == {"registrations": 2, "allocations": 10, "alloc_seconds": 0.05, "alloc_le_0.005": 9,
                   "alloc_le_0.01": 10, "alloc_le_+Inf": 10}


def test_a_restarted_kubelet_counts_from_zero_and_a_shared_one_once():
    tally = KubeletTally()
    emulator = Kubelet(metrics(1, 2, 0.002, {"+Inf": 2}))
    tally.read(emulator, RES)
    emulator.text = metrics(3, 5, 0.005, {"+Inf": 5})          # the emulator keeps its counters over a restart
    tally.read(emulator, RES)
    assert tally.drain() == {"registrations": 3, "allocations": 5, "alloc_seconds": 0.005, "alloc_le_+Inf": 5}
    # a real kubelet: restarted (a new process start time) it counts from zero; two harnesses share it
    first, second = Kubelet(metrics(2, 4, 0.004, {"+Inf": 4}, started="100")), Kubelet("")
    tally.read(first, RES)
    second.text = first.text
    tally.read(second, RES)                                    # the same kubelet, read by another harness
    first.text = metrics(1, 0, 0, {"+Inf": 0}, started="200")  # restarted
    tally.read(first, RES)
    assert tally.drain() == {"registrations": 3, "allocations": 4, "alloc_seconds": 0.004, "alloc_le_+Inf": 4}
    assert tally.drain() == {}


def test_a_kubelet_that_cannot_be_read_adds_nothing():
    class Down:
        def kubelet_metrics(self):
            raise ConnectionError("refused")
    tally = KubeletTally()
    tally.read(Down(), RES)
    tally.read(object(), RES)
    tally.read(Kubelet(metrics(1, 1, 0.001, {})), None)        # before any registration: no resource yet
    assert tally.drain() == {}


def test_summary_names_the_p99_bucket():
    total: dict = {}
    add(total, {"registrations": 2, "allocations": 100, "alloc_seconds": 0.2, "alloc_le_0.001": 50,
                "alloc_le_0.005": 99, "alloc_le_+Inf": 100})
    add(total, {"registrations": 1})
    counted = summary(total)
    assert counted == {"registrations": 3, "allocate_calls": 100, "allocate_mean_ms": 2.0, "allocate_p99_at_most_ms": 5.0}
    assert describe(counted) == "3 registration(s), 100 Allocate call(s), mean 2 ms, p99 at most 5 ms (its histogram's bucket)"
    assert summary({}) == {} and describe({}) is None


def test_a_run_reports_what_the_kubelet_counted(tmp_path):
    """REG-01, POD-01 and KRS-01 on the emulator: three harnesses register once each, KRS-01's again after its
    kubelet restart, and POD-01's pod is the kubelet's one Allocate call."""
    proc = subprocess.run([sys.executable, "-m", "dpconform", "run", "-q", "-p", "no:randomly", "--plugin-cmd",
                           "bundled", "--checks", "REG-01,POD-01,KRS-01", "--report", "r.json", "--markdown", "r.md"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    counted = json.loads((tmp_path / "r.json").read_text())["kubelet_counted"]
    assert counted["registrations"] == 4 and counted["allocate_calls"] == 1, counted
    assert f"the kubelet counted: {describe(counted)}" in proc.stdout
    assert f"| the kubelet counted | {describe(counted)} |" in (tmp_path / "r.md").read_text()


def test_diff_shows_the_kubelets_allocate_time_when_it_moved():
    from dpconform.commands.diff import measured_changes
    old = {"checks": [], "kubelet_counted": {"registrations": 4, "allocate_calls": 9, "allocate_mean_ms": 1.0}}
    new = {"checks": [], "kubelet_counted": {"registrations": 5, "allocate_calls": 9, "allocate_mean_ms": 3.0}}
    assert measured_changes(old, new, 1.5) == ["  kubelet allocate_mean_ms: 1 -> 3 (x3.00)"]
    assert measured_changes({"checks": []}, new, 1.5) == []          # a report from before it was counted
