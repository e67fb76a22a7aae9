"""Locust user classes of the scenarios. Imported only by dpconform.scenarios.runner, in its own process:
importing locust monkey-patches the whole process with gevent.

Shape of locust's examples/grpc: an abstract GrpcUser whose client interceptor fires a request event
per unary call. Every request event carries context={"t0_ns", "ns"}: our own perf_counter_ns timing,
which the runner's recorder keeps at full resolution (locust's own stats round to whole ms).
"""
from __future__ import annotations

import locust  # noqa: F401  (first: gevent monkey-patching before grpc and sockets)

import http.client
import json
import random
import time
import urllib.parse
import uuid

import gevent
import gevent.event
import gevent.pool
import grpc
import grpc.experimental.gevent as grpc_gevent
from locust import User, constant, constant_throughput, task

from dpconform.kubeletapi import dp, dp_grpc

grpc_gevent.init_gevent()   # gRPC's completion queue cooperates with gevent (before any channel)

# Filled in by the runner before users spawn.
TARGET: dict = {}
SETTINGS: dict = {}
LIVE_PODS: set[str] = set()        # uids admitted and not yet removed (cleaned up after the run)
FLIPS: list[float] = []            # time.monotonic() of each health flip (churn)


def fire(env, request_type: str, name: str, t0_ns: int, t1_ns: int, exc: BaseException | None = None,
         length: int = 0) -> None:
    ns = t1_ns - t0_ns
    env.events.request.fire(request_type=request_type, name=name, response_time=ns / 1e6,
                            response_length=length, response=None, exception=exc,
                            context={"t0_ns": t0_ns, "ns": ns})


# -- gRPC -------------------------------------------------------------------------------------------
class LocustInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Times every unary call (perf_counter_ns) and fires one locust request event for it."""

    def __init__(self, environment):
        self.env = environment

    def intercept_unary_unary(self, continuation, client_call_details, request):
        name = client_call_details.method.rsplit("/", 1)[-1]
        exc = None
        length = 0
        t0 = time.perf_counter_ns()
        call = continuation(client_call_details, request)
        try:
            length = call.result().ByteSize()
        except grpc.RpcError as e:
            exc = e
        fire(self.env, "grpc", name, t0, time.perf_counter_ns(), exc, length)
        return call


class GrpcUser(User):
    """Abstract: a client of one gRPC server on a unix socket (`endpoint`), stub in self.stub."""
    abstract = True
    stub_class = None
    endpoint: str = ""

    def __init__(self, environment):
        super().__init__(environment)
        if not self.endpoint or self.stub_class is None:
            raise locust.exception.LocustError("GrpcUser needs endpoint and stub_class")
        self._channel = grpc.insecure_channel(f"unix://{self.endpoint}")
        self.stub = self.stub_class(grpc.intercept_channel(self._channel, LocustInterceptor(environment)))

    def on_stop(self):
        self._channel.close()


class AllocateUser(GrpcUser):
    """plugin_allocate_burst: as the kubelet does per container: GetPreferredAllocation (when the plugin
    advertises it) over the healthy devices, then Allocate of the chosen IDs. Closed loop, no think time."""
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
                    dp.ContainerPreferredAllocationRequest(available_deviceIDs=self.devices, allocation_size=self.k)]),
                    timeout=self.timeout)
                chosen = list(resp.container_responses[0].deviceIDs) if resp.container_responses else []
                if len(chosen) != self.k:   # a wrong answer is the plugin's problem; the kubelet would still allocate
                    chosen = random.sample(self.devices, self.k)
            else:
                chosen = random.sample(self.devices, self.k)
            self.stub.Allocate(dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=chosen)]),
                               timeout=self.timeout)
        except grpc.RpcError:
            pass   # already recorded as a failure by the interceptor


# -- the emulator's HTTP API ------------------------------------------------------------------------
class ApiError(Exception):
    pass


class PodApi:
    """One keep-alive HTTP/1.1 connection to the emulator's API (POST /pods, DELETE /pods/<uid>)."""

    def __init__(self, env, url: str, timeout: float):
        u = urllib.parse.urlsplit(url)
        self.env, self.host, self.port, self.timeout = env, u.hostname, u.port or 80, timeout
        self.conn: http.client.HTTPConnection | None = None

    def _call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        for attempt in (1, 2):   # one reconnect if the server closed an idle keep-alive connection
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                raw = json.dumps(body).encode() if body is not None else None
                self.conn.request(method, path, body=raw, headers={"Content-Type": "application/json"} if raw else {})
                resp = self.conn.getresponse()
                data = resp.read()
                return resp.status, (json.loads(data) if data else {})
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def connect(self) -> None:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self.conn.connect()

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def admit(self, pod: dict, name: str = "admit", tolerate=None) -> bool:
        """POST the pod; fire `name` with the time from submission until its devices were allocated."""
        t0 = time.perf_counter_ns()
        exc = None
        admitted = False
        try:
            status, body = self._call("POST", "/pods", pod)
            if status != 200:
                exc = ApiError(f"HTTP {status}: {body.get('error', body)}")
            elif not body.get("admitted"):
                exc = ApiError(f"rejected: {body.get('reason')}: {str(body.get('message'))[:200]}")
            else:
                admitted = True
                LIVE_PODS.add(pod["uid"])
        except (OSError, http.client.HTTPException, ValueError) as e:
            exc = e
        t1 = time.perf_counter_ns()
        if exc is not None and tolerate is not None and tolerate(exc):
            fire(self.env, "http", f"{name} rejected (health race)", t0, t1)
        else:
            fire(self.env, "http", name, t0, t1, exc)
        return admitted

    def remove(self, uid: str, name: str = "remove") -> None:
        t0 = time.perf_counter_ns()
        exc = None
        try:
            status, body = self._call("DELETE", f"/pods/{uid}")
            if status != 200:
                exc = ApiError(f"HTTP {status}: {body.get('error', body)}")
            LIVE_PODS.discard(uid)
        except (OSError, http.client.HTTPException, ValueError) as e:
            exc = e
        fire(self.env, "http", name, t0, time.perf_counter_ns(), exc)


def pod_body(prefix: str, resource: str, count: int) -> dict:
    uid = str(uuid.uuid4())
    return {"name": f"{prefix}-{uid[:8]}", "namespace": "dpconform-load", "uid": uid,
            "containers": [{"name": "c0", "limits": {resource: count}}]}


class AdmissionBurstUser(User):
    """node_admission_burst: submit `burst_size` pods at once (each on its own connection), record for each
    the time until the node allocated its devices ("admit") and for the whole burst the time until all
    had them ("burst"); then remove them ("remove") and start the next burst."""
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


class ClusterBurstUser(User):
    """cluster_admission_burst: create `burst_size` one-device pods at once through the API server (the
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


BURST_LABEL = "dpconform.io/burst"
LIVE_CLUSTER_PODS: set[str] = set()    # pod names created and not yet deleted (cleaned up after the run)


def cluster_api(target: dict):
    """dpconform.fixtures.cluster.api.ClusterApi on the target's cluster, in the run's namespace."""
    from dpconform.fixtures.cluster.api import ClusterApi
    api = ClusterApi(target["cluster"]["kubeconfig"])
    api.namespace = target["cluster"]["namespace"]
    return api


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


def burst_size(settings: dict, devices: int) -> int:
    """Pods per burst and user: burst_size, fewer when the devices would not suffice for every user."""
    users = max(1, int(settings.get("users", 1)))
    return max(1, min(int(settings["burst_size"]), devices // (users * int(settings.get("devices_per_pod", 1)))))


def strip_names(message: str, names) -> str:
    """A reason's message without the pod names in it, so equal causes count as one error."""
    for n in names:
        message = message.replace(n, "<pod>")
    return message[:200]


def delete_cluster_pods(api, names: list[str], timeout: float) -> None:
    """Delete pods and wait until the API server has none of them. Graceful: the object goes only once
    the kubelet stopped the pod, so its devices are free for the next burst (a forced delete races it)."""
    from dpconform.fixtures.waiting import wait_until
    for n in names:
        api.delete_pod(n, wait=False, grace=None)
        LIVE_CLUSTER_PODS.discard(n)
    if names:
        wait_until(lambda: not api.pod_names(BURST_LABEL) & set(names), timeout, f"{len(names)} burst pods to be gone",
                   interval=0.2)


class ChurnUser(User):
    """churn: admit a one-device pod and remove it again, at a steady rate per user, while the runner
    flips device health. A rejection within race_window_s of a flip is the kubelet's own race (its
    device list lags the plugin by one ListAndWatch message) and is recorded apart, not as a failure."""

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


# -- health flips (churn) ---------------------------------------------------------------------------
def set_health(device: str, health: str, timeout: float = 10.0) -> None:
    """Through the bundled plugin's control socket, else the --health-hook command."""
    from dpconform.fixtures.health_hook import HealthFlipError, flip
    if not (TARGET.get("control") or TARGET.get("health_hook")):
        raise ApiError("no way to flip health: the target has neither a control socket nor a health hook")
    try:
        flip(device, health, timeout=timeout, control=TARGET.get("control"), hook=TARGET.get("health_hook"))
    except HealthFlipError as e:
        raise ApiError(" ".join(str(e).split())[:200]) from None


def flipper(env, devices: list[str], interval: float, stop_event) -> None:
    """Greenlet: Unhealthy, wait, Healthy, wait, ... over `devices` in turn; each flip is a request event."""
    i = 0
    while not stop_event.is_set():
        dev = devices[(i // 2) % len(devices)]
        health = "Unhealthy" if i % 2 == 0 else "Healthy"
        t0 = time.perf_counter_ns()
        exc = None
        try:
            set_health(dev, health)
            FLIPS.append(time.monotonic())
        except Exception as e:  # noqa: BLE001
            exc = e
        fire(env, "control", f"health {health}", t0, time.perf_counter_ns(), exc)
        i += 1
        stop_event.wait(interval)
