"""The training process imports only what it runs: with the default options a TensorFlow
job that calls `tfobs.enable()` and trains through a window never loads the reduction
(`tfobs.analysis`, `tfobs.xspace`, the compiled `_wire`): the reduce helper process loads
it and reduces the window. With `reduce_in="thread"` the job reduces in-process and loads
it, which shows the check sees the reduction where it is loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REDUCTION = ("tfobs.analysis", "tfobs.xspace")

_JOB = """
import json, os, sys
import tensorflow as tf
import tfobs

REDUCTION = ("tfobs.analysis", "tfobs.xspace")

def loaded():
    return sorted(m for m in sys.modules if m == REDUCTION[0] or m == REDUCTION[1]
                  or m.startswith((REDUCTION[0] + ".", REDUCTION[1] + ".")))

rt = tfobs.enable(metrics_port=0, first_window_step=3, window_steps=4, {options})
at_enable = loaded()
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4)])
model.compile(optimizer="sgd", loss="mse")
x = tf.random.normal((160, 8))
y = tf.random.normal((160, 4))
model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # 20 steps: the window at steps 3-6
rt.train_end()
idle = rt.wait_idle(120.0)
worker = rt._reduce.worker
summary = rt.last_summary
print(json.dumps({{
    "at_enable": at_enable, "at_end": loaded(), "idle": idle,
    "windows": rt.health.windows, "errors": rt.health.errors,
    "helper_starts": worker.starts if worker is not None else 0,
    "helper_pid": worker.pid if worker is not None else None, "job_pid": os.getpid(),
    "steps": summary.steps.count if summary is not None else 0,
}}))
tfobs.disable()
"""


def run_job(options: str) -> dict[str, Any]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
           "TFOBS_QUIET": "1"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_JOB.format(options=options))],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_default_job_never_loads_the_reduction_and_the_helper_reduces_its_window() -> None:
    out = run_job("")
    assert out["at_enable"] == [] and out["at_end"] == [], out
    assert out["idle"] and out["windows"].get("captured", 0) >= 1, out
    assert not [stage for stage in out["errors"] if stage.startswith("reduce")], out
    assert out["steps"] >= 1, out  # the window's summary, reduced ...
    assert out["helper_starts"] >= 1 and out["helper_pid"] not in (None, out["job_pid"]), out


def test_in_process_reduction_loads_it_in_the_job() -> None:
    out = run_job('reduce_in="thread"')
    assert out["windows"].get("captured", 0) >= 1, out
    assert "tfobs.analysis.pipeline" in out["at_end"], out
    assert "tfobs.xspace.reader" in out["at_end"], out
    assert out["helper_starts"] == 0, out
