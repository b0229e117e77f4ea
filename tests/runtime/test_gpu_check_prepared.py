"""The prepared GPU check (tools/gpu_window_end_check.py) runs end to end, here on CPU JAX in
its --smoke sizes, so the script a session with a lent GPU runs in one device call works:
every part reports, the new window end captures windows on the training thread, and the
driver writes its verdict."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("jax")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_gpu_check_runs_every_part_on_cpu(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in env.items() if not k.startswith("TFOBS_")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_window_end_check.py"), "--smoke",
         "--out", str(tmp_path), "--old-runs", "1", "--new-runs", "1"],
        capture_output=True, text=True, timeout=540, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_window_end.json").read_text())
    verdict = results["verdict"]
    assert verdict["new_end_died"] == 0 and verdict["new_end_windows"] >= 4, verdict
    assert verdict["old_end_runs"] == 1 and results["old_end"][0]["windows"] == 2
    for run in results["new_end"]:
        assert run["ends"] == {"step_boundary": run["windows"]["captured"]}, run
    cost = results["cost"]
    assert {b["tfobs"] for b in cost["blocks"]} == {True, False}
    assert cost["windows"] and all(w["end_at"] == "step_boundary" for w in cost["windows"]
                                   if w["outcome"] == "captured")
    assert isinstance(verdict["cost_ratio"], float)
    # GPM: no NVIDIA driver here, so the part says why and the run goes on.
    gpm = results["gpm"]
    assert gpm["died"] is False and gpm["status"].startswith("GPM unavailable: "), gpm
    assert verdict["gpm"] == gpm["status"]
    assert [p["workload"] for p in gpm["phases"]] == ["bf16_matmul", "fp32_highest",
                                                       "elementwise"]
    assert all(p["steps"] > 0 and p["scrapes"] > 0 for p in gpm["phases"]), gpm["phases"]
    assert gpm["windows"].get("captured", 0) >= 3
    # two training threads: windows captured; a stop under the other thread's step only as
    # the bounded fallback (`steps_open`, when the threads' steps never pause on a loaded
    # machine), and then counted
    (threads,) = results["threads"]
    assert threads["died"] is False and threads["windows"].get("captured", 0) >= 2, threads
    assert threads["stops"] >= 2 and threads["stops_uncounted"] == 0, threads
    assert threads["stops_under_other_step"] <= threads["ends"].get("steps_open", 0), threads
    assert verdict["threads_died"] == 0 and verdict["threads_stops_uncounted"] == 0
