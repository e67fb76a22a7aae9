"""The load scenarios are registered in one place (dpconform.scenarios.registry): one module each in
scenarios/load/, whose SCENARIO carries its name, needs, primary request and profile defaults with SLOs,
and whose user_class() makes its locust user only when the load runner asks (locust patches gevent)."""
from __future__ import annotations

import pathlib
import subprocess
import sys

from dpconform.scenarios import profile, registry


def test_every_module_in_scenarios_load_is_registered_under_its_name():
    here = pathlib.Path(registry.__file__).parent / "load"
    modules = sorted(p.stem for p in here.glob("*.py") if p.stem != "__init__")
    assert modules == sorted(registry.MODULES)
    for name, sc in registry.scenarios().items():
        assert sc.name == name
        profile.validate(name, sc.defaults)                  # its defaults are a valid profile entry
        assert sc.primary in sc.defaults["slo"], f"{name}: no SLO for its primary request {sc.primary}"


def test_reading_the_scenarios_imports_no_locust():
    code = ("import sys; from dpconform.scenarios import profile, registry; registry.scenarios(); "
            "profile.load('smoke'); print('locust' in sys.modules or 'gevent' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_the_profiles_name_only_registered_scenarios():
    for path in sorted(profile.PROFILE_DIR.glob("*.yaml")):
        assert set(profile.load(str(path))["scenarios"]) == set(registry.MODULES)
