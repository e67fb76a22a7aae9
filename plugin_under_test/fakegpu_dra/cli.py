"""`dpconform fakegpu-dra ...`: run the fake-GPU DRA driver; `dpconform fakegpu-dra health ...`: flip a
device's health (reported on its NodeWatchResources stream)."""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import signal
import sys
import threading

from dpconform.plugin_under_test.fakegpu_dra.defects import DEFECTS, describe
from dpconform.plugin_under_test.kit import setup_logging

log = logging.getLogger("dpconform.fakegpu_dra")

DEFAULT_DRIVER = "gpu.dpconform.io"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclasses.dataclass
class Config:
    node_name: str
    kubeconfig: str | None = None
    driver_name: str = DEFAULT_DRIVER
    devices: int = 4
    registry_dir: str = "/var/lib/kubelet/plugins_registry"
    plugin_dir: str = ""                 # default /var/lib/kubelet/plugins/<driver>
    cdi_dir: str = "/var/run/cdi"
    control: str | None = None
    defects: tuple[str, ...] = ()
    prepare_latency_ms: float = 0.0
    log_level: str = "INFO"
    shared_cdi_device: bool = False      # every claim's devices also name the driver-wide CDI device "common"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpconform fakegpu-dra", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The fake-GPU reference DRA driver (kubelet plugin). Needs an API server: --kubeconfig, "
                    "else the in-cluster config.\n"
                    "Health: dpconform fakegpu-dra health --control PATH DEVICE Healthy|Unhealthy",
        epilog="defects (--defect NAME, repeatable):\n" + describe())
    p.add_argument("--kubeconfig", help="kubeconfig of the API server (default: in-cluster config)")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="this node (default $NODE_NAME)")
    p.add_argument("--driver-name", default=DEFAULT_DRIVER, help=f"driver name (default {DEFAULT_DRIVER})")
    p.add_argument("--devices", type=int, default=4, help="number of fake GPUs (default 4)")
    p.add_argument("--registry-dir", default=Config.registry_dir, help=f"the kubelet's plugin registration dir "
                                                                       f"(default {Config.registry_dir})")
    p.add_argument("--plugin-dir", help="where dra.sock and prepared.json live (default "
                                        "/var/lib/kubelet/plugins/DRIVER)")
    p.add_argument("--cdi-dir", default=Config.cdi_dir, help=f"CDI spec dir (default {Config.cdi_dir})")
    p.add_argument("--control", metavar="PATH", help="control socket (health flips)")
    p.add_argument("--defect", dest="defects", action="append", default=[], metavar="NAME",
                   help="break one rule on purpose")
    p.add_argument("--prepare-latency-ms", type=float, default=0.0, help="extra latency per NodePrepareResources")
    p.add_argument("--shared-cdi-device", action="store_true",
                   help=f"answer every claim with a driver-wide CDI device too ({'dpconform.io/gpu'}=common, its spec "
                        "kept while the driver runs), beside the claim's own, as the upstream example driver does")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING, ERROR")
    return p


def config(argv: list[str]) -> Config:
    """The config from the command line; SystemExit(2) with one line on bad input."""
    p = parser()
    a = p.parse_args(argv)
    if not a.node_name:
        p.error("--node-name is required (or set $NODE_NAME)")
    if not DNS_SUBDOMAIN.match(a.driver_name) or len(a.driver_name) > 253:
        p.error(f"--driver-name {a.driver_name!r} is not a DNS subdomain (lower case, digits, '-', '.')")
    if a.devices < 1:
        p.error("--devices must be at least 1")
    unknown = [d for d in a.defects if d not in DEFECTS]
    if unknown:
        p.error(f"unknown --defect {', '.join(unknown)}; choose from: {', '.join(DEFECTS)}")
    return Config(node_name=a.node_name, kubeconfig=a.kubeconfig, driver_name=a.driver_name, devices=a.devices,
                  registry_dir=a.registry_dir,
                  plugin_dir=a.plugin_dir or os.path.join("/var/lib/kubelet/plugins", a.driver_name),
                  cdi_dir=a.cdi_dir, control=a.control, defects=tuple(a.defects),
                  prepare_latency_ms=a.prepare_latency_ms, log_level=a.log_level.upper(),
                  shared_cdi_device=a.shared_cdi_device)


def health_main(argv: list[str]) -> int:
    from dpconform.plugin_under_test.fakegpu.cli import health_main as fakegpu_health
    return fakegpu_health(argv)          # the same control protocol (set_health on a device table)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "health":
        return health_main(argv[1:])
    cfg = config(argv)
    setup_logging(cfg.log_level)
    from dpconform.plugin_under_test.fakegpu import control
    from dpconform.plugin_under_test.fakegpu_dra.driver import FakeGpuDriver

    stop = threading.Event()

    def on_signal(signum, _frame):
        log.info("got %s, stopping", signal.Signals(signum).name)
        stop.set()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    driver = FakeGpuDriver(cfg)
    control_server = control.server(cfg.control, driver.health, {}).start() if cfg.control else None
    log.info("fake GPU DRA driver %s on node %s: %d devices, defects: %s", cfg.driver_name, cfg.node_name,
             cfg.devices, ",".join(cfg.defects) or "none")
    try:
        return driver.run(stop)
    except Exception as e:  # noqa: BLE001 - one line, not a traceback, for the API server being unreachable
        log.error("%s: %s", type(e).__name__, e)
        return 1
    finally:
        if control_server:
            control_server.stop()
