"""plugin_allocate_burst: many users calling Allocate on the plugin's socket at once, as a busy kubelet
would (GetPreferredAllocation first when the plugin advertises it)."""
from __future__ import annotations

from dpconform.scenarios.registry import Scenario

SCENARIO = Scenario(
    name="plugin_allocate_burst", needs=("endpoint", "devices"), primary="Allocate", socket_level=True,
    defaults={
        "users": 8, "spawn_rate": 8, "duration_s": 5, "devices_per_request": 1, "rpc_timeout_s": 10,
        "stop_timeout_s": 5,
        # ALC-08's default Allocate limit is p99 <= 100 ms; a healthy Python plugin answers in < 1 ms.
        "slo": {"Allocate": {"p50_ms": 20, "p95_ms": 50, "p99_ms": 100, "min_rps": 20},
                "GetPreferredAllocation": {"p99_ms": 100},
                "*": {"max_failure_ratio": 0}},
    })


def user_class():
    import random

    import grpc
    from locust import constant, task

    from dpconform.kubeletapi import dp, dp_grpc
    from dpconform.scenarios.users import SETTINGS, TARGET, GrpcUser

    class AllocateUser(GrpcUser):
        """As the kubelet does per container: GetPreferredAllocation (when the plugin advertises it) over
        the healthy devices, then Allocate of the chosen IDs. Closed loop, no think time."""
        stub_class = dp_grpc.DevicePluginStub
        wait_time = constant(0)

        def on_start(self):
            self.devices = list(TARGET["devices"])
            self.k = max(1, min(int(SETTINGS.get("devices_per_request", 1)), len(self.devices)))
            self.timeout = float(SETTINGS.get("rpc_timeout_s", 10))
            self.preferred = bool(TARGET.get("options", {}).get("get_preferred_allocation_available"))

        @task
        def allocate(self):
            try:
                if self.preferred:
                    resp = self.stub.GetPreferredAllocation(dp.PreferredAllocationRequest(container_requests=[
                        dp.ContainerPreferredAllocationRequest(available_deviceIDs=self.devices,
                                                               allocation_size=self.k)]), timeout=self.timeout)
                    chosen = list(resp.container_responses[0].deviceIDs) if resp.container_responses else []
                    if len(chosen) != self.k:   # a wrong answer is the plugin's problem; the kubelet still allocates
                        chosen = random.sample(self.devices, self.k)
                else:
                    chosen = random.sample(self.devices, self.k)
                self.stub.Allocate(dp.AllocateRequest(container_requests=[
                    dp.ContainerAllocateRequest(devices_ids=chosen)]), timeout=self.timeout)
            except grpc.RpcError:
                pass   # already recorded as a failure by the interceptor

    return AllocateUser
