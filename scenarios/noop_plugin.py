"""The harness floor's no-op device-plugin server: Allocate does nothing (one empty
ContainerAllocateResponse per container request), GetDevicePluginOptions answers empty options. It never
registers: the floor (make bench, plugin_allocate_burst's harness_floor, dpconform.scenarios.bench_fidelity) talks to
its socket directly, to measure the harness rather than a plugin.

Two servers, one contract: bin/dp-floor (Go, tools/dp-floor, `make bin/dp-floor`), the floor that bounds a
Go plugin, and `python -m dpconform.scenarios.noop_plugin --socket PATH` (grpc.aio), slower than a Go plugin, kept for
hosts without Go (make test). running() starts the Go one when it is built; native=True requires it
(make bench: a floor slower than the plugins it bounds says nothing).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from typing import Iterator

import grpc

from dpconform.fixtures import kube_versions
from dpconform.kubeletapi import dp, dp_grpc

FLOOR = kube_versions.SHARED_BIN / "dp-floor"
PYTHON_CMD = "python -m dpconform.scenarios.noop_plugin"


class FloorUnavailable(RuntimeError):
    """The Go floor was required (native=True) and bin/dp-floor is not built."""


def native_binary() -> str | None:
    """bin/dp-floor when built (and executable), else None."""
    return str(FLOOR) if FLOOR.is_file() and os.access(FLOOR, os.X_OK) else None


def unavailable() -> str | None:
    """Why the Go floor cannot run here (one line), None when it can."""
    return None if native_binary() else (f"{FLOOR} not built: "
                                         f"{kube_versions.build_hint('bin/dp-floor', kube_versions.SHARED_BIN, 'dp-floor')} "
                                         "(the Go no-op server)")


def kind(native: bool | None = None) -> str:
    """Which server running(native=...) starts: "go" or "python"; FloorUnavailable for native=True without
    bin/dp-floor. native=None: Go when built, else Python; False: Python."""
    if native is False:
        return "python"
    if native_binary():
        return "go"
    if native:
        raise FloorUnavailable(unavailable())
    return "python"


def describe(server_kind: str) -> str:
    """The command line of a server kind, as results record it (target.json's plugin.command)."""
    return "bin/dp-floor" if server_kind == "go" else PYTHON_CMD


class Noop(dp_grpc.DevicePluginServicer):
    async def GetDevicePluginOptions(self, request, context):
        return dp.DevicePluginOptions()

    async def Allocate(self, request, context):
        return dp.AllocateResponse(container_responses=[dp.ContainerAllocateResponse()
                                                        for _ in request.container_requests])


async def serve(path: str) -> None:
    if os.path.lexists(path):
        os.unlink(path)
    server = grpc.aio.server()
    dp_grpc.add_DevicePluginServicer_to_server(Noop(), server)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(0.5)
    if os.path.lexists(path):
        os.unlink(path)


@contextlib.contextmanager
def running(directory: str | os.PathLike, *, native: bool | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """A no-op server in its own process group on DIRECTORY/noop.sock, answering: (socket, process).
    bin/dp-floor (Go) when built, else the Python server; native=True: the Go one or FloorUnavailable
    (before anything starts); native=False: the Python one. Stopped (its group killed, its socket gone) on
    exit, also on failure."""
    from dpconform.fixtures.procs import stop_group
    from dpconform.fixtures.waiting import wait_until
    sock = os.path.join(directory, "noop.sock")
    cmd = ([native_binary(), "--socket", sock] if kind(native) == "go"
           else [sys.executable, "-m", "dpconform.scenarios.noop_plugin", "--socket", sock])
    server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        with grpc.insecure_channel(f"unix://{sock}") as ch:
            stub = dp_grpc.DevicePluginStub(ch)

            def answers():
                if server.poll() is not None:
                    raise RuntimeError(f"no-op server {cmd[0]} exited with {server.returncode}")
                try:
                    stub.GetDevicePluginOptions(dp.Empty(), timeout=1)
                    return True
                except grpc.RpcError:
                    return False
            wait_until(answers, 20, "the no-op server to answer")
        yield sock, server
    finally:
        stop_group(server, grace=5)
        with contextlib.suppress(FileNotFoundError):    # SIGKILLed, or never got to remove it
            os.unlink(sock)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpconform.scenarios.noop_plugin")
    ap.add_argument("--socket", required=True)
    args = ap.parse_args(argv)
    asyncio.run(serve(args.socket))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
