"""Root-cause rules are data the check modules declare beside their checks (dpconform.fixtures.root_causes):
every condition the harness reports has an owner, the owner is a check of the module that declares it,
and the harness's parts name conditions, never check IDs."""
from __future__ import annotations

import pathlib
import re

import pytest

from dpconform.fixtures import catalogue, root_causes
from dpconform.fixtures.outcomes import Blocked
from dpconform.fixtures.root_causes import CONDITIONS, Rule, RunMemory

TEXT_MATCHED = {"registration-rejected", "admission-refused"}
HARNESS_PARTS = ["harness.py", "plugin_client.py", "observations.py", "plugin_lifecycle.py", "admission_causes.py"]


def test_every_condition_has_one_owner_declared_beside_its_check():
    checks = catalogue.by_id()
    declared = []
    for module in catalogue.check_modules():
        for rule in getattr(module, "ROOT_CAUSES", ()):
            assert checks[rule.check].module == module.__name__, f"{rule.check} declared in {module.__name__}"
            declared.append(rule)
    for condition in CONDITIONS:
        owners = [r for r in declared if r.condition == condition]
        assert owners, f"no check module owns {condition!r}"
        if condition in TEXT_MATCHED:
            assert all(r.pattern and r.what for r in owners), condition
        else:
            assert len(owners) == 1, f"{condition!r} has owners {[r.check for r in owners]}"


def test_the_harness_names_conditions_not_check_ids():
    here = pathlib.Path(root_causes.__file__).parent
    for name in HARNESS_PARTS:
        code = (here / name).read_text()
        assert not re.findall(r'"[A-Z]{3}-\d{2}"', code), f"fixtures/{name} names a check ID"


def test_a_rule_blocks_every_check_but_its_owners():
    memory = RunMemory()
    rule = Rule("ALC-01", "admission-refused", "no responses", r"none", owners=("ALC-01", "POD-01"))
    for owner in ("ALC-01", "POD-01"):
        memory.current_check = owner
        memory.block_by(rule, "x")            # its own verdict reports it
    memory.current_check = "POD-02"
    with pytest.raises(Blocked) as e:
        memory.block_by(rule, "seen")
    assert e.value.root == "ALC-01" and "seen" in str(e.value)


def test_unknown_condition_is_refused_at_declaration():
    with pytest.raises(ValueError, match="unknown condition 'no-such'"):
        Rule("REG-01", "no-such")


def test_a_rule_a_wait_saw_broken_blocks_the_later_checks_once_remembered():
    memory = RunMemory()
    memory.current_check = "KRS-01"
    memory.note_broken("KRS-01", "no re-registration")
    memory.known_broken("KRS-01")                   # the owner waits and judges for itself
    memory.current_check = "KRS-03"
    with pytest.raises(Blocked, match=r"blocked by KRS-01: no re-registration \(seen in KRS-01\)"):
        memory.known_broken("KRS-01")
