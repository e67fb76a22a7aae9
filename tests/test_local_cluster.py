"""The local cluster end to end: kwokctl's control plane + the real kubelet + the upstream sample plugin.

Needs root, `make kube-bins` and `make cluster-bins`; skipped (one-line reason) otherwise. Run:
`make cluster`, or
    .venv/bin/python -m pytest tests/test_local_cluster.py -m cluster -n 0 -p no:randomly
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from dpconform.fixtures import kube_versions
from dpconform.fixtures.cluster.local import REQUEST_TIMEOUT, TOLERATIONS, LocalCluster, unavailable
from dpconform.fixtures.node import images
from dpconform.fixtures.node.containerd import CNI_BRIDGE
from dpconform.fixtures.node.util import pids_with_arg, wait_for
from dpconform.fixtures.procs import alive, stop_group

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PLUGIN = kube_versions.bin_dir() / "sample-device-plugin"
RESOURCE = "example.com/resource"
SAMPLE_DEVICES = ("Dev-1", "Dev-2")
IMAGE = "dpconform.local/workload:cluster-test"   # imported by the test itself (import_image)
NS = "default"


def _pod(name: str, count: int) -> dict:
    q = {RESOURCE: str(count)}     # the client wants quantities as strings
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"hostNetwork": True, "dnsPolicy": "Default", "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                     "tolerations": TOLERATIONS,
                     "containers": [{"name": "workload", "image": IMAGE, "imagePullPolicy": "Never",
                                     "resources": {"limits": q, "requests": dict(q)}}]}}


@pytest.mark.smoke
def test_local_cluster_sample_plugin(tmp_path):
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    from kubernetes import client, config

    pids: list[int] = []
    t_start = time.monotonic()
    cluster = LocalCluster(keep_logs_dir=tmp_path / "logs")
    try:
        with cluster:
            t_up = time.monotonic() - t_start
            root = cluster.root
            pids = [cluster.node.kubelet.daemon.pid, cluster.node.containerd.daemon.pid,
                    *pids_with_arg(cluster.workdir)]   # etcd, kube-apiserver, -controller-manager, -scheduler
            assert len(pids) >= 6, f"control plane processes: {pids}"
            api = config.new_client_from_config(config_file=cluster.kubeconfig)
            core = client.CoreV1Api(api)
            try:
                assert client.VersionApi(api).get_code(_request_timeout=REQUEST_TIMEOUT).git_version == kube_versions.DEFAULT.tag
                node = core.read_node(cluster.node_name, _request_timeout=REQUEST_TIMEOUT)
                assert {a.type: a.address for a in node.status.addresses}["InternalIP"] == cluster.node_ip
                ready = next(c for c in node.status.conditions if c.type == "Ready")
                assert ready.status == "True", f"{ready.reason}: {ready.message}"

                archive = str(tmp_path / "workload.tar")
                images.write_workload(archive, IMAGE)
                cluster.import_image(archive, IMAGE)

                plugin_log = open(tmp_path / "sample-device-plugin.log", "wb")
                plugin = subprocess.Popen([str(SAMPLE_PLUGIN)], env={"PATH": os.environ.get("PATH", ""),
                                                                     "PLUGIN_SOCK_DIR": cluster.plugin_dir},
                                          stdout=plugin_log, stderr=plugin_log, start_new_session=True)
                try:
                    def advertised():
                        st = core.read_node(cluster.node_name, _request_timeout=REQUEST_TIMEOUT).status
                        return ((st.capacity or {}).get(RESOURCE) == "2"
                                and (st.allocatable or {}).get(RESOURCE) == "2")
                    t0 = time.monotonic()
                    wait_for(advertised, 30, f"Node capacity/allocatable {RESOURCE}: 2", interval=0.25,
                             on_timeout=cluster.logs)
                    t_adv = time.monotonic() - t0

                    core.create_namespaced_pod(NS, _pod("one", 1), _request_timeout=REQUEST_TIMEOUT)
                    t0 = time.monotonic()

                    def running():
                        p = core.read_namespaced_pod("one", NS, _request_timeout=REQUEST_TIMEOUT)
                        assert p.status.phase not in ("Failed", "Succeeded"), p.status
                        return p if p.status.phase == "Running" else None
                    pod = wait_for(running, 60, "pod one (1 device) to run", interval=0.25, on_timeout=cluster.logs)
                    t_run = time.monotonic() - t0
                    assert pod.spec.node_name == cluster.node_name

                    # the API server reaches the kubelet (InternalIP, client certificate): the pod's log
                    def logged():
                        return images.parse_report(core.read_namespaced_pod_log(
                            "one", NS, container="workload", _request_timeout=REQUEST_TIMEOUT).splitlines())
                    report = wait_for(logged, 30, "pod one's report through the API server", interval=0.25)
                    given = [m for m in report.mounts if m.target in {f"/tmp/{d}" for d in SAMPLE_DEVICES}]
                    assert len(given) == 1, f"expected one /tmp/Dev-N mount, got {report.mounts}"

                    core.create_namespaced_pod(NS, _pod("three", 3), _request_timeout=REQUEST_TIMEOUT)

                    def unschedulable():
                        p = core.read_namespaced_pod("three", NS, _request_timeout=REQUEST_TIMEOUT)
                        assert p.status.phase == "Pending", p.status
                        return next((c for c in p.status.conditions or []
                                     if c.type == "PodScheduled" and c.status == "False"), None)
                    cond = wait_for(unschedulable, 30, "pod three (3 devices) to be unschedulable", interval=0.25)
                    assert f"Insufficient {RESOURCE}" in cond.message, cond.message

                    t0 = time.monotonic()
                    cluster.restart_kubelet()
                    t_restart = time.monotonic() - t0
                    assert core.read_namespaced_pod("one", NS, _request_timeout=REQUEST_TIMEOUT).status.phase == "Running"
                finally:
                    stop_group(plugin, 5)
                    plugin_log.close()
            finally:
                api.close()
            print(f"cluster up {t_up:.1f}s, {RESOURCE} advertised {t_adv:.1f}s after the plugin started, "
                  f"pod running {t_run:.1f}s after creation, kubelet restart {t_restart:.1f}s")
        assert not cluster.teardown_errors
        # nothing of ours is left
        left = [p for p in pids if alive(p)]
        assert not left, f"still running after stop(): {left}"
        assert not pids_with_arg(root), f"processes with {root} in argv: {pids_with_arg(root)}"
        assert not os.path.exists(root)
        assert not os.path.exists(os.path.join(cluster.plugin_dir, "kubelet.sock"))
        assert not os.path.exists(f"/sys/class/net/{CNI_BRIDGE}")
    finally:
        cluster.stop()   # idempotent: only does anything when the body failed before `with` ended
