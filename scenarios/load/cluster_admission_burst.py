"""cluster_admission_burst: N one-device pods created at once through the API server (--backend local,
kind or kubeconfig): per pod create -> Running, the whole burst, failures by reason."""
from __future__ import annotations

from dpconform.scenarios.registry import Scenario

SCENARIO = Scenario(
    name="cluster_admission_burst", needs=("cluster", "resource", "devices"), primary="running", bursts=True,
    defaults={
        # one round at least: a round started before duration_s ends is let finish (stop_timeout_s)
        "users": 1, "spawn_rate": 1, "duration_s": 5, "burst_size": 8, "devices_per_pod": 1,
        "pod_timeout_s": 120, "stop_timeout_s": 240,
        # sig-scalability's pod startup SLO: p99 <= 5 s from creation to Running (no image pull), at scale
        "slo": {"running": {"p50_ms": 5000, "p99_ms": 15000},
                "burst": {"max_ms": 30000},
                "*": {"max_failure_ratio": 0}},
    })


def user_class():
    import time
    import uuid

    import gevent.event
    import gevent.pool
    from locust import User, constant, task

    from dpconform.scenarios.users import (BURST_LABEL, LIVE_CLUSTER_PODS, SETTINGS, TARGET, ApiError, burst_size,
                                           cluster_api, delete_cluster_pods, fire, strip_names)

    class ClusterBurstUser(User):
        """Create `burst_size` one-device pods at once through the API server (the
        scheduler places them on the plugin's node), record for each the time from its create call until a
        watch saw it Running ("running"), the create call itself ("create"), and for the whole burst the time
        until every pod ran ("burst"); a pod that fails or is not Running after pod_timeout_s is a failure
        named by its reason. Then the pods are deleted and the next burst waits until they are gone."""
        wait_time = constant(0)

        def on_start(self):
            s, t = SETTINGS, TARGET
            self.k = int(s.get("devices_per_pod", 1))
            self.burst = burst_size(s, len(t["devices"]))
            self.timeout = float(s.get("pod_timeout_s", 120))
            self.api = cluster_api(t)
            self.pool = gevent.pool.Pool(self.burst)

        def on_stop(self):
            self.api.close()

        def _watch(self, selector: str, rv: str, t0: dict, done: dict, all_done) -> None:
            """Until every pod is done: each pod seen Running fires "running"; a pod that will not run is
            done with its reason. A broken or expired watch is listed again (those pods' times are the
            list's, a little late, never early)."""
            from kubernetes import watch
            from kubernetes.client.rest import ApiException

            from dpconform.fixtures.cluster.api import REQUEST_TIMEOUT, fatal_state
            core, ns = self.api.core, self.api.namespace

            def seen(pod) -> None:
                name = pod.metadata.name
                if name in done or name not in t0:
                    return
                if pod.status.phase == "Running":
                    done[name] = None
                    fire(self.environment, "k8s", "running", t0[name], time.perf_counter_ns())
                else:
                    why = fatal_state(pod)
                    if why is not None:
                        done[name] = why
                        fire(self.environment, "k8s", "running", t0[name], time.perf_counter_ns(),
                             ApiError(f"{why[0]}: {strip_names(why[1], t0)}"))
                if len(done) >= self.burst:
                    all_done.set()
            while not all_done.is_set():
                w = watch.Watch()
                try:
                    for ev in w.stream(core.list_namespaced_pod, ns, label_selector=selector, resource_version=rv,
                                       timeout_seconds=10, _request_timeout=REQUEST_TIMEOUT + 10):
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            seen(ev["object"])
                        if all_done.is_set():
                            return
                except (ApiException, OSError, ValueError):
                    pass
                finally:
                    w.stop()
                lst = self.api.call("list burst pods", core.list_namespaced_pod, ns, label_selector=selector)
                rv = lst.metadata.resource_version
                for pod in lst.items:
                    seen(pod)

        def _create(self, body: dict, t0: dict, done: dict, all_done) -> None:
            name = body["metadata"]["name"]
            t0[name] = start = time.perf_counter_ns()
            exc = None
            try:
                self.api.create_pod(body)
                LIVE_CLUSTER_PODS.add(name)
            except Exception as e:  # noqa: BLE001 - dpconform.fixtures.cluster.api.ApiError: one line
                exc = e
                done[name] = ("CreateFailed", str(e))
                if len(done) >= self.burst:
                    all_done.set()
            fire(self.environment, "k8s", "create", start, time.perf_counter_ns(), exc)

        @task
        def burst_round(self):
            from dpconform.fixtures.cluster.api import fatal_state, pod_events_reason, workload_pod
            t = TARGET
            round_id = uuid.uuid4().hex[:8]
            selector = f"{BURST_LABEL}={round_id}"
            lst = self.api.call("list burst pods", self.api.core.list_namespaced_pod, self.api.namespace,
                                label_selector=selector)
            bodies = []
            for i in range(self.burst):
                if t["cluster"].get("claim_template"):        # a DRA driver's devices: one claim per pod
                    from dpconform.fixtures.dra.claims import claim_pod
                    b = claim_pod(f"burst-{round_id}-{i}", self.api.namespace, t["cluster"]["claim_template"], ["gpu"])
                    b["spec"]["nodeSelector"] = {"kubernetes.io/hostname": t["cluster"]["node"]}
                else:
                    b = workload_pod(f"burst-{round_id}-{i}", self.api.namespace, {"c": {t["resource"]: self.k}},
                                     node_selector={"kubernetes.io/hostname": t["cluster"]["node"]})
                b["metadata"]["labels"][BURST_LABEL] = round_id
                bodies.append(b)
            t0: dict[str, int] = {}
            done: dict[str, tuple | None] = {}
            all_done = gevent.event.Event()
            watcher = gevent.spawn(self._watch, selector, lst.metadata.resource_version, t0, done, all_done)
            start = time.perf_counter_ns()
            list(self.pool.imap_unordered(lambda b: self._create(b, t0, done, all_done), bodies))
            all_done.wait(self.timeout)
            watcher.kill()
            for name in sorted(set(t0) - set(done)):        # not Running in time: say what it waits for
                pod = self.api.read_pod(name)
                if pod is None:
                    reason, message = "Gone", ""
                else:
                    reason, message = fatal_state(pod) or pod_events_reason(pod)
                    reason = reason or pod.status.phase
                done[name] = (reason, message)
                fire(self.environment, "k8s", "running", t0[name], time.perf_counter_ns(),
                     ApiError(f"not Running after {self.timeout:g} s: {reason}: {strip_names(message, t0)}"))
            failed = [n for n, why in done.items() if why is not None]
            fire(self.environment, "k8s", "burst", start, time.perf_counter_ns(),
                 ApiError(f"{len(failed)} of {len(bodies)} pods not Running") if failed else None)
            delete_cluster_pods(self.api, sorted(LIVE_CLUSTER_PODS & set(t0)), self.timeout)

    return ClusterBurstUser
