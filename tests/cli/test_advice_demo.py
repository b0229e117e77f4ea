"""`tfobs demo` live: the default (healthy) run prints no warning or critical advice; the
`--input-bound` run names its slowed stage (the Python `map`) and the fix, window by window.
Real training subprocesses (the healthy one shared: tests/conftest.py's `healthy_demo`)."""

from __future__ import annotations

import pathlib

import pytest

from tests.support.demo_run import DemoRun, run_demo

pytestmark = pytest.mark.slow

ARGS = ("--port", "-1", "--interval-steps", "20", "--steps-per-window", "8")


def test_healthy_demo_prints_no_warning_or_critical_advice(healthy_demo: DemoRun) -> None:
    assert healthy_demo.returncode == 0, healthy_demo.stderr[-2000:]
    lines = healthy_demo.window_lines()
    assert lines, healthy_demo.stdout[-2000:]
    for line in lines:
        assert "| advice:" not in line, line  # the line lists warning and critical rules only


@pytest.mark.waits
def test_input_bound_demo_names_the_slowed_stage_and_its_fix(tmp_path: pathlib.Path) -> None:
    # 150 ms of Python per batch outweighs the step on any host: a 20 ms sleep read
    # "highly" where steps took 12 ms, "not" where the same steps took 50 ms (prefetch hid it).
    run = run_demo(tmp_path, "--input-bound", "--sleep-ms", "150", "--seconds", "15", args=ARGS)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lines = run.window_lines()
    assert lines, run.stdout[-2000:]
    for line in lines:
        assert "input-bound: highly" in line, line
        advice = line.split("| advice: ", 1)[1]
        assert advice.startswith("input_bound, tfdata_py_function, tfdata_map_serial")
        assert "::Map" in advice  # the stage the demo slows
        assert "Fix: rewrite the mapped function with TensorFlow ops" in advice
