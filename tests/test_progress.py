"""Progress lines of long steps (dpconform.fixtures.progress) reach the terminal past pytest's output capture:
the kind backend builds its images and creates its cluster in a session fixture, where a plain print was held
back (and shown only if a test failed) or dropped, and --keep-cluster's line saying how to reach the kept
cluster was never seen."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_line_said_in_a_fixture_is_seen_while_capture_is_on(tmp_path):
    (tmp_path / "test_p.py").write_text(textwrap.dedent('''
        import sys
        import pytest
        from dpconform.fixtures import progress

        @pytest.fixture(scope="session")
        def slow():
            progress.say("dpconform: building something (about a minute)")
            print("held back by capture", file=sys.stderr)
            yield
            progress.say("dpconform: kept something: remove it with: x")

        def test_x(slow):
            pass
    '''))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "dpconform.fixtures.pytest_plugin",
                           "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path / "test_p.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "dpconform: building something (about a minute)" in out
    assert "dpconform: kept something: remove it with: x" in out
    assert "held back by capture" not in out
