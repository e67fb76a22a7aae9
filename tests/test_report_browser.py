"""The HTML report in a real browser: headless Chromium (Debian's package; `make node-deps` installs it)
loads the file, its DOM holds the failing check with expected, got, fix and the folded plugin output,
and it renders to a page-sized screenshot. Marked node: it needs that system package."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.node

DEFECTIVE = f"{sys.executable} -m dpconform fakegpu --plugin-dir {{plugin_dir}} --defect accept-unknown-id"
CHROMIUM = ("chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars")


def browser() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("no chromium on PATH: `make node-deps` installs it (apt-get install chromium)")
    return exe


def test_html_report_renders_in_chromium(tmp_path):
    html = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "dpconform", "run", "-q", "--plugin-cmd", DEFECTIVE,
                           "--checks", "ALC-04,ALC-01", "--html", str(html)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 1 and html.is_file(), proc.stdout[-3000:]
    exe = browser()
    dom = subprocess.run([exe, *CHROMIUM[1:], "--dump-dom", html.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    section = dom.stdout.split('id="ALC-04"', 1)[1].split("</section>", 1)[0]
    for needle in ("<th>expected</th>", "a gRPC error for unknown ID", "<th>got</th>", "<th>fix</th>",
                   "reject IDs you did not advertise", "<details><summary>plugin output</summary>",
                   "fake GPUs dpconform.io/fakegpu: 4 devices"):
        assert needle in section, needle
    shot = tmp_path / "report.png"
    proc = subprocess.run([exe, *CHROMIUM[1:], f"--screenshot={shot}", "--window-size=1200,1600", html.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000, shot.stat().st_size
