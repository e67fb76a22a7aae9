"""Our mock NVML library (tools/mock-nvml, bin/mock-nvml/libnvidia-ml.so.1) as NVML's consumers load it: pynvml's
real code path in a process with LD_LIBRARY_PATH naming it, then our NVML reference plugin's whole catalogue on
the emulator through it. Built by `make bin/mock-nvml/libnvidia-ml.so.1` (cgo), here when missing or stale."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.conformance_runner import FAST, _run, outcomes
from tests.support.mock_nvml import built, pynvml_says, unsupported_calls, with_mock

PY = shlex.quote(sys.executable)


@pytest.fixture(scope="module")
def mock_nvml() -> Path:
    return built()


NODE = """
n = pynvml.nvmlDeviceGetCount()
hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
out["count"] = n
out["names"] = sorted({pynvml.nvmlDeviceGetName(h) for h in hs})
out["uuids"] = [pynvml.nvmlDeviceGetUUID(h) for h in hs]
out["bus"] = [pynvml.nvmlDeviceGetPciInfo(h).busId for h in hs]
out["numa"] = [pynvml.nvmlDeviceGetNumaNodeId(h) for h in hs]
out["driver"] = pynvml.nvmlSystemGetDriverVersion()
out["same_switch"] = pynvml.nvmlDeviceGetTopologyCommonAncestor(hs[0], hs[1])
out["other_socket"] = pynvml.nvmlDeviceGetTopologyCommonAncestor(hs[0], hs[7])
out["by_uuid"] = pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(out["uuids"][3]))
try:
    pynvml.nvmlDeviceGetPowerUsage(hs[0])
except pynvml.NVMLError as e:
    out["unknown"] = type(e).__name__
"""


def test_pynvml_sees_a_dgx_a100_with_stable_uuids(mock_nvml):
    first, again = pynvml_says(mock_nvml, NODE), pynvml_says(mock_nvml, NODE)
    assert first["count"] == 8 and first["names"] == ["Mock NVIDIA A100-SXM4-40GB"], first
    assert first["uuids"] == again["uuids"] and len(set(first["uuids"])) == 8, (first, again)
    assert all(u.startswith("GPU-") for u in first["uuids"])
    assert first["numa"] == [0, 0, 0, 0, 1, 1, 1, 1] and first["bus"][0] == "00000000:07:00.0", first
    assert first["same_switch"] == 10 and first["other_socket"] == 50 and first["by_uuid"] == 3, first
    assert first["driver"] == "550.54.15"
    assert first["unknown"] == "NVMLError_NotSupported", first      # any other NVML function: no crash
    h100 = pynvml_says(mock_nvml, NODE, DPCONFORM_MOCK_NVML_PROFILE="h100x8")
    assert h100["names"] == ["NVIDIA H100 80GB HBM3"] and set(h100["uuids"]).isdisjoint(first["uuids"]), h100


def test_an_xid_sent_on_the_control_socket_reaches_an_event_set(mock_nvml, tmp_path):
    """The control socket speaks the reference plugins' control protocol with the fake NVML's operations."""
    ctl = tmp_path / "nvml.ctl"
    code = f"""
    import socket
    h = pynvml.nvmlDeviceGetHandleByIndex(2)
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    try:
        pynvml.nvmlEventSetWait(es, 10)
    except pynvml.NVMLError as e:
        out["before"] = type(e).__name__
    c = socket.socket(socket.AF_UNIX)
    c.connect({str(ctl)!r})
    answers = c.makefile()
    out["answers"] = []
    for req in ('{{"op": "status"}}', '{{"op": "xid", "device": "' + pynvml.nvmlDeviceGetUUID(h) + '", "xid": 79}}',
                '{{"op": "xid", "device": "GPU-nope", "xid": 79}}', '{{"op": "recover", "device": "2"}}'):
        c.sendall((req + "\\n").encode())
        out["answers"].append(json.loads(answers.readline()))
    e = pynvml.nvmlEventSetWait(es, 5000)
    out["event"] = [e.eventType, e.eventData, pynvml.nvmlDeviceGetIndex(e.device)]
    pynvml.nvmlEventSetFree(es)
    """
    got = pynvml_says(mock_nvml, code, DPCONFORM_MOCK_NVML_CONTROL=str(ctl))
    assert got["before"] == "NVMLError_Timeout", got
    status, xid, nope, recover = got["answers"]
    assert [d["listeners"] for d in status["devices"]] == [0, 0, 1, 0, 0, 0, 0, 0], status
    assert xid["ok"] and xid["delivered"] == 1 and xid["index"] == 2, xid
    assert not nope["ok"] and "no GPU GPU-nope" in nope["error"], nope
    assert recover["unsupported"], recover              # the set listens for XIDs only: nobody would recover
    assert got["event"] == [0x8, 79, 2], got


@pytest.mark.third_party            # make third-party: a whole catalogue (the library's own tests stay in make test)
def test_the_nvml_plugin_passes_the_catalogue_through_the_mock_library(mock_nvml, tmp_path, monkeypatch):
    """pynvml's real code path, the mock library beneath: the NVML plugin discovers the 8 GPUs and their NUMA
    nodes and passes the catalogue, its health flipped through the mock's XID and recovery events."""
    ctl = str(tmp_path / "nvml.ctl")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(mock_nvml.parent))     # the run passes them on to the plugin
    monkeypatch.setenv("DPCONFORM_MOCK_NVML_CONTROL", ctl)
    report = str(tmp_path / "report.json")
    report, out = _run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--strict",
                        "--plugin-cmd", f"{PY} -m dpconform nvml-plugin --nvml real --health-recovery "
                        "--plugin-dir {plugin_dir}", "--expected-devices", "8", "--resource", "nvidia.com/gpu",
                        "--health-hook", f"{PY} -m dpconform nvml-plugin health --control {ctl} {{device}} {{health}}",
                        "--report", report, *FAST], report, None, timeout=420)
    got = outcomes(report)
    bad = {c: o for c, o in got.items() if o not in ("passed", "skipped")}
    assert not bad, f"the NVML plugin through the mock library: {bad}\n{out}"
    assert report["plugin"]["devices"] == 8, out
    assert {c: got[c] for c in ("LAW-07", "ALC-09", "TOP-01", "TOP-02")} == dict.fromkeys(
        ("LAW-07", "ALC-09", "TOP-01", "TOP-02"), "passed"), out


# What a plugin calls that the mock answers "Not Supported" (its generated stubs log each call with
# DPCONFORM_MOCK_NVML_UNSUPPORTED_LOG): none for ours; NVIDIA's calls are checked in its catalogue run.
PLUGIN_START = """
import threading
from dpconform.plugin_under_test.nvml import backend, discovery, health
nvml = backend.load("real")
nvml.nvmlInit()
gpus = discovery.discover(nvml)
seen = []
monitor = health.HealthMonitor(nvml, gpus, lambda uuid, h: seen.append((uuid, h)), recovery=True,
                               wait_timeout_ms=50)
monitor.start()
assert monitor.ready.wait(10), "the health watch never registered its events"
monitor.stop()
nvml.nvmlShutdown()
print(len(gpus), seen)
"""


def test_our_nvml_plugin_calls_only_what_the_mock_implements(mock_nvml, tmp_path):
    """Discovery (count, handles, UUIDs, names, bus IDs, NUMA nodes, topology) and the health watch (an event
    set, XID and recovery events on every GPU) of the NVML reference plugin, on pynvml's real code path."""
    log = tmp_path / "unsupported.log"
    r = subprocess.run([sys.executable, "-c", PLUGIN_START], capture_output=True, text=True, timeout=60,
                       env=with_mock(mock_nvml, DPCONFORM_MOCK_NVML_UNSUPPORTED_LOG=str(log)))
    assert r.returncode == 0 and r.stdout.startswith("8 []"), r.stdout + r.stderr[-2000:]
    assert not unsupported_calls(log), unsupported_calls(log)


def test_a_call_the_mock_does_not_implement_is_logged(mock_nvml, tmp_path):
    """What the test above relies on: a stub's call is written to the log (and answers Not Supported)."""
    log = tmp_path / "unsupported.log"
    got = pynvml_says(mock_nvml, """
    try:
        pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0))
    except pynvml.NVMLError as e:
        out["error"] = str(e)
    """, DPCONFORM_MOCK_NVML_UNSUPPORTED_LOG=str(log))
    assert got == {"error": "Not Supported"} and unsupported_calls(log) == {"nvmlDeviceGetPowerUsage"}
