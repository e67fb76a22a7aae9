"""The load path in `make test`: one smoke-sized scenario run, the slow-allocate defect caught by the
SLO with the percentile named, and the pure parts (formatting, SLO and baseline rules).

Each run starts the bundled fake-GPU plugin and the emulator here and the locust runner in its own
process (`python -m dpconform.scenarios.runner`); the whole file stays well under 20 s.
"""
from __future__ import annotations

import json
import re

import pytest

from dpconform.scenarios import profile as profiles, stats
from dpconform.scenarios.orchestrate import LoadTarget, run_scenario


def _run(tmp_path, plugin_args="", duration=2.0, processes=None, profile="smoke"):
    with LoadTarget(devices=4, plugin_args=plugin_args) as target:
        outcome = run_scenario("plugin_allocate_burst", profile, target.target_path, tmp_path, users=4,
                               duration=duration, echo=lambda line: None, processes=processes)
        assert target.h.plugin.running, f"the plugin died under load:\n{target.h.plugin.output(2000)}"
    assert outcome.result is not None, f"runner failed (exit {outcome.rc}):\n{outcome.tail()}"
    return outcome


def test_allocate_burst_smoke(tmp_path):
    """A healthy plugin meets the smoke SLOs; the result has µs percentiles, plots and environment facts."""
    outcome = _run(tmp_path)
    r = outcome.result
    assert outcome.rc == 0, f"smoke SLO missed: {outcome.violations}\n{outcome.tail()}"
    alloc = r["requests"]["Allocate"]
    assert alloc["count"] > 20 and alloc["failures"] == 0
    assert 0 < alloc["p50_us"] <= alloc["p90_us"] <= alloc["p95_us"] <= alloc["p99_us"] <= alloc["max_us"]
    assert "GetPreferredAllocation" in r["requests"], "the fake GPU advertises GetPreferredAllocation"
    for key in ("python", "grpcio", "locust", "cpu_count"):
        assert r["environment"][key]
    assert r["plugin"]["resource"] == "dpconform.io/fakegpu"
    for kind in ("histogram", "timeline"):
        assert open(r["files"][kind], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert json.loads(open(r["files"]["json"]).read())["slo"]["passed"] is True
    assert any(line.strip().startswith("Allocate") for line in outcome.output), "no table row for Allocate"


def test_distributed_master_and_two_workers(tmp_path):
    """locust's distributed mode: a master and two worker processes; both workers' µs records are merged
    into the one result (every request of every worker, none lost)."""
    outcome = _run(tmp_path, processes=2, duration=3.0)
    r = outcome.result
    assert outcome.rc == 0, f"smoke SLO missed: {outcome.violations}\n{outcome.tail()}"
    dist = r["extra"]["distributed"]
    assert dist["workers"] == 2 and len(dist["requests_per_worker"]) == 2, dist
    assert all(n > 0 for n in dist["requests_per_worker"].values()), dist
    assert r["total"]["count"] == sum(dist["requests_per_worker"].values()), (r["total"], dist)
    alloc = r["requests"]["Allocate"]
    assert alloc["count"] > 20 and alloc["failures"] == 0 and 0 < alloc["p50_us"] <= alloc["p99_us"]
    # locust's own aggregate comes from the workers' periodic stats reports and may miss the last ones
    locust_seen = sum(v["num_requests"] for v in r["locust_stats_for_comparison"].values())
    assert 0 < locust_seen <= r["total"]["count"], (locust_seen, r["total"]["count"])


def test_distributed_records_arrive_with_a_long_stop_timeout(tmp_path):
    """After a "stop" locust's worker loop sleeps stop_timeout before it reads the next message: the
    workers send their records on their own when their users stopped, so a stop_timeout longer than the
    master's wait for records (cluster_admission_burst's is 240 s) loses none of them."""
    from dpconform.scenarios.profile import WORKER_WAIT_S   # never dpconform.scenarios.runner here: it imports locust (gevent)
    prof = tmp_path / "long-stop.yaml"
    prof.write_text(f"name: long-stop\nscenarios:\n  plugin_allocate_burst:\n    stop_timeout_s: {WORKER_WAIT_S * 4:g}\n")
    outcome = _run(tmp_path, processes=2, duration=2.0, profile=str(prof))
    dist = outcome.result["extra"]["distributed"]
    assert len(dist["requests_per_worker"]) == 2 and all(n > 0 for n in dist["requests_per_worker"].values()), dist
    assert not any("records from" in line for line in outcome.output), outcome.tail()


def test_slow_allocate_defect_misses_slo_naming_percentile(tmp_path):
    """`--defect slow-allocate` (150 ms per Allocate) must fail the Allocate SLO (p99 <= 100 ms), and the
    message must name the percentile and both numbers."""
    outcome = _run(tmp_path, "--defect slow-allocate", duration=1.5)
    assert outcome.rc == 1, f"slow-allocate passed the SLO:\n{outcome.tail()}"
    msgs = "; ".join(outcome.violations)
    assert re.search(r"Allocate: p99 \d+(\.\d+)? ms > SLO 100 ms", msgs), msgs
    assert re.search(r"Allocate: p50 \d+(\.\d+)? ms > SLO 20 ms", msgs), msgs
    assert outcome.result["requests"]["Allocate"]["p50_us"] >= 150_000


@pytest.mark.parametrize("us,text", [(0.4, "0.4 µs"), (3.25, "3.2 µs"), (212.4, "212 µs"), (999.4, "999 µs"),
                                     (1234.0, "1.23 ms"), (212_400.0, "212.4 ms"), (2_500_000.0, "2.50 s")])
def test_fmt_us_keeps_sub_millisecond(us, text):
    assert stats.fmt_us(us) == text


def test_percentiles_resolve_microseconds():
    """Durations of 100..199 µs: locust's whole-ms buckets would call every percentile 0; ours do not."""
    r = stats.summarize([100_000 + 1_000 * i for i in range(100)], [True] * 100, 1.0)
    assert r["p50_us"] == pytest.approx(149.5) and r["p99_us"] == pytest.approx(198.0)
    assert stats.table({"Allocate": r})[2].split()[4:6] == ["150", "µs"]


def _result(p50_us, p99_us, rps=100.0, failures=0):
    req = {"count": 100, "failures": failures, "rps": rps, "p50_us": p50_us, "p90_us": p99_us, "p95_us": p99_us,
           "p99_us": p99_us, "max_us": p99_us}
    return {"primary": "Allocate", "requests": {"Allocate": req}, "total": dict(req)}


def test_slo_messages_name_the_percentile():
    slo = {"Allocate": {"p50_ms": 1, "p99_ms": 100, "min_rps": 200}, "*": {"max_failure_ratio": 0}}
    v = stats.check_slo(_result(500.0, 212_400.0, failures=2), slo)
    assert "Allocate: p99 212.4 ms > SLO 100 ms" in v
    assert "Allocate: throughput 100.0 req/s < SLO 200 req/s" in v
    assert any(m.startswith("all requests: failure ratio 0.0200 (2/100) > SLO 0") for m in v)
    assert not any("p50" in m for m in v)


def test_baseline_regression_ratio_and_noise_floor():
    old = _result(300.0, 2_000.0, rps=1000)
    assert stats.compare_baseline(_result(400.0, 2_900.0, rps=900), old, 1.5) == []
    # 300 -> 700 µs is x2.3 but only 0.4 ms: scheduler noise, not a regression
    assert stats.compare_baseline(_result(700.0, 2_000.0), old, 1.5, min_delta_ms=0.5) == [
        "Allocate: throughput 100.0 req/s vs baseline 1000.0 req/s (/10.00 > /1.5)"]
    regs = stats.compare_baseline(_result(300.0, 9_000.0, rps=1000), old, 1.5)
    assert regs == ["Allocate: p95 9.00 ms vs baseline 2.00 ms (x4.50 > x1.5)",
                    "Allocate: p99 9.00 ms vs baseline 2.00 ms (x4.50 > x1.5)"]


def test_profiles_load_and_reject_mistakes(tmp_path):
    for name in ("smoke", "full"):
        p = profiles.load(name)
        assert set(p["scenarios"]) == set(profiles.SCENARIOS)
    bad = tmp_path / "bad.yaml"
    bad.write_text("scenarios:\n  plugin_allocate_burst:\n    slo:\n      Allocate: {p99: 5}\n")
    with pytest.raises(profiles.ProfileError, match="unknown key"):
        profiles.load(str(bad))
    bad.write_text("scenarios:\n  nope: {}\n")
    with pytest.raises(profiles.ProfileError, match="unknown scenario"):
        profiles.load(str(bad))
