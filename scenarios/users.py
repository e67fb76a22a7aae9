"""What the scenarios' locust users share (each scenario's user class is in its module, dpconform.scenarios.
load). Imported only by dpconform.scenarios.runner's process: importing locust monkey-patches the whole
process with gevent.

Shape of locust's examples/grpc: an abstract GrpcUser whose client interceptor fires a request event
per unary call. Every request event carries context={"t0_ns", "ns"}: our own perf_counter_ns timing,
which the runner's recorder keeps at full resolution (locust's own stats round to whole ms).
"""
from __future__ import annotations

import locust  # noqa: F401  (first: gevent monkey-patching before grpc and sockets)

import http.client
import json
import time
import urllib.parse
import uuid

import grpc
import grpc.experimental.gevent as grpc_gevent
from locust import User

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


BURST_LABEL = "dpconform.io/burst"
LIVE_CLUSTER_PODS: set[str] = set()    # pod names created and not yet deleted (cleaned up after the run)


def cluster_api(target: dict):
    """dpconform.fixtures.cluster.api.ClusterApi on the target's cluster, in the run's namespace."""
    from dpconform.fixtures.cluster.api import ClusterApi
    api = ClusterApi(target["cluster"]["kubeconfig"])
    api.namespace = target["cluster"]["namespace"]
    return api


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
