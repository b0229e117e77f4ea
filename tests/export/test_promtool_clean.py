"""`promtool check metrics` (Prometheus's own linter) is clean on the live
exposition of a training job and on the replay of every test capture."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from tfobs.analysis.pipeline import analyze
from tfobs.export import replay

pytestmark = pytest.mark.slow  # starts servers and a training process

ROOT = pathlib.Path(__file__).parents[2]
CAPTURES = sorted((ROOT / "tests" / "data" / "captures").glob("*.xplane.pb"))
CUSTOM_LOOP = ROOT / "tests" / "support" / "custom_loop.py"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="Debian prometheus not installed")


def promtool_check(text: str) -> str:
    """promtool's complaints (empty when clean); it exits non-zero on any."""
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    return (proc.stdout + proc.stderr).strip() if proc.returncode else ""


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:  # text format 0.0.4, as Prometheus
        return r.read().decode()


@needs_promtool
def test_promtool_is_clean_on_the_replay_of_every_capture() -> None:
    assert len(CAPTURES) >= 5
    summaries = [analyze(str(p)) for p in CAPTURES]
    server = replay.start(summaries, port=0, bind="127.0.0.1")
    try:
        text = fetch(server.url)
    finally:
        server.shutdown(2.0)
    assert "tfobs_kernel_launch_delay_seconds{" in text  # the GPU captures' device series
    assert 'stat="p95"' in text and "quantile=" not in text
    assert promtool_check(text) == ""
    # The check can fail: the old label is what promtool flagged.
    bad = text.replace('stat="p95"', 'quantile="p95"')
    assert "quantile" in promtool_check(bad)


@needs_promtool
def test_promtool_is_clean_on_a_live_training_jobs_metrics(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TFOBS_CAPTURE_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, str(CUSTOM_LOOP), "--windows", "2", "--seconds", "120", "--port", "0",
         "--linger", "30",
         "--interval-steps", "10", "--window-steps", "3", "--overhead-budget", "0.5"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        url = ""
        deadline = time.monotonic() + 180
        for line in proc.stdout:  # type: ignore[union-attr]
            m = re.search(r"metrics at (\S+)", line)
            url = m.group(1) if m else url
            if "custom loop done" in line or time.monotonic() > deadline:
                break
        assert url, "the job printed no metrics URL"
        text = fetch(url)
    finally:
        proc.kill()
        proc.wait(10)
    assert "tfobs_step_duration_seconds_bucket{" in text and "tfobs_windows_total{" in text
    assert promtool_check(text) == ""
