"""`python -m dpconform.scenarios.bench_fidelity [--duration S] [--out DIR]`: how far the harness can be trusted.

Against a no-op Allocate server (scenarios/noop_plugin.py: bin/dp-floor, Go, when built, else grpc.aio; its
own process) it measures, for each
generator (locust users; ghz, the native one, when `make bin/ghz` built it):
1. fidelity: the same closed-loop Allocate load (1 and 8 concurrent clients) timed by our locust user
   (dpconform.scenarios.runner, gevent, interceptor, event listener) and by a tight raw grpc loop in a plain
   process (threads for concurrency); ratio = locust / raw for p50 and p99, raw / locust for throughput;
2. ceiling: the request rate the locust runner sustains (0 failures) with 1..64 users: the highest
   plugin throughput this machine can measure at all. A plugin measured near it is limited by the harness.
CPU seconds of the generator and the server per phase say which side saturated.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import resource
import shutil
import sys
import tempfile
import threading
import time

import grpc
import numpy as np

from dpconform.kubeletapi import dp, dp_grpc
from dpconform.scenarios import ghz, noop_plugin, stats
from dpconform.scenarios.orchestrate import run_scenario

DEVICES = [f"noop-{i}" for i in range(8)]
NO_SLO = ("name: bench\nscenarios:\n  plugin_allocate_burst:\n    slo:\n"
          "      Allocate: {p50_ms: null, p95_ms: null, p99_ms: null, min_rps: null}\n"
          "      GetPreferredAllocation: {p99_ms: null}\n      \"*\": {max_failure_ratio: null}\n")


def cpu_s(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def raw_loop(endpoint: str, duration: float, concurrency: int) -> dict:
    """Plain grpcio (no gevent, no locust): each thread calls Allocate back to back, perf_counter_ns each."""
    ch = grpc.insecure_channel(f"unix://{endpoint}")
    stub = dp_grpc.DevicePluginStub(ch)
    durs: list[list[int]] = [[] for _ in range(concurrency)]
    fails = [0] * concurrency
    stop = threading.Event()

    def work(i):
        rnd = random.Random(i)
        while not stop.is_set():
            req = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=[rnd.choice(DEVICES)])])
            t0 = time.perf_counter_ns()
            try:
                stub.Allocate(req, timeout=10)
            except grpc.RpcError:
                fails[i] += 1
            durs[i].append(time.perf_counter_ns() - t0)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(concurrency)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    stop.wait(duration)
    stop.set()
    for t in threads:
        t.join(15)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    ch.close()
    allv = np.concatenate([np.asarray(d, dtype=np.int64) for d in durs])
    ok = np.ones(allv.size, dtype=bool)
    ok[:sum(fails)] = False
    r = stats.summarize(allv, ok, elapsed)
    r["client_cpu_s"] = round(cpu, 2)
    return r


def runner_run(target: pathlib.Path, profile: pathlib.Path, out: pathlib.Path, users: int, duration: float,
               tag: str, generator: str = "locust") -> dict:
    """plugin_allocate_burst through dpconform.scenarios.runner with `generator` (locust users or ghz)."""
    cpu0 = children_cpu()
    o = run_scenario("plugin_allocate_burst", str(profile), target, out, users=users, duration=duration,
                     spawn_rate=users * 4, generator=generator,
                     tag=tag, echo=lambda line: None, no_plots=True)
    if o.result is None:
        raise RuntimeError(f"runner failed (exit {o.rc}):\n{o.tail()}")
    r = dict(o.result["requests"].get("Allocate", {"count": 0, "failures": 0, "rps": 0.0}))
    r["client_cpu_s"] = round(children_cpu() - cpu0, 2)   # includes the runner's start-up (~1 s)
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpconform.scenarios.bench_fidelity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per measurement (default 4)")
    ap.add_argument("--users", default="1,4,16,64", help="user counts for the ceiling (default 1,4,16,64)")
    ap.add_argument("--out", default="reports/load", help="where bench-fidelity.json goes (default reports/load)")
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="dpc-bench-", dir="/tmp"))
    try:
        with noop_plugin.running(tmp) as (sock, server):
            return bench(args, out, tmp, sock, server)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench(args, out: pathlib.Path, tmp: pathlib.Path, sock: str, server) -> int:
    server_kind = "go" if os.path.basename(server.args[0]) == "dp-floor" else "python"
    target = tmp / "target.json"
    target.write_text(json.dumps({"endpoint": str(sock), "devices": DEVICES, "options": {},
                                  "plugin": {"command": noop_plugin.describe(server_kind), "noop": True}}))
    profile = tmp / "bench.yaml"
    profile.write_text(NO_SLO)
    d = args.duration
    report = {"duration_s": d, "cpu_count": os.cpu_count(), "loadavg_start": os.getloadavg(), "server": server_kind,
              "fidelity": {}, "ceiling": []}

    def phase(label, fn):
        s0 = cpu_s(server.pid)
        r = fn()
        r["server_cpu_s"] = round(cpu_s(server.pid) - s0, 2)
        print(f"  {label:<28} reqs {r['count']:7d}  req/s {r['rps']:8.1f}  p50 {stats.fmt_us(r.get('p50_us')):>9}"
              f"  p99 {stats.fmt_us(r.get('p99_us')):>9}  fails {r['failures']}  cpu client {r['client_cpu_s']:.1f} s"
              f" server {r['server_cpu_s']:.1f} s", flush=True)
        return r

    print(f"bench_fidelity: no-op Allocate server ({noop_plugin.describe(server_kind)}), {d:g} s per phase, "
          f"{os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    generators = ["locust"] + (["ghz"] if ghz.binary() else [])
    if len(generators) == 1:
        print(f"  (ghz rows left out: {ghz.unavailable()})", flush=True)
    for conc in (1, 8):
        raw = phase(f"raw grpc loop, {conc} thread(s)", lambda: raw_loop(str(sock), d, conc))
        row = {"raw": raw}
        for g in generators:
            r = phase(f"{g}, {conc} user(s)", lambda: runner_run(target, profile, out, conc, d, f"bench-{g}-c{conc}", g))
            row[g] = r
            row[f"ratio_{g}_over_raw"] = {"p50": round(r["p50_us"] / raw["p50_us"], 2),
                                         "p99": round(r["p99_us"] / raw["p99_us"], 2),
                                         "throughput": round(raw["rps"] / r["rps"], 2) if r["rps"] else None}
            q = row[f"ratio_{g}_over_raw"]
            print(f"  -> {g}/raw at {conc}: p50 x{q['p50']}, p99 x{q['p99']}, throughput raw/{g} x{q['throughput']}",
                  flush=True)
        report["fidelity"][f"concurrency_{conc}"] = row
    for g in generators:
        for u in [int(x) for x in args.users.split(",") if x]:
            r = phase(f"{g} ceiling, {u} user(s)", lambda: runner_run(target, profile, out, u, d, f"bench-{g}-u{u}", g))
            report["ceiling"].append({"generator": g, "users": u} | r)
    for g in generators:
        ok = [c for c in report["ceiling"] if c["failures"] == 0 and c["generator"] == g]
        best = max(ok, key=lambda c: c["rps"]) if ok else None
        report.setdefault("max_sustainable_rps", {})[g] = best["rps"] if best else 0.0
        report.setdefault("max_sustainable_at_users", {})[g] = best["users"] if best else None
    report["loadavg_end"] = os.getloadavg()
    (out / "bench-fidelity.json").write_text(json.dumps(report, indent=2))
    for g in generators:
        print(f"bench_fidelity: {g}: max sustainable Allocate rate against the no-op server "
              f"{report['max_sustainable_rps'][g]:.0f} req/s (at {report['max_sustainable_at_users'][g]} users, "
              "0 failures)", flush=True)
    print(f"bench_fidelity: details {out / 'bench-fidelity.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
