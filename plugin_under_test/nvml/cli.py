"""`dpconform nvml-plugin`: the NVML-backed device plugin for NVIDIA GPUs (`nvidia.com/gpu`).

    dpconform nvml-plugin [--config FILE] [--nvml real|fake|fake:TOPOLOGY.yaml] [--control PATH]
        [--plugin-dir DIR] [--resource-name NAME] [--[no-]fail-on-init-error]
        [--device-list-strategy S[,S]] [--device-id-strategy uuid|index] [--[no-]health-recovery]
        [--disable-healthchecks VALUE] [--ignore-xid N ...] [--event-wait-timeout-ms MS] [--log-level L]

Health control of a plugin running on the fake NVML (through the fake's control socket):
    dpconform nvml-plugin inject-xid --control PATH GPU XID     GPU: index or UUID
    dpconform nvml-plugin recover    --control PATH GPU         (needs --health-recovery on the plugin)
    dpconform nvml-plugin health     --control PATH GPU Healthy|Unhealthy [--xid 79]   (--health-hook form)
    dpconform nvml-plugin fail-wait  --control PATH [ERROR] [--count N]   next event waits raise ERROR
    dpconform nvml-plugin status     --control PATH
Exit codes of the control commands: 0 applied, 1 refused (unknown GPU, bad input), 3 unsupported
(recovery not enabled in the plugin), 4 control socket unreachable.
"""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time

from dpconform.kubeletapi import constants

from dpconform.protocols import control_socket
from ..kit import DeviceState, PluginServer, setup_logging
from . import backend
from .config import Config, ConfigError, load as load_config
from .discovery import discover, to_device, topology_levels
from .health import APPLICATION_XIDS, HealthMonitor, parse_disable_healthchecks
from .servicer import NvmlServicer

log = logging.getLogger("dpconform.nvml")
PROG = "dpconform nvml-plugin"
CONTROL_COMMANDS = ("inject-xid", "recover", "health", "fail-wait", "status")


# ---------------------------------------------------------------------------------------- the plugin
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="NVML-backed device plugin advertising nvidia.com/gpu.",
                                epilog="Control commands: " + ", ".join(CONTROL_COMMANDS)
                                + f" (`{PROG} COMMAND --help`).")
    p.add_argument("--config", help="YAML config file (NVIDIA's `version: v1` / `flags:` layout)")
    p.add_argument("--nvml", help="NVML backend: real (default), fake, or fake:TOPOLOGY.yaml")
    p.add_argument("--control", help="unix socket for the fake NVML's control server (fake only; "
                                     "keep it out of the plugin dir)")
    p.add_argument("--plugin-dir", help="device-plugin dir with kubelet.sock (default $DP_PLUGIN_DIR or "
                                        "/var/lib/kubelet/device-plugins)")
    p.add_argument("--resource-name", help="resource to register (default nvidia.com/gpu)")
    p.add_argument("--fail-on-init-error", action=argparse.BooleanOptionalAction, default=None,
                   help="exit non-zero when NVML cannot be initialized (default true)")
    p.add_argument("--device-list-strategy", help="envvar | volume-mounts | cdi-annotations | cdi-cri (comma list)")
    p.add_argument("--device-id-strategy", choices=("uuid", "index"))
    p.add_argument("--health-recovery", action=argparse.BooleanOptionalAction, default=None,
                   help="mark a GPU Healthy again on an NVML GPU-recovery event (NVIDIA never does)")
    p.add_argument("--disable-healthchecks", help="like DP_DISABLE_HEALTHCHECKS: all | xids | '48,79'")
    p.add_argument("--ignore-xid", type=int, action="append", help="another XID to ignore (repeatable)")
    p.add_argument("--event-wait-timeout-ms", type=int)
    p.add_argument("--log-level")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    overrides = {
        "nvml": args.nvml, "control": args.control, "plugin_dir": args.plugin_dir,
        "resource_name": args.resource_name, "fail_on_init_error": args.fail_on_init_error,
        "device_list_strategy": args.device_list_strategy, "device_id_strategy": args.device_id_strategy,
        "health_recovery": args.health_recovery, "disable_health_checks": args.disable_healthchecks,
        "event_wait_timeout_ms": args.event_wait_timeout_ms, "log_level": args.log_level,
    }
    cfg = load_config(args.config, overrides)
    if args.ignore_xid:
        cfg.ignored_xids = list(cfg.ignored_xids) + list(args.ignore_xid)
    return cfg


def _fail(message: str, code: int = 1) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return code


def run_plugin(cfg: Config, stop_event: threading.Event | None = None) -> int:
    setup_logging(cfg.log_level.upper())
    try:
        nvml = backend.load(cfg.nvml, control=cfg.control)
    except ValueError as e:
        return _fail(str(e), 2)

    initialized = False
    gpus = []
    try:
        nvml.nvmlInit()
        initialized = True
        log.info("NVML initialized (%s backend), driver %s", cfg.nvml, nvml.nvmlSystemGetDriverVersion())
        gpus = discover(nvml)
    except nvml.NVMLError as e:
        if cfg.fail_on_init_error:
            if initialized:
                nvml.nvmlShutdown()
            return _fail(f"failed to initialize NVML: {e} (failOnInitError=true; set it to false to keep "
                         f"running without GPUs)")
        log.error("failed to initialize NVML: %s; failOnInitError=false: registering %s with no devices",
                  e, cfg.resource_name)
        gpus = []

    try:
        state = DeviceState([to_device(g) for g in gpus])
        levels = topology_levels(nvml, gpus) if gpus else {}
        servicer = NvmlServicer(state, gpus, levels, resource_name=cfg.resource_name,
                                strategies=cfg.device_list_strategy, id_strategy=cfg.device_id_strategy)

        disabled, extra = parse_disable_healthchecks(cfg.disable_health_checks)
        monitor = None
        if gpus and not disabled:
            monitor = HealthMonitor(nvml, gpus, state.set_health,
                                    ignored_xids=set(APPLICATION_XIDS) | extra | set(cfg.ignored_xids),
                                    wait_timeout_ms=cfg.event_wait_timeout_ms, recovery=cfg.health_recovery)
            monitor.start()
        elif disabled:
            log.warning("health checks disabled (%r)", cfg.disable_health_checks)

        server = PluginServer(servicer, plugin_dir=cfg.plugin_dir, resource_name=cfg.resource_name,
                              options=servicer.options(), socket_prefix="nvidia-gpu", state=state)
        stop_event = stop_event or threading.Event()
        _install_signal_handlers(stop_event)
        try:
            return server.run(stop_event)
        except OSError as e:
            return _fail(str(e))
        finally:
            if monitor is not None:
                monitor.stop()
    finally:
        if initialized:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass


def _install_signal_handlers(stop_event: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):
        log.info("signal %d: stopping", signum)
        stop_event.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


# -------------------------------------------------------------------------------- control commands
def _control_parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{PROG} {command}")
    p.add_argument("--control", required=True, help="the fake NVML's control socket (the plugin's --control)")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds to wait for the plugin's health checks to be listening (default 5)")
    if command in ("inject-xid", "recover", "health"):
        p.add_argument("gpu", help="GPU index or UUID (the device ID the plugin advertises)")
    if command == "inject-xid":
        p.add_argument("xid", type=int)
    if command == "health":
        p.add_argument("health", choices=(constants.HEALTHY, constants.UNHEALTHY))
        p.add_argument("--xid", type=int, default=79, help="XID used for Unhealthy (default 79: fallen off the bus)")
    if command == "fail-wait":
        p.add_argument("error", nargs="?", default="Unknown", help="NVML error name (default Unknown)")
        p.add_argument("--count", type=int, default=1)
    return p


def _wait_listening(path: str, gpu: str, timeout: float) -> dict:
    """Poll the fake's status until an event set listens on `gpu` (the plugin's health thread has
    registered) or the timeout passes; returns the last device status (may have listeners == 0)."""
    deadline = time.monotonic() + timeout
    while True:
        status = control_socket.request(path, {"op": "status"})
        dev = next((d for d in status.get("devices", []) if gpu in (str(d["index"]), d["uuid"])), None)
        if dev is None or dev.get("listeners", 0) > 0 or time.monotonic() >= deadline:
            return dev or {}
        time.sleep(0.05)


def control_main(command: str, argv: list[str]) -> int:
    args = _control_parser(command).parse_args(argv)
    try:
        if command == "status":
            reply = control_socket.request(args.control, {"op": "status"})
        elif command == "fail-wait":
            reply = control_socket.request(args.control, {"op": "wait-error", "error": args.error, "count": args.count})
        else:
            if command == "health":
                op = {"op": "xid", "xid": args.xid} if args.health == constants.UNHEALTHY else {"op": "recover"}
            elif command == "inject-xid":
                op = {"op": "xid", "xid": args.xid}
            else:
                op = {"op": "recover"}
            dev = _wait_listening(args.control, args.gpu, args.timeout)
            if dev and not dev.get("listeners"):
                print(f"{PROG} {command}: warning: no NVML event set listens on GPU {args.gpu} "
                      f"(health checks disabled or not started); the plugin will not react", file=sys.stderr)
            reply = control_socket.request(args.control, dict(op, device=args.gpu))
    except OSError as e:
        return _fail(f"{command}: control socket {args.control} unreachable: {e} (is the plugin running "
                     f"with --nvml fake... --control {args.control}?)", 4)
    print(json.dumps(reply), flush=True)
    if reply.get("ok"):
        return 0
    if reply.get("unsupported"):
        return _fail(f"{command}: unsupported: {reply.get('error')}", 3)
    return _fail(f"{command}: {reply.get('error')}", 1)


# ------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in CONTROL_COMMANDS:
        return control_main(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ConfigError as e:
        return _fail(str(e), 2)
    return run_plugin(cfg)


if __name__ == "__main__":
    sys.exit(main())
