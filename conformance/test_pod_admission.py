"""POD – pod admission through the kubelet side (K12, K16-K23, K33)."""
import pytest
from hypothesis import HealthCheck, settings

from dpconform.fixtures.checks import check, expect, fail, needs, needs_release
from dpconform.fixtures.kubelet import Container, Pod
from dpconform.fixtures.responses import describe_container
from dpconform.fixtures.root_causes import Rule, declare
from dpconform.fixtures.waiting import wait_until
from dpconform.kubeletapi import constants

ROOT_CAUSES = declare(Rule("POD-04", "reuse-refused"))


@check("POD-01", spec="K17, K21")
def test_POD_01_admit_one(harness, request):
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
    # the run's facts (not a JUnit property: pytest's record_property warns under xunit2)
    request.node.user_properties.append(("dpconform_example", describe_container(harness.resource, c)))


@check("POD-02", spec="K18, K20")
def test_POD_02_too_many(harness, suite_config):
    """POD-02: a pod asking for more than the node has is rejected with UnexpectedAdmissionError (by the
    topology manager, TopologyAffinityError, on a node whose topology policy is restricted or
    single-numa-node: it finds no NUMA alignment for more devices than there are)."""
    have = suite_config.expected_devices or len(harness.healthy_ids())
    pod = Pod("pod-02", containers=[Container("c", limits={harness.resource: have + 1})])
    res = harness.admit(pod)
    device_manager = res.reason == "UnexpectedAdmissionError" and "requested number of devices unavailable" in res.message
    expect(not res.admitted and (device_manager or res.reason == "TopologyAffinityError"),
           f"a pod asking for {have + 1} rejected: UnexpectedAdmissionError, requested number of devices unavailable "
           "(TopologyAffinityError under a restricting topology policy)",
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

    def fitting_the_budget(restart_cost: float) -> settings:
        # A plugin that is slow to come back after restarts (the upstream sample plugin re-registers 10 s
        # after a kubelet restart) gets fewer examples, so the machine fits its time budget.
        per_step = restart_cost / 5 + 0.05          # 2 of the machine's 5 rules are restarts
        return settings(max_examples=max(2, min(examples, int(POD_03_BUDGET_S / (steps * per_step)))),
                        stateful_step_count=steps, deadline=None, database=None,
                        suppress_health_check=list(HealthCheck))
    PodLifecycleMachine.run(h, fitting_the_budget)


@check("POD-05", spec="K12")
def test_POD_05_device_health_in_pod_status(harness, suite_config):
    """POD-05: a running pod's status shows the health of the devices it holds (allocatedResourcesStatus,
    from kubelet 1.36): Healthy when admitted, Unhealthy once the plugin reports the device Unhealthy. The
    kubelet shows a device the plugin no longer lists as Healthy, so a failed device must stay listed."""
    cfg, h = suite_config, harness
    release = needs_release("allocated-resources-status", cfg.kube_version,
                            "the kubelet shows device health in a pod's "
                            "status from 1.36 (feature gate ResourceHealthStatus, alpha and off before)")
    if not h.health_hook:
        pytest.skip("needs --health-hook 'CMD {device} {health}' to flip a device's health")
    t = cfg.thresholds.health_timeout
    res = h.admit(Pod("pod-05", containers=[Container("c", limits={h.resource: 1})]))
    expect(res.admitted, "the pod admitted", f"{res.reason}: {res.message}",
           "answer Allocate with one ContainerAllocateResponse for the requested device")
    dev = res.containers["c"].devices[h.resource][0]

    def shown() -> str | None:
        return h.backend.device_health_in_status(res.pod_uid).get("c", {}).get(h.resource, {}).get(dev)
    wait_until(lambda: shown() is not None, t, "the pod's allocatedResourcesStatus", raise_on_timeout=False,
               alive=h.backend.check_alive)
    if shown() is None:
        pytest.skip(f"the kubelet ({release}) shows no allocatedResourcesStatus for the pod within {t:g}s "
                    "(feature gate ResourceHealthStatus off on this node?)")
    expect(shown() == constants.HEALTHY, f"{dev} Healthy in the pod's status once admitted", f"{shown()}",
           "list the device Healthy when it is")
    h.set_health(dev, constants.UNHEALTHY)
    h.wait_health(dev, constants.UNHEALTHY, t, raise_on_timeout=False)   # a plugin that never sends it: LAW-07
    if not wait_until(lambda: shown() == constants.UNHEALTHY, t, f"{dev} Unhealthy in the pod's status",
                      raise_on_timeout=False, alive=h.backend.check_alive):
        listed = h.devices().get(dev)
        fail(f"{dev} Unhealthy in the pod's status within {t:g}s of the plugin being told so", f"{shown()}; the "
             "plugin's list " + ("no longer names it" if listed is None else f"has it {listed.health}"),
             "keep a failed device in the ListAndWatch list, marked Unhealthy: the kubelet shows a device it no "
             "longer knows as Healthy in the pod's status" if listed is None else
             "send a ListAndWatch snapshot with the device Unhealthy when it fails")
