"""REG – registration. The kubelet side's Registration server (kubelet behaviours K1-K10,
docs/kubelet-behaviours.md)."""
import pytest

from dpconform.fixtures.checks import SOCKET_PER_START, check, expect, fail, needs
from dpconform.fixtures.outcomes import Blocked, NotRegistered
from dpconform.fixtures.root_causes import Rule, declare, owner, registration_cause
from dpconform.fixtures.kubelet.names import is_extended_resource_name
from dpconform.fixtures.waiting import wait_until
from dpconform.kubeletapi import constants

# What the harness observes that breaks a rule of this module (dpconform.fixtures.root_causes): a check
# that meets it elsewhere is blocked by the owner here.
ROOT_CAUSES = declare(
    Rule("REG-01", "never-registered"),
    Rule("REG-01", "exited-before-registering"),
    Rule("REG-02", "registration-rejected", "the kubelet rejects its API version", r"is not supported by kubelet"),
    Rule("REG-03", "registration-rejected", "the kubelet rejects its resource name", r"the ResourceName .* is invalid"),
    Rule("REG-04", "registration-rejected", "the kubelet cannot dial its endpoint", r"failed to dial device plugin"),
    Rule("REG-04", "endpoint-not-serving"),
    Rule("REG-07", "registered-during-admission"),
)


@pytest.fixture
def first_attempt(make_harness, suite_config):
    """A private kubelet + plugin; returns (harness, first registration attempt, accepted or not)."""
    h = make_harness()
    never_registered(h)
    h.start(register=False)
    t = suite_config.thresholds.register_timeout
    try:
        wait_until(lambda: h.registrations or h.backend.pending_registrations() or not h.plugin.running, t,
                   "a registration attempt", alive=h.backend.check_alive)
    except TimeoutError:
        raise Blocked("REG-01", f"no Register call within {t:g}s of start") from None
    if not h.registrations and h.backend.pending_registrations():
        # a Register the kubelet is still answering (dialling the endpoint, asking for options): its
        # verdict comes when the kubelet's dial ends (K6: it blocks up to its dial timeout)
        wait_until(lambda: h.registrations or not h.plugin.running, constants.DIAL_TIMEOUT_S + t,
                   "the kubelet's answer to the Register call", alive=h.backend.check_alive, raise_on_timeout=False)
    if not h.registrations:
        pending = h.backend.pending_registrations()
        if pending:
            condition, what = h.observed.pending_cause(pending[-1], constants.DIAL_TIMEOUT_S + t)
            raise Blocked(owner(condition).check, what)
        raise Blocked("REG-01", f"the plugin exited with code {h.plugin.returncode} without registering")
    return h, h.registrations[0]


def never_registered(h) -> None:
    """A plugin that never called Register in an earlier harness: blocked at once, not waited for again."""
    if h.memory.blocked_by and h.memory.blocked_by[0] == "REG-01":
        raise Blocked(*h.memory.blocked_by)


def judged_elsewhere(reg, own: str) -> None:
    """A registration the kubelet rejected for a rule another check owns: this check cannot judge it."""
    if not reg.accepted:
        cause = registration_cause([reg.error])
        if cause and cause[0] != own:
            raise Blocked(*cause)


@check("REG-01", spec="K6, K8")
def test_REG_01_registers_in_time(make_harness, suite_config):
    """REG-01: the plugin registers within the timeout of its start – a node only gets devices after that."""
    t = suite_config.thresholds.register_timeout
    h = make_harness()
    h.start(register=False)
    try:
        h.wait_registered(timeout=t)
    except Blocked:
        raise
    except NotRegistered as exc:
        fail(f"an accepted registration within {t:g}s of the plugin's start", exc.seen, exc.fix)


@check("REG-02", spec="K1, K4")
def test_REG_02_version(first_attempt):
    """REG-02: version must be "v1beta1", the only one the kubelet supports."""
    h, reg = first_attempt
    judged_elsewhere(reg, "REG-02")
    fix = "set RegisterRequest.version to pluginapi.Version (v1beta1)"
    if reg.request.version:         # the backend sees the request as sent
        expect(reg.request.version == constants.VERSION, f'version "{constants.VERSION}"',
               f"{reg.request.version!r} (kubelet says: {reg.error})", fix)
    else:                           # only the kubelet's verdict is observable (its log)
        expect(reg.accepted, f'the kubelet to accept the registration (version "{constants.VERSION}")',
               f"rejected: {reg.error}", fix)


@check("REG-03", spec="K5")
def test_REG_03_resource_name(first_attempt, suite_config):
    """REG-03: resource_name is a valid extended resource name (and the expected one if --resource was given)."""
    _, reg = first_attempt
    name = reg.request.resource_name
    expect(is_extended_resource_name(name), "a valid extended resource name like vendor.com/gpu",
           f"{name!r} (kubelet says: {reg.error})",
           "use DOMAIN/NAME, not under kubernetes.io/, name part <= 63 chars, alphanumeric at both ends")
    if suite_config.resource:
        expect(name == suite_config.resource, f"resource {suite_config.resource!r} (--resource)", repr(name),
               "register the resource name you expect pods to request")


@check("REG-04", spec="K3, K6")
def test_REG_04_endpoint_serving_before_register(first_attempt):
    """REG-04: endpoint is a bare socket name in the plugin dir, serving before Register is called."""
    needs(first_attempt[0], "register-request")
    h, reg = first_attempt
    judged_elsewhere(reg, "REG-04")
    ep = reg.request.endpoint
    expect(ep and "/" not in ep, "a bare socket file name as endpoint", repr(ep),
           "send only the file name; the kubelet joins it to its device-plugin dir")
    expect(reg.endpoint_serving, "the endpoint socket answering gRPC when Register arrives",
           f"not serving at Register time (kubelet says: {reg.error or 'accepted after waiting for the dial'})",
           "start your gRPC server and wait until it serves before calling Register")


@check("REG-05", "advisory", spec="K7")
def test_REG_05_options_consistent(harness):
    """REG-05: RegisterRequest.options equals GetDevicePluginOptions; the kubelet only uses the latter."""
    needs(harness, "register-request")
    reg = harness.registration
    sent, served = reg.request.options, harness.options
    expect(sent == served, f"options in RegisterRequest == GetDevicePluginOptions ({served})".replace("\n", " "),
           f"RegisterRequest.options = {sent}".replace("\n", " "),
           "return the same options from GetDevicePluginOptions: that is the only place the kubelet reads")


@check("REG-06", spec="K10")
def test_REG_06_rejected_registration(make_harness, suite_config):
    """REG-06: after a rejected Register the plugin exits non-zero or retries (within rejected_retry_window: NVIDIA's
    device plugin retries after 30 s); it never serves as if registered."""
    needs(suite_config, "reject-registration")
    h = make_harness()
    never_registered(h)
    h.backend.reject_registrations("dpconform: registration rejected on purpose (REG-06)")
    h.start(register=False)
    t = suite_config.thresholds.register_timeout
    if not wait_until(lambda: h.registrations, t, "a registration attempt", raise_on_timeout=False):
        raise Blocked("REG-01", f"no Register call within {t:g}s of start")
    window = suite_config.thresholds.rejected_retry_window
    exited_or_retried = wait_until(lambda: (not h.plugin.running) or len(h.registrations) > 1, window,
                                   "exit or retry", raise_on_timeout=False)
    if not exited_or_retried:
        fail(f"exit non-zero or a retry within {window:g}s of a rejected Register", "still running, no retry",
             "on a Register error, log it and exit non-zero (or retry with backoff)")
    if not h.plugin.running and len(h.registrations) == 1:
        expect(h.plugin.returncode != 0, "a non-zero exit code", f"exit code {h.plugin.returncode}",
               "exit non-zero when registration fails so the DaemonSet restarts you visibly")


@check("REG-07", "advisory")
def test_REG_07_no_registration_storm(harness, suite_config):
    """REG-07: at most one registration per plugin start over the storm window."""
    window = suite_config.thresholds.storm_window
    harness.observe(window)
    n = len([r for r in harness.registrations if r.time >= harness.started_at])
    expect(n <= 1, f"1 registration in the {window:g}s after the plugin's start", f"{n} registrations",
           "register once per start (and again only after a kubelet restart)")


@check("REG-08", "advisory", spec="K9")
def test_REG_08_fresh_socket_name(make_harness):
    """REG-08: a fresh socket name per start, so a new instance never races the old one's socket."""
    h = make_harness()
    first = h.start()
    h.stop_plugin()
    second = h.wait_registered(since=h.relaunch_plugin())
    expect(first.request.endpoint != second.request.endpoint, "a new endpoint name after a restart",
           f"{first.request.endpoint!r} both times", SOCKET_PER_START)
