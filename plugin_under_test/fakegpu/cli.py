"""`dpconform fakegpu ...`: run the fake-GPU device plugin; `dpconform fakegpu health ...`: flip a device's health."""
from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading

from dpconform.kubeletapi.constants import HEALTHY, UNHEALTHY
from dpconform.protocols.control_socket import request
from dpconform.plugin_under_test.fakegpu.defects import describe
# the plugin's own modules (gRPC) are imported by main(): `health` is a health hook, run once per health
# change, and imports only the control channel's client

log = logging.getLogger("dpconform.fakegpu")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpconform fakegpu", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The fake-GPU reference device plugin. Flags override the --config file.\n"
                    "Health control: dpconform fakegpu health --control PATH DEVICE_ID Healthy|Unhealthy",
        epilog="defects (--defect NAME, repeatable):\n" + describe())
    p.add_argument("--config", metavar="FILE.yaml", help="YAML config (keys: see plugin_under_test/fakegpu/config.py)")
    p.add_argument("--plugin-dir", help="device-plugin dir holding kubelet.sock (default $DP_PLUGIN_DIR, "
                                        "else /var/lib/kubelet/device-plugins)")
    p.add_argument("--resource", help="extended resource name (default dpconform.io/fakegpu)")
    p.add_argument("--devices", type=int, help="number of devices (default 4)")
    p.add_argument("--numa-nodes", type=int, help="NUMA nodes, devices spread evenly in blocks (default 2; 0: no topology)")
    p.add_argument("--id-scheme", choices=("index", "uuid"), help="fakegpu-N (default) or stable GPU-<uuid5>")
    p.add_argument("--control", metavar="PATH", help="control socket (not in the plugin dir)")
    p.add_argument("--defect", dest="defects", action="append", metavar="NAME", help="break one rule on purpose")
    p.add_argument("--allocate-latency-ms", type=float, help="extra latency per Allocate call")
    p.add_argument("--pre-start-required", action="store_const", const=True, help="advertise PreStartContainer")
    p.add_argument("--no-preferred", dest="get_preferred_allocation_available", action="store_const", const=False,
                   help="do not advertise GetPreferredAllocation")
    p.add_argument("--mounts", action="store_const", const=True, help="add a read-only mount to Allocate answers")
    p.add_argument("--cdi", action="store_const", const=True, help="add CDI device names to Allocate answers")
    p.add_argument("--dev-dir", help="where the fake device nodes are created (default: a dir under $TMPDIR, "
                                     "one per plugin dir and resource, removed on exit)")
    p.add_argument("--log-level", help="DEBUG, INFO (default), WARNING, ERROR")
    return p


def health_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="dpconform fakegpu health", description="Set a fake GPU's health.")
    p.add_argument("--control", required=True, metavar="PATH", help="the plugin's control socket")
    p.add_argument("device_id")
    p.add_argument("health", choices=(HEALTHY, UNHEALTHY))
    p.add_argument("--timeout", type=float, default=10.0)
    args = p.parse_args(argv)
    try:
        reply = request(args.control, {"op": "set_health", "id": args.device_id, "health": args.health},
                                timeout=args.timeout)
    except (OSError, ValueError) as e:
        print(f"dpconform fakegpu health: cannot reach control socket {args.control}: {e}", file=sys.stderr)
        return 1
    if not reply.get("ok"):
        print(f"dpconform fakegpu health: {reply.get('error', 'refused')}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "health":
        return health_main(argv[1:])
    from dpconform.plugin_under_test.fakegpu.config import ConfigError, build, load_file
    from dpconform.plugin_under_test.kit import exit_now, setup_logging
    args = parser().parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    try:
        cfg = build(load_file(args.config) if args.config else {}, overrides)
    except ConfigError as e:
        print(f"dpconform fakegpu: {args.config or 'command line'}: {e}", file=sys.stderr)
        return 2
    setup_logging(cfg.log_level.upper())
    exit_now(serve(cfg))


def own_dev_dir(cfg) -> str:
    """The default --dev-dir: one per plugin dir and resource under $TMPDIR (the conformance suite points
    that into the run's private dir). Its name is fixed, so a relaunch after a crash (SIGKILL: no cleanup)
    takes over the dir the crashed instance left instead of leaving another one; a clean exit removes it.
    A dir of that name that is not ours (a symlink, another user's) is not used: then a fresh temp dir."""
    key = f"{os.path.realpath(cfg.plugin_dir)}\0{cfg.resource}".encode()
    path = os.path.join(tempfile.gettempdir(), "fakegpu-dev-" + hashlib.sha256(key).hexdigest()[:12])
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            log.warning("%s exists and is not a dir of ours; using a fresh temp dir", path)
            return tempfile.mkdtemp(prefix="fakegpu-dev-")
        log.info("taking over the fake device dir %s (left by an instance that did not exit cleanly?)", path)
    return path


def serve(cfg) -> int:
    from dpconform.plugin_under_test.fakegpu import control
    from dpconform.plugin_under_test.fakegpu.plugin import FakeGpus, FakeGpuServer, FakeGpuServicer

    stop = threading.Event()

    def on_signal(signum, _frame):
        log.info("got %s, stopping", signal.Signals(signum).name)
        stop.set()
    signal.signal(signal.SIGINT, on_signal)
    if cfg.has("slow-sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # defect slow-sigterm
    else:
        signal.signal(signal.SIGTERM, on_signal)

    temp_dev_dir = cfg.dev_dir is None
    dev_dir = own_dev_dir(cfg) if temp_dev_dir else os.path.abspath(cfg.dev_dir)
    gpus = FakeGpus(cfg, dev_dir)
    control_server = None
    try:
        gpus.create_nodes()
        if cfg.control:
            control_server = control.server(cfg.control, gpus.state, gpus.numa).start()
        server = FakeGpuServer(cfg, FakeGpuServicer(cfg, gpus))
        log.info("fake GPUs %s: %d devices %s, defects: %s", cfg.resource, len(gpus.ids),
                 ",".join(gpus.ids[:8]) + ("..." if len(gpus.ids) > 8 else ""), ",".join(cfg.defects) or "none")
        rc = server.run(stop)
        log.info("exiting with %d", rc)
        return rc
    finally:
        if control_server:
            control_server.stop()
        if temp_dev_dir:
            shutil.rmtree(dev_dir, ignore_errors=True)
        else:
            gpus.remove_nodes()
