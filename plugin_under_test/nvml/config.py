"""The NVML plugin's configuration: one object with defaults; the YAML file, env vars and CLI flags
only map onto it (precedence: defaults < --config file < env < flags).

YAML (NVIDIA's `version: v1` layout; the dpconform extensions sit next to NVIDIA's keys in `flags`):

    version: v1
    flags:
      failOnInitError: true          # NVML init failure: exit non-zero (true) or run with no GPUs (false)
      deviceListStrategy: envvar     # or volume-mounts, cdi-annotations, cdi-cri, or a list of them
      deviceIDStrategy: uuid         # or index
      plugin:                        # NVIDIA also accepts the two keys above here
        deviceListStrategy: envvar
        deviceIDStrategy: uuid
      # dpconform extensions
      nvml: real                     # real | fake | fake:/path/topology.yaml
      control: /run/dpconform/nvml-fake.sock   # fake NVML control socket (fake only)
      pluginDir: /var/lib/kubelet/device-plugins
      resourceName: nvidia.com/gpu
      disableHealthChecks: ""        # like DP_DISABLE_HEALTHCHECKS: all | xids | "48,79" (extra ignored XIDs)
      ignoredXids: []                # more XIDs to ignore on top of NVIDIA's 13,31,43,45,68,109
      healthRecovery: false          # listen for GPU recovery events (NVIDIA's plugin never recovers)
      eventWaitTimeoutMs: 1000
      logLevel: INFO
Env: FAIL_ON_INIT_ERROR, DEVICE_LIST_STRATEGY, DEVICE_ID_STRATEGY (NVIDIA's names), DP_DISABLE_HEALTHCHECKS,
DP_PLUGIN_DIR, DPCONFORM_NVML (backend).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

import yaml

from dpconform.kubeletapi import constants

from .strategies import ID_STRATEGIES, normalize_strategies

RESOURCE_NAME = "nvidia.com/gpu"


class ConfigError(ValueError):
    pass


def default_plugin_dir() -> str:
    return os.environ.get("DP_PLUGIN_DIR") or constants.DEVICE_PLUGIN_PATH.rstrip("/")


@dataclass
class Config:
    fail_on_init_error: bool = True
    device_list_strategy: list[str] = field(default_factory=lambda: ["envvar"])
    device_id_strategy: str = "uuid"
    nvml: str = "real"
    control: str | None = None
    plugin_dir: str = field(default_factory=default_plugin_dir)
    resource_name: str = RESOURCE_NAME
    disable_health_checks: str = ""
    ignored_xids: list[int] = field(default_factory=list)
    health_recovery: bool = False
    event_wait_timeout_ms: int = 1000
    log_level: str = "INFO"

    def validate(self) -> "Config":
        try:
            self.device_list_strategy = normalize_strategies(self.device_list_strategy)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.device_id_strategy not in ID_STRATEGIES:
            raise ConfigError(f"deviceIDStrategy {self.device_id_strategy!r}: choose from {', '.join(ID_STRATEGIES)}")
        try:
            self.ignored_xids = [int(x) for x in self.ignored_xids]
            self.event_wait_timeout_ms = int(self.event_wait_timeout_ms)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"ignoredXids / eventWaitTimeoutMs must be integers: {e}") from None
        if self.event_wait_timeout_ms <= 0:
            raise ConfigError("eventWaitTimeoutMs must be positive")
        return self


# YAML key (in `flags`, or `flags.plugin`) -> Config attribute
YAML_KEYS = {
    "failOnInitError": "fail_on_init_error",
    "deviceListStrategy": "device_list_strategy",
    "deviceIDStrategy": "device_id_strategy",
    "nvml": "nvml",
    "control": "control",
    "pluginDir": "plugin_dir",
    "resourceName": "resource_name",
    "disableHealthChecks": "disable_health_checks",
    "ignoredXids": "ignored_xids",
    "healthRecovery": "health_recovery",
    "eventWaitTimeoutMs": "event_wait_timeout_ms",
    "logLevel": "log_level",
}
ENV_KEYS = {
    "FAIL_ON_INIT_ERROR": "fail_on_init_error",
    "DEVICE_LIST_STRATEGY": "device_list_strategy",
    "DEVICE_ID_STRATEGY": "device_id_strategy",
    "DP_DISABLE_HEALTHCHECKS": "disable_health_checks",
    "DPCONFORM_NVML": "nvml",
}
_BOOLS = {f.name for f in fields(Config) if f.type in ("bool", bool)}


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{key}: expected true or false, got {value!r}")


def _set(cfg: Config, attr: str, value: Any, key: str) -> None:
    if attr in _BOOLS:
        value = _bool(value, key)
    setattr(cfg, attr, value)


def apply_yaml(cfg: Config, text: str, source: str = "config") -> None:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping")
    version = data.get("version", "v1")
    if version != "v1":
        raise ConfigError(f"{source}: unsupported config version {version!r} (expected v1)")
    flags = data.get("flags") or {}
    if not isinstance(flags, dict):
        raise ConfigError(f"{source}: 'flags' must be a mapping")
    sections = [flags, flags.get("plugin") or {}]
    for section in sections:
        for key, value in section.items():
            if key == "plugin" and section is flags:
                continue
            attr = YAML_KEYS.get(key)
            if attr is None:
                # NVIDIA keys we do not implement (migStrategy, nvidiaDriverRoot, passDeviceSpecs, ...)
                continue
            _set(cfg, attr, value, key)


def apply_env(cfg: Config, environ: dict | None = None) -> None:
    environ = os.environ if environ is None else environ
    for key, attr in ENV_KEYS.items():
        if environ.get(key):
            _set(cfg, attr, environ[key], key)


def load(path: str | None = None, overrides: dict[str, Any] | None = None,
         environ: dict | None = None) -> Config:
    cfg = Config()
    if path:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"--config {path}: {e.strerror or e}") from None
        apply_yaml(cfg, text, path)
    apply_env(cfg, environ)
    for attr, value in (overrides or {}).items():
        if value is not None:
            _set(cfg, attr, value, attr)
    return cfg.validate()
