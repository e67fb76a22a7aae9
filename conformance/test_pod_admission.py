"""POD – pod admission through the kubelet side (K16-K23, K33)."""
import pytest
from hypothesis import HealthCheck, settings

from dpconform.fixtures.checks import check, expect, needs
from dpconform.fixtures.kubelet import Container, Pod
from dpconform.fixtures.responses import describe_container
from dpconform.fixtures.root_causes import Rule, declare

ROOT_CAUSES = declare(Rule("POD-04", "reuse-refused"))


@check("POD-01", spec="K17, K21")
def test_POD_01_admit_one(harness, record_property):
    """POD-01: a pod asking for 1 device is admitted; its container gets what Allocate returned."""
    needs(harness, "rpc-log")
    pod = Pod("pod-01", containers=[Container("c", limits={harness.resource: 1})])
    res = harness.admit(pod)
    expect(res.admitted, "the pod admitted", f"{res.reason}: {res.message}",
           "answer Allocate with one ContainerAllocateResponse for the requested device")
    c = res.containers["c"]
    got = c.devices[harness.resource]
    expect(len(got) == 1, "1 device", f"{got}", "answer exactly what was requested")
    alloc = [r for r in harness.backend.rpc_log() if r.name == "Allocate" and r.response is not None][-1]
    cresp = alloc.response.container_responses[0]
    expect(dict(cresp.envs).items() <= dict(c.envs).items(), "the container's env to carry Allocate's envs",
           f"{dict(c.envs)}", "return the envs in the ContainerAllocateResponse for this container")
    record_property("dpconform_example", describe_container(harness.resource, c))


@check("POD-02", spec="K18, K20")
def test_POD_02_too_many(harness, suite_config):
    """POD-02: a pod asking for more than the node has is rejected with UnexpectedAdmissionError."""
    have = suite_config.expected_devices or len(harness.healthy_ids())
    pod = Pod("pod-02", containers=[Container("c", limits={harness.resource: have + 1})])
    res = harness.admit(pod)
    expect(not res.admitted and res.reason == "UnexpectedAdmissionError"
           and "requested number of devices unavailable" in res.message,
           f"a pod asking for {have + 1} rejected: UnexpectedAdmissionError, requested number of devices unavailable",
           f"admitted={res.admitted} {res.reason}: {res.message}",
           "advertise only the devices that exist (no overcommit)")


@check("POD-04", spec="K23")
def test_POD_04_init_container_reuse(harness):
    """POD-04: devices of a finished init container are reused by the app container."""
    pod = Pod("pod-04", init_containers=[Container("init", limits={harness.resource: 1})],
              containers=[Container("app", limits={harness.resource: 1})])
    res = harness.admit(pod)
    expect(res.admitted, "the pod admitted", f"{res.reason}: {res.message}",
           "allocate the same device again: the kubelet reuses an init container's devices")
    init, app = res.containers["init"].devices[harness.resource], res.containers["app"].devices[harness.resource]
    expect(init == app, "the app container to reuse the init container's device", f"init {init}, app {app}",
           "report the same device IDs on every Allocate for them (the kubelet picks, you answer)")


POD_03_BUDGET_S = 60


@check("POD-03", spec="K18, K33")
@pytest.mark.timeout(300)
def test_POD_03_no_double_assignment(make_harness, suite_config):
    """POD-03: over random admit/remove/restart sequences no device is in two live containers, and
    PodResources List agrees with the kubelet's books (hypothesis state machine)."""
    needs(suite_config, "fast-admission")
    from dpconform.fixtures.podresources_machine import PodLifecycleMachine
    h = make_harness()
    h.start()
    h.wait_devices()
    steps = 10
    examples = max(3, suite_config.thresholds.hypothesis_examples // 10)
    # A plugin that is slow to come back after restarts (the upstream sample plugin re-registers 10 s
    # after a kubelet restart) gets fewer examples, so the machine fits its time budget.
    restart_cost = h.lifecycle.time_restarts()
    per_step = restart_cost / 5 + 0.05          # 2 of the machine's 5 rules are restarts
    examples = max(2, min(examples, int(POD_03_BUDGET_S / (steps * per_step))))
    PodLifecycleMachine.run(h, settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                                        database=None, suppress_health_check=list(HealthCheck)))
