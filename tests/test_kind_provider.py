"""The kind provider (fixtures/cluster/kind.py) against recording stand-ins for kind, docker and go.

kind cannot run on this project's machines (their Docker refuses privileged containers), so these
tests put fake `kind`, `docker` and `go` executables first on PATH. Each records its argv (one JSON
line per call) and behaves like the real one as far as the provider can tell: `kind create` writes
the kubeconfig and, as a node's kubelet would, a kubelet.sock in every host dir the config mounts on
/var/lib/kubelet/device-plugins; `docker exec NODE systemctl restart kubelet` re-creates that socket;
`go build -o X` writes a kind stand-in to X. Environment switches make them fail the way the real
ones do. The tests assert the exact commands, their order, the one-line errors, and that the
provider's temp root is gone afterwards.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from dpconform.fixtures import kube_versions
from dpconform.fixtures.cluster import kind as kindmod
from dpconform.fixtures.cluster.kind import KindCluster, KindError, fill_placeholders
from dpconform.fixtures.procs import alive
from dpconform.fixtures.waiting import wait_until

CONFIGS = kindmod.CONFIG_DIR
NAME = "dpc-test"

FAKE = r'''#!{python}
"""Stand-in for kind / docker / go (by the name it is called under): records argv, acts plausibly."""
import json, os, socket, sys, time
import yaml

prog, args = os.path.basename(sys.argv[0]), sys.argv[1:]
env = os.environ
state_file = env["FAKE_STATE"]


def log(**extra):
    with open(env["FAKE_LOG"], "a") as f:
        f.write(json.dumps(dict(prog=prog, argv=args, pid=os.getpid(), **extra)) + "\n")


def opt(name):
    return args[args.index(name) + 1]


def make_socket(d):
    """A unix socket file named kubelet.sock in d, as the kubelet leaves it (bound relative: short address)."""
    here = os.getcwd()
    os.chdir(d)
    try:
        if os.path.lexists("kubelet.sock"):
            os.unlink("kubelet.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind("kubelet.sock")
        s.close()
    finally:
        os.chdir(here)


if prog == "docker":
    log()
    if args == ["info"]:
        if env.get("FAKE_DOCKER_INFO_FAIL"):
            print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                  "Is the docker daemon running?", file=sys.stderr)
            sys.exit(1)
        print("Server Version: 29.0.0")
        sys.exit(0)
    if args[:1] == ["exec"] and args[2:] == ["systemctl", "restart", "kubelet"]:
        mounts = json.load(open(state_file))
        if args[1] not in mounts:
            print(f"Error response from daemon: No such container: {args[1]}", file=sys.stderr)
            sys.exit(1)
        if not env.get("FAKE_DOCKER_NO_RECREATE"):
            time.sleep(0.05)
            make_socket(mounts[args[1]])
        sys.exit(0)
    print(f"fake docker: unexpected {args}", file=sys.stderr)
    sys.exit(2)

if prog == "go":
    log(cwd=os.getcwd(), cgo=env.get("CGO_ENABLED"))
    out = opt("-o")
    with open(__file__) as src, open(out, "w") as dst:
        dst.write(src.read())
    os.chmod(out, 0o755)
    sys.exit(0)

# kind (also when built by the fake go under another path: it is named kind there too)
if args == ["version"]:
    log()
    print("kind v0.33.0 go1.26.8 linux/amd64")
    sys.exit(0)
if args == ["get", "clusters"]:
    log()
    names = env.get("FAKE_KIND_CLUSTERS", "").split()
    if not names:
        print("No kind clusters found.", file=sys.stderr)
    for n in names:
        print(n)
    sys.exit(0)
if args[:2] == ["create", "cluster"]:
    config = open(opt("--config")).read()
    log(config=config)
    if env.get("FAKE_KIND_HANG"):
        time.sleep(300)
    if env.get("FAKE_KIND_CREATE_FAIL"):
        name = opt("--name")
        sys.stderr.write(
            f'Creating cluster "{name}" ...\n'
            f" \u2713 Ensuring node image ({opt('--image') if '--image' in args else 'my/node:1'}) \U0001f5bc\n"
            " \u2717 Preparing nodes \U0001f4e6\n"
            f'Deleted nodes: ["{name}-control-plane" "{name}-worker"]\n'
            "ERROR: failed to create cluster: command \"docker run --privileged ...\" failed with error: exit status 125\n"
            "Command Output: docker: Error response from daemon: privileged mode is incompatible with user namespaces.\n")
        sys.exit(1)
    name, cfg = opt("--name"), yaml.safe_load(config)
    mounts, counts = {}, {}
    for node in cfg["nodes"]:
        role = node.get("role", "control-plane")
        counts[role] = counts.get(role, 0) + 1
        node_name = f"{name}-{role}" + (str(counts[role]) if counts[role] > 1 else "")
        for m in node.get("extraMounts") or []:
            if m["containerPath"] == "/var/lib/kubelet/device-plugins":
                assert os.path.isdir(m["hostPath"]), m["hostPath"]
                mounts[node_name] = m["hostPath"]
                make_socket(m["hostPath"])        # the node's kubelet starts and creates it
    json.dump(mounts, open(state_file, "w"))
    with open(opt("--kubeconfig"), "w") as f:
        f.write(f"apiVersion: v1\nkind: Config\ncurrent-context: kind-{name}\n")
    print(f'Creating cluster "{name}" ...', file=sys.stderr)
    sys.exit(0)
if args[:2] == ["load", "image-archive"]:
    log()
    sys.exit(0 if os.path.isfile(args[2]) else 1)
if args[:2] == ["delete", "cluster"]:
    log()
    print(f'Deleting cluster "{opt("--name")}" ...', file=sys.stderr)
    sys.exit(0)
log()
print(f"fake kind: unexpected {args}", file=sys.stderr)
sys.exit(2)
'''


class Fakes:
    def __init__(self, root: Path, monkeypatch, progs=("kind", "docker")):
        self.bin = root / "fakebin"
        self.bin.mkdir()
        self.log = root / "calls.jsonl"
        self.tmp = root / "tmp"          # the provider's $TMPDIR: must be empty after every test
        self.tmp.mkdir()
        for prog in progs:
            self.add(prog)
        monkeypatch.setenv("PATH", str(self.bin))      # nothing else: a real kind/docker/go is never reached
        monkeypatch.setenv("FAKE_LOG", str(self.log))
        monkeypatch.setenv("FAKE_STATE", str(root / "state.json"))
        monkeypatch.setattr(tempfile, "tempdir", str(self.tmp))
        monkeypatch.setattr(kindmod, "BIN_DIR", root / "repo-bin")    # never the checkout's bin/

    def add(self, prog: str) -> None:
        path = self.bin / prog
        path.write_text(FAKE.replace("{python}", sys.executable))
        path.chmod(0o755)

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def argvs(self) -> list[list[str]]:
        return [[c["prog"], *c["argv"]] for c in self.calls()]

    def assert_clean(self) -> None:
        assert os.listdir(self.tmp) == [], f"left in the provider's temp dir: {os.listdir(self.tmp)}"


@pytest.fixture(autouse=True)
def _progress_to_capsys(monkeypatch):
    """The provider's progress lines (dpconform.fixtures.progress) where capsys reads them: in a run they go
    past pytest's capture to the terminal (tests/test_progress.py)."""
    import contextlib
    from dpconform.fixtures import progress
    monkeypatch.setattr(progress, "_suspend", contextlib.nullcontext)


@pytest.fixture
def fakes(tmp_path, monkeypatch, stand_in_busybox) -> Fakes:
    """Fake kind and docker; the workload image is written with a stand-in busybox (no host package)."""
    return Fakes(tmp_path, monkeypatch)


def start_calls(root: Path) -> list[list[str]]:
    return [["docker", "info"],
            ["kind", "version"],
            ["kind", "get", "clusters"],
            ["kind", "create", "cluster", "--name", NAME, "--config", str(root / "kind-config.yaml"),
             "--kubeconfig", str(root / "kubeconfig"), "--wait", "120s"]]


def delete_call(root: Path) -> list[str]:
    return ["kind", "delete", "cluster", "--name", NAME, "--kubeconfig", str(root / "kubeconfig")]


def one_line(e: KindError) -> str:
    msg = str(e)
    assert "\n" not in msg and msg.strip() == msg and msg, repr(msg)
    return msg


def test_start_load_restart_stop_calls_in_order(fakes, tmp_path):
    archive = tmp_path / "plugin.tar"
    archive.write_bytes(b"not really a tar; the stand-in only checks it exists")
    c = KindCluster(CONFIGS / "default.yaml", NAME)
    c.start()
    root = Path(c.root)
    assert root.parent == fakes.tmp
    assert c.kubeconfig == str(root / "kubeconfig") and Path(c.kubeconfig).is_file()
    assert c.node_name == f"{NAME}-worker"
    assert c.plugin_dir == str(root / "device-plugins" / "worker")
    assert c.nodes == {f"{NAME}-worker": root / "device-plugins" / "worker"}
    assert fakes.argvs() == start_calls(root)
    # kind got the filled config: the worker's mount is plugin_dir, no placeholder left
    config = fakes.calls()[-1]["config"]
    assert c.plugin_dir in host_paths(config) and "{device_plugin_dir}" not in config
    # and every node mounts the shared dir at the same path (the host-run plugin's device files)
    assert all({"hostPath": str(c.shared_dir), "containerPath": str(c.shared_dir)} in n["extraMounts"]
               for n in yaml.safe_load(config)["nodes"])
    sock = Path(c.plugin_dir) / "kubelet.sock"
    first = sock.lstat()
    assert stat.S_ISSOCK(first.st_mode)

    c.load_image(archive)
    c.restart_kubelet()
    again = sock.lstat()
    assert stat.S_ISSOCK(again.st_mode) and (again.st_ino, again.st_ctime_ns) != (first.st_ino, first.st_ctime_ns)
    c.stop()
    assert fakes.argvs() == start_calls(root) + [
        ["kind", "load", "image-archive", str(archive), "--name", NAME],
        ["docker", "exec", f"{NAME}-worker", "systemctl", "restart", "kubelet"],
        delete_call(root)]
    assert not root.exists()
    fakes.assert_clean()
    c.stop()                                  # twice is harmless: no second delete
    assert len(fakes.calls()) == 7


@pytest.mark.parametrize("spec", [r.name for r in kube_versions.RELEASES])
def test_the_node_image_is_the_selected_releases(fakes, tmp_path, spec):
    """The configs name no image: kind gets --image with the node image of the release --kube-version
    selects (the version table's); a config of the user's own that names its images keeps them."""
    with KindCluster(CONFIGS / "default.yaml", NAME, image=kube_versions.release(spec).kind_image) as c:
        root = Path(c.root)
    create = start_calls(root)[-1] + ["--image", kube_versions.release(spec).kind_image]
    assert fakes.argvs()[3] == create
    own = tmp_path / "own.yaml"
    own.write_text((CONFIGS / "default.yaml").read_text().replace("- role: worker", "- role: worker\n  image: my/node:1"))
    with KindCluster(own, NAME, image=kube_versions.release(spec).kind_image):
        pass
    assert "--image" not in fakes.argvs()[-2]
    fakes.assert_clean()


def test_keep_cluster_skips_the_delete(fakes, capsys):
    with KindCluster(CONFIGS / "default.yaml", NAME, keep=True) as c:
        root = Path(c.root)
    assert fakes.argvs() == start_calls(root)     # no `kind delete`
    assert f"kept kind cluster {NAME!r}" in capsys.readouterr().err
    fakes.assert_clean()


def test_multi_node_gives_each_worker_its_own_dir(fakes):
    with KindCluster(CONFIGS / "multi-node.yaml", NAME) as c:
        root = Path(c.root)
        assert c.nodes == {f"{NAME}-worker": root / "device-plugins" / "worker",
                           f"{NAME}-worker2": root / "device-plugins" / "worker2"}
        assert c.node_name == f"{NAME}-worker"
        c.restart_kubelet(f"{NAME}-worker2")
        with pytest.raises(KindError, match="control-plane' has no host-mounted"):
            c.restart_kubelet(f"{NAME}-control-plane")
    assert fakes.argvs()[-2:] == [["docker", "exec", f"{NAME}-worker2", "systemctl", "restart", "kubelet"],
                                  delete_call(root)]
    fakes.assert_clean()


def host_paths(config: str) -> set[str]:
    """The hostPath of every extraMounts entry of a kind config as kind got it."""
    return {m["hostPath"] for n in yaml.safe_load(config).get("nodes") or [] for m in n.get("extraMounts") or []}


def test_cdi_config_mounts_the_cdi_dir(fakes):
    with KindCluster(CONFIGS / "cdi.yaml", NAME) as c:
        config = fakes.calls()[-1]["config"]
        assert c.cdi_dir in host_paths(config) and Path(c.cdi_dir).is_dir()
        assert "enable_cdi = true" in config
    fakes.assert_clean()


def test_missing_docker_is_one_line_naming_what_to_install(tmp_path, monkeypatch):
    fakes = Fakes(tmp_path, monkeypatch, progs=("kind",))
    with pytest.raises(KindError) as e:
        KindCluster(CONFIGS / "default.yaml", NAME).start()
    msg = one_line(e.value)
    assert "docker" in msg and "not on PATH" in msg and "install Docker" in msg
    assert fakes.calls() == []                     # nothing was created, nothing to delete
    fakes.assert_clean()


def test_docker_that_does_not_answer(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_INFO_FAIL", "1")
    with pytest.raises(KindError) as e:
        KindCluster(CONFIGS / "default.yaml", NAME).start()
    msg = one_line(e.value)
    assert msg.startswith("docker info failed (exit 1): Cannot connect to the Docker daemon")
    assert "start the Docker daemon" in msg
    assert fakes.argvs() == [["docker", "info"]]
    fakes.assert_clean()


def test_failing_kind_create_surfaces_kinds_stderr(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_KIND_CREATE_FAIL", "1")
    c = KindCluster(CONFIGS / "default.yaml", NAME)
    with pytest.raises(KindError) as e:
        c.start()
    msg = one_line(e.value)
    assert msg.startswith(f"kind create cluster --name {NAME} failed (exit 1): ERROR: failed to create cluster:")
    assert "Command Output: docker: Error response from daemon: privileged mode is incompatible" in msg
    assert "refuses privileged containers" in msg                  # the fix
    assert "Preparing nodes" in e.value.stderr                      # kind's whole output rides along
    assert "Preparing nodes" in e.value.details()
    calls = fakes.argvs()
    root = Path(calls[3][calls[3].index("--config") + 1]).parent
    assert calls == start_calls(root) + [delete_call(root)]         # what kind may have left is deleted
    assert c.root is None
    fakes.assert_clean()


def test_existing_cluster_of_that_name_is_left_alone(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_KIND_CLUSTERS", f"other {NAME}")
    with pytest.raises(KindError) as e:
        KindCluster(CONFIGS / "default.yaml", NAME).start()
    assert f"kind delete cluster --name {NAME}" in one_line(e.value)
    assert [a[:2] for a in fakes.argvs()] == [["docker", "info"], ["kind", "version"], ["kind", "get"]]
    fakes.assert_clean()


def test_restart_waits_for_a_new_kubelet_sock(fakes, monkeypatch):
    with KindCluster(CONFIGS / "default.yaml", NAME) as c:
        monkeypatch.setenv("FAKE_DOCKER_NO_RECREATE", "1")          # the old socket stays: not "re-created"
        t0 = time.monotonic()
        with pytest.raises(KindError) as e:
            c.restart_kubelet(timeout=0.5)
        assert 0.5 <= time.monotonic() - t0 < 5
        msg = one_line(e.value)
        assert "did not re-create" in msg and "kubelet.sock" in msg and "journalctl -u kubelet" in msg
    fakes.assert_clean()


def test_hanging_kind_is_killed_at_its_timeout(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_KIND_HANG", "1")
    monkeypatch.setattr(kindmod, "CREATE_TIMEOUT", 1.0)
    with pytest.raises(KindError) as e:
        KindCluster(CONFIGS / "default.yaml", NAME).start()
    assert "did not finish within 1s (killed)" in one_line(e.value)
    create = next(c for c in fakes.calls() if c["argv"][:2] == ["create", "cluster"])
    with pytest.raises(ProcessLookupError):
        os.kill(create["pid"], 0)
    assert fakes.argvs()[-1][:3] == ["kind", "delete", "cluster"]
    fakes.assert_clean()


def test_kind_is_built_from_the_wrapper_module_when_not_on_path(tmp_path, monkeypatch):
    fakes = Fakes(tmp_path, monkeypatch, progs=("docker", "go"))
    with KindCluster(CONFIGS / "default.yaml", NAME) as c:
        built = kindmod.BIN_DIR / "kind"
        assert c.kind_bin == str(built)
    go = fakes.calls()[0]
    assert [go["prog"], *go["argv"]] == ["go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w",
                                         "-o", str(built), "sigs.k8s.io/kind"]
    assert go["cwd"] == str(kindmod.KIND_MODULE) and go["cgo"] == "0"
    assert fakes.argvs()[1:3] == [["docker", "info"], ["kind", "version"]]   # then the built one is used
    fakes.assert_clean()


def test_no_kind_and_no_go(tmp_path, monkeypatch):
    fakes = Fakes(tmp_path, monkeypatch, progs=("docker",))
    monkeypatch.setattr(kindmod, "_go", lambda: None)
    with pytest.raises(KindError) as e:
        KindCluster(CONFIGS / "default.yaml", NAME).start()
    msg = one_line(e.value)
    assert "no `kind` on PATH and no Go" in msg and "v0.33.0" in msg and "make bin/kind" in msg
    assert fakes.calls() == []
    fakes.assert_clean()


def test_bad_names_configs_and_placeholders(fakes, tmp_path):
    with pytest.raises(KindError, match="lower-case letters"):
        KindCluster(CONFIGS / "default.yaml", "Bad_Name")
    with pytest.raises(KindError, match="kind-configs/default.yaml"):
        KindCluster(tmp_path / "nope.yaml", NAME).start()
    with pytest.raises(KindError, match=r"unknown placeholder \{plugin_dir\}"):
        fill_placeholders('hostPath: "{plugin_dir}/worker"', {"device_plugin_dir": "/x"})
    assert fill_placeholders("# {anything} in a comment\na: 1", {}) == "# {anything} in a comment\na: 1"
    with pytest.raises(KindError, match="TMPDIR"):
        fill_placeholders("a: {device_plugin_dir}", {"device_plugin_dir": '/tmp/a"b'})
    real = tmp_path / "real.yaml"                    # the host's own kubelet dir: refused before kind runs
    real.write_text((CONFIGS / "default.yaml").read_text().replace('"{device_plugin_dir}/worker"',
                                                                   "/var/lib/kubelet/device-plugins"))
    with pytest.raises(KindError, match="private dir"):
        KindCluster(real, NAME).start()
    assert not any(a[1] == "create" for a in fakes.argvs())
    fakes.assert_clean()


def test_ctrl_c_during_create_kills_kind_and_cleans_up(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_KIND_HANG", "1")
    c = KindCluster(CONFIGS / "default.yaml", NAME)

    def ctrl_c_once_create_runs(*_):            # as a Ctrl-C would, once `kind create` is under way
        if any(x["argv"][:2] == ["create", "cluster"] for x in fakes.calls()):
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, ctrl_c_once_create_runs)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)
        with pytest.raises(KeyboardInterrupt):
            c.start()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    create = next(x for x in fakes.calls() if x["argv"][:2] == ["create", "cluster"])
    # gone, as a settled state: killed, it may be a zombie a moment until whoever parents it reaps it (make
    # test on 4 workers once found it still there right after the interrupt)
    assert wait_until(lambda: not alive(create["pid"]), 10, "kind create to be gone", raise_on_timeout=False), \
        f"kind create (pid {create['pid']}) still running after the interrupt"
    assert fakes.argvs()[-1][:3] == ["kind", "delete", "cluster"]
    fakes.assert_clean()


# -- the provider as `--backend kind` sees it (dpconform.fixtures.cluster.kind.KindNode) ---------------------------
def _kind_cfg(**kw):
    from dpconform.fixtures.config import SuiteConfig
    return SuiteConfig(backend="kind", backend_options=kw)


def test_kind_node_gives_the_backend_its_node(fakes):
    """--backend kind: one cluster from the default config; the plugin dir and PodResources socket are the
    worker's mounts; a kubelet restart is a docker exec; stop deletes the cluster and the temp root."""
    from dpconform.fixtures.cluster.kind import KindNode
    n = KindNode.started(_kind_cfg())
    try:
        root, name = Path(n.cluster.root), n.cluster.name
        assert n.cluster.config_path == CONFIGS / "default.yaml"
        assert n.node_name == f"{name}-worker" and n.kubeconfig == str(root / "kubeconfig")
        assert n.plugin_dir == str(root / "device-plugins" / "worker")
        assert n.pod_resources_socket == str(root / "pod-resources" / "worker" / "kubelet.sock")
        config = (root / "kind-config.yaml").read_text()
        assert f"{root}/pod-resources/worker" in host_paths(config)
        n.restart_kubelet()
        assert ["docker", "exec", f"{name}-worker", "systemctl", "restart", "kubelet"] in fakes.argvs()
    finally:
        n.stop()
    assert fakes.argvs()[-1][:4] == ["kind", "delete", "cluster", "--name"] and not n.teardown_errors
    fakes.assert_clean()


def test_keep_cluster_leaves_it_running(fakes, tmp_path, capsys):
    from dpconform.fixtures.cluster.kind import KindNode
    cfg_file = tmp_path / "mine.yaml"
    cfg_file.write_text((CONFIGS / "multi-node.yaml").read_text())
    n = KindNode.started(_kind_cfg(kind_config=str(cfg_file), keep_cluster=True))
    name = n.cluster.name
    assert n.cluster.config_path == cfg_file
    n.stop()
    assert not any(a[:3] == ["kind", "delete", "cluster"] for a in fakes.argvs())
    assert f"kept kind cluster {name!r}" in capsys.readouterr().err


def test_kind_backend_failure_is_one_line_and_leaves_nothing(fakes, monkeypatch):
    from dpconform.fixtures.backends.base import BackendError
    from dpconform.fixtures.cluster.kind import KindNode
    monkeypatch.setenv("FAKE_KIND_CREATE_FAIL", "1")
    with pytest.raises(BackendError) as e:
        KindNode.started(_kind_cfg())
    msg = str(e.value)
    assert msg.startswith("--backend kind: kind create cluster") and "privileged" in msg and "\n" not in msg
    fakes.assert_clean()


def test_kind_backend_without_docker_is_one_error_line(tmp_path, monkeypatch):
    from dpconform.fixtures.backends.base import BackendError
    from dpconform.fixtures.cluster.kind import KindNode
    fakes = Fakes(tmp_path, monkeypatch, progs=("kind",))
    with pytest.raises(BackendError) as e:
        KindNode.started(_kind_cfg())
    msg = str(e.value)
    assert msg.startswith("--backend kind: kind needs docker") and "\n" not in msg, msg
    fakes.assert_clean()
