"""Load profiles: users, spawn rate, duration and SLOs per scenario, from YAML over code defaults.

A profile is `smoke`, `full` (scenarios/profiles/NAME.yaml) or a path to a YAML file of the same shape:

    name: smoke
    scenarios:
      plugin_allocate_burst:
        users: 8
        duration_s: 3
        slo:
          Allocate: {p50_ms: 20, p99_ms: 100, min_rps: 50}
          "*": {max_failure_ratio: 0}

SLO keys per request name ("*" = all requests together): p50_ms p90_ms p95_ms p99_ms max_ms
(upper limits), min_rps (lower limit), max_failure_ratio. Anything not given keeps the default below.
No locust import here: the pytest process uses this module.
"""
from __future__ import annotations

import copy
import pathlib

import yaml

from dpconform.scenarios import registry

PROFILE_DIR = pathlib.Path(__file__).with_name("profiles")
# distributed mode: a master waits this long for its workers to connect, and for their records
WORKER_WAIT_S = 30.0
SLO_KEYS = ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms", "min_rps", "max_failure_ratio")

# Each scenario's own data (dpconform.scenarios.registry: one module per scenario in scenarios/load/).
SCENARIOS = registry.MODULES
PRIMARY = {name: sc.primary for name, sc in registry.scenarios().items()}
DEFAULTS: dict[str, dict] = {name: sc.defaults for name, sc in registry.scenarios().items()}


class ProfileError(ValueError):
    pass


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def resolve(name_or_path: str) -> pathlib.Path:
    p = pathlib.Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ProfileError(f"load profile {name_or_path}: no such file")
        return p
    p = PROFILE_DIR / f"{name_or_path}.yaml"
    if not p.exists():
        known = ", ".join(sorted(x.stem for x in PROFILE_DIR.glob("*.yaml")))
        raise ProfileError(f"load profile {name_or_path!r}: not a file and not one of {known}")
    return p


def load(name_or_path: str | None = "smoke") -> dict:
    """{"name", "path", "scenarios": {scenario: settings}} with defaults filled in and values checked."""
    if name_or_path is None:
        data, path = {}, None
    else:
        path = resolve(name_or_path)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ProfileError(f"load profile {path}: bad YAML: {e}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"load profile {path}: top level must be a mapping")
    given = data.get("scenarios") or {}
    unknown = set(given) - set(SCENARIOS)
    if unknown:
        raise ProfileError(f"load profile {path}: unknown scenario(s) {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    scen = {name: _merge(DEFAULTS[name], given.get(name) or {}) for name in SCENARIOS}
    for name, s in scen.items():
        validate(name, s, path)
    return {"name": data.get("name") or (path.stem if path else "defaults"), "path": str(path) if path else None,
            "description": data.get("description", ""), "scenarios": scen}


def validate(name: str, s: dict, where=None) -> None:
    def bad(msg):
        raise ProfileError(f"load profile {where or '(defaults)'}: {name}: {msg}")
    for key in ("users", "spawn_rate", "duration_s"):
        if not isinstance(s.get(key), (int, float)) or s[key] <= 0:
            bad(f"{key} must be a positive number, got {s.get(key)!r}")
    if not isinstance(s.get("slo"), dict):
        bad("slo must be a mapping of request name -> thresholds")
    for req, th in s["slo"].items():
        if not isinstance(th, dict):
            bad(f"slo.{req} must be a mapping")
        for k, v in th.items():
            if k not in SLO_KEYS:
                bad(f"slo.{req}.{k}: unknown key; use {', '.join(SLO_KEYS)}")
            if v is not None and (not isinstance(v, (int, float)) or v < 0):
                bad(f"slo.{req}.{k} must be a number >= 0, got {v!r}")
