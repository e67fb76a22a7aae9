#!/usr/bin/env python3
"""The project's two CI tiers, run stage by stage: `presubmit` (what `.ci/run` runs on every change, under
40 minutes on a fresh 2-core machine) and `periodic` (`make periodic`: what takes longer, before a release).

Each stage runs with its own budget as a hard timeout; a stage past its budget is stopped (SIGTERM to its
process group, then everything it started is killed) and the run goes on to say so. At the end a table of
the stages and their seconds is printed and written to reports/ci-times.txt (presubmit) or
reports/periodic.{json,md} (periodic, with each target's passed/failed/skipped counts).

Nothing outlives the run: every stage runs in a cgroup of the run's own (cgroup v2, also the unified
hierarchy of a hybrid host), and a watchdog in its own session holds a pipe from this process; when this
process ends in any way (SIGKILL included) the pipe closes and the watchdog kills the whole cgroup. Without
a writable cgroup v2 the watchdog kills the stages' process groups instead (a process that left its group
with setsid then escapes: a line says so at the start).

    python3 .ci/tiers.py presubmit | periodic [--only NAME,...]
    python3 .ci/tiers.py --plan plan.json        # stand-in stages (tests/test_ci_tiers.py)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = Path(os.environ.get("DPC_CI_REPORTS", ROOT / "reports"))   # a test's stand-in run writes elsewhere
_VERSIONS = runpy.run_path(str(ROOT / "fixtures" / "kube_versions.py"))
KUBE_RELEASE = _VERSIONS["DEFAULT"].tag                # the newest: what make builds
OLDER_RELEASES = [r.tag for r in _VERSIONS["RELEASES"] if r.tag != KUBE_RELEASE]
# The presubmit judges against the newest release and the oldest supported one (the two ends of what the
# emulator must follow); the releases between them run in the periodic tier, so that a new release costs
# the periodic tier, not every change.
PRESUBMIT_OLDER = OLDER_RELEASES[:1]
PERIODIC_OLDER = OLDER_RELEASES[1:]
STOP_GRACE_S = 30             # SIGTERM to a stage past its budget, then SIGKILL to all it started


@dataclasses.dataclass
class Stage:
    name: str
    cmd: str                                  # a shell command line, run in the repository root
    budget_s: int                             # the stage's timeout
    background: bool = False                  # started, and waited for by a later stage's `after`
    after: tuple[str, ...] = ()               # background stages this one waits for first
    needs_node: bool = False                  # root and Go: skipped (saying so) without them
    release: str = ""                         # the Kubernetes release it runs against, for the summary


# the lowest CPU priority for a build beside the tests: its own autogroup at nice 19 (then nice 19 inside it)
NICE = '{ echo 19 > /proc/self/autogroup; } 2>/dev/null || true; '
# Go binaries of node, dra and the cluster smoke, built once beside make test at the lowest CPU priority
# (their own autogroup at nice 19, nice 19 inside it) in a copy of the Makefile and tools/: make test's own
# tests look at what bin/ holds, so the binaries move into bin/ only once make test is done.
# mock NVML first: make test builds it too (bin/ hidden), and go-nvml's packages compiled here early are in
# Go's build cache by the time make test's own build of it runs (or most of them)
GO_BINS = ("bin/mock-nvml/libnvidia-ml.so.1 kube-bins bin/ghz bin/dp-floor cluster-bins dra-driver "
           "bin/nvidia-device-plugin")
# the oldest release's kubelet and sample plugin after the newest release's parts (make node needs only those)
OLDER_BINS = "".join(f" && nice -n 19 make kube-bins KUBE_VERSION={tag}" for tag in PRESUBMIT_OLDER)
IN_BUILD_DIR = ('set -e; d="$DPC_CI_BUILD"; cp -a Makefile tools "$d"/; mkdir -p "$d/fixtures"; '
                'cp fixtures/kube_versions.py "$d/fixtures/"; cd "$d"; ' + NICE)
GO_BUILD = IN_BUILD_DIR + 'nice -n 19 make ' + GO_BINS + OLDER_BINS
GO_INSTALL = 'mkdir -p bin && cp -a "$DPC_CI_BUILD"/bin/. bin/'
# kind's offline images (make kind-smoke): Debian's docker.io and debootstrap, and the base root filesystem
# (about a minute of debootstrap) beside make test, at the lowest CPU priority, into the build dir's bin/
# (go-install brings it); the kind binaries (kind, runc-wrapper, crictl, kubeadm, kubectl) beside make node,
# the same way, copied in when the kind stage starts
KIND_PREP = ('if ! command -v apt-get >/dev/null; then echo "no apt-get: make kind-smoke runs with what is installed"; '
             'else ' + NICE + 'make kind-deps && DPCONFORM_BIN_DIR="$DPC_CI_BUILD/bin" nice -n 19 make kind-rootfs; fi')
KIND_BUILD = IN_BUILD_DIR + 'nice -n 19 make kind-bins'
KIND_INSTALL = ('set -e; d="$DPC_CI_BUILD/bin"; k=' + KUBE_RELEASE + '; cp -a "$d/kind" "$d/runc-wrapper" "$d/crictl" bin/; '
                'cp -a "$d/$k/kubeadm" "$d/$k/kubectl" "bin/$k/"; make kind-smoke')

# Node tests that do not depend on the kubelet's release (the harness floor of the bench, the NVML plugin on
# fake NVML, the load run through ghz, the HTML report in a browser, the wheel installed as a vendor would,
# dpconform bins): run on the newest release only (about two minutes saved per older one)
RELEASE_INDEPENDENT = "test_bench or nvml or pytest-load-ghz or report_browser or vendor_install or test_bins"

def older_node_stage(tag: str) -> Stage:
    """make node against an older release, without the tests that do not depend on the kubelet's release."""
    return Stage(f"make node {tag}", f"make node KUBE_VERSION={tag} NODE_SKIP='{RELEASE_INDEPENDENT}'", 600,
                 needs_node=True, release=tag)


# Budgets: what each stage may take on a 2-core machine with cold Go and pip caches. Their foreground sum
# stays under the 40-minute presubmit target with room; a new test goes into the tier whose budget it fits.
HIDE_TIER_TOOLS = "python3 .ci/hide_tier_tools.py"
NODE_DEPS = ("if command -v apt-get >/dev/null; then make node-deps; "
             "else echo 'no apt-get: make node runs with what is installed'; fi")
PRESUBMIT = [
    Stage("venv", "make venv", 300),
    Stage("go-build", GO_BUILD, 1800, background=True, needs_node=True),
    Stage("kind-prep", KIND_PREP, 600, background=True, needs_node=True),
    # as on a fresh machine: the packages the later stages install (and kind-prep installs meanwhile), and
    # bin/, hidden from it (.ci/hide_tier_tools.py): a test that needs them fails here, not on a user's machine
    Stage("make test", f"{HIDE_TIER_TOOLS} make test", 900),
    Stage("node-deps", NODE_DEPS, 300, after=("kind-prep",), needs_node=True),    # one apt-get at a time
    Stage("go-install", GO_INSTALL, 60, after=("go-build",), needs_node=True),
    Stage("kind-build", KIND_BUILD, 900, background=True, needs_node=True),
    # third-party code go-build built (NVIDIA's device plugin, mock NVML): the catalogue on each (about 2 min)
    Stage("make third-party", "make third-party", 300, needs_node=True, release=KUBE_RELEASE),
    # the newest release also runs the release-independent node tests (about 9 min here; the others about 7)
    Stage("make node", "make node", 720, needs_node=True, release=KUBE_RELEASE),
    Stage("make dra", "make dra", 600, background=True, needs_node=True, release=KUBE_RELEASE),
    Stage("make cluster-smoke", "make cluster-smoke", 600, needs_node=True, release=KUBE_RELEASE),
    Stage("wait make dra", "true", 300, after=("make dra",), needs_node=True),
    # a two-worker kind cluster from the node image built offline, in the private Docker Engine: part of the
    # catalogue (about 90 s; the whole catalogue beside local is the periodic tier's make kind-periodic)
    Stage("make kind-smoke", KIND_INSTALL, 360, after=("kind-prep", "kind-build"), needs_node=True, release=KUBE_RELEASE),
    # the oldest supported release: its real kubelet against the emulator behaving as it (the differential
    # tests, the catalogue on the node backend); about 5.5 min here
    *[older_node_stage(tag) for tag in PRESUBMIT_OLDER],
]

# Everything the presubmit does not run at full cost: the rest of the cluster suite (the 5-minute grace
# period, rollouts, uninstall, the CLU defects), the bench, the long load profile.
PERIODIC = [
    Stage("venv", "make venv", 600),
    Stage("go-bins", "make " + GO_BINS, 3600, needs_node=True),
    Stage("node-deps", NODE_DEPS, 300, needs_node=True),
    # the releases between the oldest and the newest (the presubmit runs those two)
    *[Stage(f"kube-bins {tag}", f"make kube-bins KUBE_VERSION={tag}", 1800, needs_node=True) for tag in PERIODIC_OLDER],
    *[older_node_stage(tag) for tag in PERIODIC_OLDER],
    Stage("make cluster-periodic", "make cluster-periodic", 5400, needs_node=True, release=KUBE_RELEASE),
    Stage("make bench", "make bench", 900, needs_node=True, release=KUBE_RELEASE),
    Stage("make load", "make load", 1800),
    # kind on this host: a private Docker Engine (Debian's docker.io, the runc wrapper); issue: kind for real
    Stage("kind-deps", "make kind-deps", 600, needs_node=True),
    Stage("make kind-periodic", "make kind-periodic", 1800, needs_node=True, release=KUBE_RELEASE),
]
TIERS = {"presubmit": PRESUBMIT, "periodic": PERIODIC}


def worst_case_s(stages: list[Stage]) -> int:
    """When the run ends if every stage takes its whole budget: foreground stages one after another, a
    background one from its start to its budget, a stage with `after` no sooner than those end."""
    now, ends = 0, {}
    for s in stages:
        start = max([now] + [ends[a] for a in s.after])
        ends[s.name] = start + s.budget_s
        if not s.background:
            now = ends[s.name]
    return max([now] + list(ends.values()))


# ----- containment ---------------------------------------------------------------------------------------
def _cgroup2_root() -> Path | None:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] == "cgroup2":
            return Path(parts[1])
    return None


class Containment:
    """A cgroup v2 of this run (else the stages' process groups) and the watchdog that kills it when this
    process ends, however it ends."""

    def __init__(self) -> None:
        self.cgroup: Path | None = None
        self.home: Path | None = None             # the cgroup this process came from, to leave ours at the end
        self.why_not = ""
        root = _cgroup2_root()
        own = next((ln[3:] for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::")), None)
        if root is None or own is None:
            self.why_not = "no cgroup v2 hierarchy mounted"
        else:
            try:
                self.home = root / own.lstrip("/")
                cg = self.home / f"dpconform-ci-{os.getpid()}"
                cg.mkdir()
                self.cgroup = cg
            except OSError as e:
                self.why_not = f"cannot make a cgroup ({e.strerror})"
        r, self._w = os.pipe()
        # the watchdog: its own session (a kill of our process group spares it), outside our cgroup
        self.watchdog = subprocess.Popen([sys.executable, __file__, "--watchdog", str(self.cgroup or "")],
                                         stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True)   # CI's output ends with us
        os.close(r)
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))

    def stage_cgroup(self, name: str) -> Path | None:
        if self.cgroup is None:
            return None
        cg = self.cgroup / re.sub(r"[^a-z0-9]+", "-", name.lower())
        cg.mkdir(exist_ok=True)
        return cg

    def track(self, pgid: int) -> None:
        """Tell the watchdog a process group to kill (the fallback without a cgroup)."""
        os.write(self._w, f"{pgid}\n".encode())

    def remove_at_end(self, path: str) -> None:
        """Tell the watchdog a temp dir of the run to remove, however the run ends."""
        os.write(self._w, f"rm {path}\n".encode())

    def close(self) -> None:
        """Leave the cgroup (the watchdog must not kill this process on its way out) and let the watchdog
        kill what is left and remove the cgroup."""
        if self.home is not None:
            (self.home / "cgroup.procs").write_text(str(os.getpid()))
        os.close(self._w)


def kill_cgroup(cg: Path) -> None:
    """SIGKILL every process in cg and below, until none is left (bounded)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pids = [int(p) for f in cg.rglob("cgroup.procs") for p in _read(f).split()]
        pids = [p for p in pids if p != os.getpid()]
        if not pids:
            return
        kill_file = cg / "cgroup.kill"
        if kill_file.exists():
            try:
                kill_file.write_text("1")
            except OSError:
                pass
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def _read(f: Path) -> str:
    try:
        return f.read_text()
    except OSError:
        return ""


def watchdog(cgroup: str) -> int:
    """Waits for the run's pipe to close (the run ended, in any way), then kills all it started."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups, dirs = [], []
    with os.fdopen(0, "rb", buffering=0) as pipe:
        for line in iter(pipe.readline, b""):
            if line.startswith(b"rm "):
                dirs.append(line[3:].decode().rstrip("\n"))
            else:
                groups.append(int(line))
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if cgroup:
        cg = Path(cgroup)
        kill_cgroup(cg)
        deadline = time.monotonic() + 10      # the run itself may still be leaving the cgroup
        while time.monotonic() < deadline:
            for d in sorted((p for p in cg.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [cg]:
                try:
                    d.rmdir()
                except OSError:
                    pass
            if not cg.exists():
                break
            kill_cgroup(cg)
            time.sleep(0.2)
    for d in dirs:                        # the run's temp dirs (its build copy, its stage logs)
        shutil.rmtree(d, ignore_errors=True)
    return 0


# ----- running ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Result:
    stage: Stage
    seconds: float = 0.0
    status: str = "not run"        # passed, failed (exit N), over budget, skipped (why)
    counts: dict = dataclasses.field(default_factory=dict)
    failures: list = dataclasses.field(default_factory=list)   # pytest's "FAILED test - first line" lines


PYTEST_SUMMARY = re.compile(r"^=+ (.*\b(?:passed|failed|skipped|error|errors|deselected|no tests ran)\b.*) in [\d.]+s\b.* =+$",
                            re.M)   # a whole line of pytest's own: a test's message that quotes one is not counted


PYTEST_FAILURE = re.compile(r"^(?:FAILED|ERROR) \S+.*$", re.M)


def pytest_failures(text: str) -> list[str]:
    """pytest's short summary lines of the failed and errored tests in a stage's output (each names the test
    and the failure's first line)."""
    return [m.group(0).rstrip() for m in PYTEST_FAILURE.finditer(text)]


def pytest_counts(text: str) -> dict[str, int]:
    """passed/failed/skipped/error summed over every pytest summary line in a stage's output."""
    out = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    if not PYTEST_SUMMARY.search(text):
        return {}                     # not a pytest stage (a build, the bench): no counts to show
    for m in PYTEST_SUMMARY.finditer(text):
        for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", m.group(1)):
            out["error" if what.startswith("error") else what] += int(n)
    return out


class Runner:
    def __init__(self, tier: str, stages: list[Stage], containment: Containment, log_dir: Path) -> None:
        self.tier, self.stages, self.box, self.log_dir = tier, stages, containment, log_dir
        self.t0 = time.monotonic()
        self.results = {s.name: Result(s) for s in stages}
        self.running: dict[str, tuple] = {}   # name -> (process, start, log, output pump, [end time])
        self.env = dict(os.environ)

    def say(self, text: str) -> None:
        print(f"== {self.tier}: {text} ({time.monotonic() - self.t0:.0f} s since start)", flush=True)

    def start(self, s: Stage) -> None:
        cg = self.box.stage_cgroup(s.name)
        log = self.log_dir / (re.sub(r"[^a-z0-9]+", "-", s.name.lower()) + ".log")
        out = open(log, "wb")

        def enter() -> None:
            if cg is not None:
                (cg / "cgroup.procs").write_text(str(os.getpid()))
        p = subprocess.Popen(["bash", "-c", s.cmd], cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=enter)
        self.box.track(p.pid)
        # foreground output goes to the console as it comes; a background stage's is shown when it ends
        pump = threading.Thread(target=_pump, args=(p.stdout, out, None if s.background else sys.stdout.buffer),
                                daemon=True)
        pump.start()
        ended: list[float] = []
        threading.Thread(target=lambda: (p.wait(), ended.append(time.monotonic())), daemon=True).start()
        self.running[s.name] = (p, time.monotonic(), log, pump, ended)

    def finish(self, name: str) -> Result:
        p, t, log, pump, ended = self.running[name]      # still running while it waits (interrupt() stops it)
        r = self.results[name]
        left = r.stage.budget_s - (time.monotonic() - t)
        try:
            rc = p.wait(timeout=max(left, 0))
        except subprocess.TimeoutExpired:
            rc = None
            self.stop(p, r.stage)
        self.running.pop(name)
        self.kill_leftovers(r.stage)
        text = self._record(r, t, log, pump, ended)
        if r.stage.background:
            print(f"---- output of {name} (ran in the background) ----\n{text[-20000:]}---- end of {name} ----", flush=True)
        r.status = ("passed" if rc == 0 else f"over budget ({r.stage.budget_s} s): stopped" if rc is None
                    else f"failed (exit {rc})")
        if rc is None:
            print(f"== {self.tier}: STAGE {name} EXCEEDED ITS BUDGET of {r.stage.budget_s} s: stopped, "
                  "with everything it started", flush=True)
        return r

    def interrupt(self, why: str) -> None:
        """SIGTERM, SIGHUP or Ctrl-C: each running stage stopped with what it started, and marked so."""
        for name in list(self.running):
            p, t, log, pump, ended = self.running.pop(name)
            r = self.results[name]
            self.stop(p, r.stage)
            self._record(r, t, log, pump, ended)
            r.status = f"interrupted ({why})"

    @staticmethod
    def _record(r: Result, t: float, log: Path, pump: threading.Thread, ended: list[float]) -> str:
        """A stage's seconds, pytest counts and failures from its log, once its output is all in; the log."""
        r.seconds = (ended[0] if ended else time.monotonic()) - t
        pump.join(10)
        text = log.read_text(errors="replace")
        r.counts, r.failures = pytest_counts(text), pytest_failures(text)
        return text

    def kill_leftovers(self, s: Stage) -> None:
        """What a finished stage left running is killed, and named: a test that leaks a process is a defect."""
        cg = self.box.stage_cgroup(s.name)
        if cg is None:
            return
        pids = [int(x) for f in cg.rglob("cgroup.procs") for x in _read(f).split()]
        if pids:
            names = [_read(Path(f"/proc/{x}/cmdline")).replace("\0", " ").strip()[:120] for x in pids]
            print(f"== {self.tier}: WARNING: {s.name} left {len(pids)} process(es) running, killed now: "
                  + "; ".join(f"{x} {n}" for x, n in zip(pids, names)), flush=True)
            kill_cgroup(cg)

    def stop(self, p: subprocess.Popen, s: Stage) -> None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        cg = self.box.stage_cgroup(s.name)
        if cg is not None:
            kill_cgroup(cg)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()

    def run(self, node_ok: str) -> bool:
        for s in self.stages:
            r = self.results[s.name]
            if s.needs_node and node_ok:
                r.status = f"skipped ({node_ok})"
                continue
            for a in s.after:
                if a in self.running:
                    self.say(f"waiting for {a}")
                    self.finish(a)
                if self.results[a].status != "passed":
                    r.status = f"skipped ({a} {self.results[a].status})"
                    break
            if r.status.startswith("skipped"):
                continue
            self.say(f"{s.name}" + (" (in the background)" if s.background else "") + f", budget {s.budget_s} s")
            self.start(s)
            if not s.background:
                self.finish(s.name)
        for name in list(self.running):
            self.finish(name)
        return all(r.status == "passed" or r.status.startswith("skipped") for r in self.results.values())

    def table(self) -> str:
        rows = ["| stage | release | budget s | seconds | passed | failed | skipped | result |", "|---|---|---|---|---|---|---|---|"]
        for r in self.results.values():
            c = r.counts
            n = (c["passed"], c["failed"] + c["error"], c["skipped"]) if c else ("-", "-", "-")
            rows.append(f"| {r.stage.name} | {r.stage.release or '-'} | {r.stage.budget_s} | {r.seconds:.0f} | "
                        f"{n[0]} | {n[1]} | {n[2]} | {r.status} |")
        rows.append(f"\ntotal: {time.monotonic() - self.t0:.0f} s")
        return "\n".join(rows)


def _pump(src, log, console) -> None:
    for chunk in iter(lambda: src.read1(65536), b""):
        log.write(chunk)
        log.flush()
        if console is not None:
            console.write(chunk)
            console.flush()
    log.close()


def node_reason() -> str:
    """Why the stages that need root and Go are skipped here, or ''."""
    if os.geteuid() != 0:
        return "not root"
    if not (shutil.which("go") or os.access("/usr/local/go/bin/go", os.X_OK)):
        return "no Go"
    return ""


def write_reports(runner: Runner, ok: bool, table: str) -> None:
    REPORTS.mkdir(exist_ok=True)
    if runner.tier == "periodic":
        data = {"ok": ok, "seconds": round(time.monotonic() - runner.t0),
                "targets": [{"target": r.stage.name, "release": r.stage.release or None, "seconds": round(r.seconds),
                             "failures": r.failures,
                             "result": r.status, **{k: r.counts.get(k) for k in ("passed", "failed", "skipped", "error")}}
                            for r in runner.results.values()]}
        (REPORTS / "periodic.json").write_text(json.dumps(data, indent=1))
        failed = [f"- [{r.stage.name}] {line}" for r in runner.results.values() for line in r.failures]
        (REPORTS / "periodic.md").write_text(table + "\n" + ("\nfailed tests:\n" + "\n".join(failed) + "\n" if failed else ""))
    else:
        (REPORTS / "ci-times.txt").write_text(table + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tier", nargs="?", choices=sorted(TIERS))
    ap.add_argument("--only", help="comma-separated stage names of the tier to run (and the stages they wait for)")
    ap.add_argument("--plan", help="a JSON list of stages (name, cmd, budget_s, background, after) to run instead")
    ap.add_argument("--watchdog", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.watchdog is not None:
        return watchdog(a.watchdog)
    if a.plan:
        tier, stages = "plan", [Stage(**{**s, "after": tuple(s.get("after", ()))}) for s in json.loads(Path(a.plan).read_text())]
    elif a.tier:
        tier, stages = a.tier, list(TIERS[a.tier])
    else:
        ap.error("name a tier (presubmit, periodic) or --plan")
    if a.only:
        want = set(a.only.split(","))
        unknown = want - {s.name for s in stages}
        if unknown:
            ap.error(f"no stage {sorted(unknown)} in {tier}: {[s.name for s in stages]}")
        want |= {x for s in stages if s.name in want for x in s.after}
        stages = [s for s in stages if s.name in want]
    box = Containment()
    print(f"== {tier}: stages run in " + (f"cgroup {box.cgroup}" if box.cgroup else
                                           f"their process groups ({box.why_not}: a process that calls setsid escapes)"), flush=True)
    build = tempfile.mkdtemp(prefix="dpc-ci-build-")
    REPORTS.mkdir(exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix=f"dpc-ci-{tier}-logs-"))
    for d in (build, str(logs)):
        box.remove_at_end(d)
    runner = Runner(tier, stages, box, logs)
    runner.env["DPC_CI_BUILD"] = build
    ok, stopped_by = False, 0

    def stop_signal(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_signal)
    try:
        ok = runner.run("" if tier == "plan" else node_reason())
    except KeyboardInterrupt as e:          # the table and the reports still say what ran, what did not
        why = str(e) or "SIGINT"
        stopped_by = 128 + getattr(signal, why, signal.SIGINT)
        runner.interrupt(why)
    finally:
        table = runner.table()
        print(f"\n== {tier}: stages\n{table}", flush=True)
        failed = [(r.stage.name, line) for r in runner.results.values() for line in r.failures]
        if failed:
            print(f"\n== {tier}: failed tests ({len(failed)})\n" + "\n".join(f"[{n}] {line}" for n, line in failed),
                  flush=True)
        write_reports(runner, ok, table)
        subprocess.run(["rm", "-rf", build, str(logs)])
        box.close()
    if stopped_by:
        print(f"== {tier}: INTERRUPTED", flush=True)
        return stopped_by
    print(f"== {tier}: {'PASSED' if ok else 'FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
