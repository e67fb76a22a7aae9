"""The DevicePlugin servicer for NVIDIA GPUs (deviceplugin v1beta1), on the plugin kit."""
from __future__ import annotations

import logging
from typing import Sequence

import grpc

from dpconform.kubeletapi import constants, dp, dp_grpc

from ..kit import DeviceState, stream_snapshots
from .allocation import Topology, preferred
from .discovery import Gpu
from .strategies import container_response

log = logging.getLogger("dpconform.nvml")


class NvmlServicer(dp_grpc.DevicePluginServicer):
    def __init__(self, state: DeviceState, gpus: Sequence[Gpu], levels: dict[tuple[str, str], int], *,
                 resource_name: str, strategies: Sequence[str], id_strategy: str = "uuid"):
        self.state = state
        self.gpus = {g.uuid: g for g in gpus}
        self.topology = Topology(numa={g.uuid: g.numa for g in gpus},
                                 index={g.uuid: g.index for g in gpus}, levels=levels)
        self.resource_name = resource_name
        self.strategies = list(strategies)
        self.id_strategy = id_strategy

    def options(self) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def GetDevicePluginOptions(self, request, context):
        return self.options()

    def ListAndWatch(self, request, context):
        yield from stream_snapshots(self.state, context)

    def _id_of(self, device_id: str) -> str:
        return str(self.gpus[device_id].index) if self.id_strategy == "index" else device_id

    def GetPreferredAllocation(self, request, context):
        resp = dp.PreferredAllocationResponse()
        for creq in request.container_requests:
            unknown = [d for d in list(creq.available_deviceIDs) + list(creq.must_include_deviceIDs)
                       if d not in self.gpus]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"preferred allocation request for {self.resource_name!r}: unknown device(s): "
                              f"{', '.join(unknown)}")
            ids = preferred(creq.available_deviceIDs, creq.must_include_deviceIDs, creq.allocation_size,
                            self.topology)
            resp.container_responses.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return resp

    def Allocate(self, request, context):
        resp = dp.AllocateResponse()
        for creq in request.container_requests:
            ids = list(creq.devices_ids)
            unknown = [d for d in ids if d not in self.gpus]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"invalid allocation request for {self.resource_name!r}: unknown device(s): "
                              f"{', '.join(unknown)}")
            unhealthy = [d for d in ids if (dev := self.state.get(d)) is not None and dev.health != constants.HEALTHY]
            if unhealthy:  # NVIDIA's plugin hands these out; a container would get a GPU that has fallen over
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              f"{self.resource_name}: device(s) {', '.join(unhealthy)} are Unhealthy; cannot allocate")
            resp.container_responses.append(
                container_response(ids, strategies=self.strategies, id_of=self._id_of))
        log.info("Allocate %s", [list(c.devices_ids) for c in request.container_requests])
        return resp

    def PreStartContainer(self, request, context):
        return dp.PreStartContainerResponse()
