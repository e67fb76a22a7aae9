"""churn: pods admitted and removed at a steady rate while the runner flips device health."""
from __future__ import annotations

from dpconform.scenarios.registry import Scenario

SCENARIO = Scenario(
    name="churn", needs=("http", "resource", "devices"), primary="admit", flips=True,
    defaults={
        "users": 2, "spawn_rate": 2, "duration_s": 5, "pods_per_user_per_s": 5, "flip_interval_s": 0.5,
        "flip_devices": 1, "race_window_s": 1.0, "http_timeout_s": 30, "stop_timeout_s": 10,
        "slo": {"admit": {"p99_ms": 1000, "min_rps": 1},
                "remove": {"p99_ms": 1000},
                "*": {"max_failure_ratio": 0}},
    })


def user_class():
    import time

    from locust import User, constant_throughput, task

    from dpconform.scenarios.users import FLIPS, SETTINGS, TARGET, ApiError, PodApi, pod_body

    class ChurnUser(User):
        """Admit a one-device pod and remove it again, at a steady rate per user. A rejection within
        race_window_s of a flip is the kubelet's own race (its device list lags the plugin by one
        ListAndWatch message) and is recorded apart, not as a failure."""

        def wait_time(self):
            return constant_throughput(float(SETTINGS["pods_per_user_per_s"]))(self)

        def on_start(self):
            self.api = PodApi(self.environment, TARGET["http"], float(SETTINGS.get("http_timeout_s", 30)))
            self.window = float(SETTINGS.get("race_window_s", 1.0))

        def on_stop(self):
            self.api.close()

        def _racing(self, exc) -> bool:
            now = time.monotonic()
            return isinstance(exc, ApiError) and str(exc).startswith("rejected") and \
                any(now - f < self.window for f in FLIPS[-4:])

        @task
        def admit_remove(self):
            pod = pod_body("churn", TARGET["resource"], 1)
            if self.api.admit(pod, tolerate=self._racing):
                self.api.remove(pod["uid"])

    return ChurnUser
