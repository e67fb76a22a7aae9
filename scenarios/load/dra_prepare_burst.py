"""dra_prepare_burst: burst_size NodePrepareResources calls at once on a DRA driver (--dra; an API server
from bin/), one allocated claim each, then their NodeUnprepareResources."""
from __future__ import annotations

from dpconform.scenarios.registry import Scenario

SCENARIO = Scenario(
    name="dra_prepare_burst", needs=("dra", "devices"), primary="NodePrepareResources", bursts=True,
    defaults={
        # the kubelet prepares pods in parallel: burst_size calls at once, then their unprepares
        "users": 1, "spawn_rate": 1, "duration_s": 5, "burst_size": 8, "rpc_timeout_s": 45, "stop_timeout_s": 60,
        # the kubelet's deadline is 45 s; a driver that reads the claim from the API server needs a round trip
        "slo": {"NodePrepareResources": {"p50_ms": 100, "p99_ms": 1000},
                "NodeUnprepareResources": {"p99_ms": 1000},
                "burst": {"max_ms": 5000},
                "*": {"max_failure_ratio": 0}},
    })


def user_class():
    import time

    import gevent.pool
    import grpc
    from locust import User, constant, task

    from dpconform.scenarios.users import SETTINGS, TARGET, ApiError, LocustInterceptor, burst_size, fire

    class DraPrepareBurstUser(User):
        """dra_prepare_burst: `burst_size` NodePrepareResources calls at once on the DRA driver's endpoint, one
        allocated claim each (TARGET["dra"]["claims"], this user's share), as the kubelet prepares pods in
        parallel; the whole burst is "burst"; then the claims are unprepared at once and the next burst starts."""
        wait_time = constant(0)

        def on_start(self):
            from dpconform.kubeletapi import dra, dra_grpc, drab, drab_grpc
            t = TARGET["dra"]
            self.m, stub = (dra, dra_grpc.DRAPluginStub) if t["service"] == "v1.DRAPlugin" else (drab, drab_grpc.DRAPluginStub)
            self.burst = burst_size(SETTINGS, len(TARGET["devices"]))
            n = DraPrepareBurstUser.started = getattr(DraPrepareBurstUser, "started", 0) + 1
            self.claims = t["claims"][(n - 1) * self.burst:n * self.burst]
            self.timeout = float(SETTINGS.get("rpc_timeout_s", 45))
            self._channel = grpc.insecure_channel(f"unix://{t['endpoint']}")
            self.stub = stub(grpc.intercept_channel(self._channel, LocustInterceptor(self.environment)))
            self.pool = gevent.pool.Pool(self.burst)

        def on_stop(self):
            self._channel.close()

        def _call(self, method, request_class, claim) -> bool:
            try:
                resp = method(request_class(claims=[self.m.Claim(**claim)]), timeout=self.timeout)
            except grpc.RpcError:
                return False                  # recorded by the interceptor
            r = resp.claims.get(claim["uid"])
            return r is not None and not r.error

        @task
        def burst_round(self):
            t0 = time.perf_counter_ns()
            ok = list(self.pool.imap_unordered(
                lambda c: self._call(self.stub.NodePrepareResources, self.m.NodePrepareResourcesRequest, c), self.claims))
            t1 = time.perf_counter_ns()
            failed = ok.count(False)
            fire(self.environment, "grpc", "burst", t0, t1,
                 ApiError(f"{failed} of {len(ok)} claims not prepared") if failed else None)
            list(self.pool.imap_unordered(
                lambda c: self._call(self.stub.NodeUnprepareResources, self.m.NodeUnprepareResourcesRequest, c),
                self.claims))

    return DraPrepareBurstUser
