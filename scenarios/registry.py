"""The load scenarios, registered in one place: each is one module of dpconform.scenarios.load with a
SCENARIO (its name, what its target must give, the request its SLO is mostly about, its profile
defaults and SLOs) and a user_class() factory returning its locust User.

The user class is made by a factory because importing locust monkey-patches the whole process with
gevent: the pytest process reads the scenarios' data; only the load runner's process (dpconform.
scenarios.runner) calls user_class().

Adding a scenario: a module in scenarios/load/ and its name in MODULES; a profile (scenarios/profiles/)
may override its settings and SLOs.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

# In the order the scenarios run and are listed.
MODULES = ("plugin_allocate_burst", "node_admission_burst", "churn", "cluster_admission_burst", "dra_prepare_burst")


@dataclass(frozen=True)
class Scenario:
    name: str
    needs: tuple[str, ...]        # keys the target must give (endpoint, http, resource, devices, cluster, dra)
    primary: str                  # the request its report leads with
    defaults: dict = field(default_factory=dict)   # profile defaults, "slo" included
    socket_level: bool = False    # calls the plugin's socket itself (the user gets target["endpoint"]; ghz can run it)
    bursts: bool = False          # records whole bursts ("burst"): its effective burst size is reported
    flips: bool = False           # the runner flips device health beside the users (a control socket or hook)


def _module(name: str):
    return importlib.import_module(f"dpconform.scenarios.load.{name}")


def scenarios() -> dict[str, Scenario]:
    return {name: _module(name).SCENARIO for name in MODULES}


def get(name: str) -> Scenario:
    if name not in MODULES:
        raise KeyError(f"unknown load scenario {name!r}; known: {', '.join(MODULES)}")
    return _module(name).SCENARIO


def user_class(name: str) -> Callable:
    """The scenario's locust User class (imports locust: the load runner's process only)."""
    return _module(name).user_class()
