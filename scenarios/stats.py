"""Percentiles from our own nanosecond record, the terminal table, SLO and baseline checks.

Locust buckets response times (whole ms under 100 ms), so its percentiles of a sub-millisecond
distribution all read 0. Everything here works on the raw perf_counter_ns durations the runner
records for every request. Percentiles: numpy's default (linear interpolation between order statistics).
No locust import here: the pytest process uses this module.
"""
from __future__ import annotations

import json
import math
import pathlib

import numpy as np

PCTS = (50, 90, 95, 99)


def summarize(durations_ns, ok, elapsed_s: float) -> dict:
    """count/failures/rps and p50..p99/max/min/mean in µs (floats, 0.1 µs resolution) of one request name."""
    d = np.asarray(durations_ns, dtype=np.int64)
    okm = np.asarray(ok, dtype=bool)
    out = {"count": int(d.size), "failures": int((~okm).sum()),
           "rps": round(d.size / elapsed_s, 3) if elapsed_s > 0 else 0.0}
    good = d[okm] if okm.any() else d   # latency of successful requests (all when none succeeded)
    if good.size:
        us = good / 1000.0
        for p in PCTS:
            out[f"p{p}_us"] = round(float(np.percentile(us, p)), 1)
        out["max_us"] = round(float(us.max()), 1)
        out["min_us"] = round(float(us.min()), 1)
        out["mean_us"] = round(float(us.mean()), 1)
    return out


def fmt_us(us: float | None) -> str:
    """A duration for humans: sub-ms in µs (never rounded to 0), then ms, then s."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "-"
    if us < 10:
        return f"{us:.1f} µs" if us > 0 else "0 µs"
    if us < 1000:
        return f"{us:.0f} µs"
    if us < 1_000_000:
        return f"{us / 1000:.2f} ms" if us < 10_000 else f"{us / 1000:.1f} ms"
    return f"{us / 1e6:.2f} s"


def fmt_ms(ms: float) -> str:
    return fmt_us(ms * 1000)


def table(requests: dict[str, dict], order: list[str] | None = None) -> list[str]:
    cols = ("name", "reqs", "fails", "req/s", "p50", "p90", "p95", "p99", "max")
    rows = []
    names = order or sorted(requests)
    for name in names:
        r = requests.get(name)
        if r is None:
            continue
        rows.append((name, str(r["count"]), str(r["failures"]), f"{r['rps']:.1f}",
                     *(fmt_us(r.get(k)) for k in ("p50_us", "p90_us", "p95_us", "p99_us", "max_us"))))
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(cols), line(["-" * w for w in widths]), *map(line, rows)]


def check_slo(result: dict, slo: dict | None = None) -> list[str]:
    """Violations, each a sentence naming the request, the percentile, the value and the limit,
    e.g. "Allocate: p99 212.4 ms > SLO 100 ms"."""
    slo = slo if slo is not None else result.get("slo", {}).get("thresholds", {})
    out = []
    for name, th in slo.items():
        r = result["total"] if name == "*" else result["requests"].get(name)
        label = "all requests" if name == "*" else name
        if r is None or r["count"] == 0:
            # only the scenario's primary request must happen (a plugin may not offer GetPreferredAllocation)
            if name in ("*", result.get("primary")) and any(v is not None for v in th.values()):
                out.append(f"{label}: no requests were made, cannot meet its SLO")
            continue
        for key, limit in th.items():
            if limit is None:
                continue
            if key.endswith("_ms"):
                stat = key[:-3]
                value_us = r.get(f"{stat}_us")
                if value_us is not None and value_us > limit * 1000:
                    out.append(f"{label}: {stat} {fmt_us(value_us)} > SLO {limit:g} ms")
            elif key == "min_rps" and r["rps"] < limit:
                out.append(f"{label}: throughput {r['rps']:.1f} req/s < SLO {limit:g} req/s")
            elif key == "max_failure_ratio":
                ratio = r["failures"] / r["count"]
                if ratio > limit:
                    out.append(f"{label}: failure ratio {ratio:.4f} ({r['failures']}/{r['count']}) > SLO {limit:g}")
    return out


def load_baseline(path: str | pathlib.Path, scenario: str) -> dict | None:
    """A scenario's result from an earlier run: a per-scenario JSON or the combined load-results.json."""
    data = json.loads(pathlib.Path(path).read_text())
    if data.get("scenario") == scenario:
        return data
    return (data.get("scenarios") or {}).get(scenario)


def compare_baseline(result: dict, baseline: dict, ratio: float, min_delta_ms: float = 0.5) -> list[str]:
    """Regressions beyond ratio: a percentile grown more than ratio x (and by more than min_delta_ms,
    so scheduler noise on microsecond latencies is not a regression), or throughput fallen below 1/ratio."""
    out = []
    for name, new in result["requests"].items():
        old = baseline.get("requests", {}).get(name)
        if not old or not new["count"] or not old["count"]:
            continue
        for stat in ("p50", "p95", "p99"):
            n, o = new.get(f"{stat}_us"), old.get(f"{stat}_us")
            if n is None or o is None:
                continue
            if n > o * ratio and (n - o) > min_delta_ms * 1000:
                out.append(f"{name}: {stat} {fmt_us(n)} vs baseline {fmt_us(o)} "
                           f"(x{n / o if o else float('inf'):.2f} > x{ratio:g})")
        if name == result.get("primary") and old["rps"] > 0 and new["rps"] < old["rps"] / ratio:
            out.append(f"{name}: throughput {new['rps']:.1f} req/s vs baseline {old['rps']:.1f} req/s "
                       f"(/{old['rps'] / max(new['rps'], 1e-9):.2f} > /{ratio:g})")
    return out


# cluster_admission_burst's request names and the emulator's (node_admission_burst) they compare with
BURST_PAIRS = (("running", "admit", "per pod"), ("burst", "burst", "whole burst"))


def compare_bursts(cluster: dict, emulator: dict) -> dict:
    """The same burst on the cluster (create -> Running) and on the emulator (submission -> devices
    allocated): p50/p99 per pod and the whole burst's time, each with cluster/emulator as a ratio."""
    out: dict = {"emulator_result": emulator["files"]["json"], "burst_size": cluster["extra"].get("burst_size_effective"),
                 "ratios": {}, "lines": []}
    head = (f"[load] cluster_admission_burst vs node_admission_burst on the emulator, "
            f"{out['burst_size']} pods per burst (cluster / emulator):")
    out["lines"].append(head)
    for mine, theirs, what in BURST_PAIRS:
        a, b = cluster["requests"].get(mine, {}), emulator["requests"].get(theirs, {})
        keys = ("p50_us", "p99_us") if what == "per pod" else ("max_us",)
        parts = []
        for k in keys:
            if a.get(k) and b.get(k):
                r = round(a[k] / b[k], 1)
                out["ratios"][f"{mine}/{theirs} {k[:-3]}"] = r
                parts.append(f"{k[:-3]} {fmt_us(a[k])} vs {fmt_us(b[k])} = x{r:g}")
            else:
                parts.append(f"{k[:-3]}: not measured on both")
        out["lines"].append(f"  {what:<12} " + "; ".join(parts))
    return out


def rewrite(result: dict) -> None:
    """Write a result (changed after the run, e.g. a comparison added) back to its JSON file."""
    pathlib.Path(result["files"]["json"]).write_text(json.dumps(result, indent=2))
