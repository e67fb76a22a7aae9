"""`python -m scenarios.noop_plugin --socket PATH`: a device-plugin gRPC server whose Allocate does
nothing (one empty ContainerAllocateResponse per container request). It never registers: the fidelity
benchmark talks to its socket directly, to measure the harness rather than a plugin. grpc.aio, so the
server side is as cheap as Python gRPC gets."""
from __future__ import annotations

import argparse
import asyncio
import os
import signal

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scenarios.noop_plugin")
    ap.add_argument("--socket", required=True)
    args = ap.parse_args(argv)
    asyncio.run(serve(args.socket))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
