"""The fake GPU's image (fixtures/node/python_image.py) holds what the plugin loads: its files, unpacked
into an empty dir, run the plugin under chroot with nothing of this host's filesystem, and the archive
is an OCI image the project's reader names. The image on a cluster: tests/test_kind_offline.py."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from dpconform.fixtures.node import images, python_image
from tests.support.conformance_runner import ROOT


def test_the_image_files_run_the_fake_gpu_under_chroot(tmp_path):
    if os.geteuid() != 0 or not shutil.which("chroot"):
        pytest.skip("needs root and chroot")
    root = tmp_path / "root"
    files = python_image.python_image_files()
    for name, src in files.items():
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        shutil.copymode(src, dest)
    python = os.path.realpath(sys.executable)
    proc = subprocess.run([shutil.which("chroot"), str(root), python, "-c",
                           "import runpy, sys; sys.argv = ['dpconform', 'fakegpu', '--help']; "
                           "import grpc, yaml, dpconform.plugin_under_test.fakegpu.plugin; "
                           "runpy.run_module('dpconform', run_name='__main__')"],
                          env={"PYTHONPATH": "/app", "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--dev-dir" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert not any(n.startswith(("root/.cache", "tmp/")) for n in files)
    assert not [n for n in files if "/python3.11/test/" in n or "/tkinter/" in n], "left-out parts came in"


def test_the_archive_is_an_image_named_for_the_manifest(tmp_path, stand_in_busybox):
    archive = tmp_path / "fakegpu.tar"
    python_image.write_fakegpu_image(str(archive))
    assert images.image_ref(str(archive)) == python_image.FAKEGPU_IMAGE
    manifest = (ROOT / "plugin_under_test" / "deploy" / "fakegpu-daemonset.yaml").read_text()
    assert f"image: {python_image.FAKEGPU_IMAGE}" in manifest
