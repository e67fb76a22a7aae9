"""SIGTERM is Ctrl-C (fixtures/stop_signals.py): a run stopped with SIGTERM in the middle, as `timeout`, a
CI job's cancel or `kill` stop it, leaves no process and no dir of the suite's, writes its partial report
marked interrupted, and exits with pytest's interrupted code; the next run passes. Here on the emulator,
serial and on two xdist workers, through pytest and `dpconform run`, with the bundled plugin and with it
given as a vendor's --plugin-cmd. The signal goes to the run's process group, as `timeout` sends it."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from dpconform.fixtures.waiting import wait_until
from tests.support.conformance_runner import ROOT

INTERRUPTED = 2          # pytest.ExitCode.INTERRUPTED


def _ours(marker: str) -> list[str]:
    """Processes whose command line names `marker` (the run's own temp base): ps -ww, zombies left out."""
    out = subprocess.run(["ps", "-eww", "-o", "pid=,stat=,args="], capture_output=True, text=True).stdout
    return [ln.strip() for ln in out.splitlines() if marker in ln and not ln.split()[1].startswith("Z")
            and "ps -eww" not in ln]


@pytest.fixture
def base():
    """The runs' temp base (DPCONFORM_TMP): short, unix socket paths in it are limited to 108 bytes."""
    d = tempfile.mkdtemp(prefix="dpc-stop-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _stop_in_the_middle(argv: list[str], base: str, sig=signal.SIGTERM, *, within: float = 60,
                        env: dict | None = None) -> tuple[int, str]:
    """Start the run with `base` as its temp base (DPCONFORM_TMP; `env` added), signal it once a plugin of the
    run serves (its command line names the base); its exit code and output."""
    env = dict(os.environ, DPCONFORM_TMP=str(base), **(env or {}))
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        # in the middle: a plugin of the run serves (its command line names the run's temp base)
        wait_until(lambda: any("fakegpu" in p for p in _ours(base)), within, "a plugin of the run serving",
                   alive=lambda: _still_running(proc))
        os.kill(proc.pid, sig)            # as `timeout` does: to the run, then to its process group
        os.killpg(proc.pid, sig)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out


def _still_running(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        raise AssertionError(f"the run ended (exit {proc.returncode}) before a plugin served:\n"
                             f"{proc.stdout.read()[-3000:] if proc.stdout else ''}")


@pytest.mark.parametrize("how", ["pytest-serial", "pytest-n2", "dpconform-run-plugin-cmd"])
def test_sigterm_in_the_middle_leaves_nothing(tmp_path, base, how):
    report = tmp_path / "report.json"
    py = sys.executable
    argv = {"pytest-serial": [py, "-m", "pytest", "conformance", "-p", "no:randomly"],
            "pytest-n2": [py, "-m", "pytest", "conformance", "-p", "no:randomly", "-n", "2"],
            "dpconform-run-plugin-cmd": [py, "-m", "dpconform", "run", "--plugin-cmd",
                                         f"{py} -m dpconform fakegpu --plugin-dir {{plugin_dir}}"]}[how]
    rc, out = _stop_in_the_middle([*argv, "-q", "--report", str(report)], base)
    assert rc == INTERRUPTED, f"exit {rc}, not pytest's interrupted code:\n{out[-3000:]}"
    assert not _ours(base), f"left running: {_ours(base)}"
    left = [n for n in os.listdir(base) if not n.startswith("pytest-of-")]    # pytest's own temp dirs: pytest's
    assert left == [], f"left in the temp base: {left}"
    doc = json.loads(report.read_text())
    assert doc["interrupted"] == "SIGTERM" and doc["verdict"] == "interrupted", doc.get("interrupted")
    assert "nothing was checked" not in out, out[-3000:]       # the checks so far were skipped: it was stopped
    assert "SIGTERM" in out and "Traceback" not in out.split("dpconform conformance summary")[0][-2000:], out[-3000:]


# what the node and local backends start: a kubelet, containerd and its shims, a control plane
DAEMONS = ("kubelet", "containerd", "containerd-shim", "containerd-shim-runc-v2", "etcd", "kube-apiserver",
           "kube-controller-manager", "kube-scheduler")


def _host_state() -> tuple[set[str], set[str]]:
    """The daemons the real backends start that are running (pid and command line) and the mount table."""
    out = subprocess.run(["ps", "-eww", "-o", "pid=,stat=,args="], capture_output=True, text=True).stdout
    procs = {ln.strip() for ln in out.splitlines()
             if len(ln.split()) > 2 and os.path.basename(ln.split()[2]) in DAEMONS
             and not ln.split()[1].startswith("Z")}
    with open("/proc/self/mounts") as f:
        return procs, set(f.read().splitlines())


@pytest.mark.node
def test_sigterm_on_the_node_backend_leaves_no_kubelet_containerd_or_mount(tmp_path, base):
    """The node backend: its containerd, kubelet, the pods' shims and the plugin stop, its mounts go."""
    from dpconform.fixtures.backends.node import node_unavailable
    reason = node_unavailable()
    if reason:
        pytest.skip(reason)
    before = _host_state()
    report = tmp_path / "report.json"
    rc, out = _stop_in_the_middle([sys.executable, "-m", "pytest", "conformance", "-p", "no:randomly", "-q",
                                   "--backend", "node", "--report", str(report)], base)
    assert rc == INTERRUPTED, f"exit {rc}:\n{out[-3000:]}"
    _assert_left_nothing(base, before, report)


def _assert_left_nothing(base: str, before: tuple[set[str], set[str]], report) -> None:
    assert not _ours(base), f"left running: {_ours(base)}"
    procs, mounts = _host_state()
    assert procs <= before[0], f"left running: {sorted(procs - before[0])}"
    assert mounts <= before[1], f"left mounted: {sorted(mounts - before[1])}"
    left = [n for n in os.listdir(base) if not n.startswith("pytest-of-")]    # pytest's own temp dirs: pytest's
    assert left == [], f"left in the temp base: {left}"
    doc = json.loads(report.read_text())
    assert doc["interrupted"] == "SIGTERM" and doc["verdict"] == "interrupted", doc


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_sigterm_on_the_local_backend_leaves_no_control_plane_kubelet_or_mount(tmp_path, base):
    """The local backend: its control plane (etcd, API server, controller manager, scheduler), containerd,
    kubelet, the pods' shims and the plugin stop, its mounts and its cluster dir go; the next run passes."""
    from dpconform.fixtures.cluster.local import unavailable
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    before = _host_state()
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "pytest", "conformance", "-p", "no:randomly", "-q", "--backend", "local"]
    rc, out = _stop_in_the_middle([*argv, "--report", str(report)], base, within=300, env={"TMPDIR": base})
    assert rc == INTERRUPTED and "nothing was checked" not in out, f"exit {rc}:\n{out[-3000:]}"
    _assert_left_nothing(base, before, report)
    again = subprocess.run([*argv, "--checks", "REG-01,ALC-01", "--report", str(report)], cwd=ROOT,
                           env=dict(os.environ, DPCONFORM_TMP=base, TMPDIR=base), capture_output=True, text=True,
                           timeout=400)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]


def test_a_second_signal_ends_the_clean_up_at_once_and_names_what_is_left():
    code = ("import os, signal, time\n"
            "from dpconform.fixtures import stop_signals\n"
            "stop_signals.install()\n"
            "stop_signals.holding('h', '/tmp/dpc-x (plugin pid 1)')\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n"
            "except KeyboardInterrupt as e:\n"
            "    print('first:', e, flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"      # at once: timeout's duplicate, the same request
            "    time.sleep(1.2)\n"
            "    os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n"
            "print('not stopped')\n")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert p.returncode == 128 + signal.SIGTERM and time.monotonic() - t0 < 5, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.startswith("first: SIGTERM: the run stops as on Ctrl-C") and "not stopped" not in p.stdout
    assert "a second SIGTERM during the clean-up: stopping now; left: /tmp/dpc-x (plugin pid 1)" in p.stderr


SWALLOWING_TESTS = '''
import os, signal, time

class SignalsInDel:
    """Its __del__ gets the SIGTERM: Python runs the handler there and only prints what it raises."""
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:      # bytecodes, so the handler runs inside __del__
            pass

def test_first():
    SignalsInDel()
    time.sleep(0.2)

def test_second_never_runs():
    open(os.environ["DPC_SECOND_RAN"], "w").close()
'''


def test_a_sigterm_whose_interrupt_python_swallows_still_stops_the_run(tmp_path):
    """Reproducer (make test: a SIGTERM-ed catalogue finished with exit 0): the handler's KeyboardInterrupt
    raised inside a __del__ is printed as unraisable and lost; the run stops at the next test boundary."""
    (tmp_path / "test_swallow.py").write_text(SWALLOWING_TESTS)
    marker = tmp_path / "second-ran"
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "dpconform.fixtures.stop_signals", "-p",
                          "no:randomly", "-p", "no:cacheprovider", "-q", "test_swallow.py"], cwd=tmp_path,
                         env=dict(os.environ, DPC_SECOND_RAN=str(marker)),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == INTERRUPTED and not marker.exists(), (out.returncode, out.stdout[-2000:])
    assert "SIGTERM: the run stops as on Ctrl-C" in out.stdout, out.stdout[-2000:]


INTERRUPTED_START = '''
import os, signal, subprocess, sys, time
from dpconform.fixtures import launcher, stop_signals

real_popen = subprocess.Popen


def popen_then_signal(*args, **kwargs):
    """The child made, then the stop signal before Popen returns (as when it comes while Popen waits for the
    exec): the handler runs during the sleep."""
    proc = real_popen(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    return proc


launcher.subprocess.Popen = popen_then_signal
stop_signals.install()
plugin = launcher.PluginProcess("sh -c 'sleep 60' {plugin_dir}", sys.argv[1], sys.argv[1])
try:
    plugin.start()
    print("no interrupt")
except KeyboardInterrupt:
    print("interrupted; recorded:", plugin.pid is not None, flush=True)
finally:
    launcher.subprocess.Popen = real_popen
    plugin.stop() if plugin.proc is not None else None
'''


def test_a_stop_signal_while_the_plugin_starts_leaves_it_recorded(tmp_path):
    """Reproducer (make test: `pytest -n 2` SIGTERM-ed left a fakegpu running): the interrupt came between the
    plugin's fork and its recording, so nothing stopped it. Now it waits for the end of the start."""
    r = subprocess.run([sys.executable, "-c", INTERRUPTED_START, str(tmp_path)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    left = _ours(str(tmp_path))                   # the plugin's command line names its dir
    for line in left:
        os.kill(int(line.split()[0]), signal.SIGKILL)
    assert r.stdout.strip() == "interrupted; recorded: True" and not left, r.stdout + r.stderr[-2000:] + str(left)
