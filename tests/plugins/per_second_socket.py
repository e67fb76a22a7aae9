"""The bundled fake GPU, naming its socket by the second (dp-<unix seconds>.sock, a common pattern) and
exiting "address in use" when that file exists: what a relaunch within the crash's second meets.

    python -m tests.plugins.per_second_socket --plugin-dir DIR ...   (the fake GPU's arguments)
"""
from __future__ import annotations

import os
import sys
import time

from dpconform.cli import main as dpconform_main
from dpconform.plugin_under_test.kit import PluginServer

_start = PluginServer.start


def _per_second_name(self) -> str:
    return f"{self.socket_prefix}-{int(time.time())}.sock"


def _start_unless_taken(self) -> None:
    if not self.serving and os.path.lexists(self.socket_path):
        print(f"listen unix {self.socket_path}: bind: address already in use", file=sys.stderr, flush=True)
        raise SystemExit(1)
    _start(self)


PluginServer.new_socket_name = _per_second_name
PluginServer.start = _start_unless_taken

if __name__ == "__main__":
    sys.exit(dpconform_main(["fakegpu", *sys.argv[1:]]))
