"""The fake-GPU DRA driver: fake GPUs published as a ResourceSlice, claims prepared as CDI spec files.

    driver = FakeGpuDriver(cfg)      # cfg: dpconform.plugin_under_test.fakegpu_dra.cli.Config
    driver.run(stop_event)           # serve, publish, register; returns when stop_event is set

What a kubelet sees, in this order (a driver must serve before it registers):
  1. DRA service (v1.DRAPlugin and v1beta1.DRAPlugin, plus v1alpha1.DRAResourceHealth: a snapshot on each
     change and every 10 s) on
     PLUGIN_DIR/dra.sock;
  2. one ResourceSlice for its node (pool = node name, devices gpu-0..N-1 with attributes index and uuid);
  3. the registration service (pluginregistration.Registration) on REGISTRY_DIR/<driver>-reg.sock:
     GetInfo -> type DRAPlugin, its name, the DRA endpoint, ["v1.DRAPlugin", "v1beta1.DRAPlugin"].
NodePrepareResources reads each claim from the API server (the request carries only namespace, name and
UID), checks the UID and that it is allocated, answers the devices its allocation names for this driver
with one CDI device per device, written as CDI_DIR/<driver>-<claim uid>.json. Prepared claims are kept in
PLUGIN_DIR/prepared.json, so a restarted driver still knows them (prepare again answers the same,
unprepare removes the spec). Every claim gets its own answer or error; unknown claims unprepare fine.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from concurrent import futures

import grpc

from dpconform.kubeletapi import dp, dra, dra_grpc, drab, drab_grpc, drah, drah1, drah1_grpc, drah_grpc, reg, reg_grpc
from dpconform.plugin_under_test.kit import DeviceState

log = logging.getLogger("dpconform.fakegpu_dra")

API_TIMEOUT_S = 10
CDI_VENDOR_CLASS = "dpconform.io/gpu"
SHARED_CDI_DEVICE = "common"           # --shared-cdi-device: in every claim's answer, CDI_DIR/<driver>-common.json
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"   # the scheduler's claims for an extended resource
SERVICES = ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
# listed too: from 1.37 the kubelet opens the health stream only for a driver that lists a health service
HEALTH_SERVICES = ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"]
HEALTH_RESEND_S = 10.0     # the health stream repeats its snapshot this often (the kubelet's timeout is 30 s)


def device_names(n: int) -> list[str]:
    return [f"gpu-{i}" for i in range(n)]


def device_uuid(driver: str, node: str, name: str) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{driver}/{node}/{name}"))


def slice_body(driver: str, node: str, names: list[str], generation: int = 1) -> dict:
    devices = [{"name": n, "attributes": {"index": {"int": i}, "uuid": {"string": device_uuid(driver, node, n)}}}
               for i, n in enumerate(names)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node, "devices": devices,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1}}}


class Prepared:
    """Prepared claims by UID, mirrored in a JSON file (unless the driver forgets, defect forget-prepared)."""

    def __init__(self, path: str, persist: bool):
        self.path = path
        self.persist = persist
        self.lock = threading.Lock()
        self.claims: dict[str, dict] = {}
        if persist and os.path.exists(path):
            with open(path) as f:
                self.claims = json.load(f)

    def save(self) -> None:
        if not self.persist:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.claims, f)
        os.replace(tmp, self.path)


class ClaimError(Exception):
    """This claim cannot be prepared: its per-claim error."""


class DraServicer:
    """NodePrepareResources / NodeUnprepareResources for one API version (`m`: dra or drab messages)."""

    def __init__(self, driver: "FakeGpuDriver", m):
        self.d = driver
        self.m = m

    def NodePrepareResources(self, request, context):
        d, m = self.d, self.m
        if d.cfg.prepare_latency_ms:
            time.sleep(d.cfg.prepare_latency_ms / 1000)
        out = m.NodePrepareResourcesResponse()
        claims = list(request.claims)
        if d.has("drop-claim") and len(claims) > 1:
            claims = claims[:-1]
        for c in claims:
            try:
                devices = d.prepare(c, context)
            except ClaimError as e:
                if d.has("fail-whole-request"):
                    context.abort(grpc.StatusCode.INTERNAL, f"prepare failed: {e}")
                out.claims[c.uid].error = str(e)
                continue
            answer = out.claims[c.uid]
            for dev in devices:
                answer.devices.append(m.Device(request_names=dev["request_names"], pool_name=dev["pool_name"],
                                               device_name=dev["device_name"], cdi_device_ids=dev["cdi_device_ids"]))
        return out

    def NodeUnprepareResources(self, request, context):
        out = self.m.NodeUnprepareResourcesResponse()
        for c in request.claims:
            try:
                self.d.unprepare(c)
                out.claims[c.uid].error = ""
            except ClaimError as e:
                out.claims[c.uid].error = str(e)
        return out


class HealthServicer:
    """DRAResourceHealth of one API version (`api`: the v1alpha1 or the v1 stubs, the same messages)."""

    def __init__(self, driver: "FakeGpuDriver", api):
        self.d, self.api = driver, api

    def _snapshot(self):
        d = self.d
        now = int(time.time())
        devs = d.health.snapshot()
        unhealthy = {x.ID for x in devs if x.health != "Healthy"}
        if d.has("health-wrong-device") and unhealthy:            # defect health-wrong-device
            names = [x.ID for x in devs]
            unhealthy = {names[(names.index(u) + 1) % len(names)] for u in unhealthy}
        api = self.api
        return api.NodeWatchResourcesResponse(devices=[
            api.DeviceHealth(device=api.DeviceIdentifier(pool_name=d.cfg.node_name, device_name=x.ID),
                             health=api.UNHEALTHY if x.ID in unhealthy else api.HEALTHY, last_updated_time=now)
            for x in devs])

    def NodeWatchResources(self, request, context):
        state = self.d.health
        ended = state.ended_by(context)
        version = state.version
        yield self._snapshot()
        sent = time.monotonic()
        while not ended.is_set() and not self.d.stopping.is_set():
            now = state.wait_changed(version, timeout=0.5, until=ended)
            if ended.is_set():
                break
            # on a change, and every HEALTH_RESEND_S: the kubelet reads a device unreported for 30 s as Unknown
            if now != version or time.monotonic() - sent >= HEALTH_RESEND_S:
                version = now
                sent = time.monotonic()
                yield self._snapshot()


class RegistrationServicer(reg_grpc.RegistrationServicer):
    def __init__(self, driver: "FakeGpuDriver"):
        self.d = driver
        self.infos = 0

    def GetInfo(self, request, context):
        d = self.d
        self.infos += 1
        if d.has("single-getinfo") and self.infos > 1:               # defect single-getinfo
            context.abort(grpc.StatusCode.UNAVAILABLE, "GetInfo answered once already")
        health = [] if d.has("unlisted-health") else HEALTH_SERVICES   # defect unlisted-health
        versions = SERVICES + health
        if d.has("unknown-version"):
            versions = ["v2.DRAPlugin"] + health
        elif d.has("unserved-version"):
            versions = ["v1beta1.DRAPlugin", "v1.DRAPlugin"] + health
        name = d.cfg.driver_name + ("-other" if d.has("wrong-name") else "")
        return reg.PluginInfo(type="CSIPlugin" if d.has("wrong-type") else "DRAPlugin", name=name,
                              endpoint=d.dra_socket, supported_versions=versions)

    def NotifyRegistrationStatus(self, request, context):
        d = self.d
        d.registration_status.append((request.plugin_registered, request.error))
        if request.plugin_registered:
            log.info("registered with the kubelet")
        else:
            log.error("the kubelet refused the registration: %s", request.error)
        if d.has("notify-error"):
            context.abort(grpc.StatusCode.INTERNAL, "cannot handle the registration status")
        return reg.RegistrationStatusResponse()


class FakeGpuDriver:
    def __init__(self, cfg):
        self.cfg = cfg
        self.names = device_names(cfg.devices)
        self.health = DeviceState([dp.Device(ID=n, health="Healthy") for n in self.names])
        os.makedirs(cfg.plugin_dir, exist_ok=True)
        os.makedirs(cfg.registry_dir, exist_ok=True)
        os.makedirs(cfg.cdi_dir, exist_ok=True)
        self.prepared = Prepared(os.path.join(cfg.plugin_dir, "prepared.json"), not self.has("forget-prepared"))
        self.stopping = threading.Event()
        self.registration_status: list[tuple[bool, str]] = []
        self._race_buffer: list[dict] = []                            # defect prepare-race
        self._publish_lock = threading.Lock()                         # one slice update at a time
        self._api = None

    def has(self, defect: str) -> bool:
        return defect in self.cfg.defects

    @property
    def dra_socket(self) -> str:
        return os.path.join(self.cfg.plugin_dir, "dra.sock")

    @property
    def reg_socket(self) -> str:
        return os.path.join(self.cfg.registry_dir, f"{self.cfg.driver_name}-reg.sock")

    # ----- API server
    def resource_api(self):
        if self._api is None:
            from kubernetes import client, config
            if self.cfg.kubeconfig:
                api = config.new_client_from_config(config_file=self.cfg.kubeconfig)
            else:
                config.load_incluster_config()
                api = client.ApiClient()
            self._api = client.ResourceV1Api(api)
        return self._api

    def keep_published(self, stop: threading.Event) -> None:
        """Re-create the ResourceSlice when it goes (the kubelet deletes the node's slices when it starts),
        checked every second, as kubeletplugin's slice controller does by its informer."""
        from kubernetes.client.rest import ApiException
        name = slice_body(self.cfg.driver_name, self.cfg.node_name, [])["metadata"]["name"]
        while not stop.wait(1.0):
            try:
                self.resource_api().read_resource_slice(name, _request_timeout=API_TIMEOUT_S)
            except ApiException as e:
                if e.status == 404:
                    log.info("ResourceSlice %s is gone: publishing it again", name)
                    self.publish()
                else:
                    log.warning("read ResourceSlice %s: %s %s", name, e.status, e.reason)
            except Exception as e:  # noqa: BLE001 - the API server restarting: try again next second
                log.warning("read ResourceSlice %s: %s", name, e)

    def publish(self) -> None:
        from kubernetes.client.rest import ApiException
        if self.has("no-slices"):
            return
        names = self.names
        if self.has("unpublish-prepared"):                            # defect unpublish-prepared
            with self.prepared.lock:
                in_use = {d["device_name"] for p in self.prepared.claims.values() for d in p["devices"]}
            names = [n for n in names if n not in in_use]
        body = slice_body(self.cfg.driver_name, self.cfg.node_name, names)
        if self.has("incomplete-pool"):                               # defect incomplete-pool
            body["spec"]["pool"]["resourceSliceCount"] = 2
        api = self.resource_api()
        with self._publish_lock:
            try:
                api.create_resource_slice(body, _request_timeout=API_TIMEOUT_S)
            except ApiException as e:
                if e.status != 409:
                    raise
                current = api.read_resource_slice(body["metadata"]["name"], _request_timeout=API_TIMEOUT_S)
                body["metadata"]["resourceVersion"] = current.metadata.resource_version
                body["spec"]["pool"]["generation"] = current.spec.pool.generation + 1
                api.replace_resource_slice(body["metadata"]["name"], body, _request_timeout=API_TIMEOUT_S)
        log.info("published ResourceSlice %s: %d devices", body["metadata"]["name"], len(names))

    # ----- prepare / unprepare
    def cdi_path(self, claim_uid: str) -> str:
        return os.path.join(self.cfg.cdi_dir, f"{self.cfg.driver_name}-{claim_uid}.json")

    def prepare(self, c, context=None) -> list[dict]:
        from kubernetes.client.rest import ApiException
        with self.prepared.lock:
            known = self.prepared.claims.get(c.uid)
        if known is not None:
            if self.has("prepare-not-idempotent"):
                raise ClaimError(f"claim {c.namespace}/{c.name} is already prepared")
            return known["devices"]
        try:
            claim = self.resource_api().read_namespaced_resource_claim(c.name, c.namespace,
                                                                       _request_timeout=API_TIMEOUT_S)
        except ApiException as e:
            raise ClaimError(f"claim {c.namespace}/{c.name}: read from the API server: {e.status} {e.reason}") from None
        while claim.metadata.uid != c.uid and self.has("wait-for-uid"):     # defect wait-for-uid
            # waits for "its cache" to catch up with the kubelet's UID: a replaced claim's never comes back
            if self.stopping.wait(0.2) or (context is not None and not context.is_active()):
                raise ClaimError(f"claim {c.namespace}/{c.name}: gave up waiting for UID {c.uid}")
            try:
                claim = self.resource_api().read_namespaced_resource_claim(c.name, c.namespace,
                                                                           _request_timeout=API_TIMEOUT_S)
            except ApiException as e:
                raise ClaimError(f"claim {c.namespace}/{c.name}: read from the API server: {e.status} {e.reason}") from None
        if claim.metadata.uid != c.uid and not self.has("no-uid-check"):
            raise ClaimError(f"claim {c.namespace}/{c.name}: UID {c.uid} was replaced by {claim.metadata.uid}")
        if self.has("template-claims-only") and EXTENDED_RESOURCE_CLAIM in (claim.metadata.annotations or {}):
            raise ClaimError(f"claim {c.namespace}/{c.name} is not one of ours: not from a ResourceClaimTemplate "
                             "or a user")                              # defect template-claims-only
        alloc = claim.status.allocation if claim.status else None
        if alloc is None or alloc.devices is None:
            raise ClaimError(f"claim {c.namespace}/{c.name} ({c.uid}) is not allocated")
        mine = [r for r in alloc.devices.results or [] if r.driver == self.cfg.driver_name]
        devices = []
        for r in mine:
            if r.pool != self.cfg.node_name or r.device not in self.names:
                raise ClaimError(f"claim {c.namespace}/{c.name}: device {r.pool}/{r.device} is not on this node")
            name = self.names[0] if self.has("wrong-device") else r.device
            shared = [f"{CDI_VENDOR_CLASS}={SHARED_CDI_DEVICE}"] if self.cfg.shared_cdi_device else []
            devices.append({"request_names": [r.request], "pool_name": r.pool, "device_name": name,
                            "cdi_device_ids": [*shared, f"{CDI_VENDOR_CLASS}={c.uid}-{name}"]})
        if self.has("prepare-race"):                                  # defect prepare-race
            self._race_buffer[:] = devices
            time.sleep(0.05)
            devices = [dict(x) for x in self._race_buffer]
        if not self.has("missing-cdi"):
            self.write_cdi(c.uid, devices)
        with self.prepared.lock:
            self.prepared.claims[c.uid] = {"namespace": c.namespace, "name": c.name, "devices": devices}
            self.prepared.save()
        if self.has("unpublish-prepared") and devices:              # defect unpublish-prepared
            self.publish()                  # "only free devices", as a device plugin's ListAndWatch would
        log.info("prepared claim %s/%s (%s): %s", c.namespace, c.name, c.uid,
                 ",".join(d["device_name"] for d in devices) or "no devices of this driver")
        return devices

    def write_shared_cdi(self) -> None:
        """--shared-cdi-device: the driver-wide CDI device, written at start and kept while the driver runs."""
        spec = {"cdiVersion": "0.6.0", "kind": CDI_VENDOR_CLASS,
                "devices": [{"name": SHARED_CDI_DEVICE,
                             "containerEdits": {"env": [f"DPCONFORM_DRA_DRIVER={self.cfg.driver_name}"]}}]}
        self._write_spec(self.cdi_path(SHARED_CDI_DEVICE), spec)

    def _write_spec(self, path: str, spec: dict) -> None:
        with open(path + ".tmp", "w") as f:
            json.dump(spec, f, indent=1)
        os.replace(path + ".tmp", path)

    def write_cdi(self, claim_uid: str, devices: list[dict]) -> None:
        spec = {"cdiVersion": "0.6.0", "kind": CDI_VENDOR_CLASS,
                "devices": [{"name": f"{claim_uid}-{d['device_name']}",
                             "containerEdits": {"env": [f"DPCONFORM_GPU={d['device_name']}",
                                                        f"DPCONFORM_GPU_UUID={device_uuid(self.cfg.driver_name, self.cfg.node_name, d['device_name'])}"]}}
                            for d in devices]}
        self._write_spec(self.cdi_path(claim_uid), spec)

    def unprepare(self, c) -> None:
        with self.prepared.lock:
            known = self.prepared.claims.pop(c.uid, None)
            self.prepared.save()
        if known is not None and known["devices"] and self.has("unpublish-prepared"):
            self.publish()                                            # defect unpublish-prepared: free again
        if known is None and self.has("unprepare-unknown-error"):
            raise ClaimError(f"claim {c.namespace}/{c.name} ({c.uid}) is not prepared")
        if known is not None and not self.has("cdi-leak"):
            try:
                os.unlink(self.cdi_path(c.uid))
            except FileNotFoundError:
                pass
        log.info("unprepared claim %s/%s (%s)%s", c.namespace, c.name, c.uid, "" if known else ": not known")

    # ----- serving
    def _server(self, path: str, add) -> grpc.Server:
        if os.path.lexists(path):
            os.unlink(path)          # left by a killed instance
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        add(server)
        server.add_insecure_port("unix:" + path)
        server.start()
        return server

    def _add_dra(self, server) -> None:
        dra_grpc.add_DRAPluginServicer_to_server(DraServicer(self, dra), server)
        if not self.has("unserved-version"):                       # defect unserved-version
            drab_grpc.add_DRAPluginServicer_to_server(DraServicer(self, drab), server)
        drah_grpc.add_DRAResourceHealthServicer_to_server(HealthServicer(self, drah), server)
        drah1_grpc.add_DRAResourceHealthServicer_to_server(HealthServicer(self, drah1), server)

    def run(self, stop: threading.Event) -> int:
        servers: list[tuple[grpc.Server, str]] = []
        try:
            registrar = RegistrationServicer(self)
            if self.cfg.shared_cdi_device:
                self.write_shared_cdi()
            if self.has("register-before-serving"):
                servers.append((self._server(self.reg_socket,
                                             lambda s: reg_grpc.add_RegistrationServicer_to_server(registrar, s)),
                                self.reg_socket))
                if stop.wait(3):
                    return 0
            servers.append((self._server(self.dra_socket, self._add_dra), self.dra_socket))
            self.publish()
            if not self.has("publish-once"):                            # defect publish-once
                threading.Thread(target=self.keep_published, args=(self.stopping,), daemon=True,
                                 name="slices").start()
            if not self.has("register-before-serving"):
                servers.append((self._server(self.reg_socket,
                                             lambda s: reg_grpc.add_RegistrationServicer_to_server(registrar, s)),
                                self.reg_socket))
            log.info("serving %s, registration socket %s", self.dra_socket, self.reg_socket)
            stop.wait()
            return 0
        finally:
            self.stopping.set()
            for server, path in reversed(servers):   # registration first: the kubelet sees it go
                server.stop(grace=0.5).wait(2)
                if os.path.lexists(path):
                    os.unlink(path)

