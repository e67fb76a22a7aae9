"""How an Allocate response hands GPUs to the container, per NVIDIA's deviceListStrategy.

  envvar           NVIDIA_VISIBLE_DEVICES=<id>,<id>,...
  volume-mounts    NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices, and one mount per GPU:
                   host /dev/null -> container /var/run/nvidia-container-devices/<id>
                   (the nvidia-container-runtime reads the list from the mount names, so an unprivileged
                   pod cannot widen it by setting the env var itself)
  cdi-annotations  annotation cdi.k8s.io/nvidia-device-plugin_<response id> = nvidia.com/gpu=<id>,...
  cdi-cri          the CDI device names in ContainerAllocateResponse.cdi_devices
Several strategies may be combined (a list), as NVIDIA allows. <id> follows deviceIDStrategy:
`uuid` (default) or `index`.

Written from memory of NVIDIA's k8s-device-plugin, not checked against its source: the volume-mounts
paths (/dev/null -> /var/run/nvidia-container-devices/<id>), the CDI annotation key
(cdi.k8s.io/nvidia-device-plugin_<uuid>), cdi-cri filling cdi_devices, and that CDI-only modes do not
set NVIDIA_VISIBLE_DEVICES=void. Verify before relying on them on a real GPU node.
"""
from __future__ import annotations

import uuid as uuidlib
from typing import Callable, Iterable, Sequence

from dpconform.kubeletapi import dp

STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
ID_STRATEGIES = ("uuid", "index")
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"
VOLUME_MOUNTS_HOST_PATH = "/dev/null"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
CDI_PLUGIN_NAME = "nvidia-device-plugin"
CDI_KIND = "nvidia.com/gpu"


def normalize_strategies(value: str | Sequence[str] | None) -> list[str]:
    if value is None or value == "":
        return ["envvar"]
    items = [v.strip() for v in (value.split(",") if isinstance(value, str) else value) if str(v).strip()]
    bad = [v for v in items if v not in STRATEGIES]
    if bad or not items:
        raise ValueError(f"deviceListStrategy {value!r}: choose from {', '.join(STRATEGIES)}")
    return list(dict.fromkeys(items))


def container_response(device_ids: Sequence[str], *, strategies: Iterable[str], id_of: Callable[[str], str],
                       response_id: Callable[[], str] = lambda: str(uuidlib.uuid4())) -> dp.ContainerAllocateResponse:
    """device_ids: the kubelet's IDs (UUIDs); id_of maps one to the ID the runtime sees (uuid or index)."""
    ids = [id_of(d) for d in device_ids]
    resp = dp.ContainerAllocateResponse()
    strategies = list(strategies)
    if "envvar" in strategies:
        resp.envs[VISIBLE_DEVICES_ENV] = ",".join(ids)
    if "volume-mounts" in strategies:
        resp.envs[VISIBLE_DEVICES_ENV] = VOLUME_MOUNTS_ROOT
        for i in ids:
            resp.mounts.append(dp.Mount(host_path=VOLUME_MOUNTS_HOST_PATH,
                                        container_path=f"{VOLUME_MOUNTS_ROOT}/{i}"))
    qualified = [f"{CDI_KIND}={i}" for i in ids]
    if "cdi-annotations" in strategies:
        key = f"{CDI_ANNOTATION_PREFIX}{CDI_PLUGIN_NAME}_{response_id()}"
        resp.annotations[key] = ",".join(qualified)
    if "cdi-cri" in strategies:
        resp.cdi_devices.extend(dp.CDIDevice(name=q) for q in qualified)
    return resp
