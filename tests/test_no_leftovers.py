"""Nothing left behind: a conformance run, finished or interrupted with Ctrl-C in the middle of a check,
leaves no temp dirs or files, no unix sockets and no processes.

The run (`python -m pytest conformance` in a subprocess) gets a private /tmp: a mount namespace with a
fresh dir bound over /tmp. So whatever it leaves in "/tmp" is its own, however many other runs share
this machine's /tmp, and "anything new in /tmp" is simply "anything in that dir". Its processes carry a
marker in their environment and live in that mount namespace: a leftover process is one with either.
Where no mount namespace can be made (not root, no user namespaces) the fresh dir is the run's
DPCONFORM_TMP and TMPDIR instead: then only what honours those is seen, and processes by the marker.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from dpconform.fixtures.procs import killpg, stop_group
from dpconform.fixtures.waiting import wait_until
from tests.support.host import start_in_own_session

pytestmark = pytest.mark.xdist_group("no-leftovers")  # one conformance run at a time

REPO = Path(__file__).resolve().parents[1]
MARK = "DPCONFORM_LEAKCHECK"
# The restart- and crash-heavy checks (SIGKILL, SIGTERM, kubelet restarts, relaunches) and a few that
# use the session harness, the health hook and its control socket, rejection, admission and topology.
FULL_CHECKS = ("REG-01,REG-06,REG-08,LAW-07,LAW-09,ALC-04,ALC-09,PRS-01,PRS-02,PRS-03,KRS-01,KRS-02,KRS-03,KRS-04,"
               "TOP-01,POD-01,ROB-02")
# Ctrl-C lands in KRS-04 (a private harness, between kubelet restarts: its plugin has registered again),
# before ALC-04's session harness starts (one plugin instance at a time, the private checks first).
INTERRUPTED_CHECKS = "ALC-04,KRS-04"
INTERRUPTED_ROUNDS = ["--restart-rounds", "20"]    # KRS-04 long enough to be interrupted in the middle
FAST = ["--restart-rounds", "3"]
BIND_TMP = 'mount --bind "$0" /tmp && exec "$@"'


def _unshare_flags() -> list[str] | None:
    """unshare flags that give a command a private mount namespace here (root, else a user namespace)."""
    if shutil.which("unshare") is None:
        return None
    # a private /tmp would hide the checkout or the interpreter if they live under /tmp (a CI clone)
    if any(os.path.realpath(p).startswith("/tmp/") for p in (__file__, sys.executable)):
        return None
    candidates = [["--mount"]] if os.geteuid() == 0 else []
    candidates.append(["--user", "--map-root-user", "--mount"])
    probe = tempfile.mkdtemp(prefix="dpc-leak-probe-", dir="/tmp")
    try:
        for flags in candidates:
            try:
                done = subprocess.run(["unshare", *flags, "--propagation", "private", "sh", "-c", BIND_TMP, probe,
                                       "true"], capture_output=True, timeout=30)
            except subprocess.TimeoutExpired:
                continue
            if done.returncode == 0:
                return flags
    finally:
        os.rmdir(probe)
    return None


@pytest.fixture(scope="module")
def unshare_flags() -> list[str] | None:
    return _unshare_flags()


# -- what a run left ------------------------------------------------------------------------------
@dataclasses.dataclass
class Leftovers:
    entries: list[str]     # everything in the run's /tmp (paths as the run saw them)
    sockets: list[str]     # socket files there, and unix sockets still held open by the run's processes
    processes: list[str]   # "pid: cmdline" of the run's processes still alive


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _mnt_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


# pytest with Ctrl-C handled as a terminal sends it, whatever this test run inherited (a runner started in
# the background or under nohup ignores SIGINT, and pytest would then never see the Ctrl-C). Done in the
# run's own interpreter, not in a preexec_fn: that forces a plain fork() of this worker, whose gRPC threads
# (earlier tests' channels) make the child abort before its exec ("epoll_wait error: Bad file descriptor").
PYTEST_WITH_CTRL_C = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "runpy.run_module('pytest', run_name='__main__', alter_sys=True)")


class Run:
    """One `pytest conformance` subprocess in its own session, with a private /tmp and a marker."""

    def __init__(self, flags: list[str] | None, log_path: Path):
        self.flags = flags
        self.private = Path(tempfile.mkdtemp(prefix="dpc-leak-", dir="/tmp"))
        self.token = uuid.uuid4().hex
        self.log_path = log_path
        self.ns: str | None = None
        self._ns_fd: int | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def shown_tmp(self) -> str:
        """The private dir as the run sees it."""
        return str(self.private) if self.flags is None else "/tmp"

    def start(self, *args: str) -> None:
        env = {**os.environ, MARK: self.token, "TMPDIR": self.shown_tmp, "DPCONFORM_TMP": self.shown_tmp,
               "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, "-c", PYTEST_WITH_CTRL_C, "conformance", "-q", "-p", "no:cacheprovider",
                "-p", "no:randomly", *args]
        if self.flags is not None:
            argv = ["unshare", *self.flags, "--propagation", "private", "sh", "-c", BIND_TMP, str(self.private),
                    *argv]
        with open(self.log_path, "wb") as log:
            self.proc = start_in_own_session(argv, env, log)
        if self.flags is None:
            return
        mine = _mnt_ns(os.getpid())

        def entered():  # the run's namespace, held open: its id is not reused by someone else's meanwhile
            fd = os.open(f"/proc/{self.proc.pid}/ns/mnt", os.O_RDONLY)
            ns = os.readlink(f"/proc/self/fd/{fd}")
            if ns == mine:  # not unshared yet
                os.close(fd)
                return None
            self._ns_fd = fd
            return ns
        self.ns = self.wait_for(entered, 30, "the run's private mount namespace")

    def wait_for(self, cond, timeout: float, what: str):
        """cond()'s first truthy value within timeout; fails at once if the run exits (OSError: not yet)."""
        def check():
            if self.proc.poll() is not None:
                raise AssertionError(f"the run exited (code {self.proc.returncode}) before {what}:\n{self.output()}")
            try:
                return cond()
            except OSError:
                return None
        return wait_until(check, timeout, what, interval=0.1)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(self.proc, grace=5)
            pytest.fail(f"the run did not exit within {timeout:g}s:\n{self.output()}")

    # -- observation --------------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """The run's live processes: the marker in their environment, or in its mount namespace."""
        found = []
        marker = f"{MARK}={self.token}".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            pid = int(name)
            if marker in _read(f"/proc/{pid}/environ").split(b"\0") or (self.ns and _mnt_ns(pid) == self.ns):
                state = _read(f"/proc/{pid}/stat").rpartition(b")")[2].split()[:1]
                if state != [b"Z"]:  # a zombie holds nothing; its parent reaps it
                    found.append(pid)
        return found

    def leftovers(self) -> Leftovers:
        entries, socket_files = [], []
        for top, dirs, files in os.walk(self.private):
            for name in dirs + files:
                path = os.path.join(top, name)
                shown = os.path.join(self.shown_tmp, os.path.relpath(path, self.private))
                entries.append(shown)
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    socket_files.append(shown)
        pids = self.pids()
        procs = [f"{pid}: " + _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace")
                 for pid in pids]
        return Leftovers(sorted(entries), sorted(socket_files) + _held_unix_sockets(pids), procs)

    def plugin_logs(self) -> list[Path]:
        return sorted(self.private.glob("dpc-*/plugin-run*.log"))

    def close(self) -> None:
        """Whatever happened: the run and anything it left are gone afterwards."""
        if self.proc is not None:
            stop_group(self.proc, grace=0)
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._ns_fd is not None:
            os.close(self._ns_fd)
        shutil.rmtree(self.private, ignore_errors=True)


def _held_unix_sockets(pids: list[int]) -> list[str]:
    """'pid: path' of the bound unix sockets these processes hold open."""
    paths = {}
    for line in _read("/proc/net/unix").decode(errors="replace").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8:
            paths[fields[6]] = fields[7]
    held = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            m = re.fullmatch(r"socket:\[(\d+)\]", target)
            if m and m.group(1) in paths:
                held.append(f"{pid}: {paths[m.group(1)]}")
    return held


@pytest.fixture
def run(unshare_flags, tmp_path):
    made: list[Run] = []

    def make() -> Run:
        r = Run(unshare_flags, tmp_path / f"run{len(made)}.log")
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


def _assert_nothing_left(r: Run, before: Leftovers) -> None:
    after = r.leftovers()
    assert after == before, (f"the run left behind:\n  entries {after.entries}\n  sockets {after.sockets}\n"
                             f"  processes {after.processes}\n--- its output:\n{r.output()}")


# -- the checks -----------------------------------------------------------------------------------
@pytest.mark.timeout(400)
def test_a_full_run_leaves_nothing(run):
    r = run()
    before = r.leftovers()
    r.start("--checks", FULL_CHECKS, *FAST)
    code = r.wait(timeout=300)
    out = r.output()
    assert code in (0, 1) and re.search(r"\b\d+ passed", out), f"the run did not run its checks (exit {code}):\n{out}"
    _assert_nothing_left(r, before)


@pytest.mark.timeout(300)
def test_ctrl_c_in_the_middle_of_a_check_leaves_nothing(run):
    r = run()
    before = r.leftovers()
    r.start("--checks", INTERRUPTED_CHECKS, *INTERRUPTED_ROUNDS)

    def registered_again():
        return any(log.read_bytes().count(b"registered dpconform.io") >= 2 for log in r.plugin_logs())
    r.wait_for(registered_again, 120, "KRS-04's plugin registered again after a kubelet restart")
    assert any(b"fakegpu" in _read(f"/proc/{pid}/cmdline") for pid in r.pids()), "no plugin process running"
    killpg(r.proc.pid, signal.SIGINT)  # Ctrl-C: to pytest's process group (each plugin has its own session)
    code = r.wait(timeout=60)
    assert code == pytest.ExitCode.INTERRUPTED, f"exit {code} after SIGINT, not 2 (interrupted):\n{r.output()}"
    _assert_nothing_left(r, before)


@pytest.mark.timeout(300)
def test_ctrl_c_while_stopping_a_plugin_that_ignores_sigterm_leaves_nothing(run):
    """Ctrl-C during the SIGTERM grace period of a plugin's stop (PRS-02's teardown, the plugin ignores
    SIGTERM): the stop still SIGKILLs it, instead of leaving it running on a socket it re-creates."""
    r = run()
    before = r.leftovers()
    plugin = f"{shlex.quote(sys.executable)} -m dpconform fakegpu --plugin-dir {{plugin_dir}} --defect slow-sigterm"
    r.start("--checks", "PRS-02", "--sigterm-timeout", "1", "--plugin-cmd", plugin)
    # PRS-02's outcome printed: its teardown is stopping the plugin (SIGTERM, then a 3 s grace)
    r.wait_for(lambda: re.match(r"[.FEsx]", r.output()), 120, "PRS-02's outcome")
    assert any(b"fakegpu" in _read(f"/proc/{pid}/cmdline") for pid in r.pids()), "no plugin process running"
    killpg(r.proc.pid, signal.SIGINT)
    code = r.wait(timeout=60)
    assert code == pytest.ExitCode.INTERRUPTED, f"exit {code} after SIGINT, not 2 (interrupted):\n{r.output()}"
    _assert_nothing_left(r, before)


@pytest.mark.dra
@pytest.mark.timeout(300)
def test_dra_run_and_ctrl_c_leave_nothing(run):
    """--dra: the API server (etcd, kube-apiserver), the emulated kubelet's side and the driver, also after
    its SIGKILL and restart (DRA-15); then a second run interrupted while the driver serves."""
    from dpconform.fixtures.cluster.controlplane import API_ONLY, control_plane_unavailable
    from dpconform.fixtures.node.backend import DEFAULT_BIN_DIR
    missing = control_plane_unavailable(DEFAULT_BIN_DIR, API_ONLY)
    if missing:
        pytest.skip(f"DRA checks need an API server: {missing}")
    r = run()
    before = r.leftovers()
    r.start("--dra", "--checks", "DRA-01,DRA-09,DRA-15")
    code = r.wait(timeout=180)
    assert code == 0 and re.search(r"\b3 passed", r.output()), f"exit {code}:\n{r.output()}"
    _assert_nothing_left(r, before)

    r = run()
    before = r.leftovers()
    r.start("--dra")
    r.wait_for(lambda: any(b"fakegpu-dra" in _read(f"/proc/{pid}/cmdline") for pid in r.pids())
               and re.match(r"[.FEsx]", r.output()), 120, "the driver serving and a first DRA check done")
    killpg(r.proc.pid, signal.SIGINT)
    code = r.wait(timeout=60)
    assert code == pytest.ExitCode.INTERRUPTED, f"exit {code} after SIGINT, not 2 (interrupted):\n{r.output()}"
    _assert_nothing_left(r, before)


def test_sample_plugin_files_are_removed_as_files_or_as_the_directories_a_runtime_made(tmp_path):
    """The upstream sample plugin's /tmp/Dev-N is a file when it runs on the host and a directory when it
    runs in a container (the runtime makes a missing mount source as a directory); the session teardown
    in tests/conftest.py removes either, and one already gone, without error (a CI run failed on the
    directory)."""
    from tests.support import sample_plugin_files

    as_file, as_dir, gone, filled = (tmp_path / n for n in ("Dev-1", "Dev-2", "Dev-3", "Dev-4"))
    as_file.touch()
    as_dir.mkdir()
    filled.mkdir()
    (filled / "kept").touch()
    sample_plugin_files.remove([as_file, as_dir, gone, filled])
    assert not as_file.exists() and not as_dir.exists() and not gone.exists()
    assert (filled / "kept").exists(), "a directory with content is not ours to remove"
