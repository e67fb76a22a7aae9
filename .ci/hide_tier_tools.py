#!/usr/bin/env python3
"""Run a command as on a fresh machine: the Debian packages the other tiers install, and the repository's
bin/, hidden from it. The guard of `make test`'s promise (it passes where nothing was installed before):
.ci/run runs `make test` through this, so a test that needs busybox-static, containerd, docker.io and
the like fails there, on every machine, and not only on a user's fresh one.

    python3 .ci/hide_tier_tools.py make test

How: a private mount namespace (unshare) in which /usr is an overlay whose upper layer holds a whiteout
for each file of those packages that is installed (dpkg -L) and for each of their programs' names (an
install beside the command, as .ci/run's kind-prep does, is hidden too), and bin/ an empty tmpfs (what
make test builds itself there, bin/kindcheck and bin/actionlint, goes with the namespace). Nothing outside the namespace changes. Without root or unshare it says so on its first line and
runs the command as it is.
"""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

# The packages the node, cluster and kind tiers install (make node-deps, make kind-deps); tests/test_ci_tiers.py
# checks that this names every package those targets install.
TIER_PACKAGES = ("busybox-static", "containerd", "runc", "containernetworking-plugins", "chromium",
                 "docker.io", "debootstrap")
# their programs and data dirs by name, hidden whether installed yet or not
KNOWN_FILES = ("/usr/bin/busybox", "/usr/bin/containerd", "/usr/bin/ctr", "/usr/bin/containerd-shim",
               "/usr/bin/containerd-shim-runc-v1", "/usr/bin/containerd-shim-runc-v2", "/usr/sbin/runc",
               "/usr/bin/runc", "/usr/bin/chromium", "/usr/bin/dockerd", "/usr/bin/docker", "/usr/bin/docker-init",
               "/usr/bin/docker-proxy", "/usr/sbin/debootstrap")
KNOWN_DIRS = ("/usr/lib/cni", "/usr/lib/chromium", "/usr/share/debootstrap")


def installed_files(package: str) -> list[str]:
    """The files (not dirs) an installed package put under /usr, as their /usr paths; [] when not installed."""
    try:
        out = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    files = []
    for line in out.stdout.splitlines():
        p = Path(line.strip())
        if not p.is_absolute() or p.is_dir() and not p.is_symlink():
            continue
        real = Path(os.path.realpath(p.parent)) / p.name       # /bin/busybox is /usr/bin/busybox (merged /usr)
        if str(real).startswith("/usr/") and os.path.lexists(real):
            files.append(str(real))
    return files


def hidden_paths() -> list[str]:
    paths = set(KNOWN_FILES)
    for pkg in TIER_PACKAGES:
        paths.update(installed_files(pkg))
    # a path inside a hidden dir needs no whiteout of its own
    return sorted(p for p in paths if not any(p.startswith(d + "/") for d in KNOWN_DIRS)) + list(KNOWN_DIRS)


def write_whiteouts(upper: Path, paths: list[str]) -> None:
    """overlayfs whiteouts (char device 0/0) in the upper layer of /usr for each path."""
    for p in paths:
        w = upper / os.path.relpath(p, "/usr")
        w.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(w, stat.S_IFCHR | 0o600, os.makedev(0, 0))


def why_not() -> str:
    if os.geteuid() != 0:
        return "not root"
    if not shutil.which("unshare"):
        return "no unshare (util-linux)"
    return ""


INNER = ('mount -t overlay fresh-machine -o "lowerdir=/usr,upperdir=$1/upper,workdir=$1/work" /usr || exit 125; '
         'if [ -d bin ]; then mount -t tmpfs -o size=1g fresh-machine bin || exit 125; fi; '
         'shift; exec "$@"')


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    reason = why_not()
    if reason:
        print(f"hide_tier_tools: cannot hide the other tiers' host tools ({reason}): running `{' '.join(argv)}` "
              "with what this machine has", flush=True)
        return subprocess.call(argv)
    paths = hidden_paths()
    present = sorted(p for p in paths if os.path.lexists(p))
    print(f"hide_tier_tools: `{' '.join(argv)}` runs as on a fresh machine: {', '.join(TIER_PACKAGES)} and bin/ "
          f"hidden ({len(present)} of their paths are on this machine)", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="dpc-hide-tools-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(128 + signal.SIGHUP))
    try:
        (tmp / "work").mkdir()
        write_whiteouts(tmp / "upper", paths)
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", INNER, "sh",
                                 str(tmp), *argv])
        try:
            rc = proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
        if rc == 125:
            print("hide_tier_tools: the overlay on /usr could not be mounted (see above)", flush=True)
        return rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
