"""The native load generator of plugin_allocate_burst: ghz (github.com/bojand/ghz, a Go gRPC load tool;
`make bin/ghz` builds it from the Go module proxy, pinned in tools/ghz) over the plugin's unix socket.

Python cannot time a call much below a few hundred µs (the harness floor, dpconform.scenarios.bench_fidelity); a Go
plugin answers in about 100 µs. ghz sends the same Allocate the locust user sends (the first
`devices_per_request` healthy IDs: a plugin's Allocate costs the same for any of them), closed loop, `users`
concurrent workers for `duration_s`, and reports every call (start, latency in ns, status): those become
the same µs records, SLOs, JSON, plots and baseline as the locust path. GetPreferredAllocation is not sent
(ghz runs one method per run); the result says so.

    result = run(endpoint, devices, users=8, duration_s=5, devices_per_request=1, timeout_s=10)
"""
from __future__ import annotations

import datetime
import json
import os
import pathlib
import subprocess
import tempfile

import numpy as np

from dpconform.fixtures import kube_versions
from dpconform.fixtures.procs import stop_group

GHZ = kube_versions.SHARED_BIN / "ghz"
CALL = "v1beta1.DevicePlugin/Allocate"


def binary() -> str | None:
    """ghz to run: bin/ghz, else ghz on PATH; None when neither exists."""
    if GHZ.exists():
        return str(GHZ)
    from shutil import which
    return which("ghz")


def unavailable() -> str | None:
    return None if binary() else (f"ghz not built: {kube_versions.build_hint('bin/ghz', kube_versions.SHARED_BIN, 'ghz')} "
                                  "(builds it from the Go module proxy)")


def write_protoset(path: pathlib.Path) -> pathlib.Path:
    """The device-plugin API as a FileDescriptorSet (from the generated stubs: no .proto includes needed)."""
    from google.protobuf import descriptor_pb2
    from dpconform.kubeletapi import dp
    fds = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(fd):
        for dep in fd.dependencies:
            add(dep)
        if fd.name not in seen:
            seen.add(fd.name)
            proto = descriptor_pb2.FileDescriptorProto()
            fd.CopyToProto(proto)
            fds.file.append(proto)
    add(dp.DESCRIPTOR)
    path.write_bytes(fds.SerializeToString())
    return path


def _ns(timestamp: str) -> int:
    """ghz's RFC 3339 timestamp (ns digits) as ns since the epoch."""
    head, _, frac = timestamp.rstrip("Z").partition(".")
    base = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.timezone.utc)
    return int(base.timestamp()) * 1_000_000_000 + int((frac + "000000000")[:9])


_CLOSING = ("use of closed network connection", "transport is closing", "client connection is closing",
            "context canceled")


class GhzError(RuntimeError):
    pass


def run(endpoint: str, devices: list[str], *, users: int, duration_s: float, devices_per_request: int = 1,
        timeout_s: float = 10.0) -> dict:
    """One closed-loop Allocate run. Returns {"start_ns", "dur_ns", "ok" (numpy arrays, start relative to
    the first call), "errors" {text: count}, "dropped_at_stop", "elapsed_s", "command"}."""
    exe = binary()
    if exe is None:
        raise GhzError(unavailable())
    k = max(1, min(devices_per_request, len(devices)))
    data = json.dumps({"container_requests": [{"devices_ids": list(devices[:k])}]})
    with tempfile.TemporaryDirectory(prefix="dpc-ghz-") as tmp:
        protoset = write_protoset(pathlib.Path(tmp) / "deviceplugin.protoset")
        out = pathlib.Path(tmp) / "ghz.json"
        argv = [exe, "--insecure", "--protoset", str(protoset), "--call", CALL, "-d", data,
                "-c", str(users), "-z", f"{duration_s:g}s", "--timeout", f"{timeout_s:g}s",
                "--format", "json", "-o", str(out), f"unix://{endpoint}"]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, text=True)
        try:
            _, err = proc.communicate(timeout=duration_s + timeout_s + 30)
        except subprocess.TimeoutExpired:
            stop_group(proc, grace=2)
            raise GhzError(f"ghz did not finish within {duration_s + timeout_s + 30:g} s") from None
        finally:
            stop_group(proc, grace=2)
        if proc.returncode != 0 or not out.exists():
            raise GhzError(f"ghz exited {proc.returncode}: {(err or '').strip()[-800:]}")
        report = json.loads(out.read_text())
    details = report.get("details") or []
    dur = np.array([int(d["latency"]) for d in details], dtype=np.int64)
    # ghz stamps a call when it ends (with one worker a call's stamp minus its latency is the previous end)
    start = np.array([_ns(d["timestamp"]) for d in details], dtype=np.int64) - dur
    ok = np.array([d.get("status") == "OK" for d in details], dtype=bool)
    # ghz closes its connection when the duration ends (its clock starts before the first call): a call
    # that fails on that close in the run's last 5 % was in flight at the stop, not refused by the plugin
    end = start + dur
    last = int(end.max()) if end.size else 0
    tail_from = last - int(0.05 * duration_s * 1e9)
    at_stop = np.array([any(m in (d.get("error") or "") for m in _CLOSING) for d in details], dtype=bool)
    keep = ok | ~(at_stop & (end >= tail_from))
    errors: dict[str, int] = {}
    for d, kept in zip(details, keep):
        if kept and d.get("status") != "OK":
            key = f"Allocate: {d.get('status')}: {d.get('error', '')}"[:300]
            errors[key] = errors.get(key, 0) + 1
    start, dur, ok = start[keep], dur[keep], ok[keep]
    t0 = int(start.min()) if start.size else 0
    elapsed = ((int((start + dur).max()) - t0) / 1e9) if start.size else 0.0
    return {"start_ns": start - t0, "dur_ns": dur, "ok": ok, "errors": errors,
            "dropped_at_stop": int((~keep).sum()), "elapsed_s": elapsed,
            "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv[:-1]))
            + f" unix://{endpoint}", "calls": ["Allocate"], "devices_per_request": k}
