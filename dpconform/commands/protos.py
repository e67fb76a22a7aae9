"""Regenerate the checked-in Python stubs from the newest supported Kubernetes release.

The .proto files are not committed (third-party source): they come from the Go
module `k8s.io/kubelet` of the newest release in the version table (fixtures/kube_versions.py: v1.N.P is
k8s.io/kubelet v0.N.P), fetched and checksum-verified by `go mod download`. The APIs only grow between
releases (fields and services are added, none removed), so the newest release's stubs speak to each
supported kubelet. Run `python -m dpconform.commands.protos` (or `make protos`) after the table
changes; tests/test_kubeletapi_stubs.py regenerates into a temp dir and fails on any difference.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from dpconform import kubeletapi
from dpconform.fixtures import kube_versions

KUBELET_MODULE = "k8s.io/kubelet"
KUBELET_API_VERSION = "v0." + kube_versions.NEWEST.tag.split(".", 1)[1]     # Kubernetes v1.N.P = kubelet v0.N.P

# (path inside the Go module, package dir under kubeletapi/)
PROTOS = [
    ("pkg/apis/deviceplugin/v1beta1/api.proto", "deviceplugin/v1beta1"),
    ("pkg/apis/podresources/v1/api.proto", "podresources/v1"),
    ("pkg/apis/pluginregistration/v1/api.proto", "pluginregistration/v1"),
    ("pkg/apis/dra/v1/api.proto", "dra/v1"),
    ("pkg/apis/dra/v1beta1/api.proto", "dra/v1beta1"),
    ("pkg/apis/dra-health/v1alpha1/api.proto", "drahealth/v1alpha1"),
    ("pkg/apis/dra-health/v1/api.proto", "drahealth/v1"),
]
# The DRA protos import gogo.proto for Go code-generation options only (names, marshalers). Python cannot
# import a module under "github.com/...", and the options change nothing on the wire: they are removed
# from the copy protoc reads (package names, so the gRPC method paths, stay as the kubelet's).
_GOGO = re.compile(r'^import "github\.com/gogo/protobuf/gogoproto/gogo\.proto";\n|^option \(gogoproto\.[^;]*;\n'
                   r'| ?\[\(gogoproto\.[a-z_]+\) = "[^"]*"\]', re.M)


def without_gogo(text: str) -> str:
    return _GOGO.sub("", text)
# the folder that holds kubeletapi/: the repository root in a checkout, dpconform/ installed
STUBS_ROOT = pathlib.Path(kubeletapi.__file__).resolve().parent.parent


class GenerateError(RuntimeError):
    pass


def module_dir() -> pathlib.Path:
    """Download (or find in Go's module cache) the pinned k8s.io/kubelet module."""
    if shutil.which("go") is None:
        raise GenerateError("`go` is not on PATH: it is needed to fetch the pinned kubelet .proto "
                            f"files ({KUBELET_MODULE}@{KUBELET_API_VERSION}); install Go and retry")
    with tempfile.TemporaryDirectory() as tmp:  # outside any module, so `go` needs no go.mod
        proc = subprocess.run(["go", "mod", "download", "-json", f"{KUBELET_MODULE}@{KUBELET_API_VERSION}"],
                              cwd=tmp, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise GenerateError(f"go mod download {KUBELET_MODULE}@{KUBELET_API_VERSION} failed: "
                            f"{(proc.stdout + proc.stderr).strip()}")
    return pathlib.Path(json.loads(proc.stdout)["Dir"])


def generate(out_root: pathlib.Path) -> list[pathlib.Path]:
    """Write the stubs under out_root/kubeletapi/...; return the generated files.

    protoc names each module by its .proto path, so the protos sit under dpconform/kubeletapi/ in the
    include tree: the stubs then import `dpconform.kubeletapi...`, the name they have installed."""
    from grpc_tools import protoc  # imported late: only this tool needs grpcio-tools

    src = module_dir()
    written: list[pathlib.Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        include, gen = pathlib.Path(tmp) / "include", pathlib.Path(tmp) / "gen"
        gen.mkdir()
        for rel, pkg in PROTOS:
            dest = include / "dpconform" / "kubeletapi" / pkg / "api.proto"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(without_gogo((src / rel).read_text()))
            rc = protoc.main(["protoc", f"-I{include}", f"--python_out={gen}",
                              f"--pyi_out={gen}", f"--grpc_python_out={gen}",
                              str(dest.relative_to(include))])
            if rc != 0:
                raise GenerateError(f"protoc failed on {rel} (exit {rc})")
            outdir = out_root / "kubeletapi" / pkg
            outdir.mkdir(parents=True, exist_ok=True)
            for f in sorted((gen / "dpconform" / "kubeletapi" / pkg).glob("api_pb2*")):
                written.append(pathlib.Path(shutil.copy(f, outdir / f.name)))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=STUBS_ROOT,
                    help="root to write kubeletapi/... under (default: the source tree)")
    args = ap.parse_args(argv)
    try:
        files = generate(args.out)
    except GenerateError as exc:
        print(f"dpconform.commands.protos: {exc}", file=sys.stderr)
        return 1
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
