"""Load scenarios against the plugin under test: `pytest scenarios -m load [--load-profile smoke|full|PATH]
[--plugin-cmd CMD] [--baseline OLD.json --regression-ratio 1.5] [--backend local|kind|kubeconfig]`.

Each scenario runs in its own process (scenarios/runner.py, locust as a library); this process only
hosts the kubelet emulator (or the cluster backend, for cluster_admission_burst) and reads the result
JSON. Results: --load-out (default reports/load).
"""
from __future__ import annotations

import pytest

from dpconform.fixtures import backends
from dpconform.fixtures.waiting import wait_until
from dpconform.scenarios import registry, stats
from dpconform.scenarios.orchestrate import (HARNESS_BOUND_RATIO, DraLoadTarget, LoadTarget, devices_needed, noop_allocate_burst,
                                  run_scenario)

pytestmark = pytest.mark.load


@pytest.fixture(scope="module")
def load_target(pytestconfig, suite_config, load_profile):
    """One emulator + plugin for the module's scenarios (each scenario leaves the node as it found it)."""
    with LoadTarget(suite_config.plugin_cmd, suite_config,
                    devices=devices_needed(load_profile)) as target:
        yield target


def run_checked(scenario, target, load_profile, load_out, load_echo, pytestconfig, **kw) -> dict:
    """Run one scenario; its result (fails the test when the runner wrote none)."""
    outcome = run_scenario(scenario, load_profile["path"] or load_profile["name"], target.target_path,
                           load_out, echo=load_echo, processes=pytestconfig.getoption("load_processes"), **kw)
    if outcome.result is None:
        pytest.fail(f"{scenario}: the load runner failed (exit {outcome.rc}); its output:\n{outcome.tail()}")
    return outcome.result


def judge(scenario, result, load_profile, pytestconfig) -> None:
    """The SLOs of the profile, then (with --baseline) the regression gate."""
    # Judge from the JSON (the same rules the runner printed), naming the percentile and the limit.
    violations = stats.check_slo(result)
    assert not violations, (f"{scenario} missed its SLO (profile {load_profile['name']}): " + "; ".join(violations)
                            + f". Plots: {result['files'].get('histogram')}, {result['files'].get('timeline')}")
    baseline_path = pytestconfig.getoption("baseline")
    if baseline_path:
        baseline = stats.load_baseline(baseline_path, scenario)
        if baseline is None:
            pytest.skip(f"--baseline {baseline_path} has no result for {scenario}")
        ratio = pytestconfig.getoption("regression_ratio")
        regressions = stats.compare_baseline(result, baseline, ratio, pytestconfig.getoption("regression_min_ms"))
        assert not regressions, (f"{scenario} regressed against {baseline_path} (ratio {ratio:g}): "
                                 + "; ".join(regressions))


def run_and_judge(scenario, load_target, load_profile, load_out, load_results, load_echo, pytestconfig):
    result = run_checked(scenario, load_target, load_profile, load_out, load_echo, pytestconfig)
    load_results[scenario] = result
    judge(scenario, result, load_profile, pytestconfig)
    return result


def test_plugin_allocate_burst(load_target, load_profile, load_out, load_results, load_echo, pytestconfig):
    """Many users calling Allocate (after GetPreferredAllocation when advertised) on the plugin's socket
    at once, as a busy kubelet would: per-RPC latency percentiles, throughput, zero errors; beside them the
    harness floor (the same generator and users against a no-op server, measured now) and whether the
    plugin's figures are within 2x of it (harness-bound)."""
    generator = pytestconfig.getoption("load_generator")
    result = run_checked("plugin_allocate_burst", load_target, load_profile, load_out, load_echo, pytestconfig,
                         generator=generator)
    result["harness_floor"] = harness_floor(result, load_profile, load_out, generator)
    load_echo(result["harness_floor"]["line"])
    stats.rewrite(result)
    load_results["plugin_allocate_burst"] = result
    judge("plugin_allocate_burst", result, load_profile, pytestconfig)


HARNESS_FLOOR_S = 2.0      # how long the floor is measured (at most the scenario's duration)


def harness_floor(result: dict, load_profile: dict, load_out, generator: str | None) -> dict:
    """The same generator and users against the no-op server (scenarios/noop_plugin.py: bin/dp-floor, Go,
    when built, else the Python one), now: the resolution of this result. Its Allocate p50 within 2x of the
    floor's is marked harness-bound; at or below the floor's, the floor bounds nothing (it is the slower)."""
    s = result["settings"]
    gen = (result.get("extra", {}).get("generator") or {}).get("name", "locust")
    try:
        floor = noop_allocate_burst(load_profile["path"] or load_profile["name"], load_out, users=int(s["users"]),
                                    duration=min(float(s["duration_s"]), HARNESS_FLOOR_S), generator=generator,
                                    tag="harness-floor")
    except RuntimeError as e:
        pytest.fail(str(e))
    mine = result["requests"].get("Allocate", {})
    ratio = (mine["p50_us"] / floor["p50_us"]) if mine.get("p50_us") and floor.get("p50_us") else None
    bound = ratio is not None and ratio < HARNESS_BOUND_RATIO
    server = "Go" if floor["server"] == "go" else "Python"
    verdict = ("HARNESS-BOUND: the plugin may be faster than this generator can tell"
               + (" (try --load-generator ghz)" if gen == "locust" else "") if bound
               else f"resolved (x{ratio:.1f} the floor)" if ratio else "not compared (no Allocate figures)")
    if ratio is not None and ratio <= 1:
        verdict += (f"; the floor does not bound (x{ratio:.2f}: the {server} no-op server is not faster than "
                    "the plugin" + ("; make bin/dp-floor builds the Go one)" if server == "Python" else ")"))
    line = (f"[load] plugin_allocate_burst: harness floor ({gen}, {s['users']} users, {server} no-op server, now): "
            f"Allocate p50 {stats.fmt_us(floor.get('p50_us'))}, p99 {stats.fmt_us(floor.get('p99_us'))}, "
            f"{floor.get('rps', 0):.0f} req/s; the plugin's p50 {stats.fmt_us(mine.get('p50_us'))}: {verdict}")
    return {"generator": gen, "users": int(s["users"]), "duration_s": floor["duration_s"], "server": floor["server"],
            "p50_us": floor.get("p50_us"), "p99_us": floor.get("p99_us"), "rps": floor.get("rps"),
            "ratio_p50": round(ratio, 2) if ratio else None, "harness_bound": bound, "line": line}


def test_node_admission_burst(load_target, load_profile, load_out, load_results, load_echo, pytestconfig):
    """N pods submitted at once through the emulator's HTTP API (serial admission, as on a node): time
    from submission until each pod has its devices, and until the whole burst has them."""
    result = run_and_judge("node_admission_burst", load_target, load_profile, load_out, load_results, load_echo,
                           pytestconfig)
    assert result["requests"].get("admit", {}).get("count"), "no pod was submitted"


def test_churn(load_target, load_profile, load_out, load_results, load_echo, pytestconfig):
    """Pods admitted and removed at a steady rate while device health flips: no failed admissions
    beyond the kubelet's own health race, and afterwards every device is back and allocatable."""
    if not (load_target.target.get("control") or load_target.target.get("health_hook")):
        pytest.skip("churn flips device health: give --health-hook 'CMD {device} {health}' for this plugin")
    run_and_judge("churn", load_target, load_profile, load_out, load_results, load_echo, pytestconfig)
    h = load_target.h
    settled = wait_until(load_target.settled, h.t.health_timeout, "the node to settle after churn",
                         raise_on_timeout=False)
    assert settled, (f"after churn the node did not settle: pods left {[p.name for p in h.backend.pods()]}, "
                     f"allocatable {h.backend.allocatable(h.resource)} of {len(load_target.target['devices'])} devices; "
                     "the plugin must report a device Healthy again once it recovers")


@pytest.fixture(scope="module")
def cluster_load_target(pytestconfig, suite_config, load_profile):
    """The plugin under test on the cluster backend of --backend (its own kubelet, its API server)."""
    if "cluster" not in backends.backend_class(suite_config.backend).capabilities:
        pytest.skip("cluster_admission_burst creates real pods through an API server: run it with "
                    "--backend local, kind or kubeconfig")
    s = load_profile["scenarios"]["cluster_admission_burst"]
    need = int(s["burst_size"]) * int(s["users"]) * int(s.get("devices_per_pod", 1))
    with LoadTarget(suite_config.plugin_cmd, suite_config, devices=max(need, 1),
                    backend=suite_config.backend) as target:
        yield target


def test_cluster_admission_burst(cluster_load_target, load_target, load_profile, load_out, load_results, load_echo,
                                 pytestconfig):
    """N one-device pods created at once through the API server: per pod create -> Running, the whole
    burst, failures by reason; side by side with the same burst on the emulator (node_admission_burst),
    printed and stored as ratios."""
    result = run_checked("cluster_admission_burst", cluster_load_target, load_profile, load_out, load_echo,
                         pytestconfig)
    size = result["extra"]["burst_size_effective"]
    emulator = load_results.get("node_admission_burst")
    if emulator is None or emulator["extra"].get("burst_size_effective") != size:
        emulator = run_checked("node_admission_burst", load_target, load_profile, load_out, load_echo, pytestconfig,
                               tag="side-by-side", burst_size=size)
    result["compare"] = stats.compare_bursts(result, emulator)
    for line in result["compare"]["lines"]:
        load_echo(line)
    stats.rewrite(result)
    load_results["cluster_admission_burst"] = result
    judge("cluster_admission_burst", result, load_profile, pytestconfig)


def test_dra_prepare_burst(suite_config, load_profile, load_out, load_results, load_echo, pytestconfig):
    """burst_size NodePrepareResources calls at once on a DRA driver, one allocated claim each (the kubelet
    prepares pods in parallel), then their unprepares: per-call latency, the whole burst, zero errors. Runs
    with --dra only (`pytest -m load --dra [--plugin-cmd DRIVER]`); needs an API server from bin/."""
    from dpconform.fixtures.backends.base import BackendUnavailable
    s = load_profile["scenarios"]["dra_prepare_burst"]
    try:
        target = DraLoadTarget(suite_config, claims=int(s["burst_size"]) * int(s["users"]))
        with target:
            run_and_judge("dra_prepare_burst", target, load_profile, load_out, load_results, load_echo, pytestconfig)
    except BackendUnavailable as e:
        pytest.skip(str(e))


def test_dra_cluster_burst(suite_config, load_profile, load_out, load_results, load_echo, pytestconfig):
    """cluster_admission_burst with a DRA driver (`--dra --backend local`): burst_size pods at once, each with
    a claim from a one-device ResourceClaimTemplate; the scheduler allocates, the real kubelet prepares:
    per pod create -> Running, the whole burst, failures by reason."""
    from dpconform.fixtures.backends.base import BackendUnavailable
    if suite_config.backend != "local":
        pytest.skip("pods with claims need the real scheduler and kubelet: --dra --backend local")
    try:
        with DraLoadTarget(suite_config, claims=0, backend="local") as target:   # no claim holds a device
            result = run_checked("cluster_admission_burst", target, load_profile, load_out, load_echo, pytestconfig,
                                 tag="dra")
    except BackendUnavailable as e:
        pytest.skip(str(e))
    load_results["dra_cluster_burst"] = result
    judge("cluster_admission_burst", result, load_profile, pytestconfig)


# A scenario registered without a test of its own (dpconform.scenarios.registry) runs here, against the
# emulator target: its profile's SLOs and the --baseline gate, as the others.
GENERIC = [n for n in registry.MODULES if f"test_{n}" not in globals()]

if GENERIC:
    @pytest.mark.parametrize("scenario", GENERIC)
    def test_registered_scenario(scenario, load_target, load_profile, load_out, load_results, load_echo, pytestconfig):
        """A registered scenario with no test of its own, on the emulator with the plugin under test."""
        missing = [k for k in registry.get(scenario).needs if not load_target.target.get(k)]
        if missing:
            pytest.skip(f"{scenario} needs {', '.join(missing)}, which the emulator target does not give")
        run_and_judge(scenario, load_target, load_profile, load_out, load_results, load_echo, pytestconfig)
