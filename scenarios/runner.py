"""`python -m dpconform.scenarios.runner SCENARIO --profile smoke|full|PATH --target TARGET.json --out DIR`

Runs one load scenario with locust as a library, in this process only (locust monkey-patches it with
gevent). TARGET.json says what to load (written by the pytest side, scenarios/orchestrate.py):
    {"endpoint": plugin socket, "http": emulator API URL, "resource": name, "devices": [healthy IDs],
     "options": {...}, "control": fake-GPU control socket | null, "health_hook": "CMD {device} {health}" | null,
     "cluster": {"kubeconfig", "namespace", "node"} (cluster_admission_burst), "plugin": {facts for the report}}
--endpoint/--http/--devices override fields. Writes DIR/SCENARIO.json, DIR/SCENARIO-histogram.png,
DIR/SCENARIO-timeline.png, DIR/SCENARIO-samples.npz; prints one progress line per second and a table.
Exit 0: SLOs met; 1: an SLO missed; 2: bad arguments or setup.

Beyond one process, locust's own distributed mode (one master, N workers; no home-made distribution):
    --processes N                      a master and N worker processes on this host
    --master --expect-workers N [--master-bind-host 0.0.0.0 --master-bind-port 5557]    on one host
    --worker --master-host HOST [--master-port 5557]                                     on each other host
When its users have stopped each worker sends the master its own µs record (a custom message; the master
also asks every worker after the stop, for one that sent none); the master merges them (start times aligned on each process's wall clock) and writes the one result.
"""
from __future__ import annotations

from dpconform.scenarios import users  # noqa: I001  (imports locust first: gevent patching, then grpc gevent init)

import argparse
import array
import datetime
import json
import logging
import os
import pathlib
import platform
import signal
import sys
import time

import gevent
import gevent.event
import grpc
import locust
import numpy as np
from locust.env import Environment

from dpconform.scenarios import plots, profile as profiles, registry, stats

RECORDS_MESSAGE = "dpconform_records"          # worker -> master: its record
SEND_RECORDS_MESSAGE = "dpconform_send_records"  # master -> every worker, after stopping the test
WORKER_WAIT_S = profiles.WORKER_WAIT_S


class Recorder:
    """Every request event: start offset and duration in ns (from the user's perf_counter_ns), name, ok."""

    def __init__(self):
        self.reset_clock()
        self.names: list[str] = []
        self._idx: dict[str, int] = {}
        self.start = array.array("q")
        self.dur = array.array("q")
        self.name = array.array("H")
        self.ok = array.array("b")
        self.errors: dict[str, int] = {}

    def on_request(self, request_type, name, response_time, response_length, exception=None, context=None, **_):
        ctx = context or {}
        ns = ctx.get("ns")
        if ns is None:                       # an event we did not time ourselves: its float ms is all there is
            ns = int(response_time * 1e6)
        t0 = ctx.get("t0_ns", time.perf_counter_ns() - ns)
        i = self._idx.get(name)
        if i is None:
            i = self._idx[name] = len(self.names)
            self.names.append(name)
        self.start.append(t0 - self.t0_ns)
        self.dur.append(ns)
        self.name.append(i)
        self.ok.append(exception is None)
        if exception is not None:
            key = f"{name}: {describe(exception)}"
            if key in self.errors or len(self.errors) < 50:
                self.errors[key] = self.errors.get(key, 0) + 1

    def reset_clock(self) -> None:
        """t0 for the start offsets, and the wall clock at that moment (to merge other hosts' records)."""
        self.t0_ns, self.wall0_ns = time.perf_counter_ns(), time.time_ns()

    def to_message(self) -> dict:
        """This process's record for the master (locust's RPC carries msgpack: bytes, lists, dicts)."""
        start, dur, name, ok = self.arrays()
        return {"wall0_ns": self.wall0_ns, "names": list(self.names), "start": start.tobytes(), "dur": dur.tobytes(),
                "name": name.tobytes(), "ok": ok.tobytes(), "errors": dict(self.errors)}

    def merge(self, msg: dict) -> int:
        """Add a worker's record; its start offsets move onto this recorder's clock. Returns its count."""
        shift = int(msg["wall0_ns"]) - self.wall0_ns
        idx = []
        for n in msg["names"]:
            if n not in self._idx:
                self._idx[n] = len(self.names)
                self.names.append(n)
            idx.append(self._idx[n])
        start = np.frombuffer(msg["start"], dtype=np.int64) + shift
        names = np.frombuffer(msg["name"], dtype=np.uint16)
        self.start.extend(int(x) for x in start)
        self.dur.extend(int(x) for x in np.frombuffer(msg["dur"], dtype=np.int64))
        self.name.extend(idx[int(i)] for i in names)
        self.ok.extend(int(x) for x in np.frombuffer(msg["ok"], dtype=bool))
        for k, v in msg["errors"].items():
            self.errors[k] = self.errors.get(k, 0) + int(v)
        return len(names)

    @classmethod
    def from_arrays(cls, names: list[str], start, dur, name, ok, errors: dict[str, int]) -> "Recorder":
        """A record made elsewhere (the native generator): the same arrays this recorder keeps."""
        rec = cls()
        for n in names:
            rec._idx[n] = len(rec.names)
            rec.names.append(n)
        rec.start.extend(int(x) for x in start)
        rec.dur.extend(int(x) for x in dur)
        rec.name.extend(int(x) for x in name)
        rec.ok.extend(int(x) for x in ok)
        rec.errors.update(errors)
        return rec

    def arrays(self):
        n = min(len(self.start), len(self.dur), len(self.name), len(self.ok))
        return (np.array(self.start[:n], dtype=np.int64), np.array(self.dur[:n], dtype=np.int64),
                np.array(self.name[:n], dtype=np.uint16), np.array(self.ok[:n], dtype=bool))


def describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"[:300]


def environment_facts() -> dict:
    import gevent as g
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "grpcio": grpc.__version__, "locust": locust.__version__, "gevent": g.__version__,
            "numpy": np.__version__, "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "sched_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "loadavg_start": [round(x, 2) for x in os.getloadavg()]}


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m dpconform.scenarios.runner", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=profiles.SCENARIOS)
    ap.add_argument("--profile", default="smoke", help="smoke, full or a YAML path (default smoke)")
    ap.add_argument("--target", help="TARGET.json (see above)")
    ap.add_argument("--endpoint", help="plugin socket path (overrides the target)")
    ap.add_argument("--http", help="emulator HTTP API URL (overrides the target)")
    ap.add_argument("--devices", help="comma-separated device IDs (overrides the target)")
    ap.add_argument("--resource", help="resource name (overrides the target)")
    ap.add_argument("--out", required=True, help="results directory")
    ap.add_argument("--users", type=int, help="override the profile's users")
    ap.add_argument("--duration", type=float, help="override the profile's duration_s")
    ap.add_argument("--spawn-rate", type=float, help="override the profile's spawn_rate (users/s)")
    ap.add_argument("--burst-size", type=int, help="override the profile's burst_size (the admission bursts)")
    ap.add_argument("--tag", default="", help="suffix of the result file names")
    ap.add_argument("--generator", choices=("locust", "ghz"),
                    help="plugin_allocate_burst: locust users (default) or ghz, the native generator for plugins "
                         "faster than Python can time (scenarios/ghz.py; `make bin/ghz`); default: the profile's "
                         "`generator`, else locust")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    dist = ap.add_argument_group("distributed (locust's master/worker mode)")
    dist.add_argument("--processes", type=int, help="a master and this many worker processes on this host")
    dist.add_argument("--master", action="store_true", help="be the master; wait for --expect-workers workers")
    dist.add_argument("--expect-workers", type=int, default=1, help="workers the master waits for (default 1)")
    dist.add_argument("--master-bind-host", default="127.0.0.1", help="master: address to listen on (0.0.0.0 "
                      "for other hosts; default 127.0.0.1)")
    dist.add_argument("--master-bind-port", type=int, default=5557, help="master: port (default 5557)")
    dist.add_argument("--worker", action="store_true", help="be a worker of the master at --master-host")
    dist.add_argument("--master-host", default="127.0.0.1", help="worker: the master's address")
    dist.add_argument("--master-port", type=int, default=5557, help="worker: the master's port (default 5557)")
    args = ap.parse_args(argv)
    if sum(bool(x) for x in (args.processes, args.master, args.worker)) > 1:
        ap.error("--processes, --master and --worker exclude each other")
    if args.processes is not None and args.processes < 1:
        ap.error("--processes must be at least 1")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    args.argv = argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        prof = profiles.load(args.profile)
    except profiles.ProfileError as e:
        print(f"runner: {e}", file=sys.stderr)
        return 2
    s = dict(prof["scenarios"][args.scenario])
    if args.users:
        s["users"] = args.users
    if args.duration:
        s["duration_s"] = args.duration
    if args.spawn_rate:
        s["spawn_rate"] = args.spawn_rate
    if args.burst_size:
        if "burst_size" not in s:
            print(f"runner: --burst-size: {args.scenario} has no bursts", file=sys.stderr)
            return 2
        s["burst_size"] = args.burst_size
    target = json.loads(pathlib.Path(args.target).read_text()) if args.target else {}
    for key in ("endpoint", "http", "resource"):
        if getattr(args, key):
            target[key] = getattr(args, key)
    if args.devices:
        target["devices"] = [d for d in args.devices.split(",") if d]
    sc = registry.get(args.scenario)
    missing = [k for k in sc.needs if not target.get(k)]
    if missing:
        print(f"runner: {args.scenario} needs {', '.join(missing)} (in --target or as options)", file=sys.stderr)
        return 2
    if sc.flips and not (target.get("control") or target.get("health_hook")):
        print(f"runner: {args.scenario} needs a way to flip health: 'control' (fake-GPU) or 'health_hook' in the target",
              file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    users.TARGET.update(target)
    users.SETTINGS.update(s)
    generator = args.generator or s.get("generator", "locust")
    if generator == "ghz":
        if not sc.socket_level:
            print(f"runner: --generator ghz: only a socket-level burst (plugin_allocate_burst), not {args.scenario}",
                  file=sys.stderr)
            return 2
        if args.processes or args.master or args.worker:
            print("runner: --generator ghz runs in one process (ghz spreads its workers over the cores itself)",
                  file=sys.stderr)
            return 2
        return run_ghz(args, prof, s, target, out)
    cls = registry.user_class(args.scenario)
    if sc.socket_level:
        cls.endpoint = target["endpoint"]
    return run(args, prof, s, target, cls, out)


def run_ghz(args, prof, s, target, out: pathlib.Path) -> int:
    """plugin_allocate_burst driven by ghz: the same records, SLOs and files as the locust path."""
    from dpconform.scenarios import ghz
    label = args.scenario + (f"[{args.tag}]" if args.tag else "")
    users_n, duration = int(s["users"]), float(s["duration_s"])
    print(f"[load] {label}: {users_n} ghz workers for {duration:g} s (native generator), profile {prof['name']}",
          flush=True)
    facts = environment_facts()
    try:
        r = ghz.run(target["endpoint"], list(target["devices"]), users=users_n, duration_s=duration,
                    devices_per_request=int(s.get("devices_per_request", 1)), timeout_s=float(s.get("rpc_timeout_s", 10)))
    except ghz.GhzError as e:
        print(f"runner: {e}", file=sys.stderr)
        return 2
    rec = Recorder.from_arrays(["Allocate"], r["start_ns"], r["dur_ns"], np.zeros(r["dur_ns"].size, dtype=np.uint16),
                               r["ok"], r["errors"])
    facts["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    facts["generator"] = "ghz"
    extra = {"generator": {"name": "ghz", "command": r["command"], "calls": r["calls"],
                           "devices_per_request": r["devices_per_request"],
                           "in_flight_at_stop_not_counted": r["dropped_at_stop"]}}
    return report(args, prof, s, target, out, rec, None, r["elapsed_s"], facts, profiles.PRIMARY[args.scenario],
                  label, extra, [])


def run(args, prof, s, target, cls, out: pathlib.Path) -> int:
    env = Environment(user_classes=[cls], events=locust.events, stop_timeout=float(s.get("stop_timeout_s", 5)))
    rec = Recorder()
    env.events.request.add_listener(rec.on_request)
    if args.worker:
        return run_worker(args, env, rec, target)
    expected = args.processes or (args.expect_workers if args.master else 0)
    workers: list = []
    received: dict[str, int] = {}
    all_in = gevent.event.Event()
    if expected:
        port = free_port() if args.processes else args.master_bind_port
        runner = env.create_master_runner(args.master_bind_host, port)

        def on_records(environment, msg, **_):
            if msg.node_id in received:     # sent on its own at its stop, and asked for: once is all
                return
            received[msg.node_id] = rec.merge(msg.data)
            if len(received) >= expected:
                all_in.set()
        runner.register_message(RECORDS_MESSAGE, on_records)
        if args.processes:
            workers = spawn_workers(args, port)
        if not wait_for_workers(runner, expected, workers):
            stop_workers(workers)
            runner.quit()
            return 2
    else:
        runner = env.create_local_runner()
    facts = environment_facts()
    stop = gevent.event.Event()
    parent = os.getppid()
    duration = float(s["duration_s"])
    users_n = int(s["users"])
    spawn_rate = float(s.get("spawn_rate", users_n))
    label = args.scenario + (f"[{args.tag}]" if args.tag else "")
    primary = profiles.PRIMARY[args.scenario]

    stopped_at: list[float] = []

    def quit_all():
        if expected:   # stop the users everywhere, then collect every worker's record
            ids = [c.id for c in runner.clients.all]    # a stopped worker leaves that list until it is ready
            runner.stop()
            stopped_at.append(time.perf_counter())
            for worker_id in ids:
                runner.send_message(SEND_RECORDS_MESSAGE, None, client_id=worker_id)
            if not all_in.wait(WORKER_WAIT_S):
                print(f"[load] {label}: records from {len(received)} of {expected} workers within "
                      f"{WORKER_WAIT_S:g} s", flush=True)
        runner.quit()

    def finish(*_):
        if not stop.is_set():
            stop.set()
            gevent.spawn(quit_all)

    def progress():
        seen, last_t = 0, time.perf_counter()
        t_start = last_t
        while not stop.wait(1.0):
            if os.getppid() != parent:     # our parent died: never outlive it
                print(f"[load] {label}: parent process gone, stopping", flush=True)
                finish()
                return
            now = time.perf_counter()
            if expected:   # the requests live in the workers: locust's aggregate (reported every few s)
                n, p99 = env.stats.total.num_requests, "-"
                fails = env.stats.total.num_failures
            else:
                n = len(rec.dur)
                window = np.array(rec.dur[seen:n], dtype=np.int64)   # a copy: never export the live buffer
                fails = len(rec.ok) - sum(rec.ok)
                p99 = stats.fmt_us(float(np.percentile(window, 99)) / 1000) if window.size else "-"
            if not args.quiet:
                print(f"[load] {label:<22} {now - t_start:6.1f} s  requests {n:7d}  rps {(n - seen) / (now - last_t):8.1f}"
                      f"  p99(1s) {p99:>9}  failures {fails}  users {runner.user_count}", flush=True)
            seen, last_t = n, now

    gevent.signal_handler(signal.SIGTERM, finish)
    gevent.signal_handler(signal.SIGINT, finish)
    flip_devices = []
    if registry.get(args.scenario).flips:
        flip_devices = list(target["devices"])[-max(1, int(s.get("flip_devices", 1))):]
        gevent.spawn(users.flipper, env, flip_devices, float(s["flip_interval_s"]), stop)
    gevent.spawn(progress)
    where = f", {expected} worker processes" if expected else ""
    print(f"[load] {label}: {users_n} users (spawn {spawn_rate:g}/s) for {duration:g} s, profile {prof['name']}{where}",
          flush=True)
    t_wall0 = time.perf_counter()
    rec.reset_clock()
    runner.start(users_n, spawn_rate=spawn_rate)
    gevent.spawn_later(duration, finish)
    runner.greenlet.join()
    stop.set()
    stop_workers(workers)
    elapsed = (stopped_at[0] if stopped_at else time.perf_counter()) - t_wall0
    facts["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    facts["load_generator_cpu_warning"] = bool(getattr(runner, "cpu_warning_emitted", False))
    cleanup = after_run(args.scenario, target, flip_devices, env)
    if expected:
        cleanup["distributed"] = {"workers": expected, "requests_per_worker": dict(sorted(received.items()))}
    env.events.request.remove_listener(rec.on_request)
    return report(args, prof, s, target, out, rec, env, elapsed, facts, primary, label, cleanup, flip_devices)


def run_worker(args, env, rec: Recorder, target: dict) -> int:
    """A locust worker: runs the users the master gives it; sends its record when the master stops."""
    runner = env.create_worker_runner(args.master_host, args.master_port)
    parent = os.getppid()
    sent = []

    def send_records(**_):
        if not sent:
            sent.append(True)
            runner.send_message(RECORDS_MESSAGE, rec.to_message())

    def stopped(**_):
        send_records()
        # the users are gone: the worker loop's sleep of stop_timeout after a "stop" (before it reads the
        # master's "quit") only delays the exit; the next spawn message sets stop_timeout again
        env.stop_timeout = 0

    def started(**_):
        sent.clear()
        rec.reset_clock()
    env.events.test_start.add_listener(started)
    # at once when this worker's users have stopped: after a "stop" locust's worker loop sleeps stop_timeout
    # before it reads the next message (the master's request below would come too late when that is long)
    env.events.test_stop.add_listener(stopped)
    runner.register_message(SEND_RECORDS_MESSAGE, lambda environment, msg, **_: send_records())

    def orphaned():      # spawned by a master that died: never outlive it
        while os.getppid() == parent:
            gevent.sleep(1.0)
        runner.quit()
    if parent != 1:
        gevent.spawn(orphaned)
    runner.greenlet.join()
    after_run(args.scenario, target, [], env)
    return 0


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn_workers(args, port: int) -> list:
    """--processes N: N `dpconform.scenarios.runner --worker` processes of this host, same scenario and target."""
    import subprocess
    argv, skip = [], False
    for a in args.argv:
        if skip:
            skip = False
        elif a == "--processes":
            skip = True
        elif not a.startswith("--processes="):
            argv.append(a)
    cmd = [sys.executable, "-m", "dpconform.scenarios.runner", *argv, "--worker", "--master-port", str(port), "--quiet",
           "--no-plots"]
    return [subprocess.Popen(cmd, stdin=subprocess.DEVNULL) for _ in range(args.processes)]


def wait_for_workers(runner, expected: int, procs: list) -> bool:
    deadline = time.monotonic() + WORKER_WAIT_S
    while runner.worker_count < expected:
        dead = [p.returncode for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = f"a worker process exited ({dead[0]})" if dead else f"not within {WORKER_WAIT_S:g} s"
            print(f"runner: {runner.worker_count} of {expected} workers connected: {why}", file=sys.stderr)
            return False
        gevent.sleep(0.1)
    return True


def stop_workers(procs: list) -> None:
    for p in procs:
        try:
            p.wait(timeout=15)
        except Exception:  # noqa: BLE001 - a worker that did not quit with the master
            p.kill()
            p.wait(timeout=5)


def after_run(scenario, target, flip_devices, env) -> dict:
    """Leave the node as found: remove pods a stopped user left behind, flip devices back to Healthy."""
    out = {"pods_removed_after_run": 0, "devices_restored": []}
    if users.LIVE_PODS:
        api = users.PodApi(env, target["http"], 30)
        for uid in list(users.LIVE_PODS):
            try:
                api._call("DELETE", f"/pods/{uid}")
                out["pods_removed_after_run"] += 1
            except Exception as e:  # noqa: BLE001
                print(f"[load] could not remove pod {uid}: {e}", file=sys.stderr)
            users.LIVE_PODS.discard(uid)
        api.close()
    if users.LIVE_CLUSTER_PODS:
        api = users.cluster_api(target)
        try:
            left = sorted(users.LIVE_CLUSTER_PODS)
            users.delete_cluster_pods(api, left, 60)
            out["pods_removed_after_run"] += len(left)
        except Exception as e:  # noqa: BLE001
            print(f"[load] could not remove burst pods {sorted(users.LIVE_CLUSTER_PODS)}: {e}", file=sys.stderr)
        finally:
            api.close()
    for dev in flip_devices:
        try:
            users.set_health(dev, "Healthy")
            out["devices_restored"].append(dev)
        except Exception as e:  # noqa: BLE001
            print(f"[load] could not restore {dev} to Healthy: {e}", file=sys.stderr)
    return out


def report(args, prof, s, target, out, rec, env, elapsed, facts, primary, label, cleanup, flip_devices) -> int:
    start, dur, name_idx, ok = rec.arrays()
    requests = {}
    series_hist, series_time = {}, {}
    for i, name in enumerate(rec.names):
        m = name_idx == i
        requests[name] = stats.summarize(dur[m], ok[m], elapsed)
        good = m & ok
        series_hist[name] = dur[good] / 1000.0
        series_time[name] = (start[good] / 1e9, dur[good] / 1000.0)
    total = stats.summarize(dur, ok, elapsed) if dur.size else {"count": 0, "failures": 0, "rps": 0.0}
    locust_view = {e.name: {"num_requests": e.num_requests, "num_failures": e.num_failures,
                            "avg_ms_raw": round(e.avg_response_time, 4),
                            "p50_ms_bucketed": e.get_response_time_percentile(0.5),
                            "p99_ms_bucketed": e.get_response_time_percentile(0.99)}
                   for e in env.stats.entries.values()} if env is not None else {}
    result = {
        "scenario": args.scenario, "profile": prof["name"], "profile_path": prof["path"], "tag": args.tag,
        "settings": s, "primary": primary,
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(elapsed, 3), "units": "latencies in µs (perf_counter_ns per request); rps = count / duration_s",
        "requests": requests, "total": total,
        "errors": dict(sorted(rec.errors.items(), key=lambda kv: -kv[1])),
        "environment": facts,
        "plugin": target.get("plugin", {}) | {"devices_loaded": len(target.get("devices", [])),
                                               "options": target.get("options", {})},
        "locust_stats_for_comparison": locust_view,
        "extra": cleanup | ({"flipped_devices": flip_devices} if flip_devices else {}),
    }
    if registry.get(args.scenario).bursts:
        result["extra"]["burst_size_effective"] = users.burst_size(s, len(target["devices"]))
    result["slo"] = {"thresholds": s["slo"]}
    violations = stats.check_slo(result)
    result["slo"].update(violations=violations, passed=not violations)
    stem = args.scenario + (f"-{args.tag}" if args.tag else "")
    files = {"json": str(out / f"{stem}.json"), "samples": str(out / f"{stem}-samples.npz")}
    np.savez_compressed(files["samples"], names=np.array(rec.names), start_ns=start, dur_ns=dur, name=name_idx, ok=ok)
    if not args.no_plots and dur.size:
        files["histogram"] = str(out / f"{stem}-histogram.png")
        files["timeline"] = str(out / f"{stem}-timeline.png")
        title = f"{args.scenario} ({prof['name']}, {s['users']} users, {elapsed:.1f} s)"
        plots.histogram(files["histogram"], f"latency histogram: {title}", series_hist,
                        {primary: s["slo"].get(primary, {})})
        plots.timeline(files["timeline"], f"latency over time: {title}", series_time)
    result["files"] = files
    pathlib.Path(files["json"]).write_text(json.dumps(result, indent=2))
    order = [primary] + sorted(n for n in requests if n != primary)
    print(f"[load] {label}: {total['count']} requests in {elapsed:.1f} s, {total['failures']} failed", flush=True)
    for line in stats.table(requests, order):
        print("  " + line, flush=True)
    for k, v in list(result["errors"].items())[:5]:
        print(f"  error x{v}: {k}", flush=True)
    print(f"[load] {label}: SLO " + ("met" if not violations else "MISSED: " + "; ".join(violations)), flush=True)
    print(f"[load] {label}: results {files['json']}", flush=True)
    return 0 if not violations else 1


if __name__ == "__main__":
    sys.exit(main())
