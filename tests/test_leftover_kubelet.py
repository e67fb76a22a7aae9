"""A kubelet a killed run left is the host's state, not the plugin's failure: the node backend says so in one
line with the command that removes it (before: REG-01 failed, "a kubelet is already running here")."""
from __future__ import annotations

import os
import shutil
import subprocess

from dpconform.fixtures.node.backend import running_kubelet_problem
from dpconform.fixtures.procs import stop_group
from dpconform.fixtures.waiting import wait_until


def test_a_left_kubelet_is_named_with_its_dir_and_the_command_that_removes_it(tmp_path):
    # a process whose executable is named kubelet and whose arguments name a node backend's root, as a left
    # kubelet's do: cat, blocked opening a FIFO in that dir
    fake = tmp_path / "kubelet"
    shutil.copy("/bin/cat", fake)
    root = tmp_path / "dpconform-node-left"
    root.mkdir()
    os.mkfifo(root / "config")
    proc = subprocess.Popen([str(fake), str(root / "config")], start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        # Popen returns once exec closed the child's close-on-exec fds, before the kernel has set up its
        # arguments: /proc/PID/cmdline reads empty until then (make test on a busy machine read it so)
        wait_until(lambda: _cmdline(proc.pid), 10, f"the fake kubelet's command line (pid {proc.pid})")
        problem = running_kubelet_problem()
        assert problem and str(proc.pid) in problem, problem
        assert "a previous dpconform run left" in problem and f"pkill -f {root}" in problem, problem
    finally:
        stop_group(proc, grace=0)
    assert str(proc.pid) not in (running_kubelet_problem() or "")


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()
