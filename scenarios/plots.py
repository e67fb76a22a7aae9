"""PNG plots of one scenario run (matplotlib, Agg backend): latency histogram and latency over time."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dpconform.scenarios.stats import fmt_us  # noqa: E402


def _unit(max_us: float) -> tuple[float, str]:
    return (1.0, "µs") if max_us < 2000 else ((1000.0, "ms") if max_us < 2_000_000 else (1e6, "s"))


def histogram(path, title: str, series: dict[str, np.ndarray], slo_ms: dict[str, dict] | None = None) -> None:
    """series: name -> durations in µs (successful requests). Log-spaced bins; SLO lines dashed."""
    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    allv = np.concatenate([v for v in series.values() if v.size]) if any(v.size for v in series.values()) else np.array([1.0])
    lo, hi = max(float(allv.min()), 0.5), max(float(allv.max()), 1.0)
    bins = np.logspace(np.log10(lo * 0.9), np.log10(hi * 1.1), 60)
    for name, v in series.items():
        if v.size:
            ax.hist(v, bins=bins, alpha=0.55, label=f"{name} (n={v.size}, p50 {fmt_us(np.percentile(v, 50))}, "
                                                    f"p99 {fmt_us(np.percentile(v, 99))})")
    for name, th in (slo_ms or {}).items():
        if name in series and series[name].size:
            for key in ("p99_ms", "p50_ms"):
                if th.get(key) is not None and th[key] * 1000 <= hi * 10:
                    ax.axvline(th[key] * 1000, ls="--", lw=1, color="k")
                    ax.text(th[key] * 1000, ax.get_ylim()[1] * 0.9, f" {name} {key[:-3]} SLO", fontsize=7, rotation=90,
                            va="top")
    ax.set_xscale("log")
    ax.set_xlabel("latency (µs, log scale)")
    ax.set_ylabel("requests")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def timeline(path, title: str, series: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """series: name -> (start offsets in s, durations in µs). Scatter plus per-second p99 line."""
    fig, ax = plt.subplots(figsize=(10, 5), dpi=110)
    maxv = max((float(d.max()) for _, d in series.values() if d.size), default=1.0)
    scale, unit = _unit(maxv)
    for name, (t, d) in series.items():
        if not d.size:
            continue
        step = max(1, d.size // 20000)  # keep the PNG light
        pts = ax.scatter(t[::step], d[::step] / scale, s=3, alpha=0.35, label=f"{name}")
        sec = np.floor(t).astype(int)
        xs, ys = [], []
        for s in np.unique(sec):
            m = sec == s
            xs.append(s + 0.5)
            ys.append(np.percentile(d[m], 99) / scale)
        ax.plot(xs, ys, "-o", ms=3, lw=1.5, color=pts.get_facecolor()[0][:3], label=f"{name} p99 per second")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel(f"latency ({unit})")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
