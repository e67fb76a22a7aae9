"""A plugin that holds what only one instance on a host can: a fixed TCP port (a metrics endpoint, as
many real plugins serve) and a fixed lock file. It takes both first, exits 1 with the usual texts when it
cannot ("bind: address already in use", "lock ... held by another process"), then runs the bundled fake
GPU in this process (same arguments). Used to prove the suite runs one instance at a time.

    python -m tests.plugins.host_bound --port 39117 --lock /tmp/dpc-host-bound.lock -- --plugin-dir DIR
"""
from __future__ import annotations

import argparse
import fcntl
import os
import socket
import sys

from dpconform.cli import main as dpconform_main


def hold_port(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # a restart right after a crash binds again
    try:
        s.bind(("127.0.0.1", port))
    except OSError as e:
        print(f"metrics: listen tcp 127.0.0.1:{port}: bind: address already in use ({e})", file=sys.stderr, flush=True)
        raise SystemExit(1)
    s.listen(8)
    return s


def hold_lock(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"lock {path} is held by another process", file=sys.stderr, flush=True)
        raise SystemExit(1)
    return fd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--lock", required=True)
    ap.add_argument("fakegpu_args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    held = (hold_port(args.port), hold_lock(args.lock))   # kept for the process's life
    rest = args.fakegpu_args[1:] if args.fakegpu_args[:1] == ["--"] else args.fakegpu_args
    try:
        return dpconform_main(["fakegpu", *rest])
    finally:
        del held


if __name__ == "__main__":
    sys.exit(main())
