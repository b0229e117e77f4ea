"""tfobs speaks in the job's own log without the job setting logging up: one line at
`enable()` (where the page and metrics are, when the first window comes), one per window
(step time, verdict, the top advice, when the next window comes), nothing with
`TFOBS_QUIET=1`, and the job's own format, once, where the job configured logging. A notebook
cell that calls `enable()` again gets a line saying what happens and how to get a window now
(`capture_now()`). Real Keras training in subprocesses."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

# Trains in subprocesses.
pytestmark = [pytest.mark.slow, pytest.mark.waits, pytest.mark.timeout(300)]

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A script as a newcomer writes it: enable() and Keras fit, no logging set up. Windows at
# steps 10, 40, 80 (8 steps each) with a budget that lets each one through; 50 ms steps
# leave each window's reduction time to end before the next is due.
JOB = """
import sys, time
{setup}
import numpy as np
import tensorflow as tf
import tfobs

rt = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", first_window_step=10,
                  interval_steps=40, window_steps=8, overhead_budget=0.5, nvml=False)

class Slow(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)

model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64),
                             tf.keras.layers.Dense(10)])
model.compile(optimizer="sgd", loss="mse")
x = np.random.default_rng(0).standard_normal((100 * 16, 32)).astype("float32")
y = np.zeros((100 * 16, 10), "float32")
model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[Slow()])
rt.wait_idle(30)
print("job done, captured", rt.health.windows.get("captured", 0), flush=True)
"""


def _train(setup: str = "", env: dict[str, str] | None = None, job: str = JOB,
           tmp_path: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TFOBS_", "OTEL_"))}
    if tmp_path is not None:
        base["TFOBS_CAPTURE_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", job.format(setup=setup)], cwd=ROOT,
                          env={**base, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
                               **(env or {})},
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def _ours(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "tfobs:" in line]


STARTED = re.compile(
    r"tfobs: profiling this job; page (http://127\.0\.0\.1:(\d+)/) , metrics "
    r"http://127\.0\.0\.1:\2/metrics; first window at step 10, then every 40 steps \(up to 8 "
    r"steps, 50% budget\); TFOBS_QUIET=1 hides these lines")
WINDOW = re.compile(
    r"tfobs: window (\d+), steps (\d+)-(\d+)(?: \([^)]*\))?: step (\d+\.\d) ms, input-bound: "
    r"(highly|moderately|potentially|not|unknown) \((\d+)%\); (?:advice \w+: .+|no advice above "
    r"info); next window at step (\d+)(?: \(in about \d+ s\)| if the 50% budget allows \(in "
    r"about \d+ s of training\))?")


def test_enable_and_each_window_speak_in_the_job_log_with_no_logging_set_up(tmp_path) -> None:
    proc = _train(tmp_path=tmp_path)
    lines = _ours(proc.stderr)
    assert STARTED.fullmatch(lines[0]), lines
    windows = [m for m in map(WINDOW.fullmatch, lines[1:]) if m]
    captured = int(proc.stdout.split("captured")[-1])
    assert captured >= 2 and len(windows) == captured, lines
    first = windows[0]
    assert (first.group(1), first.group(2)) == ("0", "10")
    assert float(first.group(4)) > 0
    for m in windows:  # each says when the next one comes: a later multiple of 40 (the
        # next one, or past it where the window's reduction still ran then: a loaded machine)
        nxt = int(m.group(7))
        assert nxt % 40 == 0 and nxt >= (int(m.group(3)) // 40 + 1) * 40, m.group(0)


def test_quiet_leaves_the_job_log_alone(tmp_path) -> None:
    proc = _train(env={"TFOBS_QUIET": "1"}, tmp_path=tmp_path)
    # Profiling went on (one window is enough to show it: a loaded CI machine's short job
    # fit one, the 50 % budget spacing the next past its end).
    assert int(proc.stdout.split("captured")[-1]) >= 1
    assert _ours(proc.stderr) == [], proc.stderr[-3000:]


def test_a_job_that_set_logging_up_gets_each_line_once_in_its_own_format(tmp_path) -> None:
    setup = ("import logging\nlogging.basicConfig(level=logging.INFO, stream=sys.stderr, "
             "format='JOB %(levelname)s %(name)s | %(message)s')")
    proc = _train(setup=setup, tmp_path=tmp_path)
    lines = _ours(proc.stderr)
    starts = [line for line in lines if "profiling this job" in line]
    assert len(starts) == 1 and starts[0].startswith("JOB INFO tfobs.progress | tfobs: "), lines
    assert STARTED.fullmatch(starts[0].split(" | ", 1)[1])
    windows = [line for line in lines if "tfobs: window " in line]
    assert windows and all(w.startswith("JOB INFO tfobs.progress | ") for w in windows), lines


NOTEBOOK = """
import time
import numpy as np
import tensorflow as tf
import tfobs

def cell_enable(**options):  # the notebook cell, run again and again
    given = dict(metrics_port=0, metrics_bind="127.0.0.1", first_window_step=10,
                 interval_steps=30, window_steps=8, overhead_budget=0.1, nvml=False)
    given.update(options)
    return tfobs.enable(**given)

rt = cell_enable()
model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(10)])
model.compile(optimizer="sgd", loss="mse")
x = np.zeros((25 * 16, 32), "float32"); y = np.zeros((25 * 16, 10), "float32")
model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # steps 0-24: the window at step 10
rt.wait_idle(30)
print("same handle", cell_enable() is rt, flush=True)
print("same handle with new options", cell_enable(window_steps=4) is rt, flush=True)
first = tfobs.capture_now()  # a 10 % budget still rests after the first window
print("first capture_now", first, flush=True)
granted = first
if not first:  # the line said when to ask again
    time.sleep(rt.budget.not_before - rt.budget.clock() + 0.2)
    granted = tfobs.capture_now()
print("capture_now", granted, flush=True)
model.fit(x[:5 * 16], y[:5 * 16], batch_size=16, epochs=1, verbose=0)  # steps 25-29
rt.wait_idle(30)
print("captured", rt.health.windows.get("captured", 0), flush=True)
"""


def test_enable_again_in_a_notebook_says_what_happens_and_how_to_get_a_window(
        tmp_path) -> None:
    proc = _train(job=NOTEBOOK, tmp_path=tmp_path)
    assert "same handle True" in proc.stdout and "same handle with new options True" in \
        proc.stdout
    lines = _ours(proc.stderr)
    again = [line for line in lines if "already enabled" in line]
    budget = r"(?: \(the 10% budget allows one in about \d+ s\))?"
    assert len(again) == 2, lines
    assert re.fullmatch(
        r"tfobs: already enabled in this process \(1 window\(s\) captured, 25 steps seen\); "
        rf"the next window opens at step 30{budget}; for a window at the next step call "
        r"tfobs\.capture_now\(\)", again[0]), again
    assert re.fullmatch(  # new options: said as a warning, which quiet does not hide
        r"tfobs: already enabled in this process \(1 window\(s\) captured, 25 steps seen\); "
        r"the new options are ignored until tfobs\.disable\(\); the next window opens at "
        rf"step 30{budget}; for a window at the next step call tfobs\.capture_now\(\)",
        again[1]), again
    if "first capture_now False" in proc.stdout:  # refused: the line says why and when
        refusal = [line for line in lines if line.startswith("tfobs: capture_now(): ")]
        assert len(refusal) == 1 and re.fullmatch(
            r"tfobs: capture_now\(\): the 10% overhead budget allows the next window in about "
            r"\d+ s; ask again then \(overhead_budget / TFOBS_OVERHEAD_BUDGET sets the "
            r"budget\)", refusal[0]), lines
    # Following the lines: capture_now() gives a window in the next five steps.
    assert "\ncapture_now True" in proc.stdout and "captured 2" in proc.stdout, proc.stdout


def test_the_next_window_named_is_the_plans_own() -> None:
    # A window that failed to open has no last step (-1): the line named step 5 (the first
    # window's) long after it passed. The plan's own next start is named, also where the
    # step numbers started over.
    from types import SimpleNamespace

    from tfobs.capture.schedule import Policy
    from tfobs.runtime import progress

    policy = Policy(interval_steps=20, window_steps=5, first_window_step=5, window_max_s=10.0,
                    overhead_budget=0.01)
    budget = SimpleNamespace(not_before=0.0, clock=lambda: 1.0)
    runtime = SimpleNamespace(policy=policy, budget=budget, next_scheduled_step=lambda: 60)
    assert progress.next_window(runtime, -1) == "next window at step 60"
    assert progress.next_window(runtime, 44) == "next window at step 60"
    unplanned = SimpleNamespace(policy=policy, budget=budget, next_scheduled_step=lambda: -1)
    assert progress.next_window(unplanned, 44) == "next window at step 60"
