"""XID-based GPU health, after NVIDIA k8s-device-plugin's checkHealth (internal/rm/health.go).

One daemon thread owns an NVML event set with nvmlEventTypeXidCriticalError registered on every GPU and
waits on it with a short timeout (so `stop` is noticed within about a second):
  * timeout                          -> nothing happened, wait again
  * any other error from the wait    -> every GPU Unhealthy (NVIDIA: "Error waiting for event ...;
                                        Marking all devices as unhealthy"), then keep waiting
  * XID in the ignored set           -> logged, nothing changes (application errors; the GPU is fine)
  * other XID                        -> the GPU whose UUID the event carries goes Unhealthy; if the
                                        UUID cannot be read, every GPU goes Unhealthy
  * RegisterEvents fails on a GPU    -> that GPU Unhealthy (NVIDIA does the same, NotSupported included)
NVIDIA's plugin never marks a GPU Healthy again. Opt-in `recovery`: also listen for
nvmlEventTypeGpuRecoveryAction; NVML_GPU_RECOVERY_ACTION_NONE marks the GPU Healthy, any other action
(reset, reboot, drain) marks it Unhealthy. The fake NVML's `recover` emits exactly that event; on real
hardware recovery normally means restarting the plugin after a GPU reset.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable, Iterable

from dpconform.kubeletapi import constants

log = logging.getLogger("dpconform.nvml.health")

# NVIDIA's list of application XIDs that leave the GPU healthy.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
ENV_DISABLE_HEALTHCHECKS = "DP_DISABLE_HEALTHCHECKS"


def parse_disable_healthchecks(value: str | None) -> tuple[bool, set[int]]:
    """NVIDIA's DP_DISABLE_HEALTHCHECKS: "all" or anything containing "xids" disables XID checks;
    otherwise a comma-separated list of extra XIDs to ignore. -> (disabled, extra ignored XIDs)."""
    text = (value or "").strip().lower()
    if text == "all" or "xids" in text:
        return True, set()
    extra = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            extra.add(int(part))
        except ValueError:
            log.warning("%s: ignoring %r (not an XID number)", ENV_DISABLE_HEALTHCHECKS, part)
    return False, extra


class HealthMonitor:
    """Watches NVML events for `gpus` (objects with .uuid and .handle) and calls
    set_health(uuid, "Healthy"|"Unhealthy")."""

    def __init__(self, nvml: Any, gpus: Iterable[Any], set_health: Callable[[str, str], Any], *,
                 ignored_xids: Iterable[int] = APPLICATION_XIDS, wait_timeout_ms: int = 1000,
                 recovery: bool = False, error_backoff_s: float = 0.5):
        self.nvml = nvml
        self.gpus = list(gpus)
        self.set_health = set_health
        self.ignored_xids = frozenset(int(x) for x in ignored_xids)
        self.wait_timeout_ms = int(wait_timeout_ms)
        self.recovery = recovery
        self.error_backoff_s = error_backoff_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()   # set once every GPU's events are registered

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="nvml-health", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # -- body -----------------------------------------------------------------------------------
    def _mark(self, uuid: str, health: str, why: str) -> None:
        level = logging.INFO if health == constants.HEALTHY else logging.WARNING
        log.log(level, "GPU %s -> %s: %s", uuid, health, why)
        self.set_health(uuid, health)

    def _mark_all(self, health: str, why: str) -> None:
        for gpu in self.gpus:
            self._mark(gpu.uuid, health, why)

    def _register(self, event_set: Any) -> None:
        nvml = self.nvml
        xid_mask = int(nvml.nvmlEventTypeXidCriticalError)
        recovery_bit = int(getattr(nvml, "nvmlEventTypeGpuRecoveryAction", 0)) if self.recovery else 0
        for gpu in self.gpus:
            masks = [xid_mask | recovery_bit, xid_mask] if recovery_bit else [xid_mask]
            error = None
            for mask in masks:
                try:
                    nvml.nvmlDeviceRegisterEvents(gpu.handle, mask, event_set)
                    error = None
                    if mask != masks[0]:
                        log.warning("GPU %s: recovery events not supported; it will not recover", gpu.uuid)
                    break
                except nvml.NVMLError as e:
                    error = e
            if error is not None:
                if isinstance(error, nvml.NVMLError_NotSupported):
                    log.warning("GPU %s is too old to support health checking", gpu.uuid)
                self._mark(gpu.uuid, constants.UNHEALTHY, f"cannot register XID events: {error}")

    def run(self) -> None:
        nvml = self.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as e:
            self._mark_all(constants.UNHEALTHY, f"cannot create an NVML event set: {e}")
            self.ready.set()
            return
        try:
            self._register(event_set)
            self.ready.set()
            log.info("XID health checks running on %d GPU(s); ignoring XIDs %s",
                     len(self.gpus), sorted(self.ignored_xids))
            while not self._stop.is_set():
                try:
                    event = nvml.nvmlEventSetWait(event_set, self.wait_timeout_ms)
                except nvml.NVMLError_Timeout:
                    continue
                except nvml.NVMLError as e:
                    self._mark_all(constants.UNHEALTHY, f"error waiting for NVML events: {e}")
                    self._stop.wait(self.error_backoff_s)   # a persistent error must not spin
                    continue
                self._handle(event)
        finally:
            self.ready.set()
            try:
                nvml.nvmlEventSetFree(event_set)
            except nvml.NVMLError:
                pass

    def _event_uuid(self, event: Any) -> str | None:
        try:
            uuid = self.nvml.nvmlDeviceGetUUID(event.device)
        except self.nvml.NVMLError as e:
            log.warning("cannot read the UUID of event %r: %s", event, e)
            return None
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)

    def _handle(self, event: Any) -> None:
        nvml = self.nvml
        etype, data = int(event.eventType), int(event.eventData)
        if etype == int(nvml.nvmlEventTypeXidCriticalError):
            if data in self.ignored_xids:
                log.info("skipping XID %d (application error, the GPU stays healthy)", data)
                return
            uuid = self._event_uuid(event)
            if uuid is None:
                self._mark_all(constants.UNHEALTHY, f"XID {data} on a GPU whose UUID NVML cannot tell")
                return
            if not any(g.uuid == uuid for g in self.gpus):
                log.warning("XID %d on unknown GPU %s: ignored", data, uuid)
                return
            self._mark(uuid, constants.UNHEALTHY, f"XidCriticalError: Xid={data}")
            return
        if self.recovery and etype == int(getattr(nvml, "nvmlEventTypeGpuRecoveryAction", -1)):
            uuid = self._event_uuid(event)
            if uuid is None or not any(g.uuid == uuid for g in self.gpus):
                return
            if data == int(nvml.NVML_GPU_RECOVERY_ACTION_NONE):
                self._mark(uuid, constants.HEALTHY, "GPU recovery action NONE: recovered")
            else:
                self._mark(uuid, constants.UNHEALTHY, f"GPU recovery action {data} required")
            return
        log.info("skipping event type 0x%x data %d", etype, data)


def disabled_from_env(environ: dict | None = None) -> tuple[bool, set[int]]:
    return parse_disable_healthchecks((environ if environ is not None else os.environ).get(ENV_DISABLE_HEALTHCHECKS))
