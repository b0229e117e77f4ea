"""The command line's own behaviour: a closed pipe ends quietly, bad input is one line."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import CAPTURES, capture_paths

LONG_WINDOW = CAPTURES / "generated__tf2.21cpu__tiny_steps_long.xplane.pb"
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


_TEARDOWN_PROBE = """
import atexit, runpy, sys
atexit.register(lambda: print("teardown ran", file=sys.stderr, flush=True))
sys.argv = ["tfobs", *sys.argv[1:]]
runpy.run_module("tfobs.cli", run_name="__main__")
"""


def _console(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _TEARDOWN_PROBE, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_analyze_ends_without_the_teardown_and_its_whole_answer_arrives():
    """`tfobs analyze` skips the interpreter's teardown (os._exit) after flushing: the long
    window's JSON (4,000 steps), over a megabyte through a pipe, arrives whole and parses."""
    import json

    proc = _console("analyze", "--format", "json", str(LONG_WINDOW))
    assert proc.returncode == 0, proc.stderr
    assert "teardown ran" not in proc.stderr
    assert len(proc.stdout) > 1_000_000
    assert json.loads(proc.stdout)["steps"]["count"] > 0
    # A bad capture still says its one line before the quick exit.
    bad = _console("analyze", os.devnull)
    assert bad.returncode == 2 and "teardown ran" not in bad.stderr
    assert bad.stderr.startswith("tfobs analyze:"), bad.stderr


def test_commands_that_leave_work_behind_keep_the_teardown():
    """A command not in QUICK_EXIT (here: `--version`, no command) exits as Python does, so
    the atexit work of a command like `demo` (exporters' last flush) still runs."""
    proc = _console("--version")
    assert proc.returncode == 0 and proc.stdout.strip()
    assert "teardown ran" in proc.stderr
