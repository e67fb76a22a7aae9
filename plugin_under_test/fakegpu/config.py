"""Fake-GPU plugin configuration: one dataclass with defaults; the YAML file and the CLI flags map onto it.

YAML keys (all optional): resource, devices, numa_nodes, devices_per_numa (list of counts per node),
id_scheme (index|uuid), pre_start_required, get_preferred_allocation_available, allocate_latency_ms,
mounts (bool), cdi (bool), annotations (bool or mapping), plugin_dir, dev_dir, control, defects (list),
log_level.
"""
from __future__ import annotations

import dataclasses
import os
import uuid


from dpconform.plugin_under_test.fakegpu.defects import DEFECTS

DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
UUID_NAMESPACE = uuid.UUID("5b0c3a6e-7d0e-4c55-9a63-2f4f3b7d9a10")


class ConfigError(Exception):
    """A config problem, worded for one line of output."""


@dataclasses.dataclass
class Config:
    resource: str = "dpconform.io/fakegpu"
    devices: int = 4
    numa_nodes: int = 2
    devices_per_numa: list[int] | None = None
    id_scheme: str = "index"
    pre_start_required: bool = False
    get_preferred_allocation_available: bool = True
    allocate_latency_ms: float = 0.0
    mounts: bool = False
    cdi: bool = False
    annotations: bool | dict[str, str] = False
    plugin_dir: str = dataclasses.field(default_factory=lambda: os.environ.get("DP_PLUGIN_DIR") or DEFAULT_PLUGIN_DIR)
    dev_dir: str | None = None
    control: str | None = None
    defects: list[str] = dataclasses.field(default_factory=list)
    log_level: str = "INFO"

    def has(self, defect: str) -> bool:
        return defect in self.defects

    # -- derived ----------------------------------------------------------------------------------
    def numa_layout(self) -> list[int | None]:
        """NUMA node of each device index (None: no topology)."""
        if self.devices_per_numa is not None:
            return [node for node, count in enumerate(self.devices_per_numa) for _ in range(count)]
        if self.numa_nodes == 0:
            return [None] * self.devices
        base, extra = divmod(self.devices, self.numa_nodes)
        sizes = [base + (1 if node < extra else 0) for node in range(self.numa_nodes)]
        return [node for node, count in enumerate(sizes) for _ in range(count)]

    def device_id(self, index: int) -> str:
        if self.id_scheme == "uuid":
            return "GPU-" + str(uuid.uuid5(UUID_NAMESPACE, f"fakegpu/{index}"))
        return f"fakegpu-{index}"

    def validate(self) -> None:
        if self.id_scheme not in ("index", "uuid"):
            raise ConfigError(f"id_scheme must be 'index' or 'uuid', not {self.id_scheme!r}")
        if self.devices < 0:
            raise ConfigError(f"devices must be >= 0, not {self.devices}")
        if not 0 <= self.numa_nodes <= 64:
            raise ConfigError(f"numa_nodes must be between 0 and 64, not {self.numa_nodes}")
        if self.devices_per_numa is not None:
            if any(c < 0 for c in self.devices_per_numa):
                raise ConfigError(f"devices_per_numa counts must be >= 0: {self.devices_per_numa}")
            if sum(self.devices_per_numa) != self.devices:
                raise ConfigError(f"devices_per_numa {self.devices_per_numa} sums to "
                                  f"{sum(self.devices_per_numa)}, but devices is {self.devices}")
        if self.allocate_latency_ms < 0:
            raise ConfigError(f"allocate_latency_ms must be >= 0, not {self.allocate_latency_ms}")
        unknown = [d for d in self.defects if d not in DEFECTS]
        if unknown:
            raise ConfigError(f"unknown defect(s) {', '.join(unknown)}; known: {', '.join(DEFECTS)}")
        if self.control:
            if os.path.realpath(os.path.dirname(os.path.abspath(self.control))) == os.path.realpath(self.plugin_dir):
                raise ConfigError(f"control socket {self.control} must not be in the plugin dir "
                                  "(a kubelet restart deletes every socket there)")
            if len(os.path.abspath(self.control).encode()) > 107:
                raise ConfigError(f"control socket path too long for a unix socket: {self.control}")


_TYPES = {f.name: f.type for f in dataclasses.fields(Config)}


def _check(key: str, value):
    """Type-check one YAML value; return it normalised."""
    def want(ok: bool, what: str):
        if not ok:
            raise ConfigError(f"{key}: expected {what}, got {type(value).__name__} {value!r}")
    if key in ("devices", "numa_nodes"):
        want(isinstance(value, int) and not isinstance(value, bool), "an integer")
    elif key == "allocate_latency_ms":
        want(isinstance(value, (int, float)) and not isinstance(value, bool), "a number")
        value = float(value)
    elif key in ("pre_start_required", "get_preferred_allocation_available", "mounts", "cdi"):
        want(isinstance(value, bool), "true or false")
    elif key == "annotations":
        want(isinstance(value, bool) or (isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items())),
            "true/false or a mapping of string to string")
    elif key == "devices_per_numa":
        want(isinstance(value, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in value),
             "a list of integers")
    elif key == "defects":
        want(isinstance(value, list) and all(isinstance(d, str) for d in value), "a list of defect names")
        value = list(value)
    else:  # strings
        want(isinstance(value, str), "a string")
    return value


def load_file(path: str) -> dict:
    """Read a YAML config file into a dict of checked values; ConfigError names the problem."""
    import yaml      # here: a plugin started without a config file (every start the suite makes) skips it
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(e.strerror or str(e)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"invalid YAML: {where}{problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping at the top level, got {type(data).__name__}")
    out = {}
    for key, value in data.items():
        if key not in _TYPES:
            raise ConfigError(f"unknown key {key!r}; known keys: {', '.join(_TYPES)}")
        out[key] = _check(key, value)
    return out


def build(file_values: dict, overrides: dict) -> Config:
    """Defaults <- file values <- flag overrides (None means 'not given'); then derived fixes and checks."""
    values = {**file_values, **{k: v for k, v in overrides.items() if v is not None}}
    if "defects" in file_values and overrides.get("defects"):
        values["defects"] = list(dict.fromkeys(file_values["defects"] + overrides["defects"]))
    # A devices/numa_nodes flag beats the file's devices_per_numa; the list sets both otherwise.
    if overrides.get("devices") is not None or overrides.get("numa_nodes") is not None:
        values.pop("devices_per_numa", None)
    per = values.get("devices_per_numa")
    if per is not None:
        values.setdefault("devices", sum(per))
        values["numa_nodes"] = len(per)
    cfg = Config(**values)
    cfg.validate()
    return cfg
