"""TF's profiler writes no INFO lines into the job's log, window after window,
while the job's own log lines (TF's C++ INFO lines outside windows, Python warnings) still show."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # trains in a subprocess

ROOT = pathlib.Path(__file__).parents[2]
CUSTOM_LOOP = ROOT / "tests" / "support" / "custom_loop.py"
# The five lines TF's profiler logs per session (tsl profiler_session.cc, save_profile.cc).
PROFILER_LINES = re.compile(r"Profiler session (initializing|started|collecting data|tear down)"
                            r"|Collecting XSpace to repository")


def test_job_log_has_no_profiler_lines_across_several_windows(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0",  # the job logs TF's INFO lines
           "PYTHONPATH": str(ROOT), "TFOBS_CAPTURE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(CUSTOM_LOOP), "--windows", "3", "--seconds", "150", "--port", "-1",
         "--interval-steps", "10", "--window-steps", "3", "--overhead-budget", "0.5"],
        env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    captured = int(re.search(r"captured=(\d+)", proc.stdout).group(1))
    assert captured >= 3, proc.stdout  # several windows, each a profiler session
    log = proc.stdout + proc.stderr
    assert PROFILER_LINES.findall(log) == [], log[-3000:]
    # TF's C++ INFO lines outside the windows still reach the log: the level is not raised
    # for the whole process.
    assert re.search(r"^I\d{4} .*\.cc:\d+\]", proc.stderr, re.M), proc.stderr[-3000:]


def test_quiet_scope_restores_the_jobs_level() -> None:
    pytest.importorskip("tensorflow")
    from tfobs.capture import quiet_log

    assert quiet_log.prepare()  # TF 2.21 exports absl::SetMinLogLevel
    before = quiet_log._get_fn()
    with quiet_log.quiet():
        assert quiet_log._get_fn() >= quiet_log.WARNING
        with quiet_log.quiet():  # nested (training and capture threads overlap)
            assert quiet_log._get_fn() >= quiet_log.WARNING
        assert quiet_log._get_fn() >= quiet_log.WARNING
    assert quiet_log._get_fn() == before
