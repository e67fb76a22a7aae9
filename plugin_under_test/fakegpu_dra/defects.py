"""Defect switches of the fake-GPU DRA driver (`dpconform fakegpu-dra --defect NAME`).

Each breaks one rule of the DRA checks (area DRA in docs/checks.md) on purpose. tests/test_dra_matrix.py
(`make dra`: the emulator backend) runs the DRA checks against the driver with each defect of DEFECTS and
asserts that exactly the listed checks fail; tests/test_dra_local.py (`make cluster`: the local cluster,
root) does the same for CLUSTER_DEFECTS. `make test` runs neither. In the code each defect is one small
branch marked with its name.
"""
from __future__ import annotations

DEFECTS: dict[str, tuple[str, tuple[str, ...]]] = {
    # registration
    "wrong-type": ('GetInfo answers type "CSIPlugin"', ("DRA-01",)),
    "wrong-name": ("GetInfo names another driver than the one its ResourceSlices and claims name", ("DRA-02",)),
    "register-before-serving": ("the registration socket appears 3 s before the DRA endpoint serves", ("DRA-03",)),
    "unknown-version": ('supported_versions is ["v2.DRAPlugin"] only', ("DRA-04",)),
    "unserved-version": ('lists "v1beta1.DRAPlugin" first but serves only v1', ("DRA-04",)),
    "notify-error": ("NotifyRegistrationStatus fails (INTERNAL)", ("DRA-05",)),
    # ResourceSlices
    "incomplete-pool": ("its pool says resourceSliceCount 2 but it publishes one slice (the scheduler skips it)",
                        ("DRA-06",)),
    "no-slices": ("publishes no ResourceSlice", ("DRA-06",)),
    "publish-once": ("publishes its ResourceSlice once: after a kubelet restart deleted it, it stays gone",
                     ("DRA-14",)),
    # prepare / unprepare
    "drop-claim": ("NodePrepareResources leaves the last claim out of its answer when given several",
                   ("DRA-07", "DRA-12")),
    "wrong-device": ("NodePrepareResources answers the pool's first device whatever the allocation says",
                     ("DRA-08", "DRA-16")),
    "missing-cdi": ("returns CDI device IDs but writes no CDI spec file", ("DRA-09",)),
    "cdi-leak": ("NodeUnprepareResources leaves the claim's CDI spec file behind", ("DRA-09", "DRA-15")),
    "prepare-not-idempotent": ('a second NodePrepareResources for a prepared claim gets "already prepared"',
                               ("DRA-10", "DRA-14", "DRA-15")),
    "unprepare-unknown-error": ("NodeUnprepareResources of a claim it does not know is a per-claim error",
                                ("DRA-11",)),
    "fail-whole-request": ("one claim it cannot prepare fails the whole call (INTERNAL) instead of that claim",
                           ("DRA-12",)),
    "no-uid-check": ("prepares a claim by namespace/name without comparing its UID", ("DRA-13",)),
    "wait-for-uid": ("NodePrepareResources waits for a claim to show the request's UID (as if its cache lagged): "
                     "for a replaced claim it never does, and the call hangs past the kubelet's deadline",
                     ("DRA-13",)),
    "single-getinfo": ("answers GetInfo once per process (a restarted kubelet cannot register it again)",
                       ("DRA-14",)),
    "forget-prepared": ("keeps prepared claims in memory only: after a restart, unprepare leaves the CDI spec",
                        ("DRA-15",)),
    "prepare-race": ("builds answers in a shared buffer: concurrent prepares get each other's devices", ("DRA-16",)),
    "health-wrong-device": ("the health stream reports a fault on the next device, not the faulty one",
                            ("DRA-17",)),
    "unlisted-health": ("serves DRAResourceHealth but lists only its DRAPlugin services in supported_versions "
                        "(a kubelet from 1.37 then never watches its health)", ("DRA-20",)),
    # the whole path (DRA-18, --backend local: CLUSTER_DEFECTS); on the emulator no check may fail
    "unpublish-prepared": ("publishes only free devices, as a device plugin would: a prepared device leaves its "
                           "ResourceSlice until unprepared (a running pod's devices are not published)", ()),
    "template-claims-only": ("refuses to prepare a claim the scheduler made for an extended resource (annotated "
                             "resource.kubernetes.io/extended-resource-claim), as a driver written before "
                             "DRAExtendedResource might", ()),
}


# The same switches on the local cluster (`--dra --backend local`): defect -> the checks it must break there
# (DRA-18 runs a pod with two claims through the real kubelet and scheduler: each of its parts has one here:
# the pod runs, its devices are published, the kubelet's record of the answer names them, its CDI IDs resolve).
CLUSTER_DEFECTS: dict[str, tuple[str, ...]] = {
    "drop-claim": ("DRA-07", "DRA-12", "DRA-18"),
    "unpublish-prepared": ("DRA-18",),
    "wrong-device": ("DRA-08", "DRA-16", "DRA-18"),
    "missing-cdi": ("DRA-09", "DRA-18"),
    "template-claims-only": ("DRA-19",),
    "unlisted-health": ("DRA-20", "DRA-21"),
    "health-wrong-device": ("DRA-17", "DRA-21"),
}


def describe() -> str:
    """The --help epilog: each defect with the checks it breaks (those only on the local cluster marked so)."""
    from dpconform.plugin_under_test.fakegpu.defects import describe as describe_table
    return describe_table({name: (doc, checks + tuple(f"{c} on --backend local" for c in CLUSTER_DEFECTS.get(name, ())
                                                      if c not in checks))
                           for name, (doc, checks) in DEFECTS.items()})
