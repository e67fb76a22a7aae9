"""Defect switches of the fake-GPU plugin (`--defect NAME`, or `defects:` in the config).

Each defect breaks one rule on purpose; the project's tests (tests/test_defect_matrix.py) run the
whole conformance catalogue against the plugin with that defect and assert that exactly the listed
checks (IDs of docs/checks.md, `dpconform checks`) fail. In the code, each defect is one small branch
marked with its name (grep for the name).

Also here, for the same matrix and for the "proven by" column of docs/checks.md: MANIFEST_DEFECTS
(broken copies of the bundled DaemonSet for the MAN checks), CLUSTER_DEFECTS (what the switches break
on a cluster backend) and PROVEN_ELSEWHERE (required checks proven able to fail by another test).
"""
from __future__ import annotations

DEFECTS: dict[str, tuple[str, tuple[str, ...]]] = {
    # registration
    "wrong-version": ('registers with version "v1alpha1"', ("REG-02",)),
    "invalid-resource-name": ('registers resource "fakegpu" (no domain prefix)', ("REG-03",)),
    "register-before-serving": ("calls Register before its server listens, binds only afterwards", ("REG-04",)),
    "unserved-endpoint": ('Register names endpoint "fakegpu-unserved.sock", which it never serves (the kubelet '
                          "dials it until its dial times out; every other check is blocked by REG-04)", ("REG-04",)),
    "options-mismatch": ("RegisterRequest.options differ from what GetDevicePluginOptions returns", ("REG-05",)),
    "ignore-register-failure": ("on a rejected Register keeps serving silently: no retry, no exit", ("REG-06",)),
    "register-storm": ("registers again every 0.5 s", ("REG-07", "LAW-06")),
    "fixed-socket-name": ('always uses the socket name "fakegpu.sock" (a second instance registers on the '
                          "first one's socket)", ("REG-08", "PRS-04")),
    # options
    "slow-options": ("GetDevicePluginOptions sleeps 7 s (registration is slow too)", ("OPT-01",)),
    "options-error": ("GetDevicePluginOptions fails (INTERNAL): the kubelet rejects every registration", ("OPT-01",)),
    "preferred-unimplemented": ("advertises GetPreferredAllocation but returns UNIMPLEMENTED", ("OPT-02",)),
    "prestart-unimplemented": ("advertises pre_start_required, PreStartContainer returns UNIMPLEMENTED", ("OPT-03", "PRE-01")),
    # ListAndWatch
    "topology-lost-on-update": ("after a health change, snapshots omit every device's topology", ("TOP-02",)),
    "no-snapshot": ("ListAndWatch never sends a snapshot", ("LAW-01",)),
    "duplicate-ids": ("every snapshot lists the first device twice", ("LAW-02",)),
    "bad-health-string": ('the last device reports health "healthy"', ("LAW-03",)),
    "lowercase-health": ('every device reports health "healthy"/"unhealthy": no device is Healthy to the '
                         "kubelet, so the checks that need one are blocked by LAW-03", ("LAW-03",)),
    "negative-numa": ("the last device reports NUMA node -1", ("LAW-04", "TOP-01")),
    "end-stream": ("ListAndWatch ends 2 s after the first snapshot", ("LAW-05",)),
    "snapshot-spam": ("resends the unchanged snapshot every 50 ms", ("LAW-06",)),
    "ignore-health-change": ("health changes are accepted on the control channel but never sent", ("LAW-07",)),
    "drop-unhealthy": ("a device made Unhealthy leaves the ListAndWatch list instead of being listed Unhealthy "
                       "(the kubelet then shows it Healthy in the pod's status)", ("LAW-07", "POD-05")),
    "overcommit": ("advertises one device more than configured", ("LAW-08", "POD-02")),
    "new-ids-after-restart": ("device IDs get a random per-process suffix (POD-03, which restarts the "
                              "plugin, is blocked by LAW-09)", ("LAW-09", "PRS-03")),
    "renumber-on-reregister": ("advertises new device IDs after every re-registration (Allocate knows only the "
                               "first ones)", ("KRS-02", "KRS-03")),
    # Allocate
    "empty-response": ("Allocate returns zero container responses", ("ALC-01", "POD-01")),
    "wrong-response-count": ("Allocate returns one container response whatever the request count", ("ALC-02",)),
    "partial-allocate": ("Allocate refuses requests for more than 2 devices", ("ALC-03", "ALC-05", "PRS-03")),
    "allocate-wrong-devices": ("Allocate's answer names the lowest device IDs, not the requested ones",
                               ("ALC-07", "TOP-01", "ALC-02")),
    "exclusive-allocate": ("Allocate refuses an ID it handed out before (breaks init-container reuse)", ("POD-04",)),
    "accept-unknown-id": ("Allocate accepts unknown device IDs", ("ALC-04",)),
    "crash-on-unknown-id": ("Allocate exits the process (code 3) on an unknown device ID", ("ALC-04", "ROB-01")),
    "bad-response": ('env name "1-BAD NAME", relative container_path, permissions "x"', ("ALC-05",)),
    "nondeterministic": ("a random env value in every Allocate response", ("ALC-06",)),
    "shared-response-race": ("builds answers in a shared buffer: concurrent calls get each other's IDs", ("ALC-07",)),
    "slow-allocate": ("Allocate takes 150 ms", ("ALC-08",)),
    "allocate-unhealthy": ("Allocate accepts Unhealthy devices", ("ALC-09",)),
    # GetPreferredAllocation
    "preferred-not-subset": ("the preferred answer contains an ID not in available_deviceIDs", ("PRF-01", "PRF-06")),
    "preferred-wrong-size": ("the preferred answer has size+1 IDs when possible, else size-1", ("PRF-02", "PRF-06", "PRF-05")),
    "ignore-must-include": ("the preferred answer ignores must_include_deviceIDs", ("PRF-03", "PRF-06")),
    "preferred-duplicates": ("the preferred answer repeats an ID", ("PRF-04", "PRF-06", "PRF-02")),
    "preferred-crash-on-impossible": ("exits the process (code 4) when allocation_size > available", ("PRF-07", "ROB-01")),
    # PreStartContainer
    "prestart-fails": ("PreStartContainer always returns an error", ("PRE-01", "OPT-03")),
    "prestart-accepts-unknown": ("PreStartContainer accepts unknown device IDs", ("PRE-02",)),
    # kubelet restart
    "no-reregister": ("never registers again after a kubelet restart", ("KRS-01", "POD-03")),
    "broken-after-reregister": ("after re-registering, Allocate fails: device state lost", ("KRS-03",)),
    "leak-on-reregister": ("every re-registration leaks a thread and 20 open files", ("KRS-04",)),
    # plugin restart
    "stale-socket-crash": ('fixed socket name; exits 1 "address in use" if the socket file exists', ("PRS-01", "PRS-03", "REG-08", "PRS-04")),
    "slow-sigterm": ("ignores SIGTERM and leaves its socket behind", ("PRS-02",)),
    "unhealthy-on-exit": ("on SIGTERM reports every device Unhealthy before it exits (a drain): the kubelet applies "
                          "it to the resource, a surge's new instance's devices included", ("PRS-04",)),
    # robustness
    "garbage-ids-crash": ("exits the process (code 5) on an ID > 1024 chars or > 1000 IDs in Allocate", ("ROB-01",)),
    "single-stream": ("only the first ListAndWatch client per socket ever gets snapshots", ("ROB-02", "LAW-01")),
}

# Broken copies of plugin_under_test/deploy/nvml-daemonset.yaml (the manifest the clean plugin passes
# with): name -> (what is wrong, (old, new) text replacements applied to that file, checks that must fail).
MANIFEST_BASE = "plugin_under_test/deploy/nvml-daemonset.yaml"
MANIFEST_DEFECTS: dict[str, tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "hostpath-wrong-mount": ("the device-plugin hostPath volume is mounted at /plugins in the container",
                             (("mountPath: /var/lib/kubelet/device-plugins", "mountPath: /plugins"),), ("MAN-01",)),
    "privilege-escalation": ("allowPrivilegeEscalation: true",
                             (("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true"),), ("MAN-02",)),
    "not-node-critical": ("priorityClassName is not system-node-critical",
                          (("priorityClassName: system-node-critical", "priorityClassName: high-priority"),),
                          ("MAN-03",)),
    "capacity-gap-rollout": ("rolling update with maxUnavailable 1 and no surge",
                             (("maxUnavailable: 0", "maxUnavailable: 1"), ("maxSurge: 1", "maxSurge: 0")),
                             ("MAN-04",)),
    "every-node": ("no nodeSelector: runs on nodes without the hardware",
                   (("      nodeSelector:\n        feature.node", "      # nodeSelector:\n        # feature.node"),),
                   ("MAN-05",)),
}

# The same switches on a cluster backend (`--backend local`, tests/test_cluster_suite.py): defect -> the
# CLU checks it must break there. CLU checks need a real API server; on the emulator they are skipped.
CLUSTER_DEFECTS: dict[str, tuple[str, ...]] = {
    "duplicate-ids": ("CLU-01",),
    "ignore-health-change": ("CLU-02",),
    "allocate-wrong-devices": ("CLU-03",),
    "overcommit": ("CLU-04", "CLU-05"),
    "no-reregister": ("CLU-06",),
    "new-ids-after-restart": ("CLU-07",),
    "slow-allocate": ("CLU-08",),
}

# Required checks that no defect above can break, and the test that proves they can fail.
PROVEN_ELSEWHERE: dict[str, str] = {
    "REG-01": "a plugin that never registers: `tests/test_suite_usage.py::test_plugin_that_never_registers_fails_fast`",
    # the DaemonSet lifecycle: copies of the sample plugin's DaemonSet, each broken for one check's rule
    "CLU-09": "a DaemonSet without the hostPath mount: `tests/test_daemonset_lifecycle.py::test_broken_manifest_fails_its_check`",
    "CLU-10": "a replacement pod that idles: `tests/test_daemonset_lifecycle.py::test_broken_manifest_fails_its_check`",
    "CLU-11": "updateStrategy OnDelete: `tests/test_daemonset_lifecycle.py::test_broken_manifest_fails_its_check`",
    "CLU-12": "revisionHistoryLimit 0: `tests/test_daemonset_lifecycle.py::test_broken_manifest_fails_its_check`",
    "CLU-13": "SIGTERM never reaching the plugin: `tests/test_daemonset_lifecycle.py::test_broken_manifest_fails_its_check`",
}

# Defects that need an option advertised for their broken RPC to be called at all.
# Checks a defect breaks only on the kubelets of some releases: defect -> check -> the kubelet behaviour
# (a name of SINCE in fixtures/kube_versions.py) from whose release on it no longer breaks it.
NOT_WITH: dict[str, dict[str, str]] = {
    # from 1.37 the storm's registrations on its connected socket are refused: no new stream, no snapshot spam
    "register-storm": {"LAW-06": "several-endpoints-per-resource"},
}
# And the reverse: checks a defect breaks only from the release of that behaviour on (PRS-04 judges a
# surge only where the kubelet keeps an endpoint per instance).
ONLY_WITH: dict[str, dict[str, str]] = {
    "drop-unhealthy": {"POD-05": "allocated-resources-status"},
    "fixed-socket-name": {"PRS-04": "several-endpoints-per-resource"},
    "stale-socket-crash": {"PRS-04": "several-endpoints-per-resource"},
    "unhealthy-on-exit": {"PRS-04": "several-endpoints-per-resource"},
}

FORCES_PRE_START = {"prestart-unimplemented", "prestart-fails", "prestart-accepts-unknown"}
FORCES_PREFERRED = {"preferred-unimplemented", "preferred-not-subset", "preferred-wrong-size",
                    "ignore-must-include", "preferred-duplicates", "preferred-crash-on-impossible"}


def describe(defects: dict[str, tuple[str, tuple[str, ...]]] | None = None) -> str:
    """The --help epilog of a defect table (this module's DEFECTS by default)."""
    defects = DEFECTS if defects is None else defects
    width = max(map(len, defects))
    return "\n".join(f"  {name:<{width}}  {doc}  [{', '.join(checks)}]" for name, (doc, checks) in defects.items())
