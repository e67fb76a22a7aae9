"""`python -m scenarios.noop_plugin --socket PATH`: a device-plugin gRPC server whose Allocate does
nothing (one empty ContainerAllocateResponse per container request). It never registers: the fidelity
benchmark talks to its socket directly, to measure the harness rather than a plugin. grpc.aio, so the
server side is as cheap as Python gRPC gets."""
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

from kubeletapi import dp, dp_grpc


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
def running(directory: str | os.PathLike) -> Iterator[tuple[str, subprocess.Popen]]:
    """A no-op server in its own process group on DIRECTORY/noop.sock, answering: (socket, process).
    Stopped (and its socket gone) on exit, also on failure."""
    from fixtures.procs import stop_group
    from fixtures.waiting import wait_until
    sock = os.path.join(directory, "noop.sock")
    server = subprocess.Popen([sys.executable, "-m", "scenarios.noop_plugin", "--socket", sock],
                              stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        with grpc.insecure_channel(f"unix://{sock}") as ch:
            stub = dp_grpc.DevicePluginStub(ch)

            def answers():
                if server.poll() is not None:
                    raise RuntimeError(f"no-op server exited with {server.returncode}")
                try:
                    stub.GetDevicePluginOptions(dp.Empty(), timeout=1)
                    return True
                except grpc.RpcError:
                    return False
            wait_until(answers, 20, "the no-op server to answer")
        yield sock, server
    finally:
        stop_group(server, grace=5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scenarios.noop_plugin")
    ap.add_argument("--socket", required=True)
    args = ap.parse_args(argv)
    asyncio.run(serve(args.socket))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
