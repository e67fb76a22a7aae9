"""test_differential.py::test_checkpoint_file compares the checkpoint's views in settled states: each view
waits for the write its row is about. Its reproducer: the same scenario against an emulator that writes
the checkpoint 0.3 s after it has taken a change in (as a busy kubelet does) gives the same views as a
prompt one. The body before the fix read the first view as soon as the devices arrived and got
{'file': None} here every time (make node on 1.35 once failed that way: the emulator had not written yet)."""
from __future__ import annotations

import time

from dpconform.fixtures.config import SuiteConfig
from dpconform.fixtures.harness import Harness
from dpconform.fixtures.kubelet.checkpoint import CheckpointFile
from tests.support.checkpoint_history import checkpoint_history

LATE_S = 0.3


def _history() -> dict:
    h = Harness(SuiteConfig(), backend="emulator")
    try:
        return checkpoint_history(h)
    finally:
        h.close()


def test_checkpoint_views_are_the_same_when_the_kubelet_writes_late(monkeypatch):
    prompt = _history()
    assert prompt["after_register"].get("registered"), prompt["after_register"]
    write_now = CheckpointFile.write_now

    def late(self) -> None:
        time.sleep(LATE_S)
        write_now(self)
    monkeypatch.setattr(CheckpointFile, "write_now", late)
    assert _history() == prompt
