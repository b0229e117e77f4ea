"""Short soak (the long one is benchmarks/soak.py): 150 profile windows in one training
process, windows of 2 steps every 4 steps. After 50 windows of warm-up, memory stays put,
no thread is added, no capture file is left, and every due window is counted once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [pytest.mark.slow, pytest.mark.waits, pytest.mark.timeout(300)]  # runs a training job


def test_short_soak():
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "soak.py"), "--windows", "150",
         "--warmup", "50", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, proc.stderr[-3000:]
    result = json.loads(lines[-1])
    assert proc.returncode == 0, result
    assert result["windows"] >= 150
    assert result["checks"] == {"rss_growth_ok": True, "threads_constant": True,
                                "no_files_left": True, "outcomes_all_counted": True}
    assert result["rss_growth_mb"] <= 20.0
    assert result["files_left"] == 0
    assert not result["errors"] and not result["dropped"], result
    # Every profiled window was reduced and published: none failed or was lost.
    assert result["outcomes"]["captured"] == result["windows"], result["outcomes"]
