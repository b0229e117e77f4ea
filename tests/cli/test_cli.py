"""The command line's own behaviour: a closed pipe ends quietly, bad input is one line."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import capture_paths

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_analyze_json_into_a_closed_pipe_has_no_traceback():
    paths = [str(p) for p in capture_paths()]
    cmd = (f"{sys.executable} -m tfobs.cli analyze --format json {' '.join(paths)} | head -c 10;"
           " exit ${PIPESTATUS[0]}")
    proc = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.stdout.startswith("[")
    assert proc.returncode == 141



def test_unreadable_capture_is_one_line_with_exit_2(tmp_path):
    bad = tmp_path / "broken.xplane.pb"
    bad.write_bytes(b"\xff" * 64)
    proc = subprocess.run([sys.executable, "-m", "tfobs.cli", "analyze", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfobs analyze:"), proc.stderr
