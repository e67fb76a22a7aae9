"""node_admission_burst: N pods submitted at once through the emulator's HTTP API (serial admission, as
on a node): time from submission until each pod has its devices, and until the whole burst has them."""
from __future__ import annotations

from dpconform.scenarios.registry import Scenario

SCENARIO = Scenario(
    name="node_admission_burst", needs=("http", "resource", "devices"), primary="admit", bursts=True,
    defaults={
        "users": 1, "spawn_rate": 1, "duration_s": 5, "burst_size": 8, "devices_per_pod": 1,
        "http_timeout_s": 30, "stop_timeout_s": 30,
        # pod startup SLO (sig-scalability) is p99 <= 5 s for the whole pod; device admission is a slice.
        "slo": {"admit": {"p50_ms": 100, "p99_ms": 1000},
                "burst": {"max_ms": 5000},
                "*": {"max_failure_ratio": 0}},
    })


def user_class():
    import time

    import gevent.pool
    from locust import User, constant, task

    from dpconform.scenarios.users import LIVE_PODS, SETTINGS, TARGET, ApiError, PodApi, burst_size, fire, pod_body

    class AdmissionBurstUser(User):
        """Submit `burst_size` pods at once (each on its own connection), record for each the time until
        the node allocated its devices ("admit") and for the whole burst the time until all had them
        ("burst"); then remove them ("remove") and start the next burst."""
        wait_time = constant(0)

        def on_start(self):
            s, t = SETTINGS, TARGET
            self.burst = burst_size(s, len(t["devices"]))
            timeout = float(s.get("http_timeout_s", 30))
            self.apis = [PodApi(self.environment, t["http"], timeout) for _ in range(self.burst)]
            for a in self.apis:      # connect before the first burst: the burst measures admission, not TCP set-up
                a.connect()
            self.pool = gevent.pool.Pool(self.burst)

        def on_stop(self):
            for a in self.apis:
                a.close()

        @task
        def burst_round(self):
            resource, k = TARGET["resource"], int(SETTINGS.get("devices_per_pod", 1))
            pods = [pod_body("burst", resource, k) for _ in range(self.burst)]
            t0 = time.perf_counter_ns()
            ok = list(self.pool.imap_unordered(lambda ap: ap[0].admit(ap[1]), zip(self.apis, pods)))
            t1 = time.perf_counter_ns()
            failed = ok.count(False)
            fire(self.environment, "http", "burst", t0, t1,
                 ApiError(f"{failed} of {len(pods)} pods not admitted") if failed else None)
            admitted = [p["uid"] for p in pods if p["uid"] in LIVE_PODS]
            list(self.pool.imap_unordered(lambda au: au[0].remove(au[1]), zip(self.apis, admitted)))

    return AdmissionBurstUser
